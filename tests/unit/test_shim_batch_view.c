/* The batch view: dpshim__layout_of() checks (each message names the field
 * and what was expected), kinds and metas, the signature ranks compare,
 * pack / unpack round trips, and the exchange's in-place repack (repack.h):
 * what it keeps, and that it copies what moves. */
#include <criterion/criterion.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "batch_view.h"
#include "repack.h"

/* A batch of 4 samples: tokens (int32, token-aligned), ids (uint64, one per
 * sample) and patches (5-byte rows, own offsets). */
#define N 4
#define CAP_S 8
#define CAP_T 64
#define CAP_P 32
#define PATCH 5

typedef struct fixture {
  int32_t cu[CAP_S + 1];
  int32_t poff[CAP_S + 1];
  int32_t tokens[CAP_T];
  uint64_t ids[CAP_S];
  unsigned char patches[CAP_P * PATCH];
  dpshim_field_t f[3];
  dpshim_batch_t b;
} fixture_t;

static const int32_t LEN[N] = {3, 0, 5, 2};
static const int32_t NPATCH[N] = {1, 2, 0, 3};

static void fixture_init(fixture_t *x, uint32_t salt) {
  memset(x, 0, sizeof *x);
  x->cu[0] = x->poff[0] = 0;
  for (int i = 0; i < N; i++) {
    x->cu[i + 1] = x->cu[i] + LEN[i];
    x->poff[i + 1] = x->poff[i] + NPATCH[i];
    x->ids[i] = 1000u * salt + (uint64_t)i;
    for (int t = x->cu[i]; t < x->cu[i + 1]; t++)
      x->tokens[t] = (int32_t)(salt * 100000u + (uint32_t)i * 100u + (uint32_t)t);
    for (int p = x->poff[i] * PATCH; p < x->poff[i + 1] * PATCH; p++)
      x->patches[p] = (unsigned char)(salt * 31u + (uint32_t)i * 7u + (uint32_t)p);
  }
  x->f[0] = (dpshim_field_t){"tokens", x->tokens, sizeof(int32_t), x->cu, CAP_T};
  x->f[1] = (dpshim_field_t){"ids", x->ids, sizeof(uint64_t), NULL, CAP_S};
  x->f[2] = (dpshim_field_t){"patches", x->patches, PATCH, x->poff, CAP_P};
  x->b = (dpshim_batch_t){N, CAP_S, x->cu, 3, x->f, NULL};
}

static fixture_t fx;
static dpshim__layout_t layout;
static char msg[256];

static void setup(void) { fixture_init(&fx, 1); }

static dpshim__repack_t repack;

static void teardown(void) { dpshim__repack_free(&repack); }

TestSuite(shim_batch_view, .init = setup, .fini = teardown);

static void expect_ok(void) {
  int rc = dpshim__layout_of(&fx.b, &layout, msg, sizeof msg);
  cr_assert_eq(rc, 0, "rc %d: %s", rc, msg);
}

/* Rejected with EINVAL; the message holds every one of the needles. */
static void expect_bad(const char *a, const char *b) {
  int rc = dpshim__layout_of(&fx.b, &layout, msg, sizeof msg);
  cr_assert_eq(rc, DPSHIM_EINVAL, "accepted; expected a message naming %s", a);
  cr_assert(strstr(msg, a) != NULL, "message \"%s\" does not name %s", msg, a);
  if (b)
    cr_assert(strstr(msg, b) != NULL, "message \"%s\" does not say %s", msg, b);
}

/* ---- layout ---------------------------------------------------------------- */

Test(shim_batch_view, layout_of_valid_batch) {
  expect_ok();
  cr_assert_eq(layout.nfields, 3);
  cr_assert_eq(layout.width, 2, "length + one own-offsets field");
  cr_assert_eq(layout.kind[0], DPSHIM__ROWS_TOKENS);
  cr_assert_eq(layout.kind[1], DPSHIM__ROWS_ONE);
  cr_assert_eq(layout.kind[2], DPSHIM__ROWS_OWN);
  cr_assert_eq(layout.slot[2], 1);
  cr_assert_eq(layout.row_bytes[0], sizeof(int32_t));
  cr_assert_eq(layout.row_bytes[1], sizeof(uint64_t));
  cr_assert_eq(layout.row_bytes[2], PATCH);
}

