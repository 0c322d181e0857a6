/* The hand-off's decision rules; see policy.h. */
#include "policy.h"

#include <math.h>
#include <string.h>

const char *dpshim__policy_precheck(const int32_t *nsamples, int32_t ranks) {
  int64_t total = 0;
  int empty = 0;
  for (int32_t r = 0; r < ranks; r++) {
    total += nsamples[r];
    empty |= nsamples[r] == 0;
  }
  if (!empty) return NULL;
  return total < ranks ? "too-few-samples" : "empty-rank";
}

double dpshim__policy_cap_ratio(double configured, const int64_t *token_rows,
                                int32_t ranks, int64_t tokens) {
  double ratio = configured;
  if (tokens <= 0) return ratio; /* no tokens: no buffer can overflow */
  for (int32_t r = 0; r < ranks; r++) {
    if (token_rows[r] < 0) continue;
    double fits = (double)token_rows[r] * ranks / (double)tokens;
    if (ratio == 0 || fits < ratio) ratio = fits;
  }
  return ratio;
}

static double max_of(const double *v, int32_t n) {
  double m = 0;
  for (int32_t r = 0; r < n; r++)
    if (v[r] > m) m = v[r];
  return m;
}

static int moves_any(const dpshim_plan_t *plan, const dpshim_sample_t *s,
                     int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (plan->dest[i] != s[i].origin) return 1;
  return 0;
}

const char *dpshim__policy_skip(const dpshim_plan_t *plan,
                                const dpshim_sample_t *samples, int64_t n,
                                int32_t ranks, dpshim_algo_t algo, int fits) {
  if (plan->decision != DPSHIM_DECISION_APPLY)
    return dpshim_skip_reason_name(plan->reason);
  /* The original applies whatever it solves; the others never raise the
   * busiest rank's load. */
  if (algo != DPSHIM_ALGO_SEED &&
      max_of(plan->load_after, ranks) > max_of(plan->load_before, ranks))
    return dpshim_skip_reason_name(DPSHIM_SKIP_NO_GAIN);
  if (!moves_any(plan, samples, n)) return "no-move";
  return fits ? NULL : "capacity";
}

int dpshim__policy_fits(const int64_t *use, const int64_t *room,
                        size_t count) {
  for (size_t k = 0; k < count; k++)
    if (use[k] > room[k]) return 0;
  return 1;
}

dpshim_cost_model_t dpshim__policy_model_from_fit(dpshim_cost_model_t fit) {
  return (dpshim_cost_model_t){fit.a * 1e6, fit.b * 1e6, fit.c * 1e6,
                               fit.d * 1e6, fit.e * 1e6};
}

const char *dpshim__policy_worth(const dpshim_plan_t *plan,
                                 const double *cost_s, int32_t ranks,
                                 double *saving_s, double *max_cost_s) {
  double before = max_of(plan->load_before, ranks);
  double after = max_of(plan->load_after, ranks);
  *saving_s = 1e-6 * (before - after);
  *max_cost_s = max_of(cost_s, ranks);
  return *saving_s > DPSHIM__POLICY_WORTH * *max_cost_s ? NULL
                                                        : DPSHIM__POLICY_NOT_WORTH_IT;
}

const char *dpshim__policy_cannot_pay(const double *load,
                                      const double *fixed_s, int32_t ranks,
                                      double *saving_s, double *cost_s) {
  double sum = 0;
  for (int32_t r = 0; r < ranks; r++) sum += load[r];
  *saving_s = 1e-6 * (max_of(load, ranks) - sum / ranks);
  *cost_s = max_of(fixed_s, ranks);
  return *saving_s > DPSHIM__POLICY_WORTH * *cost_s
             ? NULL
             : DPSHIM__POLICY_NOT_WORTH_IT;
}

double dpshim__policy_vit_unit(double sq, double lin,
                               const dpshim_sample_t *s) {
  if (s->patches <= 0) return 0;
  double block = (double)s->patches_sq / (double)s->patches;
  return sq * block * block + lin * block;
}

/* Sample s's encoder part (sq * patches_sq + lin * patches) into *enc,
 * and its LLM part returned: the rest of its cost, no less than 0. */
static double split_cost(dpshim_cost_model_t model, double sq, double lin,
                         const dpshim_sample_t *s, double *enc) {
  *enc = sq * (double)s->patches_sq + lin * (double)s->patches;
  return fmax(0, dpshim_sample_cost(model, s) - *enc);
}

