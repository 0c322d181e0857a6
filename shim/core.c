/* From events to steps, warm-up, the fit and balancing; see core.h.
 *
 * A step is one or more main-thread hand-offs followed by the gradient
 * sync. It runs from the first hand-off's entry to the sync's end; its
 * compute time is that less the hand-offs and the sync. Warm-up steps are
 * not balanced: they measure. */
#include "core.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy.h"
#include "report.h"

/* The original's ViT cost, L^2 per image: when nothing was fitted. */
#define VIT_DEFAULT_MODEL ((dpshim_cost_model_t){1, 0, 0, 0, 0})

void dpshim__core_say(const dpshim__core_t *c, const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (c->say) c->say(line);
}

int dpshim__core_warming(const dpshim__core_t *c, int64_t step) {
  return dpshim__config_is_warmup(&c->cfg, step, NULL);
}

/* ---- open and close ----------------------------------------------------------- */

static void free_core(dpshim__core_t *c) {
  dpshim__balancer_free(c->balancer);
  free(c->host);
  c->host = NULL;
  free(c->points);
  free(c->step.last.load_before);
  free(c->step.last.load_after);
  c->balancer = NULL;
  c->points = NULL;
  c->step.last.load_before = c->step.last.load_after = NULL;
}

/* Each DP rank's host, for the bytes that cross hosts: the balancer and
 * the log read c->host. */
static int copy_hosts(dpshim__core_t *c, const int32_t *host) {
  c->nhosts = 1;
  if (!host) return 0;
  c->host = malloc((size_t)c->dp->size * sizeof *c->host);
  if (!c->host) return DPSHIM_ENOMEM;
  for (int32_t r = 0; r < c->dp->size; r++) {
    c->host[r] = host[r];
    if (host[r] + 1 > c->nhosts) c->nhosts = host[r] + 1;
  }
  dpshim__balancer_set_hosts(c->balancer, c->host, c->cfg.topology,
                             c->cfg.inter_host_cost);
  return 0;
}

static int alloc_loads(dpshim__handoff_note_t *h, int ranks) {
  h->load_before = calloc((size_t)ranks, sizeof *h->load_before);
  h->load_after = calloc((size_t)ranks, sizeof *h->load_after);
  return h->load_before && h->load_after ? 0 : DPSHIM_ENOMEM;
}

int dpshim__core_open(dpshim__core_t *c, const dpshim__core_setup_t *s) {
  memset(c, 0, sizeof *c);
  c->cfg = *s->cfg;
  c->world = s->world;
  c->dp = s->dp;
  c->peers = s->peers;
  c->dp_group = s->dp_group;
  c->ngroups = s->ngroups;
  c->clock = s->clock;
  c->say = s->say;
  pthread_mutex_init(&c->lock, NULL);
  pthread_mutex_init(&c->handoff, NULL);
  int vit_fit = c->cfg.vit && !c->cfg.have_vit_coefs;
  c->settled = c->cfg.nwarmup == 0 || (c->cfg.have_coefs && !vit_fit);
  c->model = c->cfg.have_coefs ? c->cfg.coefs : (dpshim_cost_model_t){0, 1, 0, 0, 0};
  c->vit_settled = c->settled;
  c->vit_model = c->cfg.have_vit_coefs ? c->cfg.vit_coefs : VIT_DEFAULT_MODEL;
  dpshim__balance_config_t bc = {c->cfg.algo, c->cfg.max_len_ratio,
                                 c->cfg.threshold, c->model, c->cfg.verify,
                                 c->clock};
  c->balancer = dpshim__balancer_new(&bc);
  c->points = calloc((size_t)c->cfg.nwarmup + 1, sizeof *c->points);
  c->step.index = 1;
  c->step.last.decision = "warmup";
  c->opened_at = c->clock();
  int rc = c->balancer && c->points ? 0 : DPSHIM_ENOMEM;
  if (rc == 0) rc = dpshim__balancer_reserve(c->balancer, c->dp->size);
  if (rc == 0) rc = copy_hosts(c, s->host);
  if (rc == 0) rc = alloc_loads(&c->step.last, c->dp->size);
  if (rc == 0)
    rc = dpshim__steplog_open(&c->log, c->cfg.log_path, c->dp->rank == 0,
                              c->dp_group, c->dp->size, c->say);
  if (rc < 0) free_core(c);
  return rc;
}

void dpshim__core_close(dpshim__core_t *c) {
  dpshim__steplog_close(&c->log, c->dp);
  dpshim__report_summary(c);
  free_core(c);
  pthread_mutex_destroy(&c->lock);
  pthread_mutex_destroy(&c->handoff);
}

