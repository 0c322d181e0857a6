/* DPSHIM_FIT_RANKS: non-negative least squares of every rank's compute time
 * on (sum_len2, sum_len, count, sum_patches_sq, sum_patches).
 *
 * With five unknowns the NNLS optimum is found exactly by trying every
 * active set: the optimum is the unconstrained least-squares solution on its
 * own support, so the feasible subset solution with the smallest residual is
 * it. 32 tiny solves are cheaper and more predictable than an iterative
 * NNLS, and the result does not depend on iteration counts or tolerances.
 *
 * Columns are divided by their RMS and the target by its RMS first: raw
 * sum_len2 (~1e9) and count (~10) would give normal equations whose condition
 * number is dominated by units rather than by the data.
 */
#include <math.h>
#include <stdbool.h>

#include "fit_internal.h"

enum { NFEAT = DPSHIM__NFEAT };

/* A subset whose pivot falls below this fraction of its diagonal entry is
 * (numerically) collinear: 1 - R^2 of that column on the others < 1e-10. Its
 * solution would be noise, and another subset reaches the same fit. */
#define COLLINEAR_PIVOT 1e-10

/* Normal equations of the scaled problem. */
typedef struct scaled_lsq {
  double col_scale[NFEAT];
  double time_scale;
  double gram[NFEAT][NFEAT]; /* X^T X / n, X the scaled features */
  double xty[NFEAT];         /* X^T y / n, y the scaled times */
} scaled_lsq_t;

/* RMS, computed on values divided by their maximum so squares of large
 * (finite) inputs cannot overflow. 1 for an all-zero column, which then
 * simply never enters a solvable subset. */
static double rms_from(double max_abs, double sum_sq_over_max, int64_t n) {
  if (max_abs == 0.0) return 1.0;
  return max_abs * sqrt(sum_sq_over_max / (double)n);
}

void dpshim__feature_scales(const dpshim_fit_point_t *points, int64_t n,
                            double scale[NFEAT]) {
  double max_abs[NFEAT] = {0.0};
  double sum_sq[NFEAT] = {0.0};
  double f[NFEAT];
  for (int64_t i = 0; i < n; i++) {
    dpshim__fit_features(&points[i], f);
    for (int j = 0; j < NFEAT; j++) max_abs[j] = fmax(max_abs[j], fabs(f[j]));
  }
  for (int64_t i = 0; i < n; i++) {
    dpshim__fit_features(&points[i], f);
    for (int j = 0; j < NFEAT; j++) {
      if (max_abs[j] > 0.0)
        sum_sq[j] += (f[j] / max_abs[j]) * (f[j] / max_abs[j]);
    }
  }
  for (int j = 0; j < NFEAT; j++) scale[j] = rms_from(max_abs[j], sum_sq[j], n);
}

static double time_scale_of(const dpshim_fit_point_t *points, int64_t n) {
  double max_abs = 0.0, sum_sq = 0.0;
  for (int64_t i = 0; i < n; i++) max_abs = fmax(max_abs, fabs(points[i].time));
  if (max_abs == 0.0) return 1.0;
  for (int64_t i = 0; i < n; i++) {
    double t = points[i].time / max_abs;
    sum_sq += t * t;
  }
  return rms_from(max_abs, sum_sq, n);
}

static void scaled_row(const scaled_lsq_t *lsq, const dpshim_fit_point_t *p,
                       double x[NFEAT], double *y) {
  dpshim__fit_features(p, x);
  for (int j = 0; j < NFEAT; j++) x[j] /= lsq->col_scale[j];
  *y = p->time / lsq->time_scale;
}

static void build_normal_equations(const dpshim_fit_point_t *points, int64_t n,
                                   scaled_lsq_t *lsq) {
  dpshim__feature_scales(points, n, lsq->col_scale);
  lsq->time_scale = time_scale_of(points, n);
  double gram[NFEAT][NFEAT] = {{0.0}};
  double xty[NFEAT] = {0.0};
  for (int64_t i = 0; i < n; i++) {
    double x[NFEAT], y;
    scaled_row(lsq, &points[i], x, &y);
    for (int j = 0; j < NFEAT; j++) {
      xty[j] += x[j] * y;
      for (int k = 0; k < NFEAT; k++) gram[j][k] += x[j] * x[k];
    }
  }
  for (int j = 0; j < NFEAT; j++) {
    lsq->xty[j] = xty[j] / (double)n;
    for (int k = 0; k < NFEAT; k++) lsq->gram[j][k] = gram[j][k] / (double)n;
  }
}

