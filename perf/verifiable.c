/*
 * perf/verifiable.c — name tables, 16-bit float conversions and the exact-result generators of the
 * perf programs (see verifiable.h for the construction and why it is exact).
 *
 * Not part of libtempo: linked into both the tempo programs and the MPI baselines, so it uses
 * nothing but libc and the enums of tempo.h. Expected values are computed here independently of any
 * library reduction code: integer folds in wrapping uint64 arithmetic truncated to the type's
 * width, float folds in double (exact for these values), and avg with the one-division rule of
 * tempo.h.
 */
#include "perf/verifiable.h"

/* ---- names ----------------------------------------------------------------------------------- */

static const struct {
    const char *name;   /* printed (nccl-tests spelling) */
    size_t size;
} dtype_table[TEMPO_DTYPE_COUNT] = {
    [TEMPO_INT8] = {"int8", 1},       [TEMPO_UINT8] = {"uint8", 1},
    [TEMPO_INT32] = {"int32", 4},     [TEMPO_UINT32] = {"uint32", 4},
    [TEMPO_INT64] = {"int64", 8},     [TEMPO_UINT64] = {"uint64", 8},
    [TEMPO_FLOAT16] = {"half", 2},    [TEMPO_BFLOAT16] = {"bfloat16", 2},
    [TEMPO_FLOAT32] = {"float", 4},   [TEMPO_FLOAT64] = {"double", 8},
};

/* The names tempo_dtype_parse() accepts: tempo's own and the nccl-tests aliases. */
static const struct {
    const char *name;
    tempo_dtype_t dtype;
} dtype_alias[] = {
    {"int8", TEMPO_INT8},         {"uint8", TEMPO_UINT8},       {"int32", TEMPO_INT32},
    {"uint32", TEMPO_UINT32},     {"int64", TEMPO_INT64},       {"uint64", TEMPO_UINT64},
    {"float16", TEMPO_FLOAT16},   {"half", TEMPO_FLOAT16},      {"fp16", TEMPO_FLOAT16},
    {"bfloat16", TEMPO_BFLOAT16}, {"bf16", TEMPO_BFLOAT16},     {"float32", TEMPO_FLOAT32},
    {"float", TEMPO_FLOAT32},     {"fp32", TEMPO_FLOAT32},      {"float64", TEMPO_FLOAT64},
    {"double", TEMPO_FLOAT64},    {"fp64", TEMPO_FLOAT64},
};

static const char *const op_names[TEMPO_OP_COUNT] = {
    [TEMPO_SUM] = "sum", [TEMPO_PROD] = "prod", [TEMPO_MIN] = "min", [TEMPO_MAX] = "max",
    [TEMPO_AVG] = "avg",
};

size_t perf_dtype_size(tempo_dtype_t dtype)
{
    return ((unsigned)dtype < TEMPO_DTYPE_COUNT) ? dtype_table[dtype].size : 0;
}

const char *perf_dtype_name(tempo_dtype_t dtype)
{
    return ((unsigned)dtype < TEMPO_DTYPE_COUNT) ? dtype_table[dtype].name : "invalid";
}

int perf_dtype_parse(const char *name, tempo_dtype_t *dtype_p)
{
    for (size_t k = 0; k < sizeof(dtype_alias) / sizeof(dtype_alias[0]); k++) {
        if (strcmp(name, dtype_alias[k].name) == 0) {
            *dtype_p = dtype_alias[k].dtype;
            return 0;
        }
    }
    return -1;
}

const char *perf_op_name(tempo_op_t op)
{
    return ((unsigned)op < TEMPO_OP_COUNT) ? op_names[op] : "invalid";
}

int perf_op_parse(const char *name, tempo_op_t *op_p)
{
    for (int k = 0; k < TEMPO_OP_COUNT; k++) {
        if (strcmp(name, op_names[k]) == 0) {
            *op_p = (tempo_op_t)k;
            return 0;
        }
    }
    return -1;
}

/* ---- 16-bit floats --------------------------------------------------------------------------- */

static uint32_t f32_bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    return x;
}

static float f32_from_bits(uint32_t x)
{
    float f;
    memcpy(&f, &x, sizeof(f));
    return f;
}

