/* The shim's core: steps, warm-up, the fit, the step log and the summary,
 * driven by the events the MPI wrappers report, over the comm seam.
 *
 * No MPI and no globals: the shim owns one core in its state struct; the
 * unit tests run one per thread over the mock. Every collective the core
 * starts is at a hand-off (which every rank of the job reaches the same
 * number of times) or at close (MPI_Finalize, which every rank reaches):
 * never at a sync, whose communicator the core does not see.
 *
 * A step ends at the gradient sync where the shim sees it (an MPI call,
 * DPSHIM_SYNC_OPS), else after DPSHIM_MICRO_BATCHES hand-offs or at the
 * trainer's mark (dpshim_step_end). DPSHIM_STEP=auto (the default) agrees
 * which: sync steps once every rank has seen a sync; hand-off steps when
 * the warm-up window has passed without (a shadow step counts them
 * meanwhile, so their warm-up is not lost).
 *
 * Warm-up is agreed: until the cost model is final ("settled") and the
 * step mode decided, each hand-off starts with a small max over the world
 * of each rank's step counters and thread, so that every rank takes the
 * same decision even when a loader thread runs ahead of the steps:
 * warm-up (measure, move nothing), fit (warmup.h), or no fit at all (a
 * loader thread's hand-offs in hand-off steps, where nothing says which
 * step consumed which batch).
 *
 * Balancing ahead: a loader thread's hand-off is balanced before the step
 * that consumes it. Its loads are kept by its place in the sequence
 * (hand-off i is micro-batch i mod M of step i div M + 1, M =
 * DPSHIM_MICRO_BATCHES), which keys its micro-batch history, and are
 * queued until the trainer consumes the batch: at each take
 * (dpshim_batch_taken, which then also counts the steps), else M at each
 * gradient sync. A step's point is so made of the batches it consumed,
 * whenever they were balanced.
 */
#ifndef DPSHIM_SHIM_CORE_H
#define DPSHIM_SHIM_CORE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "balance.h"
#include "comm.h"
#include "config.h"
#include "dpshim/batch.h"
#include "dpshim/fit.h"
#include "policy.h"
#include "steplog.h"
#include "vit_balance.h"

/* One warm-up step of one rank, sent as doubles. */
typedef struct dpshim__point {
  double valid; /* 1: every hand-off of the step was measured */
  double index; /* the step's: ranks' points are fitted together where
                 * their indices agree (a ring slot may lag on a rank) */
  double sum_len2, sum_len, count, sum_patches_sq, sum_patches;
  double compute; /* first hand-off entry -> sync entry (hand-off steps:
                   * the step's end), less hand-offs and, with the ViT
                   * balance, less the encoder calls */
  double step;    /* first hand-off entry -> the step's end, less the
                   * shim's own time (waits for the other ranks count) */
  /* The encoder's calls: own images' patches^2, patches, images; seconds */
  double vit_len2, vit_len, vit_count, vit_time;
} dpshim__point_t;

/* This rank's step in progress: main-thread hand-offs, then its end. */
typedef struct dpshim__step {
  int64_t index; /* 1-based */
  int32_t handoffs; /* hand-offs in this step */
  int open;      /* a hand-off came since the last sync */
  int syncing;   /* the trainer waits for the sync */
  int bad;       /* a warm-up hand-off failed: no point */
  double first_entry, last_return, sync_entry;
  double compute, shim, arrival;
  double ahead; /* the shim's time balancing the step's batches ahead */
  double sum_len2, sum_len, count, sum_patches_sq, sum_patches;
  dpshim__handoff_note_t last; /* the latest hand-off, for the step log */
  dpshim__vit_note_t vit;       /* the step's encoder calls */
  double vit_len2, vit_len, vit_count, vit_time; /* for the ViT's point */
  double vit_wall; /* in the encoder calls, whole (the shim's part too) */
} dpshim__step_t;

/* Totals for the summary. The balancing ones are the same on every rank of
 * a group; the timing ones are this rank's. */
/* The skip reason of a main-thread hand-off the back-off passed by. */
#define DPSHIM__BACKED_OFF "backed-off"

