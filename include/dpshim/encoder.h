/* The vision encoder's calls balanced across the data-parallel group: for
 * adapters that wrap an encoder library (as libdpshim.so wraps libvit.so).
 *
 * Images are heavy-tailed: after the LLM-level balance one rank can still
 * hold most of a step's patches. With DPSHIM_VIT_BALANCE=1 each forward
 * gathers the images' sizes over the DP group, plans which rank encodes
 * each (an image's cost a*L^2 + b*L + c, L its patches; L^2 summed per
 * frame for a video attended frame by frame), sends the inputs
 * there, runs the real encoder on what each rank holds and sends the
 * embeddings back: the caller gets exactly the rows, in exactly the order,
 * it would have got without the shim. The backward sends each embedding
 * gradient to the rank that encoded the image; the real backward runs
 * there (parameter gradients stay there: the trainer's all-reduce sums
 * them) and input gradients come back when the caller asks for them.
 *
 * What travels back is what the call outputs: an adapter whose call runs
 * the tower with its patch merger returns merged rows (a quarter of the
 * patches' for a 2 x 2 merge, as libvit.so's Qwen layout does), the
 * fewest bytes; one that stops before the merger returns every patch's.
 *
 * An adapter describes one call as images with rows in buffers, and gives
 * the real encoder as callbacks that the shim calls on whatever images a
 * rank encodes (its own and others'), or on the caller's own call as it was
 * given whenever balancing is off or fails. A forward returns a key; the
 * backward (or a release, a forward dropped without one) takes it:
 *
 *   dpshim_encoder_t enc = {&ctx, my_forward, my_backward, my_release};
 *   dpshim_encoder_call_t call = {.count = n, .patches = L, .ninputs = 2,
 *     .input = {{"grid", grid, 12, grid_rows}, {"patches", px, 4704, rows}},
 *     .output = {"embeddings", emb, 4 * dim, emb_rows}, .grad_input = 1};
 *   uint64_t key;
 *   int rc = dpshim_encoder_forward(&enc, &call, &key);
 *   ...
 *   rc = dpshim_encoder_backward(&enc, key, emb_grad, patch_grad_or_NULL);
 *
 * Where the inputs are known before the call (the batch handed off), ship
 * it then, with the same description: dpshim_encoder_ship(&call) plans the
 * forward and starts its inputs on their way; the forward then only waits
 * for what has not arrived.
 *
 * Collective: every DP rank calls the encoder (forward and backward, or
 * release) for every micro-batch, in the same order, with zero images when
 * it has none. Backwards may come in any order of their forwards (all
 * forwards then all backwards, 1F1B), the same order on every rank. A rank
 * whose calls fall out of step with its group's is found at the group's
 * next encoder call, LLM hand-off or MPI_Finalize: an agreed error, and
 * ViT balancing off from there; every call then runs where it was made.
 * Main thread only, unless MPI gives MPI_THREAD_MULTIPLE.
 */
#ifndef DPSHIM_ENCODER_H
#define DPSHIM_ENCODER_H

#include <stddef.h>
#include <stdint.h>

#include "dpshim.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DPSHIM_ENCODER_MAX_INPUTS 4

/* Rows of every image back to back: image i has rows[i] rows of row_bytes
 * each, after image i - 1's. */
typedef struct dpshim_encoder_buffer {
  const char *name;    /* for messages */
  void *data;
  size_t row_bytes;    /* >= 1 */
  const int64_t *rows; /* [count], each >= 0 */
} dpshim_encoder_buffer_t;

/* One encoder call: `count` images (0 is a valid call). */
typedef struct dpshim_encoder_call {
  int32_t count;
  const int64_t *patches; /* [count]: each image's L, its encoder tokens */
  /* [count], or NULL for patches^2: each image's patches squared, summed
   * over the blocks the encoder attends over at once (a video's frames,
   * when its frames are attended apart). The cost's a multiplies it.
   * Where an encoder gives a frame the same rows alone as within its
   * video, show such a video as an image a frame: the balance can then
   * spread a long video over the group, and the ViT gate (which takes a
   * block of patches_sq / patches patches as the least it can move)
   * prices what it can really even. */
  const int64_t *patches_sq;
  int32_t ninputs;        /* 1 .. DPSHIM_ENCODER_MAX_INPUTS */
  dpshim_encoder_buffer_t input[DPSHIM_ENCODER_MAX_INPUTS]; /* read */
  dpshim_encoder_buffer_t output;                           /* written */
  /* The input whose gradient a backward writes when asked (patch rows),
   * or -1 when the encoder writes none. */
  int32_t grad_input;
  /* Not NULL: this rank could not describe its call (the reason). The
   * forward then fails on every rank of the group, which all run their
   * own calls as given (the real encoder says what is wrong). */
  const char *invalid;
} dpshim_encoder_call_t;

