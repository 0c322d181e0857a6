/* dpshim-run: launch an MPI job with libdpshim.so preloaded and its
 * settings given as command-line flags: the original's (--use-vlm-dp-balance,
 * ...) or dpshim's own (--solver, --log, --tp, ...; every DPSHIM_* variable
 * as --name). The whole configuration is checked first by the shim's own
 * parser, with its messages; then mpirun runs with -x LD_PRELOAD=... and one
 * -x per setting (another command gets them in its environment). A command
 * that runs python also gets dpshim's start-up hook on PYTHONPATH, which
 * balances a PyTorch trainer's DataLoaders with no change to it. The exit
 * status is the command's. See dpshim-run(1). */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "../cli.h"
#include "config.h"

#define PROG "dpshim-run"
#define NVARS_MAX 64

/* The Python hook's own settings (tools/python/dpshim/autowrap.py): not the
 * shim's, so not in its table; forwarded to the ranks from the
 * environment. */
static const char *const py_vars[] = {"DPSHIM_PY_WRAP", "DPSHIM_PY_CU_KEY",
                                      "DPSHIM_PY_TOKEN_KEYS",
                                      "DPSHIM_PY_SAMPLE_KEYS"};
#define NPY_VARS ((int)(sizeof py_vars / sizeof *py_vars))

#define MAX_ADAPTERS 8

/* A setting per variable: from the environment, then the command line. */
typedef struct settings {
  const char *value[NVARS_MAX]; /* NULL: unset */
  char *owned[NVARS_MAX];       /* joined lists */
} settings_t;

typedef struct options {
  settings_t set;
  const char *lib;
  const char *adapters[MAX_ADAPTERS]; /* --adapter, as given */
  int nadapters;
  int dry_run;
  char **command; /* NULL-terminated */
  int ncommand;
  int shorthand; /* `-np N prog`: mpirun is implied */
  int64_t global_batch, micro_batch; /* Megatron's sizes; 0: not given */
  char **extra; /* NAME=VALUE besides the settings (extra_vars()) */
} options_t;

static _Noreturn __attribute__((format(printf, 1, 2))) void usage_error(
    const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, PROG ": ");
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, " (see " PROG " --help)\n");
  exit(2);
}

/* fmt with its two strings, in memory of its own. */
static char *format(const char *fmt, const char *a, const char *b) {
  size_t len = strlen(fmt) + strlen(a) + strlen(b) + 1;
  char *out = malloc(len);
  if (!out) {
    fprintf(stderr, PROG ": out of memory\n");
    exit(2);
  }
  snprintf(out, len, fmt, a, b);
  return out;
}

