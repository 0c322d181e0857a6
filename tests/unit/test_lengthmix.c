/* The bench's random length mixes (tools/lengthmix.c) and their packing
 * through lengthgen: a mix is a function of (seed, index) alone, its
 * lengths stay in [1, pack], packs never overflow, the per-pack sample limit
 * holds, and the components' shares follow the weights. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "lengthgen.h"
#include "lengthmix.h"

#define MIXES 200
#define DRAWS 20000

static int mixes_equal(const lengthmix_t *x, const lengthmix_t *y) {
  if (x->pack != y->pack || x->ncomponents != y->ncomponents) return 0;
  for (int k = 0; k < x->ncomponents; k++) {
    const lengthmix_component_t *a = &x->component[k], *b = &y->component[k];
    if (a->kind != b->kind || a->weight != b->weight ||
        a->median != b->median || a->sigma != b->sigma || a->lo != b->lo ||
        a->hi != b->hi)
      return 0;
  }
  return 1;
}

Test(lengthmix, same_seed_and_index_same_mix) {
  for (int32_t i = 1; i <= MIXES; i++) {
    lengthmix_t a, b;
    lengthmix_make(1, i, &a);
    /* Another mix in between: no state carries from one to the next. */
    lengthmix_make(1, i + 1000, &b);
    lengthmix_make(1, i, &b);
    cr_assert(mixes_equal(&a, &b), "mix %d differs between two makes", i);
  }
}

Test(lengthmix, seed_and_index_both_matter) {
  lengthmix_t a, b, c;
  int differ_index = 0, differ_seed = 0;
  for (int32_t i = 1; i <= 20; i++) {
    lengthmix_make(1, i, &a);
    lengthmix_make(1, i + 1, &b);
    lengthmix_make(2, i, &c);
    differ_index += !mixes_equal(&a, &b);
    differ_seed += !mixes_equal(&a, &c);
  }
  cr_assert_eq(differ_index, 20);
  cr_assert_eq(differ_seed, 20);
}

/* The family's rules, as lengthmix.h states them. */
static void check_rules(const lengthmix_t *m) {
  cr_assert(m->pack >= 16384 && m->pack <= 262144 &&
                (m->pack & (m->pack - 1)) == 0,
            "mix %d: pack %lld", m->index, (long long)m->pack);
  cr_assert(m->ncomponents >= 1 && m->ncomponents <= 3);
  double sum = 0;
  for (int k = 0; k < m->ncomponents; k++) {
    const lengthmix_component_t *c = &m->component[k];
    cr_assert(c->weight > 0 && c->weight <= 1);
    sum += c->weight;
    if (c->kind == LENGTHMIX_LOGNORMAL)
      cr_assert(c->median >= 64 && c->median <= m->pack / 4 &&
                c->sigma >= 0.3 && c->sigma <= 1.8);
    else
      cr_assert(c->lo >= 1 && c->lo <= c->hi && c->hi <= m->pack,
                "mix %d: [%lld, %lld]", m->index, (long long)c->lo,
                (long long)c->hi);
  }
  cr_assert_float_eq(sum, 1.0, 1e-12);
}

Test(lengthmix, mixes_follow_the_rules_and_cover_the_kinds) {
  int kinds[3] = {0}, sizes[3] = {0};
  for (int32_t i = 1; i <= MIXES; i++) {
    lengthmix_t m;
    lengthmix_make(7, i, &m);
    check_rules(&m);
    sizes[m.ncomponents - 1]++;
    for (int k = 0; k < m.ncomponents; k++) kinds[m.component[k].kind]++;
  }
  for (int k = 0; k < 3; k++) {
    cr_assert(kinds[k] > 0, "no component of kind %d in %d mixes", k, MIXES);
    cr_assert(sizes[k] > 0, "no mix of %d components in %d mixes", k + 1, MIXES);
  }
}

Test(lengthmix, lengths_in_range_and_shares_match_weights) {
  for (int32_t i = 1; i <= 40; i++) {
    lengthmix_t m;
    lengthmix_make(1, i, &m);
    lengthgen_rng_t rng;
    lengthgen_seed(&rng, (uint64_t)i);
    int64_t count[LENGTHMIX_MAX_COMPONENTS] = {0};
    for (int d = 0; d < DRAWS; d++) {
      int k;
      int64_t len = lengthmix_draw(&m, &rng, &k);
      cr_assert(len >= 1 && len <= m.pack, "mix %d: length %lld", i,
                (long long)len);
      const lengthmix_component_t *c = &m.component[k];
      if (c->kind != LENGTHMIX_LOGNORMAL)
        cr_assert(len >= c->lo && len <= c->hi);
      count[k]++;
    }
    /* Binomial: 5 standard deviations, plus slack for tiny weights. */
    for (int k = 0; k < m.ncomponents; k++) {
      double w = m.component[k].weight, share = (double)count[k] / DRAWS;
      double tol = 5 * sqrt(w * (1 - w) / DRAWS) + 1e-3;
      cr_assert(fabs(share - w) <= tol, "mix %d component %d: share %g, "
                "weight %g", i, k, share, w);
    }
  }
}

