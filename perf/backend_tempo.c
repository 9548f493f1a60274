/*
 * perf/backend_tempo.c — the tempo backend behind the *_perf programs.
 *
 * Joins the job with tempo_comm_init_env() (tempo-run, mpirun and srun all work) and maps each perf
 * call to the public API: tempo_allreduce, tempo_reduce_scatter, tempo_allgather, tempo_broadcast,
 * tempo_reduce, tempo_alltoall and tempo_isend + tempo_irecv for sendrecv (tempo has no fused
 * send-receive). -z 1 uses the blocking calls; -z 0 posts the i* forms and completes them with one
 * tempo_waitall(). With -A, the measured calls go through the i* forms with tempo_attr_t.algorithm
 * (a blocking call is "post, then wait" anyway), the driver's bookkeeping calls never do.
 *
 * What it is not: anything below tempo.h. Errors are reported once, with the rank, the call, the
 * status name and tempo_last_error(), then the job is aborted (tempo_comm_abort makes peers fail
 * with TEMPO_ERR_REMOTE instead of hanging) and the process exits 1.
 */
#include "perf/backend.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static tempo_comm_t comm;
static tempo_attr_t forced;               /* the -A algorithm */
static const tempo_attr_t *measured_attr; /* &forced with -A, else NULL */
static char forced_name[128];
static tempo_request_t *reqs;             /* (nreqs) posted since the last waitall */
static size_t nreqs, capreqs;

static void fail(const char *what, tempo_status_t status)
{
    fprintf(stderr, "tempo: rank %d: %s failed: %s (%s): %s\n", tempo_comm_rank(comm), what,
            tempo_status_name(status), tempo_strerror(status), tempo_last_error(comm));
    tempo_comm_abort(comm);
    tempo_comm_destroy(comm);
    exit(1);
}

#define TEMPO_PERF_CALL(what, call)                                                                \
    do {                                                                                           \
        tempo_status_t st_ = (call);                                                               \
        if (st_ != TEMPO_OK)                                                                       \
            fail(what, st_);                                                                       \
    } while (0)

static void push_request(tempo_request_t req)
{
    if (nreqs == capreqs) {
        size_t cap = capreqs ? 2 * capreqs : 64;
        tempo_request_t *p = realloc(reqs, cap * sizeof(*reqs));
        if (p == NULL) {
            fprintf(stderr, "tempo: rank %d: out of memory\n", tempo_comm_rank(comm));
            tempo_comm_abort(comm);
            tempo_comm_destroy(comm);
            exit(1);
        }
        reqs = p;
        capreqs = cap;
    }
    reqs[nreqs++] = req;
}

/* A posted request: keep it for waitall(), or wait for it now. */
static void finish(tempo_request_t req, int nonblocking, const char *what)
{
    if (nonblocking)
        push_request(req);
    else
        TEMPO_PERF_CALL(what, tempo_wait(&req));
}

/* ---- the table ------------------------------------------------------------------------------- */

static int t_set_algorithm(const char *collective, const char *name, char *err, size_t errlen)
{
    char known[256] = "";
    size_t used = 0;
    tempo_algorithm_info_t info;
    for (size_t i = 0; tempo_algorithm_info(i, &info) == TEMPO_OK; i++) {
        if (info.collective == NULL || info.name == NULL)
            continue;
        if (strcmp(info.collective, collective) != 0)
            continue;
        if (strcmp(info.name, name) == 0) {
            snprintf(forced_name, sizeof(forced_name), "%s", name);
            memset(&forced, 0, sizeof(forced));
            forced.field_mask = TEMPO_ATTR_ALGORITHM;
            forced.algorithm = forced_name;
            measured_attr = &forced;
            return 0;
        }
        if (used < sizeof(known)) {
            int w = snprintf(known + used, sizeof(known) - used, "%s%s", used ? ", " : "",
                             info.name);
            used += w > 0 ? (size_t)w : 0;
        }
    }
    snprintf(err, errlen, "no algorithm of that name for %s (tempo_algorithm_info lists: %s)",
             collective, used ? known : "none");
    return -1;
}

static void t_init(int *argc_p, char ***argv_p)
{
    (void)argc_p;
    (void)argv_p;
    tempo_status_t st = tempo_comm_init_env(&comm);
    if (st != TEMPO_OK) {
        fprintf(stderr, "tempo: tempo_comm_init_env failed: %s: %s\n", tempo_status_name(st),
                tempo_last_error(NULL));
        exit(1);
    }
}

