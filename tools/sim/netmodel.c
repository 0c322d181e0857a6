/* The price in seconds of a simulated step.
 *
 * Collectives over P ranks, each rank on a link of `bandwidth` bytes/s with
 * `latency` per message step (the usual alpha-beta model):
 *   allgather(v), T bytes in all   ceil(log2 P) x latency + T (P-1)/P / bw
 *                                  (recursive doubling / Bruck)
 *   alltoallv                      max over ranks of max(sent, received) / bw
 *                                  + latency x that rank's partners (only
 *                                  samples that change rank are sent)
 *   gradient all-reduce, ring      2(P-1)/P x bytes / bw + 2(P-1) x latency
 *                       tree       2 x bytes / bw + 2 ceil(log2 P) x latency
 *                                  (pipelined double binary tree, as NCCL)
 * The shim's per hand-off, in steady state: one allgather of every rank's
 * header with its samples' metas (4 B each) in a slot (both sized as
 * shim/balance.c sizes them; simulate.c sums the bytes), the solver, and
 * when applied the alltoallv of the samples that change rank plus the
 * copies. The first hand-offs also gather the metas apart and agree after
 * growing buffers: not modelled. The ViT balance's per encoder call
 * (vitbalance.c): one allgather of the images' sizes, the plan, and when
 * applied three alltoallvs (inputs, embeddings, their gradients) and their
 * copies, priced the same way.
 *
 * CPU work (solver, copies) runs on every rank at once: with `cores` shared
 * by all ranks (an oversubscribed test machine) it takes P/cores times
 * longer; `serial_s` x P per collective stands for the scheduling of P
 * processes on those cores. Both are 0/off on a real cluster. */
#include <math.h>

#include "sim.h"

sim_net_t sim_net_default(void) {
  return (sim_net_t){.latency_s = 5e-6, .bandwidth = 400e9 / 8,
                     .memcpy_bps = 10e9, .serial_s = 0, .cores = 0, .tree = 0};
}

static double log2_steps(int32_t P) { return P > 1 ? ceil(log2((double)P)) : 0; }

static double allgather(const sim_net_t *n, int32_t P, double total) {
  return log2_steps(P) * n->latency_s + total * (P - 1) / P / n->bandwidth;
}

static double allreduce(const sim_net_t *n, int32_t P, double bytes) {
  if (P <= 1) return 0;
  if (n->tree)
    return 2 * bytes / n->bandwidth + 2 * log2_steps(P) * n->latency_s;
  return 2.0 * (P - 1) / P * bytes / n->bandwidth + 2.0 * (P - 1) * n->latency_s;
}

/* How much longer CPU work takes when P ranks share the cores. */
static double cpu_factor(const sim_net_t *n, int32_t P) {
  return n->cores > 0 && P > n->cores ? (double)P / n->cores : 1;
}

/* The shim's time in one step: all its hand-offs together. */
static double shim_seconds(const sim_net_t *n, int32_t P, const sim_step_t *s) {
  if (s->handoffs == 0) return 0;
  double h = s->handoffs;
  double coll = h * allgather(n, P, s->gather_bytes / h) +
                s->xfer_bytes / n->bandwidth + s->peers * n->latency_s;
  double collectives = h + s->applied;
  double cpu = s->solve_s + s->copy_bytes / n->memcpy_bps;
  return coll + n->serial_s * P * collectives + cpu_factor(n, P) * cpu;
}

/* The ViT balance's time in one step: all its encoder calls together. */
static double vit_seconds(const sim_net_t *n, int32_t P, const sim_step_t *s) {
  if (s->vit_calls == 0) return 0;
  double k = s->vit_calls;
  double coll = k * allgather(n, P, s->vit_gather_bytes / k) +
                s->vit_xfer_bytes / n->bandwidth + s->vit_peers * n->latency_s;
  double collectives = k + 3.0 * s->vit_applied;
  double cpu = s->vit_solve_s + s->vit_copy_bytes / n->memcpy_bps;
  return coll + n->serial_s * P * collectives + cpu_factor(n, P) * cpu;
}

sim_price_t sim_price_step(const sim_net_t *n, const sim_config_t *c,
                           int32_t ranks, const sim_step_t *s) {
  int32_t world = ranks * c->tp; /* reftrain all-reduces over the world */
  sim_price_t p;
  p.vit_shim_s = vit_seconds(n, ranks, s);
  p.shim_s = shim_seconds(n, ranks, s) + p.vit_shim_s;
  /* The real all-reduce of reftrain's small buffer, then the model's own
   * gradient sync, which reftrain sleeps after it. */
  p.allreduce_s = allreduce(n, world, (double)c->grad_bytes) +
                  n->serial_s * world +
                  c->time_scale * emu_grad_seconds(&c->model, ranks, c->tp);
  p.step_s = s->compute_max_s + p.shim_s + p.allreduce_s;
  return p;
}

/* Hand-offs and what became of them, summed into the run's result. */
static void count_decisions(sim_result_t *res, const sim_step_t *s) {
  res->handoffs += s->handoffs;
  res->applied += s->applied;
  res->vit_calls += s->vit_calls;
  res->vit_applied += s->vit_applied;
  for (int k = 0; k < SIM_NSKIPS; k++) res->skipped[k] += s->skipped[k];
}

sim_result_t sim_price_run(const sim_net_t *n, const sim_config_t *c,
                           const sim_run_t *r) {
  sim_result_t res = {.ranks = r->ranks, .algo = r->algo};
  double tokens = 0, k = (double)r->nsteps;
  for (int64_t i = 0; i < r->nsteps; i++) {
    const sim_step_t *s = &r->step[i];
    sim_price_t p = sim_price_step(n, c, r->ranks, s);
    tokens += s->tokens;
    res.step_s += p.step_s;
    res.shim_s += p.shim_s;
    res.allreduce_s += p.allreduce_s;
    res.compute_max_s += s->compute_max_s;
    res.solve_s += s->solve_s;
    res.bytes_moved += s->moved_bytes;
    res.vit_s += s->vit_max_s;
    res.vit_wait_s += s->vit_wait_s;
    res.vit_shim_s += p.vit_shim_s;
    res.vit_solve_s += s->vit_solve_s;
    res.vit_bytes_moved += s->vit_moved_bytes;
    res.imb_before += s->imb_before;
    res.imb_after += s->imb_after;
    count_decisions(&res, s);
  }
  double gpus = (double)r->ranks * c->tp;
  res.tgs = res.step_s > 0 ? tokens / gpus / res.step_s : 0;
  res.step_s /= k;
  res.shim_s /= k;
  res.allreduce_s /= k;
  res.compute_max_s /= k;
  res.solve_s /= k;
  res.bytes_moved /= k;
  res.vit_s /= k;
  res.vit_wait_s /= k;
  res.vit_shim_s /= k;
  res.vit_solve_s /= k;
  res.vit_bytes_moved /= k;
  res.imb_before /= k;
  res.imb_after /= k;
  return res;
}