Test(shim_batch_view, metas_rows_and_bytes) {
  expect_ok();
  for (int i = 0; i < N; i++) {
    int32_t meta[DPSHIM__MAX_META];
    dpshim__meta_of(&fx.b, &layout, i, meta);
    cr_assert_eq(meta[0], LEN[i]);
    cr_assert_eq(meta[1], NPATCH[i]);
    cr_assert_eq(dpshim__meta_rows(&layout, 0, meta), LEN[i]);
    cr_assert_eq(dpshim__meta_rows(&layout, 1, meta), 1);
    cr_assert_eq(dpshim__meta_rows(&layout, 2, meta), NPATCH[i]);
    cr_assert_eq(dpshim__meta_bytes(&layout, meta),
                 4 * LEN[i] + 8 + PATCH * NPATCH[i]);
  }
}

/* The images travel in the metas whole: 64-bit numbers as two halves. */
Test(shim_batch_view, metas_carry_the_images) {
  dpshim_vision_t vision[N] = {{1, 1}, {0, 0}, {3000000000, 5000000000000},
                               {INT64_MAX, INT64_MAX - 1}};
  fx.b.vision = vision;
  expect_ok();
  cr_assert_eq(layout.width, 2 + DPSHIM__VISION_META);
  for (int i = 0; i < N; i++) {
    int32_t meta[DPSHIM__MAX_META];
    dpshim__meta_of(&fx.b, &layout, i, meta);
    dpshim_vision_t v = dpshim__meta_vision(&layout, meta);
    cr_assert(v.patches == vision[i].patches &&
                  v.patches_sq == vision[i].patches_sq,
              "sample %d: %lld, %lld", i, (long long)v.patches,
              (long long)v.patches_sq);
    cr_assert_eq(meta[1], NPATCH[i], "the rows stay where they were");
  }
}

Test(shim_batch_view, negative_images_are_refused) {
  dpshim_vision_t vision[N] = {{1, 1}, {0, 0}, {-2, 4}, {0, 0}};
  fx.b.vision = vision;
  expect_bad("vision[2]", ">= 0");
}

Test(shim_batch_view, two_own_offsets_fields_get_their_slots) {
  static int32_t aoff[CAP_S + 1];
  static unsigned char audio[16];
  for (int i = 0; i <= N; i++) aoff[i] = i; /* one row each, via offsets */
  dpshim_field_t f[4] = {fx.f[2], fx.f[0],
                         {"audio", audio, 2, aoff, 8}, fx.f[1]};
  fx.b.fields = f;
  fx.b.nfields = 4;
  expect_ok();
  cr_assert_eq(layout.width, 3);
  cr_assert_eq(layout.kind[0], DPSHIM__ROWS_OWN);
  cr_assert_eq(layout.kind[2], DPSHIM__ROWS_OWN);
  cr_assert_eq(layout.slot[0], 1);
  cr_assert_eq(layout.slot[2], 2);
  int32_t meta[DPSHIM__MAX_META];
  dpshim__meta_of(&fx.b, &layout, 3, meta);
  cr_assert_eq(meta[0], LEN[3]);
  cr_assert_eq(meta[1], NPATCH[3]);
  cr_assert_eq(meta[2], 1);
}

Test(shim_batch_view, empty_batch_is_valid) {
  fx.b.nsamples = 0;
  expect_ok();
  fx.b.capacity_samples = 0;
  fx.f[1].capacity_rows = 0;
  expect_ok();
}

Test(shim_batch_view, null_data_with_no_capacity_is_valid) {
  static int32_t zero[CAP_S + 1];
  dpshim_field_t f[2] = {fx.f[0], {"empty", NULL, 7, zero, 0}};
  fx.b.fields = f;
  fx.b.nfields = 2;
  expect_ok();
}

Test(shim_batch_view, null_batch) {
  int rc = dpshim__layout_of(NULL, &layout, msg, sizeof msg);
  cr_assert_eq(rc, DPSHIM_EINVAL);
  cr_assert(strstr(msg, "batch") != NULL, "%s", msg);
}

Test(shim_batch_view, nsamples_out_of_range) {
  fx.b.nsamples = CAP_S + 1;
  expect_bad("nsamples", "capacity_samples");
  fx.b.nsamples = -1;
  expect_bad("nsamples", NULL);
}

Test(shim_batch_view, cu_seqlens_null) {
  fx.b.cu_seqlens = NULL;
  expect_bad("cu_seqlens", NULL);
}

