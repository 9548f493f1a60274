/*
 * blame.c — when an operation times out, name the rank that actually stopped progressing, and
 * make every other rank say the same.
 *
 * Ranks wait for each other in chains: with rank 3 stopped, rank 0 waits for rank 3, rank 1 for
 * rank 0 (which sends nothing while it waits), and so on. The rank whose deadline passes first
 * must not blame the healthy rank it happens to wait for, and the others must not blame the rank
 * that gave up and left ("has left", "closed its connection"). So:
 *   1. An operation past its deadline that waits for a known peer asks every peer, in a control
 *      note (QUERY), whom it waits for, and waits a short grace (BLAME_GRACE) for the answers.
 *      A rank whose engine runs answers at once (STATE: the peer its longest-silent operation
 *      waits for, and for how long); a stopped or dead rank cannot.
 *   2. After the grace it follows the chain from the peer it waits for: through every rank that
 *      answered that it has itself been waiting for at least half a TEMPO_TIMEOUT, up to a rank
 *      that did not answer (it "stopped progressing") or one that is alive and not stuck (named,
 *      as the rank the operation waited for, and nothing more is claimed). The operation and the
 *      job fail with TEMPO_ERR_TIMEOUT and that chain in words.
 *   3. It tells every peer (GAVE_UP, with its message) before anything else: a rank that gets it
 *      fails its job with "rank X gave up: <X's message>", so it names the stopped rank and says
 *      why X is gone before X's goodbye or closed connection is seen (notes come before them on
 *      the same connection, and the engine handles notes before operations).
 * An operation whose peer moves again during the grace goes on (the answers are asked again at
 * its next deadline). Operations that do not know whom they wait for time out at once, as before.
 *
 * Also here: whether a peer's process still runs (tempo__peer_running), for the messages of a
 * connection closed or reset by a peer on the same machine.
 */
#include "config.h"

#include "core/world.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

enum { NOTE_QUERY = TEMPO_NOTE_BLAME, NOTE_STATE, NOTE_GAVE_UP };

/* A blame note on the wire (plain data); NOTE_GAVE_UP is followed by the sender's error message,
 * NUL-terminated. */
typedef struct {
    uint32_t kind;
    int32_t waits_for; /* NOTE_STATE: the world rank the sender waits for, -1: nobody */
    double silent_s;   /* NOTE_STATE: for how long that rank has been silent */
} blame_note_t;

/* How long an overdue operation waits for the answers: long enough for a busy host to schedule
 * the peers' engines, small next to TEMPO_TIMEOUT. */
static uint64_t grace_ns(const tempo__world_t *w)
{
    return (uint64_t)(TEMPO_MIN(TEMPO_MAX(0.1 * w->timeout_s, 0.5), 2.0) * 1e9);
}

/* Every blame note goes on the pair's data connection (ordered: a GAVE_UP before the sender's
 * goodbye) and, where another transport carries the data, on its control connection too: the
 * data path may be what stalled (with UCX_TLS=sm, a rank stopped in the middle of writing a peer's
 * shared-memory FIFO blocks all the peer receives, answers to QUERY included, and the peer blamed
 * a live rank: conform's stop case, n=3, about 1 run in 18 under load). Copies are harmless: a
 * second QUERY is answered again, a second STATE overwrites the first, a second GAVE_UP finds the
 * job failed already. */
static void tell(tempo__world_t *w, int peer, const void *data, size_t len)
{
    if (w->tl_note && peer != w->rank) {
        w->tl_note(w, peer, data, len);
    }
    if (w->tl_note_ctl && peer != w->rank) {
        w->tl_note_ctl(w, peer, data, len);
    }
}

static void tell_all(tempo__world_t *w, const void *data, size_t len)
{
    for (int r = 0; r < w->size; r++) {
        tell(w, r, data, len);
    }
}

int tempo__blame_overdue(tempo__op_t *op, uint64_t now)
{
    tempo__world_t *w = op->comm->world;
    if (op->wait_peer < 0 || op->wait_peer >= op->comm->size ||
        tempo__wrank(op->comm, op->wait_peer) == w->rank) {
        return 1;
    }
    if (op->asked_ns && op->asked_deadline == op->deadline) {
        return now - op->asked_ns >= grace_ns(w);
    }
    op->asked_ns = now;
    op->asked_deadline = op->deadline;
    blame_note_t m = {.kind = NOTE_QUERY, .waits_for = -1};
    tell_all(w, &m, sizeof(m));
    return 0;
}

/* Append ", <fmt>" to buf (length *n of len). */
static void append(char *buf, size_t len, size_t *n, const char *fmt, ...) TEMPO_FMT_PRINTF(4, 5);
static void append(char *buf, size_t len, size_t *n, const char *fmt, ...)
{
    if (*n >= len) {
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *n, len - *n, fmt, ap);
    va_end(ap);
    *n += k > 0 ? (size_t)k : 0;
}

