/* dpshim-sim's command line: getopt_long, every value range-checked; a bad
 * value ends the program with one line naming the option and what it takes. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../cli.h"
#include "../lengthgen.h"
#include "sim.h"

enum {
  OPT_RANKS = 256, OPT_ALGOS, OPT_PROFILE, OPT_LENGTHS, OPT_SEED, OPT_STEPS,
  OPT_WARMUP, OPT_TIME_SCALE, OPT_GRAD_BYTES, OPT_TP, OPT_MICRO, OPT_LATENCY,
  OPT_BANDWIDTH, OPT_MEMCPY, OPT_SERIAL, OPT_CORES, OPT_ALLREDUCE,
  OPT_CAP_RATIO, OPT_THRESHOLD, OPT_SOLVE_REPS, OPT_PNG, OPT_JSON,
  OPT_CALIBRATE, OPT_MODEL, OPT_LAYOUT, OPT_PACK_TOKENS, OPT_MIX, OPT_TEXT_COST,
  OPT_VIT_BALANCE, OPT_VIT_CAP_RATIO, OPT_VIT_THRESHOLD, OPT_SLOW_MEETING, OPT_VIT_SHIP, OPT_VIT_ASYNC, OPT_RANKS_PER_HOST,
  OPT_INTER_LATENCY, OPT_INTER_GBS, OPT_NO_TOPOLOGY, OPT_INTER_HOST_COST,
  OPT_AHEAD, OPT_HELP
};

static const struct option longopts[] = {
    {"ranks", required_argument, NULL, OPT_RANKS},
    {"algos", required_argument, NULL, OPT_ALGOS},
    {"profile", required_argument, NULL, OPT_PROFILE},
    {"model", required_argument, NULL, OPT_MODEL},
    {"layout", required_argument, NULL, OPT_LAYOUT},
    {"pack-tokens", required_argument, NULL, OPT_PACK_TOKENS},
    {"mix", required_argument, NULL, OPT_MIX},
    {"text-cost", no_argument, NULL, OPT_TEXT_COST},
    {"vit-balance", no_argument, NULL, OPT_VIT_BALANCE},
    {"vit-cap-ratio", required_argument, NULL, OPT_VIT_CAP_RATIO},
    {"vit-threshold", required_argument, NULL, OPT_VIT_THRESHOLD},
    {"slow-first-meeting", required_argument, NULL, OPT_SLOW_MEETING},
    {"vit-ship", no_argument, NULL, OPT_VIT_SHIP},
    {"vit-async", no_argument, NULL, OPT_VIT_ASYNC},
    {"lengths", required_argument, NULL, OPT_LENGTHS},
    {"seed", required_argument, NULL, OPT_SEED},
    {"steps", required_argument, NULL, OPT_STEPS},
    {"warmup-last", required_argument, NULL, OPT_WARMUP},
    {"time-scale", required_argument, NULL, OPT_TIME_SCALE},
    {"grad-bytes", required_argument, NULL, OPT_GRAD_BYTES},
    {"tp", required_argument, NULL, OPT_TP},
    {"micro-batches", required_argument, NULL, OPT_MICRO},
    {"latency-us", required_argument, NULL, OPT_LATENCY},
    {"bandwidth-gbps", required_argument, NULL, OPT_BANDWIDTH},
    {"memcpy-gbs", required_argument, NULL, OPT_MEMCPY},
    {"serial-us", required_argument, NULL, OPT_SERIAL},
    {"cores", required_argument, NULL, OPT_CORES},
    {"allreduce", required_argument, NULL, OPT_ALLREDUCE},
    {"ranks-per-host", required_argument, NULL, OPT_RANKS_PER_HOST},
    {"inter-latency-us", required_argument, NULL, OPT_INTER_LATENCY},
    {"inter-gbs", required_argument, NULL, OPT_INTER_GBS},
    {"no-topology", no_argument, NULL, OPT_NO_TOPOLOGY},
    {"inter-host-cost", required_argument, NULL, OPT_INTER_HOST_COST},
    {"cap-ratio", required_argument, NULL, OPT_CAP_RATIO},
    {"threshold", required_argument, NULL, OPT_THRESHOLD},
    {"solve-reps", required_argument, NULL, OPT_SOLVE_REPS},
    {"ahead", required_argument, NULL, OPT_AHEAD},
    {"png", required_argument, NULL, OPT_PNG},
    {"json", required_argument, NULL, OPT_JSON},
    {"calibrate", required_argument, NULL, OPT_CALIBRATE},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0}};

static void usage(void) {
  fputs(
"usage: dpshim-sim [options]\n"
"Simulates reftrain with and without libdpshim.so at any DP size: the same\n"
"packs (libpackload) and emulated-GPU times (reftrain's model), the real\n"
"solver, and a network model for the shim's collectives and the gradient\n"
"all-reduce. One JSON line per (ranks, algo) on stdout, a summary on stderr.\n"
"\n"
"workload (as reftrain's options):\n"
"  --ranks N,N,...       DP sizes, 1..65536 [4,8,16,...,4096]\n"
"  --algos LIST          none (no shim), seed, default, kk, and with a VLM\n"
"                        layout seed+vit, default+vit, kk+vit (the ViT\n"
"                        balance too) [none,seed,default]\n"
"  --profile NAME        sft, long, fewlong [long]\n"
"  --model NAME          the emulated GPU's preset, as reftrain's [tiny]\n"
"  --layout NAME         text (reftrain's packs), or vlmtrain's VLM packs:\n"
"                        internvl, qwen2vl, qwen3vl (images drawn as\n"
"                        libvlmload draws them, their tokens in each\n"
"                        sample's length, the vision encoder's time on the\n"
"                        rank that holds the sample) [text]\n"
"  --pack-tokens N       VLM pack tokens, as vlmtrain's [32768]\n"
"  --mix M               VLM packs: default, or encoder-heavy (vlmtrain's\n"
"                        --mix: more and larger images, long videos)\n"
"  --text-cost           VLM packs: the shim's cost and fit without the\n"
"                        images' terms (tokens alone), for comparison\n"
"  --vit-balance         VLM packs: also run each shim algo with the\n"
"                        ViT-level balance (DPSHIM_VIT_BALANCE=1: images\n"
"                        planned apart at each encoder call, the LLM's cost\n"
"                        text-only), as ALGO+vit\n"
"  --lengths FILE        lengths, one per line (keeps the profile's pack)\n"
"  --seed S              run seed [1]\n"
"  --steps N             measured steps, after the warm-up [20]\n"
"  --warmup-last W       the shim's warm-up is steps 2..W; its fit is used\n"
"                        from step W+1, which is where measuring starts [11]\n"
"  --time-scale X        multiplies the emulated time [1: an H100]\n"
"  --grad-bytes N        gradient all-reduce bytes [1048576]\n"
"  --tp N|model          tensor-parallel size: compute / N, tokens per GPU\n"
"                        / N; model: the preset's [1]\n"
"  --micro-batches M     hand-offs per step [1]\n"
"shim settings:\n"
"  --cap-ratio X|none    DPSHIM_MAX_LEN_RATIO [1.2]\n"
"  --threshold X         DPSHIM_TRIGGER_THRESHOLD: a ratio or auto [auto]\n"
"  --solve-reps R        timed solves per hand-off, median counts [3]\n"
"  --vit-cap-ratio X|none  DPSHIM_VIT_MAX_PATCH_RATIO, x mean patches per\n"
"                        rank [2]\n"
"  --vit-threshold X     DPSHIM_VIT_TRIGGER_THRESHOLD: a ratio, or auto (the\n"
"                        gate; see tools/sim/README.md) [auto]\n"
"  --slow-first-meeting F  auto: the gate measures its first meeting F times\n"
"                        as dear as it is (a rank preempted there) [1]\n"
"  --vit-ship            the encoder's inputs shipped at the hand-off on a\n"
"                        loader thread running ahead (dpshim_encoder_ship):\n"
"                        the images' sizes gathered, the ViT plan and the\n"
"                        inputs' exchange off the step's path; a forward\n"
"                        keeps its header round and the return [off]\n"
"  --vit-async           the embeddings' return overlapped with the LLM's\n"
"                        compute (dpshim_encoder_forward_async, MPI\n"
"                        progressing on its own): off the step's path and\n"
"                        off what the gate learns; the copies at the wait\n"
"                        stay [off]\n",
      stdout);
  /* In parts: one string would exceed what C11 compilers must take. */
  fputs(
"  --ahead K             balance K micro-batches ahead: each hand-off's\n"
"                        LLM-level work (gather, solve, exchange, copies)\n"
"                        on a thread beside the compute of the K\n"
"                        micro-batches before it on each rank; only what\n"
"                        outlasts that compute is on the step's path\n"
"                        (shim_on_path_ms; shim_ms is all of it). The ViT\n"
"                        balance's part as before [0: inline]\n",
      stdout);
  fputs(
"network and CPU model:\n"
"  --latency-us X        per message step [5]\n"
"  --bandwidth-gbps X    per rank link, Gbit/s [400]\n"
"  --memcpy-gbs X        pack/repack copy rate, GB/s [10]\n"
"  --serial-us X         per rank and collective, for oversubscribed\n"
"                        machines [0]\n"
"  --cores N             cores all ranks share; CPU work (solve, copies)\n"
"                        slows by ranks/N [0: a core per rank; with\n"
"                        --calibrate: this machine's]\n"
"  --allreduce ring|tree gradient all-reduce model [ring]\n"
"hosts (a second network level; without --ranks-per-host, one host):\n"
"  --ranks-per-host K    K consecutive DP ranks a host (rank r on host\n"
"                        r / K; with --tp T, K x T GPUs): the solver is told\n"
"                        the hosts (DPSHIM_TOPOLOGY=1), the latency and\n"
"                        bandwidth above are within a host, and collectives\n"
"                        cross hosts as below [0: one host]\n"
"  --inter-latency-us X  per message step between hosts [10]\n"
"  --inter-gbs X         one host's link to the others, shared by its\n"
"                        ranks, GB/s [50: one 400 Gbit/s NIC a host]\n"
"  --no-topology         plans not told the hosts, which still count\n"
"                        (DPSHIM_TOPOLOGY=0)\n"
"  --inter-host-cost X   the plans' price of a byte across hosts, in bytes\n"
"                        within one, 1..1000 (DPSHIM_INTER_HOST_COST) [10]\n"
"output:\n"
"  --json FILE           all results as one JSON array\n"
"  --png FILE            TGS against DP size, one line per algo (gnuplot)\n"
"  --calibrate FILE      compare with a demo's results.json at its DP sizes\n"
"                        and variants (its profile, seed, time scale, steps,\n"
"                        warm-up, gradient bytes and micro-batches replace\n"
"                        the options'), then fit this machine's latency,\n"
"                        bandwidth and serial cost; --json writes the result.\n"
"                        Runs with \"ranks_per_host\" (also top-level),\n"
"                        \"topology\" 0/1 and \"link_gbs\" (a shaped link's\n"
"                        GB/s) are priced on hosts, and the inter-host\n"
"                        latency (and unshaped runs' bandwidth) fitted too\n"
"  --help                this text\n",
      stdout);
}

