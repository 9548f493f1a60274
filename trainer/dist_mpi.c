/*
 * dist_mpi.c — the trainer's communication backend on MPI, for comparison with tempo (--backend
 * mpi, launched by mpirun; built when configure finds MPI).
 *
 * It does what a careful data-parallel trainer on plain MPI does, with no scheduling of its own:
 *   DIST_ALLREDUCE       each group is one MPI_Iallreduce (in place, MPI_SUM, then scaled by 1/p)
 *                        posted when backward has finished it; groups are not fused, so every
 *                        group is one request in the order backward produces them.
 *   DIST_REDUCE_SCATTER  each group is one MPI_Ireduce_scatter_block into a slice-sized scratch
 *                        buffer (MPI's in-place form would put rank r's slice at the front), copied
 *                        to the rank's dist_slice and scaled when waited for; parameters come back
 *                        with an in-place MPI_Iallgather per group (ZeRO 3: from the rank's slice
 *                        into a gathered buffer). A group that p does not divide goes through a
 *                        copy padded with zeros to p equal slices (dist_slice), both ways.
 * MPI libraries progress non-blocking collectives mostly inside MPI calls, so every post also
 * tests the requests in flight (MPI_Testall), which is what lets them overlap the rest of backward.
 *
 * The hybrid layouts follow dist.h's contract exactly as dist_tempo.c does (same rank order, same
 * groups): mesh_build (mesh.c) splits MPI_COMM_WORLD through split (MPI_Comm_split), with the same
 * colors and keys as for the tempo backend, into the TP, DP, PP-line and embedding communicators,
 * which d->mesh holds (as MPI_Comm addresses); afterwards every DP method above runs on the DP
 * communicator. TP traffic is
 * blocking MPI_Allreduce / MPI_Allgather / MPI_Reduce_scatter_block, pipeline messages are
 * MPI_Isend / MPI_Irecv on the PP communicator (the request handle lives on the heap until
 * pp_wait), and pp_allreduce is MPI_Allreduce on the group's communicator: all exact, as TP, SP
 * and PP traffic is in tempo. pp_trace is a no-op (MPI has no timeline).
 *
 * There is no compression and no priority policy here: --compress other than none is refused, and
 * the policy is reported as "posted order" whatever --sched says. The DP bytes sent use the same
 * estimate as the tempo backend (a ring's share of each DP collective's bytes); dist.c times the
 * waits and counts the TP and PP traffic around these methods, as for tempo.
 */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/dist.h"
#include "util/helpers.h"

typedef struct {
    MPI_Comm world;       /* MPI_COMM_WORLD: d->mesh's DP communicator until mesh_build; the
                           * splits are on the heap (split), one MPI_Comm each */
    char err[512];
    char desc[512];
    dist_mode_t mode;
    float *grads;
    dist_group_t *groups;
    int ngroups;
    int sync;
    MPI_Request *rs, *ag; /* (ngroups) posted requests, MPI_REQUEST_NULL when none */
    float **slice;        /* (ngroups) reduce-scatter outputs (DIST_REDUCE_SCATTER) */
    dist_pad_t *pad;      /* (ngroups) DIST_REDUCE_SCATTER: the padding of the groups that p
                           * does not divide (dist.h) */
    float **buf;          /* (ngroups) where group g's last grads_ready had its gradients,
                           * until grads_wait has finished them (then NULL) */
    int tag_ub;           /* the largest tag MPI accepts (MPI_TAG_UB, at least 32767) */
    double bytes;         /* DP bytes sent since the last counters_take */
} mdist_t;

/* This rank's communicator of mesh group g (MESH_*), MPI_COMM_NULL where it has none. */
static MPI_Comm comm_of(const dist_t *d, int g)
{
    const MPI_Comm *c = d->mesh.comm[g];
    return c ? *c : MPI_COMM_NULL;
}

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
    int rc = MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, comm_of(d, MESH_DP));
    return rc == MPI_SUCCESS ? 0 : fail(d, "all-reduce of statistics", rc);
}

static int m_barrier(dist_t *d)
{
    int rc = MPI_Barrier(comm_of(d, MESH_DP));
    return rc == MPI_SUCCESS ? 0 : fail(d, "barrier", rc);
}

static int m_grads_check(dist_t *d, const dist_grad_opts_t *o, char *err, size_t len)
{
    (void)d;
    if (o->compress && *o->compress && strcmp(o->compress, "none") != 0) {
        snprintf(err, len, "the mpi backend has no compressors (%s %s); use --backend tempo",
                 o->compress_src ? o->compress_src : "--compress", o->compress);
        return -1;
    }
    if (o->bucket_bytes) {
        snprintf(err, len, "the mpi backend does not fuse gradients into buckets (one request "
                 "per layer group): leave --bucket-bytes out, or use --backend tempo");
        return -1;
    }
    return 0;
}

