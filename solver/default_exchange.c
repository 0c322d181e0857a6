/* `default`'s step 6 (default_finish.c): moved samples home by exchange. */
#include <math.h>

#include "default_tally.h"

/* A moved sample whose home is full may still go home in exchange for one
 * or two of its home's samples, which go where it was (a swap) or to a
 * third rank with room (a chain), wherever that moves fewer priced bytes
 * and keeps every load within the plan's maximum and the caps. Up to
 * DPSHIM__SECOND_START_RANKS ranks, on a work budget (a unit per sample looked
 * at, per pair and per rank weighed; about 0.5 ms here), half of it when
 * run again after step 7 (most is done by then). */
#define EXCHANGE_WORK 50000

typedef struct swap_home {
  const dpshim__ctx_t *ctx;
  dpshim__tally_t *t;
  double limit;
  int64_t *start, *list; /* samples by rank as a pass starts (CSR) */
  int64_t work, budget;
} swap_home_t;

/* One or two samples of a home leaving it, as one. */
typedef struct leaving {
  int64_t j[2];
  int n;
  double cost;
  int64_t len, rows;
} leaving_t;

typedef struct exchange {
  leaving_t g;
  int32_t to;
  int64_t gain; /* priced bytes saved */
} exchange_t;

/* Whether rank r may take `cost`, `len` and `rows` more (any may be
 * negative) and stay within the limit and the caps. */
static int takes(const swap_home_t *h, int32_t r, double cost, int64_t len,
                 int64_t rows) {
  const dpshim__tally_t *t = h->t;
  return t->load[r] + cost <= h->limit && t->tokens[r] + len <= h->ctx->cap &&
         dpshim__rows_fit(h->ctx, r, t->rows[r], rows);
}

/* What sending j from its rank to `to` adds in priced bytes. */
static inline int64_t extra_price(const dpshim__ctx_t *ctx, int64_t j,
                                  int32_t to) {
  return dpshim__move_price(ctx, j, to) -
         dpshim__move_price(ctx, j, ctx->dest[j]);
}

static leaving_t leaving(const dpshim__ctx_t *ctx, int64_t j1, int64_t j2) {
  leaving_t g = {{j1, j2}, j2 < 0 ? 1 : 2, 0, 0, 0};
  for (int k = 0; k < g.n; k++) {
    g.cost += ctx->cost[g.j[k]];
    g.len += ctx->samples[g.j[k]].len;
    g.rows += ctx->samples[g.j[k]].rows;
  }
  return g;
}

/* Whether i's home o may take it for samples leaving that cost, hold
 * len tokens and rows. */
static int home_takes_for(const swap_home_t *h, int64_t i, double cost,
                          int64_t len, int64_t rows) {
  const dpshim_sample_t *si = &h->ctx->samples[i];
  return takes(h, si->origin, h->ctx->cost[i] - cost, si->len - len,
               si->rows - rows);
}

/* Whether i's home o may take it for the samples of g. */
static int home_takes(const swap_home_t *h, int64_t i, const leaving_t *g) {
  return home_takes_for(h, i, g->cost, g->len, g->rows);
}

/* Whether i's home may take it for j and j2: leaving(j, j2)'s sums, in
 * its order, with no leaving_t built (most pairs fail here, and a struct
 * stored in parts and read back whole stalls). */
static int home_takes_two(const swap_home_t *h, int64_t i, int64_t j,
                          int64_t j2) {
  const dpshim__ctx_t *ctx = h->ctx;
  double cost = 0;
  cost += ctx->cost[j];
  cost += ctx->cost[j2];
  return home_takes_for(h, i, cost,
                        ctx->samples[j].len + ctx->samples[j2].len,
                        ctx->samples[j].rows + ctx->samples[j2].rows);
}

/* g leaving i's home for `to` in exchange for i coming home from a, which
 * saves `gain` priced bytes: kept in *best if it saves more and fits. */
static inline void weigh(const swap_home_t *h, int64_t i, const leaving_t *g,
                         int32_t to, int64_t gain, exchange_t *best) {
  const dpshim__ctx_t *ctx = h->ctx;
  const dpshim_sample_t *si = &ctx->samples[i];
  int32_t a = ctx->dest[i];
  if (to < 0 || to == si->origin || gain <= best->gain) return;
  int ok = to == a
               ? takes(h, a, g->cost - ctx->cost[i], g->len - si->len,
                       g->rows - si->rows)
               : h->t->count[a] >= 2 && takes(h, to, g->cost, g->len, g->rows);
  if (ok) *best = (exchange_t){*g, to, gain};
}

/* weigh() of one sample of i's home leaving for every rank, in rank
 * order: its price where it is, out of the loop. */
static void weigh_one(const swap_home_t *h, int64_t i, const leaving_t *one,
                      int64_t saved, exchange_t *best) {
  const dpshim__ctx_t *ctx = h->ctx;
  int64_t j = one->j[0], now = dpshim__move_price(ctx, j, ctx->dest[j]);
  for (int32_t to = 0; to < ctx->ranks; to++)
    weigh(h, i, one, to, saved - (dpshim__move_price(ctx, j, to) - now), best);
}

/* The least-loaded rank but `skip`. */
static int32_t least_loaded_but(const dpshim__tally_t *t, int32_t ranks,
                                int32_t skip) {
  int32_t best = -1;
  for (int32_t r = 0; r < ranks; r++)
    if (r != skip && (best < 0 || t->load[r] < t->load[best])) best = r;
  return best;
}

/* The best exchange that takes moved sample i home: one of its home's
 * samples goes where i was (a swap) or to any other rank, or two go where
 * i was or to the least-loaded rank. Its home's samples are costliest
 * first: those leaving must free at least `need` and no rank takes more
 * than `most`. gain 0: none. */
