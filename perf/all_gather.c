/*
 * perf/all_gather.c — all_gather_perf[_mpi]: tempo_allgather / MPI_Allgather.
 *
 * count is the per-rank sendcount; every rank receives count * n elements. S = count * n * typesize
 * (the size column is the total, as nccl-tests); busbw = algbw * (n-1)/n. In-place: sendbuf =
 * recvbuf + rank*count (as NCCL; MPI_IN_PLACE reads the same place).
 */
#include "perf/common.h"

static void inplace_layout(const perf_ctx_t *ctx, void *buf, void **send_p, void **recv_p)
{
    *recv_p = buf;
    *send_p = (char *)buf + (size_t)ctx->rank * ctx->count * ctx->tsize;
}

static uint64_t input(const perf_ctx_t *ctx, size_t j)
{
    return perf_pattern(ctx, ctx->rank, j);
}

/* Block s of the output is rank s's input (recv_elems is 0 when count is 0, so count > 0 here). */
static uint64_t expected(const perf_ctx_t *ctx, size_t j)
{
    return perf_pattern(ctx, (int)(j / ctx->count), j % ctx->count);
}

static void run(const perf_ctx_t *ctx, const void *send, void *recv, int nonblocking)
{
    ctx->be->allgather(send, recv, ctx->count, ctx->dtype, nonblocking);
}

static const perf_coll_t coll = {
    .name = "all_gather",
    .tempo_name = "allgather",
    .has_op = 0,
    .has_root = 0,
    .has_inplace = 1,
    .min_ranks = 1,
    .elems_per_count = perf_nranks,
    .busbw_factor = perf_factor_n1_n,
    .send_elems = perf_count,
    .recv_elems = perf_count_x_nranks,
    .inplace_layout = inplace_layout,
    .input = input,
    .expected = expected,
    .run = run,
};

int main(int argc, char **argv)
{
    return perf_main(argc, argv, &coll);
}
