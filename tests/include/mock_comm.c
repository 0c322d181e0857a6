/* Threads behind the comm seam; see mock_comm.h. */
#include "mock_comm.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dpshim/dpshim.h"

/* What a rank posts for the others to read between the two barriers. */
typedef struct slot {
  mock_op_t op;
  const unsigned char *send; /* max: the values */
  size_t bytes;             /* allgather, gather, bcast; max: count */
  const size_t *counts;     /* allgatherv: all counts; alltoallv_parts: sent */
  const size_t *recvcounts; /* alltoallv_parts */
  int parts;                /* alltoallv_parts: send[k] below, counts by part */
  const unsigned char *const *sends;
  const dpshim__comm_piece_t *pieces[2]; /* exchange: sent, received */
  size_t npieces[2];
} slot_t;

typedef struct world {
  int size;
  mock_opts_t opts;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int arrived, exited;
  unsigned long generation;
  int broken, code; /* once broken, every collective returns code */
  mock_stats_t stats;
  slot_t slot[MOCK_MAX_RANKS];
  size_t reserved[MOCK_MAX_RANKS]; /* pieces each rank reserved */
} world_t;

typedef struct rank_ctx {
  world_t *w, *group, *peer; /* NULL unless run by mock_run_groups */
  dpshim__comm_t comm, dp, peers;
  mock_fn_t fn;
  mock_group_fn_t group_fn;
  void *arg;
  pthread_t thread;
} rank_ctx_t;

/* Under w->mu. The first break sets the code and the message. */
static void break_world(world_t *w, int code, int *flag, const char *fmt,
                        ...) {
  if (flag) *flag = 1;
  if (!w->broken) {
    w->broken = 1;
    w->code = code;
    if (fmt && !w->stats.message[0]) {
      va_list ap;
      va_start(ap, fmt);
      vsnprintf(w->stats.message, sizeof w->stats.message, fmt, ap);
      va_end(ap);
    }
  }
  pthread_cond_broadcast(&w->cv);
}

/* Under w->mu: waits until every rank has arrived. 0, or the world's code. */
static int barrier_locked(world_t *w, int rank) {
  if (w->broken) return w->code;
  unsigned long gen = w->generation;
  if (++w->arrived == w->size) {
    w->arrived = 0;
    w->generation++;
    pthread_cond_broadcast(&w->cv);
    return 0;
  }
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += MOCK_DEADLOCK_SECONDS;
  while (gen == w->generation && !w->broken) {
    if (w->exited > 0) {
      break_world(w, DPSHIM_EINVAL, &w->stats.deadlock,
                  "rank %d waits in a collective another rank never reaches "
                  "(a rank returned)", rank);
      break;
    }
    if (pthread_cond_timedwait(&w->cv, &w->mu, &deadline) == ETIMEDOUT &&
        gen == w->generation)
      break_world(w, DPSHIM_EINVAL, &w->stats.deadlock,
                  "rank %d waited %d s in a collective", rank,
                  MOCK_DEADLOCK_SECONDS);
  }
  return gen != w->generation ? 0 : w->code;
}

static int barrier(world_t *w, int rank) {
  pthread_mutex_lock(&w->mu);
  int rc = barrier_locked(w, rank);
  pthread_mutex_unlock(&w->mu);
  return rc;
}

/* Posts this rank's slot (or fires the fault) and waits for every rank. */
static int enter(world_t *w, int rank, const slot_t *s) {
  long k = w->stats.calls[rank]++; /* only this rank's thread writes it */
  pthread_mutex_lock(&w->mu);
  int rc;
  if (w->opts.fail_rank == rank && k == w->opts.fail_call) {
    break_world(w, w->opts.fail_code, &w->stats.faulted, NULL);
    rc = w->opts.fail_code;
  } else if (w->broken) {
    rc = w->code;
  } else {
    w->slot[rank] = *s;
    rc = barrier_locked(w, rank);
  }
  pthread_mutex_unlock(&w->mu);
  return rc;
}

static const char *op_name(mock_op_t op) {
  static const char *names[MOCK_NOPS] = {"allgather", "allgatherv",
                                         "exchange", "gather", "bcast",
                                         "max", "alltoallv_parts"};
  return names[op];
}

