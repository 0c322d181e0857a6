/* reftrain's command line: getopt_long, every value range-checked. */
#include "options.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../cli.h"
#include "../lengthgen.h"

enum {
  OPT_STEPS = 256, OPT_MODE, OPT_PROFILE, OPT_LENGTHS, OPT_SEED, OPT_MICRO,
  OPT_TP, OPT_CP, OPT_PP, OPT_TIME_SCALE, OPT_GRAD_BYTES, OPT_HEADROOM,
  OPT_PACK_TOKENS, OPT_CPU_DIM, OPT_CHECK, OPT_VERBOSE, OPT_LOADER_THREAD, OPT_IDS_OUT,
  OPT_STATS_OUT, OPT_PREFETCH, OPT_SYNC, OPT_BUCKETS, OPT_STRAY, OPT_MODEL,
  OPT_CHATTER, OPT_LOSS_ALLREDUCE, OPT_PRINT_COEFS, OPT_HELP
};

/* Values of the enum-valued options, in enum order. */
static const char *const sync_names[] = {"allreduce", "iallreduce-wait",
                                         "iallreduce-waitall",
                                         "iallreduce-test", "shm"};
static const char *const stray_names[] = {"none", "self", "half"};

static const struct option longopts[] = {
    {"steps", required_argument, NULL, OPT_STEPS},
    {"mode", required_argument, NULL, OPT_MODE},
    {"profile", required_argument, NULL, OPT_PROFILE},
    {"model", required_argument, NULL, OPT_MODEL},
    {"lengths", required_argument, NULL, OPT_LENGTHS},
    {"seed", required_argument, NULL, OPT_SEED},
    {"micro-batches", required_argument, NULL, OPT_MICRO},
    {"tp", required_argument, NULL, OPT_TP},
    {"cp", required_argument, NULL, OPT_CP},
    {"pp", required_argument, NULL, OPT_PP},
    {"time-scale", required_argument, NULL, OPT_TIME_SCALE},
    {"grad-bytes", required_argument, NULL, OPT_GRAD_BYTES},
    {"headroom", required_argument, NULL, OPT_HEADROOM},
    {"pack-tokens", required_argument, NULL, OPT_PACK_TOKENS},
    {"cpu-dim", required_argument, NULL, OPT_CPU_DIM},
    {"check", no_argument, NULL, OPT_CHECK},
    {"verbose", no_argument, NULL, OPT_VERBOSE},
    {"loader-thread", no_argument, NULL, OPT_LOADER_THREAD},
    {"ids-out", required_argument, NULL, OPT_IDS_OUT},
    {"stats-out", required_argument, NULL, OPT_STATS_OUT},
    {"prefetch", required_argument, NULL, OPT_PREFETCH},
    {"sync", required_argument, NULL, OPT_SYNC},
    {"buckets", required_argument, NULL, OPT_BUCKETS},
    {"stray-collective", required_argument, NULL, OPT_STRAY},
    {"chatter", required_argument, NULL, OPT_CHATTER},
    {"loss-allreduce", no_argument, NULL, OPT_LOSS_ALLREDUCE},
    {"print-coefs", no_argument, NULL, OPT_PRINT_COEFS},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0}};

