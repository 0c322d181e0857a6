/* One DP size: the shim's warm-up fit, then every measured step under every
 * algorithm, with the real solver on the gathered lengths.
 *
 * What each rank computes follows reftrain: the emulated seconds of the
 * samples it holds after the plan, times its own noise (drawn from its world
 * rank, the step and the micro-batch, so moving samples does not move noise),
 * times --time-scale, over --tp. A DP slot's compute is the slowest of its tp
 * peers (they share the pack, not the noise).
 *
 * What the shim does follows shim/balance.c: a new step starts from no
 * history, each hand-off solves with the history of the step's earlier
 * hand-offs, and only samples that change rank are sent. Whether a plan is
 * applied is the shim's own decision (sim_decide(), on shim/policy.c), with
 * every rank's buffers holding --headroom x pack samples and tokens. With
 * --ranks-per-host K, rank r is on host r / K: the solver is given the
 * hosts as the shim gives them (DPSHIM_TOPOLOGY=1; --no-topology: to count
 * the bytes across hosts only), and the exchange's part across hosts is
 * recorded apart (crosshost.c) for the network model's second level.
 *
 * The step's time. Without the ViT balance, as vlmtrain runs: every rank
 * encodes the images of the samples it holds, nothing inside the step
 * synchronises the ranks, and the step is the slowest rank's LLM + encoder
 * seconds over its micro-batches. With it ("+vit"), each micro-batch's
 * encoder call is collective (its forward and its backward both exchange),
 * so a micro-batch takes the slowest rank's encoder forward, then the
 * slowest rank's LLM forward and backward, then the slowest rank's encoder
 * backward: max(encoded) + max(LLM) per micro-batch, where a rank's encoder
 * seconds are those of the images it encodes after the ViT plan (a third
 * forward, two thirds backward: both take the max of the same per-rank
 * seconds, so their sum is one max). The exchanges are priced apart
 * (netmodel.c). Not modelled: the LLM forward and backward are one phase
 * (no pipeline schedule), and no exchange overlaps compute, but with
 * --ahead K: then each hand-off's LLM-level work runs beside the compute of
 * the K micro-batches before it on every rank (each rank's own, after the
 * plans; before the first measured step the warm-up's as drawn), and the
 * step keeps each hand-off's tallies and that compute (sim_ahead_t) for
 * netmodel.c to price what outlasts it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "balance.h"
#include "dpshim/fit.h"
#include "policy.h"
#include "repack.h"
#include "sim.h"

typedef struct ctx {
  const sim_config_t *c;
  int32_t P;
  sim_workload_t w;
  dpshim_cost_model_t model;
  dpshim_plan_t plan;
  dpshim_plan_t meeting; /* auto ViT: the LLM part's plan (balance.c's) */
  dpshim_sample_t *samples; /* one hand-off's */
  double *held;     /* [P * micro] unscaled seconds each slot holds */
  double *drawn;    /* [P * micro] the same as drawn */
  double *held_vit, *drawn_vit; /* [P * micro] of which the encoder's */
  double *encoded;  /* [P * micro] "+vit": encoder seconds each slot runs */
  double *totals;   /* [P * micro] scratch */
  double *seen_vit; /* [P * micro] scratch: the encoder's seconds as run */
  double *enc_load; /* [P] auto: one plan's encoder part per rank (us) */
  double *load_now; /* [P] auto: each rank's load before solving (us) */
  unsigned char *met; /* [micro] "+vit": this hand-off's encoder calls meet */
  int32_t *holder;  /* one hand-off's: where each sample is after the plan */
  sim_vit_t *vit;   /* "+vit" runs only */
  dpshim_cost_model_t text_model, vit_model; /* "+vit": the shim's fits */
  double *history;  /* [P] */
  double *before;   /* [P] the step's loads before the hand-off */
  dpshim__policy_learnt_t meet; /* auto ViT: what a met micro-batch cost */
  dpshim__policy_retry_t retry;
  double llm_bound; /* auto ViT: llm_plan_bound() of an apart hand-off */
  /* auto ViT: the most bytes a meeting moves per patch of an image
   * (inputs, embeddings and their gradients), as the shim learns it from
   * its warm-up's encoder calls */
  double wire_per_patch;
  double *sent, *received, *kept; /* [P] bytes, one hand-off */
  double *cost;     /* [P] auto: seconds applying the plan costs each rank */
  int32_t *partners_out, *partners_in, *stamp, *last_src; /* [P] */
  int64_t *room;    /* [2P] what each rank's buffers hold; see sim_decide_in */
  int64_t *metas;   /* [P] one hand-off's meta bytes per rank */
  size_t slot;      /* the shim's meta slot: it only grows, per run */
  int32_t *host;    /* [P] each rank's host for the solver; NULL: one host */
  sim_cross_t cross; /* one hand-off's exchange across hosts */
  /* --ahead K: each rank's compute (s) in the run's latest K micro-batches,
   * hand-off g's at (g % K) * P; this step's per micro-batch [P * micro] */
  double *recent, *now;
} ctx_t;

/* ---- setup ----------------------------------------------------------------- */

/* With --ranks-per-host K, consecutive ranks share a host, as mpirun places
 * them by slot: rank r on host r / K. -1 when out of memory. */
static int set_hosts(ctx_t *x) {
  int32_t K = x->c->ranks_per_host;
  if (K <= 0) return 0;
  x->host = malloc((size_t)x->P * sizeof *x->host);
  if (!x->host || sim_cross_init(&x->cross, x->P, K) < 0) return -1;
  for (int32_t r = 0; r < x->P; r++) x->host[r] = r / K;
  return 0;
}

/* Every rank's loader buffers: --headroom x pack tokens (tokens, labels and
 * loss weights alike), and as many samples. */
static void set_room(ctx_t *x) {
  int64_t cap = (int64_t)ceil(x->c->headroom * (double)x->w.pack);
  for (int32_t r = 0; r < x->P; r++)
    x->room[SIM_ROOM_SAMPLES(r)] = x->room[SIM_ROOM_TOKENS(r)] = cap;
}

