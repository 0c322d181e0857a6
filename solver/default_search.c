/* `default`'s exact search at small scale (at most SEARCH_RANKS ranks and
 * SEARCH_SAMPLES samples, no rows caps). Its core is a depth-first branch
 * and bound that re-deals the samples of a set of ranks among those ranks,
 * costliest first, on a work budget, in one of two modes:
 *   - makespan: a lower maximum load over the set. Children least-loaded
 *     rank first (the first leaf is LPT's plan); of ranks in the same
 *     state only the first is tried;
 *   - bytes: the fewest bytes moved, priced (dpshim__move_price: a byte
 *     across hosts costs more), with every load at most a limit. Children
 *     home first, then the plan's rank, then by price and load; the bound
 *     counts, at the cheapest price of leaving home within the set, the
 *     samples whose home cannot take them now, and per home the cheapest
 *     fractional cover of what its samples exceed its room by.
 * Both prune on the room left below the limit (in cost and tokens) and on
 * ranks that would be left empty; a sample the same as the one before
 * takes no earlier rank of the set.
 * It runs on all ranks at once; where that leaves the budget unspent, the
 * tree was searched whole (a makespan so found is optimal). Else on
 * neighbourhoods (a large neighbourhood search): the busiest rank with one,
 * then two others, for the makespan; each rank with a home of its guests
 * and the least loaded rank, for bytes; until no neighbourhood improves or
 * the budget is spent. Each improvement is exact for its set; the plan
 * never gets worse. The makespan neighbourhoods also run alone, down to a
 * given level on a smaller budget (_search_down): most samples then stay
 * where the plan they start from put them. Budgets count work (per node, the ranks of the set,
 * plus its samples in bytes mode; per set, its set-up), not time: the same
 * plan on every rank. */
#include <math.h>

#include "internal.h"

#define SEARCH_RANKS 32
#define SEARCH_SAMPLES 256
#define FULL_WORK 150000  /* the search over all ranks */
#define LOCAL_WORK 30000  /* one neighbourhood */
#define TOTAL_WORK 300000 /* one mode, all searches: ~1 ms meant, ~4 ms here */
#define DOWN_WORK 40000   /* _search_down's neighbourhoods */
/* Makespan: stop this close to the bound; count a plan only this much
 * lower as better (not an artefact of summation order). */
#define STOP_ABOVE_BOUND 1e-4
#define BETTER 1e-9
/* Loads summed in search order may differ from the plan's by rounding:
 * bytes mode allows that much in the search, and checks each plan it
 * keeps on loads summed as the plan's are. */
#define ROUNDING 1e-12

/* What a makespan node reads of its depth k: cost, tokens, the cost of
 * the samples from k on less the rounding room_left allows, the most
 * tokens a place may hold to take it, its home's place, whether a twin. */
typedef struct depth {
  double cost, rest;
  int64_t len, tokens_max;
  int32_t home, twin;
} depth_t;

typedef struct search {
  const dpshim__ctx_t *ctx;
  int bytes_mode;
  int64_t work, node_work, budget, spent, total; /* total: all searches */
  int done, out_of_budget;
  /* The set searched: ranks, and their samples costliest first. */
  int32_t *set, nset;
  int64_t *items, n;
  int64_t *by_ratio;    /* [n] depths by leave price per cost, for the bound */
  /* [n + 1] the depths not placed yet in by_ratio's order, linked (n: the
   * head): the bound reads only those; a depth leaves while placed. */
  int64_t *ratio_next, *ratio_prev;
  int64_t *leave;       /* [n] bytes mode: the least price of leaving home */
  /* [n + 1] bytes mode: leave's sum from depth k on, which bounds
   * bytes_bound from above where leave_sure (bound_admits). */
  int64_t *rest_leave;
  int leave_sure;
  uint8_t *stays;       /* [n] scratch: whether home could take it now */
  double limit; /* makespan: loads stay below it; bytes: at most it */
  double stop;
  /* What every node reads, per depth and per place (a rank's position in
   * the set), gathered once per set: the nodes touch no sample and no
   * rank array. */
  double *cost;         /* [n] */
  int64_t *len;         /* [n] */
  int32_t *home;        /* [n] the origin's place, or -1 outside the set */
  int32_t *now;         /* [n] the plan's place (the best leaf's) */
  uint8_t *twin;        /* [n] the same sample as the one before */
  int64_t *price;       /* [n * nset] bytes mode: priced bytes at each place */
  int32_t *placed;      /* [n] where the search put each depth */
  struct depth *depth;  /* [n] what a makespan node reads, in one place */
  double *load;         /* [nset] */
  int64_t *tokens, *count; /* [nset] */
  int tokens_fit; /* the set's tokens fit its caps: token room never prunes */
  /* The room left below the limit cannot fall short of the samples not
   * placed (room_sure, set by sure_of_room): nodes skip summing it. */
  int room_sure;
  double sum, sum_abs; /* the set's histories and costs, and |those| */
  int32_t empty;        /* places holding no sample yet */
  int32_t *at;          /* [nsamples] where a leaf puts each sample */
  int32_t *kids;        /* [n * nset] children per depth */
  double *rest_cost;    /* [n + 1] cost of items[k..] */
  int64_t *rest_tokens; /* [n + 1] tokens of items[k..] */
  int64_t bytes, best_bytes; /* priced */
  uint8_t *in_set;      /* [ranks] */
  int32_t *pos;         /* [ranks] place in the set */
  double *exact;        /* [ranks] scratch */
  uint8_t *hosts;       /* [ranks * ranks] bytes mode: r holds o's samples */
  double *rank_load;    /* [ranks] scratch: the plan's loads */
  int32_t *by_load;     /* [ranks] scratch: ranks by those, least first */
} search_t;

