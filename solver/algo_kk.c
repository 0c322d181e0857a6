/* `kk`: Karmarkar-Karp largest differencing into P subsets, as verl's seqlen
 * balancing (karmarkar_karp) does it. Every sample starts as a state of one
 * subset (and P-1 empty ones); the two states of largest spread (max - min
 * subset sum, empty subsets counting 0) are merged by pairing one's subsets
 * in descending order with the other's in ascending order, until one state
 * is left. Its subsets then go to ranks: the largest subset to the rank with
 * the least history (ties: lower rank). History plays no part in the
 * partition, and like verl, kk ignores the token cap.
 *
 * States are sparse: only non-empty subsets are stored, in a min-heap keyed
 * by (sum, id). Pairing dense descending/ascending arrays only ever unions
 * the m = a + b - P smallest subsets of each side, so the smaller state is
 * merged into the larger one in O(small * log P); a + b <= P concatenates.
 * A subset's id is its smallest sample index, which is also the head of its
 * sample list, so every tie is broken by something both sides agree on. */
#include <stdlib.h>
#include <string.h>

#include "internal.h"

typedef struct kk_set {
  double sum;
  int64_t id; /* smallest sample index in the subset, head of its list */
} kk_set_t;

typedef struct kk_state {
  kk_set_t *sets; /* min-heap of the non-empty subsets */
  int32_t n, cap;
  int owned;      /* sets was malloc'ed (else it points into the arena) */
  double max;     /* largest subset sum */
  double spread;
  int64_t born;   /* creation counter: ties in the state heap */
} kk_state_t;

typedef struct kk {
  const dpshim__ctx_t *ctx;
  kk_state_t *st;  /* [nsamples] slots; a merge reuses the larger's slot */
  int64_t *heap;   /* [nsamples] max-heap of slots by spread */
  int64_t hsize;
  int64_t *next;   /* [nsamples] sample lists of the subsets */
  int64_t *tail;   /* [nsamples] valid for subset ids */
  kk_set_t *low;   /* [ranks] scratch: the larger's extracted subsets */
  kk_set_t *small; /* [ranks] scratch: the smaller's subsets, sorted */
  int64_t born;
} kk_t;

static int set_less(kk_set_t a, kk_set_t b) {
  return a.sum < b.sum || (a.sum == b.sum && a.id < b.id);
}

static int cmp_asc(const void *pa, const void *pb) {
  kk_set_t a = *(const kk_set_t *)pa, b = *(const kk_set_t *)pb;
  return set_less(a, b) ? -1 : set_less(b, a) ? 1 : 0;
}

static int cmp_desc(const void *pa, const void *pb) { return cmp_asc(pb, pa); }

