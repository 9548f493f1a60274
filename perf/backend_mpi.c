/*
 * perf/backend_mpi.c — the MPI baseline behind the *_perf_mpi programs.
 *
 * Maps each perf call to the obvious MPI collective on MPI_COMM_WORLD: MPI_Allreduce,
 * MPI_Reduce_scatter_block, MPI_Allgather, MPI_Bcast, MPI_Reduce, MPI_Alltoall and MPI_Sendrecv
 * (blocking, -z 1), or their MPI_I* forms recorded here and completed by one MPI_Waitall (-z 0).
 * In-place calls use MPI_IN_PLACE.
 *
 * What it is not: a tempo program. It never links libtempo; tempo.h is included for its enums only.
 *
 * Differences from tempo, each visible in the output:
 *   - fp16 and bf16 have no MPI datatype: reported unsupported, the driver skips them with a '#'
 *     line.
 *   - MPI has no MPI_AVG: avg runs MPI_SUM and divides by the rank count locally, in the element
 *     type (integer division for integer types), after the operation completes; the division
 *     is timed.
 *   - MPI_Bcast has one buffer: out-of-place on the root broadcasts from sendbuf and copies it to
 *     recvbuf (tempo's broadcast must deliver into the root's recvbuf too); the copy is timed.
 *   - In-place reduce_scatter is MPI_IN_PLACE: block r lands at the start of the buffer.
 *   - Integer overflow is undefined in MPI (Open MPI 4.1's op/avx saturates 8-bit sums,
 *     open-mpi/ompi#8045, "wontfix"), so the test data keeps integer results in range.
 * Errors: MPI_ERRORS_RETURN on the communicator; a failed call prints the rank, the call and MPI's
 * text, then MPI_Abort ends the job.
 */
#include "perf/backend.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#include "tools/mpi_common.h"

typedef struct pending_avg {
    void *buf;     /* (count) elements of dtype, divided after the request completes */
    size_t count;
    tempo_dtype_t dtype;
} pending_avg_t;

static int my_rank = -1, my_size = 0;
static MPI_Request *reqs;      /* (nreqs) posted since the last waitall */
static size_t nreqs, capreqs;
static pending_avg_t *avgs;    /* (navgs) divisions owed to avg requests */
static size_t navgs, capavgs;

static void fail(const char *what, int err)
{
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(err, text, &len) != MPI_SUCCESS)
        snprintf(text, sizeof(text), "MPI error %d", err);
    fprintf(stderr, "MPI baseline: rank %d: %s failed: %s\n", my_rank, what, text);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

#define MPI_CHECK(what, call)                                                                      \
    do {                                                                                           \
        int mpi_rc_ = (call);                                                                      \
        if (mpi_rc_ != MPI_SUCCESS)                                                                \
            fail(what, mpi_rc_);                                                                   \
    } while (0)

