/* Step timing clock; see clock.h. */
#include "clock.h"

#include <time.h>

#ifdef DPSHIM_HAVE_PAPI
#include <papi.h>
#endif

const char *dpshim__clock_init(dpshim__clock_t *c) {
  c->papi = 0;
#ifdef DPSHIM_HAVE_PAPI
  int rc = PAPI_is_initialized() ? (int)PAPI_VER_CURRENT
                                 : PAPI_library_init(PAPI_VER_CURRENT);
  if (rc == PAPI_VER_CURRENT) {
    c->papi = 1;
    return "";
  }
  return "PAPI did not initialise; timing with clock_gettime(CLOCK_MONOTONIC)";
#else
  return "built without PAPI; timing with clock_gettime(CLOCK_MONOTONIC)";
#endif
}

double dpshim__clock_now(const dpshim__clock_t *c) {
#ifdef DPSHIM_HAVE_PAPI
  if (c->papi) return (double)PAPI_get_real_nsec() * 1e-9;
#else
  (void)c;
#endif
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
