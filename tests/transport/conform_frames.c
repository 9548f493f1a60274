/*
 * conform_frames.c — the conformance suite's malformed and truncated frames: raw bytes written onto
 * a transport's data channel with the test hook tempo__tl_inject (transport/transport.h), bypassing
 * the framing, on whatever transport the environment selects (FAULT_ENV, as conform.c).
 *
 * Rank 0 injects into its channel to rank 1, which has a receive from rank 0 posted (tag 9, 1000
 * bytes) and waits in it; with 3 ranks, rank 2 waits for a message from rank 1 that never comes.
 *   bad magic, bad version, bad type, length beyond the limit, sender field naming another rank:
 *              a whole header with one field wrong; rank 0 stays alive until the end
 *   header cut short, then closed: the first 10 bytes of a valid header, then rank 0 exits without
 *              destroying its communicator (its connections close)
 *   payload short, then closed: a valid header for rank 1's receive announcing 1000 bytes, 100 of
 *              them, then rank 0 exits
 * Expected: rank 1's receive fails with TEMPO_ERR_REMOTE naming rank 0 (host and pid), never
 * TEMPO_OK with whatever the bytes were (what a failed receive leaves in its buffer is not
 * specified: a short payload is partly there), and a later call fails too; every other rank's
 * wait ends with an error, none hangs (TEMPO_TIMEOUT is 3 s, the hang guard 60 s). The others
 * are not told of rank 1's failure: they time out naming rank 1 (TEMPO_ERR_TIMEOUT), or hear that
 * rank 1 closed the connection that carried the frame (tcp) or that rank 0 exited.
 * The headers are the stream framing's (transport/stream.h), which tcp and shm share; a transport
 * with another framing needs its own cases here.
 *
 * Usage: conform_frames [-n RANKS]. Linked with the convenience library for the hook.
 */
#include "config.h"

#include <tempo.h>

#include "core/tempo_int.h"
#include "transport/stream.h"
#include "tests/fault/job.h"

#define GUARD_S 60.0
#define RLEN 1000
#define RTAG 9
#define CUT 10 /* bytes of the header that get through */
#define SHORT 100

enum { F_MAGIC, F_VERSION, F_TYPE, F_LEN, F_SRC, F_CUT, F_SHORT, F_KINDS };
static const char *const kind_names[F_KINDS] = {
    "bad magic", "bad version", "bad type", "length beyond the limit",
    "sender field naming another rank", "header cut short, then closed",
    "payload short of its length, then closed"};

typedef struct {
    int kind;
} fr_arg_t;

/* Rank 0: the raw bytes of the case onto its data channel to rank 1. */
static tempo_status_t inject(tempo_comm_t comm, int kind)
{
    tempo__world_t *w = comm->world;
    tempo__wire_hdr_t h;
    memset(&h, 0, sizeof(h));
    h.magic = TEMPO_WIRE_MAGIC;
    h.version = TEMPO_WIRE_VERSION;
    h.type = TEMPO_WIRE_DATA;
    h.src = (uint32_t)w->rank;
    h.tag = tempo__tag_p2p(comm->ctx, RTAG); /* the tag of rank 1's receive */
    h.len = RLEN;
    switch (kind) {
    case F_MAGIC: h.magic ^= 0x01000000u; break;
    case F_VERSION: h.version++; break;
    case F_TYPE: h.type = 99; break;
    case F_LEN: h.len = TEMPO_WIRE_MAX_LEN + 1; break;
    case F_SRC: h.src = 2; break;
    default: break;
    }
    char bytes[sizeof(h) + SHORT];
    memcpy(bytes, &h, sizeof(h));
    for (size_t i = 0; i < SHORT; i++) {
        bytes[sizeof(h) + i] = (char)(0xa0 + i);
    }
    size_t len = kind == F_CUT ? CUT : kind == F_SHORT ? sizeof(h) + SHORT : sizeof(h);
    pthread_mutex_lock(&w->lock);
    tempo_status_t st = tempo__tl_inject(w, 1, bytes, len);
    pthread_mutex_unlock(&w->lock);
    return st;
}

