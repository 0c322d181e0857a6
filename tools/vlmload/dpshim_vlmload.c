/* libdpshim_vlmload.so, the reference VLM loader's adapter: vlmload_next()
 * interposed on the public API (<dpshim/adapter.h>, <dpshim/vlm.h>,
 * <dpshim/ahead.h>), like any third-party adapter; preloaded beside
 * libdpshim.so (dpshim-run --adapter vlmload). Each layout is described by
 * its pointers, as a user with such batches would.
 *
 * vlmload may be called ahead from another thread, so the shim balances
 * the next packs on a thread of its own (DPSHIM_AHEAD). A pack fetched
 * ahead must stay as it is until the trainer's next call: the adapter
 * opens each loader holding that many packs in buffers of its own
 * (vlmload's hold, dpshim_ahead_depth() + 1), and only where a loader
 * holds fewer (opened otherwise, or out of memory for more) copies the
 * pack into a buffer of the adapter's. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dpshim/adapter.h"
#include "dpshim/ahead.h"
#include "../ahead_taken.h"
#include "dpshim/vlm.h"
#include "vlmload.h"

static dpshim_next_t real_next = DPSHIM_NEXT_INIT("vlmload_next");
static dpshim_next_t real_close = DPSHIM_NEXT_INIT("vlmload_close");
static dpshim_next_t real_produced = DPSHIM_NEXT_INIT("vlmload_produced");
static dpshim_next_t real_open = DPSHIM_NEXT_INIT("vlmload_open");

static void balance_internvl(vlm_batch_t *p) {
  vlm_internvl_t *v = &p->internvl;
  size_t tile = 3 * (size_t)v->tile_size * (size_t)v->tile_size;
  dpshim_internvl_batch_t b = {
      .nsamples = p->nsamples, .capacity_samples = p->capacity_samples,
      .cu_lengths = p->cu_lengths, .capacity_tokens = p->capacity_tokens,
      .tokens = v->tokens, .labels = v->labels,
      .position_ids = v->position_ids, .loss_weight = v->loss_weight,
      .ntiles = v->ntiles, .capacity_tiles = v->capacity_tiles,
      .imgs = v->imgs, .tile_bytes = tile * sizeof *v->imgs,
      .image_flags = v->image_flags, .num_image_token = v->num_image_token,
      .context_token = VLMLOAD_INTERNVL_CONTEXT, .dummy_tiles = 1,
      .keys = p->keys};
  dpshim_balance_internvl(&b);
  p->nsamples = b.nsamples;
  v->ntiles = b.ntiles;
}

static dpshim_qwen_media_t media(vlm_qwen_media_t *m, int64_t pad) {
  return (dpshim_qwen_media_t){.rows = m->rows,
                               .capacity_rows = m->capacity_rows,
                               .grid_thw = m->grid_thw, .count = m->count,
                               .capacity = m->capacity, .pad_token = pad};
}

static void balance_qwen(vlm_batch_t *p) {
  vlm_qwen_t *q = &p->qwen;
  dpshim_qwen_batch_t b = {
      .nsamples = p->nsamples, .capacity_samples = p->capacity_samples,
      .cu_lengths = p->cu_lengths, .capacity_tokens = p->capacity_tokens,
      .tokens = q->tokens, .labels = q->labels, .attn_mask = q->attn_mask,
      .max_lengths = &q->max_lengths,
      .row_bytes = VLMLOAD_QWEN_ROW * sizeof(float),
      .merge = VLMLOAD_QWEN_MERGE,
      .images = media(&q->images, VLMLOAD_QWEN_IMAGE_PAD),
      .videos = media(&q->videos, VLMLOAD_QWEN_VIDEO_PAD), .keys = p->keys,
      .video_frames_apart = p->layout == VLMLOAD_QWEN3VL};
  dpshim_balance_qwen(&b);
  p->nsamples = b.nsamples;
  q->images.count = b.images.count;
  q->videos.count = b.videos.count;
}

/* ---- packs fetched ahead ------------------------------------------------ */

/* A pack fetched ahead, with the loader's count right after it: the
 * trainer asks it as of the pack it took (vlmload_produced). */
typedef struct slot {
  vlm_batch_t copy; /* the pack copied, where its loader holds too few */
  int64_t produced;
} slot_t;

