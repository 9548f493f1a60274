/*
 * perf/common.h — the driver shared by every perf program, and the descriptor each collective
 * fills.
 *
 * A perf program is one small file (all_reduce.c, ...) holding a perf_coll_t and a main() that
 * calls perf_main(). The driver parses the nccl-tests flags, joins the job through the linked
 * backend (backend.h), sweeps sizes x dtypes x ops, checks results against exactly known values
 * (verifiable.h), times the out-of-place and in-place forms, and prints the nccl-tests table
 * (rank 0) and optionally JSON. It uses only tempo.h's enums and the backend table, never libtempo
 * internals.
 */
#ifndef TEMPO_PERF_COMMON_H
#define TEMPO_PERF_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include <tempo.h>

#include "perf/backend.h"
#include "perf/verifiable.h"

/* One (collective, size, dtype, op) case as seen by a descriptor's functions. */
typedef struct perf_ctx {
    const perf_backend_t *be;
    int nranks;
    int rank;
    int root;                 /* -r; meaningful when the collective has a root */
    size_t count;             /* the count argument of the call (per rank or block, as tempo.h) */
    tempo_dtype_t dtype;
    size_t tsize;             /* bytes per element */
    tempo_op_t op;            /* meaningful when the collective reduces */
    uint64_t seed;            /* differs per size, check iteration and placement */
    uint64_t red_input[16];   /* reductions: this rank's element bits for a(i) */
    uint64_t red_expected[16];/* reductions: the exact result's element bits for a(i) */
    uint64_t pattern[128];    /* others: element bits of the value k - 64 */
} perf_ctx_t;

typedef struct perf_coll {
    const char *name;        /* "all_reduce": the program is all_reduce_perf[_mpi] */
    const char *tempo_name;  /* "allreduce": the collective's name for tempo_attr_t.algorithm */
    int has_op;              /* reduces: loops over -o, prints the op; else prints "none" */
    int has_root;            /* rooted: prints -r; else prints -1 */
    int has_inplace;         /* 0: the in-place group prints N/A (sendrecv) */
    int min_ranks;           /* refuse to run with fewer ranks */
    /* nccl-tests sizing: count = bytes / (elems_per_count(n) * tsize); the size column and the S of
     * algbw are count * elems_per_count(n) * tsize (the total over ranks for RS, AG and A2A). */
    size_t (*elems_per_count)(int nranks);
    double (*busbw_factor)(int nranks);
    /* Elements this rank sends / receives in the call: what is filled, and what is checked. */
    size_t (*send_elems)(const perf_ctx_t *ctx);
    size_t (*recv_elems)(const perf_ctx_t *ctx);
    /* In-place layout inside one buffer (tempo.h's documentation; MPI_IN_PLACE for MPI). */
    void (*inplace_layout)(const perf_ctx_t *ctx, void *buf, void **send_p, void **recv_p);
    /* Element bits of input element j of this rank. */
    uint64_t (*input)(const perf_ctx_t *ctx, size_t j);
    /* Element bits expected in output element j of this rank. */
    uint64_t (*expected)(const perf_ctx_t *ctx, size_t j);
    /* One call of the collective through ctx->be. */
    void (*run)(const perf_ctx_t *ctx, const void *send, void *recv, int nonblocking);
} perf_coll_t;

/* Runs the program; returns the exit status (0; 1 when a result was wrong; 2 for usage errors). */
int perf_main(int argc, char **argv, const perf_coll_t *coll);

/* Generators for descriptors (verifiable.h): reductions index by the global element index. */
static inline uint64_t perf_red_input(const perf_ctx_t *ctx, size_t global_index)
{
    return ctx->red_input[perf_red_index(ctx->seed, global_index)];
}

static inline uint64_t perf_red_expected(const perf_ctx_t *ctx, size_t global_index)
{
    return ctx->red_expected[perf_red_index(ctx->seed, global_index)];
}

static inline uint64_t perf_pattern(const perf_ctx_t *ctx, int rank, size_t index)
{
    return ctx->pattern[perf_pattern_index(ctx->seed, rank, index)];
}

/* Common pieces of descriptors. */
size_t perf_one(int nranks);            /* 1 */
size_t perf_nranks(int nranks);         /* nranks */
double perf_factor_one(int nranks);     /* 1 */
double perf_factor_n1_n(int nranks);    /* (n-1)/n */
size_t perf_count(const perf_ctx_t *ctx);          /* count */
size_t perf_count_x_nranks(const perf_ctx_t *ctx); /* count * nranks */
void perf_layout_same(const perf_ctx_t *ctx, void *buf, void **send_p, void **recv_p);

#endif /* TEMPO_PERF_COMMON_H */
