/*
 * perf/all_reduce_bound.c — the physical lower bound of a shared-memory all-reduce on this host: a
 * minimal program doing only the necessary reads, reductions and writes, with spin barriers.
 *
 * It forks -p ranks that share one anonymous mapping holding every rank's send and receive buffer,
 * as if every buffer were registered with every peer (no staging, no copies through the kernel,
 * no library). One iteration, for S bytes at p ranks:
 *   1. rank r reduces its block r (S/p bytes, tempo__block's split) of every rank's send buffer, in
 *      rank order, into its receive buffer: reads S, writes S/p;
 *   2. spin barrier;
 *   3. rank r copies every other rank's block q from rank q's receive buffer into its own: reads
 *      and writes S(p-1)/p;
 *   4. spin barrier (so that the next iteration's step 1 cannot overwrite what a peer still reads).
 * That is 2.5 S bytes moved per rank at p = 2, which any all-reduce between private buffers has to
 * move at least (each rank reads its input, reduces half of the vector with the peer's half and
 * writes the whole result). The reduction is the best vector kernel the CPU has (AVX-512, AVX2 or
 * the compiler's SSE2 code, chosen at run time, -k forces one), never a scalar loop.
 *
 * It is not an all-reduce anyone can use (peers write each other's memory at will) and it takes
 * no care of faults; it is the yardstick that tempo-compare prints beside tempo's and MPI's times,
 * measured in the same rounds, since this machine's speed changes within seconds.
 *
 * Flags and output are nccl-tests' (-b -e -f -i -n -w -d -o -J), out-of-place only (the in-place
 * columns are "-"); -p sets the rank count (2). Types float and double, op sum: the values are
 * small integers, so the result is exact and checked (#wrong) after the timed iterations.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "util/helpers.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define BOUND_X86 1
#endif

#include "perf/util.h"

#define LINE 64
#define MAX_RANKS 64

typedef struct {
    _Atomic uint64_t v;
    char pad[LINE - sizeof(uint64_t)];
} line_t;

typedef struct {
    line_t bar[MAX_RANKS];   /* barriers passed, per rank */
    line_t settled;          /* (settle) the barrier after which every rank starts measuring */
    double time_us[MAX_RANKS];
    long long wrong[MAX_RANKS];
} ctl_t;

static int nranks = 2, spin_yield;
static ctl_t *ctl;
static char *bufs; /* (nranks, 2, maxbytes): send, recv */
static size_t maxbytes;

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static char *sendbuf(int r)
{
    return bufs + (size_t)r * 2 * maxbytes;
}
static char *recvbuf(int r)
{
    return bufs + ((size_t)r * 2 + 1) * maxbytes;
}

static void barrier(int me, uint64_t *epoch)
{
    uint64_t e = ++*epoch;
    atomic_store_explicit(&ctl->bar[me].v, e, memory_order_release);
    for (int q = 0; q < nranks; q++) {
        for (unsigned spins = 0; atomic_load_explicit(&ctl->bar[q].v, memory_order_acquire) < e;
             spins++) {
            /* A peer that waits for a core (others' processes on this shared machine, or more
             * ranks than cores) would otherwise be kept off it for a whole time slice. */
            if (spin_yield || spins > 4096) {
                sched_yield();
            }
#ifdef BOUND_X86
            _mm_pause();
#endif
        }
    }
}

/* ---- kernels: d[i] = a[i] + b[i] --------------------------------------------------------------- */

#define ADD_LOOP(T)                                                                                \
    for (size_t i = 0; i < n; i++) {                                                               \
        d[i] = a[i] + b[i];                                                                        \
    }
static void add_f32_generic(float *d, const float *a, const float *b, size_t n) { ADD_LOOP(float) }
static void add_f64_generic(double *d, const double *a, const double *b, size_t n)
{
    ADD_LOOP(double)
}
#ifdef BOUND_X86
__attribute__((target("avx2"))) static void add_f32_avx2(float *d, const float *a, const float *b,
                                                          size_t n)
{
    ADD_LOOP(float)
}
__attribute__((target("avx2"))) static void add_f64_avx2(double *d, const double *a,
                                                          const double *b, size_t n)
{
    ADD_LOOP(double)
}
__attribute__((target("avx512f,prefer-vector-width=512"))) static void
add_f32_avx512(float *d, const float *a, const float *b, size_t n)
{
    ADD_LOOP(float)
}
__attribute__((target("avx512f,prefer-vector-width=512"))) static void
add_f64_avx512(double *d, const double *a, const double *b, size_t n)
{
    ADD_LOOP(double)
}
#endif

