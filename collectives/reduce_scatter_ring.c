/*
 * reduce_scatter_ring.c — ring reduce-scatter: n-1 rounds; in round k rank r sends its partial sum
 * of block (r-k-1) mod n to the right and receives the left neighbour's partial of block (r-k-2)
 * mod n, which it adds to its own input block. After n-1 rounds the partial received is block r,
 * and adding the own block gives the result, written straight into recvbuf.
 *
 * Partials travel in an accumulator (one block) so the input stays untouched. Bandwidth (n-1)/n.
 */
#include "config.h"

#include "collectives/coll.h"

tempo_status_t tempo__reduce_scatter_ring_start(tempo__op_t *op);
tempo_status_t tempo__reduce_scatter_ring_start(tempo__op_t *op)
{
    int n = op->comm->size, r = op->comm->rank;
    size_t rc = op->count;
    size_t blk = TEMPO_ALIGN_UP(rc * tempo__work_esize(op->dtype), TEMPO_CACHELINE);
    tempo__sched_t *s;
    tempo__view_t v;
    void *scratch;
    TEMPO_CHECK(tempo__coll_begin(op, 2 * blk + TEMPO_CACHELINE, &s, &v, &scratch));
    size_t es = v.esize, bytes = rc * es, sbytes = v.stride * es; /* block, block distance */
    const char *in = v.sendbuf;
    char *acc = scratch, *tmp = (char *)scratch + blk;
    int right = tempo__mod(r + 1, n), left = tempo__mod(r - 1, n);
    if (n == 1) {
        tempo__sched_round(s);
        tempo__sched_copy(s, v.recvbuf, in, bytes);
    }
    for (int k = 0; k < n - 1; k++) {
        int send_blk = tempo__mod(r - k - 1, n), recv_blk = tempo__mod(r - k - 2, n);
        int last = k == n - 2;
        tempo__sched_round(s);
        tempo__sched_send(s, right, k == 0 ? in + (size_t)send_blk * sbytes : acc, bytes);
        /* The result (last round) goes to recvbuf: the block received is then block r. */
        tempo__sched_recv_reduce(s, left, last ? v.recvbuf : acc, in + (size_t)recv_blk * sbytes,
                                 tmp, rc, 1);
    }
    if (op->redop == TEMPO_AVG) {
        tempo__sched_round(s);
        tempo__sched_avg(s, v.recvbuf, rc);
    }
    return tempo__coll_end(op, s, &v);
}
