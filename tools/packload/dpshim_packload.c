/* libdpshim_packload.so, the reference loader's adapter: packload_next()
 * interposed on the public adapter API (<dpshim/adapter.h>,
 * <dpshim/batch.h>), like any third-party adapter; preloaded beside
 * libdpshim.so (dpshim-run --adapter packload).
 *
 * This works because the trainer calls packload_next() in libpackload.so
 * across a shared-object boundary; a call inside one object cannot be
 * interposed by LD_PRELOAD. */
#include "dpshim/adapter.h"
#include "dpshim/batch.h"
#include "packload.h"

static dpshim_next_t real_next = DPSHIM_NEXT_INIT("packload_next");

/* The pack as fields: three token-aligned, one per sample. */
static void balance_pack(packload_batch_t *p) {
  dpshim_field_t fields[] = {
      {"tokens", p->tokens, sizeof *p->tokens, p->cu_seqlens,
       p->capacity_tokens},
      {"labels", p->labels, sizeof *p->labels, p->cu_seqlens,
       p->capacity_tokens},
      {"loss_weights", p->loss_weights, sizeof *p->loss_weights,
       p->cu_seqlens, p->capacity_tokens},
      {"sample_ids", p->sample_ids, sizeof *p->sample_ids, NULL,
       p->capacity_samples},
  };
  dpshim_batch_t batch = {p->nsamples, p->capacity_samples, p->cu_seqlens,
                          4, fields, NULL};
  dpshim_balance_batch(&batch);
  p->nsamples = batch.nsamples;
}

PACKLOAD_EXTERN packload_batch_t *packload_next(packload_t *loader) {
  packload_batch_t *(*next)(packload_t *);
  DPSHIM_NEXT(real_next, next);
  packload_batch_t *p = next ? next(loader) : NULL;
  if (p) balance_pack(p);
  return p;
}
