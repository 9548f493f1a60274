/*
 * dtype.h — element types: sizes, names, and loops of the fp16/bf16 <-> fp32 conversions (the
 * conversions themselves are in core/elem.h, which the CUDA kernels share) used wherever 16-bit
 * floats are reduced (they accumulate in fp32 and round once, to nearest even).
 */
#ifndef TEMPO_CORE_DTYPE_H
#define TEMPO_CORE_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <tempo.h>

#include "core/elem.h" /* the fp16/bf16 <-> fp32 conversions, shared with the GPU */

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