static void t_finalize(void)
{
    free(reqs);
    reqs = NULL;
    nreqs = capreqs = 0;
    tempo_status_t st = tempo_comm_destroy(comm);
    if (st != TEMPO_OK)
        fprintf(stderr, "tempo: tempo_comm_destroy: %s\n", tempo_status_name(st));
    comm = NULL;
}

static void t_abort_job(int code)
{
    tempo_comm_abort(comm);
    tempo_comm_destroy(comm);
    exit(code);
}

static int t_rank(void)
{
    return tempo_comm_rank(comm);
}

static int t_size(void)
{
    return tempo_comm_size(comm);
}

static void t_describe(char *buf, size_t len)
{
    char header[32];
    snprintf(header, sizeof(header), "%d.%d.%d", TEMPO_VERSION_MAJOR, TEMPO_VERSION_MINOR,
             TEMPO_VERSION_PATCH);
    const char *lib = tempo_version();
    if (strcmp(lib, header) == 0)
        snprintf(buf, len, "tempo %s", lib);
    else
        snprintf(buf, len, "tempo %s (built against header %s)", lib, header);
}

static const char *t_dtype_unsupported(tempo_dtype_t dtype)
{
    (void)dtype;
    return NULL;
}

static void t_allreduce(const void *sendbuf, void *recvbuf, size_t count, tempo_dtype_t dtype,
                        tempo_op_t op, int nonblocking)
{
    if (!nonblocking && measured_attr == NULL) {
        TEMPO_PERF_CALL("tempo_allreduce",
                        tempo_allreduce(comm, sendbuf, recvbuf, count, dtype, op));
        return;
    }
    tempo_request_t req = NULL;
    TEMPO_PERF_CALL("tempo_iallreduce", tempo_iallreduce(comm, sendbuf, recvbuf, count, dtype, op,
                                                         measured_attr, &req));
    finish(req, nonblocking, "tempo_iallreduce");
}

static void t_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                             tempo_dtype_t dtype, tempo_op_t op, int nonblocking)
{
    if (!nonblocking && measured_attr == NULL) {
        TEMPO_PERF_CALL("tempo_reduce_scatter",
                        tempo_reduce_scatter(comm, sendbuf, recvbuf, recvcount, dtype, op));
        return;
    }
    tempo_request_t req = NULL;
    TEMPO_PERF_CALL("tempo_ireduce_scatter",
                    tempo_ireduce_scatter(comm, sendbuf, recvbuf, recvcount, dtype, op,
                                          measured_attr, &req));
    finish(req, nonblocking, "tempo_ireduce_scatter");
}

static void t_allgather(const void *sendbuf, void *recvbuf, size_t sendcount, tempo_dtype_t dtype,
                        int nonblocking)
{
    if (!nonblocking && measured_attr == NULL) {
        TEMPO_PERF_CALL("tempo_allgather",
                        tempo_allgather(comm, sendbuf, recvbuf, sendcount, dtype));
        return;
    }
    tempo_request_t req = NULL;
    TEMPO_PERF_CALL("tempo_iallgather", tempo_iallgather(comm, sendbuf, recvbuf, sendcount, dtype,
                                                         measured_attr, &req));
    finish(req, nonblocking, "tempo_iallgather");
}

static void t_broadcast(const void *sendbuf, void *recvbuf, size_t count, tempo_dtype_t dtype,
                        int root, int nonblocking)
{
    if (!nonblocking && measured_attr == NULL) {
        TEMPO_PERF_CALL("tempo_broadcast",
                        tempo_broadcast(comm, sendbuf, recvbuf, count, dtype, root));
        return;
    }
    tempo_request_t req = NULL;
    TEMPO_PERF_CALL("tempo_ibroadcast", tempo_ibroadcast(comm, sendbuf, recvbuf, count, dtype, root,
                                                         measured_attr, &req));
    finish(req, nonblocking, "tempo_ibroadcast");
}

