/* The shim's own balancing thread; see ahead.h. */
#include "ahead.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define AHEAD_LOADERS (DPSHIM_AHEAD_SLOTS / (DPSHIM_AHEAD_MAX + 1))
#define BUFFERS (DPSHIM_AHEAD_MAX + 1)
/* Asks pending at once: every loader's buffers, and one batch of a loader
 * beyond them. */
#define ASKS (AHEAD_LOADERS * BUFFERS + 1)

typedef struct ask {
  dpshim_fetch_t fetch;
  void *ctx;
  int slot;
  void **out; /* where the batch goes */
} ask_t;

typedef struct loader {
  dpshim_fetch_t fetch; /* NULL: a free entry */
  void *ctx;
  int64_t asked, taken;         /* its batches asked for, taken */
  int64_t ticket[BUFFERS];      /* the ask of each buffered batch */
  void *batch[BUFFERS];
} loader_t;

struct dpshim__ahead {
  pthread_mutex_t lock;
  pthread_cond_t work, served_cv;
  pthread_t thread;
  int running, failed, stopping;
  int depth;
  dpshim__ahead_hooks_t hooks;
  ask_t asks[ASKS];
  int64_t posted, served; /* asks numbered from 0; [served, posted) wait */
  loader_t loaders[AHEAD_LOADERS];
};

static void *worker(void *arg) {
  dpshim__ahead_t *a = arg;
  pthread_mutex_lock(&a->lock);
  for (;;) {
    while (a->served == a->posted && !a->stopping)
      pthread_cond_wait(&a->work, &a->lock);
    if (a->served == a->posted) break; /* stopping, and all served */
    ask_t k = a->asks[a->served % ASKS];
    pthread_mutex_unlock(&a->lock);
    void *batch = k.fetch(k.ctx, k.slot);
    if (!batch) a->hooks.ended(a->hooks.arg);
    pthread_mutex_lock(&a->lock);
    *k.out = batch;
    a->served++;
    pthread_cond_broadcast(&a->served_cv);
  }
  pthread_mutex_unlock(&a->lock);
  return NULL;
}

dpshim__ahead_t *dpshim__ahead_new(int depth,
                                   const dpshim__ahead_hooks_t *hooks) {
  dpshim__ahead_t *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  pthread_mutex_init(&a->lock, NULL);
  pthread_cond_init(&a->work, NULL);
  pthread_cond_init(&a->served_cv, NULL);
  a->depth = depth < 1 ? 1 : depth > DPSHIM_AHEAD_MAX ? DPSHIM_AHEAD_MAX
                                                       : depth;
  a->hooks = *hooks;
  return a;
}

/* Under a->lock: its number. */
static int64_t post(dpshim__ahead_t *a, ask_t k) {
  a->asks[a->posted % ASKS] = k;
  pthread_cond_signal(&a->work);
  return a->posted++;
}

/* Under a->lock. */
static void wait_served(dpshim__ahead_t *a, int64_t ticket) {
  while (a->served <= ticket) pthread_cond_wait(&a->served_cv, &a->lock);
}

/* Under a->lock: ctx's queue, a new one where there is room, else NULL. */
static loader_t *loader_of(dpshim__ahead_t *a, dpshim_fetch_t fetch,
                           void *ctx, int add) {
  loader_t *free_one = NULL;
  for (int i = 0; i < AHEAD_LOADERS; i++) {
    loader_t *l = &a->loaders[i];
    if (l->fetch == fetch && l->ctx == ctx) return l;
    if (!l->fetch && !free_one) free_one = l;
  }
  if (!add || !free_one) return NULL;
  memset(free_one, 0, sizeof *free_one);
  free_one->fetch = fetch;
  free_one->ctx = ctx;
  return free_one;
}

/* Under a->lock: asks until `depth` batches beyond the one taken next
 * are asked for; each in a slot of its own. */
static void ask_ahead(dpshim__ahead_t *a, loader_t *l) {
  int n = a->depth + 1;
  int base = (int)(l - a->loaders) * BUFFERS;
  for (; l->asked <= l->taken + a->depth; l->asked++) {
    int k = (int)(l->asked % n);
    ask_t ask = {l->fetch, l->ctx, base + k, &l->batch[k]};
    l->ticket[k] = post(a, ask);
  }
}

/* Under a->lock: 0 or -1 where the thread cannot start. */
static int start(dpshim__ahead_t *a) {
  if (a->running) return 0;
  if (a->failed || pthread_create(&a->thread, NULL, worker, a) != 0) {
    a->failed = 1;
    return -1;
  }
  a->running = 1;
  return 0;
}

void *dpshim__ahead_next(dpshim__ahead_t *a, dpshim_fetch_t fetch, void *ctx,
                         int *ok) {
  double t0 = a->hooks.clock();
  void *batch = NULL;
  pthread_mutex_lock(&a->lock);
  *ok = start(a) == 0;
  if (!*ok) {
    pthread_mutex_unlock(&a->lock);
    return NULL;
  }
  loader_t *l = loader_of(a, fetch, ctx, 1);
  if (l) {
    ask_ahead(a, l);
    int k = (int)(l->taken++ % (a->depth + 1));
    wait_served(a, l->ticket[k]);
    batch = l->batch[k];
  } else { /* no queue of its own: one batch, in the loader's buffers */
    wait_served(a, post(a, (ask_t){fetch, ctx, -1, &batch}));
  }
  pthread_mutex_unlock(&a->lock);
  a->hooks.taken(a->hooks.arg, a->hooks.clock() - t0);
  return batch;
}

void dpshim__ahead_close(dpshim__ahead_t *a, dpshim_fetch_t fetch,
                         void *ctx) {
  pthread_mutex_lock(&a->lock);
  loader_t *l = loader_of(a, fetch, ctx, 0);
  if (l) {
    if (l->asked > 0)
      wait_served(a, l->ticket[(l->asked - 1) % (a->depth + 1)]);
    memset(l, 0, sizeof *l);
  }
  pthread_mutex_unlock(&a->lock);
}

void dpshim__ahead_free(dpshim__ahead_t *a) {
  if (!a) return;
  pthread_mutex_lock(&a->lock);
  a->stopping = 1;
  pthread_cond_signal(&a->work);
  int running = a->running;
  pthread_mutex_unlock(&a->lock);
  if (running) pthread_join(a->thread, NULL);
  pthread_cond_destroy(&a->work);
  pthread_cond_destroy(&a->served_cv);
  pthread_mutex_destroy(&a->lock);
  free(a);
}

int dpshim__ahead_is_worker(const dpshim__ahead_t *a) {
  return a && a->running && pthread_equal(pthread_self(), a->thread);
}
