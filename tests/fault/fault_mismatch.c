/*
 * fault_mismatch.c — ranks that call different things under the same collective call fail, every
 * one of them, with TEMPO_ERR_INVALID saying what differs and on which ranks: never TEMPO_OK (not
 * even on a rank whose part only sends, such as a broadcast root or a reduce leaf), never a
 * timeout.
 *
 * Four jobs: 4 ranks and 3 ranks (broadcast and reduce only), each with every rank on one host
 * (shared memory: the shm all-reduce and the shm rings) and with every rank its own host
 * (TEMPO_HOST_ID=%r: tcp). In each, for every collective and path — non-blocking with the
 * automatic choice, the blocking form, every algorithm of tempo_algorithm_info() forced, a
 * priority (the scheduled lane for all-reduce, reduce-scatter and all-gather; ignored by the
 * others) and a compressor (fp16; ignored by broadcast and reduce) — one rank ("odd": the last,
 * unless said otherwise) differs from the others in one way:
 *   count      it passes count + 1 (or 0 where the others pass count)
 *   dtype      int32 where the others pass float32 (same size: the data would flow)
 *   op         max where the others sum
 *   root       1 where the others say 0
 *   own root   rank 0 names itself the root where the others name rank 1 (3 ranks: roots 0/1/1)
 *   coll       it calls all-gather (or all-reduce) where the others call this collective
 *   NULL root  the root alone passes a NULL buffer (broadcast: recvbuf, reduce: recvbuf), so its
 *              call is rejected before it is posted
 *   NULL       the odd rank alone passes a NULL buffer (rejected likewise)
 * and, where the call is the same but the ranks would run it differently:
 *   algorithm  every rank forces an algorithm, the odd rank another one of the collective's (also
 *              with a priority: the scheduled lane's chunks run the forced algorithm; and in the
 *              blocking form, through TEMPO_ALGO, which the odd rank sets otherwise: a job of its
 *              own)
 *   compressor the odd rank alone passes a compressor (qsgd:bits=4), also with a priority
 *   spec       the odd rank passes qsgd:bits=8 where the others pass qsgd:bits=4, also with a
 *              priority
 * (these three at 3 ranks too, on every collective they apply to).
 * Each case runs on a fresh split of the job (the mismatch fails its communicator for good), then
 * a barrier on it. Every rank's call must fail: a rank that rejected its own call with its own
 * reason, every other with TEMPO_ERR_INVALID and a message naming the difference; and every
 * rank's barrier after it must fail with the same news ("ranks disagree"). No case may time out
 * (TEMPO_TIMEOUT is 20 s, probes answer in well under 1 s).
 */
#include "config.h"

#include <tempo.h>

#include "tests/fault/job.h"

#define SMALL 1000
#define STAGED (300 * 1000 + 7) /* elements: several staged shm segments of 64 KiB */
#define NR_MAX 4

enum {
    K_COUNT, K_COUNT0, K_DTYPE, K_OP, K_ROOT, K_ROOT_SELF, K_COLL, K_NULL_ROOT, K_NULL,
    K_ALGO, /* the first of the kinds where the call is the same and how it runs differs */
    K_COMP, K_COMP_SPEC, K_KINDS
};
static const char *const kind_names[K_KINDS] = {
    "count",       "count 0",     "dtype",     "op",         "root",           "own root",
    "collective",  "NULL root buffer", "NULL buffer", "algorithm", "compressor", "compressor spec"};

enum { C_ALLREDUCE, C_REDUCE_SCATTER, C_ALLGATHER, C_BROADCAST, C_REDUCE, C_ALLTOALL, C_BARRIER,
       C_COLLS };
static const char *const coll_names[] = {"allreduce", "reduce_scatter", "allgather", "broadcast",
                                         "reduce",    "alltoall",       "barrier"};

enum { P_AUTO, P_BLOCKING, P_FORCED, P_SCHED, P_COMPRESSED, P_SCHED_FORCED, P_SCHED_COMPRESSED };

typedef struct {
    int coll, path, kind;
    const char *algo; /* P_FORCED, P_SCHED_FORCED; K_ALGO: the others' (blocking: TEMPO_ALGO's) */
    size_t count;
    const char *algo2; /* K_ALGO: the odd rank's */
} case_t;

static int g_nr; /* ranks of the job */

static int is_rooted(int coll)
{
    return coll == C_BROADCAST || coll == C_REDUCE;
}

