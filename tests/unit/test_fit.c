/* The warm-up fit: recovery of known coefficients from synthetic warm-up
 * measurements, active bounds, determinism and input validation. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "dpshim/fit.h"

/* splitmix64: tiny, seedable and the same on every platform, unlike rand(). */
typedef struct prng {
  uint64_t state;
} prng_t;

static uint64_t prng_next(prng_t *g) {
  uint64_t z = (g->state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* In (0, 1], so log() in Box-Muller never sees 0. */
static double prng_uniform(prng_t *g) {
  return ((double)(prng_next(g) >> 11) + 1.0) * 0x1p-53;
}

static double prng_normal(prng_t *g) {
  double radius = sqrt(-2.0 * log(prng_uniform(g)));
  return radius * cos(2.0 * M_PI * prng_uniform(g));
}

/* A synthetic warm-up: every rank packs samples up to a token budget, as the
 * data loader does, from a log-normal length distribution whose median
 * differs per rank (one rank gets chat turns, another long documents), so
 * that count, sum_len and sum_len2 vary independently enough to separate
 * the three coefficients. */
typedef struct workload_spec {
  int64_t iters;
  int32_t ranks;
  dpshim_cost_model_t truth;
  double tokens_per_rank;
  double median_len_lo, median_len_hi; /* per-rank medians, log-uniform */
  double len_sigma;                    /* of log(len) */
  double noise;                        /* relative sd of measured times */
  uint64_t seed;
  double image_share; /* of samples with one image, log-normal patches */
} workload_spec_t;

typedef struct workload {
  dpshim_fit_point_t *points;
  double *iter_time;
  dpshim_fit_input_t in;
} workload_t;

static double true_time(dpshim_cost_model_t m, const dpshim_fit_point_t *p) {
  return m.a * p->sum_len2 + m.b * p->sum_len + m.c * p->count +
         m.d * p->sum_patches_sq + m.e * p->sum_patches;
}

static double draw_len(prng_t *g, double median, double sigma, double max_len) {
  double len = round(median * exp(sigma * prng_normal(g)));
  return fmin(fmax(len, 1.0), max_len);
}

/* Adds samples while they fit; the first that does not ends the pack. */
static void pack_rank(prng_t *g, const workload_spec_t *spec,
                      dpshim_fit_point_t *p) {
  double log_lo = log(spec->median_len_lo), log_hi = log(spec->median_len_hi);
  double median = exp(log_lo + (log_hi - log_lo) * prng_uniform(g));
  memset(p, 0, sizeof *p);
  for (;;) {
    double len = draw_len(g, median, spec->len_sigma, spec->tokens_per_rank);
    if (p->sum_len + len > spec->tokens_per_rank) break;
    p->sum_len += len;
    p->sum_len2 += len * len;
    p->count += 1.0;
    if (spec->image_share > 0 && prng_uniform(g) < spec->image_share) {
      double patches = draw_len(g, 1024, 1.0, 16384);
      p->sum_patches += patches;
      p->sum_patches_sq += patches * patches;
    }
  }
}

static workload_t make_workload(const workload_spec_t *spec,
                                dpshim_fit_method_t method) {
  workload_t w;
  size_t npoints = (size_t)spec->iters * (size_t)spec->ranks;
  w.points = calloc(npoints, sizeof *w.points);
  w.iter_time = calloc((size_t)spec->iters, sizeof *w.iter_time);
  cr_assert(w.points && w.iter_time);
  prng_t g = {spec->seed};
  for (int64_t t = 0; t < spec->iters; t++) {
    for (int32_t r = 0; r < spec->ranks; r++) {
      dpshim_fit_point_t *p = &w.points[t * spec->ranks + r];
      pack_rank(&g, spec, p);
      double noise = 1.0 + spec->noise * prng_normal(&g);
      p->time = true_time(spec->truth, p) * noise;
      w.iter_time[t] = fmax(w.iter_time[t], p->time);
    }
  }
  w.in = (dpshim_fit_input_t){spec->iters, spec->ranks, w.points, w.iter_time,
                              method, 0};
  return w;
}

static void free_workload(workload_t *w) {
  free(w->points);
  free(w->iter_time);
}

/* RANKS sees every rank's time: 64 iterations x 16 ranks = 1024 points pin
 * each coefficient to ~0.4% (1 sd) under 1% noise. The truth gives each
 * term a real share of the time (attention overtakes the linear part at
 * 20k tokens; 1 ms per sample): with c = 1e-4 the count term would be below
 * the noise and no fitter could recover it to 2%. Times 0.005..0.35 s. */
static const workload_spec_t ranks_spec = {
    .iters = 64, .ranks = 16,
    .truth = {2e-10, 4e-6, 1e-3},
    .tokens_per_rank = 32768,
    .median_len_lo = 128, .median_len_hi = 8192, .len_sigma = 1.0,
    .noise = 0.01, .seed = 1,
};

/* SEED sees one number per iteration (the slowest rank), so it needs more
 * iterations for the same accuracy: 256 give ~0.6% (1 sd). Its softmax-max
 * with alpha = 20 adds up to log(16)/20 = 0.14 s when ranks tie, so the
 * times are made longer (a model 25x slower per token: 0.1..9 s), where
 * the slowest rank usually leads the next by far more than 1/alpha = 0.05 s.
 * On noise-free data the bias then costs ~0.5% per coefficient, which leaves
 * the 2% budget to the noise. (At the RANKS scales the bias swamps the
 * signal: the seed fit is then off by ~50%.) */
static const workload_spec_t seed_spec = {
    .iters = 256, .ranks = 16,
    .truth = {5e-9, 1e-4, 2.5e-2},
    .tokens_per_rank = 32768,
    .median_len_lo = 128, .median_len_hi = 8192, .len_sigma = 1.0,
    .noise = 0.01, .seed = 2,
};

static dpshim_fit_result_t fit_ok(const dpshim_fit_input_t *in) {
  dpshim_fit_result_t out;
  int rc = dpshim_fit(in, &out);
  cr_assert_eq(rc, 0, "dpshim_fit: %d (%s)", rc, out.message);
  return out;
}

static void assert_coef(double got, double want, double rel, const char *name) {
  cr_expect(fabs(got - want) <= rel * want, "%s = %.6g, want %.6g within %g%%",
            name, got, want, rel * 100.0);
}

static void assert_model(dpshim_cost_model_t got, dpshim_cost_model_t want,
                         double rel) {
  assert_coef(got.a, want.a, rel, "a");
  assert_coef(got.b, want.b, rel, "b");
  assert_coef(got.c, want.c, rel, "c");
  assert_coef(got.d, want.d, rel, "d");
  assert_coef(got.e, want.e, rel, "e");
}

/* A coefficient that should be 0 is "~0" when its term adds < 0.5% to the
 * mean point's time: with noise, NNLS may leave it slightly positive. */
static void assert_negligible(double coef, double mean_feature,
                              double mean_time, const char *name) {
  cr_expect(coef >= 0.0 && coef * mean_feature < 0.005 * mean_time,
            "%s = %.6g: its term is %.3g%% of the time, want ~0", name, coef,
            100.0 * coef * mean_feature / mean_time);
}

static dpshim_fit_point_t mean_point(const dpshim_fit_input_t *in) {
  dpshim_fit_point_t mean = {0};
  int64_t n = in->iters * in->ranks;
  for (int64_t i = 0; i < n; i++) {
    mean.sum_len2 += in->points[i].sum_len2 / (double)n;
    mean.sum_len += in->points[i].sum_len / (double)n;
    mean.count += in->points[i].count / (double)n;
    mean.time += in->points[i].time / (double)n;
  }
  return mean;
}

Test(fit_ranks, recovers_coefficients_from_noisy_timings) {
  workload_t w = make_workload(&ranks_spec, DPSHIM_FIT_RANKS);
  dpshim_fit_result_t out = fit_ok(&w.in);
  assert_model(out.model, ranks_spec.truth, 0.02);
  cr_expect_lt(out.mean_rel_error, 0.02);
  cr_expect_geq(out.max_rel_error, out.mean_rel_error);
  free_workload(&w);
}

Test(fit_seed, recovers_coefficients_from_noisy_iteration_times) {
  workload_t w = make_workload(&seed_spec, DPSHIM_FIT_SEED);
  dpshim_fit_result_t out = fit_ok(&w.in);
  assert_model(out.model, seed_spec.truth, 0.02);
  cr_expect_lt(out.mean_rel_error, 0.02);
  cr_expect_geq(out.max_rel_error, out.mean_rel_error);
  free_workload(&w);
}

/* Half the samples carry an image whose encoding costs about as much as
 * the text part of a rank's pack. */
static workload_spec_t vision_spec(workload_spec_t spec) {
  spec.truth.d = 2e-8;
  spec.truth.e = 5e-5;
  spec.image_share = 0.5;
  return spec;
}

/* The images' time dwarfs the per-sample term c here, so only the terms that
 * carry the time are held to the truth, and the prediction to the noise. */
Test(fit_ranks, recovers_the_vision_terms) {
  workload_spec_t spec = vision_spec(ranks_spec);
  workload_t w = make_workload(&spec, DPSHIM_FIT_RANKS);
  dpshim_fit_result_t out = fit_ok(&w.in);
  assert_coef(out.model.a, spec.truth.a, 0.05, "a");
  assert_coef(out.model.b, spec.truth.b, 0.05, "b");
  assert_coef(out.model.d, spec.truth.d, 0.03, "d");
  assert_coef(out.model.e, spec.truth.e, 0.03, "e");
  cr_expect_lt(out.mean_rel_error, 0.015);
  free_workload(&w);
}

/* The seed fit sees only each iteration's slowest rank: it learns the
 * images' terms and predicts the iteration, without separating every term. */
Test(fit_seed, learns_the_vision_terms) {
  workload_spec_t spec = vision_spec(seed_spec);
  spec.truth.d *= 25, spec.truth.e *= 25; /* as seed_spec's: 25x slower */
  workload_t w = make_workload(&spec, DPSHIM_FIT_SEED);
  dpshim_fit_result_t out = fit_ok(&w.in);
  assert_coef(out.model.d, spec.truth.d, 0.10, "d");
  cr_expect_lt(out.mean_rel_error, 0.02);
  free_workload(&w);
}

/* text_only fits the same points without d and e: they stay 0, and the
 * text terms cannot explain the images' time. */
Test(fit, text_only_leaves_the_vision_terms_out) {
  workload_spec_t spec = vision_spec(ranks_spec);
  for (int m = 0; m < 2; m++) {
    workload_t w = make_workload(&spec, m ? DPSHIM_FIT_SEED : DPSHIM_FIT_RANKS);
    dpshim_fit_result_t full = fit_ok(&w.in);
    w.in.text_only = 1;
    dpshim_fit_result_t text = fit_ok(&w.in);
    cr_expect_eq(text.model.d, 0.0);
    cr_expect_eq(text.model.e, 0.0);
    cr_expect_gt(text.mean_rel_error, 2 * full.mean_rel_error,
                 "method %d: text-only error %.4f, with vision %.4f", m,
                 text.mean_rel_error, full.mean_rel_error);
    free_workload(&w);
  }
}

Test(fit_ranks, is_exact_on_noise_free_timings) {
  workload_spec_t spec = ranks_spec;
  spec.noise = 0.0;
  workload_t w = make_workload(&spec, DPSHIM_FIT_RANKS);
  dpshim_fit_result_t out = fit_ok(&w.in);
  assert_model(out.model, spec.truth, 1e-6);
  cr_expect_lt(out.mean_rel_error, 1e-9);
  cr_expect_lt(out.max_rel_error, 1e-9);
  free_workload(&w);
}

/* With several ranks the softmax bias remains on exact data (see seed_spec). */
Test(fit_seed, softmax_bias_is_small_on_noise_free_timings) {
  workload_spec_t spec = seed_spec;
  spec.noise = 0.0;
  workload_t w = make_workload(&spec, DPSHIM_FIT_SEED);
  dpshim_fit_result_t out = fit_ok(&w.in);
  assert_model(out.model, spec.truth, 0.01);
  cr_expect_lt(out.mean_rel_error, 0.005);
  free_workload(&w);
}

/* One rank: softmax_max is the identity, so exact data fit exactly. */
Test(fit_seed, is_exact_on_noise_free_single_rank) {
  workload_spec_t spec = seed_spec;
  spec.noise = 0.0;
  spec.ranks = 1;
  workload_t w = make_workload(&spec, DPSHIM_FIT_SEED);
  dpshim_fit_result_t out = fit_ok(&w.in);
  assert_model(out.model, spec.truth, 1e-6);
  cr_expect_lt(out.mean_rel_error, 1e-9);
  cr_expect_lt(out.max_rel_error, 1e-9);
  free_workload(&w);
}

Test(fit_ranks, zero_intercept_hits_its_bound) {
  workload_spec_t spec = ranks_spec;
  spec.truth.c = 0.0;
  workload_t w = make_workload(&spec, DPSHIM_FIT_RANKS);
  dpshim_fit_result_t out = fit_ok(&w.in);
  dpshim_fit_point_t mean = mean_point(&w.in);
  assert_coef(out.model.a, spec.truth.a, 0.02, "a");
  assert_coef(out.model.b, spec.truth.b, 0.02, "b");
  assert_negligible(out.model.c, mean.count, mean.time, "c");
  free_workload(&w);
}

Test(fit_ranks, zero_linear_term_hits_its_bound) {
  workload_spec_t spec = ranks_spec;
  spec.truth.b = 0.0;
  workload_t w = make_workload(&spec, DPSHIM_FIT_RANKS);
  dpshim_fit_result_t out = fit_ok(&w.in);
  dpshim_fit_point_t mean = mean_point(&w.in);
  assert_coef(out.model.a, spec.truth.a, 0.02, "a");
  assert_negligible(out.model.b, mean.sum_len, mean.time, "b");
  assert_coef(out.model.c, spec.truth.c, 0.02, "c");
  free_workload(&w);
}

Test(fit_seed, zero_linear_term_hits_its_bound) {
  workload_spec_t spec = seed_spec;
  spec.truth.b = 0.0;
  workload_t w = make_workload(&spec, DPSHIM_FIT_SEED);
  dpshim_fit_result_t out = fit_ok(&w.in);
  dpshim_fit_point_t mean = mean_point(&w.in);
  assert_coef(out.model.a, spec.truth.a, 0.02, "a");
  assert_negligible(out.model.b, mean.sum_len, mean.time, "b");
  assert_coef(out.model.c, spec.truth.c, 0.02, "c");
  free_workload(&w);
}

/* The seed fit must not depend on per-rank times it does not use. */
Test(fit_seed, ignores_per_rank_times) {
  workload_t w = make_workload(&seed_spec, DPSHIM_FIT_SEED);
  dpshim_fit_result_t with_times = fit_ok(&w.in);
  for (int64_t i = 0; i < w.in.iters * w.in.ranks; i++) w.points[i].time = 0.0;
  dpshim_fit_result_t without = fit_ok(&w.in);
  cr_expect_eq(
      memcmp(&with_times.model, &without.model, sizeof without.model), 0);
  free_workload(&w);
}

static void assert_bit_identical(dpshim_fit_result_t x, dpshim_fit_result_t y) {
  cr_expect_eq(memcmp(&x.model, &y.model, sizeof x.model), 0);
  cr_expect_eq(memcmp(&x.mean_rel_error, &y.mean_rel_error, sizeof(double)), 0);
  cr_expect_eq(memcmp(&x.max_rel_error, &y.max_rel_error, sizeof(double)), 0);
}

Test(fit, is_deterministic) {
  workload_t r = make_workload(&ranks_spec, DPSHIM_FIT_RANKS);
  assert_bit_identical(fit_ok(&r.in), fit_ok(&r.in));
  workload_t s = make_workload(&seed_spec, DPSHIM_FIT_SEED);
  assert_bit_identical(fit_ok(&s.in), fit_ok(&s.in));
  free_workload(&r);
  free_workload(&s);
}

/* One point, three unknowns: any single feature explains it exactly. */
Test(fit_ranks, single_point_is_fitted_exactly) {
  dpshim_fit_point_t p = {4.0e8, 30000.0, 12.0, 0.25, 0, 0};
  dpshim_fit_input_t in = {1, 1, &p, NULL, DPSHIM_FIT_RANKS, 0};
  dpshim_fit_result_t out = fit_ok(&in);
  cr_expect_lt(out.max_rel_error, 1e-12);
}

/* A feature that is 0 everywhere cannot be fitted; it must come out 0, not
 * NaN from a singular system. */
Test(fit_ranks, all_zero_feature_gets_zero_coefficient) {
  workload_t w = make_workload(&ranks_spec, DPSHIM_FIT_RANKS);
  for (int64_t i = 0; i < w.in.iters * w.in.ranks; i++) {
    w.points[i].sum_len2 = 0.0;
    w.points[i].time = 4e-6 * w.points[i].sum_len + 1e-3 * w.points[i].count;
  }
  dpshim_fit_result_t out = fit_ok(&w.in);
  cr_expect_eq(out.model.a, 0.0);
  assert_coef(out.model.b, 4e-6, 1e-6, "b");
  assert_coef(out.model.c, 1e-3, 1e-6, "c");
  free_workload(&w);
}

/* --- Input validation --- */

static dpshim_fit_point_t valid_points[4] = {
    {1.0e8, 20000.0, 10.0, 0.1, 0, 0},
    {4.0e8, 30000.0, 5.0, 0.2, 0, 0},
    {2.0e8, 25000.0, 20.0, 0.15, 0, 0},
    {3.0e8, 28000.0, 8.0, 0.18, 0, 0},
};
static double valid_iter_time[2] = {0.2, 0.18};

static dpshim_fit_input_t valid_input(dpshim_fit_method_t method) {
  return (dpshim_fit_input_t){2, 2, valid_points, valid_iter_time, method, 0};
}

static void expect_einval(const dpshim_fit_input_t *in, const char *field,
                          const char *value) {
  dpshim_fit_result_t out;
  memset(&out, 0x5a, sizeof out);
  int rc = dpshim_fit(in, &out);
  cr_expect_eq(rc, DPSHIM_EINVAL, "rc = %d, want DPSHIM_EINVAL", rc);
  cr_expect(strstr(out.message, field) != NULL, "message '%s' lacks '%s'",
            out.message, field);
  cr_expect(strstr(out.message, value) != NULL, "message '%s' lacks '%s'",
            out.message, value);
  cr_expect(strchr(out.message, '\n') == NULL, "message is not one line");
}

Test(fit_errors, valid_input_is_accepted) {
  dpshim_fit_input_t ranks = valid_input(DPSHIM_FIT_RANKS);
  dpshim_fit_input_t seed = valid_input(DPSHIM_FIT_SEED);
  fit_ok(&ranks);
  fit_ok(&seed);
}

Test(fit_errors, zero_iters) {
  dpshim_fit_input_t in = valid_input(DPSHIM_FIT_RANKS);
  in.iters = 0;
  expect_einval(&in, "iters", "0");
}

Test(fit_errors, zero_ranks) {
  dpshim_fit_input_t in = valid_input(DPSHIM_FIT_SEED);
  in.ranks = 0;
  expect_einval(&in, "ranks", "0");
}

Test(fit_errors, null_points) {
  dpshim_fit_input_t in = valid_input(DPSHIM_FIT_RANKS);
  in.points = NULL;
  expect_einval(&in, "points", "NULL");
}

Test(fit_errors, negative_feature) {
  dpshim_fit_point_t pts[4];
  memcpy(pts, valid_points, sizeof pts);
  pts[2].sum_len = -5.0;
  dpshim_fit_input_t in = valid_input(DPSHIM_FIT_SEED);
  in.points = pts;
  expect_einval(&in, "points[2].sum_len", "-5");
}

Test(fit_errors, infinite_feature) {
  dpshim_fit_point_t pts[4];
  memcpy(pts, valid_points, sizeof pts);
  pts[1].sum_len2 = INFINITY;
  dpshim_fit_input_t in = valid_input(DPSHIM_FIT_RANKS);
  in.points = pts;
  expect_einval(&in, "points[1].sum_len2", "inf");
}

Test(fit_errors, nan_time) {
  dpshim_fit_point_t pts[4];
  memcpy(pts, valid_points, sizeof pts);
  pts[3].time = NAN;
  dpshim_fit_input_t in = valid_input(DPSHIM_FIT_RANKS);
  in.points = pts;
  expect_einval(&in, "points[3].time", "nan");
}

Test(fit_errors, infinite_time) {
  dpshim_fit_point_t pts[4];
  memcpy(pts, valid_points, sizeof pts);
  pts[0].time = INFINITY;
  dpshim_fit_input_t in = valid_input(DPSHIM_FIT_RANKS);
  in.points = pts;
  expect_einval(&in, "points[0].time", "inf");
}

Test(fit_errors, zero_time) {
  dpshim_fit_point_t pts[4];
  memcpy(pts, valid_points, sizeof pts);
  pts[1].time = 0.0;
  dpshim_fit_input_t in = valid_input(DPSHIM_FIT_RANKS);
  in.points = pts;
  expect_einval(&in, "points[1].time", "> 0");
}

Test(fit_errors, missing_iter_time_for_seed) {
  dpshim_fit_input_t in = valid_input(DPSHIM_FIT_SEED);
  in.iter_time = NULL;
  expect_einval(&in, "iter_time", "NULL");
}

Test(fit_errors, nan_iter_time_for_seed) {
  double times[2] = {0.2, NAN};
  dpshim_fit_input_t in = valid_input(DPSHIM_FIT_SEED);
  in.iter_time = times;
  expect_einval(&in, "iter_time[1]", "nan");
}

Test(fit_errors, unknown_method_value) {
  dpshim_fit_input_t in = valid_input((dpshim_fit_method_t)7);
  expect_einval(&in, "method", "7");
}

Test(fit_errors, null_arguments) {
  dpshim_fit_input_t in = valid_input(DPSHIM_FIT_RANKS);
  dpshim_fit_result_t out;
  cr_expect_eq(dpshim_fit(&in, NULL), DPSHIM_EINVAL);
  cr_expect_eq(dpshim_fit(NULL, &out), DPSHIM_EINVAL);
  cr_expect(strstr(out.message, "in") != NULL);
}

Test(fit_errors, method_names) {
  dpshim_fit_method_t m = DPSHIM_FIT_SEED;
  cr_expect_eq(dpshim_fit_method_from_name("ranks", &m), 0);
  cr_expect_eq(m, DPSHIM_FIT_RANKS);
  cr_expect_eq(dpshim_fit_method_from_name("seed", &m), 0);
  cr_expect_eq(m, DPSHIM_FIT_SEED);
  cr_expect_str_eq(dpshim_fit_method_name(DPSHIM_FIT_RANKS), "ranks");
  cr_expect_str_eq(dpshim_fit_method_name(DPSHIM_FIT_SEED), "seed");
  cr_expect_eq(dpshim_fit_method_from_name("Ranks", &m), DPSHIM_EINVAL);
  cr_expect_eq(dpshim_fit_method_from_name("", &m), DPSHIM_EINVAL);
  cr_expect_eq(dpshim_fit_method_from_name("nnls", &m), DPSHIM_EINVAL);
  cr_expect_eq(dpshim_fit_method_from_name(NULL, &m), DPSHIM_EINVAL);
  cr_expect_eq(dpshim_fit_method_from_name("seed", NULL), DPSHIM_EINVAL);
  cr_expect_eq(m, DPSHIM_FIT_SEED, "a failed lookup must not write");
}

/* ---- DPSHIM_FIT_STEPS: iteration times, by the hard max ------------------------- */

/* Steps of milliseconds (the RANKS scales: 2..40 ms a step), where the
 * seed's softmax bias (up to log(16)/20 s) swamps the signal: the hard max
 * recovers the model from the iteration times alone, the seed does not. */
Test(fit_steps, recovers_coefficients_at_millisecond_steps) {
  workload_spec_t spec = ranks_spec;
  spec.iters = 256;
  workload_t w = make_workload(&spec, DPSHIM_FIT_STEPS);
  dpshim_fit_result_t out = fit_ok(&w.in);
  /* Every rank packs the same tokens, so b * len is nearly the same on
   * every rank, as the overhead is: b is the loosest coefficient. */
  assert_coef(out.model.a, spec.truth.a, 0.03, "a");
  assert_coef(out.model.b, spec.truth.b, 0.10, "b");
  assert_coef(out.model.c, spec.truth.c, 0.03, "c");
  cr_expect_lt(out.mean_rel_error, 0.02);
  w.in.method = DPSHIM_FIT_SEED;
  dpshim_fit_result_t seed = fit_ok(&w.in);
  cr_expect_gt(fabs(seed.model.a - spec.truth.a), 0.1 * spec.truth.a,
               "the seed fit's bias is what this method avoids");
  free_workload(&w);
}

Test(fit_steps, is_exact_on_noise_free_timings) {
  workload_spec_t spec = ranks_spec;
  spec.noise = 0;
  workload_t w = make_workload(&spec, DPSHIM_FIT_STEPS);
  dpshim_fit_result_t out = fit_ok(&w.in);
  assert_model(out.model, spec.truth, 1e-6);
  free_workload(&w);
}

/* What every step pays besides its slowest rank (a sync, an optimizer) is
 * the overhead, not a per-sample or per-token cost: the balance would
 * otherwise even out sample counts. */
Test(fit_steps, separates_the_overhead_from_the_costs) {
  workload_spec_t spec = ranks_spec;
  spec.iters = 64;
  spec.noise = 0;
  workload_t w = make_workload(&spec, DPSHIM_FIT_STEPS);
  double overhead = 0.005;
  for (int64_t t = 0; t < w.in.iters; t++) w.iter_time[t] += overhead;
  dpshim_fit_result_t out = fit_ok(&w.in);
  assert_model(out.model, spec.truth, 1e-6);
  cr_expect(fabs(out.overhead - overhead) < 1e-9, "overhead %g", out.overhead);
  free_workload(&w);
}

/* Three steps cannot pin three coefficients and an overhead: the fit
 * keeps to what the steps left out confirm (two unknowns from the two
 * steps of a fold), not to an exact fit of all. */
Test(fit_steps, few_steps_fit_few_coefficients) {
  workload_spec_t spec = ranks_spec;
  spec.iters = 3;
  workload_t w = make_workload(&spec, DPSHIM_FIT_STEPS);
  dpshim_fit_result_t out = fit_ok(&w.in);
  int fitted = (out.model.a > 0) + (out.model.b > 0) + (out.model.c > 0);
  cr_expect(fitted >= 1 && fitted + (out.overhead != 0) <= 2,
            "a %g, b %g, c %g, overhead %g", out.model.a, out.model.b,
            out.model.c, out.overhead);
  free_workload(&w);
}

/* A warm-up's packs hold the same tokens on every rank, so the per-token
 * cost and an overhead explain its steps alike: the fit keeps the
 * per-token cost (a plan that moved tokens onto a rank would otherwise
 * look free) and frees no overhead the steps cannot tell apart. */
Test(fit_steps, keeps_the_per_token_cost_of_full_packs) {
  workload_spec_t spec = ranks_spec;
  spec.iters = 4;
  spec.ranks = 32;
  spec.truth.c = 0; /* which a per-sample cost would take for the tokens' */
  workload_t w = make_workload(&spec, DPSHIM_FIT_STEPS);
  dpshim_fit_result_t out = fit_ok(&w.in);
  dpshim_fit_point_t mean = mean_point(&w.in);
  double want = true_time(spec.truth, &mean), got = true_time(out.model, &mean);
  cr_expect_eq(out.overhead, 0);
  cr_expect(fabs(got - want) < 0.1 * want,
            "the mean rank costs %g s, predicted %g s (a %g, b %g, c %g): "
            "the tokens' cost went to the overhead", want, got, out.model.a,
            out.model.b, out.model.c);
  free_workload(&w);
}

Test(fit_steps, needs_iteration_times) {
  workload_t w = make_workload(&ranks_spec, DPSHIM_FIT_STEPS);
  w.in.iter_time = NULL;
  dpshim_fit_result_t out;
  cr_assert_eq(dpshim_fit(&w.in, &out), DPSHIM_EINVAL);
  cr_assert(strstr(out.message, "iter_time = NULL") &&
            strstr(out.message, "steps fit"), "%s", out.message);
  dpshim_fit_method_t m;
  cr_assert_eq(dpshim_fit_method_from_name("steps", &m), 0);
  cr_assert_eq(m, DPSHIM_FIT_STEPS);
  cr_assert_str_eq(dpshim_fit_method_name(DPSHIM_FIT_STEPS), "steps");
  free_workload(&w);
}
