/* The balance pipeline end to end over the thread mock of the comm seam:
 * depack -> gather -> plan -> exchange -> repack on 1 to 8 ranks.
 *
 * Each rank holds a packed batch of four fields: token-aligned int32 tokens
 * and float weights (offsets = cu_seqlens), one uint64 id per sample (NULL
 * offsets) and 'pixels', 3-byte rows with offsets of their own. Every byte
 * of a sample is a function of its id, so after balancing each sample can be
 * found, counted and checked wherever it landed. Buffers are allocated at
 * exactly their capacity, so a write past one is caught under ASan.
 *
 * The rank threads only record; every assertion runs in the test's thread.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "balance.h"
#include "config.h"
#include "hash.h"
#include "mock_comm.h"
#include "plan_fixture.h"
#include "policy.h"

#define MAXP 8
#define MAXS 64 /* samples one rank may start with */
#define PIX_BYTES 3

/* ---- sample contents: a function of the id -------------------------------- */

static uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static int32_t token_of(uint64_t id, int64_t t) {
  return (int32_t)(uint32_t)mix(id * 0x100000001b3ull + (uint64_t)t);
}

static float weight_of(uint64_t id, int64_t t) {
  return (float)(mix(id ^ ((uint64_t)t << 32) ^ 0x5eedull) % 1000003u) * 0.25f;
}

static unsigned char pixel_of(uint64_t id, int64_t byte) {
  return (unsigned char)mix(id + 0x9e3779b97f4a7c15ull * (uint64_t)(byte + 1));
}

/* Ids: a tag (one per generation of batches), the original rank, the index. */
static uint64_t make_id(uint32_t tag, int rank, int i) {
  return ((uint64_t)tag << 40) | ((uint64_t)rank << 24) | (uint64_t)i;
}
static int id_rank(uint64_t id) { return (int)((id >> 24) & 0xffff); }
static int id_index(uint64_t id) { return (int)(id & 0xffffff); }

/* ---- one rank's batch ------------------------------------------------------ */

typedef struct sample_spec {
  uint64_t id;
  int32_t len, npix;
  uint64_t sum; /* checksum of the sample's rows, taken from the buffers */
} sample_spec_t;

typedef struct caps {
  int32_t samples;
  int64_t tokens, ids, pixels;
} caps_t;

typedef struct rank_batch {
  dpshim_batch_t batch;
  dpshim_field_t fields[4];
  caps_t cap;
  int32_t *cu, *pix_off;
  int32_t *tokens;
  float *weights;
  uint64_t *ids;
  unsigned char *pixels;
  /* The state before balancing, for "untouched" checks. */
  struct {
    dpshim_batch_t batch;
    dpshim_field_t fields[4];
    int32_t *cu, *pix_off, *tokens;
    float *weights;
    uint64_t *ids;
    unsigned char *pixels;
  } snap;
} rank_batch_t;

static void *xalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  cr_assert(p != NULL, "out of memory");
  return p;
}

static void *dup_bytes(const void *p, size_t n) {
  void *q = xalloc(n);
  if (n) memcpy(q, p, n);
  return q;
}

/* Buffers of exactly the capacities, filled with a pattern. */
static void rb_alloc(rank_batch_t *rb, caps_t c) {
  memset(rb, 0, sizeof *rb);
  rb->cap = c;
  size_t off = ((size_t)c.samples + 1) * sizeof(int32_t);
  rb->cu = xalloc(off);
  rb->pix_off = xalloc(off);
  rb->tokens = xalloc((size_t)c.tokens * sizeof(int32_t));
  rb->weights = xalloc((size_t)c.tokens * sizeof(float));
  rb->ids = xalloc((size_t)c.ids * sizeof(uint64_t));
  rb->pixels = xalloc((size_t)c.pixels * PIX_BYTES);
  memset(rb->cu, 0xa5, off);
  memset(rb->pix_off, 0xa5, off);
  memset(rb->tokens, 0xa5, (size_t)c.tokens * sizeof(int32_t));
  memset(rb->weights, 0xa5, (size_t)c.tokens * sizeof(float));
  memset(rb->ids, 0xa5, (size_t)c.ids * sizeof(uint64_t));
  memset(rb->pixels, 0xa5, (size_t)c.pixels * PIX_BYTES);
  rb->fields[0] = (dpshim_field_t){"tokens", rb->tokens, sizeof(int32_t),
                                   rb->cu, c.tokens};
  rb->fields[1] = (dpshim_field_t){"weights", rb->weights, sizeof(float),
                                   rb->cu, c.tokens};
  rb->fields[2] = (dpshim_field_t){"ids", rb->ids, sizeof(uint64_t), NULL,
                                   c.ids};
  rb->fields[3] = (dpshim_field_t){"pixels", rb->pixels, PIX_BYTES,
                                   rb->pix_off, c.pixels};
  rb->batch = (dpshim_batch_t){0, c.samples, rb->cu, 4, rb->fields, NULL};
}

static void rb_free(rank_batch_t *rb) {
  free(rb->cu);
  free(rb->pix_off);
  free(rb->tokens);
  free(rb->weights);
  free(rb->ids);
  free(rb->pixels);
  free(rb->snap.cu);
  free(rb->snap.pix_off);
  free(rb->snap.tokens);
  free(rb->snap.weights);
  free(rb->snap.ids);
  free(rb->snap.pixels);
  memset(rb, 0, sizeof *rb);
}

/* Checksum of sample k of the batch as it is now. */
static uint64_t rb_sample_sum(const rank_batch_t *rb, int32_t k) {
  int32_t t0 = rb->cu[k], t1 = rb->cu[k + 1];
  int32_t p0 = rb->pix_off[k], p1 = rb->pix_off[k + 1];
  uint64_t h = DPSHIM__FNV_SEED;
  h = dpshim__fnv(h, rb->tokens + t0, (size_t)(t1 - t0) * sizeof(int32_t));
  h = dpshim__fnv(h, rb->weights + t0, (size_t)(t1 - t0) * sizeof(float));
  h = dpshim__fnv(h, rb->ids + k, sizeof(uint64_t));
  h = dpshim__fnv(h, rb->pixels + (size_t)p0 * PIX_BYTES,
                  (size_t)(p1 - p0) * PIX_BYTES);
  return h;
}

/* Packs spec[0 .. n) into the batch; sets each spec's checksum. */
static void rb_fill(rank_batch_t *rb, sample_spec_t *spec, int32_t n) {
  rb->cu[0] = rb->pix_off[0] = 0;
  for (int32_t k = 0; k < n; k++) {
    const sample_spec_t *s = &spec[k];
    int32_t t0 = rb->cu[k], p0 = rb->pix_off[k];
    cr_assert_leq(t0 + s->len, rb->cap.tokens);
    cr_assert_leq(p0 + s->npix, rb->cap.pixels);
    for (int32_t t = 0; t < s->len; t++) {
      rb->tokens[t0 + t] = token_of(s->id, t);
      rb->weights[t0 + t] = weight_of(s->id, t);
    }
    for (int32_t b = 0; b < s->npix * PIX_BYTES; b++)
      rb->pixels[(size_t)p0 * PIX_BYTES + (size_t)b] = pixel_of(s->id, b);
    rb->ids[k] = s->id;
    rb->cu[k + 1] = t0 + s->len;
    rb->pix_off[k + 1] = p0 + s->npix;
  }
  rb->batch.nsamples = n;
  for (int32_t k = 0; k < n; k++) spec[k].sum = rb_sample_sum(rb, k);
}

static void rb_snapshot(rank_batch_t *rb) {
  caps_t c = rb->cap;
  size_t off = ((size_t)c.samples + 1) * sizeof(int32_t);
  free(rb->snap.cu);
  free(rb->snap.pix_off);
  free(rb->snap.tokens);
  free(rb->snap.weights);
  free(rb->snap.ids);
  free(rb->snap.pixels);
  rb->snap.batch = rb->batch;
  memcpy(rb->snap.fields, rb->fields, sizeof rb->fields);
  rb->snap.cu = dup_bytes(rb->cu, off);
  rb->snap.pix_off = dup_bytes(rb->pix_off, off);
  rb->snap.tokens = dup_bytes(rb->tokens, (size_t)c.tokens * sizeof(int32_t));
  rb->snap.weights = dup_bytes(rb->weights, (size_t)c.tokens * sizeof(float));
  rb->snap.ids = dup_bytes(rb->ids, (size_t)c.ids * sizeof(uint64_t));
  rb->snap.pixels = dup_bytes(rb->pixels, (size_t)c.pixels * PIX_BYTES);
}

/* NULL when byte for byte as snapshotted, else what changed. */
static const char *rb_changed(const rank_batch_t *rb) {
  caps_t c = rb->cap;
  size_t off = ((size_t)c.samples + 1) * sizeof(int32_t);
  if (memcmp(&rb->batch, &rb->snap.batch, sizeof rb->batch)) return "batch";
  if (memcmp(rb->fields, rb->snap.fields, sizeof rb->fields)) return "fields";
  if (memcmp(rb->cu, rb->snap.cu, off)) return "cu_seqlens";
  if (memcmp(rb->pix_off, rb->snap.pix_off, off)) return "pixel offsets";
  if (memcmp(rb->tokens, rb->snap.tokens, (size_t)c.tokens * sizeof(int32_t)))
    return "tokens";
  if (memcmp(rb->weights, rb->snap.weights, (size_t)c.tokens * sizeof(float)))
    return "weights";
  if (memcmp(rb->ids, rb->snap.ids, (size_t)c.ids * sizeof(uint64_t)))
    return "ids";
  if (memcmp(rb->pixels, rb->snap.pixels, (size_t)c.pixels * PIX_BYTES))
    return "pixels";
  return NULL;
}

/* ---- a group of ranks ------------------------------------------------------ */

typedef struct inst {
  int P;
  dpshim_algo_t algo;
  int64_t step;
  rank_batch_t rb[MAXP];
  int32_t n[MAXP];
  sample_spec_t spec[MAXP][MAXS];
  dpshim__balancer_t *bal[MAXP];
  mock_opts_t opts;
  /* What each rank saw. */
  int rc[MAXP];
  dpshim__balance_report_t rep[MAXP];
  int has_loads[MAXP];
  double load_before[MAXP][MAXP], load_after[MAXP][MAXP];
  double notes[MAXP][MAXP * DPSHIM__NOTES]; /* as each rank received them */
  int gate;                /* the hand-offs ask the ViT gate */
  double meet_s[MAXP];     /* what meeting costs each rank */
  double wire[MAXP];       /* bytes a meeting moves per patch, each rank's */
  int32_t vit_moved[MAXP]; /* each rank's moved forwards in flight */
  mock_stats_t stats;
  int mock_rc;
  int watch; /* the balancer's comm goes through watch_ops (below) */
} inst_t;

static const dpshim_cost_model_t QUADRATIC = {1, 0, 0, 0, 0};

static dpshim__balance_config_t base_config(void) {
  return (dpshim__balance_config_t){.algo = DPSHIM_ALGO_DEFAULT,
                                    .cap_ratio = 0,
                                    .threshold = 0,
                                    .model = QUADRATIC,
                                    .verify = 0};
}

/* Instances not freed yet: a failed assertion leaves the test early, and
 * the suites' fini frees them, so that LeakSanitizer reports real leaks. */
#define MAX_LIVE 8
static inst_t *live[MAX_LIVE];

static void inst_free(inst_t *x);

static void free_live(void) {
  for (int k = 0; k < MAX_LIVE; k++)
    if (live[k]) inst_free(live[k]);
}

