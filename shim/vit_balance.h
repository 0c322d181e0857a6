/* The ViT balance: encoder calls balanced across a DP group, over the comm
 * seam (see <dpshim/encoder.h> for the contract callers see).
 *
 *   forward:  header -> the images' sizes gathered -> plan (vit_route) ->
 *             inputs to the encoding ranks, every input buffer in one
 *             exchange -> the real encoder on what this rank holds ->
 *             embeddings back in one more.
 *   backward: header -> embedding gradients to the encoding ranks -> the
 *             real backward there -> input gradients back to the ranks
 *             that asked.
 *   release:  here only. A rank whose images another rank encoded and
 *             released meets it out of step at its backward; it then
 *             re-encodes them (below).
 *
 * Every collective starts with a fixed-size header, so ranks whose calls
 * fall out of step (a forward beside a backward, another forward's key, an
 * LLM hand-off or the close beside an encoder call) meet in it and all see
 * it: an agreed error, and the balance off from there. Other errors (a
 * call a rank could not describe, the real encoder failing on what it was
 * sent, no memory) fail one call everywhere: every rank then runs its own
 * call as given. A forward that moved images keeps what this rank sent
 * away, so that a backward after the balance went off can re-encode them
 * where they came from. Pure: no MPI, no globals; the unit tests run one
 * per thread over the mock seam.
 */
#ifndef DPSHIM_SHIM_VIT_BALANCE_H
#define DPSHIM_SHIM_VIT_BALANCE_H

#include <stdint.h>

#include "comm.h"
#include "dpshim/encoder.h"
#include "vit_route.h"

/* What a header says the rank is at. */
typedef enum dpshim__vit_kind {
  DPSHIM__VIT_FORWARD = 1,
  DPSHIM__VIT_BACKWARD,
  DPSHIM__VIT_RELEASE,
  DPSHIM__VIT_SHIP,    /* a forward's inputs sent ahead of its call */
  DPSHIM__VIT_WAIT,    /* an async forward's embeddings waited for */
  DPSHIM__VIT_HANDOFF, /* an LLM-level hand-off on the main thread */
  DPSHIM__VIT_CLOSE    /* MPI_Finalize */
} dpshim__vit_kind_t;

typedef struct dpshim__vit_config {
  dpshim__vit_settings_t plan;
  double (*clock)(void); /* seconds, for the encoder's time */
} dpshim__vit_config_t;

typedef struct dpshim__vit_report {
  dpshim__vit_kind_t kind;
  int grouped;    /* the call went through the group (a header) */
  int warm;       /* local because some rank has no cost model yet */
  int applied;    /* images (a backward: their gradients) moved */
  /* A ship: 1 when it was kept for the next forward. A forward shipped
   * ahead: 1 it took its ship's plan (and inputs), -1 some rank's call
   * differed from its ship (planned again). */
  int shipped;
  int ahead; /* a ship made on another thread than the forwards' (set by
              * the caller of dpshim__vit_ship) */
  const char *skip_reason; /* a forward not applied: why */
  int out_of_step;         /* the balance went off at this call */
  char message[256];       /* the agreed error, or "" */
  /* A forward's: over the group, and this rank's own images; bytes_moved
   * a backward's too (the gradients). */
  int64_t images, patches, bytes_moved;
  double imbalance_before, imbalance_after;
  const double *load_before, *load_after; /* [size] until the next call */
  int64_t own_images;
  double own_patches, own_patches_sq;
  /* Their bytes in their inputs, embeddings and the embeddings' gradients
   * (what a meeting moves for them; patch gradients only when asked). */
  double own_wire;
  double encode_s; /* this rank's seconds in the real encoder */
  /* Seconds waiting for the other ranks: in the header round (to reach the
   * call) and right after the real encoder (for the slowest encoder):
   * straggling, not the balance's cost. */
  double arrival_s;
} dpshim__vit_report_t;

typedef struct dpshim__vit dpshim__vit_t;

