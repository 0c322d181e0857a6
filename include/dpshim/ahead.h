/* Balancing ahead: a loader the shim may call before the trainer asks.
 *
 * An adapter whose loader can be called from another thread, ahead of the
 * trainer, declares it by routing its hand-off through dpshim_ahead_next().
 * The shim then calls the adapter's fetch() on a thread of its own, up to
 * DPSHIM_AHEAD batches (1 by default) ahead of the trainer's calls, so the
 * next batch is gathered, planned and exchanged while the trainer computes
 * this one; the trainer's call takes the balanced batch from a queue. Where
 * that cannot be (DPSHIM_AHEAD=0, MPI without MPI_THREAD_MULTIPLE, the ViT
 * balance on, a call from a thread other than MPI_Init's, balancing off),
 * fetch() runs in the trainer's call, inline, as a plain adapter would.
 *
 *   static void *fetch(void *loader, int slot) {
 *     batch_t *b = real_next(loader);         // the loader's own call
 *     if (!b) return NULL;                     // the shim agrees its end
 *     if (slot >= 0) b = copy_into(slot, b);   // a buffer of the adapter's
 *     ... describe b, dpshim_balance_batch() ...
 *     return b;
 *   }
 *   batch_t *myloader_next(loader_t *l) { return dpshim_ahead_next(fetch, l); }
 *   void myloader_close(loader_t *l) {
 *     dpshim_ahead_close(fetch, l);            // before the loader goes
 *     real_close(l);
 *   }
 *
 * fetch(ctx, slot) makes exactly one hand-off (dpshim_balance_batch() or
 * dpshim_balance_fail()) for each batch it returns, and none when it
 * returns NULL (its loader ended: the shim then fails that hand-off on
 * every rank, so no rank waits, and the trainer's call returns NULL).
 * slot >= 0 (below DPSHIM_AHEAD_SLOTS) names a buffer of the adapter's
 * that must hold the batch until the trainer calls for `ctx` again:
 * the trainer holds one batch while the others wait, and a loader that
 * reuses its buffers at every call must be copied out. Slots are not
 * shared between loaders; few are used (DPSHIM_AHEAD + 1 a loader), so
 * allocate them at their first use. slot < 0: inline, or one batch at a
 * time: the loader's own buffers will do. The shim calls fetch() for one
 * loader at a time, in the order of the trainer's calls, so every rank
 * hands off alike.
 */
#ifndef DPSHIM_AHEAD_H
#define DPSHIM_AHEAD_H

#include "dpshim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The most batches DPSHIM_AHEAD may ask for, and the slots fetch() may
 * be given (DPSHIM_AHEAD_MAX + 1 for each of up to 8 loaders at once). */
#define DPSHIM_AHEAD_MAX 8
#define DPSHIM_AHEAD_SLOTS (8 * (DPSHIM_AHEAD_MAX + 1))

typedef void *(*dpshim_fetch_t)(void *ctx, int slot);

/* The trainer's call: the next batch of loader `ctx`, balanced ahead (or
 * inline, see above), or NULL where its loader ended. */
DPSHIM_EXTERN void *dpshim_ahead_next(dpshim_fetch_t fetch, void *ctx);

/* How many batches the shim may fetch ahead of the trainer's calls: a
 * batch the trainer holds may see that many further calls of its loader
 * before the trainer calls again. 0 where the hand-off is inline
 * (DPSHIM_AHEAD=0, balancing or MPI_THREAD_MULTIPLE missing, the ViT
 * balance on). Before MPI_Init it is read from the settings alone (what
 * MPI will provide is not known yet): an adapter may size its loader's
 * buffers by it when the loader opens, and then need no copies. */
DPSHIM_EXTERN int dpshim_ahead_depth(void);

/* The loader `ctx` is about to be closed: the batches fetched ahead for it
 * are finished and dropped, so that fetch() is not called for it again.
 * Returns 0. */
DPSHIM_EXTERN int dpshim_ahead_close(dpshim_fetch_t fetch, void *ctx);

#ifdef __cplusplus
}
#endif
#endif
