/*
 * qcoll_test.c — compressed all-reduce and reduce-scatter on real ranks (launched by qcoll.sh).
 *
 * Groups (one result line per check, aggregated into TAP by the script):
 *   qcoll/identical  for every compressor: all-reduce (and reduce-scatter where supported) of
 *                    Gaussian data with partial buckets; every rank's result hashes the same
 *                    (rank 0's hash is broadcast and compared), and the result is finite; on one
 *                    rank the result is the input, bitwise (nothing is sent, nothing compressed)
 *   qcoll/accuracy   fp32-like compressors (none, fp16, bf16, alq, amq at 3 and 4 bits) are close
 *                    to the exact sum (relative L2 error below a per-compressor bound that is
 *                    about 3x what the quantizer's variance predicts)
 *   qcoll/unbiased   unbiased compressors: the mean of 3000 all-reduces of one small input is
 *                    within 4.5 standard errors of the exact sum on every coordinate
 *   qcoll/ef         error feedback (sign, topk, randk, powersgd): over 1000 calls on one input,
 *                    the mean output approaches the exact sum (relative error < 0.05)
 *   qcoll/lowrank    powersgd: inputs whose sum has rank <= r come out exact (1e-4)
 *   qcoll/sched      compressed requests posted with priorities, chunked, in shuffled orders
 *   qcoll/errors     int32 data, max, a forced algorithm, a bad spec
 * Data are seeded from (rank, call) and independent of the library's choices.
 */
#include "config.h"

#include <math.h>

#include "tests/mr/mrtest.h"

static int rank_, size_;

static double gauss(uint64_t *s)
{
    *s = mr_mix64(*s);
    double u1 = ((double)(*s >> 11) + 0.5) / 9007199254740992.0;
    *s = mr_mix64(*s);
    double u2 = (double)(*s >> 11) / 9007199254740992.0;
    return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}

static void fill(float *x, size_t n, uint64_t seed)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)gauss(&s);
    }
}

/* ||scale * y - ex|| / ||ex||, y given as floats (yf) or doubles (yd, when yf is NULL). */
static double rel_err(const float *yf, const double *yd, double scale, const double *ex, size_t n)
{
    double e2 = 0, n2 = 0;
    for (size_t i = 0; i < n; i++) {
        double d = scale * (yf ? (double)yf[i] : yd[i]) - ex[i];
        e2 += d * d;
        n2 += ex[i] * ex[i];
    }
    return sqrt(e2 / n2);
}

static uint64_t hash_bytes(const void *p, size_t n)
{
    const unsigned char *c = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h = (h ^ c[i]) * 1099511628211ull;
    }
    return h;
}

/* Whether every rank holds the same value. */
static int same_everywhere(tempo_comm_t comm, uint64_t h)
{
    uint64_t mn = h, mx = h;
    tempo_allreduce(comm, &h, &mn, 1, TEMPO_UINT64, TEMPO_MIN);
    tempo_allreduce(comm, &h, &mx, 1, TEMPO_UINT64, TEMPO_MAX);
    return mn == mx;
}

static tempo_status_t run(tempo_comm_t comm, tempo_compressor_t qc, int rs, const float *in,
                          float *out, size_t count, uint64_t tag)
{
    tempo_attr_t a = {0};
    a.field_mask = TEMPO_ATTR_COMPRESSOR | TEMPO_ATTR_TAG;
    a.compressor = qc;
    a.tag = tag;
    tempo_request_t req;
    tempo_status_t st =
        rs ? tempo_ireduce_scatter(comm, in, out, count / (size_t)size_, TEMPO_FLOAT32,
                                   TEMPO_SUM, &a, &req)
           : tempo_iallreduce(comm, in, out, count, TEMPO_FLOAT32, TEMPO_SUM, &a, &req);
    return st == TEMPO_OK ? tempo_wait(&req) : st;
}

/* Exact sum over ranks of fill(seed(rank)). */
static void exact_sum(double *sum, size_t n, uint64_t base)
{
    float *x = malloc(n * sizeof(float));
    memset(sum, 0, n * sizeof(double));
    for (int r = 0; r < size_; r++) {
        fill(x, n, mr_hash3(base, (uint64_t)r, 0));
        for (size_t i = 0; i < n; i++) {
            sum[i] += x[i];
        }
    }
    free(x);
}

