/* `default`'s last steps, on the plan in ctx->dest:
 *   1. a second start: where the plan stays above its bound (no rows caps,
 *      at most 32 ranks), the original's LPT and Move/Swap is run too, and
 *      the plan with the lower maximum load kept, so that `default` is
 *      never worse than `seed` there. Which rank gets
 *      which of seed's groups is free (ranks differ only by their
 *      history): each group goes to the rank whose samples it holds most
 *      bytes of, greedily, so that most of its bytes stay. Where seed's
 *      plan wins, default's steps run again aiming at its maximum, and the
 *      search's neighbourhoods (below) take default's own plan down to it:
 *      the plan with the fewest bytes is kept;
 *   2. at small scale, the exact search (default_search.c): a lower
 *      maximum load where the plan is above its bound, even where the
 *      steps before found no gain (its groups relabelled as seed's are,
 *      where that moves fewer bytes); then the fewest bytes for any maximum
 *      counted as equally good (within 9e-4 of the optimum or the bound,
 *      never above seed's), from the plan before that search where it is
 *      as good or its neighbourhoods make it so. Where the samples as they
 *      lie are that good, no plan is applied;
 *   3. at most 32 ranks: samples alike (cost, length, rows) trade places
 *      so that each rank keeps as many of its own as it holds of their
 *      kind;
 *   4. sending home: every moved sample, costliest first, whose origin can
 *      take it back without raising the plan's maximum load (and within the
 *      caps, and leaving its rank a sample) goes home: fewer bytes, the same
 *      makespan;
 *   5. told the hosts: every moved sample still on another host than its
 *      home's goes to the least-loaded rank of its home's host that can
 *      take it so; then step 4 again;
 *   6. at most 32 ranks (default_exchange.c): a moved sample whose home
 *      is full goes home in exchange for one or two of its home's samples,
 *      sent where it was or to another rank, where that moves fewer bytes
 *      under the same maximum;
 *   7. at most 32 ranks, no rows caps (default_pairs.c): the samples of
 *      two ranks at a time (then three, at most 8 ranks) re-dealt exactly
 *      among them, where that moves fewer bytes under the maximum the
 *      steps before leave (they may lower it: never above it): steps 4
 *      and 6 move a sample or two at a time, and cannot bring a re-deal
 *      (seed's, the makespan search's) back home; where it changed the
 *      plan, steps 4 and 6 again (6 on half its budget). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "default_tally.h"

/* One group's bytes from one origin. */
typedef struct share {
  int32_t group, origin;
  int64_t bytes;
} share_t;

static int by_group_origin(const void *a, const void *b) {
  const share_t *x = a, *y = b;
  if (x->group != y->group) return x->group < y->group ? -1 : 1;
  return (x->origin > y->origin) - (x->origin < y->origin);
}

/* Most bytes first; ties by group, then origin: the same order everywhere. */
static int by_bytes_desc(const void *a, const void *b) {
  const share_t *x = a, *y = b;
  if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
  return by_group_origin(a, b);
}

/* Each sample's (group, origin) merged into shares; returns how many. */
static int64_t shares_of(const dpshim__ctx_t *ctx, share_t *sh) {
  for (int64_t i = 0; i < ctx->nsamples; i++)
    sh[i] = (share_t){ctx->dest[i], ctx->samples[i].origin,
                      ctx->samples[i].bytes};
  qsort(sh, (size_t)ctx->nsamples, sizeof *sh, by_group_origin);
  int64_t n = 0;
  for (int64_t i = 0; i < ctx->nsamples; i++) {
    if (n > 0 && sh[n - 1].group == sh[i].group &&
        sh[n - 1].origin == sh[i].origin)
      sh[n - 1].bytes += sh[i].bytes;
    else
      sh[n++] = sh[i];
  }
  return n;
}

