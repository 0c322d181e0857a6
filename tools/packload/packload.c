/* packload: the reference packing data loader; see packload.h.
 *
 * Sample ids are (slot << 40) | index, index counting the slot's draws. A
 * sample's length and payload follow from (seed, id) alone, not from a running
 * stream, so any rank can re-derive a sample it received from another slot.
 * The sequence of ids a slot draws is fixed, hence so is its stream: one slot
 * gets the same packs on every rank (tensor-parallel peers agree) and two
 * slots never share a sample.
 */
#include "packload.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../lengthgen.h"
#include "../mix.h"

#define ID_INDEX_BITS 40
#define ID_INDEX_MASK ((UINT64_C(1) << ID_INDEX_BITS) - 1)
#define MAX_SLOTS (INT32_C(1) << (64 - ID_INDEX_BITS))
#define VOCAB 32000u
/* Samples that did not fit the current pack wait here for the next one.
 * Drawing stops when it is full: a bounded carry means each pack ends after a
 * few misses, like a real loader, and every sample is placed soon after it is
 * drawn (the oldest carried sample always opens the next pack). */
#define CARRY_MAX 32

typedef struct carried {
  uint64_t id;
  int64_t len;
} carried_t;

struct packload {
  lengthgen_source_t src;
  lengthgen_file_t file; /* owns src.table when a lengths file is used */
  uint64_t seed;
  int32_t slot, slots;
  int lengths_only;    /* no token fields: see packload_config_t */
  uint64_t next_index; /* of the slot's next draw */
  carried_t carry[CARRY_MAX];
  int ncarry;
  int64_t produced_samples, produced_tokens;
  /* The loader's own buffers. The batch handed out points at them, but a
   * balancer may repoint or rewrite it, so each call starts from these. */
  int32_t *cu_seqlens, *tokens, *labels;
  float *loss_weights;
  uint64_t *sample_ids;
  int32_t capacity_samples;
  int64_t capacity_tokens;
  packload_batch_t batch;
};

/* ---- what (seed, id) implies ------------------------------------------- */

static uint64_t sample_key(uint64_t seed, uint64_t id) {
  return dpshim__tool_mix64(dpshim__tool_mix64(seed) ^ id);
}

static int64_t key_length(const lengthgen_source_t *src, uint64_t key) {
  lengthgen_rng_t rng;
  lengthgen_seed(&rng, key);
  return lengthgen_draw(src, &rng);
}

/* One hash per position gives both its token and its loss weight. */
static uint64_t pos_hash(uint64_t key, int64_t pos) {
  return dpshim__tool_mix64(key + (uint64_t)(pos + 1) * 0x9E3779B97F4A7C15u);
}

static int32_t hash_token(uint64_t h) { return (int32_t)((h >> 32) % VOCAB); }

/* In [0.5, 1): varied so that a swapped or shifted weight shows. */
static float hash_weight(uint64_t h) {
  return 0.5f + (float)(h & 0xFFu) / 512.0f;
}

static void fill_sample(uint64_t key, int64_t len, int32_t *tokens,
                        int32_t *labels, float *loss_weights) {
  for (int64_t i = 0; i < len; i++) {
    uint64_t h = pos_hash(key, i);
    tokens[i] = hash_token(h);
    loss_weights[i] = hash_weight(h);
  }
  for (int64_t i = 0; i + 1 < len; i++) labels[i] = tokens[i + 1];
  labels[len - 1] = PACKLOAD_IGNORE_LABEL;
  loss_weights[len - 1] = 0.0f;
}

static int id_valid(const packload_t *pl, uint64_t id) {
  return (id >> ID_INDEX_BITS) < (uint64_t)pl->slots;
}

/* ---- configuration ----------------------------------------------------- */

packload_config_t packload_config_default(void) {
  return (packload_config_t){
      .profile = "sft", .headroom = 2.0, .slot = 0, .slots = 1};
}

static int fail(char *err, size_t errlen, const char *msg) {
  if (err && errlen) snprintf(err, errlen, "%s", msg);
  return -1;
}