typedef struct spec {
    const char *spec;
    double acc; /* relative L2 error bound on the all-reduce, 0: not checked. For alq/amq it is
                 * loose: the blocks here end in partial buckets (3845 of 8192 at 2 ranks), whose
                 * normalized coordinates are larger than the levels were fitted for, and the
                 * two-phase sum quantizes twice; it catches scale and indexing bugs (error >= 1). */
    int unbiased, ef, rs;
} spec_t;

static const spec_t specs[] = {
    {"none:min=0", 1e-5, 1, 0, 1},
    {"fp16:min=0", 2e-3, 0, 0, 1},
    {"bf16:min=0", 1.5e-2, 0, 0, 1},
    {"qsgd:bits=3,bucket=512,min=0", 0, 1, 0, 1},
    {"qsgdinf:bits=3,bucket=512,min=0", 0, 1, 0, 1},
    {"qsgd:bits=3,zero=1,bucket=512,min=0", 0, 1, 0, 1},
    {"nuqsgd:bits=3,bucket=512,min=0", 0, 1, 0, 1},
    {"terngrad:bucket=512,min=0", 0, 1, 0, 1},
    {"alq:bits=3,bucket=8192,min=0", 2.1, 1, 0, 1},
    {"alq-n:bits=4,bucket=8192,min=0", 0.8, 1, 0, 1},
    {"amq:bits=3,bucket=8192,min=0", 2.6, 1, 0, 1},
    {"amq-n:bits=3,bucket=8192,min=0,zero=1", 0, 1, 0, 1},
    {"alq:bits=3,bucket=8192,min=0,entropy=rans", 2.1, 1, 0, 1},
    {"alq:bits=3,bucket=8192,min=0,norm=linf", 0.8, 1, 0, 1}, /* partial buckets scale by max */
    {"qsgdinf:bits=4,bucket=512,min=0,entropy=zstd", 0, 1, 0, 1},
    {"sign:min=0", 0, 0, 1, 1},
    {"topk:ratio=0.05,min=0", 0, 0, 1, 1},
    {"randk:ratio=0.25,min=0", 0, 0, 1, 1},
    {"randk:ratio=0.25,ef=0,min=0", 0, 1, 0, 1},
    {"powersgd:rank=2,min=0", 0, 0, 1, 0},
};

