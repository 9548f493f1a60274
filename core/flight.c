/*
 * flight.c — the flight recorder's ring and its JSON dump (see flight.h for what is recorded and
 * when a rank writes it; tools/tempo-trace.in's FLIGHT_DOC for the file format, which is the
 * contract with `tempo-trace flight`: keep the two in step).
 *
 * The dump is written under the world lock, from the engine (never from the signal handler, which
 * only counts), to "<path>.tmp" and renamed over <path>, so a reader never sees half a file and a
 * later dump (another SIGUSR1) replaces an earlier one whole. Times are CLOCK_MONOTONIC
 * microseconds, with one reading of both clocks (t0_monotonic_us, t0_realtime_us) to line ranks
 * of different hosts up, as in TEMPO_TRACE files.
 */
#include "config.h"

#include "core/flight.h"
#include "core/cfg.h"
#include "core/trace.h"

#include <errno.h>
#include <stdio.h>
#include <unistd.h>

volatile sig_atomic_t tempo__flight_signals;

enum { DUE_NONE = 0, DUE_FAILURE = 1 };

tempo__flight_t *tempo__flight_new(void)
{
    if (tempo__cfg.flight_size <= 0) {
        return NULL;
    }
    uint32_t cap = 1;
    while (cap < (uint32_t)tempo__cfg.flight_size) {
        cap <<= 1;
    }
    tempo__flight_t *f =
        tempo__calloc(1, sizeof(*f) + cap * sizeof(tempo__flight_ent_t), "flight recorder");
    if (f) {
        f->mask = cap - 1;
    }
    return f;
}

void tempo__flight_post(tempo__op_t *op)
{
    tempo__flight_t *f = op->comm->flight;
    if (!f) {
        return;
    }
    const tempo__op_t *req = op->parent ? op->parent : op;
    uint64_t id = ++f->nrec;
    tempo__flight_ent_t *e = &f->ent[(id - 1) & f->mask];
    e->id = id;
    e->count = op->count;
    e->tag = op->user_tag;
    e->t_post_ns = req->t_post_ns; /* 0: set when it starts or ends */
    e->t_start_ns = e->t_end_ns = 0;
    e->algo = op->algo;
    e->seq = op->seq;
    e->occ = op->occ;
    e->chunk = op->chunk;
    e->nchunks = op->nchunks;
    e->priority = op->priority;
    int rooted = op->coll == TEMPO__COLL_BROADCAST || op->coll == TEMPO__COLL_REDUCE ||
                 op->coll == TEMPO__COLL_SEND || op->coll == TEMPO__COLL_RECV;
    e->root = rooted ? op->root : -1; /* (other calls leave it at whatever the caller passed) */
    e->status = TEMPO_INPROGRESS;
    e->waited = -1;
    e->coll = (uint8_t)op->coll;
    e->dtype = (uint8_t)op->dtype;
    e->redop = (uint8_t)op->redop;
    e->state = TEMPO__FL_QUEUED;
    e->lane = op->coll == TEMPO__COLL_SEND || op->coll == TEMPO__COLL_RECV ? 2 : op->lane ? 1 : 0;
    e->compressor[0] = '\0';
    if (op->qc && op->qc->spec) {
        snprintf(e->compressor, sizeof(e->compressor), "%s", op->qc->spec);
    }
    op->flight_id = id;
}

/* ---------------------------------------------------------------------------------------------- */
/* Dump triggers                                                                                  */
/* ---------------------------------------------------------------------------------------------- */

static void on_sigusr1(int sig)
{
    (void)sig;
    tempo__flight_signals++;
}

void tempo__flight_init(tempo__world_t *w)
{
    static int installed; /* once per process (under the lock of the first world) */
    w->flight_signals_seen = tempo__flight_signals;
    if (!tempo__cfg.flight[0] || installed) {
        return;
    }
    /* Only where nobody else handles SIGUSR1: a program's own handler is left alone. */
    struct sigaction old, sa;
    if (sigaction(SIGUSR1, NULL, &old) != 0 || old.sa_handler != SIG_DFL) {
        TEMPO_INFO(TEMPO_SUB_INIT, "flight recorder: SIGUSR1 has a handler already; no dump on "
                                   "SIGUSR1 (dumps on failures still happen)");
        return;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_sigusr1;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGUSR1, &sa, NULL) == 0) {
        installed = 1;
    }
}

