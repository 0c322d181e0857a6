/* Diagnostics; see report.h. */
#include "report.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"

/* ---- verbose: the original's format ---------------------------------------- */

static void print_loads(FILE *f, const double *load, int n) {
  fputc('[', f);
  for (int r = 0; r < n; r++) fprintf(f, "%s%.1f", r ? ", " : "", load[r]);
  fputc(']', f);
}

static void print_cumulative(FILE *f, const dpshim__stats_t *s) {
  fprintf(f,
          "  cumulative: ViT_rebalance: %lld/%lld applied, VLM_rebalance: "
          "%lld/%lld applied\n", (long long)s->vit.applied,
          (long long)s->vit.calls, (long long)s->applied,
          (long long)s->handoffs);
}

/* One decision in the original's block, for either level. */
typedef struct block {
  const char *level; /* "VLM", "ViT" */
  int applied;
  const char *skip_reason;
  double threshold, before, after;
  const double *load_before, *load_after;
  double saving_s, cost_s; /* priced skips */
} block_t;

static void print_block(const block_t *b, int n) {
  FILE *f = stderr;
  if (b->applied) {
    fprintf(f, "[DP Balance][%s] APPLY\n", b->level);
    fprintf(f, "  before    : imbalance=%.4f  load/dp=", b->before);
    print_loads(f, b->load_before, n);
    fprintf(f, "\n  after     : imbalance=%.4f  load/dp=", b->after);
    print_loads(f, b->load_after, n);
    fputc('\n', f);
    if (b->cost_s > 0)
      fprintf(f, "  priced    : saves %.3g ms, costs %.3g ms\n",
              1e3 * b->saving_s, 1e3 * b->cost_s);
  } else {
    if (!strcmp(b->skip_reason, "balanced"))
      fprintf(f, "[DP Balance][%s] SKIP | reason: imbalance %.4f < %g\n",
              b->level, b->before, b->threshold);
    else if (!strcmp(b->skip_reason, "not-worth-it"))
      fprintf(f, "[DP Balance][%s] SKIP | reason: not worth it: saves %.3g "
              "ms, costs %.3g ms\n", b->level, 1e3 * b->saving_s,
              1e3 * b->cost_s);
    else
      fprintf(f, "[DP Balance][%s] SKIP | reason: %s\n", b->level,
              b->skip_reason);
    fprintf(f, "  imbalance : %.4f\n", b->before);
    if (b->load_before) {
      fprintf(f, "  load/dp   : ");
      print_loads(f, b->load_before, n);
      fputc('\n', f);
    }
  }
}

/* After the hand-off is counted: the counters include it, as the
 * original's do. Errors from every group, the blocks from the first. */
void dpshim__report_handoff(dpshim__core_t *c, int rc,
                            const dpshim__balance_report_t *rep) {
  if (c->dp->rank != 0) return;
  if (rc < 0) {
    /* Every hand-off may fail alike: each group says its first. */
    if (c->cfg.verbose || c->stats.failed == 1)
      dpshim__core_say(c, "hand-off not balanced (%s): %s%s",
                       dpshim_strerror(rc), rep->message,
                       c->cfg.verbose ? "" : "; later failures not shown");
    return;
  }
  if (!c->cfg.verbose || c->dp_group != 0 ||
      (!rep->applied && (!strcmp(rep->skip_reason, "warmup") ||
                         !strcmp(rep->skip_reason, DPSHIM__BACKED_OFF))))
    return;
  block_t b = {"VLM", rep->applied, rep->skip_reason, c->cfg.threshold,
               rep->imbalance_before, rep->imbalance_after, rep->load_before,
               rep->load_after, rep->saving_s, rep->cost_s};
  print_block(&b, c->dp->size);
  if (rep->vit_gated)
    fprintf(stderr, "[DP Balance][ViT] %s | the encoder calls meeting saves "
            "%.3g ms, costs %.3g ms\n",
            rep->vit_apart ? "APART" : rep->vit_retry ? "MEET (retry)" : "MEET",
            1e3 * rep->vit_saving_s, 1e3 * rep->vit_meet_s);
  print_cumulative(stderr, &c->stats);
}

/* ---- the ViT balance --------------------------------------------------------- */

