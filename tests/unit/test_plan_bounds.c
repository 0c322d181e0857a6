/* The lower bounds every plan is measured against: the plain one (water
 * level, costliest sample, pigeonholes) and the token cap's and the rows
 * caps', worked out by hand, then against brute force. */
#include <criterion/criterion.h>

#include "plan_fixture.h"

static dpshim_sample_t s[64];

static int close_to(double got, double want) {
  return fabs(got - want) <= 1e-9 * fmax(1, fabs(want));
}

Test(plan_bounds, water_level_over_histories) {
  /* cost = len; histories {0, 0, 9}; samples 2+2+2 on ranks 0, 1, 2. The
   * work (6) fills ranks 0 and 1 up to 3 before rank 2's 9 is reached:
   * the level is 3, but rank 2 holds 9 already, so LB = 9 + cheapest (2)
   * = 11: every rank receives a sample. */
  for (int32_t r = 0; r < 3; r++) s[r] = (dpshim_sample_t){2, 2, r, 0, 0, 0};
  double history[3] = {0, 0, 9};
  dpshim_plan_input_t in = plan_input(3, s, 3, DPSHIM_ALGO_NONE);
  in.history = history;
  in.history_len = 3;
  dpshim_plan_t pl;
  dpshim_plan_init(&pl);
  cr_assert_eq(dpshim_plan_solve(&in, &pl), 0, "%s", pl.message);
  cr_assert(close_to(pl.lower_bound, 11), "LB %g", pl.lower_bound);
  cr_assert(close_to(pl.lower_bound_cap, pl.lower_bound),
            "no cap: the cap's bound is the plain one");
  dpshim_plan_free(&pl);
}

/* Two ranks, cost = len^2 + len. Rank 0 holds a 10-token sample (cost 110)
 * and ten 1-token samples (cost 2 each); rank 1 holds twenty. Tokens 40,
 * cap = 1.0 * 40 / 2 = 20. Plain LB = max(170 / 2, 110) = 110. Within the
 * cap rank 1 takes at most 20 of the 30 small samples, so rank 0 keeps at
 * least 10: 110 + 20 = 130, which the original already achieves. */
static int64_t cap_bound_instance(void) {
  int64_t n = 0;
  s[n++] = (dpshim_sample_t){10, 10, 0, 0, 0, 0};
  for (int k = 0; k < 30; k++) s[n++] = (dpshim_sample_t){1, 1, k < 10 ? 0 : 1, 0, 0, 0};
  return n;
}

Test(plan_bounds, token_cap_raises_the_bound) {
  int64_t n = cap_bound_instance();
  dpshim_plan_input_t in = plan_input(2, s, n, DPSHIM_ALGO_DEFAULT);
  in.model = (dpshim_cost_model_t){1, 1, 0, 0, 0};
  in.cap_ratio = 1.0;
  dpshim_plan_t pl;
  dpshim_plan_init(&pl);
  cr_assert_eq(dpshim_plan_solve(&in, &pl), 0, "%s", pl.message);
  cr_assert_eq(pl.cap_tokens, 20);
  cr_assert(close_to(pl.lower_bound, 110), "LB %g", pl.lower_bound);
  cr_assert(fabs(pl.lower_bound_cap - 130) <= 1e-6 * 130, "cap LB %.9g",
            pl.lower_bound_cap);
  /* Nothing within the cap beats the original: default leaves it. */
  cr_assert_eq(pl.reason, DPSHIM_SKIP_NO_GAIN, "%s", pl.message);
  in.cap_ratio = 0;
  cr_assert_eq(dpshim_plan_solve(&in, &pl), 0, "%s", pl.message);
  cr_assert(close_to(pl.lower_bound_cap, 110), "no cap: %g", pl.lower_bound_cap);
  cr_assert(max_of(pl.load_after, 2) < 130, "without the cap it can do better");
  dpshim_plan_free(&pl);
}

Test(plan_bounds, sample_longer_than_the_cap_gives_no_cap_bound) {
  /* cost = len; 1000 + six 100s on rank 0, three 100s elsewhere; cap =
   * 1.5 * 2500 / 4 = 937 < 1000: no plan is within the cap. */
  int64_t n = dominant_instance(s);
  dpshim_plan_input_t in = plan_input(4, s, n, DPSHIM_ALGO_NONE);
  in.cap_ratio = 1.5;
  dpshim_plan_t pl;
  dpshim_plan_init(&pl);
  cr_assert_eq(dpshim_plan_solve(&in, &pl), 0, "%s", pl.message);
  cr_assert_eq(pl.cap_tokens, 937);
  cr_assert(close_to(pl.lower_bound_cap, pl.lower_bound), "cap LB %g, LB %g",
            pl.lower_bound_cap, pl.lower_bound);
  dpshim_plan_free(&pl);
}