static _Noreturn void bad(const char *opt, const char *want, const char *got) {
  fprintf(stderr, SIM_PROG ": --%s expects %s, got '%s'\n", opt, want, got);
  exit(2);
}

static void parse_ranks(const char *opt, const char *arg, sim_options_t *o) {
  char item[64];
  const char *want = "a comma list of up to 64 integers in 1..65536";
  o->nranks = 0;
  for (const char *c = arg; cli_next_item(&c, item, sizeof item);) {
    int64_t v;
    if (o->nranks == SIM_MAX_LIST || cli_int(item, 1, SIM_MAX_RANKS, &v))
      bad(opt, want, arg);
    o->ranks[o->nranks++] = (int32_t)v;
  }
}

#define VIT_SUFFIX "+vit"

/* "none", a solver's name, or a solver's name and "+vit". */
static int algo_from_name(const char *name, sim_algo_t *a) {
  *a = (sim_algo_t){DPSHIM_ALGO_NONE, 0, 0};
  if (!strcmp(name, "none")) return 0;
  char solver[64];
  size_t n = strlen(name), k = strlen(VIT_SUFFIX);
  a->shim = 1;
  a->vit = n > k && !strcmp(name + n - k, VIT_SUFFIX);
  if (n - (a->vit ? k : 0) >= sizeof solver) return -1;
  snprintf(solver, sizeof solver, "%.*s", (int)(n - (a->vit ? k : 0)), name);
  return dpshim_algo_from_name(solver, &a->algo) < 0 ? -1 : 0;
}

