/* The collectives that can mark a step's gradient sync (DPSHIM_SYNC_OPS),
 * blocking and non-blocking. Each forwards to PMPI. A call counts as the
 * sync only on the main thread and on a communicator that spans this
 * rank's whole DP group: a collective on MPI_COMM_SELF, or on a part of the
 * group, is the trainer's business and ends no step. Whether a
 * communicator spans the group is decided locally, from its group, once:
 * the answer is cached on the communicator as an attribute. */
#include <stdint.h>
#include <stdlib.h>

#include "shim.h"

static int spans(const dpshim__state_t *st, MPI_Comm comm) {
  int inter = 0, n = 0, all = 1;
  MPI_Group g;
  if (PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter) return 0;
  if (PMPI_Comm_group(comm, &g) != MPI_SUCCESS) return 0;
  PMPI_Group_size(st->dp_ranks, &n);
  int *in = malloc(2 * (size_t)n * sizeof *in);
  if (in) {
    for (int r = 0; r < n; r++) in[r] = r;
    PMPI_Group_translate_ranks(st->dp_ranks, n, in, g, in + n);
    for (int r = 0; r < n; r++) all &= in[n + r] != MPI_UNDEFINED;
  }
  PMPI_Group_free(&g);
  free(in);
  return in && all;
}

/* The attribute's delete callback: a freed communicator's handle may be
 * reused, so it leaves the one-entry cache. */
int dpshim__forget_comm(MPI_Comm comm, int key, void *value, void *extra) {
  (void)key, (void)value, (void)extra;
  if (comm == dpshim__state.span_comm) dpshim__state.span_comm = MPI_COMM_NULL;
  return MPI_SUCCESS;
}

/* The last communicator asked about is answered without a lookup: a
 * trainer's sync uses the same one every step. */
static int spans_dp_group(dpshim__state_t *st, MPI_Comm comm) {
  void *value = NULL;
  int found = 0, yes;
  if (comm == MPI_COMM_NULL) return 0;
  if (comm == st->span_comm) return st->span_yes;
  if (PMPI_Comm_get_attr(comm, st->span_key, &value, &found) ==
          MPI_SUCCESS && found) {
    yes = (intptr_t)value == 2;
  } else {
    yes = spans(st, comm);
    PMPI_Comm_set_attr(comm, st->span_key, (void *)(intptr_t)(1 + yes));
  }
  st->span_comm = comm;
  st->span_yes = yes;
  return yes;
}

int dpshim__is_sync(unsigned op, MPI_Comm comm) {
  dpshim__state_t *st = &dpshim__state;
  return st->active && (st->cfg.sync_ops & op) &&
         pthread_equal(pthread_self(), st->init_thread) &&
         spans_dp_group(st, comm);
}

/* ---- blocking: the call is the wait -------------------------------------------- */

/* With no step open (balancing off, a benchmark's loop, the trainer's
 * collectives outside a step) the call cannot begin a sync: straight to
 * PMPI, a tail call that costs a load and a branch. */
#define SYNC(BIT, COMM, CALL)                                                 \
  do {                                                                        \
    if (!atomic_load_explicit(&dpshim__state.core.open_hint,                  \
                              memory_order_relaxed))                          \
      return (CALL);                                                          \
    int is_sync = dpshim__is_sync(BIT, COMM);                                 \
    if (is_sync) dpshim__core_sync_begin(&dpshim__state.core);                \
    int rc = (CALL);                                                          \
    if (is_sync) dpshim__core_sync_end(&dpshim__state.core);                  \
    return rc;                                                                \
  } while (0)

DPSHIM_EXTERN int MPI_Allreduce(const void *s, void *r, int n, MPI_Datatype t,
                                MPI_Op op, MPI_Comm c) {
  SYNC(DPSHIM__SYNC_ALLREDUCE, c, PMPI_Allreduce(s, r, n, t, op, c));
}

DPSHIM_EXTERN int MPI_Alltoall(const void *s, int sn, MPI_Datatype st,
                               void *r, int rn, MPI_Datatype rt, MPI_Comm c) {
  SYNC(DPSHIM__SYNC_ALLTOALL, c, PMPI_Alltoall(s, sn, st, r, rn, rt, c));
}

DPSHIM_EXTERN int MPI_Reduce_scatter(const void *s, void *r, const int rn[],
                                     MPI_Datatype t, MPI_Op op, MPI_Comm c) {
  SYNC(DPSHIM__SYNC_REDUCE_SCATTER, c,
       PMPI_Reduce_scatter(s, r, rn, t, op, c));
}

