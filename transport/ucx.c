/*
 * ucx.c — the UCX transport: one UCP worker per job, one UCP endpoint per peer it serves, and on
 * each endpoint an ordered byte pipe under the stream layer (stream.h), which frames, matches,
 * validates and applies back-pressure exactly as it does over tcp sockets and shm rings.
 *
 * Why the UCP stream API: the stream layer wants an ordered, reliable byte pipe, and UCP streams
 * are one (bytes of an endpoint arrive in order, whatever lanes UCX picks). Tagged messages would
 * need receives posted ahead of data whose size only the stream header tells, and active messages
 * arrive in no promised order across lanes, so either would need resequencing and buffering that
 * the stream API already does. What it lacks is flow control: UCX accepts every send and buffers
 * whatever arrives, unread, without bound, so the stream layer's back-pressure
 * (TEMPO_UNEXPECTED_BYTES: stop reading a peer, its sends stall) would not reach the sender.
 *
 * Window (TEMPO_UCX_WINDOW bytes per direction and peer). The pipe's writev copies what it
 * accepts into the endpoint's send ring (the stream layer completes a send as soon as the pipe
 * took its bytes, so the pipe must own them) and hands it to ucp_stream_send_nbx; it accepts no
 * more than the window minus the bytes the peer has not yet read (credits), nor more than the
 * ring has room for (bytes UCX has not completed locally). The reader returns credits, the total
 * bytes it consumed, in a small active message (UCP_FEATURE_AM) once a quarter of the window has
 * been read since the last one; credits carry totals, so their order does not matter. Unread
 * bytes held by UCX for a peer are thus bounded by the window, as a socket's buffers bound them.
 *
 * Zero copy (stream.h's expose/fetch, payloads of TEMPO_UCX_ZCOPY_BYTES and more, to peers whose
 * endpoint has a one-sided lane: ep_has_rma): the sender registers the buffer (ucp_mem_map
 * through the registration table below), packs its rkey and sends the stream a descriptor
 * {address, length, rkey}; the receiver unpacks the rkey and reads the payload with ucp_get_nbx
 * straight into the matched receive (over cma: one copy instead of three), then the stream says
 * FIN and the sender releases it.
 *
 * Registration table: one entry per registered address range, shared by every exposure inside it
 * (the same send buffer to several peers, a broadcast's or all-gather's block) and counted;
 * an entry is dropped (ucp_mem_unmap) when its last exposure is released. Invalidation rule: no
 * entry outlives the exposures that use it, and a buffer cannot be freed while one is in flight
 * (its send completes only at the peer's FIN, or when the stream ends, after kill()), so a buffer
 * freed and reallocated at the same address is always registered afresh: never a stale
 * registration, hence never a read of pages the address no longer means. Keeping entries past
 * their last use would need to catch the user's free()/munmap() (libucm's hooks); UCX's own
 * registration cache (UCX_RCACHE_*), which has those hooks, already makes registering the same
 * buffer again cheap, so this table stays simple: it removes duplicate registrations of buffers
 * in flight and bounds them (REG_MAX; beyond, the payload goes through the pipe).
 *
 * Setup (open): each wanted peer is told, through the control backend, whether UCX is usable here
 * and the size of this worker's address; where both ends are usable the addresses are exchanged,
 * each side creates its endpoint (UCX matches the two ends into one connection), and the results
 * are exchanged once more, so that a peer that one end cannot reach (UCX_TLS=sm between hosts)
 * falls back to the next transport at both ends. Without UCX at run time (no transport to use,
 * a bad UCX_* variable) the exchange still happens and says "unusable".
 *
 * Idle waits: the worker's event descriptor (ucp_worker_get_efd) is in the control backend's poll
 * set (wait_fd); doze(1) arms it (ucp_worker_arm), so a sleeping rank wakes when UCX has work and
 * otherwise sleeps: no busy loop. A busy arm (events pending) makes the engine poll again first.
 *
 * Who is at the other end: the worker addresses travel over the control mesh, whose connections
 * proved the job key (transport/tcp.c), but a UCX worker accepts a connection from anyone who has
 * its address, and the address names ports and segments a stranger could find. So, with a key,
 * each end's first bytes on a new endpoint are a proof: an HMAC under the key over the reader's
 * challenge (32 random bytes in its hello, fresh per setup), the writer's rank and the reader's
 * rank. Each end reads the other's within PROOF_S and tells it, over the mesh, whether it held;
 * a pair where either proof failed closes its endpoints, says so at both ends (WARN, naming the
 * peer), and falls back to the next transport. Credits (active messages, which arrive from any
 * endpoint of the worker) are sent with UCP_AM_SEND_FLAG_REPLY and count only when they came on
 * the endpoint of the rank they name (a stranger's is ignored, and said once): a stranger cannot
 * open another's window. A stranger's stream bytes never reach a rank's stream: UCX gives them to
 * the endpoint it made for the stranger, which tempo never reads.
 *
 * Failures: an endpoint error (UCP_ERR_HANDLING_MODE_PEER: a reset connection, a peer that died,
 * a keepalive that expired) ends the pipe once whatever UCX still holds was read. A goodbye read
 * before makes that a clean end. Without one, the control mesh decides for ERR_GRACE_S: a peer
 * that left said goodbye on its tcp connection too (a connection closed with bytes unread is
 * reset, and a reset can discard the goodbye that was on its way, so the ucx one can be lost
 * although the peer left in order), and then the pipe reads as that goodbye; a peer that died
 * closes its tcp connection without one, and the job fails naming it, as over tcp. If neither
 * happens within the grace, the stream fails the job naming the peer and UCX's reason. Where
 * only UCP_ERR_HANDLING_MODE_NONE reaches a peer (UCX 1.13's shared-memory transports), UCX says
 * nothing and the control mesh alone detects a death.
 *
 * Closing: goodbyes through the streams, flushed within the deadline; then every endpoint closes
 * (flush mode when graceful, forced otherwise) within the deadline, the streams end (releasing
 * their exposures while the context lives) and the worker is destroyed; send-ring memory and
 * fetch records are freed only after that, since UCX may still complete requests on them.
 *
 * Threads: everything runs under the world lock (the engine calls progress, doze and close with it
 * held), so the worker is single-threaded (UCS_THREAD_MODE_SINGLE).
 */
#include "config.h"

#include "transport/tl_int.h"
#include "core/cfg.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <ucp/api/ucp.h>
#include <ucs/debug/log_def.h>

#include "core/auth.h"

#define CODE_HELLO 0x4001u /* {magic, usable, address length} */
#define CODE_ADDR 0x4002u  /* the worker address */
#define CODE_EP 0x4003u    /* whether this end created its endpoint (+1: second round) */
#define CODE_PROOF 0x4005u /* whether the peer's proof held (with a job key) */
#define HELLO_MAGIC 0x54555858u /* "TUXX" */
#define PROOF_MAGIC 0x54555850u /* "TUXP" */
#define PROOF_S 5.0 /* how long an endpoint may take to prove the key (said in prove()) */
#define AM_CREDIT 0x7e1u
#define SENDS_MAX 256 /* send requests in flight per endpoint */
#define ADDR_MAX (64 * 1024)
#define REG_MAX 64 /* registered ranges in use at once */
#define ERR_GRACE_S 2.0 /* how long a failed endpoint waits for the control mesh's verdict */
/* How long, and over how many reads, a failed endpoint must give nothing before the stand-in
 * goodbye: UCX may still hold the peer's last messages (on another connection of the pair). */
#define BYE_QUIET_NS 100000000ull
#define BYE_QUIET_READS 16u

typedef struct {
    uint32_t magic;
    uint32_t usable;
    uint64_t addr_len;
    uint8_t nonce[TEMPO__AUTH_NONCE]; /* this rank's challenge to the endpoints' proofs */
} hello_t;

