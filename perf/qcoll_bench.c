/*
 * qcoll_bench.c — compressed all-reduce against the uncompressed fp32 ring, in the same run.
 *
 *   tempo-run -n N qcoll_bench [-b BYTES] [-c SPEC]... [-R ROUNDS] [-w WARMUP] [-J FILE]
 *
 * Every rank holds BYTES of Gaussian float32 data (a stand-in for a gradient bucket). Each round
 * runs the fp32 ring all-reduce (algorithm "ring", no compressor) and then each compressor, one
 * after the other, each after a barrier; a call's time is the slowest rank's. Reported per
 * compressor: the median time, the effective bus bandwidth (uncompressed bytes: 2 (n-1)/n * BYTES /
 * time, the nccl-tests busbw of the data the caller synchronized), the speed-up over the ring
 * measured in the same rounds, the bits per coordinate that went on the wire (from the
 * compressor's counters: norms and headers included) and the relative L2 error of the result
 * against the exact (ring) sum. Run it across emulated hosts with perf/tempo-compress-net.
 */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "perf/util.h"
#include "util/helpers.h"
#include "tempo.h"

#define MAX_SPECS 32

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: tempo-run -n N qcoll_bench [options]\n"
            "Compressed all-reduce against the uncompressed fp32 ring in the same run.\n"
            "  -b BYTES   bytes of float32 per rank (default 64M; K, M, G suffixes)\n"
            "  -c SPEC    a compressor spec (repeatable; default alq:bits=3 and\n"
            "             alq:bits=3,entropy=rans); see tempo-info -q\n"
            "  -R ROUNDS  timed rounds (default 5); medians are reported\n"
            "  -w WARMUP  untimed rounds first (default 1; adaptive levels are fitted there)\n"
            "  -J FILE    also write the table as JSON\n"
            "  -h, --help this help\n"
            "  --version  the package version\n");
}

static int check(tempo_status_t st, tempo_comm_t comm, const char *what)
{
    if (st != TEMPO_OK) {
        fprintf(stderr, "qcoll_bench: %s: %s: %s\n", what, tempo_status_name(st),
                tempo_last_error(comm));
        return -1;
    }
    return 0;
}

/* One all-reduce; returns the slowest rank's seconds, or -1. */
static double timed(tempo_comm_t comm, const float *x, float *y, size_t n, tempo_compressor_t qc)
{
    tempo_attr_t a = {0};
    if (qc) {
        a.field_mask = TEMPO_ATTR_COMPRESSOR | TEMPO_ATTR_TAG;
        a.compressor = qc;
        a.tag = 1;
    } else {
        a.field_mask = TEMPO_ATTR_ALGORITHM;
        a.algorithm = "ring";
    }
    if (check(tempo_barrier(comm), comm, "barrier")) {
        return -1;
    }
    double t0 = util_now_s();
    tempo_request_t req;
    tempo_status_t st = tempo_iallreduce(comm, x, y, n, TEMPO_FLOAT32, TEMPO_SUM, &a, &req);
    if (st == TEMPO_OK) {
        st = tempo_wait(&req);
    }
    if (check(st, comm, qc ? tempo_compressor_spec(qc) : "fp32 ring")) {
        return -1;
    }
    double t = util_now_s() - t0, tmax = t;
    if (check(tempo_allreduce(comm, &t, &tmax, 1, TEMPO_FLOAT64, TEMPO_MAX), comm, "max")) {
        return -1;
    }
    return tmax;
}

