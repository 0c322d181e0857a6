/* dpshim__config_parse() through a fake environment: the defaults, the good
 * forms of every variable, and the bad ones, each rejected with
 * DPSHIM_EINVAL and a one-line message naming the variable, the value and
 * what is expected. dpshim__config_is_warmup(). The table: dump -> parse
 * round trips and the agreement hash. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "config.h"
#include "env.h"

/* ---- the fake environment -------------------------------------------------- */

#define MAX_VARS 32

static struct {
  char name[64];
  char value[8192];
} vars[MAX_VARS];
static int nvars;
static char asked[MAX_VARS * 2][64]; /* names the parser looked up */
static int nasked;

static char *fake_getenv(const char *name) {
  if (nasked < MAX_VARS * 2)
    snprintf(asked[nasked++], sizeof asked[0], "%s", name);
  for (int k = 0; k < nvars; k++)
    if (!strcmp(vars[k].name, name)) return vars[k].value;
  return NULL;
}

static void env_clear(void) { nvars = nasked = 0; }

static void env_set(const char *name, const char *value) {
  for (int k = 0; k < nvars; k++) {
    if (!strcmp(vars[k].name, name)) {
      snprintf(vars[k].value, sizeof vars[k].value, "%s", value);
      return;
    }
  }
  cr_assert_lt(nvars, MAX_VARS);
  snprintf(vars[nvars].name, sizeof vars[nvars].name, "%s", name);
  snprintf(vars[nvars].value, sizeof vars[nvars].value, "%s", value);
  nvars++;
}

static dpshim__config_t cfg;
static char msg[512];

static void setup(void) {
  env_clear();
  memset(&cfg, 0x5a, sizeof cfg); /* parse must set every field */
  memset(msg, 'x', sizeof msg - 1);
  msg[sizeof msg - 1] = 0;
}

TestSuite(shim_config, .init = setup);

static void parse_ok(void) {
  int rc = dpshim__config_parse(fake_getenv, &cfg, msg, sizeof msg);
  cr_assert_eq(rc, 0, "rc %d: %s", rc, msg);
  cr_assert_str_eq(msg, "");
}

/* The table's row for `name`. */
static const dpshim__config_var_t *var_named(const char *name) {
  for (int32_t i = 0; i < dpshim__config_nvars(); i++)
    if (!strcmp(dpshim__config_var(i)->name, name))
      return dpshim__config_var(i);
  cr_assert_fail("%s is not in the table", name);
  return NULL;
}

static int printable(const char *v) {
  for (; *v; v++)
    if ((unsigned char)*v < 0x20 || *v == 0x7f) return 0;
  return 1;
}

/* `name`=`value` alone is rejected with one line naming both and ending with
 * the variable's accepted text. The value is quoted as given when it is
 * short and printable (else escaped and cut: see the tests below). */
static void expect_bad(const char *name, const char *value) {
  env_clear();
  env_set(name, value);
  int rc = dpshim__config_parse(fake_getenv, &cfg, msg, sizeof msg);
  cr_assert_eq(rc, DPSHIM_EINVAL, "%s='%s' accepted (rc %d)", name, value, rc);
  cr_assert(strstr(msg, name) == msg, "message \"%s\" does not name %s", msg,
            name);
  cr_assert(printable(msg), "message \"%s\" is not one line", msg);
  if (printable(value) && strlen(value) <= 64) {
    char quoted[8300];
    snprintf(quoted, sizeof quoted, "='%s': ", value);
    cr_assert(strstr(msg, quoted) != NULL, "message \"%s\" does not quote %s",
              msg, quoted);
  }
  char expected[512];
  snprintf(expected, sizeof expected, ": expected %s",
           var_named(name)->accepted);
  size_t n = strlen(msg), e = strlen(expected);
  cr_assert(n >= e && !strcmp(msg + n - e, expected),
            "message \"%s\" does not end with \"%s\"", msg, expected);
}

/* Which steps 1 .. 4096 are warm-up steps, as a string of 0/1 for 1 .. 20. */
static void expect_warmup(const char *steps, int32_t n, int32_t first,
                          int32_t last) {
  cr_assert_eq(cfg.nwarmup, n);
  if (n) {
    cr_assert_eq(cfg.warmup_first, first);
    cr_assert_eq(cfg.warmup_last, last);
  }
  for (int s = 1; s <= 20; s++)
    cr_assert_eq(cfg.warmup[s], steps[s - 1] == '1', "step %d", s);
  int32_t count = 0;
  for (int s = 0; s <= DPSHIM__MAX_WARMUP; s++) count += cfg.warmup[s] != 0;
  cr_assert_eq(count, n, "warmup[] holds %d steps, nwarmup %d", count, n);
  cr_assert_eq(cfg.warmup[0], 0);
}

/* ---- defaults -------------------------------------------------------------- */

Test(shim_config, defaults) {
  parse_ok();
  cr_assert_eq(cfg.enabled, 0);
  cr_assert_eq(cfg.verbose, 0);
  cr_assert_eq(cfg.verify, 0);
  cr_assert_eq(cfg.loader_thread, 0);
  expect_warmup("01111111111000000000", 10, 2, 11);
  cr_assert_float_eq(cfg.max_len_ratio, 1.2, 1e-15);
  cr_assert_eq(cfg.threshold, DPSHIM__THRESHOLD_AUTO);
  cr_assert_eq(cfg.algo, DPSHIM_ALGO_DEFAULT);
  cr_assert_eq(cfg.fit, DPSHIM_FIT_RANKS);
  cr_assert_eq(cfg.fit_auto, 1);
  cr_assert_eq(cfg.step, DPSHIM__STEP_AUTO);
  cr_assert_eq(cfg.micro_batches, 1);
  cr_assert_eq(cfg.have_coefs, 0);
  cr_assert_eq(cfg.tp, 1);
  cr_assert_eq(cfg.pp, 1);
  cr_assert_eq(cfg.cp, 1);
  cr_assert_eq(cfg.sync_ops, (unsigned)DPSHIM__SYNC_ALLREDUCE);
  cr_assert_str_eq(cfg.log_path, "");
}

