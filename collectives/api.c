/*
 * api.c — the public entry points of tempo.h: communicator lifecycle (init, split, destroy, abort),
 * argument validation, posting collectives and point-to-point operations, requests, introspection.
 *
 * It sits on top of every layer because creating a communicator involves all of them: the
 * configuration and rendezvous (core), the connections (transport), the host identity (topo) and
 * the shared-memory collective state (collectives). Every entry point takes the world lock; a
 * failure is described in the thread's error text and copied to the communicator's last error.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>
#include <unistd.h>

#include "collectives/coll.h"
#include "gpu/cuda.h"
#include "gpu/ipc.h"
#include "gpu/nccl.h"
#include "core/bootstrap.h"
#include "core/cfg.h"
#include "core/flight.h"
#include "core/trace.h"
#include "topo/host.h"

struct tempo_request; /* public name of tempo__op_t */

tempo_status_t tempo__barrier_dissemination_start(tempo__op_t *op);

/* ---------------------------------------------------------------------------------------------- */
/* Errors                                                                                         */
/* ---------------------------------------------------------------------------------------------- */

/* Record st's text as comm's last error (the text is already in the thread's buffer). */
static tempo_status_t comm_err(struct tempo_comm *c, tempo_status_t st)
{
    if (c && st < 0) {
        snprintf(c->last_error, sizeof(c->last_error), "%s", tempo__errmsg());
    }
    return st;
}

const char *tempo_last_error(tempo_comm_t comm)
{
    return comm ? comm->last_error : tempo__errmsg();
}

const char *tempo_version(void)
{
    return PACKAGE_VERSION;
}

int tempo_comm_rank(tempo_comm_t comm)
{
    return comm ? comm->rank : -1;
}

int tempo_comm_size(tempo_comm_t comm)
{
    return comm ? comm->size : -1;
}

/* ---------------------------------------------------------------------------------------------- */
/* Communicator setup                                                                             */
/* ---------------------------------------------------------------------------------------------- */

static void coll_free(struct tempo_comm *c)
{
    tempo__coll_comm_t *cc = c->coll;
    tempo__nccl_comm_free(c);
    tempo__ipc_comm_free(c);
    if (cc) {
        tempo__mem_free_all(c);
        tempo__sq_destroy(cc->sq);
        tempo__shm_coll_destroy(cc->shm);
        tempo__shm_coll_destroy(cc->shm_sched);
        tempo__free(cc);
        c->coll = NULL;
    }
}

/* Collective over c: parse TEMPO_ALGO and set up shared-memory collectives where possible. */
static tempo_status_t coll_setup(struct tempo_comm *c)
{
    tempo__coll_comm_t *cc = tempo__calloc(1, sizeof(*cc), "collective state");
    if (!cc) {
        return TEMPO_ERR_NOMEM;
    }
    c->coll = cc;
    c->coll_free = coll_free;
    c->algo_name = tempo__algo_name_of;
    c->sched_state = tempo__sq_flight_state;
    TEMPO_CHECK(tempo__algo_parse_env(cc, tempo__cfg.algo));
    if (c->all_local && c->size > 1 && tempo__tl_shm_on(c->world)) {
        tempo_status_t st = tempo__shm_coll_create(c, &cc->shm);
        if (st == TEMPO_OK) {
            st = tempo__shm_coll_create(c, &cc->shm_sched);
        }
        if (st == TEMPO_ERR_NOMEM || st == TEMPO_ERR_SYSTEM) {
            /* Every rank gets the same status from the collective creation. */
            TEMPO_WARN(TEMPO_SUB_INIT, "shared-memory collectives unavailable: %s",
                       tempo__errmsg());
            tempo__shm_coll_destroy(cc->shm);
            cc->shm = NULL;
        } else if (st != TEMPO_OK) {
            return st;
        }
    }
    return TEMPO_OK;
}

static uint64_t random_u64(void)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v)) {
        v = tempo__now_ns() ^ ((uint64_t)getpid() << 32);
    }
    return v;
}

static tempo_status_t check_config(const tempo_config_t *cfg)
{
    if (!cfg) {
        return TEMPO_OK;
    }
    if ((cfg->field_mask & TEMPO_CONFIG_RANK) &&
        (cfg->size < 1 || cfg->rank < 0 || cfg->rank >= cfg->size)) {
        return tempo__err(TEMPO_ERR_INVALID, "config: rank %d / size %d out of range", cfg->rank,
                          cfg->size);
    }
    if ((cfg->field_mask & TEMPO_CONFIG_ROOT) && (!cfg->root || !cfg->root[0])) {
        return tempo__err(TEMPO_ERR_INVALID, "config: root is set but empty");
    }
    if ((cfg->field_mask & TEMPO_CONFIG_HOST_ID) && !cfg->host_id) {
        return tempo__err(TEMPO_ERR_INVALID, "config: host_id is set but NULL");
    }
    if ((cfg->field_mask & TEMPO_CONFIG_TIMEOUT) && !(cfg->timeout_s > 0)) {
        return tempo__err(TEMPO_ERR_INVALID, "config: timeout_s must be > 0");
    }
    return TEMPO_OK;
}

static tempo_status_t init_world(const tempo_config_t *cfg, tempo_comm_t *comm_p)
{
    tempo__launch_t launch;
    TEMPO_CHECK(tempo__launch_detect(cfg, &launch));
    tempo__log_set_rank(launch.rank);
    double timeout =
        (cfg && (cfg->field_mask & TEMPO_CONFIG_TIMEOUT)) ? cfg->timeout_s : tempo__cfg.timeout_s;
    uint64_t deadline = tempo__deadline_after(timeout);
    TEMPO_INFO(TEMPO_SUB_INIT, "rank %d of %d (from %s), job key %s", launch.rank, launch.size,
               launch.source, launch.job_key);

    tempo__bootstrap_t *bs = NULL;
    tempo__addr_t local;
    TEMPO_CHECK(tempo__bootstrap_open(&launch, deadline, &bs, &local));

    tempo__peer_info_t me;
    memset(&me, 0, sizeof(me));
    me.rank = launch.rank;
    me.pid = (int32_t)getpid();
    me.uuid = random_u64();
    me.tag = random_u64();
    me.ncpus = (uint32_t)tempo__host_ncpus();
    snprintf(me.hostname, sizeof(me.hostname), "%s", tempo__hostname());
    const char *host_override =
        (cfg && (cfg->field_mask & TEMPO_CONFIG_HOST_ID)) ? cfg->host_id : tempo__cfg.host_id;
    me.host_id = tempo__host_id(host_override, launch.rank);
    me.machine_id = tempo__machine_id();

    int listen_fd = -1;
    tempo__peer_info_t *table = NULL;
    tempo__world_t *w = NULL;
    tempo_status_t st;
    if (tempo__cfg.ifname[0]) { /* the data transport's interface, chosen by the user */
        TEMPO_CHECK_GOTO(tempo__addr_of_ifname(tempo__cfg.ifname, local.ss.ss_family, &local), st,
                         fail_bs);
    }
    TEMPO_CHECK_GOTO(tempo__tl_prepare(&local, &me, &listen_fd), st, fail_bs);
    TEMPO_CHECK_GOTO(tempo__bootstrap_allgather(bs, &me, sizeof(me), deadline, (void **)&table), st,
                     fail_fd);
    tempo__bootstrap_close(bs);
    bs = NULL;
    for (int r = 0; r < launch.size; r++) {
        if (table[r].rank != r) {
            st = tempo__err(TEMPO_ERR_BOOTSTRAP, "rendezvous table is inconsistent at rank %d", r);
            goto fail_fd;
        }
    }
    TEMPO_CHECK_GOTO(tempo__world_create(launch.rank, launch.size, table, timeout, &w), st,
                     fail_fd);
    tempo__free(table);
    table = NULL;

    pthread_mutex_lock(&w->lock);
    st = tempo__tl_setup(w, listen_fd, deadline);
    listen_fd = -1;
    struct tempo_comm *c = NULL;
    if (st == TEMPO_OK) {
        int *ranks = tempo__malloc(sizeof(int) * (size_t)w->size, "ranks");
        st = ranks ? TEMPO_OK : TEMPO_ERR_NOMEM;
        for (int r = 0; ranks && r < w->size; r++) {
            ranks[r] = r;
        }
        if (st == TEMPO_OK) {
            st = tempo__comm_create(w, ranks, w->size, w->rank, 0, &c);
        }
        tempo__free(ranks);
    }
    if (st == TEMPO_OK) {
        st = coll_setup(c);
    }
    if (st == TEMPO_OK) {
        st = tempo__trace_open(w);
    }
    pthread_mutex_unlock(&w->lock);
    if (st == TEMPO_OK) {
        st = tempo__engine_thread_start(w);
    }
    if (st != TEMPO_OK) {
        if (c) {
            pthread_mutex_lock(&w->lock);
            tempo__comm_free(c);
            pthread_mutex_unlock(&w->lock);
        }
        tempo__world_destroy(w, 0);
        return st;
    }
    TEMPO_INFO(TEMPO_SUB_INIT, "communicator of %d ranks ready (%d on this host%s)", w->size,
               w->nlocal, w->oversubscribed ? ", more than CPUs: yielding while waiting" : "");
    *comm_p = c;
    return TEMPO_OK;

fail_fd:
    if (listen_fd >= 0) {
        close(listen_fd);
    }
fail_bs:
    tempo__free(table);
    tempo__bootstrap_close(bs);
    return st;
}