Test(shim_batch_view, nfields_out_of_range) {
  fx.b.nfields = 0;
  expect_bad("nfields", NULL);
  fx.b.nfields = DPSHIM__MAX_FIELDS + 1;
  expect_bad("nfields", NULL);
  fx.b.nfields = 3;
  fx.b.fields = NULL;
  expect_bad("fields", NULL);
}

Test(shim_batch_view, cu_seqlens_not_from_zero) {
  fx.cu[0] = 1;
  expect_bad("cu_seqlens", "expected 0");
}

Test(shim_batch_view, cu_seqlens_decreasing) {
  fx.cu[3] = fx.cu[2] - 1;
  expect_bad("cu_seqlens", "non-decreasing");
  cr_assert(strstr(msg, "offsets[3]") != NULL, "%s", msg);
}

Test(shim_batch_view, tokens_over_capacity) {
  fx.f[0].capacity_rows = fx.cu[N] - 1;
  expect_bad("'tokens'", "capacity_rows");
}

Test(shim_batch_view, row_bytes_zero) {
  fx.f[2].row_bytes = 0;
  expect_bad("'patches'", "row_bytes");
  fx.f[2].row_bytes = PATCH;
  fx.f[1].row_bytes = 0;
  expect_bad("'ids'", "row_bytes");
  fx.f[1].row_bytes = sizeof(uint64_t);
  fx.f[0].row_bytes = 0;
  expect_bad("'tokens'", "row_bytes");
}

Test(shim_batch_view, data_null_with_capacity) {
  fx.f[1].data = NULL;
  expect_bad("'ids'", "NULL");
}

Test(shim_batch_view, one_row_field_over_capacity) {
  fx.f[1].capacity_rows = N - 1;
  expect_bad("'ids'", "capacity_rows");
}

Test(shim_batch_view, own_offsets_not_from_zero) {
  fx.poff[0] = 2;
  expect_bad("'patches'", "expected 0");
}

Test(shim_batch_view, own_offsets_decreasing) {
  fx.poff[2] = 0;
  expect_bad("'patches'", "non-decreasing");
}

Test(shim_batch_view, own_offsets_over_capacity) {
  fx.f[2].capacity_rows = fx.poff[N] - 1;
  expect_bad("'patches'", "capacity_rows");
}

Test(shim_batch_view, negative_capacity) {
  fx.f[0].capacity_rows = -1;
  expect_bad("'tokens'", "capacity_rows");
}

/* Offsets are int32: a capacity they cannot index is refused, named, for
 * token-aligned fields and fields with their own offsets alike; a field of
 * one row per sample has no offsets and no such limit. */
Test(shim_batch_view, capacity_beyond_int32_offsets) {
  fx.f[0].capacity_rows = (int64_t)INT32_MAX + 1;
  expect_bad("'tokens'", "int32");
  setup();
  fx.f[2].capacity_rows = (int64_t)INT32_MAX + 1;
  expect_bad("'patches'", "int32");
  setup();
  fx.f[0].capacity_rows = INT32_MAX;
  expect_ok();
}

Test(shim_batch_view, unnamed_field) {
  fx.f[2].name = NULL;
  fx.f[2].row_bytes = 0;
  expect_bad("row_bytes", NULL);
}

Test(shim_batch_view, only_the_used_offsets_are_read) {
  /* Offsets past nsamples are garbage: they are not the batch's. */
  fx.cu[N + 1] = -7;
  fx.poff[N + 1] = -7;
  expect_ok();
}

/* ---- signature ------------------------------------------------------------- */

/* What ranks compare: every field's signature, in order, and their count. */
static uint64_t signature_of(const dpshim_batch_t *b) {
  dpshim__layout_t l;
  char m[256];
  int rc = dpshim__layout_of(b, &l, m, sizeof m);
  cr_assert_eq(rc, 0, "%s", m);
  uint64_t h = (uint64_t)l.nfields;
  for (int32_t f = 0; f < l.nfields; f++)
    h = h * 1000003u + dpshim__field_signature(b, &l, f);
  return h;
}

Test(shim_batch_view, signature_sees_names) {
  uint64_t s = signature_of(&fx.b);
  fx.f[1].name = "renamed";
  cr_assert_neq(signature_of(&fx.b), s);
}

