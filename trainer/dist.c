/*
 * dist.c — dist_open (the backend by name) and what the backends share. tempo is always built;
 * mpi when configure found MPI (TRAINER_HAVE_MPI), so a build without it says so instead of
 * failing at link or run time.
 *
 * The counters (dist.h's dist_counters_t) are kept here, around the backend's methods: dist_open
 * puts the backend's dist_t in a box with a copy of its methods and the counters, and replaces
 * every method that communicates with one that times it (and counts its bytes where the shape of
 * the call says them: TP, PP, sum_f64) and calls the backend's. So both backends measure the
 * same spans with the same clock, and a backend reports only what it alone knows, the DP
 * gradients' bytes. The methods get the caller's dist_t, so the box is invisible to backends.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "trainer/dist.h"
#include "util/helpers.h"

typedef struct {
    dist_t d;          /* what dist_open returns (first: dist_close frees the box through it) */
    dist_t backend;    /* the backend's methods, as it filled them in */
    dist_counters_t c; /* counted since the last take */
} dist_box_t;

static dist_box_t *box_of(dist_t *d)
{
    return (dist_box_t *)d;
}

/* The ring's share of a collective's bytes that each of p ranks sends, (p-1)/p. */
static double ring(int p)
{
    return p > 1 ? (double)(p - 1) / p : 0.0;
}

/* Count a call of dimension dim that began at t0 and sent bytes; passes rc through. */
static int count(dist_t *d, int dim, double t0, double bytes, int rc)
{
    dist_box_t *b = box_of(d);
    b->c.wait_s[dim] += util_now_s() - t0;
    b->c.bytes_sent[dim] += bytes;
    return rc;
}

static int w_sum_f64(dist_t *d, double *x, int n)
{
    double t0 = util_now_s();
    return count(d, DIST_DP, t0, 2 * ring(d->size) * 8.0 * n, box_of(d)->backend.sum_f64(d, x, n));
}

static int w_barrier(dist_t *d)
{
    double t0 = util_now_s();
    return count(d, DIST_DP, t0, 0, box_of(d)->backend.barrier(d));
}

static int w_grads_wait(dist_t *d, int g)
{
    double t0 = util_now_s();
    return count(d, DIST_DP, t0, 0, box_of(d)->backend.grads_wait(d, g));
}

static int w_gather_wait(dist_t *d, int g)
{
    double t0 = util_now_s();
    return count(d, DIST_DP, t0, 0, box_of(d)->backend.gather_wait(d, g));
}

static int w_tp_allreduce(dist_t *d, float *buf, size_t n, int max)
{
    double t0 = util_now_s();
    return count(d, DIST_TP, t0, 2 * ring(d->tp_size) * 4.0 * (double)n,
                 box_of(d)->backend.tp_allreduce(d, buf, n, max));
}

static int w_tp_sum_f64(dist_t *d, double *x, int n)
{
    double t0 = util_now_s();
    return count(d, DIST_TP, t0, 2 * ring(d->tp_size) * 8.0 * n,
                 box_of(d)->backend.tp_sum_f64(d, x, n));
}

/* all-gather of n floats per rank, reduce-scatter into n floats per rank: (T-1) n floats sent */
static int w_tp_allgather(dist_t *d, const float *send, float *recv, size_t n)
{
    double t0 = util_now_s();
    return count(d, DIST_TP, t0, (d->tp_size - 1) * 4.0 * (double)n,
                 box_of(d)->backend.tp_allgather(d, send, recv, n));
}

static int w_tp_reduce_scatter(dist_t *d, const float *send, float *recv, size_t n)
{
    double t0 = util_now_s();
    return count(d, DIST_TP, t0, (d->tp_size - 1) * 4.0 * (double)n,
                 box_of(d)->backend.tp_reduce_scatter(d, send, recv, n));
}

/* Posting is not waiting: a send counts its bytes here, its time in pp_wait. */
static int w_pp_post(dist_t *d, float *buf, size_t n, int peer, uint32_t tag, int send,
                     void **req_p)
{
    box_of(d)->c.bytes_sent[DIST_PP] += send ? 4.0 * (double)n : 0;
    return box_of(d)->backend.pp_post(d, buf, n, peer, tag, send, req_p);
}

static int w_pp_wait(dist_t *d, void **req_p)
{
    double t0 = util_now_s();
    return count(d, DIST_PP, t0, 0, box_of(d)->backend.pp_wait(d, req_p));
}