static int ctx_init(ctx_t *x, const sim_config_t *c, int32_t P, char *err,
                    size_t errlen) {
  memset(x, 0, sizeof *x);
  x->c = c;
  x->P = P;
  dpshim_plan_init(&x->plan);
  dpshim_plan_init(&x->meeting);
  int64_t H = (c->warmup_last + c->steps) * c->micro;
  if (sim_workload_draw(c, P, H, &x->w, err, errlen) < 0) return -1;
  int64_t most = 0;
  for (int64_t h = 0; h < H; h++)
    if (x->w.first[h + 1] - x->w.first[h] > most)
      most = x->w.first[h + 1] - x->w.first[h];
  size_t p = (size_t)P, pm = p * (size_t)c->micro;
  x->samples = malloc((size_t)most * sizeof *x->samples + 1);
  x->holder = malloc((size_t)most * sizeof *x->holder + 1);
  x->held = calloc(pm, sizeof *x->held);
  x->drawn = calloc(pm, sizeof *x->drawn);
  x->held_vit = calloc(pm, sizeof *x->held_vit);
  x->drawn_vit = calloc(pm, sizeof *x->drawn_vit);
  x->encoded = calloc(pm, sizeof *x->encoded);
  x->totals = calloc(pm, sizeof *x->totals);
  x->seen_vit = calloc(pm, sizeof *x->seen_vit);
  x->enc_load = calloc(p, sizeof *x->enc_load);
  x->load_now = calloc(p, sizeof *x->load_now);
  x->met = calloc((size_t)c->micro, sizeof *x->met);
  x->history = calloc(p, sizeof *x->history);
  x->before = calloc(p, sizeof *x->before);
  x->sent = calloc(p, sizeof *x->sent);
  x->received = calloc(p, sizeof *x->received);
  x->kept = calloc(p, sizeof *x->kept);
  x->cost = calloc(p, sizeof *x->cost);
  x->partners_out = calloc(p, sizeof *x->partners_out);
  x->partners_in = calloc(p, sizeof *x->partners_in);
  x->stamp = calloc(p, sizeof *x->stamp);
  x->last_src = calloc(p, sizeof *x->last_src);
  x->room = calloc(2 * p, sizeof *x->room);
  x->metas = calloc(p, sizeof *x->metas);
  size_t k = (size_t)c->ahead;
  x->recent = k ? calloc(k * p, sizeof *x->recent) : NULL;
  x->now = k ? calloc(pm, sizeof *x->now) : NULL;
  if ((!k || (x->recent && x->now)) &&
      x->samples && x->holder && x->held && x->drawn && x->held_vit &&
      x->drawn_vit && x->encoded && x->totals && x->seen_vit &&
      x->enc_load && x->load_now && x->met && x->history && x->before &&
      x->sent && x->received && x->kept && x->cost && x->partners_out && x->partners_in &&
      x->stamp && x->last_src && x->room && x->metas && set_hosts(x) == 0) {
    set_room(x);
    return 0;
  }
  snprintf(err, errlen, "out of memory at %d ranks", (int)P);
  return -1;
}

static void ctx_free(ctx_t *x) {
  sim_workload_free(&x->w);
  dpshim_plan_free(&x->plan);
  dpshim_plan_free(&x->meeting);
  sim_vit_free(x->vit);
  free(x->samples);
  free(x->holder);
  free(x->held);
  free(x->drawn);
  free(x->held_vit);
  free(x->drawn_vit);
  free(x->encoded);
  free(x->totals);
  free(x->seen_vit);
  free(x->enc_load);
  free(x->load_now);
  free(x->met);
  free(x->history);
  free(x->before);
  free(x->sent);
  free(x->cost);
  free(x->received);
  free(x->kept);
  free(x->partners_out);
  free(x->partners_in);
  free(x->stamp);
  free(x->last_src);
  free(x->room);
  free(x->metas);
  free(x->host);
  free(x->recent);
  free(x->now);
  sim_cross_free(&x->cross);
}

/* ---- compute time ---------------------------------------------------------- */

/* Seconds each slot holds in hand-off h (micro m), as drawn, into drawn[]
 * (the encoder's also into drawn_vit[]). */
static void draw_handoff(ctx_t *x, int64_t h, int32_t m) {
  size_t at = (size_t)m * (size_t)x->P;
  double *d = x->drawn + at, *dv = x->drawn_vit + at;
  memset(d, 0, (size_t)x->P * sizeof *d);
  memset(dv, 0, (size_t)x->P * sizeof *dv);
  for (int64_t i = x->w.first[h]; i < x->w.first[h + 1]; i++) {
    d[x->w.origin[i]] += x->w.seconds[i];
    dv[x->w.origin[i]] += x->w.vit[i];
  }
}

/* Slot d's seconds over micro-batches m0 .. m0 + nm - 1 of step s, from
 * secs[(m - m0) * P + d]: its slowest tp peer's, under noise. The one
 * place a rank's compute becomes time. */
static double slot_seconds(const ctx_t *x, const double *secs, int32_t d,
                           int64_t s, int32_t m0, int32_t nm) {
  const sim_config_t *c = x->c;
  double worst = 0;
  for (int32_t t = 0; t < c->tp; t++) {
    double sum = 0;
    for (int32_t m = m0; m < m0 + nm; m++)
      sum += secs[(size_t)(m - m0) * (size_t)x->P + (size_t)d] *
             sim_noise(c, d * c->tp + t, s, m);
    if (sum > worst) worst = sum;
  }
  return worst * c->time_scale / c->tp;
}

/* The slowest slot's seconds over those micro-batches; their mean into
 * *mean. */
