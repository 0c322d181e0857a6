/* The collectives that can mark a step's gradient sync (DPSHIM_SYNC_OPS).
 * Each forwards to PMPI; when the call ends a step, the shim times it. */
#include "shim.h"

#define SYNC(BIT, CALL)                                                       \
  do {                                                                        \
    int ends_step = dpshim__on_sync_entry(BIT);                               \
    int rc = (CALL);                                                          \
    if (ends_step) dpshim__on_sync_exit();                                    \
    return rc;                                                                \
  } while (0)

DPSHIM_EXTERN int MPI_Allreduce(const void *s, void *r, int n, MPI_Datatype t,
                                MPI_Op op, MPI_Comm c) {
  SYNC(DPSHIM__SYNC_ALLREDUCE, PMPI_Allreduce(s, r, n, t, op, c));
}

DPSHIM_EXTERN int MPI_Alltoall(const void *s, int sn, MPI_Datatype st,
                               void *r, int rn, MPI_Datatype rt, MPI_Comm c) {
  SYNC(DPSHIM__SYNC_ALLTOALL, PMPI_Alltoall(s, sn, st, r, rn, rt, c));
}

DPSHIM_EXTERN int MPI_Reduce_scatter(const void *s, void *r, const int rn[],
                                     MPI_Datatype t, MPI_Op op, MPI_Comm c) {
  SYNC(DPSHIM__SYNC_REDUCE_SCATTER, PMPI_Reduce_scatter(s, r, rn, t, op, c));
}

DPSHIM_EXTERN int MPI_Reduce_scatter_block(const void *s, void *r, int n,
                                           MPI_Datatype t, MPI_Op op,
                                           MPI_Comm c) {
  SYNC(DPSHIM__SYNC_REDUCE_SCATTER_BLOCK,
       PMPI_Reduce_scatter_block(s, r, n, t, op, c));
}

DPSHIM_EXTERN int MPI_Allgather(const void *s, int sn, MPI_Datatype st,
                                void *r, int rn, MPI_Datatype rt, MPI_Comm c) {
  SYNC(DPSHIM__SYNC_ALLGATHER, PMPI_Allgather(s, sn, st, r, rn, rt, c));
}

DPSHIM_EXTERN int MPI_Reduce(const void *s, void *r, int n, MPI_Datatype t,
                             MPI_Op op, int root, MPI_Comm c) {
  SYNC(DPSHIM__SYNC_REDUCE, PMPI_Reduce(s, r, n, t, op, root, c));
}

DPSHIM_EXTERN int MPI_Bcast(void *b, int n, MPI_Datatype t, int root,
                            MPI_Comm c) {
  SYNC(DPSHIM__SYNC_BCAST, PMPI_Bcast(b, n, t, root, c));
}

DPSHIM_EXTERN int MPI_Barrier(MPI_Comm c) {
  SYNC(DPSHIM__SYNC_BARRIER, PMPI_Barrier(c));
}
