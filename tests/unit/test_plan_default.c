/* `default` specifics: little traffic on packed input, no plan on balanced
 * input, and the dominant-sample case `seed` gives up on. */
#include <criterion/criterion.h>
#include <math.h>

#include "plan_fixture.h"

#define PACK 32768
#define RANKS 64
#define MAXN (RANKS * 64)

static dpshim_sample_t s[MAXN];

/* Each rank holds random samples packing exactly PACK tokens, as a packed
 * data loader delivers them. Returns the sample count. */
static int64_t packed_instance(uint64_t seed) {
  prng_t g = {seed};
  int64_t n = 0;
  for (int32_t r = 0; r < RANKS; r++) {
    int64_t left = PACK;
    while (left > 0) {
      int64_t len = prng_range(&g, 64, 8192);
      if (len > left || n + 1 == MAXN) len = left;
      s[n] = (dpshim_sample_t){len, len * 4096, r, 0};
      left -= len;
      n++;
    }
  }
  return n;
}

static void check_no_empty_rank(const dpshim_plan_t *pl, int64_t n, int32_t p) {
  int64_t count[RANKS] = {0};
  for (int64_t i = 0; i < n; i++) count[pl->dest[i]]++;
  for (int32_t r = 0; r < p; r++) cr_assert(count[r] > 0, "rank %d emptied", r);
}

Test(plan_default, moves_far_less_than_seed) {
  int64_t n = packed_instance(42);
  dpshim_plan_input_t in = plan_input(RANKS, s, n, DPSHIM_ALGO_DEFAULT);
  in.model = (dpshim_cost_model_t){1, 8000, 0};
  in.cap_ratio = 1.2;
  dpshim_plan_t def, seed;
  dpshim_plan_init(&def);
  dpshim_plan_init(&seed);
  cr_assert_eq(dpshim_plan_solve(&in, &def), 0, "%s", def.message);
  in.algo = DPSHIM_ALGO_SEED;
  cr_assert_eq(dpshim_plan_solve(&in, &seed), 0, "%s", seed.message);
  /* Equal tokens but quadratic cost: the input is unbalanced, so both act. */
  cr_assert_eq(def.decision, DPSHIM_DECISION_APPLY, "%s", def.message);
  cr_assert_eq(seed.decision, DPSHIM_DECISION_APPLY, "%s", seed.message);
  cr_assert(def.bytes_moved <= 0.3 * (double)seed.bytes_moved,
            "default moved %lld bytes, seed %lld", (long long)def.bytes_moved,
            (long long)seed.bytes_moved);
  double ratio = max_of(def.load_after, RANKS) / def.lower_bound;
  cr_assert(ratio <= 1.02, "default max/LB = %.6f", ratio);
  int64_t tokens[RANKS];
  tokens_of(&in, def.dest, tokens);
  for (int32_t r = 0; r < RANKS; r++)
    cr_assert(tokens[r] <= def.cap_tokens, "rank %d: %lld tokens > cap %lld", r,
              (long long)tokens[r], (long long)def.cap_tokens);
  check_no_empty_rank(&def, n, RANKS);
  dpshim_plan_free(&def);
  dpshim_plan_free(&seed);
}

Test(plan_default, balanced_input_is_left_alone) {
  /* 8 ranks of two 100-token samples: already at the bound. */
  int64_t n = 16;
  for (int64_t i = 0; i < n; i++) s[i] = (dpshim_sample_t){100, 7, (int32_t)(i / 2), 0};
  dpshim_plan_input_t in = plan_input(8, s, n, DPSHIM_ALGO_DEFAULT);
  dpshim_plan_t pl;
  dpshim_plan_init(&pl);
  const double thresholds[] = {0, 0.05};
  for (int k = 0; k < 2; k++) {
    in.threshold = thresholds[k];
    cr_assert_eq(dpshim_plan_solve(&in, &pl), 0, "%s", pl.message);
    cr_assert_eq(pl.decision, DPSHIM_DECISION_SKIP);
    /* threshold 0 runs the algorithm, which finds no gain; 0.05 stops it. */
    cr_assert_eq(pl.reason, k == 0 ? DPSHIM_SKIP_NO_GAIN : DPSHIM_SKIP_BALANCED);
    cr_assert_eq(pl.bytes_moved, 0);
    for (int64_t i = 0; i < n; i++) cr_assert_eq(pl.dest[i], s[i].origin);
  }
  dpshim_plan_free(&pl);
}

