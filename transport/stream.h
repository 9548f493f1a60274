/*
 * stream.h — messages over a byte pipe: framing, validation, tag matching and unexpected-message
 * buffering, shared by the transports whose wire is an ordered byte stream (tcp sockets, shm
 * rings).
 *
 * A transport supplies a pipe (non-blocking writev and read of bytes) per peer; the stream turns
 * tempo__xfer_t sends and receives into framed messages on it. Every message starts with a
 * tempo__wire_hdr_t, which is validated before use (magic, version, type, flags, sender, length,
 * reserved tag bits, signature); a malformed header fails the job, naming the peer. A receive
 * posted with a signature (tempo__xfer_t.sig) fails with TEMPO_ERR_INVALID and sig_differs set
 * when the message matched by its tag carries another signature: the ranks called different
 * collectives under the same sequence number. Payloads of matched
 * receives are read straight into the caller's buffer; others are buffered as unexpected messages
 * until a receive with their tag is posted.
 *
 * Send order. Messages go out whole, in the order they were posted, except urgent ones
 * (tempo__xfer_t.urgent, tempo__tl_isend_urgent: the scheduled lane's START decisions and POST
 * reports), which go ahead of every queued message not yet begun, in posting order among
 * themselves; the message on the wire is always finished first. Messages of one tag never change
 * order, since urgent messages use control tags that no data message carries. A control message
 * queued behind a lane's data would wait for the queue to drain: behind a chunk's 9 MB message
 * at 1 Gbit/s, 75 ms.
 *
 * Flow control (back-pressure per peer). The unexpected messages a peer can make this rank buffer
 * are bounded by ux_limit (TEMPO_UNEXPECTED_BYTES): a data message that matches no posted receive
 * and does not fit under the limit is not started; its header stays in the staging buffer and the
 * stream stops reading the pipe (paused). The pipe (socket buffer, shm ring) then fills and the
 * peer's sends stall, so the peer waits, and its own deadline names this rank. The limit is soft
 * so that a correct program never deadlocks: while some receive from the peer is posted, the rank
 * needs a message that can only be behind the buffered ones in the byte stream, so reading goes
 * on. Standing receives (tempo__xfer_t.standing: always posted, like the scheduled lane's control
 * receives, which the lane marks standing only while it waits for no control message) do not
 * count, or the limit would never hold. A peer that hangs up is drained whatever
 * the limit (tempo__stream_drain), so that its goodbye, abort notice or end of stream is seen.
 * What is bounded: unexpected_bytes <= ux_limit unless a non-standing receive from the peer is
 * posted, plus the 64 KiB staging buffer. ux_limit 0 means no limit.
 * Why not rendezvous (RTS/CTS, so that an unexpected large message costs only its header): it adds
 * a round trip to every large message that arrives before its receive, which in pipelined and
 * ring collectives is most of them (a round posts its receive when it starts, often after the
 * peer's data came), and the round trip sits on their critical path. Pausing at a message boundary
 * leaves the eager path exactly as it was until a peer is a limit ahead: the cost is one
 * comparison per unexpected message, and a paused message later lands straight in its receive
 * buffer instead of being copied twice.
 */
#ifndef TEMPO_TRANSPORT_STREAM_H
#define TEMPO_TRANSPORT_STREAM_H

#include <stddef.h>
#include <sys/uio.h>

#include "transport/transport.h"

#define TEMPO_WIRE_MAGIC 0x4d504d54u /* "TMPM" */
#define TEMPO_WIRE_VERSION 4 /* 3: the signature carries how the call runs (tempo__sig_t.how);
                              * 4: zero-copy payloads (TEMPO_WIRE_F_FETCH, TEMPO_WIRE_FIN) */
