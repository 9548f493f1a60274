/*
 * overlap_bench.c — how much priority scheduling and chunking buy when gradient synchronization
 * overlaps compute: a synthetic model trained data-parallel through the bucketer, with every
 * scheduling policy (fifo, tic, tac), with and without chunking, in one run.
 *
 * The model: L layers; layer l's forward and backward are real arithmetic (a multiply-add loop
 * over an L2-resident buffer: 2 flops per element per pass; backward costs twice the forward), and
 * backward writes the layer's gradient into its buffer (every element: the cost of producing it).
 * Profiles:
 *   uniform  24 layers, equal gradients (1 MiB each by default) and equal compute
 *   tiny     the same with 4 layers (make check; perf/tempo-overlap-model's hand-checkable case)
 *   vgg      VGG-16's 16 weight layers: parameter counts and per-layer forward FLOPs of the real
 *            network (Simonyan & Zisserman 2015, 224x224 input), scaled to --total bytes of
 *            gradients: 74% of the bytes in fc6, which backward produces early and the next
 *            forward needs late, while the conv layers hold most of the compute
 *
 * How compute is set: the ratio that matters is the one inside the run, where compute and
 * communication share the CPUs (on a 2-core machine with 4 ranks, markedly). So the ranks first
 * measure the synchronization of all gradients alone (blocking all-reduces, layer by layer, median
 * of 3) and the multiply-add speed, start from compute = communication alone / --ratio, and then
 * run --calib short fifo passes, each rescaling the compute so that the measured communication
 * busy time M over the measured compute P comes to --ratio (default 1: communication about equal
 * to compute). Rank 0's scale is broadcast; the header shows the standalone and in-run figures.
 *
 * One iteration: tempo_bucketer_begin; forward layer 0..L-1, each first waiting for its own
 * gradients of the previous iteration (tempo_bucketer_wait_layer, so communication overlaps the
 * next forward too); backward L-1..0, marking each layer ready. Each configuration (policy x
 * chunking) has its own bucketer; the configurations alternate in every round (so they share the
 * machine's noise), and the table shows medians over rounds of each configuration's mean iteration
 * numbers (tempo_bucketer_stats, over the -n measured iterations: the stats are reset right after
 * the begin of the first one). The synchronized gradients are checked (every element of every
 * rank equals its expected average, the last iteration's too); a wrong one makes the exit status 1.
 *
 * Compute on an emulated accelerator (--compute device). On the development machine the ranks'
 * arithmetic, progress threads and the emulated network share two cores, so whatever an order
 * hides comes back as slower compute. In real training the compute runs on an accelerator and the
 * host CPU is free for communication; --compute device models that. Each rank has a device
 * timeline (the absolute CLOCK_MONOTONIC time at which its queued kernels finish): a kernel launch
 * enqueues a duration and returns at once (a CUDA stream), starting when the device is free and
 * the host has launched it; a synchronization point sleeps in clock_nanosleep(TIMER_ABSTIME) until
 * the timeline reaches it, taking no CPU. As in a framework on a GPU, the host runs ahead: forward
 * layer l is launched as soon as its bucketer wait returns (the device may still be running
 * earlier layers, so a wait is a stall only if the device ran dry: the exposed column is the
 * device's idle time, measured at each launch), the whole backward is queued at once, and the host
 * sleeps until backward kernel l's event before it posts layer l's gradient. The kernel's output,
 * the gradient's values, comes from a writer thread (writer_t) that checks the synchronized values
 * and writes the next ones once forward l has consumed them, so that the stores, which cost an
 * accelerator's host nothing, do not delay posts. The host's own wake-up delays thus delay posts,
 * never the device's queued work (on a loaded machine they are milliseconds). A consequence: the
 * bucketer's forward markers see launches, not kernels, so TAC measures no forward time in this
 * mode.
 * Durations are the profile's work times the calibrated seconds per unit (the same fit as the CPU
 * mode), times a per-rank, per-iteration straggler factor 1 + S*u, u uniform in [0, 1) from a hash
 * of (--seed, rank, round, iteration) when --skew S is given (every configuration of a round sees
 * the same stragglers). The header reports the fitted compute per iteration (the input of
 * perf/tempo-overlap-model), the rounds' CPU time over their wall time (the busiest rank's process, all threads) and,
 * while the main thread waits for compute (device synchronizations, or the arithmetic itself), its
 * time on a CPU over the time it was not queued for one (/proc/thread-self/schedstat): about 100 %
 * for compute that spins however loaded the machine is, near 0 for the device mode's sleeps.
 *
 * --overhead instead measures the cost of the scheduled path: a tiny all-reduce (8 floats)
 * through the bucketer (begin, ready, wait) against a direct blocking tempo_allreduce.
 *
 * Uses only include/tempo.h. Run under tempo-run (one host) or perf/tempo-netns-run (emulated hosts).
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include "perf/util.h"
#include "util/helpers.h"
#include "tempo.h"

#define MAX_LAYERS 64
#define WORK_FLOATS 16384 /* 64 KiB per rank: stays in L2 */

typedef struct {
    int L;
    size_t bytes[MAX_LAYERS]; /* gradient bytes of layer l */
    double work[MAX_LAYERS];  /* relative forward compute of layer l */
} profile_t;

typedef struct {
    const char *profile;
    double ratio;
    size_t layer_bytes, total_bytes, bucket_bytes, chunk_bytes, credit_bytes;
    int iters, warmup, rounds, calib;
    int overhead;
    int iters_set; /* -n given */
    int device;    /* --compute device: emulated accelerator (else real arithmetic) */
    double skew;   /* --skew S: per-rank, per-iteration duration factor in [1, 1 + S) */
    uint64_t seed; /* --seed: the skew's hash seed */
    const char *json;
    int policies[3], npolicies;
} opts_t;