static void t_reduce(const void *sendbuf, void *recvbuf, size_t count, tempo_dtype_t dtype,
                     tempo_op_t op, int root, int nonblocking)
{
    if (!nonblocking && measured_attr == NULL) {
        TEMPO_PERF_CALL("tempo_reduce",
                        tempo_reduce(comm, sendbuf, recvbuf, count, dtype, op, root));
        return;
    }
    tempo_request_t req = NULL;
    TEMPO_PERF_CALL("tempo_ireduce", tempo_ireduce(comm, sendbuf, recvbuf, count, dtype, op, root,
                                                   measured_attr, &req));
    finish(req, nonblocking, "tempo_ireduce");
}

static void t_alltoall(const void *sendbuf, void *recvbuf, size_t count, tempo_dtype_t dtype,
                       int nonblocking)
{
    if (!nonblocking && measured_attr == NULL) {
        TEMPO_PERF_CALL("tempo_alltoall", tempo_alltoall(comm, sendbuf, recvbuf, count, dtype));
        return;
    }
    tempo_request_t req = NULL;
    TEMPO_PERF_CALL("tempo_ialltoall", tempo_ialltoall(comm, sendbuf, recvbuf, count, dtype,
                                                       measured_attr, &req));
    finish(req, nonblocking, "tempo_ialltoall");
}

static void t_sendrecv(const void *sendbuf, void *recvbuf, size_t count, tempo_dtype_t dtype,
                       int to, int from, int nonblocking)
{
    tempo_request_t pair[2] = {NULL, NULL};
    TEMPO_PERF_CALL("tempo_irecv",
                    tempo_irecv(comm, recvbuf, count, dtype, from, 0, NULL, &pair[0]));
    TEMPO_PERF_CALL("tempo_isend", tempo_isend(comm, sendbuf, count, dtype, to, 0, NULL, &pair[1]));
    if (nonblocking) {
        push_request(pair[0]);
        push_request(pair[1]);
    } else {
        TEMPO_PERF_CALL("tempo_waitall (sendrecv)", tempo_waitall(2, pair, NULL));
    }
}

static void t_barrier(void)
{
    TEMPO_PERF_CALL("tempo_barrier", tempo_barrier(comm));
}

static void t_control_allreduce(const void *sendbuf, void *recvbuf, size_t count,
                                tempo_dtype_t dtype, tempo_op_t op)
{
    TEMPO_PERF_CALL("tempo_allreduce", tempo_allreduce(comm, sendbuf, recvbuf, count, dtype, op));
}

static void t_control_allgather(const void *sendbuf, void *recvbuf, size_t bytes)
{
    TEMPO_PERF_CALL("tempo_allgather", tempo_allgather(comm, sendbuf, recvbuf, bytes, TEMPO_UINT8));
}

static void t_waitall(void)
{
    if (nreqs > 0)
        TEMPO_PERF_CALL("tempo_waitall", tempo_waitall(nreqs, reqs, NULL));
    nreqs = 0;
}

static void *t_mem_alloc(size_t bytes)
{
    void *p = NULL;
    tempo_status_t st = tempo_mem_alloc(comm, bytes, &p);
    if (st != TEMPO_OK) {
        fprintf(stderr, "tempo_mem_alloc(%zu): %s: %s\n", bytes, tempo_status_name(st),
                tempo_last_error(comm));
        return NULL;
    }
    return p;
}

static void t_mem_free(void *p)
{
    (void)tempo_mem_free(comm, p);
}

const perf_backend_t perf_backend = {
    .name = "tempo",
    .program_suffix = "",
    .inplace_rs_rank_block = 1,
    .integer_overflow_wraps = 1,
    .avg_note = NULL,
    .integer_note = NULL,
    .set_algorithm = t_set_algorithm,
    .init = t_init,
    .finalize = t_finalize,
    .abort_job = t_abort_job,
    .rank = t_rank,
    .size = t_size,
    .describe = t_describe,
    .dtype_unsupported = t_dtype_unsupported,
    .allreduce = t_allreduce,
    .reduce_scatter = t_reduce_scatter,
    .allgather = t_allgather,
    .broadcast = t_broadcast,
    .reduce = t_reduce,
    .alltoall = t_alltoall,
    .sendrecv = t_sendrecv,
    .barrier = t_barrier,
    .control_allreduce = t_control_allreduce,
    .control_allgather = t_control_allgather,
    .waitall = t_waitall,
    .mem_alloc = t_mem_alloc,
    .mem_free = t_mem_free,
};
