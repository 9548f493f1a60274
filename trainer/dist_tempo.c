/*
 * dist_tempo.c — the trainer's communication backend on tempo (public API only).
 *
 * DIST_ALLREDUCE: the groups are registered with a tempo bucketer (one tensor per group, its layer
 * the group's forward index), which fuses them into buckets, posts each bucket as a scheduled
 * all-reduce (TEMPO_AVG) with the policy's priority as soon as backward has finished it, compresses
 * float32 buckets with the compressor of the spec, and waits per group.
 * DIST_REDUCE_SCATTER: each group is its own scheduled in-place reduce-scatter (TEMPO_AVG, same
 * compressor; rank r's slice lands at its dist_slice offset; a group that dp does not divide goes
 * through a copy padded with zeros to dp equal slices, and the rank's part of its slice is copied
 * back when it is waited for), and parameters come back with a scheduled
 * in-place all-gather per group (ZeRO 3: out of place, from the rank's slice into a gathered
 * buffer, which the trainer posts one group ahead of the compute that needs it). Priorities: tic
 * gives both the group's forward index, so the first layer's gradients and parameters go first;
 * fifo gives every request the same priority, so they run in the order they became posted; tac
 * needs the bucketer's measurements and is refused.
 * Compute markers go to the bucketer (DIST_ALLREDUCE) or straight to the timeline.
 *
 * counters_take gives the DP gradients' and all-gathers' bytes sent, estimated from the
 * algorithms' traffic (a ring moves 2(p-1)/p of an all-reduce's bytes per rank, (p-1)/p of a
 * reduce-scatter's or all-gather's), times the compressor's measured ratio of encoded bytes to
 * fp32 bytes over the same interval; tempo has no per-request counters. dist.c times the waits
 * and counts the TP and PP traffic around these methods (dist.h's dist_counters_t).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "tempo.h"
#include "trainer/dist.h"

typedef struct {
    tempo_comm_t world;     /* the job's; the groups' communicators are d->mesh's (comm_of) */
    char err[512];
    char desc[512];
    dist_mode_t mode;
    float *grads;
    dist_group_t *groups;
    int ngroups;
    int sync;
    tempo_bucketer_t bk;
    tempo_compressor_t qc;
    tempo_request_t *rs, *ag; /* (ngroups) posted requests, NULL when none */
    dist_pad_t *pad;          /* (ngroups) DIST_REDUCE_SCATTER: the padding of the groups that
                               * dp does not divide (dist.h) */
    double raw_bytes;       /* uncompressible traffic since the last take (all-gathers) */
    double grad_bytes;      /* fp32 gradient traffic before compression */
    tempo_compressor_stats_t q0;
    int fifo;               /* DIST_REDUCE_SCATTER: one priority for all, i.e. posted order */
    char span[64];          /* DIST_REDUCE_SCATTER: the open compute span's name */
} tdist_t;

/* This rank's communicator of mesh group g (MESH_*): the DP dimension is the job's until
 * mesh_build, the others NULL. */
static tempo_comm_t comm_of(const dist_t *d, int g)
{
    return d->mesh.comm[g];
}

static int fail(dist_t *d, const char *what, tempo_status_t st)
{
    tdist_t *t = d->impl;
    snprintf(t->err, sizeof t->err, "%s: %s (%s)", what, tempo_last_error(comm_of(d, MESH_DP)),
             tempo_status_name(st));
    return -1;
}

static int t_sum_f64(dist_t *d, double *x, int n)
{
    tempo_status_t st =
        tempo_allreduce(comm_of(d, MESH_DP), x, x, (size_t)n, TEMPO_FLOAT64, TEMPO_SUM);
    return st == TEMPO_OK ? 0 : fail(d, "all-reduce of statistics", st);
}

static int t_barrier(dist_t *d)
{
    tempo_status_t st = tempo_barrier(comm_of(d, MESH_DP));
    return st == TEMPO_OK ? 0 : fail(d, "barrier", st);
}

/* A policy name, in any case as TEMPO_SCHED takes it. */
static int parse_sched(const char *s, tempo_sched_t *p)
{
    if (!s || !strcasecmp(s, "tic")) {
        *p = TEMPO_SCHED_TIC;
    } else if (!strcasecmp(s, "tac")) {
        *p = TEMPO_SCHED_TAC;
    } else if (!strcasecmp(s, "fifo")) {
        *p = TEMPO_SCHED_FIFO;
    } else {
        return -1;
    }
    return 0;
}

