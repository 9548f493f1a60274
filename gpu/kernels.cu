/*
 * gpu/kernels.cu — tempo's element math on CUDA devices (gpu/kernels.h says what each launch
 * does). Every kernel is a grid-stride loop around the functions that the host kernels run
 * (core/elem.h, quant/qmath.h), compiled with -fmad=false and without fast math, so that each
 * element gets the host's bits; the one structural difference is the bucket norm, which a warp
 * sums in the shared order (quant/qmath.h: lane l takes coordinates l, l + 32, ..., then the
 * pairwise fold, which is the shuffle-down tree).
 */
#include <cuda_runtime.h>

#include "core/elem.h"
#include "gpu/kernels.h"
#include "quant/qmath.h"

namespace {

constexpr int kThreads = 256;

/* Blocks for count elements handled per thread in a grid-stride loop: enough to fill the device
 * (a few waves), not one per element. */
unsigned blocks_for(size_t count)
{
    size_t b = (count + kThreads - 1) / kThreads;
    return (unsigned)(b < 1 ? 1 : b > 65535 ? 65535 : b);
}

typedef tempo__gpu_operands_t operands;

/* One op on one element type: the host kernels' functions (collectives/reduce.c). */
#define TEMPO__GPU_OPS(T, S)                                                                     \
    struct ops_##S {                                                                             \
        typedef T type;                                                                          \
        __device__ static T apply(tempo_op_t op, T p, T q)                                       \
        {                                                                                        \
            switch (op) {                                                                        \
            case TEMPO_PROD: return tempo__prod_##S(p, q);                                       \
            case TEMPO_MIN: return tempo__min_##S(p, q);                                         \
            case TEMPO_MAX: return tempo__max_##S(p, q);                                         \
            default: return tempo__sum_##S(p, q);                                                \
            }                                                                                    \
        }                                                                                        \
        __device__ static T div(T p, int n) { return tempo__div_##S(p, n); }                     \
    };
TEMPO__GPU_OPS(int8_t, i8)
TEMPO__GPU_OPS(uint8_t, u8)
TEMPO__GPU_OPS(int32_t, i32)
TEMPO__GPU_OPS(uint32_t, u32)
TEMPO__GPU_OPS(int64_t, i64)
TEMPO__GPU_OPS(uint64_t, u64)
TEMPO__GPU_OPS(float, f32)
TEMPO__GPU_OPS(double, f64)

template <class O>
__device__ void reduce_body(typename O::type *dst, const operands &src, int n, size_t count,
                            tempo_op_t op)
{
    typedef typename O::type T;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        T acc = n > 1 ? O::apply(op, ((const T *)src.p[0])[i], ((const T *)src.p[1])[i])
                      : ((const T *)src.p[0])[i];
        for (int k = 2; k < n; k++) {
            acc = O::apply(op, acc, ((const T *)src.p[k])[i]);
        }
        if (op == TEMPO_AVG && n > 1) {
            acc = O::div(acc, n);
        }
        dst[i] = acc;
    }
}

/* fp16/bf16: accumulate in fp32 through the host's conversions, round once. */
__device__ void reduce_half_body(uint16_t *dst, const operands &src, int n, size_t count,
                                 tempo_op_t op, int bf16)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        uint16_t h0 = ((const uint16_t *)src.p[0])[i];
        float acc = bf16 ? tempo__bf16_to_f32(h0) : tempo__f16_to_f32(h0);
        for (int k = 1; k < n; k++) {
            uint16_t h = ((const uint16_t *)src.p[k])[i];
            acc = ops_f32::apply(op, acc, bf16 ? tempo__bf16_to_f32(h) : tempo__f16_to_f32(h));
        }
        if (op == TEMPO_AVG && n > 1) {
            acc = tempo__div_f32(acc, n);
        }
        dst[i] = bf16 ? tempo__f32_to_bf16(acc) : tempo__f32_to_f16(acc);
    }
}

template <class O>
__global__ void k_reduce(typename O::type *dst, operands src, int n, size_t count, tempo_op_t op)
{
    reduce_body<O>(dst, src, n, count, op);
}

__global__ void k_reduce_half(uint16_t *dst, operands src, int n, size_t count, tempo_op_t op,
                              int bf16)
{
    reduce_half_body(dst, src, n, count, op, bf16);
}

