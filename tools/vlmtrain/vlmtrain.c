/* vlmtrain: the data-parallel MPI trainer over libvlmload.so, unmodified
 * for the shim (it includes no dpshim header).
 *
 * Each step: --micro-batches packs through vlmload_next() (a call into
 * another shared object, which libdpshim.so interposes), an emulated
 * compute per pack (the --model preset's LLM and vision encoder on the
 * emulated GPU of tools/emu, 1/tp of it per rank: the encoder's forward
 * and backward are libvit.so's vit_forward() and vit_backward(), which
 * sleep its share), then a gradient MPI_Allreduce (the LLM's stand-in and
 * the encoder's int64 parameter gradients) and the preset's modelled
 * gradient sync. --schedule afab runs every micro-batch's encoder forward
 * first and the encoder backwards last, in reverse order (GPipe); 1f1b
 * (the default) each micro-batch whole in turn. Ranks are
 * Megatron-ordered: the --tp ranks of a tensor-parallel group (consecutive)
 * read the same data. At the end rank 0 prints one JSON line:
 *
 *   {"steps":..,"tokens":..,"tgs":..,"step_ms_mean":..,
 *    "consumed_digest":"..","images_digest":"..","check_errors":N,
 *    "one_image":N,"one_image_moved":N,"image_rows_max":N,
 *    "image_rows_capacity":N,"embeddings_digest":"..",
 *    "vit_grad_digest":"..",["patch_grad_digest":".."],
 *    "vit_faults_seen":N,"vit_seconds_max":..,"vit_seconds_mean":..}
 *
 * consumed_digest covers every (step, sample, tokens, labels) consumed,
 * images_digest every tile / patch row / grid row / flag, each with its
 * sample: sums of hashes, so the same whichever rank consumed what.
 * check_errors (with --check) counts samples that are not what their key
 * implies, samples consumed twice in a step, and consumed != produced.
 * What the hand-offs held, for the tests' edge cases: one_image, the
 * hand-offs (per DP slot) that returned exactly one image (Qwen: one
 * image_grid_thw row; InternVL: one <img>), one_image_moved those of them
 * holding a sample of another slot (a balancer moved it there);
 * image_rows_max the most image rows (patch rows, tiles) any hand-off
 * returned, image_rows_capacity the least image buffer.
 * embeddings_digest covers every embedding row the encoder wrote, with its
 * sample (as images_digest); vit_grad_digest chains each step's all-reduced
 * encoder parameter gradients; patch_grad_digest (--patch-grads) sums a
 * hash of each image's patch gradients. All three are the same whichever
 * rank consumed or encoded what, and whatever the --schedule.
 * vit_faults_seen counts the encoder calls --vit-fault broke that were
 * refused as they must be (-1), over all ranks; vit_seconds_max and
 * vit_seconds_mean are, over ranks, the encoder seconds each rank slept
 * (libvit's vit_seconds_charged(): the images a rank encoded, its own or,
 * under a ViT balance, another's).
 *
 * --stats-out FILE: rank 0 writes one JSON line per step, as reftrain's,
 * with every rank's times (ms) in rank order:
 *
 *   {"step":s,"step_ms":..,"compute_ms":[..],"emu_ms":[..],
 *    "handoff_ms":[..],"wait_ms":[..],"vit_ms":[..],"vit_emu_ms":[..],
 *    "tokens":[..]}
 *
 * step_ms is rank 0's; compute_ms runs from the hand-off's return to the end
 * of the emulated compute (the loader's and the trainer's CPU work
 * included), emu_ms is the emulated GPU time alone (what compute_ms would be
 * on an idle machine), wait_ms the gradient sync (the real all-reduce and
 * the modelled one), vit_ms the wall time inside the encoder's calls
 * (vit_forward, vit_backward, vit_saved_free: with an interposer, its
 * exchanges and its waits for the other ranks included; part of
 * compute_ms), vit_emu_ms the encoder's emulated time alone (what the
 * images this rank encoded cost, wherever they came from); tokens are
 * those a rank counts (0 on TP peers other than
 * the first).
 *
 *   mpirun -np 8 vlmtrain --layout internvl|qwen2vl|qwen3vl [options]
 */
#include <inttypes.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../cli.h"
#include "../emu/emu.h"
#include "../mix.h"
#include "../stepids.h"
#include "../timeutil.h"
#include "vit.h"
#include "vlmload.h"

#define PROG "vlmtrain"
/* The LLM's stand-in gradient in the sync: 16 KiB of zeros, as before. */
#define GRAD_WORDS 2048

/* --schedule: the order of a step's micro-batches. */
typedef enum schedule { SCHEDULE_1F1B = 0, SCHEDULE_AFAB } schedule_t;

/* --vit-fault KIND:RANK:STEP, for the tests (see HELP). */
typedef enum vit_fault_kind {
  VIT_FAULT_NONE = 0,
  VIT_FAULT_GRID,
  VIT_FAULT_EXTRA,
  VIT_FAULT_REBACKWARD
} vit_fault_kind_t;

typedef struct vit_fault {
  vit_fault_kind_t kind;
  int64_t rank, step; /* world rank, 0-based step */
} vit_fault_t;

typedef struct opts {
  vlmload_config_t cfg;
  emu_model_t model; /* --model: the emulated GPU's preset */
  int64_t steps, micro, tp, check;
  int64_t fault_rank; /* the rank whose loader breaks --fault-pack */
  double time_scale;
  const char *stats_out; /* --stats-out: per-step, per-rank times */
  int32_t embed_dim;     /* --embed-dim: the encoder's embedding row */
  int patch_grads;       /* --patch-grads: ask the encoder for them */
  int vit_ship; /* --vit-ship: vit_ship() at each hand-off (2: from a thread
                 of its own, --vit-ship-thread) */
  int vit_async;         /* --vit-async: vit_forward_async(), vit_wait() */
  schedule_t schedule;   /* --schedule */
  vit_fault_t vit_fault; /* --vit-fault */
  const char *mix;       /* --mix, applied after the other options */
} opts_t;

/* Per-step figures of this rank, for --stats-out. */
enum {
  ST_COMPUTE, ST_EMU, ST_HANDOFF, ST_WAIT, ST_VIT, ST_VIT_EMU, ST_TOKENS, ST_N
};

typedef struct ledger {
  uint64_t *ids; /* (step, key) pairs this DP slot consumed */
  int64_t n, cap, errors, tokens;
  uint64_t digest, images;
  uint64_t embeddings;  /* every embedding row, keyed by its sample */
  uint64_t vit_grads;   /* each step's all-reduced encoder gradients */
  uint64_t patch_grads; /* with --patch-grads: every image's */
  int64_t one_image, one_image_moved, rows_max, rows_capacity;
  double *stats;   /* [steps][ST_N], with --stats-out */
  double *step_ms; /* [steps], with --stats-out */
} ledger_t;

