/*
 * ucx_mitm.c — a man in the middle of one rank's UCX streams, for tests/mr/transports.sh's
 * "proof" case (libucx_mitm.so, LD_PRELOAD on that rank alone): it alters the first bytes this
 * process sends on each UCX endpoint, which are where tempo's ucx transport proves the job key
 * (transport/ucx.c, "Who is at the other end"). The data of a connection that someone else took
 * over would look the same to the peer.
 *
 *   MITM_UCX=flip      the first send on each endpoint goes out with its last byte flipped
 *   MITM_UCX=drop      the first send on each endpoint is not sent at all (reported done)
 *   MITM_UCX=stranger  a stranger in this process: when the rank makes its first endpoint, the
 *                      library opens a UCX worker of its own (another context: to the peer, a
 *                      process that is no rank) with an endpoint to the same address, sends
 *                      stream bytes on it and a forged credit naming this rank (tempo's AM
 *                      0x7e1: {rank, 0, consumed}), and progresses it whenever the rank
 *                      progresses its worker
 *
 * Every other call goes to UCX unchanged (dlsym RTLD_NEXT); this library links no UCX itself (its
 * UCX calls are looked up at run time), so the shells and wrappers LD_PRELOAD also reaches are
 * unaffected.
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
    const char *mode = getenv("MITM_UCX");
    if (!mode || !strcmp(mode, "stranger") || count == 0 || !first_on(ep)) {
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

/* ---- the stranger ---- */

typedef ucs_status_t (*ep_create_fn_t)(ucp_worker_h, const ucp_ep_params_t *, ucp_ep_h *);
typedef unsigned (*progress_fn_t)(ucp_worker_h);

static ucp_context_h s_ctx;
static ucp_worker_h s_worker;
static ucp_ep_h s_ep;
static struct {
    uint32_t rank, zero;
    uint64_t consumed;
} s_credit;
static const char s_bytes[] = "a stranger's bytes, which no rank of the job wrote";

#define SYM(name) dlsym(RTLD_DEFAULT, name)

static void stranger_start(const ucp_address_t *addr)
{
    ucs_status_t (*config_read)(const char *, const char *, ucp_config_t **) =
        (ucs_status_t(*)(const char *, const char *, ucp_config_t **))SYM("ucp_config_read");
    void (*config_release)(ucp_config_t *) = (void (*)(ucp_config_t *))SYM("ucp_config_release");
    ucs_status_t (*init)(unsigned, unsigned, const ucp_params_t *, const ucp_config_t *,
                         ucp_context_h *) =
        (ucs_status_t(*)(unsigned, unsigned, const ucp_params_t *, const ucp_config_t *,
                         ucp_context_h *))SYM("ucp_init_version");
    ucs_status_t (*worker_create)(ucp_context_h, const ucp_worker_params_t *, ucp_worker_h *) =
        (ucs_status_t(*)(ucp_context_h, const ucp_worker_params_t *, ucp_worker_h *))SYM(
            "ucp_worker_create");
    ep_create_fn_t ep_create = (ep_create_fn_t)dlsym(RTLD_NEXT, "ucp_ep_create");
    ucs_status_ptr_t (*am_send)(ucp_ep_h, unsigned, const void *, size_t, const void *, size_t,
                                const ucp_request_param_t *) =
        (ucs_status_ptr_t(*)(ucp_ep_h, unsigned, const void *, size_t, const void *, size_t,
                             const ucp_request_param_t *))SYM("ucp_am_send_nbx");
    ucp_config_t *cfg;
    if (config_read(NULL, NULL, &cfg) != UCS_OK) {
        return;
    }
    ucp_params_t p = {.field_mask = UCP_PARAM_FIELD_FEATURES,
                      .features = UCP_FEATURE_STREAM | UCP_FEATURE_AM};
    ucs_status_t st = init(UCP_API_MAJOR, UCP_API_MINOR, &p, cfg, &s_ctx);
    config_release(cfg);
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    if (st != UCS_OK || worker_create(s_ctx, &wp, &s_worker) != UCS_OK) {
        return;
    }
    ucp_ep_params_t ep = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS, .address = addr};
    if (ep_create(s_worker, &ep, &s_ep) != UCS_OK) {
        return;
    }
    ucp_request_param_t none = {.op_attr_mask = 0};
    ucp_stream_send_nbx(s_ep, s_bytes, sizeof(s_bytes), &none); /* (first on s_ep: see mode) */
    const char *r = getenv("TEMPO_RANK");
    s_credit.rank = r ? (uint32_t)atoi(r) : 0;
    s_credit.consumed = 1;
    ucp_request_param_t f = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                             .flags = UCP_AM_SEND_FLAG_EAGER | UCP_AM_SEND_FLAG_REPLY};
    am_send(s_ep, 0x7e1, &s_credit, sizeof(s_credit), NULL, 0, &f);
}

ucs_status_t ucp_ep_create(ucp_worker_h worker, const ucp_ep_params_t *params, ucp_ep_h *ep_p)
{
    ep_create_fn_t real = (ep_create_fn_t)dlsym(RTLD_NEXT, "ucp_ep_create");
    ucs_status_t st = real(worker, params, ep_p);
    const char *mode = getenv("MITM_UCX");
    if (st == UCS_OK && mode && !strcmp(mode, "stranger") && !s_ctx && worker != s_worker &&
        (params->field_mask & UCP_EP_PARAM_FIELD_REMOTE_ADDRESS)) {
        stranger_start(params->address);
    }
    return st;
}

unsigned ucp_worker_progress(ucp_worker_h worker)
{
    static progress_fn_t real;
    if (!real) {
        real = (progress_fn_t)dlsym(RTLD_NEXT, "ucp_worker_progress");
    }
    if (s_worker && worker != s_worker) {
        real(s_worker);
    }
    return real(worker);
}