static inst_t *inst_new(int P, const dpshim__balance_config_t *cfg) {
  inst_t *x = calloc(1, sizeof *x);
  cr_assert(x != NULL);
  int k = 0;
  while (k < MAX_LIVE && live[k]) k++;
  cr_assert_lt(k, MAX_LIVE, "too many live instances");
  live[k] = x;
  x->P = P;
  x->algo = cfg->algo;
  x->opts = (mock_opts_t){.size = P, .fail_rank = -1};
  for (int r = 0; r < P; r++) {
    x->bal[r] = dpshim__balancer_new(cfg);
    cr_assert(x->bal[r] != NULL);
  }
  return x;
}

static void inst_free_batches(inst_t *x) {
  for (int r = 0; r < x->P; r++) rb_free(&x->rb[r]);
}

static void inst_free(inst_t *x) {
  for (int k = 0; k < MAX_LIVE; k++)
    if (live[k] == x) live[k] = NULL;
  inst_free_batches(x);
  for (int r = 0; r < x->P; r++) dpshim__balancer_free(x->bal[r]);
  free(x);
}

/* Rank r's use of each buffer, from its specs. */
static caps_t use_of(const inst_t *x, int r) {
  caps_t u = {x->n[r], 0, x->n[r], 0};
  for (int32_t i = 0; i < x->n[r]; i++) {
    u.tokens += x->spec[r][i].len;
    u.pixels += x->spec[r][i].npix;
  }
  return u;
}

static caps_t total_use(const inst_t *x) {
  caps_t t = {0, 0, 0, 0};
  for (int r = 0; r < x->P; r++) {
    caps_t u = use_of(x, r);
    t.samples += u.samples;
    t.tokens += u.tokens;
    t.ids += u.ids;
    t.pixels += u.pixels;
  }
  return t;
}

/* Allocates and fills every rank's batch from x->spec and x->n: capacities
 * the group totals (generous), or each rank's own use plus 0 .. slack of
 * each (slack >= 0). Snapshots them. */
static void inst_pack(inst_t *x, int slack, prng_t *g) {
  inst_free_batches(x);
  caps_t all = total_use(x);
  for (int r = 0; r < x->P; r++) {
    caps_t c = all;
    if (slack >= 0) {
      c = use_of(x, r);
      c.samples += (int32_t)prng_range(g, 0, slack);
      c.ids = c.samples + prng_range(g, 0, slack);
      c.tokens += prng_range(g, 0, 8 * slack);
      c.pixels += prng_range(g, 0, 2 * slack);
    }
    rb_alloc(&x->rb[r], c);
    rb_fill(&x->rb[r], x->spec[r], x->n[r]);
    rb_snapshot(&x->rb[r]);
  }
}

/* Allocates and fills every rank's batch with capacities caps[r]. */
static void inst_pack_caps(inst_t *x, const caps_t *caps) {
  inst_free_batches(x);
  for (int r = 0; r < x->P; r++) {
    rb_alloc(&x->rb[r], caps[r]);
    rb_fill(&x->rb[r], x->spec[r], x->n[r]);
    rb_snapshot(&x->rb[r]);
  }
}

/* Sets sample i of rank r. */
static void inst_set(inst_t *x, uint32_t tag, int r, int i, int32_t len,
                     int32_t npix) {
  x->spec[r][i] = (sample_spec_t){make_id(tag, r, i), len, npix, 0};
  if (x->n[r] <= i) x->n[r] = i + 1;
}

/* Random skewed samples: each rank holds min_n .. max_n, lengths up to
 * max_len, one or two "hot" ranks with lengths up to 8x that. */
static void inst_random(inst_t *x, uint32_t tag, prng_t *g, int min_n,
                        int max_n, int32_t max_len) {
  int hot = (int)prng_range(g, 0, x->P - 1);
  int hot2 = prng_range(g, 0, 2) == 0 ? (int)prng_range(g, 0, x->P - 1) : hot;
  for (int r = 0; r < x->P; r++) {
    x->n[r] = 0;
    int n = (int)prng_range(g, min_n, max_n);
    int32_t top = (r == hot || r == hot2) ? 8 * max_len : max_len;
    for (int i = 0; i < n; i++) {
      int32_t len = (int32_t)prng_range(g, 0, top);
      if (prng_range(g, 0, 9) == 0) len = 0; /* empty samples too */
      int32_t npix = prng_range(g, 0, 3) == 0 ? 0 : (int32_t)prng_range(g, 1, 7);
      inst_set(x, tag, r, i, len, npix);
    }
  }
}

/* ---- where the exchange's bytes lie --------------------------------------- */

/* A rank's comm, watched: its exchanges' pieces are checked against its
 * batch's buffers, and every operation goes on to the mock's. */
typedef struct watched {
  dpshim__comm_t comm, *real;
  const rank_batch_t *rb;
  int pieces, outside; /* seen, and lying outside the batch's buffers */
} watched_t;

static watched_t watched[MAXP];

static dpshim__comm_t *real_of(dpshim__comm_t *c) {
  return watched[c->rank].real;
}

static int in_batch(const rank_batch_t *rb, const dpshim__comm_piece_t *p) {
  const unsigned char *b = p->buf;
  for (int f = 0; f < rb->batch.nfields; f++) {
    const dpshim_field_t *fd = &rb->fields[f];
    const unsigned char *d = fd->data;
    if (b >= d && b + p->bytes <= d + (size_t)fd->capacity_rows * fd->row_bytes)
      return 1;
  }
  return 0;
}

static int w_exchange(dpshim__comm_t *c, const dpshim__comm_piece_t *send,
                      size_t nsend, const dpshim__comm_piece_t *recv,
                      size_t nrecv) {
  watched_t *w = &watched[c->rank];
  for (size_t k = 0; k < nsend + nrecv; k++, w->pieces++)
    w->outside += !in_batch(w->rb, k < nsend ? &send[k] : &recv[k - nsend]);
  return w->real->ops->exchange(w->real, send, nsend, recv, nrecv);
}

static int w_reserve(dpshim__comm_t *c, size_t n) {
  return real_of(c)->ops->reserve(real_of(c), n);
}

static int w_allgather(dpshim__comm_t *c, const void *send, size_t bytes,
                       void *recv) {
  return real_of(c)->ops->allgather(real_of(c), send, bytes, recv);
}

static int w_allgatherv(dpshim__comm_t *c, const void *send, void *recv,
                        const size_t *counts) {
  return real_of(c)->ops->allgatherv(real_of(c), send, recv, counts);
}

static int w_max(dpshim__comm_t *c, int64_t *v, int n) {
  return real_of(c)->ops->max(real_of(c), v, n);
}

/* What the balancer calls on its group. */
static const dpshim__comm_ops_t watch_ops = {.allgather = w_allgather,
                                             .allgatherv = w_allgatherv,
                                             .reserve = w_reserve,
                                             .exchange = w_exchange,
                                             .max = w_max};

static dpshim__comm_t *watch(inst_t *x, dpshim__comm_t *comm, int rank) {
  watched_t *w = &watched[rank];
  w->comm = *comm;
  w->comm.ops = &watch_ops;
  w->real = comm;
  w->rb = &x->rb[rank];
  return &w->comm;
}

static void balance_rank(dpshim__comm_t *comm, int rank, void *arg) {
  inst_t *x = arg;
  if (x->watch) comm = watch(x, comm, rank);
  dpshim__balance_report_t *rep = &x->rep[rank];
  double note[DPSHIM__NOTES] = {rank, (double)x->step, -rank, 0.5, 7};
  dpshim__handoff_t ho = {x->step,         1,       note,
                          NULL,            NULL,    x->gate,
                          x->meet_s[rank], x->wire[rank],
                          x->vit_moved[rank], 0};
  x->rc[rank] = dpshim__balance(x->bal[rank], comm, &x->rb[rank].batch, &ho,
                                rep);
  if (rep->notes)
    memcpy(x->notes[rank], rep->notes,
           sizeof(double) * DPSHIM__NOTES * (size_t)x->P);
  /* The load arrays live until the next call: copy them now. */
  x->has_loads[rank] = rep->load_before != NULL;
  if (rep->load_before) {
    memcpy(x->load_before[rank], rep->load_before, sizeof(double) * (size_t)x->P);
    memcpy(x->load_after[rank], rep->load_after, sizeof(double) * (size_t)x->P);
  }
}

static void inst_run(inst_t *x) {
  memset(x->rc, 0x7f, sizeof x->rc);
  x->mock_rc = mock_run_ex(&x->opts, balance_rank, x, &x->stats);
  cr_assert_eq(x->mock_rc, 0, "mock: %s", x->stats.message);
}

/* ---- checks ---------------------------------------------------------------- */

static int same_str(const char *a, const char *b) {
  return a == b || (a && b && !strcmp(a, b));
}

/* Every rank returned the same code and the same report. */
static void assert_same_reports(const inst_t *x) {
  const dpshim__balance_report_t *a = &x->rep[0];
  for (int r = 1; r < x->P; r++) {
    const dpshim__balance_report_t *b = &x->rep[r];
    cr_assert_eq(x->rc[r], x->rc[0], "rank %d returned %d, rank 0 %d", r,
                 x->rc[r], x->rc[0]);
    cr_assert_eq(b->applied, a->applied, "rank %d applied %d, rank 0 %d", r,
                 b->applied, a->applied);
    cr_assert(same_str(b->skip_reason, a->skip_reason),
              "rank %d skip_reason %s, rank 0 %s", r,
              b->skip_reason ? b->skip_reason : "NULL",
              a->skip_reason ? a->skip_reason : "NULL");
    cr_assert_str_eq(b->message, a->message, "rank %d", r);
    cr_assert_eq(b->samples, a->samples);
    cr_assert_eq(b->tokens, a->tokens);
    cr_assert_eq(b->bytes_moved, a->bytes_moved, "rank %d", r);
    cr_assert_eq(b->bytes_total, a->bytes_total, "rank %d", r);
    cr_assert(b->imbalance_before == a->imbalance_before, "rank %d", r);
    cr_assert(b->imbalance_after == a->imbalance_after, "rank %d", r);
    cr_assert(b->lower_bound == a->lower_bound, "rank %d", r);
    cr_assert_eq(x->has_loads[r], x->has_loads[0]);
    if (x->has_loads[0]) {
      cr_assert(!memcmp(x->load_before[r], x->load_before[0],
                        sizeof(double) * (size_t)x->P), "rank %d", r);
      cr_assert(!memcmp(x->load_after[r], x->load_after[0],
                        sizeof(double) * (size_t)x->P), "rank %d", r);
    }
  }
}

static void assert_untouched(const inst_t *x) {
  for (int r = 0; r < x->P; r++) {
    const char *what = rb_changed(&x->rb[r]);
    cr_assert(what == NULL, "rank %d's %s changed although the plan was not "
              "applied (rc %d, skip %s)", r, what, x->rc[r],
              x->rep[r].skip_reason ? x->rep[r].skip_reason : "NULL");
  }
}

static int64_t sample_bytes(const sample_spec_t *s) {
  return (int64_t)s->len * (int64_t)(sizeof(int32_t) + sizeof(float)) +
         (int64_t)sizeof(uint64_t) + (int64_t)s->npix * PIX_BYTES;
}

static const sample_spec_t *spec_of(const inst_t *x, uint64_t id) {
  int r = id_rank(id), i = id_index(id);
  if (r < 0 || r >= x->P || i < 0 || i >= x->n[r]) return NULL;
  if (x->spec[r][i].id != id) return NULL;
  return &x->spec[r][i];
}

/* Each rank's batch is well formed within its capacities; every original
 * sample is found exactly once, with its rows intact. where[r][i] gets the
 * rank holding rank r's original sample i. */
