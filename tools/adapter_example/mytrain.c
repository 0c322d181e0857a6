/* mytrain: a tiny data-parallel MPI trainer over libmyload.so.
 *
 * It includes no dpshim header. Each step: one pack through myload_next()
 * (a call into another shared object, which a preloaded adapter can
 * interpose), an emulated compute of a*sum(len^2) + b*sum(len) + a patch
 * cost, then a gradient MPI_Allreduce. At the end rank 0 prints one JSON
 * line:
 *
 *   {"steps":10,"ranks":4,"samples":412,"consumed_digest":"...",
 *    "check_errors":0}
 *
 * The digest is a sum over every consumed (step, sample, content), so it
 * does not depend on which rank consumed a sample: balancing must leave it
 * unchanged. check_errors counts samples that differ from what their id
 * implies, ids consumed twice in a step, and consumed != produced.
 *
 *   mpirun -np 4 mytrain [--steps N] [--seed S] [--time-scale X]
 *                         [--pack-tokens N]
 */
#include <errno.h>
#include <inttypes.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../stepids.h"
#include "../timeutil.h"
#include "myload.h"

/* Emulated cost units: attention len^2 per sample, linear work per token
 * and per patch (8000 tokens is where attention and linear cost meet). At
 * 3e-11 s a unit a 32768-token pack takes ~10-40 ms. */
#define LINEAR_COST 8000.0
#define PATCH_COST 8000.0
#define SECONDS_PER_UNIT 3e-11
#define GRAD_FLOATS 4096

typedef struct opts {
  int64_t steps, pack_tokens;
  uint64_t seed;
  double time_scale;
} opts_t;

/* What a rank consumed: (step, id) pairs, for the duplicate check. */
typedef struct ledger {
  uint64_t *pairs;
  int64_t n, cap;
  uint64_t digest;
  int64_t errors;
} ledger_t;

/* ---- small helpers ------------------------------------------------------- */

static uint64_t mix64(uint64_t z) { /* splitmix64's finaliser */
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
  return z ^ (z >> 31);
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
  return h;
}

