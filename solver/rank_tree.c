/* Tournament tree of ranks by load; see rank_tree.h. Each node keeps its
 * winner's key beside the rank, so a replay reads only the tree. Padding
 * leaves hold rank -1 and lose every match. */
#include "rank_tree.h"

static int beats(double ka, int32_t a, double kb, int32_t b, int want_max) {
  if (b < 0) return 1;
  if (a < 0) return 0;
  if (ka == kb) return a < b;
  return want_max ? ka > kb : ka < kb;
}

static void replay_side(int32_t *rank, double *key, int32_t node, int want_max) {
  int32_t l = 2 * node, r = l + 1;
  int left = beats(key[l], rank[l], key[r], rank[r], want_max);
  rank[node] = left ? rank[l] : rank[r];
  key[node] = left ? key[l] : key[r];
}

static void replay(dpshim__rank_tree_t *t, int32_t node) {
  if (t->hi) replay_side(t->hi, t->hi_key, node, 1);
  replay_side(t->lo, t->lo_key, node, 0);
}

static void set_leaf(dpshim__rank_tree_t *t, int32_t r) {
  int32_t leaf = t->leaves + r;
  if (t->hi) t->hi_key[leaf] = t->load[r];
  t->lo_key[leaf] = t->load[r];
}

int dpshim__rank_tree_init(dpshim__rank_tree_t *t, const dpshim__ctx_t *ctx,
                           const double *load, int with_max) {
  int32_t leaves = 1;
  while (leaves < ctx->ranks) leaves *= 2;
  *t = (dpshim__rank_tree_t){.leaves = leaves, .ranks = ctx->ranks, .load = load};
  t->lo = DPSHIM__ALLOC(ctx, int32_t, 2 * leaves);
  t->lo_key = DPSHIM__ALLOC(ctx, double, 2 * leaves);
  if (with_max) {
    t->hi = DPSHIM__ALLOC(ctx, int32_t, 2 * leaves);
    t->hi_key = DPSHIM__ALLOC(ctx, double, 2 * leaves);
    if (!t->hi || !t->hi_key) return DPSHIM_ENOMEM;
  }
  if (!t->lo || !t->lo_key) return DPSHIM_ENOMEM;
  for (int32_t k = 0; k < leaves; k++) {
    int32_t rank = k < ctx->ranks ? k : -1;
    if (t->hi) t->hi[leaves + k] = rank;
    t->lo[leaves + k] = rank;
    if (rank >= 0) set_leaf(t, rank);
  }
  for (int32_t node = leaves - 1; node >= 1; node--) replay(t, node);
  return 0;
}

void dpshim__rank_tree_update(dpshim__rank_tree_t *t, int32_t r) {
  set_leaf(t, r);
  for (int32_t node = (t->leaves + r) / 2; node >= 1; node /= 2) replay(t, node);
}
