/* dpshim__config_parse() through a fake environment: the defaults, the good
 * forms of every variable, and the bad ones, each rejected with
 * DPSHIM_EINVAL and a message naming the variable, the value and what is
 * expected. dpshim__config_is_warmup(). */
#include <criterion/criterion.h>
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

/* `name`=`value` alone is rejected, naming both and what is expected. */
static void expect_bad(const char *name, const char *value) {
  env_clear();
  env_set(name, value);
  int rc = dpshim__config_parse(fake_getenv, &cfg, msg, sizeof msg);
  cr_assert_eq(rc, DPSHIM_EINVAL, "%s='%s' accepted (rc %d)", name, value, rc);
  cr_assert(strstr(msg, name) != NULL, "message \"%s\" does not name %s", msg,
            name);
  char quoted[8300];
  snprintf(quoted, sizeof quoted, "'%s'", value);
  cr_assert(strstr(msg, quoted) != NULL, "message \"%s\" does not quote %s",
            msg, quoted);
  cr_assert(strstr(msg, "expected") != NULL, "message \"%s\" says nothing "
            "expected", msg);
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
  expect_warmup("01111111111000000000", 10, 2, 11);
  cr_assert_float_eq(cfg.max_len_ratio, 1.2, 1e-15);
  cr_assert_float_eq(cfg.threshold, 0.2, 1e-15);
  cr_assert_eq(cfg.algo, DPSHIM_ALGO_DEFAULT);
  cr_assert_eq(cfg.fit, DPSHIM_FIT_RANKS);
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
      DPSHIM_ENV_CP, DPSHIM_ENV_SYNC_OPS, DPSHIM_ENV_LOG, DPSHIM_ENV_VERIFY};
  for (size_t k = 0; k < sizeof names / sizeof *names; k++) {
    int found = 0;
    for (int a = 0; a < nasked; a++) found |= !strcmp(asked[a], names[k]);
    cr_assert(found, "%s was never read", names[k]);
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
    parse_ok();
    cr_assert_eq(cfg.enabled, 1, "%s", yes[k]);
    cr_assert_eq(cfg.verbose, 1);
    cr_assert_eq(cfg.verify, 1);
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
                                    "1,2,3,"};
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
  expect_bad(DPSHIM_ENV_ENABLE, "maybe");
  expect_bad(DPSHIM_ENV_VERBOSE, "2");
  expect_bad(DPSHIM_ENV_VERIFY, "yes please");
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
