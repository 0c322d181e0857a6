/* reftrain --sync shm: the gradient sum through POSIX shared memory and a
 * process-shared pthread barrier. The stepping loop makes no MPI call, as a
 * trainer whose sync runs over NCCL or Gloo makes none that a balancer
 * watching MPI could see. MPI is used at set-up and close only. */
#ifndef REFTRAIN_SHMSYNC_H
#define REFTRAIN_SHMSYNC_H

#include <stdint.h>

typedef struct rt_shm rt_shm_t;

/* Collective over MPI_COMM_WORLD: maps one segment for n floats a rank.
 * Every rank must be on one host (MPI_COMM_TYPE_SHARED). NULL on every
 * rank when any rank failed; the lowest such rank has said why, in one
 * line on stderr. The segment's name is unlinked before this returns: it
 * vanishes with the last mapping, whatever way the processes end. */
rt_shm_t *rt_shm_open(int64_t n);

/* Sums grad[0..n) over every rank in place. Each element is added in rank
 * order 0, 1, ..., so the result does not depend on timing. Blocks until
 * every rank has called it; no MPI call. */
void rt_shm_sum(rt_shm_t *s, float *grad);

/* Unmaps this rank's mapping; no MPI call, and the other ranks' mappings
 * stay valid. NULL is accepted. */
void rt_shm_close(rt_shm_t *s);

#endif