static void print_vit(const dpshim__core_t *c, const dpshim__vit_report_t *r) {
  block_t b = {"ViT", r->applied, r->skip_reason,
               dpshim__config_vit_ratio(&c->cfg),
               r->imbalance_before, r->imbalance_after, r->load_before,
               r->load_after, 0, 0};
  print_block(&b, c->dp->size);
  if (r->applied)
    fprintf(stderr, "  moved     : %lld bytes, %lld images of %lld patches\n",
            (long long)r->bytes_moved, (long long)r->images,
            (long long)r->patches);
  print_cumulative(stderr, &c->stats);
}

/* An agreed error from each group's DP rank 0 (its first, or all when
 * verbose); a backward this rank alone refused, from this rank; the
 * blocks from the first group. */
void dpshim__report_vit(const dpshim__core_t *c,
                        const dpshim__vit_report_t *r) {
  if (r->message[0] && !r->grouped) {
    dpshim__core_say(c, "%s", r->message);
    return;
  }
  if (c->dp->rank != 0) return;
  if (r->message[0]) {
    if (c->cfg.verbose || r->out_of_step || c->stats.vit.failed == 1)
      dpshim__core_say(c, "encoder call not balanced: %s%s", r->message,
                       c->cfg.verbose || r->out_of_step
                           ? "" : "; later failures not shown");
    return;
  }
  if (!c->cfg.verbose || c->dp_group != 0 || r->kind != DPSHIM__VIT_FORWARD ||
      !r->grouped || r->warm)
    return;
  print_vit(c, r);
}

void dpshim__report_vit_fit(const dpshim__core_t *c, int rc) {
  if (c->world->rank != 0) return;
  if (rc < 0)
    dpshim__core_say(c, "ViT warm-up fit failed (%s); the encoder's cost "
                     "stays patches^2 per image", c->vit_fit.message);
  else if (c->cfg.verbose)
    dpshim__core_say(c, "fitted ViT cost = %.4g*L^2 + %.4g*L + %.4g us per "
                     "image of L patches; prediction error mean %.2f%%, max "
                     "%.2f%%", c->vit_model.a, c->vit_model.b, c->vit_model.c,
                     100 * c->vit_fit.mean_rel_error,
                     100 * c->vit_fit.max_rel_error);
}

/* "a*len^2 + b*len + c", and the vision terms when there are any. */
static void model_text(dpshim_cost_model_t m, char *out, size_t n) {
  int k = snprintf(out, n, "%.4g*len^2 + %.4g*len + %.4g", m.a, m.b, m.c);
  if ((m.d != 0 || m.e != 0) && k > 0 && (size_t)k < n)
    snprintf(out + k, n - (size_t)k, " + %.4g*patches^2 + %.4g*patches", m.d,
             m.e);
}

/* The fit's prediction error, and the text-only fit's on the same points. */
static void fit_error_text(const dpshim__core_t *c, char *out, size_t n) {
  int k = snprintf(out, n, "prediction error mean %.2f%%, max %.2f%%",
                   100 * c->fit.mean_rel_error, 100 * c->fit.max_rel_error);
  if (c->fit_vision && k > 0 && (size_t)k < n)
    snprintf(out + k, n - (size_t)k, " (without the vision terms: mean "
             "%.2f%%, max %.2f%%)", 100 * c->fit_text.mean_rel_error,
             100 * c->fit_text.max_rel_error);
}

void dpshim__report_fit(const dpshim__core_t *c, int rc) {
  if (c->world->rank != 0) return;
  char model[160], error[160];
  model_text(c->model, model, sizeof model);
  fit_error_text(c, error, sizeof error);
  if (rc < 0)
    dpshim__core_say(c, "warm-up fit failed (%s); the cost stays linear",
                     c->fit.message);
  else if (c->cfg.verbose)
    dpshim__core_say(c, "fitted cost from %s = %s us per sample; %s",
                     c->fit_method == DPSHIM_FIT_RANKS ? "per-rank times"
                                                       : "step times",
                     model, error);
  if (rc == 0 && c->stuck && (c->refits == 0 || c->cfg.verbose))
    dpshim__core_say(c, "the fitted cost has no term above linear, so it "
                     "changes no plan of equal packs, though the step times "
                     "varied: refitting from more steps");
}

