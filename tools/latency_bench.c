/* dpshim-latency-bench: what a process pays per small MPI call, to compare
 * a run under the shim with one without it (tools/latency_bench.sh).
 *
 * It starts MPI as a trainer does (plain MPI_Init), asks which thread level
 * it got, and times on MPI_COMM_WORLD, one call at a time:
 *   - MPI_Allreduce of 8 B and of 1 KiB (doubles, MPI_SUM): a trainer's
 *     step-ending collective, which the shim wraps;
 *   - a ping-pong of 8 B between ranks 0 and 1 (one iteration is a round
 *     trip), while the other ranks wait at a barrier: point-to-point, which
 *     the shim does not wrap but a thread level above SINGLE can slow down.
 * Each figure is the median over iterations of rank 0's own time: a median
 * of single calls, so that a descheduled iteration on an oversubscribed
 * machine does not count. Rank 0 prints one JSON line:
 *
 *   {"allreduce_8_us":..,"allreduce_1k_us":..,"pingpong_8_us":..,
 *    "thread_level":N}
 *
 *   mpirun -np 2 dpshim-latency-bench [--iters N] [--warmup N]
 *
 * On one rank there is no ping-pong ("pingpong_8_us":null): that is how
 * latency_bench.sh --instructions counts the wrappers' instructions.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "timeutil.h"

#define PROG "dpshim-latency-bench"
#define MAX_ITERS 10000000
#define PINGPONG_TAG 17

typedef struct options {
  int64_t iters, warmup;
} options_t;

/* ---- options ------------------------------------------------------------- */

static void usage(FILE *f) {
  fprintf(f,
"usage: mpirun -np N " PROG " [options]\n"
"Times MPI_Allreduce of 8 B and 1 KiB and an 8 B ping-pong between ranks 0\n"
"and 1; rank 0 prints one JSON line of median microseconds per iteration\n"
"(a ping-pong iteration is a round trip; null on one rank) and the MPI\n"
"thread level.\n"
"\n"
"  --iters N    timed iterations per measurement [default: 20000]\n"
"  --warmup N   untimed iterations before each [default: 1000]\n"
"  --help       this text\n");
}

/* 0 to run; else the exit status (0 after --help). Every rank parses the
 * same arguments and so decides alike; only rank 0 speaks. */
static int parse_options(int argc, char **argv, int rank, options_t *o) {
  *o = (options_t){.iters = 20000, .warmup = 1000};
  for (int i = 1; i < argc; i++) {
    const char *name = argv[i];
    int64_t *field = !strcmp(name, "--iters")    ? &o->iters
                     : !strcmp(name, "--warmup") ? &o->warmup
                                                 : NULL;
    if (!strcmp(name, "--help")) {
      if (rank == 0) usage(stdout);
      return -1;
    }
    int64_t lo = field == &o->iters ? 1 : 0;
    if (!field || i + 1 >= argc || cli_int(argv[++i], lo, MAX_ITERS, field)) {
      if (rank == 0)
        fprintf(stderr, PROG ": %s: expected --iters 1..%d or --warmup 0..%d"
                        "; try --help\n", name, MAX_ITERS, MAX_ITERS);
      return 2;
    }
  }
  return 0;
}

/* ---- measurements -------------------------------------------------------- */


/* Separate send and receive buffers: an in-place sum would grow without
 * bound over the iterations. */
static double time_allreduce(const options_t *o, int count, double *t) {
  double send[128], recv[128];
  for (int k = 0; k < count; k++) send[k] = 1.0;
  for (int64_t i = 0; i < o->warmup; i++)
    MPI_Allreduce(send, recv, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  for (int64_t i = 0; i < o->iters; i++) {
    double t0 = dpshim__tool_now_s();
    MPI_Allreduce(send, recv, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    t[i] = dpshim__tool_now_s() - t0;
  }
  return 1e6 * dpshim__tool_median(t, (size_t)o->iters);
}

static void pingpong_once(int rank, double *buf) {
  if (rank == 0) {
    MPI_Send(buf, 1, MPI_DOUBLE, 1, PINGPONG_TAG, MPI_COMM_WORLD);
    MPI_Recv(buf, 1, MPI_DOUBLE, 1, PINGPONG_TAG, MPI_COMM_WORLD,
             MPI_STATUS_IGNORE);
  } else {
    MPI_Recv(buf, 1, MPI_DOUBLE, 0, PINGPONG_TAG, MPI_COMM_WORLD,
             MPI_STATUS_IGNORE);
    MPI_Send(buf, 1, MPI_DOUBLE, 0, PINGPONG_TAG, MPI_COMM_WORLD);
  }
}

/* Ranks 0 and 1 only; the rest go straight to the barrier that ends it. */
static double time_pingpong(const options_t *o, int rank, double *t) {
  double buf = 0, us = 0;
  if (rank <= 1) {
    for (int64_t i = 0; i < o->warmup; i++) pingpong_once(rank, &buf);
    for (int64_t i = 0; i < o->iters; i++) {
      double t0 = dpshim__tool_now_s();
      pingpong_once(rank, &buf);
      t[i] = dpshim__tool_now_s() - t0;
    }
    us = 1e6 * dpshim__tool_median(t, (size_t)o->iters);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return us;
}

/* ---- main ---------------------------------------------------------------- */

/* Exits through MPI_Finalize, so that mpirun sees a clean end. */
static int finish(int status) {
  MPI_Finalize();
  return status;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size, level;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Query_thread(&level);
  options_t o;
  int rc = parse_options(argc, argv, rank, &o);
  if (rc) return finish(rc < 0 ? 0 : rc);
  double *t = malloc((size_t)o.iters * sizeof *t);
  int ok = t != NULL;
  MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!ok) {
    if (rank == 0) fprintf(stderr, PROG ": out of memory for --iters\n");
    free(t);
    return finish(1);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  double ar8 = time_allreduce(&o, 1, t);
  double ar1k = time_allreduce(&o, 128, t);
  MPI_Barrier(MPI_COMM_WORLD);
  char pp8[32] = "null"; /* one rank: no ping-pong */
  if (size > 1) snprintf(pp8, sizeof pp8, "%.3f", time_pingpong(&o, rank, t));
  if (rank == 0)
    printf("{\"allreduce_8_us\":%.3f,\"allreduce_1k_us\":%.3f,"
           "\"pingpong_8_us\":%s,\"thread_level\":%d}\n",
           ar8, ar1k, pp8, level);
  free(t);
  return finish(0);
}
