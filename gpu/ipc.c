/*
 * gpu/ipc.c — all-reduce of CUDA device buffers between the ranks of one host through CUDA IPC
 * (gpu/ipc.h says when and what).
 *
 * The steps, with n ranks, rank r owning share r (count / n elements, the first count % n
 * shares one more):
 *   1. wait for the default stream's work (the buffers are final), export both buffers, and
 *      all-gather the records (host memory); every rank decides the same from them: IPC, or the
 *      host-staged path;
 *   2. map each peer's buffers (a mapping is kept per communicator for later calls: opening one
 *      costs the driver milliseconds), and agree that every rank could (a host all-reduce, MIN);
 *   3. reduce share r of every rank's send buffer, in rank order, into share r of our receive
 *      buffer (tempo's kernel), and agree (MIN): every share is final;
 *   4. copy every other share q from rank q's receive buffer into ours, wait for the copies,
 *      and agree: no rank leaves (and reuses its buffers) while another still reads them.
 * In step 3 a rank writes only its own share of its own receive buffer, which no other rank
 * reads until step 4; in step 4 it writes shares of its own receive buffer that no rank reads
 * any more. So in-place calls (sendbuf == recvbuf) are safe, and every rank gets the same bits
 * (each share is reduced once). The agreements run on tempo's own host collectives (their
 * non-blocking forms, which never come back here).
 */
#include "config.h"

#include "gpu/ipc.h"

#include "core/cfg.h"
#include "core/log.h"
#include "gpu/cuda.h"
#include "gpu/kernels.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define IPC_MAGIC 0x74495043u /* "tIPC" */

/* What each rank tells the others (host memory, identical layout on every rank). */
typedef struct {
    uint32_t magic;
    int32_t ok; /* 1: this rank can run the call through IPC */
    uint64_t count;
    int32_t dtype, op;
    int32_t pid;
    int32_t pad;
    uint64_t send_addr, recv_addr; /* for ranks in one process: the pointers themselves */
    tempo__cuda_ipc_t send, recv;
    char why[96]; /* !ok: why not, for the log */
} rec_t;

/* A peer's allocation mapped here. */
typedef struct {
    int32_t pid;
    unsigned char handle[64];
    void *base, *ctx;
    uint64_t used; /* the call that used it last, for eviction */
} map_t;

#define MAPS 64
typedef struct {
    map_t map[MAPS];
    uint64_t calls;
} ipc_t;

int tempo__ipc_joins(const struct tempo_comm *comm, int coll)
{
    return tempo__cfg.gpu_ipc && coll == TEMPO__COLL_ALLREDUCE && comm->all_local &&
           comm->size >= 2 && comm->size <= TEMPO__GPU_MAX_OPERANDS &&
           strcmp(tempo__cfg.gpu_backend, "nccl") != 0;
}

/* Rank r's share: its first element and how many. */
static void share(size_t count, int n, int r, size_t *first, size_t *len)
{
    size_t base = count / (size_t)n, rem = count % (size_t)n;
    *first = (size_t)r * base + ((size_t)r < rem ? (size_t)r : rem);
    *len = base + ((size_t)r < rem);
}

/* Where peer q's exported buffer h is in this process (its own pointer where q is this process),
 * mapped on first use; NULL with the message. like: one of our device buffers. */
static char *peer_buf(struct tempo_comm *c, const rec_t *q, const tempo__cuda_ipc_t *h,
                      uint64_t addr, const void *like)
{
    if (q->pid == (int32_t)getpid()) {
        return (char *)(uintptr_t)addr;
    }
    ipc_t *ipc = c->ipc;
    if (!ipc && !(ipc = c->ipc = tempo__calloc(1, sizeof(*ipc), "CUDA IPC mappings"))) {
        return NULL;
    }
    map_t *m = NULL, *lru = NULL;
    for (int i = 0; i < MAPS && !m; i++) {
        map_t *e = &ipc->map[i];
        if (e->base && e->pid == q->pid && !memcmp(e->handle, h->handle, sizeof(h->handle))) {
            m = e;
        } else if (!lru || (lru->base && (!e->base || e->used < lru->used))) {
            lru = e; /* an empty slot, else the one used longest ago */
        }
    }
    if (!m) {
        m = lru;
        if (m->base) { /* (mapped for an earlier call: none of ours runs now) */
            tempo__cuda_ipc_close(m->ctx, m->base);
            m->base = NULL;
        }
        if (tempo__cuda_ipc_open(like, h, &m->base, &m->ctx) != 0) {
            m->base = NULL;
            return NULL;
        }
        m->pid = q->pid;
        memcpy(m->handle, h->handle, sizeof(m->handle));
    }
    m->used = ipc->calls;
    return (char *)m->base + h->offset;
}

