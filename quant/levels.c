/*
 * levels.c — the level quantizers (qsgd, qsgdinf, nuqsgd, terngrad, alq, amq): each bucket of
 * p->bucket coordinates is divided by its norm (L2, or L-inf), and every normalized coordinate r
 * is rounded at random to one of the two adjacent levels lo <= r <= hi of a signed table, up with
 * probability (r - lo)/(hi - lo). So E[level] = r exactly (unbiased) and the variance of one
 * coordinate is (hi - r)(r - lo) * norm^2. The table comes from the caller (ctx->levels: fixed for
 * qsgd/nuqsgd/terngrad, fitted for alq/amq); this file only quantizes, packs and codes.
 *
 * Not here: level fitting (fit.c), the state that decides which table a call uses (quant.c).
 *
 * Wire format of one call (count coordinates, nb = ceil(count / bucket) buckets):
 *   entropy=none   nb fp32 scales | the level indices packed at b bits, LSB first
 *   entropy=rans|zstd
 *                  nb fp32 scales | 1 byte stage (0 packed, 1 rANS, 2 zstd) | payload
 *   The entropy stage codes one byte per index and is used only when it is smaller than the
 *   packed form, so a call never exceeds bound(). A zero bucket has scale 0 and decodes to zeros
 *   whatever its indices. decode() checks the length and, where the table has fewer than 2^b
 *   levels, every index, before it writes anything.
 *
 * TernGrad with clip=1 clips each bucket at 2.5 standard deviations before scaling (Wen et al.), so
 * it is biased; without clipping it is the L-inf quantizer on {-1, 0, 1}.
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>
#if TEMPO_HAVE_ZSTD
#include <zstd.h>
#endif

#include "quant/quant.h"

/* ---------------------------------------------------------------------------------------------- */
/* Tables                                                                                         */
/* ---------------------------------------------------------------------------------------------- */

void tempo__qlevels_uniform(int bits, int zero, float *lv)
{
    int nl = tempo__qnlevels(bits, zero);
    for (int i = 0; i < nl; i++) {
        lv[i] = (float)(-1.0 + 2.0 * i / (nl - 1));
    }
    if (zero) {
        lv[nl / 2] = 0.0f;
    }
}

void tempo__qlevels_exp(int bits, int zero, double mul, float *lv)
{
    int nl = tempo__qnlevels(bits, zero), s = zero ? (nl - 1) / 2 : nl / 2;
    for (int k = 0; k < s; k++) { /* positive levels: mul^(s-1-k) ... 1 */
        float v = (float)pow(mul, s - 1 - k);
        lv[nl - s + k] = v;
        lv[s - 1 - k] = -v;
    }
    if (zero) {
        lv[s] = 0.0f;
    }
}

double tempo__qlevels_coord_var(const float *lv, int nl, double r)
{
    int j = 0;
    while (j < nl - 2 && (double)lv[j + 1] <= r) {
        j++;
    }
    return ((double)lv[j + 1] - r) * (r - (double)lv[j]);
}

/* ---------------------------------------------------------------------------------------------- */
/* Bit packing                                                                                    */
/* ---------------------------------------------------------------------------------------------- */

void tempo__qpack(const uint8_t *idx, size_t n, int b, uint8_t *out)
{
    uint64_t acc = 0;
    int nacc = 0;
    for (size_t i = 0; i < n; i++) {
        acc |= (uint64_t)idx[i] << nacc;
        nacc += b;
        if (nacc >= 32) {
            uint32_t w = (uint32_t)acc;
            memcpy(out, &w, 4);
            out += 4;
            acc >>= 32;
            nacc -= 32;
        }
    }
    for (; nacc > 0; nacc -= 8) {
        *out++ = (uint8_t)acc;
        acc >>= 8;
    }
}

/* LSB-first reader of b-bit fields: whole 32-bit words while they last, then bytes, so that it
 * never reads past ceil(n * b / 8) bytes. */
typedef struct bitrd {
    const uint8_t *in;
    size_t nbytes, pos;
    uint64_t acc, mask;
    int nacc, b;
} bitrd_t;

static inline void bitrd_init(bitrd_t *r, const uint8_t *in, size_t n, int b)
{
    *r = (bitrd_t){in, tempo__qpacked_bytes(n, b), 0, 0, (1u << b) - 1, 0, b};
}

