/* Sample sizes and ordering. Radix sorts, least significant digit first:
 * for 10^5 samples several times faster than qsort, and stable passes
 * give the deterministic tie-break (index ascending) for free. Each
 * sample is one 64-bit key, what orders it in the high half and its index
 * in the low one. Lengths take a few digits; costs (vision terms) their
 * bits' top 32, the rare ties there settled by a comparison. */
#include <string.h>

#include "internal.h"

#define DIGIT_BITS 11
#define DIGITS (1u << DIGIT_BITS)
#define KEY_BITS 32 /* of a key's high half */
#define INDEX_MASK UINT32_MAX

static int bit_length(uint64_t x) {
  int n = 0;
  for (; x; x >>= 1) n++;
  return n;
}

#define MAX_PASSES 3 /* KEY_BITS in digits of DIGIT_BITS */

/* a's keys ascending by their high half, whose values are below 2^width
 * (<= KEY_BITS), into a or b (returned): one pass counts every digit, then
 * one pass per digit that tells keys apart, each digit as narrow as they
 * allow (lengths below 2^16: two of 8 bits, whose counts cost nothing
 * beside a few thousand samples). count: MAX_PASSES * DIGITS. */
static uint64_t *radix_sort(uint64_t *a, uint64_t *b, int64_t n,
                            unsigned width, uint32_t *count) {
  unsigned passes = (width + DIGIT_BITS - 1) / DIGIT_BITS;
  unsigned bits = passes > 0 ? (width + passes - 1) / passes : 0;
  uint32_t digits = 1u << bits, mask = digits - 1;
  uint32_t *c0 = count, *c1 = count + digits, *c2 = count + 2 * digits;
  memset(count, 0, MAX_PASSES * digits * sizeof *count);
  for (int64_t i = 0; i < n; i++) { /* digits past `passes` are 0 */
    uint64_t k = a[i] >> 32;
    c0[k & mask]++;
    c1[(k >> bits) & mask]++;
    c2[(k >> 2 * bits) & mask]++;
  }
  for (unsigned p = 0; p < passes; p++) {
    uint32_t *c = count + p * digits, shift = 32 + p * bits, sum = 0;
    if (c[(a[0] >> shift) & mask] == (uint64_t)n) continue; /* one digit */
    for (uint32_t d = 0; d < digits; d++) {
      uint32_t k = c[d];
      c[d] = sum;
      sum += k;
    }
    for (int64_t i = 0; i < n; i++) b[c[(a[i] >> shift) & mask]++] = a[i];
    uint64_t *t = a;
    a = b;
    b = t;
  }
  return a;
}

/* ---- without vision terms: the length is the size ---------------------- */

static int order_by_length(const dpshim__ctx_t *ctx, int64_t *size,
                           int64_t *order) {
  int64_t n = ctx->nsamples, largest = 0;
  for (int64_t i = 0; i < n; i++) {
    size[i] = ctx->samples[i].len;
    if (size[i] > largest) largest = size[i];
  }
  uint64_t *a = DPSHIM__ALLOC(ctx, uint64_t, n);
  uint64_t *b = DPSHIM__ALLOC(ctx, uint64_t, n);
  uint32_t *count = DPSHIM__ALLOC(ctx, uint32_t, MAX_PASSES * DIGITS);
  if (!a || !b || !count) return DPSHIM_ENOMEM;
  /* largest - size: ascending keys are the largest first */
  for (int64_t i = 0; i < n; i++)
    a[i] = (uint64_t)(largest - size[i]) << 32 | (uint64_t)i;
  a = radix_sort(a, b, n, (unsigned)bit_length((uint64_t)largest), count);
  for (int64_t i = 0; i < n; i++) order[i] = (int64_t)(a[i] & INDEX_MASK);
  return 0;
}

/* ---- with vision terms: the rank by (cost, length) is the size ----------- */

int dpshim__vision_costs(const dpshim__ctx_t *ctx) {
  if (ctx->model.d == 0 && ctx->model.e == 0) return 0;
  for (int64_t i = 0; i < ctx->nsamples; i++)
    if (ctx->samples[i].patches || ctx->samples[i].patches_sq) return 1;
  return 0;
}

/* A cost's bits, which order as the costs do (they are >= 0; -0 as +0). */
static uint64_t cost_bits(double cost) {
  uint64_t bits;
  cost += 0.0;
  memcpy(&bits, &cost, sizeof bits);
  return bits;
}

/* Whether sample i comes before j: cost, then length descending, then
 * index ascending. */
static int before(const dpshim__ctx_t *ctx, int64_t i, int64_t j) {
  if (ctx->cost[i] != ctx->cost[j]) return ctx->cost[i] > ctx->cost[j];
  if (ctx->len[i] != ctx->len[j]) return ctx->len[i] > ctx->len[j];
  return i < j;
}

