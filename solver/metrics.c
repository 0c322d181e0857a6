/* Cost model and load metrics: imbalance, the lower bound, non-empty repair. */
#include <math.h>
#include <stdlib.h>

#include "internal.h"

double dpshim_cost(dpshim_cost_model_t model, int64_t len) {
  double l = (double)len;
  return model.a * l * l + model.b * l + model.c;
}

double dpshim__max_load(const double *load, int32_t ranks) {
  double max = load[0];
  for (int32_t r = 1; r < ranks; r++)
    if (load[r] > max) max = load[r];
  return max;
}

double dpshim__imbalance(const double *load, int32_t ranks) {
  double sum = 0;
  for (int32_t r = 0; r < ranks; r++) sum += load[r];
  double mean = sum / ranks;
  return mean > 0 ? dpshim__max_load(load, ranks) / mean - 1 : 0;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The lowest level L with sum_r max(0, L - history_r) = work: the best any
 * assignment could do if samples were divisible. */
static double water_level(const dpshim__ctx_t *ctx, double work) {
  int32_t p = ctx->ranks;
  double *h = DPSHIM__ALLOC(ctx, double, p);
  if (!h) return NAN;
  for (int32_t r = 0; r < p; r++) h[r] = ctx->history[r];
  qsort(h, (size_t)p, sizeof *h, cmp_double);
  double filled = work;
  for (int32_t k = 1; k <= p; k++) {
    filled += h[k - 1];
    double level = filled / k;
    if (k == p || level <= h[k]) return level;
  }
  return NAN; /* unreachable: k == p returns */
}

double dpshim__lower_bound(const dpshim__ctx_t *ctx) {
  double work = 0, max_cost = 0, min_cost = INFINITY;
  for (int64_t i = 0; i < ctx->nsamples; i++) {
    work += ctx->cost[i];
    if (ctx->cost[i] > max_cost) max_cost = ctx->cost[i];
    if (ctx->cost[i] < min_cost) min_cost = ctx->cost[i];
  }
  double min_h = ctx->history[0], max_h = ctx->history[0];
  for (int32_t r = 1; r < ctx->ranks; r++) {
    min_h = fmin(min_h, ctx->history[r]);
    max_h = fmax(max_h, ctx->history[r]);
  }
  /* Equal histories (the common, single micro-batch case) need no sort. */
  double level = min_h == max_h ? min_h + work / ctx->ranks
                                : water_level(ctx, work);
  /* The costliest sample lands somewhere; every rank receives a sample. */
  return fmax(level, fmax(min_h + max_cost, max_h + min_cost));
}

static int32_t fullest_rank(const int64_t *count, int32_t ranks) {
  int32_t best = 0;
  for (int32_t r = 1; r < ranks; r++)
    if (count[r] > count[best]) best = r;
  return best;
}

static int64_t cheapest_sample_on(const dpshim__ctx_t *ctx, int32_t rank) {
  int64_t best = -1;
  for (int64_t i = 0; i < ctx->nsamples; i++)
    if (ctx->dest[i] == rank && (best < 0 || ctx->cost[i] < ctx->cost[best]))
      best = i;
  return best;
}

int dpshim__fill_empty_ranks(const dpshim__ctx_t *ctx) {
  int64_t *count = DPSHIM__ALLOC(ctx, int64_t, ctx->ranks);
  if (!count) return DPSHIM_ENOMEM;
  for (int32_t r = 0; r < ctx->ranks; r++) count[r] = 0;
  for (int64_t i = 0; i < ctx->nsamples; i++) count[ctx->dest[i]]++;
  for (int32_t r = 0; r < ctx->ranks; r++) {
    if (count[r] > 0) continue;
    int32_t donor = fullest_rank(count, ctx->ranks);
    /* nsamples >= ranks, so the fullest rank holds at least two. */
    ctx->dest[cheapest_sample_on(ctx, donor)] = r;
    count[donor]--;
    count[r]++;
  }
  return 0;
}