uint16_t perf_f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or NaN (quieted) */
        return (uint16_t)(sign | (ax > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if ((ax >> 23) == 0) /* fp32 zero or subnormal: far below half's smallest subnormal */
        return sign;
    int e = (int)(ax >> 23) - 127;         /* unbiased exponent */
    uint32_t m = (ax & 0x7fffffu) | 0x800000u; /* 24-bit significand: value = m * 2^(e-23) */
    if (e > 15)
        return (uint16_t)(sign | 0x7c00u);
    uint32_t h, rem, halfway;
    if (e >= -14) { /* normal half: keep 11 significant bits, drop 13 */
        h = ((uint32_t)(e + 15) << 10) | ((m >> 13) & 0x3ffu);
        rem = m & 0x1fffu;
        halfway = 0x1000u;
    } else { /* subnormal half: units of 2^-24, value = m * 2^(e+1) = m >> s */
        int s = -(e + 1);
        if (s > 24) /* below half of the smallest subnormal */
            return sign;
        h = m >> s;
        rem = m & ((1u << s) - 1u);
        halfway = 1u << (s - 1);
    }
    if (rem > halfway || (rem == halfway && (h & 1u)))
        h++; /* a carry into the exponent is the right answer, up to inf (0x7c00) */
    return (uint16_t)(sign | h);
}

float perf_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu;
    uint32_t m = h & 0x3ffu;
    uint32_t x;
    if (e == 0x1f) {
        x = sign | 0x7f800000u | (m << 13);
    } else if (e == 0) {
        if (m == 0) {
            x = sign;
        } else { /* subnormal: m * 2^-24, normalize */
            uint32_t be = 113; /* fp32 biased exponent of 2^-14 */
            while (!(m & 0x400u)) {
                m <<= 1;
                be--;
            }
            x = sign | (be << 23) | ((m & 0x3ffu) << 13);
        }
    } else {
        x = sign | ((e + 112) << 23) | (m << 13);
    }
    return f32_from_bits(x);
}

uint16_t perf_f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

float perf_bf16_to_f32(uint16_t h)
{
    return f32_from_bits((uint32_t)h << 16);
}

/* ---- generators ------------------------------------------------------------------------------ */

static int dtype_is_float(tempo_dtype_t dtype)
{
    return dtype == TEMPO_FLOAT16 || dtype == TEMPO_BFLOAT16 || dtype == TEMPO_FLOAT32 ||
           dtype == TEMPO_FLOAT64;
}

static int dtype_is_signed(tempo_dtype_t dtype)
{
    return dtype == TEMPO_INT8 || dtype == TEMPO_INT32 || dtype == TEMPO_INT64;
}

static uint64_t width_mask(size_t tsize)
{
    return tsize >= 8 ? UINT64_MAX : ((UINT64_C(1) << (8 * tsize)) - 1);
}

/* Element bits of an exactly representable double. */
static uint64_t double_bits(tempo_dtype_t dtype, double d)
{
    switch (dtype) {
    case TEMPO_FLOAT16: return perf_f32_to_f16((float)d);
    case TEMPO_BFLOAT16: return perf_f32_to_bf16((float)d);
    case TEMPO_FLOAT32: return f32_bits((float)d);
    default: {
        uint64_t x;
        memcpy(&x, &d, sizeof(x));
        return x;
    }
    }
}

uint64_t perf_cast_bits(tempo_dtype_t dtype, int64_t v)
{
    if (dtype_is_float(dtype))
        return double_bits(dtype, (double)v);
    return (uint64_t)v & width_mask(perf_dtype_size(dtype));
}

int64_t perf_red_value(tempo_dtype_t dtype, tempo_op_t op, int nranks, int rank, unsigned a,
                       int wraps)
{
    uint64_t h = perf_mix(UINT64_C(0x243f6a8885a308d3) ^ ((uint64_t)a << 32) ^ (uint64_t)rank);
    int n = nranks > 0 ? nranks : 1;
    /* Without wrapping, integer partial results must stay inside the type. */
    int in_range = !wraps && !dtype_is_float(dtype);
    int nonneg = in_range && !dtype_is_signed(dtype);
    switch (op) {
    case TEMPO_SUM: {
        int64_t m = (nonneg ? 255 : in_range ? 127 : 256) / n;
        m = m < 1 ? 1 : (m > 127 ? 127 : m);
        if (nonneg)
            return (int64_t)(h % (uint64_t)(m + 1));
        return (int64_t)(h % (uint64_t)(2 * m + 1)) - m;
    }
    case TEMPO_PROD: {
        int twos = (in_range && perf_dtype_size(dtype) == 1) ? (nonneg ? 7 : 6) : 15;
        int64_t mag = (rank < twos && (h & 3u) == 0) ? 2 : 1;
        return (!nonneg && ((h >> 2) & 3u) == 0) ? -mag : mag;
    }
    case TEMPO_MIN:
    case TEMPO_MAX:
        return (int64_t)(h % 17u) - 8;
    case TEMPO_AVG:
    default: {
        int64_t m = 127 / n;
        m = m < 1 ? 1 : (m > 100 ? 100 : m);
        return (int64_t)(h % (uint64_t)(m + 1));
    }
    }
}

