/* Fit internals shared by fit.c and the two fitters. Not installed. */
#ifndef DPSHIM_SOLVER_FIT_INTERNAL_H
#define DPSHIM_SOLVER_FIT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "dpshim/fit.h"

/* Predicted compute time of one rank's point under the model. */
static inline double dpshim__fit_predict(dpshim_cost_model_t model,
                                         const dpshim_fit_point_t *p) {
  return model.a * p->sum_len2 + model.b * p->sum_len + model.c * p->count;
}

/* RMS of each feature column over n >= 1 points; 1 for an all-zero column.
 * Fitters divide by it so that sum_len2 (~1e9) and count (~10) become
 * comparable unknowns. */
void dpshim__feature_scales(const dpshim_fit_point_t *points, int64_t n,
                            double scale[3]);

/* Exact non-negative least squares of points[i].time on the three features,
 * over n >= 1 points with finite features >= 0. Cannot fail; all-zero
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

#endif
