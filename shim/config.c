/* Environment parsing; see config.h. Every variable is one row of `rows`
 * below: parsing, defaults, error lines and the dump all go through it. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "env.h"
#include "hash.h"
#include "policy.h"

#define DIGITS "0123456789"
#define SHOWN_MAX 64   /* characters of a bad value quoted in its message */
#define TEXT_MAX 16384 /* a dumped line; the longest is a warm-up list of
                        * 2-step ranges 1 apart up to 4096 (< 14000) */
#define MAX_TOKENS 2147483647.0 /* the longest sample a batch can describe */

/* ---- text for the dump --------------------------------------------------- */

typedef struct text {
  char *s;
  size_t cap, len;
} text_t;

/* Appends; on overflow the text stays terminated and is cut. */
__attribute__((format(printf, 2, 3))) static void put(text_t *t,
                                                      const char *fmt, ...) {
  if (t->len >= t->cap) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(t->s + t->len, t->cap - t->len, fmt, ap);
  va_end(ap);
  if (n > 0) t->len += (size_t)n;
}

/* The shortest text that reads back as exactly `x` (so the dump shows 1.2,
 * not 1.1999999999999999, and round-trips). -0 shows as 0. */
static void put_double(text_t *t, double x) {
  char buf[32];
  if (x == 0) x = 0.0;
  /* At least the integer digits: 10, not 1e+01. */
  int first = fabs(x) >= 1 && fabs(x) < 1e15 ? (int)log10(fabs(x)) + 1 : 1;
  for (int prec = first; prec <= 17; prec++) {
    snprintf(buf, sizeof buf, "%.*g", prec, x);
    if (strtod(buf, NULL) == x) break;
  }
  put(t, "%s", buf);
}

/* ---- numbers ------------------------------------------------------------- */

/* Plain decimal: [+-]digits[.digits][(e|E)[+-]digits], with a digit on at
 * least one side of the point. strtod alone would also take leading blanks,
 * hex floats, inf and nan. */
static int is_decimal(const char *v) {
  const char *p = v + (*v == '+' || *v == '-');
  size_t n = strspn(p, DIGITS);
  p += n;
  if (*p == '.') {
    size_t f = strspn(++p, DIGITS);
    p += f;
    n += f;
  }
  if (!n) return 0;
  if (*p == 'e' || *p == 'E') {
    p += 1 + (p[1] == '+' || p[1] == '-');
    size_t e = strspn(p, DIGITS);
    if (!e) return 0;
    p += e;
  }
  return *p == 0;
}

/* A whole string that is a finite decimal >= min (or > min when strict).
 * Underflow is fine: a tiny value stays tiny, or becomes 0 and is judged as
 * 0. -0 is stored as 0 so that ranks given "-0" and "0" agree. */
static int parse_double(const char *v, double min, int strict, double *out) {
  if (!is_decimal(v)) return -1;
  double x = strtod(v, NULL);
  if (!isfinite(x) || x < min || (strict && x == min)) return -1;
  *out = x == 0 ? 0.0 : x;
  return 0;
}

/* A decimal integer in [min, max] starting at `v`; *end is where it stops
 * when `end` is given (then trailing text is the caller's), else the whole
 * string must be the number. */
static int parse_int(const char *v, long min, long max, long *out,
                     const char **end) {
  char *e;
  errno = 0;
  if (!isdigit((unsigned char)*v)) return -1; /* no blanks, no sign */
  long x = strtol(v, &e, 10);
  if (errno || x < min || x > max || (!end && *e)) return -1;
  if (end) *end = e;
  *out = x;
  return 0;
}

static int parse_bool(const char *v, int *out) {
  static const char *const yes[] = {"1", "true", "yes", "on"};
  static const char *const no[] = {"0", "false", "no", "off"};
  for (size_t k = 0; k < 4; k++) {
    if (!strcasecmp(v, yes[k])) return *out = 1, 0;
    if (!strcasecmp(v, no[k])) return *out = 0, 0;
  }
  return -1;
}

#define AHEAD_MAX 8 /* batches balanced ahead: buffers the adapter keeps */

static int parse_ahead(const char *v, dpshim__config_t *c) {
  long x;
  if (parse_int(v, 0, AHEAD_MAX, &x, NULL) < 0) return -1;
  c->ahead = (int32_t)x;
  return 0;
}

