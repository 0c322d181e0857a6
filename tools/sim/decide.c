/* One hand-off's decision, taken by the shim's own rules (shim/policy.h) on
 * what every rank would have gathered; see sim.h. Kept apart from
 * simulate.c so that a unit test can hold it against the shim's balancer
 * without the workload and its libraries. */
#include <stdlib.h>
#include <string.h>

#include "../timeutil.h"
#include "policy.h"
#include "sim.h"

/* A solve that grew the plan's memory (the run's first, or one on a larger
 * instance) pays page faults that the shim, whose plan lives as long as the
 * job, pays once, not at every step: up to this many such solves are not
 * timed (kk allocates at every solve, and is timed after them). */
#define GROWTH_SOLVES 2

/* Solves until reps solves are timed (the plan is the same each time); the
 * median CPU time into *solve_s. */
static int timed_solve(const dpshim_plan_input_t *in, int reps,
                       dpshim_plan_t *plan, double *solve_s) {
  double t[SIM_MAX_SOLVE_REPS];
  if (reps < 1) reps = 1;
  if (reps > SIM_MAX_SOLVE_REPS) reps = SIM_MAX_SOLVE_REPS;
  for (int k = 0, grew = 0; k < reps;) {
    double t0 = dpshim__tool_cpu_s();
    int rc = dpshim_plan_solve(in, plan);
    double cpu = dpshim__tool_cpu_s() - t0;
    if (rc < 0) return rc;
    if (plan->allocations > 0 && grew < GROWTH_SOLVES) grew++;
    else t[k++] = cpu;
  }
  *solve_s = dpshim__tool_median(t, (size_t)reps);
  return 0;
}

/* Per-rank scratch: sample counts, token buffers, use. */
typedef struct scratch {
  int32_t *count;
  int64_t *token_rows, *use;
} scratch_t;

static int scratch_new(scratch_t *s, int32_t ranks) {
  s->count = calloc((size_t)ranks, sizeof *s->count);
  s->token_rows = calloc((size_t)ranks, sizeof *s->token_rows);
  s->use = calloc(2 * (size_t)ranks, sizeof *s->use);
  return s->count && s->token_rows && s->use ? 0 : DPSHIM_ENOMEM;
}

static void scratch_free(scratch_t *s) {
  free(s->count);
  free(s->token_rows);
  free(s->use);
}

/* The shim's cap: the configured one lowered to every rank's token buffer
 * (balance.c's cap_ratio(), whose buffers are the token-aligned fields). */
static double lowered_cap(const sim_decide_in_t *in, scratch_t *s) {
  int64_t tokens = 0;
  for (int64_t i = 0; i < in->nsamples; i++) tokens += in->samples[i].len;
  for (int32_t r = 0; r < in->ranks; r++)
    s->token_rows[r] = in->room[SIM_ROOM_TOKENS(r)];
  return dpshim__policy_cap_ratio(in->cap_ratio, s->token_rows, in->ranks,
                                  tokens);
}

/* Whether every rank's buffers hold what the plan gives it (balance.c's
 * plan_fits(), over samples and tokens). */
static int plan_fits(const sim_decide_in_t *in, const dpshim_plan_t *plan,
                     scratch_t *s) {
  memset(s->use, 0, 2 * (size_t)in->ranks * sizeof *s->use);
  for (int64_t i = 0; i < in->nsamples; i++) {
    s->use[SIM_ROOM_SAMPLES(plan->dest[i])]++;
    s->use[SIM_ROOM_TOKENS(plan->dest[i])] += in->samples[i].len;
  }
  return dpshim__policy_fits(s->use, in->room, 2 * (size_t)in->ranks);
}

static const char *decide(const sim_decide_in_t *in, dpshim_plan_t *plan,
                          sim_decide_out_t *out, scratch_t *s) {
  for (int64_t i = 0; i < in->nsamples; i++) s->count[in->samples[i].origin]++;
  const char *why = dpshim__policy_precheck(s->count, in->ranks);
  if (why) return why;
  dpshim_plan_input_t pin = {
      .ranks = in->ranks,
      .nsamples = in->nsamples,
      .samples = in->samples,
      .history = in->history,
      .history_len = in->history ? in->ranks : 0,
      .model = in->model,
      .cap_ratio = lowered_cap(in, s),
      .threshold = in->threshold,
      .algo = in->algo,
      .host = in->host,
      .host_len = in->host ? in->ranks : 0,
      .ignore_hosts = in->ignore_hosts,
      .inter_host_cost = in->inter_host_cost,
  };
  out->rc = timed_solve(&pin, in->solve_reps, plan, &out->solve_s);
  if (out->rc < 0) return NULL;
  out->solved = 1;
  return dpshim__policy_skip(plan, in->samples, in->nsamples, in->ranks,
                             in->algo, plan_fits(in, plan, s));
}

const char *sim_decide(const sim_decide_in_t *in, dpshim_plan_t *plan,
                       sim_decide_out_t *out) {
  memset(out, 0, sizeof *out);
  scratch_t s;
  out->rc = scratch_new(&s, in->ranks);
  const char *why = NULL;
  if (out->rc == 0)
    why = decide(in, plan, out, &s);
  else
    snprintf(plan->message, sizeof plan->message, "out of memory at %d "
             "ranks", (int)in->ranks);
  scratch_free(&s);
  return why;
}

void sim_decide_history(const sim_decide_out_t *out, const char *why,
                        const dpshim_plan_t *plan, int32_t ranks,
                        double *history) {
  /* As balance.c: a precheck skip returns before the plan and keeps the
   * history; a solved plan leaves its loads, after if applied. */
  if (!out->solved) return;
  memcpy(history, why ? plan->load_before : plan->load_after,
         (size_t)ranks * sizeof *history);
}

/* The shim's reasons (solver's and policy.h's), in sim_step_t's order. */
static const char *const skip_names[SIM_NSKIPS] = {
    "balanced",   "dominant-sample", "no-gain",   "no-move", "capacity",
    "empty-rank", "too-few-samples", "algo-none", "not-worth-it", "other"};

int sim_skip_index(const char *why) {
  for (int k = 0; k < SIM_NSKIPS - 1; k++)
    if (!strcmp(why, skip_names[k])) return k;
  return SIM_NSKIPS - 1;
}

const char *sim_skip_name(int k) { return skip_names[k]; }