/* Whether depth k fits at place j. */
static inline int fits(const search_t *s, int32_t j, int64_t k) {
  if (s->len[k] > s->ctx->cap - s->tokens[j]) return 0;
  double load = s->load[j] + s->cost[k];
  return s->bytes_mode ? load <= s->limit * (1 + ROUNDING) : load < s->limit;
}

/* Whether the samples from depth k on can still fill the room left. The
 * token room left is the set's caps less the tokens of depths before k,
 * so against the tokens from k on it is one test per set (tokens_fit). */
static int room_left(const search_t *s, int64_t k) {
  if (s->empty > s->n - k) return 0;
  if (s->room_sure) return s->tokens_fit;
  double room = 0, limit = s->limit;
  for (int32_t j = 0; j < s->nset; j++)
    if (s->load[j] < limit) room += limit - s->load[j];
  if (room < s->rest_cost[k] * (1 - ROUNDING) - ROUNDING * limit) return 0;
  return s->tokens_fit;
}

/* Whether the room test cannot prune under the current limit. The room
 * (each place's distance below the limit, those above counting 0) is at
 * least nset x limit less the places' loads, and the samples not placed
 * cost the set's sum less those loads: so room minus the rest is at
 * least nset x limit less the sum, whatever was placed where. Where
 * that is clearly positive (far beyond rounding, which is below 1e-13 of
 * the magnitudes at SEARCH_SAMPLES terms), the summed room passes too.
 * The limit never falls below the set's mean (it is some deal's maximum),
 * so this fails only where a deal is within 1e-9 of perfectly even. */
static void sure_of_room(search_t *s) {
  double slack = s->nset * s->limit - s->sum;
  s->room_sure = slack > 1e-9 * (s->nset * fabs(s->limit) + s->sum_abs);
}

/* A bound on the bytes still to move: the samples from depth k on whose
 * home is outside the set or cannot take them now, and, per home, the
 * bytes of the cheapest fractional cover of what its other samples exceed
 * its room by (loads only grow), taken by bytes per cost. */
static int64_t bytes_bound(const search_t *s, int64_t k) {
  /* Locals throughout: stays is bytes, which may alias anything, so each
   * store would reload every field read through s. */
  double need[SEARCH_RANKS], held[SEARCH_RANKS], bound = 0;
  int64_t tokens_left[SEARCH_RANKS];
  double limit = s->limit, roof = limit * (1 + ROUNDING);
  int64_t n = s->n, cap = s->ctx->cap;
  const double *cost = s->cost;
  const int64_t *len = s->len, *leave = s->leave, *next = s->ratio_next;
  const int32_t *home = s->home;
  uint8_t *stays = s->stays;
  for (int32_t j = 0; j < s->nset; j++) {
    need[j] = s->load[j] - limit;
    held[j] = s->load[j];
    tokens_left[j] = cap - s->tokens[j];
  }
  for (int64_t q = k; q < n; q++) {
    int32_t o = home[q]; /* fits(s, o, q), its terms hoisted */
    stays[q] = o >= 0 && len[q] <= tokens_left[o] && held[o] + cost[q] <= roof;
    if (stays[q]) need[o] += cost[q];
    else bound += (double)leave[q];
  }
  int32_t short_of = 0; /* homes still in need: none, and the rest adds 0 */
  for (int32_t j = 0; j < s->nset; j++) short_of += need[j] > 0;
  for (int64_t d = next[n]; d != n && short_of > 0; d = next[d]) {
    if (!stays[d]) continue;
    int32_t o = home[d];
    if (need[o] <= 0) continue;
    double part = need[o] < cost[d] ? need[o] / cost[d] : 1;
    bound += part * (double)leave[d];
    need[o] -= cost[d];
    short_of -= need[o] <= 0;
  }
  return (int64_t)ceil(bound * (1 - ROUNDING));
}

