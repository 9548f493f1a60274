/*
 * transport.c — the transport layer's entry points: the registration table of backends (the only
 * place that names them), preparation before the rendezvous, setup of the backends a job selects
 * after it, the per-peer choice, dispatch of transfers, the hooks the engine calls (progress, idle,
 * close), and the transport table shown by tempo-info. Everything past the table goes through
 * tempo__tl_backend_t (tl_int.h).
 *
 * Per-peer choice: TEMPO_TRANSPORTS is an ordered preference list ("ucx,tcp"; "^shm" leaves shm
 * out). shm goes first unless the list places or excludes it (TEMPO_SHM=0 also excludes it); an
 * empty list means the backends that are on by default, by priority (shm, tcp). Each peer goes to
 * the first backend of the order that reaches it; ep() answers the same at both ends of each pair
 * and every rank must resolve the same order (checked), so all ranks make the same choice.
 */
#include "config.h"

#include "transport/tl_int.h"
#include "core/cfg.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <unistd.h>

#define CLOSE_FLUSH_S 5.0

/* ---------------------------------------------------------------------------------------------- */
/* Registration                                                                                   */
/* ---------------------------------------------------------------------------------------------- */

const tempo__tl_backend_t *const tempo__tl_backends[] = {
    &tempo__shm_backend,
    &tempo__tcp_backend,
#if TEMPO_HAVE_UCX
    &tempo__ucx_backend,
#endif
#if TEMPO_HAVE_VERBS
    &tempo__verbs_backend,
#endif
};
const int tempo__tl_nbackends = (int)TEMPO_ARRAY_SIZE(tempo__tl_backends);

/* Transports this build does not have, and why (tempo-info lists them; naming one in
 * TEMPO_TRANSPORTS is a warning, not an error, so one job script serves every build). Ends with
 * a NULL name, so that a build with every transport still has an entry. */
static const struct {
    const char *name, *why;
} absent[] = {
#if !TEMPO_HAVE_UCX
    {"ucx", "not built (UCX not found at configure time, or --without-ucx)"},
#endif
#if !TEMPO_HAVE_VERBS
    {"verbs", "not built (libibverbs not found at configure time, or --without-verbs)"},
#endif
    {NULL, NULL},
};
#define NABSENT (TEMPO_ARRAY_SIZE(absent) - 1)

/* ---------------------------------------------------------------------------------------------- */
/* TEMPO_TRANSPORTS                                                                               */
/* ---------------------------------------------------------------------------------------------- */

static const tempo__tl_backend_t *backend_named(const char *name, size_t len)
{
    for (int i = 0; i < tempo__tl_nbackends; i++) {
        if (strlen(tempo__tl_backends[i]->name) == len &&
            memcmp(tempo__tl_backends[i]->name, name, len) == 0) {
            return tempo__tl_backends[i];
        }
    }
    return NULL;
}

static const char *absent_named(const char *name, size_t len)
{
    for (size_t i = 0; absent[i].name; i++) {
        if (strlen(absent[i].name) == len && memcmp(absent[i].name, name, len) == 0) {
            return absent[i].why;
        }
    }
    return NULL;
}

static unsigned backend_bit(const tempo__tl_backend_t *b)
{
    for (int i = 0; i < tempo__tl_nbackends; i++) {
        if (tempo__tl_backends[i] == b) {
            return 1u << i;
        }
    }
    return 0;
}

/* Resolve spec into order[] (returns the count, or -1 with tempo__err set): listed backends in
 * their order, shm first when neither placed nor excluded, the default ones by priority when
 * nothing is listed. warn: log the names this build lacks. */