static const char *sched_name(tempo_sched_t s)
{
    return s == TEMPO_SCHED_TAC ? "tac" : s == TEMPO_SCHED_FIFO ? "fifo" : "tic";
}

/* Where group g's gradients are (dist_group_t.grad). */
static float *group_grad(const tdist_t *t, int g)
{
    return t->groups[g].grad ? t->groups[g].grad : t->grads + t->groups[g].off;
}

/* The kind of compressor qc is (tempo_compressor_kind's entry named by its canonical spec). */
static int compressor_kind(tempo_compressor_t qc, tempo_compressor_kind_t *k_p)
{
    const char *spec = tempo_compressor_spec(qc);
    const size_t n = strcspn(spec, ":");
    for (size_t i = 0; tempo_compressor_kind(i, k_p) == TEMPO_OK; i++) {
        if (strlen(k_p->name) == n && !strncmp(k_p->name, spec, n)) {
            return 0;
        }
    }
    return -1;
}

static int t_grads_check(dist_t *d, const dist_grad_opts_t *o, char *err, size_t len)
{
    (void)d;
    tempo_sched_t sched;
    const char *csrc = o->compress_src ? o->compress_src : "--compress";
    const char *ssrc = o->sched_src ? o->sched_src : "--sched";
    const char *eq = ssrc[0] == 'T' ? "=" : " ";
    if (parse_sched(o->sched, &sched)) {
        snprintf(err, len, "%s%s%s: unknown scheduling policy (tic, tac or fifo)", ssrc, eq,
                 o->sched);
        return -1;
    }
    if (o->mode == DIST_REDUCE_SCATTER && sched == TEMPO_SCHED_TAC) {
        snprintf(err, len,
                 "%s%stac needs --zero 0 (the bucketer measures the per-layer times it orders "
                 "by); use tic or fifo with --zero 1, 2 or 3", ssrc, eq);
        return -1;
    }
    if (o->mode == DIST_REDUCE_SCATTER && o->bucket_bytes) {
        snprintf(err, len,
                 "--bucket-bytes sizes the buckets of --zero 0 (all-reduce); --zero 1, 2 and 3 "
                 "reduce-scatter each layer group as its own request: leave it out");
        return -1;
    }
    if (!o->compress || !*o->compress || !strcmp(o->compress, "none")) {
        return 0;
    }
    tempo_compressor_t qc;
    tempo_compressor_kind_t k;
    tempo_status_t st = tempo_compressor_create(o->compress, &qc);
    if (st != TEMPO_OK) { /* not a communicator's error: the calling thread's */
        snprintf(err, len, "%s %s: %s (%s)", csrc, o->compress, tempo_last_error(NULL),
                 tempo_status_name(st));
        return -1;
    }
    int rc = 0;
    if (o->mode == DIST_REDUCE_SCATTER && !compressor_kind(qc, &k) && !k.reduce_scatter) {
        snprintf(err, len,
                 "%s %s: %s compresses all-reduce only (its low-rank factors need the whole "
                 "gradient), and --zero 1, 2 and 3 reduce-scatter the gradients: use --zero 0, "
                 "or another compressor (tempo-info -q)", csrc, o->compress, k.name);
        rc = -1;
    }
    tempo_compressor_destroy(qc);
    return rc;
}