/* The first bytes each end writes on a new endpoint, with a job key (see "Who is at the other end"
 * above). */
typedef struct {
    uint32_t magic;
    int32_t rank;                 /* the writer */
    uint8_t mac[TEMPO__AUTH_MAC]; /* over the reader's challenge, the writer's rank, the reader's */
} proof_t;

/* A credit: the total bytes `rank` has read from the receiving rank's stream. */
typedef struct {
    uint32_t rank;
    uint32_t zero;
    uint64_t consumed;
} credit_t;

/* A send in flight: the ring bytes up to `end` are free once it and every earlier one are done. */
typedef struct {
    uint64_t end;
    int done;
} send_rec_t;

/* A registered range (see "Registration table" above). */
typedef struct ucx_reg {
    uintptr_t addr;
    size_t len;
    ucp_mem_h memh;
    void *rkey;      /* packed (ucp_rkey_pack) */
    size_t rkey_len;
    int refs;        /* exposures using it; 0: the slot is free */
} ucx_reg_t;

/* A descriptor on the wire (expose -> fetch): then rkey_len bytes of packed rkey. */
typedef struct {
    uint64_t addr;
    uint64_t len;
    uint32_t rkey_len;
    uint32_t zero;
} zdesc_t;

/* A fetch in flight (ucp_get_nbx); freed by its completion callback, or after the worker when
 * the worker goes first. */
typedef struct ucx_fetch {
    tempo__list_t link; /* ep->fetches while its op is the stream's; tl->orphans once killed */
    struct ucx_ep *ep;
    void *op;           /* the stream's operation (tempo__stream_fetched), NULL once killed */
    ucp_rkey_h rkey;
    int done;
    ucs_status_t status;
} ucx_fetch_t;

typedef struct ucx_ep {
    tempo__stream_t stream;
    struct ucx_tl *tl;
    int peer;
    ucp_ep_h ep;
    ucs_status_t err; /* the endpoint failed (error callback); UCS_OK while healthy */
    uint64_t err_ns;  /* when that was seen (tempo__now_ns) */
    int ended;        /* the stream reached its end (clean after a goodbye, or broken) */
    size_t bye_off;   /* bytes of the stand-in goodbye read so far (see the file header) */
    uint64_t bye_quiet_ns; /* since when the failed endpoint gave nothing (0: it just gave data) */
    unsigned bye_quiet;    /* reads that found nothing since then */

    /* Send side: a ring of `window` bytes; [s_done, s_head) is with UCX. */
    char *ring;
    uint64_t s_head, s_done;
    uint64_t acked; /* bytes the peer has read (its latest credit) */
    send_rec_t recs[SENDS_MAX];
    unsigned rec_head, rec_n;

    /* Receive side: the UCX stream descriptor being read, and credits. */
    char *rdata;
    size_t rlen, roff;
    uint64_t consumed, credited;
    credit_t credit;  /* the credit message in flight (its header must live until completion) */
    void *credit_req; /* its request, NULL when none is pending */

    tempo__list_t fetches; /* ucx_fetch_t in flight, in posting order */
    int killed;            /* kill(): the endpoint was closed under the stream */
    int zcopy;             /* large payloads go zero-copy (ep_has_rma) */
} ucx_ep_t;

typedef struct ucx_tl {
    tempo__world_t *world;
    ucp_context_h ctx;
    ucp_worker_h worker;
    int efd;
    size_t window;
    ucx_ep_t **eps; /* (world size) NULL unless ucx serves the peer */
    int *served;    /* world ranks with an endpoint */
    int nserved;
    size_t zcopy_min; /* TEMPO_UCX_ZCOPY_BYTES; 0: no zero copy */
    ucx_reg_t regs[REG_MAX];
    uint64_t nexposed, nfetched; /* zero-copy payloads sent and received (logged at close) */
    uint64_t nbad_credits; /* credits that came on another endpoint than their rank's, ignored */
    tempo__list_t orphans; /* fetches of killed endpoints, until their callbacks */
} ucx_tl_t;

/* ---------------------------------------------------------------------------------------------- */
/* Send side                                                                                      */
/* ---------------------------------------------------------------------------------------------- */

static void send_done_cb(void *request, ucs_status_t status, void *user_data)
{
    send_rec_t *rec = user_data;
    rec->done = 1;
    ucp_request_free(request);
    (void)status; /* a failure also fails the endpoint, which its error callback reports */
}

/* Free the ring space of the completed sends at the head of the queue. */
static void reclaim(ucx_ep_t *ep)
{
    while (ep->rec_n && ep->recs[ep->rec_head].done) {
        ep->s_done = ep->recs[ep->rec_head].end;
        ep->rec_head = (ep->rec_head + 1) % SENDS_MAX;
        ep->rec_n--;
    }
}

/* Hand ring bytes [off, off + len) to UCX. Returns 0, or -1 when the endpoint failed. */
static int post_send(ucx_ep_t *ep, size_t off, size_t len)
{
    send_rec_t *rec = &ep->recs[(ep->rec_head + ep->rec_n) % SENDS_MAX];
    rec->end = ep->s_head + len;
    rec->done = 0;
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                             UCP_OP_ATTR_FIELD_USER_DATA,
                             .cb.send = send_done_cb,
                             .user_data = rec};
    ucs_status_ptr_t r = ucp_stream_send_nbx(ep->ep, ep->ring + off, len, &p);
    if (UCS_PTR_IS_ERR(r)) {
        if (ep->err == UCS_OK) {
            ep->err = UCS_PTR_STATUS(r);
        }
        return -1;
    }
    rec->done = r == NULL;
    ep->rec_n++;
    ep->s_head += len;
    return 0;
}

static ssize_t ucx_writev(void *pipe, const struct iovec *iov, int iovcnt)
{
    ucx_ep_t *ep = pipe;
    size_t w = ep->tl->window;
    if (ep->err != UCS_OK) {
        return 0; /* a full pipe until ep_failed() has decided how it ended */
    }
    reclaim(ep);
    /* Room: the window less what the peer has not read, and less what UCX still holds. */
    uint64_t low = TEMPO_MIN(ep->acked, ep->s_done);
    size_t room = w - (size_t)(ep->s_head - low);
    if (room == 0 || ep->rec_n + 2 > SENDS_MAX) {
        return 0;
    }
    size_t total = 0;
    size_t start = (size_t)(ep->s_head % w);
    for (int i = 0; i < iovcnt && total < room; i++) {
        size_t n = TEMPO_MIN(iov[i].iov_len, room - total);
        size_t off = (start + total) % w;
        size_t first = TEMPO_MIN(n, w - off);
        memcpy(ep->ring + off, iov[i].iov_base, first);
        memcpy(ep->ring, (const char *)iov[i].iov_base + first, n - first);
        total += n;
    }
    /* One send, or two where the bytes wrap around the end of the ring. A refused send means
     * the endpoint failed: the bytes it had are not taken (the pipe is over anyway). */
    size_t first = TEMPO_MIN(total, w - start);
    if (post_send(ep, start, first) != 0) {
        return 0;
    }
    if (total > first && post_send(ep, 0, total - first) != 0) {
        return (ssize_t)first;
    }
    return (ssize_t)total;
}

/* ---------------------------------------------------------------------------------------------- */
/* Receive side and credits                                                                       */
/* ---------------------------------------------------------------------------------------------- */

static void credit_done_cb(void *request, ucs_status_t status, void *user_data)
{
    ucx_ep_t *ep = user_data;
    ep->credit_req = NULL;
    ucp_request_free(request);
    (void)status;
}

/* Tell the peer what was read, once a quarter of the window has been since the last time (or at
 * once when force: the peer may be stalled on the rest). One credit in flight at a time. */
