/*
 * determinism.c — the determinism promise of tempo.h, tested through real processes: with the same
 * inputs, rank count and algorithm, a reduction's result is bitwise the same from run to run and
 * on every rank. Run by tests/mr/determinism.sh under tempo-run, several launches per rank count.
 *
 * Data are random floats of mixed magnitudes (float32, float64, bfloat16), so that, unlike in
 * coll_test, the result does depend on the order of the reduction (for bfloat16, whose sums
 * accumulate in float32, where the float32 sum rounds differently in another order). For every
 * algorithm of allreduce, reduce_scatter and reduce (forced through tempo_attr_t.algorithm;
 * "auto" is the blocking call), sum and avg, counts 1037 and ~1.5 MB, out of place and in place,
 * roots 0 and n-1, each rank
 *   - runs each case twice in a row and checks the two results are bitwise equal,
 *   - checks the result is close to a float64 reference (a deterministic answer could still be
 *     wrong; bounds are loose: this is not the exactness test, coll_test is),
 *   - writes a 64-bit hash of its result to DIR/h<rank>, one line "GROUP KEY HASH".
 * The script compares the hash files across ranks (allreduce: every rank the same) and across
 * launches (every rank and key the same), never trusting the library to compare for it.
 * Checks go to DIR/r<rank> as in mrtest.h.
 *
 * Usage: determinism --list | --out DIR [--big-bytes BYTES]
 * --big-bytes replaces the ~1.5 MB size with a smaller one, 64 KiB and up (mr_big_bytes()).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tempo.h"
#include "mrtest.h"

#define ODD_COUNT 1037
#define BIG_BYTES (3u * 1024 * 1024 / 2) /* the large size (default, and most), bytes */
#define MAX_ALGOS 16
#define NCOLL 3

enum { C_ALLREDUCE, C_REDUCE_SCATTER, C_REDUCE };
static const char *const coll_names[NCOLL] = {"allreduce", "reduce_scatter", "reduce"};
static const tempo_dtype_t dtypes[3] = {TEMPO_FLOAT32, TEMPO_FLOAT64, TEMPO_BFLOAT16};
static const tempo_op_t ops[2] = {TEMPO_SUM, TEMPO_AVG};

typedef struct {
    tempo_comm_t comm;
    int rank, size;
    mr_out_t out;
    FILE *hashes;
    int nalgo[NCOLL];
    const char *algo[NCOLL][MAX_ALGOS]; /* entry 0 NULL: automatic choice, blocking call */
    int fatal;
    size_t big_bytes; /* the large size, bytes: BIG_BYTES or --big-bytes */
} ctx_t;

/* Element g of rank r in case `seed`: a uniform value in [-2, 2) with a full 53-bit mantissa,
 * times 2^e, e in [-8, 8] (bfloat16: [-24, 24], so that even a float32 accumulator rounds), later
 * rounded to the dtype. Sums of such values depend on the order of the additions. */
static double gen_value(tempo_dtype_t dt, uint64_t seed, int r, size_t g)
{
    uint64_t h = mr_hash3(seed, (uint64_t)r, (uint64_t)g);
    double u = (double)(h >> 11) * 0x1p-53 * 4.0 - 2.0;
    int spread = dt == TEMPO_BFLOAT16 ? 24 : 8;
    int e = (int)(mr_mix64(h) % (uint64_t)(2 * spread + 1)) - spread;
    return ldexp(u, e);
}

/* Element size in bytes of the three dtypes used here (not from the library). */
static size_t esize(tempo_dtype_t dt)
{
    return dt == TEMPO_FLOAT64 ? 8 : dt == TEMPO_FLOAT32 ? 4 : 2;
}

static double load(tempo_dtype_t dt, const uint8_t *p)
{
    if (dt == TEMPO_FLOAT64) {
        double d;
        memcpy(&d, p, 8);
        return d;
    }
    if (dt == TEMPO_FLOAT32) {
        float f;
        memcpy(&f, p, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, p, 2);
    return mr_bf16_to_f32(h);
}

static void store(tempo_dtype_t dt, uint8_t *p, double v)
{
    if (dt == TEMPO_FLOAT64) {
        memcpy(p, &v, 8);
    } else if (dt == TEMPO_FLOAT32) {
        float f = (float)v;
        memcpy(p, &f, 4);
    } else {
        uint16_t h = mr_f32_to_bf16((float)v);
        memcpy(p, &h, 2);
    }
}

static uint64_t hash_bytes(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull ^ n;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        h = mr_mix64(h ^ w);
    }
    uint64_t w = 0;
    memcpy(&w, p + i, n - i);
    return mr_mix64(h ^ w);
}

static int is_fatal(tempo_status_t st)
{
    return st == TEMPO_ERR_REMOTE || st == TEMPO_ERR_TIMEOUT || st == TEMPO_ERR_ABORTED ||
           st == TEMPO_ERR_INTERNAL || st == TEMPO_ERR_SYSTEM || st == TEMPO_ERR_NOMEM;
}

