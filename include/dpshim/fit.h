/* The warm-up fit: cost-model coefficients from measured timings.
 *
 * Each warm-up iteration gives, for every rank, the features of the samples
 * it computed (sum len^2, sum len, count, and its images' sum patches^2 and
 * sum patches) and its measured compute time, plus the iteration's time.
 * Two fitters, both with every coefficient >= 0:
 *   DPSHIM_FIT_RANKS  non-negative least squares of every rank's compute time
 *                     on its features (uses every rank's point);
 *   DPSHIM_FIT_SEED   the original's: per iteration, the softmax-max over ranks
 *                     of the predicted load (alpha = 20, times in seconds)
 *                     against the iteration time;
 *   DPSHIM_FIT_STEPS  from iteration times too, by the hard max: each
 *                     iteration's predicted slowest rank plus an overhead
 *                     (the same every iteration) against its time, least
 *                     squares, with the features fitted chosen by the error
 *                     on iterations left out (few iterations pin few
 *                     coefficients); the overhead and the per-sample
 *                     term only where they cut that error to 0.8 of the
 *                     fits without (full packs make the per-token cost
 *                     and an overhead one column). The softmax's bias (log(ranks) / alpha
 *                     seconds) exceeds steps of milliseconds and drives the
 *                     seed fit to 0 there; the hard max has none.
 * Features are scaled before solving, so len^2 and len may differ by many
 * orders of magnitude.
 */
#ifndef DPSHIM_FIT_H
#define DPSHIM_FIT_H

#include <stddef.h>
#include <stdint.h>

#include "dpshim.h"
#include "solver.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dpshim_fit_method {
  DPSHIM_FIT_RANKS = 0,
  DPSHIM_FIT_SEED,
  DPSHIM_FIT_STEPS
} dpshim_fit_method_t;

/* One rank in one warm-up iteration. */
typedef struct dpshim_fit_point {
  double sum_len2;
  double sum_len;
  double count;
  double time; /* the rank's compute time, seconds (DPSHIM_FIT_RANKS) */
  /* Its images' patches squared (per image) and patches, summed over its
   * samples: the vision terms d and e. 0 without images. */
  double sum_patches_sq, sum_patches;
} dpshim_fit_point_t;

typedef struct dpshim_fit_input {
  int64_t iters;
  int32_t ranks;
  const dpshim_fit_point_t *points; /* [iters * ranks], iteration-major */
  const double *iter_time; /* [iters], seconds (DPSHIM_FIT_SEED, _STEPS) */
  dpshim_fit_method_t method;
  /* 1: fit a, b, c only (d = e = 0), whatever the points' vision sums:
   * the images are encoded apart from their samples (ViT balance), or the
   * fit without vision terms is wanted for comparison. */
  int text_only;
} dpshim_fit_input_t;

typedef struct dpshim_fit_result {
  dpshim_cost_model_t model;
  /* |predicted - measured| / measured over the fitted targets: per point for
   * RANKS, per iteration (predicted = max over ranks) for SEED and STEPS. */
  double mean_rel_error;
  double max_rel_error;
  /* STEPS: what every iteration pays besides its slowest rank (the sync,
   * the optimizer), seconds, in its predictions; 0 for the others. */
  double overhead;
  /* STEPS: the RMS relative error on iterations left out of the fit, of
   * the features it chose (an honest measure where the in-sample one is
   * flattered); INFINITY where too few iterations to leave any out; 0 for
   * the others. */
  double held_out_error;
  char message[192]; /* why it failed */
} dpshim_fit_result_t;

/* Returns 0, DPSHIM_EINVAL (bad field, named in out->message),
 * DPSHIM_ENOMEM or DPSHIM_ENOCONV. */
DPSHIM_EXTERN int dpshim_fit(const dpshim_fit_input_t *in,
                             dpshim_fit_result_t *out);

/* "ranks", "seed", "steps" <-> enum. */
DPSHIM_EXTERN int dpshim_fit_method_from_name(const char *name,
                                              dpshim_fit_method_t *method);
DPSHIM_EXTERN const char *dpshim_fit_method_name(dpshim_fit_method_t method);

#ifdef __cplusplus
}
#endif
#endif