static int parse_size(const char *v, int32_t *out) {
  long x;
  if (parse_int(v, 1, 1 << 20, &x, NULL) < 0) return -1;
  *out = (int32_t)x;
  return 0;
}

/* ---- warm-up steps: "2-11", "2,4,6-9", "none" ----------------------------- */

static void count_warmup(dpshim__config_t *c) {
  for (int32_t s = DPSHIM__MAX_WARMUP; s >= 1; s--) {
    if (!c->warmup[s]) continue;
    if (!c->nwarmup++) c->warmup_last = s;
    c->warmup_first = s;
  }
}

static int parse_warmup(const char *v, dpshim__config_t *c) {
  memset(c->warmup, 0, sizeof c->warmup);
  c->nwarmup = c->warmup_first = c->warmup_last = 0;
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
  count_warmup(c);
  return c->nwarmup >= 2 ? 0 : -1;
}

static void format_warmup(const dpshim__config_t *c, text_t *t) {
  if (!c->nwarmup) {
    put(t, "none");
    return;
  }
  const char *sep = "";
  for (int32_t s = 1; s <= DPSHIM__MAX_WARMUP; s++) {
    if (!c->warmup[s]) continue;
    int32_t e = s;
    while (e < DPSHIM__MAX_WARMUP && c->warmup[e + 1]) e++;
    if (e > s)
      put(t, "%s%d-%d", sep, (int)s, (int)e);
    else
      put(t, "%s%d", sep, (int)s);
    sep = ",";
    s = e;
  }
}

double dpshim__config_vit_ratio(const dpshim__config_t *c) {
  return c->vit_threshold < 0 ? DPSHIM__POLICY_VIT_MET_RATIO
                              : c->vit_threshold;
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
#define NSYNC (sizeof sync_names / sizeof *sync_names)

static int parse_sync_ops(const char *v, dpshim__config_t *c) {
  unsigned bits = 0;
  while (*v) {
    size_t n = strcspn(v, ",");
    const char *name = v;
    if (n > 4 && !strncasecmp(name, "MPI_", 4)) name += 4, n -= 4;
    unsigned bit = 0;
    for (size_t k = 0; k < NSYNC; k++)
      if (strlen(sync_names[k].name) == n &&
          !strncasecmp(name, sync_names[k].name, n))
        bit = sync_names[k].bit;
    if (!bit) return -1;
    bits |= bit;
    v = name + n + (name[n] == ',');
  }
  c->sync_ops = bits;
  return bits ? 0 : -1;
}

static void format_sync_ops(const dpshim__config_t *c, text_t *t) {
  const char *sep = "";
  for (size_t k = 0; k < NSYNC; k++) {
    if (!(c->sync_ops & sync_names[k].bit)) continue;
    put(t, "%s%s", sep, sync_names[k].name);
    sep = ",";
  }
}

/* ---- cost coefficients: "a,b,c" or "a,b,c,d,e" ---------------------------- */

/* Finite at the longest sample with the most patches, so that no load the
 * shim sums is inf. */
static int cost_is_finite(const dpshim_cost_model_t *m) {
  return isfinite(m->a * MAX_TOKENS * MAX_TOKENS + m->b * MAX_TOKENS + m->c +
                  m->d * MAX_TOKENS * MAX_TOKENS + m->e * MAX_TOKENS);
}

/* Up to `most` comma-separated numbers >= 0 into x; how many, or -1. */
static int parse_numbers(const char *v, double *x, int most) {
  int k = 0;
  for (const char *p = v;; k++) {
    char item[64];
    size_t n = strcspn(p, ",");
    if (k == most || n == 0 || n >= sizeof item) return -1;
    memcpy(item, p, n);
    item[n] = 0;
    if (parse_double(item, 0, 0, &x[k]) < 0) return -1;
    if (p[n] != ',') return k + 1;
    p += n + 1;
  }
}

static int parse_coefs(const char *v, dpshim__config_t *c) {
  double x[5] = {0};
  int n = parse_numbers(v, x, 5);
  if (n != 3 && n != 5) return -1;
  dpshim_cost_model_t m = {x[0], x[1], x[2], x[3], x[4]};
  if (x[0] + x[1] + x[2] + x[3] + x[4] <= 0 || !cost_is_finite(&m)) return -1;
  c->coefs = m;
  c->have_coefs = 1;
  return 0;
}

static void format_coefs(const dpshim__config_t *c, text_t *t) {
  if (!c->have_coefs) return;
  const double x[5] = {c->coefs.a, c->coefs.b, c->coefs.c, c->coefs.d,
                       c->coefs.e};
  int n = x[3] == 0 && x[4] == 0 ? 3 : 5;
  for (int k = 0; k < n; k++) {
    if (k) put(t, ",");
    put_double(t, x[k]);
  }
}

/* The ViT's cost per image: a*L^2 + b*L + c, L its patches. */
static int parse_vit_coefs(const char *v, dpshim__config_t *c) {
  double x[3] = {0};
  dpshim_cost_model_t m = {0};
  if (parse_numbers(v, x, 3) != 3) return -1;
  m = (dpshim_cost_model_t){x[0], x[1], x[2], 0, 0};
  if (x[0] + x[1] + x[2] <= 0 || !cost_is_finite(&m)) return -1;
  c->vit_coefs = m;
  c->have_vit_coefs = 1;
  return 0;
}

static void format_vit_coefs(const dpshim__config_t *c, text_t *t) {
  if (!c->have_vit_coefs) return;
  put_double(t, c->vit_coefs.a);
  put(t, ",");
  put_double(t, c->vit_coefs.b);
  put(t, ",");
  put_double(t, c->vit_coefs.c);
}

/* ---- the other variables ------------------------------------------------- */

/* A cap ratio: a number > 0, or 'none' (0). */
static int parse_cap(const char *v, double *out) {
  if (!strcasecmp(v, "none")) return *out = 0, 0;
  return parse_double(v, 0, 1, out);
}

static void format_cap(double x, text_t *t) {
  if (x == 0)
    put(t, "none");
  else
    put_double(t, x);
}

/* Parser and formatter of a double field read by `PARSE` and shown by
 * `FORMAT` (caps, thresholds). */
#define DOUBLE_FIELD(FIELD, PARSE, FORMAT)                               \
  static int parse_##FIELD(const char *v, dpshim__config_t *c) {          \
    return PARSE(v, &c->FIELD);                                           \
  }                                                                       \
  static void format_##FIELD(const dpshim__config_t *c, text_t *t) {      \
    FORMAT(c->FIELD, t);                                                  \
  }

