/* `default`: reach the lower bound moving as few bytes as possible.
 *
 * The original re-deals every sample, so almost every byte changes rank each
 * step. Here samples start where they are. The target is U = B * (1 +
 * TOLERANCE), B the lower bound for plans within the token cap:
 *   1. shed: every rank above U gives up samples, longest first (the most
 *      cost per byte moved), none that would take it below B or that no rank
 *      could absorb; if still above U, the cheapest single sample that gets it
 *      there. Every rank also offers a fringe of its shortest samples;
 *   2. place: shed samples, longest first, go home if home has room (load
 *      within U, tokens within the cap), else to the least-loaded rank with
 *      room; a big sample that fits nowhere makes room on one of the least
 *      loaded ranks, which sheds its own shorter samples, placed in their
 *      turn; a small one goes to the least-loaded rank within the cap, else
 *      home. The fringe, placed last, levels the ranks finely as the tail of
 *      LPT does, and mostly goes home;
 *   3. repair: while the busiest rank exceeds U, it hands work to the least
 *      busy one: a move or a one-for-one swap that keeps the receiver within
 *      U with the most useful cost per byte (a sample going home, or moving
 *      again, is free), else a trade of one long sample for several of the
 *      receiver's short ones when the receiver is full up to the cap, else
 *      the exchange that lowers the larger load most. At small rank counts,
 *      or while the busiest rank is over 1.003 B, a token-full receiver
 *      may first be unlocked by such a trade with any rank, and every rank
 *      is tried as the receiver. The repair adds
 *      traffic only while the plan moves under a quarter of all bytes.
 * Every step also keeps each rank within its rows cap (a hard limit: a
 * rank above one sheds samples with rows first; shedding skips a sample no
 * other rank has rows room for; after placing, rows leave a rank above its
 * cap). Under rows caps, a plan without gain or above a cap is replaced by
 * a descent from the origins by single moves and swaps within both caps
 * (default_rows.c); a plan still above a cap is skipped by plan.c.
 * A rank keeps at least one sample; every move checks the cap (only a sample
 * sent home can cross it, if home has meanwhile been filled: not seen in the
 * property tests); the plan is applied only if it lowers the maximum load.
 * Then default_finish.c: seed's plan as a second start where this one
 * stays above the bound, and every moved sample sent home that fits there
 * under the maximum.
 * Told the hosts, bytes are priced (dpshim__move_price: a byte across
 * hosts costs inter_host_cost bytes within one) wherever steps weigh
 * them; a host's big shed samples leave it, longest first (the most cost
 * per byte), while they fit in what the host holds above its ranks' targets,
 * the others look for room on their home's host first (default_place.c);
 * and default_finish.c moves samples left on other hosts to their home's
 * where that keeps the maximum. */
#include <math.h>

#include "default_state.h"

#define TOLERANCE 1e-4
#define FRINGE 0.01 /* share of B each rank offers as short samples */

/* ---- 1. shed ------------------------------------------------------------ */

/* order[] bucketed by origin, length-descending inside each rank. */
static int group_by_origin(dpshim__dstate_t *s) {
  const dpshim__ctx_t *ctx = s->ctx;
  int64_t *fill = DPSHIM__ALLOC(ctx, int64_t, ctx->ranks);
  s->start = DPSHIM__ALLOC(ctx, int64_t, ctx->ranks + 1);
  s->group = DPSHIM__ALLOC(ctx, int64_t, ctx->nsamples);
  if (!fill || !s->start || !s->group) return DPSHIM_ENOMEM;
  s->start[0] = 0;
  for (int32_t r = 0; r < ctx->ranks; r++) s->start[r + 1] = s->count[r];
  for (int32_t r = 0; r < ctx->ranks; r++) {
    s->start[r + 1] += s->start[r];
    fill[r] = s->start[r];
  }
  for (int64_t k = 0; k < ctx->nsamples; k++) {
    int64_t i = s->order[k];
    s->group[fill[ctx->origin[i]]++] = i;
  }
  return 0;
}

