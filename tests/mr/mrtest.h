/*
 * mrtest.h — helpers shared by the multi-rank test programs in tests/mr (coll_test, difftest, ...).
 *
 * A multi-rank test must not trust the library it tests to report on itself, so these programs do
 * not print TAP: every rank writes one line per check to its own result file DIR/r<rank>
 * ("GROUP STATUS DETAIL", STATUS one of PASS, FAIL, SKIP), ends it with "END" when it finished
 * normally, and the shell script that launched the job aggregates the files into TAP points.
 *
 * What is here: the result file, a 64-bit mixer for reproducible pseudo-random data, IEEE
 * binary16 / bfloat16 <-> binary32 conversions (round to nearest, ties to even) written from the
 * formats' definitions, so that expected values do not come from the library's own converters,
 * and the verifiable data of coll_test and difftest: per-dtype element helpers, reduction inputs
 * whose result is exact in any order (mr_red_tables), byte patterns for data movement
 * (mr_gen_bytes), guarded and poisoned buffers, checks that describe the first wrong element,
 * and the parser of the --big-bytes option (mr_big_bytes). Header-only; everything is static inline so a program may use any subset.
 */
#ifndef TEMPO_TESTS_MRTEST_H
#define TEMPO_TESTS_MRTEST_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tempo.h"

/* ---------------------------------------------------------------------------------------------- */
/* Options                                                                                        */
/* ---------------------------------------------------------------------------------------------- */

/** The value of --big-bytes BYTES (coll_test, determinism): the large size of a whole buffer, from
 *  64 KiB to max, the program's default. A slow build (ThreadSanitizer) runs the large cases
 *  through the same multi-segment paths at a fraction of the cost. 0 if text is not such a
 *  number. */
static inline size_t mr_big_bytes(const char *text, size_t max)
{
    char *end;
    unsigned long long v = strtoull(text, &end, 0);
    return *text && !*end && v >= 65536 && v <= max ? (size_t)v : 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* Pseudo-random data                                                                             */
/* ---------------------------------------------------------------------------------------------- */

/** splitmix64's finalizer: a bijection of 64-bit values with good avalanche. */
static inline uint64_t mr_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/** A hash of three 64-bit keys. */
static inline uint64_t mr_hash3(uint64_t a, uint64_t b, uint64_t c)
{
    return mr_mix64(mr_mix64(mr_mix64(a) ^ b) ^ c);
}

/* ---------------------------------------------------------------------------------------------- */
/* 16-bit floating point, from the definitions (no library code, no compiler _Float16)            */
/* ---------------------------------------------------------------------------------------------- */

static inline uint32_t mr_f32_bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    return x;
}

static inline float mr_bits_f32(uint32_t x)
{
    float f;
    memcpy(&f, &x, sizeof(f));
    return f;
}

/** binary32 -> binary16, round to nearest, ties to even; overflow gives infinity, NaN stays NaN. */
static inline uint16_t mr_f32_to_f16(float f)
{
    uint32_t x = mr_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) { /* inf, NaN (quiet, payload's top bits kept) */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0));
    }
    if (ax >= 0x477ff000u) { /* >= 65520 = halfway between 65504 (max) and 2^16: infinity */
        return (uint16_t)(sign | 0x7c00u);
    }
    if (ax >= 0x38800000u) { /* >= 2^-14: normal; a carry out of the mantissa bumps the exponent */
        ax += 0xfffu + ((ax >> 13) & 1u);
        ax -= (uint32_t)(127 - 15) << 23;
        return (uint16_t)(sign | (ax >> 13));
    }
    if (ax <= 0x33000000u) { /* <= 2^-25 (half the smallest subnormal, a tie to 0): zero */
        return (uint16_t)sign;
    }
    /* Subnormal: the result is value / 2^-24 rounded to an integer (which may reach 0x400, the
     * smallest normal, whose encoding is the same integer). */
    uint32_t e = ax >> 23; /* 102 .. 112 */
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e; /* 14 .. 24 */
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) {
        q++;
    }
    return (uint16_t)(sign | q);
}