void tempo__flight_failed(tempo__world_t *w, tempo_status_t st)
{
    if (!w->failed_ns) {
        w->failed_ns = tempo__now_ns();
    }
    if (st != TEMPO_ERR_ABORTED && tempo__cfg.flight[0] && !w->flight_failure_done) {
        w->flight_due = DUE_FAILURE;
    }
}

/* Write the dump to TEMPO_FLIGHT_RECORDER (expanded for this rank), logging the outcome. */
static void dump(tempo__world_t *w, const char *reason)
{
    char path[512];
    tempo__expand_path_unique(tempo__cfg.flight, w->rank, w->size, path, sizeof(path));
    if (tempo__flight_write(w, path, reason) == TEMPO_OK) {
        TEMPO_WARN(TEMPO_SUB_ALL,
                   "flight recorder (%s) written to %s; line the ranks up with "
                   "tempo-trace flight",
                   reason, path);
    } else {
        TEMPO_WARN(TEMPO_SUB_ALL, "flight recorder (%s): %s", reason, tempo__errmsg());
    }
}

void tempo__flight_service(tempo__world_t *w)
{
    if (w->flight_due) {
        w->flight_due = DUE_NONE;
        w->flight_failure_done = 1;
        dump(w, w->failed == TEMPO_ERR_TIMEOUT ? "timeout" : "failure");
    }
    if (w->flight_signals_seen != tempo__flight_signals) {
        w->flight_signals_seen = tempo__flight_signals;
        if (tempo__cfg.flight[0]) {
            dump(w, "signal");
        }
    }
}

