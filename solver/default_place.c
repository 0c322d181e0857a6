/* Step 2 of `default`: shed samples, longest first, go home or to the
 * least-loaded rank with room; a big one that fits nowhere makes room. */
#include <math.h>

#include "default_state.h"
#include "rank_heap.h"

#define MAKE_ROOM_TRIES 16 /* least-loaded ranks asked first to make room */
#define BIG_SAMPLE 0.05     /* share of B above which a sample may evict */
#define LOAD_BLOCK 64       /* ranks a block of any_room_maker()'s scan */
#define KEEP_MARGIN 1e-9    /* keeps_too_much(): share of the target */

/* Rank r sheds its own samples smaller than i, largest first, until i fits;
 * they come later in order[] and are placed in their turn. */
static void make_room(dpshim__dstate_t *s, int32_t r, int64_t i) {
  const dpshim__ctx_t *ctx = s->ctx;
  for (int64_t k = s->start[r];
       k < s->start[r + 1] && !dpshim__dstate_room_for(s, r, i); k++) {
    int64_t j = s->group[k];
    if (ctx->dest[j] == r && ctx->size[j] < ctx->size[i])
      dpshim__dstate_take(s, j);
  }
}

/* Samples are placed longest first, so a rank without token room for one
 * may have room for a later one: such ranks wait in `blocked` (fewest tokens
 * first) with an infinite key in the `open` tree, instead of being looked at
 * again for every sample. */
/* What a rank could shed for a sample of some size: its own samples still
 * on it that are smaller (its group, from pos on). */
typedef struct sheddable {
  int64_t version; /* the rank's, when summed */
  int64_t size, pos, tokens, rows;
  double cost;
} sheddable_t;

typedef struct placer {
  dpshim__rank_tree_t open;    /* least key first */
  double *key;                 /* load, or +inf while blocked */
  /* Every rank's load in blocks of LOAD_BLOCK ranks: the least load of
   * each, recomputed when asked for after a rank in it changed. */
  double *block_min;  /* [ranks / LOAD_BLOCK, rounded up] */
  char *block_stale;  /* [the same] */
  dpshim__rank_heap_t blocked; /* by tokens */
  sheddable_t *shed;           /* [ranks] */
  /* What each rank keeps when it sheds for a sample (its load less its
   * sheddable samples), as last asked, and the least of each block's: a
   * lower bound of what it keeps for any later sample (keeps_too_much()). */
  double *keep, *block_keep; /* [ranks], [blocks] */
  const int32_t *host_ring;    /* ctx->host_ring */
  int32_t *host_first;         /* [ranks] the lowest rank on the same host */
  double *exports;             /* [ranks] by host_first: load still to leave */
} placer_t;

static void shed_add(const dpshim__ctx_t *ctx, sheddable_t *c, int64_t j,
                     int sign) {
  c->cost += sign * ctx->cost[j];
  c->tokens += sign * ctx->samples[j].len;
  c->rows += sign * ctx->samples[j].rows;
}

/* Rank r's sheddable samples for sample i. Samples are placed largest
 * first, so the size only falls: while r's samples stay as they were, the
 * sums shrink from the front of its group, not summed again (the slow
 * path asks every rank for every big sample that fits nowhere). */
static const sheddable_t *sheddable(const dpshim__dstate_t *s, placer_t *pl,
                                    int32_t r, int64_t i) {
  const dpshim__ctx_t *ctx = s->ctx;
  sheddable_t *c = &pl->shed[r];
  int64_t size = ctx->size[i], end = s->start[r + 1];
  if (c->version != s->version[r] || size > c->size) {
    *c = (sheddable_t){s->version[r], size, s->start[r], 0, 0, 0};
    while (c->pos < end && ctx->size[s->group[c->pos]] >= size) c->pos++;
    for (int64_t k = c->pos; k < end; k++)
      if (ctx->dest[s->group[k]] == r) shed_add(ctx, c, s->group[k], +1);
    return c;
  }
  for (; c->pos < end && ctx->size[s->group[c->pos]] >= size; c->pos++)
    if (ctx->dest[s->group[c->pos]] == r) shed_add(ctx, c, s->group[c->pos], -1);
  c->size = size;
  return c;
}

