/* Diagnostics: the original's verbose blocks, the step log, the summary. */
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "shim.h"

/* ---- verbose: the original's format ---------------------------------------- */

static void print_loads(FILE *f, const double *load, int n) {
  fputc('[', f);
  for (int r = 0; r < n; r++) fprintf(f, "%s%.1f", r ? ", " : "", load[r]);
  fputc(']', f);
}

static void print_cumulative(FILE *f, const dpshim__stats_t *s) {
  /* The original counts ViT rebalances too; the shim balances whole
   * samples only, so that counter stays at 0/0. */
  fprintf(f,
          "  cumulative: ViT_rebalance: 0/0 applied, VLM_rebalance: %lld/%lld "
          "applied\n", (long long)s->applied, (long long)s->handoffs);
}

static void print_skip(const dpshim__state_t *st,
                       const dpshim__balance_report_t *rep, int n) {
  FILE *f = stderr;
  if (!strcmp(rep->skip_reason, "balanced"))
    fprintf(f, "[DP Balance][VLM] SKIP | reason: imbalance %.4f < %g\n",
            rep->imbalance_before, st->cfg.threshold);
  else
    fprintf(f, "[DP Balance][VLM] SKIP | reason: %s\n", rep->skip_reason);
  fprintf(f, "  imbalance : %.4f\n", rep->imbalance_before);
  if (rep->load_before) {
    fprintf(f, "  load/dp   : ");
    print_loads(f, rep->load_before, n);
    fputc('\n', f);
  }
  print_cumulative(f, &st->stats);
}

static void print_apply(const dpshim__state_t *st,
                        const dpshim__balance_report_t *rep, int n) {
  FILE *f = stderr;
  fprintf(f, "[DP Balance][VLM] APPLY\n");
  fprintf(f, "  before    : imbalance=%.4f  load/dp=", rep->imbalance_before);
  print_loads(f, rep->load_before, n);
  fprintf(f, "\n  after     : imbalance=%.4f  load/dp=", rep->imbalance_after);
  print_loads(f, rep->load_after, n);
  fputc('\n', f);
  print_cumulative(f, &st->stats);
}

/* Called after the hand-off is counted: the counters include it, as the
 * original's do. */
void dpshim__report_handoff(dpshim__state_t *st, int rc,
                            const dpshim__balance_report_t *rep) {
  if (st->dp_group != 0 || st->dp_rank != 0) return;
  if (rc < 0) {
    /* Every step would fail alike: say it once unless verbose. */
    if (st->cfg.verbose || st->stats.failed == 1)
      dpshim__say("hand-off not balanced (%s): %s", dpshim_strerror(rc),
                  rep->message);
    return;
  }
  if (!st->cfg.verbose) return;
  if (rep->applied) print_apply(st, rep, st->dp_size);
  else print_skip(st, rep, st->dp_size);
}

/* ---- DPSHIM_LOG: one JSON line per step per DP group ----------------------- */

/* ,"key":[v[0]*scale, v[stride]*scale, ...] for n values. */
static void json_array(FILE *f, const char *key, const double *v, int n,
                       int stride, double scale) {
  fprintf(f, ",\"%s\":[", key);
  for (int r = 0; r < n; r++)
    fprintf(f, "%s%.6g", r ? "," : "", v[(size_t)r * (size_t)stride] * scale);
  fputc(']', f);
}

static const char *step_decision(const dpshim__state_t *st) {
  const dpshim__step_t *s = &st->step;
  if (dpshim__warming(st, s->index, NULL)) return "warmup";
  if (s->failed) return "error";
  return s->last.applied ? "apply" : "skip";
}

