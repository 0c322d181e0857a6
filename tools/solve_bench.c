/* dpshim-solve-bench: plan quality and solve time of each algorithm over a
 * grid of synthetic packed batches (profile x ranks x seed).
 *
 * Every algorithm solves the same instance, so their lines compare like for
 * like; one JSON object per (profile, ranks, algorithm), aggregated over the
 * seeds, then a default-vs-seed summary when both ran. Output is a pure
 * function of the options, except the solve times. */
#include <errno.h>
#include <float.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "dpshim/solver.h"
#include "lengthgen.h"
#include "lengthmix.h"
#include "timeutil.h"

#define PROG "dpshim-solve-bench"
#define MAX_LIST 64
#define MAX_RANKS 65536
#define FILE_PACK_DEFAULT 32768
/* Tokens, labels and loss weights travel with a sample, 4 bytes each. */
#define BYTES_PER_TOKEN 12
/* With --image-rows: a patch row of 14 x 14 RGB pixels in bf16. */
#define BYTES_PER_ROW (14 * 14 * 3 * 2)
#define ROWS_MEDIAN 1024.0
#define ROWS_SIGMA 1.2
#define ROWS_MAX 65536
#define SKIP_REASONS (DPSHIM_SKIP_CAPACITY + 1)
#define MIXES_DEFAULT 50
#define MIXES_MAX 100000
#define DUMP_FORMAT "dpshim-instance-1"

/* One item of --profile: a named profile, or mixes first..first+count-1 of
 * the length-mix family ("mix", "mix:K", "mixN"). */
typedef struct profile_spec {
  const lengthgen_profile_t *profile; /* NULL: mixes */
  int32_t mix_first, mix_count;
} profile_spec_t;

typedef struct options {
  profile_spec_t profile[MAX_LIST];
  int nprofiles, profile_given;
  uint64_t mix_seed;
  int describe_mixes;
  const char *dump_dir; /* NULL: no dump */
  int algos_given;
  int64_t max_samples; /* per pack; 0: no limit */
  int32_t ranks[MAX_LIST];
  int nranks;
  dpshim_algo_t algo[MAX_LIST];
  int nalgos;
  long seeds, reps;
  const char *lengths; /* NULL: the profiles' distributions */
  int64_t pack;        /* 0: each profile's own pack size */
  dpshim_cost_model_t model;
  double cap_ratio; /* 0: no cap */
  double threshold;
  int per_instance; /* also one line per (instance, algorithm) */
  double image_share;    /* share of samples with image rows; 0: none */
  double rows_cap_ratio; /* per-rank rows cap / mean rows; 0: no cap */
  int32_t ranks_per_host; /* hosts of this many ranks; 0: one host */
  int topology;           /* the solver is told the hosts */
  double inter_host_cost; /* 0: the solver's default */
} options_t;

/* The rows fields are printed only when asked for, so that the output
 * without them stays as it was. */
static int rows_wanted(const options_t *o) {
  return o->image_share > 0 || o->rows_cap_ratio > 0;
}

/* ---- option parsing ------------------------------------------------------ */

static _Noreturn void bad_value(const char *opt, const char *value,
                                const char *accepted) {
  fprintf(stderr, PROG ": --%s: bad value '%s': expected %s\n", opt, value,
          accepted);
  exit(2);
}

/* A count in 1..1000000 for --seeds and --reps. */
static long parse_count(const char *opt, const char *arg) {
  int64_t v;
  if (cli_int(arg, 1, 1000000, &v) < 0)
    bad_value(opt, arg, "an integer in 1..1000000");
  return (long)v;
}

/* "mix" (the first 50 mixes), "mix:K" (the first K) or "mixN" (mix N
 * alone, to re-run one); 0 when the item is none of them. */
static int parse_mix_item(const char *item, profile_spec_t *spec) {
  int64_t v;
  if (strncmp(item, "mix", 3) != 0) return 0;
  const char *rest = item + 3;
  if (*rest == '\0') {
    *spec = (profile_spec_t){NULL, 1, MIXES_DEFAULT};
    return 1;
  }
  if (*rest == ':' && cli_int(rest + 1, 1, MIXES_MAX, &v) == 0) {
    *spec = (profile_spec_t){NULL, 1, (int32_t)v};
    return 1;
  }
  if (*rest >= '0' && *rest <= '9' && cli_int(rest, 1, MIXES_MAX, &v) == 0) {
    *spec = (profile_spec_t){NULL, (int32_t)v, 1};
    return 1;
  }
  return 0;
}

static void parse_profiles(const char *arg, options_t *o) {
  char item[64], err[192], accepted[256];
  snprintf(accepted, sizeof accepted, "a list of up to 64 of: ");
  lengthgen_profile_names(accepted + strlen(accepted),
                          sizeof accepted - strlen(accepted));
  strncat(accepted, ", mix, mix:K (K in 1..100000), mixN (mix N alone)",
          sizeof accepted - strlen(accepted) - 1);
  o->nprofiles = 0;
  for (const char *c = arg; cli_next_item(&c, item, sizeof item);) {
    if (o->nprofiles == MAX_LIST) bad_value("profile", item, accepted);
    profile_spec_t *spec = &o->profile[o->nprofiles++];
    if (parse_mix_item(item, spec)) continue;
    *spec = (profile_spec_t){.profile = lengthgen_profile_find(item, err,
                                                               sizeof err)};
    if (!spec->profile) bad_value("profile", item, accepted);
  }
}

static void parse_ranks(const char *arg, options_t *o) {
  char item[64];
  o->nranks = 0;
  for (const char *c = arg; cli_next_item(&c, item, sizeof item);) {
    int64_t v;
    if (o->nranks == MAX_LIST || cli_int(item, 1, MAX_RANKS, &v) < 0)
      bad_value("ranks", item, "a list of up to 64 integers in 1..65536");
    o->ranks[o->nranks++] = (int32_t)v;
  }
}