static tempo_status_t run_call(ctx_t *c, int coll, const char *algo, const void *s, void *r,
                               size_t count, tempo_dtype_t dt, tempo_op_t op, int root)
{
    if (!algo) {
        switch (coll) {
        case C_ALLREDUCE: return tempo_allreduce(c->comm, s, r, count, dt, op);
        case C_REDUCE_SCATTER: return tempo_reduce_scatter(c->comm, s, r, count, dt, op);
        default: return tempo_reduce(c->comm, s, r, count, dt, op, root);
        }
    }
    tempo_attr_t attr = {.field_mask = TEMPO_ATTR_ALGORITHM, .algorithm = algo};
    tempo_request_t req = NULL;
    tempo_status_t st;
    switch (coll) {
    case C_ALLREDUCE: st = tempo_iallreduce(c->comm, s, r, count, dt, op, &attr, &req); break;
    case C_REDUCE_SCATTER:
        st = tempo_ireduce_scatter(c->comm, s, r, count, dt, op, &attr, &req);
        break;
    default: st = tempo_ireduce(c->comm, s, r, count, dt, op, root, &attr, &req); break;
    }
    return st == TEMPO_OK ? tempo_wait(&req) : st;
}

/* One case, run twice. */
static void run_case(ctx_t *c, int coll, const char *algo, tempo_dtype_t dt, tempo_op_t op,
                     size_t count, int inplace, int root, uint64_t seed)
{
    int n = c->size, me = c->rank;
    size_t es = esize(dt);
    size_t total = coll == C_REDUCE_SCATTER ? (size_t)n * count : count; /* send elements */
    size_t g0 = coll == C_REDUCE_SCATTER ? (size_t)me * count : 0; /* my result's first index */
    int has_result = coll != C_REDUCE || me == root;
    char group[80], key[120];
    snprintf(group, sizeof(group), "%s/%s", coll_names[coll], algo ? algo : "auto");
    char rt[24] = "";
    if (coll == C_REDUCE) {
        snprintf(rt, sizeof(rt), ":root=%d", root);
    }
    snprintf(key, sizeof(key), "%s:%s:count=%zu:%s%s", tempo_dtype_name(dt), tempo_op_name(op),
             count, inplace ? "in-place" : "out-of-place", rt);

    uint8_t *in = malloc(total * es + 1), *buf[2], *res[2];
    uint8_t *recv = malloc(count * es + 1);
    buf[0] = malloc(total * es + 1);
    buf[1] = malloc(total * es + 1);
    if (!in || !recv || !buf[0] || !buf[1]) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    for (size_t g = 0; g < total; g++) {
        store(dt, in + g * es, gen_value(dt, seed, me, g));
    }
    uint8_t *result[2] = {NULL, NULL};
    uint8_t *keep[2];
    keep[0] = malloc(count * es + 1);
    keep[1] = malloc(count * es + 1);
    if (!keep[0] || !keep[1]) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    for (int rep = 0; rep < 2; rep++) {
        memcpy(buf[rep], in, total * es);
        void *r;
        if (inplace) {
            r = coll == C_REDUCE_SCATTER ? buf[rep] + g0 * es : buf[rep];
        } else {
            memset(recv, 0xd6, count * es);
            r = coll == C_REDUCE && me != root ? NULL : recv;
        }
        tempo_status_t st = run_call(c, coll, algo, buf[rep], r, count, dt, op, root);
        if (st == TEMPO_ERR_UNSUPPORTED) {
            mr_result(&c->out, group, "SKIP", "%s: %s", key, mr_errtext(c->comm, st));
            goto out;
        }
        if (st != TEMPO_OK) {
            mr_result(&c->out, group, "FAIL", "%s (run %d): returned %s", key, rep + 1,
                      mr_errtext(c->comm, st));
            c->fatal |= is_fatal(st);
            goto out;
        }
        res[rep] = r;
        if (has_result) {
            memcpy(keep[rep], res[rep], count * es);
            result[rep] = keep[rep];
        }
    }
    if (!has_result) {
        mr_result(&c->out, group, "PASS", "%s: not the root", key);
        goto out;
    }
    if (memcmp(result[0], result[1], count * es) != 0) {
        size_t i = 0;
        while (memcmp(result[0] + i * es, result[1] + i * es, es) == 0) {
            i++;
        }
        mr_result(&c->out, group, "FAIL", "%s: two runs in a row differ at element %zu: %.17g "
                  "then %.17g", key, i, load(dt, result[0] + i * es), load(dt, result[1] + i * es));
        goto out;
    }
    /* Close to the float64 reference: |got - ref| <= tol * sum |x_r| (divided by n for avg). */
    double tol = dt == TEMPO_FLOAT64 ? 1e-13 : dt == TEMPO_FLOAT32 ? 1e-5 : 1.6e-2;
    for (size_t i = 0; i < count; i++) {
        double ref = 0, mag = 0;
        for (int q = 0; q < n; q++) {
            uint8_t tmp[8];
            store(dt, tmp, gen_value(dt, seed, q, g0 + i));
            double x = load(dt, tmp);
            ref += x;
            mag += fabs(x);
        }
        if (op == TEMPO_AVG) {
            ref /= n;
            mag /= n;
        }
        double got = load(dt, result[0] + i * es);
        if (!(fabs(got - ref) <= tol * mag + 1e-300)) {
            mr_result(&c->out, group, "FAIL", "%s: element %zu is %.17g, the float64 reference "
                      "is %.17g (allowed error %.3g)", key, i, got, ref, tol * mag);
            goto out;
        }
    }
    fprintf(c->hashes, "%s %s %016llx\n", group, key,
            (unsigned long long)hash_bytes(result[0], count * es));
    mr_result(&c->out, group, "PASS", "%s: two runs equal, close to the reference", key);
out:
    free(in);
    free(recv);
    free(buf[0]);
    free(buf[1]);
    free(keep[0]);
    free(keep[1]);
}

