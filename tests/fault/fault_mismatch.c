/*
 * fault_mismatch.c — ranks that call different things under the same collective call fail, every
 * one of them, with TEMPO_ERR_INVALID saying what differs and on which ranks: never TEMPO_OK with
 * a wrong result, never a timeout.
 *
 * Two 4-rank jobs: every rank on one host (shared memory: the shm all-reduce and the shm rings) and
 * every rank its own host (TEMPO_HOST_ID=%r: tcp). In each, for every collective and path — the
 * automatic choice, every all-reduce algorithm forced, the scheduled lane (a priority) and the
 * compressed all-reduce (fp16) — one rank (the last, "odd") differs from the others in one way:
 *   count    it passes count + 1 (or 0 where the others pass count: its call completes at once)
 *   dtype    int32 where the others pass float32 (same size: the data would flow)
 *   op       max where the others sum
 *   root     1 where the others say 0
 *   coll     it calls all-gather (or a barrier) where the others call this collective
 *   null     the root alone passes a NULL buffer (its call is rejected before it is posted)
 * Each case runs on a fresh split of the job (the mismatch fails its communicator for good), then
 * a barrier on it. A rank whose own call was rejected (bad arguments) gets its own reason; it
 * hears of the difference when its peers' news arrives, which a next barrier may not wait for. Every rank's call must fail with TEMPO_ERR_INVALID and a message naming the
 * difference. The one exception is a rank whose part of the call moves no data towards it (a
 * broadcast root, a reduce non-root, a count-0 call): it may finish first with TEMPO_OK, having
 * received nothing, and must then fail at its next call on that communicator (the barrier) with
 * the same message. No case may time out (TEMPO_TIMEOUT is 20 s, probes answer in well under 1 s).
 */
#include "config.h"

#include <tempo.h>

#include "tests/fault/job.h"

#define NR 4
#define ODD (NR - 1)
#define SMALL 1000
#define STAGED (300 * 1000 + 7) /* elements: several staged shm segments of 64 KiB */

enum { K_COUNT, K_COUNT0, K_DTYPE, K_OP, K_ROOT, K_COLL, K_NULL, K_KINDS };
static const char *const kind_names[K_KINDS] = {"count",    "count 0", "dtype", "op",
                                                "root",     "collective", "NULL buffer"};

enum { C_ALLREDUCE, C_REDUCE_SCATTER, C_ALLGATHER, C_BROADCAST, C_REDUCE, C_ALLTOALL, C_BARRIER };
static const char *const coll_names[] = {"allreduce", "reduce_scatter", "allgather", "broadcast",
                                         "reduce",    "alltoall",       "barrier"};

enum { P_AUTO, P_FORCED, P_SCHED, P_COMPRESSED };

typedef struct {
    int coll, path, kind;
    const char *algo; /* P_FORCED */
    size_t count;
} case_t;

static int applies(int coll, int kind)
{
    switch (kind) {
    case K_OP: return coll == C_ALLREDUCE || coll == C_REDUCE_SCATTER || coll == C_REDUCE;
    case K_ROOT: return coll == C_BROADCAST || coll == C_REDUCE;
    case K_NULL: return coll == C_BROADCAST || coll == C_REDUCE;
    case K_COLL: return 1;
    default: return coll != C_BARRIER;
    }
}

static tempo_compressor_t g_fp16;