static int key_before(const dpshim__ctx_t *ctx, uint64_t x, uint64_t y) {
  return before(ctx, (int64_t)(x & INDEX_MASK), (int64_t)(y & INDEX_MASK));
}

#define SMALL_RUN 32 /* sorted by insertion from here down */

/* a[0 .. n) in the order before() gives, through tmp[0 .. n): a merge
 * sort, as a run of ties in the keys' top bits can be long (all a batch's
 * text samples of one length are one, sorted already). */
static void sort_run(const dpshim__ctx_t *ctx, uint64_t *a, uint64_t *tmp,
                     int64_t n) {
  if (n <= SMALL_RUN) {
    for (int64_t i = 1; i < n; i++) {
      uint64_t x = a[i];
      int64_t j = i;
      for (; j > 0 && key_before(ctx, x, a[j - 1]); j--) a[j] = a[j - 1];
      a[j] = x;
    }
    return;
  }
  int64_t half = n / 2, i = 0, j = half, k = 0;
  sort_run(ctx, a, tmp, half);
  sort_run(ctx, a + half, tmp + half, n - half);
  if (!key_before(ctx, a[half], a[half - 1])) return;
  while (i < half && j < n)
    tmp[k++] = key_before(ctx, a[j], a[i]) ? a[j++] : a[i++];
  while (i < half) tmp[k++] = a[i++];
  while (j < n) tmp[k++] = a[j++];
  memcpy(a, tmp, (size_t)n * sizeof *a);
}

static int same_size(const dpshim__ctx_t *ctx, int64_t i, int64_t j) {
  return ctx->cost[i] == ctx->cost[j] && ctx->len[i] == ctx->len[j];
}

/* The run a[from .. to) of keys alike in their high half (samples whose
 * costs agree in their top bits, in index order) put in before()'s order,
 * nearly always one cost and one length, so in order already; then each
 * of its samples in order[] and its size, the dense rank by (cost,
 * length) ascending, counted on from *rank (the run after it, smaller). */
static void settle_run(const dpshim__ctx_t *ctx, uint64_t *a, uint64_t *tmp,
                       int64_t from, int64_t to, int64_t *rank,
                       int64_t *size, int64_t *order) {
  for (int64_t k = from + 1; k < to; k++)
    if (key_before(ctx, a[k], a[k - 1])) {
      sort_run(ctx, a + from, tmp + from, to - from);
      break;
    }
  for (int64_t k = to - 1; k >= from; k--) {
    int64_t i = (int64_t)(a[k] & INDEX_MASK);
    if (k == to - 1 || !same_size(ctx, i, order[k + 1])) ++*rank;
    size[i] = *rank;
    order[k] = i;
  }
}

/* The samples by (cost, length) descending, ties by index: keys whose high
 * half is the top KEY_BITS bits of the most's cost bits less their own,
 * radix sorted, ties in those bits settled by comparison. Each sample's
 * size is then its dense rank by (cost, length) ascending. */
static int order_by_cost(const dpshim__ctx_t *ctx, int64_t *size,
                         int64_t *order) {
  int64_t n = ctx->nsamples;
  uint64_t *a = DPSHIM__ALLOC(ctx, uint64_t, n);
  uint64_t *b = DPSHIM__ALLOC(ctx, uint64_t, n);
  uint32_t *count = DPSHIM__ALLOC(ctx, uint32_t, MAX_PASSES * DIGITS);
  if (!a || !b || !count) return DPSHIM_ENOMEM;
  uint64_t least = UINT64_MAX, most = 0;
  for (int64_t i = 0; i < n; i++) {
    uint64_t bits = cost_bits(ctx->cost[i]);
    if (bits < least) least = bits;
    if (bits > most) most = bits;
  }
  int spread = bit_length(most - least);
  int shift = spread > KEY_BITS ? spread - KEY_BITS : 0;
  for (int64_t i = 0; i < n; i++)
    a[i] = (most - cost_bits(ctx->cost[i])) >> shift << 32 | (uint64_t)i;
  uint64_t *sorted = radix_sort(a, b, n, (unsigned)(spread - shift), count);
  uint64_t *tmp = sorted == a ? b : a;
  int64_t rank = -1;
  for (int64_t to = n, from; to > 0; to = from) {
    uint64_t high = sorted[to - 1] >> 32;
    for (from = to - 1; from > 0 && sorted[from - 1] >> 32 == high;) from--;
    settle_run(ctx, sorted, tmp, from, to, &rank, size, order);
  }
  return 0;
}

/* Without vision terms cost is non-decreasing in length (in floating point
 * too), so the length is the size, and (cost, length) orders as it does. */
int dpshim__sizes(const dpshim__ctx_t *ctx, int64_t *size, int64_t *order) {
  return ctx->vision ? order_by_cost(ctx, size, order)
                     : order_by_length(ctx, size, order);
}
