/* dpshim-sim's VLM workloads (--layout): the packs are libvlmload.so's
 * (held against the loader itself, pack by pack), every sample's image
 * tokens are in its length and its images' encoder time in its compute,
 * which is charged to the rank that holds it and varies across ranks; the
 * shim's warm-up fit learns the vision terms from them (none with
 * --text-cost); the text workload is reftrain's packs and times, with
 * nothing of vision; and the options that select them fail with one line
 * naming the option. With --threshold auto a plan is applied only where
 * it pays for its exchange, priced by the sweep's network, and with
 * --vit-threshold auto a micro-batch's encoder calls meet only where they
 * can pay.
 */
#include <criterion/criterion.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../tools/sim/sim.h"
#include "sim_args.h"
#include "packload.h"

#define SLOTS 4
#define HANDOFFS 3

static sim_workload_t draw(const sim_config_t *c, int32_t slots,
                           int64_t handoffs) {
  sim_workload_t w;
  char err[256] = "";
  cr_assert_eq(sim_workload_draw(c, slots, handoffs, &w, err, sizeof err), 0,
               "%s", err);
  return w;
}

static double llm_seconds(const sim_config_t *c, int64_t len) {
  int32_t cu[2] = {0, (int32_t)len};
  return emu_pack_seconds(&c->model, cu, 1);
}

static int close_to(double a, double b) {
  return fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b));
}

/* ---- the loader's packs --------------------------------------------------- */

/* The encoder's seconds of one of the loader's packs, as vlmtrain counts
 * them: its tiles (the dummies included), or its images' and videos'
 * grids. */
static double pack_vit(const sim_config_t *c, const vlm_batch_t *b) {
  if (b->layout == VLMLOAD_INTERNVL)
    return emu_vit_seconds(&c->model, b->internvl.ntiles, 0, 0);
  double s = 0;
  const vlm_qwen_media_t *m[2] = {&b->qwen.images, &b->qwen.videos};
  for (int k = 0; k < 2; k++)
    for (int32_t g = 0; g < m[k]->count; g++) {
      const int32_t *thw = m[k]->grid_thw + 3 * g;
      s += emu_vit_seconds(&c->model, thw[0], thw[1], thw[2]);
    }
  return s;
}

/* Slot d's samples of hand-off h in the simulated workload against the
 * loader's pack: lengths in order, and the encoder's time. */
static void same_pack(const sim_config_t *c, const sim_workload_t *w,
                      int32_t d, int64_t h, const vlm_batch_t *b) {
  int32_t k = 0;
  double vit = 0;
  for (int64_t i = w->first[h]; i < w->first[h + 1]; i++) {
    if (w->origin[i] != d) continue;
    cr_assert_lt(k, b->nsamples, "slot %d pack %lld: extra sample", d,
                 (long long)h);
    cr_assert_eq(w->len[i], b->cu_lengths[k + 1] - b->cu_lengths[k],
                 "slot %d pack %lld sample %d: length", d, (long long)h, k);
    vit += w->vit[i];
    k++;
  }
  cr_assert_eq(k, b->nsamples, "slot %d pack %lld: samples", d, (long long)h);
  cr_assert(close_to(vit, pack_vit(c, b)), "slot %d pack %lld: ViT %g != %g",
            d, (long long)h, vit, pack_vit(c, b));
}

/* Small packs and images: the loader writes every pixel. */
static void matches_loader(const char *layout, const char *model) {
  sim_options_t o = PARSE("--layout", (char *)layout, "--pack-tokens", "4096",
                          "--model", (char *)model, "--seed", "5");
  o.cfg.vlm.tile_size = 16; /* pixels per tile: not the tile's patches */
  o.cfg.vlm.max_side = 16;
  sim_workload_t w = draw(&o.cfg, SLOTS, HANDOFFS);
  cr_assert_gt(w.images, 0, "%s: no images drawn", layout);
  double vit = 0;
  for (int64_t i = 0; i < w.first[HANDOFFS]; i++) vit += w.vit[i];
  cr_assert_gt(vit, 0, "%s: no encoder time", layout);
  for (int32_t d = 0; d < SLOTS; d++) {
    vlmload_config_t cfg = o.cfg.vlm;
    cfg.seed = o.cfg.seed;
    cfg.slot = d;
    cfg.slots = SLOTS;
    char err[256] = "";
    vlmload_t *l = vlmload_open(&cfg, err, sizeof err);
    cr_assert_not_null(l, "%s", err);
    for (int64_t h = 0; h < HANDOFFS; h++)
      same_pack(&o.cfg, &w, d, h, vlmload_next(l));
    vlmload_close(l);
  }
  sim_workload_free(&w);
}

