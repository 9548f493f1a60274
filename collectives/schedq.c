/*
 * schedq.c — the scheduled lane of a communicator: requests posted with a priority, run in one
 * rank-independent order, split into chunks, with a credit limit on bytes in flight.
 *
 * Why a coordinator. Collectives must start in the same order on every rank, but gradients become
 * ready at different times on different ranks, and a good order ("what the next forward needs
 * first goes first") depends on what is ready. Comm rank 0 therefore decides (Horovod's
 * coordinator, with TicTac/P3/ByteScheduler priorities and credit):
 *   1. Every rank numbers its scheduled posts per tag (occurrence) and reports each post to the
 *      coordinator (POST): identity (tag, occurrence), collective, count, dtype, op, priority.
 *   2. When every rank has posted an identity, the coordinator checks that the reports agree,
 *      gives the request the next "ready" number and puts it in a heap ordered by (occurrence,
 *      priority, ready number); TEMPO_SCHED=fifo drops the priority. Its chunks are cut now.
 *   3. While its own chunks in flight hold fewer than the credit, the coordinator pops the
 *      most urgent request's next chunk, starts it, and tells every rank to start it (START,
 *      batched). Every rank starts chunks exactly in START order and numbers them with the lane's
 *      own sequence (TEMPO_SEQ_SCHED), so tags and shared-memory tickets agree everywhere.
 * The credit and the chunk size are TEMPO_CREDIT_BYTES and TEMPO_CHUNK_BYTES, or with "auto" (the
 * default) the coordinator's estimator (autosize.h) sizes them from its own completed chunks. Both
 * are the coordinator's alone: a request's chunks are cut once, on the coordinator, and START
 * carries every chunk's offset, count and number of chunks, so every rank runs the same chunk
 * boundaries whatever the timing (timing only decides what the coordinator picks). When a choice
 * changes it is logged at INFO (OVERLAP) with the measurements, and drawn as counter tracks in the
 * timeline ("sched credit", "sched chunk", "sched rate MB/s", "sched latency us").
 * Nothing in the order depends on a rank's local arrival times; only the coordinator's view of
 * global readiness and its own completions (a collective completes at rank 0 only when every rank
 * has taken part) decide, and every rank follows the decisions in the same order.
 *
 * What it is not: it never touches the program-order lane (blocking calls and unprioritized
 * requests keep their own sequence, tags and shared-memory state), and chunks are ordinary
 * operations run by the ordinary algorithms.
 *
 * Faults: a request whose identity some rank never posts fails after TEMPO_TIMEOUT on the
 * coordinator, which names it and the missing ranks and sends the text to every rank (FAIL);
 * other ranks' requests wait a little longer (grace) so that this precise error reaches them
 * before their own generic timeout; a request still waiting for start decisions waits for the
 * coordinator (its wait_peer), so a coordinator that stops is named as the rank that stopped
 * (core/blame.c), not "its peers". Disagreeing reports fail at once, and so does a request that
 * some rank rejected (bad arguments: it still takes its occurrence and reports the rejection)
 * where others posted it. A request of count 0 moves nothing but still completes only when the
 * coordinator has every rank's report and they agree (a START with no chunks), so that no rank
 * gets TEMPO_OK for a request its peers made differently. Control messages are validated before
 * use; a malformed one fails the job naming the sender.
 *
 * Invariants
 *   - The coordinator starts the chunks of one request in index order, so a request's started
 *     chunks are always 0..started-1.
 *   - A request is on sq->reqs exactly while some of its chunks have not started.
 *   - All state is protected by the world lock.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>

#include "collectives/autosize.h"
#include "collectives/coll.h"
#include "core/cfg.h"
#include "core/trace.h"

#define CTRL_BYTES TEMPO__SQ_CTRL_BYTES
#define CTRL_MAGIC 0x71536574u /* "teSq" */
#define KIND_TO_COORD 1        /* control tag kinds */
#define KIND_FROM_COORD 2
#define CHECK_NS 100000000ull /* how often the coordinator looks for overdue identities */

enum { MSG_POST = 1, MSG_START = 2, MSG_FAIL = 3 };

typedef struct {
    uint32_t magic;
    uint16_t type;
    uint16_t n;     /* entries (POST, START), or -status (FAIL) */
    int32_t from;   /* comm rank of the sender */
    uint32_t reserved;
} hdr_t;

typedef struct {
    uint64_t tag;
    uint64_t count;
    uint64_t chunk_bytes; /* 0: TEMPO_CHUNK_BYTES; UINT64_MAX: never split */
    uint32_t occ;
    int32_t prio;
    uint8_t coll, dtype, redop;
    uint8_t compressed; /* the request runs through a compressor */
    uint8_t rejected;   /* the rank rejected the request (its arguments): it never runs there */
    char name[27];
} post_ent_t;

typedef struct {
    uint64_t tag;
    uint64_t off, cnt; /* elements (per rank block for reduce-scatter and all-gather) */
    uint32_t occ, chunk, nchunks; /* nchunks 0: a count-0 request every rank posted alike */
    uint32_t seq;         /* lane sequence number of this chunk */
    uint32_t ready_seq;   /* the request's ready number */
    uint32_t ready_count; /* requests that had become ready when this chunk was picked */
    int32_t prio;         /* the coordinator's priority */
    uint32_t reserved;
} start_ent_t;

#define POST_MAX ((int)((CTRL_BYTES - sizeof(hdr_t)) / sizeof(post_ent_t)))
#define START_MAX ((int)((CTRL_BYTES - sizeof(hdr_t)) / sizeof(start_ent_t)))

typedef struct {
    tempo__xfer_t x;
    int peer; /* comm rank */
    int posted;
    _Alignas(8) unsigned char buf[CTRL_BYTES];
} rx_t;

typedef struct {
    tempo__list_t link;
    tempo__xfer_t x;
    _Alignas(8) unsigned char buf[CTRL_BYTES];
} tx_t;

/* The coordinator's record of one identity. */
typedef struct skey {
    tempo__list_t link; /* sq->keys */
    post_ent_t sig;     /* the first report; priority and chunk size from the coordinator's own */
    int nposted;
    uint8_t *posted; /* (n) */
    uint64_t t_first;
    uint32_t ready_seq;
    uint32_t nchunks, next_chunk;
} skey_t;

struct tempo__sq {
    struct tempo_comm *comm;
    tempo__poller_t poller;
    int coord;
    uint32_t next_seq; /* chunks started so far (lane sequence) */
    uint64_t grace_ns;

    /* occurrence counters: open addressing, tag -> next occurrence */
    uint64_t *occ_tags;
    uint32_t *occ_next;
    uint8_t *occ_used;
    size_t occ_cap, occ_n;

    tempo__list_t reqs; /* local requests with chunks not yet started */
    rx_t *rx;
    int nrx;
    tempo__list_t tx_busy, tx_free;