/* Whether the bytes bound at depth k still admits a plan below the best.
 * bytes_bound is at most rest_leave[k] where leave_sure: each sample adds
 * at most its leave price (a part of it at most 1), the prices are whole
 * numbers whose sums below 2^53 are exact, and (1 - ROUNDING) takes more
 * than the sum's rounding off. Where even that sum admits, the bound is
 * not summed: most nodes, far above the best plan's bytes. */
static int bound_admits(const search_t *s, int64_t k) {
  if (s->leave_sure && s->bytes + s->rest_leave[k] < s->best_bytes) return 1;
  return s->bytes + bytes_bound(s, k) < s->best_bytes;
}

/* Each depth's least price of leaving home for a rank of the set, and
 * their sums from each depth on (rest_leave, leave_sure). */
static void leave_prices(search_t *s) {
  const dpshim__ctx_t *ctx = s->ctx;
  for (int64_t q = 0; q < s->n; q++) {
    int64_t i = s->items[q], least = INT64_MAX;
    for (int32_t j = 0; j < s->nset; j++)
      if (s->set[j] != ctx->samples[i].origin) {
        int64_t price = dpshim__move_price(ctx, i, s->set[j]);
        if (price < least) least = price;
      }
    s->leave[q] = least == INT64_MAX ? 0 : least;
  }
  const int64_t exact = (int64_t)1 << 53; /* doubles hold integers below */
  s->leave_sure = 1;
  s->rest_leave[s->n] = 0;
  for (int64_t q = s->n - 1; q >= 0; q--) {
    int64_t price = s->leave[q], rest = s->rest_leave[q + 1];
    if (price < 0 || price >= exact - rest) s->leave_sure = 0;
    s->rest_leave[q] = s->leave_sure ? rest + price : 0;
  }
}

/* Depths ordered by leave price per cost, ascending (zero cost last). */
static void order_by_ratio(search_t *s) {
  const dpshim__ctx_t *ctx = s->ctx;
  for (int64_t q = 0; q < s->n; q++) {
    int64_t i = s->items[q], k = q;
    for (; k > 0; k--) {
      int64_t j = s->items[s->by_ratio[k - 1]];
      double lhs = (double)s->leave[s->by_ratio[k - 1]] * ctx->cost[i];
      double rhs = (double)s->leave[q] * ctx->cost[j];
      if (lhs <= rhs) break;
      s->by_ratio[k] = s->by_ratio[k - 1];
    }
    s->by_ratio[k] = q;
  }
}

/* Whether samples i and j are interchangeable in this mode. */
static int same_sample(const search_t *s, int64_t i, int64_t j) {
  const dpshim_sample_t *a = &s->ctx->samples[i], *b = &s->ctx->samples[j];
  if (s->ctx->cost[i] != s->ctx->cost[j] || a->len != b->len) return 0;
  return !s->bytes_mode || (a->bytes == b->bytes && a->origin == b->origin);
}

/* Whether child place p of depth k comes before place r (p is there
 * first), bytes mode: by price, then by load, home first among equals,
 * then place. */
static int kid_before(const search_t *s, int64_t k, int32_t r, int32_t p) {
  int32_t home = s->home[k];
  const int64_t *price = s->price + k * s->nset;
  if (price[p] != price[r]) return price[p] < price[r];
  return s->load[p] < s->load[r] ||
         (s->load[p] == s->load[r] && (p == home || r != home));
}

/* Children of the sample at depth k in bytes mode, into kids (as places):
 * home, the plan's place, then by kid_before; returns how many. A sample
 * the same as the one before goes to a place no earlier in the set than
 * that one's (any plan can swap them so). */
static int32_t bytes_children(const search_t *s, int64_t k, int32_t *kids) {
  int32_t n = 0, home = s->home[k], now = s->now[k];
  int32_t from = s->twin[k] ? s->placed[k - 1] : 0;
  if (home >= from && fits(s, home, k)) kids[n++] = home;
  if (now != home && now >= from && fits(s, now, k)) kids[n++] = now;
  int32_t first = n;
  for (int32_t j = from; j < s->nset; j++) {
    if (j == home || j == now || !fits(s, j, k)) continue;
    int32_t q = n++;
    for (; q > first && !kid_before(s, k, j, kids[q - 1]); q--)
      kids[q] = kids[q - 1];
    kids[q] = j;
  }
  return n;
}

/* Of makespan children (by load) in the same state only the first is
 * kept: any plan can swap their samples from here on. Returns how many. */
static int32_t distinct(const search_t *s, int32_t *kids, int32_t n) {
  int32_t kept = 0;
  for (int32_t c = 0; c < n; c++) {
    int32_t j = kids[c], p = kept ? kids[kept - 1] : -1;
    if (p >= 0 && s->load[p] == s->load[j] && s->tokens[p] == s->tokens[j] &&
        (s->count[p] == 0) == (s->count[j] == 0))
      continue;
    kids[kept++] = j;
  }
  return kept;
}

