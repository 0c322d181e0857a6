/* Random length mixes; see lengthmix.h for the family's rules. */
#include "lengthmix.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

#include "mix.h"

#define PACK_LOG2_MIN 14 /* 16K tokens */
#define PACK_LOG2_MAX 18 /* 256K tokens */
#define LOGNORMAL_MEDIAN_MIN 64.0
#define LOGNORMAL_SIGMA_MIN 0.3
#define LOGNORMAL_SIGMA_MAX 1.8
#define POINT_MIN 16.0

static double uniform_in(lengthgen_rng_t *rng, double lo, double hi) {
  return lo + (hi - lo) * lengthgen_uniform(rng);
}

static double log_uniform_in(lengthgen_rng_t *rng, double lo, double hi) {
  return exp(uniform_in(rng, log(lo), log(hi)));
}

static int64_t clamp_len(double x, int64_t pack) {
  if (!(x >= 1.0)) return 1;
  if (x >= (double)pack) return pack;
  return (int64_t)x;
}

/* Thresholds on one uniform draw: log-normal 1/2, uniform 3/10, point 1/5. */
static lengthmix_kind_t draw_kind(lengthgen_rng_t *rng) {
  double u = lengthgen_uniform(rng);
  if (u < 0.5) return LENGTHMIX_LOGNORMAL;
  return u < 0.8 ? LENGTHMIX_UNIFORM : LENGTHMIX_POINT;
}

static void draw_component(lengthgen_rng_t *rng, int64_t pack,
                           lengthmix_component_t *c) {
  double p = (double)pack;
  *c = (lengthmix_component_t){.kind = draw_kind(rng)};
  switch (c->kind) {
  case LENGTHMIX_LOGNORMAL:
    c->median = round(log_uniform_in(rng, LOGNORMAL_MEDIAN_MIN, p / 4));
    c->sigma = uniform_in(rng, LOGNORMAL_SIGMA_MIN, LOGNORMAL_SIGMA_MAX);
    break;
  case LENGTHMIX_UNIFORM:
    c->lo = clamp_len(round(uniform_in(rng, p / 16, p / 2)), pack);
    c->hi = clamp_len(round(uniform_in(rng, (double)c->lo, p)), pack);
    break;
  case LENGTHMIX_POINT:
    c->lo = c->hi = clamp_len(round(log_uniform_in(rng, POINT_MIN, p)), pack);
    break;
  }
}

/* A flat Dirichlet: exponential draws, normalised. 1 - u keeps log() off 0. */
static void draw_weights(lengthgen_rng_t *rng, lengthmix_t *mix) {
  double sum = 0;
  for (int k = 0; k < mix->ncomponents; k++) {
    mix->component[k].weight = -log(1.0 - lengthgen_uniform(rng));
    sum += mix->component[k].weight;
  }
  for (int k = 0; k < mix->ncomponents; k++)
    mix->component[k].weight = sum > 0 ? mix->component[k].weight / sum
                                       : 1.0 / mix->ncomponents;
}

/* The stream is keyed by (seed, index) alone, so mix 7 is the same mix
 * whether 10 or 50 were asked for. */
void lengthmix_make(uint64_t seed, int32_t index, lengthmix_t *mix) {
  lengthgen_rng_t rng;
  lengthgen_seed(&rng, dpshim__tool_mix64(seed ^ 0x6c656e6d6978ull) ^
                           (uint64_t)(uint32_t)index);
  *mix = (lengthmix_t){.seed = seed, .index = index};
  int span = PACK_LOG2_MAX - PACK_LOG2_MIN + 1;
  mix->pack = INT64_C(1) << (PACK_LOG2_MIN + (int)lengthgen_below(&rng, (uint64_t)span));
  mix->ncomponents = 1 + (int)lengthgen_below(&rng, LENGTHMIX_MAX_COMPONENTS);
  for (int k = 0; k < mix->ncomponents; k++)
    draw_component(&rng, mix->pack, &mix->component[k]);
  draw_weights(&rng, mix);
}