static void send_credit(ucx_ep_t *ep, int force)
{
    uint64_t fresh = ep->consumed - ep->credited;
    if (ep->credit_req || ep->err != UCS_OK || fresh == 0 ||
        (!force && fresh < ep->tl->window / 4)) {
        return;
    }
    ep->credit.rank = (uint32_t)ep->tl->world->rank;
    ep->credit.zero = 0;
    ep->credit.consumed = ep->consumed;
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                             UCP_OP_ATTR_FIELD_USER_DATA |
                                             UCP_OP_ATTR_FIELD_FLAGS,
                             .flags = UCP_AM_SEND_FLAG_EAGER | UCP_AM_SEND_FLAG_REPLY,
                             .cb.send = credit_done_cb,
                             .user_data = ep};
    ucs_status_ptr_t r = ucp_am_send_nbx(ep->ep, AM_CREDIT, &ep->credit, sizeof(ep->credit), NULL,
                                         0, &p);
    if (UCS_PTR_IS_ERR(r)) {
        return; /* the endpoint failed: its error callback says so */
    }
    ep->credited = ep->consumed;
    ep->credit_req = r;
}

static ucs_status_t credit_cb(void *arg, const void *header, size_t header_length, void *data,
                              size_t length, const ucp_am_recv_param_t *param)
{
    ucx_tl_t *t = arg;
    credit_t c;
    (void)data;
    if (header_length != sizeof(c) || length != 0) {
        return UCS_OK; /* not ours */
    }
    memcpy(&c, header, sizeof(c));
    /* Only on the endpoint of the rank it names: active messages come from any endpoint. */
    if (c.rank < (uint32_t)t->world->size && c.zero == 0 && t->eps[c.rank] &&
        (!(param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ||
         param->reply_ep != t->eps[c.rank]->ep)) {
        if (t->nbad_credits++ == 0) {
            TEMPO_WARN(TEMPO_SUB_TRANSPORT,
                       "ucx: a credit naming rank %u came on an endpoint that is not that rank's: "
                       "ignored (said once)",
                       c.rank);
        }
    } else if (c.rank < (uint32_t)t->world->size && c.zero == 0 && t->eps[c.rank]) {
        ucx_ep_t *ep = t->eps[c.rank];
        /* A credit never exceeds what was sent: anything else is a corrupt peer, ignored. */
        if (c.consumed > ep->acked && c.consumed <= ep->s_head) {
            ep->acked = c.consumed;
        }
    }
    return UCS_OK;
}

static ssize_t ucx_read(void *pipe, void *buf, size_t len)
{
    ucx_ep_t *ep = pipe;
    size_t got = 0;
    while (got < len) {
        if (!ep->rdata) {
            size_t l = 0;
            ucs_status_ptr_t d = ucp_stream_recv_data_nb(ep->ep, &l);
            if (d == NULL) {
                break;
            }
            if (UCS_PTR_IS_ERR(d)) {
                if (!ep->err) {
                    ep->err = UCS_PTR_STATUS(d);
                }
                break;
            }
            ep->rdata = d;
            ep->rlen = l;
            ep->roff = 0;
        }
        size_t n = TEMPO_MIN(len - got, ep->rlen - ep->roff);
        memcpy((char *)buf + got, ep->rdata + ep->roff, n);
        got += n;
        ep->roff += n;
        if (ep->roff == ep->rlen) {
            ucp_stream_data_release(ep->ep, ep->rdata);
            ep->rdata = NULL;
        }
    }
    if (got) {
        ep->consumed += got;
        ep->bye_quiet_ns = 0;
        send_credit(ep, 0);
        return (ssize_t)got;
    }
    if (ep->err == UCS_OK) {
        return 0;
    }
    /* The endpoint failed and UCX gave what it held: the peer's goodbye (on its tcp connection)
     * reads as a goodbye here, at a message boundary; the end after it is clean. Otherwise
     * nothing until ep_failed() decides. "What it held" is known only by waiting: a peer that
     * sent its last message and left at once makes UCX report the failure (its end of the pair's
     * other connection closed) while that message is still on its way, and a goodbye read before
     * it would make it "data after a goodbye" (conform, n=3 ucx-tcp under load: 1 run in 20). */
    tempo__world_t *w = ep->tl->world;
    if (!w->peers[ep->peer].left || ep->stream.in_payload) {
        return ep->bye_off ? TEMPO_PIPE_EOF : 0;
    }
    if (!ep->bye_off) {
        uint64_t now = tempo__now_ns();
        if (!ep->bye_quiet_ns) {
            ep->bye_quiet_ns = now;
            ep->bye_quiet = 0;
        }
        if (++ep->bye_quiet < BYE_QUIET_READS || now - ep->bye_quiet_ns < BYE_QUIET_NS) {
            return 0;
        }
    }
    tempo__wire_hdr_t bye;
    memset(&bye, 0, sizeof(bye));
    bye.magic = TEMPO_WIRE_MAGIC;
    bye.version = TEMPO_WIRE_VERSION;
    bye.type = TEMPO_WIRE_BYE;
    bye.src = (uint32_t)ep->peer;
    if (ep->bye_off == sizeof(bye)) {
        return TEMPO_PIPE_EOF;
    }
    size_t n = TEMPO_MIN(len, sizeof(bye) - ep->bye_off);
    memcpy(buf, (char *)&bye + ep->bye_off, n);
    ep->bye_off += n;
    return (ssize_t)n;
}

static size_t ucx_expose(void *pipe, const void *buf, size_t len, void *desc, void **handle);
static void ucx_release(void *pipe, void *handle);
static int ucx_fetch(void *pipe, const void *desc, size_t desc_len, void *dst, size_t len,
                     void *op);
static void ucx_poll(void *pipe);
static void ucx_kill(void *pipe);

static const tempo__pipe_ops_t ucx_pipe_ops = {ucx_writev, ucx_read,  ucx_expose, ucx_release,
                                               ucx_fetch,  ucx_poll, ucx_kill};

/* ---------------------------------------------------------------------------------------------- */
/* Zero copy: registration table, expose/release, fetch, poll, kill                               */
/* ---------------------------------------------------------------------------------------------- */

/* The registration covering [addr, addr + len), taken (refs + 1); NULL when none can be made. */
static ucx_reg_t *reg_get(ucx_tl_t *t, const void *buf, size_t len)
{
    uintptr_t a = (uintptr_t)buf;
    ucx_reg_t *slot = NULL;
    for (int i = 0; i < REG_MAX; i++) {
        ucx_reg_t *r = &t->regs[i];
        if (r->refs && r->addr <= a && a + len <= r->addr + r->len) {
            r->refs++;
            return r;
        }
        if (!r->refs && !slot) {
            slot = r;
        }
    }
    if (!slot) {
        return NULL; /* REG_MAX in flight: this payload goes through the pipe */
    }
    ucp_mem_map_params_t mp = {.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS |
                                             UCP_MEM_MAP_PARAM_FIELD_LENGTH,
                               .address = (void *)buf,
                               .length = len};
    ucp_mem_h memh;
    if (ucp_mem_map(t->ctx, &mp, &memh) != UCS_OK) {
        return NULL;
    }
    void *rkey;
    size_t rkey_len;
    if (ucp_rkey_pack(t->ctx, memh, &rkey, &rkey_len) != UCS_OK) {
        ucp_mem_unmap(t->ctx, memh);
        return NULL;
    }
    *slot = (ucx_reg_t){a, len, memh, rkey, rkey_len, 1};
    return slot;
}

static void reg_put(ucx_tl_t *t, ucx_reg_t *r)
{
    if (--r->refs == 0) {
        ucp_rkey_buffer_release(r->rkey);
        ucp_mem_unmap(t->ctx, r->memh);
        memset(r, 0, sizeof(*r));
    }
}

static size_t ucx_expose(void *pipe, const void *buf, size_t len, void *desc, void **handle)
{
    ucx_ep_t *ep = pipe;
    if (ep->err != UCS_OK || ep->killed) {
        return 0;
    }
    ucx_reg_t *r = reg_get(ep->tl, buf, len);
    if (!r) {
        return 0;
    }
    zdesc_t d = {(uint64_t)(uintptr_t)buf, len, (uint32_t)r->rkey_len, 0};
    if (sizeof(d) + r->rkey_len > TEMPO_WIRE_DESC_MAX) {
        reg_put(ep->tl, r); /* an rkey this large (many transports) goes through the pipe */
        return 0;
    }
    memcpy(desc, &d, sizeof(d));
    memcpy((char *)desc + sizeof(d), r->rkey, r->rkey_len);
    *handle = r;
    ep->tl->nexposed++;
    return sizeof(d) + r->rkey_len;
}

static void ucx_release(void *pipe, void *handle)
{
    ucx_ep_t *ep = pipe;
    reg_put(ep->tl, handle);
}

static void fetch_cb(void *request, ucs_status_t status, void *user_data)
{
    ucx_fetch_t *f = user_data;
    f->done = 1;
    f->status = status;
    ucp_request_free(request);
    if (!f->op) { /* its endpoint was killed: nobody waits for it */
        tempo__list_remove(&f->link);
        ucp_rkey_destroy(f->rkey);
        tempo__free(f);
    }
}

static int ucx_fetch(void *pipe, const void *desc, size_t desc_len, void *dst, size_t len,
                     void *op)
{
    ucx_ep_t *ep = pipe;
    zdesc_t d;
    if (desc_len < sizeof(d)) {
        return -EPROTO;
    }
    memcpy(&d, desc, sizeof(d));
    if (d.len != len || d.zero || d.rkey_len != desc_len - sizeof(d)) {
        return -EPROTO; /* a descriptor that does not describe this payload */
    }
    if (ep->err != UCS_OK || ep->killed) {
        return -ECONNRESET;
    }
    ucx_fetch_t *f = tempo__calloc(1, sizeof(*f), "ucx fetch");
    if (!f) {
        return -ENOMEM;
    }
    if (ucp_ep_rkey_unpack(ep->ep, (const char *)desc + sizeof(d), &f->rkey) != UCS_OK) {
        tempo__free(f);
        return -EPROTO;
    }
    f->ep = ep;
    f->op = op;
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK |
                                             UCP_OP_ATTR_FIELD_USER_DATA,
                             .cb.send = fetch_cb,
                             .user_data = f};
    ucs_status_ptr_t r = ucp_get_nbx(ep->ep, dst, len, d.addr, f->rkey, &p);
    ep->tl->nfetched++;
    if (r == NULL || UCS_PTR_IS_ERR(r)) {
        ucp_rkey_destroy(f->rkey);
        tempo__free(f);
        return r == NULL ? 1 : -EIO;
    }
    tempo__list_push_back(&ep->fetches, &f->link);
    return 0;
}

