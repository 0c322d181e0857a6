/* The warm-up fit; see warmup.h. */
#include "warmup.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"
#include "report.h"

/* With DPSHIM_FIT=auto, the step-time fit is taken over the per-rank one
 * only where its error on steps left out of it is below this share of the
 * per-rank fit's error on the step times (which that fit never saw): the
 * per-rank fit, which sees every rank, is the better model wherever it is
 * not fooled. */
#define STEPS_FIT_MARGIN 0.8
/* And only where it is fooled: where the ranks' "compute" times of a step
 * are alike (spread below FLAT_SPREAD of the slowest, on the mean), as
 * when the collective taken for the sync waits behind one the shim cannot
 * see (reftrain's loss all-reduce: 1.4-2.5 %; VLM warm-ups here 7-15 %).
 * The errors alone do not tell: the per-rank fit erred by 5-6 % on the
 * step times both when fooled and when not (a VLM at DP 32, its steps'
 * shim and sync times varying), and a step-time fit of four steps then
 * took a per-sample cost for the whole step and its plans cost up to
 * 19 %. */
#define FLAT_SPREAD 0.04
/* A fit from hand-off steps is refitted where it no longer predicts the
 * balanced steps within this (still_predicts). */
#define REFIT_ERROR 0.05
/* A model with nothing above linear in it changes no plan of packs of
 * equal tokens; where the step times it was fitted on still varied by
 * more than this (slowest against fastest step), they came from the loads
 * and more steps may show how (can_change_nothing). Hand-off steps only:
 * they refit. */
#define STUCK_SPREAD 0.04

static int steps_fit_wins(double steps_rms, double ranks_rms, double spread) {
  return steps_rms < STEPS_FIT_MARGIN * ranks_rms && spread < FLAT_SPREAD;
}

/* The mean over steps of (slowest - fastest) / slowest of the ranks'
 * measured times: ~0 where every rank waited for the slowest. */
static double time_spread(const dpshim_fit_input_t *in) {
  double sum = 0;
  for (int64_t t = 0; t < in->iters; t++) {
    double lo = INFINITY, hi = 0;
    for (int32_t r = 0; r < in->ranks; r++) {
      double v = in->points[t * in->ranks + r].time;
      lo = fmin(lo, v);
      hi = fmax(hi, v);
    }
    sum += hi > 0 ? (hi - lo) / hi : 0;
  }
  return in->iters ? sum / (double)in->iters : 0;
}

typedef struct fit_outcome {
  int64_t rc, vision, vit_rc, method; /* method: the fit taken */
  int64_t kept; /* a refit not taken: the model still predicts */
  int64_t stuck; /* the model taken can change no plan (core.h) */
  dpshim_fit_result_t fit, fit_text; /* fit_text: when vision */
  dpshim_fit_result_t vit;           /* the encoder's, when vit_rc == 0 */
  double error_mean[2], error_max[2]; /* see core.h's step_error_* */
  double error_rms[2]; /* what the choice compares: [0] the per-rank
                        * fit's on the step times, [1] the step-time fit's
                        * on steps left out of it */
} fit_outcome_t;

/* The fit, and when the points have images the text-only fit of the same
 * points beside it: what the vision terms gain. */
static int fit_both(dpshim_fit_input_t in, dpshim_fit_result_t *fit,
                    dpshim_fit_result_t *text, int64_t *vision) {
  int64_t n = in.iters * (int64_t)in.ranks;
  *vision = 0;
  for (int64_t i = 0; i < n && !in.text_only; i++)
    *vision |= in.points[i].sum_patches_sq > 0 || in.points[i].sum_patches > 0;
  int rc = dpshim_fit(&in, fit);
  if (rc == 0 && *vision) {
    in.text_only = 1;
    if (dpshim_fit(&in, text) < 0) *vision = 0;
  }
  return rc;
}

/* How well `m` (seconds per feature) predicts the step times: each step's
 * predicted slowest rank against its measured time, after the mean
 * difference (the sync, the optimizer and whatever else the model leaves
 * out cost about the same every step, and the per-rank fit leaves them
 * out by design). Relative to each step's time, into slot k. */