static void die(const char *what) {
  fprintf(stderr, PROG ": %s\n", what);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

/* ---- options ------------------------------------------------------------- */

#define USAGE                                                                \
  "usage: mpirun -np N " PROG " --layout internvl|qwen2vl|qwen3vl "           \
  "[--model NAME] [--steps N] [--seed N] [--micro-batches N] [--tp N] "      \
  "[--check] [--time-scale X] [--pack-tokens N] [--tile-size S] "            \
  "[--num-image-token N] [--max-tiles N] [--max-side N] "                    \
  "[--image-fraction X] [--video-fraction X] [--max-images N] "              \
  "[--image-rows N [--image-headroom X]] [--fault-pack N [--fault-rank R]] " \
  "[--prefetch N] [--mix default|encoder-heavy] [--max-frames N] "         \
  "[--stats-out FILE] [--embed-dim N] [--patch-grads] [--vit-ship] "        \
  "[--vit-ship-thread] [--vit-async] "                                       \
  "[--schedule 1f1b|afab] [--vit-fault grid|extra|rebackward:RANK:STEP]\n"

/* What the loader options less obvious than their names do. */
#define HELP                                                                 \
  "  --image-fraction X  share of samples with images (0.05: text-heavy,\n" \
  "                      with --max-images 1 ranks often hold one image)\n" \
  "  --max-images N      images per image sample, 1..N\n"                    \
  "  --max-tiles N       InternVL: tiles per image, 1..N\n"                  \
  "  --image-rows N      a pack holds at most N image rows (Qwen patch\n"   \
  "                      rows, InternVL tiles, dummies included)\n"          \
  "  --image-headroom X  with --image-rows: the image buffer holds X * N\n" \
  "                      rows, X >= 1 (1: no room beyond one pack's)\n"  \
  "  --max-frames N      Qwen: frames per video, even, 2..N (8)\n"         \
  "  --mix M             default, or encoder-heavy (after the options above:\n" \
  "                      InternVL 24 tiles per image at most, 90 %% of\n"  \
  "                      samples with images; Qwen 90 %% with images,\n"  \
  "                      --max-side doubled; Qwen3-VL half the samples\n"  \
  "                      with a video of up to 32 frames)\n"              \
  "  --prefetch N        the loader builds N packs ahead in a thread of its\n" \
  "                      own (a DataLoader's workers); 0 (default): each\n" \
  "                      pack is built in the hand-off call\n"             \
  "  --embed-dim N       floats per embedding row of libvit's encoder\n"  \
  "  --patch-grads       the encoder's backward writes patch gradients\n"   \
  "  --vit-ship          each micro-batch's encoder calls are announced with\n" \
  "                      vit_ship() right after its hand-off, before the\n"  \
  "                      first of its forwards (an interposer may start\n"  \
  "                      moving their inputs there)\n"                      \
  "  --vit-ship-thread   the same from a thread of its own (a loader's),\n"  \
  "                      joined before the forwards\n"                      \
  "  --vit-async         the encoder's forwards through vit_forward_async(),\n" \
  "                      each waited for (vit_wait) where the LLM first\n"  \
  "                      reads its embeddings\n"                            \
  "  --schedule S        1f1b (default): each micro-batch's encoder forward,\n" \
  "                      LLM and encoder backward in turn; afab: every\n"   \
  "                      micro-batch's hand-off and forward, then the LLM,\n" \
  "                      then the backwards in reverse order (GPipe). The\n" \
  "                      digests do not depend on it\n"                      \
  "  --vit-fault KIND:RANK:STEP  tests: world rank RANK breaks its encoder\n" \
  "                      calls at STEP (0-based), in its first micro-batch:\n" \
  "      grid        its first forward gets grid rows that do not add up to\n" \
  "                  the patch rows given and must return -1 (counted in\n" \
  "                  vit_faults_seen); every rank then releases what that\n" \
  "                  call gave it (vit_saved_free, NULL on RANK) and redoes\n" \
  "                  the call as it should be, so outputs are unchanged\n"   \
  "      extra       one forward more than the other ranks make, on its\n"  \
  "                  first call's input, released at once (vit_saved_free)\n" \
  "      rebackward  after its first backward of the step, vit_backward\n"  \
  "                  again on the same (consumed) saved: must return -1\n"  \
  "                  (counted in vit_faults_seen). Without an interposer\n" \
  "                  that is a double free, so it needs DPSHIM_VIT_BALANCE=1\n"

static int usage(const char *bad) {
  fprintf(stderr, PROG ": %s\n" USAGE, bad);
  return -1;
}

/* The numeric options: each writes one int32, int64 or double. */
typedef struct option {
  const char *name;
  double lo, hi;
  int32_t *i32;
  int64_t *i64;
  double *dbl;
} option_t;

static int set(const option_t *op, const char *v) {
  int64_t x;
  if (!v) return -1;
  if (op->dbl) return cli_double(v, op->lo, op->hi, op->dbl);
  if (cli_int(v, (int64_t)op->lo, (int64_t)op->hi, &x) < 0) return -1;
  if (op->i32) *op->i32 = (int32_t)x;
  else *op->i64 = x;
  return 0;
}

/* One option with its value; -1 when it is unknown or its value bad. */
static int parse_one(opts_t *o, const char *name, const char *v) {
  vlmload_config_t *c = &o->cfg;
  const option_t table[] = {
      {"--steps", 1, 1 << 20, NULL, &o->steps, NULL},
      {"--micro-batches", 1, 64, NULL, &o->micro, NULL},
      {"--tp", 1, 1024, NULL, &o->tp, NULL},
      {"--time-scale", 0, 1e6, NULL, NULL, &o->time_scale},
      {"--seed", 0, 9e15, NULL, (int64_t *)&c->seed, NULL},
      {"--pack-tokens", 256, 1 << 24, NULL, &c->pack_tokens, NULL},
      {"--tile-size", 1, 1024, &c->tile_size, NULL, NULL},
      {"--num-image-token", 1, 1 << 16, &c->num_image_token, NULL, NULL},
      {"--max-side", 8, 1024, &c->max_side, NULL, NULL},
      {"--max-frames", 2, 64, &c->max_frames, NULL, NULL},
      {"--max-tiles", 1, 64, &c->max_tiles, NULL, NULL},
      {"--image-rows", 1, 1 << 30, NULL, &c->image_rows, NULL},
      {"--prefetch", 0, 8, &c->prefetch, NULL, NULL},
      {"--image-headroom", 1, 64, NULL, NULL, &c->image_headroom},
      {"--max-images", 1, 16, &c->max_images, NULL, NULL},
      {"--image-fraction", 0, 1, NULL, NULL, &c->image_fraction},
      {"--video-fraction", 0, 1, NULL, NULL, &c->video_fraction},
      {"--fault-pack", 0, 9e15, NULL, &c->fault_pack, NULL},
      {"--fault-rank", -1, 1 << 20, NULL, &o->fault_rank, NULL},
      {"--embed-dim", 1, 4096, &o->embed_dim, NULL, NULL},
  };
  if (!strcmp(name, "--layout"))
    return v ? vlmload_layout_from_name(v, &c->layout) : -1;
  if (!strcmp(name, "--model"))
    return v ? emu_model_find(v, &o->model, NULL, 0) : -1;
  if (!strcmp(name, "--stats-out")) {
    o->stats_out = v;
    return v && *v ? 0 : -1;
  }
  for (size_t k = 0; k < sizeof table / sizeof table[0]; k++)
    if (!strcmp(name, table[k].name)) return set(&table[k], v);
  return -1;
}

static int parse_schedule(const char *v, schedule_t *out) {
  if (v && !strcmp(v, "1f1b")) *out = SCHEDULE_1F1B;
  else if (v && !strcmp(v, "afab")) *out = SCHEDULE_AFAB;
  else return usage("--schedule: expected 1f1b or afab");
  return 0;
}

/* KIND:RANK:STEP. */
static int parse_vit_fault(const char *v, vit_fault_t *out) {
  static const char *const kinds[] = {"grid", "extra", "rebackward"};
  const char *bad = "--vit-fault: expected grid|extra|rebackward:RANK:STEP";
  char kind[16], rank[24], step[24];
  out->kind = VIT_FAULT_NONE; /* the last --vit-fault given counts */
  if (!v || sscanf(v, "%15[a-z]:%23[0-9]:%23[0-9]", kind, rank, step) != 3 ||
      strlen(kind) + strlen(rank) + strlen(step) + 2 != strlen(v) ||
      cli_int(rank, 0, 1 << 20, &out->rank) < 0 ||
      cli_int(step, 0, 1 << 20, &out->step) < 0)
    return usage(bad);
  for (int k = 0; k < 3; k++)
    if (!strcmp(kind, kinds[k])) out->kind = (vit_fault_kind_t)(k + 1);
  if (out->kind == VIT_FAULT_NONE) return usage(bad);
  /* Only an interposer refuses the second backward; libvit would free the
   * saved twice. */
  const char *vit = getenv("DPSHIM_VIT_BALANCE");
  if (out->kind == VIT_FAULT_REBACKWARD && !(vit && !strcmp(vit, "1")))
    return usage("--vit-fault rebackward: needs DPSHIM_VIT_BALANCE=1 (the "
                 "shim refuses the second vit_backward; without it, it is a "
                 "double free)");
  return 0;
}

/* The options with a message of their own: 1 when name is none of them. */
static int parse_encoder_option(opts_t *o, const char *name, const char *v) {
  if (!strcmp(name, "--mix")) return (o->mix = v) ? 0 : usage("--mix: a name");
  if (!strcmp(name, "--schedule")) return parse_schedule(v, &o->schedule);
  if (!strcmp(name, "--vit-fault")) return parse_vit_fault(v, &o->vit_fault);
  return 1;
}

static int parse_args(int argc, char **argv, opts_t *o) {
  *o = (opts_t){.steps = 10, .micro = 1, .tp = 1, .time_scale = 1.0,
                .fault_rank = 1, .embed_dim = 8};
  vlmload_layout_t layout = VLMLOAD_INTERNVL;
  int have_layout = 0;
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "--help")) {
      printf(USAGE HELP);
      exit(0);
    } else if (!strcmp(argv[i], "--layout") && i + 1 < argc) {
      if (vlmload_layout_from_name(argv[i + 1], &layout) < 0)
        return usage("--layout: internvl, qwen2vl or qwen3vl");
      have_layout = 1;
    }
  if (!have_layout) return usage("--layout is required");
  o->cfg = vlmload_config_default(layout);
  o->model = emu_model_default();
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--check")) {
      o->check = 1;
      continue;
    }
    if (!strcmp(argv[i], "--vit-ship") ||
        !strcmp(argv[i], "--vit-ship-thread")) {
      o->vit_ship = strcmp(argv[i], "--vit-ship") ? 2 : 1;
      continue;
    }
    if (!strcmp(argv[i], "--vit-async")) {
      o->vit_async = 1;
      continue;
    }
    if (!strcmp(argv[i], "--patch-grads")) {
      o->patch_grads = 1;
      continue;
    }
    int rc = parse_encoder_option(o, argv[i], i + 1 < argc ? argv[i + 1]
                                                             : NULL);
    if (rc < 0) return -1;
    if (rc == 0) {
      i++;
      continue;
    }
    if (parse_one(o, argv[i], i + 1 < argc ? argv[i + 1] : NULL) < 0) {
      char line[160];
      snprintf(line, sizeof line, "%s: unknown, or a bad value", argv[i]);
      return usage(line);
    }
    i++;
  }
  if (o->mix && vlmload_config_mix(&o->cfg, o->mix) < 0)
    return usage("--mix: expected default or encoder-heavy");
  if (o->cfg.image_headroom > 0 && o->cfg.image_rows == 0)
    return usage("--image-headroom: needs --image-rows");
  if (o->vit_fault.kind != VIT_FAULT_NONE && o->vit_fault.step >= o->steps)
    return usage("--vit-fault: STEP must be below --steps");
  return 0;
}

