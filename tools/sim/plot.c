/* --png: TGS against DP size, one line per algorithm, through gnuplot.
 *
 * gnuplot reads its script and the data inline from a pipe; it is looked up
 * first, because popen() of a missing program still "succeeds". */
#include <stdlib.h>
#include <string.h>

#include "sim.h"

static int have_gnuplot(void) {
  return system("command -v gnuplot >/dev/null 2>&1") == 0;
}

/* The distinct algorithms, in their first order of appearance. */
static int algos_of(const sim_result_t *res, int n, sim_algo_t *out) {
  int k = 0;
  for (int i = 0; i < n; i++) {
    int seen = 0;
    for (int j = 0; j < k; j++)
      seen |= !strcmp(sim_algo_name(out[j]), sim_algo_name(res[i].algo));
    if (!seen && k < SIM_MAX_LIST) out[k++] = res[i].algo;
  }
  return k;
}

/* What the runs drew: a VLM layout and preset, a lengths file or a text
 * profile. */
static void workload_name(const sim_config_t *c, char *out, size_t len) {
  static const char *const layout[] = {"internvl", "qwen2vl", "qwen3vl"};
  if (c->vision)
    snprintf(out, len, "%s, %s", layout[c->vlm.layout], c->model.name);
  else
    snprintf(out, len, "%s", c->lengths ? "lengths file" : c->profile);
}

static void write_script(FILE *g, const char *path, const sim_result_t *res,
                         int n, const sim_config_t *c) {
  sim_algo_t algos[SIM_MAX_LIST];
  int k = algos_of(res, n, algos);
  char workload[128];
  workload_name(c, workload, sizeof workload);
  fprintf(g,
          "set terminal png size 900,600\n"
          "set output '%s'\n"
          "set title 'dpshim-sim: %s, time scale %g'\n"
          "set logscale x 2\n"
          "set xlabel 'DP ranks'\n"
          "set ylabel 'TGS (tokens per GPU per second)'\n"
          "set key bottom left\n"
          "set grid\n",
          path, workload, c->time_scale);
  /* Room at both ends so the outer tics show; TGS from 0 so that gains
   * look their true size. */
  int32_t lo = res[0].ranks, hi = res[0].ranks;
  for (int i = 1; i < n; i++) {
    if (res[i].ranks < lo) lo = res[i].ranks;
    if (res[i].ranks > hi) hi = res[i].ranks;
  }
  fprintf(g, "set xrange [%g:%g]\nset yrange [0:*]\n", lo / 1.3, hi * 1.3);
  /* A tic at every simulated DP size, not only at the powers of 4. */
  fputs("set xtics (", g);
  for (int i = 0; i < n; i++)
    if (i == 0 || res[i].ranks != res[i - 1].ranks)
      fprintf(g, "%s%d", i ? ", " : "", (int)res[i].ranks);
  fputs(")\nplot ", g);
  for (int a = 0; a < k; a++)
    fprintf(g, "%s'-' using 1:2 with linespoints title '%s'",
            a ? ", " : "", sim_algo_name(algos[a]));
  fputc('\n', g);
  for (int a = 0; a < k; a++) {
    for (int i = 0; i < n; i++)
      if (!strcmp(sim_algo_name(res[i].algo), sim_algo_name(algos[a])))
        fprintf(g, "%d %.3f\n", (int)res[i].ranks, res[i].tgs);
    fputs("e\n", g);
  }
}

int sim_plot_png(const char *path, const sim_result_t *res, int n,
                 const sim_config_t *c) {
  if (strchr(path, '\'')) {
    fprintf(stderr, SIM_PROG ": --png: a path without quotes, got '%s'\n", path);
    return -1;
  }
  if (!have_gnuplot()) {
    fprintf(stderr, SIM_PROG ": --png: gnuplot not found (Debian: apt-get "
            "install gnuplot-nox); no plot written\n");
    return -1;
  }
  FILE *g = popen("gnuplot", "w");
  if (!g) {
    fprintf(stderr, SIM_PROG ": --png: cannot start gnuplot\n");
    return -1;
  }
  write_script(g, path, res, n, c);
  if (pclose(g) != 0) {
    fprintf(stderr, SIM_PROG ": --png: gnuplot failed writing '%s'\n", path);
    return -1;
  }
  return 0;
}
