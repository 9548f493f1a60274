/*
 * dtype.h — element types: sizes, names, and the fp16/bf16 <-> fp32 conversions used wherever
 * 16-bit floats are reduced (they accumulate in fp32 and round once, to nearest even).
 */
#ifndef TEMPO_CORE_DTYPE_H
#define TEMPO_CORE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <tempo.h>

static inline int tempo__dtype_valid(tempo_dtype_t d)
{
    return (unsigned)d < TEMPO_DTYPE_COUNT;
}
static inline int tempo__op_valid(tempo_op_t op)
{
    return (unsigned)op < TEMPO_OP_COUNT;
}
static inline int tempo__dtype_is_half(tempo_dtype_t d)
{
    return d == TEMPO_FLOAT16 || d == TEMPO_BFLOAT16;
}

static inline float tempo__bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t tempo__f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN, keep sign */
    }
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

static inline float tempo__f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        u = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        u = sign;
    } else { /* subnormal: normalise */
        int e = -1;
        do {
            e++;
            man <<= 1;
        } while (!(man & 0x400u));
        u = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint16_t tempo__f32_to_f16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) {
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    }
    if (a >= 0x477ff000u) { /* rounds to >= 65520: infinity */
        return (uint16_t)(sign | 0x7c00u);
    }
    if (a >= 0x38800000u) { /* normal half */
        uint32_t r = a - (112u << 23);
        r += 0xfffu + ((r >> 13) & 1u);
        return (uint16_t)(sign | (r >> 13));
    }
    if (a < 0x33000001u) { /* below half the smallest subnormal (ties to even 0) */
        return sign;
    }
    /* subnormal half: value = man * 2^-24 */
    uint32_t e = a >> 23;
    uint32_t man = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e; /* 14..24 */
    uint32_t q = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) {
        q++;
    }
    return (uint16_t)(sign | q);
}

/* The loops of the two below, inline, so that the reduction kernels compile them for their
 * instruction-set level (collectives/reduce_kernels.h). */
static inline void tempo__half_to_f32_loop(tempo_dtype_t dtype, const uint16_t *src, float *dst,
                                           size_t n)
{
    if (dtype == TEMPO_BFLOAT16) {
        for (size_t i = 0; i < n; i++) {
            dst[i] = tempo__bf16_to_f32(src[i]);
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            dst[i] = tempo__f16_to_f32(src[i]);
        }
    }
}
static inline void tempo__f32_to_half_loop(tempo_dtype_t dtype, const float *src, uint16_t *dst,
                                           size_t n)
{
    if (dtype == TEMPO_BFLOAT16) {
        for (size_t i = 0; i < n; i++) {
            dst[i] = tempo__f32_to_bf16(src[i]);
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            dst[i] = tempo__f32_to_f16(src[i]);
        }
    }
}

/** Convert n 16-bit floats to fp32 and back (dtype selects fp16 or bf16). */
void tempo__half_to_f32(tempo_dtype_t dtype, const uint16_t *src, float *dst, size_t n);
void tempo__f32_to_half(tempo_dtype_t dtype, const float *src, uint16_t *dst, size_t n);

#endif /* TEMPO_CORE_DTYPE_H */
