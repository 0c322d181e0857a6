/* The balance pipeline; see balance.h. */
#include "balance.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "batch_view.h"
#include "exchange.h"
#include "hash.h"
#include "policy.h"
#include "price.h"
#include "repack.h"

#define MESSAGE_BYTES DPSHIM__MESSAGE_BYTES
#define RECORD(slot) (sizeof(header_t) + (slot))

/* What each rank tells the others before anything else. */
typedef struct header {
  int32_t status; /* 0, or this rank's DPSHIM_E* code */
  int32_t id;     /* the rank's name in messages (its world rank) */
  int32_t nsamples;
  int32_t capacity_samples;
  int32_t width;
  int32_t nfields;
  int32_t vision; /* the batch gives its samples' images */
  int64_t step;     /* history key; < 0: none */
  int64_t reserved; /* gathered samples it can hold without allocating */
  int64_t staging_room; /* received bytes it stages without allocating */
  double price[3]; /* its dpshim__price_t: fixed_s, per_byte_s,
                      copied_per_priced (dpshim__price_plan) */
  double meet_s;   /* what its encoder calls meeting cost it (the ViT gate) */
  double wire_per_patch; /* bytes a meeting moves per patch (the gate) */
  double waited_s; /* its time in the last hand-off's first collective */
  int32_t vit_moved; /* its forwards in flight whose images moved */
  int32_t queued;    /* its step-log notes waiting to be sent */
  uint32_t field[DPSHIM__MAX_FIELDS]; /* dpshim__field_signature() */
  double note[DPSHIM__NOTES];
  int64_t capacity_rows[DPSHIM__MAX_FIELDS];
} header_t;

size_t dpshim__balance_header_bytes(void) { return sizeof(header_t); }

size_t dpshim__balance_slot_bytes(size_t most) {
  return (most + most / 4 + 7) / 8 * 8; /* room to grow; records aligned */
}

struct dpshim__balancer {
  dpshim__balance_config_t cfg;
  const int32_t *host; /* [size] each rank's host, or NULL */
  int tell_hosts;      /* the solver gets them */
  double inter_host_cost;
  dpshim_plan_t plan;
  /* The ViT gate's other plan: the LLM's part alone, for a micro-batch
   * whose encoder calls meet (swapped with `plan` when taken). */
  dpshim_plan_t meeting;
  int solved;       /* this hand-off's plan was solved */
  int took_meeting; /* and then the meeting plan, whose report replaced */
  dpshim__balance_report_t first_report; /* the first plan's */
  double apart_end; /* the gate's: the step's end with the calls apart (us) */
  double llm_bound; /* and at best under a plan of the LLM's part, met */
  int gate_held; /* apart only for what meetings measured (the retry's) */
  double gate_unmeasured; /* the meeting priced without that measure (s) */
  dpshim__policy_retry_t retry;
  dpshim__price_t price; /* what applying costs this rank */
  int exchanged; /* this group has applied a plan: its ranks are connected */
  /* The ViT gate: the encoder's part of a sample's cost (a: patches_sq,
   * b: patches; microseconds), on when `gating`. */
  dpshim_cost_model_t encoder;
  int gating;
  int gathered; /* this hand-off's metas are in b->samples */
  double waited_s; /* this rank's time in the last first collective */
  int32_t size; /* group size the per-rank arrays hold */
  double *history;
  double *cost_s; /* [size]: what applying the plan costs each rank (auto) */
  double *load_now; /* [size]: each rank's load before solving (auto) */
  double *gate;     /* [3 * size]: the ViT gate's before, llm, enc */
  int64_t step;
  header_t *headers;
  size_t *counts;   /* [size]: gather bytes */
  int64_t *bytes;   /* [2 * size]: every rank's bytes sent, received */
  int64_t *first;   /* [size + 1]: each rank's first sample in the group */
  dpshim__agree_t agree;
  uint64_t *checks; /* [3 * size]: verify's plan hash, sent, received */
  double *notes;    /* [size * DPSHIM__NOTES] */
  /* Each rank's header travels with its samples' metas when they fit in
   * `slot` bytes: one collective instead of two. The slot grows, agreed,
   * when some rank's metas did not fit. */
  size_t slot, next_slot;
  unsigned char *post;  /* [RECORD(slot)]: this rank's header and metas */
  unsigned char *board; /* [size * RECORD(slot)]: every rank's */
  int32_t *meta;    /* every sample's meta, in rank order */
  dpshim_sample_t *samples;
  int64_t *use;     /* [size * (MAX_FIELDS + 1)]: samples and rows per rank */
  int64_t *room;    /* the same shape: what each rank's buffers hold */
  dpshim__exchange_t exchange;
  size_t meta_cap, samples_cap;
};

/* Grows *p to hold n elements of `elem` bytes. */
static int grow(void *pp, size_t *cap, size_t n, size_t elem) {
  void **p = pp;
  if (n <= *cap && *p) return 0;
  size_t want = n > 2 * *cap ? n : 2 * *cap;
  void *q = realloc(*p, (want ? want : 1) * elem);
  if (!q) return DPSHIM_ENOMEM;
  *p = q;
  *cap = want;
  return 0;
}

dpshim__balancer_t *dpshim__balancer_new(const dpshim__balance_config_t *cfg) {
  dpshim__balancer_t *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  b->cfg = *cfg;
  b->step = -1;
  dpshim_plan_init(&b->plan);
  dpshim_plan_init(&b->meeting);
  dpshim__price_init(&b->price);
  return b;
}

static void free_rank_arrays(dpshim__balancer_t *b) {
  free(b->history);
  free(b->cost_s);
  free(b->load_now);
  free(b->gate);
  free(b->headers);
  free(b->counts);
  free(b->bytes);
  free(b->first);
  dpshim__agree_free(&b->agree);
  free(b->checks);
  free(b->use);
  free(b->room);
  free(b->notes);
  free(b->post);
  free(b->board);
}

void dpshim__balancer_free(dpshim__balancer_t *b) {
  if (!b) return;
  free_rank_arrays(b);
  free(b->meta);
  free(b->samples);
  dpshim__exchange_free(&b->exchange);
  dpshim_plan_free(&b->plan);
  dpshim_plan_free(&b->meeting);
  free(b);
}

void dpshim__balancer_set_model(dpshim__balancer_t *b,
                                dpshim_cost_model_t model, int priced) {
  b->cfg.model = model;
  b->cfg.priced = priced;
}

