/* reftrain's ledger; see ledger.h. */
#include "ledger.h"

#include <stdlib.h>
#include <string.h>

#include "../mix.h"

int ledger_init(ledger_t *l, int64_t steps, bool counts, bool keep_ids,
                bool check) {
  *l = (ledger_t){.steps = steps, .counts = counts, .keep_ids = keep_ids,
                  .check = check};
  size_t n = (size_t)steps;
  l->step_ms = calloc(n, sizeof *l->step_ms);
  l->compute_ms = calloc(n, sizeof *l->compute_ms);
  l->handoff_ms = calloc(n, sizeof *l->handoff_ms);
  l->wait_ms = calloc(n, sizeof *l->wait_ms);
  l->step_tokens = calloc(n, sizeof *l->step_tokens);
  l->batch_hash = calloc(n, sizeof *l->batch_hash);
  l->produced = calloc(2 * n, sizeof *l->produced);
  l->consumed = calloc(2 * n, sizeof *l->consumed);
  l->step_nids = calloc(n, sizeof *l->step_nids);
  if (!l->step_ms || !l->compute_ms || !l->handoff_ms || !l->wait_ms ||
      !l->step_tokens || !l->batch_hash || !l->produced || !l->consumed ||
      !l->step_nids) {
    ledger_free(l);
    return -1;
  }
  return 0;
}

void ledger_free(ledger_t *l) {
  free(l->step_ms);
  free(l->compute_ms);
  free(l->handoff_ms);
  free(l->wait_ms);
  free(l->step_tokens);
  free(l->batch_hash);
  free(l->produced);
  free(l->consumed);
  free(l->step_nids);
  free(l->ids);
  *l = (ledger_t){0};
}

/* A full mix per word, not a cheap multiply: the digest sums per-sample
 * hashes, so they must behave like independent random values or changes in
 * two samples could cancel out. */
static uint64_t fold(uint64_t h, uint64_t v) {
  return dpshim__tool_mix64((h + 0x9E3779B97F4A7C15u) ^ v);
}

/* Hash of one sample: its id, its length and every byte of its three token
 * fields. */
static uint64_t sample_hash(const packload_batch_t *b, int32_t i) {
  int32_t lo = b->cu_seqlens[i], hi = b->cu_seqlens[i + 1];
  uint64_t h = fold(dpshim__tool_mix64(b->sample_ids[i]), (uint64_t)(hi - lo));
  for (int32_t r = lo; r < hi; r++) {
    uint32_t w;
    memcpy(&w, &b->loss_weights[r], sizeof w);
    h = fold(h, ((uint64_t)(uint32_t)b->tokens[r] << 32) |
                    (uint32_t)b->labels[r]);
    h = fold(h, w);
  }
  return h;
}

static int keep_id(ledger_t *l, int64_t step, uint64_t id) {
  if (l->nids == l->cap_ids) {
    int64_t cap = l->cap_ids ? 2 * l->cap_ids : 1024;
    uint64_t *p = realloc(l->ids, (size_t)cap * sizeof *p);
    if (!p) return -1;
    l->ids = p;
    l->cap_ids = cap;
  }
  l->ids[l->nids++] = id;
  l->step_nids[step]++;
  return 0;
}

static void verify(ledger_t *l, const packload_batch_t *b, int32_t i,
                   const packload_t *pl) {
  int32_t lo = b->cu_seqlens[i];
  enum packload_verdict v =
      packload_verify(pl, b->sample_ids[i], b->cu_seqlens[i + 1] - lo,
                      b->tokens + lo, b->labels + lo, b->loss_weights + lo);
  l->bad[v]++;
}

int ledger_batch(ledger_t *l, int64_t step, const packload_batch_t *b,
                 const packload_t *pl) {
  int32_t n = b->nsamples;
  int64_t tokens = n > 0 ? b->cu_seqlens[n] : 0;
  uint64_t bh = fold(l->batch_hash[step], (uint64_t)n);
  for (int32_t i = 0; i < n; i++) {
    uint64_t h = sample_hash(b, i);
    bh = fold(bh, h);
    if (l->check) verify(l, b, i, pl);
    if (!l->counts) continue;
    l->digest += h; /* mod 2^64: order-independent */
    if (l->keep_ids && keep_id(l, step, b->sample_ids[i]) < 0) return -1;
  }
  l->batch_hash[step] = bh;
  l->step_tokens[step] += tokens;
  l->consumed[2 * step] += n;
  l->consumed[2 * step + 1] += tokens;
  if (l->counts) l->tokens += tokens;
  return 0;
}

void ledger_produced(ledger_t *l, int64_t step, const int64_t produced[2]) {
  l->produced[2 * step] = produced[0];
  l->produced[2 * step + 1] = produced[1];
}