tempo_status_t tempo_comm_init(const tempo_config_t *config, tempo_comm_t *comm_p)
{
    if (!comm_p) {
        return tempo__err(TEMPO_ERR_INVALID, "tempo_comm_init: comm_p is NULL");
    }
    TEMPO_CHECK(tempo__config_load());
    TEMPO_CHECK(check_config(config));
    return init_world(config, comm_p);
}

tempo_status_t tempo_comm_init_env(tempo_comm_t *comm_p)
{
    return tempo_comm_init(NULL, comm_p);
}

/* ---------------------------------------------------------------------------------------------- */
/* Posting                                                                                        */
/* ---------------------------------------------------------------------------------------------- */

typedef struct {
    int coll;
    const void *sendbuf;
    void *recvbuf;
    size_t count;
    tempo_dtype_t dtype;
    tempo_op_t redop;
    int root;
    uint32_t ptag;
} args_t;

static int overlap(const void *a, size_t alen, const void *b, size_t blen)
{
    const char *x = a, *y = b;
    return a && b && alen && blen && x < y + blen && y < x + alen;
}

/* Validate arguments; TEMPO_ERR_INVALID with a message naming the problem. *sbytes_p and
 * *rbytes_p receive the bytes of the send and receive buffers this rank uses (0: none). */
static tempo_status_t validate(const struct tempo_comm *c, const args_t *a, size_t *sbytes_p,
                               size_t *rbytes_p)
{
    *sbytes_p = *rbytes_p = 0;
    const char *cn = tempo__coll_name(a->coll);
    int n = c->size, r = c->rank;
    int has_op = a->coll == TEMPO__COLL_ALLREDUCE || a->coll == TEMPO__COLL_REDUCE_SCATTER ||
                 a->coll == TEMPO__COLL_REDUCE;
    if (a->coll == TEMPO__COLL_BARRIER) {
        return TEMPO_OK;
    }
    if (!tempo__dtype_valid(a->dtype)) {
        return tempo__err(TEMPO_ERR_INVALID, "%s: unknown dtype %d", cn, (int)a->dtype);
    }
    if (has_op && !tempo__op_valid(a->redop)) {
        return tempo__err(TEMPO_ERR_INVALID, "%s: unknown reduction op %d", cn, (int)a->redop);
    }
    size_t es = tempo_dtype_size(a->dtype);
    if (a->count > SIZE_MAX / es / (size_t)n) {
        return tempo__err(TEMPO_ERR_INVALID, "%s: count %zu is too large", cn, a->count);
    }
    if (a->coll == TEMPO__COLL_SEND || a->coll == TEMPO__COLL_RECV) {
        if (a->root < 0 || a->root >= n || a->root == r) {
            return tempo__err(TEMPO_ERR_INVALID,
                              "%s: peer %d is not another rank of this "
                              "communicator (size %d, own rank %d)",
                              cn, a->root, n, r);
        }
        if (a->ptag > TEMPO_TAG_MAX) {
            return tempo__err(TEMPO_ERR_INVALID, "%s: tag %u exceeds TEMPO_TAG_MAX", cn, a->ptag);
        }
        const void *buf = a->coll == TEMPO__COLL_SEND ? a->sendbuf : a->recvbuf;
        if (a->count && !buf) {
            return tempo__err(TEMPO_ERR_INVALID, "%s: buffer is NULL with count %zu", cn, a->count);
        }
        *(a->coll == TEMPO__COLL_SEND ? sbytes_p : rbytes_p) = a->count * es;
        return TEMPO_OK;
    }
    int rooted = a->coll == TEMPO__COLL_BROADCAST || a->coll == TEMPO__COLL_REDUCE;
    if (rooted && (a->root < 0 || a->root >= n)) {
        return tempo__err(TEMPO_ERR_INVALID, "%s: root %d out of range (communicator size %d)", cn,
                          a->root, n);
    }
    size_t sbytes = a->count * es, rbytes = a->count * es;
    int need_send = 1, need_recv = 1;
    switch (a->coll) {
    case TEMPO__COLL_REDUCE_SCATTER: sbytes *= (size_t)n; break;
    case TEMPO__COLL_ALLGATHER: rbytes *= (size_t)n; break;
    case TEMPO__COLL_ALLTOALL:
        sbytes *= (size_t)n;
        rbytes *= (size_t)n;
        break;
    case TEMPO__COLL_BROADCAST: need_send = r == a->root; break;
    case TEMPO__COLL_REDUCE: need_recv = r == a->root; break;
    default: break;
    }
    if (a->count && need_send && !a->sendbuf) {
        return tempo__err(TEMPO_ERR_INVALID, "%s: sendbuf is NULL with count %zu", cn, a->count);
    }
    if (a->count && need_recv && !a->recvbuf) {
        return tempo__err(TEMPO_ERR_INVALID, "%s: recvbuf is NULL with count %zu", cn, a->count);
    }
    *sbytes_p = need_send ? sbytes : 0;
    *rbytes_p = need_recv ? rbytes : 0;
    if (!need_send || !need_recv || a->sendbuf == a->recvbuf) {
        return TEMPO_OK;
    }
    const char *s = a->sendbuf;
    char *rv = a->recvbuf;
    if (a->coll == TEMPO__COLL_REDUCE_SCATTER && rv == s + (size_t)r * a->count * es) {
        return TEMPO_OK;
    }
    if (a->coll == TEMPO__COLL_ALLGATHER && s == rv + (size_t)r * a->count * es) {
        return TEMPO_OK;
    }
    if (overlap(a->sendbuf, sbytes, a->recvbuf, rbytes)) {
        return tempo__err(TEMPO_ERR_INVALID,
                          "%s: sendbuf and recvbuf overlap partially (only the "
                          "documented in-place layouts are allowed)",
                          cn);
    }
    return TEMPO_OK;
}

