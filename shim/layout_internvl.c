/* InternVL's batch as dpshim fields; see layout.h and <dpshim/vlm.h>.
 *
 * The batch does not say which tiles are whose: a sample's real tiles are
 * its <IMG_CONTEXT> tokens / num_image_token (not / 256: the original's
 * mistake), a text-only sample's are its dummy tiles. The tiles then
 * follow one another sample by sample, and their flags must agree.
 *
 * The vision encoder sees every tile, dummy ones too, as one image of
 * 4 * num_image_token patches (InternVL's pixel shuffle merges 2x2 patches
 * into one <IMG_CONTEXT> token). */
#include <stdio.h>

#include "layout.h"

#define WHAT "InternVL batch"
#define TILES 0 /* the offsets array of the tiles */

/* Tiles of sample i, or -1 with msg; *real: whether they are images. */
static int64_t sample_tiles(const dpshim_internvl_batch_t *b, int32_t i,
                            int *real, char *msg, size_t len) {
  int64_t ctx = dpshim__layout_count(b->tokens, b->cu_lengths[i],
                                     b->cu_lengths[i + 1], b->context_token);
  if (ctx % b->num_image_token) {
    snprintf(msg, len, WHAT ": sample %d has %lld <IMG_CONTEXT> tokens, not "
             "a multiple of num_image_token (%d)", (int)i, (long long)ctx,
             (int)b->num_image_token);
    return -1;
  }
  *real = ctx > 0;
  return *real ? ctx / b->num_image_token : b->dummy_tiles;
}

/* The flags of sample i's tiles [t0, t1): all `want`. */
static int flags_match(const dpshim_internvl_batch_t *b, int32_t i,
                       int64_t t0, int64_t t1, int64_t want, char *msg,
                       size_t len) {
  for (int64_t t = t0; t < t1; t++) {
    if (b->image_flags[t] != want) {
      snprintf(msg, len, WHAT ": image_flags[%lld] of sample %d is %lld, "
               "expected %lld (%s tile)", (long long)t, (int)i,
               (long long)b->image_flags[t], (long long)want,
               want ? "a real" : "a dummy");
      return 0;
    }
  }
  return 1;
}

static int check_params(const dpshim_internvl_batch_t *b, char *msg,
                        size_t len) {
  if (b->num_image_token < 1 || b->dummy_tiles < 0 || b->dummy_tiles > 1 ||
      b->tile_bytes == 0) {
    snprintf(msg, len, WHAT ": num_image_token %d (expected >= 1), "
             "dummy_tiles %d (expected 0 or 1), tile_bytes %zu (expected "
             ">= 1)", (int)b->num_image_token, (int)b->dummy_tiles,
             b->tile_bytes);
    return DPSHIM_EINVAL;
  }
  if (b->ntiles < 0 || b->ntiles > b->capacity_tiles ||
      (b->ntiles > 0 && !b->image_flags)) {
    snprintf(msg, len, WHAT ": ntiles %d, expected 0..capacity_tiles "
             "(%lld) with image_flags", (int)b->ntiles,
             (long long)b->capacity_tiles);
    return DPSHIM_EINVAL;
  }
  return dpshim__layout_check_tokens(WHAT, b->nsamples, b->capacity_samples,
                                     b->cu_lengths, b->tokens,
                                     b->capacity_tokens, msg, len);
}

static int tile_offsets(const dpshim_internvl_batch_t *b, int32_t *off,
                        char *msg, size_t len) {
  off[0] = 0;
  for (int32_t i = 0; i < b->nsamples; i++) {
    int real = 0;
    int64_t n = sample_tiles(b, i, &real, msg, len);
    if (n < 0) return DPSHIM_EINVAL;
    if (off[i] + n > b->ntiles) {
      snprintf(msg, len, WHAT ": samples 0..%d need %lld tiles, the batch "
               "has ntiles %d", (int)i, (long long)(off[i] + n),
               (int)b->ntiles);
      return DPSHIM_EINVAL;
    }
    if (!flags_match(b, i, off[i], off[i] + n, real, msg, len))
      return DPSHIM_EINVAL;
    off[i + 1] = off[i] + (int32_t)n;
  }
  if (off[b->nsamples] != b->ntiles) {
    snprintf(msg, len, WHAT ": the samples own %d tiles, the batch has "
             "ntiles %d", (int)off[b->nsamples], (int)b->ntiles);
    return DPSHIM_EINVAL;
  }
  return 0;
}

static void tile_vision(const dpshim_internvl_batch_t *b, const int32_t *off,
                        dpshim_vision_t *vision) {
  int64_t patches = 4 * (int64_t)b->num_image_token;
  for (int32_t i = 0; vision && i < b->nsamples; i++) {
    int64_t tiles = off[i + 1] - off[i];
    vision[i] = (dpshim_vision_t){tiles * patches, tiles * patches * patches};
  }
}

int dpshim__internvl_describe(const dpshim_internvl_batch_t *b,
                              dpshim__layout_scratch_t *s,
                              dpshim_batch_t *batch, char *msg, size_t len) {
  int rc = check_params(b, msg, len);
  if (rc == 0) rc = tile_offsets(b, s->offsets[TILES], msg, len);
  if (rc < 0) return rc;
  int32_t *cu = b->cu_lengths, *tiles = s->offsets[TILES];
  int64_t ct = b->capacity_tokens, cs = b->capacity_samples;
  dpshim_field_t *f = s->fields;
  int32_t n = 0;
  f[n++] = (dpshim_field_t){"tokens", b->tokens, sizeof *b->tokens, cu, ct};
  f[n++] = (dpshim_field_t){"labels", b->labels, sizeof *b->labels, cu, ct};
  f[n++] = (dpshim_field_t){"loss_weight", b->loss_weight,
                            sizeof *b->loss_weight, cu, ct};
  f[n++] = (dpshim_field_t){"position_ids", b->position_ids,
                            sizeof *b->position_ids, cu, ct};
  f[n++] = (dpshim_field_t){"imgs", b->imgs, b->tile_bytes, tiles,
                            b->capacity_tiles};
  f[n++] = (dpshim_field_t){"image_flags", b->image_flags,
                            sizeof *b->image_flags, tiles, b->capacity_tiles};
  if (b->keys)
    f[n++] = (dpshim_field_t){"keys", b->keys, sizeof *b->keys, NULL, cs};
  tile_vision(b, tiles, s->vision);
  *batch = (dpshim_batch_t){b->nsamples, b->capacity_samples, cu, n, f,
                            s->vision};
  return 0;
}

void dpshim__internvl_finish(dpshim_internvl_batch_t *b,
                             const dpshim__layout_scratch_t *s,
                             const dpshim_batch_t *batch) {
  b->nsamples = batch->nsamples;
  b->ntiles = s->offsets[TILES][batch->nsamples];
}