static int parse_threshold_value(const char *v, double *out) {
  return parse_double(v, 0, 0, out);
}

static void format_number(double x, text_t *t) { put_double(t, x); }

static int parse_trigger(const char *v, double *out) {
  if (strcmp(v, "auto")) return parse_threshold_value(v, out);
  *out = DPSHIM__THRESHOLD_AUTO;
  return 0;
}

static void format_trigger(double x, text_t *t) {
  if (x == DPSHIM__THRESHOLD_AUTO) put(t, "auto");
  else put_double(t, x);
}

DOUBLE_FIELD(max_len_ratio, parse_cap, format_cap)
DOUBLE_FIELD(vit_max_patch_ratio, parse_cap, format_cap)
DOUBLE_FIELD(threshold, parse_trigger, format_trigger)
DOUBLE_FIELD(vit_threshold, parse_trigger, format_trigger)

static int parse_inter_host_cost_value(const char *v, double *out) {
  return parse_double(v, 1, 0, out) < 0 || *out > DPSHIM_INTER_HOST_COST_MAX
             ? -1
             : 0;
}

DOUBLE_FIELD(inter_host_cost, parse_inter_host_cost_value, format_number)

static int parse_algo(const char *v, dpshim__config_t *c) {
  return dpshim_algo_from_name(v, &c->algo) < 0 ? -1 : 0;
}

static void format_algo(const dpshim__config_t *c, text_t *t) {
  put(t, "%s", dpshim_algo_name(c->algo));
}

/* 'auto': the shim picks per run (core.c); the fit field then holds the
 * per-rank method, the one tried first. */
static int parse_fit(const char *v, dpshim__config_t *c) {
  c->fit_auto = !strcasecmp(v, "auto");
  if (c->fit_auto) return c->fit = DPSHIM_FIT_RANKS, 0;
  return dpshim_fit_method_from_name(v, &c->fit) < 0 ? -1 : 0;
}

static void format_fit(const dpshim__config_t *c, text_t *t) {
  put(t, "%s", c->fit_auto ? "auto" : dpshim_fit_method_name(c->fit));
}