static void parse_algos(const char *arg, options_t *o) {
  char item[64];
  o->nalgos = 0;
  for (const char *c = arg; cli_next_item(&c, item, sizeof item);) {
    if (o->nalgos == MAX_LIST ||
        dpshim_algo_from_name(item, &o->algo[o->nalgos++]) < 0)
      bad_value("algos", item, "a list of default, seed, kk, none, kk-cap");
  }
}

static void parse_cost(const char *arg, options_t *o) {
  char item[64];
  double v[3];
  int n = 0;
  for (const char *c = arg; cli_next_item(&c, item, sizeof item); n++)
    if (n == 3 || cli_double(item, 0, DBL_MAX, &v[n]) < 0) n = 4;
  if (n != 3) bad_value("cost", arg, "a,b,c: three finite numbers >= 0");
  o->model = (dpshim_cost_model_t){v[0], v[1], v[2], 0, 0};
}

/* --cap-ratio and --rows-cap-ratio: 'none' or a ratio, 0 = none. */
static double parse_ratio(const char *opt, const char *arg) {
  double v = 0;
  if (strcmp(arg, "none") != 0 && cli_double(arg, 0, DBL_MAX, &v) < 0)
    bad_value(opt, arg, "'none' or a finite number >= 0 (0 = none)");
  return v;
}

/* In two parts: C11 compilers need not take a longer string. */
static void usage(FILE *f) {
  fputs(
"usage: " PROG " [options]\n"
"Solves synthetic packed batches with each plan algorithm and prints one JSON\n"
"line per (profile, ranks, algorithm), aggregated over seeds; then, when both\n"
"seed and default ran, a default_vs_seed summary line.\n"
"makespan_over_lb: the largest rank load over the lower bound (median and max\n"
"over seeds); makespan_over_lb_cap: the same over the bound for plans within\n"
"the token cap, which is higher when the cap binds (kk ignores the cap and can\n"
"go below it). moved_bytes_fraction: bytes that change rank / all bytes.\n"
"\n"
"  --profile NAME[,NAME...]  length profiles (sft, long, fewlong), or random\n"
"                            length mixes: mix (mixes 1..50), mix:K (1..K),\n"
"                            mixN (mix N alone, printed as profile \"mixN\")\n"
"                            [default: sft,long,fewlong]\n"
"  --mix-seed S              the seed the mixes are drawn from [default: 1]\n"
"  --describe-mixes          print the --profile mixes, one JSON line each\n"
"                            (pack; components: kind, weight, parameters),\n"
"                            and exit\n"
"  --ranks N[,N...]          rank counts, 1..65536 [default: 8,32,128,1024,4096]\n"
"  --algos LIST              default, seed, kk, none, kk-cap\n"
"                            [default: none,seed,kk,default]\n"
"  --seeds K                 instances per cell, seeds 1..K [default: 5]\n"
"  --reps R                  timed solves per instance; the median counts\n"
"                            [default: 5]\n"
"  --lengths FILE            draw lengths from FILE (one per line, '#' comments)\n"
"                            instead of a profile; reported as profile \"file\"\n"
"  --pack TOKENS             pack size: tokens per rank before balancing;\n"
"                            longer lengths are clamped to it; a mix is\n"
"                            rescaled to it (its lengths x TOKENS / its pack)\n"
"                            [default: the profile's or mix's; 32768 with\n"
"                            --lengths]\n"
"  --max-samples N           the loader closes a pack once it holds N samples\n"
"                            (small instances for exact solvers)\n"
"                            [default: 0: no limit]\n"
"  --cost a,b,c              cost(len) = a*len^2 + b*len + c [default: 1,8000,0]\n"
"  --cap-ratio X | none      per-rank token cap = X * mean tokens [default: 1.2]\n"
"  --threshold X             skip when imbalance is below X [default: 0: always\n"
"                            balance, as the bench measures plans, not triggers]\n",
        f);
  fputs(
"  --image-rows SHARE        give that share of samples image rows, as a VLM\n"
"                            packing loader does: log-normal (median 1024,\n"
"                            sigma 1.2), at most the sample's length; each row\n"
"                            moves 1176 bytes [default: 0: none]\n"
"  --rows-cap-ratio X | none per-rank rows cap = X * mean rows per rank; adds\n"
"                            rows_cap_violations and skips by reason to each\n"
"                            line; a sample whose image would overflow its\n"
"                            pack's cap comes without, as the loader defers it\n"
"                            [default: none]\n"
"  --ranks-per-host K        hosts of K consecutive ranks: the solver is told\n"
"                            them, and each line adds\n"
"                            inter_host_bytes_fraction [default: 0: one host]\n"
"  --no-topology             with --ranks-per-host, count the bytes across\n"
"                            hosts but do not tell the solver the hosts\n"
"  --inter-host-cost X       a byte across hosts priced at X bytes within one,\n"
"                            1..1000; each line adds priced_bytes_fraction\n"
"                            (priced bytes moved / all bytes priced across)\n"
"                            [default: the solver's, 10]\n"
"  --per-instance            also print one line per instance and algorithm\n"
"                            (\"instance\":seed; no aggregation)\n"
"  --dump-instances DIR      write each instance to DIR/<profile>-P<ranks>-\n"
"                            s<seed>.json (format dpshim-instance-1, see\n"
"                            tools/README.md); solves only when --algos is\n"
"                            given, and then adds each algorithm's plan;\n"
"                            DIR is created\n"
"  --help                    this text\n",
        f);
}

