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

#include "quant/qmath.h"
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

/*
 * The quantizer kernel works on blocks of 8 coordinates with GCC vector types: each coordinate's
 * uniform is quant/qmath.h's counter-based hash of (the call's seed, its index), computed 8 lanes
 * at a time; the interval of r is found by counting the interior levels <= r (nl - 2
 * comparisons; tables of more than 16 levels use the binary search per coordinate, which finds
 * the same interval), with lo and 1/(hi - lo) selected alongside. On x86-64 it is compiled twice
 * (AVX2 and the baseline) and chosen at run time; both do the same IEEE operations as
 * tempo__qlevel (no FMA), so they give its bits (tests/unit/test_qmath.c).
 */
typedef float qv8f __attribute__((vector_size(32)));
typedef int32_t qv8i __attribute__((vector_size(32)));
typedef uint32_t qv8u __attribute__((vector_size(32)));
typedef uint8_t qv32b __attribute__((vector_size(32)));

/* m ? a : b, lane-wise (m is 0 or -1); a macro, since vector arguments would change the ABI
 * between the two compiled versions. */
#define QSEL(m, a, b) ((qv8f)(((m) & (qv8i)(a)) | (~(m) & (qv8i)(b))))

/* The low byte of each of the 8 lanes (the first 8 bytes of the result): GCC's shuffle, or
 * clang's (the fuzz targets, tests/fuzz, are built with clang). */
