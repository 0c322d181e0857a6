#include "internal.h"
int dpshim__algo_kk(const dpshim__ctx_t *ctx) { (void)ctx; return DPSHIM_SKIP_ALGO_NONE; }
