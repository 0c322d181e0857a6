/* What applying a plan costs one rank, learned from its own applied
 * hand-offs but the group's first (which opens the ranks' connections):
 * seconds = fixed + per_byte * bytes it moves (sends, receives, and what
 * its repack copies to close the holes of what it sent). A
 * least-squares line over recent hand-offs (older ones weigh less), both
 * terms >= 0, starting from a prior of an optimistic copy rate so that the
 * first plans that clearly pay are applied and measured.
 * A plan is priced before its repack is planned, on bytes as priced
 * (repack.h: the holes' part at most what the rank sent): copied_per_priced,
 * the ratio of copied to priced bytes over the same hand-offs, turns them
 * into bytes copied. The line itself stays a copy rate, which prices
 * exchanges with no repack (the ViT gate's) as well. Each rank passes its
 * three numbers with its header, so every rank prices a plan alike.
 */
#ifndef DPSHIM_SHIM_PRICE_H
#define DPSHIM_SHIM_PRICE_H

typedef struct dpshim__price {
  double w, x, y, xx, xy; /* weighted sums of bytes (x) and seconds (y) */
  double priced, copied;  /* weighted sums of the bytes as priced, copied */
  double fixed_s, per_byte_s, copied_per_priced;
} dpshim__price_t;

void dpshim__price_init(dpshim__price_t *p);
/* One applied hand-off: bytes as priced, bytes copied, seconds taken. */
void dpshim__price_learn(dpshim__price_t *p, double priced, double copied,
                         double seconds);

/* Seconds applying a plan of `priced` bytes as priced takes, by a rank's
 * {fixed_s, per_byte_s, copied_per_priced}. */
static inline double dpshim__price_plan(const double price[3], double priced) {
  return price[0] + price[1] * price[2] * priced;
}

#endif
