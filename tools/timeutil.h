/* timeutil: the monotonic clock the tools time and pace themselves with,
 * and the median they report timings by.
 * Header-only, so that any tool directory can include it ("../timeutil.h")
 * without a new source in its meson target. Tools-internal. */
#ifndef DPSHIM_TOOLS_TIMEUTIL_H
#define DPSHIM_TOOLS_TIMEUTIL_H

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <time.h>

/* Seconds on CLOCK_MONOTONIC: immune to wall-clock steps (NTP) mid-run. */
static inline double dpshim__tool_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Seconds of this thread's CPU time: what a single-threaded piece of work
 * takes, which other processes loading the machine do not inflate (its
 * wall time on an idle core, up to cache effects). */
static inline double dpshim__tool_cpu_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Sleeps until dpshim__tool_now_s() reaches t. An absolute deadline, so the
 * time spent since t was computed (bookkeeping) is absorbed, not added; a
 * signal does not cut the sleep short. */
static inline void dpshim__tool_sleep_until(double t) {
  struct timespec ts;
  ts.tv_sec = (time_t)t;
  ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
  if (ts.tv_nsec >= 1000000000L) ts.tv_nsec = 999999999L;
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}

static inline int dpshim__tool_cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of v[n], n >= 1; sorts v in place. */
static inline double dpshim__tool_median(double *v, size_t n) {
  qsort(v, n, sizeof *v, dpshim__tool_cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#endif
