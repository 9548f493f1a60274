/*
 * elem.h — the element math that the host and the GPU share: fp16/bf16 <-> fp32 conversions and
 * one function per reduction op and element type. gcc compiles these as static inline C for the
 * host kernels (collectives/reduce.c, its per-level copies, quant/); nvcc compiles the same text
 * as __host__ __device__ functions for the CUDA kernels (gpu/), so both produce the same bits,
 * which tests/unit/test_elem.c checks on the host and tests/gpu/gpu_kernels on a GPU.
 *
 * What "the same bits" takes:
 *   - no contraction of a product and a sum into a fused multiply-add (no expression here has both;
 *     the CUDA kernels are compiled with -fmad=false all the same);
 *   - IEEE round-to-nearest arithmetic with subnormals (the host never sets flush-to-zero; nvcc is
 *     not given -ftz or --use_fast_math);
 *   - NaNs written out: a NaN operand of a sum, product or average gives the left operand's NaN
 *     quieted, else the right one's (what x86's arithmetic gives for p + q, and what the library
 *     has always computed), and an invalid operation of two numbers (inf - inf, 0 * inf) gives
 *     x86's default NaN (sign set, quiet bit only). x86 computes exactly that with p + q itself;
 *     NVIDIA GPUs return one canonical NaN (0x7fffffff) for any NaN result, so the device
 *     versions say it with bit operations (TEMPO__ON_GPU below).
 *   - min/max by comparison only (q < p ? q : p), which moves bits and computes none.
 */
#ifndef TEMPO_CORE_ELEM_H
#define TEMPO_CORE_ELEM_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define TEMPO_HD static __host__ __device__ __forceinline__
#elif defined(__GNUC__)
/* always_inline: reduce.c compiles its kernels with other options (no-trapping-math, AVX2 and
 * AVX-512 targets), and GCC does not inline a plain inline function across options that differ
 * (it called these one element at a time, unvectorized). */
#define TEMPO_HD static inline __attribute__((always_inline))
#else
#define TEMPO_HD static inline
#endif
/* Device code of a CUDA compilation (its host pass compiles the host versions). */
#ifdef __CUDA_ARCH__
#define TEMPO__ON_GPU 1
#else
#define TEMPO__ON_GPU 0
#endif

TEMPO_HD uint32_t tempo__f32_bits(float f)
{
#if TEMPO__ON_GPU
    return __float_as_uint(f);
#else
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
#endif
}
TEMPO_HD float tempo__bits_f32(uint32_t u)
{
#if TEMPO__ON_GPU
    return __uint_as_float(u);
#else
    float f;
    memcpy(&f, &u, 4);
    return f;
#endif
}
TEMPO_HD uint64_t tempo__f64_bits(double f)
{
#if TEMPO__ON_GPU
    return (uint64_t)__double_as_longlong(f);
#else
    uint64_t u;
    memcpy(&u, &f, 8);
    return u;
#endif
}
TEMPO_HD double tempo__bits_f64(uint64_t u)
{
#if TEMPO__ON_GPU
    return __longlong_as_double((long long)u);
#else
    double f;
    memcpy(&f, &u, 8);
    return f;
#endif
}

/* ---------------------------------------------------------------------------------------------- */
/* 16-bit floats (they accumulate in fp32 and round once, to nearest even)                        */
/* ---------------------------------------------------------------------------------------------- */

TEMPO_HD float tempo__bf16_to_f32(uint16_t h)
{
    return tempo__bits_f32((uint32_t)h << 16);
}

TEMPO_HD uint16_t tempo__f32_to_bf16(float f)
{
    uint32_t u = tempo__f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN, keep sign */
    }
    u += 0x7fffu + ((u >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(u >> 16);
}

TEMPO_HD float tempo__f16_to_f32(uint16_t h)
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
    return tempo__bits_f32(u);
}

