/* dpshim-sim decides hand-offs as the shim does: the same inputs, fed to the
 * shim's balancer (over the thread mock of its comm seam) and to the
 * simulator's sim_decide(), give the same decision, and when a plan was
 * solved the same loads (so the same cap, model, history and plan).
 *
 * Each rank's batch has the layout the simulator prices: tokens, labels and
 * loss weights (token-aligned, 4 B a token) and an 8-byte id per sample, so
 * a sample's bytes are the simulator's 12 B per token + 8. Its capacities
 * are the simulator's room: samples (the offsets and ids) and tokens (the
 * three token-aligned fields). Capacities are often tight, so the cap is
 * lowered to them and plans overflow them ("capacity").
 *
 * Every instance is a few hand-offs of one step, so histories carry over;
 * the run as a whole must see each kind of decision a few times, or the
 * comparison would prove little.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../tools/sim/sim.h"
#include "balance.h"
#include "mock_comm.h"
#include "plan_fixture.h"

#define MAXP 16
#define MAXS 12   /* samples one rank may hold */
#define INSTANCES 800
#define MIN_EACH 3 /* times each kind of decision must occur */

/* ---- one hand-off's batches ------------------------------------------------ */

typedef struct rank_buf {
  dpshim_batch_t batch;
  dpshim_field_t fields[4];
  int32_t *cu, *tokens, *labels;
  float *weights;
  uint64_t *ids;
} rank_buf_t;

typedef struct handoff {
  int P;
  int32_t n[MAXP];
  int32_t len[MAXP][MAXS];
  int64_t room[2 * MAXP]; /* as sim_decide_in_t's */
  rank_buf_t rb[MAXP];
} handoff_t;

static void rb_free(rank_buf_t *rb) {
  free(rb->cu);
  free(rb->ids);
  free(rb->tokens);
  free(rb->labels);
  free(rb->weights);
  memset(rb, 0, sizeof *rb);
}

/* Rank r's batch, packed, at exactly its room. */
static void rb_pack(handoff_t *h, int r) {
  rank_buf_t *rb = &h->rb[r];
  int64_t cap_s = h->room[SIM_ROOM_SAMPLES(r)];
  int64_t cap_t = h->room[SIM_ROOM_TOKENS(r)];
  rb->cu = calloc((size_t)cap_s + 1, sizeof *rb->cu);
  rb->ids = calloc((size_t)cap_s + 1, sizeof *rb->ids);
  rb->tokens = calloc((size_t)cap_t + 1, sizeof *rb->tokens);
  rb->labels = calloc((size_t)cap_t + 1, sizeof *rb->labels);
  rb->weights = calloc((size_t)cap_t + 1, sizeof *rb->weights);
  cr_assert(rb->cu && rb->ids && rb->tokens && rb->labels && rb->weights);
  rb->cu[0] = 0;
  for (int i = 0; i < h->n[r]; i++) {
    rb->cu[i + 1] = rb->cu[i] + h->len[r][i];
    rb->ids[i] = ((uint64_t)r << 32) | (uint64_t)i;
  }
  rb->fields[0] = (dpshim_field_t){"tokens", rb->tokens, 4, rb->cu, cap_t};
  rb->fields[1] = (dpshim_field_t){"labels", rb->labels, 4, rb->cu, cap_t};
  rb->fields[2] = (dpshim_field_t){"weights", rb->weights, 4, rb->cu, cap_t};
  rb->fields[3] = (dpshim_field_t){"ids", rb->ids, 8, NULL, cap_s};
  rb->batch = (dpshim_batch_t){h->n[r], (int32_t)cap_s, rb->cu, 4, rb->fields, NULL};
}

/* Sample counts: 1 .. MAXS/2, or 1 .. 2 (where plans that move nothing
 * are likelier); sometimes an empty rank, rarely a group with fewer samples
 * than ranks. */
