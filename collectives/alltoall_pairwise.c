/*
 * alltoall_pairwise.c — pairwise-exchange all-to-all: in round k (1..n-1) rank r sends block
 * (r+k) mod n to rank r+k and receives block (r-k) mod n from rank r-k; its own block is copied
 * locally. One message per peer; no intermediate hops. In place (sendbuf == recvbuf) the input is
 * first copied aside, since a block received in round k may still have to be sent in a later round.
 */
#include "config.h"

#include "collectives/coll.h"

tempo_status_t tempo__alltoall_pairwise_start(tempo__op_t *op);
tempo_status_t tempo__alltoall_pairwise_start(tempo__op_t *op)
{
    int n = op->comm->size, r = op->comm->rank;
    size_t bytes = op->count * tempo_dtype_size(op->dtype);
    int in_place = op->sendbuf == op->recvbuf;
    tempo__sched_t *s;
    TEMPO_CHECK(
        tempo__sched_create(op, in_place ? bytes * (size_t)n : 0, op->dtype, TEMPO_SUM, &s));
    const char *in = in_place ? s->scratch : op->sendbuf;
    char *out = op->recvbuf;
    tempo__sched_round(s);
    if (in_place) {
        tempo__sched_copy(s, s->scratch, op->sendbuf, bytes * (size_t)n);
    }
    tempo__sched_copy(s, out + (size_t)r * bytes, in + (size_t)r * bytes, bytes);
    for (int k = 1; k < n; k++) {
        int to = tempo__mod(r + k, n), from = tempo__mod(r - k, n);
        tempo__sched_round(s);
        tempo__sched_send(s, to, in + (size_t)to * bytes, bytes);
        tempo__sched_recv(s, from, out + (size_t)from * bytes, bytes);
    }
    return tempo__sched_ready(s);
}
