/*
 * fault_invalid.c — bad input gets TEMPO_ERR_INVALID (or TEMPO_ERR_UNSUPPORTED) with a message that
 * names the problem, and nothing else breaks: the same communicator keeps working afterwards.
 *
 * A 2-rank job over tcp (TEMPO_HOST_ID=%r, so the shared-memory all-reduce is unusable):
 *   rank 0 alone (local checks, no communication): NULL comm for every call; NULL buffers with
 *     count > 0; unknown dtype and op; root out of range; partially overlapping buffers for every
 *     collective, both ways round; send/recv to itself or out of range; tag > TEMPO_TAG_MAX; NULL
 *     req_p for every non-blocking call; bad tempo_config_t fields; split, waitall, abort with bad
 *     arguments;
 *   both ranks (collective calls, same order): count 0 with NULL buffers; every documented in-place
 *     layout accepted and computing the right result; an unknown algorithm name (TEMPO_ERR_INVALID,
 *     listing the valid ones), one of another collective, and an unusable one (allreduce "shm"
 *     across "hosts": TEMPO_ERR_UNSUPPORTED); a send/recv byte-count mismatch (TEMPO_ERR_INVALID
 *     naming both sizes), after which the pair still communicates; an all-reduce whose ranks pass
 *     different counts (TEMPO_ERR_INVALID naming both counts), after which the communicator fails
 *     for good (a barrier).
 * Rank 0's local checks run on a communicator of their own: a rejected collective call still counts
 * as the rank's call, so making them alone on the job's communicator would put it out of step.
 * 1-rank jobs: TEMPO_ALGO with an unknown algorithm, an unknown collective or no colon fails
 * tempo_comm_init_env with TEMPO_ERR_INVALID and a message listing the valid names; a valid
 * TEMPO_ALGO works.
 */
#include "config.h"

#include <tempo.h>

#include "tests/fault/job.h"

#define C 4 /* elements per rank block */

static tempo_comm_t g_comm;

/* st must be want and the error text (of comm, or of the thread for NULL) must contain needle. */
static void expect(tempo_status_t st, tempo_status_t want, tempo_comm_t comm, const char *needle,
                   const char *what)
{
    const char *m = tempo_last_error(comm);
    rk_check(st == want && m && strstr(m, needle), "%s: %s, message mentions \"%s\" (got %s: %s)",
             what, tempo_status_name(want), needle, tempo_status_name(st), m ? m : "(null)");
}

#define INV(call, needle) expect((call), TEMPO_ERR_INVALID, g_comm, needle, #call)
#define INV_NULL(call) expect((call), TEMPO_ERR_INVALID, NULL, "comm is NULL", #call)