static const char *const step_names[] = {"auto", "sync", "handoff"};

static int parse_step(const char *v, dpshim__config_t *c) {
  for (int k = 0; k < 3; k++)
    if (!strcasecmp(v, step_names[k]))
      return c->step = (dpshim__step_mode_t)k, 0;
  return -1;
}

static void format_step(const dpshim__config_t *c, text_t *t) {
  put(t, "%s", step_names[c->step]);
}

static int parse_log(const char *v, dpshim__config_t *c) {
  size_t n = strlen(v);
  if (n >= sizeof c->log_path) return -1;
  memcpy(c->log_path, v, n + 1);
  return 0;
}

static void format_log(const dpshim__config_t *c, text_t *t) {
  put(t, "%.*s", (int)sizeof c->log_path - 1, c->log_path);
}

/* Parser and formatter of an int field read by `PARSE` (bools, sizes). */
#define INT_FIELD(FIELD, PARSE)                                           \
  static int parse_##FIELD(const char *v, dpshim__config_t *c) {          \
    return PARSE(v, &c->FIELD);                                           \
  }                                                                       \
  static void format_##FIELD(const dpshim__config_t *c, text_t *t) {      \
    put(t, "%ld", (long)c->FIELD);                                        \
  }

INT_FIELD(enabled, parse_bool)
INT_FIELD(verbose, parse_bool)
INT_FIELD(verify, parse_bool)
INT_FIELD(loader_thread, parse_bool)
INT_FIELD(vit, parse_bool)
INT_FIELD(topology, parse_bool)
INT_FIELD(tp, parse_size)
INT_FIELD(pp, parse_size)
INT_FIELD(cp, parse_size)
INT_FIELD(micro_batches, parse_size)

static void format_ahead(const dpshim__config_t *c, text_t *t) {
  put(t, "%ld", (long)c->ahead);
}

/* ---- the table ----------------------------------------------------------- */

typedef struct row {
  dpshim__config_var_t var;
  int (*parse)(const char *v, dpshim__config_t *c); /* < 0: bad value */
  void (*format)(const dpshim__config_t *c, text_t *t);
} row_t;

#define BOOL_TEXT "0/1, true/false, yes/no, on/off"
#define SIZE_TEXT "an integer in 1..1048576"

/* A variable whose value is a switch, a single value, or a list. */
#define SWITCH(name, flag) {name, "0", BOOL_TEXT, flag, DPSHIM__FORM_SWITCH}
#define VALUE(name, def, accepted, flag) \
  {name, def, accepted, flag, DPSHIM__FORM_VALUE}