/* ---- what a pack holds, per sample --------------------------------------- */

static int64_t count(const int64_t *tok, int32_t from, int32_t to,
                     int64_t id) {
  int64_t n = 0;
  for (int32_t t = from; t < to; t++) n += tok[t] == id;
  return n;
}

/* A sample's media as a model finds them: InternVL tiles by <IMG_CONTEXT>
 * tokens (or its one dummy tile), Qwen images and videos by pad tokens,
 * taking grid rows in order. Cursors advance past the sample's. */
typedef struct cursor {
  int64_t tile, rows[2];
  int32_t grid[2];
  const float *emb[2]; /* the encoder's rows: Qwen images, videos; tiles */
  int64_t embed_dim;
  uint64_t emb_hash;   /* the walked media's embedding rows */
} cursor_t;

static uint64_t qwen_media_hash(const vlm_qwen_media_t *m, int64_t pads,
                                int k, cursor_t *c) {
  uint64_t h = 1469598103934665603ull;
  while (pads > 0 && c->grid[k] < m->count) {
    const int32_t *g = m->grid_thw + 3 * (size_t)c->grid[k];
    int64_t rows = (int64_t)g[0] * g[1] * g[2];
    h = dpshim__tool_hash(h, g, 3 * sizeof *g);
    h = dpshim__tool_hash(h, m->rows + (size_t)c->rows[k] * VLMLOAD_QWEN_ROW,
                          (size_t)rows * VLMLOAD_QWEN_ROW * sizeof(float));
    int64_t merged = VLMLOAD_QWEN_MERGE * VLMLOAD_QWEN_MERGE;
    c->emb_hash = dpshim__tool_hash(
        c->emb_hash, c->emb[k] + c->rows[k] / merged * c->embed_dim,
        (size_t)(rows / merged * c->embed_dim) * sizeof(float));
    pads -= rows / (VLMLOAD_QWEN_MERGE * VLMLOAD_QWEN_MERGE);
    c->rows[k] += rows;
    c->grid[k]++;
  }
  return h;
}

