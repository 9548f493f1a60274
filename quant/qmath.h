/*
 * qmath.h — the level quantizers' element math, shared by the host (quant/levels.c) and the CUDA
 * kernels (gpu/): the stochastic rounding's random bits, the rounding of one coordinate between
 * adjacent levels, the decoded value, and the order in which a bucket's norm is summed. Functions
 * are TEMPO_HD (core/elem.h): static inline C for gcc, __host__ __device__ for nvcc. levels.c
 * computes the same things vectorized; tests/unit/test_qmath.c checks it against these bit for
 * bit, and tests/gpu/gpu_kernels checks the CUDA kernels against them on a GPU.
 *
 * Random bits: counter-based, a hash of (the call's 64-bit seed, the coordinate's index in the
 * encoded vector), so that any thread can draw coordinate i's bits without the ones before it,
 * and the host and the GPU draw the same. The hash is murmur3's 32-bit finalizer (a bijection with
 * full avalanche) of an odd-multiplier mix of the index's low word, the seed's low word, and the
 * index's high word with the seed's high word: distinct indices of one call never share their
 * pre-image. The uniform is its top 24 bits, exact in fp32.
 *
 * Bucket norms (L2; clipped TernGrad's mean and variance; the level fitters' statistics): 32
 * partial sums, coordinate i of the
 * bucket into partial i % 32 in increasing i, then folded pairwise (k += k + 16 for k < 16, then
 * 8, 4, 2, 1): the order of a warp's 32 lanes and its shuffle tree, and of four 8-wide vectors on
 * the host.
 */
#ifndef TEMPO_QUANT_QMATH_H
#define TEMPO_QUANT_QMATH_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "core/elem.h"

/* The lanes of a bucket's partial sums. */
#define TEMPO__QLANES 32

TEMPO_HD uint32_t tempo__fmix32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x85ebca6bu;
    x ^= x >> 13;
    x *= 0xc2b2ae35u;
    x ^= x >> 16;
    return x;
}

/* Coordinate i's 32 random bits for the call whose seed is seed. */
TEMPO_HD uint32_t tempo__sr_bits(uint64_t seed, uint64_t i)
{
    uint32_t x = (uint32_t)i * 0x9e3779b1u + (uint32_t)seed;
    x ^= (uint32_t)(seed >> 32) + (uint32_t)(i >> 32) * 0x85ebca77u;
    return tempo__fmix32(x);
}

/* Coordinate i's uniform in [0, 1), 24 bits. */
TEMPO_HD float tempo__sr_unit(uint64_t seed, uint64_t i)
{
    return (float)(tempo__sr_bits(seed, i) >> 8) * (1.0f / 16777216.0f);
}

/*
 * The level index of coordinate x of a bucket whose scale's inverse is inv (0 for a zero or
 * non-finite bucket), for the table lv[0..nl-1] (increasing, nl >= 2) with iw[j] = 1 / (lv[j + 1]
 * - lv[j]), and the uniform u: r = x * inv clipped to [-1, 1]; j = the interval with lv[j] <= r
 * (the number of interior levels <= r); up to j + 1 when u < (r - lv[j]) * iw[j]. A NaN r gives 0.
 */
TEMPO_HD int tempo__qlevel(float x, float inv, const float *lv, const float *iw, int nl, float u)
{
    float r = x * inv;
    r = r < -1.0f ? -1.0f : r;
    r = r > 1.0f ? 1.0f : r;
    int j = 0;
    for (int q = 1; q < nl - 1; q++) {
        j += r >= lv[q];
    }
    return j + (u < (r - lv[j]) * iw[j]);
}

/* What bucket scale scale (as the encoding wrote it) and level index k decode to. */
TEMPO_HD float tempo__qdecode(float scale, const float *lv, int k)
{
    return scale == 0 ? 0.0f : lv[k] * scale;
}

/* Fold 32 partial sums in the shared order (above). */
TEMPO_HD float tempo__qfold_f32(float *s)
{
    for (int w = TEMPO__QLANES / 2; w; w >>= 1) {
        for (int k = 0; k < w; k++) {
            s[k] += s[k + w];
        }
    }
    return s[0];
}
TEMPO_HD double tempo__qfold_f64(double *s)
{
    for (int w = TEMPO__QLANES / 2; w; w >>= 1) {
        for (int k = 0; k < w; k++) {
            s[k] += s[k + w];
        }
    }
    return s[0];
}

