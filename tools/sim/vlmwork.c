/* VLM packs (--layout): what vlmtrain's ranks would draw, by shape only.
 *
 * Each DP slot packs as libvlmload.so does, with vlmload's own shape and
 * packing code (tools/vlmload/shape.c, pack.c: linked, not copied), so at a
 * DP size vlmtrain also ran, the simulator sees the very same samples; no
 * token or pixel is written. Per sample:
 *   len      its tokens, image tokens included (InternVL: num_image_token
 *            per tile, Qwen: t*h*w / 4 pads per image or video, markers);
 *   vit      the vision encoder's seconds for its images (emu), as vlmtrain
 *            charges them to the rank that holds the sample: InternVL's
 *            tiles, the dummy tile of a text-only sample included; Qwen's
 *            images and videos;
 *   patches  the encoder's tokens before the merge (InternVL: 4 x
 *            num_image_token per tile; Qwen: t*h*w), and patches_sq the
 *            squares of what the encoder attends over at once: a tile, an
 *            image, a video (Qwen3-VL: each of its frames);
 *   bytes    what the sample takes in the layout's buffers (vlmload's);
 *   images   one by one for the ViT balance (sim_image_t): each tile, or
 *            each image and video (a Qwen3-VL video's frames apart), with
 *            its patches and encoder seconds; they sum to patches and vit. */
#include "../vlmload/internal.h"
#include "sim.h"

typedef struct draw {
  const sim_config_t *c;
  const vlmload_config_t *cfg;
  sim_drawn_list_t *all;
  int64_t placed;
  int oom;
} draw_t;

static void push_image(draw_t *d, int64_t patches, int64_t patches_sq,
                       double vit) {
  sim_image_t im = {.patches = patches, .patches_sq = patches_sq, .vit = vit};
  if (sim_drawn_push_image(d->all, &im) < 0) d->oom = 1;
}

/* Tiles apart, each 4 x num_image_token patches (1024 at 448 px). The
 * sample's encoder seconds are its tiles' as one call (emu's, as vlmtrain
 * charges them); each tile's, the same call's share. */
static void internvl_vision(draw_t *d, const vlm_shape_t *s,
                            sim_vision_t *out) {
  int64_t tile = 4 * (int64_t)d->cfg->num_image_token;
  out->patches = s->rows * tile;
  out->patches_sq = s->rows * tile * tile;
  out->vit = emu_vit_seconds(&d->c->model, (int32_t)s->rows, 0, 0);
  out->images = s->nimages;
  out->units = s->rows;
  double one = emu_vit_seconds(&d->c->model, 1, 0, 0);
  for (int64_t k = 0; k < s->rows; k++) push_image(d, tile, tile * tile, one);
}

/* An image or video whole; a Qwen3-VL video's frames apart, each an image
 * for the ViT balance as libdpshim_vit.so shows them. */
static void qwen_medium(draw_t *d, const vlm_media_t *m, int video,
                        sim_vision_t *out) {
  int64_t frame = (int64_t)m->h * m->w, all = m->t * frame;
  int apart = video && d->cfg->layout == VLMLOAD_QWEN3VL;
  double vit = emu_vit_seconds(&d->c->model, m->t, m->h, m->w);
  int64_t sq = apart ? m->t * frame * frame : all * all;
  out->patches += all;
  out->patches_sq += sq;
  out->vit += vit;
  out->images++;
  out->units += apart ? m->t : 1;
  if (!apart) {
    push_image(d, all, sq, vit);
    return;
  }
  double one = emu_vit_seconds(&d->c->model, 1, m->h, m->w);
  for (int32_t t = 0; t < m->t; t++) push_image(d, frame, frame * frame, one);
}

static void place(void *arg, uint64_t id, const vlm_shape_t *s) {
  draw_t *d = arg;
  (void)id;
  sim_vision_t out = {.bytes = vlm__sample_bytes(d->cfg, s)};
  if (d->cfg->layout == VLMLOAD_INTERNVL) {
    internvl_vision(d, s, &out);
  } else {
    for (int32_t k = 0; k < s->nimages; k++)
      qwen_medium(d, &s->image[k], 0, &out);
    for (int32_t k = 0; k < s->nvideos; k++)
      qwen_medium(d, &s->video[k], 1, &out);
  }
  d->placed++;
  if (sim_drawn_push(d->all, s->len, &out) < 0) d->oom = 1;
}

int sim_vlm_draw_slot(const sim_config_t *c, int32_t slot, int32_t slots,
                      int64_t handoffs, sim_drawn_list_t *all,
                      int64_t *count) {
  vlmload_config_t cfg = c->vlm;
  cfg.seed = c->seed;
  cfg.slot = slot;
  cfg.slots = slots;
  cfg.headroom = c->headroom;
  vlm_packer_t p;
  vlm__packer_init(&p, &cfg);
  draw_t d = {.c = c, .cfg = &cfg, .all = all};
  for (int64_t h = 0; h < handoffs && !d.oom; h++) {
    d.placed = 0;
    vlm__pack_next(&p, place, &d);
    count[h] = d.placed;
  }
  return d.oom ? -1 : 0;
}
