/* libdpshim_vit.so, the reference vision encoder's adapter: libvit.so's
 * vit_ship(), vit_forward(), vit_forward_async(), vit_wait(),
 * vit_backward() and vit_saved_free() interposed on the public API
 * (<dpshim/adapter.h>, <dpshim/encoder.h>), like any
 * third-party adapter; preloaded beside libdpshim.so (dpshim-run
 * --adapter vit).
 *
 * A forward's `saved` handed to the trainer is the shim's key for it, so
 * the backward finds its forward whichever rank encoded the images. The
 * real functions and libvit's helpers are found at the first call, never
 * at load: a process without libvit.so never calls these. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dpshim/adapter.h"
#include "dpshim/encoder.h"
#include "vit.h"

typedef int (*forward_fn)(vit_t *, const vit_input_t *, float *,
                          vit_saved_t **);
typedef int (*backward_fn)(vit_t *, vit_saved_t *, const float *, int64_t *,
                           float *);
typedef void (*free_fn)(vit_saved_t *);
typedef int64_t (*rows_fn)(vit_t *, const vit_input_t *);
typedef vit_config_t (*config_fn)(const vit_t *);
typedef int (*apart_fn)(const vit_t *);

static dpshim_next_t real_forward = DPSHIM_NEXT_INIT("vit_forward");
static dpshim_next_t real_backward = DPSHIM_NEXT_INIT("vit_backward");
static dpshim_next_t real_free = DPSHIM_NEXT_INIT("vit_saved_free");
static dpshim_next_t real_rows = DPSHIM_NEXT_INIT("vit_embed_rows");
static dpshim_next_t real_config = DPSHIM_NEXT_INIT("vit_config_of");
static dpshim_next_t real_apart = DPSHIM_NEXT_INIT("vit_frames_apart");

/* One call's arguments, for the callbacks. */
typedef struct call_ctx {
  vit_t *vit;
  vit_layout_t layout;
  const vit_input_t *in; /* the caller's own call */
  float *emb;
  int64_t *param_grad;
} call_ctx_t;

static int encode(void *p, const dpshim_encoder_call_t *call, void **saved) {
  call_ctx_t *c = p;
  forward_fn fwd;
  DPSHIM_NEXT(real_forward, fwd);
  if (!fwd) return -1;
  vit_saved_t *s = NULL;
  int rc;
  if (!call) {
    rc = fwd(c->vit, c->in, c->emb, &s);
  } else {
    int qwen = c->layout == VIT_QWEN;
    const dpshim_encoder_buffer_t *px = &call->input[qwen ? 1 : 0];
    int64_t rows = 0;
    for (int32_t i = 0; i < call->count; i++) rows += px->rows[i];
    vit_input_t in = {call->count, qwen ? call->input[0].data : NULL,
                      px->data, rows};
    rc = fwd(c->vit, &in, call->output.data, &s);
  }
  *saved = s;
  return rc;
}

static int encode_back(void *p, void *saved, const void *out_grad,
                       void *in_grad) {
  call_ctx_t *c = p;
  backward_fn bwd;
  DPSHIM_NEXT(real_backward, bwd);
  return bwd ? bwd(c->vit, saved, out_grad, c->param_grad, in_grad) : -1;
}

static void release(void *p, void *saved) {
  free_fn f;
  (void)p;
  DPSHIM_NEXT(real_free, f);
  if (f) f(saved);
}

/* The per-image arrays of one call as the shim sees it, and the grid rows
 * of its images: a video whose frames are attended apart is shown as one
 * image per frame, so the balance can spread a long video's frames over
 * the group (libvit gives a frame the same rows either way). */
typedef struct image_rows {
  int32_t count;
  int64_t *patches, *sq, *grid, *px, *out;
  int32_t *thw; /* [3 * count] */
} image_rows_t;

static int32_t images_shown(const vit_config_t *cfg, int apart,
                            const vit_input_t *in, int32_t k) {
  return cfg->layout == VIT_QWEN && apart ? in->grid_thw[3 * (size_t)k] : 1;
}

