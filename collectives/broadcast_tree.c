/*
 * broadcast_tree.c — binomial-tree broadcast: in round i the ranks that already hold the data
 * (relative rank < 2^i) send it to relative rank + 2^i. ceil(log2 n) rounds; the whole buffer per
 * message, so it suits small and medium buffers.
 *
 * The tree rides on the pattern of a dissemination barrier: in round i every rank sends to rank
 * r + 2^i and receives from rank r - 2^i (shifting by the root does not change these pairs), and
 * the pairs that are not the tree's edges exchange empty messages. Every message carries the
 * call's signature, so after the last round every rank has heard from every other, the root
 * included (it used to only send): a rank that passed another root or count makes the call fail
 * on every rank, not only on those that receive from it (core/check.c). The critical path stays
 * ceil(log2 n) message latencies; only the root and the inner ranks now wait that long too.
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
        int gets = vr >= mask && vr < 2 * mask, gives = vr < mask && vr + mask < n;
        tempo__sched_recv(s, tempo__mod(r - mask, n), gets ? op->recvbuf : NULL, gets ? bytes : 0);
        tempo__sched_send(s, tempo__mod(r + mask, n), gives ? op->recvbuf : NULL,
                          gives ? bytes : 0);
    }
    return tempo__sched_ready(s);
}