void lengthmix_rescale(lengthmix_t *mix, int64_t pack) {
  double f = (double)pack / (double)mix->pack;
  for (int k = 0; k < mix->ncomponents; k++) {
    lengthmix_component_t *c = &mix->component[k];
    c->median = fmax(1.0, round(c->median * f));
    c->lo = clamp_len(round((double)c->lo * f), pack);
    c->hi = clamp_len(round((double)c->hi * f), pack);
  }
  mix->pack = pack;
}

/* The last component takes what rounding leaves of the unit interval. */
static int pick_component(const lengthmix_t *mix, lengthgen_rng_t *rng) {
  double u = lengthgen_uniform(rng), acc = 0;
  for (int k = 0; k < mix->ncomponents - 1; k++) {
    acc += mix->component[k].weight;
    if (u < acc) return k;
  }
  return mix->ncomponents - 1;
}

int64_t lengthmix_draw(const lengthmix_t *mix, lengthgen_rng_t *rng,
                       int *component) {
  int k = pick_component(mix, rng);
  const lengthmix_component_t *c = &mix->component[k];
  if (component) *component = k;
  switch (c->kind) {
  case LENGTHMIX_LOGNORMAL:
    return lengthgen_lognormal(rng, c->median, c->sigma, mix->pack);
  case LENGTHMIX_UNIFORM:
    return c->lo + (int64_t)lengthgen_below(rng, (uint64_t)(c->hi - c->lo + 1));
  case LENGTHMIX_POINT:
    break;
  }
  return c->lo;
}

static int64_t draw_for_source(const void *ctx, lengthgen_rng_t *rng) {
  return lengthmix_draw(ctx, rng, NULL);
}

lengthgen_source_t lengthmix_source(const lengthmix_t *mix) {
  return (lengthgen_source_t){.pack = mix->pack, .max = mix->pack,
                              .draw = draw_for_source, .draw_ctx = mix};
}

const char *lengthmix_kind_name(lengthmix_kind_t kind) {
  switch (kind) {
  case LENGTHMIX_LOGNORMAL: return "lognormal";
  case LENGTHMIX_UNIFORM: return "uniform";
  case LENGTHMIX_POINT: return "point";
  }
  return "?";
}

/* snprintf into what is left of buf; `used` counts what would have been
 * written, as snprintf does, so an overflow shows in the total. */
typedef struct text {
  char *buf;
  size_t len, used;
  int failed;
} text_t;

static void put(text_t *t, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  size_t room = t->used < t->len ? t->len - t->used : 0;
  int w = vsnprintf(room ? t->buf + t->used : NULL, room, fmt, ap);
  va_end(ap);
  if (w < 0) t->failed = 1;
  else t->used += (size_t)w;
}

static void describe_component(text_t *t, const lengthmix_component_t *c) {
  put(t, "{\"kind\":\"%s\",\"weight\":%.6g", lengthmix_kind_name(c->kind),
      c->weight);
  if (c->kind == LENGTHMIX_LOGNORMAL)
    put(t, ",\"median\":%.0f,\"sigma\":%.6g}", c->median, c->sigma);
  else if (c->kind == LENGTHMIX_UNIFORM)
    put(t, ",\"lo\":%lld,\"hi\":%lld}", (long long)c->lo, (long long)c->hi);
  else put(t, ",\"len\":%lld}", (long long)c->lo);
}

int lengthmix_describe(const lengthmix_t *mix, const char *name, char *buf,
                       size_t len) {
  text_t t = {.buf = buf, .len = len};
  if (len) buf[0] = '\0';
  put(&t, "{\"mix\":\"%s\",\"mix_seed\":%llu,\"index\":%d,\"pack\":%lld,"
      "\"components\":[", name, (unsigned long long)mix->seed, mix->index,
      (long long)mix->pack);
  for (int k = 0; k < mix->ncomponents; k++) {
    if (k) put(&t, ",");
    describe_component(&t, &mix->component[k]);
  }
  put(&t, "]}");
  return t.failed ? -1 : (int)t.used;
}