static int alloc_rows(image_rows_t *r, const vit_config_t *cfg, int apart,
                      const vit_input_t *in) {
  int64_t n = 0;
  for (int32_t k = 0; k < in->count; k++) n += images_shown(cfg, apart, in, k);
  if (n > INT32_MAX) return -1;
  int64_t *all = calloc(5 * (size_t)n + 1, sizeof *all);
  int32_t *thw = calloc(3 * (size_t)n + 1, sizeof *thw);
  *r = (image_rows_t){(int32_t)n, all, all + n, all + 2 * n, all + 3 * n,
                      all + 4 * n, thw};
  return all && thw ? 0 : -1;
}

static void free_rows(image_rows_t *r) {
  free(r->patches);
  free(r->thw);
}

/* Qwen: an image or video of t x h x w patch rows, a grid row (a frame
 * apart: t = 1); InternVL: a tile of 4 x tile_tokens patches (before the
 * pixel shuffle). */
static void fill_rows(const vit_config_t *cfg, int apart,
                      const vit_input_t *in, image_rows_t *r) {
  int32_t i = 0;
  for (int32_t k = 0; k < in->count; k++) {
    if (cfg->layout == VIT_INTERNVL) {
      r->patches[i] = 4 * (int64_t)cfg->tile_tokens;
      r->sq[i] = r->patches[i] * r->patches[i];
      r->px[i] = 1;
      r->out[i++] = cfg->tile_tokens;
      continue;
    }
    const int32_t *g = in->grid_thw + 3 * (size_t)k;
    int32_t shown = images_shown(cfg, apart, in, k), t = g[0] / shown;
    int64_t frame = (int64_t)g[1] * g[2];
    for (int32_t part = 0; part < shown; part++, i++) {
      memcpy(r->thw + 3 * (size_t)i, (int32_t[3]){t, g[1], g[2]},
             3 * sizeof(int32_t));
      r->patches[i] = t * frame;
      r->sq[i] = apart ? t * frame * frame : r->patches[i] * r->patches[i];
      r->grid[i] = 1;
      r->px[i] = r->patches[i];
      r->out[i] = r->patches[i] / ((int64_t)cfg->merge * cfg->merge);
    }
  }
}

static dpshim_encoder_call_t describe(const vit_config_t *cfg,
                                      const vit_input_t *in, float *emb,
                                      const image_rows_t *r) {
  size_t row = (size_t)cfg->row_floats * sizeof(float);
  dpshim_encoder_buffer_t px = {"patches", (void *)(uintptr_t)in->rows, row,
                                r->px};
  dpshim_encoder_call_t call = {
      .count = r->count, .patches = r->patches, .patches_sq = r->sq,
      .output = {"embeddings", emb, (size_t)cfg->embed_dim * sizeof(float),
                 r->out}};
  if (cfg->layout == VIT_INTERNVL) {
    call.ninputs = 1;
    call.input[0] = px;
    call.grad_input = 0;
  } else {
    call.ninputs = 2;
    call.input[0] = (dpshim_encoder_buffer_t){"grid_thw", r->thw,
                                              3 * sizeof(int32_t), r->grid};
    call.input[1] = px;
    call.grad_input = 1;
  }
  return call;
}

/* libvit's own check of the call: a call it would refuse is one the
 * adapter cannot describe (the shim then runs it as given, and libvit
 * says what is wrong). */
static const char *refused(vit_t *vit, const vit_input_t *in) {
  rows_fn rows;
  DPSHIM_NEXT(real_rows, rows);
  if (!in) return "vit_input_t is NULL";
  if (!rows) return "libvit's vit_embed_rows not found";
  return rows(vit, in) < 0 ? "libvit refuses this call (grid or rows)" : NULL;
}

static int to_vit_rc(int rc) { return rc == 0 ? 0 : -1; }

/* in as the shim sees it, into *call (call->invalid: why it cannot be),
 * its arrays in *r (free_rows() after the call); *cfg libvit's. -1 when
 * libvit's own functions are missing. */
