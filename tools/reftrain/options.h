/* reftrain's command line. */
#ifndef REFTRAIN_OPTIONS_H
#define REFTRAIN_OPTIONS_H

#include "../emu/emu.h"
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum rt_mode { RT_EMULATE, RT_CPU } rt_mode_t;

/* How the gradient buffer is all-reduced at the end of a step. */
typedef enum rt_sync {
  RT_SYNC_ALLREDUCE,  /* one blocking MPI_Allreduce */
  RT_SYNC_IWAIT,      /* MPI_Iallreduce per bucket, MPI_Wait on each */
  RT_SYNC_IWAITALL,   /* MPI_Iallreduce per bucket, one MPI_Waitall */
  RT_SYNC_ITEST,      /* MPI_Iallreduce per bucket, MPI_Testall polling */
  RT_SYNC_SHM         /* POSIX shared memory and a process-shared barrier:
                       * no MPI call (shmsync.c), as a sync over NCCL or
                       * Gloo is none to a balancer that sees MPI only */
} rt_sync_t;

/* A collective after each hand-off that is not the gradient sync. */
typedef enum rt_stray {
  RT_STRAY_NONE,
  RT_STRAY_SELF, /* on MPI_COMM_SELF */
  RT_STRAY_HALF  /* on a communicator of the first half of the ranks */
} rt_stray_t;

typedef struct rt_opts {
  int64_t steps;
  rt_mode_t mode;
  const char *profile;
  const char *lengths; /* lengths file, or NULL */
  uint64_t seed;
  int32_t micro;       /* micro-batches (hand-offs) per step */
  int32_t tp, cp, pp;
  double time_scale;   /* emulate: multiplies the modelled time */
  int64_t grad_bytes;  /* gradient buffer all-reduced once per step */
  double headroom;     /* loader capacity / pack size */
  int64_t pack_tokens; /* 0: the profile's */
  int32_t cpu_dim;     /* cpu: head dimension */
  bool check, verbose;
  bool loader_thread; /* hand-offs from a second thread, as a pin-memory loop */
  int32_t prefetch;   /* loader thread: batches it may run ahead */
  rt_sync_t sync;
  int32_t buckets;    /* gradient buckets of the iallreduce modes */
  rt_stray_t stray;
  int32_t chatter_ms; /* > 0: a coordinator thread's MPI_Allreduce this
                       * often (chatter.c); 0: none */
  bool loss_allreduce; /* MPI_Allreduce of the step's loss after the sync */
  bool print_coefs;    /* print the emulated cost model and exit */
  const char *ids_out, *stats_out;
  emu_model_t model;   /* emulate: --model */
} rt_opts_t;

/* Fills *o from argv. Returns 0 to run, 1 when --help was asked, or -1 with
 * one line in err naming the option and what it expects. */
int rt_parse(int argc, char **argv, rt_opts_t *o, char *err, size_t errlen);
void rt_usage(FILE *f);

#endif