void dpshim__report_no_fit(const dpshim__core_t *c) {
  if (c->world->rank == 0)
    dpshim__core_say(c, "batches are handed off from a loader thread and "
                     "steps are counted from the hand-offs, so nothing says "
                     "which step consumed which batch: no warm-up fit; the "
                     "cost stays linear unless the trainer calls "
                     "dpshim_batch_taken() at each batch or %s=a,b,c is set",
                     DPSHIM_ENV_COEFS);
}

/* ---- the summary at close ---------------------------------------------------- */

enum {
  S_STEPS, S_STEPS_FIT, S_WAIT, S_WAIT_FIT, S_TIME, S_TIME_FIT, S_SHIM,
  S_ARRIVAL, S_WALL, S_APPLIED, S_SKIPPED, S_FAILED, S_SOLVED, S_IMB_BEFORE,
  S_IMB_AFTER, S_BYTES_MOVED, S_BYTES_TOTAL, S_BYTES_INTER_HOST,
  S_VIT_CALLS, S_VIT_APPLIED,
  S_VIT_SKIPPED, S_VIT_FAILED, S_VIT_SOLVED, S_VIT_IMB_BEFORE,
  S_VIT_IMB_AFTER, S_VIT_BYTES, S_VIT_TIME, S_VIT_SHIM, S_VIT_ARRIVAL,
  S_HANDOFFS, S_PRED_ERR, S_PRED_STEPS, S_VIT_GATED, S_VIT_APART,
  S_BACKED_OFF, S_VIT_MET_SAVING, S_VIT_MET_COST, S_VIT_MET_TOOK,
  S_EXCHANGE, S_REPACK, S_REPACK_BYTES, S_SHIFT_BYTES, S_VIT_RETRIED,
  S_STAGED, S_VIT_SHIPPED, S_VIT_SHIPPED_AGAIN, S_AHEAD, S_AHEAD_ARRIVAL,
  S_COUNT
};

/* Every rank's numbers, summed on world rank 0; 0 or the seam's error. */
static int collect(dpshim__core_t *c, double *v) {
  const dpshim__stats_t *s = &c->stats;
  double group = c->dp->rank == 0; /* a group's balancing counts once */
  double mine[S_COUNT] = {
      s->steps[0], s->steps[1], s->wait[0], s->wait[1], s->step_time[0],
      s->step_time[1], s->shim_time, s->arrival_time,
      c->clock() - c->opened_at,
      group * (double)s->applied, group * (double)s->skipped,
      group * (double)s->failed, group * (double)s->solved,
      group * s->imbalance_before, group * s->imbalance_after,
      group * s->bytes_moved, group * s->bytes_total,
      group * s->bytes_inter_host, group * (double)s->vit.calls, group * (double)s->vit.applied,
      group * (double)s->vit.skipped, group * (double)s->vit.failed,
      group * (double)s->vit.solved, group * s->vit.imbalance_before,
      group * s->vit.imbalance_after, group * s->vit.bytes_moved,
      s->vit_time, s->vit_shim, s->vit_arrival, (double)s->handoffs,
      s->predicted_error, s->predicted_steps, group * (double)s->vit_gated,
      group * (double)s->vit_apart, group * (double)s->backed_off,
      group * s->vit_met_saving, group * s->vit_met_cost, s->vit_met_took,
      s->exchange_time, s->repack_time, s->repack_bytes, s->shift_bytes,
      group * (double)s->vit_retried, (double)s->staged,
      group * (double)s->vit.shipped, group * (double)s->vit.shipped_again,
      s->ahead_time, s->ahead_arrival};
  int root = c->world->rank == 0;
  double *all = root ? calloc((size_t)c->world->size, sizeof mine) : NULL;
  int64_t failed = root && !all;
  int rc = c->world->ops->max(c->world, &failed, 1);
  if (rc == 0 && failed) rc = DPSHIM_ENOMEM;
  if (rc == 0) rc = c->world->ops->gather(c->world, mine, sizeof mine, all);
  for (int32_t r = 0; rc == 0 && all && r < c->world->size; r++)
    for (int k = 0; k < S_COUNT; k++) v[k] += all[(size_t)r * S_COUNT + k];
  free(all);
  return rc;
}

