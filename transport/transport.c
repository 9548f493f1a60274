/*
 * transport.c — the transport layer's entry points: preparation before the rendezvous, setup of tcp
 * and shm after it, the per-peer choice of transport, dispatch of transfers, the hooks the engine
 * calls (progress, idle, close), setup messaging, and the transport table shown by tempo-info.
 *
 * Per-peer choice: a peer on this host (same host id) goes through shm when shared memory was set
 * up, every other peer through tcp. Host ids come from the rendezvous (TEMPO_HOST_ID overrides
 * them), so all ranks make the same choice.
 */
#include "config.h"

#include "transport/tl_int.h"
#include "core/cfg.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <unistd.h>

#define CLOSE_FLUSH_S 5.0

tempo_status_t tempo__tl_prepare(const tempo__addr_t *local, tempo__peer_info_t *info,
                                 int *listen_fd_p)
{
    tempo__addr_t any = *local, bound;
    if (any.ss.ss_family == AF_INET) {
        ((struct sockaddr_in *)&any.ss)->sin_addr.s_addr = htonl(INADDR_ANY);
    } else {
        ((struct sockaddr_in6 *)&any.ss)->sin6_addr = in6addr_any;
    }
    tempo__addr_set_port(&any, 0);
    TEMPO_CHECK(tempo__sock_listen(&any, listen_fd_p, &bound));
    tempo__addr_t adv = *local;
    tempo__addr_set_port(&adv, tempo__addr_port(&bound));
    memset(info->addr, 0, sizeof(info->addr));
    memcpy(info->addr, &adv.ss, adv.len);
    info->addr_len = adv.len;
    return TEMPO_OK;
}

static int tl_progress(tempo__world_t *w)
{
    tempo__tl_t *tl = w->tl;
    int ev = 0;
    if (tl->shm) {
        ev += tempo__shm_progress(tl->shm);
    }
    ev += tempo__tcp_progress(tl->tcp, 0);
    return ev;
}

/* Called without the world lock (a caller's wait and the progress thread may both be idle), so it
 * only waits for socket readiness and moves no data: the next progress pass does that. */
static int tl_idle(tempo__world_t *w, int timeout_ms)
{
    tempo__tl_t *tl = w->tl;
    int why = tempo__tcp_wait(tl->tcp, timeout_ms);
    if (why == TEMPO__WAKE_BELL) {
        tempo__shm_bell_drain(tl->shm);
    }
    return why;
}

static int tl_doze(tempo__world_t *w, int sleeping)
{
    return tempo__shm_doze(((tempo__tl_t *)w->tl)->shm, sleeping);
}

static void tl_note(tempo__world_t *w, int peer, const void *data, size_t len)
{
    if (peer >= 0 && peer < w->size && peer != w->rank && w->peers[peer].data_tl &&
        !w->peers[peer].left) {
        (void)w->peers[peer].data_tl->note(w->peers[peer].data_ep, data, len);
    }
}

static void tl_close(tempo__world_t *w, int graceful)
{
    tempo__tl_t *tl = w->tl;
    if (!tl) {
        return;
    }
    TEMPO_INFO(TEMPO_SUB_TRANSPORT,
               "idle sleeps woken by the shm doorbell %llu, by sockets %llu, by the 1 ms timeout "
               "%llu",
               (unsigned long long)w->wakes[TEMPO__WAKE_BELL],
               (unsigned long long)w->wakes[TEMPO__WAKE_IO],
               (unsigned long long)w->wakes[TEMPO__WAKE_TIMEOUT]);
    w->tl_doze = NULL;
    w->shm_sleepers = NULL;
    /* Goodbyes are flushed for a while on a healthy job; after a failure they are best effort,
     * since a dead peer never drains its ring or socket. */
    uint64_t deadline =
        w->failed == TEMPO_OK ? tempo__deadline_after(TEMPO_MIN(CLOSE_FLUSH_S, w->timeout_s)) : 0;
    /* shm first: its goodbye must be in the ring before the tcp connection closes. */
    tempo__shm_close(tl->shm, graceful, deadline);
    tempo__tcp_close(tl->tcp, graceful, deadline);
    for (int p = 0; p < w->size; p++) {
        w->peers[p].data_tl = NULL;
        w->peers[p].data_ep = NULL;
    }
    tempo__free(tl);
    w->tl = NULL;
    w->tl_progress = NULL;
    w->tl_idle = NULL;
    w->tl_close = NULL;
    w->tl_note = NULL;
}

