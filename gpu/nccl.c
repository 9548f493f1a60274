/*
 * gpu/nccl.c — NCCL as the backend of CUDA device buffers (gpu/nccl.h), loaded at run time.
 *
 * A call is a schedule of tempo's (collectives/sched.c): its first step enqueues the NCCL call on
 * the stream and records an event after it (in the communicator's CUDA context, pushed: the
 * engine's thread has no current context); then the rounds of a dissemination barrier carry the
 * call's signature between the ranks on tempo's own connections, while the GPU works; the last
 * step polls the event, and NCCL's asynchronous error. A call that fails after it was enqueued (an NCCL error, a peer's failure, a
 * timeout) leaves a kernel that may never finish: the NCCL communicator is aborted
 * (ncclCommAbort), which ends it, and every later NCCL call on this tempo communicator fails.
 */
#include "config.h"

#include "gpu/nccl.h"

#include "collectives/coll.h"
#include "core/cfg.h"
#include "gpu/cuda.h"

#include <stdio.h>
#include <string.h>

#if TEMPO_HAVE_CUDA && TEMPO_HAVE_NCCL
#include <dlfcn.h>
#include "gpu/nccl_api.h"
#include <pthread.h>

static tempo__nccl_api_t nc;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int loaded, nccl_version;
static char why_not[240];

static void load(void)
{
    if (tempo__config_load() != TEMPO_OK) {
        snprintf(why_not, sizeof(why_not), "the configuration is invalid: %s", tempo__errmsg());
        return;
    }
    void *h = dlopen(tempo__cfg.nccl_library, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(why_not, sizeof(why_not), "no NCCL library (%s)", dlerror());
        return;
    }
#define SYM(member, name) {name, (void **)&nc.member, 0},
    static const tempo__dlsym_t syms[] = {TEMPO__NCCL_ENTRY_POINTS(SYM)};
#undef SYM
    const char *missing = tempo__dl_resolve(h, syms, TEMPO_ARRAY_SIZE(syms), NULL);
    if (missing) {
        snprintf(why_not, sizeof(why_not), "the NCCL library lacks %s", missing);
        return;
    }
    nc.version(&nccl_version);
    loaded = 1;
}

static int usable(char *why, size_t len)
{
    pthread_once(&once, load);
    if (!loaded && why) {
        snprintf(why, len, "%s", why_not);
    }
    return loaded;
}

/* tempo's types and reductions in NCCL's terms; -1: NCCL has none. */
static int nccl_dtype(tempo_dtype_t t)
{
    switch (t) {
    case TEMPO_INT8: return ncclInt8;
    case TEMPO_UINT8: return ncclUint8;
    case TEMPO_INT32: return ncclInt32;
    case TEMPO_UINT32: return ncclUint32;
    case TEMPO_INT64: return ncclInt64;
    case TEMPO_UINT64: return ncclUint64;
    case TEMPO_FLOAT16: return ncclFloat16;
    case TEMPO_FLOAT32: return ncclFloat32;
    case TEMPO_FLOAT64: return ncclFloat64;
    case TEMPO_BFLOAT16: return ncclBfloat16;
    default: return -1;
    }
}

static int nccl_op(tempo_op_t op)
{
    switch (op) {
    case TEMPO_SUM: return ncclSum;
    case TEMPO_PROD: return ncclProd;
    case TEMPO_MAX: return ncclMax;
    case TEMPO_MIN: return ncclMin;
    case TEMPO_AVG: return ncclAvg;
    default: return -1;
    }
}

/* An NCCL result as a tempo status. */
static tempo_status_t nccl_status(ncclResult_t r)
{
    switch (r) {
    case ncclInvalidArgument:
    case ncclInvalidUsage: return TEMPO_ERR_INVALID;
    case ncclRemoteError: return TEMPO_ERR_REMOTE;
    default: return TEMPO_ERR_SYSTEM;
    }
}

/* A tempo communicator's NCCL state (comm->gpu). */
typedef struct {
    ncclComm_t comm;
    void *ctx, *stream; /* the CUDA context it was made in, and its own stream */
    int broken;         /* a call failed after it was enqueued: aborted, no more calls */
    char why[200];      /* broken: why */
} gcomm_t;

