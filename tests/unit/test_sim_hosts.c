/* dpshim-sim's hosts: the exchange's part across hosts (crosshost.c) on
 * hand-made exchanges, and netmodel.c's two-level prices against the
 * formulas of its header, on made-up steps. One host must be the one-level
 * model exactly. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "../../tools/sim/sim.h"

/* ---- crosshost.c ---------------------------------------------------------- */

Test(sim_hosts, inactive_without_hosts) {
  sim_cross_t x;
  cr_assert_eq(sim_cross_init(&x, 8, 0), 0);
  sim_cross_add(&x, 0, 7, 100);
  cr_assert_eq(sim_cross_link_bytes(&x), 0);
  cr_assert_eq(sim_cross_peers(&x), 0);
  cr_assert_eq(x.moved, 0);
  sim_cross_free(&x);
}

/* 8 ranks, 4 a host (hosts 0: ranks 0-3, 1: ranks 4-7); senders grouped. */
Test(sim_hosts, counts_only_what_crosses) {
  sim_cross_t x;
  cr_assert_eq(sim_cross_init(&x, 8, 4), 0);
  cr_assert_eq(x.hosts, 2);
  sim_cross_add(&x, 0, 1, 1000); /* within host 0: not counted */
  sim_cross_add(&x, 0, 4, 10);
  sim_cross_add(&x, 0, 4, 20);   /* the same pair again: one partner */
  sim_cross_add(&x, 0, 5, 30);
  sim_cross_add(&x, 1, 4, 40);
  sim_cross_add(&x, 6, 2, 5);
  /* host 0 sends 10+20+30+40 = 100, receives 5; host 1 the reverse */
  cr_assert_float_eq(sim_cross_link_bytes(&x), 100, 1e-12);
  cr_assert_float_eq(x.moved, 105, 1e-12);
  /* rank 0: partners 4 and 5; rank 4: from 0 and 1 */
  cr_assert_eq(sim_cross_peers(&x), 2);
  sim_cross_reset(&x);
  cr_assert_eq(sim_cross_link_bytes(&x), 0);
  cr_assert_eq(sim_cross_peers(&x), 0);
  cr_assert_eq(x.moved, 0);
  sim_cross_free(&x);
}

/* The last host holds fewer ranks: 10 ranks, 4 a host = hosts of 4, 4, 2. */
Test(sim_hosts, uneven_last_host) {
  sim_cross_t x;
  cr_assert_eq(sim_cross_init(&x, 10, 4), 0);
  cr_assert_eq(x.hosts, 3);
  sim_cross_add(&x, 3, 9, 7);
  sim_cross_add(&x, 8, 9, 100); /* within host 2 */
  cr_assert_float_eq(sim_cross_link_bytes(&x), 7, 1e-12);
  cr_assert_eq(sim_cross_peers(&x), 1);
  sim_cross_free(&x);
}

/* ---- netmodel.c ----------------------------------------------------------- */

/* No compute and no emulated gradient sync (time scale 0): the step is
 * the network's and the CPU's alone. */
static sim_config_t config(int32_t ranks_per_host) {
  return (sim_config_t){.profile = "long", .time_scale = 0,
                        .grad_bytes = 1 << 20, .tp = 1, .micro = 1,
                        .model = emu_model_default(),
                        .ranks_per_host = ranks_per_host, .topology = 1};
}

/* One applied hand-off with bytes across hosts. */
static sim_step_t step(void) {
  return (sim_step_t){.handoffs = 1, .applied = 1, .gather_bytes = 4096,
                      .xfer_bytes = 2e6, .peers = 3, .copy_bytes = 4e6,
                      .moved_bytes = 5e6, .inter_xfer_bytes = 3e6,
                      .inter_peers = 2, .inter_moved_bytes = 4e6};
}

static double ring(int32_t P, double bytes, double lat, double bw) {
  return P > 1 ? 2.0 * (P - 1) / P * bytes / bw + 2.0 * (P - 1) * lat : 0;
}