static int rank_, size_;
static float work_buf[WORK_FLOATS];
static volatile float sink_;

/* The calling thread's seconds on a CPU and waiting in a run queue (Linux:
 * /proc/thread-self/schedstat); -1 where the kernel does not say. */
static int thread_sched(double *on_p, double *queued_p)
{
    FILE *f = fopen("/proc/thread-self/schedstat", "r");
    unsigned long long on = 0, queued = 0;
    int n = f ? fscanf(f, "%llu %llu", &on, &queued) : 0;
    if (f) {
        fclose(f);
    }
    if (n != 2) {
        return -1;
    }
    *on_p = (double)on * 1e-9;
    *queued_p = (double)queued * 1e-9;
    return 0;
}

/* While the main thread waits for compute (device_wait() or compute()): its seconds on a CPU, in a
 * run queue, and of wall time; on_acc_ < 0 once schedstat was found missing. A thread that spins
 * is on a CPU whenever it is not queued for one, however loaded the machine; one that sleeps is
 * not. */
static double on_acc_, queued_acc_, waited_acc_;

typedef struct {
    double on, queued, wall;
} acct_t;

static void acct_begin(acct_t *a)
{
    a->wall = util_now_s();
    if (on_acc_ >= 0 && thread_sched(&a->on, &a->queued) != 0) {
        on_acc_ = -1;
    }
}

static void acct_end(const acct_t *a)
{
    double on, queued;
    if (on_acc_ < 0 || thread_sched(&on, &queued) != 0) {
        on_acc_ = -1;
        return;
    }
    on_acc_ += on - a->on;
    queued_acc_ += queued - a->queued;
    waited_acc_ += util_now_s() - a->wall;
}

/* The emulated device of this rank: the absolute CLOCK_MONOTONIC time (s) at which its queued
 * kernels are done; 0 before the first launch. */
static double dev_done_;

/* Enqueues a kernel of `seconds`: it starts once the device is free and the host launched it.
 * Returns the device's idle time before it (s): how late the host launched it. */
static double device_launch(double seconds)
{
    double t = util_now_s(), idle = t > dev_done_ ? t - dev_done_ : 0;
    dev_done_ = (dev_done_ > t ? dev_done_ : t) + seconds;
    return idle;
}

/* Sleeps (no CPU) until the device timeline reaches `when` (an event recorded after a launch:
 * dev_done_ then). */
static void device_wait(double when)
{
    acct_t acct;
    acct_begin(&acct);
    struct timespec ts = {.tv_sec = (time_t)when,
                          .tv_nsec = (long)((when - (double)(time_t)when) * 1e9)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR) {
    }
    acct_end(&acct);
}

/* 1 when some of the n floats at g differ from want (an element of a synchronized gradient that is
 * not its expected average), else 0. */
static long check_all(const float *g, size_t n, float want)
{
    long bad = 0;
    for (size_t i = 0; i < n; i++) {
        bad |= g[i] != want;
    }
    return bad;
}

static void fill(float *g, size_t n, float v)
{
    for (size_t i = 0; i < n; i++) {
        g[i] = v;
    }
}

/* Device mode: the kernels' memory. On an accelerator a backward kernel writes its layer's
 * gradient and the host spends nothing on it; here the host must, and a main thread that wrote
 * (and checked) the values before each post would delay the post behind stores the kernel does not
 * cost (VGG's fc6: 18.7 MB, milliseconds under load, behind a 1.5 ms kernel; measured, that delay
 * decided which bucket the lane took next). So a writer thread does it: once forward l of an
 * iteration has consumed the previous synchronization (its bucketer wait returned), the main
 * thread hands layer l over; the writer checks every element of the synchronized gradient and
 * writes the next one, long before backward l; the post of layer l waits until it is written (a
 * kernel is not done before its output is), which it normally already is. */
typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
    float **grad;
    size_t *count;
    int L, stop;
    long seq;                                /* requests made */
    long want[MAX_LAYERS], done[MAX_LAYERS]; /* request numbers: the last asked for, finished */
    int it[MAX_LAYERS];                      /* the iteration whose values the request writes */
    long wrong; /* gradients with an element that differs from its expected average */
} writer_t;

