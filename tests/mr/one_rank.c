/*
 * one_rank.c — every algorithm of every collective runs on a communicator of one rank, however it
 * is forced (issue 27: a forced allreduce "shm" used to fail there with TEMPO_ERR_UNSUPPORTED,
 * "shared memory is not available on this communicator", while every other algorithm ran; one
 * rank shares nothing, so there is nothing to refuse).
 *
 * The communicators of one rank: a job of one rank (the world), and the sub-communicators that
 * tempo_comm_split() makes when every rank of a job takes its own color, in a job on one host (the
 * world has shared memory) and in a job whose ranks are all different hosts (TEMPO_HOST_ID=%r,
 * tcp). On each, every (collective, algorithm) pair of the table (tempo_algorithm_info(), so an
 * algorithm added later is covered without editing this file) runs
 *   forced by tempo_attr_t.algorithm, posted non-blocking and waited for;
 *   the same with a priority (the scheduled lane, whose chunks run the forced algorithm);
 *   forced by TEMPO_ALGO (one job per column of the table: allreduce:shm,broadcast:tree,... then
 *   allreduce:ring,broadcast:pipeline,...), through the blocking call;
 * each in two cases: float32 sum out of place and bfloat16 average in place (a half type through
 * the work buffer, and the division by one). On one rank every collective's result is its input
 * (broadcast and reduce at root 0), so every byte of the result is compared with the input, and
 * out-of-place inputs must come back unchanged. Ranks are forked by tests/fault/job.h; TAP.
 */
#include "config.h"

#include <tempo.h>

#include "tests/fault/job.h"

#define COUNT 1037 /* elements: odd, more than one chunk of the scheduled lane at 1 KiB (below) */
#define MAX_ALGOS 32

typedef struct {
    const char *coll, *name;
} algo_t;

static algo_t algos[MAX_ALGOS];
static int nalgos;

typedef struct {
    const char *label; /* the job's shape */
    int split;         /* 1: each rank splits off a communicator of its own; 0: the world (n = 1) */
    const char *algo_env; /* TEMPO_ALGO of the job, or NULL: force by attribute */
} shape_t;

enum { HOW_ATTR, HOW_SCHED, HOW_ENV };
static const char *const how_names[] = {"forced by attribute", "forced by attribute, scheduled",
                                        "forced by TEMPO_ALGO, blocking"};

/* Post coll on comm (blocking for HOW_ENV) and wait. One rank: sizes per rank equal the count. */
static tempo_status_t run_coll(tempo_comm_t comm, const char *coll, const char *algo, int how,
                               const void *s, void *r, tempo_dtype_t dt, tempo_op_t op)
{
    if (how == HOW_ENV) {
        if (!strcmp(coll, "allreduce")) {
            return tempo_allreduce(comm, s, r, COUNT, dt, op);
        } else if (!strcmp(coll, "reduce_scatter")) {
            return tempo_reduce_scatter(comm, s, r, COUNT, dt, op);
        } else if (!strcmp(coll, "allgather")) {
            return tempo_allgather(comm, s, r, COUNT, dt);
        } else if (!strcmp(coll, "broadcast")) {
            return tempo_broadcast(comm, s, r, COUNT, dt, 0);
        } else if (!strcmp(coll, "reduce")) {
            return tempo_reduce(comm, s, r, COUNT, dt, op, 0);
        } else if (!strcmp(coll, "alltoall")) {
            return tempo_alltoall(comm, s, r, COUNT, dt);
        } else if (!strcmp(coll, "barrier")) {
            return tempo_barrier(comm);
        }
        return TEMPO_ERR_INTERNAL;
    }
    tempo_attr_t attr = {.field_mask = TEMPO_ATTR_ALGORITHM, .algorithm = algo};
    if (how == HOW_SCHED) {
        attr.field_mask |= TEMPO_ATTR_PRIORITY | TEMPO_ATTR_CHUNK_BYTES;
        attr.priority = 3;
        attr.chunk_bytes = 1024; /* several chunks, each running the forced algorithm */
    }
    tempo_request_t req = NULL;
    tempo_status_t st;
    if (!strcmp(coll, "allreduce")) {
        st = tempo_iallreduce(comm, s, r, COUNT, dt, op, &attr, &req);
    } else if (!strcmp(coll, "reduce_scatter")) {
        st = tempo_ireduce_scatter(comm, s, r, COUNT, dt, op, &attr, &req);
    } else if (!strcmp(coll, "allgather")) {
        st = tempo_iallgather(comm, s, r, COUNT, dt, &attr, &req);
    } else if (!strcmp(coll, "broadcast")) {
        st = tempo_ibroadcast(comm, s, r, COUNT, dt, 0, &attr, &req);
    } else if (!strcmp(coll, "reduce")) {
        st = tempo_ireduce(comm, s, r, COUNT, dt, op, 0, &attr, &req);
    } else if (!strcmp(coll, "alltoall")) {
        st = tempo_ialltoall(comm, s, r, COUNT, dt, &attr, &req);
    } else if (!strcmp(coll, "barrier")) {
        st = tempo_ibarrier(comm, &attr, &req);
    } else {
        return TEMPO_ERR_INTERNAL;
    }
    return st == TEMPO_OK ? tempo_wait(&req) : st;
}

