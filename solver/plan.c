/* dpshim_plan_solve(): validate, compute costs and metrics, run the chosen
 * algorithm, then derive every output from the destinations it chose. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

static const char *const algo_names[] = {
    [DPSHIM_ALGO_DEFAULT] = "default",
    [DPSHIM_ALGO_SEED] = "seed",
    [DPSHIM_ALGO_KK] = "kk",
    [DPSHIM_ALGO_NONE] = "none",
    [DPSHIM_ALGO_KK_CAP] = "kk-cap",
};
#define ALGO_COUNT ((int)(sizeof algo_names / sizeof algo_names[0]))

static const dpshim__algo_fn algo_fns[] = {
    [DPSHIM_ALGO_DEFAULT] = dpshim__algo_default,
    [DPSHIM_ALGO_SEED] = dpshim__algo_seed,
    [DPSHIM_ALGO_KK] = dpshim__algo_kk,
    [DPSHIM_ALGO_NONE] = NULL,
    [DPSHIM_ALGO_KK_CAP] = dpshim__algo_kk_cap,
};

int dpshim_algo_from_name(const char *name, dpshim_algo_t *algo) {
  for (int a = 0; name && a < ALGO_COUNT; a++)
    if (strcmp(name, algo_names[a]) == 0) {
      *algo = (dpshim_algo_t)a;
      return 0;
    }
  return DPSHIM_EINVAL;
}

const char *dpshim_algo_name(dpshim_algo_t algo) {
  return (int)algo >= 0 && (int)algo < ALGO_COUNT ? algo_names[algo] : "?";
}

const char *dpshim_skip_reason_name(dpshim_skip_reason_t reason) {
  switch (reason) {
  case DPSHIM_SKIP_NONE: return "none";
  case DPSHIM_SKIP_BALANCED: return "balanced";
  case DPSHIM_SKIP_DOMINANT: return "dominant-sample";
  case DPSHIM_SKIP_NO_GAIN: return "no-gain";
  case DPSHIM_SKIP_ALGO_NONE: return "algo-none";
  case DPSHIM_SKIP_CAPACITY: return "capacity";
  }
  return "?";
}

void dpshim_plan_init(dpshim_plan_t *plan) { memset(plan, 0, sizeof *plan); }

void dpshim_plan_free(dpshim_plan_t *plan) {
  free(plan->dest);
  free(plan->load_before);
  free(plan->load_after);
  if (plan->scratch_) {
    dpshim__arena_free(plan->scratch_);
    free(plan->scratch_);
  }
  dpshim_plan_init(plan);
}

/* ---- validation: the first bad field is named in plan->message ---------- */

#define FAIL(plan, ...)                                                 \
  (snprintf((plan)->message, sizeof (plan)->message, __VA_ARGS__),      \
   DPSHIM_EINVAL)

/* A sample's bytes priced across hosts stay within int64. */
#define MAX_SAMPLE_BYTES ((int64_t)1 << 50)

static int finite_nonneg(double v) { return isfinite(v) && v >= 0; }

static int validate_scalars(const dpshim_plan_input_t *in, dpshim_plan_t *p) {
  if (in->ranks < 1) return FAIL(p, "ranks = %d: expected >= 1", in->ranks);
  if (in->nsamples < in->ranks || in->nsamples > INT32_MAX)
    return FAIL(p, "nsamples = %lld: expected %d..%d (every rank needs a sample)",
                (long long)in->nsamples, in->ranks, INT32_MAX);
  if (!in->samples) return FAIL(p, "samples = NULL: expected an array");
  if (in->history && in->history_len != in->ranks)
    return FAIL(p, "history_len = %d: expected ranks (%d)", in->history_len,
                in->ranks);
  const double *coef[] = {&in->model.a, &in->model.b, &in->model.c,
                          &in->model.d, &in->model.e};
  for (int k = 0; k < 5; k++)
    if (!finite_nonneg(*coef[k]))
      return FAIL(p, "model.%c = %g: expected a finite number >= 0", 'a' + k,
                  *coef[k]);
  if (!finite_nonneg(in->cap_ratio))
    return FAIL(p, "cap_ratio = %g: expected 0 (no cap) or a finite number > 0",
                in->cap_ratio);
  if (!finite_nonneg(in->threshold))
    return FAIL(p, "threshold = %g: expected a finite number >= 0",
                in->threshold);
  if ((int)in->algo < 0 || (int)in->algo >= ALGO_COUNT)
    return FAIL(p, "algo = %d: expected default, seed, kk, none or kk-cap",
                (int)in->algo);
  if (in->host && in->host_len != in->ranks)
    return FAIL(p, "host_len = %d: expected ranks (%d)", in->host_len,
                in->ranks);
  if (in->inter_host_cost != 0 &&
      !(in->inter_host_cost >= 1 &&
        in->inter_host_cost <= DPSHIM_INTER_HOST_COST_MAX))
    return FAIL(p, "inter_host_cost = %g: expected 0 (default) or 1..%g",
                in->inter_host_cost, DPSHIM_INTER_HOST_COST_MAX);
  if (in->rows_cap && in->rows_cap_len != in->ranks)
    return FAIL(p, "rows_cap_len = %d: expected ranks (%d)", in->rows_cap_len,
                in->ranks);
  return 0;
}

