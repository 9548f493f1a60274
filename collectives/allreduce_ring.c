/*
 * allreduce_ring.c — ring all-reduce: a ring reduce-scatter (n-1 rounds) followed by a ring
 * all-gather (n-1 rounds). Each rank sends and receives 2(n-1)/n of the buffer: bandwidth-optimal,
 * latency 2(n-1) messages.
 *
 * Block c is reduced along the ring starting at rank c+1 and ends fully reduced on rank c-1... more
 * precisely rank r owns block (r+1) mod n after the reduce-scatter; for TEMPO_AVG the owner divides
 * its block before the all-gather, so every rank receives the same bits.
 */
#include "config.h"

#include "collectives/coll.h"

tempo_status_t tempo__allreduce_ring_start(tempo__op_t *op);
tempo_status_t tempo__allreduce_ring_start(tempo__op_t *op)
{
    int n = op->comm->size, r = op->comm->rank;
    size_t maxblk = op->count / (size_t)n + 1;
    tempo__sched_t *s;
    tempo__view_t v;
    void *tmp;
    TEMPO_CHECK(tempo__coll_begin(op, maxblk * tempo__work_esize(op->dtype), &s, &v, &tmp));
    char *buf = v.recvbuf;
    size_t es = v.esize;
    tempo__sched_round(s);
    tempo__sched_copy(s, buf, v.sendbuf, op->count * es);
    int right = tempo__mod(r + 1, n), left = tempo__mod(r - 1, n);
    for (int step = 0; step < n - 1; step++) {
        size_t so, sc, ro, rc;
        tempo__block(op->count, n, tempo__mod(r - step, n), &so, &sc);
        tempo__block(op->count, n, tempo__mod(r - step - 1, n), &ro, &rc);
        tempo__sched_round(s);
        tempo__sched_send(s, right, buf + so * es, sc * es);
        tempo__sched_recv_reduce(s, left, buf + ro * es, buf + ro * es, tmp, rc, 1);
    }
    for (int step = 0; step < n - 1; step++) {
        size_t so, sc, ro, rc;
        tempo__block(op->count, n, tempo__mod(r + 1 - step, n), &so, &sc);
        tempo__block(op->count, n, tempo__mod(r - step, n), &ro, &rc);
        tempo__sched_round(s);
        if (step == 0 && op->redop == TEMPO_AVG) {
            tempo__sched_avg(s, buf + so * es, sc);
        }
        tempo__sched_send(s, right, buf + so * es, sc * es);
        tempo__sched_recv(s, left, buf + ro * es, rc * es);
    }
    if (n == 1 && op->redop == TEMPO_AVG) {
        tempo__sched_avg(s, buf, op->count);
    }
    return tempo__coll_end(op, s, &v);
}
