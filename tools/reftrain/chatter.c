/* reftrain --chatter; see chatter.h.
 *
 * Every round each rank contributes {stop asked?, 1} to an MPI_SUM. The
 * sum is the same on every rank, so every rank's thread sees the stop in
 * the same round and leaves after it: no rank is left waiting in a round
 * the others never start. The second element, the world size when nothing
 * between the thread and MPI has changed it, is checked. */
#include "chatter.h"

#include <mpi.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../timeutil.h"

struct rt_chatter {
  MPI_Comm comm; /* the thread's own: its rounds never match the trainer's */
  int world;
  double period_s;
  atomic_int stop;
  int64_t rounds;
  pthread_t thread;
};

/* One round; 1 when every rank has asked to stop. */
static int round_trip(rt_chatter_t *c) {
  int v[2] = {atomic_load(&c->stop), 1};
  MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_INT, MPI_SUM, c->comm);
  if (v[1] != c->world) {
    fprintf(stderr, "reftrain: --chatter: round %lld summed %d ones on %d "
            "ranks\n", (long long)c->rounds, v[1], c->world);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  c->rounds++;
  return v[0] == c->world;
}

/* Rounds on a fixed period (from the last round's start), as a
 * coordinator's tick. */
static void *loop(void *arg) {
  rt_chatter_t *c = arg;
  double next = dpshim__tool_now_s();
  for (;;) {
    if (round_trip(c)) return NULL;
    next += c->period_s;
    double now = dpshim__tool_now_s();
    if (next < now) next = now; /* a late round does not make a burst */
    dpshim__tool_sleep_until(next);
  }
}

rt_chatter_t *rt_chatter_start(int32_t ms) {
  rt_chatter_t *c = calloc(1, sizeof *c);
  if (!c) {
    fprintf(stderr, "reftrain: --chatter: out of memory\n");
    return NULL;
  }
  c->period_s = 1e-3 * ms;
  atomic_init(&c->stop, 0);
  MPI_Comm_size(MPI_COMM_WORLD, &c->world);
  MPI_Comm_dup(MPI_COMM_WORLD, &c->comm);
  int rc = pthread_create(&c->thread, NULL, loop, c);
  if (rc == 0) return c;
  fprintf(stderr, "reftrain: --chatter: cannot start the thread: %s\n",
          strerror(rc));
  MPI_Comm_free(&c->comm);
  free(c);
  return NULL;
}

int64_t rt_chatter_stop(rt_chatter_t *c) {
  if (!c) return 0;
  atomic_store(&c->stop, 1);
  pthread_join(c->thread, NULL);
  int64_t rounds = c->rounds;
  MPI_Comm_free(&c->comm);
  free(c);
  return rounds;
}
