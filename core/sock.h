/*
 * sock.h — small TCP helpers used by the bootstrap and the tcp transport: address parsing and
 * printing, listening, connecting with retries until a deadline, blocking full reads/writes
 * with a deadline, and greeters (the accepting side of a challenge and response, read side by
 * side). IPv4 and IPv6. Every socket is close-on-exec.
 */
#ifndef TEMPO_CORE_SOCK_H
#define TEMPO_CORE_SOCK_H

#include <poll.h>
#include <stdint.h>
#include <sys/socket.h>

#include "core/tempo_int.h"

typedef struct tempo__addr {
    struct sockaddr_storage ss;
    socklen_t len;
} tempo__addr_t;

/** The address of network interface name (port 0): of family (AF_INET, AF_INET6) where it has
 *  one, else its first; TEMPO_ERR_INVALID naming the interfaces that have one if it has none. */
tempo_status_t tempo__addr_of_ifname(const char *name, int family, tempo__addr_t *addr_p);

/** Parse "host:port", "[v6addr]:port" (host may be a name). */
tempo_status_t tempo__addr_parse(const char *text, tempo__addr_t *addr_p);
/** The syntax of tempo__addr_parse() without resolving the host: host (NUL-terminated, at most
 *  hostlen - 1 characters) and port 0..65535 of text; 0, or -1 if text is not such an address. */
int tempo__addr_split(const char *text, char *host, size_t hostlen, int *port_p);
/** "10.0.0.1:4000" / "[::1]:4000" into buf; returns buf. */
const char *tempo__addr_str(const tempo__addr_t *a, char *buf, size_t len);
int tempo__addr_port(const tempo__addr_t *a);
void tempo__addr_set_port(tempo__addr_t *a, int port);
/** True for 0.0.0.0 and ::. */
int tempo__addr_is_any(const tempo__addr_t *a);
/** Make a the wildcard address of its family (every interface), keeping its port. */
void tempo__addr_set_any(tempo__addr_t *a);

/** Listen on addr (port 0 = ephemeral); *bound_p receives the bound address. backlog >= 128. */
tempo_status_t tempo__sock_listen(const tempo__addr_t *addr, int *fd_p, tempo__addr_t *bound_p);
/** Take over fd, an inherited socket that must already listen on a TCP port equal to addr's
 *  (made close-on-exec); TEMPO_ERR_INVALID, fd untouched, when it is not such a socket. */
tempo_status_t tempo__sock_adopt_listener(int fd, const tempo__addr_t *addr);
/** Connect, retrying refused/unreachable until deadline (ns). The socket is blocking. */
tempo_status_t tempo__sock_connect(const tempo__addr_t *addr, uint64_t deadline, int *fd_p);
/** Accept one connection before deadline. */
tempo_status_t tempo__sock_accept(int lfd, uint64_t deadline, int *fd_p);
/** Blocking full send/receive with a deadline; peer_desc names the other side in errors. A closed
 *  connection is TEMPO_ERR_REMOTE. */
tempo_status_t tempo__sock_send_all(int fd, const void *buf, size_t len, uint64_t deadline,
                                    const char *peer_desc);
tempo_status_t tempo__sock_recv_all(int fd, void *buf, size_t len, uint64_t deadline,
                                    const char *peer_desc);
int tempo__sock_set_nonblock(int fd, int on);
void tempo__sock_set_nodelay(int fd);

/* ---- greeters: the accepting side of a challenge and response (the rendezvous, the tcp mesh) */

/** Bytes of random challenge a greeter sends (core/auth.h's TEMPO__AUTH_NONCE). */
#define TEMPO__GREET_NONCE 32

/** A connection that must send a greeting of a fixed size before its own deadline. */
typedef struct {
    int fd;
    uint64_t deadline;
    size_t got;                          /* bytes of the greeting read so far */
    unsigned char *buf;                  /* the greeting */
    unsigned char nonce[TEMPO__GREET_NONCE]; /* the challenge it was sent */
    char who[80];                        /* its address, for the log */
} tempo__greet_conn_t;

/** Accepted connections read side by side, each with its own deadline and a bounded buffer, so
 *  that strangers that stay silent, send slowly or send garbage hold up nothing but themselves:
 *  at most max at once (a new one closes the one accepted longest ago), each given limit_s. */
typedef struct {
    tempo__greet_conn_t *c;
    struct pollfd *pf;
    int n, max;
    size_t want;        /* the greeting's size */
    uint64_t limit_ns;  /* each connection's time to send it */
    const char *what;   /* "rendezvous", "tcp": names the log lines */
    unsigned subsys;    /* their subsystem */
} tempo__greeter_t;

tempo_status_t tempo__greeter_init(tempo__greeter_t *g, int max, size_t want, double limit_s,
                                   const char *what, unsigned subsys);
/** Close every connection still waiting, free the greeter. */
void tempo__greeter_free(tempo__greeter_t *g);
/** Wait, at most until deadline (and 1 s), for: a new connection on listening socket lfd, which
 *  is accepted and sent hdr (hdr_len bytes) followed by TEMPO__GREET_NONCE fresh random bytes (its
 *  nonce); or bytes of a waiting one's greeting. Connections past their own deadline, or closed,
 *  are dropped with a log line. Returns the index of a connection whose whole greeting has
 *  arrived (take it or drop it before calling again), or -1 when none has yet (call again). */
int tempo__greeter_next(tempo__greeter_t *g, int lfd, const void *hdr, size_t hdr_len,
                        uint64_t deadline);
/** The caller takes connection i: its descriptor (blocking again); the greeter forgets it. */
int tempo__greeter_take(tempo__greeter_t *g, int i);
/** Close connection i, logging why (NULL: quietly). */
void tempo__greeter_drop(tempo__greeter_t *g, int i, const char *why);

#endif /* TEMPO_CORE_SOCK_H */
