/*
 * allreduce_rd.c — recursive-doubling all-reduce, the latency-optimised algorithm for small
 * messages: log2(p) rounds in which partners exchange their whole vectors and reduce. Ranks beyond
 * the largest power of two are folded in first and get the result last (fold.c).
 * Moves log2(p) times the buffer, so it is only chosen for small buffers.
 */
#include "config.h"

#include "collectives/coll.h"

tempo_status_t tempo__allreduce_rd_start(tempo__op_t *op);
tempo_status_t tempo__allreduce_rd_start(tempo__op_t *op)
{
    int n = op->comm->size, r = op->comm->rank;
    int p = tempo__pow2_floor(n), rem = n - p;
    size_t count = op->count;
    tempo__sched_t *s;
    tempo__view_t v;
    void *tmp;
    TEMPO_CHECK(tempo__coll_begin(op, (count + 1) * tempo__work_esize(op->dtype), &s, &v, &tmp));
    char *buf = v.recvbuf;
    size_t bytes = count * v.esize;
    tempo__sched_round(s);
    tempo__sched_copy(s, buf, v.sendbuf, bytes);
    int vr = tempo__fold_in(s, r, rem, buf, tmp, count, bytes);
    for (int mask = 1; mask < p; mask *= 2) {
        tempo__sched_round(s);
        if (vr >= 0) {
            int pv = vr ^ mask;
            int peer = tempo__fold_real_rank(pv, rem);
            tempo__sched_send(s, peer, buf, bytes);
            tempo__sched_recv_reduce(s, peer, buf, buf, tmp, count, pv < vr);
        }
    }
    if (op->redop == TEMPO_AVG) {
        tempo__sched_round(s);
        if (vr >= 0) {
            tempo__sched_avg(s, buf, count);
        }
    }
    tempo__fold_out(s, r, rem, buf, bytes);
    return tempo__coll_end(op, s, &v);
}