static uint64_t media_hash(const vlm_batch_t *b, int32_t i, cursor_t *c) {
  int32_t t0 = b->cu_lengths[i], t1 = b->cu_lengths[i + 1];
  if (b->layout != VLMLOAD_INTERNVL) {
    const vlm_qwen_t *q = &b->qwen;
    int64_t ipads = count(q->tokens, t0, t1, VLMLOAD_QWEN_IMAGE_PAD);
    int64_t vpads = count(q->tokens, t0, t1, VLMLOAD_QWEN_VIDEO_PAD);
    uint64_t h = qwen_media_hash(&q->images, ipads, 0, c);
    return h ^ dpshim__tool_mix64(qwen_media_hash(&q->videos, vpads, 1, c));
  }
  const vlm_internvl_t *v = &b->internvl;
  int64_t ctx = count(v->tokens, t0, t1, VLMLOAD_INTERNVL_CONTEXT);
  int64_t tiles = ctx ? ctx / v->num_image_token : 1;
  size_t per = 3 * (size_t)v->tile_size * (size_t)v->tile_size;
  uint64_t h = dpshim__tool_hash(1469598103934665603ull,
                                 v->image_flags + c->tile,
                                 (size_t)tiles * sizeof *v->image_flags);
  h = dpshim__tool_hash(h, v->imgs + (size_t)c->tile * per,
                        (size_t)tiles * per * sizeof(float));
  /* The dummy tile is encoded too (its embedding dropped by the model). */
  int64_t per_tile = v->num_image_token * c->embed_dim;
  c->emb_hash = dpshim__tool_hash(c->emb_hash,
                                  c->emb[0] + c->tile * per_tile,
                                  (size_t)(tiles * per_tile) * sizeof(float));
  c->tile += tiles;
  return h;
}

static uint64_t tokens_hash(const vlm_batch_t *b, int32_t i) {
  int32_t t0 = b->cu_lengths[i];
  size_t n = (size_t)(b->cu_lengths[i + 1] - t0);
  const int64_t *tok = b->layout == VLMLOAD_INTERNVL ? b->internvl.tokens
                                                     : b->qwen.tokens;
  const int64_t *lab = b->layout == VLMLOAD_INTERNVL ? b->internvl.labels
                                                     : b->qwen.labels;
  uint64_t h =
      dpshim__tool_hash(1469598103934665603ull, tok + t0, n * sizeof *tok);
  return dpshim__tool_hash(h, lab + t0, n * sizeof *lab);
}

/* ---- what a hand-off returned, as a whole --------------------------------- */

/* Images as the model counts them: grid rows, or InternVL's <img> tokens. */
static int64_t images_of(const vlm_batch_t *b) {
  if (b->layout != VLMLOAD_INTERNVL) return b->qwen.images.count;
  return count(b->internvl.tokens, 0, b->cu_lengths[b->nsamples],
               VLMLOAD_INTERNVL_IMG_START);
}

static int64_t image_rows_of(const vlm_batch_t *b) {
  if (b->layout == VLMLOAD_INTERNVL) return b->internvl.ntiles;
  int64_t rows = 0;
  for (int32_t k = 0; k < b->qwen.images.count; k++) {
    const int32_t *g = b->qwen.images.grid_thw + 3 * (size_t)k;
    rows += (int64_t)g[0] * g[1] * g[2];
  }
  return rows;
}

static int64_t image_capacity_of(const vlm_batch_t *b) {
  return b->layout == VLMLOAD_INTERNVL ? b->internvl.capacity_tiles
                                       : b->qwen.images.capacity_rows;
}

/* Whether a sample of another DP slot is here: only a balancer puts one. */
static int holds_moved(const vlm_batch_t *b, int32_t slot) {
  for (int32_t i = 0; i < b->nsamples; i++)
    if (b->keys[i] >> VLMLOAD_SLOT_SHIFT != (uint64_t)slot) return 1;
  return 0;
}

static void tally(ledger_t *led, const vlm_batch_t *b, int32_t slot) {
  int64_t rows = image_rows_of(b), cap = image_capacity_of(b);
  if (images_of(b) == 1) {
    led->one_image++;
    led->one_image_moved += holds_moved(b, slot);
  }
  if (rows > led->rows_max) led->rows_max = rows;
  if (led->rows_capacity == 0 || cap < led->rows_capacity)
    led->rows_capacity = cap;
}

/* ---- the vision encoder: libvit.so --------------------------------------- */

/* One encoder call of a pack: its Qwen images, its videos, or its InternVL
 * tiles (dummies included), with the buffers it writes. */
typedef struct encoder_call {
  vit_input_t in;
  vit_saved_t *saved;
  float *emb, *grad, *patch_grad;
  int64_t emb_cap, grad_cap, patch_cap; /* floats */
  int64_t tokens;                       /* embedding rows */
  /* afab: the inputs copied out of the loader's buffers, which the next
   * hand-off rewrites while this call's backward is still to come. */
  int32_t *grid_kept;
  float *rows_kept;
  int64_t grid_cap, rows_cap; /* int32s, floats */
} encoder_call_t;

/* A micro-batch's encoder calls, from their forward to their backward. */
typedef struct encoder_micro {
  encoder_call_t call[2];
  double scale; /* this micro-batch's emulator noise x time scale / tp */
} encoder_micro_t;

typedef struct encoder {
  vit_t *vit;
  int32_t ncalls; /* InternVL 1 (tiles), Qwen 2 (images, videos) */
  int32_t row_floats, nparams;
  int64_t nmicro;         /* slots: 1 (1f1b) or --micro-batches (afab) */
  encoder_micro_t *micro; /* [nmicro] */
  int64_t *params;  /* this step's parameter gradients, in the sync */
  int64_t *discard; /* [nparams]: TP peers' copies, kept out of the sum */
  int64_t faults_seen; /* --vit-fault calls refused as expected */
  double wall;         /* seconds inside the encoder's calls, this step */
  int async;           /* --vit-async */
} encoder_t;

static void encoder_open(encoder_t *enc, const opts_t *o) {
  int internvl = o->cfg.layout == VLMLOAD_INTERNVL;
  vit_config_t cfg = vit_config_default(internvl ? VIT_INTERNVL : VIT_QWEN);
  cfg.model = o->model.name;
  cfg.embed_dim = o->embed_dim;
  if (internvl) {
    cfg.row_floats = 3 * o->cfg.tile_size * o->cfg.tile_size;
    cfg.tile_tokens = o->cfg.num_image_token;
  } else {
    cfg.row_floats = VLMLOAD_QWEN_ROW;
    cfg.merge = VLMLOAD_QWEN_MERGE;
  }
  char err[256];
  *enc = (encoder_t){.vit = vit_open(&cfg, err, sizeof err),
                     .ncalls = internvl ? 1 : 2,
                     .row_floats = cfg.row_floats, .nparams = cfg.params,
                     .nmicro = o->schedule == SCHEDULE_AFAB ? o->micro : 1,
                     .async = o->vit_async};
  if (!enc->vit) die(err);
  enc->discard = calloc((size_t)cfg.params, sizeof *enc->discard);
  enc->micro = calloc((size_t)enc->nmicro, sizeof *enc->micro);
  if (!enc->discard || !enc->micro) die("out of memory for the encoder");
}

