/*
 * gpu/cuda.c — CUDA device buffers through host staging (gpu/cuda.h), with the CUDA driver API
 * loaded at run time.
 *
 * Contexts: a device pointer belongs to a context (the runtime's primary context of its device,
 * for cudaMalloc). Copies run in the caller's thread (when a call is posted and when it is
 * completed); the pointer's context is pushed for the copy and popped after, so that the calling
 * thread needs no current context and keeps the one it had.
 */
#include "config.h"

#include "gpu/cuda.h"

#include "core/cfg.h"

#include <stdio.h>
#include <string.h>

#if TEMPO_HAVE_CUDA
#include <cuda.h>
#include <dlfcn.h>
#include <pthread.h>

/* The driver entry points tempo uses, by their exported names (cuda.h maps the API names to
 * versioned ones: cuMemAllocHost is cuMemAllocHost_v2, and so on). */
static struct {
    CUresult (*init)(unsigned int);
    CUresult (*driver_version)(int *);
    CUresult (*device_count)(int *);
    CUresult (*error_string)(CUresult, const char **);
    CUresult (*pointer_attributes)(unsigned, CUpointer_attribute *, void **, CUdeviceptr);
    CUresult (*memcpy)(CUdeviceptr, CUdeviceptr, size_t);
    CUresult (*host_alloc)(void **, size_t);
    CUresult (*host_free)(void *);
    CUresult (*ctx_push)(CUcontext);
    CUresult (*ctx_pop)(CUcontext *);
} cu;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int usable;
static char why_not[200];
static int ndevices, driver_version;

static void load(void)
{
    if (tempo__config_load() != TEMPO_OK) {
        snprintf(why_not, sizeof(why_not), "the configuration is invalid: %s", tempo__errmsg());
        return;
    }
    void *h = dlopen(tempo__cfg.cuda_driver, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(why_not, sizeof(why_not), "no CUDA driver (%s)", dlerror());
        return;
    }
    static const struct {
        const char *name;
        void **slot;
    } syms[] = {
        {"cuInit", (void **)&cu.init},
        {"cuDriverGetVersion", (void **)&cu.driver_version},
        {"cuDeviceGetCount", (void **)&cu.device_count},
        {"cuGetErrorString", (void **)&cu.error_string},
        {"cuPointerGetAttributes", (void **)&cu.pointer_attributes},
        {"cuMemcpy", (void **)&cu.memcpy},
        {"cuMemAllocHost_v2", (void **)&cu.host_alloc},
        {"cuMemFreeHost", (void **)&cu.host_free},
        {"cuCtxPushCurrent_v2", (void **)&cu.ctx_push},
        {"cuCtxPopCurrent_v2", (void **)&cu.ctx_pop},
    };
    for (size_t i = 0; i < TEMPO_ARRAY_SIZE(syms); i++) {
        if (!(*syms[i].slot = dlsym(h, syms[i].name))) {
            snprintf(why_not, sizeof(why_not), "the CUDA driver lacks %s", syms[i].name);
            return;
        }
    }
    CUresult r = cu.init(0);
    if (r == CUDA_SUCCESS) {
        r = cu.device_count(&ndevices);
    }
    cu.driver_version(&driver_version);
    if (r != CUDA_SUCCESS || ndevices == 0) {
        const char *s = NULL;
        if (r != CUDA_SUCCESS) {
            cu.error_string(r, &s);
        }
        snprintf(why_not, sizeof(why_not), "the CUDA driver finds no device (%s)",
                 s ? s : "0 devices");
        return;
    }
    usable = 1;
}

int tempo__cuda_usable(char *why, size_t len)
{
    pthread_once(&once, load);
    if (!usable && why && len) {
        snprintf(why, len, "%s", why_not);
    }
    return usable;
}

static const char *cu_err(CUresult r)
{
    const char *s = NULL;
    if (cu.error_string) {
        cu.error_string(r, &s);
    }
    return s ? s : "unknown CUDA error";
}

/* p's memory type and context; CU_MEMORYTYPE_HOST for memory the driver does not know. */
static CUmemorytype query(const void *p, CUcontext *ctx)
{
    CUmemorytype mt = (CUmemorytype)0;
    unsigned managed = 0;
    CUcontext c = NULL;
    CUpointer_attribute at[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_IS_MANAGED,
                                 CU_POINTER_ATTRIBUTE_CONTEXT};
    void *data[3] = {&mt, &managed, &c};
    if (!p || cu.pointer_attributes(3, at, data, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS ||
        managed) {
        return CU_MEMORYTYPE_HOST; /* unknown to CUDA (malloc), or readable by the CPU */
    }
    if (ctx) {
        *ctx = c;
    }
    return mt == CU_MEMORYTYPE_DEVICE ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
}

tempo_memtype_t tempo__cuda_memtype(const void *p)
{
    if (!tempo__cuda_usable(NULL, 0)) {
        return TEMPO_MEMTYPE_HOST;
    }
    return query(p, NULL) == CU_MEMORYTYPE_DEVICE ? TEMPO_MEMTYPE_CUDA : TEMPO_MEMTYPE_HOST;
}

struct tempo__cuda_stage {
    void *host;          /* page-locked: the send side's copy, and the receive side's */
    void *dev_recv;      /* where the result goes, NULL: nowhere (the receive side is host) */
    size_t recv_at;      /* offset of the receive side in host */
    size_t rbytes;
    CUcontext ctx;       /* dev_recv's context */
    CUcontext host_ctx;  /* the context host was allocated in (a device buffer's) */
    size_t host_len;     /* its length (a pooled buffer may be longer than this call needs) */
};

/* Page-locked memory is allocated and freed in a context: the device buffer's, pushed. */
static CUresult host_alloc(CUcontext ctx, void **p, size_t n)
{
    CUresult r = ctx ? cu.ctx_push(ctx) : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS) {
        r = cu.host_alloc(p, n);
        CUcontext old;
        if (ctx) {
            cu.ctx_pop(&old);
        }
    }
    return r;
}

