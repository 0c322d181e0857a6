/* The ViT balance; see vit_balance.h. */
#include "vit_balance.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agree.h"
#include "grow.h"
#include "encoder_view.h"
#include "vit_flight.h"

#define MESSAGE_BYTES DPSHIM__MESSAGE_BYTES
#define MAX_IN DPSHIM_ENCODER_MAX_INPUTS
_Static_assert(MAX_IN <= DPSHIM__COMM_PARTS_MAX,
               "a forward's inputs travel in one exchange");

typedef dpshim__wire_t wire_t;
typedef dpshim__shape_t shape_t;

/* What each rank says before anything else, at every grouped call. */
typedef struct header {
  int32_t kind, status, id, count;
  int32_t ready, want_grad;
  uint64_t key;   /* the forward's (forwards are numbered alike everywhere) */
  uint64_t shape; /* a hash of the call's buffers' row sizes */
  int64_t room;   /* gathered images its arrays hold without allocating */
  int32_t ship;   /* a forward: 1 when its call is the one this rank shipped */
} header_t;

/* What this rank keeps of a forward until its backward. */
typedef struct pass {
  void *saved;  /* the real encoder's, for what this rank encoded */
  int moved;
  /* When moved: the group's images and this rank's own. */
  int32_t me;
  shape_t shape;
  wire_t *wire;    /* [the group's images] */
  /* Own images encoded elsewhere, by (destination, image): their input
   * rows (what a backward re-encodes once the balance is off). */
  unsigned char *sent[MAX_IN];
  struct pending *pending; /* an async forward's return, not yet waited */
} pass_t;

struct dpshim__vit {
  dpshim__vit_config_t cfg;
  dpshim__comm_t *comm;
  int ready, off;
  int apart; /* this micro-batch's calls do not meet (the gate's) */
  uint64_t next_key;
  dpshim__vit_flights_t flights;
  dpshim__vit_planner_t planner;
  int32_t size;
  header_t *headers;
  dpshim__agree_t agree;
  int64_t *first;    /* [size + 1] */
  size_t *counts;    /* [2 * size]: send, receive */
  wire_t *wire;      /* gathered images */
  wire_t *mine;      /* this rank's, to send (apart from the receive) */
  dpshim__vit_image_t *images;
  int32_t *dest;
  size_t images_cap;
  double *loads; /* [2 * size]: a shipped forward's plan, before and after */
  struct shipped *ship_head, *ship_tail; /* in the order of their ships */
  int32_t nshipped;
};

static void drain_shipped(dpshim__vit_t *v);

/* ---- set-up -------------------------------------------------------------- */

static void free_rank_arrays(dpshim__vit_t *v) {
  free(v->headers);
  dpshim__agree_free(&v->agree);
  free(v->first);
  free(v->counts);
  free(v->loads);
  v->headers = NULL;
  v->first = NULL;
  v->counts = NULL;
  v->loads = NULL;
}

int dpshim__vit_attach(dpshim__vit_t *v, dpshim__comm_t *comm) {
  drain_shipped(v);
  free_rank_arrays(v);
  v->comm = NULL;
  v->size = 1;
  v->off = 0;
  if (!comm) return 0;
  size_t n = (size_t)comm->size;
  v->headers = calloc(n, sizeof *v->headers);
  v->first = calloc(n + 1, sizeof *v->first);
  v->counts = calloc(2 * MAX_IN * n, sizeof *v->counts);
  v->loads = calloc(2 * n, sizeof *v->loads);
  if (!v->headers || !v->first || !v->counts || !v->loads ||
      dpshim__agree_reserve(&v->agree, comm->size) < 0) {
    free_rank_arrays(v);
    return DPSHIM_ENOMEM;
  }
  v->comm = comm;
  v->size = comm->size;
  return 0;
}

dpshim__vit_t *dpshim__vit_new(const dpshim__vit_config_t *cfg,
                               dpshim__comm_t *comm) {
  dpshim__vit_t *v = calloc(1, sizeof *v);
  if (!v) return NULL;
  v->cfg = *cfg;
  v->size = 1;
  dpshim__vit_flights_init(&v->flights);
  dpshim__vit_planner_init(&v->planner);
  if (dpshim__vit_attach(v, comm) == 0) return v;
  dpshim__vit_free(v);
  return NULL;
}

static void pending_free(struct pending *q);

/* Back to a pass that moved nothing: what a failed exchange left freed. */
static void pass_clear(pass_t *p) {
  pending_free(p->pending);
  free(p->wire);
  for (int32_t k = 0; k < MAX_IN; k++) free(p->sent[k]);
  memset(p, 0, sizeof *p);
}

static void pass_free(void *data) {
  pass_t *p = data;
  if (!p) return;
  pass_clear(p);
  free(p);
}

void dpshim__vit_free(dpshim__vit_t *v) {
  if (!v) return;
  drain_shipped(v);
  dpshim__vit_flights_free(&v->flights, pass_free);
  dpshim__vit_planner_free(&v->planner);
  free_rank_arrays(v);
  free(v->wire);
  free(v->mine);
  free(v->images);
  free(v->dest);
  free(v);
}

void dpshim__vit_set_model(dpshim__vit_t *v, dpshim_cost_model_t model) {
  v->cfg.plan.model = model;
  v->ready = 1;
}

void dpshim__vit_configure(dpshim__vit_t *v, const dpshim__vit_config_t *cfg) {
  v->cfg = *cfg;
}

int dpshim__vit_ready(const dpshim__vit_t *v) { return v->ready; }

int dpshim__vit_balancing(const dpshim__vit_t *v) {
  return v->comm && !v->off;
}

int32_t dpshim__vit_ranks(const dpshim__vit_t *v) { return v->size; }

void dpshim__vit_set_apart(dpshim__vit_t *v, int apart) { v->apart = apart; }

int32_t dpshim__vit_moved_in_flight(const dpshim__vit_t *v) {
  int32_t n = 0;
  for (int32_t k = 0; k < v->flights.count; k++)
    n += ((const pass_t *)v->flights.slot[k].data)->moved;
  return n;
}

static double now(const dpshim__vit_t *v) {
  return v->cfg.clock ? v->cfg.clock() : 0;
}

/* ---- agreement ----------------------------------------------------------- */

static const char *kind_name(int32_t kind) {
  switch (kind) {
    case DPSHIM__VIT_FORWARD: return "forward";
    case DPSHIM__VIT_BACKWARD: return "backward";
    case DPSHIM__VIT_RELEASE: return "release";
    case DPSHIM__VIT_SHIP: return "ship";
    case DPSHIM__VIT_WAIT: return "wait";
    case DPSHIM__VIT_HANDOFF: return "LLM hand-off";
    default: return "MPI_Finalize";
  }
}

/* A failed collective leaves the ranks where they are: the balance stops
 * here, every call from now on runs where it is made. */
static void comm_failed(dpshim__vit_t *v, int rc, dpshim__vit_report_t *rep) {
  v->off = 1;
  rep->out_of_step = 1;
  snprintf(rep->message, sizeof rep->message,
           "ViT: a collective of the balance failed (%s); ViT balancing is "
           "off", dpshim_strerror(rc));
}

/* An agreed outcome (agree.h) into the report: 1 when some rank failed
 * (the call then runs where it is made), the balance off when the
 * agreement's own collective failed. */
