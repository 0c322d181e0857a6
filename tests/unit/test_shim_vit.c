/* The ViT balance's pipeline (shim/vit_balance.h) over the thread mock of the comm
 * seam, with libvit.so (Qwen layout, small rows) as the real encoder.
 *
 * Each rank encodes micro-batches of images drawn from (seed, rank,
 * micro-batch): none, one or several, of varied sizes. The test thread
 * computes what each rank gets without the shim by calling libvit itself;
 * with the balance the embeddings, the patch gradients and the summed
 * parameter gradients must be the same bit for bit, whatever moved, under
 * both pipeline schedules, and when calls fall out of step, a rank's call
 * is malformed, the encoder fails on what it was sent, or a collective
 * fails. The rank threads only record; assertions run in the test thread.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mock_comm.h"
#include "vit.h"         /* libvit.so */
#include "vit_balance.h"

#define MAXR 6
#define MAXM 3     /* micro-batches */
#define MAXI 4     /* images per rank and micro-batch */
#define RF 6       /* floats per patch row */
#define ED 4       /* floats per embedding row */
#define NPARAMS 64
#define MAXROWS (MAXI * 2 * 8 * 8)
#define MAXEMB (MAXROWS / 4 * ED)

/* ---- the images of (seed, rank, micro-batch) ------------------------------ */

static uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

typedef struct images {
  int32_t count, grid[MAXI * 3];
  int64_t nrows, patches[MAXI], rows[2][MAXI], out_rows[MAXI];
  float px[MAXROWS * RF];
} images_t;

/* Zero to MAXI images, sides 2..8 (even, as merge 2 wants), t 1 or 2; a
 * heavy rank now and then. odd_side: the first image gets an odd side,
 * which libvit refuses. */
static void draw(images_t *im, uint64_t seed, int rank, int m, int odd_side) {
  memset(im, 0, sizeof *im);
  uint64_t x = mix(seed ^ mix((uint64_t)rank * 131 + (uint64_t)m));
  im->count = (int32_t)(x % (MAXI + 1));
  for (int32_t i = 0; i < im->count; i++) {
    x = mix(x + (uint64_t)i);
    int32_t t = 1 + (int32_t)(x & 1), h = 2 * (1 + (int32_t)((x >> 8) % 4)),
            w = 2 * (1 + (int32_t)((x >> 16) % 4));
    if (odd_side && i == 0) h = 3;
    im->grid[3 * i] = t, im->grid[3 * i + 1] = h, im->grid[3 * i + 2] = w;
    int64_t rows = (int64_t)t * h * w;
    for (int64_t r = 0; r < rows * RF; r++)
      im->px[im->nrows * RF + r] = (float)(mix(x ^ (uint64_t)r) % 1000) / 8;
    im->patches[i] = rows;
    im->rows[0][i] = 1;
    im->rows[1][i] = rows;
    im->out_rows[i] = rows / 4;
    im->nrows += rows;
  }
}

static vit_input_t input_of(const images_t *im) {
  return (vit_input_t){im->count, im->grid, im->px, im->nrows};
}

static vit_t *open_vit(void) {
  vit_config_t c = vit_config_default(VIT_QWEN);
  c.row_floats = RF;
  c.embed_dim = ED;
  c.params = NPARAMS;
  c.time_scale = 0;
  char err[200];
  return vit_open(&c, err, sizeof err);
}

/* The LLM's stand-in gradient for an embedding value: on a coarse grid. */
static void grads_of(const float *emb, int64_t n, float *g) {
  for (int64_t i = 0; i < n; i++) {
    uint32_t b;
    memcpy(&b, &emb[i], sizeof b);
    g[i] = (float)((int32_t)(mix(b) % 17) - 8) * 0.25f;
  }
}

/* ---- libvit as a dpshim_encoder_t ----------------------------------------- */

typedef struct adapter {
  vit_t *vit;
  const vit_input_t *own; /* the caller's call as given */
  float *own_emb;
  int64_t *params;
} adapter_t;

static int a_forward(void *ctx, const dpshim_encoder_call_t *call,
                     void **saved) {
  adapter_t *a = ctx;
  if (!call)
    return vit_forward(a->vit, a->own, a->own_emb, (vit_saved_t **)saved);
  int64_t rows = 0;
  for (int32_t i = 0; i < call->count; i++) rows += call->input[1].rows[i];
  vit_input_t in = {call->count, call->input[0].data, call->input[1].data,
                    rows};
  return vit_forward(a->vit, &in, call->output.data, (vit_saved_t **)saved);
}