static int resolve(const char *spec, int shm_on, const tempo__tl_backend_t **order, int warn)
{
    const tempo__tl_backend_t *listed[TEMPO__TL_MAX];
    int nlisted = 0, nplain = 0;
    unsigned excluded = 0, seen = 0;
    size_t slen = strlen(spec);
    if (slen && spec[slen - 1] == ',') {
        tempo__err(TEMPO_ERR_INVALID, "TEMPO_TRANSPORTS=%s: unknown transport '' (known: shm, tcp, "
                   "ucx, verbs; ^name excludes one)", spec);
        return -1;
    }
    const char *p = spec;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        int ex = len > 0 && p[0] == '^';
        const char *name = p + ex;
        size_t nlen = len - (size_t)ex;
        const tempo__tl_backend_t *b = backend_named(name, nlen);
        const char *why = b ? NULL : absent_named(name, nlen);
        if (!b && !why) {
            tempo__err(TEMPO_ERR_INVALID,
                       "TEMPO_TRANSPORTS=%s: unknown transport '%.*s' (known: shm, tcp, ucx, "
                       "verbs; ^name excludes one)",
                       spec, (int)nlen, name);
            return -1;
        }
        unsigned bit = b ? backend_bit(b) : 0;
        char key[16];
        snprintf(key, sizeof(key), "%.*s", (int)TEMPO_MIN(nlen, sizeof(key) - 1), name);
        if (b && (seen & bit)) {
            tempo__err(TEMPO_ERR_INVALID, "TEMPO_TRANSPORTS=%s: '%s' appears twice", spec, key);
            return -1;
        }
        seen |= bit;
        nplain += !ex;
        if (!b) {
            if (warn) {
                TEMPO_WARN(TEMPO_SUB_INIT, "TEMPO_TRANSPORTS names %s, which this build cannot "
                                           "use: %s",
                           key, why);
            }
        } else if (ex) {
            excluded |= bit;
        } else {
            listed[nlisted++] = b;
        }
        p = end ? end + 1 : p + len;
    }
    int n = 0, have_shm = 0;
    for (int i = 0; i < nlisted; i++) {
        have_shm |= listed[i] == &tempo__shm_backend;
    }
    if (shm_on && !have_shm && !(excluded & backend_bit(&tempo__shm_backend))) {
        order[n++] = &tempo__shm_backend;
    }
    if (nplain == 0) { /* only exclusions, or nothing at all: the defaults, by priority */
        for (int prio = 0; prio < 1000; prio++) {
            for (int i = 0; i < tempo__tl_nbackends; i++) {
                const tempo__tl_backend_t *b = tempo__tl_backends[i];
                if (b->priority == prio && b->by_default && b != &tempo__shm_backend &&
                    !(excluded & backend_bit(b))) {
                    order[n++] = b;
                }
            }
        }
    }
    for (int i = 0; i < nlisted; i++) {
        if (listed[i] != &tempo__shm_backend || shm_on) {
            order[n++] = listed[i];
        }
    }
    if (n == 0) {
        tempo__err(TEMPO_ERR_INVALID, "TEMPO_TRANSPORTS=%s leaves no transport for data%s", spec,
                   shm_on ? "" : " (TEMPO_SHM=0 excludes shm)");
        return -1;
    }
    return n;
}

tempo_status_t tempo__tl_spec_check(const char *text)
{
    const tempo__tl_backend_t *order[TEMPO__TL_MAX];
    return resolve(text, 1, order, 0) < 0 ? TEMPO_ERR_INVALID : TEMPO_OK;
}

static void order_text(const tempo__tl_backend_t *const *order, int n, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < n && o < len; i++) {
        o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? "," : "", order[i]->name);
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Setup                                                                                          */
/* ---------------------------------------------------------------------------------------------- */

tempo_status_t tempo__tl_prepare(const tempo__addr_t *local, tempo__peer_info_t *info,
                                 int *listen_fd_p)
{
    const tempo__tl_backend_t *order[TEMPO__TL_MAX];
    int n = resolve(tempo__cfg.transports, tempo__cfg.shm, order, 1);
    if (n < 0) {
        return TEMPO_ERR_INVALID;
    }
    order_text(order, n, info->transports, sizeof(info->transports));
    if (tempo__cfg.encrypt) {
        /* Only tcp is sealed: a pair must not go over a network transport that is not. */
        for (int i = 0; i < n; i++) {
            if (order[i] != &tempo__shm_backend && order[i] != &tempo__tcp_backend) {
                return tempo__err(TEMPO_ERR_INVALID,
                                  "TEMPO_ENCRYPT=1 seals tcp only, and TEMPO_TRANSPORTS lists %s "
                                  "(leave it out, or unset TEMPO_ENCRYPT)",
                                  order[i]->name);
            }
        }
        /* (in the text the ranks must agree on: one without it disagrees at the start) */
        size_t l = strlen(info->transports);
        snprintf(info->transports + l, sizeof(info->transports) - l, "+sealed");
    }
    /* Listen on the address the peers are told (the one this rank reached the rendezvous from),
     * not on every interface; where it is not this host's, on every interface, saying so. */
    tempo__addr_t here = *local, bound;
    tempo__addr_set_port(&here, 0);
    if (tempo__sock_listen(&here, listen_fd_p, &bound) != TEMPO_OK) {
        char msg[TEMPO_ERRMSG_LEN];
        snprintf(msg, sizeof(msg), "%s", tempo__errmsg());
        tempo__addr_t any = here;
        tempo__addr_set_any(&any);
        TEMPO_CHECK(tempo__sock_listen(&any, listen_fd_p, &bound));
        if (!tempo__addr_is_any(&here)) {
            TEMPO_WARN(TEMPO_SUB_TRANSPORT, "%s; listening on every interface instead", msg);
        }
    }
    tempo__addr_t adv = *local;
    tempo__addr_set_port(&adv, tempo__addr_port(&bound));
    char text[96];
    TEMPO_INFO(TEMPO_SUB_TRANSPORT, "data transport listens at %s%s",
               tempo__addr_str(&adv, text, sizeof(text)),
               tempo__cfg.ifname[0] ? " (TEMPO_IFNAME)" : "");
    memset(info->addr, 0, sizeof(info->addr));
    memcpy(info->addr, &adv.ss, adv.len);
    info->addr_len = adv.len;
    return TEMPO_OK;
}