/* The two ranks with the most rows room. While ranks only shed, room only
 * grows, so noting each rank that sheds keeps them exact. */
typedef struct rows_room {
  int64_t room[2];
  int32_t rank[2];
} rows_room_t;

static void rows_room_note(rows_room_t *t, const dpshim__dstate_t *s,
                           int32_t r) {
  if (!s->ctx->rows_cap) return;
  int64_t room = s->ctx->rows_cap[r] - s->rows[r];
  if (t->rank[0] == r) {
    t->room[0] = room;
    return;
  }
  if (t->rank[1] == r || room > t->room[1]) {
    t->room[1] = room;
    t->rank[1] = r;
  }
  if (t->room[1] > t->room[0]) {
    rows_room_t swapped = {{t->room[1], t->room[0]}, {t->rank[1], t->rank[0]}};
    *t = swapped;
  }
}

static rows_room_t rows_room_init(const dpshim__dstate_t *s) {
  rows_room_t t = {{INT64_MIN, INT64_MIN}, {-1, -1}};
  for (int32_t r = 0; r < s->ctx->ranks; r++) rows_room_note(&t, s, r);
  return t;
}

/* Whether a rank but r has rows room for sample i: shedding one that fits
 * nowhere else only sends it home again, and keeps the rank from shedding
 * one that could have gone. */
static int fits_elsewhere(const dpshim__dstate_t *s, const rows_room_t *t,
                          int32_t r, int64_t i) {
  int64_t rows = s->ctx->samples[i].rows;
  if (!s->ctx->rows_cap || rows == 0) return 1;
  return rows <= (t->rank[0] != r ? t->room[0] : t->room[1]);
}

static void shed_sample(dpshim__dstate_t *s, rows_room_t *t, int32_t r,
                        int64_t i) {
  dpshim__dstate_take(s, i);
  rows_room_note(t, s, r);
}

static void shed_rank(dpshim__dstate_t *s, rows_room_t *t, int32_t r,
                      double max_room) {
  const double *cost = s->ctx->cost;
  const int64_t *own = s->group + s->start[r];
  int64_t n = s->start[r + 1] - s->start[r];
  for (int64_t k = 0; k < n && s->load[r] > s->target && s->count[r] > 1; k++) {
    int64_t i = own[k];
    if (cost[i] <= s->load[r] - s->bound && cost[i] <= max_room &&
        fits_elsewhere(s, t, r, i))
      shed_sample(s, t, r, i);
  }
  /* Every sample left is larger than the excess: the cheapest one that
   * clears it overshoots least. */
  for (int64_t k = n - 1; k >= 0 && s->load[r] > s->target && s->count[r] > 1;
       k--) {
    int64_t i = own[k];
    if (s->ctx->dest[i] == r && cost[i] >= s->load[r] - s->target &&
        fits_elsewhere(s, t, r, i))
      shed_sample(s, t, r, i);
  }
}

/* Every rank also offers its shortest samples, up to FRINGE * LB of cost:
 * placed last, they level the ranks finely, as the tail of LPT does, and
 * most go home again. */
static void release_fringe(dpshim__dstate_t *s, int32_t r) {
  double budget = FRINGE * s->bound;
  for (int64_t k = s->start[r + 1] - 1; k >= s->start[r] && s->count[r] > 1; k--) {
    int64_t i = s->group[k];
    if (s->ctx->dest[i] != r) continue;
    if (s->ctx->cost[i] > budget) break;
    budget -= s->ctx->cost[i];
    dpshim__dstate_take(s, i);
  }
}

/* A rank above its rows cap (set below what it holds) sheds samples with
 * rows, longest first, until it is within it. */
static void shed_rows(dpshim__dstate_t *s, int32_t r) {
  const dpshim__ctx_t *ctx = s->ctx;
  for (int64_t k = s->start[r];
       k < s->start[r + 1] && s->rows[r] > ctx->rows_cap[r] && s->count[r] > 1;
       k++) {
    int64_t i = s->group[k];
    if (ctx->dest[i] == r && ctx->samples[i].rows > 0) dpshim__dstate_take(s, i);
  }
}

