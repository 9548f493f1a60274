/*
 * test_qmath.c — the element math that the host and the CUDA kernels share (core/elem.h,
 * quant/qmath.h) against the host's vectorized kernels, bit for bit:
 *   indices   tempo__qlev_indices (levels.c's 8-lane quantizer, the clone this CPU runs: AVX2
 *             or the baseline) against tempo__qlevel with tempo__sr_unit per coordinate: tables of
 *             2 to 256 levels (counted or binary-searched), coordinates on and around the levels,
 *             beyond ±1, NaN, ±inf, subnormal, zero buckets, index bases across 2^32
 *   encode    tempo__qlev_encode against an encoding assembled from the shared functions (scale
 *             by tempo__qscale, NaN scale for a non-finite bucket, indices, tempo__qpack), for L2,
 *             L-inf and clipped buckets of sizes 1 to 10000 (the staged path from 4096); decode
 *             against tempo__qdecode
 *   scale     tempo__qscale's blocked sums against a plain loop of coordinate i into partial
 *             i % 32 followed by the pairwise fold
 *   random    sr_bits: distinct indices of one call give distinct bits (the hash is a bijection
 *             of the index's low word); the uniform's mean and the fraction of rounds up of a
 *             coordinate halfway between two levels are within 5 standard errors
 *   nan       what core/elem.h's GPU versions assume of x86: p + p of a NaN is p with the quiet
 *             bit set, and inf - inf and 0 * inf are 0xffc00000 (double: 0xfff8...)
 * Seeded (TEMPO_TEST_SEED replays); the seed is printed.
 */
#include "config.h"

#include <math.h>

#include "core/elem.h"
#include "quant/qmath.h"
#include "quant/quant.h"
#include "tests/unit/tu.h"

size_t tempo__qlev_encode(const tempo__qctx_t *c, const float *in, size_t count, void *out);
tempo_status_t tempo__qlev_decode(const tempo__qctx_t *c, const void *in, size_t len, size_t count,
                                  float *out, int accumulate);

static uint64_t rs;

static float urand(void)
{
    return (float)(tu_rand64(&rs) >> 40) * (1.0f / 16777216.0f);
}

/* A table of nl increasing levels from -1 to 1 (nl >= 2), with iw as levels.c computes it. */
static void make_table(int nl, float *lv, float *iw)
{
    lv[0] = -1.0f;
    lv[nl - 1] = 1.0f;
    for (int i = 1; i < nl - 1; i++) {
        lv[i] = -1.0f + 2.0f * ((float)i + 0.8f * (urand() - 0.5f)) / (float)(nl - 1);
    }
    for (int i = 0; i + 1 < nl; i++) {
        iw[i] = 1.0f / (lv[i + 1] - lv[i]);
    }
}

/* n coordinates for a bucket of table lv: on levels, next to them, random, beyond ±1, specials. */
static void make_coords(float *x, size_t n, const float *lv, int nl, float scale, int specials)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t r = tu_rand64(&rs);
        float v;
        switch (r % 8) {
        case 0: v = lv[(r >> 8) % (uint64_t)nl]; break;
        case 1: v = nextafterf(lv[(r >> 8) % (uint64_t)nl], (r >> 20) & 1 ? 2.0f : -2.0f); break;
        case 2: v = 1.5f * (2.0f * urand() - 1.0f); break;
        case 3: v = (r >> 9) & 1 ? 1e-40f : -0.0f; break;
        default: v = 2.0f * urand() - 1.0f; break;
        }
        x[i] = v * scale;
    }
    if (specials && n >= 4) {
        x[tu_rand64(&rs) % n] = NAN;
        x[tu_rand64(&rs) % n] = INFINITY;
        x[tu_rand64(&rs) % n] = -INFINITY;
    }
}

