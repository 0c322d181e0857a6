/* The VLM layouts' entry points; see include/dpshim/vlm.h.
 *
 * The offsets a layout leaves implicit are derived into scratch memory of
 * this call's own (two threads may hand off at once). A rank that cannot
 * describe its batch still takes part in the hand-off, through
 * dpshim_balance_fail(), so that the group fails together instead of
 * waiting for it. */
#include <stdio.h>
#include <stdlib.h>

#include "dpshim/vlm.h"
#include "layout.h"

static int alloc_scratch(dpshim__layout_scratch_t *s, int32_t capacity) {
  size_t n = (capacity > 0 ? (size_t)capacity : 0) + 1;
  int ok = 1;
  for (int k = 0; k < DPSHIM__LAYOUT_OFFSETS; k++)
    ok &= (s->offsets[k] = malloc(n * sizeof(int32_t))) != NULL;
  ok &= (s->vision = malloc(n * sizeof *s->vision)) != NULL;
  return ok ? 0 : DPSHIM_ENOMEM;
}

static void free_scratch(dpshim__layout_scratch_t *s) {
  for (int k = 0; k < DPSHIM__LAYOUT_OFFSETS; k++) free(s->offsets[k]);
  free(s->vision);
}

typedef int (*describe_fn)(const void *b, dpshim__layout_scratch_t *s,
                           dpshim_batch_t *batch, char *msg, size_t len);
typedef void (*finish_fn)(void *b, const dpshim__layout_scratch_t *s,
                          const dpshim_batch_t *batch);

static int balance_layout(void *b, int32_t capacity, describe_fn describe,
                          finish_fn finish) {
  dpshim__layout_scratch_t s = {0};
  dpshim_batch_t batch;
  char msg[256] = "out of memory for the layout's offsets";
  int rc = b ? alloc_scratch(&s, capacity) : DPSHIM_EINVAL;
  if (!b) snprintf(msg, sizeof msg, "the VLM batch is NULL");
  if (rc == 0) rc = describe(b, &s, &batch, msg, sizeof msg);
  if (rc < 0) {
    rc = dpshim_balance_fail(msg);
  } else {
    rc = dpshim_balance_batch(&batch);
    if (rc == 0) finish(b, &s, &batch);
  }
  free_scratch(&s);
  return rc;
}

static int describe_internvl(const void *b, dpshim__layout_scratch_t *s,
                             dpshim_batch_t *batch, char *msg, size_t len) {
  return dpshim__internvl_describe(b, s, batch, msg, len);
}

static void finish_internvl(void *b, const dpshim__layout_scratch_t *s,
                            const dpshim_batch_t *batch) {
  dpshim__internvl_finish(b, s, batch);
}

static int describe_qwen(const void *b, dpshim__layout_scratch_t *s,
                         dpshim_batch_t *batch, char *msg, size_t len) {
  return dpshim__qwen_describe(b, s, batch, msg, len);
}

static void finish_qwen(void *b, const dpshim__layout_scratch_t *s,
                        const dpshim_batch_t *batch) {
  dpshim__qwen_finish(b, s, batch);
}

DPSHIM_EXTERN int dpshim_balance_internvl(dpshim_internvl_batch_t *b) {
  return balance_layout(b, b ? b->capacity_samples : 0, describe_internvl,
                        finish_internvl);
}

DPSHIM_EXTERN int dpshim_balance_qwen(dpshim_qwen_batch_t *b) {
  return balance_layout(b, b ? b->capacity_samples : 0, describe_qwen,
                        finish_qwen);
}
