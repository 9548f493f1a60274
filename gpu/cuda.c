/*
 * gpu/cuda.c — CUDA device buffers through host staging (gpu/cuda.h), with the CUDA driver API
 * loaded at run time.
 *
 * Contexts: a device pointer belongs to a context (the runtime's primary context of its device,
 * for cudaMalloc). Copies run in the caller's thread (when a call is posted and when it is
 * completed); the pointer's context is pushed for the copy and popped after, so that the calling
 * thread needs no current context and keeps the one it had.
 *
 * Stream-ordered calls (TEMPO_ATTR_STREAM): the send side is copied in on the caller's stream,
 * after the work already there (the caller's thread waits for that copy: the call needs the data
 * on the host); then the stream is made to wait for a flag in the page-locked buffer
 * (cuStreamWaitValue32), and to copy the result out after it. The engine sets the flag when the
 * call completes (tempo__cuda_stage_ready, from whichever thread completes it: the progress
 * thread, or a waiting caller), so the stream goes on without the caller waiting for the
 * request. A call that fails or is abandoned sets it too (the stream must not wait forever; the
 * receive buffer's contents are then undefined, as NCCL's are). The buffer goes back to the pool
 * once an event recorded after the copy out has passed.
 */
#include "config.h"

#include "gpu/cuda.h"

#include "core/cfg.h"
#include "gpu/kernels.h"

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
    CUresult (*memset)(CUdeviceptr, unsigned char, size_t);
    CUresult (*host_alloc)(void **, size_t);
    CUresult (*host_free)(void *);
    CUresult (*ctx_push)(CUcontext);
    CUresult (*ctx_pop)(CUcontext *);
    CUresult (*ctx_current)(CUcontext *);
    CUresult (*stream_create)(CUstream *, unsigned);
    CUresult (*stream_destroy)(CUstream);
    CUresult (*stream_sync)(CUstream);
    /* stream-ordered calls (TEMPO_ATTR_STREAM); optional: NULL where the driver lacks one */
    CUresult (*dtoh_async)(void *, CUdeviceptr, size_t, CUstream);
    CUresult (*htod_async)(CUdeviceptr, const void *, size_t, CUstream);
    CUresult (*wait_value)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
    CUresult (*host_devptr)(CUdeviceptr *, void *, unsigned);
    CUresult (*stream_ctx)(CUstream, CUcontext *);
    CUresult (*event_create)(CUevent *, unsigned);
    CUresult (*event_record)(CUevent, CUstream);
    CUresult (*event_sync)(CUevent);
    CUresult (*event_query)(CUevent);
    CUresult (*event_destroy)(CUevent);
    /* CUDA IPC and the library's kernels (gpu/ipc.c); optional, as the stream entry points */
    CUresult (*ipc_get)(CUipcMemHandle *, CUdeviceptr);
    CUresult (*ipc_open)(CUdeviceptr *, CUipcMemHandle, unsigned);
    CUresult (*ipc_close)(CUdeviceptr);
    CUresult (*address_range)(CUdeviceptr *, size_t *, CUdeviceptr);
    CUresult (*ctx_device)(CUdevice *);
    CUresult (*device_uuid)(CUuuid *, CUdevice);
    CUresult (*module_load)(CUmodule *, const void *);
    CUresult (*module_function)(CUfunction *, CUmodule, const char *);
    CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                       unsigned, CUstream, void **, void **);
} cu;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int usable;
static char why_not[200];
static int ndevices, driver_version;
static const char *no_streams; /* the stream entry point the driver lacks, NULL: it has them all */
static const char *no_ipc;     /* likewise for CUDA IPC and kernel launches */

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
    /* (optional: needed only by stream-ordered calls, whose absence disables those) */
    static const tempo__dlsym_t syms[] = {
        {"cuInit", (void **)&cu.init, 0},
        {"cuDriverGetVersion", (void **)&cu.driver_version, 0},
        {"cuDeviceGetCount", (void **)&cu.device_count, 0},
        {"cuGetErrorString", (void **)&cu.error_string, 0},
        {"cuPointerGetAttributes", (void **)&cu.pointer_attributes, 0},
        {"cuMemcpy", (void **)&cu.memcpy, 0},
        {"cuMemsetD8_v2", (void **)&cu.memset, 0},
        {"cuMemAllocHost_v2", (void **)&cu.host_alloc, 0},
        {"cuMemFreeHost", (void **)&cu.host_free, 0},
        {"cuCtxPushCurrent_v2", (void **)&cu.ctx_push, 0},
        {"cuCtxPopCurrent_v2", (void **)&cu.ctx_pop, 0},
        {"cuMemcpyDtoHAsync_v2", (void **)&cu.dtoh_async, 1},
        {"cuMemcpyHtoDAsync_v2", (void **)&cu.htod_async, 1},
        {"cuStreamWaitValue32_v2", (void **)&cu.wait_value, 1},
        {"cuMemHostGetDevicePointer_v2", (void **)&cu.host_devptr, 1},
        {"cuStreamGetCtx", (void **)&cu.stream_ctx, 1},
        {"cuEventCreate", (void **)&cu.event_create, 1},
        {"cuEventRecord", (void **)&cu.event_record, 1},
        {"cuEventSynchronize", (void **)&cu.event_sync, 1},
        {"cuEventQuery", (void **)&cu.event_query, 1},
        {"cuEventDestroy_v2", (void **)&cu.event_destroy, 1},
        {"cuCtxGetCurrent", (void **)&cu.ctx_current, 1},
        {"cuStreamCreate", (void **)&cu.stream_create, 1},
        {"cuStreamDestroy_v2", (void **)&cu.stream_destroy, 1},
        {"cuStreamSynchronize", (void **)&cu.stream_sync, 1},
    };
    static const tempo__dlsym_t ipc_syms[] = {
        {"cuIpcGetMemHandle", (void **)&cu.ipc_get, 1},
        {"cuIpcOpenMemHandle_v2", (void **)&cu.ipc_open, 1},
        {"cuIpcCloseMemHandle", (void **)&cu.ipc_close, 1},
        {"cuMemGetAddressRange_v2", (void **)&cu.address_range, 1},
        {"cuCtxGetDevice", (void **)&cu.ctx_device, 1},
        {"cuDeviceGetUuid_v2", (void **)&cu.device_uuid, 1},
        {"cuModuleLoadData", (void **)&cu.module_load, 1},
        {"cuModuleGetFunction", (void **)&cu.module_function, 1},
        {"cuLaunchKernel", (void **)&cu.launch, 1},
    };
    const char *missing = tempo__dl_resolve(h, syms, TEMPO_ARRAY_SIZE(syms), &no_streams);
    if (!missing) {
        tempo__dl_resolve(h, ipc_syms, TEMPO_ARRAY_SIZE(ipc_syms), &no_ipc);
    }
    if (missing) {
        snprintf(why_not, sizeof(why_not), "the CUDA driver lacks %s", missing);
        return;
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

/* Run f(args) with ctx pushed (NULL: the current context). */
#define IN_CTX(ctx, r, call)                                                                       \
    do {                                                                                           \
        CUcontext old_;                                                                            \
        (r) = (ctx) ? cu.ctx_push(ctx) : CUDA_SUCCESS;                                             \
        if ((r) == CUDA_SUCCESS) {                                                                 \
            (r) = (call);                                                                          \
            if (ctx) {                                                                             \
                cu.ctx_pop(&old_);                                                                 \
            }                                                                                      \
        }                                                                                          \
    } while (0)

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
    /* Stream-ordered (TEMPO_ATTR_STREAM): the stream waits for *flag to become 1 (set when the
     * call completes), then copies the result out; event marks when host may be reused. */
    CUstream stream;
    uint32_t *flag;      /* in host, NULL: not stream-ordered */
    CUevent event;
    tempo_status_t armed; /* tempo__cuda_stage_arm's failure, TEMPO_OK: none */
    char armed_msg[200];  /* its text */
    /* Pipelined copy in (not stream-ordered): segments of seg bytes of host, copied in order on
     * the context's copy stream, each followed by its event; the first landed have landed. */
    CUevent *segs;
    int nseg, landed;
    size_t seg;
    /* Pipelined copy out (tempo__cuda_stage_out): bytes of the result already enqueued on the
     * copy stream, and an event after the last of them. */
    size_t out_bytes;
    CUevent out_event;
};

