/* The encoder's entry points; see include/dpshim/encoder.h. Every call
 * goes through the state's one dpshim__vit_t, one at a time: balanced over
 * the DP group while the ViT balance is on, else where it is made. */
#include "dpshim/encoder.h"
#include "shim.h"

dpshim__vit_t *dpshim__vit_of(dpshim__state_t *st) {
  if (!st->vit) {
    dpshim__vit_config_t cfg = {{.algo = DPSHIM_ALGO_DEFAULT}, NULL};
    st->vit = dpshim__vit_new(&cfg, NULL);
  }
  return st->vit;
}

/* Whether this call is balanced. From a thread other than MPI_Init's the
 * shim's collectives need MPI_THREAD_MULTIPLE; without it the balance
 * stops, said once, but for a ship, which is then not made (its forward
 * plans as it would have): a loader thread's ships need not cost the
 * balance. Every rank's trainer calls from alike threads, so every rank
 * decides alike at the same call. */
static int balanced(dpshim__state_t *st, dpshim__vit_kind_t kind) {
  if (!st->vit_on || st->finalized) return 0;
  if (pthread_equal(pthread_self(), st->init_thread) ||
      st->mpi_provided >= MPI_THREAD_MULTIPLE)
    return 1;
  if (kind == DPSHIM__VIT_SHIP) {
    if (st->world_rank == 0 && !st->said_ship_thread++)
      dpshim__say("dpshim_encoder_ship() was called from a thread other "
                  "than MPI_Init's, without MPI_THREAD_MULTIPLE (set "
                  "DPSHIM_LOADER_THREAD=1 for it): nothing is shipped, the "
                  "forwards are balanced as before");
    return 0;
  }
  st->vit_on = 0;
  dpshim__vit_attach(st->vit, NULL);
  if (st->world_rank == 0 && !st->said_vit_thread++)
    dpshim__say("the vision encoder was called from a thread other than "
                "MPI_Init's, without MPI_THREAD_MULTIPLE: ViT balancing is "
                "off");
  return 0;
}

/* The model settled by the warm-up fit, once the core has it. */
static void sync_model(dpshim__state_t *st, dpshim__vit_t *v) {
  dpshim_cost_model_t model;
  if (!dpshim__vit_ready(v) && dpshim__core_vit_model(&st->core, &model))
    dpshim__vit_set_model(v, model);
}

static int complete(const dpshim_encoder_t *enc) {
  return enc && enc->forward && enc->backward && enc->release;
}

/* Runs `op` on the state's encoder object: through the core's accounting
 * when balanced. */
typedef struct encoder_op {
  dpshim__vit_kind_t kind;
  int async;
  const dpshim_encoder_t *enc;
  const dpshim_encoder_call_t *call;
  uint64_t key, *key_out;
  const void *out_grad;
  void *in_grad;
} encoder_op_t;

static int run_op(dpshim__vit_t *v, const encoder_op_t *op,
                  dpshim__vit_report_t *rep) {
  switch (op->kind) {
    case DPSHIM__VIT_FORWARD:
      return dpshim__vit_forward(v, op->enc, op->call, op->async, op->key_out,
                                 rep);
    case DPSHIM__VIT_WAIT:
      return dpshim__vit_wait(v, op->enc, op->key, rep);
    case DPSHIM__VIT_BACKWARD:
      return dpshim__vit_backward(v, op->enc, op->key, op->out_grad,
                                  op->in_grad, rep);
    case DPSHIM__VIT_RELEASE:
      dpshim__vit_release(v, op->enc, op->key, rep);
      return 0;
    case DPSHIM__VIT_SHIP:
      return dpshim__vit_ship(v, op->call, rep);
    default:
      dpshim__vit_checkpoint(v, op->kind, rep);
      return 0;
  }
}