/* A request that joins the scheduled lane (collectives/schedq.c): an all-reduce, reduce-scatter or
 * all-gather with a priority. Other collectives ignore the priority and keep the program order. */
static int scheduled(const args_t *a, const tempo_attr_t *attr)
{
    return attr && (attr->field_mask & TEMPO_ATTR_PRIORITY) &&
           (a->coll == TEMPO__COLL_ALLREDUCE || a->coll == TEMPO__COLL_REDUCE_SCATTER ||
            a->coll == TEMPO__COLL_ALLGATHER);
}

/* Post an operation; *op_p receives it (already complete when the return value is not
 * TEMPO_INPROGRESS). Called with the lock held. */
/* The engine's gate of an operation on staged device buffers (gpu/cuda.h): it runs once its input
 * has landed in the staging; a chunk of a scheduled request once its own part has (a
 * reduce-scatter chunk's blocks are spread over the whole input: all of it). */
int tempo__coll_staged_gate(tempo__op_t *op)
{
    tempo__op_t *req = op->parent ? op->parent : op;
    if (!op->parent || !op->sendbuf || (op->stride && op->stride != op->count)) {
        return tempo__cuda_stage_landed(req->cuda, NULL, 0);
    }
    return tempo__cuda_stage_landed(req->cuda, op->sendbuf,
                                    op->count * tempo_dtype_size(op->dtype));
}

/* A chunk of a scheduled request on staged device buffers completed: its part of the result is
 * copied out now (an all-gather chunk's part is one piece per rank block). */
void tempo__coll_staged_out(tempo__op_t *op)
{
    tempo__op_t *req = op->parent;
    if (!req || !req->cuda || op->status != TEMPO_OK || !op->recvbuf) {
        return;
    }
    size_t es = tempo_dtype_size(op->dtype), len = op->count * es;
    if (op->coll == TEMPO__COLL_ALLGATHER) {
        for (int q = 0; q < op->comm->size; q++) {
            tempo__cuda_stage_out(req->cuda, (char *)op->recvbuf + (size_t)q * op->stride * es,
                                  len);
        }
    } else {
        tempo__cuda_stage_out(req->cuda, op->recvbuf, len);
    }
}

/* nccl: it runs on NCCL (gpu/nccl.h), its device buffers not staged; cuda: its staging, or NULL */
static tempo_status_t post_locked(struct tempo_comm *c, const args_t *a, const tempo_attr_t *attr,
                                  int nccl, tempo__cuda_stage_t *cuda, tempo__op_t **op_p)
{
    tempo__op_t *op = tempo__op_new(c, a->coll);
    if (!op) {
        return TEMPO_ERR_NOMEM;
    }
    op->cuda = cuda;
    if (cuda && !scheduled(a, attr) && tempo__cuda_stage_landed(cuda, NULL, 0) != 1) {
        op->gate = tempo__coll_staged_gate; /* (a scheduled request's chunks get it: schedq.c) */
    }
    op->sendbuf = a->sendbuf;
    op->recvbuf = a->recvbuf;
    op->count = a->count;
    op->dtype = a->dtype;
    op->redop = a->redop;
    op->root = a->root;
    op->ptag = a->ptag;
    op->nccl = nccl;
    if (nccl && attr && (attr->field_mask & TEMPO_ATTR_STREAM)) {
        op->has_gpu_stream = 1; /* the NCCL call goes on the caller's stream */
        op->gpu_stream = attr->stream;
    }
    const char *forced = NULL, *name = NULL;
    size_t chunk_bytes = 0;
    int sched = scheduled(a, attr);
    if (attr) {
        if (attr->field_mask & TEMPO_ATTR_PRIORITY) {
            op->priority = attr->priority;
        }
        if (attr->field_mask & TEMPO_ATTR_TAG) {
            op->user_tag = attr->tag;
        }
        if (attr->field_mask & TEMPO_ATTR_ALGORITHM) {
            forced = attr->algorithm;
        }
        if (attr->field_mask & TEMPO_ATTR_NAME) {
            name = attr->name;
        }
        if (attr->field_mask & TEMPO_ATTR_CHUNK_BYTES) {
            chunk_bytes = attr->chunk_bytes;
        }
        int reducing = a->coll == TEMPO__COLL_ALLREDUCE || a->coll == TEMPO__COLL_REDUCE_SCATTER;
        if ((attr->field_mask & TEMPO_ATTR_COMPRESSOR) && attr->compressor && reducing) {
            /* struct tempo_compressor begins with the engine's hook (quant/quant.c). */
            tempo__qhook_t *q = (tempo__qhook_t *)attr->compressor;
            size_t in = a->count * tempo_dtype_size(a->dtype) *
                        (a->coll == TEMPO__COLL_REDUCE_SCATTER ? (size_t)c->size : 1);
            op->qc = in >= q->min_bytes ? q : NULL;
        }
    }
    if (op->nccl && a->coll != TEMPO__COLL_ALLREDUCE) {
        chunk_bytes = SIZE_MAX; /* NCCL cannot run a block-strided chunk */
    }
    if (sched) {
        op->lane = 1;
    } else {
        if (a->coll != TEMPO__COLL_SEND && a->coll != TEMPO__COLL_RECV) {
            op->seq = c->next_seq++ & ~TEMPO_SEQ_SCHED;
        }
        tempo__op_sign(op);
        tempo__flight_post(op); /* (a scheduled request's chunks, when they start) */
    }
    *op_p = op;
    tempo__world_t *w = c->world;
    if (w->failed != TEMPO_OK) {
        op->status = tempo__op_fail(op, w->failed, "%s", w->failmsg);
        return op->status;
    }
    if (c->failed != TEMPO_OK) {
        op->status = tempo__op_fail(op, c->failed, "%s", c->failmsg);
        return op->status;
    }
    /* The algorithm is chosen (and a forced one validated) even when there is nothing to move, so
     * that errors do not depend on the count. */
    const tempo__algo_t *algo;
    tempo_status_t st = tempo__algo_select(op, forced, &algo);
    if (sched && st == TEMPO_OK) {
        /* Chunks choose their own algorithm by size unless one was forced. */
        return tempo__sq_post(op, forced ? algo->name : NULL, name, chunk_bytes);
    }
    int empty = a->coll != TEMPO__COLL_BARRIER && a->count == 0;
    int trivial = c->size == 1 && (empty || a->coll == TEMPO__COLL_BARRIER);
    if (st == TEMPO_OK && empty && !trivial && a->coll != TEMPO__COLL_SEND &&
        a->coll != TEMPO__COLL_RECV) {
        /* Nothing to move, but the ranks must still agree on the call: a dissemination barrier
         * carries its signature to every rank, so a rank that passed another count (or called
         * something else) finds the difference instead of leaving this one waiting for it. */
        st = tempo__barrier_dissemination_start(op);
        if (st != TEMPO_OK) {
            return tempo__op_error(op, st);
        }
        op->algo = "none (count 0)";
        return tempo__op_start(op);
    }
    trivial |= empty;
    if (st == TEMPO_OK && trivial) {
        tempo__op_accepted(op);
        if (c->failed != TEMPO_OK) {
            op->status = tempo__op_fail(op, c->failed, "%s", c->failmsg);
            return op->status;
        }
        op->status = TEMPO_OK;
        return TEMPO_OK;
    }
    return tempo__op_launch(op, st, algo);
}

