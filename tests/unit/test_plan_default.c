/* `default` specifics: little traffic on packed input, no plan on balanced
 * input, and the dominant-sample case `seed` gives up on. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>

#include "plan_fixture.h"

#define PACK 32768
#define RANKS 64
#define MAXN (RANKS * 64)

static dpshim_sample_t s[MAXN];

/* Each rank holds random samples packing exactly PACK tokens, as a packed
 * data loader delivers them, of up to `longest` tokens. Returns the sample
 * count. */
static int64_t packed_instance_upto(uint64_t seed, int64_t longest) {
  prng_t g = {seed};
  int64_t n = 0;
  for (int32_t r = 0; r < RANKS; r++) {
    int64_t left = PACK;
    while (left > 0) {
      int64_t len = prng_range(&g, 64, longest);
      if (len > left || n + 1 == MAXN) len = left;
      s[n] = (dpshim_sample_t){len, len * 4096, r, 0, 0, 0};
      left -= len;
      n++;
    }
  }
  return n;
}

static int64_t packed_instance(uint64_t seed) {
  return packed_instance_upto(seed, 8192);
}

static void check_no_empty_rank(const dpshim_plan_t *pl, int64_t n, int32_t p) {
  int64_t count[RANKS] = {0};
  for (int64_t i = 0; i < n; i++) count[pl->dest[i]]++;
  for (int32_t r = 0; r < p; r++) cr_assert(count[r] > 0, "rank %d emptied", r);
}

/* default's and seed's plans of `in` (its algo is overwritten). */
static void solve_both(dpshim_plan_input_t *in, dpshim_plan_t *def,
                       dpshim_plan_t *seed) {
  dpshim_plan_init(def);
  dpshim_plan_init(seed);
  in->algo = DPSHIM_ALGO_DEFAULT;
  cr_assert_eq(dpshim_plan_solve(in, def), 0, "%s", def->message);
  in->algo = DPSHIM_ALGO_SEED;
  cr_assert_eq(dpshim_plan_solve(in, seed), 0, "%s", seed->message);
}

Test(plan_default, moves_far_less_than_seed) {
  int64_t n = packed_instance(42);
  dpshim_plan_input_t in = plan_input(RANKS, s, n, DPSHIM_ALGO_DEFAULT);
  in.model = (dpshim_cost_model_t){1, 8000, 0, 0, 0};
  in.cap_ratio = 1.2;
  dpshim_plan_t def, seed;
  solve_both(&in, &def, &seed);
  /* Equal tokens but quadratic cost: the input is unbalanced, so both act. */
  cr_assert_eq(def.decision, DPSHIM_DECISION_APPLY, "%s", def.message);
  cr_assert_eq(seed.decision, DPSHIM_DECISION_APPLY, "%s", seed.message);
  cr_assert(def.bytes_moved <= 0.3 * (double)seed.bytes_moved,
            "default moved %lld bytes, seed %lld", (long long)def.bytes_moved,
            (long long)seed.bytes_moved);
  double ratio = max_of(def.load_after, RANKS) / def.lower_bound;
  cr_assert(ratio <= 1.02, "default max/LB = %.6f", ratio);
  int64_t tokens[RANKS];
  tokens_of(&in, def.dest, tokens);
  for (int32_t r = 0; r < RANKS; r++)
    cr_assert(tokens[r] <= def.cap_tokens, "rank %d: %lld tokens > cap %lld", r,
              (long long)tokens[r], (long long)def.cap_tokens);
  check_no_empty_rank(&def, n, RANKS);
  dpshim_plan_free(&def);
  dpshim_plan_free(&seed);
}

Test(plan_default, balanced_input_is_left_alone) {
  /* 8 ranks of two 100-token samples: already at the bound. */
  int64_t n = 16;
  for (int64_t i = 0; i < n; i++) s[i] = (dpshim_sample_t){100, 7, (int32_t)(i / 2), 0, 0, 0};
  dpshim_plan_input_t in = plan_input(8, s, n, DPSHIM_ALGO_DEFAULT);
  dpshim_plan_t pl;
  dpshim_plan_init(&pl);
  const double thresholds[] = {0, 0.05};
  for (int k = 0; k < 2; k++) {
    in.threshold = thresholds[k];
    cr_assert_eq(dpshim_plan_solve(&in, &pl), 0, "%s", pl.message);
    cr_assert_eq(pl.decision, DPSHIM_DECISION_SKIP);
    /* threshold 0 runs the algorithm, which finds no gain; 0.05 stops it. */
    cr_assert_eq(pl.reason, k == 0 ? DPSHIM_SKIP_NO_GAIN : DPSHIM_SKIP_BALANCED);
    cr_assert_eq(pl.bytes_moved, 0);
    for (int64_t i = 0; i < n; i++) cr_assert_eq(pl.dest[i], s[i].origin);
  }
  dpshim_plan_free(&pl);
}

