/*
 * stream.c — framing, validation and matching over a byte pipe (see stream.h).
 *
 * Receive state machine: "header" (need 32 bytes in the staging buffer) and "payload" (rleft bytes
 * go to rdst: a posted receive's buffer, an unexpected-message buffer, or nowhere when a mismatched
 * receive was failed and the bytes must still be consumed to keep the stream in sync). Large
 * payloads are read from the pipe straight into the destination.
 *
 * Back-pressure (stream.h): start_payload() refuses an unexpected message that does not fit under
 * ux_limit unless a non-standing receive is posted or the peer hung up; it puts the header back
 * (rhead is rewound, the bytes are still in the staging buffer) and sets rpaused, and
 * progress_recv returns without reading. Every later call re-validates that header and asks
 * again, so nothing else has to notice when the limit lets go (a receive posted, buffered bytes
 * consumed). Only whole messages are refused, at their header: a payload once started is always
 * finished, so a half-buffered message never holds the stream.
 *
 * Matching: posted receives and unexpected messages sit in hash tables by tag (tempo__match_t),
 * each bucket in posting or arrival order, so matching one message costs O(1) on average however
 * many receives are in flight; a linear list made a request of 13,565 chunks quadratic, and one
 * progress call on its busiest rank outlasted TEMPO_TIMEOUT.
 *
 * Transfers the stream owns itself (goodbye messages, and copies made when a caller cancels a
 * half-sent message) are marked in xfer->priv and freed when done.
 */
#include "config.h"

#include "transport/stream.h"
#include "core/cfg.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define RBUF_CAP (64 * 1024)
#define DIRECT_MIN (8 * 1024)

#define XF_OWNED 1u /* the stream allocated the xfer (and its buffer) */
#define XF_BYE 2u   /* goodbye message */
#define XF_ABORT 4u /* abort notice */
#define XF_NOTE 8u  /* control note */
#define XF_RAW 16u  /* raw bytes without a header (tempo__stream_inject, tests only) */
#define XF_FIN 32u  /* FIN of a fetched payload (its tag is the payload's number) */

typedef struct tempo__ux {
    tempo__list_t link;
    uint64_t tag;
    size_t len;
    size_t got;
    char *data;
    tempo__sig_t sig;     /* the signature its header carried */
    tempo__xfer_t *bound; /* a receive matched while the message was still arriving */
    int discard;          /* its receive was cancelled: free when complete */
} tempo__ux_t;

/* A send whose payload the peer fetches: its ticket, and the exposure until the FIN. */
typedef struct tempo__expo {
    tempo__list_t link;  /* s->exposed once the ticket is out */
    tempo__xfer_t *x;    /* the send */
    void *handle;        /* the pipe's, for release() */
    uint64_t id;         /* payload number */
    size_t wire_len;     /* ticket bytes: 8 + descriptor */
    size_t off;          /* ticket bytes written */
    unsigned char wire[8 + TEMPO_WIRE_DESC_MAX];
} tempo__expo_t;

/* A fetch in flight, into a matched receive or an unexpected message's buffer. */
typedef struct tempo__fetch {
    tempo__list_t link; /* s->fetching */
    tempo__xfer_t *x;
    struct tempo__ux *ux;
    uint64_t id;
    size_t len;
} tempo__fetch_t;

/* ---------------------------------------------------------------------------------------------- */
/* Matching tables                                                                                */
/* ---------------------------------------------------------------------------------------------- */

#define MATCH_BITS_MIN 4
#define MATCH_BITS_MAX 16

static uint64_t xfer_tag(const tempo__list_t *e)
{
    return tempo__container_of(e, tempo__xfer_t, link)->tag;
}

static uint64_t ux_tag(const tempo__list_t *e)
{
    return tempo__container_of(e, tempo__ux_t, link)->tag;
}

static tempo_status_t match_init(tempo__match_t *m)
{
    size_t nb = (size_t)1 << MATCH_BITS_MIN;
    m->b = tempo__malloc(nb * sizeof(*m->b), "tag matching table");
    if (!m->b) {
        return TEMPO_ERR_NOMEM;
    }
    for (size_t i = 0; i < nb; i++) {
        tempo__list_init(&m->b[i]);
    }
    m->bits = MATCH_BITS_MIN;
    m->n = 0;
    return TEMPO_OK;
}

/* The bucket of tag (Fibonacci hashing: sequence numbers and steps one apart land far apart). */
static tempo__list_t *match_bucket(const tempo__match_t *m, uint64_t tag)
{
    return &m->b[(tag * 0x9e3779b97f4a7c15ull) >> (64 - m->bits)];
}

/* Twice the buckets; entries move in bucket order, so equal tags keep their order. Best effort:
 * without memory the table stays as it is (slower, still correct). */
static void match_grow(tempo__match_t *m, uint64_t (*tag_of)(const tempo__list_t *))
{
    tempo__match_t g = {NULL, m->bits + 1, m->n};
    size_t nb = (size_t)1 << g.bits, onb = (size_t)1 << m->bits;
    g.b = tempo__malloc(nb * sizeof(*g.b), "tag matching table");
    if (!g.b) {
        return;
    }
    for (size_t i = 0; i < nb; i++) {
        tempo__list_init(&g.b[i]);
    }
    for (size_t i = 0; i < onb; i++) {
        while (!tempo__list_empty(&m->b[i])) {
            tempo__list_t *e = m->b[i].next;
            tempo__list_remove(e);
            tempo__list_push_back(match_bucket(&g, tag_of(e)), e);
        }
    }
    tempo__free(m->b);
    *m = g;
}

static void match_add(tempo__match_t *m, tempo__list_t *e, uint64_t tag,
                      uint64_t (*tag_of)(const tempo__list_t *))
{
    if (m->n >= ((size_t)2 << m->bits) && m->bits < MATCH_BITS_MAX) {
        match_grow(m, tag_of);
    }
    tempo__list_push_back(match_bucket(m, tag), e);
    m->n++;
}

static void match_del(tempo__match_t *m, tempo__list_t *e)
{
    tempo__list_remove(e);
    m->n--;
}

static uintptr_t xflags(const tempo__xfer_t *x)
{
    return (uintptr_t)x->priv;
}