/* A stream-ordered call completed: its stream goes on (gpu/cuda.h). */
static void stream_ready(tempo__op_t *op)
{
    tempo__cuda_stage_ready(op->cuda);
}

/* Release a request and its CUDA staging (results not copied out). */
static void release(tempo__op_t *op)
{
    if (op->cuda) {
        tempo__cuda_stage_done(op->cuda, TEMPO_ERR_ABORTED);
        op->cuda = NULL;
    }
    tempo__op_release(op);
}

/* Finish a request: copy its error text, its result to a CUDA device buffer, release it. */
static tempo_status_t finish(tempo__op_t *op)
{
    struct tempo_comm *c = op->comm;
    tempo_status_t st = op->status;
    if (st < 0) {
        tempo__errmsg_set(op->errmsg);
    }
    if (op->cuda) {
        st = tempo__cuda_stage_done(op->cuda, st); /* a failed copy sets the error text */
        op->cuda = NULL;
    }
    if (st < 0) {
        comm_err(c, st);
    }
    tempo__op_release(op);
    return st;
}

static tempo_status_t run(struct tempo_comm *c, const args_t *a, const tempo_attr_t *attr,
                          tempo_request_t *req_p)
{
    if (!c) {
        return tempo__err(TEMPO_ERR_INVALID, "%s: comm is NULL", tempo__coll_name(a->coll));
    }
    tempo__world_t *w = c->world;
    size_t sbytes, rbytes;
    tempo_status_t st = validate(c, a, &sbytes, &rbytes);
    /* CUDA device buffers: the call runs on host copies (gpu/cuda.h). */
    args_t staged = *a;
    tempo__cuda_stage_t *cuda = NULL;
    if (st == TEMPO_OK && attr && (attr->field_mask & TEMPO_ATTR_MEMTYPE) &&
        (unsigned)attr->memtype > TEMPO_MEMTYPE_CUDA) {
        st = tempo__err(TEMPO_ERR_INVALID, "%s: unknown memtype %d", tempo__coll_name(a->coll),
                        (int)attr->memtype);
    }
    int ordered = attr && (attr->field_mask & TEMPO_ATTR_STREAM), nccl = 0;
    if (st == TEMPO_OK && ordered && !w->thread_on) {
        st = tempo__err(TEMPO_ERR_UNSUPPORTED, "%s: a CUDA stream (TEMPO_ATTR_STREAM) needs the "
                        "progress thread, which TEMPO_PROGRESS_THREAD=0 turned off",
                        tempo__coll_name(a->coll));
    }
    /* NCCL (TEMPO_GPU_BACKEND=nccl) runs device buffers as they are; a stream-ordered call is
     * enqueued on the caller's stream when it is posted, which the scheduled lane does not do
     * (its chunks start when the scheduler says): those stay host-staged. */
    if (st == TEMPO_OK && (!ordered || !scheduled(a, attr)) &&
        (!attr || !(attr->field_mask & TEMPO_ATTR_MEMTYPE) ||
         attr->memtype != TEMPO_MEMTYPE_HOST)) {
        int compressed = attr && (attr->field_mask & TEMPO_ATTR_COMPRESSOR) && attr->compressor;
        nccl = tempo__nccl_takes(a->coll, a->redop, a->dtype, compressed, a->sendbuf, sbytes,
                                 a->recvbuf, rbytes);
        if (nccl) {
            st = tempo__nccl_comm_ready(c); /* (collective, at the first one) */
        }
    }
    /* CUDA IPC (TEMPO_GPU_IPC=1): a blocking all-reduce between the ranks of one host runs on
     * the device buffers themselves where every rank's allow it (gpu/ipc.h). */
    if (st == TEMPO_OK && !attr && !req_p && tempo__ipc_joins(c, a->coll)) {
        int taken = 0;
        st = tempo__ipc_allreduce(c, a->sendbuf, a->recvbuf, a->count, a->dtype, a->redop,
                                  &taken);
        if (taken || st != TEMPO_OK) {
            return st < 0 ? comm_err(c, st) : st;
        }
    }
    if (st == TEMPO_OK && !nccl) {
        tempo_memtype_t mt = attr && (attr->field_mask & TEMPO_ATTR_MEMTYPE) ? attr->memtype
                                                                           : TEMPO_MEMTYPE_AUTO;
        st = tempo__cuda_stage(mt, ordered, ordered ? attr->stream : NULL, &staged.sendbuf,
                               sbytes, &staged.recvbuf, rbytes, &cuda);
    }
    a = &staged;
    if (st != TEMPO_OK) {
        if (scheduled(a, attr)) {
            /* Likewise for the scheduled lane: it takes its occurrence of the tag, and the
             * coordinator fails the request on the ranks that posted it. */
            uint64_t tag = (attr->field_mask & TEMPO_ATTR_TAG) ? attr->tag : 0;
            pthread_mutex_lock(&w->lock);
            tempo__sq_rejected(c, a->coll, a->count, a->dtype, a->redop, tag);
            pthread_mutex_unlock(&w->lock);
        } else if (a->coll != TEMPO__COLL_SEND && a->coll != TEMPO__COLL_RECV) {
            /* The rejected call still is this rank's call under its sequence number: a peer
             * that waits for it learns why (core/check.c) instead of pairing it with our next
             * call. */
            pthread_mutex_lock(&w->lock);
            tempo__comm_rejected(c, c->next_seq++ & ~TEMPO_SEQ_SCHED, tempo__errmsg());
            pthread_mutex_unlock(&w->lock);
        }
        return comm_err(c, st);
    }
    pthread_mutex_lock(&w->lock);
    tempo__op_t *op = NULL;
    st = post_locked(c, a, attr, nccl, cuda, &op);
    if (st == TEMPO_ERR_NOMEM && !op) {
        pthread_mutex_unlock(&w->lock);
        tempo__cuda_stage_done(cuda, st);
        return comm_err(c, st);
    }
    if (ordered && st >= 0 && !nccl) {
        /* its stream waits for it: let the stream go on when it completes (engine), or now */
        op->on_complete = stream_ready;
        tempo__cuda_stage_arm(cuda); /* (a failure is the request's: tempo__cuda_stage_done) */
        if (op->status != TEMPO_INPROGRESS) {
            tempo__cuda_stage_ready(cuda);
        }
    }
    if (req_p) {
        /* Non-blocking: errors found at posting are returned now. */
        if (st < 0) {
            st = finish(op);
            pthread_mutex_unlock(&w->lock);
            return st;
        }
        *req_p = (tempo_request_t)op;
        tempo__engine_kick(w);
        pthread_mutex_unlock(&w->lock);
        return TEMPO_OK;
    }
    if (st == TEMPO_INPROGRESS) {
        tempo__op_wait_locked(op);
    }
    st = finish(op);
    pthread_mutex_unlock(&w->lock);
    return st;
}

/* Blocking forms pass no attributes and no request. */
#define BLOCKING NULL, NULL

