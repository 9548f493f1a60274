/*
 * world.c — world and communicator objects (see world.h): creation from the rendezvous table,
 * failure recording, peer descriptions, teardown with the last communicator.
 */
#include "config.h"

#include "core/world.h"
#include "core/auth.h"
#include "core/flight.h"
#include "core/log.h"
#include "core/trace.h"

#include <stdio.h>
#include <stdlib.h>

tempo_status_t tempo__world_create(int rank, int size, const tempo__peer_info_t *table,
                                   double timeout_s, tempo__world_t **world_p)
{
    tempo__world_t *w = tempo__calloc(1, sizeof(*w), "world");
    if (!w) {
        return TEMPO_ERR_NOMEM;
    }
    w->peers = tempo__calloc((size_t)size, sizeof(*w->peers), "peer table");
    if (!w->peers) {
        tempo__free(w);
        return TEMPO_ERR_NOMEM;
    }
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cv, NULL);
    tempo__list_init(&w->pollers);
    w->rank = rank;
    w->size = size;
    w->timeout_s = timeout_s;
    w->job_uuid = table[0].uuid;
    w->job_tag = table[0].tag;
    tempo__ctx_set_used(w, TEMPO_CTX_MAX, 1);
    tempo__list_init(&w->closing);
    tempo__list_init(&w->active);
    tempo__list_init(&w->parked);
    tempo__list_init(&w->free_ops);
    tempo__list_init(&w->comms);
    tempo__list_init(&w->notes);
    tempo__list_init(&w->held_notes);
    for (int r = 0; r < size; r++) {
        w->peers[r].info = table[r];
        w->peers[r].info.hostname[sizeof(w->peers[r].info.hostname) - 1] = '\0';
        w->peers[r].local = table[r].host_id == table[rank].host_id;
        w->nlocal += w->peers[r].local;
    }
    uint32_t same_machine = 0;
    for (int r = 0; r < size; r++) {
        same_machine += table[r].machine_id == table[rank].machine_id;
    }
    w->oversubscribed = table[rank].ncpus > 0 && same_machine > table[rank].ncpus;
    /* Spinning in a wait only steals the CPU that the ranks we wait for need; with no shared-memory
     * peer every message arrives on a socket, which wakes a sleeping wait at once. */
    w->sleep_at_once = w->oversubscribed && w->nlocal == 1;
    if (rank == 0 && w->nlocal < size && tempo__auth_key() == 0) {
        TEMPO_WARN(TEMPO_SUB_INIT,
                   "THIS JOB IS NOT AUTHENTICATED: %d of its %d ranks are on other hosts and no job "
                   "key is set, so anyone who can reach the rendezvous address can join it, read "
                   "what it sends and inject data; set the same TEMPO_AUTH_KEY (or "
                   "TEMPO_AUTH_KEY_FILE) on every rank (README: Security)",
                   size - w->nlocal, size);
    }
    tempo__flight_init(w);
    *world_p = w;
    return TEMPO_OK;
}

void tempo__world_destroy(tempo__world_t *w, int graceful)
{
    if (!w) {
        return;
    }
    tempo__engine_thread_stop(w);
    tempo__trace_close(w);
    if (w->tl_close) {
        w->tl_close(w, graceful);
    }
    for (size_t i = 0; i < TEMPO_ARRAY_SIZE(w->scratch); i++) {
        tempo__free_aligned(w->scratch[i].p);
    }
    for (tempo__list_t *l = &w->notes; l; l = l == &w->notes ? &w->held_notes : NULL) {
        while (!tempo__list_empty(l)) {
            tempo__list_t *e = l->next;
            tempo__list_remove(e);
            tempo__free(e); /* the link is the first member of a note */
        }
    }
    /* After the transports: they completed (failed) the close markers' transfers. */
    while (!tempo__list_empty(&w->closing)) {
        tempo__list_t *e = w->closing.next;
        tempo__list_remove(e);
        tempo__free(e);
    }
    while (!tempo__list_empty(&w->free_ops)) {
        tempo__list_t *e = w->free_ops.next;
        tempo__list_remove(e);
        tempo__free(tempo__container_of(e, tempo__op_t, link));
    }
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->lock);
    tempo__free(w->peers);
    tempo__free(w);
}

