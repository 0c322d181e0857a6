/* The seam between the shim's logic and MPI.
 *
 * Every byte the balancer sends goes through these three collectives over
 * one data-parallel group. comm_mpi.c implements them on a private duplicate
 * of the group's communicator; the unit tests put threads behind them.
 * Counts are in bytes and displacements are the prefix sums of the counts.
 * Each returns 0 or a negative DPSHIM_E* code.
 */
#ifndef DPSHIM_SHIM_COMM_H
#define DPSHIM_SHIM_COMM_H

#include <stddef.h>

typedef struct dpshim__comm dpshim__comm_t;

typedef struct dpshim__comm_ops {
  /* Every rank sends `bytes`; recv holds size * bytes, in rank order. */
  int (*allgather)(dpshim__comm_t *c, const void *send, size_t bytes,
                   void *recv);
  /* Rank r sends counts[r] bytes; recv holds them all in rank order. */
  int (*allgatherv)(dpshim__comm_t *c, const void *send, void *recv,
                    const size_t *counts);
  /* sendcounts[r] bytes go to rank r; recvcounts[r] come from rank r. */
  int (*alltoallv)(dpshim__comm_t *c, const void *send,
                   const size_t *sendcounts, void *recv,
                   const size_t *recvcounts);
} dpshim__comm_ops_t;

struct dpshim__comm {
  const dpshim__comm_ops_t *ops;
  void *impl; /* the implementation's own state */
  int rank, size;
};

#endif
