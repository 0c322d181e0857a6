/* lengthmix: random length mixes, so the solver is measured on shapes
 * nobody tuned it to, beyond lengthgen's three named profiles.
 *
 * A mix is a pack size and 1-3 weighted components, each one of:
 *   - a log-normal: median and sigma (a chat or instruction corpus);
 *   - a uniform range [lo, hi]: long documents cut to fit;
 *   - a point mass: one length (a fixed-length task, truncation at a limit).
 * Every length is clamped to [1, pack]. lengthmix_make() draws mix `index`
 * from `seed` alone, so (seed, index) names a mix everywhere; the rules:
 *   - pack: 2^k tokens, k uniform in 14..18 (16K, 32K, 64K, 128K, 256K);
 *   - components: 1, 2 or 3, equally likely; weights from exponential draws,
 *     normalised (a flat Dirichlet), so any split is possible;
 *   - kind: log-normal 1/2, uniform range 3/10, point mass 1/5;
 *   - log-normal: median log-uniform in [64, pack/4], sigma uniform in
 *     [0.3, 1.8];
 *   - uniform range: lo uniform in [pack/16, pack/2], hi uniform in
 *     [lo, pack];
 *   - point mass: a length log-uniform in [16, pack].
 *
 *   lengthmix_t mix;
 *   lengthmix_make(1, 7, &mix);
 *   lengthgen_source_t src = lengthmix_source(&mix);  (mix must outlive src)
 *   ... lengthgen_pack(&src, ranks, &rng, &batch) ...
 *
 * Tools-internal: not part of the dpshim library API.
 */
#ifndef DPSHIM_TOOLS_LENGTHMIX_H
#define DPSHIM_TOOLS_LENGTHMIX_H

#include <stddef.h>
#include <stdint.h>

#include "lengthgen.h"

#define LENGTHMIX_MAX_COMPONENTS 3

typedef enum lengthmix_kind {
  LENGTHMIX_LOGNORMAL = 0,
  LENGTHMIX_UNIFORM,
  LENGTHMIX_POINT
} lengthmix_kind_t;

typedef struct lengthmix_component {
  lengthmix_kind_t kind;
  double weight;      /* share of the samples; the weights sum to 1 */
  double median, sigma; /* log-normal */
  int64_t lo, hi;     /* uniform range, inclusive; a point mass: lo == hi */
} lengthmix_component_t;

typedef struct lengthmix {
  uint64_t seed;
  int32_t index;
  int64_t pack;
  int ncomponents;
  lengthmix_component_t component[LENGTHMIX_MAX_COMPONENTS];
} lengthmix_t;

/* Mix `index` of the family drawn from `seed`. */
void lengthmix_make(uint64_t seed, int32_t index, lengthmix_t *mix);

/* The same shape at another pack size: every length parameter times
 * pack / mix->pack (rounded, at least 1), so small instances keep the
 * mix's proportions instead of clamping its long samples to the pack. */
void lengthmix_rescale(lengthmix_t *mix, int64_t pack);

/* One length in [1, mix->pack]; *component (when non-NULL) gets the index
 * of the component it came from. */
int64_t lengthmix_draw(const lengthmix_t *mix, lengthgen_rng_t *rng,
                       int *component);

/* A lengthgen source drawing from `mix`, at the mix's pack size. */
lengthgen_source_t lengthmix_source(const lengthmix_t *mix);

/* "lognormal", "uniform" or "point". */
const char *lengthmix_kind_name(lengthmix_kind_t kind);

/* The mix as one JSON object, without a newline:
 * {"mix":"mix7","mix_seed":1,"index":7,"pack":65536,"components":[...]}
 * `name` is what the tools print for it. Returns what snprintf returns. */
int lengthmix_describe(const lengthmix_t *mix, const char *name, char *buf,
                       size_t len);

#endif