double dpshim__policy_gate_loads(const dpshim_sample_t *s, int64_t n,
                                 const int32_t *dest, int32_t ranks,
                                 dpshim_cost_model_t model, double sq,
                                 double lin, double wire, double *llm,
                                 double *enc, double *bytes) {
  double most = 0;
  memset(llm, 0, (size_t)ranks * sizeof *llm);
  memset(enc, 0, (size_t)ranks * sizeof *enc);
  memset(bytes, 0, (size_t)ranks * sizeof *bytes);
  for (int64_t i = 0; i < n; i++) {
    int32_t at = dest ? dest[i] : s[i].origin;
    double e, part = split_cost(model, sq, lin, &s[i], &e);
    enc[at] += e;
    llm[at] += part;
    bytes[at] += fmax((double)s[i].bytes, 0.5 * wire * (double)s[i].patches);
    most = fmax(most, dpshim__policy_vit_unit(sq, lin, &s[i]));
  }
  return most;
}

double dpshim__policy_met_end(const double *before, const double *llm,
                              const double *enc, double enc_most,
                              int32_t ranks) {
  double enc_sum = 0;
  for (int32_t r = 0; r < ranks; r++) enc_sum += enc[r];
  return max_of(before, ranks) + max_of(llm, ranks) +
         fmax(enc_sum / ranks, enc_most);
}

double dpshim__policy_llm_bound(const double *before, int32_t ranks,
                                const dpshim_sample_t *s, int64_t n,
                                dpshim_cost_model_t model, double sq,
                                double lin) {
  double llm = 0, llm_most = 0, enc = 0, unit = 0;
  for (int64_t i = 0; i < n; i++) {
    double e, part = split_cost(model, sq, lin, &s[i], &e);
    llm += part, enc += e;
    llm_most = fmax(llm_most, part);
    unit = fmax(unit, dpshim__policy_vit_unit(sq, lin, &s[i]));
  }
  return max_of(before, ranks) + fmax(llm / ranks, llm_most) +
         fmax(enc / ranks, unit);
}

const char *dpshim__policy_meet(const double *before, const double *llm,
                                const double *enc, double enc_most,
                                int32_t ranks, double meet_s,
                                double *saving_s) {
  double apart = 0;
  for (int32_t r = 0; r < ranks; r++)
    apart = fmax(apart, before[r] + llm[r] + enc[r]);
  *saving_s =
      1e-6 * (apart - dpshim__policy_met_end(before, llm, enc, enc_most, ranks));
  return *saving_s > DPSHIM__POLICY_WORTH * meet_s
             ? NULL
             : DPSHIM__POLICY_NOT_WORTH_IT;
}

void dpshim__policy_learn(dpshim__policy_learnt_t *m, double seconds) {
  int fresh = !m->seen++ || m->fresh;
  m->fresh = 0;
  m->last = fresh ? 1 : DPSHIM__POLICY_MEET_WEIGHT;
  m->s += m->last * (seconds - m->s);
}

void dpshim__policy_learn_more(dpshim__policy_learnt_t *m, double seconds) {
  m->s += m->last * seconds;
}

static int32_t retry_after(const dpshim__policy_retry_t *r) {
  return r->after ? r->after : DPSHIM__POLICY_RETRY_FIRST;
}

int dpshim__policy_retry_due(const dpshim__policy_retry_t *r) {
  return r->waited + 1 >= retry_after(r);
}

void dpshim__policy_retry_note(dpshim__policy_retry_t *r, int met, int held,
                               int retried) {
  int32_t after = retry_after(r);
  if (retried)
    *r = (dpshim__policy_retry_t){
        0, after < DPSHIM__POLICY_RETRY_MOST / 2 ? 2 * after
                                                 : DPSHIM__POLICY_RETRY_MOST};
  else if (met)
    *r = (dpshim__policy_retry_t){0, DPSHIM__POLICY_RETRY_FIRST};
  else
    *r = (dpshim__policy_retry_t){r->waited + (held != 0), after};
}

void dpshim__policy_vit_sent(const double *enc, const double *held,
                             int32_t ranks, double *sent) {
  double sum = 0;
  for (int32_t r = 0; r < ranks; r++) sum += enc[r];
  double mean = sum / ranks;
  for (int32_t r = 0; r < ranks; r++)
    sent[r] = enc[r] > mean ? held[r] * (1 - mean / enc[r]) : 0;
}

double dpshim__policy_predict(dpshim_cost_model_t model,
                              const dpshim_fit_point_t *p) {
  return model.a * p->sum_len2 + model.b * p->sum_len + model.c * p->count +
         model.d * p->sum_patches_sq + model.e * p->sum_patches;
}

double dpshim__policy_imbalance(const double *load, int32_t ranks) {
  double sum = 0;
  for (int32_t r = 0; r < ranks; r++) sum += load[r];
  return sum > 0 ? max_of(load, ranks) * ranks / sum - 1 : 0;
}
