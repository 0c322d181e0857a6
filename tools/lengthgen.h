/* lengthgen: synthetic sample lengths and packed batches, for the tools.
 *
 * What it offers:
 *   - lengthgen_rng_t: xoshiro256** seeded through splitmix64 (no rand()), so
 *     a seed gives the same stream on every machine;
 *   - lengthgen_normal(), lengthgen_lognormal(): Box-Muller normals and
 *     log-normal lengths round(median * exp(sigma * z)) clamped to [1, max];
 *   - named profiles (sft, long, fewlong): pack size and length distribution;
 *   - lengthgen_file_load(): lengths read from a file, one per line, drawn
 *     uniformly with replacement;
 *   - lengthgen_pack(): a random stream first-fit into P packs, one per rank,
 *     as a packing data loader does; the result is grouped by pack;
 *   - a hook (lengthgen_source_t.draw) for other distributions: the random
 *     length mixes of lengthmix.h pack through it.
 *
 *   lengthgen_rng_t rng;
 *   lengthgen_batch_t batch = {0};
 *   lengthgen_source_t src = lengthgen_source_profile(lengthgen_profile_find(
 *       "sft", err, sizeof err));
 *   lengthgen_seed(&rng, 1);
 *   if (lengthgen_pack(&src, 1024, &rng, &batch) < 0) ... out of memory ...
 *   ... batch.len[i], batch.origin[i] for i < batch.n ...
 *   lengthgen_batch_free(&batch);
 *
 * Tools-internal: not part of the dpshim library API.
 */
#ifndef DPSHIM_TOOLS_LENGTHGEN_H
#define DPSHIM_TOOLS_LENGTHGEN_H

#include <stddef.h>
#include <stdint.h>

/* ---- random numbers ------------------------------------------------------ */

typedef struct lengthgen_rng {
  uint64_t s[4];
} lengthgen_rng_t;

void lengthgen_seed(lengthgen_rng_t *rng, uint64_t seed);
uint64_t lengthgen_next(lengthgen_rng_t *rng);
/* Uniform in [0, 1), 53 bits. */
double lengthgen_uniform(lengthgen_rng_t *rng);
/* Uniform in [0, n), unbiased; n >= 1. */
uint64_t lengthgen_below(lengthgen_rng_t *rng, uint64_t n);
/* Standard normal. */
double lengthgen_normal(lengthgen_rng_t *rng);
/* round(median * exp(sigma * z)) clamped to [1, max]. */
int64_t lengthgen_lognormal(lengthgen_rng_t *rng, double median, double sigma,
                            int64_t max);

/* ---- profiles ------------------------------------------------------------ */

typedef struct lengthgen_profile {
  const char *name;
  int64_t pack;  /* tokens per pack */
  double median; /* of the log-normal length */
  double sigma;
  int64_t max;   /* longest sample: the pipeline's truncation length */
} lengthgen_profile_t;

/* The profile called `name`, or NULL with err naming the valid ones. */
const lengthgen_profile_t *lengthgen_profile_find(const char *name, char *err,
                                                  size_t errlen);
/* "sft, long, fewlong" into buf. */
void lengthgen_profile_names(char *buf, size_t len);

/* ---- lengths files ------------------------------------------------------- */

typedef struct lengthgen_file {
  int64_t *lens;
  size_t n;
} lengthgen_file_t;

/* One positive integer per line; blank lines and '#' comments are skipped.
 * Returns 0, or -1 with err naming file:line and the bad text (or the I/O
 * error); on error *out holds nothing to free. */
int lengthgen_file_load(const char *path, lengthgen_file_t *out, char *err,
                        size_t errlen);
void lengthgen_file_free(lengthgen_file_t *f);

/* ---- packing ------------------------------------------------------------- */

/* A length drawn by the caller's own distribution (a length mix): any
 * integer, clamped to the pack like the others. */
typedef int64_t (*lengthgen_draw_fn)(const void *ctx, lengthgen_rng_t *rng);

/* Where lengths come from: `draw` when non-NULL, else `table` when
 * non-NULL, else the log-normal. Every length is clamped to `pack`, as a
 * loader cannot place a longer sample. */
typedef struct lengthgen_source {
  int64_t pack;
  double median, sigma;
  int64_t max;
  const int64_t *table;
  size_t ntable;
  lengthgen_draw_fn draw;
  const void *draw_ctx;
  /* The most samples a pack takes before the loader closes it; 0 = no
   * limit (only tokens close a pack). Small instances for exact solvers. */
  int64_t max_per_pack;
} lengthgen_source_t;

lengthgen_source_t lengthgen_source_profile(const lengthgen_profile_t *p);
lengthgen_source_t lengthgen_source_file(const lengthgen_file_t *f,
                                         int64_t pack);
/* One length from the source, in [1, pack]. */
int64_t lengthgen_draw(const lengthgen_source_t *src, lengthgen_rng_t *rng);

/* One packed batch: n samples, grouped by origin (pack) ascending, in stream
 * order within a pack. The arrays are reused by the next lengthgen_pack(). */
typedef struct lengthgen_batch {
  int64_t n;
  int64_t *len;
  int32_t *origin;
  int64_t cap_; /* private: allocated length of the arrays */
} lengthgen_batch_t;

/* Draws lengths and puts each in the lowest-index pack with room (and, with
 * src->max_per_pack, fewer samples than that), until 64
 * samples in a row fit nowhere (a real loader would carry them to the next
 * batch). Every pack ends non-empty. O(log packs) per sample. Returns 0, or
 * -1 when out of memory, or packs outside 1..2^30, or src->pack < 1. */
int lengthgen_pack(const lengthgen_source_t *src, int32_t packs,
                   lengthgen_rng_t *rng, lengthgen_batch_t *out);
void lengthgen_batch_free(lengthgen_batch_t *b);

#endif
