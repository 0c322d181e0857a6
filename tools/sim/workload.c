/* The packs reftrain's ranks would draw, and their emulated compute times.
 *
 * Each DP slot gets its own libpackload loader with the run's (profile,
 * lengths, seed, slot, slots), exactly as reftrain opens it, so at a DP size
 * the demo also ran, the simulator sees the very same samples. The loader
 * runs lengths-only (no token payloads): at 4096 slots the payloads would be
 * half a billion tokens per step. Slots are drawn one at a time, all hand-offs
 * each, so only one loader's buffers exist at once. */
#include <stdlib.h>
#include <string.h>

#include "../lengthgen.h"
#include "../emu/emu.h"
#include "packload.h"
#include "sim.h"

/* A growable array of lengths. */
typedef struct lens {
  int64_t *v;
  int64_t n, cap;
} lens_t;

static int lens_push(lens_t *l, const int32_t *cu, int32_t n) {
  if (l->n + n > l->cap) {
    int64_t want = 2 * (l->n + n) + 1024;
    int64_t *p = realloc(l->v, (size_t)want * sizeof *p);
    if (!p) return -1;
    l->v = p;
    l->cap = want;
  }
  for (int32_t i = 0; i < n; i++) l->v[l->n++] = cu[i + 1] - cu[i];
  return 0;
}

static packload_t *open_slot(const sim_config_t *c, int32_t slot,
                             int32_t slots, char *err, size_t errlen) {
  packload_config_t cfg = packload_config_default();
  cfg.profile = c->profile;
  cfg.lengths_file = c->lengths;
  cfg.headroom = c->headroom;
  cfg.seed = c->seed;
  cfg.slot = slot;
  cfg.slots = slots;
  cfg.lengths_only = 1;
  return packload_open(&cfg, err, errlen);
}

/* Slot-major: every slot's lengths over all hand-offs; count[d * H + h]. */
static int draw_slots(const sim_config_t *c, int32_t slots, int64_t handoffs,
                      lens_t *all, int64_t *count, char *err, size_t errlen) {
  for (int32_t d = 0; d < slots; d++) {
    packload_t *pl = open_slot(c, d, slots, err, errlen);
    if (!pl) return -1;
    for (int64_t h = 0; h < handoffs; h++) {
      packload_batch_t *b = packload_next(pl);
      count[(int64_t)d * handoffs + h] = b->nsamples;
      if (lens_push(all, b->cu_seqlens, b->nsamples) < 0) {
        packload_close(pl);
        snprintf(err, errlen, "out of memory for the lengths");
        return -1;
      }
    }
    packload_close(pl);
  }
  return 0;
}

/* Hand-off-major, grouped by slot: the order the shim gathers samples in. */
static int arrange(const lens_t *all, const int64_t *count, int32_t slots,
                   sim_workload_t *w) {
  int64_t H = w->handoffs, n = all->n;
  int64_t *slot_at = calloc((size_t)slots + 1, sizeof *slot_at);
  w->first = calloc((size_t)H + 1, sizeof *w->first);
  w->len = malloc((size_t)n * sizeof *w->len + 1);
  w->origin = malloc((size_t)n * sizeof *w->origin + 1);
  w->seconds = malloc((size_t)n * sizeof *w->seconds + 1);
  if (!slot_at || !w->first || !w->len || !w->origin || !w->seconds) {
    free(slot_at);
    return -1;
  }
  for (int32_t d = 0; d < slots; d++) {
    slot_at[d + 1] = slot_at[d];
    for (int64_t h = 0; h < H; h++) slot_at[d + 1] += count[(int64_t)d * H + h];
  }
  int64_t k = 0;
  for (int64_t h = 0; h < H; h++) {
    w->first[h] = k;
    for (int32_t d = 0; d < slots; d++) {
      int64_t m = count[(int64_t)d * H + h];
      memcpy(w->len + k, all->v + slot_at[d], (size_t)m * sizeof *w->len);
      for (int64_t i = 0; i < m; i++) w->origin[k + i] = d;
      slot_at[d] += m;
      k += m;
    }
  }
  w->first[H] = k;
  free(slot_at);
  return 0;
}

/* reftrain's emulated seconds of each sample alone: a pack's time is the sum
 * of its samples' (tiles, tokens and the per-sample cost all add up). */
static void sample_seconds(const sim_config_t *c, sim_workload_t *w) {
  const emu_model_t *m = &c->model;
  for (int64_t i = 0; i < w->first[w->handoffs]; i++) {
    int32_t cu[2] = {0, (int32_t)w->len[i]};
    w->seconds[i] = emu_pack_seconds(m, cu, 1);
  }
}

int sim_workload_draw(const sim_config_t *c, int32_t slots, int64_t handoffs,
                      sim_workload_t *w, char *err, size_t errlen) {
  memset(w, 0, sizeof *w);
  w->slots = slots;
  w->handoffs = handoffs;
  const lengthgen_profile_t *p = lengthgen_profile_find(c->profile, err, errlen);
  if (!p) return -1;
  w->pack = p->pack;
  lens_t all = {0};
  int64_t *count = calloc((size_t)slots * (size_t)handoffs, sizeof *count);
  int rc = count ? draw_slots(c, slots, handoffs, &all, count, err, errlen) : -1;
  if (!count) snprintf(err, errlen, "out of memory for the sample counts");
  if (rc == 0 && (rc = arrange(&all, count, slots, w)) < 0)
    snprintf(err, errlen, "out of memory for %lld samples", (long long)all.n);
  free(all.v);
  free(count);
  if (rc < 0) {
    sim_workload_free(w);
    return -1;
  }
  sample_seconds(c, w);
  return 0;
}

void sim_workload_free(sim_workload_t *w) {
  free(w->first);
  free(w->len);
  free(w->origin);
  free(w->seconds);
  memset(w, 0, sizeof *w);
}

double sim_noise(const sim_config_t *c, int32_t rank, int64_t step,
                 int32_t micro) {
  return emu_noise(&c->model, c->seed, rank, step, micro);
}