static void help(void) {
  printf("usage: " PROG " [OPTION]... -- COMMAND [ARG]...\n"
         "       " PROG " [OPTION]... -np N PROGRAM [ARG]...   (mpirun implied)\n"
         "\n"
         "Runs COMMAND (mpirun ...) with libdpshim.so preloaded on every rank\n"
         "and the settings below given to it. The configuration is checked\n"
         "first, as the shim checks it; a bad value stops here.\n"
         "\n"
         "Settings (each sets one variable; see dpshim(7)):\n");
  for (int32_t i = 0; i < dpshim__config_nvars(); i++) {
    const dpshim__config_var_t *v = dpshim__config_var(i);
    char own[128];
    snprintf(own, sizeof own, "--%s", v->name + strlen("DPSHIM_"));
    for (char *p = own + 2; *p; p++) *p = *p == '_' ? '-' : (char)(*p | 0x20);
    const char *arg = v->form == DPSHIM__FORM_SWITCH ? "[=BOOL]"
                      : v->form == DPSHIM__FORM_LIST ? " STEPS" : " VALUE";
    printf("  %s%s%s%s\n      %s (default %s): %s\n", own, arg,
           v->flag ? ", " : "", v->flag ? v->flag : "", v->name,
           v->def ? v->def : "unset", v->accepted);
  }
  printf("  --tp N, --pp N, --cp N\n"
         "      the same as --tp-size, --pp-size, --cp-size\n"
         "  --global-batch-size G --micro-batch-size M\n"
         "      Megatron's batch sizes: DPSHIM_MICRO_BATCHES = G / (M * DP),\n"
         "      DP = mpirun's -np / (tp * pp * cp); it must divide, and an\n"
         "      explicit --micro-batches must agree\n"
         "\n"
         "Options:\n"
         "  --lib PATH   the libdpshim.so to preload [default: %s when run\n"
         "               from the build tree, else %s]\n"
         "  --adapter NAME|PATH\n"
         "               an adapter library to preload after it (repeatable):\n"
         "               a path, or NAME for libdpshim_NAME.so (from the build\n"
         "               tree: %s; else in %s)\n"
         "  --dry-run    print the command with its settings; run nothing\n"
         "  --help       this text\n"
         "\n"
         "Python: when a word of COMMAND is named python* (python3,\n"
         "/usr/bin/python3.11), the ranks' PYTHONPATH starts with dpshim's\n"
         "start-up hook and package:\n"
         "  %s:%s\n"
         "from the build tree, else\n"
         "  %s:%s\n"
         "With balancing on, every torch DataLoader batch that is a dict\n"
         "holding cu_seqlens is then balanced, with no change to the trainer\n"
         "(every rank must iterate each such loader in step; see the dpshim\n"
         "package's autowrap module). These variables from the environment\n"
         "go to the ranks too: DPSHIM_PY_WRAP (0: no hook), DPSHIM_PY_CU_KEY\n"
         "(default cu_seqlens), DPSHIM_PY_TOKEN_KEYS, DPSHIM_PY_SAMPLE_KEYS\n"
         "(comma lists of the keys that move; default: read from shapes).\n"
         "\n"
         "DPSHIM_* variables already in the environment count too; a flag\n"
         "overrides one. The exit status is the command's (2: bad usage or\n"
         "configuration, 127: the command could not be run).\n",
         DPSHIM_BUILD_LIB, DPSHIM_INSTALLED_LIB, DPSHIM_BUILD_ADAPTER_NAMES,
         DPSHIM_INSTALLED_ADAPTERS, DPSHIM_BUILD_BOOT,
         DPSHIM_BUILD_PYTHON, DPSHIM_INSTALLED_BOOT, DPSHIM_INSTALLED_PYTHON);
}

/* ---- flags --------------------------------------------------------------- */

/* "--solver" for DPSHIM_SOLVER, "--tp-size" for DPSHIM_TP_SIZE. */
static int is_own_name(const dpshim__config_var_t *v, const char *flag) {
  const char *n = v->name + strlen("DPSHIM_");
  if (strncmp(flag, "--", 2)) return 0;
  for (flag += 2; *n && *flag; n++, flag++)
    if ((*n == '_' ? '-' : (*n | 0x20)) != *flag) return 0;
  return !*n && !*flag;
}

/* The variable called `name`, or -1. */
static int32_t var_index(const char *name) {
  for (int32_t i = 0; i < dpshim__config_nvars(); i++)
    if (!strcmp(dpshim__config_var(i)->name, name)) return i;
  return -1;
}

/* The variable a flag names (its part before '='), or -1. */
static int32_t var_of(const char *flag, size_t len) {
  static const struct { const char *alias, *name; } aliases[] = {
      {"--tp", "DPSHIM_TP_SIZE"}, {"--pp", "DPSHIM_PP_SIZE"},
      {"--cp", "DPSHIM_CP_SIZE"}};
  char name[128];
  if (len >= sizeof name) return -1;
  memcpy(name, flag, len);
  name[len] = 0;
  for (size_t a = 0; a < sizeof aliases / sizeof *aliases; a++)
    if (!strcmp(name, aliases[a].alias)) return var_index(aliases[a].name);
  for (int32_t i = 0; i < dpshim__config_nvars(); i++) {
    const dpshim__config_var_t *v = dpshim__config_var(i);
    if (is_own_name(v, name) || (v->flag && !strcmp(v->flag, name))) return i;
  }
  return -1;
}

static int is_int(const char *s) {
  if (*s == '-' || *s == '+') s++;
  if (!*s) return 0;
  for (; *s; s++)
    if (*s < '0' || *s > '9') return 0;
  return 1;
}