Test(shim_config, reads_every_variable_through_get) {
  parse_ok();
  static const char *const names[] = {
      DPSHIM_ENV_ENABLE, DPSHIM_ENV_WARMUP, DPSHIM_ENV_MAX_LEN_RATIO,
      DPSHIM_ENV_THRESHOLD, DPSHIM_ENV_VERBOSE, DPSHIM_ENV_SOLVER,
      DPSHIM_ENV_FIT, DPSHIM_ENV_COEFS, DPSHIM_ENV_TP, DPSHIM_ENV_PP,
      DPSHIM_ENV_CP, DPSHIM_ENV_SYNC_OPS, DPSHIM_ENV_LOG, DPSHIM_ENV_VERIFY,
      DPSHIM_ENV_LOADER_THREAD, DPSHIM_ENV_VIT, DPSHIM_ENV_VIT_THRESHOLD,
      DPSHIM_ENV_VIT_COEFS, DPSHIM_ENV_VIT_MAX_PATCH_RATIO,
      DPSHIM_ENV_TOPOLOGY, DPSHIM_ENV_INTER_HOST_COST, DPSHIM_ENV_STEP,
      DPSHIM_ENV_MICRO_BATCHES, DPSHIM_ENV_AHEAD};
  int32_t n = (int32_t)(sizeof names / sizeof *names);
  cr_assert_eq(dpshim__config_nvars(), n, "env.h and the table differ");
  for (int32_t k = 0; k < n; k++) {
    int found = 0;
    for (int a = 0; a < nasked; a++) found |= !strcmp(asked[a], names[k]);
    cr_assert(found, "%s was never read", names[k]);
    cr_assert_not_null(var_named(names[k]));
  }
}

Test(shim_config, empty_values_mean_unset) {
  env_set(DPSHIM_ENV_MAX_LEN_RATIO, "");
  env_set(DPSHIM_ENV_SYNC_OPS, "");
  env_set(DPSHIM_ENV_WARMUP, "");
  env_set(DPSHIM_ENV_ENABLE, "");
  parse_ok();
  cr_assert_float_eq(cfg.max_len_ratio, 1.2, 1e-15);
  cr_assert_eq(cfg.sync_ops, (unsigned)DPSHIM__SYNC_ALLREDUCE);
  cr_assert_eq(cfg.nwarmup, 10);
  cr_assert_eq(cfg.enabled, 0);
}

Test(shim_config, parse_is_repeatable) {
  /* A second parse starts from the defaults, not from the first result. */
  env_set(DPSHIM_ENV_WARMUP, "5,9");
  env_set(DPSHIM_ENV_TP, "4");
  parse_ok();
  env_clear();
  parse_ok();
  expect_warmup("01111111111000000000", 10, 2, 11);
  cr_assert_eq(cfg.tp, 1);
}

/* ---- good forms ------------------------------------------------------------ */

Test(shim_config, booleans) {
  static const char *const yes[] = {"1", "true", "YES", "On"};
  static const char *const no[] = {"0", "False", "no", "OFF"};
  for (int k = 0; k < 4; k++) {
    env_clear();
    env_set(DPSHIM_ENV_ENABLE, yes[k]);
    env_set(DPSHIM_ENV_VERBOSE, yes[k]);
    env_set(DPSHIM_ENV_VERIFY, yes[k]);
    env_set(DPSHIM_ENV_LOADER_THREAD, yes[k]);
    parse_ok();
    cr_assert_eq(cfg.enabled, 1, "%s", yes[k]);
    cr_assert_eq(cfg.verbose, 1);
    cr_assert_eq(cfg.verify, 1);
    cr_assert_eq(cfg.loader_thread, 1);
    env_clear();
    env_set(DPSHIM_ENV_ENABLE, no[k]);
    parse_ok();
    cr_assert_eq(cfg.enabled, 0, "%s", no[k]);
  }
}

Test(shim_config, warmup_range) {
  env_set(DPSHIM_ENV_WARMUP, "2-11");
  parse_ok();
  expect_warmup("01111111111000000000", 10, 2, 11);
}

Test(shim_config, warmup_list) {
  env_set(DPSHIM_ENV_WARMUP, "2,4,6-9");
  parse_ok();
  expect_warmup("01010111100000000000", 6, 2, 9);
}

Test(shim_config, warmup_unsorted_and_overlapping) {
  env_set(DPSHIM_ENV_WARMUP, "12-13,3,5-6,6");
  parse_ok();
  expect_warmup("00101100000110000000", 5, 3, 13);
}

Test(shim_config, warmup_two_single_steps) {
  env_set(DPSHIM_ENV_WARMUP, "7,8");
  parse_ok();
  expect_warmup("00000011000000000000", 2, 7, 8);
}

Test(shim_config, warmup_up_to_the_last_step) {
  env_set(DPSHIM_ENV_WARMUP, "4095-4096");
  parse_ok();
  cr_assert_eq(cfg.nwarmup, 2);
  cr_assert_eq(cfg.warmup_first, 4095);
  cr_assert_eq(cfg.warmup_last, 4096);
}

Test(shim_config, warmup_none) {
  env_set(DPSHIM_ENV_WARMUP, "none");
  parse_ok();
  expect_warmup("00000000000000000000", 0, 0, 0);
  for (int64_t s = -1; s <= DPSHIM__MAX_WARMUP + 1; s++)
    cr_assert_eq(dpshim__config_is_warmup(&cfg, s, NULL), 0, "step %lld",
                 (long long)s);
  env_set(DPSHIM_ENV_WARMUP, "NONE");
  parse_ok();
  cr_assert_eq(cfg.nwarmup, 0);
}

