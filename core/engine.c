/*
 * engine.c — the progress engine: operation objects, the active list, progress, waiting.
 *
 * Progress is cooperative: tempo_test/tempo_wait (and blocking calls) run it with the world lock
 * held. A wait polls; when nothing has happened for TEMPO_SPIN it sleeps in the transports' idle
 * function (1 ms at a time, woken early by socket activity), and when the host has more ranks than
 * CPUs it yields the CPU between polls so that the ranks it waits for can run.
 *
 * Deadlines: every operation gets now + TEMPO_TIMEOUT when it starts. An operation past its
 * deadline fails with TEMPO_ERR_TIMEOUT naming the rank it waits for, and fails the job (its
 * collective sequence can no longer be trusted).
 */
#include "config.h"

#include "core/world.h"
#include "core/cfg.h"

#include <sched.h>
#include <stdio.h>

static const char *const coll_names[TEMPO__COLL_COUNT] = {
    "allreduce", "reduce_scatter", "allgather", "broadcast", "reduce",
    "alltoall",  "barrier",        "send",      "recv",
};

const char *tempo__coll_name(int coll)
{
    return (coll >= 0 && coll < TEMPO__COLL_COUNT) ? coll_names[coll] : "operation";
}

const char *tempo__op_describe(const tempo__op_t *op, char *buf, size_t len)
{
    switch (op->coll) {
    case TEMPO__COLL_BARRIER: snprintf(buf, len, "barrier #%u", op->seq); break;
    case TEMPO__COLL_SEND:
    case TEMPO__COLL_RECV:
        snprintf(buf, len, "%s of %zu x %s %s comm rank %d (tag %u)", coll_names[op->coll],
                 op->count, tempo_dtype_name(op->dtype),
                 op->coll == TEMPO__COLL_SEND ? "to" : "from", op->root, op->ptag);
        break;
    case TEMPO__COLL_ALLGATHER:
    case TEMPO__COLL_ALLTOALL:
    case TEMPO__COLL_BROADCAST:
        snprintf(buf, len, "%s #%u (%zu x %s, %s)", coll_names[op->coll], op->seq, op->count,
                 tempo_dtype_name(op->dtype), op->algo ? op->algo : "-");
        break;
    default:
        snprintf(buf, len, "%s #%u (%zu x %s %s, %s)", tempo__coll_name(op->coll), op->seq,
                 op->count, tempo_dtype_name(op->dtype), tempo_op_name(op->redop),
                 op->algo ? op->algo : "-");
        break;
    }
    return buf;
}

tempo__op_t *tempo__op_new(struct tempo_comm *comm, int coll)
{
    tempo__world_t *w = comm->world;
    tempo__op_t *op;
    if (!tempo__list_empty(&w->free_ops)) {
        tempo__list_t *e = w->free_ops.next;
        tempo__list_remove(e);
        op = tempo__container_of(e, tempo__op_t, link);
    } else {
        op = tempo__malloc(sizeof(*op), "operation");
        if (!op) {
            return NULL;
        }
    }
    memset(op, 0, offsetof(tempo__op_t, errmsg));
    op->errmsg[0] = '\0';
    tempo__list_init(&op->link);
    op->comm = comm;
    op->coll = coll;
    op->status = TEMPO_INPROGRESS;
    op->wait_peer = -1;
    tempo__list_push_back(&comm->ops, &op->clink);
    return op;
}

void tempo__op_release(tempo__op_t *op)
{
    tempo__world_t *w = op->comm->world;
    if (op->status == TEMPO_INPROGRESS) {
        tempo__list_remove(&op->link);
    }
    if (op->cleanup) {
        op->cleanup(op);
        op->cleanup = NULL;
    }
    tempo__list_remove(&op->clink);
    tempo__list_push_back(&w->free_ops, &op->link);
}

tempo_status_t tempo__op_fail(tempo__op_t *op, tempo_status_t st, const char *fmt, ...)
{
    char desc[192], cause[TEMPO_ERRMSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cause, sizeof(cause), fmt, ap);
    va_end(ap);
    snprintf(op->errmsg, sizeof(op->errmsg), "%s: %s", tempo__op_describe(op, desc, sizeof(desc)),
             cause);
    if (st == TEMPO_ERR_INVALID) {
        TEMPO_INFO(TEMPO_SUB_COLL, "%s", op->errmsg);
    } else {
        TEMPO_DEBUG(TEMPO_SUB_COLL, "%s -> %s", op->errmsg, tempo_status_name(st));
    }
    return st;
}

static void op_complete(tempo__op_t *op, tempo_status_t st)
{
    tempo__list_remove(&op->link);
    op->status = st;
}

static void op_timeout(tempo__op_t *op)
{
    tempo__world_t *w = op->comm->world;
    char who[160] = "its peers";
    if (op->wait_peer >= 0 && op->wait_peer < op->comm->size) {
        char p[128];
        snprintf(who, sizeof(who), "%s",
                 tempo__peer_desc(w, tempo__wrank(op->comm, op->wait_peer), p, sizeof(p)));
    }
    tempo__op_fail(op, TEMPO_ERR_TIMEOUT, "timed out after %.0f s (TEMPO_TIMEOUT) waiting for %s",
                   w->timeout_s, who);
    tempo__world_fail(w, TEMPO_ERR_TIMEOUT, "%s", op->errmsg);
}