/* The values of a list flag: argv[k..] while they are integers, joined. */
static char *join_list(char **argv, int argc, int *k) {
  size_t len = 1;
  int first = *k;
  while (*k < argc && is_int(argv[*k])) len += strlen(argv[(*k)++]) + 1;
  char *out = malloc(len);
  if (!out) {
    fprintf(stderr, PROG ": out of memory\n");
    exit(2);
  }
  out[0] = 0;
  for (int j = first; j < *k; j++) {
    if (j > first) strcat(out, ",");
    strcat(out, argv[j]);
  }
  return out;
}

/* One setting flag at argv[*k]; advances *k past its values. */
static void setting_flag(options_t *o, char **argv, int argc, int *k) {
  const char *flag = argv[*k], *eq = strchr(flag, '=');
  size_t len = eq ? (size_t)(eq - flag) : strlen(flag);
  int32_t i = var_of(flag, len);
  if (i < 0) usage_error("unknown option '%s'", flag);
  const dpshim__config_var_t *v = dpshim__config_var(i);
  int is_original = v->flag && !strncmp(flag, v->flag, len) && !v->flag[len];
  (*k)++;
  free(o->set.owned[i]);
  o->set.owned[i] = NULL;
  if (eq) {
    o->set.value[i] = eq + 1;
  } else if (v->form == DPSHIM__FORM_SWITCH) {
    o->set.value[i] = "1";
  } else if (v->form == DPSHIM__FORM_LIST && is_original) {
    if (*k >= argc || !is_int(argv[*k]))
      usage_error("%s: expected one or more step numbers", flag);
    o->set.value[i] = o->set.owned[i] = join_list(argv, argc, k);
  } else {
    if (*k >= argc) usage_error("%s: expected a value", flag);
    o->set.value[i] = argv[(*k)++];
  }
  /* The original's float-or-None flags: None is 'none' here. */
  if (is_original && !strcmp(o->set.value[i], "None")) o->set.value[i] = "none";
}

/* The value of flag `name` when argv[*k] is it ("NAME VALUE" or
 * "NAME=VALUE"; "" when the value is missing), *k then past it; else NULL,
 * *k untouched. */
static const char *flag_value(const char *name, char **argv, int argc,
                              int *k) {
  const char *a = argv[*k];
  size_t len = strlen(name);
  if (strncmp(a, name, len) || (a[len] && a[len] != '=')) return NULL;
  const char *v = a[len] ? a + len + 1 : (*k + 1 < argc ? argv[++*k] : "");
  (*k)++;
  return v;
}

/* --global-batch-size G, --micro-batch-size=M: 1 when argv[*k] is one
 * of them (its value in *out, *k past it), else 0. */
static int batch_size_flag(const char *name, char **argv, int argc, int *k,
                           int64_t *out) {
  const char *v = flag_value(name, argv, argc, k);
  if (!v) return 0;
  if (cli_int(v, 1, INT32_MAX, out) < 0)
    usage_error("%s: expected an integer >= 1, got '%s'", name, v);
  return 1;
}

static void from_environment(settings_t *set) {
  for (int32_t i = 0; i < dpshim__config_nvars(); i++) {
    const char *v = getenv(dpshim__config_var(i)->name);
    if (v && *v) set->value[i] = v;
  }
}

static void parse_args(options_t *o, int argc, char **argv) {
  int k = 1;
  while (k < argc) {
    const char *a = argv[k], *v;
    if (!strcmp(a, "--")) {
      k++;
      break;
    }
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      help();
      exit(0);
    }
    if (!strcmp(a, "--dry-run")) {
      o->dry_run = 1;
      k++;
    } else if ((v = flag_value("--lib", argv, argc, &k))) {
      if (!*v) usage_error("%s: expected a path", "--lib");
      o->lib = v;
    } else if ((v = flag_value("--adapter", argv, argc, &k))) {
      if (!*v) usage_error("%s: expected a name or a path", "--adapter");
      if (o->nadapters == MAX_ADAPTERS)
        usage_error("--adapter: at most %d", MAX_ADAPTERS);
      o->adapters[o->nadapters++] = v;
    } else if (batch_size_flag("--global-batch-size", argv, argc, &k,
                               &o->global_batch) ||
               batch_size_flag("--micro-batch-size", argv, argc, &k,
                               &o->micro_batch)) {
      continue;
    } else if (!strncmp(a, "--", 2)) {
      setting_flag(o, argv, argc, &k);
    } else {
      o->shorthand = 1; /* -np 64 ./trainer: mpirun's arguments */
      break;
    }
  }
  if (k >= argc) usage_error("%s", "no command: give '-- mpirun ...' or "
                                   "'-np N PROGRAM'");
  o->command = argv + k;
  o->ncommand = argc - k;
}

