/* Error strings and the version. */
#include "dpshim/dpshim.h"

const char *dpshim_strerror(int err) {
  switch (err) {
  case DPSHIM_OK: return "success";
  case DPSHIM_EINVAL: return "invalid argument";
  case DPSHIM_ENOMEM: return "out of memory";
  case DPSHIM_ENOCONV: return "fit did not converge";
  case DPSHIM_EMPI: return "MPI call failed";
  default: return "unknown error";
  }
}

#define DPSHIM__STR(x) #x
#define DPSHIM__XSTR(x) DPSHIM__STR(x)

const char *dpshim_version_string(void) {
  return DPSHIM__XSTR(DPSHIM_VERSION_MAJOR) "." DPSHIM__XSTR(
      DPSHIM_VERSION_MINOR) "." DPSHIM__XSTR(DPSHIM_VERSION_PATCH);
}
