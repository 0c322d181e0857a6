/* One DP size: the shim's warm-up fit, then every measured step under every
 * algorithm, with the real solver on the gathered lengths.
 *
 * What each rank computes follows reftrain: the emulated seconds of the
 * samples it holds after the plan, times its own noise (drawn from its world
 * rank, the step and the micro-batch, so moving samples does not move noise),
 * times --time-scale, over --tp. A DP slot's compute is the slowest of its tp
 * peers (they share the pack, not the noise).
 *
 * What the shim does follows shim/balance.c: a new step starts from no
 * history, each hand-off solves with the history of the step's earlier
 * hand-offs, and only samples that change rank are sent. Whether a plan is
 * applied is the shim's own decision (sim_decide(), on shim/policy.c), with
 * every rank's buffers holding --headroom x pack samples and tokens. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "balance.h"
#include "dpshim/fit.h"
#include "policy.h"
#include "sim.h"

typedef struct ctx {
  const sim_config_t *c;
  int32_t P;
  sim_workload_t w;
  dpshim_cost_model_t model;
  dpshim_plan_t plan;
  dpshim_sample_t *samples; /* one hand-off's */
  double *held;     /* [P * micro] unscaled seconds each slot holds */
  double *drawn;    /* [P * micro] the same as drawn */
  double *history;  /* [P] */
  double *sent, *received, *kept; /* [P] bytes, one hand-off */
  int32_t *partners_out, *partners_in, *stamp, *last_src; /* [P] */
  int64_t *room;    /* [2P] what each rank's buffers hold; see sim_decide_in */
  int64_t *metas;   /* [P] one hand-off's meta bytes per rank */
  size_t slot;      /* the shim's meta slot: it only grows, per run */
} ctx_t;

/* ---- setup ----------------------------------------------------------------- */

/* Every rank's loader buffers: --headroom x pack tokens (tokens, labels and
 * loss weights alike), and as many samples. */
static void set_room(ctx_t *x) {
  int64_t cap = (int64_t)ceil(x->c->headroom * (double)x->w.pack);
  for (int32_t r = 0; r < x->P; r++)
    x->room[SIM_ROOM_SAMPLES(r)] = x->room[SIM_ROOM_TOKENS(r)] = cap;
}

static int ctx_init(ctx_t *x, const sim_config_t *c, int32_t P, char *err,
                    size_t errlen) {
  memset(x, 0, sizeof *x);
  x->c = c;
  x->P = P;
  dpshim_plan_init(&x->plan);
  int64_t H = (c->warmup_last + c->steps) * c->micro;
  if (sim_workload_draw(c, P, H, &x->w, err, errlen) < 0) return -1;
  int64_t most = 0;
  for (int64_t h = 0; h < H; h++)
    if (x->w.first[h + 1] - x->w.first[h] > most)
      most = x->w.first[h + 1] - x->w.first[h];
  size_t p = (size_t)P, pm = p * (size_t)c->micro;
  x->samples = malloc((size_t)most * sizeof *x->samples + 1);
  x->held = calloc(pm, sizeof *x->held);
  x->drawn = calloc(pm, sizeof *x->drawn);
  x->history = calloc(p, sizeof *x->history);
  x->sent = calloc(p, sizeof *x->sent);
  x->received = calloc(p, sizeof *x->received);
  x->kept = calloc(p, sizeof *x->kept);
  x->partners_out = calloc(p, sizeof *x->partners_out);
  x->partners_in = calloc(p, sizeof *x->partners_in);
  x->stamp = calloc(p, sizeof *x->stamp);
  x->last_src = calloc(p, sizeof *x->last_src);
  x->room = calloc(2 * p, sizeof *x->room);
  x->metas = calloc(p, sizeof *x->metas);
  if (x->samples && x->held && x->drawn && x->history && x->sent &&
      x->received && x->kept && x->partners_out && x->partners_in &&
      x->stamp && x->last_src && x->room && x->metas) {
    set_room(x);
    return 0;
  }
  snprintf(err, errlen, "out of memory at %d ranks", (int)P);
  return -1;
}