tempo_status_t tempo__tl_setup(tempo__world_t *w, int listen_fd, uint64_t deadline)
{
    tempo__tl_t *tl = tempo__calloc(1, sizeof(*tl), "transports");
    if (!tl) {
        close(listen_fd);
        return TEMPO_ERR_NOMEM;
    }
    tl->world = w;
    tempo_status_t st = tempo__tcp_setup(w, listen_fd, deadline, &tl->tcp);
    if (st != TEMPO_OK) {
        tempo__free(tl);
        return st;
    }
    for (int p = 0; p < w->size; p++) {
        w->peers[p].data_tl = &tempo__tcp_ops;
        w->peers[p].data_ep = tempo__tcp_ep(tl->tcp, p);
    }
    w->tl = tl;
    w->tl_progress = tl_progress;
    w->tl_idle = tl_idle;
    w->tl_close = tl_close;
    w->tl_note = tl_note;
    st = tempo__shm_setup(w, deadline, &tl->shm);
    if (st != TEMPO_OK) {
        tl_close(w, 0);
        return st;
    }
    int nshm = 0;
    for (int p = 0; p < w->size; p++) {
        void *ep = tempo__shm_ep(tl->shm, p);
        if (ep) {
            w->peers[p].data_tl = &tempo__shm_ops;
            w->peers[p].data_ep = ep;
            tempo__tcp_set_data(tl->tcp, p, 0);
            nshm++;
        }
    }
    int bell = tempo__shm_bell_fd(tl->shm);
    if (bell >= 0) {
        st = tempo__tcp_watch(tl->tcp, bell);
        if (st != TEMPO_OK) {
            tl_close(w, 0);
            return st;
        }
        w->tl_doze = tl_doze;
        w->shm_sleepers = tempo__shm_sleepers(tl->shm);
    }
    TEMPO_INFO(TEMPO_SUB_INIT, "transports: %d peers over shm, %d over tcp", nshm,
               w->size - 1 - nshm);
    return TEMPO_OK;
}

/* No transport to peer: an invalid rank (a bug), or connections already closed by an abort. */
static tempo_status_t bad_peer(tempo__world_t *w, int peer, tempo__xfer_t *x)
{
    x->complete = 1;
    if (peer >= 0 && peer < w->size && peer != w->rank) {
        x->status = w->failed != TEMPO_OK ? w->failed : TEMPO_ERR_REMOTE;
        return TEMPO_OK;
    }
    x->status = TEMPO_ERR_INTERNAL;
    return tempo__err(TEMPO_ERR_INTERNAL, "transfer to invalid peer %d", peer);
}

static tempo_status_t post_send(tempo__world_t *w, int peer, uint64_t tag, const void *buf,
                                size_t len, tempo__xfer_t *x, int urgent)
{
    x->peer = peer;
    x->is_send = 1;
    x->tag = tag;
    x->buf = (void *)buf;
    x->len = len;
    x->priv = NULL;
    x->remote_len = 0;
    x->sig_differs = 0;
    x->urgent = urgent;
    if (TEMPO_UNLIKELY(peer < 0 || peer >= w->size || peer == w->rank || !w->peers[peer].data_tl)) {
        return bad_peer(w, peer, x);
    }
    return w->peers[peer].data_tl->isend(w->peers[peer].data_ep, x);
}

tempo_status_t tempo__tl_isend(tempo__world_t *w, int peer, uint64_t tag, const void *buf,
                               size_t len, tempo__xfer_t *x)
{
    return post_send(w, peer, tag, buf, len, x, 0);
}

tempo_status_t tempo__tl_isend_urgent(tempo__world_t *w, int peer, uint64_t tag, const void *buf,
                                      size_t len, tempo__xfer_t *x)
{
    return post_send(w, peer, tag, buf, len, x, 1);
}

tempo_status_t tempo__tl_irecv(tempo__world_t *w, int peer, uint64_t tag, void *buf, size_t len,
                               tempo__xfer_t *x)
{
    x->peer = peer;
    x->is_send = 0;
    x->tag = tag;
    x->buf = buf;
    x->len = len;
    x->priv = NULL;
    x->remote_len = 0;
    x->sig_differs = 0;
    if (TEMPO_UNLIKELY(peer < 0 || peer >= w->size || peer == w->rank || !w->peers[peer].data_tl)) {
        return bad_peer(w, peer, x);
    }
    return w->peers[peer].data_tl->irecv(w->peers[peer].data_ep, x);
}

void tempo__tl_cancel(tempo__world_t *w, tempo__xfer_t *x)
{
    if (x->complete || x->peer < 0 || x->peer >= w->size || !w->peers[x->peer].data_tl) {
        return;
    }
    w->peers[x->peer].data_tl->cancel(w->peers[x->peer].data_ep, x);
}

void tempo__tl_purge_ctx(tempo__world_t *w, int peer, int ctx)
{
    if (peer >= 0 && peer < w->size && peer != w->rank && w->peers[peer].data_tl) {
        w->peers[peer].data_tl->purge(w->peers[peer].data_ep, ctx);
    }
}