/* The receive x expects a collective's message and sig came with it from another call: fail x
 * with TEMPO_ERR_INVALID, remembering what the peer called. */
static int sig_differs(tempo__xfer_t *x, const tempo__sig_t *sig)
{
    if (!x->sig || !x->sig->valid || !sig->valid || tempo__sig_equal(x->sig, sig)) {
        return 0;
    }
    x->remote_sig = *sig;
    x->sig_differs = 1;
    return 1;
}

static void xfer_done(tempo__xfer_t *x, tempo_status_t st)
{
    x->status = st;
    x->complete = 1;
    if (xflags(x) & XF_OWNED) {
        tempo__free(x->buf);
        tempo__free(x);
    }
}

tempo_status_t tempo__stream_init(tempo__stream_t *s, tempo__world_t *w, int peer,
                                  const char *tl_name, const tempo__pipe_ops_t *ops, void *pipe)
{
    memset(s, 0, sizeof(*s));
    s->rbuf = tempo__malloc(RBUF_CAP, "stream receive buffer");
    if (!s->rbuf) {
        return TEMPO_ERR_NOMEM;
    }
    s->rcap = RBUF_CAP;
    s->ops = ops;
    s->pipe = pipe;
    s->world = w;
    s->peer = peer;
    s->tl_name = tl_name;
    s->state = STREAM_OPEN;
    s->ux_limit = tempo__cfg.unexpected_bytes;
    tempo__list_init(&s->sendq);
    tempo__list_init(&s->exposed);
    tempo__list_init(&s->fetching);
    if (match_init(&s->posted) != TEMPO_OK || match_init(&s->unexpected) != TEMPO_OK) {
        tempo__free(s->posted.b);
        tempo__free(s->rbuf);
        s->rbuf = NULL;
        return TEMPO_ERR_NOMEM;
    }
    return TEMPO_OK;
}

static void fail_queue(tempo__list_t *q, tempo_status_t st)
{
    while (!tempo__list_empty(q)) {
        tempo__list_t *e = q->next;
        tempo__list_remove(e);
        xfer_done(tempo__container_of(e, tempo__xfer_t, link), st);
    }
}

static void fail_posted(tempo__stream_t *s, tempo_status_t st)
{
    for (size_t i = 0; i < (size_t)1 << s->posted.bits; i++) {
        fail_queue(&s->posted.b[i], st);
    }
    s->posted.n = 0;
}

static void free_unexpected(tempo__stream_t *s)
{
    for (size_t i = 0; i < (size_t)1 << s->unexpected.bits; i++) {
        while (!tempo__list_empty(&s->unexpected.b[i])) {
            tempo__list_t *e = s->unexpected.b[i].next;
            tempo__ux_t *ux = tempo__container_of(e, tempo__ux_t, link);
            tempo__list_remove(e);
            if (ux->bound) {
                xfer_done(ux->bound, TEMPO_ERR_REMOTE);
            }
            tempo__free(ux->data);
            tempo__free(ux);
        }
    }
    s->unexpected.n = 0;
    s->unexpected_bytes = 0;
}

/* Release the exposures whose tickets are out and fail their sends with st. */
static void drop_exposed(tempo__stream_t *s, tempo_status_t st)
{
    while (!tempo__list_empty(&s->exposed)) {
        tempo__expo_t *e = tempo__container_of(s->exposed.next, tempo__expo_t, link);
        tempo__list_remove(&e->link);
        s->ops->release(s->pipe, e->handle);
        if (e->x) {
            xfer_done(e->x, st);
        }
        tempo__free(e);
    }
}

/* The stream ends: nothing of the pipe may touch exposed or fetched-into memory any more (kill),
 * then the exposures are released and their sends and the fetches' receives fail with st. */
static void end_zero_copy(tempo__stream_t *s, tempo_status_t st)
{
    if ((!tempo__list_empty(&s->exposed) || !tempo__list_empty(&s->fetching) || s->shead_expo) &&
        s->ops->kill) {
        s->ops->kill(s->pipe);
    }
    if (s->shead_expo) { /* its send is still on sendq */
        s->ops->release(s->pipe, s->shead_expo->handle);
        tempo__free(s->shead_expo);
        s->shead_expo = NULL;
        s->shdr_valid = 0;
    }
    drop_exposed(s, st);
    while (!tempo__list_empty(&s->fetching)) {
        tempo__fetch_t *f = tempo__container_of(s->fetching.next, tempo__fetch_t, link);
        tempo__list_remove(&f->link);
        if (f->x) {
            xfer_done(f->x, st);
        }
        tempo__free(f); /* its unexpected message is on the list, freed with the others */
    }
    if (s->tk_x) {
        xfer_done(s->tk_x, st);
    }
    s->in_ticket = 0;
    s->tk_x = NULL;
    s->tk_ux = NULL;
}

void tempo__stream_fini(tempo__stream_t *s)
{
    if (!s->rbuf) {
        return;
    }
    end_zero_copy(s, TEMPO_ERR_REMOTE);
    fail_queue(&s->sendq, TEMPO_ERR_REMOTE);
    fail_posted(s, TEMPO_ERR_REMOTE);
    if (s->rx) {
        xfer_done(s->rx, TEMPO_ERR_REMOTE);
        s->rx = NULL;
    }
    s->rux = NULL; /* it is on the unexpected list */
    free_unexpected(s);
    tempo__free(s->posted.b);
    tempo__free(s->unexpected.b);
    tempo__free(s->rbuf);
    s->rbuf = NULL;
}

void tempo__stream_broken(tempo__stream_t *s, const char *why)
{
    if (s->state == STREAM_FAILED) {
        return;
    }
    char desc[160];
    s->state = STREAM_FAILED;
    tempo__world_fail(s->world, TEMPO_ERR_REMOTE, "%s %s (%s)",
                      tempo__peer_desc(s->world, s->peer, desc, sizeof(desc)), why, s->tl_name);
    end_zero_copy(s, TEMPO_ERR_REMOTE);
    fail_queue(&s->sendq, TEMPO_ERR_REMOTE);
    fail_posted(s, TEMPO_ERR_REMOTE);
    if (s->rx) {
        xfer_done(s->rx, TEMPO_ERR_REMOTE);
        s->rx = NULL;
    }
    s->in_payload = 0;
    s->in_note = 0;
    s->rdst = NULL;
    s->rpaused = 0;
    if (s->rux) {
        /* The unexpected entry is on the list and freed below. */
        s->rux = NULL;
    }
    free_unexpected(s);
}

