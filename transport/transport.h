/*
 * transport.h — tagged, non-blocking point-to-point transfers between ranks of a world, over one
 * ops table per transport (shm inside a host, tcp otherwise).
 *
 * A transfer (tempo__xfer_t) is owned by its caller (usually embedded in an operation's state) and
 * must stay valid until it completes or is cancelled. Messages between two ranks with the same tag
 * are matched in order. A receive must post exactly the number of bytes sent; a mismatch fails the
 * receive with TEMPO_ERR_INVALID and remote_len says what was sent. A send completes when its bytes
 * have been handed to the transport (socket buffer or shared-memory ring), so the send buffer may
 * be reused then.
 *
 * Failures: a peer that closes its connection without saying goodbye, or sends a malformed header,
 * fails the whole world (tempo__world_fail) with a message naming it. A peer that says goodbye
 * (destroyed its last communicator) is marked left: its pending and later receives and sends fail
 * with TEMPO_ERR_REMOTE.
 */
#ifndef TEMPO_TRANSPORT_H
#define TEMPO_TRANSPORT_H

#include "core/sock.h"
#include "core/world.h"

/** Ring the shm doorbell of those of world ranks wranks[0..n) that sleep (shm.c). */
void tempo__shm_wake(tempo__world_t *w, const int *wranks, int n);

/** After a store to shared memory that same-host ranks wranks[0..n) may be sleeping on (a counter
 *  of a shm collective): wake those that sleep. One relaxed load while none of the host sleeps. */
static inline void tempo__shm_published(tempo__world_t *w, const int *wranks, int n)
{
    if (TEMPO_UNLIKELY(w->shm_sleepers &&
                       atomic_load_explicit(w->shm_sleepers, memory_order_relaxed))) {
        tempo__shm_wake(w, wranks, n);
    }
}

typedef struct tempo__xfer {
    tempo__list_t link; /* transport queue */
    int peer;           /* world rank */
    int is_send;
    uint64_t tag;
    void *buf;    /* const for sends */
    size_t len;   /* bytes */
    size_t done;  /* bytes moved so far */
    int complete; /* 1 once finished (status valid) */
    tempo_status_t status;
    size_t remote_len; /* receive size mismatch: what the peer sent */
    const tempo__sig_t *sig; /* collectives: the call's signature, sent with the message and
                              * compared with what arrives; NULL otherwise */
    tempo__sig_t remote_sig; /* sig_differs: the signature the peer sent */
    int sig_differs;         /* a receive failed because the signatures differ */
    int standing;            /* set by the caller, may change while posted: a receive that is
                              * always posted and not waited for now (an idle lane's control
                              * receive); it does not keep the pipe read past
                              * TEMPO_UNEXPECTED_BYTES (transport/stream.h) */
    int urgent;              /* a send that goes ahead of the queued sends to its peer not yet
                              * begun (in order among urgent ones): tempo__tl_isend_urgent */
    void *priv;              /* transport private */
} tempo__xfer_t;

typedef struct tempo__tl_ops {
    const char *name;
    tempo_status_t (*isend)(void *ep, tempo__xfer_t *x);
    tempo_status_t (*irecv)(void *ep, tempo__xfer_t *x);
    /** Withdraw x (not complete). A partly sent message is finished from a private copy and a
     *  partly received one is discarded, so the stream stays in sync. */
    void (*cancel)(void *ep, tempo__xfer_t *x);
    /** Queue a control note for the peer's core (tempo__stream_send_note). */
    tempo_status_t (*note)(void *ep, const void *data, size_t len);
    /** Drop the complete unexpected messages of context ctx (a destroyed communicator's id that is
     *  being recycled: nothing more of it will arrive from this peer). */
    void (*purge)(void *ep, int ctx);
    /** Tests only: put len raw bytes on the data channel as they are, bypassing framing (a
     *  message transport sends them as one message). */
    tempo_status_t (*inject)(void *ep, const void *bytes, size_t len);
} tempo__tl_ops_t;

/** Before the rendezvous: open the tcp listening socket for the address family of local (the
 * address through which this rank reaches rank 0) and fill info->addr with local's host and the
 * port. */