static void *writer_main(void *arg)
{
    writer_t *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        int l = 0;
        while (l < w->L && w->want[l] == w->done[l]) {
            l++;
        }
        if (l == w->L) {
            if (w->stop) {
                break;
            }
            pthread_cond_wait(&w->cv, &w->mu);
            continue;
        }
        long req = w->want[l];
        int it = w->it[l];
        pthread_mutex_unlock(&w->mu);
        /* the previous iteration's average (every rank wrote it-1+l), then this one's values */
        long bad = it > 0 ? check_all(w->grad[l], w->count[l], (float)(it - 1 + l)) : 0;
        fill(w->grad[l], w->count[l], (float)(it + l));
        pthread_mutex_lock(&w->mu);
        w->wrong += bad;
        w->done[l] = req;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

/* Hands layer l over in iteration it: check its synchronized values, write iteration it's. */
static void writer_ask(writer_t *w, int l, int it)
{
    pthread_mutex_lock(&w->mu);
    w->want[l] = ++w->seq;
    w->it[l] = it;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

/* Until layer l's last request is written. */
static void writer_wait(writer_t *w, int l)
{
    pthread_mutex_lock(&w->mu);
    while (w->done[l] != w->want[l]) {
        pthread_cond_wait(&w->cv, &w->mu);
    }
    pthread_mutex_unlock(&w->mu);
}

static int writer_start(writer_t *w, float **grad, size_t *count, int L)
{
    *w = (writer_t){.grad = grad, .count = count, .L = L};
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    return pthread_create(&w->th, NULL, writer_main, w);
}

/* Ends the thread (its requests all written) and returns the gradients it found wrong. */
static long writer_stop(writer_t *w)
{
    pthread_mutex_lock(&w->mu);
    w->stop = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->th, NULL);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    return w->wrong;
}

/* A uniform number in [0, 1) from a key (splitmix64's finalizer). */
static double hash_unit(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x ^= x >> 31;
    return (double)(x >> 11) * 0x1.0p-53;
}

/* passes x WORK_FLOATS multiply-adds (2 flops each). */
static void compute(double passes)
{
    acct_t acct;
    acct_begin(&acct);
    long p = (long)passes;
    for (long k = 0; k < p; k++) {
        for (int i = 0; i < WORK_FLOATS; i++) {
            work_buf[i] = work_buf[i] * 0.9999f + 0.0001f;
        }
    }
    sink_ = work_buf[p & (WORK_FLOATS - 1)];
    acct_end(&acct);
}

static void die(tempo_comm_t comm, tempo_status_t st, const char *what)
{
    fprintf(stderr, "overlap_bench: rank %d: %s: %s: %s\n", rank_, what, tempo_status_name(st),
            tempo_last_error(comm));
    exit(1);
}

#define CHECK(comm, expr, what)              \
    do {                                     \
        tempo_status_t _s = (expr);          \
        if (_s != TEMPO_OK) {                \
            die((comm), _s, (what));         \
        }                                    \
    } while (0)

static void build_profile(const opts_t *o, profile_t *p)
{
    memset(p, 0, sizeof(*p));
    if (strcmp(o->profile, "vgg")) { /* uniform, tiny */
        p->L = strcmp(o->profile, "tiny") ? 24 : 4;
        for (int l = 0; l < p->L; l++) {
            p->bytes[l] = o->layer_bytes;
            p->work[l] = 1;
        }
        return;
    }
    /* VGG-16: weights per layer (conv 3x3 kernels, then fc6 25088x4096, fc7 4096x4096, fc8
     * 4096x1000) and forward GFLOPs at 224x224 (multiply-adds x 2). */
    static const double params[16] = {1728,    36864,   73728,   147456,    294912,   589824,
                                      589824,  1179648, 2359296, 2359296,   2359296,  2359296,
                                      2359296, 102760448, 16777216, 4096000};
    static const double gflops[16] = {0.173, 3.70, 1.85, 3.70, 1.85, 3.70,  3.70,  1.85,
                                      3.70,  3.70, 0.92, 0.92, 0.92, 0.206, 0.034, 0.008};
    double total = 0;
    for (int l = 0; l < 16; l++) {
        total += params[l];
    }
    p->L = 16;
    for (int l = 0; l < 16; l++) {
        size_t b = (size_t)((double)o->total_bytes * params[l] / total);
        p->bytes[l] = b < 64 ? 64 : (b + 63) / 64 * 64;
        p->work[l] = gflops[l];
    }
}

/* ---------------------------------------------------------------------------------------------- */

typedef struct {
    int policy;
    int chunked;
    const char *name;
    double iter, compute, comm, exposed, overlap, eff; /* medians */
    double *r_iter, *r_compute, *r_comm, *r_exposed, *r_eff;
} config_t;

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    double *c = malloc(sizeof(double) * (size_t)n);
    memcpy(c, v, sizeof(double) * (size_t)n);
    qsort(c, (size_t)n, sizeof(double), cmp_dbl);
    double m = n % 2 ? c[n / 2] : (c[n / 2 - 1] + c[n / 2]) / 2;
    free(c);
    return m;
}

typedef struct {
    tempo_comm_t comm;
    const profile_t *p;
    float **grad;              /* (L) gradient buffers */
    size_t *count;             /* (L) floats */
    double passes_per_work;    /* per unit of profile work (forward): compute passes, or device
                                  seconds with --compute device */
    int device;                /* --compute device */
    double skew;               /* this iteration's straggler factor (device mode), >= 1 */
    double idle;               /* device mode: the device's idle seconds, measured iterations */
    writer_t *writer;          /* device mode: writes (and checks) the gradients */
    long wrong;                /* gradients with an element that is not its expected average */
} model_t;

