/* vlmload: the reference VLM loader; see vlmload.h.
 *
 * Sample ids are (slot << VLMLOAD_SLOT_SHIFT) | index, index counting the
 * slot's draws, so two slots never share a sample. Packs are first-fit,
 * one per call: samples that do not fit wait for the next pack (pack.c, by
 * shape).
 *
 * Buffers hold `headroom` packs of any content: a real tile needs
 * num_image_token tokens, a dummy tile a text-only sample (>= 64 tokens),
 * a patch row a quarter of a pad token; so every batch that fits the token
 * buffer fits the others. Unless image_rows is set: then packs hold that
 * many image rows at most and the image buffer image_headroom times that,
 * so that a balancer must keep within it. Pages are touched only as they
 * are filled.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

#define MAX_SLOTS (INT32_C(1) << (64 - VLMLOAD_SLOT_SHIFT))
#define MAX_PREFETCH 8
#define MAX_HOLD 9

typedef struct sizes { /* what the buffers hold, in rows */
  int64_t tokens, rows, video_rows;
  int32_t samples, grids, video_grids;
} sizes_t;

/* cfg.prefetch and cfg.hold: packs built into the buffers of loaders of
 * the same configuration (their own packers unused), a ring read in
 * order: up to prefetch packs ready (built by a thread) and hold handed
 * out and still valid. */
typedef struct ahead {
  int32_t n, hold;
  vlmload_t *stage[MAX_PREFETCH + MAX_HOLD];
  /* packs built, handed out, and handed back (hold calls after they were
   * handed out): under lock */
  int64_t built, handed, taken;
  int quit, threaded;
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cond;
} ahead_t;

struct vlmload {
  vlmload_config_t cfg;
  vlm_packer_t packer; /* which samples (pack.c), by their shapes; the
                        * prefetch thread's alone when there is one */
  int64_t produced, packs;
  sizes_t cap;
  vlm_batch_t batch; /* points into the buffers below */
  void *buf[11];     /* every buffer, for close */
  ahead_t *ahead;    /* cfg.prefetch's */
};

static const char *const LAYOUTS[] = {"internvl", "qwen2vl", "qwen3vl"};

int vlmload_layout_from_name(const char *name, vlmload_layout_t *out) {
  for (int k = 0; k < 3; k++)
    if (name && !strcmp(name, LAYOUTS[k])) {
      *out = (vlmload_layout_t)k;
      return 0;
    }
  return -1;
}

const char *vlmload_layout_name(vlmload_layout_t l) {
  return (unsigned)l < 3 ? LAYOUTS[l] : "?";
}

vlmload_config_t vlmload_config_default(vlmload_layout_t layout) {
  return (vlmload_config_t){.layout = layout, .pack_tokens = 32768,
                            .text_median = 700, .text_sigma = 1.0,
                            .image_fraction = 0.7, .video_fraction = 0.1,
                            .max_images = 4, .tile_size = 448,
                            .num_image_token = 256, .max_tiles = 12,
                            .max_side = 64, .max_frames = 8, .headroom = 2.0,
                            .slots = 1};
}

int vlmload_config_mix(vlmload_config_t *c, const char *mix) {
  if (mix && !strcmp(mix, "default")) return 0;
  if (!mix || strcmp(mix, "encoder-heavy")) return -1;
  c->image_fraction = 0.9;
  if (c->layout == VLMLOAD_INTERNVL) {
    c->max_tiles = 24;
    return 0;
  }
  c->max_side = c->max_side > 512 ? 1024 : 2 * c->max_side;
  if (c->layout == VLMLOAD_QWEN3VL) {
    c->video_fraction = 0.5;
    c->max_frames = 32;
  }
  return 0;
}

/* ---- prefetch ------------------------------------------------------------ */

static void pack_into(vlmload_t *l, vlm_batch_t *b);