/* Names of "+vit" algorithms: static strings, as dpshim_algo_name()'s. */
static const char *vit_algo_name(dpshim_algo_t algo) {
  switch (algo) {
  case DPSHIM_ALGO_DEFAULT: return "default+vit";
  case DPSHIM_ALGO_SEED: return "seed+vit";
  case DPSHIM_ALGO_KK: return "kk+vit";
  case DPSHIM_ALGO_KK_CAP: return "kk-cap+vit";
  default: return "none+vit";
  }
}

const char *sim_algo_name(sim_algo_t a) {
  if (!a.shim) return "none";
  return a.vit ? vit_algo_name(a.algo) : dpshim_algo_name(a.algo);
}

static void parse_algos(const char *opt, const char *arg, sim_options_t *o) {
  char item[64];
  o->nalgos = 0;
  for (const char *c = arg; cli_next_item(&c, item, sizeof item);)
    if (o->nalgos == SIM_MAX_LIST ||
        algo_from_name(item, &o->algos[o->nalgos++]) < 0)
      bad(opt, "a comma list of none, seed, default, kk, seed+vit, "
          "default+vit, kk+vit", arg);
}

static void parse_profile(const char *opt, const char *arg, sim_options_t *o) {
  char names[128], ignored[160], want[160];
  if (!lengthgen_profile_find(arg, ignored, sizeof ignored)) {
    lengthgen_profile_names(names, sizeof names);
    snprintf(want, sizeof want, "one of %s", names);
    bad(opt, want, arg);
  }
  o->cfg.profile = arg;
}

