/*
 * gpu_coll.c — CUDA device buffers in the collectives and send/recv (gpu/cuda.c: host staging),
 * jobs of ranks on this host forked by tests/fault/job.h. TAP.
 *   invalid    every rank passes tempo_attr_t.memtype 7: TEMPO_ERR_INVALID naming memtype; the
 *              communicator still works after it (an all-reduce declared TEMPO_MEMTYPE_HOST, exact)
 *   declared   every rank declares its host buffers TEMPO_MEMTYPE_CUDA: the call fails on every
 *              rank with the reason (no usable driver or device: TEMPO_ERR_UNSUPPORTED saying so;
 *              a usable one: TEMPO_ERR_INVALID, the buffer is not device memory)
 *   one rank   only rank 0 declares it: every rank's all-reduce fails within 10 s (TEMPO_TIMEOUT
 *              30 s) instead of waiting for rank 0
 *   fake       the device cases below on a stand-in driver (tests/gpu/fake/libcuda.so.1 from
 *              fake_cuda.c, TEMPO_CUDA_DRIVER): its "device memory" is mapped without access
 *              except inside its cuMemcpy, so a rank that reads or writes a device buffer other
 *              than through the driver dies; page-locked memory needs a pushed context, as with
 *              the real driver; and the copies are counted (at least two per staged call)
 *   device     where a CUDA device answers (else one skipped point saying why): 2, 3 and 4 ranks
 *              sharing device 0, every buffer from cudaMalloc and found automatically (one case
 *              declared): all-reduce (float32 sum, int32 max, float64 prod, bfloat16 avg, out of
 *              place and in place), reduce-scatter, all-gather (and in place), broadcast, reduce,
 *              all-to-all, send/recv around a ring, non-blocking scheduled all-reduces with
 *              priorities, and an all-reduce with rank 0's buffers on the device and the others'
 *              on the host; every element of every result exact, read back from the device;
 *              then the bucketer over device tensors (rank_bucketer) and stream-ordered calls
 *              (TEMPO_ATTR_STREAM, rank_stream)
 *   no progress thread   TEMPO_PROGRESS_THREAD=0 refuses a stream (fake driver), device buffers
 *              without one still work
 *   nccl       TEMPO_GPU_BACKEND=nccl on the stand-in NCCL (fake/libnccl.so.2, fake_nccl.c) and
 *              driver, 1-3 ranks: the device cases (NCCL's collectives counted as NCCL calls);
 *              mixed host and device ranks (as the first call, and later) fail on every rank;
 *              a forced NCCL failure on rank 1 (returned by the call, or asynchronous) fails the
 *              call on every rank naming NCCL and rank 1, and every later call; disagreeing
 *              counts (rank_stream) and broadcast roots fail on every rank with what differs;
 *              a peer 8 s late (TEMPO_TIMEOUT 3 s) or dead in the middle of a call: rank 0's
 *              NCCL call fails within 10 s naming rank 1 (its NCCL work aborted)
 *   shim       NCCL through tests/gpu/nccl_shim.c (fails a call on demand, forwards the rest), over
 *              the stand-in NCCL here: the forced failures above at 1 and 3 ranks, through the
 *              shim
 *   device nccl  where a device answers: the device cases at 1 rank on the real NCCL, then a
 *              forced error out of it through the shim (sync and async): the failing call and
 *              every later one fail, naming NCCL and rank 0
 * (invalid also checks that a stream without a usable driver is TEMPO_ERR_UNSUPPORTED.)
 */
#include "config.h"

#include <tempo.h>

#include "tests/fault/job.h"
#include "tests/mr/exact.h"

#include <dlfcn.h>
#include <limits.h>

#if TEMPO_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

enum { V_INVALID, V_DECLARED, V_ONE_RANK, V_FAKE, V_NOTHREAD, V_NCCL, V_NCCL_MIXED, V_NCCL_MIXED0,
       V_NCCL_SYNC, V_NCCL_ASYNC, V_NCCL_ROOTS, V_NCCL_LATE, V_NCCL_DEATH, V_SHIM_SYNC,
       V_SHIM_ASYNC, V_IPC, V_IPC_LATE, V_IPC_DEATH, V_DEVICE, V_DEVICE_NCCL, V_DEVICE_IPC, V_DEVICE_SHIM_SYNC,
       V_DEVICE_SHIM_ASYNC };

typedef struct {
    int variant;
} arg_t;

/* An all-reduce of 1000 float32 sums on host buffers with attr; the wrong elements' count, or -1
 * when the call failed (*st). */
static long host_allreduce(tempo_comm_t comm, int rank, int size, const tempo_attr_t *attr,
                           tempo_status_t *st)
{
    float s[1000], r[1000];
    for (int i = 0; i < 1000; i++) {
        s[i] = (float)val(rank, (size_t)i, TEMPO_SUM);
        r[i] = -99;
    }
    tempo_request_t q;
    *st = tempo_iallreduce(comm, s, r, 1000, TEMPO_FLOAT32, TEMPO_SUM, attr, &q);
    if (*st == TEMPO_OK) {
        *st = tempo_wait(&q);
    }
    if (*st != TEMPO_OK) {
        return -1;
    }
    long bad = 0;
    for (int i = 0; i < 1000; i++) {
        bad += r[i] != (float)expect(size, (size_t)i, TEMPO_SUM);
    }
    return bad;
}

static int rank_invalid(tempo_comm_t comm, int rank, int size)
{
    tempo_attr_t at = {.field_mask = TEMPO_ATTR_MEMTYPE, .memtype = (tempo_memtype_t)7};
    tempo_status_t st;
    host_allreduce(comm, rank, size, &at, &st);
    int ok = rk_check(st == TEMPO_ERR_INVALID && strstr(tempo_last_error(comm), "memtype"),
                      "invalid: rank %d: memtype 7 is TEMPO_ERR_INVALID (%s)", rank,
                      tempo_last_error(comm));
    tempo_attr_t sa = {.field_mask = TEMPO_ATTR_STREAM};
    host_allreduce(comm, rank, size, &sa, &st);
    ok &= rk_check(st == TEMPO_ERR_UNSUPPORTED && strstr(tempo_last_error(comm), "CUDA stream"),
                   "invalid: rank %d: a CUDA stream without a usable driver: %s (%s)", rank,
                   tempo_status_name(st), tempo_last_error(comm));
    at.memtype = TEMPO_MEMTYPE_HOST;
    long bad = host_allreduce(comm, rank, size, &at, &st);
    ok &= rk_check(st == TEMPO_OK && bad == 0, "invalid: rank %d: then an all-reduce declared "
                   "TEMPO_MEMTYPE_HOST: %s, %ld wrong", rank, tempo_status_name(st), bad);
    return ok ? 0 : 1;
}

static int rank_declared(tempo_comm_t comm, int rank, int size, int me_too)
{
    tempo_attr_t at = {.field_mask = TEMPO_ATTR_MEMTYPE, .memtype = TEMPO_MEMTYPE_CUDA};
    tempo_status_t st;
    double t0 = rk_now();
    host_allreduce(comm, rank, size, me_too ? &at : NULL, &st);
    double took = rk_now() - t0;
    const char *e = tempo_last_error(comm);
    int ok;
    if (me_too) {
        ok = rk_check((st == TEMPO_ERR_UNSUPPORTED &&
                       (strstr(e, "no CUDA") || strstr(e, "no device"))) ||
                          (st == TEMPO_ERR_INVALID && strstr(e, "is not")),
                      "declared: rank %d: host buffers declared CUDA memory fail with the reason "
                      "(%s: %s)", rank, tempo_status_name(st), e);
    } else {
        ok = rk_check(st != TEMPO_OK && took < 10, "one rank: rank %d: its all-reduce fails in "
                      "%.2f s (%s: %s)", rank, took, tempo_status_name(st), e);
    }
    return ok ? 0 : 1;
}

#if TEMPO_HAVE_CUDA
/* Device memory for the device cases: the CUDA runtime's (cudaMalloc) or the stand-in driver's. */
static struct {
    void *(*alloc)(size_t);
    void (*free)(void *);
    int (*copy)(void *dst, const void *src, size_t n); /* 0: done */
} dev;

static void *rt_alloc(size_t n)
{
    void *d = NULL;
    return cudaMalloc(&d, n) == cudaSuccess ? d : NULL;
}
static void rt_free(void *d)
{
    cudaFree(d);
}
static int rt_copy(void *dst, const void *src, size_t n)
{
    return cudaMemcpy(dst, src, n, cudaMemcpyDefault) != cudaSuccess;
}

