/* The warm-up fit: every rank's warm-up points to world rank 0, one cost
 * model (and the ViT's) to every rank.
 *
 * Two ways to fit the LLM's cost (<dpshim/fit.h>): from each rank's own
 * compute time (DPSHIM_FIT_RANKS) and from each step's time, which the
 * slowest rank sets (DPSHIM_FIT_SEED). Hand-off steps see only the second:
 * the sync the trainer waits in is not the shim's to time. Sync steps see
 * both, and with DPSHIM_FIT=auto both are made and the one that predicts
 * the step times better is taken: a sync the shim sees only after the
 * real one (a loss all-reduce after a NCCL sync) makes every rank's
 * "compute" the same, and the per-rank fit then predicts nothing.
 */
#ifndef DPSHIM_SHIM_WARMUP_H
#define DPSHIM_SHIM_WARMUP_H

#include "core.h"

/* Collective over the world, at an agreed hand-off: fits c->points and
 * sets c's model, fit and ViT model. Once settled it is a refit (hand-off
 * steps, the balanced steps' points too): the LLM's model alone, kept only
 * where the fit succeeds. 0 or the seam's error. */
int dpshim__warmup_fit(dpshim__core_t *c);

#endif