/* One configuration: returns its mean numbers over o->iters iterations after o->warmup. */
static void run_config(model_t *m, const opts_t *o, config_t *c, int round)
{
    tempo_tensor_desc_t d[MAX_LAYERS];
    char names[MAX_LAYERS][16];
    for (int l = 0; l < m->p->L; l++) {
        snprintf(names[l], sizeof(names[l]), "layer%d", l);
        d[l] = (tempo_tensor_desc_t){.id = (uint64_t)l, .grad = m->grad[l], .count = m->count[l],
                                     .dtype = TEMPO_FLOAT32, .layer = l, .name = names[l]};
    }
    tempo_bucketer_config_t bc = {0};
    bc.field_mask = TEMPO_BUCKETER_OP | TEMPO_BUCKETER_BUCKET_BYTES | TEMPO_BUCKETER_FIRST_BYTES |
                    TEMPO_BUCKETER_SCHED | TEMPO_BUCKETER_CHUNK_BYTES | TEMPO_BUCKETER_TAC_WARMUP;
    bc.op = TEMPO_AVG;
    bc.bucket_bytes = o->bucket_bytes;
    bc.first_bucket_bytes = o->bucket_bytes;
    bc.sched = (tempo_sched_t)c->policy;
    bc.chunk_bytes = c->chunked ? o->chunk_bytes : SIZE_MAX;
    bc.tac_warmup = o->warmup > 2 ? o->warmup - 1 : 1;
    tempo_bucketer_t b;
    CHECK(m->comm, tempo_bucketer_create(m->comm, d, (size_t)m->p->L, &bc, &b), "bucketer create");
    int L = m->p->L;
    m->idle = 0;
    for (int it = 0; it < o->warmup + o->iters; it++) {
        CHECK(m->comm, tempo_bucketer_begin(b, 1), "begin");
        if (it == o->warmup) { /* after begin, which closes the last warm-up iteration's span */
            tempo_bucketer_stats_reset(b);
        }
        /* Stragglers: every configuration sees the same factors in the same round. */
        uint64_t key = (uint64_t)rank_ << 40 | (uint64_t)round << 20 | (uint64_t)it;
        m->skew = 1 + o->skew * hash_unit(o->seed * 1000003u + key);
        double idle = 0; /* device mode: the device's idle time in this iteration */
        for (int l = 0; l < L; l++) {
            CHECK(m->comm, tempo_bucketer_wait_layer(b, l), "wait_layer");
            /* The previous iteration's average: every rank wrote it-1+l; backward writes it+l. */
            if (m->device) {
                writer_ask(m->writer, l, it);
            } else if (it > 0) {
                m->wrong += check_all(m->grad[l], m->count[l], (float)(it - 1 + l));
            }
            tempo_bucketer_compute_begin(b, l, TEMPO_PHASE_FORWARD);
            if (m->device) {
                idle += device_launch(m->p->work[l] * m->passes_per_work * m->skew);
            } else {
                compute(m->p->work[l] * m->passes_per_work);
            }
            tempo_bucketer_compute_end(b);
        }
        double bwd_done[MAX_LAYERS]; /* device mode: the event after each backward kernel */
        for (int l = L - 1; l >= 0 && m->device; l--) { /* the whole backward is queued at once */
            idle += device_launch(2 * m->p->work[l] * m->passes_per_work * m->skew);
            bwd_done[l] = dev_done_;
        }
        m->idle += it >= o->warmup ? idle : 0;
        for (int l = L - 1; l >= 0; l--) {
            tempo_bucketer_compute_begin(b, l, TEMPO_PHASE_BACKWARD);
            if (!m->device) {
                compute(2 * m->p->work[l] * m->passes_per_work);
            }
            if (m->device) { /* the kernel's output, from the writer */
                writer_wait(m->writer, l);
                device_wait(bwd_done[l]);
            } else {
                fill(m->grad[l], m->count[l], (float)(it + l));
            }
            tempo_bucketer_compute_end(b);
            CHECK(m->comm, tempo_bucketer_ready(b, (uint64_t)l), "ready");
        }
    }
    CHECK(m->comm, tempo_bucketer_wait_all(b), "wait_all");
    CHECK(m->comm, tempo_bucketer_begin(b, 1), "begin"); /* closes the last iteration */
    for (int l = 0; l < L; l++) { /* the last iteration's averages, which no forward checks */
        m->wrong += check_all(m->grad[l], m->count[l], (float)(o->warmup + o->iters - 1 + l));
    }
    tempo_bucketer_stats_t mean;
    tempo_bucketer_stats(b, NULL, &mean);
    if (mean.iterations != o->iters) { /* the means are over the measured ones alone */
        fprintf(stderr, "overlap_bench: rank %d: the bucketer counted %ld iterations, not %d\n",
                rank_, mean.iterations, o->iters);
        exit(1);
    }
    /* The slowest rank's iteration time defines the job; take every number from the max. */
    /* Device mode: exposed is the device's idle time (the host blocks in waits while the device
     * still runs the kernels it queued, which is not exposed). */
    double exposed = m->device ? m->idle / o->iters : mean.exposed_s;
    double v[5] = {mean.iter_s, mean.compute_s, mean.comm_s, exposed, 0}, mx[5];
    CHECK(m->comm, tempo_allreduce(m->comm, v, mx, 4, TEMPO_FLOAT64, TEMPO_MAX), "allreduce");
    CHECK(m->comm, tempo_bucketer_destroy(b), "destroy");
    double P = mx[0] - mx[3], M = mx[2], T = mx[0];
    double U = P + M, Lb = P > M ? P : M;
    c->r_iter[round] = T;
    c->r_compute[round] = P;
    c->r_comm[round] = M;
    c->r_exposed[round] = mx[3];
    c->r_eff[round] = U - Lb > 1e-12 ? (U - T) / (U - Lb) : 1;
}

/* Blocking synchronization of every gradient, layer by layer: seconds (median of 3, max rank). */
static double measure_comm(model_t *m)
{
    double t[3];
    for (int k = 0; k < 4; k++) {
        double t0 = util_now_s();
        for (int l = m->p->L - 1; l >= 0; l--) {
            CHECK(m->comm, tempo_allreduce(m->comm, m->grad[l], m->grad[l], m->count[l],
                                           TEMPO_FLOAT32, TEMPO_AVG),
                  "allreduce");
        }
        double d = util_now_s() - t0, mx;
        CHECK(m->comm, tempo_allreduce(m->comm, &d, &mx, 1, TEMPO_FLOAT64, TEMPO_MAX), "allreduce");
        if (k > 0) {
            t[k - 1] = mx;
        }
    }
    return median(t, 3);
}

