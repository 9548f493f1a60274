/*
 * sock.c — TCP helpers (see sock.h). Blocking helpers poll() with the remaining time so that every
 * wait honours its deadline; EINTR is retried.
 */
#include "config.h"

#include "core/sock.h"

#include "core/auth.h"
#include "core/log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int tempo__addr_split(const char *text, char *host, size_t hostlen, int *port_p)
{
    const char *port;
    if (!text || !*text) {
        return -1;
    }
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        if (!close || close[1] != ':' || close == text + 1 ||
            (size_t)(close - text - 1) >= hostlen) {
            return -1;
        }
        memcpy(host, text + 1, (size_t)(close - text - 1));
        host[close - text - 1] = '\0';
        port = close + 2;
    } else {
        const char *colon = strrchr(text, ':');
        if (!colon || (size_t)(colon - text) >= hostlen || colon == text) {
            return -1;
        }
        memcpy(host, text, (size_t)(colon - text));
        host[colon - text] = '\0';
        port = colon + 1;
    }
    char *end;
    long p = strtol(port, &end, 10);
    if (*port < '0' || *port > '9' || *end || p < 0 || p > 65535) {
        return -1;
    }
    *port_p = (int)p;
    return 0;
}

tempo_status_t tempo__addr_of_ifname(const char *name, int family, tempo__addr_t *addr_p)
{
    struct ifaddrs *all = NULL;
    if (getifaddrs(&all) != 0) {
        return tempo__err(TEMPO_ERR_SYSTEM, "TEMPO_IFNAME=%s: getifaddrs(): %s", name,
                          strerror(errno));
    }
    const struct ifaddrs *pick = NULL;
    char names[256] = "";
    size_t o = 0;
    for (const struct ifaddrs *a = all; a; a = a->ifa_next) {
        if (!a->ifa_addr ||
            (a->ifa_addr->sa_family != AF_INET && a->ifa_addr->sa_family != AF_INET6)) {
            continue;
        }
        if (!strcmp(a->ifa_name, name) &&
            (!pick || (pick->ifa_addr->sa_family != family && a->ifa_addr->sa_family == family))) {
            pick = a;
        }
        if (o < sizeof(names) - 1 && !strstr(names, a->ifa_name)) {
            o += (size_t)snprintf(names + o, sizeof(names) - o, "%s%s", o ? ", " : "",
                                  a->ifa_name);
        }
    }
    tempo_status_t st = TEMPO_OK;
    if (pick) {
        memset(addr_p, 0, sizeof(*addr_p));
        addr_p->len = pick->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                           : sizeof(struct sockaddr_in6);
        memcpy(&addr_p->ss, pick->ifa_addr, addr_p->len);
        tempo__addr_set_port(addr_p, 0);
    } else {
        st = tempo__err(TEMPO_ERR_INVALID,
                        "TEMPO_IFNAME=%s: no such interface with an IP address here (these have "
                        "one: %s)",
                        name, names[0] ? names : "none");
    }
    freeifaddrs(all);
    return st;
}

tempo_status_t tempo__addr_parse(const char *text, tempo__addr_t *addr_p)
{
    char host[256];
    int portnum;
    if (!text || !*text) {
        return tempo__err(TEMPO_ERR_INVALID, "empty address (expected host:port)");
    }
    if (tempo__addr_split(text, host, sizeof(host), &portnum) != 0) {
        return tempo__err(TEMPO_ERR_INVALID, "bad address '%s' (expected host:port or "
                          "[v6addr]:port, port 0 to 65535)", text);
    }
    char port[8];
    snprintf(port, sizeof(port), "%d", portnum);
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0 || !res) {
        return tempo__err(TEMPO_ERR_INVALID, "cannot resolve '%s': %s", host, gai_strerror(rc));
    }
    memset(addr_p, 0, sizeof(*addr_p));
    memcpy(&addr_p->ss, res->ai_addr, res->ai_addrlen);
    addr_p->len = res->ai_addrlen;
    freeaddrinfo(res);
    return TEMPO_OK;
}

const char *tempo__addr_str(const tempo__addr_t *a, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN] = "?";
    if (a->ss.ss_family == AF_INET) {
        const struct sockaddr_in *s = (const struct sockaddr_in *)&a->ss;
        inet_ntop(AF_INET, &s->sin_addr, host, sizeof(host));
        snprintf(buf, len, "%s:%d", host, ntohs(s->sin_port));
    } else if (a->ss.ss_family == AF_INET6) {
        const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)&a->ss;
        inet_ntop(AF_INET6, &s->sin6_addr, host, sizeof(host));
        snprintf(buf, len, "[%s]:%d", host, ntohs(s->sin6_port));
    } else {
        snprintf(buf, len, "(unknown address family %d)", a->ss.ss_family);
    }
    return buf;
}

