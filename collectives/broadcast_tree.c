/*
 * broadcast_tree.c — binomial-tree broadcast: in round i the ranks that already hold the data
 * (relative rank < 2^i) send it to relative rank + 2^i. ceil(log2 n) rounds; the whole buffer per
 * message, so it suits small and medium buffers.
 */
#include "config.h"

#include "collectives/coll.h"

tempo_status_t tempo__broadcast_tree_start(tempo__op_t *op);
tempo_status_t tempo__broadcast_tree_start(tempo__op_t *op)
{
    int n = op->comm->size, r = op->comm->rank, root = op->root;
    int vr = tempo__mod(r - root, n);
    size_t bytes = op->count * tempo_dtype_size(op->dtype);
    tempo__sched_t *s;
    TEMPO_CHECK(tempo__sched_create(op, 0, op->dtype, TEMPO_SUM, &s));
    tempo__sched_round(s);
    if (r == root) {
        tempo__sched_copy(s, op->recvbuf, op->sendbuf, bytes);
    }
    for (int mask = 1; mask < n; mask *= 2) {
        tempo__sched_round(s);
        if (vr < mask && vr + mask < n) {
            tempo__sched_send(s, tempo__mod(vr + mask + root, n), op->recvbuf, bytes);
        } else if (vr >= mask && vr < 2 * mask) {
            tempo__sched_recv(s, tempo__mod(vr - mask + root, n), op->recvbuf, bytes);
        }
    }
    return tempo__sched_ready(s);
}