/* The same shares as shares_of, in the same order, summed in a ranks x
 * ranks table: no sort of every sample (at tens of thousands of samples
 * the sort was most of the second start). At most SHARE_TABLE_RANKS. */
#define SHARE_TABLE_RANKS 64
static int64_t shares_by_table(const dpshim__ctx_t *ctx, share_t *sh) {
  int32_t P = ctx->ranks;
  int64_t *bytes = DPSHIM__ALLOC(ctx, int64_t, (int64_t)P * P), n = 0;
  uint8_t *seen = DPSHIM__ALLOC(ctx, uint8_t, (int64_t)P * P);
  if (!bytes || !seen) return DPSHIM_ENOMEM;
  for (int64_t k = 0; k < (int64_t)P * P; k++) bytes[k] = 0, seen[k] = 0;
  for (int64_t i = 0; i < ctx->nsamples; i++) {
    int64_t k = (int64_t)ctx->dest[i] * P + ctx->samples[i].origin;
    bytes[k] += ctx->samples[i].bytes, seen[k] = 1;
  }
  for (int64_t k = 0; k < (int64_t)P * P; k++)
    if (seen[k]) sh[n++] = (share_t){(int32_t)(k / P), (int32_t)(k % P), bytes[k]};
  return n;
}

/* Relabels the groups of ctx->dest onto ranks, most bytes kept first. */
static int relabel(const dpshim__ctx_t *ctx) {
  share_t *sh = DPSHIM__ALLOC(ctx, share_t, ctx->nsamples);
  int32_t *rank_of = DPSHIM__ALLOC(ctx, int32_t, ctx->ranks);
  uint8_t *taken = DPSHIM__ALLOC(ctx, uint8_t, ctx->ranks);
  if (!sh || !rank_of || !taken) return DPSHIM_ENOMEM;
  for (int32_t r = 0; r < ctx->ranks; r++) rank_of[r] = -1, taken[r] = 0;
  int64_t n = ctx->ranks <= SHARE_TABLE_RANKS ? shares_by_table(ctx, sh)
                                              : shares_of(ctx, sh);
  if (n < 0) return (int)n;
  qsort(sh, (size_t)n, sizeof *sh, by_bytes_desc);
  for (int64_t k = 0; k < n; k++)
    if (rank_of[sh[k].group] < 0 && !taken[sh[k].origin])
      rank_of[sh[k].group] = sh[k].origin, taken[sh[k].origin] = 1;
  int32_t free_rank = 0;
  for (int32_t g = 0; g < ctx->ranks; g++) {
    if (rank_of[g] >= 0) continue;
    while (taken[free_rank]) free_rank++;
    rank_of[g] = free_rank;
    taken[free_rank] = 1;
  }
  for (int64_t i = 0; i < ctx->nsamples; i++)
    ctx->dest[i] = rank_of[ctx->dest[i]];
  return 0;
}

static int has_history(const dpshim__ctx_t *ctx) {
  for (int32_t r = 0; r < ctx->ranks; r++)
    if (ctx->history[r] != 0) return 1;
  return 0;
}

/* seed's maximum load on this instance where its plan applies, else
 * INFINITY; leaves seed's plan in ctx->dest (relabelled onto the ranks
 * whose bytes its groups hold most of, when histories are equal). */
static int seed_plan(const dpshim__ctx_t *ctx, dpshim__tally_t *t,
                     double *max) {
  *max = INFINITY;
  int rc = dpshim__algo_seed(ctx);
  if (rc == DPSHIM_SKIP_NONE && !has_history(ctx)) rc = relabel(ctx);
  if (rc < 0) return rc;
  if (rc == DPSHIM_SKIP_NONE) {
    dpshim__tally_of(ctx, ctx->dest, t);
    if (dpshim__tally_acceptable(ctx, t))
      *max = dpshim__max_load(t->load, ctx->ranks);
  }
  return 0;
}

/* The plan in ctx->dest stays if it is acceptable, within `limit` and
 * moves fewer priced bytes than `kept`; else `kept` comes back. */
