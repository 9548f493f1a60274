/*
 * test_dtype.c — core/dtype.[ch]: sizes and names, tempo_dtype_parse/tempo_op_parse with every
 * documented alias, and the fp16/bf16 <-> fp32 conversions against independent references:
 *   fp16: the compiler's _Float16 (GCC 12 on x86-64: correctly rounded, round to nearest even);
 *         without _Float16, an exact reference built on double arithmetic and nearbyint();
 *   bf16: a plain round-to-nearest-even on the bits (look at the 16 dropped bits, compare with half
 *         of the last place), written differently from the library's add-and-truncate.
 * Checked: all 65536 16-bit values to fp32 and back; fp32 values at and around every rounding
 * boundary of both formats (ties, one ulp either side); edge values (zeros, subnormals of both
 * formats, the largest finite, overflow to inf, inf, NaNs with payloads); and random fp32 bit
 * patterns (seeded; the seed is printed, TEMPO_TEST_SEED replays it). NaNs must stay NaNs of the
 * same sign (payload bits are not specified); every other result must match bit for bit.
 */
#include "config.h"

#include <float.h>
#include <math.h>

#include "core/tempo_int.h"
#include "core/dtype.h"
#include "tests/unit/tu.h"

#define RANDOM_VALUES 4000000

static float f_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t u_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* ------------------------------------------------------------------------------------------ */
/* References                                                                                 */
/* ------------------------------------------------------------------------------------------ */

#if defined(__FLT16_MAX__)
#define REF_F16 "_Float16"
static uint16_t ref_f32_to_f16(float f)
{
    _Float16 h = (_Float16)f;
    uint16_t u;
    memcpy(&u, &h, 2);
    return u;
}
static float ref_f16_to_f32(uint16_t u)
{
    _Float16 h;
    memcpy(&h, &u, 2);
    return (float)h;
}
#else
#define REF_F16 "double arithmetic"
static float ref_f16_to_f32(uint16_t u)
{
    int sign = u >> 15, e = (u >> 10) & 31, m = u & 1023;
    double v;
    if (e == 31) {
        v = m ? NAN : INFINITY;
    } else if (e == 0) {
        v = ldexp(m, -24);
    } else {
        v = ldexp(1024 + m, e - 25);
    }
    return (float)(sign ? -v : v);
}
static uint16_t ref_f32_to_f16(float f)
{
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    double a = fabs((double)f);
    if (isnan(f)) {
        return sign | 0x7e00;
    }
    if (a >= 65520.0) {
        return sign | 0x7c00;
    }
    int e;
    frexp(a, &e); /* a = x * 2^e, 0.5 <= x < 1 */
    int q = e - 11 < -24 ? -24 : e - 11; /* exponent of the last place */
    double m = nearbyint(ldexp(a, -q)); /* exact scaling, then round to nearest even */
    double r = ldexp(m, q);
    if (r == 0) {
        return sign;
    }
    frexp(r, &e);
    if (e <= -14) {
        return sign | (uint16_t)ldexp(r, 24); /* subnormal (or the smallest normal) */
    }
    return sign | (uint16_t)(((e + 14) << 10) | ((uint32_t)ldexp(r, 11 - e) & 1023));
}
#endif

static uint16_t ref_f32_to_bf16(float f)
{
    uint32_t u = u_of(f);
    if (isnan(f)) {
        return (uint16_t)((u >> 16) | 0x0040);
    }
    uint32_t hi = u >> 16, lo = u & 0xffff;
    if (lo > 0x8000 || (lo == 0x8000 && (hi & 1))) {
        hi++; /* may carry into the exponent: the largest finite rounds to inf, as it should */
    }
    return (uint16_t)hi;
}

/* ------------------------------------------------------------------------------------------ */

typedef struct {
    const char *what;
    long checked, bad;
} tally_t;

static int same_f16(uint16_t got, uint16_t want)
{
    int gnan = (got & 0x7c00) == 0x7c00 && (got & 0x3ff);
    int wnan = (want & 0x7c00) == 0x7c00 && (want & 0x3ff);
    if (gnan || wnan) {
        return gnan && wnan && (got & 0x8000) == (want & 0x8000);
    }
    return got == want;
}

