/* The shim's core (core.h) over the thread mock of the comm seam: steps,
 * the agreed warm-up, the fit at the hand-off, errors agreed and printed
 * from every DP group, TP/CP peers kept identical, the step log and the
 * summary. Each rank is a thread with its own core, as each process has
 * one; the mock fails a test that leaves ranks in different collectives. */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core.h"
#include "mock_comm.h"
#include "policy.h"

#define MAXP 8
#define CAP_SAMPLES 64
#define CAP_TOKENS 8192
#define MAX_CALLS 32

/* ---- what the ranks say --------------------------------------------------------- */

static pthread_mutex_t said_lock = PTHREAD_MUTEX_INITIALIZER;
static char said[64][512];
static int nsaid;

static void capture(const char *line) {
  pthread_mutex_lock(&said_lock);
  if (nsaid < 64) snprintf(said[nsaid++], sizeof said[0], "%s", line);
  if (getenv("SAY")) fprintf(stderr, "SAID %s\n", line);
  pthread_mutex_unlock(&said_lock);
}

/* Lines that contain w1, and w2 unless it is NULL. */
static int said_with(const char *w1, const char *w2) {
  int n = 0;
  for (int k = 0; k < nsaid; k++)
    n += strstr(said[k], w1) && (!w2 || strstr(said[k], w2));
  return n;
}

/* A rank's own clock where the test says how long compute takes: exact,
 * whatever the machine's load. */
static __thread double virtual_seconds;

static double virtual_now(void) { return virtual_seconds; }

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- configuration ---------------------------------------------------------------- */

static const char *env[24][2];
static const char *extra_env[8][2]; /* more variables, for one test */

static char *fake_getenv(const char *name) {
  for (int k = 0; env[k][0]; k++)
    if (!strcmp(env[k][0], name)) return (char *)env[k][1];
  return NULL;
}

static dpshim__config_t config(const char *log, int vit) {
  int k = 0;
  env[k][0] = "DPSHIM_VLM_BALANCE", env[k++][1] = "1";
  if (vit) env[k][0] = "DPSHIM_VIT_BALANCE", env[k++][1] = "1";
  env[k][0] = "DPSHIM_WARMUP_ITERS", env[k++][1] = "2-4";
  env[k][0] = "DPSHIM_VERIFY", env[k++][1] = "1";
  if (log) env[k][0] = "DPSHIM_LOG", env[k++][1] = log;
  for (int e = 0; extra_env[e][0]; e++) { /* later entries win */
    memmove(env + 1, env, (size_t)k * sizeof env[0]);
    env[0][0] = extra_env[e][0], env[0][1] = extra_env[e][1];
    k++;
  }
  env[k][0] = NULL;
  dpshim__config_t c;
  char msg[256];
  cr_assert_eq(dpshim__config_parse(fake_getenv, &c, msg, sizeof msg), 0,
               "%s", msg);
  return c;
}

/* ---- a rank's batch: tokens and ids, payload from the id --------------------------- */

typedef struct rank_batch {
  int32_t cu[CAP_SAMPLES + 1];
  int32_t tokens[CAP_TOKENS];
  uint64_t ids[CAP_SAMPLES];
  dpshim_field_t f[2];
  dpshim_batch_t b;
} rank_batch_t;

/* Sample i of a pack of four and 800 tokens: 200 +- s, s turning over
 * the ranks, and 200 +- t, t growing with the call up to the 7th. */
static int32_t equal_pack_len(uint64_t id, int i) {
  int call = (int)(id >> 32), d = (int)(id >> 16 & 0xffff);
  int32_t s = i < 2 ? 50 * ((d + call) % 4) : 20 * (call < 7 ? call : 7);
  return 200 + (i % 2 ? -s : s);
}

/* Call `call` of DP index `d`: lengths uneven across ranks, so plans
 * apply; or (equal) packs of the same tokens and samples everywhere. */
static void draw(rank_batch_t *rb, int d, int call, int equal) {
  int n = equal ? 4 : 4 + (d * 7 + call) % 5;
  rb->cu[0] = 0;
  for (int i = 0; i < n; i++) {
    uint64_t id = (uint64_t)call << 32 | (uint64_t)d << 16 | (uint64_t)i;
    int32_t len = equal ? equal_pack_len(id, i)
                        : 20 + (int32_t)((id * 2654435761u) % 90) +
                              (d == 0 ? 300 : 0);
    rb->ids[i] = id;
    for (int32_t t = 0; t < len; t++)
      rb->tokens[rb->cu[i] + t] = (int32_t)(id % 1000003) + t;
    rb->cu[i + 1] = rb->cu[i] + len;
  }
  rb->f[0] = (dpshim_field_t){"tokens", rb->tokens, 4, rb->cu, CAP_TOKENS};
  rb->f[1] = (dpshim_field_t){"ids", rb->ids, 8, NULL, CAP_SAMPLES};
  rb->b = (dpshim_batch_t){n, CAP_SAMPLES, rb->cu, 2, rb->f, NULL};
}

/* Every sample intact: its tokens re-derived from its id. */
static int intact(const rank_batch_t *rb) {
  for (int i = 0; i < rb->b.nsamples; i++)
    for (int32_t t = rb->cu[i]; t < rb->cu[i + 1]; t++)
      if (rb->tokens[t] != (int32_t)(rb->ids[i] % 1000003) + t - rb->cu[i])
        return 0;
  return 1;
}

static uint64_t id_sum(const rank_batch_t *rb) {
  uint64_t s = 0;
  for (int i = 0; i < rb->b.nsamples; i++) s += rb->ids[i] * 2654435761u;
  return s;
}

/* ---- a run: every rank hands off `calls` times ----------------------------------- */

typedef enum { FAULT_NONE, FAULT_NULL, FAULT_RENAME } fault_t;