static int agreed(dpshim__vit_t *v, int rc, const char *said,
                  dpshim__vit_report_t *rep) {
  if (rc == DPSHIM_EMPI) comm_failed(v, rc, rep);
  else if (rc < 0)
    snprintf(rep->message, sizeof rep->message, "ViT: %s", said);
  return rc < 0;
}

/* The statuses gathered with the headers, settled. */
static int settle(dpshim__vit_t *v, const char *mine,
                  dpshim__vit_report_t *rep) {
  char said[MESSAGE_BYTES];
  int rc = dpshim__agree_settle(&v->agree, v->comm, mine, said, sizeof said);
  return agreed(v, rc, said, rep);
}

static int agree(dpshim__vit_t *v, int32_t status, const char *mine,
                 dpshim__vit_report_t *rep) {
  char said[MESSAGE_BYTES];
  int rc = dpshim__agree(&v->agree, v->comm, status, mine, said, sizeof said);
  return agreed(v, rc, said, rep);
}

static int encoder_call(int32_t kind) { return kind <= DPSHIM__VIT_SHIP; }

/* The first rank not at the same point as rank 0, or -1. */
static int32_t out_of_step_rank(const dpshim__vit_t *v) {
  const header_t *h0 = &v->headers[0];
  for (int32_t r = 1; r < v->size; r++) {
    const header_t *h = &v->headers[r];
    if (h->kind != h0->kind || (encoder_call(h->kind) && h->key != h0->key))
      return r;
  }
  return -1;
}

static void say_out_of_step(dpshim__vit_t *v, int32_t r,
                            dpshim__vit_report_t *rep) {
  const header_t *h0 = &v->headers[0], *h = &v->headers[r];
  v->off = 1;
  rep->out_of_step = 1;
  snprintf(rep->message, sizeof rep->message,
           "ViT calls out of step: rank %d is at a %s (forward %llu), rank %d "
           "at a %s (forward %llu): expected every DP rank to call the "
           "encoder for every micro-batch, in the same order; ViT balancing "
           "is off", (int)h->id, kind_name(h->kind),
           (unsigned long long)h->key, (int)h0->id, kind_name(h0->kind),
           (unsigned long long)h0->key);
}

/* The header round. Returns 1 when the call can go on through the group:
 * every rank at the same point, none failing. */
static int gather_headers(dpshim__vit_t *v, header_t *h, const char *mine,
                          dpshim__vit_report_t *rep) {
  h->id = v->comm->id;
  h->ready = v->ready;
  h->room = (int64_t)v->images_cap;
  rep->grouped = 1;
  double t = now(v);
  int rc = v->comm->ops->allgather(v->comm, h, sizeof *h, v->headers);
  rep->arrival_s += now(v) - t;
  if (rc < 0) {
    comm_failed(v, rc, rep);
    return 0;
  }
  int32_t r = out_of_step_rank(v);
  if (r >= 0) {
    say_out_of_step(v, r, rep);
    return 0;
  }
  for (int32_t q = 0; q < v->size; q++)
    v->agree.status[q] = v->headers[q].status;
  return !settle(v, mine, rep);
}

/* ---- a call's shape ------------------------------------------------------ */

/* ---- the group's images and plan ----------------------------------------- */

/* Room for n gathered images on every rank: an agreement round only when
 * some rank has to grow. Returns 1 when every rank has it. */
static int reserve_images(dpshim__vit_t *v, int64_t n,
                          dpshim__vit_report_t *rep) {
  int64_t room = INT64_MAX;
  for (int32_t r = 0; r < v->size; r++)
    if (v->headers[r].room < room) room = v->headers[r].room;
  if (n <= room) return 1;
  size_t want = (size_t)(n + n / 2), cap = v->images_cap, c2 = cap, c3 = cap,
         c4 = cap;
  int rc = dpshim__grow(&v->wire, &cap, want, sizeof *v->wire) |
           dpshim__grow(&v->mine, &c4, want, sizeof *v->mine) |
           dpshim__grow(&v->images, &c2, want, sizeof *v->images) |
           dpshim__grow(&v->dest, &c3, want, sizeof *v->dest);
  if (rc == 0) v->images_cap = want;
  return !agree(v, rc ? DPSHIM_ENOMEM : 0,
                "out of memory for the gathered images", rep);
}

/* Every image's wire record, in rank order, into v->wire and v->images. */
static int gather_images(dpshim__vit_t *v, const dpshim_encoder_call_t *c,
                         dpshim__vit_report_t *rep) {
  int64_t n = 0;
  for (int32_t r = 0; r < v->size; r++) {
    v->first[r] = n;
    n += v->headers[r].count;
  }
  v->first[v->size] = n;
  if (!reserve_images(v, n, rep)) return 0;
  for (int32_t r = 0; r < v->size; r++)
    v->counts[r] = (size_t)v->headers[r].count * sizeof(wire_t);
  /* v->mine holds as many as v->wire: room for this rank's, whose count
   * is part of n, without an agreement of its own. */
  for (int32_t i = 0; i < c->count; i++) v->mine[i] = dpshim__call_wire(c, i);
  int rc = v->comm->ops->allgatherv(v->comm, v->mine, v->wire, v->counts);
  if (rc < 0) return comm_failed(v, rc, rep), 0;
  for (int64_t i = 0; i < n; i++) {
    const wire_t *w = &v->wire[i];
    int64_t in = 0;
    for (int32_t k = 0; k < MAX_IN; k++) in += w->in[k];
    v->images[i] = (dpshim__vit_image_t){w->patches, in, w->out,
                                         w->patches_sq};
    rep->patches += w->patches;
  }
  rep->images = n;
  return 1;
}

/* Whether every message of the plan's exchanges fits MPI's int count: no
 * rank sends more than INT_MAX bytes of all its moved images' buffers
 * together, as their owner or as their encoder (what any one message is
 * part of). The same answer everywhere: gathered data. */
static int messages_fit(const dpshim__vit_t *v) {
  size_t *owner = v->counts, *encoder = v->counts + v->size;
  memset(v->counts, 0, 2 * (size_t)v->size * sizeof *v->counts);
  for (int32_t r = 0; r < v->size; r++)
    for (int64_t i = v->first[r]; i < v->first[r + 1]; i++) {
      const wire_t *w = &v->wire[i];
      int32_t e = v->dest[i];
      size_t b = (size_t)(w->out + w->grad);
      for (int32_t k = 0; k < MAX_IN; k++) b += (size_t)w->in[k];
      if (e == r) continue;
      if ((owner[r] += b) > INT_MAX || (encoder[e] += b) > INT_MAX) return 0;
    }
  return 1;
}

/* Returns 1 when the plan moves images. */
static int plan(dpshim__vit_t *v, dpshim__vit_report_t *rep) {
  dpshim__vit_group_t g = {v->size, v->first, v->images};
  int rc = dpshim__vit_plan(&v->planner, &g, &v->cfg.plan, v->dest);
  const dpshim_plan_t *p = &v->planner.plan;
  if ((rc < 0 || p->allocations > 0) &&
      agree(v, rc < 0 ? rc : 0, rc == DPSHIM_EINVAL ? p->message
                                : "out of memory for the plan", rep))
    return 0;
  if (g.first[g.ranks] > 0) {
    rep->imbalance_before = p->imbalance_before;
    rep->imbalance_after = rc > 0 ? p->imbalance_after : p->imbalance_before;
    rep->load_before = p->load_before;
    rep->load_after = p->load_after;
  }
  rep->skip_reason = rc > 0 ? NULL : v->planner.skip_reason;
  if (rc > 0 && !messages_fit(v)) {
    rep->skip_reason = "exchange-too-large";
    return 0;
  }
  return rc > 0;
}

