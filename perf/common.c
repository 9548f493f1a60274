/*
 * perf/common.c — the nccl-tests-style driver shared by every perf program.
 *
 * What it does, in order: parse the nccl-tests flags (usage errors exit 2 before anything starts);
 * join the job through the linked backend; print the header with one line per rank (gathered to
 * rank 0); then for each dtype, op and size: for the out-of-place and the in-place form, run -c
 * check iterations (refill inputs with a fresh seed, poison outputs, one call, count elements that
 * differ bitwise from the exactly known result), -w warm-up iterations, a barrier, and -n timed
 * iterations; combine the per-iteration time across ranks (-a, default the slowest rank) and #wrong
 * (sum over ranks); rank 0 prints the row. The footer and the exit status follow nccl-tests: exit 1
 * when any element was wrong, after the whole table.
 *
 * What it is not: a library user beyond backend.h. It never calls libtempo itself (the MPI
 * baselines link the same driver without libtempo); names and generators come from verifiable.c.
 *
 * Invariants: every rank takes the same decisions (flags are parsed identically everywhere, and
 * decisions that depend on one rank, such as opening the JSON file, are agreed with an allreduce),
 * so ranks never diverge in the sequence of collectives. Only rank 0 writes stdout and the
 * JSON file.
 */
#include "perf/common.h"
#include "perf/devmem.h"
#include "perf/util.h"
#include "util/helpers.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

typedef struct perf_params {
    size_t minbytes, maxbytes, stepbytes;
    long stepfactor;          /* > 1: multiply; else add stepbytes */
    int iters, warmup, check;
    int blocking;             /* 1: blocking calls; 0: non-blocking, then wait for all */
    int average;              /* 0 rank 0, 1 mean, 2 min, 3 max */
    int all_dtypes, all_ops;
    tempo_dtype_t dtype;
    tempo_op_t op;
    int root;
    const char *json_path;
    const char *algorithm;
    int registered;           /* -R 1: buffers from the backend's shared allocation */
    int cuda;                 /* -M cuda: buffers in CUDA device memory (perf/devmem.c) */
} perf_params_t;

typedef struct perf_group {
    int valid;                /* 0: not applicable (printed N/A) */
    double time_us, algbw, busbw;
    long long wrong;          /* -1 when checking is off */
} perf_group_t;

typedef struct perf_row {
    size_t size, count;
    tempo_dtype_t dtype;
    const char *redop;
    int root;
    perf_group_t group[2];    /* [0] out-of-place, [1] in-place */
} perf_row_t;

/* ---- descriptor helpers ---------------------------------------------------------------------- */

size_t perf_one(int nranks)
{
    (void)nranks;
    return 1;
}

size_t perf_nranks(int nranks)
{
    return (size_t)nranks;
}

double perf_factor_one(int nranks)
{
    (void)nranks;
    return 1.0;
}

double perf_factor_n1_n(int nranks)
{
    return (double)(nranks - 1) / (double)nranks;
}

size_t perf_count(const perf_ctx_t *ctx)
{
    return ctx->count;
}

size_t perf_count_x_nranks(const perf_ctx_t *ctx)
{
    return ctx->count * (size_t)ctx->nranks;
}

void perf_layout_same(const perf_ctx_t *ctx, void *buf, void **send_p, void **recv_p)
{
    (void)ctx;
    *send_p = buf;
    *recv_p = buf;
}

/* ---- flags ----------------------------------------------------------------------------------- */

