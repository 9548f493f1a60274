/*
 * ctrl.c — setup messages between ranks over the control backend (tcp), outside any operation:
 * the service through which the other backends exchange their connection data during open().
 */
#include "config.h"

#include "transport/tl_int.h"

typedef struct {
    tempo__xfer_t *x;
    int n;
} ctrl_wait_t;

static int ctrl_done(void *arg)
{
    ctrl_wait_t *c = arg;
    for (int i = 0; i < c->n; i++) {
        if (!c->x[i].complete) {
            return 0;
        }
    }
    return 1;
}

static void ctrl_post(tempo__tl_t *tl, tempo__xfer_t *x, const tempo__ctrl_msg_t *m, int is_send)
{
    x->peer = m->peer;
    x->is_send = is_send;
    x->tag = tempo__tag_p2p(TEMPO_CTX_MAX, m->code);
    x->buf = m->buf;
    x->len = m->len;
    void *ep = tl->ctl->ep(tl->ctl_inst, m->peer);
    tempo_status_t st = TEMPO_ERR_INTERNAL;
    if (ep) {
        st = is_send ? tl->ctl->ops->isend(ep, x) : tl->ctl->ops->irecv(ep, x);
    }
    if (st != TEMPO_OK && !x->complete) {
        x->complete = 1;
        x->status = st;
    }
}

tempo_status_t tempo__ctrl_exchange(tempo__world_t *w, tempo__ctrl_msg_t *sends, int nsend,
                                    tempo__ctrl_msg_t *recvs, int nrecv, uint64_t deadline,
                                    const char *what)
{
    tempo__tl_t *tl = w->tl;
    int n = nsend + nrecv;
    tempo__xfer_t *x = tempo__calloc((size_t)(n ? n : 1), sizeof(*x), "setup messages");
    if (!x) {
        return TEMPO_ERR_NOMEM;
    }
    for (int i = 0; i < nrecv; i++) {
        ctrl_post(tl, &x[nsend + i], &recvs[i], 0);
    }
    for (int i = 0; i < nsend; i++) {
        ctrl_post(tl, &x[i], &sends[i], 1);
    }
    ctrl_wait_t c = {x, n};
    tempo_status_t st = tempo__engine_wait_until(w, ctrl_done, &c, deadline, what);
    for (int i = 0; i < n && st == TEMPO_OK; i++) {
        if (x[i].status != TEMPO_OK) {
            char buf[TEMPO_ERRMSG_LEN];
            st = tempo__err(x[i].status, "%s: %s", what,
                            tempo__xfer_error(w, &x[i], buf, sizeof(buf)));
        }
    }
    if (st != TEMPO_OK) {
        for (int i = 0; i < n; i++) {
            void *ep = x[i].complete ? NULL : tl->ctl->ep(tl->ctl_inst, x[i].peer);
            if (ep) {
                tl->ctl->ops->cancel(ep, &x[i]);
            }
        }
    }
    tempo__free(x);
    return st;
}

tempo_status_t tempo__ctrl_swap(tempo__world_t *w, const unsigned char *want, uint32_t code,
                                const void *mine, size_t stride, void *theirs, size_t len,
                                uint64_t deadline, const char *what)
{
    int n = 0;
    for (int p = 0; p < w->size; p++) {
        n += want[p] != 0;
    }
    if (n == 0) {
        return TEMPO_OK;
    }
    tempo__ctrl_msg_t *m = tempo__calloc((size_t)n * 2, sizeof(*m), what);
    if (!m) {
        return TEMPO_ERR_NOMEM;
    }
    for (int p = 0, k = 0; p < w->size; p++) {
        if (want[p]) {
            m[k] = (tempo__ctrl_msg_t){p, code, (char *)mine + (size_t)p * stride, len};
            m[n + k] = (tempo__ctrl_msg_t){p, code, (char *)theirs + (size_t)p * len, len};
            k++;
        }
    }
    tempo_status_t st = tempo__ctrl_exchange(w, m, n, m + n, n, deadline, what);
    tempo__free(m);
    return st;
}