void dpshim__balancer_set_encoder(dpshim__balancer_t *b,
                                  dpshim_cost_model_t encoder, int on) {
  b->encoder = encoder;
  b->gating = on;
}

void dpshim__balancer_set_hosts(dpshim__balancer_t *b, const int32_t *host,
                                int tell, double inter_host_cost) {
  b->host = host;
  b->tell_hosts = tell;
  b->inter_host_cost = inter_host_cost;
}

static int ensure_group(dpshim__balancer_t *b, int32_t size) {
  if (b->size == size) return 0;
  free_rank_arrays(b);
  b->size = size;
  b->step = -1;
  b->history = calloc((size_t)size, sizeof *b->history);
  b->cost_s = calloc((size_t)size, sizeof *b->cost_s);
  b->load_now = calloc((size_t)size, sizeof *b->load_now);
  b->gate = calloc(3 * (size_t)size, sizeof *b->gate);
  b->headers = calloc((size_t)size, sizeof *b->headers);
  b->counts = calloc((size_t)size, sizeof *b->counts);
  b->bytes = calloc(2 * (size_t)size, sizeof *b->bytes);
  b->first = calloc((size_t)size + 1, sizeof *b->first);
  b->checks = calloc(3 * (size_t)size, sizeof *b->checks);
  b->use = calloc((size_t)size * (DPSHIM__MAX_FIELDS + 1), sizeof *b->use);
  b->room = calloc((size_t)size * (DPSHIM__MAX_FIELDS + 1), sizeof *b->room);
  b->notes = calloc((size_t)size * DPSHIM__NOTES, sizeof *b->notes);
  b->slot = b->next_slot = 0;
  b->post = calloc(1, RECORD(0));
  b->board = calloc((size_t)size, RECORD(0));
  if (b->history && b->cost_s && b->load_now && b->gate && b->headers &&
      b->counts && b->bytes && b->first &&
      dpshim__agree_reserve(&b->agree, size) == 0 && b->checks && b->use &&
      b->room && b->notes && b->post && b->board)
    return 0;
  free_rank_arrays(b);
  b->size = 0;
  return DPSHIM_ENOMEM;
}

/* ---- agreement ------------------------------------------------------------ */

/* The statuses gathered with the headers, settled (agree.h). */
static int settle(dpshim__balancer_t *b, dpshim__comm_t *comm,
                  const char *mine, dpshim__balance_report_t *rep) {
  return dpshim__agree_settle(&b->agree, comm, mine, rep->message,
                              sizeof rep->message);
}

static int agree(dpshim__balancer_t *b, dpshim__comm_t *comm, int32_t status,
                 const char *mine, dpshim__balance_report_t *rep) {
  return dpshim__agree(&b->agree, comm, status, mine, rep->message,
                       sizeof rep->message);
}

/* ---- gathering ------------------------------------------------------------ */

static int local_header(dpshim__balancer_t *b, dpshim__comm_t *comm,
                        const dpshim_batch_t *batch, dpshim__layout_t *l,
                        header_t *h, char *msg) {
  int rc = dpshim__layout_of(batch, l, msg, MESSAGE_BYTES);
  if (rc < 0) return rc;
  h->nsamples = batch->nsamples;
  h->capacity_samples = batch->capacity_samples;
  h->width = l->width;
  h->nfields = l->nfields;
  h->vision = l->vision != 0;
  h->reserved = (int64_t)(b->meta_cap / (size_t)l->width);
  if ((int64_t)b->samples_cap < h->reserved) h->reserved = (int64_t)b->samples_cap;
  h->staging_room = (int64_t)b->exchange.staging_cap;
  for (int32_t f = 0; f < l->nfields; f++) {
    h->field[f] = dpshim__field_signature(batch, l, f);
    h->capacity_rows[f] = batch->fields[f].capacity_rows;
  }
  if (dpshim__exchange_reserve(&b->exchange, comm, batch, l) < 0) {
    snprintf(msg, MESSAGE_BYTES, "out of memory for the exchange buffers");
    return DPSHIM_ENOMEM;
  }
  return 0;
}

/* The first field in which header h differs from rank 0's, or -1. */
static int32_t differing_field(const header_t *h, const header_t *h0) {
  int32_t n = h->nfields > h0->nfields ? h->nfields : h0->nfields;
  for (int32_t f = 0; f < n; f++)
    if (f >= h->nfields || f >= h0->nfields || h->field[f] != h0->field[f])
      return f;
  return -1;
}

/* Fields are part of what every rank agrees on: the same names, row sizes
 * and kinds, in the same order, and images given or not. A rank that
 * differs says which of its fields does, in an agreed error. */
static int check_fields(dpshim__balancer_t *b, dpshim__comm_t *comm,
                        const dpshim_batch_t *batch,
                        dpshim__balance_report_t *rep) {
  const header_t *h0 = &b->headers[0], *mine = &b->headers[comm->rank];
  int any = 0;
  for (int32_t r = 1; r < b->size; r++)
    any |= differing_field(&b->headers[r], h0) >= 0 ||
           b->headers[r].vision != h0->vision;
  if (!any) return 0;
  char msg[MESSAGE_BYTES] = "";
  int32_t f = differing_field(mine, h0);
  if (f < 0 && mine->vision != h0->vision)
    snprintf(msg, sizeof msg,
             "vision %s, rank %d's %s: expected every rank to give its "
             "samples' images or none", mine->vision ? "given" : "NULL",
             (int)h0->id, h0->vision ? "given" : "NULL");
  else if (f >= 0 && f < batch->nfields)
    snprintf(msg, sizeof msg,
             "field %d ('%.32s') differs from rank %d's: expected the same "
             "fields in the same order on every rank", (int)f,
             batch->fields[f].name ? batch->fields[f].name : "?",
             (int)b->headers[0].id);
  else if (f >= 0)
    snprintf(msg, sizeof msg,
             "field %d: none here, rank %d has %d fields: expected the same "
             "fields on every rank", (int)f, (int)b->headers[0].id,
             (int)b->headers[0].nfields);
  return agree(b, comm, msg[0] ? DPSHIM_EINVAL : 0, msg, rep);
}

static void count_samples(dpshim__balancer_t *b) {
  int64_t n = 0;
  for (int32_t r = 0; r < b->size; r++) {
    b->first[r] = n;
    n += b->headers[r].nsamples;
  }
  b->first[b->size] = n;
}

