/* dpshim_fit(): validates the warm-up measurements, runs the chosen fitter
 * and reports how well the model explains what was fitted. */
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fit_internal.h"

static int reject(dpshim_fit_result_t *out, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static int reject(dpshim_fit_result_t *out, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(out->message, sizeof out->message, fmt, ap);
  va_end(ap);
  return DPSHIM_EINVAL;
}

static bool finite_nonnegative(double x) { return isfinite(x) && x >= 0.0; }
static bool finite_positive(double x) { return isfinite(x) && x > 0.0; }

static int check_shape(const dpshim_fit_input_t *in, dpshim_fit_result_t *out) {
  if (in->method != DPSHIM_FIT_RANKS && in->method != DPSHIM_FIT_SEED &&
      in->method != DPSHIM_FIT_STEPS)
    return reject(out,
                  "method = %d: expected DPSHIM_FIT_RANKS, DPSHIM_FIT_SEED or "
                  "DPSHIM_FIT_STEPS", (int)in->method);
  if (in->iters < 1)
    return reject(out, "iters = %lld: expected >= 1", (long long)in->iters);
  if (in->ranks < 1)
    return reject(out, "ranks = %d: expected >= 1", (int)in->ranks);
  /* The fitters allocate per point and per feature in size_t. */
  uint64_t max_points = SIZE_MAX / (4 * sizeof(double));
  if ((uint64_t)in->iters > max_points / (uint64_t)in->ranks)
    return reject(out, "iters * ranks = %lld * %d: too many points",
                  (long long)in->iters, (int)in->ranks);
  if (!in->points)
    return reject(out, "points = NULL: expected iters * ranks = %lld points",
                  (long long)(in->iters * in->ranks));
  if (in->method != DPSHIM_FIT_RANKS && !in->iter_time)
    return reject(out,
                  "iter_time = NULL: expected %lld iteration times for "
                  "the %s fit",
                  (long long)in->iters, dpshim_fit_method_name(in->method));
  return 0;
}

static int check_point(const dpshim_fit_point_t *p, int64_t i, bool need_time,
                       dpshim_fit_result_t *out) {
  const char *const names[DPSHIM__NFEAT] = {"sum_len2", "sum_len", "count",
                                            "sum_patches_sq", "sum_patches"};
  double values[DPSHIM__NFEAT];
  dpshim__fit_features(p, values);
  for (int j = 0; j < DPSHIM__NFEAT; j++) {
    if (!finite_nonnegative(values[j]))
      return reject(out, "points[%lld].%s = %g: expected a finite number >= 0",
                    (long long)i, names[j], values[j]);
  }
  if (need_time && !finite_positive(p->time))
    return reject(out, "points[%lld].time = %g: expected a finite number > 0",
                  (long long)i, p->time);
  return 0;
}

static int check_values(const dpshim_fit_input_t *in,
                        dpshim_fit_result_t *out) {
  int64_t npoints = in->iters * (int64_t)in->ranks;
  bool need_time = in->method == DPSHIM_FIT_RANKS;
  for (int64_t i = 0; i < npoints; i++) {
    int err = check_point(&in->points[i], i, need_time, out);
    if (err) return err;
  }
  if (in->method == DPSHIM_FIT_RANKS) return 0;
  for (int64_t t = 0; t < in->iters; t++) {
    if (!finite_positive(in->iter_time[t]))
      return reject(out, "iter_time[%lld] = %g: expected a finite number > 0",
                    (long long)t, in->iter_time[t]);
  }
  return 0;
}

static void accumulate_rel_error(double pred, double measured, double *sum,
                                 double *max) {
  double rel = fabs(pred - measured) / measured;
  *sum += rel;
  *max = fmax(*max, rel);
}

static void ranks_errors(const dpshim_fit_input_t *in,
                         dpshim_fit_result_t *out) {
  int64_t npoints = in->iters * (int64_t)in->ranks;
  double sum = 0.0, max = 0.0;
  for (int64_t i = 0; i < npoints; i++) {
    const dpshim_fit_point_t *p = &in->points[i];
    accumulate_rel_error(dpshim__fit_predict(out->model, p), p->time, &sum,
                         &max);
  }
  out->mean_rel_error = sum / (double)npoints;
  out->max_rel_error = max;
}

/* Against the hard max: the iteration's measured time is its slowest rank's,
 * whatever smoothing the fit itself used. */
static void seed_errors(const dpshim_fit_input_t *in,
                        dpshim_fit_result_t *out) {
  double sum = 0.0, max = 0.0;
  for (int64_t t = 0; t < in->iters; t++) {
    const dpshim_fit_point_t *row = &in->points[t * in->ranks];
    double slowest = 0.0;
    for (int32_t r = 0; r < in->ranks; r++)
      slowest = fmax(slowest, dpshim__fit_predict(out->model, &row[r]));
    accumulate_rel_error(slowest + out->overhead, in->iter_time[t], &sum,
                         &max);
  }
  out->mean_rel_error = sum / (double)in->iters;
  out->max_rel_error = max;
}

static bool model_valid(dpshim_cost_model_t m) {
  double z[DPSHIM__NFEAT];
  dpshim__model_to_array(m, z);
  for (int j = 0; j < DPSHIM__NFEAT; j++)
    if (!finite_nonnegative(z[j])) return false;
  return true;
}

/* The points without their vision sums, for a text-only fit; NULL when
 * they have none (use them as they are) or on ENOMEM (*err). */
static dpshim_fit_point_t *text_points(const dpshim_fit_input_t *in,
                                       int *err) {
  int64_t n = in->iters * (int64_t)in->ranks;
  bool images = false;
  for (int64_t i = 0; i < n; i++)
    images |= in->points[i].sum_patches_sq != 0 || in->points[i].sum_patches != 0;
  if (!images) return NULL;
  dpshim_fit_point_t *copy = malloc(sizeof *copy * (size_t)n);
  if (!copy) {
    *err = DPSHIM_ENOMEM;
    return NULL;
  }
  for (int64_t i = 0; i < n; i++) {
    copy[i] = in->points[i];
    copy[i].sum_patches_sq = copy[i].sum_patches = 0;
  }
  return copy;
}

static int run_fitter(const dpshim_fit_input_t *in, dpshim_fit_result_t *out) {
  dpshim_cost_model_t model = {0};
  char *msg = out->message;
  size_t len = sizeof out->message;
  int err = in->method == DPSHIM_FIT_RANKS  ? dpshim__fit_ranks(in, &model, msg, len)
            : in->method == DPSHIM_FIT_SEED ? dpshim__fit_seed(in, &model, msg, len)
            : dpshim__fit_steps(in, &model, out);
  if (err) return err;
  if (!model_valid(model)) {
    snprintf(out->message, sizeof out->message,
             "%s fit: coefficients a = %g, b = %g, c = %g, d = %g, e = %g are "
             "not finite and >= 0", dpshim_fit_method_name(in->method),
             model.a, model.b, model.c, model.d, model.e);
    return DPSHIM_ENOCONV;
  }
  out->model = model;
  if (in->method == DPSHIM_FIT_RANKS)
    ranks_errors(in, out);
  else
    seed_errors(in, out);
  return 0;
}

int dpshim_fit(const dpshim_fit_input_t *in, dpshim_fit_result_t *out) {
  if (!out) return DPSHIM_EINVAL;
  memset(out, 0, sizeof *out);
  if (!in) return reject(out, "in = NULL: expected a fit input");
  int err = check_shape(in, out);
  if (!err) err = check_values(in, out);
  if (err) return err;
  if (!in->text_only) return run_fitter(in, out);
  dpshim_fit_point_t *text = text_points(in, &err);
  if (err) {
    snprintf(out->message, sizeof out->message, "out of memory for the fit");
    return err;
  }
  dpshim_fit_input_t text_in = *in;
  if (text) text_in.points = text;
  err = run_fitter(&text_in, out);
  free(text);
  return err;
}

int dpshim_fit_method_from_name(const char *name, dpshim_fit_method_t *method) {
  if (!name || !method) return DPSHIM_EINVAL;
  if (strcmp(name, "ranks") == 0)
    *method = DPSHIM_FIT_RANKS;
  else if (strcmp(name, "seed") == 0)
    *method = DPSHIM_FIT_SEED;
  else if (strcmp(name, "steps") == 0)
    *method = DPSHIM_FIT_STEPS;
  else
    return DPSHIM_EINVAL;
  return 0;
}

const char *dpshim_fit_method_name(dpshim_fit_method_t method) {
  switch (method) {
  case DPSHIM_FIT_RANKS: return "ranks";
  case DPSHIM_FIT_SEED: return "seed";
  case DPSHIM_FIT_STEPS: return "steps";
  default: return "unknown";
  }
}
