/* myload: the stand-in third-party VLM loader; see myload.h.
 *
 * Sample ids are (slot << 40) | index, index counting the slot's draws; a
 * sample's shape and content follow from (seed, id) alone, so two slots
 * never share a sample and any rank can re-derive one it received.
 */
#include "myload.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lengthgen.h"

#define ID_INDEX_BITS 40
#define MAX_SLOTS (INT32_C(1) << (64 - ID_INDEX_BITS))
#define VOCAB 151000u
/* Samples that did not fit the current pack wait for the next one; drawing
 * stops when this many wait, so every pack ends after a few misses. */
#define CARRY_MAX 32

typedef struct shape {
  int64_t len;     /* tokens, image placeholders included */
  int64_t patches; /* image patch rows, <= len / 2 */
} shape_t;

typedef struct carried {
  uint64_t id;
  shape_t shape;
} carried_t;

struct myload {
  myload_config_t cfg;
  uint64_t next_index;
  carried_t carry[CARRY_MAX];
  int ncarry;
  int64_t produced;
  /* The loader's own buffers: each call rebuilds the batch from these, as a
   * balancer may have rewritten the previous one. */
  int32_t *cu_seqlens, *position_ids, *patch_offsets;
  int64_t *input_ids;
  float *patches;
  uint64_t *sample_ids;
  int32_t capacity_samples;
  int64_t capacity_tokens, capacity_patches;
  myload_batch_t batch;
};

/* ---- what (seed, id) implies ------------------------------------------- */

static uint64_t mix64(uint64_t z) { /* splitmix64's finaliser */
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
  return z ^ (z >> 31);
}

static uint64_t sample_key(uint64_t seed, uint64_t id) {
  return mix64(mix64(seed) ^ id);
}

static uint64_t pos_hash(uint64_t key, int64_t pos) {
  return mix64(key + (uint64_t)(pos + 1) * 0x9E3779B97F4A7C15u);
}

/* A skewed length; an image (a square of 8..32 patches a side) for some.
 * Patches stay <= len / 2, so patch rows never outgrow half the tokens:
 * see alloc_buffers(). */
static shape_t sample_shape(const myload_config_t *c, uint64_t key) {
  static const int64_t image_sizes[] = {64, 256, 576, 1024};
  lengthgen_rng_t rng;
  lengthgen_seed(&rng, key);
  shape_t s = {lengthgen_lognormal(&rng, c->median, c->sigma, c->max_len),
               0};
  if (lengthgen_uniform(&rng) < c->image_fraction) {
    s.patches = image_sizes[lengthgen_below(&rng, 4)];
    if (s.patches > s.len / 2) s.patches = s.len / 2;
  }
  return s;
}

/* The image comes first: its placeholders, then text. */
static int64_t input_id(uint64_t key, const shape_t *s, int64_t pos) {
  if (pos < s->patches) return MYLOAD_IMAGE_TOKEN;
  return (int64_t)((pos_hash(key, pos) >> 32) % VOCAB);
}

/* In [-1, 1) with 24 significant bits: exact as a float. */
static float patch_value(uint64_t key, int64_t element) {
  uint64_t h = pos_hash(key ^ 0x7061746368ull, element); /* "patch" */
  return (float)(h >> 40) * 0x1p-23f - 1.0f;
}

static void fill_sample(uint64_t key, const shape_t *s, int64_t *ids,
                        int32_t *pos, float *patches) {
  for (int64_t i = 0; i < s->len; i++) {
    ids[i] = input_id(key, s, i);
    pos[i] = (int32_t)i;
  }
  for (int64_t e = 0; e < s->patches * MYLOAD_PATCH_DIM; e++)
    patches[e] = patch_value(key, e);
}

/* ---- open / close ------------------------------------------------------ */

myload_config_t myload_config_default(void) {
  return (myload_config_t){.pack_tokens = 32768, .median = 1500,
                            .sigma = 1.5, .max_len = 16384,
                            .image_fraction = 0.5,
                            .headroom = 2.0, .slots = 1};
}

static int fail(char *err, size_t errlen, const char *msg) {
  if (err && errlen) snprintf(err, errlen, "%s", msg);
  return -1;
}

static int check_config(const myload_config_t *c, char *err, size_t len) {
  if (c->slots < 1 || c->slots > MAX_SLOTS || c->slot < 0 ||
      c->slot >= c->slots)
    return fail(err, len, "slot must be in [0, slots), slots in [1, 2^24]");
  if (c->pack_tokens < 2 || c->max_len < 2 || c->max_len > c->pack_tokens)
    return fail(err, len, "need 2 <= max_len <= pack_tokens");
  if (!(c->headroom >= 1.0 && c->headroom <= 64.0))
    return fail(err, len, "headroom must be in [1, 64]");
  /* Offsets are int32: the whole capacity must index with them. */
  if ((double)c->pack_tokens * c->headroom >= (double)INT32_MAX)
    return fail(err, len, "pack_tokens * headroom must be below 2^31");
  if (!(c->median >= 1 && c->sigma >= 0 && c->image_fraction >= 0 &&
        c->image_fraction <= 1))
    return fail(err, len, "need median >= 1, sigma >= 0, image_fraction "
                          "in [0, 1]");
  return 0;
}

/* Patch capacity is half the token capacity: every sample has at most
 * len / 2 patches, so a batch that fits the token buffers (all a balancer's
 * token cap guarantees) fits the patch buffer too. */