static double slots_max(const ctx_t *x, const double *secs, int64_t s,
                        int32_t m0, int32_t nm, double *mean) {
  double max = 0, sum = 0;
  for (int32_t d = 0; d < x->P; d++) {
    double t = slot_seconds(x, secs, d, s, m0, nm);
    sum += t;
    if (t > max) max = t;
  }
  *mean = sum / x->P;
  return max;
}

/* The slowest slot's compute over the step, and max/mean - 1 into
 * *imbalance. */
static double compute_max(const ctx_t *x, const double *secs, int64_t s,
                          double *imbalance) {
  double mean, max = slots_max(x, secs, s, 0, x->c->micro, &mean);
  *imbalance = mean > 0 ? max / mean - 1 : 0;
  return max;
}

/* One micro-batch's phase of a synchronised step: each slot's seconds
 * secs[P]; the slowest slot's, and max - mean into *wait. */
static double phase_max(const ctx_t *x, const double *secs, int64_t s,
                        int32_t m, double *wait) {
  double mean, max = slots_max(x, secs, s, m, 1, &mean);
  *wait = max - mean;
  return max;
}

/* The encoder's phase of step s: vit[P * micro] the seconds each slot
 * encodes; its time and straggler wait into the step. */
static void vit_phase(const ctx_t *x, const double *vit, int64_t s,
                      sim_step_t *st) {
  for (int32_t m = 0; m < x->c->micro; m++) {
    double wait;
    st->vit_max_s += phase_max(x, vit + (size_t)m * (size_t)x->P, s, m, &wait);
    st->vit_wait_s += wait;
  }
}

/* "+vit": a micro-batch whose encoder calls meet (x->met) is the slowest
 * encoder, then its LLM part starts a stretch that runs to the next such
 * call (see the top); micro-batches whose calls do not meet run encoder
 * and LLM alike within the stretch. Imbalance from each slot's LLM +
 * encoded seconds. */
static void gated_compute(ctx_t *x, int64_t s, sim_step_t *st) {
  size_t P = (size_t)x->P;
  double mean, wait;
  for (int32_t m = 0; m < x->c->micro; m++)
    for (size_t d = 0; d < P; d++) {
      size_t k = (size_t)m * P + d;
      x->totals[k] = x->met[m] ? x->held[k] - x->held_vit[k] : x->held[k];
      x->seen_vit[k] = x->met[m] ? x->encoded[k] : x->held_vit[k];
    }
  st->compute_max_s = 0;
  for (int32_t m = 0, from = 0; m <= x->c->micro; m++) {
    if (m < x->c->micro && !x->met[m]) continue;
    if (m > from)
      st->compute_max_s += slots_max(x, x->totals + (size_t)from * P, s, from,
                                     m - from, &mean);
    if (m < x->c->micro)
      st->compute_max_s +=
          phase_max(x, x->encoded + (size_t)m * P, s, m, &wait);
    from = m;
  }
  vit_phase(x, x->seen_vit, s, st);
  for (size_t k = 0; k < P * (size_t)x->c->micro; k++)
    x->totals[k] += x->met[k / P] ? x->encoded[k] : 0;
  compute_max(x, x->totals, s, &st->imb_after);
}

/* ---- the warm-up fit, as the shim does it ----------------------------------- */

/* One point per world rank per warm-up step but the first: the features of
 * its slot's samples and its own compute time (seconds). vision: with the
 * images' sums; llm_only: the time without the encoder's, which the shim
 * times apart when it runs the ViT balance (it wraps the encoder calls). */
static void warmup_points(ctx_t *x, int64_t s, int vision, int llm_only,
                          dpshim_fit_point_t *pts) {
  const sim_config_t *c = x->c;
  int32_t world = x->P * c->tp;
  for (int32_t r = 0; r < world; r++) pts[r] = (dpshim_fit_point_t){0};
  for (int32_t m = 0; m < c->micro; m++) {
    int64_t h = s * c->micro + m;
    for (int64_t i = x->w.first[h]; i < x->w.first[h + 1]; i++) {
      double len = (double)x->w.len[i];
      for (int32_t t = 0; t < c->tp; t++) {
        dpshim_fit_point_t *p = &pts[x->w.origin[i] * c->tp + t];
        p->sum_len2 += len * len;
        p->sum_len += len;
        p->count += 1;
        if (vision) {
          p->sum_patches_sq += (double)x->w.patches_sq[i];
          p->sum_patches += (double)x->w.patches[i];
        }
        double secs = x->w.seconds[i] - (llm_only ? x->w.vit[i] : 0);
        p->time += secs * sim_noise(c, x->w.origin[i] * c->tp + t, s, m);
      }
    }
  }
  for (int32_t r = 0; r < world; r++)
    pts[r].time *= c->time_scale / c->tp;
}

/* The shim's model: DPSHIM_FIT_RANKS over steps 3..W (1-based), used in
 * microseconds; linear (0, 1, 0) when the fit fails, as the shim falls back.
 * vit_balance: the LLM's model beside the ViT balance, text-only on the
 * LLM's time. */
static dpshim_cost_model_t fit_model(ctx_t *x, int vit_balance) {
  const sim_config_t *c = x->c;
  int64_t iters = c->warmup_last - 2;
  int32_t world = x->P * c->tp;
  int vision = sim_vision_cost(c) && !vit_balance;
  dpshim_cost_model_t model = {.b = 1};
  dpshim_fit_point_t *pts = calloc((size_t)iters * (size_t)world, sizeof *pts);
  if (!pts) return model;
  for (int64_t k = 0; k < iters; k++)
    warmup_points(x, k + 2, vision, vit_balance, pts + k * world);
  dpshim_fit_input_t in = {.iters = iters, .ranks = world, .points = pts,
                           .method = DPSHIM_FIT_RANKS, .text_only = !vision};
  dpshim_fit_result_t fit;
  if (dpshim_fit(&in, &fit) == 0)
    model = dpshim__policy_model_from_fit(fit.model);
  else
    fprintf(stderr, SIM_PROG ": %d ranks: warm-up fit failed (%s); linear "
            "cost\n", (int)x->P, fit.message);
  free(pts);
  return model;
}

