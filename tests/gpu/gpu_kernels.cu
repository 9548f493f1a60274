/*
 * tests/gpu/gpu_kernels.cu — the CUDA kernels (gpu/kernels.cu) against the host, bit for bit, on
 * the first CUDA device; TAP. Without a device that answers it skips, saying why.
 *   reduce    every dtype x op, 1, 2, 3 and 8 operands, 100003 elements (NaNs with payloads,
 *             infinities, signed zeros, subnormals among the floats; every integer), out of place
 *             and into operand 0: against core/elem.h's functions in the host kernels' order
 *             (tests/unit/test_reduce checks the host kernels against the same rule)
 *   convert   all 65536 fp16 and bf16 values to fp32, and fp32 values (specials, rounding ties)
 *             to both
 *   qscale    L2, L-inf and clipped bucket scales, bucket sizes 1 to 10000: against tempo__qscale
 *   qstats    the level fitters' per-bucket statistics (L2, L-inf): against tempo__qstats_bucket
 *   qencode   packed indices at 1-8 bits (tables of 2-256 levels, zero and NaN buckets): against
 *             tempo__qlevel with tempo__sr_unit and the level kinds' packing (tests/unit/test_qmath
 *             checks quant/levels.c against the same)
 *   qdecode   against tempo__qdecode, and accumulated into finite values with tempo__sum_f32
 * Seed: TEMPO_TEST_SEED, else the clock (printed).
 */
#include <cuda_runtime.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <vector>

#include "core/elem.h"
#include "gpu/kernels.h"
#include "quant/qmath.h"

static int ntests, nfailed;
static uint64_t rs;

static void ok(bool cond, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("%sok %d - ", cond ? "" : "not ", ++ntests);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    nfailed += !cond;
}

static uint64_t rnd(void)
{
    rs ^= rs >> 12;
    rs ^= rs << 25;
    rs ^= rs >> 27;
    return rs * 0x2545f4914f6cdd1dull;
}
static float urand(void)
{
    return (float)(rnd() >> 40) * (1.0f / 16777216.0f);
}

#define CK(call)                                                                                 \
    do {                                                                                         \
        cudaError_t e_ = (cudaError_t)(call);                                                    \
        if (e_ != cudaSuccess) {                                                                 \
            printf("Bail out! %s: %s (%s:%d)\n", #call, cudaGetErrorString(e_), __FILE__,        \
                   __LINE__);                                                                    \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

static const char *dname(tempo_dtype_t d)
{
    static const char *const n[] = {"int8",    "uint8",    "int32",   "uint32",  "int64",
                                    "uint64",  "float16",  "bfloat16", "float32", "float64"};
    return n[d];
}

static size_t dsize(tempo_dtype_t d)
{
    static const size_t s[] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};
    return s[d];
}

/* Random bits for an element of dtype d; floats get specials in one element of eight. */
static void fill(tempo_dtype_t d, void *buf, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        uint64_t r = rnd();
        switch (d) {
        case TEMPO_FLOAT32: {
            static const uint32_t sp[] = {0x7fc00000u, 0xffc00001u, 0x7f800001u, 0x7f800000u,
                                          0xff800000u, 0x80000000u, 0x00000001u, 0x807fffffu};
            uint32_t u = (r & 7) == 0 ? sp[(r >> 3) % 8]
                                      : tempo__f32_bits((float)((double)(int64_t)(r >> 16) /
                                                                (double)(1ull << 40)));
            memcpy((char *)buf + 4 * i, &u, 4);
            break;
        }
        case TEMPO_FLOAT64: {
            static const uint64_t sp[] = {0x7ff8000000000000ull, 0xfff8000000000001ull,
                                          0x7ff0000000000001ull, 0x7ff0000000000000ull,
                                          0x8000000000000000ull, 0x0000000000000001ull};
            uint64_t u = (r & 7) == 0 ? sp[(r >> 3) % 6]
                                      : tempo__f64_bits((double)(int64_t)r / 1e12);
            memcpy((char *)buf + 8 * i, &u, 8);
            break;
        }
        case TEMPO_FLOAT16:
        case TEMPO_BFLOAT16: {
            uint16_t h = (uint16_t)(r >> 20);
            if ((r & 7) != 0) { /* mostly finite, moderate values */
                h = d == TEMPO_FLOAT16 ? (uint16_t)(h & 0xbbffu) : (uint16_t)(h & 0xbfffu);
            }
            memcpy((char *)buf + 2 * i, &h, 2);
            break;
        }
        default: memcpy((char *)buf + dsize(d) * i, &r, dsize(d)); break;
        }
    }
}

