/* FNV-1a, 64-bit: the one hash the shim uses to compare what ranks hold
 * (layouts, configurations, plans, records). Not for security. */
#ifndef DPSHIM_SHIM_HASH_H
#define DPSHIM_SHIM_HASH_H

#include <stddef.h>
#include <stdint.h>

#define DPSHIM__FNV_SEED 1469598103934665603ull

static inline uint64_t dpshim__fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *c = p;
  for (size_t i = 0; i < n; i++) h = (h ^ c[i]) * 1099511628211ull;
  return h;
}

#endif
