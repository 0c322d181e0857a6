/* Input validation: every bad field is rejected with DPSHIM_EINVAL and named
 * in plan.message; NULLs do not crash; an errored plan object is reusable. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "plan_fixture.h"

/* Three samples on two ranks: a valid input each test then breaks. */
static dpshim_sample_t samples[3];
static double history[2];
static int64_t rows_cap[2];
static dpshim_plan_input_t in;
static dpshim_plan_t plan;

static void setup(void) {
  static const int64_t len[] = {10, 20, 30};
  static const int32_t origin[] = {0, 0, 1};
  fill_samples(samples, len, origin, 3);
  history[0] = history[1] = 0;
  rows_cap[0] = rows_cap[1] = 100;
  in = plan_input(2, samples, 3, DPSHIM_ALGO_DEFAULT);
  dpshim_plan_init(&plan);
}

static void teardown(void) { dpshim_plan_free(&plan); }

TestSuite(plan_errors, .init = setup, .fini = teardown);

/* Solving fails with EINVAL and the message names `field`. */
static void expect_einval(const char *field) {
  int rc = dpshim_plan_solve(&in, &plan);
  cr_assert_eq(rc, DPSHIM_EINVAL, "expected EINVAL for %s, got %d", field, rc);
  cr_assert(strstr(plan.message, field) != NULL,
            "message \"%s\" does not name %s", plan.message, field);
}

Test(plan_errors, valid_input_solves) {
  /* The base input must be valid, or every other test proves nothing. */
  cr_assert_eq(dpshim_plan_solve(&in, &plan), 0, "%s", plan.message);
}

Test(plan_errors, ranks_zero) { in.ranks = 0; expect_einval("ranks"); }
Test(plan_errors, ranks_negative) { in.ranks = -3; expect_einval("ranks"); }
Test(plan_errors, nsamples_zero) { in.nsamples = 0; expect_einval("nsamples"); }

Test(plan_errors, nsamples_below_ranks) {
  in.ranks = 4; /* 3 samples cannot give 4 ranks one each */
  expect_einval("nsamples");
}

Test(plan_errors, samples_null) { in.samples = NULL; expect_einval("samples"); }
Test(plan_errors, negative_len) { samples[1].len = -1; expect_einval("samples[1].len"); }
Test(plan_errors, negative_bytes) { samples[2].bytes = -5; expect_einval("samples[2].bytes"); }
Test(plan_errors, bytes_too_large) {
  samples[2].bytes = (int64_t)1 << 51;
  expect_einval("samples[2].bytes");
}
Test(plan_errors, negative_patches) {
  samples[1].patches = -1;
  expect_einval("samples[1].patches");
}
Test(plan_errors, negative_patches_sq) {
  samples[2].patches_sq = -7;
  expect_einval("samples[2].patches_sq");
}
Test(plan_errors, negative_vision_coefficient) {
  in.model.e = -1;
  expect_einval("model.e");
}
Test(plan_errors, origin_too_big) { samples[0].origin = 2; expect_einval("samples[0].origin"); }
Test(plan_errors, origin_negative) { samples[0].origin = -1; expect_einval("samples[0].origin"); }

Test(plan_errors, negative_rows) { samples[1].rows = -1; expect_einval("samples[1].rows"); }
Test(plan_errors, rows_too_big) {
  samples[2].rows = (int64_t)INT32_MAX + 1;
  expect_einval("samples[2].rows");
}

Test(plan_errors, rows_cap_len_mismatch) {
  in.rows_cap = rows_cap;
  in.rows_cap_len = 1;
  expect_einval("rows_cap_len");
}

Test(plan_errors, host_len_mismatch) {
  static const int32_t host[] = {0, 1, 1};
  in.host = host;
  in.host_len = 3;
  expect_einval("host_len");
}

Test(plan_errors, inter_host_cost_below_one) {
  in.inter_host_cost = 0.5;
  expect_einval("inter_host_cost");
}

Test(plan_errors, inter_host_cost_not_finite) {
  in.inter_host_cost = NAN;
  expect_einval("inter_host_cost");
}

Test(plan_errors, rows_cap_negative) {
  in.rows_cap = rows_cap;
  in.rows_cap_len = 2;
  rows_cap[1] = -1;
  expect_einval("rows_cap[1]");
}

Test(plan_errors, rows_cap_valid_solves) {
  /* rows_cap_len is read only with rows_cap; a cap of 0 is a cap. */
  in.rows_cap_len = 7;
  cr_assert_eq(dpshim_plan_solve(&in, &plan), 0, "%s", plan.message);
  in.rows_cap = rows_cap;
  in.rows_cap_len = 2;
  rows_cap[0] = rows_cap[1] = 0;
  cr_assert_eq(dpshim_plan_solve(&in, &plan), 0, "%s", plan.message);
}

Test(plan_errors, rank_without_sample) {
  samples[2].origin = 0; /* rank 1 is left empty */
  expect_einval("rank 1");
}

Test(plan_errors, history_len_mismatch) {
  in.history = history;
  in.history_len = 3;
  expect_einval("history_len");
}

