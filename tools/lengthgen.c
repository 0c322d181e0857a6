/* Synthetic sample lengths and first-fit packing; see lengthgen.h. */
#include "lengthgen.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- random numbers ------------------------------------------------------ */

static uint64_t splitmix64(uint64_t *x) {
  uint64_t z = (*x += 0x9E3779B97F4A7C15u);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
  return z ^ (z >> 31);
}

/* splitmix64 spreads even small, similar seeds over the whole state and never
 * yields the all-zero state xoshiro cannot leave. */
void lengthgen_seed(lengthgen_rng_t *rng, uint64_t seed) {
  for (int k = 0; k < 4; k++) rng->s[k] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t lengthgen_next(lengthgen_rng_t *rng) {
  uint64_t *s = rng->s;
  uint64_t result = rotl(s[1] * 5, 7) * 9;
  uint64_t t = s[1] << 17;
  s[2] ^= s[0];
  s[3] ^= s[1];
  s[1] ^= s[2];
  s[0] ^= s[3];
  s[2] ^= t;
  s[3] = rotl(s[3], 45);
  return result;
}

double lengthgen_uniform(lengthgen_rng_t *rng) {
  return (double)(lengthgen_next(rng) >> 11) * 0x1p-53;
}

/* Rejects the top partial block so every residue is equally likely. */
uint64_t lengthgen_below(lengthgen_rng_t *rng, uint64_t n) {
  uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do x = lengthgen_next(rng);
  while (x >= limit);
  return x % n;
}

/* Box-Muller, one variate per call: a cached spare would make the stream
 * depend on how calls interleave with other draws. 1 - u keeps log() off 0. */
double lengthgen_normal(lengthgen_rng_t *rng) {
  double u1 = 1.0 - lengthgen_uniform(rng);
  double u2 = lengthgen_uniform(rng);
  return sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
}

int64_t lengthgen_lognormal(lengthgen_rng_t *rng, double median, double sigma,
                            int64_t max) {
  double x = round(median * exp(sigma * lengthgen_normal(rng)));
  /* Compare as doubles before converting: x can exceed int64_t. */
  if (!(x >= 1.0)) return 1;
  if (x >= (double)max) return max;
  return (int64_t)x;
}

/* ---- profiles ------------------------------------------------------------ */

static const lengthgen_profile_t profiles[] = {
    {"sft", 32768, 650.0, 1.2, 16384},
    {"long", 131072, 1800.0, 1.5, 65536},
    {"fewlong", 32768, 1800.0, 1.0, 32768},
};
#define NPROFILES (sizeof profiles / sizeof profiles[0])

void lengthgen_profile_names(char *buf, size_t len) {
  size_t used = 0;
  if (len) buf[0] = '\0';
  for (size_t k = 0; k < NPROFILES && used < len; k++) {
    int w = snprintf(buf + used, len - used, "%s%s", k ? ", " : "",
                     profiles[k].name);
    if (w < 0) return;
    used += (size_t)w;
  }
}

const lengthgen_profile_t *lengthgen_profile_find(const char *name, char *err,
                                                  size_t errlen) {
  for (size_t k = 0; name && k < NPROFILES; k++)
    if (strcmp(name, profiles[k].name) == 0) return &profiles[k];
  char names[128];
  lengthgen_profile_names(names, sizeof names);
  snprintf(err, errlen, "unknown profile '%s': expected one of %s",
           name ? name : "(null)", names);
  return NULL;
}

/* ---- lengths files ------------------------------------------------------- */

static int is_blank(const char *s) {
  while (*s == ' ' || *s == '\t' || *s == '\r' || *s == '\n') s++;
  return *s == '\0';
}

/* Strips the comment and the newline; returns 1 for a length, 0 for a line
 * with none, -1 for bad text. */
static int parse_line(char *line, int64_t *value) {
  char *hash = strchr(line, '#');
  if (hash) *hash = '\0';
  line[strcspn(line, "\r\n")] = '\0';
  if (is_blank(line)) return 0;
  char *end;
  errno = 0;
  long long v = strtoll(line, &end, 10);
  if (end == line || errno == ERANGE || v <= 0 || !is_blank(end)) return -1;
  *value = (int64_t)v;
  return 1;
}

static int push_len(lengthgen_file_t *f, size_t *cap, int64_t v) {
  if (f->n == *cap) {
    size_t ncap = *cap ? 2 * *cap : 1024;
    int64_t *p = realloc(f->lens, ncap * sizeof *p);
    if (!p) return -1;
    f->lens = p;
    *cap = ncap;
  }
  f->lens[f->n++] = v;
  return 0;
}

/* Reads every line; *err is set on the first failure. */
static int read_lengths(FILE *fp, const char *path, lengthgen_file_t *out,
                        char *err, size_t errlen) {
  char *line = NULL;
  size_t linecap = 0, cap = 0;
  long lineno = 0;
  int rc = 0;
  while (rc == 0 && getline(&line, &linecap, fp) >= 0) {
    lineno++;
    int64_t v;
    int kind = parse_line(line, &v);
    if (kind < 0) {
      snprintf(err, errlen, "%s:%ld: bad length '%.60s': expected a positive "
               "integer", path, lineno, line);
      rc = -1;
    } else if (kind > 0 && push_len(out, &cap, v) < 0) {
      snprintf(err, errlen, "%s:%ld: out of memory", path, lineno);
      rc = -1;
    }
  }
  if (rc == 0 && ferror(fp)) {
    snprintf(err, errlen, "%s: read error: %s", path, strerror(errno));
    rc = -1;
  }
  free(line);
  return rc;
}

int lengthgen_file_load(const char *path, lengthgen_file_t *out, char *err,
                        size_t errlen) {
  *out = (lengthgen_file_t){0};
  FILE *fp = fopen(path, "r");
  if (!fp) {
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    return -1;
  }
  int rc = read_lengths(fp, path, out, err, errlen);
  fclose(fp);
  if (rc == 0 && out->n == 0) {
    snprintf(err, errlen, "%s: no lengths in the file", path);
    rc = -1;
  }
  if (rc < 0) lengthgen_file_free(out);
  return rc;
}

void lengthgen_file_free(lengthgen_file_t *f) {
  free(f->lens);
  *f = (lengthgen_file_t){0};
}

/* ---- sources ------------------------------------------------------------- */

lengthgen_source_t lengthgen_source_profile(const lengthgen_profile_t *p) {
  return (lengthgen_source_t){
      .pack = p->pack, .median = p->median, .sigma = p->sigma, .max = p->max};
}

lengthgen_source_t lengthgen_source_file(const lengthgen_file_t *f,
                                         int64_t pack) {
  return (lengthgen_source_t){
      .pack = pack, .max = pack, .table = f->lens, .ntable = f->n};
}

int64_t lengthgen_draw(const lengthgen_source_t *src, lengthgen_rng_t *rng) {
  int64_t len;
  if (src->draw) len = src->draw(src->draw_ctx, rng);
  else if (src->table) len = src->table[lengthgen_below(rng, src->ntable)];
  else len = lengthgen_lognormal(rng, src->median, src->sigma, src->max);
  if (len < 1) return 1;
  return len < src->pack ? len : src->pack;
}

/* ---- first-fit packing --------------------------------------------------- */

/* Max remaining room over packs: node k covers children 2k and 2k+1, leaves
 * start at `size`; leaves past the last pack hold 0, which no sample fits. */
typedef struct room_tree {
  int64_t *room;
  int32_t size;
} room_tree_t;

static int tree_init(room_tree_t *t, int32_t packs, int64_t pack) {
  t->size = 1;
  while (t->size < packs) t->size *= 2;
  t->room = calloc(2 * (size_t)t->size, sizeof *t->room);
  if (!t->room) return -1;
  for (int32_t k = 0; k < packs; k++) t->room[t->size + k] = pack;
  for (int32_t k = t->size - 1; k >= 1; k--)
    t->room[k] = t->room[2 * k] > t->room[2 * k + 1] ? t->room[2 * k]
                                                     : t->room[2 * k + 1];
  return 0;
}

/* The lowest pack with room >= len, or -1. Going left whenever the left
 * subtree has room is what makes this first-fit rather than any-fit. */
static int32_t tree_first_fit(const room_tree_t *t, int64_t len) {
  if (t->room[1] < len) return -1;
  int32_t k = 1;
  while (k < t->size) k = t->room[2 * k] >= len ? 2 * k : 2 * k + 1;
  return k - t->size;
}

static void tree_take(room_tree_t *t, int32_t pack, int64_t len) {
  int32_t k = t->size + pack;
  t->room[k] -= len;
  for (k /= 2; k >= 1; k /= 2)
    t->room[k] = t->room[2 * k] > t->room[2 * k + 1] ? t->room[2 * k]
                                                     : t->room[2 * k + 1];
}

/* A growable stream of (len, pack) in draw order. */
typedef struct stream {
  int64_t *len;
  int32_t *pack;
  int64_t n, cap;
} stream_t;

static int stream_push(stream_t *s, int64_t len, int32_t pack) {
  if (s->n == s->cap) {
    int64_t ncap = s->cap ? 2 * s->cap : 4096;
    int64_t *l = realloc(s->len, (size_t)ncap * sizeof *l);
    if (l) s->len = l;
    int32_t *p = realloc(s->pack, (size_t)ncap * sizeof *p);
    if (p) s->pack = p;
    if (!l || !p) return -1;
    s->cap = ncap;
  }
  s->len[s->n] = len;
  s->pack[s->n++] = pack;
  return 0;
}

/* Consecutive misses before the loader gives up on the current batch. */
#define LENGTHGEN_MAX_MISSES 64

/* With a per-pack sample limit, a pack that reaches it is closed: its room
 * drops to 0, which no sample fits, so first-fit passes over it. */
static void close_if_full(const lengthgen_source_t *src, room_tree_t *t,
                          int64_t *count, int32_t pack) {
  if (!count || ++count[pack] < src->max_per_pack) return;
  tree_take(t, pack, t->room[t->size + pack]);
}

static int fill_stream(const lengthgen_source_t *src, room_tree_t *t,
                       int64_t *count, lengthgen_rng_t *rng, stream_t *s) {
  for (int misses = 0; misses < LENGTHGEN_MAX_MISSES;) {
    int64_t len = lengthgen_draw(src, rng);
    int32_t pack = tree_first_fit(t, len);
    if (pack < 0) {
      misses++;
      continue;
    }
    misses = 0;
    tree_take(t, pack, len);
    if (stream_push(s, len, pack) < 0) return -1;
    close_if_full(src, t, count, pack);
  }
  return 0;
}

static int batch_reserve(lengthgen_batch_t *b, int64_t n) {
  if (n <= b->cap_) return 0;
  int64_t *l = realloc(b->len, (size_t)n * sizeof *l);
  if (l) b->len = l;
  int32_t *o = realloc(b->origin, (size_t)n * sizeof *o);
  if (o) b->origin = o;
  if (!l || !o) return -1;
  b->cap_ = n;
  return 0;
}

/* Counting sort by pack, stable, so the batch reads like the per-rank lists
 * the shim gathers. Fails if a pack is empty, which cannot happen: every
 * length is <= pack size, so an empty pack accepts any sample. */
static int group_by_pack(const stream_t *s, int32_t packs,
                         lengthgen_batch_t *out) {
  int64_t *start = calloc((size_t)packs + 1, sizeof *start);
  if (!start || batch_reserve(out, s->n) < 0) {
    free(start);
    return -1;
  }
  for (int64_t i = 0; i < s->n; i++) start[s->pack[i] + 1]++;
  int empty = 0;
  for (int32_t p = 0; p < packs; p++) {
    empty |= start[p + 1] == 0;
    start[p + 1] += start[p];
  }
  for (int64_t i = 0; i < s->n; i++) {
    int64_t at = start[s->pack[i]]++;
    out->len[at] = s->len[i];
    out->origin[at] = s->pack[i];
  }
  out->n = s->n;
  free(start);
  return empty ? -1 : 0;
}

int lengthgen_pack(const lengthgen_source_t *src, int32_t packs,
                   lengthgen_rng_t *rng, lengthgen_batch_t *out) {
  /* The tree size doubles up to packs: keep it within int32_t. */
  if (packs < 1 || packs > (INT32_C(1) << 30) || src->pack < 1) return -1;
  room_tree_t tree;
  if (tree_init(&tree, packs, src->pack) < 0) return -1;
  int64_t *count = NULL;
  if (src->max_per_pack > 0 &&
      !(count = calloc((size_t)packs, sizeof *count))) {
    free(tree.room);
    return -1;
  }
  stream_t s = {0};
  int rc = fill_stream(src, &tree, count, rng, &s);
  if (rc == 0) rc = group_by_pack(&s, packs, out);
  free(count);
  free(tree.room);
  free(s.len);
  free(s.pack);
  return rc;
}

void lengthgen_batch_free(lengthgen_batch_t *b) {
  free(b->len);
  free(b->origin);
  *b = (lengthgen_batch_t){0};
}