/* The gradient sync, as the shim sees it. */
typedef enum {
  SYNC_SEEN,   /* an MPI sync after every step's hand-offs */
  SYNC_HIDDEN, /* outside MPI (a barrier of the threads): nothing seen */
  SYNC_LOSS,   /* hidden, then a small MPI collective the shim takes for
                * the sync: every rank's "compute" ends at the same time */
  SYNC_MARKED  /* hidden, then dpshim_step_end() */
} sync_kind_t;

typedef struct run {
  int P, ngroups, calls;
  int main_thread;        /* hand-offs from the main thread */
  int ahead;              /* > 0: hand-offs this many batches ahead of the
                           * one the rank consumes (as a loader thread) */
  int takes;              /* ahead: each batch taken (dpshim_batch_taken) */
  double jitter;          /* compute * (1 +- jitter), drawn per rank-call */
  int equal_packs;        /* every pack of 4 samples and 800 tokens */
  int micro_rank;         /* syncs after every other hand-off (-1: none) */
  sync_kind_t sync;
  int micro;              /* hand-offs a step (SYNC_SEEN: 1) */
  int hidden_rank;        /* SYNC_SEEN but this rank's is hidden (-1) */
  double cost_us;         /* > 0: compute of cost_us * sum len^2 / 1e4 us */
  int late_call;          /* > 0: from this call on, the compute also */
  double late_len;        /* costs as much per token as a sample this long */
  int linear_until;       /* before this call, the compute is per token
                           * only (late_len a token; set late_call 1), */
  double trend;           /* and falls by this share of itself a call */
  int virtual_time;       /* compute advances virtual_now(), no sleep */
  pthread_barrier_t barrier; /* the hidden sync */
  double arrived[MAXP];      /* each rank's virtual time at the barrier */
  int vit;                /* DPSHIM_VIT_BALANCE=1: encoder calls reported */
  fault_t fault;
  int fault_rank, fault_call;
  const char *log;
  const int32_t *host; /* [DP size] each DP rank's host, or NULL */
  dpshim__config_t cfg;
  /* results, per world rank */
  int rc[MAXP][MAX_CALLS];
  int bad[MAXP];             /* a sample not intact */
  uint64_t before[MAXP][MAX_CALLS], after[MAXP][MAX_CALLS];
  int fitted[MAXP], vit_fitted[MAXP];
  dpshim_cost_model_t model[MAXP], vit_model[MAXP];
  int64_t applied[MAXP], handoffs[MAXP], backed_off[MAXP];
  int mode[MAXP], from_steps[MAXP], noop[MAXP], stuck[MAXP];
  double fit_error[MAXP]; /* the fit's mean relative error */
  double meet_cost[MAXP][2]; /* ships_then_forwards: the learnt meeting */
  mock_stats_t stats;
} run_t;

/* The encoder's cost the ViT fit must find: seconds per image of L
 * patches (far below the step's compute, which it is taken from). */
#define VIT_A 1e-11
#define VIT_C 2e-6

/* A forward and a backward of one to three images, as the encoder's
 * adapter reports them in warm-up: run where made, timed. */
static void encoder_calls(dpshim__core_t *c, int rank, int call) {
  dpshim__vit_report_t f = {.kind = DPSHIM__VIT_FORWARD, .grouped = 1,
                            .warm = 1};
  f.own_images = 1 + (rank + call) % 3;
  double seconds = 0;
  for (int64_t i = 0; i < f.own_images; i++) {
    double l = 64.0 * (double)(1 + (rank * 3 + call + (int)i) % 7);
    f.own_patches += l;
    f.own_patches_sq += l * l;
    seconds += VIT_A * l * l + VIT_C;
  }
  f.encode_s = seconds / 3;
  dpshim__core_vit_call(c, &f, f.encode_s);
  dpshim__vit_report_t b = {.kind = DPSHIM__VIT_BACKWARD, .grouped = 1,
                            .encode_s = 2 * seconds / 3};
  dpshim__core_vit_call(c, &b, b.encode_s);
}

/* A rank's compute: fixed, or following its samples' sum len^2 (and
 * from late_call on their tokens too). */
static void compute(const run_t *x, const dpshim_batch_t *b, int rank,
                    int call) {
  if (x->cost_us <= 0 || !b) {
    usleep(200 + 50 * (unsigned)rank);
    return;
  }
  double len2 = 0, per_token = x->late_call > 0 && call >= x->late_call
                                   ? x->late_len : 0;
  for (int i = 0; i < b->nsamples; i++) {
    double len = b->cu_seqlens[i + 1] - b->cu_seqlens[i];
    len2 += (call < x->linear_until ? 0 : len * len) + per_token * len;
  }
  if (call < x->linear_until) len2 *= 1 - x->trend * call;
  uint32_t h = (uint32_t)(rank * 7919 + call * 104729) * 2654435761u;
  len2 *= 1 + x->jitter * ((double)(h >> 8) / (double)(1u << 24) * 2 - 1);
  if (x->virtual_time) virtual_seconds += x->cost_us * len2 / 1e10;
  else usleep((unsigned)(x->cost_us * len2 / 1e4));
}

/* The ranks meet: in virtual time, each leaves at the last one's arrival. */
static void meet(run_t *x, int rank) {
  x->arrived[rank] = virtual_seconds;
  pthread_barrier_wait(&x->barrier);
  for (int r = 0; r < x->P; r++)
    virtual_seconds = fmax(virtual_seconds, x->arrived[r]);
  pthread_barrier_wait(&x->barrier); /* before anyone arrives again */
}

/* The step's end outside MPI, after its last micro-batch. */
static void hidden_sync(run_t *x, dpshim__core_t *c, int rank, int call) {
  if (call % x->micro) return;
  meet(x, rank);
  if (x->sync == SYNC_LOSS) {
    dpshim__core_sync_begin(c);
    dpshim__core_sync_end(c);
  } else if (x->sync == SYNC_MARKED) {
    dpshim__core_step_end(c);
  }
}