static void ctx_free(ctx_t *x) {
  sim_workload_free(&x->w);
  dpshim_plan_free(&x->plan);
  free(x->samples);
  free(x->held);
  free(x->drawn);
  free(x->history);
  free(x->sent);
  free(x->received);
  free(x->kept);
  free(x->partners_out);
  free(x->partners_in);
  free(x->stamp);
  free(x->last_src);
  free(x->room);
  free(x->metas);
}

/* ---- compute time ---------------------------------------------------------- */

/* Seconds each slot holds in hand-off h (micro m), as drawn, into drawn[]. */
static void draw_handoff(ctx_t *x, int64_t h, int32_t m) {
  double *d = x->drawn + (size_t)m * (size_t)x->P;
  memset(d, 0, (size_t)x->P * sizeof *d);
  for (int64_t i = x->w.first[h]; i < x->w.first[h + 1]; i++)
    d[x->w.origin[i]] += x->w.seconds[i];
}

/* Slot d's compute in step s: its slowest tp peer's. */
static double slot_compute(const ctx_t *x, const double *secs, int32_t d,
                           int64_t s) {
  const sim_config_t *c = x->c;
  double worst = 0;
  for (int32_t t = 0; t < c->tp; t++) {
    double sum = 0;
    for (int32_t m = 0; m < c->micro; m++)
      sum += secs[(size_t)m * (size_t)x->P + (size_t)d] *
             sim_noise(c, d * c->tp + t, s, m);
    if (sum > worst) worst = sum;
  }
  return worst * c->time_scale / c->tp;
}

/* The slowest slot's compute, and max/mean - 1 into *imbalance. */
static double compute_max(const ctx_t *x, const double *secs, int64_t s,
                          double *imbalance) {
  double max = 0, sum = 0;
  for (int32_t d = 0; d < x->P; d++) {
    double t = slot_compute(x, secs, d, s);
    sum += t;
    if (t > max) max = t;
  }
  *imbalance = sum > 0 ? max / (sum / x->P) - 1 : 0;
  return max;
}

/* ---- the warm-up fit, as the shim does it ----------------------------------- */

/* One point per world rank per warm-up step but the first: the features of
 * its slot's samples and its own compute time (seconds). */
static void warmup_points(ctx_t *x, int64_t s, dpshim_fit_point_t *pts) {
  const sim_config_t *c = x->c;
  int32_t world = x->P * c->tp;
  for (int32_t r = 0; r < world; r++) pts[r] = (dpshim_fit_point_t){0};
  for (int32_t m = 0; m < c->micro; m++) {
    int64_t h = s * c->micro + m;
    for (int64_t i = x->w.first[h]; i < x->w.first[h + 1]; i++) {
      double len = (double)x->w.len[i];
      for (int32_t t = 0; t < c->tp; t++) {
        dpshim_fit_point_t *p = &pts[x->w.origin[i] * c->tp + t];
        p->sum_len2 += len * len;
        p->sum_len += len;
        p->count += 1;
        if (sim_vision_cost(c)) {
          p->sum_patches_sq += (double)x->w.patches_sq[i];
          p->sum_patches += (double)x->w.patches[i];
        }
        p->time += x->w.seconds[i] * sim_noise(c, x->w.origin[i] * c->tp + t,
                                               s, m);
      }
    }
  }
  for (int32_t r = 0; r < world; r++)
    pts[r].time *= c->time_scale / c->tp;
}

/* The shim's model: DPSHIM_FIT_RANKS over steps 3..W (1-based), used in
 * microseconds; linear (0, 1, 0) when the fit fails, as the shim falls back. */