static void local_checks(tempo_comm_t comm)
{
    float a[4 * C], b[4 * C];
    int32_t ia[C];
    tempo_request_t req = (tempo_request_t)(uintptr_t)1;
    tempo_attr_t attr = {0};
    memset(a, 0, sizeof(a));
    memset(b, 0, sizeof(b));
    memset(ia, 0, sizeof(ia));

    /* NULL communicator */
    INV_NULL(tempo_allreduce(NULL, a, b, C, TEMPO_FLOAT32, TEMPO_SUM));
    INV_NULL(tempo_iallreduce(NULL, a, b, C, TEMPO_FLOAT32, TEMPO_SUM, NULL, &req));
    rk_check(req == NULL, "iallreduce on a NULL comm leaves *req_p NULL");
    INV_NULL(tempo_reduce_scatter(NULL, a, b, C, TEMPO_FLOAT32, TEMPO_SUM));
    INV_NULL(tempo_allgather(NULL, a, b, C, TEMPO_FLOAT32));
    INV_NULL(tempo_broadcast(NULL, a, b, C, TEMPO_FLOAT32, 0));
    INV_NULL(tempo_reduce(NULL, a, b, C, TEMPO_FLOAT32, TEMPO_SUM, 0));
    INV_NULL(tempo_alltoall(NULL, a, b, C, TEMPO_FLOAT32));
    INV_NULL(tempo_barrier(NULL));
    INV_NULL(tempo_ibarrier(NULL, NULL, &req));
    INV_NULL(tempo_send(NULL, a, C, TEMPO_FLOAT32, 1, 0));
    INV_NULL(tempo_recv(NULL, a, C, TEMPO_FLOAT32, 1, 0));
    INV_NULL(tempo_isend(NULL, a, C, TEMPO_FLOAT32, 1, 0, NULL, &req));
    INV_NULL(tempo_irecv(NULL, a, C, TEMPO_FLOAT32, 1, 0, NULL, &req));
    rk_check(tempo_comm_rank(NULL) == -1 && tempo_comm_size(NULL) == -1,
             "rank and size of a NULL comm are -1");
    rk_check(tempo_comm_destroy(NULL) == TEMPO_OK, "tempo_comm_destroy(NULL) is a no-op");
    expect(tempo_comm_abort(NULL), TEMPO_ERR_INVALID, NULL, "comm is NULL",
           "tempo_comm_abort(NULL)");

    /* NULL buffers with count > 0 */
    INV(tempo_allreduce(comm, NULL, b, C, TEMPO_FLOAT32, TEMPO_SUM), "sendbuf is NULL");
    INV(tempo_allreduce(comm, a, NULL, C, TEMPO_FLOAT32, TEMPO_SUM), "recvbuf is NULL");
    INV(tempo_reduce_scatter(comm, NULL, b, C, TEMPO_FLOAT32, TEMPO_SUM), "sendbuf is NULL");
    INV(tempo_reduce_scatter(comm, a, NULL, C, TEMPO_FLOAT32, TEMPO_SUM), "recvbuf is NULL");
    INV(tempo_allgather(comm, NULL, b, C, TEMPO_FLOAT32), "sendbuf is NULL");
    INV(tempo_allgather(comm, a, NULL, C, TEMPO_FLOAT32), "recvbuf is NULL");
    INV(tempo_broadcast(comm, NULL, b, C, TEMPO_FLOAT32, 0), "sendbuf is NULL");
    INV(tempo_broadcast(comm, NULL, NULL, C, TEMPO_FLOAT32, 1), "recvbuf is NULL");
    INV(tempo_reduce(comm, NULL, b, C, TEMPO_FLOAT32, TEMPO_SUM, 0), "sendbuf is NULL");
    INV(tempo_reduce(comm, a, NULL, C, TEMPO_FLOAT32, TEMPO_SUM, 0), "recvbuf is NULL");
    INV(tempo_reduce(comm, NULL, NULL, C, TEMPO_FLOAT32, TEMPO_SUM, 1), "sendbuf is NULL");
    INV(tempo_alltoall(comm, NULL, b, C, TEMPO_FLOAT32), "sendbuf is NULL");
    INV(tempo_alltoall(comm, a, NULL, C, TEMPO_FLOAT32), "recvbuf is NULL");
    INV(tempo_send(comm, NULL, C, TEMPO_FLOAT32, 1, 0), "buffer is NULL");
    INV(tempo_recv(comm, NULL, C, TEMPO_FLOAT32, 1, 0), "buffer is NULL");

    /* Unknown dtype and op */
    INV(tempo_allreduce(comm, a, b, C, (tempo_dtype_t)99, TEMPO_SUM), "unknown dtype 99");
    INV(tempo_allreduce(comm, a, b, C, (tempo_dtype_t)-1, TEMPO_SUM), "unknown dtype -1");
    INV(tempo_allgather(comm, a, b, C, TEMPO_DTYPE_COUNT), "unknown dtype");
    INV(tempo_broadcast(comm, a, b, C, (tempo_dtype_t)12, 0), "unknown dtype");
    INV(tempo_alltoall(comm, a, b, C, (tempo_dtype_t)12), "unknown dtype");
    INV(tempo_send(comm, a, C, (tempo_dtype_t)12, 1, 0), "unknown dtype");
    INV(tempo_allreduce(comm, a, b, C, TEMPO_FLOAT32, TEMPO_OP_COUNT), "unknown reduction op 5");
    INV(tempo_allreduce(comm, a, b, C, TEMPO_FLOAT32, (tempo_op_t)-1), "unknown reduction op -1");
    INV(tempo_reduce_scatter(comm, a, b, C, TEMPO_FLOAT32, (tempo_op_t)77), "unknown reduction op");
    INV(tempo_reduce(comm, a, b, C, TEMPO_FLOAT32, (tempo_op_t)9, 0), "unknown reduction op");

    /* Root out of range */
    INV(tempo_broadcast(comm, a, b, C, TEMPO_FLOAT32, 2), "root 2 out of range");
    INV(tempo_broadcast(comm, a, b, C, TEMPO_FLOAT32, -1), "root -1 out of range");
    INV(tempo_reduce(comm, a, b, C, TEMPO_FLOAT32, TEMPO_SUM, 5), "root 5 out of range");
    INV(tempo_reduce(comm, a, b, C, TEMPO_FLOAT32, TEMPO_SUM, -3), "root -3 out of range");

    /* Partial overlaps, both ways round (rank 0: its NCCL in-place offset is 0, i.e. send ==
     * recv, so offset 1 is never a documented layout). */
    INV(tempo_allreduce(comm, a, a + 1, C, TEMPO_FLOAT32, TEMPO_SUM), "overlap");
    INV(tempo_allreduce(comm, a + 1, a, C, TEMPO_FLOAT32, TEMPO_SUM), "overlap");
    INV(tempo_reduce_scatter(comm, a, a + 1, C, TEMPO_FLOAT32, TEMPO_SUM), "overlap");
    INV(tempo_reduce_scatter(comm, a + C + 1, a + 2, C, TEMPO_FLOAT32, TEMPO_SUM), "overlap");
    INV(tempo_allgather(comm, a + 1, a, C, TEMPO_FLOAT32), "overlap");
    INV(tempo_allgather(comm, a, a + C - 1, C, TEMPO_FLOAT32), "overlap");
    INV(tempo_broadcast(comm, a, a + 1, C, TEMPO_FLOAT32, 0), "overlap");
    INV(tempo_reduce(comm, a + 2, a, C, TEMPO_FLOAT32, TEMPO_SUM, 0), "overlap");
    INV(tempo_alltoall(comm, a, a + 1, C, TEMPO_FLOAT32), "overlap");
    INV(tempo_alltoall(comm, a + 2 * C - 1, a, C, TEMPO_FLOAT32), "overlap");

    /* Point-to-point peers and tags */
    INV(tempo_send(comm, a, C, TEMPO_FLOAT32, 0, 0), "peer 0 is not another rank");
    INV(tempo_recv(comm, a, C, TEMPO_FLOAT32, 0, 0), "peer 0 is not another rank");
    INV(tempo_send(comm, a, C, TEMPO_FLOAT32, 2, 0), "peer 2");
    INV(tempo_recv(comm, a, C, TEMPO_FLOAT32, -1, 0), "peer -1");
    INV(tempo_isend(comm, a, C, TEMPO_FLOAT32, 7, 0, NULL, &req), "peer 7");
    INV(tempo_send(comm, a, C, TEMPO_FLOAT32, 1, TEMPO_TAG_MAX + 1u), "TEMPO_TAG_MAX");
    INV(tempo_recv(comm, a, C, TEMPO_FLOAT32, 1, 0xffffffffu), "TEMPO_TAG_MAX");

    /* NULL req_p */
    INV(tempo_iallreduce(comm, a, b, C, TEMPO_FLOAT32, TEMPO_SUM, &attr, NULL), "req_p is NULL");
    INV(tempo_ireduce_scatter(comm, a, b, C, TEMPO_FLOAT32, TEMPO_SUM, NULL, NULL),
        "req_p is NULL");
    INV(tempo_iallgather(comm, a, b, C, TEMPO_FLOAT32, NULL, NULL), "req_p is NULL");
    INV(tempo_ibroadcast(comm, a, b, C, TEMPO_FLOAT32, 0, NULL, NULL), "req_p is NULL");
    INV(tempo_ireduce(comm, a, b, C, TEMPO_FLOAT32, TEMPO_SUM, 0, NULL, NULL), "req_p is NULL");
    INV(tempo_ialltoall(comm, a, b, C, TEMPO_FLOAT32, NULL, NULL), "req_p is NULL");
    INV(tempo_ibarrier(comm, NULL, NULL), "req_p is NULL");
    INV(tempo_isend(comm, a, C, TEMPO_FLOAT32, 1, 0, NULL, NULL), "req_p is NULL");
    INV(tempo_irecv(comm, a, C, TEMPO_FLOAT32, 1, 0, NULL, NULL), "req_p is NULL");

    /* Requests and communicator calls */
    tempo_request_t none = NULL;
    rk_check(tempo_test(&none) == TEMPO_OK && tempo_wait(&none) == TEMPO_OK &&
                 tempo_test(NULL) == TEMPO_OK && tempo_wait(NULL) == TEMPO_OK,
             "tempo_test/tempo_wait of a NULL request are TEMPO_OK");
    expect(tempo_waitall(1, NULL, NULL), TEMPO_ERR_INVALID, NULL, "reqs is NULL",
           "tempo_waitall(1, NULL, NULL)");
    rk_check(tempo_waitall(0, NULL, NULL) == TEMPO_OK, "tempo_waitall of nothing is TEMPO_OK");
    tempo_comm_t nc = (tempo_comm_t)(uintptr_t)1;
    INV(tempo_comm_split(comm, -5, 0, &nc), "color -5");
    rk_check(nc == (tempo_comm_t)(uintptr_t)1, "a failed split leaves *newcomm_p alone");
    {
        tempo_status_t st = tempo_comm_split(comm, 0, 0, NULL);
        const char *m = tempo_last_error(comm);
        rk_check(st == TEMPO_ERR_INVALID && strstr(tempo_last_error(NULL), "newcomm_p is NULL"),
                 "tempo_comm_split(comm, 0, 0, NULL): TEMPO_ERR_INVALID naming newcomm_p");
        rk_check(strstr(m, "newcomm_p is NULL") != NULL,
                 "  tempo_last_error(comm) shows it too (got: %s)", m);
    }
    (void)ia;
}

