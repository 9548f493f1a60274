/*
 * test_qsparse.c — scaled sign (quant/sign.c), top-k and random-k (quant/sparse.c) and the PowerSGD
 * kernels (quant/powersgd.c):
 *   wire     encode writes exactly bound() bytes (0 for count 0) for counts 0, 1, 7, 4096, 4097,
 *            100000 and several buckets and ratios; decode(encode(x)) has the documented shape:
 *            sign gives ±(bucket mean |x|) with sign(0) = +1; top-k keeps exactly the k largest
 *            magnitudes (ties to the smaller index) against a sort-based reference, NaN counted
 *            largest, on inputs that drive each selection path (sampled bracket, bracket proved
 *            wrong, bracket overflowing, exact radix with ties); decode(accumulate = 1) adds
 *            exactly what decode(accumulate = 0) writes; random-k puts the values at the seed's
 *            indices (distinct, ascending, equal for equal seeds, different for different seeds,
 *            the same on the heap-free path);
 *   errors   a wrong length, a top-k index out of range, repeated or decreasing: TEMPO_ERR_REMOTE
 *            with the output untouched (overwrite and accumulate);
 *   EF       50 steps of the caller's rule x = g + e, e <- x - decode(encode(x)): the decoded
 *            messages plus the final residual add up to the sum of the inputs;
 *   randk    without error feedback the decoded vector is unbiased (Monte Carlo over 1e5 shared
 *            seeds, every coordinate within 3 standard errors; a fixed seed, since 16 such checks
 *            would fail a random run 4 % of the time); messages of two ranks sum elementwise
 *            into the sum of their decodings;
 *   PowerSGD the shape; M Q, M^T P and P Q^T against a double reference (r = 1..33, odd
 *            shapes); one power step recovers a matrix of rank <= r (draws of Q that leave the
 *            step ill-conditioned even in double are drawn again); P^T P = I after
 *            orthonormalization, and a zero column stays zero;
 *   speed    encode/decode GB/s on 16M floats and mul_p/mul_q on 4096 x 4096, r = 4 (diagnostics,
 *            no assertion; TEMPO_TEST_NO_SPEED=1 skips them).
 * Random inputs are seeded; the seed is printed (TEMPO_TEST_SEED replays it).
 */
#include "config.h"

#include <math.h>

#include "core/tempo_int.h"
#include "quant/kinds_sparse.h"
#include "quant/quant.h"
#include "tests/unit/tu.h"

static uint64_t seed;

typedef struct kind {
    const char *name;
    void (*defaults)(tempo__qparams_t *p);
    size_t (*bound)(const tempo__qparams_t *p, size_t count);
    size_t (*encode)(const tempo__qctx_t *c, const float *in, size_t count, void *out);
    tempo_status_t (*decode)(const tempo__qctx_t *c, const void *in, size_t len, size_t count,
                             float *out, int accumulate);
} kind_t;

static const kind_t kinds[] = {
    {"sign", tempo__qsign_defaults, tempo__qsign_bound, tempo__qsign_encode, tempo__qsign_decode},
    {"topk", tempo__qtopk_defaults, tempo__qtopk_bound, tempo__qtopk_encode, tempo__qtopk_decode},
    {"randk", tempo__qrandk_defaults, tempo__qrandk_bound, tempo__qrandk_encode,
     tempo__qrandk_decode},
};
#define NKINDS (sizeof(kinds) / sizeof(kinds[0]))

static const size_t counts[] = {0, 1, 7, 4096, 4097, 100000};
#define NCOUNTS (sizeof(counts) / sizeof(counts[0]))

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        tap_diag("out of memory (%zu bytes)", n);
        exit(1);
    }
    return p;
}

/* Standard normal by Box-Muller (tempo__rng_normal lives in quant.c, not linked here). */
static double normal(tempo__rng_t *r)
{
    double u = tempo__rng_double(r), v = tempo__rng_double(r);
    return sqrt(-2.0 * log(1.0 - u)) * cos(2.0 * M_PI * v);
}

static void fill_normal(tempo__rng_t *r, float *x, size_t n, double scale)
{
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)(normal(r) * scale);
    }
}

static tempo__qparams_t params_of(const kind_t *k)
{
    tempo__qparams_t p;
    memset(&p, 0, sizeof(p));
    k->defaults(&p);
    return p;
}

/* decode(accumulate = 1) onto a filled buffer adds exactly the decode(accumulate = 0) result y */
static int accumulates(const kind_t *kd, const tempo__qctx_t *c, const void *msg, size_t len,
                       size_t n, const float *y)
{
    float *z = xmalloc(n * 4);
    int ok = 1;
    for (size_t i = 0; i < n; i++) {
        z[i] = (float)(i % 11) - 5.25f;
    }
    ok = kd->decode(c, msg, len, n, z, 1) == TEMPO_OK;
    for (size_t i = 0; ok && i < n; i++) {
        float want = ((float)(i % 11) - 5.25f) + y[i];
        if (memcmp(&z[i], &want, 4) != 0 && !(isnan(z[i]) && isnan(want))) {
            tap_diag("  %s accumulate: coordinate %zu is %g, want %g + %g", kd->name, i,
                     (double)z[i], (double)((float)(i % 11) - 5.25f), (double)y[i]);
            ok = 0;
        }
    }
    free(z);
    return ok;
}

static double now_s(void)
{
    return (double)tempo__now_ns() * 1e-9;
}

/* ------------------------------------------------------------------------------------------ */
/* sign                                                                                       */
/* ------------------------------------------------------------------------------------------ */

