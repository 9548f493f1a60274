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

size_t dist_slice(size_t n, int p, int r, size_t *off_p, size_t *len_p)
{
    const size_t q = (n + (size_t)p - 1) / (size_t)p;
    const size_t lo = (size_t)r * q < n ? (size_t)r * q : n;
    const size_t hi = lo + q < n ? lo + q : n;
    if (off_p) {
        *off_p = lo;
    }
    if (len_p) {
        *len_p = hi - lo;
    }
    return q;
}

int dist_pads_create(const dist_group_t *groups, int ngroups, int p, dist_pad_t **pads_p)
{
    dist_pad_t *pads = calloc((size_t)ngroups, sizeof(*pads));
    if (!pads) {
        return -1;
    }
    for (int g = 0; g < ngroups; g++) {
        const size_t padded = (size_t)p * dist_slice(groups[g].n, p, 0, NULL, NULL);
        if (padded != groups[g].n && (!(pads[g].rs = calloc(padded, sizeof(float))) ||
                                      !(pads[g].ag = calloc(padded, sizeof(float))))) {
            dist_pads_destroy(pads, ngroups);
            return -1;
        }
    }
    *pads_p = pads;
    return 0;
}

void dist_pads_destroy(dist_pad_t *pads, int ngroups)
{
    for (int g = 0; pads && g < ngroups; g++) {
        free(pads[g].rs);
        free(pads[g].ag);
    }
    free(pads);
}

float *dist_pad_rs_in(dist_pad_t *pd, size_t n, int p, float *buf)
{
    if (!pd->rs) {
        return buf;
    }
    const size_t padded = (size_t)p * dist_slice(n, p, 0, NULL, NULL);
    memcpy(pd->rs, buf, n * sizeof(float));
    memset(pd->rs + n, 0, (padded - n) * sizeof(float));
    pd->rs_dst = buf;
    return pd->rs;
}

void dist_pad_rs_out(dist_pad_t *pd, size_t n, int p, int r)
{
    if (pd->rs_dst) {
        size_t off, len, q = dist_slice(n, p, r, &off, &len);
        memcpy(pd->rs_dst + off, pd->rs + (size_t)r * q, len * sizeof(float));
        pd->rs_dst = NULL;
    }
}

float *dist_pad_ag_in(dist_pad_t *pd, size_t n, int p, int r, const float *send, float *recv)
{
    if (!pd->ag) {
        return recv;
    }
    size_t len, q = dist_slice(n, p, r, NULL, &len);
    float *mine = pd->ag + (size_t)r * q;
    memmove(mine, send, len * sizeof(float));
    memset(mine + len, 0, (q - len) * sizeof(float));
    pd->ag_dst = recv;
    return pd->ag;
}

void dist_pad_ag_out(dist_pad_t *pd, size_t n)
{
    if (pd->ag_dst) {
        memcpy(pd->ag_dst, pd->ag, n * sizeof(float));
        pd->ag_dst = NULL;
    }
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
