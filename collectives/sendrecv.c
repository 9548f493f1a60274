/*
 * sendrecv.c — point-to-point send and receive as one-action schedules with the tag
 * (point-to-point, context, user tag), matched in order per pair and tag by the transport.
 */
#include "config.h"

#include "collectives/coll.h"

tempo_status_t tempo__p2p_start(tempo__op_t *op);
tempo_status_t tempo__p2p_start(tempo__op_t *op)
{
    size_t bytes = op->count * tempo_dtype_size(op->dtype);
    tempo__sched_t *s;
    TEMPO_CHECK(tempo__sched_create(op, 0, op->dtype, TEMPO_SUM, &s));
    s->p2p_tag = tempo__tag_p2p(op->comm->ctx, op->ptag);
    tempo__sched_round(s);
    if (op->coll == TEMPO__COLL_SEND) {
        tempo__sched_send(s, op->root, op->sendbuf, bytes);
    } else {
        tempo__sched_recv(s, op->root, op->recvbuf, bytes);
    }
    return tempo__sched_ready(s);
}
