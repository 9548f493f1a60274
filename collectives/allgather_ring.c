/*
 * allgather_ring.c — ring all-gather: the own block is placed in recvbuf, then in n-1 rounds every
 * rank forwards the block it received last to its right neighbour. Bandwidth (n-1)/n.
 */
#include "config.h"

#include "collectives/coll.h"

tempo_status_t tempo__allgather_ring_start(tempo__op_t *op);
tempo_status_t tempo__allgather_ring_start(tempo__op_t *op)
{
    int n = op->comm->size, r = op->comm->rank;
    size_t es = tempo_dtype_size(op->dtype), bytes = op->count * es;
    size_t sb = (op->stride ? op->stride : op->count) * es; /* distance of rank blocks in recvbuf */
    tempo__sched_t *s;
    TEMPO_CHECK(tempo__sched_create(op, 0, op->dtype, TEMPO_SUM, &s));
    char *out = op->recvbuf;
    tempo__sched_round(s);
    tempo__sched_copy(s, out + (size_t)r * sb, op->sendbuf, bytes);
    int right = tempo__mod(r + 1, n), left = tempo__mod(r - 1, n);
    for (int k = 0; k < n - 1; k++) {
        tempo__sched_round(s);
        tempo__sched_send(s, right, out + (size_t)tempo__mod(r - k, n) * sb, bytes);
        tempo__sched_recv(s, left, out + (size_t)tempo__mod(r - k - 1, n) * sb, bytes);
    }
    return tempo__sched_ready(s);
}
