/* An encoder call described; see encoder_view.h. */
#include "encoder_view.h"

#include <stdio.h>

#include "dpshim/dpshim.h"
#include "hash.h"

static int check_buffer(const dpshim_encoder_buffer_t *b, int32_t count,
                        int need_data, const char *what, char *msg,
                        size_t cap) {
  if (b->row_bytes < 1) {
    snprintf(msg, cap, "%s row_bytes 0: expected >= 1", what);
    return DPSHIM_EINVAL;
  }
  if (count > 0 && !b->rows) {
    snprintf(msg, cap, "%s rows is NULL: expected [count]", what);
    return DPSHIM_EINVAL;
  }
  int64_t total = 0;
  for (int32_t i = 0; i < count; i++) {
    if (b->rows[i] < 0 || b->rows[i] > ((int64_t)1 << 40)) {
      snprintf(msg, cap, "%s rows[%d] = %lld: expected 0 .. 2^40",
               what, (int)i, (long long)b->rows[i]);
      return DPSHIM_EINVAL;
    }
    total += b->rows[i];
  }
  if (total > 0 && !b->data && need_data) {
    snprintf(msg, cap, "%s data is NULL", what);
    return DPSHIM_EINVAL;
  }
  return 0;
}

int dpshim__call_check(const dpshim_encoder_call_t *c, int ship, char *msg,
                       size_t cap) {
  if (!c) return snprintf(msg, cap, "call is NULL"), DPSHIM_EINVAL;
  if (c->invalid)
    return snprintf(msg, cap, "%s", c->invalid), DPSHIM_EINVAL;
  if (c->count < 0 || c->ninputs < 1 || c->ninputs > DPSHIM_ENCODER_MAX_INPUTS ||
      c->grad_input < -1 || c->grad_input >= c->ninputs) {
    snprintf(msg, cap,
             "count %d, ninputs %d, grad_input %d: expected count >= 0, "
             "ninputs 1..%d, grad_input -1..ninputs-1", (int)c->count,
             (int)c->ninputs, (int)c->grad_input, DPSHIM_ENCODER_MAX_INPUTS);
    return DPSHIM_EINVAL;
  }
  if (c->count > 0 && !c->patches)
    return snprintf(msg, cap, "patches is NULL"), DPSHIM_EINVAL;
  for (int32_t i = 0; i < c->count; i++) {
    int64_t l = c->patches[i], sq = c->patches_sq ? c->patches_sq[i] : l * l;
    if (l < 0 || l > ((int64_t)1 << 31)) {
      snprintf(msg, cap, "patches[%d] = %lld: expected 0 .. 2^31",
               (int)i, (long long)l);
      return DPSHIM_EINVAL;
    }
    if (sq < 0 || (l > 0 && sq / l > l)) {
      snprintf(msg, cap, "patches_sq[%d] = %lld: expected 0 .. "
               "patches^2", (int)i, (long long)sq);
      return DPSHIM_EINVAL;
    }
  }
  char what[64];
  for (int32_t k = 0; k < c->ninputs; k++) {
    snprintf(what, sizeof what, "input %d ('%.24s')", (int)k,
             c->input[k].name ? c->input[k].name : "?");
    if (check_buffer(&c->input[k], c->count, 1, what, msg, cap) < 0)
      return DPSHIM_EINVAL;
  }
  return check_buffer(&c->output, c->count, !ship, "output", msg, cap);
}

dpshim__shape_t dpshim__call_shape(const dpshim_encoder_call_t *c) {
  dpshim__shape_t s = {.ninputs = c->ninputs, .grad_input = c->grad_input,
               .out_row = c->output.row_bytes};
  for (int32_t k = 0; k < c->ninputs; k++) s.in_row[k] = c->input[k].row_bytes;
  return s;
}

uint64_t dpshim__shape_hash(const dpshim__shape_t *s) {
  uint64_t h = dpshim__fnv(DPSHIM__FNV_SEED, &s->ninputs, sizeof s->ninputs);
  h = dpshim__fnv(h, &s->grad_input, sizeof s->grad_input);
  h = dpshim__fnv(h, s->in_row, sizeof s->in_row);
  return dpshim__fnv(h, &s->out_row, sizeof s->out_row);
}

dpshim__wire_t dpshim__call_wire(const dpshim_encoder_call_t *c, int32_t i) {
  dpshim__wire_t w = {.patches = c->patches[i],
              .patches_sq = c->patches_sq ? c->patches_sq[i]
                                          : c->patches[i] * c->patches[i],
              .out = c->output.rows[i] * (int64_t)c->output.row_bytes};
  for (int32_t k = 0; k < c->ninputs; k++)
    w.in[k] = c->input[k].rows[i] * (int64_t)c->input[k].row_bytes;
  if (c->grad_input >= 0) w.grad = w.in[c->grad_input];
  return w;
}