static exchange_t best_exchange(swap_home_t *h, int64_t i) {
  const dpshim__ctx_t *ctx = h->ctx;
  const double *cost = ctx->cost;
  int32_t o = ctx->samples[i].origin, a = ctx->dest[i];
  int32_t least = least_loaded_but(h->t, ctx->ranks, o);
  double need = cost[i] - (h->limit - h->t->load[o]);
  double most = fmax(cost[i] + h->limit - h->t->load[a],
                     h->limit - h->t->load[least]);
  int64_t saved = -extra_price(ctx, i, o), end = h->start[o + 1];
  exchange_t best = {{{-1, -1}, 0, 0, 0, 0}, -1, 0};
  /* The work counted in a local: through h it would be stored and read
   * back every sample looked at (the calls below might change *h). */
  int64_t work = h->work;
  for (int64_t k = h->start[o]; k < end && work < h->budget; k++) {
    int64_t j = h->list[k];
    work++;
    if (ctx->dest[j] != o || cost[j] > most) continue;
    if (k + 1 < end && cost[j] + cost[h->list[k + 1]] < need && cost[j] < need)
      break; /* nothing after j frees enough, alone or with another */
    leaving_t one = leaving(ctx, j, -1);
    work += ctx->ranks;
    if (cost[j] >= need && home_takes(h, i, &one))
      weigh_one(h, i, &one, saved, &best);
    /* What j adds at a and at the least-loaded rank, for every j2. */
    int64_t at_a = saved - extra_price(ctx, j, a);
    int64_t at_least = least >= 0 ? saved - extra_price(ctx, j, least) : 0;
    for (int64_t q = k + 1; q < end && cost[j] + cost[h->list[q]] >= need;
         q++) {
      int64_t j2 = h->list[q];
      work++;
      if (ctx->dest[j2] != o || cost[j] + cost[j2] > most) continue;
      int64_t gain_a = at_a - extra_price(ctx, j2, a);
      int64_t gain_least = least >= 0 ? at_least - extra_price(ctx, j2, least) : 0;
      if (gain_a <= best.gain && (least < 0 || gain_least <= best.gain))
        continue; /* weigh() would keep neither: the fit is not asked */
      if (!home_takes_two(h, i, j, j2)) continue;
      leaving_t two = leaving(ctx, j, j2);
      weigh(h, i, &two, a, gain_a, &best);
      if (least >= 0) weigh(h, i, &two, least, gain_least, &best);
    }
  }
  h->work = work;
  return best;
}

/* Each rank's samples, costliest first. */
static void index_by_rank(swap_home_t *h) {
  const dpshim__ctx_t *ctx = h->ctx;
  for (int32_t r = 0; r <= ctx->ranks; r++) h->start[r] = 0;
  for (int64_t i = 0; i < ctx->nsamples; i++) h->start[ctx->dest[i] + 1]++;
  for (int32_t r = 0; r < ctx->ranks; r++) h->start[r + 1] += h->start[r];
  for (int64_t k = 0; k < ctx->nsamples; k++) {
    int64_t i = ctx->order[k];
    h->list[h->start[ctx->dest[i]]++] = i;
  }
  for (int32_t r = ctx->ranks; r > 0; r--) h->start[r] = h->start[r - 1];
  h->start[0] = 0;
}

/* One pass over the moved samples, costliest first, each sent home
 * outright where it fits (the rank it leaves may be another's home), else
 * by the best exchange; returns how many went home. */
static int64_t exchange_pass(swap_home_t *h) {
  const dpshim__ctx_t *ctx = h->ctx;
  int64_t sent = 0;
  index_by_rank(h);
  for (int64_t k = 0; k < ctx->nsamples && h->work < h->budget; k++) {
    int64_t i = ctx->order[k];
    h->work++;
    int32_t o = ctx->samples[i].origin;
    if (ctx->dest[i] == o) continue;
    if (dpshim__tally_may_move(ctx, h->t, i, o, h->limit)) {
      dpshim__tally_move(ctx, h->t, i, o);
      sent++;
      continue;
    }
    exchange_t x = best_exchange(h, i);
    if (x.gain <= 0) continue;
    dpshim__tally_move(ctx, h->t, i, o);
    for (int q = 0; q < x.g.n; q++)
      dpshim__tally_move(ctx, h->t, x.g.j[q], x.to);
    sent++;
  }
  return sent;
}

/* Loads summed along the way may differ from plan.c's by rounding: the
 * plan is kept only if its maximum, summed afresh, is within the limit. */
int dpshim__default_home_by_exchange(const dpshim__ctx_t *ctx,
                                     dpshim__tally_t *t, int again) {
  if (ctx->ranks > DPSHIM__SECOND_START_RANKS) return 0;
  swap_home_t h = {ctx, t, 0, DPSHIM__ALLOC(ctx, int64_t, ctx->ranks + 1),
                   DPSHIM__ALLOC(ctx, int64_t, ctx->nsamples), 0,
                   again ? EXCHANGE_WORK / 2 : EXCHANGE_WORK};
  int32_t *before = DPSHIM__ALLOC(ctx, int32_t, ctx->nsamples);
  if (!h.start || !h.list || !before) return DPSHIM_ENOMEM;
  dpshim__copy_dest(ctx, before, ctx->dest);
  dpshim__tally_of(ctx, ctx->dest, t);
  h.limit = dpshim__max_load(t->load, ctx->ranks);
  while (h.work < h.budget && exchange_pass(&h) > 0) {
  }
  dpshim__tally_of(ctx, ctx->dest, t);
  if (dpshim__max_load(t->load, ctx->ranks) > h.limit)
    dpshim__copy_dest(ctx, ctx->dest, before);
  return 0;
}