/* ---- routes -------------------------------------------------------------- */

/* A forward's images and where each is encoded, as rank `me` sees them. */
typedef struct route {
  int32_t size, me;
  const int64_t *first; /* [size + 1] */
  const int32_t *dest;
  const wire_t *wire;
} route_t;

#define FIELD_OUT MAX_IN        /* the output's bytes */
#define FIELD_GRAD (MAX_IN + 1) /* the grad input's bytes */

static int64_t field_bytes(const wire_t *w, int32_t field) {
  return field < MAX_IN ? w->in[field] : field == FIELD_OUT ? w->out : w->grad;
}

static int64_t own_count(const route_t *rt) {
  return rt->first[rt->me + 1] - rt->first[rt->me];
}

/* Per peer, the bytes of `field` rank me sends (send[]) and receives
 * (recv[]): toward the encoding ranks (inputs, output gradients) when
 * to_encoder, else back to the owners. Returns the bytes received. */
static size_t route_counts(const route_t *rt, int32_t field, int to_encoder,
                           size_t *send, size_t *recv) {
  size_t total = 0;
  memset(send, 0, (size_t)rt->size * sizeof *send);
  memset(recv, 0, (size_t)rt->size * sizeof *recv);
  for (int32_t r = 0; r < rt->size; r++)
    for (int64_t i = rt->first[r]; i < rt->first[r + 1]; i++) {
      int32_t e = rt->dest[i];
      if (e == r) continue;
      size_t b = (size_t)field_bytes(&rt->wire[i], field);
      int32_t from = to_encoder ? r : e, to = to_encoder ? e : r;
      if (from == rt->me) send[to] += b;
      if (to == rt->me) recv[from] += b, total += b;
    }
  return total;
}

/* Bytes of `field` over own images kept (*kept), sent away (*sent), and
 * over every image rank me encodes (*encoded). */
static void field_totals(const route_t *rt, int32_t field, int64_t *kept,
                         int64_t *sent, int64_t *encoded) {
  *kept = *sent = *encoded = 0;
  for (int32_t r = 0; r < rt->size; r++)
    for (int64_t i = rt->first[r]; i < rt->first[r + 1]; i++) {
      int64_t b = field_bytes(&rt->wire[i], field);
      if (rt->dest[i] == rt->me) *encoded += b;
      if (r == rt->me) *(rt->dest[i] == r ? kept : sent) += b;
    }
}

/* Own images (local indices): kept ones first, then by (destination,
 * image): the order of the combined buffers' front and of what is sent. */
static void own_order(const route_t *rt, int32_t *order) {
  int64_t base = rt->first[rt->me], n = own_count(rt), k = 0;
  for (int64_t i = 0; i < n; i++)
    if (rt->dest[base + i] == rt->me) order[k++] = (int32_t)i;
  for (int32_t e = 0; e < rt->size; e++)
    for (int64_t i = 0; e != rt->me && i < n; i++)
      if (rt->dest[base + i] == e) order[k++] = (int32_t)i;
}

/* Moves own images' `field` bytes between the caller's buffer (user, each
 * image at its place in the caller's order) and the packed buffers: kept
 * images from/to `kept`, the others from/to `sent`, in own_order. A NULL
 * packed buffer skips its images. SAME_AS_PACKED compares instead, and
 * returns 0 at the first difference (else 1). */
typedef struct own_copy {
  const route_t *rt;
  const int32_t *order;
  int64_t *offset; /* [own images], scratch */
  int32_t field;
} own_copy_t;

typedef enum own_move { TO_PACKED, TO_USER, SAME_AS_PACKED } own_move_t;

static int copy_own(const own_copy_t *c, unsigned char *user,
                    unsigned char *kept, unsigned char *sent, own_move_t how) {
  const route_t *rt = c->rt;
  int64_t base = rt->first[rt->me], n = own_count(rt), at = 0;
  for (int64_t i = 0; i < n; i++) {
    c->offset[i] = at;
    at += field_bytes(&rt->wire[base + i], c->field);
  }
  for (int64_t k = 0; k < n; k++) {
    int64_t i = c->order[k];
    size_t b = (size_t)field_bytes(&rt->wire[base + i], c->field);
    unsigned char **packed = rt->dest[base + i] == rt->me ? &kept : &sent;
    if (!*packed || !b) continue;
    if (how == TO_USER) memcpy(user + c->offset[i], *packed, b);
    else if (how == TO_PACKED) memcpy(*packed, user + c->offset[i], b);
    else if (memcmp(*packed, user + c->offset[i], b)) return 0;
    *packed += b;
  }
  return 1;
}

/* A call of the real encoder on images idx[0..n) of the group, whose input
 * rows are in[k] and whose output goes to out. */
typedef struct built {
  dpshim_encoder_call_t call;
  int64_t *arrays; /* patches, inputs' rows, output rows, patches_sq */
} built_t;

static int build_call(const shape_t *s, const wire_t *wire,
                      const int64_t *idx, int64_t n, unsigned char *const *in,
                      unsigned char *out, built_t *b) {
  int32_t cols = s->ninputs + 3;
  memset(b, 0, sizeof *b);
  b->arrays = malloc((size_t)(n * cols + 1) * sizeof *b->arrays);
  if (!b->arrays) return DPSHIM_ENOMEM;
  int64_t *patches = b->arrays, *outrows = b->arrays + (cols - 2) * n,
          *sq = b->arrays + (cols - 1) * n;
  b->call = (dpshim_encoder_call_t){.count = (int32_t)n, .patches = patches,
                                    .patches_sq = sq, .ninputs = s->ninputs,
                                    .grad_input = s->grad_input};
  for (int64_t j = 0; j < n; j++) {
    const wire_t *w = &wire[idx[j]];
    patches[j] = w->patches;
    sq[j] = w->patches_sq;
    outrows[j] = w->out / (int64_t)s->out_row;
    for (int32_t k = 0; k < s->ninputs; k++)
      b->arrays[(k + 1) * n + j] = w->in[k] / (int64_t)s->in_row[k];
  }
  for (int32_t k = 0; k < s->ninputs; k++)
    b->call.input[k] = (dpshim_encoder_buffer_t){
        "input", in[k], s->in_row[k], b->arrays + (k + 1) * n};
  b->call.output = (dpshim_encoder_buffer_t){"output", out, s->out_row,
                                             outrows};
  return 0;
}

/* Every image rank me encodes: its own kept ones, then the arrivals by
 * rank and image (the order the all-to-alls lay them out in). */
static int64_t encoded_images(const route_t *rt, int64_t *idx) {
  int64_t n = 0;
  for (int64_t i = rt->first[rt->me]; i < rt->first[rt->me + 1]; i++)
    if (rt->dest[i] == rt->me) idx[n++] = i;
  for (int32_t r = 0; r < rt->size; r++)
    for (int64_t i = rt->first[r]; r != rt->me && i < rt->first[r + 1]; i++)
      if (rt->dest[i] == rt->me) idx[n++] = i;
  return n;
}

/* Own images sent away, in own_order. */
static int64_t sent_images(const route_t *rt, const int32_t *order,
                           int64_t *idx) {
  int64_t base = rt->first[rt->me], n = 0;
  for (int64_t k = 0; k < own_count(rt); k++)
    if (rt->dest[base + order[k]] != rt->me) idx[n++] = base + order[k];
  return n;
}