static int t_grads_register(dist_t *d, float *grads, const dist_group_t *groups, int ngroups,
                            const dist_grad_opts_t *o)
{
    tdist_t *t = d->impl;
    tempo_status_t st;
    tempo_sched_t sched;
    if (t_grads_check(d, o, t->err, sizeof t->err) || parse_sched(o->sched, &sched)) {
        return -1;
    }
    t->mode = o->mode;
    t->grads = grads;
    t->groups = calloc((size_t)ngroups, sizeof(*t->groups));
    t->rs = calloc((size_t)ngroups, sizeof(*t->rs));
    t->ag = calloc((size_t)ngroups, sizeof(*t->ag));
    const int pad_p = o->mode == DIST_REDUCE_SCATTER ? d->size : 1; /* 1: no padding */
    if (!t->groups || !t->rs || !t->ag || dist_pads_create(groups, ngroups, pad_p, &t->pad)) {
        snprintf(t->err, sizeof t->err, "out of memory registering %d gradient groups", ngroups);
        return -1;
    }
    t->ngroups = ngroups; /* from here on t_destroy walks the arrays */
    memcpy(t->groups, groups, (size_t)ngroups * sizeof(*groups));
    if (o->compress && *o->compress && strcmp(o->compress, "none") != 0) {
        st = tempo_compressor_create(o->compress, &t->qc);
        if (st != TEMPO_OK) { /* not a communicator's error: the calling thread's */
            snprintf(t->err, sizeof t->err, "%s %s: %s (%s)",
                     o->compress_src ? o->compress_src : "--compress", o->compress,
                     tempo_last_error(NULL), tempo_status_name(st));
            return -1;
        }
        tempo_compressor_stats(t->qc, &t->q0);
    }
    if (t->mode == DIST_REDUCE_SCATTER) {
        t->fifo = sched == TEMPO_SCHED_FIFO;
        snprintf(t->desc, sizeof t->desc,
                 "tempo: per-layer scheduled reduce-scatter + all-gather, policy %s, %s",
                 sched_name(sched), t->qc ? tempo_compressor_spec(t->qc) : "uncompressed");
        return 0;
    }
    tempo_tensor_desc_t *td = calloc((size_t)ngroups, sizeof(*td));
    if (!td) {
        snprintf(t->err, sizeof t->err, "out of memory registering %d gradient groups", ngroups);
        return -1;
    }
    for (int g = 0; g < ngroups; g++) {
        td[g] = (tempo_tensor_desc_t){.id = (uint64_t)g + 1, .grad = group_grad(t, g),
                                      .count = groups[g].n, .dtype = TEMPO_FLOAT32,
                                      .layer = groups[g].layer, .name = groups[g].name};
    }
    tempo_bucketer_config_t cfg = {0};
    cfg.field_mask = TEMPO_BUCKETER_OP | TEMPO_BUCKETER_SCHED | TEMPO_BUCKETER_COMPRESSOR;
    cfg.op = TEMPO_AVG;
    cfg.sched = sched;
    cfg.compressor = t->qc;
    if (o->bucket_bytes) {
        cfg.field_mask |= TEMPO_BUCKETER_BUCKET_BYTES;
        cfg.bucket_bytes = o->bucket_bytes;
    }
    st = tempo_bucketer_create(comm_of(d, MESH_DP), td, (size_t)ngroups, &cfg, &t->bk);
    free(td);
    if (st != TEMPO_OK) {
        return fail(d, "bucketer", st);
    }
    size_t nb = tempo_bucketer_nbuckets(t->bk);
    int nq = 0;
    for (size_t i = 0; i < nb; i++) {
        tempo_bucket_info_t bi;
        tempo_bucketer_bucket_info(t->bk, i, &bi);
        nq += bi.compressed;
    }
    snprintf(t->desc, sizeof t->desc,
             "tempo: bucketer, %zu bucket%s (%d compressed), policy %s, %s", nb,
             nb == 1 ? "" : "s", nq, sched_name(sched),
             t->qc ? tempo_compressor_spec(t->qc) : "uncompressed");
    return 0;
}

static int t_grads_begin(dist_t *d, int sync)
{
    tdist_t *t = d->impl;
    t->sync = sync;
    if (t->bk) {
        tempo_status_t st = tempo_bucketer_begin(t->bk, sync);
        return st == TEMPO_OK ? 0 : fail(d, "bucketer begin", st);
    }
    return 0;
}

static int t_grads_ready(dist_t *d, int g, float *buf)
{
    tdist_t *t = d->impl;
    const dist_group_t *gr = &t->groups[g];
    if (t->bk) {
        if (buf != group_grad(t, g)) {
            snprintf(t->err, sizeof t->err, "group %s: the bucketer reduces the registered "
                     "buffer only", gr->name);
            return -1;
        }
        tempo_status_t st = tempo_bucketer_ready(t->bk, (uint64_t)g + 1);
        if (t->sync) {
            t->grad_bytes += 2 * dist_ring_share(d) * 4.0 * (double)gr->n;
        }
        return st == TEMPO_OK ? 0 : fail(d, "bucketer ready", st);
    }
    if (!t->sync) {
        return 0;
    }
    size_t q = dist_slice(gr->n, d->size, 0, NULL, NULL);
    tempo_attr_t a = {0};
    a.field_mask = TEMPO_ATTR_PRIORITY | TEMPO_ATTR_TAG | TEMPO_ATTR_NAME;
    a.priority = t->fifo ? 0 : gr->layer;
    a.tag = (uint64_t)g + 1;
    a.name = gr->name;
    if (t->qc) {
        a.field_mask |= TEMPO_ATTR_COMPRESSOR;
        a.compressor = t->qc;
    }
    float *base = dist_pad_rs_in(&t->pad[g], gr->n, d->size, buf);
    tempo_status_t st = tempo_ireduce_scatter(comm_of(d, MESH_DP), base, base + (size_t)d->rank * q,
                                              q, TEMPO_FLOAT32, TEMPO_AVG, &a, &t->rs[g]);
    t->grad_bytes += dist_ring_share(d) * 4.0 * (double)gr->n;
    return st == TEMPO_OK ? 0 : fail(d, "reduce-scatter of gradients", st);
}