static void usage(FILE *out, const char *prog)
{
    fprintf(out,
            "Usage: %s [options]\n"
            "nccl-tests-style benchmark; run it under a launcher (tempo-run -n N, mpirun -n N).\n"
            "  -b, --minbytes <size>     smallest size in bytes (32M); K, M, G = powers of 1024\n"
            "  -e, --maxbytes <size>     largest size in bytes (32M)\n"
            "  -i, --stepbytes <size>    additive step between sizes (1M), used when -f is 1\n"
            "  -f, --stepfactor <n>      multiplicative step between sizes (1 = off)\n"
            "  -n, --iters <n>           timed iterations per size (20)\n"
            "  -w, --warmup_iters <n>    untimed warm-up iterations per size (5)\n"
            "  -c, --check <n>           check iterations per size, before timing (1); 0 = off\n"
            "                            (#wrong prints N/A)\n"
            "  -d, --datatype <type>     int8 uint8 int32 uint32 int64 uint64 half (fp16,\n"
            "                            float16) bfloat16 (bf16) float (fp32, float32) double\n"
            "                            (fp64, float64), or all (float)\n"
            "  -o, --op <op>             sum prod min max avg, or all (sum); reductions only\n"
            "  -r, --root <rank>         root of broadcast and reduce (0)\n"
            "  -z, --blocking <0|1>      1: one blocking call per iteration (default); 0: post\n"
            "                            every iteration non-blocking, then wait for all\n"
            "  -a, --average <0-3>       time across ranks: 0 rank 0, 1 mean, 2 min, 3 max (3)\n"
            "  -J, --output_file <file>  also write the results as JSON (rank 0)\n"
            "  -A, --algorithm <name>    force a tempo algorithm (tempo_attr_t.algorithm);\n"
            "                            tempo programs only\n"
            "  -R, --local_register <0|1> 1: buffers from tempo_mem_alloc (memory the ranks of\n"
            "                            a host map: single-copy shared-memory all-reduce, as\n"
            "                            nccl-tests' -R registers buffers); tempo programs only\n"
            "  -M, --memory <host|cuda>  cuda: buffers in CUDA device memory (the CUDA driver\n"
            "                            of TEMPO_CUDA_DRIVER, default libcuda.so.1; device:\n"
            "                            local rank mod devices), filled and checked through\n"
            "                            host copies; tempo programs only\n"
            "  -t, -g, -m <1>            nccl-tests threads, GPUs, aggregation: accepted, 1 only\n"
            "  -h, --help                this text\n"
            "      --version             the package version\n"
            "Columns: time is the per-iteration average, combined across ranks by -a;\n"
            "algbw = S/time and busbw = algbw x factor in GB/s (1e9), nccl-tests' S and factors.\n",
            prog);
}

/* Free the buffers: from the backend's shared allocation (-R 1), the device (-M cuda, with their
 * host copies) or aligned_alloc. */
static void release_bufs(const perf_backend_t *be, const perf_params_t *p, void *send, void *recv,
                         void *sendhost, void *recvhost)
{
    if (p->registered) {
        if (send != NULL)
            be->mem_free(send);
        if (recv != NULL)
            be->mem_free(recv);
    } else if (p->cuda) {
        perf_dev_free(send);
        perf_dev_free(recv);
        free(sendhost);
        free(recvhost);
    } else {
        free(send);
        free(recv);
    }
}

/* The rank a launcher gave this process before the job exists: -1 without a launcher. */
static int launcher_rank(void)
{
    static const char *const vars[] = {"TEMPO_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                                       "PMIX_RANK", "SLURM_PROCID"};
    for (size_t k = 0; k < sizeof(vars) / sizeof(vars[0]); k++) {
        const char *v = getenv(vars[k]);
        if (v != NULL && *v != '\0')
            return atoi(v);
    }
    return -1;
}

static int parse_int(const char *s, long lo, long hi, long *v_p)
{
    if (s == NULL || *s == '\0')
        return -1;
    errno = 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v < lo || v > hi)
        return -1;
    *v_p = v;
    return 0;
}

