/* Qwen2-VL / Qwen3-VL's batch as dpshim fields; see layout.h and
 * <dpshim/vlm.h>.
 *
 * The batch does not say which images are whose: images belong to samples
 * in order, each taking t*h*w / merge^2 of its sample's pad tokens, so any
 * number of images (and videos) per sample, and text-only samples between
 * them, are placed right (the original indexed grid rows by sample).
 *
 * The vision encoder sees each image (or video) of grid (t, h, w) as t*h*w
 * patches, attended whole, or frame by frame (h*w each) for a video of a
 * model whose encoder attends to frames apart (Qwen3-VL). */
#include <stdint.h>
#include <stdio.h>

#include "layout.h"

#define WHAT "Qwen-VL batch"
/* The offsets arrays: per medium, its patch rows and its grid rows. */
#define ROWS(m) (2 * (m))
#define GRIDS(m) (2 * (m) + 1)

typedef struct medium {
  const char *rows_name, *grid_name;
  const dpshim_qwen_media_t *m;
} medium_t;

static int bad(char *msg, size_t len, const char *what) {
  snprintf(msg, len, WHAT ": %s", what);
  return DPSHIM_EINVAL;
}

/* Grid row j's patch rows and pad tokens, or -1 with msg. */
static int64_t grid_rows(const medium_t *md, int32_t j, int32_t merge,
                         int64_t *pads, char *msg, size_t len) {
  const int32_t *g = md->m->grid_thw + 3 * (size_t)j;
  int ok = g[0] >= 1 && g[1] >= 1 && g[2] >= 1 &&
           (int64_t)g[0] * g[1] <= INT32_MAX; /* t*h*w then fits int64 */
  int64_t rows = ok ? (int64_t)g[0] * g[1] * g[2] : 0;
  int64_t per = (int64_t)merge * merge;
  if (!ok || rows > INT32_MAX || rows % per) {
    snprintf(msg, len, WHAT ": %s row %d is (%d, %d, %d), expected t, h, w "
             ">= 1 with t*h*w a multiple of merge^2 (%lld), at most "
             "2147483647", md->grid_name, (int)j, (int)g[0], (int)g[1],
             (int)g[2], (long long)per);
    return -1;
  }
  *pads = rows / per;
  return rows;
}

/* Sample i's images (or videos) from grid row *j on, by its pad tokens. */
static int take_sample(const dpshim_qwen_batch_t *b, const medium_t *md,
                       int32_t i, int32_t *j, int64_t *rows, char *msg,
                       size_t len) {
  int64_t left = dpshim__layout_count(b->tokens, b->cu_lengths[i],
                                      b->cu_lengths[i + 1], md->m->pad_token);
  while (left > 0) {
    int64_t pads = 0, r = *j < md->m->count
                              ? grid_rows(md, *j, b->merge, &pads, msg, len)
                              : 0;
    if (r < 0) return DPSHIM_EINVAL;
    if (*j >= md->m->count || pads > left) {
      snprintf(msg, len, WHAT ": sample %d has %lld pad tokens left for %s "
               "row %d, which %s", (int)i, (long long)left, md->grid_name,
               (int)*j, *j < md->m->count ? "needs more" : "does not exist");
      return DPSHIM_EINVAL;
    }
    left -= pads;
    *rows += r;
    ++*j;
  }
  return 0;
}

static int media_offsets(const dpshim_qwen_batch_t *b, const medium_t *md,
                         int32_t *rows_off, int32_t *grid_off, char *msg,
                         size_t len) {
  if (md->m->count < 0 || md->m->count > md->m->capacity ||
      (md->m->count > 0 && !md->m->grid_thw)) {
    snprintf(msg, len, WHAT ": %s holds %d rows, expected 0..its capacity "
             "(%d)", md->grid_name, (int)md->m->count, (int)md->m->capacity);
    return DPSHIM_EINVAL;
  }
  int32_t j = 0;
  int64_t rows = 0;
  rows_off[0] = grid_off[0] = 0;
  for (int32_t i = 0; i < b->nsamples; i++) {
    if (take_sample(b, md, i, &j, &rows, msg, len) < 0) return DPSHIM_EINVAL;
    if (rows > md->m->capacity_rows) {
      snprintf(msg, len, WHAT ": the grids of samples 0..%d need %lld %s "
               "rows, capacity_rows is %lld", (int)i, (long long)rows,
               md->rows_name, (long long)md->m->capacity_rows);
      return DPSHIM_EINVAL;
    }
    rows_off[i + 1] = (int32_t)rows;
    grid_off[i + 1] = j;
  }
  if (j != md->m->count) {
    snprintf(msg, len, WHAT ": the samples' pad tokens take %d %s rows, the "
             "batch has %d", (int)j, md->grid_name, (int)md->m->count);
    return DPSHIM_EINVAL;
  }
  return 0;
}

