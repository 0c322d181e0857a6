/* dpshim — data-parallel attention load balancing.
 *
 * The umbrella header: the export macro, the error codes every public
 * function returns (0 on success, a negative DPSHIM_E* code otherwise) and the
 * version. Include <dpshim/solver.h> and <dpshim/fit.h> for the solver library.
 */
#ifndef DPSHIM_DPSHIM_H
#define DPSHIM_DPSHIM_H

#if defined(__GNUC__)
#define DPSHIM_EXTERN __attribute__((visibility("default")))
#else
#define DPSHIM_EXTERN
#endif

#define DPSHIM_VERSION_MAJOR 0
#define DPSHIM_VERSION_MINOR 1
#define DPSHIM_VERSION_PATCH 0

#ifdef __cplusplus
extern "C" {
#endif

enum dpshim_error {
  DPSHIM_OK = 0,
  DPSHIM_EINVAL = -22, /* an input field is out of range; see the message */
  DPSHIM_ENOMEM = -12, /* an allocation failed */
  DPSHIM_ENOCONV = -61, /* an iterative fit did not converge */
  DPSHIM_EMPI = -71     /* an MPI call of the shim's own failed */
};

/* A short static description of an error code. */
DPSHIM_EXTERN const char *dpshim_strerror(int err);

/* "MAJOR.MINOR.PATCH" */
DPSHIM_EXTERN const char *dpshim_version_string(void);

#ifdef __cplusplus
}
#endif
#endif
