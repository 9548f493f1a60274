/*
 * perf/reduce.c — reduce_perf[_mpi]: tempo_reduce / MPI_Reduce.
 *
 * S = count * typesize; busbw = algbw. Every rank sends count elements; only the root's receive
 * buffer is written and checked. In-place: sendbuf == recvbuf (MPI_IN_PLACE on the root).
 */
#include "perf/common.h"

static size_t recv_elems(const perf_ctx_t *ctx)
{
    return ctx->rank == ctx->root ? ctx->count : 0;
}

static uint64_t input(const perf_ctx_t *ctx, size_t j)
{
    return perf_red_input(ctx, j);
}

static uint64_t expected(const perf_ctx_t *ctx, size_t j)
{
    return perf_red_expected(ctx, j);
}

static void run(const perf_ctx_t *ctx, const void *send, void *recv, int nonblocking)
{
    ctx->be->reduce(send, recv, ctx->count, ctx->dtype, ctx->op, ctx->root, nonblocking);
}

static const perf_coll_t coll = {
    .name = "reduce",
    .tempo_name = "reduce",
    .has_op = 1,
    .has_root = 1,
    .has_inplace = 1,
    .min_ranks = 1,
    .elems_per_count = perf_one,
    .busbw_factor = perf_factor_one,
    .send_elems = perf_count,
    .recv_elems = recv_elems,
    .inplace_layout = perf_layout_same,
    .input = input,
    .expected = expected,
    .run = run,
};

int main(int argc, char **argv)
{
    return perf_main(argc, argv, &coll);
}