Test(shim_config, max_len_ratio) {
  env_set(DPSHIM_ENV_MAX_LEN_RATIO, "1.5");
  parse_ok();
  cr_assert_float_eq(cfg.max_len_ratio, 1.5, 1e-15);
  env_set(DPSHIM_ENV_MAX_LEN_RATIO, "none");
  parse_ok();
  cr_assert(cfg.max_len_ratio == 0);
  env_set(DPSHIM_ENV_MAX_LEN_RATIO, "1e-3");
  parse_ok();
  cr_assert_float_eq(cfg.max_len_ratio, 1e-3, 1e-18);
}

Test(shim_config, threshold) {
  env_set(DPSHIM_ENV_THRESHOLD, "0");
  parse_ok();
  cr_assert(cfg.threshold == 0);
  env_set(DPSHIM_ENV_THRESHOLD, "0.05");
  parse_ok();
  cr_assert_float_eq(cfg.threshold, 0.05, 1e-17);
  env_set(DPSHIM_ENV_THRESHOLD, "auto");
  parse_ok();
  cr_assert(cfg.threshold == DPSHIM__THRESHOLD_AUTO);
  expect_bad(DPSHIM_ENV_THRESHOLD, "Auto");
}

Test(shim_config, coefs_with_vision_terms) {
  env_set(DPSHIM_ENV_COEFS, "1,2,3,4,5");
  parse_ok();
  cr_assert(cfg.coefs.a == 1 && cfg.coefs.b == 2 && cfg.coefs.c == 3 &&
                cfg.coefs.d == 4 && cfg.coefs.e == 5,
            "%g %g %g %g %g", cfg.coefs.a, cfg.coefs.b, cfg.coefs.c,
            cfg.coefs.d, cfg.coefs.e);
  env_set(DPSHIM_ENV_COEFS, "1,2,3");
  parse_ok();
  cr_assert(cfg.coefs.d == 0 && cfg.coefs.e == 0);
}

Test(shim_config, coefs) {
  env_set(DPSHIM_ENV_COEFS, "1,2,3");
  parse_ok();
  cr_assert_eq(cfg.have_coefs, 1);
  cr_assert(cfg.coefs.a == 1 && cfg.coefs.b == 2 && cfg.coefs.c == 3,
            "%g %g %g", cfg.coefs.a, cfg.coefs.b, cfg.coefs.c);
  env_set(DPSHIM_ENV_COEFS, "0,0,2.5e-3");
  parse_ok();
  cr_assert(cfg.coefs.a == 0 && cfg.coefs.b == 0 && cfg.coefs.c == 2.5e-3);
}

Test(shim_config, sizes) {
  env_set(DPSHIM_ENV_TP, "8");
  env_set(DPSHIM_ENV_PP, "4");
  env_set(DPSHIM_ENV_CP, "2");
  parse_ok();
  cr_assert_eq(cfg.tp, 8);
  cr_assert_eq(cfg.pp, 4);
  cr_assert_eq(cfg.cp, 2);
}

Test(shim_config, sync_ops) {
  env_set(DPSHIM_ENV_SYNC_OPS, "allreduce,MPI_Alltoall");
  parse_ok();
  cr_assert_eq(cfg.sync_ops,
               (unsigned)(DPSHIM__SYNC_ALLREDUCE | DPSHIM__SYNC_ALLTOALL));
  env_set(DPSHIM_ENV_SYNC_OPS, "mpi_barrier");
  parse_ok();
  cr_assert_eq(cfg.sync_ops, (unsigned)DPSHIM__SYNC_BARRIER);
  env_set(DPSHIM_ENV_SYNC_OPS, "reduce_scatter_block");
  parse_ok();
  cr_assert_eq(cfg.sync_ops, (unsigned)DPSHIM__SYNC_REDUCE_SCATTER_BLOCK);
  env_set(DPSHIM_ENV_SYNC_OPS, "MPI_REDUCE_SCATTER,reduce,bcast,Barrier,"
                               "allgather");
  parse_ok();
  cr_assert_eq(cfg.sync_ops,
               (unsigned)(DPSHIM__SYNC_REDUCE_SCATTER | DPSHIM__SYNC_REDUCE |
                          DPSHIM__SYNC_BCAST | DPSHIM__SYNC_BARRIER |
                          DPSHIM__SYNC_ALLGATHER));
}

Test(shim_config, solver_and_fit) {
  static const struct {
    const char *name;
    dpshim_algo_t algo;
  } algos[] = {{"default", DPSHIM_ALGO_DEFAULT},
               {"seed", DPSHIM_ALGO_SEED},
               {"kk", DPSHIM_ALGO_KK},
               {"none", DPSHIM_ALGO_NONE}};
  for (size_t k = 0; k < 4; k++) {
    env_set(DPSHIM_ENV_SOLVER, algos[k].name);
    parse_ok();
    cr_assert_eq(cfg.algo, algos[k].algo, "%s", algos[k].name);
  }
  env_set(DPSHIM_ENV_FIT, "seed");
  parse_ok();
  cr_assert_eq(cfg.fit, DPSHIM_FIT_SEED);
  env_set(DPSHIM_ENV_FIT, "ranks");
  parse_ok();
  cr_assert_eq(cfg.fit, DPSHIM_FIT_RANKS);
  cr_assert_eq(cfg.fit_auto, 0);
  env_set(DPSHIM_ENV_FIT, "Auto");
  parse_ok();
  cr_assert_eq(cfg.fit_auto, 1);
}

Test(shim_config, log_path) {
  env_set(DPSHIM_ENV_LOG, "/tmp/dpshim.log");
  parse_ok();
  cr_assert_str_eq(cfg.log_path, "/tmp/dpshim.log");
}

