/* MPI_Init, MPI_Init_thread, MPI_Finalize: where the shim starts and ends.
 *
 * When balancing is enabled the shim asks for MPI_THREAD_MULTIPLE, so that a
 * loader running in its own thread (as a pin-memory thread does) may balance
 * while the main thread computes; the application is told the level MPI
 * provides, which is at least what it asked for. */
#include <stdlib.h>

#include "env.h"
#include "shim.h"

/* Before MPI_Init nothing may be printed: a quiet look at the switch. */
static int balancing_requested(void) {
  dpshim__config_t cfg;
  char msg[8];
  return dpshim__config_parse(getenv, &cfg, msg, sizeof msg) == 0 &&
         cfg.enabled;
}

/* Some MPIs implement one init through the other: only the outer call
 * starts the shim. */
static int enter_init(void) {
  dpshim__state_t *st = &dpshim__state;
  pthread_mutex_lock(&st->lock);
  int outer = !st->in_init && !st->mpi_up;
  if (outer) st->in_init = 1;
  pthread_mutex_unlock(&st->lock);
  return outer;
}

static void leave_init(int rc, int provided) {
  dpshim__state.in_init = 0;
  if (rc == MPI_SUCCESS) dpshim__on_init(provided);
}

DPSHIM_EXTERN int MPI_Init_thread(int *argc, char ***argv, int required,
                                  int *provided) {
  if (!enter_init()) return PMPI_Init_thread(argc, argv, required, provided);
  int want = balancing_requested() ? MPI_THREAD_MULTIPLE : required;
  int rc = PMPI_Init_thread(argc, argv, want, provided);
  leave_init(rc, *provided);
  return rc;
}

DPSHIM_EXTERN int MPI_Init(int *argc, char ***argv) {
  if (!enter_init()) return PMPI_Init(argc, argv);
  int provided = MPI_THREAD_SINGLE, rc;
  if (balancing_requested()) {
    rc = PMPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  } else {
    rc = PMPI_Init(argc, argv);
    if (rc == MPI_SUCCESS) PMPI_Query_thread(&provided);
  }
  leave_init(rc, provided);
  return rc;
}

DPSHIM_EXTERN int MPI_Finalize(void) {
  dpshim__on_finalize();
  return PMPI_Finalize();
}