/* Whether rank r could fit sample i by shedding its own smaller samples. */
static int can_make_room(const dpshim__dstate_t *s, placer_t *pl, int32_t r,
                         int64_t i) {
  const dpshim__ctx_t *ctx = s->ctx;
  const sheddable_t *c = sheddable(s, pl, r, i);
  pl->keep[r] = s->load[r] - c->cost;
  return s->load[r] - c->cost + ctx->cost[i] <= s->target &&
         s->tokens[r] - c->tokens + ctx->samples[i].len <= ctx->cap &&
         dpshim__rows_fit(ctx, r, s->rows[r] - c->rows, ctx->samples[i].rows);
}

static void set_key(placer_t *pl, int32_t r, double key) {
  pl->key[r] = key;
  dpshim__rank_tree_update(&pl->open, r);
}

/* After r's load changed. */
static void touch(const dpshim__dstate_t *s, placer_t *pl, int32_t r) {
  if (pl->key[r] != INFINITY) set_key(pl, r, s->load[r]);
}

static void block(placer_t *pl, int32_t r) {
  set_key(pl, r, INFINITY);
  dpshim__rank_heap_push(&pl->blocked, r);
}

static void unblock(const dpshim__dstate_t *s, placer_t *pl, int64_t len) {
  dpshim__rank_heap_t *b = &pl->blocked;
  while (b->size > 0) {
    int32_t r = dpshim__rank_heap_peek_fresh(b);
    if (!dpshim__dstate_within_cap(s, r, len)) return;
    dpshim__rank_heap_pop(b);
    set_key(pl, r, s->load[r]);
  }
}

static int lighter(const dpshim__dstate_t *s, int32_t a, int32_t b) {
  return b < 0 || s->load[a] < s->load[b] || (s->load[a] == s->load[b] && a < b);
}

/* The slow path when the least-loaded open rank lacks rows room for i: a
 * later sample may have fewer rows, so no rank is blocked for it. */
static int32_t least_loaded_with_rows(const dpshim__dstate_t *s,
                                      const placer_t *pl, int64_t i) {
  int32_t best = -1;
  for (int32_t r = 0; r < s->ctx->ranks; r++)
    if (pl->key[r] != INFINITY && lighter(s, r, best) &&
        dpshim__dstate_within_cap(s, r, s->ctx->samples[i].len) &&
        dpshim__dstate_rows_fit(s, r, s->ctx->samples[i].rows))
      best = r;
  return best;
}

/* The least-loaded open rank with token and rows room for i, or -1. */
static int32_t least_loaded_fitting(const dpshim__dstate_t *s, placer_t *pl,
                                    int64_t i) {
  for (;;) {
    int32_t r = dpshim__rank_tree_min(&pl->open);
    if (pl->key[r] == INFINITY) return -1;
    if (!dpshim__dstate_within_cap(s, r, s->ctx->samples[i].len)) {
      block(pl, r);
      continue;
    }
    if (dpshim__dstate_rows_fit(s, r, s->ctx->samples[i].rows)) return r;
    return least_loaded_with_rows(s, pl, i);
  }
}

/* The least load of rank block b, which holds ranks [b * LOAD_BLOCK, end). */
static double block_min(const dpshim__dstate_t *s, placer_t *pl, int32_t b,
                        int32_t end) {
  if (pl->block_stale[b]) {
    double min = INFINITY;
    for (int32_t r = b * LOAD_BLOCK; r < end; r++)
      min = s->load[r] < min ? s->load[r] : min;
    pl->block_min[b] = min;
    pl->block_stale[b] = 0;
  }
  return pl->block_min[b];
}

