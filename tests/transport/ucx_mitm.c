/*
 * ucx_mitm.c — a man in the middle of one rank's UCX streams, for tests/mr/transports.sh's
 * "proof" case (libucx_mitm.so, LD_PRELOAD on that rank alone): it alters the first bytes this
 * process sends on each UCX endpoint, which are where tempo's ucx transport proves the job key
 * (transport/ucx.c, "Who is at the other end"). The data of a connection that someone else took
 * over would look the same to the peer.
 *
 *   UCX_MITM=flip  the first send on each endpoint goes out with its last byte flipped
 *   UCX_MITM=drop  the first send on each endpoint is not sent at all (reported done)
 *
 * Every other call goes to UCX unchanged (dlsym RTLD_NEXT); this library links no UCX itself, so
 * the shells and wrappers LD_PRELOAD also reaches are unaffected.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

#include <ucp/api/ucp.h>

#define EPS_MAX 256

typedef ucs_status_ptr_t (*send_fn_t)(ucp_ep_h, const void *, size_t, const ucp_request_param_t *);

static ucp_ep_h seen[EPS_MAX];
static char *copies[EPS_MAX]; /* the altered first sends, kept until exit */
static int nseen;

/* Whether this is the first send on ep (and remember it). */
static int first_on(ucp_ep_h ep)
{
    for (int i = 0; i < nseen; i++) {
        if (seen[i] == ep) {
            return 0;
        }
    }
    if (nseen < EPS_MAX) {
        seen[nseen++] = ep;
    }
    return 1;
}

ucs_status_ptr_t ucp_stream_send_nbx(ucp_ep_h ep, const void *buffer, size_t count,
                                     const ucp_request_param_t *param)
{
    static send_fn_t real;
    if (!real) {
        real = (send_fn_t)dlsym(RTLD_NEXT, "ucp_stream_send_nbx");
    }
    const char *mode = getenv("UCX_MITM");
    if (!mode || count == 0 || !first_on(ep)) {
        return real(ep, buffer, count, param);
    }
    if (!strcmp(mode, "drop")) {
        return NULL; /* "completed in place": the caller's callback is not called for NULL */
    }
    /* flip: the caller's buffer stays as it is (its ring); the altered copy lives until exit. */
    char *copy = malloc(count);
    if (!copy) {
        return real(ep, buffer, count, param);
    }
    copies[nseen - 1] = copy;
    memcpy(copy, buffer, count);
    copy[count - 1] ^= 0x5a;
    return real(ep, copy, count, param);
}
