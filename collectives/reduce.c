/*
 * reduce.c — element-wise reduction kernels per dtype x op.
 *
 * Integer sums and products wrap around (computed in the unsigned type, which C defines). min/max
 * are written (b < a ? b : a) so that operand order, which the algorithms keep canonical, decides
 * NaN cases the same way on every rank. Loops are simple enough for the compiler to vectorise; the
 * n-ary fold works in blocks that stay in L1.
 */
#include "config.h"

#include "collectives/coll.h"

#if defined(__x86_64__) || defined(__i386__)
#include <emmintrin.h>
#define HAVE_STREAM 1
#endif

#define LOOP3(T, EXPR)                                  \
    do {                                                \
        T *d_ = (T *)dst;                               \
        const T *x_ = (const T *)a, *y_ = (const T *)b; \
        for (size_t i_ = 0; i_ < count; i_++) {         \
            T p = x_[i_], q = y_[i_];                   \
            d_[i_] = (EXPR);                            \
        }                                               \
    } while (0)

/* The formatter reads "p * q" in these macros as a pointer declaration. */
/* clang-format off */
#define INT_CASES(T, UT)                                  \
    switch (op) {                                         \
    case TEMPO_SUM:                                       \
    case TEMPO_AVG: LOOP3(T, (T)((UT)p + (UT)q)); break;  \
    case TEMPO_PROD: LOOP3(T, (T)((UT)p * (UT)q)); break; \
    case TEMPO_MIN: LOOP3(T, q < p ? q : p); break;       \
    case TEMPO_MAX: LOOP3(T, q > p ? q : p); break;       \
    default: break;                                       \
    }

#define FLT_CASES(T)                                \
    switch (op) {                                   \
    case TEMPO_SUM:                                 \
    case TEMPO_AVG: LOOP3(T, p + q); break;         \
    case TEMPO_PROD: LOOP3(T, p * q); break;         \
    case TEMPO_MIN: LOOP3(T, q < p ? q : p); break; \
    case TEMPO_MAX: LOOP3(T, q > p ? q : p); break; \
    default: break;                                 \
    }
/* clang-format on */

void tempo__reduce3(void *dst, const void *a, const void *b, size_t count, tempo_dtype_t dtype,
                    tempo_op_t op)
{
    switch (dtype) {
    case TEMPO_INT8: INT_CASES(int8_t, uint8_t); break;
    case TEMPO_UINT8: INT_CASES(uint8_t, uint8_t); break;
    case TEMPO_INT32: INT_CASES(int32_t, uint32_t); break;
    case TEMPO_UINT32: INT_CASES(uint32_t, uint32_t); break;
    case TEMPO_INT64: INT_CASES(int64_t, uint64_t); break;
    case TEMPO_UINT64: INT_CASES(uint64_t, uint64_t); break;
    case TEMPO_FLOAT32: FLT_CASES(float); break;
    case TEMPO_FLOAT64: FLT_CASES(double); break;
    default: TEMPO_ASSERT(!"reduce3 on a 16-bit float"); break;
    }
}

#define AVG_LOOP(T)                             \
    do {                                        \
        T *d_ = (T *)buf;                       \
        for (size_t i_ = 0; i_ < count; i_++) { \
            d_[i_] = (T)(d_[i_] / (T)n);        \
        }                                       \
    } while (0)

void tempo__avg_finish(void *buf, size_t count, tempo_dtype_t dtype, int n)
{
    if (n == 1) {
        return;
    }
    switch (dtype) {
    case TEMPO_INT8: AVG_LOOP(int8_t); break;
    case TEMPO_UINT8: AVG_LOOP(uint8_t); break;
    case TEMPO_INT32: AVG_LOOP(int32_t); break;
    case TEMPO_UINT32: AVG_LOOP(uint32_t); break;
    case TEMPO_INT64: AVG_LOOP(int64_t); break;
    case TEMPO_UINT64: AVG_LOOP(uint64_t); break;
    case TEMPO_FLOAT32: AVG_LOOP(float); break;
    case TEMPO_FLOAT64: AVG_LOOP(double); break;
    default: TEMPO_ASSERT(!"avg_finish on a 16-bit float"); break;
    }
}

#define BLOCK 2048

void tempo__reduce_n(void *dst, const void *const *src, int n, size_t count, tempo_dtype_t dtype,
                     tempo_op_t op)
{
    if (!tempo__dtype_is_half(dtype)) {
        size_t es = tempo_dtype_size(dtype);
        if (n == 1) {
            if (dst != src[0]) {
                memmove(dst, src[0], count * es);
            }
            return;
        }
        for (size_t off = 0; off < count; off += BLOCK) {
            size_t m = TEMPO_MIN((size_t)BLOCK, count - off);
            char *d = (char *)dst + off * es;
            tempo__reduce3(d, (const char *)src[0] + off * es, (const char *)src[1] + off * es, m,
                           dtype, op);
            for (int k = 2; k < n; k++) {
                tempo__reduce3(d, d, (const char *)src[k] + off * es, m, dtype, op);
            }
            if (op == TEMPO_AVG) {
                tempo__avg_finish(d, m, dtype, n);
            }
        }
        return;
    }
    /* fp16/bf16: accumulate a block in fp32, round once. */
    float acc[BLOCK], tmp[BLOCK];
    for (size_t off = 0; off < count; off += BLOCK) {
        size_t m = TEMPO_MIN((size_t)BLOCK, count - off);
        tempo__half_to_f32(dtype, (const uint16_t *)src[0] + off, acc, m);
        for (int k = 1; k < n; k++) {
            tempo__half_to_f32(dtype, (const uint16_t *)src[k] + off, tmp, m);
            tempo__reduce3(acc, acc, tmp, m, TEMPO_FLOAT32, op);
        }
        if (op == TEMPO_AVG) {
            tempo__avg_finish(acc, m, TEMPO_FLOAT32, n);
        }
        tempo__f32_to_half(dtype, acc, (uint16_t *)dst + off, m);
    }
}

void tempo__copy_stream(void *dst, const void *src, size_t bytes)
{
#ifdef HAVE_STREAM
    char *d = dst;
    const char *s = src;
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;
    if (bytes < 256) {
        memcpy(d, s, bytes);
        return;
    }
    memcpy(d, s, head);
    d += head;
    s += head;
    bytes -= head;
    size_t n = bytes / 64;
    for (size_t i = 0; i < n; i++, d += 64, s += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)s);
        __m128i b = _mm_loadu_si128((const __m128i *)(s + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(s + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(s + 48));
        _mm_stream_si128((__m128i *)d, a);
        _mm_stream_si128((__m128i *)(d + 16), b);
        _mm_stream_si128((__m128i *)(d + 32), c);
        _mm_stream_si128((__m128i *)(d + 48), e);
    }
    memcpy(d, s, bytes % 64);
    _mm_sfence();
#else
    memcpy(dst, src, bytes);
#endif
}