/* Whether the room left below the limit (room_left's cost part) is short
 * of rest, the cost of the samples not placed less rounding. */
static int room_short(const search_t *s, double rest) {
  double room = 0, limit = s->limit;
  for (int32_t j = 0; j < s->nset; j++)
    if (s->load[j] < limit) room += limit - s->load[j];
  return room < rest - ROUNDING * limit;
}

/* Children of the sample at depth k in makespan mode, into kids (as
 * places): least loaded first, home first among equals, then place; a
 * twin of the one before goes no earlier than it, else places in the
 * same state count once. Returns how many, or -1 where the room left
 * (room_left, its cost part: the tokens are s->tokens_fit) cannot hold
 * the samples from k on; one pass over the places for both. */
static int32_t makespan_children(const search_t *s, int64_t k, int32_t *kids) {
  const depth_t *d = &s->depth[k];
  int32_t n = 0, home = d->home, twin = d->twin, nset = s->nset;
  int32_t from = twin ? s->placed[k - 1] : 0;
  int64_t tokens_max = d->tokens_max;
  const double *load = s->load;
  const int64_t *tokens = s->tokens;
  double c = d->cost, limit = s->limit;
  if (!s->room_sure && room_short(s, d->rest)) return -1;
  for (int32_t j = from; j < nset; j++) {
    double lj = load[j];
    if (tokens[j] > tokens_max || !(lj + c < limit)) continue;
    int32_t q = n++;
    for (; q > 0; q--) {
      int32_t p = kids[q - 1];
      double lp = load[p];
      if (lp < lj || (lp == lj && (p == home || j != home))) break;
      kids[q] = p;
    }
    kids[q] = j;
  }
  return twin || n < 2 ? n : distinct(s, kids, n);
}

/* Whether the set's loads, summed in index order as plan.c sums them, are
 * within the limit. */
static int within_limit(search_t *s) {
  const dpshim__ctx_t *ctx = s->ctx;
  for (int64_t k = 0; k < s->n; k++) s->at[s->items[k]] = s->set[s->placed[k]];
  for (int32_t j = 0; j < s->nset; j++)
    s->exact[s->set[j]] = ctx->history[s->set[j]];
  for (int64_t i = 0; i < ctx->nsamples; i++)
    if (s->in_set[ctx->dest[i]]) s->exact[s->at[i]] += ctx->cost[i];
  for (int32_t j = 0; j < s->nset; j++)
    if (s->exact[s->set[j]] > s->limit) return 0;
  return 1;
}

/* A complete re-deal of the set: if better, it becomes the plan. */
static void leaf(search_t *s) {
  const dpshim__ctx_t *ctx = s->ctx;
  if (s->empty > 0) return;
  if (s->bytes_mode) {
    if (s->bytes >= s->best_bytes || !within_limit(s)) return;
    s->best_bytes = s->bytes;
  } else {
    double max = 0;
    for (int32_t j = 0; j < s->nset; j++)
      if (s->load[j] > max) max = s->load[j];
    if (max >= s->limit * (1 - BETTER)) return;
    s->limit = max;
    sure_of_room(s);
    s->done = max <= s->stop;
  }
  for (int64_t k = 0; k < s->n; k++) {
    ctx->dest[s->items[k]] = s->set[s->placed[k]];
    s->now[k] = s->placed[k]; /* children prefer the plan's place */
  }
}

static void place(search_t *s, int64_t k, int32_t j, int sign) {
  s->tokens[j] += sign * s->len[k];
  if (sign > 0 && s->count[j]++ == 0) s->empty--;
  if (sign < 0 && --s->count[j] == 0) s->empty++;
  if (s->bytes_mode) s->bytes += sign * s->price[k * s->nset + j];
  s->placed[k] = j;
}

/* Counts the node's work; whether the search goes on into it. */
static int enter(search_t *s, int64_t k) {
  if (s->done) return 0;
  if ((s->work += s->node_work) > s->budget) {
    s->done = s->out_of_budget = 1;
    return 0;
  }
  if (k == s->n) {
    leaf(s);
    return 0;
  }
  return room_left(s, k);
}

/* Depth k leaves (or rejoins) the bound's list while it is placed: the
 * nodes below hold the depths after k alone. */
static void ratio_unlink(search_t *s, int64_t k) {
  s->ratio_next[s->ratio_prev[k]] = s->ratio_next[k];
  s->ratio_prev[s->ratio_next[k]] = s->ratio_prev[k];
}

static void ratio_relink(search_t *s, int64_t k) {
  s->ratio_next[s->ratio_prev[k]] = k;
  s->ratio_prev[s->ratio_next[k]] = k;
}

