/* Encoder calls in flight (shim/vit_flight.h): each backward finds its own
 * forward's routes under both pipeline schedules, and a backward without a
 * forward, or a key reused in flight, is refused. */
#include <criterion/criterion.h>
#include <string.h>

#include "vit_flight.h"

static dpshim__vit_flights_t flights;

static void setup(void) { dpshim__vit_flights_init(&flights); }
static void teardown(void) { dpshim__vit_flights_free(&flights, NULL); }
TestSuite(shim_vit_flight, .init = setup, .fini = teardown);

/* Micro-batch `key`'s forward: 2 ranks, key + 1 images on rank 0, whose
 * patches and routes carry the key. */
static void forward(uint64_t key) {
  int64_t n = (int64_t)key + 1, first[3] = {0, n, n};
  dpshim__vit_image_t images[16];
  int32_t dest[16];
  for (int64_t i = 0; i < n; i++) {
    images[i] = (dpshim__vit_image_t){(int64_t)(100 * key + (uint64_t)i), 1, 1, 0};
    dest[i] = (int32_t)((key + (uint64_t)i) % 2);
  }
  dpshim__vit_group_t g = {2, first, images};
  cr_assert_eq(dpshim__vit_flights_push(&flights, key, &g, dest, NULL), 0);
}

/* Takes key's flight and checks that it is that forward's. */
static void backward(uint64_t key) {
  dpshim__vit_flight_t f;
  cr_assert_eq(dpshim__vit_flights_take(&flights, key, &f), 0,
               "no flight for key %llu", (unsigned long long)key);
  int64_t n = (int64_t)key + 1;
  cr_assert_eq(f.first[1], n);
  for (int64_t i = 0; i < n; i++) {
    cr_assert_eq(f.images[i].patches, (int64_t)(100 * key + (uint64_t)i));
    cr_assert_eq(f.dest[i], (int32_t)((key + (uint64_t)i) % 2));
  }
  dpshim__vit_flight_free(&f);
}

Test(shim_vit_flight, all_forwards_then_all_backwards) {
  for (uint64_t k = 0; k < 8; k++) forward(k);
  for (uint64_t k = 0; k < 8; k++) backward(k);
  cr_assert_eq(flights.count, 0);
}

/* 1F1B with 3 stages ahead: warm-up forwards, then one forward and one
 * backward in turn, then the cool-down backwards. */
Test(shim_vit_flight, one_forward_one_backward) {
  uint64_t next_f = 0, next_b = 0;
  for (; next_f < 3; next_f++) forward(next_f);
  for (; next_f < 10; next_f++, next_b++) {
    forward(next_f);
    backward(next_b);
  }
  for (; next_b < 10; next_b++) backward(next_b);
  cr_assert_eq(flights.count, 0);
}

Test(shim_vit_flight, backward_without_forward_is_refused) {
  forward(1);
  dpshim__vit_flight_t f;
  cr_assert_eq(dpshim__vit_flights_take(&flights, 2, &f), DPSHIM_EINVAL);
  backward(1);
  cr_assert_eq(dpshim__vit_flights_take(&flights, 1, &f), DPSHIM_EINVAL,
               "a backward takes its forward once");
}

Test(shim_vit_flight, key_reused_in_flight_is_refused) {
  forward(3);
  int64_t first[3] = {0, 0, 0};
  dpshim__vit_group_t g = {2, first, NULL};
  cr_assert_eq(dpshim__vit_flights_push(&flights, 3, &g, NULL, NULL), DPSHIM_EINVAL);
  backward(3);
}

/* Flights left in the air at the end are freed (LeakSanitizer checks). */
Test(shim_vit_flight, flights_left_in_the_air_are_freed) {
  for (uint64_t k = 0; k < 5; k++) forward(k);
  cr_assert_eq(flights.count, 5);
}