static size_t meta_bytes(const header_t *h) {
  return (size_t)h->nsamples * (size_t)h->width * sizeof(int32_t);
}

/* Whether every rank's metas came with its header. */
static int metas_posted(const dpshim__balancer_t *b) {
  for (int32_t r = 0; r < b->size; r++)
    if (meta_bytes(&b->headers[r]) > b->slot) return 0;
  return 1;
}

/* All metas into b->meta, in rank order, from the board or by a gather of
 * their own; samples[] from them. */
static int gather_meta(dpshim__balancer_t *b, dpshim__comm_t *comm,
                       const dpshim_batch_t *batch, const dpshim__layout_t *l) {
  size_t width = (size_t)l->width;
  if (metas_posted(b)) {
    for (int32_t r = 0; r < b->size; r++)
      memcpy(b->meta + (size_t)b->first[r] * width,
             b->board + (size_t)r * RECORD(b->slot) + sizeof(header_t),
             meta_bytes(&b->headers[r]));
  } else {
    int32_t *mine = b->exchange.recv_meta; /* free until the exchange */
    for (int32_t i = 0; i < batch->nsamples; i++)
      dpshim__meta_of(batch, l, i, mine + (size_t)i * width);
    for (int32_t r = 0; r < b->size; r++)
      b->counts[r] = meta_bytes(&b->headers[r]);
    int rc = comm->ops->allgatherv(comm, mine, b->meta, b->counts);
    if (rc < 0) return rc;
  }
  for (int32_t r = 0; r < b->size; r++) {
    for (int64_t i = b->first[r]; i < b->first[r + 1]; i++) {
      const int32_t *m = b->meta + (size_t)i * width;
      dpshim_vision_t v = dpshim__meta_vision(l, m);
      b->samples[i] = (dpshim_sample_t){m[0], dpshim__meta_bytes(l, m), r, 0,
                                        v.patches, v.patches_sq};
    }
  }
  return 0;
}

/* The header, with the metas when they fit and a plan is wanted. */
static void post(dpshim__balancer_t *b, const dpshim_batch_t *batch,
                 const dpshim__layout_t *l, const header_t *h, int plan) {
  memcpy(b->post, h, sizeof *h);
  if (!plan || h->status != 0 || meta_bytes(h) > b->slot) return;
  int32_t *meta = (int32_t *)(void *)(b->post + sizeof *h);
  for (int32_t i = 0; i < batch->nsamples; i++)
    dpshim__meta_of(batch, l, i, meta + (size_t)i * (size_t)l->width);
}

static void read_board(dpshim__balancer_t *b,
                       dpshim__balance_report_t *rep) {
  for (int32_t r = 0; r < b->size; r++) {
    memcpy(&b->headers[r], b->board + (size_t)r * RECORD(b->slot),
           sizeof(header_t));
    memcpy(b->notes + (size_t)r * DPSHIM__NOTES, b->headers[r].note,
           sizeof b->headers[r].note);
    b->agree.status[r] = b->headers[r].status;
    if (b->headers[r].queued > rep->queued_max)
      rep->queued_max = b->headers[r].queued;
  }
}

/* ---- planning ------------------------------------------------------------- */

/* The original's ratio where one is set. With `auto` the solver skips
 * nothing as balanced (the plan is priced once solved), unless the model
 * cannot price it yet (not fitted, not given). */
static double solver_threshold(const dpshim__balancer_t *b) {
  if (b->cfg.threshold >= 0) return b->cfg.threshold;
  return b->cfg.priced ? 0 : DPSHIM__THRESHOLD_UNPRICED;
}

static int64_t total_tokens(const dpshim__balancer_t *b, int64_t n) {
  int64_t tokens = 0;
  for (int64_t i = 0; i < n; i++) tokens += b->samples[i].len;
  return tokens;
}

/* The configured cap, lowered to what every rank's token buffers hold. */
static double cap_ratio(dpshim__balancer_t *b, const dpshim__layout_t *l,
                        int64_t tokens) {
  int64_t *rows = b->use; /* free until the capacity check */
  for (int32_t r = 0; r < b->size; r++) {
    rows[r] = -1;
    for (int32_t f = 0; f < l->nfields; f++)
      if (l->kind[f] == DPSHIM__ROWS_TOKENS &&
          (rows[r] < 0 || b->headers[r].capacity_rows[f] < rows[r]))
        rows[r] = b->headers[r].capacity_rows[f];
  }
  return dpshim__policy_cap_ratio(b->cfg.cap_ratio, rows, b->size, tokens);
}

/* The field with its own offsets whose rows fill the group's buffers most
 * (image rows, as a rule), or -1 when none holds a row. The solver caps its
 * rows per rank at each rank's capacity; plan_fits checks the others. */
static int32_t binding_rows_field(const dpshim__balancer_t *b,
                                  const dpshim__layout_t *l, int64_t n) {
  int32_t best = -1;
  double best_fill = 0;
  for (int32_t f = 0; f < l->nfields; f++) {
    if (l->kind[f] != DPSHIM__ROWS_OWN) continue;
    double used = 0, room = 0;
    for (int64_t i = 0; i < n; i++)
      used += (double)dpshim__meta_rows(
          l, f, b->meta + (size_t)i * (size_t)l->width);
    for (int32_t r = 0; r < b->size; r++)
      room += (double)b->headers[r].capacity_rows[f];
    double fill = room > 0 ? used / room : 0;
    if (used > 0 && fill > best_fill) best = f, best_fill = fill;
  }
  return best;
}

/* Each sample's rows of field f, and each rank's room for them in
 * b->room (free until plan_fits). */
static const int64_t *rows_caps(dpshim__balancer_t *b,
                                const dpshim__layout_t *l, int64_t n) {
  int32_t f = binding_rows_field(b, l, n);
  for (int64_t i = 0; i < n; i++)
    b->samples[i].rows =
        f < 0 ? 0
              : dpshim__meta_rows(l, f, b->meta + (size_t)i * (size_t)l->width);
  if (f < 0) return NULL;
  for (int32_t r = 0; r < b->size; r++)
    b->room[r] = b->headers[r].capacity_rows[f];
  return b->room;
}