static void set_defaults(options_t *o) {
  *o = (options_t){.seeds = 5, .reps = 5, .model = {1, 8000, 0},
                   .cap_ratio = 1.2, .mix_seed = 1, .topology = 1};
  parse_profiles("sft,long,fewlong", o);
  parse_ranks("8,32,128,1024,4096", o);
  parse_algos("none,seed,kk,default", o);
}

static void apply_option(int c, const char *arg, options_t *o) {
  int64_t v;
  switch (c) {
  case 'P': parse_profiles(arg, o); o->profile_given = 1; break;
  case 'r': parse_ranks(arg, o); break;
  case 'a': parse_algos(arg, o); o->algos_given = 1; break;
  case 's': o->seeds = parse_count("seeds", arg); break;
  case 'R': o->reps = parse_count("reps", arg); break;
  case 'l': o->lengths = arg; break;
  case 'k':
    if (cli_int(arg, 1, INT64_C(1) << 30, &v) < 0)
      bad_value("pack", arg, "an integer in 1..1073741824");
    o->pack = v;
    break;
  case 'H':
    if (cli_int(arg, 1, INT64_C(1) << 20, &v) < 0)
      bad_value("ranks-per-host", arg, "an integer in 1..1048576");
    o->ranks_per_host = (int32_t)v;
    break;
  case 'T': o->topology = 0; break;
  case 'X':
    if (cli_double(arg, 1, DPSHIM_INTER_HOST_COST_MAX, &o->inter_host_cost) < 0)
      bad_value("inter-host-cost", arg, "a number in 1..1000");
    break;
  case 'n':
    if (cli_int(arg, 0, INT64_C(1) << 30, &v) < 0)
      bad_value("max-samples", arg, "an integer in 0..1073741824 (0 = no limit)");
    o->max_samples = v;
    break;
  case 'm':
    if (cli_int(arg, 0, INT64_MAX, &v) < 0)
      bad_value("mix-seed", arg, "an integer >= 0");
    o->mix_seed = (uint64_t)v;
    break;
  case 'd':
    if (!*arg) bad_value("dump-instances", arg, "a directory");
    o->dump_dir = arg;
    break;
  case 'c': parse_cost(arg, o); break;
  case 'C': o->cap_ratio = parse_ratio("cap-ratio", arg); break;
  case 'i':
    if (cli_double(arg, 0, 1, &o->image_share) < 0)
      bad_value("image-rows", arg, "a share in 0..1");
    break;
  case 'x': o->rows_cap_ratio = parse_ratio("rows-cap-ratio", arg); break;
  case 't':
    if (cli_double(arg, 0, DBL_MAX, &o->threshold) < 0)
      bad_value("threshold", arg, "a finite number >= 0");
    break;
  }
}

