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
  free(p->load);
  free(p->total);
  free(p->part);
  dpshim__vit_planner_init(p);
}

static int reserve(dpshim__vit_planner_t *p, size_t images, size_t ranks) {
  size_t n = images + ranks; /* at most an image each and one more a rank */
  if (n > p->samples_cap) {
    n += n / 2; /* room to grow, as the solver's (solver/arena.c) */
    dpshim_sample_t *s = realloc(p->samples, n * sizeof *s);
    if (!s) return DPSHIM_ENOMEM;
    p->samples = s;
    p->samples_cap = n;
  }
  if (ranks > p->ranks_cap) {
    double *load = realloc(p->load, ranks * sizeof *load);
    if (load) p->load = load;
    dpshim_sample_t *total = realloc(p->total, ranks * sizeof *total);
    if (total) p->total = total;
    dpshim__vit_part_t *part = realloc(p->part, ranks * sizeof *part);
    if (part) p->part = part;
    if (!load || !total || !part) return DPSHIM_ENOMEM;
    p->ranks_cap = ranks;
  }
  return 0;
}

static void add_image(dpshim_sample_t *smp, const dpshim__vit_image_t *im) {
  int64_t sq = im->patches_sq ? im->patches_sq : im->patches * im->patches;
  smp->len += im->patches;
  smp->bytes += im->in_bytes + im->out_bytes;
  smp->patches_sq += sq;
}

static double image_cost(const dpshim__vit_settings_t *s,
                         const dpshim__vit_image_t *im) {
  dpshim_sample_t one = {0};
  add_image(&one, im);
  return s->model.a * (double)one.patches_sq +
         s->model.b * (double)one.len + s->model.c;
}

/* Rank r's images as the solver's samples from p->samples[n]; returns the
 * next free index. Where `all`, an image a sample. Else its first images
 * that add up to what the rank holds above the mean (excess) are a sample
 * each, and the rest one sample (a rank at or below the mean: all of
 * them), whose per-image constant c but one goes into p->load[r], the
 * rank's history. The rest is the rank's total less those first images:
 * they alone are read again. */
static int64_t rank_samples(dpshim__vit_planner_t *p,
                            const dpshim__vit_group_t *g,
                            const dpshim__vit_settings_t *s, int32_t r,
                            double excess, int all, int64_t n) {
  dpshim__vit_part_t *part = &p->part[r];
  int64_t count = g->first[r + 1] - g->first[r];
  dpshim_sample_t given_sum = {0};
  double given = 0;
  *part = (dpshim__vit_part_t){n, 0, -1};
  for (; part->given < count && (all || given < excess); part->given++) {
    const dpshim__vit_image_t *im = &g->images[g->first[r] + part->given];
    given += image_cost(s, im);
    p->samples[n] = (dpshim_sample_t){.origin = r};
    add_image(&p->samples[n++], im);
    add_image(&given_sum, im);
  }
  if (part->given < count) {
    const dpshim_sample_t *t = &p->total[r];
    part->rest = n;
    p->samples[n++] = (dpshim_sample_t){
        .len = t->len - given_sum.len, .bytes = t->bytes - given_sum.bytes,
        .origin = r, .patches_sq = t->patches_sq - given_sum.patches_sq};
    for (int64_t k = part->given + 1; k < count; k++) p->load[r] += s->model.c;
  }
  if (count == 0) /* a placeholder (fill_samples) */
    p->samples[n++] = (dpshim_sample_t){.origin = r};
  return n;
}

/* The group's images as the solver's samples; returns how many and sets
 * *history when some rank's history is not 0.
 *
 * Both exchanges' bytes move with an image. A rank without images holds a
 * placeholder of no patches and no bytes: it costs the model's c, the
 * per-image constant, wherever it goes (a rank without images looks c
 * busier than it is), and where it lands moves nothing.
 *
 * Planning every image of a large group costs several passes over all of
 * them (~10 ms for the frames of 4096 ranks' videos), on the encoder
 * call's critical path, while a rank gives at most what it holds above the
 * mean. So above DPSHIM__VIT_EVERY_IMAGE_RANKS ranks only the images a
 * rank may give are placed one by one (see rank_samples); the rest of a
 * rank is one sample, exact in patches (the cap holds) and cost (with the
 * history). Should such a sample move, its images go together: still a
 * plan, a coarse one. At most that many ranks, every image is a sample and
 * the exact searches see them all. One pass reads every image (each rank's
 * load and total); the second reads only the images placed one by one. */
static int64_t fill_samples(dpshim__vit_planner_t *p,
                            const dpshim__vit_group_t *g,
                            const dpshim__vit_settings_t *s, int *history) {
  double sum = 0;
  for (int32_t r = 0; r < g->ranks; r++) {
    p->load[r] = 0;
    p->total[r] = (dpshim_sample_t){0};
    for (int64_t i = g->first[r]; i < g->first[r + 1]; i++) {
      p->load[r] += image_cost(s, &g->images[i]);
      add_image(&p->total[r], &g->images[i]);
    }
    sum += p->load[r];
  }
  double mean = sum / g->ranks;
  int all = g->ranks <= DPSHIM__VIT_EVERY_IMAGE_RANKS;
  int64_t n = 0;
  *history = 0;
  for (int32_t r = 0; r < g->ranks; r++) {
    double excess = p->load[r] - mean;
    p->load[r] = 0;
    n = rank_samples(p, g, s, r, excess, all, n);
    *history |= p->load[r] > 0;
  }
  return n;
}

static int copy_dest(const dpshim__vit_planner_t *p,
                     const dpshim__vit_group_t *g, int apply, int32_t *dest) {
  int64_t moved = 0;
  for (int32_t r = 0; r < g->ranks; r++) {
    const dpshim__vit_part_t *part = &p->part[r];
    for (int64_t i = g->first[r], k = 0; i < g->first[r + 1]; i++, k++) {
      int64_t smp = k < part->given ? part->first + k : part->rest;
      dest[i] = apply ? p->plan.dest[smp] : r;
      moved += dest[i] != r;
    }
  }
  return moved > 0;
}

int dpshim__vit_plan(dpshim__vit_planner_t *p, const dpshim__vit_group_t *g,
                     const dpshim__vit_settings_t *s, int32_t *dest) {
  int64_t images = g->first[g->ranks];
  p->skip_reason = "no-images";
  if (images == 0) return 0;
  if (reserve(p, (size_t)images, (size_t)g->ranks) < 0) return DPSHIM_ENOMEM;
  int history;
  int64_t n = fill_samples(p, g, s, &history);
  dpshim_plan_input_t in = {.ranks = g->ranks,
                            .nsamples = n,
                            .samples = p->samples,
                            .history = history ? p->load : NULL,
                            .history_len = history ? g->ranks : 0,
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