static int validate_ranks(const dpshim_plan_input_t *in, dpshim_plan_t *p) {
  for (int32_t r = 0; in->history && r < in->ranks; r++)
    if (!finite_nonneg(in->history[r]))
      return FAIL(p, "history[%d] = %g: expected a finite number >= 0", r,
                  in->history[r]);
  for (int32_t r = 0; in->rows_cap && r < in->ranks; r++)
    if (in->rows_cap[r] < 0)
      return FAIL(p, "rows_cap[%d] = %lld: expected >= 0", r,
                  (long long)in->rows_cap[r]);
  return 0;
}

/* Sample i's fields; build_context() asks in its pass over the samples. */
static int validate_sample(const dpshim_plan_input_t *in, dpshim_plan_t *p,
                         int64_t i) {
  const dpshim_sample_t *s = &in->samples[i];
  if (s->len < 0 || s->len > INT32_MAX)
    return FAIL(p, "samples[%lld].len = %lld: expected 0..%d", (long long)i,
                (long long)s->len, INT32_MAX);
  if (s->bytes < 0 || s->bytes > MAX_SAMPLE_BYTES)
    return FAIL(p, "samples[%lld].bytes = %lld: expected 0..2^50",
                (long long)i, (long long)s->bytes);
  if (s->rows < 0 || s->rows > INT32_MAX)
    return FAIL(p, "samples[%lld].rows = %lld: expected 0..%d", (long long)i,
                (long long)s->rows, INT32_MAX);
  if (s->patches < 0 || s->patches_sq < 0)
    return FAIL(p, "samples[%lld].%s = %lld: expected >= 0", (long long)i,
                s->patches < 0 ? "patches" : "patches_sq",
                (long long)(s->patches < 0 ? s->patches : s->patches_sq));
  if (s->origin < 0 || s->origin >= in->ranks)
    return FAIL(p, "samples[%lld].origin = %d: expected 0..%d", (long long)i,
                s->origin, in->ranks - 1);
  return 0;
}

/* After every sample is valid: every rank holds one (per_rank[r] of them),
 * and no cost overflowed (the first that did: *overflow, else -1). */
static int validate_sums(const dpshim_plan_input_t *in, dpshim_plan_t *p,
                         const int64_t *per_rank, const double *cost,
                         int64_t overflow) {
  for (int32_t r = 0; r < in->ranks; r++)
    if (per_rank[r] == 0)
      return FAIL(p, "rank %d holds no sample: every rank needs one", r);
  if (overflow < 0) return 0;
  const dpshim_sample_t *smp = &in->samples[overflow];
  return FAIL(p, "cost of samples[%lld] (len %lld, patches_sq %lld) = %g: "
              "the model overflows", (long long)overflow, (long long)smp->len,
              (long long)smp->patches_sq, cost[overflow]);
}

/* ---- set-up ------------------------------------------------------------- */

static int reserve_outputs(dpshim_plan_t *p, int32_t ranks, int64_t n) {
  if (!p->scratch_) {
    p->allocations++;
    if (!(p->scratch_ = calloc(1, sizeof(dpshim__arena_t))))
      return DPSHIM_ENOMEM;
  }
  if (dpshim__arena_reset(p->scratch_) < 0) return DPSHIM_ENOMEM;
  if (n > p->samples_cap_) { /* with the arena's room to grow (arena.c) */
    p->allocations++;
    int64_t cap = n + n / 2;
    int32_t *d = realloc(p->dest, sizeof *d * (size_t)cap);
    if (!d) return DPSHIM_ENOMEM;
    p->dest = d;
    p->samples_cap_ = cap;
  }
  if (ranks > p->ranks_cap_) {
    p->allocations += 2;
    double *b = realloc(p->load_before, sizeof *b * (size_t)ranks);
    if (b) p->load_before = b;
    double *a = realloc(p->load_after, sizeof *a * (size_t)ranks);
    if (a) p->load_after = a;
    if (!a || !b) return DPSHIM_ENOMEM;
    p->ranks_cap_ = ranks;
  }
  return 0;
}