Test(shim_batch_view, signature_ignores_contents_and_counts) {
  fixture_t other;
  fixture_init(&other, 2);
  other.b.nsamples = 2;
  other.f[0].capacity_rows = 40;
  other.b.capacity_samples = 5;
  cr_assert_eq(signature_of(&fx.b), signature_of(&other.b));
}

Test(shim_batch_view, signature_sees_row_bytes) {
  uint64_t s = signature_of(&fx.b);
  fx.f[2].row_bytes = PATCH + 1;
  cr_assert_neq(signature_of(&fx.b), s);
}

Test(shim_batch_view, signature_sees_kind) {
  uint64_t s = signature_of(&fx.b);
  static int32_t own[CAP_S + 1];
  memcpy(own, fx.cu, sizeof own); /* same rows, own offsets */
  fx.f[0].offsets = own;
  cr_assert_neq(signature_of(&fx.b), s);
  fx.f[0].offsets = fx.cu;
  fx.f[2].offsets = NULL; /* one row per sample now */
  fx.f[2].capacity_rows = CAP_S;
  cr_assert_neq(signature_of(&fx.b), s);
}

Test(shim_batch_view, signature_sees_field_count_and_order) {
  uint64_t s = signature_of(&fx.b);
  fx.b.nfields = 2;
  cr_assert_neq(signature_of(&fx.b), s);
  fx.b.nfields = 3;
  dpshim_field_t swapped[3] = {fx.f[1], fx.f[0], fx.f[2]};
  fx.b.fields = swapped;
  cr_assert_neq(signature_of(&fx.b), s);
}

Test(shim_batch_view, signature_of_same_row_sizes_in_other_order) {
  /* Two one-row fields of 4 and 8 bytes, swapped: kinds equal, sizes not. */
  static uint32_t a[CAP_S];
  static uint64_t c[CAP_S];
  dpshim_field_t f1[3] = {fx.f[0], {"a", a, 4, NULL, CAP_S},
                          {"c", c, 8, NULL, CAP_S}};
  dpshim_field_t f2[3] = {fx.f[0], {"c", c, 8, NULL, CAP_S},
                          {"a", a, 4, NULL, CAP_S}};
  fx.b.fields = f1;
  uint64_t s1 = signature_of(&fx.b);
  fx.b.fields = f2;
  cr_assert_neq(signature_of(&fx.b), s1);
}

/* ---- rows and append -------------------------------------------------------- */

/* Samples order[0 .. n)'s rows into buf, field after field, as the
 * exchange stages them: from[f] where field f's start. Returns the bytes. */
static size_t pack(const dpshim_batch_t *b, const dpshim__layout_t *l,
                   const int32_t *order, int32_t n, unsigned char *buf,
                   const unsigned char **from) {
  size_t at = 0;
  for (int32_t f = 0; f < l->nfields; f++) {
    from[f] = buf + at;
    for (int32_t k = 0; k < n; k++) {
      size_t bytes;
      const unsigned char *rows = dpshim__batch_rows(b, l, f, order[k], 1, &bytes);
      if (bytes) memcpy(buf + at, rows, bytes);
      at += bytes;
    }
  }
  return at;
}

/* Replaces the batch by n samples: what the exchange does to a batch that
 * keeps none of its own samples. */
static void unpack(dpshim_batch_t *b, const dpshim__layout_t *l,
                   const unsigned char *const *from, int32_t n,
                   const int32_t *meta) {
  b->nsamples = 0;
  dpshim__batch_append(b, l, n, meta, from);
}

static size_t packed_bytes(const dpshim_batch_t *b, const dpshim__layout_t *l,
                           const int32_t *order, int32_t n, int32_t *metas) {
  size_t bytes = 0;
  for (int32_t k = 0; k < n; k++) {
    dpshim__meta_of(b, l, order[k], metas + (size_t)k * (size_t)l->width);
    bytes += (size_t)dpshim__meta_bytes(l, metas + (size_t)k * (size_t)l->width);
  }
  return bytes;
}