static int applies(int coll, int kind)
{
    switch (kind) {
    case K_OP: return coll == C_ALLREDUCE || coll == C_REDUCE_SCATTER || coll == C_REDUCE;
    case K_ROOT:
    case K_ROOT_SELF:
    case K_NULL_ROOT: return is_rooted(coll);
    case K_COLL: return 1;
    default: return coll != C_BARRIER;
    }
}

/* The rank whose call differs. */
static int odd_rank(const case_t *k)
{
    return k->kind == K_ROOT_SELF || k->kind == K_NULL_ROOT ? 0 : g_nr - 1;
}

static int sched_coll(int coll)
{
    return coll == C_ALLREDUCE || coll == C_REDUCE_SCATTER || coll == C_ALLGATHER;
}

static tempo_compressor_t g_fp16, g_q4, g_q8; /* fp16:min=0, qsgd:bits=4,min=0, qsgd:bits=8,min=0 */

/* One rank's call of case k: the odd rank's arguments differ as the kind says. */
static tempo_status_t call(tempo_comm_t c, const case_t *k, int rank, void *sbuf, void *rbuf)
{
    int odd = rank == odd_rank(k);
    int coll = k->coll;
    size_t count = k->count;
    tempo_dtype_t dt = TEMPO_FLOAT32;
    tempo_op_t op = TEMPO_SUM;
    int root = k->kind == K_ROOT_SELF ? 1 : 0;
    if (odd) {
        switch (k->kind) {
        case K_COUNT: count++; break;
        case K_COUNT0: count = 0; break;
        case K_DTYPE: dt = TEMPO_INT32; break;
        case K_OP: op = TEMPO_MAX; break;
        case K_ROOT: root = 1; break;
        case K_ROOT_SELF: root = rank; break;
        case K_COLL:
            coll = coll == C_ALLGATHER || coll == C_BARRIER ? C_ALLREDUCE : C_ALLGATHER;
            break;
        case K_NULL:
            if (coll == C_REDUCE) {
                sbuf = NULL;
            } else {
                rbuf = NULL;
            }
            break;
        default: break;
        }
    }
    if (k->kind == K_NULL_ROOT && rank == root) {
        rbuf = NULL;
    }
    tempo_compressor_t comp = g_fp16;
    if (k->kind == K_COMP) {
        comp = odd ? g_q4 : NULL;
    } else if (k->kind == K_COMP_SPEC) {
        comp = odd ? g_q8 : g_q4;
    }
    tempo_attr_t attr;
    memset(&attr, 0, sizeof(attr));
    if (k->path == P_SCHED || k->path == P_SCHED_FORCED || k->path == P_SCHED_COMPRESSED) {
        attr.field_mask = TEMPO_ATTR_PRIORITY | TEMPO_ATTR_TAG;
        attr.priority = 1;
        attr.tag = 7;
    }
    if (k->path == P_FORCED || k->path == P_SCHED_FORCED) {
        attr.field_mask |= TEMPO_ATTR_ALGORITHM;
        attr.algorithm = odd && k->kind == K_ALGO ? k->algo2 : k->algo;
    } else if ((k->path == P_COMPRESSED || k->path == P_SCHED_COMPRESSED) && comp) {
        attr.field_mask |= TEMPO_ATTR_COMPRESSOR;
        attr.compressor = comp;
    }
    if (odd && k->kind == K_COLL &&
        (k->path == P_FORCED || (k->path == P_SCHED && !sched_coll(k->coll)))) {
        /* The other collective runs its automatic choice, and in program order where the
         * others' collective does (a scheduled request is matched by its tag, not by order: one
         * that only some ranks post is a request not posted yet, which times out). */
        attr.field_mask = 0;
    }
    if (k->path == P_BLOCKING) {
        switch (coll) {
        case C_ALLREDUCE: return tempo_allreduce(c, sbuf, rbuf, count, dt, op);
        case C_REDUCE_SCATTER: return tempo_reduce_scatter(c, sbuf, rbuf, count, dt, op);
        case C_ALLGATHER: return tempo_allgather(c, sbuf, rbuf, count, dt);
        case C_BROADCAST: return tempo_broadcast(c, sbuf, rbuf, count, dt, root);
        case C_REDUCE: return tempo_reduce(c, sbuf, rbuf, count, dt, op, root);
        case C_ALLTOALL: return tempo_alltoall(c, sbuf, rbuf, count, dt);
        default: return tempo_barrier(c);
        }
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
    static char ca[96], cb[96];
    *b = NULL;
    switch (k->kind) {
    case K_ALGO:
        snprintf(ca, sizeof(ca), "algorithm %s on rank %d", k->algo2, odd_rank(k));
        snprintf(cb, sizeof(cb), "algorithm %s on rank ", k->algo);
        *a = ca, *b = cb;
        break;
    case K_COMP:
        /* "a compressor on rank 3, no compressor (algorithm ring) on rank 0", or, found by the
         * odd rank, "no compressor (algorithm ring) on rank 0, compressor qsgd:... on rank 3" */
        snprintf(cb, sizeof(cb), "on rank %d", odd_rank(k));
        *a = "no compressor (algorithm ", *b = cb;
        break;
    case K_COMP_SPEC: *a = "another compressor spec on rank ", *b = "compressor qsgd:bits="; break;
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
    case K_ROOT_SELF: *a = "root 0", *b = "root 1"; break;
    case K_COLL:
        *a = k->coll == C_ALLGATHER || k->coll == C_BARRIER ? "allreduce" : "allgather";
        break;
    default: *a = "is NULL"; break;
    }
}

static unsigned char pattern(size_t i)
{
    return (unsigned char)(i * 7 + 3);
}

static int has_all(const char *m, const char *a, const char *b)
{
    return m && strstr(m, a) && (!b || strstr(m, b));
}

static const char *const path_names[] = {
    "", " blocking", " forced ", " with a priority", " compressed", " with a priority, forced ",
    " compressed with a priority"};

static int run_case(tempo_comm_t world, int rank, const case_t *k, char *buf, size_t cap,
                    const char *where)
{
    char label[200];
    snprintf(label, sizeof(label), "%s n=%d: %s%s%s, %s differs on rank %d%s%s", where, g_nr,
             coll_names[k->coll], path_names[k->path],
             k->path == P_FORCED || k->path == P_SCHED_FORCED ? k->algo : "",
             kind_names[k->kind], odd_rank(k), k->kind == K_ALGO ? ": " : "",
             k->kind == K_ALGO ? k->algo2 : "");
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
     * reduction): that rank gets its own reason, its peers hear that it rejected the call. */
    int rejecting = k->kind == K_NULL || k->kind == K_NULL_ROOT ||
                    (k->path == P_COMPRESSED && (k->kind == K_OP || k->kind == K_DTYPE) &&
                     !is_rooted(k->coll));
    if (rejecting && rank != odd_rank(k)) {
        a = "rejected its", b = NULL;
    }
    int ok;
    if (rejecting && rank == odd_rank(k)) {
        ok = rk_check(st != TEMPO_OK && st2 == TEMPO_ERR_INVALID &&
                          has_all(m2, "ranks disagree", NULL),
                      "%s: its call is rejected (%s: %s); its next call fails with its peers' "
                      "news (%s: %s)", label, tempo_status_name(st), m1, tempo_status_name(st2),
                      m2);
    } else {
        ok = rk_check(st == TEMPO_ERR_INVALID && has_all(m1, a, b) && st2 == TEMPO_ERR_INVALID,
                      "%s: TEMPO_ERR_INVALID naming it (%.2f s; %s: %s; then barrier %s)", label,
                      dt, tempo_status_name(st), m1, tempo_status_name(st2));
    }
    tempo_comm_destroy(c);
    return ok;
}