static void fit_model(ctx_t *x) {
  const sim_config_t *c = x->c;
  int64_t iters = c->warmup_last - 2;
  int32_t world = x->P * c->tp;
  dpshim_fit_point_t *pts = calloc((size_t)iters * (size_t)world, sizeof *pts);
  x->model = (dpshim_cost_model_t){.b = 1};
  if (!pts) return;
  for (int64_t k = 0; k < iters; k++)
    warmup_points(x, k + 2, pts + k * world);
  dpshim_fit_input_t in = {.iters = iters, .ranks = world, .points = pts,
                           .method = DPSHIM_FIT_RANKS,
                           .text_only = !sim_vision_cost(c)};
  dpshim_fit_result_t fit;
  if (dpshim_fit(&in, &fit) == 0)
    x->model = dpshim__policy_model_from_fit(fit.model);
  else
    fprintf(stderr, SIM_PROG ": %d ranks: warm-up fit failed (%s); linear "
            "cost\n", (int)x->P, fit.message);
  free(pts);
}

/* ---- one hand-off ----------------------------------------------------------- */

/* What the exchange sends: bytes and partners per rank, into the step. Samples
 * come grouped by origin, which makes counting distinct partners one pass. */
static void exchange_costs(ctx_t *x, int64_t n, sim_step_t *st) {
  size_t pb = (size_t)x->P * sizeof(double), pi = (size_t)x->P * sizeof(int32_t);
  memset(x->sent, 0, pb);
  memset(x->received, 0, pb);
  memset(x->kept, 0, pb);
  memset(x->partners_out, 0, pi);
  memset(x->partners_in, 0, pi);
  for (int32_t r = 0; r < x->P; r++) x->stamp[r] = x->last_src[r] = -1;
  for (int64_t i = 0; i < n; i++) {
    int32_t from = x->samples[i].origin, to = x->plan.dest[i];
    double b = (double)x->samples[i].bytes;
    if (from == to) {
      x->kept[from] += b;
      continue;
    }
    x->sent[from] += b;
    x->received[to] += b;
    st->moved_bytes += b;
    if (x->stamp[to] != from) x->stamp[to] = from, x->partners_out[from]++;
    if (x->last_src[to] != from) x->last_src[to] = from, x->partners_in[to]++;
  }
  double xfer = 0, copy = 0;
  int32_t peers = 0;
  for (int32_t r = 0; r < x->P; r++) {
    double io = fmax(x->sent[r], x->received[r]);
    /* pack what leaves, compact what stays once anything left, append what
     * arrives */
    double cp = x->sent[r] + x->received[r] + (x->sent[r] > 0 ? x->kept[r] : 0);
    int32_t pr = x->partners_out[r] > x->partners_in[r] ? x->partners_out[r]
                                                        : x->partners_in[r];
    if (io > xfer) xfer = io;
    if (cp > copy) copy = cp;
    if (pr > peers) peers = pr;
  }
  st->xfer_bytes += xfer;
  st->copy_bytes += copy;
  st->peers += peers;
}

/* Moves the held seconds of micro m by the applied plan. */
static void apply_plan(ctx_t *x, int64_t first, int64_t n, int32_t m) {
  double *held = x->held + (size_t)m * (size_t)x->P;
  memset(held, 0, (size_t)x->P * sizeof *held);
  for (int64_t i = 0; i < n; i++)
    held[x->plan.dest[i]] += x->w.seconds[first + i];
}

/* The gathered samples of hand-off h into x->samples, and what the gather
 * sends: every rank's header and meta slot (balance.c's, which grows to the
 * largest rank's metas and never shrinks; the hand-offs that grow it also
 * gather the metas apart: not modelled). */
static void gather(ctx_t *x, int64_t first, int64_t n, sim_step_t *st) {
  memset(x->metas, 0, (size_t)x->P * sizeof *x->metas);
  for (int64_t i = 0; i < n; i++) {
    x->samples[i] = (dpshim_sample_t){.len = x->w.len[first + i],
                                      .bytes = x->w.bytes[first + i],
                                      .origin = x->w.origin[first + i]};
    if (sim_vision_cost(x->c)) {
      x->samples[i].patches = x->w.patches[first + i];
      x->samples[i].patches_sq = x->w.patches_sq[first + i];
    }
    x->metas[x->w.origin[first + i]] += SIM_META_BYTES;
  }
  size_t most = 0;
  for (int32_t r = 0; r < x->P; r++)
    if ((size_t)x->metas[r] > most) most = (size_t)x->metas[r];
  if (most > x->slot) x->slot = dpshim__balance_slot_bytes(most);
  st->gather_bytes +=
      (double)x->P * (double)(dpshim__balance_header_bytes() + x->slot);
}

