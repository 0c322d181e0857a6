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
 * CPU work is slowed by ranks/cores (--cores, default this machine's). */
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
  sim_run_t run; /* its simulation */
} measured_t;

typedef struct calib {
  sim_config_t cfg;
  char profile[64];
  char lengths[4096]; /* "lengths" of the demo: a file it drew from */
  measured_t *m;
  int n;
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
  return 0;
}

static int read_run(const json_t *r, measured_t *m) {
  double dp;
  const json_t *v = json_get(r, "variant");
  if (number(r, "dp", 1, &dp) || number(r, "step_ms_balanced", 1e-9,
                                        &m->step_ms))
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
  for (size_t i = 0; rc == 0 && i < runs->n; i++)
    rc = read_run(&runs->items[i], &c->m[c->n++]);
  json_free(j);
  return rc;
}

/* ---- simulating ------------------------------------------------------------- */

/* One simulation per DP size, all its variants at once (same packs). */
static int simulate_all(calib_t *c) {
  char err[512];
  for (int i = 0; i < c->n; i++) {
    if (c->m[i].run.step) continue;
    sim_algo_t algos[SIM_MAX_LIST];
    sim_run_t runs[SIM_MAX_LIST];
    int idx[SIM_MAX_LIST], k = 0;
    for (int j = i; j < c->n && k < SIM_MAX_LIST; j++)
      if (c->m[j].dp == c->m[i].dp && !c->m[j].run.step) {
        idx[k] = j;
        algos[k++] = c->m[j].algo;
      }
    if (sim_simulate(&c->cfg, c->m[i].dp, algos, k, runs, err, sizeof err)) {
      fprintf(stderr, SIM_PROG ": --calibrate: %s\n", err);
      return -1;
    }
    for (int a = 0; a < k; a++) c->m[idx[a]].run = runs[a];
  }
  return 0;
}

static double simulated_ms(const calib_t *c, const sim_net_t *net, int i) {
  return 1e3 * sim_price_run(net, &c->cfg, &c->m[i].run).step_s;
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

/* The fitted parameters in log10 space: latency s, bandwidth B/s, serial s
 * (serial below 1e-9 s counts as 0). */
typedef struct theta {
  double v[3];
} theta_t;

static const double lo[3] = {-8, 5, -10}, hi[3] = {-2, 12, -2};

static sim_net_t with(const sim_net_t *base, theta_t t) {
  sim_net_t n = *base;
  n.latency_s = pow(10, t.v[0]);
  n.bandwidth = pow(10, t.v[1]);
  n.serial_s = t.v[2] < -9 ? 0 : pow(10, t.v[2]);
  return n;
}

static double loss_at(const calib_t *c, const sim_net_t *base, theta_t t) {
  sim_net_t n = with(base, t);
  return loss(c, &n);
}

/* A coarse grid over the box: the loss has flat directions and several
 * basins (latency and serial cost trade off), so start from the best cell. */
static theta_t grid(const calib_t *c, const sim_net_t *base) {
  enum { G = 13 };
  theta_t best = {{0}}, t;
  double best_loss = INFINITY;
  for (int i = 0; i < G; i++)
    for (int j = 0; j < G; j++)
      for (int k = 0; k < G; k++) {
        t.v[0] = lo[0] + (hi[0] - lo[0]) * i / (G - 1);
        t.v[1] = lo[1] + (hi[1] - lo[1]) * j / (G - 1);
        t.v[2] = lo[2] + (hi[2] - lo[2]) * k / (G - 1);
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

static sim_net_t fit(const calib_t *c, const sim_net_t *base) {
  theta_t t = grid(c, base);
  double step = (hi[0] - lo[0]) / 12;
  for (int round = 0; round < 6; round++, step /= 2)
    for (int d = 0; d < 3; d++)
      golden(c, base, &t, d, fmax(lo[d], t.v[d] - step),
             fmin(hi[d], t.v[d] + step));
  return with(base, t);
}

/* ---- printing --------------------------------------------------------------- */

static void print_net(const char *what, const sim_net_t *n) {
  printf("%s: latency %.3g us, bandwidth %.4g GB/s, serial %.3g us per rank "
         "and collective, %d cores, memcpy %.3g GB/s\n", what,
         1e6 * n->latency_s, 1e-9 * n->bandwidth, 1e6 * n->serial_s,
         (int)n->cores, 1e-9 * n->memcpy_bps);
}

/* The table; returns whether every run is within TOLERANCE. */
static int print_table(const calib_t *c, const sim_net_t *net) {
  int ok = 1;
  double worst = 0;
  printf("  %5s  %-8s %12s %12s %8s\n", "dp", "variant", "measured_ms",
         "simulated_ms", "diff");
  for (int i = 0; i < c->n; i++) {
    double s = simulated_ms(c, net, i), e = s / c->m[i].step_ms - 1;
    ok &= fabs(e) <= TOLERANCE;
    worst = fmax(worst, fabs(e));
    printf("  %5d  %-8s %12.1f %12.1f %+7.2f%%\n", (int)c->m[i].dp,
           sim_algo_name(c->m[i].algo), c->m[i].step_ms, s, 100 * e);
  }
  printf("  all within %.0f%%: %s (worst %.2f%%)\n", 100 * TOLERANCE,
         ok ? "yes" : "no", 100 * worst);
  return ok;
}

static int write_json(const char *path, const calib_t *c, const sim_net_t *n) {
  FILE *f = fopen(path, "w");
  if (!f) return fprintf(stderr, SIM_PROG ": --json: cannot write '%s'\n",
                         path), -1;
  fprintf(f, "{\"fitted\":{\"latency_us\":%.6g,\"bandwidth_gbs\":%.6g,"
          "\"serial_us\":%.6g,\"cores\":%d},\"runs\":[", 1e6 * n->latency_s,
          1e-9 * n->bandwidth, 1e6 * n->serial_s, (int)n->cores);
  for (int i = 0; i < c->n; i++) {
    double s = simulated_ms(c, n, i);
    fprintf(f, "%s{\"dp\":%d,\"variant\":\"%s\",\"measured_ms\":%.3f,"
            "\"simulated_ms\":%.3f,\"rel_diff\":%.5f}", i ? "," : "",
            (int)c->m[i].dp, sim_algo_name(c->m[i].algo), c->m[i].step_ms, s,
            s / c->m[i].step_ms - 1);
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
    printf("calibration against %s: profile %s, seed %llu, time scale %g, "
           "steps %lld..%lld (1-based)\n", o->calibrate, c.profile,
           (unsigned long long)c.cfg.seed, c.cfg.time_scale,
           (long long)c.cfg.warmup_last + 1,
           (long long)(c.cfg.warmup_last + c.cfg.steps));
    print_net("given parameters", &base);
    print_table(&c, &base);
    sim_net_t fitted = fit(&c, &base);
    print_net("fitted parameters", &fitted);
    rc = print_table(&c, &fitted) ? 0 : 1;
    if (o->json && write_json(o->json, &c, &fitted) < 0) rc = 1;
  }
  for (int i = 0; i < c.n; i++) sim_run_free(&c.m[i].run);
  free(c.m);
  return rc;
}