/* All ranks on one host plan as with no hosts: the same plan, and no
 * search of a host as wide as the group. */
static int one_host(const dpshim_plan_input_t *in) {
  for (int32_t r = 1; in->host && r < in->ranks; r++)
    if (in->host[r] != in->host[0]) return 0;
  return 1;
}

static double inter_host_cost(const dpshim_plan_input_t *in) {
  return in->inter_host_cost > 0 ? in->inter_host_cost
                                 : DPSHIM_INTER_HOST_COST_DEFAULT;
}

/* Costs, history and caps; a finite model can still overflow on a huge len.
 * The samples are validated in the same pass (one read of them, not two):
 * the first invalid field is named, as before any cost that overflows. */
static int build_context(const dpshim_plan_input_t *in, dpshim_plan_t *p,
                         dpshim__ctx_t *ctx, int64_t *per_rank) {
  double *cost = DPSHIM__ALLOC(ctx, double, in->nsamples);
  double *history = DPSHIM__ALLOC(ctx, double, in->ranks);
  int64_t *rows0 = DPSHIM__ALLOC(ctx, int64_t, in->ranks);
  int32_t *origin = DPSHIM__ALLOC(ctx, int32_t, in->nsamples);
  int32_t *len = DPSHIM__ALLOC(ctx, int32_t, in->nsamples);
  if (!cost || !history || !rows0 || !origin || !len) return DPSHIM_ENOMEM;
  for (int32_t r = 0; r < in->ranks; r++) {
    p->load_before[r] = history[r] = in->history ? in->history[r] : 0;
    rows0[r] = per_rank[r] = 0;
  }
  int64_t tokens = 0, longest = 0, overflow = -1;
  double work = 0;
  for (int64_t i = 0; i < in->nsamples; i++) {
    const dpshim_sample_t *smp = &in->samples[i];
    int rc = validate_sample(in, p, i);
    if (rc < 0) return rc;
    per_rank[smp->origin]++;
    cost[i] = dpshim__sample_cost(in->model, smp);
    if (!isfinite(cost[i]) && overflow < 0) overflow = i;
    tokens += smp->len;
    if (smp->len > longest) longest = smp->len;
    work += cost[i];
    rows0[smp->origin] += smp->rows;
    p->dest[i] = origin[i] = smp->origin;
    len[i] = (int32_t)smp->len;
  }
  int rc = validate_sums(in, p, per_rank, cost, overflow);
  if (rc < 0) return rc;
  dpshim__sum_costs(cost, origin, in->nsamples, p->load_before);
  ctx->cost = cost;
  ctx->rows0 = rows0;
  ctx->origin = origin;
  ctx->len = len;
  ctx->rows_cap = in->rows_cap;
  ctx->host = in->ignore_hosts || one_host(in) ? NULL : in->host;
  int32_t *ring;
  if (dpshim__host_ring(ctx, &ring) < 0) return DPSHIM_ENOMEM;
  ctx->host_ring = ring;
  ctx->inter_host_cost = inter_host_cost(in);
  ctx->history = history;
  ctx->model = in->model;
  ctx->tokens = tokens;
  ctx->longest = longest;
  ctx->work = work;
  ctx->cap = in->cap_ratio > 0
                 ? (int64_t)floor(in->cap_ratio * (double)tokens / in->ranks)
                 : DPSHIM__NO_CAP;
  return 0;
}

/* ---- solve -------------------------------------------------------------- */

/* Every algorithm but kk (which ignores caps, as verl does) is held to the
 * rows caps here, whatever it did to meet them. */
static int run_algorithm(const dpshim_plan_input_t *in, dpshim__ctx_t *ctx,
                         double imbalance, int64_t *rows) {
  if (in->algo == DPSHIM_ALGO_NONE) return DPSHIM_SKIP_ALGO_NONE;
  if (imbalance < in->threshold) return DPSHIM_SKIP_BALANCED;
  int reason = algo_fns[in->algo](ctx);
  if (reason == DPSHIM_SKIP_NONE && in->algo != DPSHIM_ALGO_KK &&
      ctx->rows_cap && dpshim__rows_over_caps(ctx, ctx->dest, rows) > 0)
    return DPSHIM_SKIP_CAPACITY;
  return reason;
}

static int64_t max_rows(const int64_t *rows, int32_t ranks) {
  int64_t max = rows[0];
  for (int32_t r = 1; r < ranks; r++)
    if (rows[r] > max) max = rows[r];
  return max;
}

