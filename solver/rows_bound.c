/* The rows caps' share of the lower bound: no plan within the rows caps has
 * a smaller maximum load. Two things bind:
 *   - samples that cannot share a rank: by rows descending, the longest
 *     prefix whose two smallest exceed the largest cap needs a rank for each
 *     of its samples, and at best their costs meet the least histories in
 *     opposite order (the bottleneck pairing);
 *   - ranks whose cap is below every sample's rows: every sample with rows
 *     goes to the other ranks, a water level over their histories.
 * Where no plan within the caps exists (a sample above every cap, more rows
 * than the caps hold, more samples that need a rank of their own than
 * ranks) there is nothing to bound: the algorithms skip, and `from` stands. */
#include <math.h>
#include <stdlib.h>

#include "internal.h"

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Rows fit 31 bits and indices 32, so one sort key orders by rows
 * descending, then index ascending. */
static uint64_t rows_key(int64_t rows, int64_t i) {
  return (uint64_t)(INT32_MAX - rows) << 32 | (uint64_t)i;
}

static int64_t key_index(uint64_t key) { return (int64_t)(key & UINT32_MAX); }

/* The samples with rows, most rows first, into key[]; returns how many. */
static int64_t by_rows(const dpshim__ctx_t *ctx, uint64_t *key) {
  int64_t n = 0;
  for (int64_t i = 0; i < ctx->nsamples; i++)
    if (ctx->samples[i].rows > 0) key[n++] = rows_key(ctx->samples[i].rows, i);
  qsort(key, (size_t)n, sizeof *key, cmp_u64);
  return n;
}

static int64_t rows_of(const dpshim__ctx_t *ctx, uint64_t key) {
  return ctx->samples[key_index(key)].rows;
}

/* Whether the caps can hold the rows at all: the largest cap takes the
 * sample with most rows, and the caps together take every row. */
static int caps_can_hold(const dpshim__ctx_t *ctx, const uint64_t *key,
                         int64_t n, int64_t *cap_max) {
  int64_t total = 0, room = 0;
  for (int64_t k = 0; k < n; k++) total += rows_of(ctx, key[k]);
  *cap_max = 0;
  for (int32_t r = 0; r < ctx->ranks; r++) {
    int64_t cap = ctx->rows_cap[r];
    if (cap > *cap_max) *cap_max = cap;
    if (room < total) room += cap < total ? cap : total; /* no overflow */
  }
  return room >= total && (n == 0 || rows_of(ctx, key[0]) <= *cap_max);
}

/* How many of the first samples pairwise exceed the largest cap. */
static int64_t exclusive_prefix(const dpshim__ctx_t *ctx, const uint64_t *key,
                                int64_t n, int64_t cap_max) {
  int64_t k = n > 0;
  while (k < n && rows_of(ctx, key[k]) + rows_of(ctx, key[k - 1]) > cap_max) k++;
  return k;
}

/* The bound from the k samples that each need a rank of their own: at
 * best their costs meet the least histories in opposite order. (With equal
 * histories it is the costliest sample's, which the plain bound has.) */
static double exclusive_bound(const dpshim__ctx_t *ctx, const uint64_t *key,
                              int64_t k) {
  double *cost = DPSHIM__ALLOC(ctx, double, k);
  double *h = DPSHIM__ALLOC(ctx, double, ctx->ranks), bound = 0;
  if (!cost || !h) return 0;
  for (int64_t t = 0; t < k; t++) cost[t] = ctx->cost[key_index(key[t])];
  for (int32_t r = 0; r < ctx->ranks; r++) h[r] = ctx->history[r];
  qsort(cost, (size_t)k, sizeof *cost, cmp_double);
  qsort(h, (size_t)ctx->ranks, sizeof *h, cmp_double);
  for (int64_t t = 0; t < k; t++) bound = fmax(bound, h[t] + cost[k - 1 - t]);
  return bound;
}

/* The bound from ranks that cannot hold even the sample with fewest rows. */
static double restricted_bound(const dpshim__ctx_t *ctx, const uint64_t *key,
                               int64_t n) {
  if (n == 0) return 0;
  double *h = DPSHIM__ALLOC(ctx, double, ctx->ranks), work = 0;
  if (!h) return 0;
  int64_t fewest = rows_of(ctx, key[n - 1]);
  int32_t m = 0;
  for (int32_t r = 0; r < ctx->ranks; r++)
    if (ctx->rows_cap[r] >= fewest) h[m++] = ctx->history[r];
  if (m == ctx->ranks) return 0; /* no better than the plain water level */
  for (int64_t k = 0; k < n; k++) work += ctx->cost[key_index(key[k])];
  return dpshim__water_level(ctx, h, m, work);
}

double dpshim__rows_lower_bound(const dpshim__ctx_t *ctx, double from) {
  if (!ctx->rows_cap) return from;
  uint64_t *key = DPSHIM__ALLOC(ctx, uint64_t, ctx->nsamples);
  if (!key) return from;
  int64_t n = by_rows(ctx, key), cap_max;
  if (!caps_can_hold(ctx, key, n, &cap_max)) return from;
  int64_t k = exclusive_prefix(ctx, key, n, cap_max);
  if (k > ctx->ranks) return from;
  double bound = k > 1 ? exclusive_bound(ctx, key, k) : 0;
  return fmax(from, fmax(bound, restricted_bound(ctx, key, n)));
}
