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
