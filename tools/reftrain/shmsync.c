/* reftrain --sync shm; see shmsync.h.
 *
 * One segment holds a barrier, one slot of n floats per rank and a result
 * of n floats. A sum: every rank copies its gradient into its slot; barrier;
 * each rank adds up its own share of the elements over all slots, in rank
 * order, into the result; barrier; every rank copies the result out. The
 * next sum's first barrier keeps anyone from overwriting the result before
 * all have copied it, and the second keeps the slots until all have read
 * them: two barriers a step, nothing else to coordinate. */
#include "shmsync.h"

#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "agree.h"

#define WHY_LEN 256
#define NAME_LEN 64
/* Slots start on their own cache lines: ranks write them concurrently. */
#define LINE_FLOATS 16

typedef struct header {
  pthread_barrier_t barrier;
} header_t;

struct rt_shm {
  int rank, world;
  int64_t n, stride; /* floats a rank, and between slots (n rounded up) */
  void *base;
  size_t bytes;
};

/* ---- the segment's layout ------------------------------------------------ */

static size_t header_bytes(void) {
  size_t line = LINE_FLOATS * sizeof(float);
  return (sizeof(header_t) + line - 1) / line * line;
}

static header_t *header(const rt_shm_t *s) { return s->base; }

/* Slot r of rank r; slot `world` is the result. */
static float *slot(const rt_shm_t *s, int r) {
  return (float *)((char *)s->base + header_bytes()) + (int64_t)r * s->stride;
}

static void wait_all(rt_shm_t *s) {
  int rc = pthread_barrier_wait(&header(s)->barrier);
  if (rc != 0 && rc != PTHREAD_BARRIER_SERIAL_THREAD) {
    fprintf(stderr, "reftrain: --sync shm: barrier: %s\n", strerror(rc));
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
}

/* ---- the sum ------------------------------------------------------------- */

void rt_shm_sum(rt_shm_t *s, float *grad) {
  int64_t n = s->n, lo = n * s->rank / s->world,
          hi = n * (s->rank + 1) / s->world;
  memcpy(slot(s, s->rank), grad, (size_t)n * sizeof *grad);
  wait_all(s);
  /* Rank by rank over the share: every element still sees the same order
   * of additions, slot 0 first, whichever rank computes it. */
  float *out = slot(s, s->world);
  memcpy(out + lo, slot(s, 0) + lo, (size_t)(hi - lo) * sizeof *out);
  for (int r = 1; r < s->world; r++) {
    const float *in = slot(s, r);
    for (int64_t i = lo; i < hi; i++) out[i] += in[i];
  }
  wait_all(s);
  memcpy(grad, out, (size_t)n * sizeof *grad);
}

/* ---- set-up -------------------------------------------------------------- */

/* 1 when every rank shares this host's memory; else 0, with why. The
 * verdict is the same on every rank: one host holds all ranks, or none
 * does. */
static int one_host(const rt_shm_t *s, char *why) {
  MPI_Comm node;
  int here = 0;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, s->rank,
                      MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &here);
  MPI_Comm_free(&node);
  if (here == s->world) return 1;
  snprintf(why, WHY_LEN, "--sync shm needs every rank on one host; this "
           "host has %d of the %d ranks", here, s->world);
  return 0;
}

static int fail(char *why, const char *what, const char *name, int err) {
  snprintf(why, WHY_LEN, "--sync shm: %s %s: %s", what, name, strerror(err));
  return 0;
}

static int map(rt_shm_t *s, int fd, const char *name, char *why) {
  s->base = mmap(NULL, s->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (s->base != MAP_FAILED) return 1;
  s->base = NULL;
  return fail(why, "mmap", name, err);
}

/* A fresh segment, mapped, with its barrier set up; on failure its name is
 * unlinked unless shm_open refused it (an existing name is another's).
 * posix_fallocate, not ftruncate: a /dev/shm too small is then an error
 * here, not a SIGBUS in the first step. */
static int make_segment(rt_shm_t *s, char *name, char *why) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  snprintf(name, NAME_LEN, "/reftrain-%ld-%ld", (long)getpid(),
           (long)ts.tv_nsec);
  int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return fail(why, "shm_open", name, errno);
  int rc = posix_fallocate(fd, 0, (off_t)s->bytes);
  if (rc != 0) {
    close(fd);
    shm_unlink(name);
    return fail(why, "cannot reserve the segment", name, rc);
  }
  if (!map(s, fd, name, why)) {
    shm_unlink(name);
    return 0;
  }
  pthread_barrierattr_t attr;
  pthread_barrierattr_init(&attr);
  pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  rc = pthread_barrier_init(&header(s)->barrier, &attr, (unsigned)s->world);
  pthread_barrierattr_destroy(&attr);
  if (rc == 0) return 1;
  shm_unlink(name);
  return fail(why, "pthread_barrier_init in", name, rc);
}

/* Rank 0's part; on failure the name is cleared, which tells the others
 * that there is nothing to attach to. */
static int create(rt_shm_t *s, char *name, char *why) {
  if (make_segment(s, name, why)) return 1;
  name[0] = '\0';
  return 0;
}

static int attach(rt_shm_t *s, const char *name, char *why) {
  int fd = shm_open(name, O_RDWR, 0600);
  if (fd < 0) return fail(why, "shm_open", name, errno);
  return map(s, fd, name, why);
}

/* 1 when every rank succeeded; otherwise the lowest failing rank prints
 * its reason (a rank that failed only because rank 0 did has none). */
static int agree(const rt_shm_t *s, int ok, const char *why) {
  int first = rt_lowest_failed(!ok);
  if (first == s->rank && why[0]) fprintf(stderr, "reftrain: %s\n", why);
  return first < 0;
}

rt_shm_t *rt_shm_open(int64_t n) {
  rt_shm_t m = {.n = n};
  MPI_Comm_rank(MPI_COMM_WORLD, &m.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &m.world);
  m.stride = (n + LINE_FLOATS - 1) / LINE_FLOATS * LINE_FLOATS;
  m.bytes = header_bytes() +
            (size_t)(m.world + 1) * (size_t)m.stride * sizeof(float);
  char why[WHY_LEN] = "", name[NAME_LEN] = "";
  int ok = one_host(&m, why);
  if (ok && m.rank == 0) ok = create(&m, name, why);
  MPI_Bcast(name, NAME_LEN, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (ok && m.rank != 0) ok = name[0] && attach(&m, name, why);
  rt_shm_t *s = ok ? malloc(sizeof *s) : NULL;
  if (ok && !s) {
    ok = 0;
    snprintf(why, WHY_LEN, "--sync shm: out of memory");
  }
  ok = agree(&m, ok, why);
  /* Every rank has mapped it or given up: the name is no longer needed. */
  if (m.rank == 0 && name[0]) shm_unlink(name);
  if (m.base && !ok) munmap(m.base, m.bytes);
  if (!ok) {
    free(s);
    return NULL;
  }
  *s = m;
  return s;
}

/* The barrier is not destroyed: other ranks may still be leaving it, and
 * the memory goes with the last mapping anyway. */
void rt_shm_close(rt_shm_t *s) {
  if (!s) return;
  munmap(s->base, s->bytes);
  free(s);
}
