/* `seed` on small cases worked by hand from the rules in algo_seed.c, with
 * cost = len (model 0, 1, 0) unless said otherwise and threshold 0. Rules:
 * samples by cost descending (ties: lower index), each to the least-loaded
 * rank (ties: lower rank) within the token cap, else the least-loaded; then
 * refinement between the most and least loaded ranks. */
#include <criterion/criterion.h>
#include <string.h>

#include "plan_fixture.h"

#define MAXN 16

typedef struct seed_case {
  int32_t ranks;
  int64_t n;
  int64_t len[MAXN];
  int32_t origin[MAXN];
} seed_case_t;

static dpshim_plan_t plan;
static dpshim_sample_t samples[MAXN];

static void setup(void) { dpshim_plan_init(&plan); }
static void teardown(void) { dpshim_plan_free(&plan); }
TestSuite(plan_seed, .init = setup, .fini = teardown);

static dpshim_plan_input_t input_of(const seed_case_t *c) {
  fill_samples(samples, c->len, c->origin, c->n);
  dpshim_plan_input_t in = plan_input(c->ranks, samples, c->n, DPSHIM_ALGO_SEED);
  return in;
}

static void expect_dest(const int32_t *want, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    cr_assert_eq(plan.dest[i], want[i], "dest[%lld] = %d, expected %d",
                 (long long)i, plan.dest[i], want[i]);
}

static void expect_loads(const double *want, int32_t ranks) {
  for (int32_t r = 0; r < ranks; r++)
    cr_assert_eq(plan.load_after[r], want[r], "load_after[%d] = %g, expected %g",
                 r, plan.load_after[r], want[r]);
}

static void solve_ok(const dpshim_plan_input_t *in) {
  cr_assert_eq(dpshim_plan_solve(in, &plan), 0, "%s", plan.message);
}

Test(plan_seed, lpt_two_ranks) {
  /* 7 -> r0 (0,0 tie: lower rank); 5 -> r1 (0 < 7); 4 -> r1 (5 < 7): 9;
   * 3 -> r0 (7 < 9): 10; 1 -> r1 (9 < 10): 10. Gap 0: no refinement. */
  seed_case_t c = {2, 5, {7, 5, 4, 3, 1}, {0, 0, 0, 0, 1}};
  dpshim_plan_input_t in = input_of(&c);
  solve_ok(&in);
  cr_assert_eq(plan.decision, DPSHIM_DECISION_APPLY);
  expect_dest((int32_t[]){0, 1, 1, 0, 1}, 5);
  expect_loads((double[]){10, 10}, 2);
  cr_assert_eq(plan.load_before[0], 19.0);
  cr_assert_eq(plan.load_before[1], 1.0);
  cr_assert_eq(plan.bytes_moved, 5 + 4); /* samples 1 and 2 left r0 */
}

Test(plan_seed, cap_skips_least_loaded_then_falls_back) {
  /* cost = len^2 so a rank can be least loaded yet hold the most tokens.
   * lens {6,4,4,4,4}: 22 tokens, cap = floor(1.0 * 22 / 2) = 11.
   *   6 (36) -> r0: load 36, 6 tokens
   *   4 (16) -> r1: 16, 4;  4 -> r1 (16 < 36): 32, 8
   *   4 -> r1 is least loaded (32) but 8 + 4 > 11: next rank r0, 6 + 4 <= 11
   *        -> r0: 52, 10                        (the cap rule)
   *   4 -> r1 (32): 12 > 11; r0 (52): 14 > 11; no rank fits, so the least
   *        loaded r1 takes it anyway: 48, 12   (the fallback)
   * Refinement: gap 4 >= 5% of 48; the 6 on r0 fits r1 neither by a move
   * (12 + 6 > 11) nor a swap with a 4 (12 - 4 + 6 > 11): stop. */
  seed_case_t c = {2, 5, {6, 4, 4, 4, 4}, {0, 0, 0, 0, 1}};
  dpshim_plan_input_t in = input_of(&c);
  in.model = (dpshim_cost_model_t){1, 0, 0, 0, 0};
  in.cap_ratio = 1.0;
  solve_ok(&in);
  cr_assert_eq(plan.cap_tokens, 11);
  expect_dest((int32_t[]){0, 1, 1, 0, 1}, 5);
  expect_loads((double[]){52, 48}, 2);
}

Test(plan_seed, refinement_swap) {
  /* LPT on {3,3,2,2,2}: 3 -> r0, 3 -> r1, 2 -> r0 (5), 2 -> r1 (5),
   * 2 -> r0 (7): loads {7, 5}, gap 2 >= 5% of 5. Costliest on r0: sample 0
   * (3); cheapest on r1: sample 3 (2). Move leaves |4 - 8| = 4, not below 2;
   * Swap leaves |6 - 6| = 0: Swap, sample 0 -> r1, sample 3 -> r0. Gap 0:
   * stop. A Move instead would give dest {1,1,0,1,0}, loads {4, 8}. */
  seed_case_t c = {2, 5, {3, 3, 2, 2, 2}, {0, 0, 0, 0, 1}};
  dpshim_plan_input_t in = input_of(&c);
  solve_ok(&in);
  expect_dest((int32_t[]){1, 1, 0, 0, 0}, 5);
  expect_loads((double[]){6, 6}, 2);
}

