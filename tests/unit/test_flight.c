/*
 * test_flight.c — core/flight.c's ring on a one-rank world without transports: the size rounded
 * up to a power of two; wrap-around keeps the newest entries, written oldest first; an operation
 * whose slot was reused no longer touches it; states and times from post to end; a scheduled
 * chunk's lane, priority and chunk; whom a running operation waits for; the recorder off at size
 * 0. The file is checked as JSON with /usr/bin/python3 where it exists.
 */
#include "config.h"

#include <unistd.h>

#include "core/cfg.h"
#include "core/flight.h"
#include "tests/unit/tu.h"

static char path[256];

static char *slurp(const char *p)
{
    static char buf[1 << 16];
    FILE *f = fopen(p, "r");
    size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    buf[n] = '\0';
    if (f) {
        fclose(f);
    }
    return buf;
}

static tempo__op_t *post(struct tempo_comm *c, uint32_t seq)
{
    tempo__op_t *op = tempo__op_new(c, TEMPO__COLL_ALLREDUCE);
    op->seq = seq;
    op->count = 100 + seq;
    op->dtype = TEMPO_FLOAT32;
    op->redop = TEMPO_SUM;
    op->root = -1;
    op->algo = "ring";
    tempo__flight_post(op);
    tempo__flight_start(op, tempo__now_ns());
    return op;
}

static void finish(tempo__op_t *op, tempo_status_t st)
{
    op->status = st;
    tempo__flight_end(op, 0);
    tempo__op_release(op);
}