TEMPO_HD uint16_t tempo__f32_to_f16(float f)
{
    uint32_t u = tempo__f32_bits(f);
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

/* ---------------------------------------------------------------------------------------------- */
/* Reduction ops                                                                                  */
/* ---------------------------------------------------------------------------------------------- */

/* p with its quiet bit set: what x86 gives for p + p when p is a NaN. */
TEMPO_HD float tempo__quiet_f32(float p)
{
#if TEMPO__ON_GPU
    return tempo__bits_f32(tempo__f32_bits(p) | 0x00400000u);
#else
    return p + p;
#endif
}
TEMPO_HD double tempo__quiet_f64(double p)
{
#if TEMPO__ON_GPU
    return tempo__bits_f64(tempo__f64_bits(p) | 0x0008000000000000ull);
#else
    return p + p;
#endif
}
/* r, or x86's default NaN where r is a NaN that no operand was (GPUs give 0x7fffffff). */
TEMPO_HD float tempo__x86nan_f32(float r)
{
#if TEMPO__ON_GPU
    return r != r ? tempo__bits_f32(0xffc00000u) : r;
#else
    return r;
#endif
}
TEMPO_HD double tempo__x86nan_f64(double r)
{
#if TEMPO__ON_GPU
    return r != r ? tempo__bits_f64(0xfff8000000000000ull) : r;
#else
    return r;
#endif
}

/* The NaN rule of sums and products (above): written out, because a compiler may swap the
 * operands of a commutative vector instruction, and the NaN it returns is its first operand's. */
#define TEMPO__FLT_OPS(T, S)                                                                     \
    TEMPO_HD T tempo__nan_left_##S(T p, T q, T r)                                                \
    {                                                                                            \
        T pp = tempo__quiet_##S(p), qq = tempo__quiet_##S(q);                                    \
        r = q != q ? qq : tempo__x86nan_##S(r);                                                  \
        return p != p ? pp : r;                                                                  \
    }                                                                                            \
    TEMPO_HD T tempo__sum_##S(T p, T q) { return tempo__nan_left_##S(p, q, p + q); }             \
    TEMPO_HD T tempo__prod_##S(T p, T q) { return tempo__nan_left_##S(p, q, p * q); }            \
    TEMPO_HD T tempo__min_##S(T p, T q) { return q < p ? q : p; }                                \
    TEMPO_HD T tempo__max_##S(T p, T q) { return q > p ? q : p; }                                \
    /* the average's one division of the sum by the rank count */                                \
    TEMPO_HD T tempo__div_##S(T p, int n)                                                        \
    {                                                                                            \
        T r = p / (T)n;                                                                          \
        return TEMPO__ON_GPU && p != p ? tempo__quiet_##S(p) : tempo__x86nan_##S(r);             \
    }
TEMPO__FLT_OPS(float, f32)
TEMPO__FLT_OPS(double, f64)

/* Integers: sums and products wrap (computed in the unsigned type, which C defines); the average
 * divides once, truncating toward zero. */
#define TEMPO__INT_OPS(T, UT, S)                                                                 \
    TEMPO_HD T tempo__sum_##S(T p, T q) { return (T)((UT)p + (UT)q); }                           \
    TEMPO_HD T tempo__prod_##S(T p, T q) { return (T)((UT)p * (UT)q); }                          \
    TEMPO_HD T tempo__min_##S(T p, T q) { return q < p ? q : p; }                                \
    TEMPO_HD T tempo__max_##S(T p, T q) { return q > p ? q : p; }                                \
    TEMPO_HD T tempo__div_##S(T p, int n) { return (T)(p / (T)n); }
TEMPO__INT_OPS(int8_t, uint8_t, i8)
TEMPO__INT_OPS(uint8_t, uint8_t, u8)
TEMPO__INT_OPS(int32_t, uint32_t, i32)
TEMPO__INT_OPS(uint32_t, uint32_t, u32)
TEMPO__INT_OPS(int64_t, uint64_t, i64)
TEMPO__INT_OPS(uint64_t, uint64_t, u64)

#endif /* TEMPO_CORE_ELEM_H */
