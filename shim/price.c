/* What applying a plan costs; see price.h. */
#include "price.h"

#define KEEP 0.8 /* the weight of the past at each new hand-off */
/* The prior: an applied hand-off of PRIOR_BYTES at PRIOR_RATE, and one of
 * none at no cost, each weighing as one hand-off. */
#define PRIOR_BYTES 1e8
#define PRIOR_RATE 5e9 /* bytes per second */

static void add(dpshim__price_t *p, double x, double y, double w) {
  p->w += w;
  p->x += w * x;
  p->y += w * y;
  p->xx += w * x * x;
  p->xy += w * x * y;
}

/* The line through the weighted points, both terms >= 0. */
static void refit(dpshim__price_t *p) {
  double mx = p->x / p->w, my = p->y / p->w;
  double vxx = p->xx / p->w - mx * mx, vxy = p->xy / p->w - mx * my;
  double slope = vxx > 0 ? vxy / vxx : 0;
  double fixed = my - slope * mx;
  if (slope < 0) {
    slope = 0;
    fixed = my;
  } else if (fixed < 0) {
    fixed = 0;
    slope = p->xx > 0 ? p->xy / p->xx : 0;
  }
  p->fixed_s = fixed;
  p->per_byte_s = slope;
}

/* The prior's applied hand-off copied what was priced. */
void dpshim__price_init(dpshim__price_t *p) {
  *p = (dpshim__price_t){.priced = PRIOR_BYTES, .copied = PRIOR_BYTES,
                         .copied_per_priced = 1};
  add(p, 0, 0, 1);
  add(p, PRIOR_BYTES, PRIOR_BYTES / PRIOR_RATE, 1);
  refit(p);
}

void dpshim__price_learn(dpshim__price_t *p, double priced, double copied,
                         double seconds) {
  if (!(priced >= 0) || !(copied >= 0) || !(seconds >= 0)) return;
  p->w *= KEEP;
  p->x *= KEEP;
  p->y *= KEEP;
  p->xx *= KEEP;
  p->xy *= KEEP;
  add(p, copied, seconds, 1);
  refit(p);
  p->priced = KEEP * p->priced + priced;
  p->copied = KEEP * p->copied + copied;
  if (p->priced > 0) p->copied_per_priced = p->copied / p->priced;
}
