/*
 * comm_ids.c — communicator context ids are recycled, and a recycled id never delivers a message
 * of the communicator that had it before.
 *
 *   rounds   2 ranks split and destroy ROUNDS times (15-bit ids: 32767 would run out without
 *            recycling), mostly into one-rank communicators (color = rank, fast), every 16th
 *            round into a two-rank one that runs an all-reduce. Every split and destroy must
 *            return TEMPO_OK and every sum be right; at most two splits are alive at any time.
 *   stale    STALE times: a two-rank communicator X; rank 0 sends a message (tag 5) on X that rank
 *            1 never receives, either before rank 1 destroys X (it waits as unexpected) or after
 *            (it arrives after the destroy); both destroy X, meet in a barrier on the initial
 *            communicator (so each has the other's close marker and X's id is free on both: the
 *            next split reuses it), split again into Y, and rank 0 sends a new value with the same
 *            tag on Y: rank 1 must receive the new value, never the old one, and the payload
 *            size differs so an old message could not even be received quietly.
 * Both over shared memory, stale also over tcp (TEMPO_HOST_ID=%r).
 */
#include "config.h"

#include <tempo.h>

#include "tests/fault/job.h"

#define ROUNDS 40000
#define STALE 200
/* The hang guard, and each rank's last-resort alarm (FAULT_RANK_GUARD, job.h) past it: 40,000
 * rounds take 11 s on a quiet 2-core machine and over 120 s under make check -j16 there (all of
 * the suite's ranks on 2 cores), where the former 120 s guards ended them. */
#define GUARD_S 600.0
#define RANK_GUARD "630"

static int rounds(tempo_comm_t world, int rank)
{
    for (int i = 0; i < ROUNDS; i++) {
        int pair = i % 16 == 0;
        tempo_comm_t c = NULL;
        tempo_status_t st = tempo_comm_split(world, pair ? 0 : rank, 0, &c);
        if (st != TEMPO_OK) {
            rk_check(0, "rounds: split %d: %s", i, tempo_last_error(world));
            return 1;
        }
        if (pair) {
            int in = rank + i, out = -1;
            st = tempo_allreduce(c, &in, &out, 1, TEMPO_INT32, TEMPO_SUM);
            if (st != TEMPO_OK || out != 1 + 2 * i) {
                rk_check(0, "rounds: all-reduce %d: %d (%s)", i, out, tempo_last_error(c));
                return 1;
            }
        }
        st = tempo_comm_destroy(c);
        if (st != TEMPO_OK) {
            rk_check(0, "rounds: destroy %d: %s", i, tempo_last_error(world));
            return 1;
        }
    }
    rk_check(1, "rounds: %d splits and destroys", ROUNDS);
    return 0;
}

static int stale(tempo_comm_t world, int rank)
{
    int bad = 0;
    for (int i = 0; i < STALE && !bad; i++) {
        int late = i & 1; /* the old message arrives after rank 1 destroyed X */
        tempo_comm_t x = NULL, y = NULL;
        bad |= tempo_comm_split(world, 0, 0, &x) != TEMPO_OK;
        double old[2] = {-1.0 - i, -1.0 - i};
        if (!bad && rank == 0 && !late) {
            bad |= tempo_send(x, old, 2, TEMPO_FLOAT64, 1, 5) != TEMPO_OK;
        }
        if (!bad && rank == 1) {
            bad |= tempo_comm_destroy(x) != TEMPO_OK;
        }
        bad |= tempo_barrier(world) != TEMPO_OK; /* rank 1 has destroyed X */
        if (!bad && rank == 0) {
            if (late) {
                bad |= tempo_send(x, old, 2, TEMPO_FLOAT64, 1, 5) != TEMPO_OK;
            }
            bad |= tempo_comm_destroy(x) != TEMPO_OK;
        }
        bad |= tempo_barrier(world) != TEMPO_OK;
        bad |= tempo_comm_split(world, 0, 0, &y) != TEMPO_OK;
        if (bad) {
            break;
        }
        float v = 1.0f + (float)i, got = -1.0f;
        tempo_status_t st = rank == 0 ? tempo_send(y, &v, 1, TEMPO_FLOAT32, 1, 5)
                                      : tempo_recv(y, &got, 1, TEMPO_FLOAT32, 0, 5);
        if (rank == 1 && (st != TEMPO_OK || got != v)) {
            rk_check(0, "stale %d (%s): the successor's receive got %g (%s), want %g", i,
                     late ? "late" : "early", (double)got,
                     st == TEMPO_OK ? "ok" : tempo_last_error(y), (double)v);
            bad = 1;
        }
        bad |= tempo_comm_destroy(y) != TEMPO_OK;
    }
    rk_check(!bad, "stale: %d communicators never saw a message of their predecessor%s", STALE,
             bad ? " (a call failed)" : "");
    return bad;
}

static int ids_rank(int rank, int size, void *arg)
{
    (void)size;
    tempo_comm_t world;
    tempo_status_t st = tempo_comm_init_env(&world);
    if (!rk_check(st == TEMPO_OK, "init: %s", tempo_last_error(NULL))) {
        return 1;
    }
    int bad = stale(world, rank);
    if (arg) {
        bad |= rounds(world, rank);
    }
    tempo_comm_destroy(world);
    return bad;
}

static void run(const char *name, const char *const *env, int with_rounds)
{
    job_t *j = calloc(1, sizeof(*j));
    tap_diag("%s", name);
    if (job_start(j, 2, env, ids_rank, with_rounds ? j : NULL) != 0) {
        TAP_OK(0, "%s: start", name);
        free(j);
        return;
    }
    job_end(j, GUARD_S, name);
}

int main(void)
{
    static const char *const shm_env[] = {"TEMPO_TIMEOUT=20s", NULL};
    static const char *const tcp_env[] = {"TEMPO_TIMEOUT=20s", "TEMPO_HOST_ID=%r", NULL};
    setenv("FAULT_RANK_GUARD", RANK_GUARD, 0); /* unless the caller set one */
    run("shm", shm_env, 1);
    run("tcp", tcp_env, 0);
    return tap_done();
}