typedef struct dpshim__stats {
  int64_t handoffs, applied, skipped, failed, solved;
  double imbalance_before, imbalance_after; /* sums over solved hand-offs */
  double bytes_moved, bytes_total, bytes_inter_host;
  /* [0]: steps before the cost model is final, [1]: after */
  double steps[2], wait[2], step_time[2];
  /* On the trainer's path: inline hand-offs, and the waits for batches
   * balanced ahead; beside it: the hand-offs balanced ahead, and their
   * waits for the other ranks */
  double shim_time, arrival_time, ahead_time, ahead_arrival;
  dpshim__vit_note_t vit; /* encoder calls (forwards), as a step's */
  /* this rank's: in the encoder, in the balance, waiting in it for the
   * other ranks */
  double vit_time, vit_shim, vit_arrival;
  /* Main-thread hand-offs the ViT gate decided, and those whose encoder
   * calls it kept apart (DPSHIM_VIT_TRIGGER_THRESHOLD=auto) */
  int64_t vit_gated, vit_apart;
  int64_t vit_retried; /* of those met, to measure meeting again */
  /* Of those it let meet, retries aside: the savings it predicted and
   * the costs it priced meeting at (seconds, summed) */
  double vit_met_saving, vit_met_cost;
  /* What this rank's grouped calls took beyond the encoder and the waits
   * once the gate decided (seconds, summed) */
  double vit_met_took;
  /* Main-thread hand-offs passed by without gathering (the back-off) */
  int64_t backed_off;
  /* This rank's applied hand-offs: seconds in the exchange and the repack,
   * the bytes the repack copied, those shifting would have copied, and
   * how many staged what arrived */
  double exchange_time, repack_time, repack_bytes, shift_bytes;
  int64_t staged;
  /* Sync steps after the warm-up: how far this rank's compute was from
   * what the cost model predicted for its samples (relative, summed), and
   * over how many steps */
  double predicted_error, predicted_steps;
} dpshim__stats_t;

/* A batch balanced ahead, until the step that consumes it takes it. */
typedef struct dpshim__ahead_load {
  int bad; /* its hand-off failed */
  const char *decision, *reason; /* for the log line of the step taking it */
  double sum_len2, sum_len, count, sum_patches_sq, sum_patches;
  double shim; /* the hand-off's seconds, the wait for the ranks included */
} dpshim__ahead_load_t;

/* Batches balanced ahead and not yet consumed: beyond this, the oldest
 * are forgotten (their steps then make no point). */
#define DPSHIM__AHEAD_RING 64

typedef struct dpshim__core {
  dpshim__config_t cfg;
  dpshim__comm_t *world, *dp, *peers;
  int dp_group, ngroups;
  int32_t *host, nhosts; /* [dp size] each DP rank's host; hosts spanned */
  double (*clock)(void);         /* seconds */
  void (*say)(const char *line); /* one diagnostic line */
  pthread_mutex_t lock;    /* steps and totals: sync and hand-off threads */
  pthread_mutex_t handoff; /* one hand-off at a time */
  dpshim__balancer_t *balancer;
  int settled; /* the cost model is final; changes only at agreed points */
  int fitted;
  /* The fitted model can change no plan (nothing above linear in it)
   * while the step times vary: hand-off steps refit it (agreed) */
  int stuck;
  dpshim_cost_model_t model;
  dpshim_fit_result_t fit;
  /* The same points fitted without the vision terms, for the report: set
   * when fit_vision (the warm-up batches gave their images). */
  dpshim_fit_result_t fit_text;
  int fit_vision;
  /* Which fit was taken, and how well each predicted the warm-up's step
   * times ([0] per-rank, [1] step-time; mean < 0: not made). */
  dpshim_fit_method_t fit_method;
  double step_error_mean[2], step_error_max[2];
  /* The ViT balance's cost per image: final once vit_settled (agreed at
   * the same point as the LLM's model), fitted unless DPSHIM_VIT_COEFS. */
  int vit_settled, vit_fitted;
  dpshim_cost_model_t vit_model;
  dpshim_fit_result_t vit_fit;
  /* The ViT gate: whether the latest main-thread hand-off kept its encoder
   * calls apart (agreed), and what a grouped forward [0] and backward [1]
   * cost this rank beyond the encoder and the waits (seconds, averaged) */
  int vit_apart, vit_quiet;
  dpshim__policy_learnt_t meet[2];
  /* Ships kept for forwards still to come, and their summed cost */
  int64_t ships;
  double ship_cost;
  /* The most bytes a meeting moved per patch of this rank's own images in
   * any forward so far (inputs, embeddings and their gradients); 0 before
   * its first forward with an image. */
  double wire_per_patch;
  /* How steps end: the configured mode, or in auto the agreed one
   * (DPSHIM__STEP_AUTO until agreed). */
  dpshim__step_mode_t mode;
  dpshim__step_t step;
  /* Auto, undecided: the steps as hand-offs would count them, with their
   * warm-up points, taken over if hand-off steps are agreed. */
  dpshim__step_t shadow;
  dpshim__point_t *shadow_points;
  double shadow_steps, shadow_time;
  int64_t syncs;         /* this rank's syncs seen (main thread) */
  int64_t main_handoffs; /* this rank's main-thread hand-offs */
  int64_t handoffs_at_sync; /* main_handoffs at the last sync's begin */
  int marked;            /* dpshim_step_end() came: steps follow marks */
  /* Hand-offs balanced ahead (not on the trainer's thread): pushed, and
   * consumed, in order; takes: dpshim_batch_taken() calls seen. */
  struct {
    dpshim__ahead_load_t ring[DPSHIM__AHEAD_RING];
    int64_t pushed, popped, takes;
  } ahead;
  /* `auto`'s back-off (core.c): main-thread hand-offs up to the `until`th
   * pass by without gathering; `streak` plans priced out in a row, the
   * next window `window` hand-offs. The same on every rank: from agreed
   * outcomes and hand-off counts. */
  struct {
    int64_t until;
    int32_t streak, window;
  } backoff;
  int said_count;        /* a hand-off count that does not fit, said */
  /* Why nothing is balanced, agreed ("" when something can be): said
   * once by world rank 0 when found, repeated by the summary. */
  char noop[320];
  /* step.open and step.syncing, readable without the lock: a sync outside
   * a step (a benchmark's allreduce loop) costs no clock read. */
  atomic_int open_hint, sync_hint;
  /* [slots]: the warm-up's by ordinal, then (hand-off steps) a ring of
   * the balanced steps' since, for the refits */
  dpshim__point_t *points;
  int64_t refits;          /* taken */
  dpshim__stats_t stats;
  dpshim__steplog_t log;
  double opened_at;
} dpshim__core_t;