static void *ahead_loop(void *arg) {
  vlmload_t *l = arg;
  ahead_t *a = l->ahead;
  pthread_mutex_lock(&a->lock);
  for (;;) {
    while (!a->quit && a->built - a->taken >= a->n)
      pthread_cond_wait(&a->cond, &a->lock);
    if (a->quit) break;
    /* The slot after the ones ready and the one handed out. */
    vlm_batch_t *b = &a->stage[a->built % a->n]->batch;
    pthread_mutex_unlock(&a->lock);
    pack_into(l, b);
    pthread_mutex_lock(&a->lock);
    a->built++;
    pthread_cond_broadcast(&a->cond);
  }
  pthread_mutex_unlock(&a->lock);
  return NULL;
}

/* The oldest pack built ahead (without a thread: built here), handed
 * out in its own buffers; the one handed out `hold` calls before goes
 * back to the ring (the caller is done with it). */
static vlm_batch_t *take_ahead(vlmload_t *l) {
  ahead_t *a = l->ahead;
  pthread_mutex_lock(&a->lock);
  if (a->handed >= a->hold) {
    a->taken++;
    pthread_cond_broadcast(&a->cond);
  }
  if (!a->threaded) {
    pack_into(l, &a->stage[a->built % a->n]->batch);
    a->built++;
  }
  while (a->built == a->handed) pthread_cond_wait(&a->cond, &a->lock);
  vlm_batch_t *out = &a->stage[a->handed++ % a->n]->batch;
  pthread_mutex_unlock(&a->lock);
  return out;
}

static vlmload_t *open_loader(const vlmload_config_t *cfg, char *err,
                              size_t errlen);
static void close_loader(vlmload_t *l);

static void free_ahead(ahead_t *a) {
  for (int32_t k = 0; k < a->n; k++) close_loader(a->stage[k]);
  pthread_mutex_destroy(&a->lock);
  pthread_cond_destroy(&a->cond);
  free(a);
}

static void stop_ahead(vlmload_t *l) {
  ahead_t *a = l->ahead;
  if (!a) return;
  pthread_mutex_lock(&a->lock);
  a->quit = 1;
  pthread_cond_broadcast(&a->cond);
  pthread_mutex_unlock(&a->lock);
  if (a->threaded) pthread_join(a->thread, NULL);
  free_ahead(a);
  l->ahead = NULL;
}

/* The ring: prefetch + hold sets of buffers (loaders of their own, opened
 * inside this library, so not through an interposed vlmload_open), and
 * the thread where packs are built ahead. */
static int start_ahead(vlmload_t *l) {
  ahead_t *a = calloc(1, sizeof *a);
  if (!a) return -1;
  vlmload_config_t one = l->cfg;
  one.prefetch = one.hold = 0;
  a->hold = l->cfg.hold > 1 ? l->cfg.hold : 1;
  int32_t n = l->cfg.prefetch + a->hold;
  for (a->n = 0; a->n < n; a->n++)
    if (!(a->stage[a->n] = open_loader(&one, NULL, 0))) break;
  pthread_mutex_init(&a->lock, NULL);
  pthread_cond_init(&a->cond, NULL);
  l->ahead = a;
  a->threaded = l->cfg.prefetch > 0;
  if (a->n == n && (!a->threaded ||
                    pthread_create(&a->thread, NULL, ahead_loop, l) == 0))
    return 0;
  a->threaded = 0;
  free_ahead(a);
  l->ahead = NULL;
  return -1;
}

/* ---- open / close -------------------------------------------------------- */

static int fail(char *err, size_t len, const char *msg) {
  if (err && len) snprintf(err, len, "vlmload: %s", msg);
  return -1;
}