/* "+vit" runs' fits and the ViT balance's scratch; -1 with err. */
static int prepare_vit(ctx_t *x, char *err, size_t errlen) {
  x->vit = sim_vit_new(x->c, &x->w, x->P);
  if (!x->vit) {
    snprintf(err, errlen, "out of memory for the ViT balance at %d ranks",
             (int)x->P);
    return -1;
  }
  x->text_model = fit_model(x, 1);
  x->vit_model = sim_vit_fit(x->vit);
  for (int64_t j = 0; j < x->w.image_first[x->w.first[x->w.handoffs]]; j++) {
    const sim_image_t *im = &x->w.image[j];
    int64_t in = 0, out = 0;
    sim_image_bytes(x->c, im->patches, &in, &out);
    if (im->patches > 0)
      x->wire_per_patch = fmax(x->wire_per_patch,
                               (double)(in + 2 * out) / (double)im->patches);
  }
  return 0;
}

/* ---- one hand-off ----------------------------------------------------------- */

/* What the exchange under x->plan sends: bytes and partners per rank.
 * Samples come grouped by origin, which makes counting distinct partners
 * one pass. */
static void tally_exchange(ctx_t *x, int64_t n) {
  size_t pb = (size_t)x->P * sizeof(double), pi = (size_t)x->P * sizeof(int32_t);
  memset(x->sent, 0, pb);
  memset(x->received, 0, pb);
  memset(x->kept, 0, pb);
  memset(x->partners_out, 0, pi);
  memset(x->partners_in, 0, pi);
  for (int32_t r = 0; r < x->P; r++) x->stamp[r] = x->last_src[r] = -1;
  sim_cross_reset(&x->cross);
  for (int64_t i = 0; i < n; i++) {
    int32_t from = x->samples[i].origin, to = x->plan.dest[i];
    double b = (double)x->samples[i].bytes;
    if (from == to) {
      if (x->sent[from] > 0) x->kept[from] += b; /* behind a hole */
      continue;
    }
    x->sent[from] += b;
    x->received[to] += b;
    sim_cross_add(&x->cross, from, to, b);
    if (x->stamp[to] != from) x->stamp[to] = from, x->partners_out[from]++;
    if (x->last_src[to] != from) x->last_src[to] = from, x->partners_in[to]++;
  }
}

/* Rank r's copies: closing its holes, from the samples behind them and
 * those received in place (priced as the shim prices them, repack.h); what
 * leaves and arrives is sent from and received into the batch itself
 * (exchange.h; a rank whose buffers are too full stages it, not modelled). */
static double rank_copy(const ctx_t *x, int32_t r) {
  return (double)dpshim__repack_priced((int64_t)x->sent[r],
                                       (int64_t)(x->kept[r] + x->received[r]));
}

static int32_t rank_partners(const ctx_t *x, int32_t r) {
  return x->partners_out[r] > x->partners_in[r] ? x->partners_out[r]
                                                : x->partners_in[r];
}

/* The tallied exchange into the step. */
static void exchange_costs(ctx_t *x, sim_step_t *st) {
  double xfer = 0, copy = 0;
  int32_t peers = 0;
  for (int32_t r = 0; r < x->P; r++) {
    double io = fmax(x->sent[r], x->received[r]), cp = rank_copy(x, r);
    int32_t pr = rank_partners(x, r);
    st->moved_bytes += x->sent[r];
    if (io > xfer) xfer = io;
    if (cp > copy) copy = cp;
    if (pr > peers) peers = pr;
  }
  st->xfer_bytes += xfer;
  st->copy_bytes += copy;
  st->peers += peers;
  st->inter_xfer_bytes += sim_cross_link_bytes(&x->cross);
  st->inter_peers += sim_cross_peers(&x->cross);
  st->inter_moved_bytes += x->cross.moved;
}

/* `auto`: whether the solved plan pays for applying it (its exchange
 * tallied), each rank priced as the shim would learn it: by the sweep's
 * network. */
static double applying_cost(ctx_t *x) {
  double most = 0;
  for (int32_t r = 0; r < x->P; r++) {
    x->cost[r] = sim_apply_seconds(&x->c->price_net, x->P,
                                   fmax(x->sent[r], x->received[r]),
                                   rank_copy(x, r), rank_partners(x, r));
    most = fmax(most, x->cost[r]);
  }
  return most;
}

static const char *priced_skip(ctx_t *x) {
  applying_cost(x);
  double saving, cost;
  return dpshim__policy_worth(&x->plan, x->cost, x->P, &saving, &cost);
}

/* Moves the held seconds of micro m by the applied plan. */
static void apply_plan(ctx_t *x, int64_t first, int64_t n, int32_t m) {
  size_t at = (size_t)m * (size_t)x->P;
  double *held = x->held + at, *held_vit = x->held_vit + at;
  memset(held, 0, (size_t)x->P * sizeof *held);
  memset(held_vit, 0, (size_t)x->P * sizeof *held_vit);
  for (int64_t i = 0; i < n; i++) {
    held[x->plan.dest[i]] += x->w.seconds[first + i];
    held_vit[x->plan.dest[i]] += x->w.vit[first + i];
  }
}

/* The gathered samples of hand-off h into x->samples, and what the gather
 * sends: every rank's header and meta slot (balance.c's, which grows to the
 * largest rank's metas and never shrinks; the hand-offs that grow it also
 * gather the metas apart: not modelled). */
static void gather(ctx_t *x, int64_t first, int64_t n, int vision,
                   sim_step_t *st) {
  memset(x->metas, 0, (size_t)x->P * sizeof *x->metas);
  for (int64_t i = 0; i < n; i++) {
    x->samples[i] = (dpshim_sample_t){.len = x->w.len[first + i],
                                      .bytes = x->w.bytes[first + i],
                                      .origin = x->w.origin[first + i]};
    if (vision) {
      x->samples[i].patches = x->w.patches[first + i];
      x->samples[i].patches_sq = x->w.patches_sq[first + i];
    }
    x->metas[x->w.origin[first + i]] += SIM_META_BYTES;
  }
  size_t most = 0;
  for (int32_t r = 0; r < x->P; r++)
    if ((size_t)x->metas[r] > most) most = (size_t)x->metas[r];
  if (most > x->slot) x->slot = dpshim__balance_slot_bytes(most);
  st->gather_bytes +=
      (double)x->P * (double)(dpshim__balance_header_bytes() + x->slot);
}

