/* Wall-clock time for step timing: PAPI's real-time clock when PAPI
 * initialises, else clock_gettime(CLOCK_MONOTONIC). Iteration-scale use only:
 * PAPI's call is a raw syscall. */
#ifndef DPSHIM_SHIM_CLOCK_H
#define DPSHIM_SHIM_CLOCK_H

typedef struct dpshim__clock {
  int papi; /* 1 when PAPI is the source */
} dpshim__clock_t;

/* Initialises the clock; returns a static note when PAPI is not used ("" when
 * it is). Call once, after MPI_Init. */
const char *dpshim__clock_init(dpshim__clock_t *c);
/* Seconds from an arbitrary origin. */
double dpshim__clock_now(const dpshim__clock_t *c);

#endif