/* Sample k of `got` equals sample i of `want` in every field. */
static void assert_sample(const fixture_t *got, int32_t k,
                          const fixture_t *want, int32_t i) {
  int32_t len = got->cu[k + 1] - got->cu[k];
  int32_t np = got->poff[k + 1] - got->poff[k];
  cr_assert_eq(len, want->cu[i + 1] - want->cu[i], "sample %d", k);
  cr_assert_eq(np, want->poff[i + 1] - want->poff[i], "sample %d", k);
  cr_assert_eq(got->ids[k], want->ids[i], "sample %d", k);
  cr_assert(!memcmp(got->tokens + got->cu[k], want->tokens + want->cu[i],
                    (size_t)len * sizeof(int32_t)), "sample %d tokens", k);
  cr_assert(!memcmp(got->patches + (size_t)got->poff[k] * PATCH,
                    want->patches + (size_t)want->poff[i] * PATCH,
                    (size_t)np * PATCH), "sample %d patches", k);
}

/* Sample k of `got` equals sample order[k] of `want`, for k < n. */
static void assert_samples(const fixture_t *got, const fixture_t *want,
                           const int32_t *order, int32_t n) {
  cr_assert_eq(got->b.nsamples, n);
  cr_assert_eq(got->cu[0], 0);
  cr_assert_eq(got->poff[0], 0);
  for (int32_t k = 0; k < n; k++) assert_sample(got, k, want, order[k]);
}

static void round_trip(const int32_t *order, int32_t n) {
  expect_ok();
  int32_t metas[CAP_S * 2];
  unsigned char buf[CAP_T * 4 + CAP_S * 8 + CAP_P * PATCH + 1];
  const unsigned char *from[DPSHIM__MAX_FIELDS];
  size_t bytes = packed_bytes(&fx.b, &layout, order, n, metas);
  memset(buf, 0xee, sizeof buf);
  cr_assert_eq(pack(&fx.b, &layout, order, n, buf, from), bytes);
  cr_assert_eq(buf[bytes], 0xee, "rows past the samples' %zu bytes", bytes);
  fixture_t out;
  fixture_init(&out, 9); /* other contents, same layout */
  dpshim__layout_t lo;
  cr_assert_eq(dpshim__layout_of(&out.b, &lo, msg, sizeof msg), 0);
  cr_assert_eq(signature_of(&out.b), signature_of(&fx.b));
  unpack(&out.b, &lo, from, n, metas);
  assert_samples(&out, &fx, order, n);
  /* The result is a valid batch again. */
  cr_assert_eq(dpshim__layout_of(&out.b, &lo, msg, sizeof msg), 0, "%s", msg);
  /* And unpacking in place, over the batch packed from, works too. */
  fixture_t before = fx;
  unpack(&fx.b, &layout, from, n, metas);
  assert_samples(&fx, &before, order, n);
}

Test(shim_batch_view, round_trip_identity) {
  const int32_t order[N] = {0, 1, 2, 3};
  round_trip(order, N);
}

Test(shim_batch_view, round_trip_reversed) {
  const int32_t order[N] = {3, 2, 1, 0};
  round_trip(order, N);
}

Test(shim_batch_view, round_trip_subset) {
  const int32_t order[2] = {2, 0};
  round_trip(order, 2);
}

Test(shim_batch_view, round_trip_duplicates_and_empty) {
  const int32_t order[5] = {1, 1, 3, 1, 0}; /* sample 1 has no tokens */
  round_trip(order, 5);
}

Test(shim_batch_view, round_trip_nothing) {
  round_trip(NULL, 0);
  cr_assert_eq(fx.b.nsamples, 0);
}

Test(shim_batch_view, rows_of_a_run_lie_back_to_back) {
  expect_ok();
  /* Samples 1 .. 2 of each field: sample 1's rows, then sample 2's. */
  for (int32_t f = 0; f < layout.nfields; f++) {
    size_t run, one, two;
    const unsigned char *r = dpshim__batch_rows(&fx.b, &layout, f, 1, 2, &run);
    const unsigned char *a = dpshim__batch_rows(&fx.b, &layout, f, 1, 1, &one);
    const unsigned char *b = dpshim__batch_rows(&fx.b, &layout, f, 2, 1, &two);
    cr_assert_eq(run, one + two, "field %d", f);
    cr_assert(r == a && (!one || b == a + one), "field %d", f);
  }
  size_t tb;
  dpshim__batch_rows(&fx.b, &layout, 0, 3, 1, &tb);
  cr_assert_eq(tb, (size_t)LEN[3] * sizeof(int32_t));
}