static int a_backward(void *ctx, void *saved, const void *out_grad,
                      void *in_grad) {
  adapter_t *a = ctx;
  return vit_backward(a->vit, saved, out_grad, a->params, in_grad);
}

static void a_release(void *ctx, void *saved) {
  (void)ctx;
  vit_saved_free(saved);
}

static dpshim_encoder_call_t describe(images_t *im, float *emb) {
  return (dpshim_encoder_call_t){
      .count = im->count, .patches = im->patches, .ninputs = 2,
      .input = {{"grid", im->grid, 3 * sizeof(int32_t), im->rows[0]},
                {"patches", im->px, RF * sizeof(float), im->rows[1]}},
      .output = {"embeddings", emb, ED * sizeof(float), im->out_rows},
      .grad_input = 1};
}

/* ---- a scenario ----------------------------------------------------------- */

typedef struct scenario {
  int ranks, micro, afab, ready, want_patch;
  uint64_t seed;
  int extra_rank;   /* makes one extra forward (released) first; -1: none */
  int invalid_rank; /* says its first call is invalid; -1: none */
  int odd_rank;     /* its first image has an odd side; -1: none */
  int handoff_rank; /* a checkpoint before its backwards; -1: none */
  unsigned apart;   /* bit m: the gate keeps micro-batch m's calls apart */
  int ship;         /* 1: each call shipped before its forward; 2: every
                     * micro-batch's shipped before the first forward */
  int change_rank;  /* ships rows that differ from its forwards'; -1: none */
  int async;        /* forwards async, each waited for before its backward */
  /* recorded by the ranks */
  float emb[MAXR][MAXM][MAXEMB], pgrad[MAXR][MAXM][MAXROWS * RF];
  int64_t params[MAXR][NPARAMS];
  int fwd_rc[MAXR][MAXM], bwd_rc[MAXR][MAXM];
  int applied[MAXR], out_of_step[MAXR], off_at_end[MAXR];
  int backs_moved[MAXR]; /* backwards whose gradients moved */
  int shipped[MAXR];     /* forwards that took their ship */
  /* async: output floats not yet written when the forward returned */
  long unwritten[MAXR];
  int32_t moved_peak[MAXR], moved_end[MAXR]; /* moved forwards in flight */
  char message[MAXR][256];
} scenario_t;

static scenario_t *new_scenario(int ranks, uint64_t seed) {
  scenario_t *s = calloc(1, sizeof *s);
  *s = (scenario_t){.ranks = ranks, .micro = 2, .ready = 1, .want_patch = 1,
                    .seed = seed, .extra_rank = -1, .invalid_rank = -1,
                    .odd_rank = -1, .handoff_rank = -1, .change_rank = -1};
  return s;
}

typedef struct rank_state {
  scenario_t *s;
  int rank;
  dpshim__vit_t *v;
  vit_t *vit;
  images_t im[MAXM];
  vit_input_t in[MAXM];
  uint64_t key[MAXM];
  adapter_t a[MAXM];
  dpshim_encoder_call_t call[MAXM];
} rank_state_t;

static void note(rank_state_t *st, const dpshim__vit_report_t *rep) {
  st->s->applied[st->rank] += rep->applied;
  st->s->backs_moved[st->rank] +=
      rep->applied && rep->kind == DPSHIM__VIT_BACKWARD;
  st->s->out_of_step[st->rank] |= rep->out_of_step;
  st->s->shipped[st->rank] +=
      rep->kind == DPSHIM__VIT_FORWARD && rep->shipped > 0;
  if (rep->message[0] && !st->s->message[st->rank][0])
    snprintf(st->s->message[st->rank], 256, "%s", rep->message);
}

/* Micro-batch m's images and call, before its ship or forward. */
static void prepare(rank_state_t *st, int m) {
  scenario_t *s = st->s;
  draw(&st->im[m], s->seed, st->rank, m, st->rank == s->odd_rank && m == 0);
  st->in[m] = input_of(&st->im[m]);
  st->a[m] = (adapter_t){st->vit, &st->in[m], s->emb[st->rank][m],
                         s->params[st->rank]};
  st->call[m] = describe(&st->im[m], s->emb[st->rank][m]);
  if (st->rank == s->invalid_rank && m == 0) st->call[m].invalid = "broken here";
}