/* alltoallv_parts: rank r's parts and counts against every receiver's. */
static int parts_agree(const slot_t *s, int p, int r, char *why, size_t len) {
  if (s[r].parts != s[0].parts) {
    snprintf(why, len, "alltoallv_parts: rank %d has %d parts, rank 0 %d", r,
             s[r].parts, s[0].parts);
    return 0;
  }
  for (int k = 0; k < s[r].parts; k++)
    for (int q = 0; q < p; q++) {
      size_t at = (size_t)k * (size_t)p;
      if (s[r].counts[at + (size_t)q] != s[q].recvcounts[at + (size_t)r]) {
        snprintf(why, len,
                 "alltoallv_parts: rank %d sends %zu bytes of part %d to "
                 "rank %d, which expects %zu", r, s[r].counts[at + (size_t)q],
                 k, q, s[q].recvcounts[at + (size_t)r]);
        return 0;
      }
      if (s[r].counts[at + (size_t)q] && !s[r].sends[k]) {
        snprintf(why, len, "alltoallv_parts: rank %d sends NULL", r);
        return 0;
      }
    }
  return 1;
}

/* exchange: the send piece of rank `from` that receive piece k of rank `to`
 * matches (the same peer pair and tag, in order), or NULL. */
static const dpshim__comm_piece_t *match(const slot_t *s, int to, size_t k) {
  const dpshim__comm_piece_t *want = &s[to].pieces[1][k];
  int from = want->peer;
  size_t nth = 0;
  for (size_t j = 0; j < k; j++)
    nth += s[to].pieces[1][j].peer == from && s[to].pieces[1][j].tag == want->tag;
  for (size_t j = 0; j < s[from].npieces[0]; j++) {
    const dpshim__comm_piece_t *p = &s[from].pieces[0][j];
    if (p->peer == to && p->tag == want->tag && nth-- == 0) return p;
  }
  return NULL;
}

/* exchange: rank r's pieces against its reservation, its peers' and their
 * sizes; every send is received (counted on the receivers' side). */
static int pieces_agree(const world_t *w, int r, char *why, size_t len) {
  const slot_t *s = w->slot;
  size_t sends = 0;
  if (s[r].npieces[0] + s[r].npieces[1] > w->reserved[r]) {
    snprintf(why, len, "exchange: rank %d lists %zu pieces, reserved %zu", r,
             s[r].npieces[0] + s[r].npieces[1], w->reserved[r]);
    return 0;
  }
  for (size_t k = 0; k < s[r].npieces[1]; k++) {
    const dpshim__comm_piece_t *want = &s[r].pieces[1][k], *got;
    if (want->peer < 0 || want->peer >= w->size || want->peer == r ||
        !(got = match(s, r, k)) || got->bytes != want->bytes || !want->bytes) {
      snprintf(why, len, "exchange: rank %d's receive %zu (%zu bytes, tag %d "
               "from rank %d) matches no send of that size", r, k,
               want->bytes, (int)want->tag, (int)want->peer);
      return 0;
    }
  }
  for (int q = 0; q < w->size; q++)
    for (size_t k = 0; k < s[q].npieces[1]; k++) sends += s[q].pieces[1][k].peer == r;
  if (sends != s[r].npieces[0]) {
    snprintf(why, len, "exchange: rank %d sends %zu pieces, %zu are received",
             r, s[r].npieces[0], sends);
    return 0;
  }
  return 1;
}

/* Between the barriers: whether the posted slots agree. Every rank computes
 * the same answer from the same slots. Writes why into why. */
