/* Encoder calls in flight, from each forward to its backward: the routes a
 * forward planned, kept so that its backward sends every embedding
 * gradient to the rank that encoded the image. Pure: no MPI.
 *
 * A pipeline schedule runs several forwards before their backwards (all
 * forwards then all backwards, or 1F1B): flights are kept in the order of
 * their forwards and found by the caller's key (a micro-batch's), so a
 * backward finds its own forward whatever the schedule; a backward whose
 * key has no forward in flight, or a forward reusing a key in flight, is
 * refused.
 */
#ifndef DPSHIM_SHIM_VIT_FLIGHT_H
#define DPSHIM_SHIM_VIT_FLIGHT_H

#include <stdint.h>

#include "vit_route.h"

/* One forward's routes: the group's images and where each was encoded,
 * and the caller's own record of the forward. */
typedef struct dpshim__vit_flight {
  uint64_t key;
  void *data;                   /* the caller's; not freed here */
  int32_t ranks;
  int64_t *first;               /* [ranks + 1] */
  dpshim__vit_image_t *images;  /* [first[ranks]] */
  int32_t *dest;                /* [first[ranks]] */
} dpshim__vit_flight_t;

typedef struct dpshim__vit_flights {
  dpshim__vit_flight_t *slot; /* in the order of their forwards */
  int32_t count, cap;
} dpshim__vit_flights_t;

void dpshim__vit_flights_init(dpshim__vit_flights_t *f);
/* Frees every flight still in the air, handing each one's data to drop
 * (may be NULL). */
void dpshim__vit_flights_free(dpshim__vit_flights_t *f,
                              void (*drop)(void *data));

/* Keeps a copy of the forward's group and plan (g may be NULL: a forward
 * that moved nothing) and `data` under `key`. Returns 0, DPSHIM_EINVAL
 * when `key` is already in flight, or DPSHIM_ENOMEM. */
int dpshim__vit_flights_push(dpshim__vit_flights_t *f, uint64_t key,
                             const dpshim__vit_group_t *g,
                             const int32_t *dest, void *data);

/* Takes the flight of `key` out into *out (the caller frees it with
 * dpshim__vit_flight_free). Returns 0, or DPSHIM_EINVAL when no forward
 * of that key is in flight. */
int dpshim__vit_flights_take(dpshim__vit_flights_t *f, uint64_t key,
                             dpshim__vit_flight_t *out);
void dpshim__vit_flight_free(dpshim__vit_flight_t *flight);
/* The flight of `key`, left in the air, or NULL. */
dpshim__vit_flight_t *dpshim__vit_flights_find(dpshim__vit_flights_t *f,
                                               uint64_t key);

#endif