/* `auto`, before solving, as the shim (balance.c's unpayable()): where no
 * plan of these loads could pay for the ranks' fixed costs, the step's
 * history takes them as they are. */
static const char *unpayable(ctx_t *x, dpshim_cost_model_t model, int64_t n) {
  double *load = x->load_now;
  memcpy(load, x->history, (size_t)x->P * sizeof *load);
  for (int64_t i = 0; i < n; i++)
    load[x->samples[i].origin] += dpshim_sample_cost(model, &x->samples[i]);
  for (int32_t r = 0; r < x->P; r++)
    x->cost[r] = sim_apply_seconds(&x->c->price_net, x->P, 0, 0, 0);
  double saving, cost;
  const char *why =
      dpshim__policy_cannot_pay(load, x->cost, x->P, &saving, &cost);
  if (why) memcpy(x->history, load, (size_t)x->P * sizeof *load);
  return why;
}

/* Hand-off h's plan under `model`: why it is not applied, or NULL (its
 * exchange then tallied); out->rc < 0 on a solver error. */
static const char *plan_handoff(ctx_t *x, sim_algo_t a,
                                dpshim_cost_model_t model, int64_t n,
                                sim_step_t *st, sim_decide_out_t *out) {
  if (x->c->threshold < 0) {
    memset(out, 0, sizeof *out);
    const char *why = unpayable(x, model, n);
    if (why) return why;
  }
  sim_decide_in_t in = {
      .ranks = x->P,
      .nsamples = n,
      .samples = x->samples,
      .room = x->room,
      .history = x->history,
      .model = model,
      .cap_ratio = x->c->cap_ratio,
      .threshold = x->c->threshold < 0 ? 0 : x->c->threshold, /* auto: priced */
      .algo = a.algo,
      .solve_reps = x->c->solve_reps,
      .host = x->host,
      .ignore_hosts = !x->c->topology,
      .inter_host_cost = x->c->inter_host_cost,
  };
  const char *why = sim_decide(&in, &x->plan, out);
  if (out->rc < 0) return NULL;
  st->solve_s += out->solve_s;
  if (!why) tally_exchange(x, n);
  if (!why && x->c->threshold < 0) why = priced_skip(x);
  return why;
}

/* As balance.c's exchange_floor() (policy.h's floor), there and back,
 * priced as the sweep's network prices an apply. held: overwritten. */
static double exchange_floor(const ctx_t *x, const double *enc, double *held) {
  double cost = 0;
  dpshim__policy_vit_sent(enc, held, x->P, held);
  for (int32_t r = 0; r < x->P; r++)
    if (held[r] > 0)
      cost = fmax(cost, 2 * sim_apply_seconds(&x->c->price_net, x->P,
                                              held[r], held[r], 1));
  return cost;
}

/* The gate's loads (policy.h, as balance.c's) with the samples at dest
 * (NULL: where they are), the encoder's part the model's image terms:
 * into x->load_now, x->enc_load and x->cost. */
static double gate_loads(ctx_t *x, int64_t n, const int32_t *dest) {
  return dpshim__policy_gate_loads(x->samples, n, dest, x->P, x->model,
                                   x->model.d, x->model.e, x->wire_per_patch,
                                   x->load_now, x->enc_load, x->cost);
}

/* What a meeting costs with the loads gate_loads() left: two header rounds
 * and the ranks' own part learnt, no less than the exchange's floor
 * (overwrites x->cost); *unmeasured the same without the part learnt. */
static double meeting_cost(ctx_t *x, int64_t images, double *unmeasured) {
  double bytes = (double)x->P * SIM_VIT_HEADER_BYTES +
                 (double)images * SIM_VIT_META_BYTES;
  double rounds = 2 * sim_vit_round_seconds(&x->c->price_net, x->c, x->P,
                                            bytes);
  double own = x->meet.seen ? fmax(0, x->meet.s - rounds) : 0;
  double floor = exchange_floor(x, x->enc_load, x->cost);
  *unmeasured = floor + rounds;
  return fmax(own, floor) + rounds;
}

/* DPSHIM_VIT_TRIGGER_THRESHOLD=auto: whether micro-batch m's encoder
 * calls meet at all, from where the LLM-level plan made with the vision
 * terms leaves its samples (x->plan.dest where applied, per why), by the
 * shim's rule (dpshim__policy_meet: meeting pays where it saves more than
 * WORTH times the calls' two header rounds; x->before holds the step's
 * loads before the hand-off). The ViT plan is priced again at the call.
 * *cost: what meeting costs; *apart: the step's end with the calls apart
 * (us); *unmeasured: the cost without the part learnt; *saving: what
 * meeting saves (s). */
static int meet_or_not(ctx_t *x, int64_t n, int64_t images, const char *why,
                       double *cost, double *apart, double *unmeasured,
                       double *saving) {
  double most = gate_loads(x, n, why ? NULL : x->plan.dest);
  *apart = 0;
  for (int32_t r = 0; r < x->P; r++)
    *apart = fmax(*apart, x->before[r] + x->load_now[r] + x->enc_load[r]);
  *cost = meeting_cost(x, images, unmeasured);
  return !dpshim__policy_meet(x->before, x->load_now, x->enc_load, most, x->P,
                              *cost, saving);
}

/* As balance.c's llm_plan_bound() (policy.h): the step's end (us) at best
 * under a plan of the LLM part, the calls met. */
