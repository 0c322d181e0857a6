/* An encoder call described, as batch_view.h describes a batch: the checks
 * a rank makes before the group meets, the row sizes every rank must share
 * (its shape), and what one image weighs on the wire in each buffer.
 */
#ifndef DPSHIM_SHIM_ENCODER_VIEW_H
#define DPSHIM_SHIM_ENCODER_VIEW_H

#include <stddef.h>
#include <stdint.h>

#include "dpshim/encoder.h"

/* One image as the group gathers it: its bytes in each buffer. */
typedef struct dpshim__wire {
  int64_t patches, patches_sq;
  int64_t in[DPSHIM_ENCODER_MAX_INPUTS];
  int64_t out, grad; /* output, and grad_input's gradient */
} dpshim__wire_t;

/* The row sizes of a call's buffers. */
typedef struct dpshim__shape {
  int32_t ninputs, grad_input;
  size_t in_row[DPSHIM_ENCODER_MAX_INPUTS], out_row;
} dpshim__shape_t;

/* 0 when the call can be described, else DPSHIM_EINVAL with a one-line
 * message naming the field and what was expected. A shipped call's output
 * data may be NULL (ship: nothing is written there). */
int dpshim__call_check(const dpshim_encoder_call_t *c, int ship, char *msg,
                       size_t cap);

dpshim__shape_t dpshim__call_shape(const dpshim_encoder_call_t *c);
uint64_t dpshim__shape_hash(const dpshim__shape_t *s);

/* Image i of a checked call. */
dpshim__wire_t dpshim__call_wire(const dpshim_encoder_call_t *c, int32_t i);

#endif