/* Into b->plan, under `model`, from `history` (NULL: none). */
static int solve(dpshim__balancer_t *b, const dpshim__layout_t *l, int64_t n,
                 dpshim_cost_model_t model, const double *history,
                 char *msg) {
  const int64_t *rows_cap = rows_caps(b, l, n);
  dpshim_plan_input_t in = {
      .ranks = b->size,
      .nsamples = n,
      .samples = b->samples,
      .history = history,
      .history_len = history ? b->size : 0,
      .model = model,
      .cap_ratio = cap_ratio(b, l, total_tokens(b, n)),
      .threshold = solver_threshold(b),
      .algo = b->cfg.algo,
      .rows_cap = rows_cap,
      .rows_cap_len = rows_cap ? b->size : 0,
      .host = b->host,
      .host_len = b->host ? b->size : 0,
      .ignore_hosts = !b->tell_hosts,
      .inter_host_cost = b->inter_host_cost,
  };
  int rc = dpshim_plan_solve(&in, &b->plan);
  if (rc < 0) snprintf(msg, MESSAGE_BYTES, "solver: %.150s", b->plan.message);
  return rc;
}

/* Each rank's capacities into b->room: samples, then rows field by field. */
static void fill_room(dpshim__balancer_t *b, const dpshim__layout_t *l) {
  size_t stride = (size_t)l->nfields + 1;
  for (int32_t r = 0; r < b->size; r++) {
    int64_t *room = b->room + (size_t)r * stride;
    room[0] = b->headers[r].capacity_samples;
    memcpy(room + 1, b->headers[r].capacity_rows,
           (size_t)l->nfields * sizeof *room);
  }
}

/* Sample i's count and rows added to u (as b->use and b->room). */
static void add_use(const dpshim__balancer_t *b, const dpshim__layout_t *l,
                    int64_t i, int64_t *u) {
  const int32_t *m = b->meta + (size_t)i * (size_t)l->width;
  u[0]++;
  for (int32_t f = 0; f < l->nfields; f++) u[f + 1] += dpshim__meta_rows(l, f, m);
}

/* Whether every rank can hold what the plan gives it: samples and rows of
 * every field, against the capacities in its header. */
static int plan_fits(dpshim__balancer_t *b, const dpshim__layout_t *l,
                     int64_t n) {
  size_t stride = (size_t)l->nfields + 1, count = (size_t)b->size * stride;
  memset(b->use, 0, count * sizeof *b->use);
  for (int64_t i = 0; i < n; i++)
    add_use(b, l, i, b->use + (size_t)b->plan.dest[i] * stride);
  fill_room(b, l);
  return dpshim__policy_fits(b->use, b->room, count);
}

/* ---- exchange ------------------------------------------------------------- */

/* Every rank's bytes sent and received (b->bytes), and whether MPI's int
 * counts hold every rank's totals (checked for all, so all agree). */
static int plan_counts(dpshim__balancer_t *b) {
  int64_t *sent = b->bytes, *received = b->bytes + b->size;
  memset(sent, 0, 2 * (size_t)b->size * sizeof *sent);
  for (int64_t i = 0; i < b->first[b->size]; i++) {
    int32_t from = b->samples[i].origin, to = b->plan.dest[i];
    if (from == to) continue; /* stays: not sent */
    sent[from] += b->samples[i].bytes;
    received[to] += b->samples[i].bytes;
  }
  for (int32_t r = 0; r < b->size; r++)
    if (sent[r] > INT_MAX || received[r] > INT_MAX) return 0;
  return 1;
}

/* Whether each rank stages what it receives (b->use[r * stride], 1 or 0):
 * exchange.h's test on every rank's gathered numbers, what it holds and
 * receives against its capacities, as that rank takes it on its own. */
static void find_staging(dpshim__balancer_t *b, const dpshim__layout_t *l) {
  size_t stride = (size_t)l->nfields + 1, count = (size_t)b->size * stride;
  memset(b->use, 0, count * sizeof *b->use);
  for (int64_t i = 0; i < b->first[b->size]; i++) {
    int32_t from = b->samples[i].origin, to = b->plan.dest[i];
    add_use(b, l, i, b->use + (size_t)from * stride);
    if (to != from) add_use(b, l, i, b->use + (size_t)to * stride);
  }
  fill_room(b, l);
  for (int32_t r = 0; r < b->size; r++) {
    int64_t *u = b->use + (size_t)r * stride;
    u[0] = !dpshim__policy_fits(u, b->room + (size_t)r * stride, stride);
  }
}

/* The staging buffer for this plan, on the ranks that stage. Only a rank
 * whose buffer must grow can fail, and every rank can tell which must: an
 * agreement round runs only then. */
static int reserve_exchange(dpshim__balancer_t *b, dpshim__comm_t *comm,
                            const dpshim__layout_t *l,
                            dpshim__balance_report_t *rep) {
  size_t stride = (size_t)l->nfields + 1;
  int any = 0;
  find_staging(b, l);
  for (int32_t r = 0; r < b->size; r++)
    any |= b->use[(size_t)r * stride] &&
           b->bytes[b->size + r] > b->headers[r].staging_room;
  if (!any) return 0;
  int rc = 0;
  if (b->use[(size_t)comm->rank * stride])
    rc = dpshim__exchange_reserve_staging(
        &b->exchange, (size_t)b->bytes[b->size + comm->rank]);
  return agree(b, comm, rc, "out of memory for the exchange buffers", rep);
}

/* The plan's samples to their ranks, and the batch repacked (exchange.h). */
static int exchange(dpshim__balancer_t *b, dpshim__comm_t *comm,
                    dpshim_batch_t *batch, const dpshim__layout_t *l,
                    dpshim__exchange_result_t *moved,
                    dpshim__balance_report_t *rep) {
  dpshim__exchange_plan_t p = {b->first, b->plan.dest, b->meta};
  int rc = dpshim__exchange_run(&b->exchange, comm, batch, l, &p,
                                b->cfg.verify, b->cfg.clock, moved);
  rep->exchange_s = moved->exchange_s;
  rep->repack_s = moved->repack_s;
  rep->repack_bytes = moved->copied;
  rep->staged = moved->staged;
  return rc;
}

/* ---- verification --------------------------------------------------------- */

/* Every rank solved the same plan, and the records received over the group
 * are the records sent (sums of their hashes). Runs after the exchange. */