static int wait_req(dist_t *d, tempo_request_t *r, const char *what)
{
    if (!*r) {
        return 0;
    }
    tempo_status_t st = tempo_wait(r);
    *r = NULL;
    return st == TEMPO_OK ? 0 : fail(d, what, st);
}

static int t_grads_wait(dist_t *d, int g)
{
    tdist_t *t = d->impl;
    if (t->bk) {
        tempo_status_t st = tempo_bucketer_wait_tensor(t->bk, (uint64_t)g + 1);
        return st == TEMPO_OK ? 0 : fail(d, "gradient all-reduce", st);
    }
    if (wait_req(d, &t->rs[g], "reduce-scatter of gradients")) {
        return -1;
    }
    dist_pad_rs_out(&t->pad[g], t->groups[g].n, d->size, d->rank);
    return 0;
}

/* Post the all-gather of group g's slices from send (this rank's dist_slice) into recv (n). */
static int post_gather(dist_t *d, int g, const float *send, float *recv)
{
    tdist_t *t = d->impl;
    const dist_group_t *gr = &t->groups[g];
    size_t q = dist_slice(gr->n, d->size, d->rank, NULL, NULL);
    float *out = dist_pad_ag_in(&t->pad[g], gr->n, d->size, d->rank, send, recv);
    if (out != recv) { /* through the padded copy, copied out at the wait */
        send = out + (size_t)d->rank * q, recv = out;
    }
    tempo_attr_t a = {0};
    a.field_mask = TEMPO_ATTR_PRIORITY | TEMPO_ATTR_TAG | TEMPO_ATTR_NAME;
    a.priority = t->fifo ? 0 : gr->layer;
    a.tag = (uint64_t)t->ngroups + (uint64_t)g + 1;
    a.name = gr->name;
    tempo_status_t st =
        tempo_iallgather(comm_of(d, MESH_DP), send, recv, q, TEMPO_FLOAT32, &a, &t->ag[g]);
    t->raw_bytes += dist_ring_share(d) * 4.0 * (double)gr->n;
    return st == TEMPO_OK ? 0 : fail(d, "all-gather of slices", st);
}

static int t_gather(dist_t *d, int g, float *buf)
{
    const dist_group_t *gr = &((tdist_t *)d->impl)->groups[g];
    float *base = buf + gr->off;
    size_t off;
    dist_slice(gr->n, d->size, d->rank, &off, NULL);
    return post_gather(d, g, base + off, base);
}

static int t_gather_to(dist_t *d, int g, const float *slice, float *full)
{
    return post_gather(d, g, slice, full);
}

static int t_gather_wait(dist_t *d, int g)
{
    tdist_t *t = d->impl;
    if (wait_req(d, &t->ag[g], "all-gather of slices")) {
        return -1;
    }
    dist_pad_ag_out(&t->pad[g], t->groups[g].n);
    return 0;
}

static int t_compute_begin(dist_t *d, int g, int phase)
{
    tdist_t *t = d->impl;
    tempo_status_t st;
    if (t->bk) {
        st = tempo_bucketer_compute_begin(t->bk, t->groups[g].layer,
                                          phase ? TEMPO_PHASE_BACKWARD : TEMPO_PHASE_FORWARD);
    } else {
        snprintf(t->span, sizeof t->span, "%s %s", phase ? "backward" : "forward",
                 t->groups[g].name);
        st = tempo_trace_begin(comm_of(d, MESH_DP), t->span);
    }
    return st == TEMPO_OK ? 0 : fail(d, "compute marker", st);
}

static int t_compute_end(dist_t *d)
{
    tdist_t *t = d->impl;
    tempo_status_t st;
    if (t->bk) {
        st = tempo_bucketer_compute_end(t->bk);
    } else {
        st = tempo_trace_end(comm_of(d, MESH_DP), t->span);
    }
    return st == TEMPO_OK ? 0 : fail(d, "compute marker", st);
}

