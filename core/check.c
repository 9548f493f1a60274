/*
 * check.c — agreement checks: the ranks of a communicator must make the same collective calls
 * (collective, count, dtype, reduction op, root) in the same order, and when they do not, every
 * rank fails with TEMPO_ERR_INVALID saying what differs and on which ranks, instead of computing
 * garbage or waiting for TEMPO_TIMEOUT.
 *
 * How a difference is seen, cheaply:
 *  - every collective message carries its call's signature (tempo__sig_t) in the header it already
 *    has; a receive whose signature differs from the message's fails (transport/stream.c);
 *  - the shared-memory all-reduce publishes the signature next to its control words, and every rank
 *    compares all of them before it reads any data (collectives/allreduce_shm.c);
 *  - a difference that moves no data (one rank waits for a message that the other's call never
 *    sends, a rank whose count-0 call completed at once, a call rejected on one rank only) is found
 *    by probes: an operation that has waited on one peer for PROBE_FIRST_MS asks that peer, in a
 *    control note, what it called under the same sequence number (and again, backing off to
 *    PROBE_MAX_MS). The peer answers only when the calls differ. A healthy wait costs one small
 *    note per gap.
 * What makes these checks reach every rank: no call completes before its rank has heard from
 * every other rank, directly or through ranks that compared the signature first (the rank that
 * finds a difference stops, so nothing it would have passed on arrives). The data flow of most
 * algorithms gives that; a broadcast root and a reduce leaf only send, so the trees run on the
 * pattern of a dissemination barrier and the pipelines end with one (collectives/sched.c,
 * tempo__sched_close), and tests/unit/test_sched.c checks it for every algorithm of the table.
 * Otherwise a rank whose call only sends would return TEMPO_OK, and a message that nobody
 * receives (from a rank that named another root) would compare nothing at all.
 * Whoever sees a difference fails the communicator for good (its sequence of calls can no longer be
 * trusted: shared-memory counters and tags are out of step) and tells every other member in a
 * control note, so every member's pending and later operations on it fail with the same message.
 * Other communicators of the job are not affected.
 *
 * A rejected call (bad arguments on this rank) still counts as this rank's call under its sequence
 * number, so that a peer waiting for it hears why instead of pairing it with a later call.
 *
 * Notes arrive inside transport progress; they are queued and handled by the engine after it, so
 * that answering never re-enters a transport.
 */
#include "config.h"

#include "core/world.h"
#include "core/flight.h"

#include <stdio.h>
#include <stdlib.h>

#define PROBE_FIRST_MS 200
#define PROBE_MAX_MS 2000
#define PARKED_MAX 256 /* notes kept for communicators this rank does not have (yet) */

enum { NOTE_PROBE = 1, NOTE_FAIL = 2, NOTE_REJECTED = 3 };

/* A note on the wire (plain data); NOTE_FAIL and NOTE_REJECTED are followed by a message,
 * NUL-terminated. */
typedef struct {
    uint32_t kind;
    int32_t ctx;
    uint64_t uid; /* the communicator's uid: context ids repeat among communicators */
    uint32_t seq; /* NOTE_PROBE: the prober's operation; NOTE_REJECTED: the rejected call */
    int32_t status;
    tempo__sig_t sig; /* NOTE_PROBE: the prober's call */
} note_t;

typedef struct {
    tempo__list_t link;
    int src; /* world rank */
    size_t len;
    _Alignas(8) char data[TEMPO_NOTE_MAX];
} pending_t;

static void rejected_by_peer(struct tempo_comm *c, uint32_t seq, int peer, const char *why,
                             const tempo__sig_t *mine);
static void sig_diff(const struct tempo_comm *c, int me_rank, const tempo__sig_t *mine,
                     const char *spec, int peer, const tempo__sig_t *theirs, char *buf,
                     size_t len);
static void comm_fail(struct tempo_comm *c, tempo_status_t st, const char *msg, int tell);

static int is_reduction(int coll)
{
    return coll == TEMPO__COLL_ALLREDUCE || coll == TEMPO__COLL_REDUCE_SCATTER ||
           coll == TEMPO__COLL_REDUCE;
}

static int is_rooted(int coll)
{
    return coll == TEMPO__COLL_BROADCAST || coll == TEMPO__COLL_REDUCE;
}

