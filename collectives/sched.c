/*
 * sched.c — schedules: what a builder records, and the executor that runs it.
 *
 * A schedule is a list of rounds. When a round starts, its local actions (copy, reduce, convert,
 * average) run in the order they were added; then its receives are posted, then its sends. The
 * round ends when all its transfers have completed; the reductions of its SA_RECV_REDUCE actions
 * are then applied in the order they were added (never in arrival order), which keeps results
 * deterministic. Every transfer of round k of operation #s on communicator c is tagged (c, s, k),
 * so any number of operations can be in flight at once.
 *
 * A schedule never blocks: the executor returns TEMPO_INPROGRESS until the last round has ended.
 */
#include "config.h"

#include <stdio.h>

#include "collectives/coll.h"

#define MAX_ROUNDS 65535

static int is_transfer(int kind)
{
    return kind == SA_SEND || kind == SA_RECV || kind == SA_RECV_REDUCE;
}

static void sched_free(tempo__op_t *op)
{
    tempo__sched_t *s = op->priv;
    if (!s) {
        return;
    }
    tempo__world_t *w = op->comm->world;
    if (s->posted && s->cur < s->nrounds) {
        int end = s->cur + 1 < s->nrounds ? s->round_start[s->cur + 1] : s->nacts;
        for (int i = s->round_start[s->cur]; i < end; i++) {
            if (is_transfer(s->acts[i].kind) && !s->acts[i].x.complete) {
                tempo__tl_cancel(w, &s->acts[i].x);
            }
        }
    }
    tempo__free(s->acts);
    tempo__free(s->round_start);
    tempo__scratch_put(w, s->scratch, s->scratch_cap);
    tempo__free(s);
    op->priv = NULL;
}

static tempo_status_t run_local(tempo__sched_t *s, tempo__sact_t *a)
{
    switch (a->kind) {
    case SA_CALL: return a->fn(s, a->dst);
    case SA_COPY:
        if (a->dst != a->src && a->bytes) {
            memmove(a->dst, a->src, a->bytes);
        }
        break;
    case SA_REDUCE:
        if (a->tmp_first) {
            tempo__reduce3(a->dst, a->src, a->dst, a->count, s->dtype, s->redop);
        } else {
            tempo__reduce3(a->dst, a->dst, a->src, a->count, s->dtype, s->redop);
        }
        break;
    case SA_AVG: tempo__avg_finish(a->dst, a->count, s->dtype, s->nranks); break;
    case SA_HALF_TO_F32: tempo__half_to_f32(s->op->dtype, a->src, a->dst, a->count); break;
    case SA_F32_TO_HALF: tempo__f32_to_half(s->op->dtype, a->src, a->dst, a->count); break;
    default: break;
    }
    return TEMPO_OK;
}

static tempo_status_t sched_progress(tempo__op_t *op)
{
    tempo__sched_t *s = op->priv;
    struct tempo_comm *c = op->comm;
    tempo__world_t *w = c->world;
    while (s->cur < s->nrounds) {
        int first = s->round_start[s->cur];
        int end = s->cur + 1 < s->nrounds ? s->round_start[s->cur + 1] : s->nacts;
        if (!s->posted) {
            for (int i = s->local_next > first ? s->local_next : first; i < end; i++) {
                if (!is_transfer(s->acts[i].kind)) {
                    tempo_status_t st = run_local(s, &s->acts[i]);
                    if (st == TEMPO_INPROGRESS) { /* a call waits for something: resume here */
                        s->local_next = i;
                        return TEMPO_INPROGRESS;
                    }
                    if (st != TEMPO_OK) {
                        return tempo__op_fail(op, st, "%s", tempo__errmsg());
                    }
                }
            }
            s->local_next = 0;
            uint64_t tag =
                s->p2p_tag ? s->p2p_tag : tempo__tag_coll(c->ctx, op->seq, (unsigned)s->cur);
            const tempo__sig_t *sig = op->sig.valid ? &op->sig : NULL;
            for (int pass = 0; pass < 2; pass++) { /* receives first, then sends */
                for (int i = first; i < end; i++) {
                    tempo__sact_t *a = &s->acts[i];
                    a->x.sig = sig;
                    if (a->skip_empty && is_transfer(a->kind) && a->bytes == 0) {
                        a->x.complete = 1;
                        a->x.status = TEMPO_OK;
                        continue;
                    }
                    if (pass == 0 && a->kind == SA_RECV) {
                        tempo__tl_irecv(w, tempo__wrank(c, a->peer), tag, a->dst, a->bytes, &a->x);
                    } else if (pass == 0 && a->kind == SA_RECV_REDUCE) {
                        tempo__tl_irecv(w, tempo__wrank(c, a->peer), tag, a->tmp, a->bytes, &a->x);
                    } else if (pass == 1 && a->kind == SA_SEND) {
                        tempo__tl_isend(w, tempo__wrank(c, a->peer), tag, a->src, a->bytes, &a->x);
                    }
                }
            }
            s->posted = 1;
        }
        for (int i = first; i < end; i++) {
            tempo__sact_t *a = &s->acts[i];
            if (!is_transfer(a->kind)) {
                continue;
            }
            if (!a->x.complete) {
                op->wait_peer = a->peer;
                return TEMPO_INPROGRESS;
            }
            if (a->x.sig_differs) {
                return tempo__op_mismatch(op, a->peer, &a->x.remote_sig);
            }
            if (a->x.status != TEMPO_OK) {
                char why[TEMPO_ERRMSG_LEN];
                return tempo__op_fail(op, a->x.status, "%s",
                                      tempo__xfer_error(w, &a->x, why, sizeof(why)));
            }
        }
        for (int i = first; i < end; i++) {
            tempo__sact_t *a = &s->acts[i];
            if (a->kind == SA_RECV_REDUCE && a->count) {
                if (a->tmp_first) {
                    tempo__reduce3(a->dst, a->tmp, a->src, a->count, s->dtype, s->redop);
                } else {
                    tempo__reduce3(a->dst, a->src, a->tmp, a->count, s->dtype, s->redop);
                }
            }
        }
        s->cur++;
        s->posted = 0;
    }
    op->wait_peer = -1;
    return TEMPO_OK;
}