static void *alloc(size_t bytes, int *failed) {
  void *p = malloc(bytes + 1);
  *failed |= !p;
  return p;
}

static int run_forward(dpshim__vit_t *v, const dpshim_encoder_t *enc,
                       const dpshim_encoder_call_t *call, void **saved,
                       dpshim__vit_report_t *rep) {
  double t = now(v);
  *saved = NULL;
  int rc = enc->forward(enc->ctx, call, saved);
  rep->encode_s += now(v) - t;
  return rc;
}

static int run_backward(dpshim__vit_t *v, const dpshim_encoder_t *enc,
                        void *saved, const void *out_grad, void *in_grad,
                        dpshim__vit_report_t *rep) {
  double t = now(v);
  int rc = enc->backward(enc->ctx, saved, out_grad, in_grad);
  rep->encode_s += now(v) - t;
  return rc;
}

/* ---- forward ------------------------------------------------------------- */

/* Scratch of one exchange, freed together. */
typedef struct buffers {
  unsigned char *in[MAX_IN], *out, *back, *grad, *grad_back;
  int32_t *order;
  int64_t *offset, *idx;
  built_t built;
} buffers_t;

static void buffers_free(buffers_t *b) {
  for (int32_t k = 0; k < MAX_IN; k++) free(b->in[k]);
  free(b->out);
  free(b->back);
  free(b->grad);
  free(b->grad_back);
  free(b->order);
  free(b->offset);
  free(b->idx);
  free(b->built.arrays);
}

static int64_t moved_bytes(const dpshim__vit_t *v) {
  int64_t bytes = 0;
  for (int32_t r = 0; r < v->size; r++)
    for (int64_t i = v->first[r]; i < v->first[r + 1]; i++)
      if (v->dest[i] != r) bytes += v->images[i].in_bytes + v->images[i].out_bytes;
  return bytes;
}

/* This rank's buffers for a forward that moves images, or an agreed
 * failure (0). */
static int forward_buffers(dpshim__vit_t *v, const route_t *rt,
                           const dpshim_encoder_call_t *call, pass_t *p,
                           buffers_t *b, dpshim__vit_report_t *rep) {
  int failed = 0;
  int64_t nall = v->first[v->size], own = own_count(rt), kept, sent, encoded;
  p->me = rt->me;
  p->shape = dpshim__call_shape(call);
  p->wire = alloc((size_t)nall * sizeof *p->wire, &failed);
  b->order = alloc((size_t)own * sizeof *b->order, &failed);
  b->offset = alloc((size_t)own * sizeof *b->offset, &failed);
  b->idx = alloc((size_t)nall * sizeof *b->idx, &failed);
  for (int32_t k = 0; k < call->ninputs; k++) {
    field_totals(rt, k, &kept, &sent, &encoded);
    b->in[k] = alloc((size_t)encoded, &failed);
    p->sent[k] = alloc((size_t)sent, &failed);
  }
  field_totals(rt, FIELD_OUT, &kept, &sent, &encoded);
  b->out = alloc((size_t)encoded, &failed);
  b->back = alloc((size_t)sent, &failed);
  if (!failed)
    failed = build_call(&p->shape, rt->wire, b->idx,
                        encoded_images(rt, b->idx), b->in, b->out,
                        &b->built) < 0;
  if (!agree(v, failed ? DPSHIM_ENOMEM : 0,
             "out of memory for the images' exchange", rep)) {
    memcpy(p->wire, rt->wire, (size_t)nall * sizeof *p->wire);
    return 1;
  }
  return 0;
}

/* One exchange of `parts` fields (field[k]) of the moved images: toward
 * the encoding ranks when to_encoder, else back to the owners; send[k] and
 * recv[k] hold them packed in the order route_counts() counts. Started on
 * req and left running when req is not NULL. */
static int exchange(dpshim__vit_t *v, const route_t *rt, int parts,
                    const int32_t *field, int to_encoder,
                    const unsigned char *const *send,
                    unsigned char *const *recv, dpshim__comm_request_t *req) {
  size_t *sendc = v->counts, *recvc = v->counts + MAX_IN * v->size;
  for (int32_t k = 0; k < parts; k++)
    route_counts(rt, field[k], to_encoder, sendc + k * v->size,
                 recvc + k * v->size);
  const void *const *sendv = (const void *const *)send;
  void *const *recvv = (void *const *)recv;
  return req ? v->comm->ops->start(v->comm, req, parts, sendv, sendc, recvv,
                                   recvc)
             : v->comm->ops->alltoallv_parts(v->comm, parts, sendv, sendc,
                                             recvv, recvc);
}

/* Inputs to the encoding ranks, every input buffer in one exchange, each
 * landing after this rank's kept images. Started on req when not NULL (a
 * ship: the kept images' rows are then taken at the forward, as they are
 * by then). */
static int send_inputs(dpshim__vit_t *v, const route_t *rt,
                       const dpshim_encoder_call_t *call, pass_t *p,
                       buffers_t *b, dpshim__comm_request_t *req) {
  own_copy_t oc = {rt, b->order, b->offset, 0};
  int32_t field[MAX_IN];
  unsigned char *recv[MAX_IN];
  for (int32_t k = 0; k < call->ninputs; k++) {
    int64_t kept, sent, encoded;
    field_totals(rt, k, &kept, &sent, &encoded);
    oc.field = field[k] = k;
    copy_own(&oc, call->input[k].data, req ? NULL : b->in[k], p->sent[k],
             TO_PACKED);
    recv[k] = b->in[k] + kept;
  }
  return exchange(v, rt, call->ninputs, field, 1,
                  (const unsigned char *const *)p->sent, recv, req);
}

/* An async forward's embeddings on their way back: the exchange's
 * buffers (b.out is sent from, b.back received into) until the wait
 * copies what arrived into the caller's output. */
typedef struct pending {
  dpshim__comm_t *comm;
  dpshim__comm_request_t *req;
  unsigned char *output;
  buffers_t b;
} pending_t;

/* NULL on no memory (said in the forward's header round). */
static pending_t *pending_new(dpshim__comm_t *comm) {
  pending_t *q = calloc(1, sizeof *q);
  if (q && !(q->req = comm->ops->request_new(comm))) {
    free(q);
    return NULL;
  }
  if (q) q->comm = comm;
  return q;
}

static void pending_free(pending_t *q) {
  if (!q) return;
  q->comm->ops->request_free(q->comm, q->req);
  buffers_free(&q->b);
  free(q);
}

/* Embeddings back to their owners, into the caller's output: those this
 * rank encoded itself now, the others once they are in (started on q's
 * request and left to the wait where q is not NULL). */
static int return_outputs(dpshim__vit_t *v, const route_t *rt,
                          const dpshim_encoder_call_t *call, buffers_t *b,
                          pending_t *q) {
  int64_t kept, sent, encoded;
  field_totals(rt, FIELD_OUT, &kept, &sent, &encoded);
  const int32_t field = FIELD_OUT;
  const unsigned char *send = b->out + kept;
  int rc = exchange(v, rt, 1, &field, 0, &send, &b->back, q ? q->req : NULL);
  if (rc < 0) return rc;
  own_copy_t oc = {rt, b->order, b->offset, FIELD_OUT};
  copy_own(&oc, call->output.data, b->out, q ? NULL : b->back, TO_USER);
  return 0;
}

