/* --calibrate FILE: the demo's measured runs against the simulation.
 *
 * The file is what tools/demo.sh writes: the run's configuration and, per
 * (dp, variant), step_ms_balanced, the mean step time over the steps after
 * the shim's warm-up. The simulator replays the same configuration (same
 * packs, same noise, the shim's own fit) over those steps, then prices it
 * twice: with the network parameters given, and with latency, bandwidth and
 * a per-rank serial cost fitted to the measurements by least squares of the
 * relative error. The demo runs many sleeping ranks on a few cores over
 * shared memory, so the fitted numbers describe that machine, not a fabric;
 * CPU work is slowed by ranks/cores (--cores, default this machine's).
 *
 * Runs across hosts (tools/multihost/figures.py --calibration) say so:
 * "ranks_per_host" (per run, or for all at the top level), "topology" (the
 * shim's DPSHIM_TOPOLOGY, 1 unless given) and "link_gbs" (the rate the
 * hosts' links were shaped to, GB/s; absent: unshaped). They are simulated
 * on their hosts and priced with the two-level network (netmodel.c); the
 * fit then also takes the inter-host latency, and the inter-host bandwidth
 * of the unshaped runs (a shaped run's is its link_gbs, known). A file
 * without runs across hosts is fitted exactly as before.
 *
 * A run whose variant names a step mode (SOLVER@STEP: the demo's
 * default@handoff row, steps told by hand-offs and the cost fitted from
 * step times) is left out, with a note: the simulator's steps end at the
 * gradient sync. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json.h"
#include "sim.h"

#define TOLERANCE 0.05

typedef struct measured {
  int32_t dp;
  sim_algo_t algo;
  double step_ms;
  int32_t ranks_per_host; /* 0: one host */
  int topology;           /* the shim's DPSHIM_TOPOLOGY */
  double link_bps;        /* a shaped link's bytes/s; 0: unshaped */
  sim_run_t run; /* its simulation */
} measured_t;

/* The parameters fitted, in log10 space (see theta_t): the one-level
 * network's three, then the inter-host latency and bandwidth. */
enum { FIT_LATENCY, FIT_BANDWIDTH, FIT_SERIAL, FIT_INTER_LATENCY,
       FIT_INTER_BANDWIDTH, FIT_DIMS };

typedef struct calib {
  sim_config_t cfg;
  char profile[64];
  char lengths[4096]; /* "lengths" of the demo: a file it drew from */
  int32_t ranks_per_host; /* the file's top-level one: each run's default */
  measured_t *m;
  int n;
  int hosts;             /* some run spans more than one host */
  int fit[FIT_DIMS];     /* which parameters the fit moves */
} calib_t;

/* ---- reading the file ------------------------------------------------------- */

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  while (buf) {
    n += fread(buf + n, 1, cap - n - 1, f);
    if (n < cap - 1) break;
    char *more = realloc(buf, cap *= 2);
    if (!more) free(buf);
    buf = more;
  }
  int bad = ferror(f);
  fclose(f);
  if (!buf || bad) return free(buf), NULL;
  buf[n] = 0;
  return buf;
}

/* A number member, or -1 with the reason printed. */
static int number(const json_t *j, const char *key, double lo, double *out) {
  const json_t *v = json_get(j, key);
  if (v && v->type == JSON_NUMBER && v->num >= lo) return *out = v->num, 0;
  fprintf(stderr, SIM_PROG ": --calibrate: \"%s\" must be a number >= %g\n",
          key, lo);
  return -1;
}

/* An optional integer member in [lo, hi]: *out unchanged when absent; -1
 * with the reason printed when it is not one. */
static int optional_integer(const json_t *j, const char *key, double lo,
                            double hi, double *out) {
  const json_t *v = json_get(j, key);
  if (!v) return 0;
  if (v->type == JSON_NUMBER && v->num >= lo && v->num <= hi &&
      v->num == floor(v->num))
    return *out = v->num, 0;
  fprintf(stderr, SIM_PROG ": --calibrate: \"%s\" must be an integer in "
          "[%g, %g]\n", key, lo, hi);
  return -1;
}

