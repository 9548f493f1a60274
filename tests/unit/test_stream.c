/*
 * test_stream.c — the stream layer (transport/stream.c) over an in-memory pipe pair, with no
 * sockets and no shared memory: two fake worlds (rank 0 and rank 1 of a 2-rank job, made by
 * tempo__world_create from a peer table), one stream in each, joined by two byte channels. The
 * channels take and give bytes in small random pieces (seeded; TEMPO_TEST_SEED replays a run) and
 * have a bounded capacity, so headers and payloads are split at every possible place and large
 * messages are written in many partial writes.
 *
 * Checked: messages of 0 bytes to 1 MiB arrive intact, with receives posted before arrival, after
 * it (unexpected messages) and while a message is arriving; messages with one tag are matched in
 * order, other tags do not interfere; a receive of the wrong size fails with TEMPO_ERR_INVALID and
 * remote_len, and the next message still arrives intact (posted, unexpected and half-arrived
 * cases); malformed headers (bad magic, version, type, flags, reserved field, sender, length,
 * point-to-point tag bits, data after goodbye) fail the world with a message naming the peer, fail
 * pending and later transfers, and never crash, also when mutated at random; a goodbye marks the
 * peer left, fails pending and later receives with TEMPO_ERR_REMOTE while messages sent before it
 * are still delivered, and the end of the stream after it is clean, a reset as well as a close; an end of stream without
 * goodbye, in a message or between messages, and a write error fail the world, unless an abort
 * notice or goodbye is unread in the pipe (a reset that overtook it), which is then what the
 * error reports; cancelling a
 * half-sent message, a queued one, a posted receive, a receive in progress and a receive bound to a
 * half-arrived message keeps the stream in sync.
 *
 * Back-pressure (TEMPO_UNEXPECTED_BYTES, ux_limit): a receiver with a small limit buffers at most
 * the limit of unexpected data and then stops reading (bytes stay in the pipe, the sender's sends
 * wait, progress reports no events and the stream says it is blocked); a standing receive does not
 * change that; a receive posted for a message behind the buffered ones (and one larger than the
 * limit) is still delivered; consuming buffered messages lets reading go on; in the end every
 * message arrives intact and messages with one tag in the order they were sent.
 *
 * Zero-copy payloads (tempo__stream_set_fetch, over a pipe whose expose/fetch read the sender's
 * memory directly, at once or a few progress rounds later): payloads at or above the threshold
 * cross the pipe as tickets only and arrive intact in every posting mode; sends complete at the
 * FIN and every exposure is released exactly once; a wrong-size receive fails and the send still
 * completes; one tag keeps its order across fetched and piped messages; cancelling a send whose
 * ticket is out or a receive being fetched into waits until the transfer is over, a send not begun
 * is withdrawn; a zero-copy header on a pipe that cannot fetch, a ticket of impossible length and
 * a FIN for a payload never offered fail the world; a broken stream kills the pipe before it lets
 * go of exposed memory.
 */
#include "config.h"

#include <errno.h>

#include "transport/stream.h"
#include "tests/unit/tu.h"

static uint64_t seed, rng;

/* ------------------------------------------------------------------------------------------ */
/* In-memory pipes                                                                            */
/* ------------------------------------------------------------------------------------------ */

typedef struct {
    char *buf;
    size_t cap, off, len; /* valid bytes are buf[off, off + len) */
    int closed;           /* the writer is gone: EOF once drained */
    int reset;            /* nonzero: the writer reset the connection: -reset once drained */
} chan_t;

typedef struct end end_t;
struct end {
    chan_t *tx, *rx;
    size_t wmax, rmax;    /* largest piece per call */
    int werr;             /* nonzero: writes fail with -werr */
    size_t written;       /* bytes accepted by writev */
    /* Zero-copy (fetch_ops): */
    tempo__stream_t *s;   /* this end's stream */
    end_t *other;
    int defer;            /* fetches complete only after this many polls */
    int exposed, released, killed;
    struct {
        void *op, *dst;
        const void *src;
        size_t len;
        int wait;
    } pend[64];
    int npend;
};

static size_t piece(size_t max)
{
    return max <= 1 ? 1 : 1 + (size_t)(tu_rand64(&rng) % max);
}

static ssize_t mem_writev(void *pipe, const struct iovec *iov, int iovcnt)
{
    end_t *e = pipe;
    chan_t *c = e->tx;
    if (e->werr) {
        return -e->werr;
    }
    if (c->off && c->off + c->len > c->cap / 2) {
        memmove(c->buf, c->buf + c->off, c->len);
        c->off = 0;
    }
    size_t room = c->cap - c->off - c->len, want = piece(e->wmax); /* TEMPO_MIN evaluates twice */
    size_t allow = TEMPO_MIN(room, want), done = 0;
    for (int i = 0; i < iovcnt && done < allow; i++) {
        size_t n = TEMPO_MIN(iov[i].iov_len, allow - done);
        memcpy(c->buf + c->off + c->len, iov[i].iov_base, n);
        c->len += n;
        done += n;
    }
    e->written += done;
    return (ssize_t)done;
}

static ssize_t mem_read(void *pipe, void *buf, size_t len)
{
    end_t *e = pipe;
    chan_t *c = e->rx;
    if (c->len == 0) {
        return c->reset ? -c->reset : c->closed ? TEMPO_PIPE_EOF : 0;
    }
    size_t want = piece(e->rmax);
    size_t n = TEMPO_MIN(TEMPO_MIN(len, c->len), want);
    memcpy(buf, c->buf + c->off, n);
    c->off += n;
    c->len -= n;
    if (c->len == 0) {
        c->off = 0;
    }
    return (ssize_t)n;
}

static const tempo__pipe_ops_t mem_ops = {.writev = mem_writev, .read = mem_read};

/* A pipe that can expose and fetch: the descriptor is the address and length, and a fetch copies
 * from the sender's memory (both ends live in this process), at once or after `defer` polls. */
typedef struct {
    const void *addr;
    size_t len;
} mem_desc_t;

static size_t mem_expose(void *pipe, const void *buf, size_t len, void *desc, void **handle)
{
    end_t *e = pipe;
    mem_desc_t d = {buf, len};
    memcpy(desc, &d, sizeof(d));
    e->exposed++;
    *handle = (void *)buf;
    return sizeof(d);
}

static void mem_release(void *pipe, void *handle)
{
    (void)handle;
    ((end_t *)pipe)->released++;
}

static int mem_fetch(void *pipe, const void *desc, size_t desc_len, void *dst, size_t len, void *op)
{
    end_t *e = pipe;
    mem_desc_t d;
    if (desc_len != sizeof(d) || e->killed) {
        return -EINVAL;
    }
    memcpy(&d, desc, sizeof(d));
    if (d.len != len) {
        return -EINVAL;
    }
    if (!e->defer) {
        memcpy(dst, d.addr, len);
        return 1;
    }
    e->pend[e->npend].op = op;
    e->pend[e->npend].dst = dst;
    e->pend[e->npend].src = d.addr;
    e->pend[e->npend].len = len;
    e->pend[e->npend].wait = e->defer;
    e->npend++;
    return 0;
}

/* Complete the fetches that waited long enough. */
static void mem_fetch_progress(end_t *e)
{
    for (int i = 0; i < e->npend; i++) {
        if (--e->pend[i].wait > 0) {
            continue;
        }
        memcpy(e->pend[i].dst, e->pend[i].src, e->pend[i].len);
        void *op = e->pend[i].op;
        e->pend[i] = e->pend[--e->npend];
        i--;
        tempo__stream_fetched(e->s, op, TEMPO_OK);
    }
}

/* A wait inside a stream: both ends run (the peer is in this process). */
static void mem_poll(void *pipe)
{
    end_t *e = pipe;
    mem_fetch_progress(e);
    mem_fetch_progress(e->other);
    tempo__stream_progress_send(e->other->s);
    tempo__stream_progress_recv(e->other->s);
}

static void mem_kill(void *pipe)
{
    end_t *e = pipe;
    e->killed = 1;
    e->npend = 0;
}

