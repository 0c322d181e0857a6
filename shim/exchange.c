/* The exchange and the repack after it; see exchange.h. */
#include "exchange.h"

#include <string.h>

#include "grow.h"
#include "hash.h"
#include "policy.h"

static double now(double (*clock)(void)) { return clock ? clock() : 0; }

int dpshim__exchange_reserve(dpshim__exchange_t *x, dpshim__comm_t *comm,
                             const dpshim_batch_t *b,
                             const dpshim__layout_t *l) {
  size_t cap = (size_t)b->capacity_samples, fields = (size_t)l->nfields;
  size_t sends = (size_t)b->nsamples * fields, recvs = cap * fields;
  if (dpshim__grow(&x->keep, &x->keep_cap, cap, sizeof *x->keep) < 0 ||
      dpshim__grow(&x->recv_meta, &x->recv_meta_cap, cap * (size_t)l->width,
                   sizeof *x->recv_meta) < 0 ||
      dpshim__grow(&x->send, &x->send_cap, sends, sizeof *x->send) < 0 ||
      dpshim__grow(&x->recv, &x->recv_cap, recvs, sizeof *x->recv) < 0 ||
      dpshim__repack_reserve(&x->repack, b->capacity_samples) < 0)
    return DPSHIM_ENOMEM;
  return comm->ops->reserve(comm, sends + recvs);
}

int dpshim__exchange_reserve_staging(dpshim__exchange_t *x, size_t bytes) {
  return dpshim__grow(&x->staging, &x->staging_cap, bytes, 1);
}

/* One message per field and run of samples [i, j) bound for `to`. */
static size_t list_sends(dpshim__exchange_t *x, const dpshim_batch_t *b,
                         const dpshim__layout_t *l, const int32_t *dest,
                         int32_t me) {
  size_t n = 0;
  for (int32_t i = 0, j; i < b->nsamples; i = j) {
    for (j = i + 1; j < b->nsamples && dest[j] == dest[i];) j++;
    if (dest[i] == me) continue;
    for (int32_t f = 0; f < l->nfields; f++) {
      size_t bytes;
      unsigned char *rows = dpshim__batch_rows(b, l, f, i, j - i, &bytes);
      if (bytes) x->send[n++] = (dpshim__comm_piece_t){rows, bytes, dest[i], f};
    }
  }
  return n;
}

/* The samples bound here from other ranks, by rank then index: their metas
 * into x->recv_meta, each field's rows summed into rows[], and the receives
 * matching list_sends() on those ranks (the same runs, field by field),
 * whose buffers landing() sets; *nrecv counts them. */
static int32_t list_received(dpshim__exchange_t *x, const dpshim__layout_t *l,
                             const dpshim__exchange_plan_t *p, int32_t size,
                             int32_t me, int64_t *rows, size_t *nrecv) {
  size_t width = (size_t)l->width;
  int32_t n = 0;
  *nrecv = 0;
  for (int32_t r = 0; r < size; r++) {
    if (r == me) continue;
    for (int64_t i = p->first[r], j; i < p->first[r + 1]; i = j) {
      for (j = i + 1; j < p->first[r + 1] && p->dest[j] == p->dest[i];) j++;
      if (p->dest[i] != me) continue;
      size_t bytes[DPSHIM__MAX_FIELDS] = {0};
      for (int64_t k = i; k < j; k++) {
        const int32_t *m = p->meta + (size_t)k * width;
        memcpy(x->recv_meta + (size_t)n++ * width, m, width * sizeof *m);
        for (int32_t f = 0; f < l->nfields; f++) {
          int64_t got = dpshim__meta_rows(l, f, m);
          rows[f] += got;
          bytes[f] += (size_t)got * l->row_bytes[f];
        }
      }
      for (int32_t f = 0; f < l->nfields; f++)
        if (bytes[f])
          x->recv[(*nrecv)++] = (dpshim__comm_piece_t){NULL, bytes[f], r, f};
    }
  }
  return n;
}

/* Whether n more samples of rows[] fit past what b holds: the test the
 * balancer runs on every rank's gathered numbers to know who stages. */
static int fits_in_place(const dpshim_batch_t *b, const dpshim__layout_t *l,
                         int32_t n, const int64_t *rows) {
  int64_t total[DPSHIM__MAX_FIELDS + 1], room[DPSHIM__MAX_FIELDS + 1];
  total[0] = b->nsamples + n;
  room[0] = b->capacity_samples;
  for (int32_t f = 0; f < l->nfields; f++) {
    size_t held;
    dpshim__batch_rows(b, l, f, 0, b->nsamples, &held);
    total[f + 1] = (int64_t)(held / l->row_bytes[f]) + rows[f];
    room[f + 1] = b->fields[f].capacity_rows;
  }
  return dpshim__policy_fits(total, room, (size_t)l->nfields + 1);
}

/* Where each field's received rows go: past b's rows, or in staging, field
 * after field; and each receive its place in its field's, in order. */