/* comm NULL: every call runs where it is made (the balance is off, or MPI
 * is not up), still through this object's keys. */
dpshim__vit_t *dpshim__vit_new(const dpshim__vit_config_t *cfg,
                               dpshim__comm_t *comm);
/* Forwards still in flight lose their encoder state unreleased. */
void dpshim__vit_free(dpshim__vit_t *v);
/* Balances over comm from the next call (NULL: no more); forwards in
 * flight keep their keys. 0 or DPSHIM_ENOMEM (then not attached). */
int dpshim__vit_attach(dpshim__vit_t *v, dpshim__comm_t *comm);
/* New settings (the model until set_model's). */
void dpshim__vit_configure(dpshim__vit_t *v, const dpshim__vit_config_t *cfg);
/* The cost model is final on this rank: forwards plan once every rank of
 * the group has one. */
void dpshim__vit_set_model(dpshim__vit_t *v, dpshim_cost_model_t model);
int dpshim__vit_ready(const dpshim__vit_t *v);
/* Whether images can move (a comm, and not out of step). */
int dpshim__vit_balancing(const dpshim__vit_t *v);
/* The group's size (1 without a comm). */
int32_t dpshim__vit_ranks(const dpshim__vit_t *v);

/* The gate's answer for the calls until the next one (every rank of the
 * group sets the same, at the same point of its calls): apart, a forward
 * runs where it is made without meeting, and so does the backward of a
 * forward whose images did not move; a moved forward's backward still
 * meets (every rank knows which moved). */
void dpshim__vit_set_apart(dpshim__vit_t *v, int apart);
/* Forwards in flight whose images moved (their backwards meet). */
int32_t dpshim__vit_moved_in_flight(const dpshim__vit_t *v);
/* See dpshim_encoder_ship(): the next forward not yet shipped is planned
 * now and its inputs start toward the encoding ranks; that forward then
 * meets only for a header round (where its call is the one shipped: the
 * same images, and the same bytes in the rows that left) before its own
 * images' encoding. Collective like a forward; nothing happens where a
 * forward would not meet (the balance off or apart, the group warming
 * up). Returns 0, or DPSHIM_EINVAL when this rank's call is invalid. */
int dpshim__vit_ship(dpshim__vit_t *v, const dpshim_encoder_call_t *call,
                     dpshim__vit_report_t *rep);
/* See dpshim_encoder_forward(), _forward_async() (async: the embeddings
 * that other ranks encoded are in call->output.data only once
 * dpshim__vit_wait() of the key returned), _backward(), _release().
 * Forwards and backwards are collective over the group while balancing. */
int dpshim__vit_forward(dpshim__vit_t *v, const dpshim_encoder_t *enc,
                        const dpshim_encoder_call_t *call, int async,
                        uint64_t *key, dpshim__vit_report_t *rep);
/* Here only: an async forward's embeddings in its caller's output (done at
 * once where none were on their way; a backward waits first, a release
 * drops them). Where their exchange failed, this rank encodes its images
 * again (the balance is then off). Returns 0, the real encoder's result
 * then, DPSHIM_EINVAL for a key not in flight, or DPSHIM_ENOMEM. */
int dpshim__vit_wait(dpshim__vit_t *v, const dpshim_encoder_t *enc,
                     uint64_t key, dpshim__vit_report_t *rep);
int dpshim__vit_backward(dpshim__vit_t *v, const dpshim_encoder_t *enc,
                         uint64_t key, const void *out_grad, void *in_grad,
                         dpshim__vit_report_t *rep);
void dpshim__vit_release(dpshim__vit_t *v, const dpshim_encoder_t *enc,
                         uint64_t key, dpshim__vit_report_t *rep);
/* A point every rank of the group reaches outside the encoder: a header of
 * `kind` (HANDOFF, CLOSE), to find ranks out of step. */
void dpshim__vit_checkpoint(dpshim__vit_t *v, dpshim__vit_kind_t kind,
                            dpshim__vit_report_t *rep);

#endif