static const tempo__pipe_ops_t fetch_ops = {.writev = mem_writev,
                                            .read = mem_read,
                                            .expose = mem_expose,
                                            .release = mem_release,
                                            .fetch = mem_fetch,
                                            .poll = mem_poll,
                                            .kill = mem_kill};

/* Append raw bytes to a channel, as if the other side had written them. */
static void inject(chan_t *c, const void *p, size_t n)
{
    if (c->off + c->len + n > c->cap) {
        memmove(c->buf, c->buf + c->off, c->len);
        c->off = 0;
    }
    memcpy(c->buf + c->off + c->len, p, n);
    c->len += n;
}

/* ------------------------------------------------------------------------------------------ */
/* A pair of worlds and streams                                                               */
/* ------------------------------------------------------------------------------------------ */

typedef struct {
    tempo__world_t *w[2];
    tempo__stream_t s[2];
    chan_t ch[2];         /* ch[0]: 0 -> 1, ch[1]: 1 -> 0 */
    end_t end[2];
    int dead[2];          /* progress_recv returned < 0 */
    int rc[2];            /* its last return value */
} pair_t;

static void pair_init_ops(pair_t *p, size_t cap, size_t wmax, size_t rmax,
                          const tempo__pipe_ops_t *ops)
{
    tempo__peer_info_t table[2];
    memset(table, 0, sizeof(table));
    memset(p, 0, sizeof(*p));
    for (int r = 0; r < 2; r++) {
        table[r].rank = r;
        table[r].pid = 4100 + r;
        table[r].host_id = 7 + (uint64_t)r;
        snprintf(table[r].hostname, sizeof(table[r].hostname), "host%c", 'A' + r);
    }
    for (int r = 0; r < 2; r++) {
        if (tempo__world_create(r, 2, table, 30.0, &p->w[r]) != TEMPO_OK) {
            printf("Bail out! tempo__world_create: %s\n", tempo__errmsg());
            exit(1);
        }
        p->ch[r].buf = malloc(cap);
        p->ch[r].cap = cap;
    }
    for (int r = 0; r < 2; r++) {
        p->end[r].tx = &p->ch[r];
        p->end[r].rx = &p->ch[1 - r];
        p->end[r].wmax = wmax;
        p->end[r].rmax = rmax;
        p->end[r].s = &p->s[r];
        p->end[r].other = &p->end[1 - r];
        if (tempo__stream_init(&p->s[r], p->w[r], 1 - r, "mem", ops, &p->end[r]) != TEMPO_OK) {
            printf("Bail out! tempo__stream_init: %s\n", tempo__errmsg());
            exit(1);
        }
    }
}

static void pair_init(pair_t *p, size_t cap, size_t wmax, size_t rmax)
{
    pair_init_ops(p, cap, wmax, rmax, &mem_ops);
}

static void pair_fini(pair_t *p)
{
    for (int r = 0; r < 2; r++) {
        tempo__stream_fini(&p->s[r]);
        tempo__world_destroy(p->w[r], 0);
        free(p->ch[r].buf);
    }
}

/* One round of progress on both sides. */
static void step(pair_t *p)
{
    for (int r = 0; r < 2; r++) {
        mem_fetch_progress(&p->end[r]);
        tempo__stream_progress_send(&p->s[r]);
        if (!p->dead[1 - r]) {
            p->rc[1 - r] = tempo__stream_progress_recv(&p->s[1 - r]);
            if (p->rc[1 - r] < 0) {
                p->dead[1 - r] = 1;
            }
        }
    }
}

/* Progress until both channels are empty and nothing is queued to send (or a side is dead). */
static int pump(pair_t *p)
{
    for (long i = 0; i < 50000000; i++) {
        step(p);
        int idle = 1;
        for (int r = 0; r < 2; r++) {
            idle &= (p->ch[r].len == 0 || p->dead[1 - r]) &&
                    (tempo__stream_send_idle(&p->s[r]) || p->s[r].state == STREAM_FAILED) &&
                    p->end[r].npend == 0;
        }
        if (idle) {
            return 1;
        }
    }
    tap_diag("pump: no quiescence (hang)");
    return 0;
}

static void xsend(pair_t *p, int from, tempo__xfer_t *x, uint64_t tag, const void *buf, size_t len)
{
    memset(x, 0, sizeof(*x));
    x->peer = 1 - from;
    x->is_send = 1;
    x->tag = tag;
    x->buf = (void *)buf;
    x->len = len;
    tempo__stream_isend(&p->s[from], x);
}

static void xrecv(pair_t *p, int at, tempo__xfer_t *x, uint64_t tag, void *buf, size_t len)
{
    memset(x, 0, sizeof(*x));
    x->peer = 1 - at;
    x->tag = tag;
    x->buf = buf;
    x->len = len;
    tempo__stream_irecv(&p->s[at], x);
}

static void fill(char *b, size_t n, unsigned salt)
{
    for (size_t i = 0; i < n; i++) {
        b[i] = (char)(i * 2654435761u >> 13 ^ salt);
    }
}

/* ------------------------------------------------------------------------------------------ */

static void test_sizes(void)
{
    static const size_t sizes[] = {0,    1,     2,     31,    32,    33,     4095,   8191,
                                   8192, 8193,  65535, 65536, 65537, 300001, 1048576};
    pair_t p;
    pair_init(&p, 70000, 5000, 9000);
    for (int mode = 0; mode < 3; mode++) {
        long bad = 0;
        for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
            size_t n = sizes[i];
            char *out = malloc(n + 1), *in = malloc(n + 1);
            fill(out, n, (unsigned)i);
            memset(in, 0, n + 1);
            tempo__xfer_t xs, xr;
            uint64_t tag = tempo__tag_coll(1, (uint32_t)i, (unsigned)mode);
            if (mode == 0) { /* posted before the message arrives */
                xrecv(&p, 1, &xr, tag, in, n);
                xsend(&p, 0, &xs, tag, out, n);
                pump(&p);
            } else if (mode == 1) { /* after: unexpected message */
                xsend(&p, 0, &xs, tag, out, n);
                pump(&p);
                xrecv(&p, 1, &xr, tag, in, n);
                pump(&p);
            } else { /* while it arrives: a few steps, then post */
                xsend(&p, 0, &xs, tag, out, n);
                for (int k = 0; k < 3; k++) {
                    step(&p);
                }
                xrecv(&p, 1, &xr, tag, in, n);
                pump(&p);
            }
            int ok = xs.complete && xs.status == TEMPO_OK && xr.complete && xr.status == TEMPO_OK &&
                     xr.done == n && memcmp(in, out, n) == 0 && in[n] == 0;
            if (!ok && bad++ < 3) {
                tap_diag("mode %d, %zu bytes: send %d/%d, recv %d/%d done %zu", mode, n,
                         xs.complete, xs.status, xr.complete, xr.status, xr.done);
            }
            free(out);
            free(in);
        }
        static const char *const modes[] = {"posted before arrival", "posted after arrival",
                                            "posted while arriving"};
        TAP_OK(bad == 0, "messages of 0 B to 1 MiB arrive intact, receives %s", modes[mode]);
    }
    TAP_EQ_UINT(p.s[1].unexpected_bytes, 0, "no unexpected bytes left behind");
    TAP_EQ_INT(p.w[0]->failed, TEMPO_OK, "world 0 healthy");
    TAP_EQ_INT(p.w[1]->failed, TEMPO_OK, "world 1 healthy");
    pair_fini(&p);
}

/* Empty messages with NULL buffers, as barriers send them: the receive posted before the message
 * and after it (an unexpected empty message), which copied zero bytes from NULL to NULL, undefined
 * behaviour that the sanitizer build (UBSan) stops on. */
