/* Fit internals shared by fit.c and the two fitters. Not installed. */
#ifndef DPSHIM_SOLVER_FIT_INTERNAL_H
#define DPSHIM_SOLVER_FIT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "dpshim/fit.h"

/* The features a point gives, in the order of the model's coefficients:
 * sum_len2 (a), sum_len (b), count (c), sum_patches_sq (d), sum_patches (e).
 * A feature that is 0 on every point gets a coefficient of 0. */
enum { DPSHIM__NFEAT = 5 };

static inline void dpshim__fit_features(const dpshim_fit_point_t *p,
                                        double f[DPSHIM__NFEAT]) {
  f[0] = p->sum_len2;
  f[1] = p->sum_len;
  f[2] = p->count;
  f[3] = p->sum_patches_sq;
  f[4] = p->sum_patches;
}

static inline void dpshim__model_to_array(dpshim_cost_model_t m,
                                          double z[DPSHIM__NFEAT]) {
  z[0] = m.a;
  z[1] = m.b;
  z[2] = m.c;
  z[3] = m.d;
  z[4] = m.e;
}

static inline dpshim_cost_model_t dpshim__model_of_array(
    const double z[DPSHIM__NFEAT]) {
  return (dpshim_cost_model_t){z[0], z[1], z[2], z[3], z[4]};
}

/* Predicted compute time of one rank's point under the model. */
static inline double dpshim__fit_predict(dpshim_cost_model_t model,
                                         const dpshim_fit_point_t *p) {
  return model.a * p->sum_len2 + model.b * p->sum_len + model.c * p->count +
         model.d * p->sum_patches_sq + model.e * p->sum_patches;
}

/* RMS of each feature column over n >= 1 points; 1 for an all-zero column.
 * Fitters divide by it so that sum_len2 (~1e9) and count (~10) become
 * comparable unknowns. */
void dpshim__feature_scales(const dpshim_fit_point_t *points, int64_t n,
                            double scale[DPSHIM__NFEAT]);

/* Exact non-negative least squares of points[i].time on the five features,
 * over n >= 1 points with finite features (>= 0, or centred). Cannot fail; all-zero
 * coefficients when no feature explains the times. Deterministic. */
void dpshim__nnls_points(const dpshim_fit_point_t *points, int64_t n,
                         dpshim_cost_model_t *model);

/* The fitters behind dpshim_fit(), called on validated input. They return 0,
 * DPSHIM_ENOMEM or DPSHIM_ENOCONV and write `model`; on error they write one
 * line into message[message_size]. */
int dpshim__fit_ranks(const dpshim_fit_input_t *in, dpshim_cost_model_t *model,
                      char *message, size_t message_size);
int dpshim__fit_seed(const dpshim_fit_input_t *in, dpshim_cost_model_t *model,
                     char *message, size_t message_size);
/* DPSHIM_FIT_STEPS also gives the per-iteration overhead and the held-out
 * error (fit_steps.c). */
int dpshim__fit_steps(const dpshim_fit_input_t *in, dpshim_cost_model_t *model,
                      dpshim_fit_result_t *out);

#endif