tempo_status_t tempo__sched_create(tempo__op_t *op, size_t scratch_bytes, tempo_dtype_t dtype,
                                   tempo_op_t redop, tempo__sched_t **sched_p)
{
    tempo__sched_t *s = tempo__calloc(1, sizeof(*s), "schedule");
    if (!s) {
        return TEMPO_ERR_NOMEM;
    }
    if (scratch_bytes) {
        s->scratch = tempo__scratch_get(op->comm->world, scratch_bytes, &s->scratch_cap);
        if (!s->scratch) {
            tempo__free(s);
            return TEMPO_ERR_NOMEM;
        }
    }
    s->op = op;
    s->dtype = dtype;
    s->redop = redop;
    s->nranks = op->comm->size;
    op->priv = s;
    op->progress = sched_progress;
    op->cleanup = sched_free;
    *sched_p = s;
    return TEMPO_OK;
}

void tempo__sched_round(tempo__sched_t *s)
{
    if (s->nrounds == s->rcap) {
        int cap = s->rcap ? 2 * s->rcap : 16;
        int *r = tempo__realloc(s->round_start, sizeof(int) * (size_t)cap, "schedule rounds");
        if (!r) {
            s->oom = 1;
            return;
        }
        s->round_start = r;
        s->rcap = cap;
    }
    s->round_start[s->nrounds++] = s->nacts;
}

static tempo__sact_t *add(tempo__sched_t *s, int kind)
{
    if (s->nrounds == 0) {
        tempo__sched_round(s);
    }
    if (s->nacts == s->acap) {
        int cap = s->acap ? 2 * s->acap : 16;
        tempo__sact_t *a = tempo__realloc(s->acts, sizeof(*a) * (size_t)cap, "schedule actions");
        if (!a) {
            s->oom = 1;
            return NULL;
        }
        s->acts = a;
        s->acap = cap;
    }
    tempo__sact_t *a = &s->acts[s->nacts++];
    memset(a, 0, sizeof(*a));
    a->kind = (uint8_t)kind;
    a->peer = -1;
    return a;
}

int tempo__sched_send(tempo__sched_t *s, int peer, const void *src, size_t bytes)
{
    tempo__sact_t *a = add(s, SA_SEND);
    if (!a) {
        return -1;
    }
    a->peer = peer;
    a->src = src;
    a->bytes = bytes;
    return s->nacts - 1;
}

int tempo__sched_recv(tempo__sched_t *s, int peer, void *dst, size_t bytes)
{
    tempo__sact_t *a = add(s, SA_RECV);
    if (!a) {
        return -1;
    }
    a->peer = peer;
    a->dst = dst;
    a->bytes = bytes;
    return s->nacts - 1;
}

int tempo__sched_call(tempo__sched_t *s, tempo__sched_fn_t fn, void *arg)
{
    tempo__sact_t *a = add(s, SA_CALL);
    if (!a) {
        return -1;
    }
    a->fn = fn;
    a->dst = arg;
    return s->nacts - 1;
}

void tempo__sched_recv_reduce(tempo__sched_t *s, int peer, void *dst, const void *src, void *tmp,
                              size_t count, int tmp_first)
{
    tempo__sact_t *a = add(s, SA_RECV_REDUCE);
    if (a) {
        a->peer = peer;
        a->dst = dst;
        a->src = src;
        a->tmp = tmp;
        a->count = count;
        a->bytes = count * tempo_dtype_size(s->dtype);
        a->tmp_first = (uint8_t)tmp_first;
    }
}

void tempo__sched_copy(tempo__sched_t *s, void *dst, const void *src, size_t bytes)
{
    tempo__sact_t *a = add(s, SA_COPY);
    if (a) {
        a->dst = dst;
        a->src = src;
        a->bytes = bytes;
    }
}

