/*
 * dist_mpi.c — the trainer's communication backend on MPI, for comparison with tempo (--backend mpi,
 * launched by mpirun; built when configure finds MPI).
 *
 * It does what a careful data-parallel trainer on plain MPI does, with no scheduling of its own:
 *   DIST_ALLREDUCE       each group is one MPI_Iallreduce (in place, MPI_SUM, then scaled by 1/p)
 *                        posted when backward has finished it; groups are not fused, so every
 *                        group is one request in the order backward produces them.
 *   DIST_REDUCE_SCATTER  each group is one MPI_Ireduce_scatter_block into a slice-sized scratch
 *                        buffer (MPI's in-place form would put rank r's slice at the front), copied
 *                        to off + r * n/p and scaled when waited for; parameters come back with an
 *                        in-place MPI_Iallgather per group (ZeRO 3: from the rank's slice
 *                        into a gathered buffer).
 * MPI libraries progress non-blocking collectives mostly inside MPI calls, so every post also
 * tests the requests in flight (MPI_Testall), which is what lets them overlap the rest of backward.
 *
 * There is no compression and no priority policy here: --compress other than none is refused, and
 * the policy is reported as "posted order" whatever --sched says. Bytes sent use the same estimate
 * as the tempo backend (a ring's share of each collective's bytes).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools/mpi_common.h"
#include "trainer/dist.h"

typedef struct {
    char err[512];
    char desc[512];
    dist_mode_t mode;
    float *grads;
    dist_group_t *groups;
    int ngroups;
    int sync;
    MPI_Request *rs, *ag; /* (ngroups) posted requests, MPI_REQUEST_NULL when none */
    float **slice;        /* (ngroups) reduce-scatter outputs (DIST_REDUCE_SCATTER) */
    float **buf;          /* (ngroups) where group g's last grads_ready had its gradients */
    double wait_s, bytes;
} mdist_t;

static int fail(dist_t *d, const char *what, int rc)
{
    mdist_t *m = d->impl;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) {
        snprintf(msg, sizeof msg, "MPI error %d", rc);
    }
    snprintf(m->err, sizeof m->err, "%s: %s", what, msg);
    return -1;
}

static int m_sum_f64(dist_t *d, double *x, int n)
{
    int rc = MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? 0 : fail(d, "all-reduce of statistics", rc);
}

static int m_barrier(dist_t *d)
{
    int rc = MPI_Barrier(MPI_COMM_WORLD);
    return rc == MPI_SUCCESS ? 0 : fail(d, "barrier", rc);
}

static int m_grads_register(dist_t *d, float *grads, const dist_group_t *groups, int ngroups,
                            const dist_grad_opts_t *o)
{
    mdist_t *m = d->impl;
    if (o->compress && *o->compress && strcmp(o->compress, "none") != 0) {
        snprintf(m->err, sizeof m->err,
                 "the mpi backend has no compressors (%s %s); use --backend tempo",
                 o->compress_src ? o->compress_src : "--compress", o->compress);
        return -1;
    }
    m->mode = o->mode;
    m->grads = grads;
    m->groups = calloc((size_t)ngroups, sizeof(*m->groups));
    m->rs = malloc((size_t)ngroups * sizeof(*m->rs));
    m->ag = malloc((size_t)ngroups * sizeof(*m->ag));
    m->slice = calloc((size_t)ngroups, sizeof(*m->slice));
    m->buf = calloc((size_t)ngroups, sizeof(*m->buf));
    if (!m->groups || !m->rs || !m->ag || !m->slice || !m->buf) {
        snprintf(m->err, sizeof m->err, "out of memory registering %d gradient groups", ngroups);
        return -1;
    }
    m->ngroups = ngroups; /* from here on m_destroy walks the arrays */
    for (int g = 0; g < ngroups; g++) {
        m->rs[g] = m->ag[g] = MPI_REQUEST_NULL;
    }
    memcpy(m->groups, groups, (size_t)ngroups * sizeof(*groups));
    if (m->mode == DIST_REDUCE_SCATTER &&
        dist_check_slices(d, groups, ngroups, m->err, sizeof m->err)) {
        return -1;
    }
    for (int g = 0; g < ngroups; g++) {
        if (groups[g].n > (size_t)1 << 30) {
            snprintf(m->err, sizeof m->err, "group %s has %zu elements (MPI counts are int)",
                     groups[g].name, groups[g].n);
            return -1;
        }
        if (m->mode != DIST_REDUCE_SCATTER) {
            continue;
        }
        if (!(m->slice[g] = malloc(groups[g].n / (size_t)d->size * sizeof(float)))) {
            snprintf(m->err, sizeof m->err, "out of memory for the slice of group %s",
                     groups[g].name);
            return -1;
        }
    }
    snprintf(m->desc, sizeof m->desc, "mpi: per-group %s, posted order, uncompressed",
             m->mode == DIST_REDUCE_SCATTER ? "MPI_Ireduce_scatter_block + MPI_Iallgather"
                                            : "MPI_Iallreduce");
    return 0;
}