#define TEMPO_WIRE_DATA 1
#define TEMPO_WIRE_BYE 2
#define TEMPO_WIRE_ABORT 3
#define TEMPO_WIRE_NOTE 4 /* a control note for the core (core/check.c), at most NOTE_MAX bytes */
#define TEMPO_WIRE_FIN 5  /* the receiver fetched (or dropped) zero-copy payload number tag */
#define TEMPO_WIRE_F_FETCH 1u /* flags of a DATA header: the payload stays at the sender, and the
                               * header is followed by a ticket of `reserved` bytes: the 8-byte
                               * payload number, then the pipe's descriptor (expose/fetch) */
#define TEMPO_WIRE_DESC_MAX 256 /* bytes of a pipe's descriptor */
#define TEMPO_WIRE_MAX_LEN (1ull << 40) /* 1 TiB: anything larger is a corrupt header */
#define TEMPO_WIRE_NOTE_MAX TEMPO_NOTE_MAX

typedef struct tempo__wire_hdr {
    uint32_t magic;
    uint8_t version;
    uint8_t type;
    uint16_t flags;    /* 0, or TEMPO_WIRE_F_FETCH */
    uint32_t src;      /* sender's world rank */
    uint32_t reserved; /* 0; with TEMPO_WIRE_F_FETCH the ticket's length */
    uint64_t tag;
    uint64_t len;     /* payload bytes */
    tempo__sig_t sig; /* a collective's message: its call's signature (valid = 1); else zeros */
} tempo__wire_hdr_t;

/** Pipe result for "the other side closed" (read), distinct from -errno values. */
#define TEMPO_PIPE_EOF (-100000)

typedef struct tempo__pipe_ops {
    /** Write up to the total of iov; returns bytes accepted (0 if full) or -errno. */
    ssize_t (*writev)(void *pipe, const struct iovec *iov, int iovcnt);
    /** Read up to len bytes; returns bytes read, 0 if none available, TEMPO_PIPE_EOF, or -errno. */
    ssize_t (*read)(void *pipe, void *buf, size_t len);

    /* Optional zero-copy path (all NULL: every payload goes through the pipe). A pipe that has it
     * calls tempo__stream_set_fetch(s, min) and then payloads of at least min bytes stay where
     * they are: the sender exposes the buffer, sends a ticket, and the receiver fetches straight
     * into the matched receive's buffer (or into an unexpected-message buffer), then says FIN. */
    /** Make buf[0..len) readable by the peer; write a descriptor (at most TEMPO_WIRE_DESC_MAX
     *  bytes) into desc and return its length, or 0 when it cannot (the payload then goes through
     *  the pipe). *handle is given back to release(). */
    size_t (*expose)(void *pipe, const void *buf, size_t len, void *desc, void **handle);
    /** The peer is done with an exposed buffer (FIN, or the stream ends). */
    void (*release)(void *pipe, void *handle);
    /** Start copying the len bytes that desc describes into dst. Returns 1 when done already, 0
     *  when started (the pipe then calls tempo__stream_fetched(s, op, status) from its progress),
     *  or -errno. */
    int (*fetch)(void *pipe, const void *desc, size_t desc_len, void *dst, size_t len, void *op);
    /** Drive the pipe's progress once (fetch completions, FIN arrival), for waits inside the
     *  stream; NULL when read() and writev() already do. */
    void (*poll)(void *pipe);
    /** Stop every fetch and exposure of this pipe now (close the connection underneath): after it,
     *  nothing of this pipe reads or writes the caller's memory. Idempotent. */
    void (*kill)(void *pipe);
} tempo__pipe_ops_t;

typedef enum { STREAM_OPEN, STREAM_BYE, STREAM_FAILED } tempo__stream_state_t;

/** A tag-matching table: lists by tag hash, each in posting (or arrival) order. Tags match
 *  exactly, so the order inside a bucket is the only order that matters. It grows with what it
 *  holds, so that finding a tag costs O(1) on average however many receives are in flight (a
 *  scheduled request cut into 30,000 chunks posts as many receives per peer at once). */
typedef struct tempo__match {
    tempo__list_t *b; /* (1 << bits) lists */
    unsigned bits;
    size_t n; /* entries */
} tempo__match_t;

