/* Diagnostics of the core: the original's verbose blocks, the hand-off's
 * error line (each DP group's first, from its DP rank 0, naming the world
 * rank), the fit, and the summary at close (collective over the world,
 * printed by world rank 0). */
#ifndef DPSHIM_SHIM_REPORT_H
#define DPSHIM_SHIM_REPORT_H

#include "core.h"

void dpshim__report_handoff(dpshim__core_t *c, int rc,
                            const dpshim__balance_report_t *rep);
void dpshim__report_fit(const dpshim__core_t *c, int rc);
/* An encoder call: its agreed error, or (verbose) the original's
 * [DP Balance][ViT] block. */
void dpshim__report_vit(const dpshim__core_t *c,
                        const dpshim__vit_report_t *r);
void dpshim__report_vit_fit(const dpshim__core_t *c, int rc);
/* Said once: a loader thread's hand-offs leave nothing to fit. */
void dpshim__report_no_fit(const dpshim__core_t *c);
void dpshim__report_summary(dpshim__core_t *c);

#endif
