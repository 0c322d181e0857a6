/* dpshim-sim: what dpshim would do at data-parallel sizes beyond this machine.
 *
 * The pieces, one file each:
 *   options.c    the command line;
 *   workload.c   the packs reftrain's ranks would draw (libpackload, lengths
 *                only) and their emulated-GPU compute times (reftrain's model);
 *   vlmwork.c    with --layout, the packs vlmtrain's ranks would draw
 *                (vlmload's shapes and packing, no content): each sample's
 *                tokens, images, bytes, and LLM + vision encoder times;
 *   simulate.c   per step and algorithm: the shim's warm-up fit, the real
 *                solver, the plan applied, and what the shim communicates;
 *   vitbalance.c with a "+vit" algorithm, the ViT-level balance at each
 *                encoder call (shim/vit_route.c's plan, linked) and its fit;
 *   decide.c     one hand-off's decision, by the shim's own rules
 *                (shim/policy.c, linked: never copied here);
 *   crosshost.c  with hosts (--ranks-per-host), the part of an exchange
 *                that crosses hosts: each host's link bytes and partners;
 *   netmodel.c   the price in seconds of a simulated step under a network and
 *                CPU model (collectives in one or two levels, solver,
 *                memcpy);
 *   report.c     JSON lines, the summary, --json;
 *   calibrate.c  --calibrate: measured demo runs against the simulation, and a
 *                least-squares fit of the machine's parameters;
 *   json.c       a small JSON reader for --calibrate;
 *   plot.c       --png through gnuplot.
 *
 * Simulation and pricing are apart on purpose: a step is simulated once (the
 * solver is the expensive part), then priced under any network parameters,
 * which is what lets calibration search them cheaply. */
#ifndef DPSHIM_SIM_H
#define DPSHIM_SIM_H

#include <stdint.h>
#include <stdio.h>

#include "../emu/emu.h"
#include "dpshim/solver.h"
#include "../vlmload/vlmload.h"

#define SIM_PROG "dpshim-sim"
#define SIM_MAX_LIST 64
#define SIM_MAX_RANKS 65536
#define SIM_NSKIPS 10 /* sim_skip_name() */
/* What travels with a sample in the shim's exchange: tokens, labels and loss
 * weights (4 B each per token) and the 8-byte sample id. */
#define SIM_BYTES_PER_TOKEN 12
#define SIM_BYTES_PER_SAMPLE 8
/* The per-sample meta the shim gathers: the length (4 B). It travels with
 * the shim's header in a slot sized by the largest rank's metas; both sizes
 * come from shim/balance.h. (A VLM layout's metas are wider, its fields'
 * rows and the images' patches: not modelled.) */
#define SIM_META_BYTES 4
/* The ViT balance's, as shim/vit_balance.c's header_t and wire_t: per rank
 * and encoder call (the header round), and per image in its gather. */
#define SIM_VIT_HEADER_BYTES 48
#define SIM_VIT_META_BYTES 72
#define SIM_MAX_SOLVE_REPS 99
#define SIM_MAX_MICRO 64 /* --micro-batches */
#define SIM_MAX_AHEAD 64 /* --ahead */

/* The network and CPU model; see netmodel.c. */
typedef struct sim_net {
  double latency_s;  /* one message step */
  double bandwidth;  /* bytes/s of one rank's link */
  /* With hosts (sim_config_t.ranks_per_host): one message step between
   * hosts, and the bytes/s of one host's link to the others, which its
   * ranks share. */
  double inter_latency_s;
  double inter_bandwidth;
  double memcpy_bps; /* bytes/s of one core's memcpy */
  double serial_s;   /* per rank and collective; 0 on a real cluster */
  int32_t cores;     /* CPU cores all ranks share; 0 = one per rank */
  int tree;          /* gradient all-reduce: 0 ring, 1 binary tree */
} sim_net_t;

