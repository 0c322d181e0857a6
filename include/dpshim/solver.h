/* The plan solver: which data-parallel rank should hold each sample.
 *
 * Pure computation: no MPI, no I/O, no global state. The same input gives the
 * same plan bit for bit on every rank, so each rank can solve on its own
 * instead of waiting for a broadcast.
 *
 *   dpshim_plan_t plan;
 *   dpshim_plan_init(&plan);
 *   if (dpshim_plan_solve(&in, &plan) < 0) fprintf(stderr, "%s\n", plan.message);
 *   ... plan.dest[i] is the rank sample i goes to ...
 *   dpshim_plan_free(&plan);
 *
 * A plan object is reused across calls: its arrays and scratch memory grow to
 * the largest instance seen, so steady-state solving does not allocate.
 */
#ifndef DPSHIM_SOLVER_H
#define DPSHIM_SOLVER_H

#include <stdint.h>

#include "dpshim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One sample as the solver sees it. */
typedef struct dpshim_sample {
  int64_t len;    /* tokens, >= 0 */
  int64_t bytes;  /* payload bytes that move with the sample, >= 0 */
  int32_t origin; /* rank that holds it now, in [0, ranks) */
  /* A second size that moves with the sample and has its own per-rank
   * buffer (image rows: patch rows or tiles), 0..INT32_MAX. It costs
   * nothing; only dpshim_plan_input_t.rows_cap limits it. */
  int64_t rows;
  /* Its images as the vision encoder sees them, when the encoder runs where
   * the sample is: the sum over its images of their patches (the encoder's
   * tokens before any merge), and of each image's patches squared. 0 for a
   * text sample. */
  int64_t patches, patches_sq;
} dpshim_sample_t;

/* A sample's cost: a*len^2 + b*len + c + d*patches_sq + e*patches, with
 * every coefficient finite and >= 0. d = e = 0 (text, or images encoded
 * apart) leaves a cost of the length alone. */
typedef struct dpshim_cost_model {
  double a, b, c;
  double d, e; /* the vision encoder's: per patch^2 of an image, per patch */
} dpshim_cost_model_t;

typedef enum dpshim_algo {
  DPSHIM_ALGO_DEFAULT = 0, /* move only what must move; reaches the bound */
  DPSHIM_ALGO_SEED,        /* the original LoongForge solver, as published */
  DPSHIM_ALGO_KK,          /* Karmarkar-Karp largest differencing (verl) */
  DPSHIM_ALGO_NONE,        /* keep every sample where it is */
  DPSHIM_ALGO_KK_CAP       /* kk, then moved into the token and rows caps */
} dpshim_algo_t;

typedef enum dpshim_decision {
  DPSHIM_DECISION_SKIP = 0, /* dest[i] == origin for every sample */
  DPSHIM_DECISION_APPLY
} dpshim_decision_t;

typedef enum dpshim_skip_reason {
  DPSHIM_SKIP_NONE = 0,      /* the plan is applied */
  DPSHIM_SKIP_BALANCED,      /* imbalance below the trigger threshold */
  DPSHIM_SKIP_DOMINANT,      /* seed only: one sample costs more than the mean load */
  DPSHIM_SKIP_NO_GAIN,       /* the plan would not lower the makespan */
  DPSHIM_SKIP_ALGO_NONE,     /* the algorithm is "none" */
  DPSHIM_SKIP_CAPACITY       /* no plan within the rows caps found (kk-cap:
                                or within the token cap) */
} dpshim_skip_reason_t;

typedef struct dpshim_plan_input {
  int32_t ranks;                  /* P >= 1 */
  int64_t nsamples;               /* N >= P: every rank holds >= 1 sample */
  const dpshim_sample_t *samples; /* [nsamples] */
  /* Cost already spent by each rank in earlier micro-batches of this
   * iteration; NULL means zero. history_len must equal ranks. */
  const double *history;
  int32_t history_len;
  dpshim_cost_model_t model;
  /* Per-rank token cap = cap_ratio * (total tokens / ranks); 0 = no cap. */
  double cap_ratio;
  /* Skip when max/mean - 1 of the loads before is below this; 0 = never. */
  double threshold;
  dpshim_algo_t algo;
  /* [ranks]: the most rows rank r may hold after the plan; NULL = no cap.
   * The caps are taken as given, even below what a rank holds now: a
   * buffer cannot hold more than it holds. default, seed and kk-cap never
   * apply a plan that exceeds one; when they find none within them they
   * skip with DPSHIM_SKIP_CAPACITY (dest = origin, which may itself exceed
   * a cap the caller set below it). When the samples as they lie exceed a
   * cap, default applies a plan within the caps even if it raises the
   * maximum load, since staying put is no option then. kk ignores the rows
   * caps, as it ignores the token cap. */
  const int64_t *rows_cap;
  int32_t rows_cap_len; /* must equal ranks when rows_cap is set */
  /* [ranks]: each rank's host (any numbers; equal means the same host),
   * NULL = one host. The plan counts the bytes it moves across hosts
   * (bytes_inter_host), and unless ignore_hosts, default prices a byte
   * moved across hosts at inter_host_cost bytes moved within one: among
   * plans of the same maximum load it takes the one of the lowest price
   * (bytes_priced), and it never keeps a plan more than
   * DPSHIM_TOPOLOGY_SLACK above the maximum load of the plan it makes
   * without the hosts. */
  const int32_t *host;
  int32_t host_len; /* must equal ranks when host is set */
  int ignore_hosts; /* count the bytes across hosts, plan as on one host */
  /* 1..DPSHIM_INTER_HOST_COST_MAX; 0 = DPSHIM_INTER_HOST_COST_DEFAULT. */
  double inter_host_cost;
} dpshim_plan_input_t;

