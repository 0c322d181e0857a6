/* A tournament tree over ranks that answers "most loaded" and "least
 * loaded" in O(1) and takes a load change in O(log ranks). Ties go to the
 * lowest rank, so every rank sees the same answer. */
#ifndef DPSHIM_SOLVER_RANK_TREE_H
#define DPSHIM_SOLVER_RANK_TREE_H

#include <stdint.h>

#include "internal.h"

typedef struct dpshim__rank_tree {
  int32_t leaves;     /* power of two >= ranks */
  int32_t ranks;
  int32_t *hi, *lo;   /* [2 * leaves] winners; node 1 is the root; hi is
                         NULL when only the minimum is wanted */
  double *hi_key, *lo_key; /* [2 * leaves] the winners' loads */
  const double *load; /* [ranks] */
} dpshim__rank_tree_t;

DPSHIM__HIDDEN int dpshim__rank_tree_init(dpshim__rank_tree_t *t,
                                          const dpshim__ctx_t *ctx,
                                          const double *load, int with_max);
/* Call after load[r] changed. */
DPSHIM__HIDDEN void dpshim__rank_tree_update(dpshim__rank_tree_t *t, int32_t r);

static inline int32_t dpshim__rank_tree_max(const dpshim__rank_tree_t *t) {
  return t->hi[1];
}
static inline int32_t dpshim__rank_tree_min(const dpshim__rank_tree_t *t) {
  return t->lo[1];
}

#endif