/* Batch `call` drawn into rb and handed off; NULL where the fault makes
 * it so. */
static dpshim_batch_t *hand_off(run_t *x, dpshim__core_t *c, rank_batch_t *rb,
                                int rank, int call, int main) {
  draw(rb, rank / x->ngroups, call, x->equal_packs);
  dpshim_batch_t *b = &rb->b;
  if (x->fault && rank == x->fault_rank && call == x->fault_call) {
    if (x->fault == FAULT_NULL) b = NULL;
    else rb->f[0].name = "renamed";
  }
  x->before[rank][call] = id_sum(rb);
  x->rc[rank][call] = dpshim__core_handoff(c, b, main, NULL, 0);
  x->after[rank][call] = id_sum(rb);
  x->bad[rank] |= !intact(rb);
  return b;
}

/* The trainer's work on batch `call`, then its sync where one falls. */
static void consume(run_t *x, dpshim__core_t *c, const dpshim_batch_t *b,
                    int rank, int call) {
  compute(x, b, rank, call);
  if (x->vit) encoder_calls(c, rank, call);
  if (x->sync != SYNC_SEEN) {
    hidden_sync(x, c, rank, call);
    return;
  }
  /* micro_rank takes two micro-batches a step: its step counter falls
   * behind the others', as a rank's does whose loader runs ahead. */
  if (rank == x->micro_rank && call % 2) return;
  if (call % x->micro) return;
  int seen = rank != x->hidden_rank;
  if (seen) dpshim__core_sync_begin(c);
  /* The sync's wait for the slowest rank, where the test times compute
   * (micro_rank's syncs are not timed: its count differs). */
  if (x->cost_us > 0) meet(x, rank);
  if (seen) dpshim__core_sync_end(c);
}

static void one_step(run_t *x, dpshim__core_t *c, int rank, int call) {
  rank_batch_t rb;
  consume(x, c, hand_off(x, c, &rb, rank, call, x->main_thread), rank, call);
}

/* A loader x->ahead batches ahead: batch call + ahead is balanced before
 * the rank consumes batch call (taken where x->takes). */
static void run_ahead(run_t *x, dpshim__core_t *c, int rank) {
  rank_batch_t *ring = calloc((size_t)x->ahead + 1, sizeof *ring);
  dpshim_batch_t *b[MAX_CALLS + 1] = {0};
  for (int call = 1, handed = 0; call <= x->calls; call++) {
    for (; handed < x->calls && handed < call + x->ahead; handed++)
      b[handed + 1] = hand_off(x, c, &ring[(handed + 1) % (x->ahead + 1)],
                               rank, handed + 1, 0);
    if (x->takes) dpshim__core_taken(c, 0);
    consume(x, c, b[call], rank, call);
  }
  free(ring);
}

static void rank_main(dpshim__comm_t *world, dpshim__comm_t *dp,
                      dpshim__comm_t *peers, int rank, void *arg) {
  run_t *x = arg;
  dpshim__core_t c;
  dpshim__core_setup_t s = {&x->cfg, world, dp, peers, rank % x->ngroups,
                            x->ngroups, x->host,
                            x->virtual_time ? virtual_now : now, capture};
  virtual_seconds = 0;
  if (dpshim__core_open(&c, &s) < 0) return;
  if (x->ahead > 0) run_ahead(x, &c, rank);
  else
    for (int call = 1; call <= x->calls; call++) one_step(x, &c, rank, call);
  x->fitted[rank] = c.fitted;
  x->stuck[rank] = c.stuck;
  x->fit_error[rank] = c.fit.mean_rel_error;
  x->model[rank] = c.model;
  x->vit_fitted[rank] = c.vit_fitted;
  dpshim__core_vit_model(&c, &x->vit_model[rank]);
  x->applied[rank] = c.stats.applied;
  x->handoffs[rank] = c.stats.handoffs;
  x->backed_off[rank] = c.stats.backed_off;
  x->mode[rank] = c.mode;
  x->from_steps[rank] = c.fit_method != DPSHIM_FIT_RANKS;
  x->noop[rank] = c.noop[0] != 0;
  dpshim__core_close(&c);
}

static run_t *run_new(int P, int ngroups, int calls) {
  run_t *x = calloc(1, sizeof *x);
  x->P = P;
  x->ngroups = ngroups;
  x->calls = calls;
  x->main_thread = 1;
  x->micro_rank = -1;
  x->hidden_rank = -1;
  x->micro = 1;
  x->fault_rank = -1;
  pthread_barrier_init(&x->barrier, NULL, (unsigned)P);
  nsaid = 0;
  memset(extra_env, 0, sizeof extra_env);
  return x;
}

static void run_go(run_t *x) {
  x->cfg = config(x->log, x->vit);
  mock_opts_t o = {.size = x->P, .fail_rank = -1};
  int rc = mock_run_groups(&o, x->ngroups, rank_main, x, &x->stats);
  cr_assert_eq(rc, 0, "mock: %s", x->stats.message);
  for (int r = 0; r < x->P; r++) cr_assert(!x->bad[r], "rank %d corrupt", r);
}

static int count_lines(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  int n = 0, ch;
  while ((ch = fgetc(f)) != EOF) n += ch == '\n';
  fclose(f);
  return n;
}

/* ---- warm-up and the fit ------------------------------------------------------------ */

Test(shim_core, fit_at_the_handoff_same_model_everywhere) {
  run_t *x = run_new(4, 1, 12);
  run_go(x);
  for (int r = 0; r < x->P; r++) {
    cr_assert(x->fitted[r], "rank %d did not fit", r);
    cr_assert(!memcmp(&x->model[r], &x->model[0], sizeof x->model[0]),
              "rank %d has another model", r);
    cr_assert_eq(x->applied[r], x->applied[0]);
    for (int k = 1; k <= x->calls; k++) cr_assert_eq(x->rc[r][k], 0);
  }
  cr_assert_gt(x->applied[0], 0, "nothing applied after the warm-up");
  /* Warm-up hand-offs (steps 2-4, and the fit's at 5) moved nothing. */
  for (int k = 2; k <= 4; k++)
    for (int r = 0; r < x->P; r++)
      cr_assert_eq(x->before[r][k], x->after[r][k], "warm-up moved samples");
  free(x);
}

