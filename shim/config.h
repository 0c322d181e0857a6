/* The shim's configuration, parsed from the environment.
 *
 * One table in config.c describes every variable (name, default, accepted
 * values, the original's flag) and drives parsing, error lines and the dump.
 *
 * dpshim__config_parse() is pure: it reads variables through `get` (getenv
 * in the shim, a table in the tests) and never prints. On a bad value it
 * returns DPSHIM_EINVAL with one line naming the variable, the value (cut
 * to 64 characters, control characters escaped) and what is accepted; the
 * caller turns balancing off on every rank. Pass msglen >= 256 so the
 * expected part always fits.
 */
#ifndef DPSHIM_SHIM_CONFIG_H
#define DPSHIM_SHIM_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "dpshim/fit.h"
#include "dpshim/solver.h"

#define DPSHIM__MAX_WARMUP 4096 /* warm-up steps are numbered 1 .. this */
/* DPSHIM_TRIGGER_THRESHOLD=auto: a plan applies where it saves more time
 * than it costs, not above a ratio. */
#define DPSHIM__THRESHOLD_AUTO (-1.0)

/* The collectives that can mark a step's gradient sync. */
enum {
  DPSHIM__SYNC_ALLREDUCE = 1 << 0,
  DPSHIM__SYNC_ALLTOALL = 1 << 1,
  DPSHIM__SYNC_REDUCE_SCATTER = 1 << 2,
  DPSHIM__SYNC_REDUCE_SCATTER_BLOCK = 1 << 3,
  DPSHIM__SYNC_ALLGATHER = 1 << 4,
  DPSHIM__SYNC_REDUCE = 1 << 5,
  DPSHIM__SYNC_BCAST = 1 << 6,
  DPSHIM__SYNC_BARRIER = 1 << 7
};

/* Where a step ends (DPSHIM_STEP). */
typedef enum dpshim__step_mode {
  DPSHIM__STEP_AUTO = 0, /* at the sync where every rank's is seen, else
                          * after the hand-offs of a step */
  DPSHIM__STEP_SYNC,     /* at the gradient sync (DPSHIM_SYNC_OPS) */
  DPSHIM__STEP_HANDOFF   /* after micro_batches hand-offs, or a mark */
} dpshim__step_mode_t;

typedef struct dpshim__config {
  int enabled;       /* the LLM-level balance */
  int verbose;
  int verify;
  int loader_thread; /* the loader hands off from its own thread */
  /* Batches the shim's own thread balances ahead of the trainer, for
   * adapters whose loader allows it (<dpshim/ahead.h>); 0: inline */
  int32_t ahead;
  int topology;      /* plans prefer moves within a host */
  double inter_host_cost; /* a byte across hosts, in bytes within one */
  /* warmup[s] is 1 when step s (1-based) is a warm-up step; the first one
   * is a cold start whose timing is dropped. */
  uint8_t warmup[DPSHIM__MAX_WARMUP + 1];
  int32_t nwarmup, warmup_first, warmup_last;
  double max_len_ratio; /* 0 = none */
  double threshold; /* DPSHIM__THRESHOLD_AUTO: priced in seconds */
  dpshim_algo_t algo;
  dpshim_fit_method_t fit;
  int fit_auto;         /* DPSHIM_FIT=auto: the fit chosen per run */
  dpshim__step_mode_t step;
  int32_t micro_batches; /* hand-offs a step, in hand-off steps */
  int have_coefs;       /* DPSHIM_COEFS given: no warm-up */
  dpshim_cost_model_t coefs;
  int32_t tp, pp, cp;
  unsigned sync_ops;    /* DPSHIM__SYNC_* bits */
  char log_path[4096];  /* "" = no log */
  /* The ViT-level balance: encoder calls (<dpshim/encoder.h>). */
  int vit;
  /* DPSHIM__THRESHOLD_AUTO: a micro-batch's encoder calls meet only where
   * the hand-off finds that pays; where they meet, the ViT plan is taken
   * above DPSHIM__POLICY_VIT_MET_RATIO. */
  double vit_threshold;
  double vit_max_patch_ratio; /* 0 = none */
  int have_vit_coefs;         /* DPSHIM_VIT_COEFS given: no ViT fit */
  dpshim_cost_model_t vit_coefs;
} dpshim__config_t;

typedef char *(*dpshim__getenv_fn)(const char *name); /* as getenv */

int dpshim__config_parse(dpshim__getenv_fn get, dpshim__config_t *cfg,
                         char *msg, size_t msglen);

/* How a command line gives a variable's value (dpshim-run): a switch is on
 * when named (`--flag`, or `--flag=VALUE`); a value follows its flag; a
 * list is one or more values (the original's warm-up steps: `2 3 4`), joined
 * with commas. */
typedef enum dpshim__var_form {
  DPSHIM__FORM_VALUE,
  DPSHIM__FORM_SWITCH,
  DPSHIM__FORM_LIST
} dpshim__var_form_t;

/* One variable of the table, read-only (dpshim(7) and dpshim-run are
 * written from it). */
typedef struct dpshim__config_var {
  const char *name;     /* the environment variable, from env.h */
  const char *def;      /* its default as text; NULL: unset */
  const char *accepted; /* the "expected ..." part of its error line */
  const char *flag;     /* the original's command-line flag; NULL: none */
  dpshim__var_form_t form;
} dpshim__config_var_t;

int32_t dpshim__config_nvars(void);
/* The i-th variable, 0 <= i < nvars; NULL outside. */
const dpshim__config_var_t *dpshim__config_var(int32_t i);

/* Calls `line` once per variable, in table order, with the effective value
 * formatted back from `c`: "NAME=value", plus " (default)" when it is the
 * default ("NAME= (default)" for one unset by default). Parsing the values
 * back gives `c` again. */
void dpshim__config_dump(const dpshim__config_t *c,
                         void (*line)(void *ctx, const char *text), void *ctx);

/* A hash of every field (not the struct's bytes: padding, -0.0 and bytes
 * past the log path's end do not count), for ranks to check that they
 * agree. */
uint64_t dpshim__config_hash(const dpshim__config_t *c);

/* The ViT plan's imbalance ratio where the calls meet: the configured one,
 * or under `auto` DPSHIM__POLICY_VIT_MET_RATIO. */
double dpshim__config_vit_ratio(const dpshim__config_t *c);

/* Whether `step` is a warm-up step; *first says it is the cold start. */
int dpshim__config_is_warmup(const dpshim__config_t *cfg, int64_t step,
                             int *first);

#endif
