/*
 * tl_int.h — the transport backend table and what the backends share; not used outside transport/.
 *
 * A transport is a backend (tempo__tl_backend_t) registered in one table (transport/transport.c,
 * the only place that names them and the only place with `#if TEMPO_HAVE_X`). transport.c sets up
 * the backends a job selects (TEMPO_TRANSPORTS), gives each peer to the first backend in the
 * preference order that reaches it, and from then on dispatches through the table alone: progress,
 * idle waits, closing, and per peer the endpoint ops (tempo__tl_ops_t).
 *
 * The control backend (tcp, TEMPO__TL_CAP_CONTROL) is always set up, whatever TEMPO_TRANSPORTS
 * says: it connects every pair of ranks, carries setup messages (tempo__ctrl_exchange, through which
 * the other backends exchange their connection data), owns the poll set that idle waits sleep in,
 * and proves liveness: a process that dies closes its sockets, which every peer notices at once,
 * whatever backend carries its data. It carries data only for the peers that no backend before it
 * in the preference order reaches, and only when TEMPO_TRANSPORTS lists it.
 *
 * Agreement: every rank publishes its resolved preference order at the rendezvous
 * (tempo__peer_info_t.transports) and the setup refuses a job whose ranks disagree. A backend's
 * open() is told which peers it may serve (want[]: peers no earlier backend took, the same set on
 * both ends of each pair), and its ep() must give the same answer on both ends of each pair (it
 * exchanges "usable here" with each wanted peer during open), so that both ends of a pair always
 * pick the same backend.
 */
#ifndef TEMPO_TRANSPORT_TL_INT_H
#define TEMPO_TRANSPORT_TL_INT_H

#include "transport/stream.h"

/* Capabilities (tempo__tl_backend_t.caps). */
#define TEMPO__TL_CAP_TAGGED (1u << 0)  /* tagged send/receive (every data backend) */
#define TEMPO__TL_CAP_RMA (1u << 1)     /* one-sided reads of a peer's exposed buffer: the stream's
                                         * zero-copy tickets (stream.h: expose, fetch) */
#define TEMPO__TL_CAP_MEMREG (1u << 2)  /* buffers are registered for that, through the backend's
                                         * registration cache (expose/release reach it) */
#define TEMPO__TL_CAP_WAIT_FD (1u << 3) /* a file descriptor that idle waits can sleep on */
#define TEMPO__TL_CAP_CONTROL (1u << 4) /* the control backend: mesh, setup messages, poll set */

typedef struct tempo__tl_backend {
    const char *name;
    int priority;   /* position in the default preference order (lower first) */
    int by_default; /* in the order when TEMPO_TRANSPORTS does not name it (shm, tcp) */
    unsigned caps;  /* TEMPO__TL_CAP_* */
    /** Whether this build and machine can use it, and a line for tempo-info. No side effects. */
    int (*probe)(char *detail, size_t len);
    /** Set up among the ranks of w. Called by every rank, backends in preference order; the
     *  backend talks only with the peers p where want[p] != 0 (identical at both ends of a pair),
     *  through tempo__ctrl_exchange. Unusable here: set *inst_p = NULL (or an instance whose ep()
     *  is NULL everywhere) and return TEMPO_OK after having told the wanted peers, so that they
     *  go on without it; an error return fails the job's start. */
    tempo_status_t (*open)(tempo__world_t *w, const unsigned char *want, uint64_t deadline,
                           void **inst_p);
    /** The endpoint that carries data to peer, NULL when this backend does not reach it. */
    void *(*ep)(void *inst, int peer);
    /** Endpoint operations (tagged send/receive, cancel, notes, purge). */
    const tempo__tl_ops_t *ops;
    /** Whether peer's data goes through this backend (called once per peer after the choice);
     *  optional: tcp polls its sockets less often when it carries nobody's data. */
    void (*carries)(void *inst, int peer, int yes);
    /** Move what can move now; returns the number of events (completions; any bytes moved count
     *  one). Called with the world lock held. */
    int (*progress)(void *inst);
    /** TEMPO__TL_CAP_WAIT_FD: a descriptor that is readable when the backend has work, or -1. */
    int (*wait_fd)(void *inst);
    /** Optional: before (sleeping = 1) and after (0) an idle sleep: publish or withdraw "this
     *  rank sleeps" (shm's doorbell), or arm the wait descriptor (ucx); returns 1 when it did, so
     *  that the engine polls once more before it sleeps. Called with the lock held. */
    int (*doze)(void *inst, int sleeping);
    /** Optional: the wait descriptor woke an idle sleep (drain it). Called without the lock. */
    void (*woken)(void *inst);
    /** TEMPO__TL_CAP_CONTROL: add fd to the poll set that wait() sleeps in. */
    tempo_status_t (*watch)(void *inst, int fd);
    /** TEMPO__TL_CAP_CONTROL: sleep until I/O on the poll set or timeout_ms, without moving data
     *  (callable without the lock); returns TEMPO__WAKE_* (TEMPO__WAKE_BELL: a watched fd). */
    int (*wait)(void *inst, int timeout_ms);
    /** Say goodbye (graceful) or abort, flush within deadline, free everything. */
    void (*close)(void *inst, int graceful, uint64_t deadline);
} tempo__tl_backend_t;

