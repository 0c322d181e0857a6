/* What applying a plan costs one rank, learned from its own applied
 * hand-offs: seconds = fixed + per_byte * bytes it copies (sends, receives,
 * and shifts to close the holes of what it sent). A least-squares line
 * over recent hand-offs (older ones weigh less), both terms >= 0, starting
 * from a prior of an optimistic copy rate so that the first plans that
 * clearly pay are applied and measured. Each rank passes its two numbers
 * with its header, so every rank prices a plan alike.
 */
#ifndef DPSHIM_SHIM_PRICE_H
#define DPSHIM_SHIM_PRICE_H

typedef struct dpshim__price {
  double w, x, y, xx, xy; /* weighted sums of bytes (x) and seconds (y) */
  double fixed_s, per_byte_s;
} dpshim__price_t;

void dpshim__price_init(dpshim__price_t *p);
/* One applied hand-off: bytes copied, seconds taken. */
void dpshim__price_learn(dpshim__price_t *p, double bytes, double seconds);

#endif