static int slots_agree(const world_t *w, char *why, size_t len) {
  const slot_t *s = w->slot;
  int p = w->size;
  for (int r = 0; r < p; r++) {
    if (s[r].op != s[0].op) {
      snprintf(why, len, "rank %d called %s while rank 0 called %s", r,
               op_name(s[r].op), op_name(s[0].op));
      return 0;
    }
  }
  for (int r = 0; r < p; r++) {
    switch (s[0].op) {
    case MOCK_ALLGATHER:
    case MOCK_GATHER:
    case MOCK_BCAST:
    case MOCK_MAX:
      if (s[r].bytes != s[0].bytes) {
        snprintf(why, len, "%s: rank %d sends %zu, rank 0 %zu",
                 op_name(s[0].op), r, s[r].bytes, s[0].bytes);
        return 0;
      }
      if (s[r].bytes && !s[r].send && (s[0].op != MOCK_BCAST || r == 0)) {
        snprintf(why, len, "%s: rank %d sends NULL", op_name(s[0].op), r);
        return 0;
      }
      break;
    case MOCK_ALLGATHERV:
      for (int q = 0; q < p; q++) {
        if (s[r].counts[q] != s[0].counts[q]) {
          snprintf(why, len,
                   "allgatherv: rank %d has counts[%d] = %zu, rank 0 %zu", r,
                   q, s[r].counts[q], s[0].counts[q]);
          return 0;
        }
      }
      if (s[r].counts[r] && !s[r].send) {
        snprintf(why, len, "allgatherv: rank %d sends NULL", r);
        return 0;
      }
      break;
    case MOCK_EXCHANGE:
      if (!pieces_agree(w, r, why, len)) return 0;
      break;
    case MOCK_ALLTOALLV_PARTS:
      if (!parts_agree(s, p, r, why, len)) return 0;
      break;
    case MOCK_NOPS:
      break;
    }
  }
  return 1;
}

/* Rank 0 counts each completed collective, once. */
static void count_op(world_t *w, int rank) {
  const slot_t *s = w->slot;
  int p = w->size;
  if (rank != 0) return;
  pthread_mutex_lock(&w->mu);
  w->stats.ops[s[0].op]++;
  int parts = s[0].op == MOCK_ALLTOALLV_PARTS ? s[0].parts : 0;
  for (int r = 0; s[0].op == MOCK_EXCHANGE && r < p; r++)
    for (size_t k = 0; k < s[r].npieces[0]; k++) {
      w->stats.alltoallv_total += s[r].pieces[0][k].bytes;
      w->stats.alltoallv_moved += s[r].pieces[0][k].bytes;
    }
  for (int r = 0; r < p; r++)
    for (int q = 0; q < p * parts; q++) {
      w->stats.alltoallv_total += s[r].counts[q];
      if (q % p != r) w->stats.alltoallv_moved += s[r].counts[q];
    }
  pthread_mutex_unlock(&w->mu);
}

/* bcast and max write where others read: compute between the barriers,
 * write after the second. */
static int complete_in_place(world_t *w, int rank, unsigned char *buf) {
  const slot_t *s = w->slot, *me = &w->slot[rank];
  size_t bytes = me->bytes * (me->op == MOCK_MAX ? sizeof(int64_t) : 1);
  unsigned char *tmp = malloc(bytes ? bytes : 1);
  if (!tmp) abort(); /* a test harness out of memory cannot go on */
  if (me->op == MOCK_BCAST) {
    memcpy(tmp, s[0].send, bytes);
  } else {
    int64_t *v = (int64_t *)(void *)tmp;
    for (size_t k = 0; k < me->bytes; k++) {
      v[k] = INT64_MIN;
      for (int r = 0; r < w->size; r++) {
        int64_t x = ((const int64_t *)(const void *)s[r].send)[k];
        if (x > v[k]) v[k] = x;
      }
    }
  }
  count_op(w, rank);
  int rc = barrier(w, rank);
  if (rc == 0 && (me->op == MOCK_MAX || rank != 0)) memcpy(buf, tmp, bytes);
  free(tmp);
  return rc;
}

/* alltoallv_parts: what every rank sends this one, part by part, each at
 * its offset in the sender's buffer and in this rank's. */
static void copy_parts(const world_t *w, int rank, unsigned char *const *recv) {
  const slot_t *s = w->slot, *me = &w->slot[rank];
  size_t p = (size_t)w->size;
  for (int k = 0; k < me->parts; k++) {
    size_t at = 0;
    for (size_t r = 0; r < p; r++) {
      const size_t *sent = s[r].counts + (size_t)k * p;
      size_t from = 0, n = me->recvcounts[(size_t)k * p + r];
      for (int q = 0; q < rank; q++) from += sent[q];
      if (n) memcpy(recv[k] + at, s[r].sends[k] + from, n);
      at += n;
    }
  }
}