static void parse_options(int argc, char **argv, options_t *o) {
  static const struct option longopts[] = {
      {"profile", required_argument, NULL, 'P'},
      {"ranks", required_argument, NULL, 'r'},
      {"algos", required_argument, NULL, 'a'},
      {"seeds", required_argument, NULL, 's'},
      {"reps", required_argument, NULL, 'R'},
      {"lengths", required_argument, NULL, 'l'},
      {"pack", required_argument, NULL, 'k'},
      {"cost", required_argument, NULL, 'c'},
      {"cap-ratio", required_argument, NULL, 'C'},
      {"threshold", required_argument, NULL, 't'},
      {"image-rows", required_argument, NULL, 'i'},
      {"rows-cap-ratio", required_argument, NULL, 'x'},
      {"per-instance", no_argument, NULL, 'I'},
      {"mix-seed", required_argument, NULL, 'm'},
      {"describe-mixes", no_argument, NULL, 'D'},
      {"max-samples", required_argument, NULL, 'n'},
      {"ranks-per-host", required_argument, NULL, 'H'},
      {"no-topology", no_argument, NULL, 'T'},
      {"inter-host-cost", required_argument, NULL, 'X'},
      {"dump-instances", required_argument, NULL, 'd'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  set_defaults(o);
  int c;
  while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
    if (c == 'h') {
      usage(stdout);
      exit(0);
    }
    if (c == '?') {
      fprintf(stderr, "Try '" PROG " --help'.\n");
      exit(2);
    }
    if (c == 'I') o->per_instance = 1;
    else if (c == 'D') o->describe_mixes = 1;
    else apply_option(c, optarg, o);
  }
  if (optind < argc) {
    fprintf(stderr, PROG ": unexpected argument '%s': options only\n",
            argv[optind]);
    exit(2);
  }
  if (o->lengths && o->profile_given)
    bad_value("lengths", o->lengths, "a file, without --profile");
  /* The dump format has no rows caps: refuse rather than write instances
   * the checker would solve without them. */
  if (o->dump_dir && o->rows_cap_ratio > 0)
    bad_value("dump-instances", o->dump_dir,
              "no --rows-cap-ratio (the format has no rows caps)");
  /* Dumping alone must be cheap: solve only when asked to. */
  if (o->dump_dir && !o->algos_given) o->nalgos = 0;
}

/* ---- one instance -------------------------------------------------------- */

/* Where lengths come from, and the name printed for it. */
typedef struct workload {
  char name[32];
  lengthgen_source_t src;
} workload_t;

/* Per-instance buffers, reused from instance to instance. */
typedef struct instance {
  int32_t ranks;
  int64_t n;
  dpshim_sample_t *samples;
  int64_t *tokens;   /* [ranks] */
  int64_t *count;    /* [ranks] */
  int64_t *rows_cap; /* [ranks], NULL without --rows-cap-ratio */
  double *rep_us;  /* [reps] */
  lengthgen_batch_t batch;
} instance_t;

/* What one algorithm did to one instance. */
typedef struct outcome {
  double makespan, over_lb, over_lb_cap, imb_before, imb_after, solve_us;
  int64_t bytes_moved, bytes_total, cap_viol, cap_viol_orig, empty;
  int64_t rows_viol, rows_viol_orig;
  int64_t bytes_inter_host, bytes_priced; /* with --ranks-per-host */
  int applied;
  dpshim_skip_reason_t reason;
} outcome_t;

static void *grow(void *p, size_t bytes) {
  void *q = realloc(p, bytes ? bytes : 1);
  if (!q) {
    fprintf(stderr, PROG ": out of memory\n");
    exit(1);
  }
  return q;
}

/* A loader packs within its image buffer too: a sample whose image would
 * overflow its pack's buffer comes without (the loader would defer it). */
static void fit_rows_in_caps(instance_t *in) {
  int64_t *held = in->tokens; /* scratch */
  memset(held, 0, (size_t)in->ranks * sizeof *held);
  for (int64_t i = 0; i < in->n; i++) {
    dpshim_sample_t *s = &in->samples[i];
    if (held[s->origin] + s->rows > in->rows_cap[s->origin]) {
      s->bytes -= BYTES_PER_ROW * s->rows;
      s->rows = 0;
    }
    held[s->origin] += s->rows;
  }
}

/* Image rows for a share of the samples, from a stream of their own so
 * that the lengths stay those of the instance without them; and the cap. */
static void add_rows(const options_t *o, long seed, instance_t *in) {
  lengthgen_rng_t rng;
  lengthgen_seed(&rng, ~((uint64_t)seed << 32 | (uint32_t)in->ranks));
  int64_t total = 0;
  for (int64_t i = 0; o->image_share > 0 && i < in->n; i++) {
    dpshim_sample_t *s = &in->samples[i];
    if (lengthgen_uniform(&rng) >= o->image_share) continue;
    int64_t rows = lengthgen_lognormal(&rng, ROWS_MEDIAN, ROWS_SIGMA, ROWS_MAX);
    s->rows = rows < s->len ? rows : s->len; /* the image is in the tokens */
    s->bytes += BYTES_PER_ROW * s->rows;
    total += s->rows;
  }
  if (o->rows_cap_ratio <= 0) return;
  in->rows_cap = grow(in->rows_cap, (size_t)in->ranks * sizeof *in->rows_cap);
  for (int32_t r = 0; r < in->ranks; r++)
    in->rows_cap[r] = (int64_t)floor(o->rows_cap_ratio * (double)total / in->ranks);
  fit_rows_in_caps(in);
}

/* The stream seed mixes the rank count in, so a small grid's instance is not
 * the prefix of a larger one; profiles share it (common random numbers). */
static void make_instance(const options_t *o, const workload_t *w,
                          int32_t ranks, long seed, instance_t *in) {
  lengthgen_rng_t rng;
  lengthgen_seed(&rng, (uint64_t)seed << 32 | (uint32_t)ranks);
  if (lengthgen_pack(&w->src, ranks, &rng, &in->batch) < 0) {
    fprintf(stderr, PROG ": out of memory packing %s at %d ranks\n", w->name,
            ranks);
    exit(1);
  }
  in->ranks = ranks;
  in->n = in->batch.n;
  in->samples = grow(in->samples, (size_t)in->n * sizeof *in->samples);
  in->tokens = grow(in->tokens, (size_t)ranks * sizeof *in->tokens);
  in->count = grow(in->count, (size_t)ranks * sizeof *in->count);
  for (int64_t i = 0; i < in->n; i++) {
    int64_t len = in->batch.len[i];
    in->samples[i] = (dpshim_sample_t){
        .len = len, .bytes = BYTES_PER_TOKEN * len,
        .origin = in->batch.origin[i]};
  }
  add_rows(o, seed, in);
}

/* Ranks over their cap when sample i sits on where[i] (origins when NULL):
 * the token cap `cap`, or with `caps` each rank's rows cap. */
static int64_t ranks_over_cap(instance_t *in, const int32_t *where,
                              int64_t cap, const int64_t *caps) {
  memset(in->tokens, 0, (size_t)in->ranks * sizeof *in->tokens);
  for (int64_t i = 0; i < in->n; i++)
    in->tokens[where ? where[i] : in->samples[i].origin] +=
        caps ? in->samples[i].rows : in->samples[i].len;
  int64_t over = 0;
  for (int32_t r = 0; r < in->ranks; r++) over += in->tokens[r] > (caps ? caps[r] : cap);
  return over;
}

static int64_t empty_ranks(instance_t *in, const int32_t *dest) {
  memset(in->count, 0, (size_t)in->ranks * sizeof *in->count);
  for (int64_t i = 0; i < in->n; i++) in->count[dest[i]]++;
  int64_t empty = 0;
  for (int32_t r = 0; r < in->ranks; r++) empty += in->count[r] == 0;
  return empty;
}

static void describe(instance_t *in, const dpshim_plan_t *plan,
                     outcome_t *out) {
  double max = plan->load_after[0];
  for (int32_t r = 1; r < in->ranks; r++)
    if (plan->load_after[r] > max) max = plan->load_after[r];
  out->makespan = max;
  out->over_lb = max / plan->lower_bound;
  out->over_lb_cap = max / plan->lower_bound_cap;
  out->imb_before = plan->imbalance_before;
  out->imb_after = plan->imbalance_after;
  out->bytes_moved = plan->bytes_moved;
  out->bytes_total = plan->bytes_total;
  out->applied = plan->decision == DPSHIM_DECISION_APPLY;
  out->reason = plan->reason;
  out->empty = empty_ranks(in, plan->dest);
  /* Unlike the token cap, a rows cap the batch already broke is one the
   * plan must meet: the buffer is what it is. */
  out->rows_viol_orig = in->rows_cap ? ranks_over_cap(in, NULL, 0, in->rows_cap) : 0;
  out->rows_viol = in->rows_cap ? ranks_over_cap(in, plan->dest, 0, in->rows_cap) : 0;
  out->cap_viol = out->cap_viol_orig = 0;
  if (plan->cap_tokens < 0) return;
  out->cap_viol_orig = ranks_over_cap(in, NULL, plan->cap_tokens, NULL);
  /* A plan cannot be blamed for a cap the batch already broke. */
  if (out->cap_viol_orig == 0)
    out->cap_viol = ranks_over_cap(in, plan->dest, plan->cap_tokens, NULL);
}

static void solve(const options_t *o, instance_t *in, dpshim_algo_t algo,
                  dpshim_plan_t *plan, outcome_t *out) {
  int32_t *host = NULL;
  if (o->ranks_per_host > 0) {
    host = grow(NULL, sizeof *host * (size_t)in->ranks);
    for (int32_t r = 0; r < in->ranks; r++) host[r] = r / o->ranks_per_host;
  }
  dpshim_plan_input_t pin = {.ranks = in->ranks, .nsamples = in->n,
                             .samples = in->samples, .model = o->model,
                             .cap_ratio = o->cap_ratio,
                             .threshold = o->threshold, .algo = algo,
                             .rows_cap = in->rows_cap,
                             .rows_cap_len = in->rows_cap ? in->ranks : 0,
                             .host = host,
                             .host_len = host ? in->ranks : 0,
                             .ignore_hosts = !o->topology,
                             .inter_host_cost = o->inter_host_cost};
  for (long k = 0; k < o->reps; k++) {
    double t0 = dpshim__tool_now_s();
    int rc = dpshim_plan_solve(&pin, plan);
    in->rep_us[k] = 1e6 * (dpshim__tool_now_s() - t0);
    if (rc < 0) {
      fprintf(stderr, PROG ": %s at %d ranks: %s (%s)\n",
              dpshim_algo_name(algo), in->ranks, plan->message,
              dpshim_strerror(rc));
      exit(1);
    }
  }
  out->solve_us = dpshim__tool_median(in->rep_us, (size_t)o->reps);
  describe(in, plan, out);
  out->bytes_inter_host = plan->bytes_inter_host;
  out->bytes_priced = plan->bytes_priced;
  free(host);
}

/* ---- --dump-instances ---------------------------------------------------- */

/* The token cap as dpshim_plan_solve() computes it, the same expression in
 * the same order, so the dump holds the solver's own cap; -1 for none. */
static int64_t token_cap(const options_t *o, const instance_t *in) {
  if (o->cap_ratio <= 0) return -1;
  int64_t tokens = 0;
  for (int64_t i = 0; i < in->n; i++) tokens += in->samples[i].len;
  return (int64_t)floor(o->cap_ratio * (double)tokens / in->ranks);
}

static double plan_max_load(const dpshim_plan_t *plan, int32_t ranks) {
  double max = plan->load_after[0];
  for (int32_t r = 1; r < ranks; r++)
    if (plan->load_after[r] > max) max = plan->load_after[r];
  return max;
}

static _Noreturn void dump_failed(const char *what, const char *path) {
  fprintf(stderr, PROG ": --dump-instances: cannot %s '%s': %s\n", what, path,
          strerror(errno));
  exit(1);
}

static void dump_dir_create(const char *dir) {
  if (mkdir(dir, 0777) < 0 && errno != EEXIST) dump_failed("create", dir);
}

/* %.17g: every double reads back as itself. */
static void dump_header(FILE *f, const options_t *o, const char *profile,
                        const instance_t *in, long seed, int64_t cap) {
  const dpshim_cost_model_t *m = &o->model;
  fprintf(f, "{\"format\": \"" DUMP_FORMAT "\", \"profile\": \"%s\", "
          "\"ranks\": %d, \"seed\": %ld,\n", profile, in->ranks, seed);
  if (cap < 0) fprintf(f, " \"cap_ratio\": null, \"cap_tokens\": null,\n");
  else fprintf(f, " \"cap_ratio\": %.17g, \"cap_tokens\": %lld,\n",
               o->cap_ratio, (long long)cap);
  fprintf(f, " \"model\": {\"a\": %.17g, \"b\": %.17g, \"c\": %.17g, "
          "\"d\": %.17g, \"e\": %.17g},\n \"threshold\": %.17g,\n",
          m->a, m->b, m->c, m->d, m->e, o->threshold);
}

static void dump_samples(FILE *f, const instance_t *in) {
  fprintf(f, " \"samples\": [");
  for (int64_t i = 0; i < in->n; i++) {
    const dpshim_sample_t *s = &in->samples[i];
    fprintf(f, "%s\n  [%lld, %lld, %d]", i ? "," : "", (long long)s->len,
            (long long)s->bytes, s->origin);
  }
  fprintf(f, "]");
}

/* Each algorithm's plan, when the bench solved the instance. A drift
 * between the dumped cap and the solver's would make the checker solve
 * another problem: stop rather than write it. */
static void dump_plans(FILE *f, const options_t *o, const instance_t *in,
                       const dpshim_plan_t *plan, int64_t cap) {
  if (o->nalgos == 0) return;
  /* The solver's bounds, the same for every algorithm. */
  fprintf(f, ",\n \"solver_bounds\": {\"lower_bound\": %.17g, "
          "\"lower_bound_cap\": %.17g}", plan[0].lower_bound,
          plan[0].lower_bound_cap);
  fprintf(f, ",\n \"plans\": {");
  for (int a = 0; a < o->nalgos; a++) {
    if (plan[a].cap_tokens != cap) {
      fprintf(stderr, PROG ": --dump-instances: token cap %lld, the solver's "
              "%lld: expected the same\n", (long long)cap,
              (long long)plan[a].cap_tokens);
      exit(1);
    }
    fprintf(f, "%s\n  \"%s\": {\"max_load\": %.17g, \"bytes_moved\": %lld, "
            "\"applied\": %s,\n   \"dest\": [", a ? "," : "",
            dpshim_algo_name(o->algo[a]), plan_max_load(&plan[a], in->ranks),
            (long long)plan[a].bytes_moved,
            plan[a].decision == DPSHIM_DECISION_APPLY ? "true" : "false");
    for (int64_t i = 0; i < in->n; i++)
      fprintf(f, "%s%d", i ? "," : "", plan[a].dest[i]);
    fprintf(f, "]}");
  }
  fprintf(f, "}");
}

/* DIR/<profile>-P<ranks>-s<seed>.json, format dpshim-instance-1. */
static void dump_instance(const options_t *o, const char *profile,
                          const instance_t *in, long seed,
                          const dpshim_plan_t *plan) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s-P%d-s%ld.json", o->dump_dir, profile,
           in->ranks, seed);
  FILE *f = fopen(path, "w");
  if (!f) dump_failed("write", path);
  int64_t cap = token_cap(o, in);
  dump_header(f, o, profile, in, seed, cap);
  dump_samples(f, in);
  dump_plans(f, o, in, plan, cap);
  fprintf(f, "}\n");
  if (ferror(f) | fclose(f)) dump_failed("write", path);
}