/* Everything of a step's line but the per-rank times, as the step ends. */
static void write_prefix(const dpshim__state_t *st, FILE *f) {
  const dpshim__step_t *s = &st->step;
  const dpshim__balance_report_t *rep = &s->last;
  int n = st->dp_size;
  const char *decision = step_decision(st);
  fprintf(f, "{\"step\":%lld,\"group\":%d,\"ranks\":%d,\"decision\":\"%s\"",
          (long long)s->index, st->dp_group, n, decision);
  if (!strcmp(decision, "skip") && rep->skip_reason)
    fprintf(f, ",\"reason\":\"%s\"", rep->skip_reason);
  if (!s->balanced || !rep->load_before) return;
  fprintf(f, ",\"imbalance_before\":%.6g,\"imbalance_after\":%.6g,"
          "\"lower_bound\":%.6g", rep->imbalance_before,
          rep->applied ? rep->imbalance_after : rep->imbalance_before,
          rep->lower_bound);
  json_array(f, "load_before", rep->load_before, n, 1, 1);
  json_array(f, "load_after", rep->applied ? rep->load_after
                                           : rep->load_before, n, 1, 1);
  fprintf(f, ",\"bytes_moved\":%.0f,\"bytes_total\":%lld", s->bytes_moved,
          (long long)rep->bytes_total);
}

/* DP rank 0: the pending line with every rank's times. */
static void write_line(dpshim__state_t *st, const double *times) {
  dpshim__logline_t *line = &st->line;
  int n = st->dp_size;
  FILE *f = st->log;
  if (f && line->prefix) {
    fputs(line->prefix, f);
    json_array(f, "compute_ms", times, n, DPSHIM__NOTES, 1e3);
    json_array(f, "wait_ms", times + 1, n, DPSHIM__NOTES, 1e3);
    json_array(f, "shim_ms", times + 2, n, DPSHIM__NOTES, 1e3);
    json_array(f, "arrival_ms", times + 3, n, DPSHIM__NOTES, 1e3);
    fputs("}\n", f);
    fflush(f);
  }
  free(line->prefix);
  line->prefix = NULL;
  line->pending = 0;
}

/* Collective over the DP group: gathers the times, writes the line. */
static void flush_line(dpshim__state_t *st) {
  double *all = st->dp_rank == 0
                    ? calloc(DPSHIM__NOTES * (size_t)st->dp_size, sizeof *all)
                    : NULL;
  PMPI_Gather(st->line.times, DPSHIM__NOTES, MPI_DOUBLE, all, DPSHIM__NOTES,
              MPI_DOUBLE, 0, st->steps);
  if (all) write_line(st, all);
  st->line.pending = 0;
  free(all);
}

/* Whether the next hand-off will gather every rank's header anyway: then
 * the times travel with it, and logging costs no collective of its own.
 * Not with a loader thread, whose hand-offs do not follow the steps. */
static int rides_next_handoff(const dpshim__state_t *st) {
  return !st->threaded && !dpshim__warming(st, st->step.index + 1, NULL);
}

void dpshim__report_step(dpshim__state_t *st, double wait) {
  if (!st->cfg.log_path[0]) return;
  dpshim__logline_t *line = &st->line;
  const dpshim__step_t *s = &st->step;
  double times[DPSHIM__NOTES] = {s->compute, wait, s->shim, s->arrival};
  memcpy(line->times, times, sizeof times);
  line->pending = 1;
  if (st->dp_rank == 0 && st->log) {
    size_t size;
    FILE *f = open_memstream(&line->prefix, &size);
    if (f) {
      write_prefix(st, f);
      fclose(f);
    }
  }
  if (!rides_next_handoff(st)) flush_line(st);
}

const double *dpshim__report_note(const dpshim__state_t *st) {
  return st->line.pending ? st->line.times : NULL;
}

void dpshim__report_notes(dpshim__state_t *st, const double *notes) {
  if (!st->line.pending) return;
  if (notes) write_line(st, notes);
  /* Without notes the balancer failed before gathering: the line is lost,
   * and no rank may start a collective of its own here. */
  free(st->line.prefix);
  st->line.prefix = NULL;
  st->line.pending = 0;
}

void dpshim__report_flush(dpshim__state_t *st) {
  if (st->line.pending) flush_line(st);
}

/* ---- the summary at MPI_Finalize ------------------------------------------- */

