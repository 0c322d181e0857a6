/* `kk-cap`: kk's partition, moved into the token and rows caps, then
 * repaired as `default` repairs its own plans.
 *
 * kk balances cost alone, so its subsets can exceed either cap. Each rank
 * above a cap hands samples, one at a time, to the least-loaded rank with
 * room for them in both caps: for rows the one with the most rows per cost,
 * for tokens the shortest that clears the excess, else the longest. That
 * moves little cost; default's repair then lowers the peak with moves, swaps and
 * trades that keep every rank within both caps. A plan still above a cap is
 * not applied: DPSHIM_SKIP_CAPACITY. */
#include "default_state.h"

/* The sample r gives up to lower its tokens by `excess`: the shortest that
 * clears it, else the longest. */
static int64_t surplus_tokens(const dpshim__dstate_t *s, int32_t r,
                              int64_t excess) {
  const dpshim_sample_t *smp = s->ctx->samples;
  int64_t clears = -1, longest = -1;
  for (int64_t i = s->head[r]; i >= 0; i = s->next[i]) {
    if (smp[i].len >= excess && (clears < 0 || smp[i].len < smp[clears].len))
      clears = i;
    if (longest < 0 || smp[i].len > smp[longest].len) longest = i;
  }
  return clears >= 0 ? clears : longest;
}

/* Rows first: an overflowing buffer is no option, a long pack is slow. */
static void move_into_caps(dpshim__dstate_t *s, int32_t r) {
  while (s->count[r] > 1) {
    int rows = dpshim__dstate_over_rows_cap(s, r);
    int64_t excess = rows ? s->rows[r] - s->ctx->rows_cap[r]
                          : s->tokens[r] - s->ctx->cap;
    if (excess <= 0) return;
    int64_t i = rows ? dpshim__dstate_surplus_rows(s, r)
                     : surplus_tokens(s, r, excess);
    int32_t to = dpshim__dstate_least_loaded_with_room(s, r, i);
    if (to < 0) return;
    dpshim__dstate_relocate(s, i, to);
  }
}

static int within_caps(const dpshim__dstate_t *s) {
  for (int32_t r = 0; r < s->ctx->ranks; r++)
    if (s->tokens[r] > s->ctx->cap || dpshim__dstate_over_rows_cap(s, r))
      return 0;
  return 1;
}

int dpshim__algo_kk_cap(const dpshim__ctx_t *ctx) {
  int rc = dpshim__algo_kk(ctx);
  dpshim__dstate_t s;
  if (rc >= 0) rc = dpshim__dstate_init(&s, ctx);
  if (rc < 0) return rc;
  for (int32_t r = 0; r < ctx->ranks; r++) move_into_caps(&s, r);
  if ((rc = dpshim__default_repair(&s)) < 0) return rc;
  return within_caps(&s) ? DPSHIM_SKIP_NONE : DPSHIM_SKIP_CAPACITY;
}