/* The host kernels' rule for element i (collectives/reduce.c). */
template <typename T, T (*SUM)(T, T), T (*PROD)(T, T), T (*MIN)(T, T), T (*MAX)(T, T),
          T (*DIV)(T, int)>
static void ref_typed(void *dst, const std::vector<const void *> &src, size_t count, tempo_op_t op)
{
    int n = (int)src.size();
    for (size_t i = 0; i < count; i++) {
        T acc = ((const T *)src[0])[i];
        for (int k = 1; k < n; k++) {
            T q = ((const T *)src[k])[i];
            acc = op == TEMPO_PROD ? PROD(acc, q) : op == TEMPO_MIN ? MIN(acc, q)
                  : op == TEMPO_MAX ? MAX(acc, q) : SUM(acc, q);
        }
        if (op == TEMPO_AVG && n > 1) {
            acc = DIV(acc, n);
        }
        ((T *)dst)[i] = acc;
    }
}

static void ref_half(tempo_dtype_t d, void *dst, const std::vector<const void *> &src,
                     size_t count, tempo_op_t op)
{
    int n = (int)src.size(), bf = d == TEMPO_BFLOAT16;
    for (size_t i = 0; i < count; i++) {
        uint16_t h = ((const uint16_t *)src[0])[i];
        float acc = bf ? tempo__bf16_to_f32(h) : tempo__f16_to_f32(h);
        for (int k = 1; k < n; k++) {
            h = ((const uint16_t *)src[k])[i];
            float q = bf ? tempo__bf16_to_f32(h) : tempo__f16_to_f32(h);
            acc = op == TEMPO_PROD ? tempo__prod_f32(acc, q) : op == TEMPO_MIN ? tempo__min_f32(acc, q)
                  : op == TEMPO_MAX ? tempo__max_f32(acc, q) : tempo__sum_f32(acc, q);
        }
        if (op == TEMPO_AVG && n > 1) {
            acc = tempo__div_f32(acc, n);
        }
        ((uint16_t *)dst)[i] = bf ? tempo__f32_to_bf16(acc) : tempo__f32_to_f16(acc);
    }
}

#define REF(T, S)                                                                                \
    ref_typed<T, tempo__sum_##S, tempo__prod_##S, tempo__min_##S, tempo__max_##S, tempo__div_##S>

static void ref_reduce(tempo_dtype_t d, void *dst, const std::vector<const void *> &src,
                       size_t count, tempo_op_t op)
{
    switch (d) {
    case TEMPO_INT8: REF(int8_t, i8)(dst, src, count, op); break;
    case TEMPO_UINT8: REF(uint8_t, u8)(dst, src, count, op); break;
    case TEMPO_INT32: REF(int32_t, i32)(dst, src, count, op); break;
    case TEMPO_UINT32: REF(uint32_t, u32)(dst, src, count, op); break;
    case TEMPO_INT64: REF(int64_t, i64)(dst, src, count, op); break;
    case TEMPO_UINT64: REF(uint64_t, u64)(dst, src, count, op); break;
    case TEMPO_FLOAT32: REF(float, f32)(dst, src, count, op); break;
    case TEMPO_FLOAT64: REF(double, f64)(dst, src, count, op); break;
    default: ref_half(d, dst, src, count, op); break;
    }
}

