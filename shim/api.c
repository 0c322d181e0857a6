/* The adapters' entry point; see include/dpshim/batch.h. */
#include <stdlib.h>

#include "env.h"
#include "shim.h"

/* An adapter preloaded without libdpshim.so ahead of libmpi: MPI_Init did
 * not go through the shim, so nothing can be balanced. Said once, on rank 0,
 * when balancing was asked for: a silent no-op would be a surprise. */
static void say_not_initialised(void) {
  dpshim__state_t *st = &dpshim__state;
  int initialised = 0, rank = 0;
  const char *on = getenv(DPSHIM_ENV_ENABLE);
  if (st->said_not_initialised || !on || *on == '0' || !*on) return;
  PMPI_Initialized(&initialised);
  if (!initialised) return;
  st->said_not_initialised = 1;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0)
    dpshim__say("MPI_Init did not go through libdpshim.so, so nothing is "
                "balanced: put libdpshim.so in LD_PRELOAD, ahead of the "
                "adapter");
}

DPSHIM_EXTERN int dpshim_balance_batch(dpshim_batch_t *batch) {
  if (!dpshim__state.mpi_up) say_not_initialised();
  return dpshim__on_handoff(batch);
}