static void test_empty_null(void)
{
    pair_t p;
    pair_init(&p, 4096, 700, 300);
    int ok = 1;
    for (int after = 0; after < 2; after++) {
        tempo__xfer_t xs, xr;
        uint64_t tag = tempo__tag_p2p(5, 10u + (unsigned)after);
        if (!after) {
            xrecv(&p, 1, &xr, tag, NULL, 0);
        }
        xsend(&p, 0, &xs, tag, NULL, 0);
        pump(&p);
        if (after) {
            xrecv(&p, 1, &xr, tag, NULL, 0);
            pump(&p);
        }
        ok &= xs.complete && xs.status == TEMPO_OK && xr.complete && xr.status == TEMPO_OK &&
              xr.done == 0;
    }
    TAP_OK(ok, "empty messages with NULL buffers, receive posted before and after arrival");
    TAP_EQ_UINT(p.s[1].unexpected_bytes, 0, "no unexpected bytes left behind");
    pair_fini(&p);
}

static void test_order(void)
{
    pair_t p;
    pair_init(&p, 4096, 700, 300);
    enum { M = 6 };
    char out[M][2000], in[M][2000], other_out[100], other_in[100];
    tempo__xfer_t xs[M], xr[M], os, orx;
    uint64_t tag = tempo__tag_p2p(3, 77), tag2 = tempo__tag_p2p(3, 78);
    /* Receives 0..2 posted first; the other tag's receive posted before its message too. */
    for (int i = 0; i < 3; i++) {
        xrecv(&p, 1, &xr[i], tag, in[i], sizeof(in[i]));
    }
    xrecv(&p, 1, &orx, tag2, other_in, sizeof(other_in));
    for (int i = 0; i < M; i++) {
        fill(out[i], sizeof(out[i]), 100u + (unsigned)i);
        xsend(&p, 0, &xs[i], tag, out[i], sizeof(out[i]));
        if (i == 2) {
            fill(other_out, sizeof(other_out), 9);
            xsend(&p, 0, &os, tag2, other_out, sizeof(other_out));
        }
    }
    pump(&p);
    for (int i = 3; i < M; i++) {
        xrecv(&p, 1, &xr[i], tag, in[i], sizeof(in[i]));
    }
    pump(&p);
    int ok = 1;
    for (int i = 0; i < M; i++) {
        ok &= xr[i].complete && xr[i].status == TEMPO_OK && memcmp(in[i], out[i], 2000) == 0;
    }
    TAP_OK(ok, "%d messages with one tag are received in the order they were sent", M);
    TAP_OK(orx.complete && orx.status == TEMPO_OK && memcmp(other_in, other_out, 100) == 0,
           "a message with another tag in between goes to its own receive");
    pair_fini(&p);
}

/* Urgent sends (tempo__tl_isend_urgent: control messages) go ahead of the queued sends not begun
 * yet, in order among themselves; the message on the wire and the order of one tag's data are
 * kept. */
static void test_urgent(void)
{
    pair_t p;
    pair_init(&p, 4096, 700, 300);
    enum { M = 6, U = 2 };
    char out[M][2000], in[M][2000], uout[U][64], uin[U][64];
    tempo__xfer_t xs[M], xr[M], us[U], ur[U];
    uint64_t tag = tempo__tag_p2p(3, 77), ctag = tempo__tag_ctrl(3, 2);
    for (int i = 0; i < M; i++) {
        xrecv(&p, 1, &xr[i], tag, in[i], sizeof(in[i]));
    }
    for (int i = 0; i < U; i++) {
        xrecv(&p, 1, &ur[i], ctag, uin[i], sizeof(uin[i]));
    }
    for (int i = 0; i < M; i++) {
        fill(out[i], sizeof(out[i]), 200u + (unsigned)i);
        xsend(&p, 0, &xs[i], tag, out[i], sizeof(out[i]));
    }
    int begun = 0; /* data messages with bytes on the wire when the urgent ones are sent */
    while (begun < M && xs[begun].complete) {
        begun++;
    }
    if (begun < M && (xs[begun].done > 0 || (p.s[0].shdr_valid && p.s[0].shdr_off > 0))) {
        begun++; /* the head, with part of its header or payload written */
    }
    for (int i = 0; i < U; i++) {
        fill(uout[i], sizeof(uout[i]), 50u + (unsigned)i);
        memset(&us[i], 0, sizeof(us[i]));
        us[i].peer = 1;
        us[i].is_send = 1;
        us[i].tag = ctag;
        us[i].buf = uout[i];
        us[i].len = sizeof(uout[i]);
        us[i].urgent = 1;
        tempo__stream_isend(&p.s[0], &us[i]);
    }
    int order = 0, dat_at[M], urg_at[U];
    for (int i = 0; i < M; i++) {
        dat_at[i] = -1;
    }
    for (int i = 0; i < U; i++) {
        urg_at[i] = -1;
    }
    for (long k = 0; k < 1000000 && order < M + U; k++) {
        step(&p);
        for (int i = 0; i < M; i++) {
            if (xr[i].complete && dat_at[i] < 0) {
                dat_at[i] = order++;
            }
        }
        for (int i = 0; i < U; i++) {
            if (ur[i].complete && urg_at[i] < 0) {
                urg_at[i] = order++;
            }
        }
    }
    int ok = order == M + U && begun < M - 1;
    for (int i = 0; i < M; i++) {
        ok &= xr[i].status == TEMPO_OK && memcmp(in[i], out[i], sizeof(out[i])) == 0 &&
              (i == 0 || dat_at[i] > dat_at[i - 1]);
    }
    for (int i = 0; i < U; i++) {
        ok &= ur[i].status == TEMPO_OK && memcmp(uin[i], uout[i], sizeof(uout[i])) == 0 &&
              (i == 0 || urg_at[i] > urg_at[i - 1]);
        for (int j = 0; j < M; j++) {
            ok &= j < begun ? dat_at[j] < urg_at[i] : dat_at[j] > urg_at[i];
        }
    }
    TAP_OK(ok,
           "urgent sends overtake the %d queued sends not begun (%d on the wire), in order, "
           "and every message arrives intact",
           M - begun, begun);
    pair_fini(&p);
}

static void test_wrong_size(void)
{
    pair_t p;
    pair_init(&p, 3000, 100, 77);
    char out[5000], in[5000], in2[5000], next_out[64], next_in[64];
    fill(out, sizeof(out), 1);
    fill(next_out, sizeof(next_out), 2);
    uint64_t tag = tempo__tag_coll(2, 5, 1);
    tempo__xfer_t xs, xr, ns, nr;
    char why[512];

    /* Posted before arrival. */
    xrecv(&p, 1, &xr, tag, in, 100);
    xsend(&p, 0, &xs, tag, out, 200);
    xsend(&p, 0, &ns, tag, next_out, sizeof(next_out));
    pump(&p);
    TAP_OK(xr.complete && xr.status == TEMPO_ERR_INVALID && xr.remote_len == 200,
           "a posted receive of 100 bytes for a 200-byte message: TEMPO_ERR_INVALID, remote_len "
           "%zu", xr.remote_len);
    tempo__xfer_error(p.w[1], &xr, why, sizeof(why));
    TAP_CONTAINS(why, "rank 0 (host hostA, pid 4100) sent 200 bytes where 100 were expected",
                 "  the error text names the peer and both sizes");
    TAP_OK(xs.complete && xs.status == TEMPO_OK, "  the send itself completes");
    xrecv(&p, 1, &nr, tag, next_in, sizeof(next_in));
    pump(&p);
    TAP_OK(nr.complete && nr.status == TEMPO_OK && memcmp(next_in, next_out, 64) == 0,
           "  and the next message with the same tag arrives intact");

    /* Unexpected, fully arrived. */
    xsend(&p, 0, &xs, tag, out, 300);
    xsend(&p, 0, &ns, tag, next_out, sizeof(next_out));
    pump(&p);
    xrecv(&p, 1, &xr, tag, in, 299);
    TAP_OK(xr.complete && xr.status == TEMPO_ERR_INVALID && xr.remote_len == 300,
           "a receive of 299 bytes for an unexpected 300-byte message fails at once (remote_len "
           "%zu)", xr.remote_len);
    memset(next_in, 0, sizeof(next_in));
    xrecv(&p, 1, &nr, tag, next_in, sizeof(next_in));
    pump(&p);
    TAP_OK(nr.complete && nr.status == TEMPO_OK && memcmp(next_in, next_out, 64) == 0,
           "  and the next message arrives intact");

    /* Unexpected, half arrived: the rest is consumed and dropped. */
    xsend(&p, 0, &xs, tag, out, sizeof(out));
    xsend(&p, 0, &ns, tag, next_out, sizeof(next_out));
    for (int k = 0; k < 10000 && !p.s[1].in_payload; k++) { /* (random pieces: until it is) */
        step(&p);
    }
    int half = p.s[1].in_payload;
    xrecv(&p, 1, &xr, tag, in2, 10);
    pump(&p);
    TAP_OK(half && xr.complete && xr.status == TEMPO_ERR_INVALID && xr.remote_len == sizeof(out),
           "a wrong-size receive of a half-arrived message fails (half-arrived %d, status %d, "
           "remote_len %zu)", half, xr.status, xr.remote_len);
    memset(next_in, 0, sizeof(next_in));
    xrecv(&p, 1, &nr, tag, next_in, sizeof(next_in));
    pump(&p);
    TAP_OK(nr.complete && nr.status == TEMPO_OK && memcmp(next_in, next_out, 64) == 0,
           "  and the next message arrives intact");
    TAP_EQ_UINT(p.s[1].unexpected_bytes, 0, "  nothing left buffered");
    TAP_EQ_INT(p.w[1]->failed, TEMPO_OK, "a size mismatch does not fail the world");
    pair_fini(&p);
}

