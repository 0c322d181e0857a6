/* Depack and repack of a dpshim_batch_t; see batch_view.h. */
#include "batch_view.h"

#include <stdio.h>
#include <string.h>

#include "hash.h"

static int bad(char *msg, size_t len, const char *what) {
  snprintf(msg, len, "%s", what);
  return DPSHIM_EINVAL;
}

/* offsets[0] == 0, non-decreasing, last within capacity. */
static int check_offsets(const int32_t *off, int32_t n, int64_t capacity,
                         const char *name, char *msg, size_t len) {
  if (off[0] != 0) {
    snprintf(msg, len, "field '%s': offsets[0] is %d, expected 0", name,
             (int)off[0]);
    return DPSHIM_EINVAL;
  }
  for (int32_t i = 0; i < n; i++) {
    if (off[i + 1] < off[i]) {
      snprintf(msg, len,
               "field '%s': offsets[%d] = %d is below offsets[%d] = %d, "
               "expected non-decreasing offsets", name, (int)i + 1,
               (int)off[i + 1], (int)i, (int)off[i]);
      return DPSHIM_EINVAL;
    }
  }
  if (off[n] > capacity) {
    snprintf(msg, len, "field '%s': %d rows exceed capacity_rows %lld", name,
             (int)off[n], (long long)capacity);
    return DPSHIM_EINVAL;
  }
  return 0;
}

static int describe_field(const dpshim_batch_t *b, int32_t f,
                          dpshim__layout_t *l, char *msg, size_t len) {
  const dpshim_field_t *fd = &b->fields[f];
  const char *name = fd->name ? fd->name : "?";
  if (fd->row_bytes < 1) {
    snprintf(msg, len, "field '%s': row_bytes is 0, expected >= 1", name);
    return DPSHIM_EINVAL;
  }
  if (!fd->data && fd->capacity_rows > 0) {
    snprintf(msg, len, "field '%s': data is NULL", name);
    return DPSHIM_EINVAL;
  }
  l->row_bytes[f] = fd->row_bytes;
  if (fd->offsets && fd->capacity_rows > INT32_MAX) {
    snprintf(msg, len,
             "field '%s': capacity_rows %lld exceeds what int32 offsets can "
             "hold, expected at most 2147483647", name,
             (long long)fd->capacity_rows);
    return DPSHIM_EINVAL;
  }
  if (fd->capacity_rows < 0) {
    snprintf(msg, len, "field '%s': capacity_rows %lld, expected >= 0", name,
             (long long)fd->capacity_rows);
    return DPSHIM_EINVAL;
  }
  if (fd->offsets == b->cu_seqlens) {
    l->kind[f] = DPSHIM__ROWS_TOKENS;
  } else if (!fd->offsets) {
    l->kind[f] = DPSHIM__ROWS_ONE;
    if (b->nsamples > fd->capacity_rows) {
      snprintf(msg, len, "field '%s': %d samples exceed capacity_rows %lld",
               name, (int)b->nsamples, (long long)fd->capacity_rows);
      return DPSHIM_EINVAL;
    }
    return 0;
  } else {
    l->kind[f] = DPSHIM__ROWS_OWN;
    l->slot[f] = (uint8_t)l->width++;
  }
  return check_offsets(fd->offsets, b->nsamples, fd->capacity_rows, name, msg,
                       len);
}

static int describe_vision(const dpshim_batch_t *b, dpshim__layout_t *l,
                           char *msg, size_t len) {
  if (!b->vision) return 0;
  for (int32_t i = 0; i < b->nsamples; i++) {
    const dpshim_vision_t *v = &b->vision[i];
    if (v->patches < 0 || v->patches_sq < 0) {
      snprintf(msg, len, "vision[%d]: patches %lld, patches_sq %lld, "
               "expected both >= 0", (int)i, (long long)v->patches,
               (long long)v->patches_sq);
      return DPSHIM_EINVAL;
    }
  }
  l->vision = l->width;
  l->width += DPSHIM__VISION_META;
  return 0;
}

int dpshim__layout_of(const dpshim_batch_t *b, dpshim__layout_t *l,
                      char *msg, size_t len) {
  memset(l, 0, sizeof *l);
  if (!b) return bad(msg, len, "batch is NULL");
  if (b->nsamples < 0 || b->nsamples > b->capacity_samples) {
    snprintf(msg, len,
             "batch: nsamples %d, expected 0 .. capacity_samples (%d)",
             (int)b->nsamples, (int)b->capacity_samples);
    return DPSHIM_EINVAL;
  }
  if (!b->cu_seqlens) return bad(msg, len, "batch: cu_seqlens is NULL");
  if (b->nfields < 1 || b->nfields > DPSHIM__MAX_FIELDS || !b->fields)
    return bad(msg, len, "batch: nfields outside [1, 16] or fields NULL");
  if (check_offsets(b->cu_seqlens, b->nsamples, INT32_MAX, "cu_seqlens", msg,
                    len) < 0)
    return DPSHIM_EINVAL;
  l->nfields = b->nfields;
  l->width = 1;
  for (int32_t f = 0; f < b->nfields; f++) {
    int rc = describe_field(b, f, l, msg, len);
    if (rc < 0) return rc;
  }
  return describe_vision(b, l, msg, len);
}