static void check_identical(tempo_comm_t comm, mr_out_t *out, const spec_t *sp)
{
    tempo_compressor_t qc;
    tempo_status_t st = tempo_compressor_create(sp->spec, &qc);
    if (st != TEMPO_OK) {
        mr_result(out, "qcoll/identical", "FAIL", "%s: create: %s", sp->spec,
                  tempo_last_error(NULL));
        return;
    }
    size_t count = (size_t)size_ * 12000 + 37 * (size_t)size_; /* partial buckets */
    float *x = malloc(count * sizeof(float)), *y = malloc(count * sizeof(float));
    double *ex = malloc(count * sizeof(double));
    for (int rs = 0; rs <= sp->rs; rs++) {
        for (int call = 0; call < 3; call++) {
            uint64_t base = mr_hash3(1234, (uint64_t)call, (uint64_t)rs);
            fill(x, count, mr_hash3(base, (uint64_t)rank_, 0));
            st = run(comm, qc, rs, x, y, count, 7 + (uint64_t)rs);
            if (st != TEMPO_OK) {
                mr_result(out, "qcoll/identical", "FAIL", "%s %s call %d: %s", sp->spec,
                          rs ? "reduce-scatter" : "all-reduce", call, mr_errtext(comm, st));
                continue;
            }
            size_t m = rs ? count / (size_t)size_ : count;
            int finite = 1;
            for (size_t i = 0; i < m; i++) {
                finite &= isfinite(y[i]) != 0;
            }
            /* reduce-scatter blocks differ by rank: compare the all-gathered result */
            uint64_t h;
            if (rs) {
                float *all = malloc(count * sizeof(float));
                tempo_allgather(comm, y, all, m, TEMPO_FLOAT32);
                h = hash_bytes(all, count * sizeof(float));
                memcpy(y, all, count * sizeof(float));
                free(all);
            } else {
                h = hash_bytes(y, m * sizeof(float));
            }
            int same = same_everywhere(comm, h);
            if (size_ == 1) { /* one rank sends nothing: exact (tempo.h) */
                int exact = !memcmp(x, y, count * sizeof(float));
                mr_result(out, "qcoll/identical", exact ? "PASS" : "FAIL",
                          "%s %s call %d on one rank: %s", sp->spec,
                          rs ? "reduce-scatter" : "all-reduce", call,
                          exact ? "the input, bitwise" : "NOT THE INPUT (compressed)");
            }
            mr_result(out, "qcoll/identical", same && finite ? "PASS" : "FAIL",
                      "%s %s call %d: %s, %s", sp->spec, rs ? "reduce-scatter" : "all-reduce",
                      call, same ? "bitwise equal on every rank" : "RESULTS DIFFER",
                      finite ? "finite" : "NOT FINITE");
            if (sp->acc > 0 && call == 2) {
                exact_sum(ex, count, base);
                double rel = rel_err(y, NULL, 1.0, ex, count);
                mr_result(out, "qcoll/accuracy", rel < sp->acc ? "PASS" : "FAIL",
                          "%s %s: relative L2 error %.3g (bound %.3g)", sp->spec,
                          rs ? "reduce-scatter" : "all-reduce", rel, sp->acc);
            }
        }
    }
    free(x);
    free(y);
    free(ex);
    tempo_compressor_destroy(qc);
}

/* Mean of many all-reduces of one input; unbiased: within 4.5 SE; ef: relative error < 0.05. */
static void check_mean(tempo_comm_t comm, mr_out_t *out, const spec_t *sp)
{
    tempo_compressor_t qc;
    const char *spec = sp->spec;
    if (tempo_compressor_create(spec, &qc) != TEMPO_OK) {
        mr_result(out, sp->unbiased ? "qcoll/unbiased" : "qcoll/ef", "FAIL", "%s: create: %s",
                  spec, tempo_last_error(NULL));
        return;
    }
    size_t n = 48 * (size_t)size_;
    int T = sp->unbiased ? 3000 : 1000;
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    double *s1 = calloc(n, sizeof(double)), *s2 = calloc(n, sizeof(double));
    double *ex = malloc(n * sizeof(double));
    uint64_t base = 99;
    fill(x, n, mr_hash3(base, (uint64_t)rank_, 0));
    exact_sum(ex, n, base);
    tempo_status_t st = TEMPO_OK;
    for (int t = 0; t < T && st == TEMPO_OK; t++) {
        st = run(comm, qc, 0, x, y, n, 5);
        for (size_t i = 0; i < n; i++) {
            s1[i] += y[i];
            s2[i] += (double)y[i] * y[i];
        }
    }
    const char *g = sp->unbiased ? "qcoll/unbiased" : "qcoll/ef";
    if (st != TEMPO_OK) {
        mr_result(out, g, "FAIL", "%s: %s", spec, mr_errtext(comm, st));
    } else if (sp->unbiased) {
        double worst = 0;
        for (size_t i = 0; i < n; i++) {
            double m = s1[i] / T, v = s2[i] / T - m * m;
            double se = sqrt((v > 0 ? v : 0) / T) + 1e-6 * fabs(ex[i]) + 1e-7;
            double z = fabs(m - ex[i]) / se;
            worst = z > worst ? z : worst;
        }
        mr_result(out, g, worst < 4.5 ? "PASS" : "FAIL",
                  "%s: mean of %d all-reduces, worst coordinate %.2f standard errors from the "
                  "exact sum (bound 4.5)",
                  spec, T, worst);
    } else {
        double rel = rel_err(NULL, s1, 1.0 / T, ex, n);
        mr_result(out, g, rel < 0.05 ? "PASS" : "FAIL",
                  "%s: mean of %d all-reduces with error feedback, relative error %.4f (bound "
                  "0.05)",
                  spec, T, rel);
    }
    free(x);
    free(y);
    free(s1);
    free(s2);
    free(ex);
    tempo_compressor_destroy(qc);
}

