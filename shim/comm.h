/* The seam between the shim's logic and MPI.
 *
 * Every collective the shim's core starts goes through these operations over
 * one group: a data-parallel group for the balancing traffic, the world for
 * the warm-up fit and the summary. comm_mpi.c implements them on private
 * communicators; the unit tests put threads behind them. Counts are in
 * bytes and displacements are the prefix sums of the counts. Each returns 0
 * or a negative DPSHIM_E* code.
 */
#ifndef DPSHIM_SHIM_COMM_H
#define DPSHIM_SHIM_COMM_H

#include <stddef.h>
#include <stdint.h>

/* The most buffers one alltoallv_parts carries. */
#define DPSHIM__COMM_PARTS_MAX 4
/* The largest tag of a piece (MPI guarantees tags up to 32767). */
#define DPSHIM__COMM_TAG_MAX 32767

typedef struct dpshim__comm dpshim__comm_t;
/* One alltoallv_parts started and not yet finished (the implementation's). */
typedef struct dpshim__comm_request dpshim__comm_request_t;

/* One contiguous run of bytes of a point-to-point exchange. */
typedef struct dpshim__comm_piece {
  void *buf;    /* read from when sent */
  size_t bytes; /* 1 .. INT_MAX */
  int32_t peer; /* a rank of the group other than this one */
  int32_t tag;  /* 0 .. DPSHIM__COMM_TAG_MAX */
} dpshim__comm_piece_t;

typedef struct dpshim__comm_ops {
  /* Every rank sends `bytes`; recv holds size * bytes, in rank order. */
  int (*allgather)(dpshim__comm_t *c, const void *send, size_t bytes,
                   void *recv);
  /* Rank r sends counts[r] bytes; recv holds them all in rank order. */
  int (*allgatherv)(dpshim__comm_t *c, const void *send, void *recv,
                    const size_t *counts);
  /* Several buffers in one exchange, as `parts` alltoallvs would move
   * them (parts <= DPSHIM__COMM_PARTS_MAX): sendcounts[k * size + r] bytes
   * of send[k] go to rank r, after send[k]'s bytes for the ranks before r;
   * recvcounts[k * size + r] bytes from rank r land in recv[k] likewise.
   * Only the ranks with bytes to move meet. */
  int (*alltoallv_parts)(dpshim__comm_t *c, int parts,
                         const void *const *send, const size_t *sendcounts,
                         void *const *recv, const size_t *recvcounts);
  /* alltoallv_parts in two halves, for an exchange that runs behind the
   * caller's work: `start` posts it on `req` and returns, `finish` waits
   * for all of it (the buffers stay untouched until then); a start that
   * fails still needs its finish. A request comes from request_new, made
   * before the agreement that precedes the exchange (a start allocates
   * nothing: a failure there is this rank's alone), holds one started
   * exchange at a time, and request_free finishes it first. */
  dpshim__comm_request_t *(*request_new)(dpshim__comm_t *c);
  int (*start)(dpshim__comm_t *c, dpshim__comm_request_t *req, int parts,
               const void *const *send, const size_t *sendcounts,
               void *const *recv, const size_t *recvcounts);
  int (*finish)(dpshim__comm_t *c, dpshim__comm_request_t *req);
  void (*request_free)(dpshim__comm_t *c, dpshim__comm_request_t *req);
  /* Room for exchanges of up to n pieces, sent and received together, so
   * that `exchange` allocates nothing: a failure is this rank's alone, to
   * be agreed before any rank exchanges. */
  int (*reserve)(dpshim__comm_t *c, size_t n);
  /* Point to point: each send piece goes to its peer, each receive piece
   * comes from its own; between two ranks the pieces under one tag match
   * in the order listed, and their sizes agree. Every rank of the group
   * calls it, with nothing to move too. */
  int (*exchange)(dpshim__comm_t *c, const dpshim__comm_piece_t *send,
                  size_t nsend, const dpshim__comm_piece_t *recv,
                  size_t nrecv);
  /* Every rank sends `bytes`; rank 0's recv holds size * bytes (others'
   * recv is not touched and may be NULL). */
  int (*gather)(dpshim__comm_t *c, const void *send, size_t bytes,
                void *recv);
  /* Rank 0's `bytes` at buf to every rank. */
  int (*bcast)(dpshim__comm_t *c, void *buf, size_t bytes);
  /* v[k] = the maximum of v[k] over the ranks, for k < n. */
  int (*max)(dpshim__comm_t *c, int64_t *v, int n);
} dpshim__comm_ops_t;

struct dpshim__comm {
  const dpshim__comm_ops_t *ops;
  void *impl; /* the implementation's own state */
  int rank, size;
  int id; /* this rank's name in messages: its world rank */
};

#endif