DPSHIM_EXTERN int MPI_Reduce_scatter_block(const void *s, void *r, int n,
                                           MPI_Datatype t, MPI_Op op,
                                           MPI_Comm c) {
  SYNC(DPSHIM__SYNC_REDUCE_SCATTER_BLOCK, c,
       PMPI_Reduce_scatter_block(s, r, n, t, op, c));
}

DPSHIM_EXTERN int MPI_Allgather(const void *s, int sn, MPI_Datatype st,
                                void *r, int rn, MPI_Datatype rt, MPI_Comm c) {
  SYNC(DPSHIM__SYNC_ALLGATHER, c, PMPI_Allgather(s, sn, st, r, rn, rt, c));
}

DPSHIM_EXTERN int MPI_Reduce(const void *s, void *r, int n, MPI_Datatype t,
                             MPI_Op op, int root, MPI_Comm c) {
  SYNC(DPSHIM__SYNC_REDUCE, c, PMPI_Reduce(s, r, n, t, op, root, c));
}

DPSHIM_EXTERN int MPI_Bcast(void *b, int n, MPI_Datatype t, int root,
                            MPI_Comm c) {
  SYNC(DPSHIM__SYNC_BCAST, c, PMPI_Bcast(b, n, t, root, c));
}

DPSHIM_EXTERN int MPI_Barrier(MPI_Comm c) {
  SYNC(DPSHIM__SYNC_BARRIER, c, PMPI_Barrier(c));
}

/* ---- non-blocking: the wait comes later (mpi_wait.c) ------------------------------ */

#define ISYNC(BIT, COMM, CALL, REQ)                                           \
  do {                                                                        \
    int rc = (CALL);                                                          \
    if (rc == MPI_SUCCESS && dpshim__is_sync(BIT, COMM))                      \
      dpshim__sync_request(*(REQ));                                           \
    return rc;                                                                \
  } while (0)

DPSHIM_EXTERN int MPI_Iallreduce(const void *s, void *r, int n,
                                 MPI_Datatype t, MPI_Op op, MPI_Comm c,
                                 MPI_Request *q) {
  ISYNC(DPSHIM__SYNC_ALLREDUCE, c, PMPI_Iallreduce(s, r, n, t, op, c, q), q);
}

DPSHIM_EXTERN int MPI_Ialltoall(const void *s, int sn, MPI_Datatype st,
                                void *r, int rn, MPI_Datatype rt, MPI_Comm c,
                                MPI_Request *q) {
  ISYNC(DPSHIM__SYNC_ALLTOALL, c, PMPI_Ialltoall(s, sn, st, r, rn, rt, c, q),
        q);
}

DPSHIM_EXTERN int MPI_Ireduce_scatter(const void *s, void *r, const int rn[],
                                      MPI_Datatype t, MPI_Op op, MPI_Comm c,
                                      MPI_Request *q) {
  ISYNC(DPSHIM__SYNC_REDUCE_SCATTER, c,
        PMPI_Ireduce_scatter(s, r, rn, t, op, c, q), q);
}

DPSHIM_EXTERN int MPI_Ireduce_scatter_block(const void *s, void *r, int n,
                                            MPI_Datatype t, MPI_Op op,
                                            MPI_Comm c, MPI_Request *q) {
  ISYNC(DPSHIM__SYNC_REDUCE_SCATTER_BLOCK, c,
        PMPI_Ireduce_scatter_block(s, r, n, t, op, c, q), q);
}

DPSHIM_EXTERN int MPI_Iallgather(const void *s, int sn, MPI_Datatype st,
                                 void *r, int rn, MPI_Datatype rt, MPI_Comm c,
                                 MPI_Request *q) {
  ISYNC(DPSHIM__SYNC_ALLGATHER, c,
        PMPI_Iallgather(s, sn, st, r, rn, rt, c, q), q);
}

DPSHIM_EXTERN int MPI_Ireduce(const void *s, void *r, int n, MPI_Datatype t,
                              MPI_Op op, int root, MPI_Comm c,
                              MPI_Request *q) {
  ISYNC(DPSHIM__SYNC_REDUCE, c, PMPI_Ireduce(s, r, n, t, op, root, c, q), q);
}

DPSHIM_EXTERN int MPI_Ibcast(void *b, int n, MPI_Datatype t, int root,
                             MPI_Comm c, MPI_Request *q) {
  ISYNC(DPSHIM__SYNC_BCAST, c, PMPI_Ibcast(b, n, t, root, c, q), q);
}

DPSHIM_EXTERN int MPI_Ibarrier(MPI_Comm c, MPI_Request *q) {
  ISYNC(DPSHIM__SYNC_BARRIER, c, PMPI_Ibarrier(c, q), q);
}