/** binary16 -> binary32 (exact). */
static inline float mr_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    if (e == 0x1f) {
        x = sign | 0x7f800000u | (m << 13);
    } else if (e) {
        x = sign | ((e + 112) << 23) | (m << 13);
    } else if (!m) {
        x = sign;
    } else { /* subnormal m * 2^-24: normalise */
        e = 113;
        while (!(m & 0x400u)) {
            m <<= 1;
            e--;
        }
        x = sign | (e << 23) | ((m & 0x3ffu) << 13);
    }
    return mr_bits_f32(x);
}

/** binary32 -> bfloat16, round to nearest, ties to even; NaN stays (quiet) NaN. */
static inline uint16_t mr_f32_to_bf16(float f)
{
    uint32_t x = mr_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        return (uint16_t)((x >> 16) | 0x40u);
    }
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/** bfloat16 -> binary32 (exact). */
static inline float mr_bf16_to_f32(uint16_t h)
{
    return mr_bits_f32((uint32_t)h << 16);
}

/* ============================================================================================== */
/* dtypes                                                                                         */
/* ============================================================================================== */

/* Element size in bytes, from tempo.h's definitions (not from the library). */
static inline size_t mr_esize(tempo_dtype_t dt)
{
    static const size_t sizes[TEMPO_DTYPE_COUNT] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};
    return sizes[dt];
}

static inline int mr_is_float(tempo_dtype_t dt)
{
    return dt >= TEMPO_FLOAT16;
}

static inline int mr_is_signed(tempo_dtype_t dt)
{
    return dt == TEMPO_INT8 || dt == TEMPO_INT32 || dt == TEMPO_INT64;
}

static inline unsigned mr_bits_of(tempo_dtype_t dt)
{
    return (unsigned)mr_esize(dt) * 8;
}

static inline uint64_t mr_mask_of(tempo_dtype_t dt)
{
    unsigned b = mr_bits_of(dt);
    return b == 64 ? ~0ull : (1ull << b) - 1;
}

/* Sign- or zero-extend a raw value of dt's width. */
static inline int64_t mr_sext(uint64_t raw, tempo_dtype_t dt)
{
    unsigned b = mr_bits_of(dt);
    raw &= mr_mask_of(dt);
    if (b < 64 && (raw >> (b - 1)) & 1) {
        raw |= ~mr_mask_of(dt);
    }
    return (int64_t)raw;
}

/* Store a value that is exactly representable in dt (or, for the 16-bit types, a float to be
 * rounded once) into mr_esize bytes. */
static inline void mr_store_float(uint8_t *dst, tempo_dtype_t dt, double v)
{
    if (dt == TEMPO_FLOAT64) {
        memcpy(dst, &v, 8);
    } else if (dt == TEMPO_FLOAT32) {
        float f = (float)v;
        memcpy(dst, &f, 4);
    } else {
        uint16_t h = dt == TEMPO_FLOAT16 ? mr_f32_to_f16((float)v) : mr_f32_to_bf16((float)v);
        memcpy(dst, &h, 2);
    }
}

static inline void mr_store_int(uint8_t *dst, tempo_dtype_t dt, uint64_t raw)
{
    uint8_t b1 = (uint8_t)raw;
    uint32_t b4 = (uint32_t)raw;
    switch (mr_esize(dt)) {
    case 1: memcpy(dst, &b1, 1); break;
    case 4: memcpy(dst, &b4, 4); break;
    default: memcpy(dst, &raw, 8); break;
    }
}

/* "value (0xbits)" of one element, for diagnostics. Static storage, two alternating buffers. */
static const char *mr_fmt_elem(tempo_dtype_t dt, const uint8_t *p)
{
    static char bufs[2][96];
    static int which;
    char *b = bufs[which ^= 1];
    uint64_t raw = 0;
    memcpy(&raw, p, mr_esize(dt)); /* little-endian host */
    switch (dt) {
    case TEMPO_FLOAT16:
        snprintf(b, 96, "%.9g (0x%04llx)", mr_f16_to_f32((uint16_t)raw), (unsigned long long)raw);
        break;
    case TEMPO_BFLOAT16:
        snprintf(b, 96, "%.9g (0x%04llx)", mr_bf16_to_f32((uint16_t)raw), (unsigned long long)raw);
        break;
    case TEMPO_FLOAT32: {
        float f;
        memcpy(&f, p, 4);
        snprintf(b, 96, "%.9g (0x%08llx)", f, (unsigned long long)raw);
        break;
    }
    case TEMPO_FLOAT64: {
        double d;
        memcpy(&d, p, 8);
        snprintf(b, 96, "%.17g (0x%016llx)", d, (unsigned long long)raw);
        break;
    }
    default:
        if (mr_is_signed(dt)) {
            snprintf(b, 96, "%lld (0x%llx)", (long long)mr_sext(raw, dt), (unsigned long long)raw);
        } else {
            snprintf(b, 96, "%llu (0x%llx)", (unsigned long long)raw, (unsigned long long)raw);
        }
    }
    return b;
}