/* ---- validation and the library ------------------------------------------ */

/* The settings go into this process's environment (the launcher and a
 * plain command inherit them), where the shim's parser reads them. */
static void validate(const settings_t *set, dpshim__config_t *cfg) {
  for (int32_t i = 0; i < dpshim__config_nvars(); i++)
    if (set->value[i]) setenv(dpshim__config_var(i)->name, set->value[i], 1);
  char msg[512];
  if (dpshim__config_parse(getenv, cfg, msg, sizeof msg) < 0) {
    fprintf(stderr, PROG ": %s\n", msg);
    exit(2);
  }
}

/* The Python hook's switch, read as the hook reads it. */
static void validate_python(void) {
  static const char *const words[] = {"1", "true", "yes", "on",
                                      "0", "false", "no", "off"};
  const char *v = getenv("DPSHIM_PY_WRAP");
  if (!v || !*v) return;
  for (size_t k = 0; k < sizeof words / sizeof *words; k++)
    if (!strcasecmp(v, words[k])) return;
  fprintf(stderr, PROG ": DPSHIM_PY_WRAP='%s': expected 1, true, yes, on, "
                  "0, false, no or off\n", v);
  exit(2);
}

/* mpirun's rank count: the value of the command's first -np/-n (or
 * --np/--n, or NAME=N); 0 when there is none. */
static int64_t ranks_of(const options_t *o) {
  static const char *const names[] = {"-np", "-n", "--np", "--n"};
  for (int k = 0; k < o->ncommand; k++)
    for (size_t j = 0; j < sizeof names / sizeof *names; j++) {
      int at = k;
      const char *v = flag_value(names[j], o->command, o->ncommand, &at);
      int64_t n;
      if (v) return cli_int(v, 1, INT32_MAX, &n) < 0 ? 0 : n;
    }
  return 0;
}

/* DPSHIM_MICRO_BATCHES from Megatron's --global-batch-size G and
 * --micro-batch-size M: each DP rank hands off G / (M * DP) micro-batches
 * a step. Exits with one line where that is no whole number or clashes
 * with the value given. */
static void derive_micro_batches(options_t *o, const dpshim__config_t *cfg) {
  const char *flags = "--global-batch-size/--micro-batch-size";
  if (!o->global_batch && !o->micro_batch) return;
  if (!o->global_batch || !o->micro_batch)
    usage_error("%s: give both, or neither", flags);
  int64_t ranks = ranks_of(o), model = (int64_t)cfg->tp * cfg->pp * cfg->cp;
  if (!ranks)
    usage_error("%s: the number of ranks is needed: give the launcher's "
                "-np N", flags);
  if (ranks % model)
    usage_error("%s: -np %lld is not a multiple of tp * pp * cp = %lld",
                flags, (long long)ranks, (long long)model);
  int64_t dp = ranks / model, per_step = o->micro_batch * dp;
  if (o->global_batch % per_step)
    usage_error("--global-batch-size %lld is not a multiple of "
                "--micro-batch-size %lld * DP %lld (DP: -np %lld / tp * pp * "
                "cp = %lld)", (long long)o->global_batch,
                (long long)o->micro_batch, (long long)dp, (long long)ranks,
                (long long)model);
  int64_t derived = o->global_batch / per_step;
  int32_t i = var_index("DPSHIM_MICRO_BATCHES");
  if (i < 0) usage_error("%s: this build has no DPSHIM_MICRO_BATCHES", flags);
  if (o->set.value[i]) {
    if (cfg->micro_batches != derived)
      usage_error("--micro-batches %s (DPSHIM_MICRO_BATCHES) disagrees with "
                  "--global-batch-size %lld / (--micro-batch-size %lld * DP "
                  "%lld) = %lld", o->set.value[i], (long long)o->global_batch,
                  (long long)o->micro_batch, (long long)dp,
                  (long long)derived);
    return;
  }
  char text[32];
  snprintf(text, sizeof text, "%lld", (long long)derived);
  o->set.value[i] = o->set.owned[i] = format("%s%s", text, "");
}