static int m_grads_register(dist_t *d, float *grads, const dist_group_t *groups, int ngroups,
                            const dist_grad_opts_t *o)
{
    mdist_t *m = d->impl;
    if (m_grads_check(d, o, m->err, sizeof m->err)) {
        return -1;
    }
    m->mode = o->mode;
    m->grads = grads;
    m->groups = calloc((size_t)ngroups, sizeof(*m->groups));
    m->rs = malloc((size_t)ngroups * sizeof(*m->rs));
    m->ag = malloc((size_t)ngroups * sizeof(*m->ag));
    m->slice = calloc((size_t)ngroups, sizeof(*m->slice));
    m->buf = calloc((size_t)ngroups, sizeof(*m->buf));
    const int pad_p = o->mode == DIST_REDUCE_SCATTER ? d->size : 1; /* 1: no padding */
    if (!m->groups || !m->rs || !m->ag || !m->slice || !m->buf ||
        dist_pads_create(groups, ngroups, pad_p, &m->pad)) {
        snprintf(m->err, sizeof m->err, "out of memory registering %d gradient groups", ngroups);
        return -1;
    }
    m->ngroups = ngroups; /* from here on m_destroy walks the arrays */
    for (int g = 0; g < ngroups; g++) {
        m->rs[g] = m->ag[g] = MPI_REQUEST_NULL;
    }
    memcpy(m->groups, groups, (size_t)ngroups * sizeof(*groups));
    for (int g = 0; g < ngroups; g++) {
        if (groups[g].n > (size_t)1 << 30) {
            snprintf(m->err, sizeof m->err, "group %s has %zu elements (MPI counts are int)",
                     groups[g].name, groups[g].n);
            return -1;
        }
        if (m->mode != DIST_REDUCE_SCATTER) {
            continue;
        }
        if (!(m->slice[g] = malloc(dist_slice(groups[g].n, d->size, 0, NULL, NULL) *
                                   sizeof(float)))) {
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
        int q = (int)dist_slice(gr->n, d->size, 0, NULL, NULL);
        const float *send = dist_pad_rs_in(&m->pad[g], gr->n, d->size, base);
        rc = MPI_Ireduce_scatter_block(send, m->slice[g], q, MPI_FLOAT, MPI_SUM,
                                       comm_of(d, MESH_DP), &m->rs[g]);
        m->bytes += dist_ring_share(d) * 4.0 * (double)gr->n;
    } else {
        rc = MPI_Iallreduce(MPI_IN_PLACE, base, (int)gr->n, MPI_FLOAT, MPI_SUM, comm_of(d, MESH_DP), &m->rs[g]);
        m->bytes += 2 * dist_ring_share(d) * 4.0 * (double)gr->n;
    }
    if (rc != MPI_SUCCESS) {
        return fail(d, "posting the gradients' collective", rc);
    }
    return poke(d);
}

static int wait_req(dist_t *d, MPI_Request *r, const char *what)
{
    if (*r == MPI_REQUEST_NULL) {
        return 0;
    }
    int rc = MPI_Wait(r, MPI_STATUS_IGNORE);
    return rc == MPI_SUCCESS ? 0 : fail(d, what, rc);
}

static int m_grads_wait(dist_t *d, int g)
{
    mdist_t *m = d->impl;
    const dist_group_t *gr = &m->groups[g];
    /* buf[g], not the request, says whether group g's result still needs finishing: poke's
     * MPI_Testall frees the requests (MPI_REQUEST_NULL) once they are all complete, and a
     * reduce-scatter completed there must still be copied to its slice and scaled (that skip
     * lost a group's reduced gradient at random under ZeRO 3, whose all-gathers poke between
     * the reduce-scatters) */
    const int posted = m->buf[g] != NULL;
    if (wait_req(d, &m->rs[g], "gradient synchronization")) {
        return -1;
    }
    if (!posted) {
        return 0;
    }
    float inv = 1.0f / (float)d->size;
    if (m->mode == DIST_REDUCE_SCATTER) {
        size_t off, len;
        dist_slice(gr->n, d->size, d->rank, &off, &len);
        float *dst = m->buf[g] + off;
        for (size_t i = 0; i < len; i++) {
            dst[i] = m->slice[g][i] * inv;
        }
    } else {
        scale(m->buf[g], gr->n, inv);
    }
    m->buf[g] = NULL;
    return 0;
}

/* Post the all-gather of group g's slices into recv (n floats): from send (this rank's
 * dist_slice), or in place (send NULL: this rank's slice is already at its offset in recv). */
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
    size_t off;
    int q = (int)dist_slice(gr->n, d->size, d->rank, &off, NULL);
    float *out = dist_pad_ag_in(&m->pad[g], gr->n, d->size, d->rank, send ? send : recv + off,
                                recv);
    if (out != recv) { /* in place in the padded copy, copied out at the wait */
        send = NULL, recv = out;
    }
    int rc = send ? MPI_Iallgather(send, q, MPI_FLOAT, recv, q, MPI_FLOAT, comm_of(d, MESH_DP),
                                   &m->ag[g])
                  : MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, q, MPI_FLOAT,
                                   comm_of(d, MESH_DP), &m->ag[g]);
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