Test(plan_default, dominant_sample_is_isolated) {
  /* 4 ranks; rank 0 holds one 1000-token sample and 6 of 100; the others
   * hold 3 of 100 each. cost = len: total 2500, mean 625 < 1000, so seed
   * skips as dominant; the bound is the dominant sample, 1000. Reaching it
   * needs rank 0 to give away every small sample. */
  int64_t n = dominant_instance(s);
  dpshim_plan_input_t in = plan_input(4, s, n, DPSHIM_ALGO_SEED);
  in.cap_ratio = 2.0; /* floor(2.0 * 2500 / 4) = 1250 tokens */
  dpshim_plan_t pl;
  dpshim_plan_init(&pl);
  cr_assert_eq(dpshim_plan_solve(&in, &pl), 0, "%s", pl.message);
  cr_assert_eq(pl.reason, DPSHIM_SKIP_DOMINANT);
  in.algo = DPSHIM_ALGO_DEFAULT;
  cr_assert_eq(dpshim_plan_solve(&in, &pl), 0, "%s", pl.message);
  cr_assert_eq(pl.decision, DPSHIM_DECISION_APPLY, "%s", pl.message);
  cr_assert_eq(pl.lower_bound, 1000.0);
  double peak = max_of(pl.load_after, 4);
  cr_assert(fabs(peak - 1000.0) <= 1e-9 * 1000.0, "makespan %g", peak);
  cr_assert_eq(pl.dest[0], 0, "the dominant sample stays home");
  for (int64_t i = 1; i <= 6; i++)
    cr_assert_neq(pl.dest[i], 0, "small sample %lld left on rank 0", (long long)i);
  int64_t tokens[4];
  tokens_of(&in, pl.dest, tokens);
  for (int32_t r = 0; r < 4; r++) cr_assert(tokens[r] <= 1250, "rank %d", r);
  check_no_empty_rank(&pl, n, 4);
  dpshim_plan_free(&pl);
}

/* Two ranks, cost = len. Rank 0 holds A (40 tokens, 10 rows), B (30, 10
 * rows) and E (30, no rows, twice B's bytes); rank 1 holds C (30). Loads
 * 100 and 30; the best maximum is 70, by moving B or E. Without a rows cap
 * default moves B; a rows cap of 5 on rank 1 rules B out (and raises the
 * bound to 70: A and B must share rank 0), and default moves E instead. */
Test(plan_default, binding_rows_cap_changes_the_plan) {
  s[0] = (dpshim_sample_t){40, 40, 0, 10, 0, 0};
  s[1] = (dpshim_sample_t){30, 30, 0, 10, 0, 0};
  s[2] = (dpshim_sample_t){30, 60, 0, 0, 0, 0};
  s[3] = (dpshim_sample_t){30, 1000, 1, 0, 0, 0}; /* room in the traffic budget */
  dpshim_plan_input_t in = plan_input(2, s, 4, DPSHIM_ALGO_DEFAULT);
  dpshim_plan_t pl;
  dpshim_plan_init(&pl);
  cr_assert_eq(dpshim_plan_solve(&in, &pl), 0, "%s", pl.message);
  cr_assert_eq(pl.decision, DPSHIM_DECISION_APPLY, "%s", pl.message);
  cr_assert_eq(pl.dest[1], 1, "without a cap B moves");
  cr_assert_eq(pl.dest[2], 0);
  cr_assert_eq(pl.rows_max_after, 10);
  int64_t caps[2] = {100, 5};
  in.rows_cap = caps;
  in.rows_cap_len = 2;
  cr_assert_eq(dpshim_plan_solve(&in, &pl), 0, "%s", pl.message);
  cr_assert_eq(pl.decision, DPSHIM_DECISION_APPLY, "%s", pl.message);
  cr_assert_eq(pl.lower_bound_cap, 70.0);
  cr_assert_eq(pl.dest[1], 0, "B would overflow rank 1's rows");
  cr_assert_eq(pl.dest[2], 1, "E moves instead");
  cr_assert_eq(max_of(pl.load_after, 2), 70.0);
  int64_t rows[2];
  cr_assert(within_rows_caps(&in, pl.dest, rows), "rows %lld, %lld",
            (long long)rows[0], (long long)rows[1]);
  dpshim_plan_free(&pl);
}