/* A refinement Move is not tested: it cannot be reached through the public
 * API. After LPT, the last sample placed on the busiest rank went there when
 * that rank was the least loaded fitting one, so gap <= its cost <= ci (the
 * costliest there), and a Move leaves |gap - 2ci| >= gap: never strictly
 * better. A cap only blocks ranks that would also block ci. A random search
 * over ~10^6 small instances (P 2..3, cost len or len^2, with history and
 * caps) found no Move. The one exception is a busiest rank holding history
 * and no sample, where refinement reads sample -1: see the test below. */

Test(plan_seed, refinement_with_sample_less_busiest_rank) {
  /* history {0, 10}, lens {1,1,1}: LPT puts all three on r0 (load 3 < 10),
   * leaving r1 with only history. Refinement: busiest r1 has no sample, so
   * neither Move nor Swap exists (documented: stop). r1 is empty, so it gets
   * the cheapest sample (lowest index: 0) of the fullest rank r0.
   * Expected: dest {1,0,0}, loads {2, 11}.
   * KNOWN SOLVER BUG (reported): refine_round() uses extreme_sample(hi) ==
   * -1 as an index (samples[-1], cost[-1], and may relocate sample -1);
   * this test catches it under ASan or when the garbage takes a swap. */
  seed_case_t c = {2, 3, {1, 1, 1}, {0, 1, 1}};
  dpshim_plan_input_t in = input_of(&c);
  double history[2] = {0, 10};
  in.history = history;
  in.history_len = 2;
  solve_ok(&in);
  expect_dest((int32_t[]){1, 0, 0}, 3);
  expect_loads((double[]){2, 11}, 2);
}

Test(plan_seed, skip_balanced) {
  /* Loads {5, 6}: mean 5.5, imbalance 6/5.5 - 1 = 0.0909 < 0.1. */
  seed_case_t c = {2, 3, {5, 5, 1}, {0, 1, 1}};
  dpshim_plan_input_t in = input_of(&c);
  in.threshold = 0.1;
  solve_ok(&in);
  cr_assert_eq(plan.decision, DPSHIM_DECISION_SKIP);
  cr_assert_eq(plan.reason, DPSHIM_SKIP_BALANCED);
  expect_dest(c.origin, 3);
  cr_assert_eq(plan.bytes_moved, 0);
  /* Just above the threshold it is solved: 0.0909 >= 0.09. */
  in.threshold = 0.09;
  solve_ok(&in);
  cr_assert_eq(plan.reason, DPSHIM_SKIP_NONE);
}

Test(plan_seed, skip_dominant) {
  /* Loads {11, 2}, mean 6.5; sample 0 costs 10 > 6.5. */
  seed_case_t c = {2, 4, {10, 1, 1, 1}, {0, 0, 1, 1}};
  dpshim_plan_input_t in = input_of(&c);
  solve_ok(&in);
  cr_assert_eq(plan.decision, DPSHIM_DECISION_SKIP);
  cr_assert_eq(plan.reason, DPSHIM_SKIP_DOMINANT);
  expect_dest(c.origin, 4);
  expect_loads((double[]){11, 2}, 2);
  /* At exactly the mean it is not dominant: {6,2,2,2} has loads {8, 4},
   * mean 6, and 6 > 6 is false: solved. */
  seed_case_t d = {2, 4, {6, 2, 2, 2}, {0, 0, 1, 1}};
  in = input_of(&d);
  solve_ok(&in);
  cr_assert_eq(plan.reason, DPSHIM_SKIP_NONE);
}

Test(plan_seed, history_shifts_lpt) {
  /* Without history, {3,3,2,2} deals 3 -> r0, 3 -> r1, 2 -> r0, 2 -> r1.
   * With history {5, 0}: 3 -> r1 (0 < 5): 3; 3 -> r1 (3 < 5): 6;
   * 2 -> r0 (5 < 6): 7; 2 -> r1 (6 < 7): 8. Loads {7, 8}, gap 1 >= 0.35.
   * Costliest on r1: sample 0 (3); Move leaves |5 - 10| = 5; Swap with
   * sample 2 (2) leaves |7 - 8| = 1, not below 1: stop. r0 keeps 1 sample. */
  seed_case_t c = {2, 4, {3, 3, 2, 2}, {0, 0, 1, 1}};
  dpshim_plan_input_t in = input_of(&c);
  solve_ok(&in);
  expect_dest((int32_t[]){0, 1, 0, 1}, 4);
  double history[2] = {5, 0};
  in.history = history;
  in.history_len = 2;
  solve_ok(&in);
  expect_dest((int32_t[]){1, 1, 0, 1}, 4);
  expect_loads((double[]){7, 8}, 2);
  cr_assert_eq(plan.load_before[0], 11.0);
}