/* The pipe ended (r: TEMPO_PIPE_EOF) or failed (-errno): say so with what is known of the peer's
 * process. A live process can close or reset its connection; on the same machine we can tell. */
static void connection_lost(tempo__stream_t *s, ssize_t r)
{
    char what[128], why[256];
    const char *unknown = "";
    if (r == TEMPO_PIPE_EOF) {
        snprintf(what, sizeof(what), "closed its connection %s",
                 s->in_payload ? "in the middle of a message" : "unexpectedly");
        unknown = ": the process died or exited without destroying its communicator, or the "
                  "connection was reset";
    } else if (r == -EBADMSG) {
        snprintf(what, sizeof(what), "sent bytes that fail authentication (TEMPO_ENCRYPT: "
                 "changed on the way, or not sealed with this job's key)");
    } else {
        snprintf(what, sizeof(what), "broke the connection (%s)", strerror((int)-r));
    }
    int running = tempo__peer_running(s->world, s->peer);
    if (running > 0) {
        snprintf(why, sizeof(why), "%s although its process %d is still running", what,
                 (int)s->world->peers[s->peer].info.pid);
    } else if (running == 0) {
        snprintf(why, sizeof(why), "%s: its process died or exited without destroying its "
                 "communicator", what);
    } else {
        snprintf(why, sizeof(why), "%s%s", what, unknown);
    }
    tempo__stream_broken(s, why);
}

/* ---------------------------------------------------------------------------------------------- */
/* Send                                                                                           */
/* ---------------------------------------------------------------------------------------------- */

/* The head send x is large: expose its buffer and send a ticket instead of the payload. Without
 * memory, or when the pipe cannot expose it, the payload goes through the pipe. */
static void expose_head(tempo__stream_t *s, tempo__xfer_t *x)
{
    tempo__expo_t *e = tempo__calloc(1, sizeof(*e), "zero-copy send");
    if (!e) {
        return;
    }
    size_t dlen = s->ops->expose(s->pipe, x->buf, x->len, e->wire + 8, &e->handle);
    if (dlen == 0 || dlen > TEMPO_WIRE_DESC_MAX) {
        if (dlen) {
            s->ops->release(s->pipe, e->handle);
        }
        tempo__free(e);
        return;
    }
    e->x = x;
    e->id = ++s->fetch_next;
    memcpy(e->wire, &e->id, 8);
    e->wire_len = 8 + dlen;
    s->shdr.flags = TEMPO_WIRE_F_FETCH;
    s->shdr.reserved = (uint32_t)e->wire_len;
    s->shead_expo = e;
}

/* The head's header is made again later (an urgent send went ahead of it before any of its bytes
 * were written): let its exposure go. */
static void unbuild_head(tempo__stream_t *s)
{
    s->shdr_valid = 0;
    if (s->shead_expo) {
        s->ops->release(s->pipe, s->shead_expo->handle);
        tempo__free(s->shead_expo);
        s->shead_expo = NULL;
    }
}

int tempo__stream_progress_send(tempo__stream_t *s)
{
    int events = 0;
    s->moved = 0;
    while (!tempo__list_empty(&s->sendq)) {
        tempo__xfer_t *x = tempo__container_of(s->sendq.next, tempo__xfer_t, link);
        if (!s->shdr_valid) {
            s->shdr.magic = TEMPO_WIRE_MAGIC;
            s->shdr.version = TEMPO_WIRE_VERSION;
            s->shdr.type = (xflags(x) & XF_BYE)     ? TEMPO_WIRE_BYE
                           : (xflags(x) & XF_ABORT) ? TEMPO_WIRE_ABORT
                           : (xflags(x) & XF_NOTE)  ? TEMPO_WIRE_NOTE
                           : (xflags(x) & XF_FIN)   ? TEMPO_WIRE_FIN
                                                    : TEMPO_WIRE_DATA;
            s->shdr.flags = 0;
            s->shdr.src = (uint32_t)s->world->rank;
            s->shdr.reserved = 0;
            s->shdr.tag = x->tag;
            s->shdr.len = x->len;
            if (x->sig) {
                s->shdr.sig = *x->sig;
            } else {
                memset(&s->shdr.sig, 0, sizeof(s->shdr.sig));
            }
            s->shdr_off = (xflags(x) & XF_RAW) ? sizeof(s->shdr) : 0;
            s->shdr_valid = 1;
            if (s->fetch_min && x->len >= s->fetch_min && !xflags(x)) {
                expose_head(s, x);
            }
        }
        tempo__expo_t *e = s->shead_expo;
        struct iovec iov[2];
        int n = 0;
        if (s->shdr_off < sizeof(s->shdr)) {
            iov[n].iov_base = (char *)&s->shdr + s->shdr_off;
            iov[n].iov_len = sizeof(s->shdr) - s->shdr_off;
            n++;
        }
        if (e && e->off < e->wire_len) {
            iov[n].iov_base = e->wire + e->off;
            iov[n].iov_len = e->wire_len - e->off;
            n++;
        } else if (!e && x->done < x->len) {
            iov[n].iov_base = (char *)x->buf + x->done;
            iov[n].iov_len = x->len - x->done;
            n++;
        }
        ssize_t w = n ? s->ops->writev(s->pipe, iov, n) : 0;
        if (w < 0 && s->state != STREAM_BYE) {
            /* The peer may have said why before its connection went: a peer that aborts or
             * leaves with our data unread resets the connection, and the reset can reach this
             * send before its abort notice or goodbye, still unread in the pipe, is seen. Read
             * all that is there first (a reset pipe gets nothing new), so the error says what
             * the peer said. */
            int r;
            do {
                r = tempo__stream_progress_recv(s);
            } while (r > 0 && s->state == STREAM_OPEN);
            if (r == -1 || s->state == STREAM_FAILED) {
                return -1;
            }
        }
        if (w < 0) {
            if (s->state == STREAM_BYE) {
                /* The peer left; what we still had for it goes nowhere. */
                unbuild_head(s);
                fail_queue(&s->sendq, TEMPO_ERR_REMOTE);
                drop_exposed(s, TEMPO_ERR_REMOTE);
                return events;
            }
            connection_lost(s, w);
            return -1;
        }
        size_t wr = (size_t)w;
        if (wr) {
            s->moved = 1;
            s->heard |= !(xflags(x) & XF_NOTE);
        }
        if (s->shdr_off < sizeof(s->shdr)) {
            size_t h = TEMPO_MIN(wr, sizeof(s->shdr) - s->shdr_off);
            s->shdr_off += h;
            wr -= h;
        }
        if (e) {
            e->off += wr;
            if (s->shdr_off == sizeof(s->shdr) && e->off == e->wire_len) {
                /* The ticket is out: the send completes at the FIN. */
                tempo__list_remove(&x->link);
                tempo__list_init(&x->link);
                tempo__list_push_back(&s->exposed, &e->link);
                s->shead_expo = NULL;
                s->shdr_valid = 0;
                continue;
            }
            break;
        }
        x->done += wr;
        if (s->shdr_off == sizeof(s->shdr) && x->done == x->len) {
            tempo__list_remove(&x->link);
            s->shdr_valid = 0;
            xfer_done(x, TEMPO_OK);
            events++;
            continue;
        }
        break; /* the pipe is full */
    }
    return events + s->moved;
}

