/* The VLM layouts as fields (shim/layout.h): which tiles, patch rows and
 * grid rows each sample owns, found from its tokens as the families place
 * them; malformed batches refused with the field named. */
#include <criterion/criterion.h>
#include <string.h>

#include "layout.h"

#define CTX 7 /* the <IMG_CONTEXT> / image pad token of these batches */
#define VPAD 8
#define MAXT 64

static int32_t off[DPSHIM__LAYOUT_OFFSETS][17];
static dpshim_vision_t vision[16];
static dpshim__layout_scratch_t scratch;
static char msg[256];

static void init_scratch(void) {
  memset(&scratch, 0, sizeof scratch);
  for (int k = 0; k < DPSHIM__LAYOUT_OFFSETS; k++) scratch.offsets[k] = off[k];
  memset(vision, 0xff, sizeof vision); /* stale numbers must be overwritten */
  scratch.vision = vision;
}

static void expect_vision(const dpshim_batch_t *batch, int32_t i,
                          int64_t patches, int64_t patches_sq) {
  cr_assert_eq(batch->vision, vision);
  cr_expect(batch->vision[i].patches == patches &&
                batch->vision[i].patches_sq == patches_sq,
            "sample %d: patches %lld, patches_sq %lld, want %lld, %lld",
            (int)i, (long long)batch->vision[i].patches,
            (long long)batch->vision[i].patches_sq, (long long)patches,
            (long long)patches_sq);
}

/* ---- InternVL ------------------------------------------------------------ */

/* Samples: 2 tiles (num_image_token 2: 4 context tokens), text-only (its
 * dummy tile), 1 tile with 3 tokens of text. */
static int32_t icu[4] = {0, 6, 9, 14};
static int64_t itok[MAXT] = {1, CTX, CTX, CTX, CTX, 2, 3, 3, 3,
                             CTX, CTX, 4, 4, 4};
static int64_t iflags[8] = {1, 1, 0, 1};
static float ipix[8][4];

static dpshim_internvl_batch_t internvl(void) {
  static int64_t lab[MAXT], pos[MAXT];
  static float lw[MAXT];
  init_scratch();
  return (dpshim_internvl_batch_t){3, 16, icu, MAXT, itok, lab, pos, lw, 4,
                                   8, ipix, sizeof ipix[0], iflags, 2, CTX,
                                   1, NULL};
}

Test(shim_layout, internvl_tiles_follow_context_tokens_and_dummies) {
  dpshim_internvl_batch_t b = internvl();
  dpshim_batch_t batch;
  cr_assert_eq(dpshim__internvl_describe(&b, &scratch, &batch, msg,
                                         sizeof msg), 0, "%s", msg);
  int32_t want[4] = {0, 2, 3, 4};
  cr_assert_arr_eq(scratch.offsets[0], want, sizeof want);
  cr_assert_eq(batch.nfields, 6);
  cr_assert_str_eq(batch.fields[5].name, "image_flags");
  cr_assert_eq(batch.fields[4].offsets, scratch.offsets[0]);
  /* Each tile, the dummy one too, is an image of 4 * num_image_token
   * patches (num_image_token 2 here). */
  expect_vision(&batch, 0, 16, 2 * 64);
  expect_vision(&batch, 1, 8, 64);
  expect_vision(&batch, 2, 8, 64);
}

Test(shim_layout, internvl_tiles_counted_by_the_given_num_image_token) {
  dpshim_internvl_batch_t b = internvl();
  b.num_image_token = 1; /* 4 + 2 real tiles: the flags no longer agree */
  dpshim_batch_t batch;
  cr_assert_eq(dpshim__internvl_describe(&b, &scratch, &batch, msg,
                                         sizeof msg), DPSHIM_EINVAL);
  cr_assert(strstr(msg, "ntiles") || strstr(msg, "image_flags"), "%s", msg);
}

Test(shim_layout, internvl_flag_that_disagrees_is_named) {
  dpshim_internvl_batch_t b = internvl();
  iflags[2] = 1; /* the dummy tile marked real */
  dpshim_batch_t batch;
  int rc = dpshim__internvl_describe(&b, &scratch, &batch, msg, sizeof msg);
  iflags[2] = 0;
  cr_assert_eq(rc, DPSHIM_EINVAL);
  cr_assert(strstr(msg, "image_flags[2]") && strstr(msg, "sample 1"), "%s",
            msg);
}

Test(shim_layout, internvl_context_not_a_multiple_is_named) {
  dpshim_internvl_batch_t b = internvl();
  b.num_image_token = 3;
  dpshim_batch_t batch;
  cr_assert_eq(dpshim__internvl_describe(&b, &scratch, &batch, msg,
                                         sizeof msg), DPSHIM_EINVAL);
  cr_assert(strstr(msg, "num_image_token"), "%s", msg);
}

Test(shim_layout, internvl_finish_counts_the_tiles) {
  dpshim_internvl_batch_t b = internvl();
  dpshim_batch_t batch;
  cr_assert_eq(dpshim__internvl_describe(&b, &scratch, &batch, msg,
                                         sizeof msg), 0);
  batch.nsamples = 2; /* as if the last sample had left */
  dpshim__internvl_finish(&b, &scratch, &batch);
  cr_assert_eq(b.nsamples, 2);
  cr_assert_eq(b.ntiles, 3);
}

/* ---- Qwen ---------------------------------------------------------------- */

/* Sample 0: two images (2x2x4 = 16 rows, 4 pads; 1x2x2 = 4 rows, 1 pad);
 * sample 1: text only; sample 2: one image (1x2x4, 2 pads) and a video
 * (2x2x2 = 8 rows, 2 pads). merge 2. */
