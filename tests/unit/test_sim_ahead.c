/* dpshim-sim --ahead K: the shim's LLM-level work of each hand-off runs
 * beside the compute of the K micro-batches before it, and only what
 * outlasts that compute is on the step's path. Priced by hand (netmodel.c):
 * inline the on-path time is the whole shim time; compute longer than the
 * work hides it all; work longer than the compute leaves exactly the
 * excess; a rank with slack absorbs its own excess; "+vit" charges each
 * hand-off its worst rank's. Simulated: on path never above the shim's
 * time and below it where the compute hides the work, each hand-off beside
 * the previous step's compute (one micro-batch a step), K = 0 the inline
 * run. And --ahead's bad values fail with one line naming it.
 */
#include <criterion/criterion.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../tools/sim/sim.h"
#include "sim_args.h"

/* ---- priced by hand ------------------------------------------------------- */

#define P 2
#define M 2

/* A network where a hand-off's work is its solve alone (no latency, no
 * bytes): work[m] seconds. */
static sim_net_t net(void) {
  sim_net_t n = sim_net_default();
  n.latency_s = 0;
  return n;
}

static sim_config_t config(void) {
  return (sim_config_t){.tp = 1, .micro = M, .model = emu_model_default()};
}

typedef struct fixture {
  sim_handoff_t handoff[M];
  double overlap[M * P], compute[P];
  sim_ahead_t ahead;
  sim_step_t step;
} fixture_t;

/* Two hand-offs of work[] seconds; rank r has overlap[m * P + r] beside
 * hand-off m and compute[r] over the step; vit: no per-rank compute. */
static void setup(fixture_t *f, const double *work, const double *overlap,
                  const double *compute, int vit) {
  memset(f, 0, sizeof *f);
  double most = 0;
  for (int m = 0; m < M; m++) {
    f->handoff[m].solve_s = work[m];
    f->step.solve_s += work[m];
  }
  memcpy(f->overlap, overlap, sizeof f->overlap);
  memcpy(f->compute, compute, sizeof f->compute);
  for (int r = 0; r < P; r++) most = fmax(most, compute[r]);
  f->ahead = (sim_ahead_t){f->handoff, f->overlap, vit ? NULL : f->compute};
  f->step.handoffs = M;
  f->step.compute_max_s = most;
  f->step.ahead = &f->ahead;
}

static sim_price_t price(const sim_step_t *s) {
  sim_net_t n = net();
  sim_config_t c = config();
  return sim_price_step(&n, &c, P, s);
}

Test(sim_ahead, inline_is_the_whole_shim_time) {
  fixture_t f;
  setup(&f, (double[]){0.5, 0.25}, (double[]){1, 1, 1, 1},
        (double[]){2, 2}, 0);
  f.step.ahead = NULL;
  sim_price_t p = price(&f.step);
  cr_assert_float_eq(p.shim_s, 0.75, 1e-12);
  cr_assert_eq(p.shim_on_path_s, p.shim_s);
  cr_assert_float_eq(p.step_s, 2 + 0.75 + p.allreduce_s, 1e-12);
}

Test(sim_ahead, compute_longer_than_the_work_hides_it) {
  fixture_t f;
  setup(&f, (double[]){0.5, 0.25}, (double[]){1, 1, 1, 1},
        (double[]){2, 2}, 0);
  sim_price_t p = price(&f.step);
  cr_assert_float_eq(p.shim_s, 0.75, 1e-12, "all of the work is counted");
  cr_assert_eq(p.shim_on_path_s, 0);
  cr_assert_float_eq(p.step_s, 2 + p.allreduce_s, 1e-12);
}