static void check_lowrank(tempo_comm_t comm, mr_out_t *out)
{
    tempo_compressor_t qc;
    tempo_compressor_create("powersgd:rank=3,min=0", &qc);
    size_t rows = 300, cols = 300, n = rows * cols; /* viewed as 300 x 300 */
    float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
    double *ex = calloc(n, sizeof(double));
    /* every rank: (rank + 1) * A B^T with the same A (300x2), B (300x2): the sum has rank 2 */
    uint64_t s = 5;
    double A[600], B[600];
    for (int i = 0; i < 600; i++) {
        A[i] = gauss(&s);
        B[i] = gauss(&s);
    }
    for (size_t i = 0; i < rows; i++) {
        for (size_t j = 0; j < cols; j++) {
            double v = A[2 * i] * B[2 * j] + A[2 * i + 1] * B[2 * j + 1];
            x[i * cols + j] = (float)(v * (rank_ + 1));
            ex[i * cols + j] = v * size_ * (size_ + 1) / 2.0;
        }
    }
    tempo_status_t st = run(comm, qc, 0, x, y, n, 11);
    double rel = rel_err(y, NULL, 1.0, ex, n);
    mr_result(out, "qcoll/lowrank", st == TEMPO_OK && rel < 1e-4 ? "PASS" : "FAIL",
              "powersgd rank 3 on a sum of rank 2: relative error %.3g (bound 1e-4)%s%s", rel,
              st == TEMPO_OK ? "" : ": ", st == TEMPO_OK ? "" : mr_errtext(comm, st));
    free(x);
    free(y);
    free(ex);
    tempo_compressor_destroy(qc);
}

