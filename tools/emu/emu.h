/* emu: the emulated GPU the reference trainers and dpshim-sim share. A
 * model preset (an LLM and, for VLMs, its vision encoder) on a Hopper-class
 * GPU; times from FLOPs; see emu.c for the constants and presets.
 * Tools-internal. */
#ifndef DPSHIM_TOOLS_EMU_H
#define DPSHIM_TOOLS_EMU_H

#include <stddef.h>
#include <stdint.h>

typedef enum emu_vit_attention {
  EMU_VIT_FULL = 0,  /* every patch of an image with every other */
  EMU_VIT_WINDOWED,  /* Qwen2.5-VL: windows, and a few full layers */
  EMU_VIT_PER_FRAME  /* Qwen3-VL: a video's frames apart */
} emu_vit_attention_t;

typedef struct emu_vit {
  double layers, hidden, ffn, mlp_mats;
  emu_vit_attention_t attention;
  double window;      /* windowed: patches per window */
  double full_layers; /* windowed: layers with full attention */
  double tile_patches; /* patches of one tile (InternVL's layout) */
} emu_vit_t;

typedef struct emu_model {
  const char *name;
  double hidden, layers, vocab, ffn;
  double mlp_mats;     /* 2: a GELU MLP, 3: SwiGLU */
  double kv_ratio;     /* key/value heads per query head (GQA) */
  double matmul_flops; /* sustained FLOP/s of the linear layers */
  double attn_flops;   /* sustained FLOP/s of flash attention, fwd+bwd */
  double tile;         /* flash-attention tile edge, tokens */
  double sample_s;     /* fixed per-sample kernel cost, fwd+bwd, seconds */
  double noise_sigma;  /* of the multiplicative log-normal noise */
  double grad_bw;      /* bytes/s of the gradient all-reduce; 0: not modelled */
  int32_t tp;          /* the tensor parallelism the preset is meant for */
  emu_vit_t vit;
} emu_model_t;

/* The default: "tiny", a 24-layer, hidden-1024 decoder (the tests'). */
emu_model_t emu_model_default(void);
/* A preset by name; -1 with the names in err when there is none. */
int emu_model_find(const char *name, emu_model_t *out, char *err, size_t len);
/* The presets' names, comma-separated. */
const char *emu_model_names(void);

/* Modelled seconds for one pack (no noise, unscaled, unsharded). */
double emu_pack_seconds(const emu_model_t *m, const int32_t *cu_seqlens,
                        int32_t nsamples);
/* Modelled seconds of the vision encoder, fwd+bwd, for one image or video
 * of t x h x w patches, or with h = w = 0 for t tiles of tile_patches
 * (InternVL), unsharded. */
double emu_vit_seconds(const emu_model_t *m, int32_t t, int32_t h, int32_t w);
/* Seconds of the gradient all-reduce over dp ranks of a tp-way shard
 * (ring: 2 (dp - 1) / dp of the shard's bf16 gradients); 0 when the preset
 * does not model it. */
double emu_grad_seconds(const emu_model_t *m, int32_t dp, int32_t tp);
/* exp(sigma * z), z standard normal drawn from (seed, rank, step, micro). */
double emu_noise(const emu_model_t *m, uint64_t seed, int rank, int64_t step,
                 int32_t micro);
/* The quadratic that emu_pack_seconds follows per sample, in seconds
 * (unscaled, unsharded, no noise): a*len^2 + b*len + c into coef[0..2].
 * Not exact, as the tiles are not (emu.c). */
void emu_quadratic(const emu_model_t *m, double coef[3]);
/* Sample length at which attention and linear cost are equal. */
double emu_break_even(const emu_model_t *m);

#endif