template <class O>
cudaError_t launch_reduce(void *dst, const operands &src, int n, size_t count, tempo_op_t op,
                          cudaStream_t s)
{
    k_reduce<O><<<blocks_for(count), kThreads, 0, s>>>((typename O::type *)dst, src, n, count, op);
    return cudaGetLastError();
}

__global__ void k_half_to_f32(int bf16, const uint16_t *src, float *dst, size_t count)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        dst[i] = bf16 ? tempo__bf16_to_f32(src[i]) : tempo__f16_to_f32(src[i]);
    }
}

__global__ void k_f32_to_half(int bf16, const float *src, uint16_t *dst, size_t count)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        dst[i] = bf16 ? tempo__f32_to_bf16(src[i]) : tempo__f32_to_f16(src[i]);
    }
}

/* One warp per bucket: lane l sums coordinates l, l + 32, ... in increasing order, then the
 * shuffle-down tree folds lane k + w into lane k for w = 16 ... 1: tempo__qfold's order. */
__device__ float warp_fold_f32(float v)
{
    for (int w = TEMPO__QLANES / 2; w; w >>= 1) {
        v += __shfl_down_sync(0xffffffffu, v, w);
    }
    return v;
}
__device__ double warp_fold_f64(double v)
{
    for (int w = TEMPO__QLANES / 2; w; w >>= 1) {
        v += __shfl_down_sync(0xffffffffu, v, w);
    }
    return v;
}
__device__ float warp_max(float m)
{
    for (int w = TEMPO__QLANES / 2; w; w >>= 1) {
        float o = __shfl_down_sync(0xffffffffu, m, w);
        m = o > m ? o : m; /* NaNs never win, as on the host */
    }
    return m;
}

__global__ void k_qscale(const float *x, size_t count, size_t bucket, size_t nb, int linf,
                         int clip, float *scales)
{
    const int lane = threadIdx.x % 32;
    const size_t warps = (size_t)gridDim.x * (blockDim.x / 32);
    for (size_t b = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32; b < nb; b += warps) {
        const float *xb = x + b * bucket;
        size_t n = count - b * bucket < bucket ? count - b * bucket : bucket;
        float scale;
        if (linf) {
            float m = 0.0f, lim = INFINITY;
            if (clip) {
                double s = 0.0, s2 = 0.0;
                for (size_t i = lane; i < n; i += 32) {
                    double v = xb[i], sq = v * v;
                    s += v;
                    s2 += sq;
                }
                s = warp_fold_f64(s);
                s2 = warp_fold_f64(s2);
                double mean = s / (double)n, sqm = mean * mean, var = s2 / (double)n - sqm;
                lim = (float)(2.5 * sqrt(var > 0 ? var : 0));
            }
            for (size_t i = lane; i < n; i += 32) {
                float a = fabsf(xb[i]);
                m = a > m ? a : m;
            }
            m = warp_max(m);
            scale = clip && lim < m ? lim : m;
        } else {
            float s = 0.0f;
            for (size_t i = lane; i < n; i += 32) {
                float sq = xb[i] * xb[i];
                s += sq;
            }
            scale = sqrtf(warp_fold_f32(s));
        }
        if (lane == 0) {
            scales[b] = isfinite(scale) ? scale : NAN;
        }
    }
}

/* One thread per group of 8 coordinates (group g: bytes g * bits ... of the packed stream). */
__global__ void k_qencode(const float *x, size_t count, size_t bucket, const float *scales,
                          const float *lvg, int nl, int bits, uint64_t seed, uint8_t *packed)
{
    __shared__ float lv[256], iw[256];
    for (int i = threadIdx.x; i < nl; i += blockDim.x) {
        lv[i] = lvg[i];
        iw[i] = i + 1 < nl ? 1.0f / (lvg[i + 1] - lvg[i]) : 0.0f;
    }
    __syncthreads();
    size_t ngroups = (count + 7) / 8;
    for (size_t g = blockIdx.x * (size_t)blockDim.x + threadIdx.x; g < ngroups;
         g += (size_t)gridDim.x * blockDim.x) {
        uint64_t word = 0;
        int m = count - g * 8 < 8 ? (int)(count - g * 8) : 8;
        for (int h = 0; h < m; h++) {
            size_t i = g * 8 + h;
            float scale = scales[i / bucket];
            float inv = scale > 0 ? 1.0f / scale : 0.0f;
            int k = tempo__qlevel(x[i], inv, lv, iw, nl, tempo__sr_unit(seed, i));
            word |= (uint64_t)k << (h * bits);
        }
        size_t nbytes = ((size_t)m * bits + 7) / 8;
        uint8_t *o = packed + g * bits;
        for (size_t j = 0; j < nbytes; j++) {
            o[j] = (uint8_t)(word >> (8 * j));
        }
    }
}

