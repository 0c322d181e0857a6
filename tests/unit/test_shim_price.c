/* What applying a plan costs (price.h): the line is a copy rate fitted on
 * the bytes copied, and copied_per_priced carries plans priced before their
 * repack from bytes as priced to bytes copied. */
#include <criterion/criterion.h>
#include <math.h>

#include "price.h"

#define FIXED 1e-3
#define RATE 2e9 /* bytes per second */

static double seconds(double copied) { return FIXED + copied / RATE; }

/* 60 applied hand-offs, each copying `ratio` times the bytes priced (1
 * to `spread` times `unit`), in the seconds the copy rate takes. */
static void learn(dpshim__price_t *p, double ratio, double unit, int spread) {
  dpshim__price_init(p);
  for (int k = 0; k < 60; k++) {
    double priced = unit * (1 + k % spread);
    dpshim__price_learn(p, priced, ratio * priced, seconds(ratio * priced));
  }
}

static void header_of(const dpshim__price_t *p, double price[3]) {
  price[0] = p->fixed_s;
  price[1] = p->per_byte_s;
  price[2] = p->copied_per_priced;
}

Test(shim_price, the_prior_prices_bytes_as_copied) {
  dpshim__price_t p;
  dpshim__price_init(&p);
  double price[3];
  header_of(&p, price);
  cr_assert_eq(p.copied_per_priced, 1);
  cr_assert_gt(p.per_byte_s, 0);
  cr_assert_float_eq(dpshim__price_plan(price, 1e8),
                     p.fixed_s + p.per_byte_s * 1e8, 1e-12);
}

/* A repack that copies twice what was priced: the line still learns the
 * copy rate, and the plan's price the seconds it took. */
Test(shim_price, learns_the_copy_rate_and_how_far_copies_are_from_the_price) {
  dpshim__price_t p;
  learn(&p, 2, 1e6, 7);
  cr_assert_float_eq(p.per_byte_s * RATE, 1, 1e-3);
  cr_assert_float_eq(p.fixed_s / FIXED, 1, 1e-2);
  cr_assert_float_eq(p.copied_per_priced, 2, 1e-3);
  double price[3];
  header_of(&p, price);
  cr_assert_float_eq(dpshim__price_plan(price, 3e6) / seconds(6e6), 1, 1e-2);
}

/* A repack that copies less than priced (holes filled) lowers the plan's
 * price below the copy line's for the same bytes. */
Test(shim_price, fills_that_copy_less_than_priced_lower_the_price) {
  dpshim__price_t p;
  learn(&p, 0.5, 4e6, 5);
  double price[3];
  header_of(&p, price);
  cr_assert_float_eq(p.copied_per_priced, 0.5, 1e-3);
  cr_assert_lt(dpshim__price_plan(price, 8e6),
               p.fixed_s + p.per_byte_s * 8e6);
}

Test(shim_price, measures_that_make_no_sense_are_ignored) {
  dpshim__price_t p, before;
  dpshim__price_init(&p);
  before = p;
  dpshim__price_learn(&p, -1, 1e6, 1e-3);
  dpshim__price_learn(&p, 1e6, NAN, 1e-3);
  dpshim__price_learn(&p, 1e6, 1e6, -1);
  cr_assert_eq(p.per_byte_s, before.per_byte_s);
  cr_assert_eq(p.fixed_s, before.fixed_s);
  cr_assert_eq(p.copied_per_priced, before.copied_per_priced);
}