static void die(const char *what) {
  fprintf(stderr, "mytrain: %s\n", what);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

/* ---- options ------------------------------------------------------------- */

static int parse_number(const char *v, double min, double *out) {
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (end == v || *end || errno || !(x >= min)) return -1;
  *out = x;
  return 0;
}

/* 0, or -1 with a message (before MPI_Init: every rank says it). */
static int parse_args(int argc, char **argv, opts_t *o) {
  *o = (opts_t){.steps = 10, .pack_tokens = 32768, .seed = 1,
                .time_scale = 1.0};
  for (int i = 1; i < argc; i++) {
    double x;
    const char *name = argv[i];
    if (i + 1 >= argc || parse_number(argv[i + 1], 0, &x) < 0) {
      fprintf(stderr, "mytrain: %s: expected a number >= 0 after it\n",
              name);
      return -1;
    }
    i++;
    if (!strcmp(name, "--steps") && x >= 1) o->steps = (int64_t)x;
    else if (!strcmp(name, "--seed")) o->seed = (uint64_t)x;
    else if (!strcmp(name, "--time-scale")) o->time_scale = x;
    else if (!strcmp(name, "--pack-tokens") && x >= 2)
      o->pack_tokens = (int64_t)x;
    else {
      fprintf(stderr, "mytrain: unknown or out-of-range option %s\n", name);
      return -1;
    }
  }
  return 0;
}

/* ---- one step ------------------------------------------------------------ */

static double emulated_seconds(const myload_batch_t *b, double scale) {
  double units = 0;
  for (int32_t i = 0; i < b->nsamples; i++) {
    double len = b->cu_seqlens[i + 1] - b->cu_seqlens[i];
    units += len * len + LINEAR_COST * len;
  }
  units += PATCH_COST * b->patch_offsets[b->nsamples];
  return units * SECONDS_PER_UNIT * scale;
}

/* Hash of the sample's bytes as received, whatever rank they came from. */
static uint64_t content_hash(const myload_batch_t *b, int32_t i) {
  int32_t at = b->cu_seqlens[i], len = b->cu_seqlens[i + 1] - at;
  int32_t pat = b->patch_offsets[i], np = b->patch_offsets[i + 1] - pat;
  uint64_t h = 1469598103934665603ull;
  h = fnv(h, b->input_ids + at, (size_t)len * sizeof *b->input_ids);
  h = fnv(h, b->position_ids + at, (size_t)len * sizeof *b->position_ids);
  return fnv(h, b->patches + (size_t)pat * MYLOAD_PATCH_DIM,
             (size_t)np * MYLOAD_PATCH_DIM * sizeof *b->patches);
}

static void consume(ledger_t *led, const myload_t *l, const myload_batch_t *b,
                    int64_t step) {
  if (led->n + b->nsamples > led->cap) {
    led->cap = 2 * (led->n + b->nsamples);
    size_t bytes = 2 * (size_t)led->cap * sizeof *led->pairs;
    led->pairs = realloc(led->pairs, bytes);
    if (!led->pairs) die("out of memory for the ledger");
  }
  for (int32_t i = 0; i < b->nsamples; i++) {
    uint64_t id = b->sample_ids[i];
    if (!myload_sample_intact(l, b, i)) led->errors++;
    uint64_t where = mix64(id ^ mix64((uint64_t)step));
    led->digest += mix64(content_hash(b, i) ^ where);
    led->pairs[2 * led->n] = (uint64_t)step;
    led->pairs[2 * led->n + 1] = id;
    led->n++;
  }
}

static void step(myload_t *l, ledger_t *led, const opts_t *o, int64_t s,
                 float *grad) {
  myload_batch_t *b = myload_next(l);
  double t1 = dpshim__tool_now_s();
  if (!b) die("myload_next returned no batch");
  consume(led, l, b, s);
  dpshim__tool_sleep_until(t1 + emulated_seconds(b, o->time_scale));
  MPI_Allreduce(MPI_IN_PLACE, grad, GRAD_FLOATS, MPI_FLOAT, MPI_SUM,
                MPI_COMM_WORLD);
}

/* ---- the end: checks across ranks, one JSON line ------------------------ */

/* Reduce, not Allreduce: only rank 0 prints, and an all-reduce is what a
 * balancer takes for a step's gradient sync. */
static void report(const ledger_t *led, const myload_t *l, const opts_t *o,
                   int rank, int size) {
  int64_t dups = stepids_duplicates(led->pairs, led->n, MPI_COMM_WORLD);
  if (dups < 0) die("out of memory for the duplicate check");
  int64_t mine[3] = {led->errors, led->n, myload_produced(l)}, sum[3];
  uint64_t digest = 0;
  MPI_Reduce(mine, sum, 3, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Reduce(&led->digest, &digest, 1, MPI_UINT64_T, MPI_SUM, 0,
             MPI_COMM_WORLD);
  if (rank != 0) return;
  int64_t errors = sum[0] + dups + (sum[1] != sum[2]);
  if (errors)
    fprintf(stderr, "mytrain: %" PRId64 " samples not intact, %" PRId64
            " consumed twice in a step, %" PRId64 " consumed of %" PRId64
            " produced\n", sum[0], dups, sum[1], sum[2]);
  printf("{\"steps\":%" PRId64 ",\"ranks\":%d,\"samples\":%" PRId64
         ",\"consumed_digest\":\"%016" PRIx64 "\",\"check_errors\":%" PRId64
         "}\n", o->steps, size, sum[1], digest, errors);
  fflush(stdout);
}

static myload_t *open_loader(const opts_t *o, int rank, int size) {
  myload_config_t cfg = myload_config_default();
  cfg.pack_tokens = o->pack_tokens;
  if (cfg.max_len > cfg.pack_tokens) cfg.max_len = cfg.pack_tokens;
  cfg.seed = o->seed;
  cfg.slot = rank;
  cfg.slots = size;
  char err[256] = "";
  myload_t *l = myload_open(&cfg, err, sizeof err);
  if (!l) die(err);
  return l;
}

int main(int argc, char **argv) {
  opts_t o;
  if (parse_args(argc, argv, &o) < 0) return 2;
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  myload_t *l = open_loader(&o, rank, size);
  static float grad[GRAD_FLOATS];
  ledger_t led = {0};
  for (int64_t s = 0; s < o.steps; s++) step(l, &led, &o, s, grad);
  report(&led, l, &o, rank, size);
  free(led.pairs);
  myload_close(l);
  MPI_Finalize();
  return 0;
}