static void assert_consistent(const inst_t *x, int where[MAXP][MAXS]) {
  int seen[MAXP][MAXS];
  memset(seen, 0, sizeof seen);
  for (int r = 0; r < x->P; r++) {
    const rank_batch_t *rb = &x->rb[r];
    const dpshim_batch_t *b = &rb->batch;
    int32_t n = b->nsamples;
    cr_assert(n >= 0 && n <= rb->cap.samples, "rank %d: nsamples %d, cap %d",
              r, n, rb->cap.samples);
    cr_assert_leq(n, rb->cap.ids, "rank %d: %d ids exceed capacity", r, n);
    cr_assert_eq(b->cu_seqlens, rb->cu);
    cr_assert_eq(b->nfields, 4);
    cr_assert_eq(b->capacity_samples, rb->cap.samples);
    cr_assert_eq(rb->cu[0], 0, "rank %d", r);
    cr_assert_eq(rb->pix_off[0], 0, "rank %d", r);
    for (int32_t k = 0; k < n; k++) {
      cr_assert_geq(rb->cu[k + 1], rb->cu[k], "rank %d cu_seqlens[%d]", r, k + 1);
      cr_assert_geq(rb->pix_off[k + 1], rb->pix_off[k], "rank %d pixel offsets", r);
    }
    cr_assert_leq(rb->cu[n], rb->cap.tokens, "rank %d: tokens over capacity", r);
    cr_assert_leq(rb->pix_off[n], rb->cap.pixels, "rank %d: pixels over capacity", r);
    for (int32_t k = 0; k < n; k++) {
      uint64_t id = rb->ids[k];
      const sample_spec_t *s = spec_of(x, id);
      cr_assert(s != NULL, "rank %d sample %d: unknown id %#llx", r, k,
                (unsigned long long)id);
      int orig = id_rank(id), i = id_index(id);
      cr_assert_eq(seen[orig][i], 0, "id %#llx found twice (rank %d)",
                   (unsigned long long)id, r);
      seen[orig][i] = 1;
      where[orig][i] = r;
      int32_t len = rb->cu[k + 1] - rb->cu[k];
      int32_t npix = rb->pix_off[k + 1] - rb->pix_off[k];
      cr_assert_eq(len, s->len, "id %#llx: len %d, expected %d",
                   (unsigned long long)id, len, s->len);
      cr_assert_eq(npix, s->npix, "id %#llx: %d pixel rows, expected %d",
                   (unsigned long long)id, npix, s->npix);
      cr_assert_eq(rb_sample_sum(rb, k), s->sum, "id %#llx: payload changed",
                   (unsigned long long)id);
      int32_t t0 = rb->cu[k], p0 = rb->pix_off[k];
      for (int32_t t = 0; t < len; t++) {
        cr_assert_eq(rb->tokens[t0 + t], token_of(id, t), "id %#llx token %d",
                     (unsigned long long)id, t);
        float w = weight_of(id, t);
        cr_assert(!memcmp(&rb->weights[t0 + t], &w, sizeof w),
                  "id %#llx weight %d", (unsigned long long)id, t);
      }
      for (int32_t q = 0; q < npix * PIX_BYTES; q++)
        cr_assert_eq(rb->pixels[(size_t)p0 * PIX_BYTES + (size_t)q],
                     pixel_of(id, q), "id %#llx pixel byte %d",
                     (unsigned long long)id, q);
    }
  }
  for (int r = 0; r < x->P; r++)
    for (int32_t i = 0; i < x->n[r]; i++)
      cr_assert(seen[r][i], "rank %d's sample %d (id %#llx) is lost", r, i,
                (unsigned long long)x->spec[r][i].id);
}

static double cost_of(int32_t len) {
  return QUADRATIC.a * (double)len * len + QUADRATIC.b * len + QUADRATIC.c;
}

/* The loads the report gives: history + cost of what each rank holds before
 * and after. Also the imbalances, bytes and totals. */
static void assert_numbers(const inst_t *x, const double *history,
                           int where[MAXP][MAXS]) {
  const dpshim__balance_report_t *rep = &x->rep[0];
  double before[MAXP], after[MAXP];
  int64_t moved = 0, total = 0, tokens = 0, samples = 0;
  for (int r = 0; r < x->P; r++) before[r] = after[r] = history ? history[r] : 0;
  for (int r = 0; r < x->P; r++) {
    for (int32_t i = 0; i < x->n[r]; i++) {
      const sample_spec_t *s = &x->spec[r][i];
      int to = where ? where[r][i] : r;
      before[r] += cost_of(s->len);
      after[to] += cost_of(s->len);
      total += sample_bytes(s);
      if (to != r) moved += sample_bytes(s);
      tokens += s->len;
      samples++;
    }
  }
  cr_assert_eq(rep->samples, samples);
  cr_assert(x->has_loads[0], "a solved plan reports its loads");
  cr_assert_eq(rep->tokens, tokens);
  cr_assert_eq(rep->bytes_total, total, "bytes_total %lld, expected %lld",
               (long long)rep->bytes_total, (long long)total);
  for (int r = 0; r < x->P; r++)
    cr_assert(x->load_before[0][r] == before[r],
              "load_before[%d] = %.17g, expected %.17g", r,
              x->load_before[0][r], before[r]);
  double sum = 0, max = 0;
  for (int r = 0; r < x->P; r++) sum += before[r], max = fmax(max, before[r]);
  double imb = sum > 0 ? max / (sum / x->P) - 1 : 0;
  cr_assert(fabs(rep->imbalance_before - imb) <= 1e-12 * (1 + imb),
            "imbalance_before %.17g, expected %.17g", rep->imbalance_before, imb);
  if (!rep->applied) {
    cr_assert_eq(x->stats.ops[MOCK_EXCHANGE], 0, "skipped, yet exchanged");
    return;
  }
  cr_assert_eq(rep->bytes_moved, moved, "bytes_moved %lld, expected %lld",
               (long long)rep->bytes_moved, (long long)moved);
  cr_assert_eq((int64_t)x->stats.alltoallv_moved, moved,
               "the exchange moved %zu bytes between ranks, expected %lld",
               x->stats.alltoallv_moved, (long long)moved);
  /* Samples that stay are kept in place, not sent to their own rank. */
  cr_assert_eq(x->stats.alltoallv_total, x->stats.alltoallv_moved,
               "%zu bytes sent by ranks to themselves",
               x->stats.alltoallv_total - x->stats.alltoallv_moved);
  for (int r = 0; r < x->P; r++)
    cr_assert(x->load_after[0][r] == after[r],
              "load_after[%d] = %.17g, expected %.17g", r, x->load_after[0][r],
              after[r]);
  if (x->algo == DPSHIM_ALGO_DEFAULT) {
    cr_assert_leq(rep->imbalance_after, rep->imbalance_before,
                  "applied a plan that raises the imbalance");
    cr_assert_gt(moved, 0, "applied a plan that moves nothing");
  }
}

/* After an applied plan a rank that sent nothing has no holes: it copies
 * what it received only where its buffers could not take it past their
 * rows (staged), else nothing (exchange.h). */
static void assert_copies(const inst_t *x) {
  for (int r = 0; r < x->P; r++) {
    const rank_batch_t *rb = &x->rb[r];
    int32_t own = 0;
    int64_t received = 0;
    for (int32_t k = 0; k < rb->batch.nsamples; k++) {
      if (id_rank(rb->ids[k]) == r) own++;
      else received += sample_bytes(spec_of(x, rb->ids[k]));
    }
    if (own < x->n[r]) continue; /* it sent: the repack fills holes */
    int64_t want = x->rep[r].staged ? received : 0;
    cr_assert_eq(x->rep[r].repack_bytes, want,
                 "rank %d sent nothing, received %lld bytes (staged %d), "
                 "copied %lld", r, (long long)received, x->rep[r].staged,
                 (long long)x->rep[r].repack_bytes);
  }
}

/* The whole check of one run that returned 0. */
static void assert_ok_run(const inst_t *x, const double *history) {
  int where[MAXP][MAXS];
  assert_same_reports(x);
  cr_assert_eq(x->rc[0], 0, "rc %d: %s", x->rc[0], x->rep[0].message);
  cr_assert_str_eq(x->rep[0].message, "");
  cr_assert(x->rep[0].applied == (x->rep[0].skip_reason == NULL),
            "applied %d with skip_reason %s", x->rep[0].applied,
            x->rep[0].skip_reason ? x->rep[0].skip_reason : "NULL");
  if (!x->rep[0].applied) {
    assert_untouched(x);
    assert_consistent(x, where);
    if (x->has_loads[0]) assert_numbers(x, history, NULL);
    return;
  }
  assert_consistent(x, where);
  assert_copies(x);
  assert_numbers(x, history, where);
}

/* One hand-off of a random batch (lengths up to 30) that every rank must
 * pass: exactly once, consistent, the same report everywhere. */
static void hand_off_random(inst_t *x, uint32_t tag, prng_t *g, int min_n,
                            int max_n, const double *history) {
  inst_random(x, tag, g, min_n, max_n, 30);
  inst_pack(x, -1, g);
  inst_run(x);
  assert_ok_run(x, history);
}

TestSuite(shim_balance, .fini = free_live);
TestSuite(shim_balance_edges, .fini = free_live);

/* ---- the property: every sample exactly once ------------------------------ */

static const int SIZES[] = {1, 2, 3, 4, 8};

/* `count` random instances per group size; returns how many were applied
 * (and of those, how many some rank staged), skipped for capacity, and
 * skipped otherwise. */
static void random_instances(int count, int slack, int verify, int64_t *applied,
                             int64_t *staged, int64_t *capacity,
                             int64_t *other) {
  *applied = *staged = *capacity = *other = 0;
  for (size_t k = 0; k < sizeof SIZES / sizeof *SIZES; k++) {
    int P = SIZES[k];
    for (int seed = 0; seed < count; seed++) {
      prng_t g = {(uint64_t)seed * 7919 + (uint64_t)P};
      dpshim__balance_config_t cfg = base_config();
      cfg.verify = verify;
      switch (seed % 5) { /* vary the solver and the configured cap */
      case 1: cfg.cap_ratio = 1.2; break;
      case 2: cfg.algo = DPSHIM_ALGO_KK; break;
      case 3: cfg.algo = DPSHIM_ALGO_SEED; break;
      case 4: cfg.cap_ratio = 2.5; break;
      default: break;
      }
      inst_t *x = inst_new(P, &cfg);
      x->step = seed;
      inst_random(x, (uint32_t)seed + 1, &g, 1, P == 1 ? 12 : 10, 24);
      inst_pack(x, slack, &g);
      inst_run(x);
      assert_ok_run(x, NULL);
      const char *why = x->rep[0].skip_reason;
      int any_staged = 0;
      for (int r = 0; r < P; r++) any_staged |= x->rep[r].staged;
      *staged += any_staged;
      if (!why) ++*applied;
      else if (!strcmp(why, "capacity")) ++*capacity;
      else ++*other;
      if (P == 1 && cfg.algo == DPSHIM_ALGO_DEFAULT)
        cr_assert(why != NULL, "one rank: nothing to move, yet applied");
      inst_free(x);
    }
  }
}

Test(shim_balance, exactly_once_generous_capacity) {
  int64_t applied, staged, capacity, other;
  random_instances(200, -1, 0, &applied, &staged, &capacity, &other);
  cr_assert_eq(capacity, 0, "capacities hold everything, yet %lld skipped",
               (long long)capacity);
  cr_assert_eq(staged, 0, "room for everything, yet %lld staged",
               (long long)staged);
  /* 4 group sizes above one rank, 200 skewed instances each: most apply. */
  cr_assert_gt(applied, 400, "only %lld of 1000 applied", (long long)applied);
}