/* Whether `keep`, what a rank kept when last asked (or the least of a
 * block's), is already too much for sample i. While samples are placed,
 * what a rank keeps for the sample at hand only grows: it receives
 * samples, the size falls (more of its own are too large to shed), and
 * making room sheds only samples smaller than the one at hand. So what it
 * kept when last asked bounds it from below, with a margin far above the
 * sums' rounding. */
static int keeps_too_much(const dpshim__dstate_t *s, double keep, int64_t i) {
  return keep + s->ctx->cost[i] > s->target * (1 + KEEP_MARGIN);
}

/* Whether block b holds no rank lighter than bound, or only ranks that
 * keep too much for i. */
static int block_passes(const dpshim__dstate_t *s, placer_t *pl, int32_t b,
                        int32_t end, int64_t i, double bound) {
  return !(block_min(s, pl, b, end) < bound) ||
         keeps_too_much(s, pl->block_keep[b], i);
}

/* The least-loaded rank of all that can shed shorter samples to fit i, or
 * -1: the slow path when the few least loaded hold long samples. The ranks
 * asked are those lighter than the best so far, in rank order, but those
 * that keep too much; a block whose least load is not below the best's,
 * or whose ranks all keep too much, holds none. (Asking fills a rank's
 * sheddable() sums, summed anew where it changed since: a rank not asked
 * may round its sums otherwise when next asked. Every rank skips the
 * same; against asking all, plans bit-identical on the bench's grids.) */
static int32_t any_room_maker(const dpshim__dstate_t *s, placer_t *pl,
                              int64_t i) {
  int32_t best = -1, ranks = s->ctx->ranks;
  double bound = INFINITY; /* lighter() than best: rank order breaks ties */
  for (int32_t b = 0; b * LOAD_BLOCK < ranks; b++) {
    int32_t end = b * LOAD_BLOCK + LOAD_BLOCK < ranks ? b * LOAD_BLOCK + LOAD_BLOCK
                                                      : ranks;
    if (block_passes(s, pl, b, end, i, bound)) continue;
    double least = INFINITY;
    for (int32_t r = b * LOAD_BLOCK; r < end; r++) {
      if (s->load[r] < bound &&
          !keeps_too_much(s, pl->keep[r], i) &&
          can_make_room(s, pl, r, i)) {
        best = r;
        bound = s->load[r];
      }
      least = pl->keep[r] < least ? pl->keep[r] : least;
    }
    pl->block_keep[b] = least;
  }
  return best;
}

/* The least-loaded of the MAKE_ROOM_TRIES least-loaded open ranks that can
 * shed shorter samples to fit i, or -1. An open rank's key is its load, so
 * the tree gives them in lighter() order: the first that can is the one,
 * and the ranks after it are never asked (asking fills their sheddable()
 * sums, so which are asked matters). Each one that cannot is hidden from
 * the tree to reach the next (pl->key[r] stays its load), then restored. */
static int32_t open_room_maker(dpshim__dstate_t *s, placer_t *pl, int64_t i) {
  dpshim__rank_tree_saved_t saved[MAKE_ROOM_TRIES];
  int32_t hidden = 0, best = -1;
  for (int32_t asked = 0; asked < MAKE_ROOM_TRIES; asked++) {
    int32_t r = dpshim__rank_tree_min(&pl->open);
    if (dpshim__rank_tree_min_key(&pl->open) == INFINITY) break;
    if (can_make_room(s, pl, r, i)) {
      best = r;
      break;
    }
    if (asked + 1 < MAKE_ROOM_TRIES)
      dpshim__rank_tree_hide(&pl->open, r, &saved[hidden++]);
  }
  while (hidden > 0) dpshim__rank_tree_restore(&pl->open, &saved[--hidden]);
  return best;
}

/* Big samples only: the least-loaded of a few open and a few blocked ranks
 * that can shed shorter samples to fit i, else of any rank; or -1. */