/* A run's hosts: "ranks_per_host" (else the file's), "topology" (else 1),
 * "link_gbs" (else unshaped). */
static int read_hosts(const json_t *r, int32_t file_per_host, measured_t *m) {
  double per_host = file_per_host, topology = 1, link_gbs = 0;
  if (optional_integer(r, "ranks_per_host", 0, SIM_MAX_RANKS, &per_host) ||
      optional_integer(r, "topology", 0, 1, &topology) ||
      (json_get(r, "link_gbs") && number(r, "link_gbs", 1e-9, &link_gbs)))
    return -1;
  m->ranks_per_host = (int32_t)per_host;
  m->topology = (int)topology;
  m->link_bps = 1e9 * link_gbs;
  return 0;
}

static int read_config(const json_t *j, calib_t *c) {
  double seed, scale, steps, warm, grad, micro = 1;
  const json_t *prof = json_get(j, "profile");
  if (!prof || prof->type != JSON_STRING || strlen(prof->str) >= 64) {
    fprintf(stderr, SIM_PROG ": --calibrate: \"profile\" must be a name\n");
    return -1;
  }
  if (number(j, "seed", 0, &seed) || number(j, "time_scale", 1e-9, &scale) ||
      number(j, "steps", 1, &steps) || number(j, "warmup_last", 3, &warm) ||
      number(j, "grad_bytes", 0, &grad) ||
      (json_get(j, "micro_batches") && number(j, "micro_batches", 1, &micro)))
    return -1;
  if (steps <= warm) {
    fprintf(stderr, SIM_PROG ": --calibrate: \"steps\" must exceed "
            "\"warmup_last\"\n");
    return -1;
  }
  snprintf(c->profile, sizeof c->profile, "%s", prof->str);
  c->cfg.profile = c->profile;
  const json_t *lengths = json_get(j, "lengths");
  if (lengths && lengths->type == JSON_STRING) {
    snprintf(c->lengths, sizeof c->lengths, "%s", lengths->str);
    c->cfg.lengths = c->lengths;
  }
  c->cfg.seed = (uint64_t)seed;
  c->cfg.time_scale = scale;
  c->cfg.warmup_last = (int64_t)warm;
  c->cfg.steps = (int64_t)steps - (int64_t)warm;
  c->cfg.grad_bytes = (int64_t)grad;
  c->cfg.micro = (int32_t)micro;
  double per_host = 0;
  if (optional_integer(j, "ranks_per_host", 0, SIM_MAX_RANKS, &per_host))
    return -1;
  c->ranks_per_host = (int32_t)per_host;
  return 0;
}

/* 0: read; 1: a SOLVER@STEP run, left out with a note; -1: a bad run,
 * the reason printed. */
static int read_run(const json_t *r, int32_t file_per_host, measured_t *m) {
  double dp;
  const json_t *v = json_get(r, "variant");
  if (v && v->type == JSON_STRING && strchr(v->str, '@')) {
    const json_t *d = json_get(r, "dp");
    fprintf(stderr, SIM_PROG ": --calibrate: the run %s at DP %g left out: "
            "the simulator's steps end at the gradient sync\n", v->str,
            d && d->type == JSON_NUMBER ? d->num : 0);
    return 1;
  }
  if (number(r, "dp", 1, &dp) || number(r, "step_ms_balanced", 1e-9,
                                        &m->step_ms) ||
      read_hosts(r, file_per_host, m))
    return -1;
  m->dp = (int32_t)dp;
  m->algo = (sim_algo_t){DPSHIM_ALGO_NONE, 0, 0};
  if (v && v->type == JSON_STRING && !strcmp(v->str, "none")) return 0;
  m->algo.shim = 1;
  if (v && v->type == JSON_STRING &&
      dpshim_algo_from_name(v->str, &m->algo.algo) == 0)
    return 0;
  fprintf(stderr, SIM_PROG ": --calibrate: \"variant\" must be none, seed, "
          "default or kk\n");
  return -1;
}

