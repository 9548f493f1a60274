/*
 * perf/verifiable.h — data whose collective results are exactly known, whatever the reduction
 * order.
 *
 * What it is: the dtype/op name tables of the perf programs (they may not call libtempo, because
 * the MPI baselines do not link it), fp16/bf16 <-> fp32 conversions (round to nearest even), and
 * the generators of input data and expected results used to count #wrong.
 *
 * Elements are handled as "bits": the raw bit pattern of one element in the low tsize bytes of a
 * uint64_t, so one code path fills and checks every dtype and the comparison is bitwise.
 *
 * Reductions. Element i of every rank is driven by a(i) = hash(seed, i) in [0,16); the value of
 * rank r is red_value(op, nranks, r, a), a small integer chosen per op so that every partial result
 * of any subset of ranks, in any order, is exactly representable in every dtype (integer types
 * wrap, and wrapping arithmetic is exact modulo 2^w whatever the order):
 *   sum   |v| <= m, m = min(127, 256/nranks): every partial |sum| <= 256, exact in bf16 (8-bit
 *         significand) and above; negative values reach unsigned types as wrapped values.
 *   prod  v in {1, -1, 2, -2}, with |v| = 2 only on ranks < 15: every partial product is
 *         +-2^k, k <= 15, exact in fp16 (max 65504) and above.
 *   min, max  v in [-8, 8].
 *   avg   v in [0, m], m = min(100, 127/nranks): the sum never wraps in int8 and is non-negative,
 *         so integer division is unambiguous; the table divides once like tempo.h specifies
 *         (fp16/bf16: sum in fp32, divide in fp32, round once to 16 bits).
 * Integer sums and products wrap as tempo.h specifies. For a backend whose integer overflow is
 * undefined (MPI: Open MPI 4.1's AVX reductions saturate 8-bit sums, open-mpi/ompi#8045), wraps = 0
 * keeps integer partial results inside the type instead: sum |v| <= 127/nranks (signed types) or
 * 0 <= v <= 255/nranks (unsigned); prod at most 6 (int8) or 7 (uint8) factors of 2 and no negative
 * factors for unsigned types.
 * Exact for up to 256 ranks (127 ranks for avg on 8-bit types, and for 8-bit sums with wraps = 0).
 * Because the value of a rank depends on i only through a(i), the expected result takes 16 values
 * per (dtype, op, nranks): a table, so checking costs one hash and one lookup per element.
 *
 * Other collectives use a per-(rank, index) pattern: a small integer in [-64, 64) from
 * hash(seed, rank, index), exact in every dtype.
 */
#ifndef TEMPO_PERF_VERIFIABLE_H
#define TEMPO_PERF_VERIFIABLE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <tempo.h>

/* ---- names ----------------------------------------------------------------------------------- */

/* Bytes per element, 0 for an invalid dtype. */
size_t perf_dtype_size(tempo_dtype_t dtype);
/* The nccl-tests name printed in the type column: int8 ... half bfloat16 float double. */
const char *perf_dtype_name(tempo_dtype_t dtype);
/* Accepts tempo's names and the nccl-tests aliases (the list of tempo_dtype_parse). 0 or -1. */
int perf_dtype_parse(const char *name, tempo_dtype_t *dtype_p);
const char *perf_op_name(tempo_op_t op);
int perf_op_parse(const char *name, tempo_op_t *op_p);

/* ---- 16-bit floats --------------------------------------------------------------------------- */

uint16_t perf_f32_to_f16(float f);   /* round to nearest even; overflow to inf; NaN stays NaN */
float perf_f16_to_f32(uint16_t h);   /* exact */
uint16_t perf_f32_to_bf16(float f);  /* round to nearest even; NaN stays NaN */
float perf_bf16_to_f32(uint16_t h);  /* exact */

/* ---- generators ------------------------------------------------------------------------------ */

/* A small integer as element bits of dtype (exact for |v| <= 2^15; integer types wrap). */
uint64_t perf_cast_bits(tempo_dtype_t dtype, int64_t v);

/* The 64-bit mixer behind every generator (splitmix64's finalizer). */
static inline uint64_t perf_mix(uint64_t x)
{
    x ^= x >> 30;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    x ^= x >> 27;
    x *= UINT64_C(0x94d049bb133111eb);
    x ^= x >> 31;
    return x;
}

/* a(i) in [0,16) for reductions. */
static inline unsigned perf_red_index(uint64_t seed, size_t i)
{
    return (unsigned)(perf_mix(seed + (uint64_t)i * UINT64_C(0x9e3779b97f4a7c15)) & 15u);
}

/* Pattern index in [0,128) for non-reduction collectives: value = index - 64. */
static inline unsigned perf_pattern_index(uint64_t seed, int rank, size_t i)
{
    uint64_t s = seed ^ ((uint64_t)(unsigned)rank * UINT64_C(0xd6e8feb86659fd93));
    return (unsigned)(perf_mix(s + (uint64_t)i * UINT64_C(0x9e3779b97f4a7c15)) & 127u);
}

/* The value rank `rank` contributes for a in [0,16) (see the top of this file). wraps == 0 keeps
 * every integer partial result inside the type (for a backend whose overflow is undefined). */
int64_t perf_red_value(tempo_dtype_t dtype, tempo_op_t op, int nranks, int rank, unsigned a,
                       int wraps);

/* input_p[a]: this rank's element bits for a; expected_p[a]: the exact result over nranks ranks. */
void perf_red_tables(tempo_dtype_t dtype, tempo_op_t op, int nranks, int rank, int wraps,
                     uint64_t input_p[16], uint64_t expected_p[16]);

/* pattern_p[k]: element bits of the value k - 64, for k in [0,128). */
void perf_pattern_table(tempo_dtype_t dtype, uint64_t pattern_p[128]);

/* ---- element access -------------------------------------------------------------------------- */

static inline void perf_store(void *buf, size_t j, size_t tsize, uint64_t bits)
{
    unsigned char *p = (unsigned char *)buf + j * tsize;
    switch (tsize) {
    case 1: { uint8_t v = (uint8_t)bits; memcpy(p, &v, 1); break; }
    case 2: { uint16_t v = (uint16_t)bits; memcpy(p, &v, 2); break; }
    case 4: { uint32_t v = (uint32_t)bits; memcpy(p, &v, 4); break; }
    default: memcpy(p, &bits, 8); break;
    }
}

static inline uint64_t perf_load(const void *buf, size_t j, size_t tsize)
{
    const unsigned char *p = (const unsigned char *)buf + j * tsize;
    switch (tsize) {
    case 1: { uint8_t v; memcpy(&v, p, 1); return v; }
    case 2: { uint16_t v; memcpy(&v, p, 2); return v; }
    case 4: { uint32_t v; memcpy(&v, p, 4); return v; }
    default: { uint64_t v; memcpy(&v, p, 8); return v; }
    }
}

#endif /* TEMPO_PERF_VERIFIABLE_H */