/* Integer fold in the type's wrapping arithmetic; values are kept truncated to the width. */
static uint64_t int_fold(tempo_dtype_t dtype, tempo_op_t op, uint64_t acc, uint64_t v)
{
    size_t tsize = perf_dtype_size(dtype);
    uint64_t mask = width_mask(tsize);
    switch (op) {
    case TEMPO_SUM:
    case TEMPO_AVG: return (acc + v) & mask;
    case TEMPO_PROD: return (acc * v) & mask;
    default: break;
    }
    int less;
    if (dtype_is_signed(dtype)) {
        unsigned shift = (unsigned)(64 - 8 * tsize);
        /* sign-extend from the type's width (arithmetic shift of a two's complement int64) */
        int64_t sa = (int64_t)(acc << shift) >> shift, sv = (int64_t)(v << shift) >> shift;
        less = sv < sa;
    } else {
        less = v < acc;
    }
    if (op == TEMPO_MIN)
        return less ? v : acc;
    return (!less && v != acc) ? v : acc;
}

void perf_red_tables(tempo_dtype_t dtype, tempo_op_t op, int nranks, int rank, int wraps,
                     uint64_t input_p[16], uint64_t expected_p[16])
{
    for (unsigned a = 0; a < 16; a++) {
        input_p[a] = perf_cast_bits(dtype, perf_red_value(dtype, op, nranks, rank, a, wraps));
        if (op == TEMPO_AVG) {
            int64_t sum = 0; /* non-negative and < 2^7 * nranks: no wrap in any type */
            for (int r = 0; r < nranks; r++)
                sum += perf_red_value(dtype, op, nranks, r, a, wraps);
            switch (dtype) {
            case TEMPO_FLOAT64:
                expected_p[a] = double_bits(dtype, (double)sum / (double)nranks);
                break;
            case TEMPO_FLOAT32:
                expected_p[a] = f32_bits((float)sum / (float)nranks);
                break;
            case TEMPO_FLOAT16: /* sum in fp32, divide in fp32, round once to 16 bits */
                expected_p[a] = perf_f32_to_f16((float)sum / (float)nranks);
                break;
            case TEMPO_BFLOAT16:
                expected_p[a] = perf_f32_to_bf16((float)sum / (float)nranks);
                break;
            default:
                expected_p[a] = perf_cast_bits(dtype, sum / nranks);
                break;
            }
            continue;
        }
        if (dtype_is_float(dtype)) {
            /* every partial result is a small integer or +-2^k: exact in double, in any order */
            double acc = (double)perf_red_value(dtype, op, nranks, 0, a, wraps);
            for (int r = 1; r < nranks; r++) {
                double v = (double)perf_red_value(dtype, op, nranks, r, a, wraps);
                switch (op) {
                case TEMPO_SUM: acc += v; break;
                case TEMPO_PROD: acc *= v; break;
                case TEMPO_MIN: acc = v < acc ? v : acc; break;
                default: acc = v > acc ? v : acc; break;
                }
            }
            expected_p[a] = double_bits(dtype, acc);
        } else {
            uint64_t acc = perf_cast_bits(dtype, perf_red_value(dtype, op, nranks, 0, a, wraps));
            for (int r = 1; r < nranks; r++) {
                int64_t v = perf_red_value(dtype, op, nranks, r, a, wraps);
                acc = int_fold(dtype, op, acc, perf_cast_bits(dtype, v));
            }
            expected_p[a] = acc;
        }
    }
}

void perf_pattern_table(tempo_dtype_t dtype, uint64_t pattern_p[128])
{
    for (int k = 0; k < 128; k++)
        pattern_p[k] = perf_cast_bits(dtype, (int64_t)k - 64);
}