static int32_t room_maker(dpshim__dstate_t *s, placer_t *pl, int64_t i) {
  int32_t blocked[MAKE_ROOM_TRIES], nb = 0, best = open_room_maker(s, pl, i);
  while (nb < MAKE_ROOM_TRIES && pl->blocked.size > 0)
    blocked[nb++] = dpshim__rank_heap_pop_fresh(&pl->blocked);
  for (int32_t p = 0; p < nb; p++)
    if (lighter(s, blocked[p], best) && can_make_room(s, pl, blocked[p], i))
      best = blocked[p];
  for (int32_t p = 0; p < nb; p++) dpshim__rank_heap_push(&pl->blocked, blocked[p]);
  if (best < 0) best = any_room_maker(s, pl, i);
  if (best >= 0) make_room(s, best, i);
  return best;
}

/* The least-loaded rank on sample i's home host, home aside, with room for
 * it under the target (tokens and rows too), or -1. */
static int32_t on_home_host(const dpshim__dstate_t *s, const placer_t *pl,
                            int64_t i) {
  const dpshim__ctx_t *ctx = s->ctx;
  int32_t home = ctx->samples[i].origin, best = -1;
  if (!pl->host_ring) return -1;
  for (int32_t r = pl->host_ring[home], k = 0;
       r != home && k < DPSHIM__HOST_SCAN; r = pl->host_ring[r], k++)
    if (lighter(s, r, best) && dpshim__dstate_room_for(s, r, i)) best = r;
  return best;
}

/* Told the hosts: what each host holds above its ranks' targets must
 * leave it, and the bytes across hosts are fewest when that is done by the
 * samples of the most cost per byte, the longest, placed first. So a host's
 * big shed samples (BIG_SAMPLE) leave it, longest first, while they fit in
 * its excess; the rest look for room on their home's host first. (Letting
 * small ones go too moved more bytes across hosts on sft, whose short
 * samples cost about the same per byte.) */
static int host_exports(const dpshim__dstate_t *s, placer_t *pl) {
  const dpshim__ctx_t *ctx = s->ctx;
  pl->host_first = DPSHIM__ALLOC(ctx, int32_t, ctx->ranks);
  pl->exports = DPSHIM__ALLOC(ctx, double, ctx->ranks);
  if (!pl->host_first || !pl->exports) return DPSHIM_ENOMEM;
  for (int32_t r = 0; r < ctx->ranks; r++) pl->host_first[r] = -1;
  for (int32_t r = 0; r < ctx->ranks; r++) {
    if (pl->host_first[r] >= 0) continue;
    pl->exports[r] = 0;
    int32_t q = r;
    do {
      pl->host_first[q] = r;
      pl->exports[r] += ctx->load0[q] - s->target;
    } while ((q = pl->host_ring[q]) != r);
  }
  return 0;
}

/* Whether sample i is one its host should export. */
static int to_export(const dpshim__dstate_t *s, const placer_t *pl,
                     int64_t i) {
  if (!pl->host_ring || s->ctx->cost[i] < BIG_SAMPLE * s->bound) return 0;
  return s->ctx->cost[i] <=
         pl->exports[pl->host_first[s->ctx->samples[i].origin]];
}

/* Sample i placed on r: if on another host, its home's has that much less
 * to export, r's that much more (or less room). */
static void note_export(const dpshim__dstate_t *s, placer_t *pl, int64_t i,
                        int32_t r) {
  int32_t home = s->ctx->samples[i].origin;
  if (!pl->host_ring || s->ctx->host[r] == s->ctx->host[home]) return;
  pl->exports[pl->host_first[home]] -= s->ctx->cost[i];
  pl->exports[pl->host_first[r]] += s->ctx->cost[i];
}

/* Where the home's host has room for big sample i in all but no rank has
 * room for it: the least-loaded rank there, home aside, that can shed its
 * own shorter samples to fit it does so; or -1. (Small ones: no fewer
 * bytes across hosts, and a third of long's solve time at 4096 ranks.) */