/* With the ViT balance the warm-up fits the encoder's cost per image from
 * its calls' times, apart from the LLM's (whose cost then leaves images
 * out), and every rank gets the same model. */
Test(shim_core, vit_fit_learns_the_encoder_cost) {
  run_t *x = run_new(4, 1, 12);
  x->vit = 1;
  run_go(x);
  dpshim_cost_model_t want =
      dpshim__policy_model_from_fit((dpshim_cost_model_t){VIT_A, 0, VIT_C, 0, 0});
  for (int r = 0; r < x->P; r++) {
    cr_assert(x->fitted[r] && x->vit_fitted[r], "rank %d did not fit", r);
    cr_assert(!memcmp(&x->vit_model[r], &x->vit_model[0],
                      sizeof x->vit_model[0]), "rank %d's ViT model", r);
    cr_assert_eq(x->model[r].d, 0, "the LLM's cost carries no images");
    cr_assert_eq(x->model[r].e, 0);
  }
  dpshim_cost_model_t m = x->vit_model[0];
  cr_assert(fabs(m.a - want.a) < 1e-3 * want.a && fabs(m.c - want.c) < 1e-3 *
            want.c, "ViT model %g, %g, %g; expected %g, 0, %g", m.a, m.b, m.c,
            want.a, want.c);
  cr_assert_eq(said_with("ViT fit (ranks)", "prediction error mean 0.00%"),
               1, "the summary gives the ViT fit and its error");
  free(x);
}

/* Each rank ships two forwards (3 ms each beyond the wait for the others)
 * and then makes them (1 ms each beyond the encoder and the wait): what a
 * meeting costs is learnt as 4 ms, the ship's part of each forward's; a
 * ship not kept adds nothing, nor does one made on another thread than
 * the forwards' (ahead: off their path). */
static void ships_then_forwards(dpshim__comm_t *world, dpshim__comm_t *dp,
                                dpshim__comm_t *peers, int rank, void *arg) {
  run_t *x = arg;
  dpshim__core_t c;
  dpshim__core_setup_t s = {&x->cfg, world, dp, peers, 0, 1, NULL, now,
                            capture};
  if (dpshim__core_open(&c, &s) < 0) return;
  dpshim__vit_report_t ship = {.kind = DPSHIM__VIT_SHIP, .grouped = 1,
                               .shipped = 1, .arrival_s = 5e-3};
  dpshim__vit_report_t fwd = {.kind = DPSHIM__VIT_FORWARD, .grouped = 1,
                              .shipped = 1, .encode_s = 2e-3,
                              .arrival_s = 1e-3};
  for (int k = 0; k < 2; k++) dpshim__core_vit_call(&c, &ship, 8e-3);
  for (int k = 0; k < 2; k++) dpshim__core_vit_call(&c, &fwd, 4e-3);
  x->meet_cost[rank][0] = c.meet[0].s;
  ship.shipped = 0; /* kept for no forward: nothing to learn from */
  dpshim__core_vit_call(&c, &ship, 8e-3);
  ship.shipped = ship.ahead = 1;
  dpshim__core_vit_call(&c, &ship, 8e-3);
  dpshim__core_vit_call(&c, &fwd, 4e-3);
  x->meet_cost[rank][1] = c.meet[0].s;
  dpshim__core_close(&c);
}

Test(shim_core, a_shipped_forward_costs_its_ship_too) {
  run_t *x = run_new(2, 1, 0);
  x->vit = 1;
  x->cfg = config(x->log, x->vit);
  mock_opts_t o = {.size = x->P, .fail_rank = -1};
  cr_assert_eq(mock_run_groups(&o, 1, ships_then_forwards, x, &x->stats), 0);
  for (int r = 0; r < x->P; r++) {
    cr_assert_float_eq(x->meet_cost[r][0], 4e-3, 1e-12, "rank %d: %g", r,
                       x->meet_cost[r][0]);
    cr_assert_float_eq(x->meet_cost[r][1], 0.75 * 4e-3 + 0.25 * 1e-3, 1e-12,
                       "rank %d: %g", r, x->meet_cost[r][1]);
  }
  free(x);
}

/* Step counters that differ between ranks (a loader thread ahead of its
 * main thread, ranks with other micro-batch counts) cannot split the ranks
 * between collectives: the warm-up decision is agreed. Rank 2 is at step 3
 * when the others leave the warm-up (2-4) at step 5. */
Test(shim_core, differing_step_counters_do_not_hang) {
  run_t *x = run_new(4, 1, 12);
  x->micro_rank = 2;
  run_go(x);
  for (int r = 0; r < x->P; r++) {
    cr_assert_eq(x->handoffs[r], x->calls);
    cr_assert_eq(x->applied[r], x->applied[0], "rank %d decided otherwise",
                 r);
  }
  free(x);
}

static void temp_path(char *path) {
  int fd = mkstemp(path);
  cr_assert_geq(fd, 0);
  close(fd);
  unlink(path);
}

/* ---- errors: agreed, printed once per group, naming the world rank ------------------ */

static void assert_failed_everywhere(const run_t *x, int call) {
  for (int r = 0; r < x->P; r++) {
    cr_assert_lt(x->rc[r][call], 0, "rank %d: rc %d", r, x->rc[r][call]);
    cr_assert_eq(x->before[r][call], x->after[r][call],
                 "rank %d's batch changed on error", r);
  }
}

