/* The exactly-once check of (step, id) pairs; see stepids.h. */
#include "stepids.h"

#include <stdlib.h>

static int cmp_pair(const void *a, const void *b) {
  const uint64_t *x = a, *y = b;
  if (x[0] != y[0]) return x[0] < y[0] ? -1 : 1;
  return x[1] < y[1] ? -1 : x[1] > y[1];
}

int64_t stepids_duplicates(const uint64_t *pairs, int64_t n, MPI_Comm comm) {
  int rank, size, mine = (int)(2 * n), *counts = NULL, *displs = NULL;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  uint64_t *all = NULL;
  int64_t total = 0, dups = 0;
  if (rank == 0) counts = malloc(2 * (size_t)size * sizeof *counts);
  /* Every rank takes part whatever rank 0 could allocate. */
  int ok = rank != 0 || counts;
  MPI_Bcast(&ok, 1, MPI_INT, 0, comm);
  if (!ok) return -1;
  MPI_Gather(&mine, 1, MPI_INT, counts, 1, MPI_INT, 0, comm);
  if (rank == 0) {
    displs = counts + size;
    for (int r = 0; r < size; r++) displs[r] = (int)total, total += counts[r];
    all = malloc((size_t)total * sizeof *all + 1);
    ok = all != NULL;
  }
  MPI_Bcast(&ok, 1, MPI_INT, 0, comm);
  if (ok) {
    MPI_Gatherv(pairs, mine, MPI_UINT64_T, all, counts, displs, MPI_UINT64_T,
                0, comm);
    if (rank == 0) {
      qsort(all, (size_t)total / 2, 2 * sizeof *all, cmp_pair);
      for (int64_t k = 1; k < total / 2; k++)
        dups += !cmp_pair(all + 2 * k, all + 2 * (k - 1));
    }
  }
  free(all);
  free(counts);
  return ok ? dups : -1;
}
