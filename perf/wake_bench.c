/*
 * wake_bench.c — how late a waiting rank wakes when its peer's data arrives after a long compute:
 * a 2-rank ping-pong in which each side computes (sleeps) before it replies.
 *
 *   tempo-run -n 2 perf/wake_bench [-d MS] [-r ROUNDS] [-c allreduce]
 *
 * Round: rank 0 computes MS (default 5) then sends 8 bytes to rank 1; rank 1, which waited in
 * tempo_recv meanwhile, computes MS and replies; rank 0 waited in tempo_recv. Both waits outlast
 * TEMPO_SPIN, so both ranks sleep in the engine's idle function when the data comes. Rank 0 prints
 * the round trip less the two computes as measured (each side times its own nanosleep, rank 1
 * sends its figure in the reply), min / median / max over ROUNDS (default 30) after 3 warm-up
 * rounds: the wake-up latency of two sleeping waits plus two 8-byte transfers. With -c allreduce
 * a round is two 8-byte all-reduces instead (rank 0 computes before the first, rank 1 before the
 * second): on one host with shared memory, a sleeper woken by the shm all-reduce's counters.
 * What it is not: a latency benchmark of busy ranks (sendrecv_perf, all_reduce_perf). Uses only
 * include/tempo.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tempo.h"
#include "util/helpers.h"

/* Sleep ms; returns the seconds it took. */
static double compute(double ms)
{
    double t0 = util_now_s();
    struct timespec ts = {(time_t)(ms / 1000), (long)((ms - 1000 * (long)(ms / 1000)) * 1e6)};
    nanosleep(&ts, NULL);
    return util_now_s() - t0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One round; on rank 0 returns the round trip less the computes (seconds), else 0; <0 on error. */
static double round_trip(tempo_comm_t comm, int rank, double ms, int allreduce)
{
    double t0 = util_now_s(), c0 = 0, c1 = 0;
    if (allreduce) {
        double mine = 0, got = 0;
        if (rank == 0) {
            c0 = compute(ms);
        }
        if (tempo_allreduce(comm, &mine, &got, 1, TEMPO_FLOAT64, TEMPO_SUM) != TEMPO_OK) {
            return -1;
        }
        if (rank == 1) {
            mine = compute(ms);
        }
        if (tempo_allreduce(comm, &mine, &got, 1, TEMPO_FLOAT64, TEMPO_SUM) != TEMPO_OK) {
            return -1;
        }
        c1 = got;
    } else if (rank == 0) {
        c0 = compute(ms);
        if (tempo_send(comm, &c0, 1, TEMPO_FLOAT64, 1, 1) != TEMPO_OK ||
            tempo_recv(comm, &c1, 1, TEMPO_FLOAT64, 1, 2) != TEMPO_OK) {
            return -1;
        }
    } else {
        if (tempo_recv(comm, &c0, 1, TEMPO_FLOAT64, 0, 1) != TEMPO_OK) {
            return -1;
        }
        c1 = compute(ms);
        if (tempo_send(comm, &c1, 1, TEMPO_FLOAT64, 0, 2) != TEMPO_OK) {
            return -1;
        }
    }
    return rank == 0 ? util_now_s() - t0 - c0 - c1 : 0;
}

int main(int argc, char **argv)
{
    double ms = 5;
    int rounds = 30, allreduce = 0, opt;
    while ((opt = getopt(argc, argv, "d:r:c:h")) != -1) {
        switch (opt) {
        case 'd': ms = atof(optarg); break;
        case 'r': rounds = atoi(optarg); break;
        case 'c': allreduce = !strcmp(optarg, "allreduce"); break;
        default:
            fprintf(stderr, "usage: tempo-run -n 2 wake_bench [-d MS] [-r ROUNDS] [-c allreduce]\n");
            return opt == 'h' ? 0 : 2;
        }
    }
    if (rounds < 1 || ms < 0) {
        fprintf(stderr, "wake_bench: -r must be >= 1 and -d >= 0\n");
        return 2;
    }
    tempo_comm_t comm;
    if (tempo_comm_init_env(&comm) != TEMPO_OK) {
        fprintf(stderr, "wake_bench: %s\n", tempo_last_error(NULL));
        return 1;
    }
    int rank = tempo_comm_rank(comm), rc = 0;
    if (tempo_comm_size(comm) != 2) {
        fprintf(stderr, "wake_bench: needs 2 ranks\n");
        tempo_comm_destroy(comm);
        return 2;
    }
    double *lat = calloc((size_t)rounds, sizeof(double));
    for (int r = -3; r < rounds && lat; r++) {
        double d = round_trip(comm, rank, ms, allreduce);
        if (d < 0) {
            fprintf(stderr, "wake_bench: rank %d: %s\n", rank, tempo_last_error(comm));
            rc = 1;
            break;
        }
        if (r >= 0) {
            lat[r] = d;
        }
    }
    if (rank == 0 && rc == 0 && lat) {
        qsort(lat, (size_t)rounds, sizeof(double), cmp_double);
        printf("# wake_bench: %s, compute %.1f ms per side, %d rounds\n",
               allreduce ? "2 x 8-byte all-reduce" : "8-byte ping-pong", ms, rounds);
        printf("round trip less compute (us): min %.1f  median %.1f  max %.1f\n", lat[0] * 1e6,
               lat[rounds / 2] * 1e6, lat[rounds - 1] * 1e6);
    }
    free(lat);
    tempo_comm_destroy(comm);
    return rc;
}