static int encoder_call(const encoder_op_t *op) {
  dpshim__state_t *st = &dpshim__state;
  pthread_mutex_lock(&st->encoder_lock);
  dpshim__vit_t *v = dpshim__vit_of(st);
  int rc = DPSHIM_ENOMEM, grouped = v && balanced(st, op->kind);
  if (v && op->kind == DPSHIM__VIT_SHIP && !grouped) {
    rc = 0; /* nothing to ship where the forward will not meet */
  } else if (v) {
    if (grouped) sync_model(st, v);
    double t0 = grouped ? dpshim__now() : 0;
    dpshim__vit_report_t rep;
    rc = run_op(v, op, &rep);
    rep.ahead = op->kind == DPSHIM__VIT_SHIP &&
                !pthread_equal(pthread_self(), st->forward_thread);
    if (op->kind == DPSHIM__VIT_FORWARD) st->forward_thread = pthread_self();
    if (grouped) dpshim__core_vit_call(&st->core, &rep, dpshim__now() - t0);
    else if (rep.message[0]) dpshim__say(rep.message);
  }
  pthread_mutex_unlock(&st->encoder_lock);
  return rc;
}

void dpshim__vit_gate(int apart) {
  dpshim__state_t *st = &dpshim__state;
  if (!st->vit_on) return;
  pthread_mutex_lock(&st->encoder_lock);
  dpshim__vit_t *v = dpshim__vit_of(st);
  if (v) dpshim__vit_set_apart(v, apart);
  pthread_mutex_unlock(&st->encoder_lock);
}

int32_t dpshim__vit_moved(void) {
  dpshim__state_t *st = &dpshim__state;
  if (!st->vit_on) return 0;
  pthread_mutex_lock(&st->encoder_lock);
  dpshim__vit_t *v = dpshim__vit_of(st);
  int32_t n = v ? dpshim__vit_moved_in_flight(v) : 0;
  pthread_mutex_unlock(&st->encoder_lock);
  return n;
}

void dpshim__vit_point(dpshim__vit_kind_t kind) {
  encoder_op_t op = {.kind = kind};
  if (dpshim__state.vit_on) encoder_call(&op);
}

static int forward(const dpshim_encoder_t *enc,
                   const dpshim_encoder_call_t *call, int async,
                   uint64_t *key) {
  if (!key) return DPSHIM_EINVAL;
  *key = 0;
  if (!complete(enc)) return DPSHIM_EINVAL;
  encoder_op_t op = {.kind = DPSHIM__VIT_FORWARD, .async = async,
                     .enc = enc, .call = call, .key_out = key};
  return encoder_call(&op);
}

DPSHIM_EXTERN int dpshim_encoder_forward(const dpshim_encoder_t *enc,
                                         const dpshim_encoder_call_t *call,
                                         uint64_t *key) {
  return forward(enc, call, 0, key);
}

DPSHIM_EXTERN int dpshim_encoder_forward_async(
    const dpshim_encoder_t *enc, const dpshim_encoder_call_t *call,
    uint64_t *key) {
  return forward(enc, call, 1, key);
}

DPSHIM_EXTERN int dpshim_encoder_wait(const dpshim_encoder_t *enc,
                                      uint64_t key) {
  if (!complete(enc)) return DPSHIM_EINVAL;
  encoder_op_t op = {.kind = DPSHIM__VIT_WAIT, .enc = enc, .key = key};
  return encoder_call(&op);
}

DPSHIM_EXTERN int dpshim_encoder_ship(const dpshim_encoder_call_t *call) {
  encoder_op_t op = {.kind = DPSHIM__VIT_SHIP, .call = call};
  return encoder_call(&op);
}

DPSHIM_EXTERN int dpshim_encoder_backward(const dpshim_encoder_t *enc,
                                          uint64_t key, const void *out_grad,
                                          void *in_grad) {
  if (!complete(enc)) return DPSHIM_EINVAL;
  encoder_op_t op = {.kind = DPSHIM__VIT_BACKWARD, .enc = enc, .key = key,
                     .out_grad = out_grad, .in_grad = in_grad};
  return encoder_call(&op);
}

DPSHIM_EXTERN void dpshim_encoder_release(const dpshim_encoder_t *enc,
                                          uint64_t key) {
  if (!complete(enc)) return;
  encoder_op_t op = {.kind = DPSHIM__VIT_RELEASE, .enc = enc, .key = key};
  encoder_call(&op);
}