Test(sim_vlm, internvl_packs_are_the_loaders) {
  matches_loader("internvl", "internvl2-8b");
}
Test(sim_vlm, qwen2vl_packs_are_the_loaders) {
  matches_loader("qwen2vl", "qwen2-vl-7b");
}
Test(sim_vlm, qwen3vl_packs_are_the_loaders) {
  matches_loader("qwen3vl", "qwen3-vl-8b");
}

/* ---- compute: the LLM's and the encoder's, where the sample is ------------ */

static void vit_per_rank(const char *layout, const char *model) {
  sim_options_t o = PARSE("--layout", (char *)layout, "--model", (char *)model,
                          "--tp", "model");
  cr_assert_eq(o.cfg.tp, o.cfg.model.tp, "--tp model: the preset's TP");
  sim_workload_t w = draw(&o.cfg, 8, 2);
  double rank_vit[8] = {0};
  int64_t with_images = 0;
  for (int64_t i = 0; i < w.first[w.handoffs]; i++) {
    cr_assert_leq(w.len[i], w.pack);
    cr_assert(close_to(w.seconds[i], llm_seconds(&o.cfg, w.len[i]) + w.vit[i]),
              "%s: sample %lld: LLM + ViT", layout, (long long)i);
    cr_assert_geq(w.patches_sq[i], w.patches[i]);
    cr_assert_gt(w.bytes[i], SIM_BYTES_PER_TOKEN * w.len[i]);
    with_images += w.patches[i] > 0;
    rank_vit[w.origin[i]] += w.vit[i];
  }
  cr_assert_gt(with_images, 0, "%s: no sample with images", layout);
  double lo = rank_vit[0], hi = rank_vit[0];
  for (int r = 0; r < 8; r++) {
    cr_assert_gt(rank_vit[r], 0, "%s: rank %d runs no encoder", layout, r);
    lo = fmin(lo, rank_vit[r]);
    hi = fmax(hi, rank_vit[r]);
  }
  cr_assert_gt(hi, 1.05 * lo, "%s: ViT time %g..%g per rank: no variation",
               layout, lo, hi);
  sim_workload_free(&w);
}

Test(sim_vlm, internvl_vit_per_rank) {
  vit_per_rank("internvl", "internvl2-8b");
}
Test(sim_vlm, qwen2vl_vit_per_rank) { vit_per_rank("qwen2vl", "qwen2.5-vl-7b"); }
Test(sim_vlm, qwen3vl_vit_per_rank) { vit_per_rank("qwen3vl", "qwen3-vl-8b"); }

/* A sweep point of the VLM workload: the encoder's time unbalances the
 * ranks, and a shim's run sees the same tokens as none's. */
Test(sim_vlm, simulates_a_vlm_sweep_point) {
  sim_options_t o = PARSE("--layout", "qwen2vl", "--model", "qwen2-vl-7b",
                          "--tp", "model", "--steps", "2", "--warmup-last",
                          "4", "--solve-reps", "1");
  sim_algo_t algos[2] = {{DPSHIM_ALGO_NONE, 0, 0}, {DPSHIM_ALGO_DEFAULT, 1, 0}};
  sim_run_t runs[2];
  char err[256] = "";
  cr_assert_eq(sim_simulate(&o.cfg, 16, algos, 2, runs, err, sizeof err), 0,
               "%s", err);
  for (int64_t k = 0; k < 2; k++) {
    const sim_step_t *none = &runs[0].step[k], *shim = &runs[1].step[k];
    cr_assert_gt(none->imb_before, 0.01, "step %lld: balanced", (long long)k);
    cr_assert_gt(none->compute_max_s, 0);
    cr_assert_eq(none->tokens, shim->tokens);
    cr_assert_eq(shim->handoffs, 1);
  }
  cr_assert_gt(runs[1].model.d + runs[1].model.e, 0,
               "the warm-up fit learnt no vision terms");
  sim_run_free(&runs[0]);
  sim_run_free(&runs[1]);
}

