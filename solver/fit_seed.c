/* DPSHIM_FIT_SEED: the original LoongForge fit.
 *
 * Only iteration times are used: an iteration lasts as long as its slowest
 * rank, so the fit minimises
 *   sum_t (softmax_max_r(pred_{t,r}) - iter_time[t])^2,
 *   softmax_max(v) = max(v) + log(sum_r exp(alpha (v_r - max v))) / alpha,
 * with alpha = 20 on predicted times in seconds, as the original does (the
 * smooth max makes the objective differentiable; its bias is at most
 * log(ranks) / alpha seconds, so it matters when times are small).
 *
 * The unknowns are the coefficients scaled by feature RMS / time RMS, so the
 * five are of order 1 for L-BFGS.
 *
 * The objective is not convex: a model that misjudges which rank is slowest
 * can be a local minimum (seen with a = 0 when long samples were rare). So
 * L-BFGS runs from several starts and the lowest objective wins. Each start
 * solves the hard-max version of the problem by alternating "pick every
 * iteration's slowest rank under the current model" with an exact NNLS of
 * iter_time on the picked ranks' features, first picking by one of: tokens,
 * sum of squared lengths, sample count, all features equally weighted, and
 * (when the points have images) the images' patches.
 * No per-rank times are used: this method does not require them.
 */
#include <math.h>
#include <nlopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fit_internal.h"

enum { NFEAT = DPSHIM__NFEAT };

#define SOFTMAX_ALPHA 20.0
/* Alternations per start; the slowest-rank picks settle in a few. */
#define START_ROUNDS 16
/* L-BFGS stops on either tolerance; the evaluation cap only guards against
 * a pathological input (a normal fit takes well under a hundred). */
#define LBFGS_XTOL_REL 1e-10
#define LBFGS_FTOL_REL 1e-14
#define LBFGS_MAXEVAL 2000

/* First slowest-rank rules of the starts, as scaled coefficients. */
static const double start_rules[][NFEAT] = {
    {0.0, 1.0, 0.0, 0.0, 0.0}, /* tokens */
    {1.0, 0.0, 0.0, 0.0, 0.0}, /* sum of squared lengths */
    {0.0, 0.0, 1.0, 0.0, 0.0}, /* samples */
    {1.0, 1.0, 1.0, 1.0, 1.0}, /* all, each at its RMS */
    {0.0, 0.0, 0.0, 1.0, 1.0}, /* images: only when there are some */
};
enum { NSTARTS = sizeof start_rules / sizeof start_rules[0] };
enum { IMAGE_START = NSTARTS - 1 };

typedef struct seed_problem {
  const dpshim_fit_input_t *in;
  double *features; /* [iters * ranks * NFEAT], divided by col_scale */
  double col_scale[NFEAT];
  double time_scale;
  double *weight;             /* [ranks] softmax weights, scratch */
  int32_t *pick;              /* [iters] slowest rank, scratch */
  dpshim_fit_point_t *picked; /* [iters] its features and iter_time */
  int images;                 /* some point has a vision feature */
} seed_problem_t;

static double rms_of(const double *x, int64_t n) {
  double max_abs = 0.0, sum_sq = 0.0;
  for (int64_t i = 0; i < n; i++) max_abs = fmax(max_abs, fabs(x[i]));
  if (max_abs == 0.0) return 1.0;
  for (int64_t i = 0; i < n; i++) sum_sq += (x[i] / max_abs) * (x[i] / max_abs);
  return max_abs * sqrt(sum_sq / (double)n);
}

static int seed_problem_init(seed_problem_t *sp, const dpshim_fit_input_t *in) {
  int64_t npoints = in->iters * (int64_t)in->ranks;
  sp->in = in;
  sp->features = malloc(sizeof(double) * NFEAT * (size_t)npoints);
  sp->weight = malloc(sizeof(double) * (size_t)in->ranks);
  sp->pick = malloc(sizeof(int32_t) * (size_t)in->iters);
  sp->picked = malloc(sizeof(dpshim_fit_point_t) * (size_t)in->iters);
  if (!sp->features || !sp->weight || !sp->pick || !sp->picked)
    return DPSHIM_ENOMEM;
  dpshim__feature_scales(in->points, npoints, sp->col_scale);
  sp->time_scale = rms_of(in->iter_time, in->iters);
  for (int64_t i = 0; i < npoints; i++) {
    double *g = &sp->features[NFEAT * i];
    dpshim__fit_features(&in->points[i], g);
    for (int j = 0; j < NFEAT; j++) g[j] /= sp->col_scale[j];
    sp->images |= g[3] != 0.0 || g[4] != 0.0;
  }
  return 0;
}

