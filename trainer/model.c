/*
 * model.c — GPT-2 forward and backward on the CPU in fp32 (see model.h for the model and its
 * contract). The layers follow llm.c's train_gpt2.c: one forward and one hand-written backward
 * per layer type, every backward accumulating (+=) into its parameter gradients.
 *
 * Not here: the optimizer (optim.c), data, communication. Tensor parallelism (Megatron) is here
 * only as shapes and calls: a TP model holds its shards (build_table cuts each tensor by its
 * GPT_TP_* kind), runs the same kernels on its heads, MLP columns and vocabulary slice, and calls
 * the caller's gpt_tp_t all-reduces at the f/g points (tp_reduce, row_parallel_forward,
 * crossentropy_tp, the embedding). At tp.size 1 every path is the single-rank one, bit for bit.
 * Activations stay sized for the full widths (a TP rank uses a prefix of qkv, atty, fch, logits).
 * Sequence parallelism (tp.sp) keeps the LayerNorm and residual regions as the rank's block of
 * B·T / tp.size token rows (sized so in carve_acts), and swaps TP's all-reduces for the all-gather
 * and reduce-scatter of sp_gather / sp_scatter around the same kernels (model.h says where).
 * Activation recomputation (m->recompute) only changes what carve_acts keeps per block (the rest
 * shares one buffer set) and adds a recomputation at the top of a block's backward: the attention
 * softmax (selective) or the whole block_forward (full), the same kernels on the same inputs.
 *
 * Kernels
 *   - matmuls go through one blocked GEMM, C(M, N) += A(M, K) · B(K, N), whose micro-kernel keeps
 *     an MR x 16 tile of C in vector registers and walks k in order, broadcasting A(i, k) against a
 *     row of B. The weight of a forward matmul is transposed into a scratch buffer first (B must be
 *     k-major), and so is dout for the weight gradient (A must be k-contiguous). Three builds of
 *     the kernel (AVX-512, AVX2+FMA, generic vectors) are picked once per model by CPU features.
 *   - attention runs one (batch, head) per task, its four products (Q Kᵀ, P V, and in backward
 *     dO Vᵀ, Pᵀ dO, dS K, dSᵀ Q) on the same GEMM kernel over causal row blocks.
 *   - elementwise and per-row kernels (LayerNorm, GELU, softmax) are leaf functions compiled for
 *     x86-64-v4/v3/baseline (target_clones) and called from OpenMP loops.
 *   - exp is a short polynomial written here (exp_poly, within 2 ulps) so that softmax and GELU
 *     vectorize; glibc's expf and tanhf do not without -ffast-math.
 *
 * Determinism: every output element (and every gradient element) is produced by one thread, in
 * an order fixed by the shapes: GEMM tiles, rows, heads and channel blocks are independent of the
 * number of threads, and the only reductions across rows (bias and LayerNorm weight gradients,
 * embedding gradients, the mean loss) run sequentially in row order. So results are bitwise equal
 * for any OMP_NUM_THREADS on one machine (test_model checks 1 vs 2 vs 3 threads). The AVX-512 and
 * AVX2 GEMMs give the same bits too (both fuse multiply-adds in the same k order); the generic one
 * and the per-ISA builds of the row kernels may differ in the last bits.
 */
#include "config.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/model.h"

#ifdef _OPENMP
#define OMP(x) _Pragma(#x)
#else
#define OMP(x)
#endif

/* Leaf kernels are built for AVX-512, AVX2+FMA and the baseline ISA, picked at load time (not under
 * ThreadSanitizer, whose instrumented ifunc resolvers crash the loader: see quant/levels.c). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11 &&           \
    !defined(__SANITIZE_THREAD__)
#define GPT_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#define GPT_X86_DISPATCH 1
#else
#define GPT_CLONES
#define GPT_X86_DISPATCH 0
#endif

#define GPT_LN_EPS 1e-5f
#define GPT_INIT_STD 0.02

/* ------------------------------------------------------------------------------------------ */
/* errors                                                                                      */

static _Thread_local char gpt_err[256];

const char *gpt_last_error(void)
{
    return gpt_err;
}

int gpt_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(gpt_err, sizeof gpt_err, fmt, ap);
    va_end(ap);
    return -1;
}

/* ------------------------------------------------------------------------------------------ */
/* random numbers                                                                              */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in (0, 1]: 53 random bits, never 0 (Box–Muller takes its log). */
static double uniform_open0(uint64_t *s)
{
    return ((splitmix64(s) >> 11) + 1) * (1.0 / 9007199254740992.0);
}

uint32_t gpt_random_u32(uint64_t *state)
{
    /* xorshift* (https://en.wikipedia.org/wiki/Xorshift#xorshift*), as llm.c's random_u32 */
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return (uint32_t)((*state * 0x2545F4914F6CDD1DULL) >> 32);
}

float gpt_random_f32(uint64_t *state)
{
    return (gpt_random_u32(state) >> 8) / 16777216.0f;
}

/* ------------------------------------------------------------------------------------------ */
/* parameter table                                                                             */

/* The tensors of one block, in buffer order. */
enum {
    P_LN1W,
    P_LN1B,
    P_QKVW,
    P_QKVB,
    P_ATTPROJW,
    P_ATTPROJB,
    P_LN2W,
    P_LN2B,
    P_FCW,
    P_FCB,
    P_FCPROJW,
    P_FCPROJB,
    P_PER_BLOCK
};

enum { INIT_NORMAL, INIT_RESID, INIT_ZERO, INIT_ONE };

static const struct {
    const char *name; /* after "h.%d." */
    int ndim;
    int rows, cols; /* in units of C (0 means 1) */
    int init;
    int split; /* GPT_TP_*: column-parallel qkv and fc by rows, row-parallel projections by columns */
} block_tensors[P_PER_BLOCK] = {
    {"ln1.w", 1, 1, 0, INIT_ONE, GPT_TP_REPLICATED},
    {"ln1.b", 1, 1, 0, INIT_ZERO, GPT_TP_REPLICATED},
    {"attn.qkv.w", 2, 3, 1, INIT_NORMAL, GPT_TP_QKV},
    {"attn.qkv.b", 1, 3, 0, INIT_ZERO, GPT_TP_QKV},
    {"attn.proj.w", 2, 1, 1, INIT_RESID, GPT_TP_COLS},
    {"attn.proj.b", 1, 1, 0, INIT_ZERO, GPT_TP_REPLICATED},
    {"ln2.w", 1, 1, 0, INIT_ONE, GPT_TP_REPLICATED},
    {"ln2.b", 1, 1, 0, INIT_ZERO, GPT_TP_REPLICATED},
    {"mlp.fc.w", 2, 4, 1, INIT_NORMAL, GPT_TP_ROWS},
    {"mlp.fc.b", 1, 4, 0, INIT_ZERO, GPT_TP_ROWS},
    {"mlp.proj.w", 2, 1, 4, INIT_RESID, GPT_TP_COLS},
    {"mlp.proj.b", 1, 1, 0, INIT_ZERO, GPT_TP_REPLICATED},
};

/* Pointers to one block's tensors in params or grads. */
typedef struct {
    float *ln1w, *ln1b;         /* (C), (C) */
    float *qkvw, *qkvb;         /* (3C, C), (3C): rows [0, C) q, [C, 2C) k, [2C, 3C) v */
    float *attprojw, *attprojb; /* (C, C), (C) */
    float *ln2w, *ln2b;         /* (C), (C) */
    float *fcw, *fcb;           /* (4C, C), (4C) */
    float *fcprojw, *fcprojb;   /* (C, 4C), (C) */
} block_params_t;

/* ------------------------------------------------------------------------------------------ */
/* activations                                                                                 */

/* One block's saved activations; each is a prefix of a slot sized for (alloc_B, alloc_T). */
typedef struct {
    float *ln1;      /* (B, T, C) */
    float *ln1_mean; /* (B, T) */
    float *ln1_rstd; /* (B, T) */
    float *qkv;      /* (B, T, 3C) */
    float *atty;     /* (B, T, C) attention output, heads side by side, before the projection */
    float *att;     /* (B, NH, T, T) probabilities P, 0 above the diagonal; backward leaves dSᵀ */
    float *attproj; /* (B, T, C) */
    float *res2;    /* (B, T, C) residual stream after attention */
    float *ln2;     /* (B, T, C) */
    float *ln2_mean; /* (B, T) */
    float *ln2_rstd; /* (B, T) */
    float *fch;      /* (B, T, 4C) */
    float *fch_gelu; /* (B, T, 4C) */
    float *fcproj;   /* (B, T, C) */
    float *res3;     /* (B, T, C) residual stream after the MLP: the block's output */
} block_acts_t;

typedef struct {
    int M, N, K;
    const float *a; /* A(i, k) = a[i * a_rs + k] */
    size_t a_rs;
    const float *b; /* B(k, j) = b[k * ldb + j] */
    size_t ldb;
    float *c; /* C(i, j) = c[i * ldc + j] */
    size_t ldc;
} gemm_t;

typedef void (*gemm_block_fn)(const gemm_t *g, int i0, int i1, int j0, int j1);

struct gpt_work {
    uint8_t *init;            /* (num_tensors) INIT_* */
    float *init_full;         /* tensor parallel: one whole tensor while initializing, or NULL */
    float **ggrad;            /* (L + 2) where backward writes group g (gpt_set_group_grads) */
    float **gparam;           /* (L + 2) where forward and backward read group g's parameters
                               * (gpt_set_group_params; ZeRO 3's gathered buffers) */
    gemm_block_fn gemm_block; /* the GEMM build for this CPU */
    const char *gemm_name;

    int alloc_B, alloc_T; /* 0 until gpt_alloc_acts */
    float *mem;           /* every buffer below */
    size_t mem_n;         /* floats of mem (gpt_act_floats) */
    float *encoded;       /* (B, T, C) the block-0 input */
    block_acts_t *blocks; /* (L) */
    float *lnf;           /* (B, T, C) */
    float *lnf_mean;      /* (B, T) */
    float *lnf_rstd;      /* (B, T) */
    float *logits;        /* (B, T, V) */
    float *probs;         /* (B, T, V) softmax of logits; with targets only */
    float *losses;        /* (B, T) per-position cross-entropy */
    /* backward: one block at a time */
    float *dres;    /* (B, T, C) d loss / d residual stream at the current point */
    float *dln;     /* (B, T, C) d of a LayerNorm output (ln1, ln2 or lnf) */
    float *dqkv;    /* (B, T, 3C) */
    float *datty;   /* (B, T, C) */
    float *dfch;    /* (B, T, 4C) d fch_gelu, then in place d fch */
    float *dlogits; /* (B, T, V) */
    float *gath;    /* (B, T, C) sequence parallel only: an all-gathered LayerNorm output or
                       output gradient, or a row-parallel matmul's partial output */
    float *scratch; /* transposed matmul operands, or attention's K/V packs (B, NH, hs, T) and,
                       in backward, (B, NH, T, T) per-head buffers */
    size_t scratch_n;
    int *inputs;  /* (B, T) */
    int *targets; /* (B, T) */

    int fwd_done; /* forward progress: -2 none, -1 embed, l after layer l, L after the head */
    int have_targets;
    int bwd_next; /* the next backward call allowed: L head, l layer, -1 embed, -2 done */
};

/* ------------------------------------------------------------------------------------------ */
/* vector math that GCC can vectorize                                                           */

/*
 * e^x to ~1 ulp for x in [-87, 88] (clamped outside: e^-87 ~ 1.6e-38 stands in for 0 in a
 * softmax). x = n ln2 + r with |r| <= ln2/2, e^r by its degree-7 Taylor polynomial (truncation
 * error < 6e-9 relative), 2^n built in the exponent bits.
 */
static inline float exp_poly(float x)
{
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    const float shifter = 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
    float n = (x * 1.44269504088896341f + shifter) - shifter;
    float r = x - n * 0.693145751953125f; /* ln2 split in two for an exact n * ln2_hi */
    r = r - n * 1.428606820309417e-06f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    union {
        int32_t i;
        float f;
    } s = {.i = ((int32_t)n + 127) << 23};
    return p * s.f;
}

#define GELU_SCALE 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_CUBIC 0.044715f

/* ------------------------------------------------------------------------------------------ */
/* GEMM: C(M, N) += A(M, K) · B(K, N)                                                          */

#define GEMM_MB 48 /* rows of C per task: a multiple of every MR below */
#define GEMM_NB 64 /* columns of C per task: a multiple of 16 */

typedef float v16f __attribute__((vector_size(64)));
typedef float v8f __attribute__((vector_size(32)));
typedef float v4f __attribute__((vector_size(16)));

/*
 * One build of the GEMM block kernel: C tiles of MR rows x 16 columns held in MR * (16 / VW)
 * vectors of type VT (VW floats). k runs 0..K-1 in order for every element, so the result does
 * not depend on the tiling; the last N % 16 columns take a scalar loop with the same order.
 */
#define GEMM_BUILD(SUFFIX, TARGET, VT, VW, MR)                                              \
    TARGET static void gemm_block_##SUFFIX(const gemm_t *g, int i0, int i1, int j0, int j1) \
    {                                                                                       \
        enum { NV = 16 / (VW) };                                                            \
        const size_t ars = g->a_rs, ldb = g->ldb, ldc = g->ldc;                             \
        const int K = g->K;                                                                 \
        int j = j0;                                                                         \
        for (; j + 16 <= j1; j += 16) {                                                     \
            for (int i = i0; i < i1; i += (MR)) {                                           \
                int mr = i1 - i < (MR) ? i1 - i : (MR);                                     \
                VT acc[MR][NV];                                                             \
                memset(acc, 0, sizeof acc);                                                 \
                const float *a = g->a + (size_t)i * ars, *b = g->b + j;                     \
                if (mr == (MR)) {                                                           \
                    for (int k = 0; k < K; k++, b += ldb) {                                 \
                        VT bv[NV];                                                          \
                        memcpy(bv, b, sizeof bv);                                           \
                        for (int r = 0; r < (MR); r++) {                                    \
                            for (int v = 0; v < NV; v++) {                                  \
                                acc[r][v] += a[r * ars + k] * bv[v];                        \
                            }                                                               \
                        }                                                                   \
                    }                                                                       \
                } else {                                                                    \
                    for (int k = 0; k < K; k++, b += ldb) {                                 \
                        VT bv[NV];                                                          \
                        memcpy(bv, b, sizeof bv);                                           \
                        for (int r = 0; r < mr; r++) {                                      \
                            for (int v = 0; v < NV; v++) {                                  \
                                acc[r][v] += a[r * ars + k] * bv[v];                        \
                            }                                                               \
                        }                                                                   \
                    }                                                                       \
                }                                                                           \
                for (int r = 0; r < mr; r++) {                                              \
                    float *c = g->c + (size_t)(i + r) * ldc + j;                            \
                    VT cv[NV];                                                              \
                    memcpy(cv, c, sizeof cv);                                               \
                    for (int v = 0; v < NV; v++) {                                          \
                        cv[v] += acc[r][v];                                                 \
                    }                                                                       \
                    memcpy(c, cv, sizeof cv);                                               \
                }                                                                           \
            }                                                                               \
        }                                                                                   \
        for (; j < j1; j++) {                                                               \
            for (int i = i0; i < i1; i++) {                                                 \
                const float *a = g->a + (size_t)i * ars;                                    \
                float s = 0.0f;                                                             \
                for (int k = 0; k < K; k++) {                                               \
                    s += a[k] * g->b[(size_t)k * ldb + j];                                  \
                }                                                                           \
                g->c[(size_t)i * ldc + j] += s;                                             \
            }                                                                               \
        }                                                                                   \
    }