static void landing(dpshim__exchange_t *x, const dpshim_batch_t *b,
                    const dpshim__layout_t *l, int in_place,
                    const int64_t *rows, size_t nrecv, unsigned char **at) {
  unsigned char *staged = x->staging, *next[DPSHIM__MAX_FIELDS];
  for (int32_t f = 0; f < l->nfields; f++) {
    size_t held;
    unsigned char *start = dpshim__batch_rows(b, l, f, 0, b->nsamples, &held);
    size_t bytes = (size_t)rows[f] * l->row_bytes[f];
    at[f] = next[f] = !bytes ? NULL : in_place ? start + held : staged;
    if (!in_place && bytes) staged += bytes;
  }
  for (size_t k = 0; k < nrecv; k++) {
    x->recv[k].buf = next[x->recv[k].tag];
    next[x->recv[k].tag] += x->recv[k].bytes;
  }
}

/* A record's hash: its rows field after field, as if back to back. */
static uint64_t sent_hashes(const dpshim_batch_t *b, const dpshim__layout_t *l,
                            const int32_t *dest, int32_t me) {
  uint64_t sum = 0;
  for (int32_t i = 0; i < b->nsamples; i++) {
    if (dest[i] == me) continue;
    uint64_t h = DPSHIM__FNV_SEED;
    for (int32_t f = 0; f < l->nfields; f++) {
      size_t bytes;
      const unsigned char *rows = dpshim__batch_rows(b, l, f, i, 1, &bytes);
      h = dpshim__fnv(h, rows, bytes);
    }
    sum += h;
  }
  return sum;
}

static uint64_t received_hashes(const dpshim__exchange_t *x,
                                const dpshim__layout_t *l, int32_t n,
                                unsigned char *const *at) {
  size_t used[DPSHIM__MAX_FIELDS] = {0};
  uint64_t sum = 0;
  for (int32_t k = 0; k < n; k++) {
    const int32_t *m = x->recv_meta + (size_t)k * (size_t)l->width;
    uint64_t h = DPSHIM__FNV_SEED;
    for (int32_t f = 0; f < l->nfields; f++) {
      size_t bytes = (size_t)dpshim__meta_rows(l, f, m) * l->row_bytes[f];
      if (bytes) h = dpshim__fnv(h, at[f] + used[f], bytes);
      used[f] += bytes;
    }
    sum += h;
  }
  return sum;
}

/* The kept samples (and those received in place) closed up, the staged
 * ones copied in after them. */
static void repack(dpshim__exchange_t *x, dpshim_batch_t *b,
                   const dpshim__layout_t *l, int32_t kept, int32_t received,
                   int in_place, unsigned char *const *at,
                   dpshim__exchange_result_t *out) {
  if (in_place) {
    for (int32_t k = 0; k < received; k++) x->keep[kept + k] = b->nsamples + k;
    dpshim__batch_append(b, l, received, x->recv_meta, NULL);
    kept += received;
  }
  dpshim__repack_plan(&x->repack, b, l, x->keep, kept);
  dpshim__repack_apply(&x->repack, b, l);
  out->copied = x->repack.copied;
  if (in_place) return;
  int32_t base = b->nsamples;
  dpshim__batch_append(b, l, received, x->recv_meta,
                       (const unsigned char *const *)at);
  for (int32_t f = 0; f < l->nfields; f++) {
    size_t bytes;
    dpshim__batch_rows(b, l, f, base, received, &bytes);
    out->copied += (int64_t)bytes;
  }
}

int dpshim__exchange_run(dpshim__exchange_t *x, dpshim__comm_t *comm,
                         dpshim_batch_t *b, const dpshim__layout_t *l,
                         const dpshim__exchange_plan_t *p, int hash,
                         double (*clock)(void),
                         dpshim__exchange_result_t *out) {
  int32_t me = comm->rank, kept = 0;
  const int32_t *dest = p->dest + p->first[me];
  int64_t rows[DPSHIM__MAX_FIELDS] = {0};
  unsigned char *at[DPSHIM__MAX_FIELDS];
  double t0 = now(clock);
  memset(out, 0, sizeof *out);
  for (int32_t i = 0; i < b->nsamples; i++)
    if (dest[i] == me) x->keep[kept++] = i;
  size_t nrecv, nsend = list_sends(x, b, l, dest, me);
  out->sent = b->nsamples - kept;
  out->received = list_received(x, l, p, comm->size, me, rows, &nrecv);
  int in_place = fits_in_place(b, l, out->received, rows);
  landing(x, b, l, in_place, rows, nrecv, at);
  double h0 = now(clock);
  if (hash) out->sent_hash = sent_hashes(b, l, dest, me);
  out->hash_s = now(clock) - h0;
  int rc = comm->ops->exchange(comm, x->send, nsend, x->recv, nrecv);
  if (rc < 0) return rc;
  h0 = now(clock);
  if (hash) out->received_hash = received_hashes(x, l, out->received, at);
  double t1 = now(clock);
  out->hash_s += t1 - h0;
  repack(x, b, l, kept, out->received, in_place, at, out);
  out->staged = !in_place && out->received > 0;
  out->exchange_s = t1 - t0 - out->hash_s;
  out->repack_s = now(clock) - t1;
  return 0;
}

void dpshim__exchange_free(dpshim__exchange_t *x) {
  free(x->keep);
  free(x->recv_meta);
  free(x->send);
  free(x->recv);
  free(x->staging);
  dpshim__repack_free(&x->repack);
  memset(x, 0, sizeof *x);
}
