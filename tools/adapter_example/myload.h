/* myload: a stand-in THIRD-PARTY vision-language data loader, built as
 * libmyload.so. It knows nothing of dpshim; libdpshim_myload.so (dpshim_myload.c)
 * is the adapter that lets the shim balance it.
 *
 * Each data-parallel slot draws a stream of samples and first-fits it into
 * fixed-length packs, one pack per myload_next() call. A sample has
 *   - tokens: input ids (int64) and position ids (int32), token-aligned, so
 *     both share cu_seqlens;
 *   - image patches: rows of MYLOAD_PATCH_DIM floats, a variable number per
 *     sample (0 for text-only samples), with their own patch_offsets. Each
 *     patch also stands in the text as one MYLOAD_IMAGE_TOKEN, so a
 *     sample's patches never outnumber its tokens;
 *   - a 64-bit id, unique within a run.
 * Everything follows from (seed, id), so a consumer can verify any sample,
 * including one a balancer moved to it from another slot.
 *
 *   myload_config_t cfg = myload_config_default();
 *   cfg.seed = 7; cfg.slot = dp_rank; cfg.slots = dp_size;
 *   myload_t *l = myload_open(&cfg, err, sizeof err);
 *   for (;;) { myload_batch_t *b = myload_next(l); ... }
 *   myload_close(l);
 *
 * The batch lives in the loader's buffers, which hold `headroom` packs, and
 * may be rewritten in place within its capacities until the next call.
 */
#ifndef MYLOAD_H
#define MYLOAD_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define MYLOAD_EXTERN __attribute__((visibility("default")))
#else
#define MYLOAD_EXTERN
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define MYLOAD_PATCH_DIM 12       /* floats per patch row: 48 bytes */
#define MYLOAD_IMAGE_TOKEN 151655 /* input id of an image placeholder */

typedef struct myload_batch {
  int32_t nsamples;
  int32_t capacity_samples;  /* entries of sample_ids; offsets arrays: +1 */
  int64_t capacity_tokens;   /* rows of input_ids and position_ids */
  int64_t capacity_patches;  /* rows of patches */
  int32_t *cu_seqlens;       /* [nsamples + 1] token offsets, [0] == 0 */
  int64_t *input_ids;        /* [cu_seqlens[nsamples]] */
  int32_t *position_ids;     /* [cu_seqlens[nsamples]] */
  int32_t *patch_offsets;    /* [nsamples + 1] patch row offsets, [0] == 0 */
  float *patches;            /* [patch_offsets[nsamples] * PATCH_DIM] */
  uint64_t *sample_ids;      /* [nsamples] */
} myload_batch_t;

typedef struct myload_config {
  int64_t pack_tokens;   /* tokens per pack */
  double median, sigma;  /* log-normal sample length... */
  int64_t max_len;       /* ...clamped to this (truncation), <= pack_tokens */
  double image_fraction; /* share of samples with an image */
  double headroom;       /* buffer capacity in packs, >= 1 */
  uint64_t seed;
  int32_t slot, slots;   /* data-parallel index and size */
} myload_config_t;

typedef struct myload myload_t;

MYLOAD_EXTERN myload_config_t myload_config_default(void);
/* NULL with a one-line reason in err on a bad configuration or no memory. */
MYLOAD_EXTERN myload_t *myload_open(const myload_config_t *cfg, char *err,
                                       size_t errlen);
/* The next pack, in the same buffers each call. The hand-off symbol: a
 * balancer adapter interposes it. */
MYLOAD_EXTERN myload_batch_t *myload_next(myload_t *loader);
MYLOAD_EXTERN void myload_close(myload_t *loader);

/* Whether sample `index` of `b` is exactly what its id implies (length,
 * patch count, every input id, position id and patch float). */
MYLOAD_EXTERN int myload_sample_intact(const myload_t *loader,
                                         const myload_batch_t *b, int32_t index);
/* Samples this loader has put into packs so far. */
MYLOAD_EXTERN int64_t myload_produced(const myload_t *loader);

#ifdef __cplusplus
}
#endif
#endif
