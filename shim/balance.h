/* One hand-off balanced across a data-parallel group: the pipeline.
 *
 *   depack -> all-gather each sample's meta -> cost -> plan (every rank
 *   solves the same plan) -> all-to-all of the records -> repack.
 *
 * Collective: every rank of the group calls dpshim__balance() once per
 * hand-off. Every decision (apply, skip, error) is taken from gathered data,
 * so all ranks take the same one and reach the same collectives. On skip or
 * error each rank's batch is left as it was. No global state: the unit tests
 * run one balancer per thread.
 */
#ifndef DPSHIM_SHIM_BALANCE_H
#define DPSHIM_SHIM_BALANCE_H

#include <stdint.h>

#include "comm.h"
#include "dpshim/batch.h"
#include "dpshim/solver.h"

/* Numbers each rank may pass along with its header, gathered for free. */
#define DPSHIM__NOTES 4

typedef struct dpshim__balance_config {
  dpshim_algo_t algo;
  double cap_ratio; /* x mean tokens per rank; 0 = only the buffers' capacity */
  double threshold; /* skip below this imbalance */
  dpshim_cost_model_t model;
  int verify;       /* check plan agreement and exactly-once delivery */
  double (*clock)(void); /* seconds, for arrival_wait; NULL = not timed */
} dpshim__balance_config_t;

typedef struct dpshim__balance_report {
  int applied;             /* the plan moved samples */
  const char *skip_reason; /* why not, when the plan was skipped */
  char message[256];       /* the error every rank returned, or "" */
  int64_t samples, tokens; /* over the group */
  int64_t bytes_moved, bytes_total;
  double imbalance_before, imbalance_after, lower_bound;
  /* Seconds in the first collective: waiting for the other ranks to reach
   * the hand-off, time they would otherwise have waited at the sync. */
  double arrival_wait;
  const double *load_before, *load_after; /* [group size], until next call */
  /* [size * DPSHIM__NOTES]: every rank's note, in rank order, or NULL when
   * the headers were not gathered. Valid until the next call. */
  const double *notes;
} dpshim__balance_report_t;

typedef struct dpshim__balancer dpshim__balancer_t;

dpshim__balancer_t *dpshim__balancer_new(const dpshim__balance_config_t *cfg);
void dpshim__balancer_free(dpshim__balancer_t *b);
void dpshim__balancer_set_model(dpshim__balancer_t *b,
                                dpshim_cost_model_t model);

/* Balances `batch` for step `step` (hand-offs of the same step share the
 * loads of the earlier ones, as history). `note` (DPSHIM__NOTES numbers, or
 * NULL for zeros) travels with this rank's header to every rank. Returns 0 (applied or skipped; see
 * rep) or the negative DPSHIM_E* code that every rank returns. Skipped: the
 * solver's reasons, "no-gain" (a plan other than seed's that would raise the
 * maximum load), "no-move", "capacity", "exchange-too-large", "empty-rank",
 * "too-few-samples". A verify error comes after the exchange: the batches
 * are then already changed. */
int dpshim__balance(dpshim__balancer_t *b, dpshim__comm_t *comm,
                    dpshim_batch_t *batch, int64_t step,
                    const double *note, dpshim__balance_report_t *rep);

#endif