static int (*fake_memcpy)(unsigned long long, unsigned long long, size_t);
static int fake_copy(void *dst, const void *src, size_t n)
{
    return fake_memcpy((unsigned long long)(uintptr_t)dst, (unsigned long long)(uintptr_t)src, n);
}

/* The stand-in driver's allocation and copy (the library loaded by TEMPO_CUDA_DRIVER). */
static int use_fake(void)
{
    const char *path = getenv("TEMPO_CUDA_DRIVER");
    void *h = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    dev.alloc = h ? (void *(*)(size_t))dlsym(h, "fake_cuda_malloc") : NULL;
    dev.free = h ? (void (*)(void *))dlsym(h, "fake_cuda_free") : NULL;
    fake_memcpy = h ? (int (*)(unsigned long long, unsigned long long, size_t))dlsym(h, "cuMemcpy")
                    : NULL;
    dev.copy = fake_copy;
    return rk_check(dev.alloc && dev.free && fake_memcpy, "fake: the stand-in driver %s: %s",
                    path ? path : "(TEMPO_CUDA_DRIVER unset)", h ? "loaded" : dlerror());
}

/* A counter of a stand-in library of this process: name (fake_cuda_copies, fake_cuda_launches,
 * fake_cuda_ipc_opens; fake_nccl_calls) in the library that variable env names; 0 without it. */
static unsigned long long fake_count(const char *env, const char *name)
{
    const char *path = getenv(env);
    void *h = path ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : NULL;
    unsigned long long (*f)(void) = h ? (unsigned long long (*)(void))dlsym(h, name) : NULL;
    return f ? f() : 0;
}

/* NCCL calls made so far by the stand-in NCCL of this process (0 without it). */
static unsigned long long nccl_calls(void)
{
    return fake_count("TEMPO_NCCL_LIBRARY", "fake_nccl_calls");
}

/* Whether this job runs TEMPO_GPU_BACKEND=nccl. */
static int backend_nccl(void)
{
    const char *b = getenv("TEMPO_GPU_BACKEND");
    return b && !strcmp(b, "nccl");
}

/* n elements of dtype dt on the device, from a host array filled by put(). */
static void *dev_from(tempo_dtype_t dt, size_t n, const void *host)
{
    size_t bytes = n * tempo_dtype_size(dt);
    void *d = dev.alloc(bytes ? bytes : 1);
    if (d && bytes && dev.copy(d, host, bytes) != 0) {
        dev.free(d);
        return NULL;
    }
    return d;
}

/* Wrong elements of a device array of n elements against want(i) (a host copy is made). */
static long dev_check(tempo_dtype_t dt, const void *d, size_t n, double (*want)(size_t, void *),
                      void *ctx)
{
    size_t es = tempo_dtype_size(dt);
    char *h = malloc(n * es > 0 ? n * es : 1);
    if (!h || dev.copy(h, d, n * es) != 0) {
        free(h);
        return -1;
    }
    long bad = 0;
    for (size_t i = 0; i < n; i++) {
        bad += get(dt, h, i) != want(i, ctx);
    }
    free(h);
    return bad;
}

typedef struct {
    int n, rank;
    tempo_op_t op;
    size_t count;
    int bf16;  /* the result is bfloat16 */
} want_t;

static double want_reduce(size_t i, void *c)
{
    const want_t *w = c; /* avg at 3 ranks is not exact: the bfloat16 result is the rounded one */
    double e = expect(w->n, i, w->op);
    return w->bf16 ? from_bf16(to_bf16(e)) : e;
}
static double want_rs(size_t i, void *c)
{
    const want_t *w = c;
    return expect(w->n, (size_t)w->rank * w->count + i, w->op);
}
static double want_gather(size_t i, void *c)
{
    const want_t *w = c;
    return val((int)(i / w->count), i % w->count, TEMPO_SUM);
}
static double want_bcast(size_t i, void *c)
{
    (void)c;
    return val(0, i, TEMPO_SUM);
}
static double want_a2a(size_t i, void *c)
{
    const want_t *w = c; /* block q of the result came from rank q, its block w->rank */
    return val((int)(i / w->count), (size_t)w->rank * w->count + i % w->count, TEMPO_SUM);
}
static double want_ring(size_t i, void *c)
{
    const want_t *w = c; /* from the previous rank */
    return val((w->rank + w->n - 1) % w->n, i, TEMPO_SUM);
}

/* The driver's stream entry points (the stand-in's, or libcuda's), for the stream cases. */
static struct {
    int (*create)(void **, unsigned);
    int (*destroy)(void *);
    int (*fill)(unsigned long long, unsigned, size_t, void *);
    int (*dtoh)(void *, unsigned long long, size_t, void *);
    int (*query)(void *);
} sd;

/* Whether stream passes all its work within 30 s (polled: a stream left waiting forever fails
 * the point instead of hanging the test). */
static int stream_passes(void *stream)
{
    double t0 = rk_now();
    while (sd.query(stream) != 0) {
        if (rk_now() - t0 > 30) {
            return 0;
        }
        usleep(200);
    }
    return 1;
}

/* Stream-ordered calls (TEMPO_ATTR_STREAM) on a non-blocking stream: the input is written by a
 * memset enqueued just before the call (on the stand-in driver it takes 30 ms:
 * FAKE_CUDA_MEMSET_MS), the result read back by a copy enqueued just after it, and the stream
 * synchronized before the request is waited for: a call that read its input without waiting for
 * the stream reads -99, and one that copied its result out only in tempo_wait leaves -99 in the
 * copy. Every element exact; then a barrier on the stream, host buffers (TEMPO_ERR_INVALID on
 * every rank), and last disagreeing counts: the call fails on every rank and the stream still
 * goes on (its receive buffer undefined). */