static int read_file(const char *path, calib_t *c) {
  char err[256];
  char *text = slurp(path);
  if (!text) {
    fprintf(stderr, SIM_PROG ": --calibrate: cannot read '%s'\n", path);
    return -1;
  }
  json_t *j = json_parse(text, err, sizeof err);
  free(text);
  if (!j) {
    fprintf(stderr, SIM_PROG ": --calibrate: %s: %s\n", path, err);
    return -1;
  }
  const json_t *runs = json_get(j, "runs");
  int rc = read_config(j, c);
  if (rc == 0 && (!runs || runs->type != JSON_ARRAY || runs->n == 0)) {
    fprintf(stderr, SIM_PROG ": --calibrate: \"runs\" must be a non-empty "
            "array\n");
    rc = -1;
  }
  if (rc == 0 && !(c->m = calloc(runs->n, sizeof *c->m))) rc = -1;
  for (size_t i = 0; rc == 0 && i < runs->n; i++) {
    int got = read_run(&runs->items[i], c->ranks_per_host, &c->m[c->n]);
    if (got < 0) rc = -1;
    c->n += got == 0;
  }
  if (rc == 0 && c->n == 0) {
    fprintf(stderr, SIM_PROG ": --calibrate: \"runs\" holds no run the "
            "simulator replays\n");
    rc = -1;
  }
  json_free(j);
  return rc;
}

/* ---- simulating ------------------------------------------------------------- */

/* Run i's configuration: the file's, on the run's hosts. */
static sim_config_t run_config(const calib_t *c, int i) {
  sim_config_t cfg = c->cfg;
  cfg.ranks_per_host = c->m[i].ranks_per_host;
  cfg.topology = c->m[i].topology;
  return cfg;
}

/* Runs simulated together: the same DP size on the same hosts, planned
 * the same way (the same packs). */
static int same_simulation(const measured_t *a, const measured_t *b) {
  return a->dp == b->dp && a->ranks_per_host == b->ranks_per_host &&
         a->topology == b->topology;
}

/* One simulation per DP size and hosts, all its variants at once. */
static int simulate_all(calib_t *c) {
  char err[512];
  for (int i = 0; i < c->n; i++) {
    if (c->m[i].run.step) continue;
    sim_algo_t algos[SIM_MAX_LIST];
    sim_run_t runs[SIM_MAX_LIST];
    int idx[SIM_MAX_LIST], k = 0;
    for (int j = i; j < c->n && k < SIM_MAX_LIST; j++)
      if (same_simulation(&c->m[j], &c->m[i]) && !c->m[j].run.step) {
        idx[k] = j;
        algos[k++] = c->m[j].algo;
      }
    sim_config_t cfg = run_config(c, i);
    if (sim_simulate(&cfg, c->m[i].dp, algos, k, runs, err, sizeof err)) {
      fprintf(stderr, SIM_PROG ": --calibrate: %s\n", err);
      return -1;
    }
    for (int a = 0; a < k; a++) c->m[idx[a]].run = runs[a];
  }
  return 0;
}

/* Whether run i spans more than one host. */
static int on_hosts(const calib_t *c, int i) {
  sim_config_t cfg = run_config(c, i);
  return sim_hosts(&cfg, c->m[i].dp) > 1;
}

/* Run i priced under `net`, its shaped link's rate in place of the
 * inter-host bandwidth. */
static double simulated_ms(const calib_t *c, const sim_net_t *net, int i) {
  sim_config_t cfg = run_config(c, i);
  sim_net_t n = *net;
  if (c->m[i].link_bps > 0) n.inter_bandwidth = c->m[i].link_bps;
  return 1e3 * sim_price_run(&n, &cfg, &c->m[i].run).step_s;
}