/* Read once here so that a bad file is a bad option, not a failed run. */
static void check_lengths(const char *opt, const char *arg) {
  char err[320];
  lengthgen_file_t f;
  if (lengthgen_file_load(arg, &f, err, sizeof err) < 0) {
    fprintf(stderr, SIM_PROG ": --%s expects a file of positive lengths, one "
            "per line: %s\n", opt, err);
    exit(2);
  }
  size_t n = f.n;
  lengthgen_file_free(&f);
  if (n == 0) bad(opt, "a file holding at least one length", arg);
}

static double need_double(const char *opt, const char *arg, double lo,
                          double hi, const char *want) {
  double v;
  if (cli_double(arg, lo, hi, &v)) bad(opt, want, arg);
  return v;
}

static int64_t need_int(const char *opt, const char *arg, int64_t lo,
                        int64_t hi, const char *want) {
  int64_t v;
  if (cli_int(arg, lo, hi, &v)) bad(opt, want, arg);
  return v;
}

static void parse_seed(const char *opt, const char *arg, uint64_t *out) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(arg, &end, 0);
  if (*arg == '-' || errno || end == arg || *end)
    bad(opt, "an unsigned 64-bit integer", arg);
  *out = v;
}

/* Workload options: what reftrain takes. */
static int apply_workload(int code, const char *opt, const char *arg,
                          sim_options_t *o) {
  sim_config_t *c = &o->cfg;
  switch (code) {
  case OPT_RANKS: parse_ranks(opt, arg, o); return 1;
  case OPT_ALGOS: parse_algos(opt, arg, o); return 1;
  case OPT_PROFILE:
    parse_profile(opt, arg, o);
    o->profile_given = 1;
    return 1;
  case OPT_MODEL:
    if (emu_model_find(arg, &c->model, NULL, 0) < 0)
      bad(opt, emu_model_names(), arg);
    return 1;
  case OPT_LENGTHS:
    check_lengths(opt, arg);
    c->lengths = arg;
    o->lengths_given = 1;
    return 1;
  case OPT_SEED: parse_seed(opt, arg, &c->seed); return 1;
  case OPT_STEPS:
    c->steps = need_int(opt, arg, 1, 100000, "an integer in [1, 100000]");
    return 1;
  case OPT_WARMUP:
    c->warmup_last = need_int(opt, arg, 3, 4096, "an integer in [3, 4096]");
    return 1;
  case OPT_TIME_SCALE:
    c->time_scale = need_double(opt, arg, 1e-6, 1e6, "a number in [1e-6, 1e6]");
    return 1;
  case OPT_GRAD_BYTES:
    c->grad_bytes = need_int(opt, arg, 0, INT64_C(1) << 40,
                             "a byte count in [0, 2^40]");
    return 1;
  case OPT_TP: /* 0: the preset's, once --model is known */
    c->tp = strcmp(arg, "model") == 0 ? 0
        : (int32_t)need_int(opt, arg, 1, 1024,
                            "an integer in [1, 1024] or 'model'");
    return 1;
  case OPT_MICRO:
    c->micro = (int32_t)need_int(opt, arg, 1, SIM_MAX_MICRO,
                                 "an integer in [1, 64]");
    return 1;
  }
  return 0;
}