/* The list in by_ratio's order, every depth in it. */
static void ratio_link(search_t *s) {
  int64_t prev = s->n;
  for (int64_t q = 0; q < s->n; q++) {
    int64_t d = s->by_ratio[q];
    s->ratio_next[prev] = d, s->ratio_prev[d] = prev, prev = d;
  }
  s->ratio_next[prev] = s->n, s->ratio_prev[s->n] = prev;
}

static void bytes_dfs(search_t *s, int64_t k) {
  if (!enter(s, k) || !bound_admits(s, k)) return;
  int32_t *kids = s->kids + k * s->nset;
  int32_t n = bytes_children(s, k, kids);
  ratio_unlink(s, k);
  for (int32_t c = 0; c < n && !s->done; c++) {
    int32_t j = kids[c];
    if (!fits(s, j, k) || s->bytes + s->price[k * s->nset + j] >= s->best_bytes)
      continue;
    double old = s->load[j];
    s->load[j] = old + s->cost[k];
    place(s, k, j, +1);
    bytes_dfs(s, k + 1);
    place(s, k, j, -1);
    s->load[j] = old; /* restored exactly, not by subtraction */
  }
  ratio_relink(s, k);
}

/* makespan_dfs for a pair of places, the commonest set (most of the
 * search's nodes): the places' loads, tokens and counts travel as
 * arguments, in registers, and reach memory only for a leaf. The same
 * nodes in the same order: room_left, then makespan_children's order
 * (least loaded first, home among equals; a twin no earlier than the one
 * before; places alike once). No node is entered once done (the first
 * child follows its parent's own test, the second is guarded); pair_root
 * leaves the tests that hold for a whole set to makespan_dfs. */
static void pair_dfs(search_t *s, int64_t k, double l0, double l1, int64_t t0,
                     int64_t t1, int64_t n0, int64_t n1);

static void pair_leaf(search_t *s, double l0, double l1, int64_t n0,
                      int64_t n1) {
  s->load[0] = l0, s->load[1] = l1;
  s->empty = (n0 == 0) + (n1 == 0);
  leaf(s);
}

/* Depth k's sample to place j (0 or 1) and on, if the limit (which may
 * have fallen meanwhile) still admits it. */
static inline void pair_child(search_t *s, int64_t k, int j, double l0,
                              double l1, int64_t t0, int64_t t1, int64_t n0,
                              int64_t n1) {
  const depth_t *d = &s->depth[k];
  if (j == 0 && l0 + d->cost < s->limit) {
    s->placed[k] = 0;
    pair_dfs(s, k + 1, l0 + d->cost, l1, t0 + d->len, t1, n0 + 1, n1);
  } else if (j == 1 && l1 + d->cost < s->limit) {
    s->placed[k] = 1;
    pair_dfs(s, k + 1, l0, l1 + d->cost, t0, t1 + d->len, n0, n1 + 1);
  }
}

static void pair_dfs(search_t *s, int64_t k, double l0, double l1, int64_t t0,
                     int64_t t1, int64_t n0, int64_t n1) {
  if ((s->work += s->node_work) > s->budget) {
    s->done = s->out_of_budget = 1;
    return;
  }
  if (k == s->n) {
    pair_leaf(s, l0, l1, n0, n1);
    return;
  }
  const depth_t *d = &s->depth[k];
  double c = d->cost, limit = s->limit;
  if (!s->room_sure) {
    double room = 0;
    if (l0 < limit) room += limit - l0;
    if (l1 < limit) room += limit - l1;
    if (room < d->rest - ROUNDING * limit) return;
  }
  int ok0 = (!d->twin || s->placed[k - 1] == 0) && t0 <= d->tokens_max &&
            l0 + c < limit;
  int ok1 = t1 <= d->tokens_max && l1 + c < limit;
  if (!ok0 || !ok1) {
    if (ok0 || ok1) pair_child(s, k, ok1, l0, l1, t0, t1, n0, n1);
    return;
  }
  int first = l0 < l1 || (l0 == l1 && (d->home == 0 || d->home != 1)) ? 0 : 1;
  int alike = !d->twin && l0 == l1 && t0 == t1 && (n0 == 0) == (n1 == 0);
  pair_child(s, k, first, l0, l1, t0, t1, n0, n1);
  if (!alike && !s->done) pair_child(s, k, !first, l0, l1, t0, t1, n0, n1);
}

/* makespan_dfs's nodes with the set-wide tests hoisted: at depth k < n
 * of a pair, a place is empty only where no sample is placed (k = 0),
 * so none is left empty unless n = 1; and tokens_fit is the same at every
 * node. Sets where either test prunes take makespan_dfs. No node is
 * entered once done (its parent tested, or guards its second child). */
static void makespan_dfs(search_t *s, int64_t k);