/* ---- warm-up and the fit ---------------------------------------------------------- */

/* Warm-up steps but the first (a cold start, dropped), numbered from 0. */
static int32_t point_slot(const dpshim__core_t *c, int64_t step) {
  int first = 0;
  if (!dpshim__config_is_warmup(&c->cfg, step, &first) || first) return -1;
  int32_t slot = 0;
  for (int64_t s = c->cfg.warmup_first + 1; s < step; s++)
    slot += c->cfg.warmup[s];
  return slot;
}

#define POINT_DOUBLES (sizeof(dpshim__point_t) / sizeof(double))

typedef struct fit_outcome {
  int64_t rc, vision, vit_rc;
  dpshim_fit_result_t fit, fit_text; /* fit_text: when vision */
  dpshim_fit_result_t vit;           /* the encoder's, when vit_rc == 0 */
} fit_outcome_t;

/* The fit, and when the points have images the text-only fit of the same
 * points beside it: what the vision terms gain. */
static int fit_both(dpshim_fit_input_t *in, fit_outcome_t *out) {
  int64_t n = in->iters * (int64_t)in->ranks;
  for (int64_t i = 0; i < n && !in->text_only; i++)
    out->vision |= in->points[i].sum_patches_sq > 0 ||
                   in->points[i].sum_patches > 0;
  int rc = dpshim_fit(in, &out->fit);
  if (rc == 0 && out->vision) {
    in->text_only = 1;
    if (dpshim_fit(in, &out->fit_text) < 0) out->vision = 0;
  }
  return rc;
}

/* Rank 0: every rank's points -> one fit over the steps every rank
 * measured. */
static int fit_points(dpshim__core_t *c, const dpshim__point_t *all,
                      fit_outcome_t *out) {
  int32_t ranks = c->world->size, slots = c->cfg.nwarmup, iters = 0;
  dpshim_fit_point_t *pts = calloc((size_t)ranks * (size_t)slots + 1,
                                   sizeof *pts);
  double *iter_time = calloc((size_t)slots + 1, sizeof *iter_time);
  int rc = DPSHIM_ENOMEM;
  snprintf(out->fit.message, sizeof out->fit.message,
           "out of memory for the fit");
  if (pts && iter_time) {
    for (int32_t it = 0; it < slots; it++) {
      int all_valid = 1;
      for (int32_t r = 0; r < ranks; r++)
        all_valid &= all[(size_t)r * (size_t)slots + (size_t)it].valid == 1;
      if (!all_valid) continue; /* a rank missed this step */
      for (int32_t r = 0; r < ranks; r++) {
        const dpshim__point_t *p = &all[(size_t)r * (size_t)slots + (size_t)it];
        pts[(size_t)iters * (size_t)ranks + (size_t)r] =
            (dpshim_fit_point_t){p->sum_len2,       p->sum_len,
                                 p->count,          p->compute,
                                 p->sum_patches_sq, p->sum_patches};
        if (p->step > iter_time[iters]) iter_time[iters] = p->step;
      }
      iters++;
    }
    /* With the ViT balance the images are encoded apart from their
     * samples: the LLM's cost leaves them out. */
    dpshim_fit_input_t in = {iters, ranks, pts, iter_time, c->cfg.fit,
                             c->cfg.vit};
    rc = fit_both(&in, out);
  }
  free(pts);
  free(iter_time);
  return rc;
}

/* The encoder's cost per image: NNLS over every (rank, warm-up step) that
 * encoded images, apart from the steps' structure (a step without images
 * on some rank still teaches the others'). */
static int fit_vit(const dpshim__core_t *c, const dpshim__point_t *all,
                   dpshim_fit_result_t *out) {
  size_t n = (size_t)c->world->size * (size_t)c->cfg.nwarmup, k = 0;
  dpshim_fit_point_t *pts = calloc(n + 1, sizeof *pts);
  if (!pts) {
    snprintf(out->message, sizeof out->message, "out of memory for the fit");
    return DPSHIM_ENOMEM;
  }
  for (size_t i = 0; i < n; i++)
    if (all[i].valid == 1 && all[i].vit_count > 0 && all[i].vit_time > 0)
      pts[k++] = (dpshim_fit_point_t){all[i].vit_len2, all[i].vit_len,
                                      all[i].vit_count, all[i].vit_time, 0, 0};
  dpshim_fit_input_t in = {(int64_t)k, 1, pts, NULL, DPSHIM_FIT_RANKS, 1};
  int rc = k ? dpshim_fit(&in, out) : DPSHIM_EINVAL;
  if (!k)
    snprintf(out->message, sizeof out->message,
             "no warm-up step encoded images");
  free(pts);
  return rc;
}

