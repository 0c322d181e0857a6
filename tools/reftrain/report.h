/* reftrain's end of run: combines every rank's ledger on rank 0, writes the
 * optional files, runs the --check comparisons and prints the JSON line. */
#ifndef REFTRAIN_REPORT_H
#define REFTRAIN_REPORT_H

#include "ledger.h"
#include "options.h"

/* Megatron order: rank = tp_i + tp * (cp_i + cp * (dp_i + dp * pp_i)). */
typedef struct rt_layout {
  int rank, world;
  int tp, cp, dp, pp;
  int tp_i, cp_i, dp_i, pp_i;
} rt_layout_t;

/* The rank that stands for DP slot `dp_i` (tp = cp = pp = 0). */
int rt_slot_rank(const rt_layout_t *lay, int dp_i);

/* Collective over MPI_COMM_WORLD. elapsed_s: rank 0's stepping-loop time;
 * thread_level: what MPI_Query_thread reported after init.
 * Returns the exit status: 0, or 1 on a check failure or an unwritable file. */
int rt_report(const ledger_t *l, const rt_opts_t *o, const rt_layout_t *lay,
              double elapsed_s, int thread_level);

#endif