static tempo__recent_t *slot(tempo__recent_t *ring, uint32_t seq)
{
    return &ring[seq % TEMPO_SIG_HISTORY];
}

static void record(struct tempo_comm *c, uint32_t seq, const tempo__sig_t *sig)
{
    tempo__recent_t *e = slot(c->recent, seq);
    e->seq = seq;
    e->who = 1;
    e->rejected = 0;
    e->sig = *sig;
}

void tempo__op_sign(tempo__op_t *op)
{
    const tempo__op_t *top = op->parent ? op->parent : op;
    memset(&op->sig, 0, sizeof(op->sig));
    if (top->coll >= TEMPO__COLL_SEND) {
        return;
    }
    op->sig.valid = 1;
    op->sig.coll = (uint8_t)top->coll;
    op->sig.root = is_rooted(top->coll) ? top->root : -1;
    if (top->coll != TEMPO__COLL_BARRIER) {
        op->sig.count = top->count;
        op->sig.dtype = (uint8_t)top->dtype;
    }
    if (is_reduction(top->coll)) {
        op->sig.redop = (uint8_t)(top->redop + 1);
    }
    if (!op->is_parent) {
        record(op->comm, op->seq, &op->sig);
    }
}

void tempo__op_sign_how(tempo__op_t *op, uint32_t how)
{
    op->sig.how = how;
    tempo__recent_t *e = slot(op->comm->recent, op->seq);
    if (op->sig.valid && !op->is_parent && e->who && e->seq == op->seq && !e->rejected) {
        e->sig.how = how;
    }
}

void tempo__op_accepted(tempo__op_t *op)
{
    struct tempo_comm *c = op->comm;
    tempo__recent_t *p = slot(c->prej, op->seq);
    if (TEMPO_UNLIKELY(p->who && p->seq == op->seq && op->sig.valid)) {
        int peer = p->who - 1;
        p->who = 0;
        rejected_by_peer(c, op->seq, peer, p->why, &op->sig);
    }
}

/* "comm rank 3 (world rank 7)", or "rank 3" on a communicator of the whole job. (Messages are
 * passed on to the other members, so they never say "this rank".) */
static const char *rank_desc(const struct tempo_comm *c, int r, char *buf, size_t len)
{
    if (c->size == c->world->size) {
        snprintf(buf, len, "rank %d", r);
    } else {
        snprintf(buf, len, "comm rank %d (world rank %d)", r, tempo__wrank(c, r));
    }
    return buf;
}

/* "allreduce of 1000 x float32 sum", "broadcast of 10 x int32 from root 2", "barrier". */
static const char *call_desc(const tempo__sig_t *g, char *buf, size_t len)
{
    const char *cn = tempo__coll_name(g->coll);
    if (g->coll == TEMPO__COLL_BARRIER) {
        snprintf(buf, len, "%s", cn);
        return buf;
    }
    int n = snprintf(buf, len, "%s of %llu x %s", cn, (unsigned long long)g->count,
                     tempo_dtype_name((tempo_dtype_t)g->dtype));
    if (n > 0 && (size_t)n < len && g->redop) {
        n += snprintf(buf + n, len - (size_t)n, " %s", tempo_op_name((tempo_op_t)(g->redop - 1)));
    }
    if (n > 0 && (size_t)n < len && g->root >= 0) {
        snprintf(buf + n, len - (size_t)n, " from root %d", g->root);
    }
    return buf;
}

/* This rank's compressor spec of its running call seq on c, or NULL. */
static const char *own_spec(const struct tempo_comm *c, uint32_t seq)
{
    tempo__list_t *pos;
    for (pos = c->ops.next; pos != &c->ops; pos = pos->next) {
        const tempo__op_t *op = tempo__container_of(pos, tempo__op_t, clink);
        if (op->seq == seq && !op->is_parent && op->qc) {
            return op->qc->spec;
        }
    }
    return NULL;
}

/* How a call runs, in words (the other side's how is other): "algorithm ring", "no compressor
 * (algorithm shm)", "compressor qsgd:bits=4,...", "a compressor". spec: this call's compressor
 * spec where this rank made it, else NULL (a peer's spec is known only by its hash). */