#if defined(__clang__)
#define QPICK8(v)                                                                                  \
    __builtin_shufflevector((v), (v), 0, 4, 8, 12, 16, 20, 24, 28, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,  \
                            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
#else
#define QPICK8(v) __builtin_shuffle((v), (qv32b){0, 4, 8, 12, 16, 20, 24, 28})
#endif

/* Not under ThreadSanitizer: GCC instruments the ifunc resolver, which the dynamic loader runs
 * before the TSan runtime is up, and every program crashes at load time. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define QUANT_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define QUANT_CLONES
#endif

/* k[i] = the rounded level index of x[i] * inv, for n coordinates (n a multiple of 8) whose
 * indices in the encoded vector start at base; NL is the number of levels (a constant where the
 * caller specializes it). */
static inline __attribute__((always_inline)) void quantize8_nl(const ltab_t *t, uint64_t seed,
                                                               uint64_t base, const float *x,
                                                               size_t n, float inv, uint8_t *k,
                                                               int NL)
{
    const qv8f one = {1, 1, 1, 1, 1, 1, 1, 1}, scale24 = one * (1.0f / 16777216.0f);
    const qv8f vinv = one * inv, lv0 = one * t->lv[0], iw0 = one * t->iw[0];
    const qv8u lane = {0, 1, 2, 3, 4, 5, 6, 7};
    const uint32_t s0 = (uint32_t)seed, s1 = (uint32_t)(seed >> 32);
    /* tempo__sr_bits of indices base + i ... + 7: the low words' odd-multiplier term steps by
     * 8 * 0x9e3779b1 per block (mod 2^32, as the product does); the high words' term is one value
     * for the block unless its low words wrap inside it. */
    qv8u lo_term = ((uint32_t)base + lane) * 0x9e3779b1u + s0;
    for (size_t i = 0; i < n; i += 8, lo_term += 8u * 0x9e3779b1u) {
        uint64_t at = base + i;
        uint32_t lo0 = (uint32_t)at, hi0 = (uint32_t)(at >> 32);
        qv8u hx = lo_term;
        if (TEMPO_LIKELY(lo0 <= UINT32_MAX - 7)) {
            hx ^= s1 + hi0 * 0x85ebca77u;
        } else {
            qv8u ihi = hi0 - (qv8u)(lo0 + lane < lo0);
            hx ^= s1 + ihi * 0x85ebca77u;
        }
        hx ^= hx >> 16;
        hx *= 0x85ebca6bu;
        hx ^= hx >> 13;
        hx *= 0xc2b2ae35u;
        hx ^= hx >> 16;
        qv8f u = __builtin_convertvector((qv8i)(hx >> 8), qv8f) * scale24;
        qv8f r;
        memcpy(&r, x + i, sizeof r);
        r *= vinv;
        r = QSEL(r < -one, -one, r);
        r = QSEL(r > one, one, r);
        qv8i j = {0};
        qv8f lo = lv0, w = iw0;
        if (NL <= 16) {
            for (int q = 1; q < NL - 1; q++) {
                qv8f lq = one * t->lv[q];
                qv8i ge = r >= lq;
                j -= ge;
                lo = QSEL(ge, lq, lo);
                w = QSEL(ge, one * t->iw[q], w);
            }
        } else {
            for (int h = 0; h < 8; h++) {
                j[h] = interval(t, r[h]);
                lo[h] = t->lv[j[h]];
                w[h] = t->iw[j[h]];
            }
        }
        j -= u < (r - lo) * w;
        qv32b kb = QPICK8((qv32b)j);
        memcpy(k + i, &kb, 8);
    }
}

QUANT_CLONES
static void quantize8(const ltab_t *t, uint64_t seed, uint64_t base, const float *x, size_t n,
                      float inv, uint8_t *k)
{
    switch (t->nl) {
    case 2: quantize8_nl(t, seed, base, x, n, inv, k, 2); break;
    case 3: quantize8_nl(t, seed, base, x, n, inv, k, 3); break;
    case 4: quantize8_nl(t, seed, base, x, n, inv, k, 4); break;
    case 8: quantize8_nl(t, seed, base, x, n, inv, k, 8); break;
    case 16: quantize8_nl(t, seed, base, x, n, inv, k, 16); break;
    default: quantize8_nl(t, seed, base, x, n, inv, k, t->nl); break;
    }
}

/* The same for any n: a partial last block is quantized from a zero-padded copy. */
static void quantize(const ltab_t *t, uint64_t seed, uint64_t base, const float *x, size_t n,
                     float inv, uint8_t *k)
{
    size_t full = n & ~(size_t)7;
    quantize8(t, seed, base, x, full, inv, k);
    if (full < n) {
        float xs[8] = {0};
        uint8_t kk[8];
        memcpy(xs, x + full, (n - full) * sizeof(float));
        quantize8(t, seed, base + full, xs, 8, inv, kk);
        memcpy(k + full, kk, n - full);
    }
}

void tempo__qlev_indices(const tempo__qctx_t *c, uint64_t seed, uint64_t base, const float *x,
                         size_t n, float inv, uint8_t *k)
{
    ltab_t t;
    ltab_init(&t, c);
    quantize(&t, seed, base, x, n, inv, k);
}

/* Pack 8-index groups at b bits: group g fills bytes [g*b, (g+1)*b) (the LSB-first layout of
 * tempo__qpack for n a multiple of 8), merging neighbours in three shift-and-mask steps. A group
 * is stored as 8 bytes, the next groups overwriting the spill, except near the end of out, where
 * it is stored with its exact width. */
static inline __attribute__((always_inline)) void pack_groups_b(const uint8_t *k, size_t ngroups,
                                                                int b, uint8_t *out)
{
    for (size_t gi = 0; gi < ngroups; gi++) {
        uint64_t x; /* byte h holds index h (< 2^b) */
        memcpy(&x, k + 8 * gi, 8);
        x = (x & 0x00ff00ff00ff00ffull) | ((x & 0xff00ff00ff00ff00ull) >> (8 - b));
        x = (x & 0x0000ffff0000ffffull) | ((x & 0xffff0000ffff0000ull) >> (16 - 2 * b));
        x = (x & 0x00000000ffffffffull) | ((x & 0xffffffff00000000ull) >> (32 - 4 * b));
        memcpy(out + gi * b, &x, (gi + 1) * b + 8 - b <= ngroups * b ? 8 : (size_t)b);
    }
}

static void pack_groups(const uint8_t *k, size_t ngroups, int b, uint8_t *out)
{
    switch (b) {
    case 1: pack_groups_b(k, ngroups, 1, out); break;
    case 2: pack_groups_b(k, ngroups, 2, out); break;
    case 3: pack_groups_b(k, ngroups, 3, out); break;
    case 4: pack_groups_b(k, ngroups, 4, out); break;
    case 5: pack_groups_b(k, ngroups, 5, out); break;
    case 6: pack_groups_b(k, ngroups, 6, out); break;
    case 7: pack_groups_b(k, ngroups, 7, out); break;
    default: pack_groups_b(k, ngroups, 8, out); break;
    }
}

/* Indices are staged QSTAGE at a time (a multiple of 8, so each flush starts on a byte). */
#define QSTAGE 4096

/* Every level kind: each bucket is divided by its L2 or L-inf norm (p->norm), its coordinates are
 * rounded stochastically between adjacent levels, and the indices are packed (or entropy-coded). */
size_t tempo__qlev_encode(const tempo__qctx_t *c, const float *in, size_t count, void *out);
size_t tempo__qlev_encode(const tempo__qctx_t *c, const float *in, size_t count, void *out)
{
    const tempo__qparams_t *p = c->p;
    const int linf = p->norm == TEMPO__QNORM_LINF;
    size_t nb = nbuckets(p, count), d = p->bucket;
    int b = p->bits;
    ltab_t t;
    ltab_init(&t, c);
    uint64_t seed = tempo__rng_next(c->rng); /* the stochastic rounding's (quant/qmath.h) */
    uint8_t *o = out;
    uint8_t *body = o + nb * 4 + (p->entropy != TEMPO__QENT_NONE);
    uint8_t *idx = p->entropy != TEMPO__QENT_NONE ? scratch_idx(count) : NULL;
    int fused = idx == NULL;
    uint8_t stg[QSTAGE];
    size_t staged = 0, flushed = 0; /* fused: indices in stg[], indices already packed */
    for (size_t bk = 0; bk < nb; bk++) {
        const float *x = in + bk * d;
        size_t n = TEMPO_MIN(d, count - bk * d);
        float scale = tempo__qscale(x, n, linf, p->clip);
        if (!isfinite(scale)) {
            scale = NAN; /* decodes to NaN: the input was not finite */
        }
        memcpy(o + bk * 4, &scale, 4);
        float inv = scale > 0 ? 1.0f / scale : 0.0f; /* zero/NaN bucket: indices are arbitrary */
        if (!fused) {
            quantize(&t, seed, bk * d, x, n, inv, idx + bk * d);
            continue;
        }
        for (size_t i = 0; i < n;) {
            size_t take = TEMPO_MIN(n - i, QSTAGE - staged);
            quantize(&t, seed, bk * d + i, x + i, take, inv, stg + staged);
            staged += take;
            i += take;
            if (staged == QSTAGE) {
                pack_groups(stg, QSTAGE / 8, b, body + flushed / 8 * b);
                flushed += QSTAGE;
                staged = 0;
            }
        }
    }
    if (fused) {
        tempo__qpack(stg, staged, b, body + flushed / 8 * b);
        return (size_t)(body - o) + tempo__qpacked_bytes(count, b);
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
        tab[k] = tempo__qdecode(scale, c->levels, k);
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
