/* reftrain's compute step; see compute.h.
 *
 * The emulated time is a FLOP model, deliberately not a*len^2 + b*len + c:
 * flash attention works in causal 128x128 tiles (a 129-token sample costs 3
 * tiles, a 128-token one 1), each sample pays a fixed kernel cost, and every
 * pack gets ~2% log-normal noise. A balancer's fitted quadratic is then an
 * approximation, as on real hardware.
 *
 * Defaults: a 24-layer, hidden-1024 decoder with a 32000-token vocabulary
 * (~350M parameters) on an H100. Per token, fwd+bwd, the linear layers cost
 * 3 * (24 h^2 L + 2 h V) = 2.01 GFLOP; per causal tile, fwd+bwd, attention
 * costs 3.5 * 4 * 128^2 * h * L = 5.64 GFLOP (the backward pass is ~2.5x the
 * forward). At 500 TFLOP/s for matmuls and 343 TFLOP/s for attention
 * (flash attention at head dim 64 reaches ~70% of the matmul rate), the two
 * are equal per sample at len ~ 8000, the break-even of the project's
 * benchmark cost model (a = 1, b = 8000). An sft pack (32768 tokens) takes
 * ~0.13 s of linear time plus its attention.
 */
#include "compute.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../lengthgen.h"

#include "mix.h"

/* ---- emulate ----------------------------------------------------------- */

emu_model_t emu_model_default(void) {
  return (emu_model_t){.hidden = 1024,
                       .layers = 24,
                       .vocab = 32000,
                       .matmul_flops = 500e12,
                       .attn_flops = 343e12,
                       .tile = 128,
                       .sample_s = 72e-6, /* 3 us per layer */
                       .noise_sigma = 0.02};
}

/* fwd+bwd linear FLOPs per token: QKV, output and a 4h MLP, plus the
 * logits; backward is twice forward. */
static double linear_flops_per_token(const emu_model_t *m) {
  double h = m->hidden;
  return 3.0 * (24.0 * h * h * m->layers + 2.0 * h * m->vocab);
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

double emu_noise(const emu_model_t *m, uint64_t seed, int rank, int64_t step,
                 int32_t micro) {
  lengthgen_rng_t rng;
  uint64_t k = rt_mix64(seed ^ 0x6E6F697365ull); /* apart from the loader's */
  k = rt_mix64(k ^ (uint64_t)rank);
  k = rt_mix64(k ^ (uint64_t)step);
  lengthgen_seed(&rng, rt_mix64(k ^ (uint64_t)micro));
  return exp(m->noise_sigma * lengthgen_normal(&rng));
}

/* Asymptotically tiles ~ len^2 / (2 tile^2). */
double emu_break_even(const emu_model_t *m) {
  double lin = linear_flops_per_token(m) / m->matmul_flops;
  double quad = attn_flops_per_tile(m) / (2.0 * m->tile * m->tile) /
                m->attn_flops;
  return lin / quad;
}

/* ---- cpu --------------------------------------------------------------- */

struct cpu_work {
  int32_t dim;
  int64_t cap;          /* rows the buffers hold */
  float *q, *k, *v;     /* [cap][dim] */
  float *scores;        /* [cap]: one query's row */
  float *w;             /* [dim][dim]: the per-token linear map */
  float *acc;           /* [dim] */
};

/* In [-1, 1): a fixed "embedding" of (token, which of q/k/v, component). */
static float embed(int32_t token, int which, int32_t c) {
  uint64_t h = rt_mix64(((uint64_t)(uint32_t)token << 24) ^
                     ((uint64_t)which << 20) ^ (uint64_t)c);
  return (float)(h >> 40) * 0x1p-23f - 1.0f;
}

cpu_work_t *cpu_work_new(int32_t dim) {
  cpu_work_t *w = calloc(1, sizeof *w);
  if (!w) return NULL;
  w->dim = dim;
  w->w = malloc((size_t)dim * (size_t)dim * sizeof *w->w);
  w->acc = malloc((size_t)dim * sizeof *w->acc);
  if (!w->w || !w->acc) {
    cpu_work_free(w);
    return NULL;
  }
  for (int32_t i = 0; i < dim * dim; i++)
    w->w[i] = embed(i, 3, 0) / (float)dim;
  return w;
}

void cpu_work_free(cpu_work_t *w) {
  if (!w) return;
  free(w->q);
  free(w->k);
  free(w->v);
  free(w->scores);
  free(w->w);
  free(w->acc);
  free(w);
}

/* Grows the per-sample buffers to hold len rows; -1 when out of memory. */
static int reserve(cpu_work_t *w, int64_t len) {
  if (len <= w->cap) return 0;
  size_t rows = (size_t)len, d = (size_t)w->dim;
  float *q = realloc(w->q, rows * d * sizeof *q);
  if (q) w->q = q;
  float *k = realloc(w->k, rows * d * sizeof *k);
  if (k) w->k = k;
  float *v = realloc(w->v, rows * d * sizeof *v);
  if (v) w->v = v;
  float *s = realloc(w->scores, rows * sizeof *s);
  if (s) w->scores = s;
  if (!q || !k || !v || !s) return -1;
  w->cap = len;
  return 0;
}

static float dot(const float *a, const float *b, int32_t d) {
  float s = 0;
  for (int32_t c = 0; c < d; c++) s += a[c] * b[c];
  return s;
}

/* softmax(q_i K[0..i]^T / sqrt(d)) V[0..i] into w->acc. */
static void attend_row(cpu_work_t *w, int64_t i) {
  int32_t d = w->dim;
  float scale = 1.0f / sqrtf((float)d), max = -INFINITY, sum = 0;
  const float *q = w->q + i * d;
  for (int64_t j = 0; j <= i; j++) {
    w->scores[j] = dot(q, w->k + j * d, d) * scale;
    if (w->scores[j] > max) max = w->scores[j];
  }
  memset(w->acc, 0, (size_t)d * sizeof *w->acc);
  for (int64_t j = 0; j <= i; j++) {
    float p = expf(w->scores[j] - max);
    sum += p;
    for (int32_t c = 0; c < d; c++) w->acc[c] += p * w->v[j * d + c];
  }
  for (int32_t c = 0; c < d; c++) w->acc[c] /= sum;
}

/* The "linear layer": W acc, reduced to one number for the checksum. */
static double project(const cpu_work_t *w) {
  double s = 0;
  for (int32_t r = 0; r < w->dim; r++)
    s += dot(w->w + r * w->dim, w->acc, w->dim);
  return s;
}

static double cpu_sample(cpu_work_t *w, const int32_t *tokens, int64_t len) {
  int32_t d = w->dim;
  for (int64_t i = 0; i < len; i++)
    for (int32_t c = 0; c < d; c++) {
      w->q[i * d + c] = embed(tokens[i], 0, c);
      w->k[i * d + c] = embed(tokens[i], 1, c);
      w->v[i * d + c] = embed(tokens[i], 2, c);
    }
  double sum = 0;
  for (int64_t i = 0; i < len; i++) {
    attend_row(w, i);
    sum += project(w);
  }
  return sum;
}

double cpu_pack(cpu_work_t *w, const int32_t *cu_seqlens, int32_t nsamples,
                const int32_t *tokens) {
  double sum = 0;
  for (int32_t i = 0; i < nsamples; i++) {
    int64_t len = cu_seqlens[i + 1] - cu_seqlens[i];
    if (reserve(w, len) < 0) return NAN; /* reported by the caller */
    sum += cpu_sample(w, tokens + cu_seqlens[i], len);
  }
  return sum;
}
