/* dpshim-sim's output: a JSON line per (ranks, algo), a summary, --json. */
#include <stdlib.h>
#include <string.h>

#include "sim.h"

/* What became of the run's hand-offs: "skips" lists only the reasons seen. */
static void print_decisions(FILE *f, const sim_result_t *r) {
  fprintf(f, ",\"handoffs\":%lld,\"applied\":%lld,\"skips\":{",
          (long long)r->handoffs, (long long)r->applied);
  const char *sep = "";
  for (int k = 0; k < SIM_NSKIPS; k++) {
    if (!r->skipped[k]) continue;
    fprintf(f, "%s\"%s\":%lld", sep, sim_skip_name(k),
            (long long)r->skipped[k]);
    sep = ",";
  }
  fputc('}', f);
}

/* With --ranks-per-host only, so that a run on one host prints what it
 * always did: the hosts, and of the bytes moved per step those that change
 * host (the ViT balance's apart, as its bytes moved). */
static void print_hosts(FILE *f, const sim_result_t *r) {
  if (r->ranks_per_host == 0) return;
  fprintf(f, ",\"ranks_per_host\":%d,\"hosts\":%d,\"topology\":%d,"
          "\"bytes_inter_host_per_step\":%.0f,"
          "\"vit_bytes_inter_host_per_step\":%.0f",
          (int)r->ranks_per_host, (int)r->hosts, r->topology,
          r->bytes_inter_host, r->vit_bytes_inter_host);
}

/* Of the step, r's share s (seconds per step). */
static double share(const sim_result_t *r, double s) {
  return r->step_s > 0 ? s / r->step_s : 0;
}

static void print_fields(FILE *f, const sim_result_t *r) {
  /* shim_on_path: of the shim's time, what the step waits for (--ahead;
   * all of it inline) */
  fprintf(f,
          "{\"ranks\":%d,\"algo\":\"%s\",\"tgs\":%.1f,\"step_ms\":%.3f,"
          "\"compute_max_ms\":%.3f,\"shim_ms\":%.4f,\"shim_share\":%.6f,"
          "\"shim_on_path_ms\":%.4f,\"shim_on_path_share\":%.6f,"
          "\"solve_ms\":%.4f,\"allreduce_ms\":%.4f,"
          "\"bytes_moved_per_step\":%.0f,\"imbalance_before\":%.4f,"
          "\"imbalance_after\":%.4f",
          (int)r->ranks, sim_algo_name(r->algo), r->tgs, 1e3 * r->step_s,
          1e3 * r->compute_max_s, 1e3 * r->shim_s, share(r, r->shim_s),
          1e3 * r->shim_on_path_s, share(r, r->shim_on_path_s),
          1e3 * r->solve_s, 1e3 * r->allreduce_s, r->bytes_moved,
          r->imb_before, r->imb_after);
  print_decisions(f, r);
  /* The vision encoder's phase; bytes_moved_per_step above is the LLM
   * level's, vit_bytes_moved_per_step the ViT balance's (inputs,
   * embeddings and their gradients). */
  fprintf(f, ",\"vit_balance\":%d,\"vit_ms\":%.3f,\"vit_wait_ms\":%.3f,"
          "\"vit_shim_ms\":%.4f,\"vit_solve_ms\":%.4f,"
          "\"vit_bytes_moved_per_step\":%.0f,"
          "\"vit_calls\":%lld,\"vit_applied\":%lld,\"vit_retried\":%lld,"
          "\"vit_ceiling\":%.4f",
          r->algo.vit, 1e3 * r->vit_s, 1e3 * r->vit_wait_s,
          1e3 * r->vit_shim_s, 1e3 * r->vit_solve_s, r->vit_bytes_moved,
          (long long)r->vit_calls, (long long)r->vit_applied,
          (long long)r->vit_retried, r->vit_ceiling);
  print_hosts(f, r);
  fputc('}', f);
}

void sim_print_result(FILE *f, const sim_result_t *r) {
  print_fields(f, r);
  fputc('\n', f);
  fflush(f);
}

/* The result of `algo` at `ranks`, or NULL. */
static const sim_result_t *find(const sim_result_t *res, int n, int32_t ranks,
                                const char *algo) {
  for (int i = 0; i < n; i++)
    if (res[i].ranks == ranks && !strcmp(sim_algo_name(res[i].algo), algo))
      return &res[i];
  return NULL;
}