/* One (collective, algorithm, way of forcing, case) on comm: an rk_check. */
static void one(tempo_comm_t comm, const char *label, const algo_t *a, int how, int inplace)
{
    tempo_dtype_t dt = inplace ? TEMPO_BFLOAT16 : TEMPO_FLOAT32;
    tempo_op_t op = inplace ? TEMPO_AVG : TEMPO_SUM;
    size_t es = inplace ? 2 : 4, bytes = COUNT * es;
    uint8_t in[COUNT * 4], s[COUNT * 4], r[COUNT * 4];
    for (size_t i = 0; i < bytes; i++) {
        /* finite values of either type: the high byte of each element stays below 0x7f */
        in[i] = (uint8_t)((i % es == es - 1) ? 0x3c + (i / es) % 8 : (i * 131 + 17) & 0xff);
    }
    memcpy(s, in, bytes);
    memset(r, 0xa5, bytes);
    void *rb = inplace ? (void *)s : (void *)r;
    tempo_status_t st = run_coll(comm, a->coll, a->name, how, s, rb, dt, op);
    int barrier = !strcmp(a->coll, "barrier");
    int same = barrier || memcmp(rb, in, bytes) == 0;
    int kept = barrier || inplace || memcmp(s, in, bytes) == 0;
    rk_check(st == TEMPO_OK && same && kept, "%s: %s:%s %s, %s: %s%s%s", label, a->coll, a->name,
             how_names[how], inplace ? "bfloat16 avg in place" : "float32 sum out of place",
             st == TEMPO_OK ? "ok" : tempo_last_error(comm),
             same ? "" : "; the result is not the input", kept ? "" : "; the input changed");
}

