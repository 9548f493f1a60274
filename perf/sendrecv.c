/*
 * perf/sendrecv.c — sendrecv_perf[_mpi]: a ring shift with tempo_isend + tempo_irecv /
 * MPI_Sendrecv.
 *
 * Each rank sends count elements to (rank+1)%n and receives count elements from (rank-1+n)%n.
 * S = count * typesize; busbw = algbw. There is no in-place form: tempo.h forbids touching a send
 * buffer while a receive into it is pending (MPI_Sendrecv forbids aliasing too), so the in-place
 * columns print N/A. Needs at least 2 ranks (tempo's peer must differ from the caller).
 */
#include "perf/common.h"

static uint64_t input(const perf_ctx_t *ctx, size_t j)
{
    return perf_pattern(ctx, ctx->rank, j);
}

static uint64_t expected(const perf_ctx_t *ctx, size_t j)
{
    return perf_pattern(ctx, (ctx->rank - 1 + ctx->nranks) % ctx->nranks, j);
}

static void run(const perf_ctx_t *ctx, const void *send, void *recv, int nonblocking)
{
    int n = ctx->nranks;
    ctx->be->sendrecv(send, recv, ctx->count, ctx->dtype, (ctx->rank + 1) % n,
                      (ctx->rank - 1 + n) % n, nonblocking);
}

static const perf_coll_t coll = {
    .name = "sendrecv",
    .tempo_name = "sendrecv",
    .has_op = 0,
    .has_root = 0,
    .has_inplace = 0,
    .min_ranks = 2,
    .elems_per_count = perf_one,
    .busbw_factor = perf_factor_one,
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