static void test_sign_roundtrip(void)
{
    static const size_t buckets[] = {4096, 1000, 1, 0};
    tempo__rng_t r;
    tempo__rng_seed(&r, seed, 1);
    for (size_t bi = 0; bi < TEMPO_ARRAY_SIZE(buckets); bi++) {
        for (size_t ci = 0; ci < NCOUNTS; ci++) {
            size_t n = counts[ci];
            tempo__qparams_t p = params_of(&kinds[0]);
            p.bucket = buckets[bi];
            tempo__qctx_t c = {.p = &p, .rng = &r, .shared_seed = 0};
            float *x = xmalloc(n * sizeof(float)), *y = xmalloc(n * sizeof(float));
            fill_normal(&r, x, n, 1.0);
            for (size_t i = 0; i < n; i += 97) {
                x[i] = (i / 97) % 2 ? -0.0f : 0.0f; /* zeros of both signs decode to +scale */
            }
            size_t bound = tempo__qsign_bound(&p, n);
            size_t b = p.bucket ? p.bucket : (n ? n : 1);
            size_t nb = n ? (n + b - 1) / b : 0;
            unsigned char *buf = xmalloc(bound + 1);
            size_t len = tempo__qsign_encode(&c, x, n, buf);
            tempo_status_t st = tempo__qsign_decode(&c, buf, len, n, y, 0);
            int shape_ok = 1;
            for (size_t k = 0; k < nb && shape_ok; k++) {
                size_t b0 = k * b, b1 = TEMPO_MIN(n, b0 + b);
                double sum = 0.0;
                for (size_t i = b0; i < b1; i++) {
                    sum += fabs((double)x[i]);
                }
                double s = sum / (double)(b1 - b0);
                for (size_t i = b0; i < b1; i++) {
                    double want = x[i] >= 0.0f ? s : -s;
                    if (fabs(y[i] - want) > 1e-6 * s || (y[i] >= 0.0f) != (x[i] >= 0.0f)) {
                        tap_diag("  bucket %zu coordinate %zu: x %g decoded %g, want %g", k, i,
                                 (double)x[i], (double)y[i], want);
                        shape_ok = 0;
                        break;
                    }
                }
            }
            shape_ok = shape_ok && accumulates(&kinds[0], &c, buf, len, n, y);
            TAP_OK(len == bound && bound == nb * 4 + (n + 7) / 8 && st == TEMPO_OK && shape_ok,
                   "sign bucket %zu count %zu: %zu bytes (bound %zu), decodes to ±(bucket mean)",
                   buckets[bi], n, len, bound);
            free(buf);
            free(x);
            free(y);
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* top-k                                                                                      */
/* ------------------------------------------------------------------------------------------ */

static const float *ref_x;

/* larger |x| first (NaN largest), then the smaller index */
static int ref_cmp(const void *a, const void *b)
{
    uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
    float fi = fabsf(ref_x[i]), fj = fabsf(ref_x[j]);
    int ni = isnan(fi), nj = isnan(fj);
    if (ni != nj) {
        return ni ? -1 : 1;
    }
    if (!ni && fi != fj) {
        return fi > fj ? -1 : 1;
    }
    return i < j ? -1 : 1;
}

static int u32_cmp(const void *a, const void *b)
{
    uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
    return i < j ? -1 : i > j;
}

/* Check top-k of x[0..n) under ratio against the sort-based reference; 1 when right. */
static int topk_check(const float *x, size_t n, double ratio, const char *what)
{
    tempo__qparams_t p = params_of(&kinds[1]);
    p.ratio = ratio;
    tempo__qctx_t c = {.p = &p};
    size_t k = tempo__qsparse_k(ratio, n);
    size_t bound = tempo__qtopk_bound(&p, n);
    unsigned char *buf = xmalloc(bound + 1);
    float *y = xmalloc(n * sizeof(float));
    uint32_t *ref = xmalloc(n * sizeof(uint32_t));
    size_t len = tempo__qtopk_encode(&c, x, n, buf);
    tempo_status_t st = tempo__qtopk_decode(&c, buf, len, n, y, 0);
    int ok = len == bound && bound == 8 * k && st == TEMPO_OK;
    if (!ok) {
        tap_diag("  len %zu bound %zu k %zu status %d", len, bound, k, (int)st);
    }
    for (size_t i = 0; i < n; i++) {
        ref[i] = (uint32_t)i;
    }
    ref_x = x;
    qsort(ref, n, sizeof(*ref), ref_cmp);
    qsort(ref, k, sizeof(*ref), u32_cmp);
    for (size_t j = 0; ok && j < k; j++) {
        uint32_t got;
        memcpy(&got, buf + 4 * j, 4);
        if (got != ref[j]) {
            tap_diag("  index %zu: got %u, reference %u", j, (unsigned)got, (unsigned)ref[j]);
            ok = 0;
        }
    }
    /* decoded: x at the kept indices (bit copies), 0 elsewhere */
    for (size_t i = 0, j = 0; ok && i < n; i++) {
        int kept = j < k && ref[j] == i;
        float want = kept ? x[i] : 0.0f;
        if (memcmp(&y[i], &want, 4) != 0) {
            tap_diag("  coordinate %zu: decoded %g, want %g", i, (double)y[i], (double)want);
            ok = 0;
        }
        j += (size_t)kept;
    }
    ok = ok && accumulates(&kinds[1], &c, buf, len, n, y);
    TAP_OK(ok, "topk %s count %zu ratio %g: the %zu largest, ties to the smaller index", what, n,
           ratio, k);
    free(ref);
    free(y);
    free(buf);
    return ok;
}

static void test_sparse_k(void)
{
    TAP_EQ_UINT(tempo__qsparse_k(0.07, 100), 7, "k: 0.07 of 100 is 7 (not 8 from rounding)");
    TAP_EQ_UINT(tempo__qsparse_k(0.01, 100000), 1000, "k: 0.01 of 100000");
    TAP_EQ_UINT(tempo__qsparse_k(0.01, 100001), 1001, "k: the ceiling");
    TAP_EQ_UINT(tempo__qsparse_k(0.5, 3), 2, "k: 0.5 of 3");
    TAP_EQ_UINT(tempo__qsparse_k(0.01, 0), 0, "k: nothing of nothing");
    TAP_EQ_UINT(tempo__qsparse_k(1e-9, 10), 1, "k: at least one");
    TAP_EQ_UINT(tempo__qsparse_k(0.0, 10), 1, "k: ratio 0 still sends one");
    TAP_EQ_UINT(tempo__qsparse_k(NAN, 10), 1, "k: ratio NaN still sends one");
    TAP_EQ_UINT(tempo__qsparse_k(1.0, 10), 10, "k: ratio 1 is everything");
    TAP_EQ_UINT(tempo__qsparse_k(1.5, 10), 10, "k: at most count");
}

static void test_topk(void)
{
    tempo__rng_t r;
    tempo__rng_seed(&r, seed, 2);
    for (size_t ci = 0; ci < NCOUNTS; ci++) {
        size_t n = counts[ci];
        float *x = xmalloc(n * sizeof(float));
        fill_normal(&r, x, n, 1.0);
        topk_check(x, n, 0.01, "normal");
        topk_check(x, n, 0.3, "normal");
        free(x);
    }
    size_t n = 100000;
    float *x = xmalloc(n * sizeof(float));
    /* few distinct magnitudes: long runs of ties at the threshold, and a threshold bin larger
     * than the 2k keys the output buffer holds (refined by more passes over the input) */
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)((int)(tempo__rng_next(&r) % 7) - 3);
    }
    topk_check(x, n, 0.01, "ties");
    topk_check(x, n, 0.5, "ties");
    for (size_t i = 0; i < n; i++) {
        x[i] = (tempo__rng_next(&r) & 1) ? 1.5f : -1.5f;
    }
    topk_check(x, n, 0.01, "equal magnitudes");
    topk_check(x, n, 0.3, "equal magnitudes");
    /* a threshold bin of exactly the keys needed (whole-bin early exit): k values of 2^j */
    for (size_t i = 0; i < n; i++) {
        x[i] = i < 1000 ? 1024.0f : 1.0f / (float)(i + 1);
    }
    topk_check(x, n, 0.01, "whole bin");
    /* nearly equal magnitudes: the same top digit, separated only in the low mantissa bits */
    for (size_t i = 0; i < n; i++) {
        x[i] = 1.0f + (float)(tempo__rng_next(&r) % 4096) * 1.1920929e-7f;
    }
    topk_check(x, n, 0.01, "low bits");
    /* the sampled bracket (large k) fooled by a periodic input: the sample sees only every
     * 8th coordinate, so the pass finds the threshold outside the bracket, or the bracket
     * overflowing, and the exact path takes over */
    for (size_t i = 0; i < n; i++) {
        x[i] = i % 8 ? 100.0f + (float)(i % 13) : (float)normal(&r);
    }
    topk_check(x, n, 0.3, "periodic (sample misses the large values)");
    for (size_t i = 0; i < n; i++) {
        x[i] = i % 8 ? 1.7f : 1.0f + (float)tempo__rng_double(&r); /* 1.7: the bracket */
    }
    topk_check(x, n, 0.3, "periodic (bracket overflows)");
    /* the k-th largest is the bracket's low end and the whole bracket is taken (above + in
     * bracket == k), so the radix select ends on a bin reaching below the bracket. The ranks
     * 3497 and 4003 are those sparse.c brackets for k = 30000 with a sample of 12500 every 8th
     * coordinate; with other constants this is still checked, only less sharply. */
    for (size_t i = 0, big = 0; i < n; i++) {
        if (i % 8 == 0) {
            x[i] = 1000.0f - 0.08f * (float)(i / 8); /* distinct, descending */
        } else {
            x[i] = big++ < 30000 - 4003 ? 2000.0f : 0.001f;
        }
    }
    topk_check(x, n, 0.3, "bracket taken whole");
    /* a count that is no multiple of the filters' 16-key runs, hits in the last partial run */
    float *x3 = xmalloc((n + 3) * sizeof(float));
    fill_normal(&r, x3, n + 3, 1.0);
    x3[n + 1] = 50.0f;
    x3[n + 2] = -1.0f;
    topk_check(x3, n + 3, 0.3, "odd count");
    topk_check(x3, n + 3, 0.01, "odd count");
    free(x3);
    /* NaN is counted largest: sent, never left in the residual */
    fill_normal(&r, x, n, 1.0);
    x[17] = NAN;
    x[n - 1] = -NAN;
    x[500] = INFINITY;
    topk_check(x, n, 0.001, "NaN and inf");
    free(x);
}

/* ------------------------------------------------------------------------------------------ */
/* random-k                                                                                   */
/* ------------------------------------------------------------------------------------------ */

static int indices_valid(const uint32_t *idx, size_t k, size_t n)
{
    for (size_t j = 0; j < k; j++) {
        if (idx[j] >= n || (j > 0 && idx[j] <= idx[j - 1])) {
            tap_diag("  index %zu is %u (previous %u, count %zu)", j, (unsigned)idx[j],
                     j ? (unsigned)idx[j - 1] : 0u, n);
            return 0;
        }
    }
    return 1;
}

static void test_randk(void)
{
    tempo__rng_t r;
    tempo__rng_seed(&r, seed, 3);
    for (int ef = 1; ef >= 0; ef--) {
        for (size_t ci = 0; ci < NCOUNTS; ci++) {
            size_t n = counts[ci];
            tempo__qparams_t p = params_of(&kinds[2]);
            p.ef = ef;
            uint64_t s = tempo__rng_next(&r);
            tempo__qctx_t c = {.p = &p, .rng = &r, .shared_seed = s};
            size_t k = tempo__qsparse_k(p.ratio, n), bound = tempo__qrandk_bound(&p, n);
            float *x = xmalloc(n * sizeof(float)), *y = xmalloc(n * sizeof(float));
            uint32_t *idx = xmalloc(k * sizeof(uint32_t) + 4);
            unsigned char *buf = xmalloc(bound + 1);
            fill_normal(&r, x, n, 1.0);
            size_t len = tempo__qrandk_encode(&c, x, n, buf);
            tempo_status_t st = tempo__qrandk_decode(&c, buf, len, n, y, 0);
            tempo__qrandk_indices(s, n, k, idx);
            int ok = len == bound && bound == 4 * k && st == TEMPO_OK && indices_valid(idx, k, n);
            float scale = ef ? 1.0f : (float)((double)n / (double)k);
            for (size_t i = 0, j = 0; ok && i < n; i++) {
                int kept = j < k && idx[j] == i;
                float want = kept ? x[i] * scale : 0.0f;
                if (y[i] != want) {
                    tap_diag("  coordinate %zu: decoded %g, want %g", i, (double)y[i],
                             (double)want);
                    ok = 0;
                }
                j += (size_t)kept;
            }
            ok = ok && accumulates(&kinds[2], &c, buf, len, n, y);
            TAP_OK(ok, "randk ef=%d count %zu: %zu values at the seed's %zu indices%s", ef, n,
                   len / 4, k, ef ? "" : ", scaled by count/k");
            free(buf);
            free(idx);
            free(y);
            free(x);
        }
    }

    /* the index set: same seed same set, other seed other set, both paths agree */
    static const size_t sizes[][2] = {{4096, 41},       {100000, 1000}, {100000, 30000},
                                      {1000000, 10000}, {3, 2},         {64, 63}};
    for (size_t t = 0; t < TEMPO_ARRAY_SIZE(sizes); t++) {
        size_t n = sizes[t][0], k = sizes[t][1];
        uint32_t *a = xmalloc(k * 4), *b = xmalloc(k * 4), *c = xmalloc(k * 4), *d = xmalloc(k * 4);
        uint64_t s = tempo__rng_next(&r);
        tempo__qrandk_indices(s, n, k, a);
        tempo__qrandk_indices(s, n, k, b);
        tempo__qrandk_indices_inplace(s, n, k, c);
        tempo__qrandk_indices(s + 1, n, k, d);
        int differ = memcmp(a, d, k * 4) != 0 || n <= k + 1; /* a 64-of-63-style set may repeat */
        TAP_OK(indices_valid(a, k, n) && memcmp(a, b, k * 4) == 0 && memcmp(a, c, k * 4) == 0 &&
                   differ,
               "randk indices %zu of %zu: distinct, ascending, reproducible, the same in place, "
               "another set for another seed",
               k, n);
        free(a);
        free(b);
        free(c);
        free(d);
    }
}

/* Without error feedback the decoded vector is unbiased: each coordinate's Monte Carlo mean is
 * within 3 standard errors of x, and each index is kept k/n of the time. */
static void test_randk_unbiased(void)
{
    enum { N = 16, DRAWS = 100000 };
    const uint64_t mc_seed = 0x5eedf00dull; /* fixed: see the file comment */
    tempo__rng_t r;
    tempo__rng_seed(&r, mc_seed, 4);
    tempo__qparams_t p = params_of(&kinds[2]);
    p.ratio = 0.25;
    p.ef = 0;
    float x[N], y[N];
    double sum[N] = {0}, sum2[N] = {0};
    long kept[N] = {0};
    fill_normal(&r, x, N, 1.0);
    unsigned char buf[16];
    size_t k = tempo__qsparse_k(p.ratio, N);
    for (int t = 0; t < DRAWS; t++) {
        tempo__qctx_t c = {.p = &p, .rng = &r, .shared_seed = tempo__rng_next(&r)};
        size_t len = tempo__qrandk_encode(&c, x, N, buf);
        if (tempo__qrandk_decode(&c, buf, len, N, y, 0) != TEMPO_OK) {
            break;
        }
        for (int i = 0; i < N; i++) {
            sum[i] += y[i];
            sum2[i] += (double)y[i] * y[i];
            kept[i] += y[i] != 0.0f;
        }
    }
    double worst = 0.0, worst_inc = 0.0;
    for (int i = 0; i < N; i++) {
        double mean = sum[i] / DRAWS, var = sum2[i] / DRAWS - mean * mean;
        double se = sqrt(var / DRAWS);
        worst = fmax(worst, fabs(mean - x[i]) / se);
        double pk = (double)k / N, se_inc = sqrt(pk * (1 - pk) / DRAWS);
        worst_inc = fmax(worst_inc, fabs((double)kept[i] / DRAWS - pk) / se_inc);
    }
    tap_diag("randk Monte Carlo seed 0x%llx: worst |mean - x| = %.2f SE, worst inclusion "
             "frequency off by %.2f SE",
             (unsigned long long)mc_seed, worst, worst_inc);
    TAP_OK(k == 4 && worst <= 3.0,
           "randk ef=0 unbiased: every coordinate within 3 SE over %d seeds", DRAWS);
    TAP_OK(worst_inc <= 3.0, "randk: every index kept k/n of the time, within 3 SE");
}

/* Messages of two ranks with the same shared seed sum into the sum of their decodings. */
static void test_randk_sum(void)
{
    tempo__rng_t r;
    tempo__rng_seed(&r, seed, 5);
    for (int ef = 0; ef <= 1; ef++) {
        size_t n = 100000;
        tempo__qparams_t p = params_of(&kinds[2]);
        p.ef = ef;
        tempo__qctx_t c = {.p = &p, .rng = &r, .shared_seed = tempo__rng_next(&r)};
        size_t bound = tempo__qrandk_bound(&p, n);
        float *a = xmalloc(n * 4), *b = xmalloc(n * 4), *da = xmalloc(n * 4), *db = xmalloc(n * 4),
              *ds = xmalloc(n * 4);
        float *ea = xmalloc(bound), *eb = xmalloc(bound);
        fill_normal(&r, a, n, 1.0);
        fill_normal(&r, b, n, 3.0);
        size_t la = tempo__qrandk_encode(&c, a, n, ea), lb = tempo__qrandk_encode(&c, b, n, eb);
        for (size_t j = 0; j < la / 4; j++) {
            ea[j] += eb[j]; /* what the all-reduce does */
        }
        int ok = la == lb && tempo__qrandk_decode(&c, ea, la, n, ds, 0) == TEMPO_OK;
        tempo__qrandk_encode(&c, a, n, ea);
        ok = ok && tempo__qrandk_decode(&c, ea, la, n, da, 0) == TEMPO_OK &&
             tempo__qrandk_decode(&c, eb, lb, n, db, 0) == TEMPO_OK;
        for (size_t i = 0; ok && i < n; i++) {
            if (ds[i] != da[i] + db[i]) {
                tap_diag("  coordinate %zu: %g != %g + %g", i, (double)ds[i], (double)da[i],
                         (double)db[i]);
                ok = 0;
            }
        }
        TAP_OK(ok, "randk ef=%d: the elementwise sum of two messages decodes to the sum", ef);
        free(a);
        free(b);
        free(da);
        free(db);
        free(ds);
        free(ea);
        free(eb);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Malformed input and the error-feedback invariant (all kinds)                               */
/* ------------------------------------------------------------------------------------------ */

static int decode_rejects(const kind_t *kd, tempo__qctx_t *c, const void *msg, size_t len, size_t n)
{
    float *out = xmalloc(n * 4 + 4), *copy = xmalloc(n * 4 + 4);
    int ok = 1;
    for (int acc = 0; acc <= 1; acc++) {
        for (size_t i = 0; i < n; i++) {
            out[i] = (float)i * 0.5f + 3.0f;
        }
        memcpy(copy, out, n * 4);
        tempo_status_t st = kd->decode(c, msg, len, n, out, acc);
        if (st != TEMPO_ERR_REMOTE || memcmp(out, copy, n * 4) != 0) {
            tap_diag("  %s accumulate=%d: status %d, output %s", kd->name, acc, (int)st,
                     memcmp(out, copy, n * 4) ? "changed" : "untouched");
            ok = 0;
        }
    }
    free(out);
    free(copy);
    return ok;
}

static void test_malformed(void)
{
    tempo__rng_t r;
    tempo__rng_seed(&r, seed, 6);
    for (size_t ki = 0; ki < NKINDS; ki++) {
        const kind_t *kd = &kinds[ki];
        for (size_t ci = 0; ci < NCOUNTS; ci++) {
            size_t n = counts[ci];
            tempo__qparams_t p = params_of(kd);
            tempo__qctx_t c = {.p = &p, .rng = &r, .shared_seed = 7};
            size_t bound = kd->bound(&p, n);
            float *x = xmalloc(n * 4);
            unsigned char *buf = xmalloc(bound + 8);
            fill_normal(&r, x, n, 1.0);
            size_t len = kd->encode(&c, x, n, buf);
            memset(buf + len, 0, 8);
            int ok = decode_rejects(kd, &c, buf, len + 1, n);
            if (len > 0) {
                ok = ok && decode_rejects(kd, &c, buf, len - 1, n);
            }
            TAP_OK(ok,
                   "%s count %zu: a message one byte long or short is TEMPO_ERR_REMOTE, "
                   "output untouched",
                   kd->name, n);
            free(buf);
            free(x);
        }
    }
    /* top-k indices: out of range, repeated, decreasing */
    size_t n = 4097;
    tempo__qparams_t p = params_of(&kinds[1]);
    tempo__qctx_t c = {.p = &p};
    size_t k = tempo__qsparse_k(p.ratio, n), len;
    float *x = xmalloc(n * 4);
    unsigned char *buf = xmalloc(tempo__qtopk_bound(&p, n)), *bad = xmalloc(8 * k);
    fill_normal(&r, x, n, 1.0);
    len = tempo__qtopk_encode(&c, x, n, buf);
    uint32_t v;
    memcpy(bad, buf, len);
    v = (uint32_t)n;
    memcpy(bad + 4 * (k - 1), &v, 4);
    TAP_OK(decode_rejects(&kinds[1], &c, bad, len, n), "topk: index == count rejected");
    memcpy(bad, buf, len);
    v = UINT32_MAX;
    memcpy(bad, &v, 4);
    TAP_OK(decode_rejects(&kinds[1], &c, bad, len, n), "topk: index 2^32-1 rejected");
    memcpy(bad, buf, len);
    memcpy(bad + 4 * 3, bad + 4 * 2, 4);
    TAP_OK(decode_rejects(&kinds[1], &c, bad, len, n), "topk: repeated index rejected");
    memcpy(bad, buf, len);
    memcpy(bad + 4 * 5, buf + 4 * 6, 4);
    memcpy(bad + 4 * 6, buf + 4 * 5, 4);
    TAP_OK(decode_rejects(&kinds[1], &c, bad, len, n), "topk: decreasing indices rejected");
    TAP_CONTAINS(tempo__errmsg(), "top-k", "topk: the error message names the compressor");
    free(bad);
    free(buf);
    free(x);
}

/* Caller-side error feedback over 50 steps: sum of decoded messages + final residual = sum of
 * inputs, per coordinate, within 1e-4 of the coordinate's sum of |g|. */
static void test_error_feedback(void)
{
    enum { STEPS = 50 };
    tempo__rng_t r;
    tempo__rng_seed(&r, seed, 7);
    for (size_t ki = 0; ki < NKINDS; ki++) {
        const kind_t *kd = &kinds[ki];
        size_t n = 10007;
        tempo__qparams_t p = params_of(kd);
        p.bucket = 1000; /* sign: partial last bucket */
        size_t bound = kd->bound(&p, n);
        float *g = xmalloc(n * 4), *e = xmalloc(n * 4), *x = xmalloc(n * 4), *y = xmalloc(n * 4);
        double *sent = calloc(n, sizeof(double)), *gsum = calloc(n, sizeof(double)),
               *gabs = calloc(n, sizeof(double));
        unsigned char *buf = xmalloc(bound);
        memset(e, 0, n * 4);
        int ok = sent && gsum && gabs;
        for (int t = 0; ok && t < STEPS; t++) {
            tempo__qctx_t c = {.p = &p, .rng = &r, .shared_seed = tempo__rng_next(&r)};
            fill_normal(&r, g, n, 1.0 + t % 3);
            for (size_t i = 0; i < n; i++) {
                x[i] = g[i] + e[i];
                gsum[i] += g[i];
                gabs[i] += fabs((double)g[i]);
            }
            size_t len = kd->encode(&c, x, n, buf);
            ok = kd->decode(&c, buf, len, n, y, 0) == TEMPO_OK;
            for (size_t i = 0; i < n; i++) {
                e[i] = x[i] - y[i];
                sent[i] += y[i];
            }
        }
        double worst = 0.0;
        for (size_t i = 0; ok && i < n; i++) {
            worst = fmax(worst, fabs(sent[i] + e[i] - gsum[i]) / gabs[i]);
        }
        tap_diag("%s error feedback: worst |sent + e - sum g| / sum |g| = %.3g", kd->name, worst);
        TAP_OK(ok && worst <= 1e-4,
               "%s: decoded messages + residual = sum of inputs after %d steps", kd->name, STEPS);
        free(buf);
        free(sent);
        free(gsum);
        free(gabs);
        free(g);
        free(e);
        free(x);
        free(y);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* PowerSGD kernels                                                                           */
/* ------------------------------------------------------------------------------------------ */

static void test_psgd_shape(void)
{
    static const size_t cs[] = {0,  1,   2,   3,      4,        5,        15,       16,      17,
                                99, 100, 101, 100000, 1u << 20, 12345678, 67108863, 67108865};
    int ok = 1;
    for (size_t t = 0; t < TEMPO_ARRAY_SIZE(cs); t++) {
        size_t n = cs[t], rows, cols;
        tempo__psgd_shape(n, &rows, &cols);
        size_t want_cols = (size_t)ceil(sqrt((double)n));
        if (rows * cols < n || rows * cols - n >= cols || rows > cols ||
            (n > 0 && cols != want_cols)) {
            tap_diag("  count %zu: %zu x %zu", n, rows, cols);
            ok = 0;
        }
    }
    TAP_OK(ok, "psgd shape: rows * cols >= count, padding < cols, cols = ceil(sqrt(count))");
}

static double rel_err(const float *a, const double *ref, size_t n)
{
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; i++) {
        num += (a[i] - ref[i]) * (a[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

static void test_psgd_products(void)
{
    static const size_t shapes[][2] = {{1, 1}, {3, 700}, {257, 1000}, {1000, 33}, {316, 317}};
    tempo__rng_t rg;
    tempo__rng_seed(&rg, seed, 8);
    for (size_t s = 0; s < TEMPO_ARRAY_SIZE(shapes); s++) {
        size_t rows = shapes[s][0], cols = shapes[s][1];
        double worst = 0.0;
        int same = 1;
        float *m = xmalloc(rows * cols * 4);
        fill_normal(&rg, m, rows * cols, 1.0);
        for (int r = 1; r <= 33; r++) {
            float *q = xmalloc(cols * r * 4), *p = xmalloc(rows * r * 4),
                  *q2 = xmalloc(cols * r * 4);
            float *p2 = xmalloc(rows * r * 4);
            double *pr = xmalloc(rows * r * 8), *qr = xmalloc(cols * r * 8);
            fill_normal(&rg, q, cols * r, 1.0);
            fill_normal(&rg, p, rows * r, 1.0);
            for (size_t i = 0; i < rows; i++) {
                for (int l = 0; l < r; l++) {
                    double a = 0.0;
                    for (size_t j = 0; j < cols; j++) {
                        a += (double)m[i * cols + j] * q[j * r + l];
                    }
                    pr[i * r + l] = a;
                }
            }
            for (size_t j = 0; j < cols; j++) {
                for (int l = 0; l < r; l++) {
                    double a = 0.0;
                    for (size_t i = 0; i < rows; i++) {
                        a += (double)m[i * cols + j] * p[i * r + l];
                    }
                    qr[j * r + l] = a;
                }
            }
            tempo__psgd_mul_p(m, rows, cols, q, r, p2);
            worst = fmax(worst, rel_err(p2, pr, rows * r));
            tempo__psgd_mul_q(m, rows, cols, p, r, q2);
            worst = fmax(worst, rel_err(q2, qr, cols * r));
            /* deterministic: a second call gives the same bits */
            float *again = xmalloc(cols * r * 4);
            tempo__psgd_mul_q(m, rows, cols, p, r, again);
            same = same && memcmp(again, q2, cols * r * 4) == 0;
            free(again);
            free(q);
            free(p);
            free(q2);
            free(p2);
            free(pr);
            free(qr);
        }
        TAP_OK(worst < 1e-5 && same,
               "psgd %zu x %zu, r = 1..33: M Q and M^T P match double "
               "(worst relative error %.2g), reproducible",
               rows, cols, worst);
        free(m);
    }
}

/* Relative Frobenius error of one power step done in double on the same fp32 M and Q, P = M Q
 * rounded to fp32 as the interface stores it: what the draw allows at best. M rounded to fp32 is
 * only nearly of rank rk, P in fp32 carries rounding, and a Q for which M Q is ill-conditioned
 * magnifies both. */
static double power_step_double(const float *m, size_t rows, size_t cols, const float *q, int r)
{
    double *p = xmalloc(rows * r * 8), *qq = xmalloc(cols * r * 8);
    for (size_t i = 0; i < rows; i++) {
        for (int l = 0; l < r; l++) {
            double a = 0.0;
            for (size_t j = 0; j < cols; j++) {
                a += (double)m[i * cols + j] * q[j * r + l];
            }
            p[i * r + l] = (float)a; /* P is fp32 by the interface: its rounding is inherent */
        }
    }
    for (int l = 0; l < r; l++) {
        for (int pass = 0; pass < 2; pass++) {
            for (int c = 0; c < l; c++) {
                double d = 0.0;
                for (size_t i = 0; i < rows; i++) {
                    d += p[i * r + c] * p[i * r + l];
                }
                for (size_t i = 0; i < rows; i++) {
                    p[i * r + l] -= d * p[i * r + c];
                }
            }
        }
        double nn = 0.0;
        for (size_t i = 0; i < rows; i++) {
            nn += p[i * r + l] * p[i * r + l];
        }
        for (size_t i = 0; i < rows; i++) {
            p[i * r + l] = nn > 0 ? p[i * r + l] / sqrt(nn) : 0.0;
        }
    }
    for (size_t j = 0; j < cols; j++) {
        for (int l = 0; l < r; l++) {
            double a = 0.0;
            for (size_t i = 0; i < rows; i++) {
                a += (double)m[i * cols + j] * p[i * r + l];
            }
            qq[j * r + l] = a;
        }
    }
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < rows; i++) {
        for (size_t j = 0; j < cols; j++) {
            double v = 0.0;
            for (int l = 0; l < r; l++) {
                v += p[i * r + l] * qq[j * r + l];
            }
            num += (v - m[i * cols + j]) * (v - m[i * cols + j]);
            den += (double)m[i * cols + j] * m[i * cols + j];
        }
    }
    free(p);
    free(qq);
    return sqrt(num / den);
}

/*
 * M = A B^T of rank rk <= r; one power step from a random Q recovers M within 1e-4. P is stored
 * in fp32 between the steps (it is what the ranks all-reduce), so a draw of Q for which M Q is
 * ill-conditioned loses accuracy in any implementation: such draws (where the step in double,
 * with only P rounded to fp32, ends further than 5e-6 from M) are drawn again and counted in a
 * diagnostic. Over many seeds the kernels stayed within 8 times that reference.
 */
static void test_psgd_lowrank(void)
{
    static const size_t shapes[][2] = {{300, 200}, {257, 1000}, {1000, 33}, {316, 317}};
    static const int ranks[][2] = {{1, 1},   {2, 2},   {4, 4}, {5, 5}, {8, 8},
                                   {13, 13}, {32, 32}, {4, 3}, {8, 1}};
    tempo__rng_t rg;
    int redrawn = 0;
    tempo__rng_seed(&rg, seed, 9);
    for (size_t s = 0; s < TEMPO_ARRAY_SIZE(shapes); s++) {
        size_t rows = shapes[s][0], cols = shapes[s][1];
        for (size_t t = 0; t < TEMPO_ARRAY_SIZE(ranks); t++) {
            int r = ranks[t][0], rk = ranks[t][1];
            float *a = xmalloc(rows * rk * 4), *b = xmalloc(cols * rk * 4);
            float *m = xmalloc(rows * cols * 4), *out = xmalloc(rows * cols * 4);
            float *p = xmalloc(rows * r * 4), *q = xmalloc(cols * r * 4);
            double *md = xmalloc(rows * cols * 8);
            fill_normal(&rg, a, rows * rk, 1.0);
            fill_normal(&rg, b, cols * rk, 1.0);
            for (size_t i = 0; i < rows; i++) {
                for (size_t j = 0; j < cols; j++) {
                    double v = 0.0;
                    for (int l = 0; l < rk; l++) {
                        v += (double)a[i * rk + l] * b[j * rk + l];
                    }
                    m[i * cols + j] = (float)v;
                    md[i * cols + j] = m[i * cols + j];
                }
            }
            double best = 0.0;
            for (int draw = 0; draw < 20; draw++) {
                fill_normal(&rg, q, cols * r, 1.0);
                best = power_step_double(m, rows, cols, q, r);
                if (best <= 5e-6) {
                    break;
                }
                redrawn++;
            }
            tempo__psgd_mul_p(m, rows, cols, q, r, p);
            tempo__psgd_orthonormalize(p, rows, r);
            tempo__psgd_mul_q(m, rows, cols, p, r, q);
            tempo__psgd_approx(p, q, rows, cols, r, out);
            double err = rel_err(out, md, rows * cols);
            TAP_OK(err < 1e-4 && best <= 5e-6,
                   "psgd %zu x %zu rank %d, r = %d: one power step "
                   "recovers M (relative error %.2g, reference %.2g)",
                   rows, cols, rk, r, err, best);
            free(a);
            free(b);
            free(m);
            free(out);
            free(p);
            free(q);
            free(md);
        }
    }
    tap_diag("psgd: %d draws of Q redrawn as ill-conditioned", redrawn);
}

/* P Q^T against a double reference, for every grouping of the terms (r = 1..9, 33), r = 0 and
 * an r too large for the tile (the plain loop). */
static void test_psgd_approx(void)
{
    static const size_t shapes[][2] = {{7, 300}, {300, 7}, {3, 5}};
    static const int ranks[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 33, 2049};
    tempo__rng_t rg;
    tempo__rng_seed(&rg, seed, 12);
    for (size_t s = 0; s < TEMPO_ARRAY_SIZE(shapes); s++) {
        size_t rows = shapes[s][0], cols = shapes[s][1];
        double worst = 0.0;
        for (size_t t = 0; t < TEMPO_ARRAY_SIZE(ranks); t++) {
            int r = ranks[t];
            if (r > 64 && rows * cols > 100) {
                continue;
            }
            float *p = xmalloc(rows * r * 4 + 4), *q = xmalloc(cols * r * 4 + 4);
            float *out = xmalloc(rows * cols * 4);
            double *ref = xmalloc(rows * cols * 8);
            fill_normal(&rg, p, rows * r, 1.0);
            fill_normal(&rg, q, cols * r, 1.0);
            double scale = 0.0;
            for (size_t i = 0; i < rows; i++) {
                for (size_t j = 0; j < cols; j++) {
                    double v = 0.0;
                    for (int l = 0; l < r; l++) {
                        v += (double)p[i * r + l] * q[j * r + l];
                    }
                    ref[i * cols + j] = v;
                    out[i * cols + j] = NAN; /* every element must be written */
                }
            }
            tempo__psgd_approx(p, q, rows, cols, r, out);
            for (size_t i = 0; i < rows * cols; i++) {
                scale = fmax(scale, fabs(ref[i]));
            }
            for (size_t i = 0; i < rows * cols; i++) {
                double err = fabs(out[i] - ref[i]) / fmax(scale, 1e-30);
                worst = fmax(worst, isnan(out[i]) ? INFINITY : r ? err : fabs(out[i]));
            }
            free(p);
            free(q);
            free(out);
            free(ref);
        }
        TAP_OK(worst < 1e-5, "psgd approx %zu x %zu, r = 0..9, 33, 2049: P Q^T (worst %.2g)", rows,
               cols, worst);
    }
}

static void test_psgd_orthonormalize(void)
{
    tempo__rng_t rg;
    tempo__rng_seed(&rg, seed, 10);
    static const size_t rowss[] = {32, 100, 4096};
    for (size_t s = 0; s < TEMPO_ARRAY_SIZE(rowss); s++) {
        size_t rows = rowss[s];
        for (int r = 1; r <= 32; r *= 2) {
            float *p = xmalloc(rows * r * 4);
            fill_normal(&rg, p, rows * r, 10.0);
            tempo__psgd_orthonormalize(p, rows, r);
            double worst = 0.0;
            for (int u = 0; u < r; u++) {
                for (int v = 0; v < r; v++) {
                    double d = 0.0;
                    for (size_t i = 0; i < rows; i++) {
                        d += (double)p[i * r + u] * p[i * r + v];
                    }
                    worst = fmax(worst, fabs(d - (u == v)));
                }
            }
            TAP_OK(worst < 1e-5, "psgd orthonormalize %zu x %d: P^T P = I (worst %.2g)", rows, r,
                   worst);
            free(p);
        }
    }
    /* a zero column stays zero; the others stay orthonormal */
    size_t rows = 50;
    int r = 4;
    float p[50 * 4];
    fill_normal(&rg, p, rows * r, 1.0);
    for (size_t i = 0; i < rows; i++) {
        p[i * r + 2] = 0.0f;
    }
    tempo__psgd_orthonormalize(p, rows, r);
    int zero = 1;
    double n3 = 0.0, d13 = 0.0;
    for (size_t i = 0; i < rows; i++) {
        zero = zero && p[i * r + 2] == 0.0f;
        n3 += (double)p[i * r + 3] * p[i * r + 3];
        d13 += (double)p[i * r + 1] * p[i * r + 3];
    }
    TAP_OK(zero && fabs(n3 - 1.0) < 1e-5 && fabs(d13) < 1e-5,
           "psgd orthonormalize: a zero column stays zero, the next is still unit and orthogonal");
}

/* ------------------------------------------------------------------------------------------ */
/* Speed (diagnostics only)                                                                   */
/* ------------------------------------------------------------------------------------------ */

static void test_speed(void)
{
    const size_t n = (size_t)16 << 20;
    tempo__rng_t r;
    tempo__rng_seed(&r, seed, 11);
    float *x = malloc(n * 4), *y = malloc(n * 4);
    unsigned char *buf = malloc(n + n / 4 + 64);
    if (!x || !y || !buf) {
        tap_skip("not enough memory", "speed");
        free(x);
        free(y);
        free(buf);
        return;
    }
    fill_normal(&r, x, n, 1.0);
    for (size_t ki = 0; ki < NKINDS; ki++) {
        const kind_t *kd = &kinds[ki];
        tempo__qparams_t p = params_of(kd);
        tempo__qctx_t c = {.p = &p, .rng = &r, .shared_seed = 99};
        double best_e = 1e30, best_d = 1e30;
        size_t len = 0;
        int ok = 1;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = now_s();
            len = kd->encode(&c, x, n, buf);
            double t1 = now_s();
            ok = ok && kd->decode(&c, buf, len, n, y, 0) == TEMPO_OK;
            double t2 = now_s();
            best_e = fmin(best_e, t1 - t0);
            best_d = fmin(best_d, t2 - t1);
        }
        tap_diag("speed %-5s 16M floats: encode %.2f GB/s (%.1f ms), decode %.2f GB/s (%.1f ms), "
                 "%zu bytes",
                 kd->name, n * 4 / best_e * 1e-9, best_e * 1e3, n * 4 / best_d * 1e-9, best_d * 1e3,
                 len);
        TAP_OK(ok, "speed %s: 16M floats round trip", kd->name);
    }
    free(buf);
    free(y);

    size_t rows = 4096, cols = 4096;
    int rk = 4;
    float *p = malloc(rows * rk * 4), *q = malloc(cols * rk * 4);
    if (!p || !q) {
        tap_skip("not enough memory", "psgd speed");
    } else {
        fill_normal(&r, q, cols * rk, 1.0);
        double bp = 1e30, bq = 1e30, bo = 1e30, ba = 1e30;
        for (int rep = 0; rep < 3; rep++) {
            double t0 = now_s();
            tempo__psgd_mul_p(x, rows, cols, q, rk, p);
            double t1 = now_s();
            tempo__psgd_orthonormalize(p, rows, rk);
            double t2 = now_s();
            tempo__psgd_mul_q(x, rows, cols, p, rk, q);
            double t3 = now_s();
            tempo__psgd_approx(p, q, rows, cols, rk, x);
            double t4 = now_s();
            bp = fmin(bp, t1 - t0);
            bo = fmin(bo, t2 - t1);
            bq = fmin(bq, t3 - t2);
            ba = fmin(ba, t4 - t3);
        }
        tap_diag("speed psgd 4096 x 4096 r=4: mul_p %.1f ms (%.2f GB/s of M), mul_q %.1f ms "
                 "(%.2f GB/s), orthonormalize %.2f ms, approx %.1f ms",
                 bp * 1e3, rows * cols * 4 / bp * 1e-9, bq * 1e3, rows * cols * 4 / bq * 1e-9,
                 bo * 1e3, ba * 1e3);
        TAP_OK(1, "speed psgd: ran");
    }
    free(p);
    free(q);
    free(x);
}

int main(void)
{
    seed = tu_seed();
    tap_diag("seed %llu (TEMPO_TEST_SEED replays it)", (unsigned long long)seed);
    test_sign_roundtrip();
    test_sparse_k();
    test_topk();
    test_randk();
    test_randk_unbiased();
    test_randk_sum();
    test_malformed();
    test_error_feedback();
    test_psgd_shape();
    test_psgd_products();
    test_psgd_lowrank();
    test_psgd_approx();
    test_psgd_orthonormalize();
    if (getenv("TEMPO_TEST_NO_SPEED")) {
        tap_skip("TEMPO_TEST_NO_SPEED is set", "speed");
    } else {
        test_speed();
    }
    return tap_done();
}