static void *grow(void *array, size_t *cap_p, size_t elem)
{
    size_t cap = *cap_p ? 2 * *cap_p : 64;
    void *p = realloc(array, cap * elem);
    if (p == NULL) {
        fprintf(stderr, "MPI baseline: rank %d: out of memory\n", my_rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
        exit(1);
    }
    *cap_p = cap;
    return p;
}

static void push_request(MPI_Request req)
{
    if (nreqs == capreqs)
        reqs = grow(reqs, &capreqs, sizeof(*reqs));
    reqs[nreqs++] = req;
}


static MPI_Op mpi_op(tempo_op_t op)
{
    switch (op) {
    case TEMPO_PROD: return MPI_PROD;
    case TEMPO_MIN: return MPI_MIN;
    case TEMPO_MAX: return MPI_MAX;
    default: return MPI_SUM; /* sum, and avg (divided afterwards) */
    }
}

static size_t dtype_bytes(tempo_dtype_t dtype)
{
    int size = 0;
    MPI_CHECK("MPI_Type_size", MPI_Type_size(tempo_mpi_dtype(dtype), &size));
    return (size_t)size;
}

/* MPI counts are int. */
static int icount(size_t count, const char *what)
{
    if (count > (size_t)INT_MAX) {
        fprintf(stderr, "MPI baseline: rank %d: %s: count %zu does not fit MPI's int counts; "
                "lower -e\n", my_rank, what, count);
        MPI_Abort(MPI_COMM_WORLD, 1);
        exit(1);
    }
    return (int)count;
}

#define DIVIDE(type)                                                                               \
    do {                                                                                           \
        type *p_ = (type *)buf;                                                                    \
        for (size_t i_ = 0; i_ < count; i_++)                                                      \
            p_[i_] = (type)(p_[i_] / (type)my_size);                                               \
    } while (0)

/* avg = sum / nranks in the element type, as tempo.h defines it. */
static void divide(void *buf, size_t count, tempo_dtype_t dtype)
{
    switch (dtype) {
    case TEMPO_INT8: DIVIDE(int8_t); break;
    case TEMPO_UINT8: DIVIDE(uint8_t); break;
    case TEMPO_INT32: DIVIDE(int32_t); break;
    case TEMPO_UINT32: DIVIDE(uint32_t); break;
    case TEMPO_INT64: DIVIDE(int64_t); break;
    case TEMPO_UINT64: DIVIDE(uint64_t); break;
    case TEMPO_FLOAT32: DIVIDE(float); break;
    case TEMPO_FLOAT64: DIVIDE(double); break;
    default: break;
    }
}

/* After a blocking call: divide now. After a posted one: divide in waitall(). */
static void after_avg(tempo_op_t op, void *buf, size_t count, tempo_dtype_t dtype, int nonblocking)
{
    if (op != TEMPO_AVG)
        return;
    if (!nonblocking) {
        divide(buf, count, dtype);
        return;
    }
    if (navgs == capavgs)
        avgs = grow(avgs, &capavgs, sizeof(*avgs));
    avgs[navgs++] = (pending_avg_t){buf, count, dtype};
}

/* ---- the table ------------------------------------------------------------------------------- */

static int mpi_set_algorithm(const char *collective, const char *name, char *err, size_t errlen)
{
    (void)collective;
    (void)name;
    snprintf(err, errlen, "the MPI baseline has no per-call algorithm choice; -A is for the tempo "
             "programs (Open MPI picks with --mca coll_tuned_use_dynamic_rules 1 "
             "--mca coll_tuned_<collective>_algorithm N)");
    return -1;
}

static void mpi_init(int *argc_p, char ***argv_p)
{
    int rc = MPI_Init(argc_p, argv_p);
    if (rc != MPI_SUCCESS) {
        fprintf(stderr, "MPI baseline: MPI_Init failed (error %d)\n", rc);
        exit(1);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_CHECK("MPI_Comm_rank", MPI_Comm_rank(MPI_COMM_WORLD, &my_rank));
    MPI_CHECK("MPI_Comm_size", MPI_Comm_size(MPI_COMM_WORLD, &my_size));
    char why[512];
    if (util_mpi_mislaunched(my_size, why, sizeof why)) {
        fprintf(stderr, "MPI baseline: %s\n", why);
        MPI_Finalize();
        exit(2);
    }
}

static void mpi_finalize(void)
{
    free(reqs);
    free(avgs);
    reqs = NULL;
    avgs = NULL;
    nreqs = capreqs = navgs = capavgs = 0;
    MPI_Finalize();
}

static void mpi_abort_job(int code)
{
    MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

static int mpi_rank(void)
{
    return my_rank;
}

static int mpi_size(void)
{
    return my_size;
}

/* "MPI (Open MPI v4.1.4, MPI 3.1)": the library's first phrase and the standard version. */
static void mpi_describe(char *buf, size_t len)
{
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int liblen = 0, major = 0, minor = 0;
    if (MPI_Get_library_version(lib, &liblen) != MPI_SUCCESS)
        snprintf(lib, sizeof(lib), "unknown library");
    lib[strcspn(lib, ",\n")] = '\0';
    for (char *c = lib; *c; c++)
        if (*c == '\t')
            *c = ' ';
    MPI_Get_version(&major, &minor);
    snprintf(buf, len, "MPI (%s, MPI %d.%d)", lib, major, minor);
}

static const char *mpi_dtype_unsupported(tempo_dtype_t dtype)
{
    if (dtype == TEMPO_FLOAT16 || dtype == TEMPO_BFLOAT16)
        return "MPI has no datatype for it (not supported by the MPI baseline)";
    return NULL;
}

static void mpi_allreduce(const void *sendbuf, void *recvbuf, size_t count, tempo_dtype_t dtype,
                          tempo_op_t op, int nonblocking)
{
    const void *src = sendbuf == recvbuf ? MPI_IN_PLACE : sendbuf;
    int n = icount(count, "allreduce");
    if (nonblocking) {
        MPI_Request req;
        MPI_CHECK("MPI_Iallreduce", MPI_Iallreduce(src, recvbuf, n, tempo_mpi_dtype(dtype), mpi_op(op),
                                                   MPI_COMM_WORLD, &req));
        push_request(req);
    } else {
        MPI_CHECK("MPI_Allreduce", MPI_Allreduce(src, recvbuf, n, tempo_mpi_dtype(dtype), mpi_op(op),
                                                 MPI_COMM_WORLD));
    }
    after_avg(op, recvbuf, count, dtype, nonblocking);
}

static void mpi_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                               tempo_dtype_t dtype, tempo_op_t op, int nonblocking)
{
    const void *src = sendbuf == recvbuf ? MPI_IN_PLACE : sendbuf;
    int n = icount(recvcount, "reduce_scatter");
    if (nonblocking) {
        MPI_Request req;
        MPI_CHECK("MPI_Ireduce_scatter_block",
                  MPI_Ireduce_scatter_block(src, recvbuf, n, tempo_mpi_dtype(dtype), mpi_op(op),
                                            MPI_COMM_WORLD, &req));
        push_request(req);
    } else {
        MPI_CHECK("MPI_Reduce_scatter_block",
                  MPI_Reduce_scatter_block(src, recvbuf, n, tempo_mpi_dtype(dtype), mpi_op(op),
                                           MPI_COMM_WORLD));
    }
    after_avg(op, recvbuf, recvcount, dtype, nonblocking);
}

static void mpi_allgather(const void *sendbuf, void *recvbuf, size_t sendcount, tempo_dtype_t dtype,
                          int nonblocking)
{
    MPI_Datatype t = tempo_mpi_dtype(dtype);
    int n = icount(sendcount, "allgather");
    size_t offset = (size_t)my_rank * sendcount * dtype_bytes(dtype);
    const void *src = sendbuf == (const char *)recvbuf + offset ? MPI_IN_PLACE : sendbuf;
    if (nonblocking) {
        MPI_Request req;
        MPI_CHECK("MPI_Iallgather",
                  MPI_Iallgather(src, n, t, recvbuf, n, t, MPI_COMM_WORLD, &req));
        push_request(req);
    } else {
        MPI_CHECK("MPI_Allgather", MPI_Allgather(src, n, t, recvbuf, n, t, MPI_COMM_WORLD));
    }
}

static void mpi_broadcast(const void *sendbuf, void *recvbuf, size_t count, tempo_dtype_t dtype,
                          int root, int nonblocking)
{
    int n = icount(count, "broadcast");
    void *buf = recvbuf;
    if (my_rank == root) {
        buf = (void *)sendbuf; /* read, never written, on the root */
        if (sendbuf != recvbuf && count > 0)
            memcpy(recvbuf, sendbuf, count * dtype_bytes(dtype));
    }
    if (nonblocking) {
        MPI_Request req;
        MPI_CHECK("MPI_Ibcast", MPI_Ibcast(buf, n, tempo_mpi_dtype(dtype), root, MPI_COMM_WORLD, &req));
        push_request(req);
    } else {
        MPI_CHECK("MPI_Bcast", MPI_Bcast(buf, n, tempo_mpi_dtype(dtype), root, MPI_COMM_WORLD));
    }
}

static void mpi_reduce(const void *sendbuf, void *recvbuf, size_t count, tempo_dtype_t dtype,
                       tempo_op_t op, int root, int nonblocking)
{
    const void *src = (my_rank == root && sendbuf == recvbuf) ? MPI_IN_PLACE : sendbuf;
    int n = icount(count, "reduce");
    if (nonblocking) {
        MPI_Request req;
        MPI_CHECK("MPI_Ireduce", MPI_Ireduce(src, recvbuf, n, tempo_mpi_dtype(dtype), mpi_op(op), root,
                                             MPI_COMM_WORLD, &req));
        push_request(req);
    } else {
        MPI_CHECK("MPI_Reduce", MPI_Reduce(src, recvbuf, n, tempo_mpi_dtype(dtype), mpi_op(op), root,
                                           MPI_COMM_WORLD));
    }
    if (my_rank == root)
        after_avg(op, recvbuf, count, dtype, nonblocking);
}

static void mpi_alltoall(const void *sendbuf, void *recvbuf, size_t count, tempo_dtype_t dtype,
                         int nonblocking)
{
    MPI_Datatype t = tempo_mpi_dtype(dtype);
    int n = icount(count, "alltoall");
    const void *src = sendbuf == recvbuf ? MPI_IN_PLACE : sendbuf;
    if (nonblocking) {
        MPI_Request req;
        MPI_CHECK("MPI_Ialltoall", MPI_Ialltoall(src, n, t, recvbuf, n, t, MPI_COMM_WORLD, &req));
        push_request(req);
    } else {
        MPI_CHECK("MPI_Alltoall", MPI_Alltoall(src, n, t, recvbuf, n, t, MPI_COMM_WORLD));
    }
}

static void mpi_sendrecv(const void *sendbuf, void *recvbuf, size_t count, tempo_dtype_t dtype,
                         int to, int from, int nonblocking)
{
    MPI_Datatype t = tempo_mpi_dtype(dtype);
    int n = icount(count, "sendrecv");
    if (nonblocking) {
        MPI_Request req;
        MPI_CHECK("MPI_Irecv", MPI_Irecv(recvbuf, n, t, from, 0, MPI_COMM_WORLD, &req));
        push_request(req);
        MPI_CHECK("MPI_Isend", MPI_Isend(sendbuf, n, t, to, 0, MPI_COMM_WORLD, &req));
        push_request(req);
    } else {
        MPI_CHECK("MPI_Sendrecv", MPI_Sendrecv(sendbuf, n, t, to, 0, recvbuf, n, t, from, 0,
                                               MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    }
}

static void mpi_barrier(void)
{
    MPI_CHECK("MPI_Barrier", MPI_Barrier(MPI_COMM_WORLD));
}

static void mpi_control_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                                  tempo_dtype_t dtype, tempo_op_t op)
{
    mpi_allreduce(sendbuf, recvbuf, count, dtype, op, 0);
}

static void mpi_control_allgather(const void *sendbuf, void *recvbuf, size_t bytes)
{
    int n = icount(bytes, "allgather");
    MPI_CHECK("MPI_Allgather",
              MPI_Allgather(sendbuf, n, MPI_BYTE, recvbuf, n, MPI_BYTE, MPI_COMM_WORLD));
}

static void mpi_waitall(void)
{
    if (nreqs > 0)
        MPI_CHECK("MPI_Waitall", MPI_Waitall((int)nreqs, reqs, MPI_STATUSES_IGNORE));
    nreqs = 0;
    for (size_t k = 0; k < navgs; k++)
        divide(avgs[k].buf, avgs[k].count, avgs[k].dtype);
    navgs = 0;
}

const perf_backend_t perf_backend = {
    .name = "MPI",
    .program_suffix = "_mpi",
    .inplace_rs_rank_block = 0,
    .integer_overflow_wraps = 0,
    .integer_note = "integer data keeps sums and products in range: MPI leaves integer overflow "
                    "undefined (Open MPI's AVX reductions saturate 8-bit sums)",
    .avg_note = "avg: MPI has no MPI_AVG; this baseline runs MPI_SUM, then divides by the rank "
                "count locally in the element type (timed)",
    .set_algorithm = mpi_set_algorithm,
    .init = mpi_init,
    .finalize = mpi_finalize,
    .abort_job = mpi_abort_job,
    .rank = mpi_rank,
    .size = mpi_size,
    .describe = mpi_describe,
    .dtype_unsupported = mpi_dtype_unsupported,
    .allreduce = mpi_allreduce,
    .reduce_scatter = mpi_reduce_scatter,
    .allgather = mpi_allgather,
    .broadcast = mpi_broadcast,
    .reduce = mpi_reduce,
    .alltoall = mpi_alltoall,
    .sendrecv = mpi_sendrecv,
    .barrier = mpi_barrier,
    .control_allreduce = mpi_control_allreduce,
    .control_allgather = mpi_control_allgather,
    .waitall = mpi_waitall,
};