static void config_checks(void)
{
    tempo_comm_t c = (tempo_comm_t)(uintptr_t)1;
    tempo_config_t cfg = {TEMPO_CONFIG_RANK, 2, 2, NULL, NULL, 0};
    expect(tempo_comm_init(&cfg, &c), TEMPO_ERR_INVALID, NULL, "out of range",
           "tempo_comm_init with rank 2 of 2");
    cfg.rank = 0;
    cfg.size = 0;
    expect(tempo_comm_init(&cfg, &c), TEMPO_ERR_INVALID, NULL, "out of range",
           "tempo_comm_init with size 0");
    tempo_config_t root = {TEMPO_CONFIG_ROOT, 0, 0, "", NULL, 0};
    expect(tempo_comm_init(&root, &c), TEMPO_ERR_INVALID, NULL, "root",
           "tempo_comm_init with an empty root");
    tempo_config_t host = {TEMPO_CONFIG_HOST_ID, 0, 0, NULL, NULL, 0};
    expect(tempo_comm_init(&host, &c), TEMPO_ERR_INVALID, NULL, "host_id",
           "tempo_comm_init with a NULL host_id");
    tempo_config_t to = {TEMPO_CONFIG_TIMEOUT, 0, 0, NULL, NULL, -1};
    expect(tempo_comm_init(&to, &c), TEMPO_ERR_INVALID, NULL, "timeout_s",
           "tempo_comm_init with timeout_s -1");
    to.timeout_s = 0;
    expect(tempo_comm_init(&to, &c), TEMPO_ERR_INVALID, NULL, "timeout_s",
           "tempo_comm_init with timeout_s 0");
    expect(tempo_comm_init(NULL, NULL), TEMPO_ERR_INVALID, NULL, "comm_p is NULL",
           "tempo_comm_init with comm_p NULL");
    rk_check(c == (tempo_comm_t)(uintptr_t)1, "failed inits leave *comm_p alone");
}