static double share(double part, double whole) {
  return whole > 0 ? 100 * part / whole : 0;
}

/* How well each fit made predicted the warm-up's step times. */
static void step_error_text(const dpshim__core_t *c, char *out, size_t n) {
  static const char *const names[2] = {"per-rank", "step-time"};
  int k = snprintf(out, n, "step times predicted within");
  for (int f = 0, made = 0; f < 2 && k > 0 && (size_t)k < n; f++) {
    if (c->step_error_mean[f] < 0) continue;
    k += snprintf(out + k, n - (size_t)k, "%s %.2f%% (max %.2f%%) by the %s "
                  "fit", made++ ? "," : "", 100 * c->step_error_mean[f],
                  100 * c->step_error_max[f], names[f]);
  }
}

static void say_fit(const dpshim__core_t *c) {
  char model[160], error[160], steps[200];
  model_text(c->model, model, sizeof model);
  fit_error_text(c, error, sizeof error);
  step_error_text(c, steps, sizeof steps);
  if (c->cfg.have_coefs)
    dpshim__core_say(c, "  cost model: %s: cost = %s", DPSHIM_ENV_COEFS, model);
  else if (c->fitted)
    dpshim__core_say(c, "  fit from %s (%s%s): cost = %s us per sample; %s; "
                     "%s", c->fit_method == DPSHIM_FIT_RANKS
                               ? "per-rank times" : "step times",
                     dpshim_fit_method_name(c->fit_method),
                     c->refits ? ", refitted on balanced steps" : "", model,
                     error, steps);
  else
    dpshim__core_say(c, "  no fitted cost model (warm-up unfinished, failed "
                     "or not possible): linear cost");
}

/* Where the gate let the calls meet: what it predicted (retries aside:
 * they meet against the prediction) against what the grouped calls then
 * took beyond the encoder and the waits, per met hand-off (a rank's mean). */
static void say_met(const dpshim__core_t *c, const double *v, double met) {
  double groups = (double)c->world->size / c->dp->size;
  double priced = met - v[S_VIT_RETRIED];
  double took = 1e3 * v[S_VIT_MET_TOOK] / c->world->size / (met / groups);
  if (priced > 0)
    dpshim__core_say(c, "  ViT gate: a met hand-off was predicted to save "
                     "%.3g ms against %.3g ms of meeting; meeting took %.3g "
                     "ms a rank", 1e3 * v[S_VIT_MET_SAVING] / priced,
                     1e3 * v[S_VIT_MET_COST] / priced, took);
  else
    dpshim__core_say(c, "  ViT gate: met only to measure meeting again; "
                     "meeting took %.3g ms a rank", took);
}

