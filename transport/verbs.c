/*
 * verbs.c — the libibverbs transport: one RC queue pair per peer, and under the stream layer a byte
 * pipe made of a receive ring in each rank's memory that the peer fills with RDMA WRITE WITH
 * IMMEDIATE. It is not a message transport: framing, matching, signatures, back-pressure,
 * goodbyes, aborts and notes all come from stream.c, as for shm and tcp.
 *
 * Pipe. Each direction of a pair has a ring of TEMPO_IB_RING_BYTES (a power of two) in the
 * consumer's memory, registered for remote writes, and a send staging ring of the same size in the
 * producer's memory, registered locally: writev() copies the stream's bytes into staging at the
 * producer's offset (tail) and posts an RDMA WRITE WITH IMMEDIATE of them to the same offset of the
 * peer's ring (a write that wraps is a plain RDMA WRITE of the first part followed by the write with
 * the immediate: RC executes them in order, so the second one's completion at the peer covers
 * both). The immediate is the byte count; the consumer adds it to its tail when it polls the
 * receive completion, and read() copies out of the ring. Writes are at most a quarter ring, so the
 * consumer copies out while the rest is on the wire. A staging byte is reused only once the write
 * that carried it has completed and the peer has consumed it.
 *
 * Credits. Every write with an immediate consumes one receive work request at the peer (VB_RQ are
 * posted per queue pair, and each is posted again as soon as its completion is polled). The
 * consumer tells the producer how far it has read and how many receives it has posted again, in a
 * credit message: an RDMA WRITE WITH IMMEDIATE of {head, reposted} (16 bytes) into one of the
 * producer's VB_RQ credit slots, the immediate naming the slot (bit 31 set). A credit goes out once
 * a quarter of the ring has been read or a quarter of the receives have been posted again since the
 * last one; since it is a completion, it wakes a producer that sleeps waiting for room. The
 * producer writes only while (a) the ring has room: tail - head < ring bytes, (b) the peer has a
 * receive for it: data messages keep VB_RQ / 4 + 8 receives free for credit messages, which
 * therefore always find one (a rank sends at most VB_RQ / 4 of them before the other's own credit
 * reports them posted again), and (c) its send queue has room. A slot is not reused before the
 * receive that announced it was posted again, because that needs VB_RQ more messages.
 *
 * Completions. One completion queue per rank for all queue pairs, polled by progress(); its
 * completion channel is the wait descriptor: doze() arms it (ibv_req_notify_cq) and woken()
 * drains its events, so an idle rank sleeps in the control backend's epoll until data, a credit or
 * a send completion arrives. A failed work request (the peer's queue pair is gone: its process
 * died; retries exhausted; a flush after an error) fails the stream naming the peer, after reading
 * whatever the peer said before (a goodbye or an abort notice); after a goodbye it only stops the
 * endpoint. Every work request is signalled except the first half of a wrapping write.
 *
 * Addressing. TEMPO_IB_HCA picks the device (and port: "mlx5_0:1"); by default the first device with
 * an ACTIVE port. On RoCE (Ethernet link layer) every packet carries a GRH: TEMPO_IB_GID_INDEX, or
 * by default the first RoCE v2 GID that is an IPv4-mapped address (routable, what an IPv4 fabric
 * uses), else the first RoCE v2 GID, else the first non-zero one. On InfiniBand the peer is
 * addressed by its LID without a GRH (one subnet) unless TEMPO_IB_GID_INDEX is set, which adds the
 * GRH with that GID. Only RoCE was run (Soft-RoCE, tests/rdma/); the InfiniBand path is written to
 * the same attributes as ibv_rc_pingpong but untested here. The path MTU is the smaller of both
 * ports' active MTUs.
 *
 * Setup (open): with every wanted peer, two fixed-size messages over the control backend: the
 * connection data (usable or why not, QP number, PSN, LID, GID, MTU, ring and slot addresses and
 * rkey, ring size) and, after the queue pair reached RTS, whether it did. A peer is served only
 * when both ends said yes twice, so both ends choose alike; a rank without a device or library
 * still answers (unusable, with the reason, which both ends log), so its peers fall back to the
 * next transport of TEMPO_TRANSPORTS.
 */
#include "config.h"

#include "transport/tl_int.h"
#include "core/auth.h"
#include "core/cfg.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define VB_RQ 256                   /* receive work requests per queue pair, and credit slots */
#define VB_SQ (VB_RQ + 64)          /* send work requests per queue pair */
#define VB_CSRC 16                  /* local sources of credit messages in flight */
#define VB_DATA_MSGS (VB_RQ - VB_RQ / 4 - 8) /* receives data messages may use at the peer */
#define VB_IMM_CREDIT 0x80000000u
#define VB_CONN_MAGIC 0x76626331u /* "vbc1" */
#define CODE_CONN 0x76620001u     /* setup message tags (tempo__ctrl_exchange) */
#define CODE_READY 0x76620002u

/* wr_id: the endpoint's address with the kind in its low bits */
#define K_RECV 1u
#define K_SEND 2u
#define K_MASK 7u

#define VB_READ_CHUNK (16u << 20) /* bytes per RDMA READ work request */

enum { S_DATA = 1, S_CREDIT = 2, S_READ = 3 };

typedef struct {
    uint64_t head;     /* bytes of the ring the consumer has read */
    uint64_t reposted; /* receive work requests it has posted again */
} vb_credit_t;

/* A signalled send work request, in posting order (RC completes them in that order). */
typedef struct {
    uint64_t val; /* S_DATA: the producer's tail after it; S_READ: the fetch (vb_fetch_t) */
    uint32_t len; /* S_READ: bytes */
    uint8_t kind;
    uint8_t nwr; /* send queue entries it stands for (an unsignalled one before it) */
} vb_sent_t;

/* A registration of the cache (see "Registration cache" below). */
typedef struct vb_reg {
    tempo__list_t link;   /* vb_tl_t.regs, most recently used first */
    uintptr_t start, end; /* whole pages */
    struct ibv_mr *mr;
    int refs; /* exposures and fetches using it */
    int access;
} vb_reg_t;

/* What expose() writes and fetch() reads. */
typedef struct {
    uint64_t addr, len;
    uint32_t rkey, pad;
} vb_desc_t;

/* A fetch in flight: RDMA READs of the peer's exposed buffer into dst (registered: reg), or chunk
 * by chunk into the endpoint's bounce buffer and copied (reg NULL: dst could not be registered). */
typedef struct vb_fetch {
    tempo__list_t link; /* vb_ep_t.fetches, in order */
    void *op;           /* the stream's, for tempo__stream_fetched */
    char *dst;
    uint64_t raddr;
    uint32_t rkey;
    size_t len, posted, done;
    vb_reg_t *reg;
} vb_fetch_t;

/* Connection data, exchanged with every wanted peer (both ends the same layout). */
typedef struct {
    uint32_t magic;
    uint32_t usable;
    uint32_t qpn, psn;
    uint16_t lid;
    uint8_t link_layer; /* IBV_LINK_LAYER_* */
    uint8_t mtu;        /* enum ibv_mtu, the port's active MTU */
    uint8_t global;     /* packets need a GRH (RoCE, or TEMPO_IB_GID_INDEX set on InfiniBand) */
    uint8_t pad[3];
    uint8_t gid[16];
    uint64_t ring_addr, ring_bytes;
    uint64_t slots_addr; /* VB_RQ credit slots of vb_credit_t */
    uint32_t rkey, nslots;
    char why[120]; /* !usable: the reason, for both ends' logs */
} vb_conn_t;