/* ahead: with --ahead, the shim's share on the step's path too. */
static void summary_row(FILE *f, const sim_result_t *res, int n,
                        int32_t ranks, int ahead) {
  const sim_result_t *none = find(res, n, ranks, "none");
  fprintf(f, "  %6d", (int)ranks);
  const char *algos[] = {"none", "seed", "default", "kk", "seed+vit",
                         "default+vit", "kk+vit"};
  for (int k = 0; k < 7; k++) {
    const sim_result_t *r = find(res, n, ranks, algos[k]);
    if (!r) continue;
    fprintf(f, "  %s %.0f", algos[k], r->tgs);
    if (none && r != none)
      fprintf(f, " (%+.1f%%, shim %.2f%%", 100 * (r->tgs / none->tgs - 1),
              100 * share(r, r->shim_s));
    if (none && r != none)
      fprintf(f, ahead ? ", on path %.2f%%)" : ")",
              100 * share(r, r->shim_on_path_s));
  }
  fputc('\n', f);
}

void sim_print_summary(FILE *f, const sim_result_t *res, int n,
                       const sim_config_t *c, const sim_net_t *net) {
  if (c->vision)
    fprintf(f, "summary: layout %s, %lld-token packs, model %s, %s cost",
            vlmload_layout_name(c->vlm.layout),
            (long long)c->vlm.pack_tokens, c->model.name,
            c->text_cost ? "text" : "vision");
  else
    fprintf(f, "summary: profile %s", c->lengths ? c->lengths : c->profile);
  fprintf(f,
          ", time scale %g, tp %d, %lld measured steps "
          "after warm-up %lld; network %.3g us, %.4g Gb/s, %s all-reduce "
          "of %lld B\n",
          c->time_scale, (int)c->tp,
          (long long)c->steps, (long long)c->warmup_last,
          1e6 * net->latency_s, 8e-9 * net->bandwidth,
          net->tree ? "tree" : "ring", (long long)c->grad_bytes);
  if (c->ranks_per_host > 0)
    fprintf(f, "  hosts of %d ranks: between them %.3g us, %.4g GB/s a "
            "host's link; plans %s the hosts\n", (int)c->ranks_per_host,
            1e6 * net->inter_latency_s, 1e-9 * net->inter_bandwidth,
            c->topology ? "told" : "not told");
  fprintf(f, "  TGS (tokens/GPU/s) by DP size; gain over none, shim share of "
          "the step%s:\n", c->ahead ? " (balanced ahead: and on its path)"
                                    : "");
  int32_t last = -1, top = 0;
  for (int i = 0; i < n; i++) {
    if (res[i].ranks != last)
      summary_row(f, res, n, last = res[i].ranks, c->ahead);
    if (res[i].ranks > top) top = res[i].ranks;
  }
  const sim_result_t *d = find(res, n, top, "default");
  if (d && !c->ahead)
    fprintf(f, "  default at DP %d: shim %.3f ms = %.2f%% of the %.1f ms "
            "step (target <= 1%%): %s\n", (int)top, 1e3 * d->shim_s,
            100 * d->shim_s / d->step_s, 1e3 * d->step_s,
            d->shim_s <= 0.01 * d->step_s ? "met" : "NOT met");
  if (d && c->ahead)
    fprintf(f, "  default at DP %d, %d ahead: shim %.3f ms, on the step's "
            "path %.3f ms = %.3f%% of the %.1f ms step\n", (int)top,
            (int)c->ahead, 1e3 * d->shim_s, 1e3 * d->shim_on_path_s,
            100 * share(d, d->shim_on_path_s), 1e3 * d->step_s);
  if (c->vision) {
    fputs("  the most an encoder balance could cut default's compute by (to "
          "the slowest rank's LLM part, or the mean):", f);
    const char *sep = "";
    for (int i = 0; i < n; i++)
      if (!strcmp(sim_algo_name(res[i].algo), "default")) {
        fprintf(f, "%s DP %d %.1f%%", sep, (int)res[i].ranks,
                100 * (1 - 1 / (1 + res[i].vit_ceiling)));
        sep = ",";
      }
    fputc('\n', f);
  }
  if (d && c->ranks_per_host > 0)
    fprintf(f, "  default at DP %d on %d hosts: %.4g of %.4g MB moved per "
            "step cross hosts\n", (int)top, (int)d->hosts,
            1e-6 * d->bytes_inter_host, 1e-6 * d->bytes_moved);
}

int sim_write_json(const char *path, const sim_result_t *res, int n) {
  FILE *f = fopen(path, "w");
  if (!f) {
    fprintf(stderr, SIM_PROG ": --json: cannot write '%s'\n", path);
    return -1;
  }
  fputs("[\n", f);
  for (int i = 0; i < n; i++) {
    print_fields(f, &res[i]);
    fputs(i + 1 < n ? ",\n" : "\n", f);
  }
  fputs("]\n", f);
  if (fclose(f) != 0) {
    fprintf(stderr, SIM_PROG ": --json: cannot write '%s'\n", path);
    return -1;
  }
  return 0;
}