/* ============================================================================================== */
/* Reduction data: exact whatever the order                                                       */
/* ============================================================================================== */

/*
 * The value of class a on rank r for (dtype, op, salt). h is a hash of (salt, r, a).
 * Integers:
 *   sum        any value of the type: sums wrap (two's complement), exact in any order
 *   prod       from {1, 2, 3, -1, -3, 5, 7, ...}: products wrap, exact in any order
 *   min, max   any value of the type (exercises signed versus unsigned comparison)
 *   avg        small: [-15, 15] signed, [0, 15] unsigned, so the sum of 8 never wraps
 * Floats (every value and every partial sum of up to 8 of them exactly representable in the type,
 * so the result is exact even if a 16-bit type were rounded after every step):
 *   sum, avg   fp16: k/4, |k| <= 255;  bf16: k, |k| <= 31;  fp32: k/256, |k| < 2^20;
 *              fp64: k/65536, |k| < 2^49
 *   prod       from {1, 2, -1, 0.5}: products are powers of two with |exponent| <= 8
 *   min, max   k/2, |k| <= 200 (no -0: k = 0 gives +0)
 */
static inline int64_t mr_span(uint64_t h, int64_t m) /* uniform-ish in [-m, m] */
{
    return (int64_t)(h % (uint64_t)(2 * m + 1)) - m;
}

static inline uint64_t mr_int_value(tempo_dtype_t dt, tempo_op_t op, uint64_t h)
{
    switch (op) {
    case TEMPO_PROD: {
        static const int64_t vals[16] = {1, 2, 3, -1, -3, 5, 7, -7, 1, 2, -1, -2, 9, 11, -5, 1};
        return (uint64_t)vals[h & 15] & mr_mask_of(dt);
    }
    case TEMPO_AVG: return mr_is_signed(dt) ? (uint64_t)mr_span(h, 15) & mr_mask_of(dt) : h % 16;
    default: return h & mr_mask_of(dt);
    }
}

static inline double mr_flt_value(tempo_dtype_t dt, tempo_op_t op, uint64_t h)
{
    switch (op) {
    case TEMPO_PROD: {
        static const double vals[4] = {1.0, 2.0, -1.0, 0.5};
        return vals[h & 3];
    }
    case TEMPO_MIN:
    case TEMPO_MAX: return (double)mr_span(h, 200) / 2;
    default:
        switch (dt) {
        case TEMPO_FLOAT16: return (double)mr_span(h, 255) / 4;
        case TEMPO_BFLOAT16: return (double)mr_span(h, 31);
        case TEMPO_FLOAT32: return (double)mr_span(h, (1 << 20) - 1) / 256;
        default: return (double)mr_span(h, (1ll << 49) - 1) / 65536;
        }
    }
}

typedef struct {
    uint8_t in[16][8];  /* this rank's value of each class */
    uint8_t exp[16][8]; /* the reduction over all ranks of each class */
} mr_red_tabs_t;

/* The tables of a reduction over n ranks whose member r generates its values as owner owners[r]
 * (owners NULL: owner r), seen from member me. Giving each member an owner of its own (a rank of
 * the job rather than of a sub-communicator) makes data from a wrong communicator visible. */
