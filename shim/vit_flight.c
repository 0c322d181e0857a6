/* Encoder calls in flight; see vit_flight.h. */
#include "vit_flight.h"

#include <stdlib.h>
#include <string.h>

void dpshim__vit_flights_init(dpshim__vit_flights_t *f) {
  memset(f, 0, sizeof *f);
}

void dpshim__vit_flight_free(dpshim__vit_flight_t *flight) {
  free(flight->first);
  free(flight->images);
  free(flight->dest);
  memset(flight, 0, sizeof *flight);
}

void dpshim__vit_flights_free(dpshim__vit_flights_t *f,
                              void (*drop)(void *data)) {
  for (int32_t k = 0; k < f->count; k++) {
    if (drop) drop(f->slot[k].data);
    dpshim__vit_flight_free(&f->slot[k]);
  }
  free(f->slot);
  dpshim__vit_flights_init(f);
}

static int32_t find(const dpshim__vit_flights_t *f, uint64_t key) {
  for (int32_t k = 0; k < f->count; k++)
    if (f->slot[k].key == key) return k;
  return -1;
}

static void *copy(const void *src, size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (p && bytes) memcpy(p, src, bytes);
  return p;
}

static int copy_flight(dpshim__vit_flight_t *to, uint64_t key,
                       const dpshim__vit_group_t *g, const int32_t *dest) {
  if (!g) {
    *to = (dpshim__vit_flight_t){.key = key};
    return 0;
  }
  size_t n = (size_t)g->first[g->ranks];
  *to = (dpshim__vit_flight_t){
      .key = key,
      .ranks = g->ranks,
      .first = copy(g->first, ((size_t)g->ranks + 1) * sizeof *g->first),
      .images = copy(g->images, n * sizeof *g->images),
      .dest = copy(dest, n * sizeof *dest)};
  if (to->first && to->images && to->dest) return 0;
  dpshim__vit_flight_free(to);
  return DPSHIM_ENOMEM;
}

int dpshim__vit_flights_push(dpshim__vit_flights_t *f, uint64_t key,
                             const dpshim__vit_group_t *g,
                             const int32_t *dest, void *data) {
  if (find(f, key) >= 0) return DPSHIM_EINVAL;
  if (f->count == f->cap) {
    int32_t cap = f->cap ? 2 * f->cap : 4;
    dpshim__vit_flight_t *s = realloc(f->slot, (size_t)cap * sizeof *s);
    if (!s) return DPSHIM_ENOMEM;
    f->slot = s;
    f->cap = cap;
  }
  int rc = copy_flight(&f->slot[f->count], key, g, dest);
  f->slot[f->count].data = data;
  if (rc == 0) f->count++;
  return rc;
}

dpshim__vit_flight_t *dpshim__vit_flights_find(dpshim__vit_flights_t *f,
                                               uint64_t key) {
  int32_t k = find(f, key);
  return k < 0 ? NULL : &f->slot[k];
}

int dpshim__vit_flights_take(dpshim__vit_flights_t *f, uint64_t key,
                             dpshim__vit_flight_t *out) {
  int32_t k = find(f, key);
  if (k < 0) return DPSHIM_EINVAL;
  *out = f->slot[k];
  memmove(&f->slot[k], &f->slot[k + 1],
          (size_t)(f->count - k - 1) * sizeof *f->slot);
  f->count--;
  return 0;
}
