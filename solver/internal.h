/* Solver internals shared by plan.c and the algorithm files: the solve
 * context, the scratch arena, sorting and the load metrics. Not installed. */
#ifndef DPSHIM_SOLVER_INTERNAL_H
#define DPSHIM_SOLVER_INTERNAL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "dpshim/solver.h"

#define DPSHIM__NO_CAP INT64_MAX

/* Bump allocator over one block that grows to the largest solve seen. */
typedef struct dpshim__arena {
  char *base;
  size_t size, used;
  struct dpshim__chunk *overflow; /* this solve's allocations past `size` */
  size_t overflow_bytes;
  int64_t mallocs; /* heap allocations since the last reset */
} dpshim__arena_t;

/* Everything an algorithm reads, and the plan it writes. */
typedef struct dpshim__ctx {
  int32_t ranks;
  int64_t nsamples;
  const dpshim_sample_t *samples;
  const double *cost;    /* [nsamples] */
  const double *history; /* [ranks], zeros when the caller gave none */
  const double *load0;   /* [ranks] loads before */
  dpshim_cost_model_t model;
  double work;           /* the samples' total cost */
  int64_t tokens;        /* the samples' total length */
  /* [nsamples] how big each sample is, for every comparison that stands
   * for cost: its length when cost is a function of length (no vision
   * terms), else its rank by (cost, length), equal for equal pairs. */
  const int64_t *size;
  int64_t longest;       /* the greatest length */
  int vision;            /* some sample's cost has a vision part */
  const int64_t *order;  /* [nsamples] by size, so cost, descending */
  int64_t cap;           /* per-rank token cap, DPSHIM__NO_CAP for none */
  const int64_t *rows_cap; /* [ranks] per-rank rows cap, NULL for none */
  const int32_t *host;   /* [ranks] each rank's host, NULL for one */
  const int32_t *host_ring; /* [ranks] dpshim__host_ring's, NULL for one */
  double inter_host_cost; /* a byte across hosts, in bytes within one */
  const int64_t *rows0;  /* [ranks] rows held before */
  /* [nsamples] each sample's origin and length, apart from the samples: a
   * tenth of their bytes, for the passes that visit samples out of index
   * order (lengths are validated to fit 32 bits). */
  const int32_t *origin, *len;
  double threshold;
  double lower_bound;
  double lower_bound_cap; /* for plans within both caps; >= lower_bound */
  int32_t *dest;         /* [nsamples], holds origin on entry */
  dpshim__arena_t *arena;
} dpshim__ctx_t;

/* An algorithm fills ctx->dest (or leaves it) and returns the decision:
 * DPSHIM_SKIP_NONE to apply, another reason to skip; negative on ENOMEM. */
typedef int (*dpshim__algo_fn)(const dpshim__ctx_t *ctx);

int dpshim__algo_default(const dpshim__ctx_t *ctx);
int dpshim__algo_seed(const dpshim__ctx_t *ctx);
int dpshim__algo_kk(const dpshim__ctx_t *ctx);
int dpshim__algo_kk_cap(const dpshim__ctx_t *ctx);
/* `default`'s second start (seed's) and its send-home pass, on the plan in
 * ctx->dest whose decision is `reason`: returns the decision after them. */
int dpshim__default_finish(const dpshim__ctx_t *ctx, int reason);
/* `default`'s shed, place and repair from the origins, aiming at `target`
 * (not just above the bound): the plan in ctx->dest, not yet judged. */
int dpshim__default_aim(const dpshim__ctx_t *ctx, double target);
/* `default`'s exact search at small scale (where _applies) from the plan in
 * ctx->dest, whose maximum load is max: a lower maximum, down to _stop, or
 * (bytes_mode) fewer bytes with every load at most max, left in ctx->dest.
 * Returns 1 when it proved the maximum left optimal, 0, or ENOMEM. */
int dpshim__default_search_applies(const dpshim__ctx_t *ctx);
double dpshim__default_search_stop(const dpshim__ctx_t *ctx);
int dpshim__default_search(const dpshim__ctx_t *ctx, int bytes_mode,
                           double max);
/* The search's neighbourhoods alone (the busiest rank with one or two
 * others), from the plan in ctx->dest, until its maximum is at most stop
 * or nothing improves: most samples stay where that plan put them. */
int dpshim__default_search_down(const dpshim__ctx_t *ctx, double stop);

void *dpshim__arena_alloc(dpshim__arena_t *a, size_t bytes);
int dpshim__arena_reset(dpshim__arena_t *a);
void dpshim__arena_free(dpshim__arena_t *a);
#define DPSHIM__ALLOC(ctx, type, n) \
  ((type *)dpshim__arena_alloc((ctx)->arena, sizeof(type) * (size_t)(n)))

/* Whether some sample's cost has a vision part: then cost is no function
 * of length, and lengths cannot stand for it. */
