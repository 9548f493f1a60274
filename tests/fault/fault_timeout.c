/*
 * fault_timeout.c — TEMPO_TIMEOUT=2s: a rank that never joins makes the others fail with
 * TEMPO_ERR_TIMEOUT naming the rank they waited for, instead of hanging.
 *
 *   all-reduce  3 ranks on shared memory; rank 2 stays alive but never calls the all-reduce. Ranks
 *               0 and 1 must fail with TEMPO_ERR_TIMEOUT after about 2 s (not before: the deadline
 *               is honoured; well before the 30 s hang guard), naming rank 2, and a later call on
 *               the failed job fails too.
 *   recv        2 ranks over tcp (TEMPO_HOST_ID=%r); rank 0 receives from rank 1, which never
 *               sends: TEMPO_ERR_TIMEOUT naming rank 1.
 *   rendezvous  3 ranks, rank 2 never starts the library: ranks 0 and 1 fail tempo_comm_init_env
 *               after about 2 s with TEMPO_ERR_TIMEOUT, rank 0 naming the missing rank.
 *   queue       (TEMPO_TIMEOUT=5s) 2 ranks on shared memory and 2 over tcp post QUEUED small
 *               non-blocking all-reduces in a loop, then wait for all: every one completes with
 *               TEMPO_OK and the right sum. The deadline measures silence, not time in the queue
 *               (before, the last requests of a quadratic queue timed out on a healthy job).
 *   stall       3 ranks on shared memory post QUEUED all-reduces, but rank 2 only the first
 *               STALL_AT of them, then stays alive and silent: ranks 0 and 1 get TEMPO_OK for
 *               those and TEMPO_ERR_TIMEOUT naming rank 2 for the rest, after the deadline and
 *               without hanging. Over tcp likewise with 2 ranks.
 *   crossed     (TEMPO_TIMEOUT=5s) 2 ranks, over shm and over tcp, deadlock across two
 *               communicators: rank 0 calls an all-reduce on the job's communicator, rank 1 on a
 *               split of it. Both fail with TEMPO_ERR_TIMEOUT naming the other. Each waits for the
 *               other and probes it every 2 s (core/check.c), and those control notes must not
 *               count as hearing from it: before, each probe extended the other's deadline, so
 *               with TEMPO_TIMEOUT above the probes' 2 s gap neither wait ever ended.
 * The absent rank is held alive by the test until the others have reported, then released.
 */
#include "config.h"

#include <tempo.h>

#include "tests/fault/job.h"

#define TIMEOUT_S 2.0
#define GUARD_S 30.0
#define QUEUED 30000
#define STALL_AT 2000

typedef struct {
    int absent;  /* the rank that does not take part */
    int mode;    /* 0 all-reduce, 1 recv, 2 rendezvous, 3 queue, 4 stall, 5 crossed */
} to_arg_t;

/* Post QUEUED all-reduces of 2 floats (rank r contributes r + 1), or only the first stop_at, and
 * wait for all. Reports "status" (the first error, else TEMPO_OK), "ok" (requests with TEMPO_OK),
 * "wrong" (results that are not the sum) and "msg" (the first error's text). */
static void queued_allreduces(tempo_comm_t comm, int rank, int stop_at)
{
    int nq = stop_at ? stop_at : QUEUED, n = tempo_comm_size(comm);
    float in[2] = {(float)(rank + 1), (float)(rank + 1)};
    float *out = calloc((size_t)nq * 2, sizeof(float));
    tempo_request_t *reqs = calloc((size_t)nq, sizeof(*reqs));
    tempo_status_t *sts = calloc((size_t)nq, sizeof(*sts));
    if (!out || !reqs || !sts) {
        rk_put("status", "%d", (int)TEMPO_ERR_NOMEM);
        return;
    }
    tempo_status_t st = TEMPO_OK;
    int posted = 0;
    double t0 = rk_now(); /* the first requests' deadlines run from their posting */
    for (; posted < nq && st == TEMPO_OK; posted++) {
        st = tempo_iallreduce(comm, in, out + 2 * posted, 2, TEMPO_FLOAT32, TEMPO_SUM, NULL,
                              &reqs[posted]);
    }
    /* The job can fail while this loop still posts (in the stall case, when posting takes longer
     * than TEMPO_TIMEOUT, as under ThreadSanitizer): the last post failed and posted nothing; the
     * requests before it are still waited for (and freed), so that each gets its own status.
     * Their first error is the cause, the failed post a consequence. */
    if (st != TEMPO_OK) {
        posted--;
    }
    tempo_status_t wst = tempo_waitall((size_t)posted, reqs, sts);
    if (wst != TEMPO_OK) {
        st = wst;
    }
    rk_put("elapsed", "%.3f", rk_now() - t0);
    rk_put("msg", "%s", st == TEMPO_OK ? "" : tempo_last_error(comm));
    int ok = 0, wrong = 0;
    for (int i = 0; i < posted; i++) {
        ok += sts[i] == TEMPO_OK;
        wrong += sts[i] == TEMPO_OK && (out[2 * i] != (float)(n * (n + 1) / 2) ||
                                        out[2 * i + 1] != (float)(n * (n + 1) / 2));
    }
    rk_put("ok", "%d", ok);
    rk_put("wrong", "%d", wrong);
    rk_put("status", "%d", (int)st);
    free(out);
    free(reqs);
    free(sts);
}

