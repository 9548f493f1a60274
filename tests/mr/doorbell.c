/*
 * doorbell.c — the shm doorbell (transport/shm.c): a rank that sleeps in a wait is woken by a
 * same-host peer's shared-memory data, not by its 1 ms timeout.
 *
 * Two ranks on one host (shared memory). Rank 0 stands for a pipeline stage or a straggler that
 * computes DELAY_MS before it produces (the delay is the workload, not a synchronisation: nothing
 * depends on where rank 1 is when it ends), then
 *   ring     sends a message (the transport's ring) that rank 1 waits for in tempo_recv;
 *   counter  joins an 8-byte all-reduce forced to the shm algorithm (its published counter), and a
 *            1 MiB one (the staged protocol's counters), that rank 1 waits in.
 * Rank 1 counts, through the world's wake counters (core/world.h, read under the lock), why its
 * sleeps ended. A round in which rank 1 was asleep when the data came must end by the bell; rank 1
 * may be awake at that moment (between two 1 ms sleeps) and then finds the data without one, so a
 * case repeats rounds, up to MAX_ROUNDS, until it saw a bell wake-up: the check is that it did, and
 * that every wait returned the right data. Without the doorbell no round rings, and the check fails
 * after MAX_ROUNDS x DELAY_MS.
 * With TEMPO_SHM_BELL=0 (a few rounds): no bell wake-up, the waits end by the 1 ms timeout and
 * still return the right data (the backstop).
 * Also: rank 1's doorbell is listed in /proc/net/unix under the job tag, and nothing there holds
 * the job uuid.
 * Time: about 0.3 s with the doorbell (one or two rounds per case), plus the start of two jobs.
 */
#include "config.h"

#include <tempo.h>

#include "core/world.h"
#include "tests/fault/job.h"

#define DELAY_MS 20
#define MAX_ROUNDS 40
#define OFF_ROUNDS 3
#define BIG (1u << 18) /* floats: 1 MiB, the staged protocol */

typedef struct {
    int bell;   /* TEMPO_SHM_BELL */
    int rounds; /* most rounds per case */
} db_arg_t;

static uint64_t wakes(tempo_comm_t comm, int why)
{
    tempo__world_t *w = comm->world;
    pthread_mutex_lock(&w->lock);
    uint64_t n = w->wakes[why];
    pthread_mutex_unlock(&w->lock);
    return n;
}

static void compute(void)
{
    struct timespec ts = {0, DELAY_MS * 1000000L};
    nanosleep(&ts, NULL);
}

/* One round of a case: rank 0 computes, then produces; rank 1 waits. Returns whether the data were
 * right (on rank 1; rank 0 reports 1). */
static int round_once(tempo_comm_t comm, int rank, const char *kind, int r, float *big)
{
    int ok = 1;
    if (!strcmp(kind, "ring")) {
        int v = 1000 + r;
        if (rank == 0) {
            compute();
            ok = tempo_send(comm, &v, 1, TEMPO_INT32, 1, 7) == TEMPO_OK;
        } else {
            int got = -1;
            ok = tempo_recv(comm, &got, 1, TEMPO_INT32, 0, 7) == TEMPO_OK && got == v;
        }
    } else if (!strcmp(kind, "small")) {
        int64_t v = rank == 0 ? 5 + r : 10, got = -1;
        if (rank == 0) {
            compute();
        }
        ok = tempo_allreduce(comm, &v, &got, 1, TEMPO_INT64, TEMPO_SUM) == TEMPO_OK &&
             got == 15 + r;
    } else {
        for (size_t i = 0; i < BIG; i++) {
            big[i] = (float)(rank + 1) * (float)(i % 7);
        }
        if (rank == 0) {
            compute();
        }
        ok = tempo_allreduce(comm, big, big, BIG, TEMPO_FLOAT32, TEMPO_SUM) == TEMPO_OK;
        for (size_t i = 0; i < BIG && ok; i++) {
            ok = big[i] == 3.0f * (float)(i % 7);
        }
    }
    return ok;
}

/* How many lines of /proc/net/unix (every user of the host may read it) hold `text`. */
static int unix_lines_with(const char *text)
{
    FILE *f = fopen("/proc/net/unix", "r");
    char line[512];
    int n = 0;
    while (f && fgets(line, sizeof(line), f)) {
        n += strstr(line, text) != NULL;
    }
    if (f) {
        fclose(f);
    }
    return n;
}