static inline void mr_red_tables(tempo_dtype_t dt, tempo_op_t op, uint64_t salt, int n,
                                 const int *owners, int me, mr_red_tabs_t *t)
{
    memset(t, 0, sizeof(*t));
    for (int a = 0; a < 16; a++) {
        if (mr_is_float(dt)) {
            double acc = 0;
            for (int r = 0; r < n; r++) {
                uint64_t o = (uint64_t)(owners ? owners[r] : r);
                double v = mr_flt_value(dt, op, mr_hash3(salt, o, (uint64_t)a));
                if (r == me) {
                    mr_store_float(t->in[a], dt, v);
                }
                if (r == 0) {
                    acc = v;
                } else if (op == TEMPO_SUM || op == TEMPO_AVG) {
                    acc += v; /* exact: see above */
                } else if (op == TEMPO_PROD) {
                    acc *= v;
                } else if (op == TEMPO_MIN) {
                    acc = v < acc ? v : acc;
                } else {
                    acc = v > acc ? v : acc;
                }
            }
            if (op == TEMPO_AVG) {
                /* The sum is exact; one true division, in the type (fp32 for the 16-bit types,
                 * which are then rounded once). */
                if (dt == TEMPO_FLOAT64) {
                    acc = acc / (double)n;
                } else {
                    volatile float q = (float)acc / (float)n;
                    acc = (double)q;
                }
            }
            mr_store_float(t->exp[a], dt, acc);
        } else {
            uint64_t acc = 0;
            int64_t sacc = 0;
            for (int r = 0; r < n; r++) {
                uint64_t o = (uint64_t)(owners ? owners[r] : r);
                uint64_t v = mr_int_value(dt, op, mr_hash3(salt, o, (uint64_t)a));
                if (r == me) {
                    mr_store_int(t->in[a], dt, v);
                }
                if (op == TEMPO_SUM) {
                    acc += v; /* mod 2^64, truncated to the width below */
                } else if (op == TEMPO_PROD) {
                    acc = r == 0 ? v : acc * v;
                } else if (op == TEMPO_AVG) {
                    if (mr_is_signed(dt)) {
                        sacc += mr_sext(v, dt);
                    } else {
                        acc += v;
                    }
                } else {
                    int less = mr_is_signed(dt) ? mr_sext(v, dt) < mr_sext(acc, dt) : v < acc;
                    if (r == 0 || (op == TEMPO_MIN ? less : !less && v != acc)) {
                        acc = v;
                    }
                }
            }
            if (op == TEMPO_AVG) {
                /* C's integer division (truncation toward zero) */
                acc = mr_is_signed(dt) ? (uint64_t)(sacc / n) : acc / (uint64_t)n;
            }
            mr_store_int(t->exp[a], dt, acc & mr_mask_of(dt));
        }
    }
}

/* dst[i] = tab[A[i]] for i < count (A: the classes of the elements, offset by the caller). */
static inline void mr_fill_tab(const uint8_t *A, uint8_t *dst, size_t count, size_t es,
                               const uint8_t (*tab)[8])
{
    switch (es) {
    case 1:
        for (size_t i = 0; i < count; i++) {
            dst[i] = tab[A[i]][0];
        }
        break;
    case 2:
        for (size_t i = 0; i < count; i++) {
            memcpy(dst + 2 * i, tab[A[i]], 2);
        }
        break;
    case 4:
        for (size_t i = 0; i < count; i++) {
            memcpy(dst + 4 * i, tab[A[i]], 4);
        }
        break;
    default:
        for (size_t i = 0; i < count; i++) {
            memcpy(dst + 8 * i, tab[A[i]], 8);
        }
    }
}

/* Index of the first i < count with buf[i] != tab[A[i]] (bitwise), or -1. */
#define MR_CHECK_TAB_LOOP(T)                          \
    for (size_t i = 0; i < count; i++) {              \
        T got, want;                                  \
        memcpy(&got, buf + i * sizeof(T), sizeof(T)); \
        memcpy(&want, tab[A[i]], sizeof(T));          \
        if (got != want) {                            \
            return (long)i;                           \
        }                                             \
    }
static inline long mr_check_tab(const uint8_t *A, const uint8_t *buf, size_t count, size_t es,
                                const uint8_t (*tab)[8])
{
    switch (es) {
    case 1: MR_CHECK_TAB_LOOP(uint8_t) break;
    case 2: MR_CHECK_TAB_LOOP(uint16_t) break;
    case 4: MR_CHECK_TAB_LOOP(uint32_t) break;
    default: MR_CHECK_TAB_LOOP(uint64_t)
    }
    return -1;
}

/* ============================================================================================== */
/* Data-movement data: a hash of (salt, owner, byte index)                                        */
/* ============================================================================================== */

