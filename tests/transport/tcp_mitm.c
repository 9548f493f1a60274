/*
 * tcp_mitm.c — a man in the middle of one rank's tcp connections, for tests/mr/sealed.sh
 * (libtcp_mitm.so, LD_PRELOAD on that rank alone): it sees and may change every byte the rank
 * sends (send, sendmsg), as someone on the network path could.
 *
 *   MITM_TCP=tap:PATH  append every byte sent to PATH.<pid> (what a listener on the wire reads)
 *   MITM_TCP=flip      flip byte 4096 of a send of 64 KiB or more (payload, not a frame header),
 *                      from the MITM_TCP_N-th (8) such send on until one goes out with it, once
 *
 * Everything goes on to libc unchanged otherwise (dlsym RTLD_NEXT).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define BIG (64 * 1024)
#define FLIP_AT 8

typedef ssize_t (*send_fn_t)(int, const void *, size_t, int);
typedef ssize_t (*sendmsg_fn_t)(int, const struct msghdr *, int);

#define AT 4096

static int tap_fd = -2; /* -2: not opened yet, -1: not tapping */
static int big_sends;
static int flipped; /* a send went out with the flipped byte */

static const char *mode(void)
{
    const char *m = getenv("MITM_TCP");
    return m ? m : "";
}

static void tap(const void *p, size_t n)
{
    if (tap_fd == -2) {
        tap_fd = -1;
        if (!strncmp(mode(), "tap:", 4)) {
            char path[512];
            snprintf(path, sizeof(path), "%s.%d", mode() + 4, (int)getpid());
            tap_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        }
    }
    if (tap_fd >= 0 && n > 0) {
        (void)!write(tap_fd, p, n);
    }
}

/* Whether this send is to go out changed (and count it). */
static int flip_now(size_t n)
{
    const char *at = getenv("MITM_TCP_N");
    return !strcmp(mode(), "flip") && !flipped && n >= BIG &&
           ++big_sends >= (at ? atoi(at) : FLIP_AT);
}

ssize_t send(int fd, const void *buf, size_t len, int flags)
{
    static send_fn_t real;
    if (!real) {
        real = (send_fn_t)dlsym(RTLD_NEXT, "send");
    }
    ssize_t r;
    if (flip_now(len)) {
        char *copy = malloc(len);
        if (!copy) {
            return real(fd, buf, len, flags);
        }
        memcpy(copy, buf, len);
        copy[AT] ^= 0x01;
        r = real(fd, copy, len, flags);
        flipped = r > AT;
        free(copy);
    } else {
        r = real(fd, buf, len, flags);
    }
    if (r > 0) {
        tap(buf, (size_t)r);
    }
    return r;
}

ssize_t sendmsg(int fd, const struct msghdr *m, int flags)
{
    static sendmsg_fn_t real;
    if (!real) {
        real = (sendmsg_fn_t)dlsym(RTLD_NEXT, "sendmsg");
    }
    size_t total = 0;
    for (size_t i = 0; i < m->msg_iovlen; i++) {
        total += m->msg_iov[i].iov_len;
    }
    ssize_t r;
    if (flip_now(total)) {
        char *copy = malloc(total);
        if (!copy) {
            return real(fd, m, flags);
        }
        size_t o = 0;
        for (size_t i = 0; i < m->msg_iovlen; i++) {
            memcpy(copy + o, m->msg_iov[i].iov_base, m->msg_iov[i].iov_len);
            o += m->msg_iov[i].iov_len;
        }
        copy[AT] ^= 0x01;
        struct iovec v = {copy, total};
        struct msghdr c = *m;
        c.msg_iov = &v;
        c.msg_iovlen = 1;
        r = real(fd, &c, flags);
        flipped = r > AT;
        free(copy);
    } else {
        r = real(fd, m, flags);
    }
    for (size_t i = 0, left = r > 0 ? (size_t)r : 0; i < m->msg_iovlen && left > 0; i++) {
        size_t k = m->msg_iov[i].iov_len < left ? m->msg_iov[i].iov_len : left;
        tap(m->msg_iov[i].iov_base, k);
        left -= k;
    }
    return r;
}
