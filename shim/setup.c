/* The shim's start and end: configuration agreed by every rank, the DP
 * groups, the core; see shim.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_mpi.h"
#include "env.h"
#include "shim.h"

dpshim__state_t dpshim__state = {.lock = PTHREAD_MUTEX_INITIALIZER,
                                 .encoder_lock = PTHREAD_MUTEX_INITIALIZER,
                                 .span_key = MPI_KEYVAL_INVALID,
                                 .span_comm = MPI_COMM_NULL};

void dpshim__say(const char *line) { fprintf(stderr, "dpshim: %s\n", line); }

double dpshim__now(void) { return dpshim__clock_now(&dpshim__state.clock); }

static int check_topology(dpshim__state_t *st, char *msg, size_t len) {
  long model = (long)st->cfg.tp * st->cfg.pp * st->cfg.cp;
  if (st->world_size % model == 0) return 0;
  snprintf(msg, len,
           "%s x %s x %s = %ld does not divide the %d ranks: expected sizes "
           "whose product divides the world size", DPSHIM_ENV_TP,
           DPSHIM_ENV_PP, DPSHIM_ENV_CP, model, st->world_size);
  return DPSHIM_EINVAL;
}

static int check_threads(dpshim__state_t *st, char *msg, size_t len) {
  if (!st->cfg.enabled || !st->cfg.loader_thread ||
      st->mpi_provided >= MPI_THREAD_MULTIPLE)
    return 0;
  snprintf(msg, len,
           "%s=1, but MPI provides thread level %d: expected "
           "MPI_THREAD_MULTIPLE (%d) for hand-offs from a loader thread",
           DPSHIM_ENV_LOADER_THREAD, st->mpi_provided, MPI_THREAD_MULTIPLE);
  return DPSHIM_EINVAL;
}

/* Every rank learns whether any rank's configuration is bad or differs;
 * rank 0 prints the first bad rank's message. Returns 1 when all is well. */
static int agree_on_config(dpshim__state_t *st, int rc, char *msg,
                           size_t len) {
  uint64_t h = dpshim__config_hash(&st->cfg), range[2] = {h, ~h};
  int first_bad = rc < 0 ? st->world_rank : st->world_size;
  if (PMPI_Allreduce(MPI_IN_PLACE, &first_bad, 1, MPI_INT, MPI_MIN,
                     st->world) != MPI_SUCCESS ||
      PMPI_Allreduce(MPI_IN_PLACE, range, 2, MPI_UINT64_T, MPI_MAX,
                     st->world) != MPI_SUCCESS)
    return 0;
  if (first_bad < st->world_size) {
    if (PMPI_Bcast(msg, (int)len, MPI_CHAR, first_bad, st->world) !=
        MPI_SUCCESS)
      return 0;
    if (st->world_rank == 0) {
      char line[512];
      snprintf(line, sizeof line, "%s (rank %d); balancing is off", msg,
               first_bad);
      dpshim__say(line);
    }
    return 0;
  }
  if (range[0] != h || range[1] != ~h) { /* not every rank has h */
    if (st->world_rank == 0)
      dpshim__say("the DPSHIM_* variables differ between ranks: expected the "
                  "same on every rank (mpirun -x); balancing is off");
    return 0;
  }
  return st->cfg.enabled || st->cfg.vit;
}

/* Megatron's order: tp fastest, then cp, dp, pp. A DP group is the ranks
 * that share (tp, cp, pp) indices. */
