/* reftrain's hash step. */
#ifndef REFTRAIN_MIX_H
#define REFTRAIN_MIX_H

#include <stdint.h>

/* splitmix64's finaliser: a bijection in which every input bit reaches every
 * output bit. */
static inline uint64_t rt_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
  return z ^ (z >> 31);
}

#endif
