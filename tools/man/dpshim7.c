/* Writes dpshim(7) from its template: @ENVIRONMENT@ becomes one entry per
 * variable of the shim's configuration table (name, default, what it
 * accepts, the original's flag, dpshim-run's flag), so the page cannot
 * drift from the code; @VERSION@ becomes the version.
 *
 *   dpshim7 TEMPLATE OUTPUT VERSION */
#include <stdio.h>
#include <string.h>

#include "config.h"

/* Text as roff reads it back: backslashes escaped, no line starting with a
 * control character. */
static void roff(FILE *out, const char *text) {
  if (*text == '.' || *text == '\'') fputs("\\&", out);
  for (; *text; text++) {
    if (*text == '\\') fputs("\\e", out);
    else if (*text == '-') fputs("\\-", out);
    else fputc(*text, out);
  }
}

static void environment(FILE *out) {
  for (int32_t i = 0; i < dpshim__config_nvars(); i++) {
    const dpshim__config_var_t *v = dpshim__config_var(i);
    fputs(".TP\n.B ", out);
    roff(out, v->name);
    fputs("\nDefault: ", out);
    roff(out, v->def ? v->def : "unset");
    fputs(". Accepted: ", out);
    roff(out, v->accepted);
    fputs(".\n.br\n", out);
    fputs("dpshim-run: \\fB\\-\\-", out);
    for (const char *p = v->name + strlen("DPSHIM_"); *p; p++)
      fputc(*p == '_' ? '-' : (*p | 0x20), out);
    fputs("\\fR", out);
    if (v->flag) {
      fputs("; the original's flag: \\fB", out);
      roff(out, v->flag);
      fputs("\\fR", out);
    }
    fputs(".\n", out);
  }
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: dpshim7 TEMPLATE OUTPUT VERSION\n");
    return 2;
  }
  FILE *in = fopen(argv[1], "r"), *out = fopen(argv[2], "w");
  if (!in || !out) {
    perror("dpshim7");
    return 1;
  }
  char line[4096];
  while (fgets(line, sizeof line, in)) {
    char *at = strstr(line, "@VERSION@");
    if (!strcmp(line, "@ENVIRONMENT@\n")) {
      environment(out);
    } else if (at) {
      fwrite(line, 1, (size_t)(at - line), out);
      fputs(argv[3], out);
      fputs(at + strlen("@VERSION@"), out);
    } else {
      fputs(line, out);
    }
  }
  return ferror(out) | fclose(out) | fclose(in) ? 1 : 0;
}
