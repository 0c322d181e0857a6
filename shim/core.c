/* From events to steps, warm-up, the fit and balancing; see core.h.
 *
 * A step is one or more main-thread hand-offs followed by the gradient
 * sync. It runs from the first hand-off's entry to the sync's end; its
 * compute time is that less the hand-offs and the sync. Warm-up steps are
 * not balanced: they measure. */
#include "core.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "env.h"
#include "policy.h"
#include "report.h"
#include "warmup.h"

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

/* Balanced hand-off steps kept for the refits: their token counts differ
 * (within the cap), which a warm-up's do not, so a refit can tell the
 * per-token cost from the step's overhead. */
#define LATER_POINTS 16

int32_t dpshim__core_slots(const dpshim__core_t *c) {
  return c->cfg.nwarmup + LATER_POINTS;
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
  free(c->shadow_points);
  c->shadow_points = NULL;
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

static void say_one_rank_groups(dpshim__core_t *c) {
  char cause[320];
  snprintf(cause, sizeof cause,
           "every DP group has one rank (%d ranks, %s x %s x %s = %d): "
           "run more ranks, or set those to the model-parallel sizes",
           c->world->size, DPSHIM_ENV_TP, DPSHIM_ENV_PP, DPSHIM_ENV_CP,
           c->cfg.tp * c->cfg.pp * c->cfg.cp);
  dpshim__core_noop(c, cause);
}

static int alloc_loads(dpshim__handoff_note_t *h, int ranks) {
  h->load_before = calloc((size_t)ranks, sizeof *h->load_before);
  h->load_after = calloc((size_t)ranks, sizeof *h->load_after);
  return h->load_before && h->load_after ? 0 : DPSHIM_ENOMEM;
}

/* The balancer's model; under the ViT gate, the encoder's part of it too.
 * (The gate's model has the encoder in each sample's cost, as without the
 * ViT balance: a sample's images are encoded where it goes unless the
 * calls meet.) */
static void set_balance_model(dpshim__core_t *c) {
  dpshim__balancer_set_model(c->balancer, c->model,
                             c->fitted || c->cfg.have_coefs);
  dpshim__balancer_set_encoder(c->balancer, c->vit_model,
                               dpshim__core_vit_gate(c) && c->vit_settled);
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
  c->backoff.until = -1;
  c->backoff.window = 1;
  pthread_mutex_init(&c->lock, NULL);
  pthread_mutex_init(&c->handoff, NULL);
  int vit_fit = c->cfg.vit && !c->cfg.have_vit_coefs;
  c->settled = c->cfg.nwarmup == 0 || (c->cfg.have_coefs && !vit_fit);
  c->model = c->cfg.have_coefs ? c->cfg.coefs : (dpshim_cost_model_t){0, 1, 0, 0, 0};
  c->vit_settled = c->settled;
  c->vit_model = c->cfg.have_vit_coefs ? c->cfg.vit_coefs : VIT_DEFAULT_MODEL;
  dpshim__balance_config_t bc = {c->cfg.algo, c->cfg.max_len_ratio,
                                 c->cfg.threshold, c->model,
                                 c->cfg.have_coefs, c->cfg.verify, c->clock};
  c->balancer = dpshim__balancer_new(&bc);
  if (c->balancer && c->settled) set_balance_model(c); /* given, not fitted */
  c->points = calloc((size_t)dpshim__core_slots(c), sizeof *c->points);
  c->shadow_points = calloc((size_t)dpshim__core_slots(c), sizeof *c->points);
  c->mode = c->cfg.step;
  c->step.index = c->shadow.index = 1;
  c->step.last.decision = "warmup";
  c->opened_at = c->clock();
  int rc = c->balancer && c->points && c->shadow_points ? 0 : DPSHIM_ENOMEM;
  if (rc == 0) rc = dpshim__balancer_reserve(c->balancer, c->dp->size);
  if (rc == 0) rc = copy_hosts(c, s->host);
  if (rc == 0) rc = alloc_loads(&c->step.last, c->dp->size);
  if (rc == 0)
    rc = dpshim__steplog_open(&c->log, c->cfg.log_path, c->dp->rank == 0,
                              c->dp_group, c->dp->size, c->say);
  if (rc < 0) free_core(c);
  else if (c->cfg.enabled && c->dp->size == 1) say_one_rank_groups(c);
  return rc;
}

/* ---- steps ------------------------------------------------------------------------- */

/* A model fitted from hand-off steps keeps learning. Set only at agreed
 * points, so the same on every rank. */
static int refitting(const dpshim__core_t *c) {
  return c->mode == DPSHIM__STEP_HANDOFF && c->fitted &&
         c->fit_method != DPSHIM_FIT_RANKS && !c->cfg.have_coefs;
}

/* Refits after each of the first LATER_POINTS balanced steps, from the
 * one that brings as many as the warm-up fitted: a balanced step's ranks
 * are predicted alike, and a refit on one or two of them swung between
 * feature sets (reftrain at DP 32: plans 7 %, 28 %, 19 % above the mean
 * rank, where the warm-up's fit kept them within 10 %). A model that can
 * change no plan (c->stuck) is refitted every LATER_POINTS steps after.
 * `step` must be the same on every rank at this hand-off: a main-thread
 * hand-off's step where steps follow the hand-off count (not marks), a
 * hand-off ahead's by its place in the sequence. */
static int refit_due(const dpshim__core_t *c, int64_t step, int main) {
  int64_t after = step - c->cfg.warmup_last - 1;
  int64_t first = c->cfg.nwarmup - 1 > 1 ? c->cfg.nwarmup - 1 : 1;
  if (!refitting(c) || (main && c->marked) || after < first) return 0;
  return after <= LATER_POINTS || (c->stuck && after % LATER_POINTS == 0);
}

/* Warm-up steps but the first (a cold start, dropped), numbered from 0;
 * then, for the refits of a fit from hand-off steps, the later steps in a
 * ring. */
static int32_t point_slot(const dpshim__core_t *c, int64_t step) {
  int first = 0;
  if (c->settled)
    return refitting(c) ? c->cfg.nwarmup + (int32_t)(step % LATER_POINTS)
                        : -1;
  if (!dpshim__config_is_warmup(&c->cfg, step, &first) || first) return -1;
  int32_t slot = 0;
  for (int64_t s = c->cfg.warmup_first + 1; s < step; s++)
    slot += c->cfg.warmup[s];
  return slot;
}

/* With the ViT balance, what the LLM-level model leaves out of a step's
 * compute: the encoder calls' time beyond the encoder (in calls that meet,
 * the header rounds, the exchanges and the waits for the other ranks,
 * which would otherwise fit as the samples' cost), and without the gate
 * the encoder too (its images are balanced apart). */
static double llm_apart(const dpshim__core_t *c, const dpshim__step_t *s) {
  if (!c->cfg.vit) return 0;
  return dpshim__core_vit_gate(c) ? s->vit_wall - s->vit_time : s->vit_wall;
}

static void record_point(const dpshim__core_t *c, const dpshim__step_t *s,
                         dpshim__point_t *points, double step_time) {
  int32_t slot = point_slot(c, s->index);
  if (slot < 0) return;
  double encoder = llm_apart(c, s);
  points[slot] = (dpshim__point_t){
      .valid = !s->bad && s->count > 0 && s->compute - encoder > 0,
      .index = (double)s->index,
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

/* The next step: the latest hand-off stays the next line's unless one
 * comes (a loader thread's need not fall in every step). */
static void next_step(dpshim__step_t *s) {
  dpshim__handoff_note_t last = s->last;
  int64_t index = s->index + 1;
  memset(s, 0, sizeof *s);
  s->index = index;
  s->last = last;
  s->last.bytes_moved = 0;
  s->last.bytes_inter_host = 0;
}

/* Under c->lock: step s ends at `now`, after `wait` in the sync. The
 * shadow only keeps its point and its time, for when it is taken over. */
/* Under c->lock, a sync step after the warm-up: its compute against what
 * the cost model predicts for the samples this rank held (the model is in
 * microseconds). Not hand-off steps: their compute is every rank's slowest. */
static void check_prediction(dpshim__core_t *c, const dpshim__step_t *s) {
  double compute = s->compute - llm_apart(c, s);
  if (c->mode != DPSHIM__STEP_SYNC || s->bad || !(compute > 0)) return;
  dpshim_fit_point_t held = {s->sum_len2,       s->sum_len,   s->count, 0,
                             s->sum_patches_sq, s->sum_patches};
  double predicted = 1e-6 * dpshim__policy_predict(c->model, &held);
  if (!(predicted > 0)) return;
  c->stats.predicted_error += fabs(compute - predicted) / compute;
  c->stats.predicted_steps += 1;
}

static void end_step(dpshim__core_t *c, dpshim__step_t *s, double now,
                     double wait) {
  double step_time = now - s->first_entry - s->shim;
  if (s == &c->shadow) {
    record_point(c, s, c->shadow_points, step_time);
    c->shadow_steps += 1;
    c->shadow_time += step_time;
    next_step(s);
    return;
  }
  int phase = c->fitted || c->cfg.have_coefs;
  c->stats.steps[phase] += 1;
  c->stats.wait[phase] += wait;
  c->stats.step_time[phase] += step_time;
  if (phase && c->settled && s->index > c->cfg.warmup_last)
    check_prediction(c, s);
  record_point(c, s, c->points, step_time);
  double times[DPSHIM__LOG_TIMES] = {s->compute, wait,        s->shim,
                                     s->arrival, s->vit_time, s->ahead};
  dpshim__steplog_step(&c->log, s->index, times, &s->last, &s->vit);
  next_step(s);
  atomic_store(&c->open_hint, 0);
  atomic_store(&c->sync_hint, 0);
}

/* Under c->lock: a hand-off step ends at `t` (the next step's first
 * hand-off, a mark, or close): its last interval is the trainer's, and
 * its sync unseen. */
static void end_counted_step(dpshim__core_t *c, dpshim__step_t *s, double t) {
  s->compute += t - s->last_return;
  end_step(c, s, t, 0);
}

/* The step that hand-offs delimit now: the real one in hand-off steps, the
 * shadow while auto is undecided, none in sync steps. */
static dpshim__step_t *counted_step(dpshim__core_t *c) {
  return c->mode == DPSHIM__STEP_HANDOFF ? &c->step
         : c->mode == DPSHIM__STEP_AUTO  ? &c->shadow
                                         : NULL;
}

/* Under c->lock, at a hand-off's entry: a hand-off step full of its
 * micro-batches ends here (unless the trainer marks its steps). */
static void count_step(dpshim__core_t *c, double t0) {
  dpshim__step_t *s = counted_step(c);
  if (!s || c->marked || !s->open || s->handoffs < c->cfg.micro_batches)
    return;
  end_counted_step(c, s, t0);
}

/* The batch as balanced: its lengths from its offsets; its images from the
 * balancer where samples moved (the adapter's vision array describes the
 * samples it handed off, not those received). */
static dpshim__ahead_load_t loads_of(const dpshim_batch_t *batch,
                                     const dpshim__balance_report_t *rep,
                                     int rc) {
  dpshim__ahead_load_t l = {.bad = rc != 0};
  if (rc != 0) return l;
  for (int32_t i = 0; i < batch->nsamples; i++) {
    double len = batch->cu_seqlens[i + 1] - batch->cu_seqlens[i];
    l.sum_len2 += len * len;
    l.sum_len += len;
    l.count += 1;
  }
  if (!batch->vision) return l;
  if (rep->applied) {
    l.sum_patches_sq = (double)rep->held_vision.patches_sq;
    l.sum_patches = (double)rep->held_vision.patches;
    return l;
  }
  for (int32_t i = 0; i < batch->nsamples; i++) {
    l.sum_patches_sq += (double)batch->vision[i].patches_sq;
    l.sum_patches += (double)batch->vision[i].patches;
  }
  return l;
}

/* A batch the step consumed: its loads, the shim's time balancing it
 * ahead (0 inline, where it is the step's own shim time), and what its
 * hand-off decided (inline: already the step's). */
static void add_loads(dpshim__step_t *s, const dpshim__ahead_load_t *l) {
  if (l->decision) {
    s->last.decision = l->decision;
    s->last.reason = l->reason;
  }
  s->bad |= l->bad;
  s->sum_len2 += l->sum_len2;
  s->sum_len += l->sum_len;
  s->count += l->count;
  s->sum_patches_sq += l->sum_patches_sq;
  s->sum_patches += l->sum_patches;
  s->ahead += l->shim;
}

/* Under c->lock: the step's clock around a hand-off. */
static void step_enter(dpshim__step_t *s, double t0) {
  if (s->open) s->compute += t0 - s->last_return;
  else s->first_entry = t0;
}

static void step_leave(dpshim__step_t *s, const dpshim__ahead_load_t *l,
                       double t0, double t1, double arrival) {
  add_loads(s, l);
  s->open = 1;
  s->handoffs++;
  s->last_return = t1;
  s->shim += t1 - t0 - arrival;
  s->arrival += arrival;
}

/* ---- batches balanced ahead ------------------------------------------------------ */

/* The step a hand-off ahead is for, by its place in the sequence: the key
 * of its micro-batch history, the same on every rank. */
static int64_t ahead_step(const dpshim__core_t *c) {
  return c->ahead.pushed / c->cfg.micro_batches + 1;
}

/* Under c->lock: a batch balanced ahead joins the queue; past the ring's
 * room the oldest is forgotten, and the step that takes its place in the
 * queue makes no point. */
static void ahead_push(dpshim__core_t *c, const dpshim__ahead_load_t *l) {
  if (c->ahead.pushed - c->ahead.popped == DPSHIM__AHEAD_RING) {
    c->ahead.popped++;
    c->ahead.ring[c->ahead.popped % DPSHIM__AHEAD_RING].bad = 1;
  }
  c->ahead.ring[c->ahead.pushed++ % DPSHIM__AHEAD_RING] = *l;
}

/* Under c->lock: the oldest batch balanced ahead, consumed (bad where none
 * is queued: more consumed than balanced ahead). */
static dpshim__ahead_load_t ahead_pop(dpshim__core_t *c) {
  if (c->ahead.popped == c->ahead.pushed)
    return (dpshim__ahead_load_t){.bad = 1};
  return c->ahead.ring[c->ahead.popped++ % DPSHIM__AHEAD_RING];
}

/* Batches balanced ahead that no take consumes: a loader thread of the
 * trainer's own, consumed at the gradient sync. */
static int consumed_at_syncs(const dpshim__core_t *c) {
  return c->ahead.pushed > 0 && c->ahead.takes == 0;
}

/* Under c->lock, at the sync's end: the step consumed M batches balanced
 * ahead (fewer queued: M is not the trainer's, said once). */
static void consume_at_sync(dpshim__core_t *c, dpshim__step_t *s) {
  int64_t queued = c->ahead.pushed - c->ahead.popped;
  if (queued < c->cfg.micro_batches && !c->said_count) {
    c->said_count = 1;
    if (c->world->rank == 0)
      dpshim__core_say(c, "a step consumed %lld batches balanced ahead, but "
                       "%s=%d: set it to the hand-offs of one step",
                       (long long)queued, DPSHIM_ENV_MICRO_BATCHES,
                       (int)c->cfg.micro_batches);
  }
  for (int32_t k = 0; k < c->cfg.micro_batches; k++) {
    dpshim__ahead_load_t l = ahead_pop(c);
    add_loads(s, &l);
  }
}

/* Under c->lock: a hand-off ahead. Where takes consume it they count the
 * steps; else (a loader thread of the trainer's own) it counts in a
 * hand-off step (timed by the loader's pace, which follows the trainer's
 * once its queue is full; no fit is made from those: agree_phase), and
 * the main thread's step begins (sync steps consume it at the sync). */
static void ahead_handoff(dpshim__core_t *c, const dpshim__ahead_load_t *l,
                          double t1) {
  ahead_push(c, l);
  if (c->ahead.takes) return;
  dpshim__step_t *s = counted_step(c);
  if (s && !c->marked && s->handoffs >= c->cfg.micro_batches)
    end_step(c, s, t1, 0);
  if (s) s->handoffs++;
  if (!c->step.open) {
    c->step.open = 1;
    c->step.first_entry = c->step.last_return = t1;
  }
}

/* Hand-off steps end at the next step's first hand-off: the last one ends
 * here where it is whole, and a last step short of its hand-offs is said
 * (DPSHIM_MICRO_BATCHES may not be the trainer's). */
static void end_last_step(dpshim__core_t *c) {
  dpshim__step_t *s = &c->step;
  if (c->mode != DPSHIM__STEP_HANDOFF || !s->open || c->marked) return;
  if (s->handoffs < c->cfg.micro_batches) {
    /* A loader thread's prefetched batches are not the trainer's. */
    if (c->main_handoffs && c->world->rank == 0)
      dpshim__core_say(c, "the run ended %d hand-offs into a step of %s=%d: "
                       "set it to the hand-offs of one step",
                       (int)s->handoffs, DPSHIM_ENV_MICRO_BATCHES,
                       (int)c->cfg.micro_batches);
    return;
  }
  double now = c->clock();
  pthread_mutex_lock(&c->lock);
  end_counted_step(c, s, now);
  pthread_mutex_unlock(&c->lock);
}

void dpshim__core_close(dpshim__core_t *c) {
  end_last_step(c);
  dpshim__steplog_close(&c->log, c->dp);
  dpshim__report_summary(c);
  free_core(c);
  pthread_mutex_destroy(&c->lock);
  pthread_mutex_destroy(&c->handoff);
}

/* ---- warm-up and the step mode ---------------------------------------------------- */

void dpshim__core_noop(dpshim__core_t *c, const char *cause) {
  pthread_mutex_lock(&c->lock);
  int first = !c->noop[0];
  if (first) snprintf(c->noop, sizeof c->noop, "%s", cause);
  pthread_mutex_unlock(&c->lock);
  if (first && c->world->rank == 0)
    dpshim__core_say(c, "nothing is balanced: %s", cause);
}

static void settle(dpshim__core_t *c) {
  pthread_mutex_lock(&c->lock);
  c->settled = 1;
  c->vit_settled = 1;
  pthread_mutex_unlock(&c->lock);
  set_balance_model(c);
}

/* Hand-off steps, agreed: the shadow's steps and points become the
 * run's. */
static void take_shadow(dpshim__core_t *c) {
  pthread_mutex_lock(&c->lock);
  dpshim__handoff_note_t last = c->step.last;
  dpshim__point_t *points = c->points;
  c->step = c->shadow;
  c->step.last = last;
  c->points = c->shadow_points;
  c->shadow_points = points;
  c->stats.steps[0] += c->shadow_steps;
  c->stats.step_time[0] += c->shadow_time;
  c->mode = DPSHIM__STEP_HANDOFF;
  pthread_mutex_unlock(&c->lock);
  if (c->cfg.verbose && c->world->rank == 0)
    dpshim__core_say(c, "no gradient sync seen through MPI on every rank: "
                     "steps are taken from the hand-offs, %d a step (%s)",
                     (int)c->cfg.micro_batches, DPSHIM_ENV_MICRO_BATCHES);
}

/* The steps (as hand-offs count them) that auto waits for a sync: the
 * warm-up's, which are measured both ways meanwhile; three where nothing
 * is to be fitted. */
static int64_t decision_window(const dpshim__core_t *c) {
  if (c->settled) return 3;
  return c->cfg.warmup_last > 2 ? c->cfg.warmup_last : 2;
}

/* Auto: sync steps once every rank has seen its sync; hand-off steps once
 * the decision window has passed without. */
static void decide_mode(dpshim__core_t *c, int all_synced, int64_t steps) {
  int64_t window = decision_window(c);
  if (all_synced) {
    pthread_mutex_lock(&c->lock);
    c->mode = DPSHIM__STEP_SYNC;
    pthread_mutex_unlock(&c->lock);
  } else if (steps > window) {
    take_shadow(c);
  }
}

/* Sync steps asked for, and the window has passed with a rank that never
 * saw its sync: steps never end, so nothing can be fitted or balanced. */
static void check_sync_seen(dpshim__core_t *c, int all_synced) {
  int64_t window = decision_window(c);
  if (all_synced || c->mode != DPSHIM__STEP_SYNC ||
      c->stats.handoffs < window * c->cfg.micro_batches)
    return;
  char cause[320];
  snprintf(cause, sizeof cause,
           "%s=sync, but no gradient sync (%s) was seen on every rank in %lld "
           "hand-offs: set %s=auto or handoff for a sync outside MPI, or %s "
           "to the sync's collective", DPSHIM_ENV_STEP, DPSHIM_ENV_SYNC_OPS,
           (long long)c->stats.handoffs, DPSHIM_ENV_STEP, DPSHIM_ENV_SYNC_OPS);
  dpshim__core_noop(c, cause);
}

/* Until settled and the step mode decided: what this hand-off is, agreed
 * over the world from every rank's step counters and how its batches are
 * consumed. *warm: measure only. Hand-offs ahead that no take consumes
 * are paired with their steps at the syncs; in hand-off steps nothing
 * pairs them, so once the mode's window has passed there is no fit. */
static int agree_phase(dpshim__core_t *c, int64_t step, int main, int *warm,
                       double *arrival) {
  pthread_mutex_lock(&c->lock);
  int64_t counted = c->stats.handoffs / c->cfg.micro_batches + 1;
  int64_t v[5] = {step, -step, !main && c->ahead.takes == 0,
                  -(int64_t)(c->syncs > 0),
                  c->shadow.index > counted ? c->shadow.index : counted};
  pthread_mutex_unlock(&c->lock);
  double t = c->clock();
  int rc = c->world->ops->max(c->world, v, 5);
  *arrival = c->clock() - t;
  if (rc < 0) return rc;
  int all_synced = v[3] == -1;
  int64_t lo = -v[1], hi = v[0]; /* the steps the ranks are in */
  if (c->mode == DPSHIM__STEP_AUTO) {
    decide_mode(c, all_synced, v[4]);
    if (c->mode == DPSHIM__STEP_HANDOFF) lo = hi = c->step.index;
  }
  *warm = c->mode == DPSHIM__STEP_AUTO;
  if (c->settled) return 0;
  if (v[2] && c->mode == DPSHIM__STEP_HANDOFF && v[4] > decision_window(c)) {
    dpshim__report_no_fit(c);
    settle(c);
  } else if (c->mode == DPSHIM__STEP_AUTO) {
    return 0;
  } else if (lo > c->cfg.warmup_last) {
    rc = dpshim__warmup_fit(c);
    settle(c);
  } else {
    check_sync_seen(c, all_synced);
    *warm = c->noop[0] || dpshim__core_warming(c, hi);
  }
  return rc;
}

/* The balanced steps' points join the warm-up's (every rank at the same
 * hand-off: refit_due). */
static int refit_model(dpshim__core_t *c) {
  int rc = dpshim__warmup_fit(c);
  set_balance_model(c);
  return rc;
}

/* ---- hand-offs --------------------------------------------------------------------- */

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
  if (rep->applied) {
    s->applied++;
    s->exchange_time += rep->exchange_s;
    s->repack_time += rep->repack_s;
    s->repack_bytes += (double)rep->repack_bytes;
    s->shift_bytes += (double)rep->shift_bytes;
    s->staged += rep->staged;
  } else {
    s->skipped++;
  }
  if (!rep->load_before) return; /* skipped before solving */
  size_t bytes = (size_t)c->dp->size * sizeof(double);
  last->solved = 1;
  last->imbalance_before = rep->imbalance_before;
  last->imbalance_after = rep->imbalance_after;
  last->lower_bound = rep->lower_bound;
  last->saving_s = rep->saving_s;
  last->cost_s = rep->cost_s;
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

/* ---- the back-off -------------------------------------------------------------------- */

/* With `auto`, a group whose plans keep not paying still pays each
 * hand-off's gather, and in it the wait for the slowest rank's loader
 * (1.5-4 % of a step on this machine's Qwen runs). After BACKOFF_AFTER
 * plans in a row priced out on every rank, main-thread hand-offs pass by
 * without a collective for a window, doubling each time the plan after one
 * is priced out again (up to BACKOFF_MAX hand-offs), back to one once a
 * plan pays. Windows count main-thread hand-offs, the one count every rank
 * shares (steps can differ where a rank's loader runs ahead); a window
 * that ends inside a step leaves the next plan without the loads of that
 * step's earlier micro-batches. Not with the ViT level (its encoder calls
 * follow the hand-offs), on a loader thread, or before the model is
 * final. */
#define BACKOFF_AFTER 2
#define BACKOFF_MAX 8

static int may_back_off(const dpshim__core_t *c) {
  return c->settled && c->mode != DPSHIM__STEP_AUTO && c->cfg.enabled &&
         !c->cfg.vit && c->cfg.threshold < 0 &&
         (c->fitted || c->cfg.have_coefs);
}

/* Under c->lock: whether this main-thread hand-off passes by. */
static int backing_off(const dpshim__core_t *c) {
  return may_back_off(c) && c->main_handoffs <= c->backoff.until;
}

/* Under c->lock, after a main-thread hand-off that gathered: the next
 * window, from its agreed outcome. The step log's notes wait while no
 * hand-off gathers: a window leaves room for them in every rank's queue
 * (a window of k hand-offs ends at most k + 1 steps). */
static void learn_backoff(dpshim__core_t *c, int rc,
                          const dpshim__balance_report_t *rep) {
  if (!may_back_off(c)) return;
  if (rc < 0 || !rep->backoff_ok) {
    c->backoff.streak = 0;
    c->backoff.window = 1;
    return;
  }
  if (++c->backoff.streak < BACKOFF_AFTER) return;
  int32_t room = DPSHIM__LOG_QUEUE - 2 - rep->queued_max;
  int32_t window = c->backoff.window < room ? c->backoff.window : room;
  if (window <= 0) return;
  c->backoff.until = c->main_handoffs + window;
  c->backoff.window = 2 * c->backoff.window < BACKOFF_MAX
                          ? 2 * c->backoff.window : BACKOFF_MAX;
  if (c->cfg.verbose && c->world->rank == 0)
    dpshim__core_say(c, "plans not worth it %d times in a row: the next %d "
                     "hand-off%s pass by without gathering",
                     (int)c->backoff.streak, (int)window,
                     window == 1 ? "" : "s");
}

int dpshim__core_handoff(dpshim__core_t *c, dpshim_batch_t *batch, int main,
                         const char *invalid, int32_t vit_moved) {
  pthread_mutex_lock(&c->handoff);
  double t0 = c->clock(), note[DPSHIM__NOTES];
  pthread_mutex_lock(&c->lock);
  if (main) {
    c->main_handoffs++;
    count_step(c, t0);
    step_enter(&c->step, t0);
    if (c->mode == DPSHIM__STEP_AUTO) step_enter(&c->shadow, t0);
  }
  int64_t step = c->step.index, ahead = ahead_step(c);
  int refit = main ? c->step.handoffs == 0 && refit_due(c, step, 1)
                   : c->ahead.pushed % c->cfg.micro_batches == 0 &&
                         refit_due(c, ahead, 0);
  int pass = main && backing_off(c);
  int noted = !pass && dpshim__steplog_note(&c->log, note);
  int32_t queued = (int32_t)c->log.qlen;
  double wire = c->wire_per_patch;
  pthread_mutex_unlock(&c->lock);

  int warm = 0, rc = 0;
  double arrival = 0;
  dpshim__balance_report_t rep;
  memset(&rep, 0, sizeof rep);
  if (!c->settled || c->mode == DPSHIM__STEP_AUTO)
    rc = agree_phase(c, step, main, &warm, &arrival);
  else if (refit)
    rc = refit_model(c);
  step = c->step.index; /* hand-off steps may have been taken over */
  if (rc < 0) {
    snprintf(rep.message, sizeof rep.message, "the warm-up agreement failed");
  } else if (pass) {
    rep.skip_reason = DPSHIM__BACKED_OFF;
  } else {
    /* The LLM-level balance off (the ViT's alone): gather and agree, as
     * in warm-up, so that steps, the fit and the log still go by. */
    dpshim__handoff_t ho = {main ? step : ahead, !warm && c->cfg.enabled,
                            noted ? note : NULL, c->peers, invalid,
                            main, c->meet[0].s + c->meet[1].s, wire,
                            vit_moved, queued};
    rc = dpshim__balance(c->balancer, c->dp, batch, &ho, &rep);
    arrival += rep.arrival_wait;
  }
  double t1 = c->clock();
  pthread_mutex_lock(&c->lock);
  count_handoff(c, rc, warm || !c->cfg.enabled, &rep);
  dpshim__ahead_load_t load = loads_of(batch, &rep, rc);
  if (main) {
    c->stats.backed_off += pass;
    if (!pass) learn_backoff(c, rc, &rep);
    c->vit_apart = rc == 0 && rep.vit_gated && rep.vit_apart;
    c->vit_quiet = c->vit_apart && rep.vit_quiet;
    c->stats.vit_gated += rc == 0 && rep.vit_gated;
    c->stats.vit_apart += c->vit_apart;
    c->stats.vit_retried += rc == 0 && rep.vit_retry;
    if (rc == 0 && rep.vit_retry) c->meet[0].fresh = c->meet[1].fresh = 1;
    if (rc == 0 && rep.vit_gated && !rep.vit_apart && !rep.vit_retry) {
      c->stats.vit_met_saving += rep.vit_saving_s;
      c->stats.vit_met_cost += rep.vit_meet_s;
    }
    step_leave(&c->step, &load, t0, t1, arrival);
    if (c->mode == DPSHIM__STEP_AUTO)
      step_leave(&c->shadow, &load, t0, t1, arrival);
    c->stats.shim_time += t1 - t0 - arrival;
    c->stats.arrival_time += arrival;
  } else {
    load.shim = t1 - t0;
    load.decision = c->step.last.decision;
    load.reason = c->step.last.reason;
    ahead_handoff(c, &load, t1);
    c->stats.ahead_time += t1 - t0 - arrival;
    c->stats.ahead_arrival += arrival;
  }
  atomic_store(&c->open_hint, 1);
  dpshim__steplog_receive(&c->log, rep.notes);
  pthread_mutex_unlock(&c->lock);
  dpshim__report_handoff(c, rc, &rep);
  pthread_mutex_unlock(&c->handoff);
  return rc;
}

/* ---- the sync and the trainer's marks ---------------------------------------------- */

/* Hand-off steps, where the shim sees a sync too: a sync every k
 * hand-offs where DPSHIM_MICRO_BATCHES says otherwise is said once. */
static void check_sync_period(dpshim__core_t *c) {
  int64_t k = c->main_handoffs - c->handoffs_at_sync;
  c->handoffs_at_sync = c->main_handoffs;
  if (k <= 0 || k == c->cfg.micro_batches || c->marked || c->said_count)
    return;
  c->said_count = 1;
  if (c->world->rank == 0)
    dpshim__core_say(c, "the gradient sync came after %lld hand-offs, but "
                     "%s=%d: set it to the hand-offs of one step",
                     (long long)k, DPSHIM_ENV_MICRO_BATCHES,
                     (int)c->cfg.micro_batches);
}

void dpshim__core_sync_begin(dpshim__core_t *c) {
  if (!atomic_load_explicit(&c->open_hint, memory_order_relaxed)) return;
  double t = c->clock();
  pthread_mutex_lock(&c->lock);
  dpshim__step_t *s = &c->step;
  if (c->mode == DPSHIM__STEP_HANDOFF) {
    check_sync_period(c);
  } else if (s->open && !s->syncing) {
    s->syncing = 1;
    atomic_store(&c->sync_hint, 1);
    s->compute += t - s->last_return;
    s->sync_entry = t;
  }
  pthread_mutex_unlock(&c->lock);
}

void dpshim__core_sync_end(dpshim__core_t *c) {
  if (!atomic_load_explicit(&c->sync_hint, memory_order_relaxed)) return;
  double now = c->clock();
  pthread_mutex_lock(&c->lock);
  dpshim__step_t *s = &c->step;
  if (s->syncing) {
    c->syncs++;
    int at_syncs = consumed_at_syncs(c);
    if (at_syncs) consume_at_sync(c, s);
    end_step(c, s, now, now - s->sync_entry);
    /* The loader's next hand-off may come any time: the step is the
     * trainer's from here. */
    if (at_syncs) {
      s->open = 1;
      s->first_entry = s->last_return = now;
      atomic_store(&c->open_hint, 1);
    }
  }
  pthread_mutex_unlock(&c->lock);
}

/* The first mark: the steps closed before it by counting hand-offs were
 * not the trainer's; this one ends its first. */
static void forget_counted_steps(dpshim__core_t *c, dpshim__step_t *s) {
  double wrong = (double)(s->index - 1);
  s->index = 1;
  if (s == &c->shadow) c->shadow_steps -= wrong;
  else c->stats.steps[c->fitted || c->cfg.have_coefs] -= wrong;
}

/* Under c->lock, at the first take: hand-offs ahead counted in hand-off
 * steps before it were not the trainer's steps; the takes count them. */
static void start_taking(dpshim__core_t *c) {
  dpshim__step_t *s = counted_step(c);
  if (!s || !s->handoffs) return;
  forget_counted_steps(c, s);
  s->index = 0;
  next_step(s);
}

void dpshim__core_taken(dpshim__core_t *c, double waited) {
  double t1 = c->clock(), t0 = t1 - (waited > 0 ? waited : 0);
  pthread_mutex_lock(&c->lock);
  if (c->ahead.takes++ == 0) start_taking(c);
  c->main_handoffs++;
  count_step(c, t0);
  dpshim__ahead_load_t load = ahead_pop(c);
  step_enter(&c->step, t0);
  step_leave(&c->step, &load, t0, t1, 0);
  if (c->mode == DPSHIM__STEP_AUTO) {
    step_enter(&c->shadow, t0);
    step_leave(&c->shadow, &load, t0, t1, 0);
  }
  c->stats.shim_time += t1 - t0;
  atomic_store(&c->open_hint, 1);
  pthread_mutex_unlock(&c->lock);
}

void dpshim__core_step_end(dpshim__core_t *c) {
  double now = c->clock();
  pthread_mutex_lock(&c->lock);
  dpshim__step_t *s = counted_step(c);
  if (s && s->open) {
    if (s->handoffs != c->cfg.micro_batches && !c->said_count &&
        c->world->rank == 0)
      dpshim__core_say(c, "dpshim_step_end() came after %d hand-offs, but "
                       "%s=%d: steps follow the marks", (int)s->handoffs,
                       DPSHIM_ENV_MICRO_BATCHES, (int)c->cfg.micro_batches);
    c->said_count |= s->handoffs != c->cfg.micro_batches;
    if (!c->marked) forget_counted_steps(c, s);
    c->marked = 1;
    end_counted_step(c, s, now);
  }
  pthread_mutex_unlock(&c->lock);
}

/* ---- encoder calls ------------------------------------------------------------------ */

int dpshim__core_vit_gate(const dpshim__core_t *c) {
  return c->cfg.vit && c->cfg.vit_threshold < 0;
}

int dpshim__core_vit_apart(dpshim__core_t *c, int *quiet) {
  pthread_mutex_lock(&c->lock);
  int apart = c->vit_apart;
  *quiet = c->vit_quiet;
  pthread_mutex_unlock(&c->lock);
  return apart;
}

/* Under c->lock: what a grouped call cost this rank beyond the encoder and
 * the wait for the other ranks (the header round, the plan, the copies and
 * exchanges), a moving average per kind: a micro-batch's meeting costs a
 * forward's and a backward's. An async forward's wait adds to the latest
 * forward's share (forwards between the two make it approximate). A
 * shipped forward's includes its ship's where the ship was made on the
 * forwards' thread (the mean of the ships kept and not yet taken); one
 * made on another (a loader's) is off their path. A retry's call (the
 * gate's, policy.h) starts the average again. */
static void learn_meet(dpshim__core_t *c, const dpshim__vit_report_t *r,
                       double seconds) {
  if (!r->grouped) return;
  double cost = fmax(0, seconds - r->encode_s - r->arrival_s);
  if (r->kind == DPSHIM__VIT_SHIP && r->shipped > 0) {
    c->ship_cost += r->ahead ? 0 : cost;
    c->ships++;
  }
  if (r->kind == DPSHIM__VIT_WAIT) { /* an async forward's return */
    if (c->stats.vit_gated > 0) c->stats.vit_met_took += cost;
    dpshim__policy_learn_more(&c->meet[0], cost);
  }
  int k = r->kind == DPSHIM__VIT_FORWARD ? 0
          : r->kind == DPSHIM__VIT_BACKWARD ? 1 : -1;
  if (k < 0) return;
  if (k == 0 && r->shipped != 0 && c->ships > 0) {
    double part = c->ship_cost / (double)c->ships--;
    c->ship_cost -= part;
    cost += part;
  }
  if (c->stats.vit_gated > 0) c->stats.vit_met_took += cost;
  dpshim__policy_learn(&c->meet[k], cost);
}

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
  n->shipped += r->shipped > 0;
  n->shipped_again += r->shipped < 0;
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

/* The encoder's time and this rank's images, for the step's point. */
static void add_vit_call(dpshim__step_t *s, const dpshim__vit_report_t *r,
                         double seconds) {
  s->vit_time += r->encode_s;
  s->vit_wall += seconds;
  if (r->kind != DPSHIM__VIT_FORWARD) return;
  s->vit_len2 += r->own_patches_sq;
  s->vit_len += r->own_patches;
  s->vit_count += (double)r->own_images;
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
  add_vit_call(s, rep, seconds);
  learn_meet(c, rep, seconds);
  if (rep->own_patches > 0)
    c->wire_per_patch =
        fmax(c->wire_per_patch, rep->own_wire / rep->own_patches);
  if (c->mode == DPSHIM__STEP_AUTO) add_vit_call(&c->shadow, rep, seconds);
  pthread_mutex_unlock(&c->lock);
  dpshim__report_vit(c, rep);
}
