/* The packs reftrain's ranks would draw, and their emulated compute times.
 *
 * Each DP slot gets its own libpackload loader with the run's (profile,
 * lengths, seed, slot, slots), exactly as reftrain opens it, so at a DP size
 * the demo also ran, the simulator sees the very same samples. The loader
 * runs lengths-only (no token payloads): at 4096 slots the payloads would be
 * half a billion tokens per step. Slots are drawn one at a time, all hand-offs
 * each, so only one loader's buffers exist at once. With --layout the packs
 * are vlmtrain's instead (vlmwork.c): samples with images, whose encoder
 * time adds to their compute. */
#include <stdlib.h>
#include <string.h>

#include "../lengthgen.h"
#include "../emu/emu.h"
#include "packload.h"
#include "sim.h"

static int grow(void **p, size_t want) {
  void *q = realloc(*p, want);
  if (q) *p = q;
  return q ? 0 : -1;
}

int sim_drawn_push(sim_drawn_list_t *l, int64_t len, const sim_vision_t *v) {
  if (l->n == l->cap) {
    int64_t want = 2 * l->n + 1024;
    if (grow((void **)&l->len, (size_t)want * sizeof *l->len) < 0 ||
        (v && grow((void **)&l->vision, (size_t)want * sizeof *l->vision) < 0))
      return -1;
    l->cap = want;
  }
  if (v) l->vision[l->n] = *v;
  l->len[l->n++] = len;
  return 0;
}

int sim_drawn_push_image(sim_drawn_list_t *l, const sim_image_t *image) {
  if (l->nimage == l->image_cap) {
    int64_t want = 2 * l->nimage + 1024;
    if (grow((void **)&l->image, (size_t)want * sizeof *l->image) < 0)
      return -1;
    l->image_cap = want;
  }
  l->image[l->nimage++] = *image;
  return 0;
}

void sim_image_bytes(const sim_config_t *c, int64_t patches, int64_t *in,
                     int64_t *out) {
  const vlmload_config_t *v = &c->vlm;
  /* bf16 embeddings of the LLM's width, as the LLM takes them. Qwen3-VL
   * also sends its deepstack features back (3 layers' merged tokens). */
  int64_t row = 2 * (int64_t)c->model.hidden;
  if (v->layout == VLMLOAD_INTERNVL) { /* a tile and its flag */
    *in = 3 * (int64_t)v->tile_size * v->tile_size * 4 + 8;
    *out = (int64_t)v->num_image_token * row;
    return;
  }
  int64_t merged = patches / (VLMLOAD_QWEN_MERGE * VLMLOAD_QWEN_MERGE);
  int64_t layers = v->layout == VLMLOAD_QWEN3VL ? 1 + 3 : 1;
  *in = patches * VLMLOAD_QWEN_ROW * 4 + 3 * 4; /* patch rows, grid row */
  *out = merged * row * layers;
}

/* A text pack's samples: their lengths. */
static int push_text(sim_drawn_list_t *l, const int32_t *cu, int32_t n) {
  for (int32_t i = 0; i < n; i++)
    if (sim_drawn_push(l, cu[i + 1] - cu[i], NULL) < 0) return -1;
  return 0;
}

static packload_t *open_slot(const sim_config_t *c, int32_t slot,
                             int32_t slots, char *err, size_t errlen) {
  packload_config_t cfg = packload_config_default();
  cfg.profile = c->profile;
  cfg.lengths_file = c->lengths;
  cfg.headroom = c->headroom;
  cfg.seed = c->seed;
  cfg.slot = slot;
  cfg.slots = slots;
  cfg.lengths_only = 1;
  return packload_open(&cfg, err, errlen);
}

/* One slot's text packs over all hand-offs, counts into count[h]. */
static int draw_text_slot(const sim_config_t *c, int32_t d, int32_t slots,
                          int64_t handoffs, sim_drawn_list_t *all,
                          int64_t *count, char *err, size_t errlen) {
  packload_t *pl = open_slot(c, d, slots, err, errlen);
  if (!pl) return -1;
  for (int64_t h = 0; h < handoffs; h++) {
    packload_batch_t *b = packload_next(pl);
    count[h] = b->nsamples;
    if (push_text(all, b->cu_seqlens, b->nsamples) < 0) {
      packload_close(pl);
      snprintf(err, errlen, "out of memory for the lengths");
      return -1;
    }
  }
  packload_close(pl);
  return 0;
}

/* Slot-major: every slot's samples over all hand-offs; count[d * H + h]. */
static int draw_slots(const sim_config_t *c, int32_t slots, int64_t handoffs,
                      sim_drawn_list_t *all, int64_t *count, char *err,
                      size_t errlen) {
  for (int32_t d = 0; d < slots; d++) {
    int64_t *cd = count + (int64_t)d * handoffs;
    if (!c->vision) {
      if (draw_text_slot(c, d, slots, handoffs, all, cd, err, errlen) < 0)
        return -1;
    } else if (sim_vlm_draw_slot(c, d, slots, handoffs, all, cd) < 0) {
      snprintf(err, errlen, "out of memory for the samples");
      return -1;
    }
  }
  return 0;
}

/* The vision arrays stay zero pages for text packs. */
static int alloc_samples(sim_workload_t *w, int64_t n) {
  size_t k = (size_t)n + 1;
  w->first = calloc((size_t)w->handoffs + 1, sizeof *w->first);
  w->len = malloc(k * sizeof *w->len);
  w->origin = malloc(k * sizeof *w->origin);
  w->seconds = malloc(k * sizeof *w->seconds);
  w->bytes = malloc(k * sizeof *w->bytes);
  w->patches = calloc(k, sizeof *w->patches);
  w->patches_sq = calloc(k, sizeof *w->patches_sq);
  w->vit = calloc(k, sizeof *w->vit);
  w->image_first = calloc(k + 1, sizeof *w->image_first);
  return w->first && w->len && w->origin && w->seconds && w->bytes &&
         w->patches && w->patches_sq && w->vit && w->image_first ? 0 : -1;
}