static int draw_counts(handoff_t *h, prng_t *g) {
  int mode = (int)prng_range(g, 0, 29);
  int32_t most = mode < 12 ? 2 : MAXS / 2;
  for (int r = 0; r < h->P; r++) {
    h->n[r] = (int32_t)prng_range(g, 1, most);
    if (mode == 0) h->n[r] = prng_range(g, 0, 2) == 0 ? 1 : 0;
  }
  if (mode == 1) h->n[prng_range(g, 0, h->P - 1)] = 0;
  return most == 2;
}

/* Lengths: skewed, with one or two hot ranks (unless `even`), a dominant
 * sample now and then, and lengths 0. */
static void draw_lengths(handoff_t *h, prng_t *g, int even) {
  int hot = even ? -1 : (int)prng_range(g, 0, h->P - 1);
  int hot2 = even ? -1 : (int)prng_range(g, 0, h->P - 1);
  int32_t top = (int32_t)prng_range(g, 8, 200);
  for (int r = 0; r < h->P; r++)
    for (int i = 0; i < h->n[r]; i++) {
      int32_t t = (r == hot || r == hot2) ? 6 * top : top;
      int32_t len = (int32_t)prng_range(g, 0, t);
      if (prng_range(g, 0, 9) == 0) len = 0;
      if (prng_range(g, 0, 59) == 0) len = 40 * top; /* dominant */
      h->len[r][i] = len;
    }
}

/* Each rank's room: its own use plus a little (tight), or a lot. */
static void draw_room(handoff_t *h, prng_t *g, int tight) {
  for (int r = 0; r < h->P; r++) {
    int64_t tokens = 0;
    for (int i = 0; i < h->n[r]; i++) tokens += h->len[r][i];
    int64_t s = tight ? prng_range(g, 0, 3) : MAXS * MAXP;
    int64_t t = tight ? prng_range(g, 0, 400) : 200 * MAXS * MAXP;
    h->room[SIM_ROOM_SAMPLES(r)] = h->n[r] + s;
    h->room[SIM_ROOM_TOKENS(r)] = tokens + t;
  }
}

static void handoff_draw(handoff_t *h, int P, prng_t *g, int tight) {
  memset(h, 0, sizeof *h);
  h->P = P;
  draw_lengths(h, g, draw_counts(h, g));
  draw_room(h, g, tight);
  for (int r = 0; r < P; r++) rb_pack(h, r);
}

static void handoff_free(handoff_t *h) {
  for (int r = 0; r < h->P; r++) rb_free(&h->rb[r]);
}

/* The samples as every rank gathers them: rank order, then index. */
static int64_t gathered(const handoff_t *h, dpshim_sample_t *s) {
  int64_t n = 0;
  for (int r = 0; r < h->P; r++)
    for (int i = 0; i < h->n[r]; i++)
      s[n++] = (dpshim_sample_t){h->len[r][i],
                                 SIM_BYTES_PER_TOKEN * (int64_t)h->len[r][i] +
                                     SIM_BYTES_PER_SAMPLE,
                                 r, 0, 0, 0};
  return n;
}

/* ---- the shim's side: its balancer on the thread mock ---------------------- */

typedef struct shim_side {
  handoff_t *h;
  dpshim__balancer_t *bal[MAXP];
  int rc[MAXP];
  const char *why[MAXP];
  int has_loads[MAXP];
  double before[MAXP][MAXP], after[MAXP][MAXP];
} shim_side_t;

static void balance_rank(dpshim__comm_t *comm, int rank, void *arg) {
  shim_side_t *x = arg;
  dpshim__handoff_t ho = {.step = 1, .plan = 1, .note = NULL};
  dpshim__balance_report_t rep;
  x->rc[rank] = dpshim__balance(x->bal[rank], comm, &x->h->rb[rank].batch,
                                &ho, &rep);
  x->why[rank] = rep.skip_reason;
  /* The loads live until the balancer's next call: copy them now. */
  x->has_loads[rank] = rep.load_before != NULL;
  if (!rep.load_before) return;
  memcpy(x->before[rank], rep.load_before, sizeof(double) * x->h->P);
  memcpy(x->after[rank], rep.load_after, sizeof(double) * x->h->P);
}

