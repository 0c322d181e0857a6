/* reftrain's real CPU work; see compute.h. (The emulated GPU is
 * tools/emu.) */
#include "compute.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../lengthgen.h"

#include "../mix.h"

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
  uint64_t h = dpshim__tool_mix64(((uint64_t)(uint32_t)token << 24) ^
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