static void check_indices(void)
{
    static const int nls[] = {2, 3, 4, 5, 7, 8, 15, 16, 17, 32, 64, 128, 255, 256};
    static const uint64_t bases[] = {0, 12345, 0xfffffffbull, 0x200000003ull};
    float lv[256], iw[256], x[1000];
    uint8_t k[1000];
    int bad = 0, cases = 0;
    char what[160] = "";
    for (size_t a = 0; a < TEMPO_ARRAY_SIZE(nls); a++) {
        int nl = nls[a], bits = 1;
        while ((1 << bits) < nl) {
            bits++;
        }
        make_table(nl, lv, iw);
        tempo__qparams_t p = {.bits = bits, .bucket = 1000};
        tempo__qctx_t c = {.p = &p, .levels = lv, .nlevels = nl};
        for (size_t b = 0; b < TEMPO_ARRAY_SIZE(bases); b++) {
            for (int rep = 0; rep < 6; rep++) {
                size_t n = rep == 0 ? 1000 : 1 + tu_rand64(&rs) % 40;
                float inv = rep == 5 ? 0.0f : 0.5f + urand();
                uint64_t seed = tu_rand64(&rs);
                make_coords(x, n, lv, nl, inv > 0 ? 1.0f / inv : 1.0f, rep & 1);
                tempo__qlev_indices(&c, seed, bases[b], x, n, inv, k);
                cases++;
                for (size_t i = 0; i < n; i++) {
                    int want = tempo__qlevel(x[i], inv, lv, iw, nl,
                                             tempo__sr_unit(seed, bases[b] + i));
                    if (k[i] != want && !bad++) {
                        snprintf(what, sizeof(what),
                                 "first: nl %d, base 0x%llx, i %zu, x %a, inv %a: %d, want %d", nl,
                                 (unsigned long long)bases[b], i, (double)x[i], (double)inv, k[i],
                                 want);
                    }
                }
            }
        }
    }
    if (bad) {
        tap_diag("%s", what);
    }
    TAP_OK(bad == 0, "indices: the vectorized quantizer gives tempo__qlevel's index for every "
                     "coordinate (%d cases, %d differ)", cases, bad);
}

/* levels.c's encoding, assembled from the shared functions. */
static size_t ref_encode(const tempo__qparams_t *p, const float *lv, int nl, uint64_t seed,
                         const float *in, size_t count, uint8_t *out)
{
    float iw[256];
    for (int i = 0; i + 1 < nl; i++) {
        iw[i] = 1.0f / (lv[i + 1] - lv[i]);
    }
    size_t d = p->bucket, nb = (count + d - 1) / d;
    uint8_t *idx = malloc(count ? count : 1);
    for (size_t bk = 0; bk < nb; bk++) {
        size_t n = count - bk * d < d ? count - bk * d : d;
        float scale = tempo__qscale(in + bk * d, n, p->norm == TEMPO__QNORM_LINF, p->clip);
        if (!isfinite(scale)) {
            scale = NAN;
        }
        memcpy(out + bk * 4, &scale, 4);
        float inv = scale > 0 ? 1.0f / scale : 0.0f;
        for (size_t i = 0; i < n; i++) {
            idx[bk * d + i] =
                (uint8_t)tempo__qlevel(in[bk * d + i], inv, lv, iw, nl,
                                       tempo__sr_unit(seed, bk * d + i));
        }
    }
    tempo__qpack(idx, count, p->bits, out + nb * 4);
    free(idx);
    return nb * 4 + tempo__qpacked_bytes(count, p->bits);
}

static void check_encode(void)
{
    static const size_t buckets[] = {1, 7, 64, 100, 8192, 10000};
    int bad = 0, badd = 0, cases = 0;
    char what[160] = "";
    for (size_t bi = 0; bi < TEMPO_ARRAY_SIZE(buckets); bi++) {
        for (int norm = 0; norm < 3; norm++) { /* L2, L-inf, L-inf clipped */
            for (int bits = 1; bits <= 8; bits += bits < 4 ? 1 : 4) {
                int zero = bits > 1 && (bi & 1), nl = tempo__qnlevels(bits, zero);
                float lv[256], iw[256];
                make_table(nl, lv, iw);
                tempo__qparams_t p = {.bits = bits, .bucket = buckets[bi], .zero = zero,
                                      .norm = norm ? TEMPO__QNORM_LINF : TEMPO__QNORM_L2,
                                      .clip = norm == 2, .entropy = TEMPO__QENT_NONE};
                size_t count = buckets[bi] * 2 + tu_rand64(&rs) % (buckets[bi] + 1);
                count = count > 30000 ? 30000 : count;
                float *x = malloc(count * sizeof(float)), *y = malloc(count * sizeof(float));
                make_coords(x, count, lv, nl, 0.01f + 100.0f * urand(), 0);
                if (count > 2 * buckets[bi] && buckets[bi] >= 4) {
                    memset(x + buckets[bi], 0, buckets[bi] * sizeof(float)); /* a zero bucket */
                    x[0] = bits == 2 ? NAN : x[0];                         /* a NaN bucket */
                }
                size_t cap = p.bits * count / 8 + 4 * (count / p.bucket + 1) + 16;
                uint8_t *got = malloc(cap), *want = malloc(cap);
                tempo__rng_t rng;
                tempo__rng_seed(&rng, tu_rand64(&rs), 3);
                tempo__rng_t copy = rng;
                tempo__qctx_t c = {.p = &p, .rng = &rng, .levels = lv, .nlevels = nl};
                size_t glen = tempo__qlev_encode(&c, x, count, got);
                size_t wlen = ref_encode(&p, lv, nl, tempo__rng_next(&copy), x, count, want);
                cases++;
                if ((glen != wlen || memcmp(got, want, wlen) != 0) && !bad++) {
                    snprintf(what, sizeof(what), "first: bucket %zu, norm %d, bits %d, count %zu: "
                             "%zu bytes against %zu", buckets[bi], norm, bits, count, glen, wlen);
                }
                if (tempo__qlev_decode(&c, got, glen, count, y, 0) == TEMPO_OK) {
                    uint8_t *ix = malloc(count);
                    tempo__qunpack(got + (count + p.bucket - 1) / p.bucket * 4, count, bits, ix);
                    for (size_t i = 0; i < count; i++) {
                        float scale;
                        memcpy(&scale, got + i / p.bucket * 4, 4);
                        float v = tempo__qdecode(scale, lv, ix[i]);
                        badd += memcmp(&v, &y[i], 4) != 0;
                    }
                    free(ix);
                } else {
                    badd++;
                }
                free(x);
                free(y);
                free(got);
                free(want);
            }
        }
    }
    if (bad) {
        tap_diag("%s", what);
    }
    TAP_OK(bad == 0, "encode: tempo__qlev_encode is bitwise the encoding assembled from the "
                     "shared functions (%d cases, %d differ)", cases, bad);
    TAP_OK(badd == 0, "decode: every decoded coordinate is tempo__qdecode's (%d differ)", badd);
}