static int check_config(const vlmload_config_t *c, char *err, size_t len) {
  if ((unsigned)c->layout > VLMLOAD_QWEN3VL)
    return fail(err, len, "layout: internvl, qwen2vl or qwen3vl");
  if (c->slots < 1 || c->slots > MAX_SLOTS || c->slot < 0 ||
      c->slot >= c->slots)
    return fail(err, len, "slot must be in [0, slots), slots in [1, 2^24]");
  if (c->pack_tokens < 4 * VLM_MIN_TEXT || c->pack_tokens > (1 << 24))
    return fail(err, len, "pack_tokens must be in [256, 2^24]");
  if (!(c->headroom >= 1.0 && c->headroom <= 64.0))
    return fail(err, len, "headroom must be in [1, 64]");
  if (!(c->text_median >= 1 && c->text_sigma >= 0 && c->image_fraction >= 0 &&
        c->image_fraction <= 1 && c->video_fraction >= 0 &&
        c->video_fraction <= 1))
    return fail(err, len, "need text_median >= 1, text_sigma >= 0, "
                          "fractions in [0, 1]");
  if (c->max_images < 1 || c->max_images > VLM_MAX_IMAGES)
    return fail(err, len, "max_images must be in [1, 16]");
  if (c->tile_size < 1 || c->tile_size > 1024 || c->num_image_token < 1 ||
      c->max_tiles < 1 || c->max_tiles > 64)
    return fail(err, len, "need tile_size in [1, 1024], num_image_token >= "
                          "1, max_tiles in [1, 64]");
  if (c->max_side < 8 || c->max_side % 2 || c->max_side > 1024)
    return fail(err, len, "max_side must be even, in [8, 1024]");
  if (c->max_frames < 2 || c->max_frames % 2 || c->max_frames > 64)
    return fail(err, len, "max_frames must be even, in [2, 64]");
  if (c->image_rows < 0 || c->image_rows > (INT64_C(1) << 30))
    return fail(err, len, "image_rows must be in [0, 2^30]");
  if (!(c->image_headroom == 0 ||
        (c->image_headroom >= 1.0 && c->image_headroom <= 64.0)))
    return fail(err, len, "image_headroom must be 0 or in [1, 64]");
  if (c->prefetch < 0 || c->prefetch > MAX_PREFETCH)
    return fail(err, len, "prefetch must be in [0, 8]");
  if (c->hold < 0 || c->hold > MAX_HOLD)
    return fail(err, len, "hold must be in [0, 9]");
  return 0;
}

/* A buffer of n rows of `row` bytes, kept for close. */
static void *buffer(vlmload_t *l, int k, int64_t n, size_t row) {
  l->buf[k] = malloc((size_t)(n > 0 ? n : 1) * row);
  return l->buf[k];
}

static sizes_t capacities(const vlmload_config_t *c) {
  sizes_t s;
  s.tokens = (int64_t)ceil(c->headroom * (double)c->pack_tokens);
  s.samples = (int32_t)(s.tokens / VLM_MIN_TEXT + 1);
  int64_t per_pad = VLMLOAD_QWEN_MERGE * VLMLOAD_QWEN_MERGE;
  if (c->layout == VLMLOAD_INTERNVL) {
    s.rows = s.tokens / c->num_image_token + s.samples;
    s.grids = s.video_grids = 0;
    s.video_rows = 0;
  } else {
    s.rows = s.tokens * per_pad;
    s.grids = (int32_t)(s.tokens / 3 + 1); /* a start, a pad, an end */
    s.video_rows = s.tokens * per_pad;
    s.video_grids = s.grids;
  }
  if (c->image_rows > 0) { /* packs hold no more; the buffer this much */
    double h = c->image_headroom > 0 ? c->image_headroom : c->headroom;
    s.rows = (int64_t)ceil(h * (double)c->image_rows);
  }
  return s;
}

static int alloc_internvl(vlmload_t *l) {
  vlm_internvl_t *v = &l->batch.internvl;
  int64_t t = l->cap.tokens;
  v->tokens = buffer(l, 2, t, sizeof(int64_t));
  v->labels = buffer(l, 3, t, sizeof(int64_t));
  v->position_ids = buffer(l, 4, t, sizeof(int64_t));
  v->loss_weight = buffer(l, 5, t, sizeof(float));
  v->imgs = buffer(l, 6, l->cap.rows, vlm__row_floats(&l->cfg) * sizeof(float));
  v->image_flags = buffer(l, 7, l->cap.rows, sizeof(int64_t));
  v->capacity_tiles = l->cap.rows;
  v->tile_size = l->cfg.tile_size;
  v->num_image_token = l->cfg.num_image_token;
  return v->tokens && v->labels && v->position_ids && v->loss_weight &&
         v->imgs && v->image_flags ? 0 : -1;
}

