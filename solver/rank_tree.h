/* A tournament tree over ranks that answers "most loaded" and "least
 * loaded" in O(1) and takes a load change in O(log ranks). Ties go to the
 * lowest rank, so every rank sees the same answer. */
#ifndef DPSHIM_SOLVER_RANK_TREE_H
#define DPSHIM_SOLVER_RANK_TREE_H

#include <stdint.h>

#include "internal.h"

/* A match's winner, with its load beside it so a replay reads only the
 * tree. Padding leaves hold rank -1 and lose every match. */
typedef struct dpshim__rank_slot {
  double key;
  int32_t rank;
} dpshim__rank_slot_t;

typedef struct dpshim__rank_tree {
  int32_t leaves;          /* power of two >= ranks */
  dpshim__rank_slot_t *hi; /* [2 * leaves]; node 1 is the root; NULL when */
  dpshim__rank_slot_t *lo; /* only the minimum is wanted */
  const double *load;      /* [ranks] */
} dpshim__rank_tree_t;

int dpshim__rank_tree_init(dpshim__rank_tree_t *t, const dpshim__ctx_t *ctx,
                           const double *load, int with_max);
/* Call after load[r] changed. */
void dpshim__rank_tree_update(dpshim__rank_tree_t *t, int32_t r);

/* A rank hidden from the tree (its key +inf) and brought back as it was:
 * the matches on its path saved, then restored, in the reverse order of
 * hiding, instead of replayed twice. */
typedef struct dpshim__rank_tree_saved {
  int32_t leaf;
  dpshim__rank_slot_t path[32]; /* the leaf and its ancestors, up to the root */
} dpshim__rank_tree_saved_t;
void dpshim__rank_tree_hide(dpshim__rank_tree_t *t, int32_t r,
                            dpshim__rank_tree_saved_t *saved);
void dpshim__rank_tree_restore(dpshim__rank_tree_t *t,
                               const dpshim__rank_tree_saved_t *saved);

static inline int32_t dpshim__rank_tree_max(const dpshim__rank_tree_t *t) {
  return t->hi[1].rank;
}
static inline int32_t dpshim__rank_tree_min(const dpshim__rank_tree_t *t) {
  return t->lo[1].rank;
}
static inline double dpshim__rank_tree_min_key(const dpshim__rank_tree_t *t) {
  return t->lo[1].key;
}

#endif
