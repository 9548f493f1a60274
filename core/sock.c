/*
 * sock.c — TCP helpers (see sock.h). Blocking helpers poll() with the remaining time so that every
 * wait honours its deadline; EINTR is retried.
 */
#include "config.h"

#include "core/sock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
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
