/*
 * req_bench.c — the cost of many queued requests: N small non-blocking collectives posted in a
 * loop, then one tempo_waitall, for growing N. Time per request should not grow with N.
 *
 *   tempo-run -n 2 perf/req_bench [-t shm|tcp] [-N LIST] [-c LIST] [-k COUNT] [-J FILE]
 *
 * For each collective and each N: a barrier, then every rank posts N requests (COUNT float32
 * elements each, default 4; each request its own result slot), waits for all of them, and
 * checks every result element (exact: the inputs are small integers). The time is the slowest
 * rank's, from the first post to the end of the wait; the table shows it and the time per
 * request. -t tcp gives every rank its own host id (tcp between all ranks, through
 * tempo_config_t.host_id); -t shm (default) leaves the host ids alone, so ranks of one host use
 * shared memory. What it is not: a bandwidth benchmark (the requests are tiny on purpose, so the
 * time is the library's per-request overhead and queue handling).
 *
 * Collectives (-c, comma-separated): allreduce, allgather, broadcast, barrier, sendrecv (each
 * request a pair: isend to the next rank, irecv from the previous one, tag = index). Exit status
 * 1 when a request failed or a result was wrong, 2 for usage errors. Uses only include/tempo.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "perf/util.h"
#include "util/helpers.h"
#include "tempo.h"

#define MAX_NS 16

enum { C_ALLREDUCE, C_ALLGATHER, C_BROADCAST, C_BARRIER, C_SENDRECV, C_COUNT };
static const char *const cnames[C_COUNT] = {"allreduce", "allgather", "broadcast", "barrier",
                                            "sendrecv"};

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: tempo-run -n N req_bench [options]\n"
            "N small non-blocking requests posted, then one tempo_waitall; time per request.\n"
            "  -t shm|tcp  transport between the ranks of this host (default shm)\n"
            "  -N LIST     request counts (default 10000,20000,50000,100000; K suffix allowed)\n"
            "  -c LIST     collectives (default allreduce,allgather,broadcast,sendrecv;\n"
            "              also barrier)\n"
            "  -k COUNT    float32 elements per request (default 4)\n"
            "  -J FILE     also write the table as JSON\n"
            "  -h, --help  this help\n"
            "  --version   the package version\n");
}

/* Post request i of collective c (one or two requests into reqs). Returns the requests used. */
static int post(tempo_comm_t comm, int c, size_t i, const float *in, float *out, size_t k,
                tempo_request_t *reqs, tempo_status_t *st_p)
{
    int n = tempo_comm_size(comm), me = tempo_comm_rank(comm);
    switch (c) {
    case C_ALLREDUCE:
        *st_p = tempo_iallreduce(comm, in, out, k, TEMPO_FLOAT32, TEMPO_SUM, NULL, reqs);
        return 1;
    case C_ALLGATHER:
        *st_p = tempo_iallgather(comm, in, out, k, TEMPO_FLOAT32, NULL, reqs);
        return 1;
    case C_BROADCAST:
        *st_p = tempo_ibroadcast(comm, in, out, k, TEMPO_FLOAT32, (int)(i % (size_t)n), NULL,
                                 reqs);
        return 1;
    case C_BARRIER: *st_p = tempo_ibarrier(comm, NULL, reqs); return 1;
    default:
        *st_p = tempo_irecv(comm, out, k, TEMPO_FLOAT32, (me + n - 1) % n, (uint32_t)i, NULL,
                            reqs);
        if (*st_p == TEMPO_OK) {
            *st_p = tempo_isend(comm, in, k, TEMPO_FLOAT32, (me + 1) % n, (uint32_t)i, NULL,
                                reqs + 1);
        }
        return 2;
    }
}

/* Elements of request i's result that differ from the expected values (input of rank r: r + 1). */
static size_t wrong(tempo_comm_t comm, int c, size_t i, const float *out, size_t k)
{
    int n = tempo_comm_size(comm), me = tempo_comm_rank(comm);
    size_t bad = 0;
    size_t len = c == C_ALLGATHER ? k * (size_t)n : c == C_BARRIER ? 0 : k;
    for (size_t e = 0; e < len; e++) {
        float want;
        switch (c) {
        case C_ALLREDUCE: want = (float)(n * (n + 1) / 2); break;
        case C_ALLGATHER: want = (float)(e / k + 1); break;
        case C_BROADCAST: want = (float)(i % (size_t)n + 1); break;
        default: want = (float)((me + n - 1) % n + 1); break;
        }
        bad += out[e] != want;
    }
    return bad;
}

static int parse_list(char *s, size_t *v, int max, int names)
{
    int n = 0;
    for (char *t = strtok(s, ","); t; t = strtok(NULL, ",")) {
        if (n == max) {
            return -1;
        }
        if (names) {
            int c = 0;
            while (c < C_COUNT && strcmp(t, cnames[c]) != 0) {
                c++;
            }
            if (c == C_COUNT) {
                return -1;
            }
            v[n++] = (size_t)c;
        } else if (util_parse_size(t, &v[n++]) != 0 || v[n - 1] == 0) {
            return -1;
        }
    }
    return n;
}

