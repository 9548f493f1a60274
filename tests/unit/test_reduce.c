/*
 * test_reduce.c — the reduction kernels of collectives/reduce.c against scalar references:
 *   tempo__reduce3     every native dtype x op, on random data with edge values mixed in (integer
 *                      limits, -0, infinities, NaNs, subnormals); dst aliasing either operand;
 *                      count 0 writes nothing; TEMPO_AVG reduces as TEMPO_SUM;
 *   tempo__avg_finish  integer division truncating toward zero, float division, n == 1;
 *   tempo__reduce_n    every dtype x op for 1..9 operands, across the internal block size; the fold
 *                      is left to right; fp16/bf16 accumulate in fp32 and round once at the end
 *                      (checked against a reference that does exactly that, and by examples where
 *                      rounding at every step would give a different answer).
 * Integer sums and products wrap around (two's complement), checked explicitly at the limits.
 * The references compute in 64-bit containers and truncate, independently of the kernels' macros;
 * min/max follow the documented operand order (b < a ? b : a), which decides NaN cases.
 * All of the above runs on every instruction-set level of the kernels that this CPU runs
 * (tempo__reduce_kernels_level), and test_levels compares each level with the baseline level bit
 * for bit, NaN payloads included, on odd lengths and unaligned pointers.
 * Random data is seeded; the seed is printed on failure (TEMPO_TEST_SEED replays it).
 */
#include "config.h"

#include <float.h>
#include <math.h>

#include "collectives/coll.h"
#include "core/cfg.h"
#include "tests/unit/tu.h"

#define COUNT 3001 /* crosses the 2048-element block of tempo__reduce_n */

static uint64_t seed;
static const char *level_name = "?"; /* the kernels' level under test, for failure messages */

/* ------------------------------------------------------------------------------------------ */
/* Elements as 64-bit containers                                                              */
/* ------------------------------------------------------------------------------------------ */

static uint64_t ld(tempo_dtype_t d, const void *p, size_t i)
{
    switch (tempo_dtype_size(d)) {
    case 1: return ((const uint8_t *)p)[i];
    case 2: return ((const uint16_t *)p)[i];
    case 4: return ((const uint32_t *)p)[i];
    default: return ((const uint64_t *)p)[i];
    }
}

static void st(tempo_dtype_t d, void *p, size_t i, uint64_t v)
{
    switch (tempo_dtype_size(d)) {
    case 1: ((uint8_t *)p)[i] = (uint8_t)v; break;
    case 2: ((uint16_t *)p)[i] = (uint16_t)v; break;
    case 4: ((uint32_t *)p)[i] = (uint32_t)v; break;
    default: ((uint64_t *)p)[i] = v; break;
    }
}

static int is_signed(tempo_dtype_t d)
{
    return d == TEMPO_INT8 || d == TEMPO_INT32 || d == TEMPO_INT64;
}

static int is_int(tempo_dtype_t d)
{
    return d <= TEMPO_UINT64;
}

/* Sign-extend an integer container to int64. */
static int64_t sx(tempo_dtype_t d, uint64_t v)
{
    switch (d) {
    case TEMPO_INT8: return (int8_t)v;
    case TEMPO_INT32: return (int32_t)v;
    default: return (int64_t)v;
    }
}

static uint64_t mask(tempo_dtype_t d)
{
    size_t b = tempo_dtype_size(d) * 8;
    return b == 64 ? ~0ull : (1ull << b) - 1;
}