typedef struct dpshim__core_setup {
  const dpshim__config_t *cfg;
  dpshim__comm_t *world, *dp; /* dp: this rank's DP group */
  dpshim__comm_t *peers; /* its TP/CP peers, one per DP group; may be NULL */
  int dp_group, ngroups;
  /* [dp size]: each DP rank's host, numbered from 0 in rank order; NULL:
   * one host. Copied. */
  const int32_t *host;
  double (*clock)(void);
  void (*say)(const char *line);
} dpshim__core_setup_t;

/* Returns 0 or DPSHIM_ENOMEM (this rank's; the caller agrees). */
int dpshim__core_open(dpshim__core_t *c, const dpshim__core_setup_t *s);
/* Collective over the world: pending step-log lines, the summary (world
 * rank 0 prints it); then frees. */
void dpshim__core_close(dpshim__core_t *c);

/* A batch handed off, from the thread that called MPI_Init (main) or a
 * loader thread. Collective over the DP group (and, until settled, the
 * world). `invalid`, when not NULL, says why this rank's adapter could not
 * describe its batch: the hand-off then fails everywhere with that reason.
 * vit_moved: this rank's encoder forwards in flight whose images moved.
 * Returns 0 or the DPSHIM_E* code every rank of the group returns. */
int dpshim__core_handoff(dpshim__core_t *c, dpshim_batch_t *batch, int main,
                         const char *invalid, int32_t vit_moved);

/* The gradient sync, on the main thread: begin when the trainer starts
 * waiting for it (a blocking call's entry, the first wait on a request),
 * end when it has completed. A begin without an open step, and an end
 * without a begin, do nothing. Starts no collective. */
void dpshim__core_sync_begin(dpshim__core_t *c);
void dpshim__core_sync_end(dpshim__core_t *c);

/* The trainer took a batch balanced ahead (dpshim_batch_taken), on the
 * main thread, after waiting `waited` seconds for it: a hand-off on the
 * trainer's path for the steps, with the loads of the oldest batch
 * balanced ahead. Starts no collective. */
void dpshim__core_taken(dpshim__core_t *c, double waited);

/* The trainer marked its step's end (dpshim_step_end), on the main
 * thread: in hand-off steps the step ends here, not at the next hand-off.
 * Starts no collective. */
void dpshim__core_step_end(dpshim__core_t *c);

/* Nothing can be balanced, for `cause` (one line naming it and the
 * setting that fixes it; the same on every rank): said by world rank 0,
 * kept for the summary. The first cause stays. */
void dpshim__core_noop(dpshim__core_t *c, const char *cause);

/* Whether the ViT gate is on (DPSHIM_VIT_BALANCE with an `auto` ViT
 * trigger): hand-offs on the main thread decide whether their micro-batch's
 * encoder calls meet. */
int dpshim__core_vit_gate(const dpshim__core_t *c);
/* The latest main-thread hand-off's answer, the same on every rank of the
 * group: 1 where its encoder calls stay apart; *quiet: and none meets
 * before the next hand-off (dpshim__balance_report_t's vit_quiet). */
int dpshim__core_vit_apart(dpshim__core_t *c, int *quiet);
/* The ViT cost model: 1 and *model once final, 0 in warm-up. */
int dpshim__core_vit_model(dpshim__core_t *c, dpshim_cost_model_t *model);
/* An encoder call (dpshim__vit_*) done on this rank: the totals, the
 * step's log line and warm-up point, diagnostics. `seconds`: the call's
 * whole time in the shim. */
void dpshim__core_vit_call(dpshim__core_t *c, const dpshim__vit_report_t *rep,
                           double seconds);

/* One diagnostic line through c->say (printf format). */
void dpshim__core_say(const dpshim__core_t *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Points a rank keeps: the warm-up's and the refits' ring. */
int32_t dpshim__core_slots(const dpshim__core_t *c);

/* Whether step `step` is a warm-up step of this configuration. */
int dpshim__core_warming(const dpshim__core_t *c, int64_t step);

#endif