tempo_status_t tempo_allreduce(tempo_comm_t comm, const void *sendbuf, void *recvbuf, size_t count,
                               tempo_dtype_t dtype, tempo_op_t op)
{
    args_t a = {TEMPO__COLL_ALLREDUCE, sendbuf, recvbuf, count, dtype, op, 0, 0};
    return run(comm, &a, BLOCKING);
}

static tempo_status_t need_req(tempo_comm_t comm, tempo_request_t *req_p, int coll)
{
    if (!req_p) {
        return comm_err(
            comm, tempo__err(TEMPO_ERR_INVALID, "i%s: req_p is NULL", tempo__coll_name(coll)));
    }
    *req_p = NULL;
    return TEMPO_OK;
}

static const tempo_attr_t no_attr = {0};

tempo_status_t tempo_iallreduce(tempo_comm_t comm, const void *sendbuf, void *recvbuf, size_t count,
                                tempo_dtype_t dtype, tempo_op_t op, const tempo_attr_t *attr,
                                tempo_request_t *req_p)
{
    TEMPO_CHECK(need_req(comm, req_p, TEMPO__COLL_ALLREDUCE));
    args_t a = {TEMPO__COLL_ALLREDUCE, sendbuf, recvbuf, count, dtype, op, 0, 0};
    return run(comm, &a, attr ? attr : &no_attr, req_p);
}

tempo_status_t tempo_reduce_scatter(tempo_comm_t comm, const void *sendbuf, void *recvbuf,
                                    size_t recvcount, tempo_dtype_t dtype, tempo_op_t op)
{
    args_t a = {TEMPO__COLL_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, dtype, op, 0, 0};
    return run(comm, &a, BLOCKING);
}

tempo_status_t tempo_ireduce_scatter(tempo_comm_t comm, const void *sendbuf, void *recvbuf,
                                     size_t recvcount, tempo_dtype_t dtype, tempo_op_t op,
                                     const tempo_attr_t *attr, tempo_request_t *req_p)
{
    TEMPO_CHECK(need_req(comm, req_p, TEMPO__COLL_REDUCE_SCATTER));
    args_t a = {TEMPO__COLL_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, dtype, op, 0, 0};
    return run(comm, &a, attr ? attr : &no_attr, req_p);
}

tempo_status_t tempo_allgather(tempo_comm_t comm, const void *sendbuf, void *recvbuf,
                               size_t sendcount, tempo_dtype_t dtype)
{
    args_t a = {TEMPO__COLL_ALLGATHER, sendbuf, recvbuf, sendcount, dtype, TEMPO_SUM, 0, 0};
    return run(comm, &a, BLOCKING);
}

tempo_status_t tempo_iallgather(tempo_comm_t comm, const void *sendbuf, void *recvbuf,
                                size_t sendcount, tempo_dtype_t dtype, const tempo_attr_t *attr,
                                tempo_request_t *req_p)
{
    TEMPO_CHECK(need_req(comm, req_p, TEMPO__COLL_ALLGATHER));
    args_t a = {TEMPO__COLL_ALLGATHER, sendbuf, recvbuf, sendcount, dtype, TEMPO_SUM, 0, 0};
    return run(comm, &a, attr ? attr : &no_attr, req_p);
}

tempo_status_t tempo_broadcast(tempo_comm_t comm, const void *sendbuf, void *recvbuf, size_t count,
                               tempo_dtype_t dtype, int root)
{
    args_t a = {TEMPO__COLL_BROADCAST, sendbuf, recvbuf, count, dtype, TEMPO_SUM, root, 0};
    return run(comm, &a, BLOCKING);
}

tempo_status_t tempo_ibroadcast(tempo_comm_t comm, const void *sendbuf, void *recvbuf, size_t count,
                                tempo_dtype_t dtype, int root, const tempo_attr_t *attr,
                                tempo_request_t *req_p)
{
    TEMPO_CHECK(need_req(comm, req_p, TEMPO__COLL_BROADCAST));
    args_t a = {TEMPO__COLL_BROADCAST, sendbuf, recvbuf, count, dtype, TEMPO_SUM, root, 0};
    return run(comm, &a, attr ? attr : &no_attr, req_p);
}

tempo_status_t tempo_reduce(tempo_comm_t comm, const void *sendbuf, void *recvbuf, size_t count,
                            tempo_dtype_t dtype, tempo_op_t op, int root)
{
    args_t a = {TEMPO__COLL_REDUCE, sendbuf, recvbuf, count, dtype, op, root, 0};
    return run(comm, &a, BLOCKING);
}

tempo_status_t tempo_ireduce(tempo_comm_t comm, const void *sendbuf, void *recvbuf, size_t count,
                             tempo_dtype_t dtype, tempo_op_t op, int root, const tempo_attr_t *attr,
                             tempo_request_t *req_p)
{
    TEMPO_CHECK(need_req(comm, req_p, TEMPO__COLL_REDUCE));
    args_t a = {TEMPO__COLL_REDUCE, sendbuf, recvbuf, count, dtype, op, root, 0};
    return run(comm, &a, attr ? attr : &no_attr, req_p);
}

tempo_status_t tempo_alltoall(tempo_comm_t comm, const void *sendbuf, void *recvbuf, size_t count,
                              tempo_dtype_t dtype)
{
    args_t a = {TEMPO__COLL_ALLTOALL, sendbuf, recvbuf, count, dtype, TEMPO_SUM, 0, 0};
    return run(comm, &a, BLOCKING);
}

tempo_status_t tempo_ialltoall(tempo_comm_t comm, const void *sendbuf, void *recvbuf, size_t count,
                               tempo_dtype_t dtype, const tempo_attr_t *attr,
                               tempo_request_t *req_p)
{
    TEMPO_CHECK(need_req(comm, req_p, TEMPO__COLL_ALLTOALL));
    args_t a = {TEMPO__COLL_ALLTOALL, sendbuf, recvbuf, count, dtype, TEMPO_SUM, 0, 0};
    return run(comm, &a, attr ? attr : &no_attr, req_p);
}

tempo_status_t tempo_barrier(tempo_comm_t comm)
{
    args_t a = {TEMPO__COLL_BARRIER, NULL, NULL, 0, TEMPO_UINT8, TEMPO_SUM, 0, 0};
    return run(comm, &a, BLOCKING);
}

tempo_status_t tempo_ibarrier(tempo_comm_t comm, const tempo_attr_t *attr, tempo_request_t *req_p)
{
    TEMPO_CHECK(need_req(comm, req_p, TEMPO__COLL_BARRIER));
    args_t a = {TEMPO__COLL_BARRIER, NULL, NULL, 0, TEMPO_UINT8, TEMPO_SUM, 0, 0};
    return run(comm, &a, attr ? attr : &no_attr, req_p);
}

tempo_status_t tempo_send(tempo_comm_t comm, const void *buf, size_t count, tempo_dtype_t dtype,
                          int peer, uint32_t tag)
{
    args_t a = {TEMPO__COLL_SEND, buf, NULL, count, dtype, TEMPO_SUM, peer, tag};
    return run(comm, &a, BLOCKING);
}

tempo_status_t tempo_recv(tempo_comm_t comm, void *buf, size_t count, tempo_dtype_t dtype, int peer,
                          uint32_t tag)
{
    args_t a = {TEMPO__COLL_RECV, NULL, buf, count, dtype, TEMPO_SUM, peer, tag};
    return run(comm, &a, BLOCKING);
}