/* change_rank ships every image's first value off by one (its forward then
 * gives the true ones); no output buffer is given, as a loader would not
 * have one yet. */
static void ship(rank_state_t *st, int m) {
  images_t *im = &st->im[m];
  int change = st->rank == st->s->change_rank;
  float *px = im->px;
  for (int32_t i = 0; change && i < im->count; px += im->rows[1][i++] * RF)
    px[0] += 1;
  dpshim_encoder_call_t call = st->call[m];
  call.output.data = NULL;
  dpshim__vit_report_t rep;
  dpshim__vit_ship(st->v, &call, &rep);
  note(st, &rep);
  px = im->px;
  for (int32_t i = 0; change && i < im->count; px += im->rows[1][i++] * RF)
    px[0] -= 1;
}

#define UNWRITTEN -1e30f /* no embedding value is this */

static void forward(rank_state_t *st, int m) {
  scenario_t *s = st->s;
  dpshim_encoder_t enc = {&st->a[m], a_forward, a_backward, a_release};
  dpshim__vit_report_t rep;
  float *emb = s->emb[st->rank][m];
  int64_t n = 0;
  for (int32_t i = 0; i < st->im[m].count; i++) n += st->im[m].out_rows[i] * ED;
  for (int64_t k = 0; k < n; k++) emb[k] = UNWRITTEN;
  s->fwd_rc[st->rank][m] = dpshim__vit_forward(
      st->v, &enc, &st->call[m], s->async, &st->key[m], &rep);
  note(st, &rep);
  for (int64_t k = 0; k < n; k++) s->unwritten[st->rank] += emb[k] == UNWRITTEN;
}

static void wait_for(rank_state_t *st, int m) {
  scenario_t *s = st->s;
  if (!s->async || s->fwd_rc[st->rank][m] != 0) return;
  dpshim_encoder_t enc = {&st->a[m], a_forward, a_backward, a_release};
  dpshim__vit_report_t rep;
  s->fwd_rc[st->rank][m] = dpshim__vit_wait(st->v, &enc, st->key[m], &rep);
  note(st, &rep);
}

static void extra_forward(rank_state_t *st) {
  images_t im;
  float emb[MAXEMB];
  draw(&im, st->s->seed ^ 99, st->rank, 0, 0);
  vit_input_t in = input_of(&im);
  adapter_t a = {st->vit, &in, emb, st->s->params[st->rank]};
  dpshim_encoder_t enc = {&a, a_forward, a_backward, a_release};
  dpshim_encoder_call_t call = describe(&im, emb);
  uint64_t key;
  dpshim__vit_report_t rep;
  dpshim__vit_forward(st->v, &enc, &call, 0, &key, &rep);
  note(st, &rep);
  dpshim__vit_release(st->v, &enc, key, &rep);
  note(st, &rep);
}

static void backward(rank_state_t *st, int m) {
  scenario_t *s = st->s;
  if (s->fwd_rc[st->rank][m] != 0) return;
  float g[MAXEMB];
  int64_t n = 0;
  for (int32_t i = 0; i < st->im[m].count; i++) n += st->im[m].out_rows[i];
  grads_of(s->emb[st->rank][m], n * ED, g);
  dpshim_encoder_t enc = {&st->a[m], a_forward, a_backward, a_release};
  dpshim__vit_report_t rep;
  s->bwd_rc[st->rank][m] = dpshim__vit_backward(
      st->v, &enc, st->key[m], g, s->want_patch ? s->pgrad[st->rank][m] : NULL,
      &rep);
  note(st, &rep);
}

