/* Tournament tree of ranks by load; see rank_tree.h. Padding leaves hold -1
 * and lose every match. */
#include "rank_tree.h"

static int32_t winner(const dpshim__rank_tree_t *t, int32_t a, int32_t b,
                      int want_max) {
  if (a < 0) return b;
  if (b < 0) return a;
  double la = t->load[a], lb = t->load[b];
  if (la == lb) return a < b ? a : b;
  return (want_max ? la > lb : la < lb) ? a : b;
}

static void replay(dpshim__rank_tree_t *t, int32_t node) {
  t->hi[node] = winner(t, t->hi[2 * node], t->hi[2 * node + 1], 1);
  t->lo[node] = winner(t, t->lo[2 * node], t->lo[2 * node + 1], 0);
}

int dpshim__rank_tree_init(dpshim__rank_tree_t *t, const dpshim__ctx_t *ctx,
                           const double *load) {
  int32_t leaves = 1;
  while (leaves < ctx->ranks) leaves *= 2;
  *t = (dpshim__rank_tree_t){leaves, ctx->ranks,
                             DPSHIM__ALLOC(ctx, int32_t, 2 * leaves),
                             DPSHIM__ALLOC(ctx, int32_t, 2 * leaves), load};
  if (!t->hi || !t->lo) return DPSHIM_ENOMEM;
  for (int32_t k = 0; k < leaves; k++)
    t->hi[leaves + k] = t->lo[leaves + k] = k < ctx->ranks ? k : -1;
  for (int32_t node = leaves - 1; node >= 1; node--) replay(t, node);
  return 0;
}

void dpshim__rank_tree_update(dpshim__rank_tree_t *t, int32_t r) {
  for (int32_t node = (t->leaves + r) / 2; node >= 1; node /= 2) replay(t, node);
}