/*
 * A bucket's scale: its L2 norm, or (linf) its largest magnitude, which clip (clipped TernGrad)
 * caps at 2.5 standard deviations (mean and variance from double sums). Sums in the shared order
 * (above), written as blocks of 32 so that the host compiler vectorizes them.
 */
TEMPO_HD float tempo__qscale(const float *x, size_t n, int linf, int clip)
{
    size_t i;
    if (linf) {
        float m = 0.0f, lim = INFINITY;
        if (clip) {
            double s[TEMPO__QLANES], s2[TEMPO__QLANES];
            for (int k = 0; k < TEMPO__QLANES; k++) {
                s[k] = s2[k] = 0.0;
            }
            for (i = 0; i < n; i += TEMPO__QLANES) {
                int m32 = n - i < TEMPO__QLANES ? (int)(n - i) : TEMPO__QLANES;
                for (int k = 0; k < m32; k++) {
                    double v = x[i + k], sq = v * v;
                    s[k] += v;
                    s2[k] += sq;
                }
            }
            double sum = tempo__qfold_f64(s), sum2 = tempo__qfold_f64(s2);
            double mean = sum / (double)n, sqm = mean * mean, var = sum2 / (double)n - sqm;
            lim = (float)(2.5 * sqrt(var > 0 ? var : 0));
        }
        for (i = 0; i < n; i++) {
            float a = fabsf(x[i]);
            m = a > m ? a : m; /* NaNs never win: the order does not matter */
        }
        return clip && lim < m ? lim : m;
    }
    float s[TEMPO__QLANES];
    for (int k = 0; k < TEMPO__QLANES; k++) {
        s[k] = 0.0f;
    }
    for (i = 0; i + TEMPO__QLANES <= n; i += TEMPO__QLANES) {
        for (int k = 0; k < TEMPO__QLANES; k++) {
            float sq = x[i + k] * x[i + k];
            s[k] += sq;
        }
    }
    for (int k = 0; i + (size_t)k < n; k++) {
        float sq = x[i + k] * x[i + k];
        s[k] += sq;
    }
    return sqrtf(tempo__qfold_f32(s));
}

/*
 * A bucket's fitting statistics (quant.c's tempo__qstats_compute folds them over the buckets), from
 * its sum s, sum of squares s2 (double, in the shared order) and largest magnitude mx:
 * out[0] its norm (L2, or linf: mx), -1 where the bucket is skipped (zero, or not finite);
 * out[1] the sum of its normalized coordinates (s / norm); out[2] their unbiased variance (>= 0).
 */
TEMPO_HD void tempo__qstats_finish(double s, double s2, double mx, size_t n, int linf,
                                   double *out)
{
    double norm = linf ? mx : sqrt(s2);
    if (!(norm > 0) || !isfinite(norm) || !isfinite(s2)) {
        out[0] = -1.0;
        out[1] = out[2] = 0.0;
        return;
    }
    double rsum = s / norm, mean = rsum / (double)n;
    double r2 = linf ? s2 / (norm * norm) : 1.0; /* sum r^2 (1 for L2) */
    double var = n > 1 ? (r2 - (double)n * mean * mean) / (double)(n - 1) : 0.0;
    out[0] = norm;
    out[1] = rsum;
    out[2] = var > 0 ? var : 0.0;
}

TEMPO_HD void tempo__qstats_bucket(const float *x, size_t n, int linf, double *out)
{
    double s[TEMPO__QLANES], s2[TEMPO__QLANES];
    float m = 0.0f;
    for (int k = 0; k < TEMPO__QLANES; k++) {
        s[k] = s2[k] = 0.0;
    }
    for (size_t i = 0; i < n; i += TEMPO__QLANES) {
        int m32 = n - i < TEMPO__QLANES ? (int)(n - i) : TEMPO__QLANES;
        for (int k = 0; k < m32; k++) {
            double v = x[i + k], sq = v * v;
            float a = fabsf(x[i + k]);
            s[k] += v;
            s2[k] += sq;
            m = a > m ? a : m; /* NaNs never win (a NaN's s2 skips the bucket anyway) */
        }
    }
    double sum = tempo__qfold_f64(s), sum2 = tempo__qfold_f64(s2);
    tempo__qstats_finish(sum, sum2, (double)m, n, linf, out);
}

#endif /* TEMPO_QUANT_QMATH_H */