static void keep_fewer(const dpshim__ctx_t *ctx, double limit,
                       const int32_t *kept, dpshim__tally_t *t) {
  dpshim__tally_of(ctx, ctx->dest, t);
  if (!dpshim__tally_acceptable(ctx, t) ||
      dpshim__max_load(t->load, ctx->ranks) > limit ||
      dpshim__moved_price(ctx, ctx->dest) >= dpshim__moved_price(ctx, kept))
    dpshim__copy_dest(ctx, ctx->dest, kept);
}

/* seed's plan (in ctx->dest) is better: default's steps again aiming at
 * its maximum reach it with fewer bytes more often than not; the plan
 * with fewer bytes at no higher maximum is kept. */
static int aim_at_seed(const dpshim__ctx_t *ctx, double seed_max,
                       int32_t *mine, dpshim__tally_t *t) {
  dpshim__copy_dest(ctx, mine, ctx->dest);
  int rc = dpshim__default_aim(ctx, seed_max);
  if (rc < 0) return rc;
  keep_fewer(ctx, seed_max, mine, t);
  return DPSHIM_SKIP_NONE;
}

/* A plan (pre, maximum pre_max) taken down to `limit` by the exact
 * search's neighbourhoods where it is above, which move samples within a
 * few ranks at a time, replaces the plan in ctx->dest if it gets there
 * moving fewer bytes. */
static int fewer_at(const dpshim__ctx_t *ctx, double limit, const int32_t *pre,
                    double pre_max, int32_t *scratch, dpshim__tally_t *t) {
  dpshim__copy_dest(ctx, scratch, ctx->dest);
  dpshim__copy_dest(ctx, ctx->dest, pre);
  int rc = pre_max > limit ? dpshim__default_search_down(ctx, limit) : 0;
  if (rc < 0) return rc;
  keep_fewer(ctx, limit, scratch, t);
  return 0;
}

/* Step 1. Returns the decision for the plan left in ctx->dest; seed_max
 * gets seed's maximum load where seed ran. */
static int second_start(const dpshim__ctx_t *ctx, int reason,
                        dpshim__tally_t *t, double *seed_max) {
  double bound = ctx->lower_bound_cap, before = dpshim__max_load(ctx->load0,
                                                                 ctx->ranks);
  double best = before;
  if (reason == DPSHIM_SKIP_NONE) {
    dpshim__tally_of(ctx, ctx->dest, t);
    best = dpshim__max_load(t->load, ctx->ranks);
  }
  if (ctx->rows_cap || best <= bound) return reason;
  int32_t *mine = DPSHIM__ALLOC(ctx, int32_t, ctx->nsamples);
  if (!mine) return DPSHIM_ENOMEM;
  dpshim__copy_dest(ctx, mine, ctx->dest);
  int rc = seed_plan(ctx, t, seed_max);
  if (rc < 0) return rc;
  if (*seed_max >= best) {
    dpshim__copy_dest(ctx, ctx->dest, mine);
    return reason;
  }
  int32_t *own = DPSHIM__ALLOC(ctx, int32_t, ctx->nsamples);
  if (!own) return DPSHIM_ENOMEM;
  dpshim__copy_dest(ctx, own, mine);
  if ((rc = aim_at_seed(ctx, *seed_max, mine, t)) < 0) return rc;
  /* And default's own plan taken down to seed's maximum: seed's plan
   * re-deals everything. */
  rc = fewer_at(ctx, *seed_max, own, best, mine, t);
  return rc < 0 ? rc : DPSHIM_SKIP_NONE;
}

/* ---- 2. the exact search ----------------------------------------------- */

/* The makespan search re-deals samples with no regard to where they were
 * (ranks alike are one to it): without histories, its plan's groups go
 * to the ranks they keep most bytes on, where that moves fewer. */