/* q takes what its wait needs of b (the rest is freed), and p takes q. */
static void keep_pending(pass_t *p, pending_t *q, buffers_t *b,
                         const dpshim_encoder_call_t *call) {
  q->output = call->output.data;
  q->b = (buffers_t){.out = b->out, .back = b->back, .order = b->order,
                     .offset = b->offset};
  b->out = b->back = NULL;
  b->order = NULL;
  b->offset = NULL;
  p->pending = q;
}

/* The real encoder on what this rank holds (b->built), then the embeddings
 * back to their owners. Returns 1 when it ran (*real: its result), 0 when
 * every rank is to run its own call as given. */
static int encode_and_return(dpshim__vit_t *v, const dpshim_encoder_t *enc,
                             const route_t *rt,
                             const dpshim_encoder_call_t *call, pass_t *p,
                             buffers_t *b, pending_t **q,
                             dpshim__vit_report_t *rep, int *real) {
  *real = run_forward(v, enc, &b->built.call, &p->saved, rep);
  double t = now(v);
  int failed = agree(v, *real != 0 ? DPSHIM_EINVAL : 0,
                     "the encoder failed on the images the plan gave this "
                     "rank; every rank encodes its own", rep);
  rep->arrival_s += now(v) - t;
  if (failed) {
    if (*real == 0) enc->release(enc->ctx, p->saved);
    p->saved = NULL;
    return 0;
  }
  int rc = return_outputs(v, rt, call, b, *q);
  if (rc < 0) { /* every rank's collectives fail from here: all go local */
    comm_failed(v, rc, rep);
    enc->release(enc->ctx, p->saved);
    p->saved = NULL;
    return 0;
  }
  if (*q) keep_pending(p, *q, b, call);
  *q = NULL;
  p->moved = 1;
  rep->applied = 1;
  rep->bytes_moved = moved_bytes(v);
  return 1;
}

/* The images move: inputs out, the real encoder on what this rank holds,
 * embeddings back. Returns what encode_and_return() does. */
static int forward_moved(dpshim__vit_t *v, const dpshim_encoder_t *enc,
                         const dpshim_encoder_call_t *call, pass_t *p,
                         pending_t **q, dpshim__vit_report_t *rep,
                         int *real) {
  route_t rt = {v->size, v->comm->rank, v->first, v->dest, v->wire};
  buffers_t b;
  memset(&b, 0, sizeof b);
  int ran = 0;
  if (forward_buffers(v, &rt, call, p, &b, rep)) {
    own_order(&rt, b.order);
    int rc = send_inputs(v, &rt, call, p, &b, NULL);
    if (rc < 0) comm_failed(v, rc, rep);
    else ran = encode_and_return(v, enc, &rt, call, p, &b, q, rep, real);
  }
  buffers_free(&b);
  return ran;
}

/* Rank r's buffers differ from rank 0's: an agreed error. Returns 1 when
 * every rank's match. */
static int same_shape(dpshim__vit_t *v, dpshim__vit_report_t *rep) {
  const header_t *h0 = &v->headers[0], *mine = &v->headers[v->comm->rank];
  int differ = 0;
  for (int32_t r = 1; r < v->size; r++)
    differ |= v->headers[r].shape != h0->shape;
  if (!differ) return 1;
  char msg[MESSAGE_BYTES];
  snprintf(msg, sizeof msg,
           "the encoder call's buffers (inputs, row sizes, gradient input) "
           "differ from rank %d's: expected the same on every rank",
           (int)h0->id);
  agree(v, mine->shape != h0->shape ? DPSHIM_EINVAL : 0, msg, rep);
  return 0;
}

/* Every rank of the group has its cost model (else: warm-up, no plan). */
static int group_ready(const dpshim__vit_t *v, dpshim__vit_report_t *rep) {
  for (int32_t r = 0; r < v->size; r++)
    if (!v->headers[r].ready) {
      rep->warm = 1;
      rep->skip_reason = "warmup";
      return 0;
    }
  return 1;
}

static header_t call_header(int32_t kind, uint64_t key, int32_t status,
                            const dpshim_encoder_call_t *call) {
  header_t h = {.kind = kind, .status = status, .key = key};
  if (status == 0) {
    shape_t s = dpshim__call_shape(call);
    h.count = call->count;
    h.shape = dpshim__shape_hash(&s);
  }
  return h;
}

/* ---- shipped forwards ---------------------------------------------------- */

/* A forward shipped ahead of its call: the group's images and plan, this
 * rank's own images as it described them, and, when the plan moves
 * images, its inputs on their way. Every rank of the group holds the same
 * ones, in the order of their ships. */
typedef struct shipped {
  struct shipped *next;
  dpshim__comm_t *comm;
  int moves;               /* else every image stays home */
  const char *skip_reason; /* the plan's, when it moves nothing */
  uint64_t shape;
  int64_t *first;          /* [size + 1] */
  dpshim__vit_image_t *images;
  int32_t *dest;
  wire_t *own;             /* [own images] */
  double *loads;           /* [2 * size], or NULL: no plan was solved */
  double imbalance_before, imbalance_after;
  int64_t patches;
  pass_t *p;               /* moves: p->wire the group's, p->sent what left */
  buffers_t b;             /* moves: the encoder's inputs landing in b.in */
  dpshim__comm_request_t *req;
} shipped_t;

/* Frees s, its exchange finished first. */
static void shipped_free(shipped_t *s) {
  if (!s) return;
  if (s->req) s->comm->ops->request_free(s->comm, s->req);
  buffers_free(&s->b);
  pass_free(s->p);
  free(s->first);
  free(s->images);
  free(s->dest);
  free(s->own);
  free(s->loads);
  free(s);
}

static shipped_t *take_shipped(dpshim__vit_t *v) {
  shipped_t *s = v->ship_head;
  if (!s) return NULL;
  v->ship_head = s->next;
  if (!v->ship_head) v->ship_tail = NULL;
  v->nshipped--;
  return s;
}

/* Every rank drops the same ones at the same call, so their exchanges
 * finish. */
static void drain_shipped(dpshim__vit_t *v) {
  shipped_t *s;
  while ((s = take_shipped(v))) shipped_free(s);
}

/* The plan just made into s. Returns 0 on an agreed failure. */
static int keep_plan(dpshim__vit_t *v, shipped_t *s, int moves,
                     dpshim__vit_report_t *rep) {
  int failed = 0, solved = rep->load_before != NULL;
  size_t n = (size_t)v->first[v->size], ranks = (size_t)v->size,
         own = (size_t)v->headers[v->comm->rank].count;
  s->first = alloc((ranks + 1) * sizeof *s->first, &failed);
  s->images = alloc(n * sizeof *s->images, &failed);
  s->dest = alloc(n * sizeof *s->dest, &failed);
  s->own = alloc(own * sizeof *s->own, &failed);
  if (solved) s->loads = alloc(2 * ranks * sizeof *s->loads, &failed);
  if (moves) {
    s->p = calloc(1, sizeof *s->p);
    s->req = v->comm->ops->request_new(v->comm);
    failed |= !s->p || !s->req;
  }
  if (agree(v, failed ? DPSHIM_ENOMEM : 0,
            "out of memory for a shipped forward", rep))
    return 0;
  memcpy(s->first, v->first, (ranks + 1) * sizeof *s->first);
  memcpy(s->images, v->images, n * sizeof *s->images);
  memcpy(s->dest, v->dest, n * sizeof *s->dest);
  memcpy(s->own, v->mine, own * sizeof *s->own);
  if (solved) {
    memcpy(s->loads, rep->load_before, ranks * sizeof *s->loads);
    memcpy(s->loads + ranks, rep->load_after, ranks * sizeof *s->loads);
  }
  s->moves = moves;
  s->skip_reason = rep->skip_reason;
  s->imbalance_before = rep->imbalance_before;
  s->imbalance_after = rep->imbalance_after;
  s->patches = rep->patches;
  return 1;
}

