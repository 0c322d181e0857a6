/* libvit.so, the reference vision encoder: outputs a function of the inputs
 * alone, images independent of the calls they come in, parameter gradients
 * exact in any order, patch gradients only when asked, malformed calls
 * refused with one line, and the emulated time split between the halves. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../tools/emu/emu.h"
#include "../../tools/mix.h"
#include "vit.h"

/* Small images, so that a test is cheap: Qwen rows of 12 floats, InternVL
 * tiles of 3 x 4 x 4. */
#define ROW_FLOATS 12
#define TILE_SIDE 4
#define EMBED 8
#define PARAMS 32

typedef struct call {
  vit_input_t in;
  int32_t *grid;
  float *rows;
} call_t;

static vit_t *open_vit(vit_layout_t layout, double time_scale) {
  vit_config_t cfg = vit_config_default(layout);
  cfg.row_floats = layout == VIT_QWEN ? ROW_FLOATS
                                      : 3 * TILE_SIDE * TILE_SIDE;
  cfg.tile_tokens = 5;
  cfg.params = PARAMS;
  cfg.embed_dim = EMBED;
  cfg.time_scale = time_scale;
  char err[200];
  vit_t *v = vit_open(&cfg, err, sizeof err);
  cr_assert(v, "vit_open: %s", err);
  return v;
}

static size_t row_floats(vit_layout_t layout) {
  return layout == VIT_QWEN ? ROW_FLOATS : 3 * TILE_SIDE * TILE_SIDE;
}

/* Image k of a fixed set: a grid row of its own, values from (seed, k). */
static const int32_t GRIDS[][3] = {{1, 2, 4}, {2, 4, 2}, {1, 6, 2}, {3, 2, 2}};
#define NIMAGES ((int32_t)(sizeof GRIDS / sizeof GRIDS[0]))

static int64_t image_rows(vit_layout_t layout, int32_t k) {
  return layout == VIT_QWEN
             ? (int64_t)GRIDS[k][0] * GRIDS[k][1] * GRIDS[k][2] : 1;
}

static void fill_image(vit_layout_t layout, int32_t k, float *out) {
  size_t n = (size_t)image_rows(layout, k) * row_floats(layout);
  for (size_t i = 0; i < n; i++)
    out[i] = (float)(dpshim__tool_mix64(((uint64_t)k << 32) | i) >> 40);
}

/* A call with the images in `which` (indices into GRIDS), in that order. */
static call_t make_call(vit_layout_t layout, const int32_t *which, int32_t n) {
  call_t c = {.grid = calloc(3 * (size_t)n + 1, sizeof(int32_t))};
  int64_t rows = 0;
  for (int32_t i = 0; i < n; i++) rows += image_rows(layout, which[i]);
  c.rows = calloc((size_t)rows * row_floats(layout) + 1, sizeof(float));
  int64_t at = 0;
  for (int32_t i = 0; i < n; i++) {
    memcpy(c.grid + 3 * i, GRIDS[which[i]], sizeof GRIDS[0]);
    fill_image(layout, which[i], c.rows + at * (int64_t)row_floats(layout));
    at += image_rows(layout, which[i]);
  }
  c.in = (vit_input_t){.count = n, .grid_thw = c.grid, .rows = c.rows,
                       .nrows = rows};
  return c;
}

static void free_call(call_t *c) {
  free(c->grid);
  free(c->rows);
}

/* A gradient from the embedding value alone, as the trainer derives it. */
static void grads_of(const float *emb, int64_t n, float *g) {
  for (int64_t i = 0; i < n; i++) {
    uint32_t bits;
    memcpy(&bits, &emb[i], sizeof bits);
    g[i] = (float)((int64_t)(dpshim__tool_mix64(bits) >> 44) - (1 << 19)) *
           0x1p-20f;
  }
}

/* One forward and backward; outputs in fresh buffers. */
typedef struct result {
  float *emb, *patch_grad;
  int64_t emb_floats, patch_floats;
} result_t;