static int verify(dpshim__balancer_t *b, dpshim__comm_t *comm,
                  const dpshim__exchange_result_t *moved,
                  dpshim__balance_report_t *rep) {
  uint64_t mine[3] = {dpshim__fnv(DPSHIM__FNV_SEED, b->plan.dest,
                                  (size_t)b->first[b->size] * sizeof(int32_t)),
                      moved->sent_hash, moved->received_hash};
  int rc = comm->ops->allgather(comm, mine, sizeof mine, b->checks);
  if (rc < 0) return rc;
  uint64_t sent = 0, received = 0;
  for (int32_t r = 0; r < comm->size; r++) {
    if (b->checks[3 * r] != b->checks[0]) {
      snprintf(rep->message, sizeof rep->message,
               "verify: rank %d solved another plan than rank %d",
               (int)b->headers[r].id, (int)b->headers[0].id);
      return DPSHIM_EINVAL;
    }
    sent += b->checks[3 * r + 1];
    received += b->checks[3 * r + 2];
  }
  if (sent == received) return 0;
  snprintf(rep->message, sizeof rep->message,
           "verify: the samples received differ from the samples sent");
  return DPSHIM_EINVAL;
}

/* ---- the pipeline --------------------------------------------------------- */

static void report_plan(const dpshim__balancer_t *b, int64_t n,
                        int64_t tokens, dpshim__balance_report_t *rep) {
  rep->samples = n;
  rep->tokens = tokens;
  rep->bytes_moved = b->plan.bytes_moved;
  rep->bytes_total = b->plan.bytes_total;
  rep->bytes_inter_host = b->plan.bytes_inter_host;
  rep->imbalance_before = b->plan.imbalance_before;
  rep->imbalance_after = b->plan.imbalance_after;
  rep->lower_bound = b->plan.lower_bound;
  rep->load_before = b->plan.load_before;
  rep->load_after = b->plan.load_after;
}

/* Whether and why not to apply the solved plan: the same answer everywhere. */
static const char *skip_reason(dpshim__balancer_t *b,
                               const dpshim__layout_t *l) {
  int64_t n = b->first[b->size];
  const char *why = dpshim__policy_skip(&b->plan, b->samples, n, b->size,
                                        b->cfg.algo, plan_fits(b, l, n));
  if (why) return why;
  return plan_counts(b) ? NULL : "exchange-too-large";
}

/* The bytes rank r's samples behind the first it sends: what closing its
 * holes by shifting copies. */
static int64_t behind_first_hole(const dpshim__balancer_t *b, int32_t r) {
  int64_t behind = 0;
  int hole = 0;
  for (int64_t i = b->first[r]; i < b->first[r + 1]; i++) {
    if (b->plan.dest[i] != r) hole = 1;
    else if (hole) behind += b->samples[i].bytes;
  }
  return behind;
}

/* The bytes rank r moves to apply the plan, as priced: what it sends and
 * receives (b->bytes), and what closing its holes copies (repack.h), the
 * samples received in place behind them (exchange.h). */
static double priced_bytes(const dpshim__balancer_t *b, int32_t r) {
  int64_t sent = b->bytes[r], received = b->bytes[b->size + r];
  return (double)(sent + received +
                  dpshim__repack_priced(sent,
                                        behind_first_hole(b, r) + received));
}

/* The bytes this rank moved applying the plan. */
static double copied_bytes(const dpshim__balancer_t *b, int32_t r,
                           const dpshim__balance_report_t *rep) {
  return (double)(b->bytes[r] + b->bytes[b->size + r] + rep->repack_bytes);
}

/* What applying the plan costs each rank (b->cost_s), each priced by its
 * own line (price.h); returns the most. */
static double applying_cost(dpshim__balancer_t *b) {
  double most = 0;
  for (int32_t r = 0; r < b->size; r++) {
    b->cost_s[r] = dpshim__price_plan(b->headers[r].price, priced_bytes(b, r));
    most = fmax(most, b->cost_s[r]);
  }
  return most;
}

/* `auto`: whether the plan pays for what applying it costs. */
static const char *priced_skip(dpshim__balancer_t *b,
                               dpshim__balance_report_t *rep) {
  applying_cost(b);
  return dpshim__policy_worth(&b->plan, b->cost_s, b->size, &rep->saving_s,
                              &rep->cost_s);
}

/* `auto`, before solving: whether any plan could pay (policy.h); where
 * none can, the step's history takes the loads as they are, as after a
 * solved plan that is skipped. The same answer everywhere: gathered data. */
static const char *unpayable(dpshim__balancer_t *b,
                             dpshim__balance_report_t *rep) {
  double *fixed = b->cost_s;
  for (int32_t r = 0; r < b->size; r++) {
    b->load_now[r] = b->history[r];
    for (int64_t i = b->first[r]; i < b->first[r + 1]; i++)
      b->load_now[r] += dpshim_sample_cost(b->cfg.model, &b->samples[i]);
    fixed[r] = b->headers[r].price[0];
  }
  const char *why = dpshim__policy_cannot_pay(b->load_now, fixed, b->size,
                                              &rep->saving_s, &rep->cost_s);
  if (!why) return NULL;
  rep->imbalance_before = dpshim__policy_imbalance(b->load_now, b->size);
  memcpy(b->history, b->load_now, (size_t)b->size * sizeof *b->history);
  return why;
}

static const char *precheck(dpshim__balancer_t *b) {
  int32_t *counts = b->agree.status; /* free once settled */
  for (int32_t r = 0; r < b->size; r++) counts[r] = b->headers[r].nsamples;
  return dpshim__policy_precheck(counts, b->size);
}

/* A new step starts from no history; hand-offs without a step key (< 0)
 * have none at all. */
static void enter_step(dpshim__balancer_t *b) {
  int64_t step = b->step, none = 0;
  for (int32_t r = 0; r < b->size; r++) {
    none |= b->headers[r].step < 0;
    if (b->headers[r].step > step) step = b->headers[r].step;
  }
  if (step == b->step && !none) return;
  b->step = step;
  memset(b->history, 0, (size_t)b->size * sizeof *b->history);
}

/* Room for n gathered samples, and a slot for every rank's metas. Steady
 * state needs neither, and then no agreement round: every rank can see that
 * from the headers. */