static void rank_main(dpshim__comm_t *comm, int rank, void *arg) {
  rank_state_t *st = calloc(1, sizeof *st);
  st->s = arg;
  st->rank = rank;
  st->vit = open_vit();
  dpshim__vit_config_t cfg = {
      .plan = {.algo = DPSHIM_ALGO_DEFAULT, .threshold = 0.0}};
  st->v = dpshim__vit_new(&cfg, comm);
  if (st->s->ready)
    dpshim__vit_set_model(st->v, (dpshim_cost_model_t){1, 0, 0, 0, 0});
  if (rank == st->s->extra_rank) extra_forward(st);
  for (int m = 0; m < st->s->micro; m++) {
    prepare(st, m);
    if (st->s->ship == 2) ship(st, m);
  }
  for (int m = 0; m < st->s->micro; m++) {
    dpshim__vit_set_apart(st->v, st->s->apart >> m & 1);
    if (st->s->ship == 1) ship(st, m);
    forward(st, m);
    int32_t moved = dpshim__vit_moved_in_flight(st->v);
    if (moved > st->s->moved_peak[rank]) st->s->moved_peak[rank] = moved;
    if (!st->s->afab) wait_for(st, m), backward(st, m);
  }
  for (int m = 0; st->s->afab && m < st->s->micro; m++) wait_for(st, m);
  if (rank == st->s->handoff_rank) {
    dpshim__vit_report_t rep;
    dpshim__vit_checkpoint(st->v, DPSHIM__VIT_HANDOFF, &rep);
    note(st, &rep);
  }
  for (int m = st->s->micro - 1; st->s->afab && m >= 0; m--) backward(st, m);
  st->s->moved_end[rank] = dpshim__vit_moved_in_flight(st->v);
  dpshim__vit_report_t rep;
  dpshim__vit_checkpoint(st->v, DPSHIM__VIT_CLOSE, &rep);
  note(st, &rep);
  st->s->off_at_end[rank] = !dpshim__vit_balancing(st->v);
  dpshim__vit_free(st->v);
  vit_close(st->vit);
  free(st);
}

/* ---- what each rank gets without the shim ---------------------------------- */

typedef struct expected {
  float emb[MAXR][MAXM][MAXEMB], pgrad[MAXR][MAXM][MAXROWS * RF];
  int64_t params[NPARAMS];
  int fwd_rc[MAXR][MAXM];
} expected_t;

static expected_t *expect(const scenario_t *s) {
  expected_t *e = calloc(1, sizeof *e);
  vit_t *vit = open_vit();
  for (int r = 0; r < s->ranks; r++)
    for (int m = 0; m < s->micro; m++) {
      images_t im;
      draw(&im, s->seed, r, m, r == s->odd_rank && m == 0);
      vit_input_t in = input_of(&im);
      vit_saved_t *saved;
      e->fwd_rc[r][m] = vit_forward(vit, &in, e->emb[r][m], &saved);
      if (e->fwd_rc[r][m] != 0) continue;
      float g[MAXEMB];
      grads_of(e->emb[r][m], vit_embed_rows(vit, &in) * ED, g);
      vit_backward(vit, saved, g, e->params, e->pgrad[r][m]);
    }
  vit_close(vit);
  return e;
}

static void check_same(const scenario_t *s, const expected_t *e) {
  int64_t params[NPARAMS] = {0};
  for (int r = 0; r < s->ranks; r++) {
    for (int p = 0; p < NPARAMS; p++) params[p] += s->params[r][p];
    for (int m = 0; m < s->micro; m++) {
      cr_assert_eq(s->fwd_rc[r][m], e->fwd_rc[r][m],
                   "rank %d micro %d: forward %d, %d without the shim", r, m,
                   s->fwd_rc[r][m], e->fwd_rc[r][m]);
      if (e->fwd_rc[r][m] != 0) continue;
      cr_assert_eq(s->bwd_rc[r][m], 0, "rank %d micro %d: backward", r, m);
      cr_assert_arr_eq(s->emb[r][m], e->emb[r][m], sizeof e->emb[r][m],
                       "rank %d micro %d: embeddings differ", r, m);
      cr_assert_arr_eq(s->pgrad[r][m], e->pgrad[r][m], sizeof e->pgrad[r][m],
                       "rank %d micro %d: patch gradients differ", r, m);
    }
  }
  cr_assert_arr_eq(params, e->params, sizeof params,
                   "summed parameter gradients differ");
}

static void run_fault(scenario_t *s, mock_stats_t *stats, int fail_rank,
                      int fail_call) {
  mock_opts_t o = {.size = s->ranks, .fail_rank = fail_rank,
                   .fail_call = fail_call, .fail_code = DPSHIM_EMPI};
  mock_stats_t local;
  cr_assert_eq(mock_run_ex(&o, rank_main, s, stats ? stats : &local), 0,
               "%s", (stats ? stats : &local)->message);
}