/* The workload and the shim's settings: what reftrain and libdpshim.so would
 * run with. Steps are reftrain's, 0-based: step s is the shim's step s + 1. */
typedef struct sim_config {
  const char *profile;
  const char *lengths; /* NULL: the profile's distribution */
  uint64_t seed;
  double time_scale;
  int64_t grad_bytes;
  int32_t tp;
  int32_t micro;       /* hand-offs per step */
  int64_t warmup_last; /* the shim's warm-up is steps 2..W (1-based) */
  int64_t steps;       /* measured steps, after the warm-up */
  double cap_ratio;    /* the shim's DPSHIM_MAX_LEN_RATIO; 0 = none */
  double threshold;    /* the shim's DPSHIM_TRIGGER_THRESHOLD; < 0: auto */
  /* auto: what applying a plan costs each rank, which the shim learns from
   * its applied hand-offs, priced by this network (the sweep's own) */
  sim_net_t price_net;
  double headroom;     /* loader capacity / pack, as reftrain's --headroom */
  int solve_reps;      /* timed solves per hand-off; the median counts */
  emu_model_t model;   /* the emulated GPU's preset (--model) */
  int vision;          /* 1: VLM packs (--layout), 0: text packs (profile) */
  vlmload_config_t vlm; /* vision: the loader's configuration (slot unset) */
  int text_cost;       /* --text-cost: the shim sees no images (d = e = 0) */
  /* The ViT balance's settings ("+vit" algorithms): the shim's
   * DPSHIM_VIT_MAX_PATCH_RATIO (0 = none) and DPSHIM_VIT_TRIGGER_THRESHOLD
   * (< 0: auto, see simulate.c's meet_or_not()). */
  double vit_cap_ratio, vit_threshold;
  double slow_meeting; /* --slow-first-meeting: the first one's measure x */
  int vit_ship;        /* --vit-ship: inputs shipped ahead (vit_shipped) */
  int vit_async;       /* --vit-async: the return overlapped (vit_returned) */
  /* The hosts: DP rank r on host r / ranks_per_host (0: every rank on one
   * host, and the network in one level). topology: the solver is told the
   * hosts (the shim's DPSHIM_TOPOLOGY=1); 0: it plans as on one host and
   * only counts the bytes across hosts (DPSHIM_TOPOLOGY=0). */
  int32_t ranks_per_host;
  int topology;
  double inter_host_cost; /* --inter-host-cost; 0: the solver's default */
  /* --ahead K: the shim balances K micro-batches ahead, each hand-off's
   * work on a thread beside the compute of the K micro-batches before it
   * (sim_ahead_t); 0: inline, on the step's path. */
  int32_t ahead;
} sim_config_t;

/* The hosts the DP ranks span: 1 without --ranks-per-host. */
static inline int32_t sim_hosts(const sim_config_t *c, int32_t ranks) {
  int32_t k = c->ranks_per_host;
  return k > 0 && k < ranks ? (ranks + k - 1) / k : 1;
}

/* Whether the shim's samples carry their images' patches and its warm-up
 * fit has the vision terms: VLM packs, unless --text-cost. */
static inline int sim_vision_cost(const sim_config_t *c) {
  return c->vision && !c->text_cost;
}

/* "none" runs without the shim (as the demo's baseline); the others run the
 * shim with that solver. vit: the ViT-level balance too ("default+vit"),
 * with the same solver, and the LLM-level plan on the text-only cost. */
typedef struct sim_algo {
  dpshim_algo_t algo;
  int shim;
  int vit;
} sim_algo_t;

/* One measured step of one (ranks, algorithm): everything netmodel.c needs.
 * The shim's quantities are summed over the step's hand-offs: every price is
 * linear in each of them. */
/* A part of the ViT balance's work off the step's path (sim_step_t's
 * vit_shipped, vit_returned): the part of the step's vit_* tallies of that
 * name, and its exchanges. */
