/*
 * perf/gpu_kernels_bench.cu — what the CUDA kernels (gpu/kernels.cu) achieve against the device's
 * own copy: for each kernel, the bytes it must read and write per call over the time of a call
 * (median of -r timed rounds of -n calls each, CUDA events), printed beside cudaMemcpy's
 * device-to-device figure measured the same way (bytes read + written), and their ratio.
 *
 *   perf/gpu_kernels_bench [-c COUNT (fp32 elements, 64M)] [-r ROUNDS (9)] [-n CALLS (20)]
 *
 * Kernels: reduce of 2 and 4 fp32 operands (sum), bf16 sum of 2 (fp32 accumulation), fp32 ->
 * bf16, bucket scales (L2, 8192-coordinate buckets), quantize at 2 and 4 bits (16 levels), decode
 * and decode-accumulate. Traffic counts each input once and each output once.
 * Without a CUDA device it says so and exits 0.
 */
#include <cuda_runtime.h>

#include <algorithm>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <vector>

#include "gpu/kernels.h"

#define CK(call)                                                                                 \
    do {                                                                                         \
        cudaError_t e_ = (cudaError_t)(call);                                                    \
        if (e_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "gpu_kernels_bench: %s: %s\n", #call, cudaGetErrorString(e_));       \
            exit(1);                                                                             \
        }                                                                                        \
    } while (0)

static int rounds = 9, calls = 20;

template <class F> static double median_us(F f)
{
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    f(); /* warm-up */
    CK(cudaDeviceSynchronize());
    std::vector<double> t;
    for (int r = 0; r < rounds; r++) {
        CK(cudaEventRecord(a));
        for (int i = 0; i < calls; i++) {
            f();
        }
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms * 1e3 / calls);
    }
    std::sort(t.begin(), t.end());
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return t[t.size() / 2];
}

static double copy_gbs;

static void row(const char *name, double bytes, double us)
{
    double gbs = bytes / us * 1e-3;
    printf("%-28s %12.0f %10.1f %9.1f %8.0f %%\n", name, bytes, us, gbs,
           copy_gbs > 0 ? 100.0 * gbs / copy_gbs : 0.0);
}

int main(int argc, char **argv)
{
    size_t count = 64u << 20;
    int opt;
    while ((opt = getopt(argc, argv, "c:r:n:h")) != -1) {
        switch (opt) {
        case 'c': count = strtoull(optarg, NULL, 0); break;
        case 'r': rounds = atoi(optarg); break;
        case 'n': calls = atoi(optarg); break;
        default:
            fprintf(stderr, "usage: gpu_kernels_bench [-c COUNT] [-r ROUNDS] [-n CALLS]\n");
            return opt == 'h' ? 0 : 2;
        }
    }
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        printf("gpu_kernels_bench: no CUDA device answers (%s)\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 0;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("# %s (sm_%d%d), %zu fp32 elements, median of %d rounds of %d calls\n", prop.name,
           prop.major, prop.minor, count, rounds, calls);
    float *a[4], *out, *scales, *lv;
    uint16_t *h[3];
    uint8_t *packed;
    for (int k = 0; k < 4; k++) {
        CK(cudaMalloc(&a[k], count * 4));
        CK(cudaMemset(a[k], 0x3f, count * 4)); /* 0x3f3f3f3f: 0.75 */
    }
    for (int k = 0; k < 3; k++) {
        CK(cudaMalloc(&h[k], count * 2));
        CK(cudaMemset(h[k], 0x3f, count * 2));
    }
    const size_t bucket = 8192, nb = (count + bucket - 1) / bucket;
    CK(cudaMalloc(&out, count * 4));
    CK(cudaMalloc(&scales, nb * 4));
    CK(cudaMalloc(&packed, count));
    CK(cudaMalloc(&lv, 256 * 4));
    float table[16];
    for (int i = 0; i < 16; i++) {
        table[i] = -1.0f + 2.0f * i / 15.0f;
    }
    CK(cudaMemcpy(lv, table, sizeof(table), cudaMemcpyHostToDevice));
    const double n4 = (double)count * 4;
    printf("%-28s %12s %10s %9s %9s\n", "# kernel", "bytes", "us", "GB/s", "of copy");
    double us = median_us([&] { CK(cudaMemcpyAsync(out, a[0], count * 4, cudaMemcpyDeviceToDevice)); });
    copy_gbs = 2 * n4 / us * 1e-3;
    row("copy (cudaMemcpy D2D)", 2 * n4, us);
    const void *s2[2] = {a[0], a[1]}, *s4[4] = {a[0], a[1], a[2], a[3]};
    row("reduce fp32 sum, 2", 3 * n4,
        median_us([&] { CK(tempo__gpu_reduce_n(out, s2, 2, count, TEMPO_FLOAT32, TEMPO_SUM, 0)); }));
    row("reduce fp32 sum, 2 in place", 3 * n4,
        median_us([&] { CK(tempo__gpu_reduce_n(a[0], s2, 2, count, TEMPO_FLOAT32, TEMPO_SUM, 0)); }));
    row("reduce fp32 sum, 4", 5 * n4,
        median_us([&] { CK(tempo__gpu_reduce_n(out, s4, 4, count, TEMPO_FLOAT32, TEMPO_SUM, 0)); }));
    const void *hs[2] = {h[0], h[1]};
    row("reduce bf16 sum, 2", 3.0 * count * 2,
        median_us([&] { CK(tempo__gpu_reduce_n(h[2], hs, 2, count, TEMPO_BFLOAT16, TEMPO_SUM, 0)); }));
    row("fp32 -> bf16", 6.0 * count,
        median_us([&] { CK(tempo__gpu_f32_to_half(TEMPO_BFLOAT16, a[0], h[2], count, 0)); }));
    row("qscale L2 (bucket 8192)", n4 + nb * 4,
        median_us([&] { CK(tempo__gpu_qscale(a[0], count, bucket, 0, 0, scales, 0)); }));
    double *st;
    CK(cudaMalloc(&st, nb * 3 * sizeof(double)));
    row("qstats L2 (bucket 8192)", n4 + nb * 24,
        median_us([&] { CK(tempo__gpu_qstats(a[0], count, bucket, 0, st, 0)); }));
    for (int bits = 2; bits <= 4; bits += 2) {
        char name[64];
        double pb = (double)(count * bits + 7) / 8;
        snprintf(name, sizeof(name), "qencode %d bits", bits);
        row(name, n4 + nb * 4 + pb, median_us([&] {
                CK(tempo__gpu_qencode(a[0], count, bucket, scales, lv, 1 << bits, bits, 42,
                                      packed, 0));
            }));
        snprintf(name, sizeof(name), "qdecode %d bits", bits);
        row(name, pb + nb * 4 + n4, median_us([&] {
                CK(tempo__gpu_qdecode(packed, scales, count, bucket, lv, 1 << bits, bits, out, 0,
                                      0));
            }));
        snprintf(name, sizeof(name), "qdecode %d bits, accumulate", bits);
        row(name, pb + nb * 4 + 2 * n4, median_us([&] {
                CK(tempo__gpu_qdecode(packed, scales, count, bucket, lv, 1 << bits, bits, out, 1,
                                      0));
            }));
    }
    return 0;
}