static int reserve_group(dpshim__balancer_t *b, dpshim__comm_t *comm,
                         const dpshim__layout_t *l, int64_t n,
                         dpshim__balance_report_t *rep) {
  int64_t room = INT64_MAX;
  size_t most = 0;
  for (int32_t r = 0; r < b->size; r++) {
    if (b->headers[r].reserved < room) room = b->headers[r].reserved;
    if (meta_bytes(&b->headers[r]) > most) most = meta_bytes(&b->headers[r]);
  }
  if (n <= room && most <= b->slot) return 0;
  size_t want = (size_t)(n + n / 2); /* so that the next steps fit */
  size_t slot = dpshim__balance_slot_bytes(most);
  size_t post_cap = RECORD(b->slot), board_cap = b->size * RECORD(b->slot);
  int rc = 0;
  if (grow(&b->meta, &b->meta_cap, want * (size_t)l->width,
           sizeof(int32_t)) < 0 ||
      grow(&b->samples, &b->samples_cap, want, sizeof *b->samples) < 0 ||
      grow(&b->post, &post_cap, RECORD(slot), 1) < 0 ||
      grow(&b->board, &board_cap, b->size * RECORD(slot), 1) < 0)
    rc = DPSHIM_ENOMEM;
  rc = agree(b, comm, rc, "out of memory for the gathered samples", rep);
  if (rc < 0) return rc;
  /* The board is re-read with the new slot by the next call only. */
  b->next_slot = slot > b->slot ? slot : b->slot;
  return 0;
}

/* Gathers and solves; 0 with a solved plan, or the agreed error. */
static int plan_group(dpshim__balancer_t *b, dpshim__comm_t *comm,
                      const dpshim_batch_t *batch, const dpshim__layout_t *l,
                      dpshim__balance_report_t *rep) {
  char msg[MESSAGE_BYTES] = "";
  int64_t n = b->first[b->size];
  int rc = reserve_group(b, comm, l, n, rep);
  if (rc < 0) return rc;
  rc = gather_meta(b, comm, batch, l);
  if (rc < 0) return rc;
  b->gathered = 1;
  if (b->cfg.threshold < 0 && b->cfg.priced &&
      (rep->skip_reason = unpayable(b, rep)))
    return 0;
  rc = solve(b, l, n, b->cfg.model, b->history, msg);
  /* Only a solve that allocated can have failed on one rank alone; whether
   * it allocated is the same on every rank. */
  if (rc < 0 || b->plan.allocations > 0) rc = agree(b, comm, rc, msg, rep);
  if (rc < 0) return rc;
  b->solved = 1;
  report_plan(b, n, total_tokens(b, n), rep);
  return 0;
}

/* The first collective: every rank's header (and metas) to every rank, and
 * the errors any rank found in its batch, agreed. */
static int gather_headers(dpshim__balancer_t *b, dpshim__comm_t *comm,
                          const dpshim_batch_t *batch,
                          const dpshim__handoff_t *ho, dpshim__layout_t *l,
                          dpshim__balance_report_t *rep) {
  char msg[MESSAGE_BYTES] = "";
  header_t h;
  memset(&h, 0, sizeof h);
  h.id = comm->id;
  h.step = ho->step;
  h.price[0] = b->price.fixed_s;
  h.price[1] = b->price.per_byte_s;
  h.price[2] = b->price.copied_per_priced;
  h.meet_s = ho->meet_s;
  h.wire_per_patch = ho->wire_per_patch;
  h.waited_s = b->waited_s;
  h.vit_moved = ho->vit_moved;
  h.queued = ho->queued;
  if (ho->note) memcpy(h.note, ho->note, sizeof h.note);
  if (ho->invalid) {
    snprintf(msg, MESSAGE_BYTES, "%s", ho->invalid);
    h.status = DPSHIM_EINVAL;
  } else {
    h.status = local_header(b, comm, batch, l, &h, msg);
  }
  b->slot = b->next_slot;
  post(b, batch, l, &h, ho->plan);
  double arrived = b->cfg.clock ? b->cfg.clock() : 0;
  int rc = comm->ops->allgather(comm, b->post, RECORD(b->slot), b->board);
  if (rc < 0) return rc;
  if (b->cfg.clock) rep->arrival_wait = b->waited_s = b->cfg.clock() - arrived;
  read_board(b, rep);
  rep->notes = b->notes;
  rc = settle(b, comm, msg, rep);
  if (rc < 0) return rc;
  rc = check_fields(b, comm, batch, rep);
  if (rc < 0) return rc;
  count_samples(b);
  rep->samples = b->first[b->size];
  return 0;
}

/* Everything up to the decision: 0 with rep->skip_reason set or NULL (to
 * apply), or the group's agreed error. */
static int decide(dpshim__balancer_t *b, dpshim__comm_t *comm,
                  const dpshim_batch_t *batch, const dpshim__handoff_t *ho,
                  dpshim__layout_t *l, dpshim__balance_report_t *rep) {
  int rc = gather_headers(b, comm, batch, ho, l, rep);
  if (rc < 0) return rc;
  enter_step(b);
  memcpy(b->gate, b->history, (size_t)b->size * sizeof *b->history);
  rep->skip_reason = ho->plan ? precheck(b) : "warmup";
  if (rep->skip_reason) return 0;
  rc = plan_group(b, comm, batch, l, rep);
  if (rc < 0 || rep->skip_reason) return rc;
  rep->skip_reason = skip_reason(b, l);
  if (!rep->skip_reason && b->cfg.threshold < 0 && b->cfg.priced)
    rep->skip_reason = priced_skip(b, rep);
  if (!rep->skip_reason) rc = reserve_exchange(b, comm, l, rep);
  return rc;
}

/* A skip priced as not worth it (the back-off's cue, core.c). */
static int priced_out(int rc, const dpshim__balance_report_t *rep) {
  return rc == 0 && rep->skip_reason &&
         !strcmp(rep->skip_reason, DPSHIM__POLICY_NOT_WORTH_IT);
}

static void swap_plans(dpshim__balancer_t *b) {
  dpshim_plan_t kept = b->plan;
  b->plan = b->meeting;
  b->meeting = kept;
}

/* Back from the meeting plan (meet_with_llm_plan) to the first one. */
static void drop_meeting_plan(dpshim__balancer_t *b,
                              dpshim__balance_report_t *rep) {
  swap_plans(b);
  *rep = b->first_report;
  b->took_meeting = 0;
  if (!rep->skip_reason) plan_counts(b);
}

/* Groups whose ranks are TP/CP peers hold the same samples and must stay
 * so: each group's outcome goes to its peers, and the least of them (an
 * error, else a skip, else apply) is every peer group's; so is whether
 * every group priced its plan out, and whether every group took the ViT
 * gate's meeting plan (the same plan on all: the same samples), which
 * else all drop. Collective over the peers, reached once per hand-off
 * whatever the outcome. */