/* Sum of squared relative errors. */
static double loss(const calib_t *c, const sim_net_t *net) {
  double sum = 0;
  for (int i = 0; i < c->n; i++) {
    double e = simulated_ms(c, net, i) / c->m[i].step_ms - 1;
    sum += e * e;
  }
  return sum;
}

/* ---- fitting ---------------------------------------------------------------- */

/* The fitted parameters in log10 space, by FIT_*: latency s, bandwidth
 * B/s, serial s (serial below 1e-9 s counts as 0), and with hosts the
 * inter-host latency s and bandwidth B/s. */
typedef struct theta {
  double v[FIT_DIMS];
} theta_t;

static const double lo[FIT_DIMS] = {-8, 5, -10, -8, 5},
                    hi[FIT_DIMS] = {-2, 12, -2, -2, 12};

/* The net at t: only the parameters the fit moves; the others stay the
 * given ones. */
static sim_net_t with(const calib_t *c, const sim_net_t *base, theta_t t) {
  sim_net_t n = *base;
  n.latency_s = pow(10, t.v[FIT_LATENCY]);
  n.bandwidth = pow(10, t.v[FIT_BANDWIDTH]);
  n.serial_s = t.v[FIT_SERIAL] < -9 ? 0 : pow(10, t.v[FIT_SERIAL]);
  if (c->fit[FIT_INTER_LATENCY])
    n.inter_latency_s = pow(10, t.v[FIT_INTER_LATENCY]);
  if (c->fit[FIT_INTER_BANDWIDTH])
    n.inter_bandwidth = pow(10, t.v[FIT_INTER_BANDWIDTH]);
  return n;
}

static double loss_at(const calib_t *c, const sim_net_t *base, theta_t t) {
  sim_net_t n = with(c, base, t);
  return loss(c, &n);
}

/* What the fit moves: the one-level three always; the inter-host latency
 * when some run crosses hosts, and their bandwidth when one of those is
 * unshaped (a shaped run's is known). */
static void choose_parameters(calib_t *c) {
  c->fit[FIT_LATENCY] = c->fit[FIT_BANDWIDTH] = c->fit[FIT_SERIAL] = 1;
  for (int i = 0; i < c->n; i++) {
    if (!on_hosts(c, i)) continue;
    c->hosts = c->fit[FIT_INTER_LATENCY] = 1;
    if (c->m[i].link_bps == 0) c->fit[FIT_INTER_BANDWIDTH] = 1;
  }
}

/* The fitted dimensions, in FIT_* order, into dims; their count. */
static int fitted_dims(const calib_t *c, int *dims) {
  int nd = 0;
  for (int d = 0; d < FIT_DIMS; d++)
    if (c->fit[d]) dims[nd++] = d;
  return nd;
}

/* Grid points per dimension: 13 for the one-level three (2197 cells, as
 * ever), fewer per dimension with hosts (14641 cells for four, 59049 for
 * five: pricing a run is a sum over its steps, cheap next to simulating). */
static int grid_points(int nd) { return nd <= 3 ? 13 : nd == 4 ? 11 : 9; }

/* A coarse grid over the box: the loss has flat directions and several
 * basins (latency and serial cost trade off), so start from the best cell.
 * Cells in the order of nested loops, the first dimension outermost. */
static theta_t grid(const calib_t *c, const sim_net_t *base) {
  int dims[FIT_DIMS], nd = fitted_dims(c, dims), G = grid_points(nd);
  long cells = 1;
  for (int k = 0; k < nd; k++) cells *= G;
  theta_t best = {{0}}, t = {{0}};
  double best_loss = INFINITY;
  for (long cell = 0; cell < cells; cell++) {
    long rest = cell;
    for (int k = nd - 1; k >= 0; k--, rest /= G) {
      int d = dims[k], i = (int)(rest % G);
      t.v[d] = lo[d] + (hi[d] - lo[d]) * i / (G - 1);
    }
    double l = loss_at(c, base, t);
    if (l < best_loss) best_loss = l, best = t;
  }
  return best;
}