typedef struct sim_vit_hidden {
  double gather_bytes, xfer_bytes, peers, copy_bytes, solve_s;
  double inter_xfer_bytes, inter_peers, exchanges;
} sim_vit_hidden_t;

/* --ahead: one hand-off's LLM-level tallies (sim_step_t's fields of the same
 * names), priced alone to set against the compute that hides it. */
typedef struct sim_handoff {
  double gather_bytes, xfer_bytes, peers, copy_bytes, solve_s;
  double inter_xfer_bytes, inter_peers;
  int32_t applied;
} sim_handoff_t;

/* --ahead K >= 1: what the step's hand-offs overlap, for the part of the
 * shim's LLM-level work on the step's path (netmodel.c). A rank's excess
 * over the compute beside it delays that rank alone. */
typedef struct sim_ahead {
  sim_handoff_t *handoff; /* [handoffs] the step's hand-offs in order */
  /* [handoffs * ranks] rank r's compute that hand-off m's work runs beside,
   * at m * ranks + r: its K micro-batches before m, across steps (fewer
   * before the run's K-th hand-off) */
  double *overlap;
  /* [ranks] each rank's compute over the step (compute_max_s their max);
   * NULL for "+vit", whose met encoder calls synchronise the ranks: there
   * each hand-off's excess is charged as on its worst rank (a bound). */
  double *compute;
} sim_ahead_t;

typedef struct sim_step {
  double compute_max_s; /* the slowest rank's compute, after the plans */
  double imb_before;    /* max/mean - 1 of the ranks' compute, as drawn */
  double imb_after;     /* the same after the plans */
  double tokens;        /* all DP slots' tokens */
  int32_t handoffs;     /* balanced hand-offs (0 without the shim) */
  int32_t applied;      /* of which the plan was applied */
  int32_t skipped[SIM_NSKIPS]; /* the others, by sim_skip_index() */
  double gather_bytes;  /* allgather totals: every rank's header and slot */
  double xfer_bytes;    /* alltoallv: max over ranks of max(sent, received) */
  double peers;         /* alltoallv: max over ranks of its partners */
  double copy_bytes;    /* max over ranks of the bytes packed and repacked */
  double moved_bytes;   /* all bytes that change rank */
  /* With hosts (0 without): the alltoallv's load on the hosts' links, max
   * over hosts of max(bytes its ranks send to other hosts, receive from
   * them); max over ranks of its partners on other hosts; all bytes that
   * change host. */
  double inter_xfer_bytes, inter_peers, inter_moved_bytes;
  double solve_s;       /* solver CPU time, median of the reps */
  /* The vision encoder, per step (summed over micro-batches): its phase's
   * time (the slowest rank's, after the plans), the straggler wait in it
   * (max - mean over ranks), and the images encoded and their unscaled
   * seconds (each image once: the tests hold them to the workload's). */
  double vit_max_s, vit_wait_s;
  double vit_images, vit_seconds;
  /* The ViT balance's (0 without it), as the LLM level's above: encoder
   * calls and plans applied, the gather's bytes, the alltoallvs' bytes
   * (inputs out, embeddings back, their gradients in the backward: max over
   * ranks of max(sent, received), summed) and partners, the copies, all
   * bytes that change rank, and the planning's CPU time. */
  int32_t vit_calls, vit_applied;
  int32_t vit_retried; /* auto: micro-batches met to measure meeting again */
  double vit_gather_bytes, vit_xfer_bytes, vit_peers, vit_copy_bytes;
  double vit_moved_bytes, vit_solve_s;
  /* With hosts, the ViT balance's three alltoallvs as inter_* above. */
  double vit_inter_xfer_bytes, vit_inter_peers, vit_inter_moved_bytes;
  /* --vit-ship: the part of the ViT tallies above made at the ship, on the
   * loader's thread ahead of the step (the images' sizes gathered, the
   * plan, the inputs' exchange); --vit-async: the embeddings' return,
   * overlapped with the LLM's compute (MPI progressing on its own). Both
   * off the step's path and off what the gate learns (the shim leaves a
   * ship made on another thread than the forwards' out of it). */
  sim_vit_hidden_t vit_shipped, vit_returned;
  /* VLM packs, without noise: the slowest rank's compute where the
   * LLM-level plans leave the samples, and the least any encoder balance
   * could bring it to (encoder work divisible at will, exchanges free):
   * no rank below its own LLM part, nor below the mean. */
  double held_max_s, vit_floor_s;
  sim_ahead_t *ahead; /* --ahead >= 1 and the shim: owned; else NULL */
} sim_step_t;

