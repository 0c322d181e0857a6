/* The rules that decide a hand-off, once, for the shim and for dpshim-sim.
 *
 * Pure functions of what every rank of a DP group has gathered, so every
 * rank takes the same decision; the simulator links them instead of copying
 * them. A hand-off is skipped, in this order, when some rank holds no sample
 * ("too-few-samples" / "empty-rank"), when the solver skips (its reasons),
 * when a plan other than the original's would raise the busiest rank's load
 * ("no-gain"), when it moves nothing ("no-move"), or when a rank could not
 * hold what the plan gives it ("capacity").
 */
#ifndef DPSHIM_SHIM_POLICY_H
#define DPSHIM_SHIM_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "dpshim/fit.h"
#include "dpshim/solver.h"

/* Why a hand-off cannot be balanced before solving, or NULL. nsamples[r] is
 * rank r's sample count: the solver keeps every rank busy, so it needs a
 * sample on each to begin with. */
const char *dpshim__policy_precheck(const int32_t *nsamples, int32_t ranks);

/* The solver's cap ratio: `configured` (x mean tokens per rank; 0 = none),
 * lowered so that no rank is given more tokens than token_rows[r], the
 * smallest token-aligned buffer of rank r (< 0: none). */
double dpshim__policy_cap_ratio(double configured, const int64_t *token_rows,
                                int32_t ranks, int64_t tokens);

/* Why a solved plan is not applied, or NULL to apply it. `fits`: whether
 * every rank can hold what the plan gives it (the caller knows its buffers;
 * see dpshim__policy_fits). */
const char *dpshim__policy_skip(const dpshim_plan_t *plan,
                                const dpshim_sample_t *samples, int64_t n,
                                int32_t ranks, dpshim_algo_t algo, int fits);

/* `auto` (DPSHIM_TRIGGER_THRESHOLD=auto): why a solved plan does not pay,
 * or NULL. It pays where the step's predicted maximum (plan->load_before
 * and load_after, microseconds) falls by more than DPSHIM__POLICY_WORTH
 * times cost_s[r], what applying it costs rank r in seconds, at its
 * largest. *saving_s and *cost_s say both. */
#define DPSHIM__POLICY_WORTH 1.5
/* The reason every priced skip gives. */
#define DPSHIM__POLICY_NOT_WORTH_IT "not-worth-it"
const char *dpshim__policy_worth(const dpshim_plan_t *plan,
                                 const double *cost_s, int32_t ranks,
                                 double *saving_s, double *max_cost_s);

/* `auto`, before solving: why no plan can pay, or NULL. load[r] is what
 * rank r holds now (microseconds, the step's history included): no plan
 * brings the maximum below the mean, and applying any plan costs rank r at
 * least fixed_s[r], its fixed part. *saving_s and *cost_s get those
 * bounds. Deciding this costs a pass over the loads, not a solve. */
const char *dpshim__policy_cannot_pay(const double *load,
                                      const double *fixed_s, int32_t ranks,
                                      double *saving_s, double *cost_s);

/* The encoder's cost (sq * patches^2 + lin * patches, the model's
 * vision terms) of sample s's largest unit the ViT plan can place apart:
 * a block it is attended in, of patches_sq / patches patches (an image;
 * a tile; a frame of a video attended frame by frame, which adapters show
 * as one image per frame). Exact for one image or blocks of one size; a
 * sample of unequal images gets a block between their mean and largest. */
double dpshim__policy_vit_unit(double sq, double lin, const dpshim_sample_t *s);

/* The ViT gate's loads with the samples s[0 .. n) at dest (NULL: at their
 * origin), per rank of `ranks`: llm[r] and enc[r] the LLM's and the
 * encoder's parts of what r holds (a sample's encoder part is sq *
 * patches_sq + lin * patches, its LLM part the rest of its cost under
 * `model`, no less than 0), bytes[r] what one way of a meeting moves (a
 * sample's bytes, or half its patches at `wire` bytes a patch where that
 * is more). Returns the encoder part of the costliest unit the ViT plan
 * can place (dpshim__policy_vit_unit). */
double dpshim__policy_gate_loads(const dpshim_sample_t *s, int64_t n,
                                 const int32_t *dest, int32_t ranks,
                                 dpshim_cost_model_t model, double sq,
                                 double lin, double wire, double *llm,
                                 double *enc, double *bytes);

