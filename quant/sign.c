/*
 * sign.c — scaled sign, the compressor of EF-signSGD (Karimireddy et al., ICML 2019): each bucket
 * of p->bucket coordinates is sent as its mean magnitude ||x||_1 / d and one sign bit per
 * coordinate, and decodes to ±(that mean).
 *
 * What it is not: the error feedback of EF-signSGD. The caller adds the residual before encode()
 * and keeps input - decode(encode(input)); this file is a pure function of its input and bucket.
 * Nor is it signSGD with majority vote: decoded vectors of several ranks are summed (GATHER), not
 * voted.
 *
 * Wire format (little-endian), for count coordinates, bucket b (0: one bucket of the whole
 * tensor), nb = ceil(count / b) buckets:
 *   nb   fp32   scale of each bucket, in bucket order: mean |x| over the bucket (the last bucket
 *               may be partial and is averaged over its own length)
 *   ceil(count / 8) bytes of sign bits, coordinate i at bit (i % 8) of byte i / 8 (LSB-first);
 *               a set bit means negative. The bits run over the whole tensor, not per bucket, so
 *               a partial bucket costs no padding. Unused high bits of the last byte are zero.
 * Total tempo__qsign_bound() bytes exactly; count 0 is 0 bytes.
 *
 * Invariants: the sign of x is +1 for x >= 0, so 0 and -0 decode to +scale (signSGD's convention
 * sign(0) = +1 keeps every coordinate at ±scale); NaN is "not >= 0" and decodes to -scale, and
 * poisons its bucket's scale, so it reaches the sum as it would uncompressed. The scale is the
 * double-precision mean rounded once to fp32; the summation order is fixed (8 fp32 lanes flushed to
 * double every 1024 coordinates), so encode is deterministic.
 */
#include "config.h"

#include "core/tempo_int.h"
#include "quant/kinds_sparse.h"

#include <math.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Coordinates per bucket: a bucket keeps the scale local (one large coordinate does not inflate
 * the scale of a whole layer), at 32 bits per 4096 coordinates, under 1 % of the payload. */
#define SIGN_DEFAULT_BUCKET 4096

/* Coordinates summed in fp32 before the partial sums go into the double total. */
#define SIGN_SUM_BLOCK 1024

void tempo__qsign_defaults(tempo__qparams_t *p)
{
    p->bucket = SIGN_DEFAULT_BUCKET;
    p->ef = 1; /* scaled sign is biased: without error feedback it does not converge in general */
}

/* The bucket in effect: p->bucket, or the whole tensor for 0. */
static size_t sign_bucket(const tempo__qparams_t *p, size_t count)
{
    if (p->bucket) {
        return p->bucket;
    }
    return count ? count : 1;
}

size_t tempo__qsign_bound(const tempo__qparams_t *p, size_t count)
{
    if (count == 0) {
        return 0;
    }
    size_t b = sign_bucket(p, count);
    size_t nb = (count + b - 1) / b;
    return nb * sizeof(float) + (count + 7) / 8;
}

/* Mean |x| of x[0..n), n >= 1: fp32 lanes (vectorizable, fixed order) flushed into a double. */
static float sign_scale(const float *x, size_t n)
{
    double total = 0.0;
    size_t i = 0;
    while (i < n) {
        size_t end = TEMPO_MIN(n, i + SIGN_SUM_BLOCK);
        float lane[8] = {0};
        for (; i + 8 <= end; i += 8) {
            for (int t = 0; t < 8; t++) {
                lane[t] += fabsf(x[i + t]);
            }
        }
        for (; i < end; i++) {
            lane[0] += fabsf(x[i]);
        }
        for (int t = 0; t < 8; t++) {
            total += lane[t];
        }
    }
    return (float)(total / (double)n);
}

/* Sign bits of x[0..8) as one byte: bit t set when x[t] is negative or NaN. */
static inline uint8_t sign_pack8(const float *x)
{
#if defined(__SSE2__)
    /* cmpnge is "not >= 0", true for negatives and NaN: exactly the rule of the scalar path */
    __m128 z = _mm_setzero_ps();
    int lo = _mm_movemask_ps(_mm_cmpnge_ps(_mm_loadu_ps(x), z));
    int hi = _mm_movemask_ps(_mm_cmpnge_ps(_mm_loadu_ps(x + 4), z));
    return (uint8_t)(lo | (hi << 4));
#else
    uint8_t v = 0;
    for (int t = 0; t < 8; t++) {
        v |= (uint8_t)(!(x[t] >= 0.0f) << t);
    }
    return v;
#endif
}

size_t tempo__qsign_encode(const tempo__qctx_t *c, const float *in, size_t count, void *out)
{
    if (count == 0) {
        return 0;
    }
    size_t b = sign_bucket(c->p, count);
    size_t nb = (count + b - 1) / b;
    unsigned char *scales = out;
    unsigned char *bits = scales + nb * sizeof(float);
    /* buckets need not start on a byte boundary: the straddling bytes are OR-ed from both sides */
    memset(bits, 0, (count + 7) / 8);
    for (size_t k = 0; k < nb; k++) {
        size_t b0 = k * b, b1 = TEMPO_MIN(count, b0 + b);
        float s = sign_scale(in + b0, b1 - b0);
        memcpy(scales + k * sizeof(float), &s, sizeof(s));
        size_t i = b0;
        for (; i < b1 && (i & 7); i++) {
            bits[i >> 3] |= (uint8_t)(!(in[i] >= 0.0f) << (i & 7));
        }
        for (; i + 8 <= b1; i += 8) {
            bits[i >> 3] = sign_pack8(in + i);
        }
        for (; i < b1; i++) {
            bits[i >> 3] |= (uint8_t)(!(in[i] >= 0.0f) << (i & 7));
        }
    }
    return nb * sizeof(float) + (count + 7) / 8;
}

tempo_status_t tempo__qsign_decode(const tempo__qctx_t *c, const void *in, size_t len, size_t count,
                                   float *out, int accumulate)
{
    size_t want = tempo__qsign_bound(c->p, count);
    if (len != want) {
        return tempo__err(TEMPO_ERR_REMOTE,
                          "sign: message of %zu bytes for %zu coordinates, expected %zu (bucket "
                          "%zu): a peer uses other parameters or sent a corrupt message",
                          len, count, want, c->p->bucket);
    }
    if (count == 0) {
        return TEMPO_OK;
    }
    size_t b = sign_bucket(c->p, count);
    size_t nb = (count + b - 1) / b;
    const unsigned char *scales = in;
    const unsigned char *bits = scales + nb * sizeof(float);
    for (size_t k = 0; k < nb; k++) {
        size_t b0 = k * b, b1 = TEMPO_MIN(count, b0 + b);
        uint32_t sb;
        memcpy(&sb, scales + k * sizeof(float), sizeof(sb));
        /* ±scale by flipping the sign bit of scale: exact, and branch-free */
        if (accumulate) {
            for (size_t i = b0; i < b1; i++) {
                uint32_t u = sb ^ ((uint32_t)((bits[i >> 3] >> (i & 7)) & 1u) << 31);
                float v;
                memcpy(&v, &u, sizeof(v));
                out[i] += v;
            }
        } else {
            for (size_t i = b0; i < b1; i++) {
                uint32_t u = sb ^ ((uint32_t)((bits[i >> 3] >> (i & 7)) & 1u) << 31);
                memcpy(&out[i], &u, sizeof(u));
            }
        }
    }
    return TEMPO_OK;
}