    /* coordinator */
    tempo__list_t keys;
    skey_t **heap;
    size_t nheap, heap_cap;
    uint32_t next_ready;
    size_t inflight; /* bytes of this rank's running chunks */
    tempo__autosize_t as; /* the credit and chunk size in use, and their measurements */
    start_ent_t start_batch[CTRL_BYTES / sizeof(start_ent_t)];
    int nstart;
    /* Coordinator: the chunks of start_batch, accepted here but launched only once their START
     * has been sent (flush_starts), so that a START is never queued behind the coordinator's own
     * first data for the same chunk: a stream sends whole messages in order, and a 18.7 MB
     * all-reduce's first 9 MB message to a peer held that peer's START for 75 ms at 1 Gbit/s
     * (the peer then started late, and the all-reduce took 1.8 times as long). */
    struct {
        tempo__op_t *op;
        tempo_status_t st;
        const tempo__algo_t *algo;
    } launch[CTRL_BYTES / sizeof(start_ent_t)];
    int nlaunch;
    uint64_t next_check_ns;

    /* activity */
    int running;
    uint64_t busy_since, busy_ns, last_activity_ns;
    FILE *log;
};

/* A scheduled request (the parent operation's priv). */
typedef struct {
    tempo__list_t link; /* sq->reqs */
    tempo__sq_t *sq;
    tempo__op_t *op; /* the request */
    const char *forced; /* algorithm name (static) or NULL */
    char name[64];
    uint32_t nchunks, started, done, scan;
    tempo__op_t **kids; /* (nchunks) */
    tempo__as_mark_t *marks; /* (nchunks), coordinator: each chunk's start for the estimator */
    int agreed;              /* count 0: every rank posted it alike (nothing to run) */
    tempo_status_t err;
    char errmsg[TEMPO_ERRMSG_LEN];
} sreq_t;

static int is_sched_coll(int coll)
{
    return coll == TEMPO__COLL_ALLREDUCE || coll == TEMPO__COLL_REDUCE_SCATTER ||
           coll == TEMPO__COLL_ALLGATHER;
}


static tempo__world_t *W(tempo__sq_t *sq)
{
    return sq->comm->world;
}

/* ---------------------------------------------------------------------------------------------- */
/* Occurrence counters                                                                            */
/* ---------------------------------------------------------------------------------------------- */

static size_t occ_slot(const tempo__sq_t *sq, uint64_t tag)
{
    size_t i = (size_t)(tag * 0x9e3779b97f4a7c15ull >> 20) & (sq->occ_cap - 1);
    while (sq->occ_used[i] && sq->occ_tags[i] != tag) {
        i = (i + 1) & (sq->occ_cap - 1);
    }
    return i;
}

static tempo_status_t occ_grow(tempo__sq_t *sq)
{
    size_t cap = sq->occ_cap ? sq->occ_cap * 2 : 64;
    uint64_t *tags = tempo__calloc(cap, sizeof(*tags), "occurrence table");
    uint32_t *next = tempo__calloc(cap, sizeof(*next), "occurrence table");
    uint8_t *used = tempo__calloc(cap, 1, "occurrence table");
    if (!tags || !next || !used) {
        tempo__free(tags);
        tempo__free(next);
        tempo__free(used);
        return TEMPO_ERR_NOMEM;
    }
    uint64_t *ot = sq->occ_tags;
    uint32_t *on = sq->occ_next;
    uint8_t *ou = sq->occ_used;
    size_t ocap = sq->occ_cap;
    sq->occ_tags = tags;
    sq->occ_next = next;
    sq->occ_used = used;
    sq->occ_cap = cap;
    for (size_t i = 0; i < ocap; i++) {
        if (ou[i]) {
            size_t j = occ_slot(sq, ot[i]);
            used[j] = 1;
            tags[j] = ot[i];
            next[j] = on[i];
        }
    }
    tempo__free(ot);
    tempo__free(on);
    tempo__free(ou);
    return TEMPO_OK;
}

