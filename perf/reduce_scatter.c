/*
 * perf/reduce_scatter.c — reduce_scatter_perf[_mpi]: tempo_reduce_scatter /
 * MPI_Reduce_scatter_block.
 *
 * count is the per-rank recvcount; every rank sends count * n elements. S = count * n * typesize
 * (the size column is the total, as nccl-tests); busbw = algbw * (n-1)/n. In-place: recvbuf =
 * sendbuf + rank*recvcount for tempo (NCCL's layout); MPI_IN_PLACE for MPI (block r at the start of
 * sendbuf), as the backend says in inplace_rs_rank_block.
 */
#include "perf/common.h"

static size_t send_elems(const perf_ctx_t *ctx)
{
    return ctx->count * (size_t)ctx->nranks;
}

static void inplace_layout(const perf_ctx_t *ctx, void *buf, void **send_p, void **recv_p)
{
    size_t block = ctx->count * ctx->tsize;
    *send_p = buf;
    *recv_p = (char *)buf + (ctx->be->inplace_rs_rank_block ? (size_t)ctx->rank * block : 0);
}

static uint64_t input(const perf_ctx_t *ctx, size_t j)
{
    return perf_red_input(ctx, j);
}

/* Element j of rank r's block is element r*count + j of the full reduction. */
static uint64_t expected(const perf_ctx_t *ctx, size_t j)
{
    return perf_red_expected(ctx, (size_t)ctx->rank * ctx->count + j);
}

static void run(const perf_ctx_t *ctx, const void *send, void *recv, int nonblocking)
{
    ctx->be->reduce_scatter(send, recv, ctx->count, ctx->dtype, ctx->op, nonblocking);
}

static const perf_coll_t coll = {
    .name = "reduce_scatter",
    .tempo_name = "reduce_scatter",
    .has_op = 1,
    .has_root = 0,
    .has_inplace = 1,
    .min_ranks = 1,
    .elems_per_count = perf_nranks,
    .busbw_factor = perf_factor_n1_n,
    .send_elems = send_elems,
    .recv_elems = perf_count,
    .inplace_layout = inplace_layout,
    .input = input,
    .expected = expected,
    .run = run,
};

int main(int argc, char **argv)
{
    return perf_main(argc, argv, &coll);
}