static int open_groups(dpshim__state_t *st, int *dp_group) {
  int tp = st->cfg.tp, cp = st->cfg.cp, r = st->world_rank;
  int dp_size = st->world_size / (tp * cp * st->cfg.pp);
  int tp_i = r % tp, cp_i = r / tp % cp, pp_i = r / (tp * cp * dp_size);
  *dp_group = tp_i + tp * (cp_i + cp * pp_i);
  int rc = dpshim__comm_mpi_open(st->world, *dp_group, &st->dp_seam);
  if (rc == 0) rc = dpshim__comm_mpi_open(st->world, 0, &st->world_seam);
  /* The ranks at the same DP index in every group hold the same samples */
  if (rc == 0)
    rc = dpshim__comm_mpi_open(st->world, st->dp_seam.rank, &st->peers_seam);
  /* The encoder's collectives never meet the hand-offs' */
  if (rc == 0 && st->cfg.vit)
    rc = dpshim__comm_mpi_open(st->world, *dp_group, &st->vit_seam);
  if (rc < 0) return rc;
  MPI_Comm dp = dpshim__comm_mpi_handle(&st->dp_seam);
  if (PMPI_Comm_group(dp, &st->dp_ranks) != MPI_SUCCESS ||
      PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, dpshim__forget_comm,
                              &st->span_key, NULL) != MPI_SUCCESS)
    return DPSHIM_EMPI;
  return 0;
}

static void config_line(void *ctx, const char *text) {
  char line[512];
  (void)ctx;
  snprintf(line, sizeof line, "  %s", text);
  dpshim__say(line);
}

static void say_started(const dpshim__state_t *st) {
  if (!st->cfg.verbose || st->world_rank != 0) return;
  char line[256];
  snprintf(line, sizeof line,
           "balancing %d DP group%s of %d ranks; the configuration:",
           st->core.ngroups, st->core.ngroups == 1 ? "" : "s",
           st->dp_seam.size);
  dpshim__say(line);
  dpshim__config_dump(&st->cfg, config_line, NULL);
}

/* The encoder's balance over the DP group. Attaching allocates: agreed. */
static void start_vit(dpshim__state_t *st) {
  if (!st->cfg.vit) return;
  pthread_mutex_lock(&st->encoder_lock);
  dpshim__vit_t *v = dpshim__vit_of(st);
  dpshim__vit_config_t vc = {
      {st->cfg.algo, st->core.vit_model, st->cfg.vit_max_patch_ratio,
       dpshim__config_vit_ratio(&st->cfg)},
      dpshim__now};
  int rc = v ? dpshim__vit_attach(v, &st->vit_seam) : DPSHIM_ENOMEM;
  if (rc == 0) dpshim__vit_configure(v, &vc);
  if (PMPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MIN, st->world) !=
      MPI_SUCCESS)
    rc = DPSHIM_EMPI;
  st->vit_on = rc == 0;
  if (rc < 0 && v) dpshim__vit_attach(v, NULL);
  pthread_mutex_unlock(&st->encoder_lock);
  if (rc < 0 && st->world_rank == 0)
    dpshim__say("cannot set up the ViT balance (out of memory); encoder "
                "calls run where they are made");
}

/* Which host each DP rank is on: ranks that share memory
 * (MPI_COMM_TYPE_SHARED) share a host, named by its lowest world rank;
 * hosts numbered from 0 in DP rank order into host[dp size]. Collective
 * over the world, then the DP group: every rank reaches it (open_core's
 * step before is agreed). */
static int learn_hosts(dpshim__state_t *st, int32_t *host) {
  MPI_Comm node;
  int key = st->world_rank;
  MPI_Comm dp = dpshim__comm_mpi_handle(&st->dp_seam);
  if (PMPI_Comm_split_type(st->world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL,
                           &node) != MPI_SUCCESS)
    return DPSHIM_EMPI;
  int ok = PMPI_Allreduce(MPI_IN_PLACE, &key, 1, MPI_INT, MPI_MIN, node) ==
           MPI_SUCCESS;
  PMPI_Comm_free(&node);
  if (!ok || PMPI_Allgather(&key, 1, MPI_INT, host, 1, MPI_INT, dp) !=
                 MPI_SUCCESS)
    return DPSHIM_EMPI;
  /* Keys (world ranks, >= 0) to host numbers in order of first
   * appearance, -1 - id while in progress. Once, at MPI_Init. */
  int32_t n = st->dp_seam.size, next = 0;
  for (int32_t r = 0; r < n; r++) {
    if (host[r] < 0) continue;
    int32_t k = host[r];
    for (int32_t q = r; q < n; q++)
      if (host[q] == k) host[q] = -1 - next;
    next++;
  }
  for (int32_t r = 0; r < n; r++) host[r] = -1 - host[r];
  return 0;
}

