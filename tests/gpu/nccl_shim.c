/*
 * nccl_shim.c — NCCL with failures on demand (built as tests/gpu/fake/libnccl_shim.so): every
 * entry point libtempo resolves (gpu/nccl.c) forwards to the NCCL library at NCCL_SHIM_REAL (the
 * real libnccl.so.2 on a GPU machine; the stand-in, fake_nccl.c, here), except that
 * NCCL_SHIM_FAIL=sync|async makes collective call number NCCL_SHIM_FAIL_CALL (from 1) of rank
 * NCCL_SHIM_FAIL_RANK fail: sync returns ncclInternalError without calling NCCL; async calls it,
 * then reports ncclUnhandledCudaError through ncclCommGetAsyncError from then on. So gpu_coll can
 * force an error out of the real NCCL (tests/gpu/device.sh) and check that tempo maps it, names
 * the rank, aborts NCCL's communicator and fails every later call.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/nccl_api.h"

static tempo__nccl_api_t real;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int loaded;

static void load(void)
{
    const char *path = getenv("NCCL_SHIM_REAL");
    void *h = dlopen(path ? path : "libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "nccl_shim: %s\n", dlerror());
        return;
    }
#define SYM(member, name) {name, (void **)&real.member},
    static const struct {
        const char *name;
        void **slot;
    } syms[] = {TEMPO__NCCL_ENTRY_POINTS(SYM)};
#undef SYM
    for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
        if (!(*syms[i].slot = dlsym(h, syms[i].name))) {
            fprintf(stderr, "nccl_shim: %s lacks %s\n", path ? path : "libnccl.so.2",
                    syms[i].name);
            return;
        }
    }
    loaded = 1;
}

#define LOADED()                                                                                   \
    do {                                                                                           \
        pthread_once(&once, load);                                                                 \
        if (!loaded) {                                                                             \
            return ncclSystemError;                                                                \
        }                                                                                          \
    } while (0)

/* The communicators made through the shim: their rank, calls so far, and a pending async error. */
static struct {
    ncclComm_t comm;
    int rank;
    unsigned calls;
    int failed;
} comms[64];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* Whether this call of c fails, and how: 0 no, 1 sync, 2 async. */
static int fails(ncclComm_t c)
{
    const char *how = getenv("NCCL_SHIM_FAIL"), *who = getenv("NCCL_SHIM_FAIL_RANK"),
               *when = getenv("NCCL_SHIM_FAIL_CALL");
    int f = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < 64; i++) {
        if (comms[i].comm == c) {
            unsigned k = ++comms[i].calls;
            if (how && who && when && atoi(who) == comms[i].rank && (unsigned)atoi(when) == k) {
                f = !strcmp(how, "sync") ? 1 : !strcmp(how, "async") ? 2 : 0;
            }
            comms[i].failed |= f == 2;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return f;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
    LOADED();
    return real.get_unique_id(id);
}

ncclResult_t ncclCommInitRank(ncclComm_t *cp, int n, ncclUniqueId id, int rank)
{
    LOADED();
    ncclResult_t r = real.init_rank(cp, n, id, rank);
    if (r == ncclSuccess) {
        pthread_mutex_lock(&lock);
        for (int i = 0; i < 64; i++) {
            if (!comms[i].comm) {
                comms[i].comm = *cp;
                comms[i].rank = rank;
                break;
            }
        }
        pthread_mutex_unlock(&lock);
    }
    return r;
}

static void forget(ncclComm_t c)
{
    pthread_mutex_lock(&lock);
    for (int i = 0; i < 64; i++) {
        if (comms[i].comm == c) {
            memset(&comms[i], 0, sizeof(comms[i]));
        }
    }
    pthread_mutex_unlock(&lock);
}

ncclResult_t ncclCommDestroy(ncclComm_t c)
{
    LOADED();
    forget(c);
    return real.destroy(c);
}

ncclResult_t ncclCommAbort(ncclComm_t c)
{
    LOADED();
    forget(c);
    return real.abort(c);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *r)
{
    LOADED();
    int failed = 0;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < 64; i++) {
        failed |= comms[i].comm == c && comms[i].failed;
    }
    pthread_mutex_unlock(&lock);
    if (failed) {
        *r = ncclUnhandledCudaError;
        return ncclSuccess;
    }
    return real.async_error(c, r);
}

const char *ncclGetErrorString(ncclResult_t r)
{
    pthread_once(&once, load);
    return loaded ? real.error_string(r) : "nccl_shim: no NCCL";
}

ncclResult_t ncclGetVersion(int *v)
{
    LOADED();
    return real.version(v);
}

#define CALL(expr)                                                                                 \
    do {                                                                                           \
        LOADED();                                                                                  \
        int f_ = fails(c);                                                                         \
        if (f_ == 1) {                                                                             \
            return ncclInternalError;                                                              \
        }                                                                                          \
        return (expr);                                                                             \
    } while (0)

ncclResult_t ncclAllReduce(const void *in, void *out, size_t count, ncclDataType_t t,
                           ncclRedOp_t op, ncclComm_t c, cudaStream_t s)
{
    CALL(real.all_reduce(in, out, count, t, op, c, s));
}
ncclResult_t ncclReduceScatter(const void *in, void *out, size_t count, ncclDataType_t t,
                               ncclRedOp_t op, ncclComm_t c, cudaStream_t s)
{
    CALL(real.reduce_scatter(in, out, count, t, op, c, s));
}
ncclResult_t ncclAllGather(const void *in, void *out, size_t count, ncclDataType_t t,
                           ncclComm_t c, cudaStream_t s)
{
    CALL(real.all_gather(in, out, count, t, c, s));
}
ncclResult_t ncclBroadcast(const void *in, void *out, size_t count, ncclDataType_t t, int root,
                           ncclComm_t c, cudaStream_t s)
{
    CALL(real.broadcast(in, out, count, t, root, c, s));
}
ncclResult_t ncclReduce(const void *in, void *out, size_t count, ncclDataType_t t, ncclRedOp_t op,
                        int root, ncclComm_t c, cudaStream_t s)
{
    CALL(real.reduce(in, out, count, t, op, root, c, s));
}
