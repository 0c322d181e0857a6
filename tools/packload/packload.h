/* packload: the reference packing data loader, built as libpackload.so.
 *
 * Each data-parallel slot draws a random stream of samples (lengths from a
 * lengthgen profile or a lengths file) and first-fits it into fixed-length
 * packs, one pack per packload_next() call. Every sample carries three
 * token-aligned fields (token ids, labels, loss weights) and one per-sample
 * field (a 64-bit id), all derived from (seed, slot, sample index), so that a
 * consumer can check it got each sample exactly once and intact.
 *
 *   packload_config_t cfg = packload_config_default();
 *   cfg.profile = "sft"; cfg.seed = 7; cfg.slot = dp_rank; cfg.slots = dp_size;
 *   packload_t *pl = packload_open(&cfg, err, sizeof err);
 *   for (;;) { packload_batch_t *b = packload_next(pl); ... }
 *   packload_close(pl);
 *
 * packload_next() is the hand-off symbol that libdpshim.so interposes: it is
 * exported from this shared library and called from the trainer, so an
 * LD_PRELOADed definition takes precedence. The batch it returns lives in the
 * loader's own buffers, which hold `capacity_tokens` tokens and
 * `capacity_samples` samples: more than one pack, so that a balancer may hand
 * a rank somewhat more than it drew. A balancer may rewrite the batch in place
 * within those capacities.
 */
#ifndef PACKLOAD_H
#define PACKLOAD_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define PACKLOAD_EXTERN __attribute__((visibility("default")))
#else
#define PACKLOAD_EXTERN
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct packload_batch {
  int32_t nsamples;         /* samples in the batch */
  int32_t capacity_samples; /* entries sample_ids can hold; cu_seqlens one more */
  int64_t capacity_tokens;  /* rows tokens/labels/loss_weights can hold */
  int32_t *cu_seqlens;      /* [nsamples + 1] token offsets, cu_seqlens[0] == 0 */
  int32_t *tokens;          /* [cu_seqlens[nsamples]] token ids */
  int32_t *labels;          /* [cu_seqlens[nsamples]] next-token labels */
  float *loss_weights;      /* [cu_seqlens[nsamples]] */
  uint64_t *sample_ids;     /* [nsamples] globally unique within a run */
} packload_batch_t;

typedef struct packload_config {
  const char *profile;      /* lengthgen profile name; ignored with lengths_file */
  const char *lengths_file; /* one length per line, or NULL */
  int64_t pack_tokens;      /* tokens per pack; 0 = the profile's */
  double headroom;          /* capacity = headroom * pack_tokens, >= 1 */
  uint64_t seed;
  int32_t slot;             /* data-parallel index of this rank, in [0, slots) */
  int32_t slots;            /* data-parallel size */
  /* Nonzero: lengths and ids only. tokens, labels and loss_weights stay NULL
   * and are never generated, which a simulator drawing thousands of slots'
   * packs needs for speed and memory; the packs are the same either way. */
  int lengths_only;
} packload_config_t;

typedef struct packload packload_t;

PACKLOAD_EXTERN packload_config_t packload_config_default(void);
/* NULL with a one-line reason in err on bad configuration or no memory. */
PACKLOAD_EXTERN packload_t *packload_open(const packload_config_t *cfg,
                                          char *err, size_t errlen);
/* The next pack; the same buffers each call. Never NULL for an open loader. */
PACKLOAD_EXTERN packload_batch_t *packload_next(packload_t *loader);
PACKLOAD_EXTERN void packload_close(packload_t *loader);

/* ---- for consumers that check what they got ------------------------------
 * Everything about a sample follows from (seed, id): its length and its three
 * token fields. A consumer holding any loader of the run (any slot) can thus
 * check a sample that a balancer moved to it from another slot. */

/* Label of the last token of a sample: there is no next token (the usual
 * "ignore" index); its loss weight is 0. */
#define PACKLOAD_IGNORE_LABEL (-100)

enum packload_verdict {
  PACKLOAD_INTACT = 0,     /* length and every field as generated */
  PACKLOAD_BAD_ID = 1,     /* no slot of this run draws that id */
  PACKLOAD_BAD_LENGTH = 2, /* the id's sample has another length */
  PACKLOAD_BAD_PAYLOAD = 3 /* a token, label or loss weight differs */
};

/* Compares one sample (len rows of each field) with what `id` implies. */
PACKLOAD_EXTERN enum packload_verdict packload_verify(
    const packload_t *loader, uint64_t id, int64_t len, const int32_t *tokens,
    const int32_t *labels, const float *loss_weights);
/* Samples and tokens this loader has put into packs so far (a consumer's
 * check that a balancer neither dropped nor duplicated anything). */
PACKLOAD_EXTERN void packload_produced(const packload_t *loader,
                                       int64_t *samples, int64_t *tokens);

#ifdef __cplusplus
}
#endif
#endif