tempo_status_t tempo_isend(tempo_comm_t comm, const void *buf, size_t count, tempo_dtype_t dtype,
                           int peer, uint32_t tag, const tempo_attr_t *attr, tempo_request_t *req_p)
{
    TEMPO_CHECK(need_req(comm, req_p, TEMPO__COLL_SEND));
    args_t a = {TEMPO__COLL_SEND, buf, NULL, count, dtype, TEMPO_SUM, peer, tag};
    return run(comm, &a, attr ? attr : &no_attr, req_p);
}

tempo_status_t tempo_irecv(tempo_comm_t comm, void *buf, size_t count, tempo_dtype_t dtype,
                           int peer, uint32_t tag, const tempo_attr_t *attr, tempo_request_t *req_p)
{
    TEMPO_CHECK(need_req(comm, req_p, TEMPO__COLL_RECV));
    args_t a = {TEMPO__COLL_RECV, NULL, buf, count, dtype, TEMPO_SUM, peer, tag};
    return run(comm, &a, attr ? attr : &no_attr, req_p);
}

/* ---------------------------------------------------------------------------------------------- */
/* Requests                                                                                       */
/* ---------------------------------------------------------------------------------------------- */

tempo_status_t tempo_test(tempo_request_t *req_p)
{
    if (!req_p || !*req_p) {
        return TEMPO_OK;
    }
    tempo__op_t *op = (tempo__op_t *)*req_p;
    tempo__world_t *w = op->comm->world;
    pthread_mutex_lock(&w->lock);
    if (op->status == TEMPO_INPROGRESS) {
        tempo__engine_progress(w);
    }
    tempo_status_t st = op->status;
    if (st != TEMPO_INPROGRESS) {
        st = finish(op);
        *req_p = NULL;
    }
    tempo__engine_kick(w);
    pthread_mutex_unlock(&w->lock);
    return st;
}

tempo_status_t tempo__request_wait(tempo_request_t *req_p, uint64_t *t_start_p, uint64_t *t_end_p)
{
    if (!req_p || !*req_p) {
        return TEMPO_OK;
    }
    tempo__op_t *op = (tempo__op_t *)*req_p;
    tempo__world_t *w = op->comm->world;
    pthread_mutex_lock(&w->lock);
    if (op->status == TEMPO_INPROGRESS) {
        uint64_t t0 = tempo__now_ns();
        tempo__op_wait_locked(op);
        if (w->trace) {
            char d[192], esc[240], args[280];
            tempo__json_escape(tempo__op_describe(op, d, sizeof(d)), esc, sizeof(esc));
            snprintf(args, sizeof(args), "\"op\": \"%s\"", esc);
            tempo__trace_span(w, TEMPO_TRACE_TID_WAIT, "wait", "tempo_wait", t0, tempo__now_ns(),
                              args);
        }
    }
    if (t_start_p) {
        *t_start_p = op->is_parent ? op->t_start_ns : 0;
    }
    if (t_end_p) {
        *t_end_p = op->is_parent ? op->t_end_ns : 0;
    }
    tempo_status_t st = finish(op);
    *req_p = NULL;
    tempo__engine_kick(w);
    pthread_mutex_unlock(&w->lock);
    return st;
}

tempo_status_t tempo_wait(tempo_request_t *req_p)
{
    return tempo__request_wait(req_p, NULL, NULL);
}

uint64_t tempo__comm_sched_busy_ns(struct tempo_comm *comm)
{
    pthread_mutex_lock(&comm->world->lock);
    uint64_t v = tempo__sq_busy_ns(comm);
    pthread_mutex_unlock(&comm->world->lock);
    return v;
}

void tempo__comm_trace_mark(struct tempo_comm *comm, int tid, int begin, const char *cat,
                            const char *name, uint64_t t)
{
    tempo__world_t *w = comm->world;
    if (!w->trace) {
        return;
    }
    pthread_mutex_lock(&w->lock);
    tempo__trace_mark(w, tid, begin, cat, name, t);
    pthread_mutex_unlock(&w->lock);
}

void tempo__comm_trace_span(struct tempo_comm *comm, int tid, const char *cat, const char *name,
                            uint64_t t0, uint64_t t1, const char *args_json)
{
    tempo__world_t *w = comm->world;
    if (!w->trace) {
        return;
    }
    pthread_mutex_lock(&w->lock);
    tempo__trace_span(w, tid, cat, name, t0, t1, args_json);
    pthread_mutex_unlock(&w->lock);
}

int tempo__comm_next_bucketer(struct tempo_comm *comm)
{
    pthread_mutex_lock(&comm->world->lock);
    int v = tempo__cc(comm)->nbucketers++;
    pthread_mutex_unlock(&comm->world->lock);
    return v;
}

static tempo_status_t trace_marker(tempo_comm_t comm, const char *name, int begin)
{
    if (!comm || !name) {
        return comm_err(comm, tempo__err(TEMPO_ERR_INVALID, "tempo_trace_%s: %s is NULL",
                                         begin ? "begin" : "end", comm ? "name" : "comm"));
    }
    tempo__comm_trace_mark(comm, TEMPO_TRACE_TID_COMPUTE, begin, "compute", name, tempo__now_ns());
    return TEMPO_OK;
}

tempo_status_t tempo_trace_begin(tempo_comm_t comm, const char *name)
{
    return trace_marker(comm, name, 1);
}

tempo_status_t tempo_trace_end(tempo_comm_t comm, const char *name)
{
    return trace_marker(comm, name, 0);
}

tempo_status_t tempo_waitall(size_t n, tempo_request_t reqs[], tempo_status_t statuses[])
{
    tempo_status_t first = TEMPO_OK;
    char first_msg[TEMPO_ERRMSG_LEN] = "";
    if (n && !reqs) {
        return tempo__err(TEMPO_ERR_INVALID, "tempo_waitall: reqs is NULL with n = %zu", n);
    }
    for (size_t i = 0; i < n; i++) {
        tempo_status_t st = tempo_wait(&reqs[i]);
        if (statuses) {
            statuses[i] = st;
        }
        if (st < 0 && first == TEMPO_OK) {
            first = st;
            snprintf(first_msg, sizeof(first_msg), "%s", tempo__errmsg());
        }
    }
    if (first != TEMPO_OK) {
        tempo__errmsg_set(first_msg);
    }
    return first;
}

/* ---------------------------------------------------------------------------------------------- */
/* Split, destroy, abort                                                                          */
/* ---------------------------------------------------------------------------------------------- */

/*
 * Context ids are recycled. Every rank keeps a bitmap of the ids it may not reuse yet
 * (world->ctx_used): an id is set from the creation of a communicator until it is drained. A split
 * gathers (color, key, hi, the bits of the low ids) from every member, hi being one more than the
 * member's highest id in use; when some hi exceeds SPLIT_LOW_IDS it also takes the maximum of the
 * members' maps below max(hi) (an all-reduce of one byte per id). The new communicators get the lowest ids clear on every member, one per color in color
 * order, so every member computes the same ids.
 *
 * Why a recycled id never sees an old message. Destroying a communicator (id c) sends a close
 * marker to every other member (a control tag of c, after everything this rank ever sent on c:
 * each pair of ranks is one FIFO stream, and a half-sent message that a cancel withdrew is
 * finished first) and posts a receive for each member's marker. c stays set on this rank until
 * every marker has been received (or its sender has left the job) and the sends completed; then
 * nothing of the old communicator can arrive any more, what arrived unreceived is dropped
 * (tempo__tl_purge_ctx), and c is cleared. A split picks c only if it is clear on every member, so
 * when the successor starts, no member holds or can still get a message of its predecessor. A
 * rank that destroys its communicator before its peers merely keeps c set for longer, and ranks
 * that differ in which ids they have drained agree through the maximum of the bitmaps. Draining
 * is checked at the next split (never waited for), so destroy does not block on slow peers.
 */