Test(shim_config, everything_at_once) {
  env_set(DPSHIM_ENV_ENABLE, "1");
  env_set(DPSHIM_ENV_WARMUP, "3-5");
  env_set(DPSHIM_ENV_MAX_LEN_RATIO, "2");
  env_set(DPSHIM_ENV_THRESHOLD, "0.1");
  env_set(DPSHIM_ENV_SOLVER, "kk");
  env_set(DPSHIM_ENV_COEFS, "1e-6,1e-3,0");
  env_set(DPSHIM_ENV_TP, "2");
  env_set(DPSHIM_ENV_SYNC_OPS, "barrier");
  parse_ok();
  cr_assert_eq(cfg.enabled, 1);
  expect_warmup("00111000000000000000", 3, 3, 5);
  cr_assert(cfg.max_len_ratio == 2);
  cr_assert(cfg.threshold == 0.1);
  cr_assert_eq(cfg.algo, DPSHIM_ALGO_KK);
  cr_assert_eq(cfg.have_coefs, 1);
  cr_assert(cfg.coefs.a == 1e-6 && cfg.coefs.b == 1e-3 && cfg.coefs.c == 0);
  cr_assert_eq(cfg.tp, 2);
  cr_assert_eq(cfg.pp, 1);
  cr_assert_eq(cfg.sync_ops, (unsigned)DPSHIM__SYNC_BARRIER);
}

/* ---- bad forms ------------------------------------------------------------- */

Test(shim_config, bad_ratio) {
  expect_bad(DPSHIM_ENV_MAX_LEN_RATIO, "abc");
  expect_bad(DPSHIM_ENV_MAX_LEN_RATIO, "-1");
  expect_bad(DPSHIM_ENV_MAX_LEN_RATIO, "0");
  expect_bad(DPSHIM_ENV_MAX_LEN_RATIO, "1.2x");
  expect_bad(DPSHIM_ENV_MAX_LEN_RATIO, "inf");
  expect_bad(DPSHIM_ENV_MAX_LEN_RATIO, "nan");
}

Test(shim_config, bad_threshold) {
  expect_bad(DPSHIM_ENV_THRESHOLD, "x");
  expect_bad(DPSHIM_ENV_THRESHOLD, "-0.5");
  expect_bad(DPSHIM_ENV_THRESHOLD, "1e999");
}

Test(shim_config, bad_warmup) {
  static const char *const bad[] = {"5-2", "0",   "3",    "a-b",  "2-",
                                    "-3",  "2,,4", "2-4,", "4097", "4096-4097",
                                    "2 - 4", "3,3", "0-5", "none,2"};
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++)
    expect_bad(DPSHIM_ENV_WARMUP, bad[k]);
}

Test(shim_config, bad_coefs) {
  static const char *const bad[] = {"1,2", "1,2,3,4", "-1,0,0", "0,0,0",
                                    "1,,2", "a,b,c", "1,2,nan", ",1,2",
                                    "1,2,3,", "1,2,3,4,5,6", "0,0,0,0,0",
                                    "1,2,3,-4,5", "1,2,3,4,"};
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++)
    expect_bad(DPSHIM_ENV_COEFS, bad[k]);
}

Test(shim_config, bad_sizes) {
  expect_bad(DPSHIM_ENV_TP, "0");
  expect_bad(DPSHIM_ENV_TP, "2x");
  expect_bad(DPSHIM_ENV_TP, "-2");
  expect_bad(DPSHIM_ENV_TP, "99999999999999999999");
  expect_bad(DPSHIM_ENV_PP, "two");
  expect_bad(DPSHIM_ENV_CP, "1.5");
}

Test(shim_config, bad_sync_ops) {
  expect_bad(DPSHIM_ENV_SYNC_OPS, "allreduce,foo");
  expect_bad(DPSHIM_ENV_SYNC_OPS, ",");
  expect_bad(DPSHIM_ENV_SYNC_OPS, "MPI_");
  expect_bad(DPSHIM_ENV_SYNC_OPS, "allreduce,,alltoall");
  expect_bad(DPSHIM_ENV_SYNC_OPS, "MPI_Allreduce_init");
}

Test(shim_config, bad_names) {
  expect_bad(DPSHIM_ENV_SOLVER, "fast");
  expect_bad(DPSHIM_ENV_FIT, "nnls");
  expect_bad(DPSHIM_ENV_STEP, "loss");
  expect_bad(DPSHIM_ENV_STEP, "handoff,sync");
  expect_bad(DPSHIM_ENV_MICRO_BATCHES, "0");
  expect_bad(DPSHIM_ENV_AHEAD, "9");
  expect_bad(DPSHIM_ENV_AHEAD, "-1");
  expect_bad(DPSHIM_ENV_MICRO_BATCHES, "2.5");
  expect_bad(DPSHIM_ENV_ENABLE, "maybe");
  expect_bad(DPSHIM_ENV_VERBOSE, "2");
  expect_bad(DPSHIM_ENV_VERIFY, "yes please");
  expect_bad(DPSHIM_ENV_LOADER_THREAD, "2");
}

Test(shim_config, bad_log_path) {
  char path[4200];
  memset(path, 'a', sizeof path - 1);
  path[sizeof path - 1] = 0;
  env_set(DPSHIM_ENV_LOG, path);
  int rc = dpshim__config_parse(fake_getenv, &cfg, msg, sizeof msg);
  cr_assert_eq(rc, DPSHIM_EINVAL);
  cr_assert(strstr(msg, DPSHIM_ENV_LOG) != NULL, "%s", msg);
}

Test(shim_config, a_bad_value_among_good_ones_is_named) {
  env_set(DPSHIM_ENV_ENABLE, "1");
  env_set(DPSHIM_ENV_TP, "2");
  env_set(DPSHIM_ENV_CP, "0");
  int rc = dpshim__config_parse(fake_getenv, &cfg, msg, sizeof msg);
  cr_assert_eq(rc, DPSHIM_EINVAL);
  cr_assert(strstr(msg, DPSHIM_ENV_CP) != NULL, "%s", msg);
  cr_assert(strstr(msg, DPSHIM_ENV_TP) == NULL, "%s", msg);
}

Test(shim_config, short_message_buffer_is_terminated) {
  env_set(DPSHIM_ENV_SOLVER, "fast");
  char small[8];
  memset(small, 'x', sizeof small);
  int rc = dpshim__config_parse(fake_getenv, &cfg, small, sizeof small);
  cr_assert_eq(rc, DPSHIM_EINVAL);
  cr_assert_lt(strlen(small), sizeof small);
}

/* ---- dpshim__config_is_warmup ---------------------------------------------- */

