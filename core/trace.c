/*
 * trace.c — the TEMPO_TRACE writer (see trace.h for the file layout and tracks).
 *
 * Events are formatted into a memory buffer; a flush writes the buffer at the position of the
 * previous trailer and then writes the trailer again, so the file on disk is always a complete JSON
 * object. Slots: a running operation takes the lowest free comm slot track and gives it back when
 * it completes; the number of slots in use is never larger than the operations running at once.
 */
#include "config.h"

#include "core/trace.h"
#include "core/cfg.h"
#include "core/dtype.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#define FLUSH_BYTES (256 * 1024)
#define MAX_SLOTS 256

struct tempo__trace {
    FILE *f;
    char path[512];
    long trailer_pos; /* where the trailer starts in the file */
    int nevents;      /* events written or buffered so far */
    char *buf;
    size_t len, cap;
    uint8_t slot_used[MAX_SLOTS];
    uint8_t slot_named[MAX_SLOTS]; /* its thread_name event was written */
    double inflight; /* bytes of running traced operations */
    double t0_mono_us, t0_real_us;
    int rank, size;
};

char *tempo__json_escape(const char *s, char *out, size_t len)
{
    size_t o = 0;
    for (; s && *s && o + 7 < len; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            out[o++] = '\\';
            out[o++] = (char)c;
        } else if (c < 0x20) {
            o += (size_t)snprintf(out + o, len - o, "\\u%04x", c);
        } else {
            out[o++] = (char)c;
        }
    }
    out[o] = '\0';
    return out;
}

static double us(uint64_t ns)
{
    return (double)ns / 1000.0;
}

/* Append one event (printf-style, without the separator). */
static void emit(tempo__trace_t *t, const char *fmt, ...) TEMPO_FMT_PRINTF(2, 3);
static void emit(tempo__trace_t *t, const char *fmt, ...)
{
    for (;;) {
        size_t room = t->cap - t->len;
        va_list ap;
        va_start(ap, fmt);
        /* ",\n" separator unless this is the first event of the file. */
        int sep = t->nevents ? snprintf(t->buf + t->len, room, ",\n") : 0;
        int k = sep >= 0 && (size_t)sep < room
                    ? vsnprintf(t->buf + t->len + (size_t)sep, room - (size_t)sep, fmt, ap)
                    : -1;
        va_end(ap);
        if (k >= 0 && (size_t)(sep + k) < room) {
            t->len += (size_t)(sep + k);
            t->nevents++;
            return;
        }
        size_t cap = t->cap * 2 + (k > 0 ? (size_t)k : 0) + 64;
        char *nb = tempo__realloc(t->buf, cap, "trace buffer");
        if (!nb) {
            return; /* the event is dropped; the file stays valid */
        }
        t->buf = nb;
        t->cap = cap;
    }
}

static void write_trailer(tempo__trace_t *t)
{
    char host[160];
    tempo__json_escape(tempo__hostname(), host, sizeof(host));
    fprintf(t->f,
            "\n],\n\"displayTimeUnit\": \"ms\",\n\"otherData\": {\"tool\": \"tempo\", \"version\": "
            "\"%s\", \"rank\": %d, \"size\": %d, \"host\": \"%s\", \"pid\": %d, \"clock\": "
            "\"monotonic\", \"t0_monotonic_us\": %.3f, \"t0_realtime_us\": %.3f}}\n",
            PACKAGE_VERSION, t->rank, t->size, host, (int)getpid(), t->t0_mono_us, t->t0_real_us);
}

void tempo__trace_flush(tempo__world_t *w)
{
    tempo__trace_t *t = w->trace;
    if (!t || !t->f) {
        return;
    }
    if (fseek(t->f, t->trailer_pos, SEEK_SET) == 0) {
        if (t->len) {
            fwrite(t->buf, 1, t->len, t->f);
        }
        t->trailer_pos = ftell(t->f);
        write_trailer(t);
        fflush(t->f);
    }
    t->len = 0;
}

static void maybe_flush(tempo__world_t *w)
{
    if (w->trace->len >= FLUSH_BYTES) {
        tempo__trace_flush(w);
    }
}