static result_t run_call(vit_t *v, vit_layout_t layout, const call_t *c,
                         int64_t *param, int patch_grads) {
  result_t r = {0};
  int64_t rows = vit_embed_rows(v, &c->in);
  cr_assert(rows >= 0, "%s", vit_error(v));
  r.emb_floats = rows * EMBED;
  r.patch_floats = c->in.nrows * (int64_t)row_floats(layout);
  r.emb = calloc((size_t)r.emb_floats + 1, sizeof(float));
  float *g = calloc((size_t)r.emb_floats + 1, sizeof(float));
  if (patch_grads)
    r.patch_grad = calloc((size_t)r.patch_floats + 1, sizeof(float));
  vit_saved_t *saved;
  cr_assert_eq(vit_forward(v, &c->in, r.emb, &saved), 0, "%s", vit_error(v));
  grads_of(r.emb, r.emb_floats, g);
  cr_assert_eq(vit_backward(v, saved, g, param, r.patch_grad), 0, "%s",
               vit_error(v));
  free(g);
  return r;
}

static void free_result(result_t *r) {
  free(r->emb);
  free(r->patch_grad);
}

static void check_deterministic(vit_layout_t layout) {
  const int32_t all[] = {0, 1, 2, 3};
  call_t c = make_call(layout, all, NIMAGES);
  vit_t *a = open_vit(layout, 0), *b = open_vit(layout, 0);
  int64_t pa[PARAMS] = {0}, pb[PARAMS] = {0};
  result_t ra = run_call(a, layout, &c, pa, 1);
  result_t rb = run_call(b, layout, &c, pb, 1);
  cr_assert(ra.emb_floats > 0);
  cr_assert_eq(memcmp(ra.emb, rb.emb, (size_t)ra.emb_floats * 4), 0);
  cr_assert_eq(memcmp(pa, pb, sizeof pa), 0);
  cr_assert_eq(memcmp(ra.patch_grad, rb.patch_grad,
                      (size_t)ra.patch_floats * 4), 0);
  int64_t nonzero = 0;
  for (int p = 0; p < PARAMS; p++) nonzero += pa[p] != 0;
  cr_assert(nonzero > 0, "no parameter gradient at all");
  free_result(&ra);
  free_result(&rb);
  free_call(&c);
  vit_close(a);
  vit_close(b);
}

Test(vit, deterministic_qwen) { check_deterministic(VIT_QWEN); }
Test(vit, deterministic_internvl) { check_deterministic(VIT_INTERNVL); }

/* The images of one call, split into two calls in the other order: each
 * image's embeddings and patch gradients the same, the summed parameter
 * gradients the same. */
static void check_split(vit_layout_t layout) {
  const int32_t all[] = {0, 1, 2, 3}, first[] = {2, 3}, second[] = {0, 1};
  call_t whole = make_call(layout, all, NIMAGES);
  call_t c1 = make_call(layout, first, 2), c2 = make_call(layout, second, 2);
  vit_t *v = open_vit(layout, 0);
  int64_t pw[PARAMS] = {0}, ps[PARAMS] = {0};
  result_t rw = run_call(v, layout, &whole, pw, 1);
  result_t r1 = run_call(v, layout, &c1, ps, 1);
  result_t r2 = run_call(v, layout, &c2, ps, 1);
  /* whole = second's images then first's. */
  cr_assert_eq(rw.emb_floats, r1.emb_floats + r2.emb_floats);
  cr_assert_eq(memcmp(rw.emb, r2.emb, (size_t)r2.emb_floats * 4), 0);
  cr_assert_eq(memcmp(rw.emb + r2.emb_floats, r1.emb,
                      (size_t)r1.emb_floats * 4), 0);
  cr_assert_eq(memcmp(rw.patch_grad, r2.patch_grad,
                      (size_t)r2.patch_floats * 4), 0);
  cr_assert_eq(memcmp(rw.patch_grad + r2.patch_floats, r1.patch_grad,
                      (size_t)r1.patch_floats * 4), 0);
  cr_assert_eq(memcmp(pw, ps, sizeof pw), 0);
  free_result(&rw);
  free_result(&r1);
  free_result(&r2);
  free_call(&whole);
  free_call(&c1);
  free_call(&c2);
  vit_close(v);
}

Test(vit, split_calls_qwen) { check_split(VIT_QWEN); }
Test(vit, split_calls_internvl) { check_split(VIT_INTERNVL); }

