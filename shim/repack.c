/* The repack that copies what moves; see repack.h. */
#include "repack.h"

#include <stdlib.h>
#include <string.h>

#include "grow.h"

/* Kept samples from the pack's end a hole may be filled from: the subset
 * sum over them costs candidates x hole rows. */
#define CANDIDATES 48
/* Subset-sum cells (candidates x hole units) a plan may spend on all its
 * holes: a few milliseconds at most; the holes after it shift. */
#define FILL_BUDGET (1 << 23)
/* A hole's subset sum costs no more than copying the hole would (a cell
 * takes about as long as copying this many bytes), but for small ones:
 * a text pack's holes of thousands of tokens, a few bytes each, shift. */
#define CELL_BYTES 16
#define SMALL_FILL 4096
/* Kept samples a hole may grow by, one at a time, before they shift. */
#define DEFER 8

#define TOKENS (-1) /* the heaviest kind: every token-aligned field */

enum { KEPT, FILLER, DEFERRED };     /* r->taken[] */
enum { PENDING, STASHED, WRITTEN }; /* r->state[] */

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

/* TOKENS or the field with offsets of its own that holds the most bytes;
 * *row: the bytes of one of its rows (every token-aligned field's). */
static int32_t heaviest(const dpshim_batch_t *b, const dpshim__layout_t *l,
                        int64_t *row) {
  double best = 0;
  int32_t which = TOKENS;
  *row = 0;
  for (int32_t f = 0; f < l->nfields; f++)
    if (l->kind[f] == DPSHIM__ROWS_TOKENS) *row += (int64_t)l->row_bytes[f];
  best = (double)*row * b->cu_seqlens[b->nsamples];
  for (int32_t f = 0; f < l->nfields; f++) {
    if (l->kind[f] != DPSHIM__ROWS_OWN) continue;
    double bytes = (double)l->row_bytes[f] * b->fields[f].offsets[b->nsamples];
    if (bytes > best) best = bytes, which = f, *row = (int64_t)l->row_bytes[f];
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
  int64_t cells = c * units;
  if (sum < hole || cells > r->budget ||
      (cells > SMALL_FILL && cells * CELL_BYTES > hole * r->row_bytes) ||
      dpshim__grow(&r->reach, &r->reach_cap, (size_t)units + 1, 1) < 0)
    return 0;
  r->budget -= cells;
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
 * (from) and go (to), and how many; r->by_from: the moves by where their
 * rows are, and r->next the pending ones among them (see pending_from()).
 * Returns how many move. */
static int32_t list_moves(dpshim__repack_t *r, const int32_t *off) {
  int32_t m = 0;
  int64_t to = 0;
  for (int32_t p = 0; p < r->n; p++) {
    int64_t from = start_of(off, r->order[p]), rows = rows_of(off, r->order[p]);
    if (from != to && rows > 0) {
      r->moves[m] = (dpshim__repack_move_t){from, to, rows, 0};
      r->state[m] = PENDING;
      r->by_from[m] = m;
      m++;
    }
    to += rows;
  }
  /* Insertion sort: in pack order but for the fills and the deferred. */
  for (int32_t i = 1; i < m; i++) {
    int32_t q = r->by_from[i], j = i;
    for (; j > 0 && r->moves[r->by_from[j - 1]].from > r->moves[q].from; j--)
      r->by_from[j] = r->by_from[j - 1];
    r->by_from[j] = q;
  }
  for (int32_t i = 0; i < m; i++) r->rank[r->by_from[i]] = i;
  for (int32_t i = 0; i <= m; i++) r->next[i] = i;
  return m;
}

/* The first position k' >= k in by_from whose move is still pending (m:
 * none); skips what was written or put aside, halving the paths. */
static int32_t pending_from(dpshim__repack_t *r, int32_t k) {
  while (r->next[k] != k) {
    r->next[k] = r->next[r->next[k]];
    k = r->next[k];
  }
  return k;
}

static void done_with(dpshim__repack_t *r, int32_t q) {
  r->next[r->rank[q]] = r->rank[q] + 1;
}

/* Whether another sample still in place has rows where move q goes: its
 * rows are disjoint from the others', so by where they start the first
 * pending one ending past q's start is the only one to look at. */
static int blocked(dpshim__repack_t *r, int32_t m, int32_t q) {
  const dpshim__repack_move_t *a = &r->moves[q];
  int32_t lo = 0, hi = m;
  while (lo < hi) {
    int32_t mid = lo + (hi - lo) / 2;
    const dpshim__repack_move_t *o = &r->moves[r->by_from[mid]];
    if (o->from + o->rows <= a->to) lo = mid + 1;
    else hi = mid;
  }
  int32_t k = pending_from(r, lo);
  if (k < m && r->by_from[k] == q) k = pending_from(r, k + 1);
  return k < m && r->moves[r->by_from[k]].from < a->to + a->rows;
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
                r->state[q] == STASHED ? r->stash + (size_t)mv->aside * row
                                       : data + (size_t)mv->from * row,
                (size_t)mv->rows * row);
      if (r->state[q] == PENDING) done_with(r, q);
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
    done_with(r, q);
    mv->aside = aside;
    aside += mv->rows;
    copied += mv->rows;
    r->state[q] = STASHED;
  }
  *aside_rows = aside;
  return copied;
}

int dpshim__repack_reserve(dpshim__repack_t *r, int32_t nsamples) {
  size_t n = (size_t)nsamples;
  if (dpshim__grow(&r->order, &r->order_cap, n, sizeof *r->order) < 0 ||
      dpshim__grow(&r->ends, &r->ends_cap, n + 1, sizeof *r->ends) < 0 ||
      dpshim__grow(&r->moves, &r->moves_cap, n, sizeof *r->moves) < 0 ||
      dpshim__grow(&r->by_from, &r->by_from_cap, n, sizeof *r->by_from) < 0 ||
      dpshim__grow(&r->rank, &r->rank_cap, n, sizeof *r->rank) < 0 ||
      dpshim__grow(&r->next, &r->next_cap, n + 1, sizeof *r->next) < 0 ||
      dpshim__grow(&r->state, &r->state_cap, n, 1) < 0 ||
      dpshim__grow(&r->taken, &r->taken_cap, n, 1) < 0)
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
  if (stash && dpshim__grow(&r->stash, &r->stash_cap, (size_t)stash, 1) < 0) return -1;
  return copied;
}

void dpshim__repack_plan(dpshim__repack_t *r, const dpshim_batch_t *b,
                         const dpshim__layout_t *l, const int32_t *keep,
                         int32_t n) {
  r->n = n;
  r->budget = FILL_BUDGET;
  int32_t kind = heaviest(b, l, &r->row_bytes);
  choose_order(r, b, offsets_of(b, l, kind), keep, n);
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
  free(r->by_from);
  free(r->rank);
  free(r->next);
  free(r->state);
  free(r->stash);
  memset(r, 0, sizeof *r);
}