static int same_floats(const float *x, const float *y, size_t n)
{
    return memcmp(x, y, n * sizeof(float)) == 0;
}

static void collective_checks(tempo_comm_t comm, int rank)
{
    const int n = 2;
    float buf[2 * C], want[2 * C];
    tempo_status_t st;

    /* count 0: no buffers needed, no communication */
    st = tempo_allreduce(comm, NULL, NULL, 0, TEMPO_FLOAT32, TEMPO_SUM);
    st |= tempo_reduce_scatter(comm, NULL, NULL, 0, TEMPO_FLOAT32, TEMPO_SUM);
    st |= tempo_allgather(comm, NULL, NULL, 0, TEMPO_FLOAT32);
    st |= tempo_broadcast(comm, NULL, NULL, 0, TEMPO_FLOAT32, 0);
    st |= tempo_reduce(comm, NULL, NULL, 0, TEMPO_FLOAT32, TEMPO_SUM, 1);
    st |= tempo_alltoall(comm, NULL, NULL, 0, TEMPO_FLOAT32);
    st |= tempo_send(comm, NULL, 0, TEMPO_FLOAT32, 1 - rank, 3);
    st |= tempo_recv(comm, NULL, 0, TEMPO_FLOAT32, 1 - rank, 3);
    rk_check(st == TEMPO_OK, "count 0 with NULL buffers is TEMPO_OK for every call");

    /* In-place layouts */
    for (int i = 0; i < C; i++) {
        buf[i] = (float)(rank * 10 + i);
        want[i] = (float)(0 * 10 + i + 1 * 10 + i);
    }
    st = tempo_allreduce(comm, buf, buf, C, TEMPO_FLOAT32, TEMPO_SUM);
    rk_check(st == TEMPO_OK && same_floats(buf, want, C), "allreduce in place (send == recv)");

    for (int i = 0; i < n * C; i++) {
        buf[i] = (float)(rank * 100 + i);
    }
    for (int i = 0; i < C; i++) {
        want[i] = (float)(0 * 100 + rank * C + i + 1 * 100 + rank * C + i);
    }
    st = tempo_reduce_scatter(comm, buf, buf + rank * C, C, TEMPO_FLOAT32, TEMPO_SUM);
    rk_check(st == TEMPO_OK && same_floats(buf + rank * C, want, C),
             "reduce_scatter in place (recv = send + rank * count)");
    for (int i = 0; i < n * C; i++) {
        buf[i] = (float)(rank * 100 + i);
    }
    st = tempo_reduce_scatter(comm, buf, buf, C, TEMPO_FLOAT32, TEMPO_SUM);
    rk_check(st == TEMPO_OK && same_floats(buf, want, C), "reduce_scatter in place (recv == send)");

    for (int i = 0; i < C; i++) {
        buf[rank * C + i] = (float)(rank * 7 + i);
        want[0 * C + i] = (float)(0 * 7 + i);
        want[1 * C + i] = (float)(1 * 7 + i);
    }
    st = tempo_allgather(comm, buf + rank * C, buf, C, TEMPO_FLOAT32);
    rk_check(st == TEMPO_OK && same_floats(buf, want, n * C),
             "allgather in place (send = recv + rank * count)");
    for (int i = 0; i < C; i++) {
        buf[i] = (float)(rank * 7 + i);
    }
    st = tempo_allgather(comm, buf, buf, C, TEMPO_FLOAT32);
    rk_check(st == TEMPO_OK && same_floats(buf, want, n * C), "allgather in place (send == recv)");

    for (int i = 0; i < C; i++) {
        buf[i] = rank == 1 ? (float)(50 + i) : -1.0f;
        want[i] = (float)(50 + i);
    }
    st = tempo_broadcast(comm, rank == 1 ? buf : NULL, buf, C, TEMPO_FLOAT32, 1);
    rk_check(st == TEMPO_OK && same_floats(buf, want, C),
             "broadcast in place on the root (and sendbuf NULL elsewhere)");

    for (int i = 0; i < C; i++) {
        buf[i] = (float)(rank + i);
        want[i] = (float)(0 + i + 1 + i);
    }
    st = tempo_reduce(comm, buf, rank == 0 ? buf : NULL, C, TEMPO_FLOAT32, TEMPO_SUM, 0);
    rk_check(st == TEMPO_OK && (rank != 0 || same_floats(buf, want, C)),
             "reduce in place on the root (and recvbuf NULL elsewhere)");

    for (int i = 0; i < n * C; i++) {
        buf[i] = (float)(rank * 1000 + i);
    }
    for (int q = 0; q < n; q++) {
        for (int i = 0; i < C; i++) {
            want[q * C + i] = (float)(q * 1000 + rank * C + i);
        }
    }
    st = tempo_alltoall(comm, buf, buf, C, TEMPO_FLOAT32);
    rk_check(st == TEMPO_OK && same_floats(buf, want, n * C), "alltoall in place (send == recv)");

    /* Algorithms by name */
    tempo_request_t req = (tempo_request_t)(uintptr_t)1;
    tempo_attr_t attr = {.field_mask = TEMPO_ATTR_ALGORITHM, .algorithm = "bogus"};
    st = tempo_iallreduce(comm, buf, want, C, TEMPO_FLOAT32, TEMPO_SUM, &attr, &req);
    expect(st, TEMPO_ERR_INVALID, comm, "unknown algorithm 'bogus' for allreduce",
           "iallreduce with algorithm \"bogus\"");
    const char *m = tempo_last_error(comm);
    rk_check(strstr(m, "ring") && strstr(m, "rhd") && strstr(m, "rd") && strstr(m, "shm"),
             "  the message lists the valid names: %s", m);
    rk_check(req == NULL, "  and *req_p is NULL");
    attr.algorithm = "pipeline";
    st = tempo_iallreduce(comm, buf, want, C, TEMPO_FLOAT32, TEMPO_SUM, &attr, &req);
    expect(st, TEMPO_ERR_INVALID, comm, "unknown algorithm 'pipeline' for allreduce",
           "iallreduce with algorithm \"pipeline\" (a broadcast algorithm)");
    attr.algorithm = "shm";
    st = tempo_iallreduce(comm, buf, want, C, TEMPO_FLOAT32, TEMPO_SUM, &attr, &req);
    expect(st, TEMPO_ERR_UNSUPPORTED, comm, "cannot run here",
           "iallreduce with algorithm \"shm\" across hosts");
    attr.algorithm = "ring";
    for (int i = 0; i < C; i++) {
        buf[i] = (float)(rank + 1);
        want[i] = 3.0f;
    }
    float out[C];
    st = tempo_iallreduce(comm, buf, out, C, TEMPO_FLOAT32, TEMPO_SUM, &attr, &req);
    st = st == TEMPO_OK ? tempo_wait(&req) : st;
    rk_check(st == TEMPO_OK && same_floats(out, want, C), "after those, allreduce \"ring\" works");

    /* Point-to-point size mismatch: rank 0 sends 40 bytes, rank 1 receives 80. */
    int32_t s10[10], r20[20];
    for (int i = 0; i < 10; i++) {
        s10[i] = i * 3;
    }
    if (rank == 0) {
        st = tempo_send(comm, s10, 10, TEMPO_INT32, 1, 9);
        /* tempo.h: a send completes once its data is handed to the transport, so the sender
         * cannot learn of the mismatch; only the receive fails. */
        rk_check(st == TEMPO_OK, "send of 40 bytes to a receive of 80 completes on the sender (got "
                 "%s)", tempo_status_name(st));
    } else {
        st = tempo_recv(comm, r20, 20, TEMPO_INT32, 0, 9);
        expect(st, TEMPO_ERR_INVALID, comm, "sent 40 bytes where 80 were expected",
               "recv of 80 bytes for a 40-byte send");
        rk_check(strstr(tempo_last_error(comm), "rank 0 (host") != NULL,
                 "  and the message names the sender");
    }
    if (rank == 0) {
        st = tempo_send(comm, s10, 10, TEMPO_INT32, 1, TEMPO_TAG_MAX);
    } else {
        memset(r20, 0, sizeof(r20));
        st = tempo_recv(comm, r20, 10, TEMPO_INT32, 0, TEMPO_TAG_MAX);
        st = st == TEMPO_OK && memcmp(r20, s10, sizeof(s10)) != 0 ? TEMPO_ERR_INTERNAL : st;
    }
    rk_check(st == TEMPO_OK, "after the mismatch the pair still talks (tag TEMPO_TAG_MAX; %s)",
             tempo_status_name(st));

    /* Collective count mismatch: rank 0 passes 2 elements, rank 1 passes 4. Its sequence of
     * calls can no longer be trusted, so the communicator fails for good (tempo.h); every rank
     * hears what differed. (tests/fault/fault_mismatch.c covers every collective and path.) */
    attr.algorithm = "ring";
    st = tempo_iallreduce(comm, buf, out, rank == 0 ? 2 : 4, TEMPO_FLOAT32, TEMPO_SUM, &attr, &req);
    st = st == TEMPO_OK ? tempo_wait(&req) : st;
    expect(st, TEMPO_ERR_INVALID, comm, "count 2 on rank 0",
           "allreduce with different counts on the ranks");
    rk_check(strstr(tempo_last_error(comm), "count 4 on rank 1") != NULL,
             "  and the message names the other rank's count");
    st = tempo_barrier(comm);
    expect(st, TEMPO_ERR_INVALID, comm, "ranks disagree on collective call",
           "the communicator fails for good afterwards (barrier)");
}