typedef struct tempo__stream {
    const tempo__pipe_ops_t *ops;
    void *pipe;
    tempo__world_t *world;
    int peer;            /* world rank at the other end */
    const char *tl_name; /* for messages */
    int state;           /* tempo__stream_state_t: receive side */
    int sent_bye;
    int moved; /* bytes moved during the current progress call */
    int heard; /* bytes of a message other than a control note moved since the transport last
                * asked (tempo__stream_heard): what extends deadlines. Notes do not: probes and
                * blame queries go back and forth between ranks that wait for each other, and
                * must not keep a wait that no data ends alive past TEMPO_TIMEOUT. */

    /* Send side: queue of xfers; the head is being written. */
    tempo__list_t sendq;
    tempo__wire_hdr_t shdr; /* header of the head message */
    size_t shdr_off;        /* header bytes already written */
    int shdr_valid;

    /* Receive side. */
    char *rbuf;                /* staging buffer for headers and small payloads */
    size_t rcap, rhead, rtail; /* valid bytes are rbuf[rhead, rtail) */
    int in_payload;            /* a payload is being received */
    tempo__wire_hdr_t rhdr;    /* its header */
    size_t rleft;              /* payload bytes still to come */
    char *rdst;                /* where they go (NULL: discard) */
    tempo__xfer_t *rx;         /* the matched receive, if any */
    struct tempo__ux *rux;     /* or the unexpected message being filled */
    int in_note;               /* the payload is a control note, read into note */
    char note[TEMPO_WIRE_NOTE_MAX];
    tempo__match_t posted;     /* posted receives (tempo__xfer_t) */
    tempo__match_t unexpected; /* unexpected messages (tempo__ux) */
    size_t unexpected_bytes;   /* payload bytes of the unexpected messages */
    size_t ux_limit;           /* bytes; TEMPO_UNEXPECTED_BYTES at init, 0: no limit */
    int rpaused;               /* the header at rbuf[rhead] starts an unexpected message of
                                * rpause_len bytes that did not fit: reading stopped there */
    size_t rpause_len;
    int rdrain;                /* the peer hung up: read everything, whatever the limit */

    /* Zero-copy payloads (tempo__pipe_ops_t.expose/fetch). */
    size_t fetch_min;          /* payloads of at least this many bytes; 0: off */
    uint64_t fetch_next;       /* number of the last payload exposed */
    struct tempo__expo *shead_expo; /* the head send's exposure, while its ticket is written */
    tempo__list_t exposed;     /* sent tickets waiting for their FIN (tempo__expo) */
    tempo__list_t fetching;    /* fetches in flight (tempo__fetch) */
    int in_ticket;             /* the payload being read is a ticket */
    tempo__xfer_t *tk_x;       /* its matched receive, */
    struct tempo__ux *tk_ux;   /* or its unexpected message (neither: drop it) */
    unsigned char ticket[8 + TEMPO_WIRE_DESC_MAX];
} tempo__stream_t;

tempo_status_t tempo__stream_init(tempo__stream_t *s, tempo__world_t *w, int peer,
                                  const char *tl_name, const tempo__pipe_ops_t *ops, void *pipe);
/** Fail every queued transfer, free buffers. */
void tempo__stream_fini(tempo__stream_t *s);

tempo_status_t tempo__stream_isend(tempo__stream_t *s, tempo__xfer_t *x);
tempo_status_t tempo__stream_irecv(tempo__stream_t *s, tempo__xfer_t *x);
void tempo__stream_cancel(tempo__stream_t *s, tempo__xfer_t *x);
/** Free the complete unexpected messages whose tag carries context ctx (none is bound to a
 *  receive: the communicator's receives were cancelled). */
void tempo__stream_purge_ctx(tempo__stream_t *s, int ctx);

/** Write as much of the send queue as the pipe takes; returns events (>= 0: completions, plus one
 * if any bytes moved, so waits keep polling during long transfers) or -1 on failure. */
