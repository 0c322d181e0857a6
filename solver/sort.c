/* Sample sizes and ordering. A stable LSD radix sort on the size: for 10^5
 * samples it is several times faster than qsort, and stability gives the
 * deterministic tie-break (index ascending) for free. */
#include <string.h>

#include "internal.h"

#define DIGIT_BITS 11
#define DIGITS (1u << DIGIT_BITS)

/* The high half holds largest - size (so ascending = largest first), the
 * low half the sample index. */
static uint64_t sort_key(int64_t largest, int64_t size, int64_t index) {
  return ((uint64_t)(largest - size) << 32) | (uint64_t)index;
}

static void radix_pass(const uint64_t *src, uint64_t *dst, int64_t n,
                       unsigned shift, uint32_t *count) {
  memset(count, 0, DIGITS * sizeof *count);
  for (int64_t i = 0; i < n; i++) count[(src[i] >> shift) & (DIGITS - 1)]++;
  uint32_t sum = 0;
  for (uint32_t d = 0; d < DIGITS; d++) {
    uint32_t c = count[d];
    count[d] = sum;
    sum += c;
  }
  for (int64_t i = 0; i < n; i++)
    dst[count[(src[i] >> shift) & (DIGITS - 1)]++] = src[i];
}

int dpshim__order_by_size_desc(const dpshim__ctx_t *ctx, int64_t *order) {
  int64_t n = ctx->nsamples, largest = 0;
  for (int64_t i = 0; i < n; i++)
    if (ctx->size[i] > largest) largest = ctx->size[i];
  uint64_t *a = DPSHIM__ALLOC(ctx, uint64_t, n);
  uint64_t *b = DPSHIM__ALLOC(ctx, uint64_t, n);
  uint32_t *count = DPSHIM__ALLOC(ctx, uint32_t, DIGITS);
  if (!a || !b || !count) return DPSHIM_ENOMEM;
  for (int64_t i = 0; i < n; i++) a[i] = sort_key(largest, ctx->size[i], i);
  /* Only as many digits as the spread of sizes needs. */
  for (unsigned shift = 32; shift < 64 && (uint64_t)largest >> (shift - 32);
       shift += DIGIT_BITS) {
    radix_pass(a, b, n, shift, count);
    uint64_t *t = a;
    a = b;
    b = t;
  }
  for (int64_t i = 0; i < n; i++) order[i] = (int64_t)(a[i] & UINT32_MAX);
  return 0;
}

/* ---- sizes ----------------------------------------------------------------- */

int dpshim__vision_costs(const dpshim__ctx_t *ctx) {
  if (ctx->model.d == 0 && ctx->model.e == 0) return 0;
  for (int64_t i = 0; i < ctx->nsamples; i++)
    if (ctx->samples[i].patches || ctx->samples[i].patches_sq) return 1;
  return 0;
}

/* One stable counting pass of the indices src -> dst by a digit of key. */
static void index_pass(const uint64_t *key, const uint32_t *src, uint32_t *dst,
                       int64_t n, unsigned shift, uint32_t *count) {
  memset(count, 0, DIGITS * sizeof *count);
  for (int64_t k = 0; k < n; k++) count[(key[src[k]] >> shift) & (DIGITS - 1)]++;
  uint32_t sum = 0;
  for (uint32_t d = 0; d < DIGITS; d++) {
    uint32_t c = count[d];
    count[d] = sum;
    sum += c;
  }
  for (int64_t k = 0; k < n; k++)
    dst[count[(key[src[k]] >> shift) & (DIGITS - 1)]++] = src[k];
}

/* Sorts the indices in *a by key, stably, in as many passes as the largest
 * key needs; *a then holds the result (a and b swap). */
static void sort_indices(const uint64_t *key, uint32_t **a, uint32_t **b,
                         int64_t n, uint32_t *count) {
  uint64_t max = 0;
  for (int64_t i = 0; i < n; i++)
    if (key[i] > max) max = key[i];
  for (unsigned shift = 0; shift < 64 && (shift == 0 || max >> shift);
       shift += DIGIT_BITS) {
    index_pass(key, *a, *b, n, shift, count);
    uint32_t *t = *a;
    *a = *b;
    *b = t;
  }
}

/* Without vision terms cost is non-decreasing in length (in floating point
 * too), so the length is the size, and (cost, length) orders as it does.
 * With them: (cost, length) ascending by two radix sorts (length, then the
 * costs' bits, which order as the costs do, being >= 0), ranked densely. */
int dpshim__sizes(const dpshim__ctx_t *ctx, int64_t *size) {
  int64_t n = ctx->nsamples;
  if (!ctx->vision) {
    for (int64_t i = 0; i < n; i++) size[i] = ctx->samples[i].len;
    return 0;
  }
  uint64_t *len = DPSHIM__ALLOC(ctx, uint64_t, n);
  uint64_t *bits = DPSHIM__ALLOC(ctx, uint64_t, n);
  uint32_t *a = DPSHIM__ALLOC(ctx, uint32_t, n);
  uint32_t *b = DPSHIM__ALLOC(ctx, uint32_t, n);
  uint32_t *count = DPSHIM__ALLOC(ctx, uint32_t, DIGITS);
  if (!len || !bits || !a || !b || !count) return DPSHIM_ENOMEM;
  for (int64_t i = 0; i < n; i++) {
    double cost = ctx->cost[i] + 0.0; /* -0 as +0 */
    len[i] = (uint64_t)ctx->samples[i].len;
    memcpy(&bits[i], &cost, sizeof cost);
    a[i] = (uint32_t)i;
  }
  sort_indices(len, &a, &b, n, count);
  sort_indices(bits, &a, &b, n, count);
  int64_t rank = 0;
  for (int64_t k = 0; k < n; k++) {
    if (k > 0 && (bits[a[k]] != bits[a[k - 1]] || len[a[k]] != len[a[k - 1]]))
      rank++;
    size[a[k]] = rank;
  }
  return 0;
}