/* Tokens per pack, and samples per pack, of one packed batch. */
static void check_batch(const lengthgen_batch_t *b, int32_t packs,
                        int64_t pack, int64_t max_per_pack) {
  int64_t tokens[64] = {0}, samples[64] = {0};
  for (int64_t i = 0; i < b->n; i++) {
    cr_assert(b->origin[i] >= 0 && b->origin[i] < packs);
    cr_assert(b->len[i] >= 1 && b->len[i] <= pack);
    tokens[b->origin[i]] += b->len[i];
    samples[b->origin[i]]++;
  }
  for (int32_t p = 0; p < packs; p++) {
    cr_assert(tokens[p] <= pack, "pack %d holds %lld tokens > %lld", p,
              (long long)tokens[p], (long long)pack);
    cr_assert(samples[p] >= 1, "pack %d is empty", p);
    if (max_per_pack)
      cr_assert(samples[p] <= max_per_pack, "pack %d holds %lld samples",
                p, (long long)samples[p]);
  }
}

Test(lengthmix, packs_never_overflow) {
  lengthgen_batch_t batch = {0};
  for (int32_t i = 1; i <= 30; i++) {
    lengthmix_t m;
    lengthmix_make(1, i, &m);
    lengthgen_source_t src = lengthmix_source(&m);
    for (int limit = 0; limit <= 4; limit += 4) {
      src.max_per_pack = limit;
      lengthgen_rng_t rng;
      lengthgen_seed(&rng, 42);
      cr_assert_eq(lengthgen_pack(&src, 16, &rng, &batch), 0);
      check_batch(&batch, 16, m.pack, limit);
    }
  }
  lengthgen_batch_free(&batch);
}

Test(lengthmix, packing_is_deterministic) {
  lengthmix_t m;
  lengthmix_make(3, 9, &m);
  lengthgen_source_t src = lengthmix_source(&m);
  lengthgen_batch_t a = {0}, b = {0};
  lengthgen_rng_t rng;
  lengthgen_seed(&rng, 5);
  cr_assert_eq(lengthgen_pack(&src, 8, &rng, &a), 0);
  lengthgen_seed(&rng, 5);
  cr_assert_eq(lengthgen_pack(&src, 8, &rng, &b), 0);
  cr_assert_eq(a.n, b.n);
  cr_assert_eq(memcmp(a.len, b.len, (size_t)a.n * sizeof *a.len), 0);
  cr_assert_eq(memcmp(a.origin, b.origin, (size_t)a.n * sizeof *a.origin), 0);
  lengthgen_batch_free(&a);
  lengthgen_batch_free(&b);
}

Test(lengthmix, describe_names_the_mix) {
  lengthmix_t m;
  lengthmix_make(1, 3, &m);
  char line[1024];
  int n = lengthmix_describe(&m, "mix3", line, sizeof line);
  cr_assert(n > 0 && (size_t)n < sizeof line);
  cr_assert(strstr(line, "\"mix\":\"mix3\",\"mix_seed\":1,\"index\":3,"));
  cr_assert(line[n - 1] == '}');
  /* Too small a buffer: cut, terminated, and the full length reported. */
  char small[16];
  cr_assert_eq(lengthmix_describe(&m, "mix3", small, sizeof small), n);
  cr_assert_eq(strlen(small), sizeof small - 1);
}

Test(lengthmix, rescaled_mix_keeps_within_the_new_pack) {
  lengthgen_batch_t batch = {0};
  for (int32_t i = 1; i <= 30; i++) {
    lengthmix_t m, orig;
    lengthmix_make(1, i, &m);
    orig = m;
    lengthmix_rescale(&m, 8192);
    cr_assert_eq(m.pack, 8192);
    for (int k = 0; k < m.ncomponents; k++) {
      const lengthmix_component_t *c = &m.component[k];
      cr_assert_eq(c->weight, orig.component[k].weight);
      cr_assert(c->lo <= c->hi && c->hi <= 8192 && c->median >= 1);
    }
    lengthgen_source_t src = lengthmix_source(&m);
    lengthgen_rng_t rng;
    lengthgen_seed(&rng, 9);
    cr_assert_eq(lengthgen_pack(&src, 8, &rng, &batch), 0);
    check_batch(&batch, 8, 8192, 0);
  }
  lengthgen_batch_free(&batch);
}