static void run_overhead(tempo_comm_t comm, const opts_t *o)
{
    float g[8] = {0}, out[8];
    tempo_tensor_desc_t d = {.id = 1, .grad = g, .count = 8, .dtype = TEMPO_FLOAT32, .layer = 0,
                             .name = "tiny"};
    tempo_bucketer_t b;
    CHECK(comm, tempo_bucketer_create(comm, &d, 1, NULL, &b), "bucketer create");
    int n = o->iters_set ? o->iters : 2000;
    double direct[5], bucket[5], raw[5];
    for (int round = 0; round < 5; round++) {
        CHECK(comm, tempo_barrier(comm), "barrier");
        double t0 = util_now_s();
        for (int i = 0; i < n; i++) {
            CHECK(comm, tempo_allreduce(comm, g, out, 8, TEMPO_FLOAT32, TEMPO_SUM), "allreduce");
        }
        direct[round] = (util_now_s() - t0) / n;
        CHECK(comm, tempo_barrier(comm), "barrier");
        t0 = util_now_s();
        for (int i = 0; i < n; i++) {
            tempo_attr_t a = {.field_mask = TEMPO_ATTR_PRIORITY | TEMPO_ATTR_TAG, .priority = 0,
                              .tag = 77};
            tempo_request_t r;
            CHECK(comm, tempo_iallreduce(comm, g, out, 8, TEMPO_FLOAT32, TEMPO_SUM, &a, &r),
                  "iallreduce");
            CHECK(comm, tempo_wait(&r), "wait");
        }
        raw[round] = (util_now_s() - t0) / n;
        CHECK(comm, tempo_barrier(comm), "barrier");
        t0 = util_now_s();
        for (int i = 0; i < n; i++) {
            CHECK(comm, tempo_bucketer_begin(b, 1), "begin");
            CHECK(comm, tempo_bucketer_ready(b, 1), "ready");
            CHECK(comm, tempo_bucketer_wait_all(b), "wait_all");
        }
        bucket[round] = (util_now_s() - t0) / n;
    }
    tempo_bucketer_destroy(b);
    double md = median(direct, 5), mr = median(raw, 5), mb = median(bucket, 5);
    if (rank_ == 0) {
        printf("# overlap_bench --overhead: %d ranks, 8-float all-reduce, %d calls per round, "
               "median of 5 rounds\n",
               size_, n);
        printf("#   %-46s %10s %12s\n", "path", "us/call", "overhead us");
        printf("    %-46s %10.2f %12s\n", "tempo_allreduce (blocking, program order)", md * 1e6,
               "-");
        printf("    %-46s %10.2f %12.2f\n", "tempo_iallreduce with priority + tempo_wait", mr * 1e6,
               (mr - md) * 1e6);
        printf("    %-46s %10.2f %12.2f\n", "bucketer: begin + ready + wait_all", mb * 1e6,
               (mb - md) * 1e6);
    }
}

static void usage(void)
{
    printf(
        "usage: overlap_bench [options]   (run under tempo-run or perf/tempo-netns-run)\n"
        "  -p, --profile NAME     uniform (24 equal layers), vgg (VGG-16's 16 layers) or tiny (4\n"
        "                         equal layers) [uniform]\n"
        "  -r, --ratio R          communication / compute the compute is scaled to [1.0]\n"
        "      --layer-bytes N    uniform, tiny: gradient bytes per layer (K, M suffixes) [1M]\n"
        "      --total-bytes N    vgg: gradient bytes of the whole model [24M]\n"
        "      --bucket-bytes N   bucketer fusion size [1M]\n"
        "      --chunk-bytes N    chunk size of the chunked configurations [512K]\n"
        "      --credit-bytes N   TEMPO_CREDIT_BYTES for the run: auto (the library's default: the\n"
        "                         lane sizes it from its own transfers) or bytes (1M: one\n"
        "                         bucket, so an urgent bucket waits for at most one transfer)\n"
        "                         [auto]\n"
        "      --policies LIST    comma list of fifo, tic, tac [fifo,tic,tac]\n"
        "  -n, --iters N          measured iterations per configuration and round [6]; with\n"
        "                         --overhead, calls per round [2000]\n"
        "  -w, --warmup N         warm-up iterations (tac measures in them) [3]\n"
        "  -R, --rounds N         rounds; the table shows medians over rounds [3]\n"
        "      --calib N          fifo passes that fit the compute to --ratio inside the run [2]\n"
        "  -J, --json FILE        also write the results as JSON\n"
        "      --compute MODE     cpu: real arithmetic; device: an emulated accelerator (a\n"
        "                         per-rank device timeline; launches return at once,\n"
        "                         synchronization points sleep until the device is done,\n"
        "                         taking no CPU) [cpu]\n"
        "      --skew S           device: stragglers; each rank's kernels in an iteration last\n"
        "                         1 + S*u times longer, u uniform in [0,1) per (rank, round,\n"
        "                         iteration), seeded by --seed [0]\n"
        "      --seed N           the skew's seed (printed in the header) [1]\n"
        "      --overhead         measure the scheduled path's per-call cost instead\n"
        "  -h, --help             this text\n"
        "      --version          the package version\n"
        "Columns: iteration time T, compute P = T - exposed, communication busy time M, exposed\n"
        "(blocked in waits; with --compute device the device's idle time), overlap 1 - exposed/M,\n"
        "TicTac's E = (U-T)/(U-L) with U = P+M, L = max(P,M), and T against fifo without chunking\n"
        "(negative = faster). Times are the slowest rank's per-iteration means.\n");
}

