/* Moves that bring ranks within their rows caps, shared by `default` (after
 * placing, where a shed sample sent home can find its rows room taken) and
 * `kk-cap` (after kk, which ignores the caps); and default's fallback under
 * rows caps, a descent by single moves and swaps from the origins. */
#include <math.h>

#include "default_state.h"

int64_t dpshim__dstate_surplus_rows(const dpshim__dstate_t *s, int32_t r) {
  const dpshim__ctx_t *ctx = s->ctx;
  int64_t best = -1;
  for (int64_t i = s->head[r]; i >= 0; i = s->next[i]) {
    if (ctx->samples[i].rows == 0) continue;
    if (best < 0 || (double)ctx->samples[i].rows * ctx->cost[best] >
                        (double)ctx->samples[best].rows * ctx->cost[i])
      best = i;
  }
  return best;
}

int32_t dpshim__dstate_least_loaded_with_room(const dpshim__dstate_t *s,
                                              int32_t from, int64_t i) {
  int32_t best = -1;
  for (int32_t r = 0; r < s->ctx->ranks; r++)
    if (r != from && (best < 0 || s->load[r] < s->load[best]) &&
        dpshim__dstate_within_cap(s, r, s->ctx->samples[i].len) &&
        dpshim__dstate_rows_fit(s, r, s->ctx->samples[i].rows))
      best = r;
  return best;
}

int dpshim__dstate_over_rows_cap(const dpshim__dstate_t *s, int32_t r) {
  return s->ctx->rows_cap && s->rows[r] > s->ctx->rows_cap[r];
}

/* One sample at a time, the most rows per cost first: it lowers the rows
 * most for the least load it moves. */
void dpshim__dstate_fit_rows(dpshim__dstate_t *s, int32_t r) {
  while (s->count[r] > 1 && dpshim__dstate_over_rows_cap(s, r)) {
    int64_t i = dpshim__dstate_surplus_rows(s, r);
    int32_t to = dpshim__dstate_least_loaded_with_room(s, r, i);
    if (to < 0) return;
    dpshim__dstate_relocate(s, i, to);
  }
}

/* ---- the fallback: one step at a time from the origins ------------------ */

typedef struct step {
  int64_t give, back; /* give: hi -> to; back: to -> hi, or -1 for a move */
  int32_t to;
  double peak;   /* the larger of the two loads after it */
  int64_t price; /* priced bytes it adds */
} step_t;

/* Rates exchanging i (on hi) for j (on to, or -1) within both caps; keeps
 * it if it lowers the peak more than *best (on ties: less traffic). */
static void consider_step(const dpshim__dstate_t *s, int32_t hi, int32_t to,
                          int64_t i, int64_t j, step_t *best) {
  const dpshim__ctx_t *ctx = s->ctx;
  double delta = ctx->cost[i] - (j >= 0 ? ctx->cost[j] : 0);
  int64_t dlen = ctx->samples[i].len - (j >= 0 ? ctx->samples[j].len : 0);
  int64_t drows = ctx->samples[i].rows - (j >= 0 ? ctx->samples[j].rows : 0);
  if (delta <= 0) return;
  if (s->tokens[to] + dlen > ctx->cap || s->tokens[hi] - dlen > ctx->cap) return;
  if (!dpshim__dstate_rows_fit_both(s, hi, to, drows)) return;
  double peak = fmax(s->load[hi] - delta, s->load[to] + delta);
  int64_t price = dpshim__dstate_extra_price(s, i, to) +
                  (j >= 0 ? dpshim__dstate_extra_price(s, j, hi) : 0);
  if (peak >= s->load[hi] || peak > best->peak ||
      (peak == best->peak && price >= best->price))
    return;
  *best = (step_t){i, j, to, peak, price};
}

/* Every move and swap of one of hi's samples with any rank: O(hi's samples
 * x all samples), affordable as the fallback is rare. */
static step_t best_step(const dpshim__dstate_t *s, int32_t hi) {
  step_t best = {-1, -1, -1, INFINITY, 0};
  for (int64_t i = s->head[hi]; i >= 0; i = s->next[i])
    for (int32_t to = 0; to < s->ctx->ranks; to++) {
      if (to == hi) continue;
      if (s->count[hi] > 1) consider_step(s, hi, to, i, -1, &best);
      for (int64_t j = s->head[to]; j >= 0; j = s->next[j])
        consider_step(s, hi, to, i, j, &best);
    }
  return best;
}

static int32_t busiest(const dpshim__dstate_t *s) {
  int32_t hi = 0;
  for (int32_t r = 1; r < s->ctx->ranks; r++)
    if (s->load[r] > s->load[hi]) hi = r;
  return hi;
}

void dpshim__default_descend(dpshim__dstate_t *s, double before) {
  for (int32_t round = 0; round < s->ctx->ranks; round++) {
    int32_t hi = busiest(s);
    if (s->load[hi] < before) return;
    step_t x = best_step(s, hi);
    if (x.give < 0) return;
    dpshim__dstate_relocate(s, x.give, x.to);
    if (x.back >= 0) dpshim__dstate_relocate(s, x.back, hi);
  }
}
