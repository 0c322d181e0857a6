/* The step log; see steplog.h. */
#include "steplog.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"

#define TIMES DPSHIM__LOG_TIMES

static const char *const time_keys[TIMES] = {
    "compute_ms", "wait_ms",    "shim_ms",
    "arrival_ms", "encoder_ms", "ahead_ms"};

int dpshim__steplog_open(dpshim__steplog_t *g, const char *path, int writer,
                         int group, int ranks, void (*say)(const char *)) {
  memset(g, 0, sizeof *g);
  if (!path || !*path) return 0;
  g->path = path;
  g->writer = writer;
  g->group = group;
  g->ranks = ranks;
  g->say = say;
  if (!writer) return 0;
  int ok = 1;
  for (int k = 0; k < DPSHIM__LOG_RING; k++) {
    g->ring[k].got = calloc((size_t)ranks, 1);
    g->ring[k].times = calloc((size_t)ranks * TIMES, sizeof(double));
    ok &= g->ring[k].got && g->ring[k].times;
  }
  if (ok) return 0;
  for (int k = 0; k < DPSHIM__LOG_RING; k++) {
    free(g->ring[k].got);
    free(g->ring[k].times);
  }
  memset(g, 0, sizeof *g);
  return DPSHIM_ENOMEM;
}

/* ---- writing ---------------------------------------------------------------- */

static void fail(dpshim__steplog_t *g, int err) {
  char line[512];
  snprintf(line, sizeof line, "%s='%.300s': cannot write (%s); no step log",
           DPSHIM_ENV_LOG, g->path, strerror(err));
  if (g->say) g->say(line);
  if (g->file) fclose(g->file);
  g->file = NULL;
  g->broken = 1;
}

static void put_times(FILE *f, const dpshim__log_line_t *l, int ranks) {
  for (int t = 0; t < TIMES; t++) {
    fprintf(f, ",\"%s\":[", time_keys[t]);
    for (int r = 0; r < ranks; r++) {
      if (r) fputc(',', f);
      if (l->got[r])
        fprintf(f, "%.6g", l->times[(size_t)r * TIMES + (size_t)t] * 1e3);
      else
        fputs("null", f); /* that rank's times never arrived */
    }
    fputc(']', f);
  }
}

/* Writes the line (times missing as null) and frees its slot. */
static void write_line(dpshim__steplog_t *g, dpshim__log_line_t *l) {
  if (!g->broken && l->prefix) {
    if (!g->file) g->file = fopen(g->path, "a");
    if (!g->file) {
      fail(g, errno);
    } else {
      fputs(l->prefix, g->file);
      put_times(g->file, l, g->ranks);
      fputs("}\n", g->file);
      if (fflush(g->file) != 0 || ferror(g->file)) fail(g, errno);
    }
  }
  free(l->prefix);
  l->prefix = NULL;
  l->step = 0;
  l->have = 0;
  memset(l->got, 0, (size_t)g->ranks);
}

/* The slot of `step`, taken over from an older step if need be (whose line
 * is then written as it is). */
static dpshim__log_line_t *line_of(dpshim__steplog_t *g, int64_t step) {
  dpshim__log_line_t *l = &g->ring[step % DPSHIM__LOG_RING];
  if (l->step != step) {
    if (l->step != 0) write_line(g, l);
    l->step = step;
  }
  return l;
}

static void complete(dpshim__steplog_t *g, dpshim__log_line_t *l) {
  if (l->prefix && l->have == g->ranks) write_line(g, l);
}

static void store(dpshim__steplog_t *g, int32_t rank, const double *note) {
  int64_t step = (int64_t)note[0];
  if (step <= 0) return;
  dpshim__log_line_t *l = line_of(g, step);
  if (!l->got[rank]) l->have++;
  l->got[rank] = 1;
  memcpy(l->times + (size_t)rank * TIMES, note + 1, TIMES * sizeof(double));
  complete(g, l);
}

/* ---- the line without its times ----------------------------------------------- */

static void put_loads(FILE *f, const char *key, const double *v, int n) {
  fprintf(f, ",\"%s\":[", key);
  for (int r = 0; r < n; r++) fprintf(f, "%s%.6g", r ? "," : "", v[r]);
  fputc(']', f);
}

static void put_model(FILE *f, const dpshim__handoff_note_t *h) {
  const dpshim_cost_model_t *m = &h->model;
  fprintf(f, ",\"model\":{\"a\":%.6g,\"b\":%.6g,\"c\":%.6g,\"d\":%.6g,"
          "\"e\":%.6g,\"source\":\"%s\"", m->a, m->b, m->c, m->d, m->e,
          h->model_source);
  if (!strcmp(h->model_source, "fit"))
    fprintf(f, ",\"fit_error_mean\":%.6g,\"fit_error_max\":%.6g",
            h->fit_error_mean, h->fit_error_max);
  fputc('}', f);
}

/* The group's encoder calls of the step: counts, and the mean imbalance
 * before and after over those solved. */
