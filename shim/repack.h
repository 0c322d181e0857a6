/* The repack after an exchange: the samples a rank keeps, put back together
 * so that it copies what moves, not what stays.
 *
 * A sent sample leaves a hole. Closing it by moving every kept sample behind
 * it forward copies up to the whole pack (a 32K-token Qwen pack holds
 * ~0.5 GB of patch rows) where the exchange moved a few MB. The order of a
 * pack's samples carries no meaning (received samples are appended anyway),
 * so a hole is filled instead with kept samples from the pack's end whose
 * rows of the batch's heaviest kind (patch rows, tiles, or tokens) add up
 * to it exactly: the samples between keep their place in that field. Where
 * none add up, the hole may grow by the next kept samples (moved to the end
 * instead of shifted: the same bytes) and be tried again. The lighter
 * fields (tokens beside patch rows, one-row fields) may shift. Each field's
 * rows are moved in an order that reads every row before it is
 * overwritten; where moves wait on each other in a ring, one sample's rows
 * are put aside in a stash.
 *
 * Planned before the exchange, on scratch reserved with the balancer's
 * buffers: where a hole's subset sum or a stash cannot be had, the plan
 * falls back to shifting (the pack's order needs no stash).
 */
#ifndef DPSHIM_SHIM_REPACK_H
#define DPSHIM_SHIM_REPACK_H

#include <stddef.h>
#include <stdint.h>

#include "batch_view.h"

typedef struct dpshim__repack_move {
  int64_t from, to, rows; /* rows of one field */
  int64_t aside;          /* where in the stash, once put aside */
} dpshim__repack_move_t;

typedef struct dpshim__repack {
  int32_t n;        /* kept samples */
  int32_t *order;   /* [n] the kept samples in their new order */
  int64_t copied;   /* bytes the repack copies (rows put aside twice) */
  int64_t budget;   /* subset-sum cells left to this plan */
  int64_t row_bytes; /* a row of the heaviest kind's */
  /* scratch, kept between hand-offs */
  dpshim__repack_move_t *moves;
  int32_t *by_from, *rank, *next;
  uint8_t *state, *taken;
  int8_t *reach;
  int64_t *ends;
  unsigned char *stash;
  size_t order_cap, moves_cap, by_from_cap, rank_cap, next_cap, state_cap,
      taken_cap, reach_cap, ends_cap, stash_cap;
} dpshim__repack_t;

/* Scratch for a batch of nsamples; 0 or DPSHIM_ENOMEM. */
int dpshim__repack_reserve(dpshim__repack_t *r, int32_t nsamples);
/* Plans the repack of batch b keeping samples keep[0 .. n) (ascending). */
void dpshim__repack_plan(dpshim__repack_t *r, const dpshim_batch_t *b,
                         const dpshim__layout_t *l, const int32_t *keep,
                         int32_t n);
/* Puts the kept samples in r->order at the front of b, offsets included;
 * b->nsamples becomes r->n. b as it was planned on. */
void dpshim__repack_apply(dpshim__repack_t *r, dpshim_batch_t *b,
                          const dpshim__layout_t *l);
void dpshim__repack_free(dpshim__repack_t *r);
/* What closing a rank's holes copies, as a plan is priced before anyone
 * repacks: no more than what left them (later samples fill them), nor than
 * the kept samples behind the first (shifted forward). */
static inline int64_t dpshim__repack_priced(int64_t sent, int64_t behind) {
  return sent < behind ? sent : behind;
}

#endif