static int tl_progress(tempo__world_t *w)
{
    tempo__tl_t *tl = w->tl;
    int ev = 0;
    for (int i = 0; i < tl->n; i++) {
        if (tl->inst[i]) {
            ev += tl->b[i]->progress(tl->inst[i]);
        }
    }
    return ev;
}

/* Called without the world lock (a caller's wait and the progress thread may both be idle), so it
 * only waits for readiness and moves no data: the next progress pass does that. */
static int tl_idle(tempo__world_t *w, int timeout_ms)
{
    tempo__tl_t *tl = w->tl;
    int why = tl->ctl->wait(tl->ctl_inst, timeout_ms);
    if (why == TEMPO__WAKE_BELL) {
        for (int i = 0; i < tl->n; i++) {
            if (tl->inst[i] && tl->b[i]->woken) {
                tl->b[i]->woken(tl->inst[i]);
            }
        }
    }
    return why;
}

static int tl_doze(tempo__world_t *w, int sleeping)
{
    tempo__tl_t *tl = w->tl;
    int dozing = 0;
    for (int i = 0; i < tl->n; i++) {
        if (tl->inst[i] && tl->b[i]->doze) {
            dozing |= tl->b[i]->doze(tl->inst[i], sleeping);
        }
    }
    return dozing;
}

static void tl_note(tempo__world_t *w, int peer, const void *data, size_t len)
{
    if (peer >= 0 && peer < w->size && peer != w->rank && w->peers[peer].data_tl &&
        !w->peers[peer].left) {
        (void)w->peers[peer].data_tl->note(w->peers[peer].data_ep, data, len);
    }
}

/* The same note on the pair's control connection, where another transport carries its data: a
 * note that must arrive even when that transport has stalled (a peer stopped in the middle of
 * writing UCX's shared-memory FIFO blocks everything behind it in the reader's FIFO). */
static void tl_note_ctl(tempo__world_t *w, int peer, const void *data, size_t len)
{
    tempo__tl_t *tl = w->tl;
    void *ep = tl->ctl_inst && peer >= 0 && peer < w->size && peer != w->rank &&
                       !w->peers[peer].left
                   ? tl->ctl->ep(tl->ctl_inst, peer)
                   : NULL;
    if (ep && ep != w->peers[peer].data_ep) {
        (void)tl->ctl->ops->note(ep, data, len);
    }
}

static void tl_close(tempo__world_t *w, int graceful)
{
    tempo__tl_t *tl = w->tl;
    if (!tl) {
        return;
    }
    TEMPO_INFO(TEMPO_SUB_TRANSPORT,
               "idle sleeps woken by a transport's descriptor (shm doorbell, ucx/verbs events) "
               "%llu, by sockets %llu, by the 1 ms timeout %llu",
               (unsigned long long)w->wakes[TEMPO__WAKE_BELL],
               (unsigned long long)w->wakes[TEMPO__WAKE_IO],
               (unsigned long long)w->wakes[TEMPO__WAKE_TIMEOUT]);
    w->tl_doze = NULL;
    w->shm_sleepers = NULL;
    /* Goodbyes are flushed for a while on a healthy job; after a failure they are best effort,
     * since a dead peer never drains its ring or socket. */
    uint64_t deadline =
        w->failed == TEMPO_OK ? tempo__deadline_after(TEMPO_MIN(CLOSE_FLUSH_S, w->timeout_s)) : 0;
    /* The data backends first: their goodbyes must be out before the control connections close,
     * or a peer would read the end of the control stream as a death. */
    for (int i = 0; i < tl->n; i++) {
        if (tl->b[i] != tl->ctl && tl->inst[i]) {
            tl->b[i]->close(tl->inst[i], graceful, deadline);
            tl->inst[i] = NULL;
        }
    }
    if (tl->ctl_inst) { /* last: its goodbyes go after the others' */
        tl->ctl->close(tl->ctl_inst, graceful, deadline);
    }
    if (tl->listen_fd >= 0) {
        close(tl->listen_fd);
    }
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
    w->tl_note_ctl = NULL;
}

