/*
 * fuzz_stream.c — frame headers and payloads from a peer (transport/stream.c), what the tcp and
 * shm transports read from their sockets and rings: every message's tempo__wire_hdr_t, its
 * payload, control notes, goodbye and abort notices, zero-copy tickets and FINs.
 *
 * Input: flags (the pipe ends in EOF or just runs dry; zero-copy on; a limit on unexpected bytes),
 * the size of the pieces the pipe hands out (1..256), up to 4 receives to post (tag among the
 * first collective tags, length 0..2047, standing or not), then the bytes rank 0 "sent" to rank 1
 * of a 2-rank world. The stream reads them all (or fails the world); then it is torn down.
 * What must hold: no crash, overrun or leak; the stream ends in a clean state or a failed world
 * whose message names the peer; a completed receive never reports more bytes than its buffer.
 *
 * A header may claim a message of up to TEMPO_WIRE_MAX_LEN (1 TiB), and an unexpected message
 * that may be buffered gets a buffer of that size, filled only as bytes arrive (a failed malloc
 * fails the world: "no memory to buffer"): by design. Here ASan refuses allocations above 64 MB
 * (NULL, as a failed malloc), so such headers take that path instead of mapping gigabytes.
 */
#include "config.h"

#include "tests/fuzz/fuzz.h"

#include "core/cfg.h"
#include "transport/stream.h"

#include <errno.h>

typedef struct {
    const uint8_t *p;
    size_t n, off, piece;
    int eof; /* after the bytes: the end of the stream (else: nothing more, for now) */
} pipe_t;

static ssize_t p_writev(void *pipe, const struct iovec *iov, int iovcnt)
{
    (void)pipe;
    size_t n = 0;
    for (int i = 0; i < iovcnt; i++) {
        n += iov[i].iov_len; /* (rank 1's goodbye and FINs: taken and dropped) */
    }
    return (ssize_t)n;
}

static ssize_t p_read(void *pipe, void *buf, size_t len)
{
    pipe_t *q = pipe;
    if (q->off == q->n) {
        return q->eof ? TEMPO_PIPE_EOF : 0;
    }
    size_t k = TEMPO_MIN(TEMPO_MIN(len, q->n - q->off), q->piece);
    memcpy(buf, q->p + q->off, k);
    q->off += k;
    return (ssize_t)k;
}

/* A pipe that offers zero copy but whose fetches fail: the tickets are parsed, nothing is read
 * from the addresses they hold. */
static size_t p_expose(void *pipe, const void *buf, size_t len, void *desc, void **handle)
{
    (void)pipe, (void)buf, (void)len, (void)desc, (void)handle;
    return 0;
}

static void p_release(void *pipe, void *handle)
{
    (void)pipe, (void)handle;
}

static int p_fetch(void *pipe, const void *desc, size_t desc_len, void *dst, size_t len, void *op)
{
    (void)pipe, (void)desc, (void)desc_len, (void)dst, (void)len, (void)op;
    return -EIO;
}

static void p_kill(void *pipe)
{
    (void)pipe;
}

static const tempo__pipe_ops_t ops = {.writev = p_writev, .read = p_read};
static const tempo__pipe_ops_t zc_ops = {.writev = p_writev,
                                         .read = p_read,
                                         .expose = p_expose,
                                         .release = p_release,
                                         .fetch = p_fetch,
                                         .kill = p_kill};

