/* reftrain's ledger: what one rank consumed and how long each part took,
 * kept locally during the run and combined on rank 0 only at the end, so the
 * stepping loop carries no traffic but the gradient all-reduce. */
#ifndef REFTRAIN_LEDGER_H
#define REFTRAIN_LEDGER_H

#include <stdbool.h>
#include <stdint.h>

#include "packload.h"

typedef struct ledger {
  int64_t steps;
  bool counts;    /* this rank stands for its DP slot (tp = cp = pp = 0) */
  bool keep_ids;  /* --ids-out or --check */
  bool check;
  uint64_t digest; /* sum mod 2^64 of the counted samples' hashes */
  int64_t tokens;  /* counted tokens */
  /* Per step. */
  double *step_ms; /* this rank's, hand-off start to all-reduce end */
  double *compute_ms, *handoff_ms, *wait_ms;
  int64_t *step_tokens;   /* this rank's tokens, counted or not */
  uint64_t *batch_hash;   /* ordered hash of this rank's batches */
  int64_t *produced;      /* [2*step]: samples, tokens its loader packed */
  int64_t *consumed;      /* [2*step]: samples, tokens it got */
  int64_t *step_nids;     /* ids kept for the step */
  /* The kept ids of all steps, in order. */
  uint64_t *ids;
  int64_t nids, cap_ids;
  int64_t bad[4];         /* samples by packload_verdict (check) */
} ledger_t;

int ledger_init(ledger_t *l, int64_t steps, bool counts, bool keep_ids,
                bool check);
void ledger_free(ledger_t *l);
/* Books one hand-off of step `step`: digest, tokens, ids, and with check each
 * sample verified against `pl`. -1 when out of memory. */
int ledger_batch(ledger_t *l, int64_t step, const packload_batch_t *b,
                 const packload_t *pl);
/* With check: what the loader had packed (samples, tokens; from
 * packload_produced()) when the last batch of step `step` was handed off. A
 * loader thread may have packed more by the end of the step: batches ahead. */
void ledger_produced(ledger_t *l, int64_t step, const int64_t produced[2]);

#endif