static int same_bf16(uint16_t got, uint16_t want)
{
    int gnan = (got & 0x7f80) == 0x7f80 && (got & 0x7f);
    int wnan = (want & 0x7f80) == 0x7f80 && (want & 0x7f);
    if (gnan || wnan) {
        return gnan && wnan && (got & 0x8000) == (want & 0x8000);
    }
    return got == want;
}

static int same_f32(float got, float want)
{
    if (isnan(got) || isnan(want)) {
        return isnan(got) && isnan(want) && !signbit(got) == !signbit(want);
    }
    return u_of(got) == u_of(want);
}

static void check_f32(tally_t *t, float f)
{
    uint16_t g16 = tempo__f32_to_f16(f), w16 = ref_f32_to_f16(f);
    uint16_t gb = tempo__f32_to_bf16(f), wb = ref_f32_to_bf16(f);
    t->checked++;
    if (!same_f16(g16, w16)) {
        if (t->bad++ < 5) {
            tap_diag("%s: fp32 0x%08x (%.9g) -> fp16 0x%04x, reference 0x%04x", t->what, u_of(f),
                     (double)f, g16, w16);
        }
    }
    if (!same_bf16(gb, wb)) {
        if (t->bad++ < 5) {
            tap_diag("%s: fp32 0x%08x (%.9g) -> bf16 0x%04x, reference 0x%04x", t->what, u_of(f),
                     (double)f, gb, wb);
        }
    }
}

static void test_half_to_f32_and_back(void)
{
    long bad16 = 0, badb = 0, trip16 = 0, tripb = 0;
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float f = tempo__f16_to_f32(h);
        if (!same_f32(f, ref_f16_to_f32(h)) && bad16++ < 5) {
            tap_diag("fp16 0x%04x -> 0x%08x, reference 0x%08x", h, u_of(f),
                     u_of(ref_f16_to_f32(h)));
        }
        uint16_t back = tempo__f32_to_f16(f);
        if (!same_f16(back, h) && trip16++ < 5) {
            tap_diag("fp16 0x%04x -> fp32 -> 0x%04x", h, back);
        }
        float fb = tempo__bf16_to_f32(h);
        if (u_of(fb) != (uint32_t)h << 16 && badb++ < 5) {
            tap_diag("bf16 0x%04x -> 0x%08x", h, u_of(fb));
        }
        uint16_t backb = tempo__f32_to_bf16(fb);
        if (!same_bf16(backb, h) && tripb++ < 5) {
            tap_diag("bf16 0x%04x -> fp32 -> 0x%04x", h, backb);
        }
    }
    tap_diag("fp16 reference: %s", REF_F16);
    TAP_EQ_INT(bad16, 0, "all 65536 fp16 values convert to fp32 exactly");
    TAP_EQ_INT(trip16, 0, "all 65536 fp16 values survive fp16 -> fp32 -> fp16");
    TAP_EQ_INT(badb, 0, "all 65536 bf16 values convert to fp32 exactly");
    TAP_EQ_INT(tripb, 0, "all 65536 bf16 values survive bf16 -> fp32 -> bf16");
    /* A signalling NaN comes back as a NaN (quieted), never as infinity. */
    uint16_t snan = tempo__f32_to_f16(tempo__f16_to_f32(0x7c01));
    TAP_OK((snan & 0x7c00) == 0x7c00 && (snan & 0x3ff), "fp16 sNaN 0x7c01 round-trips to a NaN "
           "(0x%04x)", snan);
    uint16_t snanb = tempo__f32_to_bf16(f_of(0x7f800001));
    TAP_OK((snanb & 0x7f80) == 0x7f80 && (snanb & 0x7f), "fp32 sNaN with a low payload becomes a "
           "bf16 NaN, not infinity (0x%04x)", snanb);
}