typedef struct vb_ep {
    tempo__stream_t stream;
    struct vb_tl *tl;
    int peer;
    int dead; /* a work request failed: nothing more is posted */
    int killed; /* the queue pair was moved to the error state (vb_kill) */
    char fail[128]; /* a post failed inside a pipe call: progress fails the stream with this */
    struct ibv_qp *qp;
    uint32_t psn;

    /* Inbound (peer -> this rank): ring and credit slots, written by the peer. */
    char *in_mem; /* ring (ring_bytes), then VB_RQ slots */
    size_t in_len;
    struct ibv_mr *in_mr;
    uint64_t mask; /* ring_bytes - 1 */
    vb_credit_t *slots;
    uint64_t in_tail;    /* bytes arrived */
    uint64_t in_head;    /* bytes read */
    uint64_t reposted;   /* receive work requests posted again */
    int repost;          /* completions polled whose receive is not posted again yet */
    uint64_t said_head;  /* head and reposted in the last credit sent */
    uint64_t said_reposted;

    /* Outbound (this rank -> peer): staging mirrors the peer's ring. */
    char *out_mem; /* staging (peer's ring_bytes), then VB_CSRC credit sources */
    size_t out_len;
    struct ibv_mr *out_mr;
    vb_credit_t *csrc;
    char *bounce; /* fetches into memory that cannot be registered read through it */
    vb_fetch_t *bounce_user;
    tempo__list_t fetches; /* vb_fetch_t in flight */
    uint64_t r_ring, r_slots, r_bytes; /* the peer's ring and slots, its ring size */
    uint32_t r_rkey, r_nslots;
    uint64_t tail;          /* bytes written to the peer */
    uint64_t head_seen;     /* bytes the peer has read, as its last credit said */
    uint64_t tx_done;       /* staging bytes whose writes completed */
    uint64_t sent;          /* messages that took a receive at the peer */
    uint64_t peer_reposted; /* receives it has posted again, as its last credit said */
    uint64_t credits, credits_done; /* credit messages posted and completed */
    vb_sent_t sq[VB_SQ];
    unsigned sq_head, sq_n; /* signalled entries pending */
    int sq_used;            /* send queue entries pending */
} vb_ep_t;

typedef struct vb_tl {
    tempo__world_t *world;
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_comp_channel *ch;
    struct ibv_cq *cq;
    struct ibv_port_attr pattr;
    int port;
    int gid_index; /* -1: no GRH (InfiniBand by LID) */
    union ibv_gid gid;
    int max_rd_atom;
    int max_cqe; /* the device's largest completion queue */
    size_t ring_bytes;
    char desc[160]; /* device, port, addressing: for the logs */
    vb_ep_t **eps;  /* (world size) NULL unless verbs serves the peer */
    int *served;    /* world ranks with an endpoint */
    int nserved;
    int closing; /* failures are expected from now on: the peers tear down too */
    tempo__list_t regs; /* the registration cache */
    int nregs_unused;
    int reg_warned;
    long page;
    /* Counts for the closing log line (tests read it): payloads exposed and refused (copied
     * through the ring instead), fetches and those through the bounce buffer, ring bytes sent. */
    uint64_t n_exposed, n_unexposed, n_fetched, n_bounced, ring_sent;
} vb_tl_t;

/* ---------------------------------------------------------------------------------------------- */
/* Device                                                                                         */
/* ---------------------------------------------------------------------------------------------- */

static const char *link_name(int ll)
{
    return ll == IBV_LINK_LAYER_ETHERNET ? "RoCE" : ll == IBV_LINK_LAYER_INFINIBAND ? "InfiniBand"
                                                                                     : "unknown";
}

static int gid_zero(const union ibv_gid *g)
{
    static const union ibv_gid z;
    return memcmp(g, &z, sizeof(z)) == 0;
}

