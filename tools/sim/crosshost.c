/* With hosts (--ranks-per-host): the part of one alltoallv that crosses
 * hosts, as netmodel.c prices it. A host's ranks share its link to the
 * others, so what counts is each host's sum over its ranks, not any one
 * rank's; and each partner on another host is a message through that link.
 * Used by the LLM level's exchange (simulate.c) and the ViT balance's
 * (vitbalance.c). */
#include <stdlib.h>
#include <string.h>

#include "sim.h"

int sim_cross_init(sim_cross_t *x, int32_t ranks, int32_t per_host) {
  memset(x, 0, sizeof *x);
  if (per_host <= 0) return 0;
  x->ranks = ranks;
  x->per_host = per_host;
  x->hosts = (ranks + per_host - 1) / per_host;
  size_t h = (size_t)x->hosts, p = (size_t)ranks;
  x->out = calloc(h, sizeof *x->out);
  x->in = calloc(h, sizeof *x->in);
  x->peers_out = calloc(p, sizeof *x->peers_out);
  x->peers_in = calloc(p, sizeof *x->peers_in);
  x->last_from = malloc(p * sizeof *x->last_from);
  if (x->out && x->in && x->peers_out && x->peers_in && x->last_from) {
    sim_cross_reset(x);
    return 0;
  }
  sim_cross_free(x);
  return -1;
}

void sim_cross_free(sim_cross_t *x) {
  free(x->out);
  free(x->in);
  free(x->peers_out);
  free(x->peers_in);
  free(x->last_from);
  memset(x, 0, sizeof *x);
}

void sim_cross_reset(sim_cross_t *x) {
  if (x->hosts == 0) return;
  size_t h = (size_t)x->hosts, p = (size_t)x->ranks;
  memset(x->out, 0, h * sizeof *x->out);
  memset(x->in, 0, h * sizeof *x->in);
  memset(x->peers_out, 0, p * sizeof *x->peers_out);
  memset(x->peers_in, 0, p * sizeof *x->peers_in);
  for (size_t r = 0; r < p; r++) x->last_from[r] = -1;
  x->moved = 0;
}

void sim_cross_add(sim_cross_t *x, int32_t from, int32_t to, double bytes) {
  if (x->hosts == 0) return;
  int32_t hf = from / x->per_host, ht = to / x->per_host;
  if (hf == ht) return;
  x->out[hf] += bytes;
  x->in[ht] += bytes;
  x->moved += bytes;
  /* Senders come grouped, so a sender new to this receiver is a pair not
   * seen before. */
  if (x->last_from[to] != from) {
    x->last_from[to] = from;
    x->peers_out[from]++;
    x->peers_in[to]++;
  }
}

double sim_cross_link_bytes(const sim_cross_t *x) {
  double most = 0;
  for (int32_t h = 0; h < x->hosts; h++) {
    if (x->out[h] > most) most = x->out[h];
    if (x->in[h] > most) most = x->in[h];
  }
  return most;
}

int32_t sim_cross_peers(const sim_cross_t *x) {
  int32_t most = 0;
  for (int32_t r = 0; x->hosts && r < x->ranks; r++) {
    if (x->peers_out[r] > most) most = x->peers_out[r];
    if (x->peers_in[r] > most) most = x->peers_in[r];
  }
  return most;
}