/* ---- one cell: (workload, ranks) over all seeds -------------------------- */

typedef struct cell {
  double *over_lb, *over_lb_cap, *solve_us; /* [seeds] */
  double imb_before, imb_after;
  int64_t bytes_moved, bytes_total, cap_viol, cap_viol_orig, empty, applied;
  int64_t rows_viol, rows_viol_orig, skips[SKIP_REASONS];
  int64_t bytes_inter_host, bytes_priced;
} cell_t;

static void cell_add(cell_t *c, long seed_index, const outcome_t *r) {
  c->over_lb[seed_index] = r->over_lb;
  c->over_lb_cap[seed_index] = r->over_lb_cap;
  c->solve_us[seed_index] = r->solve_us;
  c->imb_before += r->imb_before;
  c->imb_after += r->imb_after;
  c->bytes_moved += r->bytes_moved;
  c->bytes_total += r->bytes_total;
  c->bytes_inter_host += r->bytes_inter_host;
  c->bytes_priced += r->bytes_priced;
  c->cap_viol += r->cap_viol;
  c->cap_viol_orig += r->cap_viol_orig;
  c->empty += r->empty;
  c->applied += r->applied;
  c->rows_viol += r->rows_viol;
  c->rows_viol_orig += r->rows_viol_orig;
  c->skips[r->reason]++;
}

