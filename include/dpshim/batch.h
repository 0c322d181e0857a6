/* The packed batch as libdpshim.so sees it, and the call adapters make.
 *
 * A batch is a set of samples packed back to back into fields. Each field is
 * a buffer of rows (a token, a pixel patch, one per-sample record) with its
 * own per-sample row offsets: sample i owns rows [offsets[i], offsets[i+1]).
 * Token-aligned fields share the batch's cu_seqlens as their offsets (the
 * flash_attn_varlen convention); a field with NULL offsets has one row per
 * sample. Sample i's length, the solver's len, is cu_seqlens[i+1] -
 * cu_seqlens[i].
 *
 * dpshim_balance_batch() is collective over the data-parallel group: every
 * DP rank must call it once per hand-off. It moves whole samples between
 * ranks and repacks each field in place, within its capacity; offsets arrays
 * (cu_seqlens included) are rewritten in place, and nsamples updated. On any
 * problem every rank leaves its batch as it was. List every per-sample
 * array: one left out is not moved, and no longer matches the batch.
 *
 * The solver caps tokens (DPSHIM_MAX_LEN_RATIO, and the smallest
 * token-aligned capacity) and the rows of the field with its own offsets
 * that is fullest over the group (image rows, as a rule) at each rank's
 * capacity. Give the other fields room for any batch that fits those: a
 * plan that would overflow one is skipped on every rank ("capacity").
 *
 *   dpshim_field_t f[] = {
 *     {"tokens", b->tokens, sizeof(int32_t), b->cu_seqlens, b->cap_tokens},
 *     {"ids", b->ids, sizeof(uint64_t), NULL, b->cap_samples},
 *   };
 *   dpshim_batch_t batch = {b->n, b->cap_samples, b->cu_seqlens, 2, f};
 *   dpshim_balance_batch(&batch);
 *   b->n = batch.nsamples;
 */
#ifndef DPSHIM_BATCH_H
#define DPSHIM_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "dpshim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dpshim_field {
  const char *name;      /* for messages */
  void *data;            /* rows, back to back */
  size_t row_bytes;      /* bytes per row, >= 1 */
  int32_t *offsets;      /* [nsamples + 1] row offsets, or NULL: one row each */
  int64_t capacity_rows; /* rows data can hold */
} dpshim_field_t;

/* A sample's images as the vision encoder sees them (see
 * dpshim_sample_t in <dpshim/solver.h>): patches summed over its images, and
 * each image's patches squared, summed. */
typedef struct dpshim_vision {
  int64_t patches, patches_sq;
} dpshim_vision_t;

typedef struct dpshim_batch {
  int32_t nsamples;         /* samples in the batch, updated by balancing */
  int32_t capacity_samples; /* samples the offsets arrays can describe */
  int32_t *cu_seqlens;      /* [nsamples + 1] token offsets, [0] == 0 */
  int32_t nfields;
  dpshim_field_t *fields;   /* [nfields] */
  /* [nsamples] or NULL: each sample's images, when the vision encoder runs
   * where the sample is, so that their encoding counts in its cost and the
   * warm-up fit learns it. Read at the hand-off, not rewritten. Every rank
   * gives it, or none. */
  const dpshim_vision_t *vision;
} dpshim_batch_t;

/* Balances the batch across the data-parallel group, when balancing is on and
 * MPI is initialised; otherwise returns at once. Returns 0 whether the plan
 * was applied or skipped, or a negative DPSHIM_E* code when this batch could
 * not be balanced (the batch is then untouched on every rank). */
DPSHIM_EXTERN int dpshim_balance_batch(dpshim_batch_t *batch);

/* In place of dpshim_balance_batch() when this rank cannot describe its
 * batch (its layout is malformed, or the adapter ran out of memory): the
 * rank still takes part in the hand-off, which then fails on every rank of
 * the group with this reason, named with this rank, every batch untouched.
 * Returns what dpshim_balance_batch() would: a DPSHIM_E* code, or 0 when
 * balancing is off. */
DPSHIM_EXTERN int dpshim_balance_fail(const char *why);

/* Marks the end of this rank's training step (after the optimizer's step),
 * for a trainer that wants exact step boundaries where its gradient sync
 * is not an MPI call: steps then follow the marks instead of
 * DPSHIM_MICRO_BATCHES hand-offs. Call it on the thread that called
 * MPI_Init, once per step on every rank. Starts no collective; returns 0
 * (also when balancing is off or MPI is not initialised). */
DPSHIM_EXTERN int dpshim_step_end(void);

/* Balancing ahead: a loader thread (DPSHIM_LOADER_THREAD=1) balances the
 * next batches with dpshim_balance_batch() while the trainer computes; the
 * trainer's thread (MPI_Init's) calls this each time it takes one of them,
 * with the seconds it waited for it (0 when it was ready). One call per
 * hand-off made on the loader thread, in the same order. The shim then
 * counts steps at the takes, gives each step the loads of the batches it
 * took, and reports the waits as its time on the step's path. A loader
 * thread that never calls it is consumed at the gradient sync instead,
 * DPSHIM_MICRO_BATCHES batches a step. Starts no collective; returns 0
 * (also when balancing is off or MPI is not initialised). */
DPSHIM_EXTERN int dpshim_batch_taken(double waited_s);

#ifdef __cplusplus
}
#endif
#endif