void tempo__ipc_comm_free(struct tempo_comm *c)
{
    ipc_t *ipc = c->ipc;
    if (!ipc) {
        return;
    }
    for (int i = 0; i < MAPS; i++) {
        if (ipc->map[i].base) {
            tempo__cuda_ipc_close(ipc->map[i].ctx, ipc->map[i].base);
        }
    }
    tempo__free(ipc);
    c->ipc = NULL;
}

/* Every rank's ok, MIN: 1 when all are (host all-reduce). Returns its status. */
static tempo_status_t agree(struct tempo_comm *c, int mine, int *all)
{
    static const tempo_attr_t none = {0};
    int32_t m = mine, a = 0;
    tempo_request_t req;
    tempo_status_t st = tempo_iallreduce(c, &m, &a, 1, TEMPO_INT32, TEMPO_MIN, &none, &req);
    if (st == TEMPO_OK) {
        st = tempo_wait(&req);
    }
    *all = a;
    return st;
}

static void record(rec_t *me, const void *sendbuf, void *recvbuf, size_t count,
                   tempo_dtype_t dtype, tempo_op_t op)
{
    char why[200];
    memset(me, 0, sizeof(*me));
    me->magic = IPC_MAGIC;
    me->count = count;
    me->dtype = dtype;
    me->op = op;
    me->pid = (int32_t)getpid();
    me->send_addr = (uint64_t)(uintptr_t)sendbuf;
    me->recv_addr = (uint64_t)(uintptr_t)recvbuf;
    if (!tempo__cuda_ipc_usable(why, sizeof(why))) {
        snprintf(me->why, sizeof(me->why), "%s", why);
    } else if (tempo__cuda_memtype(recvbuf) != TEMPO_MEMTYPE_CUDA ||
               tempo__cuda_memtype(sendbuf) != TEMPO_MEMTYPE_CUDA) {
        snprintf(me->why, sizeof(me->why), "its buffers are not both device memory");
    } else if (tempo__cuda_sync(recvbuf) != TEMPO_OK ||
               (sendbuf != recvbuf && tempo__cuda_sync(sendbuf) != TEMPO_OK) ||
               tempo__cuda_ipc_export(sendbuf, &me->send) != 0 ||
               tempo__cuda_ipc_export(recvbuf, &me->recv) != 0) {
        snprintf(me->why, sizeof(me->why), "%s", tempo__errmsg());
    } else if (memcmp(me->send.uuid, me->recv.uuid, sizeof(me->send.uuid)) != 0) {
        snprintf(me->why, sizeof(me->why), "its buffers are on two devices");
    } else {
        me->ok = 1;
    }
}

/* Whether the records allow IPC (the same answer on every rank); why not, for the log. */
static int decide(const rec_t *all, int n, char *why, size_t len)
{
    for (int q = 0; q < n; q++) {
        const rec_t *r = &all[q];
        if (r->magic != IPC_MAGIC) {
            snprintf(why, len, "rank %d sent a malformed record", q);
            return 0;
        }
        if (!r->ok) {
            snprintf(why, len, "rank %d cannot: %.*s", q, (int)sizeof(r->why), r->why);
            return 0;
        }
        if (r->count != all[0].count || r->dtype != all[0].dtype || r->op != all[0].op) {
            snprintf(why, len, "ranks 0 and %d disagree on the call", q);
            return 0;
        }
        if (memcmp(r->send.uuid, all[0].send.uuid, sizeof(r->send.uuid)) != 0) {
            snprintf(why, len, "ranks 0 and %d are on different devices", q);
            return 0;
        }
    }
    if (!all[0].count) {
        snprintf(why, len, "nothing to reduce");
        return 0;
    }
    return 1;
}