typedef struct sim_run {
  int32_t ranks;
  sim_algo_t algo;
  int64_t nsteps;
  sim_step_t *step;
  dpshim_cost_model_t model; /* the fitted cost model the solver used */
  dpshim_cost_model_t vit_model; /* "+vit": the ViT plan's (a, b, c) */
} sim_run_t;

/* A priced run: means over its steps. */
typedef struct sim_result {
  int32_t ranks;
  sim_algo_t algo;
  double tgs;           /* tokens per GPU per second */
  double step_s, compute_max_s, shim_s, allreduce_s, solve_s;
  double shim_on_path_s; /* of shim_s, what the step waits for (--ahead) */
  double bytes_moved;   /* per step */
  double imb_before, imb_after;
  int64_t handoffs, applied, skipped[SIM_NSKIPS]; /* over all steps */
  /* The vision encoder's phase, per step: its time, the straggler wait in
   * it, the ViT balance's share of shim_s and bytes that change rank. */
  double vit_s, vit_wait_s, vit_shim_s, vit_solve_s, vit_bytes_moved;
  int64_t vit_calls, vit_applied; /* over all steps */
  int64_t vit_retried;            /* of those calls, the gate's retries */
  /* sum held_max_s / sum vit_floor_s - 1 (sim_step_t): the most an encoder
   * balance could gain on this run's compute; 0 for text. */
  double vit_ceiling;
  /* The hosts (ranks_per_host 0: one host, none of the below reported);
   * bytes that change host per step, the LLM level's and the ViT's. */
  int32_t ranks_per_host, hosts;
  int topology;
  double bytes_inter_host, vit_bytes_inter_host;
} sim_result_t;

/* ---- options.c ----------------------------------------------------------- */

typedef struct sim_options {
  sim_config_t cfg;
  sim_net_t net;
  int32_t ranks[SIM_MAX_LIST];
  int nranks;
  sim_algo_t algos[SIM_MAX_LIST];
  int nalgos;
  const char *png, *json, *calibrate;
  int cores_given, profile_given, lengths_given;
  int64_t pack_tokens; /* --pack-tokens; 0: the loader's */
  const char *mix;     /* --mix: vlmload_config_mix()'s name, or NULL */
  int vit_balance;     /* --vit-balance: each shim algo also with "+vit" */
  /* --ranks-per-host, --no-topology: given (a sweep's; --calibrate takes
   * them from its file) */
  int hosts_given, no_topology_given;
  const char *inter_given; /* the last inter-host option given, or NULL */
} sim_options_t;

/* Exits 0 after --help, 2 after one line naming a bad option. */
void sim_parse(int argc, char **argv, sim_options_t *o);
const char *sim_algo_name(sim_algo_t a);

/* ---- workload.c ---------------------------------------------------------- */

/* Every hand-off's samples, as reftrain's ranks would draw them. Hand-off
 * h = step * micro + m; its samples are grouped by DP slot (origin). */