Test(shim_core, null_batch_in_warmup_is_an_agreed_error) {
  run_t *x = run_new(4, 1, 10);
  x->fault = FAULT_NULL;
  x->fault_rank = 1;
  x->fault_call = 3; /* a warm-up step */
  run_go(x);
  assert_failed_everywhere(x, 3);
  cr_assert_eq(said_with("rank 1", "batch is NULL"), 1);
  cr_assert(x->fitted[0], "the other warm-up steps still fit");
  free(x);
}

Test(shim_core, a_renamed_field_is_an_agreed_error) {
  run_t *x = run_new(4, 1, 8);
  x->fault = FAULT_RENAME;
  x->fault_rank = 2;
  x->fault_call = 7;
  run_go(x);
  assert_failed_everywhere(x, 7);
  cr_assert_eq(said_with("rank 2", "'renamed'"), 1, "%s", said[0]);
  free(x);
}

/* TP=2: DP groups {0, 2, 4, 6} and {1, 3, 5, 7}. An error in group 1 is
 * printed (once, naming world rank 3), and group 0 does not apply a plan
 * either: TP peers must keep identical batches. */
Test(shim_core, an_error_in_any_group_is_printed_and_stops_its_peers) {
  run_t *x = run_new(8, 2, 8);
  x->fault = FAULT_NULL;
  x->fault_rank = 3;
  x->fault_call = 7;
  run_go(x);
  assert_failed_everywhere(x, 7);
  cr_assert_eq(said_with("rank 3", "batch is NULL"), 1);
  cr_assert_eq(said_with("hand-off not balanced", NULL), 2,
               "each group says its first error");
  for (int r = 0; r < x->P; r += 2)
    for (int k = 1; k <= x->calls; k++)
      cr_assert_eq(x->after[r][k], x->after[r + 1][k],
                   "TP peers %d and %d differ after hand-off %d", r, r + 1,
                   k);
  free(x);
}

/* ---- the step log and the summary ------------------------------------------------- */

Test(shim_core, step_log_has_one_line_per_step) {
  char path[] = "/tmp/dpshim-core-log-XXXXXX";
  temp_path(path);
  run_t *x = run_new(4, 1, 9);
  x->log = path;
  run_go(x);
  cr_assert_eq(count_lines(path), x->calls);
  unlink(path);
  free(x);
}

/* Ranks 0-1 on one host and 2-3 on another, as MPI_COMM_TYPE_SHARED
 * tells setup.c: each log line counts the bytes that cross hosts apart
 * (never above the bytes moved, some of them), and the summary gives
 * their share. */
Test(shim_core, bytes_across_hosts_counted_apart) {
  static const int32_t host[] = {0, 0, 1, 1};
  char path[] = "/tmp/dpshim-core-hosts-XXXXXX";
  temp_path(path);
  run_t *x = run_new(4, 1, 12);
  x->log = path;
  x->host = host;
  run_go(x);
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f);
  static char line[1 << 16];
  double moved = 0, across = 0;
  while (fgets(line, sizeof line, f)) {
    const char *m = strstr(line, "\"bytes_moved\":");
    if (!m) continue;
    double a, b;
    int hosts = 0;
    cr_assert_eq(sscanf(m, "\"bytes_moved\":%lf,\"bytes_inter_host\":%lf,",
                        &a, &b), 2, "%s", line);
    const char *h = strstr(line, "\"hosts\":");
    cr_assert(h && sscanf(h, "\"hosts\":%d", &hosts) == 1 && hosts == 2,
              "%s", line);
    cr_assert_leq(b, a, "%s", line);
    moved += a, across += b;
  }
  fclose(f);
  unlink(path);
  cr_assert_gt(across, 0, "no bytes crossed the hosts (%g moved)", moved);
  cr_assert_eq(said_with("across hosts", "2 hosts"), 1);
  free(x);
}

Test(shim_core, no_handoff_leaves_no_log_file) {
  char path[] = "/tmp/dpshim-core-nolog-XXXXXX";
  temp_path(path);
  run_t *x = run_new(4, 1, 0);
  x->log = path;
  run_go(x);
  cr_assert_eq(access(path, F_OK), -1, "a log file was left behind");
  free(x);
}

Test(shim_core, an_unwritable_log_is_said_once) {
  run_t *x = run_new(4, 1, 6);
  x->log = "/dev/full";
  run_go(x);
  cr_assert_eq(said_with("DPSHIM_LOG", "cannot write"), 1);
  free(x);
}

Test(shim_core, summary_shares_stay_within_100_percent) {
  run_t *x = run_new(4, 1, 8);
  run_go(x);
  int seen = 0;
  for (int k = 0; k < nsaid; k++) {
    const char *p = said[k];
    if (!strstr(p, "of step time") && !strstr(p, "of wall time")) continue;
    while ((p = strchr(p, '%'))) {
      const char *q = p;
      while (q > said[k] && (q[-1] == '.' || (q[-1] >= '0' && q[-1] <= '9')))
        q--;
      if (q < p) {
        cr_assert_leq(atof(q), 100.0, "%s", said[k]);
        seen++;
      }
      p++;
    }
  }
  cr_assert_geq(seen, 4, "expected the summary's shares");
  free(x);
}

/* ---- steps without an MPI sync -------------------------------------------------- */

/* Compute that follows each rank's sum len^2, on the virtual clock: the
 * fit has an exact cost to find. */
static void timed(run_t *x) {
  x->cost_us = 40;
  x->virtual_time = 1;
}

static void all_ranks(const run_t *x, int mode, int from_steps) {
  for (int r = 0; r < x->P; r++) {
    cr_assert_eq(x->mode[r], mode, "rank %d's step mode", r);
    cr_assert(x->fitted[r], "rank %d did not fit", r);
    cr_assert_eq(x->from_steps[r], from_steps, "rank %d's fit", r);
    cr_assert(!memcmp(&x->model[r], &x->model[0], sizeof x->model[0]),
              "rank %d has another model", r);
    cr_assert_eq(x->applied[r], x->applied[0], "rank %d decided otherwise",
                 r);
  }
}