static const row_t rows[] = {
    {SWITCH(DPSHIM_ENV_ENABLE, "--use-vlm-dp-balance"), parse_enabled,
     format_enabled},
    {{DPSHIM_ENV_WARMUP, "2-11",
      "steps and ranges like '2-11' or '2,4,6-9' within 1..4096, at least "
      "2 steps (the first is dropped), or 'none'",
      "--vlm-dp-balance-warmup-iters", DPSHIM__FORM_LIST},
     parse_warmup, format_warmup},
    {VALUE(DPSHIM_ENV_MAX_LEN_RATIO, "1.2", "a number > 0 or 'none'",
           "--dp-balance-max-len-ratio-vlm"),
     parse_max_len_ratio, format_max_len_ratio},
    {VALUE(DPSHIM_ENV_THRESHOLD, "auto",
           "a number >= 0 (the original's imbalance ratio) or 'auto' "
           "(saving against cost, in seconds)",
           "--dp-balance-trigger-threshold-vlm"),
     parse_threshold, format_threshold},
    {SWITCH(DPSHIM_ENV_VERBOSE, "--dp-balance-verbose"), parse_verbose,
     format_verbose},
    {VALUE(DPSHIM_ENV_SOLVER, "default",
           "'default', 'seed', 'kk', 'kk-cap' or 'none'", NULL),
     parse_algo, format_algo},
    {VALUE(DPSHIM_ENV_FIT, "auto", "'auto', 'ranks', 'steps' or 'seed'", NULL),
     parse_fit, format_fit},
    {VALUE(DPSHIM_ENV_COEFS, NULL,
           "a,b,c or a,b,c,d,e: numbers >= 0, not all 0, with "
           "a*L^2+b*L+c+d*L^2+e*L finite at L = 2147483647",
           NULL),
     parse_coefs, format_coefs},
    {VALUE(DPSHIM_ENV_TP, "1", SIZE_TEXT, "--tensor-model-parallel-size"),
     parse_tp, format_tp},
    {VALUE(DPSHIM_ENV_PP, "1", SIZE_TEXT, "--pipeline-model-parallel-size"),
     parse_pp, format_pp},
    {VALUE(DPSHIM_ENV_CP, "1", SIZE_TEXT, "--context-parallel-size"),
     parse_cp, format_cp},
    {VALUE(DPSHIM_ENV_SYNC_OPS, "allreduce",
           "a comma list of allreduce, alltoall, reduce_scatter, "
           "reduce_scatter_block, allgather, reduce, bcast, barrier",
           NULL),
     parse_sync_ops, format_sync_ops},
    {VALUE(DPSHIM_ENV_LOG, NULL, "a path under 4096 bytes", NULL), parse_log,
     format_log},
    {SWITCH(DPSHIM_ENV_VERIFY, NULL), parse_verify, format_verify},
    {SWITCH(DPSHIM_ENV_LOADER_THREAD, NULL), parse_loader_thread,
     format_loader_thread},
    {VALUE(DPSHIM_ENV_AHEAD, "1", "an integer in 0..8 (0: inline)", NULL),
     parse_ahead, format_ahead},
    {SWITCH(DPSHIM_ENV_VIT, "--use-vit-dp-balance"), parse_vit, format_vit},
    {VALUE(DPSHIM_ENV_VIT_THRESHOLD, "auto",
           "a number >= 0 (the ViT plan's imbalance ratio) or 'auto' "
           "(the encoder calls meet where that pays, in seconds)",
           NULL),
     parse_vit_threshold, format_vit_threshold},
    {VALUE(DPSHIM_ENV_VIT_COEFS, NULL,
           "a,b,c: numbers >= 0, not all 0, with a*L^2+b*L+c finite at "
           "L = 2147483647",
           NULL),
     parse_vit_coefs, format_vit_coefs},
    {VALUE(DPSHIM_ENV_VIT_MAX_PATCH_RATIO, "2", "a number > 0 or 'none'",
           NULL),
     parse_vit_max_patch_ratio, format_vit_max_patch_ratio},
    {{DPSHIM_ENV_TOPOLOGY, "1", BOOL_TEXT, NULL, DPSHIM__FORM_SWITCH},
     parse_topology, format_topology},
    {VALUE(DPSHIM_ENV_INTER_HOST_COST, "10", "a number in 1..1000", NULL),
     parse_inter_host_cost, format_inter_host_cost},
    {VALUE(DPSHIM_ENV_STEP, "auto", "'auto', 'sync' or 'handoff'", NULL),
     parse_step, format_step},
    {VALUE(DPSHIM_ENV_MICRO_BATCHES, "1", SIZE_TEXT, NULL),
     parse_micro_batches, format_micro_batches},
};
#define NROWS ((int32_t)(sizeof rows / sizeof *rows))

int32_t dpshim__config_nvars(void) { return NROWS; }

const dpshim__config_var_t *dpshim__config_var(int32_t i) {
  return i >= 0 && i < NROWS ? &rows[i].var : NULL;
}

/* ---- parsing ------------------------------------------------------------- */

/* One character of a bad value as shown in a one-line message. */
static size_t escape(unsigned char ch, char esc[5]) {
  static const char hex[] = "0123456789abcdef";
  if (ch >= 0x20 && ch != 0x7f) return esc[0] = (char)ch, esc[1] = 0, 1;
  if (ch == '\n') return memcpy(esc, "\\n", 3), 2;
  if (ch == '\t') return memcpy(esc, "\\t", 3), 2;
  if (ch == '\r') return memcpy(esc, "\\r", 3), 2;
  esc[0] = '\\', esc[1] = 'x', esc[2] = hex[ch >> 4], esc[3] = hex[ch & 15];
  return esc[4] = 0, 4;
}

/* `v` escaped and cut to SHOWN_MAX characters plus "...", so that a long
 * value never pushes the expected part out of the caller's buffer. */
static void show(const char *v, char out[SHOWN_MAX + 4]) {
  size_t n = 0;
  out[0] = 0;
  for (; *v; v++) {
    char esc[5];
    size_t k = escape((unsigned char)*v, esc);
    if (n + k > SHOWN_MAX) {
      memcpy(out + n, "...", 4);
      return;
    }
    memcpy(out + n, esc, k + 1);
    n += k;
  }
}