/* exchange: every receive piece from the send it matches; corrupt_rank's
 * first byte flipped when asked. */
static void copy_pieces(world_t *w, int rank) {
  const slot_t *me = &w->slot[rank];
  for (size_t k = 0; k < me->npieces[1]; k++)
    memcpy(me->pieces[1][k].buf, match(w->slot, rank, k)->buf,
           me->pieces[1][k].bytes);
  if (w->opts.corrupt && rank == w->opts.corrupt_rank && me->npieces[1]) {
    ((unsigned char *)me->pieces[1][0].buf)[0] ^= 0xff;
    pthread_mutex_lock(&w->mu);
    w->stats.corrupted = 1;
    pthread_mutex_unlock(&w->mu);
  }
}

/* After the first barrier: check, copy, count, second barrier. */
static int complete(world_t *w, int rank, unsigned char *recv) {
  char why[256];
  if (!slots_agree(w, why, sizeof why)) {
    pthread_mutex_lock(&w->mu);
    break_world(w, DPSHIM_EINVAL, &w->stats.mismatch, "%s", why);
    pthread_mutex_unlock(&w->mu);
    return barrier(w, rank);
  }
  const slot_t *s = w->slot, *me = &w->slot[rank];
  int p = w->size;
  if (me->op == MOCK_BCAST || me->op == MOCK_MAX)
    return complete_in_place(w, rank, recv);
  if (me->op == MOCK_GATHER && rank != 0) {
    count_op(w, rank);
    return barrier(w, rank);
  }
  if (me->op == MOCK_ALLTOALLV_PARTS || me->op == MOCK_EXCHANGE) {
    if (me->op == MOCK_EXCHANGE) copy_pieces(w, rank);
    else copy_parts(w, rank, (unsigned char *const *)(void *)recv);
    count_op(w, rank);
    return barrier(w, rank);
  }
  size_t at = 0;
  for (int r = 0; r < p; r++) {
    const unsigned char *src = s[r].send;
    size_t n;
    switch (me->op) {
    case MOCK_ALLGATHER:
    case MOCK_GATHER:
      n = me->bytes;
      break;
    default: /* allgatherv */
      n = me->counts[r];
      break;
    }
    if (n) memcpy(recv + at, src, n);
    at += n;
  }
  count_op(w, rank);
  return barrier(w, rank);
}

static int mock_allgather(dpshim__comm_t *c, const void *send, size_t bytes,
                          void *recv) {
  slot_t s = {.op = MOCK_ALLGATHER, .send = send, .bytes = bytes};
  int rc = enter(c->impl, c->rank, &s);
  return rc < 0 ? rc : complete(c->impl, c->rank, recv);
}

static int mock_allgatherv(dpshim__comm_t *c, const void *send, void *recv,
                           const size_t *counts) {
  slot_t s = {.op = MOCK_ALLGATHERV, .send = send, .counts = counts};
  int rc = enter(c->impl, c->rank, &s);
  return rc < 0 ? rc : complete(c->impl, c->rank, recv);
}

static int mock_alltoallv_parts(dpshim__comm_t *c, int parts,
                                const void *const *send,
                                const size_t *sendcounts, void *const *recv,
                                const size_t *recvcounts) {
  if (parts < 1 || parts > DPSHIM__COMM_PARTS_MAX) return DPSHIM_EINVAL;
  slot_t s = {.op = MOCK_ALLTOALLV_PARTS,
              .counts = sendcounts,
              .recvcounts = recvcounts,
              .parts = parts,
              .sends = (const unsigned char *const *)send};
  int rc = enter(c->impl, c->rank, &s);
  return rc < 0 ? rc : complete(c->impl, c->rank, (void *)recv);
}

/* Started exchanges move at their start (the ranks meet there, as they
 * post over MPI); a failure shows at the finish, as a nonblocking MPI
 * exchange's may only at its completion. */
struct dpshim__comm_request {
  int rc;
};

static dpshim__comm_request_t *mock_request_new(dpshim__comm_t *c) {
  (void)c;
  return calloc(1, sizeof(dpshim__comm_request_t));
}

