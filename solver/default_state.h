/* The state the three steps of `default` share (algo_default.c sheds and
 * drives, default_place.c places, default_repair.c repairs; kk-cap repairs
 * kk's plan with it): per-rank loads, tokens, rows and sample lists, and the
 * moves that keep them consistent. */
#ifndef DPSHIM_SOLVER_DEFAULT_STATE_H
#define DPSHIM_SOLVER_DEFAULT_STATE_H

#include "internal.h"
#include "rank_tree.h"

typedef struct dpshim__dstate {
  const dpshim__ctx_t *ctx;
  double *load;
  int64_t *tokens;
  int64_t *rows;
  int64_t *count;
  double *token_key; /* tokens as a heap key */
  double bound;      /* the cap's lower bound: no plan here does better */
  double target;     /* U */
  /* Priced bytes (dpshim__move_price) of the samples away from home, and
   * of all samples as if each crossed hosts: the repair's budget. */
  int64_t moved_price, total_price;
  const int64_t *order;   /* ctx->order */
  int64_t *start, *group; /* order bucketed by origin (CSR) */
  int64_t *head, *next, *prev; /* per-rank doubly linked sample lists */
  dpshim__rank_tree_t tree;
  int64_t *version; /* [ranks] bumped whenever a rank's samples change */
  /* Trades: each rank's samples shortest first, with running sums of their
   * cost, tokens and rows, kept in a slot of the pools while the rank's
   * version is the slot's (the repair asks for many ranks, again and
   * again, while one or two change). */
  struct dpshim__trade_cache {
    int64_t *version, *at, *room; /* [ranks]; version -1: no slot */
    int64_t used, size;           /* of the pools */
    uint64_t *key;
    double *cost, *each; /* running sums; each sample's own, for searches */
    int64_t *tokens, *rows;
    int64_t *longest, *longest_version; /* [ranks]: its longest sample's */
    int64_t *longest_at, *second; /* tokens, that sample, the others' most */
    double *costliest; /* [ranks]: its costliest sample's cost (same version) */
    double *densest;   /* [ranks]: its most cost per token (same version) */
  } cache;
  /* The rank last asked for: its slot's arrays (key[0 .. n), sums [0 .. n]) */
  const uint64_t *trade_key;
  const double *trade_cost, *trade_each;
  const int64_t *trade_tokens, *trade_rows;
  int32_t *viable; /* [ranks] scratch: receivers worth asking */
  /* [nsamples] scratch: a giver's samples and their lengths (nsamples and
   * lengths are validated to fit 32 bits); `given` of them. */
  int32_t *give, *give_len;
  int64_t given;
} dpshim__dstate_t;

/* ---- per-rank sample lists and moves ----------------------------------- */

static inline void dpshim__dstate_link_front(dpshim__dstate_t *s, int64_t i,
                                             int32_t r) {
  s->prev[i] = -1;
  s->next[i] = s->head[r];
  if (s->head[r] >= 0) s->prev[s->head[r]] = i;
  s->head[r] = i;
}

static inline void dpshim__dstate_unlink(dpshim__dstate_t *s, int64_t i,
                                         int32_t r) {
  if (s->prev[i] >= 0) s->next[s->prev[i]] = s->next[i];
  else s->head[r] = s->next[i];
  if (s->next[i] >= 0) s->prev[s->next[i]] = s->prev[i];
}

static inline void dpshim__dstate_take(dpshim__dstate_t *s, int64_t i) {
  const dpshim__ctx_t *ctx = s->ctx;
  int32_t r = ctx->dest[i];
  dpshim__dstate_unlink(s, i, r);
  s->version[r]++;
  s->moved_price -= dpshim__move_price(ctx, i, r);
  s->load[r] -= ctx->cost[i];
  s->tokens[r] -= ctx->samples[i].len;
  s->rows[r] -= ctx->samples[i].rows;
  s->token_key[r] = (double)s->tokens[r];
  s->count[r]--;
  ctx->dest[i] = -1;
}

static inline void dpshim__dstate_give(dpshim__dstate_t *s, int64_t i,
                                       int32_t r) {
  const dpshim__ctx_t *ctx = s->ctx;
  dpshim__dstate_link_front(s, i, r);
  s->version[r]++;
  s->moved_price += dpshim__move_price(ctx, i, r);
  s->load[r] += ctx->cost[i];
  s->tokens[r] += ctx->samples[i].len;
  s->rows[r] += ctx->samples[i].rows;
  s->token_key[r] = (double)s->tokens[r];
  s->count[r]++;
  ctx->dest[i] = r;
}