static int32_t home_host_room_maker(dpshim__dstate_t *s, placer_t *pl,
                                    int64_t i) {
  int32_t home = s->ctx->samples[i].origin, best = -1;
  if (!pl->host_ring || s->ctx->cost[i] < BIG_SAMPLE * s->bound ||
      pl->exports[pl->host_first[home]] + s->ctx->cost[i] > 0)
    return -1;
  for (int32_t r = pl->host_ring[home], k = 0;
       r != home && k < DPSHIM__HOST_SCAN; r = pl->host_ring[r], k++)
    if (lighter(s, r, best) && can_make_room(s, pl, r, i)) best = r;
  if (best >= 0) make_room(s, best, i);
  return best;
}

/* Home if it has room; else the least-loaded rank of its home's host with
 * room; else the least-loaded rank with room; else, for a big sample, a
 * rank that makes room; else the least-loaded within the cap; else home.
 * A sample its host exports skips the first two; one it keeps may make
 * room on its home's host before it looks elsewhere. */
static int32_t choose_receiver(dpshim__dstate_t *s, placer_t *pl, int64_t i) {
  const dpshim__ctx_t *ctx = s->ctx;
  int64_t len = ctx->samples[i].len;
  int leaves = to_export(s, pl, i);
  if (!leaves && dpshim__dstate_room_for(s, ctx->samples[i].origin, i))
    return ctx->samples[i].origin;
  int32_t near = leaves ? -1 : on_home_host(s, pl, i);
  if (near < 0 && !leaves) near = home_host_room_maker(s, pl, i);
  if (near >= 0) return near;
  unblock(s, pl, len);
  int32_t r = least_loaded_fitting(s, pl, i);
  if (r >= 0 && s->load[r] + ctx->cost[i] <= s->target) return r;
  if (ctx->cost[i] >= BIG_SAMPLE * s->bound) {
    int32_t maker = room_maker(s, pl, i);
    if (maker >= 0) return maker;
  }
  return r >= 0 ? r : ctx->samples[i].origin;
}

int dpshim__default_place(dpshim__dstate_t *s) {
  const dpshim__ctx_t *ctx = s->ctx;
  int32_t blocks = (ctx->ranks + LOAD_BLOCK - 1) / LOAD_BLOCK;
  placer_t pl = {
      .key = DPSHIM__ALLOC(ctx, double, ctx->ranks),
      .blocked = {DPSHIM__ALLOC(ctx, dpshim__rank_entry_t, ctx->ranks), 0,
                  s->token_key},
      .shed = DPSHIM__ALLOC(ctx, sheddable_t, ctx->ranks),
      .block_min = DPSHIM__ALLOC(ctx, double, blocks),
      .block_stale = DPSHIM__ALLOC(ctx, char, blocks),
      .keep = DPSHIM__ALLOC(ctx, double, ctx->ranks),
      .block_keep = DPSHIM__ALLOC(ctx, double, blocks),
      .host_ring = ctx->host_ring};
  if (!pl.key || !pl.blocked.e || !pl.shed || !pl.block_min || !pl.block_stale ||
      !pl.keep || !pl.block_keep ||
      (pl.host_ring && host_exports(s, &pl) < 0))
    return DPSHIM_ENOMEM;
  for (int32_t r = 0; r < ctx->ranks; r++) {
    pl.key[r] = s->load[r];
    pl.shed[r].version = -1;
    pl.keep[r] = -INFINITY;
  }
  for (int32_t b = 0; b < blocks; b++)
    pl.block_stale[b] = 1, pl.block_keep[b] = -INFINITY;
  int rc = dpshim__rank_tree_init(&pl.open, ctx, pl.key, 0);
  for (int64_t k = 0; rc == 0 && k < ctx->nsamples; k++) {
    int64_t i = s->order[k];
    if (ctx->dest[i] >= 0) continue;
    int32_t r = choose_receiver(s, &pl, i);
    note_export(s, &pl, i, r);
    dpshim__dstate_give(s, i, r);
    touch(s, &pl, r); /* also covers room_maker's shedding on r */
    pl.block_stale[r / LOAD_BLOCK] = 1;
  }
  return rc;
}
