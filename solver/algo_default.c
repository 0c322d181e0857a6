/* `default`: reach the lower bound moving as few bytes as possible.
 *
 * The original re-deals every sample, so almost every byte changes rank each
 * step. Here samples start where they are; U = LB * (1 + TOLERANCE):
 *   1. shed: every rank above U gives up samples, longest first (the most
 *      cost per byte moved), none that would take it below LB or that no rank
 *      could absorb; if still above U, the cheapest single sample that gets it
 *      there;
 *   2. place: shed samples, longest first, go to the least-loaded rank they
 *      fit (load within U, tokens within the cap); a big sample that fits
 *      nowhere makes room on one of the least loaded ranks, which sheds its
 *      own shorter samples, placed in their turn; a small one goes to the
 *      least-loaded rank within the cap, else home;
 *   3. repair: while the busiest rank exceeds U, it hands work to the least
 *      busy one: a move or a one-for-one swap that keeps the receiver within
 *      U with the most useful cost per byte (a sample going home, or moving
 *      again, is free), else the one that lowers the larger load most.
 * A rank keeps at least one sample; every move checks the cap (only a sample
 * sent home can cross it, if home has meanwhile been filled: not seen in the
 * property tests); the plan is applied only if it lowers the maximum load. */
#include <math.h>
#include <stdlib.h>

#include "internal.h"
#include "rank_heap.h"
#include "rank_tree.h"

#define TOLERANCE 3e-4
#define ROUNDS_PER_RANK 16
#define MAKE_ROOM_TRIES 64 /* least-loaded ranks asked to make room */
#ifndef USE_SWAP_ANYWHERE
#define USE_SWAP_ANYWHERE 0
#endif
#ifndef FRINGE
#define FRINGE 0.01
#endif
#define SWAP_SCAN 64 /* same-cost samples tried per swap candidate */
#define BIG_SAMPLE 0.05     /* share of LB above which a sample may evict */

typedef struct state {
  const dpshim__ctx_t *ctx;
  double *load;
  int64_t *tokens;
  int64_t *count;
  double *token_key; /* tokens as a heap key */
  double target;     /* U */
  const int64_t *order;   /* ctx->order */
  int64_t *start, *group; /* order bucketed by origin (CSR) */
  int64_t *head, *next, *prev; /* per-rank doubly linked sample lists */
  dpshim__rank_tree_t tree;
  /* Trades: a rank's samples shortest first, with running sums. */
  uint64_t *trade_key;
  double *trade_cost;
  int64_t *trade_tokens, *trade_bytes;
} state_t;

typedef struct exchange {
  int64_t give, back; /* give: hi -> lo; back: lo -> hi, or -1 for a move */
  double delta;       /* load that leaves hi for lo */
  int64_t bytes;      /* traffic it adds to the plan (negative: saves) */
} exchange_t;

/* ---- per-rank sample lists ---------------------------------------------- */

static void link_front(state_t *s, int64_t i, int32_t r) {
  s->prev[i] = -1;
  s->next[i] = s->head[r];
  if (s->head[r] >= 0) s->prev[s->head[r]] = i;
  s->head[r] = i;
}

static void unlink_sample(state_t *s, int64_t i, int32_t r) {
  if (s->prev[i] >= 0) s->next[s->prev[i]] = s->next[i];
  else s->head[r] = s->next[i];
  if (s->next[i] >= 0) s->prev[s->next[i]] = s->prev[i];
}

/* ---- 1. shed ------------------------------------------------------------ */

static void take(state_t *s, int64_t i) {
  const dpshim__ctx_t *ctx = s->ctx;
  int32_t r = ctx->dest[i];
  unlink_sample(s, i, r);
  s->load[r] -= ctx->cost[i];
  s->tokens[r] -= ctx->samples[i].len;
  s->token_key[r] = (double)s->tokens[r];
  s->count[r]--;
  ctx->dest[i] = -1;
}

static void give(state_t *s, int64_t i, int32_t r) {
  const dpshim__ctx_t *ctx = s->ctx;
  link_front(s, i, r);
  s->load[r] += ctx->cost[i];
  s->tokens[r] += ctx->samples[i].len;
  s->token_key[r] = (double)s->tokens[r];
  s->count[r]++;
  ctx->dest[i] = r;
}