static void encoder_close(encoder_t *enc) {
  for (int64_t m = 0; m < enc->nmicro; m++)
    for (int32_t k = 0; k < 2; k++) {
      encoder_call_t *c = &enc->micro[m].call[k];
      free(c->emb);
      free(c->grad);
      free(c->patch_grad);
      free(c->grid_kept);
      free(c->rows_kept);
    }
  free(enc->micro);
  free(enc->discard);
  vit_close(enc->vit);
}

/* p with room for n elements of `size` bytes (*cap elements now); the old
 * contents are not kept: every user rewrites its buffer whole. */
static void *grow_bytes(void *p, int64_t *cap, int64_t n, size_t size) {
  if (n <= *cap) return p;
  free(p);
  *cap = n;
  p = malloc((size_t)n * size);
  if (!p) die("out of memory for the encoder's buffers");
  return p;
}

static float *grow(float *p, int64_t *cap, int64_t floats) {
  return grow_bytes(p, cap, floats, sizeof(float));
}

static vit_input_t encoder_input(const vlm_batch_t *b, int32_t k) {
  if (b->layout == VLMLOAD_INTERNVL)
    return (vit_input_t){.count = b->internvl.ntiles,
                         .rows = b->internvl.imgs,
                         .nrows = b->internvl.ntiles};
  const vlm_qwen_media_t *m = k ? &b->qwen.videos : &b->qwen.images;
  int64_t rows = 0;
  for (int32_t i = 0; i < m->count; i++) {
    const int32_t *g = m->grid_thw + 3 * (size_t)i;
    rows += (int64_t)g[0] * g[1] * g[2];
  }
  return (vit_input_t){.count = m->count, .grid_thw = m->grid_thw,
                       .rows = m->rows, .nrows = rows};
}

/* afab: the call's inputs in buffers of its own until its backward, as
 * autograd keeps a forward's inputs (an interposer may read them there). */
static void keep_inputs(encoder_call_t *c, int32_t row_floats) {
  if (c->in.grid_thw && c->in.count > 0) {
    c->grid_kept = grow_bytes(c->grid_kept, &c->grid_cap, 3 * c->in.count,
                              sizeof(int32_t));
    memcpy(c->grid_kept, c->in.grid_thw,
           3 * (size_t)c->in.count * sizeof(int32_t));
    c->in.grid_thw = c->grid_kept;
  }
  int64_t floats = c->in.nrows * row_floats;
  if (floats <= 0) return;
  c->rows_kept = grow(c->rows_kept, &c->rows_cap, floats);
  memcpy(c->rows_kept, c->in.rows, (size_t)floats * sizeof(float));
  c->in.rows = c->rows_kept;
}

/* libvit's calls, timed: with a shim, the time inside them includes its
 * exchanges and its waits for the other ranks. */
static int timed_forward(encoder_t *enc, const vit_input_t *in, float *emb,
                         vit_saved_t **saved) {
  double t = dpshim__tool_now_s();
  int rc = enc->async ? vit_forward_async(enc->vit, in, emb, saved)
                      : vit_forward(enc->vit, in, emb, saved);
  enc->wall += dpshim__tool_now_s() - t;
  return rc;
}

/* --vit-async: a forward's embeddings all in before the LLM reads them. */
static void timed_wait(encoder_t *enc, vit_saved_t *saved) {
  double t = dpshim__tool_now_s();
  if (enc->async && vit_wait(enc->vit, saved) < 0) die(vit_error(enc->vit));
  enc->wall += dpshim__tool_now_s() - t;
}

static int timed_backward(encoder_t *enc, vit_saved_t *saved,
                          const float *grad, int64_t *params, float *patch) {
  double t = dpshim__tool_now_s();
  int rc = vit_backward(enc->vit, saved, grad, params, patch);
  enc->wall += dpshim__tool_now_s() - t;
  return rc;
}

static void timed_release(encoder_t *enc, vit_saved_t *saved) {
  double t = dpshim__tool_now_s();
  vit_saved_free(saved);
  enc->wall += dpshim__tool_now_s() - t;
}

static void set_scale(encoder_t *enc, double scale) {
  if (vit_set_time_scale(enc->vit, scale) < 0) die(vit_error(enc->vit));
}

/* --vit-fault grid: the fault rank gives a grid whose rows do not add up
 * to the patch rows it passes and must get -1; the others give their call
 * as it is. Each releases what it got (the fault rank NULL: libvit leaves
 * none), and then every rank redoes the call: all ranks make the same
 * encoder calls, and the run's outputs stay those of a run without it. */
static void grid_fault(encoder_t *enc, encoder_call_t *c, int fault_rank) {
  vit_input_t in = c->in;
  if (fault_rank) in.nrows = in.nrows > 0 ? in.nrows - 1 : 1;
  vit_saved_t *saved = NULL;
  int rc = timed_forward(enc, &in, c->emb, &saved);
  if (fault_rank && rc != -1)
    die("--vit-fault grid: vit_forward accepted grid rows that do not add "
        "up to its patch rows (expected -1)");
  if (!fault_rank && rc != 0) die(vit_error(enc->vit));
  enc->faults_seen += fault_rank;
  timed_release(enc, saved);
}

/* --vit-fault extra: one forward more than the other ranks make, its
 * result dropped at once (the real forward then rewrites c->emb). */
static void extra_forward(encoder_t *enc, encoder_call_t *c) {
  vit_saved_t *saved = NULL;
  if (timed_forward(enc, &c->in, c->emb, &saved) != 0)
    die(vit_error(enc->vit));
  timed_release(enc, saved);
}

/* --vit-ship: a micro-batch's encoder calls announced (vit_ship()). */
typedef struct ship_job {
  encoder_t *enc;
  encoder_micro_t *mb;
  int failed;
} ship_job_t;

static void *ship_calls(void *arg) {
  ship_job_t *j = arg;
  for (int32_t k = 0; k < j->enc->ncalls; k++)
    j->failed |= vit_ship(j->enc->vit, &j->mb->call[k].in) < 0;
  return NULL;
}

/* Every call, even with no images: an interposer's ranks all take part.
 * `fault` is this rank's --vit-fault part in this micro-batch. */
