/*
 * perf/all_reduce.c — all_reduce_perf[_mpi]: tempo_allreduce / MPI_Allreduce.
 *
 * S = count * typesize; busbw = algbw * 2(n-1)/n. Every rank holds count elements and receives the
 * reduction of all of them. In-place: sendbuf == recvbuf (MPI_IN_PLACE).
 */
#include "perf/common.h"

static double busbw_factor(int nranks)
{
    return 2.0 * (double)(nranks - 1) / (double)nranks;
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
    ctx->be->allreduce(send, recv, ctx->count, ctx->dtype, ctx->op, nonblocking);
}

static const perf_coll_t coll = {
    .name = "all_reduce",
    .tempo_name = "allreduce",
    .has_op = 1,
    .has_root = 0,
    .has_inplace = 1,
    .min_ranks = 1,
    .elems_per_count = perf_one,
    .busbw_factor = busbw_factor,
    .send_elems = perf_count,
    .recv_elems = perf_count,
    .inplace_layout = perf_layout_same,
    .input = input,
    .expected = expected,
    .run = run,
};

int main(int argc, char **argv)
{
    return perf_main(argc, argv, &coll);
}