Test(plan_default, dominant_sample_is_isolated) {
  /* 4 ranks; rank 0 holds one 1000-token sample and 6 of 100; the others
   * hold 3 of 100 each. cost = len: total 2500, mean 625 < 1000, so seed
   * skips as dominant; the bound is the dominant sample, 1000. Reaching it
   * needs rank 0 to give away every small sample. */
  int64_t n = dominant_instance(s);
  dpshim_plan_input_t in = plan_input(4, s, n, DPSHIM_ALGO_SEED);
  in.cap_ratio = 2.0; /* floor(2.0 * 2500 / 4) = 1250 tokens */
  dpshim_plan_t pl;
  dpshim_plan_init(&pl);
  cr_assert_eq(dpshim_plan_solve(&in, &pl), 0, "%s", pl.message);
  cr_assert_eq(pl.reason, DPSHIM_SKIP_DOMINANT);
  in.algo = DPSHIM_ALGO_DEFAULT;
  cr_assert_eq(dpshim_plan_solve(&in, &pl), 0, "%s", pl.message);
  cr_assert_eq(pl.decision, DPSHIM_DECISION_APPLY, "%s", pl.message);
  cr_assert_eq(pl.lower_bound, 1000.0);
  double peak = max_of(pl.load_after, 4);
  cr_assert(fabs(peak - 1000.0) <= 1e-9 * 1000.0, "makespan %g", peak);
  cr_assert_eq(pl.dest[0], 0, "the dominant sample stays home");
  for (int64_t i = 1; i <= 6; i++)
    cr_assert_neq(pl.dest[i], 0, "small sample %lld left on rank 0", (long long)i);
  int64_t tokens[4];
  tokens_of(&in, pl.dest, tokens);
  for (int32_t r = 0; r < 4; r++) cr_assert(tokens[r] <= 1250, "rank %d", r);
  check_no_empty_rank(&pl, n, 4);
  dpshim_plan_free(&pl);
}

/* Two ranks, cost = len. Rank 0 holds A (40 tokens, 10 rows), B (30, 10
 * rows) and E (30, no rows, twice B's bytes); rank 1 holds C (30). Loads
 * 100 and 30; the best maximum is 70, by moving B or E. Without a rows cap
 * default moves B; a rows cap of 5 on rank 1 rules B out (and raises the
 * bound to 70: A and B must share rank 0), and default moves E instead. */
Test(plan_default, binding_rows_cap_changes_the_plan) {
  s[0] = (dpshim_sample_t){40, 40, 0, 10};
  s[1] = (dpshim_sample_t){30, 30, 0, 10};
  s[2] = (dpshim_sample_t){30, 60, 0, 0};
  s[3] = (dpshim_sample_t){30, 1000, 1, 0}; /* room in the traffic budget */
  dpshim_plan_input_t in = plan_input(2, s, 4, DPSHIM_ALGO_DEFAULT);
  dpshim_plan_t pl;
  dpshim_plan_init(&pl);
  cr_assert_eq(dpshim_plan_solve(&in, &pl), 0, "%s", pl.message);
  cr_assert_eq(pl.decision, DPSHIM_DECISION_APPLY, "%s", pl.message);
  cr_assert_eq(pl.dest[1], 1, "without a cap B moves");
  cr_assert_eq(pl.dest[2], 0);
  cr_assert_eq(pl.rows_max_after, 10);
  int64_t caps[2] = {100, 5};
  in.rows_cap = caps;
  in.rows_cap_len = 2;
  cr_assert_eq(dpshim_plan_solve(&in, &pl), 0, "%s", pl.message);
  cr_assert_eq(pl.decision, DPSHIM_DECISION_APPLY, "%s", pl.message);
  cr_assert_eq(pl.lower_bound_cap, 70.0);
  cr_assert_eq(pl.dest[1], 0, "B would overflow rank 1's rows");
  cr_assert_eq(pl.dest[2], 1, "E moves instead");
  cr_assert_eq(max_of(pl.load_after, 2), 70.0);
  int64_t rows[2];
  cr_assert(within_rows_caps(&in, pl.dest, rows), "rows %lld, %lld",
            (long long)rows[0], (long long)rows[1]);
  dpshim_plan_free(&pl);
}

/* A cap below what a rank holds now is kept as given: default moves rows
 * off it even at a higher maximum load; where nothing can take them, the
 * plan is skipped for capacity and every sample stays. */
Test(plan_default, rows_cap_below_what_a_rank_holds) {
  s[0] = (dpshim_sample_t){10, 10, 0, 8};
  s[1] = (dpshim_sample_t){10, 10, 0, 8};
  s[2] = (dpshim_sample_t){30, 30, 1, 0};
  dpshim_plan_input_t in = plan_input(2, s, 3, DPSHIM_ALGO_DEFAULT);
  int64_t caps[2] = {10, 10};
  in.rows_cap = caps;
  in.rows_cap_len = 2;
  dpshim_plan_t pl;
  dpshim_plan_init(&pl);
  cr_assert_eq(dpshim_plan_solve(&in, &pl), 0, "%s", pl.message);
  cr_assert_eq(pl.decision, DPSHIM_DECISION_APPLY, "%s", pl.message);
  cr_assert_eq(pl.rows_max_after, 8);
  cr_assert_eq(max_of(pl.load_after, 2), 40.0, "loads 10 / 40 > 20 / 30");
  caps[1] = 4;
  cr_assert_eq(dpshim_plan_solve(&in, &pl), 0, "%s", pl.message);
  cr_assert_eq(pl.reason, DPSHIM_SKIP_CAPACITY, "%s", pl.message);
  cr_assert_str_eq(pl.message, "skip: capacity");
  for (int64_t i = 0; i < 3; i++) cr_assert_eq(pl.dest[i], s[i].origin);
  dpshim_plan_free(&pl);
}
