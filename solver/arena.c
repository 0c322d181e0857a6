/* A bump allocator that learns its size: allocations past the block go to
 * overflow chunks, and the next reset grows the block to cover them all
 * and half as much again, so repeated solves of similar instances stop
 * calling malloc. */
#include <stdlib.h>

#include "internal.h"

struct dpshim__chunk {
  struct dpshim__chunk *next;
  max_align_t data[];
};

#define DPSHIM__ALIGN ((size_t)_Alignof(max_align_t))

static size_t round_up(size_t bytes) {
  return (bytes + DPSHIM__ALIGN - 1) / DPSHIM__ALIGN * DPSHIM__ALIGN;
}

void *dpshim__arena_alloc(dpshim__arena_t *a, size_t bytes) {
  bytes = round_up(bytes ? bytes : 1);
  if (a->size - a->used >= bytes) {
    void *p = a->base + a->used;
    a->used += bytes;
    return p;
  }
  struct dpshim__chunk *c = malloc(sizeof *c + bytes);
  a->mallocs++;
  if (!c) return NULL;
  c->next = a->overflow;
  a->overflow = c;
  a->overflow_bytes += bytes;
  return c->data;
}

static void free_overflow(dpshim__arena_t *a) {
  while (a->overflow) {
    struct dpshim__chunk *next = a->overflow->next;
    free(a->overflow);
    a->overflow = next;
  }
  a->overflow_bytes = 0;
}

int dpshim__arena_reset(dpshim__arena_t *a) {
  size_t want = a->used + a->overflow_bytes;
  free_overflow(a);
  a->used = 0;
  a->mallocs = 0;
  if (want <= a->size) return 0;
  /* Room for the next instances a little larger than this one: a block
   * grown to the byte comes back as fresh pages (page faults on first
   * touch, tens of ms at 4096 ranks) and, in the shim, an agreement round
   * (solver.h's allocations) at nearly every solve while sizes creep up. */
  want += want / 2;
  free(a->base);
  a->base = malloc(want);
  a->mallocs = 1;
  a->size = a->base ? want : 0;
  return a->base ? 0 : DPSHIM_ENOMEM;
}

void dpshim__arena_free(dpshim__arena_t *a) {
  free_overflow(a);
  free(a->base);
  *a = (dpshim__arena_t){0};
}