/* order[] bucketed by origin, length-descending inside each rank. */
static int group_by_origin(state_t *s) {
  const dpshim__ctx_t *ctx = s->ctx;
  int64_t *fill = DPSHIM__ALLOC(ctx, int64_t, ctx->ranks);
  s->start = DPSHIM__ALLOC(ctx, int64_t, ctx->ranks + 1);
  s->group = DPSHIM__ALLOC(ctx, int64_t, ctx->nsamples);
  if (!fill || !s->start || !s->group) return DPSHIM_ENOMEM;
  s->start[0] = 0;
  for (int32_t r = 0; r < ctx->ranks; r++) s->start[r + 1] = s->count[r];
  for (int32_t r = 0; r < ctx->ranks; r++) {
    s->start[r + 1] += s->start[r];
    fill[r] = s->start[r];
  }
  for (int64_t k = 0; k < ctx->nsamples; k++) {
    int64_t i = s->order[k];
    s->group[fill[ctx->samples[i].origin]++] = i;
  }
  return 0;
}

static void shed_rank(state_t *s, int32_t r, double max_room) {
  const double *cost = s->ctx->cost;
  const int64_t *own = s->group + s->start[r];
  int64_t n = s->start[r + 1] - s->start[r];
  for (int64_t k = 0; k < n && s->load[r] > s->target && s->count[r] > 1; k++) {
    int64_t i = own[k];
    if (cost[i] <= s->load[r] - s->ctx->lower_bound && cost[i] <= max_room)
      take(s, i);
  }
  /* Every sample left is larger than the excess: the cheapest one that
   * clears it overshoots least. */
  for (int64_t k = n - 1; k >= 0 && s->load[r] > s->target && s->count[r] > 1;
       k--) {
    int64_t i = own[k];
    if (s->ctx->dest[i] == r && cost[i] >= s->load[r] - s->target) take(s, i);
  }
}

/* Every rank also offers its shortest samples, up to FRINGE * LB of cost:
 * placed last, they level the ranks finely, as the tail of LPT does, and
 * most go home again. */
static void release_fringe(state_t *s, int32_t r) {
  double budget = FRINGE * s->ctx->lower_bound;
  for (int64_t k = s->start[r + 1] - 1; k >= s->start[r] && s->count[r] > 1; k--) {
    int64_t i = s->group[k];
    if (s->ctx->dest[i] != r) continue;
    if (s->ctx->cost[i] > budget) break;
    budget -= s->ctx->cost[i];
    take(s, i);
  }
}

static void shed(state_t *s) {
  double min_load = s->load[0];
  for (int32_t r = 1; r < s->ctx->ranks; r++) min_load = fmin(min_load, s->load[r]);
  double max_room = s->target - min_load;
  for (int32_t r = 0; r < s->ctx->ranks; r++)
    if (s->load[r] > s->target) shed_rank(s, r, max_room);
  for (int32_t r = 0; r < s->ctx->ranks; r++) release_fringe(s, r);
}

/* ---- 2. place ----------------------------------------------------------- */

static int room_for(const state_t *s, int32_t r, int64_t i) {
  return s->load[r] + s->ctx->cost[i] <= s->target &&
         s->tokens[r] + s->ctx->samples[i].len <= s->ctx->cap;
}

static int within_cap(const state_t *s, int32_t r, int64_t len) {
  return s->tokens[r] + len <= s->ctx->cap;
}

/* Whether rank r could fit sample i by shedding its own shorter samples. */
static int can_make_room(const state_t *s, int32_t r, int64_t i) {
  const dpshim__ctx_t *ctx = s->ctx;
  double load = s->load[r];
  int64_t tokens = s->tokens[r];
  for (int64_t k = s->start[r]; k < s->start[r + 1]; k++) {
    int64_t j = s->group[k];
    if (ctx->dest[j] != r || ctx->samples[j].len >= ctx->samples[i].len) continue;
    load -= ctx->cost[j];
    tokens -= ctx->samples[j].len;
  }
  return load + ctx->cost[i] <= s->target &&
         tokens + ctx->samples[i].len <= ctx->cap;
}

/* Rank r sheds its own samples shorter than i, longest first, until i fits;
 * they come later in order[] and are placed in their turn. */