/* Hand the finished fetches of ep to its stream, in posting order; returns events. */
static int fetches_done(ucx_ep_t *ep)
{
    int events = 0;
    while (!tempo__list_empty(&ep->fetches)) {
        ucx_fetch_t *f = tempo__container_of(ep->fetches.next, ucx_fetch_t, link);
        if (!f->done) {
            break;
        }
        tempo__list_remove(&f->link);
        ucp_rkey_destroy(f->rkey);
        void *op = f->op;
        tempo_status_t st = f->status == UCS_OK ? TEMPO_OK : TEMPO_ERR_REMOTE;
        tempo__free(f);
        tempo__stream_fetched(&ep->stream, op, st);
        events++;
    }
    return events;
}

static void ucx_poll(void *pipe)
{
    ucx_ep_t *ep = pipe;
    ucp_worker_progress(ep->tl->worker);
    fetches_done(ep);
}

/* Close the connection under the stream now: no fetch of this pipe writes into a receive buffer
 * after it (the force close completes the outstanding ones, cancelled), and the peer's gets of
 * this rank's exposures fail. The stream then fails what it was fetching and lets exposures go. */
static void ucx_kill(void *pipe)
{
    ucx_ep_t *ep = pipe;
    ucx_tl_t *t = ep->tl;
    if (ep->killed && !ep->ep) {
        return;
    }
    ep->killed = 1;
    if (ep->err == UCS_OK) {
        ep->err = UCS_ERR_CANCELED;
    }
    while (!tempo__list_empty(&ep->fetches)) { /* the stream drops their ops itself */
        ucx_fetch_t *f = tempo__container_of(ep->fetches.next, ucx_fetch_t, link);
        tempo__list_remove(&f->link);
        if (f->done) {
            ucp_rkey_destroy(f->rkey);
            tempo__free(f);
        } else {
            f->op = NULL;
            tempo__list_push_back(&t->orphans, &f->link);
        }
    }
    if (!ep->ep) {
        return; /* closed already (ucx_close) */
    }
    if (ep->rdata) {
        ucp_stream_data_release(ep->ep, ep->rdata);
        ep->rdata = NULL;
    }
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                             .flags = UCP_EP_CLOSE_FLAG_FORCE};
    ucs_status_ptr_t r = ucp_ep_close_nbx(ep->ep, &p);
    if (r && !UCS_PTR_IS_ERR(r)) {
        uint64_t until = tempo__now_ns() + 1000000000ull;
        while (ucp_request_check_status(r) == UCS_INPROGRESS && tempo__now_ns() < until) {
            ucp_worker_progress(t->worker);
        }
        ucp_request_free(r);
    }
    ep->ep = NULL;
}

/* ---------------------------------------------------------------------------------------------- */
/* Endpoint operations (all from the stream layer)                                                */
/* ---------------------------------------------------------------------------------------------- */

static const tempo__tl_ops_t ucx_ops = TEMPO__STREAM_EP_OPS("ucx");
TEMPO__STREAM_FIRST(ucx_ep_t);

/* ---------------------------------------------------------------------------------------------- */
/* Progress and idle waits                                                                        */
/* ---------------------------------------------------------------------------------------------- */

/* The endpoint failed and its stream has not ended: wait for the control mesh's verdict (the file
 * header), then fail the job naming the peer. Returns events. */
static int ep_failed(ucx_tl_t *t, ucx_ep_t *ep)
{
    tempo__world_t *w = t->world;
    if (ep->stream.state != STREAM_OPEN || w->failed != TEMPO_OK) {
        ep->ended = 1; /* said goodbye, or the job failed already (its error names the cause) */
        return 1;
    }
    uint64_t now = tempo__now_ns();
    if (!ep->err_ns) {
        ep->err_ns = now;
    }
    if (now - ep->err_ns < (uint64_t)(ERR_GRACE_S * 1e9)) {
        return 0;
    }
    char why[256];
    int running = tempo__peer_running(w, ep->peer);
    snprintf(why, sizeof(why), "broke its ucx connection (%s)%s", ucs_status_string(ep->err),
             running > 0   ? " although its process is still running"
             : running == 0 ? ": its process died or exited without destroying its communicator"
                            : "");
    tempo__stream_broken(&ep->stream, why);
    ep->ended = 1;
    return 1;
}

