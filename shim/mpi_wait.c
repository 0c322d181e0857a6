/* The waits and tests that complete non-blocking syncs.
 *
 * A trainer that ends its step with MPI_Iallreduce (DDP-style buckets: one
 * per bucket) waits for the requests later. The shim keeps the requests of
 * the syncs in flight; the first wait or test on one of them is the sync's
 * begin (the trainer starts waiting), and the completion of the last one
 * its end. Only the main thread's requests are kept, so the set needs no
 * lock; with none in flight every call goes straight to PMPI. */
#include <stdlib.h>
#include <string.h>

#include "shim.h"

void dpshim__sync_request(MPI_Request request) {
  dpshim__state_t *st = &dpshim__state;
  if (st->nsync < DPSHIM__MAX_SYNC_REQUESTS) st->sync[st->nsync++] = request;
}

static int kept(const dpshim__state_t *st, MPI_Request r) {
  for (int k = 0; k < st->nsync; k++)
    if (st->sync[k] == r) return 1;
  return 0;
}

/* The requests of one wait or test call, as they were before it. */
typedef struct watch {
  MPI_Request *copy;
  int n, any;
  MPI_Request local[16];
} watch_t;

static int watch_begin(watch_t *w, const MPI_Request *reqs, int n) {
  dpshim__state_t *st = &dpshim__state;
  w->any = 0;
  w->copy = NULL;
  if (st->nsync == 0 || !pthread_equal(pthread_self(), st->init_thread))
    return 0;
  for (int i = 0; i < n && !w->any; i++) w->any = kept(st, reqs[i]);
  if (!w->any) return 0;
  w->n = n;
  w->copy = n <= 16 ? w->local : malloc((size_t)n * sizeof *w->copy);
  if (!w->copy) return w->any = 0; /* only the step's timing is lost */
  memcpy(w->copy, reqs, (size_t)n * sizeof *reqs);
  dpshim__core_sync_begin(&st->core);
  return 1;
}

static void watch_done(watch_t *w, int index) {
  dpshim__state_t *st = &dpshim__state;
  if (!w->any || index < 0 || index >= w->n) return;
  for (int k = 0; k < st->nsync; k++) {
    if (st->sync[k] != w->copy[index]) continue;
    st->sync[k] = st->sync[--st->nsync];
    break;
  }
}

static void watch_end(watch_t *w) {
  dpshim__state_t *st = &dpshim__state;
  if (!w->any) return;
  if (st->nsync == 0) dpshim__core_sync_end(&st->core);
  if (w->copy != w->local) free(w->copy);
}

static void watch_all(watch_t *w) {
  for (int i = 0; i < w->n; i++) watch_done(w, i);
}

static void watch_some(watch_t *w, int count, const int *indices) {
  for (int k = 0; count != MPI_UNDEFINED && k < count; k++)
    watch_done(w, indices[k]);
}

DPSHIM_EXTERN int MPI_Wait(MPI_Request *req, MPI_Status *status) {
  watch_t w;
  if (!watch_begin(&w, req, 1)) return PMPI_Wait(req, status);
  int rc = PMPI_Wait(req, status);
  watch_done(&w, 0);
  watch_end(&w);
  return rc;
}

DPSHIM_EXTERN int MPI_Waitall(int n, MPI_Request reqs[], MPI_Status sts[]) {
  watch_t w;
  if (!watch_begin(&w, reqs, n)) return PMPI_Waitall(n, reqs, sts);
  int rc = PMPI_Waitall(n, reqs, sts);
  watch_all(&w);
  watch_end(&w);
  return rc;
}

DPSHIM_EXTERN int MPI_Waitany(int n, MPI_Request reqs[], int *index,
                              MPI_Status *status) {
  watch_t w;
  if (!watch_begin(&w, reqs, n)) return PMPI_Waitany(n, reqs, index, status);
  int rc = PMPI_Waitany(n, reqs, index, status);
  if (*index != MPI_UNDEFINED) watch_done(&w, *index);
  watch_end(&w);
  return rc;
}

DPSHIM_EXTERN int MPI_Waitsome(int n, MPI_Request reqs[], int *outcount,
                               int indices[], MPI_Status sts[]) {
  watch_t w;
  if (!watch_begin(&w, reqs, n))
    return PMPI_Waitsome(n, reqs, outcount, indices, sts);
  int rc = PMPI_Waitsome(n, reqs, outcount, indices, sts);
  watch_some(&w, *outcount, indices);
  watch_end(&w);
  return rc;
}

DPSHIM_EXTERN int MPI_Test(MPI_Request *req, int *flag, MPI_Status *status) {
  watch_t w;
  if (!watch_begin(&w, req, 1)) return PMPI_Test(req, flag, status);
  int rc = PMPI_Test(req, flag, status);
  if (*flag) watch_done(&w, 0);
  watch_end(&w);
  return rc;
}

DPSHIM_EXTERN int MPI_Testall(int n, MPI_Request reqs[], int *flag,
                              MPI_Status sts[]) {
  watch_t w;
  if (!watch_begin(&w, reqs, n)) return PMPI_Testall(n, reqs, flag, sts);
  int rc = PMPI_Testall(n, reqs, flag, sts);
  if (*flag) watch_all(&w);
  watch_end(&w);
  return rc;
}

DPSHIM_EXTERN int MPI_Testany(int n, MPI_Request reqs[], int *index,
                              int *flag, MPI_Status *status) {
  watch_t w;
  if (!watch_begin(&w, reqs, n))
    return PMPI_Testany(n, reqs, index, flag, status);
  int rc = PMPI_Testany(n, reqs, index, flag, status);
  if (*flag && *index != MPI_UNDEFINED) watch_done(&w, *index);
  watch_end(&w);
  return rc;
}

DPSHIM_EXTERN int MPI_Testsome(int n, MPI_Request reqs[], int *outcount,
                               int indices[], MPI_Status sts[]) {
  watch_t w;
  if (!watch_begin(&w, reqs, n))
    return PMPI_Testsome(n, reqs, outcount, indices, sts);
  int rc = PMPI_Testsome(n, reqs, outcount, indices, sts);
  watch_some(&w, *outcount, indices);
  watch_end(&w);
  return rc;
}

DPSHIM_EXTERN int MPI_Request_free(MPI_Request *req) {
  watch_t w;
  if (!watch_begin(&w, req, 1)) return PMPI_Request_free(req);
  watch_done(&w, 0); /* freed unwaited: it no longer ends the step */
  int rc = PMPI_Request_free(req);
  watch_end(&w);
  return rc;
}
