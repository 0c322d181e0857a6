/* vit: the reference vision encoder (see vit.h). */
#include "vit.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../emu/emu.h"
#include "../mix.h"
#include "../timeutil.h"

/* A grid side beyond this is malformed: keeps t*h*w and its sums far from
 * int64 overflow. */
#define MAX_SIDE (1 << 20)
#define MAX_ROWS ((int64_t)1 << 40)
/* emu_vit_seconds() is fwd+bwd at 3x a forward's FLOPs (a backward is two
 * forwards): the forward sleeps a third, the backward the rest. */
#define FORWARD_SHARE (1.0 / 3.0)

struct vit {
  vit_config_t cfg;
  emu_model_t model;
  double charged; /* seconds slept so far */
  char err[200];
};

/* One block (an image, or a frame attended apart) as the backward needs
 * it. */
typedef struct saved_image {
  uint64_t hash;
  int64_t rows, tokens; /* patch rows (or 1 tile), embedding rows */
} saved_image_t;

struct vit_saved {
  int64_t count; /* blocks */
  double backward_s; /* modelled, unscaled */
  saved_image_t image[];
};

static int fail(vit_t *v, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(v->err, sizeof v->err, fmt, ap);
  va_end(ap);
  return -1;
}

vit_config_t vit_config_of(const vit_t *v) { return v->cfg; }

int vit_frames_apart(const vit_t *v) {
  return v->model.vit.attention == EMU_VIT_PER_FRAME;
}

vit_config_t vit_config_default(vit_layout_t layout) {
  vit_config_t c = {.layout = layout, .embed_dim = 8, .params = 256,
                    .time_scale = 1.0};
  if (layout == VIT_INTERNVL) {
    c.row_floats = 3 * 448 * 448;
    c.tile_tokens = 256;
  } else {
    c.row_floats = 1176;
    c.merge = 2;
  }
  return c;
}

static const char *config_problem(const vit_config_t *c) {
  if (c->layout != VIT_QWEN && c->layout != VIT_INTERNVL)
    return "layout: VIT_QWEN or VIT_INTERNVL";
  if (c->row_floats < 1) return "row_floats: must be >= 1";
  if (c->layout == VIT_QWEN && (c->merge < 1 || c->merge > 64))
    return "merge: must be 1..64";
  if (c->layout == VIT_INTERNVL &&
      (c->tile_tokens < 1 || c->tile_tokens > (1 << 20)))
    return "tile_tokens: must be 1..2^20";
  if (c->embed_dim < 1 || c->embed_dim > 4096)
    return "embed_dim: must be 1..4096";
  if (c->params < 1) return "params: must be >= 1";
  if (!(c->time_scale >= 0 && isfinite(c->time_scale)))
    return "time_scale: must be finite and >= 0";
  return NULL;
}

vit_t *vit_open(const vit_config_t *cfg, char *err, size_t errlen) {
  const char *bad = cfg ? config_problem(cfg) : "no configuration";
  char line[200];
  if (bad) {
    snprintf(err, errlen, "vit_open: %s", bad);
    return NULL;
  }
  emu_model_t model = emu_model_default();
  if (cfg->model &&
      emu_model_find(cfg->model, &model, line, sizeof line) < 0) {
    snprintf(err, errlen, "vit_open: model: %s", line);
    return NULL;
  }
  vit_t *v = calloc(1, sizeof *v);
  if (!v) {
    snprintf(err, errlen, "vit_open: out of memory");
    return NULL;
  }
  v->cfg = *cfg;
  v->cfg.model = NULL; /* the caller's string need not outlive the call */
  v->model = model;
  return v;
}

void vit_close(vit_t *vit) { free(vit); }

int vit_set_time_scale(vit_t *vit, double time_scale) {
  if (!(time_scale >= 0 && isfinite(time_scale)))
    return fail(vit, "vit_set_time_scale: %g: must be finite and >= 0",
                time_scale);
  vit->cfg.time_scale = time_scale;
  return 0;
}

double vit_seconds_charged(const vit_t *vit) { return vit->charged; }

const char *vit_error(const vit_t *vit) { return vit->err; }

/* ---- the images of a call ------------------------------------------------ */

static int64_t grid_rows(vit_t *v, const vit_input_t *in, int32_t k) {
  const int32_t *g = in->grid_thw + 3 * (size_t)k;
  int32_t m = v->cfg.merge;
  for (int d = 0; d < 3; d++)
    if (g[d] < 1 || g[d] > MAX_SIDE)
      return fail(v, "vit: image %d: grid row (%d, %d, %d): each of t, h, "
                  "w must be 1..%d", k, g[0], g[1], g[2], MAX_SIDE);
  if (g[1] % m || g[2] % m)
    return fail(v, "vit: image %d: grid row (%d, %d, %d): h and w must be "
                "multiples of merge %d", k, g[0], g[1], g[2], m);
  return (int64_t)g[0] * g[1] * g[2];
}