static int agree_peers(dpshim__balancer_t *b, dpshim__comm_t *peers, int rc,
                       dpshim__balance_report_t *rep) {
  const dpshim__balance_report_t *first =
      b->took_meeting ? &b->first_report : rep;
  rep->backoff_ok = priced_out(rc, first);
  if (!peers || peers->size < 2) return rc;
  int64_t v[5] = {rc < 0, rc == 0 && rep->skip_reason != NULL,
                  !rep->backoff_ok, rc == 0 && !b->took_meeting,
                  rc == 0 && first->skip_reason != NULL};
  int prc = peers->ops->max(peers, v, 5);
  if (prc < 0) return prc;
  if (rc < 0) return rc;
  if (v[0]) {
    snprintf(rep->message, sizeof rep->message,
             "a TP/CP peer's DP group could not balance this hand-off");
    return DPSHIM_EINVAL;
  }
  if (v[3]) { /* every group on its first plan: their skips count */
    if (b->took_meeting) drop_meeting_plan(b, rep);
    v[1] = v[4];
  }
  rep->backoff_ok = !v[2];
  if (v[1] && !rep->skip_reason) rep->skip_reason = "peer-skip";
  return 0;
}

/* Rank r's images under the plan. */
static dpshim_vision_t held_vision(const dpshim__balancer_t *b, int32_t r) {
  dpshim_vision_t v = {0, 0};
  for (int64_t i = 0; i < b->first[b->size]; i++)
    if (b->plan.dest[i] == r) {
      v.patches += b->samples[i].patches;
      v.patches_sq += b->samples[i].patches_sq;
    }
  return v;
}

/* What evening the images would copy, at the least (policy.h), there and
 * back, each rank at its own price (price.h). bytes[r]: one way's bytes of
 * rank r's samples where they end up (a sample's, images and all, or half
 * of what meeting moves for its patches where the calls so far tell:
 * inputs one way, embeddings and their gradients the other); overwritten. */
static double exchange_floor(const dpshim__balancer_t *b, const double *enc,
                             double *bytes) {
  double cost = 0;
  dpshim__policy_vit_sent(enc, bytes, b->size, bytes);
  for (int32_t r = 0; r < b->size; r++)
    if (bytes[r] > 0)
      cost = fmax(cost, 2 * (b->headers[r].price[0] +
                             b->headers[r].price[1] * bytes[r]));
  return cost;
}

/* Per rank, with the samples at dest (NULL: where they are): the LLM's and
 * the encoder's parts of what it holds, and one way's bytes (see
 * exchange_floor) at `wire` bytes a patch (policy.h). */
static double gate_loads(const dpshim__balancer_t *b, const int32_t *dest,
                         double wire, double *llm, double *enc,
                         double *bytes) {
  return dpshim__policy_gate_loads(b->samples, b->first[b->size], dest,
                                   b->size, b->cfg.model, b->encoder.a,
                                   b->encoder.b, wire, llm, enc, bytes);
}

/* What the group tells of meeting: the costliest rank's measure of its
 * grouped calls (*meet_s), the most bytes a meeting moves per patch, and a
 * round's latency (the least any rank waited in the last hand-off's first
 * collective: the last to arrive waited for nobody). */
static double gate_headers(const dpshim__balancer_t *b, double *meet_s,
                           double *round_s, int32_t *moved) {
  double wire = 0;
  *meet_s = 0, *round_s = INFINITY, *moved = 0;
  for (int32_t r = 0; r < b->size; r++) {
    *meet_s = fmax(*meet_s, b->headers[r].meet_s);
    wire = fmax(wire, b->headers[r].wire_per_patch);
    *round_s = fmin(*round_s, b->headers[r].waited_s);
    *moved |= b->headers[r].vit_moved;
  }
  return wire;
}

/* What meeting costs with the loads gate_loads() left: two rounds and the
 * ranks' own part, no less than the exchange's floor, which is all there
 * is to go by until calls have met and moved images; *unmeasured the same
 * without the part measured. bytes: overwritten. */
static double meeting_cost(const dpshim__balancer_t *b, const double *enc,
                           double *bytes, double *unmeasured) {
  double meet_s, round_s;
  int32_t moved;
  gate_headers(b, &meet_s, &round_s, &moved);
  double floor = exchange_floor(b, enc, bytes);
  *unmeasured = floor + 2 * round_s;
  return fmax(meet_s, floor) + 2 * round_s;
}

/* The step's end (us) at best under a plan of the LLM's part, the calls
 * met: each part even, none below its costliest sample's or unit's. */
static double llm_plan_bound(const dpshim__balancer_t *b) {
  return dpshim__policy_llm_bound(b->gate, b->size, b->samples,
                                  b->first[b->size], b->cfg.model,
                                  b->encoder.a, b->encoder.b);
}

/* Whether such a plan could pay at all: its bound saving on the apart end
 * more than WORTH times meet_s, so that a second solve is spent only where
 * it may count. */
static int llm_plan_could_pay(const dpshim__balancer_t *b, double meet_s) {
  return 1e-6 * (b->apart_end - b->llm_bound) > DPSHIM__POLICY_WORTH * meet_s;
}

/* The ViT gate: whether this micro-batch's encoder calls meet, from where
 * its samples end up (policy.h). The same answer everywhere: gathered
 * data. */
static void gate_encoder(dpshim__balancer_t *b, int applied,
                         dpshim__balance_report_t *rep) {
  double *before = b->gate, *llm = before + b->size, *enc = llm + b->size;
  double *bytes = b->load_now; /* free once decided */
  double meet_s, round_s;
  int32_t moved;
  double wire = gate_headers(b, &meet_s, &round_s, &moved);
  double most = gate_loads(b, applied ? b->plan.dest : NULL, wire, llm, enc,
                           bytes);
  b->apart_end = 0;
  for (int32_t r = 0; r < b->size; r++)
    b->apart_end = fmax(b->apart_end, before[r] + llm[r] + enc[r]);
  rep->vit_gated = 1;
  double unmeasured;
  rep->vit_meet_s = meeting_cost(b, enc, bytes, &unmeasured);
  rep->vit_apart = dpshim__policy_meet(before, llm, enc, most, b->size,
                                       rep->vit_meet_s,
                                       &rep->vit_saving_s) != NULL;
  rep->vit_quiet = rep->vit_apart && !moved;
  b->llm_bound = rep->vit_apart && b->solved ? llm_plan_bound(b) : INFINITY;
  b->gate_unmeasured = unmeasured;
  b->gate_held = rep->vit_apart &&
                 (rep->vit_saving_s > DPSHIM__POLICY_WORTH * unmeasured ||
                  llm_plan_could_pay(b, unmeasured));
}

