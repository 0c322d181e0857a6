/* The comm seam over MPI: a private duplicate of the group's communicator,
 * byte counts converted to MPI's ints. The balancer checks beforehand that
 * every count fits (all ranks see the same totals). */
#include "comm_mpi.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "dpshim/dpshim.h"

/* Room for every message of one alltoallv_parts. */
struct dpshim__comm_request {
  int n, failed; /* posted; a post failed */
  MPI_Request req[];
};

typedef struct impl {
  MPI_Comm comm;
  int *ints; /* [2 * size]: allgatherv's counts and displacements */
  dpshim__comm_request_t *parts; /* the blocking alltoallv_parts' */
  MPI_Request *piece_requests; /* [pieces]: exchange's */
  size_t pieces;
} impl_t;

/* counts -> ints[0..size), prefix sums -> ints[size..2 size); 0 on overflow. */
static int to_ints(const size_t *counts, int size, int *ints) {
  size_t at = 0;
  for (int r = 0; r < size; r++) {
    if (counts[r] > INT_MAX || at > INT_MAX) return 0;
    ints[r] = (int)counts[r];
    ints[size + r] = (int)at;
    at += counts[r];
  }
  return 1;
}

static int mpi_rc(int rc) { return rc == MPI_SUCCESS ? 0 : DPSHIM_EMPI; }

static int mpi_allgather(dpshim__comm_t *c, const void *send, size_t bytes,
                         void *recv) {
  impl_t *m = c->impl;
  if (bytes > INT_MAX) return DPSHIM_EINVAL;
  return mpi_rc(PMPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes,
                               MPI_BYTE, m->comm));
}

static int mpi_allgatherv(dpshim__comm_t *c, const void *send, void *recv,
                          const size_t *counts) {
  impl_t *m = c->impl;
  if (!to_ints(counts, c->size, m->ints)) return DPSHIM_EINVAL;
  return mpi_rc(PMPI_Allgatherv(send, m->ints[c->rank], MPI_BYTE, recv,
                                m->ints, m->ints + c->size, MPI_BYTE,
                                m->comm));
}

/* Whether every count fits MPI's int (checked before anything is posted). */
static int parts_fit(const dpshim__comm_t *c, int parts, const size_t *counts) {
  for (size_t i = 0; i < (size_t)parts * (size_t)c->size; i++)
    if (counts[i] > INT_MAX) return 0;
  return 1;
}

/* Posts one message per part and rank with bytes to move (tag: the part),
 * from or into buf[k] at its running offset at[k]; *n counts the requests
 * posted. 0, or -1 when a post failed. */
static int post_parts(dpshim__comm_t *c, int parts, void *const *buf,
                      const size_t *counts, int sending, MPI_Request *req,
                      int *n) {
  impl_t *m = c->impl;
  size_t at[DPSHIM__COMM_PARTS_MAX] = {0};
  for (int r = 0; r < c->size; r++)
    for (int k = 0; k < parts; k++) {
      size_t b = counts[(size_t)k * (size_t)c->size + (size_t)r];
      char *p = (char *)buf[k] + at[k];
      at[k] += b;
      if (!b || r == c->rank) continue;
      int rc = sending ? PMPI_Isend(p, (int)b, MPI_BYTE, r, k, m->comm, &req[*n])
                       : PMPI_Irecv(p, (int)b, MPI_BYTE, r, k, m->comm, &req[*n]);
      if (rc != MPI_SUCCESS) return -1;
      (*n)++;
    }
  return 0;
}

/* This rank's own parts: a copy from send[k] to recv[k]. */
static void copy_own_parts(dpshim__comm_t *c, int parts,
                           const void *const *send, const size_t *sendcounts,
                           void *const *recv, const size_t *recvcounts) {
  for (int k = 0; k < parts; k++) {
    const size_t *s = sendcounts + (size_t)k * (size_t)c->size,
                 *r = recvcounts + (size_t)k * (size_t)c->size;
    size_t from = 0, to = 0;
    for (int q = 0; q < c->rank; q++) from += s[q], to += r[q];
    if (s[c->rank])
      memcpy((char *)recv[k] + to, (const char *)send[k] + from, s[c->rank]);
  }
}