/* With rows: the rows cap's violations and the skips by reason. */
static void print_rows_fields(const options_t *o, int64_t viol, int64_t orig,
                              const int64_t *skips) {
  if (!rows_wanted(o)) return;
  printf(",\"rows_cap_violations\":%lld,\"rows_cap_violations_original\":%lld,"
         "\"skips\":{", (long long)viol, (long long)orig);
  for (int k = 1; k < SKIP_REASONS; k++)
    printf("%s\"%s\":%lld", k > 1 ? "," : "",
           dpshim_skip_reason_name((dpshim_skip_reason_t)k), (long long)skips[k]);
  printf("}");
}

/* JSON has no inf or nan: a zero lower bound (all-zero cost) prints null. */
static void put_num(const char *key, double v, const char *fmt) {
  printf(",\"%s\":", key);
  if (isfinite(v)) printf(fmt, v);
  else printf("null");
}

static void print_instance(const options_t *o, const char *profile,
                           int32_t ranks, long seed, int64_t samples,
                           dpshim_algo_t algo, const outcome_t *r) {
  printf("{\"profile\":\"%s\",\"ranks\":%d,\"instance\":%ld,\"samples\":%lld,"
         "\"algo\":\"%s\"", profile, ranks, seed, (long long)samples,
         dpshim_algo_name(algo));
  put_num("makespan_over_lb", r->over_lb, "%.9g");
  put_num("makespan_over_lb_cap", r->over_lb_cap, "%.9g");
  put_num("moved_bytes_fraction",
          r->bytes_total ? (double)r->bytes_moved / (double)r->bytes_total : 0,
          "%.6g");
  printf(",\"cap_violations\":%lld,\"applied\":%d", (long long)r->cap_viol,
         r->applied);
  int64_t skips[SKIP_REASONS] = {0};
  skips[r->reason] = 1;
  print_rows_fields(o, r->rows_viol, r->rows_viol_orig, skips);
  put_num("solve_us", r->solve_us, "%.1f");
  printf("}\n");
}

