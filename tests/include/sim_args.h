/* dpshim-sim's options as its command line would set them, for the
 * simulator's unit tests: PARSE("--ranks", "8", ...). */
#ifndef DPSHIM_TESTS_SIM_ARGS_H
#define DPSHIM_TESTS_SIM_ARGS_H

#include <getopt.h>

#include "../../tools/sim/sim.h"

static inline sim_options_t sim_args_parse(int argc, char **argv) {
  sim_options_t o;
  optind = 0; /* getopt from scratch: each test parses a new line */
  sim_parse(argc, argv, &o);
  return o;
}

#define PARSE(...)                                                        \
  sim_args_parse(sizeof((char *[]){"dpshim-sim", __VA_ARGS__}) /        \
                     sizeof(char *),                                      \
                 (char *[]){"dpshim-sim", __VA_ARGS__})

#endif
