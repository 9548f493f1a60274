/*
 * fold.c — folding a rank count that is not a power of two, for the recursive algorithms (rd, rhd):
 * with p the largest power of two <= n and rem = n - p, each even rank below 2*rem hands its whole
 * vector to the odd rank above it, which reduces (lower rank's data on the left) and takes part as
 * virtual rank r/2; ranks from 2*rem up take part as r - rem. At the end every odd rank below 2*rem
 * returns the result to its even partner.
 *
 * Every rank adds the fold and unfold rounds, empty when it takes no part, because round numbers
 * are part of the tags and must agree between partners.
 */
#include "config.h"

#include "collectives/coll.h"

int tempo__fold_in(tempo__sched_t *s, int r, int rem, void *buf, void *tmp, size_t count,
                   size_t bytes)
{
    if (rem > 0) {
        tempo__sched_round(s);
    }
    if (r >= 2 * rem) {
        return r - rem;
    }
    if (r % 2 == 0) {
        tempo__sched_send(s, r + 1, buf, bytes);
        return -1;
    }
    tempo__sched_recv_reduce(s, r - 1, buf, buf, tmp, count, 1);
    return r / 2;
}

void tempo__fold_out(tempo__sched_t *s, int r, int rem, void *buf, size_t bytes)
{
    if (rem > 0) {
        tempo__sched_round(s);
    }
    if (r < 2 * rem) {
        if (r % 2 == 0) {
            tempo__sched_recv(s, r + 1, buf, bytes);
        } else {
            tempo__sched_send(s, r - 1, buf, bytes);
        }
    }
}