static void encoder_forward(encoder_t *enc, encoder_micro_t *mb,
                            const vlm_batch_t *b, const opts_t *o,
                            vit_fault_kind_t fault, int rank) {
  set_scale(enc, mb->scale);
  for (int32_t k = 0; k < enc->ncalls; k++) {
    encoder_call_t *c = &mb->call[k];
    c->in = encoder_input(b, k);
    if (o->schedule == SCHEDULE_AFAB) keep_inputs(c, enc->row_floats);
  }
  ship_job_t job = {enc, mb, 0};
  pthread_t t;
  if (o->vit_ship == 1) ship_calls(&job);
  if (o->vit_ship == 2 && (pthread_create(&t, NULL, ship_calls, &job) != 0 ||
                           pthread_join(t, NULL) != 0))
    die("cannot start the thread that ships the encoder's calls");
  if (job.failed) die(vit_error(enc->vit));
  for (int32_t k = 0; k < enc->ncalls; k++) {
    encoder_call_t *c = &mb->call[k];
    c->tokens = vit_embed_rows(enc->vit, &c->in);
    if (c->tokens < 0) die(vit_error(enc->vit));
    c->emb = grow(c->emb, &c->emb_cap, c->tokens * o->embed_dim + 1);
    if (k == 0 && fault == VIT_FAULT_GRID)
      grid_fault(enc, c, rank == o->vit_fault.rank);
    if (k == 0 && fault == VIT_FAULT_EXTRA) extra_forward(enc, c);
    if (timed_forward(enc, &c->in, c->emb, &c->saved) < 0)
      die(vit_error(enc->vit));
  }
}

/* A stand-in for the LLM's gradient at an embedding value: from (step,
 * the value) alone, so the same wherever the image was encoded and
 * whatever the schedule; on the 2^-20 grid, within (-0.5, 0.5). */
static float embedding_grad(int64_t step, float value) {
  uint32_t bits;
  memcpy(&bits, &value, sizeof bits);
  uint64_t x = dpshim__tool_mix64(bits ^ dpshim__tool_mix64((uint64_t)step));
  return (float)((int64_t)(x >> 44) - ((int64_t)1 << 19)) * 0x1p-20f;
}

/* While b is still the loader's (InternVL's tile flags are read here). */
static void embedding_grads(encoder_call_t *c, const vlm_batch_t *b,
                            int64_t embed_dim, int64_t step) {
  int64_t n = c->tokens * embed_dim;
  c->grad = grow(c->grad, &c->grad_cap, n + 1);
  for (int64_t i = 0; i < n; i++) c->grad[i] = embedding_grad(step, c->emb[i]);
  if (b->layout != VLMLOAD_INTERNVL) return;
  /* A dummy tile's embedding is dropped, so it gets no gradient. */
  int64_t per_tile = b->internvl.num_image_token * embed_dim;
  for (int32_t t = 0; t < b->internvl.ntiles; t++)
    if (!b->internvl.image_flags[t])
      memset(c->grad + t * per_tile, 0, (size_t)per_tile * sizeof(float));
}

/* Sum of per-image hashes of the patch gradients: order-independent. */
static uint64_t patch_grad_digest(const encoder_call_t *c, int32_t row_floats,
                                  int qwen) {
  uint64_t d = 0;
  int64_t row = 0;
  for (int32_t i = 0; i < c->in.count; i++) {
    const int32_t *g = qwen ? c->in.grid_thw + 3 * (size_t)i : NULL;
    int64_t rows = g ? (int64_t)g[0] * g[1] * g[2] : 1;
    d += dpshim__tool_mix64(dpshim__tool_hash(1469598103934665603ull,
                                 c->patch_grad + row * row_floats,
                                 (size_t)(rows * row_floats) * sizeof(float)));
    row += rows;
  }
  return d;
}

/* --vit-fault rebackward: a second backward of an already consumed saved
 * must be refused (-1) by the interposer, which owns no such forward. */
static void backward_again(encoder_t *enc, vit_saved_t *consumed,
                           const float *grad) {
  if (timed_backward(enc, consumed, grad, enc->discard, NULL) != -1)
    die("--vit-fault rebackward: a second vit_backward of one forward was "
        "not refused (expected -1)");
  enc->faults_seen++;
}

static void encoder_backward(encoder_t *enc, ledger_t *led,
                             encoder_micro_t *mb, const opts_t *o,
                             int first_of_tp, int rebackward) {
  int qwen = o->cfg.layout != VLMLOAD_INTERNVL;
  set_scale(enc, mb->scale);
  for (int32_t k = 0; k < enc->ncalls; k++) {
    encoder_call_t *c = &mb->call[k];
    float *patch = NULL;
    if (o->patch_grads)
      patch = c->patch_grad = grow(c->patch_grad, &c->patch_cap,
                                   c->in.nrows * enc->row_floats + 1);
    /* TP peers encode the same images; one copy enters the sum. */
    int64_t *params = first_of_tp ? enc->params : enc->discard;
    vit_saved_t *saved = c->saved;
    int rc = timed_backward(enc, saved, c->grad, params, patch);
    c->saved = NULL; /* freed by vit_backward, whatever rc */
    if (rc < 0) die(vit_error(enc->vit));
    if (k == 0 && rebackward) backward_again(enc, saved, c->grad);
    if (patch && first_of_tp)
      led->patch_grads += patch_grad_digest(c, enc->row_floats, qwen);
  }
}

/* ---- a step -------------------------------------------------------------- */

static void remember(ledger_t *led, int64_t step, uint64_t key) {
  if (led->n == led->cap) {
    led->cap = led->cap ? 2 * led->cap : 1024;
    led->ids = realloc(led->ids, 2 * (size_t)led->cap * sizeof *led->ids);
    if (!led->ids) die("out of memory for the ledger");
  }
  led->ids[2 * led->n] = (uint64_t)step;
  led->ids[2 * led->n + 1] = key;
  led->n++;
}

/* Consumes a pack whose media the encoder has embedded (emb, per encoder
 * call); returns the LLM's modelled seconds, unscaled and unsharded. */
static double consume(ledger_t *led, const vlmload_t *l, const vlm_batch_t *b,
                      const float *const emb[2], const opts_t *o,
                      int64_t step, int first_of_tp) {
  cursor_t c = {.emb = {emb[0], emb[1]}, .embed_dim = o->embed_dim};
  if (o->check) led->errors += vlmload_check(l, b);
  if (first_of_tp) tally(led, b, o->cfg.slot);
  for (int32_t i = 0; i < b->nsamples; i++) {
    double len = b->cu_lengths[i + 1] - b->cu_lengths[i];
    uint64_t where =
        dpshim__tool_mix64(b->keys[i] ^ dpshim__tool_mix64((uint64_t)step));
    c.emb_hash = 1469598103934665603ull;
    uint64_t media = media_hash(b, i, &c);
    if (!first_of_tp) continue; /* TP peers hold the same samples */
    led->digest += dpshim__tool_mix64(tokens_hash(b, i) ^ where);
    led->images += dpshim__tool_mix64(media ^ where);
    led->embeddings += dpshim__tool_mix64(c.emb_hash ^ where);
    led->tokens += (int64_t)len;
    if (o->check) remember(led, step, b->keys[i]);
  }
  return emu_pack_seconds(&o->model, b->cu_lengths, b->nsamples);
}

