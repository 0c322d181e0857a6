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

#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "dpshim/batch.h"
#include "dpshim/solver.h"

/* Numbers each rank may pass along with its header, gathered for free
 * (the step log's: a step and its times). */
#define DPSHIM__NOTES 7

/* `auto` while the model cannot price a plan (not yet fitted): the
 * original's default ratio. */
#define DPSHIM__THRESHOLD_UNPRICED 0.2

typedef struct dpshim__balance_config {
  dpshim_algo_t algo;
  double cap_ratio; /* x mean tokens per rank; 0 = only the buffers' capacity */
  double threshold; /* skip below this imbalance; < 0: auto (priced) */
  dpshim_cost_model_t model;
  int priced;       /* the model is in microseconds (given or fitted) */
  int verify;       /* check plan agreement and exactly-once delivery */
  double (*clock)(void); /* seconds, for arrival_wait; NULL = not timed */
} dpshim__balance_config_t;

/* One hand-off as the caller sees it. */
typedef struct dpshim__handoff {
  int64_t step;       /* hand-offs with the same key share history; < 0: none */
  int plan;           /* 0: gather and agree only (warm-up: nothing moves) */
  const double *note; /* DPSHIM__NOTES numbers for every rank, or NULL */
  /* The ranks holding the same samples in other DP groups (TP/CP peers),
   * one per group: their groups take the same decision. NULL: none. */
  dpshim__comm_t *peers;
  /* Not NULL: this rank's adapter found its batch malformed, for this
   * reason; the hand-off fails on every rank with it (the batch is not
   * read). */
  const char *invalid;
  /* The ViT gate (see dpshim__balancer_set_encoder): decide whether this
   * micro-batch's encoder calls meet; meet_s is what meeting costs this
   * rank beyond the header rounds and the waits, in seconds (the costliest
   * rank's counts; the rounds are priced from the hand-offs' own). */
  int gate;
  double meet_s;
  /* Bytes its encoder calls meeting move per patch (inputs, embeddings and
   * their gradients), or 0 when it has not seen one: the floor of what
   * meeting costs counts the group's largest. */
  double wire_per_patch;
  int32_t vit_moved; /* this rank's forwards in flight whose images moved */
  int32_t queued;    /* this rank's step-log notes waiting to be sent */
} dpshim__handoff_t;

typedef struct dpshim__balance_report {
  int applied;             /* the plan moved samples */
  const char *skip_reason; /* why not, when the plan was skipped */
  char message[256];       /* the error every rank returned, or "" */
  int64_t samples, tokens; /* over the group */
  int64_t bytes_moved, bytes_total;
  int64_t bytes_inter_host; /* of bytes_moved, between ranks on two hosts */
  double imbalance_before, imbalance_after, lower_bound;
  /* `auto`: the step's predicted maximum before minus after, and what
   * applying costs the slowest rank (seconds); 0 when not priced. */
  double saving_s, cost_s;
  /* The ViT gate's answer, when vit_gated (asked, and the samples were
   * gathered; else the encoder calls meet as they always have): apart,
   * and the saving meeting would bring against its cost (seconds). */
  int vit_gated, vit_apart;
  double vit_saving_s, vit_meet_s;
  /* The calls meet though priced apart, to measure meeting again (the
   * gate's retry, policy.h): what they then cost replaces what was
   * learnt. */
  int vit_retry;
  /* Apart, and no rank has a forward in flight whose images moved: until
   * the next hand-off no encoder call meets, on any rank. */
  int vit_quiet;
  /* Applied: this rank's images after the exchange (what the batch's
   * vision array, the caller's and not rewritten, no longer says). */
  dpshim_vision_t held_vision;
  /* Applied: this rank's seconds in the exchange (listing its messages,
   * the transfers) and in the repack (closing the holes, copying in what
   * was staged: exchange.h), the bytes the repack and the staging copied,
   * and what shifting what stays and copying in what arrived would have. */
  double exchange_s, repack_s;
  int64_t repack_bytes, shift_bytes;
  /* Applied: what this rank received was staged, its buffers too full to
   * take it past their rows (exchange.h). */
  int staged;
  /* Seconds in the first collective: waiting for the other ranks to reach
   * the hand-off, time they would otherwise have waited at the sync. */
  double arrival_wait;
  const double *load_before, *load_after; /* [group size], until next call */
  /* [size * DPSHIM__NOTES]: every rank's note, in rank order, or NULL when
   * the headers were not gathered. Valid until the next call. */
  const double *notes;
  int32_t queued_max; /* the most step-log notes a rank has waiting */
  /* `auto` priced the plan out (not worth it) in this group and in every
   * TP/CP peer group: the same on all of their ranks. */
  int backoff_ok;
} dpshim__balance_report_t;

typedef struct dpshim__balancer dpshim__balancer_t;

dpshim__balancer_t *dpshim__balancer_new(const dpshim__balance_config_t *cfg);
void dpshim__balancer_free(dpshim__balancer_t *b);
/* The per-rank arrays for a group of `size`, ahead of the first hand-off:
 * then no hand-off allocates them (a rank alone out of memory there would
 * leave the others waiting). 0 or DPSHIM_ENOMEM. */
int dpshim__balancer_reserve(dpshim__balancer_t *b, int32_t size);
/* priced: the model is in microseconds (given or fitted), so that plans
 * can be priced against what applying them costs. */
void dpshim__balancer_set_model(dpshim__balancer_t *b,
                                dpshim_cost_model_t model, int priced);
/* The ViT gate: `encoder` is the encoder's part of a sample's cost in the
 * model's unit (a per patches_sq, b per patch; the rest unread); the model
 * (set_model's) is the whole sample's, encoder included. on = 0: no gate. */
void dpshim__balancer_set_encoder(dpshim__balancer_t *b,
                                  dpshim_cost_model_t encoder, int on);
/* Each group rank's host ([group size], kept, the caller's), for counting
 * the bytes that cross hosts; with `tell`, plans also prefer moves within a
 * host, a byte across hosts priced at inter_host_cost bytes within one
 * (dpshim_plan_input_t's). NULL: one host. */
void dpshim__balancer_set_hosts(dpshim__balancer_t *b, const int32_t *host,
                                int tell, double inter_host_cost);

/* Balances `batch`. Collective over comm, and over ho->peers. Returns 0 (applied or skipped; see rep) or the
 * negative DPSHIM_E* code that every rank returns. Skipped: "warmup" (not
 * planned), the policy's reasons (policy.h), "exchange-too-large",
 * "peer-skip" (a peer group skipped). Fields
 * that differ between ranks (names, row sizes, kinds, order) are an agreed
 * error. A verify error comes after the exchange: the batches are then
 * already changed. */
int dpshim__balance(dpshim__balancer_t *b, dpshim__comm_t *comm,
                    dpshim_batch_t *batch, const dpshim__handoff_t *ho,
                    dpshim__balance_report_t *rep);

/* What every hand-off gathers per rank: the header, and the slot its
 * samples' metas ride in when the largest rank's take `most` bytes. */
size_t dpshim__balance_header_bytes(void);
size_t dpshim__balance_slot_bytes(size_t most);

#endif
