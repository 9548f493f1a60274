/*
 * trace.h — the timeline (TEMPO_TRACE=path.%r.json): one Chrome Trace Event JSON file per rank,
 * which Perfetto and chrome://tracing open directly and `tempo-trace merge` combines.
 *
 * It lives in core, not overlap/, because the engine itself records what it runs (every operation's
 * transfer span, every scheduled request's time in the queue, bytes in flight); the bucketer and the
 * caller add compute markers and per-iteration counters through the same writer.
 *
 * Layout of a file: {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}} with
 * "otherData" holding the rank, size, host, pid and the clock pair (t0_monotonic_us,
 * t0_realtime_us) that aligns ranks. ts/dur are CLOCK_MONOTONIC microseconds; pid = rank; tracks
 * (tid): 1 compute markers, 2 waits (exposed communication), 3 iteration markers, 10+k comm slot
 * k (one running operation at a time per slot, so complete events never overlap on a track). Time
 * in the scheduler queue is shown as async events (cat "queue").
 *
 * The writer keeps the file valid JSON after every flush: it buffers events and, when the buffer
 * fills or the world ends, writes them over the old trailer and appends the trailer again. A
 * process that dies loses at most the unflushed buffer.
 *
 * All functions take the world lock's protection from their callers; they do nothing when the
 * trace is off (w->trace == NULL), so callers need not test.
 */
#ifndef TEMPO_CORE_TRACE_H
#define TEMPO_CORE_TRACE_H

#include "core/world.h"

typedef struct tempo__trace tempo__trace_t;

#define TEMPO_TRACE_TID_COMPUTE 1
#define TEMPO_TRACE_TID_WAIT 2
#define TEMPO_TRACE_TID_ITER 3
#define TEMPO_TRACE_TID_SLOT0 10

/** Open the trace of w when TEMPO_TRACE is set (after the world exists, rank known). */
tempo_status_t tempo__trace_open(tempo__world_t *w);
/** Flush and close (world teardown). */
void tempo__trace_close(tempo__world_t *w);
/** Write buffered events now (keeps the file valid). */
void tempo__trace_flush(tempo__world_t *w);

/** An operation starts running / has completed: a complete ("X") event on a comm slot track, with
 *  its arguments, and the bytes-in-flight counter. Scheduled parents are not traced themselves
 *  (their chunks are). */
void tempo__trace_op_start(tempo__world_t *w, tempo__op_t *op);
void tempo__trace_op_end(tempo__world_t *w, tempo__op_t *op);
/** A scheduled request's time in the queue: begin at post, end when its first chunk starts. */
void tempo__trace_queued(tempo__world_t *w, const tempo__op_t *op, int begin);

/** A complete event on track tid from t0 to t1 (ns, monotonic); args_json is "" or the inside of a
 *  JSON object ("\"k\": 1, ..."), already escaped. */
void tempo__trace_span(tempo__world_t *w, int tid, const char *cat, const char *name, uint64_t t0,
                       uint64_t t1, const char *args_json);
/** Begin/end ("B"/"E") of a caller's marker on track tid at time t (ns). name is escaped here. */
void tempo__trace_mark(tempo__world_t *w, int tid, int begin, const char *cat, const char *name,
                       uint64_t t);
/** A counter sample ("C"): series name, one value. */
void tempo__trace_counter(tempo__world_t *w, const char *name, double value, uint64_t t);

/** Append s to out as JSON string content (without quotes), escaping as needed; returns out. */
char *tempo__json_escape(const char *s, char *out, size_t len);

#endif /* TEMPO_CORE_TRACE_H */