static void check_scale(void)
{
    int bad = 0, cases = 0;
    float x[3000];
    for (int rep = 0; rep < 200; rep++) {
        size_t n = 1 + tu_rand64(&rs) % 3000;
        float mag = powf(10.0f, -20.0f + 40.0f * urand());
        for (size_t i = 0; i < n; i++) {
            x[i] = mag * (2.0f * urand() - 1.0f);
        }
        float s[TEMPO__QLANES] = {0};
        double d1[TEMPO__QLANES] = {0}, d2[TEMPO__QLANES] = {0};
        for (size_t i = 0; i < n; i++) {
            float sq = x[i] * x[i];
            s[i % TEMPO__QLANES] += sq;
            double v = x[i], vv = v * v;
            d1[i % TEMPO__QLANES] += v;
            d2[i % TEMPO__QLANES] += vv;
        }
        float want = sqrtf(tempo__qfold_f32(s)), got = tempo__qscale(x, n, 0, 0);
        bad += memcmp(&want, &got, 4) != 0;
        double mean = tempo__qfold_f64(d1) / (double)n, sqm = mean * mean;
        double var = tempo__qfold_f64(d2) / (double)n - sqm;
        float lim = (float)(2.5 * sqrt(var > 0 ? var : 0)), m = 0;
        for (size_t i = 0; i < n; i++) {
            m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
        }
        float wantc = lim < m ? lim : m, gotc = tempo__qscale(x, n, 1, 1);
        bad += memcmp(&wantc, &gotc, 4) != 0;
        cases += 2;
    }
    TAP_OK(bad == 0, "scale: L2 and clipped L-inf scales sum in the shared order (%d cases, %d "
                     "differ)", cases, bad);
}

static void check_random(void)
{
    uint64_t seed = tu_rand64(&rs);
    const uint32_t n = 1u << 20;
    uint8_t *seen = calloc((size_t)1 << 29, 1); /* one bit per 32-bit value */
    int dup = 0;
    double sum = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t h = tempo__sr_bits(seed, i);
        dup += (seen[h >> 3] >> (h & 7)) & 1;
        seen[h >> 3] |= (uint8_t)(1u << (h & 7));
        sum += tempo__sr_unit(seed, i);
    }
    free(seen);
    TAP_OK(dup == 0, "random: %u consecutive indices give distinct bits (%d repeats)", n, dup);
    double mean = sum / n, se = sqrt(1.0 / 12.0 / n);
    TAP_OK(fabs(mean - 0.5) < 5 * se, "random: mean uniform %.6f (0.5 within 5 standard errors, "
                                      "%.6f)", mean, 5 * se);
    /* a coordinate a quarter of the way from level 0 to 1 rounds up a quarter of the time */
    float lv[2] = {-1.0f, 1.0f}, iw[1] = {0.5f};
    long up = 0;
    for (uint32_t i = 0; i < n; i++) {
        up += tempo__qlevel(-0.5f, 1.0f, lv, iw, 2, tempo__sr_unit(seed ^ 0x5555, i));
    }
    double frac = (double)up / n, sef = sqrt(0.25 * 0.75 / n);
    TAP_OK(fabs(frac - 0.25) < 5 * sef, "random: a coordinate 1/4 of the way up rounds up %.5f "
                                        "of %u times (0.25 within 5 standard errors)", frac, n);
}