/* Drawn sample j (its images from image_at[j]) as sample k of the
 * workload; a text sample moves its tokens, labels, loss weights and id
 * (reftrain's fields). */
static void put_sample(sim_workload_t *w, int64_t k, const sim_drawn_list_t *l,
                       int64_t j, const int64_t *image_at, int32_t origin) {
  w->len[k] = l->len[j];
  w->origin[k] = origin;
  w->bytes[k] = SIM_BYTES_PER_TOKEN * l->len[j] + SIM_BYTES_PER_SAMPLE;
  w->image_first[k + 1] = w->image_first[k];
  if (!l->vision) return;
  const sim_vision_t *v = &l->vision[j];
  w->bytes[k] = v->bytes;
  w->patches[k] = v->patches;
  w->patches_sq[k] = v->patches_sq;
  w->vit[k] = v->vit;
  w->images += v->images;
  if (v->units > 0) /* with no image drawn at all, l->image is NULL */
    memcpy(w->image + w->image_first[k], l->image + image_at[j],
           (size_t)v->units * sizeof *w->image);
  w->image_first[k + 1] += v->units;
}

/* Where each drawn sample's images start in l->image; NULL when out of
 * memory. */
static int64_t *image_offsets(const sim_drawn_list_t *l) {
  int64_t *at = calloc((size_t)l->n + 1, sizeof *at);
  for (int64_t j = 0; at && j < l->n; j++)
    at[j + 1] = at[j] + (l->vision ? l->vision[j].units : 0);
  return at;
}

/* Hand-off-major, grouped by slot: the order the shim gathers samples in. */
static int arrange(const sim_drawn_list_t *all, const int64_t *count,
                   int32_t slots, sim_workload_t *w) {
  int64_t H = w->handoffs;
  int64_t *slot_at = calloc((size_t)slots + 1, sizeof *slot_at);
  int64_t *image_at = image_offsets(all);
  w->image = malloc(((size_t)all->nimage + 1) * sizeof *w->image);
  if (!slot_at || !image_at || !w->image || alloc_samples(w, all->n) < 0) {
    free(slot_at);
    free(image_at);
    return -1;
  }
  for (int32_t d = 0; d < slots; d++) {
    slot_at[d + 1] = slot_at[d];
    for (int64_t h = 0; h < H; h++) slot_at[d + 1] += count[(int64_t)d * H + h];
  }
  int64_t k = 0;
  for (int64_t h = 0; h < H; h++) {
    w->first[h] = k;
    for (int32_t d = 0; d < slots; d++) {
      int64_t m = count[(int64_t)d * H + h];
      for (int64_t i = 0; i < m; i++)
        put_sample(w, k++, all, slot_at[d] + i, image_at, d);
      slot_at[d] += m;
    }
  }
  w->first[H] = k;
  free(slot_at);
  free(image_at);
  return 0;
}

/* The trainers' emulated seconds of each sample alone: a pack's time is the
 * sum of its samples' (tiles, tokens and the per-sample cost all add up),
 * plus the vision encoder's for its images (vlmtrain's). */
static void sample_seconds(const sim_config_t *c, sim_workload_t *w) {
  const emu_model_t *m = &c->model;
  for (int64_t i = 0; i < w->first[w->handoffs]; i++) {
    int32_t cu[2] = {0, (int32_t)w->len[i]};
    w->seconds[i] = emu_pack_seconds(m, cu, 1);
    if (c->vision) w->seconds[i] += w->vit[i]; /* text: untouched pages */
  }
}

int sim_workload_draw(const sim_config_t *c, int32_t slots, int64_t handoffs,
                      sim_workload_t *w, char *err, size_t errlen) {
  memset(w, 0, sizeof *w);
  w->slots = slots;
  w->handoffs = handoffs;
  if (c->vision) {
    w->pack = c->vlm.pack_tokens;
  } else {
    const lengthgen_profile_t *p =
        lengthgen_profile_find(c->profile, err, errlen);
    if (!p) return -1;
    w->pack = p->pack;
  }
  sim_drawn_list_t all = {0};
  int64_t *count = calloc((size_t)slots * (size_t)handoffs, sizeof *count);
  int rc = count ? draw_slots(c, slots, handoffs, &all, count, err, errlen) : -1;
  if (!count) snprintf(err, errlen, "out of memory for the sample counts");
  if (rc == 0 && (rc = arrange(&all, count, slots, w)) < 0)
    snprintf(err, errlen, "out of memory for %lld samples", (long long)all.n);
  free(all.len);
  free(all.vision);
  free(all.image);
  free(count);
  if (rc < 0) {
    sim_workload_free(w);
    return -1;
  }
  sample_seconds(c, w);
  return 0;
}

void sim_workload_free(sim_workload_t *w) {
  free(w->first);
  free(w->len);
  free(w->origin);
  free(w->seconds);
  free(w->bytes);
  free(w->patches);
  free(w->patches_sq);
  free(w->vit);
  free(w->image_first);
  free(w->image);
  memset(w, 0, sizeof *w);
}

double sim_noise(const sim_config_t *c, int32_t rank, int64_t step,
                 int32_t micro) {
  return emu_noise(&c->model, c->seed, rank, step, micro);
}
