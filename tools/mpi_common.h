/*
 * mpi_common.h — for the programs that join their job with MPI (tempo-train --backend mpi, perf's
 * *_perf_mpi, tests/mr/difftest_mpi): tempo's dtypes as MPI datatypes, and whether this process
 * was started by tempo-run instead of mpirun.
 *
 * tempo-run gives every process it starts TEMPO_SIZE; MPI_Init in a process mpirun did not start
 * makes it a job of its own (a singleton). `tempo-run -n 2 prog_mpi` would therefore run two
 * independent one-rank jobs, writing the same files, and say nothing. Header-only: the programs
 * share no library but libtempo, which has no MPI.
 */
#ifndef TEMPO_TOOLS_MPI_COMMON_H
#define TEMPO_TOOLS_MPI_COMMON_H

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <tempo.h>

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

/* After MPI_Init: 1 with a sentence in msg when MPI made this process a job of one while tempo-run
 * started it as one of several ranks, else 0. */
static inline int tempo_mpi_mislaunched(int mpi_size, char *msg, size_t len)
{
    const char *env = getenv("TEMPO_SIZE");
    int n = env ? atoi(env) : 0;
    if (mpi_size != 1 || n <= 1) {
        return 0;
    }
    snprintf(msg, len,
             "started by tempo-run as one of %d ranks, but MPI made this process a job of its own "
             "(MPI ranks are started by mpirun): launch it with mpirun -n %d (plus "
             "--oversubscribe when ranks exceed cores, --allow-run-as-root as root), not tempo-run",
             n, n);
    return 1;
}

#endif /* TEMPO_TOOLS_MPI_COMMON_H */
