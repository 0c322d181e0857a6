/* One sample's content in its layout, from its key: tokens with the
 * family's image markers, labels, positions, and pixel rows. Writing and
 * checking share it: a check writes the sample again and compares. */
#include <string.h>

#include "internal.h"

#define VOCAB 92000u /* text ids stay below every special id */

size_t vlm__row_floats(const vlmload_config_t *c) {
  return c->layout == VLMLOAD_INTERNVL
             ? 3 * (size_t)c->tile_size * (size_t)c->tile_size
             : VLMLOAD_QWEN_ROW;
}

/* Bytes of one sample in the batch's buffers: its token-aligned fields,
 * its rows (tiles, or image and video patch rows), their flags or grid
 * rows, its offset and key. */
int64_t vlm__sample_bytes(const vlmload_config_t *c, const vlm_shape_t *s) {
  int64_t row = (int64_t)(vlm__row_floats(c) * sizeof(float));
  int64_t fixed = (int64_t)(sizeof(int32_t) + sizeof(uint64_t));
  if (c->layout == VLMLOAD_INTERNVL) /* tokens, labels, positions, weights */
    return s->len * (3 * 8 + 4) + s->rows * (row + 8) + fixed;
  int64_t grids = 3 * (int64_t)sizeof(int32_t) * (s->nimages + s->nvideos);
  return s->len * (8 + 8 + 1) + (s->rows + s->video_rows) * row + grids +
         fixed;
}

/* ---- tokens ------------------------------------------------------------ */

typedef struct cursor {
  const vlm_sample_out_t *out;
  int64_t at;
  uint64_t key;
} cursor_t;

/* One token; `text`: a text token is learnt, an image token is not. */
static void put(cursor_t *c, int64_t token, int text) {
  const vlm_sample_out_t *o = c->out;
  o->tokens[c->at] = token;
  o->labels[c->at] = text ? token : VLMLOAD_IGNORE;
  if (o->position_ids) o->position_ids[c->at] = c->at;
  if (o->loss_weight) o->loss_weight[c->at] = text ? 1.0f : 0.0f;
  if (o->attn_mask) o->attn_mask[c->at] = 0;
  c->at++;
}

static void put_run(cursor_t *c, int64_t token, int64_t n) {
  for (int64_t i = 0; i < n; i++) put(c, token, 0);
}

static void put_text(cursor_t *c, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    put(c, (int64_t)(dpshim__tool_mix64(c->key + (uint64_t)c->at) % VOCAB), 1);
}

static void internvl_tokens(const vlmload_config_t *cfg, cursor_t *c,
                            const vlm_shape_t *s) {
  for (int32_t k = 0; k < s->nimages; k++) {
    put(c, VLMLOAD_INTERNVL_IMG_START, 0);
    put_run(c, VLMLOAD_INTERNVL_CONTEXT,
            (int64_t)s->image[k].t * cfg->num_image_token);
    put(c, VLMLOAD_INTERNVL_IMG_END, 0);
  }
}

static int64_t pads(int64_t patches) {
  return patches / (VLMLOAD_QWEN_MERGE * VLMLOAD_QWEN_MERGE);
}

static void qwen_tokens(const vlmload_config_t *cfg, cursor_t *c,
                        const vlm_shape_t *s) {
  for (int32_t k = 0; k < s->nimages; k++) {
    const vlm_media_t *m = &s->image[k];
    put(c, VLMLOAD_QWEN_VISION_START, 0);
    put_run(c, VLMLOAD_QWEN_IMAGE_PAD, pads((int64_t)m->t * m->h * m->w));
    put(c, VLMLOAD_QWEN_VISION_END, 0);
  }
  for (int32_t k = 0; k < s->nvideos; k++) {
    const vlm_media_t *v = &s->video[k];
    int32_t frames = cfg->layout == VLMLOAD_QWEN3VL ? v->t : 1;
    int64_t per_frame = pads((int64_t)v->t * v->h * v->w) / frames;
    for (int32_t f = 0; f < frames; f++) {
      if (frames > 1) put(c, 1000 + f, 1); /* "<f seconds>" */
      put(c, VLMLOAD_QWEN_VISION_START, 0);
      put_run(c, VLMLOAD_QWEN_VIDEO_PAD, per_frame);
      put(c, VLMLOAD_QWEN_VISION_END, 0);
    }
  }
}

/* ---- pixels ------------------------------------------------------------ */

/* n floats in [-1, 1) with 24 significant bits (exact as floats), a stream
 * of its own for each (key, what). */
static void fill(float *dst, size_t n, uint64_t key, uint64_t what) {
  uint64_t z = dpshim__tool_mix64(key ^ dpshim__tool_mix64(what + 0x70697865ull)); /* "pixe" */
  for (size_t e = 0; e < n; e += 2) {
    z = dpshim__tool_mix64(z + 0x9E3779B97F4A7C15u);
    dst[e] = (float)(z >> 40) * 0x1p-23f - 1.0f;
    if (e + 1 < n) dst[e + 1] = (float)((z >> 8) & 0xFFFFFF) * 0x1p-23f - 1.0f;
  }
}

static void internvl_pixels(const vlmload_config_t *cfg, uint64_t key,
                            const vlm_shape_t *s, const vlm_sample_out_t *o) {
  size_t per = vlm__row_floats(cfg);
  int64_t tile = 0;
  for (int32_t k = 0; k < s->nimages; k++)
    for (int32_t t = 0; t < s->image[k].t; t++, tile++) {
      fill(o->rows + (size_t)tile * per, per, key, (uint64_t)tile);
      o->flags[tile] = 1;
    }
  if (s->nimages == 0) { /* the dummy tile, moved with its sample */
    fill(o->rows, per, key, 0xD0D0);
    o->flags[0] = 0;
  }
}

static void qwen_media(uint64_t key, const vlm_media_t *m, int32_t n,
                       uint64_t what, float *rows, int32_t *grids) {
  size_t at = 0;
  for (int32_t k = 0; k < n; k++) {
    size_t nrows = (size_t)m[k].t * (size_t)m[k].h * (size_t)m[k].w;
    fill(rows + at * VLMLOAD_QWEN_ROW, nrows * VLMLOAD_QWEN_ROW, key,
         what + (uint64_t)k);
    at += nrows;
    grids[3 * k] = m[k].t, grids[3 * k + 1] = m[k].h, grids[3 * k + 2] = m[k].w;
  }
}

void vlm__write(const vlmload_config_t *cfg, uint64_t key,
                const vlm_shape_t *s, const vlm_sample_out_t *out) {
  cursor_t c = {out, 0, key};
  if (cfg->layout == VLMLOAD_INTERNVL) {
    internvl_tokens(cfg, &c, s);
    put_text(&c, s->text);
    internvl_pixels(cfg, key, s, out);
  } else {
    qwen_tokens(cfg, &c, s);
    put_text(&c, s->text);
    qwen_media(key, s->image, s->nimages, 0x1000, out->rows, out->grids);
    qwen_media(key, s->video, s->nvideos, 0x2000, out->video_rows,
               out->video_grids);
  }
}