static void test_boundaries(void)
{
    /* Around every value m of each 16-bit format: the midpoint to the next value (a tie), and one
     * fp32 ulp either side of the midpoint and of m itself. */
    tally_t t = {"boundaries", 0, 0};
    for (uint32_t i = 0; i < 0x7c00; i++) {
        double lo = ref_f16_to_f32((uint16_t)i), hi = ref_f16_to_f32((uint16_t)(i + 1));
        float mid = (float)((lo + hi) / 2); /* exact: fp16 midpoints need 12 bits */
        float pts[] = {mid, nextafterf(mid, 0), nextafterf(mid, INFINITY), (float)lo,
                       nextafterf((float)lo, INFINITY)};
        for (size_t k = 0; k < sizeof(pts) / sizeof(pts[0]); k++) {
            check_f32(&t, pts[k]);
            check_f32(&t, -pts[k]);
        }
    }
    for (uint32_t i = 0; i < 0x7f80; i++) {
        uint32_t base = i << 16;
        uint32_t pts[] = {base | 0x8000, base | 0x7fff, base | 0x8001,
                          base,          base | 1,      base | 0xffff};
        for (size_t k = 0; k < sizeof(pts) / sizeof(pts[0]); k++) {
            check_f32(&t, f_of(pts[k]));
            check_f32(&t, f_of(pts[k] | 0x80000000u));
        }
    }
    TAP_OK(t.bad == 0, "%ld fp32 values at and beside every fp16/bf16 rounding boundary convert "
           "as the references (%ld wrong)", t.checked, t.bad);
}

static void test_edges(void)
{
    tally_t t = {"edges", 0, 0};
    const float edges[] = {
        0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.0f, 65519.996f, 65520.0f, 65536.0f, 1e6f,
        FLT_MAX, -FLT_MAX, INFINITY, -INFINITY, NAN, -NAN, FLT_MIN, FLT_TRUE_MIN, -FLT_TRUE_MIN,
        5.9604645e-8f /* 2^-24: smallest fp16 subnormal */, 2.9802322e-8f /* 2^-25: tie to 0 */,
        2.9802326e-8f /* just above: rounds up */, 8.940697e-8f /* 1.5 * 2^-24: tie to 2^-23 */,
        6.097555e-5f /* largest fp16 subnormal */, 6.1035156e-5f /* smallest fp16 normal */,
        6.1005354e-5f /* between: rounds to the smallest normal */, 2049.0f /* tie to 2048 */,
        2051.0f /* tie to 2052 */, 3.3895314e38f /* largest bf16 finite */,
        3.3961776e38f /* rounds past it: bf16 inf */, 1.00390625f /* bf16 tie to 1 */,
        1.01171875f /* bf16 tie to 1.015625 */,
    };
    for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++) {
        check_f32(&t, edges[i]);
    }
    const uint32_t nans[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu,
                             0x7f802000u, 0x7fbfffffu};
    for (size_t i = 0; i < sizeof(nans) / sizeof(nans[0]); i++) {
        check_f32(&t, f_of(nans[i]));
    }
    TAP_OK(t.bad == 0, "%ld edge values (zeros, subnormals, overflow, inf, NaNs) convert as the "
           "references", t.checked);
    TAP_EQ_UINT(tempo__f32_to_f16(65520.0f), 0x7c00, "fp16: 65520 overflows to +inf");
    TAP_EQ_UINT(tempo__f32_to_f16(-65520.0f), 0xfc00, "fp16: -65520 overflows to -inf");
    TAP_EQ_UINT(tempo__f32_to_f16(65519.0f), 0x7bff, "fp16: 65519 rounds to 65504");
    TAP_EQ_UINT(tempo__f32_to_bf16(FLT_MAX), 0x7f80, "bf16: FLT_MAX rounds to +inf");
    TAP_EQ_UINT(tempo__f32_to_f16(-0.0f), 0x8000, "fp16: -0 keeps its sign");
    TAP_EQ_UINT(tempo__f32_to_f16(FLT_TRUE_MIN), 0x0000, "fp16: tiny values flush to +0");
    TAP_EQ_UINT(tempo__f32_to_f16(-FLT_TRUE_MIN), 0x8000, "fp16: tiny negative values to -0");
}

