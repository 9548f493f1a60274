/*
 * tcp.c — the tcp transport: one connection per pair of ranks, non-blocking sockets driven by
 * epoll, messages framed by the stream layer.
 *
 * Mesh setup: every rank listens (opened before the rendezvous so its address is in the table),
 * then connects to every lower rank and accepts one connection from every higher rank. A connection
 * is a challenge and response: the accepting rank sends 32 random bytes; the connecting one answers
 * with a hello (magic, job uuid, rank, its own 32 random bytes) and, with a job key (core/auth.h),
 * an HMAC-SHA-256 over the challenge and the hello; the accepting rank checks it, and answers with
 * a MAC over the connecting rank's challenge, which that one checks. Without a key, the job uuid
 * (random, learnt at the rendezvous) is all a stranger must not know. The accepting rank reads
 * every connection side by side, each with its own 5 s deadline: strangers, silent or not, are
 * closed (logged with their address) and delay nothing beyond that.
 *
 * Progress polls the sockets on every call when some peer's data goes over tcp, and otherwise at
 * most every 200 us (the connections then only prove liveness and carry setup and goodbye
 * messages).
 *
 * Back-pressure: while a peer's stream refuses to buffer more (tempo__stream_recv_blocked), its
 * socket is watched without EPOLLIN, so that level-triggered readiness of unread data neither
 * makes progress spin nor wakes idle waits; hang-ups are still reported and drain the stream.
 * Every progress pass asks the paused streams again and reads them as soon as they may go on.
 */
#include "config.h"

#include "transport/tl_int.h"

#include "core/auth.h"
#include "core/cfg.h"
#include "transport/seal.h"

#include <errno.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define HELLO_MAGIC 0x544d5043u /* "TMPC" */
#define POLL_EVERY_NS 200000ull

typedef struct tcp_ep {
    tempo__stream_t stream;
    int fd;
    int peer;
    int data;     /* carries this peer's data */
    int want_out; /* EPOLLOUT is armed */
    int no_in;    /* EPOLLIN is not armed: the stream is paused by back-pressure */
    tempo__seal_t *seal; /* TEMPO_ENCRYPT: the connection's sealed records; NULL: plain bytes */
} tcp_ep_t;

typedef struct tcp_tl {
    tempo__world_t *world;
    int epfd;
    tcp_ep_t **eps; /* (size) NULL for this rank */
    int ndata;
    uint64_t last_poll;
} tcp_tl_t;

typedef struct {
    uint32_t magic;
    uint32_t pad;
    uint8_t nonce[TEMPO__AUTH_NONCE];
} mchal_t; /* the accepting rank's challenge */

typedef struct {
    uint32_t magic;
    int32_t rank;
    uint64_t uuid;
    uint8_t nonce[TEMPO__AUTH_NONCE]; /* the connecting rank's challenge */
    uint8_t mac[TEMPO__AUTH_MAC];     /* over the accepting rank's challenge and the above */
} hello_t;

typedef struct {
    uint32_t magic;
    int32_t rank;                 /* the accepting rank */
    uint8_t mac[TEMPO__AUTH_MAC]; /* over the connecting rank's challenge, the hello and rank */
} mack_t;

#define MESH_HELLO_S 5.0
#define MESH_PENDING_MAX 64

static void hello_mac(const uint8_t *chal, const hello_t *h, uint8_t *out)
{
    const void *parts[] = {chal, h};
    size_t lens[] = {TEMPO__AUTH_NONCE, offsetof(hello_t, mac)};
    tempo__auth_mac("tempo tcp hello", 2, parts, lens, out);
}

static void ack_mac(const hello_t *h, int32_t rank, uint8_t *out)
{
    const void *parts[] = {h->nonce, h, &rank};
    size_t lens[] = {TEMPO__AUTH_NONCE, offsetof(hello_t, mac), sizeof(rank)};
    tempo__auth_mac("tempo tcp ack", 3, parts, lens, out);
}

/* A connection's two keys (TEMPO_ENCRYPT): from the job key, the accepting rank's challenge and
 * the connecting rank's own; up: the connecting (higher) rank's records, else the other way. */
