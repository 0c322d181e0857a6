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
  return ((uint64_t)slot << VLMLOAD_SLOT_SHIFT) | index;
}

/* What a pack still has room for: tokens, and image rows (tiles or image
 * patch rows) under cfg.image_rows. */
typedef struct room {
  int64_t tokens, rows;
} room_t;

static room_t empty_pack(const vlmload_config_t *c) {
  return (room_t){c->pack_tokens, c->image_rows > 0 ? c->image_rows
                                                    : INT64_MAX};
}

/* Places the sample when it fits the room left, taking what it uses. */
static int place_if_fits(const vlm_carried_t *c, room_t *room,
                         vlm_place_fn place, void *arg) {
  if (c->shape.len > room->tokens || c->shape.rows > room->rows) return 0;
  place(arg, c->id, &c->shape);
  room->tokens -= c->shape.len;
  room->rows -= c->shape.rows;
  return 1;
}

/* Whether any new sample could still fit: an InternVL sample holds a tile
 * at least (its dummy), a Qwen text-only sample no image row. */
static int room_left(const vlmload_config_t *c, room_t room) {
  return room.tokens >= VLM_MIN_TEXT &&
         room.rows >= (c->layout == VLMLOAD_INTERNVL ? 1 : 0);
}

static void place_carried(vlm_packer_t *p, room_t *room, vlm_place_fn place,
                          void *arg) {
  int kept = 0;
  for (int i = 0; i < p->ncarry; i++)
    if (!place_if_fits(&p->carry[i], room, place, arg))
      p->carry[kept++] = p->carry[i];
  p->ncarry = kept;
}

void vlm__pack_next(vlm_packer_t *p, vlm_place_fn place, void *arg) {
  const vlmload_config_t *cfg = p->cfg;
  room_t room = empty_pack(cfg);
  place_carried(p, &room, place, arg);
  while (room_left(cfg, room) && p->ncarry < VLM_CARRY_MAX) {
    vlm_carried_t c = {vlm__id(cfg->slot, p->next_index++), {0}};
    vlm__shape(cfg, vlm__key(cfg->seed, c.id), &c.shape);
    if (!place_if_fits(&c, &room, place, arg)) p->carry[p->ncarry++] = c;
  }
}