typedef struct sim_workload {
  int32_t slots;
  int64_t handoffs;
  int64_t *first;     /* [handoffs + 1] first sample of each hand-off */
  int64_t *len;       /* [all samples] tokens, image tokens included */
  int32_t *origin;
  double *seconds;    /* emulated seconds of each sample, unscaled: the
                         LLM's, plus vit[] */
  int64_t *bytes;     /* what moves with the sample: every field's */
  /* The vision encoder's view of each sample's images (dpshim_sample_t's
   * patches and patches_sq), and its seconds, unscaled; 0 for text. */
  int64_t *patches, *patches_sq;
  double *vit;
  int64_t images;     /* images and videos in all hand-offs */
  int64_t pack;       /* tokens per pack */
  /* The encoder's images one by one, as the ViT balance plans them:
   * sample i's are [image_first[i], image_first[i + 1]) of image[]. */
  int64_t *image_first; /* [samples + 1] */
  struct sim_image *image;
} sim_workload_t;

/* One image as the encoder takes it (the ViT balance's unit): InternVL a
 * tile (dummies included), Qwen an image or a video, a Qwen3-VL video's
 * frames apart (an image a frame, as libdpshim_vit.so shows them). */
typedef struct sim_image {
  int64_t patches;    /* L: the encoder's tokens before any merge */
  int64_t patches_sq; /* L^2, per frame for a video attended frame by frame */
  double vit;         /* its encoder seconds, fwd + bwd, unscaled */
} sim_image_t;

/* What a VLM sample carries beyond its length (vlmwork.c); units: its
 * encoder images (sim_image_t), which travel beside it. */
typedef struct sim_vision {
  int64_t bytes, patches, patches_sq, images, units;
  double vit;
} sim_vision_t;

/* The samples drawn, slot-major, before they are arranged by hand-off:
 * lengths, and for VLM packs (vision != NULL) the rest, their images in the
 * same order. */
typedef struct sim_drawn_list {
  int64_t *len;
  sim_vision_t *vision;
  int64_t n, cap;
  sim_image_t *image;
  int64_t nimage, image_cap;
} sim_drawn_list_t;

/* v: NULL for a text sample. -1 when out of memory. */
int sim_drawn_push(sim_drawn_list_t *l, int64_t len, const sim_vision_t *v);
/* One of the next sample's images, pushed before it (its v->units). */
int sim_drawn_push_image(sim_drawn_list_t *l, const sim_image_t *image);
/* An image's bytes in the ViT balance's exchanges: its inputs (patch rows
 * and grid row, or the tile and its flag) and its embeddings (merged
 * tokens x the LLM's hidden size in bf16). */
void sim_image_bytes(const sim_config_t *c, int64_t patches, int64_t *in,
                     int64_t *out);

/* -1 with a one-line reason in err. */
int sim_workload_draw(const sim_config_t *c, int32_t slots, int64_t handoffs,
                      sim_workload_t *w, char *err, size_t errlen);
void sim_workload_free(sim_workload_t *w);
/* reftrain's noise factor of world rank `rank` at (step, micro). */
double sim_noise(const sim_config_t *c, int32_t rank, int64_t step,
                 int32_t micro);

/* ---- vlmwork.c ----------------------------------------------------------- */

/* DP slot `slot`'s samples in `handoffs` packs, as vlmtrain's loader (with
 * c->vlm) packs them; count[h] gets pack h's samples. -1 when out of
 * memory. */
int sim_vlm_draw_slot(const sim_config_t *c, int32_t slot, int32_t slots,
                      int64_t handoffs, sim_drawn_list_t *all, int64_t *count);

/* ---- simulate.c ---------------------------------------------------------- */

/* Simulates `nalgos` algorithms at `ranks` DP slots over the measured steps.
 * runs[a] gets the steps of algos[a]. -1 with err. */
int sim_simulate(const sim_config_t *c, int32_t ranks, const sim_algo_t *algos,
                 int nalgos, sim_run_t *runs, char *err, size_t errlen);
/* Frees the steps and their sim_ahead_t. */
void sim_run_free(sim_run_t *r);

/* ---- vitbalance.c -------------------------------------------------------- */