static int bad(char *msg, size_t len, const row_t *r, const char *value) {
  char shown[SHOWN_MAX + 4];
  show(value, shown);
  snprintf(msg, len, "%s='%s': expected %s", r->var.name, shown,
           r->var.accepted);
  return DPSHIM_EINVAL;
}

/* The defaults are the table's texts, parsed like any value; a NULL default
 * is the zeroed field (no coefficients, no log). */
static void set_defaults(dpshim__config_t *c) {
  memset(c, 0, sizeof *c);
  for (int32_t i = 0; i < NROWS; i++)
    if (rows[i].var.def) rows[i].parse(rows[i].var.def, c);
}

int dpshim__config_parse(dpshim__getenv_fn get, dpshim__config_t *c,
                         char *msg, size_t len) {
  set_defaults(c);
  msg[0] = 0;
  for (int32_t i = 0; i < NROWS; i++) {
    const char *v = get(rows[i].var.name);
    if (v && *v && rows[i].parse(v, c) < 0) return bad(msg, len, &rows[i], v);
  }
  return 0;
}

/* ---- dump and hash ------------------------------------------------------- */

void dpshim__config_dump(const dpshim__config_t *c,
                         void (*line)(void *ctx, const char *text), void *ctx) {
  char buf[TEXT_MAX];
  for (int32_t i = 0; i < NROWS; i++) {
    const row_t *r = &rows[i];
    text_t t = {buf, sizeof buf, 0};
    put(&t, "%s=", r->var.name);
    size_t at = t.len;
    r->format(c, &t);
    if (!strcmp(buf + at, r->var.def ? r->var.def : "")) put(&t, " (default)");
    line(ctx, buf);
  }
}

static uint64_t mix_int(uint64_t h, int64_t x) {
  return dpshim__fnv(h, &x, sizeof x);
}

/* By value: -0.0 and 0.0 are the same setting. */
static uint64_t mix_double(uint64_t h, double x) {
  uint64_t bits;
  if (x == 0) x = 0.0;
  memcpy(&bits, &x, sizeof bits);
  return dpshim__fnv(h, &bits, sizeof bits);
}

uint64_t dpshim__config_hash(const dpshim__config_t *c) {
  uint64_t h = DPSHIM__FNV_SEED;
  h = mix_int(h, c->enabled != 0);
  h = mix_int(h, c->verbose != 0);
  h = mix_int(h, c->verify != 0);
  h = mix_int(h, c->loader_thread != 0);
  h = mix_int(h, c->ahead);
  h = mix_int(h, c->topology != 0);
  h = mix_double(h, c->inter_host_cost);
  h = dpshim__fnv(h, c->warmup, sizeof c->warmup);
  h = mix_int(h, c->nwarmup);
  h = mix_int(h, c->warmup_first);
  h = mix_int(h, c->warmup_last);
  h = mix_double(h, c->max_len_ratio);
  h = mix_double(h, c->threshold);
  h = mix_int(h, c->algo);
  h = mix_int(h, c->fit);
  h = mix_int(h, c->fit_auto != 0);
  h = mix_int(h, c->step);
  h = mix_int(h, c->micro_batches);
  h = mix_int(h, c->have_coefs != 0);
  h = mix_double(h, c->coefs.a);
  h = mix_double(h, c->coefs.b);
  h = mix_double(h, c->coefs.c);
  h = mix_double(h, c->coefs.d);
  h = mix_double(h, c->coefs.e);
  h = mix_int(h, c->tp);
  h = mix_int(h, c->pp);
  h = mix_int(h, c->cp);
  h = mix_int(h, c->sync_ops);
  h = mix_int(h, c->vit != 0);
  h = mix_double(h, c->vit_threshold);
  h = mix_double(h, c->vit_max_patch_ratio);
  h = mix_int(h, c->have_vit_coefs != 0);
  h = mix_double(h, c->vit_coefs.a);
  h = mix_double(h, c->vit_coefs.b);
  h = mix_double(h, c->vit_coefs.c);
  size_t n = strnlen(c->log_path, sizeof c->log_path);
  h = mix_int(h, (int64_t)n);
  return dpshim__fnv(h, c->log_path, n);
}
