/* handoff_cases: an MPI program that hands its own packed batches to
 * dpshim_balance_batch() and injects one fault, for check_handoff.py.
 *
 *   LD_PRELOAD=libdpshim.so mpirun -x LD_PRELOAD -x DPSHIM_VLM_BALANCE=1 \
 *       handoff_cases --case fields-order --bad-rank 1 --at 6 --steps 8
 *   mpirun handoff_cases --plain ...      # the same run, hand-off a no-op
 *
 * It does not link libdpshim.so: dpshim_balance_batch() is looked up at run
 * time (dlsym(RTLD_DEFAULT)), so it is the preloaded shim's, as an adapter
 * would see it. Without the preload it says so and exits 1, unless --plain
 * makes the hand-off a no-op: that run is the reference digest.
 *
 * Each of --steps steps: draw a batch (tokens and labels token-aligned via
 * cu_seqlens, image patches with their own offsets, one uint64 id per
 * sample; every payload derived from the id, lengths uneven across ranks so
 * that plans apply), hand it off, check every sample held, "compute" (sleep
 * a cost of the lengths, so that the shim's warm-up fit has a signal), then
 * MPI_Allreduce one double: the gradient sync that ends a step.
 *
 * Rank 0 prints one JSON line:
 *   {"samples":S,"digest":"hex","rc":[rank 0's rc per call],
 *    "rc_all":[[rc per call] per rank],"corrupt":C,"not_intact":I,
 *    "changed":H}
 * samples and digest sum, over every call and rank, the samples held after
 * the hand-off (a call that passed NULL holds nothing): balancing only moves
 * samples within a call, so the sums do not depend on it. corrupt counts
 * = I + H: I samples not intact after a hand-off, and H differences between
 * a rank's batch (or its description) before and after the faulty call K, on
 * every rank of the bad rank's DP group: on error the shim must leave each
 * batch as it was.
 *
 * --case thread-level prints {"required":L,"provided":P,"query":Q} instead.
 *
 * --ahead: the hand-off goes through dpshim_ahead_next() (<dpshim/ahead.h>),
 * as an adapter that allows balancing ahead: batches are drawn and handed
 * off in fetch(), on the shim's thread, each into a slot of its own, and
 * the step consumes what the call returns. --case ends-early: the bad
 * rank's loader ends at call K (fetch() returns NULL from then on); every
 * call from K on must fail on every rank of its group, batches untouched.
 */
#include <dlfcn.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dpshim/ahead.h"
#include "dpshim/batch.h"
#include "hash.h"

#define CAP_SAMPLES 64
#define CAP_TOKENS 32768
#define MAX_PATCHES 3 /* per sample */
#define CAP_PATCHES (CAP_SAMPLES * MAX_PATCHES)
#define PATCH_WORDS 4
#define MAX_STEPS 64
#define NFIELDS 4
#define HUGE_CAPACITY 2147484000LL /* just past what int32 offsets hold */

typedef int (*balance_fn)(dpshim_batch_t *);
typedef void *(*ahead_fn)(dpshim_fetch_t, void *);

typedef enum {
  C_NONE, C_NULL_BATCH, C_NULL_CU, C_ABSURD_N, C_FIELDS_ORDER,
  C_FIELD_RENAMED, C_HUGE_CAPACITY, C_ENDS_EARLY, C_AFTER_FINALIZE,
  C_NO_HANDOFF, C_THREAD_LEVEL, C_COUNT
} case_t;

static const char *const case_names[C_COUNT] = {
    "none", "null-batch", "null-cu-seqlens", "absurd-nsamples",
    "fields-order", "field-renamed", "huge-capacity", "ends-early",
    "after-finalize", "no-handoff", "thread-level"};

typedef struct opts {
  case_t kase;
  int bad_rank, at, steps, required, plain, ahead;
} opts_t;

/* One rank's packed batch, as a loader would hold it. */
typedef struct batch {
  int32_t n;
  int32_t cu[CAP_SAMPLES + 1];
  int32_t tokens[CAP_TOKENS], labels[CAP_TOKENS];
  int32_t patch_off[CAP_SAMPLES + 1];
  uint32_t patches[CAP_PATCHES][PATCH_WORDS];
  uint64_t ids[CAP_SAMPLES];
} batch_t;