/* The occurrence of this post of tag (0 for the first). */
static tempo_status_t occ_take(tempo__sq_t *sq, uint64_t tag, uint32_t *occ_p)
{
    if (2 * (sq->occ_n + 1) > sq->occ_cap) {
        TEMPO_CHECK(occ_grow(sq));
    }
    size_t i = occ_slot(sq, tag);
    if (!sq->occ_used[i]) {
        sq->occ_used[i] = 1;
        sq->occ_tags[i] = tag;
        sq->occ_next[i] = 0;
        sq->occ_n++;
    }
    *occ_p = sq->occ_next[i]++;
    return TEMPO_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Control messages                                                                               */
/* ---------------------------------------------------------------------------------------------- */

/* Nothing on this rank waits for a control message: local requests all started and, on the
 * coordinator, no identity waiting for other ranks' reports. Only then are the always-posted control
 * receives "standing" (transport.h): they do not keep a peer's pipe read past
 * TEMPO_UNEXPECTED_BYTES. While the lane waits, they do, because the message it waits for (a START
 * decision, a POST report) may be queued behind data of chunks already started. */
static int lane_idle(const tempo__sq_t *sq)
{
    return tempo__list_empty(&sq->reqs) && !(sq->coord && !tempo__list_empty(&sq->keys));
}

static void rx_post(tempo__sq_t *sq, rx_t *rx)
{
    unsigned kind = sq->coord ? KIND_TO_COORD : KIND_FROM_COORD;
    rx->x.standing = lane_idle(sq);
    tempo__tl_irecv(W(sq), tempo__wrank(sq->comm, rx->peer), tempo__tag_ctrl(sq->comm->ctx, kind),
                    rx->buf, CTRL_BYTES, &rx->x);
    rx->posted = 1;
}

static tempo_status_t send_msg(tempo__sq_t *sq, int peer, const void *msg)
{
    tx_t *tx;
    if (!tempo__list_empty(&sq->tx_free)) {
        tx = tempo__container_of(sq->tx_free.next, tx_t, link);
        tempo__list_remove(&tx->link);
    } else {
        tx = tempo__malloc(sizeof(*tx), "scheduler message");
        if (!tx) {
            return TEMPO_ERR_NOMEM;
        }
    }
    memcpy(tx->buf, msg, CTRL_BYTES);
    memset(&tx->x, 0, sizeof(tx->x));
    tempo__list_push_back(&sq->tx_busy, &tx->link);
    unsigned kind = sq->coord ? KIND_FROM_COORD : KIND_TO_COORD;
    /* Urgent: ahead of the chunks' data queued to the same peer (a START or a POST report that
     * waited behind it delayed the chunks it decides by the time the queue took to drain). */
    return tempo__tl_isend_urgent(W(sq), tempo__wrank(sq->comm, peer),
                                  tempo__tag_ctrl(sq->comm->ctx, kind), tx->buf, CTRL_BYTES,
                                  &tx->x);
}

static void reap_sends(tempo__sq_t *sq)
{
    tempo__list_t *pos, *tmp;
    tempo__list_for_each_safe (pos, tmp, &sq->tx_busy) {
        tx_t *tx = tempo__container_of(pos, tx_t, link);
        if (tx->x.complete) {
            tempo__list_remove(&tx->link);
            tempo__list_push_back(&sq->tx_free, &tx->link);
        }
    }
}

/* One control message: a header and len bytes of body, to the coordinator (peer 0) or, from it, to
 * every other rank (peer -1). */
static tempo_status_t send_batch(tempo__sq_t *sq, int peer, int type, uint16_t n, const void *body,
                                 size_t len)
{
    _Alignas(8) unsigned char msg[CTRL_BYTES];
    memset(msg, 0, sizeof(msg));
    hdr_t h = {CTRL_MAGIC, (uint16_t)type, n, sq->comm->rank, 0};
    memcpy(msg, &h, sizeof(h));
    memcpy(msg + sizeof(h), body, TEMPO_MIN(len, CTRL_BYTES - sizeof(h)));
    for (int r = peer < 0 ? 1 : peer; r < (peer < 0 ? sq->comm->size : peer + 1); r++) {
        TEMPO_CHECK(send_msg(sq, r, msg));
    }
    return TEMPO_OK;
}

/* Coordinator: launch the chunks accepted since the last call (see tempo__sq_t.launch). A chunk
 * that cannot start fails itself, and its request. */
static void launch_accepted(tempo__sq_t *sq)
{
    int n = sq->nlaunch;
    sq->nlaunch = 0;
    for (int i = 0; i < n; i++) {
        tempo__op_launch(sq->launch[i].op, sq->launch[i].st, sq->launch[i].algo);
    }
}

/* Coordinator: send the START decisions batched so far, then launch their chunks here. */
static tempo_status_t flush_starts(tempo__sq_t *sq)
{
    tempo_status_t st = TEMPO_OK;
    if (sq->nstart) {
        int n = sq->nstart;
        sq->nstart = 0;
        st = send_batch(sq, -1, MSG_START, (uint16_t)n, sq->start_batch,
                        sizeof(start_ent_t) * (size_t)n);
    }
    launch_accepted(sq);
    return st;
}

/* Coordinator: fail the job with text, and tell every rank why first. */
static tempo_status_t coord_fail(tempo__sq_t *sq, tempo_status_t st, const char *fmt, ...)
    TEMPO_FMT_PRINTF(3, 4);
static tempo_status_t coord_fail(tempo__sq_t *sq, tempo_status_t st, const char *fmt, ...)
{
    char text[CTRL_BYTES - sizeof(hdr_t)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    sq->nstart = 0;
    launch_accepted(sq);
    (void)send_batch(sq, -1, MSG_FAIL, (uint16_t)(-st), text, strlen(text) + 1);
    if (st == TEMPO_ERR_INVALID) { /* ranks disagree: this communicator only */
        tempo__comm_fail(sq->comm, st, text);
        return tempo__err_quiet(st, "%s", text); /* a caller's request fails with it */
    }
    return tempo__world_fail(W(sq), st, "%s", text);
}

/* ---------------------------------------------------------------------------------------------- */
/* Coordinator: identities, readiness, the heap                                                   */
/* ---------------------------------------------------------------------------------------------- */

static int key_before(const skey_t *a, const skey_t *b)
{
    if (a->sig.occ != b->sig.occ) {
        return a->sig.occ < b->sig.occ;
    }
    if (tempo__cfg.sched != TEMPO__SCHED_FIFO && a->sig.prio != b->sig.prio) {
        return a->sig.prio < b->sig.prio;
    }
    return a->ready_seq < b->ready_seq;
}

static tempo_status_t heap_push(tempo__sq_t *sq, skey_t *k)
{
    if (sq->nheap == sq->heap_cap) {
        size_t cap = sq->heap_cap ? 2 * sq->heap_cap : 64;
        skey_t **h = tempo__realloc(sq->heap, cap * sizeof(*h), "scheduler heap");
        if (!h) {
            return TEMPO_ERR_NOMEM;
        }
        sq->heap = h;
        sq->heap_cap = cap;
    }
    size_t i = sq->nheap++;
    while (i > 0 && key_before(k, sq->heap[(i - 1) / 2])) {
        sq->heap[i] = sq->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    sq->heap[i] = k;
    return TEMPO_OK;
}

static void heap_pop(tempo__sq_t *sq)
{
    skey_t *last = sq->heap[--sq->nheap];
    size_t i = 0, n = sq->nheap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) {
            break;
        }
        if (c + 1 < n && key_before(sq->heap[c + 1], sq->heap[c])) {
            c++;
        }
        if (!key_before(sq->heap[c], last)) {
            break;
        }
        sq->heap[i] = sq->heap[c];
        i = c;
    }
    if (n) {
        sq->heap[i] = last;
    }
}

static skey_t *key_find(tempo__sq_t *sq, uint64_t tag, uint32_t occ)
{
    tempo__list_t *pos, *tmp;
    tempo__list_for_each_safe (pos, tmp, &sq->keys) {
        skey_t *k = tempo__container_of(pos, skey_t, link);
        if (k->sig.tag == tag && k->sig.occ == occ) {
            return k;
        }
    }
    return NULL;
}

static void key_free(skey_t *k)
{
    tempo__list_remove(&k->link);
    tempo__free(k->posted);
    tempo__free(k);
}

static const char *ent_desc(const post_ent_t *e, char *buf, size_t len)
{
    snprintf(buf, len, "%s of %llu x %s%s%s", tempo__coll_name(e->coll),
             (unsigned long long)e->count, tempo_dtype_name((tempo_dtype_t)e->dtype),
             e->coll == TEMPO__COLL_ALLGATHER ? "" : " ",
             e->coll == TEMPO__COLL_ALLGATHER ? "" : tempo_op_name((tempo_op_t)e->redop));
    return buf;
}

/* A posted request's call as the core's agreement checks see it. */
static tempo__sig_t ent_sig(const post_ent_t *e)
{
    tempo__sig_t g;
    memset(&g, 0, sizeof(g));
    g.valid = 1;
    g.coll = e->coll;
    g.count = e->count;
    g.dtype = e->dtype;
    g.root = -1;
    g.redop = e->coll == TEMPO__COLL_ALLGATHER ? 0 : (uint8_t)(e->redop + 1);
    return g;
}

static const char *key_name(const post_ent_t *e, char *buf, size_t len)
{
    if (e->name[0]) {
        snprintf(buf, len, "'%.*s' (tag %llu, occurrence %u)", (int)sizeof(e->name), e->name,
                 (unsigned long long)e->tag, e->occ);
    } else {
        snprintf(buf, len, "tag %llu (occurrence %u)", (unsigned long long)e->tag, e->occ);
    }
    return buf;
}

static tempo_status_t start_local(tempo__sq_t *sq, const start_ent_t *se);

/* Rank from reported e. */
static tempo_status_t coord_report(tempo__sq_t *sq, int from, const post_ent_t *e)
{
    int n = sq->comm->size;
    skey_t *k = key_find(sq, e->tag, e->occ);
    if (!k) {
        k = tempo__calloc(1, sizeof(*k), "scheduler key");
        uint8_t *posted = tempo__calloc((size_t)n, 1, "scheduler key");
        if (!k || !posted) {
            tempo__free(k);
            tempo__free(posted);
            return TEMPO_ERR_NOMEM;
        }
        k->sig = *e;
        k->posted = posted;
        k->t_first = tempo__now_ns();
        tempo__list_push_back(&sq->keys, &k->link);
    } else if (k->sig.rejected != e->rejected) {
        char nm[96], desc[96];
        int first = 0;
        while (first < n && !k->posted[first]) {
            first++;
        }
        const post_ent_t *made = e->rejected ? &k->sig : e;
        return coord_fail(sq, TEMPO_ERR_INVALID,
                          "ranks disagree on scheduled request %s: comm rank %d rejected its "
                          "request (its arguments) where comm rank %d posted %s",
                          key_name(&k->sig, nm, sizeof(nm)), e->rejected ? from : first,
                          e->rejected ? first : from, ent_desc(made, desc, sizeof(desc)));
    } else if (!e->rejected &&
               (k->sig.coll != e->coll || k->sig.count != e->count || k->sig.dtype != e->dtype ||
                (e->coll != TEMPO__COLL_ALLGATHER && k->sig.redop != e->redop))) {
        char nm[96], d[256];
        int first = 0;
        while (first < n && !k->posted[first]) {
            first++;
        }
        tempo__sig_t mine = ent_sig(&k->sig), theirs = ent_sig(e);
        tempo__sig_diff(sq->comm, first, &mine, from, &theirs, d, sizeof(d));
        return coord_fail(sq, TEMPO_ERR_INVALID,
                          "ranks disagree on scheduled request %s: %s", key_name(&k->sig, nm,
                          sizeof(nm)), d);
    }
    if (k->posted[from]) {
        char nm[96], who[160];
        return coord_fail(sq, TEMPO_ERR_REMOTE, "%s reported scheduled request %s twice",
                          tempo__peer_desc(W(sq), tempo__wrank(sq->comm, from), who, sizeof(who)),
                          key_name(e, nm, sizeof(nm)));
    }
    k->posted[from] = 1;
    k->nposted++;
    if (from == 0) { /* the coordinator's priority and chunk size are the ones used */
        k->sig.prio = e->prio;
        k->sig.chunk_bytes = e->chunk_bytes;
        k->sig.compressed = e->compressed;
        if (e->name[0]) {
            memcpy(k->sig.name, e->name, sizeof(k->sig.name));
        }
    }
    if (k->nposted < n) {
        return TEMPO_OK;
    }
    if (k->sig.rejected) {
        key_free(k); /* rejected everywhere: the ranks stay in step */
        return TEMPO_OK;
    }
    if (k->sig.count == 0) {
        /* Posted alike everywhere, nothing to move: every rank's request completes now. */
        start_ent_t se;
        memset(&se, 0, sizeof(se));
        se.tag = k->sig.tag;
        se.occ = k->sig.occ;
        se.seq = sq->next_seq;
        key_free(k);
        sq->start_batch[sq->nstart++] = se;
        TEMPO_CHECK(start_local(sq, &se));
        return flush_starts(sq);
    }
    /* Posted everywhere: cut it into chunks and queue it. */
    k->ready_seq = sq->next_ready++;
    uint64_t cb = k->sig.chunk_bytes;
    if (!cb) { /* TEMPO_CHUNK_BYTES; auto only where the cuts cannot change the result */
        cb = !sq->as.auto_chunk || tempo__autosize_cut_free(k->sig.coll, k->sig.dtype, n,
                                                            k->sig.compressed)
                 ? sq->as.chunk
                 : TEMPO__AS_CHUNK_EXACT;
    }
    size_t unit = tempo__coll_bytes(k->sig.coll, (tempo_dtype_t)k->sig.dtype, 1, n);
    uint64_t per = cb == UINT64_MAX ? k->sig.count : TEMPO_MAX(cb / unit, (uint64_t)1);
    uint64_t nch = (k->sig.count + per - 1) / per;
    k->nchunks = (uint32_t)TEMPO_MIN(nch, (uint64_t)UINT32_MAX);
    return heap_push(sq, k);
}

/* Coordinator: start chunks while credit allows. Returns how many, or a negative status. */
static int dispatch(tempo__sq_t *sq)
{
    int started = 0;
    while (sq->nheap) {
        skey_t *k = sq->heap[0];
        size_t off, cnt;
        tempo__block((size_t)k->sig.count, (int)k->nchunks, (int)k->next_chunk, &off, &cnt);
        size_t bytes = tempo__coll_bytes(k->sig.coll, (tempo_dtype_t)k->sig.dtype, cnt,
                                         sq->comm->size);
        if (!tempo__autosize_fits(&sq->as, sq->inflight, bytes)) { /* autosize.h */
            break;
        }
        start_ent_t se;
        memset(&se, 0, sizeof(se));
        se.tag = k->sig.tag;
        se.occ = k->sig.occ;
        se.chunk = k->next_chunk++;
        se.nchunks = k->nchunks;
        se.off = off;
        se.cnt = cnt;
        se.seq = sq->next_seq;
        se.ready_seq = k->ready_seq;
        se.ready_count = sq->next_ready;
        se.prio = k->sig.prio;
        if (k->next_chunk == k->nchunks) {
            heap_pop(sq);
            key_free(k);
        }
        sq->start_batch[sq->nstart++] = se;
        tempo_status_t st = start_local(sq, &se); /* accepted; launched by flush_starts */
        if (st != TEMPO_OK) {
            launch_accepted(sq);
            return st;
        }
        if (sq->nstart == START_MAX) {
            TEMPO_CHECK(flush_starts(sq));
        }
        started++;
    }
    TEMPO_CHECK(flush_starts(sq));
    return started;
}

/* Coordinator: identities some rank has not posted within TEMPO_TIMEOUT. */
static void check_overdue(tempo__sq_t *sq, uint64_t now)
{
    uint64_t limit = (uint64_t)(W(sq)->timeout_s * 1e9);
    tempo__list_t *pos, *tmp;
    tempo__list_for_each_safe (pos, tmp, &sq->keys) {
        skey_t *k = tempo__container_of(pos, skey_t, link);
        if (k->nposted == sq->comm->size || now - k->t_first <= limit) {
            continue;
        }
        char nm[96], desc[96], posted[160] = "", missing[320] = "";
        size_t lp = 0, lm = 0;
        for (int r = 0; r < sq->comm->size; r++) {
            if (k->posted[r] && lp < sizeof(posted) - 16) {
                lp += (size_t)snprintf(posted + lp, sizeof(posted) - lp, "%s%d", lp ? "," : "", r);
            } else if (!k->posted[r] && lm < sizeof(missing) - 100) {
                char who[160];
                lm += (size_t)snprintf(
                    missing + lm, sizeof(missing) - lm, "%s%s", lm ? ", " : "",
                    tempo__peer_desc(W(sq), tempo__wrank(sq->comm, r), who, sizeof(who)));
            }
        }
        coord_fail(sq, TEMPO_ERR_TIMEOUT,
                   "scheduled %s %s was posted by rank%s %s but not by %s within %.0f s "
                   "(TEMPO_TIMEOUT): every rank must post the same scheduled requests",
                   ent_desc(&k->sig, desc, sizeof(desc)), key_name(&k->sig, nm, sizeof(nm)),
                   strchr(posted, ',') ? "s" : "", posted, missing, W(sq)->timeout_s);
        return;
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Requests and chunks (every rank)                                                               */
/* ---------------------------------------------------------------------------------------------- */

static void busy_add(tempo__sq_t *sq, int delta, uint64_t now)
{
    if (sq->running == 0 && delta > 0) {
        sq->busy_since = now;
    }
    sq->running += delta;
    if (sq->running == 0 && delta < 0) {
        sq->busy_ns += now - sq->busy_since;
    }
    sq->last_activity_ns = now;
}

static sreq_t *req_find(tempo__sq_t *sq, uint64_t tag, uint32_t occ)
{
    tempo__list_t *pos, *tmp;
    tempo__list_for_each_safe (pos, tmp, &sq->reqs) {
        sreq_t *r = tempo__container_of(pos, sreq_t, link);
        if (r->op->user_tag == tag && r->op->occ == occ) {
            return r;
        }
    }
    return NULL;
}

static void log_start(tempo__sq_t *sq, const start_ent_t *se, const tempo__op_t *req, size_t bytes)
{
    if (!sq->log) {
        return;
    }
    fprintf(sq->log,
            "%u tag=%llu occ=%u chunk=%u/%u prio=%d ready=%u readycount=%u bytes=%zu coll=%s "
            "name=%s\n",
            se->seq, (unsigned long long)se->tag, se->occ, se->chunk, se->nchunks, se->prio,
            se->ready_seq, se->ready_count, bytes, tempo__coll_name(req->coll),
            req->name ? req->name : "-");
    fflush(sq->log);
}

/* Start chunk se of a local request (the coordinator's decision, on every rank; the coordinator
 * launches it once its START is sent, in flush_starts). A failure to start fails the chunk (and
 * so its request); only an inconsistent decision fails the job. */
static tempo_status_t start_local(tempo__sq_t *sq, const start_ent_t *se)
{
    tempo__world_t *w = W(sq);
    sreq_t *r = req_find(sq, se->tag, se->occ);
    const char *bad = NULL;
    if (!r) {
        bad = "a request this rank has not posted (or whose chunks all started)";
    } else if (se->seq != sq->next_seq) {
        bad = "out of sequence";
    } else if (se->nchunks == 0 && r->op->count == 0) {
        r->agreed = 1; /* count 0, posted alike everywhere */
        tempo__list_remove(&r->link);
        tempo__list_init(&r->link);
        return TEMPO_OK;
    } else {
        bad = tempo__sq_chunk_check(se, r->op->count, r->nchunks, r->started);
    }
    if (bad) {
        char who[160];
        return tempo__world_fail(w, TEMPO_ERR_REMOTE,
                                 "scheduler: %s asked to start chunk %u/%u of tag %llu occurrence "
                                 "%u, %s (lane sequence %u, expected %u)",
                                 tempo__peer_desc(w, tempo__wrank(sq->comm, 0), who, sizeof(who)),
                                 se->chunk, se->nchunks, (unsigned long long)se->tag, se->occ, bad,
                                 se->seq, sq->next_seq);
    }
    tempo__op_t *req = r->op;
    if (!r->nchunks) {
        r->kids = tempo__calloc(se->nchunks, sizeof(*r->kids), "request chunks");
        r->marks = sq->coord ? tempo__calloc(se->nchunks, sizeof(*r->marks), "request chunks")
                             : NULL;
        if (!r->kids || (sq->coord && !r->marks)) {
            return tempo__world_fail(w, TEMPO_ERR_NOMEM, "out of memory for %u chunks",
                                     se->nchunks);
        }
        r->nchunks = se->nchunks;
    }
    tempo__op_t *k = tempo__op_new(sq->comm, req->coll);
    if (!k) {
        return tempo__world_fail(w, TEMPO_ERR_NOMEM, "out of memory for a scheduled chunk");
    }
    size_t es = tempo_dtype_size(req->dtype), off = (size_t)se->off * es;
    k->lane = 1;
    k->parent = req;
    k->seq = TEMPO_SEQ_SCHED | (sq->next_seq++ & ~TEMPO_SEQ_SCHED);
    k->sendbuf = req->sendbuf ? (const char *)req->sendbuf + off : NULL;
    k->recvbuf = req->recvbuf ? (char *)req->recvbuf + off : NULL;
    k->count = (size_t)se->cnt;
    k->stride = req->coll == TEMPO__COLL_ALLREDUCE ? 0 : req->count;
    k->dtype = req->dtype;
    k->redop = req->redop;
    k->priority = se->prio;
    k->user_tag = req->user_tag;
    k->qc = req->qc;
    k->nccl = req->nccl;
    if (req->cuda) {
        k->gate = tempo__coll_staged_gate; /* (its input may still be being copied in) */
        k->on_complete = tempo__coll_staged_out; /* (its part of the result, copied out) */
    }
    k->occ = req->occ;
    k->chunk = se->chunk;
    k->nchunks = se->nchunks;
    k->name = req->name;
    k->t_post_ns = req->t_post_ns;
    tempo__op_sign(k);
    r->kids[se->chunk] = k;
    if (r->started++ == 0) {
        req->t_start_ns = tempo__now_ns();
        tempo__trace_queued(w, req, 0);
    }
    if (r->started == r->nchunks) {
        tempo__list_remove(&r->link);
        tempo__list_init(&r->link);
    }
    size_t bytes = tempo__coll_bytes(req->coll, req->dtype, (size_t)se->cnt, sq->comm->size);
    log_start(sq, se, req, bytes);
    if (r->marks) {
        r->marks[se->chunk] = tempo__autosize_mark(&sq->as, tempo__now_ns(), sq->inflight);
    }
    sq->inflight += bytes;
    busy_add(sq, 1, tempo__now_ns());

    const tempo__algo_t *algo = NULL;
    tempo_status_t st = tempo__algo_select(k, r->forced, &algo);
    if (sq->coord) { /* launched once its START is sent (flush_starts) */
        sq->launch[sq->nlaunch].op = k;
        sq->launch[sq->nlaunch].st = st;
        sq->launch[sq->nlaunch].algo = algo;
        sq->nlaunch++;
        return TEMPO_OK;
    }
    tempo__op_launch(k, st, algo); /* a chunk that cannot start fails itself, and its request */
    return TEMPO_OK;
}

/* Coordinator: a chunk marked m completed; tell the estimator, and the log and the timeline when
 * the credit or chunk size changes, and at the first decision (which may keep the initial sizes:
 * its measurements are then logged all the same). */
static void autosize_done(tempo__sq_t *sq, const tempo__as_mark_t *m, size_t bytes)
{
    uint64_t now = tempo__now_ns(), decided = sq->as.decisions;
    size_t credit = sq->as.credit, chunk = sq->as.chunk;
    if (!tempo__autosize_done(&sq->as, m, bytes, now, sq->inflight) &&
        !(decided == 0 && sq->as.decisions > 0)) {
        return;
    }
    tempo__world_t *w = W(sq);
    TEMPO_INFO(TEMPO_SUB_OVERLAP,
               "scheduled lane (context %d, %d ranks): credit %zu -> %zu bytes%s, chunk %zu -> "
               "%zu bytes%s; measured rate %.1f MB/s, per-chunk latency %.1f us, %llu chunks",
               sq->comm->ctx, sq->comm->size, credit, sq->as.credit,
               sq->as.auto_credit ? " (auto)" : " (TEMPO_CREDIT_BYTES)", chunk, sq->as.chunk,
               sq->as.auto_chunk ? " (auto)" : " (TEMPO_CHUNK_BYTES)", sq->as.rate / 1e6,
               sq->as.lat_s * 1e6, (unsigned long long)sq->as.samples);
    tempo__trace_counter(w, "sched credit", (double)sq->as.credit, now);
    tempo__trace_counter(w, "sched chunk", (double)sq->as.chunk, now);
    tempo__trace_counter(w, "sched rate MB/s", sq->as.rate / 1e6, now);
    tempo__trace_counter(w, "sched latency us", sq->as.lat_s * 1e6, now);
}

/* A chunk has completed: account for it and recycle it. */
static void harvest(sreq_t *r, uint32_t i)
{
    tempo__sq_t *sq = r->sq;
    tempo__op_t *k = r->kids[i];
    if (k->status < 0 && r->err == TEMPO_OK) {
        r->err = k->status;
        snprintf(r->errmsg, sizeof(r->errmsg), "%s", k->errmsg);
    }
    size_t bytes = tempo__coll_bytes(k->coll, k->dtype, k->count, sq->comm->size);
    sq->inflight = sq->inflight > bytes ? sq->inflight - bytes : 0;
    if (r->marks && k->status == TEMPO_OK) {
        autosize_done(sq, &r->marks[i], bytes);
    }
    busy_add(sq, -1, tempo__now_ns());
    tempo__op_release(k);
    r->kids[i] = NULL;
    r->done++;
}

static tempo_status_t req_progress(tempo__op_t *op)
{
    sreq_t *r = op->priv;
    tempo__sq_t *sq = r->sq;
    for (uint32_t i = r->scan; i < r->started; i++) {
        if (r->kids[i] && r->kids[i]->status != TEMPO_INPROGRESS) {
            harvest(r, i);
        }
        if (i == r->scan && !r->kids[i]) {
            r->scan++;
        }
    }
    if ((r->nchunks && r->done == r->nchunks) || r->agreed) {
        op->t_end_ns = tempo__now_ns();
        if (r->err != TEMPO_OK) {
            snprintf(op->errmsg, sizeof(op->errmsg), "%s", r->errmsg);
            return r->err;
        }
        return TEMPO_OK;
    }
    /* Chunks not started yet wait for the coordinator's decisions: if it goes silent, it is the
     * rank this request waits for (the engine then names it, not "its peers"). Once every chunk
     * has started, the request waits for whom its oldest running chunk waits for (a coordinator
     * stopped after its last decision is then named through that chunk, not as "its peers"). */
    if (!sq->coord && (r->nchunks == 0 || r->started < r->nchunks)) {
        op->wait_peer = 0;
    } else {
        op->wait_peer = r->scan < r->started && r->kids[r->scan] ? r->kids[r->scan]->wait_peer : -1;
    }
    /* The deadline guards against a lane that stopped moving, not against a long queue. */
    uint64_t d = sq->last_activity_ns + (uint64_t)(W(sq)->timeout_s * 1e9) + sq->grace_ns;
    if (d > op->deadline) {
        op->deadline = d;
    }
    return TEMPO_INPROGRESS;
}

static void req_cleanup(tempo__op_t *op)
{
    sreq_t *r = op->priv;
    if (!r) {
        return;
    }
    for (uint32_t i = 0; i < r->nchunks; i++) {
        if (r->kids[i]) {
            harvest(r, i); /* releases it; an unfinished chunk is cancelled */
        }
    }
    tempo__list_remove(&r->link);
    tempo__free(r->kids);
    tempo__free(r->marks);
    tempo__free(r);
    op->priv = NULL;
}

/* ---------------------------------------------------------------------------------------------- */
/* The poller                                                                                     */
/* ---------------------------------------------------------------------------------------------- */

static const char *validate_post(const post_ent_t *e)
{
    if (!is_sched_coll(e->coll)) {
        return "unknown collective";
    }
    if (e->rejected > 1) {
        return "bad rejected flag";
    }
    if (e->rejected) {
        return NULL; /* its dtype or op may be what the rank rejected */
    }
    if (!tempo__dtype_valid((tempo_dtype_t)e->dtype)) {
        return "unknown dtype";
    }
    if (e->coll != TEMPO__COLL_ALLGATHER && !tempo__op_valid((tempo_op_t)e->redop)) {
        return "unknown reduction op";
    }
    return NULL;
}

/* POST entry i of msg, its name terminated. */
static void post_entry(const void *msg, int i, post_ent_t *e)
{
    memcpy(e, (const char *)msg + sizeof(hdr_t) + (size_t)i * sizeof(*e), sizeof(*e));
    e->name[sizeof(e->name) - 1] = '\0';
}

const char *tempo__sq_ctrl_check(const void *msg, int peer, int coord, int *nvalid_p)
{
    hdr_t h;
    memcpy(&h, msg, sizeof(h));
    int want = coord ? MSG_POST : 0;
    *nvalid_p = 0;
    if (h.magic != CTRL_MAGIC) {
        return "bad magic";
    } else if (h.from != peer) {
        return "wrong sender rank";
    } else if (want ? h.type != want : (h.type != MSG_START && h.type != MSG_FAIL)) {
        return "unexpected message type";
    } else if ((h.type == MSG_POST && (h.n == 0 || h.n > POST_MAX)) ||
               (h.type == MSG_START && (h.n == 0 || h.n > START_MAX))) {
        return "bad entry count";
    }
    for (int i = 0; h.type == MSG_POST && i < h.n; i++, (*nvalid_p)++) {
        post_ent_t e;
        post_entry(msg, i, &e);
        const char *bad = validate_post(&e);
        if (bad) {
            return bad;
        }
    }
    return NULL;
}

const char *tempo__sq_chunk_check(const void *start_ent, uint64_t count, uint32_t nchunks,
                                  uint32_t started)
{
    start_ent_t se;
    memcpy(&se, start_ent, sizeof(se));
    if (se.nchunks == 0 && count == 0) {
        return NULL;
    }
    if (se.nchunks == 0 || se.chunk >= se.nchunks || (nchunks && se.nchunks != nchunks) ||
        se.chunk != started || se.cnt == 0 || se.off > count || se.cnt > count - se.off) {
        return "a chunk outside the request";
    }
    return NULL;
}

static void handle(tempo__sq_t *sq, rx_t *rx)
{
    tempo__world_t *w = W(sq);
    hdr_t h;
    memcpy(&h, rx->buf, sizeof(h));
    int nvalid;
    const char *bad = tempo__sq_ctrl_check(rx->buf, rx->peer, sq->coord, &nvalid);
    /* the entries before a bad one are reported, as they were when each was checked in turn */
    for (int i = 0; i < nvalid; i++) {
        post_ent_t e;
        post_entry(rx->buf, i, &e);
        if (coord_report(sq, rx->peer, &e) != TEMPO_OK) {
            return;
        }
    }
    if (!bad && h.type == MSG_START) {
        for (int i = 0; i < h.n; i++) {
            start_ent_t se;
            memcpy(&se, rx->buf + sizeof(h) + (size_t)i * sizeof(se), sizeof(se));
            if (start_local(sq, &se) != TEMPO_OK) {
                return;
            }
        }
        return;
    } else if (!bad && h.type == MSG_FAIL) {
        char *text = (char *)rx->buf + sizeof(h);
        text[CTRL_BYTES - sizeof(h) - 1] = '\0';
        tempo_status_t st = (tempo_status_t)(-(int)h.n);
        if (st >= 0 || st <= TEMPO_ERR_LAST) {
            st = TEMPO_ERR_REMOTE;
        }
        if (st == TEMPO_ERR_INVALID) {
            tempo__comm_fail(sq->comm, st, text);
        } else {
            tempo__world_fail(w, st, "%s", text);
        }
        return;
    }
    if (bad) {
        char who[160];
        tempo__world_fail(w, TEMPO_ERR_REMOTE, "%s sent a malformed scheduler message (%s)",
                          tempo__peer_desc(w, tempo__wrank(sq->comm, rx->peer), who, sizeof(who)),
                          bad);
    }
}

static int sq_poll(void *arg)
{
    tempo__sq_t *sq = arg;
    tempo__world_t *w = W(sq);
    int events = 0;
    reap_sends(sq);
    int idle = lane_idle(sq);
    for (int i = 0; i < sq->nrx; i++) {
        rx_t *rx = &sq->rx[i];
        rx->x.standing = idle;
        /* Every message that has arrived, not one per pass: a request cut into 20,000 chunks
         * comes as 1,100 START messages, and each engine pass polls every running chunk. (A
         * receive posted for a message already here completes at once.) */
        while (rx->posted && rx->x.complete) {
            events++;
            rx->posted = 0;
            if (rx->x.status != TEMPO_OK || w->failed != TEMPO_OK) {
                break; /* the peer left or the job failed: nothing more will come */
            }
            handle(sq, rx);
            if (w->failed == TEMPO_OK) {
                rx_post(sq, rx);
            }
        }
    }
    if (sq->coord && w->failed == TEMPO_OK) {
        if (sq->nheap) {
            int d = dispatch(sq);
            if (d < 0 && w->failed == TEMPO_OK) {
                /* Decisions some ranks may never hear of: nobody can go on safely. */
                tempo__world_fail(w, (tempo_status_t)d, "scheduler: cannot send start decisions: %s",
                                  tempo__errmsg());
            }
            events += d > 0 ? d : 0;
        }
        if (!tempo__list_empty(&sq->keys)) {
            uint64_t now = tempo__now_ns();
            if (now >= sq->next_check_ns) {
                sq->next_check_ns = now + CHECK_NS;
                check_overdue(sq, now);
            }
        }
    }
    sq->poller.busy = w->failed == TEMPO_OK &&
                      ((sq->coord && !tempo__list_empty(&sq->keys)) ||
                       !tempo__list_empty(&sq->tx_busy));
    return events;
}

/* ---------------------------------------------------------------------------------------------- */
/* Lifecycle                                                                                      */
/* ---------------------------------------------------------------------------------------------- */

static tempo_status_t sq_create(struct tempo_comm *c, tempo__sq_t **sq_p)
{
    tempo__sq_t *sq = tempo__calloc(1, sizeof(*sq), "scheduler");
    if (!sq) {
        return TEMPO_ERR_NOMEM;
    }
    sq->comm = c;
    sq->coord = c->rank == 0;
    sq->grace_ns = (uint64_t)(TEMPO_MAX(1.0, 0.1 * c->world->timeout_s) * 1e9);
    sq->last_activity_ns = tempo__now_ns();
    tempo__autosize_init(&sq->as, tempo__cfg.credit_bytes, tempo__cfg.chunk_bytes);
    tempo__list_init(&sq->reqs);
    tempo__list_init(&sq->tx_busy);
    tempo__list_init(&sq->tx_free);
    tempo__list_init(&sq->keys);
    sq->nrx = sq->coord ? c->size - 1 : 1;
    sq->rx = tempo__calloc((size_t)TEMPO_MAX(sq->nrx, 1), sizeof(*sq->rx), "scheduler receives");
    if (!sq->rx) {
        tempo__free(sq);
        return TEMPO_ERR_NOMEM;
    }
    if (tempo__cfg.sched_log[0]) {
        char path[512];
        if (tempo__expand_path_unique(tempo__cfg.sched_log, c->world->rank, c->world->size, path,
                                      sizeof(path)) &&
            c->world->rank == 0 && c->ctx == 0) {
            TEMPO_WARN(TEMPO_SUB_OVERLAP, "TEMPO_SCHED_LOG '%s' has no %%r: each rank writes its own "
                       "file instead of all one (rank 0: '%s')", tempo__cfg.sched_log, path);
        }
        if (c->ctx) {
            size_t l = strlen(path);
            snprintf(path + l, sizeof(path) - l, ".ctx%d", c->ctx);
        }
        sq->log = tempo__fopen_write(path, 0, 0);
        if (!sq->log) {
            tempo_status_t st = tempo__err(TEMPO_ERR_SYSTEM,
                                           "TEMPO_SCHED_LOG: cannot create '%s': %s", path,
                                           strerror(errno));
            tempo__free(sq->rx);
            tempo__free(sq);
            return st;
        }
        fprintf(sq->log, "# tempo scheduled lane: comm rank %d of %d, context %d, policy %s\n",
                c->rank, c->size, c->ctx, tempo__sched_name(tempo__cfg.sched));
    }
    for (int i = 0; i < sq->nrx; i++) {
        sq->rx[i].peer = sq->coord ? i + 1 : 0;
        if (c->size > 1) {
            rx_post(sq, &sq->rx[i]);
        }
    }
    sq->poller.fn = sq_poll;
    sq->poller.arg = sq;
    tempo__engine_add_poller(c->world, &sq->poller);
    *sq_p = sq;
    return TEMPO_OK;
}

void tempo__sq_destroy(tempo__sq_t *sq)
{
    if (!sq) {
        return;
    }
    tempo__world_t *w = W(sq);
    tempo__engine_remove_poller(&sq->poller);
    for (int i = 0; i < sq->nrx; i++) {
        if (sq->rx[i].posted && !sq->rx[i].x.complete) {
            tempo__tl_cancel(w, &sq->rx[i].x);
        }
    }
    tempo__list_t *pos, *tmp;
    tempo__list_for_each_safe (pos, tmp, &sq->tx_busy) {
        tx_t *tx = tempo__container_of(pos, tx_t, link);
        if (!tx->x.complete) {
            tempo__tl_cancel(w, &tx->x);
        }
        tempo__list_remove(&tx->link);
        tempo__free(tx);
    }
    tempo__list_for_each_safe (pos, tmp, &sq->tx_free) {
        tempo__list_remove(pos);
        tempo__free(tempo__container_of(pos, tx_t, link));
    }
    tempo__list_for_each_safe (pos, tmp, &sq->keys) {
        key_free(tempo__container_of(pos, skey_t, link));
    }
    if (sq->log) {
        fclose(sq->log);
    }
    tempo__free(sq->heap);
    tempo__free(sq->rx);
    tempo__free(sq->occ_tags);
    tempo__free(sq->occ_next);
    tempo__free(sq->occ_used);
    tempo__free(sq);
}

uint64_t tempo__sq_busy_ns(struct tempo_comm *comm)
{
    tempo__sq_t *sq = tempo__cc(comm)->sq;
    if (!sq) {
        return 0;
    }
    return sq->busy_ns + (sq->running ? tempo__now_ns() - sq->busy_since : 0);
}

void tempo__sq_flight_state(const struct tempo_comm *comm, char *buf, size_t len)
{
    const tempo__coll_comm_t *cc = comm->coll;
    const tempo__sq_t *sq = cc ? cc->sq : NULL;
    buf[0] = '\0';
    if (!sq) {
        return;
    }
    int waiting = 0; /* local requests with chunks not started yet */
    for (const tempo__list_t *p = sq->reqs.next; p != &sq->reqs; p = p->next) {
        waiting++;
    }
    snprintf(buf, len,
             "\"coordinator\": %d, \"policy\": \"%s\", \"chunks_started\": %u, "
             "\"requests_waiting\": %d, \"chunks_running\": %d, \"bytes_in_flight\": %zu, "
             "\"credit_bytes\": %zu, \"chunk_bytes\": %zu, \"coordinator_queue\": %zu",
             0, tempo__sched_name(tempo__cfg.sched), sq->next_seq, waiting, sq->running,
             sq->inflight, sq->as.credit, sq->as.chunk, sq->coord ? sq->nheap : (size_t)0);
}

tempo_status_t tempo__sq_post(tempo__op_t *op, const char *forced, const char *name,
                              size_t chunk_bytes)
{
    struct tempo_comm *c = op->comm;
    tempo__coll_comm_t *cc = tempo__cc(c);
    tempo_status_t st = TEMPO_OK;
    if (!cc->sq) {
        st = sq_create(c, &cc->sq);
    }
    sreq_t *r = st == TEMPO_OK ? tempo__calloc(1, sizeof(*r), "scheduled request") : NULL;
    if (st == TEMPO_OK && !r) {
        st = TEMPO_ERR_NOMEM;
    }
    if (st != TEMPO_OK) {
        return tempo__op_error(op, st);
    }
    tempo__sq_t *sq = cc->sq;
    r->sq = sq;
    r->op = op;
    r->forced = forced;
    tempo__list_init(&r->link);
    if (name) {
        snprintf(r->name, sizeof(r->name), "%s", name);
    }
    op->priv = r;
    op->progress = req_progress;
    op->cleanup = req_cleanup;
    op->is_parent = 1;
    op->name = r->name[0] ? r->name : NULL;
    op->algo = forced ? forced : "scheduled";
    op->t_post_ns = tempo__now_ns();
    st = occ_take(sq, op->user_tag, &op->occ);
    if (st != TEMPO_OK) {
        return tempo__op_error(op, st);
    }
    post_ent_t e;
    memset(&e, 0, sizeof(e));
    e.tag = op->user_tag;
    e.occ = op->occ;
    e.prio = op->priority;
    e.count = op->count;
    e.chunk_bytes = chunk_bytes == SIZE_MAX ? UINT64_MAX : chunk_bytes;
    e.coll = (uint8_t)op->coll;
    e.dtype = (uint8_t)op->dtype;
    e.redop = (uint8_t)op->redop;
    e.compressed = op->qc != NULL;
    memcpy(e.name, r->name, sizeof(e.name) - 1);
    tempo__list_push_back(&sq->reqs, &r->link);
    if (op->count != 0) {
        tempo__trace_queued(W(sq), op, 1);
    }
    if (sq->coord) {
        st = coord_report(sq, 0, &e);
        if (st == TEMPO_OK && sq->nheap && W(sq)->failed == TEMPO_OK) {
            int d = dispatch(sq);
            st = d < 0 ? (tempo_status_t)d : TEMPO_OK;
        }
    } else {
        st = send_batch(sq, 0, MSG_POST, 1, &e, sizeof(e));
    }
    if (st != TEMPO_OK && W(sq)->failed == TEMPO_OK) {
        return tempo__op_error(op, st);
    }
    /* (Its first progress call gives it the lane's deadline, grace included. A count-0 request
     * waits for the coordinator's word that every rank posted it alike.) */
    return tempo__op_start(op);
}

void tempo__sq_rejected(struct tempo_comm *c, int coll, size_t count, tempo_dtype_t dtype,
                        tempo_op_t redop, uint64_t tag)
{
    tempo__coll_comm_t *cc = tempo__cc(c);
    if ((!cc->sq && sq_create(c, &cc->sq) != TEMPO_OK) || c->failed != TEMPO_OK ||
        c->world->failed != TEMPO_OK) {
        return; /* out of memory: the peers' requests time out naming this rank */
    }
    tempo__sq_t *sq = cc->sq;
    post_ent_t e;
    memset(&e, 0, sizeof(e));
    if (occ_take(sq, tag, &e.occ) != TEMPO_OK) {
        return;
    }
    e.tag = tag;
    e.count = count;
    e.coll = (uint8_t)coll;
    e.dtype = (uint8_t)dtype;
    e.redop = (uint8_t)redop;
    e.rejected = 1;
    if (sq->coord) {
        (void)coord_report(sq, 0, &e);
    } else {
        (void)send_batch(sq, 0, MSG_POST, 1, &e, sizeof(e));
    }
}
