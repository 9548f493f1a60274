/*
 * reduce_tree.c — binomial-tree reduce (the broadcast tree run backwards): in round i a rank whose
 * relative rank has bit i set as its lowest sends its partial to the rank 2^i below; ranks whose
 * low i+1 bits are clear receive and reduce. The receiving (lower) rank's partial is the left
 * operand, so the tree's shape alone fixes the order of operations.
 *
 * As in broadcast_tree.c, the tree rides on a dissemination pattern: in round i every rank sends to
 * rank r - 2^i and receives from rank r + 2^i, empty messages where the pair is no edge of the
 * tree. A rank that has sent its partial therefore does not stop: it completes only when it has
 * heard from every rank, so that a root that rejected its call, or a rank that passed other
 * arguments, makes the call fail everywhere instead of completing on the ranks that only send
 * (core/check.c). The root's critical path is unchanged.
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
        int low = vr & (2 * mask - 1), from = tempo__mod(r + mask, n);
        if (low == 0 && vr + mask < n) {
            tempo__sched_recv_reduce(s, from, acc, acc, tmp, count, 0);
        } else {
            tempo__sched_recv(s, from, NULL, 0);
        }
        int gives = low == mask;
        tempo__sched_send(s, tempo__mod(r - mask, n), gives ? acc : NULL,
                          gives ? count * v.esize : 0);
    }
    if (r == root && op->redop == TEMPO_AVG) {
        tempo__sched_round(s);
        tempo__sched_avg(s, acc, count);
    }
    return tempo__coll_end(op, s, &v);
}
