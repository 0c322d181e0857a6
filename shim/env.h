/* Every environment variable the shim reads, in one place. config.c's table
 * gives each its default, accepted values and the original's command-line
 * flag; a unit test checks that the README's table says the same. */
#ifndef DPSHIM_SHIM_ENV_H
#define DPSHIM_SHIM_ENV_H

#define DPSHIM_ENV_ENABLE "DPSHIM_VLM_BALANCE"
#define DPSHIM_ENV_WARMUP "DPSHIM_WARMUP_ITERS"
#define DPSHIM_ENV_MAX_LEN_RATIO "DPSHIM_MAX_LEN_RATIO"
#define DPSHIM_ENV_THRESHOLD "DPSHIM_TRIGGER_THRESHOLD"
#define DPSHIM_ENV_VERBOSE "DPSHIM_VERBOSE"
#define DPSHIM_ENV_SOLVER "DPSHIM_SOLVER"
#define DPSHIM_ENV_FIT "DPSHIM_FIT"
#define DPSHIM_ENV_COEFS "DPSHIM_COEFS"
#define DPSHIM_ENV_TP "DPSHIM_TP_SIZE"
#define DPSHIM_ENV_PP "DPSHIM_PP_SIZE"
#define DPSHIM_ENV_CP "DPSHIM_CP_SIZE"
#define DPSHIM_ENV_SYNC_OPS "DPSHIM_SYNC_OPS"
#define DPSHIM_ENV_LOG "DPSHIM_LOG"
#define DPSHIM_ENV_VERIFY "DPSHIM_VERIFY"
#define DPSHIM_ENV_LOADER_THREAD "DPSHIM_LOADER_THREAD"

#endif
