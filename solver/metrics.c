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

/* ---- the token cap's share of the bound ----------------------------------
 * For plans within the cap only. Relax every sample of cost <= (M - h) / 2
 * to be divisible; costlier ("big") ones cannot share a rank without
 * exceeding M. A rank can then take at most min(token room, cost room /
 * lowest cost density) tokens of divisible work, and at most min(cost room,
 * token room * highest density) of its cost. When the ranks' capacities fall
 * short of the divisible work, no plan within the cap reaches M. Holds for
 * equal histories h, which make the ranks interchangeable. */

typedef struct cap_bound {
  const dpshim__ctx_t *ctx;
  const double *pre_cost; /* [n + 1] prefix sums along ctx->order */
  const int64_t *pre_tok;
  double h, min_density, max_density;
} cap_bound_t;

static void add_capacity(const cap_bound_t *b, double cost_room, double tok_room,
                         double *tok_fit, double *cost_fit) {
  *tok_fit += fmin(tok_room, cost_room / b->min_density);
  *cost_fit += fmin(cost_room, tok_room * b->max_density);
}

static int cap_allows(const cap_bound_t *b, double m) {
  const dpshim__ctx_t *ctx = b->ctx;
  int64_t n = ctx->nsamples, big = 0;
  while (big < n && ctx->cost[ctx->order[big]] > (m - b->h) / 2) big++;
  if (big > ctx->ranks) return 0;
  double cap = (double)ctx->cap, tok_fit = 0, cost_fit = 0;
  for (int64_t k = 0; k < big; k++) {
    int64_t i = ctx->order[k];
    double room = m - b->h - ctx->cost[i], tok = cap - (double)ctx->samples[i].len;
    if (room < 0 || tok < 0) return 0;
    add_capacity(b, room, tok, &tok_fit, &cost_fit);
  }
  double others = (double)(ctx->ranks - big), one_tok = 0, one_cost = 0;
  add_capacity(b, m - b->h, cap, &one_tok, &one_cost);
  tok_fit += others * one_tok;
  cost_fit += others * one_cost;
  return tok_fit >= (double)(b->pre_tok[n] - b->pre_tok[big]) &&
         cost_fit >= b->pre_cost[n] - b->pre_cost[big];
}

static int equal_histories(const dpshim__ctx_t *ctx) {
  for (int32_t r = 1; r < ctx->ranks; r++)
    if (ctx->history[r] != ctx->history[0]) return 0;
  return 1;
}

double dpshim__cap_lower_bound(const dpshim__ctx_t *ctx, double from) {
  if (ctx->cap == DPSHIM__NO_CAP || !equal_histories(ctx)) return from;
  int64_t n = ctx->nsamples;
  /* A sample longer than the cap: no plan is within it, nothing to bound. */
  if (ctx->samples[ctx->order[0]].len > ctx->cap) return from;
  double *pre_cost = DPSHIM__ALLOC(ctx, double, n + 1);
  int64_t *pre_tok = DPSHIM__ALLOC(ctx, int64_t, n + 1);
  if (!pre_cost || !pre_tok) return from; /* the weaker bound is still one */
  cap_bound_t b = {ctx, pre_cost, pre_tok, ctx->history[0], INFINITY, 0};
  pre_cost[0] = 0;
  pre_tok[0] = 0;
  for (int64_t k = 0; k < n; k++) {
    int64_t i = ctx->order[k], len = ctx->samples[i].len;
    pre_cost[k + 1] = pre_cost[k] + ctx->cost[i];
    pre_tok[k + 1] = pre_tok[k] + len;
    double density = len > 0 ? ctx->cost[i] / (double)len : INFINITY;
    b.min_density = fmin(b.min_density, density);
    b.max_density = fmax(b.max_density, density);
  }
  if (cap_allows(&b, from)) return from;
  double lo = from, hi = 2 * from + 1;
  while (!cap_allows(&b, hi)) {
    if (hi > 1e6 * (from + 1)) return from; /* the cap cannot be met at all */
    lo = hi;
    hi *= 2;
  }
  for (int it = 0; it < 64 && hi - lo > 1e-9 * hi; it++) {
    double mid = lo + (hi - lo) / 2;
    if (cap_allows(&b, mid)) hi = mid;
    else lo = mid;
  }
  return lo; /* no plan within the cap has a maximum load of lo or less */
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
