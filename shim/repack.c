/* The repack that copies what moves; see repack.h. */
#include "repack.h"

#include <stdlib.h>
#include <string.h>

/* Kept samples from the pack's end a hole may be filled from: the subset
 * sum over them costs candidates x hole rows. */
#define CANDIDATES 48
/* Subset-sum cells (candidates x hole units) a plan may spend on all its
 * holes: a few milliseconds at most; the holes after it shift. */
#define FILL_BUDGET (1 << 23)
/* Kept samples a hole may grow by, one at a time, before they shift. */
#define DEFER 8

#define TOKENS (-1) /* the heaviest kind: every token-aligned field */

enum { KEPT, FILLER, DEFERRED };     /* r->taken[] */
enum { PENDING, STASHED, WRITTEN }; /* r->state[] */

static int grow(void *pp, size_t *cap, size_t n, size_t elem) {
  void **p = pp;
  if (n <= *cap && *p) return 0;
  void *q = realloc(*p, (n ? n : 1) * elem);
  if (!q) return -1;
  *p = q;
  *cap = n;
  return 0;
}

/* Offsets of field f (cu_seqlens for token-aligned ones); NULL: one row a
 * sample. */
static const int32_t *offsets_of(const dpshim_batch_t *b,
                                 const dpshim__layout_t *l, int32_t f) {
  if (f == TOKENS || l->kind[f] == DPSHIM__ROWS_TOKENS) return b->cu_seqlens;
  return l->kind[f] == DPSHIM__ROWS_OWN ? b->fields[f].offsets : NULL;
}

static int64_t start_of(const int32_t *off, int32_t i) {
  return off ? off[i] : i;
}

static int64_t rows_of(const int32_t *off, int32_t i) {
  return off ? off[i + 1] - off[i] : 1;
}

static int64_t gcd(int64_t a, int64_t b) {
  while (b) {
    int64_t t = a % b;
    a = b, b = t;
  }
  return a;
}

/* TOKENS or the field with offsets of its own that holds the most bytes. */
static int32_t heaviest(const dpshim_batch_t *b, const dpshim__layout_t *l) {
  double best = 0;
  int32_t which = TOKENS;
  for (int32_t f = 0; f < l->nfields; f++)
    if (l->kind[f] == DPSHIM__ROWS_TOKENS) best += (double)l->row_bytes[f];
  best *= b->cu_seqlens[b->nsamples];
  for (int32_t f = 0; f < l->nfields; f++) {
    if (l->kind[f] != DPSHIM__ROWS_OWN) continue;
    double bytes = (double)l->row_bytes[f] * b->fields[f].offsets[b->nsamples];
    if (bytes > best) best = bytes, which = f;
  }
  return which;
}

/* ---- the order ------------------------------------------------------------ */

/* Kept samples later[0 .. n) whose rows add up to `hole` exactly, from the
 * end first: appended to r->order as fillers. 0 when none add up (or the
 * scratch cannot be had). */
static int fill(dpshim__repack_t *r, const int32_t *off, const int32_t *later,
                int32_t n, int64_t hole, int32_t *p) {
  int32_t cand[CANDIDATES], c = 0;
  int64_t sum = 0, unit = hole;
  for (int32_t k = n - 1; k >= 0 && c < CANDIDATES; k--) {
    int64_t w = rows_of(off, later[k]);
    if (r->taken[later[k]] != KEPT || w <= 0 || w > hole) continue;
    cand[c++] = later[k];
    sum += w;
    unit = gcd(unit, w);
  }
  int64_t units = hole / unit; /* patch rows come in multiples of a merge */
  if (sum < hole || c * units > r->budget ||
      grow(&r->reach, &r->reach_cap, (size_t)units + 1, 1) < 0)
    return 0;
  r->budget -= c * units;
  /* reach[s]: 1 + the candidate that completes a subset of s units (the
   * rest from candidates before it); 0: none; reach[0] = -1. */
  memset(r->reach, 0, (size_t)units + 1);
  r->reach[0] = -1;
  for (int32_t k = 0; k < c && !r->reach[units]; k++) {
    int64_t w = rows_of(off, cand[k]) / unit;
    for (int64_t s = units; s >= w; s--)
      if (!r->reach[s] && r->reach[s - w]) r->reach[s] = (int8_t)(k + 1);
  }
  if (!r->reach[units]) return 0;
  for (int64_t s = units; s > 0;) {
    int32_t i = cand[r->reach[s] - 1];
    r->taken[i] = FILLER;
    r->order[(*p)++] = i;
    s -= rows_of(off, i) / unit;
  }
  return 1;
}

