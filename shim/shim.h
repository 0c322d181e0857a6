/* The preloaded shim's one state struct, and what its MPI wrappers share.
 *
 * The wrappers (mpi_init.c, mpi_sync.c, mpi_wait.c, api.c) forward to PMPI
 * and report events to the core (core.h), which holds all the logic;
 * setup.c starts and ends it. Nothing happens before MPI_Init has gone
 * through the shim, after MPI_Finalize, nor when balancing is off.
 */
#ifndef DPSHIM_SHIM_SHIM_H
#define DPSHIM_SHIM_SHIM_H

#include <mpi.h>
#include <pthread.h>

#include "ahead.h"
#include "clock.h"
#include "comm.h"
#include "config.h"
#include "core.h"
#include "vit_balance.h"

#define DPSHIM__MAX_SYNC_REQUESTS 256 /* non-blocking syncs in flight */

typedef struct dpshim__state {
  pthread_mutex_t lock; /* init, the sync requests */
  int in_init;          /* inside the outer MPI_Init* wrapper */
  int mpi_up;           /* MPI_Init went through the shim */
  int finalized;        /* MPI_Finalize went through the shim */
  int active;           /* balancing is on */
  int core_open;        /* the core is open: closed at MPI_Finalize */
  int provided;         /* the level MPI gives for what the trainer asked */
  int mpi_provided;     /* the level MPI gave the shim */
  pthread_t init_thread;
  dpshim__config_t cfg;
  dpshim__clock_t clock;
  int world_rank, world_size;
  MPI_Comm world;       /* private duplicate of MPI_COMM_WORLD */
  MPI_Group dp_ranks;   /* this rank's DP group, as a group of world */
  int span_key;         /* attribute: does a communicator span dp_ranks? */
  MPI_Comm span_comm;   /* the last one asked about (main thread) */
  int span_yes;         /* and the answer */
  dpshim__comm_t world_seam, dp_seam, peers_seam;
  dpshim__core_t core;
  /* Encoder calls: one at a time, through one object whatever the state
   * (keys outlive MPI_Init and MPI_Finalize); balanced over vit_seam (the
   * DP group's ranks, a communicator of its own) while vit_on. */
  pthread_mutex_t encoder_lock;
  dpshim__vit_t *vit;
  dpshim__comm_t vit_seam;
  int vit_on, said_vit_thread, said_ship_thread;
  /* the thread of the latest forward (MPI_Init's until then): a ship made
   * on another is off the forwards' path */
  pthread_t forward_thread;
  MPI_Request sync[DPSHIM__MAX_SYNC_REQUESTS]; /* non-blocking syncs */
  int nsync;
  int said_not_initialised;
  /* Balancing ahead (<dpshim/ahead.h>): the shim's own thread, made at
   * the first call that can use it; whether it cannot (said once) */
  dpshim__ahead_t *ahead;
  int ahead_off;
} dpshim__state_t;

extern dpshim__state_t dpshim__state;

/* One line on stderr, prefixed "dpshim: ". */
void dpshim__say(const char *line);
/* Seconds, on the shim's clock (meaningful once MPI_Init went through). */
double dpshim__now(void);

/* ---- api_vit.c ---------------------------------------------------------------- */

/* The encoder object, made at the first need; NULL when out of memory.
 * Under encoder_lock. */
dpshim__vit_t *dpshim__vit_of(dpshim__state_t *st);
/* A point every rank of the DP group reaches (an LLM hand-off on the main
 * thread, MPI_Finalize): ranks whose encoder calls are out of step meet
 * here. */
void dpshim__vit_point(dpshim__vit_kind_t kind);
/* The ViT gate's answer at a main-thread hand-off, for the encoder calls
 * up to the next (dpshim__vit_set_apart). */
void dpshim__vit_gate(int apart);
/* This rank's encoder forwards in flight whose images moved. */
int32_t dpshim__vit_moved(void);

/* ---- api_ahead.c ---------------------------------------------------------------- */

/* Whether the calling thread is the shim's own balancing thread. */
int dpshim__on_ahead_thread(void);
/* Before the core closes: what was asked ahead is fetched, the thread
 * joined. */
void dpshim__ahead_stop(void);

/* ---- setup.c ------------------------------------------------------------------ */

/* After PMPI_Init: configuration, agreement, communicators, the core. */
void dpshim__on_init(void);
/* Before PMPI_Finalize: the core's last collectives, then release. */
void dpshim__on_finalize(void);

/* ---- mpi_sync.c ---------------------------------------------------------------- */

/* Whether a call of collective `op` (DPSHIM__SYNC_* bit) on `comm` is the
 * gradient sync: balancing on, the main thread, an op of DPSHIM_SYNC_OPS,
 * and a communicator that spans this rank's whole DP group. */
int dpshim__is_sync(unsigned op, MPI_Comm comm);
/* The span attribute's delete callback (MPI_Comm_delete_attr_function). */
int dpshim__forget_comm(MPI_Comm comm, int key, void *value, void *extra);

/* ---- mpi_wait.c ---------------------------------------------------------------- */

/* A non-blocking sync was issued: its request ends the step when the last
 * one in flight completes. */
void dpshim__sync_request(MPI_Request request);

#endif