static int rank_stream(tempo_comm_t comm, int rank, int n, int fake)
{
    const char *path = fake ? getenv("TEMPO_CUDA_DRIVER") : "libcuda.so.1";
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    sd.create = lib ? (int (*)(void **, unsigned))dlsym(lib, "cuStreamCreate") : NULL;
    sd.destroy = lib ? (int (*)(void *))dlsym(lib, "cuStreamDestroy_v2") : NULL;
    sd.fill = lib ? (int (*)(unsigned long long, unsigned, size_t, void *))dlsym(
                        lib, "cuMemsetD32Async") : NULL;
    sd.dtoh = lib ? (int (*)(void *, unsigned long long, size_t, void *))dlsym(
                        lib, "cuMemcpyDtoHAsync_v2") : NULL;
    sd.query = lib ? (int (*)(void *))dlsym(lib, "cuStreamQuery") : NULL;
    void *stream = NULL;
    int ok = rk_check(sd.create && sd.destroy && sd.fill && sd.dtoh && sd.query &&
                      sd.create(&stream, 1 /* CU_STREAM_NON_BLOCKING */) == 0,
                      "stream: rank %d: a stream from %s", rank, path);
    if (!ok) {
        return 0;
    }
    const size_t count = 100003;
    float *h = malloc(count * sizeof(float));
    for (size_t i = 0; i < count; i++) {
        h[i] = -99;
    }
    float mine = (float)(rank + 1), want = (float)(n * (n + 1) / 2);
    unsigned bits;
    memcpy(&bits, &mine, 4);
    for (int sched = 0; sched < 2; sched++) {
        void *s = dev_from(TEMPO_FLOAT32, count, h), *r = sched ? s : dev_from(TEMPO_FLOAT32, count, h);
        tempo_attr_t at = {.field_mask = TEMPO_ATTR_STREAM | (sched ? TEMPO_ATTR_PRIORITY : 0),
                           .stream = stream, .priority = 1};
        sd.fill((unsigned long long)(uintptr_t)s, bits, count, stream);
        tempo_request_t q;
        unsigned long long calls0 = nccl_calls();
        tempo_status_t st = tempo_iallreduce(comm, s, r, count, TEMPO_FLOAT32, TEMPO_SUM, &at, &q);
        if (fake && backend_nccl()) { /* the plain one: an NCCL call on the stream; the other
                                       * host-staged */
            unsigned long long k = nccl_calls() - calls0;
            ok &= rk_check(k == (sched ? 0u : 1u), "stream: rank %d: under nccl, the %s one made "
                           "%llu NCCL calls", rank, sched ? "scheduled" : "plain", k);
        }
        float *out = malloc(count * sizeof(float));
        for (size_t i = 0; i < count; i++) {
            out[i] = -1;
        }
        if (st == TEMPO_OK) {
            sd.dtoh(out, (unsigned long long)(uintptr_t)r, count * sizeof(float), stream);
        }
        int passed = st == TEMPO_OK && stream_passes(stream);
        long bad = 0;
        for (size_t i = 0; i < count; i++) {
            bad += out[i] != want;
        }
        tempo_status_t ws = st == TEMPO_OK ? tempo_wait(&q) : st; /* (a stuck stream goes on) */
        ok &= rk_check(passed && bad == 0 && ws == TEMPO_OK,
                       "stream: rank %d: %s all-reduce ordered on a stream, the stream "
                       "synchronized before tempo_wait: %s, stream %s, %ld wrong (first %g), "
                       "then tempo_wait %s", rank, sched ? "scheduled in-place" : "out-of-place",
                       tempo_status_name(st), passed ? "passed" : "stuck", bad, out[0],
                       tempo_status_name(ws));
        free(out);
        dev.free(s);
        if (!sched) {
            dev.free(r);
        }
    }
    tempo_attr_t at = {.field_mask = TEMPO_ATTR_STREAM, .stream = stream};
    tempo_request_t q;
    tempo_status_t st = tempo_ibarrier(comm, &at, &q);
    int passed = stream_passes(stream);
    st = st == TEMPO_OK ? tempo_wait(&q) : st;
    /* (OK; or, on a rank whose barrier was still in flight when a peer found the disagreement
     * made on purpose below, failed with it: a call in flight when its communicator fails,
     * fails too) */
    const char *be = tempo_last_error(comm);
    ok &= rk_check(passed && (st == TEMPO_OK || (n > 1 && strstr(be, "count 1001"))),
                   "stream: rank %d: a barrier ordered on the stream: "
                   "stream %s, %s", rank, passed ? "passed" : "stuck", tempo_status_name(st));
    float hb[16] = {0};
    st = tempo_iallreduce(comm, hb, hb, 16, TEMPO_FLOAT32, TEMPO_SUM, &at, &q);
    ok &= rk_check(st == TEMPO_ERR_INVALID && strstr(tempo_last_error(comm), "not CUDA device"),
                   "stream: rank %d: host buffers on a stream: %s (%s)", rank,
                   tempo_status_name(st), tempo_last_error(comm));
    /* last: the communicator fails (with more than one rank) */
    size_t c2 = rank == 0 && n > 1 ? 1001 : 1000;
    void *s = dev_from(TEMPO_FLOAT32, c2, h);
    st = tempo_iallreduce(comm, s, s, c2, TEMPO_FLOAT32, TEMPO_SUM, &at, &q);
    passed = stream_passes(stream); /* (also where the call failed when it was posted) */
    st = st == TEMPO_OK ? tempo_wait(&q) : st;
    if (n > 1) {
        ok &= rk_check(st != TEMPO_OK && passed, "stream: rank %d: disagreeing counts on a "
                       "stream: %s (%s), the stream %s", rank, tempo_status_name(st),
                       tempo_last_error(comm), passed ? "went on" : "is stuck");
    }
    dev.free(s);
    free(h);
    sd.destroy(stream);
    return ok;
}

/* The bucketer over device tensors (and one host tensor among them), the tic policy and 64 KB
 * buckets: fused buckets copy device tensors in and out through the driver, a tensor alone in its
 * bucket runs staged in place. Two iterations (tensors marked in reverse layer order; in the
 * second, re-filled, two device tensors are skipped: zeroed by the driver, their result 0), every
 * element exact, read back from the device. */
static int rank_bucketer(tempo_comm_t comm, int rank, int n)
{
    enum { NT = 6 };
    static const size_t cnt[NT] = {1000, 20000, 3, 70000, 512, 777};
    void *g[NT];
    float *hb[NT];
    tempo_tensor_desc_t d[NT];
    for (int k = 0; k < NT; k++) {
        hb[k] = malloc(cnt[k] * sizeof(float));
        g[k] = NULL;
        d[k] = (tempo_tensor_desc_t){.id = (uint64_t)k + 1, .count = cnt[k],
                                     .dtype = TEMPO_FLOAT32, .layer = k};
    }
    tempo_bucketer_config_t cfg = {.field_mask = TEMPO_BUCKETER_OP | TEMPO_BUCKETER_BUCKET_BYTES |
                                                 TEMPO_BUCKETER_SCHED | TEMPO_BUCKETER_COMPRESSOR,
                                   .op = TEMPO_SUM, .bucket_bytes = 64 << 10,
                                   .sched = TEMPO_SCHED_TIC, .compressor = NULL};
    int ok = 1;
    tempo_bucketer_t b = NULL;
    for (int it = 0; it < 2 && ok; it++) {
        for (int k = 0; k < NT; k++) {
            for (size_t i = 0; i < cnt[k]; i++) {
                hb[k][i] = (float)val(rank, i + (size_t)(k + it), TEMPO_SUM);
            }
            if (k == 4) { /* a host tensor */
                if (!g[k]) {
                    g[k] = malloc(cnt[k] * sizeof(float));
                }
                memcpy(g[k], hb[k], cnt[k] * sizeof(float));
            } else if (!g[k]) {
                g[k] = dev_from(TEMPO_FLOAT32, cnt[k], hb[k]);
            } else {
                dev.copy(g[k], hb[k], cnt[k] * sizeof(float));
            }
            d[k].grad = g[k];
        }
        tempo_status_t st = b ? TEMPO_OK : tempo_bucketer_create(comm, d, NT, &cfg, &b);
        st = st == TEMPO_OK ? tempo_bucketer_begin(b, 1) : st;
        for (int k = NT - 1; k >= 0 && st == TEMPO_OK; k--) {
            int skip = it == 1 && (k == 1 || k == 5); /* zeroed on the device, reduced: 0 */
            st = skip ? tempo_bucketer_skip(b, (uint64_t)k + 1)
                      : tempo_bucketer_ready(b, (uint64_t)k + 1);
        }
        st = st == TEMPO_OK ? tempo_bucketer_wait_all(b) : st;
        long bad = st == TEMPO_OK ? 0 : -1;
        for (int k = 0; k < NT && bad >= 0; k++) {
            if (k == 4) {
                memcpy(hb[k], g[k], cnt[k] * sizeof(float));
            } else if (dev.copy(hb[k], g[k], cnt[k] * sizeof(float)) != 0) {
                bad = -1;
                break;
            }
            for (size_t i = 0; i < cnt[k]; i++) {
                int skip = it == 1 && (k == 1 || k == 5);
                bad += hb[k][i] != (skip ? 0.0f : (float)expect(n, i + (size_t)(k + it), TEMPO_SUM));
            }
        }
        ok &= rk_check(bad == 0, "bucketer: rank %d: iteration %d over 5 device tensors and a "
                       "host one (64 KB buckets, tic)%s: %s, %ld wrong (%s)", rank, it,
                       it ? ", two device tensors skipped (one fused, one alone)" : "",
                       tempo_status_name(st), bad, st == TEMPO_OK ? "" : tempo_last_error(comm));
    }
    /* the layout the cases above claim: fused buckets holding device tensors, and device tensors
     * alone in place (layers 1 and 3: 80000 and 280000 bytes) */
    size_t fused = 0, alone = 0, nb = b ? tempo_bucketer_nbuckets(b) : 0;
    for (size_t i = 0; i < nb; i++) {
        tempo_bucket_info_t bi;
        if (tempo_bucketer_bucket_info(b, i, &bi) == TEMPO_OK) {
            fused += !bi.in_place && bi.ntensors > 1 && bi.max_layer == 5; /* with skipped 5 */
            alone += bi.in_place && bi.ntensors == 1 && (bi.min_layer == 1 || bi.min_layer == 3);
        }
    }
    ok &= rk_check(fused >= 1 && alone == 2, "bucketer: rank %d: %zu buckets, %zu fused, %zu device "
                   "tensors alone in place", rank, nb, fused, alone);
    if (b) {
        tempo_bucketer_destroy(b);
    }
    for (int k = 0; k < NT; k++) {
        if (k == 4) {
            free(g[k]);
        } else if (g[k]) {
            dev.free(g[k]);
        }
        free(hb[k]);
    }
    return ok;
}

static int rank_device(tempo_comm_t comm, int rank, int n, int fake);

