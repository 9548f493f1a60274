/*
 * perf/alltoall.c — alltoall_perf[_mpi]: tempo_alltoall / MPI_Alltoall.
 *
 * count is the block size; every rank sends and receives count * n elements. S = count * n *
 * typesize (the size column is the total, as nccl-tests); busbw = algbw * (n-1)/n. In-place:
 * sendbuf == recvbuf (MPI_IN_PLACE).
 */
#include "perf/common.h"

static uint64_t input(const perf_ctx_t *ctx, size_t j)
{
    return perf_pattern(ctx, ctx->rank, j);
}

/* Block s of rank r's output is block r of rank s's input (count > 0 whenever this is called). */
static uint64_t expected(const perf_ctx_t *ctx, size_t j)
{
    size_t s = j / ctx->count;
    return perf_pattern(ctx, (int)s, (size_t)ctx->rank * ctx->count + j % ctx->count);
}

static void run(const perf_ctx_t *ctx, const void *send, void *recv, int nonblocking)
{
    ctx->be->alltoall(send, recv, ctx->count, ctx->dtype, nonblocking);
}

static const perf_coll_t coll = {
    .name = "alltoall",
    .tempo_name = "alltoall",
    .has_op = 0,
    .has_root = 0,
    .has_inplace = 1,
    .min_ranks = 1,
    .elems_per_count = perf_nranks,
    .busbw_factor = perf_factor_n1_n,
    .send_elems = perf_count_x_nranks,
    .recv_elems = perf_count_x_nranks,
    .inplace_layout = perf_layout_same,
    .input = input,
    .expected = expected,
    .run = run,
};

int main(int argc, char **argv)
{
    return perf_main(argc, argv, &coll);
}