int tempo__addr_port(const tempo__addr_t *a)
{
    if (a->ss.ss_family == AF_INET) {
        return ntohs(((const struct sockaddr_in *)&a->ss)->sin_port);
    }
    return ntohs(((const struct sockaddr_in6 *)&a->ss)->sin6_port);
}

void tempo__addr_set_port(tempo__addr_t *a, int port)
{
    if (a->ss.ss_family == AF_INET) {
        ((struct sockaddr_in *)&a->ss)->sin_port = htons((uint16_t)port);
    } else {
        ((struct sockaddr_in6 *)&a->ss)->sin6_port = htons((uint16_t)port);
    }
}

void tempo__addr_set_any(tempo__addr_t *a)
{
    if (a->ss.ss_family == AF_INET) {
        ((struct sockaddr_in *)&a->ss)->sin_addr.s_addr = htonl(INADDR_ANY);
    } else {
        ((struct sockaddr_in6 *)&a->ss)->sin6_addr = in6addr_any;
    }
}

int tempo__addr_is_any(const tempo__addr_t *a)
{
    if (a->ss.ss_family == AF_INET) {
        return ((const struct sockaddr_in *)&a->ss)->sin_addr.s_addr == htonl(INADDR_ANY);
    }
    static const struct in6_addr any6 = IN6ADDR_ANY_INIT;
    return memcmp(&((const struct sockaddr_in6 *)&a->ss)->sin6_addr, &any6, sizeof(any6)) == 0;
}

int tempo__sock_set_nonblock(int fd, int on)
{
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0) {
        return -1;
    }
    return fcntl(fd, F_SETFL, on ? (fl | O_NONBLOCK) : (fl & ~O_NONBLOCK));
}

void tempo__sock_set_nodelay(int fd)
{
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

tempo_status_t tempo__sock_listen(const tempo__addr_t *addr, int *fd_p, tempo__addr_t *bound_p)
{
    char abuf[128];
    int fd = socket(addr->ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return tempo__err(TEMPO_ERR_SYSTEM, "socket(): %s", strerror(errno));
    }
    int one = 1;
    (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (const struct sockaddr *)&addr->ss, addr->len) != 0) {
        int e = errno;
        close(fd);
        return tempo__err(e == EADDRINUSE ? TEMPO_ERR_BOOTSTRAP : TEMPO_ERR_SYSTEM,
                          "cannot listen on %s: %s", tempo__addr_str(addr, abuf, sizeof(abuf)),
                          strerror(e));
    }
    if (listen(fd, 1024) != 0) {
        int e = errno;
        close(fd);
        return tempo__err(TEMPO_ERR_SYSTEM, "listen(): %s", strerror(e));
    }
    if (bound_p) {
        bound_p->len = sizeof(bound_p->ss);
        if (getsockname(fd, (struct sockaddr *)&bound_p->ss, &bound_p->len) != 0) {
            int e = errno;
            close(fd);
            return tempo__err(TEMPO_ERR_SYSTEM, "getsockname(): %s", strerror(e));
        }
    }
    *fd_p = fd;
    return TEMPO_OK;
}

tempo_status_t tempo__sock_adopt_listener(int fd, const tempo__addr_t *addr)
{
    int listening = 0, type = 0;
    socklen_t n = sizeof(listening), tn = sizeof(type);
    tempo__addr_t bound;
    bound.len = sizeof(bound.ss);
    if (fd < 0 || getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &n) != 0 ||
        getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tn) != 0 ||
        getsockname(fd, (struct sockaddr *)&bound.ss, &bound.len) != 0) {
        return tempo__err(TEMPO_ERR_INVALID, "descriptor %d is not a socket: %s", fd,
                          strerror(errno));
    }
    if (!listening || type != SOCK_STREAM || bound.ss.ss_family != addr->ss.ss_family ||
        tempo__addr_port(&bound) != tempo__addr_port(addr)) {
        return tempo__err(TEMPO_ERR_INVALID,
                          "descriptor %d is not a TCP socket listening on port %d", fd,
                          tempo__addr_port(addr));
    }
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) {
        return tempo__err(TEMPO_ERR_SYSTEM, "fcntl(%d): %s", fd, strerror(errno));
    }
    return TEMPO_OK;
}

static int remaining_ms(uint64_t deadline)
{
    uint64_t now = tempo__now_ns();
    if (now >= deadline) {
        return 0;
    }
    uint64_t ms = (deadline - now + 999999) / 1000000;
    return ms > 1000000 ? 1000000 : (int)ms;
}