static int mock_start(dpshim__comm_t *c, dpshim__comm_request_t *req,
                      int parts, const void *const *send,
                      const size_t *sendcounts, void *const *recv,
                      const size_t *recvcounts) {
  req->rc = mock_alltoallv_parts(c, parts, send, sendcounts, recv, recvcounts);
  return 0;
}

static int mock_finish(dpshim__comm_t *c, dpshim__comm_request_t *req) {
  (void)c;
  int rc = req->rc;
  req->rc = 0;
  return rc;
}

static void mock_request_free(dpshim__comm_t *c, dpshim__comm_request_t *req) {
  (void)c;
  free(req);
}

static int mock_reserve(dpshim__comm_t *c, size_t n) {
  world_t *w = c->impl;
  if (n > w->reserved[c->rank]) w->reserved[c->rank] = n;
  return 0;
}

static int mock_exchange(dpshim__comm_t *c, const dpshim__comm_piece_t *send,
                         size_t nsend, const dpshim__comm_piece_t *recv,
                         size_t nrecv) {
  slot_t s = {.op = MOCK_EXCHANGE,
              .pieces = {send, recv},
              .npieces = {nsend, nrecv}};
  int rc = enter(c->impl, c->rank, &s);
  return rc < 0 ? rc : complete(c->impl, c->rank, NULL);
}

static int mock_gather(dpshim__comm_t *c, const void *send, size_t bytes,
                       void *recv) {
  slot_t s = {.op = MOCK_GATHER, .send = send, .bytes = bytes};
  int rc = enter(c->impl, c->rank, &s);
  return rc < 0 ? rc : complete(c->impl, c->rank, recv);
}

static int mock_bcast(dpshim__comm_t *c, void *buf, size_t bytes) {
  slot_t s = {.op = MOCK_BCAST, .send = buf, .bytes = bytes};
  int rc = enter(c->impl, c->rank, &s);
  return rc < 0 ? rc : complete(c->impl, c->rank, buf);
}

static int mock_max(dpshim__comm_t *c, int64_t *v, int n) {
  slot_t s = {.op = MOCK_MAX, .send = (const void *)v, .bytes = (size_t)n};
  int rc = enter(c->impl, c->rank, &s);
  return rc < 0 ? rc : complete(c->impl, c->rank, (unsigned char *)v);
}

static const dpshim__comm_ops_t mock_ops = {
    .allgather = mock_allgather,
    .allgatherv = mock_allgatherv,
    .alltoallv_parts = mock_alltoallv_parts,
    .request_new = mock_request_new,
    .start = mock_start,
    .finish = mock_finish,
    .request_free = mock_request_free,
    .reserve = mock_reserve,
    .exchange = mock_exchange,
    .gather = mock_gather,
    .bcast = mock_bcast,
    .max = mock_max,
};

static void leave(world_t *w) {
  pthread_mutex_lock(&w->mu);
  w->exited++;
  pthread_cond_broadcast(&w->cv); /* ranks waiting for this one never finish */
  pthread_mutex_unlock(&w->mu);
}

static void *rank_main(void *p) {
  rank_ctx_t *c = p;
  if (c->group_fn)
    c->group_fn(&c->comm, &c->dp, &c->peers, c->comm.rank, c->arg);
  else
    c->fn(&c->comm, c->comm.rank, c->arg);
  leave(c->w);
  if (c->group) leave(c->group);
  if (c->peer) leave(c->peer);
  return NULL;
}

static world_t *world_new(int size, const mock_opts_t *opts) {
  world_t *w = calloc(1, sizeof *w);
  if (!w) return NULL;
  w->size = size;
  w->opts = *opts;
  pthread_mutex_init(&w->mu, NULL);
  pthread_cond_init(&w->cv, NULL);
  return w;
}

static void world_free(world_t *w) {
  if (!w) return;
  pthread_cond_destroy(&w->cv);
  pthread_mutex_destroy(&w->mu);
  free(w);
}

static void merge_stats(mock_stats_t *into, const mock_stats_t *s) {
  into->deadlock |= s->deadlock;
  into->mismatch |= s->mismatch;
  if (!into->message[0]) memcpy(into->message, s->message, sizeof s->message);
}