/* Returns -1 to go on, 0 for -h, 1 for --version, 2 on errors with the reason in msg. */
static int parse_args(int argc, char **argv, perf_params_t *p, char *msg, size_t msglen)
{
    static const struct option longopts[] = {
        {"nthreads", required_argument, NULL, 't'},    {"ngpus", required_argument, NULL, 'g'},
        {"minbytes", required_argument, NULL, 'b'},    {"maxbytes", required_argument, NULL, 'e'},
        {"stepbytes", required_argument, NULL, 'i'},   {"stepfactor", required_argument, NULL, 'f'},
        {"iters", required_argument, NULL, 'n'},       {"agg_iters", required_argument, NULL, 'm'},
        {"warmup_iters", required_argument, NULL, 'w'}, {"check", required_argument, NULL, 'c'},
        {"datatype", required_argument, NULL, 'd'},    {"op", required_argument, NULL, 'o'},
        {"root", required_argument, NULL, 'r'},        {"blocking", required_argument, NULL, 'z'},
        {"average", required_argument, NULL, 'a'},
        {"output_file", required_argument, NULL, 'J'},
        {"algorithm", required_argument, NULL, 'A'},   {"help", no_argument, NULL, 'h'},
        {"local_register", required_argument, NULL, 'R'},
        {"memory", required_argument, NULL, 'M'},
        {"version", no_argument, NULL, 'V'}, {NULL, 0, NULL, 0}};
    long v = 0;

    opterr = 0;
    for (;;) {
        int c = getopt_long(argc, argv, ":t:g:b:e:i:f:n:m:w:c:d:o:r:z:a:J:A:R:M:h", longopts, NULL);
        if (c == -1)
            break;
        switch (c) {
        case 't': case 'g': case 'm':
            if (parse_int(optarg, 1, 1, &v) != 0)
                snprintf(msg, msglen, "-%c %s: only 1 is supported (one rank per process, "
                         "host memory, no aggregation)", c, optarg);
            break;
        case 'b':
            if (util_parse_size(optarg, &p->minbytes) != 0)
                snprintf(msg, msglen, "-b %s: not a size (digits with an optional K, M or G)",
                         optarg);
            break;
        case 'e':
            if (util_parse_size(optarg, &p->maxbytes) != 0)
                snprintf(msg, msglen, "-e %s: not a size (digits with an optional K, M or G)",
                         optarg);
            break;
        case 'i':
            if (util_parse_size(optarg, &p->stepbytes) != 0 || p->stepbytes == 0)
                snprintf(msg, msglen, "-i %s: not a positive size", optarg);
            break;
        case 'f':
            if (parse_int(optarg, 1, 1L << 20, &p->stepfactor) != 0)
                snprintf(msg, msglen, "-f %s: not an integer factor >= 1", optarg);
            break;
        case 'n':
            if (parse_int(optarg, 1, 1L << 30, &v) != 0)
                snprintf(msg, msglen, "-n %s: not an iteration count >= 1", optarg);
            p->iters = (int)v;
            break;
        case 'w':
            if (parse_int(optarg, 0, 1L << 30, &v) != 0)
                snprintf(msg, msglen, "-w %s: not an iteration count >= 0", optarg);
            p->warmup = (int)v;
            break;
        case 'c':
            if (parse_int(optarg, 0, 1L << 20, &v) != 0)
                snprintf(msg, msglen, "-c %s: not a check count >= 0", optarg);
            p->check = (int)v;
            break;
        case 'd':
            p->all_dtypes = strcmp(optarg, "all") == 0;
            if (!p->all_dtypes && perf_dtype_parse(optarg, &p->dtype) != 0)
                snprintf(msg, msglen, "-d %s: unknown datatype", optarg);
            break;
        case 'o':
            p->all_ops = strcmp(optarg, "all") == 0;
            if (!p->all_ops && perf_op_parse(optarg, &p->op) != 0)
                snprintf(msg, msglen, "-o %s: unknown op (sum prod min max avg all)", optarg);
            break;
        case 'r':
            if (parse_int(optarg, 0, 1L << 30, &v) != 0)
                snprintf(msg, msglen, "-r %s: not a rank", optarg);
            p->root = (int)v;
            break;
        case 'z':
            if (parse_int(optarg, 0, 1, &v) != 0)
                snprintf(msg, msglen, "-z %s: 0 (non-blocking) or 1 (blocking)", optarg);
            p->blocking = (int)v;
            break;
        case 'a':
            if (parse_int(optarg, 0, 3, &v) != 0)
                snprintf(msg, msglen, "-a %s: 0 (rank 0), 1 (mean), 2 (min) or 3 (max)",
                         optarg);
            p->average = (int)v;
            break;
        case 'J':
            p->json_path = optarg;
            break;
        case 'A':
            p->algorithm = optarg;
            break;
        case 'R':
            if (parse_int(optarg, 0, 1, &v) != 0)
                snprintf(msg, msglen, "-R %s: 0 (malloc) or 1 (tempo_mem_alloc)", optarg);
            p->registered = (int)v;
            break;
        case 'M':
            if (strcmp(optarg, "host") == 0 || strcmp(optarg, "cuda") == 0)
                p->cuda = strcmp(optarg, "cuda") == 0;
            else
                snprintf(msg, msglen, "-M %s: host or cuda", optarg);
            break;
        case 'h':
            return 0;
        case 'V':
            return 1;
        case ':':
            snprintf(msg, msglen, "option %s needs a value", argv[optind - 1]);
            break;
        default:
            if (optopt != 0)
                snprintf(msg, msglen, "unknown option -%c", optopt);
            else
                snprintf(msg, msglen, "unknown option %s", argv[optind - 1]);
            break;
        }
        if (msg[0] != '\0')
            break;
    }
    if (msg[0] == '\0' && optind < argc)
        snprintf(msg, msglen, "unexpected argument '%s'", argv[optind]);
    if (msg[0] == '\0' && p->minbytes > p->maxbytes)
        snprintf(msg, msglen, "minbytes %zu is larger than maxbytes %zu (-b and -e both "
                 "default to 32M)", p->minbytes, p->maxbytes);
    return msg[0] != '\0' ? 2 : -1;
}

/* ---- small utilities ------------------------------------------------------------------------- */

/* 1 when every rank passes ok != 0. */
static int all_ranks_ok(const perf_backend_t *be, int ok)
{
    int32_t mine = ok ? 1 : 0, all = 0;
    be->control_allreduce(&mine, &all, 1, TEMPO_INT32, TEMPO_MIN);
    return all != 0;
}

