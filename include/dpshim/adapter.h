/* For adapter libraries: the real hand-off behind the one they define.
 *
 * An adapter defines the loader's hand-off symbol, calls the real one, and
 * balances what it returns with dpshim_balance_batch() (<dpshim/batch.h>).
 * The real one is found lazily, at the first call, never in a constructor,
 * and relative to the adapter's own object (dlsym(RTLD_NEXT) from code
 * compiled into the adapter: these functions are inline for that reason).
 * A miss is said once on stderr and the call returns NULL: the adapter then
 * has nothing to call and should return as its loader would on failure.
 *
 *   static dpshim_next_t next_batch = DPSHIM_NEXT_INIT("myloader_next");
 *   batch_t *myloader_next(loader_t *l) {
 *     batch_t *(*real)(loader_t *);
 *     DPSHIM_NEXT(next_batch, real);
 *     batch_t *b = real ? real(l) : NULL;
 *     ... describe b as a dpshim_batch_t, dpshim_balance_batch() ...
 *   }
 *
 * Compile with _GNU_SOURCE defined (for RTLD_NEXT) and link with -ldl.
 */
#ifndef DPSHIM_ADAPTER_H
#define DPSHIM_ADAPTER_H

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#ifndef RTLD_NEXT
#error "define _GNU_SOURCE before any #include, for dlsym(RTLD_NEXT)"
#endif

typedef struct dpshim_next {
  const char *name;
  void *_Atomic address;
  atomic_int said;
} dpshim_next_t;

#define DPSHIM_NEXT_INIT(name) {(name), NULL, 0}

/* The next definition of s->name after this object's, or NULL. */
static inline void *dpshim_next_address(dpshim_next_t *s) {
  void *p = atomic_load(&s->address);
  if (p) return p;
  dlerror();
  p = dlsym(RTLD_NEXT, s->name);
  if (p) {
    atomic_store(&s->address, p);
  } else if (!atomic_exchange(&s->said, 1)) {
    const char *why = dlerror();
    fprintf(stderr, "dpshim: cannot find the real %s (%s)\n", s->name,
            why ? why : "not found");
  }
  return p;
}

/* fn = the next definition, as fn's function-pointer type. ISO C has no
 * cast from void * to a function pointer, hence the copy. */
#define DPSHIM_NEXT(s, fn)                                                    \
  do {                                                                        \
    void *dpshim_p_ = dpshim_next_address(&(s));                              \
    memcpy(&(fn), &dpshim_p_, sizeof(fn));                                    \
  } while (0)

#endif