#define SPLIT_LOW_IDS 512 /* ids whose bits travel in the split's all-gather itself */

typedef struct {
    int32_t color, key, hi, pad;
    uint8_t low[SPLIT_LOW_IDS / 8]; /* the member's ctx_used bits of ids < SPLIT_LOW_IDS */
} split_entry_t;

#define CTRL_KIND_CLOSE 3u /* control tag kind of close markers (schedq.c uses 1 and 2) */

/* A destroyed communicator whose id is not drained yet (on world->closing). One block. */
typedef struct {
    tempo__list_t link; /* first: world_destroy frees the block through it */
    int ctx;
    int n;                 /* other members */
    struct {
        int peer;          /* world rank */
        tempo__xfer_t send, recv;
    } m[];
} closing_t;

/* Send and expect close markers for c's id (lock held); without memory the id stays used. */
static void close_markers(struct tempo_comm *c)
{
    tempo__world_t *w = c->world;
    closing_t *cl = tempo__calloc(1, sizeof(*cl) + (size_t)c->size * sizeof(cl->m[0]),
                                  "communicator close markers");
    if (!cl) {
        return;
    }
    cl->ctx = c->ctx;
    uint64_t tag = tempo__tag_ctrl(c->ctx, CTRL_KIND_CLOSE);
    for (int r = 0; r < c->size; r++) {
        if (r != c->rank) {
            int p = tempo__wrank(c, r);
            cl->m[cl->n].peer = p;
            tempo__tl_irecv(w, p, tag, &cl->ctx, 0, &cl->m[cl->n].recv);
            tempo__tl_isend(w, p, tag, &cl->ctx, 0, &cl->m[cl->n].send);
            cl->n++;
        }
    }
    tempo__list_push_back(&w->closing, &cl->link);
}

/* Clear the ids of destroyed communicators whose markers have all arrived (lock held). */
static void reap_closed(tempo__world_t *w)
{
    tempo__list_t *pos, *tmp;
    tempo__list_for_each_safe (pos, tmp, &w->closing) {
        closing_t *cl = tempo__container_of(pos, closing_t, link);
        int done = 1;
        for (int i = 0; i < cl->n && done; i++) {
            done = cl->m[i].send.complete && cl->m[i].recv.complete;
        }
        if (!done) {
            continue;
        }
        for (int i = 0; i < cl->n; i++) {
            tempo__tl_purge_ctx(w, cl->m[i].peer, cl->ctx);
        }
        tempo__ctx_set_used(w, cl->ctx, 0);
        tempo__list_remove(&cl->link);
        tempo__free(cl);
    }
}

/* The ids of the split's `distinct` new communicators, lowest first: clear in every member's bitmap
 * (used: the maximum over members, hi bytes). Collective through the caller's all-reduce. */
static tempo_status_t pick_ctxs(const uint8_t *used, int hi, int distinct, int *ctx_p)
{
    int k = 0;
    for (int id = 1; k < distinct && id < TEMPO_CTX_MAX; id++) {
        if (id >= hi || !used[id]) {
            ctx_p[k++] = id;
        }
    }
    if (k < distinct) {
        return tempo__err(TEMPO_ERR_UNSUPPORTED,
                          "tempo_comm_split: too many live communicators (all %d context ids are "
                          "in use or still draining on some member)",
                          TEMPO_CTX_MAX - 1);
    }
    return TEMPO_OK;
}

static int cmp_members(const void *a, const void *b)
{
    const int *x = a, *y = b; /* (key, rank) */
    return x[0] != y[0] ? (x[0] < y[0] ? -1 : 1) : (x[1] < y[1] ? -1 : x[1] > y[1]);
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return x < y ? -1 : x > y;
}

tempo_status_t tempo_comm_split(tempo_comm_t comm, int color, int key, tempo_comm_t *newcomm_p)
{
    if (!comm || !newcomm_p) {
        return comm_err(comm, tempo__err(TEMPO_ERR_INVALID, "tempo_comm_split: %s is NULL",
                                         comm ? "newcomm_p" : "comm"));
    }
    if (color < 0 && color != TEMPO_UNDEFINED) {
        return comm_err(comm, tempo__err(TEMPO_ERR_INVALID,
                                         "tempo_comm_split: color %d must be >= "
                                         "0 or TEMPO_UNDEFINED",
                                         color));
    }
    tempo__world_t *w = comm->world;
    int n = comm->size;
    pthread_mutex_lock(&w->lock);
    reap_closed(w);
    split_entry_t mine = {color, key, tempo__ctx_hi(w), 0, {0}};
    memcpy(mine.low, w->ctx_used, sizeof(mine.low));
    pthread_mutex_unlock(&w->lock);
    split_entry_t *all = tempo__malloc(sizeof(*all) * (size_t)n, "split table");
    int *members = tempo__malloc(sizeof(int) * 2 * (size_t)n, "split members");
    int *colors = tempo__malloc(sizeof(int) * (size_t)n, "split colors");
    int *ctxs = tempo__malloc(sizeof(int) * (size_t)n, "split contexts");
    uint8_t *used = NULL;
    if (!all || !members || !colors || !ctxs) {
        tempo__free(all);
        tempo__free(members);
        tempo__free(colors);
        tempo__free(ctxs);
        return comm_err(comm, TEMPO_ERR_NOMEM);
    }
    tempo_status_t st = tempo_allgather(comm, &mine, all, sizeof(mine) / 4, TEMPO_INT32);
    if (st != TEMPO_OK) {
        goto out;
    }
    pthread_mutex_lock(&w->lock);
    /* Every member of comm numbers its splits alike, so the new communicator's uid is the same
     * on all its members and differs from every other communicator's (context ids are reused). */
    uint32_t split_no = comm->nsplits++;
    pthread_mutex_unlock(&w->lock);
    int hi = 1, ncolors = 0;
    for (int i = 0; i < n; i++) {
        hi = TEMPO_MAX(hi, all[i].hi);
        if (all[i].color != TEMPO_UNDEFINED) {
            colors[ncolors++] = all[i].color;
        }
    }
    /* Every member's ids in use below hi (one byte each): the maximum over members. Ids this rank
     * took since it reported hi (another thread's split) are set too in the all-reduce path, which
     * only makes the choice more careful. */
    used = tempo__malloc((size_t)hi, "split context map");
    if (!used) {
        st = TEMPO_ERR_NOMEM; /* the others would wait in the all-reduce: fail the job */
        pthread_mutex_lock(&w->lock);
        tempo__world_fail(w, st, "tempo_comm_split: out of memory for the context map");
        pthread_mutex_unlock(&w->lock);
        goto out;
    }
    if (hi <= SPLIT_LOW_IDS) {
        for (int id = 0; id < hi; id++) {
            used[id] = 0;
            for (int i = 0; i < n; i++) {
                used[id] |= (all[i].low[id >> 3] >> (id & 7)) & 1;
            }
        }
    } else {
        pthread_mutex_lock(&w->lock);
        for (int id = 0; id < hi; id++) {
            used[id] = (uint8_t)tempo__ctx_is_used(w, id);
        }
        pthread_mutex_unlock(&w->lock);
        st = tempo_allreduce(comm, used, used, (size_t)hi, TEMPO_UINT8, TEMPO_MAX);
        if (st != TEMPO_OK) {
            goto out;
        }
    }
    pthread_mutex_lock(&w->lock);
    qsort(colors, (size_t)ncolors, sizeof(int), cmp_int);
    int distinct = 0, my_index = -1;
    for (int i = 0; i < ncolors; i++) {
        if (i == 0 || colors[i] != colors[i - 1]) {
            if (colors[i] == color) {
                my_index = distinct;
            }
            distinct++;
        }
    }
    *newcomm_p = NULL;
    st = pick_ctxs(used, hi, distinct, ctxs);
    if (st != TEMPO_OK || color == TEMPO_UNDEFINED) {
        pthread_mutex_unlock(&w->lock);
        goto out;
    }
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (all[i].color == color) {
            members[2 * m] = all[i].key;
            members[2 * m + 1] = i;
            m++;
        }
    }
    qsort(members, (size_t)m, 2 * sizeof(int), cmp_members);
    int my_new = -1;
    for (int i = 0; i < m; i++) {
        if (members[2 * i + 1] == comm->rank) {
            my_new = i;
        }
        colors[i] = tempo__wrank(comm, members[2 * i + 1]); /* reuse as world ranks */
    }
    struct tempo_comm *nc = NULL;
    st = tempo__comm_create(w, colors, m, my_new, ctxs[my_index], &nc);
    if (st == TEMPO_OK) {
        int32_t salt[2] = {(int32_t)split_no, color};
        nc->uid = tempo__hash64(salt, sizeof(salt), comm->uid);
        tempo__comm_ready(nc);
        st = coll_setup(nc);
        if (st != TEMPO_OK) {
            tempo__comm_free(nc);
            nc = NULL;
        }
    }
    pthread_mutex_unlock(&w->lock);
    if (st == TEMPO_OK) {
        TEMPO_INFO(TEMPO_SUB_INIT, "split: color %d, rank %d of %d, context %d", color, my_new, m,
                   nc->ctx);
        *newcomm_p = nc;
    }