Test(shim_config, is_warmup_default) {
  parse_ok();
  int first = -1;
  cr_assert_eq(dpshim__config_is_warmup(&cfg, 1, &first), 0);
  cr_assert_eq(first, 0);
  cr_assert_eq(dpshim__config_is_warmup(&cfg, 2, &first), 1);
  cr_assert_eq(first, 1, "step 2 is the cold start");
  for (int64_t s = 3; s <= 11; s++) {
    first = -1;
    cr_assert_eq(dpshim__config_is_warmup(&cfg, s, &first), 1, "step %lld",
                 (long long)s);
    cr_assert_eq(first, 0);
  }
  cr_assert_eq(dpshim__config_is_warmup(&cfg, 12, &first), 0);
  cr_assert_eq(first, 0);
  cr_assert_eq(dpshim__config_is_warmup(&cfg, 2, NULL), 1);
}

Test(shim_config, is_warmup_out_of_range) {
  env_set(DPSHIM_ENV_WARMUP, "1-4096");
  parse_ok();
  int first = -1;
  cr_assert_eq(dpshim__config_is_warmup(&cfg, 1, &first), 1);
  cr_assert_eq(first, 1);
  cr_assert_eq(dpshim__config_is_warmup(&cfg, 4096, &first), 1);
  cr_assert_eq(first, 0);
  static const int64_t out[] = {0, -1, 4097, INT64_MAX, INT64_MIN};
  for (size_t k = 0; k < sizeof out / sizeof *out; k++) {
    first = -1;
    cr_assert_eq(dpshim__config_is_warmup(&cfg, out[k], &first), 0);
    cr_assert_eq(first, 0);
  }
}

Test(shim_config, is_warmup_list) {
  env_set(DPSHIM_ENV_WARMUP, "2,4,6-9");
  parse_ok();
  int first;
  static const int expect[] = {0, 0, 1, 0, 1, 0, 1, 1, 1, 1, 0};
  for (int64_t s = 0; s <= 10; s++) {
    cr_assert_eq(dpshim__config_is_warmup(&cfg, s, &first), expect[s],
                 "step %lld", (long long)s);
    cr_assert_eq(first, s == 2);
  }
}

/* ---- case 9: coefficients whose cost overflows --------------------------- */

Test(shim_config, coefs_must_cost_finite_at_the_longest_sample) {
  static const char *const bad[] = {"1e300,0,0", "1e290,0,0", "0,1e300,0",
                                    "0,1e299,1.7e308", "1e289,1e299,1e308",
                                    "0,0,0,1e290,0", "1e289,0,0,3e289,0"};
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    expect_bad(DPSHIM_ENV_COEFS, bad[k]);
    cr_assert(strstr(msg, "2147483647") != NULL, "%s", msg);
  }
  /* 1e289 * (2^31 - 1)^2 ~ 4.6e307: finite. */
  static const char *const good[] = {"1e289,0,0", "0,0,1e308", "0,1e298,0"};
  for (size_t k = 0; k < sizeof good / sizeof *good; k++) {
    env_set(DPSHIM_ENV_COEFS, good[k]);
    parse_ok();
    cr_assert_eq(cfg.have_coefs, 1, "%s", good[k]);
  }
}

/* ---- case 10: parser hardening ------------------------------------------- */

Test(shim_config, numbers_are_plain_decimals) {
  static const char *const bad[] = {
      " 1.5", "1.5 ", "\n1.5", "1.5\n", "\t1.5", "1.5\t", "0x1p3", "0X10",
      "inf", "-inf", "INFINITY", "nan", "NaN(1)", "+", "-", ".", "e5", "1e",
      "1e+", "1..2", "--1", "1,5", "1.5e3x", ""};
  for (size_t k = 0; k + 1 < sizeof bad / sizeof *bad; k++) {
    expect_bad(DPSHIM_ENV_MAX_LEN_RATIO, bad[k]);
    expect_bad(DPSHIM_ENV_THRESHOLD, bad[k]);
  }
  static const struct {
    const char *text;
    double value;
  } good[] = {{".5", 0.5}, {"5.", 5}, {"1E+2", 100}, {"+0.25", 0.25},
              {"2e-1", 0.2}, {"007", 7}};
  for (size_t k = 0; k < sizeof good / sizeof *good; k++) {
    env_set(DPSHIM_ENV_MAX_LEN_RATIO, good[k].text);
    env_set(DPSHIM_ENV_THRESHOLD, good[k].text);
    parse_ok();
    cr_assert(cfg.max_len_ratio == good[k].value, "%s", good[k].text);
    cr_assert(cfg.threshold == good[k].value, "%s", good[k].text);
  }
}

Test(shim_config, blanks_hex_and_specials_rejected_everywhere) {
  static const char *const coefs[] = {
      " 1,2,3", "1,2,3\n", "\n1,2,3", "1\t2\t3", "1,\t2,3", "1\t,2,3",
      "0x1p3,0,0", "inf,0,0", "1,nan,0", "1, 2, 3", "1,2 ,3"};
  for (size_t k = 0; k < sizeof coefs / sizeof *coefs; k++)
    expect_bad(DPSHIM_ENV_COEFS, coefs[k]);
  static const char *const sizes[] = {" 4", "4 ", "\n4", "4\n", "\t4",
                                      "0x4", "+4", "4e0", "4.0"};
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
    expect_bad(DPSHIM_ENV_TP, sizes[k]);
    expect_bad(DPSHIM_ENV_CP, sizes[k]);
  }
  static const char *const warmup[] = {" 2-11", "2-11\n", "2\t,4", "0x2-11",
                                       "2-\t11", "2,\n4"};
  for (size_t k = 0; k < sizeof warmup / sizeof *warmup; k++)
    expect_bad(DPSHIM_ENV_WARMUP, warmup[k]);
  static const char *const bools[] = {" 1", "1\n", "\ton", "on "};
  for (size_t k = 0; k < sizeof bools / sizeof *bools; k++)
    expect_bad(DPSHIM_ENV_LOADER_THREAD, bools[k]);
}