void rt_usage(FILE *f) {
  fputs(
      "usage: mpirun -np N reftrain [options]\n"
      "A reference data-parallel trainer: per step, M hand-offs from\n"
      "libpackload (packload_next) each followed by compute, then the\n"
      "sum of a gradient buffer over the ranks (--sync; by default one\n"
      "MPI_Allreduce). Prints one JSON line on rank 0.\n"
      "\n"
      "  --steps N           steps to run (default 10)\n"
      "  --mode emulate|cpu  emulate: sleep for a modelled H100 time;\n"
      "                      cpu: real causal attention on the CPU\n"
      "                      (default emulate)\n"
      "  --profile NAME      sft, long or fewlong (default sft)\n"
      "  --model NAME        emulate: the model preset (default tiny; see\n"
      "                      ../emu/emu.c): tiny, internvl2-8b, qwen2-vl-7b,\n"
      "                      qwen2.5-vl-7b, qwen3-vl-8b\n"
      "  --lengths FILE      sample lengths, one per line (overrides the\n"
      "                      profile's distribution, keeps its pack size)\n"
      "  --pack-tokens N     tokens per pack (default: the profile's)\n"
      "  --seed S            run seed (default 1)\n"
      "  --micro-batches M   hand-offs per step (default 1)\n"
      "  --tp N --cp N --pp N  model-parallel sizes (default 1); Megatron\n"
      "                      order: tp fastest, then cp, dp, pp\n"
      "  --time-scale X      emulate: multiplies modelled time (default 0.75)\n"
      "  --grad-bytes N      gradient all-reduce size (default 1048576)\n"
      "  --headroom H        loader capacity / pack size (default 2)\n"
      "  --cpu-dim D         cpu: attention head dimension (default 16)\n"
      "  --check             verify every sample against its id, exactly-\n"
      "                      once delivery and model-parallel peer agreement\n"
      "  --ids-out FILE      'step rank id...' per step and DP slot\n"
      "  --stats-out FILE    one JSON line per step: per-rank times\n"
      "  --loader-thread     call packload_next() from a loader thread\n"
      "                      (the trainer waits for each batch)\n"
      "  --prefetch N        with --loader-thread: the loader runs up to N\n"
      "                      batches ahead of the trainer (a bounded queue,\n"
      "                      as a prefetching DataLoader); 0-3 (default 0:\n"
      "                      one batch per request)\n"
      "\n",
      f);
  /* In parts: C11 compilers need not take a literal over 4095 chars. */
  fputs(
      "MPI traffic in the steps:\n"
      "  --sync MODE         gradient sync: allreduce (one blocking\n"
      "                      MPI_Allreduce, default); iallreduce-wait,\n"
      "                      iallreduce-waitall, iallreduce-test: one\n"
      "                      MPI_Iallreduce per bucket, then MPI_Wait on\n"
      "                      each, one MPI_Waitall, or MPI_Testall polling;\n"
      "                      shm: no MPI call at all, the ranks sum through\n"
      "                      POSIX shared memory and a process-shared\n"
      "                      barrier, in rank order (as a sync over NCCL or\n"
      "                      Gloo, which a balancer seeing MPI does not\n"
      "                      see); every rank on one host\n"
      "  --buckets K         gradient buckets of the iallreduce modes,\n"
      "                      1-4096 (default 4)\n"
      "  --stray-collective self|half|none\n"
      "                      after each hand-off, before compute, an\n"
      "                      MPI_Allreduce of one int that is not the sync:\n"
      "                      on MPI_COMM_SELF, or on a communicator of the\n"
      "                      first half of the ranks, ceil(world/2) (the\n"
      "                      others skip it) (default none)\n"
      "  --chatter MS        a coordinator thread (as Horovod's) that does an\n"
      "                      MPI_Allreduce of two ints on its own duplicate\n"
      "                      of MPI_COMM_WORLD every MS milliseconds,\n"
      "                      1-60000, from set-up to the end of the steps;\n"
      "                      asks MPI_Init_thread for MPI_THREAD_MULTIPLE\n"
      "  --loss-allreduce    after each step's gradient sync, an\n"
      "                      MPI_Allreduce of one double (the step's loss,\n"
      "                      for metrics) on MPI_COMM_WORLD\n"
      "\n",
      f);
  fputs(
      "  --verbose           per-step lines on stderr\n"
      "  --print-coefs       print the emulated time per sample as\n"
      "                      DPSHIM_COEFS takes it, a,b,c for\n"
      "                      a*len^2 + b*len + c microseconds (for --model,\n"
      "                      --time-scale and --tp, --cp, --pp; near, not\n"
      "                      exact: the emulated attention works in tiles),\n"
      "                      and exit without starting MPI\n"
      "  --help              this text\n"
      "\n"
      "The JSON line holds steps, tokens, tgs, step_ms_mean,\n"
      "consumed_digest (order-independent hash of every sample consumed),\n"
      "thread_level (MPI_Query_thread after init; with --chatter the\n"
      "trainer asks MPI_Init_thread for MPI_THREAD_MULTIPLE, with\n"
      "--loader-thread for MPI_THREAD_FUNNELED, else calls MPI_Init) and,\n"
      "with --check, check_errors.\n",
      f);
}