static int invalid_rank(int rank, int size, void *arg)
{
    if (rank == 0) {
        config_checks();
    }
    tempo_status_t st = tempo_comm_init_env(&g_comm);
    rk_check(st == TEMPO_OK, "init (%s)", st ? tempo_last_error(NULL) : "ok");
    if (st != TEMPO_OK) {
        return 1;
    }
    /* Rank 0's rejected calls still count as its calls (tempo.h), so it makes them on a
     * communicator of its own that rank 1 never calls, and the job's stays in step. */
    tempo_comm_t world = g_comm, scratch = NULL;
    st = tempo_comm_split(world, 0, 0, &scratch);
    rk_check(st == TEMPO_OK, "split a scratch communicator (%s)", tempo_status_name(st));
    if (rank == 0 && st == TEMPO_OK) {
        g_comm = scratch;
        local_checks(scratch);
        g_comm = world;
    }
    tempo_comm_destroy(scratch);
    collective_checks(g_comm, rank);
    st = tempo_comm_destroy(g_comm);
    rk_check(st == TEMPO_OK, "destroy (%s)", tempo_status_name(st));
    return 0;
}

/* ------------------------------------------------------------------------------------------ */

typedef struct {
    const char *needles[5];
    tempo_status_t want;
} algo_arg_t;