static inline void mr_gen_bytes(uint8_t *dst, size_t nbytes, uint64_t salt, int owner, size_t k0)
{
    uint64_t key = mr_mix64(salt) ^ ((uint64_t)owner << 48);
    size_t k = k0;
    size_t i = 0;
    while (i < nbytes) {
        uint64_t w = mr_mix64(key ^ mr_mix64(k >> 3));
        for (size_t j = k & 7; j < 8 && i < nbytes; j++, i++, k++) {
            dst[i] = (uint8_t)(w >> (8 * j));
        }
    }
}

/* First byte index i < nbytes where buf differs from mr_gen_bytes(salt, owner, k0 + i), or -1. */
static inline long mr_check_bytes(const uint8_t *buf, size_t nbytes, uint64_t salt, int owner,
                                  size_t k0)
{
    uint8_t tmp[4096];
    for (size_t i = 0; i < nbytes; i += sizeof(tmp)) {
        size_t m = nbytes - i < sizeof(tmp) ? nbytes - i : sizeof(tmp);
        mr_gen_bytes(tmp, m, salt, owner, k0 + i);
        if (memcmp(tmp, buf + i, m) != 0) {
            for (size_t j = 0; j < m; j++) {
                if (tmp[j] != buf[i + j]) {
                    return (long)(i + j);
                }
            }
        }
    }
    return -1;
}

/* ============================================================================================== */
/* Guarded buffers                                                                                */
/* ============================================================================================== */

#define MR_POISON 0xd6
#define MR_GUARD 64 /* guard bytes before and after every buffer */

typedef struct {
    uint8_t *base; /* cap + 2 * MR_GUARD + 16 bytes */
    size_t cap;    /* most data bytes */
    size_t off;    /* data starts at base + off */
    size_t len;    /* data bytes */
} mr_gbuf_t;

static inline uint8_t mr_guard_byte(size_t i)
{
    return (uint8_t)(0x5b + 37 * i);
}

/* A buffer for up to cap data bytes, shifted by up to 16. */
static inline void mr_gbuf_alloc(mr_gbuf_t *b, size_t cap)
{
    b->cap = cap;
    b->base = malloc(cap + 2 * MR_GUARD + 16);
    if (!b->base) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    b->off = MR_GUARD;
    b->len = 0;
}

/* Lay out len data bytes at offset MR_GUARD + shift (shift: a misalignment, a multiple of the
 * element size), set the guards, poison the data and return it. */
static inline uint8_t *mr_gbuf_take(mr_gbuf_t *b, size_t len, size_t shift)
{
    if (len > b->cap || shift > 16) {
        fprintf(stderr, "internal: buffer of %zu bytes shifted by %zu > its capacity %zu\n", len,
                shift, b->cap);
        exit(2);
    }
    b->off = MR_GUARD + shift;
    b->len = len;
    for (size_t i = 0; i < b->off; i++) {
        b->base[i] = mr_guard_byte(i);
    }
    for (size_t i = 0; i < MR_GUARD; i++) {
        b->base[b->off + len + i] = mr_guard_byte(i + 1000);
    }
    memset(b->base + b->off, MR_POISON, len);
    return b->base + b->off;
}

static inline int mr_gbuf_guards_ok(const mr_gbuf_t *b)
{
    for (size_t i = 0; i < b->off; i++) {
        if (b->base[i] != mr_guard_byte(i)) {
            return 0;
        }
    }
    for (size_t i = 0; i < MR_GUARD; i++) {
        if (b->base[b->off + b->len + i] != mr_guard_byte(i + 1000)) {
            return 0;
        }
    }
    return 1;
}

static inline long mr_first_not_poison(const uint8_t *p, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (p[i] != MR_POISON) {
            return (long)i;
        }
    }
    return -1;
}

/* ============================================================================================== */
/* Verdicts: the first failure of a check, in words                                               */
/* ============================================================================================== */

typedef struct {
    char group[80];
    char detail[200];
    char why[600]; /* first failure */
    int failed;
} mr_verdict_t;

