/* reftrain: the reference data-parallel trainer.
 *
 * A plain MPI program that knows nothing of dpshim. Each step it takes
 * --micro-batches packs from libpackload, each through packload_next() and
 * each followed by its compute, then sums a gradient buffer over
 * MPI_COMM_WORLD (--sync: one MPI_Allreduce, buckets of MPI_Iallreduce, or
 * shared memory with no MPI call; sync.c, shmsync.c). packload_next() lives
 * in a shared library and is called through the PLT, so a preloaded
 * balancer can interpose it; the time from its return to the sync's entry
 * is the rank's compute. --loader-thread moves the hand-offs to a second
 * thread (loader.c); --chatter adds a coordinator thread's all-reduces
 * (chatter.c) and --loss-allreduce one of the loss after the sync: MPI
 * traffic that is no gradient sync.
 *
 * Ranks follow Megatron's order (tp fastest, then cp, dp, pp); the loader
 * slot is the dp index, so model-parallel peers draw the same packs. Tokens
 * and the digest count one rank per DP slot (tp = cp = pp = 0): they do not
 * change with the model-parallel sizes.
 */
#include <errno.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agree.h"
#include "chatter.h"
#include "compute.h"
#include "ledger.h"
#include "loader.h"
#include "options.h"
#include "packload.h"
#include "report.h"
#include "sync.h"
#include "../timeutil.h"

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
  int first = rt_lowest_failed(pl == NULL);
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