/* The real encoder. Its return values are passed back as they are (0 is
 * success; anything else is its error, which its own error reporting
 * explains).
 * forward: encodes call's images into call->output.data and sets *saved
 *   for the backward; call == NULL means the caller's own call exactly as
 *   it was given, outputs where the caller asked.
 * backward: the gradient of saved's forward for out_grad (the shape of
 *   that forward's output); writes the grad_input's gradient to in_grad
 *   (the shape of that input) when in_grad is not NULL. Frees saved.
 * release: frees saved without a backward. */
typedef struct dpshim_encoder {
  void *ctx;
  int (*forward)(void *ctx, const dpshim_encoder_call_t *call, void **saved);
  int (*backward)(void *ctx, void *saved, const void *out_grad,
                  void *in_grad);
  void (*release)(void *ctx, void *saved);
} dpshim_encoder_t;

/* Encodes call (balanced when DPSHIM_VIT_BALANCE=1 and MPI is up; else the
 * real forward on the call as given) and sets *key for its backward.
 * Returns the real forward's result for this rank's images (*key = 0 when
 * it failed), or DPSHIM_ENOMEM. */
DPSHIM_EXTERN int dpshim_encoder_forward(const dpshim_encoder_t *enc,
                                         const dpshim_encoder_call_t *call,
                                         uint64_t *key);

/* Ships the next forward not yet shipped ahead of its call: where that
 * forward would meet its group, the group plans it now and the inputs this
 * rank's images leave for start toward their encoding ranks; the forward
 * then waits only for what has not arrived (a header round, the encoder,
 * the embeddings back). Call it where the inputs are ready and the forward
 * is still to come (right after the batch's hand-off, on the loader's
 * thread where it has one: that needs MPI_THREAD_MULTIPLE, which
 * DPSHIM_LOADER_THREAD=1 asks for; without it a ship from another thread
 * than MPI_Init's ships nothing, said once). The forward must describe
 * the same images (count, patches, rows and row sizes); input rows that
 * left are compared
 * with what left, and where any rank's call differs every rank plans the
 * forward again as if nothing was shipped (the outputs stay exact, the
 * ship's work is lost). output.data may be NULL here (nothing is written).
 * Collective over the DP group like a forward, in the same order on every
 * rank; nothing happens where a forward would not meet (balancing off, the
 * gate keeping the calls apart, the cost model still warming up): the
 * forward then runs as it would have. Ship calls in the order of their
 * forwards; a forward takes the oldest ship not yet taken, whichever call
 * it is. Returns 0 (shipped or not), DPSHIM_EINVAL (where the group was to
 * plan it, a call that cannot be described: the group's ship is dropped
 * on every rank) or DPSHIM_ENOMEM. */
DPSHIM_EXTERN int dpshim_encoder_ship(const dpshim_encoder_call_t *call);

/* As dpshim_encoder_forward(), but the embeddings of this rank's images
 * that other ranks encoded may still be on their way when it returns (its
 * own are written): dpshim_encoder_wait(key) where they are first needed.
 * call->output.data must stay valid until then. The return moves as MPI
 * progresses it (inside this rank's and its peers' MPI calls at least, and
 * at the wait), so it overlaps what runs in between where MPI progresses
 * on its own (a progress thread, offloaded transfers). */
DPSHIM_EXTERN int dpshim_encoder_forward_async(
    const dpshim_encoder_t *enc, const dpshim_encoder_call_t *call,
    uint64_t *key);

/* The embeddings of dpshim_encoder_forward_async(key) all in its output:
 * at once where none were on their way. Here only (no collective). A
 * backward waits first, a release drops them. Where their exchange
 * failed this rank encodes its images again (enc's forward; the ViT
 * balance is then off). Returns 0 (or that forward's error), DPSHIM_EINVAL
 * when no forward of that key is in flight, or DPSHIM_ENOMEM. */
DPSHIM_EXTERN int dpshim_encoder_wait(const dpshim_encoder_t *enc,
                                      uint64_t key);

/* The backward of the forward `key`, with out_grad in the shape of that
 * call's output; in_grad (the grad_input's shape), or NULL. Returns the
 * real backward's result, or DPSHIM_EINVAL when no forward of that key is
 * in flight on this rank (nothing is called), or DPSHIM_ENOMEM. */
DPSHIM_EXTERN int dpshim_encoder_backward(const dpshim_encoder_t *enc,
                                          uint64_t key, const void *out_grad,
                                          void *in_grad);

/* Drops the forward `key` without a backward, here only (no collective):
 * when images of other ranks went with it, their backwards find the ranks
 * out of step and encode them again at home. Unknown keys are ignored. */
DPSHIM_EXTERN void dpshim_encoder_release(const dpshim_encoder_t *enc,
                                          uint64_t key);

#ifdef __cplusplus
}
#endif
#endif