/* One rank's call of case k: the odd rank's arguments differ as the kind says. */
static tempo_status_t call(tempo_comm_t c, const case_t *k, int rank, void *sbuf, void *rbuf)
{
    int odd = rank == ODD;
    int coll = k->coll;
    size_t count = k->count;
    tempo_dtype_t dt = TEMPO_FLOAT32;
    tempo_op_t op = TEMPO_SUM;
    int root = 0;
    if (odd) {
        switch (k->kind) {
        case K_COUNT: count++; break;
        case K_COUNT0: count = 0; break;
        case K_DTYPE: dt = TEMPO_INT32; break;
        case K_OP: op = TEMPO_MAX; break;
        case K_ROOT: root = 1; break;
        case K_COLL: coll = coll == C_ALLGATHER || coll == C_BARRIER ? C_ALLREDUCE : C_ALLGATHER; break;
        default: break;
        }
    }
    if (k->kind == K_NULL && rank == root) {
        if (coll == C_BROADCAST) {
            rbuf = NULL;
        } else {
            sbuf = NULL;
        }
    }
    tempo_attr_t attr;
    memset(&attr, 0, sizeof(attr));
    if (k->path == P_FORCED) {
        attr.field_mask = TEMPO_ATTR_ALGORITHM;
        attr.algorithm = k->algo;
    } else if (k->path == P_SCHED) {
        attr.field_mask = TEMPO_ATTR_PRIORITY | TEMPO_ATTR_TAG;
        attr.priority = 1;
        attr.tag = 7;
    } else if (k->path == P_COMPRESSED) {
        attr.field_mask = TEMPO_ATTR_COMPRESSOR;
        attr.compressor = g_fp16;
    }
    if (k->path == P_FORCED && odd && k->kind == K_COLL) {
        attr.field_mask = 0; /* the other collective runs its automatic choice */
    }
    tempo_request_t req = NULL;
    tempo_status_t st;
    switch (coll) {
    case C_ALLREDUCE: st = tempo_iallreduce(c, sbuf, rbuf, count, dt, op, &attr, &req); break;
    case C_REDUCE_SCATTER:
        st = tempo_ireduce_scatter(c, sbuf, rbuf, count, dt, op, &attr, &req);
        break;
    case C_ALLGATHER: st = tempo_iallgather(c, sbuf, rbuf, count, dt, &attr, &req); break;
    case C_BROADCAST: st = tempo_ibroadcast(c, sbuf, rbuf, count, dt, root, &attr, &req); break;
    case C_REDUCE: st = tempo_ireduce(c, sbuf, rbuf, count, dt, op, root, &attr, &req); break;
    case C_ALLTOALL: st = tempo_ialltoall(c, sbuf, rbuf, count, dt, &attr, &req); break;
    default: st = tempo_ibarrier(c, &attr, &req); break;
    }
    return st == TEMPO_OK ? tempo_wait(&req) : st;
}

/* The words every rank's message must contain for this kind of difference. */
static void needles(const case_t *k, const char **a, const char **b)
{
    static char ca[64], cb[64];
    *b = NULL;
    switch (k->kind) {
    case K_COUNT:
        snprintf(ca, sizeof(ca), "count %zu", k->count + 1);
        snprintf(cb, sizeof(cb), "count %zu", k->count);
        *a = ca, *b = cb;
        break;
    case K_COUNT0:
        snprintf(cb, sizeof(cb), "count %zu", k->count);
        *a = "count 0", *b = cb;
        break;
    case K_DTYPE: *a = "dtype int32", *b = "dtype float32"; break;
    case K_OP: *a = "op max", *b = "op sum"; break;
    case K_ROOT: *a = "root 1", *b = "root 0"; break;
    case K_COLL: *a = k->coll == C_ALLGATHER || k->coll == C_BARRIER ? "allreduce" : "allgather"; break;
    default: *a = "is NULL"; break;
    }
}

/* A rank that receives nothing from a rank that differs may see its call finish before the
 * difference is found (it learns it at its next call): in the one-way trees of a broadcast or a
 * reduce, any rank (a broadcast's result then is the root's data, checked); a count-0 call. */
static int may_finish_first(const case_t *k, int rank)
{
    return (k->kind == K_COUNT0 && rank == ODD) || k->coll == C_BROADCAST || k->coll == C_REDUCE;
}

static unsigned char pattern(size_t i)
{
    return (unsigned char)(i * 7 + 3);
}

static int has_all(const char *m, const char *a, const char *b)
{
    return m && strstr(m, a) && (!b || strstr(m, b));
}

