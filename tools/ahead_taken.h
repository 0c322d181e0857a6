/* The reference adapters' record of which batch the trainer took last
 * from each loader, where batches are balanced ahead (<dpshim/ahead.h>):
 * a batch fetched ahead is in a slot of the adapter's (its own buffers,
 * or the loader's where they are held long enough), with the loader's
 * counters as they were right after it, and the trainer asks those
 * counters as of the batch it took, not of the batches fetched since.
 *
 *   static void *held[DPSHIM_AHEAD_SLOTS];    // the batch each slot holds
 *   static ahead_taken_t taken[AHEAD_TAKEN_LOADERS];
 *   b = dpshim_ahead_next(fetch, loader);
 *   ahead_taken_note(taken, held, loader, b);
 *   int k = ahead_taken_slot(taken, loader);  // -1: none, or inline
 *
 * Trainer's thread only. Header-only: each adapter is a library of its
 * own, built from dpshim's public API.
 */
#ifndef DPSHIM_TOOLS_AHEAD_TAKEN_H
#define DPSHIM_TOOLS_AHEAD_TAKEN_H

#include <stddef.h>

#include "dpshim/ahead.h"

#define AHEAD_TAKEN_LOADERS 8

typedef struct ahead_taken {
  const void *loader;
  int slot; /* the slot of the batch taken last; -1: inline */
} ahead_taken_t;

/* loader's entry, else a free one (added: loader set), else NULL. */
static inline ahead_taken_t *ahead_taken_entry(ahead_taken_t *t,
                                               const void *loader, int add) {
  ahead_taken_t *free_one = NULL;
  for (int i = 0; i < AHEAD_TAKEN_LOADERS; i++) {
    if (t[i].loader == loader) return &t[i];
    if (!t[i].loader && !free_one) free_one = &t[i];
  }
  if (!add || !free_one) return NULL;
  free_one->loader = loader;
  return free_one;
}

/* Batch b, just taken from loader: the slot holding it (held[k] == b),
 * or -1 where none does (inline). */
static inline void ahead_taken_note(ahead_taken_t *t, void *const *held,
                                    const void *loader, const void *b) {
  ahead_taken_t *e = ahead_taken_entry(t, loader, 1);
  if (!e) return;
  e->slot = -1;
  for (int k = 0; b && k < DPSHIM_AHEAD_SLOTS; k++)
    if (held[k] == b) e->slot = k;
}

/* The slot of loader's batch taken last, or -1 (none, or inline). */
static inline int ahead_taken_slot(ahead_taken_t *t, const void *loader) {
  ahead_taken_t *e = ahead_taken_entry(t, loader, 0);
  return e ? e->slot : -1;
}

static inline void ahead_taken_forget(ahead_taken_t *t, const void *loader) {
  ahead_taken_t *e = ahead_taken_entry(t, loader, 0);
  if (e) e->loader = NULL, e->slot = -1;
}

#endif
