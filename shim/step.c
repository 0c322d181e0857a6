/* From wrapper events to steps: timing, warm-up, balancing; see shim.h.
 *
 * A step is one or more hand-offs followed by the first sync collective.
 * Its compute time runs from the first hand-off's return to the sync's
 * entry, less the time spent in later hand-offs; the time inside the sync is
 * the straggler wait. Warm-up steps are not balanced: they measure. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "comm_mpi.h"
#include "env.h"
#include "shim.h"

dpshim__state_t dpshim__state = {.lock = PTHREAD_MUTEX_INITIALIZER};

void dpshim__say(const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(stderr, "dpshim: %s\n", line);
}

int dpshim__warming(const dpshim__state_t *st, int64_t step, int *first) {
  if (first) *first = 0;
  return !st->cfg.have_coefs && dpshim__config_is_warmup(&st->cfg, step, first);
}

/* ---- init ----------------------------------------------------------------- */

static uint64_t config_hash(const dpshim__config_t *c) {
  const unsigned char *p = (const unsigned char *)c;
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < sizeof *c; i++) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

static int check_topology(dpshim__state_t *st, char *msg, size_t len) {
  long model = (long)st->cfg.tp * st->cfg.pp * st->cfg.cp;
  if (st->world_size % model == 0) return 0;
  snprintf(msg, len,
           "%s x %s x %s = %ld does not divide the %d ranks: expected sizes "
           "whose product divides the world size", DPSHIM_ENV_TP,
           DPSHIM_ENV_PP, DPSHIM_ENV_CP, model, st->world_size);
  return DPSHIM_EINVAL;
}

/* Every rank learns whether any rank's configuration is bad or differs;
 * rank 0 prints the first bad rank's message. Returns 1 when all is well. */
static int agree_on_config(dpshim__state_t *st, int rc, char *msg,
                           size_t len) {
  uint64_t h = config_hash(&st->cfg), range[2] = {h, ~h};
  int first_bad = rc < 0 ? st->world_rank : st->world_size;
  PMPI_Allreduce(MPI_IN_PLACE, &first_bad, 1, MPI_INT, MPI_MIN, st->world);
  PMPI_Allreduce(MPI_IN_PLACE, range, 2, MPI_UINT64_T, MPI_MAX, st->world);
  if (first_bad < st->world_size) {
    PMPI_Bcast(msg, (int)len, MPI_CHAR, first_bad, st->world);
    if (st->world_rank == 0)
      dpshim__say("%s (rank %d); balancing is off", msg, first_bad);
    return 0;
  }
  if (range[0] != h || range[1] != ~h) { /* not every rank has h */
    if (st->world_rank == 0)
      dpshim__say("the DPSHIM_* variables differ between ranks: expected the "
                  "same on every rank (mpirun -x); balancing is off");
    return 0;
  }
  return st->cfg.enabled;
}

/* Megatron's order: tp fastest, then cp, dp, pp. A DP group is the ranks
 * that share (tp, cp, pp) indices. */
static int open_groups(dpshim__state_t *st) {
  int tp = st->cfg.tp, cp = st->cfg.cp, r = st->world_rank;
  st->dp_size = st->world_size / (tp * cp * st->cfg.pp);
  int tp_i = r % tp, cp_i = r / tp % cp, pp_i = r / (tp * cp * st->dp_size);
  st->dp_group = tp_i + tp * (cp_i + cp * pp_i);
  int rc = dpshim__comm_mpi_open(st->world, st->dp_group, &st->dp);
  if (rc < 0) return rc;
  st->dp_rank = st->dp.rank;
  if (PMPI_Comm_split(st->world, st->dp_group, r, &st->steps) != MPI_SUCCESS)
    return DPSHIM_EINVAL;
  return 0;
}

static double shim_clock(void) {
  return dpshim__clock_now(&dpshim__state.clock);
}

static int open_balancer(dpshim__state_t *st) {
  st->model = st->cfg.have_coefs ? st->cfg.coefs
                                 : (dpshim_cost_model_t){0, 1, 0};
  dpshim__balance_config_t bc = {st->cfg.algo, st->cfg.max_len_ratio,
                                 st->cfg.threshold, st->model,
                                 st->cfg.verify, shim_clock};
  st->balancer = dpshim__balancer_new(&bc);
  st->points = calloc((size_t)st->cfg.nwarmup + 1, sizeof *st->points);
  return st->balancer && st->points ? 0 : DPSHIM_ENOMEM;
}