static void step_error(const dpshim_fit_input_t *in, dpshim_cost_model_t m,
                       int k, fit_outcome_t *out) {
  double offset = 0, *gap = calloc((size_t)in->iters + 1, sizeof *gap);
  out->error_mean[k] = out->error_max[k] = out->error_rms[k] = INFINITY;
  if (!gap) return;
  for (int64_t t = 0; t < in->iters; t++) {
    double slowest = 0;
    for (int32_t r = 0; r < in->ranks; r++) {
      const dpshim_fit_point_t *p = &in->points[t * in->ranks + r];
      slowest = fmax(slowest, dpshim__policy_predict(m, p));
    }
    gap[t] = in->iter_time[t] - slowest;
    offset += gap[t] / (double)in->iters;
  }
  out->error_mean[k] = out->error_max[k] = out->error_rms[k] = 0;
  for (int64_t t = 0; t < in->iters; t++) {
    gap[t] = fabs(gap[t] - offset) / in->iter_time[t];
    out->error_mean[k] += gap[t] / (double)in->iters;
    out->error_max[k] = fmax(out->error_max[k], gap[t]);
    out->error_rms[k] += gap[t] * gap[t] / (double)in->iters;
  }
  out->error_rms[k] = k ? out->fit.held_out_error : sqrt(out->error_rms[k]);
  free(gap);
}

/* One method's fit into out, with its step-time error in slot k. */
static int fit_method(dpshim_fit_input_t in, dpshim_fit_method_t method,
                      int k, fit_outcome_t *out) {
  in.method = method;
  int rc = fit_both(in, &out->fit, &out->fit_text, &out->vision);
  dpshim_cost_model_t m = out->fit.model;
  if (rc == 0 && m.a + m.b + m.c + m.d + m.e <= 0) { /* explains nothing */
    snprintf(out->fit.message, sizeof out->fit.message, "the %s times do "
             "not grow with any feature", k ? "step" : "per-rank");
    rc = DPSHIM_ENOCONV;
  }
  if (rc == 0) step_error(&in, out->fit.model, k, out);
  return rc;
}

/* Hand-off steps: from step times. Sync steps: as set, or with auto both,
 * the better predictor of the step times taken. */
static int fit_chosen(const dpshim__core_t *c, dpshim_fit_input_t in,
                      fit_outcome_t *out) {
  const dpshim__config_t *cfg = &c->cfg;
  dpshim_fit_method_t by_steps = !cfg->fit_auto && cfg->fit == DPSHIM_FIT_SEED
                                     ? DPSHIM_FIT_SEED : DPSHIM_FIT_STEPS;
  out->error_mean[0] = out->error_mean[1] = -1;
  if (c->mode == DPSHIM__STEP_HANDOFF ||
      (!cfg->fit_auto && cfg->fit != DPSHIM_FIT_RANKS)) {
    out->method = by_steps;
    return fit_method(in, by_steps, 1, out);
  }
  out->method = DPSHIM_FIT_RANKS;
  if (!cfg->fit_auto) return fit_method(in, DPSHIM_FIT_RANKS, 0, out);
  fit_outcome_t ranks = *out;
  int rc_ranks = fit_method(in, DPSHIM_FIT_RANKS, 0, &ranks);
  int rc = fit_method(in, by_steps, 1, out);
  out->error_mean[0] = ranks.error_mean[0];
  out->error_max[0] = ranks.error_max[0];
  out->error_rms[0] = ranks.error_rms[0];
  out->method = by_steps;
  if (rc_ranks == 0 &&
      (rc < 0 ||
       !steps_fit_wins(out->error_rms[1], ranks.error_rms[0],
                       time_spread(&in)))) {
    ranks.error_mean[1] = out->error_mean[1];
    ranks.error_max[1] = out->error_max[1];
    *out = ranks;
    return 0;
  }
  return rc;
}