GEMM_BUILD(generic, , v4f, 4, 3)
#if GPT_X86_DISPATCH
GEMM_BUILD(avx2, __attribute__((target("avx2,fma"))), v8f, 8, 6)
GEMM_BUILD(avx512, __attribute__((target("avx512f,avx512vl,avx2,fma"))), v16f, 16, 8)
#endif

static void gemm_select(gpt_work_t *w)
{
    w->gemm_block = gemm_block_generic;
    w->gemm_name = "generic";
#if GPT_X86_DISPATCH
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl")) {
        w->gemm_block = gemm_block_avx512;
        w->gemm_name = "avx512";
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        w->gemm_block = gemm_block_avx2;
        w->gemm_name = "avx2";
    }
#endif
}

const char *gpt_gemm_name(const gpt_model_t *m)
{
    return m->work->gemm_name;
}

int gpt_set_gemm(gpt_model_t *m, const char *name)
{
    gpt_work_t *w = m->work;
    if (strcmp(name, "generic") == 0) {
        w->gemm_block = gemm_block_generic;
        w->gemm_name = "generic";
        return 0;
    }
#if GPT_X86_DISPATCH
    if (strcmp(name, "avx2") == 0 && __builtin_cpu_supports("avx2") &&
        __builtin_cpu_supports("fma")) {
        w->gemm_block = gemm_block_avx2;
        w->gemm_name = "avx2";
        return 0;
    }
    if (strcmp(name, "avx512") == 0 && __builtin_cpu_supports("avx512f") &&
        __builtin_cpu_supports("avx512vl")) {
        w->gemm_block = gemm_block_avx512;
        w->gemm_name = "avx512";
        return 0;
    }
#endif
    return gpt_fail("gpt: GEMM build \"%s\" is unknown or not supported by this CPU", name);
}

/* Tasks of GEMM_MB x GEMM_NB, each done by one thread: the partition depends on M and N only. */
static void gemm(const gpt_work_t *w, const gemm_t *g)
{
    const int mt = (g->M + GEMM_MB - 1) / GEMM_MB, nt = (g->N + GEMM_NB - 1) / GEMM_NB;
    OMP(omp parallel for collapse(2) schedule(static))
    for (int jt = 0; jt < nt; jt++) {
        for (int it = 0; it < mt; it++) {
            int i1 = (it + 1) * GEMM_MB, j1 = (jt + 1) * GEMM_NB;
            w->gemm_block(g, it * GEMM_MB, i1 < g->M ? i1 : g->M, jt * GEMM_NB,
                          j1 < g->N ? j1 : g->N);
        }
    }
}

/*
 * dst(c, r) = src(r, c) for source rows [r0, r1) and columns [0, cols); row strides lds and ldd.
 * Strips of 8 source rows, written as runs of 8 contiguous floats: a square tile with
 * power-of-two strides would map all its lines onto a few cache sets.
 */
static void transpose_rows(float *dst, size_t ldd, const float *src, size_t lds, size_t r0,
                           size_t r1, size_t cols)
{
    for (size_t rs = r0; rs < r1; rs += 8) {
        const size_t re = rs + 8 < r1 ? rs + 8 : r1;
        for (size_t c = 0; c < cols; c++) {
            for (size_t r = rs; r < re; r++) {
                dst[c * ldd + r] = src[r * lds + c];
            }
        }
    }
}

/* dst (cols, rows) = src (rows, cols)ᵀ, strips of 8 rows in parallel. */
static void transpose(float *dst, const float *src, size_t rows, size_t cols)
{
    const long ns = (long)((rows + 7) / 8);
    OMP(omp parallel for schedule(static))
    for (long st = 0; st < ns; st++) {
        size_t r0 = (size_t)st * 8;
        transpose_rows(dst, rows, src, cols, r0, r0 + 8 < rows ? r0 + 8 : rows, cols);
    }
}

/* C(M, N) += A(M, K) · B(K, N) on the calling thread (inside a parallel task). */
static void gemm_serial(const gpt_work_t *w, int M, int N, int K, const float *a, size_t a_rs,
                        const float *b, size_t ldb, float *c, size_t ldc)
{
    if (M > 0 && N > 0 && K > 0) {
        gemm_t g = {M, N, K, a, a_rs, b, ldb, c, ldc};
        w->gemm_block(&g, 0, M, 0, N);
    }
}

/* Zeroes rows [0, rows) x columns [0, cols) of a matrix with row stride ld. */
static void zero_rows(float *x, size_t ld, size_t rows, size_t cols)
{
    for (size_t r = 0; r < rows; r++) {
        memset(x + r * ld, 0, cols * sizeof(float));
    }
}

/* ------------------------------------------------------------------------------------------ */
/* layers, forward and backward                                                                */

/* out = inp · weightᵀ + bias; inp (BT, C), weight (OC, C), bias (OC) or NULL, out (BT, OC). */
static void matmul_forward(gpt_work_t *w, float *out, const float *inp, const float *weight,
                           const float *bias, int BT, int C, int OC)
{
    float *wt = w->scratch; /* (C, OC) */
    transpose(wt, weight, (size_t)OC, (size_t)C);
    OMP(omp parallel for schedule(static))
    for (int bt = 0; bt < BT; bt++) {
        float *o = out + (size_t)bt * OC;
        if (bias) {
            memcpy(o, bias, (size_t)OC * sizeof(float));
        } else {
            memset(o, 0, (size_t)OC * sizeof(float));
        }
    }
    gemm_t g = {BT, OC, C, inp, (size_t)C, wt, (size_t)OC, out, (size_t)OC};
    gemm(w, &g);
}

/*
 * dinp (BT, C) += dout · weight; dweight (OC, C) += doutᵀ · inp; dbias (OC) += Σ_bt dout.
 * dinp may be NULL (nothing to propagate into).
 */
static void matmul_backward(gpt_work_t *w, float *dinp, float *dweight, float *dbias,
                            const float *dout, const float *inp, const float *weight, int BT, int C,
                            int OC)
{
    if (dinp) {
        gemm_t g = {BT, C, OC, dout, (size_t)OC, weight, (size_t)C, dinp, (size_t)C};
        gemm(w, &g);
    }
    float *doutt = w->scratch; /* (OC, BT) */
    transpose(doutt, dout, (size_t)BT, (size_t)OC);
    gemm_t g = {OC, C, BT, doutt, (size_t)BT, inp, (size_t)C, dweight, (size_t)C};
    gemm(w, &g);
    if (dbias) {
        /* blocks of 64 columns, each summed over all rows in order by one thread */
        const int nb = (OC + 63) / 64;
        OMP(omp parallel for schedule(static))
        for (int ob = 0; ob < nb; ob++) {
            int o0 = ob * 64, n = OC - o0 < 64 ? OC - o0 : 64;
            float part[64] = {0};
            for (int bt = 0; bt < BT; bt++) {
                const float *d = dout + (size_t)bt * OC + o0;
                for (int o = 0; o < n; o++) {
                    part[o] += d[o];
                }
            }
            for (int o = 0; o < n; o++) {
                dbias[o0 + o] += part[o];
            }
        }
    }
}

/* LayerNorm of rows [r0, r1): out = (x - mean) * rstd * weight + bias; caches mean, rstd. */
GPT_CLONES static void layernorm_rows(float *out, float *mean, float *rstd, const float *inp,
                                      const float *weight, const float *bias, int r0, int r1, int C)
{
    for (int r = r0; r < r1; r++) {
        const float *x = inp + (size_t)r * C;
        float s = 0.0f;
        OMP(omp simd reduction(+ : s))
        for (int i = 0; i < C; i++) {
            s += x[i];
        }
        const float m = s / C;
        float v = 0.0f;
        OMP(omp simd reduction(+ : v))
        for (int i = 0; i < C; i++) {
            float d = x[i] - m;
            v += d * d;
        }
        const float rs = 1.0f / sqrtf(v / C + GPT_LN_EPS);
        float *o = out + (size_t)r * C;
        for (int i = 0; i < C; i++) {
            o[i] = (x[i] - m) * rs * weight[i] + bias[i];
        }
        mean[r] = m;
        rstd[r] = rs;
    }
}

#define ROWS_PER_TASK 16

static void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                              const float *weight, const float *bias, int BT, int C)
{
    const int nt = (BT + ROWS_PER_TASK - 1) / ROWS_PER_TASK;
    OMP(omp parallel for schedule(static))
    for (int t = 0; t < nt; t++) {
        int r1 = (t + 1) * ROWS_PER_TASK;
        layernorm_rows(out, mean, rstd, inp, weight, bias, t * ROWS_PER_TASK, r1 < BT ? r1 : BT, C);
    }
}

/* dinp rows [r0, r1) += the LayerNorm input gradient (llm.c's layernorm_backward). */
GPT_CLONES static void layernorm_dinp_rows(float *dinp, const float *dout, const float *inp,
                                           const float *weight, const float *mean,
                                           const float *rstd, int r0, int r1, int C)
{
    for (int r = r0; r < r1; r++) {
        const float *x = inp + (size_t)r * C, *d = dout + (size_t)r * C;
        const float m = mean[r], rs = rstd[r];
        float dnorm_mean = 0.0f, dnorm_norm_mean = 0.0f;
        OMP(omp simd reduction(+ : dnorm_mean, dnorm_norm_mean))
        for (int i = 0; i < C; i++) {
            float norm = (x[i] - m) * rs;
            float dnorm = weight[i] * d[i];
            dnorm_mean += dnorm;
            dnorm_norm_mean += dnorm * norm;
        }
        dnorm_mean /= C;
        dnorm_norm_mean /= C;
        float *di = dinp + (size_t)r * C;
        for (int i = 0; i < C; i++) {
            float norm = (x[i] - m) * rs;
            float dnorm = weight[i] * d[i];
            di[i] += (dnorm - dnorm_mean - norm * dnorm_norm_mean) * rs;
        }
    }
}

/* dweight, dbias channels [c0, c1) += Σ over all rows, in row order. */
GPT_CLONES static void layernorm_dparam_cols(float *dweight, float *dbias, const float *dout,
                                             const float *inp, const float *mean, const float *rstd,
                                             int BT, int C, int c0, int c1)
{
    for (int r = 0; r < BT; r++) {
        const float *x = inp + (size_t)r * C, *d = dout + (size_t)r * C;
        const float m = mean[r], rs = rstd[r];
        for (int i = c0; i < c1; i++) {
            dweight[i] += (x[i] - m) * rs * d[i];
            dbias[i] += d[i];
        }
    }
}

static void layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                               const float *inp, const float *weight, const float *mean,
                               const float *rstd, int BT, int C)
{
    const int nt = (BT + ROWS_PER_TASK - 1) / ROWS_PER_TASK, nc = (C + 31) / 32;
    OMP(omp parallel)
    {
        OMP(omp for schedule(static) nowait)
        for (int t = 0; t < nt; t++) {
            int r1 = (t + 1) * ROWS_PER_TASK;
            layernorm_dinp_rows(dinp, dout, inp, weight, mean, rstd, t * ROWS_PER_TASK,
                                r1 < BT ? r1 : BT, C);
        }
        OMP(omp for schedule(static))
        for (int cb = 0; cb < nc; cb++) {
            int c1 = (cb + 1) * 32;
            layernorm_dparam_cols(dweight, dbias, dout, inp, mean, rstd, BT, C, cb * 32,
                                  c1 < C ? c1 : C);
        }
    }
}

#define ELEMS_PER_TASK 4096

/*
 * GELU, tanh form: gelu(x) = 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x³), evaluated as
 * x σ(2u) with σ(z) = 1 / (1 + e^-z) (the same function, since 1 + tanh(u) = 2 σ(2u), without the
 * cancellation of 1 + tanh(u) for x << 0). gelu'(x) = σ + 2 x σ (1 - σ) sqrt(2/pi) (1 + 3 0.044715
 * x²), with 1 - σ = e^-2u σ.
 */
GPT_CLONES static void gelu_chunk(float *out, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
        out[i] = x / (1.0f + exp_poly(-2.0f * u));
    }
}

/* d (in place): d fch_gelu -> d fch. */
GPT_CLONES static void gelu_backward_chunk(float *d, const float *inp, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float x = inp[i];
        float u = GELU_SCALE * (x + GELU_CUBIC * x * x * x);
        float e = exp_poly(-2.0f * u);
        float sg = 1.0f / (1.0f + e);
        float local =
            sg + 2.0f * x * sg * (e * sg) * GELU_SCALE * (1.0f + 3.0f * GELU_CUBIC * x * x);
        d[i] *= local;
    }
}

/* f over [0, n) in ELEMS_PER_TASK pieces, one task each (elementwise: thread-count independent). */
static void elementwise(void (*f)(float *, const float *, size_t), float *out, const float *inp,
                        size_t n)
{
    const long nt = (long)((n + ELEMS_PER_TASK - 1) / ELEMS_PER_TASK);
    OMP(omp parallel for schedule(static))
    for (long t = 0; t < nt; t++) {
        size_t i0 = (size_t)t * ELEMS_PER_TASK;
        f(out + i0, inp + i0, n - i0 < ELEMS_PER_TASK ? n - i0 : ELEMS_PER_TASK);
    }
}

static void gelu_forward(float *out, const float *inp, size_t n)
{
    elementwise(gelu_chunk, out, inp, n);
}

static void gelu_backward(float *d, const float *inp, size_t n)
{
    elementwise(gelu_backward_chunk, d, inp, n);
}

static void residual_forward(float *out, const float *a, const float *b, size_t n)
{
    OMP(omp parallel for simd schedule(static))
    for (size_t i = 0; i < n; i++) {
        out[i] = a[i] + b[i];
    }
}