tempo_status_t tempo__trace_open(tempo__world_t *w)
{
    if (!tempo__cfg.trace[0] || w->trace) {
        return TEMPO_OK;
    }
    tempo__trace_t *t = tempo__calloc(1, sizeof(*t), "trace");
    if (!t) {
        return TEMPO_ERR_NOMEM;
    }
    if (tempo__expand_path_unique(tempo__cfg.trace, w->rank, w->size, t->path, sizeof(t->path)) &&
        w->rank == 0) {
        TEMPO_WARN(TEMPO_SUB_INIT,
                   "TEMPO_TRACE '%s' has no %%r: %d ranks would write one file; each rank writes "
                   "its own instead (rank 0: '%s'). Merge them with tempo-trace merge",
                   tempo__cfg.trace, w->size, t->path);
    }
    t->f = tempo__fopen_write(t->path, 1, 0);
    if (!t->f) {
        tempo_status_t st = tempo__err(TEMPO_ERR_SYSTEM, "TEMPO_TRACE: cannot create '%s': %s",
                                       t->path, strerror(errno));
        tempo__free(t);
        return st;
    }
    t->rank = w->rank;
    t->size = w->size;
    tempo__clock_pair(&t->t0_mono_us, &t->t0_real_us);
    fprintf(t->f, "{\"traceEvents\": [\n");
    t->trailer_pos = ftell(t->f);
    w->trace = t;

    char host[160];
    tempo__json_escape(tempo__hostname(), host, sizeof(host));
    emit(t,
         "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"args\": "
         "{\"name\": \"rank %d (host %s, pid %d)\"}}",
         w->rank, w->rank, host, (int)getpid());
    emit(t,
         "{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"args\": "
         "{\"sort_index\": %d}}",
         w->rank, w->rank);
    static const struct {
        int tid;
        const char *name;
    } tracks[] = {{TEMPO_TRACE_TID_COMPUTE, "compute (caller markers)"},
                  {TEMPO_TRACE_TID_WAIT, "waits (exposed communication)"},
                  {TEMPO_TRACE_TID_ITER, "iterations"}};
    for (size_t i = 0; i < TEMPO_ARRAY_SIZE(tracks); i++) {
        emit(t,
             "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"args\": "
             "{\"name\": \"%s\"}}",
             w->rank, tracks[i].tid, tracks[i].name);
        emit(t,
             "{\"name\": \"thread_sort_index\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"args\": "
             "{\"sort_index\": %d}}",
             w->rank, tracks[i].tid, tracks[i].tid);
    }
    tempo__trace_flush(w);
    TEMPO_INFO(TEMPO_SUB_INIT, "trace: writing %s", t->path);
    return TEMPO_OK;
}

void tempo__trace_close(tempo__world_t *w)
{
    tempo__trace_t *t = w->trace;
    if (!t) {
        return;
    }
    tempo__trace_flush(w);
    fclose(t->f);
    tempo__free(t->buf);
    tempo__free(t);
    w->trace = NULL;
}

static double op_bytes(const tempo__op_t *op)
{
    return (double)tempo__coll_bytes(op->coll, op->dtype, op->count, op->comm->size);
}

void tempo__trace_op_start(tempo__world_t *w, tempo__op_t *op)
{
    tempo__trace_t *t = w->trace;
    op->trace_slot = -1;
    if (!t || op->is_parent) {
        return;
    }
    op->t_start_ns = tempo__now_ns();
    int slot = 0;
    while (slot < MAX_SLOTS - 1 && t->slot_used[slot]) {
        slot++;
    }
    t->slot_used[slot] = 1;
    if (!t->slot_named[slot]) {
        t->slot_named[slot] = 1;
        emit(t,
             "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"args\": "
             "{\"name\": \"comm slot %d\"}}",
             w->rank, TEMPO_TRACE_TID_SLOT0 + slot, slot);
    }
    op->trace_slot = slot;
    t->inflight += op_bytes(op);
    tempo__trace_counter(w, "bytes in flight", t->inflight, op->t_start_ns);
}

void tempo__trace_op_end(tempo__world_t *w, tempo__op_t *op)
{
    tempo__trace_t *t = w->trace;
    if (!t || op->trace_slot < 0) {
        return;
    }
    uint64_t now = tempo__now_ns();
    char name[160], esc[200], desc[192], desc_esc[240];
    const tempo__op_t *req = op->parent ? op->parent : op;
    if (op->name && op->name[0]) {
        snprintf(name, sizeof(name), "%s", op->name);
    } else if (req->is_parent) {
        snprintf(name, sizeof(name), "%s tag %llu", tempo__coll_name(op->coll),
                 (unsigned long long)op->user_tag);
    } else {
        snprintf(name, sizeof(name), "%s", tempo__coll_name(op->coll));
    }
    if (op->nchunks > 1) {
        size_t l = strlen(name);
        snprintf(name + l, sizeof(name) - l, " [%u/%u]", op->chunk + 1, op->nchunks);
    }
    tempo__json_escape(name, esc, sizeof(esc));
    tempo__json_escape(tempo__op_describe(op, desc, sizeof(desc)), desc_esc, sizeof(desc_esc));
    emit(t,
         "{\"name\": \"%s\", \"cat\": \"comm\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": "
         "%.3f, \"dur\": %.3f, \"args\": {\"op\": \"%s\", \"collective\": \"%s\", \"algorithm\": "
         "\"%s\", \"bytes\": %.0f, \"tag\": %llu, \"occurrence\": %u, \"priority\": %d, "
         "\"chunk\": %u, \"chunks\": %u, \"scheduled\": %d, \"status\": \"%s\"}}",
         esc, w->rank, TEMPO_TRACE_TID_SLOT0 + op->trace_slot, us(op->t_start_ns),
         us(now - op->t_start_ns), desc_esc, tempo__coll_name(op->coll), op->algo ? op->algo : "-",
         op_bytes(op), (unsigned long long)op->user_tag, op->occ, op->priority, op->chunk,
         op->nchunks ? op->nchunks : 1, op->lane, tempo_status_name(op->status));
    t->slot_used[op->trace_slot] = 0;
    op->trace_slot = -1;
    t->inflight -= op_bytes(op);
    if (t->inflight < 0.5) {
        t->inflight = 0;
    }
    tempo__trace_counter(w, "bytes in flight", t->inflight, now);
    maybe_flush(w);
}