static void test_ring(tempo__world_t *w)
{
    tempo__cfg.flight_size = 5; /* -> 8 */
    struct tempo_comm *c = NULL;
    int me = 0;
    TAP_OK(tempo__comm_create(w, &me, 1, 0, 1, &c) == TEMPO_OK, "a communicator");
    TAP_OK(c->flight != NULL, "it has a ring");
    TAP_EQ_UINT(c->flight->mask + 1, 8u, "TEMPO_FLIGHT_RECORDER_SIZE=5 is rounded up to 8");

    tempo__op_t *old = post(c, 0); /* kept running while the ring wraps */
    TAP_EQ_INT(tempo__flight_ent(old)->state, TEMPO__FL_RUNNING, "a started op is running");
    TAP_OK(tempo__flight_ent(old)->t_start_ns >= tempo__flight_ent(old)->t_post_ns,
           "started after it was posted");
    for (uint32_t s = 1; s < 20; s++) {
        tempo__op_t *op = post(c, s);
        op->wait_peer = s == 17 ? 0 : -1; /* seq 17 times out waiting for comm rank 0 */
        finish(op, s == 17 ? TEMPO_ERR_TIMEOUT : TEMPO_OK);
    }
    TAP_EQ_UINT(c->flight->nrec, 20u, "20 records");
    TAP_OK(tempo__flight_ent(old) == NULL, "the first op's slot was reused: it has no entry");
    const tempo__flight_ent_t *reused = &c->flight->ent[0];
    TAP_EQ_UINT(reused->id, 17u, "slot 0 holds record 17 (seq 16)");
    finish(old, TEMPO_ERR_REMOTE); /* must not touch record 17 */
    TAP_EQ_INT(reused->state, TEMPO__FL_DONE, "ending the first op leaves record 17 alone");
    TAP_EQ_INT(c->flight->ent[1].state, TEMPO__FL_FAILED, "record 18 (seq 17) failed");
    TAP_EQ_INT(c->flight->ent[1].status, TEMPO_ERR_TIMEOUT, "with its status");

    /* A scheduled chunk, and a running op that waits for comm rank 0. */
    tempo__op_t *k = tempo__op_new(c, TEMPO__COLL_ALLREDUCE);
    k->lane = 1;
    k->seq = TEMPO_SEQ_SCHED | 3;
    k->priority = 7;
    k->chunk = 1;
    k->nchunks = 4;
    k->user_tag = 42;
    tempo__qhook_t qh = {.spec = "alq:bits=3,bucket=8192"};
    k->qc = &qh; /* copied: a compressor may be destroyed before the dump */
    tempo__flight_start(k, tempo__now_ns()); /* a chunk is recorded when it starts */
    qh.spec = "gone";
    TAP_OK(tempo__flight_ent(k) && tempo__flight_ent(k)->lane == 1,
           "a chunk is recorded when "
           "it starts, in the scheduled lane");
    k->wait_peer = 0;

    TAP_OK(tempo__flight_write(w, path, "test") == TEMPO_OK, "the file is written");
    const char *s = slurp(path);
    TAP_CONTAINS(s, "\"reason\": \"test\"", "it says why");
    TAP_OK(!strstr(s, "\"seq\": 12,"), "seq 12 rolled out of the ring");
    const char *prev = s;
    int ordered = 1;
    for (int q = 13; q < 20; q++) {
        char pat[32];
        snprintf(pat, sizeof(pat), "\"seq\": %d,", q);
        const char *at = strstr(s, pat);
        ordered &= at != NULL && at > prev;
        prev = at ? at : prev;
    }
    TAP_OK(ordered, "seq 13..19 are in the file, oldest first");
    TAP_CONTAINS(s, "\"seq\": 3, \"lane\": \"scheduled\"", "the chunk's lane sequence number");
    TAP_CONTAINS(s, "\"priority\": 7, \"tag\": 42, \"occurrence\": 0, \"chunk\": 1, \"chunks\": 4",
                 "its priority, tag and chunk");
    TAP_CONTAINS(s, "\"compressor\": \"alq:bits=3,bucket=8192\"", "its compressor's spec, copied");
    TAP_CONTAINS(s, "\"state\": \"running\", \"status\": null", "it is running");
    TAP_CONTAINS(s, "\"waiting_for\": [0]", "waiting for rank 0");
    const char *e17 = strstr(s, "\"seq\": 17,");
    char one[1024] = "";
    if (e17) {
        snprintf(one, sizeof(one), "%.*s", (int)strcspn(e17, "}"), e17);
    }
    TAP_CONTAINS(one, "\"state\": \"failed\", \"status\": \"TEMPO_ERR_TIMEOUT\"", "seq 17 failed");
    TAP_CONTAINS(one, "\"waiting_for\": [0]", "waiting for rank 0 (kept after its release)");
    TAP_CONTAINS(s, "\"count\": 117, \"dtype\": \"float32\", \"op\": \"sum\"", "count, dtype, op");
    TAP_CONTAINS(s, "\"recorder_size\": 8, \"recorded\": 21", "the ring's size and records");
    if (access("/usr/bin/python3", X_OK) == 0) {
        char cmd[400];
        snprintf(cmd, sizeof(cmd),
                 "/usr/bin/python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "
                 "%s",
                 path);
        TAP_OK(system(cmd) == 0, "the file is valid JSON");
    } else {
        tap_skip("/usr/bin/python3 not found", "the file is valid JSON");
    }
    k->status = TEMPO_OK;
    tempo__flight_end(k, 0);
    tempo__op_release(k);

    /* What recording costs an operation (printed, not asserted): post, start and end with the
     * times the engine has anyway; and a clock read, for scale. */
    tempo__op_t *b = tempo__op_new(c, TEMPO__COLL_ALLREDUCE);
    enum { N = 200000 };
    uint64_t t0 = tempo__now_ns();
    for (int i = 0; i < N; i++) {
        b->flight_id = 0;
        b->status = TEMPO_INPROGRESS;
        tempo__flight_post(b);
        tempo__flight_start(b, t0); /* (the engine passes the clock reads it has anyway) */
        b->status = TEMPO_OK;
        tempo__flight_end(b, t0);
    }
    uint64_t t1 = tempo__now_ns();
    volatile uint64_t sink = 0;
    for (int i = 0; i < N; i++) {
        sink += tempo__now_ns();
    }
    uint64_t t2 = tempo__now_ns();
    tap_diag("recording one operation: %.1f ns (one clock read: %.1f ns)", (double)(t1 - t0) / N,
             (double)(t2 - t1) / N);
    b->status = TEMPO_OK;
    tempo__op_release(b);
    tempo__comm_free(c);
}

static void test_off(tempo__world_t *w)
{
    tempo__cfg.flight_size = 0;
    struct tempo_comm *c = NULL;
    int me = 0;
    TAP_OK(tempo__comm_create(w, &me, 1, 0, 2, &c) == TEMPO_OK, "a communicator (size 0)");
    TAP_OK(c->flight == NULL, "TEMPO_FLIGHT_RECORDER_SIZE=0: no ring");
    tempo__op_t *op = post(c, 0);
    TAP_OK(op->flight_id == 0 && tempo__flight_ent(op) == NULL, "an op is not recorded");
    finish(op, TEMPO_OK);
    TAP_OK(tempo__flight_write(w, path, "off") == TEMPO_OK, "the file is still written");
    TAP_CONTAINS(slurp(path), "\"recorder_size\": 0, \"recorded\": 0, \"entries\": []",
                 "with no entries");
    tempo__comm_free(c);
}

int main(void)
{
    snprintf(path, sizeof(path), "%s/test_flight.%d.json",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp", (int)getpid());
    tempo__peer_info_t me = {.rank = 0, .pid = (int32_t)getpid(), .hostname = "h"};
    tempo__world_t *w = NULL;
    TAP_OK(tempo__world_create(0, 1, &me, 30.0, &w) == TEMPO_OK, "a one-rank world");
    test_ring(w);
    test_off(w);
    tempo__world_destroy(w, 1);
    unlink(path);
    return tap_done();
}