static void test_reduce(void)
{
    const size_t count = 100003;
    static const int ns[] = {1, 2, 3, 8};
    for (int d = 0; d < TEMPO_DTYPE_COUNT; d++) {
        size_t bytes = count * dsize((tempo_dtype_t)d);
        std::vector<std::vector<char>> in(8, std::vector<char>(bytes));
        void *din[8], *dout;
        for (int k = 0; k < 8; k++) {
            fill((tempo_dtype_t)d, in[k].data(), count);
            CK(cudaMalloc(&din[k], bytes));
            CK(cudaMemcpy(din[k], in[k].data(), bytes, cudaMemcpyHostToDevice));
        }
        CK(cudaMalloc(&dout, bytes));
        std::vector<char> want(bytes), got(bytes);
        int bad = 0, cases = 0;
        for (int op = 0; op < TEMPO_OP_COUNT; op++) {
            for (int ni = 0; ni < 4; ni++) {
                int n = ns[ni];
                std::vector<const void *> hs;
                for (int k = 0; k < n; k++) {
                    hs.push_back(in[k].data());
                }
                ref_reduce((tempo_dtype_t)d, want.data(), hs, count, (tempo_op_t)op);
                for (int inplace = 0; inplace < 2; inplace++) {
                    void *dst = dout;
                    const void *srcs[8];
                    for (int k = 0; k < n; k++) {
                        srcs[k] = din[k];
                    }
                    if (inplace) { /* into a copy of operand 0 */
                        CK(cudaMemcpy(dout, din[0], bytes, cudaMemcpyDeviceToDevice));
                        srcs[0] = dout;
                    }
                    CK(tempo__gpu_reduce_n(dst, srcs, n, count, (tempo_dtype_t)d, (tempo_op_t)op,
                                           NULL));
                    CK(cudaMemcpy(got.data(), dout, bytes, cudaMemcpyDeviceToHost));
                    cases++;
                    bad += memcmp(got.data(), want.data(), bytes) != 0;
                }
            }
        }
        ok(bad == 0, "reduce: %s, every op, 1-8 operands, in and out of place: bitwise the host's "
                     "(%d cases, %d differ)", dname((tempo_dtype_t)d), cases, bad);
        for (int k = 0; k < 8; k++) {
            CK(cudaFree(din[k]));
        }
        CK(cudaFree(dout));
    }
}

