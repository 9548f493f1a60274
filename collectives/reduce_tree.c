/*
 * reduce_tree.c — binomial-tree reduce (the broadcast tree run backwards): in round i a rank whose
 * relative rank has bit i set sends its partial to the rank 2^i below and stops; the others receive
 * and reduce. The receiving (lower) rank's partial is the left operand, so the tree's shape alone
 * fixes the order of operations.
 */
#include "config.h"

#include "collectives/coll.h"

tempo_status_t tempo__reduce_tree_start(tempo__op_t *op);
tempo_status_t tempo__reduce_tree_start(tempo__op_t *op)
{
    int n = op->comm->size, r = op->comm->rank, root = op->root;
    int vr = tempo__mod(r - root, n);
    size_t count = op->count;
    size_t wes = tempo__work_esize(op->dtype);
    size_t abytes = TEMPO_ALIGN_UP(count * wes, TEMPO_CACHELINE);
    tempo__sched_t *s;
    tempo__view_t v;
    void *scratch;
    /* Non-roots accumulate in scratch; the root in recvbuf. */
    TEMPO_CHECK(tempo__coll_begin(op, 2 * abytes + TEMPO_CACHELINE, &s, &v, &scratch));
    char *acc = r == root ? v.recvbuf : scratch;
    char *tmp = (char *)scratch + abytes;
    if (tempo__dtype_is_half(op->dtype)) {
        acc = v.recvbuf; /* the fp32 work buffer, in place */
    }
    tempo__sched_round(s);
    tempo__sched_copy(s, acc, v.sendbuf, count * v.esize);
    for (int mask = 1; mask < n; mask *= 2) {
        tempo__sched_round(s);
        if (vr & mask) {
            tempo__sched_send(s, tempo__mod(vr - mask + root, n), acc, count * v.esize);
            break;
        }
        if (vr + mask < n) {
            tempo__sched_recv_reduce(s, tempo__mod(vr + mask + root, n), acc, acc, tmp, count, 0);
        }
    }
    if (r == root && op->redop == TEMPO_AVG) {
        tempo__sched_round(s);
        tempo__sched_avg(s, acc, count);
    }
    return tempo__coll_end(op, s, &v);
}
