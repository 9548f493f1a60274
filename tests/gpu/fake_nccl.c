/*
 * fake_nccl.c — a stand-in NCCL (built as tests/gpu/fake/libnccl.so.2) for testing gpu/nccl.c on
 * machines without a GPU: tests/gpu/gpu_coll's nccl jobs load it through TEMPO_NCCL_LIBRARY, with
 * the stand-in CUDA driver (fake_cuda.c) through TEMPO_CUDA_DRIVER.
 *
 * The ranks of a communicator share a POSIX shared-memory segment named by the unique id. Every
 * collective runs on its stream, in order, as a host function of the stand-in driver's stream
 * (cuLaunchHostFunc): it copies its input from device memory into its slot (the driver's cuMemcpy,
 * the only way into the stand-in's device memory), meets the others at a barrier, computes its
 * output from the slots into device memory, and meets them again. So, as with NCCL, a call is
 * enqueued at once and runs later on the stream, every rank must make the same calls in the same
 * order, and a rank whose peer never makes its call waits forever, until ncclCommAbort.
 *
 * Types int32, int64, float32, float64 and bfloat16 (others: ncclInvalidArgument); sum, prod, max, min, avg.
 * Calls are counted (fake_nccl_calls). Failures on demand: FAKE_NCCL_FAIL=sync|async makes call
 * number FAKE_NCCL_FAIL_CALL (from 1) of rank FAKE_NCCL_FAIL_RANK fail: sync returns
 * ncclInternalError from the call, async lets the call run nothing and report
 * ncclUnhandledCudaError through ncclCommGetAsyncError.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#define SLOT ((size_t)8 << 20)

typedef struct {
    int n;
    int arrived, gen, abort;
    char pad[48];
} shm_t;

struct ncclComm {
    int n, rank;
    shm_t *sh;
    size_t len;
    ncclResult_t async;
    int aborted;
    unsigned calls;
};

static unsigned long long ncalls;
unsigned long long fake_nccl_calls(void);
unsigned long long fake_nccl_calls(void)
{
    return ncalls;
}

/* The stand-in driver's copy and host functions (the same library libtempo loaded). */
static CUresult (*drv_copy)(CUdeviceptr, CUdeviceptr, size_t);
static CUresult (*drv_host_fn)(CUstream, CUhostFn, void *);
static int drv(void)
{
    if (!drv_copy) {
        const char *p = getenv("TEMPO_CUDA_DRIVER");
        void *h = dlopen(p ? p : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        drv_copy = h ? (CUresult(*)(CUdeviceptr, CUdeviceptr, size_t))dlsym(h, "cuMemcpy") : NULL;
        drv_host_fn = h ? (CUresult(*)(CUstream, CUhostFn, void *))dlsym(h, "cuLaunchHostFunc")
                        : NULL;
    }
    return drv_copy && drv_host_fn;
}

static char *slot(ncclComm_t c, int r)
{
    return (char *)(c->sh + 1) + (size_t)r * SLOT;
}

/* All ranks meet; -1 once the communicator was aborted (here or by a peer). */
static int barrier(ncclComm_t c)
{
    shm_t *h = c->sh;
    int g = __atomic_load_n(&h->gen, __ATOMIC_ACQUIRE);
    if (__atomic_add_fetch(&h->arrived, 1, __ATOMIC_ACQ_REL) == c->n) {
        __atomic_store_n(&h->arrived, 0, __ATOMIC_RELAXED);
        __atomic_add_fetch(&h->gen, 1, __ATOMIC_RELEASE);
        return 0;
    }
    while (__atomic_load_n(&h->gen, __ATOMIC_ACQUIRE) == g) {
        if (__atomic_load_n(&h->abort, __ATOMIC_ACQUIRE) || c->aborted) {
            if (!c->aborted) { /* a peer aborted: as NCCL's proxy finds it */
                __atomic_store_n(&c->async, ncclRemoteError, __ATOMIC_RELEASE);
            }
            return -1;
        }
        usleep(20);
    }
    return 0;
}

const char *ncclGetErrorString(ncclResult_t r)
{
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    default: return "fake NCCL error";
    }
}

