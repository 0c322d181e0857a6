/* reftrain's compute step: an emulated GPU time, or real CPU attention. */
#ifndef REFTRAIN_COMPUTE_H
#define REFTRAIN_COMPUTE_H

#include <stdint.h>

/* A dense decoder on a Hopper-class GPU; see compute.c for the constants and
 * why they were chosen. */
typedef struct emu_model {
  double hidden, layers, vocab;
  double matmul_flops; /* sustained FLOP/s of the linear layers */
  double attn_flops;   /* sustained FLOP/s of flash attention, fwd+bwd */
  double tile;         /* flash-attention tile edge, tokens */
  double sample_s;     /* fixed per-sample kernel cost, fwd+bwd, seconds */
  double noise_sigma;  /* of the multiplicative log-normal noise */
} emu_model_t;

emu_model_t emu_model_default(void);
/* Modelled seconds for one pack (no noise, unscaled, unsharded). */
double emu_pack_seconds(const emu_model_t *m, const int32_t *cu_seqlens,
                        int32_t nsamples);
/* exp(sigma * z), z standard normal drawn from (seed, rank, step, micro). */
double emu_noise(const emu_model_t *m, uint64_t seed, int rank, int64_t step,
                 int32_t micro);
/* Sample length at which attention and linear cost are equal. */
double emu_break_even(const emu_model_t *m);

/* Real single-head causal attention over each sample plus a d x d linear
 * map per token; Q, K, V derived from token ids. Returns a checksum so the
 * work cannot be optimised away. */
typedef struct cpu_work cpu_work_t;
cpu_work_t *cpu_work_new(int32_t dim);
double cpu_pack(cpu_work_t *w, const int32_t *cu_seqlens, int32_t nsamples,
                const int32_t *tokens);
void cpu_work_free(cpu_work_t *w);

#endif
