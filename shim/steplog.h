/* DPSHIM_LOG: one JSON line per step per DP group, written by the group's
 * DP rank 0 with every rank's times.
 *
 * No collective of its own while the job runs: each rank queues its
 * finished steps' times and sends the oldest with each hand-off's header
 * (balance.h's note), so lines complete as hand-offs go by, in whatever
 * order a loader thread's hand-offs bring them. At close one gather over
 * the group collects what is still queued. The file is opened at the first
 * line (a process that never hands off leaves none); a write that fails is
 * said once and ends the log.
 */
#ifndef DPSHIM_SHIM_STEPLOG_H
#define DPSHIM_SHIM_STEPLOG_H

#include <stdint.h>
#include <stdio.h>

#include "balance.h"
#include "comm.h"

#define DPSHIM__LOG_QUEUE 16 /* finished steps a rank holds before sending */
#define DPSHIM__LOG_RING 32  /* steps DP rank 0 waits on at once */
/* Each rank's times of a step: compute, wait, shim (on the trainer's
 * path), arrival, encoder, ahead (the shim balancing its batches ahead,
 * beside the compute). */
#define DPSHIM__LOG_TIMES 6

/* What a step's line says about its hand-offs (the latest one's plan). */
typedef struct dpshim__handoff_note {
  const char *decision; /* "warmup", "apply", "skip", "error" */
  const char *reason;   /* skip: why */
  int solved;           /* loads and imbalances below are set */
  double imbalance_before, imbalance_after, lower_bound;
  double saving_s, cost_s; /* priced (auto): what the plan saves and costs */
  double bytes_moved, bytes_total; /* moved: summed over the step */
  double bytes_inter_host; /* of moved, between two hosts' ranks */
  int32_t hosts;           /* hosts the group spans */
  double *load_before, *load_after; /* [ranks], owned */
  /* The cost model the plan used, and where it came from: "fit" (with its
   * prediction errors), "coefs" (DPSHIM_COEFS) or "linear" (no fit). */
  dpshim_cost_model_t model;
  const char *model_source;
  double fit_error_mean, fit_error_max;
} dpshim__handoff_note_t;

/* What a step's line says about its encoder calls (the group's, agreed). */
typedef struct dpshim__vit_note {
  int64_t calls, applied, skipped, failed, solved;
  /* forwards shipped ahead: that took their ship, that were planned again
   * (a call that differed from its ship) */
  int64_t shipped, shipped_again;
  double imbalance_before, imbalance_after; /* sums over the solved */
  double bytes_moved;
} dpshim__vit_note_t;

typedef struct dpshim__log_line {
  int64_t step;  /* 0: free */
  char *prefix;  /* everything but the times; NULL until rank 0 closed it */
  int32_t have;  /* ranks whose times arrived */
  uint8_t *got;  /* [ranks] */
  double *times; /* [ranks * DPSHIM__LOG_TIMES] */
} dpshim__log_line_t;

typedef struct dpshim__steplog {
  const char *path; /* NULL: no log */
  int writer;       /* DP rank 0 of its group */
  int group, ranks;
  FILE *file;
  int broken;
  void (*say)(const char *line);
  double queue[DPSHIM__LOG_QUEUE][DPSHIM__NOTES];
  int qhead, qlen;
  dpshim__log_line_t ring[DPSHIM__LOG_RING];
} dpshim__steplog_t;

/* path NULL or "": no log. Returns 0 or DPSHIM_ENOMEM. */
int dpshim__steplog_open(dpshim__steplog_t *g, const char *path, int writer,
                         int group, int ranks, void (*say)(const char *));
/* Collective over the DP group: the lines still pending, then frees. */
void dpshim__steplog_close(dpshim__steplog_t *g, dpshim__comm_t *dp);

/* A step ended: its times (seconds) queued, and on the writer its line
 * (vit: the step's encoder calls, or NULL). */
void dpshim__steplog_step(dpshim__steplog_t *g, int64_t step,
                          const double times[DPSHIM__LOG_TIMES],
                          const dpshim__handoff_note_t *last,
                          const dpshim__vit_note_t *vit);
/* The note to send with the next header: 1 and note[] filled, or 0. */
int dpshim__steplog_note(dpshim__steplog_t *g, double *note);
/* The writer: every rank's notes, as a hand-off gathered them. */
void dpshim__steplog_receive(dpshim__steplog_t *g, const double *notes);

#endif
