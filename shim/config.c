/* Environment parsing; see config.h. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "env.h"

static int bad(char *msg, size_t len, const char *name, const char *value,
               const char *expected) {
  snprintf(msg, len, "%s='%s': expected %s", name, value, expected);
  return DPSHIM_EINVAL;
}

static int parse_bool(const char *v, int *out) {
  static const char *yes[] = {"1", "true", "yes", "on"};
  static const char *no[] = {"0", "false", "no", "off"};
  for (size_t k = 0; k < 4; k++) {
    if (!strcasecmp(v, yes[k])) return *out = 1, 0;
    if (!strcasecmp(v, no[k])) return *out = 0, 0;
  }
  return -1;
}

/* A whole string that is a finite double >= min (or > min when strict). */
static int parse_double(const char *v, double min, int strict, double *out) {
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (end == v || *end || errno || !isfinite(x) || x < min ||
      (strict && x == min))
    return -1;
  *out = x;
  return 0;
}

/* A whole string that is an integer in [min, max]; *end is where it stops
 * when `end` is given (then trailing text is the caller's). */
static int parse_int(const char *v, long min, long max, long *out,
                     const char **end) {
  char *e;
  errno = 0;
  if (!isdigit((unsigned char)*v)) return -1;
  long x = strtol(v, &e, 10);
  if (e == v || errno || x < min || x > max || (!end && *e)) return -1;
  if (end) *end = e;
  *out = x;
  return 0;
}

/* ---- warm-up steps: "2-11", "2,4,6-9", "none" ----------------------------- */

static int parse_warmup(const char *v, dpshim__config_t *c) {
  memset(c->warmup, 0, sizeof c->warmup);
  c->nwarmup = 0;
  if (!strcasecmp(v, "none")) return 0;
  const char *p = v;
  for (;;) {
    long lo, hi;
    if (parse_int(p, 1, DPSHIM__MAX_WARMUP, &lo, &p) < 0) return -1;
    hi = lo;
    if (*p == '-' && parse_int(p + 1, lo, DPSHIM__MAX_WARMUP, &hi, &p) < 0)
      return -1;
    for (long s = lo; s <= hi; s++) c->warmup[s] = 1;
    if (!*p) break;
    if (*p++ != ',') return -1;
  }
  c->warmup_first = 0;
  for (int32_t s = DPSHIM__MAX_WARMUP; s >= 1; s--) {
    if (!c->warmup[s]) continue;
    if (!c->nwarmup++) c->warmup_last = s;
    c->warmup_first = s;
  }
  return c->nwarmup >= 2 ? 0 : -1;
}

int dpshim__config_is_warmup(const dpshim__config_t *cfg, int64_t step,
                             int *first) {
  int in = step >= 1 && step <= DPSHIM__MAX_WARMUP && cfg->warmup[step];
  if (first) *first = in && step == cfg->warmup_first;
  return in;
}

/* ---- sync collectives: "allreduce,alltoall" ------------------------------- */

static const struct {
  const char *name;
  unsigned bit;
} sync_names[] = {
    {"allreduce", DPSHIM__SYNC_ALLREDUCE},
    {"alltoall", DPSHIM__SYNC_ALLTOALL},
    {"reduce_scatter", DPSHIM__SYNC_REDUCE_SCATTER},
    {"reduce_scatter_block", DPSHIM__SYNC_REDUCE_SCATTER_BLOCK},
    {"allgather", DPSHIM__SYNC_ALLGATHER},
    {"reduce", DPSHIM__SYNC_REDUCE},
    {"bcast", DPSHIM__SYNC_BCAST},
    {"barrier", DPSHIM__SYNC_BARRIER},
};

static int parse_sync_ops(const char *v, unsigned *bits) {
  *bits = 0;
  while (*v) {
    size_t n = strcspn(v, ",");
    const char *name = v;
    if (n > 4 && !strncasecmp(name, "MPI_", 4)) name += 4, n -= 4;
    unsigned bit = 0;
    for (size_t k = 0; k < sizeof sync_names / sizeof *sync_names; k++)
      if (strlen(sync_names[k].name) == n &&
          !strncasecmp(name, sync_names[k].name, n))
        bit = sync_names[k].bit;
    if (!bit) return -1;
    *bits |= bit;
    v = name + n + (name[n] == ',');
  }
  return *bits ? 0 : -1;
}

/* ---- the whole configuration ---------------------------------------------- */