/** The registered backends (transport.c) and the number of them. */
extern const tempo__tl_backend_t *const tempo__tl_backends[];
extern const int tempo__tl_nbackends;

/** The transports of a world: the backends set up (the control backend first, then the others in
 *  preference order). */
#define TEMPO__TL_MAX 8
typedef struct tempo__tl {
    tempo__world_t *world;
    int listen_fd; /* the control backend's listening socket until it takes it (open) */
    int n;
    const tempo__tl_backend_t *b[TEMPO__TL_MAX];
    void *inst[TEMPO__TL_MAX];
    const tempo__tl_backend_t *ctl; /* the control backend (also among b[]) */
    void *ctl_inst;
} tempo__tl_t;

/** The instance of backend b in w, NULL when it is not set up. */
static inline void *tempo__tl_instance(tempo__world_t *w, const tempo__tl_backend_t *b)
{
    tempo__tl_t *tl = w->tl;
    for (int i = 0; tl && i < tl->n; i++) {
        if (tl->b[i] == b) {
            return tl->inst[i];
        }
    }
    return NULL;
}

extern const tempo__tl_backend_t tempo__shm_backend;
extern const tempo__tl_backend_t tempo__tcp_backend;
extern const tempo__tl_backend_t tempo__ucx_backend;
extern const tempo__tl_backend_t tempo__verbs_backend;

/** Blocking exchange of small setup messages over the control backend, outside any operation
 *  (transport/ctrl.c): post the sends and receives, then run the engine until all complete or the
 *  deadline. */
typedef struct tempo__ctrl_msg {
    int peer;      /* world rank */
    uint32_t code; /* becomes the tag */
    void *buf;
    size_t len;
} tempo__ctrl_msg_t;
tempo_status_t tempo__ctrl_exchange(tempo__world_t *w, tempo__ctrl_msg_t *sends, int nsend,
                                    tempo__ctrl_msg_t *recvs, int nrecv, uint64_t deadline,
                                    const char *what);
/** The common case: one record of len bytes each way with every rank p where want[p] (want has
 *  w->size entries, symmetric across the job): sends mine + p * stride (stride 0: the same record
 *  to all) and receives p's into theirs + p * len. */
tempo_status_t tempo__ctrl_swap(tempo__world_t *w, const unsigned char *want, uint32_t code,
                                const void *mine, size_t stride, void *theirs, size_t len,
                                uint64_t deadline, const char *what);

/** tcp.c's mesh handshake, the checks that need no socket (tests/fuzz/fuzz_hello.c). The
 *  accepting rank's of a hello (a hello_t: magic, rank, job uuid, nonce, MAC) answering its
 *  challenge chal (TEMPO__AUTH_NONCE bytes), at rank of size with job uuid; auth: its MAC is
 *  checked (a job key is loaded). NULL if it comes from a higher rank of this job (whether that
 *  rank is connected already is the caller's to check), or why not, for the log. */
const char *tempo__tcp_hello_check(const void *hello, const uint8_t *chal, uint64_t uuid,
                                   int rank, int size, int auth);
/** The connecting rank's of the answer ack (a mack_t: magic, rank, MAC) to its hello, from rank p:
 *  whether it is p's, and with auth, proves the job key. */
int tempo__tcp_ack_ok(const void *ack, const void *hello, int p, int auth);

#endif /* TEMPO_TRANSPORT_TL_INT_H */