static void media_fields(const medium_t *md, size_t row_bytes,
                         int32_t *rows_off, int32_t *grid_off,
                         dpshim_field_t *f, int32_t *n) {
  f[(*n)++] = (dpshim_field_t){md->rows_name, md->m->rows, row_bytes,
                               rows_off, md->m->capacity_rows};
  f[(*n)++] = (dpshim_field_t){md->grid_name, md->m->grid_thw,
                               3 * sizeof *md->m->grid_thw, grid_off,
                               md->m->capacity};
}

/* Adds each sample's images of medium md, whose grid rows the sample owns
 * by grid_off, to vision[]; `frames`: each frame is attended apart. */
static void media_vision(const dpshim_qwen_batch_t *b, const medium_t *md,
                         const int32_t *grid_off, int frames,
                         dpshim_vision_t *vision) {
  for (int32_t i = 0; vision && i < b->nsamples; i++) {
    for (int32_t j = grid_off[i]; j < grid_off[i + 1]; j++) {
      const int32_t *g = md->m->grid_thw + 3 * (size_t)j;
      int64_t frame = (int64_t)g[1] * g[2], patches = g[0] * frame;
      vision[i].patches += patches;
      vision[i].patches_sq += frames ? g[0] * frame * frame : patches * patches;
    }
  }
}

int dpshim__qwen_describe(const dpshim_qwen_batch_t *b,
                          dpshim__layout_scratch_t *s, dpshim_batch_t *batch,
                          char *msg, size_t len) {
  if (b->merge < 1 || b->row_bytes == 0)
    return bad(msg, len, "merge and row_bytes must be >= 1");
  int rc = dpshim__layout_check_tokens(WHAT, b->nsamples, b->capacity_samples,
                                       b->cu_lengths, b->tokens,
                                       b->capacity_tokens, msg, len);
  if (rc < 0) return rc;
  medium_t md[2] = {{"imgs", "image_grid_thw", &b->images},
                    {"pixel_values_videos", "video_grid_thw", &b->videos}};
  int32_t *cu = b->cu_lengths, n = 0;
  int64_t ct = b->capacity_tokens;
  dpshim_field_t *f = s->fields;
  f[n++] = (dpshim_field_t){"tokens", b->tokens, sizeof *b->tokens, cu, ct};
  f[n++] = (dpshim_field_t){"labels", b->labels, sizeof *b->labels, cu, ct};
  if (b->attn_mask)
    f[n++] = (dpshim_field_t){"attn_mask", b->attn_mask, 1, cu, ct};
  for (int32_t i = 0; s->vision && i < b->nsamples; i++)
    s->vision[i] = (dpshim_vision_t){0, 0};
  for (int k = 0; k < 2; k++) {
    rc = media_offsets(b, &md[k], s->offsets[ROWS(k)], s->offsets[GRIDS(k)],
                       msg, len);
    if (rc < 0) return rc;
    media_fields(&md[k], b->row_bytes, s->offsets[ROWS(k)],
                 s->offsets[GRIDS(k)], f, &n);
    media_vision(b, &md[k], s->offsets[GRIDS(k)],
                 k == 1 && b->video_frames_apart, s->vision);
  }
  if (b->keys)
    f[n++] = (dpshim_field_t){"keys", b->keys, sizeof *b->keys, NULL,
                              b->capacity_samples};
  *batch = (dpshim_batch_t){b->nsamples, b->capacity_samples, cu, n, f,
                            s->vision};
  return 0;
}

void dpshim__qwen_finish(dpshim_qwen_batch_t *b,
                         const dpshim__layout_scratch_t *s,
                         const dpshim_batch_t *batch) {
  int32_t n = batch->nsamples, longest = 0;
  b->nsamples = n;
  b->images.count = s->offsets[GRIDS(0)][n];
  b->videos.count = s->offsets[GRIDS(1)][n];
  for (int32_t i = 0; i < n; i++) {
    int32_t l = b->cu_lengths[i + 1] - b->cu_lengths[i];
    if (l > longest) longest = l;
  }
  if (b->max_lengths) *b->max_lengths = longest;
}