int dpshim__vision_costs(const dpshim__ctx_t *ctx);
/* Each sample's size (see dpshim__ctx_t.size) into size[nsamples], and the
 * sample indices ordered by size descending, ties by index ascending, into
 * order[nsamples]: cost descending, as cost never falls with size. */
int dpshim__sizes(const dpshim__ctx_t *ctx, int64_t *size, int64_t *order);

/* max/mean - 1 of loads; 0 when the mean is 0. The bounds need ctx->order. */
double dpshim__imbalance(const double *load, int32_t ranks);
double dpshim__max_load(const double *load, int32_t ranks);
double dpshim__lower_bound(const dpshim__ctx_t *ctx);
/* The bound for plans within the token cap, >= from. */
double dpshim__cap_lower_bound(const dpshim__ctx_t *ctx, double from);
/* The bound for plans within the rows caps, >= from. */
double dpshim__rows_lower_bound(const dpshim__ctx_t *ctx, double from);
/* The lowest level L with sum_k max(0, L - base[k]) = work over n bases. */
double dpshim__water_level(const dpshim__ctx_t *ctx, const double *base,
                           int32_t n, double work);

/* dpshim_sample_cost(), inlined for the solve's pass over every sample:
 * the same operations in the same order, so bit for bit the same cost. */
static inline double dpshim__sample_cost(dpshim_cost_model_t m,
                                         const dpshim_sample_t *s) {
  double l = (double)s->len, cost = m.a * l * l + m.b * l + m.c;
  if (s->patches || s->patches_sq)
    cost += m.d * (double)s->patches_sq + m.e * (double)s->patches;
  return cost;
}

/* Whether rank r, holding `held` rows, may take `add` more (negative: give
 * some up): never above its cap, though a rank above it may still shed. */
static inline int dpshim__rows_fit(const dpshim__ctx_t *ctx, int32_t r,
                                   int64_t held, int64_t add) {
  return add <= 0 || !ctx->rows_cap || held + add <= ctx->rows_cap[r];
}

/* `bytes` sent across hosts, in bytes sent within one. */
static inline int64_t dpshim__across_price(const dpshim__ctx_t *ctx,
                                           int64_t bytes) {
  return (int64_t)llround((double)bytes * ctx->inter_host_cost);
}

/* What sending sample i from its origin to rank r costs, in bytes moved
 * within a host: nothing at home, inter_host_cost per byte across hosts. */
static inline int64_t dpshim__move_price(const dpshim__ctx_t *ctx, int64_t i,
                                         int32_t r) {
  const dpshim_sample_t *s = &ctx->samples[i];
  if (r == s->origin) return 0;
  if (!ctx->host || ctx->host[r] == ctx->host[s->origin]) return s->bytes;
  return dpshim__across_price(ctx, s->bytes);
}

/* load[where[i]] += cost[i] for i = 0 .. n - 1, in index order, so every
 * rank's sum rounds as it does one add at a time; a run of samples on one
 * rank is summed in a register, not through memory (each add would wait
 * for the one before to be stored). */
static inline void dpshim__sum_costs(const double *cost, const int32_t *where,
                                     int64_t n, double *load) {
  if (n <= 0) return;
  int32_t r = where[0];
  double sum = load[r];
  for (int64_t i = 0; i < n; i++) {
    if (where[i] != r) {
      load[r] = sum;
      r = where[i];
      sum = load[r];
    }
    sum += cost[i];
  }
  load[r] = sum;
}

/* Every sample back on its origin: dest[i] = samples[i].origin. */
static inline void dpshim__dest_at_origins(const dpshim__ctx_t *ctx,
                                           int32_t *dest) {
  for (int64_t i = 0; i < ctx->nsamples; i++) dest[i] = ctx->samples[i].origin;
}

/* Rows per rank when sample i sits on where[i], into rows[ranks]; returns
 * how many ranks exceed their rows cap (0 without caps). */
int32_t dpshim__rows_over_caps(const dpshim__ctx_t *ctx, const int32_t *where,
                               int64_t *rows);

/* The ranks of each host in a ring: (*ring)[r] is the next rank on r's
 * host, by rank, the last back to the first; NULL without hosts. Made
 * once a solve, into ctx->host_ring. A step
 * looking for a rank on a sample's home host asks at most
 * DPSHIM__HOST_SCAN of them, the ones after home: wide hosts (hundreds of
 * ranks) would make that a scan of the group for every sample. */
#define DPSHIM__HOST_SCAN 64
int dpshim__host_ring(const dpshim__ctx_t *ctx, int32_t **ring);

/* Gives every rank without a sample the cheapest sample of the rank that
 * holds the most (ties: lowest rank). Used by the baselines. */
int dpshim__fill_empty_ranks(const dpshim__ctx_t *ctx);

#endif