static int over_rows_cap_before(const dpshim__ctx_t *ctx) {
  for (int32_t r = 0; ctx->rows_cap && r < ctx->ranks; r++)
    if (ctx->rows0[r] > ctx->rows_cap[r]) return 1;
  return 0;
}

static void shed(dpshim__dstate_t *s) {
  double min_load = s->load[0];
  for (int32_t r = 1; r < s->ctx->ranks; r++) min_load = fmin(min_load, s->load[r]);
  double max_room = s->target - min_load;
  rows_room_t room = rows_room_init(s);
  for (int32_t r = 0; r < s->ctx->ranks; r++)
    if (s->load[r] > s->target) shed_rank(s, &room, r, max_room);
  for (int32_t r = 0; s->ctx->rows_cap && r < s->ctx->ranks; r++) shed_rows(s, r);
  for (int32_t r = 0; r < s->ctx->ranks; r++) release_fringe(s, r);
}

/* ---- driver ------------------------------------------------------------- */


/* The trades' per-rank cache (default_state.h): each rank's slot sized to
 * what it holds and half again; the pools room for every sample about
 * twice before they are reset. */
static int trade_cache_init(dpshim__dstate_t *s) {
  const dpshim__ctx_t *ctx = s->ctx;
  struct dpshim__trade_cache *c = &s->cache;
  c->size = 2 * (ctx->nsamples + ctx->ranks);
  c->used = 0;
  c->version = DPSHIM__ALLOC(ctx, int64_t, ctx->ranks);
  c->at = DPSHIM__ALLOC(ctx, int64_t, ctx->ranks);
  c->room = DPSHIM__ALLOC(ctx, int64_t, ctx->ranks);
  c->key = DPSHIM__ALLOC(ctx, uint64_t, c->size);
  c->cost = DPSHIM__ALLOC(ctx, double, c->size);
  c->each = DPSHIM__ALLOC(ctx, double, c->size);
  c->tokens = DPSHIM__ALLOC(ctx, int64_t, c->size);
  c->rows = DPSHIM__ALLOC(ctx, int64_t, c->size);
  c->longest = DPSHIM__ALLOC(ctx, int64_t, ctx->ranks);
  c->longest_version = DPSHIM__ALLOC(ctx, int64_t, ctx->ranks);
  c->longest_at = DPSHIM__ALLOC(ctx, int64_t, ctx->ranks);
  c->second = DPSHIM__ALLOC(ctx, int64_t, ctx->ranks);
  c->costliest = DPSHIM__ALLOC(ctx, double, ctx->ranks);
  c->densest = DPSHIM__ALLOC(ctx, double, ctx->ranks);
  if (!c->version || !c->at || !c->room || !c->key || !c->cost || !c->each ||
      !c->tokens || !c->rows || !c->longest || !c->longest_version ||
      !c->longest_at || !c->second || !c->costliest || !c->densest)
    return DPSHIM_ENOMEM;
  for (int32_t r = 0; r < ctx->ranks; r++)
    c->version[r] = c->longest_version[r] = -1, c->room[r] = 0;
  return 0;
}