/* A cap below what a rank holds now is kept as given: default moves rows
 * off it even at a higher maximum load; where nothing can take them, the
 * plan is skipped for capacity and every sample stays. */
Test(plan_default, rows_cap_below_what_a_rank_holds) {
  s[0] = (dpshim_sample_t){10, 10, 0, 8, 0, 0};
  s[1] = (dpshim_sample_t){10, 10, 0, 8, 0, 0};
  s[2] = (dpshim_sample_t){30, 30, 1, 0, 0, 0};
  dpshim_plan_input_t in = plan_input(2, s, 3, DPSHIM_ALGO_DEFAULT);
  int64_t caps[2] = {10, 10};
  in.rows_cap = caps;
  in.rows_cap_len = 2;
  dpshim_plan_t pl;
  dpshim_plan_init(&pl);
  cr_assert_eq(dpshim_plan_solve(&in, &pl), 0, "%s", pl.message);
  cr_assert_eq(pl.decision, DPSHIM_DECISION_APPLY, "%s", pl.message);
  cr_assert_eq(pl.rows_max_after, 8);
  cr_assert_eq(max_of(pl.load_after, 2), 40.0, "loads 10 / 40 > 20 / 30");
  caps[1] = 4;
  cr_assert_eq(dpshim_plan_solve(&in, &pl), 0, "%s", pl.message);
  cr_assert_eq(pl.reason, DPSHIM_SKIP_CAPACITY, "%s", pl.message);
  cr_assert_str_eq(pl.message, "skip: capacity");
  for (int64_t i = 0; i < 3; i++) cr_assert_eq(pl.dest[i], s[i].origin);
  dpshim_plan_free(&pl);
}

/* Two ranks, cost = len^2. Rank 0 holds A (100 tokens, 4 rows) and B (110,
 * none), rank 1 two samples of 1: loads 22100 / 2. Without a rows cap A
 * moves (12100 / 10002). Rank 1's rows cap of 0 rules A out, but B can go:
 * the best plan within the cap, 10001 / 12101, moves B and one short sample
 * back. The shed step used to take A alone, which fit nowhere but home,
 * and the repair's traffic budget then kept B from moving: a skip. */
Test(plan_default, rows_cap_sheds_a_sample_that_fits_elsewhere) {
  s[0] = (dpshim_sample_t){100, 100, 0, 4, 0, 0};
  s[1] = (dpshim_sample_t){110, 110, 0, 0, 0, 0};
  s[2] = (dpshim_sample_t){1, 1, 1, 0, 0, 0};
  s[3] = (dpshim_sample_t){1, 1, 1, 0, 0, 0};
  dpshim_plan_input_t in = plan_input(2, s, 4, DPSHIM_ALGO_DEFAULT);
  in.model = (dpshim_cost_model_t){1, 0, 0, 0, 0};
  dpshim_plan_t pl;
  dpshim_plan_init(&pl);
  cr_assert_eq(dpshim_plan_solve(&in, &pl), 0, "%s", pl.message);
  cr_assert_eq(pl.decision, DPSHIM_DECISION_APPLY, "%s", pl.message);
  cr_assert_eq(pl.dest[0], 1, "without a cap A moves");
  int64_t caps[2] = {4, 0};
  in.rows_cap = caps;
  in.rows_cap_len = 2;
  cr_assert_eq(dpshim_plan_solve(&in, &pl), 0, "%s", pl.message);
  cr_assert_eq(pl.decision, DPSHIM_DECISION_APPLY, "%s", pl.message);
  cr_assert_eq(pl.dest[0], 0, "A stays: rank 1 has no rows room");
  cr_assert_eq(pl.dest[1], 1, "B moves instead");
  cr_assert_leq(max_of(pl.load_after, 2), 12102.0);
  cr_assert_eq(max_of(pl.load_after, 2), 12101.0, "the optimum within the cap");
  dpshim_plan_free(&pl);
}

/* ---- small instances under binding rows caps, against exhaustive search */

#define TINY_RANKS 4
#define TINY_N 8
#define TINY_INSTANCES 4000

typedef struct tiny {
  dpshim_sample_t s[TINY_N];
  int64_t rows_cap[TINY_RANKS];
  int64_t cap_tokens; /* -1: none */
  dpshim_plan_input_t in;
} tiny_t;

/* P = 2..4, P..8 samples, half with rows; each rank's rows cap what it
 * holds plus up to half the mean rows (the origins are within the caps, and
 * the caps bind), a token cap on half of them. */