tempo_status_t tempo__ipc_allreduce(struct tempo_comm *c, const void *sendbuf, void *recvbuf,
                                    size_t count, tempo_dtype_t dtype, tempo_op_t op, int *taken)
{
    static const tempo_attr_t none = {0};
    int n = c->size, me_r = c->rank;
    *taken = 0;
    rec_t *all = tempo__calloc((size_t)n, sizeof(*all), "CUDA IPC records");
    if (!all) {
        return TEMPO_ERR_NOMEM;
    }
    rec_t me;
    record(&me, sendbuf, recvbuf, count, dtype, op);
    tempo_request_t req;
    tempo_status_t st =
        tempo_iallgather(c, &me, all, sizeof(me), TEMPO_UINT8, &none, &req); /* step 1 */
    if (st == TEMPO_OK) {
        st = tempo_wait(&req);
    }
    char why[160];
    if (st != TEMPO_OK) {
        tempo__free(all);
        return tempo__err(st, "allreduce of %zu x %s through CUDA IPC: %s", count,
                          tempo_dtype_name(dtype), tempo__errmsg());
    }
    if (!decide(all, n, why, sizeof(why))) {
        TEMPO_DEBUG(TEMPO_SUB_COLL, "all-reduce of %zu elements host-staged, not through CUDA "
                    "IPC: %s", count, why);
        tempo__free(all);
        return TEMPO_OK;
    }
    *taken = 1;
    size_t esz = tempo_dtype_size(dtype);
    ipc_t *ipc = c->ipc;
    if (ipc) {
        ipc->calls++;
    }
    /* step 2: the peers' buffers, here */
    char *sends[TEMPO__GPU_MAX_OPERANDS], *recvs[TEMPO__GPU_MAX_OPERANDS];
    int ok = 1;
    for (int q = 0; q < n && ok; q++) {
        if (q == me_r) {
            sends[q] = (char *)(uintptr_t)sendbuf;
            recvs[q] = recvbuf;
            continue;
        }
        sends[q] = peer_buf(c, &all[q], &all[q].send, all[q].send_addr, recvbuf);
        recvs[q] = sends[q] ? peer_buf(c, &all[q], &all[q].recv, all[q].recv_addr, recvbuf)
                            : NULL;
        ok = sends[q] && recvs[q];
    }
    char err[TEMPO_ERRMSG_LEN] = "";
    tempo_status_t mine = TEMPO_OK;
    if (!ok) {
        mine = TEMPO_ERR_SYSTEM;
        snprintf(err, sizeof(err), "%s", tempo__errmsg());
    }
    int all_ok = 0;
    st = agree(c, ok, &all_ok);
    /* step 3: our share, reduced from every rank's send buffer in rank order */
    size_t first, len;
    share(count, n, me_r, &first, &len);
    if (st == TEMPO_OK && all_ok) {
        const void *src[TEMPO__GPU_MAX_OPERANDS];
        for (int q = 0; q < n; q++) {
            src[q] = sends[q] + first * esz;
        }
        mine = tempo__cuda_reduce((char *)recvbuf + first * esz, src, n, len, dtype, op);
        if (mine != TEMPO_OK) {
            snprintf(err, sizeof(err), "%s", tempo__errmsg());
        }
        st = agree(c, mine == TEMPO_OK, &all_ok);
    }
    /* step 4: the other shares, from their owners */
    if (st == TEMPO_OK && all_ok) {
        for (int q = 0; q < n && mine == TEMPO_OK; q++) {
            size_t f, l;
            share(count, n, q, &f, &l);
            if (q != me_r && l) {
                mine = tempo__cuda_copy((char *)recvbuf + f * esz, recvs[q] + f * esz, l * esz,
                                        "from a peer's buffer (CUDA IPC)");
                if (mine != TEMPO_OK) {
                    snprintf(err, sizeof(err), "%s", tempo__errmsg());
                }
            }
        }
        /* (a device-to-device cuMemcpy does not wait for itself: done before the owners may
         * reuse their buffers) */
        if (mine == TEMPO_OK && (mine = tempo__cuda_sync(recvbuf)) != TEMPO_OK) {
            snprintf(err, sizeof(err), "%s", tempo__errmsg());
        }
        st = agree(c, mine == TEMPO_OK, &all_ok);
    }
    tempo__free(all);
    if (st != TEMPO_OK) { /* an agreement failed: its message names why (a peer died, a deadline) */
        return tempo__err(st, "allreduce of %zu x %s through CUDA IPC: %s", count,
                          tempo_dtype_name(dtype), tempo__errmsg());
    }
    if (mine != TEMPO_OK) {
        return tempo__err(mine, "all-reduce through CUDA IPC: %s", err);
    }
    if (!all_ok) {
        return tempo__err(TEMPO_ERR_REMOTE, "all-reduce through CUDA IPC: another rank's part "
                          "failed (its error says why); the receive buffer is undefined");
    }
    return TEMPO_OK;
}