Test(sim_ahead, work_past_the_compute_leaves_the_excess) {
  fixture_t f;
  /* hand-off 0: 0.5 s beside 0.2 (rank 0) and 0.3 (rank 1); hand-off 1:
   * 0.25 beside 1 s on both. Equal compute: rank 0's 0.3 s excess. */
  setup(&f, (double[]){0.5, 0.25}, (double[]){0.2, 0.3, 1, 1},
        (double[]){2, 2}, 0);
  sim_price_t p = price(&f.step);
  cr_assert_float_eq(p.shim_on_path_s, 0.3, 1e-12, "%.9g", p.shim_on_path_s);
  cr_assert_lt(p.shim_on_path_s, p.shim_s);
  cr_assert_float_eq(p.step_s, 2.3 + p.allreduce_s, 1e-12);
}

Test(sim_ahead, a_rank_with_slack_absorbs_its_excess) {
  fixture_t f;
  /* rank 1 computes 0.5 s less than rank 0: its 0.4 s excess is hidden,
   * its 0.9 s excess shows 0.4 s past rank 0's end */
  setup(&f, (double[]){0.5, 0.5}, (double[]){1, 0.1, 1, 1},
        (double[]){2, 1.5}, 0);
  cr_assert_eq(price(&f.step).shim_on_path_s, 0);
  setup(&f, (double[]){1, 0.5}, (double[]){1, 0.1, 1, 1},
        (double[]){2, 1.5}, 0);
  cr_assert_float_eq(price(&f.step).shim_on_path_s, 0.4, 1e-12);
}

Test(sim_ahead, vit_charges_each_hand_off_its_worst_rank) {
  fixture_t f;
  setup(&f, (double[]){0.5, 1}, (double[]){1, 0.1, 0.7, 0.9},
        (double[]){2, 1.5}, 1);
  cr_assert_float_eq(price(&f.step).shim_on_path_s, 0.4 + 0.3, 1e-12);
}

Test(sim_ahead, the_vit_balance_stays_on_the_path) {
  fixture_t f;
  setup(&f, (double[]){0.5, 0.25}, (double[]){1, 1, 1, 1},
        (double[]){2, 2}, 0);
  f.step.vit_calls = 1;
  f.step.vit_solve_s = 0.125;
  sim_price_t p = price(&f.step);
  cr_assert_float_eq(p.vit_shim_s, 0.125, 1e-12);
  cr_assert_float_eq(p.shim_on_path_s, 0.125, 1e-12);
}

/* ---- simulated ------------------------------------------------------------ */

static void simulate(const sim_config_t *c, int32_t ranks, sim_run_t *runs) {
  sim_algo_t algos[2] = {{DPSHIM_ALGO_NONE, 0, 0}, {DPSHIM_ALGO_DEFAULT, 1, 0}};
  char err[256] = "";
  cr_assert_eq(sim_simulate(c, ranks, algos, 2, runs, err, sizeof err), 0,
               "%s", err);
}

/* reftrain's long profile at DP 8, one micro-batch a step: each hand-off
 * runs beside its rank's previous step, its compute the step's before. */
Test(sim_ahead, one_ahead_runs_beside_the_step_before) {
  sim_options_t o = PARSE("--ranks", "8", "--steps", "4", "--warmup-last",
                          "4", "--solve-reps", "1", "--ahead", "1");
  cr_assert_eq(o.cfg.ahead, 1);
  sim_run_t runs[2];
  simulate(&o.cfg, 8, runs);
  cr_assert_null(runs[0].step[0].ahead, "none has no hand-offs");
  for (int64_t k = 0; k < 4; k++) {
    const sim_step_t *st = &runs[1].step[k];
    cr_assert_not_null(st->ahead);
    for (int32_t r = 0; r < 8; r++) {
      cr_assert_gt(st->ahead->overlap[r], 0, "step %lld rank %d: nothing "
                   "beside the hand-off", (long long)k, r);
      if (k > 0)
        cr_assert_eq(st->ahead->overlap[r],
                     runs[1].step[k - 1].ahead->compute[r]);
    }
    sim_price_t p = sim_price_step(&o.net, &o.cfg, 8, st);
    cr_assert_gt(p.shim_s, 0);
    cr_assert_eq(p.shim_on_path_s, 0, "step %lld: seconds of compute hide "
                 "%.3g ms", (long long)k, 1e3 * p.shim_s);
  }
  sim_result_t res = sim_price_run(&o.net, &o.cfg, &runs[1]);
  cr_assert_lt(res.shim_on_path_s, res.shim_s);
  sim_run_free(&runs[0]);
  sim_run_free(&runs[1]);
}