static void host_free(CUcontext ctx, void *p)
{
    CUcontext old;
    if (!ctx || cu.ctx_push(ctx) == CUDA_SUCCESS) {
        cu.host_free(p);
        if (ctx) {
            cu.ctx_pop(&old);
        }
    }
}

/* Page-locked buffers kept for the next calls: allocating them is slow (the driver pins every
 * page: milliseconds for tens of MB), and a training step stages the same sizes again and again.
 * A call takes the smallest free one of its context that fits (at most twice its size), else a
 * new one; a finished call puts its buffer back, and the pool keeps at most POOL_MAX buffers and
 * POOL_BYTES in all (beyond, the buffer is freed). */
#define POOL_MAX 16
#define POOL_BYTES ((size_t)1 << 30)
static struct {
    void *p;
    size_t len;
    CUcontext ctx;
} pool[POOL_MAX];
static size_t pool_bytes;
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;

static CUresult pool_get(CUcontext ctx, size_t n, void **p, size_t *len)
{
    pthread_mutex_lock(&pool_lock);
    int best = -1;
    for (int i = 0; i < POOL_MAX; i++) {
        if (pool[i].p && pool[i].ctx == ctx && pool[i].len >= n && pool[i].len / 2 <= n &&
            (best < 0 || pool[i].len < pool[best].len)) {
            best = i;
        }
    }
    if (best >= 0) {
        *p = pool[best].p;
        *len = pool[best].len;
        pool_bytes -= pool[best].len;
        pool[best].p = NULL;
        pthread_mutex_unlock(&pool_lock);
        return CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&pool_lock);
    *len = n;
    return host_alloc(ctx, p, n);
}

static void pool_put(CUcontext ctx, void *p, size_t len)
{
    pthread_mutex_lock(&pool_lock);
    for (int i = 0; i < POOL_MAX && pool_bytes + len <= POOL_BYTES; i++) {
        if (!pool[i].p) {
            pool[i].p = p, pool[i].len = len, pool[i].ctx = ctx;
            pool_bytes += len;
            pthread_mutex_unlock(&pool_lock);
            return;
        }
    }
    pthread_mutex_unlock(&pool_lock);
    host_free(ctx, p);
}