static void tiny_instance(tiny_t *t, uint64_t seed) {
  prng_t g = {seed};
  int32_t p = (int32_t)prng_range(&g, 2, TINY_RANKS);
  int64_t n = prng_range(&g, p, TINY_N), rows = 0;
  for (int64_t i = 0; i < n; i++) {
    int64_t len = prng_range(&g, 1, 200);
    int32_t origin = i < p ? (int32_t)i : (int32_t)prng_range(&g, 0, p - 1);
    int64_t r = prng_range(&g, 0, 1) ? prng_range(&g, 1, 16) : 0;
    t->s[i] = (dpshim_sample_t){len, prng_range(&g, 1, 1000), origin, r, 0, 0};
    rows += r;
  }
  int64_t held[TINY_RANKS] = {0};
  for (int64_t i = 0; i < n; i++) held[t->s[i].origin] += t->s[i].rows;
  for (int32_t r = 0; r < p; r++)
    t->rows_cap[r] = held[r] + (int64_t)(0.5 * prng_unit(&g) * (double)rows / p);
  static const dpshim_cost_model_t models[] = {
      {1, 0, 0, 0, 0}, {0, 1, 0, 0, 0}, {1, 8000, 0, 0, 0}};
  t->in = plan_input(p, t->s, n, DPSHIM_ALGO_DEFAULT);
  t->in.model = models[prng_range(&g, 0, 2)];
  t->in.cap_ratio = prng_range(&g, 0, 1) ? 1.1 + 0.9 * prng_unit(&g) : 0;
  t->in.rows_cap = t->rows_cap;
  t->in.rows_cap_len = p;
}

/* Whether `where` keeps every rank non-empty and within both caps. */
static int tiny_feasible(const tiny_t *t, const int32_t *where) {
  int64_t tokens[TINY_RANKS], rows[TINY_RANKS], count[TINY_RANKS] = {0};
  tokens_of(&t->in, where, tokens);
  for (int64_t i = 0; i < t->in.nsamples; i++) count[where[i]]++;
  for (int32_t r = 0; r < t->in.ranks; r++)
    if (count[r] == 0 || (t->cap_tokens >= 0 && tokens[r] > t->cap_tokens))
      return 0;
  return within_rows_caps(&t->in, where, rows);
}

static double tiny_max_load(const tiny_t *t, const int32_t *where) {
  double load[TINY_RANKS] = {0};
  loads_of(&t->in, where, load);
  return max_of(load, t->in.ranks);
}

/* The least maximum load of any feasible assignment (INFINITY: none). */
static double tiny_optimum(const tiny_t *t) {
  int32_t where[TINY_N] = {0};
  double best = INFINITY;
  for (;;) {
    if (tiny_feasible(t, where)) best = fmin(best, tiny_max_load(t, where));
    int64_t k = 0;
    while (k < t->in.nsamples && ++where[k] == t->in.ranks) where[k++] = 0;
    if (k == t->in.nsamples) return best;
  }
}

/* The least maximum load one move or one swap away from the origins
 * reaches within both caps. */
static double tiny_best_step(const tiny_t *t) {
  int64_t n = t->in.nsamples;
  int32_t where[TINY_N];
  for (int64_t i = 0; i < n; i++) where[i] = t->s[i].origin;
  double best = INFINITY;
  for (int64_t i = 0; i < n; i++) {
    int32_t home = where[i];
    for (int32_t r = 0; r < t->in.ranks; r++) {
      where[i] = r;
      if (r != home && tiny_feasible(t, where))
        best = fmin(best, tiny_max_load(t, where));
      for (int64_t j = 0; j < n; j++) {
        if (r == home || where[j] != r || j == i) continue;
        where[j] = home;
        if (tiny_feasible(t, where)) best = fmin(best, tiny_max_load(t, where));
        where[j] = r;
      }
    }
    where[i] = home;
  }
  return best;
}

/* default never skips for no gain while a single move or swap within the
 * caps lowers the maximum load; how far it stays from the exhaustive
 * optimum is reported, not asserted (it aims at the bound, and tiny
 * instances under binding caps are far from it). */
