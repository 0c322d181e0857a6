/* The warm-up fit: every rank's points to every rank, one fit, one model.
 *
 * Rank 0 fits and broadcasts, so the model is the same bit for bit on every
 * rank of every DP group. The fitted model is in seconds; the shim uses it
 * in microseconds, which changes no decision (all are scale-free) and
 * makes the verbose loads readable. */
#include <stdlib.h>
#include <string.h>

#include "shim.h"

#define POINT_DOUBLES 5 /* dpshim__point_t as doubles */

_Static_assert(sizeof(dpshim__point_t) == POINT_DOUBLES * sizeof(double),
               "dpshim__point_t is sent as doubles");

/* Rank 0: all[world][npoints] -> fit input, iteration-major. */
static int fit_all(const dpshim__state_t *st, const dpshim__point_t *all,
                   dpshim_fit_result_t *out) {
  int32_t ranks = st->world_size, iters = st->npoints;
  dpshim_fit_point_t *pts = calloc((size_t)ranks * (size_t)iters, sizeof *pts);
  double *iter_time = calloc((size_t)iters, sizeof *iter_time);
  int rc = DPSHIM_ENOMEM;
  if (pts && iter_time) {
    for (int32_t it = 0; it < iters; it++) {
      for (int32_t r = 0; r < ranks; r++) {
        const dpshim__point_t *p = &all[(size_t)r * (size_t)iters + (size_t)it];
        pts[(size_t)it * (size_t)ranks + (size_t)r] =
            (dpshim_fit_point_t){p->sum_len2, p->sum_len, p->count, p->compute};
        if (p->step > iter_time[it]) iter_time[it] = p->step;
      }
    }
    dpshim_fit_input_t in = {iters, ranks, pts, iter_time, st->cfg.fit};
    rc = dpshim_fit(&in, out);
  } else {
    strcpy(out->message, "out of memory for the warm-up points");
  }
  free(pts);
  free(iter_time);
  return rc;
}

/* A loader thread may hand off batches ahead of the steps that compute
 * them: then no step's features are known, and there is nothing to fit. */
static int skip_threaded(dpshim__state_t *st) {
  int threaded = st->threaded;
  PMPI_Allreduce(MPI_IN_PLACE, &threaded, 1, MPI_INT, MPI_MAX, st->world);
  if (threaded && st->world_rank == 0)
    dpshim__say("batches are handed off from a loader thread, which may run "
                "ahead of the steps: no warm-up fit; the cost stays linear "
                "unless DPSHIM_COEFS=a,b,c is set");
  return threaded;
}

int dpshim__fit_warmup(dpshim__state_t *st) {
  if (skip_threaded(st)) return DPSHIM_EINVAL;
  int n = st->npoints * POINT_DOUBLES;
  dpshim__point_t *all = calloc((size_t)st->world_size * (size_t)st->npoints + 1,
                                sizeof *all);
  int rc = all ? 0 : DPSHIM_ENOMEM;
  PMPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MIN, st->world);
  dpshim_fit_result_t fit;
  memset(&fit, 0, sizeof fit);
  if (rc == 0) {
    PMPI_Gather(st->points, n, MPI_DOUBLE, all, n, MPI_DOUBLE, 0, st->world);
    if (st->world_rank == 0) rc = fit_all(st, all, &fit);
    PMPI_Bcast(&rc, 1, MPI_INT, 0, st->world);
    PMPI_Bcast(&fit, (int)sizeof fit, MPI_BYTE, 0, st->world);
  } else {
    strcpy(fit.message, "out of memory for the warm-up points");
  }
  free(all);
  pthread_mutex_lock(&st->lock);
  st->fit = fit;
  if (rc == 0) {
    st->model = (dpshim_cost_model_t){fit.model.a * 1e6, fit.model.b * 1e6,
                                      fit.model.c * 1e6};
    st->fitted = 1;
  }
  pthread_mutex_unlock(&st->lock);
  if (st->world_rank != 0) return rc;
  if (rc < 0)
    dpshim__say("warm-up fit failed (%s); the cost stays linear", fit.message);
  else if (st->cfg.verbose)
    dpshim__say("fitted cost = %.4g*len^2 + %.4g*len + %.4g us per sample; "
                "prediction error mean %.2f%%, max %.2f%%", st->model.a,
                st->model.b, st->model.c, 100 * fit.mean_rel_error,
                100 * fit.max_rel_error);
  return rc;
}