static tempo_status_t copy(CUcontext ctx, void *dst, const void *src, size_t n, const char *what)
{
    if (!n) {
        return TEMPO_OK;
    }
    CUresult r = ctx ? cu.ctx_push(ctx) : CUDA_SUCCESS;
    if (r == CUDA_SUCCESS) {
        r = cu.memcpy((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, n);
        CUcontext old;
        if (ctx) {
            cu.ctx_pop(&old);
        }
    }
    if (r != CUDA_SUCCESS) {
        return tempo__err(TEMPO_ERR_SYSTEM, "CUDA device buffer: copying %zu bytes %s: %s", n, what,
                          cu_err(r));
    }
    return TEMPO_OK;
}

tempo_status_t tempo__cuda_stage(tempo_memtype_t memtype, const void **sendbuf_p, size_t sbytes,
                                 void **recvbuf_p, size_t rbytes, tempo__cuda_stage_t **stage_p)
{
    *stage_p = NULL;
    const char *s = *sendbuf_p;
    char *rv = *recvbuf_p;
    s = sbytes ? s : NULL;
    rv = rbytes ? rv : NULL;
    if (memtype == TEMPO_MEMTYPE_HOST || (!s && !rv)) {
        return TEMPO_OK;
    }
    char why[200];
    /* (the reason is formatted only for the error: this runs in every call of a host without a
     * usable driver, where a formatted reason per call measured 0.06 us on an 8-byte all-reduce) */
    if (!tempo__cuda_usable(memtype == TEMPO_MEMTYPE_CUDA ? why : NULL, sizeof(why))) {
        if (memtype == TEMPO_MEMTYPE_CUDA) {
            return tempo__err(TEMPO_ERR_UNSUPPORTED,
                              "buffers declared CUDA device memory (tempo_attr_t.memtype), but %s",
                              why);
        }
        return TEMPO_OK;
    }
    CUcontext sctx = NULL, rctx = NULL;
    int sdev = s && query(s, &sctx) == CU_MEMORYTYPE_DEVICE;
    int rdev = rv && query(rv, &rctx) == CU_MEMORYTYPE_DEVICE;
    if (memtype == TEMPO_MEMTYPE_CUDA && ((s && !sdev) || (rv && !rdev))) {
        return tempo__err(TEMPO_ERR_INVALID,
                          "buffers declared CUDA device memory (tempo_attr_t.memtype), but the "
                          "%s buffer is not",
                          s && !sdev ? "send" : "receive");
    }
    if (!sdev && !rdev) {
        return TEMPO_OK;
    }
    /* One host region. Where one buffer lies inside the other (in place, and the in-place layouts
     * of reduce-scatter and all-gather), the inner one is the same offset into the outer one's
     * copy, and the outer one is copied in whole. */
    size_t send_at = 0, recv_at = 0, total;
    int nested = sdev && rdev && rv >= s && rv + rbytes <= s + sbytes;
    int nested_r = sdev && rdev && !nested && s >= rv && s + sbytes <= rv + rbytes;
    if (nested) {
        recv_at = (size_t)(rv - s), total = sbytes;
    } else if (nested_r) {
        send_at = (size_t)(s - rv), total = rbytes;
    } else {
        recv_at = sdev ? TEMPO_ALIGN_UP(sbytes, 64) : 0;
        total = recv_at + (rdev ? rbytes : 0);
    }
    tempo__cuda_stage_t *g = tempo__calloc(1, sizeof(*g), "CUDA staging");
    if (!g) {
        return TEMPO_ERR_NOMEM;
    }
    g->host_ctx = sdev ? sctx : rctx;
    CUresult r = pool_get(g->host_ctx, total ? total : 1, &g->host, &g->host_len);
    if (r != CUDA_SUCCESS) {
        tempo__free(g);
        return tempo__err(TEMPO_ERR_NOMEM, "CUDA device buffer: %zu bytes of page-locked host "
                          "memory for its copy: %s", total, cu_err(r));
    }
    char *h = g->host;
    tempo_status_t st = TEMPO_OK;
    if (nested_r) { /* the send data is inside the receive buffer: copy that in whole */
        st = copy(rctx, h, rv, rbytes, "in");
    } else if (sdev) {
        st = copy(sctx, h, s, sbytes, "in");
    }
    if (st != TEMPO_OK) {
        pool_put(g->host_ctx, g->host, g->host_len);
        tempo__free(g);
        return st;
    }
    if (sdev) {
        *sendbuf_p = h + send_at;
    }
    if (rdev) {
        *recvbuf_p = h + recv_at;
        g->dev_recv = rv;
        g->recv_at = recv_at;
        g->rbytes = rbytes;
        g->ctx = rctx;
    }
    *stage_p = g;
    return TEMPO_OK;
}

tempo_status_t tempo__cuda_stage_done(tempo__cuda_stage_t *g, tempo_status_t st)
{
    if (!g) {
        return st;
    }
    if (st == TEMPO_OK && g->dev_recv) {
        st = copy(g->ctx, g->dev_recv, (char *)g->host + g->recv_at, g->rbytes, "out");
    }
    pool_put(g->host_ctx, g->host, g->host_len);
    tempo__free(g);
    return st;
}

void tempo__cuda_describe(char *buf, size_t len)
{
    char why[200];
    if (!tempo__cuda_usable(why, sizeof(why))) {
        snprintf(buf, len, "device buffers unusable here: %s", why);
        return;
    }
    snprintf(buf, len, "driver %d.%d, %d device%s; device buffers staged through host memory",
             driver_version / 1000, driver_version % 1000 / 10, ndevices, ndevices == 1 ? "" : "s");
}

#else /* !TEMPO_HAVE_CUDA */

int tempo__cuda_usable(char *why, size_t len)
{
    if (why && len) {
        snprintf(why, len, "this build has no CUDA (configure found no CUDA toolkit)");
    }
    return 0;
}

tempo_memtype_t tempo__cuda_memtype(const void *p)
{
    (void)p;
    return TEMPO_MEMTYPE_HOST;
}

tempo_status_t tempo__cuda_stage(tempo_memtype_t memtype, const void **sendbuf_p, size_t sbytes,
                                 void **recvbuf_p, size_t rbytes, tempo__cuda_stage_t **stage_p)
{
    (void)sendbuf_p, (void)sbytes, (void)recvbuf_p, (void)rbytes;
    *stage_p = NULL;
    if (memtype == TEMPO_MEMTYPE_CUDA) {
        return tempo__err(TEMPO_ERR_UNSUPPORTED, "buffers declared CUDA device memory "
                          "(tempo_attr_t.memtype), but this build has no CUDA");
    }
    return TEMPO_OK;
}

tempo_status_t tempo__cuda_stage_done(tempo__cuda_stage_t *g, tempo_status_t st)
{
    (void)g;
    return st;
}

void tempo__cuda_describe(char *buf, size_t len)
{
    snprintf(buf, len, "this build has no CUDA");
}

#endif