/* ------------------------------------------------------------------------------------------ */

static tempo__wire_hdr_t good_hdr(uint32_t src, uint64_t tag, uint64_t len)
{
    tempo__wire_hdr_t h;
    memset(&h, 0, sizeof(h));
    h.magic = TEMPO_WIRE_MAGIC;
    h.version = TEMPO_WIRE_VERSION;
    h.type = TEMPO_WIRE_DATA;
    h.src = src;
    h.tag = tag;
    h.len = len;
    return h;
}

static void malformed(const char *what, tempo__wire_hdr_t h, const char *needle)
{
    pair_t p;
    pair_init(&p, 4096, 64, 1); /* one byte at a time: the header arrives in 32 pieces */
    char in[16];
    tempo__xfer_t pending, later, sendx;
    xrecv(&p, 1, &pending, tempo__tag_coll(1, 1, 1), in, sizeof(in));
    inject(&p.ch[0], &h, sizeof(h));
    char payload[64] = {0};
    inject(&p.ch[0], payload, sizeof(payload));
    int rc = 0;
    for (int i = 0; i < 200 && rc >= 0; i++) {
        rc = tempo__stream_progress_recv(&p.s[1]);
    }
    TAP_OK(rc == -1 && p.w[1]->failed == TEMPO_ERR_REMOTE, "%s: the world fails with "
           "TEMPO_ERR_REMOTE (rc %d, failed %d)", what, rc, p.w[1]->failed);
    TAP_CONTAINS(p.w[1]->failmsg, "rank 0 (host hostA, pid 4100)", "  the message names the peer");
    TAP_CONTAINS(p.w[1]->failmsg, needle, "  and the problem");
    TAP_OK(pending.complete && pending.status == TEMPO_ERR_REMOTE, "  a pending receive fails");
    xrecv(&p, 1, &later, tempo__tag_coll(1, 1, 2), in, sizeof(in));
    xsend(&p, 1, &sendx, tempo__tag_coll(1, 1, 2), in, sizeof(in));
    TAP_OK(later.complete && later.status == TEMPO_ERR_REMOTE && sendx.complete &&
               sendx.status == TEMPO_ERR_REMOTE,
           "  later receives and sends fail at once");
    pair_fini(&p);
}

static void test_malformed(void)
{
    tempo__wire_hdr_t h;
    h = good_hdr(0, 5, 8);
    h.magic = 0x12345678;
    malformed("bad magic", h, "bad magic");
    h = good_hdr(0, 5, 8);
    h.version = TEMPO_WIRE_VERSION + 1;
    malformed("bad version", h, "wire version");
    h = good_hdr(0, 5, 8);
    h.type = 7;
    malformed("unknown type", h, "unknown type");
    h = good_hdr(0, 5, 8);
    h.flags = 1;
    malformed("flags set", h, "reserved fields");
    h = good_hdr(0, 5, 8);
    h.reserved = 0x100;
    malformed("reserved field set", h, "reserved fields");
    h = good_hdr(1, 5, 8);
    malformed("wrong sender (its own rank)", h, "claiming to come from rank 1");
    h = good_hdr(77, 5, 8);
    malformed("wrong sender (out of range)", h, "claiming to come from rank 77");
    h = good_hdr(0, 5, TEMPO_WIRE_MAX_LEN + 1);
    malformed("impossible length", h, "impossible length");
    h = good_hdr(0, 5, UINT64_MAX);
    malformed("length 2^64-1", h, "impossible length");
    h = good_hdr(0, 0, 4);
    h.type = TEMPO_WIRE_BYE;
    malformed("goodbye with a payload", h, "impossible length");
    h = good_hdr(0, (1ull << 63) | (1ull << 40) | 5, 8);
    malformed("point-to-point tag with reserved bits", h, "reserved bits");

    /* Data after goodbye. */
    pair_t p;
    pair_init(&p, 4096, 64, 64);
    tempo__wire_hdr_t bye = good_hdr(0, 0, 0);
    bye.type = TEMPO_WIRE_BYE;
    tempo__wire_hdr_t data = good_hdr(0, 9, 0);
    inject(&p.ch[0], &bye, sizeof(bye));
    inject(&p.ch[0], &data, sizeof(data));
    int rc = 0;
    for (int i = 0; i < 100 && rc >= 0; i++) {
        rc = tempo__stream_progress_recv(&p.s[1]);
    }
    TAP_OK(rc == -1 && p.w[1]->failed == TEMPO_ERR_REMOTE, "data after a goodbye fails the world");
    TAP_CONTAINS(p.w[1]->failmsg, "after saying goodbye", "  message: %s", p.w[1]->failmsg);
    pair_fini(&p);
}

static void test_fuzz(void)
{
    /* A valid stream of messages, then one random corruption (bit flips or a byte run), delivered
     * in random pieces. Whatever happens must be a clean outcome: messages delivered, or the world
     * failed naming the peer. A crash ends the test program (and fails it). */
    int failed_worlds = 0, clean = 0, named = 1;
    for (int iter = 0; iter < 300; iter++) {
        pair_t p;
        pair_init(&p, 1 << 16, 1 << 16, 1 + (size_t)(tu_rand64(&rng) % 200));
        char raw[8192];
        size_t len = 0;
        for (int m = 0; m < 4; m++) {
            size_t n = (size_t)(tu_rand64(&rng) % 1000);
            tempo__wire_hdr_t h = good_hdr(0, tempo__tag_coll(1, 1, (unsigned)m), n);
            memcpy(raw + len, &h, sizeof(h));
            len += sizeof(h);
            fill(raw + len, n, (unsigned)m);
            len += n;
        }
        int flips = 1 + (int)(tu_rand64(&rng) % 4);
        for (int f = 0; f < flips; f++) {
            size_t at = (size_t)(tu_rand64(&rng) % len);
            raw[at] ^= (char)(1u << (tu_rand64(&rng) % 8));
        }
        inject(&p.ch[0], raw, len);
        p.ch[0].closed = (int)(tu_rand64(&rng) & 1); /* sometimes the peer then vanishes */
        char in[4][1000];
        tempo__xfer_t xr[4];
        for (int m = 0; m < 4; m++) {
            xrecv(&p, 1, &xr[m], tempo__tag_coll(1, 1, (unsigned)m), in[m],
                  (size_t)(tu_rand64(&rng) % 1000));
        }
        int rc = 0;
        for (int i = 0; i < 100000 && rc >= 0 && p.ch[0].len; i++) {
            rc = tempo__stream_progress_recv(&p.s[1]);
        }
        if (p.w[1]->failed) {
            failed_worlds++;
            named &= strstr(p.w[1]->failmsg, "rank 0 (host hostA, pid 4100)") != NULL;
        } else {
            clean++;
        }
        pair_fini(&p);
    }
    tap_diag("fuzz: %d runs failed the world, %d did not", failed_worlds, clean);
    TAP_OK(1, "300 corrupted streams were handled without crashing");
    TAP_OK(named, "every failure they caused names the peer");
}

