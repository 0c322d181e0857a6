/* Vision-language batches as the two model families pack them, balanced in
 * one call each: describe the batch by its pointers, call, done.
 *
 *   InternVL: tokens, labels, loss_weight, position_ids (token-aligned, by
 *     cu_lengths), imgs (tiles) and image_flags (one per tile). A sample
 *     owns (its <IMG_CONTEXT> tokens) / num_image_token real tiles, or, when
 *     it has none, dummy_tiles tiles of flag 0 (InternVL gives a text-only
 *     sample 1).
 *   Qwen2-VL / Qwen3-VL: tokens, labels, attn_mask (token-aligned), imgs
 *     (patch rows) with image_grid_thw (one row per image), and the same for
 *     videos. An image of grid (t, h, w) owns t*h*w patch rows and
 *     t*h*w / merge^2 pad tokens in its sample; images belong to samples in
 *     order, by their pad tokens.
 *
 * Each sample's images also enter its cost (dpshim_batch_t.vision): a tile
 * as 4 * num_image_token patches, an image or video as t*h*w (its frames
 * apart with video_frames_apart).
 *
 * Every slice of a sample moves with it: its tokens, tiles and flags, or its
 * patch rows and grid rows. Counts (ntiles, nimages, ...) and max_lengths
 * are rewritten for the balanced batch; position_ids restart per sample, so
 * they move unchanged. Any number of images and videos per sample, text-only
 * samples among image samples, any num_image_token. A batch that does not
 * match its layout (grid rows that do not match the pad tokens, flags that
 * do not match the tiles) is an agreed error naming the field and the rank,
 * every batch untouched. The calls are collective like
 * dpshim_balance_batch() and return what it returns.
 *
 * Buffers are the caller's, with their capacities in rows; element types of
 * the pixel buffers are the caller's too (row sizes in bytes).
 */
#ifndef DPSHIM_VLM_H
#define DPSHIM_VLM_H

#include <stddef.h>
#include <stdint.h>

#include "dpshim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dpshim_internvl_batch {
  int32_t nsamples, capacity_samples;
  int32_t *cu_lengths; /* [nsamples + 1]: InternVL's "attn_mask" */
  int64_t capacity_tokens;
  int64_t *tokens, *labels, *position_ids;
  float *loss_weight;
  int32_t ntiles; /* rewritten */
  int64_t capacity_tiles;
  void *imgs;          /* [ntiles] tiles of tile_bytes (3 x S x S values) */
  size_t tile_bytes;
  int64_t *image_flags; /* [ntiles]: 1 real, 0 dummy */
  int32_t num_image_token; /* <IMG_CONTEXT> tokens per real tile, >= 1 */
  int64_t context_token;   /* the <IMG_CONTEXT> token id */
  int32_t dummy_tiles;     /* tiles of a text-only sample: 1 or 0 */
  uint64_t *keys; /* [nsamples] the loader's per-sample keys, or NULL */
} dpshim_internvl_batch_t;

typedef struct dpshim_qwen_media {
  void *rows;          /* [nrows] patch rows of row_bytes */
  int64_t capacity_rows;
  int32_t *grid_thw;   /* [count * 3] (t, h, w) per image or video */
  int32_t count;       /* rewritten */
  int32_t capacity;    /* grid rows the buffer holds */
  int64_t pad_token;   /* its pad token id */
} dpshim_qwen_media_t;

typedef struct dpshim_qwen_batch {
  int32_t nsamples, capacity_samples;
  int32_t *cu_lengths; /* [nsamples + 1] */
  int64_t capacity_tokens;
  int64_t *tokens, *labels;
  uint8_t *attn_mask;   /* per token, 1 = pad; may be NULL */
  int32_t *max_lengths; /* [1], rewritten; may be NULL */
  size_t row_bytes;     /* bytes per patch row (1176 values) */
  int32_t merge;        /* spatial merge: pad tokens = t*h*w / merge^2 */
  dpshim_qwen_media_t images, videos; /* videos.count 0: none */
  uint64_t *keys; /* [nsamples] the loader's per-sample keys, or NULL */
  /* 1: the vision encoder attends to each frame of a video apart
   * (Qwen3-VL), 0: to a video whole (Qwen2-VL). For the cost only. */
  int32_t video_frames_apart;
} dpshim_qwen_batch_t;

DPSHIM_EXTERN int dpshim_balance_internvl(dpshim_internvl_batch_t *b);
DPSHIM_EXTERN int dpshim_balance_qwen(dpshim_qwen_batch_t *b);

#ifdef __cplusplus
}
#endif
#endif