/* The shim's settings, the network model and the outputs. */
static int apply_model(int code, const char *opt, const char *arg,
                       sim_options_t *o) {
  sim_net_t *n = &o->net;
  switch (code) {
  case OPT_CAP_RATIO:
    o->cfg.cap_ratio = strcmp(arg, "none") == 0 ? 0
        : need_double(opt, arg, 1e-9, 1e3, "a number > 0 or 'none'");
    return 1;
  case OPT_THRESHOLD:
    o->cfg.threshold = strcmp(arg, "auto") == 0 ? -1
        : need_double(opt, arg, 0, 1e3, "a number in [0, 1000] or 'auto'");
    return 1;
  case OPT_SOLVE_REPS:
    o->cfg.solve_reps = (int)need_int(opt, arg, 1, SIM_MAX_SOLVE_REPS,
                                      "an integer in [1, 99]");
    return 1;
  case OPT_AHEAD:
    o->cfg.ahead = (int32_t)need_int(opt, arg, 0, SIM_MAX_AHEAD,
                                     "an integer in [0, 64] (0: inline)");
    return 1;
  case OPT_LATENCY:
    n->latency_s = 1e-6 * need_double(opt, arg, 0, 1e6, "microseconds >= 0");
    return 1;
  case OPT_BANDWIDTH:
    n->bandwidth = 1e9 / 8 * need_double(opt, arg, 1e-6, 1e6,
                                         "Gbit/s in [1e-6, 1e6]");
    return 1;
  case OPT_MEMCPY:
    n->memcpy_bps = 1e9 * need_double(opt, arg, 1e-6, 1e6,
                                      "GB/s in [1e-6, 1e6]");
    return 1;
  case OPT_SERIAL:
    n->serial_s = 1e-6 * need_double(opt, arg, 0, 1e6, "microseconds >= 0");
    return 1;
  case OPT_CORES:
    n->cores = (int32_t)need_int(opt, arg, 0, 1 << 24, "an integer >= 0");
    o->cores_given = 1;
    return 1;
  case OPT_ALLREDUCE:
    if (strcmp(arg, "ring") && strcmp(arg, "tree"))
      bad(opt, "'ring' or 'tree'", arg);
    n->tree = strcmp(arg, "tree") == 0;
    return 1;
  case OPT_INTER_LATENCY:
    n->inter_latency_s = 1e-6 * need_double(opt, arg, 0, 1e6,
                                            "microseconds >= 0");
    o->inter_given = opt;
    return 1;
  case OPT_INTER_GBS:
    n->inter_bandwidth = 1e9 * need_double(opt, arg, 1e-6, 1e6,
                                           "GB/s in [1e-6, 1e6]");
    o->inter_given = opt;
    return 1;
  case OPT_PNG: o->png = arg; return 1;
  case OPT_JSON: o->json = arg; return 1;
  case OPT_CALIBRATE: o->calibrate = arg; return 1;
  }
  return 0;
}

/* --ranks-per-host and --no-topology: where the ranks are, which changes
 * what the solver is told (the network's parameters are apply_model's). */