/* --text-cost: the shim's samples and fit without their images. */
Test(sim_vlm, text_cost_fits_no_vision_terms) {
  sim_options_t o = PARSE("--layout", "qwen3vl", "--model", "qwen3-vl-8b",
                          "--text-cost", "--steps", "1", "--warmup-last",
                          "4", "--solve-reps", "1");
  sim_algo_t algo = {DPSHIM_ALGO_DEFAULT, 1, 0};
  sim_run_t run;
  char err[256] = "";
  cr_assert_eq(sim_simulate(&o.cfg, 16, &algo, 1, &run, err, sizeof err), 0,
               "%s", err);
  cr_assert_eq(run.model.d + run.model.e, 0);
  cr_assert_gt(run.model.a + run.model.b, 0);
  sim_run_free(&run);
}

/* ---- the ViT balance ("+vit") --------------------------------------------- */

/* Images and their encoder seconds in the workload's hand-offs of step s. */
static void step_images(const sim_config_t *c, const sim_workload_t *w,
                        int64_t s, double *images, double *seconds) {
  *images = *seconds = 0;
  for (int32_t m = 0; m < c->micro; m++) {
    int64_t h = s * c->micro + m;
    for (int64_t j = w->image_first[w->first[h]];
         j < w->image_first[w->first[h + 1]]; j++) {
      *images += 1;
      *seconds += w->image[j].vit;
    }
  }
}

static double run_vit_wait(const sim_run_t *r) {
  double wait = 0;
  for (int64_t k = 0; k < r->nsteps; k++) wait += r->step[k].vit_wait_s;
  return wait;
}

/* Per step of a run: every image encoded exactly once (the images and
 * seconds encoded are the workload's), and the ViT exchange only with the
 * ViT balance on. */
static void check_vit_steps(const sim_options_t *o, const sim_run_t *r,
                            const sim_workload_t *w) {
  const char *name = sim_algo_name(r->algo);
  for (int64_t k = 0; k < r->nsteps; k++) {
    const sim_step_t *st = &r->step[k];
    cr_assert_gt(st->vit_max_s, 0, "%s step %lld: no encoder phase", name,
                 (long long)k);
    if (!r->algo.vit) {
      cr_assert_eq(st->vit_moved_bytes + st->vit_xfer_bytes, 0, "%s", name);
      cr_assert_eq(st->vit_calls, 0, "%s", name);
      continue;
    }
    double images, seconds;
    step_images(&o->cfg, w, o->cfg.warmup_last + k, &images, &seconds);
    cr_assert_eq(st->vit_calls, o->cfg.micro, "%s: a call per micro-batch",
                 name);
    cr_assert_eq(st->vit_images, images, "%s step %lld: %g images encoded "
                 "of %g", name, (long long)k, st->vit_images, images);
    cr_assert(close_to(st->vit_seconds, seconds), "%s step %lld: encoder "
              "seconds %g != %g", name, (long long)k, st->vit_seconds,
              seconds);
  }
}

/* An image-heavy mix at DP 32: with the ViT balance at a ratio (no gate),
 * the straggler wait in the encoder's phase falls well below the LLM
 * balance's and none's, its images move (and come back), and without it
 * nothing of the ViT moves. */