typedef struct {
    int shm;
    int env_algo; /* the job of TEMPO_ALGO differing on the odd rank (blocking K_ALGO only) */
} job_arg_t;

/* TEMPO_ALGO of the env_algo job: the others' and the odd rank's, and the algorithms they name
 * per collective (NULL: not forced). */
static const char *const g_env_algo[2] = {"allreduce:ring,broadcast:tree,reduce:tree",
                                          "allreduce:rd,broadcast:pipeline,reduce:pipeline"};
static const char *const g_env_names[C_COLLS][2] = {
    [C_ALLREDUCE] = {"ring", "rd"}, [C_BROADCAST] = {"tree", "pipeline"},
    [C_REDUCE] = {"tree", "pipeline"}};

static int coll_index(const char *name)
{
    for (int i = 0; i < C_COLLS; i++) {
        if (!strcmp(coll_names[i], name)) {
            return i;
        }
    }
    return -1;
}

/* Every kind of difference of the call that applies to coll on path (count elements). */
static int run_kinds(tempo_comm_t world, int rank, int coll, int path, const char *algo,
                     size_t count, char *buf, size_t cap, const char *where)
{
    int fails = 0;
    if (g_nr < NR_MAX && !is_rooted(coll)) {
        return 0; /* the 3-rank jobs: the rooted collectives (roots 0/1/1 and the like) */
    }
    for (int kind = 0; kind < K_ALGO; kind++) {
        if (!applies(coll, kind)) {
            continue;
        }
        case_t k = {coll, path, kind, algo, count, NULL};
        fails += !run_case(world, rank, &k, buf, cap, where);
    }
    return fails;
}

