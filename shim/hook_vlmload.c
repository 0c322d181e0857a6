/* The reference VLM loader's adapter: vlmload_next() interposed on the
 * public API (<dpshim/adapter.h>, <dpshim/vlm.h>), like any third-party
 * adapter; linked into libdpshim.so so that one preload does it. Each
 * layout is described by its pointers, as a user with such batches would. */
#include "dpshim/adapter.h"
#include "dpshim/vlm.h"
#include "vlmload.h"

static dpshim_next_t real_next = DPSHIM_NEXT_INIT("vlmload_next");

static void balance_internvl(vlm_batch_t *p) {
  vlm_internvl_t *v = &p->internvl;
  size_t tile = 3 * (size_t)v->tile_size * (size_t)v->tile_size;
  dpshim_internvl_batch_t b = {
      p->nsamples, p->capacity_samples, p->cu_lengths, p->capacity_tokens,
      v->tokens, v->labels, v->position_ids, v->loss_weight, v->ntiles,
      v->capacity_tiles, v->imgs, tile * sizeof *v->imgs, v->image_flags,
      v->num_image_token, VLMLOAD_INTERNVL_CONTEXT, 1, p->keys};
  dpshim_balance_internvl(&b);
  p->nsamples = b.nsamples;
  v->ntiles = b.ntiles;
}

static dpshim_qwen_media_t media(vlm_qwen_media_t *m, int64_t pad) {
  return (dpshim_qwen_media_t){m->rows, m->capacity_rows, m->grid_thw,
                               m->count, m->capacity, pad};
}

static void balance_qwen(vlm_batch_t *p) {
  vlm_qwen_t *q = &p->qwen;
  dpshim_qwen_batch_t b = {
      p->nsamples, p->capacity_samples, p->cu_lengths, p->capacity_tokens,
      q->tokens, q->labels, q->attn_mask, &q->max_lengths,
      VLMLOAD_QWEN_ROW * sizeof(float), VLMLOAD_QWEN_MERGE,
      media(&q->images, VLMLOAD_QWEN_IMAGE_PAD),
      media(&q->videos, VLMLOAD_QWEN_VIDEO_PAD), p->keys};
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
