/* The ViT balance's plan and routes (shim/vit_route.h): images planned as
 * samples of their patches, ranks without images taking part, every image
 * encoded once, both exchanges' bytes adding up over the group, and the
 * patch cap held. */
#include <criterion/criterion.h>
#include <string.h>

#include "plan_fixture.h"
#include "vit_route.h"

#define MAXR 8
#define MAXI 64

typedef struct group_fixture {
  int64_t first[MAXR + 1];
  dpshim__vit_image_t images[MAXI];
  int32_t dest[MAXI];
  dpshim__vit_group_t g;
} group_fixture_t;

static dpshim__vit_planner_t planner;

static void setup(void) { dpshim__vit_planner_init(&planner); }
static void teardown(void) { dpshim__vit_planner_free(&planner); }
TestSuite(shim_vit_route, .init = setup, .fini = teardown);

/* count[r] images on rank r, of patches[] in turn. */
static void build(group_fixture_t *x, int32_t ranks, const int32_t *count,
                  const int64_t *patches) {
  memset(x, 0, sizeof *x);
  int64_t n = 0;
  for (int32_t r = 0; r < ranks; r++) {
    x->first[r] = n;
    for (int32_t k = 0; k < count[r]; k++, n++)
      x->images[n] = (dpshim__vit_image_t){patches[n], 10 * patches[n],
                                           patches[n] / 4, 0};
  }
  x->first[ranks] = n;
  x->g = (dpshim__vit_group_t){ranks, x->first, x->images};
}

static const dpshim__vit_settings_t QUADRATIC = {
    .algo = DPSHIM_ALGO_DEFAULT, .model = {1, 0, 0, 0, 0}};

static double max_load(const group_fixture_t *x, const int32_t *where) {
  double load[MAXR] = {0}, max = 0;
  for (int64_t i = 0; i < x->first[x->g.ranks]; i++)
    load[where[i]] += (double)x->images[i].patches * (double)x->images[i].patches;
  for (int32_t r = 0; r < x->g.ranks; r++) max = load[r] > max ? load[r] : max;
  return max;
}

static void own_ranks(const group_fixture_t *x, int32_t *where) {
  for (int32_t r = 0; r < x->g.ranks; r++)
    for (int64_t i = x->first[r]; i < x->first[r + 1]; i++) where[i] = r;
}

/* Every rank's counts, as each computes them, add up: what one sends,
 * another receives, and every image that leaves comes back as embeddings. */
static void check_counts(const group_fixture_t *x) {
  int32_t P = x->g.ranks;
  int64_t c[MAXR][4][MAXR];
  for (int32_t me = 0; me < P; me++) {
    dpshim__vit_counts_t k = {c[me][0], c[me][1], c[me][2], c[me][3]};
    dpshim__vit_counts(&x->g, x->dest, me, &k);
  }
  for (int32_t a = 0; a < P; a++)
    for (int32_t b = 0; b < P; b++) {
      cr_assert_eq(c[a][0][b], c[b][1][a], "inputs %d -> %d", a, b);
      cr_assert_eq(c[a][2][b], c[b][3][a], "embeddings %d -> %d", a, b);
      cr_assert_eq(c[a][0][a] + c[a][2][a], 0, "rank %d sends to itself", a);
    }
  for (int32_t r = 0; r < P; r++)
    for (int64_t i = x->first[r]; i < x->first[r + 1]; i++)
      cr_assert(x->dest[i] >= 0 && x->dest[i] < P, "image %lld: dest %d",
                (long long)i, x->dest[i]);
}

/* Rank 0 holds every image; ranks 1-3 none (text-only micro-batches): they
 * take part and receive, and the busiest rank's load falls. */
Test(shim_vit_route, ranks_without_images_receive_some) {
  group_fixture_t x;
  int32_t count[4] = {6, 0, 0, 0};
  int64_t patches[6] = {400, 300, 300, 200, 100, 100};
  build(&x, 4, count, patches);
  int rc = dpshim__vit_plan(&planner, &x.g, &QUADRATIC, x.dest);
  cr_assert_eq(rc, 1, "rc %d: %s", rc, planner.plan.message);
  int32_t home[MAXI];
  own_ranks(&x, home);
  cr_assert_lt(max_load(&x, x.dest), max_load(&x, home));
  cr_assert_eq(max_load(&x, x.dest), 400.0 * 400.0, "the largest image alone");
  check_counts(&x);
}

Test(shim_vit_route, no_image_anywhere_plans_nothing) {
  group_fixture_t x;
  int32_t count[3] = {0, 0, 0};
  build(&x, 3, count, NULL);
  cr_assert_eq(dpshim__vit_plan(&planner, &x.g, &QUADRATIC, x.dest), 0);
}

Test(shim_vit_route, balanced_images_stay_home) {
  group_fixture_t x;
  int32_t count[2] = {2, 2};
  int64_t patches[4] = {100, 50, 100, 50};
  build(&x, 2, count, patches);
  dpshim__vit_settings_t s = QUADRATIC;
  s.threshold = 0.1;
  cr_assert_eq(dpshim__vit_plan(&planner, &x.g, &s, x.dest), 0);
  int32_t home[MAXI];
  own_ranks(&x, home);
  cr_assert_arr_eq(x.dest, home, 4 * sizeof *home);
}