tempo_status_t tempo__stream_isend(tempo__stream_t *s, tempo__xfer_t *x)
{
    x->done = 0;
    x->complete = 0;
    if (s->state == STREAM_FAILED || s->sent_bye) {
        xfer_done(x, TEMPO_ERR_REMOTE);
        return TEMPO_OK;
    }
    if (s->state == STREAM_BYE) {
        /* The peer has left; nobody will ever receive this. */
        xfer_done(x, TEMPO_ERR_REMOTE);
        return TEMPO_OK;
    }
    int was_idle = tempo__list_empty(&s->sendq);
    if (x->urgent && !was_idle) {
        /* Ahead of every send not begun yet, after the urgent ones queued before it. The head is
         * on the wire once a byte of its header is; before that its header is made again. */
        tempo__xfer_t *head = tempo__container_of(s->sendq.next, tempo__xfer_t, link);
        int on_wire = s->shdr_valid && (s->shdr_off > 0 || head->done > 0);
        tempo__list_t *after = on_wire ? s->sendq.next : &s->sendq;
        while (after->next != &s->sendq &&
               tempo__container_of(after->next, tempo__xfer_t, link)->urgent) {
            after = after->next;
        }
        if (after == &s->sendq) {
            unbuild_head(s);
        }
        x->link.prev = after;
        x->link.next = after->next;
        after->next->prev = &x->link;
        after->next = &x->link;
        return TEMPO_OK;
    }
    tempo__list_push_back(&s->sendq, &x->link);
    if (was_idle) {
        tempo__stream_progress_send(s);
    }
    return TEMPO_OK;
}

static tempo_status_t send_control(tempo__stream_t *s, uintptr_t flag)
{
    if (s->sent_bye || s->state == STREAM_FAILED) {
        return TEMPO_OK;
    }
    tempo__xfer_t *x = tempo__calloc(1, sizeof(*x), "control message");
    if (!x) {
        return TEMPO_ERR_NOMEM;
    }
    x->peer = s->peer;
    x->is_send = 1;
    x->priv = (void *)(XF_OWNED | flag);
    if (flag == XF_ABORT) {
        /* Ahead of everything not yet started, so it goes out now if the pipe has room. */
        tempo__list_t *after = s->shdr_valid ? s->sendq.next : &s->sendq;
        x->link.prev = after;
        x->link.next = after->next;
        after->next->prev = &x->link;
        after->next = &x->link;
    } else {
        tempo__list_push_back(&s->sendq, &x->link);
    }
    s->sent_bye = 1;
    tempo__stream_progress_send(s);
    return TEMPO_OK;
}

/* Queue a copy of data[0..len) after everything queued, as a note or as raw bytes (flag). */
static tempo_status_t send_copy(tempo__stream_t *s, const void *data, size_t len, unsigned flag)
{
    tempo__xfer_t *x = tempo__calloc(1, sizeof(*x), "control note");
    char *buf = x ? tempo__malloc(len ? len : 1, "control note") : NULL;
    if (!buf) {
        tempo__free(x);
        return TEMPO_ERR_NOMEM;
    }
    memcpy(buf, data, len);
    x->peer = s->peer;
    x->is_send = 1;
    x->buf = buf;
    x->len = len;
    x->priv = (void *)(uintptr_t)(XF_OWNED | flag);
    int was_idle = tempo__list_empty(&s->sendq);
    tempo__list_push_back(&s->sendq, &x->link);
    if (was_idle) {
        tempo__stream_progress_send(s);
    }
    return TEMPO_OK;
}

tempo_status_t tempo__stream_send_note(tempo__stream_t *s, const void *data, size_t len)
{
    if (s->sent_bye || s->state != STREAM_OPEN || len > TEMPO_WIRE_NOTE_MAX) {
        return TEMPO_OK; /* nobody to tell (or a caller's bug, caught by the receiver's check) */
    }
    return send_copy(s, data, len, XF_NOTE);
}

tempo_status_t tempo__stream_inject(tempo__stream_t *s, const void *bytes, size_t len)
{
    if (s->sent_bye || s->state != STREAM_OPEN) {
        return tempo__err(TEMPO_ERR_REMOTE, "the stream to rank %d is closed", s->peer);
    }
    return send_copy(s, bytes, len, XF_RAW);
}

tempo_status_t tempo__stream_send_bye(tempo__stream_t *s)
{
    return send_control(s, XF_BYE);
}

void tempo__stream_send_abort(tempo__stream_t *s)
{
    (void)send_control(s, XF_ABORT);
}

/* ---------------------------------------------------------------------------------------------- */
/* Receive                                                                                        */
/* ---------------------------------------------------------------------------------------------- */