/* Whether this micro-batch, held apart, meets to measure again. */
static int retry_due(const dpshim__balancer_t *b,
                     const dpshim__balance_report_t *rep) {
  return rep->vit_apart && b->gate_held && dpshim__policy_retry_due(&b->retry);
}

/* The gate's retry (policy.h), once its answer is final: calls kept apart
 * only by what meetings measured meet now and then to measure again (the
 * meeting plan may have met them already: meet_with_llm_plan). */
static void retry_meeting(dpshim__balancer_t *b,
                          dpshim__balance_report_t *rep) {
  int held = rep->vit_apart && b->gate_held;
  if (retry_due(b, rep)) {
    rep->vit_apart = rep->vit_quiet = 0;
    rep->vit_retry = 1;
  }
  dpshim__policy_retry_note(&b->retry, !rep->vit_apart, held, rep->vit_retry);
}

/* The LLM-level model less the encoder's part (what the ViT balance evens
 * where the calls meet), with no coefficient below 0. */
static dpshim_cost_model_t llm_part(const dpshim__balancer_t *b) {
  dpshim_cost_model_t m = b->cfg.model;
  m.d = fmax(0, m.d - b->encoder.a);
  m.e = fmax(0, m.e - b->encoder.b);
  return m;
}

/* Where the gate keeps the calls apart: a plan of the LLM's part alone,
 * from no history (the calls meeting, every rank waits for the others
 * before the encoder), may end the step sooner with the calls met than
 * the plan made with the encoder's part does with them apart; it is solved
 * where its bound says it could (llm_plan_could_pay). Taken (unless a TP/CP
 * peer group did not: agree_peers), b->plan is that plan (applied unless it
 * skips), the calls meet, and the step's history is its loads. The same
 * answer everywhere. 0 or the agreed error. */
static int meet_with_llm_plan(dpshim__balancer_t *b, dpshim__comm_t *comm,
                              const dpshim__layout_t *l,
                              dpshim__balance_report_t *rep) {
  char msg[MESSAGE_BYTES] = "";
  int64_t n = b->first[b->size];
  int retry = retry_due(b, rep); /* priced without what meetings measured */
  if (!llm_plan_could_pay(b, retry ? b->gate_unmeasured : rep->vit_meet_s))
    return 0;
  swap_plans(b);
  int rc = solve(b, l, n, llm_part(b), NULL, msg);
  if (rc < 0 || b->plan.allocations > 0) rc = agree(b, comm, rc, msg, rep);
  if (rc < 0) return rc;
  const char *why = skip_reason(b, l);
  double *before = b->gate, *llm = before + b->size, *enc = llm + b->size;
  double meet_s, round_s;
  int32_t moved;
  double wire = gate_headers(b, &meet_s, &round_s, &moved);
  double most = gate_loads(b, why ? NULL : b->plan.dest, wire, llm, enc,
                           b->load_now);
  double unmeasured, cost = meeting_cost(b, enc, b->load_now, &unmeasured);
  if (retry) cost = unmeasured;
  if (!why) cost += applying_cost(b);
  double saving = 1e-6 * (b->apart_end - dpshim__policy_met_end(
                                             before, llm, enc, most, b->size));
  if (saving <= DPSHIM__POLICY_WORTH * cost) {
    swap_plans(b); /* back to the plan with the encoder's part */
    if (!rep->skip_reason) plan_counts(b);
    return 0;
  }
  b->first_report = *rep;
  b->took_meeting = 1;
  rep->skip_reason = why;
  rep->vit_apart = rep->vit_quiet = 0;
  rep->vit_retry = retry;
  rep->vit_saving_s = saving;
  rep->vit_meet_s = cost;
  report_plan(b, n, total_tokens(b, n), rep);
  return why ? 0 : reserve_exchange(b, comm, l, rep);
}

int dpshim__balancer_reserve(dpshim__balancer_t *b, int32_t size) {
  return ensure_group(b, size);
}

int dpshim__balance(dpshim__balancer_t *b, dpshim__comm_t *comm,
                    dpshim_batch_t *batch, const dpshim__handoff_t *ho,
                    dpshim__balance_report_t *rep) {
  dpshim__layout_t l;
  memset(rep, 0, sizeof *rep);
  b->gathered = b->solved = 0;
  b->took_meeting = 0;
  int rc = ensure_group(b, comm->size);
  if (rc == 0) rc = decide(b, comm, batch, ho, &l, rep);
  int gate = ho->gate && b->gating && b->cfg.priced;
  if (rc == 0 && gate && b->gathered) { /* the meeting plan: agreed next */
    gate_encoder(b, !rep->skip_reason, rep);
    if (rep->vit_apart && b->solved) rc = meet_with_llm_plan(b, comm, &l, rep);
  }
  rc = agree_peers(b, ho->peers, rc, rep);
  if (rc < 0) return rc;
  if (gate && b->gathered && !b->took_meeting) /* where the plan now is */
    gate_encoder(b, !rep->skip_reason, rep);
  if (gate && b->gathered) retry_meeting(b, rep);
  const double *loads = b->plan.load_before;
  dpshim__exchange_result_t moved;
  if (!rep->skip_reason) {
    double t0 = b->cfg.clock ? b->cfg.clock() : 0;
    rc = exchange(b, comm, batch, &l, &moved, rep);
    if (rc < 0) return rc;
    /* The group's first exchange opens its ranks' connections (MPI makes
     * them at first use) and touches its buffers' pages first: no later
     * one costs that, so it is not learnt. Nor are verify's hashes. */
    if (b->cfg.clock && b->exchanged)
      dpshim__price_learn(&b->price, priced_bytes(b, comm->rank),
                          copied_bytes(b, comm->rank, rep),
                          b->cfg.clock() - t0 - moved.hash_s);
    b->exchanged = 1;
    rep->shift_bytes = behind_first_hole(b, comm->rank) +
                       b->bytes[b->size + comm->rank];
    rep->applied = 1;
    rep->held_vision = held_vision(b, comm->rank);
    loads = b->plan.load_after;
  }
  if (rep->load_before)
    memcpy(b->history, loads, (size_t)b->size * sizeof *b->history);
  if (!rep->applied || !b->cfg.verify) return 0;
  return verify(b, comm, &moved, rep);
}
