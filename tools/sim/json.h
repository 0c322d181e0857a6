/* A small JSON reader for --calibrate: the whole document into a tree.
 * Strings keep their escapes undecoded but \" and \\ (enough for keys and
 * names); numbers are doubles. */
#ifndef DPSHIM_SIM_JSON_H
#define DPSHIM_SIM_JSON_H

#include <stddef.h>

typedef enum { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY,
               JSON_OBJECT } json_type_t;

typedef struct json {
  json_type_t type;
  double num;         /* NUMBER, BOOL (0/1) */
  char *str;          /* STRING */
  struct json *items; /* ARRAY and OBJECT values */
  char **keys;        /* OBJECT keys */
  size_t n;
} json_t;

/* NULL with "line N: what" in err. */
json_t *json_parse(const char *text, char *err, size_t errlen);
/* The member `key` of an object, or NULL (also when j is not an object). */
const json_t *json_get(const json_t *j, const char *key);
void json_free(json_t *j);

#endif