static void make_room(state_t *s, int32_t r, int64_t i) {
  const dpshim__ctx_t *ctx = s->ctx;
  for (int64_t k = s->start[r]; k < s->start[r + 1] && !room_for(s, r, i); k++) {
    int64_t j = s->group[k];
    if (ctx->dest[j] == r && ctx->samples[j].len < ctx->samples[i].len) take(s, j);
  }
}

/* Samples are placed longest first, so a rank without token room for one
 * may have room for a later one: such ranks wait in `blocked` (fewest tokens
 * first) instead of being popped again for every sample. */
typedef struct placer {
  dpshim__rank_heap_t open;    /* by load */
  dpshim__rank_heap_t blocked; /* by tokens */
  int32_t *stash;              /* ranks popped from open for this sample */
  int32_t popped;
} placer_t;

static void unblock(state_t *s, placer_t *pl, int64_t len) {
  dpshim__rank_heap_t *b = &pl->blocked;
  while (b->size > 0) {
    int32_t r = dpshim__rank_heap_pop_fresh(b);
    if (!within_cap(s, r, len)) {
      dpshim__rank_heap_push(b, r);
      return;
    }
    dpshim__rank_heap_push(&pl->open, r);
  }
}

/* Big samples only: the least-loaded of a few ranks from either heap that
 * can shed shorter samples to fit i, or -1. */
static int32_t room_maker(state_t *s, placer_t *pl, int64_t i) {
  int32_t from_blocked[MAKE_ROOM_TRIES], nb = 0, best = -1;
  while (pl->popped < MAKE_ROOM_TRIES && pl->open.size > 0)
    pl->stash[pl->popped++] = dpshim__rank_heap_pop_fresh(&pl->open);
  while (nb < MAKE_ROOM_TRIES && pl->blocked.size > 0)
    from_blocked[nb++] = dpshim__rank_heap_pop_fresh(&pl->blocked);
  for (int32_t p = 0; p < pl->popped + nb; p++) {
    int32_t r = p < pl->popped ? pl->stash[p] : from_blocked[p - pl->popped];
    if ((best < 0 || s->load[r] < s->load[best] ||
         (s->load[r] == s->load[best] && r < best)) && can_make_room(s, r, i))
      best = r;
  }
  if (best >= 0) make_room(s, best, i);
  for (int32_t p = 0; p < nb; p++) dpshim__rank_heap_push(&pl->blocked, from_blocked[p]);
  return best;
}

/* The least-loaded rank with room; else, for a big sample, a rank that makes
 * room; else the least-loaded within the cap; else home. */
static int32_t choose_receiver(state_t *s, placer_t *pl, int64_t i) {
  const dpshim__ctx_t *ctx = s->ctx;
  int64_t len = ctx->samples[i].len;
  if (room_for(s, ctx->samples[i].origin, i)) return ctx->samples[i].origin;
  unblock(s, pl, len);
  while (pl->open.size > 0) {
    int32_t r = dpshim__rank_heap_pop_fresh(&pl->open);
    if (!within_cap(s, r, len)) {
      dpshim__rank_heap_push(&pl->blocked, r);
      continue;
    }
    pl->stash[pl->popped++] = r;
    /* Ranks come in load order: once one lacks load room, all later do. */
    if (s->load[r] + ctx->cost[i] <= s->target) return r;
    break;
  }
  if (ctx->cost[i] >= BIG_SAMPLE * ctx->lower_bound) {
    int32_t r = room_maker(s, pl, i);
    if (r >= 0) return r;
  }
  for (int32_t p = 0; p < pl->popped; p++)
    if (within_cap(s, pl->stash[p], len)) return pl->stash[p];
  return ctx->samples[i].origin;
}

static int place(state_t *s) {
  const dpshim__ctx_t *ctx = s->ctx;
  placer_t pl = {
      .open = {DPSHIM__ALLOC(ctx, dpshim__rank_entry_t, ctx->ranks), 0, s->load},
      .blocked = {DPSHIM__ALLOC(ctx, dpshim__rank_entry_t, ctx->ranks), 0,
                  s->token_key},
      .stash = DPSHIM__ALLOC(ctx, int32_t, ctx->ranks)};
  if (!pl.open.e || !pl.blocked.e || !pl.stash) return DPSHIM_ENOMEM;
  for (int32_t r = 0; r < ctx->ranks; r++) dpshim__rank_heap_push(&pl.open, r);
  for (int64_t k = 0; k < ctx->nsamples; k++) {
    int64_t i = s->order[k];
    if (ctx->dest[i] >= 0) continue;
    pl.popped = 0;
    give(s, i, choose_receiver(s, &pl, i));
    /* Popped ranks re-enter with their new loads; a rank given a sample
     * while still in a heap is caught by pop_fresh(). */
    for (int32_t p = 0; p < pl.popped; p++) dpshim__rank_heap_push(&pl.open, pl.stash[p]);
  }
  return 0;
}

