/*
 * exact.h — data whose all-reduce results are exact in every type at small rank counts, for the
 * tests that check shared-memory all-reduces element by element (shm_cma.c, mem_win.c): rank r's
 * element i is val(r, i, op), a small integer; expect(n, i, op) is the result at n ranks (avg as
 * the 16-bit types compute it: fp32 sum, one division); put and get store and load a double in
 * float32, float64, int32, int8 or (any other type) bfloat16.
 */
#ifndef TEMPO_TESTS_MR_EXACT_H
#define TEMPO_TESTS_MR_EXACT_H

#include <stdint.h>
#include <string.h>

#include <tempo.h>

/* Element i of rank r's input, as a small integer: sums, maxima and products of these are exact
 * in every type at every rank count used here. */
static inline int val(int r, size_t i, tempo_op_t op)
{
    if (op == TEMPO_PROD) {
        return ((i + (size_t)r) % 5 == 0) ? -1 : 1 + (int)((i * 7 + (size_t)r) % 2);
    }
    return (int)((i * 31 + (size_t)r * 7) % 97) - 40;
}

static inline double expect(int n, size_t i, tempo_op_t op)
{
    double e = op == TEMPO_PROD ? 1 : 0;
    for (int r = 0; r < n; r++) {
        double v = val(r, i, op);
        if (op == TEMPO_SUM || op == TEMPO_AVG) {
            e += v;
        } else if (op == TEMPO_PROD) {
            e *= v;
        } else if (r == 0 || v > e) {
            e = v;
        }
    }
    return op == TEMPO_AVG ? (double)((float)e / (float)n) : e; /* fp32, as 16-bit types add */
}

static inline uint16_t to_bf16(double v) /* round to nearest even (no NaNs here) */
{
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline double from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline void put(tempo_dtype_t dt, void *buf, size_t i, double v)
{
    switch (dt) {
    case TEMPO_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case TEMPO_FLOAT64: ((double *)buf)[i] = v; break;
    case TEMPO_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case TEMPO_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
    default: ((uint16_t *)buf)[i] = to_bf16(v); break;
    }
}

static inline double get(tempo_dtype_t dt, const void *buf, size_t i)
{
    switch (dt) {
    case TEMPO_FLOAT32: return ((const float *)buf)[i];
    case TEMPO_FLOAT64: return ((const double *)buf)[i];
    case TEMPO_INT32: return ((const int32_t *)buf)[i];
    case TEMPO_INT8: return ((const int8_t *)buf)[i];
    default: return from_bf16(((const uint16_t *)buf)[i]);
    }
}

#endif /* TEMPO_TESTS_MR_EXACT_H */