ncclResult_t ncclGetVersion(int *v)
{
    *v = 22809;
    return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    memset(id, 0, sizeof(*id));
    snprintf(id->internal, sizeof(id->internal), "/fake-nccl-%d-%ld", (int)getpid(),
             (long)t.tv_nsec);
    return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *cp, int n, ncclUniqueId id, int rank)
{
    if (!drv() || n < 1 || rank < 0 || rank >= n || id.internal[0] != '/') {
        return ncclInvalidArgument;
    }
    size_t len = sizeof(shm_t) + (size_t)n * SLOT;
    int fd = shm_open(id.internal, O_CREAT | O_RDWR, 0600);
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0) {
        return ncclSystemError;
    }
    void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) {
        return ncclSystemError;
    }
    ncclComm_t c = calloc(1, sizeof(*c));
    c->n = n, c->rank = rank, c->sh = m, c->len = len;
    c->sh->n = n;
    if (barrier(c) != 0) {
        return ncclSystemError;
    }
    if (rank == 0) {
        shm_unlink(id.internal); /* (everyone has it mapped) */
    }
    *cp = c;
    return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t c)
{
    if (c) {
        c->aborted = 1;
        __atomic_store_n(&c->sh->abort, 1, __ATOMIC_RELEASE);
    }
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c)
{
    if (c) {
        munmap(c->sh, c->len);
        free(c);
    }
    return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *r)
{
    *r = __atomic_load_n(&c->async, __ATOMIC_ACQUIRE);
    return ncclSuccess;
}

enum { K_ALLREDUCE, K_REDUCE_SCATTER, K_ALLGATHER, K_BROADCAST, K_REDUCE };
typedef struct {
    ncclComm_t c;
    int kind, root, fail;
    const void *in;
    void *out;
    size_t count; /* per-rank block (reduce-scatter: the output; all-gather: the input) */
    ncclDataType_t t;
    ncclRedOp_t op;
} job_t;

static size_t esize(ncclDataType_t t)
{
    return t == ncclBfloat16 ? 2 : t == ncclInt32 || t == ncclFloat32 ? 4 : 8;
}

