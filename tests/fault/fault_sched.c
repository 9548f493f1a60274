/*
 * fault_sched.c — a rank killed with SIGKILL while 20 scheduled requests are in flight.
 *
 * Four ranks each post the same 20 scheduled all-reduces (priorities, tags, chunks of 256 KiB with
 * little credit, so most are queued behind the running ones). The victim posts its 20 and then
 * stops taking part: it reports "posted" and blocks on its control pipe without calling into the
 * library, and its progress thread is off (TEMPO_PROGRESS_THREAD=0), so no request can complete
 * anywhere. The test kills it by pid. Every survivor waits for all 20 requests: each one must fail
 * with TEMPO_ERR_REMOTE, within a few seconds, and the error must name the dead rank (number,
 * host, pid). Variants: shared memory, tcp, and tcp with the coordinator (rank 0) as the victim.
 */
#include "config.h"

#include <tempo.h>

#include "tests/fault/job.h"

#define NRANKS 4
#define NREQ 20
#define COUNT (1u << 19) /* floats per request: 2 MiB */
#define DETECT_GUARD_S 10.0

typedef struct {
    int victim;
} sched_arg_t;

static int sched_rank(int rank, int size, void *arg)
{
    (void)size;
    const sched_arg_t *a = arg;
    if (rank == a->victim) {
        setenv("TEMPO_PROGRESS_THREAD", "0", 1);
    }
    tempo_comm_t comm = rk_init();
    if (!comm) {
        return 1;
    }
    tempo_status_t st;
    float *buf = malloc((size_t)NREQ * COUNT * sizeof(float));
    for (size_t i = 0; i < (size_t)NREQ * COUNT; i++) {
        buf[i] = (float)(rank + 1);
    }
    tempo_request_t req[NREQ];
    int posted = 0;
    for (int i = 0; i < NREQ; i++) {
        /* Every rank posts the same requests; the victim in reverse order. */
        int k = rank == a->victim ? NREQ - 1 - i : i;
        tempo_attr_t at = {.field_mask = TEMPO_ATTR_PRIORITY | TEMPO_ATTR_TAG | TEMPO_ATTR_NAME,
                           .priority = k % 5,
                           .tag = (uint64_t)(500 + k),
                           .name = "grad"};
        st = tempo_iallreduce(comm, buf + (size_t)k * COUNT, buf + (size_t)k * COUNT, COUNT,
                              TEMPO_FLOAT32, TEMPO_SUM, &at, &req[k]);
        posted += st == TEMPO_OK;
    }
    rk_put("posted", "%d", posted);
    if (rank == a->victim) {
        rk_wait_go(); /* killed here */
        return 0;
    }
    tempo_status_t stv[NREQ];
    st = tempo_waitall(NREQ, req, stv);
    rk_put("failtime", "%.6f", rk_now());
    int nremote = 0, nok = 0;
    for (int i = 0; i < NREQ; i++) {
        nremote += stv[i] == TEMPO_ERR_REMOTE;
        nok += stv[i] == TEMPO_OK;
    }
    rk_put("nremote", "%d", nremote);
    rk_put("nok", "%d", nok);
    rk_put("msg", "%s", tempo_last_error(comm));
    rk_put("status", "%d", (int)st);
    rk_wait_go();
    st = tempo_comm_destroy(comm);
    rk_put("destroy", "%d", (int)st);
    free(buf);
    return 0;
}

static void run_variant(const char *name, const char *const *env, int victim)
{
    job_t *j = calloc(1, sizeof(*j));
    sched_arg_t a = {victim};
    char host[64];
    gethostname(host, sizeof(host));
    host[sizeof(host) - 1] = '\0';
    if (job_start(j, NRANKS, env, sched_rank, &a) != 0) {
        TAP_OK(0, "%s: start 4 ranks", name);
        free(j);
        return;
    }
    for (int r = 0; r < NRANKS; r++) {
        const char *p = job_wait_key(j, r, "posted", 60);
        TAP_OK(p && atoi(p) == NREQ, "%s: rank %d posted %s of %d scheduled requests", name, r,
               p ? p : "none", NREQ);
    }
    double t_kill = job_now();
    job_kill(j, victim, SIGKILL);
    char who[160];
    snprintf(who, sizeof(who), "rank %d (host %s, pid %d)", victim, host, (int)j->pid[victim]);
    for (int r = 0; r < NRANKS; r++) {
        if (r == victim) {
            continue;
        }
        job_wait_key(j, r, "status", DETECT_GUARD_S + 20); /* the last key a survivor writes */
        const char *ft = job_get(j, r, "failtime");
        double took = ft ? atof(ft) - t_kill : -1;
        TAP_EQ_INT(job_status_of(j, r, "nremote"), NREQ,
                   "%s: survivor %d: all %d requests fail with TEMPO_ERR_REMOTE (%s completed)",
                   name, r, NREQ, job_get(j, r, "nok") ?: "?");
        TAP_OK(ft && took < DETECT_GUARD_S,
               "%s: survivor %d: within a few seconds of the kill (%.3f s; hang guard %.0f s)",
               name, r, took, DETECT_GUARD_S);
        TAP_CONTAINS(job_get(j, r, "msg"), who,
                     "%s: survivor %d: the error names the dead rank, its host and pid", name, r);
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
        if (r != victim) {
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
    static const char *const shm_env[] = {"TEMPO_TIMEOUT=60s", "TEMPO_CHUNK_BYTES=256K",
                                          "TEMPO_CREDIT_BYTES=512K", NULL};
    static const char *const tcp_env[] = {"TEMPO_TIMEOUT=60s", "TEMPO_CHUNK_BYTES=256K",
                                          "TEMPO_CREDIT_BYTES=512K", "TEMPO_HOST_ID=%r", NULL};
    run_variant("shm", shm_env, 2);
    run_variant("tcp", tcp_env, 2);
    run_variant("tcp, the coordinator (rank 0) killed", tcp_env, 0);
    return tap_done();
}
