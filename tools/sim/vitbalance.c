/* The ViT-level balance ("+vit" algorithms), as the shim runs it at each
 * encoder call (DPSHIM_VIT_BALANCE=1): every rank's images, where the
 * LLM-level plan put their samples, are gathered and planned by
 * shim/vit_route.c's dpshim__vit_plan() (linked, not copied: the same
 * samples, placeholders and skip rules), with the ViT cost model fitted in
 * warm-up, the patch cap and the trigger threshold; the inputs go to the
 * encoding rank and the embeddings come back, and in the backward the
 * embeddings' gradients go to the encoding rank.
 *
 * Modelled: the plan (real solver, its CPU time measured), which rank encodes
 * what, one allgather of the images' sizes per call (a 48-byte header per
 * rank and 72 B per image, as the shim's), three alltoallvs per call
 * (inputs, embeddings, embedding gradients) priced as the LLM level's
 * (with hosts, their part across hosts too: the plan, as the shim's, is not
 * told the hosts), and the copies in and out of them. Not modelled: the patch gradients' way
 * back (only when the trainer asks for them; vlmtrain does not), the
 * alltoallv's headers of byte counts, overlap of any exchange with compute,
 * and the memory the received inputs take. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../timeutil.h"
#include "dpshim/fit.h"
#include "policy.h"
#include "sim.h"
#include "vit_route.h"


struct sim_vit {
  const sim_config_t *c;
  const sim_workload_t *w;
  int32_t P;
  dpshim__vit_planner_t planner;
  dpshim__vit_image_t *images; /* one call's, grouped by the rank holding it */
  int64_t *image_of;           /* [images] its index in w->image */
  int32_t *dest;               /* [images] the rank that encodes it */
  int64_t *first, *fill;       /* [P + 1] */
  double *sent_in, *recv_in, *sent_out, *recv_out; /* [P] bytes */
  int32_t *partners_out, *partners_in, *stamp, *last_src; /* [P] */
  /* With hosts: the inputs' (sent to the encoding rank) and the
   * embeddings' (counted the same way: max(out, in) is the same both
   * ways) */
  sim_cross_t cross_in, cross_out;
};

/* The most images of any hand-off: the scratch's size. */
static int64_t most_images(const sim_workload_t *w) {
  int64_t most = 0;
  for (int64_t h = 0; h < w->handoffs; h++) {
    int64_t n = w->image_first[w->first[h + 1]] - w->image_first[w->first[h]];
    if (n > most) most = n;
  }
  return most;
}

sim_vit_t *sim_vit_new(const sim_config_t *c, const sim_workload_t *w,
                       int32_t ranks) {
  sim_vit_t *v = calloc(1, sizeof *v);
  if (!v) return NULL;
  size_t n = (size_t)most_images(w) + 1, p = (size_t)ranks;
  *v = (sim_vit_t){.c = c, .w = w, .P = ranks};
  dpshim__vit_planner_init(&v->planner);
  v->images = malloc(n * sizeof *v->images);
  v->image_of = malloc(n * sizeof *v->image_of);
  v->dest = malloc(n * sizeof *v->dest);
  v->first = calloc(p + 1, sizeof *v->first);
  v->fill = calloc(p + 1, sizeof *v->fill);
  v->sent_in = calloc(p, sizeof *v->sent_in);
  v->recv_in = calloc(p, sizeof *v->recv_in);
  v->sent_out = calloc(p, sizeof *v->sent_out);
  v->recv_out = calloc(p, sizeof *v->recv_out);
  v->partners_out = calloc(p, sizeof *v->partners_out);
  v->partners_in = calloc(p, sizeof *v->partners_in);
  v->stamp = calloc(p, sizeof *v->stamp);
  v->last_src = calloc(p, sizeof *v->last_src);
  int cross = sim_cross_init(&v->cross_in, ranks, c->ranks_per_host) |
              sim_cross_init(&v->cross_out, ranks, c->ranks_per_host);
  if (v->images && v->image_of && v->dest && v->first && v->fill &&
      v->sent_in && v->recv_in && v->sent_out && v->recv_out &&
      v->partners_out && v->partners_in && v->stamp && v->last_src &&
      cross == 0)
    return v;
  sim_vit_free(v);
  return NULL;
}