/* ---- 3. repair ---------------------------------------------------------- */

static void relocate(state_t *s, int64_t i, int32_t to) {
  take(s, i);
  give(s, i, to);
}

static int64_t extra_bytes(const state_t *s, int64_t i, int32_t to) {
  const dpshim_sample_t *smp = &s->ctx->samples[i];
  int was_moved = s->ctx->dest[i] != smp->origin;
  int will_move = to != smp->origin;
  return (will_move - was_moved) * smp->bytes;
}

typedef struct candidate {
  exchange_t x;
  int fits;     /* receiver stays within U */
  double value; /* fits: useful cost per byte (free: +inf); else: the peak */
  double useful;
} candidate_t;

static candidate_t rate(const state_t *s, int32_t hi, int32_t lo,
                        exchange_t x) {
  candidate_t c = {x, s->load[lo] + x.delta <= s->target, 0, 0};
  c.useful = fmin(x.delta, s->load[hi] - s->ctx->lower_bound);
  if (!c.fits) c.value = fmax(s->load[hi] - x.delta, s->load[lo] + x.delta);
  else c.value = x.bytes <= 0 ? INFINITY : c.useful / (double)x.bytes;
  return c;
}

static int better(const candidate_t *a, const candidate_t *b) {
  if (b->x.give < 0 || a->fits != b->fits) return b->x.give < 0 || a->fits;
  if (!a->fits) {
    if (a->value != b->value) return a->value < b->value;
    return a->x.bytes < b->x.bytes;
  }
  if (a->value != b->value) return a->value > b->value;
  if (a->useful != b->useful) return a->useful > b->useful;
  return a->x.bytes < b->x.bytes;
}

/* Rates exchanging i (on hi) for j (on lo, or -1); returns 1 if it became
 * the best. */
static int consider(const state_t *s, int32_t hi, int32_t lo, int64_t i,
                    int64_t j, candidate_t *best) {
  const dpshim__ctx_t *ctx = s->ctx;
  exchange_t x = {i, j, ctx->cost[i], extra_bytes(s, i, lo)};
  int64_t dlen = ctx->samples[i].len;
  if (j >= 0) {
    x.delta -= ctx->cost[j];
    x.bytes += extra_bytes(s, j, hi);
    dlen -= ctx->samples[j].len;
  }
  if (x.delta <= 0) return 0;
  if (s->tokens[lo] + dlen > ctx->cap || s->tokens[hi] - dlen > ctx->cap) return 0;
  candidate_t c = rate(s, hi, lo, x);
  if (!c.fits && c.value >= s->load[hi]) return 0; /* must lower the peak */
  if (!better(&c, best)) return 0;
  *best = c;
  return 1;
}

static candidate_t best_exchange(const state_t *s, int32_t hi, int32_t lo) {
  candidate_t best = {{-1, -1, 0, 0}, 0, 0, 0};
  if (s->count[hi] > 1)
    for (int64_t i = s->head[hi]; i >= 0; i = s->next[i])
      consider(s, hi, lo, i, -1, &best);
  if (best.x.give >= 0 && best.fits) return best;
  /* No move fits the receiver: a swap hands over only the difference. */
  for (int64_t i = s->head[hi]; i >= 0; i = s->next[i])
    for (int64_t j = s->head[lo]; j >= 0; j = s->next[j])
      consider(s, hi, lo, i, j, &best);
  return best;
}

/* ---- driver ------------------------------------------------------------- */