Test(shim_batch_view, round_trip_with_a_null_empty_field) {
  /* A field with no rows at all and no buffer moves nothing, crashes not. */
  static int32_t zero[CAP_S + 1];
  dpshim_field_t f[4] = {fx.f[0], fx.f[1], {"none", NULL, 3, zero, 0}, fx.f[2]};
  fx.b.fields = f;
  fx.b.nfields = 4;
  expect_ok();
  const int32_t order[N] = {2, 3, 0, 1};
  int32_t metas[CAP_S * 3];
  unsigned char buf[1024];
  const unsigned char *from[DPSHIM__MAX_FIELDS];
  size_t bytes = packed_bytes(&fx.b, &layout, order, N, metas);
  cr_assert_lt(bytes, sizeof buf);
  pack(&fx.b, &layout, order, N, buf, from);
  fixture_t before = fx;
  unpack(&fx.b, &layout, from, N, metas);
  cr_assert_eq(fx.b.nsamples, N);
  for (int k = 0; k <= N; k++) cr_assert_eq(zero[k], 0);
  assert_samples(&fx, &before, order, N);
}

/* ---- keep / append: the exchange's in-place repack ------------------------- */

/* Repacks fx keeping which[0 .. n) (ascending): every kept sample once, in
 * the order the repack chose, and a valid batch again. */
static void keep(const int32_t *which, int32_t n) {
  expect_ok();
  fixture_t before = fx;
  cr_assert_eq(dpshim__repack_reserve(&repack, fx.b.nsamples), 0);
  dpshim__repack_plan(&repack, &fx.b, &layout, which, n);
  cr_assert_eq(repack.n, n);
  for (int32_t k = 0; k < n; k++) {
    int hits = 0;
    for (int32_t j = 0; j < n; j++) hits += repack.order[j] == which[k];
    cr_assert_eq(hits, 1, "kept sample %d placed %d times", which[k], hits);
  }
  dpshim__repack_apply(&repack, &fx.b, &layout);
  assert_samples(&fx, &before, repack.order, n);
  dpshim__layout_t l2;
  cr_assert_eq(dpshim__layout_of(&fx.b, &l2, msg, sizeof msg), 0, "%s", msg);
}

/* fx as n samples of these tokens and patch rows, contents by index. */
static void reshape(const int32_t *len, const int32_t *np, int32_t n) {
  for (int i = 0; i < n; i++) {
    fx.cu[i + 1] = fx.cu[i] + len[i];
    fx.poff[i + 1] = fx.poff[i] + np[i];
    fx.ids[i] = 500u + (uint64_t)i;
  }
  for (int t = 0; t < CAP_T; t++) fx.tokens[t] = 3 * t + 1;
  for (int p = 0; p < CAP_P * PATCH; p++) fx.patches[p] = (unsigned char)(p * 13);
  fx.b.nsamples = n;
}

Test(shim_batch_view, keep_all_changes_nothing) {
  fixture_t before = fx;
  const int32_t all[N] = {0, 1, 2, 3};
  keep(all, N);
  cr_assert(!memcmp(&fx, &before, offsetof(fixture_t, f)),
            "keeping every sample changed the buffers");
}

Test(shim_batch_view, keep_drops_the_first) {
  const int32_t which[3] = {1, 2, 3};
  keep(which, 3);
}

Test(shim_batch_view, keep_a_gappy_subset) {
  const int32_t which[2] = {0, 3};
  keep(which, 2);
}

Test(shim_batch_view, keep_only_the_last) {
  const int32_t which[1] = {3};
  keep(which, 1);
}

Test(shim_batch_view, keep_only_empty_rows) {
  const int32_t which[2] = {1, 2}; /* no tokens, then no patches */
  keep(which, 2);
}

Test(shim_batch_view, keep_nothing) {
  keep(NULL, 0);
  cr_assert_eq(fx.b.nsamples, 0);
}

Test(shim_batch_view, keep_overlapping_moves) {
  /* Long samples shifted by a short one: source and destination overlap. */
  static const int32_t len[6] = {1, 20, 15, 1, 9, 12};
  static const int32_t np[6] = {1, 5, 6, 0, 4, 6};
  reshape(len, np, 6);
  const int32_t which[4] = {1, 2, 4, 5};
  keep(which, 4);
}