tempo_status_t tempo__stream_irecv(tempo__stream_t *s, tempo__xfer_t *x)
{
    x->done = 0;
    x->complete = 0;
    if (s->state == STREAM_FAILED) {
        xfer_done(x, TEMPO_ERR_REMOTE);
        return TEMPO_OK;
    }
    tempo__list_t *pos, *tmp;
    tempo__list_for_each_safe (pos, tmp, match_bucket(&s->unexpected, x->tag)) {
        tempo__ux_t *ux = tempo__container_of(pos, tempo__ux_t, link);
        if (ux->tag != x->tag || ux->bound || ux->discard) {
            continue;
        }
        int differs = sig_differs(x, &ux->sig);
        if (differs || ux->len != x->len) {
            x->remote_len = ux->len;
            if (ux->got == ux->len) {
                match_del(&s->unexpected, &ux->link);
                s->unexpected_bytes -= ux->len;
                tempo__free(ux->data);
                tempo__free(ux);
            } else {
                ux->discard = 1;
            }
            xfer_done(x, TEMPO_ERR_INVALID);
            return TEMPO_OK;
        }
        if (ux->got == ux->len) {
            if (ux->len > 0) { /* a zero-length message has no buffers: memcpy(NULL, NULL, 0) is UB */
                memcpy(x->buf, ux->data, ux->len);
            }
            x->done = ux->len;
            match_del(&s->unexpected, &ux->link);
            s->unexpected_bytes -= ux->len;
            tempo__free(ux->data);
            tempo__free(ux);
            xfer_done(x, TEMPO_OK);
        } else {
            ux->bound = x;
        }
        return TEMPO_OK;
    }
    if (s->state == STREAM_BYE) {
        xfer_done(x, TEMPO_ERR_REMOTE);
        return TEMPO_OK;
    }
    match_add(&s->posted, &x->link, x->tag, xfer_tag);
    return TEMPO_OK;
}

/* x is a zero-copy send whose ticket is (partly) out, or a receive being fetched into: the peer or
 * the pipe may still use its buffer, so it cannot just be dropped. Drive every transport (not only
 * this stream: ranks that cancel at once wait on each other in a cycle) until the transfer ends (a
 * FIN, a fetch completes). The peer answers from its next progress: at once if it is inside the
 * library, else at its next call, which a healthy job makes within TEMPO_TIMEOUT; past that, or
 * once the job has failed, the stream is broken, which kills the pipe (nothing touches the buffer
 * after it). Measured: with a 5 s limit, a rank that had left a failed collective and computed for
 * a while made its peer's cancel fail the whole job (verbs, 3 ranks, a mismatch). */
static void cancel_zero_copy(tempo__stream_t *s, tempo__xfer_t *x)
{
    tempo__world_t *w = s->world;
    uint64_t deadline = tempo__deadline_after(w->timeout_s);
    for (unsigned spins = 0; !x->complete && s->state != STREAM_FAILED && w->failed == TEMPO_OK &&
                             tempo__now_ns() < deadline;
         spins++) {
        tempo__stream_progress_send(s);
        tempo__stream_progress_recv(s);
        if (!x->complete && s->ops->poll) {
            s->ops->poll(s->pipe);
        }
        if (!x->complete && w->tl_progress) {
            w->tl_progress(w);
        }
        if (spins > 1000) { /* the peer is not in the library: do not take its core */
            struct timespec ts = {0, 100000};
            nanosleep(&ts, NULL);
        }
    }
    if (!x->complete) {
        tempo__stream_broken(s, "did not finish a zero-copy transfer that this rank cancelled");
    }
}

static int is_fetching(tempo__stream_t *s, tempo__xfer_t *x)
{
    tempo__list_t *pos;
    for (pos = s->fetching.next; pos != &s->fetching; pos = pos->next) {
        if (tempo__container_of(pos, tempo__fetch_t, link)->x == x) {
            return 1;
        }
    }
    return 0;
}

void tempo__stream_cancel(tempo__stream_t *s, tempo__xfer_t *x)
{
    if (x->complete) {
        return;
    }
    int is_head = x->is_send && s->sendq.next == &x->link;
    if (x->is_send && s->shead_expo && is_head && s->shdr_off == 0) {
        unbuild_head(s); /* nothing of it is out: withdraw it like any send not begun */
    }
    if ((x->is_send && ((is_head && s->shead_expo) || tempo__list_empty(&x->link))) ||
        (!x->is_send && is_fetching(s, x))) {
        /* A send off the queue and incomplete has its ticket out (s->exposed). */
        cancel_zero_copy(s, x);
    } else if (x->is_send) {
        if (is_head && s->shdr_valid && (s->shdr_off > 0 || x->done > 0)) {
            /* Half sent: finish it from a private copy so the stream stays in sync. */
            tempo__xfer_t *c = tempo__calloc(1, sizeof(*c), "cancelled send");
            char *buf = c ? tempo__malloc(x->len ? x->len : 1, "cancelled send") : NULL;
            if (buf) {
                *c = *x;
                memcpy(buf + x->done, (char *)x->buf + x->done, x->len - x->done);
                c->buf = buf;
                c->priv = (void *)(uintptr_t)XF_OWNED;
                c->link.prev = x->link.prev;
                c->link.next = x->link.next;
                x->link.prev->next = &c->link;
                x->link.next->prev = &c->link;
                tempo__list_init(&x->link);
            } else {
                tempo__free(c);
                tempo__stream_broken(s, "could not be sent to: out of memory while cancelling");
            }
        } else {
            tempo__list_remove(&x->link);
        }
    } else if (s->tk_x == x) {
        s->tk_x = NULL; /* its ticket is being read: it will be answered with a FIN, unfetched */
    } else if (s->rx == x) {
        s->rx = NULL;
        s->rdst = NULL; /* discard the rest of the payload */
    } else {
        int found = 0;
        tempo__list_t *pos, *tmp;
        tempo__list_for_each_safe (pos, tmp, match_bucket(&s->unexpected, x->tag)) {
            tempo__ux_t *ux = tempo__container_of(pos, tempo__ux_t, link);
            if (ux->bound == x) {
                ux->bound = NULL;
                ux->discard = 1;
                found = 1;
            }
        }
        if (!found && !tempo__list_empty(&x->link)) { /* posted */
            match_del(&s->posted, &x->link);
        }
    }
    x->complete = 1;
    x->status = TEMPO_ERR_ABORTED;
}

