/* reftrain's set-up errors, agreed: every rank learns whether any rank
 * failed, and only the lowest failing one says why, so a bad file or a
 * missing resource gives one line, not one per rank. */
#ifndef REFTRAIN_AGREE_H
#define REFTRAIN_AGREE_H

/* Collective over MPI_COMM_WORLD: the lowest world rank whose `failed` is
 * set, or -1. */
int rt_lowest_failed(int failed);

#endif