static int description(vit_t *vit, const vit_input_t *in, float *emb,
                       vit_config_t *cfg, image_rows_t *r,
                       dpshim_encoder_call_t *call) {
  config_fn config;
  apart_fn apart;
  DPSHIM_NEXT(real_config, config);
  DPSHIM_NEXT(real_apart, apart);
  *r = (image_rows_t){0};
  if (!config || !apart) return -1;
  *cfg = config(vit);
  const char *why = refused(vit, in);
  if (!why && alloc_rows(r, cfg, apart(vit), in) < 0) why = "out of memory";
  *call = (dpshim_encoder_call_t){.invalid = why};
  if (!why) {
    fill_rows(cfg, apart(vit), in, r);
    *call = describe(cfg, in, emb, r);
  }
  return 0;
}

/* Without an output buffer: the shim writes none at a ship. */
VIT_EXTERN int vit_ship(vit_t *vit, const vit_input_t *in) {
  vit_config_t cfg;
  image_rows_t r;
  dpshim_encoder_call_t call;
  if (description(vit, in, NULL, &cfg, &r, &call) < 0) return -1;
  int rc = dpshim_encoder_ship(&call);
  free_rows(&r);
  return to_vit_rc(rc);
}

static int forward(vit_t *vit, const vit_input_t *in, float *embeddings,
                   vit_saved_t **saved, int async) {
  vit_config_t cfg;
  image_rows_t r;
  dpshim_encoder_call_t call;
  *saved = NULL;
  if (description(vit, in, embeddings, &cfg, &r, &call) < 0) return -1;
  call_ctx_t ctx = {vit, cfg.layout, in, embeddings, NULL};
  dpshim_encoder_t enc = {&ctx, encode, encode_back, release};
  uint64_t key = 0;
  int rc = async ? dpshim_encoder_forward_async(&enc, &call, &key)
                 : dpshim_encoder_forward(&enc, &call, &key);
  free_rows(&r);
  *saved = (vit_saved_t *)(uintptr_t)key;
  return to_vit_rc(rc);
}

VIT_EXTERN int vit_forward(vit_t *vit, const vit_input_t *in,
                           float *embeddings, vit_saved_t **saved) {
  return forward(vit, in, embeddings, saved, 0);
}

VIT_EXTERN int vit_forward_async(vit_t *vit, const vit_input_t *in,
                                 float *embeddings, vit_saved_t **saved) {
  return forward(vit, in, embeddings, saved, 1);
}

/* The call's arguments are gone by now: a failed return is encoded again
 * from what the shim kept (the layout is all the callbacks need). */
VIT_EXTERN int vit_wait(vit_t *vit, vit_saved_t *saved) {
  config_fn config;
  DPSHIM_NEXT(real_config, config);
  if (!config) return -1;
  call_ctx_t ctx = {vit, config(vit).layout, NULL, NULL, NULL};
  dpshim_encoder_t enc = {&ctx, encode, encode_back, release};
  return to_vit_rc(dpshim_encoder_wait(&enc, (uint64_t)(uintptr_t)saved));
}

VIT_EXTERN int vit_backward(vit_t *vit, vit_saved_t *saved,
                            const float *emb_grad, int64_t *param_grad,
                            float *patch_grad) {
  config_fn config;
  DPSHIM_NEXT(real_config, config);
  if (!config) return -1;
  /* The layout: a backward may encode again what its forward sent away. */
  call_ctx_t ctx = {vit, config(vit).layout, NULL, NULL, param_grad};
  dpshim_encoder_t enc = {&ctx, encode, encode_back, release};
  return to_vit_rc(dpshim_encoder_backward(&enc, (uint64_t)(uintptr_t)saved,
                                           emb_grad, patch_grad));
}

VIT_EXTERN void vit_saved_free(vit_saved_t *saved) {
  call_ctx_t ctx = {0};
  dpshim_encoder_t enc = {&ctx, encode, encode_back, release};
  dpshim_encoder_release(&enc, (uint64_t)(uintptr_t)saved);
}
