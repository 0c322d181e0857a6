/* Sample sizes and ordering. Radix sorts: for 10^5 samples several times
 * faster than qsort, and stable passes give the deterministic tie-break
 * (index ascending) for free. Lengths: least significant digit first (a
 * few digits). Costs (vision terms): most significant digit first, as a
 * cost's 64 bits would take six passes and its first 16 already tell
 * nearly all samples apart. */
#include <string.h>

#include "internal.h"

#define DIGIT_BITS 11
#define DIGITS (1u << DIGIT_BITS)

/* The high half holds largest - size (so ascending = largest first), the
 * low half the sample index. */
static uint64_t sort_key(int64_t largest, int64_t size, int64_t index) {
  return ((uint64_t)(largest - size) << 32) | (uint64_t)index;
}

static int bit_length(uint64_t x) {
  int n = 0;
  for (; x; x >>= 1) n++;
  return n;
}

static void radix_pass(const uint64_t *src, uint64_t *dst, int64_t n,
                       unsigned shift, unsigned bits, uint32_t *count) {
  uint32_t digits = 1u << bits, mask = digits - 1;
  memset(count, 0, digits * sizeof *count);
  for (int64_t i = 0; i < n; i++) count[(src[i] >> shift) & mask]++;
  uint32_t sum = 0;
  for (uint32_t d = 0; d < digits; d++) {
    uint32_t c = count[d];
    count[d] = sum;
    sum += c;
  }
  for (int64_t i = 0; i < n; i++) dst[count[(src[i] >> shift) & mask]++] = src[i];
}

