/*
 * fault_kill.c — a rank killed with SIGKILL in the middle of a long all-reduce.
 *
 * Four ranks run a loop of 4 MiB all-reduces. Once the victim is inside the loop it says so through
 * its report pipe, and the test kills it by pid with SIGKILL. Every survivor must then get
 * TEMPO_ERR_REMOTE from the all-reduce it is in, and again from a later call, within a few seconds
 * (TEMPO_TIMEOUT is 60 s, so a timeout cannot pass for a detection), and tempo_last_error() must
 * name the dead rank: its number, its host and its pid. Survivors stay alive until all of them have
 * reported, so no survivor's exit can be blamed instead of the victim. Then they destroy their
 * communicators and exit 0.
 *
 * Variants: the default transports (all ranks on this host: shared memory, the shm all-reduce), and
 * TEMPO_HOST_ID=%r (every rank its own "host": tcp and the ring all-reduce); victims rank 2 and 0.
 */
#include "config.h"

#include <tempo.h>

#include "tests/fault/job.h"

#define NRANKS 4
#define COUNT (1u << 20) /* floats: 4 MiB */
#define DETECT_GUARD_S 10.0 /* hang guard for the detection, far below TEMPO_TIMEOUT */

typedef struct {
    int victim;
} kill_arg_t;

static int kill_rank(int rank, int size, void *arg)
{
    const kill_arg_t *a = arg;
    tempo_comm_t comm = rk_init();
    if (!comm) {
        return 1;
    }
    tempo_status_t st;
    float *in = malloc(COUNT * sizeof(float)), *out = malloc(COUNT * sizeof(float));
    for (size_t i = 0; i < COUNT; i++) {
        in[i] = (float)(rank + 1);
    }
    int bad_values = 0;
    for (long iter = 0;; iter++) {
        if (rank == a->victim && iter == 3) {
            rk_put("inloop", "%ld", iter); /* the test kills us from here on */
        }
        st = tempo_allreduce(comm, in, out, COUNT, TEMPO_FLOAT32, TEMPO_SUM);
        if (st != TEMPO_OK) {
            rk_put("failtime", "%.6f", rk_now());
            rk_put("iters", "%ld", iter);
            rk_put("badvalues", "%d", bad_values);
            rk_put("msg", "%s", tempo_last_error(comm));
            rk_put("status", "%d", (int)st);
            break;
        }
        bad_values += out[0] != (float)(size * (size + 1) / 2) ||
                      out[COUNT - 1] != (float)(size * (size + 1) / 2);
    }
    st = tempo_allreduce(comm, in, out, 16, TEMPO_FLOAT32, TEMPO_SUM);
    rk_put("latermsg", "%s", tempo_last_error(comm));
    rk_put("later", "%d", (int)st);
    rk_wait_go(); /* stay alive until every survivor has reported */
    st = tempo_comm_destroy(comm);
    rk_put("destroy", "%d", (int)st);
    free(in);
    free(out);
    return 0;
}

static void run_variant(const char *name, const char *const *env, int victim)
{
    job_t *j = calloc(1, sizeof(*j));
    kill_arg_t a = {victim};
    char host[64];
    gethostname(host, sizeof(host));
    host[sizeof(host) - 1] = '\0';
    if (job_start(j, NRANKS, env, kill_rank, &a) != 0) {
        TAP_OK(0, "%s: start 4 ranks", name);
        free(j);
        return;
    }
    const char *v = job_wait_key(j, victim, "inloop", 60);
    TAP_OK(v != NULL, "%s: rank %d (pid %d) is inside the all-reduce loop", name, victim,
           (int)j->pid[victim]);
    double t_kill = job_now();
    job_kill(j, victim, SIGKILL);
    char who[160];
    snprintf(who, sizeof(who), "rank %d (host %s, pid %d)", victim, host, (int)j->pid[victim]);
    for (int r = 0; r < NRANKS; r++) {
        if (r == victim) {
            continue;
        }
        const char *later = job_wait_key(j, r, "later", DETECT_GUARD_S + 20);
        int st = job_status_of(j, r, "status");
        const char *msg = job_get(j, r, "msg");
        const char *ft = job_get(j, r, "failtime");
        double took = ft ? atof(ft) - t_kill : -1;
        TAP_EQ_INT(st, TEMPO_ERR_REMOTE, "%s: survivor %d: the pending all-reduce fails with "
                   "TEMPO_ERR_REMOTE", name, r);
        TAP_OK(ft && took < DETECT_GUARD_S, "%s: survivor %d: within a few seconds of the kill "
               "(%.3f s; hang guard %.0f s)", name, r, took, DETECT_GUARD_S);
        TAP_CONTAINS(msg, who, "%s: survivor %d: the error names the dead rank, its host and pid",
                     name, r);
        TAP_EQ_INT(job_status_of(j, r, "badvalues"), 0, "%s: survivor %d: the %s all-reduces "
                   "before the kill were right", name, r, job_get(j, r, "iters") ?: "?");
        TAP_EQ_INT(later ? atoi(later) : 999, TEMPO_ERR_REMOTE, "%s: survivor %d: a later "
                   "all-reduce fails with TEMPO_ERR_REMOTE too", name, r);
        TAP_CONTAINS(job_get(j, r, "latermsg"), who, "%s: survivor %d: and names the dead rank",
                     name, r);
    }
    for (int r = 0; r < NRANKS; r++) {
        if (r != victim) {
            job_go(j, r);
        }
    }
    job_finish(j, 30);
    for (int r = 0; r < NRANKS; r++) {
        char how[64];
        job_describe_exit(j, r, how, sizeof(how));
        if (r == victim) {
            TAP_OK(j->reaped[r] && WIFSIGNALED(j->status[r]) && WTERMSIG(j->status[r]) == SIGKILL,
                   "%s: the victim died of SIGKILL (%s)", name, how);
        } else {
            TAP_OK(job_exited(j, r, 0) && job_status_of(j, r, "destroy") == TEMPO_OK,
                   "%s: survivor %d destroyed its communicator and exited 0 (%s, destroy %d)", name,
                   r, how, job_status_of(j, r, "destroy"));
        }
    }
    job_free(j);
    free(j);
}

int main(void)
{
    static const char *const shm_env[] = {"TEMPO_TIMEOUT=60s", NULL};
    static const char *const tcp_env[] = {"TEMPO_TIMEOUT=60s", "TEMPO_HOST_ID=%r", NULL};
    run_variant("shm", shm_env, 2);
    run_variant("tcp", tcp_env, 2);
    run_variant("tcp, victim rank 0", tcp_env, 0);
    return tap_done();
}