static void run(scenario_t *s, mock_stats_t *stats) { run_fault(s, stats, -1, 0); }

/* Runs s (with the fault, if fail_rank >= 0) and checks every rank's
 * outputs against libvit's without the shim. */
static void run_and_check(scenario_t *s, mock_stats_t *stats, int fail_rank,
                          int fail_call) {
  expected_t *e = expect(s);
  run_fault(s, stats, fail_rank, fail_call);
  check_same(s, e);
  free(e);
}

/* ---- tests ------------------------------------------------------------------ */

TestSuite(shim_vit);

Test(shim_vit, outputs_equal_the_unbalanced_ones) {
  int applied = 0;
  for (int ranks = 1; ranks <= MAXR; ranks++)
    for (uint64_t seed = 1; seed <= 6; seed++) {
      scenario_t *s = new_scenario(ranks, seed);
      run_and_check(s, NULL, -1, 0);
      for (int r = 0; r < ranks; r++) {
        cr_assert_eq(s->message[r][0], 0, "rank %d: %s", r, s->message[r]);
        cr_assert_eq(s->applied[r], s->applied[0], "plans agree");
      }
      applied += s->applied[0];
      free(s);
    }
  cr_assert_gt(applied, 20, "the balance moved images (%d calls)", applied);
}

Test(shim_vit, all_forwards_then_backwards_in_reverse) {
  int applied = 0;
  for (uint64_t seed = 1; seed <= 6; seed++) {
    scenario_t *s = new_scenario(4, seed);
    s->micro = MAXM;
    s->afab = 1;
    run_and_check(s, NULL, -1, 0);
    applied += s->applied[0];
    free(s);
  }
  cr_assert_gt(applied, 3);
}

/* A moved forward is one exchange out (both input buffers together) and
 * one back; a moved backward likewise (gradients out, patch gradients
 * back); nothing goes through a plain all-to-all. */
Test(shim_vit, one_exchange_per_direction) {
  int forwards = 0;
  for (uint64_t seed = 1; seed <= 6; seed++) {
    scenario_t *s = new_scenario(4, seed);
    mock_stats_t stats;
    run_and_check(s, &stats, -1, 0);
    int back = s->backs_moved[0], fwd = s->applied[0] - back;
    forwards += fwd;
    cr_assert_eq(stats.ops[MOCK_EXCHANGE], 0);
    cr_assert_eq(stats.ops[MOCK_ALLTOALLV_PARTS], 2 * fwd + 2 * back,
                 "seed %llu: %ld exchanges for %d forwards and %d backwards "
                 "that moved", (unsigned long long)seed,
                 stats.ops[MOCK_ALLTOALLV_PARTS], fwd, back);
    free(s);
  }
  cr_assert_gt(forwards, 3, "images moved");
}

Test(shim_vit, patch_gradients_only_when_asked) {
  scenario_t *s = new_scenario(4, 3);
  s->want_patch = 0;
  run(s, NULL);
  cr_assert_gt(s->applied[0], 0);
  float zero[MAXROWS * RF] = {0};
  for (int r = 0; r < 4; r++)
    cr_assert_arr_eq(s->pgrad[r][0], zero, sizeof zero, "nothing written");
  free(s);
}

Test(shim_vit, warm_up_moves_nothing) {
  scenario_t *s = new_scenario(4, 2);
  s->ready = 0;
  mock_stats_t stats;
  run_and_check(s, &stats, -1, 0);
  cr_assert_eq(s->applied[0], 0);
  cr_assert_eq(stats.ops[MOCK_ALLTOALLV_PARTS], 0, "no exchange in warm-up");
  free(s);
}

/* Every micro-batch kept apart by the gate: no call meets (the close's
 * checkpoint is the only collective), and every output is exact. */