static int to_rank(int rank, int size, void *arg)
{
    const to_arg_t *a = arg;
    if (a->mode == 2 && rank == a->absent) {
        rk_put("ready", "1");
        rk_wait_go();
        return 0;
    }
    tempo_comm_t comm;
    double t0 = rk_now();
    tempo_status_t st = tempo_comm_init_env(&comm);
    if (a->mode == 2) {
        rk_put("elapsed", "%.3f", rk_now() - t0);
        rk_put("msg", "%s", tempo_last_error(NULL));
        rk_put("status", "%d", (int)st);
        if (st == TEMPO_OK) {
            tempo_comm_destroy(comm);
        }
        return 0;
    }
    rk_put("init", "%d", (int)st);
    if (st != TEMPO_OK) {
        rk_put("initmsg", "%s", tempo_last_error(NULL));
        return 1;
    }
    if (a->mode == 3 || a->mode == 4) {
        queued_allreduces(comm, rank, a->mode == 4 && rank == a->absent ? STALL_AT : 0);
        if (a->mode == 3 || rank != a->absent) {
            rk_put("later", "%d", (int)tempo_barrier(comm));
        }
        rk_wait_go(); /* the stalled rank: alive, connected, silent */
        tempo_comm_destroy(comm);
        return 0;
    }
    if (rank == a->absent) {
        rk_put("ready", "1");
        rk_wait_go(); /* alive, connected, silent */
        tempo_comm_destroy(comm);
        return 0;
    }
    float in[64] = {0}, out[64];
    tempo_comm_t other = NULL;
    if (a->mode == 5 && tempo_comm_split(comm, 0, rank, &other) != TEMPO_OK) {
        rk_put("initmsg", "split: %s", tempo_last_error(comm));
        return 1;
    }
    tempo_comm_t on = rank == 1 && other ? other : comm; /* crossed: rank 1 calls on the split */
    t0 = rk_now();
    if (a->mode == 0 || a->mode == 5) {
        st = tempo_allreduce(on, in, out, 64, TEMPO_FLOAT32, TEMPO_SUM);
    } else {
        st = tempo_recv(comm, out, 64, TEMPO_FLOAT32, a->absent, 5);
    }
    rk_put("elapsed", "%.3f", rk_now() - t0);
    rk_put("msg", "%s", tempo_last_error(on));
    rk_put("status", "%d", (int)st);
    tempo_status_t later = tempo_barrier(comm);
    rk_put("later", "%d", (int)later);
    rk_wait_go();
    tempo_comm_destroy(other);
    tempo_comm_destroy(comm);
    return 0;
}