static int algo_rank(int rank, int size, void *arg)
{
    const algo_arg_t *a = arg;
    tempo_comm_t comm = (tempo_comm_t)(uintptr_t)1;
    tempo_status_t st = tempo_comm_init_env(&comm);
    rk_put("msg", "%s", tempo_last_error(NULL));
    rk_put("status", "%d", (int)st);
    if (st == TEMPO_OK) {
        float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8];
        st = tempo_allreduce(comm, x, y, 8, TEMPO_FLOAT32, TEMPO_SUM);
        st |= tempo_broadcast(comm, x, y, 8, TEMPO_FLOAT32, 0);
        rk_put("works", "%d", (int)(st == TEMPO_OK && memcmp(x, y, sizeof(x)) == 0));
        tempo_comm_destroy(comm);
    } else {
        rk_put("untouched", "%d", comm == (tempo_comm_t)(uintptr_t)1);
    }
    rk_put("done", "1"); /* last: the test reads the other keys once it sees this one */
    (void)a;
    return 0;
}

static void algo_case(const char *value, tempo_status_t want, const char *const *needles)
{
    job_t *j = calloc(1, sizeof(*j));
    char setting[128];
    snprintf(setting, sizeof(setting), "TEMPO_ALGO=%s", value);
    const char *env[] = {setting, NULL};
    algo_arg_t a = {{NULL}, want};
    if (job_start(j, 1, env, algo_rank, &a) == 0) {
        job_wait_key(j, 0, "done", 30);
    }
    int st = job_status_of(j, 0, "status");
    const char *msg = job_get(j, 0, "msg");
    TAP_EQ_INT(st, want, "TEMPO_ALGO=%s: tempo_comm_init_env returns %s", value,
               tempo_status_name(want));
    if (want != TEMPO_OK) {
        for (int i = 0; needles[i]; i++) {
            TAP_CONTAINS(msg, needles[i], "  the message mentions \"%s\"", needles[i]);
        }
        TAP_OK(job_status_of(j, 0, "untouched") == 1, "  *comm_p is not written");
    } else {
        TAP_OK(job_status_of(j, 0, "works") == 1, "  and the forced algorithms run");
    }
    job_finish(j, 30);
    job_free(j);
    free(j);
}