static void bad_history(double v) {
  in.history = history;
  in.history_len = 2;
  history[1] = v;
  expect_einval("history[1]");
}

Test(plan_errors, history_nan) { bad_history(NAN); }
Test(plan_errors, history_negative) { bad_history(-1.0); }
Test(plan_errors, history_infinite) { bad_history(INFINITY); }

static void bad_model(double *coef, const char *field) {
  const double bad[] = {NAN, INFINITY, -1.0};
  for (int k = 0; k < 3; k++) {
    setup(); /* re-arm the valid input; init() on a used plan would leak */
    dpshim_plan_free(&plan);
    *coef = bad[k];
    expect_einval(field);
  }
}

Test(plan_errors, model_a) { bad_model(&in.model.a, "model.a"); }
Test(plan_errors, model_b) { bad_model(&in.model.b, "model.b"); }
Test(plan_errors, model_c) { bad_model(&in.model.c, "model.c"); }

Test(plan_errors, cap_ratio_negative) { in.cap_ratio = -0.5; expect_einval("cap_ratio"); }
Test(plan_errors, cap_ratio_nan) { in.cap_ratio = NAN; expect_einval("cap_ratio"); }
Test(plan_errors, threshold_nan) { in.threshold = NAN; expect_einval("threshold"); }

Test(plan_errors, algo_out_of_range) {
  in.algo = (dpshim_algo_t)5;
  expect_einval("algo");
  in.algo = (dpshim_algo_t)-1;
  expect_einval("algo");
}

Test(plan_errors, model_overflows_to_inf) {
  /* Each coefficient is finite, but 1e300 * (1e9)^2 is not. */
  in.model = (dpshim_cost_model_t){1e300, 0, 0, 0, 0};
  samples[1].len = 1000000000;
  expect_einval("overflows");
  cr_assert(strstr(plan.message, "samples[1]") != NULL, "%s", plan.message);
}

Test(plan_errors, null_input_and_plan) {
  cr_assert_eq(dpshim_plan_solve(NULL, &plan), DPSHIM_EINVAL);
  cr_assert(strstr(plan.message, "input") != NULL, "%s", plan.message);
  cr_assert_eq(dpshim_plan_solve(&in, NULL), DPSHIM_EINVAL);
  cr_assert_eq(dpshim_plan_solve(NULL, NULL), DPSHIM_EINVAL);
}

Test(plan_errors, algo_names) {
  const char *names[] = {"default", "seed", "kk", "none", "kk-cap"};
  const dpshim_algo_t algos[] = {DPSHIM_ALGO_DEFAULT, DPSHIM_ALGO_SEED,
                                 DPSHIM_ALGO_KK, DPSHIM_ALGO_NONE,
                                 DPSHIM_ALGO_KK_CAP};
  for (int k = 0; k < 5; k++) {
    dpshim_algo_t a = (dpshim_algo_t)-1;
    cr_assert_eq(dpshim_algo_from_name(names[k], &a), 0, "%s", names[k]);
    cr_assert_eq(a, algos[k]);
    cr_assert_str_eq(dpshim_algo_name(algos[k]), names[k]);
  }
  const char *bad[] = {"", "Default", "lpt", "seed ", "kkk", "kk_cap", NULL};
  for (int k = 0; k < 7; k++) {
    dpshim_algo_t a = DPSHIM_ALGO_SEED;
    cr_assert_eq(dpshim_algo_from_name(bad[k], &a), DPSHIM_EINVAL, "%s",
                 bad[k] ? bad[k] : "NULL");
    cr_assert_eq(a, DPSHIM_ALGO_SEED, "a rejected name must not write");
  }
}

Test(plan_errors, capacity_reason_name) {
  /* The shim prints the same word for its own buffer check. */
  cr_assert_str_eq(dpshim_skip_reason_name(DPSHIM_SKIP_CAPACITY), "capacity");
}

Test(plan_errors, plan_reusable_after_error) {
  /* An error in validation, then one after the outputs were reserved (the
   * overflow), must leave the object able to solve a valid input. */
  in.ranks = 0;
  cr_assert_eq(dpshim_plan_solve(&in, &plan), DPSHIM_EINVAL);
  in.ranks = 2;
  in.model.a = 1e300;
  samples[0].len = 1000000000;
  cr_assert_eq(dpshim_plan_solve(&in, &plan), DPSHIM_EINVAL);
  in.model.a = 0;
  samples[0].len = 10;
  cr_assert_eq(dpshim_plan_solve(&in, &plan), 0, "%s", plan.message);
  /* Loads 30 and 30: nothing to gain, and the message says so. */
  cr_assert_eq(plan.reason, DPSHIM_SKIP_NO_GAIN);
  cr_assert_str_eq(plan.message, "skip: no-gain");
  double load[2];
  loads_of(&in, plan.dest, load);
  cr_assert_eq(plan.load_after[0], load[0]);
  cr_assert_eq(plan.load_after[1], load[1]);
  cr_assert_eq(plan.load_before[0], 30.0);
  cr_assert_eq(plan.load_before[1], 30.0);
}