static int init_state(state_t *s, const dpshim__ctx_t *ctx) {
  *s = (state_t){.ctx = ctx,
                 .load = DPSHIM__ALLOC(ctx, double, ctx->ranks),
                 .tokens = DPSHIM__ALLOC(ctx, int64_t, ctx->ranks),
                 .count = DPSHIM__ALLOC(ctx, int64_t, ctx->ranks),
                 .token_key = DPSHIM__ALLOC(ctx, double, ctx->ranks),
                 .target = ctx->lower_bound * (1 + TOLERANCE),
                 .order = ctx->order,
                 .head = DPSHIM__ALLOC(ctx, int64_t, ctx->ranks),
                 .next = DPSHIM__ALLOC(ctx, int64_t, ctx->nsamples),
                 .prev = DPSHIM__ALLOC(ctx, int64_t, ctx->nsamples)};
  if (!s->load || !s->tokens || !s->count || !s->token_key || !s->order || !s->head ||
      !s->next || !s->prev)
    return DPSHIM_ENOMEM;
  for (int32_t r = 0; r < ctx->ranks; r++) {
    s->load[r] = ctx->load0[r];
    s->tokens[r] = s->count[r] = 0;
    s->head[r] = -1;
  }
  for (int64_t i = ctx->nsamples - 1; i >= 0; i--) {
    int32_t r = ctx->samples[i].origin;
    s->tokens[r] += ctx->samples[i].len;
    s->count[r]++;
    link_front(s, i, r);
  }
  for (int32_t r = 0; r < ctx->ranks; r++) s->token_key[r] = (double)s->tokens[r];
  s->trade_key = DPSHIM__ALLOC(ctx, uint64_t, ctx->nsamples);
  s->trade_cost = DPSHIM__ALLOC(ctx, double, ctx->nsamples + 1);
  s->trade_tokens = DPSHIM__ALLOC(ctx, int64_t, ctx->nsamples + 1);
  s->trade_bytes = DPSHIM__ALLOC(ctx, int64_t, ctx->nsamples + 1);
  if (!s->trade_key || !s->trade_cost || !s->trade_tokens || !s->trade_bytes)
    return DPSHIM_ENOMEM;
  return group_by_origin(s);
}

