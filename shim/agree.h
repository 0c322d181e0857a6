/* Errors agreed across a group, the one protocol of both balance levels.
 *
 * A rank that fails alone would leave the others waiting in the next
 * collective, so every failure is agreed first: every rank learns every
 * rank's status, and the first failing rank's message (prefixed "rank ID: ",
 * its world rank) becomes every rank's, for rank 0 to print once. The
 * messages travel only when some rank failed.
 */
#ifndef DPSHIM_SHIM_AGREE_H
#define DPSHIM_SHIM_AGREE_H

#include <stddef.h>
#include <stdint.h>

#include "comm.h"

#define DPSHIM__MESSAGE_BYTES 176 /* a rank's own message and its prefix */

typedef struct dpshim__agree {
  int32_t *status; /* [size]: every rank's, gathered or filled by the caller */
  char *messages;  /* [size * DPSHIM__MESSAGE_BYTES] */
  int32_t size;
} dpshim__agree_t;

/* Room for a group of `size`; 0 or DPSHIM_ENOMEM (then nothing is held). */
int dpshim__agree_reserve(dpshim__agree_t *a, int32_t size);
void dpshim__agree_free(dpshim__agree_t *a);

/* With a->status filled (e.g. from headers every rank gathered): 0 when no
 * rank failed; else the first failing rank's status, its message in
 * out[cap]. `mine` is this rank's message, used when it failed. A failed
 * collective returns its own code (DPSHIM_EMPI), out saying so. Collective
 * over comm when some rank failed. */
int dpshim__agree_settle(dpshim__agree_t *a, dpshim__comm_t *comm,
                         const char *mine, char *out, size_t cap);

/* Gathers every rank's status, then settles. Collective over comm. */
int dpshim__agree(dpshim__agree_t *a, dpshim__comm_t *comm, int32_t status,
                  const char *mine, char *out, size_t cap);

#endif