static int relabel_if_fewer(const dpshim__ctx_t *ctx, int32_t *scratch) {
  if (has_history(ctx)) return 0;
  dpshim__copy_dest(ctx, scratch, ctx->dest);
  int rc = relabel(ctx);
  if (rc < 0) return rc;
  if (dpshim__moved_price(ctx, ctx->dest) >= dpshim__moved_price(ctx, scratch))
    dpshim__copy_dest(ctx, ctx->dest, scratch);
  return 0;
}

/* Step 2: one run of the search, kept if its plan, summed afresh, is
 * acceptable and better (makespan) or no worse (bytes): returns 1 if
 * kept, else 0. *optimal: the maximum load left is proven optimal. */
static int search_run(const dpshim__ctx_t *ctx, int bytes_mode, double *max,
                      int32_t *mine, dpshim__tally_t *t, int *optimal) {
  dpshim__copy_dest(ctx, mine, ctx->dest);
  int rc = dpshim__default_search(ctx, bytes_mode, *max);
  if (rc < 0) return rc;
  dpshim__tally_of(ctx, ctx->dest, t);
  double found = dpshim__max_load(t->load, ctx->ranks);
  int changed = memcmp(ctx->dest, mine, sizeof *mine * (size_t)ctx->nsamples);
  *optimal = rc == 1 && !changed;
  if (changed && dpshim__tally_acceptable(ctx, t) &&
      (bytes_mode ? found <= *max : found < *max)) {
    *max = found;
    *optimal = rc == 1;
    return 1;
  }
  dpshim__copy_dest(ctx, ctx->dest, mine);
  return 0;
}

/* Plans this close to the optimum count as equally good (the issue's
 * 10^-3, with a margin): the bytes run may raise the maximum load up to
 * there, from the optimum where the makespan run proved it, else from the
 * bound, never above seed's maximum. Where the samples as they lie are
 * that good already, no plan is worth its bytes. */
#define BYTES_SLACK 9e-4
#define BYTES_GAIN 1e-9 /* a plan applied lowers the maximum at least this */

/* The level every plan up to which is as good: *slack. */
static int equally_good(const dpshim__ctx_t *ctx, int optimal, double max,
                        double *seed_max, int32_t *mine, dpshim__tally_t *t,
                        double *slack) {
  if (isnan(*seed_max)) {
    dpshim__copy_dest(ctx, mine, ctx->dest);
    int rc = seed_plan(ctx, t, seed_max);
    dpshim__copy_dest(ctx, ctx->dest, mine);
    if (rc < 0) return rc;
  }
  double from = optimal ? max : ctx->lower_bound_cap;
  *slack = fmin(from * (1 + BYTES_SLACK), *seed_max);
  return 0;
}

/* Step 2. seed_max: seed's maximum load where known, else NAN. */
static int exact_search(const dpshim__ctx_t *ctx, int reason,
                        dpshim__tally_t *t, double seed_max) {
  if ((reason != DPSHIM_SKIP_NONE && reason != DPSHIM_SKIP_NO_GAIN) ||
      !dpshim__default_search_applies(ctx))
    return reason;
  int32_t *mine = DPSHIM__ALLOC(ctx, int32_t, ctx->nsamples);
  int32_t *pre = DPSHIM__ALLOC(ctx, int32_t, ctx->nsamples);
  if (!mine || !pre) return DPSHIM_ENOMEM;
  int had_plan = reason == DPSHIM_SKIP_NONE;
  if (!had_plan) dpshim__dest_at_origins(ctx, ctx->dest);
  dpshim__copy_dest(ctx, pre, ctx->dest);
  dpshim__tally_of(ctx, ctx->dest, t);
  double max = dpshim__max_load(t->load, ctx->ranks), slack, pre_max = max;
  int optimal, rc = search_run(ctx, 0, &max, mine, t, &optimal);
  if (rc > 0) {
    reason = DPSHIM_SKIP_NONE;
    rc = relabel_if_fewer(ctx, mine);
  }
  if (rc < 0 || reason != DPSHIM_SKIP_NONE) return rc < 0 ? rc : reason;
  if ((rc = equally_good(ctx, optimal, max, &seed_max, mine, t, &slack)) < 0)
    return rc;
  double before = dpshim__max_load(ctx->load0, ctx->ranks);
  if (before <= slack) {
    dpshim__dest_at_origins(ctx, ctx->dest);
    return DPSHIM_SKIP_NO_GAIN;
  }
  max = fmax(max, fmin(slack, before * (1 - BYTES_GAIN)));
  /* The plan before the makespan search, where as good (or brought so),
   * is the better start for bytes: that search re-deals with no regard to
   * them. */
  if (had_plan && (rc = fewer_at(ctx, max, pre, pre_max, mine, t)) < 0)
    return rc;
  rc = search_run(ctx, 1, &max, mine, t, &optimal);
  return rc < 0 ? rc : reason;
}

