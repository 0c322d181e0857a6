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
 * hand-offs, a plan is applied only when the solver says apply and every
 * rank's buffers (--headroom x pack) hold what it gets, and only samples that
 * change rank are sent. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dpshim/fit.h"
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
  int64_t *tokens_to, *count_to; /* [P] capacity check */
} ctx_t;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int64_t sample_bytes(int64_t len) {
  return SIM_BYTES_PER_TOKEN * len + SIM_BYTES_PER_SAMPLE;
}

/* ---- setup ----------------------------------------------------------------- */

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
  x->tokens_to = calloc(p, sizeof *x->tokens_to);
  x->count_to = calloc(p, sizeof *x->count_to);
  if (x->samples && x->held && x->drawn && x->history && x->sent &&
      x->received && x->kept && x->partners_out && x->partners_in &&
      x->stamp && x->last_src && x->tokens_to && x->count_to)
    return 0;
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
  free(x->tokens_to);
  free(x->count_to);
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
  x->model = (dpshim_cost_model_t){0, 1, 0};
  if (!pts) return;
  for (int64_t k = 0; k < iters; k++)
    warmup_points(x, k + 2, pts + k * world);
  dpshim_fit_input_t in = {iters, world, pts, NULL, DPSHIM_FIT_RANKS};
  dpshim_fit_result_t fit;
  if (dpshim_fit(&in, &fit) == 0)
    x->model = (dpshim_cost_model_t){fit.model.a * 1e6, fit.model.b * 1e6,
                                     fit.model.c * 1e6};
  else
    fprintf(stderr, SIM_PROG ": %d ranks: warm-up fit failed (%s); linear "
            "cost\n", (int)x->P, fit.message);
  free(pts);
}

/* ---- one hand-off ----------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* Solves reps times; the median wall time. */
static double timed_solve(ctx_t *x, const dpshim_plan_input_t *in, int *rc) {
  double t[99];
  int reps = x->c->solve_reps;
  for (int k = 0; k < reps; k++) {
    double t0 = now_s();
    *rc = dpshim_plan_solve(in, &x->plan);
    t[k] = now_s() - t0;
    if (*rc < 0) return 0;
  }
  qsort(t, (size_t)reps, sizeof *t, cmp_double);
  return reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
}

/* The shim's cap: the configured ratio, lowered to what the smallest buffer
 * holds (every rank's buffer is --headroom x pack). */
static double cap_ratio(const ctx_t *x, int64_t tokens) {
  double fits = x->c->headroom * (double)x->w.pack * x->P / (double)tokens;
  double r = x->c->cap_ratio;
  return r == 0 || fits < r ? fits : r;
}

/* Whether every rank can hold what the plan gives it. */
static int fits_buffers(ctx_t *x, int64_t first, int64_t n) {
  int64_t cap = (int64_t)ceil(x->c->headroom * (double)x->w.pack);
  memset(x->tokens_to, 0, (size_t)x->P * sizeof *x->tokens_to);
  memset(x->count_to, 0, (size_t)x->P * sizeof *x->count_to);
  for (int64_t i = 0; i < n; i++) {
    x->tokens_to[x->plan.dest[i]] += x->w.len[first + i];
    x->count_to[x->plan.dest[i]]++;
  }
  for (int32_t r = 0; r < x->P; r++)
    if (x->tokens_to[r] > cap || x->count_to[r] > cap) return 0;
  return 1;
}

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

/* The shim at one hand-off; -1 with err on a solver error. */
static int balance_handoff(ctx_t *x, dpshim_algo_t algo, int64_t h, int32_t m,
                           sim_step_t *st, char *err, size_t errlen) {
  int64_t first = x->w.first[h], n = x->w.first[h + 1] - first, tokens = 0;
  for (int64_t i = 0; i < n; i++) {
    x->samples[i] = (dpshim_sample_t){x->w.len[first + i],
                                      sample_bytes(x->w.len[first + i]),
                                      x->w.origin[first + i]};
    tokens += x->w.len[first + i];
  }
  st->handoffs++;
  st->meta_bytes += (double)n * SIM_META_BYTES;
  dpshim_plan_input_t in = {x->P, n, x->samples, x->history, x->P, x->model,
                            cap_ratio(x, tokens), x->c->threshold, algo};
  int rc = 0;
  st->solve_s += timed_solve(x, &in, &rc);
  if (rc < 0) {
    snprintf(err, errlen, "%d ranks: solver: %s", (int)x->P, x->plan.message);
    return -1;
  }
  int apply = x->plan.decision == DPSHIM_DECISION_APPLY &&
              fits_buffers(x, first, n);
  memcpy(x->history, apply ? x->plan.load_after : x->plan.load_before,
         (size_t)x->P * sizeof *x->history);
  if (!apply) return 0;
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