Test(plan_bounds, rows_cap_of_zero_raises_the_bound) {
  /* cost = len, 4 ranks, twenty 7-token samples: work 140, plain LB 35
   * (five a rank). Fourteen have rows (ten on rank 0, four on rank 1),
   * six have none (ranks 2, 3). Ranks 2 and 3 have a rows cap of 0, so
   * the 98 of samples with rows share ranks 0 and 1: 49, which default
   * reaches. */
  int64_t n = 0;
  for (int k = 0; k < 14; k++) s[n++] = (dpshim_sample_t){7, 7, k < 10 ? 0 : 1, 5, 0, 0};
  for (int k = 0; k < 6; k++) s[n++] = (dpshim_sample_t){7, 7, 2 + k % 2, 0, 0, 0};
  int64_t caps[4] = {100, 100, 0, 0};
  dpshim_plan_input_t in = plan_input(4, s, n, DPSHIM_ALGO_DEFAULT);
  in.rows_cap = caps;
  in.rows_cap_len = 4;
  dpshim_plan_t pl;
  dpshim_plan_init(&pl);
  cr_assert_eq(dpshim_plan_solve(&in, &pl), 0, "%s", pl.message);
  cr_assert(close_to(pl.lower_bound, 35), "LB %g", pl.lower_bound);
  cr_assert(close_to(pl.lower_bound_cap, 49), "rows LB %g", pl.lower_bound_cap);
  cr_assert_eq(pl.decision, DPSHIM_DECISION_APPLY, "%s", pl.message);
  cr_assert(close_to(max_of(pl.load_after, 4), 49), "max %g", max_of(pl.load_after, 4));
  for (int64_t i = 0; i < 14; i++) cr_assert_lt(pl.dest[i], 2, "sample %lld", (long long)i);
  in.rows_cap = NULL;
  cr_assert_eq(dpshim_plan_solve(&in, &pl), 0, "%s", pl.message);
  cr_assert(close_to(pl.lower_bound_cap, 35), "no cap: %g", pl.lower_bound_cap);
  dpshim_plan_free(&pl);
}

/* The pigeonhole bounds: of the k*P + m costliest samples at least m ranks
 * hold k + 1. cost = len, 3 ranks, samples 10, 10, 10, 9, 1, 1, 1: the
 * mean is 14, the costliest 10, but of the four costliest one rank holds
 * two (k = 1, m = 1): at least 9 + 10 = 19, which is the optimum. */
Test(plan_bounds, pigeonholes_raise_the_bound) {
  static const int64_t lens[] = {10, 10, 10, 9, 1, 1, 1};
  int64_t n = 0;
  for (; n < 7; n++) s[n] = (dpshim_sample_t){lens[n], lens[n], (int32_t)(n % 3), 0, 0, 0};
  dpshim_plan_input_t in = plan_input(3, s, n, DPSHIM_ALGO_DEFAULT);
  dpshim_plan_t pl;
  dpshim_plan_init(&pl);
  cr_assert_eq(dpshim_plan_solve(&in, &pl), 0, "%s", pl.message);
  cr_assert(close_to(pl.lower_bound, 19), "LB %g", pl.lower_bound);
  cr_assert(close_to(max_of(pl.load_after, 3), 19), "max %g", max_of(pl.load_after, 3));
  dpshim_plan_free(&pl);
}

/* ---- the bounds against brute force on tiny instances -------------------- */

#define TINY_N 7

typedef struct optimum {
  double any;    /* the least maximum load over all assignments */
  double in_cap; /* ... over those within the token and rows caps; INFINITY
                    if none */
} optimum_t;