Test(shim_config, tiny_ratio_is_above_zero) {
  static const char *const tiny[] = {"1e-308", "4.9e-324",
                                     "2.2250738585072014e-308"};
  for (size_t k = 0; k < sizeof tiny / sizeof *tiny; k++) {
    env_set(DPSHIM_ENV_MAX_LEN_RATIO, tiny[k]);
    parse_ok();
    cr_assert(cfg.max_len_ratio > 0, "%s", tiny[k]);
  }
  env_set(DPSHIM_ENV_MAX_LEN_RATIO, "1e-308");
  parse_ok();
  cr_assert(cfg.max_len_ratio == 1e-308);
  /* Underflow to exactly 0 is 0. */
  expect_bad(DPSHIM_ENV_MAX_LEN_RATIO, "1e-400");
  cr_assert(strstr(msg, "expected a number > 0") != NULL, "%s", msg);
  env_clear();
  env_set(DPSHIM_ENV_THRESHOLD, "1e-400");
  parse_ok();
  cr_assert(cfg.threshold == 0 && !signbit(cfg.threshold));
}

Test(shim_config, expected_texts_state_the_limits) {
  expect_bad(DPSHIM_ENV_PP, "1048577");
  cr_assert(strstr(msg, "expected an integer in 1..1048576") != NULL, "%s",
            msg);
  env_set(DPSHIM_ENV_PP, "1048576");
  parse_ok();
  cr_assert_eq(cfg.pp, 1048576);
  static const char *const bools[] = {DPSHIM_ENV_ENABLE, DPSHIM_ENV_VERBOSE,
                                      DPSHIM_ENV_VERIFY,
                                      DPSHIM_ENV_LOADER_THREAD};
  for (size_t k = 0; k < 4; k++) {
    expect_bad(bools[k], "maybe");
    cr_assert(strstr(msg, "expected 0/1, true/false, yes/no, on/off"), "%s",
              msg);
  }
}

Test(shim_config, control_characters_are_escaped) {
  expect_bad(DPSHIM_ENV_MAX_LEN_RATIO, "1.5\n");
  cr_assert(strstr(msg, "='1.5\\n': expected") != NULL, "%s", msg);
  expect_bad(DPSHIM_ENV_COEFS, "1\t2\t3");
  cr_assert(strstr(msg, "='1\\t2\\t3': expected") != NULL, "%s", msg);
  expect_bad(DPSHIM_ENV_SOLVER, "\x1b[31mkk");
  cr_assert(strstr(msg, "='\\x1b[31mkk': expected") != NULL, "%s", msg);
}

/* A 4000-character value (5000 for the log path, which takes 4000) is cut
 * in the message; the whole expected text still fits in 256 bytes. */
Test(shim_config, a_long_value_keeps_the_expected_text) {
  static char value[5001], cut[80];
  memset(cut, 'x', 64);
  memcpy(cut + 64, "...'", 5);
  for (int32_t i = 0; i < dpshim__config_nvars(); i++) {
    const dpshim__config_var_t *v = dpshim__config_var(i);
    size_t n = strcmp(v->name, DPSHIM_ENV_LOG) ? 4000 : 5000;
    memset(value, 'x', n);
    value[n] = 0;
    expect_bad(v->name, value);
    char small[256];
    int rc = dpshim__config_parse(fake_getenv, &cfg, small, sizeof small);
    cr_assert_eq(rc, DPSHIM_EINVAL);
    cr_assert_str_eq(small, msg, "%s: the line needs more than 256 bytes",
                     v->name);
    cr_assert(strstr(small, cut) != NULL, "%s", small);
    /* And a control character near the cut does not push it further. */
    memset(value, '\n', n);
    expect_bad(v->name, value);
    cr_assert_lt(strlen(msg), 256);
  }
}

/* ---- the table ----------------------------------------------------------- */

Test(shim_config, table_is_well_formed) {
  cr_assert_null(dpshim__config_var(-1));
  cr_assert_null(dpshim__config_var(dpshim__config_nvars()));
  for (int32_t i = 0; i < dpshim__config_nvars(); i++) {
    const dpshim__config_var_t *v = dpshim__config_var(i);
    cr_assert(v->name && !strncmp(v->name, "DPSHIM_", 7));
    cr_assert(v->accepted && *v->accepted, "%s", v->name);
    cr_assert(!v->flag || !strncmp(v->flag, "--", 2), "%s", v->name);
    for (int32_t j = 0; j < i; j++)
      cr_assert_str_neq(dpshim__config_var(j)->name, v->name);
  }
}

/* The dump's lines, kept by dump_line(). */
static char dumped[32][16384];
static int ndumped;

static void dump_line(void *ctx, const char *text) {
  cr_assert_eq(ctx, (void *)dumped);
  cr_assert_lt(ndumped, 32);
  cr_assert_lt(strlen(text), sizeof dumped[0] - 1, "line cut");
  snprintf(dumped[ndumped++], sizeof dumped[0], "%s", text);
}

static void dump(const dpshim__config_t *c) {
  ndumped = 0;
  dpshim__config_dump(c, dump_line, dumped);
  cr_assert_eq(ndumped, dpshim__config_nvars());
}

/* Line i's value, without the " (default)" mark; *is_default says it had
 * one. */
static const char *dumped_value(int32_t i, int *is_default) {
  static char value[16384];
  const dpshim__config_var_t *v = dpshim__config_var(i);
  size_t n = strlen(v->name);
  cr_assert(!strncmp(dumped[i], v->name, n) && dumped[i][n] == '=', "%s",
            dumped[i]);
  snprintf(value, sizeof value, "%s", dumped[i] + n + 1);
  const char *def = v->def ? v->def : "", *mark = " (default)";
  size_t len = strlen(value), m = strlen(mark);
  *is_default = len == strlen(def) + m && !strncmp(value, def, len - m) &&
                !strcmp(value + len - m, mark);
  if (*is_default) value[len - m] = 0;
  return value;
}