/* The ViT gate (DPSHIM_VIT_TRIGGER_THRESHOLD=auto): whether a micro-batch's
 * encoder calls should meet to balance its images, or NULL. Per rank r, in
 * microseconds: before[r] what the step held before this hand-off, llm[r]
 * and enc[r] the LLM and encoder parts of what it holds from it; enc_most
 * the encoder part of the costliest unit the ViT plan can place
 * (dpshim__policy_vit_unit). Apart, the step ends
 * at max(before + llm + enc); meeting, the ranks wait for each other at
 * the encoder's forward and backward, so at best at max(before) +
 * max(llm) + max(mean(enc), enc_most). They meet where that saves more
 * than DPSHIM__POLICY_WORTH times meet_s, what meeting costs (seconds).
 * *saving_s gets the saving (< 0: meeting loses). */
/* The step's end at best with the calls met (see dpshim__policy_meet), in
 * the loads' unit. */
double dpshim__policy_met_end(const double *before, const double *llm,
                              const double *enc, double enc_most,
                              int32_t ranks);
/* The same at its bound under a plan of the LLM's part alone, the samples
 * s[0 .. n) anywhere: each part even over the ranks, none below its
 * costliest sample's (the LLM's) or unit's (the encoder's). A sample's
 * encoder part is sq * patches_sq + lin * patches, its LLM part the rest
 * of its cost under `model` (no less than 0). */
double dpshim__policy_llm_bound(const double *before, int32_t ranks,
                                const dpshim_sample_t *s, int64_t n,
                                dpshim_cost_model_t model, double sq,
                                double lin);
const char *dpshim__policy_meet(const double *before, const double *llm,
                                const double *enc, double enc_most,
                                int32_t ranks, double meet_s,
                                double *saving_s);
/* The gate's floor on what evening the images copies: rank r, above the
 * mean of enc[], sends that share of held[r] (its samples' bytes), which
 * becomes sent[r] (0 at or below the mean; held and sent may be one). */
void dpshim__policy_vit_sent(const double *enc, const double *held,
                             int32_t ranks, double *sent);
/* Where the gate lets the calls meet, the ViT plan is taken above this
 * imbalance (the ratio's former default): the meeting is priced already,
 * this keeps the exchanges for plans that change something. */
#define DPSHIM__POLICY_VIT_MET_RATIO 0.1
/* What meeting costs is learnt from the calls that met: a moving average,
 * the latest call weighing this much; the first call, and the first after
 * a retry (below: fresh), start it again. */
#define DPSHIM__POLICY_MEET_WEIGHT 0.25
typedef struct dpshim__policy_learnt {
  double s;     /* seconds; 0 before any call */
  int64_t seen; /* calls learnt from */
  int fresh;    /* the next call replaces s */
  double last;  /* the weight the latest call had in s */
} dpshim__policy_learnt_t;
void dpshim__policy_learn(dpshim__policy_learnt_t *m, double seconds);
/* More seconds of the latest call learnt (an async forward's wait). */
void dpshim__policy_learn_more(dpshim__policy_learnt_t *m, double seconds);
/* What meetings cost is all the gate learns from them, so one slow meeting
 * (a preempted rank) would keep the calls apart for good. Where that
 * measure alone keeps them apart (held: either plan would pay for the
 * exchange's floor and the rounds), the calls meet anyway once every
 * `after` such micro-batches (due), priced without it, and that meeting's
 * measure replaces the average; `after` doubles at each such retry, up to
 * the most, and starts again when the gate meets on its own. The same
 * answer everywhere: from the gate's agreed decisions. */
#define DPSHIM__POLICY_RETRY_FIRST 8
#define DPSHIM__POLICY_RETRY_MOST 512
typedef struct dpshim__policy_retry {
  int32_t waited, after; /* zero: not started */
} dpshim__policy_retry_t;
/* Whether a micro-batch held apart is the one to meet again. */
int dpshim__policy_retry_due(const dpshim__policy_retry_t *r);
/* After the gate's final answer: met on its own, held apart, or met to
 * measure again (retried). */
void dpshim__policy_retry_note(dpshim__policy_retry_t *r, int met, int held,
                               int retried);
/* The model's prediction for one rank's features (p->time is not read),
 * in the model's unit. */
double dpshim__policy_predict(dpshim_cost_model_t model,
                              const dpshim_fit_point_t *p);

/* max / mean - 1 of the ranks' loads; 0 where they sum to 0. */
double dpshim__policy_imbalance(const double *load, int32_t ranks);

/* Whether use[k] <= room[k] for every k < count: rows, samples or bytes per
 * rank and buffer, in any layout both arrays share. */
int dpshim__policy_fits(const int64_t *use, const int64_t *room, size_t count);

/* The fitted model (seconds per sample) as the shim uses it: microseconds,
 * which changes no decision (all are scale-free) and keeps loads readable. */
dpshim_cost_model_t dpshim__policy_model_from_fit(dpshim_cost_model_t fit);

#endif