/* ------------------------------------------------------------------------------------------ */

static void test_goodbye(void)
{
    pair_t p;
    pair_init(&p, 4096, 100, 100);
    char m1[300], in1[300], in2[8], junk[8] = "x";
    fill(m1, sizeof(m1), 3);
    tempo__xfer_t s1, r_pending, r_before, r_after, s_after, s_from_leaver;
    uint64_t t1 = tempo__tag_p2p(1, 1), t2 = tempo__tag_p2p(1, 2), t3 = tempo__tag_p2p(1, 3);
    xrecv(&p, 1, &r_pending, t2, in2, sizeof(in2));
    xsend(&p, 0, &s1, t1, m1, sizeof(m1));
    TAP_EQ_INT(tempo__stream_send_bye(&p.s[0]), TEMPO_OK, "goodbye queued behind a message");
    xsend(&p, 0, &s_from_leaver, t3, junk, sizeof(junk));
    TAP_OK(s_from_leaver.complete && s_from_leaver.status == TEMPO_ERR_REMOTE,
           "nothing can be sent after one's own goodbye");
    pump(&p);
    TAP_EQ_INT(p.w[1]->peers[0].left, 1, "the receiver marks the peer as left");
    TAP_EQ_INT(p.w[1]->failed, TEMPO_OK, "a goodbye does not fail the world");
    TAP_OK(r_pending.complete && r_pending.status == TEMPO_ERR_REMOTE,
           "a receive pending at the goodbye fails with TEMPO_ERR_REMOTE");
    char why[512];
    tempo__xfer_error(p.w[1], &r_pending, why, sizeof(why));
    TAP_CONTAINS(why, "rank 0 (host hostA, pid 4100) has left", "  and its error text says the "
                 "peer left: %s", why);
    xrecv(&p, 1, &r_before, t1, in1, sizeof(in1));
    TAP_OK(r_before.complete && r_before.status == TEMPO_OK && memcmp(in1, m1, 300) == 0,
           "a message sent before the goodbye is still delivered");
    xrecv(&p, 1, &r_after, t3, in2, sizeof(in2));
    TAP_OK(r_after.complete && r_after.status == TEMPO_ERR_REMOTE,
           "a receive posted after the goodbye fails at once");
    xsend(&p, 1, &s_after, t3, junk, sizeof(junk));
    TAP_OK(s_after.complete && s_after.status == TEMPO_ERR_REMOTE,
           "a send to a peer that left fails at once");
    p.ch[0].closed = 1;
    int rc = tempo__stream_progress_recv(&p.s[1]);
    TAP_EQ_INT(rc, -2, "the end of the stream after a goodbye is a clean end (-2)");
    TAP_EQ_INT(p.w[1]->failed, TEMPO_OK, "  and does not fail the world");
    pair_fini(&p);

    /* A peer that leaves while something of ours is unread in its socket (a late probe) resets
     * the connection instead of closing it: after its goodbye that is a clean end too (seen once
     * in CI as "rank 0 broke the connection (Connection reset by peer)" from a rank that had
     * finished). */
    pair_init(&p, 4096, 100, 100);
    xsend(&p, 0, &s1, t1, m1, sizeof(m1));
    tempo__stream_send_bye(&p.s[0]);
    pump(&p);
    p.ch[0].reset = ECONNRESET;
    rc = tempo__stream_progress_recv(&p.s[1]);
    TAP_EQ_INT(rc, -2, "a reset after a goodbye is a clean end (-2)");
    TAP_EQ_INT(p.w[1]->failed, TEMPO_OK, "  and does not fail the world (%s)", p.w[1]->failmsg);
    xrecv(&p, 1, &r_before, t1, in1, sizeof(in1));
    TAP_OK(r_before.complete && r_before.status == TEMPO_OK && memcmp(in1, m1, 300) == 0,
           "  the message sent before the goodbye is still delivered");
    pair_fini(&p);
}

static void eof_case(const char *what, size_t partial, const char *needle)
{
    pair_t p;
    pair_init(&p, 4096, 64, 64);
    char in[100];
    tempo__xfer_t r;
    xrecv(&p, 1, &r, tempo__tag_coll(1, 2, 3), in, sizeof(in));
    tempo__wire_hdr_t h = good_hdr(0, tempo__tag_coll(1, 2, 3), sizeof(in));
    char raw[200];
    memcpy(raw, &h, sizeof(h));
    memset(raw + sizeof(h), 1, sizeof(in));
    inject(&p.ch[0], raw, partial);
    p.ch[0].closed = 1;
    int rc = 0;
    for (int i = 0; i < 100 && rc >= 0; i++) {
        rc = tempo__stream_progress_recv(&p.s[1]);
    }
    TAP_OK(rc == -1 && p.w[1]->failed == TEMPO_ERR_REMOTE, "%s: the world fails", what);
    TAP_CONTAINS(p.w[1]->failmsg, "rank 0 (host hostA, pid 4100)", "  naming the peer");
    TAP_CONTAINS(p.w[1]->failmsg, needle, "  message: %s", p.w[1]->failmsg);
    TAP_OK(r.complete && r.status == TEMPO_ERR_REMOTE, "  the pending receive fails");
    pair_fini(&p);
}

static void test_eof_and_errors(void)
{
    eof_case("end of stream between messages", 0, "closed its connection unexpectedly");
    eof_case("end of stream inside a header", 10, "closed its connection");
    eof_case("end of stream inside a payload", sizeof(tempo__wire_hdr_t) + 40,
             "in the middle of a message");

    pair_t p;
    pair_init(&p, 4096, 64, 64);
    p.end[0].werr = EPIPE;
    char buf[10] = "abc";
    tempo__xfer_t x;
    xsend(&p, 0, &x, 5, buf, sizeof(buf));
    TAP_OK(x.complete && x.status == TEMPO_ERR_REMOTE && p.w[0]->failed == TEMPO_ERR_REMOTE,
           "a write error fails the send and the world");
    TAP_CONTAINS(p.w[0]->failmsg, "rank 1 (host hostB, pid 4101) broke the connection",
                 "  message: %s", p.w[0]->failmsg);
    pair_fini(&p);

    /* A peer that aborts or leaves with our data unread resets the connection (tcp), and the
     * reset can fail our next write while its notice is still unread: the error must say what
     * the peer said, not "broke the connection". */
    for (int bye = 0; bye < 2; bye++) {
        const char *what = bye ? "goodbye" : "abort notice";
        pair_init(&p, 4096, 64, 64);
        if (bye) {
            tempo__stream_send_bye(&p.s[1]);
        } else {
            tempo__stream_send_abort(&p.s[1]);
        }
        for (int i = 0; i < 100 && !tempo__stream_send_idle(&p.s[1]); i++) {
            tempo__stream_progress_send(&p.s[1]);
        }
        int queued = tempo__stream_send_idle(&p.s[1]) && p.ch[1].len > 0;
        p.end[0].werr = ECONNRESET;
        xsend(&p, 0, &x, 5, buf, sizeof(buf));
        tempo__stream_progress_send(&p.s[0]);
        TAP_OK(queued && x.complete && x.status == TEMPO_ERR_REMOTE, "a write reset with an "
               "unread %s: the send fails with TEMPO_ERR_REMOTE", what);
        if (bye) {
            char why[512];
            tempo__xfer_error(p.w[0], &x, why, sizeof(why));
            TAP_OK(p.w[0]->peers[1].left && p.w[0]->failed == TEMPO_OK,
                   "  the peer is marked as left and the world does not fail");
            TAP_CONTAINS(why, "rank 1 (host hostB, pid 4101) has left", "  error: %s", why);
        } else {
            TAP_EQ_INT(p.w[0]->failed, TEMPO_ERR_REMOTE, "  the world fails");
            TAP_CONTAINS(p.w[0]->failmsg, "rank 1 (host hostB, pid 4101) aborted the job",
                         "  message: %s", p.w[0]->failmsg);
        }
        pair_fini(&p);
    }
}