static int sig_valid(const tempo__sig_t *g)
{
    static const tempo__sig_t zero;
    if (!g->valid) {
        return memcmp(g, &zero, sizeof(zero)) == 0;
    }
    return g->valid == 1 && g->coll < TEMPO__COLL_SEND && g->dtype < TEMPO_DTYPE_COUNT &&
           g->redop <= TEMPO_OP_COUNT && g->root >= -1 && g->zero == 0;
}

void tempo__stream_purge_ctx(tempo__stream_t *s, int ctx)
{
    for (size_t i = 0; i < (size_t)1 << s->unexpected.bits; i++) {
        tempo__list_t *pos, *tmp;
        tempo__list_for_each_safe (pos, tmp, &s->unexpected.b[i]) {
            tempo__ux_t *ux = tempo__container_of(pos, tempo__ux_t, link);
            if ((int)((ux->tag >> 48) & TEMPO_CTX_MAX) == ctx && !ux->bound &&
                ux->got == ux->len) {
                match_del(&s->unexpected, &ux->link);
                s->unexpected_bytes -= ux->len;
                tempo__free(ux->data);
                tempo__free(ux);
            }
        }
    }
}

static int header_valid(const tempo__stream_t *s, const tempo__wire_hdr_t *h, char *why, size_t len)
{
    if (h->magic != TEMPO_WIRE_MAGIC) {
        snprintf(why, len, "sent a malformed message header (bad magic 0x%08x)", h->magic);
    } else if (h->version != TEMPO_WIRE_VERSION) {
        snprintf(why, len, "speaks wire version %u, this rank %u", h->version, TEMPO_WIRE_VERSION);
    } else if (h->type != TEMPO_WIRE_DATA && h->type != TEMPO_WIRE_BYE &&
               h->type != TEMPO_WIRE_ABORT && h->type != TEMPO_WIRE_NOTE &&
               h->type != TEMPO_WIRE_FIN) {
        snprintf(why, len, "sent a message of unknown type %u", h->type);
    } else if ((h->flags & ~TEMPO_WIRE_F_FETCH) || (h->flags && h->type != TEMPO_WIRE_DATA) ||
               (!h->flags && h->reserved) ||
               (h->flags && (h->reserved <= 8 || h->reserved > 8 + TEMPO_WIRE_DESC_MAX))) {
        snprintf(why, len, "sent a message header with reserved fields set");
    } else if (h->flags && (!s->ops->fetch || !h->len)) {
        snprintf(why, len, "sent a zero-copy message that this transport cannot fetch");
    } else if (!sig_valid(&h->sig) || (h->sig.valid && h->type != TEMPO_WIRE_DATA)) {
        snprintf(why, len, "sent a message header with a malformed call signature");
    } else if (h->src != (uint32_t)s->peer) {
        snprintf(why, len, "sent a header claiming to come from rank %u", h->src);
    } else if (h->len > TEMPO_WIRE_MAX_LEN ||
               (h->type == TEMPO_WIRE_NOTE ? h->len > TEMPO_WIRE_NOTE_MAX
                                           : h->type != TEMPO_WIRE_DATA && h->len)) {
        snprintf(why, len, "sent a message header with an impossible length %llu",
                 (unsigned long long)h->len);
    } else if ((h->tag >> 63) && ((h->tag >> 32) & 0xffffu) > TEMPO_TAG_CTRL_KINDS) {
        snprintf(why, len, "sent a point-to-point tag with reserved bits set (0x%016llx)",
                 (unsigned long long)h->tag);
    } else {
        return 1;
    }
    return 0;
}

/* Every byte of unexpected message ux is there: hand it to its receive if one is bound, and free
 * it if it is claimed or dropped. */
static void ux_complete(tempo__stream_t *s, tempo__ux_t *ux)
{
    ux->got = ux->len;
    if (ux->bound) {
        memcpy(ux->bound->buf, ux->data, ux->len);
        ux->bound->done = ux->len;
        xfer_done(ux->bound, TEMPO_OK);
    }
    if (ux->bound || ux->discard) {
        match_del(&s->unexpected, &ux->link);
        s->unexpected_bytes -= ux->len;
        tempo__free(ux->data);
        tempo__free(ux);
    }
}

/* Tell the peer that payload id was fetched or dropped (ahead of queued data: it completes the
 * peer's send). */
static void send_fin(tempo__stream_t *s, uint64_t id)
{
    tempo__xfer_t *x = tempo__calloc(1, sizeof(*x), "zero-copy acknowledgement");
    if (!x) {
        tempo__stream_broken(s, "could not be acknowledged a zero-copy payload: out of memory");
        return;
    }
    x->peer = s->peer;
    x->is_send = 1;
    x->tag = id;
    x->urgent = 1;
    x->priv = (void *)(uintptr_t)(XF_OWNED | XF_FIN);
    tempo__stream_isend(s, x);
}

static void fetch_done(tempo__stream_t *s, tempo__fetch_t *f, tempo_status_t st)
{
    tempo__list_remove(&f->link);
    if (st != TEMPO_OK) {
        if (f->x) {
            xfer_done(f->x, TEMPO_ERR_REMOTE);
        }
        tempo__free(f);
        tempo__stream_broken(s, "could not be fetched from (zero-copy read failed)");
        return;
    }
    s->heard = 1;
    s->moved = 1;
    if (f->x) {
        f->x->done = f->len;
        xfer_done(f->x, TEMPO_OK);
    } else if (f->ux) {
        ux_complete(s, f->ux);
    }
    send_fin(s, f->id);
    tempo__free(f);
}

void tempo__stream_fetched(tempo__stream_t *s, void *op, tempo_status_t status)
{
    fetch_done(s, op, status);
}

void tempo__stream_set_fetch(tempo__stream_t *s, size_t min)
{
    s->fetch_min = s->ops->expose && s->ops->release && s->ops->fetch && s->ops->kill ? min : 0;
}