/* Scheduled, chunked compressed requests in a rank-dependent posting order. */
static void check_sched(tempo_comm_t comm, mr_out_t *out)
{
    tempo_compressor_t qc;
    tempo_compressor_create("alq:bits=3,bucket=4096,min=0", &qc);
    enum { NR = 6 };
    size_t cnt[NR] = {70000, 5000, 33333, 120000, 4096, 65536};
    float *x[NR], *y[NR];
    tempo_request_t req[NR];
    int order[NR];
    for (int i = 0; i < NR; i++) {
        x[i] = malloc(cnt[i] * sizeof(float));
        y[i] = malloc(cnt[i] * sizeof(float));
        order[i] = i;
    }
    int ok = 1;
    for (int it = 0; it < 3 && ok; it++) {
        uint64_t s = mr_hash3(3, (uint64_t)rank_, (uint64_t)it);
        for (int i = NR - 1; i > 0; i--) {
            s = mr_mix64(s);
            int j = (int)(s % (uint64_t)(i + 1)), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        for (int k = 0; k < NR; k++) {
            int i = order[k];
            fill(x[i], cnt[i], mr_hash3(it, (uint64_t)rank_, (uint64_t)i));
            tempo_attr_t a = {0};
            a.field_mask = TEMPO_ATTR_COMPRESSOR | TEMPO_ATTR_TAG | TEMPO_ATTR_PRIORITY |
                           TEMPO_ATTR_CHUNK_BYTES;
            a.compressor = qc;
            a.tag = 100 + (uint64_t)i;
            a.priority = NR - i;
            a.chunk_bytes = 64 * 1024;
            if (tempo_iallreduce(comm, x[i], y[i], cnt[i], TEMPO_FLOAT32, TEMPO_AVG, &a,
                                 &req[i]) != TEMPO_OK) {
                ok = 0;
                req[i] = NULL;
            }
        }
        tempo_status_t st = tempo_waitall(NR, req, NULL);
        if (st != TEMPO_OK) {
            mr_result(out, "qcoll/sched", "FAIL", "iteration %d: %s", it, mr_errtext(comm, st));
            ok = 0;
            break;
        }
        for (int i = 0; i < NR; i++) {
            int same = same_everywhere(comm, hash_bytes(y[i], cnt[i] * sizeof(float)));
            if (!same) {
                ok = 0;
                mr_result(out, "qcoll/sched", "FAIL", "iteration %d request %d: results differ",
                          it, i);
            }
        }
    }
    if (ok) {
        mr_result(out, "qcoll/sched", "PASS",
                  "3 iterations of 6 chunked alq requests posted in shuffled orders: bitwise "
                  "equal on every rank");
    }
    for (int i = 0; i < NR; i++) {
        free(x[i]);
        free(y[i]);
    }
    tempo_compressor_destroy(qc);
}

static void expect(mr_out_t *out, tempo_comm_t comm, tempo_status_t got, tempo_status_t want,
                   const char *needle, const char *what)
{
    const char *msg = comm ? tempo_last_error(comm) : tempo_last_error(NULL);
    int ok = got == want && (!needle || strstr(msg, needle));
    mr_result(out, "qcoll/errors", ok ? "PASS" : "FAIL", "%s: %s (%s)", what,
              tempo_status_name(got), msg);
}

static void check_errors(tempo_comm_t comm, mr_out_t *out)
{
    tempo_compressor_t qc = NULL, bad = NULL;
    tempo_compressor_create("qsgd:min=0", &qc);
    int32_t iv[64] = {0}, io[64];
    tempo_attr_t a = {0};
    a.field_mask = TEMPO_ATTR_COMPRESSOR;
    a.compressor = qc;
    tempo_request_t req = NULL;
    tempo_status_t st = tempo_iallreduce(comm, iv, io, 64, TEMPO_INT32, TEMPO_SUM, &a, &req);
    if (st == TEMPO_OK) {
        st = tempo_wait(&req);
    }
    expect(out, comm, st, TEMPO_ERR_UNSUPPORTED, "float32", "int32 with a compressor");
    float fv[64] = {0}, fo[64];
    st = tempo_iallreduce(comm, fv, fo, 64, TEMPO_FLOAT32, TEMPO_MAX, &a, &req);
    if (st == TEMPO_OK) {
        st = tempo_wait(&req);
    }
    expect(out, comm, st, TEMPO_ERR_UNSUPPORTED, "sum and avg", "max with a compressor");
    a.field_mask |= TEMPO_ATTR_ALGORITHM;
    a.algorithm = "ring";
    st = tempo_iallreduce(comm, fv, fo, 64, TEMPO_FLOAT32, TEMPO_SUM, &a, &req);
    if (st == TEMPO_OK) {
        st = tempo_wait(&req);
    }
    expect(out, comm, st, TEMPO_ERR_INVALID, "cannot also force", "forced algorithm");
    st = tempo_compressor_create("alq:bitz=3", &bad);
    expect(out, NULL, st, TEMPO_ERR_INVALID, "bits=3", "unknown parameter lists the valid ones");
    st = tempo_compressor_create("alqq", &bad);
    expect(out, NULL, st, TEMPO_ERR_INVALID, "valid: none, fp16", "unknown compressor");
    st = tempo_compressor_create("alq:bits=9", &bad);
    expect(out, NULL, st, TEMPO_ERR_INVALID, "1..8", "bits out of range");
    tempo_compressor_destroy(qc);
}

int main(int argc, char **argv)
{
    tempo_comm_t comm;
    mr_out_t out;
    int rc = mr_start(argc, argv, "qcoll/identical", &comm, &out);
    if (rc) {
        return rc;
    }
    rank_ = tempo_comm_rank(comm);
    size_ = tempo_comm_size(comm);
    for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
        check_identical(comm, &out, &specs[i]);
        if (specs[i].unbiased || specs[i].ef) {
            check_mean(comm, &out, &specs[i]);
        }
    }
    check_lowrank(comm, &out);
    check_sched(comm, &out);
    check_errors(comm, &out);
    tempo_status_t st = tempo_comm_destroy(comm);
    if (st != TEMPO_OK) {
        mr_result(&out, "qcoll/identical", "FAIL", "destroy: %s", mr_errtext(NULL, st));
    }
    mr_out_close(&out);
    return 0;
}