static void test_random(void)
{
    uint64_t seed = tu_seed(), s = seed;
    tally_t t = {"random", 0, 0};
    for (long i = 0; i < RANDOM_VALUES; i++) {
        uint64_t r = tu_rand64(&s);
        check_f32(&t, f_of((uint32_t)r));
        /* Values in the fp16 range too (random bits are mostly out of it). */
        check_f32(&t, f_of((uint32_t)(r >> 32) % 0x47800000u | ((uint32_t)r & 0x80000000u)));
    }
    if (t.bad) {
        tap_diag("seed %llu (replay with TEMPO_TEST_SEED=%llu)", (unsigned long long)seed,
                 (unsigned long long)seed);
    }
    TAP_OK(t.bad == 0, "%ld random fp32 values convert as the references (%ld wrong)", t.checked,
           t.bad);
}

static void test_bulk(void)
{
    /* The bulk converters dispatch on dtype to the scalar ones. */
    uint16_t h[256], back[256];
    float f[256];
    for (int i = 0; i < 256; i++) {
        h[i] = (uint16_t)(i * 251 + 7);
    }
    tempo__half_to_f32(TEMPO_FLOAT16, h, f, 256);
    int ok16 = 1;
    for (int i = 0; i < 256; i++) {
        ok16 &= same_f32(f[i], tempo__f16_to_f32(h[i]));
    }
    tempo__f32_to_half(TEMPO_FLOAT16, f, back, 256);
    for (int i = 0; i < 256; i++) {
        ok16 &= same_f16(back[i], h[i]);
    }
    TAP_OK(ok16, "bulk fp16 conversions agree with the scalar ones");
    tempo__half_to_f32(TEMPO_BFLOAT16, h, f, 256);
    int okb = 1;
    for (int i = 0; i < 256; i++) {
        okb &= u_of(f[i]) == (uint32_t)h[i] << 16;
    }
    tempo__f32_to_half(TEMPO_BFLOAT16, f, back, 256);
    for (int i = 0; i < 256; i++) {
        okb &= same_bf16(back[i], h[i]);
    }
    TAP_OK(okb, "bulk bf16 conversions agree with the scalar ones");
}

/* ------------------------------------------------------------------------------------------ */
/* Names, sizes, parsing                                                                      */
/* ------------------------------------------------------------------------------------------ */

static void test_names(void)
{
    static const struct {
        tempo_dtype_t d;
        const char *name;
        size_t size;
    } dt[] = {
        {TEMPO_INT8, "int8", 1},       {TEMPO_UINT8, "uint8", 1},
        {TEMPO_INT32, "int32", 4},     {TEMPO_UINT32, "uint32", 4},
        {TEMPO_INT64, "int64", 8},     {TEMPO_UINT64, "uint64", 8},
        {TEMPO_FLOAT16, "float16", 2}, {TEMPO_BFLOAT16, "bfloat16", 2},
        {TEMPO_FLOAT32, "float32", 4}, {TEMPO_FLOAT64, "float64", 8},
    };
    TAP_EQ_INT(sizeof(dt) / sizeof(dt[0]), TEMPO_DTYPE_COUNT, "every dtype is covered");
    for (size_t i = 0; i < sizeof(dt) / sizeof(dt[0]); i++) {
        TAP_EQ_UINT(tempo_dtype_size(dt[i].d), dt[i].size, "size of %s", dt[i].name);
        TAP_EQ_STR(tempo_dtype_name(dt[i].d), dt[i].name, "name of dtype %d", (int)dt[i].d);
        tempo_dtype_t got = (tempo_dtype_t)-1;
        TAP_OK(tempo_dtype_parse(dt[i].name, &got) == TEMPO_OK && got == dt[i].d,
               "tempo_dtype_parse(\"%s\")", dt[i].name);
    }
    const int bad_dtypes[] = {-1, TEMPO_DTYPE_COUNT, 1000};
    for (size_t i = 0; i < 3; i++) {
        TAP_EQ_UINT(tempo_dtype_size((tempo_dtype_t)bad_dtypes[i]), 0, "size of dtype %d is 0",
                    bad_dtypes[i]);
        TAP_EQ_STR(tempo_dtype_name((tempo_dtype_t)bad_dtypes[i]), "invalid",
                   "name of dtype %d is \"invalid\"", bad_dtypes[i]);
        TAP_EQ_STR(tempo_op_name((tempo_op_t)bad_dtypes[i]), "invalid",
                   "name of op %d is \"invalid\"", bad_dtypes[i]);
    }
    static const char *const ops[] = {"sum", "prod", "min", "max", "avg"};
    TAP_EQ_INT(sizeof(ops) / sizeof(ops[0]), TEMPO_OP_COUNT, "every op is covered");
    for (int o = 0; o < TEMPO_OP_COUNT; o++) {
        TAP_EQ_STR(tempo_op_name((tempo_op_t)o), ops[o], "name of op %d", o);
        tempo_op_t got = (tempo_op_t)-1;
        TAP_OK(tempo_op_parse(ops[o], &got) == TEMPO_OK && got == (tempo_op_t)o,
               "tempo_op_parse(\"%s\")", ops[o]);
    }
}