/* ------------------------------------------------------------------------------------------ */

static void test_cancel(void)
{
    enum { BIG = 1 << 20 };
    char *big = malloc(BIG), *orig = malloc(BIG), *in = malloc(BIG);
    char small_out[100], small_in[100];
    fill(big, BIG, 11);
    memcpy(orig, big, BIG);
    fill(small_out, sizeof(small_out), 12);
    uint64_t t1 = tempo__tag_coll(1, 1, 1), t2 = tempo__tag_coll(1, 1, 2);
    tempo__xfer_t xs, xs2, xq, xr, xr2;

    /* A half-sent message is finished from a private copy. */
    pair_t p;
    pair_init(&p, 65536, 65536, 65536);
    xsend(&p, 0, &xs, t1, big, BIG);
    TAP_OK(!xs.complete && xs.done > 0 && xs.done < BIG, "a 1 MiB send is partly written (%zu "
           "bytes)", xs.done);
    tempo__stream_cancel(&p.s[0], &xs);
    TAP_OK(xs.complete && xs.status == TEMPO_ERR_ABORTED, "cancel completes it with "
           "TEMPO_ERR_ABORTED");
    memset(big, 0, BIG); /* the caller may reuse the buffer at once */
    xsend(&p, 0, &xs2, t2, small_out, sizeof(small_out));
    xrecv(&p, 1, &xr, t1, in, BIG);
    xrecv(&p, 1, &xr2, t2, small_in, sizeof(small_in));
    pump(&p);
    TAP_OK(xr.complete && xr.status == TEMPO_OK && memcmp(in, orig, BIG) == 0,
           "the receiver still gets the cancelled message whole, as it was when cancelled");
    TAP_OK(xr2.complete && xr2.status == TEMPO_OK && memcmp(small_in, small_out, 100) == 0,
           "and the next message intact: the stream stays in sync");
    pair_fini(&p);

    /* A queued message that has not started is withdrawn. */
    memcpy(big, orig, BIG);
    pair_init(&p, 65536, 65536, 65536);
    xsend(&p, 0, &xs, t1, big, BIG);
    xsend(&p, 0, &xq, t2, small_out, sizeof(small_out));
    tempo__stream_cancel(&p.s[0], &xq);
    xsend(&p, 0, &xs2, t2, small_out + 1, 50);
    xrecv(&p, 1, &xr, t1, in, BIG);
    xrecv(&p, 1, &xr2, t2, small_in, 50);
    pump(&p);
    TAP_OK(xq.complete && xq.status == TEMPO_ERR_ABORTED && xr2.complete &&
               xr2.status == TEMPO_OK && memcmp(small_in, small_out + 1, 50) == 0 &&
               xr.status == TEMPO_OK,
           "a queued send that is cancelled is never sent; the next one with its tag matches");
    pair_fini(&p);

    /* A posted receive that is cancelled does not take the message. */
    pair_init(&p, 65536, 65536, 65536);
    memset(small_in, 0x77, sizeof(small_in));
    xrecv(&p, 1, &xr, t2, small_in, sizeof(small_in));
    tempo__stream_cancel(&p.s[1], &xr);
    xsend(&p, 0, &xs, t2, small_out, sizeof(small_out));
    pump(&p);
    TAP_OK(xr.status == TEMPO_ERR_ABORTED && (unsigned char)small_in[0] == 0x77 &&
               p.s[1].unexpected_bytes == sizeof(small_out),
           "a cancelled posted receive is not written; the message waits as unexpected");
    char again[100];
    xrecv(&p, 1, &xr2, t2, again, sizeof(again));
    TAP_OK(xr2.complete && xr2.status == TEMPO_OK && memcmp(again, small_out, 100) == 0,
           "  and goes to the next receive");
    pair_fini(&p);

    /* A receive cancelled while its payload streams in: the rest is discarded. */
    pair_init(&p, 65536, 65536, 65536);
    xrecv(&p, 1, &xr, t1, in, BIG);
    xsend(&p, 0, &xs, t1, orig, BIG);
    for (int k = 0; k < 4; k++) {
        step(&p);
    }
    int streaming = p.s[1].rx == &xr;
    tempo__stream_cancel(&p.s[1], &xr);
    memset(in, 0x55, BIG);
    xsend(&p, 0, &xs2, t2, small_out, sizeof(small_out));
    xrecv(&p, 1, &xr2, t2, small_in, sizeof(small_in));
    pump(&p);
    int untouched = 1;
    for (size_t i = 0; i < BIG; i++) {
        untouched &= (unsigned char)in[i] == 0x55;
    }
    TAP_OK(streaming && xr.status == TEMPO_ERR_ABORTED && untouched,
           "a receive cancelled mid-payload is not written after the cancel (streaming %d)",
           streaming);
    TAP_OK(xr2.complete && xr2.status == TEMPO_OK && memcmp(small_in, small_out, 100) == 0,
           "  and the next message arrives intact");
    pair_fini(&p);

    /* A receive bound to a half-arrived unexpected message, cancelled. */
    pair_init(&p, 65536, 65536, 65536);
    xsend(&p, 0, &xs, t1, orig, BIG);
    for (int k = 0; k < 4; k++) {
        step(&p);
    }
    xrecv(&p, 1, &xr, t1, in, BIG);
    int bound = !xr.complete;
    tempo__stream_cancel(&p.s[1], &xr);
    memset(in, 0x55, BIG);
    xsend(&p, 0, &xs2, t2, small_out, sizeof(small_out));
    xrecv(&p, 1, &xr2, t2, small_in, sizeof(small_in));
    pump(&p);
    untouched = 1;
    for (size_t i = 0; i < BIG; i++) {
        untouched &= (unsigned char)in[i] == 0x55;
    }
    TAP_OK(bound && xr.status == TEMPO_ERR_ABORTED && untouched && p.s[1].unexpected_bytes == 0,
           "a receive bound to a half-arrived message, cancelled: not written, nothing kept");
    TAP_OK(xr2.complete && xr2.status == TEMPO_OK && memcmp(small_in, small_out, 100) == 0,
           "  and the next message arrives intact");
    pair_fini(&p);
    free(big);
    free(orig);
    free(in);
}

/* Step until neither the sender's queue nor the pipe changes for a while; returns steps taken. */
static long settle(pair_t *p, const tempo__xfer_t *xs, int n)
{
    size_t last = (size_t)-1;
    long quiet = 0, i;
    for (i = 0; i < 2000000 && quiet < 200; i++) {
        step(p);
        size_t sig = p->ch[0].len + p->s[1].unexpected_bytes * 3;
        for (int k = 0; k < n; k++) {
            sig += xs[k].done * 7 + (size_t)xs[k].complete;
        }
        quiet = sig == last ? quiet + 1 : 0;
        last = sig;
    }
    return i;
}

