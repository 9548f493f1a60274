/*
 * broadcast_pipeline.c — pipelined chain broadcast for large buffers: the buffer is cut into
 * segments that flow root -> root+1 -> ... -> root+n-1; in round t a rank receives segment t-d+1
 * and forwards segment t-d (d = its distance from the root). nseg + n - 2 rounds; each link carries
 * the buffer once, so time approaches bytes/bandwidth when nseg >> n.
 *
 * The chain ends with a dissemination barrier (tempo__sched_close): the root and the ranks near it
 * would otherwise complete without hearing from the ranks further down, and a difference in the
 * call's arguments there would leave them with TEMPO_OK (core/check.c). Its ceil(log2 n) empty
 * messages cost little next to the segments.
 */
#include "config.h"

#include "collectives/coll.h"

#define SEGMENT (256 * 1024)

tempo_status_t tempo__broadcast_pipeline_start(tempo__op_t *op);
tempo_status_t tempo__broadcast_pipeline_start(tempo__op_t *op)
{
    int n = op->comm->size, r = op->comm->rank, root = op->root;
    int d = tempo__mod(r - root, n);
    size_t es = tempo_dtype_size(op->dtype);
    size_t bytes = op->count * es;
    size_t seg = TEMPO_MAX((size_t)SEGMENT / es, (op->count + 16383) / 16384) * es;
    size_t nseg = bytes ? (bytes + seg - 1) / seg : 1;
    tempo__sched_t *s;
    TEMPO_CHECK(tempo__sched_create(op, 0, op->dtype, TEMPO_SUM, &s));
    char *buf = op->recvbuf;
    tempo__sched_round(s);
    if (r == root) {
        tempo__sched_copy(s, buf, op->sendbuf, bytes);
    }
    int next = tempo__mod(r + 1, n), prev = tempo__mod(r - 1, n);
    for (size_t t = 0; n > 1 && t < nseg + (size_t)n - 2; t++) {
        tempo__sched_round(s);
        long rs = (long)t - d + 1, ss = (long)t - d;
        if (d >= 1 && rs >= 0 && (size_t)rs < nseg) {
            size_t off = (size_t)rs * seg;
            tempo__sched_recv(s, prev, buf + off, TEMPO_MIN(seg, bytes - off));
        }
        if (d <= n - 2 && ss >= 0 && (size_t)ss < nseg) {
            size_t off = (size_t)ss * seg;
            tempo__sched_send(s, next, buf + off, TEMPO_MIN(seg, bytes - off));
        }
    }
    tempo__sched_close(s);
    return tempo__sched_ready(s);
}