/* A byte across hosts (a NIC shared by a host's GPUs) against one within a
 * host (NVLink or shared memory): an order of magnitude, as a default. */
#define DPSHIM_INTER_HOST_COST_DEFAULT 10.0
#define DPSHIM_INTER_HOST_COST_MAX 1000.0
/* The most maximum load default gives up for cheaper bytes across hosts. */
#define DPSHIM_TOPOLOGY_SLACK 1e-3

typedef struct dpshim_plan {
  /* Outputs, valid after a successful dpshim_plan_solve(). */
  int32_t *dest;        /* [nsamples] destination rank of each sample */
  double *load_before;  /* [ranks] history + cost of the samples held now */
  double *load_after;   /* [ranks] history + cost under dest */
  double imbalance_before; /* max/mean - 1 */
  double imbalance_after;
  double lower_bound;   /* no assignment can have a smaller maximum load */
  /* No assignment within the token cap and the rows caps can have a smaller
   * maximum load: >= lower_bound, equal to it when neither cap binds. The
   * token cap's part is computed when the histories are equal. */
  double lower_bound_cap;
  int64_t rows_max_after; /* the most rows any rank holds under dest */
  int64_t cap_tokens;   /* the per-rank token cap, or -1 for none */
  int64_t bytes_moved;  /* bytes of the samples whose dest != origin */
  int64_t bytes_inter_host; /* of those, between ranks on two hosts */
  /* bytes_moved priced: inter_host_cost x bytes_inter_host + the rest
   * (ignore_hosts too; bytes_moved without hosts). */
  int64_t bytes_priced;
  int64_t bytes_total;
  dpshim_decision_t decision;
  dpshim_skip_reason_t reason;
  char message[192];    /* why it failed, or why it skipped */
  /* Heap allocations the last solve made, failed ones included: 0 once the
   * plan has grown to the instances it sees (after a solve or two; kk
   * allocates on every solve). Allocation depends only on the
   * sequence of inputs, so ranks that solve the same sequence allocate
   * alike: a rank whose solve did not allocate knows that no rank could
   * have run out of memory. */
  int64_t allocations;
  /* Private: capacities and scratch memory. */
  int32_t ranks_cap_;
  int64_t samples_cap_;
  void *scratch_;
} dpshim_plan_t;

DPSHIM_EXTERN void dpshim_plan_init(dpshim_plan_t *plan);
DPSHIM_EXTERN void dpshim_plan_free(dpshim_plan_t *plan);

/* Solves `in` into `plan`. Returns 0, or DPSHIM_EINVAL with plan->message
 * naming the offending field, or DPSHIM_ENOMEM. On error no output is valid. */
DPSHIM_EXTERN int dpshim_plan_solve(const dpshim_plan_input_t *in,
                                    dpshim_plan_t *plan);

/* cost(len) under the model, for a sample without images. */
DPSHIM_EXTERN double dpshim_cost(dpshim_cost_model_t model, int64_t len);
/* The cost of sample s under the model, its images included. */
DPSHIM_EXTERN double dpshim_sample_cost(dpshim_cost_model_t model,
                                        const dpshim_sample_t *s);

/* "default", "seed", "kk", "none", "kk-cap" <-> enum. from_name returns DPSHIM_EINVAL
 * for any other name. */
DPSHIM_EXTERN int dpshim_algo_from_name(const char *name, dpshim_algo_t *algo);
DPSHIM_EXTERN const char *dpshim_algo_name(dpshim_algo_t algo);
DPSHIM_EXTERN const char *dpshim_skip_reason_name(dpshim_skip_reason_t reason);

#ifdef __cplusplus
}
#endif
#endif
