/* mix: the hash steps the tools share (splitmix64's finaliser, and a fast
 * hash of bytes). Header-only, tools-internal. */
#ifndef DPSHIM_TOOLS_MIX_H
#define DPSHIM_TOOLS_MIX_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* splitmix64's finaliser: a bijection in which every input bit reaches every
 * output bit. */
static inline uint64_t dpshim__tool_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
  return z ^ (z >> 31);
}

/* FNV-1a's step on 64-bit words, in four independent lanes: the pixel rows
 * of a 32K-token pack are ~0.5 GB, which a byte-wise FNV-1a (one dependent
 * multiply per byte) takes half a second to hash, longer than the emulated
 * GPU step it stands beside. */
static inline uint64_t dpshim__tool_hash(uint64_t h, const void *p, size_t n) {
  const unsigned char *c = p;
  uint64_t lane[4] = {h, h ^ 0x9e3779b97f4a7c15ull, ~h, h + n};
  size_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; k++) {
      uint64_t w;
      memcpy(&w, c + i + 8 * (size_t)k, sizeof w);
      lane[k] = (lane[k] ^ w) * 1099511628211ull;
    }
  for (; i < n; i++) lane[0] = (lane[0] ^ c[i]) * 1099511628211ull;
  uint64_t r = 0;
  for (int k = 0; k < 4; k++) r = dpshim__tool_mix64(r ^ lane[k]);
  return r;
}

#endif