static void vit_balance_evens_the_encoder(const char *layout,
                                          const char *model,
                                          const char *micro) {
  sim_options_t o = PARSE("--layout", (char *)layout, "--model", (char *)model,
                          "--tp", "model", "--steps", "3", "--warmup-last",
                          "4", "--solve-reps", "1", "--micro-batches",
                          (char *)micro, "--vit-balance",
                          "--vit-threshold", "0.1"); /* every call meets */
  cr_assert_eq(o.nalgos, 5, "--vit-balance: none, seed, default and +vit");
  cr_assert_str_eq(sim_algo_name(o.algos[3]), "seed+vit");
  cr_assert_str_eq(sim_algo_name(o.algos[4]), "default+vit");
  sim_run_t runs[5];
  char err[256] = "";
  cr_assert_eq(sim_simulate(&o.cfg, 32, o.algos, 5, runs, err, sizeof err),
               0, "%s", err);
  sim_workload_t w = draw(&o.cfg, 32,
                          (o.cfg.warmup_last + o.cfg.steps) * o.cfg.micro);
  for (int a = 0; a < 5; a++) check_vit_steps(&o, &runs[a], &w);
  double none = run_vit_wait(&runs[0]), llm = run_vit_wait(&runs[2]);
  double vit = run_vit_wait(&runs[4]), moved = 0;
  for (int64_t k = 0; k < runs[4].nsteps; k++)
    moved += runs[4].step[k].vit_moved_bytes;
  cr_assert_lt(vit, 0.5 * none, "%s: ViT wait %g s against none's %g s",
               layout, vit, none);
  cr_assert_lt(vit, 0.5 * llm, "%s: ViT wait %g s against the LLM "
               "balance's %g s", layout, vit, llm);
  cr_assert_gt(moved, 0, "%s: no image changed rank", layout);
  cr_assert_gt(runs[4].vit_model.a + runs[4].vit_model.b, 0,
               "%s: the ViT fit learnt nothing", layout);
  cr_assert_eq(runs[4].model.d + runs[4].model.e, 0,
               "%s: the LLM's cost beside the ViT balance has images' terms",
               layout);
  sim_workload_free(&w);
  for (int a = 0; a < 5; a++) sim_run_free(&runs[a]);
}

Test(sim_vlm, vit_balance_internvl_tiles) {
  vit_balance_evens_the_encoder("internvl", "internvl2-8b", "1");
}
Test(sim_vlm, vit_balance_qwen3vl_videos_two_micro_batches) {
  vit_balance_evens_the_encoder("qwen3vl", "qwen3-vl-8b", "2");
}

/* Each sample's images, one by one, add up to what it carries. */
Test(sim_vlm, images_add_up_to_their_sample) {
  sim_options_t o = PARSE("--layout", "qwen2vl", "--model", "qwen2-vl-7b");
  sim_workload_t w = draw(&o.cfg, 4, 2);
  for (int64_t i = 0; i < w.first[w.handoffs]; i++) {
    int64_t patches = 0;
    double vit = 0;
    for (int64_t j = w.image_first[i]; j < w.image_first[i + 1]; j++) {
      patches += w.image[j].patches;
      vit += w.image[j].vit;
    }
    cr_assert_eq(patches, w.patches[i], "sample %lld", (long long)i);
    cr_assert(close_to(vit, w.vit[i]) || (vit == 0 && w.vit[i] == 0));
  }
  sim_workload_free(&w);
}

Test(sim_vlm, vit_balance_needs_a_layout, .exit_code = 2) {
  PARSE("--vit-balance");
}
Test(sim_vlm, vit_algo_needs_a_layout, .exit_code = 2) {
  PARSE("--algos", "none,default+vit");
}
Test(sim_vlm, bad_vit_algo, .exit_code = 2) {
  PARSE("--layout", "internvl", "--algos", "default+vi");
}
Test(sim_vlm, bad_vit_cap_ratio, .exit_code = 2) {
  PARSE("--layout", "internvl", "--vit-cap-ratio", "0");
}

/* ---- the text workload: reftrain's, nothing of vision --------------------- */