/* Starts every rank of ctx[0 .. size) and joins them; -1 if one could not
 * start (the started ones find it missing and break their worlds). */
static int start_ranks(rank_ctx_t *ctx, int size) {
  int started = 0, rc = 0;
  for (int r = 0; r < size; r++) {
    if (pthread_create(&ctx[r].thread, NULL, rank_main, &ctx[r]) != 0) {
      for (int q = r; q < size; q++) {
        pthread_mutex_lock(&ctx[q].w->mu);
        ctx[q].w->exited++;
        break_world(ctx[q].w, DPSHIM_ENOMEM, &ctx[q].w->stats.deadlock,
                    "could not start rank %d", q);
        pthread_mutex_unlock(&ctx[q].w->mu);
      }
      rc = -1;
      break;
    }
    started++;
  }
  for (int r = 0; r < started; r++) pthread_join(ctx[r].thread, NULL);
  return rc;
}

int mock_run_ex(const mock_opts_t *opts, mock_fn_t fn, void *arg,
                mock_stats_t *stats) {
  if (opts->size < 1 || opts->size > MOCK_MAX_RANKS) return -1;
  world_t *w = world_new(opts->size, opts);
  rank_ctx_t *ctx = calloc((size_t)opts->size, sizeof *ctx);
  int rc = -1;
  if (w && ctx) {
    for (int r = 0; r < w->size; r++)
      ctx[r] = (rank_ctx_t){.w = w,
                            .comm = {.ops = &mock_ops, .impl = w, .rank = r,
                                     .size = w->size, .id = r},
                            .fn = fn,
                            .arg = arg};
    rc = start_ranks(ctx, w->size);
    if (w->stats.deadlock || w->stats.mismatch) rc = -1;
    if (stats) *stats = w->stats;
  }
  free(ctx);
  world_free(w);
  return rc;
}

int mock_run_groups(const mock_opts_t *opts, int ngroups, mock_group_fn_t fn,
                    void *arg, mock_stats_t *stats) {
  int size = opts->size, dp = size / (ngroups > 0 ? ngroups : 1);
  if (size < 1 || size > MOCK_MAX_RANKS || ngroups < 1 || size % ngroups)
    return -1;
  mock_opts_t plain = {.size = dp, .fail_rank = -1};
  mock_opts_t peer_opts = {.size = ngroups, .fail_rank = -1};
  world_t *w = world_new(size, opts);
  world_t *g[MOCK_MAX_RANKS] = {0}, *q[MOCK_MAX_RANKS] = {0};
  rank_ctx_t *ctx = calloc((size_t)size, sizeof *ctx);
  int ok = w && ctx, rc = -1;
  for (int k = 0; k < ngroups; k++) ok &= (g[k] = world_new(dp, &plain)) != NULL;
  for (int k = 0; k < dp; k++) ok &= (q[k] = world_new(ngroups, &peer_opts)) != NULL;
  if (ok) {
    for (int r = 0; r < size; r++) {
      /* tp fastest: group r % ngroups, DP index r / ngroups */
      world_t *mine = g[r % ngroups], *peer = q[r / ngroups];
      ctx[r] = (rank_ctx_t){.w = w, .group = mine, .peer = peer,
                            .group_fn = fn, .arg = arg,
                            .comm = {.ops = &mock_ops, .impl = w, .rank = r,
                                     .size = size, .id = r},
                            .dp = {.ops = &mock_ops, .impl = mine,
                                   .rank = r / ngroups, .size = dp, .id = r},
                            .peers = {.ops = &mock_ops, .impl = peer,
                                      .rank = r % ngroups, .size = ngroups,
                                      .id = r}};
    }
    rc = start_ranks(ctx, size);
    mock_stats_t all = w->stats;
    for (int k = 0; k < ngroups; k++) merge_stats(&all, &g[k]->stats);
    for (int k = 0; k < dp; k++) merge_stats(&all, &q[k]->stats);
    if (all.deadlock || all.mismatch) rc = -1;
    if (stats) *stats = all;
  }
  for (int k = 0; k < ngroups; k++) world_free(g[k]);
  for (int k = 0; k < dp; k++) world_free(q[k]);
  free(ctx);
  world_free(w);
  return rc;
}