/* The ViT balance of one DP size, over its encoder calls; opaque. */
typedef struct sim_vit sim_vit_t;

/* NULL when out of memory. */
sim_vit_t *sim_vit_new(const sim_config_t *c, const sim_workload_t *w,
                       int32_t ranks);
void sim_vit_free(sim_vit_t *v);
/* The ViT plan's cost model, fitted as the shim fits it on warm-up steps
 * 3..W: every rank's encoder seconds against its images' sum L^2, sum L
 * and count (DPSHIM_FIT_RANKS, text_only). */
dpshim_cost_model_t sim_vit_fit(sim_vit_t *v);
/* One encoder call: hand-off h's images where holder[] put their samples
 * (sample k of the hand-off on holder[k]), planned with `algo` and `model`
 * as the shim plans them. encoded[P] gets the unscaled encoder seconds each
 * rank runs; the step gets the exchange's figures. -1 with err. */
int sim_vit_call(sim_vit_t *v, dpshim_algo_t algo, dpshim_cost_model_t model,
                 int64_t h, const int32_t *holder, double *encoded,
                 sim_step_t *st, char *err, size_t errlen);

/* ---- decide.c ------------------------------------------------------------ */

/* One hand-off as every rank has gathered it: all the shim's decision
 * (shim/policy.h) depends on, so that a unit test can hold sim_decide()
 * against the shim's balancer. */
typedef struct sim_decide_in {
  int32_t ranks;
  int64_t nsamples;
  const dpshim_sample_t *samples; /* [nsamples] */
  /* [2 * ranks]: what rank r's buffers hold, room[SIM_ROOM_SAMPLES(r)]
   * samples and room[SIM_ROOM_TOKENS(r)] tokens (its token-aligned fields:
   * tokens, labels, loss weights) */
  const int64_t *room;
  const double *history; /* [ranks] the step's earlier hand-offs' loads */
  dpshim_cost_model_t model;
  double cap_ratio; /* configured, x mean tokens per rank; 0 = none */
  double threshold;
  dpshim_algo_t algo;
  int solve_reps;   /* timed solves, 1 .. SIM_MAX_SOLVE_REPS (< 1: one) */
  /* [ranks] each rank's host, or NULL (one host); ignore_hosts: the plan
   * counts the bytes across hosts but is made as on one host (the shim's
   * DPSHIM_TOPOLOGY=0). */
  const int32_t *host;
  int ignore_hosts;
  double inter_host_cost; /* DPSHIM_INTER_HOST_COST; 0: the solver's */
} sim_decide_in_t;

#define SIM_ROOM_SAMPLES(r) (2 * (size_t)(r))
#define SIM_ROOM_TOKENS(r) (2 * (size_t)(r) + 1)

typedef struct sim_decide_out {
  int rc;         /* 0, or a DPSHIM_E* code with the plan's message */
  int solved;     /* the plan holds this hand-off's (its loads are valid) */
  double solve_s; /* median CPU time of the solves */
} sim_decide_out_t;

/* The shim's decision: NULL when it applies `plan`, else why it skips
 * (check out->rc first: on an error the answer means nothing). */
const char *sim_decide(const sim_decide_in_t *in, dpshim_plan_t *plan,
                       sim_decide_out_t *out);
/* The history the step's next hand-off starts from, as the shim keeps it. */
void sim_decide_history(const sim_decide_out_t *out, const char *why,
                        const dpshim_plan_t *plan, int32_t ranks,
                        double *history);
/* Skip reasons as counted in sim_step_t: the shim's, then "other". */
int sim_skip_index(const char *why);
const char *sim_skip_name(int k);

/* ---- crosshost.c --------------------------------------------------------- */

/* One alltoallv's traffic between hosts, rank r on host r / per_host. Its
 * messages come grouped by sender, which makes counting distinct partners
 * one pass. */