static void test_backpressure(void)
{
    enum { M = 40, LIMIT = 10000, BIG = 25000 };
    pair_t p;
    pair_init(&p, 16384, 3000, 5000);
    p.s[1].ux_limit = LIMIT;
    char *out[M], *in[M];
    size_t len[M];
    uint64_t tag[M];
    tempo__xfer_t xs[M], xr[M], standing;
    char standing_buf[64];
    /* Every fourth message shares one tag (order check); message M - 3 is larger than the limit. */
    for (int i = 0; i < M; i++) {
        len[i] = i == M - 3 ? BIG : 500 + (size_t)(tu_rand64(&rng) % 2500);
        tag[i] = tempo__tag_p2p(4, i % 4 == 0 ? 1000u : (uint32_t)i);
        out[i] = malloc(len[i]);
        in[i] = calloc(1, len[i]);
        fill(out[i], len[i], 300u + (unsigned)i);
    }
    xrecv(&p, 1, &standing, tempo__tag_p2p(4, 9999), standing_buf, sizeof(standing_buf));
    standing.standing = 1; /* like the scheduled lane's control receive */
    for (int i = 0; i < M; i++) {
        xsend(&p, 0, &xs[i], tag[i], out[i], len[i]);
    }
    settle(&p, xs, M);
    int sent = 0;
    for (int i = 0; i < M; i++) {
        sent += xs[i].complete;
    }
    size_t in_pipe = p.ch[0].len;
    TAP_OK(p.s[1].unexpected_bytes <= LIMIT && p.s[1].unexpected_bytes > 0,
           "the receiver buffers at most the limit (%zu of %d bytes), a standing receive posted",
           p.s[1].unexpected_bytes, LIMIT);
    TAP_OK(in_pipe > 0 && sent < M, "then it stops reading: %zu bytes wait in the pipe, %d of %d "
           "sends done", in_pipe, sent, M);
    TAP_OK(tempo__stream_recv_blocked(&p.s[1]), "  the stream says it is blocked");
    int rc = tempo__stream_progress_recv(&p.s[1]);
    TAP_OK(rc == 0 && p.ch[0].len == in_pipe, "  and its progress reports no events (%d) and reads "
           "nothing", rc);

    /* Receives for buffered messages complete from the buffer; once 3000 bytes (the largest small
     * message) are freed, the message the stream stopped at fits, and reading goes on. */
    int first = 0, bad = 0;
    size_t freed = 0;
    while (freed < 3000) {
        xrecv(&p, 1, &xr[first], tag[first], in[first], len[first]);
        bad += !(xr[first].complete && xr[first].status == TEMPO_OK &&
                 memcmp(in[first], out[first], len[first]) == 0);
        freed += len[first++];
    }
    TAP_EQ_INT(bad, 0, "receives for %d buffered messages complete at once, intact", first);
    /* Reading goes on: the receiver buffers more again. (Not "more sends complete": the sender's
     * next message can be larger than the pipe space one read frees; seed 4766303703080896294.) */
    size_t after_free = p.s[1].unexpected_bytes;
    settle(&p, xs, M);
    int sent2 = 0;
    for (int i = 0; i < M; i++) {
        sent2 += xs[i].complete;
    }
    TAP_OK(p.s[1].unexpected_bytes > after_free && p.s[1].unexpected_bytes <= LIMIT && sent2 >= sent,
           "  then reading goes on, up to the limit (%zu bytes buffered after the receives, then %zu; "
           "%d sends done)", after_free, p.s[1].unexpected_bytes, sent2);

    /* The last message, behind everything buffered and waiting: its receive is still served. */
    xrecv(&p, 1, &xr[M - 1], tag[M - 1], in[M - 1], len[M - 1]);
    TAP_OK(!tempo__stream_recv_blocked(&p.s[1]), "a posted receive unblocks the stream");
    settle(&p, xs, M);
    TAP_OK(xr[M - 1].complete && xr[M - 1].status == TEMPO_OK &&
           memcmp(in[M - 1], out[M - 1], len[M - 1]) == 0,
           "  the message behind the buffered ones arrives intact");
    TAP_OK(!standing.complete, "  the standing receive is untouched");

    /* Take the buffered messages one by one: the limit lets go and reading goes on. */
    int over = 0, order_bad = 0;
    size_t prev = p.s[1].unexpected_bytes; /* over the limit now: what the soft limit let in */
    tap_diag("buffered after the receive behind them: %zu bytes", prev);
    for (int i = first; i < M - 1; i++) {
        xrecv(&p, 1, &xr[i], tag[i], in[i], len[i]);
        settle(&p, xs, M);
        over += p.s[1].unexpected_bytes > LIMIT && p.s[1].unexpected_bytes > prev;
        prev = p.s[1].unexpected_bytes;
        bad += !(xr[i].complete && xr[i].status == TEMPO_OK);
        order_bad += xr[i].complete && memcmp(in[i], out[i], len[i]) != 0;
    }
    TAP_EQ_INT(bad, 0, "every message arrives once its receive is posted, also one larger than "
               "the limit");
    TAP_EQ_INT(order_bad, 0, "  intact, and those with one tag in the order they were sent");
    TAP_EQ_INT(over, 0, "  the buffered bytes never grew past the limit with no receive waiting");
    sent = 0;
    for (int i = 0; i < M; i++) {
        sent += xs[i].complete && xs[i].status == TEMPO_OK;
    }
    TAP_EQ_INT(sent, M, "  every send completed");
    TAP_EQ_UINT(p.s[1].unexpected_bytes, 0, "  nothing left buffered");
    TAP_EQ_INT(p.w[1]->failed, TEMPO_OK, "  the world is healthy");
    tempo__stream_cancel(&p.s[1], &standing);
    pair_fini(&p);
    for (int i = 0; i < M; i++) {
        free(out[i]);
        free(in[i]);
    }
}


/* ------------------------------------------------------------------------------------------ */
/* Zero-copy payloads                                                                         */
/* ------------------------------------------------------------------------------------------ */

static int fetch_balanced(pair_t *p)
{
    int ok = 1;
    for (int r = 0; r < 2; r++) {
        ok &= p->end[r].exposed == p->end[r].released && tempo__list_empty(&p->s[r].exposed) &&
              tempo__list_empty(&p->s[r].fetching) && !p->s[r].shead_expo;
    }
    return ok;
}