static int bad(char *err, size_t errlen, const char *opt, const char *want,
               const char *got) {
  snprintf(err, errlen, "--%s expects %s, got '%s'", opt, want, got);
  return -1;
}

/* Index of arg in names[n], or -1. */
static int pick(const char *arg, const char *const names[], int n) {
  for (int i = 0; i < n; i++)
    if (strcmp(arg, names[i]) == 0) return i;
  return -1;
}

/* "'a', 'b' or 'c'" for an error message. */
static const char *one_of(const char *const names[], int n, char *buf,
                          size_t len) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < n && used < len; i++)
    used += (size_t)snprintf(buf + used, len - used, "%s'%s'",
                             i == 0 ? "" : i + 1 == n ? " or " : ", ",
                             names[i]);
  return buf;
}

static int parse_u64(const char *s, uint64_t *out) {
  char *end;
  errno = 0;
  if (*s == '-') return -1; /* strtoull would wrap it */
  unsigned long long v = strtoull(s, &end, 0);
  if (errno || end == s || *end) return -1;
  *out = v;
  return 0;
}

/* --sync or --stray-collective: a name from its table. */
static int apply_name(int code, const char *arg, rt_opts_t *o, char *err,
                      size_t errlen) {
  bool sync = code == OPT_SYNC;
  const char *const *names = sync ? sync_names : stray_names;
  int n = sync ? (int)(sizeof sync_names / sizeof *sync_names)
               : (int)(sizeof stray_names / sizeof *stray_names);
  int i = pick(arg, names, n);
  if (i < 0) {
    char want[128];
    return bad(err, errlen, sync ? "sync" : "stray-collective",
               one_of(names, n, want, sizeof want), arg);
  }
  if (sync) o->sync = (rt_sync_t)i;
  else o->stray = (rt_stray_t)i;
  return 0;
}