static int order_by_size_desc(const dpshim__ctx_t *ctx, const int64_t *size,
                              int64_t *order) {
  int64_t n = ctx->nsamples, largest = 0;
  for (int64_t i = 0; i < n; i++)
    if (size[i] > largest) largest = size[i];
  uint64_t *a = DPSHIM__ALLOC(ctx, uint64_t, n);
  uint64_t *b = DPSHIM__ALLOC(ctx, uint64_t, n);
  uint32_t *count = DPSHIM__ALLOC(ctx, uint32_t, DIGITS);
  if (!a || !b || !count) return DPSHIM_ENOMEM;
  for (int64_t i = 0; i < n; i++) a[i] = sort_key(largest, size[i], i);
  /* Only as many passes as the spread of sizes needs, each digit as narrow
   * as they allow: lengths below 2^16 take two passes of 8 bits, whose
   * counts (256) cost nothing beside a few thousand samples. */
  unsigned width = (unsigned)bit_length((uint64_t)largest);
  unsigned passes = (width + DIGIT_BITS - 1) / DIGIT_BITS;
  unsigned bits = passes > 0 ? (width + passes - 1) / passes : 0;
  for (unsigned p = 0, shift = 32; p < passes; p++, shift += bits) {
    radix_pass(a, b, n, shift, bits, count);
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

/* With vision terms, each sample as (cost's bits, len << 32 | index):
 * ordered as (cost, length, index), all distinct. */
typedef struct cost_rec {
  uint64_t cost, len_index;
} cost_rec_t;

static int rec_before(const cost_rec_t *a, const cost_rec_t *b) {
  return a->cost != b->cost ? a->cost < b->cost : a->len_index < b->len_index;
}

static void insertion_sort(cost_rec_t *a, int64_t n) {
  for (int64_t i = 1; i < n; i++) {
    cost_rec_t x = a[i];
    int64_t j = i;
    for (; j > 0 && rec_before(&x, &a[j - 1]); j--) a[j] = a[j - 1];
    a[j] = x;
  }
}

/* Whether a is in order already. A bucket of samples of one (cost,
 * length), text samples of one length, is: the passes are stable and the
 * samples came in index order. Its digits would split nothing, pass after
 * pass, down to the last bit. */
static int sorted(const cost_rec_t *a, int64_t n) {
  for (int64_t i = 1; i < n; i++)
    if (rec_before(&a[i], &a[i - 1])) return 0;
  return 1;
}

/* The records' keys as one number, cost above length: the cost's bits less
 * the least cost's (which order as the costs do, being >= 0), `len_bits`
 * bits of length under them. */
typedef struct key_shape {
  int len_bits;
  uint64_t least;
} key_shape_t;

/* Bits [shift, shift + bits) of a record's key. */
static uint32_t key_digit(const cost_rec_t *r, key_shape_t k, int shift,
                          int bits) {
  uint64_t len = r->len_index >> 32, v, cost = r->cost - k.least;
  if (shift >= k.len_bits) v = cost >> (shift - k.len_bits);
  else v = (cost << (k.len_bits - shift)) | (len >> shift);
  return (uint32_t)(v & ((1u << bits) - 1));
}

#define SMALL_BUCKET 48 /* sorted by insertion from here down */
#define FIRST_BITS 16   /* the first digit's widest: ~2 samples a bucket */

/* One stable counting pass src -> dst on bits [shift, shift + bits) of the
 * key; count[d] is left at the end of bucket d. */
static void msd_pass(const cost_rec_t *src, cost_rec_t *dst, int64_t n,
                     key_shape_t k, int shift, int bits, uint32_t *count) {
  uint32_t digits = 1u << bits;
  memset(count, 0, digits * sizeof *count);
  for (int64_t i = 0; i < n; i++) count[key_digit(&src[i], k, shift, bits)]++;
  uint32_t sum = 0;
  for (uint32_t d = 0; d < digits; d++) {
    uint32_t c = count[d];
    count[d] = sum;
    sum += c;
  }
  for (int64_t i = 0; i < n; i++) dst[count[key_digit(&src[i], k, shift, bits)]++] = src[i];
}

/* A digit as wide as a bucket of n needs to split into a few dozen, up to
 * `widest` and the `top` bits left. */
static int digit_bits(int64_t n, int top, int widest) {
  int bits = bit_length((uint64_t)n);
  if (bits > widest) bits = widest;
  return bits < top ? bits : top;
}

static void msd_sort(cost_rec_t *a, cost_rec_t *tmp, int64_t n, key_shape_t k,
                     int top, uint32_t *count);

/* Each bucket of a (count[d]: its end) sorted on the `top` bits below. */
static void sort_buckets(cost_rec_t *a, cost_rec_t *tmp, const uint32_t *count,
                         uint32_t digits, key_shape_t k, int top,
                         uint32_t *next) {
  for (uint32_t d = 0, from = 0; d < digits; from = count[d++])
    if (count[d] - from > 1)
      msd_sort(a + from, tmp + from, count[d] - from, k, top, next);
}

/* Most significant digit first, on the key's `top` low bits (the higher
 * ones are equal throughout a), into a; equal keys stay in index order,
 * as the passes are stable. */
static void msd_sort(cost_rec_t *a, cost_rec_t *tmp, int64_t n, key_shape_t k,
                     int top, uint32_t *count) {
  if (n <= SMALL_BUCKET) {
    insertion_sort(a, n);
    return;
  }
  if (top == 0 || sorted(a, n)) return;
  int bits = digit_bits(n, top, DIGIT_BITS);
  msd_pass(a, tmp, n, k, top - bits, bits, count);
  memcpy(a, tmp, (size_t)n * sizeof *a);
  sort_buckets(a, tmp, count, 1u << bits, k, top - bits, count + DIGITS);
}

/* The first digit is wide (costs spread over the mantissa, so its buckets
 * hold a sample or two), its pass goes a -> tmp, and the buckets are sorted
 * there: returns tmp, which holds the result. */
static cost_rec_t *sort_records(cost_rec_t *a, cost_rec_t *tmp, int64_t n,
                                key_shape_t k, int top, uint32_t *count) {
  int bits = digit_bits(n, top, FIRST_BITS);
  msd_pass(a, tmp, n, k, top - bits, bits, count);
  sort_buckets(tmp, a, count, 1u << bits, k, top - bits,
               count + (1u << FIRST_BITS));
  return tmp;
}

static int same_size(const cost_rec_t *a, const cost_rec_t *b) {
  return a->cost == b->cost && a->len_index >> 32 == b->len_index >> 32;
}

/* order[from .. to] reversed. */
static void reverse(int64_t *order, int64_t from, int64_t to) {
  for (; from < to; from++, to--) {
    int64_t t = order[from];
    order[from] = order[to];
    order[to] = t;
  }
}

/* a sorted ascending: each sample's size (the dense rank of its (cost,
 * length)), and order[] by size descending, ties by index ascending, in
 * one pass: a[k] lands at n - 1 - k, and each run of equal sizes, whose
 * indices that reverses, is turned back once it ends. */
static void sizes_from_sorted(const cost_rec_t *a, int64_t n, int64_t *size,
                              int64_t *order) {
  int64_t rank = 0, run = 0; /* run: where the current run of a starts */
  for (int64_t k = 0; k < n; k++) {
    if (k > 0 && !same_size(&a[k], &a[k - 1])) {
      reverse(order, n - k, n - 1 - run);
      run = k;
      rank++;
    }
    int64_t i = (int64_t)(a[k].len_index & UINT32_MAX);
    size[i] = rank;
    order[n - 1 - k] = i;
  }
  reverse(order, 0, n - 1 - run);
}

/* Without vision terms cost is non-decreasing in length (in floating point
 * too), so the length is the size, and (cost, length) orders as it does.
 * With them: (cost, length) ascending by one most-significant-digit radix
 * sort of the costs' bits (which order as the costs do, being >= 0) and
 * the lengths below them, ranked densely; order[] comes from the same
 * sort. */
int dpshim__sizes(const dpshim__ctx_t *ctx, int64_t *size, int64_t *order) {
  int64_t n = ctx->nsamples;
  if (!ctx->vision) {
    for (int64_t i = 0; i < n; i++) size[i] = ctx->samples[i].len;
    return order_by_size_desc(ctx, size, order);
  }
  cost_rec_t *a = DPSHIM__ALLOC(ctx, cost_rec_t, n);
  cost_rec_t *tmp = DPSHIM__ALLOC(ctx, cost_rec_t, n);
  /* A count array a level: at most 64 + 31 key bits, and a level sorts
   * more than SMALL_BUCKET samples, so takes 6 bits or the last ones. */
  uint32_t *count =
      DPSHIM__ALLOC(ctx, uint32_t, (1u << FIRST_BITS) + (size_t)DIGITS * 16);
  if (!a || !tmp || !count) return DPSHIM_ENOMEM;
  uint64_t least = UINT64_MAX, most = 0, longest = 0;
  for (int64_t i = 0; i < n; i++) {
    double cost = ctx->cost[i] + 0.0; /* -0 as +0 */
    uint64_t len = (uint64_t)ctx->len[i];
    memcpy(&a[i].cost, &cost, sizeof cost);
    a[i].len_index = len << 32 | (uint64_t)i;
    if (a[i].cost < least) least = a[i].cost;
    if (a[i].cost > most) most = a[i].cost;
    if (len > longest) longest = len;
  }
  key_shape_t k = {bit_length(longest), least};
  sizes_from_sorted(
      sort_records(a, tmp, n, k, bit_length(most - least) + k.len_bits, count),
      n, size, order);
  return 0;
}