/* ---- 3. samples alike go home ------------------------------------------- */

/* Samples alike (cost, length, rows) can trade places without changing a
 * load. Keys ordered by kind, then bytes descending, then index. */
typedef struct kind_key {
  double cost;
  int64_t len, rows, bytes, index;
} kind_key_t;

static int same_kind(const kind_key_t *x, const kind_key_t *y) {
  return x->cost == y->cost && x->len == y->len && x->rows == y->rows;
}

static int by_kind(const void *a, const void *b) {
  const kind_key_t *x = a, *y = b;
  if (x->cost != y->cost) return x->cost < y->cost ? -1 : 1;
  if (x->len != y->len) return x->len < y->len ? -1 : 1;
  if (x->rows != y->rows) return x->rows < y->rows ? -1 : 1;
  if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
  return (x->index > y->index) - (x->index < y->index);
}

/* Within one kind the places (ranks, with multiplicity) stay; each rank
 * keeps as many of its own samples of the kind as it has places, the
 * largest first, and the others fill the places left: the fewest bytes
 * for those places. */
static void deal_kind(const dpshim__ctx_t *ctx, const kind_key_t *kind,
                      int64_t m, int64_t *places) {
  for (int64_t k = 0; k < m; k++) places[ctx->dest[kind[k].index]]++;
  for (int64_t k = 0; k < m; k++) {
    int64_t i = kind[k].index;
    int32_t o = ctx->origin[i];
    ctx->dest[i] = places[o] > 0 ? (places[o]--, o) : -1;
  }
  int32_t r = 0;
  for (int64_t k = 0; k < m; k++) {
    int64_t i = kind[k].index;
    if (ctx->dest[i] >= 0) continue;
    while (places[r] == 0) r++;
    ctx->dest[i] = r;
    places[r]--;
  }
}

static kind_key_t kind_key(const dpshim__ctx_t *ctx, int64_t i) {
  const dpshim_sample_t *smp = &ctx->samples[i];
  return (kind_key_t){ctx->cost[i], smp->len, smp->rows, smp->bytes, i};
}

/* keys[0 .. m) sorted, each kind in them dealt. A run of one length is
 * mostly sorted already (ctx->order breaks ties by index): then no sort. */
static void deal_kinds(const dpshim__ctx_t *ctx, kind_key_t *key, int64_t m,
                       int64_t *places) {
  int64_t sorted = 1;
  while (sorted < m && by_kind(&key[sorted - 1], &key[sorted]) < 0) sorted++;
  if (sorted < m) qsort(key, (size_t)m, sizeof *key, by_kind);
  for (int64_t k = 0, n; k < m; k += n) {
    for (n = 1; k + n < m && same_kind(&key[k], &key[k + n]); n++) {
    }
    if (n > 1) deal_kind(ctx, key + k, n, places);
  }
}