static int open_core(dpshim__state_t *st) {
  int dp_group = 0;
  int rc = open_groups(st, &dp_group);
  int32_t *host = rc == 0 ? calloc((size_t)st->dp_seam.size, sizeof *host)
                          : NULL;
  if (rc == 0 && !host) rc = DPSHIM_ENOMEM;
  if (PMPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MIN, st->world) !=
      MPI_SUCCESS)
    rc = DPSHIM_EMPI;
  if (rc == 0) rc = learn_hosts(st, host);
  if (rc == 0) {
    dpshim__core_setup_t s = {&st->cfg, &st->world_seam, &st->dp_seam,
                              &st->peers_seam, dp_group,
                              st->world_size / st->dp_seam.size, host,
                              dpshim__now, dpshim__say};
    rc = dpshim__core_open(&st->core, &s);
  }
  free(host);
  return rc;
}

void dpshim__on_init(void) {
  dpshim__state_t *st = &dpshim__state;
  char msg[256] = "";
  st->init_thread = st->forward_thread = pthread_self();
  st->mpi_up = 1;
  if (PMPI_Comm_dup(MPI_COMM_WORLD, &st->world) != MPI_SUCCESS) {
    st->world = MPI_COMM_NULL;
    dpshim__say("cannot duplicate MPI_COMM_WORLD; balancing is off");
    return;
  }
  /* The shim's own calls report failures instead of aborting the job. */
  PMPI_Comm_set_errhandler(st->world, MPI_ERRORS_RETURN);
  PMPI_Comm_rank(st->world, &st->world_rank);
  PMPI_Comm_size(st->world, &st->world_size);
  int rc = dpshim__config_parse(getenv, &st->cfg, msg, sizeof msg);
  if (rc == 0) rc = check_topology(st, msg, sizeof msg);
  if (rc == 0) rc = check_threads(st, msg, sizeof msg);
  if (!agree_on_config(st, rc, msg, sizeof msg)) return;
  const char *note = dpshim__clock_init(&st->clock);
  if (*note && st->world_rank == 0) dpshim__say(note);
  rc = open_core(st);
  if (PMPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MIN, st->world) !=
      MPI_SUCCESS)
    rc = DPSHIM_EMPI;
  if (rc < 0) {
    if (st->world_rank == 0) {
      snprintf(msg, sizeof msg, "cannot set up the DP groups (%s); balancing "
               "is off", dpshim_strerror(rc));
      dpshim__say(msg);
    }
    return;
  }
  st->active = st->core_open = 1;
  say_started(st);
  start_vit(st);
}

void dpshim__on_finalize(void) {
  dpshim__state_t *st = &dpshim__state;
  if (!st->mpi_up) return;
  if (st->vit_on) { /* forwards still in flight go on apart */
    dpshim__vit_point(DPSHIM__VIT_CLOSE);
    pthread_mutex_lock(&st->encoder_lock);
    st->vit_on = 0;
    dpshim__vit_attach(st->vit, NULL);
    pthread_mutex_unlock(&st->encoder_lock);
  }
  dpshim__ahead_stop();
  if (st->core_open) { /* also after a loader thread turned it off */
    st->active = st->core_open = 0;
    dpshim__core_close(&st->core);
  }
  dpshim__comm_mpi_close(&st->dp_seam);
  dpshim__comm_mpi_close(&st->vit_seam);
  dpshim__comm_mpi_close(&st->world_seam);
  dpshim__comm_mpi_close(&st->peers_seam);
  if (st->dp_ranks != MPI_GROUP_NULL && st->dp_ranks)
    PMPI_Group_free(&st->dp_ranks);
  if (st->span_key != MPI_KEYVAL_INVALID)
    PMPI_Comm_free_keyval(&st->span_key);
  if (st->world != MPI_COMM_NULL) PMPI_Comm_free(&st->world);
  st->mpi_up = 0;
  st->finalized = 1;
}
