/* The shim's own balancing thread (ahead.h) over fake loaders: every
 * batch once and in order, fetched on the thread and ahead of the calls,
 * a batch's buffer kept until the next call, loaders that end, close and
 * free that finish what was asked, loaders side by side. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "ahead.h"

/* A loader of numbered batches (1, 2, ...), `ends` after that many (0:
 * never), each into the slot it is given. */
typedef struct loader {
  int64_t next, ends;
  int64_t slots[DPSHIM_AHEAD_SLOTS];
  int64_t own; /* its own buffer, for slot < 0 */
  atomic_int fetched, on_caller, min_slot, max_slot;
  pthread_t caller;
} loader_t;

typedef struct counts {
  atomic_int ended, taken;
} counts_t;

static void *fetch(void *ctx, int slot) {
  loader_t *l = ctx;
  if (pthread_equal(pthread_self(), l->caller))
    atomic_fetch_add(&l->on_caller, 1);
  atomic_fetch_add(&l->fetched, 1);
  if (l->ends && l->next >= l->ends) return NULL;
  if (slot < atomic_load(&l->min_slot)) atomic_store(&l->min_slot, slot);
  if (slot > atomic_load(&l->max_slot)) atomic_store(&l->max_slot, slot);
  int64_t *b = slot < 0 ? &l->own : &l->slots[slot];
  *b = ++l->next;
  return b;
}

static void ended(void *arg) { atomic_fetch_add(&((counts_t *)arg)->ended, 1); }

static void taken(void *arg, double waited) {
  cr_assert_geq(waited, 0);
  atomic_fetch_add(&((counts_t *)arg)->taken, 1);
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static dpshim__ahead_t *open_ahead(int depth, counts_t *c) {
  memset(c, 0, sizeof *c);
  dpshim__ahead_hooks_t hooks = {ended, taken, now, c};
  dpshim__ahead_t *a = dpshim__ahead_new(depth, &hooks);
  cr_assert_not_null(a);
  return a;
}

static void open_loader(loader_t *l, int64_t ends) {
  memset(l, 0, sizeof *l);
  l->ends = ends;
  l->caller = pthread_self();
  atomic_store(&l->min_slot, 1 << 20);
  atomic_store(&l->max_slot, -1);
}

static int64_t next(dpshim__ahead_t *a, loader_t *l) {
  int ok = 0;
  int64_t *b = dpshim__ahead_next(a, fetch, l, &ok);
  cr_assert(ok, "the thread did not start");
  return b ? *b : 0;
}

/* Until the loader has been fetched `n` times, for up to 10 s. */
static int fetched_reaches(loader_t *l, int n) {
  for (int k = 0; k < 10000 && atomic_load(&l->fetched) < n; k++) {
    struct timespec t = {0, 1000000};
    nanosleep(&t, NULL);
  }
  return atomic_load(&l->fetched) >= n;
}

Test(shim_ahead, every_batch_once_in_order_on_the_thread) {
  for (int depth = 1; depth <= DPSHIM_AHEAD_MAX; depth *= 2) {
    counts_t c;
    loader_t l;
    dpshim__ahead_t *a = open_ahead(depth, &c);
    open_loader(&l, 0);
    for (int64_t n = 1; n <= 50; n++)
      cr_assert_eq(next(a, &l), n, "depth %d: call %lld", depth,
                   (long long)n);
    dpshim__ahead_free(a);
    cr_assert_eq(atomic_load(&l.on_caller), 0, "fetched on the caller");
    cr_assert_eq(atomic_load(&l.fetched), 50 + depth, "depth %d", depth);
    cr_assert_eq(atomic_load(&c.taken), 50);
    cr_assert_eq(atomic_load(&c.ended), 0);
    cr_assert_eq(atomic_load(&l.min_slot), 0);
    cr_assert_eq(atomic_load(&l.max_slot), depth, "depth %d", depth);
  }
}

/* After a call, the thread fetches `depth` batches beyond it without
 * another call; the batch the caller holds is not rewritten meanwhile. */
Test(shim_ahead, fetches_ahead_and_keeps_the_batch_taken) {
  counts_t c;
  loader_t l;
  dpshim__ahead_t *a = open_ahead(3, &c);
  open_loader(&l, 0);
  int ok;
  int64_t *held = dpshim__ahead_next(a, fetch, &l, &ok);
  cr_assert(ok && held && *held == 1);
  cr_assert(fetched_reaches(&l, 4), "not fetched ahead: %d",
            atomic_load(&l.fetched));
  cr_assert_eq(*held, 1, "the batch taken was rewritten");
  for (int k = 2; k <= 20; k++) {
    int64_t *b = dpshim__ahead_next(a, fetch, &l, &ok);
    cr_assert(fetched_reaches(&l, k + 3));
    cr_assert_eq(*b, k, "the batch taken was rewritten");
  }
  dpshim__ahead_free(a);
}

/* A loader that ends: its batches, then NULL at each call; every fetch
 * that found no batch is said to the shim (a failed hand-off), none
 * more; no hang at free. */
Test(shim_ahead, a_loader_that_ends) {
  counts_t c;
  loader_t l;
  dpshim__ahead_t *a = open_ahead(2, &c);
  open_loader(&l, 5);
  for (int64_t n = 1; n <= 5; n++) cr_assert_eq(next(a, &l), n);
  cr_assert_eq(next(a, &l), 0);
  cr_assert_eq(next(a, &l), 0);
  dpshim__ahead_free(a);
  /* 7 calls asked for batches 1..9: 4 found none */
  cr_assert_eq(atomic_load(&l.fetched), 9);
  cr_assert_eq(atomic_load(&c.ended), 4);
  cr_assert_eq(atomic_load(&c.taken), 7);
}

/* Close finishes what was asked for the loader, and nothing is fetched
 * for it after; a loader opened after it at the same address starts
 * from a new queue. */
Test(shim_ahead, close_finishes_what_was_asked) {
  counts_t c;
  loader_t l;
  dpshim__ahead_t *a = open_ahead(4, &c);
  open_loader(&l, 0);
  cr_assert_eq(next(a, &l), 1);
  dpshim__ahead_close(a, fetch, &l);
  int after = atomic_load(&l.fetched);
  cr_assert_eq(after, 5);
  struct timespec t = {0, 20000000};
  nanosleep(&t, NULL);
  cr_assert_eq(atomic_load(&l.fetched), after, "fetched after close");
  open_loader(&l, 0);
  cr_assert_eq(next(a, &l), 1);
  dpshim__ahead_free(a);
}

/* Loaders side by side keep their own orders; beyond the queues there is
 * room for, a loader is fetched one batch at a time, in its own buffers. */
Test(shim_ahead, loaders_side_by_side) {
  enum { N = 10 };
  counts_t c;
  static loader_t l[N];
  dpshim__ahead_t *a = open_ahead(2, &c);
  for (int i = 0; i < N; i++) open_loader(&l[i], 0);
  for (int64_t n = 1; n <= 12; n++)
    for (int i = 0; i < N; i++)
      cr_assert_eq(next(a, &l[i]), n, "loader %d, call %lld", i,
                   (long long)n);
  dpshim__ahead_free(a);
  for (int i = 0; i < N; i++) cr_assert_eq(atomic_load(&l[i].on_caller), 0);
  cr_assert_eq(atomic_load(&l[N - 1].fetched), 12, "fetched ahead");
  cr_assert_eq(atomic_load(&l[N - 1].max_slot), -1, "given a slot");
  cr_assert_eq(atomic_load(&l[0].fetched), 14);
}