/* Whether ctx->order holds each (cost, length) in one run: cost, then
 * length, never rising. (It is by size, descending; checked, not
 * assumed.) */
static int order_runs_kinds(const dpshim__ctx_t *ctx) {
  for (int64_t q = 1; q < ctx->nsamples; q++) {
    int64_t i = ctx->order[q - 1], j = ctx->order[q];
    if (ctx->cost[j] > ctx->cost[i] ||
        (ctx->cost[j] == ctx->cost[i] &&
         ctx->samples[j].len > ctx->samples[i].len))
      return 0;
  }
  return 1;
}

/* Kinds are dealt one by one (each leaves places[] as it found it), so
 * each run of one (cost, length) in ctx->order is sorted alone: at tens
 * of thousands of samples the sort of all of them was a third of the
 * solve. */
static int alike_home(const dpshim__ctx_t *ctx) {
  kind_key_t *key = DPSHIM__ALLOC(ctx, kind_key_t, ctx->nsamples);
  int64_t *places = DPSHIM__ALLOC(ctx, int64_t, ctx->ranks), n = ctx->nsamples;
  if (!key || !places) return DPSHIM_ENOMEM;
  for (int32_t r = 0; r < ctx->ranks; r++) places[r] = 0;
  if (!order_runs_kinds(ctx)) {
    for (int64_t i = 0; i < n; i++) key[i] = kind_key(ctx, i);
    deal_kinds(ctx, key, n, places);
    return 0;
  }
  for (int64_t q = 0, m; q < n; q += m) {
    key[0] = kind_key(ctx, ctx->order[q]);
    for (m = 1; q + m < n; m++) {
      key[m] = kind_key(ctx, ctx->order[q + m]);
      if (key[m].cost != key[0].cost || key[m].len != key[0].len) break;
    }
    if (m > 1) deal_kinds(ctx, key, m, places);
  }
  return 0;
}

/* ---- 4. sending home ---------------------------------------------------- */

/* One pass of step 4 over the moved samples (cost descending); returns
 * how many went home. */
static int64_t home_pass(const dpshim__ctx_t *ctx, const int64_t *moved,
                         int64_t n, double limit, dpshim__tally_t *t) {
  int64_t sent = 0;
  for (int64_t k = 0; k < n; k++) {
    int64_t i = moved[k];
    int32_t o = ctx->origin[i];
    if (ctx->dest[i] == o || !dpshim__tally_may_move(ctx, t, i, o, limit))
      continue;
    dpshim__tally_move(ctx, t, i, o);
    sent++;
  }
  return sent;
}

/* Each rank's host's least load, into least[ranks]: a sample too costly
 * for it is not looked at further (loads meanwhile moved only make the
 * pass skip what the next one may place). */
static void least_per_host(const dpshim__ctx_t *ctx, const int32_t *ring,
                           const dpshim__tally_t *t, double *least) {
  for (int32_t r = 0; r < ctx->ranks; r++) least[r] = NAN;
  for (int32_t r = 0; r < ctx->ranks; r++) {
    if (!isnan(least[r])) continue;
    double min = t->load[r];
    for (int32_t q = ring[r]; q != r; q = ring[q]) min = fmin(min, t->load[q]);
    least[r] = min;
    for (int32_t q = ring[r]; q != r; q = ring[q]) least[q] = min;
  }
}

/* The least-loaded rank of sample i's home host (home aside; at most
 * DPSHIM__HOST_SCAN asked) that may take it under the limit, or -1. */
static int32_t on_home_host(const dpshim__ctx_t *ctx, const int32_t *ring,
                            const dpshim__tally_t *t, int64_t i, double limit) {
  int32_t o = ctx->samples[i].origin, best = -1;
  for (int32_t r = ring[o], asked = 0; r != o && asked < DPSHIM__HOST_SCAN;
       r = ring[r], asked++)
    if ((best < 0 || t->load[r] < t->load[best]) &&
        dpshim__tally_may_move(ctx, t, i, r, limit))
      best = r;
  return best;
}