static int alloc_qwen(vlmload_t *l) {
  vlm_qwen_t *q = &l->batch.qwen;
  int64_t t = l->cap.tokens;
  size_t row = VLMLOAD_QWEN_ROW * sizeof(float);
  q->tokens = buffer(l, 2, t, sizeof(int64_t));
  q->labels = buffer(l, 3, t, sizeof(int64_t));
  q->attn_mask = buffer(l, 4, t, 1);
  q->images.rows = buffer(l, 5, l->cap.rows, row);
  q->images.grid_thw = buffer(l, 6, l->cap.grids, 3 * sizeof(int32_t));
  q->videos.rows = buffer(l, 7, l->cap.video_rows, row);
  q->videos.grid_thw = buffer(l, 8, l->cap.video_grids, 3 * sizeof(int32_t));
  q->images.capacity_rows = l->cap.rows;
  q->images.capacity = l->cap.grids;
  q->videos.capacity_rows = l->cap.video_rows;
  q->videos.capacity = l->cap.video_grids;
  return q->tokens && q->labels && q->attn_mask && q->images.rows &&
         q->images.grid_thw && q->videos.rows && q->videos.grid_thw ? 0 : -1;
}

vlmload_t *vlmload_open(const vlmload_config_t *cfg, char *err,
                        size_t errlen) {
  return open_loader(cfg, err, errlen);
}

static vlmload_t *open_loader(const vlmload_config_t *cfg, char *err,
                              size_t errlen) {
  if (!cfg) {
    fail(err, errlen, "no configuration");
    return NULL;
  }
  if (check_config(cfg, err, errlen) < 0) return NULL;
  vlmload_t *l = calloc(1, sizeof *l);
  if (!l) {
    fail(err, errlen, "out of memory");
    return NULL;
  }
  l->cfg = *cfg;
  vlm__packer_init(&l->packer, &l->cfg);
  l->cap = capacities(cfg);
  vlm_batch_t *b = &l->batch;
  b->layout = cfg->layout;
  b->capacity_samples = l->cap.samples;
  b->capacity_tokens = l->cap.tokens;
  b->cu_lengths = buffer(l, 0, (int64_t)l->cap.samples + 1, sizeof(int32_t));
  b->keys = buffer(l, 1, l->cap.samples, sizeof(uint64_t));
  int rc = cfg->layout == VLMLOAD_INTERNVL ? alloc_internvl(l) : alloc_qwen(l);
  if (rc < 0 || !b->cu_lengths || !b->keys) {
    fail(err, errlen, "out of memory for the batch buffers");
    close_loader(l);
    return NULL;
  }
  if ((cfg->prefetch > 0 || cfg->hold > 1) && start_ahead(l) < 0) {
    fail(err, errlen, "cannot start the prefetch thread or hold the packs "
                      "(out of memory?)");
    close_loader(l);
    return NULL;
  }
  return l;
}

void vlmload_close(vlmload_t *l) { close_loader(l); }

static void close_loader(vlmload_t *l) {
  if (!l) return;
  stop_ahead(l);
  for (size_t k = 0; k < sizeof l->buf / sizeof l->buf[0]; k++)
    free(l->buf[k]);
  free(l);
}

/* ---- packing ------------------------------------------------------------- */

/* Where sample i's content goes: after the samples before it. The counts
 * so far say where. */