static void say_vit(const dpshim__core_t *c, const double *v) {
  double solved = v[S_VIT_SOLVED] > 0 ? v[S_VIT_SOLVED] : 1;
  double steps = v[S_STEPS] + v[S_STEPS_FIT];
  dpshim__core_say(c, "  ViT: %.0f encoder calls balanced: %.0f applied, %.0f "
                   "skipped, %.0f failed; imbalance %.4f before -> %.4f after "
                   "(mean of %.0f solved); %.4g MB moved per step",
                   v[S_VIT_CALLS], v[S_VIT_APPLIED], v[S_VIT_SKIPPED],
                   v[S_VIT_FAILED], v[S_VIT_IMB_BEFORE] / solved,
                   v[S_VIT_IMB_AFTER] / solved, v[S_VIT_SOLVED],
                   steps > 0 ? v[S_VIT_BYTES] / (steps / c->world->size) / 1e6
                             : 0);
  if (v[S_VIT_SHIPPED] + v[S_VIT_SHIPPED_AGAIN] > 0)
    dpshim__core_say(c, "  ViT: %.0f forwards took the plan and inputs shipped "
                     "ahead of them (dpshim_encoder_ship), %.0f were planned "
                     "again (a call that differed from its ship)",
                     v[S_VIT_SHIPPED], v[S_VIT_SHIPPED_AGAIN]);
  dpshim__core_say(c, "  ViT: encoder time %.2f%% of wall time, the balance's "
                   "own %.2f%%, plus %.2f%% waiting at the encoder's calls "
                   "for the other ranks", share(v[S_VIT_TIME], v[S_WALL]),
                   share(v[S_VIT_SHIM], v[S_WALL]),
                   share(v[S_VIT_ARRIVAL], v[S_WALL]));
  if (c->cfg.have_vit_coefs)
    dpshim__core_say(c, "  ViT cost model: %s: %.4g*L^2 + %.4g*L + %.4g per "
                     "image", DPSHIM_ENV_VIT_COEFS, c->vit_model.a,
                     c->vit_model.b, c->vit_model.c);
  else if (c->vit_fitted)
    dpshim__core_say(c, "  ViT fit (ranks): cost = %.4g*L^2 + %.4g*L + %.4g "
                     "us per image; prediction error mean %.2f%%, max %.2f%%",
                     c->vit_model.a, c->vit_model.b, c->vit_model.c,
                     100 * c->vit_fit.mean_rel_error,
                     100 * c->vit_fit.max_rel_error);
  else
    dpshim__core_say(c, "  ViT: no fitted cost model: patches^2 per image");
  if (!dpshim__core_vit_gate(c)) return;
  double met = v[S_VIT_GATED] - v[S_VIT_APART];
  if (v[S_VIT_GATED] > 0) {
    dpshim__core_say(c, "  ViT gate (%s=auto): the encoder calls met at %.0f "
                     "of %.0f hand-offs (%.0f of them to measure meeting "
                     "again), kept apart where meeting would not pay",
                     DPSHIM_ENV_VIT_THRESHOLD, met, v[S_VIT_GATED],
                     v[S_VIT_RETRIED]);
    if (met > 0) say_met(c, v, met);
  } else {
    dpshim__core_say(c, "  ViT gate (%s=auto): no hand-off decided (the "
                     "warm-up, a loader thread's hand-offs or the LLM level "
                     "off): the encoder calls met at every call",
                     DPSHIM_ENV_VIT_THRESHOLD);
  }
}

/* How steps were told apart. */
static void say_steps(const dpshim__core_t *c) {
  const char *how = c->cfg.step == DPSHIM__STEP_AUTO ? "no gradient sync "
                    "seen through MPI on every rank" : DPSHIM_ENV_STEP
                    "=handoff";
  if (c->mode == DPSHIM__STEP_SYNC)
    dpshim__core_say(c, "  steps: end at the gradient sync (%s)",
                     DPSHIM_ENV_SYNC_OPS);
  else if (c->mode == DPSHIM__STEP_HANDOFF && c->marked)
    dpshim__core_say(c, "  steps: follow the trainer's dpshim_step_end() "
                     "marks (%s)", how);
  else if (c->mode == DPSHIM__STEP_HANDOFF)
    dpshim__core_say(c, "  steps: %d hand-off%s each (%s; %s)",
                     (int)c->cfg.micro_batches,
                     c->cfg.micro_batches == 1 ? "" : "s",
                     DPSHIM_ENV_MICRO_BATCHES, how);
  else
    dpshim__core_say(c, "  steps: not told apart (the run ended before the "
                     "warm-up window did)");
}

/* Every rank's group handed off nothing: the loader's symbol was never
 * interposed, or the trainer never asked for a batch. */
static void check_handoffs(dpshim__core_t *c, double handoffs) {
  if (handoffs > 0 || !c->cfg.enabled) return;
  dpshim__core_noop(c, "no batch was handed off: preload the loader's "
                    "adapter after libdpshim.so (dpshim-run --adapter), "
                    "keep the loader in a "
                    "shared library (a call inside the executable cannot be "
                    "interposed), or for Python run the trainer through "
                    "dpshim-run");
}

/* What applying a plan took a rank, on average over the group's ranks. */
static void say_apply(dpshim__core_t *c, const double *v) {
  double n = v[S_APPLIED] * c->dp->size; /* rank-hand-offs */
  if (n <= 0) return;
  dpshim__core_say(c, "  applying a plan: %.1f ms in the exchange and %.1f "
                   "ms in the repack, which copied %.2f MB where shifting "
                   "what stays and copying in what arrived would have copied "
                   "%.2f MB (means over ranks and applied hand-offs)",
                   1e3 * v[S_EXCHANGE] / n, 1e3 * v[S_REPACK] / n,
                   v[S_REPACK_BYTES] / n / 1e6, v[S_SHIFT_BYTES] / n / 1e6);
  if (v[S_STAGED] > 0)
    dpshim__core_say(c, "  %.0f of %.0f rank-hand-offs staged what arrived: "
                     "their buffers could not take it past the rows they "
                     "held (a copy more each; more capacity avoids it)",
                     v[S_STAGED], n);
}

