/*
 * perf/backend.h — the communication backend of the perf programs, as a small table of functions.
 *
 * Two implementations exist and exactly one is linked into each program: backend_tempo.c (the
 * programs named *_perf, linked with libtempo) and backend_mpi.c (the baselines named *_perf_mpi,
 * linked with MPI and never with libtempo). The driver (common.c) and the collective descriptors
 * see only this table, so both variants run the same sweep, the same data and the same checks.
 *
 * Types and operators are tempo's enums from tempo.h (the header only: enums are not symbols, so
 * the MPI variant uses them without linking libtempo). Buffers are host memory; counts are
 * elements.
 *
 * Invariants:
 *   - Every call either succeeds or ends the job: a backend that sees an error prints one line
 *     naming the rank, the call and the cause, aborts the job (tempo_comm_abort / MPI_Abort) and
 *     exits 1. The driver therefore never checks return values of collectives.
 *   - nonblocking == 0: the call returns once the operation is complete on this rank.
 *     nonblocking != 0: the operation is posted and recorded inside the backend; waitall()
 *     completes every recorded operation (and, for MPI avg, applies the local division afterwards).
 *   - In-place calls pass the layouts of tempo.h; see inplace_rs_rank_block for the one difference.
 */
#ifndef TEMPO_PERF_BACKEND_H
#define TEMPO_PERF_BACKEND_H

#include <stddef.h>

#include <tempo.h>

typedef struct perf_backend {
    const char *name;            /* "tempo" or "MPI" */
    const char *program_suffix;  /* appended to the program name: "" or "_mpi" */
    /* In-place reduce_scatter layout: 1 = recvbuf == sendbuf + rank*recvcount (NCCL's layout, the
     * first of tempo.h's two); 0 = recvbuf == sendbuf (MPI_IN_PLACE: block r at the start). */
    int inplace_rs_rank_block;
    /* 1: integer sums and products wrap (tempo.h), so the test data exercises wrapping; 0: overflow
     * is undefined (MPI), so the data keeps integer results in range (verifiable.h). */
    int integer_overflow_wraps;
    /* '#' lines printed in the header of reduction tests, or NULL: when avg is measured, and when
     * integer data is kept in range. */
    const char *avg_note;
    const char *integer_note;

    /* Force algorithm `name` for collective `collective` (tempo's collective names: "allreduce",
     * "reduce_scatter", ...). Called before init(). Returns 0, or -1 with a sentence in err. */
    int (*set_algorithm)(const char *collective, const char *name, char *err, size_t errlen);
    /* Join the job. Exits 1 with a message when that fails. */
    void (*init)(int *argc_p, char ***argv_p);
    /* Leave the job cleanly (destroy the communicator / MPI_Finalize). */
    void (*finalize)(void);
    /* Abort the whole job from this rank (peers fail instead of hanging) and exit with code. */
    void (*abort_job)(int code);
    int (*rank)(void);
    int (*size)(void);
    /* One line for the header: "tempo 0.1.0", "MPI (Open MPI v4.1.4, MPI 3.1)". */
    void (*describe)(char *buf, size_t len);
    /* NULL when dtype is supported, else the reason it is skipped. */
    const char *(*dtype_unsupported)(tempo_dtype_t dtype);

    void (*allreduce)(const void *sendbuf, void *recvbuf, size_t count, tempo_dtype_t dtype,
                      tempo_op_t op, int nonblocking);
    void (*reduce_scatter)(const void *sendbuf, void *recvbuf, size_t recvcount,
                           tempo_dtype_t dtype, tempo_op_t op, int nonblocking);
    void (*allgather)(const void *sendbuf, void *recvbuf, size_t sendcount, tempo_dtype_t dtype,
                      int nonblocking);
    void (*broadcast)(const void *sendbuf, void *recvbuf, size_t count, tempo_dtype_t dtype,
                      int root, int nonblocking);
    void (*reduce)(const void *sendbuf, void *recvbuf, size_t count, tempo_dtype_t dtype,
                   tempo_op_t op, int root, int nonblocking);
    void (*alltoall)(const void *sendbuf, void *recvbuf, size_t count, tempo_dtype_t dtype,
                     int nonblocking);
    /* Send count elements of sendbuf to rank `to` and receive count elements from rank `from` into
     * recvbuf (the buffers do not overlap). */
    void (*sendrecv)(const void *sendbuf, void *recvbuf, size_t count, tempo_dtype_t dtype, int to,
                     int from, int nonblocking);
    void (*barrier)(void);
    /* The driver's own bookkeeping (combining times and #wrong, agreeing on errors, gathering the
     * rank lines): blocking, never with a forced algorithm: -A affects only the measured calls. */
    void (*control_allreduce)(const void *sendbuf, void *recvbuf, size_t count, tempo_dtype_t dtype,
                              tempo_op_t op);
    void (*control_allgather)(const void *sendbuf, void *recvbuf, size_t bytes);
    /* Complete every operation posted with nonblocking != 0 since the last waitall(). */
    void (*waitall)(void);
    /* -R 1: buffers from the library's shared allocation (tempo_mem_alloc: collective, every rank
     * calls it alike), or NULL where the backend has none (MPI): then -R is refused. NULL on
     * failure (a message printed). */
    void *(*mem_alloc)(size_t bytes);
    void (*mem_free)(void *p);
} perf_backend_t;

/* Defined by the backend linked into the program (backend_tempo.c or backend_mpi.c). */
extern const perf_backend_t perf_backend;

#endif /* TEMPO_PERF_BACKEND_H */