/* The pad's ag_dst, not the request, says whether a padded result still needs copying out (poke's
 * MPI_Testall may have completed and freed the request; see m_grads_wait). */
static int m_gather_wait(dist_t *d, int g)
{
    mdist_t *m = d->impl;
    if (wait_req(d, &m->ag[g], "all-gather of slices")) {
        return -1;
    }
    dist_pad_ag_out(&m->pad[g], m->groups[g].n);
    return 0;
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
    c->bytes_sent[DIST_DP] = m->bytes;
    m->bytes = 0;
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

/* A failure of an MPI call on a TP or pipeline communicator, in dist_error's words: "tensor
 * parallel all-reduce: <MPI's message>". */
static int mesh_fail(dist_t *d, const char *dim, const char *what, int rc)
{
    char w[128];
    snprintf(w, sizeof w, "%s %s", dim, what);
    return fail(d, w, rc);
}

/* n elements as an MPI count, or -1 with the reason in dist_error. */
static int count_of(dist_t *d, size_t n, const char *what)
{
    mdist_t *m = d->impl;
    if (n > (size_t)INT_MAX) {
        snprintf(m->err, sizeof m->err, "%s of %zu elements: MPI counts are int", what, n);
        return -1;
    }
    return (int)n;
}

static int m_tp_allreduce(dist_t *d, float *buf, size_t n, int max)
{
    int c = count_of(d, n, "tensor parallel all-reduce");
    if (c < 0) {
        return -1;
    }
    int rc = MPI_Allreduce(MPI_IN_PLACE, buf, c, MPI_FLOAT, max ? MPI_MAX : MPI_SUM, comm_of(d, MESH_TP));
    return rc == MPI_SUCCESS ? 0 : mesh_fail(d, "tensor parallel", "all-reduce", rc);
}

static int m_tp_sum_f64(dist_t *d, double *x, int n)
{
    int rc = MPI_Allreduce(MPI_IN_PLACE, x, n, MPI_DOUBLE, MPI_SUM, comm_of(d, MESH_TP));
    return rc == MPI_SUCCESS ? 0 : mesh_fail(d, "tensor parallel", "all-reduce of statistics", rc);
}

static int m_tp_allgather(dist_t *d, const float *send, float *recv, size_t n)
{
    int c = count_of(d, n * (size_t)d->tp_size, "tensor parallel all-gather");
    if (c < 0) {
        return -1;
    }
    int rc = MPI_Allgather(send, (int)n, MPI_FLOAT, recv, (int)n, MPI_FLOAT, comm_of(d, MESH_TP));
    return rc == MPI_SUCCESS ? 0 : mesh_fail(d, "tensor parallel", "all-gather", rc);
}

static int m_tp_reduce_scatter(dist_t *d, const float *send, float *recv, size_t n)
{
    int c = count_of(d, n * (size_t)d->tp_size, "tensor parallel reduce-scatter");
    if (c < 0) {
        return -1;
    }
    int rc = MPI_Reduce_scatter_block(send, recv, (int)n, MPI_FLOAT, MPI_SUM, comm_of(d, MESH_TP));
    return rc == MPI_SUCCESS ? 0 : mesh_fail(d, "tensor parallel", "reduce-scatter", rc);
}

/* mesh_build's split of MPI_COMM_WORLD (MPI_UNDEFINED: not a member, no communicator); errors
 * return like the rest (MPI_ERRORS_RETURN, which a split inherits, set again to be sure). */
static int m_split(dist_t *d, int color, int key, void **comm_p, int *rank_p, int *size_p,
                   char *err)
{
    MPI_Comm c = MPI_COMM_NULL;
    int rc = MPI_Comm_split(MPI_COMM_WORLD, color < 0 ? MPI_UNDEFINED : color, key, &c);
    if (rc == MPI_SUCCESS && c != MPI_COMM_NULL) {
        rc = MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    }
    MPI_Comm *h = NULL;
    if (rc == MPI_SUCCESS && c != MPI_COMM_NULL && !(h = malloc(sizeof(*h)))) {
        snprintf(err, 256, "cannot split the job into its mesh's groups: out of memory");
        MPI_Comm_free(&c);
        return -1;
    }
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING] = "";
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        snprintf(err, 256, "cannot split the job into its mesh's groups: %s", msg);
        if (c != MPI_COMM_NULL) {
            MPI_Comm_free(&c);
        }
        return -1;
    }
    (void)d;
    *rank_p = 0, *size_p = 1;
    if (h) {
        *h = c;
        MPI_Comm_rank(c, rank_p);
        MPI_Comm_size(c, size_p);
    }
    *comm_p = h;
    return 0;
}