/* A sync the shim never sees (DDP over NCCL or Gloo): two hand-offs a
 * step, as DPSHIM_MICRO_BATCHES says; the warm-up's steps are counted
 * meanwhile, the fit comes from step times, plans apply after it. */
Test(shim_core, hidden_sync_takes_steps_from_the_handoffs) {
  run_t *x = run_new(4, 1, 24);
  x->sync = SYNC_HIDDEN;
  x->micro = 2;
  timed(x);
  extra_env[0][0] = "DPSHIM_MICRO_BATCHES", extra_env[0][1] = "2";
  extra_env[1][0] = "DPSHIM_WARMUP_ITERS", extra_env[1][1] = "2-8";
  run_go(x);
  all_ranks(x, DPSHIM__STEP_HANDOFF, 1);
  cr_assert_gt(x->applied[0], 0, "nothing applied after the warm-up");
  for (int k = 1; k <= 16; k++) /* steps 1-8: undecided, then warm-up */
    for (int r = 0; r < x->P; r++)
      cr_assert_eq(x->before[r][k], x->after[r][k], "warm-up moved samples");
  cr_assert_eq(said_with("summary: 12 steps", NULL), 1);
  cr_assert_eq(said_with("steps: 2 hand-offs each", "no gradient sync"), 1);
  /* The model predicts every balanced step: it is kept. */
  cr_assert_eq(said_with("fit from step times", "refitted on balanced"), 0);
  cr_assert_eq(said_with("nothing is balanced", NULL), 0);
  free(x);
}

/* A model that stops predicting the balanced steps (here the tokens start
 * to cost after the warm-up) is refitted on them, from the step that
 * brings as many as the warm-up fitted, on every rank alike (the mock
 * fails ranks left in different collectives). */
Test(shim_core, a_model_that_stops_predicting_is_refitted) {
  run_t *x = run_new(4, 1, 16);
  x->sync = SYNC_HIDDEN;
  timed(x);
  x->late_call = 6;
  x->late_len = 2048;
  extra_env[0][0] = "DPSHIM_WARMUP_ITERS", extra_env[0][1] = "2-5";
  run_go(x);
  all_ranks(x, DPSHIM__STEP_HANDOFF, 1);
  cr_assert_eq(said_with("fit from step times", "refitted on balanced"), 1);
  free(x);
}

/* The summary's check of the cost model on the steps after the warm-up:
 * each rank's compute against the model's prediction for its samples, as
 * a mean relative error; -1 where the line is missing. */
static double prediction_error(void) {
  for (int k = 0; k < nsaid; k++) {
    const char *p = strstr(said[k], "each rank's compute within ");
    if (p) return atof(p + strlen("each rank's compute within "));
  }
  return -1;
}

/* A run of sync steps (warm-up 2-6) whose compute follows len^2, and from
 * hand-off late_call on (> 0) the tokens too: the summary's error. */
static double sync_run_prediction_error(int late_call) {
  nsaid = 0;
  run_t *x = run_new(4, 1, 14);
  timed(x);
  x->late_call = late_call;
  x->late_len = 2048;
  extra_env[0][0] = "DPSHIM_WARMUP_ITERS", extra_env[0][1] = "2-6";
  run_go(x);
  all_ranks(x, DPSHIM__STEP_SYNC, 0);
  free(x);
  return prediction_error();
}

/* Sync steps: compute that follows the fitted cost is predicted to the
 * clock's rounding; compute that starts to cost per token after the
 * warm-up is not, and the summary says by how much. */
Test(shim_core, the_summary_checks_the_model_after_the_warm_up) {
  double exact = sync_run_prediction_error(0);
  cr_assert(exact >= 0 && exact < 1, "error %g%%", exact);
  double late = sync_run_prediction_error(8);
  cr_assert_gt(late, 10, "error %g%% where the cost changed", late);
}

/* One rank's sync hidden: not every rank sees one, so hand-off steps,
 * agreed by all. */
Test(shim_core, a_sync_seen_on_some_ranks_only_gives_handoff_steps) {
  run_t *x = run_new(4, 1, 14);
  x->hidden_rank = 1;
  timed(x);
  extra_env[0][0] = "DPSHIM_WARMUP_ITERS", extra_env[0][1] = "2-8";
  run_go(x);
  all_ranks(x, DPSHIM__STEP_HANDOFF, 1);
  free(x);
}

/* dpshim_step_end() after every two hand-offs: steps follow the marks,
 * whatever DPSHIM_MICRO_BATCHES says (the mismatch said once). */
Test(shim_core, marked_steps_follow_the_marks) {
  run_t *x = run_new(4, 1, 24);
  x->sync = SYNC_MARKED;
  x->micro = 2;
  timed(x);
  extra_env[0][0] = "DPSHIM_WARMUP_ITERS", extra_env[0][1] = "2-8";
  run_go(x);
  all_ranks(x, DPSHIM__STEP_HANDOFF, 1);
  cr_assert_eq(said_with("summary: 12 steps", NULL), 1);
  cr_assert_eq(said_with("steps: follow", "marks"), 1);
  cr_assert_eq(said_with("dpshim_step_end() came after 2 hand-offs", NULL), 1);
  free(x);
}

/* A sync seen after every step (M = 1): sync steps, the per-rank fit. */
Test(shim_core, seen_syncs_keep_sync_steps_and_the_per_rank_fit) {
  run_t *x = run_new(4, 1, 14);
  timed(x);
  extra_env[0][0] = "DPSHIM_WARMUP_ITERS", extra_env[0][1] = "2-10";
  run_go(x);
  all_ranks(x, DPSHIM__STEP_SYNC, 0);
  cr_assert_eq(said_with("steps: end at the gradient sync", NULL), 1);
  free(x);
}

