/* reftrain: the reference data-parallel trainer.
 *
 * A plain MPI program that knows nothing of dpshim. Each step it takes
 * --micro-batches packs from libpackload, each through packload_next() and
 * each followed by its compute, then all-reduces a gradient buffer over
 * MPI_COMM_WORLD. packload_next() lives in a shared library and is called
 * through the PLT, so a preloaded balancer can interpose it; the time from
 * its return to the MPI_Allreduce entry is the rank's compute.
 *
 * Ranks follow Megatron's order (tp fastest, then cp, dp, pp); the loader
 * slot is the dp index, so model-parallel peers draw the same packs. Tokens
 * and the digest count one rank per DP slot (tp = cp = pp = 0): they do not
 * change with the model-parallel sizes.
 */
#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compute.h"
#include "ledger.h"
#include "options.h"
#include "packload.h"
#include "report.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Absolute deadline: time already spent since the hand-off (bookkeeping)
 * is absorbed instead of added. */
static void sleep_until(double t) {
  struct timespec ts;
  ts.tv_sec = (time_t)t;
  ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
  if (ts.tv_nsec >= 1000000000L) ts.tv_nsec = 999999999L;
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
  }
}

/* Before MPI_Init, a process knows its rank only from the launcher; bad
 * arguments are then reported once, not once per rank. */
static int launcher_rank(void) {
  const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    if (v) return atoi(v);
  }
  return 0;
}

/* -1 with a message on rank 0 when the world does not divide. */
static int make_layout(const rt_opts_t *o, rt_layout_t *lay) {
  MPI_Comm_rank(MPI_COMM_WORLD, &lay->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &lay->world);
  int64_t model = (int64_t)o->tp * o->cp * o->pp;
  if (lay->world % model != 0) {
    if (lay->rank == 0)
      fprintf(stderr,
              "reftrain: --tp * --cp * --pp (%lld) must divide the world "
              "size (%d)\n",
              (long long)model, lay->world);
    return -1;
  }
  lay->tp = o->tp;
  lay->cp = o->cp;
  lay->pp = o->pp;
  lay->dp = lay->world / (int)model;
  lay->tp_i = lay->rank % lay->tp;
  lay->cp_i = lay->rank / lay->tp % lay->cp;
  lay->dp_i = lay->rank / (lay->tp * lay->cp) % lay->dp;
  lay->pp_i = lay->rank / (lay->tp * lay->cp * lay->dp);
  return 0;
}

/* Opens this rank's loader; all ranks learn whether every one succeeded, and
 * the lowest failing rank says why. */
static packload_t *open_loader(const rt_opts_t *o, const rt_layout_t *lay) {
  packload_config_t cfg = packload_config_default();
  cfg.profile = o->profile;
  cfg.lengths_file = o->lengths;
  cfg.pack_tokens = o->pack_tokens;
  cfg.headroom = o->headroom;
  cfg.seed = o->seed;
  cfg.slot = lay->dp_i;
  cfg.slots = lay->dp;
  char err[512] = "";
  packload_t *pl = packload_open(&cfg, err, sizeof err);
  int failed = pl == NULL, *all = malloc((size_t)lay->world * sizeof *all);
  if (!all) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Allgather(&failed, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD);
  int first = -1;
  for (int r = lay->world - 1; r >= 0; r--)
    if (all[r]) first = r;
  free(all);
  /* Options are checked already: what is left is the file, or memory. */
  if (first == lay->rank)
    fprintf(stderr, "reftrain: %s: %s\n", o->lengths ? "--lengths" : "loader",
            err);
  if (first >= 0) {
    packload_close(pl);
    return NULL;
  }
  return pl;
}

/* --loader-thread: packload_next() runs in a second thread, as in a
 * pin-memory loop, so that a preloaded balancer communicates from a thread
 * other than MPI_Init's. The trainer waits for each batch: steps stay exact. */
typedef struct loader_thread {
  pthread_t thread;
  pthread_mutex_t lock;
  pthread_cond_t cond;
  packload_t *pl;
  packload_batch_t *batch;
  bool requested, done, quit;
} loader_thread_t;

