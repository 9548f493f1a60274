/*
 * perf/verifiable_test.c — make check: the perf data generator is exact, and its 16-bit float
 * conversions round to nearest even.
 *
 * What it checks (TAP output, one line per claim):
 *   - fp16 and bf16: every non-NaN 16-bit pattern survives 16 -> 32 -> 16 bits; every midpoint
 *     between neighbours rounds to the even one, and one fp32 ulp either side rounds to the near
 *     one; overflow goes to infinity at half-way above the largest finite value.
 *   - Reductions: for every dtype, op, wraps in {0,1} and rank counts up to 256, folding the ranks'
 *     values in three orders (forward, backward, pairwise tree), in the element type's own
 *     arithmetic with every partial result rounded to the type (stricter than tempo's fp32
 *     accumulation for fp16/bf16), gives exactly the expected table; with wraps = 0 no integer
 *     partial result leaves the type's range.
 * What it is not: a test of any communication library; no MPI, no libtempo.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "perf/verifiable.h"

static int tests, failures;

static void report(int ok, const char *what)
{
    tests++;
    if (!ok)
        failures++;
    printf("%s %d - %s\n", ok ? "ok" : "not ok", tests, what);
}

static int is_nan16(uint16_t h, int bf)
{
    if (bf)
        return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu);
    return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu);
}

static uint16_t to16(float f, int bf)
{
    return bf ? perf_f32_to_bf16(f) : perf_f32_to_f16(f);
}

static float from16(uint16_t h, int bf)
{
    return bf ? perf_bf16_to_f32(h) : perf_f16_to_f32(h);
}

static int check_16bit(int bf)
{
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000u; h++) {
        uint16_t x = (uint16_t)h;
        if (is_nan16(x, bf)) {
            bad += !isnan(from16(x, bf)) || !is_nan16(to16(from16(x, bf), bf), bf);
            continue;
        }
        bad += to16(from16(x, bf), bf) != x;
    }
    /* midpoints between positive neighbours (exact in fp32: at most 12 significant bits) */
    uint16_t inf = bf ? 0x7f80u : 0x7c00u;
    for (uint16_t h = 0; h < inf - 1; h++) {
        float lo = from16(h, bf), hi = from16((uint16_t)(h + 1), bf), mid = lo + (hi - lo) / 2;
        if (!(mid > lo && mid < hi)) {
            bad++;
            continue;
        }
        uint16_t even = (h & 1u) ? (uint16_t)(h + 1) : h;
        bad += to16(mid, bf) != even;
        bad += to16(nextafterf(mid, -INFINITY), bf) != h;
        bad += to16(nextafterf(mid, INFINITY), bf) != (uint16_t)(h + 1);
        bad += to16(-mid, bf) != (uint16_t)(even | 0x8000u);
    }
    /* overflow: half-way above the largest finite value rounds to infinity */
    float max = from16((uint16_t)(inf - 1), bf), next = ldexpf(1.0f, bf ? 128 - 9 : 16 - 12);
    bad += to16(max + next, bf) != inf;
    bad += to16(nextafterf(max + next, 0.0f), bf) != (uint16_t)(inf - 1);
    bad += to16(INFINITY, bf) != inf;
    return bad == 0;
}

/* ---- reductions in the element type's arithmetic -------------------------------------------- */

static int is_float(tempo_dtype_t d)
{
    return d == TEMPO_FLOAT16 || d == TEMPO_BFLOAT16 || d == TEMPO_FLOAT32 || d == TEMPO_FLOAT64;
}

static int is_signed(tempo_dtype_t d)
{
    return d == TEMPO_INT8 || d == TEMPO_INT32 || d == TEMPO_INT64;
}

/* Combine two element-bit values in dtype: floats rounded to the type after every step. */
static uint64_t combine(tempo_dtype_t d, tempo_op_t op, uint64_t x, uint64_t y)
{
    size_t ts = perf_dtype_size(d);
    uint64_t mask = ts == 8 ? UINT64_MAX : (UINT64_C(1) << (8 * ts)) - 1;
    if (op == TEMPO_AVG)
        op = TEMPO_SUM;
    if (is_float(d)) {
        double a, b, r;
        if (d == TEMPO_FLOAT64) {
            memcpy(&a, &x, 8);
            memcpy(&b, &y, 8);
        } else if (d == TEMPO_FLOAT32) {
            uint32_t u = (uint32_t)x, v = (uint32_t)y;
            float fa, fb;
            memcpy(&fa, &u, 4);
            memcpy(&fb, &v, 4);
            a = fa;
            b = fb;
        } else {
            a = from16((uint16_t)x, d == TEMPO_BFLOAT16);
            b = from16((uint16_t)y, d == TEMPO_BFLOAT16);
        }
        switch (op) {
        case TEMPO_SUM: r = a + b; break;
        case TEMPO_PROD: r = a * b; break;
        case TEMPO_MIN: r = a < b ? a : b; break;
        default: r = a > b ? a : b; break;
        }
        if (d == TEMPO_FLOAT64) {
            uint64_t out;
            memcpy(&out, &r, 8);
            return out;
        }
        if (d == TEMPO_FLOAT32) {
            float f = (float)r;
            uint32_t out;
            memcpy(&out, &f, 4);
            return out;
        }
        return to16((float)r, d == TEMPO_BFLOAT16);
    }
    switch (op) {
    case TEMPO_SUM: return (x + y) & mask;
    case TEMPO_PROD: return (x * y) & mask;
    default: break;
    }
    int less;
    if (is_signed(d)) {
        unsigned sh = (unsigned)(64 - 8 * ts);
        less = ((int64_t)(y << sh) >> sh) < ((int64_t)(x << sh) >> sh);
    } else {
        less = y < x;
    }
    return (op == TEMPO_MIN) == less ? y : x;
}

