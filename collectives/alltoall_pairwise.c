/*
 * alltoall_pairwise.c — pairwise-exchange all-to-all: in round k (1..n-1) rank r sends block
 * (r+k) mod n to rank r+k and receives block (r-k) mod n from rank r-k; its own block is copied
 * locally. One message per peer; no intermediate hops.
 */
#include "config.h"

#include "collectives/coll.h"

tempo_status_t tempo__alltoall_pairwise_start(tempo__op_t *op);
tempo_status_t tempo__alltoall_pairwise_start(tempo__op_t *op)
{
    int n = op->comm->size, r = op->comm->rank;
    size_t bytes = op->count * tempo_dtype_size(op->dtype);
    tempo__sched_t *s;
    TEMPO_CHECK(tempo__sched_create(op, 0, op->dtype, TEMPO_SUM, &s));
    const char *in = op->sendbuf;
    char *out = op->recvbuf;
    tempo__sched_round(s);
    tempo__sched_copy(s, out + (size_t)r * bytes, in + (size_t)r * bytes, bytes);
    for (int k = 1; k < n; k++) {
        int to = tempo__mod(r + k, n), from = tempo__mod(r - k, n);
        tempo__sched_round(s);
        tempo__sched_send(s, to, in + (size_t)to * bytes, bytes);
        tempo__sched_recv(s, from, out + (size_t)from * bytes, bytes);
    }
    return tempo__sched_ready(s);
}
