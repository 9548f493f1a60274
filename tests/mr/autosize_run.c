/*
 * autosize_run.c — the scheduled lane's auto credit and chunk size on a real link: every rank
 * posts --iters iterations of --buckets scheduled float32 all-reduces of --bytes each (priorities
 * 0..buckets-1, no chunk_bytes, so TEMPO_CHUNK_BYTES and TEMPO_CREDIT_BYTES decide), waits for
 * them, and sleeps --sleep-ms (the next iteration's compute, which lets the lane drain). Values are
 * small integers, so every sum is exact: each result is checked against its reference, and a hash
 * of all results is printed, which tests/mr/autosize.sh compares across launches with auto and
 * fixed sizes. Before each iteration rank 0 writes "# iteration K" to stderr, where the library's
 * TEMPO_DEBUG=INFO lines go too, so the script can tell in which iteration each credit change of
 * the coordinator happened. At the end each rank prints one line to stdout:
 *     RESULT rank R wrong N hash H
 * Exit status 0 when every request succeeded and every value was right, 1 otherwise, 2 for usage.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tempo.h"

static int parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi) {
        return -1;
    }
    *out = v;
    return 0;
}

int main(int argc, char **argv)
{
    long iters = 20, nb = 8, bytes = 256 << 10, sleep_ms = 5;
    for (int i = 1; i < argc; i++) {
        long *dst = !strcmp(argv[i], "--iters")      ? &iters
                    : !strcmp(argv[i], "--buckets")  ? &nb
                    : !strcmp(argv[i], "--bytes")    ? &bytes
                    : !strcmp(argv[i], "--sleep-ms") ? &sleep_ms
                                                     : NULL;
        if (!dst || i + 1 >= argc || parse_int(argv[++i], dst == &bytes ? 4 : 0, 1L << 30, dst) ||
            (dst != &sleep_ms && *dst < 1)) {
            fprintf(stderr,
                    "usage: autosize_run [--iters N] [--buckets N] [--bytes N] [--sleep-ms N]\n");
            return 2;
        }
    }
    tempo_comm_t comm;
    if (tempo_comm_init_env(&comm) != TEMPO_OK) {
        fprintf(stderr, "autosize_run: init failed: %s\n", tempo_last_error(NULL));
        return 1;
    }
    int rank = tempo_comm_rank(comm), size = tempo_comm_size(comm);
    size_t count = (size_t)bytes / sizeof(float);
    float *in = malloc((size_t)nb * count * sizeof(float));
    float *out = malloc((size_t)nb * count * sizeof(float));
    tempo_request_t *rq = calloc((size_t)nb, sizeof(*rq));
    if (!in || !out || !rq) {
        fprintf(stderr, "autosize_run: out of memory\n");
        return 1;
    }
    long wrong = 0, failed = 0;
    uint64_t hash = 1469598103934665603ull;
    for (long it = 0; it < iters && !failed; it++) {
        if (rank == 0) {
            fprintf(stderr, "# iteration %ld\n", it);
            fflush(stderr);
        }
        for (long b = 0; b < nb; b++) {
            for (size_t i = 0; i < count; i++) {
                in[(size_t)b * count + i] =
                    (float)((i * 7 + (size_t)b * 13 + (size_t)it) % 1000 + (size_t)rank);
            }
        }
        for (long b = 0; b < nb && !failed; b++) {
            tempo_attr_t at = {0};
            at.field_mask = TEMPO_ATTR_PRIORITY | TEMPO_ATTR_TAG;
            at.priority = (int)b;
            at.tag = (uint64_t)b + 1;
            if (tempo_iallreduce(comm, in + (size_t)b * count, out + (size_t)b * count, count,
                                 TEMPO_FLOAT32, TEMPO_SUM, &at, &rq[b]) != TEMPO_OK) {
                fprintf(stderr, "autosize_run: rank %d: post failed: %s\n", rank,
                        tempo_last_error(comm));
                failed = 1;
            }
        }
        for (long b = 0; b < nb && !failed; b++) {
            if (tempo_wait(&rq[b]) != TEMPO_OK) {
                fprintf(stderr, "autosize_run: rank %d: wait failed: %s\n", rank,
                        tempo_last_error(comm));
                failed = 1;
            }
        }
        for (long b = 0; b < nb && !failed; b++) {
            for (size_t i = 0; i < count; i++) {
                float want = (float)((long)((i * 7 + (size_t)b * 13 + (size_t)it) % 1000) * size +
                                     (long)size * (size - 1) / 2);
                float got = out[(size_t)b * count + i];
                uint32_t u;
                memcpy(&u, &got, sizeof(u));
                hash = (hash ^ u) * 1099511628211ull;
                wrong += got != want;
            }
        }
        struct timespec ts = {sleep_ms / 1000, (sleep_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    printf("RESULT rank %d wrong %ld hash %016llx\n", rank, wrong, (unsigned long long)hash);
    fflush(stdout);
    tempo_comm_destroy(comm);
    free(in);
    free(out);
    free(rq);
    return failed || wrong ? 1 : 0;
}