/* Refuse a job whose ranks resolved different preference orders: both ends of a pair must choose
 * the same backend. */
static tempo_status_t check_agree(tempo__world_t *w)
{
    const char *mine = w->peers[w->rank].info.transports;
    for (int p = 0; p < w->size; p++) {
        const char *theirs = w->peers[p].info.transports;
        if (strncmp(mine, theirs, sizeof(w->peers[p].info.transports)) != 0) {
            char desc[160];
            return tempo__err(TEMPO_ERR_INVALID,
                              "ranks disagree on the transports: this rank (%d) uses '%s' and %s "
                              "uses '%.*s' (TEMPO_TRANSPORTS, TEMPO_SHM and TEMPO_ENCRYPT must be the "
                              "same on every rank)",
                              w->rank, mine, tempo__peer_desc(w, p, desc, sizeof(desc)),
                              (int)sizeof(w->peers[p].info.transports), theirs);
        }
    }
    return TEMPO_OK;
}

/* "1-3,7" */
static void ranks_text(const unsigned char *sel, int n, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = 0;
    for (int r = 0; r < n && o + 24 < len; r++) {
        if (!sel[r] || (r > 0 && sel[r - 1])) {
            continue;
        }
        int e = r;
        while (e + 1 < n && sel[e + 1]) {
            e++;
        }
        o += (size_t)(e > r ? snprintf(buf + o, len - o, "%s%d-%d", o ? "," : "", r, e)
                            : snprintf(buf + o, len - o, "%s%d", o ? "," : "", r));
    }
}

/* Give each peer to the first backend of the order that reaches it; log the choice. */
static tempo_status_t choose(tempo__world_t *w, const tempo__tl_backend_t **order, int n,
                             unsigned char *want, unsigned char *mine, uint64_t deadline)
{
    tempo__tl_t *tl = w->tl;
    for (int p = 0; p < w->size; p++) {
        want[p] = p != w->rank;
    }
    for (int k = 0; k < n; k++) {
        const tempo__tl_backend_t *b = order[k];
        void *inst = b == tl->ctl ? tl->ctl_inst : NULL;
        if (b != tl->ctl) {
            TEMPO_CHECK(b->open(w, want, deadline, &inst));
            tl->b[tl->n] = b;
            tl->inst[tl->n++] = inst;
        }
        int count = 0;
        for (int p = 0; p < w->size; p++) {
            void *ep = inst && want[p] ? b->ep(inst, p) : NULL;
            mine[p] = ep != NULL;
            if (ep) {
                w->peers[p].data_tl = b->ops;
                w->peers[p].data_ep = ep;
                want[p] = 0;
                count++;
            }
        }
        if (count) {
            char list[256];
            ranks_text(mine, w->size, list, sizeof(list));
            TEMPO_INFO(TEMPO_SUB_INIT, "transport %s carries the data of %d peer%s: rank%s %s",
                       b->name, count, count == 1 ? "" : "s", count == 1 ? "" : "s", list);
        }
    }
    for (int p = 0; p < w->size; p++) {
        if (want[p]) {
            char desc[160];
            return tempo__err(TEMPO_ERR_UNSUPPORTED,
                              "no transport of '%s' reaches %s (TEMPO_TRANSPORTS; tempo-info lists "
                              "what this build has)",
                              w->peers[w->rank].info.transports,
                              tempo__peer_desc(w, p, desc, sizeof(desc)));
        }
    }
    return TEMPO_OK;
}