typedef struct trainer {
  const rt_opts_t *o;
  const rt_layout_t *lay;
  packload_t *pl;
  rt_loader_t *loader; /* NULL: hand-offs from this thread */
  rt_sync_state_t sync;
  int64_t produced[2]; /* the loader's counts after the last batch taken */
  ledger_t led;
  emu_model_t model;
  cpu_work_t *cpu;
  double cpu_sink; /* keeps the CPU work observable */
  float *grad;
  int64_t ngrad;
  rt_chatter_t *chatter; /* --chatter */
  double loss;           /* this rank's, of the step being made */
  double loss_own;       /* this rank's, every step's */
  double loss_sink;      /* every step's all-reduced loss */
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

/* The next batch, from the loader thread or straight from the loader. */
static const packload_batch_t *next_batch(trainer_t *t) {
  if (t->loader) {
    const packload_batch_t *b = rt_loader_next(t->loader, t->produced);
    if (!b) {
      fprintf(stderr, "reftrain: out of memory in the loader thread\n");
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    return b;
  }
  const packload_batch_t *b = packload_next(t->pl);
  packload_produced(t->pl, &t->produced[0], &t->produced[1]);
  return b;
}

/* A stand-in for the loss: the tokens it weighs, as a trainer all-reduces
 * to normalise it. Whole numbers: their sum is exact in any order. */
static double batch_loss(const packload_batch_t *b) {
  int32_t n = b->cu_seqlens[b->nsamples];
  if (!b->loss_weights) return n;
  double sum = 0;
  for (int32_t i = 0; i < n; i++) sum += b->loss_weights[i];
  return sum;
}

/* One hand-off and its compute; returns the compute seconds. */
static double micro_batch(trainer_t *t, int64_t step, int32_t m) {
  double t0 = dpshim__tool_now_s();
  const packload_batch_t *b = next_batch(t);
  double t1 = dpshim__tool_now_s();
  t->led.handoff_ms[step] += 1e3 * (t1 - t0);
  if (t->o->loss_allreduce) t->loss += batch_loss(b);
  /* Part of the compute as the balancer times it (hand-off return to the
   * sync), but a collective all the same. */
  rt_sync_stray(&t->sync);
  if (ledger_batch(&t->led, step, b, t->pl) < 0) {
    fprintf(stderr, "reftrain: out of memory for the ledger\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (t->o->mode == RT_EMULATE) {
    dpshim__tool_sleep_until(t1 + emulated_seconds(t, b, step, m));
  } else {
    double r = cpu_pack(t->cpu, b->cu_seqlens, b->nsamples, b->tokens);
    if (isnan(r)) {
      fprintf(stderr, "reftrain: out of memory for the CPU attention\n");
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    t->cpu_sink += r;
  }
  return dpshim__tool_now_s() - t1;
}

static void step(trainer_t *t, int64_t s) {
  double t0 = dpshim__tool_now_s();
  for (int32_t m = 0; m < t->o->micro; m++)
    t->led.compute_ms[s] += 1e3 * micro_batch(t, s, m);
  double t1 = dpshim__tool_now_s();
  rt_sync_grad(&t->sync, t->grad, t->ngrad);
  t->loss_own += t->loss;
  t->loss_sink += rt_sync_loss(&t->sync, t->loss);
  t->loss = 0;
  /* The model's own gradient all-reduce, beyond the small real one: the
   * same time on every rank, after it (so outside the shim's steps). */
  if (t->o->mode == RT_EMULATE)
    dpshim__tool_sleep_until(dpshim__tool_now_s() +
                             t->o->time_scale *
                                 emu_grad_seconds(&t->model, t->lay->dp,
                                                  t->lay->tp));
  double t2 = dpshim__tool_now_s();
  /* Averaging keeps the values bounded over any number of steps. */
  float inv = 1.0f / (float)t->lay->world;
  for (int64_t i = 0; i < t->ngrad; i++) t->grad[i] *= inv;
  if (t->o->check) ledger_produced(&t->led, s, t->produced);
  t->led.wait_ms[s] = 1e3 * (t2 - t1);
  t->led.step_ms[s] = 1e3 * (dpshim__tool_now_s() - t0);
  if (t->o->verbose && t->lay->rank == 0)
    fprintf(stderr,
            "step %lld: %.1f ms (rank 0: compute %.1f, hand-off %.2f, "
            "all-reduce %.1f, %lld tokens)\n",
            (long long)s, t->led.step_ms[s], t->led.compute_ms[s],
            t->led.handoff_ms[s], t->led.wait_ms[s],
            (long long)t->led.step_tokens[s]);
}

/* 0; -1 when out of memory; -2 when a refusal has been said (on every
 * rank alike). */
static int trainer_init(trainer_t *t, const rt_opts_t *o,
                        const rt_layout_t *lay, packload_t *pl) {
  *t = (trainer_t){.o = o, .lay = lay, .pl = pl,
                   .model = o->model};
  bool counts = lay->tp_i == 0 && lay->cp_i == 0 && lay->pp_i == 0;
  if (ledger_init(&t->led, o->steps, counts, o->ids_out || o->check,
                  o->check) < 0)
    return -1;
  t->ngrad = o->grad_bytes / (int64_t)sizeof(float);
  t->grad = malloc((size_t)t->ngrad * sizeof *t->grad + 1);
  if (!t->grad) return -1;
  for (int64_t i = 0; i < t->ngrad; i++) t->grad[i] = 1.0f;
  if (o->mode == RT_CPU && !(t->cpu = cpu_work_new(o->cpu_dim))) return -1;
  int rc = rt_sync_init(&t->sync, o);
  if (rc < 0) return rc;
  if (o->loader_thread &&
      !(t->loader = rt_loader_start(pl, o->steps * o->micro, o->prefetch)))
    return -1;
  return 0;
}

static void trainer_free(trainer_t *t) {
  rt_chatter_stop(t->chatter);
  rt_loader_stop(t->loader);
  rt_sync_free(&t->sync);
  ledger_free(&t->led);
  cpu_work_free(t->cpu);
  free(t->grad);
}

static int train(const rt_opts_t *o, const rt_layout_t *lay, packload_t *pl,
                 int thread_level) {
  trainer_t t;
  int init = trainer_init(&t, o, lay, pl);
  if (init == -2) {
    trainer_free(&t);
    return 2;
  }
  if (init < 0) {
    fprintf(stderr, "reftrain: out of memory\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  /* Started last and stopped first: every rank's thread makes its rounds
   * while every rank steps. A failure aborts, as the others' threads would
   * wait for this one. */
  if (o->chatter_ms > 0 && !(t.chatter = rt_chatter_start(o->chatter_ms)))
    MPI_Abort(MPI_COMM_WORLD, 1);
  if (lay->rank == 0 && o->verbose)
    fprintf(stderr,
            "reftrain: world %d = tp %d x cp %d x dp %d x pp %d; emulate "
            "break-even len %.0f\n",
            lay->world, lay->tp, lay->cp, lay->dp, lay->pp,
            emu_break_even(&t.model));
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = dpshim__tool_now_s();
  for (int64_t s = 0; s < o->steps; s++) step(&t, s);
  double elapsed = dpshim__tool_now_s() - t0;
  int64_t rounds = rt_chatter_stop(t.chatter);
  t.chatter = NULL;
  if (o->verbose && lay->rank == 0 && o->chatter_ms > 0)
    fprintf(stderr, "reftrain: --chatter: %lld rounds\n", (long long)rounds);
  if (o->verbose && lay->rank == 0 && o->loss_allreduce)
    fprintf(stderr, "reftrain: --loss-allreduce: loss summed over steps "
            "%.0f, rank 0's own %.0f\n", t.loss_sink, t.loss_own);
  if (o->verbose && o->mode == RT_CPU)
    fprintf(stderr, "reftrain: rank %d cpu checksum %.6g\n", lay->rank,
            t.cpu_sink);
  int rc = rt_report(&t.led, o, lay, elapsed, thread_level);
  trainer_free(&t);
  return rc;
}

/* Initialises MPI; returns the thread level MPI reports. The chatter thread
 * calls MPI beside the main thread: MPI_THREAD_MULTIPLE. The loader thread
 * makes no MPI call of its own, so a trainer with one needs only
 * MPI_THREAD_FUNNELED; one without asks nothing (MPI_Init). Anything more
 * a balancer needs is its own to ask for, and shows in the level. */
static int init_mpi(const rt_opts_t *o, int *argc, char ***argv) {
  int provided = MPI_THREAD_SINGLE;
  if (o->chatter_ms > 0)
    MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  else if (o->loader_thread)
    MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  else
    MPI_Init(argc, argv);
  MPI_Query_thread(&provided);
  return provided;
}

/* --print-coefs: the emulated GPU's time per sample, as the rank's share
 * of it is slept (emulated_seconds), in the shim's unit (microseconds).
 * The noise's mean, exp(sigma^2 / 2), is 1 to within 0.02%. */
static void print_coefs(const rt_opts_t *o) {
  double c[3];
  emu_quadratic(&o->model, c);
  double us = 1e6 * o->time_scale / ((double)o->tp * o->cp * o->pp);
  printf("%.6g,%.6g,%.6g\n", c[0] * us, c[1] * us, c[2] * us);
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
  if (o.print_coefs) {
    if (launcher_rank() == 0) print_coefs(&o);
    return 0;
  }
  int thread_level = init_mpi(&o, &argc, &argv);
  rt_layout_t lay;
  packload_t *pl = NULL;
  int rc = 2;
  if (o.chatter_ms > 0 && thread_level < MPI_THREAD_MULTIPLE) {
    if (launcher_rank() == 0)
      fprintf(stderr, "reftrain: --chatter needs MPI_THREAD_MULTIPLE; this "
              "MPI provides level %d\n", thread_level);
  } else if (make_layout(&o, &lay) == 0 &&
             (pl = open_loader(&o, &lay)) != NULL)
    rc = train(&o, &lay, pl, thread_level);
  packload_close(pl);
  MPI_Finalize();
  return rc;
}