static void pair_root(search_t *s) {
  if (s->tokens_fit && s->n >= 2)
    pair_dfs(s, 0, s->load[0], s->load[1], 0, 0, 0, 0);
  else
    makespan_dfs(s, 0);
}

static void makespan_dfs(search_t *s, int64_t k) {
  if ((s->work += s->node_work) > s->budget) {
    s->done = s->out_of_budget = 1;
    return;
  }
  if (k == s->n) {
    leaf(s);
    return;
  }
  if (!s->tokens_fit || s->empty > s->n - k) return; /* room_left */
  int32_t kids[SEARCH_RANKS];
  int32_t n = makespan_children(s, k, kids);
  double c = s->depth[k].cost, *load = s->load;
  int64_t len = s->depth[k].len, *tokens = s->tokens, *count = s->count;
  for (int32_t q = 0; q < n && !s->done; q++) {
    int32_t j = kids[q];
    double old = load[j];
    /* The limit may have fallen meanwhile; the tokens are as they were. */
    if (!(old + c < s->limit)) continue;
    load[j] = old + c;
    tokens[j] += len;
    s->empty -= count[j]++ == 0;
    s->placed[k] = j;
    makespan_dfs(s, k + 1);
    s->empty += --count[j] == 0;
    tokens[j] -= len;
    load[j] = old; /* restored exactly, not by subtraction */
  }
}

/* What the nodes read of depth k (sample i). */
static void gather(search_t *s, int64_t k, int64_t i) {
  const dpshim__ctx_t *ctx = s->ctx;
  int32_t o = ctx->samples[i].origin;
  s->cost[k] = ctx->cost[i];
  s->len[k] = ctx->samples[i].len;
  s->home[k] = s->in_set[o] ? s->pos[o] : -1;
  s->now[k] = s->pos[ctx->dest[i]];
  s->twin[k] = k > 0 && same_sample(s, s->items[k - 1], i);
  if (s->bytes_mode)
    for (int32_t j = 0; j < s->nset; j++)
      s->price[k * s->nset + j] = dpshim__move_price(ctx, i, s->set[j]);
}

/* The set's total load and the same of absolute values, then whether
 * the room test can prune (sure_of_room). */
static void set_totals(search_t *s) {
  const dpshim__ctx_t *ctx = s->ctx;
  s->sum = s->sum_abs = 0;
  for (int32_t j = 0; j < s->nset; j++) {
    s->sum += ctx->history[s->set[j]];
    s->sum_abs += fabs(ctx->history[s->set[j]]);
  }
  for (int64_t k = 0; k < s->n; k++) {
    s->sum += s->cost[k];
    s->sum_abs += fabs(s->cost[k]);
  }
  sure_of_room(s);
}

/* Searches the ranks in s->set (nset of them) on at most `budget` work;
 * returns whether the plan in ctx->dest improved. `max` is the plan's
 * maximum load over all ranks. */
static int search_set(search_t *s, int64_t budget, double max) {
  const dpshim__ctx_t *ctx = s->ctx;
  for (int32_t j = 0; j < s->nset; j++) {
    int32_t r = s->set[j];
    s->in_set[r] = 1;
    s->pos[r] = j;
    s->load[j] = ctx->history[r];
    s->tokens[j] = s->count[j] = 0;
  }
  s->n = 0;
  s->best_bytes = 0;
  double set_max = 0;
  for (int64_t k = 0; k < ctx->nsamples; k++) {
    int64_t i = ctx->order[k];
    int32_t r = ctx->dest[i];
    if (!s->in_set[r]) continue;
    s->items[s->n++] = i;
    s->best_bytes += dpshim__move_price(ctx, i, r);
  }
  for (int32_t j = 0; j < s->nset; j++) {
    double load = ctx->history[s->set[j]];
    for (int64_t k = 0; k < s->n; k++)
      if (ctx->dest[s->items[k]] == s->set[j]) load += ctx->cost[s->items[k]];
    if (load > set_max) set_max = load;
  }
  s->rest_cost[s->n] = 0;
  s->rest_tokens[s->n] = 0;
  for (int64_t k = s->n - 1; k >= 0; k--) {
    int64_t i = s->items[k];
    s->rest_cost[k] = s->rest_cost[k + 1] + ctx->cost[i];
    s->rest_tokens[k] = s->rest_tokens[k + 1] + ctx->samples[i].len;
    gather(s, k, i);
    s->depth[k] = (depth_t){s->cost[k], s->rest_cost[k] * (1 - ROUNDING),
                            s->len[k], ctx->cap - s->len[k], s->home[k],
                            s->twin[k]};
  }
  int64_t caps = 0;
  for (int32_t j = 0; j < s->nset && ctx->cap != DPSHIM__NO_CAP; j++)
    caps += ctx->cap;
  s->tokens_fit = ctx->cap == DPSHIM__NO_CAP || caps >= s->rest_tokens[0];
  int64_t bytes_before = s->best_bytes;
  if (s->bytes_mode) {
    leave_prices(s);
    order_by_ratio(s);
    ratio_link(s);
  }
  s->limit = s->bytes_mode ? max : set_max;
  set_totals(s);
  s->empty = s->nset;
  s->bytes = 0;
  s->work = 0;
  s->node_work = s->nset + (s->bytes_mode ? s->n : 0);
  s->budget = budget;
  s->done = s->out_of_budget = 0;
  if (!s->bytes_mode && s->nset == 2)
    pair_root(s);
  else if (!s->bytes_mode)
    makespan_dfs(s, 0);
  else if (s->best_bytes > 0) bytes_dfs(s, 0);
  s->spent += s->work + ctx->nsamples + s->nset * s->n; /* and the set-up */
  for (int32_t j = 0; j < s->nset; j++) s->in_set[s->set[j]] = 0;
  return s->bytes_mode ? s->best_bytes < bytes_before : s->limit < set_max;
}

