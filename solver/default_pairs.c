/* `default`'s step 7 (default_finish.c): fewer bytes by re-dealing the
 * samples of two ranks at a time, then three, exactly, under the plan's
 * maximum.
 *
 * Once the maximum M is fixed, the fewest bytes with every load at most M
 * is a generalized assignment problem. The steps before improve a plan by
 * a sample or two at a time; where the plan is a re-deal (seed's, or the
 * exact makespan search's) they stop far from the fewest: a sample goes
 * home only if its home sheds a set that fits in the room left, which at
 * M within 10^-4 of the bound is next to none. Here every sample of a set
 * of ranks may go to any rank of the set: a depth-first branch and bound,
 * costliest sample first, children the rank its price favours first
 * (unless that rank cannot keep all the samples it favours: then the
 * others, most room first), none that would take a rank above M or the
 * token cap, pruned on the bytes the ranks that cannot keep what they
 * favour must shed, at their samples' least bytes per cost. The set's
 * split before is the incumbent, so the plan never gets worse. Pairs are
 * visited until none improves, then triples, each set asked again only
 * once one of its ranks changed; on a work budget (a unit per node and
 * per sample set up), so every rank finds the same plan. At most
 * DPSHIM__SECOND_START_RANKS ranks (three at a time at most
 * TRIPLE_RANKS), no rows caps. */
#include <math.h>

#include "default_tally.h"

#define PAIR_WORK 1500     /* one pair's search */
#define TRIPLE_WORK 1500   /* one triple's */
#define ALL_WORK 45000     /* all of them: at most about 1 ms here */
#define SET_SAMPLES 512    /* a set holding more is left (the search's depth) */
#define TRIPLE_RANKS 8     /* above, pairs only: the triples are too many */
/* Loads summed in search order may differ from the plan's by rounding:
 * the search allows this much (of M), and each plan it keeps is checked
 * on loads summed afresh. */
#define ROUNDING 1e-12

#define SET_MAX 3

/* One sample of the set, costliest first, with the bound's suffix
 * figures from it on (an extra one ends the array). */
typedef struct set_item {
  double cost;
  int64_t len;
  int64_t extra[SET_MAX]; /* price at each place above the favoured one */
  /* Of the items from here on favouring each place, the least price of
   * leaving it per cost. */
  double rate[SET_MAX];
  int8_t pref; /* the place its price favours */
  uint8_t twin; /* the same sample as the one before: no earlier place */
} set_item_t;

typedef struct sets {
  const dpshim__ctx_t *ctx;
  dpshim__tally_t *t;
  double limit;
  double roof; /* a place's most load: limit and rounding */
  int32_t set[SET_MAX], nset;
  set_item_t *it; /* [n + 1] */
  int64_t *item, n; /* [n] the samples */
  double load[SET_MAX], favoured[SET_MAX]; /* favoured: items left's cost */
  int64_t tokens[SET_MAX], count[SET_MAX];
  int32_t *at, *best; /* [n] places */
  int64_t best_price;
  int64_t work, budget, total;
} sets_t;

/* Sample i's place in the set its price favours (where it is when
 * several do), and its extra price at each place. */
static void favour(sets_t *s, int64_t k, int64_t i) {
  const dpshim__ctx_t *ctx = s->ctx;
  set_item_t *x = &s->it[k];
  int64_t least = INT64_MAX;
  for (int j = 0; j < s->nset; j++) {
    x->extra[j] = dpshim__move_price(ctx, i, s->set[j]);
    if (x->extra[j] < least ||
        (x->extra[j] == least && s->set[j] == ctx->dest[i]))
      least = x->extra[j], x->pref = (int8_t)j;
  }
  for (int j = 0; j < s->nset; j++) x->extra[j] -= least;
  x->cost = ctx->cost[i];
  x->len = ctx->len[i];
}

static int same_sample(const dpshim__ctx_t *ctx, int64_t i, int64_t j) {
  const dpshim_sample_t *a = &ctx->samples[i], *b = &ctx->samples[j];
  return ctx->cost[i] == ctx->cost[j] && a->len == b->len &&
         a->bytes == b->bytes && a->origin == b->origin;
}