int64_t vit_embed_rows(vit_t *v, const vit_input_t *in) {
  if (!in || in->count < 0 || in->nrows < 0)
    return fail(v, "vit: no input, or a negative count or nrows");
  if (in->nrows > 0 && !in->rows) return fail(v, "vit: rows is NULL");
  if (v->cfg.layout == VIT_INTERNVL) {
    if (in->nrows != in->count)
      return fail(v, "vit: %lld tiles given for %d images (one per tile)",
                  (long long)in->nrows, in->count);
    return (int64_t)in->count * v->cfg.tile_tokens;
  }
  if (in->count > 0 && !in->grid_thw) return fail(v, "vit: grid_thw is NULL");
  int64_t rows = 0;
  for (int32_t k = 0; k < in->count; k++) {
    int64_t r = grid_rows(v, in, k);
    if (r < 0) return -1;
    if ((rows += r) > MAX_ROWS)
      return fail(v, "vit: the grid rows add up to more than 2^40 rows");
  }
  if (rows != in->nrows)
    return fail(v, "vit: grid rows add up to %lld patch rows, %lld given",
                (long long)rows, (long long)in->nrows);
  return rows / ((int64_t)v->cfg.merge * v->cfg.merge);
}

int vit_ship(vit_t *v, const vit_input_t *in) {
  return vit_embed_rows(v, in) < 0 ? -1 : 0;
}

/* The blocks image k is attended in: each frame of a Qwen video where
 * frames are apart (Qwen3-VL), else the image whole. A block's embeddings
 * depend on its own rows alone, as in a real encoder whose attention and
 * positions stay within a frame, so a video encoded in parts of whole
 * frames gives the very rows it gives whole. */
static int32_t blocks_of(const vit_t *v, const vit_input_t *in, int32_t k) {
  return v->cfg.layout == VIT_QWEN && vit_frames_apart(v)
             ? in->grid_thw[3 * (size_t)k]
             : 1;
}

/* A block of image k (blocks_of), all alike: its hash, rows and
 * embedding rows; `row` is its first patch row. */
static saved_image_t describe(const vit_t *v, const vit_input_t *in,
                              int32_t k, int64_t row) {
  size_t f = (size_t)v->cfg.row_floats;
  saved_image_t s = {.hash = 1469598103934665603ull, .rows = 1,
                     .tokens = v->cfg.tile_tokens};
  if (v->cfg.layout == VIT_QWEN) {
    const int32_t *g = in->grid_thw + 3 * (size_t)k;
    int32_t grid[3] = {vit_frames_apart(v) ? 1 : g[0], g[1], g[2]};
    s.rows = (int64_t)grid[0] * grid[1] * grid[2];
    s.tokens = s.rows / ((int64_t)v->cfg.merge * v->cfg.merge);
    s.hash = dpshim__tool_hash(s.hash, grid, sizeof grid);
  }
  s.hash = dpshim__tool_hash(s.hash, in->rows + (size_t)row * f,
                             (size_t)s.rows * f * sizeof(float));
  return s;
}

static double modelled_seconds(const vit_t *v, const vit_input_t *in) {
  if (v->cfg.layout == VIT_INTERNVL)
    return in->count ? emu_vit_seconds(&v->model, in->count, 0, 0) : 0;
  double s = 0;
  for (int32_t k = 0; k < in->count; k++) {
    const int32_t *g = in->grid_thw + 3 * (size_t)k;
    s += emu_vit_seconds(&v->model, g[0], g[1], g[2]);
  }
  return s;
}

/* Until `since` + the scaled time: the call's own CPU work (hashing the
 * patches) is absorbed, as the trainers absorb theirs. */
static void sleep_modelled(vit_t *v, double modelled, double since) {
  double s = modelled * v->cfg.time_scale;
  if (s <= 0) return;
  dpshim__tool_sleep_until(since + s);
  v->charged += s;
}

/* ---- forward ------------------------------------------------------------- */

/* A value in [-0.5, 0.5) on a 2^-24 grid: exact in a float. */
static float unit_float(uint64_t x) {
  return (float)((int64_t)(x >> 40) - ((int64_t)1 << 23)) * 0x1p-24f;
}

/* Row j of an image: a mix of the image's hash and j, E values. */
static void embed_image(const vit_t *v, const saved_image_t *s, float *out) {
  int64_t e = v->cfg.embed_dim;
  for (int64_t i = 0; i < s->tokens * e; i++)
    out[i] = unit_float(dpshim__tool_mix64(s->hash ^
                                           dpshim__tool_mix64((uint64_t)i)));
}