/* By slot: allocated at their first use (a copy's buffers at the first
 * copy, as large as the loader's own), kept for the process; and the pack
 * each slot holds now (its copy, or the loader's own buffers). */
static slot_t *slots[DPSHIM_AHEAD_SLOTS];
static void *held[DPSHIM_AHEAD_SLOTS];

/* Each loader's hold, as opened here (trainer's thread; read by the
 * shim's once the loader is in use). */
static struct {
  const vlmload_t *loader;
  int32_t hold;
} holds[AHEAD_TAKEN_LOADERS];

/* Each loader's latest pack taken (the trainer's thread). */
static ahead_taken_t taken[AHEAD_TAKEN_LOADERS];

/* n items of `size` from `from` into `to` (allocated with room for `cap`
 * at the first copy); 0, or -1 out of memory. */
static int copy_array(void *to_p, const void *from, size_t n, size_t cap,
                      size_t size) {
  void **to = to_p;
  if (!from) return 0;
  if (!*to) *to = malloc(cap * size + 1);
  if (!*to) return -1;
  memcpy(*to, from, n * size);
  return 0;
}

static int64_t media_rows(const vlm_qwen_media_t *m) {
  int64_t rows = 0;
  for (int32_t i = 0; i < m->count; i++)
    rows += (int64_t)m->grid_thw[3 * i] * m->grid_thw[3 * i + 1] *
            m->grid_thw[3 * i + 2];
  return rows;
}

/* The media's rows and grids into `to` (whose pointers are the slot's). */
static int copy_media(vlm_qwen_media_t *to, const vlm_qwen_media_t *from) {
  float *rows = to->rows;
  int32_t *grid = to->grid_thw;
  *to = *from;
  to->rows = rows, to->grid_thw = grid;
  size_t row = VLMLOAD_QWEN_ROW;
  return copy_array(&to->rows, from->rows, (size_t)media_rows(from) * row,
                    (size_t)from->capacity_rows * row, sizeof(float)) |
         copy_array(&to->grid_thw, from->grid_thw, 3 * (size_t)from->count,
                    3 * (size_t)from->capacity, sizeof(int32_t));
}

/* Token arrays whole (the Qwen packs are padded past the samples). */
static int copy_layout(vlm_batch_t *to, const vlm_batch_t *from) {
  size_t t = (size_t)from->capacity_tokens;
  if (from->layout == VLMLOAD_INTERNVL) {
    vlm_internvl_t *a = &to->internvl;
    const vlm_internvl_t *b = &from->internvl;
    size_t tile = 3 * (size_t)b->tile_size * (size_t)b->tile_size;
    size_t n = (size_t)b->ntiles, cap = (size_t)b->capacity_tiles;
    a->ntiles = b->ntiles, a->capacity_tiles = b->capacity_tiles;
    a->tile_size = b->tile_size, a->num_image_token = b->num_image_token;
    return copy_array(&a->tokens, b->tokens, t, t, sizeof(int64_t)) |
           copy_array(&a->labels, b->labels, t, t, sizeof(int64_t)) |
           copy_array(&a->position_ids, b->position_ids, t, t,
                      sizeof(int64_t)) |
           copy_array(&a->loss_weight, b->loss_weight, t, t, sizeof(float)) |
           copy_array(&a->imgs, b->imgs, n * tile, cap * tile,
                      sizeof(float)) |
           copy_array(&a->image_flags, b->image_flags, n, cap,
                      sizeof(int64_t));
  }
  vlm_qwen_t *a = &to->qwen;
  const vlm_qwen_t *b = &from->qwen;
  a->max_lengths = b->max_lengths;
  return copy_array(&a->tokens, b->tokens, t, t, sizeof(int64_t)) |
         copy_array(&a->labels, b->labels, t, t, sizeof(int64_t)) |
         copy_array(&a->attn_mask, b->attn_mask, t, t, sizeof(uint8_t)) |
         copy_media(&a->images, &b->images) |
         copy_media(&a->videos, &b->videos);
}

static int32_t hold_of(const vlmload_t *loader) {
  for (int i = 0; i < AHEAD_TAKEN_LOADERS; i++)
    if (holds[i].loader == loader) return holds[i].hold;
  return 1;
}