static void put_vit(FILE *f, const dpshim__vit_note_t *v) {
  double solved = v->solved > 0 ? (double)v->solved : 1;
  fprintf(f, ",\"vit\":{\"calls\":%lld,\"applied\":%lld,\"skipped\":%lld,"
          "\"failed\":%lld,\"imbalance_before\":%.6g,\"imbalance_after\":"
          "%.6g,\"bytes_moved\":%.0f}", (long long)v->calls,
          (long long)v->applied, (long long)v->skipped, (long long)v->failed,
          v->imbalance_before / solved, v->imbalance_after / solved,
          v->bytes_moved);
}

static char *make_prefix(const dpshim__steplog_t *g, int64_t step,
                         const dpshim__handoff_note_t *h,
                         const dpshim__vit_note_t *vit) {
  char *text = NULL;
  size_t size;
  FILE *f = open_memstream(&text, &size);
  if (!f) return NULL;
  fprintf(f, "{\"step\":%lld,\"group\":%d,\"ranks\":%d,\"decision\":\"%s\"",
          (long long)step, g->group, g->ranks, h->decision);
  if (!strcmp(h->decision, "skip") && h->reason)
    fprintf(f, ",\"reason\":\"%s\"", h->reason);
  if (h->solved) {
    int applied = !strcmp(h->decision, "apply");
    fprintf(f, ",\"imbalance_before\":%.6g,\"imbalance_after\":%.6g,"
            "\"lower_bound\":%.6g", h->imbalance_before,
            applied ? h->imbalance_after : h->imbalance_before,
            h->lower_bound);
    if (h->cost_s > 0)
      fprintf(f, ",\"saving_ms\":%.6g,\"cost_ms\":%.6g", 1e3 * h->saving_s,
              1e3 * h->cost_s);
    put_loads(f, "load_before", h->load_before, g->ranks);
    put_loads(f, "load_after", applied ? h->load_after : h->load_before,
              g->ranks);
    fprintf(f, ",\"bytes_moved\":%.0f,\"bytes_inter_host\":%.0f,"
            "\"bytes_total\":%.0f,\"hosts\":%d", h->bytes_moved,
            h->bytes_inter_host, h->bytes_total, (int)h->hosts);
    put_model(f, h);
  }
  if (vit && vit->calls > 0) put_vit(f, vit);
  fclose(f);
  return text;
}

/* ---- events ------------------------------------------------------------------- */

void dpshim__steplog_step(dpshim__steplog_t *g, int64_t step,
                          const double times[TIMES],
                          const dpshim__handoff_note_t *last,
                          const dpshim__vit_note_t *vit) {
  if (!g->path) return;
  if (g->qlen == DPSHIM__LOG_QUEUE) { /* never sent: that line shows null */
    g->qhead = (g->qhead + 1) % DPSHIM__LOG_QUEUE;
    g->qlen--;
  }
  double *q = g->queue[(g->qhead + g->qlen++) % DPSHIM__LOG_QUEUE];
  q[0] = (double)step;
  memcpy(q + 1, times, TIMES * sizeof(double));
  if (!g->writer || g->broken) return;
  dpshim__log_line_t *l = line_of(g, step);
  free(l->prefix);
  l->prefix = make_prefix(g, step, last, vit);
  complete(g, l);
}

int dpshim__steplog_note(dpshim__steplog_t *g, double *note) {
  memset(note, 0, DPSHIM__NOTES * sizeof *note);
  if (!g->path || g->qlen == 0) return 0;
  memcpy(note, g->queue[g->qhead], DPSHIM__NOTES * sizeof *note);
  g->qhead = (g->qhead + 1) % DPSHIM__LOG_QUEUE;
  g->qlen--;
  return 1;
}

void dpshim__steplog_receive(dpshim__steplog_t *g, const double *notes) {
  if (!g->path || !g->writer || !notes) return;
  for (int32_t r = 0; r < g->ranks; r++)
    store(g, r, notes + (size_t)r * DPSHIM__NOTES);
}

/* Every rank's queue to the writer, then every line still pending. */
void dpshim__steplog_close(dpshim__steplog_t *g, dpshim__comm_t *dp) {
  if (!g->path) return;
  size_t bytes = sizeof g->queue;
  double mine[DPSHIM__LOG_QUEUE][DPSHIM__NOTES] = {{0}}, note[DPSHIM__NOTES];
  for (int k = 0; dpshim__steplog_note(g, note); k++)
    memcpy(mine[k], note, sizeof note);
  double *all = g->writer ? calloc((size_t)g->ranks, bytes) : NULL;
  int rc = g->writer && !all ? DPSHIM_ENOMEM : 0;
  int64_t failed = rc < 0;
  if (dp->ops->max(dp, &failed, 1) == 0 && !failed &&
      dp->ops->gather(dp, mine, bytes, all) == 0 && all) {
    for (int32_t r = 0; r < g->ranks; r++)
      for (int k = 0; k < DPSHIM__LOG_QUEUE; k++)
        store(g, r, all + ((size_t)r * DPSHIM__LOG_QUEUE + (size_t)k) *
                              DPSHIM__NOTES);
  }
  free(all);
  for (int k = 0; g->writer && k < DPSHIM__LOG_RING; k++) {
    if (g->ring[k].step) write_line(g, &g->ring[k]);
    free(g->ring[k].got);
    free(g->ring[k].times);
  }
  if (g->file) fclose(g->file);
  memset(g, 0, sizeof *g);
}