/* ---- neighbourhoods ------------------------------------------------------ */

static void loads_now(const search_t *s, double *load) {
  const dpshim__ctx_t *ctx = s->ctx;
  for (int32_t r = 0; r < ctx->ranks; r++) load[r] = ctx->history[r];
  dpshim__sum_costs(ctx->cost, ctx->dest, ctx->nsamples, load);
}

/* Ranks by load ascending into by_load (ties: rank), the busiest last. */
static void sort_by_load(const dpshim__ctx_t *ctx, const double *load,
                         int32_t *by_load) {
  for (int32_t r = 0; r < ctx->ranks; r++) {
    int32_t k = r;
    for (; k > 0 && load[by_load[k - 1]] > load[r]; k--) by_load[k] = by_load[k - 1];
    by_load[k] = r;
  }
}

/* The busiest rank with one other, then with two, least loaded first:
 * returns at the first set that improves. */
static int makespan_step(search_t *s) {
  const dpshim__ctx_t *ctx = s->ctx;
  double *load = s->rank_load;
  int32_t *by_load = s->by_load;
  loads_now(s, load);
  sort_by_load(ctx, load, by_load);
  s->spent += ctx->nsamples + ctx->ranks * ctx->ranks;
  int32_t others = ctx->ranks - 1;
  double max = load[by_load[others]];
  if (max <= s->stop) return 0;
  s->set[0] = by_load[others];
  s->nset = 2;
  for (int32_t a = 0; a < others && s->spent < s->total; a++) {
    s->set[1] = by_load[a];
    if (search_set(s, LOCAL_WORK, max)) return 1;
  }
  s->nset = 3;
  for (int32_t a = 0; a < others; a++)
    for (int32_t b = a + 1; b < others && s->spent < s->total; b++) {
      s->set[1] = by_load[a];
      s->set[2] = by_load[b];
      if (search_set(s, LOCAL_WORK, max)) return 1;
    }
  return 0;
}

/* Each rank holding guests with one of their homes (the pairs as the pass
 * starts), and the least loaded rank for room: returns whether any set
 * moved fewer bytes. */
static int bytes_pass(search_t *s, double max) {
  const dpshim__ctx_t *ctx = s->ctx;
  double *load = s->rank_load;
  int32_t *by_load = s->by_load;
  int32_t P = ctx->ranks;
  for (int32_t k = 0; k < P * P; k++) s->hosts[k] = 0;
  for (int64_t i = 0; i < ctx->nsamples; i++)
    s->hosts[ctx->dest[i] * P + ctx->samples[i].origin] = 1;
  int improved = 0;
  for (int32_t k = 0; k < P * P && s->spent < s->total; k++) {
    int32_t r = k / P, o = k % P;
    if (!s->hosts[k] || r == o) continue;
    loads_now(s, load);
    sort_by_load(ctx, load, by_load);
    s->spent += ctx->nsamples + P * P;
    s->set[0] = r;
    s->set[1] = o;
    s->nset = 2;
    for (int32_t j = 0; j < P && s->nset < 3; j++)
      if (by_load[j] != r && by_load[j] != o) s->set[s->nset++] = by_load[j];
    improved |= search_set(s, LOCAL_WORK, max);
  }
  return improved;
}

/* The per-depth arrays the nodes read. */
static int depth_init(search_t *s, const dpshim__ctx_t *ctx) {
  int64_t n = ctx->nsamples;
  s->cost = DPSHIM__ALLOC(ctx, double, n);
  s->len = DPSHIM__ALLOC(ctx, int64_t, n);
  s->home = DPSHIM__ALLOC(ctx, int32_t, n);
  s->now = DPSHIM__ALLOC(ctx, int32_t, n);
  s->twin = DPSHIM__ALLOC(ctx, uint8_t, n);
  s->price = DPSHIM__ALLOC(ctx, int64_t, n * ctx->ranks);
  s->placed = DPSHIM__ALLOC(ctx, int32_t, n);
  s->depth = DPSHIM__ALLOC(ctx, depth_t, n);
  return s->cost && s->len && s->home && s->now && s->twin && s->price &&
                 s->placed && s->depth
             ? 0
             : DPSHIM_ENOMEM;
}