static void set_push(kk_state_t *s, kk_set_t v) {
  int32_t i = s->n++;
  while (i > 0 && set_less(v, s->sets[(i - 1) / 2])) {
    s->sets[i] = s->sets[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  s->sets[i] = v;
}

static kk_set_t set_pop(kk_state_t *s) {
  kk_set_t top = s->sets[0], v = s->sets[--s->n];
  int32_t i = 0;
  for (;;) {
    int32_t c = 2 * i + 1;
    if (c >= s->n) break;
    if (c + 1 < s->n && set_less(s->sets[c + 1], s->sets[c])) c++;
    if (!set_less(s->sets[c], v)) break;
    s->sets[i] = s->sets[c];
    i = c;
  }
  if (s->n > 0) s->sets[i] = v;
  return top;
}

/* Slot a comes out of the state heap before slot b. */
static int state_before(const kk_t *k, int64_t a, int64_t b) {
  const kk_state_t *x = &k->st[a], *y = &k->st[b];
  return x->spread > y->spread || (x->spread == y->spread && x->born < y->born);
}

static void state_push(kk_t *k, int64_t slot) {
  int64_t i = k->hsize++;
  while (i > 0 && state_before(k, slot, k->heap[(i - 1) / 2])) {
    k->heap[i] = k->heap[(i - 1) / 2];
    i = (i - 1) / 2;
  }
  k->heap[i] = slot;
}

static int64_t state_pop(kk_t *k) {
  int64_t top = k->heap[0], v = k->heap[--k->hsize], i = 0;
  for (;;) {
    int64_t c = 2 * i + 1;
    if (c >= k->hsize) break;
    if (c + 1 < k->hsize && state_before(k, k->heap[c + 1], k->heap[c])) c++;
    if (!state_before(k, k->heap[c], v)) break;
    k->heap[i] = k->heap[c];
    i = c;
  }
  if (k->hsize > 0) k->heap[i] = v;
  return top;
}

/* Empty subsets count as 0, so a state with fewer than P has min 0. */
static void set_spread(const kk_t *k, kk_state_t *s) {
  s->spread = s->n == k->ctx->ranks ? s->max - s->sets[0].sum : s->max;
}

static int reserve(kk_state_t *s, int32_t need, int32_t ranks,
                   dpshim__arena_t *arena) {
  if (need <= s->cap) return 0;
  arena->mallocs++; /* outside the arena, but counted with it */
  int32_t cap = s->cap > ranks / 2 ? ranks : 2 * s->cap;
  if (cap < need) cap = need;
  kk_set_t *p = s->owned ? realloc(s->sets, sizeof *p * (size_t)cap)
                         : malloc(sizeof *p * (size_t)cap);
  if (!p) return DPSHIM_ENOMEM;
  if (!s->owned) memcpy(p, s->sets, sizeof *p * (size_t)s->n);
  s->sets = p;
  s->cap = cap;
  s->owned = 1;
  return 0;
}

static void release(kk_state_t *s) {
  if (s->owned) free(s->sets);
  s->sets = NULL;
  s->owned = 0;
  s->n = s->cap = 0;
}

/* O(1) union of two subsets' sample lists; the smaller id names the result. */
static kk_set_t join(kk_t *k, kk_set_t a, kk_set_t b) {
  int64_t u = a.id < b.id ? a.id : b.id, v = a.id < b.id ? b.id : a.id;
  k->next[k->tail[u]] = v;
  k->tail[u] = k->tail[v];
  return (kk_set_t){a.sum + b.sum, u};
}

/* Merges slots x and y into the one with more subsets and returns it. The
 * dense rule pairs the t-th smallest of one with the (m-1-t)-th smallest of
 * the other for t < m; every other subset is paired with an empty one. */
static int64_t merge(kk_t *k, int64_t x, int64_t y, int *rc) {
  int32_t ranks = k->ctx->ranks;
  if (k->st[y].n > k->st[x].n) {
    int64_t t = x;
    x = y;
    y = t;
  }
  kk_state_t *L = &k->st[x], *S = &k->st[y];
  int32_t ks = S->n, m = L->n + ks - ranks > 0 ? L->n + ks - ranks : 0;
  *rc = reserve(L, L->n + ks - m, ranks, k->ctx->arena);
  if (*rc < 0) return x;
  memcpy(k->small, S->sets, sizeof *k->small * (size_t)ks);
  qsort(k->small, (size_t)ks, sizeof *k->small, cmp_asc);
  for (int32_t t = 0; t < m; t++) k->low[t] = set_pop(L);
  double max = L->max > S->max ? L->max : S->max;
  for (int32_t t = 0; t < m; t++) {
    kk_set_t u = join(k, k->low[t], k->small[m - 1 - t]);
    if (u.sum > max) max = u.sum;
    set_push(L, u);
  }
  for (int32_t t = m; t < ks; t++) set_push(L, k->small[t]);
  release(S);
  L->max = max;
  L->born = k->born++;
  set_spread(k, L);
  return x;
}

/* One state per sample, created in verl's order: length descending. */
static int init_states(kk_t *k) {
  const dpshim__ctx_t *ctx = k->ctx;
  int64_t n = ctx->nsamples;
  kk_set_t *one = DPSHIM__ALLOC(ctx, kk_set_t, n);
  if (!one) return DPSHIM_ENOMEM;
  for (int64_t s = 0; s < n; s++) {
    int64_t i = ctx->order[s];
    k->next[i] = -1;
    k->tail[i] = i;
    one[s] = (kk_set_t){ctx->cost[i], i};
    k->st[s] = (kk_state_t){.sets = &one[s], .n = 1, .cap = 1,
                            .max = ctx->cost[i], .born = k->born++};
    set_spread(k, &k->st[s]);
    state_push(k, s);
  }
  return 0;
}

typedef struct kk_rank {
  double history;
  int32_t rank;
} kk_rank_t;

static int cmp_rank(const void *pa, const void *pb) {
  const kk_rank_t *a = pa, *b = pb;
  if (a->history != b->history) return a->history < b->history ? -1 : 1;
  return (a->rank > b->rank) - (a->rank < b->rank);
}

/* Largest subset to the rank with the least history, and so on down. */
static int assign(kk_t *k, kk_state_t *f) {
  const dpshim__ctx_t *ctx = k->ctx;
  kk_rank_t *rk = DPSHIM__ALLOC(ctx, kk_rank_t, ctx->ranks);
  if (!rk) return DPSHIM_ENOMEM;
  for (int32_t r = 0; r < ctx->ranks; r++) rk[r] = (kk_rank_t){ctx->history[r], r};
  qsort(rk, (size_t)ctx->ranks, sizeof *rk, cmp_rank);
  qsort(f->sets, (size_t)f->n, sizeof *f->sets, cmp_desc);
  for (int32_t t = 0; t < f->n && t < ctx->ranks; t++)
    for (int64_t i = f->sets[t].id; i >= 0; i = k->next[i]) ctx->dest[i] = rk[t].rank;
  return 0;
}

static int run(kk_t *k) {
  int rc = init_states(k);
  while (rc == 0 && k->hsize > 1) {
    int64_t x = state_pop(k), y = state_pop(k);
    state_push(k, merge(k, x, y, &rc));
  }
  if (rc == 0 && k->hsize == 1) rc = assign(k, &k->st[k->heap[0]]);
  return rc;
}

int dpshim__algo_kk(const dpshim__ctx_t *ctx) {
  int64_t n = ctx->nsamples;
  kk_t k = {.ctx = ctx,
            .st = DPSHIM__ALLOC(ctx, kk_state_t, n),
            .heap = DPSHIM__ALLOC(ctx, int64_t, n),
            .next = DPSHIM__ALLOC(ctx, int64_t, n),
            .tail = DPSHIM__ALLOC(ctx, int64_t, n),
            .low = DPSHIM__ALLOC(ctx, kk_set_t, ctx->ranks),
            .small = DPSHIM__ALLOC(ctx, kk_set_t, ctx->ranks)};
  if (!k.st || !k.heap || !k.next || !k.tail || !k.low || !k.small)
    return DPSHIM_ENOMEM;
  memset(k.st, 0, sizeof *k.st * (size_t)n); /* release() on every slot */
  int rc = run(&k);
  for (int64_t s = 0; s < n; s++) release(&k.st[s]);
  if (rc == 0) rc = dpshim__fill_empty_ranks(ctx);
  return rc < 0 ? rc : DPSHIM_SKIP_NONE;
}
