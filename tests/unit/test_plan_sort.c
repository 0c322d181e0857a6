/* The samples' sizes and order (solver/sort.c) against a comparison sort:
 * order[] by (cost, length) descending, ties by index; size[] the dense
 * rank of (cost, length) ascending. Costs are set directly, so the radix
 * keys meet what real models rarely give them: costs alike in their top
 * bits but not equal, equal costs of different lengths, -0, one cost for
 * all. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "internal.h"

#define N 3000

typedef struct sorted_case {
  double cost[N];
  int32_t len[N];
} sorted_case_t;

static const sorted_case_t *by; /* for cmp_ref(): qsort has no argument */

static int cmp_ref(const void *x, const void *y) {
  int64_t i = *(const int64_t *)x, j = *(const int64_t *)y;
  if (by->cost[i] != by->cost[j]) return by->cost[i] > by->cost[j] ? -1 : 1;
  if (by->len[i] != by->len[j]) return by->len[i] > by->len[j] ? -1 : 1;
  return (i > j) - (i < j);
}

static void check(const sorted_case_t *c) {
  /* The vision path reads costs and lengths, not the samples. */
  dpshim__arena_t arena = {0};
  dpshim__ctx_t ctx = {.nsamples = N, .cost = c->cost, .len = c->len,
                       .vision = 1, .arena = &arena};
  int64_t size[N], order[N], want[N];
  cr_assert_eq(dpshim__sizes(&ctx, size, order), 0);
  for (int64_t i = 0; i < N; i++) want[i] = i;
  by = c;
  qsort(want, (size_t)N, sizeof *want, cmp_ref);
  for (int64_t k = 0; k < N; k++)
    cr_assert_eq(order[k], want[k], "order[%lld] = %lld, expected %lld",
                 (long long)k, (long long)order[k], (long long)want[k]);
  int64_t rank = 0;
  for (int64_t k = N - 1; k >= 0; k--) {
    int64_t i = want[k], prev = k + 1 < N ? want[k + 1] : -1;
    if (prev >= 0 && (c->cost[i] != c->cost[prev] || c->len[i] != c->len[prev]))
      rank++;
    cr_assert_eq(size[i], rank, "size[%lld] = %lld, expected %lld",
                 (long long)i, (long long)size[i], (long long)rank);
  }
  dpshim__arena_free(&arena);
}

static sorted_case_t c;

/* Text-like samples: a few lengths, so long runs of one cost. */
Test(plan_sort, runs_of_one_cost_stay_in_index_order) {
  srand(1);
  for (int64_t i = 0; i < N; i++) {
    c.len[i] = 1 + rand() % 7;
    c.cost[i] = 0.5 * c.len[i] * c.len[i];
  }
  check(&c);
}

/* One huge cost spreads the keys: the rest agree in their top bits and
 * differ in the last ones, in an order the radix passes do not see. */
Test(plan_sort, costs_alike_in_their_top_bits) {
  srand(2);
  for (int64_t i = 0; i < N; i++) {
    c.len[i] = 1 + rand() % 3;
    c.cost[i] = 1.0 + (double)(rand() % 64) * 0x1p-52;
  }
  c.cost[N / 2] = 1e300;
  check(&c);
}

Test(plan_sort, equal_costs_by_length_then_index) {
  srand(3);
  for (int64_t i = 0; i < N; i++) {
    c.len[i] = rand() % 1000;
    c.cost[i] = (double)(rand() % 4);
  }
  check(&c);
}

Test(plan_sort, one_cost_for_all_and_signed_zeros) {
  for (int64_t i = 0; i < N; i++) {
    c.len[i] = (int32_t)((i * 7919) % 13);
    c.cost[i] = i % 2 ? 0.0 : -0.0;
  }
  check(&c);
  for (int64_t i = 0; i < N; i++) c.cost[i] = 3.25;
  check(&c);
}

/* Costs spread over many binades, as the vision terms give. */
Test(plan_sort, costs_over_many_binades) {
  srand(4);
  for (int64_t i = 0; i < N; i++) {
    c.len[i] = rand() % 32768;
    c.cost[i] = ldexp((double)(rand() % 1000), rand() % 40 - 20);
  }
  check(&c);
}
