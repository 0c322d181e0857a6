/* DPSHIM_FIT_STEPS: the cost model from iteration times alone.
 *
 * An iteration lasts as long as its slowest rank, plus what every iteration
 * pays alike (the gradient sync, the optimizer): the fit minimises
 *   sum_t (overhead + max_r pred_{t,r} - iter_time[t])^2,
 * every coefficient >= 0, the overhead free. It alternates between picking
 * every iteration's slowest rank under the current model and an exact NNLS
 * of the times on the picked ranks' features, both centred (which frees
 * the overhead), from several first picks; the lowest residual wins.
 *
 * A warm-up gives one time per step, often fewer than ten: not enough to
 * pin three coefficients and the overhead, and a per-sample coefficient
 * left loose makes the balancer even out sample counts instead of
 * attention. So the features fitted are chosen too, by the error on
 * iterations left out (one at a time up to FOLDS iterations, FOLDS folds
 * beyond), among the subsets the iterations can pin, and so is the
 * overhead: packs hold the same tokens on every rank, so the per-token
 * cost and the overhead are one column until plans move tokens. Given to
 * the overhead, the per-token cost is lost and the plans pile tokens on
 * the ranks the model thinks cheap (reftrain at DP 32: 27 % above the mean
 * rank, against 5 % with the per-token cost kept); given to the tokens,
 * it only keeps them even. So the overhead is fitted (free) only where the
 * iterations left out say it is apart, as the original fits none.
 *
 * Only ranks that some model could make the slowest matter: each
 * iteration keeps the ranks no other rank beats on every feature.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fit_internal.h"

enum { NFEAT = DPSHIM__NFEAT };

#define ROUNDS 16 /* alternations per start; picks settle in a few */
#define FOLDS 8   /* iterations left out one at a time up to this many */
/* A fit's mask: the features' bits, and this one where the overhead is
 * free (else 0). */
#define OVERHEAD (1u << NFEAT)
#define FEATURES (OVERHEAD - 1)

typedef struct steps_problem {
  const dpshim_fit_input_t *in;
  int32_t *front;     /* [iters * ranks] each iteration's candidate ranks */
  int32_t *nfront;    /* [iters] */
  dpshim_fit_point_t *rows; /* [iters] the picked ranks, centred */
  int32_t *pick;      /* [iters] */
  double scale[NFEAT];
} steps_problem_t;

/* ---- candidates ------------------------------------------------------------- */

/* a beats b: at least as much of every feature. */
static int dominates(const dpshim_fit_point_t *a, const dpshim_fit_point_t *b) {
  double fa[NFEAT], fb[NFEAT];
  dpshim__fit_features(a, fa);
  dpshim__fit_features(b, fb);
  for (int j = 0; j < NFEAT; j++)
    if (fa[j] < fb[j]) return 0;
  return 1;
}

/* The ranks of iteration t that no other rank dominates (of equal points,
 * the first). */
static void find_front(steps_problem_t *sp, int64_t t) {
  const dpshim_fit_point_t *row = &sp->in->points[t * sp->in->ranks];
  int32_t *front = &sp->front[t * sp->in->ranks], n = 0;
  for (int32_t r = 0; r < sp->in->ranks; r++) {
    int beaten = 0;
    for (int32_t k = 0; k < n && !beaten; k++) beaten = dominates(&row[front[k]], &row[r]);
    if (beaten) continue;
    int32_t kept = 0;
    for (int32_t k = 0; k < n; k++)
      if (!dominates(&row[r], &row[front[k]])) front[kept++] = front[k];
    front[kept++] = r;
    n = kept;
  }
  sp->nfront[t] = n;
}

/* ---- one fit ---------------------------------------------------------------- */

typedef struct fit {
  double z[NFEAT]; /* coefficients, raw units */
  double overhead;
  double residual;
} fit_t;

static double predict_max(const steps_problem_t *sp, int64_t t,
                          const double z[NFEAT], int32_t *which) {
  const dpshim_fit_point_t *row = &sp->in->points[t * sp->in->ranks];
  const int32_t *front = &sp->front[t * sp->in->ranks];
  double best = -INFINITY;
  for (int32_t k = 0; k < sp->nfront[t]; k++) {
    double f[NFEAT], v = 0;
    dpshim__fit_features(&row[front[k]], f);
    for (int j = 0; j < NFEAT; j++) v += z[j] * f[j];
    if (v > best) {
      best = v;
      if (which) *which = front[k];
    }
  }
  return best;
}

