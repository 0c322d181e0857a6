/* MPI_Init, MPI_Init_thread, MPI_Query_thread, MPI_Finalize: where the
 * shim starts and ends.
 *
 * The trainer keeps the thread level it asked for. Only where hand-offs
 * may come from another thread (the loader's, DPSHIM_LOADER_THREAD=1, or
 * the shim's own, DPSHIM_AHEAD > 0) does the shim ask MPI for
 * MPI_THREAD_MULTIPLE; even then the trainer is told the level MPI gives
 * for what it asked, not the higher one. */
#include <stdlib.h>

#include "shim.h"

/* Before MPI_Init nothing may be printed: a quiet look at the settings.
 * Hand-offs from a thread other than MPI_Init's, the trainer's loader's or
 * the shim's own (balancing ahead, which the ViT balance keeps inline),
 * need MPI_THREAD_MULTIPLE. */
static int wants_multiple(void) {
  dpshim__config_t cfg;
  char msg[8];
  return dpshim__config_parse(getenv, &cfg, msg, sizeof msg) == 0 &&
         cfg.enabled && (cfg.loader_thread || (cfg.ahead > 0 && !cfg.vit));
}

/* Some MPIs implement one init through the other: only the outer call
 * starts the shim. */
static int enter_init(void) {
  dpshim__state_t *st = &dpshim__state;
  pthread_mutex_lock(&st->lock);
  int outer = !st->in_init && !st->mpi_up && !st->finalized;
  if (outer) st->in_init = 1;
  pthread_mutex_unlock(&st->lock);
  return outer;
}

static void leave_init(int rc, int got, int reported) {
  dpshim__state_t *st = &dpshim__state;
  st->in_init = 0;
  if (rc != MPI_SUCCESS) return;
  st->mpi_provided = got;
  st->provided = reported;
  dpshim__on_init();
}

DPSHIM_EXTERN int MPI_Init_thread(int *argc, char ***argv, int required,
                                  int *provided) {
  if (!enter_init()) return PMPI_Init_thread(argc, argv, required, provided);
  int want = wants_multiple() ? MPI_THREAD_MULTIPLE : required, got = 0;
  int rc = PMPI_Init_thread(argc, argv, want, &got);
  /* MPI gives min(asked, what it supports) */
  *provided = got < required ? got : required;
  leave_init(rc, got, *provided);
  return rc;
}

DPSHIM_EXTERN int MPI_Init(int *argc, char ***argv) {
  if (!enter_init()) return PMPI_Init(argc, argv);
  int got = MPI_THREAD_SINGLE, rc;
  if (wants_multiple()) {
    rc = PMPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &got);
    leave_init(rc, got, MPI_THREAD_SINGLE);
  } else {
    rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS) PMPI_Query_thread(&got);
    leave_init(rc, got, got);
  }
  return rc;
}

DPSHIM_EXTERN int MPI_Query_thread(int *provided) {
  if (!dpshim__state.mpi_up) return PMPI_Query_thread(provided);
  *provided = dpshim__state.provided;
  return MPI_SUCCESS;
}

DPSHIM_EXTERN int MPI_Finalize(void) {
  dpshim__on_finalize();
  return PMPI_Finalize();
}