/* One endpoint's stream: sends, then what arrived. Returns events. */
static int ep_progress(ucx_tl_t *t, ucx_ep_t *ep)
{
    int events = fetches_done(ep);
    reclaim(ep);
    if (!tempo__stream_send_idle(&ep->stream)) {
        int r = tempo__stream_progress_send(&ep->stream);
        events += r > 0 ? r : 0;
    }
    if (!ep->ended) {
        if (ep->err != UCS_OK) {
            tempo__stream_drain(&ep->stream); /* what UCX still holds is all there is */
        }
        int r = tempo__stream_progress_recv(&ep->stream);
        if (r < 0) {
            ep->ended = 1; /* a clean end after its goodbye, or broken (the job failed) */
            events++;
        } else {
            events += r;
        }
        if (!ep->ended && ep->err != UCS_OK) {
            events += ep_failed(t, ep);
        }
    }
    if (ep->consumed != ep->credited && !ep->credit_req) {
        /* The stream may have stopped reading (back-pressure, or nothing posted): give back
         * what was read so far, or a peer stalled on a full window would wait forever. */
        send_credit(ep, tempo__stream_recv_blocked(&ep->stream) ||
                            ep->consumed - ep->credited >= t->window / 4);
    }
    if (tempo__stream_heard(&ep->stream)) { /* (not for control notes: stream.h) */
        tempo__peer_heard(t->world, ep->peer);
    }
    return events;
}

static int ucx_progress(void *inst)
{
    ucx_tl_t *t = inst;
    int events = 0;
    for (int i = 0; i < 64 && ucp_worker_progress(t->worker); i++) {
        events = 1;
    }
    for (int i = 0; i < t->nserved; i++) {
        ucx_ep_t *ep = t->eps[t->served[i]];
        if (!ep->killed) {
            events += ep_progress(t, ep);
        }
    }
    return events;
}

static int ucx_wait_fd(void *inst)
{
    ucx_tl_t *t = inst;
    return t ? t->efd : -1;
}

/* Before a sleep: arm the event descriptor. Busy (events pending) says "poll once more" (1). */
static int ucx_doze(void *inst, int sleeping)
{
    ucx_tl_t *t = inst;
    if (!t || !sleeping) {
        return 0;
    }
    return ucp_worker_arm(t->worker) == UCS_ERR_BUSY;
}

/* ---------------------------------------------------------------------------------------------- */
/* Setup and teardown                                                                             */
/* ---------------------------------------------------------------------------------------------- */

static void ep_error_cb(void *arg, ucp_ep_h uep, ucs_status_t status)
{
    ucx_ep_t *ep = arg;
    (void)uep;
    if (ep->err == UCS_OK) {
        ep->err = status;
        TEMPO_DEBUG(TEMPO_SUB_TRANSPORT, "ucx endpoint to rank %d failed: %s", ep->peer,
                    ucs_status_string(status));
    }
}

static void ucx_close(void *inst, int graceful, uint64_t deadline);

/* Whether UCX_TLS (NULL: unset, every transport) may load UCX's shared-memory (mm) transports;
 * setting MM_FIFO_SIZE where none is loaded makes UCX warn on every worker ("invalid
 * configuration"). */
static int tls_may_use_mm(const char *tls)
{
    if (!tls || tls[0] == '^') {
        return 1; /* all, or all but some */
    }
    static const char *const mm[] = {"all", "sm", "shm", "mm", "posix", "sysv", "xpmem"};
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", tls);
    char *save = NULL;
    for (char *w = strtok_r(buf, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
        for (size_t i = 0; i < sizeof(mm) / sizeof(mm[0]); i++) {
            if (!strcmp(w, mm[i])) {
                return 1;
            }
        }
    }
    return 0;
}

/* The UCP context and worker, or a reason why not (returned in why). */
static tempo_status_t ucx_start(ucx_tl_t *t, char *why, size_t len)
{
    ucp_config_t *config;
    ucs_status_t s = ucp_config_read(NULL, NULL, &config);
    if (s != UCS_OK) {
        snprintf(why, len, "ucp_config_read: %s (a UCX_* variable?)", ucs_status_string(s));
        return TEMPO_ERR_UNSUPPORTED;
    }
    /* Adaptive progress (UCX's default) polls an interface only after the async thread saw an
     * event on it, so every message waits for that thread to be scheduled: on a 2-core machine
     * with other work, 8-byte all-reduces over sm took 210-320 us with it and 12-24 us without
     * (interleaved runs). tempo polls every interface of the worker; the user's own
     * UCX_ADAPTIVE_PROGRESS wins. */
    if (!getenv("UCX_ADAPTIVE_PROGRESS")) {
        (void)ucp_config_modify(config, "ADAPTIVE_PROGRESS", "n");
    }
    /* UCX's shared-memory FIFO (64 elements by default) stalled two ranks for seconds when both
     * sent thousands of small messages at once (30,000 queued 8-byte all-reduces on one rank
     * against 2,000 on the other, fault_timeout's "stall" case): 6 of 20 runs timed out after
     * 2 s with 64, none of 14 with 1024 (the cause inside UCX is not understood). The user's own
     * UCX_MM_FIFO_SIZE (or UCX_POSIX_/UCX_SYSV_FIFO_SIZE) wins. */
    if (!getenv("UCX_MM_FIFO_SIZE") && !getenv("UCX_POSIX_FIFO_SIZE") &&
        !getenv("UCX_SYSV_FIFO_SIZE") && tls_may_use_mm(getenv("UCX_TLS"))) {
        (void)ucp_config_modify(config, "MM_FIFO_SIZE", "1024");
    }
    ucp_params_t cp = {.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_NAME,
                       .features = UCP_FEATURE_STREAM | UCP_FEATURE_AM | UCP_FEATURE_RMA |
                                   UCP_FEATURE_WAKEUP,
                       .name = "tempo"};
    s = ucp_init(&cp, config, &t->ctx);
    ucp_config_release(config);
    if (s != UCS_OK) {
        t->ctx = NULL;
        snprintf(why, len, "ucp_init: %s", ucs_status_string(s));
        return TEMPO_ERR_UNSUPPORTED;
    }
    ucp_worker_params_t wp = {.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
                              .thread_mode = UCS_THREAD_MODE_SINGLE};
    s = ucp_worker_create(t->ctx, &wp, &t->worker);
    if (s != UCS_OK) {
        t->worker = NULL;
        snprintf(why, len, "ucp_worker_create: %s", ucs_status_string(s));
        return TEMPO_ERR_UNSUPPORTED;
    }
    s = ucp_worker_get_efd(t->worker, &t->efd);
    if (s != UCS_OK) {
        t->efd = -1;
        snprintf(why, len, "ucp_worker_get_efd: %s", ucs_status_string(s));
        return TEMPO_ERR_UNSUPPORTED;
    }
    ucp_am_handler_param_t ap = {.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID |
                                               UCP_AM_HANDLER_PARAM_FIELD_CB |
                                               UCP_AM_HANDLER_PARAM_FIELD_ARG,
                                 .id = AM_CREDIT,
                                 .cb = credit_cb,
                                 .arg = t};
    s = ucp_worker_set_am_recv_handler(t->worker, &ap);
    if (s != UCS_OK) {
        snprintf(why, len, "ucp_worker_set_am_recv_handler: %s", ucs_status_string(s));
        return TEMPO_ERR_UNSUPPORTED;
    }
    return TEMPO_OK;
}

/* UCX's errors and warnings while it is expected to complain, sent to tempo's DEBUG log instead of
 * stderr: an endpoint with peer-failure handling refused (UCX says why, no transport with a
 * peer-failure handler, at ERROR level, which is no error here: the pair then connects without
 * it), and the teardown after the job failed (a dead peer's shared memory, requests that never
 * completed), where tempo's own error already names the cause. The first message is kept in
 * ucx_said for the caller. Pushed and popped around those calls, under the world lock. */
static char ucx_said[256];

static ucs_log_func_rc_t quiet_log(const char *file, unsigned line, const char *function,
                                   ucs_log_level_t level,
                                   const ucs_log_component_config_t *comp_conf,
                                   const char *message, va_list ap)
{
    (void)function;
    (void)comp_conf;
    if (level > UCS_LOG_LEVEL_WARN) {
        return UCS_LOG_FUNC_RC_CONTINUE;
    }
    char text[256];
    vsnprintf(text, sizeof(text), message, ap);
    if (!ucx_said[0]) {
        snprintf(ucx_said, sizeof(ucx_said), "%s", text);
    }
    TEMPO_DEBUG(TEMPO_SUB_TRANSPORT, "UCX (%s:%u): %s", file, line, text);
    return UCS_LOG_FUNC_RC_STOP;
}

/* Whether UCX gave ep a lane for one-sided reads (an "rma_bw" lane in its configuration, e.g.
 * cma or an RDMA device). Without one (UCX_TLS=tcp: no lane), ucp_get_nbx is emulated with
 * active messages that the peer's progress answers fragment by fragment, which measured about
 * half the speed of the stream (4 MiB sendrecv over tcp: 17-32 ms streamed, 28-69 ms fetched,
 * interleaved), so zero copy is used only where the lane exists. UCX 1.13 has no query for an
 * endpoint's lanes (ucp_ep_query tells only names and addresses), hence its printed
 * configuration; if that text ever changes, no lane is found and payloads take the stream. */
static int ep_has_rma(ucp_ep_h uep)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) {
        return 0;
    }
    ucp_ep_print_info(uep, f);
    fclose(f);
    int yes = 0;
    for (char *line = text; line && *line && !yes;) {
        char *end = strchr(line, '\n');
        if (end) {
            *end = 0;
        }
        yes = strstr(line, "lane[") && strstr(line, " rma_bw");
        line = end ? end + 1 : NULL;
    }
    free(text);
    return yes;
}