typedef struct run {
  opts_t o;
  int rank, size, tp, dp, dp_size;
  balance_fn balance;
  ahead_fn ahead_next; /* --ahead */
  int fetched;         /* calls drawn by fetch() */
  uint64_t digest, samples;
  uint64_t broken;  /* samples not intact after a hand-off */
  uint64_t changed; /* differences across a faulty hand-off */
  int rc[MAX_STEPS + DPSHIM_AHEAD_MAX + 1]; /* --ahead fetches past */
} run_t;

static batch_t g_batch;
static batch_t g_slots[DPSHIM_AHEAD_SLOTS]; /* --ahead */

/* ---- options -------------------------------------------------------------- */

static int usage(void) {
  fprintf(stderr, "usage: handoff_cases [--case NAME] [--bad-rank R] "
                  "[--at K] [--steps N] [--required L] [--plain] "
                  "[--ahead]\ncases:");
  for (int c = 0; c < C_COUNT; c++) fprintf(stderr, " %s", case_names[c]);
  fprintf(stderr, "\n");
  return 2;
}

static int parse_case(const char *s, case_t *out) {
  for (int c = 0; c < C_COUNT; c++)
    if (strcmp(s, case_names[c]) == 0) {
      *out = (case_t)c;
      return 0;
    }
  return -1;
}

static int parse_opts(int argc, char **argv, opts_t *o) {
  *o = (opts_t){C_NONE, 1, 3, 8, 0, 0, 0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--plain") == 0) { o->plain = 1; continue; }
    if (strcmp(a, "--ahead") == 0) { o->ahead = 1; continue; }
    if (!v) return -1;
    i++;
    if (strcmp(a, "--case") == 0) { if (parse_case(v, &o->kase)) return -1; }
    else if (strcmp(a, "--bad-rank") == 0) o->bad_rank = atoi(v);
    else if (strcmp(a, "--at") == 0) o->at = atoi(v);
    else if (strcmp(a, "--steps") == 0) o->steps = atoi(v);
    else if (strcmp(a, "--required") == 0) o->required = atoi(v);
    else return -1;
  }
  return o->steps >= 0 && o->steps <= MAX_STEPS ? 0 : -1;
}

/* ---- samples: everything derived from the id ------------------------------ */