/* The least prices the bound reads. */
static void suffixes(sets_t *s) {
  set_item_t *end = &s->it[s->n];
  for (int j = 0; j < SET_MAX; j++) end->rate[j] = INFINITY;
  for (int64_t k = s->n - 1; k >= 0; k--) {
    set_item_t *x = &s->it[k];
    int64_t leave = INT64_MAX;
    for (int j = 0; j < SET_MAX; j++) {
      x->rate[j] = x[1].rate[j];
      if (j < s->nset && j != x->pref && x->extra[j] < leave)
        leave = x->extra[j];
    }
    int p = x->pref;
    if (x->cost > 0) x->rate[p] = fmin(x->rate[p], (double)leave / x->cost);
  }
}

/* The set's samples and bounds; returns the extra price of the split now
 * (the incumbent), or -1 where the set holds too few or too many. */
static int64_t setup(sets_t *s) {
  const dpshim__ctx_t *ctx = s->ctx;
  int8_t place[DPSHIM__SECOND_START_RANKS];
  int64_t now = 0;
  for (int32_t r = 0; r < ctx->ranks; r++) place[r] = -1;
  for (int j = 0; j < s->nset; j++) {
    place[s->set[j]] = (int8_t)j;
    s->load[j] = ctx->history[s->set[j]];
    s->favoured[j] = 0, s->tokens[j] = s->count[j] = 0;
  }
  s->n = 0;
  s->work += ctx->nsamples;
  for (int64_t q = 0; q < ctx->nsamples; q++) { /* ctx->order: cost desc */
    int64_t i = ctx->order[q], k = s->n;
    int8_t j = place[ctx->dest[i]];
    if (j < 0) continue;
    if (k == SET_SAMPLES) return -1;
    s->item[s->n++] = i;
    favour(s, k, i);
    s->it[k].twin = k > 0 && same_sample(ctx, s->item[k - 1], i);
    s->favoured[s->it[k].pref] += ctx->cost[i];
    s->best[k] = j;
    now += s->it[k].extra[j];
  }
  if (s->n <= s->nset) return -1;
  s->work += s->n * s->nset;
  suffixes(s);
  return now;
}

/* Whether the items from k on may beat the best with `price` so far: the
 * ranks that cannot keep every item favouring them shed the excess at
 * those items' least price per cost. (The room left, in cost and tokens,
 * is what the split before had: the set's total is fixed.) */
static int promising(const sets_t *s, int64_t k, int64_t price) {
  double shed = 0;
  const set_item_t *x = &s->it[k];
  for (int j = 0; j < s->nset; j++) {
    double over = s->load[j] + s->favoured[j] - s->limit;
    if (over > 0) shed += over * x->rate[j];
  }
  return (double)price + shed * (1 - ROUNDING) < (double)s->best_price;
}

/* Item k's places in the order tried, into kids; returns how many. Where
 * its favoured place p can keep every item favouring it, p first, then by
 * extra price, then room; else the others, most room first (room after
 * the items that favour them), p last. */
static int children(const sets_t *s, int64_t k, int8_t *kids) {
  const set_item_t *x = &s->it[k];
  int p = x->pref;
  if (s->nset == 2) { /* the other place's extra price is the only one */
    int full = s->load[p] + s->favoured[p] > s->limit;
    kids[0] = (int8_t)(full ? !p : p), kids[1] = (int8_t)(full ? p : !p);
    return 2;
  }
  double room[SET_MAX] = {0};
  for (int j = 0; j < s->nset; j++)
    room[j] = s->limit - s->load[j] - s->favoured[j];
  room[p] += x->cost;
  int full = room[p] < x->cost;
  const int64_t *extra = x->extra;
  for (int j = 0; j < s->nset; j++) {
    int q = j;
    for (; q > 0; q--) {
      int r = kids[q - 1], before; /* j before r */
      if ((j == p) != (r == p)) before = full ? r == p : j == p;
      else if (!full && extra[j] != extra[r]) before = extra[j] < extra[r];
      else before = room[j] > room[r];
      if (!before) break;
      kids[q] = kids[q - 1];
    }
    kids[q] = (int8_t)j;
  }
  return s->nset;
}

static void leaf(sets_t *s, int64_t price) {
  for (int j = 0; j < s->nset; j++)
    if (s->count[j] == 0) return;
  s->best_price = price;
  for (int64_t k = 0; k < s->n; k++) s->best[k] = s->at[k];
}

