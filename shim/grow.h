/* Scratch arrays that grow to the largest size asked for and are kept
 * across calls (hand-offs, encoder calls): never shrunk, grown exactly. */
#ifndef DPSHIM_SHIM_GROW_H
#define DPSHIM_SHIM_GROW_H

#include <stddef.h>
#include <stdlib.h>

#include "dpshim/dpshim.h"

/* Grows *pp (a pointer to a pointer) to hold n elements of `elem` bytes;
 * *cap counts them. 0, or DPSHIM_ENOMEM with *pp as it was. */
static inline int dpshim__grow(void *pp, size_t *cap, size_t n, size_t elem) {
  void **p = pp;
  if (n <= *cap && *p) return 0;
  void *q = realloc(*p, (n ? n : 1) * elem);
  if (!q) return DPSHIM_ENOMEM;
  *p = q;
  *cap = n;
  return 0;
}

#endif