/* A ticket has arrived: fetch its payload into the target chosen at its header, or say FIN at once
 * when there is none (its receive failed or was cancelled). */
static int finish_ticket(tempo__stream_t *s)
{
    uint64_t id;
    memcpy(&id, s->ticket, 8);
    tempo__xfer_t *x = s->tk_x;
    tempo__ux_t *ux = s->tk_ux;
    s->in_ticket = 0;
    s->in_payload = 0;
    s->rdst = NULL;
    s->tk_x = NULL;
    s->tk_ux = NULL;
    if (!x && !ux) {
        send_fin(s, id);
        return 1;
    }
    tempo__fetch_t *f = tempo__calloc(1, sizeof(*f), "zero-copy receive");
    if (!f) {
        if (x) {
            xfer_done(x, TEMPO_ERR_NOMEM);
        }
        tempo__stream_broken(s, "sent a zero-copy message this rank has no memory to fetch");
        return -1;
    }
    f->x = x;
    f->ux = ux;
    f->id = id;
    f->len = (size_t)s->rhdr.len;
    tempo__list_push_back(&s->fetching, &f->link);
    int r = s->ops->fetch(s->pipe, s->ticket + 8, s->rhdr.reserved - 8, x ? x->buf : ux->data,
                          f->len, f);
    if (r < 0) {
        char why[160];
        snprintf(why, sizeof(why), "could not be fetched from (%s)", strerror(-r));
        tempo__stream_broken(s, why);
        return -1;
    }
    if (r == 1) {
        fetch_done(s, f, TEMPO_OK);
    }
    return 1;
}

/* The peer fetched (or dropped) payload id: the send completes and its buffer is let go. */
static int fin_arrived(tempo__stream_t *s, uint64_t id)
{
    tempo__list_t *pos;
    for (pos = s->exposed.next; pos != &s->exposed; pos = pos->next) {
        tempo__expo_t *e = tempo__container_of(pos, tempo__expo_t, link);
        if (e->id == id) {
            tempo__list_remove(&e->link);
            s->ops->release(s->pipe, e->handle);
            if (e->x) {
                e->x->done = e->x->len;
                xfer_done(e->x, TEMPO_OK);
            }
            tempo__free(e);
            s->heard = 1;
            return 1;
        }
    }
    tempo__stream_broken(s, "acknowledged a zero-copy payload it was never offered");
    return -1;
}

/* A whole payload has arrived. */
static int finish_payload(tempo__stream_t *s)
{
    if (s->in_ticket) {
        return finish_ticket(s);
    }
    if (s->in_note) {
        s->in_note = 0;
        tempo__note_arrived(s->world, s->peer, s->note, (size_t)s->rhdr.len);
    } else if (s->rx) {
        s->rx->done = s->rx->len;
        xfer_done(s->rx, TEMPO_OK);
    } else if (s->rux) {
        ux_complete(s, s->rux);
    }
    s->rx = NULL;
    s->rux = NULL;
    s->rdst = NULL;
    s->in_payload = 0;
    return 1;
}

/* Whether an unexpected message of len bytes may be buffered now (see the file header). */
static int ux_fits(const tempo__stream_t *s, size_t len)
{
    if (!s->ux_limit || s->rdrain || s->unexpected_bytes + len <= s->ux_limit) {
        return 1;
    }
    /* Over the limit (rare): look through every posted receive. */
    for (size_t i = 0; s->posted.n && i < ((size_t)1 << s->posted.bits); i++) {
        const tempo__list_t *head = &s->posted.b[i], *pos;
        for (pos = head->next; pos != head; pos = pos->next) {
            if (!tempo__container_of(pos, tempo__xfer_t, link)->standing) {
                return 1; /* the rank needs a message from this peer: it is behind these */
            }
        }
    }
    return 0;
}

int tempo__stream_recv_blocked(tempo__stream_t *s)
{
    return s->rpaused && s->state == STREAM_OPEN && !ux_fits(s, s->rpause_len);
}

/* Start receiving the payload described by s->rhdr. Returns -1 on failure, 1 when the message
 * does not fit under the limit (nothing consumed: the header is back in the staging buffer). */
static int start_target(tempo__stream_t *s);
static int start_payload(tempo__stream_t *s)
{
    int r = start_target(s);
    if (r == 0 && (s->rhdr.flags & TEMPO_WIRE_F_FETCH)) {
        /* What follows is a ticket; the payload is fetched into the target chosen above. */
        s->in_ticket = 1;
        s->tk_x = s->rx;
        s->tk_ux = s->rux;
        s->rx = NULL;
        s->rux = NULL;
        s->rleft = s->rhdr.reserved;
        s->rdst = (char *)s->ticket;
    }
    return r;
}

static int start_target(tempo__stream_t *s)
{
    uint64_t tag = s->rhdr.tag;
    size_t len = (size_t)s->rhdr.len;
    s->rpaused = 0;
    s->in_payload = 1;
    s->rleft = len;
    s->rx = NULL;
    s->rux = NULL;
    s->rdst = NULL;
    tempo__list_t *pos, *tmp;
    tempo__list_for_each_safe (pos, tmp, match_bucket(&s->posted, tag)) {
        tempo__xfer_t *x = tempo__container_of(pos, tempo__xfer_t, link);
        if (x->tag != tag) {
            continue;
        }
        match_del(&s->posted, &x->link);
        if (sig_differs(x, &s->rhdr.sig) || x->len != len) {
            x->remote_len = len;
            xfer_done(x, TEMPO_ERR_INVALID); /* the payload is discarded */
        } else {
            s->rx = x;
            s->rdst = x->buf;
        }
        return 0;
    }
    s->rpaused = !ux_fits(s, len);
    if (s->rpaused) {
        s->rpause_len = len;
        s->in_payload = 0;
        s->rhead -= sizeof(s->rhdr);
        return 1;
    }
    tempo__ux_t *ux = tempo__calloc(1, sizeof(*ux), "unexpected message");
    char *data = ux ? tempo__malloc(len, "unexpected message") : NULL;
    if (!data) {
        tempo__free(ux);
        tempo__stream_broken(s, "sent a message this rank has no memory to buffer");
        return -1;
    }
    ux->tag = tag;
    ux->len = len;
    ux->sig = s->rhdr.sig;
    ux->data = data;
    match_add(&s->unexpected, &ux->link, tag, ux_tag);
    s->unexpected_bytes += len;
    s->rux = ux;
    s->rdst = data;
    return 0;
}

