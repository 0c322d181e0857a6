/* The ViT balance's plan and routes for one encoder call: which rank
 * encodes each image, and what each rank sends and receives, for the
 * inputs (patch and grid rows) going out and the embeddings coming back.
 *
 * Pure: no MPI. The unit is an image; its cost is the ViT model's
 * a*S + b*L + c of its L patches, S = L^2 summed over the blocks it is
 * attended in (L^2 for an image), which is the solver's cost of a sample
 * of length L with patches_sq S under the model {0, b, c, a, 0}: the
 * solver plans images as it plans samples, L as their length and the
 * patch cap (DPSHIM_VIT_MAX_PATCH_RATIO) as its token cap.
 * A rank may hold no image at all (a text-only micro-batch): it still takes
 * part, and may receive some. Every rank computes the same plan from the
 * same gathered images.
 */
#ifndef DPSHIM_SHIM_VIT_ROUTE_H
#define DPSHIM_SHIM_VIT_ROUTE_H

#include <stddef.h>
#include <stdint.h>

#include "dpshim/solver.h"

/* One image as every rank sees it after the gather. */
typedef struct dpshim__vit_image {
  int64_t patches;   /* L: the encoder's tokens, >= 0 */
  int64_t in_bytes;  /* its patch rows and grid row */
  int64_t out_bytes; /* its embedding rows */
  /* L^2 summed over the blocks attended at once (a video's frames when
   * apart); 0: L^2 */
  int64_t patches_sq;
} dpshim__vit_image_t;

/* The images of a group: rank r's are [first[r], first[r + 1]). */
typedef struct dpshim__vit_group {
  int32_t ranks;
  const int64_t *first; /* [ranks + 1] */
  const dpshim__vit_image_t *images; /* [first[ranks]] */
} dpshim__vit_group_t;

typedef struct dpshim__vit_settings {
  dpshim_algo_t algo;
  dpshim_cost_model_t model; /* a, b, c of the ViT's cost per image */
  double cap_ratio;          /* x mean patches per rank; 0 = none */
  double threshold;          /* skip below this imbalance */
} dpshim__vit_settings_t;

/* Above this many ranks, the solver places one by one only the images a
 * rank may give: its first ones that add up to what it holds above the
 * group's mean; the rest of a rank moves as one (see vit_route.c's
 * fill_samples). */
#define DPSHIM__VIT_EVERY_IMAGE_RANKS 32

/* How a rank's images became the solver's samples: its first `given` are
 * samples first, first + 1, ...; the others are together sample `rest`
 * (-1: none). */
typedef struct dpshim__vit_part {
  int64_t first, given, rest;
} dpshim__vit_part_t;

/* Scratch that grows to the largest call; reuse it across calls. */
typedef struct dpshim__vit_planner {
  dpshim_plan_t plan;
  const char *skip_reason; /* the last plan's, or NULL when it moved */
  dpshim_sample_t *samples;
  size_t samples_cap;
  double *load;              /* [ranks]: the rank's history */
  dpshim_sample_t *total;    /* [ranks]: all its images as one sample */
  dpshim__vit_part_t *part;  /* [ranks] */
  size_t ranks_cap;
} dpshim__vit_planner_t;

void dpshim__vit_planner_init(dpshim__vit_planner_t *p);
void dpshim__vit_planner_free(dpshim__vit_planner_t *p);

/* Plans the group's images into dest[first[ranks]] (the encoding rank of
 * each). Returns 1 when images move, 0 when none does (dest is then every
 * image's own rank, and p->skip_reason says why: "no-images" or the
 * policy's), DPSHIM_EINVAL (p->plan.message) or DPSHIM_ENOMEM. */
int dpshim__vit_plan(dpshim__vit_planner_t *p, const dpshim__vit_group_t *g,
                     const dpshim__vit_settings_t *s, int32_t *dest);

/* Rank `me`'s byte counts per peer for the plan `dest`: inputs it sends to
 * and receives from each rank (images it gives away / encodes for others),
 * and embeddings it sends back and receives back (the reverse). Arrays of
 * g->ranks; a rank's own images count nowhere. */
typedef struct dpshim__vit_counts {
  int64_t *send_in, *recv_in, *send_out, *recv_out;
} dpshim__vit_counts_t;

void dpshim__vit_counts(const dpshim__vit_group_t *g, const int32_t *dest,
                        int32_t me, dpshim__vit_counts_t *c);

#endif