void sim_vit_free(sim_vit_t *v) {
  if (!v) return;
  dpshim__vit_planner_free(&v->planner);
  free(v->images);
  free(v->image_of);
  free(v->dest);
  free(v->first);
  free(v->fill);
  free(v->sent_in);
  free(v->recv_in);
  free(v->sent_out);
  free(v->recv_out);
  free(v->partners_out);
  free(v->partners_in);
  free(v->stamp);
  free(v->last_src);
  sim_cross_free(&v->cross_in);
  sim_cross_free(&v->cross_out);
  free(v);
}

/* ---- the warm-up fit ------------------------------------------------------- */

/* Warm-up step s: one point per world rank, its slot's images (nothing
 * moves in warm-up) and its encoder seconds under its own noise. */
static void vit_points(const sim_vit_t *v, int64_t s, dpshim_fit_point_t *pts) {
  const sim_config_t *c = v->c;
  const sim_workload_t *w = v->w;
  int32_t world = v->P * c->tp;
  memset(pts, 0, (size_t)world * sizeof *pts);
  for (int32_t m = 0; m < c->micro; m++) {
    int64_t h = s * c->micro + m;
    for (int64_t i = w->first[h]; i < w->first[h + 1]; i++)
      for (int64_t j = w->image_first[i]; j < w->image_first[i + 1]; j++) {
        double len = (double)w->image[j].patches;
        for (int32_t t = 0; t < c->tp; t++) {
          int32_t rank = w->origin[i] * c->tp + t;
          dpshim_fit_point_t *p = &pts[rank];
          p->sum_len2 += (double)w->image[j].patches_sq;
          p->sum_len += len;
          p->count += 1;
          p->time += w->image[j].vit * sim_noise(c, rank, s, m);
        }
      }
  }
  for (int32_t r = 0; r < world; r++) pts[r].time *= c->time_scale / c->tp;
}

dpshim_cost_model_t sim_vit_fit(sim_vit_t *v) {
  const sim_config_t *c = v->c;
  int64_t iters = c->warmup_last - 2;
  int32_t world = v->P * c->tp;
  dpshim_cost_model_t model = {.a = 1}; /* patches^2, as the shim falls back */
  dpshim_fit_point_t *pts = calloc((size_t)iters * (size_t)world, sizeof *pts);
  if (!pts) return model;
  for (int64_t k = 0; k < iters; k++) vit_points(v, k + 2, pts + k * world);
  /* As the shim: every (rank, step) that encoded images, apart. */
  int64_t n = 0;
  for (int64_t i = 0; i < iters * world; i++)
    if (pts[i].count > 0 && pts[i].time > 0) pts[n++] = pts[i];
  dpshim_fit_input_t in = {.iters = n, .ranks = 1, .points = pts,
                           .method = DPSHIM_FIT_RANKS, .text_only = 1};
  dpshim_fit_result_t fit;
  if (dpshim_fit(&in, &fit) == 0)
    model = dpshim__policy_model_from_fit(fit.model);
  else
    fprintf(stderr, SIM_PROG ": %d ranks: ViT warm-up fit failed (%s); "
            "patches^2 per image\n", (int)v->P, n ? fit.message
                                                  : "no point with images");
  free(pts);
  return model;
}

/* ---- one encoder call ------------------------------------------------------ */

/* Hand-off h's images into v->images, grouped by the rank that holds their
 * sample, in sample order within a rank; returns how many. */
static int64_t gather_images(sim_vit_t *v, int64_t h, const int32_t *holder) {
  const sim_workload_t *w = v->w;
  int64_t first = w->first[h], n = w->first[h + 1] - first;
  memset(v->first, 0, ((size_t)v->P + 1) * sizeof *v->first);
  for (int64_t k = 0; k < n; k++)
    v->first[holder[k] + 1] +=
        w->image_first[first + k + 1] - w->image_first[first + k];
  for (int32_t r = 0; r < v->P; r++) v->first[r + 1] += v->first[r];
  memcpy(v->fill, v->first, (size_t)v->P * sizeof *v->fill);
  for (int64_t k = 0; k < n; k++)
    for (int64_t j = w->image_first[first + k];
         j < w->image_first[first + k + 1]; j++) {
      int64_t at = v->fill[holder[k]]++;
      dpshim__vit_image_t *im = &v->images[at];
      im->patches = w->image[j].patches;
      im->patches_sq = w->image[j].patches_sq;
      sim_image_bytes(v->c, im->patches, &im->in_bytes, &im->out_bytes);
      v->image_of[at] = j;
    }
  return v->first[v->P];
}