int tempo__stream_progress_send(tempo__stream_t *s);
/** Read and dispatch what the pipe has; returns events (>= 0) or -1 on failure (job failed) and
 *  -2 at a clean end of stream after a goodbye. */
int tempo__stream_progress_recv(tempo__stream_t *s);
/** Whether bytes of a message other than a control note moved since the last call (the transport
 *  then stamps the peer as heard from: tempo__peer_heard). */
static inline int tempo__stream_heard(tempo__stream_t *s)
{
    int h = s->heard;
    s->heard = 0;
    return h;
}
/** True while back-pressure holds: the stream stopped at an unexpected message that still does not
 *  fit (see the file header). A transport stops watching the pipe for input then, and calls
 *  tempo__stream_progress_recv again once this turns false (the paused header is already in the
 *  staging buffer, so no new input may ever signal it). */
int tempo__stream_recv_blocked(tempo__stream_t *s);
/** The peer hung up: read what is left in the pipe whatever the limit. */
static inline void tempo__stream_drain(tempo__stream_t *s)
{
    s->rdrain = 1;
}
/** Queue a goodbye message (nothing may be sent after it). */
tempo_status_t tempo__stream_send_bye(tempo__stream_t *s);
/** Best effort, right before closing without goodbye: tell the peer this rank aborted, so that its
 *  error says so. Whatever of the message fits into the pipe now is written; the rest is dropped.
 */
void tempo__stream_send_abort(tempo__stream_t *s);
/** The peer vanished (EOF/error without goodbye, or a protocol violation): fail the job naming it.
 */
void tempo__stream_broken(tempo__stream_t *s, const char *why);
/** Queue a control note (len <= TEMPO_WIRE_NOTE_MAX, copied) after everything queued before it.
 *  Arriving notes are handed to tempo__note_arrived(). */
tempo_status_t tempo__stream_send_note(tempo__stream_t *s, const void *data, size_t len);
/** Switch zero-copy payloads on for payloads of at least min bytes (the pipe has expose, release,
 *  fetch and kill); 0 switches them off. */
void tempo__stream_set_fetch(tempo__stream_t *s, size_t min);
/** A fetch started by tempo__pipe_ops_t.fetch finished (op is what fetch was given). */
void tempo__stream_fetched(tempo__stream_t *s, void *op, tempo_status_t status);
/** Tests only: queue len raw bytes (copied) after everything queued, written without a header. */
tempo_status_t tempo__stream_inject(tempo__stream_t *s, const void *bytes, size_t len);
/** The endpoint operations (tempo__tl_ops_t) of a backend whose endpoints begin with their stream
 *  (every backend: the stream layer does them all): `static const tempo__tl_ops_t x_ops =
 *  TEMPO__STREAM_EP_OPS("x");`, with TEMPO__STREAM_FIRST(x_ep_t) beside it. */
tempo_status_t tempo__stream_ep_isend(void *ep, tempo__xfer_t *x);
tempo_status_t tempo__stream_ep_irecv(void *ep, tempo__xfer_t *x);
void tempo__stream_ep_cancel(void *ep, tempo__xfer_t *x);
tempo_status_t tempo__stream_ep_note(void *ep, const void *data, size_t len);
void tempo__stream_ep_purge(void *ep, int ctx);
tempo_status_t tempo__stream_ep_inject(void *ep, const void *bytes, size_t len);
#define TEMPO__STREAM_EP_OPS(name)                                                                 \
    {(name),                 tempo__stream_ep_isend, tempo__stream_ep_irecv,                       \
     tempo__stream_ep_cancel, tempo__stream_ep_note, tempo__stream_ep_purge,                       \
     tempo__stream_ep_inject}
#define TEMPO__STREAM_FIRST(ep_type)                                                               \
    _Static_assert(offsetof(ep_type, stream) == 0, #ep_type " must begin with its stream")
/** True when nothing is queued for sending. */
static inline int tempo__stream_send_idle(const tempo__stream_t *s)
{
    return tempo__list_empty(&s->sendq);
}

#endif /* TEMPO_TRANSPORT_STREAM_H */
