/*
 * fault_blame.c — every survivor's error names the rank that actually stopped (issue 15, defect 5).
 *
 *   stopped    4 ranks loop all-reduces (TEMPO_TIMEOUT=3s); the test stops rank 3 with SIGSTOP.
 *              Rank 2 (say) has TEMPO_TIMEOUT=2s, so it gives up first, and then destroys its
 *              communicator and exits as a program would. Ranks 0 and 1 must name rank 3 as the
 *              rank that stopped progressing, never report rank 2 as the culprit ("has left"),
 *              and may name rank 2 only as the rank that gave up waiting for rank 3. Shared memory
 *              (all ranks wait for rank 3) and tcp, where the ranks wait for each other in pairs
 *              (recursive halving-doubling): rank 1 gives up while rank 0 waits for it (it must
 *              not report "rank 1 has left"), or rank 2 gives up while rank 0 waits for the
 *              healthy rank 1 (rank 0 must look past it).
 *   coordinator  4 ranks loop batches of scheduled (prioritized) all-reduces; the test stops the
 *              lane's coordinator (comm rank 0) with SIGSTOP. Ranks 1..3 must name rank 0 as the
 *              rank that stopped, not "its peers".
 *   reset      3 ranks over tcp loop all-reduces; rank 1 resets its tcp connections (connect with
 *              AF_UNSPEC: an RST to each peer) and stays alive. Ranks 0 and 2 must say that rank 1
 *              broke its connection although its process is still running, not that it died.
 *   closed     the same with shutdown (a FIN, as when a process dies): "closed its connection
 *              unexpectedly although its process N is still running", not "process died".
 * Time to error is printed for every survivor; the only time limits are hang guards.
 */
#include "config.h"

#include <dirent.h>
#include <tempo.h>

#include "tests/fault/job.h"

#define COUNT (1u << 16) /* floats: 256 KiB */
#define NBATCH 8         /* scheduled requests per batch */
#define GUARD_S 40.0

typedef struct {
    int mode;   /* 0 stopped, 1 coordinator, 2 reset, 3 closed */
    int victim; /* the rank stopped or resetting */
    int quitter; /* stopped: the rank with the shorter timeout that destroys and exits; else -1 */
} blame_arg_t;

/* Reset (RST: connect with AF_UNSPEC) or close (FIN: shutdown) every connected tcp socket of this
 * process: the rank's connections to its peers. The descriptors stay open. */
static int reset_tcp_connections(int fin)
{
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        int fd = atoi(e->d_name);
        struct sockaddr_storage sa;
        socklen_t len = sizeof(sa);
        int type = 0;
        socklen_t tl = sizeof(type);
        if (e->d_name[0] == '.' || fd == dirfd(d) ||
            getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_STREAM ||
            getpeername(fd, (struct sockaddr *)&sa, &len) != 0 || sa.ss_family != AF_INET) {
            continue;
        }
        struct sockaddr un = {.sa_family = AF_UNSPEC};
        n += (fin ? shutdown(fd, SHUT_RDWR) : connect(fd, &un, sizeof(un))) == 0;
    }
    if (d) {
        closedir(d);
    }
    return n;
}

/* One iteration: an all-reduce, or (coordinator mode) a batch of scheduled all-reduces. */
static tempo_status_t step(tempo_comm_t comm, const blame_arg_t *a, float *in, float *out,
                           long iter)
{
    if (a->mode != 1) {
        return tempo_allreduce(comm, in, out, COUNT, TEMPO_FLOAT32, TEMPO_SUM);
    }
    tempo_request_t req[NBATCH];
    tempo_status_t stv[NBATCH];
    size_t per = COUNT / NBATCH;
    for (int i = 0; i < NBATCH; i++) {
        tempo_attr_t at = {.field_mask = TEMPO_ATTR_PRIORITY | TEMPO_ATTR_TAG,
                           .priority = i % 3,
                           .tag = (uint64_t)(100 + i)};
        tempo_status_t st = tempo_iallreduce(comm, in + i * per, out + i * per, per,
                                             TEMPO_FLOAT32, TEMPO_SUM, &at, &req[i]);
        if (st != TEMPO_OK) {
            (void)tempo_waitall((size_t)i, req, stv);
            return st;
        }
    }
    (void)iter;
    return tempo_waitall(NBATCH, req, stv);
}

static int blame_rank(int rank, int size, void *arg)
{
    (void)size;
    const blame_arg_t *a = arg;
    if (rank == a->quitter) {
        setenv("TEMPO_TIMEOUT", "2s", 1); /* gives up first */
    }
    tempo_comm_t comm = rk_init();
    if (!comm) {
        return 1;
    }
    tempo_status_t st;
    float *in = malloc(COUNT * sizeof(float)), *out = malloc(COUNT * sizeof(float));
    for (size_t i = 0; i < COUNT; i++) {
        in[i] = 1.0f;
    }
    for (long iter = 0;; iter++) {
        if (rank == a->victim && iter == 3) {
            if (a->mode >= 2) {
                rk_put("faulttime", "%.6f", rk_now());
                rk_put("reset", "%d", reset_tcp_connections(a->mode == 3));
                rk_wait_go(); /* alive, its connections gone */
                _exit(0);
            }
            rk_put("inloop", "%ld", iter); /* the test stops us from here on */
        }
        st = step(comm, a, in, out, iter);
        if (st != TEMPO_OK) {
            rk_put("failtime", "%.6f", rk_now());
            rk_put("iters", "%ld", iter);
            rk_put("msg", "%s", tempo_last_error(comm));
            rk_put("status", "%d", (int)st);
            break;
        }
    }
    if (rank != a->quitter) {
        rk_wait_go(); /* stay alive until every survivor has reported */
    }
    rk_put("destroy", "%d", (int)tempo_comm_destroy(comm));
    free(in);
    free(out);
    return 0;
}