int tempo__nccl_takes(int coll, tempo_op_t redop, tempo_dtype_t dtype, int compressed,
                      const void *sendbuf, size_t sbytes, const void *recvbuf, size_t rbytes)
{
    if (strcmp(tempo__cfg.gpu_backend, "nccl") != 0 || compressed) {
        return 0;
    }
    int reducing = coll == TEMPO__COLL_ALLREDUCE || coll == TEMPO__COLL_REDUCE_SCATTER ||
                   coll == TEMPO__COLL_REDUCE;
    if ((coll != TEMPO__COLL_BROADCAST && coll != TEMPO__COLL_ALLGATHER && !reducing) ||
        nccl_dtype(dtype) < 0 || (reducing && nccl_op(redop) < 0)) {
        return 0;
    }
    int any = 0;
    if (sbytes && sendbuf) {
        if (tempo__cuda_memtype(sendbuf) != TEMPO_MEMTYPE_CUDA) {
            return 0;
        }
        any = 1;
    }
    if (rbytes && recvbuf) {
        if (tempo__cuda_memtype(recvbuf) != TEMPO_MEMTYPE_CUDA) {
            return 0;
        }
        any = 1;
    }
    return any;
}

tempo_status_t tempo__nccl_comm_ready(struct tempo_comm *comm)
{
    gcomm_t *g = comm->gpu;
    if (g) {
        if (g->broken) {
            return tempo__err(TEMPO_ERR_SYSTEM, "NCCL: this communicator's NCCL communicator was "
                              "aborted after an earlier failure (%s)", g->why);
        }
        return TEMPO_OK;
    }
    char why[240];
    if (!usable(why, sizeof(why))) {
        return tempo__err(TEMPO_ERR_UNSUPPORTED, "TEMPO_GPU_BACKEND=nccl, but %s", why);
    }
    /* Rank 0's unique id reaches every member by a broadcast on this communicator: every member
     * makes its first NCCL call here, so every member takes part. */
    ncclUniqueId id;
    memset(&id, 0, sizeof(id));
    ncclResult_t r = ncclSuccess;
    if (comm->rank == 0) {
        r = nc.get_unique_id(&id);
    }
    /* (a failure on rank 0 still broadcasts, a zero id the others refuse, so none waits) */
    tempo_status_t st = tempo_broadcast(comm, &id, &id, sizeof(id), TEMPO_UINT8, 0);
    if (st != TEMPO_OK) {
        char bw[TEMPO_ERRMSG_LEN - 200];
        snprintf(bw, sizeof(bw), "%s", tempo_last_error(comm));
        return tempo__err(st, "NCCL: the broadcast of NCCL's unique id, which every rank makes at "
                          "its first call on device buffers under TEMPO_GPU_BACKEND=nccl, "
                          "failed: %s", bw);
    }
    if (r != ncclSuccess) {
        return tempo__err(nccl_status(r), "NCCL: ncclGetUniqueId: %s", nc.error_string(r));
    }
    static const ncclUniqueId zero;
    if (!memcmp(&id, &zero, sizeof(id))) {
        return tempo__err(TEMPO_ERR_REMOTE, "NCCL: rank 0 could not make NCCL's unique id");
    }
    g = tempo__calloc(1, sizeof(*g), "NCCL communicator");
    if (!g) {
        return TEMPO_ERR_NOMEM;
    }
    st = tempo__cuda_stream_new(&g->ctx, &g->stream);
    char prep[TEMPO_ERRMSG_LEN - 200];
    snprintf(prep, sizeof(prep), "%s", st == TEMPO_OK ? "" : tempo__errmsg());
    /* ncclCommInitRank waits for every rank: all go on, or none (a rank that could not make its
     * stream must not leave the others waiting in it) */
    int32_t mine = st == TEMPO_OK, all = 0;
    tempo_status_t ast = tempo_allreduce(comm, &mine, &all, 1, TEMPO_INT32, TEMPO_MIN);
    if (st != TEMPO_OK || ast != TEMPO_OK || !all) {
        if (st == TEMPO_OK) {
            tempo__cuda_stream_free(g->ctx, g->stream);
        }
        tempo__free(g);
        if (st != TEMPO_OK) {
            return tempo__err(st, "NCCL: preparing its communicator: %s", prep);
        }
        if (ast != TEMPO_OK) {
            char aw[TEMPO_ERRMSG_LEN - 200];
            snprintf(aw, sizeof(aw), "%s", tempo_last_error(comm));
            return tempo__err(ast, "NCCL: preparing its communicator: %s", aw);
        }
        return tempo__err(TEMPO_ERR_REMOTE, "NCCL: another rank could not prepare its NCCL "
                          "communicator (its error says why)");
    }
    r = nc.init_rank(&g->comm, comm->size, id, comm->rank);
    if (r != ncclSuccess) {
        tempo__cuda_stream_free(g->ctx, g->stream);
        tempo__free(g);
        return tempo__err(nccl_status(r), "NCCL: ncclCommInitRank (rank %d of %d): %s", comm->rank,
                          comm->size, nc.error_string(r));
    }
    comm->gpu = g;
    return TEMPO_OK;
}