void tempo__blame_timeout(tempo__op_t *op)
{
    tempo__world_t *w = op->comm->world;
    char cause[TEMPO_ERRMSG_LEN], p[128];
    size_t n = 0;
    append(cause, sizeof(cause), &n, "timed out after %.0f s (TEMPO_TIMEOUT) waiting for ",
           w->timeout_s);
    if (op->wait_peer < 0 || op->wait_peer >= op->comm->size) {
        append(cause, sizeof(cause), &n, "its peers");
    } else {
        int cur = tempo__wrank(op->comm, op->wait_peer);
        append(cause, sizeof(cause), &n, "%s", tempo__peer_desc(w, cur, p, sizeof(p)));
        /* Follow the ranks that said they are stuck themselves; hops <= size ends any cycle. */
        for (int hops = 0; op->asked_ns && cur != w->rank && hops < w->size; hops++) {
            const tempo__peer_t *pc = &w->peers[cur];
            if (pc->answer_ns < op->asked_ns) {
                append(cause, sizeof(cause), &n, ", which stopped progressing");
                break;
            }
            int next = pc->answer_waits;
            if (next < 0 || next >= w->size || pc->answer_silent_s < 0.5 * w->timeout_s) {
                break; /* alive and not stuck: it is the one this operation waited for */
            }
            if (next == w->rank) {
                append(cause, sizeof(cause), &n, ", which waits for this rank");
                break;
            }
            append(cause, sizeof(cause), &n, ", which waits for %s",
                   tempo__peer_desc(w, next, p, sizeof(p)));
            cur = next;
        }
    }
    tempo__op_fail(op, TEMPO_ERR_TIMEOUT, "%s", cause);
    /* The others hear it before this rank's program can leave the job. */
    struct {
        blame_note_t h;
        char text[TEMPO_NOTE_MAX - sizeof(blame_note_t)];
    } m = {.h = {.kind = NOTE_GAVE_UP, .waits_for = -1}};
    size_t tl = TEMPO_MIN(strlen(op->errmsg), sizeof(m.text) - 1);
    memcpy(m.text, op->errmsg, tl);
    m.text[tl] = '\0';
    if (w->failed == TEMPO_OK) {
        tell_all(w, &m, sizeof(m.h) + tl + 1);
    }
    tempo__world_fail(w, TEMPO_ERR_TIMEOUT, "%s", op->errmsg);
}

/* This rank's answer to "whom do you wait for?": the peer its longest-silent operation waits
 * for (silent since the later of its last progress and the last bytes from that peer). */
static blame_note_t state(tempo__world_t *w, uint64_t now)
{
    blame_note_t m = {.kind = NOTE_STATE, .waits_for = -1};
    uint64_t timeout_ns = (uint64_t)(w->timeout_s * 1e9), oldest = UINT64_MAX;
    tempo__list_t *pos, *tmp;
    tempo__list_for_each_safe (pos, tmp, &w->active) {
        tempo__op_t *op = tempo__container_of(pos, tempo__op_t, link);
        if (op->wait_peer < 0 || op->wait_peer >= op->comm->size) {
            continue;
        }
        int peer = tempo__wrank(op->comm, op->wait_peer);
        uint64_t since = op->deadline > timeout_ns ? op->deadline - timeout_ns : 0;
        since = TEMPO_MAX(since, w->peers[peer].heard_ns);
        if (since < oldest) {
            oldest = since;
            m.waits_for = peer;
        }
    }
    m.silent_s = m.waits_for >= 0 && now > oldest ? (double)(now - oldest) / 1e9 : 0;
    return m;
}

void tempo__blame_note(tempo__world_t *w, int src, const void *data, size_t len)
{
    blame_note_t m;
    const char *text = (const char *)data + sizeof(m);
    char desc[160];
    if (len < sizeof(m) || src < 0 || src >= w->size) {
        goto malformed;
    }
    memcpy(&m, data, sizeof(m));
    if (m.kind == NOTE_QUERY && len == sizeof(m)) {
        blame_note_t a = state(w, tempo__now_ns());
        tell(w, src, &a, sizeof(a));
    } else if (m.kind == NOTE_STATE && len == sizeof(m) && m.waits_for >= -1 &&
               m.waits_for < w->size && m.silent_s >= 0) {
        w->peers[src].answer_ns = tempo__now_ns();
        w->peers[src].answer_waits = m.waits_for;
        w->peers[src].answer_silent_s = m.silent_s;
    } else if (m.kind == NOTE_GAVE_UP && len > sizeof(m) && text[len - sizeof(m) - 1] == '\0') {
        tempo__world_fail(w, TEMPO_ERR_TIMEOUT, "%s gave up: %s",
                          tempo__peer_desc(w, src, desc, sizeof(desc)), text);
    } else {
        goto malformed;
    }
    return;
malformed:
    TEMPO_WARN(TEMPO_SUB_COLL, "ignored a malformed control note from %s",
               tempo__peer_desc(w, src, desc, sizeof(desc)));
}

int tempo__peer_running(const tempo__world_t *w, int wrank)
{
    if (wrank < 0 || wrank >= w->size ||
        w->peers[wrank].info.machine_id != w->peers[w->rank].info.machine_id) {
        return -1;
    }
    char path[64], mine[64], theirs[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/ns/pid", (int)w->peers[wrank].info.pid);
    ssize_t a = readlink("/proc/self/ns/pid", mine, sizeof(mine));
    ssize_t b = readlink(path, theirs, sizeof(theirs));
    if (b < 0) {
        return errno == ENOENT ? 0 : -1;
    }
    if (a != b || memcmp(mine, theirs, (size_t)a) != 0) {
        return -1; /* its pid means something else here */
    }
    /* A zombie, or a process on its way out (its memory is released before its sockets are
     * closed, so a peer that sees the close of a dying process reads a size of 0), is dead. */
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)w->peers[wrank].info.pid);
    FILE *f = fopen(path, "r");
    size_t got = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f) {
        fclose(f);
    }
    buf[got] = '\0';
    const char *rp = strrchr(buf, ')');
    char st = 0;
    unsigned long long vsize = 0;
    if (!rp || sscanf(rp + 1, " %c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s "
                               "%*s %*s %*s %*s %llu", &st, &vsize) != 2) {
        return got ? -1 : 0;
    }
    return st != 'Z' && st != 'X' && vsize > 0;
}
