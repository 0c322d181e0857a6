/* Command-line parsers shared by the tools; see cli.h. */
#include "cli.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cli_int(const char *s, int64_t lo, int64_t hi, int64_t *out) {
  char *end;
  errno = 0;
  long long v = strtoll(s, &end, 10);
  if (errno || end == s || *end || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

int cli_double(const char *s, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !(v >= lo && v <= hi)) return -1;
  *out = v;
  return 0;
}

int cli_next_item(const char **cursor, char *buf, size_t len) {
  if (!*cursor) return 0;
  const char *comma = strchr(*cursor, ',');
  size_t n = comma ? (size_t)(comma - *cursor) : strlen(*cursor);
  snprintf(buf, len, "%.*s", (int)n, *cursor);
  *cursor = comma ? comma + 1 : NULL;
  return 1;
}