int dpshim__dstate_init(dpshim__dstate_t *s, const dpshim__ctx_t *ctx) {
  *s = (dpshim__dstate_t){.ctx = ctx,
                          .load = DPSHIM__ALLOC(ctx, double, ctx->ranks),
                          .tokens = DPSHIM__ALLOC(ctx, int64_t, ctx->ranks),
                          .rows = DPSHIM__ALLOC(ctx, int64_t, ctx->ranks),
                          .count = DPSHIM__ALLOC(ctx, int64_t, ctx->ranks),
                          .token_key = DPSHIM__ALLOC(ctx, double, ctx->ranks),
                          .bound = ctx->lower_bound_cap,
                          .target = ctx->lower_bound_cap * (1 + TOLERANCE),
                          .order = ctx->order,
                          .head = DPSHIM__ALLOC(ctx, int64_t, ctx->ranks),
                          .next = DPSHIM__ALLOC(ctx, int64_t, ctx->nsamples),
                          .prev = DPSHIM__ALLOC(ctx, int64_t, ctx->nsamples)};
  if (!s->load || !s->tokens || !s->rows || !s->count || !s->token_key ||
      !s->order || !s->head || !s->next || !s->prev)
    return DPSHIM_ENOMEM;
  for (int32_t r = 0; r < ctx->ranks; r++) {
    s->load[r] = ctx->history[r];
    s->tokens[r] = s->rows[r] = s->count[r] = 0;
    s->head[r] = -1;
  }
  /* Summed in index order, as the loads before are: bit for bit the same
   * when dest is the origin. */
  dpshim__sum_costs(ctx->cost, ctx->dest, ctx->nsamples, s->load);
  for (int64_t i = ctx->nsamples - 1; i >= 0; i--) {
    const dpshim_sample_t *smp = &ctx->samples[i];
    int32_t r = ctx->dest[i];
    s->total_price +=
        ctx->host ? dpshim__across_price(ctx, smp->bytes) : smp->bytes;
    s->moved_price += dpshim__move_price(ctx, i, r);
    s->tokens[r] += smp->len;
    s->rows[r] += smp->rows;
    s->count[r]++;
    dpshim__dstate_link_front(s, i, r);
  }
  for (int32_t r = 0; r < ctx->ranks; r++) s->token_key[r] = (double)s->tokens[r];
  s->version = DPSHIM__ALLOC(ctx, int64_t, ctx->ranks);
  s->viable = DPSHIM__ALLOC(ctx, int32_t, ctx->ranks);
  s->give = DPSHIM__ALLOC(ctx, int32_t, ctx->nsamples);
  s->give_len = DPSHIM__ALLOC(ctx, int32_t, ctx->nsamples);
  if (!s->version || !s->viable || !s->give || !s->give_len ||
      trade_cache_init(s) < 0)
    return DPSHIM_ENOMEM;
  for (int32_t r = 0; r < ctx->ranks; r++) s->version[r] = 0;
  return 0;
}

static int shed_place_repair(dpshim__dstate_t *s) {
  int rc = group_by_origin(s);
  if (rc == 0) {
    shed(s);
    rc = dpshim__default_place(s);
  }
  /* A shed sample sent home finds its rows room taken when another took
   * it meanwhile: move rows off such ranks before the repair. */
  for (int32_t r = 0; rc == 0 && s->ctx->rows_cap && r < s->ctx->ranks; r++)
    dpshim__dstate_fit_rows(s, r);
  return rc == 0 ? dpshim__default_repair(s) : rc;
}

static int over_rows_caps(const dpshim__dstate_t *s) {
  for (int32_t r = 0; r < s->ctx->ranks; r++)
    if (dpshim__dstate_over_rows_cap(s, r)) return 1;
  return 0;
}

/* Judge on loads summed afresh, not the running totals, whose rounding
 * depends on the path taken. Staying put is no option when the samples as
 * they lie exceed a rows cap: then any plan within the caps (plan.c checks
 * it) is applied. */
static int judge(dpshim__dstate_t *s, double before) {
  const dpshim__ctx_t *ctx = s->ctx;
  for (int32_t r = 0; r < ctx->ranks; r++) s->load[r] = ctx->history[r];
  dpshim__sum_costs(ctx->cost, ctx->dest, ctx->nsamples, s->load);
  int gain = dpshim__max_load(s->load, ctx->ranks) < before;
  return gain || over_rows_cap_before(ctx) ? DPSHIM_SKIP_NONE
                                           : DPSHIM_SKIP_NO_GAIN;
}

/* Under rows caps the shed step may find nothing it can place elsewhere,
 * or place what later overflows a cap; the repair's traffic budget then
 * leaves no gain where one move or swap would lower the peak. So, from the
 * origins again, the fallback descends by such steps, then repairs. (Only
 * with rows caps: plans without them stay as they were.) */
