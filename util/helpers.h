/*
 * helpers.h — plain helpers that the programs of this tree share: the tools, the perf programs,
 * tempo-train and the tests. Header-only and free of libtempo and MPI, so that a program that
 * links neither (tempo-run, the MPI baselines) can use it, and tempo-train needs nothing of perf/
 * or tools/ besides include/tempo.h.
 *
 * What it is not: the library's (core/ is that) or a place for anything with state.
 */
#ifndef TEMPO_UTIL_HELPERS_H
#define TEMPO_UTIL_HELPERS_H

#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Seconds on the monotonic clock (CLOCK_MONOTONIC), for intervals. */
static inline double util_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Sizes: "8", "1.5K", "64M", "1G" (K, M, G = powers of 1024, either case), as nccl-tests' -b/-e. */
/* *size_p = the value of s, rounded down to an integer; 0 on success, -1 for anything that is not
 * a non-negative number with an optional suffix, or is 2^50 or more. */
static inline int util_parse_size(const char *s, size_t *size_p)
{
    if (s == NULL || *s < '0' || *s > '9') {
        return -1;
    }
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0) {
        return -1;
    }
    switch (*end) {
    case 'k': case 'K': v *= 1024.0; end++; break;
    case 'm': case 'M': v *= 1024.0 * 1024; end++; break;
    case 'g': case 'G': v *= 1024.0 * 1024 * 1024; end++; break;
    default: break;
    }
    if (*end != '\0' || !(v < 1125899906842624.0)) {
        return -1;
    }
    *size_p = (size_t)v;
    return 0;
}

/* The `--version` line of every installed program: "PROG (tempo) VERSION\n" to stdout, the package
 * version from config.h (configure.ac's AC_INIT), so that every program of one build reports the
 * same release. The scripts print the same line with the version config.status substituted into
 * them (the .in files of perf/ and tools/). Not the library's run-time version: tempo_version()
 * (tempo.h) is that, and tempo-info prints both. */
static inline void util_print_version(const char *prog)
{
    printf("%s (%s) %s\n", prog, PACKAGE_NAME, PACKAGE_VERSION);
}

/* For the programs that join their job with MPI (tempo-train --backend mpi, perf's *_perf_mpi):
 * after MPI_Init, 1 with a sentence in msg when MPI made this process a job of one (mpi_size 1)
 * while tempo-run started it as one of several ranks, else 0. tempo-run gives every process it
 * starts TEMPO_SIZE; MPI_Init in a process mpirun did not start makes it a singleton, so
 * `tempo-run -n 2 prog_mpi` would run two independent one-rank jobs, writing the same files, and
 * say nothing. */
static inline int util_mpi_mislaunched(int mpi_size, char *msg, size_t len)
{
    const char *env = getenv("TEMPO_SIZE");
    int n = env ? atoi(env) : 0;
    if (mpi_size != 1 || n <= 1) {
        return 0;
    }
    snprintf(msg, len,
             "started by tempo-run as one of %d ranks, but MPI made this process a job of its own "
             "(MPI ranks are started by mpirun): launch it with mpirun -n %d (plus "
             "--oversubscribe when ranks exceed cores, --allow-run-as-root as root), not tempo-run",
             n, n);
    return 1;
}

#endif /* TEMPO_UTIL_HELPERS_H */