Test(plan_default, small_instances_under_rows_caps) {
  static tiny_t t;
  int worse = 0, compared = 0;
  dpshim_plan_t pl;
  dpshim_plan_init(&pl);
  for (uint64_t seed = 1; seed <= TINY_INSTANCES; seed++) {
    tiny_instance(&t, seed);
    cr_assert_eq(dpshim_plan_solve(&t.in, &pl), 0, "seed %llu: %s",
                 (unsigned long long)seed, pl.message);
    t.cap_tokens = pl.cap_tokens;
    int32_t origin[TINY_N];
    for (int64_t i = 0; i < t.in.nsamples; i++) origin[i] = t.s[i].origin;
    if (!tiny_feasible(&t, origin)) continue; /* default must move anyway */
    double before = max_of(pl.load_before, t.in.ranks);
    double after = max_of(pl.load_after, t.in.ranks);
    double step = tiny_best_step(&t), optimum = tiny_optimum(&t);
    cr_assert(!(step < before * (1 - 1e-12) &&
                pl.decision != DPSHIM_DECISION_APPLY),
              "seed %llu: skipped (%s) although a step reaches %.17g < %.17g",
              (unsigned long long)seed, pl.message, step, before);
    compared++;
    worse += after > optimum * 1.01;
  }
  fprintf(stderr, "default above the exhaustive optimum by > 1 %%: %d of %d\n",
          worse, compared);
  dpshim_plan_free(&pl);
}

/* Few ranks (2-16), 2-8 samples each of a heavy-tailed mix, into s[]; an
 * instance per seed. */
static dpshim_plan_input_t heavy_tailed_mix(uint64_t seed_no) {
  prng_t g = {seed_no * 7919};
  int32_t ranks = (int32_t)prng_range(&g, 2, 16);
  int64_t n = 0;
  for (int32_t r = 0; r < ranks; r++)
    for (int64_t k = prng_range(&g, 2, 8); k > 0; k--, n++) {
      int64_t len = prng_unit(&g) < 0.05 ? prng_range(&g, 1500, 4000)
                                        : prng_range(&g, 20, 900);
      s[n] = (dpshim_sample_t){len, prng_range(&g, 1, 1000), r, 0, 0, 0};
    }
  dpshim_plan_input_t in = plan_input(ranks, s, n, DPSHIM_ALGO_DEFAULT);
  in.model = (dpshim_cost_model_t){1, 1000, 0, 0, 0};
  in.cap_ratio = 2.0;
  return in;
}

/* Few ranks, few samples of a heavy-tailed mix, an instance per seed: where
 * seed's plan applies, default's maximum load is never above it (its
 * second start), and no moved sample of default's plan could have gone
 * home without raising the maximum (the send-home pass). */
Test(plan_default, never_above_seed_and_nothing_left_to_send_home) {
  int compared = 0;
  for (uint64_t seed_no = 1; seed_no <= 1500; seed_no++) {
    dpshim_plan_input_t in = heavy_tailed_mix(seed_no);
    int32_t ranks = in.ranks;
    int64_t n = in.nsamples;
    dpshim_plan_t def, seed;
    solve_both(&in, &def, &seed);
    double dmax = max_of(def.load_after, ranks);
    if (seed.decision == DPSHIM_DECISION_APPLY) {
      compared++;
      cr_assert(dmax <= max_of(seed.load_after, ranks), "instance %llu: "
                "default %.17g above seed %.17g", (unsigned long long)seed_no,
                dmax, max_of(seed.load_after, ranks));
    }
    for (int64_t i = 0; def.decision == DPSHIM_DECISION_APPLY && i < n; i++) {
      int32_t r = def.dest[i], o = s[i].origin;
      if (r == o) continue;
      int64_t tokens[RANKS], count = 0;
      tokens_of(&in, def.dest, tokens);
      for (int64_t j = 0; j < n; j++) count += def.dest[j] == r;
      double cost = (double)s[i].len * (double)s[i].len + 1000.0 * s[i].len;
      cr_assert(count < 2 || def.load_after[o] + cost > dmax ||
                    tokens[o] + s[i].len > def.cap_tokens,
                "instance %llu: sample %lld could go home",
                (unsigned long long)seed_no, (long long)i);
    }
    dpshim_plan_free(&def);
    dpshim_plan_free(&seed);
  }
  cr_assert_gt(compared, 50, "seed applied on %d instances", compared);
}

/* Whether some exchange takes moved sample i home (to o) from r with room
 * to spare (margin: no rounding decides it): j, at o, goes to r (a swap) or
 * to a third rank, and fewer bytes move. */
