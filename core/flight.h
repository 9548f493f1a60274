/*
 * flight.h — the flight recorder: every communicator keeps its last TEMPO_FLIGHT_RECORDER_SIZE
 * operations in a fixed ring, and a rank writes them as JSON (TEMPO_FLIGHT_RECORDER=path.%r.json)
 * when the job or a communicator fails (once per world, the first failure), on SIGUSR1, and when
 * its last communicator is destroyed if TEMPO_FLIGHT_RECORDER_AT_EXIT=1. `tempo-trace flight`
 * lines the ranks' files up by sequence number and names the rank that is behind.
 *
 * Recording is on by default (the ring, not the dump): the ring is allocated with the
 * communicator (TEMPO_FLIGHT_RECORDER_SIZE entries rounded up to a power of two, about 128 bytes
 * each; 0 turns it off) and an entry is plain data written in place, so an operation costs a
 * dozen stores when it is posted and a few when it starts and ends, never an allocation, and no
 * clock read of its own in the common case (the start shares the
 * deadline's, the end the progress pass's). Hooks: tempo__flight_post (collectives/api.c, when a
 * call gets its sequence number; a scheduled chunk when it starts), tempo__flight_start / _end /
 * _queued (engine.c).
 *
 * What the ring is not: the record of waits (the peers an operation still waits for are read from
 * the live operations at dump time, as core/blame.c knows them), nor a log of every byte. The
 * dump is written by the progress engine, which runs inside tempo calls and in the progress thread
 * (while operations run; with TEMPO_FLIGHT_RECORDER set it also wakes every 200 ms to serve a
 * SIGUSR1). So a rank stuck outside the library writes no file on the job's failure (it has not
 * seen it) until it calls tempo again, and on SIGUSR1 only through the progress thread; its peers'
 * files name it.
 *
 * Invariants: every function runs under the world lock; an entry belongs to the operation whose
 * op->flight_id equals its id (the ring may have reused the slot since, then the operation is not
 * updated any more); entries hold no pointers into memory that can go away (algorithm names are
 * static strings; the compressor's spec is copied).
 */
#ifndef TEMPO_CORE_FLIGHT_H
#define TEMPO_CORE_FLIGHT_H

#include <signal.h>

#include "core/world.h"

/** An entry's state. */
enum { TEMPO__FL_EMPTY = 0, TEMPO__FL_QUEUED, TEMPO__FL_RUNNING, TEMPO__FL_DONE, TEMPO__FL_FAILED };

/** One recorded operation (plain data). */
typedef struct tempo__flight_ent {
    uint64_t id;                   /* record number on its communicator, 1, 2, ...; 0: empty slot */
    uint64_t count;                /* the call's count (a chunk: its own) */
    uint64_t tag;                  /* scheduled: the caller's tag */
    uint64_t t_post_ns;            /* ns, monotonic: posted (a chunk: its request) */
    uint64_t t_start_ns, t_end_ns; /* ns, monotonic; 0: not yet */
    const char *algo;              /* static algorithm name, or NULL */
    uint32_t seq; /* the communicator's sequence number (TEMPO_SEQ_SCHED bit: scheduled) */
    uint32_t occ; /* scheduled: occurrence of the tag */
    uint32_t chunk, nchunks; /* scheduled: this chunk of the request's */
    int32_t priority;
    int32_t root;   /* root of broadcast/reduce, peer of send/recv (comm rank); else -1 */
    int32_t status; /* tempo_status_t when done or failed */
    int32_t waited; /* failed: the world rank it waited for then, -1: none known */
    uint8_t coll, dtype, redop, state;
    uint8_t lane; /* 0 program order, 1 scheduled chunk, 2 point-to-point (no sequence number) */
    char compressor[35]; /* the compressor's spec (cut), "" when none */
} tempo__flight_ent_t;

typedef struct tempo__flight {
    uint64_t nrec; /* records so far (the newest entry's id) */
    uint32_t mask; /* capacity - 1 (a power of two) */
    tempo__flight_ent_t ent[];
} tempo__flight_t;

/** SIGUSR1s received (the handler only counts; the engine writes the file). */
extern volatile sig_atomic_t tempo__flight_signals;

