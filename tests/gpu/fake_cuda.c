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
 *
 * Streams are real queues: each has a thread that runs its operations in order (copies, 32-bit
 * memsets, waits on a 32-bit value, events), so that work on a stream happens after the caller
 * enqueued it, not at once. FAKE_CUDA_MEMSET_MS=N makes every memset take N ms first (a slow
 * kernel): a library that read a buffer without waiting for the stream would read it stale;
 * FAKE_CUDA_COPY_MS_PER_MB=N makes a stream's copies take N ms per MB (a slow bus).
 *
 * CUDA IPC and kernels (gpu/ipc.c): device memory is a memfd, so that another process can map it
 * (cuIpcOpenMemHandle opens /proc/PID/fd/FD; the handle carries the pid, the fd, the length and
 * a serial number per allocation), its pages PROT_NONE in that process too. cuModuleLoadData
 * takes only a fatbin (its magic number checked), cuModuleGetFunction knows tempo_k_reduce, and
 * cuLaunchKernel runs it on the stream as the CPU does the same element math (core/elem.h), the
 * buffers readable and writable only meanwhile. fake_cuda_launches() and fake_cuda_ipc_opens()
 * count them.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cuda.h>

#include "core/elem.h"
#include "tempo.h"

#define MAXREG 256

static struct {
    char *base;
    size_t len;
    int fd;            /* the memfd of an allocation of ours, -1: a peer's, mapped */
    unsigned serial;   /* of an allocation of ours */
} regs[MAXREG];
static unsigned serials;
static unsigned long long launches, ipc_opens;
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
    int fd = memfd_create("fake_cuda", MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0) {
        if (fd >= 0) {
            close(fd);
        }
        return NULL;
    }
    void *p = mmap(NULL, len, PROT_NONE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        close(fd);
        return NULL;
    }
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAXREG; i++) {
        if (!regs[i].base) {
            regs[i].base = p;
            regs[i].len = len;
            regs[i].fd = fd;
            regs[i].serial = ++serials;
            pthread_mutex_unlock(&lock);
            return p;
        }
    }
    pthread_mutex_unlock(&lock);
    munmap(p, len);
    close(fd);
    return NULL;
}

void fake_cuda_free(void *p);
void fake_cuda_free(void *p)
{
    pthread_mutex_lock(&lock);
    int i = find(p, 1);
    if (i >= 0) {
        munmap(regs[i].base, regs[i].len);
        if (regs[i].fd >= 0) {
            close(regs[i].fd);
        }
        regs[i].base = NULL;
    }
    pthread_mutex_unlock(&lock);
}