static int exchange_saves(const dpshim_plan_input_t *in, const dpshim_plan_t *pl,
                          const double *cost, int64_t i, double max) {
  int64_t n = in->nsamples, tokens[RANKS], count[RANKS] = {0};
  int32_t r = pl->dest[i], o = s[i].origin;
  double margin = 1e-9 * max;
  tokens_of(in, pl->dest, tokens);
  for (int64_t k = 0; k < n; k++) count[pl->dest[k]]++;
  for (int64_t j = 0; j < n; j++) {
    if (pl->dest[j] != o || j == i) continue;
    if (pl->load_after[o] - cost[j] + cost[i] > max - margin ||
        tokens[o] - s[j].len + s[i].len > pl->cap_tokens)
      continue;
    for (int32_t to = 0; to < in->ranks; to++) {
      int64_t added = (s[j].origin == to ? 0 : s[j].bytes) -
                      (s[j].origin == o ? 0 : s[j].bytes);
      if (to == o || s[i].bytes - added <= 0) continue;
      int fits = to == r ? pl->load_after[r] - cost[i] + cost[j] <= max - margin &&
                               tokens[r] - s[i].len + s[j].len <= pl->cap_tokens
                         : count[r] >= 2 &&
                               pl->load_after[to] + cost[j] <= max - margin &&
                               tokens[to] + s[j].len <= pl->cap_tokens;
      if (fits) return 1;
    }
  }
  return 0;
}

/* The same mixes: no moved sample of default's plan could go home in
 * exchange for one of its home's samples (sent where it was, or to a
 * third rank) moving fewer bytes within the plan's maximum. */
Test(plan_default, nothing_left_to_bring_home_by_exchange) {
  static double cost[MAXN];
  int64_t moved = 0;
  for (uint64_t seed_no = 1; seed_no <= 1500; seed_no++) {
    dpshim_plan_input_t in = heavy_tailed_mix(seed_no);
    int32_t ranks = in.ranks;
    int64_t n = in.nsamples;
    for (int64_t i = 0; i < n; i++)
      cost[i] = (double)s[i].len * (double)s[i].len + 1000.0 * (double)s[i].len;
    dpshim_plan_t def;
    dpshim_plan_init(&def);
    cr_assert_eq(dpshim_plan_solve(&in, &def), 0, "%s", def.message);
    double dmax = max_of(def.load_after, ranks);
    for (int64_t i = 0; def.decision == DPSHIM_DECISION_APPLY && i < n; i++) {
      if (def.dest[i] == s[i].origin) continue;
      moved++;
      cr_assert(!exchange_saves(&in, &def, cost, i, dmax),
                "instance %llu: sample %lld could go home by an exchange",
                (unsigned long long)seed_no, (long long)i);
    }
    dpshim_plan_free(&def);
  }
  cr_assert_gt(moved, 500, "%lld moved samples checked", (long long)moved);
}

/* The bytes `where` moves, priced as dpshim_plan_t.bytes_priced prices
 * them under t->in's hosts. */
static int64_t tiny_price(const tiny_t *t, const int32_t *where) {
  const int32_t *host = t->in.host;
  double cost = t->in.inter_host_cost > 0 ? t->in.inter_host_cost
                                          : DPSHIM_INTER_HOST_COST_DEFAULT;
  int64_t price = 0;
  for (int64_t i = 0; i < t->in.nsamples; i++) {
    int32_t o = t->s[i].origin;
    if (where[i] == o) continue;
    price += host && host[where[i]] != host[o]
                 ? (int64_t)llround((double)t->s[i].bytes * cost)
                 : t->s[i].bytes;
  }
  return price;
}

/* The optimum and, among feasible plans with maximum load at most `limit`,
 * the fewest bytes moved, priced (INT64_MAX: none), by enumeration. */
static double tiny_optimum_and_fewest(const tiny_t *t, double limit,
                                      int64_t *fewest) {
  int32_t where[TINY_N] = {0};
  double best = INFINITY;
  *fewest = INT64_MAX;
  for (;;) {
    if (tiny_feasible(t, where)) {
      double max = tiny_max_load(t, where);
      int64_t bytes = tiny_price(t, where);
      best = fmin(best, max);
      if (max <= limit && bytes < *fewest) *fewest = bytes;
    }
    int64_t k = 0;
    while (k < t->in.nsamples && ++where[k] == t->in.ranks) where[k++] = 0;
    if (k == t->in.nsamples) return best;
  }
}

/* Without rows caps, at small scale default's exact search reaches the
 * optimum (within 10^-3: it may trade up to 9e-4 of it for bytes) and, for
 * the maximum load it ends at, the fewest bytes: each against enumeration.
 * With hosts (ranks in pairs), the fewest bytes priced. Returns on how many
 * instances a plan cheaper than the plan made without hosts was found. */