/* Abort g's NCCL communicator (once): a call that will not complete is ended. */
static void comm_break(gcomm_t *g, const char *why)
{
    if (!g->broken) {
        g->broken = 1;
        snprintf(g->why, sizeof(g->why), "%s", why);
        tempo__cuda_ctx_push(g->ctx);
        nc.abort(g->comm);
        tempo__cuda_ctx_pop();
    }
}

void tempo__nccl_comm_free(struct tempo_comm *comm)
{
    gcomm_t *g = comm->gpu;
    if (!g) {
        return;
    }
    tempo__cuda_ctx_push(g->ctx);
    if (!g->broken) {
        nc.destroy(g->comm);
    }
    tempo__cuda_ctx_pop();
    tempo__cuda_stream_free(g->ctx, g->stream);
    tempo__free(g);
    comm->gpu = NULL;
}

/* One call's state (the schedule's ext). */
typedef struct {
    void *event;        /* recorded after the call; NULL: not enqueued yet */
    uint64_t remote_ns; /* when NCCL first said a peer failed (ncclRemoteError), 0: not */
    void (*sched_cleanup)(tempo__op_t *op);
} call_t;

/* How long a call that NCCL says a peer broke waits for that peer's own word (the failure it
 * found, which tempo relays on its own connections) before it fails with NCCL's. */
#define REMOTE_GRACE_NS 2000000000ull

static ncclResult_t enqueue(tempo__op_t *op, gcomm_t *g, cudaStream_t s)
{
    ncclDataType_t t = (ncclDataType_t)nccl_dtype(op->dtype);
    ncclRedOp_t rop = (ncclRedOp_t)nccl_op(op->redop);
    switch (op->coll) {
    case TEMPO__COLL_ALLREDUCE:
        return nc.all_reduce(op->sendbuf, op->recvbuf, op->count, t, rop, g->comm, s);
    case TEMPO__COLL_REDUCE_SCATTER:
        return nc.reduce_scatter(op->sendbuf, op->recvbuf, op->count, t, rop, g->comm, s);
    case TEMPO__COLL_ALLGATHER:
        return nc.all_gather(op->sendbuf, op->recvbuf, op->count, t, g->comm, s);
    case TEMPO__COLL_BROADCAST:
        return nc.broadcast(op->sendbuf, op->recvbuf, op->count, t, op->root, g->comm, s);
    case TEMPO__COLL_REDUCE:
        return nc.reduce(op->sendbuf, op->recvbuf, op->count, t, rop, op->root, g->comm, s);
    default: return ncclInvalidUsage;
    }
}

/* A call failed here (st, what): end NCCL's work on every rank (this one's abort; the others
 * learn of the failure, which fails their calls, whose cleanup aborts theirs) and fail the
 * communicator for good. Returns st with the message (the schedule fails the call with it). */
