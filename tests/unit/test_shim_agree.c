/* The agreement both balance levels use (shim/agree.c), over the mock comm:
 * every rank gets the first failing rank's status and message, or 0 with
 * no message round; a failed collective is said as such on every rank. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "agree.h"
#include "dpshim/dpshim.h"
#include "mock_comm.h"

#define RANKS 4

typedef struct outcome {
  int32_t status[RANKS]; /* what each rank says */
  int settle;            /* statuses given, not gathered */
  int rc[RANKS];
  char said[RANKS][256];
} outcome_t;

static void rank_fn(dpshim__comm_t *comm, int rank, void *arg) {
  outcome_t *o = arg;
  dpshim__agree_t a = {0};
  if (dpshim__agree_reserve(&a, comm->size) < 0) {
    o->rc[rank] = 1; /* not a DPSHIM_E* code: the test fails */
    return;
  }
  char mine[64];
  snprintf(mine, sizeof mine, "trouble on %d", rank);
  if (o->settle) {
    memcpy(a.status, o->status, sizeof o->status);
    o->rc[rank] = dpshim__agree_settle(&a, comm, mine, o->said[rank], 256);
  } else {
    o->rc[rank] = dpshim__agree(&a, comm, o->status[rank], mine,
                                o->said[rank], 256);
  }
  dpshim__agree_free(&a);
}

static mock_stats_t run(outcome_t *o, int fail_call) {
  mock_opts_t opts = {RANKS, fail_call < 0 ? -1 : 1, fail_call,
                      DPSHIM_EMPI, 0, 0};
  mock_stats_t stats;
  memset(&stats, 0, sizeof stats);
  mock_run_ex(&opts, rank_fn, o, &stats);
  cr_assert_eq(stats.deadlock, 0, "%s", stats.message);
  cr_assert_eq(stats.mismatch, 0, "%s", stats.message);
  return stats;
}

Test(shim_agree, none_failing_is_one_round) {
  outcome_t o;
  memset(&o, 0, sizeof o);
  mock_stats_t stats = run(&o, -1);
  for (int r = 0; r < RANKS; r++) {
    cr_assert_eq(o.rc[r], 0);
    cr_assert_str_empty(o.said[r]);
  }
  cr_assert_eq(stats.ops[MOCK_ALLGATHER], 1, "only the statuses travel");
}

Test(shim_agree, the_first_failing_rank_speaks_for_all) {
  outcome_t o;
  memset(&o, 0, sizeof o);
  o.status[2] = DPSHIM_EINVAL;
  o.status[3] = DPSHIM_ENOMEM;
  run(&o, -1);
  for (int r = 0; r < RANKS; r++) {
    cr_assert_eq(o.rc[r], DPSHIM_EINVAL, "rank %d", r);
    cr_assert_str_eq(o.said[r], "rank 2: trouble on 2", "rank %d", r);
  }
}

Test(shim_agree, settles_statuses_given) {
  outcome_t o;
  memset(&o, 0, sizeof o);
  o.settle = 1;
  o.status[1] = DPSHIM_ENOMEM;
  mock_stats_t stats = run(&o, -1);
  for (int r = 0; r < RANKS; r++) {
    cr_assert_eq(o.rc[r], DPSHIM_ENOMEM);
    cr_assert_str_eq(o.said[r], "rank 1: trouble on 1");
  }
  cr_assert_eq(stats.ops[MOCK_ALLGATHER], 1, "only the messages travel");
}

Test(shim_agree, a_failed_collective_is_said_on_every_rank) {
  outcome_t o;
  memset(&o, 0, sizeof o);
  run(&o, 0);
  for (int r = 0; r < RANKS; r++) {
    cr_assert_eq(o.rc[r], DPSHIM_EMPI, "rank %d", r);
    cr_assert(strstr(o.said[r], "agreement failed"), "rank %d: %s", r,
              o.said[r]);
  }
}
