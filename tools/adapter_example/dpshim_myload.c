/* libdpshim_myload.so: lets libdpshim.so balance a loader it does not know.
 *
 * Copy this file for your own loader. It defines the loader's hand-off
 * symbol, myload_next(), with the same signature; preloaded, it takes
 * precedence over the loader's own, which it calls, then describes the
 * returned batch to dpshim_balance_batch() and hands the balanced batch to
 * the trainer.
 *
 *   LD_PRELOAD=libdpshim.so:libdpshim_myload.so mpirun ... ./mytrain
 *
 * libdpshim.so must be preloaded itself (it wraps MPI_Init and the gradient
 * all-reduce, which needs it ahead of libmpi); this library only adds the
 * hand-off. It works because the trainer calls myload_next() in
 * libmyload.so across a shared-object boundary: a call that stays inside
 * one object cannot be interposed.
 */
#include "dpshim/adapter.h"
#include "dpshim/batch.h"
#include "myload.h"

/* The loader's own myload_next(), the next definition after this
 * library's: resolved at the first call, not in a constructor, as this
 * library is also preloaded into mpirun, bash and whatever else the launch
 * starts. */
static dpshim_next_t real_next = DPSHIM_NEXT_INIT("myload_next");

/* The batch as dpshim fields. Token-aligned fields share cu_seqlens (the
 * pointer itself: that is how the shim tells them apart); patches have
 * their own offsets; NULL offsets mean one row per sample. Every field,
 * including the ids, must be listed: the shim moves only what it is told
 * about, and each capacity must be that of the buffer behind the field. */
static void balance(myload_batch_t *b) {
  dpshim_field_t fields[] = {
      {"input_ids", b->input_ids, sizeof *b->input_ids, b->cu_seqlens,
       b->capacity_tokens},
      {"position_ids", b->position_ids, sizeof *b->position_ids,
       b->cu_seqlens, b->capacity_tokens},
      {"patches", b->patches, MYLOAD_PATCH_DIM * sizeof *b->patches,
       b->patch_offsets, b->capacity_patches},
      {"sample_ids", b->sample_ids, sizeof *b->sample_ids, NULL,
       b->capacity_samples},
  };
  dpshim_batch_t batch = {b->nsamples, b->capacity_samples, b->cu_seqlens,
                          (int32_t)(sizeof fields / sizeof *fields), fields, NULL};
  /* Collective over the DP group; a no-op when balancing is off. On error
   * every rank keeps its batch as it was, and the shim has said why, so
   * the return code needs no handling here. */
  dpshim_balance_batch(&batch);
  /* The offsets arrays were rewritten in place; the count was not. */
  b->nsamples = batch.nsamples;
}

MYLOAD_EXTERN myload_batch_t *myload_next(myload_t *loader) {
  myload_batch_t *(*next)(myload_t *);
  DPSHIM_NEXT(real_next, next);
  myload_batch_t *b = next ? next(loader) : NULL;
  if (b) balance(b);
  return b;
}