int main(int argc, char **argv)
{
    size_t ns[MAX_NS] = {10000, 20000, 50000, 100000}, cs[C_COUNT] = {C_ALLREDUCE, C_ALLGATHER,
                                                                      C_BROADCAST, C_SENDRECV};
    int nn = 4, nc = 4;
    size_t k = 4;
    const char *transport = "shm", *json = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = 1;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--version")) {
            util_print_version("req_bench");
            return 0;
        } else if (!v) {
            ok = 0;
        } else if (!strcmp(a, "-t")) {
            transport = v;
            ok = !strcmp(v, "shm") || !strcmp(v, "tcp");
        } else if (!strcmp(a, "-N")) {
            ok = (nn = parse_list(v, ns, MAX_NS, 0)) > 0;
        } else if (!strcmp(a, "-c")) {
            ok = (nc = parse_list(v, cs, C_COUNT, 1)) > 0;
        } else if (!strcmp(a, "-k")) {
            ok = util_parse_size(v, &k) == 0 && k > 0 && k <= 1024;
        } else if (!strcmp(a, "-J")) {
            json = v;
        } else {
            ok = 0;
        }
        if (!ok) {
            usage(stderr);
            return 2;
        }
        i++;
    }

    tempo_config_t cfg = {0};
    if (!strcmp(transport, "tcp")) {
        cfg.field_mask = TEMPO_CONFIG_HOST_ID;
        cfg.host_id = "req_bench-%r";
    }
    tempo_comm_t comm;
    tempo_status_t st = tempo_comm_init(&cfg, &comm);
    if (st != TEMPO_OK) {
        fprintf(stderr, "req_bench: init: %s: %s\n", tempo_status_name(st),
                tempo_last_error(NULL));
        return 1;
    }
    int n = tempo_comm_size(comm), me = tempo_comm_rank(comm);
    size_t nmax = 0;
    for (int i = 0; i < nn; i++) {
        nmax = ns[i] > nmax ? ns[i] : nmax;
    }
    size_t slot = k * (size_t)n; /* room for an all-gather result */
    float *in = malloc(sizeof(float) * k);
    float *out = malloc(sizeof(float) * slot * nmax);
    tempo_request_t *reqs = malloc(sizeof(*reqs) * 2 * nmax);
    tempo_status_t *sts = malloc(sizeof(*sts) * 2 * nmax);
    FILE *jf = json && me == 0 ? fopen(json, "w") : NULL;
    if (!in || !out || !reqs || !sts || (json && me == 0 && !jf)) {
        fprintf(stderr, "req_bench: out of memory or cannot write %s\n", json ? json : "-");
        return 1;
    }
    for (size_t e = 0; e < k; e++) {
        in[e] = (float)(me + 1);
    }
    if (me == 0) {
        printf("# req_bench: %d ranks, %s, %zu x float32 per request\n", n, transport, k);
        printf("# %-10s %9s %10s %10s %8s\n", "coll", "N", "time_s", "us/req", "#wrong");
    }
    if (jf) {
        fprintf(jf, "{\"ranks\": %d, \"transport\": \"%s\", \"count\": %zu, \"results\": [", n,
                transport, k);
    }
    int failed = 0, first = 1;
    for (int ci = 0; ci < nc && !failed; ci++) {
        int c = (int)cs[ci];
        for (int ni = 0; ni < nn && !failed; ni++) {
            size_t N = ns[ni], nreq = 0;
            memset(out, 0xff, sizeof(float) * slot * N);
            tempo_barrier(comm);
            double t0 = util_now_s();
            for (size_t i = 0; i < N && st == TEMPO_OK; i++) {
                nreq += (size_t)post(comm, c, i, in, out + i * slot, k, reqs + nreq, &st);
            }
            if (st == TEMPO_OK) {
                st = tempo_waitall(nreq, reqs, sts);
            }
            double t = util_now_s() - t0, tmax = 0;
            if (st != TEMPO_OK) {
                fprintf(stderr, "req_bench: rank %d: %s N=%zu: %s: %s\n", me, cnames[c], N,
                        tempo_status_name(st), tempo_last_error(comm));
                failed = 1;
                break;
            }
            uint64_t bad = 0, badsum = 0;
            for (size_t i = 0; i < N; i++) {
                bad += wrong(comm, c, i, out + i * slot, k);
            }
            if (tempo_allreduce(comm, &t, &tmax, 1, TEMPO_FLOAT64, TEMPO_MAX) != TEMPO_OK ||
                tempo_allreduce(comm, &bad, &badsum, 1, TEMPO_UINT64, TEMPO_SUM) != TEMPO_OK) {
                failed = 1;
                break;
            }
            failed |= badsum != 0;
            if (me == 0) {
                printf("  %-10s %9zu %10.3f %10.2f %8llu\n", cnames[c], N, tmax, 1e6 * tmax / N,
                       (unsigned long long)badsum);
                fflush(stdout);
            }
            if (jf) {
                fprintf(jf, "%s{\"coll\": \"%s\", \"n\": %zu", first ? "" : ", ", cnames[c], N);
                perf_json_field(jf, "time_s", tmax);
                perf_json_field(jf, "us_per_req", 1e6 * tmax / N);
                fprintf(jf, ", \"wrong\": %llu}", (unsigned long long)badsum);
                first = 0;
            }
        }
    }
    if (jf) {
        fprintf(jf, "]}\n");
        fclose(jf);
    }
    free(in);
    free(out);
    free(reqs);
    free(sts);
    tempo_comm_destroy(comm);
    return failed;
}
