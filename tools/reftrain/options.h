/* reftrain's command line. */
#ifndef REFTRAIN_OPTIONS_H
#define REFTRAIN_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum rt_mode { RT_EMULATE, RT_CPU } rt_mode_t;

typedef struct rt_opts {
  int64_t steps;
  rt_mode_t mode;
  const char *profile;
  const char *lengths; /* lengths file, or NULL */
  uint64_t seed;
  int32_t micro;       /* micro-batches (hand-offs) per step */
  int32_t tp, cp, pp;
  double time_scale;   /* emulate: multiplies the modelled time */
  int64_t grad_bytes;  /* gradient buffer all-reduced once per step */
  double headroom;     /* loader capacity / pack size */
  int64_t pack_tokens; /* 0: the profile's */
  int32_t cpu_dim;     /* cpu: head dimension */
  bool check, verbose;
  bool loader_thread; /* hand-offs from a second thread, as a pin-memory loop */
  const char *ids_out, *stats_out;
} rt_opts_t;

/* Fills *o from argv. Returns 0 to run, 1 when --help was asked, or -1 with
 * one line in err naming the option and what it expects. */
int rt_parse(int argc, char **argv, rt_opts_t *o, char *err, size_t errlen);
void rt_usage(FILE *f);

#endif