/* Golden-section search of coordinate d in [a, b]. */
static void golden(const calib_t *c, const sim_net_t *base, theta_t *t, int d,
                   double a, double b) {
  const double g = 0.6180339887498949;
  theta_t x1 = *t, x2 = *t;
  x1.v[d] = b - g * (b - a);
  x2.v[d] = a + g * (b - a);
  double f1 = loss_at(c, base, x1), f2 = loss_at(c, base, x2);
  for (int it = 0; it < 40; it++) {
    if (f1 < f2) {
      b = x2.v[d];
      x2 = x1, f2 = f1;
      x1.v[d] = b - g * (b - a);
      f1 = loss_at(c, base, x1);
    } else {
      a = x1.v[d];
      x1 = x2, f1 = f2;
      x2.v[d] = a + g * (b - a);
      f2 = loss_at(c, base, x2);
    }
  }
  theta_t mid = *t;
  mid.v[d] = 0.5 * (a + b);
  if (loss_at(c, base, mid) < loss_at(c, base, *t)) *t = mid;
}

/* From the best cell, golden-section searches one parameter at a time
 * within a cell's width of it, the width halved each round. */
static sim_net_t fit(const calib_t *c, const sim_net_t *base) {
  int dims[FIT_DIMS], nd = fitted_dims(c, dims);
  theta_t t = grid(c, base);
  double step = (hi[0] - lo[0]) / (grid_points(nd) - 1);
  for (int round = 0; round < 6; round++, step /= 2)
    for (int k = 0; k < nd; k++) {
      int d = dims[k];
      golden(c, base, &t, d, fmax(lo[d], t.v[d] - step),
             fmin(hi[d], t.v[d] + step));
    }
  return with(c, base, t);
}

/* ---- printing --------------------------------------------------------------- */

static void print_net(const calib_t *c, const char *what, const sim_net_t *n) {
  printf("%s: latency %.3g us, bandwidth %.4g GB/s, serial %.3g us per rank "
         "and collective, %d cores, memcpy %.3g GB/s\n", what,
         1e6 * n->latency_s, 1e-9 * n->bandwidth, 1e6 * n->serial_s,
         (int)n->cores, 1e-9 * n->memcpy_bps);
  if (c->hosts)
    printf("  between hosts: latency %.3g us, bandwidth %.4g GB/s a host's "
           "link%s\n", 1e6 * n->inter_latency_s, 1e-9 * n->inter_bandwidth,
           c->fit[FIT_INTER_BANDWIDTH] ? " (shaped runs: their link_gbs)"
                                       : ", unused: every run's link shaped");
}

/* Run i's hosts, plans and link, for the table: "HxK", "1" (one host);
 * topology 1/0 ("-" on one host); link_gbs or "-" (unshaped). */
static void print_hosts_columns(const calib_t *c, int i) {
  const measured_t *m = &c->m[i];
  char hosts[32], link[32];
  sim_config_t cfg = run_config(c, i);
  int32_t H = sim_hosts(&cfg, m->dp);
  int across = H > 1;
  if (across)
    snprintf(hosts, sizeof hosts, "%dx%d", (int)H, (int)m->ranks_per_host);
  else
    snprintf(hosts, sizeof hosts, "1");
  if (across && m->link_bps > 0)
    snprintf(link, sizeof link, "%.4g", 1e-9 * m->link_bps);
  else
    snprintf(link, sizeof link, "-");
  printf(" %7s %4s %8s", hosts, across ? (m->topology ? "1" : "0") : "-",
         link);
}

/* The table; returns whether every run is within TOLERANCE. With runs
 * across hosts, three more columns: hosts, topology and the link's GB/s. */