Test(shim_balance, exactly_once_tight_capacity) {
  int64_t applied, staged, capacity, other;
  random_instances(200, 2, 0, &applied, &staged, &capacity, &other);
  /* Both outcomes must occur, or this test exercises only one of them. */
  cr_assert_gt(applied, 0, "no instance fit its tight buffers");
  cr_assert_gt(capacity, 0, "no instance was skipped for capacity");
}

Test(shim_balance, exactly_once_zero_slack) {
  int64_t applied, staged, capacity, other;
  random_instances(100, 0, 0, &applied, &staged, &capacity, &other);
  cr_assert_gt(capacity, 0, "no instance was skipped for capacity");
}

Test(shim_balance, verify_passes_on_correct_exchange) {
  int64_t applied, staged, capacity, other;
  random_instances(60, -1, 1, &applied, &staged, &capacity, &other);
  cr_assert_gt(applied, 100);
}

/* With room in its buffers a rank sends its samples' rows from them and
 * receives into them: nothing is packed or staged (exchange.h). */
Test(shim_balance, samples_move_from_batch_to_batch) {
  int applied = 0;
  for (int seed = 0; seed < 40; seed++) {
    int P = 2 + seed % 5;
    prng_t g = {(uint64_t)seed * 31 + 7};
    inst_t *x = inst_new(P, &(dpshim__balance_config_t){
                                .algo = DPSHIM_ALGO_DEFAULT, .model = QUADRATIC});
    x->watch = 1;
    memset(watched, 0, sizeof watched);
    inst_random(x, (uint32_t)seed + 1, &g, 2, 10, 24);
    inst_pack(x, -1, &g);
    inst_run(x);
    assert_ok_run(x, NULL);
    int pieces = 0;
    for (int r = 0; r < P; r++) {
      cr_assert_eq(watched[r].outside, 0, "seed %d rank %d: %d of %d pieces "
                   "outside its batch", seed, r, watched[r].outside,
                   watched[r].pieces);
      pieces += watched[r].pieces;
    }
    if (x->rep[0].applied) {
      applied++;
      cr_assert_gt(pieces, 0, "seed %d: applied without pieces", seed);
    }
    inst_free(x);
  }
  cr_assert_gt(applied, 20, "only %d of 40 applied", applied);
}

/* Rank 0 holds 100 + 60 tokens, rank 1 90 + 5, each buffer full but for
 * 10 tokens of rank 1's less: no sample can just move, two can swap. A
 * swapping rank's buffers cannot take what it receives past its rows. */
Test(shim_balance, a_full_rank_stages_what_it_receives) {
  dpshim__balance_config_t cfg = base_config();
  cfg.verify = 1; /* the staged records' hashes too */
  inst_t *x = inst_new(2, &cfg);
  inst_set(x, 1, 0, 0, 100, 0);
  inst_set(x, 1, 0, 1, 60, 0);
  inst_set(x, 1, 1, 0, 90, 0);
  inst_set(x, 1, 1, 1, 5, 0);
  const caps_t caps[2] = {{2, 160, 2, 1}, {2, 150, 2, 1}};
  inst_pack_caps(x, caps);
  inst_run(x);
  assert_ok_run(x, NULL);
  cr_assert_eq(x->rep[0].applied, 1, "%s", x->rep[0].skip_reason);
  for (int r = 0; r < 2; r++) {
    cr_assert(x->rep[r].staged, "rank %d took a swap in place", r);
    cr_assert_gt(x->rep[r].repack_bytes, 0, "rank %d", r);
  }
  inst_free(x);
}

/* ---- capacity skips, built by hand ---------------------------------------- */

/* Rank 0: two 100-token samples with 4 pixel rows each; rank 1: two 1-token
 * samples without pixels. Any useful plan moves a long sample to rank 1. */
static inst_t *two_heavy(const dpshim__balance_config_t *cfg) {
  inst_t *x = inst_new(2, cfg);
  inst_set(x, 1, 0, 0, 100, 4);
  inst_set(x, 1, 0, 1, 100, 4);
  inst_set(x, 1, 1, 0, 1, 0);
  inst_set(x, 1, 1, 1, 1, 0);
  return x;
}

static void run_expect_skip(inst_t *x, const char *reason) {
  inst_run(x);
  assert_ok_run(x, NULL);
  cr_assert(x->rep[0].skip_reason != NULL, "applied; expected skip %s", reason);
  cr_assert_str_eq(x->rep[0].skip_reason, reason);
  assert_untouched(x);
}

Test(shim_balance, generous_two_heavy_applies) {
  /* The control for the capacity cases below. */
  dpshim__balance_config_t cfg = base_config();
  inst_t *x = two_heavy(&cfg);
  inst_pack(x, -1, NULL);
  inst_run(x);
  assert_ok_run(x, NULL);
  cr_assert_eq(x->rep[0].applied, 1);
  inst_free(x);
}

/* Every buffer has room for everything, but rank 1's pixels for none: the
 * solver caps the pixel rows per rank, so it finds no plan within them
 * that beats the original (only long samples with pixels could move). */
Test(shim_balance, own_offsets_field_full_plans_within_it) {
  dpshim__balance_config_t cfg = base_config();
  inst_t *x = two_heavy(&cfg);
  caps_t all = total_use(x), c[2] = {all, all};
  c[1].pixels = 0;
  inst_pack_caps(x, c);
  run_expect_skip(x, "no-gain");
  inst_free(x);
}

/* The same room, and a longer sample without pixels: moving the one with
 * pixels would be best (max 110 against 112), but rank 1 has no pixel
 * room, so the plan moves the other. A solver blind to the pixel rows
 * picks the first, and its plan is skipped for capacity. */
Test(shim_balance, own_offsets_cap_moves_what_fits) {
  dpshim__balance_config_t cfg = base_config();
  inst_t *x = inst_new(2, &cfg);
  inst_set(x, 1, 0, 0, 100, 4);
  inst_set(x, 1, 0, 1, 110, 0);
  inst_set(x, 1, 1, 0, 1, 0);
  inst_set(x, 1, 1, 1, 1, 0);
  caps_t all = total_use(x), c[2] = {all, all};
  c[1].pixels = 0;
  inst_pack_caps(x, c);
  inst_run(x);
  assert_ok_run(x, NULL);
  cr_assert_eq(x->rep[0].applied, 1, "skipped: %s", x->rep[0].skip_reason);
  inst_free(x);
}

/* Rank 1 holds a single empty sample; the long sample it must receive does
 * not fit when its sample count (or, with `ids`, its one-row-per-sample
 * field) has room for one only. Swapping the empty one out gains nothing. */
static void run_one_sample_room(int ids) {
  dpshim__balance_config_t cfg = base_config();
  inst_t *x = inst_new(2, &cfg);
  inst_set(x, 1, 0, 0, 100, 1);
  inst_set(x, 1, 0, 1, 100, 1);
  inst_set(x, 1, 1, 0, 0, 0);
  caps_t all = total_use(x);
  caps_t c[2] = {all, all};
  if (ids) c[1].ids = 1;
  else c[1].samples = 1;
  inst_pack_caps(x, c);
  run_expect_skip(x, "capacity");
  inst_free(x);
}

Test(shim_balance, capacity_samples_full_skips_capacity) {
  run_one_sample_room(0);
}

Test(shim_balance, ids_field_full_skips_capacity) {
  run_one_sample_room(1);
}

Test(shim_balance, token_buffer_full_never_overflows) {
  /* Rank 1's token buffers hold only its own 2 tokens. The plan must either
   * fit them or be skipped; buffers are exact, so ASan sees any overflow. */
  dpshim__balance_config_t cfg = base_config();
  inst_t *x = two_heavy(&cfg);
  caps_t all = total_use(x);
  caps_t c[2] = {all, all};
  c[1].tokens = 2;
  inst_pack_caps(x, c);
  inst_run(x);
  assert_ok_run(x, NULL);
  cr_assert(x->rep[0].skip_reason != NULL, "the long samples cannot move");
  assert_untouched(x);
  inst_free(x);
}

/* ---- images in the cost ------------------------------------------------------ */

static dpshim_vision_t vision_of[MAXP][MAXS];

/* Two ranks of two 100-token samples; rank 0's carry images of `patches`
 * patches each in `rows` pixel rows, rank 1's none. The batches give their
 * images when `give` has the rank's bit. */
static inst_t *images_in_rows(const dpshim__balance_config_t *cfg,
                              int64_t patches, unsigned give, int32_t rows) {
  inst_t *x = inst_new(2, cfg);
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < 2; i++) {
      inst_set(x, 1, r, i, 100, r == 0 ? rows : 0);
      vision_of[r][i] = r == 0 ? (dpshim_vision_t){patches, patches * patches}
                               : (dpshim_vision_t){0, 0};
    }
  caps_t all = total_use(x), c[2] = {all, all};
  inst_pack_caps(x, c);
  for (int r = 0; r < 2; r++)
    if (give >> r & 1) x->rb[r].batch.vision = vision_of[r];
  return x;
}

static inst_t *images_on_rank0(const dpshim__balance_config_t *cfg,
                               int64_t patches, unsigned give) {
  return images_in_rows(cfg, patches, give, 2);
}

/* Equal lengths, unequal images: only a cost that sees the images finds the
 * imbalance, and the loads it reports carry the images' cost. */
Test(shim_balance, images_enter_the_cost) {
  dpshim__balance_config_t cfg = base_config();
  cfg.model = (dpshim_cost_model_t){0, 1, 0, 1, 0};
  inst_t *x = images_on_rank0(&cfg, 30, 3);
  inst_run(x);
  cr_assert_eq(x->rc[0], 0, "%s", x->rep[0].message);
  cr_assert_eq(x->rep[0].applied, 1, "skipped: %s", x->rep[0].skip_reason);
  cr_assert_float_eq(x->load_before[0][0], 2 * (100 + 900), 1e-9);
  cr_assert_float_eq(x->load_before[0][1], 2 * 100, 1e-9);
  cr_assert_float_eq(x->load_after[0][0], x->load_after[0][1], 1e-9);
  /* Each rank holds one of the images now, which the batches' vision
   * arrays (the adapter's, not rewritten) do not say. */
  for (int r = 0; r < 2; r++) {
    cr_assert_eq(x->rep[r].held_vision.patches, 30, "rank %d", r);
    cr_assert_eq(x->rep[r].held_vision.patches_sq, 900, "rank %d", r);
  }
  inst_free(x);
  x = images_on_rank0(&cfg, 30, 0); /* not given: equal loads */
  inst_run(x);
  cr_assert_eq(x->rc[0], 0, "%s", x->rep[0].message);
  cr_assert_eq(x->rep[0].applied, 0);
  cr_assert_float_eq(x->load_before[0][0], x->load_before[0][1], 1e-9);
  inst_free(x);
}

/* ---- the ViT gate ------------------------------------------------------------ */

/* images_in_rows for the gate: the model counts a token and a patch squared
 * alike, the encoder's part (told the balancers when `encoder`) is the
 * patches squared; the hand-offs ask the gate when `ask`. */
static inst_t *gate_ready(double threshold, double (*clock)(void),
                          int32_t rows, int ask, int encoder) {
  dpshim__balance_config_t cfg = base_config();
  cfg.model = (dpshim_cost_model_t){0, 1, 0, 1, 0};
  cfg.threshold = threshold;
  cfg.priced = 1;
  cfg.clock = clock;
  inst_t *x = images_in_rows(&cfg, 30, 3, rows);
  for (int r = 0; r < 2; r++)
    dpshim__balancer_set_encoder(x->bal[r], (dpshim_cost_model_t){1, 0, 0, 0, 0},
                                 encoder);
  x->gate = ask;
  return x;
}

/* One gated hand-off with each rank's meeting cost and rank 1's moved
 * forwards; the answer checked the same on both ranks. */