/* The same with copies at 100 kB/s: megabytes moved outlast the compute, and
 * what is left is the excess on the step's path, no more than the work. */
Test(sim_ahead, slow_copies_outlast_the_compute) {
  sim_options_t o = PARSE("--ranks", "8", "--steps", "3", "--warmup-last",
                          "4", "--solve-reps", "1", "--ahead", "1",
                          "--threshold", "0.1", "--memcpy-gbs", "0.0001");
  sim_run_t runs[2];
  simulate(&o.cfg, 8, runs);
  for (int64_t k = 0; k < 3; k++) {
    const sim_step_t *st = &runs[1].step[k];
    cr_assert_eq(st->applied, 1);
    sim_price_t p = sim_price_step(&o.net, &o.cfg, 8, st);
    double most = 0;
    for (int32_t r = 0; r < 8; r++)
      most = fmax(most, st->ahead->compute[r] +
                            fmax(0, p.shim_s - st->ahead->overlap[r]));
    cr_assert_gt(p.shim_on_path_s, 0);
    cr_assert_lt(p.shim_on_path_s, p.shim_s);
    cr_assert_float_eq(p.shim_on_path_s, most - st->compute_max_s, 1e-9);
  }
  sim_run_free(&runs[0]);
  sim_run_free(&runs[1]);
}

/* K = 0 (the default) keeps no hand-offs apart: the inline step. */
Test(sim_ahead, zero_is_inline) {
  sim_options_t o = PARSE("--ranks", "8", "--steps", "2", "--warmup-last",
                          "4", "--solve-reps", "1");
  cr_assert_eq(o.cfg.ahead, 0);
  sim_run_t runs[2];
  simulate(&o.cfg, 8, runs);
  for (int64_t k = 0; k < 2; k++) {
    const sim_step_t *st = &runs[1].step[k];
    cr_assert_null(st->ahead);
    sim_price_t p = sim_price_step(&o.net, &o.cfg, 8, st);
    cr_assert_gt(p.shim_s, 0);
    cr_assert_eq(p.shim_on_path_s, p.shim_s);
  }
  sim_run_free(&runs[0]);
  sim_run_free(&runs[1]);
}

/* Two micro-batches a step, two ahead: a step's hand-off 0 runs beside
 * the step before's two micro-batches (its compute), hand-off 1 beside the
 * step before's last and its own step's first. */
Test(sim_ahead, two_ahead_across_the_step) {
  sim_options_t o = PARSE("--ranks", "4", "--steps", "2", "--warmup-last",
                          "4", "--solve-reps", "1", "--micro-batches", "2",
                          "--ahead", "2");
  sim_run_t runs[2];
  simulate(&o.cfg, 4, runs);
  const sim_ahead_t *a = runs[1].step[0].ahead, *b = runs[1].step[1].ahead;
  for (int32_t r = 0; r < 4; r++) {
    cr_assert_float_eq(b->overlap[r], a->compute[r], 1e-9 * a->compute[r]);
    cr_assert_gt(b->overlap[4 + r], 0);
    cr_assert_lt(b->overlap[4 + r], a->compute[r] + b->compute[r]);
    cr_assert_gt(a->overlap[r], 0, "the warm-up's compute beside it");
  }
  sim_run_free(&runs[0]);
  sim_run_free(&runs[1]);
}

/* ---- options -------------------------------------------------------------- */

Test(sim_ahead, negative_refused, .exit_code = 2) { PARSE("--ahead", "-1"); }
Test(sim_ahead, not_a_number_refused, .exit_code = 2) {
  PARSE("--ahead", "one");
}
Test(sim_ahead, not_with_calibrate, .exit_code = 2) {
  PARSE("--calibrate", "results.json", "--ahead", "1");
}