static void (*add_f32)(float *, const float *, const float *, size_t) = add_f32_generic;
static void (*add_f64)(double *, const double *, const double *, size_t) = add_f64_generic;

static const char *pick_isa(const char *want)
{
#ifdef BOUND_X86
    __builtin_cpu_init();
    int has512 = __builtin_cpu_supports("avx512f"), has2 = __builtin_cpu_supports("avx2");
    if ((!strcmp(want, "auto") && has512) || (!strcmp(want, "avx512") && has512)) {
        add_f32 = add_f32_avx512, add_f64 = add_f64_avx512;
        return "avx512";
    }
    if ((!strcmp(want, "auto") || !strcmp(want, "avx512") || !strcmp(want, "avx2")) && has2) {
        add_f32 = add_f32_avx2, add_f64 = add_f64_avx2;
        return "avx2";
    }
    return "sse2";
#else
    (void)want;
    return "generic";
#endif
}

/* ---- one all-reduce ---------------------------------------------------------------------------- */

/* Block r of count elements split among nranks: the first count % nranks blocks get one more. */
static void block(size_t count, int r, size_t *off_p, size_t *cnt_p)
{
    size_t q = count / (size_t)nranks, m = count % (size_t)nranks;
    *cnt_p = q + ((size_t)r < m);
    *off_p = q * (size_t)r + ((size_t)r < m ? (size_t)r : m);
}

static void allreduce(int me, size_t count, size_t es, uint64_t *epoch)
{
    size_t off, cnt;
    block(count, me, &off, &cnt);
    if (nranks == 1) {
        memcpy(recvbuf(0), sendbuf(0), count * es);
        return;
    }
    /* 1. reduce block me in rank order, in pieces that stay in L1 when p > 2 */
    for (size_t o = off; o < off + cnt; o += 4096) {
        size_t m = cnt - (o - off) < 4096 ? cnt - (o - off) : 4096;
        char *d = recvbuf(me) + o * es;
        for (int r = 1; r < nranks; r++) {
            const char *a = r == 1 ? sendbuf(0) + o * es : d, *b = sendbuf(r) + o * es;
            if (es == 4) {
                add_f32((float *)d, (const float *)a, (const float *)b, m);
            } else {
                add_f64((double *)d, (const double *)a, (const double *)b, m);
            }
        }
    }
    barrier(me, epoch);
    /* 3. gather the other blocks */
    for (int q = 0; q < nranks; q++) {
        if (q != me) {
            block(count, q, &off, &cnt);
            memcpy(recvbuf(me) + off * es, recvbuf(q) + off * es, cnt * es);
        }
    }
    barrier(me, epoch);
}

static double input(int r, size_t i)
{
    return (double)((i * 7 + (size_t)r * 3) % 16);
}

static void fill(int me, size_t count, size_t es)
{
    for (size_t i = 0; i < count; i++) {
        if (es == 4) {
            ((float *)sendbuf(me))[i] = (float)input(me, i);
            ((float *)recvbuf(me))[i] = -1.0f;
        } else {
            ((double *)sendbuf(me))[i] = input(me, i);
            ((double *)recvbuf(me))[i] = -1.0;
        }
    }
}

static long long check(int me, size_t count, size_t es)
{
    long long wrong = 0;
    for (size_t i = 0; i < count; i++) {
        double want = 0;
        for (int r = 0; r < nranks; r++) {
            want += input(r, i);
        }
        double got = es == 4 ? (double)((float *)recvbuf(me))[i] : ((double *)recvbuf(me))[i];
        wrong += got != want;
    }
    return wrong;
}

/* Barriers for SETTLE_US before the first size. Right after fork a child runs on its parent's
 * core until the scheduler moves it, and the first size measured that way took 100-180 us at 64 KB
 * (6 us once settled, measured). tempo's ranks settle during their rendezvous. Rank 0 names the
 * barrier after which all stop, before it enters that barrier, so every rank leaves after the
 * same one. */
#define SETTLE_US 100e3
static void settle(int me, uint64_t *epoch)
{
    double t0 = now_us();
    for (;;) {
        if (me == 0 && !atomic_load_explicit(&ctl->settled.v, memory_order_relaxed) &&
            now_us() - t0 > SETTLE_US) {
            atomic_store_explicit(&ctl->settled.v, *epoch + 1, memory_order_relaxed);
        }
        barrier(me, epoch);
        if (atomic_load_explicit(&ctl->settled.v, memory_order_relaxed) == *epoch) {
            return;
        }
    }
}

typedef struct {
    size_t minbytes, maxbytes, stepbytes;
    long stepfactor;
    int iters, warmup;
    size_t es;
    const char *type, *json;
} params_t;