const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1:max_allocation_size_mb=64";
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    setenv("TEMPO_DEBUG", "NONE", 1); /* (a failed world logs its reason) */
    if (tempo__config_load() != TEMPO_OK) {
        fprintf(stderr, "fuzz_stream: %s\n", tempo__errmsg());
        exit(1);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size, 0};
    uint8_t flags = fuzz_u8(&in);
    pipe_t q = {0};
    q.piece = 1 + fuzz_u8(&in);
    q.eof = flags & 1;
    struct {
        tempo__xfer_t x;
        char buf[2048];
    } rx[4];
    int nrx = fuzz_u8(&in) % 5;
    uint8_t spec[4][3];
    for (int i = 0; i < nrx; i++) {
        fuzz_take(&in, spec[i], 3);
    }
    q.p = fuzz_rest(&in, &q.n);

    tempo__peer_info_t table[2];
    memset(table, 0, sizeof(table));
    for (int r = 0; r < 2; r++) {
        table[r].rank = r;
        table[r].pid = 4100 + r;
        table[r].host_id = 7 + (uint64_t)r;
        snprintf(table[r].hostname, sizeof(table[r].hostname), "host%c", 'A' + r);
    }
    tempo__world_t *w;
    tempo__stream_t s;
    if (tempo__world_create(1, 2, table, 30.0, &w) != TEMPO_OK ||
        tempo__stream_init(&s, w, 0, "fuzz", flags & 2 ? &zc_ops : &ops, &q) != TEMPO_OK) {
        fprintf(stderr, "fuzz_stream: %s\n", tempo__errmsg());
        abort();
    }
    if (flags & 2) {
        tempo__stream_set_fetch(&s, 64);
    }
    if (flags & 4) {
        s.ux_limit = 256; /* back-pressure (then reading stops at an unexpected message) */
    }
    for (int i = 0; i < nrx; i++) {
        memset(&rx[i].x, 0, sizeof(rx[i].x));
        rx[i].x.peer = 0;
        rx[i].x.tag = tempo__tag_coll(1, 1, spec[i][0] % 4);
        rx[i].x.buf = rx[i].buf;
        rx[i].x.len = (spec[i][1] | (size_t)spec[i][2] << 8) % sizeof(rx[i].buf);
        rx[i].x.standing = spec[i][0] >> 7;
        tempo__stream_irecv(&s, &rx[i].x);
    }
    int rc = 0;
    for (int i = 0; i < 100000 && rc >= 0 && (q.off < q.n || i == 0); i++) {
        rc = tempo__stream_progress_recv(&s);
        tempo__stream_progress_send(&s);
        if (rc >= 0 && tempo__stream_recv_blocked(&s)) {
            break;
        }
    }
    if (w->failed && !strstr(w->failmsg, "rank 0 (host hostA, pid 4100)")) {
        fprintf(stderr, "a failure that does not name the peer: %s\n", w->failmsg);
        abort();
    }
    for (int i = 0; i < nrx; i++) {
        if (rx[i].x.complete && rx[i].x.status == TEMPO_OK && rx[i].x.done > rx[i].x.len) {
            abort();
        }
        if (!rx[i].x.complete) {
            tempo__stream_cancel(&s, &rx[i].x);
        }
    }
    tempo__stream_fini(&s);
    tempo__world_destroy(w, 0);
    return 0;
}

#ifdef FUZZ_SEEDS
static size_t put_msg(uint8_t *b, uint8_t type, uint64_t tag, const char *payload, size_t len)
{
    tempo__wire_hdr_t h;
    memset(&h, 0, sizeof(h));
    h.magic = TEMPO_WIRE_MAGIC;
    h.version = TEMPO_WIRE_VERSION;
    h.type = type;
    h.src = 0;
    h.tag = tag;
    h.len = len;
    memcpy(b, &h, sizeof(h));
    memcpy(b + sizeof(h), payload, len);
    return sizeof(h) + len;
}

static void fuzz_seeds(void)
{
    static const char text[] = "a payload of forty bytes, more or less..";
    for (int k = 0; k < 6; k++) {
        uint8_t b[4096];
        size_t n = 0;
        b[n++] = (uint8_t)(k == 5 ? 4 : k & 1); /* flags */
        b[n++] = (uint8_t)(k * 40);             /* pieces */
        b[n++] = (uint8_t)(k % 3);              /* receives */
        for (int i = 0; i < k % 3; i++) {
            b[n++] = (uint8_t)i;
            b[n++] = 40;
            b[n++] = 0;
        }
        for (int m = 0; m < 3; m++) {
            n += put_msg(b + n, TEMPO_WIRE_DATA, tempo__tag_coll(1, 1, (unsigned)m), text,
                         k == 3 ? 7 : 40);
        }
        if (k == 2) {
            n += put_msg(b + n, TEMPO_WIRE_NOTE, 0, "note", 4);
        }
        if (k == 4) {
            n += put_msg(b + n, TEMPO_WIRE_BYE, 0, "", 0);
        }
        if (k == 1) {
            n += put_msg(b + n, TEMPO_WIRE_ABORT, 0, "", 0);
        }
        fuzz_seed(b, n);
    }
}
#endif