static void print_cell(const options_t *o, const char *profile, int32_t ranks,
                       long seeds, int64_t samples, dpshim_algo_t algo,
                       cell_t *c) {
  size_t n = (size_t)seeds;
  printf("{\"profile\":\"%s\",\"ranks\":%d,\"seeds\":%ld,\"samples\":%lld,"
         "\"algo\":\"%s\"", profile, ranks, seeds,
         (long long)((samples + seeds / 2) / seeds), dpshim_algo_name(algo));
  put_num("makespan_over_lb", dpshim__tool_median(c->over_lb, n),
          "%.9g");
  put_num("makespan_over_lb_max", c->over_lb[n - 1], "%.9g");
  put_num("makespan_over_lb_cap", dpshim__tool_median(c->over_lb_cap, n),
          "%.9g");
  put_num("makespan_over_lb_cap_max", c->over_lb_cap[n - 1], "%.9g");
  put_num("imbalance_before", c->imb_before / seeds, "%.6g");
  put_num("imbalance_after", c->imb_after / seeds, "%.6g");
  put_num("moved_bytes_fraction",
          c->bytes_total ? (double)c->bytes_moved / (double)c->bytes_total : 0,
          "%.6g");
  if (o->ranks_per_host > 0) {
    double cost = o->inter_host_cost > 0 ? o->inter_host_cost
                                         : DPSHIM_INTER_HOST_COST_DEFAULT;
    double total = (double)c->bytes_total;
    put_num("inter_host_bytes_fraction",
            total > 0 ? (double)c->bytes_inter_host / total : 0, "%.6g");
    put_num("priced_bytes_fraction",
            total > 0 ? (double)c->bytes_priced / (cost * total) : 0, "%.6g");
  }
  printf(",\"cap_violations\":%lld,\"cap_violations_original\":%lld,"
         "\"empty_ranks\":%lld,\"applied\":%lld",
         (long long)c->cap_viol, (long long)c->cap_viol_orig,
         (long long)c->empty, (long long)c->applied);
  print_rows_fields(o, c->rows_viol, c->rows_viol_orig, c->skips);
  put_num("solve_us", dpshim__tool_median(c->solve_us, n), "%.1f");
  printf("}\n");
}

/* ---- default vs seed over the whole grid --------------------------------- */

typedef struct summary {
  int seed_at, default_at; /* indices into options.algo, -1 if not run */
  int64_t n;
  double *over_lb, *over_lb_cap; /* [instances] default's makespan / bound */
  int64_t default_moved, seed_moved, worse;
  /* The same over the instances seed applied (it skips when one sample
   * costs more than the mean load, moving nothing). */
  int64_t seed_applied, default_moved_applied, seed_moved_applied;
  double max_ratio; /* -1 until some instance had seed move bytes */
} summary_t;

static int algo_index(const options_t *o, dpshim_algo_t algo) {
  for (int a = 0; a < o->nalgos; a++)
    if (o->algo[a] == algo) return a;
  return -1;
}

static void summary_add(summary_t *s, const outcome_t *r) {
  if (s->seed_at < 0 || s->default_at < 0) return;
  const outcome_t *d = &r[s->default_at], *e = &r[s->seed_at];
  s->over_lb_cap[s->n] = d->over_lb_cap;
  s->over_lb[s->n++] = d->over_lb;
  s->default_moved += d->bytes_moved;
  s->seed_moved += e->bytes_moved;
  if (e->applied) {
    s->seed_applied++;
    s->default_moved_applied += d->bytes_moved;
    s->seed_moved_applied += e->bytes_moved;
  }
  if (e->bytes_moved > 0)
    s->max_ratio = fmax(s->max_ratio,
                        (double)d->bytes_moved / (double)e->bytes_moved);
  s->worse += d->makespan > e->makespan * (1 + 1e-12);
}

static void print_summary(summary_t *s) {
  if (s->seed_at < 0 || s->default_at < 0 || s->n == 0) return;
  double med = dpshim__tool_median(s->over_lb, (size_t)s->n);
  printf("{\"summary\":\"default_vs_seed\",\"instances\":%lld",
         (long long)s->n);
  put_num("moved_bytes_ratio_total",
          s->seed_moved ? (double)s->default_moved / (double)s->seed_moved
                        : NAN, "%.6g");
  put_num("moved_bytes_ratio_max", s->max_ratio >= 0 ? s->max_ratio : NAN,
          "%.6g");
  printf(",\"seed_applied\":%lld", (long long)s->seed_applied);
  put_num("moved_bytes_ratio_seed_applied",
          s->seed_moved_applied ? (double)s->default_moved_applied /
                                      (double)s->seed_moved_applied
                                : NAN, "%.6g");
  printf(",\"default_makespan_worse\":%lld", (long long)s->worse);
  put_num("default_over_lb_max", s->over_lb[s->n - 1], "%.9g");
  put_num("default_over_lb_median", med, "%.9g");
  med = dpshim__tool_median(s->over_lb_cap, (size_t)s->n);
  put_num("default_over_lb_cap_max", s->over_lb_cap[s->n - 1], "%.9g");
  put_num("default_over_lb_cap_median", med, "%.9g");
  printf("}\n");
}

/* ---- the grid ------------------------------------------------------------ */

typedef struct bench {
  const options_t *o;
  instance_t in;
  dpshim_plan_t plan[MAX_LIST]; /* one per algorithm, reused as the shim does */
  cell_t cell[MAX_LIST];
  outcome_t result[MAX_LIST];
  summary_t summary;
  int64_t dumped; /* instance files written */
} bench_t;

static void run_cell(bench_t *b, const workload_t *w, int32_t ranks) {
  const options_t *o = b->o;
  int64_t samples = 0;
  for (int a = 0; a < o->nalgos; a++) {
    cell_t *c = &b->cell[a];
    *c = (cell_t){.over_lb = c->over_lb, .over_lb_cap = c->over_lb_cap,
                  .solve_us = c->solve_us};
  }
  for (long s = 0; s < o->seeds; s++) {
    make_instance(o, w, ranks, s + 1, &b->in);
    samples += b->in.n;
    for (int a = 0; a < o->nalgos; a++) {
      solve(o, &b->in, o->algo[a], &b->plan[a], &b->result[a]);
      cell_add(&b->cell[a], s, &b->result[a]);
      if (o->per_instance)
        print_instance(o, w->name, ranks, s + 1, b->in.n, o->algo[a],
                       &b->result[a]);
    }
    summary_add(&b->summary, b->result);
    if (o->dump_dir) dump_instance(o, w->name, &b->in, s + 1, b->plan);
  }
  for (int a = 0; a < o->nalgos; a++)
    print_cell(o, w->name, ranks, o->seeds, samples, o->algo[a], &b->cell[a]);
  b->dumped += o->dump_dir ? o->seeds : 0;
  fflush(stdout);
}