static void seal_key(const uint8_t *chal, const uint8_t *nonce, uint8_t up, uint8_t *key)
{
    const void *parts[] = {chal, nonce, &up};
    size_t lens[] = {TEMPO__AUTH_NONCE, TEMPO__AUTH_NONCE, 1};
    tempo__auth_mac("tempo tcp seal", 3, parts, lens, key);
}

static ssize_t tcp_writev(void *pipe, const struct iovec *iov, int iovcnt)
{
    tcp_ep_t *ep = pipe;
    if (ep->seal) {
        return tempo__seal_writev(ep->seal, ep->fd, iov, iovcnt);
    }
    struct msghdr m;
    memset(&m, 0, sizeof(m));
    m.msg_iov = (struct iovec *)iov;
    m.msg_iovlen = (size_t)iovcnt;
    ssize_t r = sendmsg(ep->fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (r >= 0) {
        return r;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        return 0;
    }
    return -errno;
}

static ssize_t tcp_read(void *pipe, void *buf, size_t len)
{
    tcp_ep_t *ep = pipe;
    if (ep->seal) {
        return tempo__seal_read(ep->seal, ep->fd, buf, len);
    }
    ssize_t r = recv(ep->fd, buf, len, MSG_DONTWAIT);
    if (r > 0) {
        return r;
    }
    if (r == 0) {
        return TEMPO_PIPE_EOF;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        return 0;
    }
    return -errno;
}

static const tempo__pipe_ops_t tcp_pipe_ops = {.writev = tcp_writev, .read = tcp_read};

static const tempo__tl_ops_t tcp_ops = TEMPO__STREAM_EP_OPS("tcp");
TEMPO__STREAM_FIRST(tcp_ep_t);

static void *tcp_ep(void *inst, int peer)
{
    tcp_tl_t *t = inst;
    return t->eps[peer];
}

static void tcp_carries(void *inst, int peer, int carries_data)
{
    tcp_tl_t *t = inst;
    tcp_ep_t *ep = t->eps[peer];
    if (ep && ep->data != carries_data) {
        ep->data = carries_data;
        t->ndata += carries_data ? 1 : -1;
    }
}

static void ep_close_fd(tcp_tl_t *t, tcp_ep_t *ep)
{
    if (ep->fd >= 0) {
        epoll_ctl(t->epfd, EPOLL_CTL_DEL, ep->fd, NULL);
        close(ep->fd);
        ep->fd = -1;
    }
}

/* A connection that passed the handshake (chal: the accepting rank's challenge, nonce: the
 * connecting rank's; up: this rank connected), sealed with TEMPO_ENCRYPT. */
static tempo_status_t add_ep(tcp_tl_t *t, int peer, int fd, const uint8_t *chal,
                             const uint8_t *nonce, int up)
{
    tcp_ep_t *ep = tempo__calloc(1, sizeof(*ep), "tcp endpoint");
    if (!ep) {
        close(fd);
        return TEMPO_ERR_NOMEM;
    }
    if (tempo__cfg.encrypt) {
        uint8_t tx[TEMPO__AUTH_MAC], rx[TEMPO__AUTH_MAC];
        seal_key(chal, nonce, (uint8_t)up, tx);
        seal_key(chal, nonce, (uint8_t)!up, rx);
        ep->seal = tempo__seal_new(tx, rx);
        memset(tx, 0, sizeof(tx));
        memset(rx, 0, sizeof(rx));
        if (!ep->seal) {
            close(fd);
            tempo__free(ep);
            return TEMPO_ERR_SYSTEM; /* (the message is set) */
        }
    }
    ep->fd = fd;
    ep->peer = peer;
    tempo_status_t st = tempo__stream_init(&ep->stream, t->world, peer, "tcp", &tcp_pipe_ops, ep);
    if (st != TEMPO_OK) {
        close(fd);
        tempo__seal_free(ep->seal);
        tempo__free(ep);
        return st;
    }
    tempo__sock_set_nonblock(fd, 1);
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = ep};
    if (epoll_ctl(t->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        int e = errno;
        tempo__stream_fini(&ep->stream);
        close(fd);
        tempo__seal_free(ep->seal);
        tempo__free(ep);
        return tempo__err(TEMPO_ERR_SYSTEM, "epoll_ctl(): %s", strerror(e));
    }
    t->eps[peer] = ep;
    return TEMPO_OK;
}

/* Connect to lower rank p and prove who we are (the challenge and response above). */
static tempo_status_t connect_one(tcp_tl_t *t, int p, uint64_t deadline)
{
    tempo__world_t *w = t->world;
    char desc[160];
    tempo__addr_t a;
    memset(&a, 0, sizeof(a));
    memcpy(&a.ss, w->peers[p].info.addr, w->peers[p].info.addr_len);
    a.len = w->peers[p].info.addr_len;
    int fd;
    tempo_status_t st = tempo__sock_connect(&a, deadline, &fd);
    if (st != TEMPO_OK) {
        return tempo__err(st, "cannot connect to %s: %s",
                          tempo__peer_desc(w, p, desc, sizeof(desc)), tempo__errmsg());
    }
    mchal_t ch;
    hello_t h = {HELLO_MAGIC, w->rank, w->job_uuid, {0}, {0}};
    mack_t ack;
    const char *what = "cannot greet";
    st = tempo__sock_recv_all(fd, &ch, sizeof(ch), deadline, "peer");
    if (st == TEMPO_OK && ch.magic != HELLO_MAGIC) {
        st = tempo__err(TEMPO_ERR_REMOTE, "it did not answer as a tempo rank of this version");
    }
    if (st == TEMPO_OK && tempo__auth_random(h.nonce, sizeof(h.nonce)) != 0) {
        st = TEMPO_ERR_SYSTEM;
    }
    if (st == TEMPO_OK) {
        hello_mac(ch.nonce, &h, h.mac);
        st = tempo__sock_send_all(fd, &h, sizeof(h), deadline, "peer");
    }
    if (st == TEMPO_OK) {
        what = "had no answer from";
        st = tempo__sock_recv_all(fd, &ack, sizeof(ack), deadline, "peer");
    }
    if (st == TEMPO_OK) {
        if (!tempo__tcp_ack_ok(&ack, &h, p, tempo__auth_key() == 1)) {
            what = "refused";
            st = tempo__err(TEMPO_ERR_REMOTE, "its answer is not authenticated with this job's "
                            "key (whoever listens at its address does not hold it)");
        }
    }
    if (st != TEMPO_OK) {
        close(fd);
        return tempo__err(st, "%s %s: %s", what, tempo__peer_desc(w, p, desc, sizeof(desc)),
                          tempo__errmsg());
    }
    return add_ep(t, p, fd, ch.nonce, h.nonce, 1);
}

#define NOT_HIGHER "not a higher rank of this job that is still to connect"

const char *tempo__tcp_hello_check(const void *hello, const uint8_t *chal, uint64_t uuid,
                                   int rank, int size, int auth)
{
    hello_t h;
    uint8_t want[TEMPO__AUTH_MAC];
    memcpy(&h, hello, sizeof(h));
    if (h.magic != HELLO_MAGIC || h.uuid != uuid) {
        return "not a tempo rank of this job";
    }
    hello_mac(chal, &h, want);
    if (auth && !tempo__auth_equal(want, h.mac)) {
        return "its hello is not authenticated with this job's key";
    }
    if (h.rank <= rank || h.rank >= size) {
        return NOT_HIGHER;
    }
    return NULL;
}

int tempo__tcp_ack_ok(const void *ack, const void *hello, int p, int auth)
{
    mack_t a;
    uint8_t want[TEMPO__AUTH_MAC];
    memcpy(&a, ack, sizeof(a));
    ack_mac(hello, (int32_t)p, want);
    return a.magic == HELLO_MAGIC && a.rank == p && (!auth || tempo__auth_equal(want, a.mac));
}

/* Whether a whole hello, answering challenge chal, comes from a higher rank of this job that is
 * not connected yet (why not, for the log). */
static const char *hello_bad(tcp_tl_t *t, const uint8_t *chal, const hello_t *h)
{
    tempo__world_t *w = t->world;
    const char *bad =
        tempo__tcp_hello_check(h, chal, w->job_uuid, w->rank, w->size, tempo__auth_key() == 1);
    return bad ? bad : t->eps[h->rank] ? NOT_HIGHER : NULL;
}

static tempo_status_t accept_all(tcp_tl_t *t, int lfd, uint64_t deadline)
{
    tempo__world_t *w = t->world;
    int expected = w->size - 1 - w->rank;
    tempo__greeter_t g;
    TEMPO_CHECK(tempo__greeter_init(&g, MESH_PENDING_MAX, sizeof(hello_t), MESH_HELLO_S, "tcp",
                                    TEMPO_SUB_TRANSPORT));
    mchal_t ch = {HELLO_MAGIC, 0, {0}}; /* (its nonce: the greeter's) */
    tempo_status_t st = TEMPO_OK;
    while (expected > 0 && st == TEMPO_OK) {
        if (tempo__now_ns() >= deadline) {
            char missing[160] = "";
            size_t o = 0;
            for (int p = w->rank + 1; p < w->size && o < sizeof(missing) - 12; p++) {
                if (!t->eps[p]) {
                    o +=
                        (size_t)snprintf(missing + o, sizeof(missing) - o, "%s%d", o ? "," : "", p);
                }
            }
            st = tempo__err(TEMPO_ERR_TIMEOUT, "rank %d: ranks %s did not connect: timed out",
                            w->rank, missing);
            break;
        }
        int i = tempo__greeter_next(&g, lfd, &ch, offsetof(mchal_t, nonce), deadline);
        if (i < 0) {
            continue;
        }
        hello_t h;
        memcpy(&h, g.c[i].buf, sizeof(h));
        const char *bad = hello_bad(t, g.c[i].nonce, &h);
        if (bad) {
            tempo__greeter_drop(&g, i, bad);
            continue;
        }
        mack_t ack = {HELLO_MAGIC, w->rank, {0}};
        ack_mac(&h, w->rank, ack.mac);
        uint8_t chal[TEMPO__AUTH_NONCE];
        memcpy(chal, g.c[i].nonce, sizeof(chal));
        int fd = tempo__greeter_take(&g, i);
        st = tempo__sock_send_all(fd, &ack, sizeof(ack), deadline, "peer");
        if (st != TEMPO_OK) {
            close(fd);
            break;
        }
        st = add_ep(t, h.rank, fd, chal, h.nonce, 0);
        expected--;
    }
    tempo__greeter_free(&g);
    return st;
}

static tempo_status_t connect_mesh(tcp_tl_t *t, int lfd, uint64_t deadline)
{
    for (int p = 0; p < t->world->rank; p++) {
        TEMPO_CHECK(connect_one(t, p, deadline));
    }
    return accept_all(t, lfd, deadline);
}

static void tcp_close(void *inst, int graceful, uint64_t deadline);

/* The control backend: connects every pair whatever want[] says (setup and liveness need the whole
 * mesh), with the listening socket opened before the rendezvous (tempo__tl_prepare). */
static tempo_status_t tcp_open(tempo__world_t *w, const unsigned char *want, uint64_t deadline,
                               void **inst_p)
{
    (void)want;
    tempo__tl_t *tl = w->tl;
    int listen_fd = tl->listen_fd;
    tl->listen_fd = -1;
    if (tempo__cfg.encrypt && tempo__auth_key() != 1) {
        close(listen_fd);
        return tempo__auth_key() < 0
                   ? TEMPO_ERR_INVALID
                   : tempo__err(TEMPO_ERR_INVALID,
                                "TEMPO_ENCRYPT=1 needs a job key to derive its keys from "
                                "(TEMPO_AUTH_KEY or TEMPO_AUTH_KEY_FILE; tempo-run makes one)");
    }
    tcp_tl_t **tcp_p = (tcp_tl_t **)inst_p;
    tcp_tl_t *t = tempo__calloc(1, sizeof(*t), "tcp transport");
    if (!t) {
        close(listen_fd);
        return TEMPO_ERR_NOMEM;
    }
    t->world = w;
    t->epfd = epoll_create1(EPOLL_CLOEXEC);
    t->eps = tempo__calloc((size_t)w->size, sizeof(*t->eps), "tcp endpoints");
    tempo_status_t st;
    if (!t->eps) {
        st = TEMPO_ERR_NOMEM;
    } else if (t->epfd < 0) {
        st = tempo__err(TEMPO_ERR_SYSTEM, "epoll_create1(): %s", strerror(errno));
    } else {
        st = connect_mesh(t, listen_fd, deadline);
    }
    close(listen_fd);
    if (st != TEMPO_OK) {
        tcp_close(t, 0, 0);
        return st;
    }
    for (int p = 0; p < w->size; p++) {
        if (p != w->rank) {
            tcp_carries(t, p, 1); /* until the choice says otherwise */
        }
    }
    if (tempo__cfg.encrypt) {
        TEMPO_INFO(TEMPO_SUB_INIT, "tcp: every connection sealed (TEMPO_ENCRYPT: AES-256-GCM, a "
                                   "key per connection and direction)");
    }
    *tcp_p = t;
    return TEMPO_OK;
}

/* Nothing queued: not in the stream, nor a sealed record still going out. */
static int ep_send_idle(tcp_ep_t *ep)
{
    return tempo__stream_send_idle(&ep->stream) &&
           !(ep->seal && tempo__seal_out_pending(ep->seal));
}

/* Send what is queued (the rest of a sealed record first); the stream's result. */
static int ep_send(tcp_ep_t *ep)
{
    if (ep->seal && tempo__seal_out_pending(ep->seal) && tempo__stream_send_idle(&ep->stream)) {
        (void)tempo__seal_flush(ep->seal, ep->fd); /* (a broken connection: the reads say so) */
        return 0;
    }
    return tempo__stream_progress_send(&ep->stream);
}

/* Arm EPOLLOUT while something is queued, EPOLLIN unless the stream is paused. */
static void update_events(tcp_tl_t *t, tcp_ep_t *ep)
{
    if (ep->fd < 0) {
        return;
    }
    int want = !ep_send_idle(ep);
    int no_in = tempo__stream_recv_blocked(&ep->stream);
    if (want != ep->want_out || no_in != ep->no_in) {
        struct epoll_event ev = {.events = (no_in ? 0 : EPOLLIN) | EPOLLRDHUP |
                                           (want ? EPOLLOUT : 0),
                                 .data.ptr = ep};
        epoll_ctl(t->epfd, EPOLL_CTL_MOD, ep->fd, &ev);
        ep->want_out = want;
        ep->no_in = no_in;
    }
}

/* The events of a stream progress call (r < 0: none); bytes of messages other than control notes
 * moved mean the peer was heard from (stream.h). */
static int heard(tempo__world_t *w, tcp_ep_t *ep, int r)
{
    if (tempo__stream_heard(&ep->stream)) {
        tempo__peer_heard(w, ep->stream.peer);
    }
    return r > 0 ? r : 0;
}

/* Read what the peer sent; returns events, closing the socket at its end. */
static int ep_recv(tcp_tl_t *t, tcp_ep_t *ep)
{
    int r = tempo__stream_progress_recv(&ep->stream);
    if (r == -2 || r == -1) {
        ep_close_fd(t, ep); /* clean end after goodbye, or broken (job failed) */
        return 1;
    }
    update_events(t, ep);
    return heard(t->world, ep, r);
}

static int tcp_progress(void *inst)
{
    tcp_tl_t *t = inst;
    int timeout_ms = 0;
    int events = 0;
    tempo__world_t *w = t->world;
    /* Sends first: queued messages go out as soon as the socket takes them. */
    for (int p = 0; p < w->size; p++) {
        tcp_ep_t *ep = t->eps[p];
        if (ep && ep->fd >= 0 && !ep_send_idle(ep)) {
            int r = ep_send(ep);
            events += heard(w, ep, r);
            update_events(t, ep);
        }
        if (ep && ep->fd >= 0 && ep->stream.rpaused && !tempo__stream_recv_blocked(&ep->stream)) {
            events += ep_recv(t, ep); /* the limit let go: its header may be all there is */
        } else if (ep && ep->fd >= 0 && ep->seal && tempo__seal_in_pending(ep->seal) &&
                   !tempo__stream_recv_blocked(&ep->stream)) {
            events += ep_recv(t, ep); /* opened plaintext no socket event will announce */
        }
    }
    uint64_t now = 0;
    if (!t->ndata && timeout_ms == 0) {
        now = tempo__now_ns();
        if (now - t->last_poll < POLL_EVERY_NS) {
            return events;
        }
    }
    struct epoll_event evs[64];
    int n = epoll_wait(t->epfd, evs, 64, timeout_ms);
    t->last_poll = now ? now : tempo__now_ns();
    for (int i = 0; i < n; i++) {
        tcp_ep_t *ep = evs[i].data.ptr;
        if (!ep || ep->fd < 0) { /* NULL: a watched descriptor, drained by the sleeper it woke */
            continue;
        }
        if (evs[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
            tempo__stream_drain(&ep->stream); /* it hung up: what is left is all there is */
        }
        if (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) {
            events += ep_recv(t, ep);
            if (ep->fd < 0) {
                continue;
            }
        }
        if (evs[i].events & EPOLLOUT) {
            int r = ep_send(ep);
            events += heard(w, ep, r);
            update_events(t, ep);
        }
    }
    return events;
}

static int tcp_wait(void *inst, int timeout_ms)
{
    tcp_tl_t *t = inst;
    /* Level-triggered: what epoll reports here is reported again to the next progress pass. */
    struct epoll_event evs[8];
    int n = epoll_wait(t->epfd, evs, 8, timeout_ms);
    for (int i = 0; i < n; i++) {
        if (!evs[i].data.ptr) {
            return TEMPO__WAKE_BELL;
        }
    }
    return n > 0 ? TEMPO__WAKE_IO : TEMPO__WAKE_TIMEOUT;
}

static tempo_status_t tcp_watch(void *inst, int fd)
{
    tcp_tl_t *t = inst;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(t->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        return tempo__err(TEMPO_ERR_SYSTEM, "epoll_ctl() for a transport's wait descriptor: %s",
                          strerror(errno));
    }
    return TEMPO_OK;
}

static void tcp_close(void *inst, int graceful, uint64_t deadline)
{
    tcp_tl_t *t = inst;
    if (!t) {
        return;
    }
    tempo__world_t *w = t->world;
    if (graceful && t->eps) {
        for (int p = 0; p < w->size; p++) {
            if (t->eps[p] && t->eps[p]->fd >= 0) {
                tempo__stream_send_bye(&t->eps[p]->stream);
            }
        }
        /* Flush what is queued (data, then the goodbyes), within the deadline. */
        for (;;) {
            int busy = 0;
            for (int p = 0; p < w->size; p++) {
                tcp_ep_t *ep = t->eps[p];
                if (ep && ep->fd >= 0 && !ep_send_idle(ep)) {
                    if (ep_send(ep) < 0) {
                        ep_close_fd(t, ep);
                    } else {
                        busy += !ep_send_idle(ep);
                    }
                }
            }
            if (!busy || tempo__now_ns() > deadline) {
                break;
            }
            struct epoll_event evs[16];
            (void)epoll_wait(t->epfd, evs, 16, 1);
        }
    }
    if (t->eps) {
        for (int p = 0; p < w->size; p++) {
            tcp_ep_t *ep = t->eps[p];
            if (!ep) {
                continue;
            }
            if (ep->fd >= 0 && !graceful) {
                tempo__stream_send_abort(&ep->stream);
            }
            if (ep->fd >= 0) {
                if (graceful) {
                    shutdown(ep->fd, SHUT_WR);
                }
                close(ep->fd);
            }
            tempo__stream_fini(&ep->stream);
            tempo__seal_free(ep->seal);
            tempo__free(ep);
        }
        tempo__free(t->eps);
    }
    if (t->epfd >= 0) {
        close(t->epfd);
    }
    tempo__free(t);
}

static int tcp_probe(char *detail, size_t len)
{
    snprintf(detail, len, "TCP sockets between every pair of ranks: data between hosts, and setup "
                          "and liveness for every pair whatever carries its data");
    return 1;
}

const tempo__tl_backend_t tempo__tcp_backend = {
    .name = "tcp",
    .priority = 100,
    .by_default = 1,
    .caps = TEMPO__TL_CAP_TAGGED | TEMPO__TL_CAP_CONTROL,
    .probe = tcp_probe,
    .open = tcp_open,
    .ep = tcp_ep,
    .ops = &tcp_ops,
    .carries = tcp_carries,
    .progress = tcp_progress,
    .watch = tcp_watch,
    .wait = tcp_wait,
    .close = tcp_close,
};
