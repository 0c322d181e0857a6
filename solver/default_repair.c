/* Step 3 of `default`: while the busiest rank exceeds the target, trade
 * with the least busy one (moves, swaps, long-for-short trades under the
 * token cap, and at small rank counts or far from the bound unlocking a
 * token-full receiver). */
#include <math.h>
#include <stdlib.h>

#include "default_state.h"

#define ROUNDS_PER_RANK 16
#define UNLOCK_MAX_RANKS 256 /* unlock() scans every rank: up to here, or far */
#define POLISH_MAX_RANKS 32  /* best_elsewhere() (or far); pair evening (if far) */
#define SWAP_SCAN 32         /* its swap partners per sample, by cost */
#define EVEN_SWEEPS 3        /* rounds of evening all pairs, then repair */
#define EVEN_MIN 1e-6        /* smallest worthwhile evening, in B^2 */
#define EVEN_WORK 200000     /* exchanges all sweeps may weigh (~1 ms) */
#define SCANS_PER_RANK 2     /* unlock/best_elsewhere calls per rank */
#define FAR_FROM_BOUND 0.003 /* above (1 + this) B, scans run at any rank count */

/* Whether a scan over every rank is worth it: always at small rank counts;
 * at large ones only while the busiest rank is far from the bound, which
 * is rare (the cap binds) and worth the time, not the ~1e-3 left otherwise. */
static int scan_allowed(const dpshim__dstate_t *s, int32_t max_ranks) {
  if (s->ctx->ranks <= max_ranks) return 1;
  int32_t hi = dpshim__rank_tree_max(&s->tree);
  return s->load[hi] > s->bound * (1 + FAR_FROM_BOUND);
}

typedef struct exchange {
  int64_t give, back; /* give: hi -> lo; back: lo -> hi, or -1 for a move */
  double delta;       /* load that leaves hi for lo */
  int64_t price;      /* priced bytes it adds to the plan (negative: saves) */
} exchange_t;

typedef struct candidate {
  exchange_t x;
  int fits;     /* receiver stays within U */
  double value; /* fits: useful cost per priced byte (free: +inf); else:
                   the peak */
  double useful;
} candidate_t;

/* What a repair round does: the candidate's samples go from -> to, and for
 * a trade (back > 0) the receiver's `back` shortest come the other way. */
typedef struct action {
  candidate_t c;
  int32_t from, to;
  int64_t back;
} action_t;

#define NO_ACTION ((action_t){{{-1, -1, 0, 0}, 0, 0, 0}, -1, -1, 0})

static candidate_t rate(const dpshim__dstate_t *s, int32_t hi, int32_t lo,
                        exchange_t x) {
  candidate_t c = {x, s->load[lo] + x.delta <= s->target, 0, 0};
  c.useful = fmin(x.delta, s->load[hi] - s->bound);
  if (!c.fits) c.value = fmax(s->load[hi] - x.delta, s->load[lo] + x.delta);
  else c.value = x.price <= 0 ? INFINITY : c.useful / (double)x.price;
  return c;
}

static int better(const candidate_t *a, const candidate_t *b) {
  if (b->x.give < 0 || a->fits != b->fits) return b->x.give < 0 || a->fits;
  if (!a->fits) {
    if (a->value != b->value) return a->value < b->value;
    return a->x.price < b->x.price;
  }
  if (a->value != b->value) return a->value > b->value;
  if (a->useful != b->useful) return a->useful > b->useful;
  return a->x.price < b->x.price;
}

/* Whether an exchange moving delta from hi to lo that leaves lo above U
 * could be a candidate better than *best: it must lower the peak, and the
 * peak decides before its price does (see rate(), better()). */
static int unfit_may_count(const dpshim__dstate_t *s, int32_t hi, int32_t lo,
                           double delta, const candidate_t *best) {
  if (best->x.give >= 0 && best->fits) return 0;
  double peak = fmax(s->load[hi] - delta, s->load[lo] + delta);
  return peak < s->load[hi] && (best->x.give < 0 || peak <= best->value);
}

/* Rates exchanging i (on hi) for j (on lo, or -1); returns 1 if it became
 * the best. Its bytes are priced last: most exchanges fail before. */