static void format_time(char *buf, size_t len, double us)
{
    if (us >= 10000.0)
        snprintf(buf, len, "%7.0f", us);
    else if (us >= 100.0)
        snprintf(buf, len, "%7.1f", us);
    else
        snprintf(buf, len, "%7.2f", us);
}

static void json_group(FILE *f, const perf_group_t *g)
{
    if (!g->valid) {
        fputs("null", f);
        return;
    }
    fputs("{\"time_us\":", f);
    perf_json_num(f, g->time_us);
    fputs(",\"algbw\":", f);
    perf_json_num(f, g->algbw);
    fputs(",\"busbw\":", f);
    perf_json_num(f, g->busbw);
    if (g->wrong < 0)
        fputs(",\"wrong\":null}", f);
    else
        fprintf(f, ",\"wrong\":%lld}", g->wrong);
}

static int write_json(FILE *f, const char *prog, const char *backend, int nranks,
                      const perf_params_t *p, const perf_row_t *rows, size_t nrows,
                      long long out_of_bounds, double avg_busbw)
{
    fputs("{\n\"program\":", f);
    perf_json_str(f, prog);
    fputs(",\n\"backend\":", f);
    perf_json_str(f, backend);
    fprintf(f, ",\n\"nranks\":%d,\n\"params\":{\"minbytes\":%zu,\"maxbytes\":%zu,\"stepbytes\":%zu,"
            "\"stepfactor\":%ld,\"iters\":%d,\"warmup_iters\":%d,\"check\":%d,\"datatype\":",
            nranks, p->minbytes, p->maxbytes, p->stepbytes, p->stepfactor, p->iters, p->warmup,
            p->check);
    perf_json_str(f, p->all_dtypes ? "all" : perf_dtype_name(p->dtype));
    fputs(",\"op\":", f);
    perf_json_str(f, p->all_ops ? "all" : perf_op_name(p->op));
    fprintf(f, ",\"root\":%d,\"blocking\":%d,\"average\":%d,\"algorithm\":", p->root, p->blocking,
            p->average);
    if (p->algorithm != NULL)
        perf_json_str(f, p->algorithm);
    else
        fputs("null", f);
    fputs("},\n\"results\":[", f);
    for (size_t k = 0; k < nrows; k++) {
        const perf_row_t *r = &rows[k];
        fprintf(f, "%s\n{\"size\":%zu,\"count\":%zu,\"type\":", k ? "," : "", r->size, r->count);
        perf_json_str(f, perf_dtype_name(r->dtype));
        fputs(",\"redop\":", f);
        perf_json_str(f, r->redop);
        fprintf(f, ",\"root\":%d,\"out_of_place\":", r->root);
        json_group(f, &r->group[0]);
        fputs(",\"in_place\":", f);
        json_group(f, &r->group[1]);
        fputc('}', f);
    }
    fprintf(f, "\n],\n\"out_of_bounds\":%lld,\n\"average_bus_bandwidth\":", out_of_bounds);
    perf_json_num(f, avg_busbw);
    fputs("\n}\n", f);
    return ferror(f) ? -1 : 0;
}

/* ---- one case -------------------------------------------------------------------------------- */

/* Fill inputs and poison outputs (every output element gets the complement of its expected bits,
 * so an element the collective never wrote is always counted), call once, count wrong elements. */
/* send and recv are what the collective gets; sendh and recvh the same layout in host memory
 * that is filled and read (the same pointers, except with -M cuda: then copied to the device
 * before the call, the receive side first, as the in-place layouts overlap, and back after). */
static long long check_once(const perf_coll_t *coll, const perf_ctx_t *ctx, void *send, void *recv,
                            void *sendh, void *recvh, int nonblocking)
{
    size_t nsend = coll->send_elems(ctx), nrecv = coll->recv_elems(ctx), tsize = ctx->tsize;
    for (size_t j = 0; j < nrecv; j++)
        perf_store(recvh, j, tsize, ~coll->expected(ctx, j));
    for (size_t j = 0; j < nsend; j++)
        perf_store(sendh, j, tsize, coll->input(ctx, j));
    if (recvh != recv && (perf_dev_copy(recv, recvh, nrecv * tsize) != 0 ||
                          perf_dev_copy(send, sendh, nsend * tsize) != 0))
        return (long long)nrecv; /* counted wrong: the data never got there */
    coll->run(ctx, send, recv, nonblocking);
    if (nonblocking)
        ctx->be->waitall();
    if (recvh != recv && perf_dev_copy(recvh, recv, nrecv * tsize) != 0)
        return (long long)nrecv;
    long long wrong = 0;
    for (size_t j = 0; j < nrecv; j++)
        wrong += perf_load(recvh, j, tsize) != coll->expected(ctx, j);
    return wrong;
}

