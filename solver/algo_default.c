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
#ifndef FRINGE
#define FRINGE 0.01
#endif
#define UNLOCK_MAX_RANKS 256 /* unlock() scans every rank */
#define BIG_SAMPLE 0.05     /* share of LB above which a sample may evict */

typedef struct state {
  const dpshim__ctx_t *ctx;
  double *load;
  int64_t *tokens;
  int64_t *count;
  double *token_key; /* tokens as a heap key */
  double bound;      /* the cap's lower bound: no plan here does better */
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
    if (cost[i] <= s->load[r] - s->bound && cost[i] <= max_room)
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
  double budget = FRINGE * s->bound;
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
 * first) with an infinite key in the `open` tree, instead of being looked at
 * again for every sample. */
typedef struct placer {
  dpshim__rank_tree_t open;    /* least key first */
  double *key;                 /* load, or +inf while blocked */
  dpshim__rank_heap_t blocked; /* by tokens */
} placer_t;

static void set_key(placer_t *pl, int32_t r, double key) {
  pl->key[r] = key;
  dpshim__rank_tree_update(&pl->open, r);
}

/* After r's load changed. */
static void touch(const state_t *s, placer_t *pl, int32_t r) {
  if (pl->key[r] != INFINITY) set_key(pl, r, s->load[r]);
}

static void block(placer_t *pl, int32_t r) {
  set_key(pl, r, INFINITY);
  dpshim__rank_heap_push(&pl->blocked, r);
}

static void unblock(const state_t *s, placer_t *pl, int64_t len) {
  dpshim__rank_heap_t *b = &pl->blocked;
  while (b->size > 0) {
    int32_t r = dpshim__rank_heap_pop_fresh(b);
    if (!within_cap(s, r, len)) {
      dpshim__rank_heap_push(b, r);
      return;
    }
    set_key(pl, r, s->load[r]);
  }
}

/* The least-loaded open rank; with token room for len, or -1. */
static int32_t least_loaded_fitting(const state_t *s, placer_t *pl, int64_t len) {
  for (;;) {
    int32_t r = dpshim__rank_tree_min(&pl->open);
    if (pl->key[r] == INFINITY) return -1;
    if (within_cap(s, r, len)) return r;
    block(pl, r);
  }
}

static int lighter(const state_t *s, int32_t a, int32_t b) {
  return b < 0 || s->load[a] < s->load[b] || (s->load[a] == s->load[b] && a < b);
}

/* Big samples only: the least-loaded of a few open and a few blocked ranks
 * that can shed shorter samples to fit i, or -1. */
static int32_t room_maker(state_t *s, placer_t *pl, int64_t i) {
  int32_t open[MAKE_ROOM_TRIES], blocked[MAKE_ROOM_TRIES], no = 0, nb = 0,
          best = -1;
  while (no < MAKE_ROOM_TRIES) {
    int32_t r = dpshim__rank_tree_min(&pl->open);
    if (pl->key[r] == INFINITY) break;
    open[no++] = r;
    set_key(pl, r, INFINITY); /* hide it to reach the next one */
  }
  while (nb < MAKE_ROOM_TRIES && pl->blocked.size > 0)
    blocked[nb++] = dpshim__rank_heap_pop_fresh(&pl->blocked);
  for (int32_t p = 0; p < no + nb; p++) {
    int32_t r = p < no ? open[p] : blocked[p - no];
    if (lighter(s, r, best) && can_make_room(s, r, i)) best = r;
  }
  if (best >= 0) make_room(s, best, i);
  for (int32_t p = 0; p < no; p++) set_key(pl, open[p], s->load[open[p]]);
  for (int32_t p = 0; p < nb; p++) dpshim__rank_heap_push(&pl->blocked, blocked[p]);
  return best;
}

/* Home if it has room; else the least-loaded rank with room; else, for a
 * big sample, a rank that makes room; else the least-loaded within the
 * cap; else home. */