static void test_convert(void)
{
    const size_t nh = 65536;
    std::vector<uint16_t> h(nh);
    for (size_t i = 0; i < nh; i++) {
        h[i] = (uint16_t)i;
    }
    const size_t nf = 200000;
    std::vector<float> f(nf);
    for (size_t i = 0; i < nf; i++) {
        uint32_t u = (uint32_t)rnd();
        if (i % 3 == 0) { /* ties of both formats: the low bits exactly half */
            u = (u & 0xffffe000u) | 0x1000u;
        } else if (i % 3 == 1) {
            u = (u & 0xffff0000u) | 0x8000u;
        }
        f[i] = tempo__bits_f32(u);
    }
    uint16_t *dh;
    float *df;
    CK(cudaMalloc(&dh, nf * 2));
    CK(cudaMalloc(&df, nf * 4));
    for (int bf = 0; bf < 2; bf++) {
        tempo_dtype_t d = bf ? TEMPO_BFLOAT16 : TEMPO_FLOAT16;
        std::vector<float> gf(nh);
        CK(cudaMemcpy(dh, h.data(), nh * 2, cudaMemcpyHostToDevice));
        CK(tempo__gpu_half_to_f32(d, dh, df, nh, NULL));
        CK(cudaMemcpy(gf.data(), df, nh * 4, cudaMemcpyDeviceToHost));
        int bad = 0;
        for (size_t i = 0; i < nh; i++) {
            float w = bf ? tempo__bf16_to_f32(h[i]) : tempo__f16_to_f32(h[i]);
            bad += tempo__f32_bits(w) != tempo__f32_bits(gf[i]);
        }
        std::vector<uint16_t> gh(nf);
        CK(cudaMemcpy(df, f.data(), nf * 4, cudaMemcpyHostToDevice));
        CK(tempo__gpu_f32_to_half(d, df, dh, nf, NULL));
        CK(cudaMemcpy(gh.data(), dh, nf * 2, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < nf; i++) {
            bad += gh[i] != (bf ? tempo__f32_to_bf16(f[i]) : tempo__f32_to_f16(f[i]));
        }
        ok(bad == 0, "convert: every %s to fp32 and %zu fp32 values to %s: the host's bits (%d "
                     "differ)", dname(d), nf, dname(d), bad);
    }
    CK(cudaFree(dh));
    CK(cudaFree(df));
}

static void make_table(int nl, float *lv)
{
    lv[0] = -1.0f;
    lv[nl - 1] = 1.0f;
    for (int i = 1; i < nl - 1; i++) {
        lv[i] = -1.0f + 2.0f * ((float)i + 0.8f * (urand() - 0.5f)) / (float)(nl - 1);
    }
}

static void test_quant(void)
{
    static const size_t buckets[] = {1, 7, 64, 100, 8192, 10000};
    int bad_s = 0, bad_t = 0, bad_e = 0, bad_d = 0, cases = 0;
    for (size_t bi = 0; bi < sizeof(buckets) / sizeof(buckets[0]); bi++) {
        for (int norm = 0; norm < 3; norm++) {
            for (int bits = 1; bits <= 8; bits++) {
                int nl = bits > 1 && (bits & 1) ? (1 << bits) - 1 : 1 << bits;
                float lv[256], iw[256];
                make_table(nl, lv);
                for (int i = 0; i + 1 < nl; i++) {
                    iw[i] = 1.0f / (lv[i + 1] - lv[i]);
                }
                size_t d = buckets[bi], count = 3 * d + rnd() % (d + 1);
                count = count > 40000 ? 40000 : count;
                size_t nb = (count + d - 1) / d, packed = (count * bits + 7) / 8;
                std::vector<float> x(count), out(count), acc(count);
                float mag = 0.01f + 100.0f * urand();
                for (size_t i = 0; i < count; i++) {
                    x[i] = mag * (3.0f * urand() - 1.5f);
                    acc[i] = urand();
                }
                if (d >= 4) {
                    memset(&x[d], 0, d * sizeof(float)); /* a zero bucket */
                    x[2 * d] = bits == 3 ? NAN : INFINITY;      /* a non-finite one */
                }
                int linf = norm > 0, clip = norm == 2;
                uint64_t seed = rnd();
                /* host */
                std::vector<float> hs(nb);
                std::vector<uint8_t> idx(count), hp(packed + 8);
                for (size_t b = 0; b < nb; b++) {
                    size_t n = count - b * d < d ? count - b * d : d;
                    float s = tempo__qscale(&x[b * d], n, linf, clip);
                    hs[b] = isfinite(s) ? s : NAN;
                    float inv = hs[b] > 0 ? 1.0f / hs[b] : 0.0f;
                    for (size_t i = 0; i < n; i++) {
                        idx[b * d + i] = (uint8_t)tempo__qlevel(x[b * d + i], inv, lv, iw, nl,
                                                                tempo__sr_unit(seed, b * d + i));
                    }
                }
                std::fill(hp.begin(), hp.end(), 0);
                for (size_t i = 0; i < count; i++) { /* LSB first, quant/levels.c's packing */
                    for (int t = 0; t < bits; t++) {
                        size_t bit = i * bits + t;
                        hp[bit / 8] |= (uint8_t)(((idx[i] >> t) & 1) << (bit % 8));
                    }
                }
                /* device */
                float *dx, *ds, *dlv, *dout;
                uint8_t *dp;
                CK(cudaMalloc(&dx, count * 4));
                CK(cudaMalloc(&ds, nb * 4));
                CK(cudaMalloc(&dlv, 256 * 4));
                CK(cudaMalloc(&dout, count * 4));
                CK(cudaMalloc(&dp, packed));
                CK(cudaMemcpy(dx, x.data(), count * 4, cudaMemcpyHostToDevice));
                CK(cudaMemcpy(dlv, lv, nl * 4, cudaMemcpyHostToDevice));
                CK(tempo__gpu_qscale(dx, count, d, linf, clip, ds, NULL));
                std::vector<float> gs(nb);
                CK(cudaMemcpy(gs.data(), ds, nb * 4, cudaMemcpyDeviceToHost));
                bad_s += memcmp(gs.data(), hs.data(), nb * 4) != 0;
                /* the fitters' statistics per bucket (L2 and L-inf) */
                double *dst;
                CK(cudaMalloc(&dst, nb * 3 * sizeof(double)));
                CK(tempo__gpu_qstats(dx, count, d, linf, dst, NULL));
                std::vector<double> gst(nb * 3), hst(nb * 3);
                CK(cudaMemcpy(gst.data(), dst, nb * 3 * sizeof(double), cudaMemcpyDeviceToHost));
                for (size_t b = 0; b < nb; b++) {
                    size_t n = count - b * d < d ? count - b * d : d;
                    tempo__qstats_bucket(&x[b * d], n, linf, &hst[3 * b]);
                }
                bad_t += memcmp(gst.data(), hst.data(), nb * 3 * sizeof(double)) != 0;
                CK(cudaFree(dst));
                CK(tempo__gpu_qencode(dx, count, d, ds, dlv, nl, bits, seed, dp, NULL));
                std::vector<uint8_t> gp(packed);
                CK(cudaMemcpy(gp.data(), dp, packed, cudaMemcpyDeviceToHost));
                bad_e += memcmp(gp.data(), hp.data(), packed) != 0;
                for (int accumulate = 0; accumulate < 2; accumulate++) {
                    CK(cudaMemcpy(dout, acc.data(), count * 4, cudaMemcpyHostToDevice));
                    CK(tempo__gpu_qdecode(dp, ds, count, d, dlv, nl, bits, dout, accumulate,
                                          NULL));
                    CK(cudaMemcpy(out.data(), dout, count * 4, cudaMemcpyDeviceToHost));
                    for (size_t i = 0; i < count; i++) {
                        float v = tempo__qdecode(hs[i / d], lv, idx[i]);
                        v = accumulate ? tempo__sum_f32(acc[i], v) : v;
                        bad_d += tempo__f32_bits(v) != tempo__f32_bits(out[i]);
                    }
                }
                cases++;
                CK(cudaFree(dx));
                CK(cudaFree(ds));
                CK(cudaFree(dlv));
                CK(cudaFree(dout));
                CK(cudaFree(dp));
            }
        }
    }
    ok(bad_s == 0, "qscale: L2, L-inf and clipped scales are tempo__qscale's (%d cases, %d differ)",
       cases, bad_s);
    ok(bad_t == 0, "qstats: the fitters' per-bucket statistics are tempo__qstats_bucket's "
       "(%d cases, %d differ)", cases, bad_t);
    ok(bad_e == 0, "qencode: packed indices are the host's, 1-8 bits (%d cases, %d differ)", cases,
       bad_e);
    ok(bad_d == 0, "qdecode: decoded and accumulated values are the host's (%d differ)", bad_d);
}

int main(void)
{
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        printf("1..0 # SKIP no CUDA device answers (cudaGetDeviceCount: %s)\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 0;
    }
    const char *s = getenv("TEMPO_TEST_SEED");
    rs = s ? strtoull(s, NULL, 0) : (uint64_t)time(NULL) * 2654435761u;
    rs = rs ? rs : 1;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("# device 0: %s, sm_%d%d, %d devices; seed %llu (TEMPO_TEST_SEED replays it)\n",
           prop.name, prop.major, prop.minor, ndev, (unsigned long long)rs);
    test_reduce();
    test_convert();
    test_quant();
    printf("1..%d\n", ntests);
    return nfailed ? 1 : 0;
}