/* Collective over the world: the same model on every rank. */
static int fit_warmup(dpshim__core_t *c) {
  size_t bytes = (size_t)c->cfg.nwarmup * sizeof(dpshim__point_t);
  int root = c->world->rank == 0;
  dpshim__point_t *all = root ? calloc((size_t)c->world->size, bytes + 1)
                              : NULL;
  int64_t failed = root && !all;
  int rc = c->world->ops->max(c->world, &failed, 1);
  if (rc < 0) return rc;
  fit_outcome_t out;
  memset(&out, 0, sizeof out);
  out.rc = DPSHIM_ENOMEM;
  snprintf(out.fit.message, sizeof out.fit.message, "out of memory");
  if (!failed) {
    rc = c->world->ops->gather(c->world, c->points, bytes, all);
    if (rc < 0) {
      free(all);
      return rc;
    }
    if (root && !c->cfg.have_coefs) out.rc = fit_points(c, all, &out);
    if (root && c->cfg.vit && !c->cfg.have_vit_coefs)
      out.vit_rc = fit_vit(c, all, &out.vit);
  }
  free(all);
  rc = c->world->ops->bcast(c->world, &out, sizeof out);
  if (rc < 0) return rc;
  pthread_mutex_lock(&c->lock);
  if (!c->cfg.have_coefs) {
    c->fit = out.fit;
    c->fit_text = out.fit_text;
    c->fit_vision = (int)out.vision;
    c->fitted = out.rc == 0;
    if (c->fitted) c->model = dpshim__policy_model_from_fit(out.fit.model);
  }
  if (c->cfg.vit && !c->cfg.have_vit_coefs) {
    c->vit_fit = out.vit;
    c->vit_fitted = out.vit_rc == 0;
    if (c->vit_fitted)
      c->vit_model = dpshim__policy_model_from_fit(out.vit.model);
  }
  pthread_mutex_unlock(&c->lock);
  if (!c->cfg.have_coefs) dpshim__report_fit(c, (int)out.rc);
  if (c->cfg.vit && !c->cfg.have_vit_coefs)
    dpshim__report_vit_fit(c, (int)out.vit_rc);
  return 0;
}

static void settle(dpshim__core_t *c) {
  pthread_mutex_lock(&c->lock);
  c->settled = 1;
  c->vit_settled = 1;
  pthread_mutex_unlock(&c->lock);
  dpshim__balancer_set_model(c->balancer, c->model);
}

/* Until settled: what this hand-off is, agreed over the world from every
 * rank's step counter and thread. *warm: measure only. */
static int agree_phase(dpshim__core_t *c, int64_t step, int main, int *warm,
                       double *arrival) {
  int64_t v[3] = {step, -step, !main};
  double t = c->clock();
  int rc = c->world->ops->max(c->world, v, 3);
  *arrival = c->clock() - t;
  if (rc < 0) return rc;
  *warm = 0;
  if (v[2]) { /* some loader thread hands off ahead of the steps */
    dpshim__report_no_fit(c);
    settle(c);
  } else if (-v[1] > c->cfg.warmup_last) {
    rc = fit_warmup(c);
    settle(c);
  } else {
    *warm = dpshim__core_warming(c, v[0]);
  }
  return rc;
}

/* ---- hand-offs --------------------------------------------------------------------- */

static void add_features(dpshim__step_t *s, const dpshim_batch_t *batch) {
  for (int32_t i = 0; i < batch->nsamples; i++) {
    double len = batch->cu_seqlens[i + 1] - batch->cu_seqlens[i];
    s->sum_len2 += len * len;
    s->sum_len += len;
    s->count += 1;
    if (!batch->vision) continue;
    s->sum_patches_sq += (double)batch->vision[i].patches_sq;
    s->sum_patches += (double)batch->vision[i].patches;
  }
}

