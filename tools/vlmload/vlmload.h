/* vlmload: the reference vision-language loader, built as libvlmload.so.
 * It packs samples into fixed-length packs (image tokens included) in one
 * of the layouts the VLM families use, chosen at open:
 *
 *   internvl  tokens, labels (int64), loss_weight (float), position_ids
 *             (int64, restarting per sample), cu_lengths (int32), imgs
 *             (tiles of 3 x S x S floats), image_flags (int64: 1 real, 0
 *             the dummy tile of a text-only sample); num_image_token
 *             <IMG_CONTEXT> tokens per real tile.
 *   qwen2vl   tokens, labels (int64), attn_mask (uint8, 1 = pad),
 *   qwen3vl   cu_lengths, max_lengths, imgs (patch rows of 1176 floats),
 *             image_grid_thw (int32 t, h, w per image), and the same for
 *             videos; t*h*w / 4 pad tokens per image. qwen3vl puts a
 *             timestamp token before each frame of a video.
 *
 * Samples have any number of images (and, for Qwen, videos), or none;
 * image sizes are heavy-tailed. Every token, tile, patch row and grid row
 * follows from (seed, id), and each sample carries its id as its key (as
 * Energon's __key__), so a consumer can check any sample wherever it sits.
 *
 *   vlmload_config_t cfg = vlmload_config_default(VLMLOAD_QWEN2VL);
 *   cfg.seed = 7; cfg.slot = dp_rank; cfg.slots = dp_size;
 *   vlmload_t *l = vlmload_open(&cfg, err, sizeof err);
 *   for (;;) { vlm_batch_t *b = vlmload_next(l); ... }
 *
 * The batch lives in the loader's buffers ("headroom" packs) and may be
 * rewritten in place within its capacities until the next call. With
 * cfg.prefetch the packs are built ahead in a thread (the same packs, in
 * the same order), each in buffers of its own of the same capacities, and
 * each call hands out the oldest: the pointer changes from call to call.
 */
#ifndef VLMLOAD_H
#define VLMLOAD_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define VLMLOAD_EXTERN __attribute__((visibility("default")))
#else
#define VLMLOAD_EXTERN
#endif

