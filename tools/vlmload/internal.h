/* vlmload's parts: the sample shapes (shape.c), the layouts' token and
 * pixel content (content.c), and the loader itself (vlmload.c). */
#ifndef VLMLOAD_INTERNAL_H
#define VLMLOAD_INTERNAL_H

#include "../lengthgen.h"
#include "../mix.h"
#include "vlmload.h"

#define VLM_MAX_IMAGES 16
#define VLM_MAX_VIDEOS 2
#define VLM_MIN_TEXT 64 /* text tokens of any sample: bounds dummy tiles */
#define VLM_CARRY_MAX 32     /* samples waiting for a later pack */

/* One image or video: (t, h, w) in patches; an InternVL image is t tiles. */
typedef struct vlm_media {
  int32_t t, h, w;
} vlm_media_t;

typedef struct vlm_shape {
  int64_t text;
  int32_t nimages, nvideos;
  vlm_media_t image[VLM_MAX_IMAGES], video[VLM_MAX_VIDEOS];
  int64_t len;        /* tokens, image tokens included */
  int64_t rows;       /* tiles (the dummy included) or image patch rows */
  int64_t video_rows; /* Qwen: video patch rows */
} vlm_shape_t;

/* ---- shape.c ---- */
uint64_t vlm__key(uint64_t seed, uint64_t id);
/* What (seed, id) implies; len <= cfg->pack_tokens. */
void vlm__shape(const vlmload_config_t *cfg, uint64_t key, vlm_shape_t *s);

/* ---- pack.c: which samples make a slot's next pack ---- */
typedef struct vlm_carried {
  uint64_t id;
  vlm_shape_t shape;
} vlm_carried_t;

typedef struct vlm_packer {
  const vlmload_config_t *cfg; /* the slot's; outlives the packer */
  uint64_t next_index;
  vlm_carried_t carry[VLM_CARRY_MAX];
  int ncarry;
} vlm_packer_t;

/* Called for each sample of a pack, in pack order. */
typedef void (*vlm_place_fn)(void *arg, uint64_t id, const vlm_shape_t *s);

void vlm__packer_init(vlm_packer_t *p, const vlmload_config_t *cfg);
/* The id of the slot's index-th draw: two slots never share a sample. */
uint64_t vlm__id(int32_t slot, uint64_t index);
/* Places the next pack's samples: no more than cfg->pack_tokens tokens. */
void vlm__pack_next(vlm_packer_t *p, vlm_place_fn place, void *arg);

/* ---- content.c: one sample's content, written at the given pointers ---- */
typedef struct vlm_sample_out {
  int64_t *tokens, *labels;
  int64_t *position_ids; /* InternVL */
  float *loss_weight;    /* InternVL */
  uint8_t *attn_mask;    /* Qwen */
  float *rows;           /* tiles or image patch rows */
  int64_t *flags;        /* InternVL: per tile */
  int32_t *grids;        /* Qwen: image grid rows */
  float *video_rows;     /* Qwen */
  int32_t *video_grids;  /* Qwen */
} vlm_sample_out_t;

/* Floats per row (a tile or a patch row) of the layout. */
size_t vlm__row_floats(const vlmload_config_t *cfg);
/* Bytes the sample takes in the layout's buffers, every field's. */
int64_t vlm__sample_bytes(const vlmload_config_t *cfg, const vlm_shape_t *s);
void vlm__write(const vlmload_config_t *cfg, uint64_t key,
                const vlm_shape_t *s, const vlm_sample_out_t *out);

#endif
