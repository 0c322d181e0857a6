/* reftrain's collectives in the stepping loop: the gradient sync that ends
 * a step (--sync, --buckets) and the stray collective after each hand-off
 * (--stray-collective), which is not a sync. */
#ifndef REFTRAIN_SYNC_H
#define REFTRAIN_SYNC_H

#include <mpi.h>
#include <stdint.h>

#include "options.h"

typedef struct rt_sync_state {
  rt_sync_t mode;
  int32_t buckets;
  MPI_Request *req; /* [buckets] for the iallreduce modes */
  MPI_Comm stray;   /* MPI_COMM_NULL: this rank makes no stray call */
  int stray_size;
} rt_sync_state_t;

/* Collective over MPI_COMM_WORLD (the half communicator is split from it).
 * -1 when out of memory. */
int rt_sync_init(rt_sync_state_t *s, const rt_opts_t *o);
void rt_sync_free(rt_sync_state_t *s);

/* Sums grad[0..n) over MPI_COMM_WORLD in place, by the chosen mode. */
void rt_sync_grad(rt_sync_state_t *s, float *grad, int64_t n);

/* The stray collective, where this rank takes part in one; aborts when its
 * result is wrong (something between the trainer and MPI changed it). */
void rt_sync_stray(const rt_sync_state_t *s);

#endif