uint32_t dpshim__field_signature(const dpshim_batch_t *b,
                                 const dpshim__layout_t *l, int32_t f) {
  const char *name = b->fields[f].name ? b->fields[f].name : "";
  uint64_t v[2] = {l->kind[f], l->row_bytes[f]};
  uint64_t h = dpshim__fnv(DPSHIM__FNV_SEED, v, sizeof v);
  h = dpshim__fnv(h, name, strlen(name));
  return (uint32_t)(h ^ (h >> 32));
}

void dpshim__meta_of(const dpshim_batch_t *b, const dpshim__layout_t *l,
                     int32_t i, int32_t *meta) {
  meta[0] = b->cu_seqlens[i + 1] - b->cu_seqlens[i];
  for (int32_t f = 0; f < l->nfields; f++) {
    if (l->kind[f] != DPSHIM__ROWS_OWN) continue;
    const int32_t *off = b->fields[f].offsets;
    meta[l->slot[f]] = off[i + 1] - off[i];
  }
  if (!l->vision) return;
  const int64_t v[2] = {b->vision[i].patches, b->vision[i].patches_sq};
  for (int k = 0; k < 2; k++) {
    meta[l->vision + 2 * k] = (int32_t)(uint32_t)(uint64_t)v[k];
    meta[l->vision + 2 * k + 1] = (int32_t)(uint32_t)((uint64_t)v[k] >> 32);
  }
}

static int64_t meta_int64(const int32_t *half) {
  return (int64_t)((uint64_t)(uint32_t)half[0] |
                   (uint64_t)(uint32_t)half[1] << 32);
}

dpshim_vision_t dpshim__meta_vision(const dpshim__layout_t *l,
                                    const int32_t *meta) {
  if (!l->vision) return (dpshim_vision_t){0, 0};
  return (dpshim_vision_t){meta_int64(meta + l->vision),
                           meta_int64(meta + l->vision + 2)};
}

int64_t dpshim__meta_rows(const dpshim__layout_t *l, int32_t f,
                          const int32_t *meta) {
  switch (l->kind[f]) {
  case DPSHIM__ROWS_TOKENS: return meta[0];
  case DPSHIM__ROWS_ONE: return 1;
  default: return meta[l->slot[f]];
  }
}

int64_t dpshim__meta_bytes(const dpshim__layout_t *l, const int32_t *meta) {
  int64_t bytes = 0;
  for (int32_t f = 0; f < l->nfields; f++)
    bytes += dpshim__meta_rows(l, f, meta) * (int64_t)l->row_bytes[f];
  return bytes;
}

/* First row of sample i in field f. */
static int64_t first_row(const dpshim_batch_t *b, const dpshim__layout_t *l,
                         int32_t f, int32_t i) {
  return l->kind[f] == DPSHIM__ROWS_ONE ? i : b->fields[f].offsets[i];
}

unsigned char *dpshim__batch_rows(const dpshim_batch_t *b,
                                  const dpshim__layout_t *l, int32_t f,
                                  int32_t i, int32_t n, size_t *bytes) {
  int64_t first = first_row(b, l, f, i);
  unsigned char *data = b->fields[f].data;
  *bytes = (size_t)(first_row(b, l, f, i + n) - first) * l->row_bytes[f];
  return data ? data + (size_t)first * l->row_bytes[f] : NULL;
}

void dpshim__batch_append(dpshim_batch_t *b, const dpshim__layout_t *l,
                          int32_t n, const int32_t *meta,
                          const unsigned char *const *from) {
  int32_t base = b->nsamples;
  for (int32_t k = 0; k < n; k++) {
    const int32_t *m = meta + (size_t)k * (size_t)l->width;
    int32_t i = base + k;
    b->cu_seqlens[i + 1] = b->cu_seqlens[i] + m[0];
    for (int32_t f = 0; f < l->nfields; f++)
      if (l->kind[f] == DPSHIM__ROWS_OWN)
        b->fields[f].offsets[i + 1] = b->fields[f].offsets[i] + m[l->slot[f]];
  }
  for (int32_t f = 0; from && f < l->nfields; f++) {
    size_t bytes;
    unsigned char *to = dpshim__batch_rows(b, l, f, base, n, &bytes);
    if (bytes) memcpy(to, from[f], bytes);
  }
  b->nsamples = base + n;
}