/* Copies in of at least PIPE_MIN bytes run asynchronously, in segments of at least SEG_MIN bytes
 * and at most SEG_MAX of them: an operation (a chunk of a scheduled request) starts when the
 * segments under its input have landed, while later ones are still being copied. */
#define PIPE_MIN ((size_t)1 << 20)
#define SEG_MIN ((size_t)1 << 20)
#define SEG_MAX 256

/* Page-locked memory is allocated and freed in a context: the device buffer's, pushed. */
static CUresult host_alloc(CUcontext ctx, void **p, size_t n)
{
    CUresult r;
    IN_CTX(ctx, r, cu.host_alloc(p, n));
    return r;
}

static void host_free(CUcontext ctx, void *p)
{
    CUresult r;
    IN_CTX(ctx, r, cu.host_free(p));
    (void)r;
}

/* Page-locked buffers kept for the next calls: allocating them is slow (the driver pins every
 * page: milliseconds for tens of MB), and a training step stages the same sizes again and again.
 * A call takes the smallest free one of its context that fits (at most twice its size), else a
 * new one; a finished call puts its buffer back, and the pool keeps at most POOL_MAX buffers and
 * POOL_BYTES in all (beyond, the buffer is freed). A stream-ordered call's buffer is still read
 * by its stream after the call completes: it waits on the retired list until its event has
 * passed. */
#define POOL_MAX 16
#define POOL_BYTES ((size_t)1 << 30)
static struct {
    void *p;
    size_t len;
    CUcontext ctx;
} pool[POOL_MAX];
static size_t pool_bytes;
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
typedef struct retired {
    struct retired *next;
    void *p;
    size_t len;
    CUcontext ctx;
    CUevent event;
} retired_t;
static retired_t *retired;

static void pool_put(CUcontext ctx, void *p, size_t len);

/* Whether a stream has passed event (queried in its context). */
static int event_passed(CUcontext ctx, CUevent ev)
{
    int passed = tempo__cuda_event_passed(ctx, ev) != 0; /* (failed: the stream will not read it) */
    if (passed) {
        tempo__cuda_event_free(ctx, ev);
    }
    return passed;
}

/* Retired buffers whose streams have passed their events go back to the pool. */
static void sweep(void)
{
    pthread_mutex_lock(&pool_lock);
    retired_t *list = retired, *keep = NULL;
    retired = NULL;
    pthread_mutex_unlock(&pool_lock);
    while (list) {
        retired_t *e = list;
        list = e->next;
        if (event_passed(e->ctx, e->event)) {
            pool_put(e->ctx, e->p, e->len);
            free(e);
        } else {
            e->next = keep;
            keep = e;
        }
    }
    pthread_mutex_lock(&pool_lock);
    while (keep) {
        retired_t *e = keep;
        keep = e->next;
        e->next = retired;
        retired = e;
    }
    pthread_mutex_unlock(&pool_lock);
}