/* p's pack into slot k's copy; 0, or -1 out of memory. */
static int copy_pack(vlm_batch_t *s, const vlm_batch_t *p) {
  size_t n = (size_t)p->nsamples, cap = (size_t)p->capacity_samples;
  s->layout = p->layout, s->nsamples = p->nsamples;
  s->capacity_samples = p->capacity_samples;
  s->capacity_tokens = p->capacity_tokens;
  return copy_array(&s->cu_lengths, p->cu_lengths, n + 1, cap + 1,
                    sizeof(int32_t)) |
         copy_array(&s->keys, p->keys, n, cap, sizeof(uint64_t)) |
         copy_layout(s, p);
}

/* p's pack in slot k: in the loader's buffers where it holds it long
 * enough, else copied; NULL, said, where the slot cannot be had (the
 * loader's buffers would be rewritten under the trainer). */
static vlm_batch_t *into_slot(int k, const vlmload_t *loader,
                              vlm_batch_t *p) {
  if (!slots[k]) slots[k] = calloc(1, sizeof(slot_t));
  slot_t *slot = slots[k];
  int copy = hold_of(loader) <= dpshim_ahead_depth();
  if (!slot || (copy && copy_pack(&slot->copy, p) < 0)) {
    fprintf(stderr, "dpshim_vlmload: out of memory for a pack fetched "
            "ahead; the loader stops here\n");
    return NULL;
  }
  int64_t (*produced)(const vlmload_t *);
  DPSHIM_NEXT(real_produced, produced);
  slot->produced = produced ? produced(loader) : 0;
  held[k] = copy ? &slot->copy : p;
  return held[k];
}

static void *fetch(void *loader, int slot) {
  vlm_batch_t *(*next)(vlmload_t *);
  DPSHIM_NEXT(real_next, next);
  vlm_batch_t *p = next ? next(loader) : NULL;
  if (p && slot >= 0) p = into_slot(slot, loader, p);
  if (p && p->layout == VLMLOAD_INTERNVL) balance_internvl(p);
  else if (p) balance_qwen(p);
  return p;
}

VLMLOAD_EXTERN vlm_batch_t *vlmload_next(vlmload_t *loader) {
  vlm_batch_t *b = dpshim_ahead_next(fetch, loader);
  ahead_taken_note(taken, held, loader, b);
  return b;
}

/* A loader that holds as many packs as the shim may fetch ahead, and one
 * more (the trainer's); where that is out of memory, as asked (its packs
 * fetched ahead are then copied). */
VLMLOAD_EXTERN vlmload_t *vlmload_open(const vlmload_config_t *cfg,
                                       char *err, size_t errlen) {
  vlmload_t *(*open)(const vlmload_config_t *, char *, size_t);
  DPSHIM_NEXT(real_open, open);
  if (!open) return NULL;
  int32_t want = (int32_t)dpshim_ahead_depth() + 1;
  vlmload_t *l = NULL;
  if (cfg && want > 1 && cfg->hold < want) {
    vlmload_config_t more = *cfg;
    more.hold = want;
    l = open(&more, NULL, 0);
  }
  int32_t hold = l ? want : cfg && cfg->hold > 1 ? cfg->hold : 1;
  if (!l) l = open(cfg, err, errlen);
  for (int i = 0; l && i < AHEAD_TAKEN_LOADERS; i++)
    if (!holds[i].loader || holds[i].loader == l) {
      holds[i].loader = l, holds[i].hold = hold;
      break;
    }
  return l;
}

/* The loader's count as of the pack the trainer took last: the count after
 * the packs fetched ahead would include samples not yet delivered. */
VLMLOAD_EXTERN int64_t vlmload_produced(const vlmload_t *loader) {
  int k = ahead_taken_slot(taken, loader);
  if (k >= 0) return slots[k]->produced;
  int64_t (*produced)(const vlmload_t *);
  DPSHIM_NEXT(real_produced, produced);
  return produced ? produced(loader) : 0;
}

VLMLOAD_EXTERN void vlmload_close(vlmload_t *loader) {
  void (*close)(vlmload_t *);
  dpshim_ahead_close(fetch, loader);
  ahead_taken_forget(taken, loader);
  for (int i = 0; i < AHEAD_TAKEN_LOADERS; i++)
    if (holds[i].loader == loader) holds[i].loader = NULL;
  DPSHIM_NEXT(real_close, close);
  if (close) close(loader);
}