Test(shim_vit, calls_kept_apart_meet_nowhere) {
  for (int afab = 0; afab < 2; afab++) {
    scenario_t *s = new_scenario(4, 5);
    s->micro = MAXM;
    s->afab = afab;
    s->apart = (1u << MAXM) - 1;
    mock_stats_t stats;
    run_and_check(s, &stats, -1, 0);
    cr_assert_eq(s->applied[0], 0);
    cr_assert_eq(stats.ops[MOCK_ALLGATHER], 1, "%ld header rounds",
                 stats.ops[MOCK_ALLGATHER]);
    cr_assert_eq(stats.ops[MOCK_ALLTOALLV_PARTS], 0);
    free(s);
  }
}

/* Micro-batches met and kept apart in turn, and all backwards after the
 * last forward kept apart (afab): a forward that moved images still meets
 * at its backward, so the outputs stay exact and the ranks in step. */
Test(shim_vit, a_moved_forward_meets_at_its_backward_though_apart) {
  int applied = 0;
  for (uint64_t seed = 1; seed <= 6; seed++)
    for (int afab = 0; afab < 2; afab++) {
      scenario_t *s = new_scenario(4, seed);
      s->micro = MAXM;
      s->afab = afab;
      s->apart = afab ? 1u << (MAXM - 1) : 2u;
      run_and_check(s, NULL, -1, 0);
      for (int r = 0; r < 4; r++) {
        cr_assert_eq(s->message[r][0], 0, "rank %d: %s", r, s->message[r]);
        cr_assert_eq(s->out_of_step[r], 0);
        cr_assert_eq(s->applied[r], s->applied[0], "plans agree");
      }
      cr_assert_gt(s->backs_moved[0], 0, "seed %d afab %d: no moved "
                   "forward's backward met", (int)seed, afab);
      cr_assert_geq(s->moved_peak[0], afab ? s->backs_moved[0] : 1,
                    "moved forwards in flight not counted");
      cr_assert_eq(s->moved_end[0], 0, "moved forwards left in flight");
      applied += s->applied[0];
      free(s);
    }
  cr_assert_gt(applied, 6, "images moved (%d calls)", applied);
}

Test(shim_vit, a_call_one_rank_cannot_describe_fails_on_every_rank) {
  scenario_t *s = new_scenario(4, 5);
  s->invalid_rank = 2;
  run_and_check(s, NULL, -1, 0);
  for (int r = 0; r < 4; r++) {
    cr_assert(strstr(s->message[r], "rank 2: broken here"), "rank %d: %s", r,
              s->message[r]);
    cr_assert_eq(s->off_at_end[r], 0, "the next call balances again");
  }
  free(s);
}

Test(shim_vit, the_encoder_failing_on_what_it_was_sent_falls_back) {
  int failed_somewhere = 0;
  for (uint64_t seed = 1; seed <= 8; seed++) {
    scenario_t *s = new_scenario(4, seed);
    s->odd_rank = 1;
    run_and_check(s, NULL, -1, 0); /* rank 1 gets libvit's refusal, the others theirs */
    failed_somewhere |= s->message[0][0] != 0;
    free(s);
  }
  cr_assert(failed_somewhere, "an odd image was sent to another rank");
}

Test(shim_vit, an_extra_forward_puts_ranks_out_of_step) {
  for (uint64_t seed = 1; seed <= 4; seed++) {
    scenario_t *s = new_scenario(4, seed);
    s->extra_rank = 3;
    mock_stats_t stats;
    run_and_check(s, &stats, -1, 0);
    for (int r = 0; r < 4; r++) {
      cr_assert(s->out_of_step[r], "rank %d saw it", r);
      cr_assert(strstr(s->message[r], "out of step"), "%s", s->message[r]);
      cr_assert(s->off_at_end[r]);
    }
    cr_assert_eq(stats.mismatch, 0);
    free(s);
  }
}

/* Images moved, then the balance went off before their backwards: each
 * rank re-encodes what it sent, and the gradients are still exact. */
Test(shim_vit, backwards_after_the_balance_went_off_are_exact) {
  int applied = 0;
  for (uint64_t seed = 1; seed <= 6; seed++) {
    scenario_t *s = new_scenario(4, seed);
    s->afab = 1;
    s->micro = MAXM;
    s->handoff_rank = 0; /* rank 0 at a hand-off, the others at a backward */
    run_and_check(s, NULL, -1, 0);
    cr_assert(s->off_at_end[1]);
    applied += s->applied[0];
    free(s);
  }
  cr_assert_gt(applied, 3, "forwards moved images before it went off");
}

