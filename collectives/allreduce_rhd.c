/*
 * allreduce_rhd.c — Rabenseifner's all-reduce: recursive-halving reduce-scatter, then recursive-
 * doubling all-gather, over the largest power of two p <= n ranks. With n not a power of two, the
 * first 2(n-p) ranks pair up (fold.c): each even rank hands its whole vector to the odd rank above
 * it, which reduces and takes part; the even rank gets the result at the end. Bandwidth 2(n-1)/n of
 * the buffer like the ring, but 2 log2(p) messages instead of 2(n-1).
 *
 * Reductions always put the data of the lower rank on the left, so both partners of a pair compute
 * the same bits.
 */
#include "config.h"

#include "collectives/coll.h"

#define MAX_LEVELS 32

tempo_status_t tempo__allreduce_rhd_start(tempo__op_t *op);
tempo_status_t tempo__allreduce_rhd_start(tempo__op_t *op)
{
    int n = op->comm->size, r = op->comm->rank;
    int p = tempo__pow2_floor(n), rem = n - p;
    size_t count = op->count;
    tempo__sched_t *s;
    tempo__view_t v;
    void *tmp;
    TEMPO_CHECK(tempo__coll_begin(op, (count + 1) * tempo__work_esize(op->dtype), &s, &v, &tmp));
    char *buf = v.recvbuf;
    size_t es = v.esize;
    tempo__sched_round(s);
    tempo__sched_copy(s, buf, v.sendbuf, count * es);

    int vr = tempo__fold_in(s, r, rem, buf, tmp, count, count * es);
    size_t lo = 0, hi = count;
    size_t keep_lo[MAX_LEVELS], keep_hi[MAX_LEVELS], give_lo[MAX_LEVELS], give_hi[MAX_LEVELS];
    int partner[MAX_LEVELS], levels = 0;
    for (int mask = p / 2; mask >= 1; mask /= 2, levels++) {
        tempo__sched_round(s);
        if (vr < 0) {
            continue;
        }
        int pv = vr ^ mask;
        size_t mid = lo + (hi - lo) / 2;
        partner[levels] = tempo__fold_real_rank(pv, rem);
        if (vr < pv) {
            keep_lo[levels] = lo, keep_hi[levels] = mid, give_lo[levels] = mid,
            give_hi[levels] = hi;
        } else {
            keep_lo[levels] = mid, keep_hi[levels] = hi, give_lo[levels] = lo,
            give_hi[levels] = mid;
        }
        tempo__sched_send(s, partner[levels], buf + give_lo[levels] * es,
                          (give_hi[levels] - give_lo[levels]) * es);
        tempo__sched_recv_reduce(s, partner[levels], buf + keep_lo[levels] * es,
                                 buf + keep_lo[levels] * es, tmp, keep_hi[levels] - keep_lo[levels],
                                 pv < vr);
        lo = keep_lo[levels];
        hi = keep_hi[levels];
    }
    tempo__sched_round(s);
    if (vr >= 0 && op->redop == TEMPO_AVG) {
        tempo__sched_avg(s, buf + lo * es, hi - lo);
    }
    for (int l = levels - 1; l >= 0; l--) {
        if (l != levels - 1) {
            tempo__sched_round(s);
        }
        if (vr >= 0) {
            tempo__sched_send(s, partner[l], buf + keep_lo[l] * es, (keep_hi[l] - keep_lo[l]) * es);
            tempo__sched_recv(s, partner[l], buf + give_lo[l] * es, (give_hi[l] - give_lo[l]) * es);
        }
    }
    tempo__fold_out(s, r, rem, buf, count * es);
    return tempo__coll_end(op, s, &v);
}