/* Without a patch buffer the parameter gradients are the same; with one,
 * every patch value has a gradient from its embedding rows. */
Test(vit, patch_grads_only_when_asked) {
  const int32_t all[] = {0, 1, 2, 3};
  call_t c = make_call(VIT_QWEN, all, NIMAGES);
  vit_t *v = open_vit(VIT_QWEN, 0);
  int64_t with[PARAMS] = {0}, without[PARAMS] = {0};
  result_t r = run_call(v, VIT_QWEN, &c, with, 1);
  result_t n = run_call(v, VIT_QWEN, &c, without, 0);
  cr_assert_null(n.patch_grad);
  cr_assert_eq(memcmp(with, without, sizeof with), 0);
  int64_t zero = 0;
  for (int64_t i = 0; i < r.patch_floats; i++) zero += r.patch_grad[i] == 0;
  cr_assert(zero < r.patch_floats, "patch gradients all zero");
  free_result(&r);
  free_result(&n);
  free_call(&c);
  vit_close(v);
}

/* A refused call: -1, one line beginning "vit", nothing written. */
static void check_refused(vit_t *v, const vit_input_t *in, const char *word) {
  float emb[64];
  for (int i = 0; i < 64; i++) emb[i] = 7;
  vit_saved_t *saved = (vit_saved_t *)emb;
  cr_assert_eq(vit_forward(v, in, emb, &saved), -1);
  cr_assert_null(saved);
  const char *e = vit_error(v);
  cr_assert(!strncmp(e, "vit", 3) && !strchr(e, '\n') && strstr(e, word),
            "error line: %s", e);
  for (int i = 0; i < 64; i++) cr_assert_eq(emb[i], 7);
}

Test(vit, bad_grids_refused) {
  vit_t *v = open_vit(VIT_QWEN, 0);
  float rows[2 * 2 * 3 * ROW_FLOATS] = {0};
  int32_t odd[] = {1, 2, 3}, zero[] = {0, 2, 2}, ok[] = {1, 2, 2};
  vit_input_t in = {.count = 1, .grid_thw = odd, .rows = rows, .nrows = 6};
  check_refused(v, &in, "merge");
  in.grid_thw = zero;
  in.nrows = 0;
  check_refused(v, &in, "t, h, w");
  in.grid_thw = ok;
  in.nrows = 5; /* the grid row says 4 */
  check_refused(v, &in, "patch rows");
  vit_close(v);
  v = open_vit(VIT_INTERNVL, 0);
  in = (vit_input_t){.count = 2, .rows = rows, .nrows = 1};
  check_refused(v, &in, "tiles");
  vit_close(v);
}

Test(vit, zero_images_is_a_call) {
  vit_t *v = open_vit(VIT_QWEN, 0);
  vit_input_t in = {0};
  vit_saved_t *saved;
  int64_t param[PARAMS] = {0}, none[PARAMS] = {0};
  cr_assert_eq(vit_embed_rows(v, &in), 0);
  cr_assert_eq(vit_forward(v, &in, NULL, &saved), 0, "%s", vit_error(v));
  cr_assert_eq(vit_backward(v, saved, NULL, param, NULL), 0, "%s",
               vit_error(v));
  cr_assert_eq(memcmp(param, none, sizeof param), 0);
  vit_close(v);
}

Test(vit, bad_gradient_leaves_params) {
  const int32_t one[] = {0};
  call_t c = make_call(VIT_QWEN, one, 1);
  vit_t *v = open_vit(VIT_QWEN, 0);
  int64_t rows = vit_embed_rows(v, &c.in);
  float *emb = calloc((size_t)rows * EMBED, sizeof(float));
  float *g = calloc((size_t)rows * EMBED, sizeof(float));
  g[rows * EMBED - 1] = NAN;
  int64_t param[PARAMS] = {0}, none[PARAMS] = {0};
  vit_saved_t *saved;
  cr_assert_eq(vit_forward(v, &c.in, emb, &saved), 0);
  cr_assert_eq(vit_backward(v, saved, g, param, NULL), -1);
  cr_assert(strstr(vit_error(v), "gradient"), "%s", vit_error(v));
  cr_assert_eq(memcmp(param, none, sizeof param), 0);
  free(emb);
  free(g);
  free_call(&c);
  vit_close(v);
}