static inline void mr_vfail(mr_verdict_t *v, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline void mr_vfail(mr_verdict_t *v, const char *fmt, ...)
{
    if (v->failed++) {
        return; /* the first failure is the one reported */
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->why, sizeof(v->why), fmt, ap);
    va_end(ap);
}

static inline void mr_check_tab_at(mr_verdict_t *v, const uint8_t *A, const char *what,
                                   const uint8_t *buf, size_t count, tempo_dtype_t dt,
                                   const uint8_t (*tab)[8])
{
    size_t es = mr_esize(dt);
    long i = mr_check_tab(A, buf, count, es, tab);
    if (i >= 0) {
        mr_vfail(v, "%s: first wrong element %ld of %zu: got %s, expected %s", what, i, count,
                 mr_fmt_elem(dt, buf + (size_t)i * es), mr_fmt_elem(dt, tab[A[i]]));
    }
}

static inline void mr_check_bytes_at(mr_verdict_t *v, const char *what, const uint8_t *buf,
                                     size_t nbytes, size_t es, uint64_t salt, int owner, size_t k0)
{
    long i = mr_check_bytes(buf, nbytes, salt, owner, k0);
    if (i >= 0) {
        uint8_t want[8] = {0};
        size_t e = (size_t)i / es;
        mr_gen_bytes(want, es, salt, owner, k0 + e * es);
        uint64_t g = 0, w = 0;
        memcpy(&g, buf + e * es, es);
        memcpy(&w, want, es);
        mr_vfail(v,
                 "%s: first wrong element %zu of %zu (byte %ld): got 0x%0*llx, expected 0x%0*llx",
                 what, e, nbytes / es, i, (int)(2 * es), (unsigned long long)g, (int)(2 * es),
                 (unsigned long long)w);
    }
}

static inline void mr_check_guards(mr_verdict_t *v, const char *name, const mr_gbuf_t *b)
{
    if (!mr_gbuf_guards_ok(b)) {
        mr_vfail(v, "guard bytes around the %s buffer (%zu bytes) were overwritten", name, b->len);
    }
}

static inline void mr_check_untouched(mr_verdict_t *v, const char *what, const uint8_t *p,
                                      size_t len)
{
    long i = mr_first_not_poison(p, len);
    if (i >= 0) {
        mr_vfail(v, "%s was written (byte %ld of %zu is 0x%02x)", what, i, len, p[i]);
    }
}

/* ============================================================================================== */
/* Calling the collectives                                                                        */
/* ============================================================================================== */

enum {
    MR_ALLREDUCE,
    MR_REDUCE_SCATTER,
    MR_ALLGATHER,
    MR_BROADCAST,
    MR_REDUCE,
    MR_ALLTOALL,
    MR_NCOLL
};

/** The collective's name as TEMPO_ALGO and tempo_algorithm_info() spell it. */
static inline const char *mr_coll_name(int coll)
{
    static const char *const names[MR_NCOLL] = {"allreduce", "reduce_scatter", "allgather",
                                                "broadcast", "reduce",         "alltoall"};
    return coll >= 0 && coll < MR_NCOLL ? names[coll] : "?";
}

/** One call of a collective (MR_*), with the arguments of its tempo_ function. */
typedef struct {
    int coll;
    const char *algo; /* forced algorithm; NULL: automatic */
    const void *send;
    void *recv;
    size_t count;
    tempo_dtype_t dt;
    tempo_op_t op;
    int root;
} mr_call_t;

/** Post k as a non-blocking request (k->algo is not looked at: attr carries what is wanted). */
static inline tempo_status_t mr_post(tempo_comm_t comm, const mr_call_t *k,
                                     const tempo_attr_t *attr, tempo_request_t *req)
{
    switch (k->coll) {
    case MR_ALLREDUCE:
        return tempo_iallreduce(comm, k->send, k->recv, k->count, k->dt, k->op, attr, req);
    case MR_REDUCE_SCATTER:
        return tempo_ireduce_scatter(comm, k->send, k->recv, k->count, k->dt, k->op, attr, req);
    case MR_ALLGATHER: return tempo_iallgather(comm, k->send, k->recv, k->count, k->dt, attr, req);
    case MR_BROADCAST:
        return tempo_ibroadcast(comm, k->send, k->recv, k->count, k->dt, k->root, attr, req);
    case MR_REDUCE:
        return tempo_ireduce(comm, k->send, k->recv, k->count, k->dt, k->op, k->root, attr, req);
    default: return tempo_ialltoall(comm, k->send, k->recv, k->count, k->dt, attr, req);
    }
}

/** Run k through the blocking form (the automatic choice of algorithm). */
static inline tempo_status_t mr_call_blocking(tempo_comm_t comm, const mr_call_t *k)
{
    switch (k->coll) {
    case MR_ALLREDUCE: return tempo_allreduce(comm, k->send, k->recv, k->count, k->dt, k->op);
    case MR_REDUCE_SCATTER:
        return tempo_reduce_scatter(comm, k->send, k->recv, k->count, k->dt, k->op);
    case MR_ALLGATHER: return tempo_allgather(comm, k->send, k->recv, k->count, k->dt);
    case MR_BROADCAST: return tempo_broadcast(comm, k->send, k->recv, k->count, k->dt, k->root);
    case MR_REDUCE: return tempo_reduce(comm, k->send, k->recv, k->count, k->dt, k->op, k->root);
    default: return tempo_alltoall(comm, k->send, k->recv, k->count, k->dt);
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Result files                                                                                   */
/* ---------------------------------------------------------------------------------------------- */

typedef struct mr_out {
    FILE *f;
    long pass, fail, skip; /* lines written, by status */
} mr_out_t;

/** Open DIR/r<rank> for writing; exits with a message on failure (nothing to report to). */
static inline void mr_out_open(mr_out_t *out, const char *dir, int rank)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/r%d", dir, rank);
    memset(out, 0, sizeof(*out));
    out->f = fopen(path, "w");
    if (!out->f) {
        fprintf(stderr, "rank %d: cannot create %s: %s\n", rank, path, strerror(errno));
        exit(2);
    }
}

/** One check: "GROUP STATUS DETAIL". FAIL and SKIP lines are flushed at once, so that they survive
 *  a crash or a kill by the launcher's timeout. */
static inline void mr_result(mr_out_t *out, const char *group, const char *status, const char *fmt,
                             ...) __attribute__((format(printf, 4, 5)));
static inline void mr_result(mr_out_t *out, const char *group, const char *status, const char *fmt,
                             ...)
{
    va_list ap;
    fprintf(out->f, "%s %s ", group, status);
    va_start(ap, fmt);
    vfprintf(out->f, fmt, ap);
    va_end(ap);
    fputc('\n', out->f);
    if (status[0] == 'P') {
        out->pass++;
    } else {
        out->fail += status[0] == 'F';
        out->skip += status[0] == 'S';
        fflush(out->f);
    }
}

/** The normal end of a rank's file. */
static inline void mr_out_close(mr_out_t *out)
{
    fprintf(out->f, "END pass=%ld fail=%ld skip=%ld\n", out->pass, out->fail, out->skip);
    fclose(out->f);
    out->f = NULL;
}

/** Text of a library error for a result line: status name and tempo_last_error(), with newlines
 *  and '#' (which would start a TAP directive) replaced. Static storage. */
static inline const char *mr_errtext(tempo_comm_t comm, tempo_status_t st)
{
    static char buf[600];
    snprintf(buf, sizeof(buf), "%s: %s", tempo_status_name(st), tempo_last_error(comm));
    for (char *p = buf; *p; p++) {
        if (*p == '\n' || *p == '\r' || *p == '#') {
            *p = ' ';
        }
    }
    return buf;
}

/** The start of a test program whose only argument is "--out DIR": parse it, join the job and
 *  open this rank's result file. Returns 0, or the exit status after reporting the failure (a
 *  usage error on stderr; a failed join as a FAIL line of group). */
static inline int mr_start(int argc, char **argv, const char *group, tempo_comm_t *comm_p,
                           mr_out_t *out)
{
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--out") && i + 1 < argc) {
            dir = argv[++i];
        } else {
            fprintf(stderr, "usage: %s --out DIR\n", argv[0]);
            return 2;
        }
    }
    if (!dir) {
        fprintf(stderr, "%s: --out DIR is required\n", argv[0]);
        return 2;
    }
    tempo_status_t st = tempo_comm_init_env(comm_p);
    mr_out_open(out, dir, st == TEMPO_OK ? tempo_comm_rank(*comm_p) : 0);
    if (st != TEMPO_OK) {
        mr_result(out, group, "FAIL", "init: %s", mr_errtext(NULL, st));
        mr_out_close(out);
        return 1;
    }
    return 0;
}

#endif /* TEMPO_TESTS_MRTEST_H */