/* One option's value into *o; -1 with err on a bad value. */
static int apply(int code, const char *arg, rt_opts_t *o, char *err,
                 size_t errlen) {
  const char *name = NULL;
  for (const struct option *p = longopts; p->name; p++)
    if (p->val == code) name = p->name;
  int64_t v = 0;
  switch (code) {
  case OPT_STEPS:
    if (cli_int(arg, 1, INT32_MAX, &v))
      return bad(err, errlen, name, "an integer in [1, 2^31)", arg);
    o->steps = v;
    return 0;
  case OPT_MODE:
    if (strcmp(arg, "emulate") == 0) o->mode = RT_EMULATE;
    else if (strcmp(arg, "cpu") == 0) o->mode = RT_CPU;
    else return bad(err, errlen, name, "'emulate' or 'cpu'", arg);
    return 0;
  case OPT_PROFILE: {
    char names[128], ignored[160];
    if (!lengthgen_profile_find(arg, ignored, sizeof ignored)) {
      lengthgen_profile_names(names, sizeof names);
      snprintf(err, errlen, "--%s expects one of %s, got '%s'", name, names,
               arg);
      return -1;
    }
    o->profile = arg;
    return 0;
  }
  case OPT_MODEL:
    return emu_model_find(arg, &o->model, err, errlen) < 0 ? -1 : 0;
  case OPT_LENGTHS: o->lengths = arg; return 0;
  case OPT_IDS_OUT: o->ids_out = arg; return 0;
  case OPT_STATS_OUT: o->stats_out = arg; return 0;
  case OPT_SEED:
    if (parse_u64(arg, &o->seed))
      return bad(err, errlen, name, "an unsigned 64-bit integer", arg);
    return 0;
  case OPT_MICRO: case OPT_TP: case OPT_CP: case OPT_PP:
    if (cli_int(arg, 1, 1 << 20, &v))
      return bad(err, errlen, name, "an integer in [1, 2^20]", arg);
    *(code == OPT_MICRO ? &o->micro : code == OPT_TP ? &o->tp
      : code == OPT_CP ? &o->cp : &o->pp) = (int32_t)v;
    return 0;
  case OPT_TIME_SCALE:
    if (cli_double(arg, 0.0, 1e6, &o->time_scale))
      return bad(err, errlen, name, "a number in [0, 1e6]", arg);
    return 0;
  case OPT_GRAD_BYTES:
    if (cli_int(arg, 0, INT64_C(1) << 32, &o->grad_bytes))
      return bad(err, errlen, name, "a byte count in [0, 2^32]", arg);
    return 0;
  case OPT_HEADROOM:
    if (cli_double(arg, 1.0, 64.0, &o->headroom))
      return bad(err, errlen, name, "a number in [1, 64]", arg);
    return 0;
  case OPT_PACK_TOKENS:
    if (cli_int(arg, 1, INT64_C(1) << 30, &o->pack_tokens))
      return bad(err, errlen, name, "an integer in [1, 2^30]", arg);
    return 0;
  case OPT_CPU_DIM:
    if (cli_int(arg, 1, 1024, &v))
      return bad(err, errlen, name, "an integer in [1, 1024]", arg);
    o->cpu_dim = (int32_t)v;
    return 0;
  case OPT_PREFETCH:
    if (cli_int(arg, 0, 3, &v))
      return bad(err, errlen, name, "an integer in [0, 3]", arg);
    o->prefetch = (int32_t)v;
    return 0;
  case OPT_BUCKETS:
    if (cli_int(arg, 1, 4096, &v))
      return bad(err, errlen, name, "an integer in [1, 4096]", arg);
    o->buckets = (int32_t)v;
    return 0;
  case OPT_CHATTER:
    if (cli_int(arg, 1, 60000, &v))
      return bad(err, errlen, name, "milliseconds in [1, 60000]", arg);
    o->chatter_ms = (int32_t)v;
    return 0;
  case OPT_LOSS_ALLREDUCE: o->loss_allreduce = true; return 0;
  case OPT_PRINT_COEFS: o->print_coefs = true; return 0;
  case OPT_SYNC: case OPT_STRAY:
    return apply_name(code, arg, o, err, errlen);
  case OPT_CHECK: o->check = true; return 0;
  case OPT_VERBOSE: o->verbose = true; return 0;
  case OPT_LOADER_THREAD: o->loader_thread = true; return 0;
  }
  return 0;
}

static void defaults(rt_opts_t *o) {
  *o = (rt_opts_t){.steps = 10, .mode = RT_EMULATE, .profile = "sft",
                   .seed = 1, .micro = 1, .tp = 1, .cp = 1, .pp = 1,
                   .time_scale = 0.75, .grad_bytes = 1 << 20, .headroom = 2.0,
                   .cpu_dim = 16, .sync = RT_SYNC_ALLREDUCE, .buckets = 4,
                   .stray = RT_STRAY_NONE, .model = emu_model_default()};
}

int rt_parse(int argc, char **argv, rt_opts_t *o, char *err, size_t errlen) {
  defaults(o);
  opterr = 0; /* getopt's own messages would print once per rank */
  optind = 1;
  int code;
  while ((code = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
    if (code == OPT_HELP) return 1;
    if (code == '?') {
      snprintf(err, errlen, "unknown option '%s' (see --help)",
               argv[optind - 1]);
      return -1;
    }
    if (code == ':') {
      snprintf(err, errlen, "%s expects a value", argv[optind - 1]);
      return -1;
    }
    if (apply(code, optarg, o, err, errlen) < 0) return -1;
  }
  if (optind < argc) {
    snprintf(err, errlen, "unexpected argument '%s' (see --help)",
             argv[optind]);
    return -1;
  }
  if (o->prefetch > 0 && !o->loader_thread) {
    snprintf(err, errlen, "--prefetch needs --loader-thread");
    return -1;
  }
  /* The loader indexes its buffers with int32 offsets. */
  if ((double)o->pack_tokens * o->headroom >= 2147483648.0) {
    snprintf(err, errlen, "--pack-tokens * --headroom must be below 2^31");
    return -1;
  }
  return 0;
}