static int32_t qcu[4] = {0, 7, 10, 16};
static int64_t qtok[MAXT] = {CTX, CTX, CTX, CTX, 1, CTX, 1, 2, 2, 2,
                             CTX, CTX, VPAD, VPAD, 3, 3};
static int32_t qgrid[3 * 3] = {2, 2, 4, 1, 2, 2, 1, 2, 4};
static int32_t vgrid[3] = {2, 2, 2};
static float qrows[32][2], vrows[8][2];

static dpshim_qwen_batch_t qwen(void) {
  static int64_t lab[MAXT];
  static int32_t max_len;
  init_scratch();
  return (dpshim_qwen_batch_t){
      3, 16, qcu, MAXT, qtok, lab, NULL, &max_len, sizeof qrows[0], 2,
      {qrows, 32, qgrid, 3, 3, CTX}, {vrows, 8, vgrid, 1, 1, VPAD}, NULL, 0};
}

Test(shim_layout, qwen_images_and_videos_by_pad_tokens) {
  dpshim_qwen_batch_t b = qwen();
  dpshim_batch_t batch;
  cr_assert_eq(dpshim__qwen_describe(&b, &scratch, &batch, msg, sizeof msg),
               0, "%s", msg);
  int32_t rows[4] = {0, 20, 20, 28}, grids[4] = {0, 2, 2, 3};
  int32_t vrow[4] = {0, 0, 0, 8}, vg[4] = {0, 0, 0, 1};
  cr_assert_arr_eq(scratch.offsets[0], rows, sizeof rows);
  cr_assert_arr_eq(scratch.offsets[1], grids, sizeof grids);
  cr_assert_arr_eq(scratch.offsets[2], vrow, sizeof vrow);
  cr_assert_arr_eq(scratch.offsets[3], vg, sizeof vg);
  expect_vision(&batch, 0, 16 + 4, 16 * 16 + 4 * 4);
  expect_vision(&batch, 1, 0, 0);
  expect_vision(&batch, 2, 8 + 8, 8 * 8 + 8 * 8); /* an image and a video */
  b = qwen();
  b.video_frames_apart = 1; /* Qwen3-VL: the video's 2 frames of 2x2 */
  cr_assert_eq(dpshim__qwen_describe(&b, &scratch, &batch, msg, sizeof msg),
               0, "%s", msg);
  expect_vision(&batch, 2, 8 + 8, 8 * 8 + 2 * 4 * 4);
  dpshim__qwen_finish(&b, &scratch, &batch);
  cr_assert_eq(*b.max_lengths, 7);
}

Test(shim_layout, qwen_grid_that_disagrees_with_pads_is_named) {
  dpshim_qwen_batch_t b = qwen();
  qgrid[1] = 4; /* image 0 now needs 8 pads: sample 0 has 5 */
  dpshim_batch_t batch;
  int rc = dpshim__qwen_describe(&b, &scratch, &batch, msg, sizeof msg);
  qgrid[1] = 2;
  cr_assert_eq(rc, DPSHIM_EINVAL);
  cr_assert(strstr(msg, "image_grid_thw") && strstr(msg, "sample 0"), "%s",
            msg);
}

/* A grid whose t*h*w overflows is refused, not wrapped into a small one. */
Test(shim_layout, qwen_huge_grid_is_refused) {
  dpshim_qwen_batch_t b = qwen();
  int32_t saved[3] = {qgrid[0], qgrid[1], qgrid[2]};
  qgrid[0] = qgrid[1] = qgrid[2] = 1 << 30; /* 2^90 patches */
  dpshim_batch_t batch;
  int rc = dpshim__qwen_describe(&b, &scratch, &batch, msg, sizeof msg);
  memcpy(qgrid, saved, sizeof saved);
  cr_assert_eq(rc, DPSHIM_EINVAL);
  cr_assert(strstr(msg, "image_grid_thw row 0") && strstr(msg, "2147483647"),
            "%s", msg);
}

Test(shim_layout, qwen_grid_rows_left_over_are_named) {
  dpshim_qwen_batch_t b = qwen();
  b.videos.count = 0; /* the video's pads find no grid row */
  dpshim_batch_t batch;
  cr_assert_eq(dpshim__qwen_describe(&b, &scratch, &batch, msg, sizeof msg),
               DPSHIM_EINVAL);
  cr_assert(strstr(msg, "video_grid_thw"), "%s", msg);
}

Test(shim_layout, qwen_odd_grid_is_named) {
  dpshim_qwen_batch_t b = qwen();
  qgrid[3 * 2 + 2] = 3; /* 1x2x3: not a multiple of merge^2 */
  dpshim_batch_t batch;
  int rc = dpshim__qwen_describe(&b, &scratch, &batch, msg, sizeof msg);
  qgrid[3 * 2 + 2] = 4;
  cr_assert_eq(rc, DPSHIM_EINVAL);
  cr_assert(strstr(msg, "image_grid_thw row 2"), "%s", msg);
}

/* The counting reads the tokens: offsets beyond the token buffer are
 * refused before any is read. */
Test(shim_layout, offsets_beyond_the_token_buffer_are_named) {
  dpshim_qwen_batch_t b = qwen();
  b.capacity_tokens = 12;
  dpshim_batch_t batch;
  cr_assert_eq(dpshim__qwen_describe(&b, &scratch, &batch, msg, sizeof msg),
               DPSHIM_EINVAL);
  cr_assert(strstr(msg, "capacity_tokens"), "%s", msg);
}
