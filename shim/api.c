/* The adapters' entry point; see include/dpshim/batch.h. */
#include "shim.h"

DPSHIM_EXTERN int dpshim_balance_batch(dpshim_batch_t *batch) {
  return dpshim__on_handoff(batch);
}