static void run_variant(const char *name, const char *const *env, int n, blame_arg_t a)
{
    job_t *j = calloc(1, sizeof(*j));
    char host[64], who[160], pid[32];
    gethostname(host, sizeof(host));
    host[sizeof(host) - 1] = '\0';
    if (job_start(j, n, env, blame_rank, &a) != 0) {
        TAP_OK(0, "%s: start %d ranks", name, n);
        free(j);
        return;
    }
    const char *v = job_wait_key(j, a.victim, a.mode >= 2 ? "reset" : "inloop", 60);
    TAP_OK(v != NULL, "%s: rank %d (pid %d) is inside the loop (%s)", name, a.victim,
           (int)j->pid[a.victim], v ? v : "no report");
    double t_fault = job_now();
    if (a.mode < 2) {
        job_kill(j, a.victim, SIGSTOP);
    } else if (job_get(j, a.victim, "faulttime")) {
        t_fault = atof(job_get(j, a.victim, "faulttime"));
    }
    snprintf(who, sizeof(who), "rank %d (host %s, pid %d)", a.victim, host, (int)j->pid[a.victim]);
    snprintf(pid, sizeof(pid), "process %d", (int)j->pid[a.victim]);
    for (int r = 0; r < n; r++) {
        if (r == a.victim) {
            continue;
        }
        job_wait_key(j, r, r == a.quitter ? "destroy" : "status", GUARD_S);
        const char *msg = job_get(j, r, "msg"), *ft = job_get(j, r, "failtime");
        int st = job_status_of(j, r, "status");
        tap_diag("%s: survivor %d: %s after %.3f s: %s", name, r,
                 tempo_status_name((tempo_status_t)st), ft ? atof(ft) - t_fault : -1.0,
                 msg ? msg : "(no report)");
        TAP_OK(st < 0 && st != 999, "%s: survivor %d fails, no hang (%s)", name, r,
               tempo_status_name((tempo_status_t)st));
        TAP_CONTAINS(msg, who, "%s: survivor %d names rank %d, its host and pid", name, r,
                     a.victim);
        if (a.mode >= 2) {
            TAP_CONTAINS(msg, pid, "%s: survivor %d says its process", name, r);
            TAP_CONTAINS(msg, "still running", "%s: survivor %d: is still running", name, r);
            TAP_OK(msg && !strstr(msg, "died"), "%s: survivor %d does not say it died", name, r);
            continue;
        }
        TAP_CONTAINS(msg, "stopped progressing", "%s: survivor %d: as the rank that stopped "
                     "progressing", name, r);
        TAP_OK(msg && !strstr(msg, "its peers"), "%s: survivor %d names a rank, not \"its "
               "peers\"", name, r);
        if (a.quitter >= 0 && r != a.quitter) {
            char q[32];
            snprintf(q, sizeof(q), "rank %d (host", a.quitter);
            TAP_OK(msg && (!strstr(msg, q) || strstr(msg, "gave up")) && !strstr(msg, "has left"),
                   "%s: survivor %d does not blame rank %d, which gave up and left (only says it "
                   "gave up)", name, r, a.quitter);
        }
    }
    for (int r = 0; r < n; r++) {
        if (r != a.victim) {
            job_go(j, r);
        }
    }
    if (a.mode >= 2) {
        job_go(j, a.victim);
    } else {
        job_kill(j, a.victim, SIGKILL); /* a stopped process dies of SIGKILL too */
    }
    job_finish(j, 30);
    for (int r = 0; r < n; r++) {
        char how[64];
        job_describe_exit(j, r, how, sizeof(how));
        if (r != a.victim) {
            TAP_OK(job_exited(j, r, 0), "%s: survivor %d exited 0 (%s)", name, r, how);
        }
    }
    job_free(j);
    free(j);
}

int main(void)
{
    static const char *const shm_env[] = {"TEMPO_TIMEOUT=3s", NULL};
    static const char *const tcp_env[] = {"TEMPO_TIMEOUT=3s", "TEMPO_HOST_ID=%r", NULL};
    static const char *const reset_env[] = {"TEMPO_TIMEOUT=20s", "TEMPO_HOST_ID=%r", NULL};
    run_variant("stopped, shm", shm_env, 4, (blame_arg_t){0, 3, 2});
    /* rhd: rank 0 waits for rank 1, which waits for rank 3; ranks 2 and 3 pair likewise. */
    run_variant("stopped, tcp, the rank that gives up is waited for", tcp_env, 4,
                (blame_arg_t){0, 3, 1});
    run_variant("stopped, tcp, a chain", tcp_env, 4, (blame_arg_t){0, 3, 2});
    run_variant("coordinator stopped, shm", shm_env, 4, (blame_arg_t){1, 0, -1});
    run_variant("coordinator stopped, tcp", tcp_env, 4, (blame_arg_t){1, 0, -1});
    run_variant("reset, tcp", reset_env, 3, (blame_arg_t){2, 1, -1});
    run_variant("closed, tcp", reset_env, 3, (blame_arg_t){3, 1, -1});
    return tap_done();
}