enum {
  S_STEPS, S_STEPS_FIT, S_WAIT, S_WAIT_FIT, S_TIME, S_TIME_FIT, S_SHIM,
  S_ARRIVAL,
  S_HANDOFFS, S_APPLIED, S_SKIPPED, S_FAILED, S_SOLVED, S_IMB_BEFORE,
  S_IMB_AFTER, S_BYTES_MOVED, S_BYTES_TOTAL, S_COUNT
};

static void collect(const dpshim__state_t *st, double *v) {
  const dpshim__stats_t *s = &st->stats;
  double group = st->dp_rank == 0; /* a group's balancing counts once */
  double mine[S_COUNT] = {
      s->steps[0], s->steps[1], s->wait[0], s->wait[1], s->step_time[0],
      s->step_time[1], s->shim_time, s->arrival_time, group * (double)s->handoffs,
      group * (double)s->applied, group * (double)s->skipped,
      group * (double)s->failed, group * (double)s->solved,
      group * s->imbalance_before, group * s->imbalance_after,
      group * s->bytes_moved, group * s->bytes_total};
  PMPI_Reduce(mine, v, S_COUNT, MPI_DOUBLE, MPI_SUM, 0, st->world);
}

static double share(double part, double whole) {
  return whole > 0 ? 100 * part / whole : 0;
}

static void print_fit(const dpshim__state_t *st) {
  if (st->cfg.have_coefs)
    dpshim__say("  cost model: %s = %g,%g,%g", "DPSHIM_COEFS", st->model.a,
                st->model.b, st->model.c);
  else if (st->fitted)
    dpshim__say("  fit (%s): cost = %.4g*len^2 + %.4g*len + %.4g us per "
                "sample; prediction error mean %.2f%%, max %.2f%%",
                dpshim_fit_method_name(st->cfg.fit),
                st->model.a, st->model.b, st->model.c,
                100 * st->fit.mean_rel_error, 100 * st->fit.max_rel_error);
  else
    dpshim__say("  no fitted cost model (warm-up unfinished or failed): "
                "linear cost");
}

void dpshim__report_summary(dpshim__state_t *st) {
  double v[S_COUNT] = {0};
  collect(st, v);
  if (st->world_rank != 0) return;
  int groups = st->world_size / st->dp_size;
  double solved = v[S_SOLVED] > 0 ? v[S_SOLVED] : 1;
  dpshim__say("summary: %.0f steps on %d ranks (%d DP group%s of %d), "
              "solver %s", (v[S_STEPS] + v[S_STEPS_FIT]) / st->world_size,
              st->world_size, groups, groups == 1 ? "" : "s", st->dp_size,
              dpshim_algo_name(st->cfg.algo));
  dpshim__say("  hand-offs balanced: %.0f applied, %.0f skipped, %.0f failed",
              v[S_APPLIED], v[S_SKIPPED], v[S_FAILED]);
  dpshim__say("  imbalance %.4f before -> %.4f after (mean of %.0f solved); "
              "bytes moved %.1f%% of %.4g MB", v[S_IMB_BEFORE] / solved,
              v[S_IMB_AFTER] / solved, v[S_SOLVED],
              share(v[S_BYTES_MOVED], v[S_BYTES_TOTAL]),
              v[S_BYTES_TOTAL] / 1e6);
  double time = v[S_TIME] + v[S_TIME_FIT];
  /* The wait includes the collective's own time: telling them apart
   * needs every rank's times per step, which DPSHIM_LOG has. */
  dpshim__say("  time in the sync collective (straggler wait and the "
              "collective): %.1f%% of step time before the fit, %.1f%% after",
              share(v[S_WAIT], v[S_TIME]), share(v[S_WAIT_FIT], v[S_TIME_FIT]));
  dpshim__say("  shim time %.2f%% of step time, plus %.2f%% waiting at the "
              "hand-off for the other ranks", share(v[S_SHIM], time),
              share(v[S_ARRIVAL], time));
  print_fit(st);
}