static void t_counters_take(dist_t *d, dist_counters_t *c)
{
    tdist_t *t = d->impl;
    double ratio = 1.0;
    if (t->qc) {
        tempo_compressor_stats_t q;
        tempo_compressor_stats(t->qc, &q);
        uint64_t coords = q.coords - t->q0.coords, out = q.bytes_out - t->q0.bytes_out;
        /* requests under the compressor's min_bytes run uncompressed and are not counted */
        if (coords > 0) {
            ratio = (double)out / (4.0 * (double)coords);
        }
        t->q0 = q;
    }
    c->bytes_sent[DIST_DP] = t->raw_bytes + t->grad_bytes * ratio;
    t->raw_bytes = t->grad_bytes = 0;
}

static const char *t_describe(dist_t *d)
{
    return ((tdist_t *)d->impl)->desc;
}

static const char *t_error(dist_t *d)
{
    return ((tdist_t *)d->impl)->err;
}

static void t_abort(dist_t *d)
{
    tdist_t *t = d->impl;
    tempo_comm_abort(t->world);
}

/* A failure on the TP communicator, in dist_error's words. */
static int tp_fail(dist_t *d, const char *what, tempo_status_t st)
{
    tdist_t *t = d->impl;
    snprintf(t->err, sizeof t->err, "tensor parallel %s: %s (%s)", what,
             tempo_last_error(comm_of(d, MESH_TP)), tempo_status_name(st));
    return -1;
}

static int t_tp_allreduce(dist_t *d, float *buf, size_t n, int max)
{
    tempo_status_t st = tempo_allreduce(comm_of(d, MESH_TP), buf, buf, n, TEMPO_FLOAT32,
                                        max ? TEMPO_MAX : TEMPO_SUM);
    return st == TEMPO_OK ? 0 : tp_fail(d, "all-reduce", st);
}

static int t_tp_sum_f64(dist_t *d, double *x, int n)
{
    tempo_status_t st =
        tempo_allreduce(comm_of(d, MESH_TP), x, x, (size_t)n, TEMPO_FLOAT64, TEMPO_SUM);
    return st == TEMPO_OK ? 0 : tp_fail(d, "all-reduce of statistics", st);
}

static int t_tp_allgather(dist_t *d, const float *send, float *recv, size_t n)
{
    tempo_status_t st = tempo_allgather(comm_of(d, MESH_TP), send, recv, n, TEMPO_FLOAT32);
    return st == TEMPO_OK ? 0 : tp_fail(d, "all-gather", st);
}

static int t_tp_reduce_scatter(dist_t *d, const float *send, float *recv, size_t n)
{
    tempo_status_t st =
        tempo_reduce_scatter(comm_of(d, MESH_TP), send, recv, n, TEMPO_FLOAT32, TEMPO_SUM);
    return st == TEMPO_OK ? 0 : tp_fail(d, "reduce-scatter", st);
}

/* mesh_build's split of the job's communicator (TEMPO_UNDEFINED: not a member). */
static int t_split(dist_t *d, int color, int key, void **comm_p, int *rank_p, int *size_p,
                   char *err)
{
    tdist_t *t = d->impl;
    tempo_comm_t c = NULL;
    tempo_status_t st = tempo_comm_split(t->world, color < 0 ? TEMPO_UNDEFINED : color, key, &c);
    if (st != TEMPO_OK) {
        snprintf(err, 256, "cannot split the job into its mesh's groups: %s (%s)",
                 tempo_last_error(t->world), tempo_status_name(st));
        return -1;
    }
    *comm_p = c;
    *rank_p = c ? tempo_comm_rank(c) : 0;
    *size_p = c ? tempo_comm_size(c) : 1;
    return 0;
}

/* A failure on a pipeline communicator, in dist_error's words. */
static int pp_fail(dist_t *d, tempo_comm_t c, const char *what, tempo_status_t st)
{
    tdist_t *t = d->impl;
    snprintf(t->err, sizeof t->err, "pipeline %s: %s (%s)", what, tempo_last_error(c),
             tempo_status_name(st));
    return -1;
}

static int t_pp_post(dist_t *d, float *buf, size_t n, int peer, uint32_t tag, int send,
                     void **req_p)
{
    tempo_comm_t pp = comm_of(d, MESH_PP);
    tempo_request_t r = NULL;
    tempo_status_t st = send ? tempo_isend(pp, buf, n, TEMPO_FLOAT32, peer, tag, NULL, &r)
                             : tempo_irecv(pp, buf, n, TEMPO_FLOAT32, peer, tag, NULL, &r);
    if (st != TEMPO_OK) {
        return pp_fail(d, pp, send ? "send to the next stage" : "receive", st);
    }
    *req_p = r;
    return 0;
}