/* Read from the pipe into dst; returns bytes (> 0), 0 if none, or -1/-2 after handling EOF/errors.
 */
static ssize_t pipe_read(tempo__stream_t *s, void *dst, size_t len)
{
    ssize_t r = s->ops->read(s->pipe, dst, len);
    if (r >= 0) {
        s->moved |= r > 0;
        return r;
    }
    if (s->state == STREAM_BYE && !s->in_payload) {
        /* After its goodbye the peer may end the connection either way: a close that finds
         * something of ours unread (a late probe, say) resets it instead of closing it. */
        return -2;
    }
    connection_lost(s, r);
    return -1;
}

/* Top up the staging buffer; returns bytes added, or < 0. */
static ssize_t fill(tempo__stream_t *s)
{
    if (s->rhead == s->rtail) {
        s->rhead = s->rtail = 0;
    } else if (s->rhead > 0 && s->rcap - s->rtail < sizeof(tempo__wire_hdr_t)) {
        memmove(s->rbuf, s->rbuf + s->rhead, s->rtail - s->rhead);
        s->rtail -= s->rhead;
        s->rhead = 0;
    }
    ssize_t r = pipe_read(s, s->rbuf + s->rtail, s->rcap - s->rtail);
    if (r > 0) {
        s->rtail += (size_t)r;
    }
    return r;
}

int tempo__stream_progress_recv(tempo__stream_t *s)
{
    int events = 0;
    if (s->state == STREAM_FAILED) {
        return -1;
    }
    s->moved = 0;
    for (;;) {
        if (s->in_payload) {
            if (s->rleft == 0) {
                int r = finish_payload(s);
                if (r < 0) {
                    return -1;
                }
                events += r;
                continue;
            }
            size_t have = s->rtail - s->rhead;
            if (have) {
                size_t n = TEMPO_MIN(have, s->rleft);
                s->heard |= !s->in_note;
                if (s->rdst) {
                    memcpy(s->rdst, s->rbuf + s->rhead, n);
                    s->rdst += n;
                }
                s->rhead += n;
                s->rleft -= n;
                continue;
            }
            ssize_t r;
            if (s->rdst && s->rleft >= DIRECT_MIN) {
                r = pipe_read(s, s->rdst, s->rleft);
                if (r > 0) {
                    s->rdst += r;
                    s->rleft -= (size_t)r;
                    s->heard |= !s->in_note;
                }
            } else {
                r = fill(s);
            }
            if (r < 0) {
                return (int)r;
            }
            if (r == 0) {
                return events + s->moved;
            }
            continue;
        }
        if (s->rtail - s->rhead < sizeof(tempo__wire_hdr_t)) {
            ssize_t r = fill(s);
            if (r < 0) {
                return (int)r;
            }
            if (s->rtail - s->rhead < sizeof(tempo__wire_hdr_t)) {
                return events + s->moved;
            }
        }
        memcpy(&s->rhdr, s->rbuf + s->rhead, sizeof(s->rhdr));
        s->rhead += sizeof(s->rhdr);
        char why[160];
        if (!header_valid(s, &s->rhdr, why, sizeof(why))) {
            tempo__stream_broken(s, why);
            return -1;
        }
        if (s->state == STREAM_BYE) {
            tempo__stream_broken(s, "sent data after saying goodbye");
            return -1;
        }
        if (s->rhdr.type == TEMPO_WIRE_ABORT) {
            tempo__stream_broken(s, "aborted the job (tempo_comm_abort)");
            return -1;
        }
        if (s->rhdr.type == TEMPO_WIRE_BYE) {
            char desc[160];
            s->state = STREAM_BYE;
            s->world->peers[s->peer].left = 1;
            TEMPO_DEBUG(TEMPO_SUB_TRANSPORT, "%s said goodbye",
                        tempo__peer_desc(s->world, s->peer, desc, sizeof(desc)));
            fail_posted(s, TEMPO_ERR_REMOTE);
            if (!tempo__list_empty(&s->sendq)) {
                unbuild_head(s);
                fail_queue(&s->sendq, TEMPO_ERR_REMOTE);
            }
            drop_exposed(s, TEMPO_ERR_REMOTE); /* nobody will fetch them now */
            events++;
            continue;
        }
        if (s->rhdr.type == TEMPO_WIRE_FIN) {
            if (fin_arrived(s, s->rhdr.tag) < 0) {
                return -1;
            }
            events++;
            continue;
        }
        s->heard |= s->rhdr.type != TEMPO_WIRE_NOTE;
        if (s->rhdr.type == TEMPO_WIRE_NOTE) {
            s->in_payload = 1;
            s->in_note = 1;
            s->rleft = (size_t)s->rhdr.len;
            s->rx = NULL;
            s->rux = NULL;
            s->rdst = s->note;
            continue;
        }
        int r = start_payload(s);
        if (r) {
            return r < 0 ? -1 : events + s->moved; /* failed, or paused by the limit */
        }
    }
}

/* Endpoint operations for the backends (stream.h, TEMPO__STREAM_EP_OPS): an endpoint begins with
 * its stream. */
tempo_status_t tempo__stream_ep_isend(void *ep, tempo__xfer_t *x)
{
    return tempo__stream_isend(ep, x);
}
tempo_status_t tempo__stream_ep_irecv(void *ep, tempo__xfer_t *x)
{
    return tempo__stream_irecv(ep, x);
}
void tempo__stream_ep_cancel(void *ep, tempo__xfer_t *x)
{
    tempo__stream_cancel(ep, x);
}
tempo_status_t tempo__stream_ep_note(void *ep, const void *data, size_t len)
{
    return tempo__stream_send_note(ep, data, len);
}
void tempo__stream_ep_purge(void *ep, int ctx)
{
    tempo__stream_purge_ctx(ep, ctx);
}
tempo_status_t tempo__stream_ep_inject(void *ep, const void *bytes, size_t len)
{
    return tempo__stream_inject(ep, bytes, len);
}
