/* The emulated GPU; see emu.h.
 *
 * The time is a FLOP model, deliberately not a*len^2 + b*len + c: flash
 * attention works in causal 128x128 tiles (a 129-token sample costs 3
 * tiles, a 128-token one 1), each sample pays a fixed kernel cost, and every
 * pack gets ~2% log-normal noise. A balancer's fitted quadratic is then an
 * approximation, as on real hardware.
 *
 * Per token, fwd+bwd (backward twice forward), the linear layers cost
 * 3 * 2 * layers * (h^2 (2 + 2 kv) + mats h ffn) + 3 * 2 h V; per causal
 * tile, attention costs 3.5 * 4 * 128^2 * h * layers (flash attention's
 * backward is ~2.5x its forward). At 500 TFLOP/s for matmuls and 343
 * TFLOP/s for attention (~70% of the matmul rate at head dim 64-128).
 *
 * "tiny" (24 layers, hidden 1024, a 4h GELU MLP, vocabulary 32000, ~350M
 * parameters) breaks even at len ~ 8000, the project's benchmark cost
 * model (a = 1, b = 8000); its gradient sync is not modelled (the tests'
 * steps stay short). The VLM presets follow the published configurations:
 * InternVL2-8B (InternLM2.5-7B + InternViT-300M, 448-px tiles of 1024
 * patches), Qwen2-VL-7B (Qwen2-7B + a 675M ViT with full attention),
 * Qwen2.5-VL-7B (the same LLM, a SwiGLU ViT with 8x8-patch windows and 4
 * full layers) and Qwen3-VL-8B (Qwen3-8B, a ViT with per-frame video
 * attention), all at TP = 4, with a 50 GB/s gradient all-reduce.
 */
#include "emu.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../lengthgen.h"
#include "../mix.h"

/* ---- presets ---------------------------------------------------------- */

#define HOPPER .matmul_flops = 500e12, .attn_flops = 343e12, .tile = 128, \
               .noise_sigma = 0.02

static const emu_model_t PRESETS[] = {
    {.name = "tiny", .hidden = 1024, .layers = 24, .vocab = 32000,
     .ffn = 4096, .mlp_mats = 2, .kv_ratio = 1, HOPPER, .sample_s = 72e-6,
     .grad_bw = 0, .tp = 1,
     .vit = {12, 768, 3072, 2, EMU_VIT_FULL, 0, 0, 1024}},
    {.name = "internvl2-8b", .hidden = 4096, .layers = 32, .vocab = 92553,
     .ffn = 14336, .mlp_mats = 3, .kv_ratio = 0.25, HOPPER,
     .sample_s = 96e-6, .grad_bw = 50e9, .tp = 4,
     .vit = {24, 1024, 4096, 2, EMU_VIT_FULL, 0, 0, 1024}},
    {.name = "qwen2-vl-7b", .hidden = 3584, .layers = 28, .vocab = 152064,
     .ffn = 18944, .mlp_mats = 3, .kv_ratio = 4.0 / 28, HOPPER,
     .sample_s = 84e-6, .grad_bw = 50e9, .tp = 4,
     .vit = {32, 1280, 5120, 2, EMU_VIT_FULL, 0, 0, 0}},
    {.name = "qwen2.5-vl-7b", .hidden = 3584, .layers = 28, .vocab = 152064,
     .ffn = 18944, .mlp_mats = 3, .kv_ratio = 4.0 / 28, HOPPER,
     .sample_s = 84e-6, .grad_bw = 50e9, .tp = 4,
     .vit = {32, 1280, 3420, 3, EMU_VIT_WINDOWED, 64, 4, 0}},
    {.name = "qwen3-vl-8b", .hidden = 4096, .layers = 36, .vocab = 151936,
     .ffn = 12288, .mlp_mats = 3, .kv_ratio = 0.25, HOPPER,
     .sample_s = 108e-6, .grad_bw = 50e9, .tp = 4,
     .vit = {27, 1152, 4304, 2, EMU_VIT_PER_FRAME, 0, 0, 0}},
};
#define NPRESETS (sizeof PRESETS / sizeof PRESETS[0])

emu_model_t emu_model_default(void) { return PRESETS[0]; }

const char *emu_model_names(void) {
  return "tiny, internvl2-8b, qwen2-vl-7b, qwen2.5-vl-7b, qwen3-vl-8b";
}

int emu_model_find(const char *name, emu_model_t *out, char *err,
                   size_t len) {
  for (size_t k = 0; k < NPRESETS; k++)
    if (name && !strcmp(name, PRESETS[k].name)) {
      *out = PRESETS[k];
      return 0;
    }
  if (err && len)
    snprintf(err, len, "no model '%s'; expected one of %s", name ? name : "",
             emu_model_names());
  return -1;
}

/* ---- the LLM ---------------------------------------------------------- */

/* fwd+bwd linear FLOPs per token: QKV and output projections (K and V
 * narrower under GQA), the MLP, and the logits. */
static double linear_flops_per_token(const emu_model_t *m) {
  double h = m->hidden;
  double layer = h * h * (2.0 + 2.0 * m->kv_ratio) + m->mlp_mats * h * m->ffn;
  return 3.0 * (2.0 * m->layers * layer + 2.0 * h * m->vocab);
}