/* Starts this rank's inputs toward their encoding ranks; its kept ones
 * wait in the encoder's buffers. Returns 0 on an agreed failure. */
static int ship_inputs(dpshim__vit_t *v, const dpshim_encoder_call_t *call,
                       shipped_t *s, dpshim__vit_report_t *rep) {
  route_t rt = {v->size, v->comm->rank, v->first, v->dest, v->wire};
  if (!forward_buffers(v, &rt, call, s->p, &s->b, rep)) return 0;
  own_order(&rt, s->b.order);
  int rc = send_inputs(v, &rt, call, s->p, &s->b, s->req);
  if (rc < 0) comm_failed(v, rc, rep);
  return rc == 0;
}

int dpshim__vit_ship(dpshim__vit_t *v, const dpshim_encoder_call_t *call,
                     dpshim__vit_report_t *rep) {
  memset(rep, 0, sizeof *rep);
  rep->kind = DPSHIM__VIT_SHIP;
  char msg[MESSAGE_BYTES] = "";
  int32_t status = dpshim__call_check(call, 1, msg, MESSAGE_BYTES);
  if (!dpshim__vit_balancing(v)) drain_shipped(v);
  if (!dpshim__vit_balancing(v) || v->apart) return status;
  shipped_t *s = calloc(1, sizeof *s);
  if (!s && status == 0) {
    status = DPSHIM_ENOMEM;
    snprintf(msg, sizeof msg, "out of memory");
  }
  header_t h = call_header(DPSHIM__VIT_SHIP,
                           v->next_key + (uint64_t)v->nshipped + 1, status,
                           call);
  int kept = gather_headers(v, &h, msg, rep) && same_shape(v, rep) &&
             group_ready(v, rep) && gather_images(v, call, rep);
  if (kept) {
    s->comm = v->comm;
    int moves = plan(v, rep);
    kept = (moves || !rep->message[0]) && keep_plan(v, s, moves, rep) &&
           (!moves || ship_inputs(v, call, s, rep));
  }
  if (!kept) {
    shipped_free(s);
    return status;
  }
  s->shape = h.shape;
  rep->shipped = 1;
  if (v->ship_tail) v->ship_tail->next = s;
  else v->ship_head = s;
  v->ship_tail = s;
  v->nshipped++;
  return 0;
}

/* Whether call is the one s shipped: the same images on this rank, and
 * the same bytes in every input row that left it. */
static int ship_matches(const dpshim__vit_t *v, const shipped_t *s,
                        const dpshim_encoder_call_t *call, uint64_t shape) {
  int32_t me = v->comm->rank;
  int64_t own = s->first[me + 1] - s->first[me];
  if (shape != s->shape || call->count != own) return 0;
  for (int32_t i = 0; i < call->count; i++) {
    wire_t w = dpshim__call_wire(call, i);
    if (memcmp(&w, &s->own[i], sizeof w)) return 0;
  }
  if (!s->moves) return 1;
  route_t rt = {v->size, me, s->first, s->dest, s->p->wire};
  own_copy_t oc = {&rt, s->b.order, s->b.offset, 0};
  for (int32_t k = 0; k < call->ninputs; k++) {
    oc.field = k;
    if (!copy_own(&oc, call->input[k].data, NULL, s->p->sent[k],
                  SAME_AS_PACKED))
      return 0;
  }
  return 1;
}

static int every_ship_matches(const dpshim__vit_t *v) {
  for (int32_t r = 0; r < v->size; r++)
    if (!v->headers[r].ship) return 0;
  return 1;
}

/* s's group and plan back in v's arrays (the routes, the flight and the
 * report read them there) and the report. */
static void restore_plan(dpshim__vit_t *v, const shipped_t *s,
                         dpshim__vit_report_t *rep) {
  size_t n = (size_t)s->first[v->size], ranks = (size_t)v->size;
  memcpy(v->first, s->first, (ranks + 1) * sizeof *v->first);
  memcpy(v->images, s->images, n * sizeof *v->images);
  memcpy(v->dest, s->dest, n * sizeof *v->dest);
  if (s->moves) memcpy(v->wire, s->p->wire, n * sizeof *v->wire);
  rep->images = (int64_t)n;
  rep->patches = s->patches;
  rep->skip_reason = s->skip_reason;
  if (!s->loads) return;
  memcpy(v->loads, s->loads, 2 * ranks * sizeof *v->loads);
  rep->load_before = v->loads;
  rep->load_after = v->loads + ranks;
  rep->imbalance_before = s->imbalance_before;
  rep->imbalance_after = s->imbalance_after;
}

/* The shipped forward's inputs are in (or arriving): this rank's kept ones
 * taken again from the call, then the encoder and the return as in a
 * forward that moves. p takes over s's pass. */
static int forward_shipped(dpshim__vit_t *v, const dpshim_encoder_t *enc,
                           const dpshim_encoder_call_t *call, shipped_t *s,
                           pass_t *p, pending_t **q,
                           dpshim__vit_report_t *rep, int *real) {
  restore_plan(v, s, rep);
  if (!s->moves) return 0;
  /* what has not arrived yet: the exchange's cost, not straggling */
  int rc = s->comm->ops->finish(s->comm, s->req);
  if (rc < 0) {
    comm_failed(v, rc, rep);
    return 0;
  }
  *p = *s->p;
  free(s->p);
  s->p = NULL;
  route_t rt = {v->size, v->comm->rank, v->first, v->dest, v->wire};
  own_copy_t oc = {&rt, s->b.order, s->b.offset, 0};
  for (int32_t k = 0; k < call->ninputs; k++) {
    oc.field = k;
    copy_own(&oc, call->input[k].data, s->b.in[k], NULL, TO_PACKED);
  }
  return encode_and_return(v, enc, &rt, call, p, &s->b, q, rep, real);
}

/* ---- the forward's meeting ----------------------------------------------- */

/* The group part of a forward (s: the one shipped for it, or NULL; freed
 * here). Returns 1 when images moved and the real encoder ran here
 * (*real), 0 when this rank runs its own call as given. */
static int forward_met(dpshim__vit_t *v, const dpshim_encoder_t *enc,
                       const dpshim_encoder_call_t *call, uint64_t key,
                       pass_t *p, int32_t status, const char *msg,
                       shipped_t *s, pending_t **q, dpshim__vit_report_t *rep,
                       int *real) {
  header_t h = call_header(DPSHIM__VIT_FORWARD, key, status, call);
  h.ship = s && status == 0 && ship_matches(v, s, call, h.shape);
  if (!gather_headers(v, &h, msg, rep) || !same_shape(v, rep) ||
      !group_ready(v, rep))
    return 0;
  rep->shipped = !s ? 0 : every_ship_matches(v) ? 1 : -1;
  if (rep->shipped > 0)
    return forward_shipped(v, enc, call, s, p, q, rep, real);
  if (!gather_images(v, call, rep) || !plan(v, rep)) return 0;
  return forward_moved(v, enc, call, p, q, rep, real);
}

/* async: the embeddings' return left to the wait where images move (its
 * request made before the header round, which agrees on a failure). */