static inst_t *gated_rows(double threshold, double meet0, double meet1,
                          int32_t moved1, int32_t rows) {
  inst_t *x = gate_ready(threshold, NULL, rows, 1, 1);
  x->meet_s[0] = meet0;
  x->meet_s[1] = meet1;
  x->vit_moved[1] = moved1;
  inst_run(x);
  for (int r = 0; r < 2; r++) {
    cr_assert_eq(x->rc[r], 0, "%s", x->rep[r].message);
    cr_assert_eq(x->rep[r].vit_gated, 1, "rank %d not gated", r);
    cr_assert_eq(x->rep[r].vit_apart, x->rep[0].vit_apart, "rank %d", r);
    cr_assert(x->rep[r].vit_saving_s == x->rep[0].vit_saving_s);
    cr_assert_eq(x->rep[r].vit_quiet, x->rep[0].vit_quiet, "rank %d", r);
  }
  return x;
}

static inst_t *gated_images(double threshold, double meet0, double meet1,
                            int32_t moved1) {
  return gated_rows(threshold, meet0, meet1, moved1, 2);
}

/* The plan skipped, rank 0 keeps both images: apart the step takes its
 * 200 + 1800 us, meeting 200 + the mean encoder's 900: 0.9 ms saved. The
 * calls meet where that pays for the costliest rank's meeting, and only
 * there. */
Test(shim_balance, encoder_calls_meet_where_it_pays) {
  inst_t *x = gated_images(1e9, 0, 1e-4, 0);
  cr_assert_eq(x->rep[0].applied, 0);
  cr_assert_float_eq(x->rep[0].vit_saving_s, 0.9e-3, 1e-12);
  cr_assert_float_eq(x->rep[0].vit_meet_s, 1e-4, 1e-15);
  cr_assert_eq(x->rep[0].vit_apart, 0, "apart where meeting saves 9x its cost");
  cr_assert_eq(x->rep[0].vit_quiet, 0);
  inst_free(x);
  x = gated_images(1e9, 1e-3, 0, 0); /* 1.5 ms > 0.9 ms */
  cr_assert_eq(x->rep[0].vit_apart, 1, "met where meeting does not pay");
  cr_assert_eq(x->rep[0].vit_quiet, 1);
  inst_free(x);
  /* Apart, but rank 1's moved forward will meet at its backward: every
   * rank must keep the encoder calls' checkpoint at the next hand-off. */
  x = gated_images(1e9, 1e-3, 0, 1);
  cr_assert_eq(x->rep[0].vit_apart, 1);
  cr_assert_eq(x->rep[0].vit_quiet, 0, "quiet with a moved forward in flight");
  inst_free(x);
}

/* The rule itself (us): an encoder phase met is no shorter than its mean,
 * nor than the costliest unit it can place (the sample's images here), nor
 * than the step's history before it. */
Test(shim_balance, meeting_saves_only_what_balance_can_reach) {
  double before[2] = {0, 0}, llm[2] = {100, 100}, enc[2] = {1800, 0}, s;
  cr_assert_null(dpshim__policy_meet(before, llm, enc, 900, 2, 0, &s));
  cr_assert_float_eq(s, 1e-6 * (1900 - 1000), 1e-12);
  cr_assert_not_null(dpshim__policy_meet(before, llm, enc, 1800, 2, 0, &s),
                     "one sample's 1800 us: nothing to even");
  cr_assert_float_eq(s, 0, 1e-12);
  cr_assert_not_null(dpshim__policy_meet(before, llm, enc, 900, 2, 6e-4, &s),
                     "0.9 ms saved against 1.5 x 0.6 ms");
  double late[2] = {0, 900}; /* rank 1 ran 900 us more so far */
  cr_assert_not_null(dpshim__policy_meet(late, llm, enc, 900, 2, 0, &s));
  cr_assert_float_eq(s, 1e-6 * (1900 - 1900), 1e-12);
}

/* What meeting costs, learnt: the first call sets it, later ones move it
 * a quarter of the way, and the first after a retry sets it again. */
Test(shim_balance, what_meeting_costs_is_learnt_and_a_retry_starts_it_again) {
  dpshim__policy_learnt_t m = {0, 0, 0, 0};
  dpshim__policy_learn(&m, 8e-3); /* a slow first meeting */
  cr_assert_float_eq(m.s, 8e-3, 1e-15);
  dpshim__policy_learn(&m, 0);
  cr_assert_float_eq(m.s, 6e-3, 1e-15);
  m.fresh = 1;
  dpshim__policy_learn(&m, 1e-3);
  cr_assert_float_eq(m.s, 1e-3, 1e-15, "the retry's measure replaces");
  dpshim__policy_learn(&m, 5e-3);
  cr_assert_float_eq(m.s, 2e-3, 1e-15, "and the average goes on from it");
  dpshim__policy_learn_more(&m, 4e-3); /* the same call took 9 ms */
  cr_assert_float_eq(m.s, 3e-3, 1e-15);
}

/* The costliest unit the ViT plan can place, in the rule above: an image
 * whole, a video attended frame by frame a frame (adapters show such a
 * video as an image a frame), nothing for text. */
Test(shim_balance, a_video_apart_is_placed_a_frame_at_a_time) {
  dpshim_sample_t image = {.patches = 400, .patches_sq = 400 * 400};
  dpshim_sample_t video = {.patches = 400, .patches_sq = 4 * 100 * 100};
  dpshim_sample_t text = {.len = 10};
  cr_assert_float_eq(dpshim__policy_vit_unit(2, 3, &image),
                     2.0 * 400 * 400 + 3 * 400, 1e-9);
  cr_assert_float_eq(dpshim__policy_vit_unit(2, 3, &video),
                     2.0 * 100 * 100 + 3 * 100, 1e-9);
  cr_assert(dpshim__policy_vit_unit(2, 3, &text) == 0);
}

/* Before any call has met, what meeting costs is no less than what evening
 * the images copies at the ranks' own price (the prior's 5 GB/s here):
 * rank 0 would send one of its samples, 1.8 MB of rows, there and back,
 * 0.72 ms, and 1.5 x that is more than the 0.9 ms meeting saves. */
Test(shim_balance, meeting_costs_at_least_its_exchange) {
  inst_t *x = gated_rows(1e9, 0, 0, 0, 600000);
  cr_assert_float_eq(x->rep[0].vit_saving_s, 0.9e-3, 1e-12);
  cr_assert_geq(x->rep[0].vit_meet_s, 0.7e-3, "%g s", x->rep[0].vit_meet_s);
  cr_assert_eq(x->rep[0].vit_apart, 1, "met for an exchange dearer than it");
  inst_free(x);
}

/* Once a rank's encoder calls have told what a meeting moves per patch
 * (here 120 KB: inputs, embeddings and their gradients), the floor counts
 * it: rank 0 would send one sample of 30 patches, 1.8 MB each way where
 * its own bytes are a few, 0.72 ms there and back at the prior's 5 GB/s,
 * and 1.5 x that is more than the 0.9 ms meeting saves. */
Test(shim_balance, meeting_costs_what_its_calls_move) {
  inst_t *x = gated_rows(1e9, 0, 0, 0, 2);
  cr_assert_eq(x->rep[0].vit_apart, 0, "apart with nothing to move");
  inst_free(x);
  x = gate_ready(1e9, NULL, 2, 1, 1);
  x->wire[1] = 120000;
  inst_run(x);
  for (int r = 0; r < 2; r++) {
    cr_assert_eq(x->rc[r], 0, "%s", x->rep[r].message);
    cr_assert_geq(x->rep[r].vit_meet_s, 0.7e-3, "rank %d: %g s", r,
                  x->rep[r].vit_meet_s);
    cr_assert_eq(x->rep[r].vit_apart, 1, "rank %d met", r);
  }
  inst_free(x);
}

/* Applied, the plan gives each rank one image: each rank's sum is even
 * already and the meeting saves nothing, free or not. */
Test(shim_balance, an_even_plan_keeps_encoder_calls_apart) {
  inst_t *x = gated_images(0, 0, 0, 0);
  cr_assert_eq(x->rep[0].applied, 1, "skipped: %s", x->rep[0].skip_reason);
  cr_assert_leq(x->rep[0].vit_saving_s, 1e-12);
  cr_assert_eq(x->rep[0].vit_apart, 1);
  inst_free(x);
}

/* The batches of video_and_texts() as they were before any hand-off. */
static void pack_video_and_texts(inst_t *x) {
  caps_t all = total_use(x), c[MAXP];
  for (int r = 0; r < x->P; r++) c[r] = all;
  inst_pack_caps(x, c);
  for (int r = 0; r < x->P; r++) x->rb[r].batch.vision = vision_of[r];
}

/* Each DP group of `groups` (world rank r is DP rank r / groups) holds
 * the same: DP rank 0 a video of 8 frames of 10 patches (800 us of
 * encoder, a frame 100 us) and a text sample, DP rank 1 two texts (100 us
 * of LLM each). meet_s: what meeting costs in each group. */
static inst_t *video_and_texts(int groups, const double *meet_s) {
  dpshim__balance_config_t cfg = base_config();
  cfg.model = (dpshim_cost_model_t){0, 1, 0, 1, 0};
  cfg.priced = 1;
  inst_t *x = inst_new(2 * groups, &cfg);
  for (int r = 0; r < x->P; r++)
    for (int i = 0; i < 2; i++) {
      int video = r / groups == 0 && i == 0;
      inst_set(x, 1, r, i, 100, video ? 2 : 0);
      vision_of[r][i] = video ? (dpshim_vision_t){80, 8 * 10 * 10}
                              : (dpshim_vision_t){0, 0};
    }
  pack_video_and_texts(x);
  for (int r = 0; r < x->P; r++) {
    dpshim__balancer_set_encoder(x->bal[r], (dpshim_cost_model_t){1, 0, 0, 0, 0},
                                 1);
    x->meet_s[r] = meet_s[r % groups];
  }
  x->gate = 1;
  return x;
}

/* One group of the above. The plan with the encoder's part gives rank 1
 * the text: apart the step ends at 900 us, and meeting under that plan (LLM
 * 300 + encoder 400) saves 200 us, not 1.5 x the 160 us a meeting costs.
 * Left where they are, the LLM's parts are even (200) and meeting ends at
 * 600: 300 us saved. The gate takes that: no LLM-level move, the calls
 * meet. */
Test(shim_balance, the_calls_meet_under_the_llm_plan_where_that_ends_sooner) {
  const double meet = 160e-6;
  inst_t *x = video_and_texts(1, &meet);
  inst_run(x);
  for (int r = 0; r < 2; r++) {
    cr_assert_eq(x->rc[r], 0, "%s", x->rep[r].message);
    cr_assert_eq(x->rep[r].vit_apart, 0, "rank %d: apart", r);
    cr_assert_eq(x->rep[r].applied, 0, "rank %d: the plan with the encoder", r);
    cr_assert_float_eq(x->rep[r].vit_saving_s, 300e-6, 1e-9);
  }
  inst_free(x);
}

/* One hand-off over two DP groups whose ranks are TP peers (world rank r
 * in group r % 2, peers r / 2), with the peers' handles. */
static void balance_group_rank(dpshim__comm_t *world, dpshim__comm_t *dp,
                               dpshim__comm_t *peers, int rank, void *arg) {
  (void)world;
  inst_t *x = arg;
  double note[DPSHIM__NOTES] = {rank, (double)x->step, -rank, 0.5, 7};
  dpshim__handoff_t ho = {x->step, 1, note, peers, NULL, x->gate,
                          x->meet_s[rank], x->wire[rank], 0, 0};
  x->rc[rank] = dpshim__balance(x->bal[rank], dp, &x->rb[rank].batch, &ho,
                                &x->rep[rank]);
}