static float bf16_in(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t bf16_out(float f) /* round to nearest even (no NaNs in the tests) */
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

#define REDUCE(T)                                                                                  \
    do {                                                                                           \
        T *o = (T *)out;                                                                           \
        for (size_t i = 0; i < cnt; i++) {                                                         \
            T v = ((const T *)(slot(c, 0) + at))[i];                                               \
            for (int r = 1; r < c->n; r++) {                                                       \
                T x = ((const T *)(slot(c, r) + at))[i];                                           \
                v = op == ncclSum || op == ncclAvg ? v + x                                         \
                    : op == ncclProd               ? v * x                                         \
                    : op == ncclMax                ? (x > v ? x : v)                               \
                                                   : (x < v ? x : v);                              \
            }                                                                                      \
            o[i] = op == ncclAvg ? (T)(v / (T)c->n) : v;                                           \
        }                                                                                          \
    } while (0)

/* out[0..cnt) = the reduction over the ranks' slots at byte offset at. */
static void reduce_slots(ncclComm_t c, void *out, size_t at, size_t cnt, ncclDataType_t t,
                         ncclRedOp_t op)
{
    if (t == ncclBfloat16) { /* accumulated in float32, rounded once */
        for (size_t i = 0; i < cnt; i++) {
            float v = bf16_in(((const uint16_t *)(slot(c, 0) + at))[i]);
            for (int r = 1; r < c->n; r++) {
                float x = bf16_in(((const uint16_t *)(slot(c, r) + at))[i]);
                v = op == ncclSum || op == ncclAvg ? v + x
                    : op == ncclProd               ? v * x
                    : op == ncclMax                ? (x > v ? x : v)
                                                   : (x < v ? x : v);
            }
            ((uint16_t *)out)[i] = bf16_out(op == ncclAvg ? v / (float)c->n : v);
        }
        return;
    }
    switch (t) {
    case ncclInt32: REDUCE(int32_t); break;
    case ncclInt64: REDUCE(int64_t); break;
    case ncclFloat32: REDUCE(float); break;
    default: REDUCE(double); break;
    }
}

static void run(void *arg)
{
    job_t *j = arg;
    ncclComm_t c = j->c;
    if (j->fail) {
        __atomic_store_n(&c->async, ncclUnhandledCudaError, __ATOMIC_RELEASE);
        free(j);
        return;
    }
    size_t es = esize(j->t), blk = j->count * es, n = (size_t)c->n;
    size_t in_bytes = j->kind == K_REDUCE_SCATTER ? blk * n : blk;
    size_t out_bytes = j->kind == K_ALLGATHER ? blk * n : blk;
    int sends = j->kind != K_BROADCAST || c->rank == j->root;
    if (sends && in_bytes) {
        drv_copy((CUdeviceptr)(uintptr_t)slot(c, c->rank), (CUdeviceptr)(uintptr_t)j->in,
                 in_bytes);
    }
    if (barrier(c) != 0) {
        free(j);
        return;
    }
    char *tmp = malloc(out_bytes ? out_bytes : 1);
    int writes = (j->kind != K_REDUCE || c->rank == j->root) && out_bytes;
    switch (j->kind) {
    case K_ALLREDUCE:
    case K_REDUCE: reduce_slots(c, tmp, 0, j->count, j->t, j->op); break;
    case K_REDUCE_SCATTER:
        reduce_slots(c, tmp, (size_t)c->rank * blk, j->count, j->t, j->op);
        break;
    case K_ALLGATHER:
        for (size_t r = 0; r < n; r++) {
            memcpy(tmp + r * blk, slot(c, (int)r), blk);
        }
        break;
    default: memcpy(tmp, slot(c, j->root), blk); break;
    }
    if (writes) {
        drv_copy((CUdeviceptr)(uintptr_t)j->out, (CUdeviceptr)(uintptr_t)tmp, out_bytes);
    }
    free(tmp);
    barrier(c); /* (no slot is overwritten before every rank has read it) */
    free(j);
}

static ncclResult_t call(ncclComm_t c, int kind, const void *in, void *out, size_t count,
                         ncclDataType_t t, ncclRedOp_t op, int root, cudaStream_t s)
{
    if (t != ncclInt32 && t != ncclInt64 && t != ncclFloat32 && t != ncclFloat64 &&
        t != ncclBfloat16) {
        return ncclInvalidArgument;
    }
    size_t in_bytes = count * esize(t) * (kind == K_REDUCE_SCATTER ? (size_t)c->n : 1);
    if (in_bytes > SLOT) {
        return ncclInvalidArgument; /* (the stand-in's slots are 8 MB) */
    }
    __atomic_add_fetch(&ncalls, 1, __ATOMIC_RELAXED);
    unsigned k = ++c->calls;
    const char *how = getenv("FAKE_NCCL_FAIL"), *who = getenv("FAKE_NCCL_FAIL_RANK"),
               *when = getenv("FAKE_NCCL_FAIL_CALL");
    int fail = how && (!strcmp(how, "sync") || !strcmp(how, "async")) && who && when &&
               atoi(who) == c->rank && (unsigned)atoi(when) == k;
    if (fail && !strcmp(how, "sync")) {
        return ncclInternalError;
    }
    job_t *j = calloc(1, sizeof(*j));
    *j = (job_t){c, kind, root, fail, in, out, count, t, op};
    drv_host_fn((CUstream)s, run, j);
    return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *in, void *out, size_t count, ncclDataType_t t,
                           ncclRedOp_t op, ncclComm_t c, cudaStream_t s)
{
    return call(c, K_ALLREDUCE, in, out, count, t, op, 0, s);
}
ncclResult_t ncclReduceScatter(const void *in, void *out, size_t count, ncclDataType_t t,
                               ncclRedOp_t op, ncclComm_t c, cudaStream_t s)
{
    return call(c, K_REDUCE_SCATTER, in, out, count, t, op, 0, s);
}
ncclResult_t ncclAllGather(const void *in, void *out, size_t count, ncclDataType_t t,
                           ncclComm_t c, cudaStream_t s)
{
    return call(c, K_ALLGATHER, in, out, count, t, ncclSum, 0, s);
}
ncclResult_t ncclBroadcast(const void *in, void *out, size_t count, ncclDataType_t t, int root,
                           ncclComm_t c, cudaStream_t s)
{
    return call(c, K_BROADCAST, in, out, count, t, ncclSum, root, s);
}
ncclResult_t ncclReduce(const void *in, void *out, size_t count, ncclDataType_t t, ncclRedOp_t op,
                        int root, ncclComm_t c, cudaStream_t s)
{
    return call(c, K_REDUCE, in, out, count, t, op, root, s);
}
