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
 *
 * With hosts (--ranks-per-host K: H = ceil(P/K) hosts, rank r on host r/K)
 * the network has two levels: within a host the above's `latency` and
 * `bandwidth`; between hosts `inter_latency` per message step and one link
 * of `inter_bandwidth` bytes/s per host, shared by its K ranks. Every byte
 * still crosses its rank's own link, then the bytes that change host cross
 * the host links too (the two not overlapped):
 *   allgather(v)                   ceil(log2 K) x latency + ceil(log2 H) x
 *                                  inter_latency + T (P-1)/P / bw
 *                                  + T (H-1)/H / inter_bw (each host's link
 *                                  receives the other hosts' part once)
 *   alltoallv                      the above, plus max over hosts of
 *                                  max(sent to other hosts, received from
 *                                  them, its ranks summed) / inter_bw +
 *                                  inter_latency x the most partners on
 *                                  other hosts of any rank
 *   gradient all-reduce            hierarchical: the above's ring or tree
 *                                  over the k = K x tp ranks of a host,
 *                                  then between the hosts, each host's link
 *                                  carrying the whole buffer's share: ring
 *                                  2(H-1)/H x bytes / inter_bw + 2(H-1) x
 *                                  inter_latency, tree 2 x bytes / inter_bw
 *                                  + 2 ceil(log2 H) x inter_latency
 * One host (no --ranks-per-host, or K >= P) is the one-level model exactly.
 *
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
 * With --ahead K the LLM level's work of each hand-off (gather, solve,
 * exchange, copies: the above, priced one hand-off at a time) runs on a
 * thread beside the compute of the K micro-batches before it on each rank
 * (simulate.c's sim_ahead_t): rank r's part past that compute,
 * max(0, work - compute), delays rank r; the step waits for the rank whose
 * compute and delays add up to most (see on_path_seconds()).
 *
 * CPU work (solver, copies) runs on every rank at once: with `cores` shared
 * by all ranks (an oversubscribed test machine) it takes P/cores times
 * longer; `serial_s` x P per collective stands for the scheduling of P
 * processes on those cores. Both are 0/off on a real cluster. */
#include <math.h>

#include "sim.h"

/* Between hosts: one 400 Gbit/s NIC per host (50 GB/s, shared by its
 * ranks) and a switch hop more than within a host. */
sim_net_t sim_net_default(void) {
  return (sim_net_t){.latency_s = 5e-6, .bandwidth = 400e9 / 8,
                     .inter_latency_s = 10e-6, .inter_bandwidth = 50e9,
                     .memcpy_bps = 10e9, .serial_s = 0, .cores = 0, .tree = 0};
}

static double log2_steps(int32_t P) { return P > 1 ? ceil(log2((double)P)) : 0; }

/* Where P ranks are: H hosts of K ranks (the last may hold fewer); H = 1
 * (K = P) is the one-level network. */
typedef struct span {
  int32_t P, K, H;
} span_t;

static span_t span_of(const sim_config_t *c, int32_t P) {
  int32_t H = sim_hosts(c, P);
  return (span_t){P, H > 1 ? c->ranks_per_host : P, H};
}

static double allgather(const sim_net_t *n, span_t g, double total) {
  double bw = total * (g.P - 1) / g.P / n->bandwidth;
  if (g.H == 1) return log2_steps(g.P) * n->latency_s + bw;
  return log2_steps(g.K) * n->latency_s +
         log2_steps(g.H) * n->inter_latency_s + bw +
         total * (g.H - 1) / g.H / n->inter_bandwidth;
}

/* One level's all-reduce over P members of a link of `bw` with `latency`
 * per message step. */
static double ring_or_tree(int tree, int32_t P, double bytes, double latency,
                           double bw) {
  if (P <= 1) return 0;
  if (tree) return 2 * bytes / bw + 2 * log2_steps(P) * latency;
  return 2.0 * (P - 1) / P * bytes / bw + 2.0 * (P - 1) * latency;
}

/* Over the world (tp ranks per DP rank): within each host's K x tp ranks,
 * then between the hosts, whose links carry the whole buffer. */
static double allreduce(const sim_net_t *n, span_t g, int32_t tp,
                        double bytes) {
  double t = ring_or_tree(n->tree, g.K * tp, bytes, n->latency_s,
                          n->bandwidth);
  if (g.H > 1)
    t += ring_or_tree(n->tree, g.H, bytes, n->inter_latency_s,
                      n->inter_bandwidth);
  return t;
}

/* An alltoallv's part across hosts: the busiest host link's bytes and the
 * messages through it (0 on one host: adding it changes nothing). */
static double across_hosts(const sim_net_t *n, span_t g, double link_bytes,
                           double peers) {
  if (g.H == 1) return 0;
  return link_bytes / n->inter_bandwidth + peers * n->inter_latency_s;
}

/* How much longer CPU work takes when P ranks share the cores. */
static double cpu_factor(const sim_net_t *n, int32_t P) {
  return n->cores > 0 && P > n->cores ? (double)P / n->cores : 1;
}

/* The shim's time in one step: all its hand-offs together. */
static double shim_seconds(const sim_net_t *n, span_t g, const sim_step_t *s) {
  if (s->handoffs == 0) return 0;
  double h = s->handoffs;
  int32_t P = g.P;
  double coll = h * allgather(n, g, s->gather_bytes / h) +
                s->xfer_bytes / n->bandwidth + s->peers * n->latency_s;
  coll += across_hosts(n, g, s->inter_xfer_bytes, s->inter_peers);
  double collectives = h + s->applied;
  double cpu = s->solve_s + s->copy_bytes / n->memcpy_bps;
  return coll + n->serial_s * P * collectives + cpu_factor(n, P) * cpu;
}

/* The ViT balance's time on the step's path: all its encoder calls
 * together, less what was shipped ahead or returned behind them. */
static double vit_seconds(const sim_net_t *n, span_t g, const sim_step_t *s) {
  if (s->vit_calls == 0) return 0;
  sim_vit_hidden_t a =
      sim_vit_hidden_sum(&s->vit_shipped, &s->vit_returned, 1);
  double k = s->vit_calls;
  int32_t P = g.P;
  double coll = k * allgather(n, g, (s->vit_gather_bytes - a.gather_bytes) /
                                        k) +
                (s->vit_xfer_bytes - a.xfer_bytes) / n->bandwidth +
                (s->vit_peers - a.peers) * n->latency_s;
  coll += across_hosts(n, g, s->vit_inter_xfer_bytes - a.inter_xfer_bytes,
                       s->vit_inter_peers - a.inter_peers);
  double collectives = k + 3.0 * s->vit_applied - a.exchanges;
  double cpu = s->vit_solve_s - a.solve_s +
               (s->vit_copy_bytes - a.copy_bytes) / n->memcpy_bps;
  return coll + n->serial_s * P * collectives + cpu_factor(n, P) * cpu;
}

/* One hand-off's LLM-level work alone: shim_seconds() of a step holding it
 * (linear, so a step's hand-offs priced one by one add up to its own). */
static double handoff_seconds(const sim_net_t *n, span_t g,
                              const sim_handoff_t *h) {
  sim_step_t s = {.handoffs = 1, .applied = h->applied,
                  .gather_bytes = h->gather_bytes, .xfer_bytes = h->xfer_bytes,
                  .peers = h->peers, .copy_bytes = h->copy_bytes,
                  .solve_s = h->solve_s,
                  .inter_xfer_bytes = h->inter_xfer_bytes,
                  .inter_peers = h->inter_peers};
  return shim_seconds(n, g, &s);
}

/* --ahead, "+vit": the met encoder calls synchronise the ranks, so a rank's
 * delay does not stay its own; each hand-off is charged its excess on the
 * rank with the least compute beside it, which bounds it from above. */
static double worst_rank_excess(const sim_ahead_t *a, int32_t P,
                                const double *work, int32_t handoffs) {
  double sum = 0;
  for (int32_t m = 0; m < handoffs; m++) {
    const double *o = a->overlap + (size_t)m * (size_t)P;
    double least = o[0];
    for (int32_t r = 1; r < P; r++) least = fmin(least, o[r]);
    sum += fmax(0, work[m] - least);
  }
  return sum;
}

/* --ahead: the LLM level's work on the step's path. Hand-off m's work past
 * the compute it runs beside on rank r delays rank r (nothing inside the
 * step synchronises the ranks), and the step waits for the slowest rank:
 * max over r of its compute and delays, less the slowest compute. So a
 * rank with slack absorbs its excess, and only the ranks near the slowest
 * one's compute count. */
static double on_path_seconds(const sim_net_t *n, span_t g,
                              const sim_step_t *s) {
  const sim_ahead_t *a = s->ahead;
  double work[SIM_MAX_MICRO];
  int32_t k = s->handoffs < SIM_MAX_MICRO ? s->handoffs : SIM_MAX_MICRO;
  for (int32_t m = 0; m < k; m++)
    work[m] = handoff_seconds(n, g, &a->handoff[m]);
  if (!a->compute) return worst_rank_excess(a, g.P, work, k);
  double most = 0;
  for (int32_t r = 0; r < g.P; r++) {
    double t = a->compute[r];
    for (int32_t m = 0; m < k; m++)
      t += fmax(0, work[m] - a->overlap[(size_t)m * (size_t)g.P + (size_t)r]);
    most = fmax(most, t);
  }
  return fmax(0, most - s->compute_max_s);
}

double sim_apply_seconds(const sim_net_t *n, int32_t ranks, double io,
                         double copy, double partners) {
  return io / n->bandwidth + partners * n->latency_s + n->serial_s * ranks +
         cpu_factor(n, ranks) * copy / n->memcpy_bps;
}

sim_vit_hidden_t sim_vit_hidden_sum(const sim_vit_hidden_t *a,
                                    const sim_vit_hidden_t *b, double sign) {
  return (sim_vit_hidden_t){a->gather_bytes + sign * b->gather_bytes,
                            a->xfer_bytes + sign * b->xfer_bytes,
                            a->peers + sign * b->peers,
                            a->copy_bytes + sign * b->copy_bytes,
                            a->solve_s + sign * b->solve_s,
                            a->inter_xfer_bytes + sign * b->inter_xfer_bytes,
                            a->inter_peers + sign * b->inter_peers,
                            a->exchanges + sign * b->exchanges};
}

double sim_vit_seconds(const sim_net_t *n, const sim_config_t *c,
                       int32_t ranks, const sim_step_t *s) {
  return vit_seconds(n, span_of(c, ranks), s);
}

double sim_vit_round_seconds(const sim_net_t *n, const sim_config_t *c,
                             int32_t ranks, double bytes) {
  return allgather(n, span_of(c, ranks), bytes) + n->serial_s * ranks;
}

sim_price_t sim_price_step(const sim_net_t *n, const sim_config_t *c,
                           int32_t ranks, const sim_step_t *s) {
  int32_t world = ranks * c->tp; /* reftrain all-reduces over the world */
  span_t g = span_of(c, ranks);
  sim_price_t p;
  p.vit_shim_s = vit_seconds(n, g, s);
  double llm = shim_seconds(n, g, s);
  p.shim_s = llm + p.vit_shim_s;
  /* The ViT balance's part keeps its own model of what is off the path
   * (vit_shipped, vit_returned). */
  p.shim_on_path_s =
      (s->ahead && s->handoffs > 0 ? on_path_seconds(n, g, s) : llm) +
      p.vit_shim_s;
  /* The real all-reduce of reftrain's small buffer, then the model's own
   * gradient sync, which reftrain sleeps after it. */
  p.allreduce_s = allreduce(n, g, c->tp, (double)c->grad_bytes) +
                  n->serial_s * world +
                  c->time_scale * emu_grad_seconds(&c->model, ranks, c->tp);
  p.step_s = s->compute_max_s + p.shim_on_path_s + p.allreduce_s;
  return p;
}

/* Hand-offs and what became of them, summed into the run's result. */
static void count_decisions(sim_result_t *res, const sim_step_t *s) {
  res->handoffs += s->handoffs;
  res->applied += s->applied;
  res->vit_calls += s->vit_calls;
  res->vit_retried += s->vit_retried;
  res->vit_applied += s->vit_applied;
  for (int k = 0; k < SIM_NSKIPS; k++) res->skipped[k] += s->skipped[k];
}

sim_result_t sim_price_run(const sim_net_t *n, const sim_config_t *c,
                           const sim_run_t *r) {
  sim_result_t res = {.ranks = r->ranks, .algo = r->algo,
                      .ranks_per_host = c->ranks_per_host,
                      .hosts = sim_hosts(c, r->ranks),
                      .topology = c->topology};
  double tokens = 0, k = (double)r->nsteps, held = 0, vit_floor = 0;
  for (int64_t i = 0; i < r->nsteps; i++) {
    const sim_step_t *s = &r->step[i];
    sim_price_t p = sim_price_step(n, c, r->ranks, s);
    tokens += s->tokens;
    res.step_s += p.step_s;
    res.shim_s += p.shim_s;
    res.shim_on_path_s += p.shim_on_path_s;
    res.allreduce_s += p.allreduce_s;
    res.compute_max_s += s->compute_max_s;
    res.solve_s += s->solve_s;
    res.bytes_moved += s->moved_bytes;
    res.bytes_inter_host += s->inter_moved_bytes;
    res.vit_bytes_inter_host += s->vit_inter_moved_bytes;
    res.vit_s += s->vit_max_s;
    res.vit_wait_s += s->vit_wait_s;
    res.vit_shim_s += p.vit_shim_s;
    res.vit_solve_s += s->vit_solve_s;
    res.vit_bytes_moved += s->vit_moved_bytes;
    held += s->held_max_s;
    vit_floor += s->vit_floor_s;
    res.imb_before += s->imb_before;
    res.imb_after += s->imb_after;
    count_decisions(&res, s);
  }
  double gpus = (double)r->ranks * c->tp;
  res.tgs = res.step_s > 0 ? tokens / gpus / res.step_s : 0;
  res.vit_ceiling = vit_floor > 0 ? held / vit_floor - 1 : 0;
  res.step_s /= k;
  res.shim_s /= k;
  res.shim_on_path_s /= k;
  res.allreduce_s /= k;
  res.compute_max_s /= k;
  res.solve_s /= k;
  res.bytes_moved /= k;
  res.bytes_inter_host /= k;
  res.vit_bytes_inter_host /= k;
  res.vit_s /= k;
  res.vit_wait_s /= k;
  res.vit_shim_s /= k;
  res.vit_solve_s /= k;
  res.vit_bytes_moved /= k;
  res.imb_before /= k;
  res.imb_after /= k;
  return res;
}
