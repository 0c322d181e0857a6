/* mix: the hash step the tools share (splitmix64's finaliser).
 * Header-only, tools-internal. */
#ifndef DPSHIM_TOOLS_MIX_H
#define DPSHIM_TOOLS_MIX_H

#include <stdint.h>

/* splitmix64's finaliser: a bijection in which every input bit reaches every
 * output bit. */
static inline uint64_t dpshim__tool_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
  return z ^ (z >> 31);
}

#endif