Test(shim_vit, a_backward_without_its_forward_is_refused_locally) {
  vit_t *vit = open_vit();
  dpshim__vit_config_t cfg = {.plan = {.algo = DPSHIM_ALGO_DEFAULT}};
  dpshim__vit_t *v = dpshim__vit_new(&cfg, NULL);
  images_t im;
  draw(&im, 1, 0, 0, 0);
  im.count = im.count ? im.count : 1;
  draw(&im, 7, 0, 0, 0);
  vit_input_t in = input_of(&im);
  float emb[MAXEMB], g[MAXEMB] = {0};
  int64_t params[NPARAMS] = {0};
  adapter_t a = {vit, &in, emb, params};
  dpshim_encoder_t enc = {&a, a_forward, a_backward, a_release};
  dpshim_encoder_call_t call = describe(&im, emb);
  uint64_t key;
  dpshim__vit_report_t rep;
  cr_assert_eq(dpshim__vit_forward(v, &enc, &call, 0, &key, &rep), 0);
  cr_assert_eq(dpshim__vit_backward(v, &enc, key + 1, g, NULL, &rep),
               DPSHIM_EINVAL);
  cr_assert(strstr(rep.message, "not in flight"), "%s", rep.message);
  cr_assert_eq(dpshim__vit_wait(v, &enc, key + 1, &rep), DPSHIM_EINVAL);
  cr_assert(strstr(rep.message, "not in flight"), "%s", rep.message);
  cr_assert_eq(dpshim__vit_wait(v, &enc, key, &rep), 0,
               "nothing on its way: done at once");
  cr_assert_eq(dpshim__vit_backward(v, &enc, key, g, NULL, &rep), 0);
  cr_assert_eq(dpshim__vit_backward(v, &enc, key, g, NULL, &rep),
               DPSHIM_EINVAL, "a forward is backed once");
  dpshim__vit_free(v);
  vit_close(vit);
}

/* A collective of the balance fails (as an MPI error returned): every
 * rank's later ones fail too; every call then runs where it was made, the
 * moved forwards' backwards too, and nothing is lost or hangs. */
Test(shim_vit, a_failing_collective_turns_the_balance_off_without_loss) {
  /* plain, async (a failed return is encoded again at the wait), shipped
   * (a failed ship's exchange shows at its forward) */
  for (int mode = 0; mode < 3; mode++) {
    int faulted = 0;
    for (int call = 0; call < 16; call++) {
      scenario_t *s = new_scenario(4, 4);
      s->afab = 1;
      s->micro = MAXM;
      s->async = mode == 1;
      s->ship = mode == 2 ? 2 : 0;
      mock_stats_t stats;
      run_and_check(s, &stats, 1, call);
      faulted += stats.faulted;
      if (stats.faulted)
        for (int r = 0; r < 4; r++)
          cr_assert(s->off_at_end[r], "mode %d call %d rank %d", mode, call,
                    r);
      free(s);
    }
    cr_assert_gt(faulted, 8, "mode %d: the faults fired", mode);
  }
}

/* ---- shipped forwards -------------------------------------------------------- */

/* Each call shipped before its forward (as at a hand-off), or every
 * micro-batch's before the first forward (a loader running ahead): the
 * outputs are exact, every forward takes its ship, and a forward meets
 * for its header and the embeddings' return only: the group's images are
 * gathered once per micro-batch (at the ship) and the inputs go in the
 * ship's one exchange. */
Test(shim_vit, shipped_forwards_meet_once_and_stay_exact) {
  int applied = 0;
  for (int ahead = 0; ahead <= 1; ahead++)
    for (uint64_t seed = 1; seed <= 6; seed++) {
      scenario_t *s = new_scenario(4, seed);
      s->ship = ahead ? 2 : 1;
      s->micro = MAXM;
      s->afab = ahead;
      mock_stats_t stats;
      run_and_check(s, &stats, -1, 0);
      for (int r = 0; r < 4; r++) {
        cr_assert_eq(s->message[r][0], 0, "rank %d: %s", r, s->message[r]);
        cr_assert_eq(s->shipped[r], MAXM, "seed %d rank %d: %d of %d "
                     "forwards took their ship", (int)seed, r, s->shipped[r],
                     MAXM);
      }
      int back = s->backs_moved[0], fwd = s->applied[0] - back;
      cr_assert_eq(stats.ops[MOCK_ALLGATHERV], MAXM,
                   "one images' gather per micro-batch, not %ld",
                   stats.ops[MOCK_ALLGATHERV]);
      cr_assert_eq(stats.ops[MOCK_ALLTOALLV_PARTS], 2 * fwd + 2 * back);
      applied += fwd;
      free(s);
    }
  cr_assert_gt(applied, 6, "shipped forwards moved images (%d)", applied);
}