/* Whether this is the build tree's dpshim-run. */
static int in_build_tree(void) {
  char self[PATH_MAX], *built = realpath(DPSHIM_BUILD_RUN, NULL);
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  self[n > 0 ? n : 0] = 0;
  int in_build = built && !strcmp(self, built);
  free(built);
  return in_build;
}

/* The build tree's library when this is the build tree's dpshim-run, else
 * the installed one. */
static const char *find_lib(const char *given) {
  if (given) return given;
  return in_build_tree() ? DPSHIM_BUILD_LIB : DPSHIM_INSTALLED_LIB;
}

/* An adapter's file: a path as given; a name, as libdpshim_NAME.so beside
 * the reference tools when this is the build tree's dpshim-run
 * (DPSHIM_BUILD_ADAPTERS: "name=path,..."), else in the installed
 * library's directory. */
static char *find_adapter(const char *given) {
  if (strchr(given, '/')) return format("%s%s", given, "");
  if (!in_build_tree())
    return format(DPSHIM_INSTALLED_ADAPTERS "/libdpshim_%s.so%s", given, "");
  size_t n = strlen(given);
  for (const char *p = DPSHIM_BUILD_ADAPTERS; *p;) {
    const char *end = strchr(p, ',');
    if (!end) end = p + strlen(p);
    if (!strncmp(p, given, n) && p[n] == '=') {
      char *path = format("%s%s", p + n + 1, "");
      path[end - (p + n + 1)] = '\0';
      return path;
    }
    p = *end ? end + 1 : end;
  }
  usage_error("--adapter %s: no such adapter in the build tree (%s), and no "
              "path given", given, DPSHIM_BUILD_ADAPTER_NAMES);
}

/* What goes before the ranks' own LD_PRELOAD: the shim, then each
 * adapter, each checked readable. */
static char *find_preload(const options_t *o, const char *shim) {
  char *list = format("%s%s", shim, "");
  for (int k = 0; k < o->nadapters; k++) {
    char *path = find_adapter(o->adapters[k]);
    if (access(path, R_OK) != 0) {
      fprintf(stderr, PROG ": --adapter %s: cannot read %s: %s\n",
              o->adapters[k], path, strerror(errno));
      exit(2);
    }
    list = format("%s:%s", list, path);
  }
  return list;
}

/* ---- the command ----------------------------------------------------------- */

static int is_launcher(const char *cmd) {
  const char *base = strrchr(cmd, '/');
  base = base ? base + 1 : cmd;
  return !strcmp(base, "mpirun") || !strcmp(base, "mpiexec") ||
         !strcmp(base, "orterun") || !strcmp(base, "prterun");
}

/* LD_PRELOAD for the ranks: the shim and its adapters first, then what
 * was there. */
static char *preload_value(const char *ours) {
  const char *old = getenv("LD_PRELOAD");
  return old && *old ? format("%s:%s", ours, old) : format("%s%s", ours, "");
}

/* Whether the command runs python: a word named python* (python3,
 * /usr/bin/python3.11). */
static int runs_python(const options_t *o) {
  for (int k = 0; k < o->ncommand; k++) {
    const char *base = strrchr(o->command[k], '/');
    base = base ? base + 1 : o->command[k];
    if (!strncmp(base, "python", 6)) return 1;
  }
  return 0;
}

/* PYTHONPATH for the ranks: the start-up hook's directory and the
 * package's first (the build tree's when this dpshim-run is), then what
 * was there. */
static char *python_path(void) {
  int built = in_build_tree();
  const char *boot = built ? DPSHIM_BUILD_BOOT : DPSHIM_INSTALLED_BOOT;
  char *ours = format("%s:%s", boot,
                      built ? DPSHIM_BUILD_PYTHON : DPSHIM_INSTALLED_PYTHON);
  const char *old = getenv("PYTHONPATH");
  return old && *old ? format("%s:%s", ours, old) : ours;
}

/* The variables a command gets besides the shim's settings, NAME=VALUE:
 * for python, PYTHONPATH and the hook's settings from the environment.
 * NULL-terminated. */