static CUresult pool_get(CUcontext ctx, size_t n, void **p, size_t *len)
{
    if (retired) { /* (read unlocked: a hint; sweep takes the lock) */
        sweep();
    }
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

/* The pipelined copy in of g, finished (waited for, if the call ended before it) and freed. */
static void segs_free(tempo__cuda_stage_t *g)
{
    if (!g->nseg) {
        return;
    }
    CUcontext old;
    if (!g->host_ctx || cu.ctx_push(g->host_ctx) == CUDA_SUCCESS) {
        if (g->landed < g->nseg) {
            cu.event_sync(g->segs[g->nseg - 1]); /* (the copies must not outlive the buffer) */
        }
        for (int i = 0; i < g->nseg; i++) {
            cu.event_destroy(g->segs[i]);
        }
        if (g->host_ctx) {
            cu.ctx_pop(&old);
        }
    }
    tempo__free(g->segs);
    g->segs = NULL;
    g->nseg = 0;
}

/* The pipelined copy out of g finished (waited for) and its event freed; 0, or -1 (the copies
 * failed: copy synchronously). */
static int out_finish(tempo__cuda_stage_t *g)
{
    if (!g->out_event) {
        return 0;
    }
    CUresult r;
    IN_CTX(g->ctx, r, cu.event_sync(g->out_event));
    CUresult r2;
    IN_CTX(g->ctx, r2, cu.event_destroy(g->out_event));
    (void)r2;
    g->out_event = NULL;
    return r == CUDA_SUCCESS ? 0 : -1;
}

/* The staging buffer of g goes back: now, or once its stream has passed its event. */
static void stage_free(tempo__cuda_stage_t *g)
{
    segs_free(g);
    out_finish(g);
    if (g->event && !event_passed(g->host_ctx, g->event)) {
        retired_t *e = malloc(sizeof(*e));
        if (e) {
            *e = (retired_t){NULL, g->host, g->host_len, g->host_ctx, g->event};
            pthread_mutex_lock(&pool_lock);
            e->next = retired;
            retired = e;
            pthread_mutex_unlock(&pool_lock);
            tempo__free(g);
            return;
        }
        CUcontext old; /* no memory to remember it by: wait for it */
        if (!g->host_ctx || cu.ctx_push(g->host_ctx) == CUDA_SUCCESS) {
            cu.event_sync(g->event);
            cu.event_destroy(g->event);
            if (g->host_ctx) {
                cu.ctx_pop(&old);
            }
        }
    }
    pool_put(g->host_ctx, g->host, g->host_len);
    tempo__free(g);
}

static tempo_status_t copy(CUcontext ctx, void *dst, const void *src, size_t n, const char *what)
{
    if (!n) {
        return TEMPO_OK;
    }
    CUresult r;
    IN_CTX(ctx, r, cu.memcpy((CUdeviceptr)(uintptr_t)dst, (CUdeviceptr)(uintptr_t)src, n));
    if (r != CUDA_SUCCESS) {
        return tempo__err(TEMPO_ERR_SYSTEM, "CUDA device buffer: copying %zu bytes %s: %s", n, what,
                          cu_err(r));
    }
    return TEMPO_OK;
}

static tempo_status_t drv_err(const char *what, CUresult r)
{
    return tempo__err(TEMPO_ERR_SYSTEM, "CUDA: %s: %s", what, cu_err(r));
}

/* A stream per context for pipelined copies (made at the first one). */
static struct {
    CUcontext ctx;
    CUstream stream;
} copy_streams[8];
static pthread_mutex_t copy_lock = PTHREAD_MUTEX_INITIALIZER;

static CUstream copy_stream(CUcontext ctx)
{
    CUstream s = NULL;
    pthread_mutex_lock(&copy_lock);
    for (size_t i = 0; i < TEMPO_ARRAY_SIZE(copy_streams) && !s; i++) {
        if (copy_streams[i].stream && copy_streams[i].ctx == ctx) {
            s = copy_streams[i].stream;
        } else if (!copy_streams[i].stream) {
            CUresult r;
            /* (a blocking stream: like cuMemcpy, its copies wait for the work already on the
             * legacy default stream, where a caller's kernel that made the buffer may run) */
            IN_CTX(ctx, r, cu.stream_create(&copy_streams[i].stream, CU_STREAM_DEFAULT));
            if (r != CUDA_SUCCESS) {
                copy_streams[i].stream = NULL;
                break;
            }
            copy_streams[i].ctx = ctx;
            s = copy_streams[i].stream;
        }
    }
    pthread_mutex_unlock(&copy_lock);
    return s; /* NULL: none (a failure, or more contexts than slots): copy synchronously */
}

/* Copy n bytes of the device buffer in to host asynchronously, in segments with an event each;
 * 0, or -1 where that could not start (nothing is left running: copy synchronously). */
static int copy_in_async(tempo__cuda_stage_t *g, CUcontext ctx, char *host, const char *in,
                         size_t n)
{
    CUstream cs = no_streams ? NULL : copy_stream(ctx);
    if (!cs) {
        return -1;
    }
    size_t seg = TEMPO_MAX(SEG_MIN, (n + SEG_MAX - 1) / SEG_MAX);
    int nseg = (int)((n + seg - 1) / seg);
    g->segs = tempo__calloc((size_t)nseg, sizeof(CUevent), "copy events");
    if (!g->segs) {
        return -1;
    }
    CUresult r = ctx ? cu.ctx_push(ctx) : CUDA_SUCCESS;
    int i = 0;
    for (; r == CUDA_SUCCESS && i < nseg; i++) {
        size_t at = (size_t)i * seg, len = TEMPO_MIN(seg, n - at);
        r = cu.event_create(&g->segs[i], CU_EVENT_DISABLE_TIMING);
        if (r != CUDA_SUCCESS) {
            break;
        }
        r = cu.dtoh_async(host + at, (CUdeviceptr)(uintptr_t)(in + at), len, cs);
        r = r == CUDA_SUCCESS ? cu.event_record(g->segs[i], cs) : r;
        if (r != CUDA_SUCCESS) {
            i++; /* (its event exists) */
            break;
        }
    }
    if (r != CUDA_SUCCESS) { /* undo: wait for what was enqueued, free the events */
        cu.stream_sync(cs);
        for (int j = 0; j < i; j++) {
            cu.event_destroy(g->segs[j]);
        }
        tempo__free(g->segs);
        g->segs = NULL;
    }
    CUcontext old;
    if (ctx) {
        cu.ctx_pop(&old);
    }
    if (r != CUDA_SUCCESS) {
        return -1;
    }
    g->nseg = nseg;
    g->seg = seg;
    g->landed = 0;
    return 0;
}

void tempo__cuda_stage_out(tempo__cuda_stage_t *g, const void *p, size_t len)
{
    if (!g || !g->dev_recv || g->flag || !len || no_streams) {
        return; /* (copied out when the call completes) */
    }
    const char *base = (const char *)g->host + g->recv_at;
    size_t at = (size_t)((const char *)p - base);
    if ((const char *)p < base || at + len > g->rbytes) {
        return; /* (not the result's: left to the copy at completion) */
    }
    CUstream cs = copy_stream(g->ctx);
    if (!cs) {
        return;
    }
    CUresult r = g->ctx ? cu.ctx_push(g->ctx) : CUDA_SUCCESS;
    if (r != CUDA_SUCCESS) {
        return;
    }
    if (!g->out_event) {
        r = cu.event_create(&g->out_event, CU_EVENT_DISABLE_TIMING);
        g->out_event = r == CUDA_SUCCESS ? g->out_event : NULL;
    }
    if (r == CUDA_SUCCESS) {
        r = cu.htod_async((CUdeviceptr)(uintptr_t)((char *)g->dev_recv + at), p, len, cs);
        r = r == CUDA_SUCCESS ? cu.event_record(g->out_event, cs) : r;
    }
    CUcontext old;
    if (g->ctx) {
        cu.ctx_pop(&old);
    }
    if (r == CUDA_SUCCESS) {
        g->out_bytes += len; /* (a failure leaves the count short: the whole is copied at the end) */
    }
}

int tempo__cuda_stage_landed(tempo__cuda_stage_t *g, const void *p, size_t len)
{
    if (!g || !g->nseg || g->landed == g->nseg) {
        return 1;
    }
    int last = g->nseg - 1;
    if (p && len) {
        size_t at = (size_t)((const char *)p - (const char *)g->host);
        last = (int)TEMPO_MIN((size_t)last, (at + len - 1) / g->seg);
    }
    CUresult r = CUDA_SUCCESS;
    CUcontext old;
    if (g->host_ctx && cu.ctx_push(g->host_ctx) != CUDA_SUCCESS) {
        return 0; /* (asked again) */
    }
    while (g->landed <= last && (r = cu.event_query(g->segs[g->landed])) == CUDA_SUCCESS) {
        g->landed++;
    }
    if (g->host_ctx) {
        cu.ctx_pop(&old);
    }
    if (r != CUDA_SUCCESS && r != CUDA_ERROR_NOT_READY) {
        tempo__err(TEMPO_ERR_SYSTEM, "CUDA device buffer: copying it in: %s", cu_err(r));
        return -1;
    }
    return g->landed > last;
}

/* A stream-ordered call's send side, copied in after the stream's earlier work; the caller
 * waits for it here: the call needs the data on the host. */
static CUresult stream_copy_in(tempo__cuda_stage_t *g, const void *in, size_t in_bytes)
{
    CUresult r = cu.event_create(&g->event, CU_EVENT_DISABLE_TIMING);
    if (r == CUDA_SUCCESS && in_bytes) {
        r = cu.dtoh_async(g->host, (CUdeviceptr)(uintptr_t)in, in_bytes, g->stream);
        r = r == CUDA_SUCCESS ? cu.event_record(g->event, g->stream) : r;
        r = r == CUDA_SUCCESS ? cu.event_sync(g->event) : r;
    }
    return r;
}

/* The stream waits for the flag, copies the result out, and records the event after it. */
static CUresult stream_arm(tempo__cuda_stage_t *g)
{
    CUdeviceptr fp = 0;
    CUresult r = cu.host_devptr(&fp, g->flag, 0);
    r = r == CUDA_SUCCESS ? cu.wait_value(g->stream, fp, 1, CU_STREAM_WAIT_VALUE_EQ) : r;
    if (r == CUDA_SUCCESS && g->dev_recv) {
        r = cu.htod_async((CUdeviceptr)(uintptr_t)g->dev_recv, (char *)g->host + g->recv_at,
                          g->rbytes, g->stream);
    }
    return r == CUDA_SUCCESS ? cu.event_record(g->event, g->stream) : r;
}

tempo_status_t tempo__cuda_stage_arm(tempo__cuda_stage_t *g)
{
    if (!g || !g->flag) {
        return TEMPO_OK;
    }
    CUresult r;
    IN_CTX(g->host_ctx, r, stream_arm(g));
    if (r != CUDA_SUCCESS) {
        tempo__cuda_stage_ready(g); /* (a wait already enqueued must not hold the stream) */
        g->armed = drv_err("a stream-ordered call (TEMPO_ATTR_STREAM): making its stream wait for it", r);
        snprintf(g->armed_msg, sizeof(g->armed_msg), "%s", tempo__errmsg());
        return g->armed;
    }
    return TEMPO_OK;
}

tempo_status_t tempo__cuda_stage(tempo_memtype_t memtype, int ordered, void *stream,
                                 const void **sendbuf_p, size_t sbytes, void **recvbuf_p,
                                 size_t rbytes, tempo__cuda_stage_t **stage_p)
{
    *stage_p = NULL;
    const char *s = *sendbuf_p;
    char *rv = *recvbuf_p;
    s = sbytes ? s : NULL;
    rv = rbytes ? rv : NULL;
    if (!ordered && (memtype == TEMPO_MEMTYPE_HOST || (!s && !rv))) {
        return TEMPO_OK;
    }
    char why[200];
    /* (the reason is formatted only for the error: this runs in every call of a host without a
     * usable driver, where a formatted reason per call measured 0.06 us on an 8-byte all-reduce) */
    int need = memtype == TEMPO_MEMTYPE_CUDA || ordered;
    if (!tempo__cuda_usable(need ? why : NULL, sizeof(why))) {
        if (ordered) {
            return tempo__err(TEMPO_ERR_UNSUPPORTED,
                              "a CUDA stream (TEMPO_ATTR_STREAM), but %s", why);
        }
        if (memtype == TEMPO_MEMTYPE_CUDA) {
            return tempo__err(TEMPO_ERR_UNSUPPORTED,
                              "buffers declared CUDA device memory (tempo_attr_t.memtype), but %s",
                              why);
        }
        return TEMPO_OK;
    }
    if (ordered && no_streams) {
        return tempo__err(TEMPO_ERR_UNSUPPORTED, "a CUDA stream (TEMPO_ATTR_STREAM), but the "
                          "CUDA driver lacks %s", no_streams);
    }
    CUcontext sctx = NULL, rctx = NULL;
    int sdev = s && memtype != TEMPO_MEMTYPE_HOST && query(s, &sctx) == CU_MEMORYTYPE_DEVICE;
    int rdev = rv && memtype != TEMPO_MEMTYPE_HOST && query(rv, &rctx) == CU_MEMORYTYPE_DEVICE;
    if ((memtype == TEMPO_MEMTYPE_CUDA || ordered) && ((s && !sdev) || (rv && !rdev))) {
        return tempo__err(TEMPO_ERR_INVALID,
                          "%s, but the %s buffer is not CUDA device memory",
                          ordered ? "a CUDA stream orders device buffers (TEMPO_ATTR_STREAM)"
                                  : "buffers declared CUDA device memory (tempo_attr_t.memtype)",
                          s && !sdev ? "send" : "receive");
    }
    CUcontext octx = NULL; /* a call without buffers (a barrier): the stream's context */
    if (!sdev && !rdev) {
        if (!ordered) {
            return TEMPO_OK;
        }
        CUresult r = cu.stream_ctx((CUstream)stream, &octx);
        if (r != CUDA_SUCCESS) {
            return tempo__err(TEMPO_ERR_INVALID, "CUDA stream (TEMPO_ATTR_STREAM): its context: %s",
                              cu_err(r));
        }
    }
    /* One host region. Where one buffer lies inside the other (in place, and the in-place layouts
     * of reduce-scatter and all-gather), the inner one is the same offset into the outer one's
     * copy, and the outer one is copied in whole. A stream-ordered call's flag follows. */
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
    size_t flag_at = TEMPO_ALIGN_UP(total, 64);
    total = ordered ? flag_at + sizeof(uint32_t) : total;
    tempo__cuda_stage_t *g = tempo__calloc(1, sizeof(*g), "CUDA staging");
    if (!g) {
        return TEMPO_ERR_NOMEM;
    }
    g->host_ctx = sdev ? sctx : rdev ? rctx : octx;
    CUresult r = pool_get(g->host_ctx, total ? total : 1, &g->host, &g->host_len);
    if (r != CUDA_SUCCESS) {
        tempo__free(g);
        return tempo__err(TEMPO_ERR_NOMEM, "CUDA device buffer: %zu bytes of page-locked host "
                          "memory for its copy: %s", total, cu_err(r));
    }
    char *h = g->host;
    if (rdev) {
        g->dev_recv = rv;
        g->recv_at = recv_at;
        g->rbytes = rbytes;
        g->ctx = rctx;
    }
    tempo_status_t st = TEMPO_OK;
    const char *in = nested_r ? rv : sdev ? s : NULL; /* the send data, or the buffer around it */
    size_t in_bytes = nested_r ? rbytes : sdev ? sbytes : 0;
    if (ordered) {
        g->stream = (CUstream)stream;
        g->flag = (uint32_t *)(void *)(h + flag_at);
        __atomic_store_n(g->flag, 0, __ATOMIC_RELEASE);
        CUresult r2;
        IN_CTX(g->host_ctx, r2, stream_copy_in(g, in, in_bytes));
        if (r2 != CUDA_SUCCESS) {
            st = drv_err("a stream-ordered call (TEMPO_ATTR_STREAM): copying its send buffer in", r2);
        }
    } else if (in && (in_bytes < PIPE_MIN ||
                      copy_in_async(g, nested_r ? rctx : sctx, h, in, in_bytes) != 0)) {
        st = copy(nested_r ? rctx : sctx, h, in, in_bytes, "in");
    }
    if (st != TEMPO_OK) {
        stage_free(g);
        return st;
    }
    if (sdev) {
        *sendbuf_p = h + send_at;
    }
    if (rdev) {
        *recvbuf_p = h + recv_at;
    }
    *stage_p = g;
    return TEMPO_OK;
}

void tempo__cuda_stage_ready(tempo__cuda_stage_t *g)
{
    if (g && g->flag) {
        __atomic_store_n(g->flag, 1, __ATOMIC_RELEASE); /* the result is in host: the stream goes on */
    }
}

tempo_status_t tempo__cuda_stage_done(tempo__cuda_stage_t *g, tempo_status_t st)
{
    if (!g) {
        return st;
    }
    if (g->flag) {
        tempo__cuda_stage_ready(g); /* (already, unless the call was abandoned) */
        if (st == TEMPO_OK && g->armed != TEMPO_OK) {
            st = tempo__err(g->armed, "%s", g->armed_msg); /* the result never reached the stream */
        }
    } else if (st == TEMPO_OK && g->dev_recv) {
        /* Copied out piece by piece as chunks completed (tempo__cuda_stage_out): wait for that;
         * otherwise, or where a piece is missing or failed, copy the whole result now. */
        int piecewise = g->out_bytes == g->rbytes && out_finish(g) == 0;
        if (!piecewise) {
            st = copy(g->ctx, g->dev_recv, (char *)g->host + g->recv_at, g->rbytes, "out");
        }
    }
    stage_free(g);
    return st;
}

tempo_status_t tempo__cuda_copy(void *dst, const void *src, size_t n, const char *what)
{
    CUcontext dctx = NULL, sctx = NULL;
    int ddev = tempo__cuda_usable(NULL, 0) && query(dst, &dctx) == CU_MEMORYTYPE_DEVICE;
    int sdev = ddev || (tempo__cuda_usable(NULL, 0) && query(src, &sctx) == CU_MEMORYTYPE_DEVICE);
    if (!ddev && !sdev) {
        memcpy(dst, src, n);
        return TEMPO_OK;
    }
    return copy(ddev ? dctx : sctx, dst, src, n, what);
}

tempo_status_t tempo__cuda_zero(void *p, size_t n)
{
    CUcontext ctx = NULL;
    if (!tempo__cuda_usable(NULL, 0) || query(p, &ctx) != CU_MEMORYTYPE_DEVICE) {
        memset(p, 0, n);
        return TEMPO_OK;
    }
    CUresult r;
    IN_CTX(ctx, r, cu.memset((CUdeviceptr)(uintptr_t)p, 0, n));
    if (r != CUDA_SUCCESS) {
        return tempo__err(TEMPO_ERR_SYSTEM, "CUDA device buffer: zeroing %zu bytes: %s", n,
                          cu_err(r));
    }
    return TEMPO_OK;
}

/* ---- CUDA IPC and the library's kernels (gpu/ipc.c) ---------------------------------------- */

#if TEMPO_HAVE_FATBIN
/* gpu/fatbin.c: gpu/kernels.cu compiled by nvcc -fatbin (gpu/local.mk) */
extern const unsigned char tempo__gpu_fatbin[];
extern const size_t tempo__gpu_fatbin_len;
#endif

/* The reduction kernel, loaded once per context (at its first use). */
static struct {
    CUcontext ctx;
    CUfunction reduce;
} kernels[8];
static pthread_mutex_t kernel_lock = PTHREAD_MUTEX_INITIALIZER;

int tempo__cuda_ipc_usable(char *why, size_t len)
{
    char w[200];
    if (!tempo__cuda_usable(w, sizeof(w))) {
        snprintf(why, len, "%s", w);
        return 0;
    }
#if TEMPO_HAVE_FATBIN
    if (no_ipc || no_streams) {
        snprintf(why, len, "the CUDA driver lacks %s", no_ipc ? no_ipc : no_streams);
        return 0;
    }
    return 1;
#else
    snprintf(why, len, "this build has no CUDA kernels (configure found no nvcc)");
    return 0;
#endif
}

/* The reduction kernel in ctx, NULL with the message. */
static CUfunction reduce_kernel(CUcontext ctx)
{
    CUfunction f = NULL;
#if TEMPO_HAVE_FATBIN
    int failed = 0;
    pthread_mutex_lock(&kernel_lock);
    for (size_t i = 0; i < TEMPO_ARRAY_SIZE(kernels) && !f; i++) {
        if (kernels[i].reduce && kernels[i].ctx == ctx) {
            f = kernels[i].reduce;
        } else if (!kernels[i].reduce) {
            CUmodule m = NULL;
            CUresult r;
            IN_CTX(ctx, r, cu.module_load(&m, tempo__gpu_fatbin));
            if (r == CUDA_SUCCESS) {
                r = cu.module_function(&f, m, "tempo_k_reduce");
            }
            if (r != CUDA_SUCCESS) {
                drv_err("loading tempo's kernels (gpu/kernels.cu) into the context", r);
                f = NULL;
                failed = 1;
                break;
            }
            kernels[i].ctx = ctx;
            kernels[i].reduce = f;
        }
    }
    if (!f && !failed) {
        tempo__err(TEMPO_ERR_UNSUPPORTED, "CUDA: tempo's kernels are loaded in at most %zu "
                   "contexts", TEMPO_ARRAY_SIZE(kernels));
    }
    pthread_mutex_unlock(&kernel_lock);
#else
    (void)ctx;
    tempo__err(TEMPO_ERR_UNSUPPORTED, "this build has no CUDA kernels (configure found no nvcc)");
#endif
    return f;
}

int tempo__cuda_ipc_export(const void *p, tempo__cuda_ipc_t *out)
{
    CUcontext ctx = NULL;
    memset(out, 0, sizeof(*out));
    if (query(p, &ctx) != CU_MEMORYTYPE_DEVICE) {
        tempo__err(TEMPO_ERR_INVALID, "CUDA IPC: %p is not device memory", p);
        return -1;
    }
    CUdeviceptr base = 0;
    size_t size = 0;
    CUipcMemHandle h;
    CUdevice dev = 0;
    CUuuid uuid;
    CUresult r;
    IN_CTX(ctx, r, cu.address_range(&base, &size, (CUdeviceptr)(uintptr_t)p));
    if (r == CUDA_SUCCESS) {
        IN_CTX(ctx, r, cu.ipc_get(&h, base));
    }
    if (r == CUDA_SUCCESS) {
        IN_CTX(ctx, r, cu.ctx_device(&dev));
    }
    if (r == CUDA_SUCCESS) {
        r = cu.device_uuid(&uuid, dev);
    }
    if (r != CUDA_SUCCESS) {
        drv_err("exporting a device buffer (cuIpcGetMemHandle: memory from cudaMalloc can be "
                "exported, pool and virtual-memory allocations cannot)", r);
        return -1;
    }
    memcpy(out->handle, h.reserved, sizeof(out->handle));
    memcpy(out->uuid, uuid.bytes, sizeof(out->uuid));
    out->offset = (uint64_t)((CUdeviceptr)(uintptr_t)p - base);
    out->size = size;
    return 0;
}

int tempo__cuda_ipc_open(const void *like, const tempo__cuda_ipc_t *h, void **base_p,
                         void **ctx_p)
{
    CUcontext ctx = NULL;
    query(like, &ctx);
    *ctx_p = ctx;
    CUipcMemHandle mh;
    memcpy(mh.reserved, h->handle, sizeof(mh.reserved));
    CUdeviceptr d = 0;
    CUresult r;
    IN_CTX(ctx, r, cu.ipc_open(&d, mh, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    if (r != CUDA_SUCCESS) {
        drv_err("opening a peer's device buffer (cuIpcOpenMemHandle)", r);
        return -1;
    }
    *base_p = (void *)(uintptr_t)d;
    return 0;
}

void tempo__cuda_ipc_close(void *ctx, void *base)
{
    CUresult r;
    IN_CTX((CUcontext)ctx, r, cu.ipc_close((CUdeviceptr)(uintptr_t)base));
    (void)r;
}

tempo_status_t tempo__cuda_sync(const void *p)
{
    CUcontext ctx = NULL;
    if (query(p, &ctx) != CU_MEMORYTYPE_DEVICE) {
        return TEMPO_OK;
    }
    CUresult r;
    IN_CTX(ctx, r, cu.stream_sync(NULL));
    return r == CUDA_SUCCESS ? TEMPO_OK : drv_err("waiting for the default stream", r);
}

tempo_status_t tempo__cuda_reduce(void *dst, const void *const *src, int n, size_t count,
                                  tempo_dtype_t dtype, tempo_op_t op)
{
    CUcontext ctx = NULL;
    if (n < 1 || n > TEMPO__GPU_MAX_OPERANDS || query(dst, &ctx) != CU_MEMORYTYPE_DEVICE) {
        return tempo__err(TEMPO_ERR_INVALID, "CUDA reduction: %d operands into %p", n, dst);
    }
    if (!count) {
        return TEMPO_OK;
    }
    CUfunction f = reduce_kernel(ctx);
    CUstream s = f ? copy_stream(ctx) : NULL;
    if (!f) {
        return TEMPO_ERR_UNSUPPORTED; /* (the message is set) */
    }
    if (!s) {
        return tempo__err(TEMPO_ERR_SYSTEM, "CUDA reduction: no stream in the buffer's context");
    }
    tempo__gpu_operands_t o;
    memset(&o, 0, sizeof(o));
    for (int k = 0; k < n; k++) {
        o.p[k] = src[k];
    }
    int dt = (int)dtype, opi = (int)op;
    void *params[] = {&dst, &o, &n, &count, &dt, &opi};
    size_t blocks = (count + 255) / 256;
    blocks = blocks > 65535 ? 65535 : blocks;
    CUresult r;
    IN_CTX(ctx, r, cu.launch(f, (unsigned)blocks, 1, 1, 256, 1, 1, 0, s, params, NULL));
    if (r == CUDA_SUCCESS) {
        IN_CTX(ctx, r, cu.stream_sync(s));
    }
    return r == CUDA_SUCCESS ? TEMPO_OK : drv_err("the reduction kernel", r);
}

tempo_status_t tempo__cuda_stream_new(void **ctx_p, void **stream_p)
{
    char why[200];
    if (!tempo__cuda_usable(why, sizeof(why)) || no_streams) {
        return tempo__err(TEMPO_ERR_UNSUPPORTED, "CUDA streams: %s",
                          no_streams ? "the driver lacks one of their entry points" : why);
    }
    CUcontext ctx = NULL;
    CUresult r = cu.ctx_current(&ctx);
    if (r == CUDA_SUCCESS && !ctx) {
        return tempo__err(TEMPO_ERR_INVALID, "CUDA: no current context in this thread (set the "
                          "device first: cudaSetDevice)");
    }
    CUstream st = NULL;
    /* (a blocking stream: its work waits for the legacy default stream's, as cuMemcpy does) */
    r = r == CUDA_SUCCESS ? cu.stream_create(&st, CU_STREAM_DEFAULT) : r;
    if (r != CUDA_SUCCESS) {
        return drv_err("creating a stream", r);
    }
    *ctx_p = ctx;
    *stream_p = st;
    return TEMPO_OK;
}

void tempo__cuda_stream_free(void *ctx, void *stream)
{
    CUresult r;
    IN_CTX((CUcontext)ctx, r, cu.stream_destroy((CUstream)stream));
    (void)r;
}

tempo_status_t tempo__cuda_event_after(void *ctx, void *stream, void **ev_p)
{
    CUevent ev = NULL;
    CUresult r;
    IN_CTX((CUcontext)ctx, r, cu.event_create(&ev, CU_EVENT_DISABLE_TIMING));
    if (r == CUDA_SUCCESS) {
        IN_CTX((CUcontext)ctx, r, cu.event_record(ev, (CUstream)stream));
        if (r != CUDA_SUCCESS) {
            tempo__cuda_event_free(ctx, ev);
        }
    }
    if (r != CUDA_SUCCESS) {
        return drv_err("recording an event", r);
    }
    *ev_p = ev;
    return TEMPO_OK;
}

int tempo__cuda_event_passed(void *ctx, void *ev)
{
    CUresult r;
    IN_CTX((CUcontext)ctx, r, cu.event_query((CUevent)ev));
    if (r == CUDA_ERROR_NOT_READY) {
        return 0;
    }
    return r == CUDA_SUCCESS ? 1 : (drv_err("querying an event", r), -1);
}

int tempo__cuda_event_wait(void *ctx, void *ev)
{
    CUresult r;
    IN_CTX((CUcontext)ctx, r, cu.event_sync((CUevent)ev));
    return r == CUDA_SUCCESS ? 0 : (drv_err("waiting for an event", r), -1);
}

void tempo__cuda_event_free(void *ctx, void *ev)
{
    CUresult r;
    IN_CTX((CUcontext)ctx, r, cu.event_destroy((CUevent)ev));
    (void)r;
}

int tempo__cuda_ctx_push(void *ctx)
{
    CUresult r = cu.ctx_push((CUcontext)ctx);
    return r == CUDA_SUCCESS ? 0 : (drv_err("making the context current", r), -1);
}

void tempo__cuda_ctx_pop(void)
{
    CUcontext old;
    cu.ctx_pop(&old);
}

/* (ctx_p: the context, or &host_marker for ordinary memory) */
static char host_marker;

void *tempo__cuda_host_alloc(const void *like, size_t n, void **ctx_p)
{
    CUcontext ctx = NULL;
    void *p = NULL;
    if (tempo__cuda_usable(NULL, 0) && query(like, &ctx) == CU_MEMORYTYPE_DEVICE) {
        *ctx_p = ctx;
        return host_alloc(ctx, &p, n ? n : 1) == CUDA_SUCCESS ? p : NULL;
    }
    *ctx_p = &host_marker;
    return tempo__malloc_aligned(n, "host buffer");
}

void tempo__cuda_host_free(void *p, void *ctx)
{
    if (ctx == &host_marker) {
        tempo__free_aligned(p);
    } else if (p) {
        host_free(ctx, p);
    }
}

void tempo__cuda_describe(char *buf, size_t len)
{
    char why[200];
    if (!tempo__cuda_usable(why, sizeof(why))) {
        snprintf(buf, len, "device buffers unusable here: %s", why);
        return;
    }
    char streams[120] = "stream-ordered calls";
    if (no_streams) {
        snprintf(streams, sizeof(streams), "no stream-ordered calls (the driver lacks %s)",
                 no_streams);
    }
    char ipc[160];
    if (tempo__cuda_ipc_usable(ipc, sizeof(ipc))) {
        snprintf(ipc, sizeof(ipc), "all-reduce through CUDA IPC with TEMPO_GPU_IPC=1 (%s)",
                 tempo__cfg.gpu_ipc ? "on" : "off");
    } else {
        char reason[140];
        snprintf(reason, sizeof(reason), "%s", ipc);
        snprintf(ipc, sizeof(ipc), "no CUDA IPC: %s", reason);
    }
    snprintf(buf, len,
             "driver %d.%d, %d device%s; device buffers staged through host memory; %s; %s",
             driver_version / 1000, driver_version % 1000 / 10, ndevices, ndevices == 1 ? "" : "s",
             streams, ipc);
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

tempo_status_t tempo__cuda_stage(tempo_memtype_t memtype, int ordered, void *stream,
                                 const void **sendbuf_p, size_t sbytes, void **recvbuf_p,
                                 size_t rbytes, tempo__cuda_stage_t **stage_p)
{
    (void)sendbuf_p, (void)sbytes, (void)recvbuf_p, (void)rbytes, (void)stream;
    *stage_p = NULL;
    if (ordered) {
        return tempo__err(TEMPO_ERR_UNSUPPORTED, "a CUDA stream (TEMPO_ATTR_STREAM), but this "
                          "build has no CUDA");
    }
    if (memtype == TEMPO_MEMTYPE_CUDA) {
        return tempo__err(TEMPO_ERR_UNSUPPORTED, "buffers declared CUDA device memory "
                          "(tempo_attr_t.memtype), but this build has no CUDA");
    }
    return TEMPO_OK;
}

void tempo__cuda_stage_ready(tempo__cuda_stage_t *g)
{
    (void)g;
}

tempo_status_t tempo__cuda_stage_arm(tempo__cuda_stage_t *g)
{
    (void)g;
    return TEMPO_OK;
}

int tempo__cuda_stage_landed(tempo__cuda_stage_t *g, const void *p, size_t len)
{
    (void)g, (void)p, (void)len;
    return 1;
}

void tempo__cuda_stage_out(tempo__cuda_stage_t *g, const void *p, size_t len)
{
    (void)g, (void)p, (void)len;
}

tempo_status_t tempo__cuda_stage_done(tempo__cuda_stage_t *g, tempo_status_t st)
{
    (void)g;
    return st;
}

tempo_status_t tempo__cuda_copy(void *dst, const void *src, size_t n, const char *what)
{
    (void)what;
    memcpy(dst, src, n);
    return TEMPO_OK;
}

tempo_status_t tempo__cuda_zero(void *p, size_t n)
{
    memset(p, 0, n);
    return TEMPO_OK;
}

tempo_status_t tempo__cuda_stream_new(void **ctx_p, void **stream_p)
{
    (void)ctx_p, (void)stream_p;
    return tempo__err(TEMPO_ERR_UNSUPPORTED, "CUDA streams: this build has no CUDA");
}
void tempo__cuda_stream_free(void *ctx, void *stream)
{
    (void)ctx, (void)stream;
}
tempo_status_t tempo__cuda_event_after(void *ctx, void *stream, void **ev_p)
{
    (void)ctx, (void)stream, (void)ev_p;
    return tempo__err(TEMPO_ERR_UNSUPPORTED, "CUDA events: this build has no CUDA");
}
int tempo__cuda_event_passed(void *ctx, void *ev)
{
    (void)ctx, (void)ev;
    return 1;
}
int tempo__cuda_event_wait(void *ctx, void *ev)
{
    (void)ctx, (void)ev;
    return 0;
}
void tempo__cuda_event_free(void *ctx, void *ev)
{
    (void)ctx, (void)ev;
}
int tempo__cuda_ctx_push(void *ctx)
{
    (void)ctx;
    return 0;
}
void tempo__cuda_ctx_pop(void)
{
}

void *tempo__cuda_host_alloc(const void *like, size_t n, void **ctx_p)
{
    (void)like;
    *ctx_p = NULL;
    return tempo__malloc_aligned(n, "host buffer");
}

void tempo__cuda_host_free(void *p, void *ctx)
{
    (void)ctx;
    tempo__free_aligned(p);
}

void tempo__cuda_describe(char *buf, size_t len)
{
    snprintf(buf, len, "this build has no CUDA");
}

int tempo__cuda_ipc_usable(char *why, size_t len)
{
    return tempo__cuda_usable(why, len);
}
int tempo__cuda_ipc_export(const void *p, tempo__cuda_ipc_t *out)
{
    (void)p;
    memset(out, 0, sizeof(*out));
    return tempo__err(TEMPO_ERR_UNSUPPORTED, "this build has no CUDA"), -1;
}
int tempo__cuda_ipc_open(const void *like, const tempo__cuda_ipc_t *h, void **base_p,
                         void **ctx_p)
{
    (void)like, (void)h, (void)base_p, (void)ctx_p;
    return tempo__err(TEMPO_ERR_UNSUPPORTED, "this build has no CUDA"), -1;
}
void tempo__cuda_ipc_close(void *ctx, void *base)
{
    (void)ctx, (void)base;
}
tempo_status_t tempo__cuda_sync(const void *p)
{
    (void)p;
    return TEMPO_OK;
}
tempo_status_t tempo__cuda_reduce(void *dst, const void *const *src, int n, size_t count,
                                  tempo_dtype_t dtype, tempo_op_t op)
{
    (void)dst, (void)src, (void)n, (void)count, (void)dtype, (void)op;
    return tempo__err(TEMPO_ERR_UNSUPPORTED, "this build has no CUDA");
}

#endif