static int apply_hosts(int code, const char *opt, const char *arg,
                       sim_options_t *o) {
  switch (code) {
  case OPT_RANKS_PER_HOST:
    o->cfg.ranks_per_host = (int32_t)need_int(
        opt, arg, 0, SIM_MAX_RANKS, "an integer in [0, 65536] (0: one host)");
    o->hosts_given = 1;
    return 1;
  case OPT_NO_TOPOLOGY:
    o->cfg.topology = 0;
    o->no_topology_given = 1;
    return 1;
  case OPT_INTER_HOST_COST:
    o->cfg.inter_host_cost = need_double(opt, arg, 1,
                                         DPSHIM_INTER_HOST_COST_MAX,
                                         "a number in [1, 1000]");
    o->inter_given = opt;
    return 1;
  }
  return 0;
}

/* --layout, --pack-tokens and --text-cost: the VLM workload. */
static int apply_vlm(int code, const char *opt, const char *arg,
                     sim_options_t *o) {
  vlmload_layout_t layout;
  switch (code) {
  case OPT_LAYOUT:
    o->cfg.vision = strcmp(arg, "text") != 0;
    if (o->cfg.vision && vlmload_layout_from_name(arg, &layout) < 0)
      bad(opt, "text, internvl, qwen2vl or qwen3vl", arg);
    if (o->cfg.vision) o->cfg.vlm = vlmload_config_default(layout);
    return 1;
  case OPT_PACK_TOKENS:
    o->pack_tokens = need_int(opt, arg, 256, INT64_C(1) << 24,
                              "an integer in [256, 2^24]");
    return 1;
  case OPT_MIX:
    if (strcmp(arg, "default") && strcmp(arg, "encoder-heavy"))
      bad(opt, "default or encoder-heavy", arg);
    o->mix = arg;
    return 1;
  case OPT_TEXT_COST: o->cfg.text_cost = 1; return 1;
  case OPT_VIT_BALANCE: o->vit_balance = 1; return 1;
  case OPT_VIT_CAP_RATIO:
    o->cfg.vit_cap_ratio = strcmp(arg, "none") == 0 ? 0
        : need_double(opt, arg, 1e-9, 1e3, "a number > 0 or 'none'");
    return 1;
  case OPT_VIT_THRESHOLD:
    o->cfg.vit_threshold = strcmp(arg, "auto") == 0 ? -1
        : need_double(opt, arg, 0, 1e3, "a number in [0, 1000] or 'auto'");
    return 1;
  case OPT_VIT_SHIP: o->cfg.vit_ship = 1; return 1;
  case OPT_VIT_ASYNC: o->cfg.vit_async = 1; return 1;
  case OPT_SLOW_MEETING:
    o->cfg.slow_meeting = need_double(opt, arg, 1, 1e6, "a number >= 1");
    return 1;
  }
  return 0;
}

static int has_vit_algo(const sim_options_t *o) {
  for (int a = 0; a < o->nalgos; a++)
    if (o->algos[a].vit) return 1;
  return 0;
}

/* --vit-balance: each shim algo of the list again, with "+vit", after the
 * others (that are not there already). */
static void add_vit_algos(sim_options_t *o) {
  int n = o->nalgos;
  for (int a = 0; a < n; a++) {
    sim_algo_t v = o->algos[a];
    if (!v.shim || v.vit) continue;
    v.vit = 1;
    int seen = 0;
    for (int b = 0; b < o->nalgos; b++)
      seen |= o->algos[b].shim && o->algos[b].vit &&
              o->algos[b].algo == v.algo;
    if (!seen && o->nalgos < SIM_MAX_LIST) o->algos[o->nalgos++] = v;
  }
}

/* --calibrate's file says where its runs' ranks were; a sweep's
 * --no-topology needs hosts to ignore, and its inter-host parameters hosts
 * to be between (said rather than silently unused). */