static int parse_coefs(const char *v, dpshim_cost_model_t *m) {
  double x[3];
  const char *p = v;
  for (int k = 0; k < 3; k++) {
    char item[64];
    size_t n = strcspn(p, ",");
    if (n == 0 || n >= sizeof item || (k < 2) != (p[n] == ',')) return -1;
    memcpy(item, p, n);
    item[n] = 0;
    if (parse_double(item, 0, 0, &x[k]) < 0) return -1;
    p += n + (k < 2);
  }
  if (x[0] + x[1] + x[2] <= 0) return -1;
  *m = (dpshim_cost_model_t){x[0], x[1], x[2]};
  return 0;
}

static int parse_size(const char *v, int32_t *out) {
  long x;
  if (parse_int(v, 1, 1 << 20, &x, NULL) < 0) return -1;
  *out = (int32_t)x;
  return 0;
}

static int parse_ratio(const char *v, double *out) {
  if (!strcasecmp(v, "none")) return *out = 0, 0;
  return parse_double(v, 0, 1, out);
}

static int parse_fit(const char *v, dpshim_fit_method_t *out) {
  return dpshim_fit_method_from_name(v, out) < 0 ? -1 : 0;
}

static int parse_algo(const char *v, dpshim_algo_t *out) {
  return dpshim_algo_from_name(v, out) < 0 ? -1 : 0;
}

static int parse_path(const char *v, char *out) {
  size_t n = strlen(v);
  if (n >= sizeof ((dpshim__config_t *)0)->log_path) return -1;
  memcpy(out, v, n + 1);
  return 0;
}

static void set_defaults(dpshim__config_t *c) {
  memset(c, 0, sizeof *c);
  parse_warmup("2-11", c);
  c->max_len_ratio = 1.2;
  c->threshold = 0.2;
  c->algo = DPSHIM_ALGO_DEFAULT;
  c->fit = DPSHIM_FIT_RANKS;
  c->tp = c->pp = c->cp = 1;
  c->sync_ops = DPSHIM__SYNC_ALLREDUCE;
}

/* Parses one variable when set and not empty; rc < 0 names it in msg. */
#define PARSE(NAME, CALL, EXPECTED)                                           \
  do {                                                                        \
    const char *v = get(NAME);                                                \
    if (v && *v && (CALL) < 0) return bad(msg, len, NAME, v, EXPECTED);       \
  } while (0)

int dpshim__config_parse(dpshim__getenv_fn get, dpshim__config_t *c,
                         char *msg, size_t len) {
  set_defaults(c);
  msg[0] = 0;
  PARSE(DPSHIM_ENV_ENABLE, parse_bool(v, &c->enabled), "0 or 1");
  PARSE(DPSHIM_ENV_VERBOSE, parse_bool(v, &c->verbose), "0 or 1");
  PARSE(DPSHIM_ENV_VERIFY, parse_bool(v, &c->verify), "0 or 1");
  PARSE(DPSHIM_ENV_WARMUP, parse_warmup(v, c),
        "steps and ranges like '2-11' or '2,4,6-9' within 1..4096, at least "
        "2 steps (the first is dropped), or 'none'");
  PARSE(DPSHIM_ENV_MAX_LEN_RATIO, parse_ratio(v, &c->max_len_ratio),
        "a number > 0 or 'none'");
  PARSE(DPSHIM_ENV_THRESHOLD, parse_double(v, 0, 0, &c->threshold),
        "a number >= 0");
  PARSE(DPSHIM_ENV_SOLVER, parse_algo(v, &c->algo),
        "'default', 'seed', 'kk' or 'none'");
  PARSE(DPSHIM_ENV_FIT, parse_fit(v, &c->fit), "'ranks' or 'seed'");
  PARSE(DPSHIM_ENV_COEFS, (c->have_coefs = 1, parse_coefs(v, &c->coefs)),
        "a,b,c: three numbers >= 0, not all 0");
  PARSE(DPSHIM_ENV_TP, parse_size(v, &c->tp), "an integer >= 1");
  PARSE(DPSHIM_ENV_PP, parse_size(v, &c->pp), "an integer >= 1");
  PARSE(DPSHIM_ENV_CP, parse_size(v, &c->cp), "an integer >= 1");
  PARSE(DPSHIM_ENV_SYNC_OPS, parse_sync_ops(v, &c->sync_ops),
        "a comma list of allreduce, alltoall, reduce_scatter, "
        "reduce_scatter_block, allgather, reduce, bcast, barrier");
  PARSE(DPSHIM_ENV_LOG, parse_path(v, c->log_path), "a path under 4096 bytes");
  return 0;
}