typedef struct sim_cross {
  int32_t ranks, per_host, hosts; /* hosts 0: no hosts, nothing counted */
  double *out, *in;       /* [hosts] bytes leaving and entering each host */
  int32_t *peers_out, *peers_in; /* [ranks] partners on other hosts */
  int32_t *last_from;     /* [ranks] each receiver's latest sender */
  double moved;           /* bytes between two hosts */
} sim_cross_t;

/* per_host 0: inactive (every call below does nothing). -1 when out of
 * memory. */
int sim_cross_init(sim_cross_t *x, int32_t ranks, int32_t per_host);
void sim_cross_free(sim_cross_t *x);
void sim_cross_reset(sim_cross_t *x);
/* `bytes` from rank `from` to rank `to`: counted only across hosts. */
void sim_cross_add(sim_cross_t *x, int32_t from, int32_t to, double bytes);
/* Max over hosts of max(out, in): what the busiest host's link carries. */
double sim_cross_link_bytes(const sim_cross_t *x);
/* Max over ranks of max(partners out, partners in) on other hosts. */
int32_t sim_cross_peers(const sim_cross_t *x);

/* ---- netmodel.c ---------------------------------------------------------- */

typedef struct sim_price {
  double step_s;      /* compute + shim on path + gradient all-reduce */
  double shim_s;      /* the shim's collectives, solver and copies */
  /* of shim_s, the part on the step's path: all of it inline; with
   * --ahead, the ViT balance's and the LLM level's excess over the compute
   * its hand-offs run beside */
  double shim_on_path_s;
  double vit_shim_s;  /* of which the ViT balance's */
  double allreduce_s;
} sim_price_t;

sim_price_t sim_price_step(const sim_net_t *n, const sim_config_t *c,
                           int32_t ranks, const sim_step_t *s);
/* Means over the run's steps; tgs counts tokens per GPU (ranks * tp). */
sim_result_t sim_price_run(const sim_net_t *n, const sim_config_t *c,
                           const sim_run_t *r);
sim_net_t sim_net_default(void);
/* Seconds one rank of `ranks` takes to apply a plan in which it moves io
 * bytes over its link (the larger of sent and received), copies `copy`
 * bytes and talks to `partners` ranks: the applied hand-off's share of
 * the shim's time in sim_price_step. */
double sim_apply_seconds(const sim_net_t *n, int32_t ranks, double io,
                         double copy, double partners);
/* a + sign * b, field by field. */
sim_vit_hidden_t sim_vit_hidden_sum(const sim_vit_hidden_t *a,
                                    const sim_vit_hidden_t *b, double sign);
/* Seconds of the ViT balance's calls tallied in s (their vit_* fields) on
 * the step's path: what the gate learns of a meeting. */
double sim_vit_seconds(const sim_net_t *n, const sim_config_t *c,
                       int32_t ranks, const sim_step_t *s);
/* Seconds of one ViT-level encoder call that moves nothing: its gather of
 * `bytes` (headers and image sizes) over the group. */
double sim_vit_round_seconds(const sim_net_t *n, const sim_config_t *c,
                             int32_t ranks, double bytes);

/* ---- report.c ------------------------------------------------------------ */

void sim_print_result(FILE *f, const sim_result_t *r);
void sim_print_summary(FILE *f, const sim_result_t *res, int n,
                       const sim_config_t *c, const sim_net_t *net);
/* -1 with a message on stderr when the file cannot be written. */
int sim_write_json(const char *path, const sim_result_t *res, int n);

/* ---- plot.c -------------------------------------------------------------- */

/* -1 with a one-line message on stderr (gnuplot missing, or failed). */
int sim_plot_png(const char *path, const sim_result_t *res, int n,
                 const sim_config_t *c);

/* ---- calibrate.c --------------------------------------------------------- */

/* --calibrate FILE; returns the exit status. */
int sim_calibrate(const sim_options_t *o);

#endif