/* First position in order[] (cost descending) whose cost is <= c. */
static int64_t first_at_most(const state_t *s, double c) {
  int64_t lo = 0, hi = s->ctx->nsamples;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (s->ctx->cost[s->order[mid]] <= c) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/* When nothing fits the least-loaded rank, a swap with a sample of nearly
 * the same cost, on any rank with a little room, still lowers hi. The
 * partners come from a cost window of order[], not from a scan of ranks:
 * first those that take hi within U (cost <= c_i - need), then the rest. */
static candidate_t swap_anywhere(const state_t *s, int32_t hi, int32_t *to) {
  candidate_t best = {{-1, -1, 0, 0}, 0, 0, 0};
  const double *cost = s->ctx->cost;
  double need = s->load[hi] - s->target;
  double span = s->load[hi] - s->load[dpshim__rank_tree_min(&s->tree)];
  for (int64_t i = s->head[hi]; i >= 0; i = s->next[i]) {
    int64_t k0 = first_at_most(s, cost[i] - need);
    for (int64_t k = k0; k < s->ctx->nsamples && k < k0 + SWAP_SCAN; k++) {
      int64_t j = s->order[k];
      if (cost[j] <= cost[i] - span) break;
      if (s->ctx->dest[j] != hi && consider(s, hi, s->ctx->dest[j], i, j, &best))
        *to = s->ctx->dest[j];
    }
    for (int64_t k = k0 - 1; k >= 0 && k >= k0 - SWAP_SCAN; k--) {
      int64_t j = s->order[k];
      if (cost[j] >= cost[i]) break;
      if (s->ctx->dest[j] != hi && consider(s, hi, s->ctx->dest[j], i, j, &best))
        *to = s->ctx->dest[j];
    }
  }
  return best;
}

/* ---- trades under the token cap ---------------------------------------- */

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* lo's samples shortest first in trade_key (low half: the index), and the
 * running sums of what handing back the first m of them to hi would move. */
static int64_t index_shortest(state_t *s, int32_t lo, int32_t hi) {
  int64_t n = 0;
  for (int64_t j = s->head[lo]; j >= 0; j = s->next[j])
    s->trade_key[n++] = ((uint64_t)s->ctx->samples[j].len << 32) | (uint64_t)j;
  qsort(s->trade_key, (size_t)n, sizeof *s->trade_key, cmp_u64);
  s->trade_cost[0] = 0;
  s->trade_tokens[0] = s->trade_bytes[0] = 0;
  for (int64_t m = 0; m < n; m++) {
    int64_t j = (int64_t)(s->trade_key[m] & UINT32_MAX);
    s->trade_cost[m + 1] = s->trade_cost[m] + s->ctx->cost[j];
    s->trade_tokens[m + 1] = s->trade_tokens[m] + s->ctx->samples[j].len;
    s->trade_bytes[m + 1] = s->trade_bytes[m] + extra_bytes(s, j, hi);
  }
  return n;
}

/* A receiver full up to the token cap can still take a long sample from hi
 * if it hands back enough of its shortest ones: cost moves, tokens do not.
 * Returns the best such trade; *back is how many samples go back. */
static candidate_t best_trade(state_t *s, int32_t hi, int32_t lo, int64_t *back) {
  const dpshim__ctx_t *ctx = s->ctx;
  candidate_t best = {{-1, -1, 0, 0}, 0, 0, 0};
  int64_t n = index_shortest(s, lo, hi);
  for (int64_t i = s->head[hi]; i >= 0; i = s->next[i]) {
    int64_t len = ctx->samples[i].len, need = s->tokens[lo] + len - ctx->cap;
    if (need <= 0) continue; /* a plain move; best_exchange() saw it */
    int64_t m = 1;
    while (m <= n && s->trade_tokens[m] < need) m++;
    if (m > n || s->tokens[hi] - len + s->trade_tokens[m] > ctx->cap) continue;
    exchange_t x = {i, -1, ctx->cost[i] - s->trade_cost[m],
                    extra_bytes(s, i, lo) + s->trade_bytes[m]};
    if (x.delta <= 0) continue;
    candidate_t c = rate(s, hi, lo, x);
    if ((c.fits || c.value < s->load[hi]) && better(&c, &best)) {
      best = c;
      *back = m;
    }
  }
  return best;
}

static void apply_trade(state_t *s, int32_t hi, int32_t lo, int64_t give,
                        int64_t back) {
  int64_t n = index_shortest(s, lo, hi);
  relocate(s, give, lo);
  for (int64_t m = 0; m < back && m < n; m++)
    relocate(s, (int64_t)(s->trade_key[m] & UINT32_MAX), hi);
}

static int repair(state_t *s) {
  int rc = dpshim__rank_tree_init(&s->tree, s->ctx, s->load);
  if (rc < 0) return rc;
  int64_t rounds = (int64_t)ROUNDS_PER_RANK * s->ctx->ranks;
  for (int64_t round = 0; round < rounds; round++) {
    int32_t hi = dpshim__rank_tree_max(&s->tree);
    int32_t lo = dpshim__rank_tree_min(&s->tree);
    if (s->load[hi] <= s->target || hi == lo) break;
    candidate_t c = best_exchange(s, hi, lo);
    if (!c.fits && USE_SWAP_ANYWHERE) {
      int32_t to = lo;
      candidate_t alt = swap_anywhere(s, hi, &to);
      if (alt.x.give >= 0 && better(&alt, &c)) {
        c = alt;
        lo = to;
      }
    }
    int64_t back = 0;
    candidate_t t = c.fits ? c : best_trade(s, hi, lo, &back);
    if (t.x.give >= 0 && back > 0 && better(&t, &c)) {
      apply_trade(s, hi, lo, t.x.give, back);
    } else if (c.x.give >= 0) {
      relocate(s, c.x.give, lo);
      if (c.x.back >= 0) relocate(s, c.x.back, hi);
    } else {
      break;
    }
    dpshim__rank_tree_update(&s->tree, hi);
    dpshim__rank_tree_update(&s->tree, lo);
  }
  return 0;
}

int dpshim__algo_default(const dpshim__ctx_t *ctx) {
  state_t s;
  int rc = init_state(&s, ctx);
  if (rc == 0) {
    shed(&s);
    rc = place(&s);
  }
  if (rc == 0) rc = repair(&s);
  if (rc < 0) return rc;
  /* Judge on loads summed afresh, not the running totals, whose rounding
   * depends on the path taken. */
  for (int32_t r = 0; r < ctx->ranks; r++) s.load[r] = ctx->history[r];
  for (int64_t i = 0; i < ctx->nsamples; i++) s.load[ctx->dest[i]] += ctx->cost[i];
  double before = dpshim__max_load(ctx->load0, ctx->ranks);
  return dpshim__max_load(s.load, ctx->ranks) < before ? DPSHIM_SKIP_NONE
                                                       : DPSHIM_SKIP_NO_GAIN;
}