static void resolve_hosts(const sim_options_t *o) {
  const char *opt = o->hosts_given ? "ranks-per-host" : "no-topology";
  if (o->calibrate && (o->hosts_given || o->no_topology_given)) {
    fprintf(stderr, SIM_PROG ": --%s expects a sweep (with --calibrate, the "
            "file's \"ranks_per_host\" and \"topology\" say it)\n", opt);
    exit(2);
  }
  if (o->no_topology_given && o->cfg.ranks_per_host == 0) {
    fprintf(stderr, SIM_PROG ": --no-topology expects --ranks-per-host K "
            "(K >= 1: hosts to ignore)\n");
    exit(2);
  }
  if (o->inter_given && !o->calibrate && o->cfg.ranks_per_host == 0) {
    fprintf(stderr, SIM_PROG ": --%s expects --ranks-per-host K (K >= 1) or "
            "--calibrate (without hosts nothing crosses them)\n",
            o->inter_given);
    exit(2);
  }
}

/* What depends on more than one option; exits 2 naming the option. */
static void resolve(sim_options_t *o) {
  sim_config_t *c = &o->cfg;
  if (c->tp == 0) c->tp = c->model.tp;
  const char *text_only = o->calibrate ? "calibrate" : o->lengths_given
      ? "lengths" : o->profile_given ? "profile" : NULL;
  if (c->vision && text_only) {
    fprintf(stderr, SIM_PROG ": --%s expects --layout text (VLM packs draw "
            "their own lengths)\n", text_only);
    exit(2);
  }
  const char *vlm_only = o->pack_tokens ? "pack-tokens"
                         : o->mix ? "mix"
                         : c->text_cost ? "text-cost"
                         : o->vit_balance ? "vit-balance"
                         : has_vit_algo(o) ? "algos" : NULL;
  if (vlm_only && !c->vision) {
    fprintf(stderr, SIM_PROG ": --%s expects --layout internvl, qwen2vl or "
            "qwen3vl (text packs have no images)\n", vlm_only);
    exit(2);
  }
  if (o->pack_tokens) c->vlm.pack_tokens = o->pack_tokens;
  if (o->mix) vlmload_config_mix(&c->vlm, o->mix); /* a name checked above */
  if (o->vit_balance) add_vit_algos(o);
  resolve_hosts(o);
  /* The demo's runs balance inline: there is no ahead to compare with. */
  if (o->calibrate && c->ahead) {
    fprintf(stderr, SIM_PROG ": --ahead expects a sweep (with --calibrate, "
            "the demo's runs balance inline)\n");
    exit(2);
  }
}

static void defaults(sim_options_t *o) {
  *o = (sim_options_t){0};
  o->cfg = (sim_config_t){.profile = "long", .seed = 1, .time_scale = 1.0,
                          .grad_bytes = 1 << 20, .tp = 1, .micro = 1,
                          .warmup_last = 11, .steps = 20, .cap_ratio = 1.2,
                          .threshold = -1, .headroom = 2.0, .solve_reps = 3,
                          .vit_cap_ratio = 2.0, .vit_threshold = -1,
                          .slow_meeting = 1,
                          .topology = 1, .model = emu_model_default()};
  o->net = sim_net_default();
  parse_ranks("ranks", "4,8,16,32,64,128,256,512,1024,2048,4096", o);
  parse_algos("algos", "none,seed,default", o);
}

void sim_parse(int argc, char **argv, sim_options_t *o) {
  defaults(o);
  opterr = 0;
  int code;
  while ((code = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
    if (code == OPT_HELP) {
      usage();
      exit(0);
    }
    if (code == '?' || code == ':') {
      fprintf(stderr, SIM_PROG ": %s '%s' (see --help)\n",
              code == '?' ? "unknown option" : "a value is expected after",
              argv[optind - 1]);
      exit(2);
    }
    const char *opt = longopts[0].name;
    for (const struct option *p = longopts; p->name; p++)
      if (p->val == code) opt = p->name;
    if (!apply_workload(code, opt, optarg, o) &&
        !apply_vlm(code, opt, optarg, o) && !apply_hosts(code, opt, optarg, o))
      apply_model(code, opt, optarg, o);
  }
  if (optind < argc) {
    fprintf(stderr, SIM_PROG ": unexpected argument '%s' (see --help)\n",
            argv[optind]);
    exit(2);
  }
  /* Calibration takes its DP sizes and variants from the file. */
  if (o->calibrate && o->png) {
    fprintf(stderr, SIM_PROG ": --png expects a sweep, not --calibrate\n");
    exit(2);
  }
  resolve(o);
  o->cfg.price_net = o->net;
}