/* A step's running figures, the same for both schedules. */
typedef struct step_run {
  vlmload_t *l;
  ledger_t *led;
  encoder_t *enc;
  const opts_t *o;
  int64_t s;
  int rank;
  vit_fault_kind_t fault; /* this rank's --vit-fault part in this step */
  double handoff_ms, llm_s;
} step_run_t;

static vlm_batch_t *hand_off(step_run_t *r, double *returned) {
  double h = dpshim__tool_now_s();
  vlm_batch_t *b = vlmload_next(r->l);
  *returned = dpshim__tool_now_s();
  if (!b) die("vlmload_next returned no batch");
  r->handoff_ms += 1e3 * (*returned - h);
  return b;
}

/* The emulator's noise per (rank, step, micro-batch) and 1/tp: the same
 * whatever the schedule. */
static double micro_scale(const step_run_t *r, int64_t m) {
  const opts_t *o = r->o;
  return emu_noise(&o->model, o->cfg.seed, r->rank, r->s, (int32_t)m) *
         o->time_scale / (double)o->tp;
}

/* Micro-batch m's forward and its LLM part while b is the loader's: the
 * encoder's forward (libvit sleeps it), the pack consumed, the embedding
 * gradients. Returns the encoder's forward seconds plus the LLM's
 * (scaled), for the caller to sleep. */
static double forward_part(step_run_t *r, encoder_micro_t *mb,
                           const vlm_batch_t *b, int64_t m) {
  encoder_t *enc = r->enc;
  int first_of_tp = r->rank % r->o->tp == 0;
  mb->scale = micro_scale(r, m);
  double vit0 = vit_seconds_charged(enc->vit);
  encoder_forward(enc, mb, b, r->o, m == 0 ? r->fault : VIT_FAULT_NONE,
                  r->rank);
  double forward = vit_seconds_charged(enc->vit) - vit0;
  for (int32_t k = 0; k < enc->ncalls; k++) timed_wait(enc, mb->call[k].saved);
  const float *emb[2] = {mb->call[0].emb, mb->call[1].emb};
  double llm = mb->scale * consume(r->led, r->l, b, emb, r->o, r->s,
                                   first_of_tp);
  for (int32_t k = 0; k < enc->ncalls; k++)
    embedding_grads(&mb->call[k], b, r->o->embed_dim, r->s);
  r->llm_s += llm;
  return forward + llm;
}

static void backward_part(step_run_t *r, encoder_micro_t *mb, int first) {
  encoder_backward(r->enc, r->led, mb, r->o, r->rank % r->o->tp == 0,
                   first && r->fault == VIT_FAULT_REBACKWARD);
}

/* 1f1b: each micro-batch's forward, LLM and backward before the next
 * hand-off; the LLM sleep absorbs the trainer's CPU work. */
static void run_1f1b(step_run_t *r) {
  encoder_micro_t *mb = &r->enc->micro[0];
  for (int64_t m = 0; m < r->o->micro; m++) {
    double t;
    vlm_batch_t *b = hand_off(r, &t);
    dpshim__tool_sleep_until(t + forward_part(r, mb, b, m));
    backward_part(r, mb, m == 0);
  }
}

/* afab (GPipe): every micro-batch's hand-off and forward, the LLM of all
 * of them, then the backwards in reverse order. The sleep runs to the
 * first hand-off's return plus the later hand-offs and the modelled work. */
static void run_afab(step_run_t *r) {
  double deadline = 0;
  for (int64_t m = 0; m < r->o->micro; m++) {
    double before = r->handoff_ms, t;
    vlm_batch_t *b = hand_off(r, &t);
    deadline = m ? deadline + 1e-3 * (r->handoff_ms - before) : t;
    deadline += forward_part(r, &r->enc->micro[m], b, m);
  }
  dpshim__tool_sleep_until(deadline);
  for (int64_t m = r->o->micro - 1; m >= 0; m--)
    backward_part(r, &r->enc->micro[m], m == r->o->micro - 1);
}

/* --vit-fault's part for this rank at step s. grid concerns every rank:
 * all of them redo the call the fault rank broke. */
static vit_fault_kind_t fault_now(const opts_t *o, int rank, int64_t s) {
  const vit_fault_t *f = &o->vit_fault;
  if (f->kind == VIT_FAULT_NONE || f->step != s) return VIT_FAULT_NONE;
  return f->kind == VIT_FAULT_GRID || f->rank == rank ? f->kind
                                                      : VIT_FAULT_NONE;
}

/* The step's sync is one all-reduce, the LLM's stand-in gradient and the
 * encoder's parameter gradients together: the shim takes the first
 * all-reduce after the hand-offs for the step's end. */
static void step(vlmload_t *l, ledger_t *led, encoder_t *enc,
                 const opts_t *o, int64_t s, int rank, int size,
                 int64_t *sync) {
  double t0 = dpshim__tool_now_s(), vit0 = vit_seconds_charged(enc->vit);
  int64_t tokens = led->tokens;
  step_run_t r = {.l = l, .led = led, .enc = enc, .o = o, .s = s,
                  .rank = rank, .fault = fault_now(o, rank, s)};
  memset(enc->params, 0, (size_t)enc->nparams * sizeof *enc->params);
  enc->wall = 0;
  if (o->schedule == SCHEDULE_AFAB) run_afab(&r);
  else run_1f1b(&r);
  double t1 = dpshim__tool_now_s();
  MPI_Allreduce(MPI_IN_PLACE, sync, GRAD_WORDS + enc->nparams, MPI_INT64_T,
                MPI_SUM, MPI_COMM_WORLD);
  led->vit_grads = dpshim__tool_mix64(
      led->vit_grads ^ dpshim__tool_hash(led->vit_grads, enc->params,
                            (size_t)enc->nparams * sizeof *enc->params));
  /* The model's own gradient all-reduce, beyond this small real one: the
   * same time on every rank, after it (so outside the shim's steps). */
  int32_t dp = (int32_t)(size / o->tp);
  dpshim__tool_sleep_until(dpshim__tool_now_s() +
                           o->time_scale *
                               emu_grad_seconds(&o->model, dp, (int32_t)o->tp));
  if (!led->stats) return;
  double t2 = dpshim__tool_now_s(), *st = led->stats + (size_t)s * ST_N;
  st[ST_COMPUTE] = 1e3 * (t1 - t0) - r.handoff_ms;
  st[ST_EMU] = 1e3 * (r.llm_s + vit_seconds_charged(enc->vit) - vit0);
  st[ST_HANDOFF] = r.handoff_ms;
  st[ST_WAIT] = 1e3 * (t2 - t1);
  st[ST_VIT] = 1e3 * enc->wall;
  st[ST_VIT_EMU] = 1e3 * (vit_seconds_charged(enc->vit) - vit0);
  st[ST_TOKENS] = (double)(led->tokens - tokens);
  led->step_ms[s] = 1e3 * (t2 - t0);
}

