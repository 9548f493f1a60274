/*
 * reduce.c — element-wise reduction kernels per dtype x op, one copy per instruction-set level,
 * chosen once.
 *
 * Integer sums and products wrap around (computed in the unsigned type, which C defines). min/max
 * are written (b < a ? b : a) so that operand order, which the algorithms keep canonical, decides
 * NaN cases the same way on every rank. The loops are simple enough for the compiler to vectorise;
 * the n-ary fold works in blocks that stay in L1.
 *
 * Levels: the library is built for the baseline of its target (SSE2 on x86-64, never
 * -march=native: it runs on other machines), and on x86-64 the same loops are compiled again for
 * AVX2 and for AVX-512 (F, BW, DQ, VL) through function attributes (reduce_kernels.h). The level is
 * chosen once, at the first reduction (the configuration is loaded by then): AVX2 where the CPU
 * has it, else the best it has, or TEMPO_REDUCE_ISA's (core/cfg.c refuses a level the CPU lacks).
 * AVX2 before AVX-512, measured: the reductions are memory-bound from a few KB up, and the
 * 512-bit kernels made the 2-rank shared-memory all-reduce 10-20 % slower from 32 KB to 8 MB than
 * the 256-bit ones on the 2-core AMD EPYC development machine (interleaved rounds, 2026-11-28;
 * slower at 8 KB and 32 MB by 8 %); TEMPO_REDUCE_ISA=avx512 chooses them. Every level gives bitwise the
 * same results: the same expressions per element in the same order, only more elements per
 * instruction (the AVX2 sum of two 4 MB float vectors runs at about 1.6 times the SSE2 one's
 * memory traffic on the development machine).
 */
#include "config.h"

#include "collectives/coll.h"
#include "core/cfg.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#if defined(__x86_64__) || defined(__i386__)
#include <emmintrin.h>
#define HAVE_STREAM 1
#endif
/* The AVX2 and AVX-512 copies need GCC's or clang's target attributes and cpu checks. */
#if defined(__x86_64__) && defined(__GNUC__)
#define TEMPO_REDUCE_X86 1
#endif

/* GCC assumes by default that floating-point operations may trap, so it will neither compute both
 * arms of NAN_LEFT's selects nor vectorize a loop with a floating-point comparison in it: the
 * float sums, products, minima and maxima then ran one element at a time (a 2 KB sum of two ranks
 * took 1.5 us with the AVX2 and SSE2 kernels against 0.7 with AVX-512's, interleaved runs). tempo
 * never enables floating-point traps, and the results are the same bits either way (the selects
 * say which value each element takes); only the exception flags, which tempo does not promise,
 * may differ. Clang assumes no traps by default. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("no-trapping-math")
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

/* Every element through core/elem.h's function of its op and type, which the CUDA kernels share
 * (its header says how NaNs come out). */