static int same_str(const char *a, const char *b) {
  return a == b || (a && b && !strcmp(a, b));
}

static const char *show(const char *why) { return why ? why : "apply"; }

/* One hand-off on every rank; all ranks must agree, as always. */
static void shim_balance(shim_side_t *x) {
  mock_stats_t stats;
  mock_opts_t opts = {.size = x->h->P, .fail_rank = -1};
  cr_assert_eq(mock_run_ex(&opts, balance_rank, x, &stats), 0, "mock: %s",
               stats.message);
  for (int r = 0; r < x->h->P; r++) {
    cr_assert_eq(x->rc[r], 0, "rank %d: balance returned %d", r, x->rc[r]);
    cr_assert(same_str(x->why[r], x->why[0]), "rank %d: %s, rank 0: %s", r,
              show(x->why[r]), show(x->why[0]));
  }
}

/* ---- one instance: both sides, hand-off by hand-off ------------------------ */

typedef struct setting {
  int P, handoffs, tight;
  dpshim__balance_config_t cfg;
} setting_t;

static const double caps[] = {0, 0, 1.02, 1.1, 1.3, 2};
static const double thresholds[] = {0, 0, 0.05, 0.3, 1, 4};
static const dpshim_algo_t algos[] = {
    DPSHIM_ALGO_DEFAULT, DPSHIM_ALGO_DEFAULT, DPSHIM_ALGO_SEED,
    DPSHIM_ALGO_SEED,    DPSHIM_ALGO_KK,      DPSHIM_ALGO_KK,
    DPSHIM_ALGO_NONE};

#define PICK(g, a) (a[prng_range(g, 0, sizeof a / sizeof a[0] - 1)])

static setting_t draw_setting(prng_t *g) {
  /* Small groups half the time: plans that move nothing are likelier. */
  int most = prng_range(g, 0, 1) ? 5 : MAXP;
  setting_t s = {.P = (int)prng_range(g, 2, most),
                 .handoffs = (int)prng_range(g, 1, 4),
                 .tight = prng_range(g, 0, 2) != 0};
  /* Costs as the shim's fit gives them: microseconds, mostly quadratic. */
  dpshim_cost_model_t model = {prng_unit(g) * 1e-3, prng_unit(g) * 0.5,
                               prng_range(g, 0, 1) * prng_unit(g) * 20, 0, 0};
  s.cfg = (dpshim__balance_config_t){.algo = PICK(g, algos),
                                     .cap_ratio = PICK(g, caps),
                                     .threshold = PICK(g, thresholds),
                                     .model = model};
  return s;
}

/* Decisions seen over the run: sim_skip_index()'s, then "apply"; and the
 * solved hand-offs whose cap some rank's token buffer lowered. */
static int seen[SIM_NSKIPS + 1], lowered;

/* Whether a rank's token buffer is below the configured cap (or there is
 * none): the cap the solver gets is then the buffers'. */
static int cap_lowered(const handoff_t *h, const setting_t *s, int64_t n,
                       const dpshim_sample_t *samples) {
  int64_t tokens = 0, least = INT64_MAX;
  for (int64_t i = 0; i < n; i++) tokens += samples[i].len;
  for (int r = 0; r < h->P; r++)
    if (h->room[SIM_ROOM_TOKENS(r)] < least) least = h->room[SIM_ROOM_TOKENS(r)];
  double fits = (double)least * h->P / (double)tokens;
  return tokens > 0 && (s->cfg.cap_ratio == 0 || fits < s->cfg.cap_ratio);
}