/* TP peer groups hold the same samples, so they take the gate's meeting
 * plan only together: where group 1's meetings cost 1 ms (300 us saved is
 * not worth it there), group 0 drops the plan it took and both apply the
 * plan with the encoder's part, the calls apart; where both cost 160 us,
 * both take it. */
Test(shim_balance, peer_groups_take_the_meeting_plan_only_together) {
  const double apart_one[2] = {160e-6, 1e-3}, both[2] = {160e-6, 160e-6};
  for (int k = 0; k < 2; k++) {
    inst_t *x = video_and_texts(2, k ? both : apart_one);
    cr_assert_eq(mock_run_groups(&x->opts, 2, balance_group_rank, x, &x->stats),
                 0, "mock: %s", x->stats.message);
    for (int r = 0; r < 4; r++) {
      cr_assert_eq(x->rc[r], 0, "%s", x->rep[r].message);
      cr_assert_eq(x->rep[r].vit_apart, !k, "rank %d (case %d)", r, k);
      cr_assert_eq(x->rep[r].applied, !k, "rank %d (case %d): %s", r, k,
                   x->rep[r].skip_reason ? x->rep[r].skip_reason : "applied");
      cr_assert_float_eq(x->rep[r].vit_saving_s, k ? 300e-6 : 200e-6, 1e-9,
                         "rank %d (case %d)", r, k);
    }
    inst_free(x);
  }
}

/* Hand-off k (1-based) of `runs`, each of a new step, on x: bit k of the
 * result when its calls met to measure meeting again (the same on both
 * ranks, and never while the gate says meet anyway). */
static uint64_t retries_over(inst_t *x, int runs) {
  uint64_t met = 0;
  for (int k = 1; k <= runs; k++) {
    x->step = k;
    inst_run(x);
    for (int r = 0; r < 2; r++) {
      cr_assert_eq(x->rc[r], 0, "%s", x->rep[r].message);
      cr_assert_eq(x->rep[r].vit_retry, x->rep[0].vit_retry, "rank %d", r);
      cr_assert_eq(x->rep[r].vit_apart, !x->rep[r].vit_retry, "hand-off %d", k);
    }
    met |= (uint64_t)x->rep[0].vit_retry << k;
  }
  return met;
}

/* Kept apart only by what meetings measured (1 ms a meeting against the
 * 0.9 ms it saves), the calls meet again at the 8th such hand-off, then
 * at the 16th after it: one slow meeting does not shut the gate for good.
 * Kept apart by the exchange's floor (meeting_costs_at_least_its_exchange),
 * they never do. */
Test(shim_balance, the_gate_measures_meeting_again_now_and_then) {
  inst_t *x = gate_ready(1e9, NULL, 2, 1, 1);
  x->meet_s[0] = 1e-3;
  cr_assert_eq(retries_over(x, 40), (1ull << 8) | (1ull << 24));
  inst_free(x);
  x = gate_ready(1e9, NULL, 600000, 1, 1);
  cr_assert_eq(retries_over(x, 40), 0);
  inst_free(x);
}

/* The retry prices the meeting without what meetings measured, the gate's
 * second plan too: with meetings measured at 1 ms, video_and_texts()
 * applies the plan with the encoder's part, the calls apart, until the
 * 8th hand-off meets under the plan of the LLM parts (which moves
 * nothing), as the gate would have at the meeting's floor. */
Test(shim_balance, a_retry_meets_under_the_plan_the_gate_would_take) {
  const double slow = 1e-3;
  inst_t *x = video_and_texts(1, &slow);
  for (int k = 1; k <= 8; k++) {
    x->step = k;
    pack_video_and_texts(x);
    inst_run(x);
    for (int r = 0; r < 2; r++) {
      cr_assert_eq(x->rc[r], 0, "%s", x->rep[r].message);
      cr_assert_eq(x->rep[r].vit_retry, k == 8, "rank %d, hand-off %d", r, k);
      cr_assert_eq(x->rep[r].vit_apart, k < 8, "rank %d, hand-off %d", r, k);
      cr_assert_eq(x->rep[r].applied, k < 8, "rank %d, hand-off %d: %s", r, k,
                   x->rep[r].skip_reason ? x->rep[r].skip_reason : "applied");
    }
  }
  cr_assert_float_eq(x->rep[0].vit_saving_s, 300e-6, 1e-9,
                     "met under the plan of the LLM parts");
  inst_free(x);
}

/* Not asked, or without the encoder's model: no answer (the calls meet as
 * they always have). */
Test(shim_balance, the_gate_answers_only_when_asked) {
  for (int k = 0; k < 2; k++) {
    inst_t *x = gate_ready(1e9, NULL, 2, k, !k);
    inst_run(x);
    cr_assert_eq(x->rc[0], 0, "%s", x->rep[0].message);
    cr_assert_eq(x->rep[0].vit_gated, 0, "gated with gate %d", k);
    cr_assert_eq(x->rep[0].vit_apart, 0);
    inst_free(x);
  }
}

/* ---- other skips ----------------------------------------------------------- */

Test(shim_balance, threshold_high_skips_balanced) {
  for (size_t k = 0; k < sizeof SIZES / sizeof *SIZES; k++) {
    int P = SIZES[k];
    if (P == 1) continue;
    prng_t g = {(uint64_t)P};
    dpshim__balance_config_t cfg = base_config();
    cfg.threshold = 1e9;
    inst_t *x = inst_new(P, &cfg);
    inst_random(x, 1, &g, 1, 8, 30);
    inst_pack(x, -1, &g);
    run_expect_skip(x, "balanced");
    cr_assert(x->has_loads[0]);
    cr_assert_gt(x->rep[0].imbalance_before, 0);
    cr_assert_eq(x->rep[0].bytes_moved, 0);
    cr_assert_eq(x->stats.ops[MOCK_EXCHANGE], 0);
    inst_free(x);
  }
}

/* ---- auto: plans priced in seconds ------------------------------------------ */

/* A clock that every call moves on by a second, shared by the rank
 * threads: whatever a rank times takes at least a second. */
static _Atomic long slow_ticks;
static double slow_clock(void) { return (double)++slow_ticks; }

/* Every rank returned 0 and the same report; applied or skipped for
 * `reason` (the batches then untouched). Loads are not checked against
 * the quadratic model's: these runs use others. */
static void expect_priced(inst_t *x, const char *reason) {
  inst_run(x);
  assert_same_reports(x);
  cr_assert_eq(x->rc[0], 0, "%s", x->rep[0].message);
  if (!reason) {
    cr_assert_eq(x->rep[0].applied, 1, "skipped: %s", x->rep[0].skip_reason);
    return;
  }
  cr_assert(x->rep[0].skip_reason && !strcmp(x->rep[0].skip_reason, reason),
            "expected skip %s, got %s", reason,
            x->rep[0].skip_reason ? x->rep[0].skip_reason : "apply");
  assert_untouched(x);
}

static dpshim__balance_config_t auto_config(double us_per_len2, int priced) {
  dpshim__balance_config_t cfg = base_config();
  cfg.threshold = DPSHIM__THRESHOLD_AUTO;
  cfg.model = (dpshim_cost_model_t){us_per_len2, 0, 0, 0, 0};
  cfg.priced = priced;
  return cfg;
}

/* two_heavy at 1 us per len^2: the plan saves 10 ms (20000 us on rank 0
 * before, 10002 on rank 1 after), moving ~1 kB. */
Test(shim_balance, auto_applies_what_pays) {
  dpshim__balance_config_t cfg = auto_config(1, 1);
  inst_t *x = two_heavy(&cfg);
  inst_pack(x, -1, NULL);
  expect_priced(x, NULL);
  cr_assert_float_eq(x->rep[0].saving_s, 0.009998, 1e-12, "saving %.17g",
                     x->rep[0].saving_s);
  cr_assert(x->rep[0].cost_s > 0 && x->rep[0].cost_s < 1e-3, "cost %g",
            x->rep[0].cost_s);
  inst_free(x);
}

/* The same plan at 1e-9 us per len^2 saves less than moving costs. */
Test(shim_balance, auto_skips_what_does_not_pay) {
  dpshim__balance_config_t cfg = auto_config(1e-9, 1);
  inst_t *x = two_heavy(&cfg);
  inst_pack(x, -1, NULL);
  expect_priced(x, "not-worth-it");
  cr_assert_lt(x->rep[0].saving_s, x->rep[0].cost_s);
  cr_assert_eq(x->stats.ops[MOCK_EXCHANGE], 0);
  inst_free(x);
}

/* Before the model is in seconds (not fitted, not given), auto is the
 * original's ratio: the same plan applies, unpriced. */
Test(shim_balance, auto_unpriced_uses_the_ratio) {
  dpshim__balance_config_t cfg = auto_config(1e-9, 0);
  inst_t *x = two_heavy(&cfg);
  inst_pack(x, -1, NULL);
  expect_priced(x, NULL);
  cr_assert_eq(x->rep[0].cost_s, 0);
  inst_free(x);
}

/* What applying costs is learned: once an exchange took seconds, the 10 ms
 * plan that applied is skipped the next time, and without solving: a
 * fixed part of seconds is more than even loads at the mean would save (no
 * plan's loads reported). The group's first exchange, which opens its
 * ranks' connections, is not learnt: the plan applies a second time. */
Test(shim_balance, auto_learns_the_cost) {
  dpshim__balance_config_t cfg = auto_config(1, 1);
  cfg.clock = slow_clock;
  inst_t *x = two_heavy(&cfg);
  for (x->step = 1; x->step <= 2; x->step++) { /* one hand-off a step */
    inst_pack(x, -1, NULL);
    expect_priced(x, NULL);
  }
  cr_assert_lt(x->rep[0].cost_s, 1e-3, "the first exchange was learnt");
  inst_pack(x, -1, NULL);
  expect_priced(x, "not-worth-it");
  cr_assert_gt(x->rep[0].cost_s, 0.1);
  cr_assert_null(x->rep[0].load_before, "solved where no plan could pay");
  cr_assert_gt(x->rep[0].saving_s, 0.009, "the bound: the maximum down to "
               "the mean, %g s", x->rep[0].saving_s);
  cr_assert_gt(x->rep[0].imbalance_before, 0.4, "imbalance %g",
               x->rep[0].imbalance_before);
  inst_free(x);
}

/* The ViT gate prices a meeting's two rounds from the hand-offs' own: the
 * least any rank waited in the last one's first collective (with a clock
 * of a second a read, every wait is a second or more), on top of what the
 * costliest rank measured of its own. */
Test(shim_balance, meeting_is_priced_with_the_rounds) {
  inst_t *x = gate_ready(1e9, slow_clock, 2, 1, 1);
  x->meet_s[1] = 1e-4;
  inst_run(x);
  cr_assert_float_eq(x->rep[0].vit_meet_s, 1e-4, 1e-15, "no round seen yet");
  cr_assert_eq(x->rep[0].vit_apart, 0);
  inst_run(x); /* skipped: the batches as they were */
  for (int r = 0; r < 2; r++) {
    cr_assert_geq(x->rep[r].vit_meet_s, 2 + 1e-4, "rank %d: %g s", r,
                  x->rep[r].vit_meet_s);
    cr_assert_eq(x->rep[r].vit_apart, 1, "met for 0.9 ms against 2 s");
  }
  inst_free(x);
}

Test(shim_balance, algo_none_skips) {
  dpshim__balance_config_t cfg = base_config();
  cfg.algo = DPSHIM_ALGO_NONE;
  inst_t *x = two_heavy(&cfg);
  inst_pack(x, -1, NULL);
  run_expect_skip(x, "algo-none");
  inst_free(x);
}