static inline unsigned bitrd_next(bitrd_t *r)
{
    if (r->nacc < r->b) {
        if (r->pos + 4 <= r->nbytes) {
            uint32_t w;
            memcpy(&w, r->in + r->pos, 4);
            r->acc |= (uint64_t)w << r->nacc;
            r->pos += 4;
            r->nacc += 32;
        } else {
            r->acc |= (uint64_t)r->in[r->pos++] << r->nacc;
            r->nacc += 8;
        }
    }
    unsigned k = (unsigned)(r->acc & r->mask);
    r->acc >>= r->b;
    r->nacc -= r->b;
    return k;
}

void tempo__qunpack(const uint8_t *in, size_t n, int b, uint8_t *idx)
{
    bitrd_t r;
    bitrd_init(&r, in, n, b);
    for (size_t i = 0; i < n; i++) {
        idx[i] = (uint8_t)bitrd_next(&r);
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Encoding                                                                                       */
/* ---------------------------------------------------------------------------------------------- */

/* A thread's scratch for index bytes (entropy stages, index checks); grows, never shrinks. */
static uint8_t *scratch_idx(size_t n)
{
    static __thread uint8_t *buf;
    static __thread size_t cap;
    if (n > cap || !buf) {
        n = n ? n : 64;
        uint8_t *p = realloc(buf, n);
        if (!p) {
            return NULL;
        }
        buf = p;
        cap = n;
    }
    return buf;
}

static size_t nbuckets(const tempo__qparams_t *p, size_t count)
{
    return (count + p->bucket - 1) / p->bucket;
}

size_t tempo__qlev_bound(const tempo__qparams_t *p, size_t count);
size_t tempo__qlev_bound(const tempo__qparams_t *p, size_t count)
{
    return nbuckets(p, count) * 4 + (p->entropy != TEMPO__QENT_NONE) +
           tempo__qpacked_bytes(count, p->bits);
}

/* The search table: levels padded to 2^b with +inf, and 1/(hi - lo) per interval. */
typedef struct ltab {
    float lv[257];
    float iw[256];
    int nl, steps;
} ltab_t;

static void ltab_init(ltab_t *t, const tempo__qctx_t *c)
{
    int b = c->p->bits;
    t->nl = c->nlevels;
    for (int i = 0; i < (1 << b) + 1; i++) {
        t->lv[i] = i < t->nl ? c->levels[i] : INFINITY;
    }
    for (int i = 0; i + 1 < t->nl; i++) {
        t->iw[i] = 1.0f / (t->lv[i + 1] - t->lv[i]);
    }
    t->steps = b;
}

/* Interval j (0 <= j <= nl - 2) with lv[j] <= r, by a branch-free binary search. */
static inline int interval(const ltab_t *t, float r)
{
    int j = 0;
    for (int step = 1 << (t->steps - 1); step; step >>= 1) {
        j += (t->lv[j + step] <= r) ? step : 0;
    }
    return j < t->nl - 2 ? j : t->nl - 2;
}

static float bucket_scale(const float *x, size_t n, int linf, int clip)
{
    if (linf) {
        float m = 0.0f, lim = INFINITY;
        if (clip) {
            double s = 0, s2 = 0;
            for (size_t i = 0; i < n; i++) {
                s += x[i];
                s2 += (double)x[i] * x[i];
            }
            double mean = s / (double)n, var = s2 / (double)n - mean * mean;
            lim = (float)(2.5 * sqrt(var > 0 ? var : 0));
        }
        for (size_t i = 0; i < n; i++) {
            float a = fabsf(x[i]);
            m = a > m ? a : m;
        }
        return clip && lim < m ? lim : m;
    }
    float s[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        for (int k = 0; k < 8; k++) {
            s[k] += x[i + k] * x[i + k];
        }
    }
    for (; i < n; i++) {
        s[0] += x[i] * x[i];
    }
    return sqrtf(((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])));
}

/* Quantize one bucket into indices, calling emit(k) in order. */
#define QUANTIZE_BUCKET(EMIT)                                                  \
    do {                                                                       \
        float inv = scale > 0 ? 1.0f / scale : 0.0f;                           \
        size_t i = 0;                                                          \
        for (; i < n; i += 2) {                                                \
            uint64_t rnd = tempo__rng_next(c->rng);                            \
            for (size_t h = 0; h < 2 && i + h < n; h++) {                      \
                float r = x[i + h] * inv;                                      \
                r = r < -1.0f ? -1.0f : (r > 1.0f ? 1.0f : r);                 \
                int j = interval(&t, r);                                       \
                float up = (r - t.lv[j]) * t.iw[j];                            \
                float u = (float)((rnd >> (40 - 24 * h)) & 0xffffff) *         \
                          (1.0f / 16777216.0f);                                \
                unsigned k = (unsigned)j + (u < up);                           \
                EMIT;                                                          \
            }                                                                  \
        }                                                                      \
    } while (0)

static size_t lev_encode(const tempo__qctx_t *c, const float *in, size_t count, void *out,
                         int linf)
{
    const tempo__qparams_t *p = c->p;
    size_t nb = nbuckets(p, count), d = p->bucket;
    int b = p->bits;
    ltab_t t;
    ltab_init(&t, c);
    uint8_t *o = out;
    uint8_t *body = o + nb * 4 + (p->entropy != TEMPO__QENT_NONE);
    uint8_t *idx = p->entropy != TEMPO__QENT_NONE ? scratch_idx(count) : NULL;
    int fused = idx == NULL;
    uint64_t acc = 0;
    int nacc = 0;
    uint8_t *w = body;
    for (size_t bk = 0; bk < nb; bk++) {
        const float *x = in + bk * d;
        size_t n = TEMPO_MIN(d, count - bk * d);
        float scale = bucket_scale(x, n, linf, p->clip);
        if (!isfinite(scale)) {
            scale = NAN; /* decodes to NaN: the input was not finite */
        }
        memcpy(o + bk * 4, &scale, 4);
        if (!(scale > 0)) {
            scale = 0; /* indices of a zero (or NaN) bucket are arbitrary; 0 < r never */
        }
        if (fused) {
            QUANTIZE_BUCKET({
                acc |= (uint64_t)k << nacc;
                nacc += b;
                if (nacc >= 32) {
                    uint32_t word = (uint32_t)acc;
                    memcpy(w, &word, 4);
                    w += 4;
                    acc >>= 32;
                    nacc -= 32;
                }
            });
        } else {
            uint8_t *ix = idx + bk * d;
            QUANTIZE_BUCKET(ix[i + h] = (uint8_t)k);
        }
    }
    if (fused) {
        for (; nacc > 0; nacc -= 8) {
            *w++ = (uint8_t)acc;
            acc >>= 8;
        }
        return (size_t)(w - o);
    }
    /* Entropy stage: keep it only if it beats packing. */
    size_t packed = tempo__qpacked_bytes(count, b), got = 0;
    uint8_t *stage = body - 1;
    if (p->entropy == TEMPO__QENT_RANS) {
        got = tempo__rans_encode(idx, count, t.nl, body, packed);
        *stage = 1;
    }
#if TEMPO_HAVE_ZSTD
    if (p->entropy == TEMPO__QENT_ZSTD) {
        size_t z = ZSTD_compress(body, packed, idx, count, 1);
        got = ZSTD_isError(z) ? 0 : z;
        *stage = 2;
    }
#endif
    if (got == 0 || got >= packed) {
        *stage = 0;
        tempo__qpack(idx, count, b, body);
        got = packed;
    }
    return (size_t)(body - o) + got;
}

size_t tempo__qlev_encode_l2(const tempo__qctx_t *c, const float *in, size_t count, void *out);
size_t tempo__qlev_encode_l2(const tempo__qctx_t *c, const float *in, size_t count, void *out)
{
    return lev_encode(c, in, count, out, 0);
}

size_t tempo__qlev_encode_linf(const tempo__qctx_t *c, const float *in, size_t count, void *out);
size_t tempo__qlev_encode_linf(const tempo__qctx_t *c, const float *in, size_t count, void *out)
{
    return lev_encode(c, in, count, out, 1);
}

/* ---------------------------------------------------------------------------------------------- */
/* Decoding                                                                                       */
/* ---------------------------------------------------------------------------------------------- */

static tempo_status_t malformed(const char *what, size_t len, size_t count)
{
    return tempo__err(TEMPO_ERR_REMOTE,
                      "malformed compressed message: %s (%zu bytes for %zu coordinates)", what, len,
                      count);
}

/* The decoded value of each level in bucket bk: level * scale (0 for a zero bucket). */
static void bucket_table(const tempo__qctx_t *c, const uint8_t *scales, size_t bk, float *tab)
{
    float scale;
    memcpy(&scale, scales + bk * 4, 4);
    for (int k = 0; k < c->nlevels; k++) {
        tab[k] = scale == 0 ? 0.0f : c->levels[k] * scale;
    }
}

/* out[i] (+)= tab[index i] per bucket from a packed stream. */
static void decode_packed(const tempo__qctx_t *c, const uint8_t *scales, const uint8_t *in,
                          size_t count, float *out, int accumulate)
{
    size_t d = c->p->bucket, nb = nbuckets(c->p, count);
    bitrd_t r;
    bitrd_init(&r, in, count, c->p->bits);
    float tab[256];
    for (size_t bk = 0; bk < nb; bk++) {
        bucket_table(c, scales, bk, tab);
        size_t n = TEMPO_MIN(d, count - bk * d);
        float *y = out + bk * d;
        for (size_t i = 0; i < n; i++) {
            float v = tab[bitrd_next(&r)];
            y[i] = accumulate ? y[i] + v : v;
        }
    }
}

static void decode_bytes(const tempo__qctx_t *c, const uint8_t *scales, const uint8_t *idx,
                         size_t count, float *out, int accumulate)
{
    size_t d = c->p->bucket, nb = nbuckets(c->p, count);
    float tab[256];
    for (size_t bk = 0; bk < nb; bk++) {
        bucket_table(c, scales, bk, tab);
        size_t n = TEMPO_MIN(d, count - bk * d);
        const uint8_t *ix = idx + bk * d;
        float *y = out + bk * d;
        for (size_t i = 0; i < n; i++) {
            y[i] = accumulate ? y[i] + tab[ix[i]] : tab[ix[i]];
        }
    }
}

static int indices_valid(const uint8_t *idx, size_t n, int nl)
{
    uint8_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        bad |= idx[i] >= nl;
    }
    return !bad;
}