/* The shim at one hand-off; -1 with err on a solver error. */
static int balance_handoff(ctx_t *x, dpshim_algo_t algo, int64_t h, int32_t m,
                           sim_step_t *st, char *err, size_t errlen) {
  int64_t first = x->w.first[h], n = x->w.first[h + 1] - first;
  gather(x, first, n, st);
  st->handoffs++;
  sim_decide_in_t in = {
      .ranks = x->P,
      .nsamples = n,
      .samples = x->samples,
      .room = x->room,
      .history = x->history,
      .model = x->model,
      .cap_ratio = x->c->cap_ratio,
      .threshold = x->c->threshold,
      .algo = algo,
      .solve_reps = x->c->solve_reps,
  };
  sim_decide_out_t out;
  const char *why = sim_decide(&in, &x->plan, &out);
  if (out.rc < 0) {
    snprintf(err, errlen, "%d ranks: solver: %s", (int)x->P, x->plan.message);
    return -1;
  }
  st->solve_s += out.solve_s;
  sim_decide_history(&out, why, &x->plan, x->P, x->history);
  if (why) {
    st->skipped[sim_skip_index(why)]++;
    return 0;
  }
  st->applied++;
  exchange_costs(x, n, st);
  apply_plan(x, first, n, m);
  return 0;
}

/* ---- one step --------------------------------------------------------------- */

static int simulate_step(ctx_t *x, sim_algo_t a, int64_t s, sim_step_t *st,
                         char *err, size_t errlen) {
  const sim_config_t *c = x->c;
  memset(st, 0, sizeof *st);
  memset(x->history, 0, (size_t)x->P * sizeof *x->history);
  for (int32_t m = 0; m < c->micro; m++) {
    int64_t h = s * c->micro + m;
    draw_handoff(x, h, m);
    for (int64_t i = x->w.first[h]; i < x->w.first[h + 1]; i++)
      st->tokens += (double)x->w.len[i];
  }
  size_t bytes = (size_t)x->P * (size_t)c->micro * sizeof *x->held;
  memcpy(x->held, x->drawn, bytes);
  for (int32_t m = 0; a.shim && m < c->micro; m++)
    if (balance_handoff(x, a.algo, s * c->micro + m, m, st, err, errlen) < 0)
      return -1;
  compute_max(x, x->drawn, s, &st->imb_before);
  st->compute_max_s = compute_max(x, x->held, s, &st->imb_after);
  return 0;
}

int sim_simulate(const sim_config_t *c, int32_t ranks, const sim_algo_t *algos,
                 int nalgos, sim_run_t *runs, char *err, size_t errlen) {
  ctx_t x;
  memset(runs, 0, (size_t)nalgos * sizeof *runs); /* freeable on any error */
  int rc = ctx_init(&x, c, ranks, err, errlen);
  if (rc == 0) fit_model(&x);
  for (int a = 0; rc == 0 && a < nalgos; a++) {
    x.slot = 0; /* each run is a process of its own */
    runs[a] = (sim_run_t){ranks, algos[a], c->steps, NULL, x.model};
    runs[a].step = calloc((size_t)c->steps, sizeof *runs[a].step);
    if (!runs[a].step) {
      snprintf(err, errlen, "out of memory for the steps");
      rc = -1;
    }
    for (int64_t k = 0; rc == 0 && k < c->steps; k++)
      rc = simulate_step(&x, algos[a], c->warmup_last + k, &runs[a].step[k],
                         err, errlen);
  }
  ctx_free(&x);
  return rc;
}

void sim_run_free(sim_run_t *r) {
  free(r->step);
  r->step = NULL;
}