const char *tempo__xfer_error(tempo__world_t *w, const tempo__xfer_t *x, char *buf, size_t len)
{
    char desc[160];
    tempo__peer_desc(w, x->peer, desc, sizeof(desc));
    if (x->status == TEMPO_ERR_INVALID && !x->is_send) {
        snprintf(buf, len,
                 "%s sent %zu bytes where %zu were expected (do all ranks pass the same "
                 "count and dtype?)",
                 desc, x->remote_len, x->len);
    } else if (x->status == TEMPO_ERR_REMOTE && w->peers[x->peer].left) {
        snprintf(buf, len,
                 "%s has left (destroyed its communicator) while this operation needed it", desc);
    } else if (w->failed != TEMPO_OK) {
        snprintf(buf, len, "%s", w->failmsg);
    } else {
        snprintf(buf, len, "transfer with %s failed: %s", desc, tempo_strerror(x->status));
    }
    return buf;
}

/* ---------------------------------------------------------------------------------------------- */

typedef struct {
    tempo__xfer_t *x;
    int n;
} ctrl_wait_t;

static int ctrl_done(void *arg)
{
    ctrl_wait_t *c = arg;
    for (int i = 0; i < c->n; i++) {
        if (!c->x[i].complete) {
            return 0;
        }
    }
    return 1;
}

tempo_status_t tempo__ctrl_exchange(tempo__world_t *w, tempo__ctrl_msg_t *sends, int nsend,
                                    tempo__ctrl_msg_t *recvs, int nrecv, uint64_t deadline,
                                    const char *what)
{
    tempo__tl_t *tl = w->tl;
    int n = nsend + nrecv;
    tempo__xfer_t *x = tempo__calloc((size_t)(n ? n : 1), sizeof(*x), "setup messages");
    if (!x) {
        return TEMPO_ERR_NOMEM;
    }
    for (int i = 0; i < nrecv; i++) {
        tempo__xfer_t *r = &x[nsend + i];
        r->peer = recvs[i].peer;
        r->tag = tempo__tag_p2p(TEMPO_CTX_MAX, recvs[i].code);
        r->buf = recvs[i].buf;
        r->len = recvs[i].len;
        tempo__stream_irecv(tempo__tcp_stream(tl->tcp, recvs[i].peer), r);
    }
    for (int i = 0; i < nsend; i++) {
        tempo__xfer_t *s = &x[i];
        s->peer = sends[i].peer;
        s->is_send = 1;
        s->tag = tempo__tag_p2p(TEMPO_CTX_MAX, sends[i].code);
        s->buf = sends[i].buf;
        s->len = sends[i].len;
        tempo__stream_isend(tempo__tcp_stream(tl->tcp, sends[i].peer), s);
    }
    ctrl_wait_t c = {x, n};
    tempo_status_t st = tempo__engine_wait_until(w, ctrl_done, &c, deadline, what);
    for (int i = 0; i < n && st == TEMPO_OK; i++) {
        if (x[i].status != TEMPO_OK) {
            char buf[TEMPO_ERRMSG_LEN];
            st = tempo__err(x[i].status, "%s: %s", what,
                            tempo__xfer_error(w, &x[i], buf, sizeof(buf)));
        }
    }
    if (st != TEMPO_OK) {
        for (int i = 0; i < n; i++) {
            if (!x[i].complete) {
                tempo__stream_cancel(tempo__tcp_stream(tl->tcp, x[i].peer), &x[i]);
            }
        }
    }
    tempo__free(x);
    return st;
}

/* ---------------------------------------------------------------------------------------------- */

tempo_status_t tempo__tl_info(size_t index, tempo_transport_info_t *info_p)
{
    static char shm_detail[160];
    static const char *const names[] = {"shm", "tcp", "ucx", "verbs"};
    if (!info_p || index >= TEMPO_ARRAY_SIZE(names)) {
        return TEMPO_ERR_INVALID;
    }
    info_p->name = names[index];
    switch (index) {
    case 0: {
        if (tempo__config_load() != TEMPO_OK) { /* the defaults, which nothing will use */
            info_p->available = 0;
            info_p->detail = "not usable: the configuration is refused (see tempo-info -c)";
            break;
        }
        snprintf(shm_detail, sizeof(shm_detail),
                 "POSIX shared memory rings between ranks of one host (%s; rings of %zu bytes per "
                 "direction)",
                 tempo__cfg.shm ? "enabled" : "disabled by TEMPO_SHM=0", tempo__cfg.shm_ring_bytes);
        info_p->available = tempo__cfg.shm;
        info_p->detail = shm_detail;
        break;
    }
    case 1:
        info_p->available = 1;
        info_p->detail = "TCP sockets between hosts; also liveness and setup between local ranks";
        break;
    case 2:
        info_p->available = 0;
        info_p->detail = TEMPO_HAVE_UCX ? "UCX found at build time; the ucx transport is not part "
                                          "of this version"
                                        : "not built (UCX not found at configure time)";
        break;
    default:
        info_p->available = 0;
        info_p->detail = TEMPO_HAVE_VERBS ? "libibverbs found at build time; the verbs transport "
                                            "is not part of this version"
                                          : "not built (libibverbs not found at configure time)";
        break;
    }
    return TEMPO_OK;
}