/* A refit replaces the model only where the model no longer predicts the
 * balanced steps (within REFIT_ERROR): their ranks are predicted alike,
 * so a refit on a few of them swings between feature sets (reftrain at
 * DP 32: plans 5-10 % above the mean rank without refits, 4-33 % with
 * one after every step). The balanced steps are iterations `from` on. */
static int still_predicts(const dpshim_fit_input_t *in, int64_t from,
                          dpshim_cost_model_t current) {
  if (from >= in->iters) return 1;
  dpshim_fit_input_t later = *in;
  later.iters -= from;
  later.points += from * in->ranks;
  later.iter_time += from;
  fit_outcome_t e;
  step_error(&later, current, 0, &e);
  return e.error_rms[0] < REFIT_ERROR;
}

/* Whether `m`, fitted on these steps, can change no plan while the steps'
 * times varied: no term above linear, the slowest step STUCK_SPREAD above
 * the fastest. */
static int can_change_nothing(const dpshim_fit_input_t *in,
                              dpshim_cost_model_t m) {
  if (m.a > 0 || m.d > 0 || in->iters < 2) return 0;
  double lo = INFINITY, hi = 0;
  for (int64_t t = 0; t < in->iters; t++) {
    lo = fmin(lo, in->iter_time[t]);
    hi = fmax(hi, in->iter_time[t]);
  }
  return hi > 0 && (hi - lo) / hi > STUCK_SPREAD;
}

/* Rank 0: every rank's points -> one fit over the steps every rank
 * measured. */
static int fit_points(const dpshim__core_t *c, const dpshim__point_t *all,
                      fit_outcome_t *out) {
  int32_t ranks = c->world->size, slots = dpshim__core_slots(c), iters = 0;
  dpshim_fit_point_t *pts = calloc((size_t)ranks * (size_t)slots + 1,
                                   sizeof *pts);
  double *iter_time = calloc((size_t)slots + 1, sizeof *iter_time);
  int rc = DPSHIM_ENOMEM;
  snprintf(out->fit.message, sizeof out->fit.message,
           "out of memory for the fit");
  int64_t warm = 0; /* iterations from the warm-up, which come first */
  if (pts && iter_time) {
    for (int32_t it = 0; it < slots; it++) {
      int all_valid = 1;
      double index = all[it].index;
      for (int32_t r = 0; r < ranks; r++) {
        const dpshim__point_t *p = &all[(size_t)r * (size_t)slots + it];
        all_valid &= p->valid == 1 && p->index == index;
      }
      if (!all_valid) continue; /* a rank missed this step, or is behind */
      warm += it < c->cfg.nwarmup;
      for (int32_t r = 0; r < ranks; r++) {
        const dpshim__point_t *p = &all[(size_t)r * (size_t)slots + (size_t)it];
        pts[(size_t)iters * (size_t)ranks + (size_t)r] =
            (dpshim_fit_point_t){p->sum_len2,       p->sum_len,
                                 p->count,          p->compute,
                                 p->sum_patches_sq, p->sum_patches};
        if (p->step > iter_time[iters]) iter_time[iters] = p->step;
      }
      iters++;
    }
    /* With the ViT balance and no gate the images are encoded apart from
     * their samples: the LLM's cost leaves them out. Under the gate they
     * are encoded where their samples go, as without the ViT balance. */
    dpshim_fit_input_t in = {iters, ranks, pts, iter_time, DPSHIM_FIT_RANKS,
                             c->cfg.vit && !dpshim__core_vit_gate(c)};
    rc = fit_chosen(c, in, out);
    /* Hand-off steps refit (core.c); sync steps keep their fit. */
    out->stuck = rc == 0 && c->mode == DPSHIM__STEP_HANDOFF &&
                 can_change_nothing(&in, out->fit.model);
    out->kept = rc == 0 && c->settled && c->fitted && !c->stuck &&
                still_predicts(&in, warm, c->fit.model);
  }
  free(pts);
  free(iter_time);
  return rc;
}

/* The encoder's cost per image: NNLS over every (rank, warm-up step) that
 * encoded images, apart from the steps' structure (a step without images
 * on some rank still teaches the others'). */