static tempo_status_t call_failed(tempo__op_t *op, gcomm_t *g, tempo_status_t st, const char *what)
{
    char msg[TEMPO_ERRMSG_LEN - 64];
    snprintf(msg, sizeof(msg), "NCCL: %s on rank %d", what, op->comm->rank);
    comm_break(g, msg);
    tempo__comm_fail_found(op->comm, st, msg);
    return tempo__err_quiet(st, "%s", msg);
}

/* The schedule's first step: enqueue the NCCL call and an event after it. */
static tempo_status_t call_enqueue(tempo__sched_t *s, void *arg)
{
    tempo__op_t *op = s->op;
    gcomm_t *g = op->comm->gpu;
    call_t *k = arg;
    char what[200];
    if (g->broken) {
        return tempo__err_quiet(TEMPO_ERR_SYSTEM, "NCCL: the NCCL communicator was aborted after "
                                "an earlier failure (%s)", g->why);
    }
    cudaStream_t st = (cudaStream_t)(op->has_gpu_stream ? op->gpu_stream : g->stream);
    if (tempo__cuda_ctx_push(g->ctx) != 0) {
        return call_failed(op, g, TEMPO_ERR_SYSTEM, tempo__errmsg());
    }
    ncclResult_t r = enqueue(op, g, st);
    tempo__cuda_ctx_pop();
    if (r != ncclSuccess) {
        snprintf(what, sizeof(what), "the call failed (%s)", nc.error_string(r));
        return call_failed(op, g, nccl_status(r), what);
    }
    if (tempo__cuda_event_after(g->ctx, st, &k->event) != TEMPO_OK) {
        return call_failed(op, g, TEMPO_ERR_SYSTEM, tempo__errmsg());
    }
    return TEMPO_OK;
}

/* The schedule's last step: TEMPO_INPROGRESS until the stream has passed the call. */
static tempo_status_t call_wait(tempo__sched_t *s, void *arg)
{
    tempo__op_t *op = s->op;
    gcomm_t *g = op->comm->gpu;
    call_t *k = arg;
    char what[200];
    int passed = tempo__cuda_event_passed(g->ctx, k->event);
    if (passed < 0) {
        return call_failed(op, g, TEMPO_ERR_SYSTEM, tempo__errmsg());
    }
    /* NCCL's asynchronous error, also once the stream has passed the call: a call that ended
     * because a peer aborted passes without its result. */
    ncclResult_t ar = ncclSuccess;
    ncclResult_t q = nc.async_error(g->comm, &ar);
    if (q == ncclSuccess && ar == ncclRemoteError) {
        uint64_t now = tempo__now_ns();
        k->remote_ns = k->remote_ns ? k->remote_ns : now;
        if (now - k->remote_ns < REMOTE_GRACE_NS) {
            return TEMPO_INPROGRESS; /* (the engine fails it with the peer's word once it comes) */
        }
    }
    if (q != ncclSuccess || (ar != ncclSuccess && ar != ncclInProgress)) {
        snprintf(what, sizeof(what), "asynchronous error (%s)",
                 nc.error_string(q != ncclSuccess ? q : ar));
        return call_failed(op, g, nccl_status(q != ncclSuccess ? q : ar), what);
    }
    /* (not passed: polled again; past TEMPO_SPIN without events the engine polls between
     * sleeps of up to 1 ms, its policy for any wait) */
    return passed ? TEMPO_OK : TEMPO_INPROGRESS;
}

/* The call completed (engine): if it failed while NCCL still runs it, end that now, so that the
 * stream it is on (perhaps the caller's) goes on before the caller collects the error (the cleanup
 * waits for it later). */
static void call_done(tempo__op_t *op)
{
    tempo__sched_t *s = op->priv;
    call_t *k = s ? s->ext : NULL;
    gcomm_t *g = op->comm->gpu;
    if (k && k->event && op->status != TEMPO_OK && tempo__cuda_event_passed(g->ctx, k->event) == 0) {
        comm_break(g, op->errmsg[0] ? op->errmsg : "a call failed");
    }
}