static void bench_init(bench_t *b, const options_t *o, int64_t instances) {
  *b = (bench_t){.o = o};
  b->in.rep_us = grow(NULL, (size_t)o->reps * sizeof(double));
  for (int a = 0; a < o->nalgos; a++) {
    dpshim_plan_init(&b->plan[a]);
    b->cell[a].over_lb = grow(NULL, (size_t)o->seeds * sizeof(double));
    b->cell[a].over_lb_cap = grow(NULL, (size_t)o->seeds * sizeof(double));
    b->cell[a].solve_us = grow(NULL, (size_t)o->seeds * sizeof(double));
  }
  b->summary = (summary_t){.seed_at = algo_index(o, DPSHIM_ALGO_SEED),
                           .default_at = algo_index(o, DPSHIM_ALGO_DEFAULT),
                           .max_ratio = -1};
  b->summary.over_lb = grow(NULL, (size_t)instances * sizeof(double));
  b->summary.over_lb_cap = grow(NULL, (size_t)instances * sizeof(double));
}

static void bench_free(bench_t *b) {
  for (int a = 0; a < b->o->nalgos; a++) {
    dpshim_plan_free(&b->plan[a]);
    free(b->cell[a].over_lb);
    free(b->cell[a].over_lb_cap);
    free(b->cell[a].solve_us);
  }
  free(b->summary.over_lb);
  free(b->summary.over_lb_cap);
  free(b->in.samples);
  free(b->in.tokens);
  free(b->in.count);
  free(b->in.rows_cap);
  free(b->in.rep_us);
  lengthgen_batch_free(&b->in.batch);
}

/* The workloads the options name, and the mixes their sources draw from
 * (which must outlive them). */
typedef struct workloads {
  workload_t *w;
  int64_t n;
  lengthmix_t *mix;
  int64_t nmix;
} workloads_t;

static int64_t mixes_named(const options_t *o) {
  int64_t n = 0;
  for (int p = 0; p < o->nprofiles; p++)
    if (!o->profile[p].profile) n += o->profile[p].mix_count;
  return n;
}

static void add_mixes(const options_t *o, const profile_spec_t *spec,
                      workloads_t *ws) {
  for (int32_t k = 0; k < spec->mix_count; k++) {
    lengthmix_t *mix = &ws->mix[ws->nmix++];
    lengthmix_make(o->mix_seed, spec->mix_first + k, mix);
    if (o->pack) lengthmix_rescale(mix, o->pack);
    workload_t *w = &ws->w[ws->n++];
    snprintf(w->name, sizeof w->name, "mix%d", mix->index);
    w->src = lengthmix_source(mix);
  }
}

static void workloads_make(const options_t *o, const lengthgen_file_t *file,
                           workloads_t *ws) {
  int64_t nmix = mixes_named(o);
  *ws = (workloads_t){.w = grow(NULL, (size_t)(o->nprofiles + nmix) *
                                          sizeof *ws->w),
                      .mix = grow(NULL, (size_t)nmix * sizeof *ws->mix)};
  if (o->lengths) {
    int64_t pack = o->pack ? o->pack : FILE_PACK_DEFAULT;
    ws->w[ws->n++] = (workload_t){"file", lengthgen_source_file(file, pack)};
  }
  for (int p = 0; !o->lengths && p < o->nprofiles; p++) {
    const profile_spec_t *spec = &o->profile[p];
    if (!spec->profile) {
      add_mixes(o, spec, ws);
      continue;
    }
    workload_t *w = &ws->w[ws->n++];
    snprintf(w->name, sizeof w->name, "%s", spec->profile->name);
    w->src = lengthgen_source_profile(spec->profile);
  }
  for (int64_t k = 0; k < ws->n; k++) {
    if (o->pack) ws->w[k].src.pack = o->pack;
    ws->w[k].src.max_per_pack = o->max_samples;
  }
}

static void workloads_free(workloads_t *ws) {
  free(ws->w);
  free(ws->mix);
  *ws = (workloads_t){0};
}

/* --describe-mixes: one JSON line per mix the options name. */
static void describe_mixes(const workloads_t *ws) {
  char line[1024];
  for (int64_t k = 0; k < ws->nmix; k++) {
    char name[32];
    snprintf(name, sizeof name, "mix%d", ws->mix[k].index);
    lengthmix_describe(&ws->mix[k], name, line, sizeof line);
    printf("%s\n", line);
  }
}

int main(int argc, char **argv) {
  options_t o;
  parse_options(argc, argv, &o);
  lengthgen_file_t file = {0};
  char err[256];
  if (o.lengths && lengthgen_file_load(o.lengths, &file, err, sizeof err) < 0) {
    fprintf(stderr, PROG ": --lengths: %s\n", err);
    return 2;
  }
  workloads_t ws;
  workloads_make(&o, &file, &ws);
  if (o.describe_mixes) {
    describe_mixes(&ws);
    workloads_free(&ws);
    lengthgen_file_free(&file);
    return 0;
  }
  if (o.dump_dir) dump_dir_create(o.dump_dir);
  bench_t b;
  bench_init(&b, &o, ws.n * o.nranks * o.seeds);
  for (int64_t p = 0; p < ws.n; p++)
    for (int r = 0; r < o.nranks; r++) run_cell(&b, &ws.w[p], o.ranks[r]);
  print_summary(&b.summary);
  if (o.dump_dir)
    printf("{\"dump_instances\":\"%s\",\"files\":%lld}\n", o.dump_dir,
           (long long)b.dumped);
  bench_free(&b);
  workloads_free(&ws);
  lengthgen_file_free(&file);
  return 0;
}