static tempo_status_t ep_create(ucx_tl_t *t, int peer, const void *addr,
                                ucp_err_handling_mode_t mode, ucx_ep_t **ep_p)
{
    ucx_ep_t *ep = tempo__calloc(1, sizeof(*ep), "ucx endpoint");
    char *ring = ep ? tempo__malloc(t->window, "ucx send ring") : NULL;
    if (!ring) {
        tempo__free(ep);
        return TEMPO_ERR_NOMEM;
    }
    ep->tl = t;
    ep->peer = peer;
    ep->ring = ring;
    tempo__list_init(&ep->fetches);
    tempo_status_t st = tempo__stream_init(&ep->stream, t->world, peer, "ucx", &ucx_pipe_ops, ep);
    if (st != TEMPO_OK) {
        tempo__free(ring);
        tempo__free(ep);
        return st;
    }

    ucp_ep_params_t ep_params = {.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                                               UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                                               UCP_EP_PARAM_FIELD_ERR_HANDLER,
                                 .address = addr,
                                 .err_mode = mode,
                                 .err_handler = {ep_error_cb, ep}};
    int quiet = mode == UCP_ERR_HANDLING_MODE_PEER;
    ucx_said[0] = 0;
    if (quiet) {
        ucs_log_push_handler(quiet_log);
    }
    ucs_status_t s = ucp_ep_create(t->worker, &ep_params, &ep->ep);
    if (quiet) {
        ucs_log_pop_handler();
    }
    if (s != UCS_OK) {
        TEMPO_DEBUG(TEMPO_SUB_TRANSPORT, "ucx cannot reach rank %d %s peer-failure handling: %s%s%s",
                    peer, quiet ? "with" : "without", ucs_status_string(s),
                    ucx_said[0] ? ": " : "", ucx_said);
        tempo__stream_fini(&ep->stream);
        tempo__free(ring);
        tempo__free(ep);
        return TEMPO_ERR_UNSUPPORTED;
    }
    /* Zero copy only with peer-failure handling: without it UCX turns a failed one-sided
     * operation into a fatal error, and a peer that dies with a get in flight (its memory gone)
     * aborted the survivor (conform's kill case over UCX_TLS=sm,cma,self, 3 of 30 runs under
     * load: "ucp_request.inl: Fatal: unexpected error: Shared memory error" in
     * ucp_get_req_handler). TEMPO_UCX_ZCOPY_ALWAYS takes that risk for the speed. */
    ep->zcopy = t->zcopy_min && (quiet || tempo__cfg.ucx_zcopy_always) && ep_has_rma(ep->ep);
    tempo__stream_set_fetch(&ep->stream, ep->zcopy ? t->zcopy_min : 0);
    *ep_p = ep;
    return TEMPO_OK;
}

/* Close an endpoint that the other end did not create (never used: nothing to flush). */
static void ep_discard(ucx_tl_t *t, ucx_ep_t *ep)
{
    ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                             .flags = UCP_EP_CLOSE_FLAG_FORCE};
    ucs_status_ptr_t r = ucp_ep_close_nbx(ep->ep, &p);
    if (r && !UCS_PTR_IS_ERR(r)) {
        uint64_t until = tempo__now_ns() + 1000000000ull; /* forced: nothing to wait for, really */
        while (ucp_request_check_status(r) == UCS_INPROGRESS && tempo__now_ns() < until) {
            ucp_worker_progress(t->worker);
        }
        ucp_request_free(r);
    }
    tempo__stream_fini(&ep->stream);
    tempo__free(ep->ring);
    tempo__free(ep);
}

static void proof_mac(const uint8_t *chal, int32_t writer, int32_t reader, uint8_t *out)
{
    const void *parts[] = {chal, &writer, &reader};
    size_t lens[] = {TEMPO__AUTH_NONCE, sizeof(writer), sizeof(reader)};
    tempo__auth_mac("tempo ucx proof", 3, parts, lens, out);
}

/* With a job key: every served endpoint proves it both ways (see "Who is at the other end"); the
 * pairs where either end's proof failed are closed at both ends, and their peers go to the next
 * transport. mine: this rank's challenge; theirs[p]: p's hello. */
static tempo_status_t prove(ucx_tl_t *t, const uint8_t *mine, const hello_t *theirs,
                            uint64_t deadline)
{
    tempo__world_t *w = t->world;
    tempo_status_t st = TEMPO_ERR_NOMEM;
    proof_t *got = tempo__calloc((size_t)w->size, sizeof(proof_t), "ucx proofs");
    size_t *have = tempo__calloc((size_t)w->size, sizeof(size_t), "ucx proofs");
    int32_t *ok = tempo__calloc((size_t)w->size * 2, sizeof(int32_t), "ucx proofs");
    unsigned char *mask = tempo__calloc((size_t)w->size, 1, "ucx proofs");
    if (!got || !have || !ok || !mask) {
        goto out;
    }
    for (int i = 0; i < t->nserved; i++) {
        int p = t->served[i];
        proof_t pr = {PROOF_MAGIC, w->rank, {0}};
        proof_mac(theirs[p].nonce, w->rank, p, pr.mac);
        struct iovec v = {&pr, sizeof(pr)};
        mask[p] = 1;
        ok[p] = ucx_writev(t->eps[p], &v, 1) == (ssize_t)sizeof(pr); /* a fresh ring takes it */
    }
    uint64_t until = TEMPO_MIN(deadline, tempo__deadline_after(PROOF_S));
    for (int left = t->nserved; left > 0 && tempo__now_ns() < until;) {
        ucp_worker_progress(t->worker);
        left = 0;
        for (int i = 0; i < t->nserved; i++) {
            int p = t->served[i];
            if (have[p] < sizeof(proof_t) && t->eps[p]->err == UCS_OK) {
                ssize_t n = ucx_read(t->eps[p], (char *)&got[p] + have[p],
                                     sizeof(proof_t) - have[p]);
                have[p] += n > 0 ? (size_t)n : 0;
                left += have[p] < sizeof(proof_t) && t->eps[p]->err == UCS_OK;
            }
        }
    }
    for (int i = 0; i < t->nserved; i++) {
        int p = t->served[i];
        uint8_t want[TEMPO__AUTH_MAC];
        proof_mac(mine, p, w->rank, want);
        int held = have[p] == sizeof(proof_t) && got[p].magic == PROOF_MAGIC &&
                   got[p].rank == p && tempo__auth_equal(want, got[p].mac);
        if (!held) {
            TEMPO_WARN(TEMPO_SUB_TRANSPORT,
                       "ucx: the endpoint to rank %d (host %s) did not prove the job key (%s): "
                       "refused, rank %d goes over the next transport",
                       p, w->peers[p].info.hostname,
                       have[p] < sizeof(proof_t) ? "not all of it came within 5 s"
                                                 : "a wrong MAC",
                       p);
        }
        ok[p] = ok[p] && held;
    }
    st = tempo__ctrl_swap(w, mask, CODE_PROOF, ok, sizeof(int32_t), ok + w->size,
                          sizeof(int32_t), deadline, "ucx setup");
    if (st != TEMPO_OK) {
        goto out;
    }
    int n = 0;
    for (int i = 0; i < t->nserved; i++) {
        int p = t->served[i];
        if (ok[p] && ok[w->size + p]) {
            t->served[n++] = p;
            continue;
        }
        if (ok[p]) {
            TEMPO_WARN(TEMPO_SUB_TRANSPORT,
                       "ucx: rank %d refused this rank's endpoint (its proof did not hold there): "
                       "rank %d goes over the next transport",
                       p, p);
        }
        ep_discard(t, t->eps[p]);
        t->eps[p] = NULL;
    }
    t->nserved = n;
out:
    tempo__free(got);
    tempo__free(have);
    tempo__free(ok);
    tempo__free(mask);
    return st;
}