tempo_status_t tempo__tl_setup(tempo__world_t *w, int listen_fd, uint64_t deadline)
{
    tempo__tl_t *tl = tempo__calloc(1, sizeof(*tl), "transports");
    unsigned char *want = tempo__calloc((size_t)w->size * 2, 1, "transport choice");
    if (!tl || !want) {
        tempo__free(tl);
        tempo__free(want);
        close(listen_fd);
        return TEMPO_ERR_NOMEM;
    }
    tl->world = w;
    tl->listen_fd = listen_fd;
    w->tl = tl;
    w->tl_progress = tl_progress;
    w->tl_idle = tl_idle;
    w->tl_close = tl_close;
    w->tl_note = tl_note;
    w->tl_note_ctl = tl_note_ctl;
    const tempo__tl_backend_t *order[TEMPO__TL_MAX];
    int n = resolve(tempo__cfg.transports, tempo__cfg.shm, order, 0);
    tempo_status_t st = n < 0 ? TEMPO_ERR_INVALID : check_agree(w);
    /* The control backend first: the others exchange their connection data through it. */
    for (int i = 0; i < tempo__tl_nbackends && st == TEMPO_OK; i++) {
        if (tempo__tl_backends[i]->caps & TEMPO__TL_CAP_CONTROL) {
            tl->ctl = tempo__tl_backends[i];
        }
    }
    if (st == TEMPO_OK) {
        for (int p = 0; p < w->size; p++) {
            want[p] = p != w->rank;
        }
        st = tl->ctl->open(w, want, deadline, &tl->ctl_inst);
    }
    if (tl->ctl_inst) { /* progressed from now on: the other backends' open() talk through it */
        tl->b[tl->n] = tl->ctl;
        tl->inst[tl->n++] = tl->ctl_inst;
    }
    if (st == TEMPO_OK) {
        st = choose(w, order, n, want, want + w->size, deadline);
    }
    if (tl->ctl_inst) {
        for (int p = 0; p < w->size && st == TEMPO_OK; p++) {
            if (p != w->rank && tl->ctl->carries) {
                tl->ctl->carries(tl->ctl_inst, p, w->peers[p].data_tl == tl->ctl->ops);
            }
        }
    }
    for (int i = 0; i < tl->n && st == TEMPO_OK; i++) {
        int fd = tl->b[i] != tl->ctl && tl->b[i]->wait_fd ? tl->b[i]->wait_fd(tl->inst[i]) : -1;
        if (fd >= 0) {
            st = tl->ctl->watch(tl->ctl_inst, fd);
        }
    }
    tempo__free(want);
    if (st != TEMPO_OK) {
        tl_close(w, 0);
        return st;
    }
    w->tl_doze = tl_doze;
    return TEMPO_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Dispatch                                                                                       */
/* ---------------------------------------------------------------------------------------------- */

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

tempo_status_t tempo__tl_inject(tempo__world_t *w, int peer, const void *bytes, size_t len)
{
    if (peer < 0 || peer >= w->size || peer == w->rank || !w->peers[peer].data_tl ||
        !w->peers[peer].data_tl->inject) {
        return tempo__err(TEMPO_ERR_INVALID, "no data transport to rank %d to inject into", peer);
    }
    return w->peers[peer].data_tl->inject(w->peers[peer].data_ep, bytes, len);
}

const char *tempo__tl_name(tempo__world_t *w, int peer)
{
    if (peer < 0 || peer >= w->size || !w->peers[peer].data_tl) {
        return "none";
    }
    return w->peers[peer].data_tl->name;
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
/* tempo-info                                                                                     */
/* ---------------------------------------------------------------------------------------------- */

void tempo__tl_compiled(char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < tempo__tl_nbackends && o < len; i++) {
        o += (size_t)snprintf(buf + o, len - o, "%s%s", i ? ", " : "", tempo__tl_backends[i]->name);
    }
}

tempo_status_t tempo__tl_info(size_t index, tempo_transport_info_t *info_p)
{
    static char detail[TEMPO__TL_MAX + NABSENT][320];
    size_t nb = (size_t)tempo__tl_nbackends;
    if (!info_p || index >= nb + NABSENT) {
        return TEMPO_ERR_INVALID;
    }
    if (index >= nb) {
        info_p->name = absent[index - nb].name;
        info_p->available = 0;
        info_p->detail = absent[index - nb].why;
        return TEMPO_OK;
    }
    const tempo__tl_backend_t *b = tempo__tl_backends[index];
    static const char *const caps[] = {"tagged", "rma", "memreg", "wait-fd", "control"};
    info_p->name = b->name;
    info_p->available = b->probe(detail[index], sizeof(detail[index]));
    size_t o = strlen(detail[index]);
    for (size_t i = 0, k = 0; i < TEMPO_ARRAY_SIZE(caps) && o < sizeof(detail[index]); i++) {
        if (b->caps & (1u << i)) {
            o += (size_t)snprintf(detail[index] + o, sizeof(detail[index]) - o, "%s%s",
                                  k++ ? ", " : " [", caps[i]);
        }
    }
    if (o < sizeof(detail[index]) && b->caps) {
        snprintf(detail[index] + o, sizeof(detail[index]) - o, "]");
    }
    info_p->detail = detail[index];
    return TEMPO_OK;
}