Test(sim_hosts, one_host_is_the_one_level_model) {
  sim_net_t n = sim_net_default();
  n.inter_bandwidth = 1e3; /* would show, were it used */
  n.inter_latency_s = 1;
  sim_step_t s = step();
  sim_config_t none = config(0), whole = config(64), more = config(99);
  sim_price_t a = sim_price_step(&n, &none, 64, &s);
  sim_price_t b = sim_price_step(&n, &whole, 64, &s);
  sim_price_t c = sim_price_step(&n, &more, 64, &s);
  cr_assert(memcmp(&a, &b, sizeof a) == 0 && memcmp(&a, &c, sizeof a) == 0,
            "one host: %.17g %.17g %.17g", a.step_s, b.step_s, c.step_s);
}

Test(sim_hosts, two_levels_as_the_header_says) {
  sim_net_t n = sim_net_default();
  n.inter_latency_s = 20e-6;
  n.inter_bandwidth = 2e9;
  sim_step_t s = step();
  const int32_t P = 16, K = 4, H = 4;
  sim_config_t c = config(K);
  sim_price_t p = sim_price_step(&n, &c, P, &s);
  double gather = 2 * n.latency_s + 2 * n.inter_latency_s +
                  4096.0 * (P - 1) / P / n.bandwidth +
                  4096.0 * (H - 1) / H / n.inter_bandwidth;
  double a2a = s.xfer_bytes / n.bandwidth + s.peers * n.latency_s +
               s.inter_xfer_bytes / n.inter_bandwidth +
               s.inter_peers * n.inter_latency_s;
  double copies = s.copy_bytes / n.memcpy_bps;
  cr_assert_float_eq(p.shim_s, gather + a2a + copies, 1e-12, "shim %.9g",
                     p.shim_s);
  double bytes = 1 << 20;
  double allreduce = ring(K, bytes, n.latency_s, n.bandwidth) +
                     ring(H, bytes, n.inter_latency_s, n.inter_bandwidth);
  cr_assert_float_eq(p.allreduce_s, allreduce, 1e-12, "all-reduce %.9g",
                     p.allreduce_s);
  cr_assert_float_eq(p.step_s, p.shim_s + p.allreduce_s, 1e-12);
}

Test(sim_hosts, tree_all_reduce_between_hosts) {
  sim_net_t n = sim_net_default();
  n.tree = 1;
  sim_step_t s = {0};
  sim_config_t c = config(8);
  sim_price_t p = sim_price_step(&n, &c, 64, &s); /* 8 hosts of 8 */
  double bytes = 1 << 20;
  double want = 2 * bytes / n.bandwidth + 2 * 3 * n.latency_s +
                2 * bytes / n.inter_bandwidth + 2 * 3 * n.inter_latency_s;
  cr_assert_float_eq(p.allreduce_s, want, 1e-12);
}

/* What crosses hosts costs more on a slower link, and nothing else does. */
Test(sim_hosts, slower_link_longer_step) {
  sim_net_t fast = sim_net_default(), slow = fast;
  slow.inter_bandwidth = fast.inter_bandwidth / 100;
  sim_config_t c = config(4);
  sim_step_t s = step();
  cr_assert_gt(sim_price_step(&slow, &c, 16, &s).step_s,
               sim_price_step(&fast, &c, 16, &s).step_s);
  sim_config_t one = config(0);
  cr_assert_eq(sim_price_step(&slow, &one, 16, &s).step_s,
               sim_price_step(&fast, &one, 16, &s).step_s);
}

/* The tp ranks of a DP rank are on its host: the all-reduce's first level
 * spans K x tp ranks. */
Test(sim_hosts, tp_ranks_share_the_host) {
  sim_net_t n = sim_net_default();
  sim_config_t c = config(2);
  c.tp = 4;
  sim_step_t s = {0};
  sim_price_t p = sim_price_step(&n, &c, 8, &s); /* 4 hosts of 2 x 4 GPUs */
  double bytes = 1 << 20;
  cr_assert_float_eq(p.allreduce_s,
                     ring(8, bytes, n.latency_s, n.bandwidth) +
                         ring(4, bytes, n.inter_latency_s, n.inter_bandwidth),
                     1e-12);
}