tempo_status_t tempo__tl_prepare(const tempo__addr_t *local, tempo__peer_info_t *info,
                                 int *listen_fd_p);

/** After the rendezvous: connect to every peer, set up shared memory between ranks of this host,
 *  and register the transport hooks in w. Takes ownership of listen_fd. Collective. */
tempo_status_t tempo__tl_setup(tempo__world_t *w, int listen_fd, uint64_t deadline);

/** Post a send/receive of len bytes to/from world rank peer. On error (peer left, job failed) x
 *  completes at once with that status; the return value is TEMPO_OK or TEMPO_ERR_NOMEM. */
tempo_status_t tempo__tl_isend(tempo__world_t *w, int peer, uint64_t tag, const void *buf,
                               size_t len, tempo__xfer_t *x);
tempo_status_t tempo__tl_irecv(tempo__world_t *w, int peer, uint64_t tag, void *buf, size_t len,
                               tempo__xfer_t *x);
/** tempo__tl_isend for a small control message that must not wait behind data: it goes out ahead
 *  of every send to the same peer that has not begun yet (after the one on the wire, since a
 *  stream sends whole messages), and in posting order among such messages. Only for tags no data
 *  message uses (a control tag), so that no two messages of one tag change order. */
tempo_status_t tempo__tl_isend_urgent(tempo__world_t *w, int peer, uint64_t tag, const void *buf,
                                      size_t len, tempo__xfer_t *x);
/** Withdraw an incomplete transfer (see tempo__tl_ops_t.cancel). */
void tempo__tl_cancel(tempo__world_t *w, tempo__xfer_t *x);

/** Drop what arrived from world rank peer on context ctx and was never received (see
 *  tempo__tl_ops_t.purge). */
void tempo__tl_purge_ctx(tempo__world_t *w, int peer, int ctx);

/** Tests only: put len raw bytes on the data channel to world rank peer (tempo__tl_ops_t.inject),
 *  so that the conformance suite can check that malformed and truncated frames are refused. */
tempo_status_t tempo__tl_inject(tempo__world_t *w, int peer, const void *bytes, size_t len);

/** The name of the transport that carries peer's data ("none" when there is none). */
const char *tempo__tl_name(tempo__world_t *w, int peer);

/** Text for a failed transfer: "rank 3 (host a, pid 9) sent 400 bytes where 800 were expected". */
const char *tempo__xfer_error(tempo__world_t *w, const tempo__xfer_t *x, char *buf, size_t len);

/* ---------------------------------------------------------------------------------------------- */
/* Shared-memory regions for collectives (transport/shm.c)                                        */
/* ---------------------------------------------------------------------------------------------- */

typedef struct tempo__shm_region {
    void *base;
    size_t size;
    char name[96];
} tempo__shm_region_t;

/** Whether the shm transport is set up in w (TEMPO_TRANSPORTS and TEMPO_SHM leave it on, and this
 *  host has several ranks of the job): shm collectives are used only then. */
int tempo__tl_shm_on(tempo__world_t *w);

/** Create (comm rank 0) or map (others) a shared region of size bytes, zero-filled, among the ranks
 *  of comm, which must all be on this host. Collective over comm. The backing file is unlinked as
 *  soon as every rank has mapped it, so nothing is left behind even if a process dies; tag (NULL or
 *  a short word) ends its name, so that tests can tell whose it was. Returns TEMPO_ERR_NOMEM (with
 *  the reason) when /dev/shm has no room. */
tempo_status_t tempo__shm_region_create(struct tempo_comm *comm, size_t size, const char *tag,
                                        tempo__shm_region_t *region_p);
void tempo__shm_region_destroy(tempo__shm_region_t *region);

/** The names of the transports compiled in ("shm, tcp, verbs"), into buf. */
void tempo__tl_compiled(char *buf, size_t len);

/** Transport table for tempo_transport_info(). */
tempo_status_t tempo__tl_info(size_t index, tempo_transport_info_t *info_p);

#endif /* TEMPO_TRANSPORT_H */