/* The doorbells' names, which any user of the host can list, carry the job tag and never the job
 * uuid (without a key, the uuid is the secret a peer's hello proves: transport/tcp.c). */
static void names_private(tempo_comm_t comm, int rank)
{
    tempo__world_t *w = comm->world;
    char uuid[32], mine[64];
    snprintf(uuid, sizeof(uuid), "%016llx", (unsigned long long)w->job_uuid);
    snprintf(mine, sizeof(mine), "@tempo-bell-%016llx-%d", (unsigned long long)w->job_tag, rank);
    int uses = unix_lines_with(uuid), bell = unix_lines_with(mine);
    rk_check(bell == 1 && uses == 0,
             "its doorbell is listed in /proc/net/unix by the job tag (%d lines), and no "
             "line holds the job uuid (%d lines)",
             bell, uses);
}

static int db_rank(int rank, int size, void *arg)
{
    (void)size;
    const db_arg_t *a = arg;
    tempo_comm_t comm = rk_init();
    if (!comm) {
        return 1;
    }
    if (a->bell && rank == 1) {
        names_private(comm, rank);
    }
    float *big = malloc(BIG * sizeof(float));
    static const char *const kinds[] = {"ring", "small", "staged"};
    for (int k = 0; k < 3; k++) {
        uint64_t bell0 = wakes(comm, TEMPO__WAKE_BELL), tmo0 = wakes(comm, TEMPO__WAKE_TIMEOUT);
        int ok = 1, r = 0;
        int32_t more = 1;
        for (; r < a->rounds && more; r++) {
            ok &= round_once(comm, rank, kinds[k], r, big);
            /* Both ranks go on until rank 1 saw a bell (with the doorbell on). */
            more = rank == 1 && (!a->bell || wakes(comm, TEMPO__WAKE_BELL) == bell0);
            int32_t any = more;
            ok &= tempo_allreduce(comm, &any, &more, 1, TEMPO_INT32, TEMPO_MAX) == TEMPO_OK;
        }
        if (rank != 1) {
            continue;
        }
        uint64_t bell = wakes(comm, TEMPO__WAKE_BELL) - bell0;
        uint64_t tmo = wakes(comm, TEMPO__WAKE_TIMEOUT) - tmo0;
        rk_check(ok, "bell %d, %s: every wait returned the right data (%d rounds)", a->bell,
                 kinds[k], r);
        if (a->bell) {
            rk_check(bell > 0,
                     "%s: rank 1, sleeping while rank 0 computes %d ms, was woken by the doorbell "
                     "(%llu bell, %llu timeout wake-ups in %d rounds)",
                     kinds[k], DELAY_MS, (unsigned long long)bell, (unsigned long long)tmo, r);
        } else {
            rk_check(bell == 0 && tmo > 0,
                     "TEMPO_SHM_BELL=0, %s: no bell; the 1 ms timeout woke rank 1 (%llu bell, "
                     "%llu timeout wake-ups)",
                     kinds[k], (unsigned long long)bell, (unsigned long long)tmo);
        }
    }
    free(big);
    rk_put("destroy", "%d", (int)tempo_comm_destroy(comm));
    return 0;
}

static void run(const char *name, const char *const *env, db_arg_t *a)
{
    job_t *j = calloc(1, sizeof(*j));
    if (job_start(j, 2, env, db_rank, a) != 0) {
        TAP_OK(0, "%s: start", name);
        free(j);
        return;
    }
    job_end(j, 60, name);
}

int main(void)
{
    static const char *const on_env[] = {"TEMPO_TIMEOUT=20s", "TEMPO_SPIN=1ms",
                                         "TEMPO_ALGO=allreduce:shm", NULL};
    static const char *const off_env[] = {"TEMPO_TIMEOUT=20s", "TEMPO_SPIN=1ms",
                                          "TEMPO_ALGO=allreduce:shm", "TEMPO_SHM_BELL=0", NULL};
    db_arg_t on = {1, MAX_ROUNDS}, off = {0, OFF_ROUNDS};
    run("doorbell on", on_env, &on);
    run("doorbell off", off_env, &off);
    return tap_done();
}