void tempo__sched_reduce(tempo__sched_t *s, void *dst, const void *src, size_t count, int src_first)
{
    tempo__sact_t *a = add(s, SA_REDUCE);
    if (a) {
        a->dst = dst;
        a->src = src;
        a->count = count;
        a->tmp_first = (uint8_t)src_first;
    }
}

void tempo__sched_avg(tempo__sched_t *s, void *dst, size_t count)
{
    tempo__sact_t *a = add(s, SA_AVG);
    if (a) {
        a->dst = dst;
        a->count = count;
    }
}

void tempo__sched_convert(tempo__sched_t *s, int to_f32, void *dst, const void *src, size_t count)
{
    tempo__sact_t *a = add(s, to_f32 ? SA_HALF_TO_F32 : SA_F32_TO_HALF);
    if (a) {
        a->dst = dst;
        a->src = src;
        a->count = count;
    }
}

void tempo__sched_close(tempo__sched_t *s)
{
    int n = s->nranks, r = s->op->comm->rank;
    for (int dist = 1; dist < n; dist *= 2) {
        tempo__sched_round(s);
        tempo__sched_send(s, tempo__mod(r + dist, n), NULL, 0);
        tempo__sched_recv(s, tempo__mod(r - dist, n), NULL, 0);
    }
}

tempo_status_t tempo__sched_ready(tempo__sched_t *s)
{
    if (s->oom) {
        return tempo__err(TEMPO_ERR_NOMEM, "out of memory while building a schedule");
    }
    if (s->nrounds > MAX_ROUNDS) {
        return tempo__err(TEMPO_ERR_INTERNAL, "schedule of %d rounds exceeds the tag space",
                          s->nrounds);
    }
    return TEMPO_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Views: fp16/bf16 reductions run in fp32 on a work buffer                                       */
/* ---------------------------------------------------------------------------------------------- */

static int is_reduction(int coll)
{
    return coll == TEMPO__COLL_ALLREDUCE || coll == TEMPO__COLL_REDUCE_SCATTER ||
           coll == TEMPO__COLL_REDUCE;
}

/* Elements of the input and output of op (per rank). */
static size_t in_count(const tempo__op_t *op)
{
    return op->coll == TEMPO__COLL_REDUCE_SCATTER ? op->count * (size_t)op->comm->size : op->count;
}

tempo_status_t tempo__coll_begin(tempo__op_t *op, size_t extra_scratch, tempo__sched_t **sched_p,
                                 tempo__view_t *view_p, void **scratch_p)
{
    int half = is_reduction(op->coll) && tempo__dtype_is_half(op->dtype);
    size_t work = half ? TEMPO_ALIGN_UP(in_count(op) * 4, TEMPO_CACHELINE) : 0;
    size_t stride = op->stride ? op->stride : op->count;
    tempo__sched_t *s;
    TEMPO_CHECK(tempo__sched_create(op, work + extra_scratch, half ? TEMPO_FLOAT32 : op->dtype,
                                    op->redop, &s));
    if (half) {
        float *wbuf = s->scratch;
        tempo__sched_round(s);
        if (op->coll == TEMPO__COLL_REDUCE_SCATTER && stride != op->count) {
            /* Rank blocks of a chunk sit stride elements apart: gather them contiguously. */
            size_t es = tempo_dtype_size(op->dtype);
            for (int q = 0; q < op->comm->size; q++) {
                tempo__sched_convert(s, 1, wbuf + (size_t)q * op->count,
                                     (const char *)op->sendbuf + (size_t)q * stride * es,
                                     op->count);
            }
        } else {
            tempo__sched_convert(s, 1, wbuf, op->sendbuf, in_count(op));
        }
        view_p->sendbuf = wbuf;
        view_p->recvbuf = op->coll == TEMPO__COLL_REDUCE_SCATTER
                              ? wbuf + op->count * (size_t)op->comm->rank
                              : wbuf;
        view_p->dtype = TEMPO_FLOAT32;
        view_p->esize = 4;
        view_p->stride = op->count;
    } else {
        view_p->sendbuf = op->sendbuf;
        view_p->recvbuf = op->recvbuf;
        view_p->dtype = op->dtype;
        view_p->esize = tempo_dtype_size(op->dtype);
        view_p->stride = stride;
    }
    *scratch_p = extra_scratch ? (char *)s->scratch + work : NULL;
    *sched_p = s;
    return TEMPO_OK;
}

tempo_status_t tempo__coll_end(tempo__op_t *op, tempo__sched_t *s, const tempo__view_t *v)
{
    if (v->dtype != op->dtype) {
        int out = op->coll != TEMPO__COLL_REDUCE || op->comm->rank == op->root;
        if (out) {
            tempo__sched_round(s);
            tempo__sched_convert(s, 0, op->recvbuf, v->recvbuf, op->count);
        }
    }
    return tempo__sched_ready(s);
}