static void compare_loads(const shim_side_t *x, const sim_decide_out_t *out,
                          const dpshim_plan_t *plan, int k) {
  int P = x->h->P;
  cr_assert_eq(x->has_loads[0], out->solved, "hand-off %d: shim solved %d, "
               "sim %d", k, x->has_loads[0], out->solved);
  if (!out->solved) return;
  for (int r = 0; r < P; r++) {
    cr_assert(x->before[0][r] == plan->load_before[r],
              "hand-off %d rank %d: load before %.17g (shim), %.17g (sim)",
              k, r, x->before[0][r], plan->load_before[r]);
    cr_assert(x->after[0][r] == plan->load_after[r],
              "hand-off %d rank %d: load after %.17g (shim), %.17g (sim)", k,
              r, x->after[0][r], plan->load_after[r]);
  }
}

static void run_instance(uint64_t seed) {
  prng_t g = {seed};
  setting_t s = draw_setting(&g);
  shim_side_t x;
  memset(&x, 0, sizeof x);
  for (int r = 0; r < s.P; r++) cr_assert((x.bal[r] = dpshim__balancer_new(&s.cfg)));
  dpshim_plan_t plan;
  dpshim_plan_init(&plan);
  double history[MAXP] = {0};
  dpshim_sample_t samples[MAXP * MAXS];
  for (int k = 0; k < s.handoffs; k++) {
    handoff_t h;
    handoff_draw(&h, s.P, &g, s.tight);
    int64_t n = gathered(&h, samples);
    /* One host, as the shim here; the solver's inter-host cost. */
    sim_decide_in_t in = {s.P,           n,         samples,
                          h.room,        history,   s.cfg.model,
                          s.cfg.cap_ratio, s.cfg.threshold, s.cfg.algo, 1,
                          NULL,          0,         0};
    sim_decide_out_t out;
    const char *why = sim_decide(&in, &plan, &out);
    cr_assert_eq(out.rc, 0, "seed %llu: sim: %s", (unsigned long long)seed,
                 plan.message);
    x.h = &h;
    shim_balance(&x);
    cr_assert(same_str(why, x.why[0]),
              "seed %llu (P %d, %s, cap %g, threshold %g), hand-off %d: "
              "sim decides %s, shim %s", (unsigned long long)seed, s.P,
              dpshim_algo_name(s.cfg.algo), s.cfg.cap_ratio, s.cfg.threshold,
              k, show(why), show(x.why[0]));
    compare_loads(&x, &out, &plan, k);
    seen[why ? sim_skip_index(why) : SIM_NSKIPS]++;
    lowered += out.solved && cap_lowered(&h, &s, n, samples);
    sim_decide_history(&out, why, &plan, s.P, history);
    handoff_free(&h);
  }
  dpshim_plan_free(&plan);
  for (int r = 0; r < s.P; r++) dpshim__balancer_free(x.bal[r]);
}

Test(sim_policy, same_decisions_as_the_shim, .timeout = 240) {
  memset(seen, 0, sizeof seen);
  lowered = 0;
  for (uint64_t i = 0; i < INSTANCES; i++) run_instance(0x51u + 7919u * i);
  /* Every kind the simulator can meet; "other" must never occur. */
  static const char *const kinds[] = {
      "balanced",   "dominant-sample", "no-gain",   "no-move", "capacity",
      "empty-rank", "too-few-samples", "algo-none"};
  for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
    cr_expect_geq(seen[sim_skip_index(kinds[k])], MIN_EACH,
                  "'%s' decided %d times", kinds[k],
                  seen[sim_skip_index(kinds[k])]);
  cr_expect_eq(seen[SIM_NSKIPS - 1], 0, "unknown reasons: %d",
               seen[SIM_NSKIPS - 1]);
  cr_expect_geq(seen[SIM_NSKIPS], MIN_EACH, "applied %d times",
                seen[SIM_NSKIPS]);
  cr_expect_geq(lowered, MIN_EACH, "the buffers lowered the cap %d times",
                lowered);
  cr_log_info("cap lowered to the buffers: %d", lowered);
  for (int k = 0; k <= SIM_NSKIPS; k++)
    cr_log_info("%s: %d", k < SIM_NSKIPS ? sim_skip_name(k) : "apply",
                seen[k]);
}