/* An all-reduce of count float32 sums, every rank's input val(rank, i), on the device (dev) or
 * not; the wrong elements' count, or -1 when the call failed (*st). */
static long nccl_allreduce(tempo_comm_t comm, int rank, int n, size_t count, int on_dev,
                           tempo_status_t *st)
{
    float *h = malloc(count * sizeof(float));
    for (size_t i = 0; i < count; i++) {
        h[i] = (float)val(rank, i, TEMPO_SUM);
    }
    void *d = on_dev ? dev_from(TEMPO_FLOAT32, count, h) : h;
    *st = tempo_allreduce(comm, d, d, count, TEMPO_FLOAT32, TEMPO_SUM);
    long bad = -1;
    if (*st == TEMPO_OK && (!on_dev || dev.copy(h, d, count * sizeof(float)) == 0)) {
        bad = 0;
        for (size_t i = 0; i < count; i++) {
            bad += h[i] != (float)expect(n, i, TEMPO_SUM);
        }
    }
    if (on_dev) {
        dev.free(d);
    }
    free(h);
    return bad;
}

/* Deadlines and deaths hold on NCCL calls and on all-reduces through CUDA IPC too
 * (TEMPO_TIMEOUT=3s here): rank 1 makes its second call 8 s late (late) or dies 0.5 s into rank
 * 0's (death, SIGKILL); rank 0's call (an NCCL call, which NCCL alone would leave waiting forever;
 * or, with TEMPO_GPU_IPC=1, one that took IPC: a kernel launch seen in the first) fails within
 * 10 s naming rank 1 (TEMPO_ERR_TIMEOUT, or the peer's death), and its NCCL work is aborted (the
 * call returns at all). */
static int rank_nccl_peer(tempo_comm_t comm, int rank, int n, int death)
{
    int ok = use_fake();
    tempo_status_t st;
    /* (a blocking all-reduce of device buffers: NCCL's; with TEMPO_GPU_IPC=1, through IPC) */
    const char *what = getenv("TEMPO_GPU_IPC") ? "ipc" : "nccl";
    unsigned long long l0 = fake_count("TEMPO_CUDA_DRIVER", "fake_cuda_launches");
    long bad = nccl_allreduce(comm, rank, n, 1000, 1, &st);
    unsigned long long l1 = fake_count("TEMPO_CUDA_DRIVER", "fake_cuda_launches");
    ok &= rk_check(bad == 0 && (strcmp(what, "ipc") || l1 > l0),
                   "%s %s: rank %d: the first call: %s, %ld wrong (%llu kernel launches)", what,
                   death ? "death" : "late", rank, tempo_status_name(st), bad, l1 - l0);
    if (rank == 1) {
        if (death) { /* (before its call: one it had made might have done its part first) */
            rk_put("done", "%d", ok);
            usleep(500000);
            raise(SIGKILL);
        }
        sleep(8);
    }
    double t0 = rk_now();
    bad = nccl_allreduce(comm, rank, n, 1000, 1, &st);
    double took = rk_now() - t0;
    const char *e = tempo_last_error(comm);
    if (rank == 0) {
        ok &= rk_check(st != TEMPO_OK && took < 10 && strstr(e, "rank 1"),
                       "%s %s: rank 0: the second call, rank 1 %s: fails in %.1f s (%s: %s)",
                       what, death ? "death" : "late", death ? "dead" : "8 s late", took,
                       tempo_status_name(st), e);
    } else {
        ok &= rk_check(st != TEMPO_OK, "%s late: rank 1: its late call: %s (%s)", what,
                       tempo_status_name(st), e);
    }
    return ok ? 0 : 1;
}

#if TEMPO_HAVE_NCCL

/* TEMPO_GPU_BACKEND=nccl on the stand-in NCCL: the device cases of rank_device (every collective
 * NCCL has runs as NCCL calls, counted; all-to-all and send/recv stay host-staged), then the
 * bucketer, whose fused buckets are host memory and run tempo's own collectives. */
static int rank_nccl(tempo_comm_t comm, int rank, int n)
{
    unsigned long long c0 = nccl_calls();
    int ok = rank_device(comm, rank, n, 1) == 0;
    unsigned long long c1 = nccl_calls();
    /* all-reduce 4 dtypes x 2 (but bfloat16: the stand-in lacks it, host-staged), reduce-scatter,
     * all-gather x 2, broadcast, reduce, 4 scheduled all-reduces (one chunk or more each), rank
     * 0's device all-reduce in the mixed case (the others' host buffers: nccl needs all ranks on
     * the device, so this one mixed case fails on NCCL's side... see rank_nccl_mixed) */
    ok &= rk_check(c1 - c0 >= 14, "nccl: rank %d: %llu NCCL calls", rank, c1 - c0);
    return ok ? 0 : 1;
}

/* NCCL needs every rank's buffers on the device: rank 0 passes device buffers, the others host
 * ones. As the first call (first: NCCL's unique id still to be sent, by a broadcast the others
 * do not make) or after an all-device call, it fails on every rank within 10 s, saying how the
 * ranks differ. */
static int rank_nccl_mixed(tempo_comm_t comm, int rank, int n, int first)
{
    int ok = use_fake();
    tempo_status_t st;
    long bad;
    if (!first) {
        bad = nccl_allreduce(comm, rank, n, 1000, 1, &st); /* all on the device: fine */
        ok &= rk_check(bad == 0, "nccl mixed: rank %d: an all-device all-reduce first: %s, %ld "
                       "wrong", rank, tempo_status_name(st), bad);
    }
    double t0 = rk_now();
    bad = nccl_allreduce(comm, rank, n, 1000, rank == 0, &st);
    double took = rk_now() - t0;
    ok &= rk_check(st != TEMPO_OK && took < 10,
                   "nccl mixed: rank %d: %s rank 0 on the device, the others on the host: fails "
                   "in %.2f s (%s: %s)", rank, first ? "first," : "then", took,
                   tempo_status_name(st), tempo_last_error(comm));
    return ok ? 0 : 1;
}

/* NCCL checks nothing: a broadcast whose root disagrees (rank 0 names root 0, the others root 1)
 * must fail on every rank with TEMPO_ERR_INVALID naming the roots, not return NCCL's result. */
static int rank_nccl_roots(tempo_comm_t comm, int rank, int n)
{
    int ok = use_fake();
    float h[1000];
    for (int i = 0; i < 1000; i++) {
        h[i] = (float)(rank + 1);
    }
    void *d = dev_from(TEMPO_FLOAT32, 1000, h);
    tempo_status_t st = tempo_broadcast(comm, d, d, 1000, TEMPO_FLOAT32, rank == 0 ? 0 : 1);
    const char *e = tempo_last_error(comm);
    ok &= rk_check(st == TEMPO_ERR_INVALID && strstr(e, "root"), "nccl roots: rank %d of %d: a "
                   "broadcast from root %d: %s (%s)", rank, n, rank == 0 ? 0 : 1,
                   tempo_status_name(st), e);
    dev.free(d);
    return ok ? 0 : 1;
}

/* A forced NCCL failure on rank 1 (FAKE_NCCL_FAIL=sync or async, its second NCCL call): every
 * rank's call fails within 10 s (TEMPO_TIMEOUT 30 s), naming NCCL and rank 1, none TEMPO_OK; the
 * communicator stays failed (a third call fails at once). */