static int gid_v4mapped(const union ibv_gid *g)
{
    static const uint8_t pre[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    return memcmp(g->raw, pre, sizeof(pre)) == 0;
}

/* RoCE without TEMPO_IB_GID_INDEX: the first RoCE v2 IPv4-mapped GID, else the first RoCE v2 GID,
 * else the first non-zero one; -1 when the table is empty. */
static int gid_auto(struct ibv_context *ctx, int port, int len)
{
    int best = -1, rank_best = 0;
    for (int i = 0; i < len; i++) {
        struct ibv_gid_entry e;
        int v2, r;
        if (ibv_query_gid_ex(ctx, (uint32_t)port, (uint32_t)i, &e, 0) == 0) {
            v2 = e.gid_type == IBV_GID_TYPE_ROCE_V2;
        } else {
            union ibv_gid g; /* older kernels: no type, guess by the address */
            if (ibv_query_gid(ctx, (uint8_t)port, i, &g) != 0) {
                continue;
            }
            memcpy(e.gid.raw, g.raw, sizeof(g.raw));
            v2 = 0;
        }
        if (gid_zero(&e.gid)) {
            continue;
        }
        r = v2 && gid_v4mapped(&e.gid) ? 4 : v2 ? 3 : gid_v4mapped(&e.gid) ? 2 : 1;
        if (r > rank_best) {
            best = i;
            rank_best = r;
        }
    }
    return best;
}

/* Why ibv_get_device_list returned no list (err: its errno). */
static void no_devices(char *why, size_t wlen, int err)
{
    if (err == ENOSYS) {
        snprintf(why, wlen, "no RDMA device (the kernel has no RDMA support loaded: no "
                            "/sys/class/infiniband)");
    } else {
        snprintf(why, wlen, "ibv_get_device_list: %s", strerror(err));
    }
}

/* Choose the port and GID of an open device; 0, or -1 with why. */
static int port_pick(vb_tl_t *t, int want_port, char *why, size_t wlen)
{
    struct ibv_device_attr da;
    const char *name = ibv_get_device_name(t->ctx->device);
    if (ibv_query_device(t->ctx, &da) != 0) {
        snprintf(why, wlen, "ibv_query_device(%s): %s", name, strerror(errno));
        return -1;
    }
    t->max_rd_atom = da.max_qp_rd_atom;
    t->max_cqe = da.max_cqe;
    char states[96] = "";
    size_t o = 0;
    for (int p = 1; p <= da.phys_port_cnt; p++) {
        if (want_port && p != want_port) {
            continue;
        }
        struct ibv_port_attr pa;
        if (ibv_query_port(t->ctx, (uint8_t)p, &pa) != 0) {
            continue;
        }
        if (pa.state != IBV_PORT_ACTIVE) {
            o += (size_t)snprintf(states + o, o < sizeof(states) ? sizeof(states) - o : 0,
                                  "%sport %d %s", o ? ", " : "", p,
                                  ibv_port_state_str(pa.state));
            continue;
        }
        t->port = p;
        t->pattr = pa;
        break;
    }
    if (!t->port) {
        if (want_port > da.phys_port_cnt) {
            snprintf(why, wlen, "%s has no port %d (it has %d)", name, want_port,
                     da.phys_port_cnt);
        } else {
            snprintf(why, wlen, "%s has no ACTIVE port (%s)", name, states);
        }
        return -1;
    }
    int ll = t->pattr.link_layer, gi = tempo__cfg.ib_gid_index;
    if (gi >= t->pattr.gid_tbl_len) {
        snprintf(why, wlen, "TEMPO_IB_GID_INDEX=%d: %s port %d has %d GIDs", gi, name, t->port,
                 t->pattr.gid_tbl_len);
        return -1;
    }
    if (gi < 0 && ll == IBV_LINK_LAYER_ETHERNET) {
        gi = gid_auto(t->ctx, t->port, t->pattr.gid_tbl_len);
        if (gi < 0) {
            snprintf(why, wlen, "%s port %d (RoCE) has no GID (is its network device up, with an "
                                "address?)",
                     name, t->port);
            return -1;
        }
    }
    t->gid_index = gi;
    char gtxt[INET6_ADDRSTRLEN] = "-";
    if (gi >= 0) {
        if (ibv_query_gid(t->ctx, (uint8_t)t->port, gi, &t->gid) != 0 || gid_zero(&t->gid)) {
            snprintf(why, wlen, "%s port %d: GID index %d is empty", name, t->port, gi);
            return -1;
        }
        inet_ntop(AF_INET6, t->gid.raw, gtxt, sizeof(gtxt));
    }
    if (gi >= 0) {
        snprintf(t->desc, sizeof(t->desc), "%s port %d (%s, GID index %d %s%s)", name, t->port,
                 link_name(ll), gi, gtxt, tempo__cfg.ib_gid_index < 0 ? ", chosen" : "");
    } else {
        snprintf(t->desc, sizeof(t->desc), "%s port %d (%s, LID %u)", name, t->port,
                 link_name(ll), t->pattr.lid);
    }
    return 0;
}

/* Open the device TEMPO_IB_HCA names (or the first with an ACTIVE port) and its protection domain,
 * completion channel and completion queue (cqe entries); 0, or -1 with why (unusable here). */
static int device_open(vb_tl_t *t, int cqe, char *why, size_t wlen)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list) {
        no_devices(why, wlen, errno);
        return -1;
    }
    char name[64] = "";
    int want_port = 0;
    const char *hca = tempo__cfg.ib_hca;
    if (hca[0]) {
        const char *colon = strchr(hca, ':');
        size_t nl = colon ? (size_t)(colon - hca) : strlen(hca);
        snprintf(name, sizeof(name), "%.*s", (int)nl, hca);
        want_port = colon ? atoi(colon + 1) : 0;
    }
    int rc = -1;
    if (n == 0) {
        snprintf(why, wlen, "no RDMA device (ibv_get_device_list lists none)");
    } else {
        char names[128] = "";
        size_t o = 0;
        why[0] = 0;
        for (int i = 0; i < n && rc != 0; i++) {
            const char *dn = ibv_get_device_name(list[i]);
            o += (size_t)snprintf(names + o, o < sizeof(names) ? sizeof(names) - o : 0, "%s%s",
                                  o ? ", " : "", dn);
            if (name[0] && strcmp(dn, name) != 0) {
                continue;
            }
            t->ctx = ibv_open_device(list[i]);
            if (!t->ctx) {
                snprintf(why, wlen, "ibv_open_device(%s): %s", dn, strerror(errno));
                continue;
            }
            t->port = 0;
            if (port_pick(t, want_port, why, wlen) == 0) {
                rc = 0;
            } else {
                ibv_close_device(t->ctx);
                t->ctx = NULL;
            }
        }
        if (rc != 0 && name[0] && !why[0]) {
            snprintf(why, wlen, "TEMPO_IB_HCA=%s: no such device (there are: %s)", hca, names);
        }
    }
    ibv_free_device_list(list);
    if (rc != 0) {
        return -1;
    }
    if (cqe > t->max_cqe) {
        /* every peer's queue pairs complete into one queue, which must hold them all */
        snprintf(why, wlen, "%s: its peers need a completion queue of %d entries, the device "
                            "allows %d", t->desc, cqe, t->max_cqe);
        return -1;
    }
    t->pd = ibv_alloc_pd(t->ctx);
    t->ch = t->pd ? ibv_create_comp_channel(t->ctx) : NULL;
    t->cq = t->ch ? ibv_create_cq(t->ctx, cqe, NULL, t->ch, 0) : NULL;
    if (!t->cq) {
        snprintf(why, wlen, "%s: cannot create %s: %s", t->desc,
                 !t->pd ? "a protection domain" : !t->ch ? "a completion channel"
                                                          : "a completion queue",
                 strerror(errno));
        return -1;
    }
    int fl = fcntl(t->ch->fd, F_GETFL);
    if (fl < 0 || fcntl(t->ch->fd, F_SETFL, fl | O_NONBLOCK) != 0) {
        snprintf(why, wlen, "fcntl(completion channel): %s", strerror(errno));
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* Work requests                                                                                  */
/* ---------------------------------------------------------------------------------------------- */

static uint64_t wr_id(vb_ep_t *ep, unsigned kind)
{
    return (uint64_t)(uintptr_t)ep | kind;
}

/* Post a chain of send work requests whose last one is signalled; returns 0 or errno. */
static int post_send(vb_ep_t *ep, struct ibv_send_wr *first, int nwr, uint8_t kind, uint64_t val)
{
    struct ibv_send_wr *bad = NULL;
    int rc = ibv_post_send(ep->qp, first, &bad);
    if (rc != 0) {
        return rc;
    }
    vb_sent_t *s = &ep->sq[(ep->sq_head + ep->sq_n) % VB_SQ];
    s->val = val;
    s->kind = kind;
    s->nwr = (uint8_t)nwr;
    ep->sq_n++;
    ep->sq_used += nwr;
    return 0;
}

static void post_recvs(vb_ep_t *ep, int n)
{
    struct ibv_recv_wr wr[32], *bad = NULL;
    while (n > 0 && !ep->dead) {
        int k = TEMPO_MIN(n, 32);
        for (int i = 0; i < k; i++) {
            wr[i] = (struct ibv_recv_wr){.wr_id = wr_id(ep, K_RECV), .sg_list = NULL, .num_sge = 0,
                                         .next = i + 1 < k ? &wr[i + 1] : NULL};
        }
        int rc = ibv_post_recv(ep->qp, wr, &bad);
        if (rc != 0) {
            snprintf(ep->fail, sizeof(ep->fail), "cannot be received from (ibv_post_recv: %s)",
                     strerror(rc));
            ep->dead = 1;
            return;
        }
        n -= k;
        ep->reposted += (uint64_t)k;
    }
}

/* Tell the peer what was read and posted again, once a quarter of either is new (see the file
 * header); a credit that cannot go now (no receive free at the peer, a full send queue) is sent
 * by a later call. Called inside the stream's read, so a failure is only noted (ep->fail). */
static void credit_maybe(vb_ep_t *ep)
{
    if (ep->repost) {
        int n = ep->repost;
        ep->repost = 0;
        post_recvs(ep, n);
    }
    if (ep->dead || (ep->in_head - ep->said_head < (ep->mask + 1) / 4 &&
                     ep->reposted - ep->said_reposted < VB_RQ / 4)) {
        return;
    }
    if (ep->sent - ep->peer_reposted >= ep->r_nslots || ep->sq_used >= VB_SQ ||
        ep->credits - ep->credits_done >= VB_CSRC) {
        return;
    }
    vb_credit_t *src = &ep->csrc[ep->credits % VB_CSRC];
    src->head = ep->in_head;
    src->reposted = ep->reposted;
    uint32_t slot = (uint32_t)(ep->credits % ep->r_nslots);
    struct ibv_sge sge = {(uint64_t)(uintptr_t)src, sizeof(*src), ep->out_mr->lkey};
    struct ibv_send_wr wr = {.wr_id = wr_id(ep, K_SEND),
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
                             .send_flags = IBV_SEND_SIGNALED,
                             .imm_data = htonl(VB_IMM_CREDIT | slot)};
    wr.wr.rdma.remote_addr = ep->r_slots + (uint64_t)slot * sizeof(vb_credit_t);
    wr.wr.rdma.rkey = ep->r_rkey;
    int rc = post_send(ep, &wr, 1, S_CREDIT, 0);
    if (rc != 0) {
        snprintf(ep->fail, sizeof(ep->fail), "cannot be written to (ibv_post_send: %s)",
                 strerror(rc));
        ep->dead = 1;
        return;
    }
    ep->credits++;
    ep->sent++;
    ep->said_head = src->head;
    ep->said_reposted = src->reposted;
}

/* ---------------------------------------------------------------------------------------------- */
/* Registration cache                                                                             */
/* ---------------------------------------------------------------------------------------------- */

/* Registrations of users' memory (exposed send buffers, fetch destinations) cover whole pages and
 * are shared: a request inside a registered range with the access it needs takes a reference.
 * Invalidation rule: when its last reference goes, a registration is deregistered at once, unless
 * TEMPO_IB_REG_CACHE keeps up to that many unused ones (least recently used go first). Deregistering
 * at once is always right; keeping one is right only while the program does not free that memory
 * and get the same addresses back for another buffer (the registration would still point at the
 * freed pages, and a transfer from or into the new buffer would move the old pages' bytes): the
 * library cannot see free(), so keeping is the program's promise, off by default. Registrations
 * that failed (the locked-memory limit, ulimit -l) fall back to copying: an exposure through the
 * ring, a fetch through the endpoint's registered bounce buffer. */

static void reg_drop(vb_tl_t *t, vb_reg_t *r)
{
    tempo__list_remove(&r->link);
    t->nregs_unused -= r->refs == 0;
    ibv_dereg_mr(r->mr);
    tempo__free(r);
}

static vb_reg_t *reg_get(vb_tl_t *t, const void *buf, size_t len, int access)
{
    uintptr_t pg = (uintptr_t)t->page;
    uintptr_t start = (uintptr_t)buf & ~(pg - 1);
    uintptr_t end = ((uintptr_t)buf + len + pg - 1) & ~(pg - 1);
    tempo__list_t *pos;
    for (pos = t->regs.next; pos != &t->regs; pos = pos->next) {
        vb_reg_t *r = tempo__container_of(pos, vb_reg_t, link);
        if (r->start <= start && r->end >= end && (r->access & access) == access) {
            t->nregs_unused -= r->refs == 0;
            r->refs++;
            tempo__list_remove(&r->link);
            tempo__list_push_back(t->regs.next, &r->link); /* to the front */
            return r;
        }
    }
    vb_reg_t *r = tempo__calloc(1, sizeof(*r), "verbs registration");
    if (!r) {
        return NULL;
    }
    /* Both accesses when the pages allow (the same range may serve the other way later). */
    r->access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
    r->mr = ibv_reg_mr(t->pd, (void *)start, end - start, r->access);
    if (!r->mr && access != r->access) {
        r->access = access;
        r->mr = ibv_reg_mr(t->pd, (void *)start, end - start, r->access);
    }
    if (!r->mr) {
        if (!t->reg_warned) {
            char b[32];
            t->reg_warned = 1;
            TEMPO_WARN(TEMPO_SUB_TRANSPORT,
                       "verbs: cannot register %s of memory for a zero-copy transfer (%s%s); such "
                       "messages are copied instead (said once)",
                       tempo__fmt_bytes(end - start, b, sizeof(b)), strerror(errno),
                       errno == ENOMEM || errno == EPERM ? ": the locked-memory limit, ulimit -l?"
                                                         : "");
        }
        tempo__free(r);
        return NULL;
    }
    r->start = start;
    r->end = end;
    r->refs = 1;
    tempo__list_push_back(t->regs.next, &r->link); /* to the front */
    return r;
}

static void reg_put(vb_tl_t *t, vb_reg_t *r)
{
    if (!r || --r->refs > 0) {
        return;
    }
    t->nregs_unused++;
    while (t->nregs_unused > tempo__cfg.ib_reg_cache) { /* the least recently used unused one */
        tempo__list_t *pos;
        for (pos = t->regs.prev; pos != &t->regs; pos = pos->prev) {
            vb_reg_t *u = tempo__container_of(pos, vb_reg_t, link);
            if (u->refs == 0) {
                reg_drop(t, u);
                break;
            }
        }
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Zero-copy payloads (the stream's expose/fetch)                                                 */
/* ---------------------------------------------------------------------------------------------- */

static size_t vb_expose(void *pipe, const void *buf, size_t len, void *desc, void **handle)
{
    vb_ep_t *ep = pipe;
    vb_reg_t *r = ep->dead ? NULL : reg_get(ep->tl, buf, len, IBV_ACCESS_REMOTE_READ);
    if (!r) {
        ep->tl->n_unexposed++;
        return 0; /* through the ring */
    }
    ep->tl->n_exposed++;
    vb_desc_t d = {(uint64_t)(uintptr_t)buf, len, r->mr->rkey, 0};
    memcpy(desc, &d, sizeof(d));
    *handle = r;
    return sizeof(d);
}

static void vb_release(void *pipe, void *handle)
{
    vb_ep_t *ep = pipe;
    reg_put(ep->tl, handle);
}

/* Post what the fetches in flight may post now: every chunk of a registered destination, one
 * chunk at a time through the bounce buffer; in order, within the send queue. */
static void fetch_pump(vb_ep_t *ep)
{
    tempo__list_t *pos;
    for (pos = ep->fetches.next; pos != &ep->fetches && !ep->dead; pos = pos->next) {
        vb_fetch_t *f = tempo__container_of(pos, vb_fetch_t, link);
        while (f->posted < f->len && ep->sq_used < VB_SQ) {
            size_t cap = f->reg ? VB_READ_CHUNK : (size_t)ep->tl->ring_bytes;
            if (!f->reg && ep->bounce_user) {
                break;
            }
            size_t n = TEMPO_MIN(f->len - f->posted, cap);
            struct ibv_sge sge = {
                (uint64_t)(uintptr_t)(f->reg ? f->dst + f->posted : ep->bounce), (uint32_t)n,
                f->reg ? f->reg->mr->lkey : ep->out_mr->lkey};
            struct ibv_send_wr wr = {.wr_id = wr_id(ep, K_SEND),
                                     .sg_list = &sge,
                                     .num_sge = 1,
                                     .opcode = IBV_WR_RDMA_READ,
                                     .send_flags = IBV_SEND_SIGNALED};
            wr.wr.rdma.remote_addr = f->raddr + f->posted;
            wr.wr.rdma.rkey = f->rkey;
            int rc = post_send(ep, &wr, 1, S_READ, (uint64_t)(uintptr_t)f);
            if (rc != 0) {
                snprintf(ep->fail, sizeof(ep->fail), "could not be read from (ibv_post_send: %s)",
                         strerror(rc));
                ep->dead = 1;
                return;
            }
            ep->sq[(ep->sq_head + ep->sq_n - 1) % VB_SQ].len = (uint32_t)n;
            if (!f->reg) {
                ep->bounce_user = f;
            }
            f->posted += n;
        }
        if (f->posted < f->len) {
            return; /* in order */
        }
    }
}

static int vb_fetch(void *pipe, const void *desc, size_t desc_len, void *dst, size_t len, void *op)
{
    vb_ep_t *ep = pipe;
    vb_desc_t d;
    if (desc_len != sizeof(d)) {
        return -EPROTO;
    }
    memcpy(&d, desc, sizeof(d));
    if (d.len != len || d.addr + len < d.addr) {
        return -EPROTO;
    }
    if (ep->dead) {
        return -EPIPE;
    }
    vb_fetch_t *f = tempo__calloc(1, sizeof(*f), "verbs fetch");
    if (!f) {
        return -ENOMEM;
    }
    f->op = op;
    f->dst = dst;
    f->raddr = d.addr;
    f->rkey = d.rkey;
    f->len = len;
    f->reg = reg_get(ep->tl, dst, len, IBV_ACCESS_LOCAL_WRITE); /* NULL: through the bounce */
    ep->tl->n_fetched++;
    ep->tl->n_bounced += !f->reg;
    tempo__list_push_back(&ep->fetches, &f->link);
    fetch_pump(ep);
    return 0;
}

/* For waits inside the stream (a cancel waiting for a zero-copy transfer to end): one progress
 * pass over every endpoint but this one (whose stream the caller drives). The others matter: the
 * peer may itself wait in such a cancel for a FIN that this rank owes it on another stream, and a
 * third rank for this one (cancels of one collective's sends across a ring of ranks). */
static int progress_eps(vb_tl_t *t, vb_ep_t *skip);
static void vb_poll(void *pipe)
{
    vb_ep_t *ep = pipe;
    progress_eps(ep->tl, ep);
    fetch_pump(ep);
}

/* The stream ends with zero-copy transfers in flight: the queue pair goes to the error state (the
 * peer can no longer read exposed memory, and no read response lands in a destination any more),
 * and the fetches are forgotten. */
static void vb_kill(void *pipe)
{
    vb_ep_t *ep = pipe;
    if (ep->qp && !ep->killed) {
        struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
        ibv_modify_qp(ep->qp, &a, IBV_QP_STATE);
        ep->killed = 1;
    }
    ep->dead = 1;
    while (!tempo__list_empty(&ep->fetches)) {
        vb_fetch_t *f = tempo__container_of(ep->fetches.next, vb_fetch_t, link);
        tempo__list_remove(&f->link);
        reg_put(ep->tl, f->reg);
        tempo__free(f);
    }
    ep->bounce_user = NULL;
}

/* ---------------------------------------------------------------------------------------------- */
/* Ring pipe                                                                                      */
/* ---------------------------------------------------------------------------------------------- */

/* Copy n bytes of iov starting at byte skip into staging at the producer's offset off (wrapping). */
static void stage(vb_ep_t *ep, const struct iovec *iov, int iovcnt, size_t skip, uint64_t off,
                  size_t n)
{
    uint64_t cap = ep->r_bytes;
    for (int i = 0; i < iovcnt && n > 0; i++) {
        if (skip >= iov[i].iov_len) {
            skip -= iov[i].iov_len;
            continue;
        }
        const char *src = (const char *)iov[i].iov_base + skip;
        size_t k = TEMPO_MIN(iov[i].iov_len - skip, n);
        skip = 0;
        while (k > 0) {
            uint64_t o = off & (cap - 1);
            size_t m = (size_t)TEMPO_MIN((uint64_t)k, cap - o);
            memcpy(ep->out_mem + o, src, m);
            src += m;
            off += m;
            k -= m;
            n -= m;
        }
    }
}

static ssize_t vb_writev(void *pipe, const struct iovec *iov, int iovcnt)
{
    vb_ep_t *ep = pipe;
    if (ep->dead) {
        return -EPIPE;
    }
    size_t want = 0;
    for (int i = 0; i < iovcnt; i++) {
        want += iov[i].iov_len;
    }
    uint64_t cap = ep->r_bytes, quarter = cap / 4;
    size_t done = 0;
    while (done < want && ep->sent - ep->peer_reposted < VB_DATA_MSGS && ep->sq_used + 2 <= VB_SQ) {
        uint64_t low = TEMPO_MIN(ep->head_seen, ep->tx_done);
        uint64_t space = cap - (ep->tail - low);
        if (space == 0) {
            break;
        }
        size_t n = (size_t)TEMPO_MIN(TEMPO_MIN((uint64_t)(want - done), space), quarter);
        stage(ep, iov, iovcnt, done, ep->tail, n);
        uint64_t off = ep->tail & (cap - 1);
        size_t first = (size_t)TEMPO_MIN((uint64_t)n, cap - off);
        struct ibv_sge sge[2] = {
            {(uint64_t)(uintptr_t)(ep->out_mem + off), (uint32_t)first, ep->out_mr->lkey},
            {(uint64_t)(uintptr_t)ep->out_mem, (uint32_t)(n - first), ep->out_mr->lkey}};
        struct ibv_send_wr wr[2];
        memset(wr, 0, sizeof(wr));
        int nwr = first < n ? 2 : 1;
        for (int i = 0; i < nwr; i++) {
            wr[i].wr_id = wr_id(ep, K_SEND);
            wr[i].sg_list = &sge[i];
            wr[i].num_sge = 1;
            wr[i].opcode = i + 1 < nwr ? IBV_WR_RDMA_WRITE : IBV_WR_RDMA_WRITE_WITH_IMM;
            wr[i].send_flags = i + 1 < nwr ? 0 : IBV_SEND_SIGNALED;
            wr[i].next = i + 1 < nwr ? &wr[i + 1] : NULL;
            wr[i].wr.rdma.remote_addr = ep->r_ring + (i == 0 ? off : 0);
            wr[i].wr.rdma.rkey = ep->r_rkey;
        }
        wr[nwr - 1].imm_data = htonl((uint32_t)n);
        int rc = post_send(ep, wr, nwr, S_DATA, ep->tail + n);
        if (rc != 0) {
            ep->dead = 1;
            return done ? (ssize_t)done : -rc;
        }
        ep->tail += n;
        ep->sent++;
        ep->tl->ring_sent += n;
        done += n;
    }
    return (ssize_t)done;
}

static ssize_t vb_read(void *pipe, void *buf, size_t len)
{
    vb_ep_t *ep = pipe;
    uint64_t avail = ep->in_tail - ep->in_head;
    if (avail == 0) {
        return 0;
    }
    uint64_t cap = ep->mask + 1;
    size_t n = (size_t)TEMPO_MIN((uint64_t)len, avail);
    uint64_t off = ep->in_head & ep->mask;
    size_t first = (size_t)TEMPO_MIN((uint64_t)n, cap - off);
    memcpy(buf, ep->in_mem + off, first);
    memcpy((char *)buf + first, ep->in_mem, n - first);
    ep->in_head += n;
    credit_maybe(ep);
    return (ssize_t)n;
}

static const tempo__pipe_ops_t vb_pipe_ops = {.writev = vb_writev,
                                              .read = vb_read,
                                              .expose = vb_expose,
                                              .release = vb_release,
                                              .fetch = vb_fetch,
                                              .poll = vb_poll,
                                              .kill = vb_kill};

static const tempo__tl_ops_t vb_ops = TEMPO__STREAM_EP_OPS("verbs");
TEMPO__STREAM_FIRST(vb_ep_t);

/* ---------------------------------------------------------------------------------------------- */
/* Completions                                                                                    */
/* ---------------------------------------------------------------------------------------------- */

/* A work request of ep failed: read what the peer said before (its goodbye or abort notice may be
 * in the ring, and explains the failure), then fail the stream naming it unless it had left. */
static void ep_failed(vb_ep_t *ep, const struct ibv_wc *wc)
{
    if (ep->dead && ep->stream.state != STREAM_OPEN) {
        return;
    }
    ep->dead = 1;
    if (ep->tl->closing || ep->stream.state != STREAM_OPEN) {
        return;
    }
    int r;
    do {
        r = tempo__stream_progress_recv(&ep->stream);
    } while (r > 0 && ep->stream.state == STREAM_OPEN);
    if (ep->stream.state != STREAM_OPEN) {
        return;
    }
    char why[256];
    int running = tempo__peer_running(ep->tl->world, ep->peer);
    snprintf(why, sizeof(why), "broke the verbs connection (%s %s, vendor error 0x%x)%s",
             (wc->wr_id & K_MASK) == K_RECV ? "receive" : "send", ibv_wc_status_str(wc->status),
             wc->vendor_err,
             running > 0   ? " although its process is still running"
             : running == 0 ? ": its process died or exited without destroying its communicator"
                            : ": the process died or the link failed");
    tempo__stream_broken(&ep->stream, why);
}

static void fetch_pump(vb_ep_t *ep);

static void on_send(vb_ep_t *ep, int ok)
{
    if (ep->sq_n == 0) { /* an unsignalled request that failed (errors always complete) */
        return;
    }
    vb_sent_t *s = &ep->sq[ep->sq_head];
    ep->sq_head = (ep->sq_head + 1) % VB_SQ;
    ep->sq_n--;
    ep->sq_used -= s->nwr;
    if (!ok || ep->dead) { /* (a dead endpoint's fetches are gone: vb_kill) */
        return;
    }
    if (s->kind == S_DATA) {
        ep->tx_done = s->val;
    } else if (s->kind == S_CREDIT) {
        ep->credits_done++;
    } else if (s->kind == S_READ) {
        vb_fetch_t *f = (vb_fetch_t *)(uintptr_t)s->val;
        if (!f->reg) { /* the chunk is in the bounce buffer */
            memcpy(f->dst + f->done, ep->bounce, s->len);
            ep->bounce_user = NULL;
        }
        f->done += s->len;
        if (f->done == f->len) {
            void *op = f->op;
            tempo__list_remove(&f->link);
            reg_put(ep->tl, f->reg);
            tempo__free(f);
            tempo__stream_fetched(&ep->stream, op, TEMPO_OK);
        }
        fetch_pump(ep);
    }
}

static void on_recv(vb_ep_t *ep, const struct ibv_wc *wc)
{
    if (ep->dead) {
        return;
    }
    if (wc->opcode != IBV_WC_RECV_RDMA_WITH_IMM || !(wc->wc_flags & IBV_WC_WITH_IMM)) {
        tempo__stream_broken(&ep->stream, "sent a verbs message that is not a write with "
                                          "immediate data");
        ep->dead = 1;
        return;
    }
    uint32_t imm = ntohl(wc->imm_data);
    ep->repost++;
    if (imm & VB_IMM_CREDIT) {
        uint32_t slot = imm & ~VB_IMM_CREDIT;
        vb_credit_t c = slot < VB_RQ ? ep->slots[slot] : (vb_credit_t){0, 0};
        if (slot >= VB_RQ || c.head < ep->head_seen || c.head > ep->tail ||
            c.reposted < ep->peer_reposted || c.reposted > ep->sent) {
            tempo__stream_broken(&ep->stream, "sent an impossible verbs credit");
            ep->dead = 1;
            return;
        }
        ep->head_seen = c.head;
        ep->peer_reposted = c.reposted;
        return;
    }
    if (imm > ep->mask + 1 - (ep->in_tail - ep->in_head)) {
        tempo__stream_broken(&ep->stream, "overflowed its verbs receive ring");
        ep->dead = 1;
        return;
    }
    ep->in_tail += imm;
}

/* Poll the completion queue dry; returns completions handled. */
static int poll_cq(vb_tl_t *t)
{
    struct ibv_wc wc[32];
    int events = 0, n;
    while ((n = ibv_poll_cq(t->cq, 32, wc)) > 0) {
        for (int i = 0; i < n; i++) {
            vb_ep_t *ep = (vb_ep_t *)(uintptr_t)(wc[i].wr_id & ~(uint64_t)K_MASK);
            if ((wc[i].wr_id & K_MASK) == K_SEND) {
                on_send(ep, wc[i].status == IBV_WC_SUCCESS);
            }
            if (wc[i].status != IBV_WC_SUCCESS) {
                ep_failed(ep, &wc[i]);
            } else if ((wc[i].wr_id & K_MASK) == K_RECV) {
                on_recv(ep, &wc[i]);
            }
        }
        events += n;
    }
    if (n < 0 && !t->closing) {
        tempo__world_fail(t->world, TEMPO_ERR_SYSTEM, "ibv_poll_cq on %s failed", t->desc);
    }
    return events;
}

static int progress_eps(vb_tl_t *t, vb_ep_t *skip)
{
    int events = poll_cq(t);
    for (int i = 0; i < t->nserved; i++) {
        vb_ep_t *ep = t->eps[t->served[i]];
        tempo__stream_t *s = &ep->stream;
        if (ep == skip) {
            continue;
        }
        int moved = 0, r;
        if (!tempo__stream_send_idle(s)) {
            r = tempo__stream_progress_send(s);
            moved += r > 0 ? r : 0;
        }
        if (s->in_payload || ep->in_tail != ep->in_head || s->rtail != s->rhead) {
            r = tempo__stream_progress_recv(s);
            moved += r > 0 ? r : 0;
        }
        credit_maybe(ep);
        if (!tempo__list_empty(&ep->fetches)) {
            fetch_pump(ep);
        }
        if (ep->fail[0] && s->state == STREAM_OPEN) {
            tempo__stream_broken(s, ep->fail);
        }
        if (tempo__stream_heard(s)) { /* (not for control notes: stream.h) */
            tempo__peer_heard(t->world, ep->peer);
        }
        events += moved;
    }
    return events;
}

static int vb_progress(void *inst)
{
    return progress_eps(inst, NULL);
}

static int vb_wait_fd(void *inst)
{
    vb_tl_t *t = inst;
    return t ? t->ch->fd : -1;
}

/* Arm the completion channel before an idle sleep: the next completion makes its descriptor
 * readable. The engine polls once more after this, so a completion that came before is not
 * missed. */
static int vb_doze(void *inst, int sleeping)
{
    vb_tl_t *t = inst;
    if (!t || !sleeping) {
        return 0;
    }
    return ibv_req_notify_cq(t->cq, 0) == 0;
}

static void vb_woken(void *inst)
{
    vb_tl_t *t = inst;
    struct ibv_cq *cq;
    void *ctx;
    while (ibv_get_cq_event(t->ch, &cq, &ctx) == 0) {
        ibv_ack_cq_events(cq, 1);
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Setup and teardown                                                                             */
/* ---------------------------------------------------------------------------------------------- */

static void ep_free(vb_ep_t *ep)
{
    if (!ep) {
        return;
    }
    tempo__stream_fini(&ep->stream); /* (kills the queue pair if zero-copy transfers are open) */
    vb_kill(ep);                     /* fetches the stream no longer knows (failed setup) */
    if (ep->qp) {
        ibv_destroy_qp(ep->qp);
    }
    if (ep->in_mr) {
        ibv_dereg_mr(ep->in_mr);
    }
    if (ep->out_mr) {
        ibv_dereg_mr(ep->out_mr);
    }
    free(ep->in_mem);
    free(ep->out_mem);
    tempo__free(ep);
}

static void *page_alloc(size_t len)
{
    void *p = NULL;
    long pg = sysconf(_SC_PAGESIZE);
    if (posix_memalign(&p, pg > 0 ? (size_t)pg : 4096, len) != 0) {
        return NULL;
    }
    memset(p, 0, len);
    return p;
}

/* The endpoint for peer up to INIT with its receives posted, and its connection data; NULL with
 * why when this rank cannot serve the peer. */
static vb_ep_t *ep_create(vb_tl_t *t, int peer, vb_conn_t *c, char *why, size_t wlen)
{
    vb_ep_t *ep = tempo__calloc(1, sizeof(*ep), "verbs endpoint");
    if (!ep || tempo__stream_init(&ep->stream, t->world, peer, "verbs", &vb_pipe_ops, ep) !=
                   TEMPO_OK) {
        tempo__free(ep);
        snprintf(why, wlen, "out of memory");
        return NULL;
    }
    ep->tl = t;
    ep->peer = peer;
    tempo__list_init(&ep->fetches);
    ep->mask = t->ring_bytes - 1;
    ep->in_len = t->ring_bytes + VB_RQ * sizeof(vb_credit_t);
    ep->in_mem = page_alloc(ep->in_len);
    if (!ep->in_mem) {
        snprintf(why, wlen, "out of memory for a %zu-byte receive ring", ep->in_len);
        goto fail;
    }
    ep->slots = (vb_credit_t *)(ep->in_mem + t->ring_bytes);
    ep->in_mr = ibv_reg_mr(t->pd, ep->in_mem, ep->in_len,
                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!ep->in_mr) {
        snprintf(why, wlen, "cannot register the %zu-byte receive ring: %s%s", ep->in_len,
                 strerror(errno),
                 errno == ENOMEM || errno == EPERM ? " (ulimit -l, the locked-memory limit?)"
                                                   : "");
        goto fail;
    }
    struct ibv_qp_init_attr ia = {.send_cq = t->cq,
                                  .recv_cq = t->cq,
                                  .qp_type = IBV_QPT_RC,
                                  .cap = {.max_send_wr = VB_SQ,
                                          .max_recv_wr = VB_RQ,
                                          .max_send_sge = 1,
                                          .max_recv_sge = 1}};
    ep->qp = ibv_create_qp(t->pd, &ia);
    if (!ep->qp) {
        snprintf(why, wlen, "ibv_create_qp: %s", strerror(errno));
        goto fail;
    }
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
                            .pkey_index = 0,
                            .port_num = (uint8_t)t->port,
                            .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                               IBV_ACCESS_LOCAL_WRITE};
    int rc = ibv_modify_qp(ep->qp, &a,
                           IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (rc != 0) {
        snprintf(why, wlen, "ibv_modify_qp(INIT): %s", strerror(rc));
        goto fail;
    }
    post_recvs(ep, VB_RQ);
    if (ep->dead) {
        snprintf(why, wlen, "%s", ep->fail);
        goto fail;
    }
    ep->reposted = 0; /* counts posts after the first VB_RQ */
    /* A random first sequence number: a packet injected from outside must guess it. */
    uint32_t rnd = 0;
    if (tempo__auth_random(&rnd, sizeof(rnd)) != 0) {
        rnd = (uint32_t)(tempo__now_ns() ^ ((uint64_t)peer << 13) ^ (uint64_t)getpid());
    }
    ep->psn = rnd & 0xffffff;
    c->usable = 1;
    c->qpn = ep->qp->qp_num;
    c->psn = ep->psn;
    c->lid = t->pattr.lid;
    c->link_layer = t->pattr.link_layer;
    c->mtu = (uint8_t)t->pattr.active_mtu;
    c->global = t->gid_index >= 0;
    memcpy(c->gid, t->gid.raw, sizeof(c->gid));
    c->ring_addr = (uint64_t)(uintptr_t)ep->in_mem;
    c->ring_bytes = t->ring_bytes;
    c->slots_addr = (uint64_t)(uintptr_t)ep->slots;
    c->rkey = ep->in_mr->rkey;
    c->nslots = VB_RQ;
    return ep;
fail:
    ep_free(ep);
    return NULL;
}

/* Staging for the peer's ring, then the queue pair to RTR and RTS; 0, or -1 with why. */
static int ep_connect(vb_tl_t *t, vb_ep_t *ep, const vb_conn_t *c, char *why, size_t wlen)
{
    if (c->ring_bytes < 4096 || (c->ring_bytes & (c->ring_bytes - 1)) || c->nslots != VB_RQ ||
        c->link_layer != t->pattr.link_layer || c->global != (t->gid_index >= 0)) {
        snprintf(why, wlen, "its verbs connection data does not match this rank's (%s ring of %llu "
                            "bytes, %u slots, %s%s)",
                 link_name(c->link_layer), (unsigned long long)c->ring_bytes, c->nslots,
                 c->global ? "with" : "without", " GRH");
        return -1;
    }
    ep->r_ring = c->ring_addr;
    ep->r_bytes = c->ring_bytes;
    ep->r_slots = c->slots_addr;
    ep->r_rkey = c->rkey;
    ep->r_nslots = c->nslots;
    ep->out_len = c->ring_bytes + VB_CSRC * sizeof(vb_credit_t) + t->ring_bytes;
    ep->out_mem = page_alloc(ep->out_len);
    if (!ep->out_mem) {
        snprintf(why, wlen, "out of memory for a %zu-byte send staging ring", ep->out_len);
        return -1;
    }
    ep->csrc = (vb_credit_t *)(ep->out_mem + c->ring_bytes);
    ep->bounce = (char *)(ep->csrc + VB_CSRC);
    ep->out_mr = ibv_reg_mr(t->pd, ep->out_mem, ep->out_len, IBV_ACCESS_LOCAL_WRITE);
    if (!ep->out_mr) {
        snprintf(why, wlen, "cannot register the %zu-byte send staging ring: %s", ep->out_len,
                 strerror(errno));
        return -1;
    }
    int rd = TEMPO_MAX(1, TEMPO_MIN(t->max_rd_atom, 16));
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR,
                            .path_mtu = (enum ibv_mtu)TEMPO_MIN(c->mtu, t->pattr.active_mtu),
                            .dest_qp_num = c->qpn,
                            .rq_psn = c->psn,
                            .max_dest_rd_atomic = (uint8_t)rd,
                            .min_rnr_timer = 12};
    a.ah_attr.dlid = c->lid;
    a.ah_attr.sl = 0;
    a.ah_attr.port_num = (uint8_t)t->port;
    if (c->global) {
        a.ah_attr.is_global = 1;
        memcpy(a.ah_attr.grh.dgid.raw, c->gid, sizeof(c->gid));
        a.ah_attr.grh.sgid_index = (uint8_t)t->gid_index;
        a.ah_attr.grh.hop_limit = 64;
    }
    int rc = ibv_modify_qp(ep->qp, &a,
                           IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                               IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc != 0) {
        snprintf(why, wlen, "ibv_modify_qp(RTR): %s", strerror(rc));
        return -1;
    }
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14; /* 4.096 us x 2^14 = 67 ms per try */
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = ep->psn;
    a.max_rd_atomic = (uint8_t)rd;
    rc = ibv_modify_qp(ep->qp, &a,
                       IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                           IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
    if (rc != 0) {
        snprintf(why, wlen, "ibv_modify_qp(RTS): %s", strerror(rc));
        return -1;
    }
    tempo__stream_set_fetch(&ep->stream, tempo__cfg.ib_rndv_bytes);
    return 0;
}

static void vb_close(void *inst, int graceful, uint64_t deadline);

static tempo_status_t vb_open(tempo__world_t *w, const unsigned char *want, uint64_t deadline,
                              void **inst_p)
{
    *inst_p = NULL;
    int nwant = 0;
    for (int p = 0; p < w->size; p++) {
        nwant += want[p] != 0;
    }
    if (nwant == 0) {
        return TEMPO_OK;
    }
    vb_tl_t *t = tempo__calloc(1, sizeof(*t), "verbs transport");
    vb_conn_t *mine = tempo__calloc((size_t)w->size * 2, sizeof(*mine), "verbs setup");
    int32_t *ok = tempo__calloc((size_t)w->size * 2, sizeof(*ok), "verbs setup");
    if (t) {
        t->world = w;
        tempo__list_init(&t->regs);
        t->page = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096;
        t->eps = tempo__calloc((size_t)w->size, sizeof(*t->eps), "verbs endpoints");
        t->served = tempo__calloc((size_t)w->size, sizeof(*t->served), "verbs endpoints");
    }
    if (!t || !mine || !ok || !t->eps || !t->served) {
        vb_close(t, 0, 0);
        tempo__free(mine);
        tempo__free(ok);
        return TEMPO_ERR_NOMEM;
    }
    vb_conn_t *theirs = mine + w->size;
    t->ring_bytes = tempo__cfg.ib_ring_bytes;
    char why[120] = "";
    int cqe = nwant * (VB_RQ + VB_SQ);
    int usable = device_open(t, cqe, why, sizeof(why)) == 0;
    if (!usable) {
        TEMPO_WARN(TEMPO_SUB_TRANSPORT,
                   "verbs is not usable on this rank: %s; its peers use the next transport of "
                   "TEMPO_TRANSPORTS, if any",
                   why);
    }
    for (int p = 0; p < w->size; p++) {
        if (!want[p]) {
            continue;
        }
        mine[p].magic = VB_CONN_MAGIC;
        if (usable) {
            t->eps[p] = ep_create(t, p, &mine[p], why, sizeof(why));
            if (!t->eps[p]) {
                char desc[160];
                TEMPO_WARN(TEMPO_SUB_TRANSPORT, "verbs cannot serve %s: %s",
                           tempo__peer_desc(w, p, desc, sizeof(desc)), why);
            }
        }
        if (!t->eps[p]) {
            snprintf(mine[p].why, sizeof(mine[p].why), "%s", why);
        }
    }
    /* Round 1: connection data. */
    tempo_status_t st = tempo__ctrl_swap(w, want, CODE_CONN, mine, sizeof(vb_conn_t), theirs,
                                         sizeof(vb_conn_t), deadline, "verbs setup");
    for (int p = 0; p < w->size && st == TEMPO_OK; p++) {
        if (!want[p]) {
            continue;
        }
        char desc[160];
        vb_conn_t *c = &theirs[p];
        c->why[sizeof(c->why) - 1] = 0;
        if (c->magic != VB_CONN_MAGIC) {
            st = tempo__err(TEMPO_ERR_REMOTE, "verbs setup: %s sent malformed connection data",
                            tempo__peer_desc(w, p, desc, sizeof(desc)));
        } else if (!c->usable) {
            if (usable) {
                TEMPO_INFO(TEMPO_SUB_TRANSPORT, "verbs does not reach %s: %s",
                           tempo__peer_desc(w, p, desc, sizeof(desc)), c->why);
            }
        } else if (t->eps[p]) {
            ok[p] = ep_connect(t, t->eps[p], c, why, sizeof(why)) == 0;
            if (!ok[p]) {
                TEMPO_WARN(TEMPO_SUB_TRANSPORT, "verbs cannot connect to %s: %s",
                           tempo__peer_desc(w, p, desc, sizeof(desc)), why);
            }
        }
    }
    /* Round 2: both ends reached RTS. */
    if (st == TEMPO_OK) {
        st = tempo__ctrl_swap(w, want, CODE_READY, ok, sizeof(int32_t), ok + w->size,
                              sizeof(int32_t), deadline, "verbs setup");
    }
    for (int p = 0; p < w->size; p++) {
        if (t->eps[p] && (st != TEMPO_OK || !ok[p] || !ok[w->size + p])) {
            ep_free(t->eps[p]);
            t->eps[p] = NULL;
        }
        if (t->eps[p]) {
            t->served[t->nserved++] = p;
        }
    }
    tempo__free(mine);
    tempo__free(ok);
    if (st != TEMPO_OK || t->nserved == 0) {
        vb_close(t, 0, 0);
        return st;
    }
    char b[32];
    TEMPO_INFO(TEMPO_SUB_INIT, "verbs: %s, rings of %s per peer and direction", t->desc,
               tempo__fmt_bytes(t->ring_bytes, b, sizeof(b)));
    *inst_p = t;
    return TEMPO_OK;
}

static void *vb_ep(void *inst, int peer)
{
    vb_tl_t *t = inst;
    return t ? t->eps[peer] : NULL;
}

static void vb_close(void *inst, int graceful, uint64_t deadline)
{
    vb_tl_t *t = inst;
    if (!t) {
        return;
    }
    tempo__world_t *w = t->world;
    if (t->nserved) {
        TEMPO_INFO(TEMPO_SUB_TRANSPORT,
                   "verbs: %llu payloads sent zero-copy, %llu copied (not registered), %llu "
                   "fetched (%llu through the bounce buffer), %llu bytes through the rings",
                   (unsigned long long)t->n_exposed, (unsigned long long)t->n_unexposed,
                   (unsigned long long)t->n_fetched, (unsigned long long)t->n_bounced,
                   (unsigned long long)t->ring_sent);
    }
    t->closing = 1; /* the peers close too: a failure from now on is no news */
    if (graceful) {
        for (int i = 0; i < t->nserved; i++) {
            vb_ep_t *ep = t->eps[t->served[i]];
            if (!ep->dead) {
                tempo__stream_send_bye(&ep->stream);
            }
        }
        /* Until every goodbye is written and every write has completed (is in the peer's memory),
         * or the deadline. */
        for (;;) {
            int busy = 0;
            poll_cq(t);
            for (int i = 0; i < t->nserved; i++) {
                vb_ep_t *ep = t->eps[t->served[i]];
                if (ep->dead || w->peers[ep->peer].left) {
                    continue;
                }
                if (!tempo__stream_send_idle(&ep->stream)) {
                    tempo__stream_progress_send(&ep->stream);
                }
                busy += !tempo__stream_send_idle(&ep->stream) || ep->sq_used > 0;
            }
            if (!busy || tempo__now_ns() > deadline) {
                break;
            }
            struct timespec ts = {0, 50000};
            nanosleep(&ts, NULL);
        }
    }
    for (int p = 0; t->eps && p < w->size; p++) {
        vb_ep_t *ep = t->eps[p];
        if (ep && !graceful && !ep->dead) {
            tempo__stream_send_abort(&ep->stream); /* best effort: posted if there is room */
        }
        ep_free(ep);
    }
    while (!tempo__list_empty(&t->regs)) {
        reg_drop(t, tempo__container_of(t->regs.next, vb_reg_t, link));
    }
    if (t->cq) {
        ibv_destroy_cq(t->cq);
    }
    if (t->ch) {
        ibv_destroy_comp_channel(t->ch);
    }
    if (t->pd) {
        ibv_dealloc_pd(t->pd);
    }
    if (t->ctx) {
        ibv_close_device(t->ctx);
    }
    tempo__free(t->eps);
    tempo__free(t->served);
    tempo__free(t);
}

/* Lists the devices and their ports; usable when one port is ACTIVE. Opens the devices to ask. */
static int vb_probe(char *detail, size_t len)
{
    int n = 0, usable = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list || n == 0) {
        char why[120] = "no RDMA device (ibv_get_device_list lists none)";
        if (!list) {
            no_devices(why, sizeof(why), errno);
        }
        snprintf(detail, len, "libibverbs RC queue pairs; not usable here: %s", why);
        if (list) {
            ibv_free_device_list(list);
        }
        return 0;
    }
    size_t o = (size_t)snprintf(detail, len, "libibverbs RC queue pairs on");
    for (int i = 0; i < n && o < len; i++) {
        struct ibv_context *ctx = ibv_open_device(list[i]);
        struct ibv_device_attr da;
        int nports = ctx && ibv_query_device(ctx, &da) == 0 ? da.phys_port_cnt : 0;
        for (int p = 1; p <= nports && o < len; p++) {
            struct ibv_port_attr pa;
            if (ibv_query_port(ctx, (uint8_t)p, &pa) == 0) {
                usable |= pa.state == IBV_PORT_ACTIVE;
                o += (size_t)snprintf(detail + o, len - o, " %s:%d (%s, %s)",
                                      ibv_get_device_name(list[i]), p, link_name(pa.link_layer),
                                      ibv_port_state_str(pa.state));
            }
        }
        if (ctx) {
            ibv_close_device(ctx);
        }
    }
    ibv_free_device_list(list);
    return usable;
}

const tempo__tl_backend_t tempo__verbs_backend = {
    .name = "verbs",
    .priority = 50,
    .by_default = 0,
    .caps = TEMPO__TL_CAP_TAGGED | TEMPO__TL_CAP_RMA | TEMPO__TL_CAP_MEMREG | TEMPO__TL_CAP_WAIT_FD,
    .probe = vb_probe,
    .open = vb_open,
    .ep = vb_ep,
    .ops = &vb_ops,
    .progress = vb_progress,
    .wait_fd = vb_wait_fd,
    .doze = vb_doze,
    .woken = vb_woken,
    .close = vb_close,
};