static int run_case(tempo_comm_t world, int rank, const case_t *k, char *buf, size_t cap,
                    const char *where)
{
    char label[160];
    snprintf(label, sizeof(label), "%s: %s%s%s, %s differs on rank %d", where,
             coll_names[k->coll],
             k->path == P_FORCED ? " forced " : k->path == P_SCHED ? " scheduled"
             : k->path == P_COMPRESSED ? " compressed" : "",
             k->path == P_FORCED ? k->algo : "", kind_names[k->kind],
             k->kind == K_NULL ? 0 : ODD);
    tempo_comm_t c = NULL;
    tempo_status_t st = tempo_comm_split(world, 0, rank, &c);
    if (!rk_check(st == TEMPO_OK, "%s: split (%s)", label, tempo_last_error(world))) {
        return 0;
    }
    for (size_t i = 0; i < cap / 2; i++) {
        buf[i] = (char)pattern(i);
    }
    memset(buf + cap / 2, 0, cap / 2);
    double t0 = rk_now();
    st = call(c, k, rank, buf, buf + cap / 2);
    char m1[512];
    snprintf(m1, sizeof(m1), "%s", tempo_last_error(c));
    tempo_status_t st2 = tempo_barrier(c);
    const char *m2 = tempo_last_error(c);
    double dt = rk_now() - t0;
    const char *a, *b;
    needles(k, &a, &b);
    /* A call rejected on one rank before it is posted (a NULL buffer; max on a compressed
     * all-reduce): that rank gets its own reason, its peers hear that it rejected the call. */
    int rejecting = k->kind == K_NULL || (k->path == P_COMPRESSED && k->kind == K_OP);
    int rejecter = k->kind == K_NULL ? 0 : ODD;
    if (rejecting && rank != rejecter) {
        a = "rejected its call", b = NULL;
    }
    int ok;
    if (rejecting && rank == rejecter) {
        /* Its peers find the difference and tell it; a next call that needs nothing from them
         * (a barrier that completes through other ranks) can finish before the news arrives. */
        ok = rk_check(st != TEMPO_OK &&
                          (st2 == TEMPO_OK || (st2 == TEMPO_ERR_INVALID &&
                                               has_all(m2, "ranks disagree", NULL))),
                      "%s: its call is rejected (%s: %s); its next call: %s (%s)", label,
                      tempo_status_name(st), m1, tempo_status_name(st2), m2);
    } else if (st == TEMPO_ERR_INVALID) {
        ok = rk_check(has_all(m1, a, b) && st2 == TEMPO_ERR_INVALID,
                      "%s: TEMPO_ERR_INVALID naming it (%.2f s; %s; then barrier %s)", label, dt,
                      m1, tempo_status_name(st2));
    } else if (st == TEMPO_OK && may_finish_first(k, rank)) {
        size_t bad = 0, n = k->coll == C_BROADCAST && !(k->kind == K_COUNT0 && rank == ODD)
                                ? 4 * (k->count + (k->kind == K_COUNT && rank == ODD))
                                : 0;
        for (size_t i = 0; i < n; i++) {
            bad += (unsigned char)buf[cap / 2 + i] != pattern(i);
        }
        rk_check(bad == 0, "%s: its broadcast finished first with the root's data (%zu bytes wrong)",
                 label, bad);
        ok = rk_check(st2 == TEMPO_ERR_INVALID && has_all(m2, a, b),
                      "%s: its part finished first; its next call fails naming it (%.2f s; %s: %s)",
                      label, dt, tempo_status_name(st2), m2);
    } else {
        ok = rk_check(0, "%s: TEMPO_ERR_INVALID expected, got %s after %.2f s (%s)", label,
                      tempo_status_name(st), dt, m1);
    }
    tempo_comm_destroy(c);
    return ok;
}

typedef struct {
    int shm;
} job_arg_t;

