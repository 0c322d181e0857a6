/* Errors agreed across a group; see agree.h. */
#include "agree.h"

#include <stdio.h>
#include <stdlib.h>

#include "dpshim/dpshim.h"

int dpshim__agree_reserve(dpshim__agree_t *a, int32_t size) {
  if (a->size == size) return 0;
  dpshim__agree_free(a);
  a->status = calloc((size_t)size, sizeof *a->status);
  a->messages = calloc((size_t)size, DPSHIM__MESSAGE_BYTES);
  if (!a->status || !a->messages) {
    dpshim__agree_free(a);
    return DPSHIM_ENOMEM;
  }
  a->size = size;
  return 0;
}

void dpshim__agree_free(dpshim__agree_t *a) {
  free(a->status);
  free(a->messages);
  *a = (dpshim__agree_t){0};
}

static void say_broken(int rc, char *out, size_t cap) {
  snprintf(out, cap, "a collective of the shim's agreement failed (%s)",
           dpshim_strerror(rc));
}

int dpshim__agree_settle(dpshim__agree_t *a, dpshim__comm_t *comm,
                         const char *mine, char *out, size_t cap) {
  int32_t bad = -1;
  for (int32_t r = 0; r < comm->size && bad < 0; r++)
    if (a->status[r] != 0) bad = r;
  if (bad < 0) return 0;
  char msg[DPSHIM__MESSAGE_BYTES] = {0};
  if (a->status[comm->rank] != 0)
    snprintf(msg, sizeof msg, "rank %d: %s", comm->id, mine ? mine : "");
  int rc = comm->ops->allgather(comm, msg, sizeof msg, a->messages);
  if (rc < 0) {
    say_broken(rc, out, cap);
    return rc;
  }
  snprintf(out, cap, "%s", a->messages + (size_t)bad * DPSHIM__MESSAGE_BYTES);
  return a->status[bad];
}

int dpshim__agree(dpshim__agree_t *a, dpshim__comm_t *comm, int32_t status,
                  const char *mine, char *out, size_t cap) {
  int rc = comm->ops->allgather(comm, &status, sizeof status, a->status);
  if (rc < 0) {
    say_broken(rc, out, cap);
    return rc;
  }
  return dpshim__agree_settle(a, comm, mine, out, cap);
}