static int check_config(const packload_config_t *cfg, char *err,
                        size_t errlen) {
  if (cfg->slots < 1 || cfg->slots > MAX_SLOTS)
    return fail(err, errlen, "slots must be in [1, 2^24]");
  if (cfg->slot < 0 || cfg->slot >= cfg->slots)
    return fail(err, errlen, "slot must be in [0, slots)");
  if (!(cfg->headroom >= 1.0 && cfg->headroom <= 64.0))
    return fail(err, errlen, "headroom must be in [1, 64]");
  if (cfg->pack_tokens < 0)
    return fail(err, errlen, "pack_tokens must be >= 0");
  /* cu_seqlens are int32: the whole capacity must index with them. */
  if ((double)cfg->pack_tokens * cfg->headroom >= (double)INT32_MAX)
    return fail(err, errlen, "pack_tokens * headroom must be below 2^31");
  if (!cfg->profile && !cfg->lengths_file)
    return fail(err, errlen, "need a profile or a lengths file");
  if (cfg->lengths_file && !cfg->profile && cfg->pack_tokens == 0)
    return fail(err, errlen, "a lengths file needs pack_tokens or a profile");
  return 0;
}

/* The length source: the profile's distribution or the file's lengths, in
 * packs of cfg->pack_tokens when set, else of the profile's size. */
static int open_source(packload_t *pl, const packload_config_t *cfg,
                       char *err, size_t errlen) {
  const lengthgen_profile_t *prof = NULL;
  if (cfg->profile) {
    prof = lengthgen_profile_find(cfg->profile, err, errlen);
    /* A lengths file overrides the profile, so only its pack size matters,
     * but a misspelt name is still worth reporting. */
    if (!prof) return -1;
  }
  int64_t pack = cfg->pack_tokens ? cfg->pack_tokens : prof->pack;
  if (cfg->lengths_file) {
    if (lengthgen_file_load(cfg->lengths_file, &pl->file, err, errlen) < 0)
      return -1;
    if (pl->file.n == 0)
      return fail(err, errlen, "the lengths file holds no lengths");
    pl->src = lengthgen_source_file(&pl->file, pack);
  } else {
    pl->src = lengthgen_source_profile(prof);
    pl->src.pack = pack;
    if (pl->src.max > pack) pl->src.max = pack;
  }
  return 0;
}

static int alloc_buffers(packload_t *pl, double headroom, char *err,
                         size_t errlen) {
  int64_t cap = (int64_t)ceil(headroom * (double)pl->src.pack);
  pl->capacity_tokens = cap;
  pl->capacity_samples = (int32_t)cap; /* every sample has >= 1 token */
  size_t nt = (size_t)cap, ns = (size_t)cap;
  pl->cu_seqlens = malloc((ns + 1) * sizeof *pl->cu_seqlens);
  pl->sample_ids = malloc(ns * sizeof *pl->sample_ids);
  if (pl->lengths_only) {
    if (!pl->cu_seqlens || !pl->sample_ids)
      return fail(err, errlen, "out of memory for the batch buffers");
    return 0;
  }
  pl->tokens = malloc(nt * sizeof *pl->tokens);
  pl->labels = malloc(nt * sizeof *pl->labels);
  pl->loss_weights = malloc(nt * sizeof *pl->loss_weights);
  if (!pl->cu_seqlens || !pl->sample_ids || !pl->tokens || !pl->labels ||
      !pl->loss_weights)
    return fail(err, errlen, "out of memory for the batch buffers");
  return 0;
}

packload_t *packload_open(const packload_config_t *cfg, char *err,
                          size_t errlen) {
  if (!cfg) {
    fail(err, errlen, "no configuration");
    return NULL;
  }
  if (check_config(cfg, err, errlen) < 0) return NULL;
  packload_t *pl = calloc(1, sizeof *pl);
  if (!pl) {
    fail(err, errlen, "out of memory");
    return NULL;
  }
  pl->seed = cfg->seed;
  pl->slot = cfg->slot;
  pl->slots = cfg->slots;
  pl->lengths_only = cfg->lengths_only != 0;
  if (open_source(pl, cfg, err, errlen) < 0 ||
      alloc_buffers(pl, cfg->headroom, err, errlen) < 0) {
    packload_close(pl);
    return NULL;
  }
  return pl;
}

