/* Tournament tree of ranks by load; see rank_tree.h. */
#include "rank_tree.h"

static int beats(dpshim__rank_slot_t a, dpshim__rank_slot_t b, int want_max) {
  if (b.rank < 0) return 1;
  if (a.rank < 0) return 0;
  if (a.key == b.key) return a.rank < b.rank;
  return want_max ? a.key > b.key : a.key < b.key;
}

static void replay(dpshim__rank_slot_t *side, int32_t node, int want_max) {
  dpshim__rank_slot_t l = side[2 * node], r = side[2 * node + 1];
  side[node] = beats(l, r, want_max) ? l : r;
}

/* Replays the matches above leaf, the winner so far kept at hand: each
 * level reads only the other side's slot. The winner is a rank, so the two
 * differ and which is left does not matter (a match is a strict order, and
 * padding loses either way). Where the other side won before and wins
 * again, the match stands as it was, and so does every match above it. */
static inline void climb(dpshim__rank_slot_t *side, int32_t leaf,
                         int want_max) {
  dpshim__rank_slot_t won = side[leaf];
  for (int32_t node = leaf; node > 1; node /= 2) {
    dpshim__rank_slot_t other = side[node ^ 1];
    /* beats(other, won): won is a rank, never padding. */
    if (other.rank >= 0 &&
        (other.key == won.key ? other.rank < won.rank
                              : (want_max ? other.key > won.key
                                          : other.key < won.key))) {
      if (side[node / 2].rank == other.rank) return;
      won = other;
    }
    side[node / 2] = won;
  }
}

static void replay_all(dpshim__rank_tree_t *t, int32_t node) {
  if (t->hi) replay(t->hi, node, 1);
  replay(t->lo, node, 0);
}

int dpshim__rank_tree_init(dpshim__rank_tree_t *t, const dpshim__ctx_t *ctx,
                           const double *load, int with_max) {
  int32_t leaves = 1;
  while (leaves < ctx->ranks) leaves *= 2;
  *t = (dpshim__rank_tree_t){.leaves = leaves, .load = load};
  t->lo = DPSHIM__ALLOC(ctx, dpshim__rank_slot_t, 2 * leaves);
  if (with_max) t->hi = DPSHIM__ALLOC(ctx, dpshim__rank_slot_t, 2 * leaves);
  if (!t->lo || (with_max && !t->hi)) return DPSHIM_ENOMEM;
  for (int32_t k = 0; k < leaves; k++) {
    dpshim__rank_slot_t leaf = {k < ctx->ranks ? load[k] : 0,
                                k < ctx->ranks ? k : -1};
    t->lo[leaves + k] = leaf;
    if (t->hi) t->hi[leaves + k] = leaf;
  }
  for (int32_t node = leaves - 1; node >= 1; node--) replay_all(t, node);
  return 0;
}

void dpshim__rank_tree_update(dpshim__rank_tree_t *t, int32_t r) {
  int32_t leaf = t->leaves + r;
  t->lo[leaf].key = t->load[r];
  climb(t->lo, leaf, 0);
  if (t->hi) {
    t->hi[leaf].key = t->load[r];
    climb(t->hi, leaf, 1);
  }
}

void dpshim__rank_tree_hide(dpshim__rank_tree_t *t, int32_t r,
                            dpshim__rank_tree_saved_t *saved) {
  int32_t leaf = t->leaves + r, k = 0;
  saved->leaf = leaf;
  for (int32_t node = leaf; node >= 1; node /= 2) saved->path[k++] = t->lo[node];
  t->lo[leaf].key = INFINITY;
  climb(t->lo, leaf, 0);
}

void dpshim__rank_tree_restore(dpshim__rank_tree_t *t,
                               const dpshim__rank_tree_saved_t *saved) {
  int32_t k = 0;
  for (int32_t node = saved->leaf; node >= 1; node /= 2) t->lo[node] = saved->path[k++];
}
