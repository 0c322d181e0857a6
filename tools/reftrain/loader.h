/* reftrain's loader thread (--loader-thread, --prefetch): packload_next()
 * runs in a second thread, as in a pin-memory loop, so that a preloaded
 * balancer communicates from a thread other than MPI_Init's. */
#ifndef REFTRAIN_LOADER_H
#define REFTRAIN_LOADER_H

#include <stdbool.h>
#include <stdint.h>

#include "packload.h"

typedef struct rt_loader rt_loader_t;

/* Starts the thread. It calls packload_next() exactly `total` times: every
 * rank then makes the same number of hand-offs, which a balancer needs
 * (each is collective there), and none is left running at the end. With
 * prefetch 0 it fetches a batch only when the trainer asks for it; with N
 * it keeps up to N fetched batches waiting. NULL when out of memory. */
rt_loader_t *rt_loader_start(packload_t *pl, int64_t total, int32_t prefetch);

/* The next batch: a copy that stays valid until the next call. produced
 * gets the loader's packload_produced() counts taken right after that batch
 * was packed (the counts at the time of the call would include the batches
 * fetched ahead). NULL when the thread ran out of memory. */
const packload_batch_t *rt_loader_next(rt_loader_t *lt, int64_t produced[2]);

/* Joins the thread (it has fetched all its batches by the time the trainer
 * has taken them) and frees everything. NULL is accepted. */
void rt_loader_stop(rt_loader_t *lt);

#endif
