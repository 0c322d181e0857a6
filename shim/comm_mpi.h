/* The comm seam (comm.h) over MPI. */
#ifndef DPSHIM_SHIM_COMM_MPI_H
#define DPSHIM_SHIM_COMM_MPI_H

#include <mpi.h>

#include "comm.h"

/* Splits `parent` by color (rank order kept) into a private communicator of
 * the shim's own: collective over parent. Returns 0 or a DPSHIM_E* code. */
int dpshim__comm_mpi_open(MPI_Comm parent, int color, dpshim__comm_t *c);
void dpshim__comm_mpi_close(dpshim__comm_t *c);

#endif