static dpshim__comm_request_t *mpi_request_new(dpshim__comm_t *c) {
  size_t n = 2 * DPSHIM__COMM_PARTS_MAX * (size_t)c->size;
  dpshim__comm_request_t *q = malloc(sizeof *q + n * sizeof(MPI_Request));
  if (q) q->n = q->failed = 0;
  return q;
}

/* Point to point: the ViT plan's exchanges are sparse, and each part stays
 * where the caller wants it (no packing, no datatypes to build). */
static int mpi_start(dpshim__comm_t *c, dpshim__comm_request_t *q, int parts,
                     const void *const *send, const size_t *sendcounts,
                     void *const *recv, const size_t *recvcounts) {
  q->n = q->failed = 0;
  if (parts < 1 || parts > DPSHIM__COMM_PARTS_MAX ||
      !parts_fit(c, parts, sendcounts) || !parts_fit(c, parts, recvcounts))
    return DPSHIM_EINVAL;
  q->failed = post_parts(c, parts, recv, recvcounts, 0, q->req, &q->n) ||
              post_parts(c, parts, (void *const *)send, sendcounts, 1, q->req,
                         &q->n);
  if (!q->failed)
    copy_own_parts(c, parts, send, sendcounts, recv, recvcounts);
  return q->failed ? DPSHIM_EMPI : 0;
}

/* What was posted completes before its buffers can go. */
static int mpi_finish(dpshim__comm_t *c, dpshim__comm_request_t *q) {
  (void)c;
  int rc = mpi_rc(PMPI_Waitall(q->n, q->req, MPI_STATUSES_IGNORE));
  rc = q->failed ? DPSHIM_EMPI : rc;
  q->n = q->failed = 0;
  return rc;
}

static void mpi_request_free(dpshim__comm_t *c, dpshim__comm_request_t *q) {
  if (!q) return;
  mpi_finish(c, q);
  free(q);
}

static int mpi_alltoallv_parts(dpshim__comm_t *c, int parts,
                               const void *const *send,
                               const size_t *sendcounts, void *const *recv,
                               const size_t *recvcounts) {
  impl_t *m = c->impl;
  int rc = mpi_start(c, m->parts, parts, send, sendcounts, recv, recvcounts);
  int done = mpi_finish(c, m->parts);
  return rc < 0 ? rc : done;
}

static int mpi_reserve(dpshim__comm_t *c, size_t n) {
  impl_t *m = c->impl;
  if (n <= m->pieces) return 0;
  size_t want = n + n / 2; /* room for the next hand-offs' to grow */
  MPI_Request *q = realloc(m->piece_requests, want * sizeof *q);
  if (!q) return DPSHIM_ENOMEM;
  m->piece_requests = q;
  m->pieces = want;
  return 0;
}

static int pieces_fit(const dpshim__comm_piece_t *p, size_t n) {
  for (size_t k = 0; k < n; k++)
    if (p[k].bytes > INT_MAX) return 0;
  return 1;
}

/* Posts the pieces from *n on; 0, or -1 when a post failed. */
static int post_pieces(impl_t *m, const dpshim__comm_piece_t *p, size_t np,
                       int sending, int *n) {
  for (size_t k = 0; k < np; k++, (*n)++) {
    int rc = sending ? PMPI_Isend(p[k].buf, (int)p[k].bytes, MPI_BYTE,
                                  p[k].peer, p[k].tag, m->comm,
                                  &m->piece_requests[*n])
                     : PMPI_Irecv(p[k].buf, (int)p[k].bytes, MPI_BYTE,
                                  p[k].peer, p[k].tag, m->comm,
                                  &m->piece_requests[*n]);
    if (rc != MPI_SUCCESS) return -1;
  }
  return 0;
}