__global__ void k_qdecode(const uint8_t *packed, const float *scales, size_t count, size_t bucket,
                          const float *lvg, int nl, int bits, float *out, int accumulate)
{
    __shared__ float lv[256];
    for (int i = threadIdx.x; i < (1 << bits); i += blockDim.x) {
        lv[i] = lvg[i < nl ? i : 0];
    }
    __syncthreads();
    size_t nbytes = (count * bits + 7) / 8;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x) {
        size_t bit = i * bits, at = bit / 8;
        unsigned w = packed[at] | (at + 1 < nbytes ? (unsigned)packed[at + 1] << 8 : 0u);
        int k = (int)((w >> (bit % 8)) & ((1u << bits) - 1u));
        float v = tempo__qdecode(scales[i / bucket], lv, k);
        out[i] = accumulate ? tempo__sum_f32(out[i], v) : v;
    }
}

} // namespace

/* The reduction for the library's driver-API launches (gpu/cuda.c, from the fatbin built into
 * libtempo): tempo__gpu_reduce_n's work, one kernel for every dtype and op. */
extern "C" __global__ void tempo_k_reduce(void *dst, tempo__gpu_operands_t src, int n,
                                          size_t count, int dtype, int op)
{
    tempo_op_t o = (tempo_op_t)op;
    switch (dtype) {
    case TEMPO_INT8: reduce_body<ops_i8>((int8_t *)dst, src, n, count, o); break;
    case TEMPO_UINT8: reduce_body<ops_u8>((uint8_t *)dst, src, n, count, o); break;
    case TEMPO_INT32: reduce_body<ops_i32>((int32_t *)dst, src, n, count, o); break;
    case TEMPO_UINT32: reduce_body<ops_u32>((uint32_t *)dst, src, n, count, o); break;
    case TEMPO_INT64: reduce_body<ops_i64>((int64_t *)dst, src, n, count, o); break;
    case TEMPO_UINT64: reduce_body<ops_u64>((uint64_t *)dst, src, n, count, o); break;
    case TEMPO_FLOAT32: reduce_body<ops_f32>((float *)dst, src, n, count, o); break;
    case TEMPO_FLOAT64: reduce_body<ops_f64>((double *)dst, src, n, count, o); break;
    default:
        reduce_half_body((uint16_t *)dst, src, n, count, o, dtype == TEMPO_BFLOAT16);
        break;
    }
}

extern "C" int tempo__gpu_reduce_n(void *dst, const void *const *src, int n, size_t count,
                                   tempo_dtype_t dtype, tempo_op_t op, void *stream)
{
    if (n < 1 || n > TEMPO__GPU_MAX_OPERANDS || (unsigned)dtype >= TEMPO_DTYPE_COUNT ||
        (unsigned)op >= TEMPO_OP_COUNT) {
        return cudaErrorInvalidValue;
    }
    if (count == 0) {
        return cudaSuccess;
    }
    operands o = {};
    for (int k = 0; k < n; k++) {
        o.p[k] = src[k];
    }
    cudaStream_t s = (cudaStream_t)stream;
    switch (dtype) {
    case TEMPO_INT8: return launch_reduce<ops_i8>(dst, o, n, count, op, s);
    case TEMPO_UINT8: return launch_reduce<ops_u8>(dst, o, n, count, op, s);
    case TEMPO_INT32: return launch_reduce<ops_i32>(dst, o, n, count, op, s);
    case TEMPO_UINT32: return launch_reduce<ops_u32>(dst, o, n, count, op, s);
    case TEMPO_INT64: return launch_reduce<ops_i64>(dst, o, n, count, op, s);
    case TEMPO_UINT64: return launch_reduce<ops_u64>(dst, o, n, count, op, s);
    case TEMPO_FLOAT32: return launch_reduce<ops_f32>(dst, o, n, count, op, s);
    case TEMPO_FLOAT64: return launch_reduce<ops_f64>(dst, o, n, count, op, s);
    default:
        k_reduce_half<<<blocks_for(count), kThreads, 0, s>>>((uint16_t *)dst, o, n, count, op,
                                                             dtype == TEMPO_BFLOAT16);
        return cudaGetLastError();
    }
}