Test(sim_vlm, text_workload_is_reftrains) {
  sim_options_t o = PARSE("--profile", "sft", "--model", "qwen2-vl-7b");
  cr_assert_eq(o.cfg.vision, 0);
  sim_workload_t w = draw(&o.cfg, 2, HANDOFFS);
  cr_assert_eq(w.images, 0);
  for (int32_t d = 0; d < 2; d++) {
    packload_config_t cfg = packload_config_default();
    cfg.profile = "sft";
    cfg.headroom = o.cfg.headroom;
    cfg.seed = o.cfg.seed;
    cfg.slot = d;
    cfg.slots = 2;
    cfg.lengths_only = 1;
    char err[256] = "";
    packload_t *pl = packload_open(&cfg, err, sizeof err);
    cr_assert_not_null(pl, "%s", err);
    for (int64_t h = 0; h < HANDOFFS; h++) {
      packload_batch_t *b = packload_next(pl);
      int32_t k = 0;
      for (int64_t i = w.first[h]; i < w.first[h + 1]; i++) {
        if (w.origin[i] != d) continue;
        cr_assert_eq(w.len[i], b->cu_seqlens[k + 1] - b->cu_seqlens[k]);
        cr_assert_eq(w.seconds[i], llm_seconds(&o.cfg, w.len[i]));
        cr_assert_eq(w.bytes[i], SIM_BYTES_PER_TOKEN * w.len[i] +
                                     SIM_BYTES_PER_SAMPLE);
        cr_assert_eq(w.patches[i] + w.patches_sq[i], 0);
        cr_assert_eq(w.vit[i], 0);
        k++;
      }
      cr_assert_eq(k, b->nsamples);
    }
    packload_close(pl);
  }
  sim_workload_free(&w);
}

/* ---- options -------------------------------------------------------------- */

Test(sim_vlm, bad_layout, .exit_code = 2) { PARSE("--layout", "llava"); }
Test(sim_vlm, pack_tokens_needs_a_layout, .exit_code = 2) {
  PARSE("--pack-tokens", "8192");
}
Test(sim_vlm, profile_with_a_layout, .exit_code = 2) {
  PARSE("--layout", "internvl", "--profile", "sft");
}
Test(sim_vlm, tp_model_or_a_number, .exit_code = 2) { PARSE("--tp", "auto"); }
Test(sim_vlm, text_cost_needs_a_layout, .exit_code = 2) {
  PARSE("--text-cost");
}

Test(sim_vlm, layout_options) {
  sim_options_t o = PARSE("--pack-tokens", "8192", "--layout", "qwen3vl");
  cr_assert_eq(o.cfg.vision, 1);
  cr_assert_eq(o.cfg.vlm.layout, VLMLOAD_QWEN3VL);
  cr_assert_eq(o.cfg.vlm.pack_tokens, 8192, "--pack-tokens before --layout");
  o = PARSE("--layout", "internvl", "--layout", "text");
  cr_assert_eq(o.cfg.vision, 0);
  cr_assert_eq(o.cfg.tp, 1);
}

Test(sim_vlm, mix_needs_a_layout, .exit_code = 2) {
  PARSE("--mix", "encoder-heavy");
}
Test(sim_vlm, mix_by_name, .exit_code = 2) {
  PARSE("--layout", "internvl", "--mix", "heavy");
}

/* --mix encoder-heavy: each layout's heavier images, after --layout's
 * defaults; and the encoder's share of the work grows (the images' terms
 * of the drawn samples against their tokens). */
/* A Qwen3-VL video, its frames attended apart, is an image a frame for the
 * ViT balance (as libdpshim_vit.so shows it): each image one block, and
 * they add up to the sample's patches and patches^2. */
Test(sim_vlm, a_qwen3vl_video_is_an_image_a_frame) {
  sim_options_t o = PARSE("--layout", "qwen3vl", "--model", "qwen3-vl-8b",
                          "--mix", "encoder-heavy", "--pack-tokens", "8192");
  sim_workload_t w = draw(&o.cfg, 4, 2);
  int64_t videos = 0;
  for (int64_t i = 0; i < w.first[w.handoffs]; i++) {
    int64_t patches = 0, sq = 0;
    for (int64_t j = w.image_first[i]; j < w.image_first[i + 1]; j++) {
      const sim_image_t *im = &w.image[j];
      cr_assert_eq(im->patches_sq, im->patches * im->patches);
      patches += im->patches;
      sq += im->patches_sq;
    }
    cr_assert_eq(patches, w.patches[i]);
    cr_assert_eq(sq, w.patches_sq[i]);
    videos += w.patches_sq[i] < w.patches[i] * w.patches[i] &&
              w.image_first[i + 1] - w.image_first[i] > 1;
  }
  cr_assert_gt(videos, 0, "no sample with a video of several frames");
  sim_workload_free(&w);
}