static int rank_nccl_fail(tempo_comm_t comm, int rank, int n, const char *how, int fake)
{
    int ok = 1;
    if (fake) {
        ok = use_fake();
    } else {
        cudaError_t e = cudaSetDevice(0);
        ok = rk_check(e == cudaSuccess, "nccl %s: rank %d: cudaSetDevice(0): %s", how, rank,
                      cudaGetErrorString(e));
        dev.alloc = rt_alloc, dev.free = rt_free, dev.copy = rt_copy;
    }
    /* the failing rank (the stand-in's FAKE_NCCL_FAIL_RANK, or the shim's) */
    const char *sf = getenv("NCCL_SHIM_FAIL");
    const char *fr = sf && *sf ? getenv("NCCL_SHIM_FAIL_RANK") : getenv("FAKE_NCCL_FAIL_RANK");
    char on[32];
    snprintf(on, sizeof(on), "on rank %d", fr ? atoi(fr) : 1);
    tempo_status_t st;
    long bad = nccl_allreduce(comm, rank, n, 1000, 1, &st);
    /* (exact; or, on a rank still waiting for it when rank 1's second call failed the
     * communicator, failed with that: a call in flight when its communicator fails, fails too) */
    const char *e1 = tempo_last_error(comm);
    ok &= rk_check(bad == 0 || (st != TEMPO_OK && strstr(e1, "NCCL") && strstr(e1, on)),
                   "nccl %s: rank %d: the first call: %s, %ld wrong (%s)", how, rank,
                   tempo_status_name(st), bad, st == TEMPO_OK ? "" : e1);
    double t0 = rk_now();
    bad = nccl_allreduce(comm, rank, n, 1000, 1, &st);
    double took = rk_now() - t0;
    const char *e = tempo_last_error(comm);
    /* (through the shim, an asynchronous failure leaves the call to run: the other ranks' may
     * finish, exactly, before the failing rank has found its error and failed the communicator;
     * the third call fails everywhere) */
    int may_finish = sf && *sf && !strcmp(how, "async") && rank != (fr ? atoi(fr) : 1);
    ok &= rk_check((st != TEMPO_OK && took < 10 && strstr(e, "NCCL") && strstr(e, on)) ||
                       (may_finish && st == TEMPO_OK && bad == 0),
                   "nccl %s: rank %d: the second, failing %s: fails in %.2f s (%s: %s)", how,
                   rank, on, took, tempo_status_name(st), e);
    bad = nccl_allreduce(comm, rank, n, 1000, 1, &st);
    ok &= rk_check(st != TEMPO_OK, "nccl %s: rank %d: a third call: %s (%s)", how, rank,
                   tempo_status_name(st), tempo_last_error(comm));
    return ok ? 0 : 1;
}
#endif

/* Pipelined copies in (gpu/cuda.c: 1 MB or more, asynchronous in segments, each operation or
 * chunk starting once its part has landed), with copies slowed to 2 ms per MB on the stand-in
 * driver (FAKE_CUDA_COPY_MS_PER_MB): a 16 MB all-reduce, plain and scheduled in 1 MB chunks, out
 * of place and in place, and a reduce-scatter in 1 MB chunks; every element exact. */
static int rank_pipelined(tempo_comm_t comm, int rank, int n)
{
    int ok = 1;
    const size_t count = (size_t)4 << 20;
    float *h = malloc(count * sizeof(float));
    for (int k = 0; k < 5; k++) {
        int sched = k >= 2, inplace = k % 2, rs = k == 4;
        size_t rc = count / (size_t)n, out = rs ? rc : count;
        for (size_t i = 0; i < count; i++) {
            h[i] = (float)val(rank, i, TEMPO_SUM);
        }
        void *s = dev_from(TEMPO_FLOAT32, count, h);
        void *r = inplace && !rs ? s : dev_from(TEMPO_FLOAT32, out, h);
        tempo_attr_t at = {.field_mask = TEMPO_ATTR_PRIORITY | TEMPO_ATTR_CHUNK_BYTES,
                           .priority = 1, .chunk_bytes = 1 << 20};
        tempo_request_t q;
        tempo_status_t st = rs ? tempo_ireduce_scatter(comm, s, r, rc, TEMPO_FLOAT32, TEMPO_SUM,
                                                       &at, &q)
                               : tempo_iallreduce(comm, s, r, count, TEMPO_FLOAT32, TEMPO_SUM,
                                                  sched ? &at : NULL, &q);
        st = st == TEMPO_OK ? tempo_wait(&q) : st;
        want_t w = {n, rank, TEMPO_SUM, rc, 0};
        long bad = st == TEMPO_OK ? dev_check(TEMPO_FLOAT32, r, out,
                                              rs ? want_rs : want_reduce, &w)
                                  : -1;
        ok &= rk_check(bad == 0, "pipelined: rank %d: 16 MB %s%s%s: %s, %ld wrong", rank,
                       rs ? "reduce-scatter" : "all-reduce", sched ? " in 1 MB chunks" : "",
                       inplace && !rs ? ", in place" : "", tempo_status_name(st), bad);
        dev.free(s);
        if (r != s) {
            dev.free(r);
        }
    }
    free(h);
    return ok;
}

/* TEMPO_PROGRESS_THREAD=0: nothing would let a stream go on while its caller does not wait, so a
 * stream is refused, saying so; device buffers without one still work. */
static int rank_nothread(tempo_comm_t comm, int rank, int n)
{
    int ok = use_fake();
    float h[64];
    for (int i = 0; i < 64; i++) {
        h[i] = (float)(rank + 1);
    }
    void *d = dev_from(TEMPO_FLOAT32, 64, h);
    tempo_attr_t at = {.field_mask = TEMPO_ATTR_STREAM};
    tempo_request_t q;
    tempo_status_t st = tempo_iallreduce(comm, d, d, 64, TEMPO_FLOAT32, TEMPO_SUM, &at, &q);
    ok &= rk_check(st == TEMPO_ERR_UNSUPPORTED &&
                   strstr(tempo_last_error(comm), "TEMPO_PROGRESS_THREAD=0"),
                   "no thread: rank %d: a stream: %s (%s)", rank, tempo_status_name(st),
                   tempo_last_error(comm));
    st = tempo_allreduce(comm, d, d, 64, TEMPO_FLOAT32, TEMPO_SUM);
    long bad = -1;
    if (st == TEMPO_OK && dev.copy(h, d, sizeof(h)) == 0) {
        bad = 0;
        for (int i = 0; i < 64; i++) {
            bad += h[i] != (float)(n * (n + 1) / 2);
        }
    }
    ok &= rk_check(bad == 0, "no thread: rank %d: then a device all-reduce without one: %s, %ld "
                   "wrong", rank, tempo_status_name(st), bad);
    dev.free(d);
    return ok ? 0 : 1;
}

/* TEMPO_GPU_IPC=1: blocking all-reduces of device buffers through CUDA IPC (gpu/ipc.c), every
 * element exact; on the stand-in driver, that tempo's kernel ran (launches) and that a second
 * call on the same buffers maps nothing again; a rank with host buffers (every rank host-staged,
 * still exact, no kernel); disagreeing counts fail on every rank. */