static tempo_status_t ucx_open(tempo__world_t *w, const unsigned char *want, uint64_t deadline,
                               void **inst_p)
{
    *inst_p = NULL;
    int nwant = 0;
    for (int p = 0; p < w->size; p++) {
        nwant += want[p] != 0;
    }
    if (nwant == 0) {
        return TEMPO_OK; /* nobody to serve (want[] is symmetric: nobody waits for us either) */
    }
    tempo_status_t st = TEMPO_ERR_NOMEM;
    ucx_tl_t *t = tempo__calloc(1, sizeof(*t), "ucx transport");
    int *peers = tempo__calloc((size_t)nwant, sizeof(int), "ucx setup");
    hello_t *theirs = tempo__calloc((size_t)w->size, sizeof(hello_t), "ucx setup");
    /* made[p]: this end created its endpoint to p this round; made[size + p]: p did */
    int32_t *made = tempo__calloc((size_t)w->size * 2, sizeof(int32_t), "ucx setup");
    unsigned char *round_want = tempo__calloc((size_t)w->size, 1, "ucx setup");
    tempo__ctrl_msg_t *sends = tempo__calloc((size_t)nwant, sizeof(*sends), "ucx setup");
    tempo__ctrl_msg_t *recvs = tempo__calloc((size_t)nwant, sizeof(*recvs), "ucx setup");
    void **their_addr = tempo__calloc((size_t)nwant, sizeof(void *), "ucx setup");
    ucx_ep_t **eps = tempo__calloc((size_t)nwant, sizeof(*eps), "ucx setup");
    ucp_address_t *addr = NULL;
    size_t addr_len = 0;
    if (!t || !peers || !theirs || !made || !round_want || !sends || !recvs || !their_addr ||
        !eps) {
        goto out;
    }
    t->world = w;
    t->efd = -1;
    t->window = tempo__cfg.ucx_window;
    t->zcopy_min = tempo__cfg.ucx_zcopy_bytes;
    tempo__list_init(&t->orphans);
    t->eps = tempo__calloc((size_t)w->size, sizeof(*t->eps), "ucx endpoints");
    t->served = tempo__calloc((size_t)w->size, sizeof(int), "ucx endpoints");
    if (!t->eps || !t->served) {
        goto out;
    }
    int n = 0;
    for (int p = 0; p < w->size; p++) {
        if (want[p]) {
            peers[n++] = p;
        }
    }

    /* Usable here? A failure is not the job's: the peers fall back to the next transport. */
    char why[256] = "";
    int usable = ucx_start(t, why, sizeof(why)) == TEMPO_OK;
    if (usable && ucp_worker_get_address(t->worker, &addr, &addr_len) != UCS_OK) {
        addr = NULL;
        snprintf(why, sizeof(why), "ucp_worker_get_address failed");
        usable = 0;
    }
    if (!usable) {
        TEMPO_WARN(TEMPO_SUB_TRANSPORT, "ucx is not usable on this rank (%s): its peers use the "
                                        "next transport of TEMPO_TRANSPORTS",
                   why);
        addr_len = 0;
    }
    hello_t mine = {HELLO_MAGIC, (uint32_t)usable, addr_len, {0}};
    int keyed = tempo__auth_key() == 1;
    if (keyed && tempo__auth_random(mine.nonce, sizeof(mine.nonce)) != 0) {
        st = TEMPO_ERR_SYSTEM;
        goto out;
    }
    st = tempo__ctrl_swap(w, want, CODE_HELLO, &mine, 0, theirs, sizeof(mine), deadline,
                          "ucx setup");
    if (st != TEMPO_OK) {
        goto out;
    }

    /* Addresses, between the pairs usable at both ends. */
    int ns = 0, nr = 0;
    for (int i = 0; i < n; i++) {
        const hello_t *h = &theirs[peers[i]];
        if (h->magic != HELLO_MAGIC || h->addr_len > ADDR_MAX) {
            st = tempo__err(TEMPO_ERR_INVALID, "ucx setup: rank %d sent a malformed hello",
                            peers[i]);
            goto out;
        }
        if (!usable || !h->usable) {
            continue;
        }
        their_addr[i] = tempo__malloc(h->addr_len, "ucx peer address");
        if (!their_addr[i]) {
            st = TEMPO_ERR_NOMEM;
            goto out;
        }
        sends[ns++] = (tempo__ctrl_msg_t){peers[i], CODE_ADDR, addr, addr_len};
        recvs[nr++] = (tempo__ctrl_msg_t){peers[i], CODE_ADDR, their_addr[i], h->addr_len};
    }
    st = tempo__ctrl_exchange(w, sends, ns, recvs, nr, deadline, "ucx setup");
    if (st != TEMPO_OK) {
        goto out;
    }

    /* Endpoints: first with peer-failure handling, then, for the pairs where an end could not
     * create one so (UCX 1.13's shared-memory transports have no peer-failure handler), without;
     * after each round both ends tell each other whether theirs exists, so the pairs agree. */
    for (int round = 0; round < 2; round++) {
        ucp_err_handling_mode_t mode = round == 0 ? UCP_ERR_HANDLING_MODE_PEER
                                                  : UCP_ERR_HANDLING_MODE_NONE;
        for (int i = 0; i < n; i++) {
            int p = peers[i];
            round_want[p] = their_addr[i] && !t->eps[p];
            made[w->size + p] = 0;
            if (!round_want[p]) {
                continue;
            }
            st = ep_create(t, p, their_addr[i], mode, &eps[i]);
            if (st == TEMPO_ERR_NOMEM) {
                goto out;
            }
            made[p] = eps[i] != NULL;
        }
        st = tempo__ctrl_swap(w, round_want, CODE_EP + (uint32_t)round, made, sizeof(int32_t),
                              made + w->size, sizeof(int32_t), deadline, "ucx setup");
        if (st != TEMPO_OK) {
            goto out;
        }
        for (int i = 0; i < n; i++) {
            if (eps[i] && made[w->size + peers[i]] == 1) {
                t->eps[peers[i]] = eps[i];
                t->served[t->nserved++] = peers[i];
                if (mode == UCP_ERR_HANDLING_MODE_NONE) {
                    TEMPO_INFO(TEMPO_SUB_TRANSPORT,
                               "ucx reaches rank %d only without peer-failure handling (UCX_TLS "
                               "has no transport with it): the tcp mesh still detects its death",
                               peers[i]);
                }
            } else if (eps[i]) {
                ep_discard(t, eps[i]);
            }
            eps[i] = NULL;
        }
    }
    if (keyed) {
        st = prove(t, mine.nonce, theirs, deadline);
        if (st != TEMPO_OK) {
            goto out;
        }
    }
    int nz = 0;
    for (int i = 0; i < t->nserved; i++) {
        nz += t->eps[t->served[i]]->zcopy;
    }
    TEMPO_INFO(TEMPO_SUB_INIT,
               "ucx: %d of %d peers reachable, window %zu bytes; zero copy from %zu bytes to %d "
               "of them (those with a one-sided lane)",
               t->nserved, n, t->window, t->zcopy_min, nz);
    st = TEMPO_OK;
out:
    for (int i = 0; eps && i < nwant; i++) {
        if (eps[i]) {
            ep_discard(t, eps[i]);
        }
    }
    for (int i = 0; their_addr && i < nwant; i++) {
        tempo__free(their_addr[i]);
    }
    if (addr) {
        ucp_worker_release_address(t->worker, addr);
    }
    tempo__free(peers);
    tempo__free(theirs);
    tempo__free(made);
    tempo__free(round_want);
    tempo__free(sends);
    tempo__free(recvs);
    tempo__free(their_addr);
    tempo__free(eps);
    if (t && (st != TEMPO_OK || t->nserved == 0)) {
        ucx_close(t, 0, 0);
        t = NULL;
    }
    *inst_p = t;
    return st;
}

