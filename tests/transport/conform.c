/*
 * conform.c — the transport conformance suite: what every transport must do for point-to-point
 * messages, checked through the public API on whatever transport the environment selects
 * (TEMPO_TRANSPORTS, TEMPO_SHM, TEMPO_HOST_ID, UCX_TLS, ... passed to the ranks through FAULT_ENV:
 * tests/fault/job.h). tests/transport/conform.sh runs it once per transport at 2 and 3 ranks.
 *
 * It forks its ranks itself (job.h), so that it can stop, kill and release them one by one; every
 * check is evaluated inside a rank against data the rank computes itself, and relayed as TAP. Cases
 * (each one job of -n ranks; --only picks some, --list names them):
 *   transport  every rank's INIT log names the transports it uses ("transport tcp carries the data
 *              of 2 peers: ranks 1, 2"); with --expect TEXT, one of each rank's such lines contains
 *              TEXT (a run that silently fell back to another transport fails here)
 *   order      messages of one tag arrive in the order sent, tags interleaved at random do not
 *              interfere (tags 0 to TEMPO_TAG_MAX), receives posted in send order, grouped by tag
 *              in reverse, or in a random interleaving, before the sends (posted), after them
 *              (unexpected) or half and half; every pair of ranks at once, both ways
 *   sizes      every size from 0 B to --max-bytes (256 MiB): 0 to 3 and every power of two with
 *              its neighbours (2^k - 1, 2^k, 2^k + 1), receive posted before or after the send, to
 *              every peer up to 1 MiB and to the next rank beyond; the content checked bitwise
 *              against a pattern of size, offset and sender, and 64 guard bytes after the buffer
 *              untouched
 *   flood      4096 messages in flight per ordered pair, each way at once (13 tags, 0 B to 64 KiB),
 *              half the receives posted before the sends, half after, in a random interleaving
 *   partial    progress by tempo_test alone: rank 0 posts receives for big (BIG, 8 MiB) and small
 *              messages interleaved on several tags and only polls; the senders start only then
 *              and poll too. Then the reverse: with TEMPO_UNEXPECTED_BYTES=1M the senders post
 *              first while rank 0 polls a receive from the last rank only (3 ranks; with 2 it
 *              waits outside the library), and rank 1's BIG send (larger than the kernel's
 *              socket buffers) must not complete while rank 0 has posted no receive from it
 *              (tempo.h, "Flow control"); then the last rank's token lets rank 0 post late, and
 *              everything arrives
 *   mismatch   a receive of another size than sent fails with TEMPO_ERR_INVALID naming the sender
 *              and both sizes (posted before arrival, unexpected, and an 8 MiB message arriving);
 *              the message is consumed, the next one of the tag arrives intact, the sends succeed
 *              and the job stays usable (tempo.h, "Point-to-point")
 *   kill       a rank killed with SIGKILL during an exchange loop (the last rank, then rank 0):
 *              every survivor fails with TEMPO_ERR_REMOTE within DETECT_GUARD_S (TEMPO_TIMEOUT is
 *              30 s, so a timeout cannot pass for a detection) naming the rank, its host and pid,
 *              and so does a later call
 *   deadsend   the last rank posts a LOOP_BYTES send to rank 0 (large enough for every
 *              transport's zero-copy path: the receiver reads the sender's memory) and is killed
 *              with SIGKILL before rank 0 posts the receive (no progress thread): the receive
 *              fails with TEMPO_ERR_REMOTE naming it, or, where the bytes had left the sender
 *              before it died (tcp's socket buffers), succeeds with them intact; rank 0 exits
 *              normally either way
 *   stop       a rank stopped with SIGSTOP during the loop, TEMPO_TIMEOUT=3s: every survivor fails
 *              with TEMPO_ERR_TIMEOUT naming it; then the stopped rank is killed
 *   goodbye    the last rank sends three messages and destroys its communicator: each peer
 *              receives the three intact, then its further receives from it fail with
 *              TEMPO_ERR_REMOTE saying it has left, and so does a send to it; the job is not
 *              failed: the other ranks still exchange messages (3 ranks)
 *   abort      the last rank calls tempo_comm_abort while its peers wait for it: they fail with
 *              TEMPO_ERR_REMOTE naming it and saying it aborted
 * Malformed and truncated frames are in conform_frames.c (internal test hook).
 *
 * Usage: conform [-n RANKS] [--only CASE,...] [--max-bytes BYTES] [--expect TEXT] [--seed N]
 * The seed (random unless given or CONFORM_SEED is set) drives sizes, tags and posting orders; it
 * is printed, and a failure is replayed with the same seed.
 */
#include "config.h"

#include <tempo.h>

#include <dirent.h>
#include <sys/stat.h>

#include "tests/fault/job.h"
#include "tests/mr/mrtest.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
#define MAX_RANKS 8
#define GUARD_BYTES 64
#define POISON 0xd6
#define DETECT_GUARD_S 10.0 /* a dead peer is noticed well within this; TEMPO_TIMEOUT is 30 s */
#define CASE_GUARD_S 300.0  /* hang guard of a whole case */
#define POLL_GUARD_S 60.0   /* a tempo_test loop gives up after this (reported, not hung) */
#define FLOOD 4096
#define PARTIAL_BIG (32u << 20) /* at least; more where the kernel's TCP buffers could hold it */
#define PARTIAL_LIMIT "1M"

typedef struct {
    int kase;           /* index into cases[] */
    uint64_t seed;
    size_t max_bytes;
    int victim;         /* kill, stop, goodbye, abort: the rank that goes */
    const char *logdir; /* transport: where the ranks' INIT logs go */
} conf_arg_t;

/* ---------------------------------------------------------------------------------------------- */
/* Data                                                                                           */
/* ---------------------------------------------------------------------------------------------- */

/* The pattern of a message: 8-byte words mr_mix64(seed + word index), seed from the message's size,
 * sender and identity (tag and sequence number, or size class and distance): a message that
 * arrives at the wrong receive, shifted, cut or from another rank differs. */
static uint64_t pat_seed(uint64_t size, int sender, uint64_t id)
{
    return mr_hash3(size, (uint64_t)sender + 0x5eed, id);
}

static void pat_fill(uint8_t *p, size_t len, uint64_t seed)
{
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w = mr_mix64(seed + i / 8);
        memcpy(p + i, &w, 8);
    }
    if (i < len) {
        uint64_t w = mr_mix64(seed + i / 8);
        memcpy(p + i, &w, len - i);
    }
}

/* First offset where p differs from the pattern, or -1. */
static long pat_check(const uint8_t *p, size_t len, uint64_t seed)
{
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w = mr_mix64(seed + i / 8);
        if (memcmp(p + i, &w, 8) != 0) {
            break;
        }
    }
    for (; i < len; i++) {
        uint64_t w = mr_mix64(seed + i / 8);
        if (p[i] != (uint8_t)(w >> (8 * (i % 8)))) {
            return (long)i;
        }
    }
    return -1;
}

/* A receive buffer of len bytes followed by GUARD_BYTES, poisoned. */
static uint8_t *rbuf_new(size_t len)
{
    uint8_t *b = malloc(len + GUARD_BYTES);
    if (b) {
        memset(b, POISON, len + GUARD_BYTES);
    }
    return b;
}

static long guard_check(const uint8_t *b, size_t len)
{
    for (size_t i = 0; i < GUARD_BYTES; i++) {
        if (b[len + i] != POISON) {
            return (long)(len + i);
        }
    }
    return -1;
}

/* One message of a plan: what the receiver expects and checks. */
typedef struct {
    int peer;      /* the other rank */
    uint32_t tag;
    uint32_t seq;  /* among the messages of its tag from this sender */
    size_t len;
    uint8_t *buf;
    tempo_request_t req;
    tempo_status_t st;
} msg_t;

/* Check a received message: status, content and guard. Appends a description of the first problem
 * to why (if empty) and returns 0 on a problem. */