/* Plans the call solve_reps times (the plan is the same each time); the
 * median CPU time into *solve_s. 1: applied, 0: not, < 0: an error. */
static int timed_plan(sim_vit_t *v, const dpshim__vit_group_t *g,
                      const dpshim__vit_settings_t *s, double *solve_s) {
  double t[SIM_MAX_SOLVE_REPS];
  int reps = v->c->solve_reps < 1 ? 1 : v->c->solve_reps, rc = 0;
  if (reps > SIM_MAX_SOLVE_REPS) reps = SIM_MAX_SOLVE_REPS;
  for (int k = 0; k < reps && rc >= 0; k++) {
    double t0 = dpshim__tool_cpu_s();
    rc = dpshim__vit_plan(&v->planner, g, s, v->dest);
    t[k] = dpshim__tool_cpu_s() - t0;
  }
  for (int i = 1; i < reps; i++) /* insertion sort: a few reps */
    for (int j = i; j > 0 && t[j - 1] > t[j]; j--) {
      double x = t[j];
      t[j] = t[j - 1];
      t[j - 1] = x;
    }
  *solve_s = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
  return rc;
}

/* Partners of rank `from` sending to `to`: images come grouped by their
 * source, so one pass counts distinct partners. */
static void count_partner(sim_vit_t *v, int32_t from, int32_t to) {
  if (v->stamp[to] != from) v->stamp[to] = from, v->partners_out[from]++;
  if (v->last_src[to] != from) v->last_src[to] = from, v->partners_in[to]++;
}

static void reset_exchange(sim_vit_t *v) {
  size_t pb = (size_t)v->P * sizeof(double);
  size_t pi = (size_t)v->P * sizeof(int32_t);
  memset(v->sent_in, 0, pb);
  memset(v->recv_in, 0, pb);
  memset(v->sent_out, 0, pb);
  memset(v->recv_out, 0, pb);
  memset(v->partners_out, 0, pi);
  memset(v->partners_in, 0, pi);
  for (int32_t r = 0; r < v->P; r++) v->stamp[r] = v->last_src[r] = -1;
  sim_cross_reset(&v->cross_in);
  sim_cross_reset(&v->cross_out);
}

/* The call's three alltoallvs under v->dest (inputs to the encoding rank,
 * embeddings back, their gradients to the encoding rank): bytes and
 * partners per rank. */
static void tally_exchange(sim_vit_t *v) {
  reset_exchange(v);
  for (int32_t r = 0; r < v->P; r++)
    for (int64_t j = v->first[r]; j < v->first[r + 1]; j++) {
      int32_t to = v->dest[j];
      if (to == r) continue; /* encoded at home: nothing travels */
      double in = (double)v->images[j].in_bytes;
      double out = (double)v->images[j].out_bytes;
      v->sent_in[r] += in, v->recv_in[to] += in;
      v->sent_out[to] += out, v->recv_out[r] += out;
      count_partner(v, r, to);
      sim_cross_add(&v->cross_in, r, to, in);
      sim_cross_add(&v->cross_out, r, to, out);
    }
}

/* Rank r's part of the three: the bytes it copies in and out of them, its
 * partners. */
static double rank_copy(const sim_vit_t *v, int32_t r) {
  return v->sent_in[r] + v->recv_in[r] + 2 * (v->sent_out[r] + v->recv_out[r]);
}

static int32_t rank_partners(const sim_vit_t *v, int32_t r) {
  return v->partners_out[r] > v->partners_in[r] ? v->partners_out[r]
                                                : v->partners_in[r];
}

/* The tallied exchange and copies into the step; with --vit-ship the
 * inputs' part of them also into st->vit_shipped, with --vit-async the
 * embeddings' way back (not its copies, made at the wait) into
 * st->vit_returned. */
