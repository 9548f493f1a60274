/*
 * engine.c — the progress engine: operation objects, the active list, progress, waiting.
 *
 * Progress is cooperative: tempo_test/tempo_wait (and blocking calls) run it with the world lock
 * held. A wait polls; when nothing has happened for TEMPO_SPIN it sleeps in the transports' idle
 * function (1 ms at a time, woken early by socket activity and by the shm doorbell: engine_sleep),
 * and when the host has more ranks than CPUs it yields the CPU between polls so that the ranks it
 * waits for can run.
 *
 * Background progress (TEMPO_PROGRESS_THREAD, on by default): a thread per world advances the engine
 * while operations are running and no caller is inside a wait. A waiting caller drives progress
 * itself (lowest latency), so the thread sleeps on a condition variable then and whenever nothing
 * runs; public calls that return with work in flight wake it (tempo__engine_kick). While it runs it
 * polls, and after TEMPO_SPIN without events it sleeps in the transports' idle function (woken by
 * socket activity), so a computing caller does not lose a core to it.
 *
 * Deadlines measure silence, not queueing. An operation gets now + TEMPO_TIMEOUT when it starts
 * running (when it is posted, or unparked: see below), again whenever its progress function says it
 * moved (tempo__op_progressed), and its deadline follows the peer it waits for: while bytes move to
 * or from op->wait_peer (the transports stamp peers[].heard_ns; control notes do not count), the
 * deadline is at least that time + TEMPO_TIMEOUT. So a request queued behind thousands of others
 * never times out while the job progresses, and one whose peer is silent for TEMPO_TIMEOUT does. An
 * operation past its deadline fails with TEMPO_ERR_TIMEOUT naming the rank that stopped
 * progressing, after a short grace in which it asks its peers whom they wait for (core/blame.c),
 * and fails the job (its collective sequence can no longer be trusted).
 *
 * Parking keeps a pass linear in the work that can move: an operation that cannot start until
 * others finish (shared-memory collectives run one at a time per communicator) parks itself on
 * world->parked and is not polled until its owner unparks it; a parked operation has no deadline
 * (the one ahead of it has). A failure of the job unparks everything so that it fails at once.
 */
#include "config.h"

#include "core/world.h"
#include "core/cfg.h"
#include "core/flight.h"
#include "core/trace.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

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

size_t tempo__coll_bytes(int coll, tempo_dtype_t dtype, size_t count, int n)
{
    size_t b = count * tempo_dtype_size(dtype);
    switch (coll) {
    case TEMPO__COLL_REDUCE_SCATTER:
    case TEMPO__COLL_ALLGATHER:
    case TEMPO__COLL_ALLTOALL: return b * (size_t)n;
    case TEMPO__COLL_BARRIER: return 0;
    default: return b;
    }
}