static int fr_rank(int rank, int size, void *arg)
{
    const fr_arg_t *a = arg;
    tempo_comm_t comm = rk_init();
    if (!comm) {
        return 1;
    }
    char buf[RLEN];
    memset(buf, 0, sizeof(buf));
    tempo_request_t rq = NULL;
    tempo_status_t st = TEMPO_OK;
    if (rank == 1) {
        st = tempo_irecv(comm, buf, RLEN, TEMPO_UINT8, 0, RTAG, NULL, &rq);
    }
    rk_put("posted", "%d", (int)st);
    /* The others may still be in the barrier when the bytes arrive (rank 0 injects as soon as it
     * is through): then the barrier fails too, and what follows must still fail. */
    tempo_status_t bst = tempo_barrier(comm);
    if (bst != TEMPO_OK) {
        rk_diag("rank %d: the barrier before the injection: %s: %s", rank, tempo_status_name(bst),
                tempo_last_error(comm));
        if (rank == 0) {
            return 1;
        }
    }
    if (rank == 0) {
        rk_put("transport", "%s", tempo__tl_name(comm->world, 1));
        st = inject(comm, a->kind);
        rk_put("inject", "%d", (int)st);
        if (a->kind == F_CUT || a->kind == F_SHORT) {
            /* Let the engine write the bytes (a few of them: the pipe takes them at once), then
             * vanish without goodbye, as a crash in the middle of a message would. */
            tempo_request_t d = NULL;
            char x[4];
            tempo_irecv(comm, x, 4, TEMPO_UINT8, 1, 77, NULL, &d);
            for (int i = 0; i < 1000 && d; i++) {
                tempo_test(&d);
            }
            fflush(NULL);
            _exit(0);
        }
        /* Wait for a message rank 1 never sends: the failure of the job ends it. */
        char x[4];
        st = tempo_recv(comm, x, 4, TEMPO_UINT8, 1, 78);
    } else if (rank == 1) {
        st = tempo_wait(&rq);
    } else {
        char x[4];
        st = tempo_recv(comm, x, 4, TEMPO_UINT8, 1, 78);
    }
    rk_put("msg", "%s", tempo_last_error(comm));
    rk_put("status", "%d", (int)st);
    char x[4] = {0};
    rk_put("later", "%d", (int)tempo_send(comm, x, 4, TEMPO_UINT8, (rank + 1) % size, 79));
    rk_wait_go();
    tempo_comm_destroy(comm);
    return 0;
}

static void run_kind(int n, int kind)
{
    const char *name = kind_names[kind];
    static const char *const env[] = {"TEMPO_TIMEOUT=3s", NULL};
    fr_arg_t a = {kind};
    job_t *j = calloc(1, sizeof(*j));
    if (job_start(j, n, env, fr_rank, &a) != 0) {
        TAP_OK(0, "%s: start %d ranks", name, n);
        free(j);
        return;
    }
    int exits = kind == F_CUT || kind == F_SHORT;
    const char *inj = job_wait_key(j, 0, "inject", GUARD_S);
    TAP_OK(inj && atoi(inj) == 0, "%s: rank 0 injects the bytes into its channel to rank 1 (%s; "
           "status %s)", name, job_get(j, 0, "transport") ?: "?", inj ? inj : "no report");
    char host[64], who[160];
    gethostname(host, sizeof(host));
    host[sizeof(host) - 1] = '\0';
    snprintf(who, sizeof(who), "rank 0 (host %s, pid %d)", host, (int)j->pid[0]);
    for (int r = exits ? 1 : 0; r < n; r++) {
        const char *later = job_wait_key(j, r, "later", GUARD_S);
        int st = job_status_of(j, r, "status");
        const char *msg = job_get(j, r, "msg");
        tap_diag("%s: rank %d: %s: %s", name, r, tempo_status_name((tempo_status_t)st),
                 msg ? msg : "(no report)");
        if (r == 1) {
            TAP_EQ_INT(st, TEMPO_ERR_REMOTE, "%s: rank 1's receive from rank 0 fails with "
                       "TEMPO_ERR_REMOTE", name);
            TAP_CONTAINS(msg, who, "%s: rank 1's error names rank 0, its host and pid", name);
        } else {
            TAP_OK(st < 0 && st != 999, "%s: rank %d's wait ends with an error, no hang (%s)", name,
                   r, tempo_status_name((tempo_status_t)st));
        }
        TAP_OK(later && atoi(later) < 0, "%s: rank %d: a later send fails too (%s)", name, r,
               later ? tempo_status_name((tempo_status_t)atoi(later)) : "no report");
    }
    for (int r = 0; r < n; r++) {
        job_go(j, r);
    }
    job_finish(j, GUARD_S);
    for (int r = 0; r < n; r++) {
        char how[64];
        job_describe_exit(j, r, how, sizeof(how));
        TAP_OK(job_exited(j, r, 0), "%s: rank %d exited 0 (%s)", name, r, how);
    }
    job_free(j);
    free(j);
}

int main(int argc, char **argv)
{
    int n = 2;
    if (argc == 3 && !strcmp(argv[1], "-n")) {
        n = atoi(argv[2]);
    }
    if (n < 2 || n > JOB_MAX || (argc != 1 && argc != 3)) {
        fprintf(stderr, "usage: %s [-n RANKS (2-%d)]\n", argv[0], JOB_MAX);
        return 2;
    }
    tap_diag("conform_frames: %d ranks, FAULT_ENV='%s'", n,
             getenv("FAULT_ENV") ? getenv("FAULT_ENV") : "");
    for (int k = 0; k < F_KINDS; k++) {
        run_kind(n, k);
    }
    return tap_done();
}