Test(shim_batch_view, a_hole_is_filled_from_the_end) {
  /* Patch rows outweigh tokens; sample 0 leaves 3 patch rows, as many as
   * the last sample holds: it fills them, and samples 1-4 keep their patch
   * rows where they are. Shifting them would copy 18 patch rows. */
  static const int32_t len[6] = {4, 6, 3, 5, 2, 3};
  static const int32_t np[6] = {3, 5, 2, 7, 1, 3};
  reshape(len, np, 6);
  fixture_t before = fx;
  const int32_t which[5] = {1, 2, 3, 4, 5};
  keep(which, 5);
  cr_assert_eq(repack.order[0], 5);
  for (int32_t k = 1; k < 5; k++)
    cr_assert_eq(fx.poff[k], before.poff[k], "sample %d's patch rows moved", k);
  /* Sample 5's patches, tokens and id, and the 16 tokens shifted by one. */
  int64_t want = 3 * PATCH + (3 + 16) * (int64_t)sizeof(int32_t) +
                 (int64_t)sizeof(uint64_t);
  cr_assert_eq(repack.copied, want);
}

Test(shim_batch_view, moves_in_a_ring_put_one_aside) {
  /* The last sample fills sample 0's patch rows, but its 5 tokens go where
   * sample 1's are, whose go where sample 2's are, whose go where the last
   * sample's are: one of them waits in the stash, and is copied twice. */
  static const int32_t len[4] = {2, 3, 2, 5};
  static const int32_t np[4] = {3, 2, 4, 3};
  reshape(len, np, 4);
  const int32_t which[3] = {1, 2, 3};
  keep(which, 3);
  cr_assert_eq(repack.order[0], 3);
  /* Patch rows: sample 3's 3; tokens: all 10, and sample 3's 5 again; its
   * id: samples 1 and 2 keep their rows. */
  int64_t want = 3 * PATCH + 15 * (int64_t)sizeof(int32_t) +
                 (int64_t)sizeof(uint64_t);
  cr_assert_eq(repack.copied, want, "copied %lld, expected %lld",
               (long long)repack.copied, (long long)want);
}

Test(shim_batch_view, a_hole_grows_by_the_next_sample_until_it_fills) {
  /* Sample 0's 2 patch rows: no later samples add up to them, but with
   * sample 1's 4 (moved to the end) the last sample's 6 do; samples 2 and 3
   * keep their patch rows. */
  static const int32_t len[5] = {1, 1, 1, 1, 1};
  static const int32_t np[5] = {2, 4, 5, 3, 6};
  reshape(len, np, 5);
  fixture_t before = fx;
  const int32_t which[4] = {1, 2, 3, 4};
  keep(which, 4);
  const int32_t want[4] = {4, 2, 3, 1};
  for (int32_t k = 0; k < 4; k++) cr_assert_eq(repack.order[k], want[k]);
  cr_assert_eq(fx.poff[1], before.poff[2]);
  cr_assert_eq(fx.poff[2], before.poff[3]);
}

Test(shim_batch_view, holes_no_sum_fills_are_shifted) {
  /* Sample 0's 4 patch rows: no later samples add up to them, nor to them
   * and the next ones'. */
  static const int32_t len[4] = {1, 2, 3, 2};
  static const int32_t np[4] = {4, 3, 6, 5};
  reshape(len, np, 4);
  const int32_t which[3] = {1, 2, 3};
  keep(which, 3);
  for (int32_t k = 0; k < 3; k++) cr_assert_eq(repack.order[k], which[k]);
}

Test(shim_batch_view, a_long_text_hole_shifts_rather_than_search) {
  /* Tokens alone, 4 bytes each: sample 0's 1000-token hole could be filled
   * by 500 + 300 + 200, but the subset sum over 1000 units and the 5 later
   * samples costs more than copying 4000 bytes (nor do the grown holes pay
   * or add up): the samples behind it shift instead, in pack order. */
  static int32_t tok[4096], cu[9];
  const int32_t len[7] = {1000, 123, 77, 200, 300, 500, 61};
  cu[0] = 0;
  for (int i = 0; i < 7; i++) cu[i + 1] = cu[i] + len[i];
  dpshim_field_t f = {"tokens", tok, sizeof(int32_t), cu, 4096};
  dpshim_batch_t b = {7, 8, cu, 1, &f, NULL};
  dpshim__layout_t lo;
  cr_assert_eq(dpshim__layout_of(&b, &lo, msg, sizeof msg), 0, "%s", msg);
  cr_assert_eq(dpshim__repack_reserve(&repack, b.nsamples), 0);
  const int32_t which[6] = {1, 2, 3, 4, 5, 6};
  dpshim__repack_plan(&repack, &b, &lo, which, 6);
  for (int32_t k = 0; k < 6; k++)
    cr_assert_eq(repack.order[k], which[k], "position %d", k);
}