/* The same call run differently: every rank forces algo (the odd rank algo2), on path P_FORCED or
 * P_SCHED_FORCED (or P_BLOCKING in the env_algo job), or passes a compressor of its own (kind
 * K_COMP, K_COMP_SPEC) on P_COMPRESSED or P_SCHED_COMPRESSED. */
static int run_how(tempo_comm_t world, int rank, int coll, int path, int kind, const char *algo,
                   const char *algo2, size_t count, char *buf, size_t cap, const char *where)
{
    case_t k = {coll, path, kind, algo, count, algo2};
    return !run_case(world, rank, &k, buf, cap, where);
}

/* K_ALGO for coll on path: algo against every other algorithm of coll (shm only on shm). */
static int run_algos(tempo_comm_t world, int rank, int coll, int path, const char *algo,
                     size_t count, char *buf, size_t cap, int shm, const char *where)
{
    int fails = 0;
    tempo_algorithm_info_t ai;
    for (size_t i = 0; tempo_algorithm_info(i, &ai) == TEMPO_OK; i++) {
        if (coll_index(ai.collective) != coll || !strcmp(ai.name, algo) ||
            (!shm && !strcmp(ai.name, "shm"))) {
            continue;
        }
        fails += run_how(world, rank, coll, path, K_ALGO, algo, ai.name, count, buf, cap, where);
    }
    return fails;
}