static void *loader_main(void *arg) {
  loader_thread_t *lt = arg;
  pthread_mutex_lock(&lt->lock);
  for (;;) {
    while (!lt->requested && !lt->quit) pthread_cond_wait(&lt->cond, &lt->lock);
    if (lt->quit) break;
    lt->requested = false;
    pthread_mutex_unlock(&lt->lock);
    packload_batch_t *b = packload_next(lt->pl);
    pthread_mutex_lock(&lt->lock);
    lt->batch = b;
    lt->done = true;
    pthread_cond_broadcast(&lt->cond);
  }
  pthread_mutex_unlock(&lt->lock);
  return NULL;
}

static loader_thread_t *loader_thread_start(packload_t *pl) {
  loader_thread_t *lt = calloc(1, sizeof *lt);
  if (!lt) return NULL;
  lt->pl = pl;
  pthread_mutex_init(&lt->lock, NULL);
  pthread_cond_init(&lt->cond, NULL);
  if (pthread_create(&lt->thread, NULL, loader_main, lt) == 0) return lt;
  free(lt);
  return NULL;
}

static void loader_thread_stop(loader_thread_t *lt) {
  if (!lt) return;
  pthread_mutex_lock(&lt->lock);
  lt->quit = true;
  pthread_cond_broadcast(&lt->cond);
  pthread_mutex_unlock(&lt->lock);
  pthread_join(lt->thread, NULL);
  pthread_mutex_destroy(&lt->lock);
  pthread_cond_destroy(&lt->cond);
  free(lt);
}

static packload_batch_t *loader_thread_next(loader_thread_t *lt) {
  pthread_mutex_lock(&lt->lock);
  lt->requested = true;
  lt->done = false;
  pthread_cond_broadcast(&lt->cond);
  while (!lt->done) pthread_cond_wait(&lt->cond, &lt->lock);
  packload_batch_t *b = lt->batch;
  pthread_mutex_unlock(&lt->lock);
  return b;
}

typedef struct trainer {
  const rt_opts_t *o;
  const rt_layout_t *lay;
  packload_t *pl;
  loader_thread_t *loader; /* NULL: hand-offs from this thread */
  ledger_t led;
  emu_model_t model;
  cpu_work_t *cpu;
  double cpu_sink; /* keeps the CPU work observable */
  float *grad;
  int64_t ngrad;
} trainer_t;

/* The rank's share of one pack's modelled time: a model replica's tp*cp*pp
 * ranks split its work evenly. */
static double emulated_seconds(const trainer_t *t, const packload_batch_t *b,
                               int64_t step, int32_t m) {
  const rt_opts_t *o = t->o;
  double s = emu_pack_seconds(&t->model, b->cu_seqlens, b->nsamples);
  double noise = emu_noise(&t->model, o->seed, t->lay->rank, step, m);
  return s * noise * o->time_scale / ((double)o->tp * o->cp * o->pp);
}