/* Fills the hole before keep[a] (*at: where the next sample goes); where no
 * later samples add up to it, tries again with the hole grown by the next
 * kept samples, which then go to the end (copied once, as a shift would). */
static int close_hole(dpshim__repack_t *r, const int32_t *off,
                      const int32_t *keep, int32_t a, int32_t n, int64_t *at,
                      int32_t *p) {
  int tries = 0;
  for (int32_t s = a; s < n && tries <= DEFER; s++) {
    int32_t k = keep[s];
    if (r->taken[k] != KEPT || rows_of(off, k) == 0) continue;
    tries++;
    int64_t hole = start_of(off, k) - *at;
    if (!fill(r, off, keep + s + 1, n - s - 1, hole, p)) continue;
    for (int32_t d = a; d < s; d++)
      if (r->taken[keep[d]] == KEPT && rows_of(off, keep[d]) > 0)
        r->taken[keep[d]] = DEFERRED;
    *at += hole;
    return 1;
  }
  return 0;
}

/* The kept samples in pack order, holes of the heaviest kind filled where
 * later samples add up to them; deferred samples last. */
static void choose_order(dpshim__repack_t *r, const dpshim_batch_t *b,
                         const int32_t *off, const int32_t *keep, int32_t n) {
  int64_t at = 0, failed = -1; /* a hole nothing fills */
  int32_t p = 0;
  memset(r->taken, KEPT, (size_t)b->nsamples);
  for (int32_t a = 0; a < n; a++) {
    int32_t k = keep[a];
    if (r->taken[k] != KEPT) continue;
    int64_t hole = start_of(off, k) - at;
    if (hole > 0 && hole != failed && rows_of(off, k) > 0 &&
        !close_hole(r, off, keep, a, n, &at, &p))
      failed = hole;
    if (r->taken[k] == DEFERRED) continue;
    r->order[p++] = k;
    at += rows_of(off, k);
  }
  for (int32_t a = 0; a < n; a++)
    if (r->taken[keep[a]] == DEFERRED) r->order[p++] = keep[a];
}

/* ---- the moves ------------------------------------------------------------ */

/* r->moves[] of field f under r->order: where each moving sample's rows are
 * (from) and go (to), and how many. Returns how many move. */
static int32_t list_moves(dpshim__repack_t *r, const int32_t *off) {
  int32_t m = 0;
  int64_t to = 0;
  for (int32_t p = 0; p < r->n; p++) {
    int64_t from = start_of(off, r->order[p]), rows = rows_of(off, r->order[p]);
    if (from != to && rows > 0) {
      r->moves[m] = (dpshim__repack_move_t){from, to, rows};
      r->state[m++] = PENDING;
    }
    to += rows;
  }
  return m;
}

/* Whether a sample still in place has rows where move q goes. */
static int blocked(const dpshim__repack_t *r, int32_t m, int32_t q) {
  const dpshim__repack_move_t *a = &r->moves[q];
  for (int32_t j = 0; j < m; j++) {
    const dpshim__repack_move_t *o = &r->moves[j];
    if (j != q && r->state[j] == PENDING && a->to < o->from + o->rows &&
        o->from < a->to + a->rows)
      return 1;
  }
  return 0;
}

/* Moves a field's rows (data NULL: counts only), each sample once nothing
 * still to be read lies where it goes; where every move waits on another,
 * one sample's rows are put aside in the stash. Returns the rows copied
 * (those put aside twice); *aside_rows: the stash's. */