static int m_grads_begin(dist_t *d, int sync)
{
    ((mdist_t *)d->impl)->sync = sync;
    return 0;
}

/* Drive the requests in flight: most MPI libraries progress them only inside MPI calls. */
static int poke(dist_t *d)
{
    mdist_t *m = d->impl;
    int flag;
    int rc = MPI_Testall(m->ngroups, m->rs, &flag, MPI_STATUSES_IGNORE);
    if (rc == MPI_SUCCESS) {
        rc = MPI_Testall(m->ngroups, m->ag, &flag, MPI_STATUSES_IGNORE);
    }
    return rc == MPI_SUCCESS ? 0 : fail(d, "progress of requests in flight", rc);
}

static void scale(float *x, size_t n, float s)
{
    for (size_t i = 0; i < n; i++) {
        x[i] *= s;
    }
}

static int m_grads_ready(dist_t *d, int g, float *buf)
{
    mdist_t *m = d->impl;
    const dist_group_t *gr = &m->groups[g];
    if (!m->sync || d->size == 1) {
        return 0;
    }
    float *base = m->buf[g] = buf;
    int rc;
    if (m->mode == DIST_REDUCE_SCATTER) {
        int q = (int)(gr->n / (size_t)d->size);
        rc = MPI_Ireduce_scatter_block(base, m->slice[g], q, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                                       &m->rs[g]);
        m->bytes += dist_ring_share(d) * 4.0 * (double)gr->n;
    } else {
        rc = MPI_Iallreduce(MPI_IN_PLACE, base, (int)gr->n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                            &m->rs[g]);
        m->bytes += 2 * dist_ring_share(d) * 4.0 * (double)gr->n;
    }
    if (rc != MPI_SUCCESS) {
        return fail(d, "posting the gradients' collective", rc);
    }
    return poke(d);
}

static int wait_req(dist_t *d, MPI_Request *r, const char *what)
{
    mdist_t *m = d->impl;
    if (*r == MPI_REQUEST_NULL) {
        return 0;
    }
    double t0 = MPI_Wtime();
    int rc = MPI_Wait(r, MPI_STATUS_IGNORE);
    m->wait_s += MPI_Wtime() - t0;
    return rc == MPI_SUCCESS ? 0 : fail(d, what, rc);
}

static int m_grads_wait(dist_t *d, int g)
{
    mdist_t *m = d->impl;
    const dist_group_t *gr = &m->groups[g];
    int posted = m->rs[g] != MPI_REQUEST_NULL;
    if (wait_req(d, &m->rs[g], "gradient synchronization")) {
        return -1;
    }
    if (!posted) {
        return 0;
    }
    float inv = 1.0f / (float)d->size;
    if (m->mode == DIST_REDUCE_SCATTER) {
        size_t q = gr->n / (size_t)d->size;
        float *dst = m->buf[g] + (size_t)d->rank * q;
        for (size_t i = 0; i < q; i++) {
            dst[i] = m->slice[g][i] * inv;
        }
    } else {
        scale(m->buf[g], gr->n, inv);
    }
    return 0;
}

/* Post the all-gather of group g's slices into recv (n floats): from send (this rank's n/dp), or
 * in place (send NULL: this rank's slice is already at recv + rank * n/dp). */
