/* The exchange of an applied plan's samples, and the repack after it.
 *
 * Every sample that changes rank goes straight from the batch to its new
 * rank, field by field: one message per field and run of consecutive
 * samples with one destination (comm.h's exchange, point to point), so
 * nothing is packed. A rank receives by source rank then index. What it
 * receives lands past the rows its batch holds where its capacities allow:
 * in place, where the repack (repack.h) may fill the holes of what left
 * with it. Otherwise it lands in a staging buffer and is copied in after
 * the repack. A rank so copies what closes its holes, and what it receives
 * only where its buffers are too full to take it in place.
 */
#ifndef DPSHIM_SHIM_EXCHANGE_H
#define DPSHIM_SHIM_EXCHANGE_H

#include <stddef.h>
#include <stdint.h>

#include "batch_view.h"
#include "comm.h"
#include "repack.h"

/* The plan, as every rank of the group holds it. */
typedef struct dpshim__exchange_plan {
  const int64_t *first; /* [size + 1]: each rank's first sample */
  const int32_t *dest;  /* [first[size]]: each sample's rank after */
  const int32_t *meta;  /* [first[size] * width]: each sample's meta */
} dpshim__exchange_plan_t;

typedef struct dpshim__exchange_result {
  int32_t sent, received; /* samples */
  int staged;             /* what arrived was copied in from staging */
  int64_t copied;         /* bytes the repack and the staging copied */
  uint64_t sent_hash, received_hash; /* sums of the records' hashes */
  /* seconds in the exchange (less the hashes), the repack, the hashes */
  double exchange_s, repack_s, hash_s;
} dpshim__exchange_result_t;

typedef struct dpshim__exchange {
  int32_t *keep;      /* the samples that stay, then those received */
  int32_t *recv_meta; /* the received samples' metas */
  dpshim__comm_piece_t *send, *recv;
  unsigned char *staging;
  size_t keep_cap, recv_meta_cap, send_cap, recv_cap, staging_cap;
  dpshim__repack_t repack;
} dpshim__exchange_t;

/* Room to exchange the samples of batch b (b->capacity_samples at most
 * after): 0, or DPSHIM_ENOMEM, this rank's alone. */
int dpshim__exchange_reserve(dpshim__exchange_t *x, dpshim__comm_t *comm,
                             const dpshim_batch_t *b,
                             const dpshim__layout_t *l);
/* A staging buffer of `bytes` at least: 0, or DPSHIM_ENOMEM. */
int dpshim__exchange_reserve_staging(dpshim__exchange_t *x, size_t bytes);
/* Moves b's samples by plan p over the group; every rank of it calls this
 * with the same plan. A rank whose buffers cannot take what it receives
 * past their rows (its samples and rows held plus received above its
 * capacities: dpshim__policy_fits) stages it: its staging room must hold
 * what it receives.
 * `hash`: also the sums of the sent and received records' hashes (verify).
 * clock may be NULL (no times). 0, or the comm's error. */
int dpshim__exchange_run(dpshim__exchange_t *x, dpshim__comm_t *comm,
                         dpshim_batch_t *b, const dpshim__layout_t *l,
                         const dpshim__exchange_plan_t *p, int hash,
                         double (*clock)(void),
                         dpshim__exchange_result_t *out);
void dpshim__exchange_free(dpshim__exchange_t *x);

#endif