/* One hand-off and its compute; returns the compute seconds. */
static double micro_batch(trainer_t *t, int64_t step, int32_t m) {
  double t0 = now_s();
  packload_batch_t *b = t->loader ? loader_thread_next(t->loader)
                                  : packload_next(t->pl);
  double t1 = now_s();
  t->led.handoff_ms[step] += 1e3 * (t1 - t0);
  if (ledger_batch(&t->led, step, b, t->pl) < 0) {
    fprintf(stderr, "reftrain: out of memory for the ledger\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (t->o->mode == RT_EMULATE) {
    sleep_until(t1 + emulated_seconds(t, b, step, m));
  } else {
    double r = cpu_pack(t->cpu, b->cu_seqlens, b->nsamples, b->tokens);
    if (isnan(r)) {
      fprintf(stderr, "reftrain: out of memory for the CPU attention\n");
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    t->cpu_sink += r;
  }
  return now_s() - t1;
}

static void step(trainer_t *t, int64_t s) {
  double t0 = now_s();
  for (int32_t m = 0; m < t->o->micro; m++)
    t->led.compute_ms[s] += 1e3 * micro_batch(t, s, m);
  double t1 = now_s();
  MPI_Allreduce(MPI_IN_PLACE, t->grad, (int)t->ngrad, MPI_FLOAT, MPI_SUM,
                MPI_COMM_WORLD);
  double t2 = now_s();
  /* Averaging keeps the values bounded over any number of steps. */
  float inv = 1.0f / (float)t->lay->world;
  for (int64_t i = 0; i < t->ngrad; i++) t->grad[i] *= inv;
  if (t->o->check) ledger_produced(&t->led, s, t->pl);
  t->led.wait_ms[s] = 1e3 * (t2 - t1);
  t->led.step_ms[s] = 1e3 * (now_s() - t0);
  if (t->o->verbose && t->lay->rank == 0)
    fprintf(stderr,
            "step %lld: %.1f ms (rank 0: compute %.1f, hand-off %.2f, "
            "all-reduce %.1f, %lld tokens)\n",
            (long long)s, t->led.step_ms[s], t->led.compute_ms[s],
            t->led.handoff_ms[s], t->led.wait_ms[s],
            (long long)t->led.step_tokens[s]);
}

static int trainer_init(trainer_t *t, const rt_opts_t *o,
                        const rt_layout_t *lay, packload_t *pl) {
  *t = (trainer_t){.o = o, .lay = lay, .pl = pl,
                   .model = emu_model_default()};
  bool counts = lay->tp_i == 0 && lay->cp_i == 0 && lay->pp_i == 0;
  if (ledger_init(&t->led, o->steps, counts, o->ids_out || o->check,
                  o->check) < 0)
    return -1;
  t->ngrad = o->grad_bytes / (int64_t)sizeof(float);
  t->grad = malloc((size_t)t->ngrad * sizeof *t->grad + 1);
  if (!t->grad) return -1;
  for (int64_t i = 0; i < t->ngrad; i++) t->grad[i] = 1.0f;
  if (o->mode == RT_CPU && !(t->cpu = cpu_work_new(o->cpu_dim))) return -1;
  if (o->loader_thread && !(t->loader = loader_thread_start(pl))) return -1;
  return 0;
}

static void trainer_free(trainer_t *t) {
  loader_thread_stop(t->loader);
  ledger_free(&t->led);
  cpu_work_free(t->cpu);
  free(t->grad);
}

static int train(const rt_opts_t *o, const rt_layout_t *lay, packload_t *pl) {
  trainer_t t;
  if (trainer_init(&t, o, lay, pl) < 0) {
    fprintf(stderr, "reftrain: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (lay->rank == 0 && o->verbose)
    fprintf(stderr,
            "reftrain: world %d = tp %d x cp %d x dp %d x pp %d; emulate "
            "break-even len %.0f\n",
            lay->world, lay->tp, lay->cp, lay->dp, lay->pp,
            emu_break_even(&t.model));
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = now_s();
  for (int64_t s = 0; s < o->steps; s++) step(&t, s);
  double elapsed = now_s() - t0;
  if (o->verbose && o->mode == RT_CPU)
    fprintf(stderr, "reftrain: rank %d cpu checksum %.6g\n", lay->rank,
            t.cpu_sink);
  int rc = rt_report(&t.led, o, lay, elapsed);
  trainer_free(&t);
  return rc;
}

int main(int argc, char **argv) {
  rt_opts_t o;
  char err[512];
  int parsed = rt_parse(argc, argv, &o, err, sizeof err);
  if (parsed != 0) { /* no MPI at all: nothing for a shim to do */
    if (launcher_rank() == 0) {
      if (parsed > 0) rt_usage(stdout);
      else fprintf(stderr, "reftrain: %s\n", err);
    }
    return parsed > 0 ? 0 : 2;
  }
  MPI_Init(&argc, &argv);
  rt_layout_t lay;
  packload_t *pl = NULL;
  int rc = 2;
  if (make_layout(&o, &lay) == 0 && (pl = open_loader(&o, &lay)) != NULL)
    rc = train(&o, &lay, pl);
  packload_close(pl);
  MPI_Finalize();
  return rc;
}