/* Per-iteration time of this rank in microseconds. */
static double time_loop(const perf_coll_t *coll, const perf_ctx_t *ctx, const perf_params_t *p,
                        void *send, void *recv)
{
    const perf_backend_t *be = ctx->be;
    int nonblocking = !p->blocking;
    for (int w = 0; w < p->warmup; w++)
        coll->run(ctx, send, recv, nonblocking);
    if (nonblocking)
        be->waitall();
    be->barrier();
    double t0 = util_now_s();
    for (int it = 0; it < p->iters; it++)
        coll->run(ctx, send, recv, nonblocking);
    if (nonblocking)
        be->waitall();
    return (util_now_s() - t0) * 1e6 / p->iters;
}

static double combine_time(const perf_backend_t *be, int how, int nranks, double mine)
{
    double out = mine;
    switch (how) {
    case 1:
        be->control_allreduce(&mine, &out, 1, TEMPO_FLOAT64, TEMPO_SUM);
        return out / nranks;
    case 2:
        be->control_allreduce(&mine, &out, 1, TEMPO_FLOAT64, TEMPO_MIN);
        return out;
    case 3:
        be->control_allreduce(&mine, &out, 1, TEMPO_FLOAT64, TEMPO_MAX);
        return out;
    default:
        return mine; /* rank 0's own time; only rank 0 prints */
    }
}

/* ---- the program ----------------------------------------------------------------------------- */

typedef struct rank_info {
    int32_t pid;
    char host[60];
} rank_info_t;

static void print_header(const perf_coll_t *coll, const perf_params_t *p, const char *prog,
                         const char *backend, const rank_info_t *ranks, int nranks)
{
    static const char *const how[] = {"rank 0's", "mean over ranks", "fastest rank",
                                      "slowest rank"};
    const perf_backend_t *be = &perf_backend;
    printf("# Collective test starting: %s\n", prog);
    printf("# nThread 1 nGpus 1 minBytes %zu maxBytes %zu step: %zu(%s) warmup iters: %d iters: %d "
           "agg iters: 1 validation: %d graph: 0\n",
           p->minbytes, p->maxbytes, p->stepfactor > 1 ? (size_t)p->stepfactor : p->stepbytes,
           p->stepfactor > 1 ? "factor" : "bytes", p->warmup, p->iters, p->check);
    printf("#\n# Using ranks (host memory)\n");
    for (int r = 0; r < nranks; r++)
        printf("#  Rank %2d Group  0 Pid %6d on %10s\n", r, (int)ranks[r].pid, ranks[r].host);
    printf("#\n# Backend: %s\n", backend);
    printf("# Time: per-iteration average, %s (-a %d), %s (-z %d); GB = 1e9 bytes\n",
           how[p->average], p->average,
           p->blocking ? "blocking calls" : "all iterations posted, then waited for", p->blocking);
    if (p->algorithm != NULL)
        printf("# Algorithm: %s (forced with -A)\n", p->algorithm);
    if (p->registered)
        printf("# Buffers: tempo_mem_alloc (-R 1)\n");
    if (p->cuda) {
        const char *gb = getenv("TEMPO_GPU_BACKEND"), *ipc = getenv("TEMPO_GPU_IPC");
        int nccl = gb && !strcmp(gb, "nccl");
        printf("# Buffers: CUDA device memory (-M cuda), device %d of each rank; %s%s\n",
               perf_dev_index(),
               nccl ? "NCCL calls (TEMPO_GPU_BACKEND=nccl)"
                    : "staged through host memory (TEMPO_GPU_BACKEND=native)",
               !nccl && ipc &&
                       (!strcmp(ipc, "1") || !strcasecmp(ipc, "yes") || !strcasecmp(ipc, "on") ||
                        !strcasecmp(ipc, "true")) &&
                       !strcmp(coll->tempo_name, "allreduce") &&
                       p->blocking
                   ? "; blocking all-reduces between the ranks of one host through CUDA IPC "
                     "(TEMPO_GPU_IPC=1)"
                   : "");
    }
    if (coll->has_op && be->avg_note != NULL && (p->all_ops || p->op == TEMPO_AVG))
        printf("# %s\n", be->avg_note);
    if (coll->has_op && be->integer_note != NULL && (p->all_dtypes || p->dtype <= TEMPO_UINT64))
        printf("# %s\n", be->integer_note);
    if (coll->has_inplace && strcmp(coll->tempo_name, "reduce_scatter") == 0)
        printf("# In-place layout: recvbuf = sendbuf%s\n",
               be->inplace_rs_rank_block ? " + rank*recvcount (as NCCL)"
                                         : " (MPI_IN_PLACE: block r at the start)");
    if (!coll->has_inplace)
        printf("# In-place: not applicable (send and receive buffers must not overlap): N/A\n");
    printf("#\n");
    printf("# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place"
           "          \n", "", "", "", "", "");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s\n", "size", "count",
           "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
           "#wrong");
    printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s\n", "(B)",
           "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
           "");
    fflush(stdout);
}

