/* The plan tally `default`'s last steps share (default_finish.c,
 * default_exchange.c): per-rank loads, tokens, rows and counts of a plan
 * in ctx->dest, the checks a move needs, and whole plans copied and
 * priced. */
#ifndef DPSHIM_SOLVER_DEFAULT_TALLY_H
#define DPSHIM_SOLVER_DEFAULT_TALLY_H

#include <string.h>

#include "internal.h"

/* Above this many ranks seed's solve is no longer cheap beside default's
 * (and rarely better): no second start. */
#define DPSHIM__SECOND_START_RANKS 32

/* Per rank: load (history included), tokens, rows, samples of a plan. */
typedef struct dpshim__tally {
  double *load;
  int64_t *tokens, *rows, *count;
} dpshim__tally_t;

static inline int dpshim__tally_init(const dpshim__ctx_t *ctx,
                                     dpshim__tally_t *t) {
  t->load = DPSHIM__ALLOC(ctx, double, ctx->ranks);
  t->tokens = DPSHIM__ALLOC(ctx, int64_t, ctx->ranks);
  t->rows = DPSHIM__ALLOC(ctx, int64_t, ctx->ranks);
  t->count = DPSHIM__ALLOC(ctx, int64_t, ctx->ranks);
  return t->load && t->tokens && t->rows && t->count ? 0 : DPSHIM_ENOMEM;
}

/* Summed in index order, as plan.c sums the loads it reports. Rows are
 * summed only under rows caps (nothing asks for them without): the pass
 * then reads no sample whole. */
static inline void dpshim__tally_of(const dpshim__ctx_t *ctx,
                                    const int32_t *dest, dpshim__tally_t *t) {
  for (int32_t r = 0; r < ctx->ranks; r++) {
    t->load[r] = ctx->history[r];
    t->tokens[r] = t->rows[r] = t->count[r] = 0;
  }
  dpshim__sum_costs(ctx->cost, dest, ctx->nsamples, t->load);
  for (int64_t i = 0; i < ctx->nsamples; i++) {
    t->tokens[dest[i]] += ctx->len[i];
    t->count[dest[i]]++;
  }
  for (int64_t i = 0; ctx->rows_cap && i < ctx->nsamples; i++)
    t->rows[dest[i]] += ctx->samples[i].rows;
}

/* Whether a plan keeps every rank within the token cap and holding a
 * sample. */
static inline int dpshim__tally_acceptable(const dpshim__ctx_t *ctx,
                                           const dpshim__tally_t *t) {
  for (int32_t r = 0; r < ctx->ranks; r++)
    if (t->tokens[r] > ctx->cap || t->count[r] == 0) return 0;
  return 1;
}

/* A plan copied whole: to keep one, or to put it back. */
static inline void dpshim__copy_dest(const dpshim__ctx_t *ctx, int32_t *to,
                      const int32_t *from) {
  memcpy(to, from, sizeof *to * (size_t)ctx->nsamples);
}

/* The priced bytes of the samples a plan moves off their origin. */
static inline int64_t dpshim__moved_price(const dpshim__ctx_t *ctx,
                                          const int32_t *dest) {
  int64_t price = 0;
  for (int64_t i = 0; i < ctx->nsamples; i++)
    price += dpshim__move_price(ctx, i, dest[i]);
  return price;
}

/* Whether sample i may leave its rank for r: its rank keeps a sample, and
 * r stays within the limit and the caps. */
static inline int dpshim__tally_may_move(const dpshim__ctx_t *ctx,
                                         const dpshim__tally_t *t, int64_t i,
                                         int32_t r, double limit) {
  return t->count[ctx->dest[i]] >= 2 && t->load[r] + ctx->cost[i] <= limit &&
         t->tokens[r] + ctx->len[i] <= ctx->cap &&
         (!ctx->rows_cap ||
          dpshim__rows_fit(ctx, r, t->rows[r], ctx->samples[i].rows));
}

static inline void dpshim__tally_move(const dpshim__ctx_t *ctx,
                                      dpshim__tally_t *t, int64_t i,
                                      int32_t to) {
  const dpshim_sample_t *s = &ctx->samples[i];
  int32_t r = ctx->dest[i];
  ctx->dest[i] = to;
  t->load[r] -= ctx->cost[i], t->load[to] += ctx->cost[i];
  t->tokens[r] -= s->len, t->tokens[to] += s->len;
  t->rows[r] -= s->rows, t->rows[to] += s->rows;
  t->count[r]--, t->count[to]++;
}

/* Step 6 of the finish (default_exchange.c): moved samples home by
 * exchanges that move fewer bytes under the plan's maximum. */
int dpshim__default_home_by_exchange(const dpshim__ctx_t *ctx,
                                     dpshim__tally_t *t, int again);

/* Step 7 (default_pairs.c): fewer bytes by re-dealing the samples of two
 * or three ranks at a time, exactly, under the plan's maximum (at most
 * DPSHIM__SECOND_START_RANKS ranks, no rows caps); returns 1 if it
 * changed the plan, 0 if not, or ENOMEM. */
int dpshim__default_pairs(const dpshim__ctx_t *ctx, dpshim__tally_t *t);

#endif