static int print_table(const calib_t *c, const sim_net_t *net) {
  int ok = 1;
  double worst = 0;
  printf("  %5s  %-8s", "dp", "variant");
  if (c->hosts) printf(" %7s %4s %8s", "hosts", "topo", "link_gbs");
  printf(" %12s %12s %8s\n", "measured_ms", "simulated_ms", "diff");
  for (int i = 0; i < c->n; i++) {
    double s = simulated_ms(c, net, i), e = s / c->m[i].step_ms - 1;
    ok &= fabs(e) <= TOLERANCE;
    worst = fmax(worst, fabs(e));
    printf("  %5d  %-8s", (int)c->m[i].dp, sim_algo_name(c->m[i].algo));
    if (c->hosts) print_hosts_columns(c, i);
    printf(" %12.1f %12.1f %+7.2f%%\n", c->m[i].step_ms, s, 100 * e);
  }
  printf("  all within %.0f%%: %s (worst %.2f%%)\n", 100 * TOLERANCE,
         ok ? "yes" : "no", 100 * worst);
  return ok;
}

/* A run's hosts in --json, with runs across hosts only. */
static void write_run_hosts(FILE *f, const calib_t *c, int i) {
  const measured_t *m = &c->m[i];
  if (!c->hosts) return;
  fprintf(f, ",\"ranks_per_host\":%d,\"topology\":%d", (int)m->ranks_per_host,
          m->topology);
  if (m->link_bps > 0) fprintf(f, ",\"link_gbs\":%.6g", 1e-9 * m->link_bps);
}

static int write_json(const char *path, const calib_t *c, const sim_net_t *n) {
  FILE *f = fopen(path, "w");
  if (!f) return fprintf(stderr, SIM_PROG ": --json: cannot write '%s'\n",
                         path), -1;
  fprintf(f, "{\"fitted\":{\"latency_us\":%.6g,\"bandwidth_gbs\":%.6g,"
          "\"serial_us\":%.6g,\"cores\":%d", 1e6 * n->latency_s,
          1e-9 * n->bandwidth, 1e6 * n->serial_s, (int)n->cores);
  if (c->hosts)
    fprintf(f, ",\"inter_latency_us\":%.6g,\"inter_bandwidth_gbs\":%.6g",
            1e6 * n->inter_latency_s, 1e-9 * n->inter_bandwidth);
  fputs("},\"runs\":[", f);
  for (int i = 0; i < c->n; i++) {
    double s = simulated_ms(c, n, i);
    fprintf(f, "%s{\"dp\":%d,\"variant\":\"%s\",\"measured_ms\":%.3f,"
            "\"simulated_ms\":%.3f,\"rel_diff\":%.5f", i ? "," : "",
            (int)c->m[i].dp, sim_algo_name(c->m[i].algo), c->m[i].step_ms, s,
            s / c->m[i].step_ms - 1);
    write_run_hosts(f, c, i);
    fputc('}', f);
  }
  fputs("]}\n", f);
  return fclose(f) == 0 ? 0 : -1;
}

int sim_calibrate(const sim_options_t *o) {
  calib_t c = {.cfg = o->cfg};
  sim_net_t base = o->net;
  if (!o->cores_given) base.cores = (int32_t)sysconf(_SC_NPROCESSORS_ONLN);
  int rc = read_file(o->calibrate, &c) == 0 && simulate_all(&c) == 0 ? 0 : 2;
  if (rc == 0) {
    choose_parameters(&c);
    printf("calibration against %s: profile %s, seed %llu, time scale %g, "
           "steps %lld..%lld (1-based)\n", o->calibrate, c.profile,
           (unsigned long long)c.cfg.seed, c.cfg.time_scale,
           (long long)c.cfg.warmup_last + 1,
           (long long)(c.cfg.warmup_last + c.cfg.steps));
    print_net(&c, "given parameters", &base);
    print_table(&c, &base);
    sim_net_t fitted = fit(&c, &base);
    print_net(&c, "fitted parameters", &fitted);
    rc = print_table(&c, &fitted) ? 0 : 1;
    if (o->json && write_json(o->json, &c, &fitted) < 0) rc = 1;
  }
  for (int i = 0; i < c.n; i++) sim_run_free(&c.m[i].run);
  free(c.m);
  return rc;
}