static const char *how_desc(const struct tempo_comm *c, uint32_t how, uint32_t other,
                            const char *spec, char *buf, size_t len)
{
    if (how & TEMPO__HOW_COMPRESSED) {
        if (spec) {
            snprintf(buf, len, "compressor %s", spec);
        } else {
            snprintf(buf, len, "%s", other & TEMPO__HOW_COMPRESSED ? "another compressor spec"
                                                                    : "a compressor");
        }
        return buf;
    }
    const char *name = c->algo_name ? c->algo_name(how) : NULL;
    snprintf(buf, len, "%salgorithm %s", other & TEMPO__HOW_COMPRESSED ? "no compressor (" : "",
             name ? name : "?");
    if (other & TEMPO__HOW_COMPRESSED) {
        snprintf(buf + strlen(buf), len - strlen(buf), ")");
    }
    return buf;
}

/* What differs between this rank's call (mine) and comm rank peer's (theirs), in words:
 * "count 999 on rank 3, count 1000 on rank 0". */
void tempo__sig_diff(const struct tempo_comm *c, int me_rank, const tempo__sig_t *mine, int peer,
                     const tempo__sig_t *theirs, char *buf, size_t len)
{
    sig_diff(c, me_rank, mine, NULL, peer, theirs, buf, len);
}

/* tempo__sig_diff, with this rank's compressor spec where known. */
static void sig_diff(const struct tempo_comm *c, int me_rank, const tempo__sig_t *mine,
                     const char *spec, int peer, const tempo__sig_t *theirs, char *buf, size_t len)
{
    char me[64], them[64], a[96], b[96];
    rank_desc(c, me_rank, me, sizeof(me));
    rank_desc(c, peer, them, sizeof(them));
    if (mine->coll != theirs->coll) {
        snprintf(buf, len, "%s called %s where %s called %s", them, call_desc(theirs, a, sizeof(a)),
                 me, call_desc(mine, b, sizeof(b)));
        return;
    }
    size_t n = 0;
    buf[0] = '\0';
#define DIFF(cond, fmt, x, y)                                                                   \
    if ((cond) && n < len) {                                                                    \
        n += (size_t)snprintf(buf + n, len - n, "%s" fmt " on %s, " fmt " on %s",               \
                              n ? "; " : "", x, them, y, me);                                   \
    }
    DIFF(mine->count != theirs->count, "count %llu", (unsigned long long)theirs->count,
         (unsigned long long)mine->count);
    DIFF(mine->dtype != theirs->dtype, "dtype %s", tempo_dtype_name((tempo_dtype_t)theirs->dtype),
         tempo_dtype_name((tempo_dtype_t)mine->dtype));
    DIFF(mine->redop != theirs->redop, "op %s",
         theirs->redop ? tempo_op_name((tempo_op_t)(theirs->redop - 1)) : "-",
         mine->redop ? tempo_op_name((tempo_op_t)(mine->redop - 1)) : "-");
    DIFF(mine->root != theirs->root, "root %d", theirs->root, mine->root);
    if (!n && mine->how != theirs->how && mine->how && theirs->how) {
        /* The same call, run differently (another algorithm forced, another compressor): the
         * messages would not fit each other. */
        char ht[TEMPO_ERRMSG_LEN / 2], hm[TEMPO_ERRMSG_LEN / 2];
        snprintf(buf, len, "%s on %s, %s on %s",
                 how_desc(c, theirs->how, mine->how, NULL, ht, sizeof(ht)), them,
                 how_desc(c, mine->how, theirs->how, spec, hm, sizeof(hm)), me);
    }
#undef DIFF
}

/* Send a note with a message to every other member of c. */
static void tell_all(struct tempo_comm *c, uint32_t kind, uint32_t seq, tempo_status_t st,
                     const char *text)
{
    tempo__world_t *w = c->world;
    struct {
        note_t h;
        char text[TEMPO_ERRMSG_LEN];
    } m;
    if (!w->tl_note) {
        return;
    }
    memset(&m, 0, sizeof(m));
    m.h.kind = kind;
    m.h.ctx = c->ctx;
    m.h.uid = c->uid;
    m.h.seq = seq;
    m.h.status = st;
    size_t tl = strlen(text);
    tl = TEMPO_MIN(tl, sizeof(m.text) - 1);
    memcpy(m.text, text, tl);
    for (int r = 0; r < c->size; r++) {
        if (r != c->rank) {
            w->tl_note(w, tempo__wrank(c, r), &m, sizeof(m.h) + tl + 1);
        }
    }
}

