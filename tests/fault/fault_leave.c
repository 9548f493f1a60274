/*
 * fault_leave.c — a rank that leaves on purpose while the others wait for it in a collective.
 *
 *   destroy  rank 1 destroys its communicator (a clean departure: it says goodbye) while ranks 0
 *            and 2 wait in a barrier or an all-reduce that needs it. They must get TEMPO_ERR_REMOTE
 *            with a message saying that rank 1 left, not a timeout, and so must a later call.
 *   abort    rank 1 calls tempo_comm_abort() with a receive of its own pending, while ranks 0 and
 *            2 wait in an all-reduce. They must get TEMPO_ERR_REMOTE naming rank 1; rank 1's
 *            pending receive and every later call on it get TEMPO_ERR_ABORTED, and it can still
 *            destroy the communicator.
 * With the default transports (shared memory on this host) and with TEMPO_HOST_ID=%r (tcp).
 * The waiting ranks post their operation, say so, and only then is rank 1 told to leave;
 * TEMPO_TIMEOUT is 5 s, so a rank that is not told about the departure fails with
 * TEMPO_ERR_TIMEOUT instead (and the check fails) rather than hanging.
 */
#include "config.h"

#include <tempo.h>

#include "tests/fault/job.h"

#define NRANKS 3
#define LEAVER 1
#define COUNT (1u << 18) /* floats: 1 MiB */

typedef struct {
    int abort;   /* 0: destroy, 1: abort */
    int barrier; /* the others wait in a barrier instead of an all-reduce */
} leave_arg_t;

static int waiter(int rank, tempo_comm_t comm, const leave_arg_t *a)
{
    float *in = calloc(COUNT, sizeof(float)), *out = calloc(COUNT, sizeof(float));
    tempo_request_t req = NULL;
    tempo_status_t st = a->barrier ? tempo_ibarrier(comm, NULL, &req)
                                   : tempo_iallreduce(comm, in, out, COUNT, TEMPO_FLOAT32,
                                                      TEMPO_SUM, NULL, &req);
    rk_put("posted", "%d", (int)st);
    double t0 = rk_now();
    st = tempo_wait(&req);
    rk_put("elapsed", "%.3f", rk_now() - t0);
    rk_put("msg", "%s", tempo_last_error(comm));
    rk_put("status", "%d", (int)st);
    st = tempo_barrier(comm);
    rk_put("latermsg", "%s", tempo_last_error(comm));
    rk_put("later", "%d", (int)st);
    rk_wait_go();
    rk_put("destroy", "%d", (int)tempo_comm_destroy(comm));
    free(in);
    free(out);
    return 0;
}

static int leave_rank(int rank, int size, void *arg)
{
    const leave_arg_t *a = arg;
    tempo_comm_t comm = rk_init();
    if (!comm) {
        return 1;
    }
    tempo_status_t st;
    if (rank != LEAVER) {
        return waiter(rank, comm, a);
    }
    int dummy[4];
    tempo_request_t req = NULL;
    if (a->abort) {
        st = tempo_irecv(comm, dummy, 4, TEMPO_INT32, 0, 99, NULL, &req);
        rk_put("irecv", "%d", (int)st);
    }
    rk_wait_go(); /* the others are waiting in the all-reduce now */
    if (!a->abort) {
        rk_put("left", "%d", (int)tempo_comm_destroy(comm));
        return 0;
    }
    rk_put("abort", "%d", (int)tempo_comm_abort(comm));
    st = tempo_wait(&req);
    rk_put("pending", "%d", (int)st);
    rk_put("pendingmsg", "%s", tempo_last_error(comm));
    float x[4] = {0}, y[4];
    rk_put("allreduce", "%d", (int)tempo_allreduce(comm, x, y, 4, TEMPO_FLOAT32, TEMPO_SUM));
    rk_put("barrier", "%d", (int)tempo_barrier(comm));
    rk_put("send", "%d", (int)tempo_send(comm, x, 4, TEMPO_FLOAT32, 0, 1));
    rk_put("latermsg", "%s", tempo_last_error(comm));
    rk_put("destroy", "%d", (int)tempo_comm_destroy(comm));
    return 0;
}