static char **extra_vars(const options_t *o) {
  char **vars = calloc(NPY_VARS + 2, sizeof *vars);
  int m = 0;
  if (!vars) {
    fprintf(stderr, PROG ": out of memory\n");
    exit(2);
  }
  if (runs_python(o)) {
    vars[m++] = format("PYTHONPATH=%s%s", python_path(), "");
    for (int k = 0; k < NPY_VARS; k++) {
      const char *v = getenv(py_vars[k]);
      if (v && *v) vars[m++] = format("%s=%s", py_vars[k], v);
    }
  }
  vars[m] = NULL;
  return vars;
}

/* argv to exec: the launcher with -x per setting, or the command as given
 * (its settings then go in the environment). */
static char **build_argv(const options_t *o, const char *ours) {
  int n = o->ncommand + 2 * (dpshim__config_nvars() + NPY_VARS + 2) + 2;
  int m = 0;
  char **argv = calloc((size_t)n, sizeof *argv);
  if (!argv) {
    fprintf(stderr, PROG ": out of memory\n");
    exit(2);
  }
  int k = 0;
  if (o->shorthand) argv[m++] = "mpirun";
  else argv[m++] = o->command[k++];
  if (is_launcher(argv[0])) {
    argv[m++] = "-x";
    argv[m++] = format("LD_PRELOAD=%s%s", preload_value(ours), "");
    for (int32_t i = 0; i < dpshim__config_nvars(); i++) {
      if (!o->set.value[i]) continue;
      argv[m++] = "-x";
      argv[m++] = format("%s=%s", dpshim__config_var(i)->name, o->set.value[i]);
    }
    for (char **v = o->extra; *v; v++) {
      argv[m++] = "-x";
      argv[m++] = *v;
    }
  }
  for (; k < o->ncommand; k++) argv[m++] = o->command[k];
  argv[m] = NULL;
  return argv;
}

/* A word as a POSIX shell reads it back. */
static void print_quoted(const char *w) {
  if (*w && strspn(w, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                      "0123456789-_./=:,+@%") == strlen(w)) {
    fputs(w, stdout);
    return;
  }
  putchar('\'');
  for (; *w; w++) {
    if (*w == '\'') fputs("'\\''", stdout);
    else putchar(*w);
  }
  putchar('\'');
}

static void print_command(const options_t *o, const char *ours,
                          char **argv) {
  int first = 1;
  if (!is_launcher(argv[0])) {
    printf("env ");
    print_quoted(format("LD_PRELOAD=%s%s", preload_value(ours), ""));
    for (int32_t i = 0; i < dpshim__config_nvars(); i++)
      if (o->set.value[i]) {
        putchar(' ');
        print_quoted(format("%s=%s", dpshim__config_var(i)->name,
                            o->set.value[i]));
      }
    for (char **v = o->extra; *v; v++) {
      putchar(' ');
      print_quoted(*v);
    }
    first = 0;
  }
  for (char **a = argv; *a; a++, first = 0) {
    if (!first) putchar(' ');
    print_quoted(*a);
  }
  putchar('\n');
}

int main(int argc, char **argv) {
  options_t o = {0};
  if (dpshim__config_nvars() > NVARS_MAX) {
    fprintf(stderr, PROG ": built for at most %d variables\n", NVARS_MAX);
    return 2;
  }
  from_environment(&o.set);
  parse_args(&o, argc, argv);
  dpshim__config_t cfg;
  validate(&o.set, &cfg);
  derive_micro_batches(&o, &cfg);
  validate(&o.set, &cfg); /* the derived value, checked as the shim will */
  validate_python();
  o.extra = extra_vars(&o);
  const char *shim = find_lib(o.lib);
  if (access(shim, R_OK) != 0) {
    fprintf(stderr, PROG ": cannot read %s: %s (give --lib PATH)\n", shim,
            strerror(errno));
    return 2;
  }
  const char *ours = find_preload(&o, shim);
  char **cmd = build_argv(&o, ours);
  if (o.dry_run) {
    print_command(&o, ours, cmd);
    return 0;
  }
  /* PYTHONPATH goes in the launcher's environment too: a `-x PYTHONPATH`
   * later in the command then exports the same value. */
  for (char **v = o.extra; *v; v++) putenv(*v);
  if (!is_launcher(cmd[0])) setenv("LD_PRELOAD", preload_value(ours), 1);
  fflush(stdout);
  execvp(cmd[0], cmd);
  fprintf(stderr, PROG ": cannot run '%s': %s\n", cmd[0], strerror(errno));
  return 127;
}