void tempo__comm_fail(struct tempo_comm *c, tempo_status_t st, const char *msg)
{
    comm_fail(c, st, msg, 0);
}

/* Fail c for good with st and msg; with tell, send the message to every other member (tell 1:
 * found here, "found by" this rank added; RELAY: learned from a peer, passed on as it came).
 * A rank that learned of the failure from a peer relays it before anything else it sends: a
 * member that learned it first may leave, and its goodbye would otherwise reach a third member
 * before the finder's note did (on another connection), which then failed with "rank X has
 * left" instead of the disagreement (difftest, tcp n=6, a forced broadcast algorithm on 2 of 6
 * ranks: 4 runs in 20 of that case before). */
#define RELAY 2
static void comm_fail(struct tempo_comm *c, tempo_status_t st, const char *msg, int tell)
{
    if (c->failed != TEMPO_OK) {
        return;
    }
    c->failed = st;
    snprintf(c->failmsg, sizeof(c->failmsg), "%s", msg);
    tempo__flight_failed(c->world, st);
    TEMPO_WARN(TEMPO_SUB_COLL, "%s: %s", tempo_status_name(st), c->failmsg);
    if (tell == RELAY) {
        tell_all(c, NOTE_FAIL, 0, st, msg);
    } else if (tell) {
        char me[64], text[TEMPO_ERRMSG_LEN];
        snprintf(text, sizeof(text), "%s (found by %s)", msg, rank_desc(c, c->rank, me, sizeof(me)));
        tell_all(c, NOTE_FAIL, 0, st, text);
    }
}

/* This rank's call seq (mine) and comm rank peer's (theirs) differ: fail c saying how, and tell
 * every member. */
static void disagree(struct tempo_comm *c, uint32_t seq, const tempo__sig_t *mine, int peer,
                     const tempo__sig_t *theirs)
{
    char d[TEMPO_ERRMSG_LEN - 128], msg[TEMPO_ERRMSG_LEN];
    sig_diff(c, c->rank, mine, own_spec(c, seq), peer, theirs, d, sizeof(d));
    snprintf(msg, sizeof(msg), "ranks disagree on collective call #%u of this communicator: %s",
             seq, d);
    comm_fail(c, TEMPO_ERR_INVALID, msg, 1);
}

void tempo__comm_fail_found(struct tempo_comm *c, tempo_status_t st, const char *msg)
{
    comm_fail(c, st, msg, 1);
}

tempo_status_t tempo__op_mismatch(tempo__op_t *op, int peer, const tempo__sig_t *theirs)
{
    disagree(op->comm, op->seq, &op->sig, peer, theirs);
    return tempo__op_fail(op, TEMPO_ERR_INVALID, "%s", op->comm->failmsg);
}

void tempo__comm_rejected(struct tempo_comm *c, uint32_t seq, const char *why)
{
    tempo__recent_t *e = slot(c->recent, seq);
    if (e->seq != seq || !e->who) {
        memset(e, 0, sizeof(*e)); /* rejected before it was signed: no signature */
        e->seq = seq;
        e->who = 1;
    }
    e->rejected = 1;
    snprintf(e->why, sizeof(e->why), "%s", why);
    tempo__recent_t *p = slot(c->prej, seq);
    if (p->who && p->seq == seq) {
        p->who = 0; /* the peer rejected the same call: still in step */
    }
    tell_all(c, NOTE_REJECTED, seq, TEMPO_ERR_INVALID, e->why);
}

/* Comm rank peer rejected its call seq (why); this rank made the call mine. */
static void rejected_by_peer(struct tempo_comm *c, uint32_t seq, int peer, const char *why,
                             const tempo__sig_t *mine)
{
    char msg[TEMPO_ERRMSG_LEN], who[64], me[64], call[96];
    snprintf(msg, sizeof(msg),
             "ranks disagree on collective call #%u of this communicator: %s rejected its call "
             "(%s) where %s called %s",
             seq, rank_desc(c, peer, who, sizeof(who)), why, rank_desc(c, c->rank, me, sizeof(me)),
             call_desc(mine, call, sizeof(call)));
    comm_fail(c, TEMPO_ERR_INVALID, msg, 1);
}

