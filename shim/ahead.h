/* The shim's own balancing thread, behind <dpshim/ahead.h>.
 *
 * The trainer's calls for each loader are answered from a queue that one
 * thread fills `depth` batches ahead: each call asks for the batch `depth`
 * after the one it takes, and the thread fetches (and so hands off) in the
 * order of the asks, one at a time. Every rank's trainer makes the same
 * calls, so every rank's thread makes the same hand-offs in the same order,
 * and a stop (close, free) that finishes what was asked finishes on every
 * rank. Up to AHEAD_LOADERS loaders keep their own queues; a call for
 * another is fetched on the thread too, one batch at a time.
 *
 * No MPI: what a fetch's end and a take mean to the shim comes in hooks,
 * and the unit tests drive it with fake loaders.
 */
#ifndef DPSHIM_SHIM_AHEAD_H
#define DPSHIM_SHIM_AHEAD_H

#include "dpshim/ahead.h"

typedef struct dpshim__ahead_hooks {
  /* On the thread: fetch() returned NULL (its loader ended), so it made
   * no hand-off; the hook makes one that fails, so that no rank waits. */
  void (*ended)(void *arg);
  /* On the caller's thread: a batch taken, after `waited` seconds. */
  void (*taken)(void *arg, double waited);
  double (*clock)(void); /* seconds */
  void *arg;
} dpshim__ahead_hooks_t;

typedef struct dpshim__ahead dpshim__ahead_t;

/* depth: 1 .. DPSHIM_AHEAD_MAX. The thread starts at the first call.
 * NULL when out of memory. */
dpshim__ahead_t *dpshim__ahead_new(int depth,
                                   const dpshim__ahead_hooks_t *hooks);
/* The next batch of `ctx`, from one caller thread at a time (the
 * trainer's). NULL where its loader ended; *ok = 0 where the thread could
 * not start (nothing was fetched: fetch inline). */
void *dpshim__ahead_next(dpshim__ahead_t *a, dpshim_fetch_t fetch, void *ctx,
                         int *ok);
/* What was asked for `ctx` is fetched and dropped; its queue is freed. */
void dpshim__ahead_close(dpshim__ahead_t *a, dpshim_fetch_t fetch, void *ctx);
/* Everything asked is fetched, the thread joined, `a` freed. */
void dpshim__ahead_free(dpshim__ahead_t *a);
/* Whether the calling thread is a's. */
int dpshim__ahead_is_worker(const dpshim__ahead_t *a);

#endif