out:
    tempo__free(all);
    tempo__free(members);
    tempo__free(colors);
    tempo__free(ctxs);
    tempo__free(used);
    return comm_err(comm, st);
}

tempo_status_t tempo_comm_destroy(tempo_comm_t comm)
{
    if (!comm) {
        return TEMPO_OK;
    }
    tempo__world_t *w = comm->world;
    tempo_status_t st = TEMPO_OK;
    pthread_mutex_lock(&w->lock);
    while (!tempo__list_empty(&comm->ops)) {
        tempo__op_t *op = tempo__container_of(comm->ops.next, tempo__op_t, clink);
        if (op->status == TEMPO_INPROGRESS) {
            char d[192];
            st = tempo__err(TEMPO_ERR_ABORTED, "tempo_comm_destroy cancelled %s, still in progress",
                            tempo__op_describe(op, d, sizeof(d)));
        }
        release(op);
    }
    /* The initial communicator's id (0) is never reused; the last communicator takes the world,
     * and a failed job sends nothing more (its ids stay used). */
    if (comm->ctx != 0 && w->ncomms > 1 && w->failed == TEMPO_OK) {
        close_markers(comm);
    }
    int left = tempo__comm_free(comm);
    pthread_mutex_unlock(&w->lock);
    if (left == 0) {
        tempo__world_destroy(w, w->failed != TEMPO_ERR_ABORTED);
    }
    return st;
}

tempo_status_t tempo_comm_abort(tempo_comm_t comm)
{
    if (!comm) {
        return tempo__err(TEMPO_ERR_INVALID, "tempo_comm_abort: comm is NULL");
    }
    tempo__world_t *w = comm->world;
    /* The progress thread may be waiting inside the transports, which are closed below. */
    tempo__engine_thread_stop(w);
    pthread_mutex_lock(&w->lock);
    if (w->failed == TEMPO_OK) {
        char me[160];
        tempo__world_fail(w, TEMPO_ERR_ABORTED, "the job was aborted by tempo_comm_abort() on %s",
                          tempo__peer_desc(w, w->rank, me, sizeof(me)));
    } else {
        w->failed = TEMPO_ERR_ABORTED;
    }
    if (w->tl_close) {
        w->tl_close(w, 0);
    }
    tempo__engine_progress(w);
    pthread_mutex_unlock(&w->lock);
    return TEMPO_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Introspection                                                                                  */
/* ---------------------------------------------------------------------------------------------- */

/* The reduction kernels' item: the level in use (the best this CPU runs, or TEMPO_REDUCE_ISA's)
 * and the levels this CPU runs; written once, at the first tempo_build_info(). */
static char reduction_text[160];
static char transports_text[64], cuda_text[240], nccl_text[300];

static void reduction_info(void)
{
    (void)tempo__config_load(); /* a refused TEMPO_REDUCE_ISA leaves auto, as tempo-info -c says */
    size_t o = (size_t)snprintf(reduction_text, sizeof(reduction_text),
                                "%s (chosen at init; this CPU runs", tempo__reduce_kernels()->name);
    for (size_t i = 0; i < 8; i++) {
        const tempo__reduce_kernels_t *k = tempo__reduce_kernels_level(i);
        if (k && o < sizeof(reduction_text)) {
            o += (size_t)snprintf(reduction_text + o, sizeof(reduction_text) - o, " %s", k->name);
        }
    }
    if (o < sizeof(reduction_text)) {
        snprintf(reduction_text + o, sizeof(reduction_text) - o, "; TEMPO_REDUCE_ISA forces one)");
    }
    tempo__tl_compiled(transports_text, sizeof(transports_text));
    tempo__cuda_describe(cuda_text, sizeof(cuda_text));
    tempo__nccl_describe(nccl_text, sizeof(nccl_text));
}

size_t tempo_build_info(const tempo_build_item_t **items_p)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, reduction_info);
    static const tempo_build_item_t items[] = {
        {"version", PACKAGE_VERSION},     {"cuda", TEMPO_BUILD_CUDA},
        {"nccl", TEMPO_BUILD_NCCL},       {"ucx", TEMPO_BUILD_UCX},
        {"verbs", TEMPO_BUILD_VERBS},     {"zstd", TEMPO_BUILD_ZSTD},
        {"crypto", TEMPO_BUILD_CRYPTO},
        {"hwloc", TEMPO_BUILD_HWLOC},     {"mpi", TEMPO_BUILD_MPI " (perf baselines only)"},
#ifdef TEMPO_ENABLE_ASSERT
        {"debug", "yes (assertions on)"},
#else
        {"debug", "no"},
#endif
        {"sanitizers", TEMPO_BUILD_SANITIZERS},
        {"transports", transports_text},  {"reduction", reduction_text},
        {"cuda device", cuda_text},       {"nccl library", nccl_text},
    };
    if (items_p) {
        *items_p = items;
    }
    return TEMPO_ARRAY_SIZE(items);
}

tempo_status_t tempo_transport_info(size_t index, tempo_transport_info_t *info_p)
{
    (void)tempo__config_load();
    return tempo__tl_info(index, info_p);
}
