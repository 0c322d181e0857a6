/* The adapters' entry point; see include/dpshim/batch.h. */
#include <stdio.h>
#include <stdlib.h>

#include "env.h"
#include "shim.h"

/* An adapter preloaded without libdpshim.so ahead of libmpi: MPI_Init did
 * not go through the shim, so nothing can be balanced. Said once, on rank 0,
 * when balancing was asked for: a silent no-op would be a surprise. */
static void say_not_initialised(void) {
  dpshim__state_t *st = &dpshim__state;
  int initialised = 0, finalized = 1, rank = 0;
  const char *on = getenv(DPSHIM_ENV_ENABLE);
  if (st->said_not_initialised || !on || *on == '0' || !*on) return;
  if (PMPI_Initialized(&initialised) != MPI_SUCCESS || !initialised ||
      PMPI_Finalized(&finalized) != MPI_SUCCESS || finalized)
    return;
  st->said_not_initialised = 1;
  PMPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0)
    dpshim__say("MPI_Init did not go through libdpshim.so, so nothing is "
                "balanced: put libdpshim.so in LD_PRELOAD, ahead of the "
                "adapter");
}

/* Whether this thread may start the shim's collectives. A hand-off from a
 * thread other than MPI_Init's needs DPSHIM_LOADER_THREAD=1 (and so
 * MPI_THREAD_MULTIPLE); without it this rank stops balancing, said once.
 * Every rank's loader behaves alike, so every rank stops at the same
 * hand-off. */
static int may_communicate(dpshim__state_t *st, int main) {
  if (main || st->cfg.loader_thread || dpshim__on_ahead_thread()) return 1;
  st->active = 0;
  char cause[320];
  snprintf(cause, sizeof cause,
           "a batch was handed off from a thread other than MPI_Init's: set "
           "%s=1 for a loader that runs in its own thread",
           DPSHIM_ENV_LOADER_THREAD);
  dpshim__core_noop(&st->core, cause);
  return 0;
}

static int handoff(dpshim_batch_t *batch, const char *invalid) {
  dpshim__state_t *st = &dpshim__state;
  if (st->finalized) return 0;
  if (!st->mpi_up) {
    say_not_initialised();
    return 0;
  }
  int main = pthread_equal(pthread_self(), st->init_thread);
  if (!st->active || !may_communicate(st, main)) return 0;
  /* The encoder calls' checkpoint finds a rank still in one, which would
   * otherwise wait there while the others gather below. Not needed where
   * the last hand-off made sure no call meets until this one. */
  int quiet = 0, gate = main && dpshim__core_vit_gate(&st->core);
  if (gate) dpshim__core_vit_apart(&st->core, &quiet);
  if (main && !quiet) dpshim__vit_point(DPSHIM__VIT_HANDOFF);
  int rc = dpshim__core_handoff(&st->core, batch, main, invalid,
                                main ? dpshim__vit_moved() : 0);
  if (gate) dpshim__vit_gate(dpshim__core_vit_apart(&st->core, &quiet));
  return rc;
}

DPSHIM_EXTERN int dpshim_balance_batch(dpshim_batch_t *batch) {
  return handoff(batch, NULL);
}

DPSHIM_EXTERN int dpshim_balance_fail(const char *why) {
  return handoff(NULL, why && *why ? why : "the adapter could not describe "
                                           "its batch");
}

DPSHIM_EXTERN int dpshim_step_end(void) {
  dpshim__state_t *st = &dpshim__state;
  if (st->active && !st->finalized &&
      pthread_equal(pthread_self(), st->init_thread))
    dpshim__core_step_end(&st->core);
  return 0;
}

DPSHIM_EXTERN int dpshim_batch_taken(double waited_s) {
  dpshim__state_t *st = &dpshim__state;
  if (st->active && !st->finalized &&
      pthread_equal(pthread_self(), st->init_thread))
    dpshim__core_taken(&st->core, waited_s);
  return 0;
}