/* This rank's call seq on c (*rej_p: why it was rejected, or NULL); 0 if unknown: not made yet,
 * or long done. */
static int lookup(struct tempo_comm *c, uint32_t seq, tempo__sig_t *sig_p, const char **rej_p)
{
    tempo__recent_t *e = slot(c->recent, seq);
    if (e->who && e->seq == seq) {
        *sig_p = e->sig;
        *rej_p = e->rejected ? e->why : NULL;
        return 1;
    }
    tempo__list_t *pos, *tmp;
    tempo__list_for_each_safe (pos, tmp, &c->ops) {
        tempo__op_t *op = tempo__container_of(pos, tempo__op_t, clink);
        if (op->seq == seq && op->sig.valid && !op->is_parent) {
            *sig_p = op->sig;
            *rej_p = NULL;
            return 1;
        }
    }
    return 0;
}

void tempo__op_probe(tempo__op_t *op, uint64_t now)
{
    if (!op->probe_ns) {
        op->probe_gap_ms = PROBE_FIRST_MS;
        op->probe_ns = now + (uint64_t)op->probe_gap_ms * 1000000u;
        return;
    }
    if (now < op->probe_ns) {
        return;
    }
    struct tempo_comm *c = op->comm;
    tempo__world_t *w = c->world;
    if (op->wait_peer >= 0 && op->wait_peer < c->size && op->wait_peer != c->rank && w->tl_note) {
        note_t m;
        memset(&m, 0, sizeof(m));
        m.kind = NOTE_PROBE;
        m.ctx = c->ctx;
        m.uid = c->uid;
        m.seq = op->seq;
        m.sig = op->sig;
        w->tl_note(w, tempo__wrank(c, op->wait_peer), &m, sizeof(m));
    }
    op->probe_gap_ms = TEMPO_MIN(2 * op->probe_gap_ms, PROBE_MAX_MS);
    op->probe_ns = now + (uint64_t)op->probe_gap_ms * 1000000u;
}

void tempo__note_arrived(tempo__world_t *w, int src, const void *data, size_t len)
{
    pending_t *p = tempo__malloc(sizeof(*p), "control note");
    if (!p || len > sizeof(p->data)) {
        tempo__free(p);
        return; /* the stream checked the length; out of memory: the prober asks again */
    }
    p->src = src;
    p->len = len;
    memcpy(p->data, data, len);
    tempo__list_push_back(&w->notes, &p->link);
}

static struct tempo_comm *find_comm(tempo__world_t *w, int32_t ctx, uint64_t uid, int src,
                                    int *src_rank_p)
{
    tempo__list_t *pos, *tmp;
    tempo__list_for_each_safe (pos, tmp, &w->comms) {
        struct tempo_comm *c = tempo__container_of(pos, struct tempo_comm, wlink);
        if (c->ctx != ctx || c->uid != uid) {
            continue;
        }
        for (int r = 0; r < c->size; r++) {
            if (tempo__wrank(c, r) == src) {
                *src_rank_p = r;
                return c;
            }
        }
    }
    return NULL;
}

/* A peer asks whether this rank's call m->seq is the same as its own. */
static void handle_probe(struct tempo_comm *c, int peer, const note_t *m)
{
    tempo__sig_t mine;
    const char *rej;
    if (c->failed != TEMPO_OK || !lookup(c, m->seq, &mine, &rej)) {
        return; /* every member was told already, or not called yet / long done: a genuine wait */
    }
    char msg[TEMPO_ERRMSG_LEN], who[64], me[64], call[96];
    if (rej) {
        snprintf(msg, sizeof(msg),
                 "ranks disagree on collective call #%u of this communicator: %s called %s, "
                 "where %s's call was rejected (%s)",
                 m->seq, rank_desc(c, peer, who, sizeof(who)),
                 call_desc(&m->sig, call, sizeof(call)), rank_desc(c, c->rank, me, sizeof(me)), rej);
        comm_fail(c, TEMPO_ERR_INVALID, msg, 1);
        return;
    }
    if (tempo__sig_equal(&mine, &m->sig)) {
        return; /* the same call: a genuine wait */
    }
    disagree(c, m->seq, &mine, peer, &m->sig);
}