/* Every assignment of n samples to p ranks that leaves no rank empty. */
static optimum_t brute_force(const dpshim_plan_input_t *in, int64_t cap) {
  optimum_t best = {INFINITY, INFINITY};
  int64_t n = in->nsamples, combos = 1;
  for (int64_t k = 0; k < n; k++) combos *= in->ranks;
  for (int64_t code = 0; code < combos; code++) {
    double load[4] = {0};
    int64_t tokens[4] = {0}, rows[4] = {0}, count[4] = {0}, c = code;
    for (int64_t i = 0; i < n; i++, c /= in->ranks) {
      int32_t r = (int32_t)(c % in->ranks);
      load[r] += dpshim_sample_cost(in->model, &in->samples[i]);
      tokens[r] += in->samples[i].len;
      rows[r] += in->samples[i].rows;
      count[r]++;
    }
    double peak = 0;
    int empty = 0, over = 0;
    for (int32_t r = 0; r < in->ranks; r++) {
      peak = fmax(peak, load[r]);
      empty |= count[r] == 0;
      over |= cap >= 0 && tokens[r] > cap;
      over |= in->rows_cap && rows[r] > in->rows_cap[r];
    }
    if (empty) continue;
    best.any = fmin(best.any, peak);
    if (!over) best.in_cap = fmin(best.in_cap, peak);
  }
  return best;
}

/* Rows caps on tiny instances: a few samples with many rows, caps that
 * sometimes keep two of them apart, and one rank in three with a cap of
 * its own (below what it holds, or 0). */
static void random_rows(prng_t *g, dpshim_plan_input_t *in, int64_t *caps) {
  int64_t total = 0;
  for (int64_t i = 0; i < in->nsamples; i++)
    total += s[i].rows = prng_range(g, 0, 2) ? 0 : prng_range(g, 1, 30);
  for (int32_t r = 0; r < in->ranks; r++)
    caps[r] = prng_range(g, 0, 2) ? prng_range(g, 20, 40 + total)
                                  : prng_range(g, 0, 20);
  in->rows_cap = caps;
  in->rows_cap_len = in->ranks;
}

/* Images on some samples, and vision terms that outweigh the text cost at
 * times: cost is then no function of length. */
static void random_images(prng_t *g, dpshim_plan_input_t *in) {
  for (int64_t i = 0; i < in->nsamples; i++) {
    int64_t p = prng_range(g, 0, 1) ? 0 : prng_range(g, 1, 60);
    s[i].patches = p;
    s[i].patches_sq = p * p;
  }
  in->model.d = (double)prng_range(g, 0, 2);
  in->model.e = (double)prng_range(g, 0, 40);
}

Test(plan_bounds, bounds_never_exceed_the_brute_force_optimum) {
  prng_t g = {12345};
  dpshim_plan_t pl;
  dpshim_plan_init(&pl);
  int64_t caps[4];
  for (int trial = 0; trial < 2100; trial++) {
    int32_t p = (int32_t)prng_range(&g, 2, 3);
    int64_t n = prng_range(&g, p, TINY_N);
    for (int64_t i = 0; i < n; i++)
      s[i] = (dpshim_sample_t){prng_range(&g, 1, 40), 1,
                               i < p ? (int32_t)i : (int32_t)prng_range(&g, 0, p - 1),
                               0, 0, 0};
    dpshim_plan_input_t in = plan_input(p, s, n, DPSHIM_ALGO_DEFAULT);
    if (trial >= 600) random_rows(&g, &in, caps); /* the first 600 as before */
    in.model = (dpshim_cost_model_t){(double)prng_range(&g, 0, 3),
                                     (double)prng_range(&g, 0, 50), 0, 0, 0};
    if (in.model.a == 0 && in.model.b == 0) in.model.b = 1;
    if (trial >= 1500) random_images(&g, &in); /* rows caps and images */
    in.cap_ratio = trial % 3 ? 1.0 + 0.1 * (double)prng_range(&g, 0, 5) : 0;
    cr_assert_eq(dpshim_plan_solve(&in, &pl), 0, "%s", pl.message);
    optimum_t opt = brute_force(&in, pl.cap_tokens);
    double slack = 1e-9 * opt.any;
    cr_assert(pl.lower_bound <= opt.any + slack, "trial %d: LB %.9g > optimum %.9g",
              trial, pl.lower_bound, opt.any);
    if (opt.in_cap < INFINITY)
      cr_assert(pl.lower_bound_cap <= opt.in_cap + slack,
                "trial %d: cap LB %.9g > optimum within the cap %.9g", trial,
                pl.lower_bound_cap, opt.in_cap);
    cr_assert(max_of(pl.load_after, p) >= opt.any - slack,
              "trial %d: a plan below the optimum", trial);
  }
  dpshim_plan_free(&pl);
}