void packload_close(packload_t *pl) {
  if (!pl) return;
  lengthgen_file_free(&pl->file);
  free(pl->cu_seqlens);
  free(pl->sample_ids);
  free(pl->tokens);
  free(pl->labels);
  free(pl->loss_weights);
  free(pl);
}

/* ---- packing ----------------------------------------------------------- */

static void reset_batch(packload_t *pl) {
  pl->batch = (packload_batch_t){
      .nsamples = 0,
      .capacity_samples = pl->capacity_samples,
      .capacity_tokens = pl->capacity_tokens,
      .cu_seqlens = pl->cu_seqlens,
      .tokens = pl->tokens,
      .labels = pl->labels,
      .loss_weights = pl->loss_weights,
      .sample_ids = pl->sample_ids,
  };
  pl->cu_seqlens[0] = 0;
}

static void place(packload_t *pl, uint64_t id, int64_t len) {
  packload_batch_t *b = &pl->batch;
  int32_t n = b->nsamples, at = b->cu_seqlens[n];
  if (!pl->lengths_only)
    fill_sample(sample_key(pl->seed, id), len, b->tokens + at,
                b->labels + at, b->loss_weights + at);
  b->sample_ids[n] = id;
  b->cu_seqlens[n + 1] = at + (int32_t)len;
  b->nsamples = n + 1;
  pl->produced_samples++;
  pl->produced_tokens += len;
}

/* Carried samples first, oldest first; those that still do not fit stay in
 * order. Returns the room left. */
static int64_t place_carried(packload_t *pl, int64_t room) {
  int kept = 0;
  for (int i = 0; i < pl->ncarry; i++) {
    carried_t c = pl->carry[i];
    if (c.len <= room) {
      place(pl, c.id, c.len);
      room -= c.len;
    } else {
      pl->carry[kept++] = c;
    }
  }
  pl->ncarry = kept;
  return room;
}

/* Index overflow past 2^40 draws per slot is out of reach in practice. */
static uint64_t draw_id(packload_t *pl) {
  return ((uint64_t)pl->slot << ID_INDEX_BITS) |
         (pl->next_index++ & ID_INDEX_MASK);
}

packload_batch_t *packload_next(packload_t *pl) {
  reset_batch(pl);
  /* The pack starts empty and every length is <= pack, so the first carried
   * sample, or else the first draw, fits: no pack is ever empty. */
  int64_t room = place_carried(pl, pl->src.pack);
  while (room > 0 && pl->ncarry < CARRY_MAX) {
    uint64_t id = draw_id(pl);
    int64_t len = key_length(&pl->src, sample_key(pl->seed, id));
    if (len <= room) {
      place(pl, id, len);
      room -= len;
    } else {
      pl->carry[pl->ncarry++] = (carried_t){id, len};
    }
  }
  return &pl->batch;
}

/* ---- checking ---------------------------------------------------------- */

enum packload_verdict packload_verify(const packload_t *pl, uint64_t id,
                                      int64_t len, const int32_t *tokens,
                                      const int32_t *labels,
                                      const float *loss_weights) {
  if (!id_valid(pl, id)) return PACKLOAD_BAD_ID;
  uint64_t key = sample_key(pl->seed, id);
  if (len != key_length(&pl->src, key)) return PACKLOAD_BAD_LENGTH;
  for (int64_t i = 0; i < len; i++) {
    uint64_t h = pos_hash(key, i);
    int last = i + 1 == len;
    int32_t label = last ? PACKLOAD_IGNORE_LABEL
                         : hash_token(pos_hash(key, i + 1));
    float weight = last ? 0.0f : hash_weight(h);
    /* Weights compare as bits: a copy must be exact, and float equality
     * would let -0.0 pass for 0.0. */
    if (tokens[i] != hash_token(h) || labels[i] != label ||
        memcmp(&loss_weights[i], &weight, sizeof weight) != 0)
      return PACKLOAD_BAD_PAYLOAD;
  }
  return PACKLOAD_INTACT;
}

void packload_produced(const packload_t *pl, int64_t *samples,
                       int64_t *tokens) {
  if (samples) *samples = pl->produced_samples;
  if (tokens) *tokens = pl->produced_tokens;
}
