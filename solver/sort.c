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

/* (cost bits, length, index) ascending. */
static int before(const uint64_t *bits, const uint64_t *len, uint32_t x,
                  uint32_t y) {
  if (bits[x] != bits[y]) return bits[x] < bits[y];
  return len[x] != len[y] ? len[x] < len[y] : x < y;
}

/* Runs up to here are put in order by insertion, longer ones by radix
 * passes (each clears DIGITS counters). */
#define SHORT_RUN 256

/* a[0 .. k), alike in the costs' high half and in index order, put in
 * (cost bits, length, index) order: most are already (samples of one
 * length and no images cost alike), the rest by insertion or stably by the
 * length and then the low half. tmp: k entries of scratch. */
static void order_run(const uint64_t *bits, const uint64_t *len, uint32_t *a,
                      uint32_t *tmp, int64_t k, uint32_t *count) {
  int64_t i = 1;
  while (i < k && before(bits, len, a[i - 1], a[i])) i++;
  if (i >= k) return;
  if (k <= SHORT_RUN) {
    for (int64_t i = 1; i < k; i++) {
      uint32_t x = a[i];
      int64_t j = i;
      for (; j > 0 && before(bits, len, x, a[j - 1]); j--) a[j] = a[j - 1];
      a[j] = x;
    }
    return;
  }
  uint64_t longest = 0;
  for (int64_t i = 0; i < k; i++) longest = len[a[i]] > longest ? len[a[i]] : longest;
  uint32_t *src = a, *dst = tmp, *t;
  for (unsigned shift = 0; shift < 64 && (shift == 0 || longest >> shift);
       shift += DIGIT_BITS, t = src, src = dst, dst = t)
    index_pass(len, src, dst, k, shift, count);
  for (unsigned shift = 0; shift < 32; shift += DIGIT_BITS, t = src, src = dst, dst = t)
    index_pass(bits, src, dst, k, shift, count);
  if (src != a) memcpy(a, src, (size_t)k * sizeof *a);
}

/* The indices a[0 .. n) in (cost bits, length, index) order: three radix
 * passes on the costs' high half (their sign, exponent and first 20
 * mantissa bits), then each run alike there on the rest. b: scratch. */
static void order_by_cost(const uint64_t *bits, const uint64_t *len,
                          uint32_t *a, uint32_t *b, int64_t n,
                          uint32_t *count) {
  uint32_t *src = a, *dst = b, *t;
  for (unsigned shift = 32; shift < 64; shift += DIGIT_BITS, t = src, src = dst, dst = t)
    index_pass(bits, src, dst, n, shift, count);
  if (src != a) memcpy(a, src, (size_t)n * sizeof *a);
  for (int64_t lo = 0, hi; lo < n; lo = hi) {
    for (hi = lo + 1; hi < n && bits[a[hi]] >> 32 == bits[a[lo]] >> 32; hi++) {}
    order_run(bits, len, a + lo, b + lo, hi - lo, count);
  }
}

/* Without vision terms cost is non-decreasing in length (in floating point
 * too), so the length is the size, and (cost, length) orders as it does.
 * With them: (cost, length) ascending by the costs' bits, which order as
 * the costs do, being >= 0 (order_by_cost), ranked densely. */
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
  order_by_cost(bits, len, a, b, n, count);
  int64_t rank = 0;
  for (int64_t k = 0; k < n; k++) {
    if (k > 0 && (bits[a[k]] != bits[a[k - 1]] || len[a[k]] != len[a[k - 1]]))
      rank++;
    size[a[k]] = rank;
  }
  return 0;
}