static int msg_verify(tempo_comm_t comm, const msg_t *m, uint64_t seed, char *why, size_t wlen)
{
    char d[400] = "";
    if (m->st != TEMPO_OK) {
        snprintf(d, sizeof(d), "tag %u #%u (%zu B) from rank %d: %s: %s", m->tag, m->seq, m->len,
                 m->peer, tempo_status_name(m->st), tempo_last_error(comm));
    } else {
        long o = pat_check(m->buf, m->len, seed);
        long g = guard_check(m->buf, m->len);
        if (o >= 0) {
            snprintf(d, sizeof(d), "tag %u #%u (%zu B) from rank %d: byte %ld is 0x%02x, not the "
                     "pattern's", m->tag, m->seq, m->len, m->peer, o, m->buf[o]);
        } else if (g >= 0) {
            snprintf(d, sizeof(d), "tag %u #%u (%zu B) from rank %d: written past its end (guard "
                     "byte %ld)", m->tag, m->seq, m->len, m->peer, g);
        }
    }
    if (d[0] && !why[0]) {
        snprintf(why, wlen, "%s", d);
    }
    return d[0] == 0;
}

/* Poll every request of reqs with tempo_test only, until all complete or POLL_GUARD_S passes.
 * Statuses land in sts. Returns the number still in progress. */
static int poll_all(tempo_request_t *reqs, tempo_status_t *sts, int n, long *polls_p)
{
    double give_up = rk_now() + POLL_GUARD_S;
    int left = n;
    long polls = 0;
    for (int i = 0; i < n; i++) {
        if (!reqs[i]) {
            left--;
        }
    }
    while (left > 0 && rk_now() < give_up) {
        for (int i = 0; i < n; i++) {
            if (!reqs[i]) {
                continue;
            }
            tempo_status_t st = tempo_test(&reqs[i]);
            polls++;
            if (st != TEMPO_INPROGRESS) {
                sts[i] = st;
                left--;
            }
        }
    }
    *polls_p = polls;
    return left;
}

/* ---------------------------------------------------------------------------------------------- */
/* transport                                                                                      */
/* ---------------------------------------------------------------------------------------------- */