static int descend_from_origins(dpshim__dstate_t *s, double before) {
  const dpshim__ctx_t *ctx = s->ctx;
  dpshim__dest_at_origins(ctx, ctx->dest);
  int rc = dpshim__dstate_init(s, ctx);
  if (rc < 0) return rc;
  dpshim__default_descend(s, before);
  if ((rc = dpshim__default_repair(s)) < 0) return rc;
  return judge(s, before);
}

int dpshim__default_aim(const dpshim__ctx_t *ctx, double target) {
  dpshim__dest_at_origins(ctx, ctx->dest);
  dpshim__dstate_t s;
  int rc = dpshim__dstate_init(&s, ctx);
  if (rc < 0) return rc;
  s.target = target;
  return shed_place_repair(&s);
}

/* Steps 1-3 (and the rows fallback) on ctx->dest, from the origins;
 * *max: the plan's maximum load (the one before when it skips). */
static int core(const dpshim__ctx_t *ctx, double *max) {
  dpshim__dstate_t s;
  int rc = dpshim__dstate_init(&s, ctx);
  if (rc == 0) rc = shed_place_repair(&s);
  if (rc < 0) return rc;
  double before = dpshim__max_load(ctx->load0, ctx->ranks);
  int over = over_rows_caps(&s), reason = judge(&s, before);
  if (ctx->rows_cap && !over_rows_cap_before(ctx) &&
      (reason != DPSHIM_SKIP_NONE || over))
    reason = descend_from_origins(&s, before);
  *max = reason == DPSHIM_SKIP_NONE ? dpshim__max_load(s.load, ctx->ranks)
                                    : before;
  return reason;
}

/* Told the hosts, placing on the home's host may leave the repair further
 * from the target: the plan made without hosts is kept instead if its
 * maximum is more than DPSHIM_TOPOLOGY_SLACK lower. (No plan is below the
 * bound, so within that of it there is nothing to make.) */
static int without_hosts_if_better(const dpshim__ctx_t *ctx, int reason,
                                   double max) {
  if (reason < 0 || !ctx->host ||
      max <= ctx->lower_bound_cap * (1 + DPSHIM_TOPOLOGY_SLACK))
    return reason;
  dpshim__ctx_t flat = *ctx;
  flat.host = NULL;
  flat.host_ring = NULL;
  flat.dest = DPSHIM__ALLOC(ctx, int32_t, ctx->nsamples);
  if (!flat.dest) return DPSHIM_ENOMEM;
  dpshim__dest_at_origins(ctx, flat.dest);
  double flat_max;
  int flat_reason = core(&flat, &flat_max);
  if (flat_reason < 0) return flat_reason;
  if (flat_max * (1 + DPSHIM_TOPOLOGY_SLACK) >= max) return reason;
  for (int64_t i = 0; i < ctx->nsamples; i++) ctx->dest[i] = flat.dest[i];
  return flat_reason;
}

/* Whether no plan can lower the maximum load: the rank that receives the
 * costliest sample holds at least it on top of the least history (the
 * sums only grow, also rounded), and the samples as they lie are there
 * already (fewlong: a long document alone on a rank). Then every step
 * below ends in no-gain, and is not run. Not where a rows cap is exceeded:
 * there any plan within the caps is applied. */
static int cannot_gain(const dpshim__ctx_t *ctx) {
  double least = ctx->history[0];
  for (int32_t r = 1; r < ctx->ranks; r++) least = fmin(least, ctx->history[r]);
  return dpshim__max_load(ctx->load0, ctx->ranks) <=
             least + ctx->cost[ctx->order[0]] &&
         !over_rows_cap_before(ctx);
}

int dpshim__algo_default(const dpshim__ctx_t *ctx) {
  if (cannot_gain(ctx)) return DPSHIM_SKIP_NO_GAIN;
  double max;
  int reason = core(ctx, &max);
  reason = without_hosts_if_better(ctx, reason, max);
  return dpshim__default_finish(ctx, reason);
}