Test(shim_balance, fewer_samples_than_ranks) {
  for (int P = 2; P <= MAXP; P *= 2) {
    dpshim__balance_config_t cfg = base_config();
    inst_t *x = inst_new(P, &cfg);
    /* One sample on each rank but the last: P - 1 samples. */
    for (int r = 0; r < P - 1; r++) inst_set(x, 1, r, 0, 10 * (r + 1), 1);
    inst_pack(x, -1, NULL);
    inst_run(x);
    assert_same_reports(x);
    cr_assert_eq(x->rc[0], 0);
    cr_assert_eq(x->rep[0].applied, 0);
    cr_assert_str_eq(x->rep[0].skip_reason, "too-few-samples");
    cr_assert_eq(x->rep[0].samples, P - 1);
    assert_untouched(x);
    inst_free(x);
  }
}

Test(shim_balance, all_empty_batches) {
  dpshim__balance_config_t cfg = base_config();
  inst_t *x = inst_new(4, &cfg);
  inst_pack(x, -1, NULL);
  inst_run(x);
  assert_same_reports(x);
  cr_assert_eq(x->rc[0], 0, "%s", x->rep[0].message);
  cr_assert_str_eq(x->rep[0].skip_reason, "too-few-samples");
  assert_untouched(x);
  inst_free(x);
}

/* ---- errors: every rank returns the same code, nothing is touched ---------- */

/* Runs, then checks that every rank failed with `code`, with one message
 * naming each of the `needles`, and that no batch changed. */
static void expect_error(inst_t *x, int code, const char *const *needles) {
  inst_run(x);
  assert_same_reports(x);
  cr_assert_eq(x->rc[0], code, "rc %d, expected %d (message \"%s\")", x->rc[0],
               code, x->rep[0].message);
  cr_assert_eq(x->rep[0].applied, 0);
  for (const char *const *s = needles; *s; s++)
    cr_assert(strstr(x->rep[0].message, *s) != NULL,
              "message \"%s\" does not name \"%s\"", x->rep[0].message, *s);
  assert_untouched(x);
}

Test(shim_balance, images_given_on_some_ranks_only) {
  dpshim__balance_config_t cfg = base_config();
  inst_t *x = images_on_rank0(&cfg, 30, 1);
  rb_snapshot(&x->rb[0]);
  rb_snapshot(&x->rb[1]);
  static const char *const needles[] = {"vision", NULL};
  expect_error(x, DPSHIM_EINVAL, needles);
  inst_free(x);
}

static inst_t *random_group(int P, uint64_t seed) {
  dpshim__balance_config_t cfg = base_config();
  inst_t *x = inst_new(P, &cfg);
  prng_t g = {seed};
  inst_random(x, 1, &g, 2, 6, 20);
  inst_pack(x, -1, &g);
  return x;
}

Test(shim_balance, decreasing_cu_seqlens_on_one_rank) {
  for (int P = 2; P <= MAXP; P++) {
    for (int bad = 0; bad < P; bad += (P > 2 ? P - 1 : 1)) {
      inst_t *x = random_group(P, (uint64_t)(P * 31 + bad));
      rank_batch_t *rb = &x->rb[bad];
      rb->cu[1] = rb->cu[2] + 1; /* cu_seqlens[2] < cu_seqlens[1] */
      rb_snapshot(rb);
      char rank[32];
      snprintf(rank, sizeof rank, "rank %d", bad);
      const char *needles[] = {rank, "cu_seqlens", NULL};
      expect_error(x, DPSHIM_EINVAL, needles);
      inst_free(x);
    }
  }
}

Test(shim_balance, row_bytes_zero_on_one_rank) {
  inst_t *x = random_group(4, 7);
  x->rb[2].fields[3].row_bytes = 0;
  rb_snapshot(&x->rb[2]);
  const char *needles[] = {"rank 2", "pixels", "row_bytes", NULL};
  expect_error(x, DPSHIM_EINVAL, needles);
  inst_free(x);
}

Test(shim_balance, own_offsets_over_capacity_on_one_rank) {
  inst_t *x = random_group(3, 8);
  rank_batch_t *rb = &x->rb[1];
  rb->fields[3].capacity_rows = rb->pix_off[rb->batch.nsamples] - 1;
  rb_snapshot(rb);
  const char *needles[] = {"rank 1", "pixels", "capacity", NULL};
  expect_error(x, DPSHIM_EINVAL, needles);
  inst_free(x);
}

Test(shim_balance, nsamples_over_capacity_on_one_rank) {
  inst_t *x = random_group(2, 9);
  x->rb[1].batch.capacity_samples = x->rb[1].batch.nsamples - 1;
  rb_snapshot(&x->rb[1]);
  const char *needles[] = {"rank 1", "nsamples", NULL};
  expect_error(x, DPSHIM_EINVAL, needles);
  inst_free(x);
}

Test(shim_balance, two_ranks_invalid_first_is_named) {
  inst_t *x = random_group(4, 10);
  x->rb[3].fields[0].row_bytes = 0;
  x->rb[1].fields[3].row_bytes = 0;
  rb_snapshot(&x->rb[1]);
  rb_snapshot(&x->rb[3]);
  const char *needles[] = {"rank 1", "pixels", NULL};
  expect_error(x, DPSHIM_EINVAL, needles);
  inst_free(x);
}

Test(shim_balance, ranks_disagree_on_row_bytes) {
  inst_t *x = random_group(4, 11);
  /* Rank 3's pixels have 1-byte rows: valid alone, not with the others. */
  x->rb[3].fields[3].row_bytes = 1;
  rb_snapshot(&x->rb[3]);
  const char *needles[] = {"rank 3", NULL};
  expect_error(x, DPSHIM_EINVAL, needles);
  inst_free(x);
}

Test(shim_balance, ranks_disagree_on_field_count) {
  inst_t *x = random_group(3, 12);
  x->rb[2].batch.nfields = 3; /* no pixels on rank 2 */
  rb_snapshot(&x->rb[2]);
  const char *needles[] = {"rank 2", NULL};
  expect_error(x, DPSHIM_EINVAL, needles);
  inst_free(x);
}

Test(shim_balance, ranks_disagree_on_field_kind) {
  inst_t *x = random_group(2, 13);
  /* Rank 0's weights get offsets of their own (the pixel offsets' values
   * would not fit, so a copy of cu_seqlens): same bytes, another kind. */
  rank_batch_t *rb = &x->rb[0];
  static int32_t own[MAXS + 1];
  memcpy(own, rb->cu, sizeof(int32_t) * ((size_t)rb->batch.nsamples + 1));
  rb->fields[1].offsets = own;
  rb_snapshot(rb);
  const char *needles[] = {"rank 1", NULL};
  expect_error(x, DPSHIM_EINVAL, needles);
  inst_free(x);
}

/* ---- micro-batches: history within a step ---------------------------------- */

Test(shim_balance, micro_batches_share_history_within_a_step) {
  dpshim__balance_config_t cfg = base_config();
  inst_t *x = inst_new(4, &cfg);
  prng_t g = {42};
  double history[MAXP];

  /* First hand-off of step 7: no history. */
  x->step = 7;
  hand_off_random(x, 1, &g, 2, 6, NULL);
  cr_assert_eq(x->rep[0].applied, 1, "the first hand-off should apply");
  memcpy(history, x->load_after[0], sizeof history);

  /* Second hand-off of step 7: its loads start from the first's. */
  hand_off_random(x, 2, &g, 2, 6, history);
  double h2[MAXP];
  memcpy(h2, x->rep[0].applied ? x->load_after[0] : x->load_before[0], sizeof h2);
  for (int r = 0; r < 4; r++) cr_assert_gt(x->load_before[0][r], history[r]);

  /* A third adds to both. */
  hand_off_random(x, 3, &g, 2, 6, h2);

  /* Step 8 starts afresh. */
  x->step = 8;
  hand_off_random(x, 4, &g, 2, 6, NULL);
  inst_free(x);
}

/* Once the balancer has seen batches of a size, each rank's metas travel
 * with its header, and a solve that does not allocate needs no agreement: a
 * hand-off that applies costs two collectives (headers with metas, the
 * exchange), and the exactly-once property still holds. */
Test(shim_balance, steady_state_costs_two_collectives) {
  dpshim__balance_config_t cfg = base_config();
  inst_t *x = inst_new(4, &cfg);
  for (int call = 0; call < 4; call++) {
    prng_t g = {11}; /* the same batches every time */
    x->step = call + 1;
    hand_off_random(x, 1, &g, 3, 6, NULL);
    cr_assert_eq(x->rep[0].applied, 1, "call %d", call);
    cr_assert_eq(x->stats.ops[MOCK_ALLGATHERV], call == 0, "call %d", call);
    if (call >= 2) /* the solver's arena has learned the size */
      cr_assert_eq(x->stats.ops[MOCK_ALLGATHER], 1, "call %d", call);
    cr_assert_eq(x->stats.ops[MOCK_EXCHANGE], 1, "call %d", call);
  }
  inst_free(x);
}

Test(shim_balance, skipped_hand_off_counts_as_history) {
  dpshim__balance_config_t cfg = base_config();
  cfg.threshold = 1e9; /* every plan skipped as balanced */
  inst_t *x = inst_new(3, &cfg);
  prng_t g = {5};
  x->step = 1;
  hand_off_random(x, 1, &g, 2, 5, NULL);
  cr_assert_str_eq(x->rep[0].skip_reason, "balanced");
  double history[MAXP];
  memcpy(history, x->load_before[0], sizeof history);
  hand_off_random(x, 2, &g, 2, 5, history);
  inst_free(x);
}

/* ---- edge cases that once made every rank fail or misreport ---------------- */

/* A rank whose batch is empty is valid; the solver requires a sample on
 * every rank, so the group skips instead of failing. */
Test(shim_balance_edges, a_rank_with_an_empty_batch_is_not_an_error) {
  dpshim__balance_config_t cfg = base_config();
  inst_t *x = inst_new(2, &cfg);
  for (int i = 0; i < 4; i++) inst_set(x, 1, 0, i, 10 + i, 1);
  x->n[1] = 0;
  inst_pack(x, -1, NULL);
  inst_run(x);
  assert_same_reports(x);
  cr_assert_eq(x->rc[0], 0, "rc %d: %s", x->rc[0], x->rep[0].message);
  assert_ok_run(x, NULL);
  inst_free(x);
}

/* With cap_ratio 0 (DPSHIM_MAX_LEN_RATIO=none) and a token-aligned field,
 * cap_ratio() in balance.c divides the token capacity by the group's token
 * count; when every sample is empty that is x / 0 = inf (or 0 / 0 = NaN),
 * the solver rejects cap_ratio = inf, and every rank gets DPSHIM_EINVAL. */
Test(shim_balance_edges, samples_without_tokens_are_not_an_error) {
  dpshim__balance_config_t cfg = base_config();
  inst_t *x = inst_new(2, &cfg);
  inst_set(x, 1, 0, 0, 0, 3);
  inst_set(x, 1, 0, 1, 0, 2);
  inst_set(x, 1, 1, 0, 0, 1);
  inst_pack(x, -1, NULL);
  inst_run(x);
  assert_same_reports(x);
  cr_assert_eq(x->rc[0], 0, "rc %d: %s", x->rc[0], x->rep[0].message);
  assert_ok_run(x, NULL);
  inst_free(x);
}

/* kk (and seed) re-place every sample and always answer "apply"; the
 * balancer applies the plan even when it moves nothing (one rank, or ranks
 * already holding KK's partition): report.applied is documented as "the
 * plan moved samples", and an empty all-to-all runs for nothing. */