void tempo__trace_queued(tempo__world_t *w, const tempo__op_t *op, int begin)
{
    tempo__trace_t *t = w->trace;
    if (!t) {
        return;
    }
    char name[160], esc[200];
    if (op->name && op->name[0]) {
        snprintf(name, sizeof(name), "queued %s", op->name);
    } else {
        snprintf(name, sizeof(name), "queued %s tag %llu", tempo__coll_name(op->coll),
                 (unsigned long long)op->user_tag);
    }
    tempo__json_escape(name, esc, sizeof(esc));
    if (begin) {
        emit(t,
             "{\"name\": \"%s\", \"cat\": \"queue\", \"ph\": \"b\", \"id\": \"%llu:%u\", \"pid\": "
             "%d, \"tid\": %d, \"ts\": %.3f, \"args\": {\"tag\": %llu, \"occurrence\": %u, "
             "\"priority\": %d, \"bytes\": %.0f}}",
             esc, (unsigned long long)op->user_tag, op->occ, w->rank, TEMPO_TRACE_TID_SLOT0,
             us(op->t_post_ns), (unsigned long long)op->user_tag, op->occ, op->priority,
             op_bytes(op));
    } else {
        emit(t,
             "{\"name\": \"%s\", \"cat\": \"queue\", \"ph\": \"e\", \"id\": \"%llu:%u\", \"pid\": "
             "%d, \"tid\": %d, \"ts\": %.3f}",
             esc, (unsigned long long)op->user_tag, op->occ, w->rank, TEMPO_TRACE_TID_SLOT0,
             us(tempo__now_ns()));
    }
    maybe_flush(w);
}

/* A slice event: "X" (dur >= 0, with args) or "B"/"E" (dur < 0, ph given). */
static void emit_slice(tempo__world_t *w, const char *ph, int tid, const char *cat,
                       const char *name, uint64_t t0, double dur_us, const char *args_json)
{
    tempo__trace_t *t = w->trace;
    if (!t) {
        return;
    }
    char esc[200], cesc[64], tail[64] = "";
    tempo__json_escape(name, esc, sizeof(esc));
    tempo__json_escape(cat, cesc, sizeof(cesc));
    if (dur_us >= 0) {
        snprintf(tail, sizeof(tail), ", \"dur\": %.3f", dur_us);
    }
    emit(t,
         "{\"name\": \"%s\", \"cat\": \"%s\", \"ph\": \"%s\", \"pid\": %d, \"tid\": %d, \"ts\": "
         "%.3f%s%s%s%s}",
         esc, cesc, ph, w->rank, tid, us(t0), tail, args_json ? ", \"args\": {" : "",
         args_json ? args_json : "", args_json ? "}" : "");
    maybe_flush(w);
}

void tempo__trace_span(tempo__world_t *w, int tid, const char *cat, const char *name, uint64_t t0,
                       uint64_t t1, const char *args_json)
{
    emit_slice(w, "X", tid, cat, name, t0, t1 > t0 ? us(t1 - t0) : 0, args_json ? args_json : "");
}

void tempo__trace_mark(tempo__world_t *w, int tid, int begin, const char *cat, const char *name,
                       uint64_t t)
{
    emit_slice(w, begin ? "B" : "E", tid, cat, name, t, -1, NULL);
}

void tempo__trace_counter(tempo__world_t *w, const char *name, double value, uint64_t t)
{
    tempo__trace_t *tr = w->trace;
    if (!tr) {
        return;
    }
    char esc[128];
    tempo__json_escape(name, esc, sizeof(esc));
    emit(tr,
         "{\"name\": \"%s\", \"ph\": \"C\", \"pid\": %d, \"tid\": 0, \"ts\": %.3f, \"args\": "
         "{\"value\": %.0f}}",
         esc, w->rank, us(t), value);
}