static void fill_outputs(const dpshim_plan_input_t *in, dpshim_plan_t *p,
                         const dpshim__ctx_t *ctx, int reason, int64_t *rows) {
  if (reason != DPSHIM_SKIP_NONE)
    for (int64_t i = 0; i < in->nsamples; i++) p->dest[i] = in->samples[i].origin;
  p->decision = reason == DPSHIM_SKIP_NONE ? DPSHIM_DECISION_APPLY
                                           : DPSHIM_DECISION_SKIP;
  p->reason = (dpshim_skip_reason_t)reason;
  for (int32_t r = 0; r < in->ranks; r++) {
    p->load_after[r] = ctx->history[r];
    rows[r] = 0;
  }
  p->bytes_moved = p->bytes_total = p->bytes_inter_host = p->bytes_priced = 0;
  dpshim__ctx_t priced = *ctx; /* prices across hosts, ignored or not */
  priced.host = in->host;
  dpshim__sum_costs(ctx->cost, p->dest, in->nsamples, p->load_after);
  for (int64_t i = 0; i < in->nsamples; i++) {
    int32_t to = p->dest[i], from = in->samples[i].origin;
    rows[to] += in->samples[i].rows;
    p->bytes_total += in->samples[i].bytes;
    if (to != from) p->bytes_moved += in->samples[i].bytes;
    if (in->host && in->host[to] != in->host[from])
      p->bytes_inter_host += in->samples[i].bytes;
    p->bytes_priced += dpshim__move_price(&priced, i, to);
  }
  p->imbalance_after = dpshim__imbalance(p->load_after, in->ranks);
  p->rows_max_after = max_rows(rows, in->ranks);
  p->cap_tokens = ctx->cap == DPSHIM__NO_CAP ? -1 : ctx->cap;
  p->message[0] = '\0';
  if (reason != DPSHIM_SKIP_NONE)
    snprintf(p->message, sizeof p->message, "skip: %s",
             dpshim_skip_reason_name(p->reason));
}

static int solve(const dpshim_plan_input_t *in, dpshim_plan_t *p) {
  p->message[0] = '\0';
  if (!in) return FAIL(p, "input = NULL: expected a dpshim_plan_input_t");
  int rc = validate_scalars(in, p);
  if (rc < 0) return rc;
  if ((rc = reserve_outputs(p, in->ranks, in->nsamples)) < 0) return rc;
  dpshim__ctx_t ctx = {
      .ranks = in->ranks,
      .nsamples = in->nsamples,
      .samples = in->samples,
      .threshold = in->threshold,
      .dest = p->dest,
      .arena = p->scratch_,
  };
  int64_t *per_rank = DPSHIM__ALLOC(&ctx, int64_t, in->ranks);
  if (!per_rank) return DPSHIM_ENOMEM;
  if ((rc = validate_ranks(in, p)) < 0) return rc;
  if ((rc = build_context(in, p, &ctx, per_rank)) < 0) return rc;
  ctx.load0 = p->load_before;
  p->imbalance_before = dpshim__imbalance(p->load_before, in->ranks);
  ctx.vision = dpshim__vision_costs(&ctx);
  int64_t *size = DPSHIM__ALLOC(&ctx, int64_t, in->nsamples);
  int64_t *order = DPSHIM__ALLOC(&ctx, int64_t, in->nsamples);
  if (!size || !order || dpshim__sizes(&ctx, size, order) < 0)
    return DPSHIM_ENOMEM;
  ctx.size = size;
  ctx.order = order;
  p->lower_bound = ctx.lower_bound = dpshim__lower_bound(&ctx);
  p->lower_bound_cap = ctx.lower_bound_cap = dpshim__rows_lower_bound(
      &ctx, dpshim__cap_lower_bound(&ctx, ctx.lower_bound));
  int64_t *rows = DPSHIM__ALLOC(&ctx, int64_t, in->ranks);
  if (!rows) return DPSHIM_ENOMEM;
  int reason = run_algorithm(in, &ctx, p->imbalance_before, rows);
  if (reason < 0) return reason;
  fill_outputs(in, p, &ctx, reason, rows);
  return 0;
}

/* Every heap allocation of a solve is counted, whatever its outcome. */
int dpshim_plan_solve(const dpshim_plan_input_t *in, dpshim_plan_t *p) {
  if (!p) return DPSHIM_EINVAL;
  p->allocations = 0;
  if (p->scratch_) ((dpshim__arena_t *)p->scratch_)->mallocs = 0;
  int rc = solve(in, p);
  if (p->scratch_) p->allocations += ((dpshim__arena_t *)p->scratch_)->mallocs;
  return rc;
}