static vlm_sample_out_t out_at(const vlmload_config_t *cfg, vlm_batch_t *b,
                               int64_t at, int64_t rows, int32_t grids,
                               int64_t video_rows, int32_t video_grids) {
  vlm_sample_out_t o = {0};
  if (cfg->layout == VLMLOAD_INTERNVL) {
    vlm_internvl_t *v = &b->internvl;
    o = (vlm_sample_out_t){v->tokens + at, v->labels + at,
                           v->position_ids + at, v->loss_weight + at, NULL,
                           v->imgs + (size_t)rows * vlm__row_floats(cfg),
                           v->image_flags + rows, NULL, NULL, NULL};
  } else {
    vlm_qwen_t *q = &b->qwen;
    o = (vlm_sample_out_t){
        q->tokens + at, q->labels + at, NULL, NULL, q->attn_mask + at,
        q->images.rows + (size_t)rows * VLMLOAD_QWEN_ROW,
        NULL, q->images.grid_thw + 3 * (size_t)grids,
        q->videos.rows + (size_t)video_rows * VLMLOAD_QWEN_ROW,
        q->videos.grid_thw + 3 * (size_t)video_grids};
  }
  return o;
}

/* Patch rows of a medium's grids. */
static int64_t grid_rows(const vlm_qwen_media_t *m) {
  int64_t rows = 0;
  for (int32_t k = 0; k < m->count; k++) {
    const int32_t *g = m->grid_thw + 3 * (size_t)k;
    rows += (int64_t)g[0] * g[1] * g[2];
  }
  return rows;
}

/* Rows and grid rows the batch holds now. */
static void counts(const vlm_batch_t *b, int64_t *rows, int32_t *grids,
                   int64_t *video_rows, int32_t *video_grids) {
  const vlm_qwen_t *q = &b->qwen;
  *rows = b->layout == VLMLOAD_INTERNVL ? b->internvl.ntiles : 0;
  *grids = *video_grids = 0;
  *video_rows = 0;
  if (b->layout == VLMLOAD_INTERNVL) return;
  *grids = q->images.count;
  *video_grids = q->videos.count;
  *rows = grid_rows(&q->images);
  *video_rows = grid_rows(&q->videos);
}

static void place(const vlmload_config_t *cfg, vlm_batch_t *b, uint64_t id,
                  const vlm_shape_t *s) {
  int32_t n = b->nsamples, at = b->cu_lengths[n], grids, video_grids;
  int64_t rows, video_rows;
  counts(b, &rows, &grids, &video_rows, &video_grids);
  vlm_sample_out_t o = out_at(cfg, b, at, rows, grids, video_rows,
                              video_grids);
  vlm__write(cfg, vlm__key(cfg->seed, id), s, &o);
  b->keys[n] = id;
  b->cu_lengths[n + 1] = at + (int32_t)s->len;
  b->nsamples = n + 1;
  if (b->layout == VLMLOAD_INTERNVL) {
    b->internvl.ntiles += (int32_t)s->rows;
  } else {
    b->qwen.images.count += s->nimages;
    b->qwen.videos.count += s->nvideos;
    if (s->len > b->qwen.max_lengths) b->qwen.max_lengths = (int32_t)s->len;
  }
}

static void reset_batch(vlm_batch_t *b) {
  b->nsamples = 0;
  b->cu_lengths[0] = 0;
  b->internvl.ntiles = 0;
  b->qwen.images.count = b->qwen.videos.count = 0;
  b->qwen.max_lengths = 0;
}

/* The fault a test asked for: a tile flag flipped, or an image's grid row
 * narrowed (h >= 4 always; narrower, so that a consumer reading by the
 * grids stays within the pack's rows), so that the batch no longer
 * matches its layout. */
static void break_layout(vlm_batch_t *b) {
  if (b->layout == VLMLOAD_INTERNVL && b->internvl.ntiles > 0)
    b->internvl.image_flags[0] ^= 1;
  else if (b->layout != VLMLOAD_INTERNVL && b->qwen.images.count > 0)
    b->qwen.images.grid_thw[1] -= 2;
}

typedef struct target {
  const vlmload_config_t *cfg;
  vlm_batch_t *batch;
} target_t;

/* pack.c's callback: the sample goes into the batch. */
static void place_sample(void *t, uint64_t id, const vlm_shape_t *s) {
  const target_t *to = t;
  place(to->cfg, to->batch, id, s);
}