static int rank_ipc(tempo_comm_t comm, int rank, int n, int fake)
{
    int ok = 1;
    static const struct {
        tempo_dtype_t dt;
        tempo_op_t op;
    } ar[] = {{TEMPO_FLOAT32, TEMPO_SUM}, {TEMPO_FLOAT32, TEMPO_AVG}, {TEMPO_INT32, TEMPO_MAX},
              {TEMPO_FLOAT64, TEMPO_PROD}, {TEMPO_BFLOAT16, TEMPO_AVG}, {TEMPO_INT8, TEMPO_MAX}};
    static const size_t counts[] = {100003, 1, 3};
    char *h = malloc(100003 * 8);
    for (size_t c = 0; ok && c < sizeof(counts) / sizeof(counts[0]); c++) {
        size_t count = counts[c];
        for (size_t k = 0; ok && k < sizeof(ar) / sizeof(ar[0]); k++) {
            for (int inplace = 0; inplace < 2; inplace++) {
                for (size_t i = 0; i < count; i++) {
                    put(ar[k].dt, h, i, val(rank, i, ar[k].op));
                }
                void *s = dev_from(ar[k].dt, count, h);
                void *r = inplace ? s : dev_from(ar[k].dt, count, h);
                unsigned long long l0 = fake_count("TEMPO_CUDA_DRIVER", "fake_cuda_launches");
                tempo_status_t st = tempo_allreduce(comm, s, r, count, ar[k].dt, ar[k].op);
                unsigned long long l1 = fake_count("TEMPO_CUDA_DRIVER", "fake_cuda_launches");
                want_t w = {n, rank, ar[k].op, count, ar[k].dt == TEMPO_BFLOAT16};
                long bad = st == TEMPO_OK ? dev_check(ar[k].dt, r, count, want_reduce, &w) : -1;
                /* (a rank whose share is empty launches nothing: count 1 or 3 at 4 ranks) */
                int share = count / (size_t)n + ((size_t)rank < count % (size_t)n) > 0;
                ok &= rk_check(bad == 0 && (!fake || !share || l1 > l0),
                               "ipc: rank %d: all-reduce of %zu %s %s %s: %s, %ld wrong, %llu "
                               "kernel launches",
                               rank, count, tempo_dtype_name(ar[k].dt), tempo_op_name(ar[k].op),
                               inplace ? "in place" : "out of place", tempo_status_name(st), bad,
                               l1 - l0);
                if (c == 0 && k == 0 && !inplace) { /* the same buffers again: mapped already */
                    unsigned long long o0 = fake_count("TEMPO_CUDA_DRIVER", "fake_cuda_ipc_opens");
                    for (size_t i = 0; i < count; i++) {
                        put(ar[k].dt, h, i, val(rank, i, ar[k].op));
                    }
                    dev.copy(s, h, count * tempo_dtype_size(ar[k].dt));
                    st = tempo_allreduce(comm, s, r, count, ar[k].dt, ar[k].op);
                    bad = st == TEMPO_OK ? dev_check(ar[k].dt, r, count, want_reduce, &w) : -1;
                    unsigned long long o1 = fake_count("TEMPO_CUDA_DRIVER", "fake_cuda_ipc_opens");
                    ok &= rk_check(bad == 0 && (!fake || (o0 >= (unsigned)(2 * (n - 1)) &&
                                                          o1 == o0)),
                                   "ipc: rank %d: the same buffers again: %s, %ld wrong, %llu "
                                   "peer buffers mapped before, %llu more now",
                                   rank, tempo_status_name(st), bad, o0, o1 - o0);
                }
                dev.free(s);
                if (!inplace) {
                    dev.free(r);
                }
            }
        }
    }
    /* rank 1 on host buffers: every rank host-staged, exact, no kernel */
    const size_t count = 100003;
    for (size_t i = 0; i < count; i++) {
        put(TEMPO_FLOAT32, h, i, val(rank, i, TEMPO_SUM));
    }
    void *d = rank == 1 ? h : dev_from(TEMPO_FLOAT32, count, h);
    unsigned long long l0 = fake_count("TEMPO_CUDA_DRIVER", "fake_cuda_launches");
    tempo_status_t st = tempo_allreduce(comm, d, d, count, TEMPO_FLOAT32, TEMPO_SUM);
    unsigned long long l1 = fake_count("TEMPO_CUDA_DRIVER", "fake_cuda_launches");
    want_t w = {n, rank, TEMPO_SUM, count, 0};
    long bad = -1;
    if (st == TEMPO_OK && rank == 1) {
        bad = 0;
        for (size_t i = 0; i < count; i++) {
            bad += get(TEMPO_FLOAT32, h, i) != expect(n, i, TEMPO_SUM);
        }
    } else if (st == TEMPO_OK) {
        bad = dev_check(TEMPO_FLOAT32, d, count, want_reduce, &w);
    }
    ok &= rk_check(bad == 0 && l1 == l0, "ipc: rank %d: rank 1 on host buffers: %s, %ld wrong, "
                   "%llu kernel launches", rank, tempo_status_name(st), bad, l1 - l0);
    if (rank != 1) {
        dev.free(d);
    }
    /* disagreeing counts (last: the communicator fails with them) */
    void *s = dev_from(TEMPO_FLOAT32, count, h), *r = dev_from(TEMPO_FLOAT32, count, h);
    st = tempo_allreduce(comm, s, r, rank == 0 ? count - 1 : count, TEMPO_FLOAT32, TEMPO_SUM);
    ok &= rk_check(st != TEMPO_OK, "ipc: rank %d: rank 0 passes %zu elements, the others %zu: "
                   "%s (%s)", rank, count - 1, count, tempo_status_name(st), tempo_last_error(comm));
    dev.free(s);
    dev.free(r);
    free(h);
    return ok;
}