int tempo__engine_progress(tempo__world_t *w)
{
    int events = w->tl_progress ? w->tl_progress(w) : 0;
    events += w->op_events;
    w->op_events = 0;
    uint64_t now = 0;
    tempo__list_t *pos, *tmp;
    tempo__list_for_each_safe (pos, tmp, &w->active) {
        tempo__op_t *op = tempo__container_of(pos, tempo__op_t, link);
        tempo_status_t st;
        if (TEMPO_UNLIKELY(w->failed != TEMPO_OK)) {
            st = tempo__op_fail(op, w->failed, "%s", w->failmsg);
        } else {
            st = op->progress(op);
        }
        if (st != TEMPO_INPROGRESS) {
            op_complete(op, st);
            events++;
            continue;
        }
        events += w->op_events;
        w->op_events = 0;
        if (!now) {
            now = tempo__now_ns();
        }
        if (TEMPO_UNLIKELY(now > op->deadline)) {
            op_timeout(op);
            op_complete(op, TEMPO_ERR_TIMEOUT);
            events++;
        }
    }
    if (events) {
        w->last_event_ns = now ? now : tempo__now_ns();
    }
    return events;
}

tempo_status_t tempo__op_start(tempo__op_t *op)
{
    tempo__world_t *w = op->comm->world;
    if (w->failed != TEMPO_OK) {
        op->status = tempo__op_fail(op, w->failed, "%s", w->failmsg);
        return op->status;
    }
    op->deadline = tempo__deadline_after(w->timeout_s);
    tempo__list_push_back(&w->active, &op->link);
    tempo_status_t st = op->progress(op);
    if (st != TEMPO_INPROGRESS) {
        op_complete(op, st);
    }
    return st;
}

/* One idle step after `spins` polls without an event. With more ranks than CPUs on the host, the
 * rank we wait for is often not running, so the CPU is handed over after a few polls. */
static void idle_step(tempo__world_t *w, unsigned spins)
{
    if (w->oversubscribed ? spins < 4 : spins < 64) {
        return;
    }
    if (w->oversubscribed || (spins & 1023) == 0) {
        pthread_mutex_unlock(&w->lock);
        sched_yield();
        pthread_mutex_lock(&w->lock);
    }
    if ((spins & 63) == 0) {
        uint64_t now = tempo__now_ns();
        if (w->last_event_ns && now - w->last_event_ns > (uint64_t)(tempo__cfg.spin_s * 1e9) &&
            w->tl_idle) {
            pthread_mutex_unlock(&w->lock);
            w->tl_idle(w, 1);
            pthread_mutex_lock(&w->lock);
        } else if (!w->last_event_ns) {
            w->last_event_ns = now;
        }
    }
}

tempo_status_t tempo__op_wait_locked(tempo__op_t *op)
{
    tempo__world_t *w = op->comm->world;
    unsigned spins = 0;
    w->last_event_ns = tempo__now_ns();
    while (op->status == TEMPO_INPROGRESS) {
        if (tempo__engine_progress(w)) {
            spins = 0;
            continue;
        }
        idle_step(w, ++spins);
    }
    return op->status;
}

tempo_status_t tempo__engine_wait_until(tempo__world_t *w, int (*cond)(void *arg), void *arg,
                                        uint64_t deadline, const char *what)
{
    unsigned spins = 0;
    w->last_event_ns = tempo__now_ns();
    while (!cond(arg)) {
        if (w->failed != TEMPO_OK) {
            return tempo__err_quiet(w->failed, "%s: %s", what, w->failmsg);
        }
        if (tempo__engine_progress(w)) {
            spins = 0;
            continue;
        }
        if ((spins & 63) == 0 && tempo__now_ns() > deadline) {
            return tempo__err(TEMPO_ERR_TIMEOUT, "%s timed out after %.0f s", what, w->timeout_s);
        }
        idle_step(w, ++spins);
    }
    return TEMPO_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Scratch buffers                                                                                */
/* ---------------------------------------------------------------------------------------------- */

void *tempo__scratch_get(tempo__world_t *w, size_t bytes, size_t *cap_p)
{
    int best = -1;
    for (int i = 0; i < (int)TEMPO_ARRAY_SIZE(w->scratch); i++) {
        if (w->scratch[i].p && w->scratch[i].bytes >= bytes &&
            (best < 0 || w->scratch[i].bytes < w->scratch[best].bytes)) {
            best = i;
        }
    }
    if (best >= 0) {
        void *p = w->scratch[best].p;
        *cap_p = w->scratch[best].bytes;
        w->scratch[best].p = NULL;
        return p;
    }
    void *p = tempo__malloc_aligned(bytes, "collective scratch buffer");
    if (p) {
        *cap_p = bytes;
    }
    return p;
}

void tempo__scratch_put(tempo__world_t *w, void *p, size_t cap)
{
    if (!p) {
        return;
    }
    /* Keep it in a free slot, else in place of the smallest cached buffer if it is larger. */
    int slot = -1;
    for (int i = 0; i < (int)TEMPO_ARRAY_SIZE(w->scratch); i++) {
        if (!w->scratch[i].p) {
            slot = i;
            break;
        }
        if (slot < 0 || w->scratch[i].bytes < w->scratch[slot].bytes) {
            slot = i;
        }
    }
    if (w->scratch[slot].p) {
        if (w->scratch[slot].bytes >= cap) {
            tempo__free_aligned(p);
            return;
        }
        tempo__free_aligned(w->scratch[slot].p);
    }
    w->scratch[slot].p = p;
    w->scratch[slot].bytes = cap;
}