/*
 * Attention, one (b, h) per task, as GEMMs on the calling thread. Queries come in blocks of ATT_RB
 * rows; rows [i0, i1) see only keys < i1, so each block's GEMMs stop there (causality halves the
 * work). P is stored with zeros above the diagonal, so the products that run past a row's last
 * key add exact zeros. Head h's q, k, v are columns [h hs, (h + 1) hs) of qkv's three C-wide
 * parts, rows strided by 3C; the scale 1/sqrt(hs) is applied inside the softmax.
 */
#define ATT_RB 64

/* P = causal softmax of scale * S, in place over a head's (T, T) scores; 0 for t2 > t. */
GPT_CLONES static void softmax_causal(float *att, int T, float scale)
{
    for (int t = 0; t < T; t++) {
        float *row = att + (size_t)t * T;
        float maxv = -INFINITY;
        for (int t2 = 0; t2 <= t; t2++) {
            maxv = row[t2] > maxv ? row[t2] : maxv;
        }
        float sum = 0.0f;
        OMP(omp simd reduction(+ : sum))
        for (int t2 = 0; t2 <= t; t2++) {
            float e = exp_poly((row[t2] - maxv) * scale);
            row[t2] = e;
            sum += e;
        }
        const float inv = 1.0f / sum;
        for (int t2 = 0; t2 <= t; t2++) {
            row[t2] *= inv;
        }
        for (int t2 = t + 1; t2 < T; t2++) {
            row[t2] = 0.0f;
        }
    }
}

/* dS = P ∘ (dP - Σ_t2 P ∘ dP) * scale, in place over dP (ds), for t2 <= t; 0 above. */
GPT_CLONES static void softmax_causal_backward(float *ds, const float *att, int T, float scale)
{
    for (int t = 0; t < T; t++) {
        const float *p = att + (size_t)t * T;
        float *d = ds + (size_t)t * T;
        float pd = 0.0f;
        OMP(omp simd reduction(+ : pd))
        for (int t2 = 0; t2 <= t; t2++) {
            pd += p[t2] * d[t2];
        }
        for (int t2 = 0; t2 <= t; t2++) {
            d[t2] = p[t2] * (d[t2] - pd) * scale;
        }
        for (int t2 = t + 1; t2 < T; t2++) {
            d[t2] = 0.0f;
        }
    }
}

/*
 * atty (T, C) columns of head h = P V with P = softmax(Q Kᵀ / sqrt(hs)) causal; att (T, T) keeps
 * P. qkv (T, 3C) of one sequence; kt (hs, T) scratch for K transposed. atty NULL computes P only
 * (selective recomputation before the backward: the same bits as the forward's P).
 */
static void attention_head_forward(const gpt_work_t *w, float *atty, float *att, const float *qkv,
                                   float *kt, int T, int C, int NH, int h)
{
    const int hs = C / NH;
    const size_t C3 = 3 * (size_t)C;
    const float *q = qkv + h * hs, *k = qkv + C + h * hs, *v = qkv + 2 * C + h * hs;
    float *out = atty ? atty + h * hs : NULL;
    transpose_rows(kt, (size_t)T, k, C3, 0, (size_t)T, (size_t)hs);
    for (int i0 = 0; i0 < T; i0 += ATT_RB) {
        const int i1 = i0 + ATT_RB < T ? i0 + ATT_RB : T;
        zero_rows(att + (size_t)i0 * T, (size_t)T, (size_t)(i1 - i0), (size_t)i1);
        gemm_serial(w, i1 - i0, i1, hs, q + i0 * C3, C3, kt, (size_t)T, att + (size_t)i0 * T,
                    (size_t)T);
    }
    softmax_causal(att, T, 1.0f / sqrtf((float)hs));
    if (!atty) {
        return;
    }
    zero_rows(out, (size_t)C, (size_t)T, (size_t)hs);
    for (int i0 = 0; i0 < T; i0 += ATT_RB) {
        const int i1 = i0 + ATT_RB < T ? i0 + ATT_RB : T;
        gemm_serial(w, i1 - i0, hs, i1, att + (size_t)i0 * T, (size_t)T, v, C3,
                    out + (size_t)i0 * C, (size_t)C);
    }
}

/*
 * Backward of one (b, h): dqkv (T, 3C) += dQ, dK, dV of head h, from datty (T, C) and P in att
 * (T, T), which this overwrites (it holds dSᵀ afterwards). With dP = dO Vᵀ and
 * dS = P ∘ (dP - rowsum(P ∘ dP)) / sqrt(hs): dV = Pᵀ dO, dQ = dS K, dK = dSᵀ Q.
 * buf (T, T) and vt (hs, T) are scratch.
 */
static void attention_head_backward(const gpt_work_t *w, float *dqkv, const float *datty,
                                    float *att, const float *qkv, float *buf, float *vt, int T,
                                    int C, int NH, int h)
{
    const int hs = C / NH;
    const size_t C3 = 3 * (size_t)C, Tz = (size_t)T;
    const float *q = qkv + h * hs, *k = qkv + C + h * hs, *v = qkv + 2 * C + h * hs;
    const float *dout = datty + h * hs;
    float *dq = dqkv + h * hs, *dk = dqkv + C + h * hs, *dv = dqkv + 2 * C + h * hs;

    /* dV = Pᵀ dO: row t2 sums over queries t >= t2 (Pᵀ is 0 below t2) */
    transpose_rows(buf, Tz, att, Tz, 0, Tz, Tz);
    for (int i0 = 0; i0 < T; i0 += ATT_RB) {
        const int i1 = i0 + ATT_RB < T ? i0 + ATT_RB : T;
        gemm_serial(w, i1 - i0, hs, T - i0, buf + (size_t)i0 * T + i0, Tz, dout + (size_t)i0 * C,
                    (size_t)C, dv + i0 * C3, C3);
    }
    /* dP = dO Vᵀ (keys < i1 per block), then dS in place */
    transpose_rows(vt, Tz, v, C3, 0, Tz, (size_t)hs);
    for (int i0 = 0; i0 < T; i0 += ATT_RB) {
        const int i1 = i0 + ATT_RB < T ? i0 + ATT_RB : T;
        zero_rows(buf + (size_t)i0 * T, Tz, (size_t)(i1 - i0), (size_t)i1);
        gemm_serial(w, i1 - i0, i1, hs, dout + (size_t)i0 * C, (size_t)C, vt, Tz,
                    buf + (size_t)i0 * T, Tz);
    }
    softmax_causal_backward(buf, att, T, 1.0f / sqrtf((float)hs));
    /* dQ = dS K */
    for (int i0 = 0; i0 < T; i0 += ATT_RB) {
        const int i1 = i0 + ATT_RB < T ? i0 + ATT_RB : T;
        gemm_serial(w, i1 - i0, hs, i1, buf + (size_t)i0 * T, Tz, k, C3, dq + i0 * C3, C3);
    }
    /* dK = dSᵀ Q, with dSᵀ in att (P is no longer needed) */
    transpose_rows(att, Tz, buf, Tz, 0, Tz, Tz);
    for (int i0 = 0; i0 < T; i0 += ATT_RB) {
        const int i1 = i0 + ATT_RB < T ? i0 + ATT_RB : T;
        gemm_serial(w, i1 - i0, hs, T - i0, att + (size_t)i0 * T + i0, Tz, q + i0 * C3, C3,
                    dk + i0 * C3, C3);
    }
}

/* Per-head tasks: each (b, h) writes only its own columns of atty / dqkv and its own scratch. */
static void attention_forward(gpt_work_t *w, float *atty, float *att, const float *qkv, int B,
                              int T, int C, int NH)
{
    const int hs = C / NH;
    OMP(omp parallel for collapse(2) schedule(static))
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const size_t task = (size_t)b * NH + h;
            attention_head_forward(w, atty ? atty + (size_t)b * T * C : NULL, att + task * T * T,
                                   qkv + (size_t)b * T * 3 * C, w->scratch + task * hs * T, T, C,
                                   NH, h);
        }
    }
}

static void attention_backward(gpt_work_t *w, float *dqkv, const float *datty, float *att,
                               const float *qkv, int B, int T, int C, int NH)
{
    const int hs = C / NH;
    float *bufs = w->scratch + (size_t)B * T * C; /* (B, NH, T, T) */
    OMP(omp parallel for collapse(2) schedule(static))
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            const size_t task = (size_t)b * NH + h;
            attention_head_backward(w, dqkv + (size_t)b * T * 3 * C, datty + (size_t)b * T * C,
                                    att + task * T * T, qkv + (size_t)b * T * 3 * C,
                                    bufs + task * T * T, w->scratch + task * hs * T, T, C, NH, h);
        }
    }
}

/*
 * Rows [r0, r1) of the loss: probs = softmax(logits), loss = logsumexp(logits) - logit[target]
 * (more accurate than -log(prob) when the target's probability underflows).
 */
GPT_CLONES static void crossentropy_rows(float *probs, float *losses, const float *logits,
                                         const int *targets, int r0, int r1, int V)
{
    for (int r = r0; r < r1; r++) {
        const float *l = logits + (size_t)r * V;
        float *p = probs + (size_t)r * V;
        float maxv = -INFINITY;
        for (int i = 0; i < V; i++) {
            maxv = l[i] > maxv ? l[i] : maxv;
        }
        float sum = 0.0f;
        OMP(omp simd reduction(+ : sum))
        for (int i = 0; i < V; i++) {
            float e = exp_poly(l[i] - maxv);
            p[i] = e;
            sum += e;
        }
        const float inv = 1.0f / sum;
        for (int i = 0; i < V; i++) {
            p[i] *= inv;
        }
        losses[r] = logf(sum) + maxv - l[targets[r]];
    }
}

/* dlogits rows = (probs - onehot(target)) * scale, over the V columns of vocabulary entries
 * [v0, v0 + V) (tensor parallel: a slice; the target may be outside it). */
GPT_CLONES static void crossentropy_backward_rows(float *dlogits, const float *probs,
                                                  const int *targets, float scale, int r0, int r1,
                                                  int V, int v0)
{
    for (int r = r0; r < r1; r++) {
        const float *p = probs + (size_t)r * V;
        float *d = dlogits + (size_t)r * V;
        for (int i = 0; i < V; i++) {
            d[i] = p[i] * scale;
        }
        const int k = targets[r] - v0;
        if (k >= 0 && k < V) {
            d[k] = (p[k] - 1.0f) * scale;
        }
    }
}

/*
 * Vocabulary-parallel cross-entropy (Megatron): logits (BT, Vl) hold this rank's slice [v0,
 * v0 + Vl); the row maxima are all-reduced (max), then the sums of exponentials and the target
 * logits (0 on the ranks that do not own the target) in one sum; probs gets the rank's slice of
 * the softmax and losses every row's loss. The full logits never exist on one rank.
 */
static int tp_reduce(const gpt_model_t *m, float *buf, size_t n, int max);

