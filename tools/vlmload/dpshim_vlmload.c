/* libdpshim_vlmload.so, the reference VLM loader's adapter: vlmload_next()
 * interposed on the public API (<dpshim/adapter.h>, <dpshim/vlm.h>), like
 * any third-party adapter; preloaded beside libdpshim.so (dpshim-run
 * --adapter vlmload). Each layout is described by its pointers, as a user
 * with such batches would. */
#include "dpshim/adapter.h"
#include "dpshim/vlm.h"
#include "vlmload.h"

static dpshim_next_t real_next = DPSHIM_NEXT_INIT("vlmload_next");

static void balance_internvl(vlm_batch_t *p) {
  vlm_internvl_t *v = &p->internvl;
  size_t tile = 3 * (size_t)v->tile_size * (size_t)v->tile_size;
  dpshim_internvl_batch_t b = {
      .nsamples = p->nsamples, .capacity_samples = p->capacity_samples,
      .cu_lengths = p->cu_lengths, .capacity_tokens = p->capacity_tokens,
      .tokens = v->tokens, .labels = v->labels,
      .position_ids = v->position_ids, .loss_weight = v->loss_weight,
      .ntiles = v->ntiles, .capacity_tiles = v->capacity_tiles,
      .imgs = v->imgs, .tile_bytes = tile * sizeof *v->imgs,
      .image_flags = v->image_flags, .num_image_token = v->num_image_token,
      .context_token = VLMLOAD_INTERNVL_CONTEXT, .dummy_tiles = 1,
      .keys = p->keys};
  dpshim_balance_internvl(&b);
  p->nsamples = b.nsamples;
  v->ntiles = b.ntiles;
}

static dpshim_qwen_media_t media(vlm_qwen_media_t *m, int64_t pad) {
  return (dpshim_qwen_media_t){.rows = m->rows,
                               .capacity_rows = m->capacity_rows,
                               .grid_thw = m->grid_thw, .count = m->count,
                               .capacity = m->capacity, .pad_token = pad};
}

static void balance_qwen(vlm_batch_t *p) {
  vlm_qwen_t *q = &p->qwen;
  dpshim_qwen_batch_t b = {
      .nsamples = p->nsamples, .capacity_samples = p->capacity_samples,
      .cu_lengths = p->cu_lengths, .capacity_tokens = p->capacity_tokens,
      .tokens = q->tokens, .labels = q->labels, .attn_mask = q->attn_mask,
      .max_lengths = &q->max_lengths,
      .row_bytes = VLMLOAD_QWEN_ROW * sizeof(float),
      .merge = VLMLOAD_QWEN_MERGE,
      .images = media(&q->images, VLMLOAD_QWEN_IMAGE_PAD),
      .videos = media(&q->videos, VLMLOAD_QWEN_VIDEO_PAD), .keys = p->keys,
      .video_frames_apart = p->layout == VLMLOAD_QWEN3VL};
  dpshim_balance_qwen(&b);
  p->nsamples = b.nsamples;
  q->images.count = b.images.count;
  q->videos.count = b.videos.count;
}

VLMLOAD_EXTERN vlm_batch_t *vlmload_next(vlmload_t *loader) {
  vlm_batch_t *(*next)(vlmload_t *);
  DPSHIM_NEXT(real_next, next);
  vlm_batch_t *p = next ? next(loader) : NULL;
  if (p && p->layout == VLMLOAD_INTERNVL) balance_internvl(p);
  else if (p) balance_qwen(p);
  return p;
}