/* The receives first, so that no send waits on one not yet posted. */
static int mpi_exchange(dpshim__comm_t *c, const dpshim__comm_piece_t *send,
                        size_t nsend, const dpshim__comm_piece_t *recv,
                        size_t nrecv) {
  impl_t *m = c->impl;
  if (nsend + nrecv > m->pieces || !pieces_fit(send, nsend) ||
      !pieces_fit(recv, nrecv))
    return DPSHIM_EINVAL;
  int n = 0;
  int failed = post_pieces(m, recv, nrecv, 0, &n) ||
               post_pieces(m, send, nsend, 1, &n);
  /* what was posted completes before its buffers can go */
  int rc = mpi_rc(PMPI_Waitall(n, m->piece_requests, MPI_STATUSES_IGNORE));
  return failed ? DPSHIM_EMPI : rc;
}

static int mpi_gather(dpshim__comm_t *c, const void *send, size_t bytes,
                      void *recv) {
  impl_t *m = c->impl;
  if (bytes > INT_MAX) return DPSHIM_EINVAL;
  return mpi_rc(PMPI_Gather(send, (int)bytes, MPI_BYTE, recv, (int)bytes,
                            MPI_BYTE, 0, m->comm));
}

static int mpi_bcast(dpshim__comm_t *c, void *buf, size_t bytes) {
  impl_t *m = c->impl;
  if (bytes > INT_MAX) return DPSHIM_EINVAL;
  return mpi_rc(PMPI_Bcast(buf, (int)bytes, MPI_BYTE, 0, m->comm));
}

static int mpi_max(dpshim__comm_t *c, int64_t *v, int n) {
  impl_t *m = c->impl;
  return mpi_rc(PMPI_Allreduce(MPI_IN_PLACE, v, n, MPI_INT64_T, MPI_MAX,
                               m->comm));
}

static const dpshim__comm_ops_t ops = {.allgather = mpi_allgather,
                                       .allgatherv = mpi_allgatherv,
                                       .alltoallv_parts = mpi_alltoallv_parts,
                                       .request_new = mpi_request_new,
                                       .start = mpi_start,
                                       .finish = mpi_finish,
                                       .request_free = mpi_request_free,
                                       .reserve = mpi_reserve,
                                       .exchange = mpi_exchange,
                                       .gather = mpi_gather,
                                       .bcast = mpi_bcast,
                                       .max = mpi_max};

int dpshim__comm_mpi_open(MPI_Comm parent, int color, dpshim__comm_t *c) {
  impl_t *m = calloc(1, sizeof *m);
  if (!m) return DPSHIM_ENOMEM;
  int rank = 0;
  PMPI_Comm_rank(parent, &rank);
  if (PMPI_Comm_split(parent, color, rank, &m->comm) != MPI_SUCCESS) {
    free(m);
    return DPSHIM_EMPI;
  }
  /* The shim's collectives report failures instead of aborting the job:
   * every rank then returns the error and the trainer runs on. */
  PMPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
  PMPI_Comm_rank(MPI_COMM_WORLD, &c->id);
  PMPI_Comm_rank(m->comm, &c->rank);
  PMPI_Comm_size(m->comm, &c->size);
  m->ints = calloc(2 * (size_t)c->size, sizeof *m->ints);
  m->parts = mpi_request_new(c);
  if (!m->ints || !m->parts) {
    PMPI_Comm_free(&m->comm);
    free(m->ints);
    free(m->parts);
    free(m);
    return DPSHIM_ENOMEM;
  }
  c->ops = &ops;
  c->impl = m;
  return 0;
}

void dpshim__comm_mpi_close(dpshim__comm_t *c) {
  impl_t *m = c->impl;
  if (!m) return;
  PMPI_Comm_free(&m->comm);
  free(m->ints);
  free(m->parts);
  free(m->piece_requests);
  free(m);
  c->impl = NULL;
}

MPI_Comm dpshim__comm_mpi_handle(const dpshim__comm_t *c) {
  const impl_t *m = c->impl;
  return m ? m->comm : MPI_COMM_NULL;
}