/* Repicks the slowest ranks of the iterations in use (skip: the fold left
 * out, -1 none); whether a pick changed. */
static int repick(steps_problem_t *sp, const double z[NFEAT], int skip,
                  int folds) {
  int changed = 0;
  for (int64_t t = 0; t < sp->in->iters; t++) {
    if (skip >= 0 && t % folds == skip) continue;
    int32_t r = sp->pick[t];
    predict_max(sp, t, z, &r);
    changed |= r != sp->pick[t];
    sp->pick[t] = r;
  }
  return changed;
}

/* NNLS of the times on the picked ranks' features within `mask`; with a
 * free overhead both centred, the overhead from the means. */
static void solve(steps_problem_t *sp, unsigned mask, int skip, int folds,
                  fit_t *out) {
  const dpshim_fit_input_t *in = sp->in;
  double mean_f[NFEAT] = {0}, mean_t = 0, f[NFEAT];
  int64_t n = 0;
  for (int64_t t = 0; t < in->iters; t++) {
    if (skip >= 0 && t % folds == skip) continue;
    dpshim__fit_features(&in->points[t * in->ranks + sp->pick[t]], f);
    for (int j = 0; j < NFEAT; j++) mean_f[j] += mask >> j & 1 ? f[j] : 0;
    mean_t += in->iter_time[t];
    n++;
  }
  double centre = mask & OVERHEAD ? 1.0 / (double)n : 0;
  for (int j = 0; j < NFEAT; j++) mean_f[j] *= centre;
  mean_t *= centre;
  int64_t k = 0;
  for (int64_t t = 0; t < in->iters; t++) {
    if (skip >= 0 && t % folds == skip) continue;
    dpshim__fit_features(&in->points[t * in->ranks + sp->pick[t]], f);
    for (int j = 0; j < NFEAT; j++)
      f[j] = mask >> j & 1 ? f[j] - mean_f[j] : 0;
    sp->rows[k++] = (dpshim_fit_point_t){f[0], f[1], f[2],
                                         in->iter_time[t] - mean_t, f[3], f[4]};
  }
  dpshim_cost_model_t m;
  dpshim__nnls_points(sp->rows, n, &m);
  dpshim__model_to_array(m, out->z);
  out->overhead = mean_t;
  for (int j = 0; j < NFEAT; j++) out->overhead -= out->z[j] * mean_f[j];
}

static double residual(const steps_problem_t *sp, const fit_t *fit, int skip,
                       int folds) {
  double sum = 0;
  for (int64_t t = 0; t < sp->in->iters; t++) {
    if (skip >= 0 && t % folds == skip) continue;
    double e = fit->overhead + predict_max(sp, t, fit->z, NULL) -
               sp->in->iter_time[t];
    sum += e * e;
  }
  return sum;
}

/* The best fit within `mask` on the iterations not in fold `skip`. */
static void fit_mask(steps_problem_t *sp, unsigned mask, int skip, int folds,
                     fit_t *best) {
  best->residual = INFINITY;
  /* First picks: by each feature of the mask, then by all of them. */
  for (int s = 0; s <= NFEAT; s++) {
    if (s < NFEAT && !(mask >> s & 1)) continue;
    fit_t cur = {{0}, 0, 0};
    for (int j = 0; j < NFEAT; j++)
      cur.z[j] = (s == NFEAT ? mask >> j & 1 : j == s) / sp->scale[j];
    for (int64_t t = 0; t < sp->in->iters; t++) sp->pick[t] = -1;
    for (int round = 0; round < ROUNDS && repick(sp, cur.z, skip, folds);
         round++)
      solve(sp, mask, skip, folds, &cur);
    cur.residual = residual(sp, &cur, skip, folds);
    if (cur.residual < best->residual) *best = cur;
  }
}

/* ---- which features ------------------------------------------------------------ */

/* Relative squared error on the iterations left out, fold by fold, with
 * the fit on them all into *all; infinite where that explains nothing
 * (every coefficient 0: a model that predicts the mean is no cost model). */
static double held_out_error(steps_problem_t *sp, unsigned mask, int folds,
                             fit_t *all) {
  double sum = 0, any = 0;
  fit_mask(sp, mask, -1, 1, all);
  for (int j = 0; j < NFEAT; j++) any += all->z[j];
  if (any <= 0) return INFINITY;
  for (int fold = 0; fold < folds; fold++) {
    fit_t fit;
    fit_mask(sp, mask, fold, folds, &fit);
    for (int64_t t = fold; t < sp->in->iters; t += folds) {
      double e = (fit.overhead + predict_max(sp, t, fit.z, NULL) -
                  sp->in->iter_time[t]) / sp->in->iter_time[t];
      sum += e * e;
    }
  }
  return sum;
}

