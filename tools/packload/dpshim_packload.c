/* libdpshim_packload.so, the reference loader's adapter: packload_next()
 * interposed on the public adapter API (<dpshim/adapter.h>,
 * <dpshim/batch.h>, <dpshim/ahead.h>), like any third-party adapter;
 * preloaded beside libdpshim.so (dpshim-run --adapter packload).
 *
 * packload may be called ahead from another thread, so the shim balances
 * the next packs on a thread of its own (DPSHIM_AHEAD); packload reuses its
 * buffers at every call, so a pack fetched ahead is copied into a buffer of
 * the adapter's, kept until the trainer's next call.
 *
 * This works because the trainer calls packload_next() in libpackload.so
 * across a shared-object boundary; a call inside one object cannot be
 * interposed by LD_PRELOAD. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpshim/adapter.h"
#include "dpshim/ahead.h"
#include "../ahead_taken.h"
#include "dpshim/batch.h"
#include "packload.h"

static dpshim_next_t real_next = DPSHIM_NEXT_INIT("packload_next");
static dpshim_next_t real_close = DPSHIM_NEXT_INIT("packload_close");

static dpshim_next_t real_produced = DPSHIM_NEXT_INIT("packload_produced");

/* A pack fetched ahead, with the loader's counts right after it: the
 * trainer asks them as of the pack it took (packload_produced). */
typedef struct slot {
  packload_batch_t batch;
  int64_t samples, tokens;
} slot_t;

/* By slot: allocated at their first use, as large as the loader's own
 * buffers, kept for the process. */
static void *slots[DPSHIM_AHEAD_SLOTS]; /* slot_t, its batch first */

/* Each loader's latest pack taken (the trainer's thread). */
static ahead_taken_t taken[AHEAD_TAKEN_LOADERS];

/* The pack as fields: three token-aligned, one per sample. */
static void balance_pack(packload_batch_t *p) {
  dpshim_field_t fields[] = {
      {"tokens", p->tokens, sizeof *p->tokens, p->cu_seqlens,
       p->capacity_tokens},
      {"labels", p->labels, sizeof *p->labels, p->cu_seqlens,
       p->capacity_tokens},
      {"loss_weights", p->loss_weights, sizeof *p->loss_weights,
       p->cu_seqlens, p->capacity_tokens},
      {"sample_ids", p->sample_ids, sizeof *p->sample_ids, NULL,
       p->capacity_samples},
  };
  dpshim_batch_t batch = {p->nsamples, p->capacity_samples, p->cu_seqlens,
                          4, fields, NULL};
  dpshim_balance_batch(&batch);
  p->nsamples = batch.nsamples;
}

/* A slot shaped as p, its arrays as large as p's capacities (a token
 * array p lacks stays NULL). */
static slot_t *new_slot(const packload_batch_t *p) {
  slot_t *slot = calloc(1, sizeof *slot);
  if (!slot) return NULL;
  packload_batch_t *s = &slot->batch;
  size_t samples = (size_t)p->capacity_samples;
  size_t tokens = (size_t)p->capacity_tokens;
  *s = *p;
  s->cu_seqlens = malloc((samples + 1) * sizeof *s->cu_seqlens);
  s->sample_ids = malloc(samples * sizeof *s->sample_ids);
  s->tokens = p->tokens ? malloc(tokens * sizeof *s->tokens) : NULL;
  s->labels = p->labels ? malloc(tokens * sizeof *s->labels) : NULL;
  s->loss_weights =
      p->loss_weights ? malloc(tokens * sizeof *s->loss_weights) : NULL;
  if (s->cu_seqlens && s->sample_ids && (s->tokens || !p->tokens) &&
      (s->labels || !p->labels) && (s->loss_weights || !p->loss_weights))
    return slot;
  free(s->cu_seqlens);
  free(s->sample_ids);
  free(s->tokens);
  free(s->labels);
  free(s->loss_weights);
  free(slot);
  return NULL;
}

/* p's pack into slot k; NULL, said, where the slot cannot be had (the
 * loader's buffers would be rewritten under the trainer). */
static packload_batch_t *into_slot(int k, const packload_t *loader,
                                   packload_batch_t *p) {
  if (!slots[k]) slots[k] = new_slot(p);
  slot_t *slot = slots[k];
  if (!slot) {
    fprintf(stderr, "dpshim_packload: out of memory for a pack fetched "
            "ahead; the loader stops here\n");
    return NULL;
  }
  void (*produced)(const packload_t *, int64_t *, int64_t *);
  DPSHIM_NEXT(real_produced, produced);
  if (produced) produced(loader, &slot->samples, &slot->tokens);
  packload_batch_t *s = &slot->batch;
  size_t n = (size_t)p->nsamples, t = (size_t)p->cu_seqlens[p->nsamples];
  s->nsamples = p->nsamples;
  memcpy(s->cu_seqlens, p->cu_seqlens, (n + 1) * sizeof *s->cu_seqlens);
  memcpy(s->sample_ids, p->sample_ids, n * sizeof *s->sample_ids);
  if (s->tokens) memcpy(s->tokens, p->tokens, t * sizeof *s->tokens);
  if (s->labels) memcpy(s->labels, p->labels, t * sizeof *s->labels);
  if (s->loss_weights)
    memcpy(s->loss_weights, p->loss_weights, t * sizeof *s->loss_weights);
  return s;
}

static void *fetch(void *loader, int slot) {
  packload_batch_t *(*next)(packload_t *);
  DPSHIM_NEXT(real_next, next);
  packload_batch_t *p = next ? next(loader) : NULL;
  if (!p) return NULL;
  if (slot >= 0) p = into_slot(slot, loader, p);
  if (p) balance_pack(p);
  return p;
}

PACKLOAD_EXTERN packload_batch_t *packload_next(packload_t *loader) {
  packload_batch_t *b = dpshim_ahead_next(fetch, loader);
  ahead_taken_note(taken, slots, loader, b);
  return b;
}

/* The loader's counts as of the pack the trainer took last: those after
 * the packs fetched ahead would count samples not yet delivered. */
PACKLOAD_EXTERN void packload_produced(const packload_t *loader,
                                       int64_t *samples, int64_t *tokens) {
  int k = ahead_taken_slot(taken, loader);
  const slot_t *s = k >= 0 ? slots[k] : NULL;
  void (*produced)(const packload_t *, int64_t *, int64_t *);
  DPSHIM_NEXT(real_produced, produced);
  if (!s && produced) produced(loader, samples, tokens);
  if (s && samples) *samples = s->samples;
  if (s && tokens) *tokens = s->tokens;
}

PACKLOAD_EXTERN void packload_close(packload_t *loader) {
  void (*close)(packload_t *);
  dpshim_ahead_close(fetch, loader);
  ahead_taken_forget(taken, loader);
  DPSHIM_NEXT(real_close, close);
  if (close) close(loader);
}