static uint64_t mix(uint64_t x) { /* splitmix64's finaliser */
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* The call, the drawing DP index and whether that rank's draw is the heavy
 * one are in the id, so a sample can be checked wherever it ends up. */
static uint64_t make_id(int call, int dp, int heavy, int i) {
  return (uint64_t)call << 40 | (uint64_t)dp << 20 | (uint64_t)heavy << 19 |
         (uint64_t)i;
}

static int id_call(uint64_t id) { return (int)(id >> 40); }

/* One rank per call draws long samples: uneven costs, so plans apply. */
static int32_t len_of(uint64_t id) {
  return id >> 19 & 1 ? 256 + (int32_t)(mix(id) % 768)
                      : 16 + (int32_t)(mix(id) % 112);
}

static int32_t npatches_of(uint64_t id) {
  return (int32_t)(mix(id ^ 0x5bd1e995ull) % (MAX_PATCHES + 1));
}

static int32_t token_of(uint64_t id, int32_t j) {
  return (int32_t)(mix(id * 0x100000001b3ull + (uint64_t)j) >> 33);
}

static int32_t label_of(uint64_t id, int32_t j) {
  return (int32_t)(mix(~id + 7 * (uint64_t)j) >> 33);
}

static uint32_t patch_of(uint64_t id, int32_t k, int w) {
  return (uint32_t)(mix(id ^ ((uint64_t)k << 48 | (uint64_t)w << 56)) >> 32);
}

static void put_sample(batch_t *b, uint64_t id) {
  int32_t i = b->n, t = b->cu[i], p = b->patch_off[i];
  int32_t len = len_of(id), np = npatches_of(id);
  b->ids[i] = id;
  for (int32_t j = 0; j < len; j++) {
    b->tokens[t + j] = token_of(id, j);
    b->labels[t + j] = label_of(id, j);
  }
  for (int32_t k = 0; k < np; k++)
    for (int w = 0; w < PATCH_WORDS; w++) b->patches[p + k][w] = patch_of(id, k, w);
  b->cu[i + 1] = t + len;
  b->patch_off[i + 1] = p + np;
  b->n = i + 1;
}

/* TP peers (same DP index) draw the same batch, as the shim requires. */
static void draw(batch_t *b, const run_t *r, int call) {
  int heavy = (r->dp + call) % r->dp_size == 0;
  int n = 6 + (int)(mix((uint64_t)call << 32 | (uint64_t)r->dp) % 6);
  b->n = 0;
  b->cu[0] = b->patch_off[0] = 0;
  for (int i = 0; i < n; i++) put_sample(b, make_id(call, r->dp, heavy, i));
}

/* ---- checks --------------------------------------------------------------- */

/* Offsets and counts the batch's arrays can hold; else nothing is read. */
static int layout_sane(const batch_t *b) {
  if (b->n < 0 || b->n > CAP_SAMPLES || b->cu[0] != 0 || b->patch_off[0] != 0)
    return 0;
  for (int32_t i = 0; i < b->n; i++)
    if (b->cu[i + 1] < b->cu[i] || b->patch_off[i + 1] < b->patch_off[i])
      return 0;
  return b->cu[b->n] <= CAP_TOKENS && b->patch_off[b->n] <= CAP_PATCHES;
}

static int sample_intact(const batch_t *b, int32_t i, int call) {
  uint64_t id = b->ids[i];
  int32_t t = b->cu[i], p = b->patch_off[i];
  if (id_call(id) != call || b->cu[i + 1] - t != len_of(id) ||
      b->patch_off[i + 1] - p != npatches_of(id))
    return 0;
  for (int32_t j = 0; j < len_of(id); j++)
    if (b->tokens[t + j] != token_of(id, j) ||
        b->labels[t + j] != label_of(id, j))
      return 0;
  for (int32_t k = 0; k < npatches_of(id); k++)
    for (int w = 0; w < PATCH_WORDS; w++)
      if (b->patches[p + k][w] != patch_of(id, k, w)) return 0;
  return 1;
}

/* What sample i holds, wherever it sits: its id and every row of it. */
static uint64_t sample_hash(const batch_t *b, int32_t i, int call) {
  int32_t t = b->cu[i], len = b->cu[i + 1] - t;
  int32_t p = b->patch_off[i], np = b->patch_off[i + 1] - p;
  uint64_t h = dpshim__fnv(DPSHIM__FNV_SEED, &call, sizeof call);
  h = dpshim__fnv(h, &b->ids[i], sizeof b->ids[i]);
  h = dpshim__fnv(h, &len, sizeof len);
  h = dpshim__fnv(h, b->tokens + t, (size_t)len * sizeof *b->tokens);
  h = dpshim__fnv(h, b->labels + t, (size_t)len * sizeof *b->labels);
  h = dpshim__fnv(h, &np, sizeof np);
  return dpshim__fnv(h, b->patches + p, (size_t)np * sizeof b->patches[0]);
}

/* Per-sample hashes into out[0 .. b->n); -1 when the layout is broken. */
static int hash_all(const batch_t *b, int call, uint64_t *out) {
  if (!layout_sane(b)) return -1;
  for (int32_t i = 0; i < b->n; i++) out[i] = sample_hash(b, i, call);
  return b->n;
}

/* Differences between the batch before and after a failed call. */
static uint64_t count_changes(const uint64_t *before, int nb,
                              const uint64_t *after, int na) {
  if (na < 0) return (uint64_t)(nb > 0 ? nb : 1);
  int common = na < nb ? na : nb;
  uint64_t diff = (uint64_t)(na > nb ? na - nb : nb - na);
  for (int i = 0; i < common; i++) diff += before[i] != after[i];
  return diff;
}

/* Intact samples go into the digest; others count as corrupt. A few are
 * named on stderr, so that a failure says which. */
static void account(run_t *r, const batch_t *b, int call) {
  static int named;
  if (!layout_sane(b)) {
    fprintf(stderr, "handoff_cases: rank %d call %d: batch layout broken "
                    "(n=%d)\n", r->rank, call, (int)b->n);
    r->broken++;
    return;
  }
  for (int32_t i = 0; i < b->n; i++) {
    if (!sample_intact(b, i, call)) {
      r->broken++;
      if (named++ < 5)
        fprintf(stderr, "handoff_cases: rank %d call %d: sample %d (id "
                        "%#llx) is not intact\n", r->rank, call, (int)i,
                (unsigned long long)b->ids[i]);
    }
    r->digest += sample_hash(b, i, call);
    r->samples++;
  }
}

/* ---- the hand-off ----------------------------------------------------------- */

static int is_fault_case(case_t c) {
  return c >= C_NULL_BATCH && c <= C_ENDS_EARLY;
}

/* The hand-off that must fail and leave this rank's batch as it was: the
 * faulty call (from it on where a loader ends early), in the bad rank's
 * DP group (every group for huge-capacity, where every rank is bad). A DP
 * group is the ranks of one tp index. */
static int watched_here(const run_t *r, int call) {
  if (!is_fault_case(r->o.kase) || call > r->o.steps ||
      (r->o.kase == C_ENDS_EARLY ? call < r->o.at : call != r->o.at))
    return 0;
  return r->o.kase == C_HUGE_CAPACITY ||
         r->rank % r->tp == r->o.bad_rank % r->tp;
}

static int faulty_here(const run_t *r, int call) {
  return watched_here(r, call) &&
         (r->o.kase == C_HUGE_CAPACITY || r->rank == r->o.bad_rank);
}

static void describe(batch_t *b, dpshim_batch_t *db, dpshim_field_t *f) {
  f[0] = (dpshim_field_t){"tokens", b->tokens, sizeof *b->tokens, b->cu,
                          CAP_TOKENS};
  f[1] = (dpshim_field_t){"labels", b->labels, sizeof *b->labels, b->cu,
                          CAP_TOKENS};
  f[2] = (dpshim_field_t){"patches", b->patches, sizeof b->patches[0],
                          b->patch_off, CAP_PATCHES};
  f[3] = (dpshim_field_t){"ids", b->ids, sizeof *b->ids, NULL, CAP_SAMPLES};
  *db = (dpshim_batch_t){b->n, CAP_SAMPLES, b->cu, NFIELDS, f, NULL};
}

/* The fault, on this rank's description of the batch; returns what to
 * pass. tokens and labels have the same kind and row size, so only their
 * names tell a swapped order apart. */
static dpshim_batch_t *inject(case_t c, dpshim_batch_t *db, dpshim_field_t *f) {
  dpshim_field_t t = f[0];
  switch (c) {
  case C_NULL_BATCH: return NULL;
  case C_NULL_CU: db->cu_seqlens = NULL; break;
  case C_ABSURD_N: db->nsamples = 1 << 30; break;
  case C_FIELDS_ORDER: f[0] = f[1]; f[1] = t; break;
  case C_FIELD_RENAMED: f[1].name = "targets"; break;
  case C_HUGE_CAPACITY: f[0].capacity_rows = HUGE_CAPACITY; break;
  default: break;
  }
  return db;
}

static int same_field(const dpshim_field_t *a, const dpshim_field_t *b) {
  return a->name == b->name && a->data == b->data &&
         a->row_bytes == b->row_bytes && a->offsets == b->offsets &&
         a->capacity_rows == b->capacity_rows;
}

/* Whether the shim left the description itself as it was passed. */
static int same_description(const dpshim_batch_t *a, const dpshim_field_t *fa,
                            const dpshim_batch_t *b) {
  if (a->nsamples != b->nsamples || a->capacity_samples != b->capacity_samples ||
      a->cu_seqlens != b->cu_seqlens || a->nfields != b->nfields ||
      a->fields != b->fields)
    return 0;
  for (int f = 0; f < NFIELDS; f++)
    if (!same_field(&fa[f], &b->fields[f])) return 0;
  return 1;
}

static int plain_balance(dpshim_batch_t *batch) {
  return batch ? 0 : DPSHIM_EINVAL;
}

/* At a faulty call every batch of the group must come back as it went in. */
static void handoff(run_t *r, batch_t *b, int call) {
  static uint64_t before[CAP_SAMPLES], after[CAP_SAMPLES];
  dpshim_field_t f[NFIELDS], saved_f[NFIELDS];
  dpshim_batch_t db, saved;
  int watched = watched_here(r, call);
  int32_t n = b->n;
  describe(b, &db, f);
  dpshim_batch_t *pass = faulty_here(r, call) ? inject(r->o.kase, &db, f) : &db;
  saved = db;
  memcpy(saved_f, f, sizeof f);
  int nb = hash_all(b, call, before);
  r->rc[call - 1] = r->balance(pass);
  if (watched && pass && !same_description(&saved, saved_f, &db)) {
    fprintf(stderr, "handoff_cases: rank %d call %d: the faulty hand-off "
                    "changed the batch description\n", r->rank, call);
    r->changed++;
  }
  int32_t back = pass ? db.nsamples : n;
  /* An absurd nsamples handed back untouched: the real count is ours. */
  b->n = back == saved.nsamples && saved.nsamples != n ? n : back;
  if (watched) r->changed += count_changes(before, nb, after,
                                           hash_all(b, call, after));
  if (pass && !r->o.ahead) account(r, b, call);
}

/* --ahead: the adapter's fetch(), on the shim's thread; the step accounts
 * for what it consumes (batches fetched past the last step are not). */
static void *fetch(void *ctx, int slot) {
  run_t *r = ctx;
  int call = ++r->fetched;
  if (r->o.kase == C_ENDS_EARLY && r->rank == r->o.bad_rank &&
      call >= r->o.at)
    return NULL;
  batch_t *b = slot < 0 ? &g_batch : &g_slots[slot];
  draw(b, r, call);
  handoff(r, b, call);
  return b;
}

/* --plain --ahead: the batch, fetched in the call. */
static void *plain_ahead(dpshim_fetch_t f, void *ctx) { return f(ctx, -1); }

/* ---- one run ---------------------------------------------------------------- */

static void compute(const batch_t *b) {
  double len2 = 0, len = 0;
  if (layout_sane(b))
    for (int32_t i = 0; i < b->n; i++) {
      double l = b->cu[i + 1] - b->cu[i];
      len2 += l * l;
      len += l;
    }
  double s = 5e-4 + 4e-9 * len2 + 2e-7 * len;
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

static void step(run_t *r, int call) {
  double grad = 1.0;
  batch_t *b = &g_batch;
  if (r->o.ahead) {
    b = r->ahead_next(fetch, r);
    if (b) account(r, b, call);
    else r->rc[call - 1] = DPSHIM_EINVAL; /* this rank's loader ended */
  } else {
    draw(b, r, call);
    handoff(r, b, call);
  }
  if (b) compute(b);
  MPI_Allreduce(MPI_IN_PLACE, &grad, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
}

static void print_rcs(const int *rc, int n) {
  printf("[");
  for (int k = 0; k < n; k++) printf("%s%d", k ? "," : "", rc[k]);
  printf("]");
}

/* Not a sync op of the shim's (MPI_Reduce, MPI_Gather): no step ends. */
static void report(const run_t *r) {
  uint64_t mine[4] = {r->samples, r->digest, r->broken, r->changed};
  uint64_t sum[4] = {0};
  int *all = malloc(sizeof(int) * (size_t)(r->size * r->o.steps + 1));
  MPI_Reduce(mine, sum, 4, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Gather(r->rc, r->o.steps, MPI_INT, all, r->o.steps, MPI_INT, 0,
             MPI_COMM_WORLD);
  if (r->rank == 0) {
    printf("{\"samples\":%llu,\"digest\":\"%016llx\",\"rc\":",
           (unsigned long long)sum[0], (unsigned long long)sum[1]);
    print_rcs(r->rc, r->o.steps);
    printf(",\"rc_all\":[");
    for (int q = 0; q < r->size; q++) {
      fputs(q ? "," : "", stdout);
      print_rcs(all + q * r->o.steps, r->o.steps);
    }
    printf("],\"corrupt\":%llu,\"not_intact\":%llu,\"changed\":%llu}\n",
           (unsigned long long)(sum[2] + sum[3]), (unsigned long long)sum[2],
           (unsigned long long)sum[3]);
    fflush(stdout);
  }
  free(all);
}

/* The shim's, when preloaded; --plain: a no-op. */
static balance_fn find_balance(int plain) {
  balance_fn fn = plain_balance;
  void *sym = plain ? NULL : dlsym(RTLD_DEFAULT, "dpshim_balance_batch");
  if (sym) memcpy(&fn, &sym, sizeof sym); /* no void * -> fn cast */
  return plain || sym ? fn : NULL;
}

/* DP index from the shim's own variable: tp fastest (cp = pp = 1 here). */
static int setup(run_t *r) {
  const char *tp_env = getenv("DPSHIM_TP_SIZE");
  int tp = tp_env ? atoi(tp_env) : 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r->rank);
  MPI_Comm_size(MPI_COMM_WORLD, &r->size);
  if (tp < 1 || r->size % tp != 0) {
    if (r->rank == 0) fprintf(stderr, "handoff_cases: bad DPSHIM_TP_SIZE\n");
    return -1;
  }
  r->tp = tp;
  r->dp = r->rank / tp;
  r->dp_size = r->size / tp;
  r->balance = find_balance(r->o.plain);
  r->ahead_next = plain_ahead;
  void *sym = r->o.plain ? NULL : dlsym(RTLD_DEFAULT, "dpshim_ahead_next");
  if (sym) memcpy(&r->ahead_next, &sym, sizeof sym);
  if (r->balance && (!r->o.ahead || r->o.plain || sym)) return 0;
  if (r->rank == 0)
    fprintf(stderr, "handoff_cases: dpshim_balance_batch() not found: run "
                    "under LD_PRELOAD=libdpshim.so, or pass --plain\n");
  return -1;
}

/* After MPI_Finalize the shim must return, whatever it says. */
static void call_after_finalize(run_t *r) {
  dpshim_field_t f[NFIELDS];
  dpshim_batch_t db;
  draw(&g_batch, r, r->o.steps + 1);
  describe(&g_batch, &db, f);
  int rc = r->balance(&db);
  printf("{\"rank\":%d,\"after_finalize_rc\":%d}\n", r->rank, rc);
  fflush(stdout);
}

static int run_steps(run_t *r) {
  if (setup(r) < 0) {
    MPI_Finalize();
    return 1;
  }
  for (int call = 1; call <= r->o.steps; call++) step(r, call);
  report(r);
  MPI_Finalize();
  if (r->o.kase == C_AFTER_FINALIZE) call_after_finalize(r);
  return 0;
}

static int thread_level(int *argc, char ***argv, int required) {
  int provided = -1, query = -1, rank = 0;
  MPI_Init_thread(argc, argv, required, &provided);
  MPI_Query_thread(&query);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0)
    printf("{\"required\":%d,\"provided\":%d,\"query\":%d}\n", required,
           provided, query);
  fflush(stdout);
  MPI_Finalize();
  return 0;
}

static int no_handoff(int *argc, char ***argv) {
  double grad = 1.0;
  MPI_Init(argc, argv);
  MPI_Allreduce(MPI_IN_PLACE, &grad, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize();
  return 0;
}

int main(int argc, char **argv) {
  static run_t r;
  if (parse_opts(argc, argv, &r.o) < 0) return usage();
  if (r.o.kase == C_THREAD_LEVEL)
    return thread_level(&argc, &argv, r.o.required);
  if (r.o.kase == C_NO_HANDOFF) return no_handoff(&argc, &argv);
  MPI_Init(&argc, &argv);
  return run_steps(&r);
}