tempo_status_t tempo__op_error(tempo__op_t *op, tempo_status_t st)
{
    snprintf(op->errmsg, sizeof(op->errmsg), "%s", tempo__errmsg());
    if (op->sig.valid && !op->is_parent && op->comm->failed == TEMPO_OK) {
        tempo__comm_rejected(op->comm, op->seq, op->errmsg); /* peers learn why it never ran */
    }
    op->status = st;
    return st;
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
    tempo__flight_end(op, 0); /* one that completed without the engine (nothing to move, refused) */
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

/* op's progress, once its gate (if any) lets it run. */
static tempo_status_t gated_progress(tempo__op_t *op)
{
    if (TEMPO_UNLIKELY(op->gate != NULL)) {
        int open = op->gate(op);
        if (open < 0) {
            return tempo__op_fail(op, TEMPO_ERR_SYSTEM, "%s", tempo__errmsg());
        }
        if (!open) {
            return TEMPO_INPROGRESS;
        }
        op->gate = NULL;
    }
    return op->progress(op);
}

/* now: the time (ns, monotonic) of its completion, as the caller has it. */
static void op_complete(tempo__op_t *op, tempo_status_t st, uint64_t now)
{
    tempo__list_remove(&op->link);
    op->status = st;
    tempo__flight_end(op, now);
    tempo__trace_op_end(op->comm->world, op);
    if (op->on_complete) {
        op->on_complete(op);
    }
}

void tempo__op_park(tempo__op_t *op)
{
    tempo__list_remove(&op->link);
    tempo__list_push_back(&op->comm->world->parked, &op->link);
    op->parked = 1;
    tempo__flight_queued(op, 1);
}

void tempo__op_unpark(tempo__op_t *op)
{
    tempo__world_t *w = op->comm->world;
    tempo__list_remove(&op->link);
    tempo__list_push_back(&w->active, &op->link);
    op->parked = 0;
    tempo__flight_queued(op, 0);
    op->deadline = tempo__deadline_after(w->timeout_s);
    w->op_events++;
}

/* Whether op is past its deadline at now, after extending the deadline to the last time its peer
 * was heard from + TEMPO_TIMEOUT. */
static int op_overdue(tempo__world_t *w, tempo__op_t *op, uint64_t now)
{
    if (TEMPO_LIKELY(now <= op->deadline)) {
        return 0;
    }
    if (op->wait_peer >= 0 && op->wait_peer < op->comm->size) {
        uint64_t heard = w->peers[tempo__wrank(op->comm, op->wait_peer)].heard_ns;
        uint64_t d = heard + (uint64_t)(w->timeout_s * 1e9);
        if (heard && d > op->deadline) {
            op->deadline = d;
        }
    }
    return now > op->deadline;
}

void tempo__engine_add_poller(tempo__world_t *w, tempo__poller_t *p)
{
    tempo__list_push_back(&w->pollers, &p->link);
}

void tempo__engine_remove_poller(tempo__poller_t *p)
{
    tempo__list_remove(&p->link);
    tempo__list_init(&p->link);
}

int tempo__engine_progress(tempo__world_t *w)
{
    /* The clock is read at most once per pass, and only when something needs it (a transport
     * that moved bytes stamps the peer, an operation still running checks its deadline): a pass
     * that completes a small operation reads no clock, which is most of an 8-byte all-reduce. */
    uint64_t now = 0;
    w->pass_ns = 0;
    w->npasses++;
    int events = w->tl_progress ? w->tl_progress(w) : 0;
    if (TEMPO_UNLIKELY(!tempo__list_empty(&w->notes))) {
        events += tempo__notes_handle(w);
    }
    tempo__list_t *pos, *tmp;
    if (TEMPO_UNLIKELY(w->failed != TEMPO_OK)) {
        tempo__list_for_each_safe (pos, tmp, &w->parked) {
            tempo__op_unpark(tempo__container_of(pos, tempo__op_t, link));
        }
    }
    tempo__list_for_each_safe (pos, tmp, &w->pollers) {
        tempo__poller_t *p = tempo__container_of(pos, tempo__poller_t, link);
        events += p->fn(p->arg);
    }
    events += w->op_events;
    w->op_events = 0;
    tempo__list_for_each_safe (pos, tmp, &w->active) {
        tempo__op_t *op = tempo__container_of(pos, tempo__op_t, link);
        tempo_status_t st;
        if (TEMPO_UNLIKELY(w->failed != TEMPO_OK)) {
            st = tempo__op_fail(op, w->failed, "%s", w->failmsg);
        } else if (TEMPO_UNLIKELY(op->comm->failed != TEMPO_OK)) {
            st = tempo__op_fail(op, op->comm->failed, "%s", op->comm->failmsg);
        } else {
            st = gated_progress(op);
        }
        if (st != TEMPO_INPROGRESS) {
            /* (the pass's clock: read once per pass, and again at its end for events anyway) */
            op_complete(op, st, tempo__pass_now(w));
            events++;
            continue;
        }
        events += w->op_events;
        w->op_events = 0;
        if (!now) {
            now = tempo__pass_now(w);
        }
        if (op->wait_peer >= 0 && op->sig.valid && !op->is_parent &&
            op->comm->probe_pass != w->npasses) {
            /* Only the oldest waiting operation of a communicator asks (the active list is in
             * posting order): a later call cannot be the first that differs while it waits. */
            op->comm->probe_pass = w->npasses;
            if (!op->probe_ns || now >= op->probe_ns) { /* unarmed, or due: no call otherwise */
                tempo__op_probe(op, now);
            }
        }
        if (TEMPO_UNLIKELY(!op->parked && op_overdue(w, op, now)) &&
            tempo__blame_overdue(op, now)) {
            tempo__blame_timeout(op);
            op_complete(op, TEMPO_ERR_TIMEOUT, now);
            events++;
        }
    }
    if (events) {
        w->last_event_ns = now ? now : tempo__pass_now(w);
    }
    tempo__flight_poll(w); /* a dump that a failure of this pass or a SIGUSR1 asks for */
    return events;
}

tempo_status_t tempo__op_start(tempo__op_t *op)
{
    tempo__world_t *w = op->comm->world;
    if (w->failed != TEMPO_OK) {
        op->status = tempo__op_fail(op, w->failed, "%s", w->failmsg);
        return op->status;
    }
    tempo__op_accepted(op);
    if (op->comm->failed != TEMPO_OK) {
        op->status = tempo__op_fail(op, op->comm->failed, "%s", op->comm->failmsg);
        return op->status;
    }
    uint64_t now = tempo__now_ns(); /* (one clock read: the deadline's and the recorder's) */
    op->deadline = tempo__deadline_from(now, w->timeout_s);
    tempo__list_push_back(&w->active, &op->link);
    tempo__flight_start(op, now);
    tempo__trace_op_start(w, op);
    tempo_status_t st = gated_progress(op);
    if (st != TEMPO_INPROGRESS) {
        op_complete(op, st, 0);
    }
    return st;
}

/* Sleep up to 1 ms in the transports' idle function, with the lock held on entry and on return.
 * With the shm doorbell the rank first says that it sleeps, then polls once more: data that a
 * same-host peer published before it saw the flag is found here, and data published after rings
 * the bell, which ends the sleep at once (transport/shm.c). */
static void engine_sleep(tempo__world_t *w)
{
    int dozing = w->tl_doze && w->tl_doze(w, 1);
    if (dozing && tempo__engine_progress(w)) {
        w->tl_doze(w, 0);
        return;
    }
    pthread_mutex_unlock(&w->lock);
    int why = w->tl_idle(w, 1);
    pthread_mutex_lock(&w->lock);
    if (dozing && w->tl_doze) { /* tl_doze is gone if the transports closed meanwhile */
        w->tl_doze(w, 0);
    }
    w->wakes[why]++;
}

/* One idle step after `spins` polls without an event. With more ranks than CPUs on the host, the
 * rank we wait for is often not running, so the CPU is handed over after a few polls; otherwise
 * only every 1024 polls. (Measured: yielding every 64 polls cut an 8-byte all-reduce from about
 * 100 to 10 us when other processes kept both cores busy, but on a quiet machine about one run in
 * 25 then stayed 7x slower throughout, as if both ranks shared one core and the frequent yields
 * kept the scheduler from moving one of them.) */
static void idle_step(tempo__world_t *w, unsigned spins)
{
    if (w->sleep_at_once && w->tl_idle) {
        engine_sleep(w);
        return;
    }
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
            engine_sleep(w);
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
    w->waiters++;
    while (op->status == TEMPO_INPROGRESS) {
        if (tempo__engine_progress(w)) {
            spins = 0;
            continue;
        }
        idle_step(w, ++spins);
    }
    w->waiters--;
    return op->status;
}

tempo_status_t tempo__engine_wait_until(tempo__world_t *w, int (*cond)(void *arg), void *arg,
                                        uint64_t deadline, const char *what)
{
    unsigned spins = 0;
    tempo_status_t st = TEMPO_OK;
    w->last_event_ns = tempo__now_ns();
    w->waiters++;
    while (!cond(arg)) {
        if (w->failed != TEMPO_OK) {
            st = tempo__err_quiet(w->failed, "%s: %s", what, w->failmsg);
            break;
        }
        if (tempo__engine_progress(w)) {
            spins = 0;
            continue;
        }
        if ((spins & 63) == 0 && tempo__now_ns() > deadline) {
            st = tempo__err(TEMPO_ERR_TIMEOUT, "%s timed out after %.0f s", what, w->timeout_s);
            break;
        }
        idle_step(w, ++spins);
    }
    w->waiters--;
    return st;
}

/* ---------------------------------------------------------------------------------------------- */
/* Background progress                                                                            */
/* ---------------------------------------------------------------------------------------------- */

static int engine_busy(tempo__world_t *w)
{
    if (!tempo__list_empty(&w->active)) {
        return 1;
    }
    tempo__list_t *pos, *tmp;
    tempo__list_for_each_safe (pos, tmp, &w->pollers) {
        if (tempo__container_of(pos, tempo__poller_t, link)->busy) {
            return 1;
        }
    }
    return 0;
}

void tempo__engine_kick(tempo__world_t *w)
{
    if (w->thread_on && w->thread_sleeping && w->waiters == 0 && engine_busy(w)) {
        pthread_cond_signal(&w->cv);
    }
}

static void *progress_main(void *arg)
{
    tempo__world_t *w = arg;
    unsigned spins = 0;
    /* After a pass without events the thread sleeps in the transports' idle function, which
     * sockets wake: its caller is computing, and every poll costs the caller CPU time (measured
     * with 4 ranks on 2 cores over shaped links: a 50 us spin after each event took about a tenth
     * of the machine and slowed the overlapped compute visibly). Shared memory has no file
     * descriptor to wake it, so with local peers it polls a little before sleeping 1 ms. */
    uint64_t spin_ns = w->nlocal > 1 ? (uint64_t)(TEMPO_MIN(tempo__cfg.spin_s, 20e-6) * 1e9) : 0;
    if (tempo__cfg.progress_nice) {
        /* Run before the caller's compute when both want a CPU, so that a transfer step is not
         * delayed by a scheduler time slice. Lowering a nice value needs privilege, which only
         * this call can tell: a refusal is a warning (the setting is not in effect), not an error
         * that would stop a job whose configuration moved to a machine without the privilege. */
        if (setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), tempo__cfg.progress_nice) != 0) {
            TEMPO_WARN(TEMPO_SUB_INIT,
                       "TEMPO_PROGRESS_NICE=%d is not in effect: setting it was not permitted "
                       "(%s); the progress thread keeps its nice value",
                       tempo__cfg.progress_nice, strerror(errno));
        }
    }
    pthread_mutex_lock(&w->lock);
    while (!w->thread_stop) {
        if (w->waiters > 0 || !engine_busy(w)) {
            w->thread_sleeping = 1;
            if (tempo__cfg.flight[0]) {
                /* Wake 5 times a second to write a flight record that SIGUSR1 asked for while
                 * the caller is outside tempo (a signal handler cannot signal a condition
                 * variable): the file of a rank stuck in its own code then says so. */
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_nsec += 200000000L;
                if (ts.tv_nsec >= 1000000000L) {
                    ts.tv_sec++;
                    ts.tv_nsec -= 1000000000L;
                }
                pthread_cond_timedwait(&w->cv, &w->lock, &ts);
                tempo__flight_poll(w);
            } else {
                pthread_cond_wait(&w->cv, &w->lock);
            }
            w->thread_sleeping = 0;
            spins = 0;
            w->last_event_ns = tempo__now_ns();
            continue;
        }
        if (tempo__engine_progress(w)) {
            spins = 0;
            continue;
        }
        spins++;
        uint64_t now = tempo__now_ns();
        if (w->tl_idle && now - w->last_event_ns >= spin_ns) {
            engine_sleep(w);
        } else if (w->oversubscribed || (spins & 15) == 0) {
            pthread_mutex_unlock(&w->lock);
            sched_yield();
            pthread_mutex_lock(&w->lock);
        }
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

tempo_status_t tempo__engine_thread_start(tempo__world_t *w)
{
    if (!tempo__cfg.progress_thread || w->thread_on) {
        return TEMPO_OK;
    }
    int rc = pthread_create(&w->thread, NULL, progress_main, w);
    if (rc != 0) {
        return tempo__err(TEMPO_ERR_SYSTEM, "cannot start the progress thread: %s", strerror(rc));
    }
    w->thread_on = 1;
    return TEMPO_OK;
}

void tempo__engine_thread_stop(tempo__world_t *w)
{
    if (!w->thread_on) {
        return;
    }
    pthread_mutex_lock(&w->lock);
    w->thread_stop = 1;
    pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    w->thread_on = 0;
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