static int fit_vit(const dpshim__core_t *c, const dpshim__point_t *all,
                   dpshim_fit_result_t *out) {
  size_t n = (size_t)c->world->size * (size_t)dpshim__core_slots(c), k = 0;
  dpshim_fit_point_t *pts = calloc(n + 1, sizeof *pts);
  if (!pts) {
    snprintf(out->message, sizeof out->message, "out of memory for the fit");
    return DPSHIM_ENOMEM;
  }
  for (size_t i = 0; i < n; i++)
    if (all[i].valid == 1 && all[i].vit_count > 0 && all[i].vit_time > 0)
      pts[k++] = (dpshim_fit_point_t){all[i].vit_len2, all[i].vit_len,
                                      all[i].vit_count, all[i].vit_time, 0, 0};
  dpshim_fit_input_t in = {(int64_t)k, 1, pts, NULL, DPSHIM_FIT_RANKS, 1};
  int rc = k ? dpshim_fit(&in, out) : DPSHIM_EINVAL;
  if (!k)
    snprintf(out->message, sizeof out->message,
             "no warm-up step encoded images");
  free(pts);
  return rc;
}

/* The outcome into the core, the same on every rank. */
static void take(dpshim__core_t *c, const fit_outcome_t *out) {
  pthread_mutex_lock(&c->lock);
  c->refits += c->settled;
  if (!c->cfg.have_coefs) {
    c->fit = out->fit;
    c->fit_text = out->fit_text;
    c->fit_vision = (int)out->vision;
    c->fit_method = (dpshim_fit_method_t)out->method;
    memcpy(c->step_error_mean, out->error_mean, sizeof out->error_mean);
    memcpy(c->step_error_max, out->error_max, sizeof out->error_max);
    c->fitted = out->rc == 0;
    c->stuck = c->fitted && out->stuck;
    if (c->fitted) c->model = dpshim__policy_model_from_fit(out->fit.model);
  }
  if (c->cfg.vit && !c->cfg.have_vit_coefs && out->vit_rc >= 0) {
    c->vit_fit = out->vit;
    c->vit_fitted = out->vit_rc == 0;
    if (c->vit_fitted)
      c->vit_model = dpshim__policy_model_from_fit(out->vit.model);
  }
  pthread_mutex_unlock(&c->lock);
}

int dpshim__warmup_fit(dpshim__core_t *c) {
  size_t bytes = (size_t)dpshim__core_slots(c) * sizeof(dpshim__point_t);
  int root = c->world->rank == 0;
  dpshim__point_t *all = root ? calloc((size_t)c->world->size, bytes + 1)
                              : NULL;
  int64_t failed = root && !all;
  int rc = c->world->ops->max(c->world, &failed, 1);
  if (rc < 0) return rc;
  fit_outcome_t out;
  memset(&out, 0, sizeof out);
  out.rc = DPSHIM_ENOMEM;
  snprintf(out.fit.message, sizeof out.fit.message, "out of memory");
  if (!failed) {
    rc = c->world->ops->gather(c->world, c->points, bytes, all);
    if (rc < 0) {
      free(all);
      return rc;
    }
    if (root && !c->cfg.have_coefs) out.rc = fit_points(c, all, &out);
    if (root && c->cfg.vit && !c->cfg.have_vit_coefs)
      out.vit_rc = fit_vit(c, all, &out.vit);
  }
  free(all);
  rc = c->world->ops->bcast(c->world, &out, sizeof out);
  if (rc < 0) return rc;
  if (c->settled) { /* a refit: kept only where it is one */
    if (out.rc < 0 || out.kept) return 0;
    out.vit_rc = -1;
  }
  take(c, &out);
  if (!c->cfg.have_coefs) dpshim__report_fit(c, (int)out.rc);
  if (c->cfg.vit && !c->cfg.have_vit_coefs && out.vit_rc >= 0)
    dpshim__report_vit_fit(c, (int)out.vit_rc);
  return 0;
}