Test(shim_batch_view, random_repacks_keep_every_sample) {
  /* Any lengths, any subset: every kept sample intact, once. */
  uint32_t x = 12345;
  for (int round = 0; round < 2000; round++) {
    setup();
    int32_t n = 1 + (int32_t)((x = x * 1103515245u + 12345u) >> 16) % CAP_S;
    int32_t len[CAP_S], np[CAP_S], which[CAP_S], kept = 0;
    for (int32_t i = 0; i < n; i++) {
      x = x * 1103515245u + 12345u;
      len[i] = (int32_t)((x >> 8) % (CAP_T / CAP_S + 1));
      np[i] = (int32_t)((x >> 16) % (CAP_P / CAP_S + 1));
      if ((x >> 24) % 3) which[kept++] = i;
    }
    reshape(len, np, n);
    keep(which, kept);
  }
}

Test(shim_batch_view, keep_then_append) {
  expect_ok();
  fixture_t before = fx, other;
  fixture_init(&other, 5);
  dpshim__layout_t lo;
  cr_assert_eq(dpshim__layout_of(&other.b, &lo, msg, sizeof msg), 0);
  const int32_t send[2] = {2, 0};
  int32_t metas[4];
  unsigned char buf[512];
  const unsigned char *from[DPSHIM__MAX_FIELDS];
  size_t bytes = packed_bytes(&other.b, &lo, send, 2, metas);
  cr_assert_lt(bytes, sizeof buf);
  pack(&other.b, &lo, send, 2, buf, from);

  const int32_t kept[2] = {1, 3};
  keep(kept, 2);
  dpshim__batch_append(&fx.b, &layout, 2, metas, from);
  cr_assert_eq(fx.b.nsamples, 4);
  assert_sample(&fx, 0, &before, 1);
  assert_sample(&fx, 1, &before, 3);
  assert_sample(&fx, 2, &other, 2);
  assert_sample(&fx, 3, &other, 0);
  cr_assert_eq(dpshim__layout_of(&fx.b, &lo, msg, sizeof msg), 0, "%s", msg);
}

Test(shim_batch_view, append_to_an_empty_batch) {
  expect_ok();
  fixture_t other;
  fixture_init(&other, 6);
  const int32_t send[N] = {3, 2, 1, 0};
  int32_t metas[2 * N];
  unsigned char buf[512];
  const unsigned char *from[DPSHIM__MAX_FIELDS];
  packed_bytes(&other.b, &layout, send, N, metas);
  pack(&other.b, &layout, send, N, buf, from);
  keep(NULL, 0);
  dpshim__batch_append(&fx.b, &layout, N, metas, from);
  assert_samples(&fx, &other, send, N);
}

Test(shim_batch_view, append_in_place_takes_the_rows_past_the_batch) {
  /* What an exchange received in place: rows already past the batch's. */
  expect_ok();
  fixture_t before = fx, other;
  fixture_init(&other, 7);
  const int32_t send[2] = {3, 1};
  int32_t metas[4];
  unsigned char buf[512];
  const unsigned char *from[DPSHIM__MAX_FIELDS];
  packed_bytes(&other.b, &layout, send, 2, metas);
  pack(&other.b, &layout, send, 2, buf, from);
  int32_t n = fx.b.nsamples;
  for (int32_t f = 0; f < layout.nfields; f++) {
    size_t held, bytes = 0;
    unsigned char *start = dpshim__batch_rows(&fx.b, &layout, f, 0, n, &held);
    for (int k = 0; k < 2; k++) {
      size_t one;
      dpshim__batch_rows(&other.b, &layout, f, send[k], 1, &one);
      bytes += one;
    }
    memcpy(start + held, from[f], bytes);
  }
  dpshim__batch_append(&fx.b, &layout, 2, metas, NULL);
  cr_assert_eq(fx.b.nsamples, n + 2);
  for (int32_t i = 0; i < n; i++) assert_sample(&fx, i, &before, i);
  assert_sample(&fx, n, &other, 3);
  assert_sample(&fx, n + 1, &other, 1);
}