static int crossentropy_tp(gpt_model_t *m, int BT, int Vl)
{
    gpt_work_t *w = m->work;
    const int v0 = m->tp.rank * Vl;
    float *mx = w->scratch, *st = w->scratch + BT; /* (BT) maxima; (2, BT) sums, target logits */
    OMP(omp parallel for schedule(static))
    for (int r = 0; r < BT; r++) {
        const float *l = w->logits + (size_t)r * Vl;
        float v = -INFINITY;
        for (int i = 0; i < Vl; i++) {
            v = l[i] > v ? l[i] : v;
        }
        mx[r] = v;
    }
    if (tp_reduce(m, mx, (size_t)BT, 1) != 0) {
        return -1;
    }
    OMP(omp parallel for schedule(static))
    for (int r = 0; r < BT; r++) {
        const float *l = w->logits + (size_t)r * Vl;
        float *p = w->probs + (size_t)r * Vl, sum = 0.0f;
        for (int i = 0; i < Vl; i++) {
            p[i] = exp_poly(l[i] - mx[r]);
            sum += p[i];
        }
        const int k = w->targets[r] - v0;
        st[r] = sum;
        st[BT + r] = k >= 0 && k < Vl ? l[k] : 0.0f;
    }
    if (tp_reduce(m, st, 2 * (size_t)BT, 0) != 0) {
        return -1;
    }
    OMP(omp parallel for schedule(static))
    for (int r = 0; r < BT; r++) {
        float *p = w->probs + (size_t)r * Vl;
        const float inv = 1.0f / st[r];
        for (int i = 0; i < Vl; i++) {
            p[i] *= inv;
        }
        w->losses[r] = logf(st[r]) + mx[r] - st[BT + r];
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* tensor parallelism: the caller's collectives, and the row-parallel matmul                    */

/* In-place sum (max) of buf over the tensor-parallel ranks; a no-op without them. */
static int tp_reduce(const gpt_model_t *m, float *buf, size_t n, int max)
{
    if (m->tp.size == 1) {
        return 0;
    }
    /* a failing callback has said why with gpt_fail (model.h) */
    return (max ? m->tp.allreduce_max : m->tp.allreduce_sum)(m->tp.ctx, buf, n) != 0 ? -1 : 0;
}

/* Sequence parallelism is on (gpt_create_tp allows it only with tp.size > 1). */
static int sp_on(const gpt_model_t *m)
{
    return m->tp.sp;
}

/* Rows of the LayerNorm and residual regions on this rank: its block of the BT token rows. */
static int seq_rows(const gpt_model_t *m, int BT)
{
    return sp_on(m) ? BT / m->tp.size : BT;
}

/* The rank's sequence shard (n floats per rank) all-gathered into full (rank blocks in order). */
static int sp_gather(const gpt_model_t *m, const float *shard, float *full, size_t n)
{
    return m->tp.allgather(m->tp.ctx, shard, full, n) != 0 ? -1 : 0;
}

/* full (tp.size * n floats, partial on every rank) summed over the ranks; block rank -> shard. */
static int sp_scatter(const gpt_model_t *m, const float *full, float *shard, size_t n)
{
    return m->tp.reduce_scatter(m->tp.ctx, full, shard, n) != 0 ? -1 : 0;
}

/*
 * The input of a column-parallel matmul from the LayerNorm output ln (rows (BT or its shard), C):
 * ln itself, or with sequence parallelism ln's shards all-gathered into w->gath. NULL on failure.
 */
static const float *col_parallel_input(gpt_model_t *m, const float *ln, int BT, int C)
{
    if (!sp_on(m)) {
        return ln;
    }
    return sp_gather(m, ln, m->work->gath, (size_t)seq_rows(m, BT) * C) ? NULL : m->work->gath;
}

/*
 * After a column-parallel matmul's backward left this rank's part of its input gradient in
 * w->dln (BT, C): Megatron's f backward (all-reduce in place), or with sequence parallelism a
 * reduce-scatter into the rank's rows (in w->gath). The gradient the LayerNorm backward reads, or
 * NULL on failure.
 */
static const float *col_parallel_dinp(gpt_model_t *m, int BT, int C)
{
    gpt_work_t *w = m->work;
    if (sp_on(m)) {
        return sp_scatter(m, w->dln, w->gath, (size_t)seq_rows(m, BT) * C) ? NULL : w->gath;
    }
    return tp_reduce(m, w->dln, (size_t)BT * C, 0) ? NULL : w->dln;
}

/*
 * The output gradient of a row-parallel matmul from dres (the residual stream's gradient): the
 * same full tensor on every rank under TP; under SP the ranks' row blocks, all-gathered into
 * w->gath (the backward of the forward's reduce-scatter). NULL on failure.
 */
static const float *row_parallel_dout(gpt_model_t *m, int BT, int C)
{
    return col_parallel_input(m, m->work->dres, BT, C);
}

/*
 * LayerNorm backward over this rank's rows; with sequence parallelism the weight and bias
 * gradients of the rank's rows are summed over the ranks first (all-reduce of a zeroed (2, C)
 * partial in scratch), so every rank adds the same bits to dweight and dbias.
 */
static int ln_backward(gpt_model_t *m, float *dinp, float *dweight, float *dbias,
                       const float *dout, const float *inp, const float *weight,
                       const float *mean, const float *rstd, int rows, int C)
{
    if (!sp_on(m)) {
        layernorm_backward(dinp, dweight, dbias, dout, inp, weight, mean, rstd, rows, C);
        return 0;
    }
    float *part = m->work->scratch; /* (2, C) */
    memset(part, 0, 2 * (size_t)C * sizeof(float));
    layernorm_backward(dinp, part, part + C, dout, inp, weight, mean, rstd, rows, C);
    if (tp_reduce(m, part, 2 * (size_t)C, 0) != 0) {
        return -1;
    }
    for (int i = 0; i < C; i++) {
        dweight[i] += part[i];
        dbias[i] += part[C + i];
    }
    return 0;
}

/*
 * A row-parallel matmul and Megatron's g operator: out (BT, OC) = Σ_ranks inp_r · weight_rᵀ + bias,
 * inp_r (BT, K) and weight_r (OC, K) this rank's column slice; the bias (replicated) is added once,
 * after the all-reduce. Backward needs no communication (dout is the same on every rank). With
 * sequence parallelism the partial product goes to w->gath and is reduce-scattered into out (the
 * rank's rows), which gets the bias; backward all-gathers dout (row_parallel_dout).
 */
static int row_parallel_forward(gpt_model_t *m, float *out, const float *inp, const float *weight,
                                const float *bias, int BT, int K, int OC)
{
    if (m->tp.size == 1) {
        matmul_forward(m->work, out, inp, weight, bias, BT, K, OC);
        return 0;
    }
    const int rows = seq_rows(m, BT);
    float *part = sp_on(m) ? m->work->gath : out;
    matmul_forward(m->work, part, inp, weight, NULL, BT, K, OC);
    if (sp_on(m) ? sp_scatter(m, part, out, (size_t)rows * OC)
                 : tp_reduce(m, out, (size_t)BT * OC, 0) != 0) {
        return -1;
    }
    OMP(omp parallel for schedule(static))
    for (int bt = 0; bt < rows; bt++) {
        float *o = out + (size_t)bt * OC;
        for (int i = 0; i < OC; i++) {
            o[i] += bias[i];
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* construction                                                                                */

int gpt_config_check(const gpt_config_t *cfg)
{
    if (!cfg) {
        return gpt_fail("gpt: no configuration");
    }
    if (cfg->max_seq_len < 1 || cfg->vocab_size < 1 || cfg->n_layer < 1 || cfg->n_head < 1 ||
        cfg->channels < 1) {
        return gpt_fail("gpt: every size must be >= 1 (max_seq_len %d, vocab_size %d, n_layer %d, "
                        "n_head %d, channels %d)",
                        cfg->max_seq_len, cfg->vocab_size, cfg->n_layer, cfg->n_head,
                        cfg->channels);
    }
    if (cfg->channels % cfg->n_head != 0) {
        return gpt_fail("gpt: channels (%d) must be a multiple of n_head (%d)", cfg->channels,
                        cfg->n_head);
    }
    /* keep every (rows, cols) product and every offset well inside int / size_t */
    if (cfg->channels > (1 << 16) || cfg->vocab_size > (1 << 24) || cfg->max_seq_len > (1 << 20) ||
        cfg->n_layer > (1 << 12)) {
        return gpt_fail("gpt: configuration too large (channels %d, vocab_size %d, max_seq_len %d, "
                        "n_layer %d)",
                        cfg->channels, cfg->vocab_size, cfg->max_seq_len, cfg->n_layer);
    }
    return 0;
}

size_t gpt_num_params(const gpt_config_t *cfg)
{
    if (gpt_config_check(cfg) != 0) {
        return 0;
    }
    size_t C = (size_t)cfg->channels;
    size_t per_block =
        12 * C * C + 13 * C; /* qkv 3C²+3C, proj C²+C, fc 4C²+4C, fcproj 4C²+C, 2 LN */
    return ((size_t)cfg->vocab_size + (size_t)cfg->max_seq_len) * C + cfg->n_layer * per_block +
           2 * C;
}

/* Parameters of one tensor-parallel rank's shard (T = 1: gpt_num_params). */
static size_t gpt_tp_params(const gpt_config_t *cfg, int T)
{
    size_t C = (size_t)cfg->channels, t = (size_t)T;
    size_t per_block = 12 * C * C / t + 7 * C / t + 6 * C; /* sharded: qkv, proj.w, fc, fcproj.w */
    return (size_t)cfg->vocab_size / t * C + (size_t)cfg->max_seq_len * C +
           cfg->n_layer * per_block + 2 * C;
}

double gpt_flops_per_token(const gpt_config_t *cfg, int T)
{
    return 6.0 * (double)gpt_num_params(cfg) +
           6.0 * cfg->n_layer * (double)cfg->channels * (double)T;
}

/* Appends a tensor of full shape (rows, cols), cut by split over m->tp (the shard's shape is
 * stored); m->full_params counts the unsharded layout meanwhile. */
static void add_tensor(gpt_model_t *m, uint8_t *init, int *n, size_t *off, const char *name,
                       int ndim, size_t rows, size_t cols, int layer, int kind, int split)
{
    gpt_tensor_t *t = &m->tensors[*n];
    const size_t T = (size_t)m->tp.size;
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    t->shape[0] = split == GPT_TP_ROWS || split == GPT_TP_QKV ? rows / T : rows;
    t->shape[1] = split == GPT_TP_COLS ? cols / T : cols;
    t->offset = *off;
    t->size = t->shape[0] * t->shape[1];
    t->layer = layer;
    t->decay = ndim == 2;
    t->tp_split = split;
    t->full_offset = m->full_params;
    init[*n] = (uint8_t)kind;
    *off += t->size;
    m->full_params += rows * cols;
    (*n)++;
}

static void build_table(gpt_model_t *m)
{
    const gpt_config_t *cfg = &m->cfg;
    const size_t C = (size_t)cfg->channels;
    const int L = cfg->n_layer;
    uint8_t *init = m->work->init;
    int n = 0;
    size_t off = 0;
    char name[GPT_NAME_MAX];
    m->groups[0].off = off;
    m->full_params = 0;
    add_tensor(m, init, &n, &off, "wte", 2, (size_t)cfg->vocab_size, C, -1, INIT_NORMAL,
               GPT_TP_ROWS);
    add_tensor(m, init, &n, &off, "wpe", 2, (size_t)cfg->max_seq_len, C, -1, INIT_NORMAL,
               GPT_TP_REPLICATED);
    m->groups[0].n = off - m->groups[0].off;
    for (int l = 0; l < L; l++) {
        m->groups[1 + l].off = off;
        for (int p = 0; p < P_PER_BLOCK; p++) {
            snprintf(name, sizeof name, "h.%d.%s", l, block_tensors[p].name);
            size_t rows = (size_t)block_tensors[p].rows * C;
            size_t cols = block_tensors[p].cols ? (size_t)block_tensors[p].cols * C : 1;
            add_tensor(m, init, &n, &off, name, block_tensors[p].ndim, rows, cols, l,
                       block_tensors[p].init, block_tensors[p].split);
        }
        m->groups[1 + l].n = off - m->groups[1 + l].off;
    }
    m->groups[1 + L].off = off;
    add_tensor(m, init, &n, &off, "lnf.w", 1, C, 1, L, INIT_ONE, GPT_TP_REPLICATED);
    add_tensor(m, init, &n, &off, "lnf.b", 1, C, 1, L, INIT_ZERO, GPT_TP_REPLICATED);
    m->groups[1 + L].n = off - m->groups[1 + L].off;
    m->num_tensors = n;
}

/* Block l's tensors in a buffer whose element 0 is parameter `first` (0: a whole-model buffer). */
static block_params_t block_view(const gpt_model_t *m, float *base, size_t first, int l)
{
    const gpt_tensor_t *t = &m->tensors[2 + l * P_PER_BLOCK];
#define AT(k) (base + (t[k].offset - first))
    block_params_t p = {
        AT(P_LN1W), AT(P_LN1B), AT(P_QKVW), AT(P_QKVB), AT(P_ATTPROJW), AT(P_ATTPROJB),
        AT(P_LN2W), AT(P_LN2B), AT(P_FCW),  AT(P_FCB),  AT(P_FCPROJW),  AT(P_FCPROJB),
    };
#undef AT
    return p;
}

/* Where forward and backward read tensor ti of group g. */
static const float *param_of(const gpt_model_t *m, int g, int ti)
{
    return m->work->gparam[g] + (m->tensors[ti].offset - m->groups[g].off);
}

/* Group g has parameters to read. */
static int need_params(const gpt_model_t *m, int g, const char *what)
{
    if (!m->work->gparam[g]) {
        return gpt_fail("gpt: %s: group %d has no parameters (the shared buffer was released; "
                        "gpt_set_group_params first)", what, g);
    }
    return 0;
}

/* Where backward writes tensor ti of group g. */
static float *grad_of(const gpt_model_t *m, int g, int ti)
{
    return m->work->ggrad[g] + (m->tensors[ti].offset - m->groups[g].off);
}

#define INIT_CHUNK 65536

/* Copies between one tensor's shard (rank r of T, the shape in t) and the full tensor:
 * to_full 0: full -> shard, 1: shard -> full. */
static void tp_copy(const gpt_tensor_t *t, int r, int T, float *full, float *shard, int to_full)
{
    size_t rows = t->shape[0], cols = t->shape[1], fcols = cols, frow0 = 0, parts = 1, rp;
    if (t->tp_split == GPT_TP_COLS) {
        fcols = cols * (size_t)T;
    } else if (t->tp_split != GPT_TP_REPLICATED) {
        parts = t->tp_split == GPT_TP_QKV ? 3 : 1;
        frow0 = (size_t)r * (rows / parts);
    }
    rp = rows / parts; /* shard rows per part; a full part has rp * T rows */
    for (size_t i = 0; i < rows; i++) {
        size_t k = i / rp, fi = k * rp * (size_t)T + frow0 + i % rp;
        size_t fc0 = t->tp_split == GPT_TP_COLS ? (size_t)r * cols : 0;
        float *f = full + fi * fcols + fc0, *s = shard + i * cols;
        memcpy(to_full ? f : s, to_full ? s : f, cols * sizeof(float));
    }
}

void gpt_tp_copy(const gpt_model_t *m, int ti, int r, float *full, float *shard, int to_full)
{
    const gpt_tensor_t *t = &m->tensors[ti];
    if (t->size) { /* size 0: not on this pipeline stage */
        tp_copy(t, r, m->tp.size, full + t->full_offset, shard + t->offset, to_full);
    }
}

void gpt_tp_slice(const gpt_model_t *m, const float *full, float *shard)
{
    for (int ti = 0; ti < m->num_tensors; ti++) {
        gpt_tp_copy(m, ti, m->tp.rank, (float *)(uintptr_t)full, shard, 0);
    }
}

void gpt_tp_place(const gpt_model_t *m, const float *shard, int r, float *full)
{
    for (int ti = 0; ti < m->num_tensors; ti++) {
        gpt_tp_copy(m, ti, r, full, (float *)(uintptr_t)shard, 1);
    }
}

void gpt_init_weights(gpt_model_t *m, uint64_t seed)
{
    const double resid_std = GPT_INIT_STD / sqrt(2.0 * m->cfg.n_layer);
    for (int ti = 0; ti < m->num_tensors; ti++) {
        gpt_tensor_t full_t = m->tensors[ti], *t = &full_t;
        const int kind = m->work->init[ti];
        float *p = m->params + t->offset;
        if (!t->size) { /* not on this pipeline stage */
            continue;
        }
        if (kind == INIT_ZERO || kind == INIT_ONE) {
            for (size_t i = 0; i < t->size; i++) {
                p[i] = kind == INIT_ONE ? 1.0f : 0.0f;
            }
            continue;
        }
        /* a shard draws the whole tensor (the single-rank model's values) and keeps its slice */
        const int sharded = m->tp.size > 1 && t->tp_split != GPT_TP_REPLICATED;
        if (sharded) {
            t->size *= (size_t)m->tp.size;
            p = m->work->init_full;
        }
        const double std = kind == INIT_RESID ? resid_std : GPT_INIT_STD;
        /* chunks with their own stream (seed, tensor, chunk): thread-count independent */
        const long nchunks = (long)((t->size + INIT_CHUNK - 1) / INIT_CHUNK);
        OMP(omp parallel for schedule(static))
        for (long c = 0; c < nchunks; c++) {
            uint64_t s = seed ^ ((uint64_t)ti << 40) ^ (uint64_t)c;
            splitmix64(&s);
            s ^= 0x6a09e667f3bcc909ULL * (uint64_t)(ti + 1);
            size_t i0 = (size_t)c * INIT_CHUNK;
            size_t i1 = i0 + INIT_CHUNK < t->size ? i0 + INIT_CHUNK : t->size;
            for (size_t i = i0; i < i1; i += 2) {
                /* Box–Muller: two normals from two uniforms */
                double r = sqrt(-2.0 * log(uniform_open0(&s)));
                double a = 6.283185307179586 * uniform_open0(&s);
                p[i] = (float)(std * r * cos(a));
                if (i + 1 < i1) {
                    p[i + 1] = (float)(std * r * sin(a));
                }
            }
        }
        if (sharded) {
            tp_copy(&m->tensors[ti], m->tp.rank, m->tp.size, p, m->params + m->tensors[ti].offset,
                    0);
        }
    }
}

int gpt_tp_check(const gpt_config_t *cfg, int T)
{
    if (T < 1) {
        return gpt_fail("gpt: tensor-parallel size %d must be >= 1", T);
    }
    if (cfg->n_head % T != 0) {
        return gpt_fail("tensor parallel: %d heads cannot be split over %d ranks (each rank owns "
                        "whole heads: --heads must be a multiple of --tp)", cfg->n_head, T);
    }
    if ((4 * cfg->channels) % T != 0) {
        return gpt_fail("tensor parallel: the MLP width 4C = %d is not a multiple of --tp %d",
                        4 * cfg->channels, T);
    }
    if (cfg->vocab_size % T != 0) {
        return gpt_fail("tensor parallel: the vocabulary (%d) is not a multiple of --tp %d (the "
                        "embedding and the cross-entropy are split by vocabulary)",
                        cfg->vocab_size, T);
    }
    return 0;
}

int gpt_sp_check(int seq, int tp_size)
{
    if (tp_size < 2) {
        return gpt_fail("sequence parallel (--sp) needs a tensor-parallel group: --tp %d must be "
                        "> 1", tp_size);
    }
    if (seq % tp_size != 0) {
        return gpt_fail("sequence parallel: the sequence length T = %d is not a multiple of the "
                        "tensor-parallel size %d (each rank holds T / %d positions of the "
                        "LayerNorm and residual regions)", seq, tp_size, tp_size);
    }
    return 0;
}

/* gpt_create_tp's and gpt_stage_create_tp's checks of cfg and tp (NULL: no tensor parallelism). */
static int tp_args_check(const gpt_config_t *cfg, const gpt_tp_t *tp)
{
    const int T = tp ? tp->size : 1;
    if (gpt_config_check(cfg) != 0 || gpt_tp_check(cfg, T) != 0) {
        return -1;
    }
    if (T > 1 && (!tp->allreduce_sum || !tp->allreduce_max || tp->rank < 0 || tp->rank >= T)) {
        return gpt_fail("gpt: tensor parallel rank %d of %d without its collectives", tp->rank, T);
    }
    if (tp && tp->sp && gpt_sp_check(T, T) != 0) {
        return -1;
    }
    if (tp && tp->sp && (!tp->allgather || !tp->reduce_scatter)) {
        return gpt_fail("gpt: sequence parallelism without its collectives");
    }
    return 0;
}

/* The buffer for drawing one sharded tensor whole (wte or a (4C, C) matmul weight) at T > 1. */
static int alloc_init_full(gpt_work_t *w, const gpt_config_t *cfg, int T)
{
    if (T > 1) {
        size_t C = (size_t)cfg->channels, V = (size_t)cfg->vocab_size;
        w->init_full = malloc((V > 4 * C ? V : 4 * C) * C * sizeof(float));
        return w->init_full ? 0 : -1;
    }
    return 0;
}

int gpt_create(const gpt_config_t *cfg, uint64_t seed, gpt_model_t **model_p)
{
    return gpt_create_tp(cfg, NULL, seed, model_p);
}

int gpt_create_tp(const gpt_config_t *cfg, const gpt_tp_t *tp, uint64_t seed,
                  gpt_model_t **model_p)
{
    const int T = tp ? tp->size : 1;
    if (tp_args_check(cfg, tp) != 0) {
        return -1;
    }
    const int L = cfg->n_layer;
    gpt_model_t *m = calloc(1, sizeof *m);
    if (!m) {
        goto oom;
    }
    m->cfg = *cfg;
    m->tp = tp ? *tp : (gpt_tp_t){.rank = 0, .size = 1};
    m->num_params = gpt_tp_params(cfg, T);
    m->num_tensors = 2 + P_PER_BLOCK * L + 2;
    m->mean_loss = -1.0f;
    m->work = calloc(1, sizeof *m->work);
    if (m->work) {
        m->work->fwd_done = -2;
        m->work->bwd_next = -2;
    }
    m->tensors = calloc((size_t)m->num_tensors, sizeof *m->tensors);
    m->groups = calloc((size_t)L + 2, sizeof *m->groups);
    m->params = malloc(m->num_params * sizeof(float));
    m->grads = calloc(m->num_params, sizeof(float));
    if (!m->work || !m->tensors || !m->groups || !m->params || !m->grads) {
        goto oom;
    }
    m->work->init = calloc((size_t)m->num_tensors, 1);
    m->work->ggrad = calloc((size_t)L + 2, sizeof(float *));
    m->work->gparam = calloc((size_t)L + 2, sizeof(float *));
    if (!m->work->init || !m->work->ggrad || !m->work->gparam) {
        goto oom;
    }
    build_table(m);
    for (int g = 0; g < L + 2; g++) {
        m->work->ggrad[g] = m->grads + m->groups[g].off;
        m->work->gparam[g] = m->params + m->groups[g].off;
    }
    gemm_select(m->work);
    if (alloc_init_full(m->work, cfg, T) != 0) {
        goto oom;
    }
    gpt_init_weights(m, seed);
    *model_p = m;
    return 0;
oom:
    gpt_destroy(m);
    return gpt_fail("gpt: out of memory for a model of %zu parameters", gpt_num_params(cfg));
}

static void free_acts(gpt_work_t *w)
{
    free(w->mem);
    free(w->blocks);
    free(w->inputs);
    free(w->targets);
    w->mem = NULL;
    w->mem_n = 0;
    w->blocks = NULL;
    w->inputs = w->targets = NULL;
    w->alloc_B = w->alloc_T = 0;
}

void gpt_destroy(gpt_model_t *m)
{
    if (!m) {
        return;
    }
    if (m->work) {
        free_acts(m->work);
        free(m->work->init);
        free(m->work->ggrad);
        free(m->work->gparam);
        free(m->work->init_full);
        free(m->work);
    }
    free(m->tensors);
    free(m->groups);
    free(m->params);
    free(m->grads);
    free(m);
}

const gpt_tensor_t *gpt_find_tensor(const gpt_model_t *m, const char *name)
{
    for (int i = 0; i < m->num_tensors; i++) {
        if (strcmp(m->tensors[i].name, name) == 0) {
            return &m->tensors[i];
        }
    }
    return NULL;
}

gpt_range_t gpt_layer_range(const gpt_model_t *m, int layer)
{
    gpt_range_t none = {0, 0};
    if (layer < -1 || layer > m->cfg.n_layer) {
        return none;
    }
    return m->groups[layer + 1];
}

/*
 * The sizes of one model's or stage's activation layout, as this rank holds them: the LayerNorm
 * and residual regions are S rows of all C channels (S = B T, or B T / tp with sequence
 * parallelism), the column-parallel outputs (QKV, the attention output and its probabilities, fc
 * and its GELU) this rank's Cl = C / tp channels and NH / tp heads, the logits its V / tp
 * vocabulary rows (Megatron's shards: those full-width tensors never exist on one rank).
 */
typedef struct {
    size_t L, BT, C, S; /* blocks, rows, channels, rows of the sequence regions */
    size_t Cl, Vl;      /* this rank's channels of attention (MLP: 4 Cl) and vocabulary rows */
    size_t att;         /* (B, NH / tp, T, T): attention probabilities of the rank's heads */
    size_t scratch;     /* transposes of the largest weight or output, attention's packs */
} act_dims_t;

/* L blocks, batches of B x T, vocab rows of logits (0: a pipeline stage without the head). */
static act_dims_t act_dims(const gpt_model_t *m, size_t L, int B, int T, size_t vocab)
{
    const size_t tp = (size_t)m->tp.size, C = (size_t)m->cfg.channels;
    act_dims_t d = {.L = L, .BT = (size_t)B * (size_t)T, .C = C, .Cl = C / tp, .Vl = vocab / tp};
    d.S = m->tp.sp ? d.BT / tp : d.BT;
    d.att = (size_t)B * (size_t)(m->cfg.n_head / m->tp.size) * (size_t)T * (size_t)T;
    /* the widest matmul output: fc (4 Cl), a row-parallel projection (C), the head (Vl) */
    size_t maxoc = 4 * d.Cl > C ? 4 * d.Cl : C;
    maxoc = d.Vl > maxoc ? d.Vl : maxoc;
    size_t sc = C * maxoc;                                    /* a transposed weight */
    sc = d.BT * maxoc > sc ? d.BT * maxoc : sc;               /* a transposed output gradient */
    sc = d.BT * d.Cl + d.att > sc ? d.BT * d.Cl + d.att : sc; /* attention: packs, (T, T) each */
    sc = (size_t)T * C > sc ? (size_t)T * C : sc;             /* SP: wpe's partial gradient */
    sc = 3 * d.BT > sc ? 3 * d.BT : sc;                       /* vocab-parallel CE's sums */
    d.scratch = sc;
    return d;
}

/*
 * Lays the activation buffers out (act_dims_t's sizes) and returns the number of floats from
 * base; with NULL bases it only counts, so sizes have one source of truth. Two regions:
 * from base what one forward must keep until its backward (a pipeline stage has one per
 * micro-batch slot), from tail (*tail_n floats) what one backward at a time uses, shared by the
 * slots: the backward temporaries, the scratch, and what recomputation rebuilds inside a block's
 * backward (rc: GPT_RECOMPUTE_*). selective: one (B, NH, T, T) attention matrix for all blocks;
 * full: one block's activations for all blocks, each block keeping only its output res3 (the next
 * block's input) in base. A whole model puts tail right after base. seq_p (2) receives the floats
 * of the LayerNorm and residual regions (S rows each) from base and from tail.
 */
static size_t carve_acts(gpt_work_t *w, float *base, float *tail, const act_dims_t *d, int rc,
                         size_t *seq_p, size_t *col_p, size_t *tail_n)
{
    size_t off[2] = {0, 0}, seq[2] = {0, 0}; /* the LayerNorm and residual regions (S rows each)
                                                in each part */
    size_t col = 0; /* the column-parallel outputs, this rank's columns */
    float *const at[2] = {base, tail};
    const size_t BT = d->BT, C = d->C, S = d->S, Cl = d->Cl, Vl = d->Vl, att = d->att;
#define CARVE_IN(r, ptr, n)                        \
    do {                                           \
        (ptr) = at[r] ? at[r] + off[r] : NULL;     \
        off[r] += (n);                             \
    } while (0)
#define CARVE(ptr, n) CARVE_IN(0, ptr, n)
#define CARVE_SEQ(r, ptr, n) \
    do {                     \
        CARVE_IN(r, ptr, n); \
        seq[r] += (n);       \
    } while (0)
#define CARVE_COL(r, ptr, n) \
    do {                     \
        CARVE_IN(r, ptr, n); \
        col += (n);          \
    } while (0)
    const int fr = rc == GPT_RECOMPUTE_FULL; /* region of a block's recomputed activations */
    CARVE_SEQ(0, w->encoded, S * C);
    for (size_t l = 0; l < d->L; l++) {
        block_acts_t *a = &w->blocks[l];
        if (fr && l > 0) {
            *a = w->blocks[0]; /* the shared set, but its own output */
            CARVE_SEQ(0, a->res3, S * C);
            continue;
        }
        CARVE_SEQ(fr, a->ln1, S * C);
        CARVE_SEQ(fr, a->ln1_mean, S);
        CARVE_SEQ(fr, a->ln1_rstd, S);
        CARVE_COL(fr, a->qkv, 3 * BT * Cl);
        CARVE_COL(fr, a->atty, BT * Cl);
        if (rc == GPT_RECOMPUTE_NONE) {
            CARVE_COL(0, a->att, att);
        } else if (l == 0) {
            CARVE_COL(1, a->att, att);
        } else {
            a->att = w->blocks[0].att;
        }
        CARVE_SEQ(fr, a->attproj, S * C);
        CARVE_SEQ(fr, a->res2, S * C);
        CARVE_SEQ(fr, a->ln2, S * C);
        CARVE_SEQ(fr, a->ln2_mean, S);
        CARVE_SEQ(fr, a->ln2_rstd, S);
        CARVE_COL(fr, a->fch, 4 * BT * Cl);
        CARVE_COL(fr, a->fch_gelu, 4 * BT * Cl);
        CARVE_SEQ(fr, a->fcproj, S * C);
        CARVE_SEQ(0, a->res3, S * C);
    }
    CARVE_SEQ(0, w->lnf, S * C);
    CARVE_SEQ(0, w->lnf_mean, S);
    CARVE_SEQ(0, w->lnf_rstd, S);
    CARVE(w->gath, S < BT ? BT * C : 0);
    CARVE_COL(0, w->logits, BT * Vl);
    CARVE_COL(0, w->probs, BT * Vl);
    CARVE(w->losses, BT);
    CARVE_IN(1, w->dres, BT * C);
    CARVE_IN(1, w->dln, BT * C);
    CARVE_COL(1, w->dqkv, 3 * BT * Cl);
    CARVE_COL(1, w->datty, BT * Cl);
    CARVE_COL(1, w->dfch, 4 * BT * Cl);
    CARVE_COL(1, w->dlogits, BT * Vl);
    CARVE_IN(1, w->scratch, d->scratch);
#undef CARVE_COL
#undef CARVE_SEQ
#undef CARVE
#undef CARVE_IN
    seq_p[0] = seq[0];
    seq_p[1] = seq[1];
    *col_p = col;
    *tail_n = off[1];
    return off[0];
}

int gpt_alloc_acts(gpt_model_t *m, int B, int T)
{
    const gpt_config_t *cfg = &m->cfg;
    gpt_work_t *w = m->work;
    if (B < 1 || T < 1) {
        return gpt_fail("gpt: batch %d x %d: B and T must be >= 1", B, T);
    }
    if (T > cfg->max_seq_len) {
        return gpt_fail("gpt: sequence length T = %d exceeds the model's max_seq_len = %d", T,
                        cfg->max_seq_len);
    }
    if (m->tp.sp && gpt_sp_check(T, m->tp.size)) {
        return -1;
    }
    if (w->alloc_B >= B && w->alloc_T >= T) {
        return 0;
    }
    const size_t L = (size_t)cfg->n_layer, C = (size_t)cfg->channels, V = (size_t)cfg->vocab_size;
    const size_t NH = (size_t)cfg->n_head, BT = (size_t)B * (size_t)T;
    if ((double)B * (double)T > INT_MAX / 2 ||
        (double)BT * ((double)L * (20.0 * C + (double)NH * T) + 5.0 * V + 20.0 * C) >
            (double)(SIZE_MAX / 8)) {
        return gpt_fail("gpt: activations for B = %d, T = %d do not fit in memory", B, T);
    }
    const act_dims_t d = act_dims(m, L, B, T, V);
    size_t seq[2], col, tail;
    free_acts(w);
    w->blocks = calloc(L, sizeof *w->blocks);
    const int rc = m->recompute;
    const size_t head = carve_acts(w, NULL, NULL, &d, rc, seq, &col, &tail);
    const size_t total = head + tail;
    w->mem = malloc(total * sizeof(float));
    w->inputs = malloc(BT * sizeof(int));
    w->targets = malloc(BT * sizeof(int));
    if (!w->mem || !w->blocks || !w->inputs || !w->targets) {
        free_acts(w);
        return gpt_fail("gpt: out of memory for activations (%zu MiB for B = %d, T = %d)",
                        total * sizeof(float) >> 20, B, T);
    }
    carve_acts(w, w->mem, w->mem + head, &d, rc, seq, &col, &tail);
    m->act_floats = total;
    m->act_seq_floats = seq[0] + seq[1];
    m->act_col_floats = col;
    w->scratch_n = d.scratch;
    w->mem_n = total;
    w->alloc_B = B;
    w->alloc_T = T;
    m->B = m->T = 0;
    w->fwd_done = -2;
    w->bwd_next = -2;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* forward                                                                                     */

int gpt_forward_embed(gpt_model_t *m, const int *inputs, int B, int T)
{
    const int V = m->cfg.vocab_size, C = m->cfg.channels;
    gpt_work_t *w = m->work;
    if (B < 1 || T < 1) {
        return gpt_fail("gpt: batch %d x %d: B and T must be >= 1", B, T);
    }
    if (sp_on(m) && gpt_sp_check(T, m->tp.size)) {
        return -1;
    }
    if (gpt_alloc_acts(m, B > w->alloc_B ? B : w->alloc_B, T > w->alloc_T ? T : w->alloc_T)) {
        return -1;
    }
    const int BT = B * T;
    for (int i = 0; i < BT; i++) {
        if (inputs[i] < 0 || inputs[i] >= V) {
            return gpt_fail("gpt: input token %d at position %d is outside the vocabulary [0, %d)",
                            inputs[i], i, V);
        }
    }
    memcpy(w->inputs, inputs, (size_t)BT * sizeof(int));
    m->B = B;
    m->T = T;
    m->mean_loss = -1.0f;
    w->have_targets = 0;
    w->bwd_next = -2;
    if (need_params(m, 0, "forward of the embeddings")) {
        return -1;
    }
    const float *wte = param_of(m, 0, 0);
    const float *wpe = param_of(m, 0, 1);
    /* sequence parallel: this rank's rows [r0, r0 + rows) of the BT */
    const int rows = seq_rows(m, BT), r0 = sp_on(m) ? m->tp.rank * rows : 0;
    if (m->tp.size > 1) {
        /* vocabulary-parallel: this rank's rows [v0, v0 + Vl), 0 for the other tokens, summed
         * (all-reduce; with sequence parallelism a reduce-scatter into the rank's rows) */
        const int Vl = V / m->tp.size, v0 = m->tp.rank * Vl;
        float *part = sp_on(m) ? w->gath : w->encoded;
        OMP(omp parallel for schedule(static))
        for (int bt = 0; bt < BT; bt++) {
            const int id = w->inputs[bt] - v0;
            float *o = part + (size_t)bt * C;
            for (int i = 0; i < C; i++) {
                o[i] = id >= 0 && id < Vl ? wte[(size_t)id * C + i] : 0.0f;
            }
        }
        if (sp_on(m) ? sp_scatter(m, part, w->encoded, (size_t)rows * C)
                     : tp_reduce(m, w->encoded, (size_t)BT * C, 0) != 0) {
            return -1;
        }
        wte = NULL; /* te + 0 + ... + 0 is te exactly: o = te + pe as at one rank */
    }
    OMP(omp parallel for schedule(static))
    for (int r = 0; r < rows; r++) {
        const int bt = r0 + r;
        const float *pe = wpe + (size_t)(bt % T) * C;
        float *o = w->encoded + (size_t)r * C;
        const float *te = wte ? wte + (size_t)w->inputs[bt] * C : o;
        for (int i = 0; i < C; i++) {
            o[i] = te[i] + pe[i];
        }
    }
    w->fwd_done = -1;
    return 0;
}

static int block_forward(gpt_model_t *m, int l);

int gpt_forward_layer(gpt_model_t *m, int l)
{
    gpt_work_t *w = m->work;
    const int L = m->cfg.n_layer;
    if (l < 0 || l >= L) {
        return gpt_fail("gpt: forward of layer %d: the model has layers 0..%d", l, L - 1);
    }
    if (w->fwd_done != l - 1) {
        return gpt_fail("gpt: forward of layer %d out of order (embed and layers 0..%d must come "
                        "first)",
                        l, l - 1);
    }
    if (need_params(m, l + 1, "forward of a block") || block_forward(m, l)) {
        return -1;
    }
    w->fwd_done = l;
    return 0;
}

/*
 * Block l's forward from its input (the embedding output or block l - 1's res3) into blocks[l],
 * with its TP/SP collectives. Also the recomputation inside a backward under --recompute full:
 * every rank of a TP group runs it at the same point of the same backward sequence, so its
 * collectives pair up as the forward's did, and with the same inputs, parameters and kernels it
 * writes the same bits (res3 included, which it rewrites unchanged).
 */
static int block_forward(gpt_model_t *m, int l)
{
    gpt_work_t *w = m->work;
    const int C = m->cfg.channels, NH = m->cfg.n_head;
    const int B = m->B, T = m->T, BT = B * T, rows = seq_rows(m, BT);
    const size_t n = (size_t)rows * C; /* the LayerNorm and residual regions: rows token rows */
    block_params_t p = block_view(m, w->gparam[l + 1], m->groups[l + 1].off, l);
    block_acts_t *a = &w->blocks[l];
    const float *res = l == 0 ? w->encoded : w->blocks[l - 1].res3;

    /* tensor parallel: this rank's Cl channels of attention (its NHl heads) and 4 Cl of the MLP */
    const int Cl = C / m->tp.size, NHl = NH / m->tp.size;
    const size_t nl = (size_t)BT * Cl;
    const float *x;

    layernorm_forward(a->ln1, a->ln1_mean, a->ln1_rstd, res, p.ln1w, p.ln1b, rows, C);
    if (!(x = col_parallel_input(m, a->ln1, BT, C))) {
        return -1;
    }
    matmul_forward(w, a->qkv, x, p.qkvw, p.qkvb, BT, C, 3 * Cl); /* column-parallel */
    attention_forward(w, a->atty, a->att, a->qkv, B, T, Cl, NHl);
    if (row_parallel_forward(m, a->attproj, a->atty, p.attprojw, p.attprojb, BT, Cl, C) != 0) {
        return -1;
    }
    residual_forward(a->res2, res, a->attproj, n);
    layernorm_forward(a->ln2, a->ln2_mean, a->ln2_rstd, a->res2, p.ln2w, p.ln2b, rows, C);
    if (!(x = col_parallel_input(m, a->ln2, BT, C))) {
        return -1;
    }
    matmul_forward(w, a->fch, x, p.fcw, p.fcb, BT, C, 4 * Cl); /* column-parallel */
    gelu_forward(a->fch_gelu, a->fch, 4 * nl);
    if (row_parallel_forward(m, a->fcproj, a->fch_gelu, p.fcprojw, p.fcprojb, BT, 4 * Cl, C)) {
        return -1;
    }
    residual_forward(a->res3, a->res2, a->fcproj, n);
    return 0;
}

int gpt_forward_head(gpt_model_t *m, const int *targets, float *loss_p)
{
    gpt_work_t *w = m->work;
    const int L = m->cfg.n_layer, C = m->cfg.channels, V = m->cfg.vocab_size;
    if (w->fwd_done != L - 1) {
        return gpt_fail("gpt: forward of the head before layers 0..%d", L - 1);
    }
    const int BT = m->B * m->T;
    if (targets) {
        for (int i = 0; i < BT; i++) {
            if (targets[i] < 0 || targets[i] >= V) {
                return gpt_fail("gpt: target token %d at position %d is outside the vocabulary "
                                "[0, %d)",
                                targets[i], i, V);
            }
        }
        memcpy(w->targets, targets, (size_t)BT * sizeof(int));
    }
    if (need_params(m, L + 1, "forward of the head") || need_params(m, 0, "forward of the head")) {
        return -1;
    }
    const float *lnfw = param_of(m, L + 1, m->num_tensors - 2);
    const float *lnfb = param_of(m, L + 1, m->num_tensors - 1);
    const float *wte = param_of(m, 0, 0);
    const int Vl = V / m->tp.size; /* tensor parallel: this rank's vocabulary slice */
    layernorm_forward(w->lnf, w->lnf_mean, w->lnf_rstd, w->blocks[L - 1].res3, lnfw, lnfb,
                      seq_rows(m, BT), C);
    const float *x = col_parallel_input(m, w->lnf, BT, C); /* SP: the whole sequence again */
    if (!x) {
        return -1;
    }
    matmul_forward(w, w->logits, x, wte, NULL, BT, C, Vl);
    w->fwd_done = L;
    if (!targets) {
        w->have_targets = 0;
        m->mean_loss = -1.0f;
        if (loss_p) {
            *loss_p = -1.0f;
        }
        return 0;
    }
    const int nt = (BT + ROWS_PER_TASK - 1) / ROWS_PER_TASK;
    if (m->tp.size > 1) {
        if (crossentropy_tp(m, BT, Vl) != 0) {
            return -1;
        }
    } else {
        OMP(omp parallel for schedule(static))
        for (int t = 0; t < nt; t++) {
            int r1 = (t + 1) * ROWS_PER_TASK;
            crossentropy_rows(w->probs, w->losses, w->logits, w->targets, t * ROWS_PER_TASK,
                              r1 < BT ? r1 : BT, V);
        }
    }
    double sum = 0.0;
    for (int i = 0; i < BT; i++) {
        sum += w->losses[i];
    }
    m->mean_loss = (float)(sum / BT);
    w->have_targets = 1;
    w->bwd_next = L;
    if (loss_p) {
        *loss_p = m->mean_loss;
    }
    return 0;
}

int gpt_forward(gpt_model_t *m, const int *inputs, const int *targets, int B, int T, float *loss_p)
{
    if (gpt_forward_embed(m, inputs, B, T) != 0) {
        return -1;
    }
    for (int l = 0; l < m->cfg.n_layer; l++) {
        if (gpt_forward_layer(m, l) != 0) {
            return -1;
        }
    }
    return gpt_forward_head(m, targets, loss_p);
}

const float *gpt_logits(const gpt_model_t *m)
{
    return m->B > 0 ? m->work->logits : NULL;
}

/* ------------------------------------------------------------------------------------------ */
/* backward                                                                                    */

/* What the backward sequence expects next, for error messages. */
static const char *bwd_expected(const gpt_model_t *m)
{
    static _Thread_local char buf[96];
    const int next = m->work->bwd_next, L = m->cfg.n_layer;
    if (next == L) {
        snprintf(buf, sizeof buf, "gpt_backward_head comes first");
    } else if (next >= 0) {
        snprintf(buf, sizeof buf, "layer %d is next", next);
    } else if (next == -1) {
        snprintf(buf, sizeof buf, "gpt_backward_embed is next");
    } else {
        snprintf(buf, sizeof buf, "no forward with targets since the last backward");
    }
    return buf;
}

void gpt_zero_grad(gpt_model_t *m)
{
    if (m->grads) {
        memset(m->grads, 0, m->num_params * sizeof(float));
    }
    for (int g = 0; g < m->cfg.n_layer + 2; g++) {
        float *p = m->work->ggrad[g];
        if (p && (!m->grads || p != m->grads + m->groups[g].off)) {
            memset(p, 0, m->groups[g].n * sizeof(float));
        }
    }
}

int gpt_set_group_grads(gpt_model_t *m, int g, float *buf)
{
    if (g < 0 || g > m->cfg.n_layer + 1) {
        return gpt_fail("gpt_set_group_grads: group %d out of range [0, %d]", g,
                        m->cfg.n_layer + 1);
    }
    if (!buf && !m->grads) {
        return gpt_fail("gpt_set_group_grads: group %d needs a buffer (the shared gradient "
                        "buffer was released)", g);
    }
    m->work->ggrad[g] = buf ? buf : m->grads + m->groups[g].off;
    return 0;
}

void gpt_release_grads(gpt_model_t *m)
{
    for (int g = 0; m->grads && g < m->cfg.n_layer + 2; g++) {
        if (m->work->ggrad[g] == m->grads + m->groups[g].off) {
            m->work->ggrad[g] = NULL;
        }
    }
    free(m->grads);
    m->grads = NULL;
}

size_t gpt_act_floats(const gpt_model_t *m)
{
    return m->work->mem_n;
}

static const char *const recompute_names[] = {"none", "selective", "full"};

int gpt_recompute_parse(const char *name)
{
    for (int i = 0; i < 3; i++) {
        if (strcmp(name, recompute_names[i]) == 0) {
            return i;
        }
    }
    return -1;
}

const char *gpt_recompute_name(int mode)
{
    return mode >= 0 && mode < 3 ? recompute_names[mode] : "?";
}

static int recompute_check(int mode)
{
    if (mode < GPT_RECOMPUTE_NONE || mode > GPT_RECOMPUTE_FULL) {
        return gpt_fail("gpt: recompute mode %d is not none (0), selective (1) or full (2)", mode);
    }
    return 0;
}

int gpt_set_recompute(gpt_model_t *m, int mode)
{
    if (recompute_check(mode)) {
        return -1;
    }
    free_acts(m->work);
    m->recompute = mode;
    m->B = m->T = 0;
    m->act_floats = m->act_seq_floats = m->act_col_floats = 0;
    return 0;
}

int gpt_set_group_params(gpt_model_t *m, int g, const float *buf)
{
    if (g < 0 || g > m->cfg.n_layer + 1) {
        return gpt_fail("gpt_set_group_params: group %d out of range [0, %d]", g,
                        m->cfg.n_layer + 1);
    }
    m->work->gparam[g] = buf || !m->params ? (float *)buf : m->params + m->groups[g].off;
    return 0;
}

void gpt_release_params(gpt_model_t *m)
{
    for (int g = 0; m->params && g < m->cfg.n_layer + 2; g++) {
        if (m->work->gparam[g] == m->params + m->groups[g].off) {
            m->work->gparam[g] = NULL;
        }
    }
    free(m->params);
    m->params = NULL;
}

/* Group g has somewhere to write its gradients. */
static int need_grads(const gpt_model_t *m, int g, const char *what)
{
    if (!m->work->ggrad[g]) {
        return gpt_fail("gpt: backward of %s: group %d has no gradient buffer (the shared one was "
                        "released; gpt_set_group_grads first)", what, g);
    }
    return 0;
}

int gpt_backward_head(gpt_model_t *m, float dloss)
{
    gpt_work_t *w = m->work;
    const int L = m->cfg.n_layer, C = m->cfg.channels, V = m->cfg.vocab_size;
    if (!w->have_targets || w->bwd_next != L) {
        return gpt_fail("gpt: backward of the head out of order: %s", bwd_expected(m));
    }
    if (need_grads(m, L + 1, "the head") || need_grads(m, 0, "the head")) {
        return -1;
    }
    const int BT = m->B * m->T, Vl = V / m->tp.size;
    const float scale = dloss / (float)BT;
    const int nt = (BT + ROWS_PER_TASK - 1) / ROWS_PER_TASK;
    OMP(omp parallel for schedule(static))
    for (int t = 0; t < nt; t++) {
        int r1 = (t + 1) * ROWS_PER_TASK;
        crossentropy_backward_rows(w->dlogits, w->probs, w->targets, scale, t * ROWS_PER_TASK,
                                   r1 < BT ? r1 : BT, Vl, Vl * m->tp.rank);
    }
    if (need_params(m, L + 1, "backward of the head") ||
        need_params(m, 0, "backward of the head")) {
        return -1;
    }
    const float *lnfw = param_of(m, L + 1, m->num_tensors - 2);
    float *dlnfw = grad_of(m, L + 1, m->num_tensors - 2);
    float *dlnfb = grad_of(m, L + 1, m->num_tensors - 1);
    const float *wte = param_of(m, 0, 0);
    float *dwte = grad_of(m, 0, 0);
    const int rows = seq_rows(m, BT);
    const float *x = col_parallel_input(m, w->lnf, BT, C), *d;
    if (!x) {
        return -1;
    }
    memset(w->dln, 0, (size_t)BT * C * sizeof(float));
    matmul_backward(w, w->dln, dwte, NULL, w->dlogits, x, wte, BT, C, Vl);
    if (!(d = col_parallel_dinp(m, BT, C))) { /* the head is column-parallel over the vocabulary */
        return -1;
    }
    memset(w->dres, 0, (size_t)rows * C * sizeof(float));
    if (ln_backward(m, w->dres, dlnfw, dlnfb, d, w->blocks[L - 1].res3, lnfw, w->lnf_mean,
                    w->lnf_rstd, rows, C)) {
        return -1;
    }
    w->bwd_next = L - 1;
    return 0;
}

int gpt_backward_layer(gpt_model_t *m, int l)
{
    gpt_work_t *w = m->work;
    const int C = m->cfg.channels, NH = m->cfg.n_head;
    if (w->bwd_next != l || l < 0) {
        return gpt_fail("gpt: backward of layer %d out of order: %s", l, bwd_expected(m));
    }
    if (need_grads(m, l + 1, "a block")) {
        return -1;
    }
    const int B = m->B, T = m->T, BT = B * T, rows = seq_rows(m, BT);
    const size_t n = (size_t)BT * C;
    if (need_params(m, l + 1, "backward of a block")) {
        return -1;
    }
    if (m->recompute == GPT_RECOMPUTE_FULL && block_forward(m, l)) {
        return -1; /* only the block input was kept: rebuild the rest, collectives included */
    }
    block_params_t p = block_view(m, w->gparam[l + 1], m->groups[l + 1].off, l);
    block_params_t g = block_view(m, m->work->ggrad[l + 1], m->groups[l + 1].off, l);
    block_acts_t *a = &w->blocks[l];
    const float *res = l == 0 ? w->encoded : w->blocks[l - 1].res3;

    /* tensor parallel: this rank's slices (see gpt_forward_layer); the row-parallel backward needs
     * nothing (dres is the same on every rank), the column-parallel one ends with f's all-reduce
     * of the LayerNorm output's gradient, so that the replicated LayerNorms see the full one.
     * Sequence parallel: dres holds the rank's rows; it is all-gathered before each row-parallel
     * backward, the LayerNorm outputs are all-gathered again for the weight gradients, and the
     * LayerNorm input gradients are reduce-scattered instead of all-reduced */
    const int Cl = C / m->tp.size, NHl = NH / m->tp.size;
    const size_t nl = (size_t)BT * Cl;
    const float *dout, *x, *d;

    /* w->dres = d res3 on entry; the MLP branch */
    if (!(dout = row_parallel_dout(m, BT, C))) {
        return -1;
    }
    memset(w->dfch, 0, 4 * nl * sizeof(float));
    matmul_backward(w, w->dfch, g.fcprojw, g.fcprojb, dout, a->fch_gelu, p.fcprojw, BT, 4 * Cl,
                    C);
    gelu_backward(w->dfch, a->fch, 4 * nl);
    if (!(x = col_parallel_input(m, a->ln2, BT, C))) {
        return -1;
    }
    memset(w->dln, 0, n * sizeof(float));
    matmul_backward(w, w->dln, g.fcw, g.fcb, w->dfch, x, p.fcw, BT, C, 4 * Cl);
    if (!(d = col_parallel_dinp(m, BT, C)) ||
        ln_backward(m, w->dres, g.ln2w, g.ln2b, d, a->res2, p.ln2w, a->ln2_mean, a->ln2_rstd,
                    rows, C)) {
        return -1;
    }
    /* w->dres = d res2; the attention branch */
    if (!(dout = row_parallel_dout(m, BT, C))) {
        return -1;
    }
    memset(w->datty, 0, nl * sizeof(float));
    matmul_backward(w, w->datty, g.attprojw, g.attprojb, dout, a->atty, p.attprojw, BT, Cl, C);
    if (m->recompute == GPT_RECOMPUTE_SELECTIVE) { /* P, from the kept qkv (no communication) */
        attention_forward(w, NULL, a->att, a->qkv, B, T, Cl, NHl);
    }
    memset(w->dqkv, 0, 3 * nl * sizeof(float));
    attention_backward(w, w->dqkv, w->datty, a->att, a->qkv, B, T, Cl, NHl);
    if (!(x = col_parallel_input(m, a->ln1, BT, C))) {
        return -1;
    }
    memset(w->dln, 0, n * sizeof(float));
    matmul_backward(w, w->dln, g.qkvw, g.qkvb, w->dqkv, x, p.qkvw, BT, C, 3 * Cl);
    if (!(d = col_parallel_dinp(m, BT, C)) ||
        ln_backward(m, w->dres, g.ln1w, g.ln1b, d, res, p.ln1w, a->ln1_mean, a->ln1_rstd, rows,
                    C)) {
        return -1;
    }
    /* w->dres = d of the block input */
    w->bwd_next = l - 1;
    return 0;
}

int gpt_backward_embed(gpt_model_t *m)
{
    gpt_work_t *w = m->work;
    const int C = m->cfg.channels;
    if (w->bwd_next != -1) {
        return gpt_fail("gpt: backward of the embeddings out of order: %s", bwd_expected(m));
    }
    if (need_grads(m, 0, "the embeddings")) {
        return -1;
    }
    const int B = m->B, T = m->T, BT = B * T;
    float *dwte = grad_of(m, 0, 0), *dwpe = grad_of(m, 0, 1);
    /* sequence parallel: dres holds rows [r0, r0 + rows); wpe's gradient of those rows goes to a
     * zeroed partial (scratch) summed over the ranks, and wte's scatter-add reads all BT rows */
    const int rows = seq_rows(m, BT), r0 = sp_on(m) ? m->tp.rank * rows : 0;
    float *dpe = dwpe;
    const float *dfull = w->dres;
    if (sp_on(m)) {
        dpe = w->scratch;
        memset(dpe, 0, (size_t)T * C * sizeof(float));
    }
    /* dwpe rows are independent across t; dwte is a scatter-add, in position order */
    OMP(omp parallel for schedule(static))
    for (int t = 0; t < T; t++) {
        float *d = dpe + (size_t)t * C;
        for (int b = 0; b < B; b++) {
            const int r = b * T + t - r0;
            if (r < 0 || r >= rows) {
                continue;
            }
            const float *g = w->dres + (size_t)r * C;
            for (int i = 0; i < C; i++) {
                d[i] += g[i];
            }
        }
    }
    if (sp_on(m)) {
        if (tp_reduce(m, dpe, (size_t)T * C, 0) || !(dfull = row_parallel_dout(m, BT, C))) {
            return -1;
        }
        for (size_t i = 0; i < (size_t)T * C; i++) {
            dwpe[i] += dpe[i];
        }
    }
    const int Vl = m->cfg.vocab_size / m->tp.size, v0 = m->tp.rank * Vl;
    for (int bt = 0; bt < BT; bt++) {
        const int id = w->inputs[bt] - v0; /* tensor parallel: only this rank's rows */
        if (id < 0 || id >= Vl) {
            continue;
        }
        float *d = dwte + (size_t)id * C;
        const float *g = dfull + (size_t)bt * C;
        for (int i = 0; i < C; i++) {
            d[i] += g[i];
        }
    }
    w->bwd_next = -2;
    return 0;
}

int gpt_backward(gpt_model_t *m, float dloss)
{
    if (gpt_backward_head(m, dloss) != 0) {
        return -1;
    }
    for (int l = m->cfg.n_layer - 1; l >= 0; l--) {
        if (gpt_backward_layer(m, l) != 0) {
            return -1;
        }
    }
    return gpt_backward_embed(m);
}

/* ------------------------------------------------------------------------------------------ */
/* sampling                                                                                    */

int gpt_sample_next(const float *logits, int V, float temperature, uint64_t *rng_state)
{
    int best = 0;
    for (int i = 1; i < V; i++) {
        best = logits[i] > logits[best] ? i : best;
    }
    if (temperature <= 0.0f) {
        return best;
    }
    /* softmax(logits / temperature) in double; inverse CDF at a uniform draw */
    double sum = 0.0;
    for (int i = 0; i < V; i++) {
        sum += exp((double)(logits[i] - logits[best]) / temperature);
    }
    double u = gpt_random_f32(rng_state) * sum, cdf = 0.0;
    for (int i = 0; i < V; i++) {
        cdf += exp((double)(logits[i] - logits[best]) / temperature);
        if (u < cdf) {
            return i;
        }
    }
    return V - 1; /* rounding */
}

/* ------------------------------------------------------------------------------------------ */
/* pipeline stages                                                                             */

/*
 * A stage is a whole-model view (base) whose tensor table keeps the whole model's names, indices
 * and layers but has offsets into the stage's own buffers (size 0 for a tensor not on the stage),
 * so the per-layer functions above run on it unchanged: they index parameters and gradients
 * through the table and the group ranges only. Each activation slot is a copy of base with its own
 * gpt_work_t, whose blocks array has all L entries but activations for [l0, l1) only; on a
 * non-first stage blocks[l0 - 1].res3 points at the slot's `encoded` buffer, which holds the
 * received input x. The slots share the backward temporaries and the scratch (dres ... scratch:
 * the tail of carve_acts' layout), since one micro-batch's backward runs at a time. With
 * sequence parallelism a slot's LayerNorm and residual regions (encoded, res3, ...) hold the
 * rank's st_seq_rows of the token rows, as a gpt_create_tp model's, and so do x, y, dy and dx.
 */
struct gpt_stage {
    gpt_model_t base;      /* the stage's parameters; work = &base_work */
    gpt_work_t base_work;  /* init kinds, ggrad (shared by the slots), the GEMM build */
    int l0, l1;            /* blocks [l0, l1) */
    int first, last;       /* l0 == 0, l1 == L */
    int nslots, B, T;      /* activation slots for micro-batches of up to B x T */
    gpt_model_t *slot;     /* (nslots) base with work = &slot_work[i] */
    gpt_work_t *slot_work; /* (nslots) */
    block_acts_t *blocks;  /* (nslots, L) */
    int *slot_mb;          /* (nslots) micro-batch held by the slot, -1 free */
    float *mem;            /* the slots' activations, then the shared backward temporaries */
    size_t act_floats;     /* floats of mem */
    size_t act_seq_floats; /* of them the LayerNorm and residual regions (1/tp.size with sp) */
    int *tok;              /* (nslots, 2, B T) inputs and targets */
};

/* Rows of a slot's LayerNorm and residual regions for n token rows, and so of the activations
 * that cross a stage boundary (x, y, dy, dx): with sequence parallelism the rank's block of them,
 * which the same TP rank of the neighbouring stage holds too (Megatron sends only that block). */
static size_t st_seq_rows(const gpt_stage_t *st, size_t n)
{
    return st->base.tp.sp ? n / (size_t)st->base.tp.size : n;
}

/* Whether tensor ti (of the whole model's table) lives on stage st. */
static int stage_holds(const gpt_stage_t *st, int ti, int layer)
{
    if (layer == -1) {
        return st->first || (st->last && ti == 0); /* wte on the last stage: the tied head */
    }
    if (layer == st->base.cfg.n_layer) {
        return st->last;
    }
    return layer >= st->l0 && layer < st->l1;
}

/* Remaps base's whole-model table to the stage buffer; returns the stage's parameter count. */
static size_t stage_table(gpt_stage_t *st)
{
    gpt_model_t *m = &st->base;
    const int L = m->cfg.n_layer;
    size_t off = 0;
    size_t *newoff = calloc((size_t)m->num_tensors, sizeof *newoff);
    if (!newoff) {
        return 0;
    }
    for (int ti = 0; ti < m->num_tensors; ti++) {
        if (stage_holds(st, ti, m->tensors[ti].layer) && (ti != 0 || st->first)) {
            newoff[ti] = off;
            off += m->tensors[ti].size;
        }
    }
    if (st->last && !st->first) { /* wte after everything else */
        newoff[0] = off;
        off += m->tensors[0].size;
    }
    for (int ti = 0; ti < m->num_tensors; ti++) {
        gpt_tensor_t *t = &m->tensors[ti];
        int held = stage_holds(st, ti, t->layer);
        t->offset = held ? newoff[ti] : 0;
        t->size = held ? t->size : 0;
    }
    for (int g = 0; g < L + 2; g++) {
        gpt_range_t r = {SIZE_MAX, 0};
        for (int ti = 0; ti < m->num_tensors; ti++) {
            const gpt_tensor_t *t = &m->tensors[ti];
            if (t->layer == g - 1 && t->size) {
                r.off = t->offset < r.off ? t->offset : r.off;
                r.n += t->size;
            }
        }
        m->groups[g] = r.n ? r : (gpt_range_t){0, 0};
    }
    free(newoff);
    return off;
}

/* Lays out every slot's activations in st->mem (allocating it) as described above. */
static int stage_alloc_acts(gpt_stage_t *st)
{
    const gpt_config_t *cfg = &st->base.cfg;
    const int L = cfg->n_layer;
    const size_t nl = (size_t)(st->l1 - st->l0);
    const size_t V = st->last ? (size_t)cfg->vocab_size : 0; /* logits on the last stage only */
    const act_dims_t d = act_dims(&st->base, nl, st->B, st->T, V);
    gpt_work_t probe = {.blocks = st->blocks + st->l0};
    size_t seq[2], col, tail; /* with --sp the sequence regions have st_seq_rows rows (d.S) */
    const int rc = st->base.recompute;
    /* per slot; the tail is shared */
    const size_t head = carve_acts(&probe, NULL, NULL, &d, rc, seq, &col, &tail);
    st->act_floats = (size_t)st->nslots * head + tail;
    st->act_seq_floats = (size_t)st->nslots * seq[0] + seq[1];
    st->mem = malloc(st->act_floats * sizeof(float));
    if (!st->mem) {
        return -1;
    }
    float *shared = st->mem + (size_t)st->nslots * head;
    for (int i = 0; i < st->nslots; i++) {
        gpt_work_t *w = &st->slot_work[i];
        w->blocks = st->blocks + (size_t)i * L + st->l0;
        carve_acts(w, st->mem + (size_t)i * head, shared, &d, rc, seq, &col, &tail);
        w->blocks = st->blocks + (size_t)i * L;
        if (!st->first) {
            w->blocks[st->l0 - 1].res3 = w->encoded; /* the received input */
        }
    }
    for (int i = 0; i < st->nslots; i++) {
        gpt_work_t *w = &st->slot_work[i];
        w->scratch_n = d.scratch;
        w->ggrad = st->base_work.ggrad;
        w->gparam = st->base_work.gparam;
        w->gemm_block = st->base_work.gemm_block;
        w->gemm_name = st->base_work.gemm_name;
        w->alloc_B = st->B;
        w->alloc_T = st->T;
        w->inputs = st->tok + (size_t)i * 2 * d.BT;
        w->targets = w->inputs + d.BT;
        w->fwd_done = -2;
        w->bwd_next = -2;
        st->slot[i] = st->base;
        st->slot[i].work = w;
        st->slot_mb[i] = -1;
    }
    return 0;
}

int gpt_stage_create(const gpt_config_t *cfg, int l0, int l1, int slots, int B, int T,
                     uint64_t seed, gpt_stage_t **stage_p)
{
    return gpt_stage_create_tp(cfg, NULL, l0, l1, slots, B, T, seed, stage_p);
}

int gpt_stage_create_tp(const gpt_config_t *cfg, const gpt_tp_t *tp, int l0, int l1, int slots,
                        int B, int T, uint64_t seed, gpt_stage_t **stage_p)
{
    if (tp_args_check(cfg, tp) != 0) {
        return -1;
    }
    if (tp && tp->sp && gpt_sp_check(T, tp->size) != 0) {
        return -1;
    }
    const int L = cfg->n_layer;
    if (l0 < 0 || l1 <= l0 || l1 > L) {
        return gpt_fail("gpt_stage: layers [%d, %d) are not a non-empty range of the model's "
                        "0..%d",
                        l0, l1, L - 1);
    }
    if (slots < 1 || B < 1 || T < 1 || T > cfg->max_seq_len) {
        return gpt_fail("gpt_stage: %d slots of %d x %d tokens: need slots, B, T >= 1 and "
                        "T <= max_seq_len (%d)",
                        slots, B, T, cfg->max_seq_len);
    }
    gpt_stage_t *st = calloc(1, sizeof *st);
    if (!st) {
        return gpt_fail("gpt_stage: out of memory");
    }
    gpt_model_t *m = &st->base;
    st->l0 = l0;
    st->l1 = l1;
    st->first = l0 == 0;
    st->last = l1 == L;
    st->nslots = slots;
    st->B = B;
    st->T = T;
    m->cfg = *cfg;
    m->num_tensors = 2 + P_PER_BLOCK * L + 2;
    m->mean_loss = -1.0f;
    m->tp = tp ? *tp : (gpt_tp_t){.rank = 0, .size = 1};
    m->work = &st->base_work;
    m->tensors = calloc((size_t)m->num_tensors, sizeof *m->tensors);
    m->groups = calloc((size_t)L + 2, sizeof *m->groups);
    st->base_work.init = calloc((size_t)m->num_tensors, 1);
    st->base_work.ggrad = calloc((size_t)L + 2, sizeof(float *));
    st->base_work.gparam = calloc((size_t)L + 2, sizeof(float *));
    st->slot = calloc((size_t)slots, sizeof *st->slot);
    st->slot_work = calloc((size_t)slots, sizeof *st->slot_work);
    st->blocks = calloc((size_t)slots * (size_t)L, sizeof *st->blocks);
    st->slot_mb = calloc((size_t)slots, sizeof *st->slot_mb);
    st->tok = malloc((size_t)slots * 2 * (size_t)B * (size_t)T * sizeof(int));
    if (!m->tensors || !m->groups || !st->base_work.init || !st->base_work.ggrad ||
        !st->base_work.gparam || !st->slot ||
        !st->slot_work || !st->blocks || !st->slot_mb || !st->tok) {
        goto oom;
    }
    build_table(m);
    m->num_params = stage_table(st);
    m->params = malloc(m->num_params * sizeof(float));
    m->grads = calloc(m->num_params, sizeof(float));
    if (!m->num_params || !m->params || !m->grads) {
        goto oom;
    }
    for (int g = 0; g < L + 2; g++) {
        st->base_work.ggrad[g] = m->groups[g].n ? m->grads + m->groups[g].off : NULL;
        st->base_work.gparam[g] = m->groups[g].n ? m->params + m->groups[g].off : NULL;
    }
    gemm_select(&st->base_work);
    if (alloc_init_full(&st->base_work, cfg, m->tp.size) != 0) {
        goto oom;
    }
    gpt_init_weights(m, seed); /* size-0 tensors are skipped; streams by global tensor index */
    if (stage_alloc_acts(st) != 0) {
        goto oom;
    }
    *stage_p = st;
    return 0;
oom:
    gpt_stage_destroy(st);
    return gpt_fail("gpt_stage: out of memory for layers [%d, %d) with %d slots of %d x %d", l0, l1,
                    slots, B, T);
}

void gpt_stage_destroy(gpt_stage_t *st)
{
    if (!st) {
        return;
    }
    free(st->base.params);
    free(st->base.grads);
    free(st->base.tensors);
    free(st->base.groups);
    free(st->base_work.init);
    free(st->base_work.ggrad);
    free(st->base_work.gparam);
    free(st->base_work.init_full);
    free(st->slot);
    free(st->slot_work);
    free(st->blocks);
    free(st->slot_mb);
    free(st->mem);
    free(st->tok);
    free(st);
}

int gpt_stage_load(gpt_stage_t *st, const gpt_model_t *src)
{
    const gpt_config_t *a = &st->base.cfg, *b = &src->cfg;
    if (a->max_seq_len != b->max_seq_len || a->vocab_size != b->vocab_size ||
        a->n_layer != b->n_layer || a->n_head != b->n_head || a->channels != b->channels) {
        return gpt_fail("gpt_stage_load: the model's configuration differs from the stage's");
    }
    if (src->tp.size != 1) {
        return gpt_fail("gpt_stage_load: the model is a tensor-parallel shard (load the whole "
                        "model)");
    }
    if (!st->base.params) {
        return gpt_fail("gpt_stage_load: the stage's parameters were released (ZeRO 3)");
    }
    gpt_tp_slice(&st->base, src->params, st->base.params); /* src's layout is the full one */
    return 0;
}

const gpt_model_t *gpt_stage_model(const gpt_stage_t *st)
{
    return &st->base;
}

int gpt_stage_set_params(gpt_stage_t *st, const float *buf)
{
    gpt_model_t *m = &st->base;
    for (int g = 0; g < m->cfg.n_layer + 2; g++) {
        if (m->groups[g].n && gpt_set_group_params(m, g, buf ? buf + m->groups[g].off : NULL)) {
            return -1;
        }
    }
    return 0;
}

void gpt_stage_release_params(gpt_stage_t *st)
{
    gpt_release_params(&st->base); /* the slots share base's gparam; their params copies go too */
    for (int i = 0; i < st->nslots; i++) {
        st->slot[i].params = NULL;
    }
}

gpt_range_t gpt_stage_wte(const gpt_stage_t *st)
{
    gpt_range_t r = {st->base.tensors[0].offset, st->base.tensors[0].size};
    return r;
}

gpt_range_t gpt_stage_layer_range(const gpt_stage_t *st, int layer)
{
    return gpt_layer_range(&st->base, layer);
}

int gpt_stage_is_first(const gpt_stage_t *st)
{
    return st->first;
}

int gpt_stage_is_last(const gpt_stage_t *st)
{
    return st->last;
}

/* The slot holding micro-batch mb, or -1. */
static int stage_slot_of(const gpt_stage_t *st, int mb)
{
    for (int i = 0; i < st->nslots; i++) {
        if (st->slot_mb[i] == mb) {
            return i;
        }
    }
    return -1;
}

int gpt_stage_forward(gpt_stage_t *st, int mb, const int *tokens, const float *x,
                      const int *targets, int B, int T, float *y, float *loss_p)
{
    if ((tokens != NULL) != st->first || (x != NULL) == st->first ||
        (targets != NULL) != st->last || (y != NULL) == st->last) {
        return gpt_fail("gpt_stage_forward: stage [%d, %d) takes %s and %s", st->l0, st->l1,
                        st->first ? "tokens (x NULL)" : "x (tokens NULL)",
                        st->last ? "targets (y NULL)" : "y (targets NULL)");
    }
    if (B < 1 || T < 1 || B > st->B || T > st->T) {
        return gpt_fail("gpt_stage_forward: batch %d x %d: the stage was made for up to %d x %d", B,
                        T, st->B, st->T);
    }
    if (mb < 0 || stage_slot_of(st, mb) >= 0) {
        return gpt_fail("gpt_stage_forward: micro-batch %d is negative or already in flight", mb);
    }
    const int i = stage_slot_of(st, -1);
    if (i < 0) {
        return gpt_fail("gpt_stage_forward: micro-batch %d: all %d activation slots of stage "
                        "[%d, %d) hold micro-batches whose backward has not run",
                        mb, st->nslots, st->l0, st->l1);
    }
    if (st->base.tp.sp && gpt_sp_check(T, st->base.tp.size) != 0) {
        return -1;
    }
    gpt_model_t *m = &st->slot[i];
    gpt_work_t *w = m->work;
    const size_t n = st_seq_rows(st, (size_t)B * (size_t)T) * (size_t)m->cfg.channels;
    if (st->first) {
        if (gpt_forward_embed(m, tokens, B, T) != 0) {
            return -1;
        }
    } else {
        m->B = B;
        m->T = T;
        m->mean_loss = -1.0f;
        w->have_targets = 0;
        w->bwd_next = -2;
        memcpy(w->encoded, x, n * sizeof(float));
        w->fwd_done = st->l0 - 1;
    }
    for (int l = st->l0; l < st->l1; l++) {
        if (gpt_forward_layer(m, l) != 0) {
            return -1;
        }
    }
    if (st->last) {
        if (gpt_forward_head(m, targets, loss_p) != 0) {
            return -1;
        }
    } else {
        memcpy(y, w->blocks[st->l1 - 1].res3, n * sizeof(float));
    }
    st->slot_mb[i] = mb;
    return 0;
}

int gpt_stage_backward(gpt_stage_t *st, int mb, const float *dy, float dloss, float *dx)
{
    if ((dy != NULL) == st->last || (dx != NULL) == st->first) {
        return gpt_fail("gpt_stage_backward: stage [%d, %d) takes %s and %s", st->l0, st->l1,
                        st->last ? "dloss (dy NULL)" : "dy", st->first ? "dx NULL" : "dx");
    }
    const int i = mb < 0 ? -1 : stage_slot_of(st, mb);
    if (i < 0) {
        return gpt_fail("gpt_stage_backward: micro-batch %d is not in flight on stage [%d, %d) "
                        "(no forward, or its backward already ran)",
                        mb, st->l0, st->l1);
    }
    gpt_model_t *m = &st->slot[i];
    gpt_work_t *w = m->work;
    const size_t n = st_seq_rows(st, (size_t)m->B * (size_t)m->T) * (size_t)m->cfg.channels;
    if (st->last) {
        if (gpt_backward_head(m, dloss) != 0) {
            return -1;
        }
    } else {
        memcpy(w->dres, dy, n * sizeof(float));
        w->bwd_next = st->l1 - 1;
    }
    for (int l = st->l1 - 1; l >= st->l0; l--) {
        if (gpt_backward_layer(m, l) != 0) {
            return -1;
        }
    }
    if (st->first) {
        if (gpt_backward_embed(m) != 0) {
            return -1;
        }
    } else {
        memcpy(dx, w->dres, n * sizeof(float));
    }
    st->slot_mb[i] = -1;
    return 0;
}

int gpt_stage_release(gpt_stage_t *st, int mb)
{
    const int i = mb < 0 ? -1 : stage_slot_of(st, mb);
    if (i < 0) {
        return gpt_fail("gpt_stage_release: micro-batch %d is not in flight on stage [%d, %d)", mb,
                        st->l0, st->l1);
    }
    st->slot_mb[i] = -1;
    return 0;
}

void gpt_stage_zero_grad(gpt_stage_t *st)
{
    memset(st->base.grads, 0, st->base.num_params * sizeof(float));
}

int gpt_stage_set_recompute(gpt_stage_t *st, int mode)
{
    if (recompute_check(mode)) {
        return -1;
    }
    for (int i = 0; i < st->nslots; i++) {
        if (st->slot_mb[i] >= 0) {
            return gpt_fail("gpt_stage_set_recompute: micro-batch %d is in flight on stage "
                            "[%d, %d)", st->slot_mb[i], st->l0, st->l1);
        }
    }
    free(st->mem);
    st->mem = NULL;
    st->base.recompute = mode;
    if (stage_alloc_acts(st) != 0) {
        return gpt_fail("gpt_stage: out of memory for the activations of layers [%d, %d)", st->l0,
                        st->l1);
    }
    return 0;
}

size_t gpt_stage_act_floats(const gpt_stage_t *st)
{
    return st->act_floats;
}

size_t gpt_stage_act_seq_floats(const gpt_stage_t *st)
{
    return st->act_seq_floats;
}