static int alloc_buffers(myload_t *l, char *err, size_t errlen) {
  int64_t cap = (int64_t)ceil(l->cfg.headroom * (double)l->cfg.pack_tokens);
  l->capacity_tokens = cap;
  l->capacity_patches = cap / 2;
  l->capacity_samples = (int32_t)cap; /* every sample has >= 1 token */
  size_t nt = (size_t)cap, ns = (size_t)cap;
  l->cu_seqlens = malloc((ns + 1) * sizeof *l->cu_seqlens);
  l->patch_offsets = malloc((ns + 1) * sizeof *l->patch_offsets);
  l->sample_ids = malloc(ns * sizeof *l->sample_ids);
  l->input_ids = malloc(nt * sizeof *l->input_ids);
  l->position_ids = malloc(nt * sizeof *l->position_ids);
  l->patches = malloc((size_t)l->capacity_patches * MYLOAD_PATCH_DIM *
                      sizeof *l->patches);
  if (!l->cu_seqlens || !l->patch_offsets || !l->sample_ids ||
      !l->input_ids || !l->position_ids || !l->patches)
    return fail(err, errlen, "out of memory for the batch buffers");
  return 0;
}

myload_t *myload_open(const myload_config_t *cfg, char *err,
                        size_t errlen) {
  if (!cfg) {
    fail(err, errlen, "no configuration");
    return NULL;
  }
  if (check_config(cfg, err, errlen) < 0) return NULL;
  myload_t *l = calloc(1, sizeof *l);
  if (!l) {
    fail(err, errlen, "out of memory");
    return NULL;
  }
  l->cfg = *cfg;
  if (alloc_buffers(l, err, errlen) < 0) {
    myload_close(l);
    return NULL;
  }
  return l;
}

void myload_close(myload_t *l) {
  if (!l) return;
  free(l->cu_seqlens);
  free(l->patch_offsets);
  free(l->sample_ids);
  free(l->input_ids);
  free(l->position_ids);
  free(l->patches);
  free(l);
}

/* ---- packing ----------------------------------------------------------- */

static void reset_batch(myload_t *l) {
  l->batch = (myload_batch_t){
      .capacity_samples = l->capacity_samples,
      .capacity_tokens = l->capacity_tokens,
      .capacity_patches = l->capacity_patches,
      .cu_seqlens = l->cu_seqlens,
      .input_ids = l->input_ids,
      .position_ids = l->position_ids,
      .patch_offsets = l->patch_offsets,
      .patches = l->patches,
      .sample_ids = l->sample_ids,
  };
  l->cu_seqlens[0] = 0;
  l->patch_offsets[0] = 0;
}

static void place(myload_t *l, uint64_t id, const shape_t *s) {
  myload_batch_t *b = &l->batch;
  int32_t n = b->nsamples, at = b->cu_seqlens[n], pat = b->patch_offsets[n];
  fill_sample(sample_key(l->cfg.seed, id), s, b->input_ids + at,
              b->position_ids + at,
              b->patches + (size_t)pat * MYLOAD_PATCH_DIM);
  b->sample_ids[n] = id;
  b->cu_seqlens[n + 1] = at + (int32_t)s->len;
  b->patch_offsets[n + 1] = pat + (int32_t)s->patches;
  b->nsamples = n + 1;
  l->produced++;
}

/* Carried samples first, oldest first; returns the room left. */
static int64_t place_carried(myload_t *l, int64_t room) {
  int kept = 0;
  for (int i = 0; i < l->ncarry; i++) {
    carried_t c = l->carry[i];
    if (c.shape.len <= room) {
      place(l, c.id, &c.shape);
      room -= c.shape.len;
    } else {
      l->carry[kept++] = c;
    }
  }
  l->ncarry = kept;
  return room;
}

/* First fit: every length is <= the pack, so no pack is ever empty. */
myload_batch_t *myload_next(myload_t *l) {
  reset_batch(l);
  int64_t room = place_carried(l, l->cfg.pack_tokens);
  while (room > 0 && l->ncarry < CARRY_MAX) {
    /* 2^40 draws per slot, where ids would overflow, are out of reach. */
    uint64_t id = ((uint64_t)l->cfg.slot << ID_INDEX_BITS) | l->next_index++;
    shape_t s = sample_shape(&l->cfg, sample_key(l->cfg.seed, id));
    if (s.len <= room) {
      place(l, id, &s);
      room -= s.len;
    } else {
      l->carry[l->ncarry++] = (carried_t){id, s};
    }
  }
  return &l->batch;
}

/* ---- checking ---------------------------------------------------------- */

static int payload_intact(uint64_t key, const shape_t *s, const int64_t *ids,
                          const int32_t *pos, const float *patches) {
  for (int64_t i = 0; i < s->len; i++)
    if (ids[i] != input_id(key, s, i) || pos[i] != (int32_t)i) return 0;
  for (int64_t e = 0; e < s->patches * MYLOAD_PATCH_DIM; e++) {
    float want = patch_value(key, e);
    /* Bits, not float equality: a copy must be exact. */
    if (memcmp(&patches[e], &want, sizeof want) != 0) return 0;
  }
  return 1;
}

int myload_sample_intact(const myload_t *l, const myload_batch_t *b,
                          int32_t i) {
  uint64_t id = b->sample_ids[i];
  if ((id >> ID_INDEX_BITS) >= (uint64_t)l->cfg.slots) return 0;
  uint64_t key = sample_key(l->cfg.seed, id);
  shape_t s = sample_shape(&l->cfg, key);
  int32_t at = b->cu_seqlens[i], pat = b->patch_offsets[i];
  if (b->cu_seqlens[i + 1] - at != s.len ||
      b->patch_offsets[i + 1] - pat != s.patches)
    return 0;
  return payload_intact(key, &s, b->input_ids + at, b->position_ids + at,
                        b->patches + (size_t)pat * MYLOAD_PATCH_DIM);
}

int64_t myload_produced(const myload_t *l) { return l->produced; }
