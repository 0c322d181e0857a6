/* A packed batch taken apart and put back together (depack / repack).
 *
 * The balancer never looks inside a row: it moves each sample's rows of
 * every field, field by field. What it needs to know about
 * a sample travels as a few int32 numbers (its "meta"): the token length,
 * then the row count of each field that has offsets of its own, then its
 * images' patches when the batch gives them. Token-aligned fields have as
 * many rows as tokens; fields without offsets have one.
 */
#ifndef DPSHIM_SHIM_BATCH_VIEW_H
#define DPSHIM_SHIM_BATCH_VIEW_H

#include <stddef.h>
#include <stdint.h>

#include "dpshim/batch.h"

#define DPSHIM__MAX_FIELDS 16
/* A sample's vision numbers in its meta: patches and patches_sq, each as
 * two int32 halves. */
#define DPSHIM__VISION_META 4
#define DPSHIM__MAX_META (1 + DPSHIM__MAX_FIELDS + DPSHIM__VISION_META)

typedef enum { DPSHIM__ROWS_TOKENS, DPSHIM__ROWS_ONE, DPSHIM__ROWS_OWN } dpshim__rows_kind_t;

typedef struct dpshim__layout {
  int32_t nfields;
  int32_t width; /* int32 meta numbers per sample */
  uint8_t kind[DPSHIM__MAX_FIELDS];
  uint8_t slot[DPSHIM__MAX_FIELDS]; /* meta index of a DPSHIM__ROWS_OWN field */
  int32_t vision; /* meta index of the vision numbers; 0: none given */
  size_t row_bytes[DPSHIM__MAX_FIELDS];
} dpshim__layout_t;

/* Checks the batch and describes its fields. Returns 0, or DPSHIM_EINVAL with
 * a one-line message naming the field and what was expected. */
int dpshim__layout_of(const dpshim_batch_t *b, dpshim__layout_t *l,
                      char *msg, size_t msglen);
/* Field f's name, row size and kind, hashed: what ranks must agree on,
 * field by field and in order. */
uint32_t dpshim__field_signature(const dpshim_batch_t *b,
                                 const dpshim__layout_t *l, int32_t f);

/* Sample i's meta into meta[0 .. l->width). */
void dpshim__meta_of(const dpshim_batch_t *b, const dpshim__layout_t *l,
                     int32_t i, int32_t *meta);
int64_t dpshim__meta_rows(const dpshim__layout_t *l, int32_t field,
                          const int32_t *meta);
int64_t dpshim__meta_bytes(const dpshim__layout_t *l, const int32_t *meta);
/* The sample's images (0, 0 when the batch gives none). */
dpshim_vision_t dpshim__meta_vision(const dpshim__layout_t *l,
                                    const int32_t *meta);

/* Field f's rows of samples [i, i + n): where they start; *bytes their
 * size (0: the start may be NULL). */
unsigned char *dpshim__batch_rows(const dpshim_batch_t *b,
                                  const dpshim__layout_t *l, int32_t f,
                                  int32_t i, int32_t n, size_t *bytes);
/* Appends n samples, whose metas are meta[k * l->width ...], after the
 * samples the batch holds: field f's rows copied from from[f], where they
 * lie back to back, or (from NULL) already in place past the batch's rows.
 * The caller has checked every capacity. */
void dpshim__batch_append(dpshim_batch_t *b, const dpshim__layout_t *l,
                          int32_t n, const int32_t *meta,
                          const unsigned char *const *from);

#endif