int main(void)
{
    job_t *j = calloc(1, sizeof(*j));
    static const char *const env[] = {"TEMPO_HOST_ID=%r", NULL};
    if (job_start(j, 2, env, invalid_rank, NULL) != 0) {
        TAP_OK(0, "start 2 ranks");
    }
    job_finish(j, 60);
    for (int r = 0; r < 2; r++) {
        char how[64];
        job_describe_exit(j, r, how, sizeof(how));
        TAP_OK(job_exited(j, r, 0), "rank %d exited 0 (%s)", r, how);
    }
    job_free(j);
    free(j);

    static const char *const n1[] = {"unknown algorithm 'bogus' for allreduce", "shm", "ring",
                                     "rhd", "rd", NULL};
    algo_case("allreduce:bogus", TEMPO_ERR_INVALID, n1);
    static const char *const n2[] = {"unknown algorithm 'ring' for broadcast", "tree", "pipeline",
                                     NULL};
    algo_case("allreduce:ring,broadcast:ring", TEMPO_ERR_INVALID, n2);
    static const char *const n3[] = {"unknown collective 'allreduce_x'", "allreduce",
                                     "reduce_scatter", "barrier", NULL};
    algo_case("allreduce_x:ring", TEMPO_ERR_INVALID, n3);
    static const char *const n4[] = {"'allreduce' is not collective:algorithm", NULL};
    algo_case("allreduce", TEMPO_ERR_INVALID, n4);
    static const char *const ok[] = {NULL};
    algo_case("allreduce:rd,broadcast:pipeline", TEMPO_OK, ok);
    return tap_done();
}
