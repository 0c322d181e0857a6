/* The shim's core: its one state struct and the events the wrappers report.
 *
 * The wrappers (mpi_init.c, mpi_sync.c, hook_packload.c, api.c) only
 * forward and call these; step.c turns the events into steps, warm-up
 * points and balancing; report.c prints and logs. Nothing happens before
 * MPI_Init has gone through the shim, nor when balancing is off.
 */
#ifndef DPSHIM_SHIM_SHIM_H
#define DPSHIM_SHIM_SHIM_H

#include <mpi.h>
#include <pthread.h>
#include <stdio.h>

#include "balance.h"
#include "clock.h"
#include "comm.h"
#include "config.h"
#include "dpshim/batch.h"
#include "dpshim/fit.h"

#define DPSHIM__HIDDEN __attribute__((visibility("hidden")))

/* One warm-up step of this rank: what it computed and how long it took. */
typedef struct dpshim__point {
  double sum_len2, sum_len, count;
  double compute; /* first hand-off return -> sync entry, minus hand-offs */
  double step;    /* first hand-off return -> sync exit */
} dpshim__point_t;

/* This rank's step in progress. */
typedef struct dpshim__step {
  int64_t index;     /* 1-based */
  int open;          /* a hand-off came since the last sync */
  double first_return, last_return, sync_entry;
  double compute, shim; /* shim: own time in hand-offs, arrival excluded */
  double arrival;       /* waiting in hand-offs for the other ranks */
  double sum_len2, sum_len, count;
  int balanced, failed;            /* hand-offs that solved, that failed */
  dpshim__balance_report_t last;   /* the latest hand-off that did not fail */
  double bytes_moved;
} dpshim__step_t;

/* A finished step's DPSHIM_LOG line, until every rank's times arrive. */
typedef struct dpshim__logline {
  int pending;
  double times[DPSHIM__NOTES]; /* compute, wait, shim, arrival (seconds) */
  char *prefix;                /* DP rank 0: the line without the times */
} dpshim__logline_t;

/* Totals for the summary at MPI_Finalize. The balancing ones are the same on
 * every rank of a group; the timing ones are this rank's. */
typedef struct dpshim__stats {
  int64_t handoffs, applied, skipped, failed;
  double imbalance_before, imbalance_after; /* sums over solved hand-offs */
  int64_t solved;
  double bytes_moved, bytes_total;
  /* [0]: steps before the fit is used, [1]: after */
  double steps[2], wait[2], step_time[2];
  double shim_time, arrival_time;
} dpshim__stats_t;

typedef struct dpshim__state {
  pthread_mutex_t lock; /* step bookkeeping, shared with a loader thread */
  int in_init;          /* inside the outer MPI_Init* wrapper */
  int mpi_up;           /* MPI_Init went through the shim */
  int active;           /* balancing is on */
  dpshim__config_t cfg;
  dpshim__clock_t clock;
  int provided;
  pthread_t init_thread;
  int world_rank, world_size;
  int dp_rank, dp_size, dp_group;
  MPI_Comm world;     /* private duplicate: agreement, fit, summary */
  MPI_Comm steps;     /* private, per DP group: the step log (main thread) */
  dpshim__comm_t dp;  /* private, per DP group: the balancing traffic */
  dpshim__balancer_t *balancer;
  dpshim_cost_model_t model;
  int fitted;
  dpshim_fit_result_t fit;
  dpshim__step_t step;
  int threaded;               /* a hand-off came from another thread */
  int64_t threaded_handoffs;
  dpshim__point_t *points; /* [cfg.nwarmup] */
  int32_t npoints;
  dpshim__stats_t stats;
  FILE *log;
  dpshim__logline_t line;
  void *real_packload_next;
  int packload_missing; /* dlsym failed; said once */
  int said_not_initialised;
} dpshim__state_t;

DPSHIM__HIDDEN extern dpshim__state_t dpshim__state;

/* One line on stderr, prefixed "dpshim: ". */
DPSHIM__HIDDEN void dpshim__say(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

/* ---- events (step.c) -------------------------------------------------------- */

/* After PMPI_Init: configuration, agreement, communicators. */
DPSHIM__HIDDEN void dpshim__on_init(int provided);
/* Before PMPI_Finalize: summary, then release everything. */
DPSHIM__HIDDEN void dpshim__on_finalize(void);
/* Whether `step` (1-based) is a warm-up step: measured, not balanced. None
 * is with DPSHIM_COEFS. *first says it is the cold start, dropped. */
DPSHIM__HIDDEN int dpshim__warming(const dpshim__state_t *st, int64_t step,
                                   int *first);
/* A batch was handed off; balances it. Returns 0 or a DPSHIM_E* code. */
DPSHIM__HIDDEN int dpshim__on_handoff(dpshim_batch_t *batch);
/* Whether a call of collective `op` ends a step: then the wrapper times it
 * and calls dpshim__on_sync_exit() after the real call. */
DPSHIM__HIDDEN int dpshim__on_sync_entry(unsigned op);
DPSHIM__HIDDEN void dpshim__on_sync_exit(void);

/* ---- warm-up fit (warmup.c) ------------------------------------------------- */

/* Collective over the world: fits on every rank's points; every rank gets
 * the same model. Returns 0, or an error with the reason in st->fit.message. */
DPSHIM__HIDDEN int dpshim__fit_warmup(dpshim__state_t *st);

/* ---- diagnostics (report.c) ------------------------------------------------- */

/* After each balanced hand-off: the verbose block on the first group's DP
 * rank 0. rc is what dpshim__balance() returned. */
DPSHIM__HIDDEN void dpshim__report_handoff(dpshim__state_t *st, int rc,
                                           const dpshim__balance_report_t *rep);
/* DPSHIM_LOG. At each step's end, before its times are cleared, the step's
 * line is made; every rank's times reach DP rank 0 with the next hand-off's
 * gather (report_note() is this rank's, report_notes() receives them all),
 * or else by a gather of their own (collective over the DP group). */
DPSHIM__HIDDEN void dpshim__report_step(dpshim__state_t *st, double wait);
DPSHIM__HIDDEN const double *dpshim__report_note(const dpshim__state_t *st);
DPSHIM__HIDDEN void dpshim__report_notes(dpshim__state_t *st,
                                         const double *notes);
/* Collective over the DP group: a line still pending, at MPI_Finalize. */
DPSHIM__HIDDEN void dpshim__report_flush(dpshim__state_t *st);
/* Collective over the world: the summary, printed by rank 0. */
DPSHIM__HIDDEN void dpshim__report_summary(dpshim__state_t *st);

#endif