static int m_pp_post(dist_t *d, float *buf, size_t n, int peer, uint32_t tag, int send,
                     void **req_p)
{
    mdist_t *m = d->impl;
    const char *what = send ? "send to the next stage" : "receive";
    int c = count_of(d, n, send ? "pipeline send" : "pipeline receive");
    if (c < 0) {
        return -1;
    }
    if (tag > (uint32_t)m->tag_ub) {
        snprintf(m->err, sizeof m->err, "pipeline %s: tag %u is above this MPI's MPI_TAG_UB (%d)",
                 what, (unsigned)tag, m->tag_ub);
        return -1;
    }
    MPI_Request *r = malloc(sizeof(*r));
    if (!r) {
        snprintf(m->err, sizeof m->err, "pipeline %s: out of memory", what);
        return -1;
    }
    int rc = send ? MPI_Isend(buf, c, MPI_FLOAT, peer, (int)tag, comm_of(d, MESH_PP), r)
                  : MPI_Irecv(buf, c, MPI_FLOAT, peer, (int)tag, comm_of(d, MESH_PP), r);
    if (rc != MPI_SUCCESS) {
        free(r);
        return mesh_fail(d, "pipeline", what, rc);
    }
    *req_p = r;
    return 0;
}

static int m_pp_wait(dist_t *d, void **req_p)
{
    MPI_Request *r = *req_p;
    if (!r) {
        return 0; /* nothing posted */
    }
    int rc = MPI_Wait(r, MPI_STATUS_IGNORE);
    free(r);
    *req_p = NULL;
    return rc == MPI_SUCCESS ? 0 : mesh_fail(d, "pipeline", "send or receive between stages", rc);
}

static int m_pp_allreduce(dist_t *d, int group, void *buf, size_t n, int f64)
{
    static const char *what[3] = {"all-reduce over the pipeline line",
                                  "all-reduce of the tied embedding", "all-reduce over DP"};
    MPI_Comm c = comm_of(d, group == DIST_PP_LINE    ? MESH_PP
                            : group == DIST_PP_EMBED ? MESH_EMB
                                                     : MESH_DP);
    int cnt = count_of(d, n, what[group]);
    if (cnt < 0) {
        return -1;
    }
    int rc = MPI_Allreduce(MPI_IN_PLACE, buf, cnt, f64 ? MPI_DOUBLE : MPI_FLOAT, MPI_SUM, c);
    return rc == MPI_SUCCESS ? 0 : mesh_fail(d, "pipeline", what[group], rc);
}

static int m_pp_trace(dist_t *d, const char *name, int begin)
{
    (void)d, (void)name, (void)begin;
    return 0; /* MPI has no timeline */
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
    for (int g = 0; g < MESH_NGROUPS; g++) { /* the mesh's splits */
        MPI_Comm *c = d->mesh.comm[g];
        if (c && c != &m->world) {
            if (*c != MPI_COMM_NULL && MPI_Comm_free(c) != MPI_SUCCESS) {
                rc = -1;
            }
            free(c);
        }
    }
    if (MPI_Finalize() != MPI_SUCCESS) {
        rc = -1;
    }
    free(m->groups);
    free(m->rs);
    free(m->ag);
    free(m->slice);
    free(m->buf);
    dist_pads_destroy(m->pad, m->ngroups);
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
    int *ub = NULL, flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    m->tag_ub = flag && ub ? *ub : 32767;
    m->world = MPI_COMM_WORLD;
    if (util_mpi_mislaunched(size, err, 256)) {
        MPI_Finalize();
        free(m);
        return -1;
    }
    *d = (dist_t){.backend = "mpi",
                  .rank = rank,
                  .size = size,
                  .impl = m,
                  .mesh = {.comm = {[MESH_DP] = &m->world}},
                  .sum_f64 = m_sum_f64,
                  .barrier = m_barrier,
                  .grads_check = m_grads_check,
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
                  .split = m_split,
                  .tp_allreduce = m_tp_allreduce,
                  .tp_sum_f64 = m_tp_sum_f64,
                  .tp_allgather = m_tp_allgather,
                  .tp_reduce_scatter = m_tp_reduce_scatter,
                  .pp_post = m_pp_post,
                  .pp_wait = m_pp_wait,
                  .pp_allreduce = m_pp_allreduce,
                  .pp_trace = m_pp_trace,
                  .destroy = m_destroy};
    return 0;
}