int main(int argc, char **argv)
{
    size_t bytes = 64u << 20;
    const char *specs[MAX_SPECS];
    int nspecs = 0, rounds = 5, warmup = 1;
    const char *json = NULL;
    int c;
    static const struct option lo[] = {
        {"help", no_argument, NULL, 'h'}, {"version", no_argument, NULL, 'V'}, {NULL, 0, NULL, 0}};
    while ((c = getopt_long(argc, argv, "b:c:R:w:J:h", lo, NULL)) != -1) {
        switch (c) {
        case 'b':
            if (util_parse_size(optarg, &bytes) || bytes < 4) {
                fprintf(stderr, "qcoll_bench: -b %s: expected a byte count like 64M\n", optarg);
                return 2;
            }
            break;
        case 'c':
            if (nspecs == MAX_SPECS) {
                fprintf(stderr, "qcoll_bench: at most %d -c\n", MAX_SPECS);
                return 2;
            }
            specs[nspecs++] = optarg;
            break;
        case 'R': rounds = atoi(optarg); break;
        case 'w': warmup = atoi(optarg); break;
        case 'J': json = optarg; break;
        case 'h': usage(stdout); return 0;
        case 'V': util_print_version("qcoll_bench"); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (rounds < 1 || warmup < 0 || optind < argc) {
        usage(stderr);
        return 2;
    }
    if (!nspecs) {
        specs[nspecs++] = "alq:bits=3";
        specs[nspecs++] = "alq:bits=3,entropy=rans";
    }
    tempo_comm_t comm;
    if (check(tempo_comm_init_env(&comm), NULL, "init")) {
        return 1;
    }
    int rank = tempo_comm_rank(comm), n = tempo_comm_size(comm);
    tempo_compressor_t qc[MAX_SPECS];
    for (int i = 0; i < nspecs; i++) {
        if (tempo_compressor_create(specs[i], &qc[i]) != TEMPO_OK) {
            if (rank == 0) {
                fprintf(stderr, "qcoll_bench: -c %s: %s\n", specs[i], tempo_last_error(NULL));
            }
            return 2;
        }
    }
    size_t count = bytes / 4;
    float *x = malloc(count * 4), *y = malloc(count * 4), *ref = malloc(count * 4);
    if (!x || !y || !ref) {
        fprintf(stderr, "qcoll_bench: out of memory for %zu bytes\n", bytes);
        return 1;
    }
    uint64_t s = mix(1000 + (uint64_t)rank);
    for (size_t i = 0; i < count; i += 2) {
        s = mix(s);
        double u1 = ((double)(s >> 11) + 0.5) / 9007199254740992.0;
        s = mix(s);
        double u2 = (double)(s >> 11) / 9007199254740992.0, r = sqrt(-2 * log(u1));
        x[i] = (float)(r * cos(6.283185307179586 * u2));
        if (i + 1 < count) {
            x[i + 1] = (float)(r * sin(6.283185307179586 * u2));
        }
    }
    double *t = calloc((size_t)(nspecs + 1) * (size_t)rounds, sizeof(double));
    double err[MAX_SPECS] = {0};
    if (rank == 0) {
        printf("# qcoll_bench: %d ranks, %zu bytes (%zu float32) per rank, %d rounds after %d "
               "warm-up, sum\n",
               n, bytes, count, rounds, warmup);
    }
    for (int rd = -warmup; rd < rounds; rd++) {
        for (int k = 0; k <= nspecs; k++) {
            double tk = timed(comm, x, k ? y : ref, count, k ? qc[k - 1] : NULL);
            if (tk < 0) {
                return 1;
            }
            if (rd >= 0) {
                t[(size_t)k * (size_t)rounds + (size_t)rd] = tk;
            }
            if (k && rd == rounds - 1) {
                double e2 = 0, n2 = 0;
                for (size_t i = 0; i < count; i++) {
                    e2 += ((double)y[i] - ref[i]) * ((double)y[i] - ref[i]);
                    n2 += (double)ref[i] * ref[i];
                }
                err[k - 1] = sqrt(e2 / n2);
            }
        }
        if (rank == 0 && rd >= 0) {
            printf("# round %d done\n", rd + 1);
            fflush(stdout);
        }
    }
    if (rank == 0) {
        FILE *jf = json ? fopen(json, "w") : NULL;
        if (json && !jf) {
            fprintf(stderr, "qcoll_bench: cannot write %s\n", json);
        }
        double med[MAX_SPECS + 1];
        for (int k = 0; k <= nspecs; k++) {
            qsort(t + (size_t)k * (size_t)rounds, (size_t)rounds, sizeof(double), cmp_d);
            med[k] = t[(size_t)k * (size_t)rounds + (size_t)rounds / 2];
        }
        double f = n > 1 ? 2.0 * (n - 1) / n : 1.0;
        printf("%-40s %10s %10s %8s %10s %10s\n", "# compressor", "time(ms)", "busbw(GB/s)",
               "vs ring", "bits/coord", "rel.err");
        printf("%-40s %10.2f %10.3f %8.2f %10.2f %10.2g\n", "fp32 ring (uncompressed)",
               med[0] * 1e3, f * (double)bytes / med[0] / 1e9, 1.0, 32.0, 0.0);
        if (jf) {
            fprintf(jf, "[\n  {\"compressor\": \"fp32 ring\", \"time_s\": %.6g, \"busbw_GBps\": "
                        "%.6g, \"speedup\": 1, \"bits_per_coord\": 32, \"rel_err\": 0}",
                    med[0], f * (double)bytes / med[0] / 1e9);
        }
        for (int k = 1; k <= nspecs; k++) {
            tempo_compressor_stats_t st;
            tempo_compressor_stats(qc[k - 1], &st);
            double bits = st.coords ? 8.0 * (double)st.bytes_out / (double)st.coords : 0;
            printf("%-40s %10.2f %10.3f %8.2f %10.2f %10.2g\n", specs[k - 1], med[k] * 1e3,
                   f * (double)bytes / med[k] / 1e9, med[0] / med[k], bits, err[k - 1]);
            if (jf) {
                fprintf(jf,
                        ",\n  {\"compressor\": \"%s\", \"spec\": \"%s\", \"time_s\": %.6g, "
                        "\"busbw_GBps\": %.6g, \"speedup\": %.4g, \"bits_per_coord\": %.4g, "
                        "\"rel_err\": %.4g}",
                        specs[k - 1], tempo_compressor_spec(qc[k - 1]), med[k],
                        f * (double)bytes / med[k] / 1e9, med[0] / med[k], bits, err[k - 1]);
            }
        }
        for (int k = 0; k < nspecs; k++) {
            printf("# %s = %s\n", specs[k], tempo_compressor_spec(qc[k]));
        }
        if (jf) {
            fprintf(jf, "\n]\n");
            fclose(jf);
        }
    }
    for (int k = 0; k < nspecs; k++) {
        tempo_compressor_destroy(qc[k]);
    }
    free(x);
    free(y);
    free(ref);
    free(t);
    return check(tempo_comm_destroy(comm), NULL, "destroy") ? 1 : 0;
}