tempo_status_t tempo__qlev_decode(const tempo__qctx_t *c, const void *in, size_t len, size_t count,
                                  float *out, int accumulate);
tempo_status_t tempo__qlev_decode(const tempo__qctx_t *c, const void *in, size_t len, size_t count,
                                  float *out, int accumulate)
{
    const tempo__qparams_t *p = c->p;
    const uint8_t *i8 = in;
    size_t head = nbuckets(p, count) * 4, packed = tempo__qpacked_bytes(count, p->bits);
    int full = c->nlevels == (1 << p->bits); /* every b-bit pattern is a level */
    if (p->entropy == TEMPO__QENT_NONE) {
        if (len != head + packed) {
            return malformed("wrong length", len, count);
        }
        if (!full) {
            uint8_t *idx = scratch_idx(count);
            if (!idx) {
                return tempo__err(TEMPO_ERR_NOMEM, "out of memory decoding %zu coordinates", count);
            }
            tempo__qunpack(i8 + head, count, p->bits, idx);
            if (!indices_valid(idx, count, c->nlevels)) {
                return malformed("level index out of range", len, count);
            }
            decode_bytes(c, i8, idx, count, out, accumulate);
            return TEMPO_OK;
        }
        decode_packed(c, i8, i8 + head, count, out, accumulate);
        return TEMPO_OK;
    }
    if (len < head + 1) {
        return malformed("too short", len, count);
    }
    uint8_t stage = i8[head];
    const uint8_t *body = i8 + head + 1;
    size_t blen = len - head - 1;
    if (stage == 0) {
        if (blen != packed) {
            return malformed("wrong length", len, count);
        }
        if (full) {
            decode_packed(c, i8, body, count, out, accumulate);
            return TEMPO_OK;
        }
    }
    uint8_t *idx = scratch_idx(count);
    if (!idx) {
        return tempo__err(TEMPO_ERR_NOMEM, "out of memory decoding %zu coordinates", count);
    }
    if (stage == 0) {
        tempo__qunpack(body, count, p->bits, idx);
    } else if (stage == 1) {
        TEMPO_CHECK(tempo__rans_decode(body, blen, count, c->nlevels, idx));
    } else if (stage == 2) {
#if TEMPO_HAVE_ZSTD
        size_t z = ZSTD_decompress(idx, count, body, blen);
        if (ZSTD_isError(z) || z != count) {
            return malformed("bad zstd stream", len, count);
        }
#else
        return malformed("zstd stage in a build without zstd", len, count);
#endif
    } else {
        return malformed("unknown entropy stage", len, count);
    }
    if (!indices_valid(idx, count, c->nlevels)) {
        return malformed("level index out of range", len, count);
    }
    decode_bytes(c, i8, idx, count, out, accumulate);
    return TEMPO_OK;
}