static void exchange_costs(sim_vit_t *v, sim_step_t *st) {
  double xin = 0, xout = 0, copy = 0, copy_out = 0;
  int32_t peers = 0;
  for (int32_t r = 0; r < v->P; r++) {
    xin = fmax(xin, fmax(v->sent_in[r], v->recv_in[r]));
    xout = fmax(xout, fmax(v->sent_out[r], v->recv_out[r]));
    copy = fmax(copy, rank_copy(v, r));
    copy_out = fmax(copy_out, 2 * (v->sent_out[r] + v->recv_out[r]));
    if (rank_partners(v, r) > peers) peers = rank_partners(v, r);
    st->vit_moved_bytes += v->sent_in[r] + 2 * v->sent_out[r];
  }
  st->vit_xfer_bytes += xin + 2 * xout;
  st->vit_copy_bytes += copy;
  st->vit_peers += 3.0 * peers;
  st->vit_inter_xfer_bytes += sim_cross_link_bytes(&v->cross_in) +
                              2 * sim_cross_link_bytes(&v->cross_out);
  st->vit_inter_peers += 3.0 * sim_cross_peers(&v->cross_in);
  st->vit_inter_moved_bytes += v->cross_in.moved + 2 * v->cross_out.moved;
  if (v->c->vit_async) {
    sim_vit_hidden_t *a = &st->vit_returned;
    a->xfer_bytes += xout;
    a->peers += peers;
    a->inter_xfer_bytes += sim_cross_link_bytes(&v->cross_out);
    a->inter_peers += sim_cross_peers(&v->cross_in);
    a->exchanges += 1;
  }
  if (!v->c->vit_ship) return;
  sim_vit_hidden_t *a = &st->vit_shipped;
  a->xfer_bytes += xin;
  a->copy_bytes += copy - copy_out;
  a->peers += peers;
  a->inter_xfer_bytes += sim_cross_link_bytes(&v->cross_in);
  a->inter_peers += sim_cross_peers(&v->cross_in);
  a->exchanges += 1;
}

int sim_vit_call(sim_vit_t *v, dpshim_algo_t algo, dpshim_cost_model_t model,
                 int64_t h, const int32_t *holder, double *encoded,
                 sim_step_t *st, char *err, size_t errlen) {
  int64_t n = gather_images(v, h, holder);
  dpshim__vit_group_t g = {v->P, v->first, v->images};
  /* auto: the calls meet (the gate said so), the plan taken as the shim
   * takes it there */
  double ratio = v->c->vit_threshold < 0 ? DPSHIM__POLICY_VIT_MET_RATIO
                                         : v->c->vit_threshold;
  dpshim__vit_settings_t s = {.algo = algo, .model = model,
                              .cap_ratio = v->c->vit_cap_ratio,
                              .threshold = ratio};
  double solve_s = 0;
  int rc = n > 0 ? timed_plan(v, &g, &s, &solve_s) : 0;
  if (rc == 1) tally_exchange(v);
  if (rc < 0) {
    snprintf(err, errlen, "%d ranks: ViT plan: %s", (int)v->P,
             rc == DPSHIM_ENOMEM ? "out of memory" : v->planner.plan.message);
    return -1;
  }
  if (rc == 0) /* nothing moves: every image encoded where it is */
    for (int32_t r = 0; r < v->P; r++)
      for (int64_t j = v->first[r]; j < v->first[r + 1]; j++) v->dest[j] = r;
  st->vit_calls++;
  st->vit_solve_s += solve_s;
  st->vit_gather_bytes += (double)v->P * SIM_VIT_HEADER_BYTES +
                          (double)n * SIM_VIT_META_BYTES;
  if (v->c->vit_ship) { /* the forward keeps its header round */
    st->vit_shipped.solve_s += solve_s;
    st->vit_shipped.gather_bytes += (double)n * SIM_VIT_META_BYTES;
  }
  memset(encoded, 0, (size_t)v->P * sizeof *encoded);
  for (int64_t j = 0; j < n; j++) {
    double secs = v->w->image[v->image_of[j]].vit;
    encoded[v->dest[j]] += secs;
    st->vit_images += 1;
    st->vit_seconds += secs;
  }
  if (rc == 1) {
    st->vit_applied++;
    exchange_costs(v, st);
  }
  return 0;
}
