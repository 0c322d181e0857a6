/* Shared helpers for the plan solver tests: a seedable PRNG, input builders
 * and the recomputation of a plan's outputs from its destinations. */
#ifndef DPSHIM_TEST_PLAN_FIXTURE_H
#define DPSHIM_TEST_PLAN_FIXTURE_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "dpshim/solver.h"

/* splitmix64: tiny, seedable and the same on every platform, unlike rand(). */
typedef struct prng {
  uint64_t state;
} prng_t;

static inline uint64_t prng_next(prng_t *g) {
  uint64_t z = (g->state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* In [0, 1). */
static inline double prng_unit(prng_t *g) {
  return (double)(prng_next(g) >> 11) * 0x1p-53;
}

/* In [lo, hi]. */
static inline int64_t prng_range(prng_t *g, int64_t lo, int64_t hi) {
  return lo + (int64_t)(prng_next(g) % (uint64_t)(hi - lo + 1));
}

/* An input with cost = len (model 0, 1, 0), no history, no cap, never
 * skipped for balance: the setting of the hand-worked cases. */
static inline dpshim_plan_input_t plan_input(int32_t ranks,
                                             const dpshim_sample_t *samples,
                                             int64_t n, dpshim_algo_t algo) {
  dpshim_plan_input_t in = {.ranks = ranks,
                            .nsamples = n,
                            .samples = samples,
                            .model = {0, 1, 0},
                            .algo = algo};
  return in;
}

/* samples[i] = {len[i], bytes = len[i], origin[i]}. */
static inline void fill_samples(dpshim_sample_t *s, const int64_t *len,
                                const int32_t *origin, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    s[i] = (dpshim_sample_t){len[i], len[i], origin[i], 0, 0, 0};
}

static inline double max_of(const double *v, int32_t n) {
  double m = v[0];
  for (int32_t i = 1; i < n; i++) m = fmax(m, v[i]);
  return m;
}

/* Per-rank loads (history + cost) of the assignment `where`. */
static inline void loads_of(const dpshim_plan_input_t *in, const int32_t *where,
                            double *load) {
  for (int32_t r = 0; r < in->ranks; r++)
    load[r] = in->history ? in->history[r] : 0;
  for (int64_t i = 0; i < in->nsamples; i++)
    load[where[i]] += dpshim_sample_cost(in->model, &in->samples[i]);
}

/* Per-rank token totals of the assignment `where`. */
static inline void tokens_of(const dpshim_plan_input_t *in,
                             const int32_t *where, int64_t *tokens) {
  for (int32_t r = 0; r < in->ranks; r++) tokens[r] = 0;
  for (int64_t i = 0; i < in->nsamples; i++)
    tokens[where[i]] += in->samples[i].len;
}

/* Per-rank image rows of the assignment `where`. */
static inline void rows_of(const dpshim_plan_input_t *in, const int32_t *where,
                           int64_t *rows) {
  for (int32_t r = 0; r < in->ranks; r++) rows[r] = 0;
  for (int64_t i = 0; i < in->nsamples; i++) rows[where[i]] += in->samples[i].rows;
}

/* Whether the assignment `where` keeps every rank within its rows cap. */
static inline int within_rows_caps(const dpshim_plan_input_t *in,
                                   const int32_t *where, int64_t *rows) {
  rows_of(in, where, rows);
  for (int32_t r = 0; in->rows_cap && r < in->ranks; r++)
    if (rows[r] > in->rows_cap[r]) return 0;
  return 1;
}

/* 4 ranks; rank 0 holds one 1000-token sample and six of 100, ranks 1-3
 * hold three of 100 each (2500 tokens). Writes 16 samples, returns 16. */
static inline int64_t dominant_instance(dpshim_sample_t *s) {
  int64_t n = 0;
  s[n++] = (dpshim_sample_t){1000, 1000, 0, 0, 0, 0};
  for (int k = 0; k < 6; k++) s[n++] = (dpshim_sample_t){100, 100, 0, 0, 0, 0};
  for (int32_t r = 1; r < 4; r++)
    for (int k = 0; k < 3; k++) s[n++] = (dpshim_sample_t){100, 100, r, 0, 0, 0};
  return n;
}
#endif
