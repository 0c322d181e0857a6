/* A binary min-heap of ranks ordered by (key, rank), the key being the
 * rank's load when it was pushed: the least-loaded rank first, the lowest
 * index among equals, so every rank pops the same order. A rank whose load
 * changed while in the heap is detected by dpshim__rank_heap_pop_fresh(). */
#ifndef DPSHIM_SOLVER_RANK_HEAP_H
#define DPSHIM_SOLVER_RANK_HEAP_H

#include <stdint.h>

typedef struct dpshim__rank_entry {
  double key;
  int32_t rank;
} dpshim__rank_entry_t;

typedef struct dpshim__rank_heap {
  dpshim__rank_entry_t *e; /* [capacity] */
  int32_t size;
  const double *load;      /* [ranks] the current loads */
} dpshim__rank_heap_t;

static inline int dpshim__rank_entry_before(dpshim__rank_entry_t a,
                                            dpshim__rank_entry_t b) {
  return a.key < b.key || (a.key == b.key && a.rank < b.rank);
}

static inline void dpshim__rank_heap_push(dpshim__rank_heap_t *h, int32_t r) {
  dpshim__rank_entry_t x = {h->load[r], r};
  int32_t i = h->size++;
  while (i > 0) {
    int32_t parent = (i - 1) / 2;
    if (!dpshim__rank_entry_before(x, h->e[parent])) break;
    h->e[i] = h->e[parent];
    i = parent;
  }
  h->e[i] = x;
}

static inline int32_t dpshim__rank_heap_pop(dpshim__rank_heap_t *h) {
  dpshim__rank_entry_t top = h->e[0], last = h->e[--h->size];
  int32_t i = 0;
  for (;;) {
    int32_t child = 2 * i + 1;
    if (child >= h->size) break;
    if (child + 1 < h->size &&
        dpshim__rank_entry_before(h->e[child + 1], h->e[child]))
      child++;
    if (!dpshim__rank_entry_before(h->e[child], last)) break;
    h->e[i] = h->e[child];
    i = child;
  }
  if (h->size > 0) h->e[i] = last;
  return top.rank;
}

/* Pops the least-loaded rank by its current load: an entry pushed before its
 * rank's load changed goes back in with the new key. */
static inline int32_t dpshim__rank_heap_pop_fresh(dpshim__rank_heap_t *h) {
  for (;;) {
    double key = h->e[0].key;
    int32_t r = dpshim__rank_heap_pop(h);
    if (key == h->load[r]) return r;
    dpshim__rank_heap_push(h, r);
  }
}

/* The least-loaded rank by its current load, left in the heap: popping it
 * and pushing it back unchanged would only rearrange the array, and the
 * order the heap pops in depends on its entries alone (distinct ranks). */
static inline int32_t dpshim__rank_heap_peek_fresh(dpshim__rank_heap_t *h) {
  for (;;) {
    dpshim__rank_entry_t top = h->e[0];
    if (top.key == h->load[top.rank]) return top.rank;
    dpshim__rank_heap_pop(h);
    dpshim__rank_heap_push(h, top.rank);
  }
}

#endif
