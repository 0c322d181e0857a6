/* reftrain's loader thread; see loader.h.
 *
 * The fetched batches live in a ring of prefetch + 1 slots: up to prefetch
 * waiting, plus the one the trainer computes on. packload_next() reuses the
 * loader's buffers at every call, so a batch fetched ahead is copied out
 * before the next fetch; a pin-memory loop copies too. */
#include "loader.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

typedef struct slot {
  packload_batch_t batch; /* owns its arrays */
  int64_t produced[2];
} slot_t;

struct rt_loader {
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  packload_t *pl;
  int64_t total;
  int32_t prefetch, nslots;
  slot_t *slots;
  /* Under lock. Batch k is in slots[k % nslots]. */
  int64_t made;  /* batches copied into their slot */
  int64_t taken; /* batches handed to the trainer */
  bool waiting;  /* the trainer waits for batch `taken` */
  bool failed;   /* out of memory: no more batches */
  bool quit;
};

/* A slot's arrays, at the loader's own capacities (the same at every
 * call); -1 when out of memory. */
static int slot_alloc(packload_batch_t *d, const packload_batch_t *b) {
  size_t ns = (size_t)b->capacity_samples + 1, nt = (size_t)b->capacity_tokens;
  d->cu_seqlens = malloc(ns * sizeof *d->cu_seqlens);
  d->sample_ids = malloc(ns * sizeof *d->sample_ids);
  d->tokens = malloc(nt * sizeof *d->tokens + 1);
  d->labels = malloc(nt * sizeof *d->labels + 1);
  d->loss_weights = malloc(nt * sizeof *d->loss_weights + 1);
  d->capacity_samples = b->capacity_samples;
  d->capacity_tokens = b->capacity_tokens;
  return d->cu_seqlens && d->sample_ids && d->tokens && d->labels &&
                 d->loss_weights
             ? 0
             : -1;
}

/* Copies the used part of b into d; -1 when out of memory. */
static int copy_batch(packload_batch_t *d, const packload_batch_t *b) {
  if (!d->cu_seqlens && slot_alloc(d, b) < 0) return -1;
  int32_t n = b->nsamples;
  int64_t tokens = n > 0 ? b->cu_seqlens[n] : 0;
  d->nsamples = n;
  memcpy(d->cu_seqlens, b->cu_seqlens, ((size_t)n + 1) * sizeof *d->cu_seqlens);
  memcpy(d->sample_ids, b->sample_ids, (size_t)n * sizeof *d->sample_ids);
  memcpy(d->tokens, b->tokens, (size_t)tokens * sizeof *d->tokens);
  memcpy(d->labels, b->labels, (size_t)tokens * sizeof *d->labels);
  memcpy(d->loss_weights, b->loss_weights,
         (size_t)tokens * sizeof *d->loss_weights);
  return 0;
}

/* Under lock: whether batch `made` may be fetched now. Waiting batches stay
 * below prefetch, so with the trainer's own one at most prefetch + 1 slots
 * are in use after the fetch; a waiting trainer holds none. */
static bool may_fetch(const rt_loader_t *lt) {
  return lt->made < lt->taken + lt->prefetch + (lt->waiting ? 1 : 0);
}

static void *loader_main(void *arg) {
  rt_loader_t *lt = arg;
  for (int64_t k = 0; k < lt->total; k++) {
    pthread_mutex_lock(&lt->lock);
    while (!lt->quit && !may_fetch(lt)) pthread_cond_wait(&lt->cond, &lt->lock);
    bool quit = lt->quit;
    pthread_mutex_unlock(&lt->lock);
    if (quit) break;
    /* The hand-off itself runs unlocked: with a balancer preloaded it is
     * collective and may take long. */
    const packload_batch_t *b = packload_next(lt->pl);
    slot_t *s = &lt->slots[k % lt->nslots];
    packload_produced(lt->pl, &s->produced[0], &s->produced[1]);
    int rc = copy_batch(&s->batch, b);
    pthread_mutex_lock(&lt->lock);
    if (rc == 0) lt->made++;
    else lt->failed = true;
    pthread_cond_broadcast(&lt->cond);
    pthread_mutex_unlock(&lt->lock);
    if (rc != 0) break;
  }
  return NULL;
}

static void free_slots(rt_loader_t *lt) {
  for (int32_t i = 0; lt->slots && i < lt->nslots; i++) {
    packload_batch_t *b = &lt->slots[i].batch;
    free(b->cu_seqlens);
    free(b->sample_ids);
    free(b->tokens);
    free(b->labels);
    free(b->loss_weights);
  }
  free(lt->slots);
}

rt_loader_t *rt_loader_start(packload_t *pl, int64_t total, int32_t prefetch) {
  rt_loader_t *lt = calloc(1, sizeof *lt);
  if (!lt) return NULL;
  *lt = (rt_loader_t){.pl = pl, .total = total, .prefetch = prefetch,
                      .nslots = prefetch + 1};
  lt->slots = calloc((size_t)lt->nslots, sizeof *lt->slots);
  pthread_mutex_init(&lt->lock, NULL);
  pthread_cond_init(&lt->cond, NULL);
  if (lt->slots && pthread_create(&lt->thread, NULL, loader_main, lt) == 0)
    return lt;
  pthread_mutex_destroy(&lt->lock);
  pthread_cond_destroy(&lt->cond);
  free_slots(lt);
  free(lt);
  return NULL;
}

const packload_batch_t *rt_loader_next(rt_loader_t *lt, int64_t produced[2]) {
  pthread_mutex_lock(&lt->lock);
  /* Asking releases the previous batch's slot. */
  lt->waiting = true;
  pthread_cond_broadcast(&lt->cond);
  while (lt->made == lt->taken && !lt->failed)
    pthread_cond_wait(&lt->cond, &lt->lock);
  const slot_t *s = NULL;
  if (lt->made > lt->taken) {
    s = &lt->slots[lt->taken % lt->nslots];
    lt->taken++;
  }
  lt->waiting = false;
  pthread_cond_broadcast(&lt->cond); /* room for one more ahead */
  pthread_mutex_unlock(&lt->lock);
  if (!s) return NULL;
  produced[0] = s->produced[0];
  produced[1] = s->produced[1];
  return &s->batch;
}

void rt_loader_stop(rt_loader_t *lt) {
  if (!lt) return;
  pthread_mutex_lock(&lt->lock);
  lt->quit = true;
  pthread_cond_broadcast(&lt->cond);
  pthread_mutex_unlock(&lt->lock);
  pthread_join(lt->thread, NULL);
  pthread_mutex_destroy(&lt->lock);
  pthread_cond_destroy(&lt->cond);
  free_slots(lt);
  free(lt);
}
