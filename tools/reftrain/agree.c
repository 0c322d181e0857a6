/* Set-up errors agreed over the world; see agree.h. */
#include "agree.h"

#include <mpi.h>
#include <stdlib.h>

int rt_lowest_failed(int failed) {
  int world;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int *all = malloc((size_t)world * sizeof *all);
  if (!all) MPI_Abort(MPI_COMM_WORLD, 1);
  /* Not MPI_Allreduce: a balancing shim may take that for a step's sync. */
  MPI_Allgather(&failed, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
  int first = -1;
  for (int r = world - 1; r >= 0; r--)
    if (all[r]) first = r;
  free(all);
  return first;
}