static int forward_grouped(dpshim__vit_t *v, const dpshim_encoder_t *enc,
                           const dpshim_encoder_call_t *call, uint64_t key,
                           int async, pass_t *p, int32_t status, char *msg,
                           dpshim__vit_report_t *rep, int *real) {
  pending_t *q = async ? pending_new(v->comm) : NULL;
  if (async && !q && status == 0) {
    status = DPSHIM_ENOMEM;
    snprintf(msg, MESSAGE_BYTES, "out of memory");
  }
  shipped_t *s = take_shipped(v);
  int ran = forward_met(v, enc, call, key, p, status, msg, s, &q, rep, real);
  shipped_free(s);
  pending_free(q);
  return ran;
}

static void own_sums(const dpshim_encoder_call_t *call,
                     dpshim__vit_report_t *rep) {
  rep->own_images = call->count;
  for (int32_t i = 0; i < call->count; i++) {
    double l = (double)call->patches[i];
    rep->own_patches += l;
    rep->own_patches_sq +=
        call->patches_sq ? (double)call->patches_sq[i] : l * l;
    dpshim__wire_t w = dpshim__call_wire(call, i);
    rep->own_wire += 2 * (double)w.out;
    for (int32_t k = 0; k < call->ninputs; k++)
      rep->own_wire += (double)w.in[k];
  }
}

int dpshim__vit_forward(dpshim__vit_t *v, const dpshim_encoder_t *enc,
                        const dpshim_encoder_call_t *call, int async,
                        uint64_t *key, dpshim__vit_report_t *rep) {
  memset(rep, 0, sizeof *rep);
  rep->kind = DPSHIM__VIT_FORWARD;
  *key = 0;
  char msg[MESSAGE_BYTES] = "";
  int32_t status = dpshim__call_check(call, 0, msg, MESSAGE_BYTES);
  pass_t *p = calloc(1, sizeof *p);
  if (!p && status == 0) {
    status = DPSHIM_ENOMEM;
    snprintf(msg, sizeof msg, "out of memory");
  }
  uint64_t k = ++v->next_key;
  int real = 0, ran = 0;
  if (!dpshim__vit_balancing(v)) drain_shipped(v);
  /* a shipped forward meets even apart: every rank has it */
  if (dpshim__vit_balancing(v) && (v->ship_head || !v->apart))
    ran = forward_grouped(v, enc, call, k, async, p, status, msg, rep, &real);
  if (status == 0) own_sums(call, rep);
  if (!ran) {
    void *saved;
    real = run_forward(v, enc, NULL, &saved, rep);
    if (p) {
      pass_clear(p);
      p->saved = saved;
    } else if (real == 0) {
      enc->release(enc->ctx, saved);
    }
  }
  if (real != 0 || !p) {
    pass_free(p);
    return real != 0 ? real : DPSHIM_ENOMEM;
  }
  dpshim__vit_group_t g = {v->size, v->first, v->images};
  if (dpshim__vit_flights_push(&v->flights, k, p->moved ? &g : NULL,
                               p->moved ? v->dest : NULL, p) < 0) {
    enc->release(enc->ctx, p->saved);
    pass_free(p);
    return DPSHIM_ENOMEM;
  }
  *key = k;
  return 0;
}

/* ---- backward ------------------------------------------------------------ */

/* Over the group: the moved images' output gradients, and their input
 * gradients when some rank asked for them. */
static int64_t gradient_bytes(const route_t *rt, int want) {
  int64_t bytes = 0;
  for (int32_t r = 0; r < rt->size; r++)
    for (int64_t i = rt->first[r]; i < rt->first[r + 1]; i++)
      if (rt->dest[i] != r)
        bytes += rt->wire[i].out + (want ? rt->wire[i].grad : 0);
  return bytes;
}

/* Every rank in step: output gradients to the encoding ranks, the real
 * backward there, input gradients back when some rank asked. */
static int backward_moved(dpshim__vit_t *v, const dpshim_encoder_t *enc,
                          const route_t *rt, pass_t *p, const void *out_grad,
                          void *in_grad, dpshim__vit_report_t *rep,
                          int *done) {
  int want = 0, failed = 0;
  for (int32_t r = 0; r < v->size; r++) want |= v->headers[r].want_grad;
  buffers_t b;
  memset(&b, 0, sizeof b);
  int64_t kout, sout, eout, kg = 0, sg = 0, eg = 0;
  field_totals(rt, FIELD_OUT, &kout, &sout, &eout);
  if (want) field_totals(rt, FIELD_GRAD, &kg, &sg, &eg);
  b.out = alloc((size_t)eout, &failed);
  b.back = alloc((size_t)sout, &failed);
  b.grad = want ? alloc((size_t)eg, &failed) : NULL;
  b.grad_back = want ? alloc((size_t)sg, &failed) : NULL;
  b.order = alloc((size_t)own_count(rt) * sizeof *b.order, &failed);
  b.offset = alloc((size_t)own_count(rt) * sizeof *b.offset, &failed);
  int real = 0;
  *done = 0;
  if (agree(v, failed ? DPSHIM_ENOMEM : 0,
            "out of memory for the gradients' exchange", rep))
    goto out;
  own_order(rt, b.order);
  own_copy_t oc = {rt, b.order, b.offset, FIELD_OUT};
  copy_own(&oc, (unsigned char *)(uintptr_t)out_grad, b.out, b.back,
           TO_PACKED);
  int32_t field = FIELD_OUT;
  const unsigned char *send = b.back;
  unsigned char *recv = b.out + kout;
  int rc = exchange(v, rt, 1, &field, 1, &send, &recv, NULL);
  if (rc < 0) {
    comm_failed(v, rc, rep);
    goto out;
  }
  *done = 1;
  rep->applied = 1;
  rep->bytes_moved = gradient_bytes(rt, want);
  real = run_backward(v, enc, p->saved, b.out, want ? b.grad : NULL, rep);
  p->saved = NULL;
  if (!want) goto out;
  field = FIELD_GRAD;
  send = b.grad + kg;
  double t = now(v);
  rc = exchange(v, rt, 1, &field, 0, &send, &b.grad_back, NULL);
  rep->arrival_s += now(v) - t;
  if (rc < 0) {
    comm_failed(v, rc, rep);
    real = real ? real : DPSHIM_EMPI;
  } else if (in_grad) {
    oc.field = FIELD_GRAD;
    copy_own(&oc, in_grad, b.grad, b.grad_back, TO_USER);
  }
out:
  buffers_free(&b);
  return real;
}

/* This rank's n images that other ranks encoded (b->idx, sent_images()),
 * encoded here again from what it sent, their output rows into out; the
 * real forward's result (*saved its state where 0), or DPSHIM_ENOMEM. */
static int encode_sent(dpshim__vit_t *v, const dpshim_encoder_t *enc,
                       pass_t *p, buffers_t *b, int64_t n, unsigned char *out,
                       void **saved, dpshim__vit_report_t *rep) {
  if (build_call(&p->shape, p->wire, b->idx, n, p->sent, out, &b->built) < 0)
    return DPSHIM_ENOMEM;
  return run_forward(v, enc, &b->built.call, saved, rep);
}

/* The balance off (or the exchange impossible): this rank's own images'
 * gradients without the group. Its saved forward runs back with zero
 * gradients for the images it encoded for others (which adds nothing),
 * and its images encoded elsewhere are encoded again here from what it
 * sent, and run back. */
