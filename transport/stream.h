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
 */
#ifndef TEMPO_TRANSPORT_STREAM_H
#define TEMPO_TRANSPORT_STREAM_H

#include <sys/uio.h>

#include "transport/transport.h"

#define TEMPO_WIRE_MAGIC 0x4d504d54u /* "TMPM" */
#define TEMPO_WIRE_VERSION 2
#define TEMPO_WIRE_DATA 1
#define TEMPO_WIRE_BYE 2
#define TEMPO_WIRE_ABORT 3
#define TEMPO_WIRE_NOTE 4 /* a control note for the core (core/check.c), at most NOTE_MAX bytes */
#define TEMPO_WIRE_MAX_LEN (1ull << 40) /* 1 TiB: anything larger is a corrupt header */
#define TEMPO_WIRE_NOTE_MAX TEMPO_NOTE_MAX

typedef struct tempo__wire_hdr {
    uint32_t magic;
    uint8_t version;
    uint8_t type;
    uint16_t flags;    /* 0 */
    uint32_t src;      /* sender's world rank */
    uint32_t reserved; /* 0 */
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
    size_t unexpected_bytes;
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
/** True when nothing is queued for sending. */
static inline int tempo__stream_send_idle(const tempo__stream_t *s)
{
    return tempo__list_empty(&s->sendq);
}

#endif /* TEMPO_TRANSPORT_STREAM_H */