/** The ring of a new communicator, NULL when TEMPO_FLIGHT_RECORDER_SIZE is 0 (or out of memory:
 *  the communicator works without one). Freed with tempo__free. */
tempo__flight_t *tempo__flight_new(void);
/** Record op (posted, or a chunk that starts): a new entry, QUEUED. Lock held. */
void tempo__flight_post(tempo__op_t *op);

/** op's entry, NULL when it has none (not recorded, recorder off, or its slot reused). */
static inline tempo__flight_ent_t *tempo__flight_ent(const tempo__op_t *op)
{
    tempo__flight_t *f = op->comm->flight;
    if (TEMPO_UNLIKELY(!f || !op->flight_id)) {
        return NULL;
    }
    tempo__flight_ent_t *e = &f->ent[(op->flight_id - 1) & f->mask];
    return e->id == op->flight_id ? e : NULL;
}

/** op starts running at now (engine): a chunk or an internal operation is recorded here. */
static inline void tempo__flight_start(tempo__op_t *op, uint64_t now)
{
    if (!op->flight_id && !op->is_parent) {
        tempo__flight_post(op);
    }
    tempo__flight_ent_t *e = tempo__flight_ent(op);
    if (e) {
        e->state = TEMPO__FL_RUNNING;
        e->algo = op->algo;
        e->t_start_ns = now;
        if (!e->t_post_ns) {
            e->t_post_ns = now; /* (a call posted and started at once: one clock read) */
        }
    }
}

/** op waits for its turn (parked: QUEUED) or runs again (unparked: RUNNING). */
static inline void tempo__flight_queued(tempo__op_t *op, int queued)
{
    tempo__flight_ent_t *e = tempo__flight_ent(op);
    if (e) {
        e->state = queued ? TEMPO__FL_QUEUED : TEMPO__FL_RUNNING;
    }
}

/** op completed at now (engine; 0: read the clock), or is released (any operation that completed
 *  without the engine: a call with nothing to move, one refused when posted). Nothing when
 *  already ended. */
static inline void tempo__flight_end(tempo__op_t *op, uint64_t now)
{
    tempo__flight_ent_t *e = tempo__flight_ent(op);
    if (e && e->state != TEMPO__FL_DONE && e->state != TEMPO__FL_FAILED &&
        op->status != TEMPO_INPROGRESS) {
        e->state = op->status < 0 ? TEMPO__FL_FAILED : TEMPO__FL_DONE;
        e->status = op->status;
        e->waited = op->status < 0 && op->wait_peer >= 0 && op->wait_peer < op->comm->size
                        ? tempo__wrank(op->comm, op->wait_peer)
                        : -1;
        e->algo = op->algo;
        e->t_end_ns = now ? now : tempo__now_ns();
        if (!e->t_post_ns) {
            e->t_post_ns = e->t_end_ns; /* never started (refused, or nothing to move) */
        }
    }
}

/** The job or a communicator failed with st (first failure of the world: a dump is due). */
void tempo__flight_failed(tempo__world_t *w, tempo_status_t st);
/** Write the file that a failure or a signal asked for (tempo__flight_poll). */
void tempo__flight_service(tempo__world_t *w);
/** Engine, at the end of a progress pass: write the file if a failure or a signal asks for it. */
static inline void tempo__flight_poll(tempo__world_t *w)
{
    if (TEMPO_UNLIKELY(w->flight_due || w->flight_signals_seen != tempo__flight_signals)) {
        tempo__flight_service(w);
    }
}
/** The last communicator of w is being destroyed: write a due dump, or the exit dump. */
void tempo__flight_last(tempo__world_t *w);
/** Install the SIGUSR1 handler when TEMPO_FLIGHT_RECORDER is set (world creation). */
void tempo__flight_init(tempo__world_t *w);
/** Write w's flight record to path now (tests, tempo-info); reason goes into the file. Lock held.
 *  Returns TEMPO_OK or TEMPO_ERR_SYSTEM with the cause. */
tempo_status_t tempo__flight_write(tempo__world_t *w, const char *path, const char *reason);

#endif /* TEMPO_CORE_FLIGHT_H */