#define OP_CASES(T, S)                                    \
    switch (op) {                                          \
    case TEMPO_SUM:                                        \
    case TEMPO_AVG: LOOP3(T, tempo__sum_##S(p, q)); break; \
    case TEMPO_PROD: LOOP3(T, tempo__prod_##S(p, q)); break; \
    case TEMPO_MIN: LOOP3(T, tempo__min_##S(p, q)); break; \
    case TEMPO_MAX: LOOP3(T, tempo__max_##S(p, q)); break; \
    default: break;                                        \
    }

#define AVG_LOOP(T, S)                          \
    do {                                        \
        T *d_ = (T *)buf;                       \
        for (size_t i_ = 0; i_ < count; i_++) { \
            d_[i_] = tempo__div_##S(d_[i_], n); \
        }                                       \
    } while (0)

#define BLOCK 2048

#define KSUF generic
#ifdef __x86_64__
#define KNAME "sse2" /* the x86-64 baseline */
#else
#define KNAME "generic"
#endif
#define KATTR
#include "collectives/reduce_kernels.h"
#undef KSUF
#undef KNAME
#undef KATTR

#ifdef TEMPO_REDUCE_X86
#define KSUF avx2
#define KNAME "avx2"
#define KATTR __attribute__((target("avx2")))
#include "collectives/reduce_kernels.h"
#undef KSUF
#undef KNAME
#undef KATTR

#define KSUF avx512
#define KNAME "avx512"
#define KATTR __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,prefer-vector-width=512")))
#include "collectives/reduce_kernels.h"
#undef KSUF
#undef KNAME
#undef KATTR
#endif

/* The levels, lowest first. */
static const tempo__reduce_kernels_t *const levels[] = {
    &kernels_generic,
#ifdef TEMPO_REDUCE_X86
    &kernels_avx2,
    &kernels_avx512,
#endif
};

/* Whether this CPU runs level i (and the OS saves its registers, which __builtin_cpu_supports
 * checks too). */
static int cpu_has(size_t i)
{
#ifdef TEMPO_REDUCE_X86
    __builtin_cpu_init();
    if (levels[i] == &kernels_avx2) {
        return __builtin_cpu_supports("avx2");
    }
    if (levels[i] == &kernels_avx512) {
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    }
#endif
    return i == 0;
}

const tempo__reduce_kernels_t *tempo__reduce_kernels_level(size_t i)
{
    return i < TEMPO_ARRAY_SIZE(levels) && cpu_has(i) ? levels[i] : NULL;
}

/* The level named text ("auto": avx2 where the CPU has it, else its best), or NULL with the reason set. */
static const tempo__reduce_kernels_t *level_named(const char *text)
{
    const tempo__reduce_kernels_t *best = levels[0];
    char have[64] = "";
    size_t o = 0;
    for (size_t i = 0; i < TEMPO_ARRAY_SIZE(levels); i++) {
        if (cpu_has(i)) {
            /* auto: AVX2 where the CPU has it, before AVX-512 (see the file header) */
            if (best == levels[0] || strcmp(best->name, "avx2") != 0) {
                best = levels[i];
            }
            o += (size_t)snprintf(have + o, sizeof(have) - o, "%s%s", o ? ", " : "",
                                  levels[i]->name);
        }
    }
    if (!text[0] || strcasecmp(text, "auto") == 0) {
        return best;
    }
    for (size_t i = 0; i < TEMPO_ARRAY_SIZE(levels); i++) {
        if (strcasecmp(text, levels[i]->name) == 0) {
            if (cpu_has(i)) {
                return levels[i];
            }
            tempo__err(TEMPO_ERR_INVALID, "this CPU cannot run the %s kernels (it has %s)",
                       levels[i]->name, have);
            return NULL;
        }
    }
    char all[64] = "";
    o = 0;
    for (size_t i = 0; i < TEMPO_ARRAY_SIZE(levels); i++) {
        o += (size_t)snprintf(all + o, sizeof(all) - o, ", %s", levels[i]->name);
    }
    tempo__err(TEMPO_ERR_INVALID, "expected auto%s (this CPU has %s)", all, have);
    return NULL;
}

tempo_status_t tempo__reduce_isa_check(const char *text)
{
    return level_named(text) ? TEMPO_OK : TEMPO_ERR_INVALID;
}

static _Atomic(const tempo__reduce_kernels_t *) active;

const tempo__reduce_kernels_t *tempo__reduce_kernels(void)
{
    const tempo__reduce_kernels_t *k = atomic_load_explicit(&active, memory_order_acquire);
    if (TEMPO_UNLIKELY(!k)) {
        /* Once (racing first calls pick the same level). The table refused any level the CPU
         * lacks, so this falls back to the best only before the configuration was loaded. */
        k = level_named(tempo__cfg.reduce_isa);
        if (!k) {
            k = level_named("auto");
        }
        atomic_store_explicit(&active, k, memory_order_release);
        TEMPO_INFO(TEMPO_SUB_COLL, "reduction kernels: %s", k->name);
    }
    return k;
}

void tempo__reduce_kernels_force(const tempo__reduce_kernels_t *k)
{
    atomic_store_explicit(&active, k, memory_order_release);
}

void tempo__reduce3(void *dst, const void *a, const void *b, size_t count, tempo_dtype_t dtype,
                    tempo_op_t op)
{
    tempo__reduce_kernels()->reduce3(dst, a, b, count, dtype, op);
}

void tempo__avg_finish(void *buf, size_t count, tempo_dtype_t dtype, int n)
{
    tempo__reduce_kernels()->avg_finish(buf, count, dtype, n);
}

void tempo__reduce_n(void *dst, const void *const *src, int n, size_t count, tempo_dtype_t dtype,
                     tempo_op_t op)
{
    tempo__reduce_kernels()->reduce_n(dst, src, n, count, dtype, op);
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
