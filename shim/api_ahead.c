/* Balancing ahead (<dpshim/ahead.h>): the adapters' calls, the shim's own
 * thread and when it may run. */
#include <stdio.h>
#include <stdlib.h>

#include "env.h"
#include "shim.h"

#define ENDED "its loader returned no batch (its data ended)"

static void ended(void *arg) {
  (void)arg;
  dpshim_balance_fail(ENDED);
}

static void taken(void *arg, double waited) {
  (void)arg;
  dpshim_batch_taken(waited);
}

/* Why this run cannot balance ahead, said once by rank 0: it then stays
 * inline. */
static void stay_inline(dpshim__state_t *st, const char *why) {
  st->ahead_off = 1;
  if (st->world_rank != 0) return;
  char line[320];
  snprintf(line, sizeof line, "%s=%d, but %s: hand-offs stay inline, on the "
           "step's path", DPSHIM_ENV_AHEAD, (int)st->cfg.ahead, why);
  dpshim__say(line);
}

/* The shim's thread, made at the first call that may use it; NULL: fetch
 * inline. The same on every rank (settings and MPI's level are agreed
 * alike), but for the calling thread, which every rank's trainer uses
 * alike. */
static dpshim__ahead_t *ahead_of(dpshim__state_t *st) {
  if (!st->active || st->finalized || st->cfg.ahead <= 0 || st->ahead_off ||
      !pthread_equal(pthread_self(), st->init_thread))
    return NULL;
  if (st->ahead) return st->ahead;
  char why[160];
  if (st->mpi_provided < MPI_THREAD_MULTIPLE) {
    snprintf(why, sizeof why, "MPI provides thread level %d, not "
             "MPI_THREAD_MULTIPLE (%d)", st->mpi_provided,
             MPI_THREAD_MULTIPLE);
    stay_inline(st, why);
  } else if (st->cfg.vit) {
    stay_inline(st, "the ViT balance meets at the trainer's hand-offs");
  } else {
    dpshim__ahead_hooks_t hooks = {ended, taken, dpshim__now, NULL};
    st->ahead = dpshim__ahead_new(st->cfg.ahead, &hooks);
    if (!st->ahead) stay_inline(st, "out of memory for its thread");
  }
  return st->ahead;
}

int dpshim__on_ahead_thread(void) {
  return dpshim__ahead_is_worker(dpshim__state.ahead);
}

void dpshim__ahead_stop(void) {
  dpshim__state_t *st = &dpshim__state;
  dpshim__ahead_free(st->ahead);
  st->ahead = NULL;
}

DPSHIM_EXTERN int dpshim_ahead_depth(void) {
  dpshim__state_t *st = &dpshim__state;
  if (st->mpi_up || st->finalized)
    return st->mpi_up && st->active && !st->ahead_off && !st->cfg.vit &&
                   st->mpi_provided >= MPI_THREAD_MULTIPLE
               ? (int)st->cfg.ahead
               : 0;
  dpshim__config_t cfg; /* before MPI_Init: quietly, as MPI_Init does */
  char msg[8];
  if (dpshim__config_parse(getenv, &cfg, msg, sizeof msg) < 0 ||
      !cfg.enabled || cfg.vit)
    return 0;
  return (int)cfg.ahead;
}

/* Inline: the batch in the loader's buffers, and where there is none the
 * hand-off fails on every rank (the others' threads may be in it). */
static void *fetch_inline(dpshim_fetch_t fetch, void *ctx) {
  void *batch = fetch(ctx, -1);
  if (!batch) dpshim_balance_fail(ENDED);
  return batch;
}

DPSHIM_EXTERN void *dpshim_ahead_next(dpshim_fetch_t fetch, void *ctx) {
  dpshim__ahead_t *a = ahead_of(&dpshim__state);
  int ok = 0;
  void *batch = a ? dpshim__ahead_next(a, fetch, ctx, &ok) : NULL;
  if (!ok && a) stay_inline(&dpshim__state, "its thread cannot start");
  return ok ? batch : fetch_inline(fetch, ctx);
}

DPSHIM_EXTERN int dpshim_ahead_close(dpshim_fetch_t fetch, void *ctx) {
  dpshim__state_t *st = &dpshim__state;
  if (st->ahead) dpshim__ahead_close(st->ahead, fetch, ctx);
  return 0;
}