static void *ucx_ep(void *inst, int peer)
{
    ucx_tl_t *t = inst;
    return t ? t->eps[peer] : NULL;
}

/* Whether everything handed to UCX on ep has completed locally, and the stream has nothing
 * queued. */
static int ep_flushed(ucx_ep_t *ep)
{
    reclaim(ep);
    return tempo__stream_send_idle(&ep->stream) && ep->rec_n == 0;
}

static void free_fetches(tempo__list_t *l)
{
    while (l->next && !tempo__list_empty(l)) {
        tempo__list_t *e = l->next;
        tempo__list_remove(e);
        tempo__free(tempo__container_of(e, ucx_fetch_t, link));
    }
}

static void ucx_close(void *inst, int graceful, uint64_t deadline)
{
    ucx_tl_t *t = inst;
    if (!t) {
        return;
    }
    tempo__world_t *w = t->world;
    int quiet = !graceful || w->failed != TEMPO_OK;
    if (quiet) {
        ucs_log_push_handler(quiet_log);
    }
    /* An abort notice gets a moment to leave (the job failed: deadline 0); goodbyes get the
     * deadline. */
    uint64_t until = graceful ? deadline : tempo__now_ns() + 100000000ull;
    for (int i = 0; i < t->nserved; i++) {
        ucx_ep_t *ep = t->eps[t->served[i]];
        if (graceful) {
            tempo__stream_send_bye(&ep->stream);
        } else {
            tempo__stream_send_abort(&ep->stream);
        }
    }
    for (;;) {
        int busy = 0;
        ucp_worker_progress(t->worker);
        for (int i = 0; i < t->nserved; i++) {
            ucx_ep_t *ep = t->eps[t->served[i]];
            if (ep->err != UCS_OK || w->peers[ep->peer].left || ep->stream.state == STREAM_FAILED) {
                continue; /* nobody reads it any more */
            }
            if (!tempo__stream_send_idle(&ep->stream)) {
                tempo__stream_progress_send(&ep->stream);
            }
            busy += !ep_flushed(ep);
        }
        if (!busy || tempo__now_ns() > until) {
            break;
        }
    }
    TEMPO_INFO(TEMPO_SUB_TRANSPORT, "ucx: %llu payloads sent and %llu received zero-copy",
               (unsigned long long)t->nexposed, (unsigned long long)t->nfetched);
    /* Close the endpoints: flush mode delivers what is in flight; forced after a failure. */
    void **reqs = t->nserved ? tempo__calloc((size_t)t->nserved, sizeof(void *), "ucx close")
                             : NULL;
    for (int i = 0; i < t->nserved; i++) {
        ucx_ep_t *ep = t->eps[t->served[i]];
        if (!ep->ep) {
            continue; /* killed */
        }
        if (ep->rdata) {
            ucp_stream_data_release(ep->ep, ep->rdata);
            ep->rdata = NULL;
        }
        ucp_request_param_t p = {.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
                                 .flags = graceful && ep->err == UCS_OK
                                              ? 0
                                              : UCP_EP_CLOSE_FLAG_FORCE};
        ucs_status_ptr_t r = ucp_ep_close_nbx(ep->ep, &p);
        if (reqs && r && !UCS_PTR_IS_ERR(r)) {
            reqs[i] = r;
        }
        ep->ep = NULL;
    }
    for (;;) {
        int busy = 0;
        ucp_worker_progress(t->worker);
        for (int i = 0; reqs && i < t->nserved; i++) {
            if (reqs[i] && ucp_request_check_status(reqs[i]) != UCS_INPROGRESS) {
                ucp_request_free(reqs[i]);
                reqs[i] = NULL;
            }
            busy += reqs[i] != NULL;
        }
        if (!busy || tempo__now_ns() > until) {
            break;
        }
    }
    for (int i = 0; reqs && i < t->nserved; i++) {
        if (reqs[i]) {
            ucp_request_free(reqs[i]); /* still closing: the worker's destruction ends it */
        }
    }
    tempo__free(reqs);
    /* The streams end while the context lives: they release their exposures (registrations)
     * and drop their fetches (kill() finds the endpoint closed already). */
    for (int i = 0; t->eps && i < t->nserved; i++) {
        ucx_ep_t *ep = t->eps[t->served[i]];
        ep->killed = 1;
        tempo__stream_fini(&ep->stream);
    }
    if (t->worker) {
        ucp_worker_destroy(t->worker);
    }
    for (int i = 0; i < REG_MAX; i++) {
        if (t->regs[i].refs) { /* none is left by a stream; kept for safety */
            t->regs[i].refs = 1;
            reg_put(t, &t->regs[i]);
        }
    }
    if (t->ctx) {
        ucp_cleanup(t->ctx);
    }
    if (quiet) {
        ucs_log_pop_handler();
    }
    /* Only now: UCX may have completed requests on the rings and fetch records until the worker
     * went (a fetch whose callback never came is freed here, its rkey with the worker). */
    for (int i = 0; t->eps && i < t->nserved; i++) {
        ucx_ep_t *ep = t->eps[t->served[i]];
        free_fetches(&ep->fetches);
        tempo__free(ep->ring);
        tempo__free(ep);
    }
    free_fetches(&t->orphans);
    tempo__free(t->eps);
    tempo__free(t->served);
    tempo__free(t);
}

static int ucx_probe(char *detail, size_t len)
{
    unsigned major, minor, release;
    ucp_get_version(&major, &minor, &release);
    snprintf(detail, len,
             "UCX %u.%u.%u (UCP streams, one worker per job, zero copy where UCX has a "
             "one-sided lane; UCX_TLS picks its transports): used when TEMPO_TRANSPORTS names it",
             major, minor, release);
    return 1;
}

const tempo__tl_backend_t tempo__ucx_backend = {
    .name = "ucx",
    .priority = 50,
    .by_default = 0,
    .caps = TEMPO__TL_CAP_TAGGED | TEMPO__TL_CAP_RMA | TEMPO__TL_CAP_MEMREG | TEMPO__TL_CAP_WAIT_FD,
    .probe = ucx_probe,
    .open = ucx_open,
    .ep = ucx_ep,
    .ops = &ucx_ops,
    .progress = ucx_progress,
    .wait_fd = ucx_wait_fd,
    .doze = ucx_doze,
    .close = ucx_close,
};