/* The next pack of l's packer into b. */
static void pack_into(vlmload_t *l, vlm_batch_t *b) {
  target_t to = {&l->cfg, b};
  reset_batch(b);
  vlm__pack_next(&l->packer, place_sample, &to);
}

vlm_batch_t *vlmload_next(vlmload_t *l) {
  vlm_batch_t *b = &l->batch;
  if (l->ahead) b = take_ahead(l);
  else pack_into(l, b);
  l->produced += b->nsamples;
  if (++l->packs == l->cfg.fault_pack) break_layout(b);
  return b;
}

/* ---- checking ------------------------------------------------------------ */

/* A sample is checked by writing it again into scratch and comparing. */
static int same(const void *a, const void *b, size_t bytes) {
  return bytes == 0 || memcmp(a, b, bytes) == 0;
}

static int sample_intact(const vlmload_config_t *cfg, vlm_batch_t *b,
                         int32_t i, const vlm_shape_t *s, int64_t rows,
                         int32_t grids, int64_t video_rows,
                         int32_t video_grids, vlm_batch_t *scratch) {
  int32_t at = b->cu_lengths[i];
  vlm_sample_out_t got = out_at(cfg, b, at, rows, grids, video_rows,
                                video_grids);
  vlm_sample_out_t want = out_at(cfg, scratch, 0, 0, 0, 0, 0);
  vlm__write(cfg, vlm__key(cfg->seed, b->keys[i]), s, &want);
  size_t len = (size_t)s->len, row = vlm__row_floats(cfg) * sizeof(float);
  int ok = b->cu_lengths[i + 1] - at == s->len &&
           same(got.tokens, want.tokens, len * 8) &&
           same(got.labels, want.labels, len * 8) &&
           same(got.rows, want.rows, (size_t)s->rows * row);
  if (cfg->layout == VLMLOAD_INTERNVL)
    return ok && same(got.position_ids, want.position_ids, len * 8) &&
           same(got.loss_weight, want.loss_weight, len * 4) &&
           same(got.flags, want.flags, (size_t)s->rows * 8);
  return ok && same(got.attn_mask, want.attn_mask, len) &&
         same(got.grids, want.grids, (size_t)s->nimages * 12) &&
         same(got.video_rows, want.video_rows, (size_t)s->video_rows * row) &&
         same(got.video_grids, want.video_grids, (size_t)s->nvideos * 12);
}

int64_t vlmload_check(const vlmload_t *l, const vlm_batch_t *b) {
  /* The scratch: a second loader's buffers, one sample's worth. */
  vlmload_config_t one = l->cfg;
  one.headroom = 1.0;
  one.prefetch = one.hold = 0;
  vlmload_t *scratch = open_loader(&one, NULL, 0);
  if (!scratch) return -1;
  vlm_batch_t *mb = (vlm_batch_t *)b; /* read through out_at's pointers */
  int64_t bad = 0, rows = 0, video_rows = 0;
  int32_t grids = 0, video_grids = 0;
  for (int32_t i = 0; i < b->nsamples; i++) {
    vlm_shape_t s;
    uint64_t id = b->keys[i];
    int known = (id >> VLMLOAD_SLOT_SHIFT) < (uint64_t)l->cfg.slots;
    if (known) vlm__shape(&l->cfg, vlm__key(l->cfg.seed, id), &s);
    if (!known || !sample_intact(&l->cfg, mb, i, &s, rows, grids, video_rows,
                                 video_grids, &scratch->batch)) {
      bad++;
      if (!known) continue;
    }
    rows += s.rows, video_rows += s.video_rows;
    if (b->layout == VLMLOAD_INTERNVL) continue; /* no grid rows */
    grids += s.nimages, video_grids += s.nvideos;
  }
  int64_t have_rows, have_video_rows;
  int32_t have_grids, have_video_grids;
  counts(b, &have_rows, &have_grids, &have_video_rows, &have_video_grids);
  bad += have_rows != rows || have_grids != grids ||
         have_video_rows != video_rows || have_video_grids != video_grids;
  close_loader(scratch);
  return bad;
}

int64_t vlmload_produced(const vlmload_t *l) { return l->produced; }