static void test_parse_aliases(void)
{
    /* The aliases tempo.h documents (nccl-tests names), plus case-insensitivity. */
    static const struct {
        const char *name;
        tempo_dtype_t d;
    } al[] = {
        {"half", TEMPO_FLOAT16},    {"float16", TEMPO_FLOAT16}, {"fp16", TEMPO_FLOAT16},
        {"bfloat16", TEMPO_BFLOAT16}, {"bf16", TEMPO_BFLOAT16}, {"float", TEMPO_FLOAT32},
        {"float32", TEMPO_FLOAT32}, {"fp32", TEMPO_FLOAT32},    {"double", TEMPO_FLOAT64},
        {"float64", TEMPO_FLOAT64}, {"fp64", TEMPO_FLOAT64},    {"FLOAT", TEMPO_FLOAT32},
        {"Half", TEMPO_FLOAT16},    {"BF16", TEMPO_BFLOAT16},   {"INT32", TEMPO_INT32},
    };
    for (size_t i = 0; i < sizeof(al) / sizeof(al[0]); i++) {
        tempo_dtype_t got = (tempo_dtype_t)-1;
        tempo_status_t st = tempo_dtype_parse(al[i].name, &got);
        TAP_OK(st == TEMPO_OK && got == al[i].d, "tempo_dtype_parse(\"%s\") = %s (got %d, %s)",
               al[i].name, tempo_dtype_name(al[i].d), (int)st, tempo_dtype_name(got));
    }
    static const char *const bad[] = {"", "int16", "float128", "fp8", "float32 ", " float32",
                                      "bfloat", "int8x", "sum"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        tempo_dtype_t got = (tempo_dtype_t)77;
        tempo_status_t st = tempo_dtype_parse(bad[i], &got);
        TAP_OK(st == TEMPO_ERR_INVALID && got == (tempo_dtype_t)77,
               "tempo_dtype_parse(\"%s\") is TEMPO_ERR_INVALID, output untouched", bad[i]);
    }
    tempo_dtype_t d;
    TAP_EQ_INT(tempo_dtype_parse(NULL, &d), TEMPO_ERR_INVALID, "tempo_dtype_parse(NULL)");
    TAP_EQ_INT(tempo_dtype_parse("float", NULL), TEMPO_ERR_INVALID, "tempo_dtype_parse(.., NULL)");
    tempo_op_t o = (tempo_op_t)77;
    TAP_OK(tempo_op_parse("MAX", &o) == TEMPO_OK && o == TEMPO_MAX, "tempo_op_parse is "
           "case-insensitive");
    o = (tempo_op_t)77;
    TAP_OK(tempo_op_parse("mean", &o) == TEMPO_ERR_INVALID && o == (tempo_op_t)77,
           "tempo_op_parse(\"mean\") is TEMPO_ERR_INVALID, output untouched");
    TAP_EQ_INT(tempo_op_parse("", &o), TEMPO_ERR_INVALID, "tempo_op_parse(\"\")");
    TAP_EQ_INT(tempo_op_parse(NULL, &o), TEMPO_ERR_INVALID, "tempo_op_parse(NULL)");
    TAP_EQ_INT(tempo_op_parse("sum", NULL), TEMPO_ERR_INVALID, "tempo_op_parse(.., NULL)");
}

int main(void)
{
    test_half_to_f32_and_back();
    test_boundaries();
    test_edges();
    test_random();
    test_bulk();
    test_names();
    test_parse_aliases();
    return tap_done();
}