/* The trainer's loss all-reduce after a sync the shim cannot see looks
 * like the sync, but every rank reaches it together: per-rank "compute"
 * is the slowest rank's everywhere. The fit from step times predicts the
 * steps; the per-rank fit cannot, and is not taken. */
Test(shim_core, a_loss_allreduce_after_a_hidden_sync_does_not_fool_the_fit) {
  run_t *x = run_new(4, 1, 14);
  x->sync = SYNC_LOSS;
  timed(x);
  extra_env[0][0] = "DPSHIM_WARMUP_ITERS", extra_env[0][1] = "2-10";
  run_go(x);
  all_ranks(x, DPSHIM__STEP_SYNC, 1);
  cr_assert_eq(said_with("fit from step times", "by the per-rank fit"), 1);
  free(x);
}

/* ---- no silent no-op ---------------------------------------------------------- */

Test(shim_core, sync_steps_without_a_sync_say_nothing_is_balanced) {
  run_t *x = run_new(4, 1, 10);
  x->sync = SYNC_HIDDEN;
  extra_env[0][0] = "DPSHIM_STEP", extra_env[0][1] = "sync";
  run_go(x);
  /* Said once the window's 4 hand-offs (warm-up 2-4) are done, and from
   * the next one on nothing moves. */
  for (int r = 0; r < x->P; r++) {
    cr_assert(x->noop[r], "rank %d does not know", r);
    for (int k = 5; k <= x->calls; k++)
      cr_assert_eq(x->before[r][k], x->after[r][k], "rank %d moved", r);
  }
  cr_assert_eq(said_with("nothing is balanced: DPSHIM_STEP=sync", NULL), 2,
               "said once, and again by the summary");
  free(x);
}

Test(shim_core, one_rank_groups_say_nothing_is_balanced) {
  run_t *x = run_new(4, 4, 4);
  run_go(x);
  cr_assert_eq(said_with("nothing is balanced: every DP group has one rank",
                         NULL), 2);
  free(x);
}

Test(shim_core, no_handoff_says_nothing_is_balanced) {
  run_t *x = run_new(4, 1, 0);
  run_go(x);
  cr_assert_eq(said_with("nothing is balanced: no batch was handed off",
                         NULL), 2);
  free(x);
}

/* The causes hold only where they are: a run that balances says none. */
Test(shim_core, a_run_that_balances_says_no_cause) {
  run_t *x = run_new(4, 1, 8);
  run_go(x);
  cr_assert_eq(said_with("nothing is balanced", NULL), 0);
  free(x);
}

/* ---- auto's back-off ------------------------------------------------------------------ */

/* A run under given costs: every hand-off returned 0 everywhere, and the
 * ranks of all groups passed the same hand-offs by. */
static run_t *priced_run(int ngroups, const char *coefs) {
  run_t *x = run_new(4, ngroups, 20);
  extra_env[0][0] = "DPSHIM_COEFS", extra_env[0][1] = coefs;
  run_go(x);
  for (int r = 0; r < x->P; r++) {
    for (int k = 1; k <= x->calls; k++)
      cr_assert_eq(x->rc[r][k], 0, "rank %d call %d", r, k);
    cr_assert_eq(x->backed_off[r], x->backed_off[0], "rank %d", r);
  }
  return x;
}

/* Plans that never pay (a cost model of picoseconds): after two priced
 * out in a row, hand-offs pass by without a collective, in windows that
 * grow; with TP peers too (two DP groups), alike in both. */
Test(shim_core, plans_that_never_pay_back_off_the_gathers) {
  for (int groups = 1; groups <= 2; groups++) {
    run_t *x = priced_run(groups, "1e-12,0,0");
    cr_assert_gt(x->backed_off[0], x->calls / 3, "%d groups: %lld", groups,
                 (long long)x->backed_off[0]);
    cr_assert_lt(x->stats.ops[MOCK_ALLGATHER],
                 (int64_t)x->P * x->calls, "gathers not fewer");
    cr_assert_eq(x->applied[0], 0);
    cr_assert_eq(said_with("passed by without gathering", NULL), 1);
    free(x);
  }
}

/* Plans that pay: every hand-off gathers. */
Test(shim_core, plans_that_pay_never_back_off) {
  run_t *x = priced_run(1, "1,0,0");
  cr_assert_gt(x->applied[0], 0);
  cr_assert_eq(x->backed_off[0], 0);
  cr_assert_eq(said_with("passed by without gathering", NULL), 0);
  free(x);
}

/* ---- balancing ahead --------------------------------------------------------------- */

static void set_env(int k, const char *name, const char *value) {
  extra_env[k][0] = name, extra_env[k][1] = value;
}

/* Each rank's batches after balancing, for `calls` hand-offs of M a step
 * (syncs seen), under a given model and ratio: inline or `ahead` batches
 * ahead (taken where `takes`). */
static run_t *fixed_model_run(int M, int ahead, int takes) {
  static char micro[16];
  run_t *x = run_new(4, 1, 18);
  x->micro = M;
  x->ahead = ahead;
  x->takes = takes;
  snprintf(micro, sizeof micro, "%d", M);
  set_env(0, "DPSHIM_COEFS", "1,0,0");
  set_env(1, "DPSHIM_TRIGGER_THRESHOLD", "0");
  set_env(2, "DPSHIM_STEP", "sync");
  set_env(3, "DPSHIM_MICRO_BATCHES", micro);
  run_go(x);
  return x;
}

/* A hand-off's micro-batch history is its step's by its place in the
 * sequence, however far ahead it is balanced: with a loader 1 and 2
 * batches ahead, consumed at the syncs or taken, every plan is the inline
 * plan (without the history, later micro-batches' plans differ). */