/* A rank whose forwards' rows differ from what it shipped: every rank
 * plans those forwards again, and the outputs are still exact. */
Test(shim_vit, a_call_that_differs_from_its_ship_is_planned_again) {
  int again = 0;
  for (uint64_t seed = 1; seed <= 8; seed++) {
    scenario_t *s = new_scenario(4, seed);
    s->ship = 1;
    s->micro = MAXM;
    s->change_rank = 2;
    run_and_check(s, NULL, -1, 0);
    for (int r = 0; r < 4; r++) {
      cr_assert_eq(s->message[r][0], 0, "rank %d: %s", r, s->message[r]);
      cr_assert_eq(s->shipped[r], s->shipped[0], "every rank decides alike");
    }
    again += MAXM - s->shipped[0];
    free(s);
  }
  cr_assert_gt(again, 0, "rank 2's changed rows were never sent away");
}

/* Nothing is shipped where the forward would not meet: calls kept apart,
 * or the group still warming up. */
Test(shim_vit, nothing_is_shipped_apart_or_warming_up) {
  for (int ready = 0; ready <= 1; ready++) {
    scenario_t *s = new_scenario(4, 3);
    s->ship = 1;
    s->micro = MAXM;
    s->ready = ready;
    s->apart = ready ? 1u << 1 : 0; /* micro-batch 1 apart */
    run_and_check(s, NULL, -1, 0);
    cr_assert_eq(s->shipped[0], ready ? MAXM - 1 : 0);
    free(s);
  }
}

/* One rank's extra forward meets the others' ship: out of step, the
 * shipped forwards dropped everywhere, every output exact, no hang. */
Test(shim_vit, a_forward_beside_a_ship_puts_ranks_out_of_step) {
  for (uint64_t seed = 1; seed <= 4; seed++) {
    scenario_t *s = new_scenario(4, seed);
    s->ship = 2;
    s->afab = 1;
    s->micro = MAXM;
    s->extra_rank = 1;
    mock_stats_t stats;
    run_and_check(s, &stats, -1, 0);
    for (int r = 0; r < 4; r++) {
      cr_assert(s->out_of_step[r], "rank %d saw it", r);
      cr_assert_eq(s->shipped[r], 0);
    }
    cr_assert_eq(stats.mismatch, 0);
    free(s);
  }
}

/* ---- async forwards ------------------------------------------------------------ */

/* An async forward returns with this rank's own encodings written and the
 * others' still on their way (some output not yet written where images
 * moved); after the wait (each micro-batch's right after its forward, or
 * all of afab's after the last forward) every output is exact, shipped
 * forwards too. A forward that is not async writes everything before it
 * returns. */
Test(shim_vit, async_forwards_return_later_and_stay_exact) {
  for (int async = 0; async <= 1; async++) {
    long unwritten = 0;
    int applied = 0;
    for (int mode = 0; mode < 3; mode++) /* 1f1b, afab, afab shipped */
      for (uint64_t seed = 1; seed <= 6; seed++) {
        scenario_t *s = new_scenario(4, seed);
        s->micro = MAXM;
        s->afab = mode > 0;
        s->ship = mode == 2 ? 2 : 0;
        s->async = async;
        run_and_check(s, NULL, -1, 0);
        for (int r = 0; r < 4; r++) {
          cr_assert_eq(s->message[r][0], 0, "rank %d: %s", r, s->message[r]);
          unwritten += s->unwritten[r];
        }
        applied += s->applied[0];
        free(s);
      }
    cr_assert_gt(applied, 10, "images moved (%d forwards)", applied);
    if (async)
      cr_assert_gt(unwritten, 0, "async returns were all complete at once");
    else
      cr_assert_eq(unwritten, 0, "a forward returned before its output");
  }
}