#ifdef __cplusplus
extern "C" {
#endif

#define VLMLOAD_QWEN_ROW 1176 /* floats per patch row: 3 x 2 x 14 x 14 */
#define VLMLOAD_QWEN_MERGE 2  /* 2 x 2 patches per pad token */
/* A sample id is (slot << VLMLOAD_SLOT_SHIFT) | index: its slot is
 * id >> VLMLOAD_SLOT_SHIFT, whichever rank holds it. */
#define VLMLOAD_SLOT_SHIFT 40

/* Token ids of the families' special tokens. */
#define VLMLOAD_INTERNVL_IMG_START 92544
#define VLMLOAD_INTERNVL_IMG_END 92545
#define VLMLOAD_INTERNVL_CONTEXT 92546
#define VLMLOAD_QWEN_VISION_START 151652
#define VLMLOAD_QWEN_VISION_END 151653
#define VLMLOAD_QWEN_IMAGE_PAD 151655
#define VLMLOAD_QWEN_VIDEO_PAD 151656
#define VLMLOAD_IGNORE (-100) /* labels of image tokens */

typedef enum vlmload_layout {
  VLMLOAD_INTERNVL = 0,
  VLMLOAD_QWEN2VL,
  VLMLOAD_QWEN3VL
} vlmload_layout_t;

typedef struct vlm_internvl {
  int64_t *tokens, *labels, *position_ids;
  float *loss_weight;
  int32_t ntiles;
  int64_t capacity_tiles;
  float *imgs;          /* [ntiles * 3 * S * S] */
  int64_t *image_flags; /* [ntiles] */
  int32_t tile_size, num_image_token;
} vlm_internvl_t;

typedef struct vlm_qwen_media {
  float *rows;         /* [Σ t*h*w * VLMLOAD_QWEN_ROW] */
  int64_t capacity_rows;
  int32_t *grid_thw;   /* [count * 3] */
  int32_t count, capacity;
} vlm_qwen_media_t;

typedef struct vlm_qwen {
  int64_t *tokens, *labels;
  uint8_t *attn_mask;
  int32_t max_lengths;
  vlm_qwen_media_t images, videos;
} vlm_qwen_t;

typedef struct vlm_batch {
  vlmload_layout_t layout;
  int32_t nsamples;
  int32_t capacity_samples; /* keys; offsets arrays hold one more */
  int64_t capacity_tokens;
  int32_t *cu_lengths;      /* [nsamples + 1] token offsets */
  uint64_t *keys;           /* [nsamples] sample ids */
  vlm_internvl_t internvl;  /* valid for VLMLOAD_INTERNVL */
  vlm_qwen_t qwen;          /* valid for the Qwen layouts */
} vlm_batch_t;

typedef struct vlmload_config {
  vlmload_layout_t layout;
  int64_t pack_tokens;       /* tokens per pack, image tokens included */
  double text_median, text_sigma; /* log-normal text tokens per sample */
  double image_fraction;     /* samples with images */
  double video_fraction;     /* Qwen: samples with a video */
  int32_t max_images;        /* images per image sample, 1..max */
  int32_t tile_size;         /* InternVL: S (448) */
  int32_t num_image_token;   /* InternVL: tokens per tile (256) */
  int32_t max_tiles;         /* InternVL: tiles per image (12) */
  int32_t max_side;          /* Qwen: patches per image side, even (64) */
  int32_t max_frames;        /* Qwen: frames per video, even, 2..64 (8) */
  double headroom;           /* buffer capacity in packs, >= 1 */
  int64_t image_rows;        /* image rows one pack holds at most (Qwen
                                image patch rows, InternVL tiles, dummies
                                included); a sample with more drops images
                                until it fits. 0: what pack_tokens allow */
  double image_headroom;     /* with image_rows: the image-row buffer's
                                capacity in image_rows, >= 1 (1: a rank can
                                hold no more than one pack may); 0: headroom */
  uint64_t seed;
  int32_t slot, slots;       /* data-parallel index and size */
  int64_t fault_pack;        /* tests: this pack (1-based) breaks its layout
                                (a tile flag or a grid row); 0: none */
  int32_t prefetch;          /* packs built ahead by a thread of the
                                loader's own, as a DataLoader's workers
                                do, each in buffers of its own (prefetch
                                + 1 sets); 0: each pack built in
                                vlmload_next. At most 8 */
  int32_t hold;              /* packs handed out that stay valid: each
                                until `hold` further calls, in hold sets
                                of buffers (beside prefetch's); 0 or 1:
                                until the next call. At most 9 (a
                                balancer running ahead of the trainer
                                holds one more than it runs ahead) */
} vlmload_config_t;

typedef struct vlmload vlmload_t;

/* "internvl", "qwen2vl", "qwen3vl" <-> layout; -1 for another name. */
VLMLOAD_EXTERN int vlmload_layout_from_name(const char *name,
                                            vlmload_layout_t *out);
VLMLOAD_EXTERN const char *vlmload_layout_name(vlmload_layout_t layout);

VLMLOAD_EXTERN vlmload_config_t vlmload_config_default(vlmload_layout_t l);
/* A named mix over c (its layout's): "default" changes nothing;
 * "encoder-heavy" makes the encoder's share large: InternVL up to 24 tiles
 * per image and 90 % of samples with images; Qwen 90 % of samples with
 * images of twice the sides (max_side doubled, at most 1024), and for
 * Qwen3-VL half the samples with a video of up to 32 frames. 0, or -1 for
 * another name. */
VLMLOAD_EXTERN int vlmload_config_mix(vlmload_config_t *c, const char *mix);
/* NULL with a one-line reason in err on a bad configuration or no memory. */
VLMLOAD_EXTERN vlmload_t *vlmload_open(const vlmload_config_t *cfg, char *err,
                                       size_t errlen);
/* The next pack, in the same buffers each call (with cfg.prefetch or
 * cfg.hold, in one of prefetch + hold sets, in turn): the hand-off
 * symbol. */
VLMLOAD_EXTERN vlm_batch_t *vlmload_next(vlmload_t *loader);
VLMLOAD_EXTERN void vlmload_close(vlmload_t *loader);

/* Samples of b that are not exactly what their keys imply (tokens, labels,
 * positions, tiles and flags or patch rows and grid rows, all in place),
 * plus 1 when the batch's counts do not add up; 0 for an intact batch. */
VLMLOAD_EXTERN int64_t vlmload_check(const vlmload_t *loader,
                                     const vlm_batch_t *b);
/* Samples this loader has put into packs so far. */
VLMLOAD_EXTERN int64_t vlmload_produced(const vlmload_t *loader);

#ifdef __cplusplus
}
#endif
#endif
