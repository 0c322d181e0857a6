/* What (seed, id) implies about a sample: its text length and its images
 * and videos, sizes heavy-tailed (Pareto), within one pack. */
#include <math.h>

#include "internal.h"

uint64_t vlm__key(uint64_t seed, uint64_t id) {
  return dpshim__tool_mix64(dpshim__tool_mix64(seed) ^ id);
}

/* Pareto(alpha) on [1, max], as an integer: most 1-2, a few at max. */
static int32_t pareto(lengthgen_rng_t *rng, double alpha, int32_t max) {
  double u = 1.0 - lengthgen_uniform(rng); /* (0, 1] */
  double v = floor(pow(u, -1.0 / alpha));
  return v >= max ? max : (int32_t)v;
}

/* 1..max images, fewer more likely. */
static int32_t how_many(lengthgen_rng_t *rng, int32_t max) {
  double u = lengthgen_uniform(rng);
  return 1 + (int32_t)(u * u * max);
}

static vlm_media_t internvl_image(const vlmload_config_t *c,
                                  lengthgen_rng_t *rng) {
  return (vlm_media_t){pareto(rng, 1.1, c->max_tiles), 0, 0};
}

/* Sides even, so that t*h*w / merge^2 pad tokens are whole. */
static vlm_media_t qwen_media(lengthgen_rng_t *rng, int32_t t,
                              int32_t max_side) {
  int32_t half = max_side / 2;
  int32_t h = 2 * (1 + pareto(rng, 1.3, half - 1));
  return (vlm_media_t){t, h, 2 * (1 + pareto(rng, 1.3, half - 1))};
}

static int qwen3(const vlmload_config_t *c) {
  return c->layout == VLMLOAD_QWEN3VL;
}

/* Tokens of one image or video in its sample, markers included. */
static int64_t media_tokens(const vlmload_config_t *c, const vlm_media_t *m,
                            int video) {
  if (c->layout == VLMLOAD_INTERNVL)
    return (int64_t)m->t * c->num_image_token + 2;
  int64_t per = VLMLOAD_QWEN_MERGE * VLMLOAD_QWEN_MERGE;
  int64_t pads = (int64_t)m->t * m->h * m->w / per;
  /* Qwen3-VL: each frame its own timestamp, start and end. */
  return pads + (video && qwen3(c) ? 3 * (int64_t)m->t : 2);
}

static void measure(const vlmload_config_t *c, vlm_shape_t *s) {
  s->len = s->text;
  s->rows = s->video_rows = 0;
  for (int32_t k = 0; k < s->nimages; k++) {
    s->len += media_tokens(c, &s->image[k], 0);
    s->rows += c->layout == VLMLOAD_INTERNVL
                   ? s->image[k].t
                   : (int64_t)s->image[k].t * s->image[k].h * s->image[k].w;
  }
  for (int32_t k = 0; k < s->nvideos; k++) {
    const vlm_media_t *v = &s->video[k];
    s->len += media_tokens(c, v, 1);
    s->video_rows += (int64_t)v->t * v->h * v->w;
  }
  if (c->layout == VLMLOAD_INTERNVL && s->nimages == 0) s->rows = 1;
}

static void draw_media(const vlmload_config_t *c, lengthgen_rng_t *rng,
                       vlm_shape_t *s) {
  if (lengthgen_uniform(rng) < c->image_fraction) {
    s->nimages = how_many(rng, c->max_images);
    for (int32_t k = 0; k < s->nimages; k++)
      s->image[k] = c->layout == VLMLOAD_INTERNVL
                        ? internvl_image(c, rng)
                        : qwen_media(rng, 1, c->max_side);
  }
  if (c->layout != VLMLOAD_INTERNVL &&
      lengthgen_uniform(rng) < c->video_fraction) {
    s->nvideos = 1;
    int32_t frames =
        2 * (1 + (int32_t)lengthgen_below(rng, (uint64_t)c->max_frames / 2));
    s->video[0] = qwen_media(rng, frames, c->max_side / 2);
  }
}

void vlm__shape(const vlmload_config_t *c, uint64_t key, vlm_shape_t *s) {
  lengthgen_rng_t rng;
  lengthgen_seed(&rng, key);
  *s = (vlm_shape_t){0};
  s->text = lengthgen_lognormal(&rng, c->text_median, c->text_sigma,
                                c->pack_tokens / 2);
  if (s->text < VLM_MIN_TEXT) s->text = VLM_MIN_TEXT;
  draw_media(c, &rng, s);
  measure(c, s);
  /* Within one pack: media go from the last until the sample fits. */
  while (s->len > c->pack_tokens && (s->nvideos || s->nimages)) {
    if (s->nvideos) s->nvideos--;
    else s->nimages--;
    measure(c, s);
  }
  /* And within a pack's image rows (a text-only InternVL sample's dummy
   * tile is 1, within any image_rows >= 1). */
  while (c->image_rows > 0 && s->rows > c->image_rows && s->nimages) {
    s->nimages--;
    measure(c, s);
  }
}