static void expect_same(const dpshim__config_t *a, const dpshim__config_t *b) {
  cr_assert_eq(a->enabled, b->enabled);
  cr_assert_eq(a->verbose, b->verbose);
  cr_assert_eq(a->verify, b->verify);
  cr_assert_eq(a->loader_thread, b->loader_thread);
  cr_assert(!memcmp(a->warmup, b->warmup, sizeof a->warmup));
  cr_assert_eq(a->nwarmup, b->nwarmup);
  cr_assert_eq(a->warmup_first, b->warmup_first);
  cr_assert_eq(a->warmup_last, b->warmup_last);
  cr_assert(a->max_len_ratio == b->max_len_ratio, "%.17g %.17g",
            a->max_len_ratio, b->max_len_ratio);
  cr_assert(a->threshold == b->threshold);
  cr_assert_eq(a->algo, b->algo);
  cr_assert_eq(a->fit, b->fit);
  cr_assert_eq(a->have_coefs, b->have_coefs);
  cr_assert(a->coefs.a == b->coefs.a && a->coefs.b == b->coefs.b &&
            a->coefs.c == b->coefs.c);
  cr_assert_eq(a->tp, b->tp);
  cr_assert_eq(a->pp, b->pp);
  cr_assert_eq(a->cp, b->cp);
  cr_assert_eq(a->sync_ops, b->sync_ops);
  cr_assert_str_eq(a->log_path, b->log_path);
  cr_assert_eq(dpshim__config_hash(a), dpshim__config_hash(b));
}

/* Parses the dump of `cfg` back and expects the same configuration. */
static void expect_round_trip(void) {
  static dpshim__config_t back;
  dump(&cfg);
  env_clear();
  for (int32_t i = 0; i < ndumped; i++) {
    int is_default;
    const char *value = dumped_value(i, &is_default);
    env_set(dpshim__config_var(i)->name, value);
  }
  memset(&back, 0xa5, sizeof back);
  int rc = dpshim__config_parse(fake_getenv, &back, msg, sizeof msg);
  cr_assert_eq(rc, 0, "%s", msg);
  expect_same(&cfg, &back);
}

Test(shim_config, defaults_dump_as_their_texts) {
  parse_ok();
  dump(&cfg);
  for (int32_t i = 0; i < ndumped; i++) {
    const dpshim__config_var_t *v = dpshim__config_var(i);
    char line[256];
    snprintf(line, sizeof line, "%s=%s (default)", v->name,
             v->def ? v->def : "");
    cr_assert_str_eq(dumped[i], line);
  }
  expect_round_trip();
}

/* Non-default values, at least one per variable, some in odd forms. */
static const struct {
  const char *name, *value;
} samples[] = {
    {DPSHIM_ENV_ENABLE, "on"},
    {DPSHIM_ENV_WARMUP, "12-13,3,5-6,6"},
    {DPSHIM_ENV_WARMUP, "none"},
    {DPSHIM_ENV_WARMUP, "1-4096"},
    {DPSHIM_ENV_MAX_LEN_RATIO, "1e-308"},
    {DPSHIM_ENV_MAX_LEN_RATIO, "none"},
    {DPSHIM_ENV_MAX_LEN_RATIO, "0.1"},
    {DPSHIM_ENV_THRESHOLD, "0.30000000000000004"},
    {DPSHIM_ENV_THRESHOLD, "-0"},
    {DPSHIM_ENV_THRESHOLD, "1e300"},
    {DPSHIM_ENV_VERBOSE, "TRUE"},
    {DPSHIM_ENV_SOLVER, "kk"},
    {DPSHIM_ENV_SOLVER, "none"},
    {DPSHIM_ENV_FIT, "seed"},
    {DPSHIM_ENV_COEFS, "1e-6,0.001,2.5e-3"},
    {DPSHIM_ENV_COEFS, "-0,0,1e308"},
    {DPSHIM_ENV_TP, "8"},
    {DPSHIM_ENV_PP, "4"},
    {DPSHIM_ENV_CP, "1048576"},
    {DPSHIM_ENV_SYNC_OPS, "MPI_Barrier,alltoall,barrier"},
    {DPSHIM_ENV_LOG, "/tmp/a=b, c (default)"},
    {DPSHIM_ENV_VERIFY, "yes"},
    {DPSHIM_ENV_LOADER_THREAD, "1"},
    {DPSHIM_ENV_VIT, "on"},
    {DPSHIM_ENV_VIT_THRESHOLD, "0.35"},
    {DPSHIM_ENV_VIT_COEFS, "2e-9,1e-6,0.01"},
    {DPSHIM_ENV_VIT_MAX_PATCH_RATIO, "none"},
    {DPSHIM_ENV_VIT_MAX_PATCH_RATIO, "1.5"},
    {DPSHIM_ENV_TOPOLOGY, "off"},
    {DPSHIM_ENV_INTER_HOST_COST, "2.5"},
    {DPSHIM_ENV_STEP, "handoff"},
    {DPSHIM_ENV_STEP, "SYNC"},
    {DPSHIM_ENV_MICRO_BATCHES, "16"},
    {DPSHIM_ENV_AHEAD, "3"},
    {DPSHIM_ENV_FIT, "ranks"},
};
#define NSAMPLES (sizeof samples / sizeof *samples)

Test(shim_config, dump_round_trips_every_row) {
  parse_ok();
  uint64_t defaults = dpshim__config_hash(&cfg);
  for (int32_t i = 0; i < dpshim__config_nvars(); i++) {
    const char *name = dpshim__config_var(i)->name;
    int covered = 0;
    for (size_t k = 0; k < NSAMPLES; k++) {
      if (strcmp(samples[k].name, name)) continue;
      covered = 1;
      env_clear();
      env_set(name, samples[k].value);
      parse_ok();
      cr_assert_neq(dpshim__config_hash(&cfg), defaults, "%s='%s'", name,
                    samples[k].value);
      dump(&cfg);
      for (int32_t j = 0; j < ndumped; j++) {
        int is_default;
        dumped_value(j, &is_default);
        cr_assert_eq(is_default, j != i, "%s='%s': line %s", name,
                     samples[k].value, dumped[j]);
      }
      expect_round_trip();
    }
    cr_assert(covered, "no sample for %s", name);
  }
}

