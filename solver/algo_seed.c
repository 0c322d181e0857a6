/* `seed`: the original LoongForge solver, reproduced as published.
 *   skip if one sample costs more than the mean rank load;
 *   LPT: samples by cost descending, each to the least-loaded rank whose token
 *        total stays within the cap (ranks tried least to most loaded), else
 *        to the least-loaded rank anyway;
 *   up to 20 refinement rounds between the most and least loaded ranks: stop
 *        when (max-min)/min < 5%; Move (costliest sample of max to min) or Swap
 *        (it with the cheapest of min), whichever leaves the smaller gap
 *        between the two (tie: Move), within the cap; stop when neither helps.
 * It never compares the plan with the original assignment. One addition: a
 * rank left empty (possible with history) gets a sample back, since no rank
 * may train on an empty batch. With rows caps, "within the cap" means within
 * both, and the fallback is the least-loaded rank with rows room: a plan
 * that still exceeds a rows cap is not applied (plan.c skips it), since an
 * overflowing buffer is no option. Without rows caps all is as published. */
#include <math.h>

#include "internal.h"
#include "rank_heap.h"

#define SEED_ROUNDS 20
#define SEED_TOLERANCE 0.05

typedef struct seed_state {
  const dpshim__ctx_t *ctx;
  double *load;
  int64_t *tokens;
  int64_t *rows;
  int64_t *count;
  int64_t *head; /* [ranks] per-rank sample lists, built after LPT for */
  int64_t *next; /* [nsamples] the refinement rounds */
} seed_state_t;

static void place(seed_state_t *s, int64_t i, int32_t r) {
  const dpshim__ctx_t *ctx = s->ctx;
  int32_t from = ctx->dest[i];
  if (from >= 0) {
    s->load[from] -= ctx->cost[i];
    s->tokens[from] -= ctx->samples[i].len;
    s->rows[from] -= ctx->samples[i].rows;
    s->count[from]--;
  }
  ctx->dest[i] = r;
  s->load[r] += ctx->cost[i];
  s->tokens[r] += ctx->samples[i].len;
  s->rows[r] += ctx->samples[i].rows;
  s->count[r]++;
}

/* Whether rank r takes sample `add` in exchange for `remove` (-1: none)
 * within the token cap and its rows cap. */
static int rows_fit(const seed_state_t *s, int32_t r, int64_t add,
                    int64_t remove) {
  const dpshim_sample_t *smp = s->ctx->samples;
  return dpshim__rows_fit(s->ctx, r, s->rows[r],
                          smp[add].rows - (remove >= 0 ? smp[remove].rows : 0));
}

static int fits(const seed_state_t *s, int32_t r, int64_t add, int64_t remove) {
  const dpshim_sample_t *smp = s->ctx->samples;
  int64_t tokens = s->tokens[r] - (remove >= 0 ? smp[remove].len : 0);
  return tokens + smp[add].len <= s->ctx->cap && rows_fit(s, r, add, remove);
}

static int lpt(seed_state_t *s, const int64_t *order) {
  const dpshim__ctx_t *ctx = s->ctx;
  int32_t *stash = DPSHIM__ALLOC(ctx, int32_t, ctx->ranks);
  dpshim__rank_heap_t heap = {DPSHIM__ALLOC(ctx, dpshim__rank_entry_t, ctx->ranks), 0,
                              s->load};
  if (!stash || !heap.e) return DPSHIM_ENOMEM;
  for (int32_t r = 0; r < ctx->ranks; r++) dpshim__rank_heap_push(&heap, r);
  for (int64_t k = 0; k < ctx->nsamples; k++) {
    int64_t i = order[k];
    int32_t popped = 0, chosen = -1, fallback = -1;
    while (heap.size > 0 && chosen < 0) {
      int32_t r = stash[popped++] = dpshim__rank_heap_pop(&heap);
      if (fallback < 0 && rows_fit(s, r, i, -1)) fallback = r;
      if (fits(s, r, i, -1)) chosen = r;
    }
    place(s, i, chosen >= 0 ? chosen : fallback >= 0 ? fallback : stash[0]);
    for (int32_t p = 0; p < popped; p++) dpshim__rank_heap_push(&heap, stash[p]);
  }
  return 0;
}

static int build_lists(seed_state_t *s) {
  const dpshim__ctx_t *ctx = s->ctx;
  s->head = DPSHIM__ALLOC(ctx, int64_t, ctx->ranks);
  s->next = DPSHIM__ALLOC(ctx, int64_t, ctx->nsamples);
  if (!s->head || !s->next) return DPSHIM_ENOMEM;
  for (int32_t r = 0; r < ctx->ranks; r++) s->head[r] = -1;
  for (int64_t i = ctx->nsamples - 1; i >= 0; i--) {
    s->next[i] = s->head[ctx->dest[i]];
    s->head[ctx->dest[i]] = i;
  }
  return 0;
}