static void rank_main(int me, const params_t *p)
{
    uint64_t epoch = 0;
    settle(me, &epoch);
    for (size_t bytes = p->minbytes; bytes <= p->maxbytes;) {
        size_t count = bytes / p->es;
        fill(me, count, p->es);
        barrier(me, &epoch);
        for (int i = 0; i < p->warmup; i++) {
            allreduce(me, count, p->es, &epoch);
        }
        double t0 = now_us();
        for (int i = 0; i < p->iters; i++) {
            allreduce(me, count, p->es, &epoch);
        }
        ctl->time_us[me] = (now_us() - t0) / p->iters;
        ctl->wrong[me] = check(me, count, p->es);
        barrier(me, &epoch);
        barrier(me, &epoch); /* rank 0 prints between these two */
        if (p->stepfactor > 1) {
            if (bytes > p->maxbytes / (size_t)p->stepfactor) {
                break;
            }
            bytes *= (size_t)p->stepfactor;
        } else {
            bytes += p->stepbytes;
        }
    }
}

static void usage(FILE *f)
{
    fputs("Usage: all_reduce_bound [-p RANKS] [-b MIN] [-e MAX] [-f FACTOR | -i STEP] [-n ITERS]\n"
          "                        [-w WARMUP] [-d float|double] [-o sum] [-k auto|avx512|avx2|sse2]"
          "\n                        [-J FILE]   (or --help, --version)\n"
          "The lower bound of a shared-memory all-reduce on this host: every rank's buffers in one\n"
          "shared mapping, each rank reduces its block straight from every send buffer and copies\n"
          "the other blocks from their owners' receive buffers, spin barriers between. Sizes take\n"
          "K, M, G (powers of 1024). Defaults: -p 2 -b 8 -e 128M -f 2 -n 20 -w 5 -d float -o sum\n"
          "-k auto. Time: the slowest rank's mean per iteration.\n",
          f);
}

