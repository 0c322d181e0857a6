/* reftrain's collectives in the stepping loop; see sync.h. */
#include "sync.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* The first ceil(world/2) ranks, so that a world of one still has a member;
 * the others get MPI_COMM_NULL. */
static int split_half(MPI_Comm *out) {
  int rank, world;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  int color = rank < (world + 1) / 2 ? 0 : MPI_UNDEFINED;
  return MPI_Comm_split(MPI_COMM_WORLD, color, rank, out);
}

int rt_sync_init(rt_sync_state_t *s, const rt_opts_t *o) {
  *s = (rt_sync_state_t){.mode = o->sync, .buckets = o->buckets,
                         .stray = MPI_COMM_NULL, .loss = o->loss_allreduce};
  if (o->stray == RT_STRAY_SELF) s->stray = MPI_COMM_SELF;
  if (o->stray == RT_STRAY_HALF) split_half(&s->stray);
  if (s->stray != MPI_COMM_NULL) MPI_Comm_size(s->stray, &s->stray_size);
  if (s->mode == RT_SYNC_SHM)
    return (s->shm = rt_shm_open(o->grad_bytes / (int64_t)sizeof(float)))
               ? 0 : -2;
  if (s->mode == RT_SYNC_ALLREDUCE) return 0;
  s->req = malloc((size_t)s->buckets * sizeof *s->req);
  return s->req ? 0 : -1;
}

void rt_sync_free(rt_sync_state_t *s) {
  /* MPI_COMM_SELF is predefined: only the split one is ours to free. */
  if (s->stray != MPI_COMM_NULL && s->stray != MPI_COMM_SELF)
    MPI_Comm_free(&s->stray);
  free(s->req);
  rt_shm_close(s->shm);
  *s = (rt_sync_state_t){.stray = MPI_COMM_NULL};
}

/* A short pause between two polls, as a trainer overlapping compute with
 * the sync would do other work there. */
static void pause_us(long us) {
  struct timespec ts = {0, us * 1000L};
  while (nanosleep(&ts, &ts) == EINTR) {
  }
}

/* Starts one MPI_Iallreduce per bucket; bucket i holds
 * [n*i/K, n*(i+1)/K), so sizes differ by at most one element. */
static void start_buckets(rt_sync_state_t *s, float *grad, int64_t n) {
  int64_t k = s->buckets;
  for (int64_t i = 0; i < k; i++) {
    int64_t lo = n * i / k, hi = n * (i + 1) / k;
    MPI_Iallreduce(MPI_IN_PLACE, grad + lo, (int)(hi - lo), MPI_FLOAT,
                   MPI_SUM, MPI_COMM_WORLD, &s->req[i]);
  }
}

static void finish_buckets(rt_sync_state_t *s) {
  int k = s->buckets, done = 0;
  switch (s->mode) {
  case RT_SYNC_IWAIT:
    for (int i = 0; i < k; i++) MPI_Wait(&s->req[i], MPI_STATUS_IGNORE);
    return;
  case RT_SYNC_IWAITALL:
    MPI_Waitall(k, s->req, MPI_STATUSES_IGNORE);
    return;
  case RT_SYNC_ITEST:
    for (;;) {
      MPI_Testall(k, s->req, &done, MPI_STATUSES_IGNORE);
      if (done) return;
      pause_us(20);
    }
  case RT_SYNC_ALLREDUCE: case RT_SYNC_SHM:
    return;
  }
}

void rt_sync_grad(rt_sync_state_t *s, float *grad, int64_t n) {
  if (s->mode == RT_SYNC_SHM) {
    rt_shm_sum(s->shm, grad);
    return;
  }
  if (s->mode == RT_SYNC_ALLREDUCE) {
    MPI_Allreduce(MPI_IN_PLACE, grad, (int)n, MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
    return;
  }
  start_buckets(s, grad, n);
  finish_buckets(s);
}

double rt_sync_loss(const rt_sync_state_t *s, double loss) {
  if (s->loss)
    MPI_Allreduce(MPI_IN_PLACE, &loss, 1, MPI_DOUBLE, MPI_SUM,
                  MPI_COMM_WORLD);
  return loss;
}

void rt_sync_stray(const rt_sync_state_t *s) {
  if (s->stray == MPI_COMM_NULL) return;
  int one = 1, sum = 0;
  MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, s->stray);
  if (sum == s->stray_size) return;
  fprintf(stderr, "reftrain: stray collective summed to %d on %d ranks\n",
          sum, s->stray_size);
  MPI_Abort(MPI_COMM_WORLD, 1);
}