static void dfs(sets_t *s, int64_t k, int64_t price) {
  if (++s->work > s->budget || !promising(s, k, price)) return;
  if (k == s->n) {
    leaf(s, price);
    return;
  }
  const set_item_t *x = &s->it[k];
  double c = x->cost;
  int8_t kids[SET_MAX];
  int nk = children(s, k, kids), from = x->twin ? s->at[k - 1] : 0;
  s->favoured[x->pref] -= c;
  for (int q = 0; q < nk && s->work <= s->budget; q++) {
    int j = kids[q];
    int64_t to = price + x->extra[j];
    if (j < from || s->load[j] + c > s->roof ||
        s->tokens[j] + x->len > s->ctx->cap || to >= s->best_price)
      continue;
    double old = s->load[j];
    s->load[j] = old + c, s->tokens[j] += x->len, s->count[j]++;
    s->at[k] = j;
    dfs(s, k + 1, to);
    s->load[j] = old, s->tokens[j] -= x->len, s->count[j]--;
  }
  s->favoured[x->pref] += c;
}

/* dfs for a pair of ranks, the commonest set: the places' loads and
 * tokens travel as arguments, in registers (which places hold a sample:
 * `filled`, a bit each). The same nodes in the same order, the same sums
 * (favoured stays in memory: its -= and += are the dfs's). */
static void pair_dfs(sets_t *s, int64_t k, int64_t price, double l0, double l1,
                     int64_t t0, int64_t t1, int filled);

/* Item k to place j (0 or 1) at `price` so far, if it fits. */
static inline void pair_try(sets_t *s, int64_t k, int j, int64_t price,
                            double l0, double l1, int64_t t0, int64_t t1,
                            int filled) {
  const set_item_t *x = &s->it[k];
  int64_t to = price + x->extra[j];
  int from = x->twin ? s->at[k - 1] : 0;
  if (j < from || (j ? l1 : l0) + x->cost > s->roof ||
      (j ? t1 : t0) + x->len > s->ctx->cap || to >= s->best_price)
    return;
  s->at[k] = j;
  if (j == 0)
    pair_dfs(s, k + 1, to, l0 + x->cost, l1, t0 + x->len, t1, filled | 1);
  else
    pair_dfs(s, k + 1, to, l0, l1 + x->cost, t0, t1 + x->len, filled | 2);
}

static void pair_dfs(sets_t *s, int64_t k, int64_t price, double l0, double l1,
                     int64_t t0, int64_t t1, int filled) {
  if (++s->work > s->budget) return;
  const set_item_t *x = &s->it[k];
  double shed = 0, over0 = l0 + s->favoured[0] - s->limit,
         over1 = l1 + s->favoured[1] - s->limit;
  if (over0 > 0) shed += over0 * x->rate[0];
  if (over1 > 0) shed += over1 * x->rate[1];
  if (!((double)price + shed * (1 - ROUNDING) < (double)s->best_price)) return;
  if (k == s->n) {
    if (filled == 3) {
      s->best_price = price;
      for (int64_t q = 0; q < s->n; q++) s->best[q] = s->at[q];
    }
    return;
  }
  int p = x->pref;
  double c = x->cost;
  int first = (p ? l1 : l0) + s->favoured[p] > s->limit ? !p : p;
  s->favoured[p] -= c;
  pair_try(s, k, first, price, l0, l1, t0, t1, filled);
  if (s->work <= s->budget)
    pair_try(s, k, !first, price, l0, l1, t0, t1, filled);
  s->favoured[p] += c;
}

/* The best split of the set's samples found; applied if it moves fewer
 * bytes and, summed afresh, keeps every load within M. Returns whether it
 * was applied. */
static int solve_set(sets_t *s, int32_t *scratch) {
  const dpshim__ctx_t *ctx = s->ctx;
  int64_t now = setup(s);
  if (now <= 0) return 0;
  s->best_price = now;
  s->roof = s->limit * (1 + ROUNDING);
  int64_t work = s->nset == 2 ? PAIR_WORK : TRIPLE_WORK;
  s->budget = s->work + work < s->total ? s->work + work : s->total;
  if (s->nset == 2)
    pair_dfs(s, 0, 0, s->load[0], s->load[1], 0, 0, 0);
  else
    dfs(s, 0, 0);
  if (s->work > s->budget) s->work = s->budget;
  if (s->best_price >= now) return 0;
  dpshim__copy_dest(ctx, scratch, ctx->dest);
  for (int64_t k = 0; k < s->n; k++)
    ctx->dest[s->item[k]] = s->set[(int)s->best[k]];
  dpshim__tally_of(ctx, ctx->dest, s->t);
  if (dpshim__max_load(s->t->load, ctx->ranks) <= s->limit &&
      dpshim__tally_acceptable(ctx, s->t))
    return 1;
  dpshim__copy_dest(ctx, ctx->dest, scratch);
  dpshim__tally_of(ctx, ctx->dest, s->t);
  return 0;
}