static inline void dpshim__dstate_relocate(dpshim__dstate_t *s, int64_t i,
                                           int32_t to) {
  dpshim__dstate_take(s, i);
  dpshim__dstate_give(s, i, to);
}

/* What moving sample i to rank `to` adds to the plan's priced bytes
 * (negative: saves). */
static inline int64_t dpshim__dstate_extra_price(const dpshim__dstate_t *s,
                                                 int64_t i, int32_t to) {
  return dpshim__move_price(s->ctx, i, to) -
         dpshim__move_price(s->ctx, i, s->ctx->dest[i]);
}

/* Whether rank r may take `add` more rows (or give some up). */
static inline int dpshim__dstate_rows_fit(const dpshim__dstate_t *s, int32_t r,
                                          int64_t add) {
  return dpshim__rows_fit(s->ctx, r, s->rows[r], add);
}

/* Whether `rows` more rows may go from -> to (negative: to -> from). */
static inline int dpshim__dstate_rows_fit_both(const dpshim__dstate_t *s,
                                               int32_t from, int32_t to,
                                               int64_t rows) {
  return dpshim__dstate_rows_fit(s, to, rows) &&
         dpshim__dstate_rows_fit(s, from, -rows);
}

/* Whether rank r has load room within U and token room for sample i. */
static inline int dpshim__dstate_load_room_for(const dpshim__dstate_t *s,
                                               int32_t r, int64_t i) {
  return s->load[r] + s->ctx->cost[i] <= s->target &&
         s->tokens[r] + s->ctx->samples[i].len <= s->ctx->cap;
}

/* ... and rows room. */
static inline int dpshim__dstate_room_for(const dpshim__dstate_t *s, int32_t r,
                                          int64_t i) {
  return dpshim__dstate_load_room_for(s, r, i) &&
         dpshim__dstate_rows_fit(s, r, s->ctx->samples[i].rows);
}

static inline int dpshim__dstate_within_cap(const dpshim__dstate_t *s,
                                            int32_t r, int64_t len) {
  return s->tokens[r] + len <= s->ctx->cap;
}

/* The repair may add traffic only while the plan moves less than this share
 * of all bytes (priced): the original moves ~1 - 1/P of them, and the last
 * fraction of a percent of balance is not worth a quarter of the batch. */
#define DPSHIM__REPAIR_BYTES 0.25

static inline int dpshim__dstate_affordable(const dpshim__dstate_t *s,
                                            int64_t price) {
  return price <= 0 || (double)(s->moved_price + price) <=
                           DPSHIM__REPAIR_BYTES * (double)s->total_price;
}

/* ---- within the rows caps (default_rows.c) ----------------------------- */

/* The sample with rows r gives up to lower its rows: the most rows per cost
 * (a sample without cost first); -1 if r holds no rows. */
int64_t dpshim__dstate_surplus_rows(const dpshim__dstate_t *s, int32_t r);
/* The least-loaded rank but `from` with room for i in both caps, or -1. */
int32_t dpshim__dstate_least_loaded_with_room(const dpshim__dstate_t *s,
                                              int32_t from, int64_t i);
int dpshim__dstate_over_rows_cap(const dpshim__dstate_t *s, int32_t r);
/* While r is above its rows cap, it hands samples with rows to the least
 * loaded ranks with room for them in both caps (as long as one has). */
void dpshim__dstate_fit_rows(dpshim__dstate_t *s, int32_t r);

/* default's fallback under rows caps, from the origins: while the busiest
 * rank is at `before` or above, the move or swap of one of its samples with
 * any rank that lowers the larger of the two loads most within both caps,
 * whatever traffic it adds; at most one step per rank. */
void dpshim__default_descend(dpshim__dstate_t *s, double before);

/* The state of ctx->dest (every sample placed), aiming at the cap bound. */
int dpshim__dstate_init(dpshim__dstate_t *s, const dpshim__ctx_t *ctx);
int dpshim__default_place(dpshim__dstate_t *s);
int dpshim__default_repair(dpshim__dstate_t *s);

#endif