void tempo__flight_last(tempo__world_t *w)
{
    if (w->flight_due) {
        tempo__flight_service(w);
    } else if (tempo__cfg.flight[0] && tempo__cfg.flight_at_exit) {
        dump(w, "exit");
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* The JSON file                                                                                  */
/* ---------------------------------------------------------------------------------------------- */

static const char *const state_names[] = {"empty", "queued", "running", "done", "failed"};
static const char *const lane_names[] = {"program", "scheduled", "p2p"};

static double us(uint64_t ns)
{
    return (double)ns / 1000.0;
}

/* s as a JSON string (with quotes), or null. */
static void jstr(FILE *f, const char *s)
{
    char esc[2 * TEMPO_ERRMSG_LEN];
    if (!s) {
        fputs("null", f);
        return;
    }
    fprintf(f, "\"%s\"", tempo__json_escape(s, esc, sizeof(esc)));
}

/* The live operation of entry e on c, NULL when it was released. */
static const tempo__op_t *live_op(const struct tempo_comm *c, const tempo__flight_ent_t *e)
{
    const tempo__list_t *pos;
    for (pos = c->ops.next; pos != &c->ops; pos = pos->next) {
        const tempo__op_t *op = tempo__container_of(pos, tempo__op_t, clink);
        if (op->flight_id == e->id) {
            return op;
        }
    }
    return NULL;
}

static void write_entry(FILE *f, const struct tempo_comm *c, const tempo__flight_ent_t *e)
{
    fprintf(f, "{\"id\": %llu, ", (unsigned long long)e->id);
    if (e->lane == 2) {
        fputs("\"seq\": null", f);
    } else {
        fprintf(f, "\"seq\": %u", e->seq & ~TEMPO_SEQ_SCHED);
    }
    fprintf(f, ", \"lane\": \"%s\", \"coll\": \"%s\", \"count\": %llu, \"dtype\": \"%s\", ",
            lane_names[e->lane], tempo__coll_name(e->coll), (unsigned long long)e->count,
            tempo_dtype_name((tempo_dtype_t)e->dtype));
    int reducing = e->coll == TEMPO__COLL_ALLREDUCE || e->coll == TEMPO__COLL_REDUCE_SCATTER ||
                   e->coll == TEMPO__COLL_REDUCE;
    fputs("\"op\": ", f);
    jstr(f, reducing ? tempo_op_name((tempo_op_t)e->redop) : NULL);
    fprintf(f, ", \"root\": %d, \"algorithm\": ", (int)e->root);
    jstr(f, e->algo);
    if (e->lane == 1) {
        fprintf(f,
                ", \"priority\": %d, \"tag\": %llu, \"occurrence\": %u, \"chunk\": %u, "
                "\"chunks\": %u",
                (int)e->priority, (unsigned long long)e->tag, e->occ, e->chunk, e->nchunks);
    }
    fputs(", \"compressor\": ", f);
    jstr(f, e->compressor[0] ? e->compressor : NULL);
    fprintf(f, ", \"state\": \"%s\", \"status\": ", state_names[e->state]);
    jstr(f, e->state >= TEMPO__FL_DONE ? tempo_status_name((tempo_status_t)e->status) : NULL);
    fprintf(f, ", \"t_post_us\": %.3f", us(e->t_post_ns));
    if (e->t_start_ns) {
        fprintf(f, ", \"t_start_us\": %.3f", us(e->t_start_ns));
    }
    if (e->t_end_ns) {
        fprintf(f, ", \"t_end_us\": %.3f", us(e->t_end_ns));
    }
    /* Whom it still waits for: the live operation's peer (world rank), as blame.c uses it; a
     * failed one: whom it waited for when it failed. */
    const tempo__op_t *op = e->state != TEMPO__FL_DONE ? live_op(c, e) : NULL;
    fputs(", \"waiting_for\": [", f);
    if (e->state == TEMPO__FL_FAILED && e->waited >= 0) {
        fprintf(f, "%d", (int)e->waited);
    } else if (op && op->wait_peer >= 0 && op->wait_peer < c->size) {
        fprintf(f, "%d", tempo__wrank(c, op->wait_peer));
    }
    fputs("]", f);
    if (op && op->status != TEMPO_INPROGRESS && op->errmsg[0]) {
        fputs(", \"error\": ", f);
        jstr(f, op->errmsg);
    }
    fputs("}", f);
}

/* The communicator's id in the files: the same on its every member, and derived from the job tag,
 * not from its uid (a job uuid without a key is the job's secret: transport/tcp.c; comm uids are
 * that uuid, or an invertible hash of it, and these files may be readable by others). */
static uint64_t comm_file_id(const tempo__world_t *w, const struct tempo_comm *c)
{
    uint64_t h = tempo__hash64(&c->ctx, sizeof(c->ctx), w->job_tag);
    return tempo__hash64(c->ranks, (size_t)c->size * sizeof(c->ranks[0]), h);
}

static void write_comm(FILE *f, const tempo__world_t *w, const struct tempo_comm *c)
{
    fprintf(f, "  {\"id\": \"%016llx\", \"ctx\": %d, \"size\": %d, \"rank\": %d, \"ranks\": [",
            (unsigned long long)comm_file_id(w, c), c->ctx, c->size, c->rank);
    for (int i = 0; i < c->size; i++) {
        fprintf(f, "%s%d", i ? ", " : "", c->ranks[i]);
    }
    fprintf(f, "], \"next_seq\": %u, \"failed\": ", c->next_seq);
    jstr(f, c->failed != TEMPO_OK ? tempo_status_name(c->failed) : NULL);
    fputs(", \"message\": ", f);
    jstr(f, c->failed != TEMPO_OK ? c->failmsg : NULL);
    char sched[512] = "";
    if (c->sched_state) {
        c->sched_state(c, sched, sizeof(sched));
    }
    fprintf(f, ",\n   \"scheduler\": %s%s%s", sched[0] ? "{" : "null", sched, sched[0] ? "}" : "");
    const tempo__flight_t *fl = c->flight;
    fprintf(f, ",\n   \"recorder_size\": %u, \"recorded\": %llu, \"entries\": [",
            fl ? fl->mask + 1 : 0, fl ? (unsigned long long)fl->nrec : 0ull);
    if (fl) {
        uint64_t n = TEMPO_MIN(fl->nrec, (uint64_t)fl->mask + 1);
        for (uint64_t id = fl->nrec - n + 1; id <= fl->nrec; id++) {
            const tempo__flight_ent_t *e = &fl->ent[(id - 1) & fl->mask];
            fputs(id == fl->nrec - n + 1 ? "\n    " : ",\n    ", f);
            write_entry(f, c, e);
        }
    }
    (void)w;
    fputs("]}", f);
}

/* Bytes of the operations running now (the engine's view of what is in flight). */
static double bytes_in_flight(const tempo__world_t *w, int *nactive_p, int *nparked_p)
{
    double b = 0;
    int na = 0, np = 0;
    const tempo__list_t *pos;
    for (pos = w->active.next; pos != &w->active; pos = pos->next, na++) {
        const tempo__op_t *op = tempo__container_of(pos, tempo__op_t, link);
        if (!op->is_parent) {
            b += (double)tempo__coll_bytes(op->coll, op->dtype, op->count, op->comm->size);
        }
    }
    for (pos = w->parked.next; pos != &w->parked; pos = pos->next) {
        np++;
    }
    *nactive_p = na;
    *nparked_p = np;
    return b;
}

static void write_peers(FILE *f, const tempo__world_t *w, uint64_t now)
{
    fputs(",\n \"peers\": [", f);
    for (int r = 0; r < w->size; r++) {
        const tempo__peer_t *p = &w->peers[r];
        /* struct tempo__tl_ops (transport/transport.h) begins with its name. */
        const char *tl = r == w->rank ? "self"
                         : p->data_tl ? *(const char *const *)p->data_tl
                                      : NULL;
        fprintf(f, "%s\n  {\"rank\": %d, \"host\": ", r ? "," : "", r);
        jstr(f, p->info.hostname);
        fprintf(f, ", \"pid\": %d, \"transport\": ", (int)p->info.pid);
        jstr(f, tl);
        fprintf(f, ", \"left\": %s", p->left ? "true" : "false");
        if (p->heard_ns && now >= p->heard_ns) {
            fprintf(f, ", \"heard_s_ago\": %.3f", (double)(now - p->heard_ns) / 1e9);
        }
        if (p->answer_ns) { /* its answer to core/blame.c's "whom do you wait for?" */
            fprintf(f, ", \"said_it_waits_for\": %d, \"silent_s\": %.3f", (int)p->answer_waits,
                    p->answer_silent_s);
        }
        fputs("}", f);
    }
    fputs("]", f);
}

tempo_status_t tempo__flight_write(tempo__world_t *w, const char *path, const char *reason)
{
    char tmp[600];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    unlink(tmp); /* a dump that stopped half way: this rank's own */
    FILE *f = tempo__fopen_write(tmp, 0, 1);
    if (!f) {
        return tempo__err_quiet(TEMPO_ERR_SYSTEM, "cannot create '%s': %s", tmp, strerror(errno));
    }
    uint64_t now = tempo__now_ns();
    double mono_us, real_us;
    tempo__clock_pair(&mono_us, &real_us);
    int nactive, nparked;
    double inflight = bytes_in_flight(w, &nactive, &nparked);
    fprintf(f,
            "{\"tool\": \"tempo\", \"kind\": \"flight_recorder\", \"format\": 1, \"version\": "
            "\"%s\", \"reason\": ",
            PACKAGE_VERSION);
    jstr(f, reason);
    fprintf(f, ",\n \"rank\": %d, \"size\": %d, \"host\": ", w->rank, w->size);
    jstr(f, tempo__hostname());
    fprintf(f,
            ", \"pid\": %d, \"clock\": \"monotonic\", \"t_dump_us\": %.3f, "
            "\"t0_monotonic_us\": %.3f, \"t0_realtime_us\": %.3f, \"timeout_s\": %g",
            (int)getpid(), us(now), mono_us, real_us, w->timeout_s);
    fputs(",\n \"job\": {\"failed\": ", f);
    jstr(f, w->failed != TEMPO_OK ? tempo_status_name(w->failed) : NULL);
    fputs(", \"message\": ", f);
    jstr(f, w->failed != TEMPO_OK ? w->failmsg : NULL);
    if (w->failed_ns) {
        fprintf(f, ", \"t_failed_us\": %.3f", us(w->failed_ns));
    }
    fprintf(f,
            "},\n \"engine\": {\"running_ops\": %d, \"parked_ops\": %d, \"bytes_in_flight\": "
            "%.0f, \"progress_passes\": %llu, \"progress_thread\": %s, \"callers_waiting\": %d}",
            nactive, nparked, inflight, (unsigned long long)w->npasses,
            w->thread_on ? "true" : "false", w->waiters);
    write_peers(f, w, now);
    fputs(",\n \"comms\": [\n", f);
    const tempo__list_t *pos;
    for (pos = w->comms.next; pos != &w->comms; pos = pos->next) {
        write_comm(f, w, tempo__container_of(pos, struct tempo_comm, wlink));
        fputs(pos->next != &w->comms ? ",\n" : "\n", f);
    }
    fputs(" ]}\n", f);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        unlink(tmp);
        return tempo__err_quiet(TEMPO_ERR_SYSTEM, "cannot write '%s'", tmp);
    }
    if (rename(tmp, path) != 0) {
        tempo_status_t st = tempo__err_quiet(TEMPO_ERR_SYSTEM, "cannot rename '%s' to '%s': %s",
                                             tmp, path, strerror(errno));
        unlink(tmp);
        return st;
    }
    return TEMPO_OK;
}