static int rank_main(int rank, int size, void *arg)
{
    const shape_t *sh = arg;
    (void)size;
    tempo_comm_t world = rk_init(), comm = NULL;
    if (!world) {
        return 1;
    }
    if (sh->split) {
        tempo_status_t st = tempo_comm_split(world, rank, 0, &comm);
        if (!rk_check(st == TEMPO_OK, "%s: rank %d splits off a communicator of its own (%s)",
                      sh->label, rank, st == TEMPO_OK ? "ok" : tempo_last_error(world))) {
            tempo_comm_destroy(world);
            return 1;
        }
    } else {
        comm = world;
    }
    int csize = tempo_comm_size(comm);
    rk_check(csize == 1, "%s: the communicator has one rank (%d)", sh->label, csize);
    char label[400];
    snprintf(label, sizeof(label), "%s%s", sh->label, rank ? " (rank > 0)" : "");
    for (int i = 0; i < nalgos; i++) {
        if (sh->algo_env) {
            /* Only the algorithms this job's TEMPO_ALGO forces. */
            char want[96];
            snprintf(want, sizeof(want), "%s:%s", algos[i].coll, algos[i].name);
            const char *p = strstr(sh->algo_env, want);
            size_t l = strlen(want);
            if (!p || (p != sh->algo_env && p[-1] != ',') || (p[l] && p[l] != ',')) {
                continue;
            }
        }
        for (int inplace = 0; inplace < 2; inplace++) {
            if (sh->algo_env) {
                one(comm, label, &algos[i], HOW_ENV, inplace);
            } else {
                one(comm, label, &algos[i], HOW_ATTR, inplace);
                one(comm, label, &algos[i], HOW_SCHED, inplace);
            }
        }
    }
    if (comm != world) {
        tempo_comm_destroy(comm);
    }
    tempo_comm_destroy(world);
    return 0;
}

static void run_job(int n, const char *host_id, const char *what, const char *algo_env)
{
    char label[256], algo_var[512], host_var[64];
    snprintf(label, sizeof(label), "%s%s%s", what, algo_env ? ", TEMPO_ALGO=" : "",
             algo_env ? algo_env : "");
    shape_t sh = {label, n > 1, algo_env};
    const char *env[4] = {NULL};
    int k = 0;
    if (algo_env) {
        snprintf(algo_var, sizeof(algo_var), "TEMPO_ALGO=%s", algo_env);
        env[k++] = algo_var;
    }
    if (host_id) {
        snprintf(host_var, sizeof(host_var), "TEMPO_HOST_ID=%s", host_id);
        env[k++] = host_var;
    }
    job_t *j = calloc(1, sizeof(*j));
    if (!j || job_start(j, n, env, rank_main, &sh) != 0) {
        TAP_OK(0, "%s: the job starts", label);
        free(j);
        return;
    }
    job_end(j, 60, label);
}

int main(void)
{
    tempo_algorithm_info_t info;
    for (size_t i = 0; tempo_algorithm_info(i, &info) == TEMPO_OK && nalgos < MAX_ALGOS; i++) {
        algos[nalgos++] = (algo_t){info.collective, info.name};
    }
    TAP_OK(nalgos > 7, "the algorithm table lists %d algorithms", nalgos);
    static const struct {
        int n;
        const char *host_id, *what;
    } shapes[] = {
        {1, NULL, "a job of one rank"},
        {3, NULL, "3 ranks on one host, each its own sub-communicator"},
        {2, "%r", "2 ranks on two hosts (TEMPO_HOST_ID=%r), each its own sub-communicator"},
    };
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        run_job(shapes[s].n, shapes[s].host_id, shapes[s].what, NULL);
        /* Column c of the table: each collective's algorithm c (its last where it has fewer). */
        for (int c = 0;; c++) {
            char env[512] = "";
            int more = 0;
            for (int i = 0; i < nalgos; i++) {
                int first = i == 0 || strcmp(algos[i - 1].coll, algos[i].coll) != 0;
                if (!first) {
                    continue;
                }
                int k = 0;
                while (i + k + 1 < nalgos && !strcmp(algos[i + k + 1].coll, algos[i].coll) &&
                       k < c) {
                    k++;
                }
                more |= k == c && i + k + 1 < nalgos && !strcmp(algos[i + k + 1].coll, algos[i].coll);
                size_t l = strlen(env);
                snprintf(env + l, sizeof(env) - l, "%s%s:%s", l ? "," : "", algos[i + k].coll,
                         algos[i + k].name);
            }
            run_job(shapes[s].n, shapes[s].host_id, shapes[s].what, env);
            if (!more) {
                break;
            }
        }
    }
    return tap_done();
}