static uint64_t tree(tempo_dtype_t d, tempo_op_t op, const uint64_t *v, int lo, int hi)
{
    if (hi - lo == 1)
        return v[lo];
    int mid = lo + (hi - lo) / 2;
    return combine(d, op, tree(d, op, v, lo, mid), tree(d, op, v, mid, hi));
}

/* Partial results stay in range when integer overflow must not happen (wraps = 0). */
static int in_range(tempo_dtype_t d, int64_t x)
{
    switch (d) {
    case TEMPO_INT8: return x >= -128 && x <= 127;
    case TEMPO_UINT8: return x >= 0 && x <= 255;
    case TEMPO_UINT32: case TEMPO_UINT64: return x >= 0;
    default: return 1;
    }
}

static int check_tables(int wraps)
{
    static const int counts[] = {1, 2, 3, 4, 5, 7, 8, 13, 16, 31, 64, 100, 127, 128, 200, 256};
    int bad = 0;
    static uint64_t inputs[256][16]; /* [rank][a]: element bits */
    uint64_t v[256];
    for (int di = 0; di < TEMPO_DTYPE_COUNT; di++) {
        tempo_dtype_t d = (tempo_dtype_t)di;
        for (int oi = 0; oi < TEMPO_OP_COUNT; oi++) {
            tempo_op_t op = (tempo_op_t)oi;
            for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
                int n = counts[ci];
                /* documented limits: avg on 8-bit types, and 8-bit sums kept in range */
                if (n > 127 && perf_dtype_size(d) == 1 &&
                    (op == TEMPO_AVG || (!wraps && op == TEMPO_SUM)))
                    continue;
                uint64_t ex[16];
                for (int r = 0; r < n; r++)
                    perf_red_tables(d, op, n, r, wraps, inputs[r], ex);
                for (unsigned a = 0; a < 16; a++) {
                    int64_t sum = 0, prod = 1;
                    for (int r = 0; r < n; r++) {
                        v[r] = inputs[r][a];
                        int64_t x = perf_red_value(d, op, n, r, a, wraps);
                        sum += x;
                        prod *= x;
                        if (!wraps && !is_float(d) && op != TEMPO_MIN && op != TEMPO_MAX)
                            bad += !in_range(d, op == TEMPO_PROD ? prod : sum) ||
                                   !in_range(d, x);
                    }
                    if (op == TEMPO_AVG)
                        continue; /* the sum is checked under TEMPO_SUM; one division after */
                    uint64_t fwd = v[0], bwd = v[n - 1];
                    for (int r = 1; r < n; r++) {
                        fwd = combine(d, op, fwd, v[r]);
                        bwd = combine(d, op, bwd, v[n - 1 - r]);
                    }
                    bad += fwd != ex[a] || bwd != ex[a] || tree(d, op, v, 0, n) != ex[a];
                }
            }
        }
    }
    return bad == 0;
}

int main(void)
{
    printf("1..5\n");
    report(check_16bit(0), "fp16: round trip of every pattern, ties to even, overflow");
    report(check_16bit(1), "bf16: round trip of every pattern, ties to even");
    report(check_tables(1), "wrapping data: any reduction order gives the table, up to 256 ranks");
    report(check_tables(0), "in-range data: same, and no integer partial result overflows");
    uint64_t in[16], ex[16];
    perf_red_tables(TEMPO_FLOAT16, TEMPO_AVG, 3, 0, 1, in, ex);
    int bad = 0;
    for (unsigned a = 0; a < 16; a++) {
        int64_t s = 0;
        for (int r = 0; r < 3; r++)
            s += perf_red_value(TEMPO_FLOAT16, TEMPO_AVG, 3, r, a, 1);
        bad += ex[a] != perf_f32_to_f16((float)s / 3.0f);
    }
    report(bad == 0, "avg: fp16 table is sum / n in fp32 rounded once");
    return failures ? 1 : 0;
}