Test(shim_balance_edges, a_plan_that_moves_nothing_is_not_applied) {
  dpshim__balance_config_t cfg = base_config();
  cfg.algo = DPSHIM_ALGO_KK;
  inst_t *x = inst_new(1, &cfg);
  inst_set(x, 1, 0, 0, 10, 1);
  inst_set(x, 1, 0, 1, 20, 1);
  inst_pack(x, -1, NULL);
  inst_run(x);
  assert_same_reports(x);
  cr_assert_eq(x->rc[0], 0);
  cr_assert(!x->rep[0].applied || x->rep[0].bytes_moved > 0,
            "applied with bytes_moved 0 (skip_reason NULL)");
  inst_free(x);
}

/* The notes ride with the headers: every rank gets every rank's, in rank
 * order, whatever the decision. */
Test(shim_balance_edges, every_rank_gets_every_note) {
  dpshim__balance_config_t cfg = base_config();
  inst_t *x = inst_new(3, &cfg);
  prng_t g = {7};
  x->step = 4;
  inst_random(x, 1, &g, 1, 6, 50);
  inst_pack(x, -1, NULL);
  inst_run(x);
  for (int r = 0; r < x->P; r++) {
    cr_assert_not_null(x->rep[r].notes);
    for (int from = 0; from < x->P; from++) {
      const double *n = x->notes[r] + from * DPSHIM__NOTES;
      cr_assert(n[0] == from && n[1] == 4 && n[2] == -from && n[3] == 0.5,
                "rank %d got rank %d's note as %g %g %g %g", r, from, n[0],
                n[1], n[2], n[3]);
    }
  }
  inst_free(x);
}

/* kk re-partitions from scratch and always answers "apply", so an already
 * perfect assignment is replaced by a worse one. Linear cost, 2 ranks:
 * {4, 5, 6} | {7, 8} is 15 | 15; Karmarkar-Karp differencing gives 16 | 14. */
Test(shim_balance_edges, kk_plan_never_raises_the_imbalance) {
  dpshim__balance_config_t cfg = base_config();
  cfg.algo = DPSHIM_ALGO_KK;
  cfg.model = (dpshim_cost_model_t){0, 1, 0, 0, 0};
  inst_t *x = inst_new(2, &cfg);
  inst_set(x, 1, 0, 0, 4, 0);
  inst_set(x, 1, 0, 1, 5, 0);
  inst_set(x, 1, 0, 2, 6, 0);
  inst_set(x, 1, 1, 0, 7, 0);
  inst_set(x, 1, 1, 1, 8, 0);
  inst_pack(x, -1, NULL);
  inst_run(x);
  assert_same_reports(x);
  cr_assert_eq(x->rc[0], 0);
  cr_assert(!x->rep[0].applied ||
            x->rep[0].imbalance_after <= x->rep[0].imbalance_before,
            "applied: imbalance %g -> %g", x->rep[0].imbalance_before,
            x->rep[0].imbalance_after);
  inst_free(x);
}

/* ---- faults in the collectives -------------------------------------------- */

Test(shim_balance, collective_failure_fails_every_rank_untouched) {
  for (int P = 2; P <= 4; P += 2) {
    /* Count the collectives of a clean applied run. */
    inst_t *x = random_group(P, 77);
    inst_run(x);
    assert_ok_run(x, NULL);
    cr_assert_eq(x->rep[0].applied, 1);
    long calls = x->stats.calls[0];
    for (int r = 1; r < P; r++) cr_assert_eq(x->stats.calls[r], calls);
    cr_assert_geq(calls, 3);
    inst_free(x);
    for (long k = 0; k < calls; k++) {
      x = random_group(P, 77);
      x->opts.fail_rank = (int)(k % P);
      x->opts.fail_call = (int)k;
      x->opts.fail_code = DPSHIM_ENOMEM;
      inst_run(x);
      cr_assert(x->stats.faulted, "call %ld never happened", k);
      for (int r = 0; r < P; r++)
        cr_assert_eq(x->rc[r], DPSHIM_ENOMEM, "P %d fault at call %ld: rank %d "
                     "returned %d", P, k, r, x->rc[r]);
      assert_untouched(x);
      /* The balancers still work afterwards (on a new step). */
      x->opts.fail_rank = -1;
      x->step = 1;
      inst_run(x);
      assert_ok_run(x, NULL);
      inst_free(x);
    }
  }
}

Test(shim_balance, verify_catches_a_corrupted_exchange) {
  dpshim__balance_config_t cfg = base_config();
  cfg.verify = 1;
  inst_t *x = two_heavy(&cfg);
  inst_pack(x, -1, NULL);
  x->opts.corrupt = 1;
  x->opts.corrupt_rank = 1; /* receives a long sample */
  inst_run(x);
  cr_assert(x->stats.corrupted);
  assert_same_reports(x);
  cr_assert_eq(x->rc[0], DPSHIM_EINVAL, "rc %d", x->rc[0]);
  cr_assert(strstr(x->rep[0].message, "verify") != NULL, "%s",
            x->rep[0].message);
  inst_free(x);
}

Test(shim_balance, corruption_goes_unseen_without_verify) {
  /* The control: the flipped byte is real, and only verify reports it. */
  dpshim__balance_config_t cfg = base_config();
  inst_t *x = two_heavy(&cfg);
  inst_pack(x, -1, NULL);
  x->opts.corrupt = 1;
  x->opts.corrupt_rank = 1;
  inst_run(x);
  cr_assert(x->stats.corrupted);
  assert_same_reports(x);
  cr_assert_eq(x->rc[0], 0);
  cr_assert_eq(x->rep[0].applied, 1);
  /* Rank 1's received sample comes after its two kept ones: its first token
   * has a flipped byte. */
  const rank_batch_t *rb = &x->rb[1];
  cr_assert_eq(rb->batch.nsamples, 3);
  uint64_t id = rb->ids[2];
  cr_assert_neq(rb->tokens[rb->cu[2]], token_of(id, 0));
  inst_free(x);
}

/* ---- the mock itself ------------------------------------------------------- */

typedef struct mock_probe {
  int rc[MAXP][3];
  unsigned char gathered[MAXP][MAXP * 4];
  unsigned char gatheredv[MAXP][64];
  unsigned char exchanged[MAXP][64];
  int bad_rank;     /* this rank sends a count the others do not expect */
  int early_rank;   /* this rank returns before the second collective */
} mock_probe_t;

/* rank r sends (r + 1) bytes of value 16 r + q to each other q in an
 * exchange; in allgatherv it sends r + 1 bytes of value 10 + r. */
static void probe_rank(dpshim__comm_t *c, int rank, void *arg) {
  mock_probe_t *p = arg;
  int P = c->size;
  unsigned char mine[4] = {(unsigned char)rank, 1, 2, (unsigned char)(3 * rank)};
  p->rc[rank][0] = c->ops->allgather(c, mine, 4, p->gathered[rank]);
  if (rank == p->early_rank) return;
  size_t counts[MAXP];
  unsigned char v[MAXP];
  for (int q = 0; q < P; q++) counts[q] = (size_t)q + 1;
  if (rank == p->bad_rank) counts[0]++;
  memset(v, 10 + rank, sizeof v);
  p->rc[rank][1] = c->ops->allgatherv(c, v, p->gatheredv[rank], counts);
  dpshim__comm_piece_t send[MAXP], recv[MAXP];
  unsigned char out[64];
  size_t at = 0, got = 0, ns = 0, nr = 0;
  for (int q = 0; q < P; q++) {
    if (q == rank) continue;
    send[ns++] = (dpshim__comm_piece_t){out + at, (size_t)rank + 1, q, 0};
    for (int b = 0; b <= rank; b++) out[at++] = (unsigned char)(16 * rank + q);
    recv[nr++] = (dpshim__comm_piece_t){p->exchanged[rank] + got,
                                        (size_t)q + 1, q, 0};
    got += (size_t)q + 1;
  }
  c->ops->reserve(c, ns + nr);
  p->rc[rank][2] = c->ops->exchange(c, send, ns, recv, nr);
}

Test(shim_mock, collectives_deliver_in_rank_order) {
  for (int P = 1; P <= MAXP; P++) {
    mock_probe_t p;
    memset(&p, 0, sizeof p);
    p.bad_rank = p.early_rank = -1;
    mock_stats_t st;
    mock_opts_t o = {.size = P, .fail_rank = -1};
    cr_assert_eq(mock_run_ex(&o, probe_rank, &p, &st), 0, "%s", st.message);
    for (int r = 0; r < P; r++) {
      for (int k = 0; k < 3; k++) cr_assert_eq(p.rc[r][k], 0);
      for (int q = 0; q < P; q++) {
        cr_assert_eq(p.gathered[r][4 * q], q);
        cr_assert_eq(p.gathered[r][4 * q + 3], 3 * q);
      }
      size_t at = 0;
      for (int q = 0; q < P; q++)
        for (int b = 0; b <= q; b++) cr_assert_eq(p.gatheredv[r][at++], 10 + q);
      at = 0;
      for (int q = 0; q < P; q++)
        for (int b = 0; b <= q && q != r; b++)
          cr_assert_eq(p.exchanged[r][at++], 16 * q + r,
                       "P %d: rank %d's block from %d", P, r, q);
    }
    cr_assert_eq(st.ops[MOCK_ALLGATHER], 1);
    cr_assert_eq(st.ops[MOCK_ALLGATHERV], 1);
    cr_assert_eq(st.ops[MOCK_EXCHANGE], 1);
    size_t moved = 0; /* nothing to itself */
    for (int r = 0; r < P; r++) moved += (size_t)(r + 1) * (size_t)(P - 1);
    cr_assert_eq(st.alltoallv_moved, moved);
  }
}

Test(shim_mock, disagreeing_counts_are_caught) {
  mock_probe_t p;
  memset(&p, 0, sizeof p);
  p.bad_rank = 2;
  p.early_rank = -1;
  mock_stats_t st;
  mock_opts_t o = {.size = 4, .fail_rank = -1};
  cr_assert_eq(mock_run_ex(&o, probe_rank, &p, &st), -1);
  cr_assert(st.mismatch);
  cr_assert(strstr(st.message, "allgatherv") != NULL, "%s", st.message);
  for (int r = 0; r < 4; r++) {
    cr_assert_eq(p.rc[r][1], DPSHIM_EINVAL);
    cr_assert_eq(p.rc[r][2], DPSHIM_EINVAL);
  }
}

Test(shim_mock, a_rank_that_leaves_is_caught) {
  mock_probe_t p;
  memset(&p, 0, sizeof p);
  p.bad_rank = -1;
  p.early_rank = 1;
  mock_stats_t st;
  mock_opts_t o = {.size = 3, .fail_rank = -1};
  cr_assert_eq(mock_run_ex(&o, probe_rank, &p, &st), -1);
  cr_assert(st.deadlock, "%s", st.message);
  cr_assert_eq(p.rc[0][1], DPSHIM_EINVAL);
}

Test(shim_mock, injected_fault_reaches_every_rank) {
  mock_probe_t p;
  memset(&p, 0, sizeof p);
  p.bad_rank = p.early_rank = -1;
  mock_stats_t st;
  mock_opts_t o = {.size = 3, .fail_rank = 2, .fail_call = 1,
                   .fail_code = DPSHIM_ENOMEM};
  cr_assert_eq(mock_run_ex(&o, probe_rank, &p, &st), 0);
  cr_assert(st.faulted);
  for (int r = 0; r < 3; r++) {
    cr_assert_eq(p.rc[r][0], 0);
    cr_assert_eq(p.rc[r][1], DPSHIM_ENOMEM);
    cr_assert_eq(p.rc[r][2], DPSHIM_ENOMEM);
  }
}
