/* timeutil: the monotonic clock the tools time and pace themselves with.
 * Header-only, so that any tool directory can include it ("../timeutil.h")
 * without a new source in its meson target. Tools-internal. */
#ifndef DPSHIM_TOOLS_TIMEUTIL_H
#define DPSHIM_TOOLS_TIMEUTIL_H

#include <errno.h>
#include <time.h>

/* Seconds on CLOCK_MONOTONIC: immune to wall-clock steps (NTP) mid-run. */
static inline double dpshim__tool_now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
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

#endif
