/* stepids: whether any (step, sample id) pair was consumed twice across
 * the ranks of a trainer: the exactly-once check the reference trainers
 * share. Tools-internal. */
#ifndef DPSHIM_TOOLS_STEPIDS_H
#define DPSHIM_TOOLS_STEPIDS_H

#include <mpi.h>
#include <stdint.h>

/* pairs: [2 * n] (step, id), this rank's. Collective over comm; on its
 * rank 0 the pairs seen more than once over all ranks, elsewhere 0; -1
 * when rank 0 ran out of memory. */
int64_t stepids_duplicates(const uint64_t *pairs, int64_t n, MPI_Comm comm);

#endif
