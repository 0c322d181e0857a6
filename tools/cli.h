/* cli: the small parsers the tools' command lines share. A value is taken
 * only when the whole string is one; each returns 0, or -1 for the caller
 * to name the option and what it expects. Tools-internal. */
#ifndef DPSHIM_TOOLS_CLI_H
#define DPSHIM_TOOLS_CLI_H

#include <stddef.h>
#include <stdint.h>

/* An integer in [lo, hi]. */
int cli_int(const char *s, int64_t lo, int64_t hi, int64_t *out);
/* A finite number in [lo, hi]. */
int cli_double(const char *s, double lo, double hi, double *out);
/* Copies the next comma-separated item of *cursor into buf; 0 at the end.
 * An item too long for buf is cut, and then fails validation like a typo. */
int cli_next_item(const char **cursor, char *buf, size_t len);

#endif