static void run_variant(const char *name, const char *const *env, int n, int absent, int mode,
                        double timeout_s)
{
    job_t *j = calloc(1, sizeof(*j));
    to_arg_t a = {absent, mode};
    if (job_start(j, n, env, to_rank, &a) != 0) {
        TAP_OK(0, "%s: start", name);
        free(j);
        return;
    }
    char who[32];
    for (int r = 0; r < n; r++) {
        snprintf(who, sizeof(who), "rank %d (host", mode == 5 ? 1 - r : absent);
        if (r == absent && mode != 3) {
            continue;
        }
        if (mode != 2) {
            /* The rendezvous has the same 2 s deadline; on a very busy machine it could miss it. */
            const char *init = job_wait_key(j, r, "init", GUARD_S);
            if (!init || atoi(init) != 0) {
                TAP_OK(0, "%s: rank %d: tempo_comm_init_env (%s)", name, r,
                       job_get(j, r, "initmsg") ?: "no report");
                continue;
            }
        }
        job_wait_key(j, r, mode == 2 ? "status" : "later", GUARD_S);
        int st = job_status_of(j, r, "status");
        if (mode == 3) {
            const char *ok = job_get(j, r, "ok"), *wrong = job_get(j, r, "wrong");
            TAP_EQ_INT(st, TEMPO_OK, "%s: rank %d: %d queued all-reduces complete (%s)", name, r,
                       QUEUED, job_get(j, r, "msg") ?: "no report");
            TAP_EQ_INT(ok ? atoi(ok) : -1, QUEUED, "%s: rank %d: each with TEMPO_OK", name, r);
            TAP_EQ_INT(wrong ? atoi(wrong) : -1, 0, "%s: rank %d: and the right sum", name, r);
            TAP_EQ_INT(job_status_of(j, r, "later"), TEMPO_OK, "%s: rank %d: the job is healthy "
                       "after them", name, r);
            continue;
        }
        if (mode == 4) {
            const char *ok = job_get(j, r, "ok"), *wrong = job_get(j, r, "wrong");
            TAP_EQ_INT(ok ? atoi(ok) : -1, STALL_AT, "%s: rank %d: the %d all-reduces rank %d "
                       "took part in complete with TEMPO_OK", name, r, STALL_AT, absent);
            TAP_EQ_INT(wrong ? atoi(wrong) : -1, 0, "%s: rank %d: with the right sum", name, r);
        }
        const char *el = job_get(j, r, "elapsed");
        double e = el ? atof(el) : -1;
        const char *msg = job_get(j, r, "msg");
        TAP_EQ_INT(st, TEMPO_ERR_TIMEOUT, "%s: rank %d fails with TEMPO_ERR_TIMEOUT", name, r);
        TAP_OK(el && e >= timeout_s * 0.9 && e < GUARD_S, "%s: rank %d: after the deadline, not "
               "before, and without hanging (%.3f s; TEMPO_TIMEOUT %.0f s)", name, r, e, timeout_s);
        if (mode == 2) {
            if (r == 0) {
                TAP_CONTAINS(msg, "missing ranks 2", "%s: rank 0 names the missing rank", name);
            } else {
                TAP_CONTAINS(msg, "rendezvous", "%s: rank %d: the message speaks of the "
                             "rendezvous", name, r);
            }
            continue;
        }
        TAP_CONTAINS(msg, "TEMPO_TIMEOUT", "%s: rank %d: the message names TEMPO_TIMEOUT", name, r);
        TAP_CONTAINS(msg, who, "%s: rank %d: and the rank it waited for", name, r);
        TAP_OK(job_status_of(j, r, "later") < 0, "%s: rank %d: a later barrier fails too (%d)",
               name, r, job_status_of(j, r, "later"));
    }
    for (int r = 0; r < n; r++) {
        job_go(j, r);
    }
    job_end(j, GUARD_S, name);
}

int main(void)
{
    static const char *const shm_env[] = {"TEMPO_TIMEOUT=2s", NULL};
    static const char *const tcp_env[] = {"TEMPO_TIMEOUT=2s", "TEMPO_HOST_ID=%r", NULL};
    run_variant("all-reduce, shm", shm_env, 3, 2, 0, TIMEOUT_S);
    run_variant("recv, tcp", tcp_env, 2, 1, 1, TIMEOUT_S);
    run_variant("rendezvous", shm_env, 3, 2, 2, TIMEOUT_S);
    static const char *const q_shm_env[] = {"TEMPO_TIMEOUT=5s", NULL};
    static const char *const q_tcp_env[] = {"TEMPO_TIMEOUT=5s", "TEMPO_HOST_ID=%r", NULL};
    run_variant("queue, shm", q_shm_env, 2, -1, 3, 5);
    run_variant("queue, tcp", q_tcp_env, 2, -1, 3, 5);
    run_variant("stall, shm", shm_env, 3, 2, 4, TIMEOUT_S);
    run_variant("stall, tcp", tcp_env, 2, 1, 4, TIMEOUT_S);
    run_variant("crossed, shm", q_shm_env, 2, -1, 5, 5);
    run_variant("crossed, tcp", q_tcp_env, 2, -1, 5, 5);
    return tap_done();
}
