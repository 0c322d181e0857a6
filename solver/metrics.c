/* Cost model and load metrics: imbalance, the lower bound, rows per rank,
 * non-empty repair. */
#include <math.h>
#include <stdlib.h>

#include "internal.h"

double dpshim_cost(dpshim_cost_model_t model, int64_t len) {
  double l = (double)len;
  return model.a * l * l + model.b * l + model.c;
}

/* Without images the cost is bit for bit the text model's. */
double dpshim_sample_cost(dpshim_cost_model_t model, const dpshim_sample_t *s) {
  return dpshim__sample_cost(model, s);
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

/* The lowest level L with sum_k max(0, L - base[k]) = work over p bases:
 * with the ranks' histories, the best any assignment could do if samples
 * were divisible. */
double dpshim__water_level(const dpshim__ctx_t *ctx, const double *base,
                           int32_t p, double work) {
  double *h = DPSHIM__ALLOC(ctx, double, p);
  if (!h) return NAN;
  for (int32_t r = 0; r < p; r++) h[r] = base[r];
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
  double h, min_density, max_density;
} cap_bound_t;

static double min2(double x, double y) { return x < y ? x : y; }
static double max2(double x, double y) { return x > y ? x : y; }

static void add_capacity(const cap_bound_t *b, double cost_room, double tok_room,
                         double *tok_fit, double *cost_fit) {
  *tok_fit += min2(tok_room, cost_room / b->min_density);
  *cost_fit += min2(cost_room, tok_room * b->max_density);
}

static int cap_allows(const cap_bound_t *b, double m) {
  const dpshim__ctx_t *ctx = b->ctx;
  double cap = (double)ctx->cap, tok_fit = 0, cost_fit = 0;
  double big_cost = 0, big_tok = 0;
  int64_t big = 0;
  for (; big < ctx->nsamples; big++) {
    int64_t i = ctx->order[big];
    if (ctx->cost[i] <= (m - b->h) / 2) break;
    if (big == ctx->ranks) return 0; /* two big samples would share a rank */
    double room = m - b->h - ctx->cost[i], tok = cap - (double)ctx->samples[i].len;
    if (room < 0 || tok < 0) return 0;
    add_capacity(b, room, tok, &tok_fit, &cost_fit);
    big_cost += ctx->cost[i];
    big_tok += (double)ctx->samples[i].len;
  }
  double others = (double)(ctx->ranks - big), one_tok = 0, one_cost = 0;
  add_capacity(b, m - b->h, cap, &one_tok, &one_cost);
  tok_fit += others * one_tok;
  cost_fit += others * one_cost;
  return tok_fit >= (double)ctx->tokens - big_tok && cost_fit >= ctx->work - big_cost;
}

/* With vision terms cost is no function of length: the samples' own
 * densities bound every divisible piece's. */
static void sample_density_range(const dpshim__ctx_t *ctx, double *lo,
                                 double *hi) {
  *lo = INFINITY;
  *hi = 0;
  for (int64_t i = 0; i < ctx->nsamples; i++) {
    double len = (double)ctx->len[i], cost = ctx->cost[i];
    if (len == 0) {
      if (cost > 0) *hi = INFINITY;
      continue;
    }
    *lo = min2(*lo, cost / len);
    *hi = max2(*hi, cost / len);
  }
}

/* cost(len) / len = a len + b + c / len is convex: over the lengths present
 * it peaks at the shortest or the longest, and it is never below b + 2
 * sqrt(ac), nor below its value at the shortest length when c = 0. */
static void density_range(const dpshim__ctx_t *ctx, double *lo, double *hi) {
  dpshim_cost_model_t m = ctx->model;
  if (ctx->vision) {
    sample_density_range(ctx, lo, hi);
    return;
  }
  int64_t longest = ctx->samples[ctx->order[0]].len;
  int64_t shortest = ctx->samples[ctx->order[ctx->nsamples - 1]].len;
  if (shortest == 0) { /* cost without tokens: no density bounds it */
    *lo = m.b + 2 * sqrt(m.a * m.c);
    *hi = INFINITY;
    return;
  }
  double at_short = dpshim_cost(m, shortest) / (double)shortest;
  double at_long = dpshim_cost(m, longest) / (double)longest;
  *lo = m.c == 0 ? at_short : m.b + 2 * sqrt(m.a * m.c);
  *hi = max2(at_short, at_long);
}

static int equal_histories(const dpshim__ctx_t *ctx) {
  for (int32_t r = 1; r < ctx->ranks; r++)
    if (ctx->history[r] != ctx->history[0]) return 0;
  return 1;
}

double dpshim__cap_lower_bound(const dpshim__ctx_t *ctx, double from) {
  if (ctx->cap == DPSHIM__NO_CAP || !equal_histories(ctx)) return from;
  /* A sample longer than the cap: no plan is within it, nothing to bound. */
  if (ctx->longest > ctx->cap) return from;
  cap_bound_t b = {ctx, ctx->history[0], 0, 0};
  density_range(ctx, &b.min_density, &b.max_density);
  if (!(b.min_density > 0)) return from; /* free tokens bound nothing */
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

/* Pigeonholes over the costliest samples: of the k*P + m costliest (k >= 1,
 * 1 <= m <= P), at least m ranks hold k + 1 each, so those m ranks hold at
 * least the m*(k+1) cheapest of them, and the busiest of the m at least
 * that over m. The best over k and m, histories aside. O(N): the sums come
 * from one running sum over the samples, costliest first. */
static double stacked_bound(const dpshim__ctx_t *ctx) {
  int64_t n = ctx->nsamples, P = ctx->ranks;
  double *sum = dpshim__arena_alloc(ctx->arena, sizeof *sum * (size_t)(n + 1));
  if (!sum) return 0; /* no memory: the other bounds stand alone */
  sum[0] = 0;
  for (int64_t k = 0; k < n; k++) sum[k + 1] = sum[k] + ctx->cost[ctx->order[k]];
  double best = 0;
  for (int64_t k = 1; k * P + 1 <= n; k++)
    for (int64_t m = 1; m <= P && k * P + m <= n; m++) {
      int64_t top = k * P + m, from = k * (P - m);
      best = max2(best, (sum[top] - sum[from]) / (double)m);
    }
  return best;
}

double dpshim__lower_bound(const dpshim__ctx_t *ctx) {
  double work = ctx->work, max_cost = ctx->cost[ctx->order[0]],
         min_cost = ctx->cost[ctx->order[ctx->nsamples - 1]];
  double min_h = ctx->history[0], max_h = ctx->history[0];
  for (int32_t r = 1; r < ctx->ranks; r++) {
    min_h = min2(min_h, ctx->history[r]);
    max_h = max2(max_h, ctx->history[r]);
  }
  /* Equal histories (the common, single micro-batch case) need no sort. */
  double level = min_h == max_h ? min_h + work / ctx->ranks
                                : dpshim__water_level(ctx, ctx->history,
                                                      ctx->ranks, work);
  /* The costliest sample lands somewhere; every rank receives a sample. */
  double bound = max2(level, max2(min_h + max_cost, max_h + min_cost));
  return max2(bound, min_h + stacked_bound(ctx));
}

int32_t dpshim__rows_over_caps(const dpshim__ctx_t *ctx, const int32_t *where,
                               int64_t *rows) {
  for (int32_t r = 0; r < ctx->ranks; r++) rows[r] = 0;
  for (int64_t i = 0; i < ctx->nsamples; i++) rows[where[i]] += ctx->samples[i].rows;
  int32_t over = 0;
  for (int32_t r = 0; ctx->rows_cap && r < ctx->ranks; r++)
    over += rows[r] > ctx->rows_cap[r];
  return over;
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