Test(shim_core, handoffs_ahead_plan_as_inline) {
  for (int M = 1; M <= 3; M++) {
    run_t *inline_run = fixed_model_run(M, 0, 0);
    cr_assert_gt(inline_run->applied[0], inline_run->calls / 2);
    for (int ahead = 1; ahead <= 2; ahead++)
      for (int takes = 0; takes <= 1; takes++) {
        run_t *x = fixed_model_run(M, ahead, takes);
        char steps[64]; /* every step counted, the last ones included */
        snprintf(steps, sizeof steps, "summary: %d steps", x->calls / M);
        cr_assert_eq(said_with(steps, NULL), 1, "M %d, %d ahead%s", M, ahead,
                     takes ? ", taken" : "");
        for (int r = 0; r < x->P; r++)
          for (int k = 1; k <= x->calls; k++)
            cr_assert_eq(x->after[r][k], inline_run->after[r][k],
                         "M %d, %d ahead%s: rank %d's batch %d", M, ahead,
                         takes ? ", taken" : "", r, k);
        free(x);
      }
    free(inline_run);
  }
}

/* The warm-up fit of a run with compute that follows len^2 (+-4 %): the
 * mean relative error of its fit. */
static double fit_error_of(sync_kind_t sync, int M, int ahead, int takes) {
  static char micro[16];
  nsaid = 0;
  run_t *x = run_new(4, 1, 20);
  x->sync = sync;
  x->micro = M;
  x->ahead = ahead;
  x->takes = takes;
  x->jitter = 0.04;
  timed(x);
  snprintf(micro, sizeof micro, "%d", M);
  set_env(0, "DPSHIM_WARMUP_ITERS", "2-7");
  set_env(1, "DPSHIM_MICRO_BATCHES", micro);
  run_go(x);
  for (int r = 0; r < x->P; r++)
    cr_assert(x->fitted[r], "%d ahead: rank %d did not fit", ahead, r);
  cr_assert_gt(x->applied[0], 0, "%d ahead: nothing applied", ahead);
  double error = x->fit_error[0];
  free(x);
  return error;
}

/* A fit made while balancing ahead is made on the steps' own batches:
 * consumed at the syncs (a loader thread of the trainer's) or taken (the
 * steps then from the takes too, where the sync is hidden), within 1.5x
 * the inline fit's error. */
Test(shim_core, a_fit_ahead_is_as_good_as_inline) {
  for (int M = 1; M <= 2; M++) {
    double seen = fit_error_of(SYNC_SEEN, M, 0, 0);
    double hidden = fit_error_of(SYNC_HIDDEN, M, 0, 0);
    cr_assert_gt(seen, 0, "the jitter leaves no error to compare");
    for (int ahead = 1; ahead <= 2; ahead++) {
      double at_syncs = fit_error_of(SYNC_SEEN, M, ahead, 0);
      double taken = fit_error_of(SYNC_SEEN, M, ahead, 1);
      double steps = fit_error_of(SYNC_HIDDEN, M, ahead, 1);
      cr_assert_leq(at_syncs, 1.5 * seen, "M %d, %d ahead: %g vs %g", M,
                    ahead, at_syncs, seen);
      cr_assert_leq(taken, 1.5 * seen, "M %d, %d ahead, taken: %g vs %g", M,
                    ahead, taken, seen);
      cr_assert_leq(steps, 1.5 * hidden, "M %d, %d ahead, hand-off steps: "
                    "%g vs %g", M, ahead, steps, hidden);
    }
  }
}

/* A loader thread of the trainer's own in hand-off steps: nothing says
 * which step consumed which batch, so no fit, said once; still balanced. */
Test(shim_core, loader_thread_handoffs_in_handoff_steps_settle_without_fit) {
  run_t *x = run_new(4, 1, 12);
  x->main_thread = 0;
  x->sync = SYNC_HIDDEN;
  run_go(x);
  for (int r = 0; r < x->P; r++) cr_assert(!x->fitted[r]);
  cr_assert_gt(x->applied[0], 0, "a loader thread's hand-offs are balanced");
  cr_assert_eq(said_with("loader thread", "no warm-up fit"), 1);
  free(x);
}

/* The same loader with its syncs seen: its batches are consumed at the
 * syncs, so it fits as inline and balances after; every step logged. */
Test(shim_core, loader_thread_handoffs_fit_at_the_syncs) {
  char path[] = "/tmp/dpshim-core-thread-XXXXXX";
  temp_path(path);
  run_t *x = run_new(4, 1, 12);
  x->main_thread = 0;
  x->log = path;
  timed(x);
  run_go(x);
  all_ranks(x, DPSHIM__STEP_SYNC, 0);
  cr_assert_gt(x->applied[0], 0);
  cr_assert_eq(said_with("no warm-up fit", NULL), 0);
  cr_assert_eq(count_lines(path), x->calls);
  unlink(path);
  free(x);
}

/* Packs of equal tokens and samples, the compute per token only in the
 * warm-up and falling while the slowest rank's len^2 grows (something
 * else slowed the first steps): the step-time fit has no term above
 * linear, under which no plan changes anything. The step times varied,
 * so it refits from more steps, finds what len^2 costs from the warm-up's
 * end on and applies plans; the linear model alone predicted those steps
 * within its refit bound and was kept. */
Test(shim_core, a_fit_that_changes_no_plan_is_refitted) {
  run_t *x = run_new(4, 1, 30);
  x->sync = SYNC_HIDDEN;
  x->equal_packs = 1;
  x->trend = 0.02;
  timed(x);
  x->late_call = 1;
  x->late_len = 3000;
  x->linear_until = 7;
  set_env(0, "DPSHIM_WARMUP_ITERS", "2-6");
  set_env(1, "DPSHIM_TRIGGER_THRESHOLD", "0");
  run_go(x);
  cr_assert_eq(said_with("no term above linear", "refitting"), 1);
  all_ranks(x, DPSHIM__STEP_HANDOFF, 1);
  cr_assert_gt(x->model[0].a, 0, "the refit found no len^2 cost");
  cr_assert_eq(x->stuck[0], 0);
  cr_assert_gt(x->applied[0], 0, "nothing applied after the refit");
  free(x);
}