/* Cholesky solve of the k x k system m z = rhs in place of rhs. False when
 * the system is singular or too close to it to trust. */
static bool cholesky_solve(double m[NFEAT][NFEAT], double rhs[NFEAT], int k) {
  for (int j = 0; j < k; j++) {
    double pivot = m[j][j];
    for (int p = 0; p < j; p++) pivot -= m[j][p] * m[j][p];
    if (!(pivot > COLLINEAR_PIVOT * m[j][j])) return false;
    m[j][j] = sqrt(pivot);
    for (int i = j + 1; i < k; i++) {
      double v = m[i][j];
      for (int p = 0; p < j; p++) v -= m[i][p] * m[j][p];
      m[i][j] = v / m[j][j];
    }
  }
  for (int i = 0; i < k; i++) { /* L w = rhs */
    for (int p = 0; p < i; p++) rhs[i] -= m[i][p] * rhs[p];
    rhs[i] /= m[i][i];
  }
  for (int i = k - 1; i >= 0; i--) { /* L^T z = w */
    for (int p = i + 1; p < k; p++) rhs[i] -= m[p][i] * rhs[p];
    rhs[i] /= m[i][i];
  }
  return true;
}

/* Least squares restricted to the features in `free_mask`, the others held
 * at 0. False when the subset is collinear or its solution is infeasible. */
static bool solve_subset(const scaled_lsq_t *lsq, unsigned free_mask,
                         double z[NFEAT]) {
  int idx[NFEAT], k = 0;
  for (int j = 0; j < NFEAT; j++) {
    z[j] = 0.0;
    if (free_mask & (1u << j)) idx[k++] = j;
  }
  double m[NFEAT][NFEAT], rhs[NFEAT];
  for (int r = 0; r < k; r++) {
    rhs[r] = lsq->xty[idx[r]];
    for (int c = 0; c < k; c++) m[r][c] = lsq->gram[idx[r]][idx[c]];
  }
  if (!cholesky_solve(m, rhs, k)) return false;
  for (int r = 0; r < k; r++) {
    if (!isfinite(rhs[r]) || rhs[r] < 0.0) return false;
    z[idx[r]] = rhs[r];
  }
  return true;
}

/* Summed directly over the points rather than from the normal equations,
 * whose y'y - 2z'r + z'Gz cancels catastrophically for near-exact fits and
 * could then rank the subsets wrongly. */
static double scaled_residual(const scaled_lsq_t *lsq,
                              const dpshim_fit_point_t *points, int64_t n,
                              const double z[NFEAT]) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; i++) {
    double x[NFEAT], y;
    scaled_row(lsq, &points[i], x, &y);
    double fit = 0.0;
    for (int j = 0; j < NFEAT; j++) fit += z[j] * x[j];
    double r = y - fit;
    sum += r * r;
  }
  return sum;
}

void dpshim__nnls_points(const dpshim_fit_point_t *points, int64_t n,
                         dpshim_cost_model_t *model) {
  scaled_lsq_t lsq;
  build_normal_equations(points, n, &lsq);
  double best[NFEAT] = {0.0}; /* the empty set is always feasible */
  double best_residual = scaled_residual(&lsq, points, n, best);
  for (unsigned free_mask = 1; free_mask < (1u << NFEAT); free_mask++) {
    double z[NFEAT];
    if (!solve_subset(&lsq, free_mask, z)) continue;
    double residual = scaled_residual(&lsq, points, n, z);
    if (residual < best_residual) {
      best_residual = residual;
      for (int j = 0; j < NFEAT; j++) best[j] = z[j];
    }
  }
  for (int j = 0; j < NFEAT; j++)
    best[j] = best[j] * lsq.time_scale / lsq.col_scale[j];
  *model = dpshim__model_of_array(best);
}

int dpshim__fit_ranks(const dpshim_fit_input_t *in, dpshim_cost_model_t *model,
                      char *message, size_t message_size) {
  (void)message;
  (void)message_size;
  dpshim__nnls_points(in->points, in->iters * (int64_t)in->ranks, model);
  return 0;
}