/* Under c->lock: the hand-off into the totals and the step's log note. */
static void count_handoff(dpshim__core_t *c, int rc, int warm,
                          const dpshim__balance_report_t *rep) {
  dpshim__stats_t *s = &c->stats;
  dpshim__handoff_note_t *last = &c->step.last;
  s->handoffs++;
  last->decision = rc < 0 ? "error" : warm ? "warmup"
                   : rep->applied ? "apply" : "skip";
  last->reason = rep->skip_reason;
  last->solved = 0;
  if (rc < 0) {
    s->failed++;
    return;
  }
  if (warm) return;
  if (rep->applied) s->applied++;
  else s->skipped++;
  if (!rep->load_before) return; /* skipped before solving */
  size_t bytes = (size_t)c->dp->size * sizeof(double);
  last->solved = 1;
  last->imbalance_before = rep->imbalance_before;
  last->imbalance_after = rep->imbalance_after;
  last->lower_bound = rep->lower_bound;
  last->bytes_total = (double)rep->bytes_total;
  last->model = c->model;
  last->model_source = c->cfg.have_coefs ? "coefs" : c->fitted ? "fit"
                                                                : "linear";
  last->fit_error_mean = c->fit.mean_rel_error;
  last->fit_error_max = c->fit.max_rel_error;
  memcpy(last->load_before, rep->load_before, bytes);
  memcpy(last->load_after, rep->load_after, bytes);
  double moved = rep->applied ? (double)rep->bytes_moved : 0;
  double across = rep->applied ? (double)rep->bytes_inter_host : 0;
  last->bytes_moved += moved;
  last->bytes_inter_host += across;
  last->hosts = c->nhosts;
  s->bytes_inter_host += across;
  s->solved++;
  s->imbalance_before += rep->imbalance_before;
  s->imbalance_after += rep->applied ? rep->imbalance_after
                                     : rep->imbalance_before;
  s->bytes_moved += moved;
  s->bytes_total += (double)rep->bytes_total;
}

/* Under c->lock, on the main thread: the step's clock around a hand-off. */
static void step_enter(dpshim__step_t *s, double t0) {
  if (s->open) s->compute += t0 - s->last_return;
  else s->first_entry = t0;
}

static void step_leave(dpshim__step_t *s, const dpshim_batch_t *batch,
                       int rc, int warm, double t0, double t1,
                       double arrival) {
  if (warm && rc == 0) add_features(s, batch);
  if (warm && rc < 0) s->bad = 1;
  s->open = 1;
  s->last_return = t1;
  s->shim += t1 - t0 - arrival;
  s->arrival += arrival;
}

int dpshim__core_handoff(dpshim__core_t *c, dpshim_batch_t *batch, int main,
                         const char *invalid) {
  pthread_mutex_lock(&c->handoff);
  double t0 = c->clock(), note[DPSHIM__NOTES];
  pthread_mutex_lock(&c->lock);
  if (main) step_enter(&c->step, t0);
  int64_t step = c->step.index;
  int noted = dpshim__steplog_note(&c->log, note);
  pthread_mutex_unlock(&c->lock);

  int warm = 0, rc = 0;
  double arrival = 0;
  dpshim__balance_report_t rep;
  memset(&rep, 0, sizeof rep);
  if (!c->settled) rc = agree_phase(c, step, main, &warm, &arrival);
  if (rc < 0) {
    snprintf(rep.message, sizeof rep.message, "the warm-up agreement failed");
  } else {
    /* The LLM-level balance off (the ViT's alone): gather and agree, as
     * in warm-up, so that steps, the fit and the log still go by. */
    dpshim__handoff_t ho = {main ? step : -1, !warm && c->cfg.enabled,
                            noted ? note : NULL, c->peers, invalid};
    rc = dpshim__balance(c->balancer, c->dp, batch, &ho, &rep);
    arrival += rep.arrival_wait;
  }
  double t1 = c->clock();
  pthread_mutex_lock(&c->lock);
  count_handoff(c, rc, warm || !c->cfg.enabled, &rep);
  if (main) {
    step_leave(&c->step, batch, rc, warm, t0, t1, arrival);
  } else if (!c->step.open) { /* the main thread's step begins */
    c->step.open = 1;
    c->step.first_entry = c->step.last_return = t1;
  }
  atomic_store(&c->open_hint, 1);
  c->stats.shim_time += t1 - t0 - arrival;
  c->stats.arrival_time += arrival;
  dpshim__steplog_receive(&c->log, rep.notes);
  pthread_mutex_unlock(&c->lock);
  dpshim__report_handoff(c, rc, &rep);
  pthread_mutex_unlock(&c->handoff);
  return rc;
}

/* ---- the sync ------------------------------------------------------------------------ */