tempo_status_t tempo__sock_connect(const tempo__addr_t *addr, uint64_t deadline, int *fd_p)
{
    char abuf[128];
    int delay_ms = 5;
    int last_err = 0;
    for (;;) {
        int fd = socket(addr->ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            return tempo__err(TEMPO_ERR_SYSTEM, "socket(): %s", strerror(errno));
        }
        int rc = connect(fd, (const struct sockaddr *)&addr->ss, addr->len);
        if (rc != 0 && errno == EINPROGRESS) {
            struct pollfd p = {.fd = fd, .events = POLLOUT};
            int prc;
            do {
                prc = poll(&p, 1, remaining_ms(deadline));
            } while (prc < 0 && errno == EINTR);
            if (prc == 1) {
                int err = 0;
                socklen_t el = sizeof(err);
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
                rc = err ? -1 : 0;
                errno = err;
            } else {
                rc = -1;
                errno = ETIMEDOUT;
            }
        }
        if (rc == 0) {
            tempo__sock_set_nonblock(fd, 0);
            tempo__sock_set_nodelay(fd);
            *fd_p = fd;
            return TEMPO_OK;
        }
        last_err = errno;
        close(fd);
        if (last_err != ECONNREFUSED && last_err != ETIMEDOUT && last_err != ENETUNREACH &&
            last_err != EHOSTUNREACH && last_err != ECONNRESET && last_err != EAGAIN) {
            break;
        }
        if (tempo__now_ns() + (uint64_t)delay_ms * 1000000 >= deadline) {
            break;
        }
        struct timespec ts = {0, (long)delay_ms * 1000000};
        nanosleep(&ts, NULL);
        delay_ms = TEMPO_MIN(delay_ms * 2, 100);
    }
    return tempo__err(
        last_err == ETIMEDOUT || last_err == ECONNREFUSED ? TEMPO_ERR_TIMEOUT : TEMPO_ERR_SYSTEM,
        "cannot connect to %s: %s", tempo__addr_str(addr, abuf, sizeof(abuf)), strerror(last_err));
}

tempo_status_t tempo__sock_accept(int lfd, uint64_t deadline, int *fd_p)
{
    for (;;) {
        struct pollfd p = {.fd = lfd, .events = POLLIN};
        int ms = remaining_ms(deadline);
        int rc = poll(&p, 1, ms);
        if (rc < 0 && errno == EINTR) {
            continue;
        }
        if (rc == 0) {
            return tempo__err_quiet(TEMPO_ERR_TIMEOUT, "timed out waiting for a connection");
        }
        int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED) {
                continue;
            }
            return tempo__err(TEMPO_ERR_SYSTEM, "accept(): %s", strerror(errno));
        }
        tempo__sock_set_nodelay(fd);
        *fd_p = fd;
        return TEMPO_OK;
    }
}

static tempo_status_t sock_io(int fd, void *buf, size_t len, uint64_t deadline, int is_send,
                              const char *peer)
{
    char *p = buf;
    while (len > 0) {
        struct pollfd pf = {.fd = fd, .events = is_send ? POLLOUT : POLLIN};
        int ms = remaining_ms(deadline);
        int rc = poll(&pf, 1, ms);
        if (rc < 0 && errno == EINTR) {
            continue;
        }
        if (rc == 0) {
            return tempo__err_quiet(TEMPO_ERR_TIMEOUT, "timed out %s %s",
                                    is_send ? "sending to" : "receiving from", peer);
        }
        ssize_t n = is_send ? send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT)
                            : recv(fd, p, len, MSG_DONTWAIT);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n == 0 && !is_send) {
            return tempo__err_quiet(TEMPO_ERR_REMOTE, "%s closed the connection", peer);
        }
        if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) {
            continue;
        }
        return tempo__err_quiet(TEMPO_ERR_REMOTE, "connection to %s failed: %s", peer,
                                strerror(errno));
    }
    return TEMPO_OK;
}

tempo_status_t tempo__sock_send_all(int fd, const void *buf, size_t len, uint64_t deadline,
                                    const char *peer_desc)
{
    return sock_io(fd, (void *)buf, len, deadline, 1, peer_desc);
}

tempo_status_t tempo__sock_recv_all(int fd, void *buf, size_t len, uint64_t deadline,
                                    const char *peer_desc)
{
    return sock_io(fd, buf, len, deadline, 0, peer_desc);
}

/* ---------------------------------------------------------------------------------------------- */
/* Greeters                                                                                       */
/* ---------------------------------------------------------------------------------------------- */

tempo_status_t tempo__greeter_init(tempo__greeter_t *g, int max, size_t want, double limit_s,
                                   const char *what, unsigned subsys)
{
    memset(g, 0, sizeof(*g));
    g->c = tempo__calloc((size_t)max, sizeof(*g->c), "greeter connections");
    g->pf = tempo__calloc((size_t)max + 1, sizeof(*g->pf), "greeter poll set");
    if (!g->c || !g->pf) {
        tempo__free(g->c);
        tempo__free(g->pf);
        return TEMPO_ERR_NOMEM;
    }
    g->max = max;
    g->want = want;
    g->limit_ns = (uint64_t)(limit_s * 1e9);
    g->what = what;
    g->subsys = subsys;
    return TEMPO_OK;
}