static int search_init(search_t *s, const dpshim__ctx_t *ctx) {
  int64_t n = ctx->nsamples;
  *s = (search_t){.ctx = ctx,
                  .set = DPSHIM__ALLOC(ctx, int32_t, ctx->ranks),
                  .items = DPSHIM__ALLOC(ctx, int64_t, n),
                  .by_ratio = DPSHIM__ALLOC(ctx, int64_t, n),
                  .ratio_next = DPSHIM__ALLOC(ctx, int64_t, n + 1),
                  .ratio_prev = DPSHIM__ALLOC(ctx, int64_t, n + 1),
                  .leave = DPSHIM__ALLOC(ctx, int64_t, n),
                  .rest_leave = DPSHIM__ALLOC(ctx, int64_t, n + 1),
                  .stays = DPSHIM__ALLOC(ctx, uint8_t, n),
                  .load = DPSHIM__ALLOC(ctx, double, ctx->ranks),
                  .tokens = DPSHIM__ALLOC(ctx, int64_t, ctx->ranks),
                  .count = DPSHIM__ALLOC(ctx, int64_t, ctx->ranks),
                  .at = DPSHIM__ALLOC(ctx, int32_t, n),
                  .kids = DPSHIM__ALLOC(ctx, int32_t, n * ctx->ranks),
                  .rest_cost = DPSHIM__ALLOC(ctx, double, n + 1),
                  .rest_tokens = DPSHIM__ALLOC(ctx, int64_t, n + 1),
                  .in_set = DPSHIM__ALLOC(ctx, uint8_t, ctx->ranks),
                  .pos = DPSHIM__ALLOC(ctx, int32_t, ctx->ranks),
                  .exact = DPSHIM__ALLOC(ctx, double, ctx->ranks),
                  .hosts = DPSHIM__ALLOC(ctx, uint8_t, ctx->ranks * ctx->ranks),
                  .rank_load = DPSHIM__ALLOC(ctx, double, ctx->ranks),
                  .by_load = DPSHIM__ALLOC(ctx, int32_t, ctx->ranks)};
  if (!s->set || !s->items || !s->by_ratio || !s->leave || !s->stays ||
      !s->rest_leave ||
      !s->ratio_next || !s->ratio_prev ||
      !s->load || !s->tokens || !s->count || !s->at || !s->kids ||
      !s->rest_cost || !s->rest_tokens || !s->in_set || !s->pos ||
      !s->exact || !s->hosts || !s->rank_load || !s->by_load ||
      depth_init(s, ctx) < 0)
    return DPSHIM_ENOMEM;
  for (int32_t r = 0; r < ctx->ranks; r++) s->in_set[r] = 0;
  s->stop = dpshim__default_search_stop(ctx);
  s->total = TOTAL_WORK;
  return 0;
}

int dpshim__default_search_applies(const dpshim__ctx_t *ctx) {
  return ctx->ranks <= SEARCH_RANKS && ctx->nsamples <= SEARCH_SAMPLES &&
         !ctx->rows_cap;
}

double dpshim__default_search_stop(const dpshim__ctx_t *ctx) {
  return ctx->lower_bound_cap * (1 + STOP_ABOVE_BOUND);
}

int dpshim__default_search(const dpshim__ctx_t *ctx, int bytes_mode,
                           double max) {
  if (!dpshim__default_search_applies(ctx)) return 0;
  search_t s;
  if (search_init(&s, ctx) < 0) return DPSHIM_ENOMEM;
  s.bytes_mode = bytes_mode;
  if (!bytes_mode && max <= s.stop) return 0;
  for (int32_t r = 0; r < ctx->ranks; r++) s.set[r] = r;
  s.nset = ctx->ranks;
  search_set(&s, FULL_WORK, max);
  if (!s.out_of_budget) /* the whole tree searched */
    return !bytes_mode && s.limit > s.stop;
  if (bytes_mode)
    while (s.spent < s.total && bytes_pass(&s, max)) {
    }
  else
    while (makespan_step(&s)) {
    }
  return 0;
}

int dpshim__default_search_down(const dpshim__ctx_t *ctx, double stop) {
  if (!dpshim__default_search_applies(ctx)) return 0;
  search_t s;
  if (search_init(&s, ctx) < 0) return DPSHIM_ENOMEM;
  s.bytes_mode = 0;
  s.stop = fmax(s.stop, stop);
  s.total = DOWN_WORK;
  while (makespan_step(&s)) {
  }
  return 0;
}