static int mismatch_rank(int rank, int size, void *arg)
{
    (void)size;
    const job_arg_t *ja = arg;
    const char *where = ja->shm ? "shm" : "tcp";
    tempo_comm_t world = NULL;
    tempo_status_t st = tempo_comm_init_env(&world);
    if (!rk_check(st == TEMPO_OK, "%s rank %d: init (%s)", where, rank, tempo_last_error(NULL))) {
        return 1;
    }
    if (tempo_compressor_create("fp16:min=0", &g_fp16) != TEMPO_OK) {
        rk_check(0, "fp16 compressor (%s)", tempo_last_error(NULL));
        return 1;
    }
    size_t cap = 2 * (size_t)NR * (STAGED + 8) * 8;
    char *buf = malloc(cap);
    int fails = 0;
    for (int coll = C_ALLREDUCE; coll <= C_BARRIER; coll++) {
        for (int kind = 0; kind < K_KINDS; kind++) {
            if (!applies(coll, kind)) {
                continue;
            }
            case_t k = {coll, P_AUTO, kind, NULL, SMALL};
            fails += !run_case(world, rank, &k, buf, cap, where);
        }
    }
    /* Every all-reduce algorithm, the staged shm protocol, the scheduled lane, compression. */
    static const char *const algos[] = {"ring", "rhd", "rd", "shm"};
    for (size_t i = 0; i < sizeof(algos) / sizeof(algos[0]); i++) {
        if (!ja->shm && !strcmp(algos[i], "shm")) {
            continue;
        }
        for (int kind = K_COUNT; kind <= K_COLL; kind++) {
            if (kind == K_ROOT) {
                continue;
            }
            case_t k = {C_ALLREDUCE, P_FORCED, kind, algos[i], SMALL};
            fails += !run_case(world, rank, &k, buf, cap, where);
            if (!strcmp(algos[i], "shm") && kind != K_COLL) {
                k.count = STAGED;
                fails += !run_case(world, rank, &k, buf, cap, where);
            }
        }
    }
    for (int coll = C_ALLREDUCE; coll <= C_ALLGATHER; coll++) {
        for (int kind = K_COUNT; kind <= K_OP; kind++) {
            if (!applies(coll, kind)) {
                continue;
            }
            case_t k = {coll, P_SCHED, kind, NULL, SMALL};
            fails += !run_case(world, rank, &k, buf, cap, where);
        }
    }
    for (int kind = K_COUNT; kind <= K_OP; kind++) {
        if (kind == K_DTYPE) {
            continue; /* fp16 compresses float32 only: the int32 rank would run uncompressed */
        }
        case_t k = {C_ALLREDUCE, P_COMPRESSED, kind, NULL, 40000};
        fails += !run_case(world, rank, &k, buf, cap, where);
    }
    /* The job's communicator was never part of a mismatch: it still works. */
    float x = 1.0f, y = 0.0f;
    st = tempo_allreduce(world, &x, &y, 1, TEMPO_FLOAT32, TEMPO_SUM);
    fails += !rk_check(st == TEMPO_OK && y == (float)NR, "%s rank %d: the job's communicator still "
                       "works (%s)", where, rank, tempo_status_name(st));
    free(buf);
    tempo_compressor_destroy(g_fp16);
    tempo_comm_destroy(world);
    return fails ? 1 : 0;
}

static void run_job(int shm)
{
    job_t *j = calloc(1, sizeof(*j));
    static const char *const env_shm[] = {"TEMPO_SHM_COLL_BYTES=65536", "TEMPO_TIMEOUT=20", NULL};
    static const char *const env_tcp[] = {"TEMPO_HOST_ID=%r", "TEMPO_TIMEOUT=20", NULL};
    job_arg_t a = {shm};
    if (job_start(j, NR, shm ? env_shm : env_tcp, mismatch_rank, &a) != 0) {
        TAP_OK(0, "start %d ranks (%s)", NR, shm ? "shm" : "tcp");
    }
    job_finish(j, 600);
    for (int r = 0; r < NR; r++) {
        char how[64];
        job_describe_exit(j, r, how, sizeof(how));
        TAP_OK(job_exited(j, r, 0), "%s rank %d exited 0 (%s)", shm ? "shm" : "tcp", r, how);
    }
    job_free(j);
    free(j);
}

int main(void)
{
    run_job(1);
    run_job(0);
    return tap_done();
}