static int consider(const dpshim__dstate_t *s, int32_t hi, int32_t lo,
                    int64_t i, int64_t j, candidate_t *best) {
  const dpshim__ctx_t *ctx = s->ctx;
  exchange_t x = {i, j, ctx->cost[i], 0};
  int64_t dlen = ctx->samples[i].len, drows = ctx->samples[i].rows;
  if (j >= 0) {
    x.delta -= ctx->cost[j];
    dlen -= ctx->samples[j].len;
    drows -= ctx->samples[j].rows;
  }
  if (x.delta <= 0) return 0;
  if (s->tokens[lo] + dlen > ctx->cap || s->tokens[hi] - dlen > ctx->cap) return 0;
  if (!dpshim__dstate_rows_fit_both(s, hi, lo, drows)) return 0;
  if (s->load[lo] + x.delta > s->target &&
      !unfit_may_count(s, hi, lo, x.delta, best))
    return 0;
  x.price = dpshim__dstate_extra_price(s, i, lo) +
            (j >= 0 ? dpshim__dstate_extra_price(s, j, hi) : 0);
  if (!dpshim__dstate_affordable(s, x.price)) return 0;
  candidate_t c = rate(s, hi, lo, x);
  if (!better(&c, best)) return 0;
  *best = c;
  return 1;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* A rank holds a few dozen samples: insertion sort beats qsort's calls
 * there (the repair sorts one rank's samples per receiver it tries). The
 * keys are distinct, so both give the same order. */
static void sort_keys(uint64_t *key, int64_t n) {
  if (n > 64) {
    qsort(key, (size_t)n, sizeof *key, cmp_u64);
    return;
  }
  for (int64_t i = 1; i < n; i++) {
    uint64_t k = key[i];
    int64_t j = i;
    for (; j > 0 && key[j - 1] > k; j--) key[j] = key[j - 1];
    key[j] = k;
  }
}

static uint64_t slot_key(const dpshim__dstate_t *s, int64_t j) {
  return ((uint64_t)s->ctx->size[j] << 32) | (uint64_t)j;
}

/* Rank r's samples' keys, in about the order of their sizes: once the shed
 * step has grouped the samples by origin (largest first), the rank's own
 * samples still on it come from its group backwards, and the others (if
 * it holds any) from its list, so that sorting them moves few. */
static void list_keys(const dpshim__dstate_t *s, int32_t r, int64_t n,
                      uint64_t *key) {
  const dpshim__ctx_t *ctx = s->ctx;
  int64_t m = 0;
  if (!s->group) {
    for (int64_t j = s->head[r]; j >= 0; j = s->next[j]) key[m++] = slot_key(s, j);
    return;
  }
  for (int64_t k = s->start[r + 1] - 1; k >= s->start[r]; k--)
    if (ctx->dest[s->group[k]] == r) key[m++] = slot_key(s, s->group[k]);
  for (int64_t j = s->head[r]; m < n && j >= 0; j = s->next[j])
    if (ctx->origin[j] != r) key[m++] = slot_key(s, j);
}

/* Rank r's slot filled: its samples shortest first, and the running sums. */
static void fill_slot(dpshim__dstate_t *s, int32_t r, int64_t n) {
  struct dpshim__trade_cache *c = &s->cache;
  if (c->room[r] < n + 1) {
    int64_t room = n + 1 + n / 2;
    if (c->used + room > c->size) { /* full: every slot is given up */
      for (int32_t k = 0; k < s->ctx->ranks; k++)
        c->version[k] = -1, c->room[k] = 0;
      c->used = 0;
    }
    c->at[r] = c->used;
    c->room[r] = room;
    c->used += room;
  }
  int64_t at = c->at[r], m;
  uint64_t *key = c->key + at;
  list_keys(s, r, n, key);
  sort_keys(key, n);
  double *cost = c->cost + at, *each = c->each + at;
  int64_t *tokens = c->tokens + at, *rows = c->rows + at;
  cost[0] = 0;
  tokens[0] = rows[0] = 0;
  for (m = 0; m < n; m++) {
    int64_t j = (int64_t)(key[m] & UINT32_MAX);
    each[m] = s->ctx->cost[j];
    cost[m + 1] = cost[m] + s->ctx->cost[j];
    tokens[m + 1] = tokens[m] + s->ctx->len[j];
    /* Without rows caps no rows are asked for: not read from the samples. */
    rows[m + 1] = s->ctx->rows_cap ? rows[m] + s->ctx->samples[j].rows : 0;
  }
  c->version[r] = s->version[r];
}

/* lo's samples shortest first in trade_key (low half: the index), and the
 * running sums of what handing back the first m of them moves: cost,
 * tokens, rows. Returns how many. */
static int64_t index_shortest(dpshim__dstate_t *s, int32_t lo) {
  struct dpshim__trade_cache *c = &s->cache;
  int64_t n = s->count[lo];
  if (c->version[lo] != s->version[lo]) fill_slot(s, lo, n);
  int64_t at = c->at[lo];
  s->trade_key = c->key + at;
  s->trade_cost = c->cost + at;
  s->trade_each = c->each + at;
  s->trade_tokens = c->tokens + at;
  s->trade_rows = c->rows + at;
  return n;
}

/* The position in trade_key (lo's samples by cost ascending) of the last
 * sample costing <= c, or -1. The search halves a window whose samples
 * before it cost <= c and after it more, reading the costs in a row
 * (trade_each) and choosing, not branching, where it goes: best_exchange()
 * asks three times for each of hi's samples. */
static int64_t last_at_most(const dpshim__dstate_t *s, int64_t n, double c) {
  const double *base = s->trade_each;
  if (n <= 0) return -1;
  for (int64_t len = n; len > 1;) {
    int64_t half = len / 2;
    base = base[half - 1] <= c ? base + half : base;
    len -= half;
  }
  return (base - s->trade_each) + (*base <= c) - 1;
}

/* Whether partner k was weighed for an earlier aim (seen[0 .. a), each
 * with the one after it). Weighing the same swap again changes nothing:
 * it did not beat the best then, or it is the best now. */
static int seen_before(const int64_t *seen, int a, int64_t k) {
  for (int b = 0; b < a; b++)
    if (k == seen[b] || k == seen[b] + 1) return 1;
  return 0;
}

static candidate_t best_exchange(dpshim__dstate_t *s, int32_t hi, int32_t lo) {
  candidate_t best = {{-1, -1, 0, 0}, 0, 0, 0};
  if (s->count[hi] > 1)
    for (int64_t i = s->head[hi]; i >= 0; i = s->next[i])
      consider(s, hi, lo, i, -1, &best);
  if (best.x.give >= 0 && best.fits) return best;
  /* No move fits the receiver: a swap hands over only the difference.
   * With lo's samples sorted by cost, each of hi's needs only the partners
   * next to three costs: the one that just takes hi within U, the one that
   * just fills lo to U, and the one that evens the pair. */
  int64_t n = index_shortest(s, lo);
  double need = s->load[hi] - s->target, room = s->target - s->load[lo];
  double even = (s->load[hi] - s->load[lo]) / 2;
  for (int64_t i = s->head[hi]; i >= 0; i = s->next[i]) {
    double aim[3] = {s->ctx->cost[i] - need, s->ctx->cost[i] - room,
                     s->ctx->cost[i] - even};
    int64_t seen[3];
    for (int a = 0; a < 3; a++) {
      seen[a] = last_at_most(s, n, aim[a]);
      for (int64_t k = seen[a]; k <= seen[a] + 1; k++)
        if (k >= 0 && k < n && !seen_before(seen, a, k))
          consider(s, hi, lo, i, (int64_t)(s->trade_key[k] & UINT32_MAX), &best);
    }
  }
  return best;
}

/* ---- trades under the token cap ---------------------------------------- */

/* The first m >= 1 with trade_tokens[m] >= need, or n + 1: a window of
 * [1, n] halved without branches, as in last_at_most() (the sums rise). */
static int64_t shortest_covering(const dpshim__dstate_t *s, int64_t n,
                                 int64_t need) {
  const int64_t *base = s->trade_tokens + 1;
  if (n <= 0) return 1;
  for (int64_t len = n; len > 1;) {
    int64_t half = len / 2;
    base = base[half - 1] < need ? base + half : base;
    len -= half;
  }
  return (base - s->trade_tokens) + (*base < need);
}

/* hi's samples in list order, with their lengths, into s->give: the
 * trades ask them over and over, for one receiver after another, and most
 * are too short to need one. */
static void list_gives(dpshim__dstate_t *s, int32_t hi) {
  s->given = 0;
  for (int64_t i = s->head[hi]; i >= 0; i = s->next[i]) {
    s->give[s->given] = (int32_t)i;
    s->give_len[s->given++] = s->ctx->len[i];
  }
}

/* Whether i may go from -> to while to's m shortest (trade_key) go back. */
static int trade_rows_fit(const dpshim__dstate_t *s, int64_t i, int32_t from,
                          int32_t to, int64_t m) {
  return !s->ctx->rows_cap ||
         dpshim__dstate_rows_fit_both(s, from, to,
                                      s->ctx->samples[i].rows - s->trade_rows[m]);
}

/* Priced bytes added by sending i to lo and lo's m shortest (trade_key)
 * to x. */
static int64_t trade_price(const dpshim__dstate_t *s, int64_t i, int32_t lo,
                           int32_t x, int64_t m) {
  int64_t price = dpshim__dstate_extra_price(s, i, lo);
  for (int64_t k = 0; k < m; k++)
    price += dpshim__dstate_extra_price(
        s, (int64_t)(s->trade_key[k] & UINT32_MAX), x);
  return price;
}

/* Whether a trade moving delta from hi to lo can be a candidate: it moves
 * some cost, and keeps lo within U (fits_only: nothing else is wanted) or
 * lowers the peak; rate() would say so, from loads alone. */
static int trade_may_count(const dpshim__dstate_t *s, int32_t hi, int32_t lo,
                           double delta, int fits_only) {
  if (delta <= 0) return 0;
  if (s->load[lo] + delta <= s->target) return 1;
  return !fits_only &&
         fmax(s->load[hi] - delta, s->load[lo] + delta) < s->load[hi];
}

/* Whether ranks a and b together hold more than twice the token cap: in a
 * trade what comes back covers what the receiver lacks, so the giver ends
 * with at least their tokens less the cap, above it; no trade between them
 * is within it. (As differences: with no cap, INT64_MAX, a sum overflows.) */
static int over_cap_together(const dpshim__dstate_t *s, int32_t a, int32_t b) {
  return s->tokens[a] - s->ctx->cap > s->ctx->cap - s->tokens[b];
}

/* A receiver full up to the token cap can still take a long sample from hi
 * if it hands back enough of its shortest ones: cost moves, tokens do not.
 * Returns the best such trade (fits_only: the best that keeps lo within U,
 * or none); *back is how many samples go back. */
static candidate_t best_trade(dpshim__dstate_t *s, int32_t hi, int32_t lo,
                              int64_t *back, int fits_only) {
  const dpshim__ctx_t *ctx = s->ctx;
  candidate_t best = {{-1, -1, 0, 0}, 0, 0, 0};
  /* Where no trade is within the cap, lo's samples are not sorted to find
   * out. */
  if (over_cap_together(s, hi, lo)) return best;
  int64_t n = index_shortest(s, lo);
  for (int64_t k = 0; k < s->given; k++) {
    int64_t i = s->give[k], len = s->give_len[k];
    int64_t need = s->tokens[lo] + len - ctx->cap;
    if (need <= 0) continue; /* a plain move; best_exchange() saw it */
    int64_t m = shortest_covering(s, n, need);
    if (m > n || s->tokens[hi] - len + s->trade_tokens[m] > ctx->cap) continue;
    double delta = ctx->cost[i] - s->trade_cost[m];
    /* Priced (a loop over the m) only if it could count. */
    if (!trade_may_count(s, hi, lo, delta, fits_only) ||
        !trade_rows_fit(s, i, hi, lo, m))
      continue;
    exchange_t x = {i, -1, delta, trade_price(s, i, lo, hi, m)};
    if (!dpshim__dstate_affordable(s, x.price)) continue;
    candidate_t c = rate(s, hi, lo, x);
    if (better(&c, &best)) {
      best = c;
      *back = m;
    }
  }
  return best;
}

static void apply_trade(dpshim__dstate_t *s, int32_t hi, int32_t lo,
                        int64_t give, int64_t back) {
  int64_t n = index_shortest(s, lo);
  dpshim__dstate_relocate(s, give, lo);
  for (int64_t m = 0; m < back && m < n; m++)
    dpshim__dstate_relocate(s, (int64_t)(s->trade_key[m] & UINT32_MAX), hi);
}

/* Rank r's longest sample's tokens, kept while r is unchanged, with the
 * first such sample (list order), the longest of the others, the costliest
 * sample's cost and the most cost per token: unlock() asks for every rank,
 * most have none long enough, and of the rest most have just the one or
 * none costly enough to beat the best trade so far; trade_may_fit() asks
 * the last two. */
static int64_t longest_walk(dpshim__dstate_t *s, int32_t r) {
  struct dpshim__trade_cache *c = &s->cache;
  int64_t longest = 0, second = 0, at = -1;
  double costliest = 0, densest = 0;
  for (int64_t i = s->head[r]; i >= 0; i = s->next[i]) {
    int64_t len = s->ctx->len[i];
    double cost = s->ctx->cost[i];
    if (len > longest) second = longest, longest = len, at = i;
    else if (len > second) second = len;
    if (cost > costliest) costliest = cost;
    if (cost > densest * (double)len) /* len 0: costs without tokens */
      densest = len > 0 ? cost / (double)len : INFINITY;
  }
  c->longest_version[r] = s->version[r];
  c->longest_at[r] = at;
  c->second[r] = second;
  c->costliest[r] = costliest;
  c->densest[r] = densest;
  return c->longest[r] = longest;
}

/* The cached answer inline (unlock() asks for every rank, each round). */
static inline int64_t longest_on(dpshim__dstate_t *s, int32_t r) {
  const struct dpshim__trade_cache *c = &s->cache;
  return c->longest_version[r] == s->version[r] ? c->longest[r]
                                                 : longest_walk(s, r);
}

/* One of unlock()'s trades: x's sample i for lo's shortest (n >= 1 of
 * them), taken if it moves more than *best. Costs are never negative, so
 * no trade moves more than i's cost less lo's shortest sample's (rounding
 * is monotone): a sample no costlier than that plus *best is passed over
 * before the search for how many go back. Inlined: unlock() runs it for
 * every sample of every rank it asks, and a call cost a fifth of it. */
__attribute__((always_inline)) static inline void
unlock_with(dpshim__dstate_t *s, int32_t lo, int64_t n, int32_t x, int64_t i,
            double *best, action_t *a) {
  const dpshim__ctx_t *ctx = s->ctx;
  int64_t len = ctx->samples[i].len, need = s->tokens[lo] + len - ctx->cap;
  if (need <= 0 || ctx->cost[i] - s->trade_cost[1] <= *best) return;
  int64_t m = shortest_covering(s, n, need);
  if (m > n || s->tokens[x] - len + s->trade_tokens[m] > ctx->cap) return;
  if (!trade_rows_fit(s, i, x, lo, m)) return;
  double delta = ctx->cost[i] - s->trade_cost[m];
  if (delta <= *best || delta > s->target - s->load[lo] ||
      s->load[x] - delta < s->load[lo])
    return;
  if (!dpshim__dstate_affordable(s, trade_price(s, i, lo, x, m))) return;
  *best = delta;
  *a = (action_t){{{i, -1, delta, 0}, 1, 0, 0}, x, lo, m};
}

/* The first position in order[] (cost descending) costing at most c, or
 * (below) less than c. */
static int64_t first_costing(const dpshim__dstate_t *s, double c, int below) {
  int64_t lo = 0, hi = s->ctx->nsamples;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    double cost = s->ctx->cost[s->order[mid]];
    if (below ? cost < c : cost <= c) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/* Whether no sample can trade with lo as unlock() trades, told from the
 * samples long enough to need lo's shortest back alone where they are
 * fewer than the ranks: each costs at least its length's cost without
 * images (the vision terms only add), so they are among a prefix of
 * order[]. Else (or where one can) unlock() asks every rank. On
 * dpshim-sim's VLM presets at 4096 ranks that prefix holds 500-3000
 * samples, and none trades. */
static int none_unlocks(dpshim__dstate_t *s, int32_t lo, int64_t n) {
  const dpshim__ctx_t *ctx = s->ctx;
  int64_t shortest = ctx->cap - s->tokens[lo] + 1; /* need > 0 from here */
  dpshim_sample_t text = {.len = shortest > 0 ? shortest : 0};
  int64_t end = first_costing(s, dpshim__sample_cost(ctx->model, &text), 1);
  if (end >= ctx->ranks) return 0;
  for (int64_t k = 0; k < end; k++) {
    int64_t i = s->order[k];
    int32_t x = ctx->dest[i];
    double best = 0;
    action_t a = NO_ACTION;
    if (ctx->len[i] < shortest || x == lo || over_cap_together(s, x, lo))
      continue;
    unlock_with(s, lo, n, x, i, &best, &a);
    if (a.c.x.give >= 0) return 0;
  }
  return 1;
}

/* When the least-loaded rank is full up to the token cap with short
 * samples, nothing hi hands it fits. A rank x holding longer samples can
 * trade one of them for enough of lo's shortest: lo rises at equal tokens,
 * x falls and gains the room hi needs. It tries every rank as the partner,
 * so it runs at small rank counts, where the cap binds most, or far from
 * the bound (at large rank counts near it, it cost more than twice the
 * solve for a gain of ~2e-4 of the load). A rank whose other samples are
 * all too short offers its longest alone, without a walk of its list; one
 * whose costliest sample cannot beat the best so far is passed over, and
 * once the best fills lo's room under U no trade can beat it. */
static action_t unlock(dpshim__dstate_t *s, int32_t lo, int64_t *effort) {
  const dpshim__ctx_t *ctx = s->ctx;
  if (!scan_allowed(s, UNLOCK_MAX_RANKS) || (*effort)-- <= 0) return NO_ACTION;
  int64_t n = index_shortest(s, lo);
  action_t a = NO_ACTION;
  if (n > 0 && none_unlocks(s, lo, n)) return a;
  double best = 0, room = s->target - s->load[lo];
  for (int32_t x = 0; x < ctx->ranks && n > 0 && best < room; x++) {
    if (x == lo || over_cap_together(s, x, lo) ||
        s->tokens[lo] + longest_on(s, x) <= ctx->cap ||
        s->cache.costliest[x] - s->trade_cost[1] <= best)
      continue;
    int alone = s->cache.longest_at[x] >= 0 &&
                s->tokens[lo] + s->cache.second[x] <= ctx->cap;
    for (int64_t i = alone ? s->cache.longest_at[x] : s->head[x]; i >= 0;
         i = alone ? -1 : s->next[i])
      unlock_with(s, lo, n, x, i, &best, &a);
  }
  return a;
}

/* Whether the token cap keeps lo from taking hi's longest sample. */
static int cap_binds(dpshim__dstate_t *s, int32_t hi, int32_t lo) {
  return s->tokens[lo] + longest_on(s, hi) > s->ctx->cap;
}

/* hi's shortest sample, the cheapest: no move from hi fits a rank without
 * room for it. */
static int64_t shortest_on(const dpshim__dstate_t *s, int32_t hi) {
  int64_t best = -1;
  for (int64_t i = s->head[hi]; i >= 0; i = s->next[i])
    if (best < 0 || s->ctx->size[i] < s->ctx->size[best]) best = i;
  return best;
}

/* The first of the n viable ranks with room for i, or -1. */
static int32_t first_room(const dpshim__dstate_t *s, int32_t n, int64_t i) {
  for (int32_t k = 0; k < n; k++)
    if (dpshim__dstate_room_for(s, s->viable[k], i)) return s->viable[k];
  return -1;
}

/* A move of one of hi's samples to any rank that keeps it within U. Only
 * ranks with load and token room for hi's shortest sample can take any
 * (rows room for it they may lack: another may have fewer rows).
 * For one sample, every receiver that fits rates the same but its home
 * (free): the home and the first other rank that fits are all it needs. */
static action_t move_elsewhere(dpshim__dstate_t *s, int32_t hi) {
  action_t best = NO_ACTION;
  int64_t least = shortest_on(s, hi);
  if (least < 0 || s->count[hi] < 2) return best;
  int32_t n = 0;
  for (int32_t r = 0; r < s->ctx->ranks; r++)
    if (r != hi && dpshim__dstate_load_room_for(s, r, least)) s->viable[n++] = r;
  for (int64_t i = s->head[hi]; i >= 0 && n > 0; i = s->next[i]) {
    int32_t home = s->ctx->samples[i].origin, r = first_room(s, n, i);
    if (home == hi || !dpshim__dstate_room_for(s, home, i)) home = -1;
    int32_t a = home >= 0 && (r < 0 || home < r) ? home : r;
    int32_t b = a == home ? r : home;
    if (a >= 0 && consider(s, hi, a, i, -1, &best.c)) best.to = a;
    if (b >= 0 && b != a && consider(s, hi, b, i, -1, &best.c)) best.to = b;
  }
  best.from = hi;
  return best.c.fits ? best : NO_ACTION;
}

/* A swap with a sample elsewhere whose cost is just enough lower, found
 * through order[], not by sorting every rank. */
static action_t swap_elsewhere(dpshim__dstate_t *s, int32_t hi) {
  action_t best = NO_ACTION;
  double need = s->load[hi] - s->target;
  double room = s->target - s->load[dpshim__rank_tree_min(&s->tree)];
  for (int64_t i = s->head[hi]; i >= 0; i = s->next[i]) {
    int64_t k = first_costing(s, s->ctx->cost[i] - need, 0);
    for (int64_t end = k + SWAP_SCAN; k < end && k < s->ctx->nsamples; k++) {
      int64_t j = s->order[k];
      int32_t r = s->ctx->dest[j];
      if (s->ctx->cost[j] < s->ctx->cost[i] - room) break;
      if (r != hi && consider(s, hi, r, i, j, &best.c)) best.to = r;
    }
  }
  best.from = hi;
  return best.c.x.give >= 0 && best.c.fits ? best : NO_ACTION;
}

/* Whether one of hi's gives (list_gives()) could go to r for r's shortest
 * and leave r within U. What comes back covers the give's need but for its
 * last sample: it costs at most r's most cost per token times the need,
 * plus that last sample, which costs less than the give (else nothing
 * moves) and at most r's costliest. A bound that sorts nothing: most of
 * the trade scan's receivers fail it (Qwen2-VL at 4096 ranks: 80-85 %; the
 * closest trade leaves r ~8 % of U above it), and their samples go
 * unsorted. The margin covers the sums' rounding (a few ulps of U). */
static int trade_may_fit(dpshim__dstate_t *s, int32_t r) {
  const dpshim__ctx_t *ctx = s->ctx;
  longest_on(s, r);
  double densest = s->cache.densest[r], costliest = s->cache.costliest[r];
  double room = s->target - s->load[r] + 1e-9 * s->target;
  for (int64_t k = 0; k < s->given; k++) {
    int64_t i = s->give[k], need = s->tokens[r] + s->give_len[k] - ctx->cap;
    double give = ctx->cost[i], back = densest * (double)need;
    if (need > 0 && give - (back + fmin(costliest, give)) <= room) return 1;
  }
  return 0;
}

/* A long-for-short trade with every rank below U that the cap keeps from
 * taking hi's longest sample (a rank at U or above cannot fit one). */
static action_t trade_elsewhere(dpshim__dstate_t *s, int32_t hi) {
  action_t best = NO_ACTION;
  int64_t longest = longest_on(s, hi);
  list_gives(s, hi);
  for (int32_t r = 0; r < s->ctx->ranks; r++) {
    if (r == hi || s->load[r] >= s->target ||
        s->tokens[r] + longest <= s->ctx->cap ||
        over_cap_together(s, hi, r) ||
        !trade_may_fit(s, r))
      continue; /* the last two: best_trade() would find none */
    int64_t back = 0;
    candidate_t t = best_trade(s, hi, r, &back, 1);
    if (t.x.give >= 0 && t.fits && better(&t, &best.c))
      best = (action_t){t, hi, r, back};
  }
  return best;
}

/* At small rank counts, or far from the bound, every rank is worth asking:
 * a move that keeps the receiver within U, else such a swap, else such a
 * trade. */
static action_t best_elsewhere(dpshim__dstate_t *s, int32_t hi,
                               int64_t *effort) {
  if (!scan_allowed(s, POLISH_MAX_RANKS) || (*effort)-- <= 0) return NO_ACTION;
  action_t best = move_elsewhere(s, hi);
  if (best.c.x.give < 0) best = swap_elsewhere(s, hi);
  if (best.c.x.give < 0) best = trade_elsewhere(s, hi);
  return best;
}

/* The scans over every rank (best_elsewhere(), unlock()): a few calls per
 * rank; above POLISH_MAX_RANKS, no unlock that takes back what the last
 * one moved. With about one sample a rank (mix22 at 128-4096 ranks, mix28),
 * unlock() traded one sample back and forth between two light ranks every
 * round, each a scan of every rank, until the calls ran out, the peak
 * unmoved: 200x seed's solve for a plan with no gain. */
typedef struct scans {
  int64_t effort;
  int64_t unlocked; /* the sample unlock() last moved, and from where */
  int32_t unlocked_from;
} scans_t;

/* Whether unlock's action u would only take back what the last one moved. */
static int undoes_unlock(const scans_t *sc, const action_t *u) {
  return u->c.x.give == sc->unlocked && u->to == sc->unlocked_from;
}

/* The round's action: the best exchange with lo if it keeps lo within U;
 * under a binding cap, a trade; at small rank counts or far from the
 * bound, an exchange with any receiver within U; then a trade that beats
 * the exchange, an unlock of lo, or the exchange that lowers the peak.
 * NO_ACTION when nothing helps. */
static action_t choose(dpshim__dstate_t *s, int32_t hi, int32_t lo,
                       scans_t *sc) {
  action_t a = {best_exchange(s, hi, lo), hi, lo, 0};
  if (a.c.fits) return a;
  int capped = cap_binds(s, hi, lo);
  if (capped) {
    int64_t back = 0;
    list_gives(s, hi);
    candidate_t t = best_trade(s, hi, lo, &back, 0);
    if (t.x.give >= 0 && better(&t, &a.c)) a = (action_t){t, hi, lo, back};
    if (a.c.fits) return a;
  }
  action_t e = best_elsewhere(s, hi, &sc->effort);
  if (e.c.x.give >= 0) return e;
  if (capped && a.back == 0) {
    action_t u = unlock(s, lo, &sc->effort);
    if (u.c.x.give >= 0 &&
        !(s->ctx->ranks > POLISH_MAX_RANKS && undoes_unlock(sc, &u))) {
      sc->unlocked = u.c.x.give, sc->unlocked_from = u.from;
      return u;
    }
  }
  return a;
}

static void apply(dpshim__dstate_t *s, const action_t *a) {
  if (a->back > 0) {
    apply_trade(s, a->from, a->to, a->c.x.give, a->back);
    return;
  }
  dpshim__dstate_relocate(s, a->c.x.give, a->to);
  if (a->c.x.back >= 0) dpshim__dstate_relocate(s, a->c.x.back, a->from);
}

/* ---- evening pairs (small rank counts) ---------------------------------- */

/* How much exchanging i (on a) for j (on b, or -1) evens the pair: a^2 +
 * b^2 falls by 2 d (gap - d) for a transfer d in (0, gap). 0 if it does not
 * help or breaks the cap or the traffic budget. */
static double evening(const dpshim__dstate_t *s, int32_t a, int32_t b,
                      int64_t i, int64_t j) {
  const dpshim__ctx_t *ctx = s->ctx;
  double gap = s->load[a] - s->load[b];
  double d = ctx->cost[i] - (j >= 0 ? ctx->cost[j] : 0);
  int64_t dl = ctx->samples[i].len - (j >= 0 ? ctx->samples[j].len : 0);
  int64_t dr = ctx->samples[i].rows - (j >= 0 ? ctx->samples[j].rows : 0);
  if (d <= 0 || d >= gap) return 0;
  if (s->tokens[b] + dl > ctx->cap || s->tokens[a] - dl > ctx->cap) return 0;
  if (!dpshim__dstate_rows_fit_both(s, a, b, dr)) return 0;
  int64_t price = dpshim__dstate_extra_price(s, i, b) +
                  (j >= 0 ? dpshim__dstate_extra_price(s, j, a) : 0);
  return dpshim__dstate_affordable(s, price) ? d * (gap - d) : 0;
}

typedef struct evening_pick {
  int64_t i, j;
  double value;
} evening_pick_t;

/* d: what evening() finds (i's cost less j's), gap: a's load less b's.
 * evening() is 0 or d (gap - d): below the best, it is not weighed. */
static void pick(const dpshim__dstate_t *s, int32_t a, int32_t b, int64_t i,
                 int64_t j, double d, double gap, evening_pick_t *best) {
  if (!(d * (gap - d) > best->value)) return;
  double v = evening(s, a, b, i, j);
  if (v > best->value) *best = (evening_pick_t){i, j, v};
}

/* Rank b's samples with their costs and places in its list: the
 * exchanges with one of a's samples that cannot even the pair are told
 * apart on these alone (most of them, near the end). Sorted ascending by
 * cost (then place), those that can are a window found by bisection:
 * where b holds at most SIDE_SORTED samples and at most 4 per sample of
 * a's (the insertion sort then costs no more than a scan of all the
 * exchanges); else in list order. */
#define SIDE_SORTED 256
typedef struct evening_side {
  double *cost;
  int64_t *sample, *place, n;
  int sorted;
} evening_side_t;

static void side_of(const dpshim__dstate_t *s, int32_t a, int32_t b,
                    evening_side_t *side) {
  int sort = s->count[b] <= SIDE_SORTED && s->count[b] <= 4 * s->count[a];
  side->sorted = sort;
  side->n = 0;
  for (int64_t j = s->head[b]; j >= 0; j = s->next[j]) {
    double c = s->ctx->cost[j];
    int64_t q = side->n;
    for (; sort && q > 0 && side->cost[q - 1] > c; q--) {
      side->cost[q] = side->cost[q - 1];
      side->sample[q] = side->sample[q - 1];
      side->place[q] = side->place[q - 1];
    }
    side->cost[q] = c, side->sample[q] = j, side->place[q] = side->n++;
  }
}

/* The first of the side's (ascending) costs c with ci - c below `under`
 * (or at most it, where !strict): ci - c, rounded too, falls as c rises. */
static int64_t first_under(const evening_side_t *side, double ci, double under,
                           int strict) {
  int64_t lo = 0, hi = side->n;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    double d = ci - side->cost[mid];
    if (strict ? d < under : d <= under) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/* Of the sorted side's samples that exchanged for i could even the pair
 * (cost difference in (0, gap): a window), the one evening() values most
 * above best, the earliest in b's list among equals: what a scan of the
 * list in order keeps. */
static void best_for(const dpshim__dstate_t *s, int32_t a, int32_t b, int64_t i,
                     double gap, const evening_side_t *side,
                     evening_pick_t *best) {
  double ci = s->ctx->cost[i], base = best->value;
  int64_t to = first_under(side, ci, 0, 0), top_place = -1;
  evening_pick_t top = {-1, -1, base};
  for (int64_t q = first_under(side, ci, gap, 1); q < to; q++) {
    double d = ci - side->cost[q], v = d * (gap - d);
    if (v < top.value ||
        (v == top.value && (top.j < 0 || side->place[q] > top_place)))
      continue;
    if (evening(s, a, b, i, side->sample[q]) > base)
      top = (evening_pick_t){i, side->sample[q], v}, top_place = side->place[q];
  }
  if (top.j >= 0) *best = top;
}

/* The best evening move or swap from a to b, applied; 0 if none helps.
 * Each exchange weighed is taken from *work. Only exchanges whose cost
 * difference lies in (0, gap) are weighed in full (evening() returns 0
 * for the others); the first best in list order is kept. */
static int even_pair(dpshim__dstate_t *s, int32_t a, int32_t b, int64_t *work,
                     evening_side_t *side) {
  evening_pick_t best = {-1, -1, EVEN_MIN * s->bound * s->bound};
  *work -= s->count[a] * (s->count[b] + 1);
  double gap = s->load[a] - s->load[b];
  side_of(s, a, b, side);
  for (int64_t i = s->head[a]; i >= 0; i = s->next[i]) {
    double ci = s->ctx->cost[i];
    if (s->count[a] > 1 && !(ci <= 0 || ci >= gap))
      pick(s, a, b, i, -1, ci, gap, &best);
    if (side->sorted) {
      best_for(s, a, b, i, gap, side, &best);
      continue;
    }
    for (int64_t q = 0; q < side->n; q++) {
      double d = ci - side->cost[q];
      if (!(d <= 0 || d >= gap))
        pick(s, a, b, i, side->sample[q], d, gap, &best);
    }
  }
  if (best.i < 0) return 0;
  dpshim__dstate_relocate(s, best.i, b);
  if (best.j >= 0) dpshim__dstate_relocate(s, best.j, a);
  return 1;
}

/* One sweep over all ordered pairs, while *work lasts: the repair's moves
 * all start at the busiest rank, and can be left with no receiver that
 * fits; evening every pair a little makes room that the next repair can
 * use. */
static int even_all_pairs(dpshim__dstate_t *s, int64_t *work,
                          evening_side_t *side) {
  int changed = 0;
  for (int32_t a = 0; a < s->ctx->ranks; a++)
    for (int32_t b = 0; b < s->ctx->ranks && *work > 0; b++)
      if (s->load[a] > s->load[b]) changed |= even_pair(s, a, b, work, side);
  return changed;
}

static int repair_busiest(dpshim__dstate_t *s);

/* Evening all pairs weighs every exchange between every two ranks: worth
 * it only while the plan is far from the bound (the cap binds), not for
 * the last ~1e-3, and only within EVEN_WORK: where the bound is loose (a
 * few long samples per rank) sweeps would go on without gain. */
int dpshim__default_repair(dpshim__dstate_t *s) {
  int rc = repair_busiest(s);
  int64_t work = EVEN_WORK;
  evening_side_t side = {NULL, NULL, NULL, 0, 0};
  if (rc == 0 && s->ctx->ranks <= POLISH_MAX_RANKS) {
    side.cost = DPSHIM__ALLOC(s->ctx, double, s->ctx->nsamples);
    side.sample = DPSHIM__ALLOC(s->ctx, int64_t, s->ctx->nsamples);
    side.place = DPSHIM__ALLOC(s->ctx, int64_t, s->ctx->nsamples);
    if (!side.cost || !side.sample || !side.place) return DPSHIM_ENOMEM;
  }
  for (int sweep = 0; rc == 0 && sweep < EVEN_SWEEPS && work > 0 &&
                      s->ctx->ranks <= POLISH_MAX_RANKS &&
                      dpshim__max_load(s->load, s->ctx->ranks) >
                          s->bound * (1 + FAR_FROM_BOUND);
       sweep++) {
    if (!even_all_pairs(s, &work, &side)) break;
    rc = repair_busiest(s);
  }
  return rc;
}

static int repair_busiest(dpshim__dstate_t *s) {
  int rc = dpshim__rank_tree_init(&s->tree, s->ctx, s->load, 1);
  if (rc < 0) return rc;
  int64_t rounds = (int64_t)ROUNDS_PER_RANK * s->ctx->ranks;
  scans_t sc = {(int64_t)SCANS_PER_RANK * s->ctx->ranks, -1, -1};
  for (int64_t round = 0; round < rounds; round++) {
    int32_t hi = dpshim__rank_tree_max(&s->tree);
    int32_t lo = dpshim__rank_tree_min(&s->tree);
    if (s->load[hi] <= s->target || hi == lo) break;
    action_t a = choose(s, hi, lo, &sc);
    if (a.c.x.give < 0) break;
    apply(s, &a);
    dpshim__rank_tree_update(&s->tree, a.from);
    dpshim__rank_tree_update(&s->tree, a.to);
  }
  return 0;
}
