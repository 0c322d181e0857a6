/* A mock of the comm seam (shim/comm.h): POSIX threads as the ranks of one
 * group.
 *
 * mock_run_ex() starts one thread per rank; each gets its own
 * dpshim__comm_t. mock_run_groups() gives each rank three: the world, its
 * group of ranks r with the same r % ngroups (as DP groups are with
 * TP = ngroups) and its peers, the ranks with the same r / ngroups (one
 * per group); comm.id is the world rank in all.
 * A collective posts the rank's buffers and counts in its slot of the shared
 * world, waits at a barrier, copies what it receives straight out of the
 * other ranks' send buffers, and waits at a second barrier before returning
 * (so no sender reuses its buffer while it is read).
 *
 * The mock also checks the collectives themselves: every rank must call the
 * same operation with counts that agree (allgather: the same byte count;
 * allgatherv: the same counts array; alltoallv_parts: sendcounts[r -> s] ==
 * recvcounts[s <- r], part by part; exchange: every receive piece matches
 * a send of its size, every send is received, and no rank lists more
 * pieces than it reserved). A disagreement fails that collective on every
 * rank and is recorded in the stats. A barrier nobody completes within
 * MOCK_DEADLOCK_SECONDS (ranks reaching different collectives) breaks the
 * world and is recorded too: a safety net so a bug hangs no test, not a
 * timing assertion.
 *
 * Fault injection: opts.fail_rank's collective number opts.fail_call (0-based,
 * counting that rank's calls) returns opts.fail_code, and breaks the world,
 * so every rank's current and later collectives return the same code (as a
 * communicator whose error handler returns would). opts.corrupt flips a
 * byte that opts.corrupt_rank receives in an exchange, for checks of the
 * balancer's verification.
 *
 * Rank functions must not use Criterion's assertions (they are not meant for
 * other threads): record what they saw and assert in the test's thread.
 */
#ifndef DPSHIM_TEST_MOCK_COMM_H
#define DPSHIM_TEST_MOCK_COMM_H

#include <stddef.h>

#include "comm.h"

#define MOCK_MAX_RANKS 64
#define MOCK_DEADLOCK_SECONDS 60

typedef void (*mock_fn_t)(dpshim__comm_t *comm, int rank, void *arg);

typedef struct mock_opts {
  int size;      /* ranks, 1 .. MOCK_MAX_RANKS */
  int fail_rank; /* -1: no fault */
  int fail_call; /* which of fail_rank's collectives fails, 0-based */
  int fail_code; /* what it returns (and every rank after it) */
  int corrupt;      /* 1: corrupt_rank's exchange data arrive with the */
  int corrupt_rank; /* first byte flipped (when it receives any) */
} mock_opts_t;

typedef void (*mock_group_fn_t)(dpshim__comm_t *world, dpshim__comm_t *dp,
                                dpshim__comm_t *peers, int rank, void *arg);

typedef enum {
  MOCK_ALLGATHER, MOCK_ALLGATHERV, MOCK_EXCHANGE, MOCK_GATHER, MOCK_BCAST,
  MOCK_MAX, MOCK_ALLTOALLV_PARTS, MOCK_NOPS
} mock_op_t;

typedef struct mock_stats {
  int deadlock;               /* a barrier timed out */
  int mismatch;               /* ranks disagreed on a collective */
  int faulted;                /* the injected fault fired */
  int corrupted;              /* a byte was flipped */
  char message[256];          /* what the first deadlock/mismatch was */
  long calls[MOCK_MAX_RANKS]; /* collectives each rank entered */
  long ops[MOCK_NOPS];        /* completed collectives of each mock_op_t */
  /* Bytes over all completed exchange and alltoallv_parts calls: to
   * other ranks, and in all (self included). */
  size_t alltoallv_moved, alltoallv_total;
} mock_stats_t;

/* Runs fn on opts->size threads, rank r with comm->rank == r, with the
 * fault of opts; stats may be NULL. Returns 0, or -1 when a deadlock or a
 * mismatch was seen (or a thread could not start). */
int mock_run_ex(const mock_opts_t *opts, mock_fn_t fn, void *arg,
                mock_stats_t *stats);

/* The same with a world and `ngroups` groups (the fault, if any, is the
 * world's); stats merge the deadlocks and mismatches of all, the counts
 * are the world's. */
int mock_run_groups(const mock_opts_t *opts, int ngroups, mock_group_fn_t fn,
                    void *arg, mock_stats_t *stats);

#endif