static void test_fetch(void)
{
    static const size_t sizes[] = {0, 1, 4095, 4096, 4097, 65536, 300001, 1048576};
    enum { MIN = 4096 };
    for (int defer = 0; defer < 2; defer++) {
        pair_t p;
        pair_init_ops(&p, 70000, 5000, 9000, &fetch_ops);
        p.end[0].defer = p.end[1].defer = defer ? 3 : 0;
        tempo__stream_set_fetch(&p.s[0], MIN);
        tempo__stream_set_fetch(&p.s[1], MIN);
        long bad = 0;
        size_t total = 0;
        for (int mode = 0; mode < 3; mode++) {
            for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
                size_t n = sizes[i];
                char *out = malloc(n + 1), *in = malloc(n + 1);
                fill(out, n, (unsigned)(i + 40 * mode));
                memset(in, 0, n + 1);
                tempo__xfer_t xs, xr;
                uint64_t tag = tempo__tag_coll(2, (uint32_t)i, (unsigned)mode);
                if (mode == 0) {
                    xrecv(&p, 1, &xr, tag, in, n);
                    xsend(&p, 0, &xs, tag, out, n);
                } else if (mode == 1) {
                    xsend(&p, 0, &xs, tag, out, n);
                    pump(&p);
                    xrecv(&p, 1, &xr, tag, in, n);
                } else {
                    xsend(&p, 0, &xs, tag, out, n);
                    step(&p);
                    xrecv(&p, 1, &xr, tag, in, n);
                }
                pump(&p);
                total += n;
                int ok = xs.complete && xs.status == TEMPO_OK && xr.complete &&
                         xr.status == TEMPO_OK && xr.done == n && memcmp(in, out, n) == 0 &&
                         in[n] == 0;
                if (!ok && bad++ < 3) {
                    tap_diag("defer %d mode %d, %zu bytes: send %d/%d, recv %d/%d", defer, mode,
                             n, xs.complete, xs.status, xr.complete, xr.status);
                }
                free(out);
                free(in);
            }
        }
        TAP_OK(bad == 0, "zero-copy (%s fetches): 0 B to 1 MiB intact, receives posted before, "
               "after and while arriving", defer ? "deferred" : "immediate");
        TAP_OK(p.end[0].written < total / 4, "the large payloads crossed the pipe as tickets (%zu "
               "bytes written for %zu of payload)", p.end[0].written, total);
        TAP_OK(p.end[0].exposed == 3 * 5 && fetch_balanced(&p), "15 payloads exposed, each "
               "released once at its FIN (%d exposed, %d released)", p.end[0].exposed,
               p.end[0].released);
        TAP_EQ_UINT(p.s[1].unexpected_bytes, 0, "no unexpected bytes left behind");

        /* A wrong size: the receive fails, the send completes, the next message is intact. */
        enum { N = 100000 };
        char *a = malloc(N), *b = malloc(N), *in = malloc(2 * N);
        fill(a, N, 71);
        fill(b, N, 72);
        tempo__xfer_t xs1, xs2, xr1, xr2;
        uint64_t tag = tempo__tag_coll(3, 1, 0);
        xsend(&p, 0, &xs1, tag, a, N);
        xsend(&p, 0, &xs2, tag, b, N);
        xrecv(&p, 1, &xr1, tag, in, 2 * N);
        xrecv(&p, 1, &xr2, tag, in + N, N);
        pump(&p);
        TAP_OK(xr1.complete && xr1.status == TEMPO_ERR_INVALID && xr1.remote_len == N,
               "zero-copy, wrong size: TEMPO_ERR_INVALID, remote_len %zu", xr1.remote_len);
        TAP_OK(xs1.complete && xs1.status == TEMPO_OK && xs2.complete && xs2.status == TEMPO_OK &&
               xr2.complete && xr2.status == TEMPO_OK && memcmp(in + N, b, N) == 0,
               "the sends complete and the next message of the tag arrives intact");

        /* One tag, fetched and piped messages alternating, receives posted late. */
        enum { K = 12 };
        tempo__xfer_t ks[K], kr[K];
        char *ko[K], *ki[K];
        int inorder = 1;
        tag = tempo__tag_coll(3, 2, 0);
        for (int k = 0; k < K; k++) {
            size_t n = (k & 1) ? 50000 : 100;
            ko[k] = malloc(n);
            ki[k] = malloc(n);
            fill(ko[k], n, 90u + (unsigned)k);
            xsend(&p, 0, &ks[k], tag, ko[k], n);
            if (k == 5) {
                pump(&p);
            }
        }
        for (int k = 0; k < K; k++) {
            xrecv(&p, 1, &kr[k], tag, ki[k], (k & 1) ? 50000 : 100);
            step(&p);
        }
        pump(&p);
        for (int k = 0; k < K; k++) {
            inorder &= kr[k].complete && kr[k].status == TEMPO_OK &&
                       memcmp(ki[k], ko[k], (k & 1) ? 50000 : 100) == 0;
            free(ko[k]);
            free(ki[k]);
        }
        TAP_OK(inorder, "one tag keeps its order across fetched and piped messages");

        /* Cancel a send whose ticket is out (receive posted later, fetch in flight). */
        fill(a, N, 73);
        memcpy(b, a, N);
        tag = tempo__tag_coll(3, 3, 0);
        xrecv(&p, 1, &xr1, tag, in, N);
        xsend(&p, 0, &xs1, tag, a, N); /* writes the ticket; the receiver has not run */
        int out = !xs1.complete; /* its ticket is (partly) out */
        tempo__stream_cancel(&p.s[0], &xs1);
        memset(a, 0, N); /* the caller may reuse the buffer at once */
        pump(&p);
        TAP_OK(out && xs1.complete && xr1.complete && xr1.status == TEMPO_OK &&
                   memcmp(in, b, N) == 0 && p.w[0]->failed == TEMPO_OK,
               "cancelling a send whose ticket is out waits for the fetch: the receiver has it "
               "whole (ticket out %d, recv status %d)", out, xr1.status);

        /* Cancel a receive being fetched into. */
        memcpy(a, b, N);
        tag = tempo__tag_coll(3, 4, 0);
        xrecv(&p, 1, &xr1, tag, in, N);
        xsend(&p, 0, &xs1, tag, a, N);
        int fetching = 0;
        for (int k = 0; k < 1000 && !fetching; k++) {
            step(&p);
            fetching = !tempo__list_empty(&p.s[1].fetching);
        }
        memset(in, 0, N);
        if (fetching) {
            tempo__stream_cancel(&p.s[1], &xr1);
        }
        pump(&p);
        TAP_OK(!defer || (fetching && xr1.complete && xs1.complete && xs1.status == TEMPO_OK &&
                          memcmp(in, b, N) == 0 && p.w[1]->failed == TEMPO_OK),
               "cancelling a receive being fetched into returns once the fetch is over%s",
               defer ? "" : " (immediate fetches: nothing to wait for)");

        /* A send whose ticket has not begun is withdrawn, its exposure released. */
        size_t saved = p.ch[0].len;
        p.ch[0].len = p.ch[0].cap - p.ch[0].off; /* the pipe is full: nothing is written */
        xsend(&p, 0, &xs1, tempo__tag_coll(3, 5, 0), b, N);
        int built = p.s[0].shead_expo != NULL && p.s[0].shdr_off == 0;
        tempo__stream_cancel(&p.s[0], &xs1);
        p.ch[0].len = saved;
        TAP_OK(built && xs1.complete && xs1.status == TEMPO_ERR_ABORTED && !p.s[0].shead_expo &&
                   p.end[0].exposed == p.end[0].released,
               "a zero-copy send whose ticket has not begun is withdrawn, its exposure released");
        pump(&p);
        TAP_OK(fetch_balanced(&p) && p.w[0]->failed == TEMPO_OK && p.w[1]->failed == TEMPO_OK,
               "every exposure released once, both worlds healthy");

        /* Broken with exposures out: the pipe is killed before the memory is let go. */
        xsend(&p, 0, &xs1, tempo__tag_coll(3, 6, 0), b, N); /* ticket out, never fetched */
        int pending = !xs1.complete;
        tempo__stream_broken(&p.s[0], "test");
        TAP_OK(pending && p.end[0].killed && xs1.complete && xs1.status == TEMPO_ERR_REMOTE &&
                   p.end[0].exposed == p.end[0].released,
               "a broken stream kills the pipe, then releases and fails the exposed send");
        free(a);
        free(b);
        free(in);
        pair_fini(&p);
    }

    /* Malformed zero-copy traffic. */
    static const struct {
        const char *what, *needle;
        int fetch_pipe;
        uint16_t flags;
        uint32_t reserved;
        uint8_t type;
    } bad[] = {
        {"zero-copy header on a pipe without fetch", "cannot fetch", 0, 1, 40, TEMPO_WIRE_DATA},
        {"ticket too long", "reserved", 1, 1, 8 + TEMPO_WIRE_DESC_MAX + 1, TEMPO_WIRE_DATA},
        {"ticket too short", "reserved", 1, 1, 8, TEMPO_WIRE_DATA},
        {"unknown flag", "reserved", 1, 2, 40, TEMPO_WIRE_DATA},
        {"FIN never offered", "never offered", 1, 0, 0, TEMPO_WIRE_FIN},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        pair_t p;
        pair_init_ops(&p, 4096, 4096, 4096, bad[i].fetch_pipe ? &fetch_ops : &mem_ops);
        tempo__wire_hdr_t h;
        memset(&h, 0, sizeof(h));
        h.magic = TEMPO_WIRE_MAGIC;
        h.version = TEMPO_WIRE_VERSION;
        h.type = bad[i].type;
        h.src = 0;
        h.tag = 77;
        h.len = h.type == TEMPO_WIRE_DATA ? 50000 : 0;
        h.flags = bad[i].flags;
        h.reserved = bad[i].reserved;
        inject(&p.ch[0], &h, sizeof(h));
        tempo__xfer_t xr;
        char buf[16];
        xrecv(&p, 1, &xr, tempo__tag_coll(1, 1, 1), buf, sizeof(buf));
        pump(&p);
        TAP_OK(p.w[1]->failed == TEMPO_ERR_REMOTE && strstr(p.w[1]->failmsg, bad[i].needle) &&
                   strstr(p.w[1]->failmsg, "rank 0") && xr.complete,
               "%s: the world fails naming the peer (%s)", bad[i].what, p.w[1]->failmsg);
        pair_fini(&p);
    }
}

int main(void)
{
    seed = tu_seed();
    rng = seed;
    tap_diag("seed %llu (replay with TEMPO_TEST_SEED)", (unsigned long long)seed);
    test_sizes();
    test_empty_null();
    test_order();
    test_urgent();
    test_wrong_size();
    test_malformed();
    test_fuzz();
    test_goodbye();
    test_eof_and_errors();
    test_cancel();
    test_backpressure();
    test_fetch();
    return tap_done();
}