static void seed_problem_free(seed_problem_t *sp) {
  free(sp->features);
  free(sp->weight);
  free(sp->pick);
  free(sp->picked);
}

static void model_to_scaled(const seed_problem_t *sp, dpshim_cost_model_t m,
                            double z[NFEAT]) {
  dpshim__model_to_array(m, z);
  for (int j = 0; j < NFEAT; j++)
    z[j] = z[j] * sp->col_scale[j] / sp->time_scale;
}

static dpshim_cost_model_t scaled_to_model(const seed_problem_t *sp,
                                           const double z[NFEAT]) {
  double m[NFEAT];
  for (int j = 0; j < NFEAT; j++)
    m[j] = z[j] * sp->time_scale / sp->col_scale[j];
  return dpshim__model_of_array(m);
}

/* Slowest rank of iteration t under the model; ties go to the lowest rank. */
static int32_t slowest_rank(const dpshim_fit_input_t *in, int64_t t,
                            dpshim_cost_model_t model) {
  const dpshim_fit_point_t *row = &in->points[t * in->ranks];
  int32_t best = 0;
  double best_pred = dpshim__fit_predict(model, &row[0]);
  for (int32_t r = 1; r < in->ranks; r++) {
    double pred = dpshim__fit_predict(model, &row[r]);
    if (pred > best_pred) {
      best = r;
      best_pred = pred;
    }
  }
  return best;
}

/* Re-picks every iteration's slowest rank into sp->picked (its features,
 * with time = iter_time). Returns whether any pick changed. */
static int repick_slowest(seed_problem_t *sp, dpshim_cost_model_t model) {
  const dpshim_fit_input_t *in = sp->in;
  int changed = 0;
  for (int64_t t = 0; t < in->iters; t++) {
    int32_t r = slowest_rank(in, t, model);
    changed |= r != sp->pick[t];
    sp->pick[t] = r;
    sp->picked[t] = in->points[t * in->ranks + r];
    sp->picked[t].time = in->iter_time[t];
  }
  return changed;
}

/* The hard-max fit reached from the first slowest-rank rule `rule`. */
static void hard_max_start(seed_problem_t *sp, const double rule[NFEAT],
                           double z[NFEAT]) {
  for (int64_t t = 0; t < sp->in->iters; t++) sp->pick[t] = -1;
  dpshim_cost_model_t model = scaled_to_model(sp, rule);
  for (int round = 0; round < START_ROUNDS; round++) {
    if (!repick_slowest(sp, model)) break;
    dpshim__nnls_points(sp->picked, sp->in->iters, &model);
  }
  model_to_scaled(sp, model, z);
}

/* Iteration t's squared error; adds its gradient to grad when non-NULL. */
static double iteration_term(seed_problem_t *sp, int64_t t,
                             const double z[NFEAT], double *grad) {
  int32_t ranks = sp->in->ranks;
  const double *g = &sp->features[NFEAT * t * ranks];
  double vmax = -INFINITY;
  for (int32_t r = 0; r < ranks; r++) {
    const double *gr = &g[NFEAT * r];
    double dot = 0.0;
    for (int j = 0; j < NFEAT; j++) dot += z[j] * gr[j];
    double v = sp->time_scale * dot;
    sp->weight[r] = v;
    vmax = fmax(vmax, v);
  }
  double sum = 0.0;
  for (int32_t r = 0; r < ranks; r++) {
    sp->weight[r] = exp(SOFTMAX_ALPHA * (sp->weight[r] - vmax));
    sum += sp->weight[r];
  }
  double smax = vmax + log(sum) / SOFTMAX_ALPHA;
  double err = (smax - sp->in->iter_time[t]) / sp->time_scale;
  if (grad) {
    /* d smax / d v_r is the softmax weight; d v_r / d z_j = ts * g_rj, and
     * the ts cancels against the 1/ts in err. */
    for (int32_t r = 0; r < ranks; r++) {
      double w = sp->weight[r] / sum;
      for (int j = 0; j < NFEAT; j++) grad[j] += err * w * g[NFEAT * r + j];
    }
  }
  return err * err;
}