static int64_t move_rows(dpshim__repack_t *r, const int32_t *off,
                         unsigned char *data, size_t row, int64_t *aside_rows) {
  int32_t m = list_moves(r, off), left = m;
  int64_t copied = 0, aside = 0;
  while (left) {
    int moved = 0;
    for (int32_t q = 0; q < m; q++) {
      dpshim__repack_move_t *mv = &r->moves[q];
      if (r->state[q] == WRITTEN || blocked(r, m, q)) continue;
      if (data)
        memmove(data + (size_t)mv->to * row,
                r->state[q] == STASHED ? r->stash + (size_t)mv->from * row
                                       : data + (size_t)mv->from * row,
                (size_t)mv->rows * row);
      r->state[q] = WRITTEN;
      copied += mv->rows;
      left--, moved = 1;
    }
    if (moved) continue;
    int32_t q = 0;
    while (r->state[q] != PENDING) q++;
    dpshim__repack_move_t *mv = &r->moves[q];
    if (data)
      memcpy(r->stash + (size_t)aside * row, data + (size_t)mv->from * row,
             (size_t)mv->rows * row);
    mv->from = aside; /* now in the stash */
    aside += mv->rows;
    copied += mv->rows;
    r->state[q] = STASHED;
  }
  *aside_rows = aside;
  return copied;
}

int dpshim__repack_reserve(dpshim__repack_t *r, int32_t nsamples) {
  size_t n = (size_t)nsamples;
  if (grow(&r->order, &r->order_cap, n, sizeof *r->order) < 0 ||
      grow(&r->ends, &r->ends_cap, n + 1, sizeof *r->ends) < 0 ||
      grow(&r->moves, &r->moves_cap, n, sizeof *r->moves) < 0 ||
      grow(&r->state, &r->state_cap, n, 1) < 0 ||
      grow(&r->taken, &r->taken_cap, n, 1) < 0)
    return DPSHIM_ENOMEM;
  return 0;
}

/* What r->order copies; -1 where the stash it needs cannot be had. */
static int64_t count_copies(dpshim__repack_t *r, const dpshim_batch_t *b,
                            const dpshim__layout_t *l) {
  int64_t copied = 0, stash = 0;
  for (int32_t f = 0; f < l->nfields; f++) {
    int64_t aside, row = (int64_t)l->row_bytes[f];
    copied += move_rows(r, offsets_of(b, l, f), NULL, 0, &aside) * row;
    if (aside * row > stash) stash = aside * row;
  }
  if (stash && grow(&r->stash, &r->stash_cap, (size_t)stash, 1) < 0) return -1;
  return copied;
}

void dpshim__repack_plan(dpshim__repack_t *r, const dpshim_batch_t *b,
                         const dpshim__layout_t *l, const int32_t *keep,
                         int32_t n) {
  r->n = n;
  r->budget = FILL_BUDGET;
  choose_order(r, b, offsets_of(b, l, heaviest(b, l)), keep, n);
  r->copied = count_copies(r, b, l);
  if (r->copied >= 0) return;
  memcpy(r->order, keep, (size_t)n * sizeof *keep); /* needs no stash */
  r->copied = count_copies(r, b, l);
}

/* off rewritten for r->order (through r->ends). */
static void reorder_offsets(dpshim__repack_t *r, int32_t *off) {
  int64_t *next = r->ends;
  next[0] = 0;
  for (int32_t p = 0; p < r->n; p++)
    next[p + 1] = next[p] + rows_of(off, r->order[p]);
  for (int32_t p = 0; p <= r->n; p++) off[p] = (int32_t)next[p];
}

void dpshim__repack_apply(dpshim__repack_t *r, dpshim_batch_t *b,
                          const dpshim__layout_t *l) {
  for (int32_t f = 0; f < l->nfields; f++) {
    int64_t aside;
    move_rows(r, offsets_of(b, l, f), b->fields[f].data, l->row_bytes[f],
              &aside);
  }
  reorder_offsets(r, b->cu_seqlens);
  for (int32_t f = 0; f < l->nfields; f++) {
    if (l->kind[f] != DPSHIM__ROWS_OWN) continue;
    int shared = 0; /* rewritten already, as another field's */
    for (int32_t g = 0; g < f; g++)
      shared |= l->kind[g] == DPSHIM__ROWS_OWN &&
                b->fields[g].offsets == b->fields[f].offsets;
    if (!shared) reorder_offsets(r, b->fields[f].offsets);
  }
  b->nsamples = r->n;
}

void dpshim__repack_free(dpshim__repack_t *r) {
  free(r->order);
  free(r->reach);
  free(r->taken);
  free(r->ends);
  free(r->moves);
  free(r->state);
  free(r->stash);
  memset(r, 0, sizeof *r);
}