static int t_pp_wait(dist_t *d, void **req_p)
{
    tempo_request_t r = *req_p;
    tempo_status_t st = tempo_wait(&r);
    *req_p = NULL;
    return st == TEMPO_OK ? 0
                          : pp_fail(d, comm_of(d, MESH_PP), "send or receive between stages", st);
}

static int t_pp_allreduce(dist_t *d, int group, void *buf, size_t n, int f64)
{
    tempo_comm_t c = comm_of(d, group == DIST_PP_LINE    ? MESH_PP
                                : group == DIST_PP_EMBED ? MESH_EMB
                                                         : MESH_DP);
    tempo_status_t st = tempo_allreduce(c, buf, buf, n, f64 ? TEMPO_FLOAT64 : TEMPO_FLOAT32,
                                        TEMPO_SUM);
    static const char *what[3] = {"all-reduce over the pipeline line",
                                  "all-reduce of the tied embedding", "all-reduce over DP"};
    return st == TEMPO_OK ? 0 : pp_fail(d, c, what[group], st);
}

static int t_pp_trace(dist_t *d, const char *name, int begin)
{
    tempo_comm_t pp = comm_of(d, MESH_PP);
    tempo_status_t st = begin ? tempo_trace_begin(pp, name) : tempo_trace_end(pp, name);
    return st == TEMPO_OK ? 0 : pp_fail(d, pp, "trace", st);
}

static int t_destroy(dist_t *d)
{
    if (!d) {
        return 0;
    }
    tdist_t *t = d->impl;
    int rc = 0;
    for (int g = 0; g < t->ngroups; g++) {
        rc |= wait_req(d, &t->rs[g], "reduce-scatter of gradients");
        rc |= wait_req(d, &t->ag[g], "all-gather of slices");
    }
    if (t->bk && tempo_bucketer_destroy(t->bk) != TEMPO_OK) {
        rc = -1;
    }
    tempo_compressor_destroy(t->qc);
    for (int g = MESH_NGROUPS - 1; g >= 0; g--) { /* the mesh's splits, then the job last: it
                                                  * closes the job */
        if (comm_of(d, g) != t->world && tempo_comm_destroy(comm_of(d, g)) != TEMPO_OK) {
            rc = -1;
        }
    }
    if (tempo_comm_destroy(t->world) != TEMPO_OK) {
        rc = -1;
    }
    dist_pads_destroy(t->pad, t->ngroups);
    free(t->groups);
    free(t->rs);
    free(t->ag);
    free(t);
    return rc ? -1 : 0;
}

int dist_open_tempo(dist_t *d, char *err)
{
    tdist_t *t = calloc(1, sizeof(*t));
    if (!t) {
        snprintf(err, 256, "out of memory");
        return -1;
    }
    tempo_status_t st = tempo_comm_init_env(&t->world);
    if (st != TEMPO_OK) {
        snprintf(err, 256, "cannot join the job with tempo: %s", tempo_last_error(NULL));
        free(t);
        return -1;
    }
    *d = (dist_t){.backend = "tempo",
                  .rank = tempo_comm_rank(t->world),
                  .size = tempo_comm_size(t->world),
                  .mesh = {.comm = {[MESH_DP] = t->world}},
                  .impl = t,
                  .sum_f64 = t_sum_f64,
                  .barrier = t_barrier,
                  .grads_check = t_grads_check,
                  .grads_register = t_grads_register,
                  .grads_begin = t_grads_begin,
                  .grads_ready = t_grads_ready,
                  .grads_wait = t_grads_wait,
                  .gather = t_gather,
                  .gather_to = t_gather_to,
                  .gather_wait = t_gather_wait,
                  .compute_begin = t_compute_begin,
                  .compute_end = t_compute_end,
                  .counters_take = t_counters_take,
                  .describe = t_describe,
                  .error = t_error,
                  .abort = t_abort,
                  .split = t_split,
                  .tp_allreduce = t_tp_allreduce,
                  .tp_sum_f64 = t_tp_sum_f64,
                  .tp_allgather = t_tp_allgather,
                  .tp_reduce_scatter = t_tp_reduce_scatter,
                  .pp_post = t_pp_post,
                  .pp_wait = t_pp_wait,
                  .pp_allreduce = t_pp_allreduce,
                  .pp_trace = t_pp_trace,
                  .destroy = t_destroy};
    return 0;
}
