/* dpshim-sim: reftrain with and without libdpshim.so at DP sizes beyond
 * this machine; see sim.h for the pieces and --help for the options. */
#include <stdlib.h>

#include "sim.h"

/* Simulates and prices every DP size; results in res (ranks-major). */
static int sweep(const sim_options_t *o, sim_result_t *res) {
  char err[512];
  sim_run_t runs[SIM_MAX_LIST];
  int n = 0;
  for (int k = 0; k < o->nranks; k++) {
    int rc = sim_simulate(&o->cfg, o->ranks[k], o->algos, o->nalgos, runs,
                          err, sizeof err);
    for (int a = 0; a < o->nalgos; a++) {
      if (rc == 0) {
        res[n] = sim_price_run(&o->net, &o->cfg, &runs[a]);
        sim_print_result(stdout, &res[n++]);
      }
      sim_run_free(&runs[a]);
    }
    if (rc < 0) {
      fprintf(stderr, SIM_PROG ": %s\n", err);
      return -1;
    }
  }
  return n;
}

int main(int argc, char **argv) {
  sim_options_t o;
  sim_parse(argc, argv, &o);
  if (o.calibrate) return sim_calibrate(&o);
  sim_result_t *res = calloc((size_t)o.nranks * (size_t)o.nalgos, sizeof *res);
  if (!res) {
    fprintf(stderr, SIM_PROG ": out of memory\n");
    return 1;
  }
  int n = sweep(&o, res), rc = n < 0;
  if (n > 0) {
    sim_print_summary(stderr, res, n, &o.cfg, &o.net);
    if (o.json && sim_write_json(o.json, res, n) < 0) rc = 1;
    if (o.png && sim_plot_png(o.png, res, n, &o.cfg) < 0) rc = 1;
  }
  free(res);
  return rc;
}