static int32_t choose_receiver(state_t *s, placer_t *pl, int64_t i) {
  const dpshim__ctx_t *ctx = s->ctx;
  int64_t len = ctx->samples[i].len;
  if (room_for(s, ctx->samples[i].origin, i)) return ctx->samples[i].origin;
  unblock(s, pl, len);
  int32_t r = least_loaded_fitting(s, pl, len);
  if (r >= 0 && s->load[r] + ctx->cost[i] <= s->target) return r;
  if (ctx->cost[i] >= BIG_SAMPLE * s->bound) {
    int32_t maker = room_maker(s, pl, i);
    if (maker >= 0) return maker;
  }
  return r >= 0 ? r : ctx->samples[i].origin;
}

static int place(state_t *s) {
  const dpshim__ctx_t *ctx = s->ctx;
  placer_t pl = {
      .key = DPSHIM__ALLOC(ctx, double, ctx->ranks),
      .blocked = {DPSHIM__ALLOC(ctx, dpshim__rank_entry_t, ctx->ranks), 0,
                  s->token_key}};
  if (!pl.key || !pl.blocked.e) return DPSHIM_ENOMEM;
  for (int32_t r = 0; r < ctx->ranks; r++) pl.key[r] = s->load[r];
  int rc = dpshim__rank_tree_init(&pl.open, ctx, pl.key, 0);
  for (int64_t k = 0; rc == 0 && k < ctx->nsamples; k++) {
    int64_t i = s->order[k];
    if (ctx->dest[i] >= 0) continue;
    int32_t r = choose_receiver(s, &pl, i);
    give(s, i, r);
    touch(s, &pl, r); /* also covers room_maker's shedding on r */
  }
  return rc;
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
  c.useful = fmin(x.delta, s->load[hi] - s->bound);
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
                 .bound = ctx->lower_bound_cap,
                 .target = ctx->lower_bound_cap * (1 + TOLERANCE),
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

/* When the least-loaded rank is full up to the token cap with short
 * samples, nothing hi hands it fits. A rank x holding longer samples can
 * trade one of them for enough of lo's shortest: lo rises at equal tokens,
 * x falls and gains the room hi needs. Scans every rank, so only for small
 * rank counts, where the cap binds most. Returns the partner or -1. */
static int32_t unlock(state_t *s, int32_t lo) {
  const dpshim__ctx_t *ctx = s->ctx;
  int64_t n = index_shortest(s, lo, lo), give = -1, back = 0;
  int32_t partner = -1;
  double best = 0, room = s->target - s->load[lo];
  for (int32_t x = 0; x < ctx->ranks; x++) {
    if (x == lo) continue;
    for (int64_t i = s->head[x]; i >= 0; i = s->next[i]) {
      int64_t len = ctx->samples[i].len, need = s->tokens[lo] + len - ctx->cap;
      if (need <= 0) continue;
      int64_t m = 1;
      while (m <= n && s->trade_tokens[m] < need) m++;
      if (m > n || s->tokens[x] - len + s->trade_tokens[m] > ctx->cap) continue;
      double delta = ctx->cost[i] - s->trade_cost[m];
      if (delta <= best || delta > room || s->load[x] - delta < s->load[lo]) continue;
      best = delta;
      give = i;
      back = m;
      partner = x;
    }
  }
  if (partner >= 0) apply_trade(s, partner, lo, give, back);
  return partner;
}

static int repair(state_t *s) {
  int rc = dpshim__rank_tree_init(&s->tree, s->ctx, s->load, 1);
  if (rc < 0) return rc;
  int64_t rounds = (int64_t)ROUNDS_PER_RANK * s->ctx->ranks;
  for (int64_t round = 0; round < rounds; round++) {
    int32_t hi = dpshim__rank_tree_max(&s->tree);
    int32_t lo = dpshim__rank_tree_min(&s->tree);
    if (s->load[hi] <= s->target || hi == lo) break;
    candidate_t c = best_exchange(s, hi, lo);
    int64_t back = 0;
    int32_t partner;
    candidate_t t = c.fits ? c : best_trade(s, hi, lo, &back);
    if (t.x.give >= 0 && back > 0 && better(&t, &c)) {
      apply_trade(s, hi, lo, t.x.give, back);
    } else if (!t.fits && s->ctx->ranks <= UNLOCK_MAX_RANKS &&
               (partner = unlock(s, lo)) >= 0) {
      hi = partner; /* the rank whose load changed, for the update below */
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
