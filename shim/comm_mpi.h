/* The comm seam (comm.h) over MPI. */
#ifndef DPSHIM_SHIM_COMM_MPI_H
#define DPSHIM_SHIM_COMM_MPI_H

#include <mpi.h>

#include "comm.h"

/* Splits `parent` by color (rank order kept) into a private communicator of
 * the shim's own: collective over parent. Returns 0 or a DPSHIM_E* code. */
int dpshim__comm_mpi_open(MPI_Comm parent, int color, dpshim__comm_t *c);
/* Frees what open made; harmless on a seam never opened. */
void dpshim__comm_mpi_close(dpshim__comm_t *c);
/* The private communicator behind the seam. */
MPI_Comm dpshim__comm_mpi_handle(const dpshim__comm_t *c);

#endif