/* Random groups, some ranks without images, under a patch cap: every plan
 * routes every image once, never raises the busiest rank, and no rank
 * receives patches beyond the cap. */
Test(shim_vit_route, random_groups_under_a_patch_cap) {
  prng_t g = {77};
  for (int trial = 0; trial < 300; trial++) {
    group_fixture_t x;
    int32_t P = (int32_t)prng_range(&g, 1, MAXR), count[MAXR];
    int64_t patches[MAXI], n = 0, total = 0;
    for (int32_t r = 0; r < P; r++) {
      count[r] = prng_range(&g, 0, 2) ? (int32_t)prng_range(&g, 0, 6) : 0;
      for (int32_t k = 0; k < count[r]; k++, n++)
        total += patches[n] = prng_range(&g, 1, 4096);
    }
    build(&x, P, count, patches);
    dpshim__vit_settings_t s = QUADRATIC;
    s.cap_ratio = trial % 2 ? 1.5 : 0;
    int rc = dpshim__vit_plan(&planner, &x.g, &s, x.dest);
    cr_assert_geq(rc, 0, "trial %d: %s", trial, planner.plan.message);
    if (rc == 0) own_ranks(&x, x.dest);
    int32_t home[MAXI];
    own_ranks(&x, home);
    cr_assert_leq(max_load(&x, x.dest), max_load(&x, home), "trial %d", trial);
    check_counts(&x);
    if (rc == 1 && s.cap_ratio > 0) { /* a rank over the cap received none */
      int64_t held[MAXR] = {0}, got[MAXR] = {0};
      for (int64_t i = 0; i < n; i++) {
        held[x.dest[i]] += patches[i];
        got[x.dest[i]] += x.dest[i] != home[i] ? patches[i] : 0;
      }
      for (int32_t r = 0; r < P; r++)
        cr_assert(held[r] <= s.cap_ratio * (double)total / P || got[r] == 0,
                  "trial %d: rank %d holds %lld patches, %lld received",
                  trial, r, (long long)held[r], (long long)got[r]);
    }
  }
}

/* Above DPSHIM__VIT_EVERY_IMAGE_RANKS ranks the solver sees a rank's images
 * one by one only as far as the rank holds more than the mean: the images
 * of a rank at or below it are one sample and go together, and the plan
 * still brings every rank near the mean, within the cap. */
Test(shim_vit_route, large_groups_place_only_what_ranks_hold_above_the_mean) {
  enum { P = 4 * DPSHIM__VIT_EVERY_IMAGE_RANKS, HEAVY = 3, MOST = 3 * P };
  static int64_t first[P + 1];
  static dpshim__vit_image_t images[MOST];
  static int32_t dest[MOST];
  prng_t g = {5};
  int64_t n = 0, total = 0;
  for (int32_t r = 0; r < P; r++) {
    first[r] = n;
    int64_t count = r < HEAVY ? P / 2 : prng_range(&g, 0, 2);
    for (int64_t k = 0; k < count; k++, n++) {
      int64_t patches = prng_range(&g, 50, 100);
      images[n] = (dpshim__vit_image_t){patches, 10 * patches, patches / 4, 0};
      total += patches;
    }
  }
  first[P] = n;
  dpshim__vit_group_t grp = {P, first, images};
  dpshim__vit_settings_t s = QUADRATIC;
  s.cap_ratio = 3;
  cr_assert_eq(dpshim__vit_plan(&planner, &grp, &s, dest), 1, "%s",
               planner.plan.message);
  double load[P] = {0}, home[P] = {0}, sum = 0, biggest = 0;
  int64_t held[P] = {0};
  for (int32_t r = 0; r < P; r++)
    for (int64_t i = first[r]; i < first[r + 1]; i++) {
      double c = (double)images[i].patches * (double)images[i].patches;
      cr_assert(dest[i] >= 0 && dest[i] < P, "image %lld: dest %d",
                (long long)i, dest[i]);
      load[dest[i]] += c, home[r] += c, sum += c;
      held[dest[i]] += images[i].patches;
      biggest = c > biggest ? c : biggest;
    }
  for (int32_t r = 0; r < P; r++) {
    int64_t count = first[r + 1] - first[r];
    if (home[r] * P > sum && count > 0) continue;
    cr_assert_eq(planner.part[r].given, 0,
                 "rank %d at or below the mean: one sample", r);
    for (int64_t i = first[r]; i < first[r + 1]; i++)
      cr_assert_eq(dest[i], dest[first[r]], "rank %d's images apart", r);
  }
  for (int32_t r = 0; r < P; r++) {
    cr_assert_leq(load[r], sum / P + biggest, "rank %d", r);
    cr_assert_leq(held[r], s.cap_ratio * (double)total / P, "rank %d", r);
  }
}
