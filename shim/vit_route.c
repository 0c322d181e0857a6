/* The ViT balance's plan and routes; see vit_route.h. */
#include "vit_route.h"

#include <stdlib.h>
#include <string.h>

#include "policy.h"

void dpshim__vit_planner_init(dpshim__vit_planner_t *p) {
  memset(p, 0, sizeof *p);
  dpshim_plan_init(&p->plan);
}

void dpshim__vit_planner_free(dpshim__vit_planner_t *p) {
  dpshim_plan_free(&p->plan);
  free(p->samples);
  dpshim__vit_planner_init(p);
}

static int64_t empty_ranks(const dpshim__vit_group_t *g) {
  int64_t n = 0;
  for (int32_t r = 0; r < g->ranks; r++) n += g->first[r + 1] == g->first[r];
  return n;
}

/* The images as samples (both exchanges' bytes move with them), then one
 * placeholder of no patches and no bytes on each rank without an image:
 * the solver wants a sample on every rank. A placeholder costs the model's
 * c, the per-image constant, wherever it goes: a rank without images looks
 * c busier than it is, and where the placeholder lands moves nothing. */
static int64_t fill_samples(dpshim__vit_planner_t *p,
                            const dpshim__vit_group_t *g) {
  int64_t n = 0;
  for (int32_t r = 0; r < g->ranks; r++) {
    for (int64_t i = g->first[r]; i < g->first[r + 1]; i++) {
      const dpshim__vit_image_t *im = &g->images[i];
      int64_t sq = im->patches_sq ? im->patches_sq : im->patches * im->patches;
      p->samples[n++] = (dpshim_sample_t){.len = im->patches,
                                          .bytes = im->in_bytes + im->out_bytes,
                                          .origin = r,
                                          .patches_sq = sq};
    }
    if (g->first[r + 1] == g->first[r])
      p->samples[n++] = (dpshim_sample_t){.origin = r};
  }
  return n;
}

static int reserve(dpshim__vit_planner_t *p, size_t n) {
  if (n <= p->samples_cap) return 0;
  dpshim_sample_t *s = realloc(p->samples, n * sizeof *s);
  if (!s) return DPSHIM_ENOMEM;
  p->samples = s;
  p->samples_cap = n;
  return 0;
}

/* dest of the real images: placeholders come after each rank's images, so
 * the k-th sample of rank r is its k-th image. */
static int copy_dest(const dpshim__vit_planner_t *p,
                     const dpshim__vit_group_t *g, int apply, int32_t *dest) {
  int64_t n = 0, moved = 0;
  for (int32_t r = 0; r < g->ranks; r++) {
    for (int64_t i = g->first[r]; i < g->first[r + 1]; i++, n++) {
      dest[i] = apply ? p->plan.dest[n] : r;
      moved += dest[i] != r;
    }
    n += g->first[r + 1] == g->first[r];
  }
  return moved > 0;
}

int dpshim__vit_plan(dpshim__vit_planner_t *p, const dpshim__vit_group_t *g,
                     const dpshim__vit_settings_t *s, int32_t *dest) {
  int64_t images = g->first[g->ranks];
  p->skip_reason = "no-images";
  if (images == 0) return 0;
  int64_t n = images + empty_ranks(g);
  if (reserve(p, (size_t)n) < 0) return DPSHIM_ENOMEM;
  n = fill_samples(p, g);
  dpshim_plan_input_t in = {.ranks = g->ranks,
                            .nsamples = n,
                            .samples = p->samples,
                            .model = {0, s->model.b, s->model.c,
                                      s->model.a, 0},
                            .cap_ratio = s->cap_ratio,
                            .threshold = s->threshold,
                            .algo = s->algo};
  int rc = dpshim_plan_solve(&in, &p->plan);
  if (rc < 0) return rc;
  p->skip_reason = dpshim__policy_skip(&p->plan, p->samples, n, g->ranks,
                                       s->algo, 1);
  int moved = copy_dest(p, g, p->skip_reason == NULL, dest);
  if (!moved && !p->skip_reason) p->skip_reason = "no-move"; /* placeholders */
  return moved;
}

void dpshim__vit_counts(const dpshim__vit_group_t *g, const int32_t *dest,
                        int32_t me, dpshim__vit_counts_t *c) {
  size_t bytes = (size_t)g->ranks * sizeof(int64_t);
  memset(c->send_in, 0, bytes);
  memset(c->recv_in, 0, bytes);
  memset(c->send_out, 0, bytes);
  memset(c->recv_out, 0, bytes);
  for (int32_t r = 0; r < g->ranks; r++) {
    for (int64_t i = g->first[r]; i < g->first[r + 1]; i++) {
      const dpshim__vit_image_t *im = &g->images[i];
      int32_t to = dest[i];
      if (to == r) continue; /* encoded at home: nothing travels */
      if (r == me) c->send_in[to] += im->in_bytes, c->recv_out[to] += im->out_bytes;
      if (to == me) c->recv_in[r] += im->in_bytes, c->send_out[r] += im->out_bytes;
    }
  }
}