static void run_variant(const char *name, const char *const *env, int do_abort, int barrier)
{
    job_t *j = calloc(1, sizeof(*j));
    leave_arg_t a = {do_abort, barrier};
    if (job_start(j, NRANKS, env, leave_rank, &a) != 0) {
        TAP_OK(0, "%s: start", name);
        free(j);
        return;
    }
    int posted = 1;
    for (int r = 0; r < NRANKS; r++) {
        if (r != LEAVER) {
            posted &= job_wait_key(j, r, "posted", 60) != NULL;
        }
    }
    if (do_abort) {
        posted &= job_wait_key(j, LEAVER, "irecv", 60) != NULL;
    }
    const char *what = barrier ? "barrier" : "all-reduce";
    TAP_OK(posted, "%s: ranks 0 and 2 have posted the %s", name, what);
    job_go(j, LEAVER);
    for (int r = 0; r < NRANKS; r++) {
        if (r == LEAVER) {
            continue;
        }
        const char *later = job_wait_key(j, r, "later", 40);
        const char *msg = job_get(j, r, "msg");
        int st = job_status_of(j, r, "status"), lst = later ? atoi(later) : 999;
        if (do_abort) {
            TAP_EQ_INT(st, TEMPO_ERR_REMOTE, "%s: rank %d: the %s fails with TEMPO_ERR_REMOTE "
                       "(after %s s)", name, r, what, job_get(j, r, "elapsed") ?: "?");
            TAP_CONTAINS(msg, "rank 1 (host", "%s: rank %d: the error names rank 1", name, r);
            TAP_CONTAINS(msg, "aborted", "%s: rank %d: and says it aborted", name, r);
            TAP_EQ_INT(lst, TEMPO_ERR_REMOTE, "%s: rank %d: a later barrier fails with "
                       "TEMPO_ERR_REMOTE", name, r);
            TAP_CONTAINS(job_get(j, r, "latermsg"), "rank 1", "%s: rank %d: naming rank 1", name,
                         r);
            continue;
        }
        int left_ok = st == TEMPO_ERR_REMOTE && msg && strstr(msg, "rank 1 (host") &&
                      strstr(msg, "left");
        TAP_OK(st < 0, "%s: rank %d: the %s fails, no hang (%s after %s s)", name, r, what,
               tempo_status_name((tempo_status_t)st), job_get(j, r, "elapsed") ?: "?");
        TAP_OK(left_ok, "%s: rank %d: TEMPO_ERR_REMOTE saying rank 1 left (got %s: %s)", name, r,
               tempo_status_name((tempo_status_t)st), msg ? msg : "(none)");
        TAP_EQ_INT(lst, TEMPO_ERR_REMOTE,
                   "%s: rank %d: a later barrier fails with TEMPO_ERR_REMOTE", name, r);
        TAP_CONTAINS(job_get(j, r, "latermsg"), "rank 1", "%s: rank %d: naming rank 1", name, r);
    }
    if (do_abort) {
        job_wait_key(j, LEAVER, "destroy", 30);
        TAP_EQ_INT(job_status_of(j, LEAVER, "abort"), TEMPO_OK, "%s: tempo_comm_abort returns OK",
                   name);
        TAP_EQ_INT(job_status_of(j, LEAVER, "pending"), TEMPO_ERR_ABORTED, "%s: the aborting "
                   "rank's pending receive fails with TEMPO_ERR_ABORTED", name);
        TAP_EQ_INT(job_status_of(j, LEAVER, "allreduce"), TEMPO_ERR_ABORTED, "%s: a later "
                   "all-reduce on the aborted communicator: TEMPO_ERR_ABORTED", name);
        TAP_EQ_INT(job_status_of(j, LEAVER, "barrier"), TEMPO_ERR_ABORTED, "%s: a later barrier: "
                   "TEMPO_ERR_ABORTED", name);
        TAP_EQ_INT(job_status_of(j, LEAVER, "send"), TEMPO_ERR_ABORTED, "%s: a later send: "
                   "TEMPO_ERR_ABORTED", name);
        TAP_CONTAINS(job_get(j, LEAVER, "latermsg"), "abort", "%s: the error text speaks of the "
                     "abort", name);
        TAP_EQ_INT(job_status_of(j, LEAVER, "destroy"), TEMPO_OK, "%s: the aborted communicator "
                   "can be destroyed", name);
    } else {
        job_wait_key(j, LEAVER, "left", 30);
        TAP_EQ_INT(job_status_of(j, LEAVER, "left"), TEMPO_OK, "%s: rank 1's destroy returns OK",
                   name);
    }
    for (int r = 0; r < NRANKS; r++) {
        if (r != LEAVER) {
            job_go(j, r);
        }
    }
    job_end(j, 30, name);
}

int main(void)
{
    /* TEMPO_TIMEOUT bounds the wait of a rank that is never told about the departure (5 s: far
     * more than a notice takes, little enough to keep the test short while the bug is there). */
    static const char *const shm_env[] = {"TEMPO_TIMEOUT=5s", NULL};
    static const char *const tcp_env[] = {"TEMPO_TIMEOUT=5s", "TEMPO_HOST_ID=%r", NULL};
    run_variant("destroy during a barrier, shm", shm_env, 0, 1);
    run_variant("destroy during a barrier, tcp", tcp_env, 0, 1);
    run_variant("destroy during an all-reduce, shm", shm_env, 0, 0);
    run_variant("abort during an all-reduce, shm", shm_env, 1, 0);
    run_variant("abort during an all-reduce, tcp", tcp_env, 1, 0);
    return tap_done();
}
