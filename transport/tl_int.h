/*
 * tl_int.h — what transport.c, tcp.c and shm.c share; not used outside transport/.
 *
 * The tcp transport connects every pair of ranks. Its connections carry the data of peers on other
 * hosts, and for peers on this host (whose data goes through shm) they carry setup messages and
 * prove liveness: a process that dies closes its sockets, which every peer notices at once.
 */
#ifndef TEMPO_TRANSPORT_TL_INT_H
#define TEMPO_TRANSPORT_TL_INT_H

#include "transport/stream.h"

typedef struct tcp_tl tcp_tl_t;
typedef struct shm_tl shm_tl_t;

typedef struct tempo__tl {
    tempo__world_t *world;
    tcp_tl_t *tcp;
    shm_tl_t *shm;
} tempo__tl_t;

extern const tempo__tl_ops_t tempo__tcp_ops;
extern const tempo__tl_ops_t tempo__shm_ops;

tempo_status_t tempo__tcp_setup(tempo__world_t *w, int listen_fd, uint64_t deadline,
                                tcp_tl_t **tcp_p);
int tempo__tcp_progress(tcp_tl_t *t, int timeout_ms);
/** Wait up to timeout_ms for socket readiness without moving data (callable without the lock);
 *  returns why it returned (TEMPO__WAKE_*). */
int tempo__tcp_wait(tcp_tl_t *t, int timeout_ms);
/** Watch fd (the shm doorbell) in tempo__tcp_wait; progress ignores it. */
tempo_status_t tempo__tcp_watch(tcp_tl_t *t, int fd);
void tempo__tcp_close(tcp_tl_t *t, int graceful, uint64_t deadline);
/** The tcp endpoint of a peer (every peer has one), for setup messages. */
void *tempo__tcp_ep(tcp_tl_t *t, int peer);
tempo__stream_t *tempo__tcp_stream(tcp_tl_t *t, int peer);
/** Number of endpoints of t that carry data; progress polls sockets on every call only then. */
void tempo__tcp_set_data(tcp_tl_t *t, int peer, int carries_data);

tempo_status_t tempo__shm_setup(tempo__world_t *w, uint64_t deadline, shm_tl_t **shm_p);
int tempo__shm_progress(shm_tl_t *s);
/** The shm endpoint of a peer, or NULL when the peer is not served by shm. */
void *tempo__shm_ep(shm_tl_t *s, int peer);
void tempo__shm_close(shm_tl_t *s, int graceful, uint64_t deadline);
/** Doorbell (shm.c): publish (sleeping = 1) or withdraw (0) this rank's "sleeping" flag; returns
 *  whether the doorbell is on (else nothing was published). */
int tempo__shm_doze(shm_tl_t *s, int sleeping);
/** The bell socket to watch while sleeping, or -1; tempo__shm_bell_drain empties it. */
int tempo__shm_bell_fd(shm_tl_t *s);
/** The host's count of sleeping ranks (for world->shm_sleepers). */
_Atomic uint32_t *tempo__shm_sleepers(shm_tl_t *s);
void tempo__shm_bell_drain(shm_tl_t *s);

/** Blocking exchange of small setup messages over the tcp endpoints, outside any operation:
 *  post the sends and receives, then run the engine until all complete or the deadline. */
typedef struct tempo__ctrl_msg {
    int peer;      /* world rank */
    uint32_t code; /* becomes the tag */
    void *buf;
    size_t len;
} tempo__ctrl_msg_t;
tempo_status_t tempo__ctrl_exchange(tempo__world_t *w, tempo__ctrl_msg_t *sends, int nsend,
                                    tempo__ctrl_msg_t *recvs, int nrecv, uint64_t deadline,
                                    const char *what);

#endif /* TEMPO_TRANSPORT_TL_INT_H */
