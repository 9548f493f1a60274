/*
 * devmem.c — `-M cuda`: the benchmarks' buffers in CUDA device memory (as nccl-tests measures
 * NCCL), from the CUDA driver loaded at run time: the one libtempo loads (TEMPO_CUDA_DRIVER,
 * default libcuda.so.1), so that the perf programs link no CUDA library either. Each rank uses
 * device (local rank mod device count), through its primary context; buffers are filled and
 * checked through host copies (common.c), never touched directly.
 */
#include "config.h"

#include "perf/devmem.h"

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef int cu_result_t; /* CUresult: 0 is success */

static struct {
    cu_result_t (*init)(unsigned);
    cu_result_t (*device_count)(int *);
    cu_result_t (*device_get)(int *, int);
    cu_result_t (*ctx_retain)(void **, int);
    cu_result_t (*ctx_set)(void *);
    cu_result_t (*alloc)(unsigned long long *, size_t);
    cu_result_t (*free)(unsigned long long);
    cu_result_t (*memcpy)(unsigned long long, unsigned long long, size_t);
} cu;
static int device;

/* The rank's place among the ranks of its host, from the launchers' variables (0 if none). */
static int local_rank(void)
{
    static const char *const vars[] = {"TEMPO_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK",
                                       "MPI_LOCALRANKID", "SLURM_LOCALID", "TEMPO_RANK"};
    for (size_t k = 0; k < sizeof(vars) / sizeof(vars[0]); k++) {
        const char *v = getenv(vars[k]);
        if (v != NULL && *v != '\0')
            return atoi(v);
    }
    return 0;
}

int perf_dev_init(char *why, size_t len)
{
    const char *path = getenv("TEMPO_CUDA_DRIVER");
    path = path != NULL && *path != '\0' ? path : "libcuda.so.1";
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        snprintf(why, len, "no CUDA driver (%s)", dlerror());
        return -1;
    }
    static const struct {
        const char *name;
        void **slot;
    } syms[] = {
        {"cuInit", (void **)&cu.init},
        {"cuDeviceGetCount", (void **)&cu.device_count},
        {"cuDeviceGet", (void **)&cu.device_get},
        {"cuDevicePrimaryCtxRetain", (void **)&cu.ctx_retain},
        {"cuCtxSetCurrent", (void **)&cu.ctx_set},
        {"cuMemAlloc_v2", (void **)&cu.alloc},
        {"cuMemFree_v2", (void **)&cu.free},
        {"cuMemcpy", (void **)&cu.memcpy},
    };
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        if ((*syms[i].slot = dlsym(h, syms[i].name)) == NULL) {
            snprintf(why, len, "the CUDA driver %s lacks %s", path, syms[i].name);
            return -1;
        }
    }
    int n = 0, dev = 0;
    void *ctx = NULL;
    cu_result_t r = cu.init(0);
    if (r == 0)
        r = cu.device_count(&n);
    if (r != 0 || n == 0) {
        snprintf(why, len, "the CUDA driver finds no device (error %d, %d devices)", r, n);
        return -1;
    }
    device = local_rank() % n;
    r = cu.device_get(&dev, device);
    if (r == 0)
        r = cu.ctx_retain(&ctx, dev);
    if (r == 0)
        r = cu.ctx_set(ctx);
    if (r != 0) {
        snprintf(why, len, "device %d: its primary context: CUDA error %d", device, r);
        return -1;
    }
    return 0;
}

int perf_dev_index(void)
{
    return device;
}

void *perf_dev_alloc(size_t n)
{
    unsigned long long p = 0;
    return cu.alloc(&p, n ? n : 1) == 0 ? (void *)(uintptr_t)p : NULL;
}

void perf_dev_free(void *p)
{
    if (p != NULL)
        cu.free((unsigned long long)(uintptr_t)p);
}

int perf_dev_copy(void *dst, const void *src, size_t n)
{
    if (n == 0)
        return 0;
    return cu.memcpy((unsigned long long)(uintptr_t)dst, (unsigned long long)(uintptr_t)src, n);
}