/* Moves sample i to rank r during refinement, keeping the lists. */
static void relocate(seed_state_t *s, int64_t i, int32_t r) {
  int64_t *link = &s->head[s->ctx->dest[i]];
  while (*link != i) link = &s->next[*link];
  *link = s->next[i];
  s->next[i] = s->head[r];
  s->head[r] = i;
  place(s, i, r);
}

/* The costliest (most = 1) or cheapest (most = 0) sample on rank r; ties go
 * to the lowest index. -1 if the rank is empty. */
static int64_t extreme_sample(const seed_state_t *s, int32_t r, int most) {
  const double *cost = s->ctx->cost;
  int64_t best = -1;
  for (int64_t i = s->head[r]; i >= 0; i = s->next[i]) {
    int better = best < 0 || (most ? cost[i] > cost[best] : cost[i] < cost[best]) ||
                 (cost[i] == cost[best] && i < best);
    if (better) best = i;
  }
  return best;
}

static void extreme_ranks(const seed_state_t *s, int32_t *hi, int32_t *lo) {
  *hi = *lo = 0;
  for (int32_t r = 1; r < s->ctx->ranks; r++) {
    if (s->load[r] > s->load[*hi]) *hi = r;
    if (s->load[r] < s->load[*lo]) *lo = r;
  }
}

/* One Move-or-Swap round; returns 0 when refinement should stop. */
static int refine_round(seed_state_t *s) {
  const dpshim__ctx_t *ctx = s->ctx;
  int32_t hi, lo;
  extreme_ranks(s, &hi, &lo);
  double gap = s->load[hi] - s->load[lo];
  if (hi == lo || gap < SEED_TOLERANCE * s->load[lo]) return 0;
  int64_t i = extreme_sample(s, hi, 1), j = extreme_sample(s, lo, 0);
  if (i < 0) return 0; /* the busiest rank is busy with history alone */
  double ci = ctx->cost[i], cj = j >= 0 ? ctx->cost[j] : 0;
  int move_ok = s->count[hi] > 1 && fits(s, lo, i, -1);
  int swap_ok = j >= 0 && fits(s, lo, i, j) && fits(s, hi, j, i);
  double move_gap = fabs((s->load[hi] - ci) - (s->load[lo] + ci));
  double swap_gap = fabs((s->load[hi] - ci + cj) - (s->load[lo] - cj + ci));
  if (move_ok && move_gap < gap && (!swap_ok || move_gap <= swap_gap)) {
    relocate(s, i, lo);
  } else if (swap_ok && swap_gap < gap) {
    relocate(s, i, lo);
    relocate(s, j, hi);
  } else {
    return 0;
  }
  return 1;
}

static int dominant_sample(const dpshim__ctx_t *ctx) {
  double total = 0, max_cost = 0;
  for (int32_t r = 0; r < ctx->ranks; r++) total += ctx->load0[r];
  for (int64_t i = 0; i < ctx->nsamples; i++)
    max_cost = fmax(max_cost, ctx->cost[i]);
  return max_cost > total / ctx->ranks;
}

int dpshim__algo_seed(const dpshim__ctx_t *ctx) {
  if (dominant_sample(ctx)) return DPSHIM_SKIP_DOMINANT;
  seed_state_t s = {.ctx = ctx,
                    .load = DPSHIM__ALLOC(ctx, double, ctx->ranks),
                    .tokens = DPSHIM__ALLOC(ctx, int64_t, ctx->ranks),
                    .rows = DPSHIM__ALLOC(ctx, int64_t, ctx->ranks),
                    .count = DPSHIM__ALLOC(ctx, int64_t, ctx->ranks)};
  if (!s.load || !s.tokens || !s.rows || !s.count) return DPSHIM_ENOMEM;
  for (int32_t r = 0; r < ctx->ranks; r++) {
    s.load[r] = ctx->history[r];
    s.tokens[r] = s.rows[r] = s.count[r] = 0;
  }
  for (int64_t i = 0; i < ctx->nsamples; i++) ctx->dest[i] = -1;
  int rc = lpt(&s, ctx->order);
  if (rc == 0) rc = build_lists(&s);
  for (int round = 0; rc == 0 && round < SEED_ROUNDS; round++)
    if (!refine_round(&s)) break;
  if (rc == 0) rc = dpshim__fill_empty_ranks(ctx);
  return rc < 0 ? rc : DPSHIM_SKIP_NONE;
}