static int parse_args(int argc, char **argv, opts_t *o)
{
    *o = (opts_t){.profile = "uniform", .ratio = 1.0, .layer_bytes = 1 << 20,
                  .total_bytes = 24u << 20, .bucket_bytes = 1 << 20, .chunk_bytes = 512 << 10,
                  .credit_bytes = 0, .iters = 6, .warmup = 3, .rounds = 3, .calib = 2,
                  .policies = {0, 1, 2}, .npolicies = 3, .seed = 1};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
#define OPT(s, l) (!strcmp(a, s) || !strcmp(a, l))
        if (OPT("-h", "--help")) {
            usage();
            exit(0);
        } else if (!strcmp(a, "--version")) {
            util_print_version("overlap_bench");
            exit(0);
        } else if (!strcmp(a, "--overhead")) {
            o->overhead = 1;
            continue;
        }
        if (!v) {
            fprintf(stderr, "overlap_bench: %s needs a value (see --help)\n", a);
            return -1;
        }
        i++;
        int bad = 0;
        if (OPT("-p", "--profile")) {
            o->profile = v;
            bad = strcmp(v, "uniform") && strcmp(v, "vgg") && strcmp(v, "tiny");
        } else if (OPT("-r", "--ratio")) {
            o->ratio = atof(v);
            bad = !(o->ratio > 0);
        } else if (!strcmp(a, "--layer-bytes")) {
            bad = util_parse_size(v, &o->layer_bytes) || o->layer_bytes == 0;
        } else if (!strcmp(a, "--total-bytes")) {
            bad = util_parse_size(v, &o->total_bytes) || o->total_bytes == 0;
        } else if (!strcmp(a, "--bucket-bytes")) {
            bad = util_parse_size(v, &o->bucket_bytes) || o->bucket_bytes == 0;
        } else if (!strcmp(a, "--chunk-bytes")) {
            bad = util_parse_size(v, &o->chunk_bytes) || o->chunk_bytes == 0;
        } else if (!strcmp(a, "--credit-bytes")) {
            o->credit_bytes = 0; /* auto: the scheduled lane sizes it (collectives/autosize.h) */
            bad = strcmp(v, "auto") && (util_parse_size(v, &o->credit_bytes) || !o->credit_bytes);
        } else if (!strcmp(a, "--policies")) {
            o->npolicies = 0;
            char buf[64];
            snprintf(buf, sizeof(buf), "%s", v);
            for (char *t = strtok(buf, ","); t && o->npolicies < 3; t = strtok(NULL, ",")) {
                int p = !strcmp(t, "fifo") ? 0 : !strcmp(t, "tic") ? 1 : !strcmp(t, "tac") ? 2 : -1;
                bad |= p < 0;
                o->policies[o->npolicies++] = p;
            }
            bad |= o->npolicies == 0;
        } else if (OPT("-n", "--iters")) {
            o->iters = atoi(v);
            o->iters_set = 1;
            bad = o->iters < 1;
        } else if (OPT("-w", "--warmup")) {
            o->warmup = atoi(v);
            bad = o->warmup < 1;
        } else if (!strcmp(a, "--calib")) {
            o->calib = atoi(v);
            bad = o->calib < 0;
        } else if (OPT("-R", "--rounds")) {
            o->rounds = atoi(v);
            bad = o->rounds < 1;
        } else if (!strcmp(a, "--compute")) {
            o->device = !strcmp(v, "device");
            bad = !o->device && strcmp(v, "cpu");
        } else if (!strcmp(a, "--skew")) {
            o->skew = atof(v);
            bad = !(o->skew >= 0);
        } else if (!strcmp(a, "--seed")) {
            o->seed = strtoull(v, NULL, 0);
        } else if (OPT("-J", "--json")) {
            o->json = v;
        } else {
            fprintf(stderr, "overlap_bench: unknown option %s (see --help)\n", a);
            return -1;
        }
        if (bad) {
            fprintf(stderr, "overlap_bench: bad value '%s' for %s (see --help)\n", v, a);
            return -1;
        }
#undef OPT
    }
    return 0;
}