Test(vit, bad_config_refused) {
  vit_config_t cfg = vit_config_default(VIT_QWEN);
  char err[200];
  cfg.embed_dim = 0;
  cr_assert_null(vit_open(&cfg, err, sizeof err));
  cr_assert(strstr(err, "embed_dim") && !strchr(err, '\n'), "%s", err);
  cfg = vit_config_default(VIT_QWEN);
  cfg.model = "no-such-model";
  cr_assert_null(vit_open(&cfg, err, sizeof err));
  cr_assert(strstr(err, "model") && !strchr(err, '\n'), "%s", err);
}

/* Where frames are attended apart (qwen3-vl-8b), a video and its frames
 * shown as images of one frame each give the same embeddings, patch and
 * parameter gradients: the shim may encode a long video's frames on
 * several ranks. With the whole video attended at once they differ. */
static void check_frames(const char *model, int alike) {
  const int32_t video[] = {3}; /* GRIDS[3]: 3 frames of 2 x 2 */
  call_t whole = make_call(VIT_QWEN, video, 1), parts = whole;
  int32_t frames[9] = {1, 2, 2, 1, 2, 2, 1, 2, 2};
  parts.in.count = 3;
  parts.in.grid_thw = frames;
  vit_config_t cfg = vit_config_default(VIT_QWEN);
  cfg.row_floats = ROW_FLOATS;
  cfg.params = PARAMS;
  cfg.embed_dim = EMBED;
  cfg.time_scale = 0;
  cfg.model = model;
  char err[200];
  vit_t *v = vit_open(&cfg, err, sizeof err);
  cr_assert(v, "vit_open: %s", err);
  cr_assert_eq(vit_frames_apart(v), alike);
  int64_t pw[PARAMS] = {0}, pp[PARAMS] = {0};
  result_t rw = run_call(v, VIT_QWEN, &whole, pw, 1);
  result_t rp = run_call(v, VIT_QWEN, &parts, pp, 1);
  cr_assert_eq(rw.emb_floats, rp.emb_floats);
  int same = !memcmp(rw.emb, rp.emb, (size_t)rw.emb_floats * 4) &&
             !memcmp(rw.patch_grad, rp.patch_grad,
                     (size_t)rw.patch_floats * 4) &&
             !memcmp(pw, pp, sizeof pw);
  cr_assert_eq(same, alike, "%s: frames alike %d, expected %d", model, same,
               alike);
  free_result(&rw);
  free_result(&rp);
  free_call(&whole);
  vit_close(v);
}

Test(vit, frames_apart_encode_alike_in_parts) {
  check_frames("qwen3-vl-8b", 1);
  check_frames("qwen2-vl-7b", 0);
}

/* The halves together charge what emu_vit_seconds() models for the images,
 * times the scale (accounting, not a timed assertion). */
static void check_charged(vit_layout_t layout) {
  const int32_t all[] = {0, 1, 2, 3};
  call_t c = make_call(layout, all, NIMAGES);
  double scale = 1e-3;
  vit_t *v = open_vit(layout, scale);
  int64_t param[PARAMS] = {0};
  result_t r = run_call(v, layout, &c, param, 0);
  emu_model_t m = emu_model_default();
  double want = layout == VIT_INTERNVL ? emu_vit_seconds(&m, NIMAGES, 0, 0)
                                       : 0;
  for (int32_t k = 0; layout == VIT_QWEN && k < NIMAGES; k++)
    want += emu_vit_seconds(&m, GRIDS[k][0], GRIDS[k][1], GRIDS[k][2]);
  double got = vit_seconds_charged(v);
  cr_assert(want > 0 && fabs(got - want * scale) <= 1e-9 * want * scale,
            "charged %g, modelled %g x %g", got, want, scale);
  free_result(&r);
  free_call(&c);
  vit_close(v);
}

Test(vit, charged_time_qwen) { check_charged(VIT_QWEN); }
Test(vit, charged_time_internvl) { check_charged(VIT_INTERNVL); }
