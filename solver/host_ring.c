/* The ranks of each host in a ring, for the steps that look for a rank on
 * a sample's home host. */
#include <stdlib.h>

#include "internal.h"

typedef struct host_rank {
  int32_t host, rank;
} host_rank_t;

static int by_host(const void *a, const void *b) {
  const host_rank_t *x = a, *y = b;
  if (x->host != y->host) return x->host < y->host ? -1 : 1;
  return (x->rank > y->rank) - (x->rank < y->rank);
}

int dpshim__host_ring(const dpshim__ctx_t *ctx, int32_t **ring) {
  *ring = NULL;
  if (!ctx->host) return 0;
  host_rank_t *hr = DPSHIM__ALLOC(ctx, host_rank_t, ctx->ranks);
  int32_t *next = DPSHIM__ALLOC(ctx, int32_t, ctx->ranks);
  if (!hr || !next) return DPSHIM_ENOMEM;
  for (int32_t r = 0; r < ctx->ranks; r++) hr[r] = (host_rank_t){ctx->host[r], r};
  qsort(hr, (size_t)ctx->ranks, sizeof *hr, by_host);
  for (int32_t k = 0, first = 0; k < ctx->ranks; k++) {
    int last = k + 1 == ctx->ranks || hr[k + 1].host != hr[k].host;
    next[hr[k].rank] = last ? hr[first].rank : hr[k + 1].rank;
    if (last) first = k + 1;
  }
  *ring = next;
  return 0;
}