Test(shim_config, dump_round_trips_everything_at_once) {
  for (size_t k = 0; k < NSAMPLES; k++)
    env_set(samples[k].name, samples[k].value);
  parse_ok();
  expect_round_trip();
}

/* The longest warm-up texts: every other step, and 2-step ranges. */
Test(shim_config, dump_round_trips_the_longest_warmup) {
  static char list[32768];
  for (int pass = 0; pass < 2; pass++) {
    size_t n = 0;
    for (int s = 1; s + 1 <= DPSHIM__MAX_WARMUP; s += pass ? 3 : 2)
      n += (size_t)snprintf(list + n, sizeof list - n, pass ? "%d,%d," : "%d,",
                            s, s + 1);
    list[n - 1] = 0;
    env_clear();
    env_set(DPSHIM_ENV_WARMUP, list);
    parse_ok();
    expect_round_trip();
  }
}

/* ---- the agreement hash -------------------------------------------------- */

Test(shim_config, hash_ignores_negative_zero_and_padding) {
  static dpshim__config_t a, b;
  env_set(DPSHIM_ENV_THRESHOLD, "-0");
  env_set(DPSHIM_ENV_COEFS, "-0,1,-0.0");
  memset(&a, 0x00, sizeof a);
  cr_assert_eq(dpshim__config_parse(fake_getenv, &a, msg, sizeof msg), 0);
  env_set(DPSHIM_ENV_THRESHOLD, "0");
  env_set(DPSHIM_ENV_COEFS, "0,1,0");
  memset(&b, 0xff, sizeof b);
  cr_assert_eq(dpshim__config_parse(fake_getenv, &b, msg, sizeof msg), 0);
  cr_assert_eq(dpshim__config_hash(&a), dpshim__config_hash(&b));
  /* Set by hand, not parsed: still by value. */
  a.threshold = -0.0;
  a.coefs.a = -0.0;
  cr_assert_eq(dpshim__config_hash(&a), dpshim__config_hash(&b));
  /* Bytes past the log path's end do not count. */
  memset(a.log_path + 1, 'z', sizeof a.log_path - 1);
  a.log_path[0] = 0;
  cr_assert_eq(dpshim__config_hash(&a), dpshim__config_hash(&b));
}

Test(shim_config, hash_differs_for_different_values) {
  static dpshim__config_t a;
  env_set(DPSHIM_ENV_THRESHOLD, "0.1");
  parse_ok();
  a = cfg;
  env_set(DPSHIM_ENV_THRESHOLD, "0.2");
  parse_ok();
  cr_assert_neq(dpshim__config_hash(&a), dpshim__config_hash(&cfg));
  env_set(DPSHIM_ENV_THRESHOLD, "0.1");
  env_set(DPSHIM_ENV_LOG, "/tmp/x");
  parse_ok();
  cr_assert_neq(dpshim__config_hash(&a), dpshim__config_hash(&cfg));
  env_set(DPSHIM_ENV_LOG, "");
  env_set(DPSHIM_ENV_WARMUP, "2-10,12");
  parse_ok();
  cr_assert_neq(dpshim__config_hash(&a), dpshim__config_hash(&cfg));
}

/* The ViT-level balance's settings: read, defaulted, refused alike. */
Test(shim_config, vit_settings) {
  parse_ok();
  cr_assert_eq(cfg.vit, 0);
  cr_assert_eq(cfg.vit_threshold, DPSHIM__THRESHOLD_AUTO);
  cr_assert_eq(cfg.vit_max_patch_ratio, 2);
  cr_assert_eq(cfg.have_vit_coefs, 0);
  env_set(DPSHIM_ENV_VIT, "1");
  env_set(DPSHIM_ENV_VIT_COEFS, "1e-9,2e-6,0.5");
  env_set(DPSHIM_ENV_VIT_MAX_PATCH_RATIO, "none");
  parse_ok();
  cr_assert_eq(cfg.vit, 1);
  cr_assert(cfg.have_vit_coefs);
  cr_assert_eq(cfg.vit_coefs.b, 2e-6);
  cr_assert_eq(cfg.vit_coefs.d, 0);
  cr_assert_eq(cfg.vit_max_patch_ratio, 0);
  env_set(DPSHIM_ENV_VIT_THRESHOLD, "0.1"); /* the ratio, as before auto */
  parse_ok();
  cr_assert_eq(cfg.vit_threshold, 0.1);
  env_set(DPSHIM_ENV_VIT_THRESHOLD, "auto");
  parse_ok();
  cr_assert_eq(cfg.vit_threshold, DPSHIM__THRESHOLD_AUTO);
  static const char *const coefs[] = {"1,2,3,4,5", "1,2", "-1,0,1", "0,0,0",
                                      "1e308,0,0", "a,b,c"};
  for (size_t k = 0; k < sizeof coefs / sizeof *coefs; k++)
    expect_bad(DPSHIM_ENV_VIT_COEFS, coefs[k]);
  expect_bad(DPSHIM_ENV_VIT_MAX_PATCH_RATIO, "0");
  expect_bad(DPSHIM_ENV_VIT_THRESHOLD, "-0.1");
  expect_bad(DPSHIM_ENV_VIT_THRESHOLD, "Auto");
  expect_bad(DPSHIM_ENV_VIT, "2");
}

Test(shim_config, inter_host_cost) {
  parse_ok();
  cr_assert_eq(cfg.inter_host_cost, DPSHIM_INTER_HOST_COST_DEFAULT);
  env_set(DPSHIM_ENV_INTER_HOST_COST, "1000");
  parse_ok();
  cr_assert_eq(cfg.inter_host_cost, 1000);
  static const char *const bad[] = {"0", "0.99", "1001", "inf", "x"};
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++)
    expect_bad(DPSHIM_ENV_INTER_HOST_COST, bad[k]);
}