unsigned long long fake_cuda_copies(void);
unsigned long long fake_cuda_copies(void)
{
    return copies;
}
unsigned long long fake_cuda_launches(void);
unsigned long long fake_cuda_launches(void)
{
    return launches;
}
unsigned long long fake_cuda_ipc_opens(void);
unsigned long long fake_cuda_ipc_opens(void)
{
    return ipc_opens;
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

/* A copy (src, n) or a 32-bit fill (src NULL: n words of fill) that may touch device memory:
 * its pages readable and writable only meanwhile. */
static CUresult dev_access(char *d, const char *s, size_t n, uint32_t fill)
{
    size_t bytes = s ? n : n * 4;
    pthread_mutex_lock(&lock);
    int di = find(d, bytes), si = s ? find(s, n) : -1;
    if ((find(d, 1) >= 0 && di < 0) || (s && find(s, 1) >= 0 && si < 0)) {
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_INVALID_VALUE; /* runs past the end of a device allocation */
    }
    if (di >= 0) {
        mprotect(regs[di].base, regs[di].len, PROT_READ | PROT_WRITE);
    }
    if (si >= 0 && si != di) {
        mprotect(regs[si].base, regs[si].len, PROT_READ | PROT_WRITE);
    }
    if (s) {
        memmove(d, s, n);
    } else {
        for (size_t i = 0; i < n; i++) {
            memcpy(d + 4 * i, &fill, 4);
        }
    }
    if (di >= 0) {
        mprotect(regs[di].base, regs[di].len, PROT_NONE);
    }
    if (si >= 0 && si != di) {
        mprotect(regs[si].base, regs[si].len, PROT_NONE);
    }
    copies += s != NULL;
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n)
{
    pthread_mutex_lock(&lock);
    char *d = (char *)(uintptr_t)dst;
    int di = find(d, n);
    if (find(d, 1) >= 0 && di < 0) {
        pthread_mutex_unlock(&lock);
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (di >= 0) {
        mprotect(regs[di].base, regs[di].len, PROT_READ | PROT_WRITE);
    }
    memset(d, v, n);
    if (di >= 0) {
        mprotect(regs[di].base, regs[di].len, PROT_NONE);
    }
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n)
{
    return dev_access((char *)(uintptr_t)dst, (const char *)(uintptr_t)src, n, 0);
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

/* ---- streams and events ---- */

enum { OP_COPY, OP_FILL, OP_WAIT, OP_EVENT, OP_HOST };
typedef struct sop {
    struct sop *next;
    int kind;
    char *dst;
    const char *src;
    size_t n;
    uint32_t value;
    volatile uint32_t *addr;
    unsigned long long seq;
    void (*fn)(void *); /* OP_HOST */
    void *arg;
} sop_t;

struct CUstream_st {
    pthread_mutex_t m;
    pthread_cond_t cv;
    sop_t *head, *tail;
    unsigned long long enqueued, done; /* operations enqueued and finished */
    int stop;
    pthread_t thread;
};
struct CUevent_st {
    struct CUstream_st *s; /* NULL: never recorded (complete) */
    unsigned long long seq; /* complete once s->done >= seq */
};

static void *stream_main(void *arg)
{
    struct CUstream_st *s = arg;
    const char *ms = getenv("FAKE_CUDA_MEMSET_MS"), *copy_ms = getenv("FAKE_CUDA_COPY_MS_PER_MB");
    pthread_mutex_lock(&s->m);
    for (;;) {
        while (!s->head && !s->stop) {
            pthread_cond_wait(&s->cv, &s->m);
        }
        if (!s->head) {
            break;
        }
        sop_t *o = s->head;
        pthread_mutex_unlock(&s->m);
        switch (o->kind) {
        case OP_COPY:
            if (copy_ms) { /* a slow link: FAKE_CUDA_COPY_MS_PER_MB */
                usleep((useconds_t)(atof(copy_ms) * 1000.0 * (double)o->n / 1048576.0));
            }
            dev_access(o->dst, o->src, o->n, 0);
            break;
        case OP_FILL:
            if (ms) {
                usleep((useconds_t)atoi(ms) * 1000);
            }
            dev_access(o->dst, NULL, o->n, o->value);
            break;
        case OP_WAIT:
            while (__atomic_load_n(o->addr, __ATOMIC_ACQUIRE) != o->value) {
                usleep(100);
            }
            break;
        case OP_HOST: o->fn(o->arg); break;
        default: break;
        }
        pthread_mutex_lock(&s->m);
        s->head = o->next;
        if (!s->head) {
            s->tail = NULL;
        }
        s->done++;
        free(o);
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->m);
    return NULL;
}

static struct CUstream_st *legacy; /* the NULL stream, created on first use */
static pthread_once_t legacy_once = PTHREAD_ONCE_INIT;

CUresult cuStreamCreate(CUstream *ps, unsigned flags)
{
    (void)flags;
    struct CUstream_st *s = calloc(1, sizeof(*s));
    if (!s) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_init(&s->m, NULL);
    pthread_cond_init(&s->cv, NULL);
    pthread_create(&s->thread, NULL, stream_main, s);
    *ps = s;
    return CUDA_SUCCESS;
}

static void legacy_make(void)
{
    cuStreamCreate(&legacy, 0);
}

static struct CUstream_st *stream_of(CUstream s)
{
    if (!s) {
        pthread_once(&legacy_once, legacy_make);
        return legacy;
    }
    return s;
}

static unsigned long long push(CUstream st, sop_t *o)
{
    struct CUstream_st *s = stream_of(st);
    pthread_mutex_lock(&s->m);
    o->seq = ++s->enqueued;
    if (s->tail) {
        s->tail->next = o;
    } else {
        s->head = o;
    }
    s->tail = o;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->m);
    return o->seq;
}

static unsigned long long enqueue(CUstream st, int kind, void *dst, const void *src, size_t n,
                                  uint32_t value)
{
    sop_t *o = calloc(1, sizeof(*o));
    o->kind = kind, o->dst = dst, o->src = src, o->n = n, o->value = value;
    o->addr = dst;
    return push(st, o);
}

static void wait_for(struct CUstream_st *s, unsigned long long seq)
{
    pthread_mutex_lock(&s->m);
    while (s->done < seq) {
        pthread_cond_wait(&s->cv, &s->m);
    }
    pthread_mutex_unlock(&s->m);
}

CUresult cuStreamSynchronize(CUstream st)
{
    struct CUstream_st *s = stream_of(st);
    pthread_mutex_lock(&s->m);
    unsigned long long seq = s->enqueued;
    pthread_mutex_unlock(&s->m);
    wait_for(s, seq);
    return CUDA_SUCCESS;
}

CUresult cuStreamQuery(CUstream st)
{
    struct CUstream_st *s = stream_of(st);
    pthread_mutex_lock(&s->m);
    int idle = s->done == s->enqueued;
    pthread_mutex_unlock(&s->m);
    return idle ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult cuStreamDestroy_v2(CUstream s)
{
    if (!s) {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    pthread_mutex_lock(&s->m);
    s->stop = 1; /* (as the driver: work already enqueued still runs) */
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->m);
    pthread_join(s->thread, NULL);
    free(s);
    return CUDA_SUCCESS;
}

CUresult cuStreamGetCtx(CUstream s, CUcontext *c)
{
    (void)s;
    *c = (CUcontext)&depth;
    return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoHAsync_v2(void *dst, CUdeviceptr src, size_t n, CUstream s)
{
    enqueue(s, OP_COPY, dst, (const void *)(uintptr_t)src, n, 0);
    return CUDA_SUCCESS;
}
CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void *src, size_t n, CUstream s)
{
    enqueue(s, OP_COPY, (void *)(uintptr_t)dst, src, n, 0);
    return CUDA_SUCCESS;
}
CUresult cuMemsetD32Async(CUdeviceptr dst, unsigned v, size_t n, CUstream s)
{
    enqueue(s, OP_FILL, (void *)(uintptr_t)dst, NULL, n, v);
    return CUDA_SUCCESS;
}
CUresult cuStreamWaitValue32_v2(CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned flags)
{
    if (flags != CU_STREAM_WAIT_VALUE_EQ) {
        return CUDA_ERROR_NOT_SUPPORTED; /* (the stand-in knows only what the library uses) */
    }
    enqueue(s, OP_WAIT, (void *)(uintptr_t)addr, NULL, 0, value);
    return CUDA_SUCCESS;
}
CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned flags)
{
    (void)flags;
    *d = (CUdeviceptr)(uintptr_t)p;
    return CUDA_SUCCESS;
}

CUresult cuEventCreate(CUevent *e, unsigned flags)
{
    (void)flags;
    *e = calloc(1, sizeof(**e));
    return *e ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}
CUresult cuEventRecord(CUevent e, CUstream s)
{
    e->s = stream_of(s);
    e->seq = enqueue(s, OP_EVENT, NULL, NULL, 0, 0);
    return CUDA_SUCCESS;
}
CUresult cuEventQuery(CUevent e)
{
    if (!e->s) {
        return CUDA_SUCCESS;
    }
    pthread_mutex_lock(&e->s->m);
    int passed = e->s->done >= e->seq;
    pthread_mutex_unlock(&e->s->m);
    return passed ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}
CUresult cuEventSynchronize(CUevent e)
{
    if (e->s) {
        wait_for(e->s, e->seq);
    }
    return CUDA_SUCCESS;
}
CUresult cuEventDestroy_v2(CUevent e)
{
    free(e);
    return CUDA_SUCCESS;
}

CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void *arg)
{
    sop_t *o = calloc(1, sizeof(*o));
    o->kind = OP_HOST, o->fn = fn, o->arg = arg;
    push(s, o);
    return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *c)
{
    *c = (CUcontext)&depth; /* (one fake context, always current) */
    return CUDA_SUCCESS;
}

/* ---- CUDA IPC ---- */

typedef struct {
    uint32_t magic; /* "FKIP" */
    int32_t pid, fd;
    uint32_t serial;
    uint64_t len;
} fake_ipc_t;
#define FAKE_IPC_MAGIC 0x50494b46u

CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size, CUdeviceptr p)
{
    pthread_mutex_lock(&lock);
    int i = find((const char *)(uintptr_t)p, 1);
    if (i >= 0) {
        *base = (CUdeviceptr)(uintptr_t)regs[i].base;
        *size = regs[i].len;
    }
    pthread_mutex_unlock(&lock);
    return i >= 0 ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p)
{
    pthread_mutex_lock(&lock);
    int i = find((const char *)(uintptr_t)p, 1);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    if (i >= 0 && regs[i].fd >= 0 && regs[i].base == (char *)(uintptr_t)p) { /* a base of ours */
        fake_ipc_t f = {FAKE_IPC_MAGIC, (int32_t)getpid(), regs[i].fd, regs[i].serial,
                        regs[i].len};
        memset(h, 0, sizeof(*h));
        memcpy(h->reserved, &f, sizeof(f));
        r = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcMemHandle h, unsigned flags)
{
    (void)flags;
    fake_ipc_t f;
    memcpy(&f, h.reserved, sizeof(f));
    if (f.magic != FAKE_IPC_MAGIC) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (f.pid == (int32_t)getpid()) {
        return CUDA_ERROR_INVALID_CONTEXT; /* as the driver: not in the exporting process */
    }
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)f.pid, (int)f.fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    void *m = mmap(NULL, f.len, PROT_NONE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAXREG; i++) {
        if (!regs[i].base) {
            regs[i].base = m;
            regs[i].len = f.len;
            regs[i].fd = -1;
            ipc_opens++;
            pthread_mutex_unlock(&lock);
            *p = (CUdeviceptr)(uintptr_t)m;
            return CUDA_SUCCESS;
        }
    }
    pthread_mutex_unlock(&lock);
    munmap(m, f.len);
    return CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuIpcCloseMemHandle(CUdeviceptr p)
{
    pthread_mutex_lock(&lock);
    int i = find((const char *)(uintptr_t)p, 1);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    if (i >= 0 && regs[i].fd < 0 && regs[i].base == (char *)(uintptr_t)p) {
        munmap(regs[i].base, regs[i].len);
        regs[i].base = NULL;
        r = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

CUresult cuCtxGetDevice(CUdevice *d)
{
    *d = 0;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(CUuuid *u, CUdevice d)
{
    memset(u->bytes, 0x5a, sizeof(u->bytes));
    u->bytes[0] = (char)d;
    return CUDA_SUCCESS;
}

/* ---- kernels: tempo_k_reduce, run by the CPU ---- */

static int module_dummy, reduce_dummy;

CUresult cuModuleLoadData(CUmodule *m, const void *image)
{
    static const unsigned char magic[4] = {0x50, 0xed, 0x55, 0xba}; /* a fatbin's */
    if (memcmp(image, magic, 4) != 0) {
        return CUDA_ERROR_INVALID_IMAGE;
    }
    *m = (CUmodule)&module_dummy;
    return CUDA_SUCCESS;
}

CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
    if (m != (CUmodule)&module_dummy || strcmp(name, "tempo_k_reduce") != 0) {
        return CUDA_ERROR_NOT_FOUND;
    }
    *f = (CUfunction)&reduce_dummy;
    return CUDA_SUCCESS;
}

typedef struct {
    char *dst;
    const char *src[8];
    int n, dtype, op;
    size_t count;
} kreduce_t;

#define FAKE_REDUCE(T, S)                                                                         \
    for (size_t i = 0; i < k->count; i++) {                                                      \
        T acc = ((const T *)k->src[0])[i];                                                       \
        for (int j = 1; j < k->n; j++) {                                                         \
            T v = ((const T *)k->src[j])[i];                                                     \
            acc = k->op == TEMPO_PROD  ? tempo__prod_##S(acc, v)                                 \
                  : k->op == TEMPO_MIN ? tempo__min_##S(acc, v)                                  \
                  : k->op == TEMPO_MAX ? tempo__max_##S(acc, v)                                  \
                                       : tempo__sum_##S(acc, v);                                 \
        }                                                                                        \
        ((T *)k->dst)[i] = k->op == TEMPO_AVG && k->n > 1 ? tempo__div_##S(acc, k->n) : acc;     \
    }

static void run_reduce(void *arg)
{
    kreduce_t *k = arg;
    pthread_mutex_lock(&lock);
    int ri[9], nr = 0;
    const char *ptrs[9];
    for (int j = 0; j <= k->n; j++) {
        ptrs[j] = j < k->n ? k->src[j] : k->dst;
    }
    for (int j = 0; j <= k->n; j++) { /* (a kernel on memory that is not the device's faults) */
        int i = find(ptrs[j], 1), dup = 0;
        for (int q = 0; q < nr; q++) {
            dup |= ri[q] == i;
        }
        if (i >= 0 && !dup) {
            mprotect(regs[i].base, regs[i].len, PROT_READ | PROT_WRITE);
            ri[nr++] = i;
        }
    }
    switch (k->dtype) {
    case TEMPO_INT8: FAKE_REDUCE(int8_t, i8) break;
    case TEMPO_UINT8: FAKE_REDUCE(uint8_t, u8) break;
    case TEMPO_INT32: FAKE_REDUCE(int32_t, i32) break;
    case TEMPO_UINT32: FAKE_REDUCE(uint32_t, u32) break;
    case TEMPO_INT64: FAKE_REDUCE(int64_t, i64) break;
    case TEMPO_UINT64: FAKE_REDUCE(uint64_t, u64) break;
    case TEMPO_FLOAT32: FAKE_REDUCE(float, f32) break;
    case TEMPO_FLOAT64: FAKE_REDUCE(double, f64) break;
    default: { /* fp16/bf16, through fp32 */
        int bf = k->dtype == TEMPO_BFLOAT16;
        for (size_t i = 0; i < k->count; i++) {
            uint16_t h0 = ((const uint16_t *)k->src[0])[i];
            float acc = bf ? tempo__bf16_to_f32(h0) : tempo__f16_to_f32(h0);
            for (int j = 1; j < k->n; j++) {
                uint16_t h = ((const uint16_t *)k->src[j])[i];
                float v = bf ? tempo__bf16_to_f32(h) : tempo__f16_to_f32(h);
                acc = k->op == TEMPO_PROD  ? tempo__prod_f32(acc, v)
                      : k->op == TEMPO_MIN ? tempo__min_f32(acc, v)
                      : k->op == TEMPO_MAX ? tempo__max_f32(acc, v)
                                           : tempo__sum_f32(acc, v);
            }
            if (k->op == TEMPO_AVG && k->n > 1) {
                acc = tempo__div_f32(acc, k->n);
            }
            ((uint16_t *)k->dst)[i] = bf ? tempo__f32_to_bf16(acc) : tempo__f32_to_f16(acc);
        }
    }
    }
    for (int q = 0; q < nr; q++) {
        mprotect(regs[ri[q]].base, regs[ri[q]].len, PROT_NONE);
    }
    launches++;
    pthread_mutex_unlock(&lock);
    free(k);
}

CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                        unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params,
                        void **extra)
{
    (void)shmem, (void)extra;
    if (f != (CUfunction)&reduce_dummy || !params || !gx || !gy || !gz || !bx || !by || !bz ||
        (unsigned long long)bx * by * bz > 1024 || gx > 2147483647u || gy > 65535 || gz > 65535) {
        return CUDA_ERROR_INVALID_VALUE;
    }
    kreduce_t *k = calloc(1, sizeof(*k));
    struct {
        const void *p[8];
    } o;
    k->dst = *(char **)params[0];
    memcpy(&o, params[1], sizeof(o));
    k->n = *(int *)params[2];
    k->count = *(size_t *)params[3];
    k->dtype = *(int *)params[4];
    k->op = *(int *)params[5];
    if (k->n < 1 || k->n > 8) {
        free(k);
        return CUDA_ERROR_INVALID_VALUE;
    }
    for (int j = 0; j < k->n; j++) {
        k->src[j] = o.p[j];
    }
    return cuLaunchHostFunc(s, run_reduce, k);
}