static int rank_device(tempo_comm_t comm, int rank, int n, int fake)
{
    int ok;
    if (fake) {
        ok = use_fake();
    } else {
        cudaError_t e = cudaSetDevice(0);
        ok = rk_check(e == cudaSuccess, "device: rank %d: cudaSetDevice(0): %s", rank,
                      cudaGetErrorString(e));
        dev.alloc = rt_alloc, dev.free = rt_free, dev.copy = rt_copy;
    }
    if (ok && getenv("TEMPO_GPU_IPC")) {
        /* on a communicator of its own: it ends with a disagreement, which fails it */
        tempo_comm_t sub = NULL;
        tempo_status_t st = tempo_comm_split(comm, 0, rank, &sub);
        ok = rk_check(st == TEMPO_OK, "ipc: rank %d: split: %s", rank, tempo_status_name(st)) &&
             rank_ipc(sub, rank, n, fake);
        tempo_comm_destroy(sub);
    }
    const size_t count = 100003;
    char *h = malloc(count * 8 * (size_t)n);
    static const struct {
        tempo_dtype_t dt;
        tempo_op_t op;
    } ar[] = {{TEMPO_FLOAT32, TEMPO_SUM}, {TEMPO_INT32, TEMPO_MAX},
              {TEMPO_FLOAT64, TEMPO_PROD}, {TEMPO_BFLOAT16, TEMPO_AVG}};
    for (size_t k = 0; ok && k < sizeof(ar) / sizeof(ar[0]); k++) {
        for (int inplace = 0; inplace < 2; inplace++) {
            for (size_t i = 0; i < count; i++) {
                put(ar[k].dt, h, i, val(rank, i, ar[k].op));
            }
            void *s = dev_from(ar[k].dt, count, h), *r = inplace ? s : dev_from(ar[k].dt, count, h);
            tempo_attr_t at = {.field_mask = TEMPO_ATTR_MEMTYPE, .memtype = TEMPO_MEMTYPE_CUDA};
            tempo_request_t q;
            tempo_status_t st = tempo_iallreduce(comm, s, r, count, ar[k].dt, ar[k].op,
                                                 k == 0 ? &at : NULL, &q);
            st = st == TEMPO_OK ? tempo_wait(&q) : st;
            want_t w = {n, rank, ar[k].op, count, ar[k].dt == TEMPO_BFLOAT16};
            long bad = st == TEMPO_OK ? dev_check(ar[k].dt, r, count, want_reduce, &w) : -1;
            ok &= rk_check(bad == 0, "device: rank %d: all-reduce %s %s %s%s: %s, %ld wrong",
                           rank, tempo_dtype_name(ar[k].dt), tempo_op_name(ar[k].op),
                           inplace ? "in place" : "out of place", k == 0 ? " (declared)" : "",
                           tempo_status_name(st), bad);
            dev.free(s);
            if (!inplace) {
                dev.free(r);
            }
        }
    }
    /* reduce-scatter: count per rank */
    size_t rc = count / (size_t)n;
    for (size_t i = 0; i < rc * (size_t)n; i++) {
        put(TEMPO_FLOAT32, h, i, val(rank, i, TEMPO_SUM));
    }
    void *s = dev_from(TEMPO_FLOAT32, rc * (size_t)n, h), *r = dev_from(TEMPO_FLOAT32, rc, h);
    tempo_status_t st = tempo_reduce_scatter(comm, s, r, rc, TEMPO_FLOAT32, TEMPO_SUM);
    want_t w = {n, rank, TEMPO_SUM, rc, 0};
    long bad = st == TEMPO_OK ? dev_check(TEMPO_FLOAT32, r, rc, want_rs, &w) : -1;
    ok &= rk_check(bad == 0, "device: rank %d: reduce-scatter: %s, %ld wrong", rank,
                   tempo_status_name(st), bad);
    dev.free(s);
    dev.free(r);
    /* all-gather, out of place and in place */
    for (int inplace = 0; inplace < 2; inplace++) {
        for (size_t i = 0; i < rc * (size_t)n; i++) {
            put(TEMPO_FLOAT32, h, i, i / rc == (size_t)rank ? val(rank, i % rc, TEMPO_SUM) : -99);
        }
        void *all = dev_from(TEMPO_FLOAT32, rc * (size_t)n, h);
        void *mine = inplace ? (char *)all + (size_t)rank * rc * 4
                             : dev_from(TEMPO_FLOAT32, rc, h + (size_t)rank * rc * 4);
        st = tempo_allgather(comm, mine, all, rc, TEMPO_FLOAT32);
        bad = st == TEMPO_OK ? dev_check(TEMPO_FLOAT32, all, rc * (size_t)n, want_gather, &w) : -1;
        ok &= rk_check(bad == 0, "device: rank %d: all-gather %s: %s, %ld wrong", rank,
                       inplace ? "in place" : "out of place", tempo_status_name(st), bad);
        if (!inplace) {
            dev.free(mine);
        }
        dev.free(all);
    }
    /* broadcast from 0, reduce to the last rank */
    for (size_t i = 0; i < count; i++) {
        put(TEMPO_FLOAT32, h, i, rank == 0 ? val(0, i, TEMPO_SUM) : -99);
    }
    void *b = dev_from(TEMPO_FLOAT32, count, h);
    st = tempo_broadcast(comm, b, b, count, TEMPO_FLOAT32, 0);
    bad = st == TEMPO_OK ? dev_check(TEMPO_FLOAT32, b, count, want_bcast, NULL) : -1;
    ok &= rk_check(bad == 0, "device: rank %d: broadcast: %s, %ld wrong", rank,
                   tempo_status_name(st), bad);
    for (size_t i = 0; i < count; i++) {
        put(TEMPO_FLOAT32, h, i, val(rank, i, TEMPO_SUM));
    }
    s = dev_from(TEMPO_FLOAT32, count, h);
    r = dev_from(TEMPO_FLOAT32, count, h);
    st = tempo_reduce(comm, s, r, count, TEMPO_FLOAT32, TEMPO_SUM, n - 1);
    w.count = count;
    bad = st == TEMPO_OK && rank == n - 1 ? dev_check(TEMPO_FLOAT32, r, count, want_reduce, &w)
                                          : st == TEMPO_OK ? 0 : -1;
    ok &= rk_check(bad == 0, "device: rank %d: reduce: %s, %ld wrong", rank,
                   tempo_status_name(st), bad);
    dev.free(b);
    dev.free(s);
    dev.free(r);
    /* all-to-all: block q of rank r's input is val(r, q * rc + i) */
    for (size_t i = 0; i < rc * (size_t)n; i++) {
        put(TEMPO_FLOAT32, h, i, val(rank, i, TEMPO_SUM));
    }
    s = dev_from(TEMPO_FLOAT32, rc * (size_t)n, h);
    r = dev_from(TEMPO_FLOAT32, rc * (size_t)n, h);
    st = tempo_alltoall(comm, s, r, rc, TEMPO_FLOAT32);
    w.count = rc;
    bad = st == TEMPO_OK ? dev_check(TEMPO_FLOAT32, r, rc * (size_t)n, want_a2a, &w) : -1;
    ok &= rk_check(bad == 0, "device: rank %d: all-to-all: %s, %ld wrong", rank,
                   tempo_status_name(st), bad);
    dev.free(s);
    dev.free(r);
    /* send/recv around the ring */
    for (size_t i = 0; i < count; i++) {
        put(TEMPO_FLOAT32, h, i, val(rank, i, TEMPO_SUM));
    }
    s = dev_from(TEMPO_FLOAT32, count, h);
    r = dev_from(TEMPO_FLOAT32, count, h);
    tempo_request_t rq[2];
    st = n == 1 ? TEMPO_ERR_INVALID /* (no peer) */
                : tempo_irecv(comm, r, count, TEMPO_FLOAT32, (rank + n - 1) % n, 5, NULL, &rq[0]);
    if (st == TEMPO_OK) {
        st = tempo_isend(comm, s, count, TEMPO_FLOAT32, (rank + 1) % n, 5, NULL, &rq[1]);
    }
    st = st == TEMPO_OK ? tempo_waitall(2, rq, NULL) : st;
    bad = st == TEMPO_OK ? dev_check(TEMPO_FLOAT32, r, count, want_ring, &w) : -1;
    ok &= rk_check(bad == 0 || n == 1, "device: rank %d: send/recv ring: %s, %ld wrong%s", rank,
                   tempo_status_name(st), bad, n == 1 ? " (one rank: no ring)" : "");
    dev.free(s);
    dev.free(r);
    /* scheduled all-reduces, posted in reverse priority, in place */
    void *g[4];
    tempo_request_t gq[4];
    st = TEMPO_OK;
    for (int k = 0; k < 4; k++) {
        for (size_t i = 0; i < count; i++) {
            put(TEMPO_FLOAT32, h, i, val(rank, i, TEMPO_SUM));
        }
        g[k] = dev_from(TEMPO_FLOAT32, count, h);
        tempo_attr_t at = {.field_mask = TEMPO_ATTR_PRIORITY | TEMPO_ATTR_TAG,
                           .priority = 3 - k, .tag = (uint64_t)k + 1};
        if (st == TEMPO_OK) {
            st = tempo_iallreduce(comm, g[k], g[k], count, TEMPO_FLOAT32, TEMPO_SUM, &at, &gq[k]);
        }
    }
    st = st == TEMPO_OK ? tempo_waitall(4, gq, NULL) : st;
    bad = 0;
    w.count = count;
    for (int k = 0; k < 4; k++) {
        long b2 = st == TEMPO_OK ? dev_check(TEMPO_FLOAT32, g[k], count, want_reduce, &w) : -1;
        bad = b2 < 0 || bad < 0 ? -1 : bad + b2;
        dev.free(g[k]);
    }
    ok &= rk_check(bad == 0, "device: rank %d: 4 scheduled all-reduces with priorities: %s, %ld "
                   "wrong", rank, tempo_status_name(st), bad);
    /* mixed: rank 0 on the device, the others on the host (not under TEMPO_GPU_BACKEND=nccl,
     * where it must fail: rank_nccl_mixed) */
    int nccl = backend_nccl();
    for (size_t i = 0; i < count && !nccl; i++) {
        put(TEMPO_FLOAT32, h, i, val(rank, i, TEMPO_SUM));
    }
    if (nccl) {
        st = TEMPO_OK, bad = 0;
    } else if (rank == 0) {
        void *d = dev_from(TEMPO_FLOAT32, count, h);
        st = tempo_allreduce(comm, d, d, count, TEMPO_FLOAT32, TEMPO_SUM);
        bad = st == TEMPO_OK ? dev_check(TEMPO_FLOAT32, d, count, want_reduce, &w) : -1;
        dev.free(d);
    } else {
        st = tempo_allreduce(comm, h, h, count, TEMPO_FLOAT32, TEMPO_SUM);
        bad = 0;
        for (size_t i = 0; st == TEMPO_OK && i < count; i++) {
            bad += get(TEMPO_FLOAT32, h, i) != expect(n, i, TEMPO_SUM);
        }
    }
    if (!nccl) {
        ok &= rk_check(bad == 0, "device: rank %d: all-reduce, rank 0 on the device, the others "
                       "on the host: %s, %ld wrong", rank, tempo_status_name(st), bad);
    }
    free(h);
    ok &= rank_bucketer(comm, rank, n);
    if (fake && !backend_nccl()) { /* (staging only; the stand-in NCCL takes 8 MB at most) */
        ok &= rank_pipelined(comm, rank, n);
    }
    ok &= rank_stream(comm, rank, n, fake);
    if (fake) {
        unsigned long long c = fake_count("TEMPO_CUDA_DRIVER", "fake_cuda_copies");
        /* 22 staged calls (rank 0: 23), each copied in and out, plus the test's own copies */
        ok &= rk_check(c >= 44, "fake: rank %d: %llu copies through the driver", rank, c);
    }
    return ok ? 0 : 1;
}
#endif

static int rank_main(int rank, int size, void *arg)
{
    const arg_t *a = arg;
    tempo_comm_t comm = rk_init();
    if (!comm) {
        return 1;
    }
    int rc = 1;
    switch (a->variant) {
    case V_INVALID: rc = rank_invalid(comm, rank, size); break;
    case V_DECLARED: rc = rank_declared(comm, rank, size, 1); break;
    case V_ONE_RANK: rc = rank_declared(comm, rank, size, rank == 0); break;
#if TEMPO_HAVE_CUDA
    case V_FAKE:
    case V_IPC: rc = rank_device(comm, rank, size, 1); break;
    case V_NOTHREAD: rc = rank_nothread(comm, rank, size); break;
#if TEMPO_HAVE_NCCL
    case V_NCCL: rc = rank_nccl(comm, rank, size); break;
    case V_NCCL_MIXED: rc = rank_nccl_mixed(comm, rank, size, 0); break;
    case V_NCCL_MIXED0: rc = rank_nccl_mixed(comm, rank, size, 1); break;
    case V_NCCL_SYNC:
    case V_SHIM_SYNC: rc = rank_nccl_fail(comm, rank, size, "sync", 1); break;
    case V_NCCL_ASYNC:
    case V_SHIM_ASYNC: rc = rank_nccl_fail(comm, rank, size, "async", 1); break;
    case V_DEVICE_SHIM_SYNC: rc = rank_nccl_fail(comm, rank, size, "sync", 0); break;
    case V_DEVICE_SHIM_ASYNC: rc = rank_nccl_fail(comm, rank, size, "async", 0); break;
    case V_NCCL_ROOTS: rc = rank_nccl_roots(comm, rank, size); break;
    case V_NCCL_LATE: rc = rank_nccl_peer(comm, rank, size, 0); break;
    case V_NCCL_DEATH: rc = rank_nccl_peer(comm, rank, size, 1); break;
#endif
    case V_IPC_LATE: rc = rank_nccl_peer(comm, rank, size, 0); break;
    case V_IPC_DEATH: rc = rank_nccl_peer(comm, rank, size, 1); break;
    case V_DEVICE:
    case V_DEVICE_NCCL:
    case V_DEVICE_IPC: rc = rank_device(comm, rank, size, 0); break;
#endif
    default: break;
    }
    rk_put("done", "%d", rc == 0);
    tempo_comm_destroy(comm);
    return rc;
}