/* --stats-out: every rank's figures onto rank 0, one line per step. MPI_Gather,
 * not an all-reduce (which the shim would take for a step's sync). Returns
 * nonzero on rank 0 when the file cannot be written. */
static int write_stats(const ledger_t *led, const opts_t *o, int rank,
                       int size) {
  int n = (int)(o->steps * ST_N);
  double *all = NULL;
  if (rank == 0 && !(all = malloc((size_t)size * (size_t)n * sizeof *all)))
    die("out of memory for --stats-out");
  MPI_Gather(led->stats, n, MPI_DOUBLE, all, n, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (rank != 0) return 0;
  static const char *const key[ST_N] = {
      "compute_ms", "emu_ms", "handoff_ms", "wait_ms", "vit_ms", "vit_emu_ms",
      "tokens"};
  FILE *f = fopen(o->stats_out, "w");
  for (int64_t s = 0; f && s < o->steps; s++) {
    fprintf(f, "{\"step\":%" PRId64 ",\"step_ms\":%.3f", s, led->step_ms[s]);
    for (int k = 0; k < ST_N; k++) {
      fprintf(f, ",\"%s\":[", key[k]);
      for (int r = 0; r < size; r++)
        fprintf(f, k == ST_TOKENS ? "%s%.0f" : "%s%.3f", r ? "," : "",
                all[(size_t)r * (size_t)n + (size_t)s * ST_N + (size_t)k]);
      fputc(']', f);
    }
    fputs("}\n", f);
  }
  int rc = !f || fclose(f) != 0;
  if (rc) fprintf(stderr, PROG ": --stats-out: cannot write '%s'\n",
                  o->stats_out);
  free(all);
  return rc;
}

/* ---- the end: checks across ranks, one JSON line ------------------------- */

/* Reduce, not Allreduce: an all-reduce is what the shim takes for a step's
 * gradient sync. */
static void report(const ledger_t *led, const encoder_t *enc,
                   const vlmload_t *l, const opts_t *o, int rank, int size,
                   double seconds, int first_of_tp) {
  int64_t dups =
      o->check ? stepids_duplicates(led->ids, led->n, MPI_COMM_WORLD) : 0;
  if (dups < 0) die("out of memory for the duplicate check");
  int64_t produced = first_of_tp ? vlmload_produced(l) : 0;
  int64_t mine[7] = {led->errors, led->n, produced, led->tokens,
                     led->one_image, led->one_image_moved,
                     enc->faults_seen}, sum[7];
  /* Each rank's encoder seconds (those it ran, whoever's images). */
  double vit = vit_seconds_charged(enc->vit), vit_max, vit_sum;
  /* The most rows, and the least capacity as the most of its negation. */
  int64_t peak[2] = {led->rows_max, -led->rows_capacity}, most[2];
  uint64_t d[4] = {led->digest, led->images, led->embeddings,
                   led->patch_grads}, dsum[4];
  MPI_Reduce(mine, sum, 7, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Reduce(&vit, &vit_max, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(&vit, &vit_sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Reduce(peak, most, 2, MPI_INT64_T, MPI_MAX, 0, MPI_COMM_WORLD);
  MPI_Reduce(d, dsum, 4, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank != 0) return;
  int64_t errors = sum[0] + dups + (o->check && sum[1] != sum[2]);
  if (errors)
    fprintf(stderr, PROG ": %" PRId64 " samples not intact, %" PRId64
            " consumed twice in a step, %" PRId64 " consumed of %" PRId64
            " produced\n", sum[0], dups, sum[1], sum[2]);
  printf("{\"steps\":%" PRId64 ",\"tokens\":%" PRId64 ",\"tgs\":%.1f,"
         "\"step_ms_mean\":%.3f,\"consumed_digest\":\"%016" PRIx64 "\","
         "\"images_digest\":\"%016" PRIx64 "\",\"check_errors\":%" PRId64
         ",\"one_image\":%" PRId64 ",\"one_image_moved\":%" PRId64
         ",\"image_rows_max\":%" PRId64 ",\"image_rows_capacity\":%" PRId64
         ",\"embeddings_digest\":\"%016" PRIx64 "\",\"vit_grad_digest\":\"%016"
         PRIx64 "\"", o->steps, sum[3], (double)sum[3] / seconds / (double)size,
         1e3 * seconds / (double)o->steps, dsum[0], dsum[1], errors, sum[4],
         sum[5], most[0], -most[1], dsum[2], led->vit_grads);
  if (o->patch_grads)
    printf(",\"patch_grad_digest\":\"%016" PRIx64 "\"", dsum[3]);
  printf(",\"vit_faults_seen\":%" PRId64 ",\"vit_seconds_max\":%.6f,"
         "\"vit_seconds_mean\":%.6f", sum[6], vit_max,
         vit_sum / (double)size);
  printf("}\n");
  fflush(stdout);
}

int main(int argc, char **argv) {
  opts_t o;
  if (parse_args(argc, argv, &o) < 0) return 2;
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size % o.tp) die("--tp must divide the number of ranks");
  if (o.vit_fault.kind != VIT_FAULT_NONE && o.vit_fault.rank >= size)
    die("--vit-fault: RANK must be below the number of ranks");
  o.cfg.slot = (int32_t)(rank / o.tp);
  o.cfg.slots = (int32_t)(size / o.tp);
  if (rank != o.fault_rank) o.cfg.fault_pack = 0;
  char err[256] = "";
  vlmload_t *l = vlmload_open(&o.cfg, err, sizeof err);
  if (!l) die(err);
  encoder_t enc;
  encoder_open(&enc, &o);
  int64_t *sync = calloc(GRAD_WORDS + (size_t)enc.nparams, sizeof *sync);
  if (!sync) die("out of memory for the gradient sync");
  enc.params = sync + GRAD_WORDS;
  ledger_t led = {0};
  int first_of_tp = rank % o.tp == 0;
  if (o.stats_out) {
    led.stats = calloc((size_t)o.steps * ST_N, sizeof *led.stats);
    led.step_ms = calloc((size_t)o.steps, sizeof *led.step_ms);
    if (!led.stats || !led.step_ms) die("out of memory for --stats-out");
  }
  double t0 = dpshim__tool_now_s();
  for (int64_t s = 0; s < o.steps; s++)
    step(l, &led, &enc, &o, s, rank, size, sync);
  report(&led, &enc, l, &o, rank, size, dpshim__tool_now_s() - t0,
         first_of_tp);
  int rc = o.stats_out ? write_stats(&led, &o, rank, size) : 0;
  free(led.ids);
  free(led.stats);
  free(led.step_ms);
  free(sync);
  encoder_close(&enc);
  vlmload_close(l);
  MPI_Finalize();
  return rc;
}