static int tiny_fewest_bytes(const int32_t *host) {
  static tiny_t t;
  int improved = 0, cheaper = 0;
  dpshim_plan_t pl, flat;
  dpshim_plan_init(&pl);
  dpshim_plan_init(&flat);
  for (uint64_t seed = 1; seed <= 1000; seed++) {
    tiny_instance(&t, seed);
    t.in.rows_cap = NULL;
    t.in.rows_cap_len = 0;
    t.in.threshold = 0;
    t.in.host = host;
    t.in.host_len = host ? t.in.ranks : 0;
    cr_assert_eq(dpshim_plan_solve(&t.in, &pl), 0, "%s", pl.message);
    t.in.ignore_hosts = 1;
    cr_assert_eq(dpshim_plan_solve(&t.in, &flat), 0, "%s", flat.message);
    t.in.ignore_hosts = 0;
    cr_assert_eq(pl.bytes_priced, tiny_price(&t, pl.dest));
    cheaper += pl.bytes_priced < flat.bytes_priced;
    t.cap_tokens = pl.cap_tokens;
    int32_t origin[TINY_N];
    for (int64_t i = 0; i < t.in.nsamples; i++) origin[i] = t.s[i].origin;
    if (!tiny_feasible(&t, origin)) continue;
    double after = max_of(pl.load_after, t.in.ranks);
    int64_t fewest;
    double optimum = tiny_optimum_and_fewest(&t, after, &fewest);
    cr_assert(after <= optimum * (1 + 1e-3),
              "seed %llu: default %.17g, optimum %.17g",
              (unsigned long long)seed, after, optimum);
    cr_assert(pl.bytes_priced <= fewest, "seed %llu: %lld bytes, fewest %lld",
              (unsigned long long)seed, (long long)pl.bytes_priced,
              (long long)fewest);
    improved += pl.decision == DPSHIM_DECISION_APPLY;
  }
  cr_assert_gt(improved, 300, "applied on %d instances", improved);
  dpshim_plan_free(&pl);
  dpshim_plan_free(&flat);
  return cheaper;
}

Test(plan_default, small_instances_at_the_optimum_with_fewest_bytes) {
  cr_assert_eq(tiny_fewest_bytes(NULL), 0, "no hosts, one price");
}

/* Told the hosts, the fewest bytes priced: cheaper than the plan made
 * without them on some instances. */
Test(plan_default, small_instances_with_hosts_at_the_fewest_priced_bytes) {
  static const int32_t pairs[TINY_RANKS] = {0, 0, 1, 1};
  int cheaper = tiny_fewest_bytes(pairs);
  cr_assert_gt(cheaper, 20, "cheaper on %d instances", cheaper);
  fprintf(stderr, "hosts: cheaper than without them on %d of 1000\n", cheaper);
}

/* Hosts of 8 ranks, 32K packs of samples up to 1K tokens: told the
 * hosts, default moves at most 85 % of the bytes across them it moves when
 * not told (78 % here; the bench's profiles about half), within 0.1 % of
 * the makespan; and the plan's bytes_inter_host is what its dest says.
 * (Short samples of about equal cost per byte leave little to choose.) */
Test(plan_default, hosts_keep_moves_on_the_host) {
  static int32_t host[RANKS];
  for (int32_t r = 0; r < RANKS; r++) host[r] = r / 8;
  int64_t across[2] = {0, 0};
  double worst = 0;
  for (uint64_t seed = 1; seed <= 5; seed++) {
    int64_t n = packed_instance_upto(seed, 1024);
    dpshim_plan_input_t in = plan_input(RANKS, s, n, DPSHIM_ALGO_DEFAULT);
    in.model = (dpshim_cost_model_t){1, 8000, 0, 0, 0};
    dpshim_plan_t flat, topo;
    dpshim_plan_init(&flat);
    dpshim_plan_init(&topo);
    cr_assert_eq(dpshim_plan_solve(&in, &flat), 0, "%s", flat.message);
    in.host = host;
    in.host_len = RANKS;
    cr_assert_eq(dpshim_plan_solve(&in, &topo), 0, "%s", topo.message);
    int64_t counted = 0, flat_across = 0;
    for (int64_t i = 0; i < n; i++) {
      if (host[topo.dest[i]] != host[s[i].origin]) counted += s[i].bytes;
      if (host[flat.dest[i]] != host[s[i].origin]) flat_across += s[i].bytes;
    }
    cr_assert_eq(topo.bytes_inter_host, counted, "seed %llu",
                 (unsigned long long)seed);
    cr_assert_eq(flat.bytes_inter_host, 0, "no hosts, no bytes across them");
    across[0] += flat_across, across[1] += topo.bytes_inter_host;
    double ratio = max_of(topo.load_after, RANKS) / max_of(flat.load_after, RANKS);
    worst = ratio > worst ? ratio : worst;
    dpshim_plan_free(&flat);
    dpshim_plan_free(&topo);
  }
  cr_assert_gt(across[0], 0);
  fprintf(stderr, "hosts: %.3f of the bytes across hosts, makespan %.6f x\n",
          (double)across[1] / (double)across[0], worst);
  cr_assert_leq(across[1], 0.85 * (double)across[0],
                "across hosts: %lld told, %lld not", (long long)across[1],
                (long long)across[0]);
  cr_assert_leq(worst, 1.001, "makespan %.6f x the plan without hosts", worst);
}

