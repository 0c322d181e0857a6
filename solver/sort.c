/* Sample ordering. A stable LSD radix sort on the length: for 10^5 samples
 * it is several times faster than qsort, and stability gives the
 * deterministic tie-break (index ascending) for free. */
#include <string.h>

#include "internal.h"

#define DIGIT_BITS 11
#define DIGITS (1u << DIGIT_BITS)

/* The high half holds longest - len (so ascending = longest first), the low
 * half the sample index. */
static uint64_t sort_key(int64_t longest, int64_t len, int64_t index) {
  return ((uint64_t)(longest - len) << 32) | (uint64_t)index;
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

int dpshim__order_by_len_desc(const dpshim__ctx_t *ctx, int64_t *order) {
  int64_t n = ctx->nsamples, longest = 0;
  for (int64_t i = 0; i < n; i++)
    if (ctx->samples[i].len > longest) longest = ctx->samples[i].len;
  uint64_t *a = DPSHIM__ALLOC(ctx, uint64_t, n);
  uint64_t *b = DPSHIM__ALLOC(ctx, uint64_t, n);
  uint32_t *count = DPSHIM__ALLOC(ctx, uint32_t, DIGITS);
  if (!a || !b || !count) return DPSHIM_ENOMEM;
  for (int64_t i = 0; i < n; i++) a[i] = sort_key(longest, ctx->samples[i].len, i);
  /* Only as many digits as the spread of lengths needs. */
  for (unsigned shift = 32; shift < 64 && (uint64_t)longest >> (shift - 32);
       shift += DIGIT_BITS) {
    radix_pass(a, b, n, shift, count);
    uint64_t *t = a;
    a = b;
    b = t;
  }
  for (int64_t i = 0; i < n; i++) order[i] = (int64_t)(a[i] & UINT32_MAX);
  return 0;
}