int main(int argc, char **argv)
{
    params_t p = {8, 128 << 20, 0, 2, 20, 5, 4, "float", NULL};
    const char *isa_want = "auto";
    int opt;
    if (argc == 2 && !strcmp(argv[1], "--version")) {
        util_print_version("all_reduce_bound");
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "--help")) {
        usage(stdout);
        return 0;
    }
    while ((opt = getopt(argc, argv, "p:b:e:f:i:n:w:d:o:k:J:c:a:z:r:A:h")) != -1) {
        switch (opt) {
        case 'p': nranks = atoi(optarg); break;
        case 'b': if (util_parse_size(optarg, &p.minbytes)) goto bad; break;
        case 'e': if (util_parse_size(optarg, &p.maxbytes)) goto bad; break;
        case 'f': p.stepfactor = atol(optarg); break;
        case 'i': if (util_parse_size(optarg, &p.stepbytes)) goto bad; p.stepfactor = 0; break;
        case 'n': p.iters = atoi(optarg); break;
        case 'w': p.warmup = atoi(optarg); break;
        case 'd':
            if (!strcmp(optarg, "float")) p.es = 4, p.type = "float";
            else if (!strcmp(optarg, "double")) p.es = 8, p.type = "double";
            else { fprintf(stderr, "all_reduce_bound: -d %s: float or double\n", optarg); return 2; }
            break;
        case 'o':
            if (strcmp(optarg, "sum")) { fprintf(stderr, "all_reduce_bound: -o %s: sum only\n", optarg); return 2; }
            break;
        case 'k': isa_want = optarg; break;
        case 'J': p.json = optarg; break;
        case 'c': case 'a': case 'z': case 'r': case 'A': break; /* no meaning here */
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind != argc || nranks < 1 || nranks > MAX_RANKS || p.iters < 1 || p.warmup < 0 ||
        p.minbytes > p.maxbytes || (p.stepfactor < 2 && p.stepbytes == 0) ||
        (strcmp(isa_want, "auto") && strcmp(isa_want, "avx512") && strcmp(isa_want, "avx2") &&
         strcmp(isa_want, "sse2"))) {
        goto bad;
    }
    p.minbytes = p.minbytes / p.es * p.es;
    if (p.minbytes == 0) {
        p.minbytes = p.es;
    }
    const char *isa = pick_isa(isa_want);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    spin_yield = nranks > cores; /* spinning ranks that wait for a core would never let it go */
    maxbytes = (p.maxbytes + 4095) / 4096 * 4096;
    size_t total = sizeof(ctl_t) + (size_t)nranks * 2 * maxbytes + 4096;
    void *m = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
        fprintf(stderr, "all_reduce_bound: mmap of %zu bytes: %s\n", total, strerror(errno));
        return 1;
    }
    ctl = m;
    bufs = (char *)m + (sizeof(ctl_t) + 4095) / 4096 * 4096;
    memset(bufs, 0, (size_t)nranks * 2 * maxbytes); /* fault every page in before any timing */

    char backend[160];
    snprintf(backend, sizeof(backend), "bound (shared buffers, spin barriers, %s)", isa);
    FILE *json = NULL;
    if (p.json && !(json = fopen(p.json, "w"))) {
        fprintf(stderr, "all_reduce_bound: -J %s: %s\n", p.json, strerror(errno));
        return 1;
    }
    printf("# all_reduce_bound: %s, %d ranks\n#\n", backend, nranks);
    printf("#%11s %13s %9s %7s %7s %8s %7s %7s %6s\n", "size", "count", "type", "redop", "root",
           "time", "algbw", "busbw", "#wrong");
    printf("#%11s %13s %9s %7s %7s %8s %7s %7s\n", "(B)", "(elements)", "", "", "", "(us)",
           "(GB/s)", "(GB/s)");
    fflush(stdout);
    pid_t pids[MAX_RANKS];
    for (int r = 1; r < nranks; r++) {
        if ((pids[r] = fork()) == 0) {
            rank_main(r, &p);
            _exit(0);
        }
    }
    /* Rank 0 prints each size between the two barriers that end it. */
    if (json) {
        fprintf(json, "{\n\"program\":\"all_reduce_bound\",\n\"backend\":");
        perf_json_str(json, backend);
        fprintf(json, ",\n\"nranks\":%d,\n\"results\":[", nranks);
    }
    uint64_t epoch = 0;
    settle(0, &epoch);
    long long wrong_all = 0;
    int rows = 0;
    for (size_t bytes = p.minbytes; bytes <= p.maxbytes;) {
        size_t count = bytes / p.es;
        fill(0, count, p.es);
        barrier(0, &epoch);
        for (int i = 0; i < p.warmup; i++) {
            allreduce(0, count, p.es, &epoch);
        }
        double t0 = now_us();
        for (int i = 0; i < p.iters; i++) {
            allreduce(0, count, p.es, &epoch);
        }
        ctl->time_us[0] = (now_us() - t0) / p.iters;
        ctl->wrong[0] = check(0, count, p.es);
        barrier(0, &epoch);
        double t = 0;
        long long wrong = 0;
        for (int r = 0; r < nranks; r++) {
            t = ctl->time_us[r] > t ? ctl->time_us[r] : t;
            wrong += ctl->wrong[r];
        }
        barrier(0, &epoch);
        wrong_all += wrong;
        double algbw = (double)(count * p.es) / t * 1e-3;
        double busbw = algbw * 2.0 * (nranks - 1) / nranks;
        printf(" %11zu %13zu %9s %7s %7d %8.2f %7.2f %7.2f %6lld %8s %7s %7s %6s\n", count * p.es,
               count, p.type, "sum", -1, t, algbw, busbw, wrong, "-", "-", "-", "-");
        fflush(stdout);
        if (json) {
            fprintf(json, "%s\n{\"size\":%zu,\"count\":%zu,\"type\":\"%s\",\"redop\":\"sum\","
                          "\"root\":-1,\"out_of_place\":{\"time_us\":",
                    rows ? "," : "", count * p.es, count, p.type);
            perf_json_num(json, t);
            fputs(",\"algbw\":", json);
            perf_json_num(json, algbw);
            fputs(",\"busbw\":", json);
            perf_json_num(json, busbw);
            fprintf(json, ",\"wrong\":%lld},\"in_place\":null}", wrong);
        }
        rows++;
        if (p.stepfactor > 1) {
            if (bytes > p.maxbytes / (size_t)p.stepfactor) {
                break;
            }
            bytes *= (size_t)p.stepfactor;
        } else {
            bytes += p.stepbytes;
        }
    }
    int rc = wrong_all ? 1 : 0;
    for (int r = 1; r < nranks; r++) {
        int ws;
        if (waitpid(pids[r], &ws, 0) < 0 || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
            rc = 1;
        }
    }
    if (json) {
        fprintf(json, "\n],\n\"out_of_bounds\":%lld\n}\n", wrong_all);
        if (fclose(json) != 0) {
            rc = 1;
        }
    }
    printf("# Out of bounds values : %lld %s\n", wrong_all, wrong_all ? "FAILED" : "OK");
    return rc;
bad:
    usage(stderr);
    return 2;
}