static float f32(uint64_t v)
{
    uint32_t u = (uint32_t)v;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint64_t f32b(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static double f64(uint64_t v)
{
    double f;
    memcpy(&f, &v, 8);
    return f;
}

static uint64_t f64b(double f)
{
    uint64_t u;
    memcpy(&u, &f, 8);
    return u;
}

/* a op b for a native dtype (AVG reduces as SUM), as containers. */
static uint64_t ref_op(tempo_dtype_t d, tempo_op_t op, uint64_t a, uint64_t b)
{
    if (op == TEMPO_AVG) {
        op = TEMPO_SUM;
    }
    if (is_int(d)) {
        int less; /* b < a */
        if (is_signed(d)) {
            less = sx(d, b) < sx(d, a);
        } else {
            less = b < a;
        }
        switch (op) {
        case TEMPO_SUM: return (a + b) & mask(d);
        case TEMPO_PROD: return (a * b) & mask(d);
        case TEMPO_MIN: return less ? b : a;
        default: return (!less && b != a) ? b : a; /* b > a ? b : a */
        }
    }
    if (d == TEMPO_FLOAT32) {
        float x = f32(a), y = f32(b);
        switch (op) {
        case TEMPO_SUM: return f32b(x + y);
        case TEMPO_PROD: return f32b(x * y);
        case TEMPO_MIN: return y < x ? b : a;
        default: return y > x ? b : a;
        }
    }
    double x = f64(a), y = f64(b);
    switch (op) {
    case TEMPO_SUM: return f64b(x + y);
    case TEMPO_PROD: return f64b(x * y);
    case TEMPO_MIN: return y < x ? b : a;
    default: return y > x ? b : a;
    }
}

static uint64_t ref_div(tempo_dtype_t d, uint64_t v, int n)
{
    if (n == 1) {
        return v;
    }
    if (is_int(d)) {
        if (is_signed(d)) {
            return (uint64_t)(sx(d, v) / n) & mask(d); /* C division truncates toward zero */
        }
        return v / (uint64_t)n;
    }
    if (d == TEMPO_FLOAT32) {
        return f32b(f32(v) / (float)n);
    }
    return f64b(f64(v) / (double)n);
}

static int same(tempo_dtype_t d, uint64_t got, uint64_t want)
{
    if (d == TEMPO_FLOAT32 && isnan(f32(got)) && isnan(f32(want))) {
        return 1; /* NaN payloads are not specified */
    }
    if (d == TEMPO_FLOAT64 && isnan(f64(got)) && isnan(f64(want))) {
        return 1;
    }
    if (d == TEMPO_FLOAT16) {
        int gn = (got & 0x7c00) == 0x7c00 && (got & 0x3ff), wn = (want & 0x7c00) == 0x7c00 &&
                                                                 (want & 0x3ff);
        if (gn || wn) {
            return gn && wn;
        }
    }
    if (d == TEMPO_BFLOAT16) {
        int gn = (got & 0x7f80) == 0x7f80 && (got & 0x7f), wn = (want & 0x7f80) == 0x7f80 &&
                                                                (want & 0x7f);
        if (gn || wn) {
            return gn && wn;
        }
    }
    return got == want;
}

/* Random element, one in eight an edge value of the type. */
static uint64_t rnd(tempo_dtype_t d, uint64_t *s)
{
    uint64_t r = tu_rand64(s);
    if ((r & 7) == 0) {
        static const uint64_t e8[] = {0, 1, 0x7f, 0x80, 0xff, 0xfe};
        static const uint64_t e32[] = {0, 1, 0x7fffffff, 0x80000000u, 0xffffffffu, 0x7f800000u,
                                       0xff800000u, 0x7fc00000u, 0x80000000u, 0x00000001u,
                                       0x3f800000u};
        static const uint64_t e64[] = {0, 1, 0x7fffffffffffffffull, 0x8000000000000000ull, ~0ull,
                                       0x7ff0000000000000ull, 0xfff0000000000000ull,
                                       0x7ff8000000000000ull, 0x0000000000000001ull,
                                       0x3ff0000000000000ull};
        static const uint64_t e16[] = {0, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x0001, 0x3c00, 0x7bff,
                                       0x7f80, 0xff80, 0x7fc0, 0x3f80};
        r >>= 8;
        switch (tempo_dtype_size(d)) {
        case 1: return e8[r % 6];
        case 2: return e16[r % 12];
        case 4: return e32[r % 11];
        default: return e64[r % 10];
        }
    }
    r >>= 3;
    if (d == TEMPO_FLOAT32 && (r & 1)) {
        return f32b((float)((int)(r >> 8) % 2001 - 1000) / 8); /* finite, exact sums */
    }
    if (d == TEMPO_FLOAT64 && (r & 1)) {
        return f64b((double)((int64_t)(r >> 8) % 20001 - 10000) / 16);
    }
    return r & mask(d);
}

/* ------------------------------------------------------------------------------------------ */

static const tempo_dtype_t natives[] = {TEMPO_INT8,   TEMPO_UINT8,  TEMPO_INT32,  TEMPO_UINT32,
                                        TEMPO_INT64,  TEMPO_UINT64, TEMPO_FLOAT32, TEMPO_FLOAT64};
#define NNATIVE (sizeof(natives) / sizeof(natives[0]))

static void test_reduce3(void)
{
    uint64_t s = seed;
    for (size_t di = 0; di < NNATIVE; di++) {
        tempo_dtype_t d = natives[di];
        size_t es = tempo_dtype_size(d);
        char *a = malloc(COUNT * es), *b = malloc(COUNT * es), *dst = malloc(COUNT * es);
        char *a2 = malloc(COUNT * es), *b2 = malloc(COUNT * es);
        for (int op = 0; op < TEMPO_OP_COUNT; op++) {
            for (size_t i = 0; i < COUNT; i++) {
                st(d, a, i, rnd(d, &s));
                st(d, b, i, rnd(d, &s));
            }
            memcpy(a2, a, COUNT * es);
            memcpy(b2, b, COUNT * es);
            tempo__reduce3(dst, a, b, COUNT, d, (tempo_op_t)op);
            tempo__reduce3(a2, a2, b, COUNT, d, (tempo_op_t)op);  /* dst aliases a */
            tempo__reduce3(b2, a, b2, COUNT, d, (tempo_op_t)op);  /* dst aliases b */
            long bad = 0;
            for (size_t i = 0; i < COUNT; i++) {
                uint64_t want = ref_op(d, (tempo_op_t)op, ld(d, a, i), ld(d, b, i));
                int ok = same(d, ld(d, dst, i), want) && same(d, ld(d, a2, i), want) &&
                         same(d, ld(d, b2, i), want);
                if (!ok && bad++ < 3) {
                    tap_diag("[%zu] %#llx %s %#llx = %#llx / %#llx / %#llx, expected %#llx", i,
                             (unsigned long long)ld(d, a, i), tempo_op_name((tempo_op_t)op),
                             (unsigned long long)ld(d, b, i), (unsigned long long)ld(d, dst, i),
                             (unsigned long long)ld(d, a2, i), (unsigned long long)ld(d, b2, i),
                             (unsigned long long)want);
                }
            }
            if (bad) {
                tap_diag("seed %llu, kernels %s", (unsigned long long)seed, level_name);
            }
            TAP_OK(bad == 0, "reduce3 %s %s: %d elements, also in place on either operand",
                   tempo_dtype_name(d), tempo_op_name((tempo_op_t)op), COUNT);
        }
        /* count 0 touches nothing */
        memset(dst, 0x5a, COUNT * es);
        tempo__reduce3(dst, a, b, 0, d, TEMPO_SUM);
        int untouched = 1;
        for (size_t i = 0; i < COUNT * es; i++) {
            untouched &= (unsigned char)dst[i] == 0x5a;
        }
        TAP_OK(untouched, "reduce3 %s with count 0 writes nothing", tempo_dtype_name(d));
        free(a);
        free(b);
        free(dst);
        free(a2);
        free(b2);
    }
}

static void test_wraparound(void)
{
    int8_t i8a[] = {127, -128, 100, -1}, i8b[] = {1, -1, 100, -1}, i8d[4];
    tempo__reduce3(i8d, i8a, i8b, 4, TEMPO_INT8, TEMPO_SUM);
    TAP_OK(i8d[0] == -128 && i8d[1] == 127 && i8d[2] == -56 && i8d[3] == -2,
           "int8 sums wrap: 127+1=-128, -128-1=127, 100+100=-56 (got %d %d %d %d)", i8d[0], i8d[1],
           i8d[2], i8d[3]);
    tempo__reduce3(i8d, i8a, i8b, 4, TEMPO_INT8, TEMPO_PROD);
    TAP_OK(i8d[0] == 127 && i8d[1] == -128 && i8d[2] == 16 && i8d[3] == 1,
           "int8 products wrap: -128*-1=-128, 100*100=16 (got %d %d %d %d)", i8d[0], i8d[1],
           i8d[2], i8d[3]);
    uint8_t u8a[] = {255, 200}, u8b[] = {1, 100}, u8d[2];
    tempo__reduce3(u8d, u8a, u8b, 2, TEMPO_UINT8, TEMPO_SUM);
    TAP_OK(u8d[0] == 0 && u8d[1] == 44, "uint8 sums wrap: 255+1=0, 200+100=44");
    int32_t i32a[] = {INT32_MAX, INT32_MIN}, i32b[] = {1, -1}, i32d[2];
    tempo__reduce3(i32d, i32a, i32b, 2, TEMPO_INT32, TEMPO_SUM);
    TAP_OK(i32d[0] == INT32_MIN && i32d[1] == INT32_MAX, "int32 sums wrap at the limits");
    uint32_t u32a[] = {0x80000000u}, u32b[] = {2}, u32d[1];
    tempo__reduce3(u32d, u32a, u32b, 1, TEMPO_UINT32, TEMPO_PROD);
    TAP_EQ_UINT(u32d[0], 0, "uint32 products wrap: 2^31 * 2 = 0");
    int64_t i64a[] = {INT64_MIN, INT64_MAX}, i64b[] = {-1, 2}, i64d[2];
    tempo__reduce3(i64d, i64a, i64b, 2, TEMPO_INT64, TEMPO_PROD);
    TAP_OK(i64d[0] == INT64_MIN && i64d[1] == -2, "int64 products wrap: INT64_MIN*-1=INT64_MIN, "
           "INT64_MAX*2=-2 (got %lld %lld)", (long long)i64d[0], (long long)i64d[1]);
    uint64_t u64a[] = {UINT64_MAX}, u64b[] = {UINT64_MAX}, u64d[1];
    tempo__reduce3(u64d, u64a, u64b, 1, TEMPO_UINT64, TEMPO_SUM);
    TAP_EQ_UINT(u64d[0], UINT64_MAX - 1, "uint64 sums wrap");
    int8_t mn[] = {-5, 3}, mx[] = {3, -5}, out[2];
    tempo__reduce3(out, mn, mx, 2, TEMPO_INT8, TEMPO_MIN);
    TAP_OK(out[0] == -5 && out[1] == -5, "int8 min compares signed");
    uint8_t umn[] = {250, 3}, umx[] = {3, 250}, uout[2];
    tempo__reduce3(uout, umn, umx, 2, TEMPO_UINT8, TEMPO_MAX);
    TAP_OK(uout[0] == 250 && uout[1] == 250, "uint8 max compares unsigned");
    float fa[] = {NAN, 1.0f, -0.0f}, fb[] = {1.0f, NAN, 0.0f}, fd[3];
    tempo__reduce3(fd, fa, fb, 3, TEMPO_FLOAT32, TEMPO_MIN);
    TAP_OK(isnan(fd[0]) && fd[1] == 1.0f && signbit(fd[2]),
           "float min keeps the left operand when the comparison is false (NaN, -0)");
}

static void test_avg_finish(void)
{
    uint64_t s = seed ^ 0x1234;
    for (size_t di = 0; di < NNATIVE; di++) {
        tempo_dtype_t d = natives[di];
        size_t es = tempo_dtype_size(d);
        char *buf = malloc(COUNT * es), *orig = malloc(COUNT * es);
        const int ns[] = {1, 2, 3, 7};
        for (size_t k = 0; k < 4; k++) {
            for (size_t i = 0; i < COUNT; i++) {
                st(d, orig, i, rnd(d, &s));
            }
            memcpy(buf, orig, COUNT * es);
            tempo__avg_finish(buf, COUNT, d, ns[k]);
            long bad = 0;
            for (size_t i = 0; i < COUNT; i++) {
                uint64_t want = ref_div(d, ld(d, orig, i), ns[k]);
                if (!same(d, ld(d, buf, i), want) && bad++ < 3) {
                    tap_diag("[%zu] %#llx / %d = %#llx, expected %#llx", i,
                             (unsigned long long)ld(d, orig, i), ns[k],
                             (unsigned long long)ld(d, buf, i), (unsigned long long)want);
                }
            }
            TAP_OK(bad == 0, "avg_finish %s by %d", tempo_dtype_name(d), ns[k]);
        }
        free(buf);
        free(orig);
    }
    int8_t v[] = {-7, 7, -128};
    tempo__avg_finish(v, 3, TEMPO_INT8, 2);
    TAP_OK(v[0] == -3 && v[1] == 3 && v[2] == -64, "integer averages truncate toward zero (got %d "
           "%d %d)", v[0], v[1], v[2]);
}

/* ------------------------------------------------------------------------------------------ */

static float half_f32(tempo_dtype_t d, uint64_t h)
{
    return d == TEMPO_FLOAT16 ? tempo__f16_to_f32((uint16_t)h) : tempo__bf16_to_f32((uint16_t)h);
}

static uint64_t f32_half(tempo_dtype_t d, float f)
{
    return d == TEMPO_FLOAT16 ? tempo__f32_to_f16(f) : tempo__f32_to_bf16(f);
}

static void test_reduce_n(void)
{
    uint64_t s = seed ^ 0x9876;
    const tempo_dtype_t all[] = {TEMPO_INT8,    TEMPO_UINT8,    TEMPO_INT32,   TEMPO_UINT32,
                                 TEMPO_INT64,   TEMPO_UINT64,   TEMPO_FLOAT16, TEMPO_BFLOAT16,
                                 TEMPO_FLOAT32, TEMPO_FLOAT64};
    for (size_t di = 0; di < sizeof(all) / sizeof(all[0]); di++) {
        tempo_dtype_t d = all[di];
        size_t es = tempo_dtype_size(d);
        int half = tempo__dtype_is_half(d);
        char *src[9], *dst = malloc(COUNT * es);
        for (int k = 0; k < 9; k++) {
            src[k] = malloc(COUNT * es);
        }
        for (int op = 0; op < TEMPO_OP_COUNT; op++) {
            long bad = 0;
            for (int n = 1; n <= 9; n++) {
                for (int k = 0; k < n; k++) {
                    for (size_t i = 0; i < COUNT; i++) {
                        uint64_t v = rnd(d, &s);
                        if (half && (tu_rand64(&s) & 1)) { /* small exact values, often */
                            v = f32_half(d, (float)((int)(tu_rand64(&s) % 201) - 100) / 4);
                        }
                        st(d, src[k], i, v);
                    }
                }
                tempo__reduce_n(dst, (const void *const *)src, n, COUNT, d, (tempo_op_t)op);
                for (size_t i = 0; i < COUNT; i++) {
                    uint64_t want;
                    if (half) {
                        uint64_t acc = f32b(half_f32(d, ld(d, src[0], i)));
                        for (int k = 1; k < n; k++) {
                            acc = ref_op(TEMPO_FLOAT32, (tempo_op_t)op, acc,
                                         f32b(half_f32(d, ld(d, src[k], i))));
                        }
                        if (op == TEMPO_AVG) {
                            acc = ref_div(TEMPO_FLOAT32, acc, n);
                        }
                        want = f32_half(d, f32(acc));
                    } else {
                        want = ld(d, src[0], i);
                        for (int k = 1; k < n; k++) {
                            want = ref_op(d, (tempo_op_t)op, want, ld(d, src[k], i));
                        }
                        if (op == TEMPO_AVG) {
                            want = ref_div(d, want, n);
                        }
                    }
                    if (!same(d, ld(d, dst, i), want) && bad++ < 3) {
                        tap_diag("n=%d [%zu]: got %#llx, expected %#llx", n, i,
                                 (unsigned long long)ld(d, dst, i), (unsigned long long)want);
                    }
                }
            }
            if (bad) {
                tap_diag("seed %llu, kernels %s", (unsigned long long)seed, level_name);
            }
            TAP_OK(bad == 0, "reduce_n %s %s, 1..9 operands of %d elements", tempo_dtype_name(d),
                   tempo_op_name((tempo_op_t)op), COUNT);
        }
        /* n == 1 in place: unchanged (AVG divides by 1). */
        memcpy(dst, src[0], COUNT * es);
        const void *one[1] = {dst};
        tempo__reduce_n(dst, one, 1, COUNT, d, TEMPO_AVG);
        int unchanged = 1;
        for (size_t i = 0; i < COUNT; i++) {
            unchanged &= same(d, ld(d, dst, i), ld(d, src[0], i));
        }
        TAP_OK(unchanged, "reduce_n %s avg of one operand in place leaves it unchanged (NaNs may "
               "be quieted)", tempo_dtype_name(d));
        for (int k = 0; k < 9; k++) {
            free(src[k]);
        }
        free(dst);
    }
}

static void test_one_rounding(void)
{
    /* 2048 + 1 + 1 in fp16: rounding after each step gives 2048 (2049 ties to even), one rounding
     * at the end gives 2050. */
    uint16_t a = tempo__f32_to_f16(2048), b = tempo__f32_to_f16(1), r;
    const void *src[3] = {&a, &b, &b};
    tempo__reduce_n(&r, src, 3, 1, TEMPO_FLOAT16, TEMPO_SUM);
    TAP_EQ_DBL(tempo__f16_to_f32(r), 2050, "fp16 2048+1+1 accumulates in fp32: 2050, not 2048");
    uint16_t ba = tempo__f32_to_bf16(256), bb = tempo__f32_to_bf16(1), br;
    const void *bsrc[3] = {&ba, &bb, &bb};
    tempo__reduce_n(&br, bsrc, 3, 1, TEMPO_BFLOAT16, TEMPO_SUM);
    TAP_EQ_DBL(tempo__bf16_to_f32(br), 258, "bf16 256+1+1 accumulates in fp32: 258, not 256");
    uint16_t x = tempo__f32_to_f16(1), y = tempo__f32_to_f16(2);
    const void *avg[2] = {&x, &y};
    tempo__reduce_n(&r, avg, 2, 1, TEMPO_FLOAT16, TEMPO_AVG);
    TAP_EQ_DBL(tempo__f16_to_f32(r), 1.5, "fp16 avg(1, 2) = 1.5");
    /* 65504 + 65504 - 65504: in fp32 no overflow; the result is finite. */
    uint16_t big = tempo__f32_to_f16(65504), nbig = tempo__f32_to_f16(-65504);
    const void *ov[3] = {&big, &big, &nbig};
    tempo__reduce_n(&r, ov, 3, 1, TEMPO_FLOAT16, TEMPO_SUM);
    TAP_EQ_DBL(tempo__f16_to_f32(r), 65504, "fp16 65504+65504-65504 does not overflow midway");
    int8_t i1 = 127, i2 = 1, ir;
    const void *isrc[2] = {&i1, &i2};
    tempo__reduce_n(&ir, isrc, 2, 1, TEMPO_INT8, TEMPO_AVG);
    TAP_EQ_INT(ir, -64, "int8 avg(127, 1) = wrapped sum -128 / 2 = -64 (sum, then divide)");
}

/* ------------------------------------------------------------------------------------------ */
/* Instruction-set levels                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* Element i of a level test's operand k: any bit pattern one time in two (NaNs with payloads,
 * subnormals, infinities), else rnd()'s mix of edge values and small exact numbers. */
static uint64_t wild(tempo_dtype_t d, uint64_t *s)
{
    uint64_t r = tu_rand64(s);
    if (r & 1) {
        uint64_t v = tu_rand64(s);
        if (d == TEMPO_FLOAT32 && (r & 2)) {
            v = (v & 0x807fffffu) | 0x7f800000u; /* a NaN or an infinity, any payload */
        } else if (d == TEMPO_FLOAT64 && (r & 2)) {
            v = (v & 0x800fffffffffffffull) | 0x7ff0000000000000ull;
        } else if (d == TEMPO_FLOAT16 && (r & 2)) {
            v = (v & 0x83ff) | 0x7c00;
        } else if (d == TEMPO_BFLOAT16 && (r & 2)) {
            v = (v & 0x807f) | 0x7f80;
        }
        return v & mask(d);
    }
    return rnd(d, s);
}

/* Every level this CPU runs against the baseline level (the kernels of the library before the
 * levels existed, unchanged) and the scalar reference, bit for bit (NaN payloads included against
 * the baseline): every dtype x op, 1..5 operands, odd lengths around every vector width, each
 * operand and the destination at its own element-aligned offset from a 64-byte boundary (unaligned
 * for every vector width), destination aliasing the first operand too. */
static void test_levels(void)
{
    const tempo__reduce_kernels_t *base = tempo__reduce_kernels_level(0);
    static const size_t lens[] = {1, 3, 5, 7, 9, 15, 17, 31, 33, 63, 65, 127, 129, 255, 257, 2047,
                                  2049, 4099};
    const tempo_dtype_t all[] = {TEMPO_INT8,    TEMPO_UINT8,    TEMPO_INT32,   TEMPO_UINT32,
                                 TEMPO_INT64,   TEMPO_UINT64,   TEMPO_FLOAT16, TEMPO_BFLOAT16,
                                 TEMPO_FLOAT32, TEMPO_FLOAT64};
    /* a multiple of the alignment: aligned_alloc may refuse other sizes (ASan's does: NULL) */
    size_t maxlen = lens[sizeof(lens) / sizeof(lens[0]) - 1], cap = TEMPO_ALIGN_UP(maxlen * 8 + 128, 64);
    char *src_mem[5], *d0 = aligned_alloc(64, cap), *d1 = aligned_alloc(64, cap);
    for (int k = 0; k < 5; k++) {
        src_mem[k] = aligned_alloc(64, cap);
    }
    int nlevels = 0;
    for (size_t li = 0;; li++) {
        const tempo__reduce_kernels_t *lv = tempo__reduce_kernels_level(li);
        if (!lv && li >= 3) {
            break;
        }
        if (!lv) {
            tap_diag("level %zu: not run by this CPU (skipped)", li);
            continue;
        }
        nlevels++;
        uint64_t s = seed ^ (0x5151 * (li + 1));
        for (size_t di = 0; di < sizeof(all) / sizeof(all[0]); di++) {
            tempo_dtype_t d = all[di];
            size_t es = tempo_dtype_size(d);
            int half = tempo__dtype_is_half(d);
            for (int op = 0; op < TEMPO_OP_COUNT; op++) {
                long bad = 0, cases = 0;
                for (size_t l = 0; l < sizeof(lens) / sizeof(lens[0]); l++) {
                    size_t cnt = lens[l];
                    int n = 1 + (int)(tu_rand64(&s) % 5);
                    /* element-aligned (what every caller passes: typed loads need it), at any
                     * offset from a 64-byte boundary, so unaligned for every vector width */
                    size_t doff = tu_rand64(&s) % 64 / es * es;
                    const void *src[5];
                    for (int k = 0; k < n; k++) {
                        char *p = src_mem[k] + tu_rand64(&s) % 64 / es * es;
                        for (size_t i = 0; i < cnt; i++) {
                            uint64_t v = wild(d, &s);
                            if (half && (tu_rand64(&s) & 1)) {
                                v = f32_half(d, (float)((int)(tu_rand64(&s) % 201) - 100) / 4);
                            }
                            /* unaligned stores through memcpy (st() would assume alignment) */
                            memcpy(p + i * es, &v, es);
                        }
                        src[k] = p;
                    }
                    char *x = d0 + doff, *y = d1 + doff;
                    /* reduce_n, out of place */
                    memset(d0, 0x5a, cap);
                    memset(d1, 0x5a, cap);
                    base->reduce_n(x, src, n, cnt, d, (tempo_op_t)op);
                    lv->reduce_n(y, src, n, cnt, d, (tempo_op_t)op);
                    cases++;
                    if (memcmp(d0, d1, cap) != 0 && bad++ < 3) {
                        tap_diag("[%s] reduce_n %s %s n=%d count=%zu offset %zu differs from %s",
                                 lv->name, tempo_dtype_name(d), tempo_op_name((tempo_op_t)op), n,
                                 cnt, doff, base->name);
                    }
                    /* against the scalar reference */
                    for (size_t i = 0; i < cnt; i++) {
                        uint64_t want = 0, got = 0, e;
                        if (half) {
                            memcpy(&e, (const char *)src[0] + i * es, es);
                            uint64_t acc = f32b(half_f32(d, e & mask(d)));
                            for (int k = 1; k < n; k++) {
                                memcpy(&e, (const char *)src[k] + i * es, es);
                                acc = ref_op(TEMPO_FLOAT32, (tempo_op_t)op, acc,
                                             f32b(half_f32(d, e & mask(d))));
                            }
                            if (op == TEMPO_AVG) {
                                acc = ref_div(TEMPO_FLOAT32, acc, n);
                            }
                            want = f32_half(d, f32(acc));
                        } else {
                            memcpy(&e, (const char *)src[0] + i * es, es);
                            want = e & mask(d);
                            for (int k = 1; k < n; k++) {
                                memcpy(&e, (const char *)src[k] + i * es, es);
                                want = ref_op(d, (tempo_op_t)op, want, e & mask(d));
                            }
                            if (op == TEMPO_AVG) {
                                want = ref_div(d, want, n);
                            }
                        }
                        memcpy(&got, y + i * es, es);
                        if (!same(d, got & mask(d), want) && bad++ < 3) {
                            tap_diag("[%s] reduce_n %s %s n=%d count=%zu [%zu]: %#llx, reference "
                                     "%#llx", lv->name, tempo_dtype_name(d),
                                     tempo_op_name((tempo_op_t)op), n, cnt, i,
                                     (unsigned long long)(got & mask(d)),
                                     (unsigned long long)want);
                        }
                    }
                    if (half || n < 2) {
                        continue;
                    }
                    /* reduce3 with dst aliasing a (the n-ary fold's and the schedules' form),
                     * then avg_finish */
                    memcpy(x, src[0], cnt * es);
                    memcpy(y, src[0], cnt * es);
                    base->reduce3(x, x, src[1], cnt, d, (tempo_op_t)op);
                    lv->reduce3(y, y, src[1], cnt, d, (tempo_op_t)op);
                    base->avg_finish(x, cnt, d, n);
                    lv->avg_finish(y, cnt, d, n);
                    cases++;
                    if (memcmp(d0, d1, cap) != 0 && bad++ < 3) {
                        tap_diag("[%s] reduce3 in place + avg_finish %s %s count=%zu differs from "
                                 "%s", lv->name, tempo_dtype_name(d),
                                 tempo_op_name((tempo_op_t)op), cnt, base->name);
                    }
                }
                if (bad) {
                    tap_diag("seed %llu", (unsigned long long)seed);
                }
                TAP_OK(bad == 0, "level %s: %s %s bitwise equal to %s and the reference (%ld "
                       "cases, odd lengths, unaligned)", lv->name, tempo_dtype_name(d),
                       tempo_op_name((tempo_op_t)op), base->name, cases);
            }
        }
    }
    TAP_OK(nlevels >= 1, "%d level(s) tested", nlevels);
    for (int k = 0; k < 5; k++) {
        free(src_mem[k]);
    }
    free(d0);
    free(d1);
}

/* TEMPO_REDUCE_ISA's check: auto and the baseline are always valid, unknown names never. */
static void test_isa_names(void)
{
    const tempo__reduce_kernels_t *base = tempo__reduce_kernels_level(0);
    TAP_OK(tempo__reduce_isa_check("auto") == TEMPO_OK, "TEMPO_REDUCE_ISA=auto is valid");
    TAP_OK(tempo__reduce_isa_check(base->name) == TEMPO_OK, "TEMPO_REDUCE_ISA=%s (the baseline) "
           "is valid", base->name);
    TAP_OK(tempo__reduce_isa_check("avx3") == TEMPO_ERR_INVALID &&
               strstr(tempo__errmsg(), "expected auto"),
           "TEMPO_REDUCE_ISA=avx3 is refused naming the valid ones (%s)", tempo__errmsg());
    for (size_t li = 1; li < 3; li++) {
        /* a level the CPU lacks is refused: only checkable on a CPU without it */
        const tempo__reduce_kernels_t *lv = tempo__reduce_kernels_level(li);
        if (lv) {
            TAP_OK(tempo__reduce_isa_check(lv->name) == TEMPO_OK, "TEMPO_REDUCE_ISA=%s is valid "
                   "on this CPU", lv->name);
        }
    }
    /* auto: AVX2 (level 1) where the CPU has it, else the best it runs (collectives/reduce.c) */
    const tempo__reduce_kernels_t *want = base;
    for (size_t li = 1; li < 3; li++) {
        if (tempo__reduce_kernels_level(li) && !(want != base && li == 2)) {
            want = tempo__reduce_kernels_level(li);
        }
    }
    tempo__reduce_kernels_force(NULL);
    TAP_OK(tempo__reduce_kernels() == want, "the default level is avx2 where this CPU runs it, else "
           "the best it runs (%s; want %s)", tempo__reduce_kernels()->name, want->name);
}

int main(void)
{
    seed = tu_seed();
    test_isa_names();
    /* The behavioural tests on every level this CPU runs. */
    for (size_t li = 0; li < 3; li++) {
        const tempo__reduce_kernels_t *lv = tempo__reduce_kernels_level(li);
        if (!lv) {
            continue;
        }
        level_name = lv->name;
        tap_diag("kernels: %s", level_name);
        tempo__reduce_kernels_force(lv);
        test_reduce3();
        test_wraparound();
        test_avg_finish();
        test_reduce_n();
        test_one_rounding();
    }
    tempo__reduce_kernels_force(NULL);
    test_levels();
    return tap_done();
}
