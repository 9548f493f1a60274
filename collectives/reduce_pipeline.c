/*
 * reduce_pipeline.c — pipelined chain reduce for large buffers: segments flow from the rank
 * farthest from the root towards it; each rank adds its own segment (left operand) to the partial
 * it receives and passes it on. In round t a rank at distance e = n-1-d from the tail receives
 * segment t-e+1 and sends segment t-e. Each link carries the buffer once.
 *
 * The chain ends with a dissemination barrier (tempo__sched_close), so that the ranks that only
 * pass partials on complete only when every rank, the root included, has made the same call
 * (core/check.c).
 */
#include "config.h"

#include "collectives/coll.h"

#define SEGMENT (256 * 1024)

tempo_status_t tempo__reduce_pipeline_start(tempo__op_t *op);
tempo_status_t tempo__reduce_pipeline_start(tempo__op_t *op)
{
    int n = op->comm->size, r = op->comm->rank, root = op->root;
    int d = tempo__mod(r - root, n); /* distance from the root along the chain */
    int e = n - 1 - d;               /* distance from the tail */
    size_t count = op->count;
    size_t wes = tempo__work_esize(op->dtype);
    size_t segc = TEMPO_MAX((size_t)SEGMENT / wes, (count + 16383) / 16384);
    size_t nseg = count ? (count + segc - 1) / segc : 1;
    size_t abytes = TEMPO_ALIGN_UP(count * wes, TEMPO_CACHELINE);
    tempo__sched_t *s;
    tempo__view_t v;
    void *scratch;
    TEMPO_CHECK(
        tempo__coll_begin(op, abytes + 2 * TEMPO_ALIGN_UP(segc * wes, 64) + 64, &s, &v, &scratch));
    char *acc = r == root ? v.recvbuf : scratch;
    if (tempo__dtype_is_half(op->dtype)) {
        acc = v.recvbuf;
    }
    char *tmp[2] = {(char *)scratch + abytes,
                    (char *)scratch + abytes + TEMPO_ALIGN_UP(segc * wes, 64)};
    const char *in = v.sendbuf;
    size_t es = v.esize;
    int to_root = tempo__mod(r - 1, n), from_tail = tempo__mod(r + 1, n);
    if (n == 1) {
        tempo__sched_round(s);
        tempo__sched_copy(s, acc, in, count * es);
    }
    for (size_t t = 0; n > 1 && t < nseg + (size_t)n - 2; t++) {
        tempo__sched_round(s);
        long rs = (long)t - e + 1, ss = (long)t - e;
        if (e >= 1 && rs >= 0 && (size_t)rs < nseg) {
            size_t off = (size_t)rs * segc, c = TEMPO_MIN(segc, count - off);
            tempo__sched_recv_reduce(s, from_tail, acc + off * es, in + off * es, tmp[rs & 1], c,
                                     0);
        }
        if (d >= 1 && ss >= 0 && (size_t)ss < nseg) {
            size_t off = (size_t)ss * segc, c = TEMPO_MIN(segc, count - off);
            /* The tail sends its input directly; the others their partial. */
            tempo__sched_send(s, to_root, (e == 0 ? in : acc) + off * es, c * es);
        }
    }
    tempo__sched_close(s); /* before the root's local rounds, which only it has */
    if (r == root && op->redop == TEMPO_AVG) {
        tempo__sched_round(s);
        tempo__sched_avg(s, acc, count);
    }
    return tempo__coll_end(op, s, &v);
}