int vit_forward(vit_t *v, const vit_input_t *in, float *embeddings,
                vit_saved_t **saved) {
  double since = dpshim__tool_now_s();
  *saved = NULL;
  v->err[0] = 0;
  int64_t tokens = vit_embed_rows(v, in);
  if (tokens < 0) return -1;
  if (tokens > 0 && !embeddings) return fail(v, "vit: embeddings is NULL");
  int64_t blocks = 0;
  for (int32_t k = 0; k < in->count; k++) blocks += blocks_of(v, in, k);
  vit_saved_t *sv = malloc(sizeof *sv + (size_t)blocks *
                                            sizeof(saved_image_t));
  if (!sv) return fail(v, "vit_forward: out of memory");
  sv->count = 0;
  int64_t row = 0, out = 0;
  for (int32_t k = 0; k < in->count; k++)
    for (int32_t t = 0; t < blocks_of(v, in, k); t++) {
      saved_image_t *s = &sv->image[sv->count++];
      *s = describe(v, in, k, row);
      embed_image(v, s, embeddings + out * v->cfg.embed_dim);
      row += s->rows;
      out += s->tokens;
    }
  double modelled = modelled_seconds(v, in);
  sv->backward_s = modelled * (1.0 - FORWARD_SHARE);
  sleep_modelled(v, modelled * FORWARD_SHARE, since);
  *saved = sv;
  return 0;
}

/* ---- backward ------------------------------------------------------------ */

/* Adds one image's parameter gradients: each embedding value's gradient,
 * in fixed point, to a slot and with a small weight both drawn from the
 * image's hash and the value's place. Unsigned adds: wrap-around instead of
 * undefined behaviour, and the sum is the same in any order. */
static int image_param_grads(vit_t *v, const saved_image_t *s,
                             const float *g, uint64_t *param) {
  int64_t e = v->cfg.embed_dim;
  for (int64_t i = 0; i < s->tokens * e; i++) {
    if (!(fabsf(g[i]) < 0x1p31f))
      return fail(v, "vit_backward: embedding gradient %g: must be finite "
                  "with |g| < 2^31", (double)g[i]);
    uint64_t x = dpshim__tool_mix64(s->hash ^ 0x6772616473ull ^
                                    dpshim__tool_mix64((uint64_t)i));
    int64_t q = llrint(ldexp((double)g[i], VIT_GRAD_FRACTION_BITS));
    param[x % (uint64_t)v->cfg.params] += (uint64_t)q * (1 + (x >> 62));
  }
  return 0;
}

/* Patch gradients: each patch value takes a gradient of its embedding row
 * (Qwen: the merged row it falls in; InternVL: a row of its tile) times a
 * power of two, exact in float. */
static void image_patch_grads(const vit_t *v, const saved_image_t *s,
                              const float *g, float *out) {
  static const float scale[4] = {0.5f, -0.25f, 0.125f, -1.0f};
  int64_t f = v->cfg.row_floats, e = v->cfg.embed_dim;
  int64_t per_token = v->cfg.layout == VIT_QWEN
                          ? (int64_t)v->cfg.merge * v->cfg.merge : 1;
  for (int64_t r = 0; r < s->rows; r++)
    for (int64_t c = 0; c < f; c++) {
      int64_t token = v->cfg.layout == VIT_QWEN ? r / per_token
                                                : c % s->tokens;
      out[r * f + c] = g[token * e + c % e] * scale[(r + c) & 3];
    }
}

int vit_forward_async(vit_t *v, const vit_input_t *in, float *embeddings,
                      vit_saved_t **saved) {
  return vit_forward(v, in, embeddings, saved);
}

int vit_wait(vit_t *v, vit_saved_t *saved) {
  (void)v;
  (void)saved;
  return 0;
}

int vit_backward(vit_t *v, vit_saved_t *saved, const float *emb_grad,
                 int64_t *param_grad, float *patch_grad) {
  double since = dpshim__tool_now_s();
  v->err[0] = 0;
  if (!saved) return fail(v, "vit_backward: no saved forward");
  int rc = 0;
  uint64_t *param = malloc((size_t)v->cfg.params * sizeof *param);
  if (!param || !param_grad) {
    rc = fail(v, param ? "vit_backward: param_grad is NULL"
                       : "vit_backward: out of memory");
    goto done;
  }
  memset(param, 0, (size_t)v->cfg.params * sizeof *param);
  int64_t row = 0, token = 0, e = v->cfg.embed_dim;
  for (int64_t k = 0; k < saved->count && rc == 0; k++) {
    const saved_image_t *s = &saved->image[k];
    rc = image_param_grads(v, s, emb_grad + token * e, param);
    if (rc == 0 && patch_grad)
      image_patch_grads(v, s, emb_grad + token * e,
                        patch_grad + row * v->cfg.row_floats);
    row += s->rows;
    token += s->tokens;
  }
  /* All or nothing: param_grad untouched on a bad gradient. */
  for (int32_t p = 0; rc == 0 && p < v->cfg.params; p++)
    param_grad[p] = (int64_t)((uint64_t)param_grad[p] + param[p]);
  if (rc == 0) sleep_modelled(v, saved->backward_s, since);
done:
  free(param);
  free(saved); /* not vit_saved_free(): an interposer's would be called */
  return rc;
}

void vit_saved_free(vit_saved_t *saved) { free(saved); }
