/*
 * gpu/kernels.h — the CUDA kernels of tempo's element math (gpu/kernels.cu): thin grid-stride
 * wrappers around the functions that the host kernels use (core/elem.h, quant/qmath.h), so that
 * a device buffer reduces and quantizes to the bits the host path gives for the same data.
 * Built by nvcc when configure finds it (TEMPO_HAVE_NVCC); tests/gpu/gpu_kernels checks every
 * kernel against the host on a GPU.
 *
 * Every function enqueues on stream (a cudaStream_t; NULL: the legacy default stream) and returns
 * the cudaError_t of the launch (0: cudaSuccess); pointers are device pointers unless named host.
 * Quantizer layout: the level kinds' wire format (quant/levels.c) without its header — scales[nb]
 * (nb = ceil(count / bucket)) and the indices packed at bits, LSB first.
 */
#ifndef TEMPO_GPU_KERNELS_H
#define TEMPO_GPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <tempo.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The most operands of one tempo__gpu_reduce_n call. */
#define TEMPO__GPU_MAX_OPERANDS 8

/* The operands of a reduction kernel, passed by value (the driver-API kernel tempo_k_reduce:
 * (void *dst, tempo__gpu_operands_t src, int n, size_t count, int dtype, int op), which
 * gpu/cuda.c launches from the fatbin built into the library). */
typedef struct {
    const void *p[TEMPO__GPU_MAX_OPERANDS];
} tempo__gpu_operands_t;

/* dst[i] = src[0][i] op src[1][i] op ... op src[n-1][i] in that order (avg: the sum, divided once
 * by n), fp16/bf16 accumulated in fp32 and rounded once; n from 1 to TEMPO__GPU_MAX_OPERANDS;
 * dst may be src[0]. src is a host array of device pointers. */
int tempo__gpu_reduce_n(void *dst, const void *const *src, int n, size_t count, tempo_dtype_t dtype,
                        tempo_op_t op, void *stream);

/* fp16/bf16 <-> fp32 of count elements (dtype TEMPO_FLOAT16 or TEMPO_BFLOAT16). */
int tempo__gpu_half_to_f32(tempo_dtype_t dtype, const uint16_t *src, float *dst, size_t count,
                           void *stream);
int tempo__gpu_f32_to_half(tempo_dtype_t dtype, const float *src, uint16_t *dst, size_t count,
                           void *stream);

/* scales[b] = tempo__qscale of bucket b (one warp per bucket, in the shared order), NaN where it
 * is not finite, as the encoding writes it. */
int tempo__gpu_qscale(const float *x, size_t count, size_t bucket, int linf, int clip,
                      float *scales, void *stream);

/** The level fitters' statistics of each bucket: out[3b..3b+2] = tempo__qstats_bucket's triple
 *  for bucket b (quant/qmath.h), bit for bit; quant/quant.h's tempo__qstats_init/_add fold them
 *  on the host. */
int tempo__gpu_qstats(const float *x, size_t count, size_t bucket, int linf, double *out,
                      void *stream);
/* The packed level indices of x (count coordinates, bucket per scale) on the table lv[nl]
 * (device memory; nl <= 2^bits <= 256), rounded with the call's seed: bytes
 * ceil(count * bits / 8) of packed. */
int tempo__gpu_qencode(const float *x, size_t count, size_t bucket, const float *scales,
                       const float *lv, int nl, int bits, uint64_t seed, uint8_t *packed,
                       void *stream);

/* out[i] = tempo__qdecode(scales[i / bucket], lv, index i), added to out[i] (tempo__sum_f32) with
 * accumulate. An index >= nl decodes as level 0: the host validates a peer's message before its
 * indices reach a GPU. */
int tempo__gpu_qdecode(const uint8_t *packed, const float *scales, size_t count, size_t bucket,
                       const float *lv, int nl, int bits, float *out, int accumulate,
                       void *stream);

#ifdef __cplusplus
}
#endif

#endif /* TEMPO_GPU_KERNELS_H */