/* Every rank on one host: the same plan as with no hosts (the shim always
 * passes the hosts it learnt, on one machine all the same), on packed
 * batches with histories of earlier micro-batches and token caps. */
Test(plan_default, one_host_plans_as_no_hosts) {
  static const int32_t host[RANKS] = {0};
  static double history[RANKS];
  dpshim_plan_t flat, one;
  dpshim_plan_init(&flat);
  dpshim_plan_init(&one);
  for (uint64_t seed = 1; seed <= 40; seed++) {
    prng_t g = {seed};
    int64_t n = packed_instance_upto(seed, prng_range(&g, 1024, PACK));
    int32_t ranks = (int32_t)prng_range(&g, 2, RANKS);
    while (n > 0 && s[n - 1].origin >= ranks) n--;
    for (int32_t r = 0; r < ranks; r++) history[r] = 1e6 * prng_unit(&g);
    dpshim_plan_input_t in = plan_input(ranks, s, n, DPSHIM_ALGO_DEFAULT);
    in.model = (dpshim_cost_model_t){1, 8000, 0, 0, 0};
    in.cap_ratio = prng_range(&g, 0, 1) ? 1.05 : 0;
    in.history = prng_range(&g, 0, 1) ? history : NULL;
    in.history_len = ranks;
    cr_assert_eq(dpshim_plan_solve(&in, &flat), 0, "%s", flat.message);
    in.host = host;
    in.host_len = ranks;
    cr_assert_eq(dpshim_plan_solve(&in, &one), 0, "%s", one.message);
    for (int64_t i = 0; i < n; i++)
      cr_assert_eq(one.dest[i], flat.dest[i], "seed %llu sample %lld",
                   (unsigned long long)seed, (long long)i);
    cr_assert_eq(one.bytes_priced, flat.bytes_moved);
  }
  dpshim_plan_free(&flat);
  dpshim_plan_free(&one);
}

/* Four packs of 32768 tokens, a quarter of the samples long (2048-12000
 * tokens) and the rest short (16-600), 12 bytes a token, cost len² +
 * 8000·len: the `long` profile in small. Returns the sample count. */
static int64_t long_packs(uint64_t seed, int32_t ranks) {
  prng_t g = {seed};
  int64_t n = 0;
  for (int32_t r = 0; r < ranks; r++) {
    for (int64_t left = 32768; left > 0; n++) {
      int64_t len = prng_range(&g, 0, 3) == 0 ? prng_range(&g, 2048, 12000)
                                              : prng_range(&g, 16, 600);
      if (len > left) len = left;
      s[n] = (dpshim_sample_t){len, 12 * len, r, 0, 0, 0};
      left -= len;
    }
  }
  return n;
}

/* Seed 207 (53 samples on 4 ranks): the exact search's plan re-deals, and
 * the steps that move one or two samples at a time leave it at 578 184
 * bytes; re-dealing two or three ranks at a time exactly under the same
 * maximum (default_pairs.c) brings it to 187 212. */
Test(plan_default, pairs_bring_a_re_deal_home) {
  int64_t n = long_packs(207, 4);
  dpshim_plan_input_t in = plan_input(4, s, n, DPSHIM_ALGO_DEFAULT);
  in.model = (dpshim_cost_model_t){1, 8000, 0, 0, 0};
  in.cap_ratio = 1.2;
  dpshim_plan_t pl;
  dpshim_plan_init(&pl);
  cr_assert_eq(dpshim_plan_solve(&in, &pl), 0, "%s", pl.message);
  cr_assert_eq(pl.decision, DPSHIM_DECISION_APPLY, "%s", pl.message);
  cr_assert_eq(n, 53);
  double ratio = max_of(pl.load_after, 4) / pl.lower_bound_cap;
  cr_assert(ratio <= 1.0002, "max / cap bound %.6f", ratio);
  cr_assert(pl.bytes_moved <= 200000, "moved %lld bytes",
            (long long)pl.bytes_moved);
  int64_t tokens[4];
  tokens_of(&in, pl.dest, tokens);
  for (int32_t r = 0; r < 4; r++)
    cr_assert(tokens[r] <= pl.cap_tokens, "rank %d over the cap", r);
  check_no_empty_rank(&pl, n, 4);
  dpshim_plan_free(&pl);
}