/* fwd+bwd attention FLOPs per tile: QK^T and PV, 2 FLOPs per MAC; flash
 * attention's backward recomputes QK^T and does 4 more, ~2.5x forward. */
static double attn_flops_per_tile(const emu_model_t *m) {
  return 3.5 * 4.0 * m->tile * m->tile * m->hidden * m->layers;
}

/* Causal tiles of one sample: the lower triangle of nb x nb, diagonal tiles
 * paid in full. */
static double causal_tiles(const emu_model_t *m, int64_t len) {
  double nb = ceil((double)len / m->tile);
  return nb * (nb + 1.0) / 2.0;
}

double emu_pack_seconds(const emu_model_t *m, const int32_t *cu_seqlens,
                        int32_t nsamples) {
  double tiles = 0;
  for (int32_t i = 0; i < nsamples; i++)
    tiles += causal_tiles(m, cu_seqlens[i + 1] - cu_seqlens[i]);
  double tokens = nsamples > 0 ? cu_seqlens[nsamples] : 0;
  return tokens * linear_flops_per_token(m) / m->matmul_flops +
         tiles * attn_flops_per_tile(m) / m->attn_flops +
         nsamples * m->sample_s;
}

/* A sample's tiles nb (nb + 1) / 2, nb = ceil(len / T), with nb taken as
 * len / T + 1/2 (ceil rounds up by half a tile on average): len^2 / (2 T^2)
 * + len / T + 3/8 tiles. Off by up to about len / (2 T) tiles, a share
 * of about T / len of the sample's attention: small for the long samples
 * whose attention matters. */
void emu_quadratic(const emu_model_t *m, double coef[3]) {
  double tile_s = attn_flops_per_tile(m) / m->attn_flops;
  coef[0] = tile_s / (2.0 * m->tile * m->tile);
  coef[1] = linear_flops_per_token(m) / m->matmul_flops + tile_s / m->tile;
  coef[2] = m->sample_s + 0.375 * tile_s;
}

/* Asymptotically tiles ~ len^2 / (2 tile^2). */
double emu_break_even(const emu_model_t *m) {
  double lin = linear_flops_per_token(m) / m->matmul_flops;
  double quad = attn_flops_per_tile(m) / (2.0 * m->tile * m->tile) /
                m->attn_flops;
  return lin / quad;
}

/* ---- the vision encoder ----------------------------------------------- */

/* Sum over attention groups of (patches in the group)^2, per layer, as
 * the encoder's attention works: whole images (InternVL: whole tiles),
 * windows in most of Qwen2.5-VL's layers, frames in Qwen3-VL's. */
static double vit_pairs(const emu_vit_t *v, int32_t t, int32_t h, int32_t w) {
  double frame = (double)h * w, all = (double)t * frame;
  if (h == 0 || w == 0) /* InternVL: t tiles apart */
    return v->layers * t * v->tile_patches * v->tile_patches;
  switch (v->attention) {
  case EMU_VIT_WINDOWED: {
    double windowed = all * fmin(v->window, all);
    return v->full_layers * all * all +
           (v->layers - v->full_layers) * windowed;
  }
  case EMU_VIT_PER_FRAME:
    return v->layers * t * frame * frame;
  default:
    return v->layers * all * all;
  }
}

double emu_vit_seconds(const emu_model_t *m, int32_t t, int32_t h,
                       int32_t w) {
  const emu_vit_t *v = &m->vit;
  double patches = h == 0 || w == 0 ? (double)t * v->tile_patches
                                      : (double)t * h * w;
  double linear = 3.0 * 2.0 * v->layers *
                  (4.0 * v->hidden * v->hidden +
                   v->mlp_mats * v->hidden * v->ffn);
  double attn = 3.5 * 4.0 * v->hidden * vit_pairs(v, t, h, w);
  return patches * linear / m->matmul_flops + attn / m->attn_flops;
}

/* ---- the gradient sync ------------------------------------------------ */

static double parameters(const emu_model_t *m) {
  double h = m->hidden, hv = m->vit.hidden;
  double llm = m->layers * (h * h * (2.0 + 2.0 * m->kv_ratio) +
                            m->mlp_mats * h * m->ffn) +
               2.0 * h * m->vocab;
  double vit = m->vit.layers * (4.0 * hv * hv + m->vit.mlp_mats * hv *
                                                    m->vit.ffn);
  return llm + vit;
}

double emu_grad_seconds(const emu_model_t *m, int32_t dp, int32_t tp) {
  if (m->grad_bw <= 0 || dp < 2) return 0;
  double shard = 2.0 * parameters(m) / (tp > 0 ? tp : 1); /* bf16 */
  return 2.0 * (dp - 1) / dp * shard / m->grad_bw;
}

/* ---- noise ------------------------------------------------------------- */

double emu_noise(const emu_model_t *m, uint64_t seed, int rank, int64_t step,
                 int32_t micro) {
  lengthgen_rng_t rng;
  uint64_t k = dpshim__tool_mix64(seed ^ 0x6E6F697365ull); /* apart from the loader's */
  k = dpshim__tool_mix64(k ^ (uint64_t)rank);
  k = dpshim__tool_mix64(k ^ (uint64_t)step);
  lengthgen_seed(&rng, dpshim__tool_mix64(k ^ (uint64_t)micro));
  return exp(m->noise_sigma * lengthgen_normal(&rng));
}
