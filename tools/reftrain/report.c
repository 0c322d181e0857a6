/* reftrain's end of run; see report.h.
 *
 * Only MPI_Reduce, MPI_Gather and MPI_Gatherv here, never MPI_Allreduce: a
 * balancing shim takes MPI_Allreduce for the gradient sync and would time
 * these as a step. Every rank calls the same collectives in the same order
 * (the conditions are options, equal on all ranks). */
#include "report.h"

#include <inttypes.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int rt_slot_rank(const rt_layout_t *lay, int dp_i) {
  return dp_i * lay->tp * lay->cp;
}

/* ---- gathering --------------------------------------------------------- */

/* n items of each rank onto rank 0, rank-major; NULL elsewhere. Aborts on a
 * failed allocation: rank 0 is then waited for by every rank. */
static void *gather(const void *mine, int64_t n, MPI_Datatype type,
                    size_t size, const rt_layout_t *lay) {
  void *all = NULL;
  if (lay->rank == 0) {
    all = malloc((size_t)lay->world * (size_t)n * size + 1);
    if (!all) MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Gather(mine, (int)n, type, all, (int)n, type, 0, MPI_COMM_WORLD);
  return all;
}

/* ---- --stats-out ------------------------------------------------------- */

static void print_row_d(FILE *f, const char *key, const double *all, int64_t s,
                        const rt_layout_t *lay, int64_t steps) {
  fprintf(f, ",\"%s\":[", key);
  for (int r = 0; r < lay->world; r++)
    fprintf(f, "%s%.3f", r ? "," : "", all[(int64_t)r * steps + s]);
  fputc(']', f);
}

static int write_stats(const ledger_t *l, const rt_opts_t *o,
                       const rt_layout_t *lay) {
  int64_t n = l->steps;
  double *comp = gather(l->compute_ms, n, MPI_DOUBLE, sizeof(double), lay);
  double *hand = gather(l->handoff_ms, n, MPI_DOUBLE, sizeof(double), lay);
  double *wait = gather(l->wait_ms, n, MPI_DOUBLE, sizeof(double), lay);
  int64_t *tok = gather(l->step_tokens, n, MPI_INT64_T, sizeof(int64_t), lay);
  int rc = 0;
  if (lay->rank == 0) {
    FILE *f = fopen(o->stats_out, "w");
    for (int64_t s = 0; f && s < n; s++) {
      fprintf(f, "{\"step\":%" PRId64 ",\"step_ms\":%.3f", s, l->step_ms[s]);
      print_row_d(f, "compute_ms", comp, s, lay, n);
      print_row_d(f, "handoff_ms", hand, s, lay, n);
      print_row_d(f, "wait_ms", wait, s, lay, n);
      fputs(",\"tokens\":[", f);
      for (int r = 0; r < lay->world; r++)
        fprintf(f, "%s%" PRId64, r ? "," : "", tok[(int64_t)r * n + s]);
      fputs("]}\n", f);
    }
    if (!f || fclose(f) != 0) {
      fprintf(stderr, "reftrain: --stats-out: cannot write '%s'\n",
              o->stats_out);
      rc = 1;
    }
  }
  free(comp);
  free(hand);
  free(wait);
  free(tok);
  return rc;
}

/* ---- ids: --ids-out and the exactly-once check -------------------------- */

typedef struct all_ids {
  int64_t *step_nids; /* [world][steps] */
  uint64_t *ids;      /* every counted rank's ids, rank-major, step order */
  int64_t *rank_off;  /* [world + 1] offsets into ids */
} all_ids_t;

/* Rank 0 gets every rank's kept ids; counts travel as int, which bounds a
 * rank's ids to 2^31, far beyond any run. */
static all_ids_t gather_ids(const ledger_t *l, const rt_layout_t *lay) {
  all_ids_t a = {0};
  a.step_nids = gather(l->step_nids, l->steps, MPI_INT64_T, sizeof(int64_t),
                       lay);
  int *counts = NULL, *displs = NULL;
  if (lay->rank == 0) {
    counts = malloc((size_t)lay->world * sizeof *counts);
    displs = malloc((size_t)lay->world * sizeof *displs);
    a.rank_off = calloc((size_t)lay->world + 1, sizeof *a.rank_off);
    if (!counts || !displs || !a.rank_off) MPI_Abort(MPI_COMM_WORLD, 1);
    for (int r = 0; r < lay->world; r++) {
      int64_t c = 0;
      for (int64_t s = 0; s < l->steps; s++) c += a.step_nids[r * l->steps + s];
      counts[r] = (int)c;
      displs[r] = (int)a.rank_off[r];
      a.rank_off[r + 1] = a.rank_off[r] + c;
    }
    a.ids = malloc((size_t)a.rank_off[lay->world] * sizeof *a.ids + 1);
    if (!a.ids) MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Gatherv(l->ids, (int)l->nids, MPI_UINT64_T, a.ids, counts, displs,
              MPI_UINT64_T, 0, MPI_COMM_WORLD);
  free(counts);
  free(displs);
  return a;
}

static void free_ids(all_ids_t *a) {
  free(a->step_nids);
  free(a->ids);
  free(a->rank_off);
}

/* One line per step and counted rank: "step rank id id ...". */
static int write_ids(const all_ids_t *a, const rt_opts_t *o,
                     const rt_layout_t *lay, int64_t steps) {
  FILE *f = fopen(o->ids_out, "w");
  for (int64_t s = 0; f && s < steps; s++)
    for (int dp = 0; dp < lay->dp; dp++) {
      int r = rt_slot_rank(lay, dp);
      const uint64_t *id = a->ids + a->rank_off[r];
      for (int64_t t = 0; t < s; t++) id += a->step_nids[r * steps + t];
      fprintf(f, "%" PRId64 " %d", s, r);
      for (int64_t k = 0; k < a->step_nids[r * steps + s]; k++)
        fprintf(f, " %" PRIu64, id[k]);
      fputc('\n', f);
    }
  if (!f || fclose(f) != 0) {
    fprintf(stderr, "reftrain: --ids-out: cannot write '%s'\n", o->ids_out);
    return 1;
  }
  return 0;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return (x > y) - (x < y);
}

/* Ids delivered more than once over the whole run, all slots together. */
static int64_t count_duplicates(const all_ids_t *a, const rt_layout_t *lay) {
  int64_t n = a->rank_off[lay->world], dups = 0;
  uint64_t *ids = malloc((size_t)n * sizeof *ids + 1);
  if (!ids) MPI_Abort(MPI_COMM_WORLD, 1);
  memcpy(ids, a->ids, (size_t)n * sizeof *ids);
  qsort(ids, (size_t)n, sizeof *ids, cmp_u64);
  for (int64_t i = 1; i < n; i++) dups += ids[i] == ids[i - 1];
  free(ids);
  return dups;
}

/* ---- --check ------------------------------------------------------------ */

/* Rank-steps whose batches differ from their DP slot's counted rank: model-
 * parallel peers must be handed identical batches. */
static int64_t peer_mismatches(const ledger_t *l, const rt_layout_t *lay) {
  uint64_t *h = gather(l->batch_hash, l->steps, MPI_UINT64_T,
                       sizeof(uint64_t), lay);
  int64_t bad = 0;
  if (lay->rank == 0)
    for (int r = 0; r < lay->world; r++) {
      int dp_i = (r / (lay->tp * lay->cp)) % lay->dp;
      int ref = rt_slot_rank(lay, dp_i);
      for (int64_t s = 0; s < l->steps; s++)
        bad += h[(int64_t)r * l->steps + s] != h[(int64_t)ref * l->steps + s];
    }
  free(h);
  return bad;
}

/* Steps after which the counted ranks together hold other totals (samples or
 * tokens) than their loaders packed: something was dropped or duplicated. */
static int64_t conservation_failures(const ledger_t *l,
                                     const rt_layout_t *lay) {
  int64_t n = 4 * l->steps;
  int64_t *mine = calloc((size_t)n, sizeof *mine);
  int64_t *sum = calloc((size_t)n, sizeof *sum);
  if (!mine || !sum) MPI_Abort(MPI_COMM_WORLD, 1);
  if (l->counts) {
    memcpy(mine, l->produced, 2 * (size_t)l->steps * sizeof *mine);
    memcpy(mine + 2 * l->steps, l->consumed,
           2 * (size_t)l->steps * sizeof *mine);
  }
  MPI_Reduce(mine, sum, (int)n, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  int64_t bad = 0, got[2] = {0, 0};
  const int64_t *produced = sum, *consumed = sum + 2 * l->steps;
  for (int64_t s = 0; lay->rank == 0 && s < l->steps; s++) {
    got[0] += consumed[2 * s];
    got[1] += consumed[2 * s + 1];
    bad += got[0] != produced[2 * s] || got[1] != produced[2 * s + 1];
  }
  free(mine);
  free(sum);
  return bad;
}

static int64_t report_count(const char *what, int64_t n) {
  if (n) fprintf(stderr, "reftrain: check: %" PRId64 " %s\n", n, what);
  return n;
}

/* All ranks take part; rank 0 returns the number of errors, others 0. */
static int64_t run_checks(const ledger_t *l, const rt_layout_t *lay,
                          const all_ids_t *ids) {
  int64_t bad[4] = {0};
  MPI_Reduce(l->bad, bad, 4, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  int64_t peers = peer_mismatches(l, lay);
  int64_t cons = conservation_failures(l, lay);
  if (lay->rank != 0) return 0;
  return report_count("samples with an id no slot draws",
                      bad[PACKLOAD_BAD_ID]) +
         report_count("samples of the wrong length", bad[PACKLOAD_BAD_LENGTH]) +
         report_count("samples with a corrupted payload",
                      bad[PACKLOAD_BAD_PAYLOAD]) +
         report_count("duplicate deliveries", count_duplicates(ids, lay)) +
         report_count("rank-steps whose batches differ from their DP slot "
                      "peers'", peers) +
         report_count("steps where delivered and packed totals differ", cons);
}

/* ---- the JSON line ------------------------------------------------------ */

int rt_report(const ledger_t *l, const rt_opts_t *o, const rt_layout_t *lay,
              double elapsed_s, int thread_level) {
  int64_t tokens = 0;
  uint64_t digest = 0;
  MPI_Reduce(&l->tokens, &tokens, 1, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Reduce(&l->digest, &digest, 1, MPI_UINT64_T, MPI_SUM, 0,
             MPI_COMM_WORLD);
  int rc = 0;
  if (o->stats_out) rc |= write_stats(l, o, lay);
  all_ids_t ids = {0};
  if (o->ids_out || o->check) ids = gather_ids(l, lay);
  if (o->ids_out && lay->rank == 0)
    rc |= write_ids(&ids, o, lay, l->steps);
  int64_t errors = o->check ? run_checks(l, lay, &ids) : 0;
  free_ids(&ids);
  if (lay->rank != 0) return 0;
  double tgs = elapsed_s > 0 ? (double)tokens / lay->world / elapsed_s : 0;
  printf("{\"steps\":%" PRId64 ",\"tokens\":%" PRId64 ",\"tgs\":%.1f,"
         "\"step_ms_mean\":%.3f,\"consumed_digest\":\"%016" PRIx64 "\","
         "\"thread_level\":%d",
         l->steps, tokens, tgs, 1e3 * elapsed_s / (double)l->steps, digest,
         thread_level);
  if (o->check) printf(",\"check_errors\":%" PRId64, errors);
  printf("}\n");
  fflush(stdout);
  return rc || errors ? 1 : 0;
}