Test(sim_vlm, encoder_heavy_mix) {
  sim_options_t o = PARSE("--mix", "encoder-heavy", "--layout", "internvl",
                          "--pack-tokens", "8192");
  cr_assert_eq(o.cfg.vlm.max_tiles, 24);
  cr_assert_float_eq(o.cfg.vlm.image_fraction, 0.9, 1e-12);
  o = PARSE("--layout", "qwen3vl", "--mix", "encoder-heavy");
  cr_assert_eq(o.cfg.vlm.max_side, 128, "doubled");
  cr_assert_eq(o.cfg.vlm.max_frames, 32);
  cr_assert_float_eq(o.cfg.vlm.video_fraction, 0.5, 1e-12);
  double share[2];
  for (int k = 0; k < 2; k++) {
    o = PARSE("--layout", "qwen3vl", "--pack-tokens", "8192", "--mix",
              k ? "encoder-heavy" : "default");
    sim_workload_t w = draw(&o.cfg, 8, 4);
    double sq = 0, len = 0;
    for (int64_t i = 0; i < w.first[w.handoffs]; i++) {
      sq += (double)w.patches_sq[i];
      len += (double)w.len[i];
    }
    share[k] = sq / len;
    sim_workload_free(&w);
  }
  cr_assert_gt(share[1], 2 * share[0], "patches^2 per token %g, default's %g",
               share[1], share[0]);
}

/* ---- --threshold auto: plans priced as the shim prices them --------------- */

/* Plans applied; hand-offs skipped as not worth it into *not_worth, and
 * the seconds spent solving into *solve_s. */
static int64_t applied_and_skipped(sim_options_t *o, int32_t *not_worth,
                                   double *solve_s) {
  sim_algo_t algo = {DPSHIM_ALGO_DEFAULT, 1, 0};
  sim_run_t run;
  char err[256] = "";
  cr_assert_eq(sim_simulate(&o->cfg, 16, &algo, 1, &run, err, sizeof err), 0,
               "%s", err);
  int64_t applied = 0;
  *not_worth = 0;
  *solve_s = 0;
  for (int64_t k = 0; k < run.nsteps; k++) {
    applied += run.step[k].applied;
    *not_worth += run.step[k].skipped[sim_skip_index("not-worth-it")];
    *solve_s += run.step[k].solve_s;
  }
  sim_run_free(&run);
  return applied;
}

/* Where copies are cheap the plans pay and are applied; where every byte
 * copied costs a millisecond none pays, and each is skipped as not worth
 * it (never as balanced: auto leaves the solver no ratio); where even the
 * fixed cost of a collective is a second, without solving. */
Test(sim_vlm, auto_applies_only_plans_that_pay) {
  sim_options_t o = PARSE("--layout", "qwen2vl", "--model", "qwen2-vl-7b",
                          "--tp", "model", "--steps", "3", "--warmup-last",
                          "4", "--solve-reps", "1", "--threshold", "auto");
  cr_assert_lt(o.cfg.threshold, 0);
  int32_t not_worth;
  double solve_s;
  cr_expect_gt(applied_and_skipped(&o, &not_worth, &solve_s), 0);
  o.cfg.price_net.memcpy_bps = 1e3;
  cr_expect_eq(applied_and_skipped(&o, &not_worth, &solve_s), 0);
  cr_expect_eq(not_worth, 3, "every step's plan skipped as not worth it");
  cr_expect_gt(solve_s, 0, "skipped after solving");
  o.cfg.price_net.serial_s = 1;
  cr_expect_eq(applied_and_skipped(&o, &not_worth, &solve_s), 0);
  cr_expect_eq(not_worth, 3);
  cr_expect_eq(solve_s, 0, "solved where no plan could pay");
}