/* Comm rank peer says it rejected its call seq. */
static void handle_rejected(struct tempo_comm *c, int peer, uint32_t seq, const char *why)
{
    tempo__sig_t mine;
    const char *rej;
    if (c->failed != TEMPO_OK) {
        return;
    }
    if (lookup(c, seq, &mine, &rej)) {
        if (!rej) { /* (a call this rank rejected too keeps the ranks in step) */
            rejected_by_peer(c, seq, peer, why, &mine);
        }
        return;
    }
    /* Not called here yet: checked when it is (tempo__op_accepted, tempo__comm_rejected). */
    tempo__recent_t *p = slot(c->prej, seq);
    p->seq = seq;
    p->who = peer + 1;
    snprintf(p->why, sizeof(p->why), "%s", why);
}

/* Handle note p for c (from its comm rank peer). */
static void handle(tempo__world_t *w, struct tempo_comm *c, int peer, const pending_t *p)
{
    note_t m;
    memcpy(&m, p->data, sizeof(m));
    if (m.kind == NOTE_PROBE && p->len == sizeof(m) && m.sig.valid == 1) {
        handle_probe(c, peer, &m);
    } else if (m.kind == NOTE_FAIL && p->len > sizeof(m) && p->data[p->len - 1] == '\0' &&
               m.status < 0 && m.status > TEMPO_ERR_LAST) {
        comm_fail(c, (tempo_status_t)m.status, p->data + sizeof(m), RELAY);
    } else if (m.kind == NOTE_REJECTED && p->len > sizeof(m) && p->data[p->len - 1] == '\0') {
        handle_rejected(c, peer, m.seq, p->data + sizeof(m));
    } else {
        char desc[160];
        TEMPO_WARN(TEMPO_SUB_COLL, "ignored a malformed control note from %s",
                   tempo__peer_desc(w, p->src, desc, sizeof(desc)));
    }
}

int tempo__notes_handle(tempo__world_t *w)
{
    int n = 0;
    while (!tempo__list_empty(&w->notes)) {
        pending_t *p = tempo__container_of(w->notes.next, pending_t, link);
        tempo__list_remove(&p->link);
        n++;
        note_t m;
        int peer = -1;
        struct tempo_comm *c = NULL;
        uint32_t kind = 0;
        memcpy(&kind, p->data, TEMPO_MIN(p->len, sizeof(kind)));
        if (kind >= TEMPO_NOTE_BLAME) { /* about the job, not a communicator */
            tempo__blame_note(w, p->src, p->data, p->len);
            tempo__free(p);
            continue;
        }
        if (p->len < sizeof(m)) {
            char desc[160];
            TEMPO_WARN(TEMPO_SUB_COLL, "ignored a malformed control note from %s",
                       tempo__peer_desc(w, p->src, desc, sizeof(desc)));
            tempo__free(p);
            continue;
        }
        memcpy(&m, p->data, sizeof(m));
        c = find_comm(w, m.ctx, m.uid, p->src, &peer);
        if (c) {
            handle(w, c, peer, p);
            tempo__free(p);
        } else if (m.kind != NOTE_PROBE) {
            /* The peer finished creating the communicator before this rank did (a split ends on
             * some ranks first), or this rank destroyed it already: keep the news for a while. A
             * probe is asked again. */
            tempo__list_push_back(&w->held_notes, &p->link);
            if (++w->nheld_notes > PARKED_MAX) {
                tempo__list_t *e = w->held_notes.next;
                tempo__list_remove(e);
                tempo__free(e);
                w->nheld_notes--;
            }
        } else {
            tempo__free(p);
        }
    }
    return n;
}

void tempo__comm_ready(struct tempo_comm *c)
{
    tempo__world_t *w = c->world;
    tempo__list_t *pos, *tmp;
    tempo__list_for_each_safe (pos, tmp, &w->held_notes) {
        pending_t *p = tempo__container_of(pos, pending_t, link);
        note_t m;
        int peer;
        memcpy(&m, p->data, sizeof(m));
        if (find_comm(w, m.ctx, m.uid, p->src, &peer) == c) {
            tempo__list_remove(&p->link);
            w->nheld_notes--;
            handle(w, c, peer, p);
            tempo__free(p);
        }
    }
}
