/*
 * perf/broadcast.c — broadcast_perf[_mpi]: tempo_broadcast / MPI_Bcast.
 *
 * S = count * typesize; busbw = algbw. Only the root's send buffer is read (and filled); every
 * rank's receive buffer is checked, the root's too. In-place: sendbuf == recvbuf.
 */
#include "perf/common.h"

static size_t send_elems(const perf_ctx_t *ctx)
{
    return ctx->rank == ctx->root ? ctx->count : 0;
}

static uint64_t input(const perf_ctx_t *ctx, size_t j)
{
    return perf_pattern(ctx, ctx->root, j);
}

static uint64_t expected(const perf_ctx_t *ctx, size_t j)
{
    return perf_pattern(ctx, ctx->root, j);
}

static void run(const perf_ctx_t *ctx, const void *send, void *recv, int nonblocking)
{
    ctx->be->broadcast(send, recv, ctx->count, ctx->dtype, ctx->root, nonblocking);
}

static const perf_coll_t coll = {
    .name = "broadcast",
    .tempo_name = "broadcast",
    .has_op = 0,
    .has_root = 1,
    .has_inplace = 1,
    .min_ranks = 1,
    .elems_per_count = perf_one,
    .busbw_factor = perf_factor_one,
    .send_elems = send_elems,
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