static double llm_plan_bound(ctx_t *x, int64_t n) {
  return dpshim__policy_llm_bound(x->before, x->P, x->samples, n, x->model,
                                  x->model.d, x->model.e);
}

/* As balance.c's llm_plan_could_pay(): the LLM part's plan is solved only
 * where, at its bound (x->llm_bound), the calls met would save on the
 * apart end more than WORTH times the meeting's cost as priced (meet_s). */
static int llm_plan_could_pay(const ctx_t *x, double apart, double meet_s) {
  return 1e-6 * (apart - x->llm_bound) > DPSHIM__POLICY_WORTH * meet_s;
}

static void swap_plans(ctx_t *x) {
  dpshim_plan_t kept = x->plan;
  x->plan = x->meeting;
  x->meeting = kept;
}

/* Where the gate keeps the calls apart, as balance.c's
 * meet_with_llm_plan(): a plan of the LLM part alone, from no history,
 * taken where the calls meeting under it end the step sooner than apart
 * under the plan made with the images, by more than WORTH times what
 * meeting and applying it cost, solved where its bound says it could
 * (llm_plan_could_pay); retry: priced without what meetings measured
 * (meet_s is then the same). Returns 1 when taken (x->plan is it;
 * *why, *out its), 0 when not (x->plan as it was), -1 on a solver error.
 * Its solve is timed into the step either way. */
static int meet_with_llm_plan(ctx_t *x, sim_algo_t a, int64_t n,
                              int64_t images, double meet_s, double apart,
                              int retry, const char **why,
                              sim_decide_out_t *out, sim_step_t *st) {
  if (!llm_plan_could_pay(x, apart, meet_s)) return 0;
  dpshim_cost_model_t llm = x->model;
  llm.d = llm.e = 0;
  sim_decide_in_t in = {.ranks = x->P, .nsamples = n, .samples = x->samples,
                        .room = x->room, .model = llm,
                        .cap_ratio = x->c->cap_ratio,
                        .threshold = x->c->threshold < 0 ? 0 : x->c->threshold,
                        .algo = a.algo,
                        .solve_reps = x->c->solve_reps, .host = x->host,
                        .ignore_hosts = !x->c->topology,
                        .inter_host_cost = x->c->inter_host_cost};
  swap_plans(x);
  sim_decide_out_t mine;
  const char *whyb = sim_decide(&in, &x->plan, &mine);
  st->solve_s += mine.solve_s;
  if (mine.rc < 0) return -1;
  double most = gate_loads(x, n, whyb ? NULL : x->plan.dest);
  double met = dpshim__policy_met_end(x->before, x->load_now, x->enc_load,
                                      most, x->P);
  double unmeasured, cost = meeting_cost(x, images, &unmeasured);
  if (retry) cost = unmeasured;
  if (!whyb) {
    tally_exchange(x, n);
    cost += applying_cost(x);
  }
  if (1e-6 * (apart - met) > DPSHIM__POLICY_WORTH * cost) {
    *why = whyb;
    *out = mine;
    return 1;
  }
  swap_plans(x);
  if (!*why) tally_exchange(x, n);
  return 0;
}

/* What a met micro-batch's calls cost (from the step's ViT tallies before
 * and after them), into the moving average the shim keeps (core.c's
 * learn_meet). */
static void learn_meet(ctx_t *x, const sim_step_t *before,
                       const sim_step_t *after) {
  sim_step_t d;
  memset(&d, 0, sizeof d);
  d.vit_calls = after->vit_calls - before->vit_calls;
  d.vit_applied = after->vit_applied - before->vit_applied;
  d.vit_gather_bytes = after->vit_gather_bytes - before->vit_gather_bytes;
  d.vit_xfer_bytes = after->vit_xfer_bytes - before->vit_xfer_bytes;
  d.vit_peers = after->vit_peers - before->vit_peers;
  d.vit_copy_bytes = after->vit_copy_bytes - before->vit_copy_bytes;
  d.vit_solve_s = after->vit_solve_s - before->vit_solve_s;
  d.vit_inter_xfer_bytes =
      after->vit_inter_xfer_bytes - before->vit_inter_xfer_bytes;
  d.vit_inter_peers = after->vit_inter_peers - before->vit_inter_peers;
  d.vit_shipped =
      sim_vit_hidden_sum(&after->vit_shipped, &before->vit_shipped, -1);
  d.vit_returned =
      sim_vit_hidden_sum(&after->vit_returned, &before->vit_returned, -1);
  double s = sim_vit_seconds(&x->c->price_net, x->c, x->P, &d);
  if (!x->meet.seen && x->c->slow_meeting > 1) s *= x->c->slow_meeting;
  dpshim__policy_learn(&x->meet, s);
}

/* The shim at one hand-off; 1 when its plan is applied, 0 when not, -1
 * with err on a solver error. A "+vit" run's samples carry no images'
 * terms (its LLM-level cost is the text-only model), but with the ViT
 * trigger at auto, which plans with them and then decides whether the
 * micro-batch's encoder calls meet (x->met[m]). */
