/* What the VLM layouts share; see layout.h. */
#include <stdio.h>

#include "layout.h"

int64_t dpshim__layout_count(const int64_t *tokens, int32_t from, int32_t to,
                             int64_t token) {
  int64_t n = 0;
  for (int32_t t = from; t < to; t++) n += tokens[t] == token;
  return n;
}

/* What the counting reads (tokens within their buffer): the batch view
 * checks the rest when the batch is handed off. */
int dpshim__layout_check_tokens(const char *what, int32_t nsamples,
                                int32_t capacity_samples,
                                const int32_t *cu_lengths,
                                const int64_t *tokens, int64_t capacity_tokens,
                                char *msg, size_t len) {
  if (nsamples < 0 || nsamples > capacity_samples) {
    snprintf(msg, len, "%s: nsamples %d, expected 0..capacity_samples (%d)",
             what, (int)nsamples, (int)capacity_samples);
    return DPSHIM_EINVAL;
  }
  if (!cu_lengths || (nsamples > 0 && !tokens)) {
    snprintf(msg, len, "%s: %s is NULL", what,
             cu_lengths ? "tokens" : "cu_lengths");
    return DPSHIM_EINVAL;
  }
  if (cu_lengths[0] != 0) {
    snprintf(msg, len, "%s: cu_lengths[0] is %d, expected 0", what,
             (int)cu_lengths[0]);
    return DPSHIM_EINVAL;
  }
  for (int32_t i = 0; i < nsamples; i++) {
    if (cu_lengths[i + 1] < cu_lengths[i]) {
      snprintf(msg, len, "%s: cu_lengths decreases at sample %d", what,
               (int)i);
      return DPSHIM_EINVAL;
    }
  }
  if (cu_lengths[nsamples] > capacity_tokens) {
    snprintf(msg, len, "%s: cu_lengths[%d] is %d, beyond capacity_tokens "
             "(%lld)", what, (int)nsamples, (int)cu_lengths[nsamples],
             (long long)capacity_tokens);
    return DPSHIM_EINVAL;
  }
  return 0;
}