tempo_status_t tempo__world_fail(tempo__world_t *w, tempo_status_t st, const char *fmt, ...)
{
    if (w->failed != TEMPO_OK) {
        return st;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->failmsg, sizeof(w->failmsg), fmt, ap);
    va_end(ap);
    w->failed = st;
    tempo__flight_failed(w, st);
    if (st != TEMPO_ERR_ABORTED) {
        TEMPO_WARN(TEMPO_SUB_ALL, "%s: %s", tempo_status_name(st), w->failmsg);
    }
    return st;
}

int tempo__ctx_hi(const tempo__world_t *w)
{
    /* The reserved TEMPO_CTX_MAX is not counted. */
    for (int i = (int)sizeof(w->ctx_used) - 1; i >= 0; i--) {
        unsigned b = w->ctx_used[i];
        if (i == (int)sizeof(w->ctx_used) - 1) {
            b &= 0x7fu;
        }
        for (int k = 7; b && k >= 0; k--) {
            if (b & (1u << k)) {
                return i * 8 + k + 1;
            }
        }
    }
    return 0;
}

const char *tempo__peer_desc(const tempo__world_t *w, int wrank, char *buf, size_t len)
{
    if (wrank < 0 || wrank >= w->size) {
        snprintf(buf, len, "rank %d", wrank);
    } else {
        snprintf(buf, len, "rank %d (host %s, pid %d)", wrank, w->peers[wrank].info.hostname,
                 (int)w->peers[wrank].info.pid);
    }
    return buf;
}

tempo_status_t tempo__comm_create(tempo__world_t *w, const int *ranks, int size, int my_rank,
                                  int ctx, struct tempo_comm **comm_p)
{
    if (ctx < 0 || ctx >= TEMPO_CTX_MAX || tempo__ctx_is_used(w, ctx)) {
        return tempo__err(TEMPO_ERR_INTERNAL, "context id %d is not free on this rank", ctx);
    }
    struct tempo_comm *c = tempo__calloc(1, sizeof(*c), "communicator");
    if (!c) {
        return TEMPO_ERR_NOMEM;
    }
    c->ranks = tempo__malloc(sizeof(int) * (size_t)size, "communicator ranks");
    if (!c->ranks) {
        tempo__free(c);
        return TEMPO_ERR_NOMEM;
    }
    c->recent = tempo__calloc(2 * TEMPO_SIG_HISTORY, sizeof(*c->recent), "call history");
    if (!c->recent) {
        tempo__free(c->ranks);
        tempo__free(c);
        return TEMPO_ERR_NOMEM;
    }
    c->prej = c->recent + TEMPO_SIG_HISTORY;
    c->flight = tempo__flight_new(); /* (NULL: off, or no memory for it: not needed to run) */
    memcpy(c->ranks, ranks, sizeof(int) * (size_t)size);
    c->world = w;
    c->size = size;
    c->rank = my_rank;
    c->ctx = ctx;
    c->all_local = 1;
    c->uid = w->job_uuid;
    tempo__list_init(&c->ops);
    tempo__list_push_back(&w->comms, &c->wlink);
    for (int i = 0; i < size; i++) {
        c->all_local &= w->peers[ranks[i]].local;
    }
    tempo__ctx_set_used(w, ctx, 1);
    w->ncomms++;
    *comm_p = c;
    return TEMPO_OK;
}

int tempo__comm_free(struct tempo_comm *c)
{
    tempo__world_t *w = c->world;
    if (w->ncomms == 1) {
        tempo__flight_last(w); /* while its communicators still exist */
    }
    if (c->coll_free) {
        c->coll_free(c);
    }
    tempo__list_remove(&c->wlink);
    tempo__free(c->flight);
    tempo__free(c->recent);
    tempo__free(c->ranks);
    tempo__free(c);
    return --w->ncomms;
}
