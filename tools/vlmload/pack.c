/* Packing by shape alone: which samples go into a slot's next pack. Shared
 * by the loader (which writes each placed sample's content) and dpshim-sim
 * (which only counts its tokens and images), so that both see the very same
 * packs. First-fit, one pack per call: samples that do not fit wait for the
 * next pack. */
#include "internal.h"

void vlm__packer_init(vlm_packer_t *p, const vlmload_config_t *cfg) {
  *p = (vlm_packer_t){.cfg = cfg};
}

uint64_t vlm__id(int32_t slot, uint64_t index) {
  return ((uint64_t)slot << VLM_ID_INDEX_BITS) | index;
}

static int64_t place_carried(vlm_packer_t *p, int64_t room,
                             vlm_place_fn place, void *arg) {
  int kept = 0;
  for (int i = 0; i < p->ncarry; i++) {
    vlm_carried_t *c = &p->carry[i];
    if (c->shape.len <= room) {
      place(arg, c->id, &c->shape);
      room -= c->shape.len;
    } else {
      p->carry[kept++] = *c;
    }
  }
  p->ncarry = kept;
  return room;
}

void vlm__pack_next(vlm_packer_t *p, vlm_place_fn place, void *arg) {
  const vlmload_config_t *cfg = p->cfg;
  int64_t room = place_carried(p, cfg->pack_tokens, place, arg);
  while (room >= VLM_MIN_TEXT && p->ncarry < VLM_CARRY_MAX) {
    vlm_carried_t c = {vlm__id(cfg->slot, p->next_index++), {0}};
    vlm__shape(cfg, vlm__key(cfg->seed, c.id), &c.shape);
    if (c.shape.len <= room) {
      place(arg, c.id, &c.shape);
      room -= c.shape.len;
    } else {
      p->carry[p->ncarry++] = c;
    }
  }
}
