/*
 * mpi_common.h — for the programs that join their job with MPI (perf's
 * *_perf_mpi, tests/mr/difftest_mpi): tempo's dtypes as MPI datatypes (whether a process was
 * started by tempo-run instead of mpirun is util/helpers.h's util_mpi_mislaunched, which needs no
 * MPI). Header-only: the programs share no library but libtempo, which has no MPI.
 */
#ifndef TEMPO_TOOLS_MPI_COMMON_H
#define TEMPO_TOOLS_MPI_COMMON_H

#include <mpi.h>
#include <tempo.h>

#include "util/helpers.h"

/* The MPI datatype of a tempo dtype; MPI_DATATYPE_NULL for fp16 and bf16, which MPI lacks. */
static inline MPI_Datatype tempo_mpi_dtype(tempo_dtype_t dtype)
{
    switch (dtype) {
    case TEMPO_INT8: return MPI_INT8_T;
    case TEMPO_UINT8: return MPI_UINT8_T;
    case TEMPO_INT32: return MPI_INT32_T;
    case TEMPO_UINT32: return MPI_UINT32_T;
    case TEMPO_INT64: return MPI_INT64_T;
    case TEMPO_UINT64: return MPI_UINT64_T;
    case TEMPO_FLOAT32: return MPI_FLOAT;
    case TEMPO_FLOAT64: return MPI_DOUBLE;
    default: return MPI_DATATYPE_NULL;
    }
}

#endif /* TEMPO_TOOLS_MPI_COMMON_H */