/* The line and the embedding group (the first and the last stage) are PP, the DP group DP. */
static int w_pp_allreduce(dist_t *d, int group, void *buf, size_t n, int f64)
{
    const int p = group == DIST_PP_LINE ? d->pp_size : group == DIST_PP_EMBED ? 2 : d->size;
    double t0 = util_now_s();
    return count(d, group == DIST_PP_DP ? DIST_DP : DIST_PP, t0,
                 2 * ring(p) * (f64 ? 8.0 : 4.0) * (double)n,
                 box_of(d)->backend.pp_allreduce(d, group, buf, n, f64));
}

static void w_counters_take(dist_t *d, dist_counters_t *c)
{
    dist_box_t *b = box_of(d);
    dist_counters_t own;
    memset(&own, 0, sizeof own);
    b->backend.counters_take(d, &own);
    *c = b->c;
    c->bytes_sent[DIST_DP] += own.bytes_sent[DIST_DP];
    memset(&b->c, 0, sizeof b->c);
}

/* Put the counting methods in place of the backend's (those it has). */
static void wrap(dist_t *d)
{
    dist_t *be = &box_of(d)->backend;
    *be = *d;
    d->sum_f64 = w_sum_f64;
    d->barrier = w_barrier;
    d->grads_wait = w_grads_wait;
    d->gather_wait = w_gather_wait;
    d->counters_take = w_counters_take;
    d->tp_allreduce = be->tp_allreduce ? w_tp_allreduce : NULL;
    d->tp_sum_f64 = be->tp_sum_f64 ? w_tp_sum_f64 : NULL;
    d->tp_allgather = be->tp_allgather ? w_tp_allgather : NULL;
    d->tp_reduce_scatter = be->tp_reduce_scatter ? w_tp_reduce_scatter : NULL;
    d->pp_post = be->pp_post ? w_pp_post : NULL;
    d->pp_wait = be->pp_wait ? w_pp_wait : NULL;
    d->pp_allreduce = be->pp_allreduce ? w_pp_allreduce : NULL;
}

#ifdef TRAINER_HAVE_MPI
#define BACKENDS "tempo, mpi"
#else
#define BACKENDS "tempo"
#endif

const char *dist_backends(void)
{
    return BACKENDS;
}

double dist_ring_share(const dist_t *d)
{
    return ring(d->size);
}

int dist_check_slices(const dist_t *d, const dist_group_t *groups, int ngroups, char *err,
                      size_t len)
{
    for (int g = 0; g < ngroups; g++) {
        if (groups[g].n % (size_t)d->size) {
            snprintf(err, len,
                     "ZeRO shards every group in %d equal slices, but group %s has %zu "
                     "parameters (not a multiple of %d); use --zero 0 or another --dp",
                     d->size, groups[g].name, groups[g].n, d->size);
            return -1;
        }
    }
    return 0;
}

dist_t *dist_open(const char *backend, char *err)
{
    int (*open)(dist_t *, char *) = NULL;
    if (!backend || !strcmp(backend, "tempo")) {
        open = dist_open_tempo;
    }
#ifdef TRAINER_HAVE_MPI
    if (backend && !strcmp(backend, "mpi")) {
        open = dist_open_mpi;
    }
#endif
    if (!open) {
        snprintf(err, 256, "unknown --backend '%s' (this build has: %s%s)", backend, BACKENDS,
                 strcmp(backend, "mpi") ? ""
                                        : "; mpi needs libopenmpi-dev when configure runs");
        return NULL;
    }
    dist_box_t *b = calloc(1, sizeof(*b));
    if (!b) {
        snprintf(err, 256, "out of memory");
        return NULL;
    }
    dist_t *d = &b->d;
    if (open(d, err) != 0) {
        free(b);
        return NULL;
    }
    wrap(d);
    d->world_rank = d->rank;
    d->world_size = d->size;
    d->tp_size = 1;
    d->pp_size = 1;
    void *job = d->mesh.comm[MESH_DP]; /* the backend's: the job's communicator */
    mesh_init(&d->mesh, d->rank, d->size, d->size, 1, 1, err); /* cannot fail */
    d->mesh.comm[MESH_DP] = job;
    return d;
}

int dist_close(dist_t *d)
{
    int rc = d->destroy(d);
    free(box_of(d));
    return rc;
}