extern "C" int tempo__gpu_half_to_f32(tempo_dtype_t dtype, const uint16_t *src, float *dst,
                                      size_t count, void *stream)
{
    if (count) {
        k_half_to_f32<<<blocks_for(count), kThreads, 0, (cudaStream_t)stream>>>(
            dtype == TEMPO_BFLOAT16, src, dst, count);
    }
    return cudaGetLastError();
}

extern "C" int tempo__gpu_f32_to_half(tempo_dtype_t dtype, const float *src, uint16_t *dst,
                                      size_t count, void *stream)
{
    if (count) {
        k_f32_to_half<<<blocks_for(count), kThreads, 0, (cudaStream_t)stream>>>(
            dtype == TEMPO_BFLOAT16, src, dst, count);
    }
    return cudaGetLastError();
}

extern "C" int tempo__gpu_qscale(const float *x, size_t count, size_t bucket, int linf, int clip,
                                 float *scales, void *stream)
{
    if (bucket == 0) {
        return cudaErrorInvalidValue;
    }
    size_t nb = (count + bucket - 1) / bucket;
    if (nb) {
        size_t warps_per_block = kThreads / 32, blocks = (nb + warps_per_block - 1) / warps_per_block;
        k_qscale<<<(unsigned)(blocks > 65535 ? 65535 : blocks), kThreads, 0,
                   (cudaStream_t)stream>>>(x, count, bucket, nb, linf, clip, scales);
    }
    return cudaGetLastError();
}

/* One warp per bucket: the level fitters' statistics, tempo__qstats_bucket's bits. */
__global__ void k_qstats(const float *x, size_t count, size_t bucket, size_t nb, int linf,
                         double *out)
{
    const int lane = threadIdx.x % 32;
    const size_t warps = (size_t)gridDim.x * (blockDim.x / 32);
    for (size_t b = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32; b < nb; b += warps) {
        const float *xb = x + b * bucket;
        size_t n = count - b * bucket < bucket ? count - b * bucket : bucket;
        double s = 0.0, s2 = 0.0;
        float m = 0.0f;
        for (size_t i = lane; i < n; i += 32) {
            double v = xb[i], sq = v * v;
            float a = fabsf(xb[i]);
            s += v;
            s2 += sq;
            m = a > m ? a : m;
        }
        s = warp_fold_f64(s);
        s2 = warp_fold_f64(s2);
        m = warp_max(m);
        if (lane == 0) {
            tempo__qstats_finish(s, s2, (double)m, n, linf, out + 3 * b);
        }
    }
}

extern "C" int tempo__gpu_qstats(const float *x, size_t count, size_t bucket, int linf,
                                 double *out, void *stream)
{
    if (bucket == 0) {
        return cudaErrorInvalidValue;
    }
    size_t nb = (count + bucket - 1) / bucket;
    if (nb) {
        size_t warps_per_block = kThreads / 32, blocks = (nb + warps_per_block - 1) / warps_per_block;
        k_qstats<<<(unsigned)(blocks > 65535 ? 65535 : blocks), kThreads, 0,
                   (cudaStream_t)stream>>>(x, count, bucket, nb, linf, out);
    }
    return cudaGetLastError();
}

extern "C" int tempo__gpu_qencode(const float *x, size_t count, size_t bucket, const float *scales,
                                  const float *lv, int nl, int bits, uint64_t seed, uint8_t *packed,
                                  void *stream)
{
    if (bucket == 0 || bits < 1 || bits > 8 || nl < 2 || nl > (1 << bits)) {
        return cudaErrorInvalidValue;
    }
    if (count) {
        k_qencode<<<blocks_for((count + 7) / 8), kThreads, 0, (cudaStream_t)stream>>>(
            x, count, bucket, scales, lv, nl, bits, seed, packed);
    }
    return cudaGetLastError();
}

extern "C" int tempo__gpu_qdecode(const uint8_t *packed, const float *scales, size_t count,
                                  size_t bucket, const float *lv, int nl, int bits, float *out,
                                  int accumulate, void *stream)
{
    if (bucket == 0 || bits < 1 || bits > 8 || nl < 1 || nl > (1 << bits)) {
        return cudaErrorInvalidValue;
    }
    if (count) {
        k_qdecode<<<blocks_for(count), kThreads, 0, (cudaStream_t)stream>>>(
            packed, scales, count, bucket, lv, nl, bits, out, accumulate);
    }
    return cudaGetLastError();
}