static int popcount(unsigned x) {
  int n = 0;
  for (; x; x &= x - 1) n++;
  return n;
}

/* The features that vary somewhere: the others cannot be fitted. */
static unsigned present(const dpshim_fit_input_t *in) {
  unsigned mask = 0;
  for (int64_t i = 0; i < in->iters * in->ranks; i++) {
    double f[NFEAT];
    dpshim__fit_features(&in->points[i], f);
    for (int j = 0; j < NFEAT; j++) mask |= (unsigned)(f[j] > 0) << j;
  }
  return mask;
}

/* Among the subsets of the present features, with the overhead free or
 * not, that every fold's iterations pin (a coefficient each, and the
 * overhead), the one with the least held-out error; with too few
 * iterations to choose, len^2 alone where it is present. A free overhead
 * and a per-sample cost each count only where they cut the error below
 * APART of the fits without (see the top: a per-sample cost takes the
 * tokens' cost as readily). A subset without len^2 (the attention the
 * balance is for) is taken only where it errs by less than WITHOUT_LEN2 of
 * the best with it: a few steps that one cost explains by chance do not
 * decide. */
#define APART 0.8
#define NEEDS_EVIDENCE (OVERHEAD | 1u << 2) /* the overhead, the count */
#define WITHOUT_LEN2 0.5

static void choose_fit(steps_problem_t *sp, fit_t *chosen, double *held_out) {
  unsigned all = present(sp->in), len2 = all & 1u, best[2] = {0, 0};
  int64_t n = sp->in->iters;
  int folds = n < FOLDS ? (int)n : FOLDS;
  int64_t fitted = n - (n + folds - 1) / folds; /* the fewest in a fold */
  double error[2] = {INFINITY, INFINITY}, score[2] = {INFINITY, INFINITY};
  fit_t fit[2]; /* [1]: with len^2 */
  for (unsigned mask = 1; mask <= (all | OVERHEAD) && folds >= 2; mask++) {
    if ((mask & FEATURES & ~all) || !(mask & FEATURES) ||
        popcount(mask) > fitted)
      continue;
    fit_t candidate;
    double e = held_out_error(sp, mask, folds, &candidate);
    double weighed = e / pow(APART, popcount(mask & NEEDS_EVIDENCE));
    int with = (mask & len2) != 0;
    if (weighed < score[with]) {
      score[with] = weighed;
      error[with] = e;
      best[with] = mask;
      fit[with] = candidate;
    }
  }
  int with = !(best[0] && (!best[1] || score[0] < WITHOUT_LEN2 * score[1]));
  *held_out = sqrt(error[with] / (double)n);
  if (best[with]) *chosen = fit[with];
  else fit_mask(sp, len2 ? len2 : all, -1, 1, chosen);
}

/* ---- the fitter -------------------------------------------------------------------- */

static void problem_free(steps_problem_t *sp) {
  free(sp->front);
  free(sp->nfront);
  free(sp->rows);
  free(sp->pick);
}

static int problem_init(steps_problem_t *sp, const dpshim_fit_input_t *in) {
  size_t iters = (size_t)in->iters;
  sp->in = in;
  sp->front = malloc(sizeof *sp->front * iters * (size_t)in->ranks);
  sp->nfront = malloc(sizeof *sp->nfront * iters);
  sp->rows = malloc(sizeof *sp->rows * iters);
  sp->pick = malloc(sizeof *sp->pick * iters);
  if (!sp->front || !sp->nfront || !sp->rows || !sp->pick) return DPSHIM_ENOMEM;
  dpshim__feature_scales(in->points, in->iters * in->ranks, sp->scale);
  for (int64_t t = 0; t < in->iters; t++) find_front(sp, t);
  return 0;
}

int dpshim__fit_steps(const dpshim_fit_input_t *in, dpshim_cost_model_t *model,
                      dpshim_fit_result_t *out) {
  steps_problem_t sp;
  memset(&sp, 0, sizeof sp);
  int err = problem_init(&sp, in);
  if (!err) {
    fit_t fit;
    choose_fit(&sp, &fit, &out->held_out_error);
    *model = dpshim__model_of_array(fit.z);
    out->overhead = fit.overhead;
  } else {
    snprintf(out->message, sizeof out->message, "steps fit: out of memory");
  }
  problem_free(&sp);
  return err;
}