static void call_cleanup(tempo__op_t *op)
{
    tempo__sched_t *s = op->priv;
    if (!s) {
        return;
    }
    gcomm_t *g = op->comm->gpu;
    call_t *k = s->ext;
    if (k->event) {
        if (op->status != TEMPO_OK && tempo__cuda_event_passed(g->ctx, k->event) == 0) {
            /* Failed (a peer's failure, a disagreement, a deadline) while NCCL still runs it:
             * end it. */
            comm_break(g, op->errmsg[0] ? op->errmsg : "a call failed");
            tempo__cuda_event_wait(g->ctx, k->event);
        }
        tempo__cuda_event_free(g->ctx, k->event);
    }
    void (*inner)(tempo__op_t *) = k->sched_cleanup;
    tempo__free(k);
    s->ext = NULL;
    inner(op);
}

/* The call as a schedule: enqueue it; meanwhile, the rounds of a dissemination barrier whose
 * messages carry the call's signature (NCCL checks nothing: a rank that made another call, or
 * none, is found here, and every rank fails instead of returning NCCL's garbage, core/check.c);
 * then wait for the stream. */
tempo_status_t tempo__nccl_start(tempo__op_t *op)
{
    if (!op->comm->gpu) {
        return tempo__err(TEMPO_ERR_INTERNAL, "NCCL: no NCCL communicator");
    }
    if (op->has_gpu_stream && op->lane) {
        /* (api.c keeps stream-ordered scheduled requests host-staged: their chunks start later
         * than the caller's later work on the stream) */
        return tempo__err(TEMPO_ERR_INTERNAL, "NCCL: a stream-ordered chunk");
    }
    tempo__sched_t *s;
    TEMPO_CHECK(tempo__sched_create(op, 0, TEMPO_UINT8, TEMPO_SUM, &s));
    call_t *k = tempo__calloc(1, sizeof(*k), "NCCL call");
    if (!k) {
        return TEMPO_ERR_NOMEM; /* (op->cleanup frees the schedule) */
    }
    s->ext = k;
    k->sched_cleanup = op->cleanup;
    op->cleanup = call_cleanup;
    op->on_complete = call_done;
    tempo__sched_call(s, call_enqueue, k);
    tempo__sched_close(s);
    tempo__sched_round(s);
    tempo__sched_call(s, call_wait, k);
    return tempo__sched_ready(s);
}

void tempo__nccl_describe(char *buf, size_t len)
{
    char why[240];
    if (!usable(why, sizeof(why))) {
        snprintf(buf, len, "unusable here: %s", why);
        return;
    }
    snprintf(buf, len, "%d.%d.%d loaded; %s", nccl_version / 10000, nccl_version / 100 % 100,
             nccl_version % 100,
             !strcmp(tempo__cfg.gpu_backend, "nccl")
                 ? "device buffers run on it (TEMPO_GPU_BACKEND=nccl)"
                 : "not used (TEMPO_GPU_BACKEND=native)");
}

#else /* !(TEMPO_HAVE_CUDA && TEMPO_HAVE_NCCL) */

int tempo__nccl_takes(int coll, tempo_op_t redop, tempo_dtype_t dtype, int compressed,
                      const void *sendbuf, size_t sbytes, const void *recvbuf, size_t rbytes)
{
    (void)coll, (void)redop, (void)dtype, (void)compressed;
    (void)sendbuf, (void)sbytes, (void)recvbuf, (void)rbytes;
    return 0;
}

tempo_status_t tempo__nccl_comm_ready(struct tempo_comm *comm)
{
    (void)comm;
    return tempo__err(TEMPO_ERR_UNSUPPORTED, "TEMPO_GPU_BACKEND=nccl, but this build has no NCCL");
}

tempo_status_t tempo__nccl_start(tempo__op_t *op)
{
    (void)op;
    return tempo__err(TEMPO_ERR_UNSUPPORTED, "this build has no NCCL");
}

void tempo__nccl_comm_free(struct tempo_comm *comm)
{
    (void)comm;
}

void tempo__nccl_describe(char *buf, size_t len)
{
    snprintf(buf, len, "this build has no NCCL");
}

#endif