/* One pass of step 5 over the samples in away[*n], all on another host
 * than their home's: those it sends to their home's host leave the list.
 * Returns how many it sent. */
static int64_t home_host_pass(const dpshim__ctx_t *ctx, const int32_t *ring,
                              int64_t *away, int64_t *n, double limit,
                              dpshim__tally_t *t, double *least) {
  int64_t kept = 0;
  least_per_host(ctx, ring, t, least);
  for (int64_t k = 0; k < *n; k++) {
    int64_t i = away[k];
    int32_t o = ctx->samples[i].origin;
    int32_t to = least[o] + ctx->cost[i] > limit
                     ? -1
                     : on_home_host(ctx, ring, t, i, limit);
    if (to >= 0) dpshim__tally_move(ctx, t, i, to);
    else away[kept++] = i;
  }
  int64_t sent = *n - kept;
  *n = kept;
  return sent;
}

/* Steps 4, then 5 and 4 again, each until a pass sends nothing: a sample
 * gone home (or to its home's host) lightens the rank it left, which may
 * be another's home. */
static int send_home(const dpshim__ctx_t *ctx, dpshim__tally_t *t) {
  int64_t *moved = DPSHIM__ALLOC(ctx, int64_t, ctx->nsamples);
  double *least = DPSHIM__ALLOC(ctx, double, ctx->ranks);
  const int32_t *ring = ctx->host_ring;
  if (!moved || !least) return DPSHIM_ENOMEM;
  dpshim__tally_of(ctx, ctx->dest, t);
  double limit = dpshim__max_load(t->load, ctx->ranks);
  int64_t n = 0;
  for (int64_t k = 0; k < ctx->nsamples; k++) { /* ctx->order: cost desc */
    int64_t i = ctx->order[k];
    if (ctx->dest[i] != ctx->origin[i]) moved[n++] = i;
  }
  while (home_pass(ctx, moved, n, limit, t) > 0) {
  }
  if (!ring) return 0;
  int64_t *away = DPSHIM__ALLOC(ctx, int64_t, n + 1), m = 0, sent = 0, s;
  if (!away) return DPSHIM_ENOMEM;
  for (int64_t k = 0; k < n; k++)
    if (ctx->host[ctx->dest[moved[k]]] !=
        ctx->host[ctx->samples[moved[k]].origin])
      away[m++] = moved[k];
  while ((s = home_host_pass(ctx, ring, away, &m, limit, t, least)) > 0)
    sent += s;
  while (sent > 0 && home_pass(ctx, moved, n, limit, t) > 0) {
  }
  return 0;
}

int dpshim__default_finish(const dpshim__ctx_t *ctx, int reason) {
  dpshim__tally_t t;
  if (reason < 0 || dpshim__tally_init(ctx, &t) < 0) return reason < 0 ? reason
                                                                : DPSHIM_ENOMEM;
  double seed_max = NAN;
  if (ctx->ranks <= DPSHIM__SECOND_START_RANKS)
    reason = second_start(ctx, reason, &t, &seed_max);
  reason = exact_search(ctx, reason, &t, seed_max);
  if (reason != DPSHIM_SKIP_NONE) return reason;
  int rc = ctx->ranks <= DPSHIM__SECOND_START_RANKS ? alike_home(ctx) : 0;
  if (rc == 0) rc = send_home(ctx, &t);
  if (rc == 0) rc = dpshim__default_home_by_exchange(ctx, &t, 0);
  if (rc == 0) rc = dpshim__default_pairs(ctx, &t);
  /* Step 7 re-deals whole ranks: where it did, steps 4 and 6 again. */
  if (rc == 1 && (rc = send_home(ctx, &t)) == 0)
    rc = dpshim__default_home_by_exchange(ctx, &t, 1);
  return rc < 0 ? rc : reason;
}