/* DPSHIM_VIT_TRIGGER_THRESHOLD=auto: a micro-batch's encoder calls meet
 * only where the plan with the vision terms leaves the images more uneven
 * than the calls' rounds cost. Rounds of a second each: no call meets, and
 * every step is default's to the bit; free rounds and a token cap that
 * binds (no rank above the mean tokens, so the LLM level cannot even the
 * encoders' work and the ViT level can): some calls meet (8K InternVL
 * packs, where a sample's tiles are a large part of a pack). */
Test(sim_vlm, auto_vit_meets_only_where_it_can_pay) {
  sim_options_t o = PARSE("--layout", "internvl", "--model", "internvl2-8b",
                          "--pack-tokens", "8192", /* a few tiled samples */
                          "--tp", "model", "--steps", "6", "--warmup-last",
                          "4", "--solve-reps", "1", "--threshold", "auto",
                          "--vit-threshold", "auto");
  cr_assert_lt(o.cfg.vit_threshold, 0);
  sim_algo_t algos[2] = {{DPSHIM_ALGO_DEFAULT, 1, 0},
                         {DPSHIM_ALGO_DEFAULT, 1, 1}};
  sim_run_t runs[2];
  char err[256] = "";
  o.cfg.price_net.latency_s = 1;
  cr_assert_eq(sim_simulate(&o.cfg, 8, algos, 2, runs, err, sizeof err), 0,
               "%s", err);
  for (int64_t k = 0; k < runs[0].nsteps; k++) {
    cr_expect_eq(runs[1].step[k].vit_calls, 0, "step %lld met", (long long)k);
    cr_expect_eq(runs[1].step[k].compute_max_s, runs[0].step[k].compute_max_s,
                 "step %lld", (long long)k);
  }
  sim_run_free(&runs[0]);
  sim_run_free(&runs[1]);
  o.cfg.price_net.latency_s = 0;
  o.cfg.price_net.bandwidth = o.cfg.price_net.memcpy_bps = 1e30;
  o.cfg.cap_ratio = 1.0;
  cr_assert_eq(sim_simulate(&o.cfg, 8, &algos[1], 1, runs, err, sizeof err),
               0, "%s", err);
  int64_t calls = 0;
  for (int64_t k = 0; k < runs[0].nsteps; k++) calls += runs[0].step[k].vit_calls;
  cr_expect_gt(calls, 0, "free rounds, and no call met");
  sim_run_free(&runs[0]);
}

/* The ViT level's ceiling: no rank's compute below its own LLM part nor the
 * mean, so the floor is within [mean, max]; a Qwen3-VL mix of long videos
 * leaves default's slowest rank well above it, and images divisible at
 * will would leave nothing to win where no sample has an image. */
static double ceiling_of(sim_options_t *o, int32_t ranks) {
  sim_algo_t algo = {DPSHIM_ALGO_DEFAULT, 1, 0};
  sim_run_t run;
  char err[256] = "";
  cr_assert_eq(sim_simulate(&o->cfg, ranks, &algo, 1, &run, err, sizeof err),
               0, "%s", err);
  double held = 0, floor_s = 0;
  for (int64_t k = 0; k < run.nsteps; k++) {
    const sim_step_t *st = &run.step[k];
    cr_assert_leq(st->vit_floor_s, st->held_max_s * (1 + 1e-12));
    cr_assert_gt(st->vit_floor_s, 0);
    held += st->held_max_s;
    floor_s += st->vit_floor_s;
  }
  sim_run_free(&run);
  return held / floor_s - 1;
}

Test(sim_vlm, the_vit_ceiling_is_what_the_llm_part_leaves) {
  sim_options_t o = PARSE("--layout", "qwen3vl", "--model", "qwen3-vl-8b",
                          "--tp", "model", "--mix", "encoder-heavy",
                          "--steps", "4", "--warmup-last", "4",
                          "--solve-reps", "1");
  cr_expect_gt(ceiling_of(&o, 64), 0.01, "long videos leave nothing to win");
  o.cfg.vlm.image_fraction = o.cfg.vlm.video_fraction = 0;
  cr_expect_lt(ceiling_of(&o, 64), 1e-12, "no image, yet a ceiling");
}