static void open_log(dpshim__state_t *st) {
  if (!st->cfg.log_path[0] || st->dp_rank != 0) return;
  st->log = fopen(st->cfg.log_path, "a");
  if (!st->log)
    dpshim__say("%s='%s': cannot open for appending; no step log",
                DPSHIM_ENV_LOG, st->cfg.log_path);
}

void dpshim__on_init(int provided) {
  dpshim__state_t *st = &dpshim__state;
  char msg[256] = "";
  st->mpi_up = 1;
  st->provided = provided;
  st->init_thread = pthread_self();
  st->step.index = 1;
  PMPI_Comm_dup(MPI_COMM_WORLD, &st->world);
  PMPI_Comm_rank(st->world, &st->world_rank);
  PMPI_Comm_size(st->world, &st->world_size);
  int rc = dpshim__config_parse(getenv, &st->cfg, msg, sizeof msg);
  if (rc == 0) rc = check_topology(st, msg, sizeof msg);
  if (!agree_on_config(st, rc, msg, sizeof msg)) return;
  const char *note = dpshim__clock_init(&st->clock);
  if (*note && st->world_rank == 0) dpshim__say("%s", note);
  rc = open_groups(st);
  if (rc == 0) rc = open_balancer(st);
  PMPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MIN, st->world);
  if (rc < 0) {
    if (st->world_rank == 0)
      dpshim__say("cannot set up the DP groups (%s); balancing is off",
                  dpshim_strerror(rc));
    return;
  }
  open_log(st);
  st->active = 1;
  if (st->cfg.verbose && st->world_rank == 0)
    dpshim__say("balancing %d DP groups of %d ranks, solver %s, warm-up %s",
                st->world_size / st->dp_size, st->dp_size,
                dpshim_algo_name(st->cfg.algo),
                st->cfg.have_coefs ? "skipped (DPSHIM_COEFS)" : "on");
}

/* ---- hand-off ------------------------------------------------------------- */

static int may_communicate(dpshim__state_t *st) {
  if (pthread_equal(pthread_self(), st->init_thread) ||
      st->provided >= MPI_THREAD_MULTIPLE)
    return 1;
  if (st->world_rank == 0)
    dpshim__say("the batch hand-off runs in a thread other than MPI_Init's, "
                "and MPI provides thread level %d, not MPI_THREAD_MULTIPLE: "
                "balancing is off", st->provided);
  st->active = 0;
  return 0;
}

static void add_features(dpshim__step_t *s, const dpshim_batch_t *batch) {
  for (int32_t i = 0; i < batch->nsamples; i++) {
    double len = batch->cu_seqlens[i + 1] - batch->cu_seqlens[i];
    s->sum_len2 += len * len;
    s->sum_len += len;
    s->count += 1;
  }
}

static void count_handoff(dpshim__state_t *st, int rc,
                          const dpshim__balance_report_t *rep) {
  dpshim__stats_t *s = &st->stats;
  dpshim__step_t *step = &st->step;
  s->handoffs++;
  if (rc < 0) {
    s->failed++;
    step->failed++;
    return;
  }
  if (rep->applied) s->applied++;
  else s->skipped++;
  step->last = *rep;
  if (!rep->load_before) return; /* skipped before solving */
  s->solved++;
  s->imbalance_before += rep->imbalance_before;
  s->imbalance_after += rep->applied ? rep->imbalance_after
                                     : rep->imbalance_before;
  s->bytes_moved += rep->applied ? (double)rep->bytes_moved : 0;
  s->bytes_total += (double)rep->bytes_total;
  step->balanced++;
  step->bytes_moved += rep->applied ? (double)rep->bytes_moved : 0;
}