static int do_transport(tempo_comm_t comm, int rank, int size, const conf_arg_t *a)
{
    (void)rank;
    (void)size;
    (void)a;
    tempo_status_t st = tempo_barrier(comm);
    rk_check(st == TEMPO_OK, "transport: a barrier (%s%s%s)", tempo_status_name(st),
             st == TEMPO_OK ? "" : ": ", st == TEMPO_OK ? "" : tempo_last_error(comm));
    return 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* order and flood                                                                                */
/* ---------------------------------------------------------------------------------------------- */

typedef struct {
    const char *name;
    int nmsg;       /* messages per ordered pair */
    int ntags;      /* 1: tag 7 only; else tags from tag_set[0 .. ntags) */
    int order;      /* receive posting order: 0 send order, 1 by tag in reverse, 2 random */
    int pre;        /* receives posted before the sends: 0 none, 1 all, 2 half */
    size_t maxlen;  /* largest message */
} phase_t;

static const uint32_t tag_set[] = {0, 1, 2, 3, 77, 1000000, TEMPO_TAG_MAX, 5, 6, 8, 9, 10, 11};

static const phase_t phases[] = {
    {"one tag, receives posted first", 64, 1, 0, 1, 100000},
    {"one tag, receives posted late", 64, 1, 0, 0, 100000},
    {"one tag, half posted first", 64, 1, 0, 2, 100000},
    {"interleaved tags, receives by tag in reverse", 96, 7, 1, 1, 20000},
    {"interleaved tags, receives by tag in reverse, late", 96, 7, 1, 0, 20000},
    {"interleaved tags, random receive order, half first", 128, 7, 2, 2, 20000},
    {"interleaved tags, random receive order, late", 128, 7, 2, 0, 20000},
};

static const phase_t flood_phase = {"4096 in flight", FLOOD, 13, 2, 2, 65536};

/* Message k from sender to receiver in phase ph: its tag and size. */
static void plan_msg(const phase_t *ph, uint64_t seed, int sender, int receiver, int k,
                     uint32_t *tag_p, size_t *len_p)
{
    uint64_t h = mr_hash3(seed, ((uint64_t)sender << 8) | (uint64_t)receiver, (uint64_t)k);
    *tag_p = ph->ntags == 1 ? 7 : tag_set[(h >> 40) % (uint64_t)ph->ntags];
    switch (h % 8) {
    case 0: *len_p = 0; break;
    case 1: *len_p = 1 + (h >> 8) % 16; break;
    case 7: *len_p = ph->maxlen - (h >> 8) % 3; break; /* the largest, and one or two below */
    default: *len_p = (h >> 8) % (ph->maxlen > 1024 && ph->nmsg > 1000 ? 1024 : ph->maxlen); break;
    }
}

/* Build the n messages from sender to receiver, numbering each tag's messages in send order. */
static void plan_list(const phase_t *ph, uint64_t seed, int sender, int receiver, msg_t *m)
{
    uint32_t seq[NELEM(tag_set)] = {0};
    for (int k = 0; k < ph->nmsg; k++) {
        plan_msg(ph, seed, sender, receiver, k, &m[k].tag, &m[k].len);
        size_t t = 0;
        while (tag_set[t] != m[k].tag && m[k].tag != 7) {
            t++;
        }
        m[k].seq = seq[m[k].tag == 7 ? 0 : t]++;
        m[k].peer = sender;
        m[k].buf = NULL;
        m[k].req = NULL;
        m[k].st = TEMPO_INPROGRESS;
    }
}

static uint64_t msg_id(const msg_t *m)
{
    return ((uint64_t)m->tag << 32) | m->seq;
}

/* The order in which the receiver posts the receives of list m (n messages): a permutation that
 * keeps each tag's messages in order, since those match in posting order. */
static void recv_order(const phase_t *ph, uint64_t seed, const msg_t *m, int n, int *perm)
{
    if (ph->order == 0) {
        for (int i = 0; i < n; i++) {
            perm[i] = i;
        }
        return;
    }
    if (ph->order == 1) { /* tags in reverse order of tag_set, each in order */
        int o = 0;
        for (int t = ph->ntags - 1; t >= 0; t--) {
            for (int i = 0; i < n; i++) {
                if (m[i].tag == tag_set[t]) {
                    perm[o++] = i;
                }
            }
        }
        return;
    }
    /* Random interleaving: a random permutation, then each tag's slots refilled with its messages
     * in order. */
    for (int i = 0; i < n; i++) {
        perm[i] = i;
    }
    uint64_t r = seed | 1;
    for (int i = n - 1; i > 0; i--) {
        r = mr_mix64(r);
        int j = (int)(r % (uint64_t)(i + 1)), x = perm[i];
        perm[i] = perm[j];
        perm[j] = x;
    }
    for (size_t t = 0; t < NELEM(tag_set); t++) {
        int next = 0;
        for (int i = 0; i < n; i++) {
            if (m[perm[i]].tag != tag_set[t]) {
                continue;
            }
            while (m[next].tag != tag_set[t]) {
                next++;
            }
            perm[i] = next++;
        }
    }
}

/* One phase between every ordered pair of ranks at once. Returns 0 when every message arrived
 * intact (reported through rk_check per peer). */
static int run_phase(tempo_comm_t comm, int me, int n, const phase_t *ph, uint64_t seed)
{
    int nm = ph->nmsg, bad = 0;
    msg_t *in = calloc((size_t)n * (size_t)nm, sizeof(msg_t));
    msg_t *out = calloc((size_t)n * (size_t)nm, sizeof(msg_t));
    int *perm = calloc((size_t)n * (size_t)nm, sizeof(int));
    if (!in || !out || !perm) {
        rk_check(0, "%s: out of memory", ph->name);
        return 1;
    }
    for (int p = 0; p < n; p++) {
        if (p == me) {
            continue;
        }
        msg_t *o = out + (size_t)p * (size_t)nm, *i = in + (size_t)p * (size_t)nm;
        plan_list(ph, seed, me, p, o);
        plan_list(ph, seed, p, me, i);
        recv_order(ph, mr_hash3(seed, (uint64_t)p, (uint64_t)me), i, nm, perm + (size_t)p * nm);
        for (int k = 0; k < nm; k++) {
            o[k].buf = malloc(o[k].len ? o[k].len : 1);
            pat_fill(o[k].buf, o[k].len, pat_seed(o[k].len, me, msg_id(&o[k])));
            i[k].buf = rbuf_new(i[k].len);
        }
    }
    int npre = ph->pre == 1 ? nm : ph->pre == 2 ? nm / 2 : 0;
    tempo_status_t st = TEMPO_OK;
    for (int p = 0; p < n && st == TEMPO_OK; p++) {
        for (int k = 0; p != me && k < npre && st == TEMPO_OK; k++) {
            msg_t *m = in + (size_t)p * nm + perm[(size_t)p * nm + k];
            st = tempo_irecv(comm, m->buf, m->len, TEMPO_UINT8, p, m->tag, NULL, &m->req);
        }
    }
    if (st == TEMPO_OK) {
        st = tempo_barrier(comm);
    }
    for (int k = 0; k < nm && st == TEMPO_OK; k++) { /* to each peer in turn, message by message */
        for (int p = 0; p < n && st == TEMPO_OK; p++) {
            msg_t *m = out + (size_t)p * nm + k;
            if (p != me) {
                st = tempo_isend(comm, m->buf, m->len, TEMPO_UINT8, p, m->tag, NULL, &m->req);
            }
        }
    }
    if (ph->pre == 0 && st == TEMPO_OK) {
        /* Receives strictly after the sends completed: the messages are unexpected. */
        for (int p = 0; p < n && st == TEMPO_OK; p++) {
            for (int k = 0; p != me && k < nm && st == TEMPO_OK; k++) {
                st = tempo_wait(&out[(size_t)p * nm + k].req);
            }
        }
        if (st == TEMPO_OK) {
            st = tempo_barrier(comm);
        }
    }
    for (int p = 0; p < n && st == TEMPO_OK; p++) {
        for (int k = npre; p != me && k < nm && st == TEMPO_OK; k++) {
            msg_t *m = in + (size_t)p * nm + perm[(size_t)p * nm + k];
            st = tempo_irecv(comm, m->buf, m->len, TEMPO_UINT8, p, m->tag, NULL, &m->req);
        }
    }
    if (!rk_check(st == TEMPO_OK, "%s: every send and receive is posted (%s)", ph->name,
                  st == TEMPO_OK ? "ok" : tempo_last_error(comm))) {
        bad = 1;
    }
    for (int p = 0; p < n; p++) {
        if (p == me) {
            continue;
        }
        char why[500] = "";
        int sends_ok = 1, recvs_ok = 0;
        for (int k = 0; k < nm; k++) {
            msg_t *o = out + (size_t)p * nm + k, *i = in + (size_t)p * nm + k;
            sends_ok &= tempo_wait(&o->req) == TEMPO_OK;
            i->st = i->req ? tempo_wait(&i->req) : TEMPO_ERR_INVALID;
        }
        for (int k = 0; k < nm; k++) {
            msg_t *i = in + (size_t)p * nm + k;
            recvs_ok += msg_verify(comm, i, pat_seed(i->len, p, msg_id(i)), why, sizeof(why));
        }
        bad |= !rk_check(sends_ok && recvs_ok == nm, "%s: %d messages from rank %d arrive intact "
                         "and in order per tag, and the sends to it complete (%d intact%s%s)",
                         ph->name, nm, p, recvs_ok, why[0] ? "; first wrong: " : "", why);
    }
    for (size_t k = 0; k < (size_t)n * nm; k++) {
        free(in[k].buf);
        free(out[k].buf);
    }
    free(in);
    free(out);
    free(perm);
    rk_check(tempo_barrier(comm) == TEMPO_OK, "%s: a barrier after it", ph->name);
    return bad;
}

static int do_order(tempo_comm_t comm, int rank, int size, const conf_arg_t *a)
{
    for (size_t i = 0; i < NELEM(phases); i++) {
        run_phase(comm, rank, size, &phases[i], mr_hash3(a->seed, 1, i));
    }
    return 0;
}

static int do_flood(tempo_comm_t comm, int rank, int size, const conf_arg_t *a)
{
    run_phase(comm, rank, size, &flood_phase, mr_hash3(a->seed, 2, 0));
    return 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* sizes                                                                                          */
/* ---------------------------------------------------------------------------------------------- */

#define SIZES_ALL_PEERS (1u << 20) /* up to here to every peer; beyond, to the next rank only */

/* The sizes up to max: 0..3, then 2^k - 1, 2^k, 2^k + 1. Returns how many (at most cap). */
static int size_list(size_t max, size_t *s, int cap)
{
    int n = 0;
    for (size_t v = 0; v <= 3 && v <= max && n < cap; v++) {
        s[n++] = v;
    }
    for (size_t p = 4; p <= max && n < cap; p *= 2) {
        for (size_t v = p - 1; v <= p + 1 && v <= max && n < cap; v++) {
            if (v > s[n - 1]) {
                s[n++] = v;
            }
        }
    }
    return n;
}

static int do_sizes(tempo_comm_t comm, int me, int n, const conf_arg_t *a)
{
    size_t sizes[128];
    int ns = size_list(a->max_bytes, sizes, 128);
    size_t big = sizes[ns - 1], small = big < SIZES_ALL_PEERS ? big : SIZES_ALL_PEERS;
    uint8_t *sbuf[MAX_RANKS] = {0}, *rbuf[MAX_RANKS] = {0};
    for (int d = 1; d < n; d++) {
        sbuf[d] = malloc((d == 1 ? big : small) + 1);
        rbuf[d] = malloc((d == 1 ? big : small) + GUARD_BYTES);
        if (!sbuf[d] || !rbuf[d]) {
            rk_check(0, "sizes: out of memory for %zu-byte buffers", big);
            return 1;
        }
    }
    char why[600] = "";
    int nbad = 0, nmsg = 0;
    tempo_status_t st = TEMPO_OK;
    for (int i = 0; i < ns && st == TEMPO_OK; i++) {
        size_t len = sizes[i];
        int nd = len <= SIZES_ALL_PEERS ? n - 1 : 1;
        tempo_request_t sreq[MAX_RANKS] = {0}, rreq[MAX_RANKS] = {0};
        for (int d = 1; d <= nd; d++) {
            pat_fill(sbuf[d], len, pat_seed(len, me, (uint64_t)d));
            memset(rbuf[d], POISON, len + GUARD_BYTES);
        }
        /* Even sizes: receives first; odd: sends first (the message may be unexpected). */
        for (int pass = 0; pass < 2 && st == TEMPO_OK; pass++) {
            int recv_now = (pass == 0) == (i % 2 == 0);
            for (int d = 1; d <= nd && st == TEMPO_OK; d++) {
                if (recv_now) {
                    st = tempo_irecv(comm, rbuf[d], len, TEMPO_UINT8, (me - d + n) % n,
                                     (uint32_t)d, NULL, &rreq[d]);
                } else {
                    st = tempo_isend(comm, sbuf[d], len, TEMPO_UINT8, (me + d) % n, (uint32_t)d,
                                     NULL, &sreq[d]);
                }
            }
        }
        for (int d = 1; d <= nd; d++) {
            tempo_status_t s1 = tempo_wait(&sreq[d]), s2 = tempo_wait(&rreq[d]);
            int from = (me - d + n) % n;
            msg_t m = {from, (uint32_t)d, 0, len, rbuf[d], NULL, s2};
            if (s1 != TEMPO_OK && s2 == TEMPO_OK) {
                m.st = s1;
            }
            nmsg++;
            if (!msg_verify(comm, &m, pat_seed(len, from, (uint64_t)d), why, sizeof(why))) {
                nbad++;
            }
            if (st == TEMPO_OK && (s1 != TEMPO_OK || s2 != TEMPO_OK)) {
                st = s1 != TEMPO_OK ? s1 : s2;
            }
        }
    }
    rk_check(nbad == 0 && st == TEMPO_OK, "sizes: %d sizes from 0 B to %zu B, %d messages intact, "
             "no byte written past the end (%d wrong%s%s)", ns, big, nmsg, nbad,
             why[0] ? "; first: " : "", why);
    rk_check(tempo_barrier(comm) == TEMPO_OK, "sizes: a barrier after them");
    for (int d = 1; d < n; d++) {
        free(sbuf[d]);
        free(rbuf[d]);
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* partial                                                                                        */
/* ---------------------------------------------------------------------------------------------- */

typedef struct {
    uint32_t tag;
    size_t len;
} pmsg_t;

/* What each sender sends to rank 0, in this order: big and small messages on several tags. */
static pmsg_t pmsgs[] = { /* [PARTIAL_BIG_INDEX].len: partial_big() */
    {1, 100}, {2, PARTIAL_BIG}, {1, 3000}, {3, 0}, {4, 8u << 20}, {1, 1}, {3, 65536}, {2, 17},
};
#define NP ((int)NELEM(pmsgs))
#define PARTIAL_BIG_INDEX 1
#define TOKEN_TAG 50

/* The big message of partial: larger than what the transport's pipe can hold besides the
 * receiver's TEMPO_UNEXPECTED_BYTES, so that it cannot complete before its receive is posted.
 * Loopback TCP autotunes a socket's receive buffer up to tcp_rmem's maximum (32 MiB here), on top
 * of the sender's tcp_wmem: twice their sum, at least PARTIAL_BIG. */
static size_t partial_big(void)
{
    size_t sum = 0;
    static const char *const files[] = {"/proc/sys/net/ipv4/tcp_rmem",
                                        "/proc/sys/net/ipv4/tcp_wmem"};
    for (size_t i = 0; i < NELEM(files); i++) {
        unsigned long long lo, def, max;
        FILE *f = fopen(files[i], "r");
        if (f && fscanf(f, "%llu %llu %llu", &lo, &def, &max) == 3) {
            sum += (size_t)max;
        }
        if (f) {
            fclose(f);
        }
    }
    return (2 * sum > PARTIAL_BIG ? 2 * sum : PARTIAL_BIG) + 5;
}

static uint64_t pmsg_id(int k, int round)
{
    return ((uint64_t)round << 32) | (uint64_t)k;
}

/* Rank 0: post the receives of round from every sender (in reverse order within a tag's peers:
 * the order of tags differs from the send order), say "posted<round>", poll until done. */
static void partial_receiver(tempo_comm_t comm, int n, int round)
{
    int total = (n - 1) * NP;
    tempo_request_t *req = calloc((size_t)total, sizeof(*req));
    tempo_status_t *sts = calloc((size_t)total, sizeof(*sts));
    uint8_t **buf = calloc((size_t)total, sizeof(*buf));
    tempo_status_t st = TEMPO_OK;
    for (int t = 4; t >= 1; t--) { /* tags in reverse, each in send order */
        for (int p = 1; p < n; p++) {
            for (int k = 0; k < NP; k++) {
                int x = (p - 1) * NP + k;
                if (pmsgs[k].tag != (uint32_t)t) {
                    continue;
                }
                buf[x] = rbuf_new(pmsgs[k].len);
                if (st == TEMPO_OK) {
                    st = tempo_irecv(comm, buf[x], pmsgs[k].len, TEMPO_UINT8, p, pmsgs[k].tag,
                                     NULL, &req[x]);
                }
            }
        }
    }
    rk_put(round == 0 ? "posted0" : "posted1", "%d", (int)st);
    long polls = 0;
    int left = poll_all(req, sts, total, &polls);
    char why[500] = "";
    int good = 0;
    for (int x = 0; x < total; x++) {
        int p = 1 + x / NP, k = x % NP;
        msg_t m = {p, pmsgs[k].tag, (uint32_t)k, pmsgs[k].len, buf[x], NULL, sts[x]};
        good += msg_verify(comm, &m, pat_seed(m.len, p, pmsg_id(k, round)), why, sizeof(why));
        free(buf[x]);
    }
    rk_check(left == 0 && good == total, "partial, %s: rank 0 receives %d messages (two of "
             "%zu and 8M bytes per sender among small ones) by polling tempo_test alone (%ld "
             "polls; %d incomplete after %.0f s; %d intact%s%s)",
             round == 0 ? "receives posted first, senders late"
                        : "sends posted first over the unexpected limit, receives late",
             total, pmsgs[PARTIAL_BIG_INDEX].len, polls, left, POLL_GUARD_S, good,
             why[0] ? "; first wrong: " : "", why);
    free(req);
    free(sts);
    free(buf);
}

/* A sender: post the round's sends to rank 0 and poll them. In round 1 (receiver late), poll for a
 * while before saying "sent1": the send over the receiver's unexpected limit must still be in
 * progress then, since rank 0 has posted nothing (it waits for the test's go). */
static void partial_sender(tempo_comm_t comm, int me, int size, int round)
{
    tempo_request_t req[NP] = {0};
    tempo_status_t sts[NP];
    uint8_t *buf[NP];
    tempo_status_t st = TEMPO_OK;
    for (int k = 0; k < NP; k++) {
        buf[k] = malloc(pmsgs[k].len + 1);
        pat_fill(buf[k], pmsgs[k].len, pat_seed(pmsgs[k].len, me, pmsg_id(k, round)));
        if (st == TEMPO_OK) {
            st = tempo_isend(comm, buf[k], pmsgs[k].len, TEMPO_UINT8, 0, pmsgs[k].tag, NULL,
                             &req[k]);
        }
        sts[k] = TEMPO_INPROGRESS;
    }
    if (round == 1) {
        /* The first message fits under the limit: wait for it by polling, then keep polling the
         * big one for a while (rank 0 is not in the library: nothing else can let it finish). */
        double until = 0, give_up = rk_now() + POLL_GUARD_S;
        long polls = 0;
        while (st == TEMPO_OK && req[PARTIAL_BIG_INDEX] && rk_now() < (until ? until : give_up)) {
            if (req[0]) {
                tempo_status_t s0 = tempo_test(&req[0]);
                if (s0 != TEMPO_INPROGRESS) {
                    sts[0] = s0;
                }
            } else if (!until) {
                until = rk_now() + 0.3;
            }
            tempo_status_t sb = tempo_test(&req[PARTIAL_BIG_INDEX]);
            polls++;
            if (sb != TEMPO_INPROGRESS) {
                sts[PARTIAL_BIG_INDEX] = sb;
            }
        }
        if (me == 1) { /* rank 0 has a receive posted from the last rank only */
            rk_check(req[PARTIAL_BIG_INDEX] != NULL, "partial: rank 1's %zu-byte send is still "
                     "in progress while rank 0 %s and has posted no receive from it "
                     "(TEMPO_UNEXPECTED_BYTES=%s; %ld polls; status %s)",
                     pmsgs[PARTIAL_BIG_INDEX].len,
                     size >= 3 ? "makes progress" : "is outside the library", PARTIAL_LIMIT,
                     polls, req[PARTIAL_BIG_INDEX] ? "in progress"
                                                   : tempo_status_name(sts[PARTIAL_BIG_INDEX]));
        }
        rk_put("sent1", "%d", (int)st);
        if (size >= 3 && me == size - 1) {
            uint64_t token = 0x70cc;
            rk_wait_go();
            rk_check(tempo_send(comm, &token, 8, TEMPO_UINT8, 0, TOKEN_TAG) == TEMPO_OK,
                     "partial: rank %d sends rank 0 its token", me);
        }
    }
    long polls = 0;
    int left = poll_all(req, sts, NP, &polls);
    int ok = 0;
    for (int k = 0; k < NP; k++) {
        ok += sts[k] == TEMPO_OK;
        free(buf[k]);
    }
    rk_check(st == TEMPO_OK && left == 0 && ok == NP, "partial, round %d: rank %d's %d sends "
             "complete by polling tempo_test (%d with TEMPO_OK, %d incomplete; %s)", round, me, NP,
             ok, left, st == TEMPO_OK ? "posted" : tempo_last_error(comm));
}

static int do_partial(tempo_comm_t comm, int rank, int size, const conf_arg_t *a)
{
    (void)a;
    for (int round = 0; round < 2; round++) {
        if (rank == 0) {
            if (round == 1 && size >= 3) {
                /* Progress, with a receive posted from the last rank only, until the senders
                 * have posted and polled: the limit holds rank 1's stream. */
                uint64_t token = 0;
                tempo_request_t rq = NULL;
                tempo_status_t st = tempo_irecv(comm, &token, 8, TEMPO_UINT8, size - 1,
                                                TOKEN_TAG, NULL, &rq);
                long polls = 0;
                tempo_status_t ts = st;
                int left = st == TEMPO_OK ? poll_all(&rq, &ts, 1, &polls) : 0;
                rk_check(st == TEMPO_OK && left == 0 && ts == TEMPO_OK && token == 0x70cc,
                         "partial: rank 0 polls a receive from rank %d until its token comes "
                         "(%ld polls, %s)", size - 1, polls, tempo_status_name(ts));
            } else if (round == 1) {
                rk_wait_go(); /* the senders have posted and polled */
            }
            partial_receiver(comm, size, round);
        } else {
            if (round == 0) {
                rk_wait_go(); /* rank 0 has posted and polls */
            }
            partial_sender(comm, rank, size, round);
        }
        rk_check(tempo_barrier(comm) == TEMPO_OK, "partial, round %d: a barrier after it", round);
    }
    return 0;
}

static void orchestrate_partial(job_t *j, int n)
{
    const char *v = job_wait_key(j, 0, "posted0", 60);
    TAP_OK(v && atoi(v) == 0, "partial: rank 0 posted its receives (%s)", v ? v : "no report");
    for (int r = 1; r < n; r++) {
        job_go(j, r);
    }
    int sent = 1;
    for (int r = 1; r < n; r++) {
        sent &= job_wait_key(j, r, "sent1", 120) != NULL;
    }
    TAP_OK(sent, "partial: the senders posted round 1 and polled");
    job_go(j, n >= 3 ? n - 1 : 0); /* the token's sender, or rank 0 itself */
}

/* ---------------------------------------------------------------------------------------------- */
/* mismatch                                                                                       */
/* ---------------------------------------------------------------------------------------------- */

/* Every rank sends to the next and receives from the previous: tag 5 posted before arrival with 8
 * bytes more, tag 6 unexpected with 8 bytes less, tag 8 an 8 MiB message 1 byte short while it
 * arrives; each followed by a message of the right size on the same tag. */
static int do_mismatch(tempo_comm_t comm, int me, int n, const conf_arg_t *a)
{
    (void)a;
    static const struct {
        uint32_t tag;
        size_t sent;
        long delta; /* posted size - sent */
        int late;   /* receive posted after the sends completed */
        const char *what;
    } mm[] = {
        {5, 1000, 8, 0, "receive posted first, 8 bytes larger"},
        {6, 4000, -8, 1, "message unexpected, receive 8 bytes smaller"},
        {8, 8u << 20, -1, 0, "8 MiB message, receive 1 byte smaller"},
    };
    int to = (me + 1) % n, from = (me - 1 + n) % n;
    char host[64];
    gethostname(host, sizeof(host));
    host[sizeof(host) - 1] = '\0';
    for (size_t c = 0; c < NELEM(mm); c++) {
        size_t len = mm[c].sent, wrong = (size_t)((long)len + mm[c].delta);
        uint8_t *s0 = malloc(len), *s1 = malloc(len), *r0 = rbuf_new(wrong), *r1 = rbuf_new(len);
        pat_fill(s0, len, pat_seed(len, me, 0));
        pat_fill(s1, len, pat_seed(len, me, 1));
        tempo_request_t rq0 = NULL, rq1 = NULL, sq0 = NULL, sq1 = NULL;
        /* The mismatched receive may fail when it is posted (the message is there already) or
         * when it completes: either is "the receive fails" (tempo.h). */
        tempo_status_t st = TEMPO_OK, rs0 = TEMPO_INPROGRESS;
        if (!mm[c].late) {
            rs0 = tempo_irecv(comm, r0, wrong, TEMPO_UINT8, from, mm[c].tag, NULL, &rq0);
        }
        if (st == TEMPO_OK) {
            st = tempo_barrier(comm);
        }
        if (st == TEMPO_OK) {
            st = tempo_isend(comm, s0, len, TEMPO_UINT8, to, mm[c].tag, NULL, &sq0);
        }
        if (st == TEMPO_OK) {
            st = tempo_isend(comm, s1, len, TEMPO_UINT8, to, mm[c].tag, NULL, &sq1);
        }
        tempo_status_t ss0 = TEMPO_OK, ss1 = TEMPO_OK;
        if (mm[c].late && st == TEMPO_OK) {
            ss0 = tempo_wait(&sq0);
            ss1 = tempo_wait(&sq1);
            st = tempo_barrier(comm);
            if (st == TEMPO_OK) {
                rs0 = tempo_irecv(comm, r0, wrong, TEMPO_UINT8, from, mm[c].tag, NULL, &rq0);
            }
        }
        if (rs0 == TEMPO_OK) {
            rs0 = tempo_wait(&rq0);
        }
        char msg[600];
        snprintf(msg, sizeof(msg), "%s", tempo_last_error(comm));
        char who[160], sizes[96];
        snprintf(who, sizeof(who), "rank %d (host %s", from, host);
        snprintf(sizes, sizeof(sizes), "sent %zu bytes where %zu were expected", len, wrong);
        rk_check(rs0 == TEMPO_ERR_INVALID, "mismatch, %s: the receive fails with "
                 "TEMPO_ERR_INVALID (got %s)", mm[c].what, tempo_status_name(rs0));
        rk_check(strstr(msg, who) && strstr(msg, sizes), "mismatch, %s: the error names the "
                 "sender and both sizes (\"%s\", \"%s\" in: %s)", mm[c].what, who, sizes, msg);
        rk_check(guard_check(r0, wrong) < 0, "mismatch, %s: nothing written past the receive "
                 "buffer", mm[c].what);
        if (st == TEMPO_OK) {
            st = tempo_irecv(comm, r1, len, TEMPO_UINT8, from, mm[c].tag, NULL, &rq1);
        }
        tempo_status_t rs1 = st == TEMPO_OK ? tempo_wait(&rq1) : st;
        char why[500] = "";
        msg_t m = {from, mm[c].tag, 1, len, r1, NULL, rs1};
        int intact = msg_verify(comm, &m, pat_seed(len, from, 1), why, sizeof(why));
        rk_check(intact, "mismatch, %s: the mismatched message was consumed and the next one of "
                 "the tag arrives intact (%s)", mm[c].what, why[0] ? why : "ok");
        if (!mm[c].late) {
            ss0 = tempo_wait(&sq0);
            ss1 = tempo_wait(&sq1);
        }
        rk_check(ss0 == TEMPO_OK && ss1 == TEMPO_OK, "mismatch, %s: both sends complete with "
                 "TEMPO_OK (%s, %s)", mm[c].what, tempo_status_name(ss0), tempo_status_name(ss1));
        rk_check(tempo_barrier(comm) == TEMPO_OK, "mismatch, %s: the job is still usable (a "
                 "barrier: %s)", mm[c].what, tempo_last_error(comm));
        free(s0);
        free(s1);
        free(r0);
        free(r1);
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* kill and stop                                                                                  */
/* ---------------------------------------------------------------------------------------------- */

#define LOOP_BYTES (1u << 20)

/* Exchange LOOP_BYTES with every peer, iteration after iteration, checking each message, until a
 * call fails; the victim says "inloop" at iteration 3 (and is killed or stopped from there on).
 * Survivors report the failure, try a later send, wait for the test's go and destroy. */
static int do_loss(tempo_comm_t comm, int me, int n, const conf_arg_t *a)
{
    uint8_t *s = malloc(LOOP_BYTES), *r[MAX_RANKS] = {0};
    for (int p = 0; p < n; p++) {
        r[p] = malloc(LOOP_BYTES);
    }
    long bad = 0, iter;
    tempo_status_t st = TEMPO_OK;
    for (iter = 0; st == TEMPO_OK; iter++) {
        tempo_request_t rq[MAX_RANKS] = {0}, sq[MAX_RANKS] = {0};
        if (me == a->victim && iter == 3) {
            rk_put("inloop", "%ld", iter);
        }
        pat_fill(s, LOOP_BYTES, pat_seed(LOOP_BYTES, me, (uint64_t)iter));
        for (int p = 0; p < n && st == TEMPO_OK; p++) {
            if (p != me) {
                st = tempo_irecv(comm, r[p], LOOP_BYTES, TEMPO_UINT8, p, 1, NULL, &rq[p]);
            }
        }
        for (int p = 0; p < n && st == TEMPO_OK; p++) {
            if (p != me) {
                st = tempo_isend(comm, s, LOOP_BYTES, TEMPO_UINT8, p, 1, NULL, &sq[p]);
            }
        }
        tempo_status_t w = tempo_waitall((size_t)n, rq, NULL);
        tempo_status_t w2 = tempo_waitall((size_t)n, sq, NULL);
        if (st == TEMPO_OK) {
            st = w != TEMPO_OK ? w : w2;
        }
        for (int p = 0; p < n && st == TEMPO_OK; p++) {
            bad += p != me && pat_check(r[p], LOOP_BYTES, pat_seed(LOOP_BYTES, p,
                                                                   (uint64_t)iter)) >= 0;
        }
    }
    rk_put("failtime", "%.6f", rk_now());
    rk_put("iters", "%ld", iter);
    rk_put("badvalues", "%ld", bad);
    rk_put("msg", "%s", tempo_last_error(comm));
    rk_put("status", "%d", (int)st);
    int to = a->victim; /* a later send: to another survivor where there is one */
    for (int p = 0; p < n; p++) {
        if (p != me && p != a->victim) {
            to = p;
            break;
        }
    }
    st = tempo_send(comm, s, 16, TEMPO_UINT8, to, 2);
    rk_put("latermsg", "%s", tempo_last_error(comm));
    rk_put("later", "%d", (int)st);
    rk_wait_go();
    rk_put("destroy", "%d", (int)tempo_comm_destroy(comm));
    free(s);
    for (int p = 0; p < n; p++) {
        free(r[p]);
    }
    return -1; /* the communicator is gone */
}

static void orchestrate_loss(job_t *j, int n, const char *name, int victim, int sig)
{
    const char *v = job_wait_key(j, victim, "inloop", 60);
    TAP_OK(v != NULL, "%s: rank %d (pid %d) is inside the exchange loop", name, victim,
           (int)j->pid[victim]);
    double t0 = job_now();
    job_kill(j, victim, sig);
    char host[64], who[160];
    gethostname(host, sizeof(host));
    host[sizeof(host) - 1] = '\0';
    if (sig == SIGKILL) {
        snprintf(who, sizeof(who), "rank %d (host %s, pid %d)", victim, host, (int)j->pid[victim]);
    } else {
        snprintf(who, sizeof(who), "rank %d (host %s", victim, host);
    }
    int want = sig == SIGKILL ? TEMPO_ERR_REMOTE : TEMPO_ERR_TIMEOUT;
    double guard = sig == SIGKILL ? DETECT_GUARD_S : 60.0;
    for (int r = 0; r < n; r++) {
        if (r == victim) {
            continue;
        }
        const char *later = job_wait_key(j, r, "later", guard + 30);
        const char *ft = job_get(j, r, "failtime");
        double took = ft ? atof(ft) - t0 : -1;
        TAP_EQ_INT(job_status_of(j, r, "status"), want, "%s: survivor %d: the pending exchange "
                   "fails with %s", name, r, tempo_status_name((tempo_status_t)want));
        TAP_OK(ft && took < guard, "%s: survivor %d: no hang (%.3f s after the signal; guard "
               "%.0f s)", name, r, took, guard);
        TAP_CONTAINS(job_get(j, r, "msg"), who, "%s: survivor %d: the error names rank %d", name,
                     r, victim);
        TAP_EQ_INT(job_status_of(j, r, "badvalues"), 0, "%s: survivor %d: the %s exchanges before "
                   "were intact", name, r, job_get(j, r, "iters") ?: "?");
        TAP_OK(later && atoi(later) < 0, "%s: survivor %d: a later send fails too (%s)", name, r,
               later ? tempo_status_name((tempo_status_t)atoi(later)) : "no report");
        if (sig == SIGKILL) {
            TAP_CONTAINS(job_get(j, r, "latermsg"), who, "%s: survivor %d: naming rank %d", name,
                         r, victim);
        }
    }
    /* A stopped victim is killed (SIGKILL ends a stopped process), so that nothing is left. */
    job_kill(j, victim, SIGKILL);
    job_kill(j, victim, SIGCONT);
    for (int r = 0; r < n; r++) {
        if (r != victim) {
            job_go(j, r);
        }
    }
}

/* The sender dies with its payload exposed (the file header, "deadsend"): the victim posts its
 * send and waits to be killed; rank 0 receives only after the test killed it. */
static int do_deadsend(tempo_comm_t comm, int me, int n, const conf_arg_t *a)
{
    (void)n;
    uint8_t *buf = malloc(LOOP_BYTES);
    pat_fill(buf, LOOP_BYTES, pat_seed(LOOP_BYTES, me, 0));
    rk_check(tempo_barrier(comm) == TEMPO_OK, "deadsend: a barrier first");
    if (me == a->victim) {
        tempo_request_t rq = NULL;
        tempo_status_t st = tempo_isend(comm, buf, LOOP_BYTES, TEMPO_UINT8, 0, 1, NULL, &rq);
        (void)tempo_test(&rq); /* the header leaves */
        rk_put("posted", "%d", (int)st);
        rk_wait_go();          /* killed meanwhile */
        free(buf);
        return -1;
    }
    rk_put("waiting", "1");
    rk_wait_go();
    tempo_status_t st = TEMPO_OK;
    if (me == 0) {
        memset(buf, 0, LOOP_BYTES);
        st = tempo_recv(comm, buf, LOOP_BYTES, TEMPO_UINT8, a->victim, 1);
        rk_put("msg", "%s", tempo_last_error(comm));
        rk_put("status", "%d", (int)st);
        /* Its send may have been delivered whole before it died; then it must be intact. */
        rk_put("intact", "%d", pat_check(buf, LOOP_BYTES, pat_seed(LOOP_BYTES, a->victim, 0)) < 0);
    }
    rk_put("destroy", "%d", (int)tempo_comm_destroy(comm));
    free(buf);
    return -1; /* the communicator is gone */
}

static void orchestrate_deadsend(job_t *j, int n, const char *name, int victim)
{
    int ok = job_wait_key(j, victim, "posted", 60) != NULL;
    for (int r = 0; r < n; r++) {
        ok &= r == victim || job_wait_key(j, r, "waiting", 60) != NULL;
    }
    TAP_OK(ok, "%s: rank %d posted its send, the others wait", name, victim);
    /* Delivered while the victim lives: the payload stays in its memory (zero copy). */
    struct timespec ts = {0, 200 * 1000 * 1000};
    nanosleep(&ts, NULL);
    job_kill(j, victim, SIGKILL);
    nanosleep(&ts, NULL);
    char host[64], who[160];
    gethostname(host, sizeof(host));
    host[sizeof(host) - 1] = '\0';
    snprintf(who, sizeof(who), "rank %d (host %s, pid %d)", victim, host, (int)j->pid[victim]);
    for (int r = 0; r < n; r++) {
        if (r != victim) {
            job_go(j, r);
        }
    }
    job_wait_key(j, 0, "destroy", DETECT_GUARD_S + 30);
    int st = job_status_of(j, 0, "status");
    const char *intact = job_get(j, 0, "intact");
    if (st == TEMPO_OK) {
        /* What it had sent before it died may have arrived whole, but then intact. */
        TAP_OK(intact && atoi(intact) == 1, "%s: rank 0's receive from the dead rank succeeded "
               "(delivered before the death): the data are intact", name);
        tap_diag("%s: the send was delivered before the kill: the dead sender's memory was not "
                 "read", name);
    } else {
        TAP_EQ_INT(st, TEMPO_ERR_REMOTE,
                   "%s: rank 0's receive from the dead rank fails with TEMPO_ERR_REMOTE", name);
    }
    TAP_OK(st == TEMPO_OK || strstr(job_get(j, 0, "msg") ?: "", who),
           "%s: the error names rank %d (%s)", name, victim, job_get(j, 0, "msg") ?: "no report");
}

/* ---------------------------------------------------------------------------------------------- */
/* goodbye and abort                                                                              */
/* ---------------------------------------------------------------------------------------------- */

#define BYE_MSGS 3
static const size_t bye_len[BYE_MSGS] = {10, 100000, 0};

static int do_leave(tempo_comm_t comm, int me, int n, const conf_arg_t *a, int do_abort)
{
    int L = a->victim;
    char host[64], who[160];
    gethostname(host, sizeof(host));
    host[sizeof(host) - 1] = '\0';
    snprintf(who, sizeof(who), "rank %d (host %s", L, host);
    const char *name = do_abort ? "abort" : "goodbye";
    if (me == L) {
        uint8_t *b[BYE_MSGS];
        tempo_status_t st = TEMPO_OK;
        tempo_request_t rq = NULL;
        uint8_t dummy[4];
        for (int p = 0; p < n && !do_abort; p++) {
            for (int k = 0; p != me && k < BYE_MSGS && st == TEMPO_OK; k++) {
                b[k] = malloc(bye_len[k] + 1);
                pat_fill(b[k], bye_len[k], pat_seed(bye_len[k], me, (uint64_t)k));
                st = tempo_send(comm, b[k], bye_len[k], TEMPO_UINT8, p, 4);
                free(b[k]);
            }
        }
        if (do_abort) {
            st = tempo_irecv(comm, dummy, 4, TEMPO_UINT8, (me + 1) % n, 99, NULL, &rq);
        }
        rk_check(st == TEMPO_OK, "%s: rank %d's sends before leaving complete (%s)", name, me,
                 st == TEMPO_OK ? "ok" : tempo_last_error(comm));
        rk_put("ready", "1");
        rk_wait_go(); /* the peers wait for it now */
        if (do_abort) {
            rk_check(tempo_comm_abort(comm) == TEMPO_OK, "abort: tempo_comm_abort returns OK");
            rk_check(tempo_wait(&rq) == TEMPO_ERR_ABORTED, "abort: the aborting rank's pending "
                     "receive fails with TEMPO_ERR_ABORTED");
        }
        rk_check(tempo_comm_destroy(comm) == TEMPO_OK, "%s: rank %d destroys its communicator",
                 name, me);
        return -1;
    }
    /* A peer: the leaver's messages, one more receive that it will never satisfy, and a receive
     * on another tag. */
    uint8_t *b[BYE_MSGS + 2] = {0};
    tempo_request_t rq[BYE_MSGS + 2] = {0};
    tempo_status_t sts[BYE_MSGS + 2];
    int nr = do_abort ? 0 : BYE_MSGS;
    tempo_status_t st = TEMPO_OK;
    for (int k = 0; k < nr + 2 && st == TEMPO_OK; k++) {
        size_t len = k < nr ? bye_len[k] : 64;
        b[k] = rbuf_new(len);
        st = tempo_irecv(comm, b[k], len, TEMPO_UINT8, L, k < nr + 1 ? 4 : 5, NULL, &rq[k]);
    }
    rk_put("posted", "%d", (int)st);
    double t0 = rk_now();
    tempo_waitall((size_t)nr + 2, rq, sts);
    rk_put("elapsed", "%.3f", rk_now() - t0);
    char why[500] = "";
    int good = 0;
    for (int k = 0; k < nr; k++) {
        msg_t m = {L, 4, (uint32_t)k, bye_len[k], b[k], NULL, sts[k]};
        good += msg_verify(comm, &m, pat_seed(bye_len[k], L, (uint64_t)k), why, sizeof(why));
    }
    if (!do_abort) {
        rk_check(good == nr, "goodbye: the %d messages rank %d sent before leaving arrive intact "
                 "(%d%s%s)", nr, L, good, why[0] ? "; first wrong: " : "", why);
    }
    const char *msg = tempo_last_error(comm);
    for (int k = nr; k < nr + 2; k++) {
        rk_check(sts[k] == TEMPO_ERR_REMOTE, "%s: a receive from rank %d (tag %d) fails with "
                 "TEMPO_ERR_REMOTE (got %s)", name, L, k == nr ? 4 : 5,
                 tempo_status_name(sts[k]));
    }
    const char *says = do_abort ? "aborted" : "has left";
    rk_check(strstr(msg, who) && strstr(msg, says), "%s: the error names rank %d and says it %s "
             "(%s)", name, L, says, msg);
    uint8_t x[16] = {0};
    st = tempo_send(comm, x, 16, TEMPO_UINT8, L, 6);
    rk_check(st == TEMPO_ERR_REMOTE, "%s: a later send to rank %d fails with TEMPO_ERR_REMOTE "
             "(got %s)", name, L, tempo_status_name(st));
    if (!do_abort && n > 2) {
        /* The others are unaffected by a clean departure: they still exchange messages. */
        int other = me == (L + 1) % n ? (L + 2) % n : (L + 1) % n;
        uint8_t s[4096], r[4096 + GUARD_BYTES];
        memset(r, POISON, sizeof(r));
        pat_fill(s, sizeof(s), pat_seed(4096, me, 77));
        tempo_request_t q[2] = {NULL, NULL};
        st = tempo_irecv(comm, r, 4096, TEMPO_UINT8, other, 7, NULL, &q[0]);
        if (st == TEMPO_OK) {
            st = tempo_isend(comm, s, 4096, TEMPO_UINT8, other, 7, NULL, &q[1]);
        }
        tempo_status_t w = tempo_waitall(2, q, NULL);
        msg_t m = {other, 7, 0, 4096, r, NULL, st == TEMPO_OK ? w : st};
        why[0] = '\0';
        int intact = msg_verify(comm, &m, pat_seed(4096, other, 77), why, sizeof(why));
        rk_check(intact, "goodbye: ranks that stay still exchange messages with each other (%s)",
                 why[0] ? why : "ok");
    }
    for (int k = 0; k < nr + 2; k++) {
        free(b[k]);
    }
    return 0;
}

static int do_goodbye(tempo_comm_t comm, int me, int n, const conf_arg_t *a)
{
    return do_leave(comm, me, n, a, 0);
}

static int do_abort(tempo_comm_t comm, int me, int n, const conf_arg_t *a)
{
    return do_leave(comm, me, n, a, 1);
}

static void orchestrate_leave(job_t *j, int n, const char *name, int victim)
{
    int ok = job_wait_key(j, victim, "ready", 60) != NULL;
    for (int r = 0; r < n; r++) {
        ok &= r == victim || job_wait_key(j, r, "posted", 60) != NULL;
    }
    TAP_OK(ok, "%s: every peer waits for rank %d", name, victim);
    job_go(j, victim);
}

/* ---------------------------------------------------------------------------------------------- */
/* Cases                                                                                          */
/* ---------------------------------------------------------------------------------------------- */

typedef int (*case_fn_t)(tempo_comm_t comm, int rank, int size, const conf_arg_t *a);

typedef struct {
    const char *name;
    case_fn_t fn;
    const char *timeout; /* TEMPO_TIMEOUT of the case */
} case_t;

static const case_t cases[] = {
    {"transport", do_transport, "30s"}, {"order", do_order, "30s"},
    {"sizes", do_sizes, "30s"},         {"flood", do_flood, "30s"},
    {"partial", do_partial, "30s"},     {"mismatch", do_mismatch, "30s"},
    {"kill", do_loss, "30s"},           {"deadsend", do_deadsend, "30s"},
    {"stop", do_loss, "3s"},
    {"goodbye", do_goodbye, "10s"},     {"abort", do_abort, "10s"},
};

static int rank_main(int rank, int size, void *arg)
{
    const conf_arg_t *a = arg;
    tempo_comm_t comm = rk_init();
    if (!comm) {
        return 1;
    }
    int rc = cases[a->kase].fn(comm, rank, size, a);
    if (rc >= 0) {
        tempo_status_t st = tempo_comm_destroy(comm);
        rk_check(st == TEMPO_OK, "%s: rank %d destroys its communicator (%s)", cases[a->kase].name,
                 rank, tempo_status_name(st));
    }
    return 0;
}

/* The transport case: every rank's INIT log says which transport carries which peers ("transport
 * tcp carries the data of 2 peers: ranks 1, 2"); with expect, one of its lines contains expect. */
static void check_logs(const char *dir, int n, const char *expect)
{
    for (int r = 0; r < n; r++) {
        char path[4200], line[1024], found[2048] = "";
        snprintf(path, sizeof(path), "%s/init.%d", dir, r);
        FILE *f = fopen(path, "r");
        int hit = 0;
        while (f && fgets(line, sizeof(line), f)) {
            const char *t = strstr(line, "transport ");
            if (!t || !strstr(t, " carries the data of ")) {
                continue;
            }
            line[strcspn(line, "\n")] = '\0';
            size_t o = strlen(found);
            snprintf(found + o, sizeof(found) - o, "%s%s", o ? "; " : "", t);
            hit |= expect && strstr(t, expect) != NULL;
        }
        if (f) {
            fclose(f);
        }
        tap_diag("rank %d: %s", r, found[0] ? found : "(no \"carries the data\" line)");
        if (expect && *expect) {
            TAP_OK(hit, "transport: rank %d logs \"%s\"", r, expect);
        } else {
            TAP_OK(found[0] != 0, "transport: rank %d logs the transports it uses", r);
        }
        remove(path);
    }
    rmdir(dir);
}

static void run_case(int kase, int n, const conf_arg_t *base, const char *expect)
{
    conf_arg_t a = *base;
    a.kase = kase;
    const char *name = cases[kase].name;
    int nvict = !strcmp(name, "kill") ? 2 : 1;
    for (int v = 0; v < nvict; v++) {
        char label[64], tmo[64], lim[64], dbg[4200];
        a.victim = v == 0 ? n - 1 : 0;
        if (nvict > 1 || !strcmp(name, "stop") || !strcmp(name, "goodbye") ||
            !strcmp(name, "abort")) {
            snprintf(label, sizeof(label), "%s (rank %d)", name, a.victim);
        } else {
            snprintf(label, sizeof(label), "%s", name);
        }
        snprintf(tmo, sizeof(tmo), "TEMPO_TIMEOUT=%s", cases[kase].timeout);
        snprintf(lim, sizeof(lim), "TEMPO_UNEXPECTED_BYTES=%s", PARTIAL_LIMIT);
        const char *env[8] = {tmo, NULL};
        int ne = 1;
        char dir[] = "/tmp/conform.XXXXXX";
        if (!strcmp(name, "partial")) {
            env[ne++] = lim;
        }
        if (!strcmp(name, "deadsend")) {
            env[ne++] = "TEMPO_PROGRESS_THREAD=0"; /* nothing notices the death before the receive */
        }
        if (!strcmp(name, "transport")) {
            if (!mkdtemp(dir)) {
                TAP_OK(0, "transport: a temporary directory: %s", strerror(errno));
                continue;
            }
            snprintf(dbg, sizeof(dbg), "TEMPO_DEBUG_FILE=%s/init.%%r", dir);
            env[ne++] = "TEMPO_DEBUG=INFO";
            env[ne++] = "TEMPO_DEBUG_SUBSYS=INIT";
            env[ne++] = dbg;
        }
        job_t *j = calloc(1, sizeof(*j));
        double t0 = job_now();
        if (job_start(j, n, env, rank_main, &a) != 0) {
            TAP_OK(0, "%s: start %d ranks", label, n);
            free(j);
            continue;
        }
        if (!strcmp(name, "partial")) {
            orchestrate_partial(j, n);
        } else if (!strcmp(name, "kill")) {
            orchestrate_loss(j, n, label, a.victim, SIGKILL);
        } else if (!strcmp(name, "deadsend")) {
            orchestrate_deadsend(j, n, label, a.victim);
        } else if (!strcmp(name, "stop")) {
            orchestrate_loss(j, n, label, a.victim, SIGSTOP);
        } else if (!strcmp(name, "goodbye") || !strcmp(name, "abort")) {
            orchestrate_leave(j, n, label, a.victim);
        }
        job_finish(j, CASE_GUARD_S);
        for (int r = 0; r < n; r++) {
            char how[64];
            job_describe_exit(j, r, how, sizeof(how));
            if (r == a.victim &&
                (!strcmp(name, "kill") || !strcmp(name, "stop") || !strcmp(name, "deadsend"))) {
                TAP_OK(j->reaped[r] && WIFSIGNALED(j->status[r]) &&
                       WTERMSIG(j->status[r]) == SIGKILL, "%s: rank %d ended by SIGKILL (%s)",
                       label, r, how);
            } else {
                TAP_OK(job_exited(j, r, 0), "%s: rank %d exited 0 (%s)", label, r, how);
            }
        }
        tap_diag("%s: %d ranks, %.1f s", label, n, job_now() - t0);
        if (!strcmp(name, "transport")) {
            check_logs(dir, n, expect);
        }
        job_free(j);
        free(j);
    }
}

int main(int argc, char **argv)
{
    int n = 2;
    const char *only = NULL, *expect = NULL;
    conf_arg_t a = {0, 0, 256u << 20, 0, NULL};
    const char *seed_env = getenv("CONFORM_SEED");
    a.seed = seed_env ? strtoull(seed_env, NULL, 0) : 0;
    int seeded = seed_env != NULL;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(argv[i], "--list")) {
            for (size_t k = 0; k < NELEM(cases); k++) {
                printf("%s\n", cases[k].name);
            }
            return 0;
        } else if (!strcmp(argv[i], "-n") && v) {
            n = atoi(v);
        } else if (!strcmp(argv[i], "--only") && v) {
            only = v;
        } else if (!strcmp(argv[i], "--expect") && v) {
            expect = v;
        } else if (!strcmp(argv[i], "--seed") && v) {
            a.seed = strtoull(v, NULL, 0);
            seeded = 1;
        } else if (!strcmp(argv[i], "--max-bytes") && v) {
            a.max_bytes = (size_t)strtoull(v, NULL, 0);
        } else {
            fprintf(stderr, "usage: %s [-n RANKS (2-%d)] [--only CASE,...] [--max-bytes BYTES] "
                    "[--expect TEXT] [--seed N] [--list]\n", argv[0], MAX_RANKS);
            return 2;
        }
        i++;
    }
    if (n < 2 || n > MAX_RANKS || a.max_bytes < 4) {
        fprintf(stderr, "%s: -n must be 2 to %d and --max-bytes at least 4\n", argv[0], MAX_RANKS);
        return 2;
    }
    if (!seeded) {
        a.seed = mr_mix64((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32));
    }
    pmsgs[PARTIAL_BIG_INDEX].len = partial_big();
    tap_diag("conform: %d ranks, seed 0x%016llx (--seed replays it), FAULT_ENV='%s'", n,
             (unsigned long long)a.seed, getenv("FAULT_ENV") ? getenv("FAULT_ENV") : "");
    for (size_t k = 0; k < NELEM(cases); k++) {
        if (only) {
            size_t len = strlen(cases[k].name);
            const char *p = only;
            int hit = 0;
            while (!hit && (p = strstr(p, cases[k].name))) {
                hit = (p == only || p[-1] == ',') && (p[len] == '\0' || p[len] == ',');
                p += len;
            }
            if (!hit) {
                continue;
            }
        }
        run_case((int)k, n, &a, expect);
    }
    return tap_done();
}