static int balance_handoff(ctx_t *x, sim_algo_t a, int64_t h, int32_t m,
                           sim_step_t *st, char *err, size_t errlen) {
  int64_t first = x->w.first[h], n = x->w.first[h + 1] - first;
  int gated = a.vit && x->c->vit_threshold < 0;
  gather(x, first, n, sim_vision_cost(x->c) && (!a.vit || gated), st);
  st->handoffs++;
  memcpy(x->before, x->history, (size_t)x->P * sizeof *x->before);
  sim_decide_out_t out;
  const char *why = plan_handoff(
      x, a, a.vit && !gated ? x->text_model : x->model, n, st, &out);
  int64_t images = x->w.image_first[first + n] - x->w.image_first[first];
  double meet_s = 0, apart = 0, unmeasured = 0, saving = 0;
  x->met[m] = (unsigned char)a.vit;
  if (gated && out.rc >= 0)
    x->met[m] = (unsigned char)meet_or_not(x, n, images, why, &meet_s, &apart,
                                           &unmeasured, &saving);
  /* balance.c's gate_held (apart only for what meetings measured) and
   * retry_meeting() */
  int apart_solved = gated && out.rc >= 0 && !x->met[m] && out.solved;
  x->llm_bound = apart_solved ? llm_plan_bound(x, n) : INFINITY;
  int held = gated && out.rc >= 0 && !x->met[m] &&
             (saving > DPSHIM__POLICY_WORTH * unmeasured ||
              llm_plan_could_pay(x, apart, unmeasured));
  int due = held && dpshim__policy_retry_due(&x->retry), retried = 0;
  if (apart_solved) {
    int taken = meet_with_llm_plan(x, a, n, images, due ? unmeasured : meet_s,
                                   apart, due, &why, &out, st);
    if (taken < 0) out.rc = -1;
    x->met[m] = (unsigned char)(taken > 0);
    retried = taken > 0 && due;
  }
  if (gated && out.rc >= 0) {
    if (due && !x->met[m]) x->met[m] = 1, retried = 1;
    dpshim__policy_retry_note(&x->retry, x->met[m], held, retried);
    x->meet.fresh |= retried;
    st->vit_retried += retried;
  }
  if (out.rc < 0) {
    snprintf(err, errlen, "%d ranks: solver: %s", (int)x->P, x->plan.message);
    return -1;
  }
  sim_decide_history(&out, why, &x->plan, x->P, x->history);
  if (why) {
    st->skipped[sim_skip_index(why)]++;
    return 0;
  }
  st->applied++;
  exchange_costs(x, st);
  apply_plan(x, first, n, m);
  return 1;
}

/* Hand-off h's encoder call under the ViT balance, its samples where the
 * LLM-level plan left them (applied: x->plan.dest). */
static int encoder_call(ctx_t *x, sim_algo_t a, int64_t h, int32_t m,
                        int applied, sim_step_t *st, char *err,
                        size_t errlen) {
  int64_t first = x->w.first[h], n = x->w.first[h + 1] - first;
  for (int64_t k = 0; k < n; k++)
    x->holder[k] = applied ? x->plan.dest[k] : x->w.origin[first + k];
  return sim_vit_call(x->vit, a.algo, x->vit_model, h, x->holder,
                      x->encoded + (size_t)m * (size_t)x->P, st, err, errlen);
}

/* ---- one step --------------------------------------------------------------- */

/* What an encoder balance could reach at best, without noise (sim_step_t's
 * held_max_s and vit_floor_s), from where the LLM-level plans left the
 * step's samples. */
static void vit_ceiling(const ctx_t *x, sim_step_t *st) {
  double most = 0, llm_most = 0, sum = 0;
  for (int32_t d = 0; d < x->P; d++) {
    double all = 0, vit = 0;
    for (int32_t m = 0; m < x->c->micro; m++) {
      size_t k = (size_t)m * (size_t)x->P + (size_t)d;
      all += x->held[k];
      vit += x->held_vit[k];
    }
    most = fmax(most, all);
    llm_most = fmax(llm_most, all - vit);
    sum += all;
  }
  st->held_max_s = most;
  st->vit_floor_s = fmax(llm_most, sum / x->P);
}

/* ---- balancing ahead (--ahead K) ------------------------------------------- */

static void ahead_free(sim_ahead_t *a) {
  if (!a) return;
  free(a->handoff);
  free(a->overlap);
  free(a->compute);
  free(a);
}

/* A step's sim_ahead_t; without the compute for "+vit" (see sim.h). NULL
 * when out of memory. */
static sim_ahead_t *ahead_new(const ctx_t *x, int vit) {
  size_t p = (size_t)x->P, m = (size_t)x->c->micro;
  sim_ahead_t *a = calloc(1, sizeof *a);
  if (!a) return NULL;
  a->handoff = calloc(m, sizeof *a->handoff);
  a->overlap = calloc(m * p, sizeof *a->overlap);
  a->compute = vit ? NULL : calloc(p, sizeof *a->compute);
  if (a->handoff && a->overlap && (vit || a->compute)) return a;
  ahead_free(a);
  return NULL;
}

/* Hand-off m's LLM-level tallies: what it added to the step's. */
static void ahead_tally(sim_step_t *st, const sim_step_t *before, int32_t m) {
  st->ahead->handoff[m] = (sim_handoff_t){
      .gather_bytes = st->gather_bytes - before->gather_bytes,
      .xfer_bytes = st->xfer_bytes - before->xfer_bytes,
      .peers = st->peers - before->peers,
      .copy_bytes = st->copy_bytes - before->copy_bytes,
      .solve_s = st->solve_s - before->solve_s,
      .inter_xfer_bytes = st->inter_xfer_bytes - before->inter_xfer_bytes,
      .inter_peers = st->inter_peers - before->inter_peers,
      .applied = st->applied - before->applied};
}

/* Each rank's compute in micro-batch m of step s, from secs[P] (unscaled),
 * into out[P]: the time slot_seconds() makes of it. */
static void micro_seconds(const ctx_t *x, const double *secs, int64_t s,
                          int32_t m, double *out) {
  for (int32_t d = 0; d < x->P; d++)
    out[d] = slot_seconds(x, secs, d, s, m, 1);
}

/* Before a run's first measured step: the compute of the K hand-offs
 * before it, the warm-up's, as drawn (the shim does not balance there). A
 * hand-off before the run's first has none: the run's first hand-offs
 * have less beside them. */
static void ahead_start(ctx_t *x) {
  int64_t K = x->c->ahead, micro = x->c->micro;
  int64_t h0 = x->c->warmup_last * micro;
  for (int64_t g = h0 - K < 0 ? 0 : h0 - K; g < h0; g++) {
    int32_t m = (int32_t)(g % micro);
    draw_handoff(x, g, m);
    micro_seconds(x, x->drawn + (size_t)m * (size_t)x->P, g / micro, m,
                  x->recent + (size_t)(g % K) * (size_t)x->P);
  }
}