void tempo__greeter_free(tempo__greeter_t *g)
{
    while (g->n > 0) {
        tempo__greeter_drop(g, g->n - 1, NULL);
    }
    tempo__free(g->c);
    tempo__free(g->pf);
    g->c = NULL;
    g->pf = NULL;
}

static void greet_forget(tempo__greeter_t *g, int i)
{
    tempo__free(g->c[i].buf);
    g->c[i] = g->c[--g->n];
}

void tempo__greeter_drop(tempo__greeter_t *g, int i, const char *why)
{
    if (why) {
        TEMPO_WARN(g->subsys, "%s: closed the connection from %s: %s", g->what, g->c[i].who, why);
    }
    close(g->c[i].fd);
    greet_forget(g, i);
}

int tempo__greeter_take(tempo__greeter_t *g, int i)
{
    int fd = g->c[i].fd;
    tempo__sock_set_nonblock(fd, 0);
    greet_forget(g, i);
    return fd;
}

static void greet_accept(tempo__greeter_t *g, int lfd, const void *hdr, size_t hdr_len)
{
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
        return;
    }
    if (g->n == g->max) {
        int oldest = 0;
        for (int i = 1; i < g->n; i++) {
            oldest = g->c[i].deadline < g->c[oldest].deadline ? i : oldest;
        }
        tempo__greeter_drop(g, oldest, "too many connections waiting at once; this one waited "
                                       "longest");
    }
    tempo__greet_conn_t *c = &g->c[g->n];
    memset(c, 0, sizeof(*c));
    c->fd = fd;
    c->deadline = tempo__now_ns() + g->limit_ns;
    tempo__addr_t a;
    a.len = sizeof(a.ss);
    if (getpeername(fd, (struct sockaddr *)&a.ss, &a.len) == 0) {
        tempo__addr_str(&a, c->who, sizeof(c->who));
    } else {
        snprintf(c->who, sizeof(c->who), "an unknown address");
    }
    tempo__sock_set_nodelay(fd);
    unsigned char msg[256];
    /* (a fresh connection's send buffer takes the challenge at once) */
    if (hdr_len + TEMPO__GREET_NONCE > sizeof(msg) || !(c->buf = tempo__malloc(g->want, "greeting")) ||
        tempo__auth_random(c->nonce, sizeof(c->nonce)) != 0) {
        tempo__free(c->buf);
        close(fd);
        return;
    }
    memcpy(msg, hdr, hdr_len);
    memcpy(msg + hdr_len, c->nonce, TEMPO__GREET_NONCE);
    if (send(fd, msg, hdr_len + TEMPO__GREET_NONCE, MSG_DONTWAIT | MSG_NOSIGNAL) !=
        (ssize_t)(hdr_len + TEMPO__GREET_NONCE)) {
        tempo__free(c->buf);
        close(fd);
        return;
    }
    g->n++;
}

int tempo__greeter_next(tempo__greeter_t *g, int lfd, const void *hdr, size_t hdr_len,
                        uint64_t deadline)
{
    uint64_t now = tempo__now_ns(), next = deadline;
    for (int i = 0; i < g->n;) { /* past their own deadline: closed */
        if (now >= g->c[i].deadline) {
            tempo__greeter_drop(g, i, "no whole greeting in time (a stranger, or not tempo)");
        } else {
            next = TEMPO_MIN(next, g->c[i].deadline);
            i++;
        }
    }
    if (now >= deadline) {
        return -1;
    }
    g->pf[0] = (struct pollfd){.fd = lfd, .events = POLLIN};
    for (int i = 0; i < g->n; i++) {
        g->pf[i + 1] = (struct pollfd){.fd = g->c[i].fd, .events = POLLIN};
    }
    int npf = g->n + 1;
    if (poll(g->pf, (nfds_t)npf, (int)TEMPO_MIN((next - now) / 1000000ull + 1, 1000ull)) <= 0) {
        return -1;
    }
    /* back to front: a dropped connection's slot takes the last one, already seen */
    for (int i = npf - 2; i >= 0; i--) {
        if (!g->pf[i + 1].revents) {
            continue;
        }
        tempo__greet_conn_t *c = &g->c[i];
        ssize_t k = recv(c->fd, c->buf + c->got, g->want - c->got, MSG_DONTWAIT);
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
            continue;
        }
        if (k <= 0) {
            tempo__greeter_drop(g, i, "it closed before sending a whole greeting");
            continue;
        }
        c->got += (size_t)k;
        if (c->got == g->want) {
            return i;
        }
    }
    if (g->pf[0].revents & POLLIN) {
        greet_accept(g, lfd, hdr, hdr_len);
    }
    return -1;
}