int dpshim__on_handoff(dpshim_batch_t *batch) {
  dpshim__state_t *st = &dpshim__state;
  if (!st->active || !may_communicate(st)) return 0;
  double t0 = dpshim__clock_now(&st->clock);
  pthread_mutex_lock(&st->lock);
  if (st->step.open) st->step.compute += t0 - st->step.last_return;
  int64_t index = st->step.index;
  /* A loader thread may run ahead of the steps (prefetch): its hand-offs
   * are balanced each on its own, without micro-batch history. */
  int64_t history_key = index;
  int own_thread = pthread_equal(pthread_self(), st->init_thread);
  if (!own_thread) {
    st->threaded = 1;
    history_key = ++st->threaded_handoffs;
  }
  if (st->fitted) dpshim__balancer_set_model(st->balancer, st->model);
  pthread_mutex_unlock(&st->lock);

  int rc = 0;
  double arrival = 0;
  int warm = dpshim__warming(st, index, NULL);
  if (!warm) {
    dpshim__balance_report_t rep;
    /* The step log's times ride along only with the main thread's
     * hand-offs: a loader thread's would race the sync's own. */
    rc = dpshim__balance(st->balancer, &st->dp, batch, history_key,
                         own_thread ? dpshim__report_note(st) : NULL, &rep);
    if (own_thread) dpshim__report_notes(st, rep.notes);
    pthread_mutex_lock(&st->lock);
    count_handoff(st, rc, &rep);
    pthread_mutex_unlock(&st->lock);
    arrival = rep.arrival_wait;
    dpshim__report_handoff(st, rc, &rep);
  }
  double t1 = dpshim__clock_now(&st->clock);
  pthread_mutex_lock(&st->lock);
  if (warm) add_features(&st->step, batch); /* only warm-up points use them */
  if (!st->step.open) st->step.first_return = t1;
  st->step.open = 1;
  st->step.last_return = t1;
  st->step.shim += t1 - t0 - arrival;
  st->step.arrival += arrival;
  st->stats.shim_time += t1 - t0 - arrival;
  st->stats.arrival_time += arrival;
  pthread_mutex_unlock(&st->lock);
  return rc;
}

/* ---- sync ----------------------------------------------------------------- */

int dpshim__on_sync_entry(unsigned op) {
  dpshim__state_t *st = &dpshim__state;
  if (!st->active || !(st->cfg.sync_ops & op) ||
      !pthread_equal(pthread_self(), st->init_thread))
    return 0;
  double t = dpshim__clock_now(&st->clock);
  pthread_mutex_lock(&st->lock);
  int ends = st->step.open;
  if (ends) {
    st->step.compute += t - st->step.last_return;
    st->step.sync_entry = t;
  }
  pthread_mutex_unlock(&st->lock);
  return ends;
}

static void record_point(dpshim__state_t *st, double step_time) {
  int first;
  if (!dpshim__warming(st, st->step.index, &first) || first) return;
  const dpshim__step_t *s = &st->step;
  st->points[st->npoints++] = (dpshim__point_t){
      s->sum_len2, s->sum_len, s->count, s->compute, step_time};
}

static void close_step(dpshim__state_t *st, double now, double wait) {
  dpshim__stats_t *s = &st->stats;
  double step_time = now - st->step.first_return;
  int phase = st->fitted || st->cfg.have_coefs;
  s->steps[phase] += 1;
  s->wait[phase] += wait;
  s->step_time[phase] += step_time;
  record_point(st, step_time);
  int64_t next = st->step.index + 1;
  memset(&st->step, 0, sizeof st->step);
  st->step.index = next;
}

void dpshim__on_sync_exit(void) {
  dpshim__state_t *st = &dpshim__state;
  double now = dpshim__clock_now(&st->clock);
  double wait = now - st->step.sync_entry;
  /* The log gathers this step's times: before close_step() clears them. */
  dpshim__report_step(st, wait);
  pthread_mutex_lock(&st->lock);
  int64_t done = st->step.index;
  close_step(st, now, wait);
  pthread_mutex_unlock(&st->lock);
  if (dpshim__warming(st, done, NULL) && done == st->cfg.warmup_last)
    dpshim__fit_warmup(st);
}

/* ---- finalize ------------------------------------------------------------- */

void dpshim__on_finalize(void) {
  dpshim__state_t *st = &dpshim__state;
  if (!st->mpi_up) return;
  if (st->active) {
    if (st->cfg.log_path[0]) dpshim__report_flush(st);
    dpshim__report_summary(st);
  }
  if (st->dp.impl) {
    dpshim__comm_mpi_close(&st->dp);
    PMPI_Comm_free(&st->steps);
  }
  st->active = 0;
  if (st->log) fclose(st->log);
  st->log = NULL;
  dpshim__balancer_free(st->balancer);
  st->balancer = NULL;
  free(st->points);
  st->points = NULL;
  PMPI_Comm_free(&st->world);
  st->mpi_up = 0;
}