static void check_nan(void)
{
    int bad = 0;
    for (int i = 0; i < 1000; i++) {
        uint32_t payload = (uint32_t)(tu_rand64(&rs) & 0x003fffffu) | 1u;
        uint32_t u = (uint32_t)(tu_rand64(&rs) & 0x80000000u) | 0x7f800000u | payload;
        float p = tempo__bits_f32(u), q = p + p;
        bad += tempo__f32_bits(q) != (u | 0x00400000u);
        uint64_t pd = (tu_rand64(&rs) & 0x8007ffffffffffffull) | 0x7ff0000000000001ull;
        double dp = tempo__bits_f64(pd), dq = dp + dp;
        bad += tempo__f64_bits(dq) != (pd | 0x0008000000000000ull);
    }
    volatile float inf = INFINITY, zero = 0.0f;
    volatile double dinf = INFINITY, dzero = 0.0;
    bad += tempo__f32_bits(inf - inf) != 0xffc00000u || tempo__f32_bits(zero * inf) != 0xffc00000u;
    bad += tempo__f64_bits(dinf - dinf) != 0xfff8000000000000ull ||
           tempo__f64_bits(dzero * dinf) != 0xfff8000000000000ull;
    TAP_OK(bad == 0, "nan: this CPU quiets NaN payloads by the quiet bit and gives x86's default "
                     "NaN for invalid operations, as core/elem.h's GPU versions write out");
}

/* The level fitters' per-bucket statistics in the shared order (tempo__qstats_bucket, which the
 * CUDA kernel matches bit for bit): against long-double sums in index order, to 1e-12 relative;
 * zero and non-finite buckets skipped. */
static void check_stats(void)
{
    int bad = 0, cases = 0;
    static float x[5000];
    for (int rep = 0; rep < 200; rep++) {
        size_t n = 1 + (size_t)(urand() * 4999);
        float mag = 0.001f + 1000.0f * urand();
        for (size_t i = 0; i < n; i++) {
            x[i] = mag * (2.0f * urand() - 1.0f) + (rep % 3 == 0 ? 0.3f * mag : 0.0f);
        }
        if (rep % 50 == 7) {
            memset(x, 0, n * sizeof(float));
        }
        if (rep % 50 == 8) {
            x[n / 2] = rep % 2 ? NAN : INFINITY;
        }
        for (int linf = 0; linf < 2; linf++) {
            double st[3];
            tempo__qstats_bucket(x, n, linf, st);
            long double s = 0, s2 = 0, mx = 0;
            int finite = 1;
            for (size_t i = 0; i < n; i++) {
                s += x[i];
                s2 += (long double)x[i] * x[i];
                mx = fabsl(x[i]) > mx ? fabsl(x[i]) : mx;
                finite &= isfinite(x[i]) != 0;
            }
            long double norm = linf ? mx : sqrtl(s2);
            if (!finite || norm == 0) {
                bad += st[0] != -1.0;
                cases++;
                continue;
            }
            long double rsum = s / norm, mean = rsum / n;
            long double r2 = linf ? s2 / (norm * norm) : 1.0L;
            long double var = n > 1 ? (r2 - n * mean * mean) / (n - 1) : 0;
            var = var > 0 ? var : 0;
            bad += fabsl(st[0] - norm) > 1e-12L * norm;
            bad += fabsl(st[1] - rsum) > 1e-12L * (fabsl(rsum) + sqrtl((long double)n));
            bad += fabsl(st[2] - var) > 1e-9L * (var + 1e-12L);
            cases++;
        }
    }
    TAP_OK(bad == 0, "stats: tempo__qstats_bucket's norms, normalized sums and variances agree "
                     "with long-double sums (%d cases, %d off)", cases, bad);
}

int main(void)
{
    uint64_t seed = tu_seed();
    rs = seed;
    tap_diag("seed %llu (TEMPO_TEST_SEED replays it)", (unsigned long long)seed);
    check_indices();
    check_encode();
    check_scale();
    check_stats();
    check_random();
#if defined(__x86_64__) || defined(__i386__)
    check_nan();
#endif
    return tap_done();
}
