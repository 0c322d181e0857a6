/* The reference loader's hand-off, packload_next(), interposed: the real one
 * fills the pack, the shim balances it in place before the trainer sees it.
 *
 * This works because the trainer calls packload_next() in libpackload.so
 * across a shared-object boundary; a call inside one object cannot be
 * interposed by LD_PRELOAD. */
#include <dlfcn.h>
#include <string.h>

#include "packload.h"
#include "shim.h"

typedef packload_batch_t *(*packload_next_fn)(packload_t *);

static packload_next_fn real_next(void) {
  dpshim__state_t *st = &dpshim__state;
  pthread_mutex_lock(&st->lock);
  if (!st->real_packload_next && !st->packload_missing) {
    st->real_packload_next = dlsym(RTLD_NEXT, "packload_next");
    if (!st->real_packload_next) {
      st->packload_missing = 1;
      const char *why = dlerror();
      dpshim__say("cannot find the real packload_next (%s)",
                  why ? why : "not found");
    }
  }
  packload_next_fn fn; /* ISO C has no cast from void * to a function */
  memcpy(&fn, &st->real_packload_next, sizeof fn);
  pthread_mutex_unlock(&st->lock);
  return fn;
}

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
                          4, fields};
  dpshim__on_handoff(&batch);
  p->nsamples = batch.nsamples;
}

PACKLOAD_EXTERN packload_batch_t *packload_next(packload_t *loader) {
  packload_next_fn next = real_next();
  packload_batch_t *p = next ? next(loader) : NULL;
  if (p && dpshim__state.active) balance_pack(p);
  return p;
}
