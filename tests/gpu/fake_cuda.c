/*
 * fake_cuda.c — a stand-in CUDA driver (built as tests/gpu/fake/libcuda.so.1) for testing
 * gpu/cuda.c's staging on machines without a GPU: tests/gpu/gpu_coll runs its device cases with
 * LD_LIBRARY_PATH pointing here, so that libtempo's dlopen("libcuda.so.1") finds this one.
 *
 * "Device memory" comes from fake_cuda_malloc: whole pages, mapped PROT_NONE except inside
 * cuMemcpy. So any read or write of device memory by the library outside the driver's copy
 * faults (SIGSEGV ends the rank): the test proves the library only ever copies device buffers.
 * Implements the entry points gpu/cuda.c and perf/devmem.c resolve, with the driver's signatures; the test
 * allocates and copies through fake_cuda_malloc, fake_cuda_free and cuMemcpy.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cuda.h>

#define MAXREG 256

static struct {
    char *base;
    size_t len;
} regs[MAXREG];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int depth; /* contexts pushed (one fake context) */
static unsigned long long copies;

static int find(const char *p, size_t n)
{
    for (int i = 0; i < MAXREG; i++) {
        if (regs[i].base && p >= regs[i].base && p + n <= regs[i].base + regs[i].len) {
            return i;
        }
    }
    return -1;
}

void *fake_cuda_malloc(size_t n);
void *fake_cuda_malloc(size_t n)
{
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), len = (n + pg - 1) / pg * pg;
    len = len ? len : pg;
    void *p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        return NULL;
    }
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAXREG; i++) {
        if (!regs[i].base) {
            regs[i].base = p;
            regs[i].len = len;
            pthread_mutex_unlock(&lock);
            return p;
        }
    }
    pthread_mutex_unlock(&lock);
    munmap(p, len);
    return NULL;
}

void fake_cuda_free(void *p);
void fake_cuda_free(void *p)
{
    pthread_mutex_lock(&lock);
    int i = find(p, 1);
    if (i >= 0) {
        munmap(regs[i].base, regs[i].len);
        regs[i].base = NULL;
    }
    pthread_mutex_unlock(&lock);
}

unsigned long long fake_cuda_copies(void);
unsigned long long fake_cuda_copies(void)
{
    return copies;
}

CUresult cuInit(unsigned int flags)
{
    (void)flags;
    return CUDA_SUCCESS;
}
CUresult cuDriverGetVersion(int *v)
{
    *v = 13000;
    return CUDA_SUCCESS;
}
CUresult cuDeviceGetCount(int *n)
{
    *n = 1;
    return CUDA_SUCCESS;
}
CUresult cuGetErrorString(CUresult r, const char **s)
{
    *s = r == CUDA_SUCCESS ? "no error" : "fake driver error";
    return CUDA_SUCCESS;
}

CUresult cuPointerGetAttributes(unsigned n, CUpointer_attribute *at, void **data, CUdeviceptr ptr)
{
    pthread_mutex_lock(&lock);
    int dev = find((const char *)(uintptr_t)ptr, 1) >= 0;
    pthread_mutex_unlock(&lock);
    for (unsigned k = 0; k < n; k++) {
        switch (at[k]) {
        case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
            *(CUmemorytype *)data[k] = dev ? CU_MEMORYTYPE_DEVICE : (CUmemorytype)0;
            break;
        case CU_POINTER_ATTRIBUTE_IS_MANAGED: *(unsigned *)data[k] = 0; break;
        case CU_POINTER_ATTRIBUTE_CONTEXT: *(CUcontext *)data[k] = dev ? (CUcontext)&depth : NULL; break;
        default: return CUDA_ERROR_INVALID_VALUE;
        }
    }
    return CUDA_SUCCESS;
}

/* A copy that may touch device memory: its pages readable and writable only meanwhile. */
CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    char *d = (char *)(uintptr_t)dst;
    const char *s = (const char *)(uintptr_t)src;
    pthread_mutex_lock(&lock);
    int di = find(d, n), si = find(s, n);
    if ((find(d, 1) >= 0 && di < 0) || (find(s, 1) >= 0 && si < 0)) {
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_INVALID_VALUE; /* runs past the end of a device allocation */
    }
    if (di >= 0) {
        mprotect(regs[di].base, regs[di].len, PROT_READ | PROT_WRITE);
    }
    if (si >= 0 && si != di) {
        mprotect(regs[si].base, regs[si].len, PROT_READ | PROT_WRITE);
    }
    memmove(d, s, n);
    if (di >= 0) {
        mprotect(regs[di].base, regs[di].len, PROT_NONE);
    }
    if (si >= 0 && si != di) {
        mprotect(regs[si].base, regs[si].len, PROT_NONE);
    }
    copies++;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

CUresult cuMemAllocHost_v2(void **p, size_t n)
{
    if (depth <= 0) {
        return CUDA_ERROR_INVALID_CONTEXT; /* as the driver: page-locked memory needs a context */
    }
    *p = malloc(n);
    return *p ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
CUresult cuMemFreeHost(void *p)
{
    if (depth <= 0) {
        return CUDA_ERROR_INVALID_CONTEXT;
    }
    free(p);
    return CUDA_SUCCESS;
}
CUresult cuCtxPushCurrent_v2(CUcontext c)
{
    (void)c;
    __atomic_add_fetch(&depth, 1, __ATOMIC_SEQ_CST);
    return CUDA_SUCCESS;
}
CUresult cuCtxPopCurrent_v2(CUcontext *c)
{
    if (c) {
        *c = (CUcontext)&depth;
    }
    __atomic_sub_fetch(&depth, 1, __ATOMIC_SEQ_CST);
    return CUDA_SUCCESS;
}

/* What perf/devmem.c (all_reduce_perf -M cuda) uses besides the above. */
CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
    if (ordinal != 0) {
        return CUDA_ERROR_INVALID_DEVICE;
    }
    *d = 0;
    return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
    (void)d;
    *c = (CUcontext)&depth;
    return CUDA_SUCCESS;
}
CUresult cuCtxSetCurrent(CUcontext c)
{
    (void)c;
    return CUDA_SUCCESS;
}
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
    void *m = fake_cuda_malloc(n);
    *p = (CUdeviceptr)(uintptr_t)m;
    return m ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
CUresult cuMemFree_v2(CUdeviceptr p)
{
    fake_cuda_free((void *)(uintptr_t)p);
    return CUDA_SUCCESS;
}
