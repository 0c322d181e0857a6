/* The VLM layouts of <dpshim/vlm.h> as dpshim fields: pure functions, no
 * MPI (api_vlm.c calls them around the hand-off; the unit tests call them
 * directly).
 *
 * Each describe function derives the per-sample offsets the layout leaves
 * implicit (tiles, patch rows, grid rows) into `offsets`, the caller's
 * scratch of DPSHIM__LAYOUT_OFFSETS arrays of capacity_samples + 1 int32,
 * checks the batch against its layout, and fills `batch` with fields
 * (at most DPSHIM__LAYOUT_FIELDS) that point into it, and with each
 * sample's images as the vision encoder sees them (into `vision`, of
 * capacity_samples; NULL: not given). It returns 0, or
 * DPSHIM_EINVAL with a one-line reason in msg. After the hand-off, finish
 * rewrites the counts from the balanced offsets.
 */
#ifndef DPSHIM_SHIM_LAYOUT_H
#define DPSHIM_SHIM_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "dpshim/batch.h"
#include "dpshim/vlm.h"

#define DPSHIM__LAYOUT_FIELDS 9
#define DPSHIM__LAYOUT_OFFSETS 4

typedef struct dpshim__layout_scratch {
  int32_t *offsets[DPSHIM__LAYOUT_OFFSETS];
  dpshim_vision_t *vision;
  dpshim_field_t fields[DPSHIM__LAYOUT_FIELDS];
} dpshim__layout_scratch_t;

int dpshim__internvl_describe(const dpshim_internvl_batch_t *b,
                              dpshim__layout_scratch_t *s,
                              dpshim_batch_t *batch, char *msg, size_t len);
void dpshim__internvl_finish(dpshim_internvl_batch_t *b,
                             const dpshim__layout_scratch_t *s,
                             const dpshim_batch_t *batch);

int dpshim__qwen_describe(const dpshim_qwen_batch_t *b,
                          dpshim__layout_scratch_t *s, dpshim_batch_t *batch,
                          char *msg, size_t len);
void dpshim__qwen_finish(dpshim_qwen_batch_t *b,
                         const dpshim__layout_scratch_t *s,
                         const dpshim_batch_t *batch);

/* Tokens equal to `token` in [from, to) of tokens. */
int64_t dpshim__layout_count(const int64_t *tokens, int32_t from, int32_t to,
                             int64_t token);
/* The common checks of a layout's token part: 0 or EINVAL with msg. */
int dpshim__layout_check_tokens(const char *what, int32_t nsamples,
                                int32_t capacity_samples,
                                const int32_t *cu_lengths,
                                const int64_t *tokens, int64_t capacity_tokens,
                                char *msg, size_t len);

#endif