static void print_row(const perf_row_t *row)
{
    printf("%12zu  %12zu  %8s  %6s  %6d", row->size, row->count, perf_dtype_name(row->dtype),
           row->redop, row->root);
    for (int g = 0; g < 2; g++) {
        const perf_group_t *gr = &row->group[g];
        if (!gr->valid) {
            printf("  %7s  %6s  %6s  %5s", "N/A", "N/A", "N/A", "N/A");
            continue;
        }
        char t[32], w[32];
        format_time(t, sizeof(t), gr->time_us);
        if (gr->wrong < 0)
            snprintf(w, sizeof(w), "N/A");
        else
            snprintf(w, sizeof(w), "%lld", gr->wrong);
        printf("  %7s  %6.2f  %6.2f  %5s", t, gr->algbw, gr->busbw, w);
    }
    printf("\n");
    fflush(stdout);
}

int perf_main(int argc, char **argv, const perf_coll_t *coll)
{
    const perf_backend_t *be = &perf_backend;
    char prog[96];
    snprintf(prog, sizeof(prog), "%s_perf%s", coll->name, be->program_suffix);

    perf_params_t p = {
        .minbytes = 32u << 20, .maxbytes = 32u << 20, .stepbytes = 1u << 20, .stepfactor = 1,
        .iters = 20, .warmup = 5, .check = 1, .blocking = 1, .average = 3,
        .dtype = TEMPO_FLOAT32, .op = TEMPO_SUM, .root = 0,
    };
    char msg[640] = "";
    int rc = parse_args(argc, argv, &p, msg, sizeof(msg));
    if (rc == 0) {
        if (launcher_rank() <= 0)
            usage(stdout, prog);
        return 0;
    }
    if (rc == 1) {
        if (launcher_rank() <= 0)
            util_print_version(prog);
        return 0;
    }
    if (rc < 0 && p.algorithm != NULL) {
        char err[512];
        if (be->set_algorithm(coll->tempo_name, p.algorithm, err, sizeof(err)) != 0) {
            snprintf(msg, sizeof(msg), "-A %s: %s", p.algorithm, err);
            rc = 2;
        }
    }
    if (rc < 0 && p.registered && be->mem_alloc == NULL) {
        snprintf(msg, sizeof(msg), "-R 1: %s has no shared allocation", be->name);
        rc = 2;
    }
    if (rc < 0 && p.cuda && (p.registered || be->mem_alloc == NULL)) {
        snprintf(msg, sizeof(msg), "-M cuda: %s", p.registered ? "not with -R 1"
                 : "tempo programs only (this MPI takes no device buffers)");
        rc = 2;
    }
    if (rc == 2 && launcher_rank() < 0) { /* no job around: just say it */
        fprintf(stderr, "%s: %s\n", prog, msg);
        usage(stderr, prog);
        return 2;
    }

    /* Usage errors inside a launched job are still reported after joining it: launchers end the
     * whole job when one rank exits non-zero, so rank 0 says why before anyone leaves. */
    be->init(&argc, &argv);
    const int rank = be->rank(), nranks = be->size();
    if (rc != 2 && coll->has_root && p.root >= nranks) {
        snprintf(msg, sizeof(msg), "-r %d: root must be below the rank count (%d)", p.root, nranks);
        rc = 2;
    }
    if (rc != 2 && nranks < coll->min_ranks) {
        snprintf(msg, sizeof(msg), "needs at least %d ranks, the job has %d (start it with "
                 "tempo-run -n N or mpirun -n N)", coll->min_ranks, nranks);
        rc = 2;
    }
    if (rc == 2) {
        if (rank == 0) {
            fprintf(stderr, "%s: %s\n", prog, msg);
            usage(stderr, prog);
        }
        be->barrier();
        be->finalize();
        return 2;
    }

    FILE *json = NULL;
    int ok = 1;
    if (rank == 0 && p.json_path != NULL) {
        json = fopen(p.json_path, "w");
        if (json == NULL) {
            fprintf(stderr, "%s: -J %s: %s\n", prog, p.json_path, strerror(errno));
            ok = 0;
        }
    }
    if (!all_ranks_ok(be, ok)) {
        be->finalize();
        return 2;
    }

    /* Every send or receive region of any case fits in maxbytes (S <= maxbytes by construction). */
    size_t bufbytes = p.maxbytes < 64 ? 64 : (p.maxbytes + 63) / 64 * 64;
    if (p.maxbytes > SIZE_MAX / 4)
        bufbytes = 0; /* no machine has it; avoid the rounding overflow */
    /* sendbase, recvbase: what the collectives get; with -M cuda, device memory, and
     * sendhost, recvhost: host copies that the checks fill and read (else the same buffers). */
    void *sendbase = NULL, *recvbase = NULL, *sendhost = NULL, *recvhost = NULL;
    char nodev[256] = "";
    if (p.registered) { /* collective: every rank takes part, whatever it got */
        sendbase = bufbytes ? be->mem_alloc(bufbytes) : NULL;
        recvbase = bufbytes ? be->mem_alloc(bufbytes) : NULL;
    } else if (!p.cuda) {
        sendbase = bufbytes ? aligned_alloc(64, bufbytes) : NULL;
        recvbase = bufbytes ? aligned_alloc(64, bufbytes) : NULL;
    } else if (perf_dev_init(nodev, sizeof(nodev)) == 0) {
        sendbase = bufbytes ? perf_dev_alloc(bufbytes) : NULL;
        recvbase = bufbytes ? perf_dev_alloc(bufbytes) : NULL;
        sendhost = bufbytes ? aligned_alloc(64, bufbytes) : NULL;
        recvhost = bufbytes ? aligned_alloc(64, bufbytes) : NULL;
    }
    if (!p.cuda) {
        sendhost = sendbase;
        recvhost = recvbase;
    }
    ok = sendbase != NULL && recvbase != NULL && sendhost != NULL && recvhost != NULL;
    if (!ok)
        fprintf(stderr, "%s: rank %d: cannot allocate 2 x %zu bytes of %sbuffers%s%s\n", prog,
                rank, p.maxbytes, p.cuda ? "device " : "", nodev[0] ? ": " : " (lower -e)", nodev);
    if (!all_ranks_ok(be, ok)) {
        release_bufs(be, &p, sendbase, recvbase, sendhost, recvhost);
        if (json != NULL)
            fclose(json);
        be->finalize();
        return 1;
    }
    memset(sendhost, 0, bufbytes); /* touch every page before timing anything */
    memset(recvhost, 0, bufbytes);
    if (p.cuda && (perf_dev_copy(sendbase, sendhost, bufbytes) != 0 ||
                   perf_dev_copy(recvbase, recvhost, bufbytes) != 0)) {
        fprintf(stderr, "%s: rank %d: a copy to the device failed\n", prog, rank);
        be->abort_job(1);
    }

    rank_info_t mine, *ranks = calloc((size_t)nranks, sizeof(*ranks));
    memset(&mine, 0, sizeof(mine));
    mine.pid = (int32_t)getpid();
    if (gethostname(mine.host, sizeof(mine.host) - 1) != 0)
        snprintf(mine.host, sizeof(mine.host), "unknown");
    if (ranks == NULL) {
        fprintf(stderr, "%s: rank %d: out of memory\n", prog, rank);
        be->abort_job(1);
    }
    be->control_allgather(&mine, ranks, sizeof(mine));
    char backend[256];
    be->describe(backend, sizeof(backend));
    if (rank == 0)
        print_header(coll, &p, prog, backend, ranks, nranks);
    free(ranks);

    /* The sweep. */
    size_t nsizes = 0, sizes[4096];
    for (size_t s = p.minbytes; s <= p.maxbytes;) {
        if (nsizes == sizeof(sizes) / sizeof(sizes[0])) {
            if (rank == 0)
                printf("# The sweep stops after %zu sizes (raise -i or -f)\n", nsizes);
            break;
        }
        sizes[nsizes++] = s;
        size_t next = p.stepfactor > 1 ? (s == 0 ? 1 : s * (size_t)p.stepfactor) : s + p.stepbytes;
        if (next <= s || (p.stepfactor > 1 && s != 0 && next / (size_t)p.stepfactor != s))
            break; /* overflow */
        s = next;
    }
    int ndt = p.all_dtypes ? TEMPO_DTYPE_COUNT : 1;
    int nop = (coll->has_op && p.all_ops) ? TEMPO_OP_COUNT : 1;
    perf_row_t *rows = NULL;
    size_t nrows = 0, caprows = 0;
    long long out_of_bounds = 0;
    double bw_sum = 0.0;
    long bw_n = 0;
    perf_ctx_t *ctx = malloc(sizeof(*ctx));
    if (ctx == NULL) {
        fprintf(stderr, "%s: rank %d: out of memory\n", prog, rank);
        be->abort_job(1);
    }

    for (int di = 0; di < ndt; di++) {
        tempo_dtype_t dtype = p.all_dtypes ? (tempo_dtype_t)di : p.dtype;
        const char *why = be->dtype_unsupported(dtype);
        if (why != NULL) {
            if (rank == 0) {
                printf("# %s: %s; skipped\n", perf_dtype_name(dtype), why);
                fflush(stdout);
            }
            continue;
        }
        for (int oi = 0; oi < nop; oi++) {
            tempo_op_t op = !coll->has_op ? TEMPO_SUM : (p.all_ops ? (tempo_op_t)oi : p.op);
            memset(ctx, 0, sizeof(*ctx));
            ctx->be = be;
            ctx->nranks = nranks;
            ctx->rank = rank;
            ctx->root = coll->has_root ? p.root : 0;
            ctx->dtype = dtype;
            ctx->tsize = perf_dtype_size(dtype);
            ctx->op = op;
            if (coll->has_op)
                perf_red_tables(dtype, op, nranks, rank, be->integer_overflow_wraps,
                                ctx->red_input, ctx->red_expected);
            perf_pattern_table(dtype, ctx->pattern);

            for (size_t si = 0; si < nsizes; si++) {
                size_t epc = coll->elems_per_count(nranks);
                ctx->count = sizes[si] / (epc * ctx->tsize);
                perf_row_t row;
                memset(&row, 0, sizeof(row));
                row.size = ctx->count * epc * ctx->tsize;
                row.count = ctx->count;
                row.dtype = dtype;
                row.redop = coll->has_op ? perf_op_name(op) : "none";
                row.root = coll->has_root ? p.root : -1;
                for (int g = 0; g < 2; g++) {
                    perf_group_t *gr = &row.group[g];
                    if (g == 1 && !coll->has_inplace)
                        continue;
                    void *send = sendbase, *recv = recvbase, *sendh = sendhost, *recvh = recvhost;
                    if (g == 1) {
                        coll->inplace_layout(ctx, recvbase, &send, &recv);
                        coll->inplace_layout(ctx, recvhost, &sendh, &recvh);
                    }
                    long long wrong = 0;
                    for (int c = 0; c < p.check; c++) {
                        ctx->seed = perf_mix(((uint64_t)si << 40) ^ ((uint64_t)c << 8) ^
                                             ((uint64_t)g << 4) ^ ((uint64_t)dtype << 16) ^
                                             ((uint64_t)op << 24) ^ UINT64_C(0x5eed));
                        wrong += check_once(coll, ctx, send, recv, sendh, recvh, !p.blocking);
                    }
                    double t = combine_time(be, p.average, nranks,
                                            time_loop(coll, ctx, &p, send, recv));
                    gr->valid = 1;
                    gr->time_us = t;
                    gr->algbw = t > 0 ? (double)row.size / (t * 1e3) : 0.0;
                    gr->busbw = gr->algbw * coll->busbw_factor(nranks);
                    gr->wrong = -1;
                    if (p.check > 0) {
                        int64_t w = wrong, total = 0;
                        be->control_allreduce(&w, &total, 1, TEMPO_INT64, TEMPO_SUM);
                        gr->wrong = total;
                        out_of_bounds += total > 0; /* nccl-tests: one per failing case */
                    }
                    bw_sum += gr->busbw;
                    bw_n++;
                }
                if (rank == 0) {
                    print_row(&row);
                    if (nrows == caprows) {
                        caprows = caprows ? 2 * caprows : 64;
                        perf_row_t *grown = realloc(rows, caprows * sizeof(*rows));
                        if (grown == NULL) {
                            fprintf(stderr, "%s: out of memory\n", prog);
                            be->abort_job(1);
                        }
                        rows = grown;
                    }
                    rows[nrows++] = row;
                }
            }
        }
    }

    double avg_bw = bw_n ? bw_sum / (double)bw_n : 0.0;
    ok = 1;
    if (rank == 0) {
        printf("# %-20s : %lld %s\n", "Out of bounds values", out_of_bounds,
               out_of_bounds ? "FAILED" : "OK");
        printf("# %-20s : %g \n", "Avg bus bandwidth", avg_bw);
        printf("#\n# Collective test concluded: %s\n", prog);
        fflush(stdout);
        if (json != NULL) {
            int jrc = write_json(json, prog, backend, nranks, &p, rows, nrows, out_of_bounds,
                                 avg_bw);
            if (fclose(json) != 0 || jrc != 0) {
                fprintf(stderr, "%s: -J %s: write failed\n", prog, p.json_path);
                ok = 0;
            }
        }
    }
    free(rows);
    free(ctx);
    release_bufs(be, &p, sendbase, recvbase, sendhost, recvhost);
    /* Launchers end the whole job when one rank exits non-zero: no rank leaves before rank 0 has
     * printed the footer and written the JSON. */
    be->barrier();
    be->finalize();
    if (out_of_bounds > 0)
        return 1;
    return ok ? 0 : 1;
}