static void load_algos(ctx_t *c)
{
    for (int i = 0; i < NCOLL; i++) {
        c->nalgo[i] = 1;
        c->algo[i][0] = NULL;
    }
    tempo_algorithm_info_t info;
    for (size_t i = 0; tempo_algorithm_info(i, &info) == TEMPO_OK; i++) {
        for (int ci = 0; ci < NCOLL; ci++) {
            if (strcmp(info.collective, coll_names[ci]) == 0 && c->nalgo[ci] < MAX_ALGOS) {
                c->algo[ci][c->nalgo[ci]++] = info.name;
            }
        }
    }
}

int main(int argc, char **argv)
{
    static ctx_t ctx;
    ctx_t *c = &ctx;
    const char *dir = NULL;
    int list = 0;
    c->big_bytes = BIG_BYTES;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--list") == 0) {
            list = 1;
        } else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
            dir = argv[++i];
        } else if (strcmp(argv[i], "--big-bytes") == 0 && i + 1 < argc &&
                   (c->big_bytes = mr_big_bytes(argv[i + 1], BIG_BYTES)) != 0) {
            i++;
        } else {
            fprintf(stderr, "usage: %s --list | --out DIR [--big-bytes 65536..%u]\n", argv[0],
                    BIG_BYTES);
            return 2;
        }
    }
    load_algos(c);
    if (list) {
        for (int ci = 0; ci < NCOLL; ci++) {
            for (int ai = 0; ai < c->nalgo[ci]; ai++) {
                printf("%s/%s\n", coll_names[ci], c->algo[ci][ai] ? c->algo[ci][ai] : "auto");
            }
        }
        return 0;
    }
    if (!dir) {
        fprintf(stderr, "%s: --out DIR is required\n", argv[0]);
        return 2;
    }
    tempo_status_t st = tempo_comm_init_env(&c->comm);
    if (st != TEMPO_OK) {
        fprintf(stderr, "tempo_comm_init_env: %s\n", mr_errtext(NULL, st));
        return 1;
    }
    c->rank = tempo_comm_rank(c->comm);
    c->size = tempo_comm_size(c->comm);
    mr_out_open(&c->out, dir, c->rank);
    char path[4096];
    snprintf(path, sizeof(path), "%s/h%d", dir, c->rank);
    c->hashes = fopen(path, "w");
    if (!c->hashes) {
        fprintf(stderr, "cannot create %s\n", path);
        return 2;
    }

    uint64_t seed = 0x5eed;
    for (int coll = 0; coll < NCOLL && !c->fatal; coll++) {
        for (int ai = 0; ai < c->nalgo[coll] && !c->fatal; ai++) {
            for (int d = 0; d < 3 && !c->fatal; d++) {
                size_t es = esize(dtypes[d]);
                size_t counts[2] = {ODD_COUNT, c->big_bytes / es + 3};
                for (int o = 0; o < 2 && !c->fatal; o++) {
                    for (int ci = 0; ci < 2 && !c->fatal; ci++) {
                        /* reduce_scatter's count is per rank: keep its total ~1.5 MB too */
                        size_t count = coll == C_REDUCE_SCATTER && ci == 1
                                           ? counts[ci] / (size_t)c->size + 3 : counts[ci];
                        for (int ip = 0; ip < 2 && !c->fatal; ip++) {
                            for (int ri = 0; ri < (coll == C_REDUCE ? 2 : 1) && !c->fatal; ri++) {
                                /* the seed depends on the case, not on the algorithm, so
                                 * every algorithm reduces the same data */
                                uint64_t s = mr_hash3(seed, (uint64_t)(d * 4 + o * 2 + ci),
                                                      (uint64_t)c->size);
                                run_case(c, coll, c->algo[coll][ai], dtypes[d], ops[o], count, ip,
                                         ri ? c->size - 1 : 0, s);
                            }
                        }
                    }
                }
            }
        }
    }
    fclose(c->hashes);
    if (c->fatal) {
        fprintf(stderr, "rank %d: stopping after a fatal error (see the result file)\n", c->rank);
        fflush(c->out.f);
        _exit(1);
    }
    st = tempo_comm_destroy(c->comm);
    if (st != TEMPO_OK) {
        mr_result(&c->out, "destroy", "FAIL", "tempo_comm_destroy: %s", mr_errtext(NULL, st));
    }
    mr_out_close(&c->out);
    return 0;
}
