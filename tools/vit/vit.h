/* vit: the reference vision encoder, built as libvit.so. The VLM trainer
 * calls it across the shared-object boundary, so that a preloaded library
 * (issue 10's ViT balance) can interpose vit_forward() and vit_backward().
 *
 * It computes nothing real: each embedding row is a mix of a hash of its
 * image (grid row and every patch value) and the row's place in the image,
 * so outputs are a deterministic function of the inputs and compare bit for
 * bit wherever a call runs. It sleeps the emulated GPU time the model
 * preset's encoder takes for the images (tools/emu's emu_vit_seconds()):
 * its forward third in vit_forward(), the backward two thirds in
 * vit_backward().
 *
 *   vit_config_t cfg = vit_config_default(VIT_QWEN);
 *   vit_t *v = vit_open(&cfg, err, sizeof err);
 *   vit_input_t in = {.count = n, .grid_thw = grid, .rows = patches,
 *                     .nrows = rows};
 *   float *emb = malloc(vit_embed_rows(v, &in) * cfg.embed_dim * 4);
 *   vit_saved_t *saved;
 *   vit_forward(v, &in, emb, &saved);
 *   ... the LLM ...
 *   vit_backward(v, saved, emb_grad, param_grad, NULL);
 *
 * Layouts: VIT_QWEN takes images (or videos) of t x h x w patch rows each,
 * with a grid row (t, h, w) per image, and gives t*h*w / merge^2 embedding
 * rows per image; VIT_INTERNVL takes tiles of row_floats values, one image
 * per tile (no grid rows), and gives tile_tokens rows per tile.
 *
 * Parameter gradients are int64 fixed point, accumulated with integer adds:
 * exact and independent of the order (and the ranks) in which images are
 * handled, so a trainer's MPI_Allreduce (MPI_INT64_T, MPI_SUM) of them is
 * bit-identical however images were spread.
 */
#ifndef VIT_H
#define VIT_H

#include <stddef.h>
#include <stdint.h>

#if defined(__GNUC__)
#define VIT_EXTERN __attribute__((visibility("default")))
#else
#define VIT_EXTERN
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vit_layout { VIT_QWEN = 0, VIT_INTERNVL } vit_layout_t;

typedef struct vit_config {
  const char *model;   /* tools/emu preset name; NULL: the default */
  vit_layout_t layout;
  int32_t row_floats;  /* floats per patch row (Qwen) or per tile */
  int32_t merge;       /* Qwen: merge x merge patches per embedding row */
  int32_t tile_tokens; /* InternVL: embedding rows per tile */
  int32_t embed_dim;   /* floats per embedding row */
  int32_t params;      /* parameter-gradient slots (int64) */
  double time_scale;   /* slept seconds per modelled second; 0: no sleep */
} vit_config_t;

typedef struct vit_input {
  int32_t count;           /* images (Qwen grid rows) or tiles (InternVL) */
  const int32_t *grid_thw; /* Qwen: [count * 3] t, h, w; InternVL: unused */
  const float *rows;       /* patch rows (Qwen) or tiles, row_floats each */
  int64_t nrows;           /* rows given: Σ t*h*w (Qwen), count (InternVL) */
} vit_input_t;

typedef struct vit vit_t;
/* What a forward keeps for its backward, as autograd's saved tensors. */
typedef struct vit_saved vit_saved_t;

/* Qwen: 1176 floats per row, merge 2; InternVL: 3 x 448 x 448 floats per
 * tile, 256 rows per tile. Both: embed_dim 8, 256 params, time_scale 1. */
VIT_EXTERN vit_config_t vit_config_default(vit_layout_t layout);
/* NULL with a one-line reason in err on a bad configuration or no memory. */
VIT_EXTERN vit_t *vit_open(const vit_config_t *cfg, char *err, size_t errlen);
VIT_EXTERN void vit_close(vit_t *vit);
/* The configuration vit was opened with (an interposer reads the layout
 * and the row sizes from it). */
VIT_EXTERN vit_config_t vit_config_of(const vit_t *vit);
/* 1 when the model's encoder attends over a video's frames apart (Qwen3-VL)
 * rather than over the whole video at once. */
VIT_EXTERN int vit_frames_apart(const vit_t *vit);
/* The time scale from now on (a trainer's per-step noise, its 1/tp);
 * -1 when negative or not finite. */
VIT_EXTERN int vit_set_time_scale(vit_t *vit, double time_scale);
/* Embedding rows vit_forward() writes for in; -1 when in is malformed. */
VIT_EXTERN int64_t vit_embed_rows(vit_t *vit, const vit_input_t *in);

/* A hint that in is the next call's input, given as soon as the inputs
 * are ready (the batch's hand-off): libvit itself does nothing with it
 * but check it (0, or -1 as vit_embed_rows); an interposer may start
 * moving the inputs (dpshim_encoder_ship()). The call's rows must stay as
 * they are until its vit_forward(). */
VIT_EXTERN int vit_ship(vit_t *vit, const vit_input_t *in);

/* Writes vit_embed_rows(in) x embed_dim floats to embeddings, in the
 * images' order, and *saved for the backward. 0, or -1 with the reason in
 * vit_error() (nothing written, *saved NULL) when in is malformed: grid
 * rows that are not positive, sides not a multiple of merge, rows that do
 * not add up to nrows. Zero images is a valid call. */
VIT_EXTERN int vit_forward(vit_t *vit, const vit_input_t *in,
                           float *embeddings, vit_saved_t **saved);
/* vit_forward() whose embeddings an interposer may still be bringing in
 * when it returns (dpshim_encoder_forward_async()): vit_wait(saved) before
 * reading them. In libvit itself the same as vit_forward(). */
VIT_EXTERN int vit_forward_async(vit_t *vit, const vit_input_t *in,
                                 float *embeddings, vit_saved_t **saved);
/* The embeddings of vit_forward_async(saved) all written: 0 (libvit itself
 * has nothing to wait for), or -1 with the reason in vit_error(). */
VIT_EXTERN int vit_wait(vit_t *vit, vit_saved_t *saved);
/* Adds the parameter gradients of saved's images, for embedding gradients
 * emb_grad (the forward's shape; finite, |g| < 2^31), to param_grad
 * [params]; writes patch gradients (the forward's rows' shape) when
 * patch_grad is not NULL. Frees saved, whatever the result; 0, or -1 with
 * the reason in vit_error(). */
VIT_EXTERN int vit_backward(vit_t *vit, vit_saved_t *saved,
                            const float *emb_grad, int64_t *param_grad,
                            float *patch_grad);
/* Frees saved without a backward (a forward whose result was dropped). */
VIT_EXTERN void vit_saved_free(vit_saved_t *saved);

/* Fixed-point scale of the parameter gradients: int64 = g * 2^20 * weight. */
#define VIT_GRAD_FRACTION_BITS 20

/* Modelled seconds (scaled) this encoder has slept so far. */
VIT_EXTERN double vit_seconds_charged(const vit_t *vit);
/* The last error, one line; "" when none. */
VIT_EXTERN const char *vit_error(const vit_t *vit);

#ifdef __cplusplus
}
#endif
#endif