static int mismatch_rank(int rank, int size, void *arg)
{
    const job_arg_t *ja = arg;
    const char *where = ja->shm ? "shm" : "tcp";
    g_nr = size;
    tempo_comm_t world = NULL;
    if (ja->env_algo) {
        setenv("TEMPO_ALGO", g_env_algo[rank == size - 1], 1);
        where = ja->shm ? "shm, TEMPO_ALGO" : "tcp, TEMPO_ALGO";
    }
    tempo_status_t st = tempo_comm_init_env(&world);
    if (!rk_check(st == TEMPO_OK, "%s rank %d: init (%s)", where, rank, tempo_last_error(NULL))) {
        return 1;
    }
    if (tempo_compressor_create("fp16:min=0", &g_fp16) != TEMPO_OK ||
        tempo_compressor_create("qsgd:bits=4,min=0", &g_q4) != TEMPO_OK ||
        tempo_compressor_create("qsgd:bits=8,min=0", &g_q8) != TEMPO_OK) {
        rk_check(0, "compressors (%s)", tempo_last_error(NULL));
        return 1;
    }
    /* The shm all-reduce runs where the ranks share memory. Under FAULT_ENV another transport may
     * have taken shared memory away on one host (tests/transport/conform.sh): every rank refuses
     * the forced shm all-reduce alike then, so it is left out as across hosts. */
    int shm = ja->shm;
    if (shm) {
        float one = 1, sum = 0;
        tempo_attr_t at = {.field_mask = TEMPO_ATTR_ALGORITHM, .algorithm = "shm"};
        tempo_request_t rq = NULL;
        st = tempo_iallreduce(world, &one, &sum, 1, TEMPO_FLOAT32, TEMPO_SUM, &at, &rq);
        if (st == TEMPO_OK) {
            st = tempo_wait(&rq);
        }
        shm = st != TEMPO_ERR_UNSUPPORTED;
        if (!shm) {
            rk_diag("%s rank %d: no shm all-reduce here (%s)", where, rank,
                    tempo_last_error(world));
        }
    }
    size_t cap = 2 * (size_t)NR_MAX * (STAGED + 8) * 8;
    char *buf = malloc(cap);
    int fails = 0;
    for (int coll = 0; ja->env_algo && coll < C_COLLS; coll++) {
        /* Blocking calls, the algorithm forced by TEMPO_ALGO: the odd rank's differs. */
        if (g_env_names[coll][0]) {
            fails += run_how(world, rank, coll, P_BLOCKING, K_ALGO, g_env_names[coll][0],
                             g_env_names[coll][1], SMALL, buf, cap, where);
        }
    }
    for (int coll = 0; !ja->env_algo && coll < C_COLLS; coll++) {
        fails += run_kinds(world, rank, coll, P_AUTO, NULL, SMALL, buf, cap, where);
        fails += run_kinds(world, rank, coll, P_BLOCKING, NULL, SMALL, buf, cap, where);
        fails += run_kinds(world, rank, coll, P_SCHED, NULL, SMALL, buf, cap, where);
    }
    /* Every algorithm forced (the pipelines at a size of several segments too), the staged shm
     * all-reduce. */
    tempo_algorithm_info_t ai;
    for (size_t i = 0; tempo_algorithm_info(i, &ai) == TEMPO_OK; i++) {
        int coll = coll_index(ai.collective);
        if (coll < 0 || (!shm && !strcmp(ai.name, "shm"))) {
            continue; /* send/recv; shm across hosts is refused on every rank alike */
        }
        if (ja->env_algo) {
            continue;
        }
        fails += run_kinds(world, rank, coll, P_FORCED, ai.name, SMALL, buf, cap, where);
        if (!strcmp(ai.name, "pipeline") || (shm && !strcmp(ai.name, "shm"))) {
            fails += run_kinds(world, rank, coll, P_FORCED, ai.name, STAGED, buf, cap, where);
        }
        /* Another algorithm forced on the odd rank, with and without a priority (the scheduled
         * lane's chunks run it: all-reduce, reduce-scatter, all-gather; the others ignore it). */
        fails += run_algos(world, rank, coll, P_FORCED, ai.name, SMALL, buf, cap, shm, where);
        fails += run_algos(world, rank, coll, P_SCHED_FORCED, ai.name, SMALL, buf, cap, shm,
                           where);
    }
    /* A compressor: taken by all-reduce and reduce-scatter, ignored by broadcast and reduce. */
    static const int comp_colls[] = {C_ALLREDUCE, C_REDUCE_SCATTER, C_BROADCAST, C_REDUCE};
    for (size_t i = 0; !ja->env_algo && i < sizeof(comp_colls) / sizeof(comp_colls[0]); i++) {
        fails += run_kinds(world, rank, comp_colls[i], P_COMPRESSED, NULL, 40000, buf, cap, where);
    }
    /* A compressor on the odd rank only, and another spec there, with and without a priority. */
    for (int coll = C_ALLREDUCE; !ja->env_algo && coll <= C_REDUCE_SCATTER; coll++) {
        for (int kind = K_COMP; kind <= K_COMP_SPEC; kind++) {
            fails += run_how(world, rank, coll, P_COMPRESSED, kind, NULL, NULL, 40000, buf, cap,
                             where);
            fails += run_how(world, rank, coll, P_SCHED_COMPRESSED, kind, NULL, NULL, 40000, buf,
                             cap, where);
        }
    }
    /* The job's communicator was never part of a mismatch: it still works (with TEMPO_ALGO
     * differing, the sum as a reduce-scatter, which TEMPO_ALGO leaves alone: an all-reduce would
     * disagree). */
    float x = 1.0f, y = 0.0f;
    if (ja->env_algo) {
        float xs[NR_MAX] = {1.0f, 1.0f, 1.0f, 1.0f};
        st = tempo_reduce_scatter(world, xs, &y, 1, TEMPO_FLOAT32, TEMPO_SUM);
    } else {
        st = tempo_allreduce(world, &x, &y, 1, TEMPO_FLOAT32, TEMPO_SUM);
    }
    fails += !rk_check(st == TEMPO_OK && y == (float)size, "%s rank %d: the job's communicator "
                       "still works (%s)", where, rank, tempo_status_name(st));
    free(buf);
    tempo_compressor_destroy(g_fp16);
    tempo_compressor_destroy(g_q4);
    tempo_compressor_destroy(g_q8);
    tempo_comm_destroy(world);
    return fails ? 1 : 0;
}

static void run_job(int shm, int nr, int env_algo)
{
    job_t *j = calloc(1, sizeof(*j));
    static const char *const env_shm[] = {"TEMPO_SHM_COLL_BYTES=65536", "TEMPO_TIMEOUT=20", NULL};
    static const char *const env_tcp[] = {"TEMPO_HOST_ID=%r", "TEMPO_TIMEOUT=20", NULL};
    job_arg_t a = {shm, env_algo};
    if (job_start(j, nr, shm ? env_shm : env_tcp, mismatch_rank, &a) != 0) {
        TAP_OK(0, "start %d ranks (%s)", nr, shm ? "shm" : "tcp");
    }
    job_finish(j, 600);
    for (int r = 0; r < nr; r++) {
        char how[64];
        job_describe_exit(j, r, how, sizeof(how));
        TAP_OK(job_exited(j, r, 0), "%s n=%d rank %d exited 0 (%s)", shm ? "shm" : "tcp", nr, r,
               how);
    }
    job_free(j);
    free(j);
}

int main(void)
{
    for (int nr = NR_MAX; nr >= 3; nr--) {
        run_job(1, nr, 0);
        run_job(0, nr, 0);
        run_job(1, nr, 1);
        run_job(0, nr, 1);
    }
    return tap_done();
}