static int post_gather(dist_t *d, int g, const float *send, float *recv)
{
    mdist_t *m = d->impl;
    const dist_group_t *gr = &m->groups[g];
    if (d->size == 1) {
        if (send && send != recv) {
            memcpy(recv, send, gr->n * sizeof(float));
        }
        return 0;
    }
    int q = (int)(gr->n / (size_t)d->size);
    int rc = send ? MPI_Iallgather(send, q, MPI_FLOAT, recv, q, MPI_FLOAT, MPI_COMM_WORLD,
                                   &m->ag[g])
                  : MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, q, MPI_FLOAT,
                                   MPI_COMM_WORLD, &m->ag[g]);
    m->bytes += dist_ring_share(d) * 4.0 * (double)gr->n;
    if (rc != MPI_SUCCESS) {
        return fail(d, "all-gather of slices", rc);
    }
    return poke(d);
}

static int m_gather(dist_t *d, int g, float *buf)
{
    return post_gather(d, g, NULL, buf + ((mdist_t *)d->impl)->groups[g].off);
}

static int m_gather_to(dist_t *d, int g, const float *slice, float *full)
{
    return post_gather(d, g, slice, full);
}

static int m_gather_wait(dist_t *d, int g)
{
    return wait_req(d, &((mdist_t *)d->impl)->ag[g], "all-gather of slices");
}

static int m_compute_begin(dist_t *d, int g, int phase)
{
    (void)d, (void)g, (void)phase;
    return 0; /* MPI has no timeline */
}

static int m_compute_end(dist_t *d)
{
    (void)d;
    return 0;
}

static void m_counters_take(dist_t *d, dist_counters_t *c)
{
    mdist_t *m = d->impl;
    c->bytes_sent = m->bytes;
    c->wait_s = m->wait_s;
    m->bytes = m->wait_s = 0;
}

static const char *m_describe(dist_t *d)
{
    return ((mdist_t *)d->impl)->desc;
}

static const char *m_error(dist_t *d)
{
    return ((mdist_t *)d->impl)->err;
}

static void m_abort(dist_t *d)
{
    (void)d;
    MPI_Abort(MPI_COMM_WORLD, 1);
}

static int m_destroy(dist_t *d)
{
    if (!d) {
        return 0;
    }
    mdist_t *m = d->impl;
    int rc = 0;
    for (int g = 0; g < m->ngroups; g++) {
        rc |= wait_req(d, &m->rs[g], "gradient synchronization");
        rc |= wait_req(d, &m->ag[g], "all-gather of slices");
        free(m->slice ? m->slice[g] : NULL);
    }
    if (MPI_Finalize() != MPI_SUCCESS) {
        rc = -1;
    }
    free(m->groups);
    free(m->rs);
    free(m->ag);
    free(m->slice);
    free(m->buf);
    free(m);
    return rc ? -1 : 0;
}

int dist_open_mpi(dist_t *d, char *err)
{
    mdist_t *m = calloc(1, sizeof(*m));
    if (!m) {
        snprintf(err, 256, "out of memory");
        return -1;
    }
    int rank = 0, size = 1;
    if (MPI_Init(NULL, NULL) != MPI_SUCCESS) {
        snprintf(err, 256, "cannot join the job with MPI (MPI_Init failed; launch with mpirun)");
        free(m);
        return -1;
    }
    /* errors come back as codes and are reported in words, not as MPI's default abort */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (tempo_mpi_mislaunched(size, err, 256)) {
        MPI_Finalize();
        free(m);
        return -1;
    }
    *d = (dist_t){.backend = "mpi",
                  .rank = rank,
                  .size = size,
                  .impl = m,
                  .sum_f64 = m_sum_f64,
                  .barrier = m_barrier,
                  .grads_register = m_grads_register,
                  .grads_begin = m_grads_begin,
                  .grads_ready = m_grads_ready,
                  .grads_wait = m_grads_wait,
                  .gather = m_gather,
                  .gather_to = m_gather_to,
                  .gather_wait = m_gather_wait,
                  .compute_begin = m_compute_begin,
                  .compute_end = m_compute_end,
                  .counters_take = m_counters_take,
                  .describe = m_describe,
                  .error = m_error,
                  .abort = m_abort,
                  .destroy = m_destroy};
    return 0;
}