int main(int argc, char **argv)
{
    opts_t o;
    if (parse_args(argc, argv, &o) != 0) {
        return 2;
    }
    /* The credit is a property of the coordinator's configuration, read at init. */
    if (!getenv("TEMPO_CREDIT_BYTES")) {
        char v[32];
        if (o.credit_bytes) {
            snprintf(v, sizeof(v), "%zu", o.credit_bytes);
        } else {
            snprintf(v, sizeof(v), "auto");
        }
        setenv("TEMPO_CREDIT_BYTES", v, 1);
    }
    tempo_comm_t comm;
    tempo_status_t st = tempo_comm_init_env(&comm);
    if (st != TEMPO_OK) {
        fprintf(stderr, "overlap_bench: init: %s\n", tempo_last_error(NULL));
        return 1;
    }
    rank_ = tempo_comm_rank(comm);
    size_ = tempo_comm_size(comm);
    for (int i = 0; i < WORK_FLOATS; i++) {
        work_buf[i] = (float)i / WORK_FLOATS;
    }
#ifdef __linux__
    /* Device synchronization points wake at their deadline, not up to 50 us later. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
#endif
    if (o.overhead) {
        run_overhead(comm, &o);
        tempo_comm_destroy(comm);
        return 0;
    }
    profile_t p;
    build_profile(&o, &p);
    model_t m = {.comm = comm, .p = &p, .device = o.device, .skew = 1};
    m.grad = calloc((size_t)p.L, sizeof(float *));
    m.count = calloc((size_t)p.L, sizeof(size_t));
    size_t total = 0;
    double work_total = 0;
    for (int l = 0; l < p.L; l++) {
        m.count[l] = p.bytes[l] / sizeof(float);
        m.grad[l] = calloc(m.count[l], sizeof(float));
        total += p.bytes[l];
        work_total += 3 * p.work[l]; /* forward + backward (twice) */
    }
    writer_t writer;
    if (o.device) {
        if (writer_start(&writer, m.grad, m.count, p.L) != 0) {
            fprintf(stderr, "overlap_bench: rank %d: cannot start the writer thread\n", rank_);
            return 1;
        }
        m.writer = &writer;
    }
    /* Calibration: multiply-add speed with every rank computing at once, and communication alone. */
    CHECK(comm, tempo_barrier(comm), "barrier");
    double t0 = util_now_s();
    if (!o.device) {
        compute(2000);
    }
    /* Device mode: the unit is a second, so the scale below is seconds per unit of work. */
    double pass_s = o.device ? 1 : (util_now_s() - t0) / 2000, pass_max;
    CHECK(comm, tempo_allreduce(comm, &pass_s, &pass_max, 1, TEMPO_FLOAT64, TEMPO_MAX),
          "allreduce");
    double comm_alone = measure_comm(&m);
    /* Rank 0's scale for everyone: compute (F+B) = comm / ratio. */
    double scale = comm_alone / o.ratio / (work_total * pass_max);
    CHECK(comm, tempo_broadcast(comm, &scale, &scale, 1, TEMPO_FLOAT64, 0), "broadcast");
    m.passes_per_work = scale;
    size_t largest = 0;
    for (int l = 0; l < p.L; l++) {
        largest = p.bytes[l] > largest ? p.bytes[l] : largest;
    }
    if (rank_ == 0) {
        const char *root = getenv("TEMPO_ROOT");
        printf("# overlap_bench: %d ranks, profile %s: %d layers, %.2f MB of gradients per "
               "iteration (largest layer %.2f MB)\n",
               size_, o.profile, p.L, (double)total / 1e6, (double)largest / 1e6);
        printf("# rendezvous %s; bucket %.2f MB, chunk %.2f MB (chunked rows), credit %s bytes\n",
               root ? root : "local", (double)o.bucket_bytes / 1e6, (double)o.chunk_bytes / 1e6,
               getenv("TEMPO_CREDIT_BYTES"));
        printf("# synchronizing all gradients alone: %.1f ms; target communication / compute "
               "inside the run: %.2f; %d rounds x (%d warm-up + %d measured) iterations per "
               "configuration\n",
               comm_alone * 1e3, o.ratio, o.rounds, o.warmup, o.iters);
        printf("# compute: %s",
               o.device ? "device (emulated accelerator)" : "cpu (real arithmetic)");
        if (o.device) {
            printf("; skew %.3f, seed %llu", o.skew, (unsigned long long)o.seed);
        }
        printf("\n");
        fflush(stdout);
    }
    /* Fit the compute inside the run: short fifo passes, rescaled by the measured M / P. */
    double calib_p = 0, calib_m = 0;
    for (int k = 0; k < o.calib; k++) {
        config_t cc = {.policy = 0, .chunked = 0, .name = "calib"};
        double ri[1], rc[1], rm[1], re[1], rf[1];
        cc.r_iter = ri, cc.r_compute = rc, cc.r_comm = rm, cc.r_exposed = re, cc.r_eff = rf;
        opts_t oc = o;
        oc.warmup = 2;
        oc.iters = 3;
        run_config(&m, &oc, &cc, 0);
        calib_p = rc[0];
        calib_m = rm[0];
        if (calib_p > 0 && calib_m > 0) {
            scale *= calib_m / o.ratio / calib_p;
        }
        CHECK(comm, tempo_broadcast(comm, &scale, &scale, 1, TEMPO_FLOAT64, 0), "broadcast");
        m.passes_per_work = scale;
        if (rank_ == 0) {
            printf("# calibration pass %d: compute %.1f ms, communication busy %.1f ms -> compute "
                   "x %.2f\n",
                   k + 1, calib_p * 1e3, calib_m * 1e3, calib_m / o.ratio / calib_p);
            fflush(stdout);
        }
    }

    config_t cfg[6];
    int nc = 0;
    static const char *const pname[3] = {"fifo", "tic", "tac"};
    for (int chunked = 0; chunked < 2; chunked++) {
        for (int k = 0; k < o.npolicies; k++) {
            config_t *c = &cfg[nc++];
            memset(c, 0, sizeof(*c));
            c->policy = o.policies[k];
            c->chunked = chunked;
            c->name = pname[c->policy];
            c->r_iter = calloc((size_t)o.rounds, sizeof(double));
            c->r_compute = calloc((size_t)o.rounds, sizeof(double));
            c->r_comm = calloc((size_t)o.rounds, sizeof(double));
            c->r_exposed = calloc((size_t)o.rounds, sizeof(double));
            c->r_eff = calloc((size_t)o.rounds, sizeof(double));
        }
    }
    double compute_iter = scale * work_total * pass_max; /* s, forward + backward, without skew */
    if (rank_ == 0) {
        printf("# compute per iteration after calibration: %.2f ms%s\n", compute_iter * 1e3,
               o.device ? "" : " (estimated from the multiply-add speed)");
        fflush(stdout);
    }
    /* CPU time over wall time of the rounds, all threads of this process (the slowest rank's). */
    struct rusage ru0, ru1;
    getrusage(RUSAGE_SELF, &ru0);
    double wall0 = util_now_s();
    on_acc_ = queued_acc_ = waited_acc_ = 0;
    for (int round = 0; round < o.rounds; round++) {
        for (int k = 0; k < nc; k++) {
            /* Rotate the order each round so that no configuration always goes first. */
            config_t *c = &cfg[(k + round) % nc];
            run_config(&m, &o, c, round);
            if (rank_ == 0) {
                printf("# round %d: %-4s %-8s T %8.1f ms  exposed %7.1f ms  E %.3f\n", round + 1,
                       c->name, c->chunked ? "chunked" : "whole", c->r_iter[round] * 1e3,
                       c->r_exposed[round] * 1e3, c->r_eff[round]);
                fflush(stdout);
            }
        }
    }
    getrusage(RUSAGE_SELF, &ru1);
    double cpu_s = (double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec) +
                   (double)(ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec) +
                   (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec) * 1e-6 +
                   (double)(ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec) * 1e-6;
    /* CPU / wall, and the main thread's time on a CPU over the time it was not queued for one while
     * it waited for compute (-1: unknown); the highest rank's. */
    double could = waited_acc_ - queued_acc_;
    double frac[2] = {cpu_s / (util_now_s() - wall0), on_acc_ >= 0 && could > 0 ? on_acc_ / could : -1},
           frac_max[2];
    CHECK(comm, tempo_allreduce(comm, frac, frac_max, 2, TEMPO_FLOAT64, TEMPO_MAX), "allreduce");
    double cpu_frac_max = frac_max[0];
    if (o.device) {
        m.wrong += writer_stop(&writer);
    }
    long wrong = 0;
    CHECK(comm, tempo_allreduce(comm, &m.wrong, &wrong, 1, TEMPO_INT64, TEMPO_SUM), "allreduce");
    double base = 0;
    for (int k = 0; k < nc; k++) {
        config_t *c = &cfg[k];
        c->iter = median(c->r_iter, o.rounds);
        c->compute = median(c->r_compute, o.rounds);
        c->comm = median(c->r_comm, o.rounds);
        c->exposed = median(c->r_exposed, o.rounds);
        c->eff = median(c->r_eff, o.rounds);
        c->overlap = c->comm > 0 ? 1 - c->exposed / c->comm : 1;
        if (c->overlap < 0) {
            c->overlap = 0;
        }
        if (c->policy == 0 && !c->chunked) {
            base = c->iter;
        }
    }
    if (rank_ == 0) {
        printf("#\n# %-6s %-8s %10s %11s %9s %11s %8s %7s %9s\n", "policy", "chunks", "T (ms)",
               "compute", "comm", "exposed", "overlap", "E", "vs fifo");
        for (int k = 0; k < nc; k++) {
            config_t *c = &cfg[k];
            char vs[16] = "-";
            if (base > 0 && !(c->policy == 0 && !c->chunked)) {
                snprintf(vs, sizeof(vs), "%+.1f%%", (c->iter / base - 1) * 100);
            }
            printf("  %-6s %-8s %10.1f %11.1f %9.1f %11.1f %8.3f %7.3f %9s\n", c->name,
                   c->chunked ? "chunked" : "whole", c->iter * 1e3, c->compute * 1e3,
                   c->comm * 1e3, c->exposed * 1e3, c->overlap, c->eff, vs);
        }
        printf("# CPU time / wall time of the rounds: %.0f %% (highest rank)\n",
               cpu_frac_max * 100);
        if (frac_max[1] >= 0) {
            printf("# main thread on a CPU while it waits for compute: %.0f %% of the time it was "
                   "not queued for one (highest rank)\n",
                   frac_max[1] * 100);
        } else {
            printf("# main thread on a CPU while it waits for compute: unknown (no schedstat)\n");
        }
        printf("# medians over %d rounds; gradients checked: %ld wrong\n", o.rounds, wrong);
        if (o.json) {
            FILE *f = fopen(o.json, "w");
            if (!f) {
                fprintf(stderr, "overlap_bench: cannot write %s: %s\n", o.json, strerror(errno));
            } else {
                fprintf(f,
                        "{\"ranks\": %d, \"profile\": \"%s\", \"layers\": %d, \"bytes\": %zu, "
                        "\"comm_alone_s\": %.6f, \"ratio\": %.3f, \"rounds\": %d, \"wrong\": %ld, "
                        "\"compute\": \"%s\", \"skew\": %.4f, \"seed\": %llu, "
                        "\"compute_iter_s\": %.6f, \"cpu_frac\": %.4f, \"runnable_frac\": %.4f, "
                        "\"results\": [",
                        size_, o.profile, p.L, total, comm_alone, o.ratio, o.rounds, wrong,
                        o.device ? "device" : "cpu", o.skew, (unsigned long long)o.seed,
                        compute_iter, cpu_frac_max, frac_max[1]);
                for (int k = 0; k < nc; k++) {
                    config_t *c = &cfg[k];
                    fprintf(f,
                            "%s\n {\"policy\": \"%s\", \"chunked\": %d, \"iter_s\": %.6f, "
                            "\"compute_s\": %.6f, \"comm_s\": %.6f, \"exposed_s\": %.6f, "
                            "\"overlap\": %.4f, \"efficiency\": %.4f}",
                            k ? "," : "", c->name, c->chunked, c->iter, c->compute, c->comm,
                            c->exposed, c->overlap, c->eff);
                }
                fprintf(f, "]}\n");
                fclose(f);
            }
        }
        fflush(stdout);
    }
    for (int l = 0; l < p.L; l++) {
        free(m.grad[l]);
    }
    free(m.grad);
    free(m.count);
    for (int k = 0; k < nc; k++) {
        free(cfg[k].r_iter);
        free(cfg[k].r_compute);
        free(cfg[k].r_comm);
        free(cfg[k].r_exposed);
        free(cfg[k].r_eff);
    }
    tempo_comm_destroy(comm);
    return wrong ? 1 : 0;
}