/* Mean squared error relative to the time RMS, so its scale is independent
 * of units and the relative tolerances mean the same on every input. */
static double seed_objective(unsigned n, const double *z, double *grad,
                             void *data) {
  seed_problem_t *sp = data;
  (void)n;
  if (grad) memset(grad, 0, sizeof(double) * NFEAT);
  double sum = 0.0;
  for (int64_t t = 0; t < sp->in->iters; t++)
    sum += iteration_term(sp, t, z, grad);
  double inv_iters = 1.0 / (double)sp->in->iters;
  if (grad) {
    for (int j = 0; j < NFEAT; j++) grad[j] *= 2.0 * inv_iters;
  }
  return sum * inv_iters;
}

/* ROUNDOFF_LIMITED is what L-BFGS reports when it reaches the optimum of a
 * well-scaled problem before the relative tolerances trigger; NLopt still
 * returns the best point seen. Everything else negative, and running out of
 * evaluations, means the fit did not converge. */
static int lbfgs_converged(nlopt_result res, double minf) {
  if (!isfinite(minf)) return 0;
  return res == NLOPT_ROUNDOFF_LIMITED ||
         (res > 0 && res != NLOPT_MAXEVAL_REACHED);
}

/* Minimises from z into z and *minf. Returns 0, DPSHIM_ENOMEM or
 * DPSHIM_ENOCONV (with the reason in message). */
static int run_lbfgs(seed_problem_t *sp, double z[NFEAT], double *minf,
                     char *message, size_t message_size) {
  nlopt_opt opt = nlopt_create(NLOPT_LD_LBFGS, NFEAT);
  if (!opt) return DPSHIM_ENOMEM;
  nlopt_result res = nlopt_set_lower_bounds1(opt, 0.0);
  if (res > 0) res = nlopt_set_min_objective(opt, seed_objective, sp);
  if (res > 0) res = nlopt_set_xtol_rel(opt, LBFGS_XTOL_REL);
  if (res > 0) res = nlopt_set_ftol_rel(opt, LBFGS_FTOL_REL);
  if (res > 0) res = nlopt_set_maxeval(opt, LBFGS_MAXEVAL);
  *minf = INFINITY;
  if (res > 0) res = nlopt_optimize(opt, z, minf);
  nlopt_destroy(opt);
  if (res == NLOPT_OUT_OF_MEMORY) return DPSHIM_ENOMEM;
  if (lbfgs_converged(res, *minf)) return 0;
  snprintf(message, message_size,
           "seed fit: NLopt L-BFGS stopped with %s (%d), objective %g",
           nlopt_result_to_string(res), (int)res, *minf);
  return DPSHIM_ENOCONV;
}

/* The lowest objective over all starts; ENOCONV only if none converged. */
static int multi_start_fit(seed_problem_t *sp, double best[NFEAT],
                           char *message, size_t message_size) {
  double best_f = INFINITY;
  int err = DPSHIM_ENOCONV;
  for (int s = 0; s < NSTARTS; s++) {
    if (s == IMAGE_START && !sp->images) continue;
    double z[NFEAT], f;
    hard_max_start(sp, start_rules[s], z);
    int rc = run_lbfgs(sp, z, &f, message, message_size);
    if (rc == DPSHIM_ENOMEM) return rc;
    if (rc == 0 && f < best_f) {
      best_f = f;
      memcpy(best, z, sizeof(double) * NFEAT);
      err = 0;
    }
  }
  if (!err) message[0] = '\0'; /* a start that failed is not the outcome */
  return err;
}

int dpshim__fit_seed(const dpshim_fit_input_t *in, dpshim_cost_model_t *model,
                     char *message, size_t message_size) {
  seed_problem_t sp;
  memset(&sp, 0, sizeof sp);
  double z[NFEAT] = {0.0};
  int err = seed_problem_init(&sp, in);
  if (!err) err = multi_start_fit(&sp, z, message, message_size);
  if (!err) *model = scaled_to_model(&sp, z);
  if (err == DPSHIM_ENOMEM)
    snprintf(message, message_size, "seed fit: out of memory");
  seed_problem_free(&sp);
  return err;
}

