/*
 * barrier_dissemination.c — dissemination barrier: in round k every rank signals rank r+2^k and
 * waits for rank r-2^k (empty messages). After ceil(log2 n) rounds every rank has heard, directly
 * or transitively, from every other, so none leaves before all have entered.
 */
#include "config.h"

#include "collectives/coll.h"

tempo_status_t tempo__barrier_dissemination_start(tempo__op_t *op);
tempo_status_t tempo__barrier_dissemination_start(tempo__op_t *op)
{
    tempo__sched_t *s;
    TEMPO_CHECK(tempo__sched_create(op, 0, TEMPO_UINT8, TEMPO_SUM, &s));
    tempo__sched_close(s);
    return tempo__sched_ready(s);
}