static void run(const char *label, int n, int variant)
{
    /* (unset: a variable nothing reads, so that the TEMPO_TIMEOUT chosen below holds) */
    char drv[PATH_MAX + 32] = "GPU_COLL_UNUSED=1", lib[PATH_MAX + 32] = "GPU_COLL_UNUSED=1";
    char fake[PATH_MAX];
    int nccl = variant >= V_NCCL && variant <= V_SHIM_ASYNC;
    int shim = variant == V_SHIM_SYNC || variant == V_SHIM_ASYNC ||
               variant == V_DEVICE_SHIM_SYNC || variant == V_DEVICE_SHIM_ASYNC;
    char shim_lib[PATH_MAX + 32] = "NCCL_SHIM_REAL=libnccl.so.2", shim_fail[64] = "NCCL_SHIM_FAIL=";
    int ipc = variant == V_IPC || variant == V_IPC_LATE || variant == V_IPC_DEATH ||
              variant == V_DEVICE_IPC;
    if (variant == V_FAKE || (ipc && variant != V_DEVICE_IPC) || variant == V_NOTHREAD || nccl) {
        if (!realpath("tests/gpu/fake/libcuda.so.1", fake)) {
            TAP_OK(0, "%s: tests/gpu/fake/libcuda.so.1: %s (run from the build directory)", label,
                   strerror(errno));
            return;
        }
        snprintf(drv, sizeof(drv), "TEMPO_CUDA_DRIVER=%s", fake);
    }
    if (nccl) {
        if (!realpath("tests/gpu/fake/libnccl.so.2", fake)) {
            TAP_OK(0, "%s: tests/gpu/fake/libnccl.so.2: %s (run from the build directory)", label,
                   strerror(errno));
            return;
        }
        snprintf(lib, sizeof(lib), "TEMPO_NCCL_LIBRARY=%s", fake);
        snprintf(shim_lib, sizeof(shim_lib), "NCCL_SHIM_REAL=%s", fake); /* (over the stand-in) */
    }
    if (shim) { /* NCCL (the real one on a GPU) through the shim that fails on demand */
        if (!realpath("tests/gpu/fake/libnccl_shim.so", fake)) {
            TAP_OK(0, "%s: tests/gpu/fake/libnccl_shim.so: %s (run from the build directory)",
                   label, strerror(errno));
            return;
        }
        snprintf(lib, sizeof(lib), "TEMPO_NCCL_LIBRARY=%s", fake);
        snprintf(shim_fail, sizeof(shim_fail), "NCCL_SHIM_FAIL=%s",
                 variant == V_SHIM_SYNC || variant == V_DEVICE_SHIM_SYNC ? "sync" : "async");
    }
    const char *fail = variant == V_NCCL_SYNC ? "FAKE_NCCL_FAIL=sync"
                       : variant == V_NCCL_ASYNC ? "FAKE_NCCL_FAIL=async" : "FAKE_NCCL_FAIL=";
    int peer = variant == V_NCCL_LATE || variant == V_NCCL_DEATH || variant == V_IPC_LATE ||
               variant == V_IPC_DEATH;
    const char *env[] = {peer ? "TEMPO_TIMEOUT=3s" : "TEMPO_TIMEOUT=30s", drv, lib,
                         "FAKE_CUDA_MEMSET_MS=30", "FAKE_CUDA_COPY_MS_PER_MB=2",
                         nccl || shim || variant == V_DEVICE_NCCL ? "TEMPO_GPU_BACKEND=nccl"
                                                                  : "TEMPO_GPU_BACKEND=native",
                         shim_lib, shim_fail, "NCCL_SHIM_FAIL_CALL=2",
                         n == 1 ? "NCCL_SHIM_FAIL_RANK=0" : "NCCL_SHIM_FAIL_RANK=1",
                         fail, "FAKE_NCCL_FAIL_RANK=1", "FAKE_NCCL_FAIL_CALL=2",
                         ipc ? "TEMPO_GPU_IPC=1"
                                                                     : "FAKE_NCCL_FAIL_RANK=1",
                         variant == V_NOTHREAD ? "TEMPO_PROGRESS_THREAD=0" : NULL, NULL};
    arg_t a = {variant};
    job_t job;
    job_start(&job, n, env, rank_main, &a);
    for (int r = 0; r < n; r++) {
        const char *d = job_wait_key(&job, r, "done", 300);
        TAP_OK(d && !strcmp(d, "1"), "%s, %d ranks: rank %d done (%s)", label, n, r,
               !d ? "no report" : !strcmp(d, "1") ? "passed" : "a check failed");
    }
    job_finish(&job, 60);
    job_free(&job);
}

/* Whether a CUDA device answers here, or why not. */
static int have_device(char *why, size_t len)
{
#if TEMPO_HAVE_CUDA
    int nd = 0;
    cudaError_t e = cudaGetDeviceCount(&nd);
    if (e != cudaSuccess || nd == 0) {
        snprintf(why, len, "no CUDA device answers (cudaGetDeviceCount: %s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 0;
    }
    return 1;
#else
    snprintf(why, len, "this build has no CUDA");
    return 0;
#endif
}

int main(void)
{
    run("invalid", 2, V_INVALID);
    run("declared", 2, V_DECLARED);
    run("one rank", 3, V_ONE_RANK);
#if TEMPO_HAVE_CUDA
    for (int n = 2; n <= 4; n++) {
        run("fake", n, V_FAKE);
    }
    for (int n = 2; n <= 4; n++) {
        run("ipc", n, V_IPC);
    }
    run("ipc late peer", 2, V_IPC_LATE);
    run("ipc dead peer", 2, V_IPC_DEATH);
    run("no progress thread", 2, V_NOTHREAD);
#if TEMPO_HAVE_NCCL
    for (int n = 1; n <= 3; n++) {
        run("nccl", n, V_NCCL);
    }
    run("nccl mixed", 2, V_NCCL_MIXED);
    run("nccl mixed first", 2, V_NCCL_MIXED0);
    run("nccl sync failure", 3, V_NCCL_SYNC);
    run("nccl async failure", 3, V_NCCL_ASYNC);
    run("nccl roots", 3, V_NCCL_ROOTS);
    run("nccl late peer", 2, V_NCCL_LATE);
    run("nccl dead peer", 2, V_NCCL_DEATH);
    for (int n = 1; n <= 3; n += 2) { /* (at 1 rank as on the GPU machine: rank 0 fails) */
        run("nccl through the failing shim, sync", n, V_SHIM_SYNC);
        run("nccl through the failing shim, async", n, V_SHIM_ASYNC);
    }
#endif
#endif
    char why[200];
    /* Asked in a child: the CUDA runtime must not be initialized in the parent that forks the
     * ranks (a CUDA context does not survive fork). */
    pid_t pid = fork();
    if (pid == 0) {
        _exit(have_device(why, sizeof(why)) ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
        for (int n = 2; n <= 4; n++) {
            run("device", n, V_DEVICE);
        }
        for (int n = 2; n <= 4; n++) {
            run("device ipc", n, V_DEVICE_IPC);
        }
#if TEMPO_HAVE_NCCL
        /* NCCL itself: one rank (NCCL refuses two ranks on one GPU); then a forced error out
         * of it (the shim over the real libnccl.so.2 fails the second call) */
        run("device nccl", 1, V_DEVICE_NCCL);
        run("device nccl, a forced error (sync)", 1, V_DEVICE_SHIM_SYNC);
        run("device nccl, a forced error (async)", 1, V_DEVICE_SHIM_ASYNC);
#endif
    } else {
        have_device(why, sizeof(why));
        TAP_OK(1, "device # SKIP %s", why);
    }
    return tap_done();
}
