/* The JSON reader; see json.h. Recursive descent, depth-limited. */
#include "json.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 64

typedef struct parser {
  const char *p, *start;
  char *err;
  size_t errlen;
  int failed;
} parser_t;

static int fail(parser_t *ps, const char *what) {
  if (ps->failed++) return -1;
  int line = 1;
  for (const char *c = ps->start; c < ps->p; c++) line += *c == '\n';
  snprintf(ps->err, ps->errlen, "line %d: %s", line, what);
  return -1;
}

static void skip_space(parser_t *ps) {
  while (isspace((unsigned char)*ps->p)) ps->p++;
}

static int parse_value(parser_t *ps, json_t *out, int depth);

static char *parse_string(parser_t *ps) {
  const char *s = ++ps->p; /* past the quote */
  while (*ps->p && *ps->p != '"') ps->p += ps->p[0] == '\\' && ps->p[1] ? 2 : 1;
  if (*ps->p != '"') return fail(ps, "unterminated string"), NULL;
  size_t n = (size_t)(ps->p - s), k = 0;
  char *str = malloc(n + 1);
  if (!str) return fail(ps, "out of memory"), NULL;
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '\\' && (s[i + 1] == '"' || s[i + 1] == '\\')) i++;
    str[k++] = s[i];
  }
  str[k] = 0;
  ps->p++;
  return str;
}

/* Appends one item (and key) to a container. */
static json_t *push(parser_t *ps, json_t *c, char *key) {
  json_t *items = realloc(c->items, (c->n + 1) * sizeof *items);
  if (items) c->items = items;
  if (key) {
    char **keys = realloc(c->keys, (c->n + 1) * sizeof *keys);
    if (keys) c->keys = keys;
    if (!keys) items = NULL;
  }
  if (!items) {
    free(key);
    fail(ps, "out of memory");
    return NULL;
  }
  if (key) c->keys[c->n] = key;
  c->items[c->n] = (json_t){JSON_NULL, 0, NULL, NULL, NULL, 0};
  return &c->items[c->n++];
}

static int parse_container(parser_t *ps, json_t *out, int depth, int object) {
  char close = object ? '}' : ']';
  out->type = object ? JSON_OBJECT : JSON_ARRAY;
  ps->p++;
  skip_space(ps);
  if (*ps->p == close) return ps->p++, 0;
  for (;;) {
    char *key = NULL;
    skip_space(ps);
    if (object) {
      if (*ps->p != '"') return fail(ps, "expected a key");
      if (!(key = parse_string(ps))) return -1;
      skip_space(ps);
      if (*ps->p++ != ':') return free(key), fail(ps, "expected ':'");
    }
    json_t *item = push(ps, out, key);
    if (!item || parse_value(ps, item, depth + 1) < 0) return -1;
    skip_space(ps);
    if (*ps->p == ',') {
      ps->p++;
      continue;
    }
    if (*ps->p++ == close) return 0;
    return fail(ps, object ? "expected ',' or '}'" : "expected ',' or ']'");
  }
}

static int parse_literal(parser_t *ps, json_t *out) {
  static const struct { const char *word; json_type_t type; double v; } lit[] = {
      {"true", JSON_BOOL, 1}, {"false", JSON_BOOL, 0}, {"null", JSON_NULL, 0}};
  for (size_t k = 0; k < 3; k++) {
    size_t n = strlen(lit[k].word);
    if (!strncmp(ps->p, lit[k].word, n)) {
      ps->p += n;
      out->type = lit[k].type;
      out->num = lit[k].v;
      return 0;
    }
  }
  char *end;
  out->num = strtod(ps->p, &end);
  if (end == ps->p) return fail(ps, "expected a value");
  out->type = JSON_NUMBER;
  ps->p = end;
  return 0;
}

static int parse_value(parser_t *ps, json_t *out, int depth) {
  if (depth > MAX_DEPTH) return fail(ps, "nested too deep");
  skip_space(ps);
  if (*ps->p == '{' || *ps->p == '[')
    return parse_container(ps, out, depth, *ps->p == '{');
  if (*ps->p == '"') {
    out->type = JSON_STRING;
    return (out->str = parse_string(ps)) ? 0 : -1;
  }
  return parse_literal(ps, out);
}

static void free_items(json_t *j) {
  for (size_t i = 0; i < j->n; i++) {
    free_items(&j->items[i]);
    if (j->keys) free(j->keys[i]);
  }
  free(j->items);
  free(j->keys);
  free(j->str);
}

json_t *json_parse(const char *text, char *err, size_t errlen) {
  parser_t ps = {text, text, err, errlen, 0};
  json_t *j = calloc(1, sizeof *j);
  if (!j) {
    snprintf(err, errlen, "out of memory");
    return NULL;
  }
  if (parse_value(&ps, j, 0) == 0) {
    skip_space(&ps);
    if (!*ps.p) return j;
    fail(&ps, "text after the value");
  }
  json_free(j);
  return NULL;
}

const json_t *json_get(const json_t *j, const char *key) {
  if (!j || j->type != JSON_OBJECT) return NULL;
  for (size_t i = 0; i < j->n; i++)
    if (!strcmp(j->keys[i], key)) return &j->items[i];
  return NULL;
}

void json_free(json_t *j) {
  if (!j) return;
  free_items(j);
  free(j);
}