/* Rank d's compute in the K micro-batches before hand-off h = s * micro +
 * m: this step's from x->now, earlier ones' from x->recent. */
static double overlapped(const ctx_t *x, int64_t s, int32_t m, int32_t d) {
  int64_t K = x->c->ahead, h0 = s * x->c->micro, h = h0 + m;
  double o = 0;
  for (int64_t g = h - 1; g >= 0 && g >= h - K; g--)
    o += g >= h0 ? x->now[(size_t)(g - h0) * (size_t)x->P + (size_t)d]
                 : x->recent[(size_t)(g % K) * (size_t)x->P + (size_t)d];
  return o;
}

/* At the end of step s, secs[P * micro] each rank's unscaled seconds per
 * micro-batch as it runs them: what each hand-off's work ran beside, and
 * each rank's compute over the step (the same as compute_max()'s); then
 * this step's micro-batches become the latest. */
static void ahead_step(ctx_t *x, const double *secs, int64_t s,
                       sim_step_t *st) {
  size_t P = (size_t)x->P;
  int32_t micro = x->c->micro;
  for (int32_t m = 0; m < micro; m++)
    micro_seconds(x, secs + (size_t)m * P, s, m, x->now + (size_t)m * P);
  for (int32_t m = 0; m < micro; m++)
    for (int32_t d = 0; d < x->P; d++)
      st->ahead->overlap[(size_t)m * P + (size_t)d] = overlapped(x, s, m, d);
  for (int32_t d = 0; st->ahead->compute && d < x->P; d++)
    st->ahead->compute[d] = slot_seconds(x, secs, d, s, 0, micro);
  for (int32_t m = 0; m < micro; m++) {
    int64_t g = s * micro + m;
    memcpy(x->recent + (size_t)(g % x->c->ahead) * P, x->now + (size_t)m * P,
           P * sizeof *x->now);
  }
}

static int simulate_step(ctx_t *x, sim_algo_t a, int64_t s, sim_step_t *st,
                         char *err, size_t errlen) {
  const sim_config_t *c = x->c;
  memset(st, 0, sizeof *st);
  if (c->ahead > 0 && a.shim && !(st->ahead = ahead_new(x, a.vit))) {
    snprintf(err, errlen, "out of memory for --ahead at %d ranks", (int)x->P);
    return -1;
  }
  memset(x->history, 0, (size_t)x->P * sizeof *x->history);
  for (int32_t m = 0; m < c->micro; m++) {
    int64_t h = s * c->micro + m;
    draw_handoff(x, h, m);
    for (int64_t i = x->w.first[h]; i < x->w.first[h + 1]; i++)
      st->tokens += (double)x->w.len[i];
  }
  size_t bytes = (size_t)x->P * (size_t)c->micro * sizeof *x->held;
  memcpy(x->held, x->drawn, bytes);
  memcpy(x->held_vit, x->drawn_vit, bytes);
  for (int32_t m = 0; a.shim && m < c->micro; m++) {
    int64_t h = s * c->micro + m;
    sim_step_t pre = *st;
    int applied = balance_handoff(x, a, h, m, st, err, errlen);
    if (applied < 0) return -1;
    if (st->ahead) ahead_tally(st, &pre, m);
    if (!x->met[m]) continue;
    sim_step_t before = *st;
    if (encoder_call(x, a, h, m, applied, st, err, errlen) < 0) return -1;
    if (x->c->vit_threshold < 0) learn_meet(x, &before, st);
  }
  compute_max(x, x->drawn, s, &st->imb_before);
  vit_ceiling(x, st);
  if (a.vit) {
    gated_compute(x, s, st);
    if (st->ahead) ahead_step(x, x->totals, s, st); /* each rank's own */
    return 0;
  }
  st->compute_max_s = compute_max(x, x->held, s, &st->imb_after);
  vit_phase(x, x->held_vit, s, st);
  if (st->ahead) ahead_step(x, x->held, s, st);
  return 0;
}

static int any_vit(const sim_algo_t *algos, int nalgos) {
  for (int a = 0; a < nalgos; a++)
    if (algos[a].vit) return 1;
  return 0;
}

int sim_simulate(const sim_config_t *c, int32_t ranks, const sim_algo_t *algos,
                 int nalgos, sim_run_t *runs, char *err, size_t errlen) {
  ctx_t x;
  memset(runs, 0, (size_t)nalgos * sizeof *runs); /* freeable on any error */
  int rc = ctx_init(&x, c, ranks, err, errlen);
  if (rc == 0) x.model = fit_model(&x, 0);
  if (rc == 0 && any_vit(algos, nalgos)) rc = prepare_vit(&x, err, errlen);
  for (int a = 0; rc == 0 && a < nalgos; a++) {
    x.slot = 0; /* each run is a process of its own */
    x.meet = (dpshim__policy_learnt_t){0, 0, 0, 0};
    x.retry = (dpshim__policy_retry_t){0, 0};
    runs[a] = (sim_run_t){ranks, algos[a], c->steps, NULL,
                          algos[a].vit && c->vit_threshold >= 0 ? x.text_model
                                                                : x.model,
                          x.vit_model};
    runs[a].step = calloc((size_t)c->steps, sizeof *runs[a].step);
    if (!runs[a].step) {
      snprintf(err, errlen, "out of memory for the steps");
      rc = -1;
    }
    if (rc == 0 && c->ahead > 0) ahead_start(&x);
    for (int64_t k = 0; rc == 0 && k < c->steps; k++)
      rc = simulate_step(&x, algos[a], c->warmup_last + k, &runs[a].step[k],
                         err, errlen);
  }
  ctx_free(&x);
  return rc;
}

void sim_run_free(sim_run_t *r) {
  for (int64_t k = 0; r->step && k < r->nsteps; k++)
    ahead_free(r->step[k].ahead);
  free(r->step);
  r->step = NULL;
}