void dpshim__core_sync_begin(dpshim__core_t *c) {
  if (!atomic_load_explicit(&c->open_hint, memory_order_relaxed)) return;
  double t = c->clock();
  pthread_mutex_lock(&c->lock);
  dpshim__step_t *s = &c->step;
  if (s->open && !s->syncing) {
    s->syncing = 1;
    atomic_store(&c->sync_hint, 1);
    s->compute += t - s->last_return;
    s->sync_entry = t;
  }
  pthread_mutex_unlock(&c->lock);
}

static void record_point(dpshim__core_t *c, double step_time) {
  const dpshim__step_t *s = &c->step;
  int32_t slot = point_slot(c, s->index);
  if (slot < 0 || c->settled) return;
  double encoder = c->cfg.vit ? s->vit_time : 0;
  c->points[slot] = (dpshim__point_t){
      .valid = !s->bad && s->count > 0 && s->compute - encoder > 0,
      .sum_len2 = s->sum_len2,
      .sum_len = s->sum_len,
      .count = s->count,
      .sum_patches_sq = s->sum_patches_sq,
      .sum_patches = s->sum_patches,
      .compute = s->compute - encoder,
      .step = step_time,
      .vit_len2 = s->vit_len2,
      .vit_len = s->vit_len,
      .vit_count = s->vit_count,
      .vit_time = s->vit_time};
}

void dpshim__core_sync_end(dpshim__core_t *c) {
  if (!atomic_load_explicit(&c->sync_hint, memory_order_relaxed)) return;
  double now = c->clock();
  pthread_mutex_lock(&c->lock);
  dpshim__step_t *s = &c->step;
  if (!s->syncing) {
    pthread_mutex_unlock(&c->lock);
    return;
  }
  double wait = now - s->sync_entry, step_time = now - s->first_entry;
  int phase = c->fitted || c->cfg.have_coefs;
  c->stats.steps[phase] += 1;
  c->stats.wait[phase] += wait;
  c->stats.step_time[phase] += step_time;
  record_point(c, step_time);
  double times[DPSHIM__LOG_TIMES] = {s->compute, wait, s->shim, s->arrival,
                                     s->vit_time};
  dpshim__steplog_step(&c->log, s->index, times, &s->last, &s->vit);
  /* The latest hand-off stays the next line's unless one comes: a loader
   * thread's need not fall in every step. */
  dpshim__handoff_note_t last = s->last;
  int64_t next = s->index + 1;
  memset(s, 0, sizeof *s);
  s->index = next;
  s->last = last;
  s->last.bytes_moved = 0;
  s->last.bytes_inter_host = 0;
  atomic_store(&c->open_hint, 0);
  atomic_store(&c->sync_hint, 0);
  pthread_mutex_unlock(&c->lock);
}

/* ---- encoder calls ------------------------------------------------------------------ */

int dpshim__core_vit_model(dpshim__core_t *c, dpshim_cost_model_t *model) {
  pthread_mutex_lock(&c->lock);
  int settled = c->vit_settled;
  *model = c->vit_model;
  pthread_mutex_unlock(&c->lock);
  return settled;
}

/* A forward's decision into a note (the step's, or the totals), and a
 * backward's bytes. */
static void note_call(dpshim__vit_note_t *n, const dpshim__vit_report_t *r) {
  if (r->kind == DPSHIM__VIT_BACKWARD) n->bytes_moved += (double)r->bytes_moved;
  if (r->kind != DPSHIM__VIT_FORWARD || !r->grouped || r->warm) return;
  n->calls++;
  if (r->message[0]) {
    n->failed++;
    return;
  }
  if (r->applied) n->applied++;
  else n->skipped++;
  if (!r->load_before) return;
  n->solved++;
  n->imbalance_before += r->imbalance_before;
  n->imbalance_after += r->imbalance_after;
  n->bytes_moved += (double)r->bytes_moved;
}

void dpshim__core_vit_call(dpshim__core_t *c, const dpshim__vit_report_t *rep,
                           double seconds) {
  pthread_mutex_lock(&c->lock);
  dpshim__step_t *s = &c->step;
  note_call(&s->vit, rep);
  note_call(&c->stats.vit, rep);
  c->stats.vit_time += rep->encode_s;
  c->stats.vit_shim += seconds - rep->encode_s - rep->arrival_s;
  c->stats.vit_arrival += rep->arrival_s;
  s->vit_time += rep->encode_s;
  if (rep->kind == DPSHIM__VIT_FORWARD) {
    s->vit_len2 += rep->own_patches_sq;
    s->vit_len += rep->own_patches;
    s->vit_count += (double)rep->own_images;
  }
  pthread_mutex_unlock(&c->lock);
  dpshim__report_vit(c, rep);
}
