/*
 * reduce_kernels.h — the body of the reduction kernels, compiled once per instruction-set level by
 * collectives/reduce.c (which includes it with KSUF, the level's name suffix, and KATTR, its
 * function attribute: empty for the baseline, target("avx2") ...). Not a header of its own: it has
 * no include guard on purpose, and nothing else includes it.
 *
 * Every level runs the same C loops, element by element in the same order with the same
 * expressions, so the compiler may only change how many elements one instruction handles: results
 * are bitwise the same at every level (tests/unit/test_reduce.c checks it against a scalar
 * reference, NaN payloads included). Nothing here may be contracted into a fused multiply-add
 * (no expression has both a product and a sum), and no level may use -ffast-math semantics.
 */
#ifndef KSUF
#error "collectives/reduce_kernels.h is included by collectives/reduce.c only"
#endif

#define KCAT2(a, b) a##_##b
#define KCAT(a, b) KCAT2(a, b)
#define K(name) KCAT(name, KSUF)

KATTR static void K(reduce3)(void *dst, const void *a, const void *b, size_t count,
                             tempo_dtype_t dtype, tempo_op_t op)
{
    switch (dtype) {
    case TEMPO_INT8: OP_CASES(int8_t, i8); break;
    case TEMPO_UINT8: OP_CASES(uint8_t, u8); break;
    case TEMPO_INT32: OP_CASES(int32_t, i32); break;
    case TEMPO_UINT32: OP_CASES(uint32_t, u32); break;
    case TEMPO_INT64: OP_CASES(int64_t, i64); break;
    case TEMPO_UINT64: OP_CASES(uint64_t, u64); break;
    case TEMPO_FLOAT32: OP_CASES(float, f32); break;
    case TEMPO_FLOAT64: OP_CASES(double, f64); break;
    default: TEMPO_ASSERT(!"reduce3 on a 16-bit float"); break;
    }
}

KATTR static void K(avg_finish)(void *buf, size_t count, tempo_dtype_t dtype, int n)
{
    if (n == 1) {
        return;
    }
    switch (dtype) {
    case TEMPO_INT8: AVG_LOOP(int8_t, i8); break;
    case TEMPO_UINT8: AVG_LOOP(uint8_t, u8); break;
    case TEMPO_INT32: AVG_LOOP(int32_t, i32); break;
    case TEMPO_UINT32: AVG_LOOP(uint32_t, u32); break;
    case TEMPO_INT64: AVG_LOOP(int64_t, i64); break;
    case TEMPO_UINT64: AVG_LOOP(uint64_t, u64); break;
    case TEMPO_FLOAT32: AVG_LOOP(float, f32); break;
    case TEMPO_FLOAT64: AVG_LOOP(double, f64); break;
    default: TEMPO_ASSERT(!"avg_finish on a 16-bit float"); break;
    }
}

/* fp16/bf16 <-> fp32 of m elements (core/dtype.h's loops, compiled at this level). */
KATTR static void K(half_to_f32)(tempo_dtype_t dtype, const uint16_t *src, float *dst, size_t m)
{
    tempo__half_to_f32_loop(dtype, src, dst, m);
}

KATTR static void K(f32_to_half)(tempo_dtype_t dtype, const float *src, uint16_t *dst, size_t m)
{
    tempo__f32_to_half_loop(dtype, src, dst, m);
}

KATTR static void K(reduce_n)(void *dst, const void *const *src, int n, size_t count,
                              tempo_dtype_t dtype, tempo_op_t op)
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
            K(reduce3)(d, (const char *)src[0] + off * es, (const char *)src[1] + off * es, m,
                       dtype, op);
            for (int k = 2; k < n; k++) {
                K(reduce3)(d, d, (const char *)src[k] + off * es, m, dtype, op);
            }
            if (op == TEMPO_AVG) {
                K(avg_finish)(d, m, dtype, n);
            }
        }
        return;
    }
    /* fp16/bf16: accumulate a block in fp32, round once. */
    float acc[BLOCK], tmp[BLOCK];
    for (size_t off = 0; off < count; off += BLOCK) {
        size_t m = TEMPO_MIN((size_t)BLOCK, count - off);
        K(half_to_f32)(dtype, (const uint16_t *)src[0] + off, acc, m);
        for (int k = 1; k < n; k++) {
            K(half_to_f32)(dtype, (const uint16_t *)src[k] + off, tmp, m);
            K(reduce3)(acc, acc, tmp, m, TEMPO_FLOAT32, op);
        }
        if (op == TEMPO_AVG) {
            K(avg_finish)(acc, m, TEMPO_FLOAT32, n);
        }
        K(f32_to_half)(dtype, acc, (uint16_t *)dst + off, m);
    }
}

static const tempo__reduce_kernels_t K(kernels) = {
    .name = KNAME,
    .reduce3 = K(reduce3),
    .avg_finish = K(avg_finish),
    .reduce_n = K(reduce_n),
};

#undef K
#undef KCAT
#undef KCAT2