static int sets_init(sets_t *s, const dpshim__ctx_t *ctx, dpshim__tally_t *t) {
  int64_t n = ctx->nsamples < SET_SAMPLES ? ctx->nsamples : SET_SAMPLES;
  *s = (sets_t){.ctx = ctx,
                .t = t,
                .it = DPSHIM__ALLOC(ctx, set_item_t, n + 1),
                .item = DPSHIM__ALLOC(ctx, int64_t, n),
                .at = DPSHIM__ALLOC(ctx, int32_t, n),
                .best = DPSHIM__ALLOC(ctx, int32_t, n),
                .total = ALL_WORK};
  return s->it && s->item && s->at && s->best ? 0 : DPSHIM_ENOMEM;
}

/* What the search keeps across sets: each rank's version (bumped when it
 * changes), the versions' sum when each set was last asked, scratch. */
typedef struct rounds {
  int64_t *version, *asked;
  int32_t *scratch;
} rounds_t;

/* The set s->set asked (unless none of its ranks changed since it last
 * was); returns whether it improved. key: the set's slot in asked. */
static int ask(sets_t *s, rounds_t *w, int64_t key) {
  int64_t seen = 0;
  for (int j = 0; j < s->nset; j++) seen += w->version[s->set[j]];
  if (w->asked[key] == seen) return 0;
  w->asked[key] = seen;
  if (!solve_set(s, w->scratch)) return 0;
  for (int j = 0; j < s->nset; j++) w->version[s->set[j]]++;
  w->asked[key] = seen + s->nset;
  return 1;
}

/* One round over all pairs; returns whether any improved. */
static int pairs_round(sets_t *s, rounds_t *w) {
  int32_t P = s->ctx->ranks;
  int improved = 0;
  s->nset = 2;
  for (int32_t a = 0; a < P; a++)
    for (int32_t b = a + 1; b < P && s->work < s->total; b++) {
      s->set[0] = a, s->set[1] = b;
      improved |= ask(s, w, (int64_t)a * P + b);
    }
  return improved;
}

/* One round over all triples; returns whether any improved. */
static int triples_round(sets_t *s, rounds_t *w) {
  int32_t P = s->ctx->ranks;
  int improved = 0;
  s->nset = 3;
  for (int32_t a = 0; a < P; a++)
    for (int32_t b = a + 1; b < P; b++)
      for (int32_t c = b + 1; c < P && s->work < s->total; c++) {
        s->set[0] = a, s->set[1] = b, s->set[2] = c;
        improved |= ask(s, w, (int64_t)P * P + ((int64_t)a * P + b) * P + c);
      }
  return improved;
}

/* Pairs until none improves (cheap, and most of the gain), then, at most
 * TRIPLE_RANKS ranks, a round of triples, and again while that improves.
 * Returns whether any set improved. */
static int all_sets(sets_t *s, rounds_t *w) {
  int improved = 0, more;
  do {
    while (s->work < s->total && pairs_round(s, w)) improved = 1;
    more = s->work < s->total && s->ctx->ranks <= TRIPLE_RANKS &&
           triples_round(s, w);
    improved |= more;
  } while (more);
  return improved;
}

int dpshim__default_pairs(const dpshim__ctx_t *ctx, dpshim__tally_t *t) {
  if (ctx->ranks > DPSHIM__SECOND_START_RANKS || ctx->rows_cap) return 0;
  int32_t P = ctx->ranks;
  int64_t slots = (int64_t)P * P * (P <= TRIPLE_RANKS ? P + 1 : 1);
  sets_t s;
  rounds_t w = {DPSHIM__ALLOC(ctx, int64_t, P),
                DPSHIM__ALLOC(ctx, int64_t, slots),
                DPSHIM__ALLOC(ctx, int32_t, ctx->nsamples)};
  if (!w.version || !w.asked || !w.scratch || sets_init(&s, ctx, t) < 0)
    return DPSHIM_ENOMEM;
  for (int32_t r = 0; r < P; r++) w.version[r] = 0;
  for (int64_t k = 0; k < slots; k++) w.asked[k] = -1;
  dpshim__tally_of(ctx, ctx->dest, t);
  s.limit = dpshim__max_load(t->load, P);
  return all_sets(&s, &w);
}