static int backward_apart(dpshim__vit_t *v, const dpshim_encoder_t *enc,
                          const route_t *rt, pass_t *p, const void *out_grad,
                          void *in_grad, dpshim__vit_report_t *rep) {
  int failed = 0, want = in_grad != NULL;
  int64_t kout, sout, eout, kg = 0, sg = 0, eg = 0, own = own_count(rt);
  field_totals(rt, FIELD_OUT, &kout, &sout, &eout);
  if (want) field_totals(rt, FIELD_GRAD, &kg, &sg, &eg);
  buffers_t b;
  memset(&b, 0, sizeof b);
  b.out = calloc((size_t)eout + 1, 1);
  failed |= !b.out;
  b.back = alloc((size_t)sout, &failed);   /* the sent images' gradients */
  b.in[0] = alloc((size_t)sout, &failed);  /* and their embeddings */
  b.grad = want ? alloc((size_t)eg, &failed) : NULL;
  b.grad_back = want ? alloc((size_t)sg, &failed) : NULL;
  b.order = alloc((size_t)own * sizeof *b.order, &failed);
  b.offset = alloc((size_t)own * sizeof *b.offset, &failed);
  b.idx = alloc((size_t)own * sizeof *b.idx, &failed);
  int rc = DPSHIM_ENOMEM;
  if (failed) {
    enc->release(enc->ctx, p->saved);
    goto out;
  }
  own_order(rt, b.order);
  own_copy_t oc = {rt, b.order, b.offset, FIELD_OUT};
  unsigned char *user_grad = (unsigned char *)(uintptr_t)out_grad;
  copy_own(&oc, user_grad, b.out, NULL, TO_PACKED);
  rc = run_backward(v, enc, p->saved, b.out, b.grad, rep);
  oc.field = FIELD_GRAD;
  if (want) copy_own(&oc, in_grad, b.grad, NULL, TO_USER);
  int64_t n = sent_images(rt, b.order, b.idx);
  if (n == 0) goto out;
  void *saved;
  int again = encode_sent(v, enc, p, &b, n, b.in[0], &saved, rep);
  if (again == 0) {
    oc.field = FIELD_OUT;
    copy_own(&oc, user_grad, NULL, b.back, TO_PACKED);
    again = run_backward(v, enc, saved, b.back, b.grad_back, rep);
    oc.field = FIELD_GRAD;
    if (want) copy_own(&oc, in_grad, NULL, b.grad_back, TO_USER);
  }
  if (rc == 0) rc = again;
out:
  buffers_free(&b);
  return rc;
}

/* An async forward's embeddings into its caller's output: what arrived, or
 * where the exchange failed, this rank's own encodings of them. */
static int settle_return(dpshim__vit_t *v, const dpshim_encoder_t *enc,
                         const dpshim__vit_flight_t *f,
                         dpshim__vit_report_t *rep) {
  pass_t *p = f->data;
  pending_t *q = p->pending;
  if (!q) return 0;
  p->pending = NULL;
  rep->grouped = 1; /* the rest of a grouped forward */
  route_t rt = {f->ranks, p->me, f->first, f->dest, p->wire};
  own_copy_t oc = {&rt, q->b.order, q->b.offset, FIELD_OUT};
  int rc = q->comm->ops->finish(q->comm, q->req);
  if (rc < 0) {
    comm_failed(v, rc, rep);
    void *saved = NULL;
    int failed = 0;
    q->b.idx = alloc((size_t)own_count(&rt) * sizeof *q->b.idx, &failed);
    int64_t n = failed ? 0 : sent_images(&rt, q->b.order, q->b.idx);
    rc = failed ? DPSHIM_ENOMEM
         : n > 0 ? encode_sent(v, enc, p, &q->b, n, q->b.back, &saved, rep)
                 : 0;
    if (rc == 0 && saved) enc->release(enc->ctx, saved);
  }
  if (rc == 0) copy_own(&oc, q->output, NULL, q->b.back, TO_USER);
  pending_free(q);
  return rc;
}

int dpshim__vit_wait(dpshim__vit_t *v, const dpshim_encoder_t *enc,
                     uint64_t key, dpshim__vit_report_t *rep) {
  memset(rep, 0, sizeof *rep);
  rep->kind = DPSHIM__VIT_WAIT;
  const dpshim__vit_flight_t *f = dpshim__vit_flights_find(&v->flights, key);
  if (f) return settle_return(v, enc, f, rep);
  snprintf(rep->message, sizeof rep->message,
           "ViT: a wait for forward %llu, which this rank has not in flight: "
           "expected a forward not yet backed nor released",
           (unsigned long long)key);
  return DPSHIM_EINVAL;
}

int dpshim__vit_backward(dpshim__vit_t *v, const dpshim_encoder_t *enc,
                         uint64_t key, const void *out_grad, void *in_grad,
                         dpshim__vit_report_t *rep) {
  memset(rep, 0, sizeof *rep);
  rep->kind = DPSHIM__VIT_BACKWARD;
  dpshim__vit_flight_t f;
  if (dpshim__vit_flights_take(&v->flights, key, &f) < 0) {
    snprintf(rep->message, sizeof rep->message,
             "ViT: a backward of forward %llu, which this rank has not in "
             "flight: expected a forward not yet backed nor released; "
             "nothing was called", (unsigned long long)key);
    return DPSHIM_EINVAL;
  }
  pass_t *p = f.data;
  /* the embeddings it was computed from were meant to be waited for */
  int rc = settle_return(v, enc, &f, rep), together = 0, done = 0;
  if (rc != 0) {
    enc->release(enc->ctx, p->saved);
    pass_free(p);
    dpshim__vit_flight_free(&f);
    return rc;
  }
  if (dpshim__vit_balancing(v) && (!v->apart || p->moved)) {
    header_t h = {.kind = DPSHIM__VIT_BACKWARD, .key = key,
                  .want_grad = in_grad != NULL};
    together = gather_headers(v, &h, "", rep);
  }
  route_t rt = {f.ranks, p->me, f.first, f.dest, p->wire};
  if (!p->moved) rc = run_backward(v, enc, p->saved, out_grad, in_grad, rep);
  else if (together)
    rc = backward_moved(v, enc, &rt, p, out_grad, in_grad, rep, &done);
  if (p->moved && !done)
    rc = backward_apart(v, enc, &rt, p, out_grad, in_grad, rep);
  pass_free(p);
  dpshim__vit_flight_free(&f);
  return rc;
}

void dpshim__vit_release(dpshim__vit_t *v, const dpshim_encoder_t *enc,
                         uint64_t key, dpshim__vit_report_t *rep) {
  memset(rep, 0, sizeof *rep);
  rep->kind = DPSHIM__VIT_RELEASE;
  dpshim__vit_flight_t f;
  if (dpshim__vit_flights_take(&v->flights, key, &f) < 0) return;
  pass_t *p = f.data;
  enc->release(enc->ctx, p->saved);
  pass_free(p);
  dpshim__vit_flight_free(&f);
}

void dpshim__vit_checkpoint(dpshim__vit_t *v, dpshim__vit_kind_t kind,
                            dpshim__vit_report_t *rep) {
  memset(rep, 0, sizeof *rep);
  rep->kind = kind;
  if (dpshim__vit_balancing(v)) {
    header_t h = {.kind = (int32_t)kind};
    gather_headers(v, &h, "", rep);
  }
  /* forwards shipped and never called: their exchanges end with the run */
  if (kind == DPSHIM__VIT_CLOSE || !dpshim__vit_balancing(v))
    drain_shipped(v);
}