void dpshim__report_summary(dpshim__core_t *c) {
  double v[S_COUNT] = {0};
  if (collect(c, v) < 0 || c->world->rank != 0) return;
  check_handoffs(c, v[S_HANDOFFS]);
  int ranks = c->world->size, dp = c->dp->size;
  double solved = v[S_SOLVED] > 0 ? v[S_SOLVED] : 1;
  dpshim__core_say(c, "summary: %.0f steps on %d ranks (%d DP group%s of %d), "
                   "solver %s", (v[S_STEPS] + v[S_STEPS_FIT]) / ranks, ranks,
                   c->ngroups, c->ngroups == 1 ? "" : "s", dp,
                   dpshim_algo_name(c->cfg.algo));
  dpshim__core_say(c, "  hand-offs balanced: %.0f applied, %.0f skipped, %.0f "
                   "failed", v[S_APPLIED], v[S_SKIPPED], v[S_FAILED]);
  if (v[S_BACKED_OFF] > 0)
    dpshim__core_say(c, "  of the skipped, %.0f passed by without gathering "
                     "(%s=auto backs off while plans are not worth it)",
                     v[S_BACKED_OFF], DPSHIM_ENV_THRESHOLD);
  dpshim__core_say(c, "  imbalance %.4f before -> %.4f after (mean of %.0f "
                   "solved); bytes moved %.1f%% of %.4g MB",
                   v[S_IMB_BEFORE] / solved, v[S_IMB_AFTER] / solved,
                   v[S_SOLVED], share(v[S_BYTES_MOVED], v[S_BYTES_TOTAL]),
                   v[S_BYTES_TOTAL] / 1e6);
  if (c->nhosts > 1)
    dpshim__core_say(c, "  of the bytes moved, %.1f%% across hosts (%d hosts "
                     "in the DP group)",
                     share(v[S_BYTES_INTER_HOST], v[S_BYTES_MOVED]),
                     (int)c->nhosts);
  say_steps(c);
  /* The wait includes the collective's own time: telling them apart
   * needs every rank's times per step, which DPSHIM_LOG has. */
  if (c->mode == DPSHIM__STEP_SYNC)
    dpshim__core_say(c, "  time in the sync collective (straggler wait and "
                     "the collective): %.1f%% of step time before the fit, "
                     "%.1f%% after", share(v[S_WAIT], v[S_TIME]),
                     share(v[S_WAIT_FIT], v[S_TIME_FIT]));
  /* Shares of wall time, not step time: hand-offs balanced ahead run
   * beside the steps. */
  dpshim__core_say(c, "  shim time on the trainer's path %.2f%% of wall time, "
                   "plus %.2f%% waiting at the hand-off for the other ranks",
                   share(v[S_SHIM], v[S_WALL]), share(v[S_ARRIVAL], v[S_WALL]));
  if (v[S_AHEAD] > 0)
    dpshim__core_say(c, "  balancing ahead, beside the compute: %.2f%% of "
                     "wall time, plus %.2f%% waiting there for the other "
                     "ranks", share(v[S_AHEAD], v[S_WALL]),
                     share(v[S_AHEAD_ARRIVAL], v[S_WALL]));
  say_apply(c, v);
  say_fit(c);
  if (v[S_PRED_STEPS] > 0)
    dpshim__core_say(c, "  after the warm-up, each rank's compute within "
                     "%.1f%% of the cost model's prediction for its samples "
                     "(mean over %.0f rank-steps)",
                     100 * v[S_PRED_ERR] / v[S_PRED_STEPS], v[S_PRED_STEPS]);
  if (c->cfg.vit) say_vit(c, v);
  if (c->noop[0]) dpshim__core_say(c, "  nothing is balanced: %s", c->noop);
}
