/* reftrain's collectives in the stepping loop: the gradient sync that ends
 * a step (--sync, --buckets; shm: no MPI at all, shmsync.h), the stray
 * collective after each hand-off (--stray-collective) and the loss's
 * all-reduce after the sync (--loss-allreduce), which are not syncs. */
#ifndef REFTRAIN_SYNC_H
#define REFTRAIN_SYNC_H

#include <mpi.h>
#include <stdint.h>

#include "options.h"
#include "shmsync.h"

typedef struct rt_sync_state {
  rt_sync_t mode;
  int32_t buckets;
  MPI_Request *req; /* [buckets] for the iallreduce modes */
  MPI_Comm stray;   /* MPI_COMM_NULL: this rank makes no stray call */
  int stray_size;
  rt_shm_t *shm;    /* --sync shm */
  bool loss;        /* --loss-allreduce */
} rt_sync_state_t;

/* Collective over MPI_COMM_WORLD (the half communicator is split from it).
 * -1 when out of memory, -2 on every rank when --sync shm cannot be set up
 * (one rank has said why). */
int rt_sync_init(rt_sync_state_t *s, const rt_opts_t *o);
void rt_sync_free(rt_sync_state_t *s);

/* Sums grad[0..n) over MPI_COMM_WORLD in place, by the chosen mode. */
void rt_sync_grad(rt_sync_state_t *s, float *grad, int64_t n);

/* --loss-allreduce: the sum of loss over MPI_COMM_WORLD; without it,
 * loss. */
double rt_sync_loss(const rt_sync_state_t *s, double loss);

/* The stray collective, where this rank takes part in one; aborts when its
 * result is wrong (something between the trainer and MPI changed it). */
void rt_sync_stray(const rt_sync_state_t *s);

#endif
