/*
 * dist.h — the trainer's communication backend: one small interface that tempo (dist_tempo.c) and
 * MPI implement, so the training loop never names a library.
 *
 * What it is. The data-parallel group of the job and the few things a data-parallel trainer asks of
 * it: sums of a few doubles (loss, gradient norm, timers), a barrier, and the synchronization of
 * the gradient "groups" of one flat gradient buffer (contiguous ranges that backward finishes one by
 * one, last layer first), in one of two modes fixed at registration:
 *   DIST_ALLREDUCE       every rank ends with the mean over ranks of every group (ZeRO 0);
 *   DIST_REDUCE_SCATTER  rank r ends with the mean of slice r of every group (dist_slice: group g's
 *                        n elements cut in dp slices of ceil(n / dp), the last clipped; ZeRO 1 and
 *                        2), and the parameters' slices are
 *                        gathered back with gather (every rank ends with every slice), or, for
 *                        ZeRO 3, gather_to from the rank's own copy of its slices into a buffer
 *                        of the group (the parameters, gathered just before they are used).
 * A group is posted as soon as it is ready (overlapping the rest of backward) and waited for just
 * before it is used, so the next forward waits only for the layer it is about to run.
 *
 * The mesh (both backends; trainer/mesh.h): mesh_build cuts the job into P pipeline stages x D x T
 * with the colors and keys of mesh.c, through split, into one communicator per dimension and the
 * embedding group (the first and last stage of each line, for the tied wte gradient), which d->mesh
 * holds. Afterwards rank and size and every method above belong to the DP dimension (the gradient
 * groups sync among the ranks that hold the same TP shard and stage), the tp_* methods run exactly
 * (uncompressed, blocking) on the rank's TP group, pp_post / pp_wait move activations between
 * stages (non-blocking, tagged, on the pipeline line) and pp_allreduce sums floats or doubles over
 * one of the groups (blocking, exact: no compression). Before mesh_build the job is all DP, and
 * tp_size and pp_size are 1. Both backends build the same groups from the same arithmetic, so a
 * layout computes the same on either; only the reduction order inside a collective may differ.
 *
 * What it is not: a place for the optimizer.
 *
 * Errors: functions return 0 or -1; after -1 dist_error() says what failed in words (the backend's
 * own message included). A failure of a collective is fatal for the job: the caller reports it and
 * calls dist_abort().
 */
#ifndef TEMPO_TRAINER_DIST_H
#define TEMPO_TRAINER_DIST_H

#include <stddef.h>
#include <stdint.h>

#include "trainer/mesh.h"

typedef enum { DIST_ALLREDUCE = 0, DIST_REDUCE_SCATTER = 1 } dist_mode_t;

/* One gradient group: a contiguous range of the gradient (and parameter) buffer. */
typedef struct {
    size_t off, n;    /* elements */
    float *grad;      /* the group's gradients when they are not at grads + off (groups of
                       * several buffers, as a pipeline rank's chunks: grads_register's grads is
                       * then NULL, and off is in the group's own buffer); NULL: grads + off */
    int layer;        /* forward index of its consumer (0 = first to run): its priority */
    const char *name; /* for logs and traces */
} dist_group_t;

typedef struct {
    dist_mode_t mode;
    const char *compress; /* compressor spec for gradients, NULL or "none": uncompressed */
    const char *compress_src; /* where the spec came from, for messages: "--compress" (NULL) or
                               * "TEMPO_COMPRESS" */
    const char *sched;    /* "tic", "tac" or "fifo" in any case (the priority policy) */
    const char *sched_src; /* where it came from, for messages: "--sched" (NULL) or "TEMPO_SCHED" */
    size_t bucket_bytes;  /* fusion of all-reduce mode; 0: the backend's default */
} dist_grad_opts_t;

/* The mesh's dimensions, for the counters: DP (gradients, ZeRO's all-gathers, sum_f64,
 * pp_allreduce over DIST_PP_DP), TP (the tp_* methods: TP and SP), PP (pp_post / pp_wait and
 * pp_allreduce over the line and the embedding group). */
enum { DIST_DP = 0, DIST_TP = 1, DIST_PP = 2, DIST_NDIMS = 3 };

/* Traffic and waiting per dimension since the last counters_take:
 *   bytes_sent  payload bytes this rank sent, estimated from the algorithms' traffic: a ring's
 *               share of a collective's bytes (2(p-1)/p of an all-reduce's, (p-1)/p of an
 *               all-gather's or reduce-scatter's, over the p ranks of the dimension's group),
 *               a point-to-point send's bytes; DP gradients at their compressed size;
 *   wait_s      seconds this rank spent blocked in the dimension's calls: the whole of a
 *               blocking collective (sum_f64, the tp_* methods, pp_allreduce), the wait of a
 *               non-blocking one (grads_wait, gather_wait, pp_wait). That is the exposed
 *               communication: what overlaps compute is not counted, and a wait's time includes
 *               the peers' lateness (a pipeline's bubble, a slower DP rank).
 * dist.c counts every wait_s and the TP and PP bytes around the backend's methods, the same for
 * every backend; the backend's counters_take fills bytes_sent[DIST_DP] of its gradient
 * collectives and all-gathers (only it knows the compressed size), and dist.c adds the rest. All
 * the counted calls are made by the caller's thread, one at a time, so the waits counted between
 * two takes are disjoint spans of the time between them. */
typedef struct {
    double bytes_sent[DIST_NDIMS];
    double wait_s[DIST_NDIMS];
} dist_counters_t;

typedef struct dist dist_t;

struct dist {
    const char *backend; /* "tempo" or "mpi" */
    int rank, size;             /* in the data-parallel dimension */
    int world_rank, world_size; /* in the job (dist_open sets them) */
    int tp_rank, tp_size;       /* in the tensor-parallel group (0, 1 before mesh_build) */
    int pp_rank, pp_size;       /* the pipeline stage, of pp_size (0, 1 before mesh_build) */
    mesh_t mesh;                /* the job's mesh (mesh.h): trivial (all DP, comm[MESH_DP] the
                                 * job's) until mesh_build; the fields above are its coordinates */
    void *impl;

    int (*sum_f64)(dist_t *d, double *x, int n); /* in place, blocking, same order on every rank */
    int (*barrier)(dist_t *d);
    /* Whether opts can work in this backend (local, before any work: every rank gets the same
     * answer): 0, or -1 with the reason, naming the flag or variable to change, in err (len
     * bytes). grads_register checks the same. */
    int (*grads_check)(dist_t *d, const dist_grad_opts_t *opts, char *err, size_t len);
    /* Register the gradient groups of grads; once. */
    int (*grads_register)(dist_t *d, float *grads, const dist_group_t *groups, int ngroups,
                          const dist_grad_opts_t *opts);
    /* Start an iteration's gradients: sync = 0 for a micro-step that keeps them local. */
    int (*grads_begin)(dist_t *d, int sync);
    /* Group g's gradients are final for this micro-step, in buf: the registered buffer's range
     * (grads + off) or, with DIST_REDUCE_SCATTER, any buffer of the group's n elements (ZeRO 2's
     * reused backward buffers), where rank r's mean slice lands at its dist_slice offset. */
    int (*grads_ready)(dist_t *d, int g, float *buf);
    int (*grads_wait)(dist_t *d, int g);  /* group g is synchronized (no-op if nothing posted) */
    /* DIST_REDUCE_SCATTER: post the in-place all-gather of group g's dp slices of buf (laid out
     * like the parameters: the parameters after an update, or a gradient for a dump); one at a
     * time per group, until gather_wait. */
    int (*gather)(dist_t *d, int g, float *buf);
    /* DIST_REDUCE_SCATTER, ZeRO 3: post the all-gather of group g from this rank's slice (its
     * dist_slice length) into full (the group's n, rank r's slice at its offset); shares
     * gather's one request per group, so gather_wait completes it. */
    int (*gather_to)(dist_t *d, int g, const float *slice, float *full);
    int (*gather_wait)(dist_t *d, int g);
    /* Optional markers around the caller's compute of group g (phase 0 forward, 1 backward): the
     * timeline's compute spans, and the per-layer times of the tac policy. Spans do not nest. */
    int (*compute_begin)(dist_t *d, int g, int phase);
    int (*compute_end)(dist_t *d);
    /* The counters since the last take (dist_counters_t), which start again from 0. */
    void (*counters_take)(dist_t *d, dist_counters_t *c_p);
    const char *(*describe)(dist_t *d); /* one line: transport, compressor, policy, buckets */
    const char *(*error)(dist_t *d);
    void (*abort)(dist_t *d);
    /* A communicator from the job's (collective over the job): the ranks of equal color, ordered by
     * key, color < 0 for none (*comm_p NULL). *comm_p is the backend's handle (mesh_t.comm),
     * *rank_p and *size_p this rank's place in it (0 and 1 for none); the backend frees it when
     * the job ends. -1 with the reason in err (256 bytes). mesh_build is its caller. */
    int (*split)(dist_t *d, int color, int key, void **comm_p, int *rank_p, int *size_p,
                 char *err);
    /* On the TP group, in place and blocking: sum (max = 0) or max (max = 1) of n floats; sums of
     * n doubles; the all-gather of every rank's n floats into recv (tp_size * n, rank order); the
     * reduce-scatter of send (tp_size * n) summed over the group, block tp_rank into recv (n). */
    int (*tp_allreduce)(dist_t *d, float *buf, size_t n, int max);
    int (*tp_sum_f64)(dist_t *d, double *x, int n);
    int (*tp_allgather)(dist_t *d, const float *send, float *recv, size_t n);
    int (*tp_reduce_scatter)(dist_t *d, const float *send, float *recv, size_t n);
    /* On the PP communicator: post the send (send = 1) or receive of n floats to/from stage peer
     * with tag into *req_p (an opaque request), and wait for it (*req_p NULL afterwards). */
    int (*pp_post)(dist_t *d, float *buf, size_t n, int peer, uint32_t tag, int send,
                   void **req_p);
    int (*pp_wait)(dist_t *d, void **req_p);
    /* In place, blocking: the sum of n floats (f64 = 0) or doubles over group (DIST_PP_*). */
    int (*pp_allreduce)(dist_t *d, int group, void *buf, size_t n, int f64);
    /* A span of the caller's compute on the timeline (TEMPO_TRACE): begin = 1, then 0. */
    int (*pp_trace)(dist_t *d, const char *name, int begin);
    int (*destroy)(dist_t *d); /* leave the job, free impl (not d: callers use dist_close) */
};

/* pp_allreduce's groups: the pipeline line (PP), the embedding group (first and last stage of a
 * line; other ranks must not call), the DP group. */
enum { DIST_PP_LINE = 0, DIST_PP_EMBED = 1, DIST_PP_DP = 2 };

/* Join the job (tempo-run, mpirun or srun) with the named backend ("tempo" or "mpi"). NULL with a
 * message in err (256 bytes) if the backend is unknown, not built, or the job cannot be joined. */
dist_t *dist_open(const char *backend, char *err);

/* Shared by the backends: a ring's share of a collective's bytes that each rank sends, (p-1)/p. */
double dist_ring_share(const dist_t *d);

/* DIST_REDUCE_SCATTER's slices of a group of n elements over p ranks, as DeepSpeed and FSDP pad
 * their flat buffers: the group is padded with zeros to p * q elements, q = ceil(n / p), and rank r
 * owns [r q, (r + 1) q) of it clipped to n (the last ranks' slices may be shorter, even empty).
 * Returns q; *off_p and *len_p (either may be NULL) are rank r's slice in the group. When p divides
 * n the slices are the p equal n/p of before and the backends add no copy. */
size_t dist_slice(size_t n, int p, int r, size_t *off_p, size_t *len_p);

/* The padding of a group that p does not divide, for the backends' DIST_REDUCE_SCATTER: copies
 * of the group padded with zeros to p * q floats (dist_slice) for its reduce-scatter (rs) and its
 * all-gather (ag), and where a posted collective's result goes when it is waited for; all NULL for
 * a group that p divides, which the backends reduce and gather in place. */
typedef struct {
    float *rs, *ag;         /* (p * q) floats, or NULL */
    float *rs_dst, *ag_dst; /* the caller's buffer of the collective posted last */
} dist_pad_t;

/* (ngroups) pads for groups over p ranks into *pads_p: 0, or -1 when out of memory (nothing left
 * allocated). dist_pads_destroy(NULL, n) is a no-op. */
int dist_pads_create(const dist_group_t *groups, int ngroups, int p, dist_pad_t **pads_p);
void dist_pads_destroy(dist_pad_t *pads, int ngroups);
/* The reduce-scatter's input of a group of n in buf: buf, or pd->rs holding buf's n floats and
 * zeros (rs_dst = buf). dist_pad_rs_out, at the wait of an in-place reduce-scatter of pd->rs,
 * copies rank r's slice into rs_dst at its dist_slice offset (nothing when not padded). */
float *dist_pad_rs_in(dist_pad_t *pd, size_t n, int p, float *buf);
void dist_pad_rs_out(dist_pad_t *pd, size_t n, int p, int r);
/* The all-gather's output of a group of n into recv, from rank r's slice at send: recv (nothing
 * copied), or pd->ag with the slice and zeros at its r-th q floats (ag_dst = recv), which
 * dist_pad_ag_out copies into ag_dst at the wait. */
float *dist_pad_ag_in(dist_pad_t *pd, size_t n, int p, int r, const float *send, float *recv);
void dist_pad_ag_out(dist_pad_t *pd, size_t n);

/* The backends this build has, e.g. "tempo, mpi". */
const char *dist_backends(void);

/* Leave the job and free d (the backend's destroy, then d itself): 0, or -1 if the backend
 * reported an error while shutting down. */
int dist_close(dist_t *d);

/* The backends behind dist_open (dist_tempo.c; dist_mpi.c when configure found MPI): fill the
 * zeroed *d (and its impl) or return -1 with the reason in err (256 bytes). Their destroy frees
 * only what they allocated; dist_close frees d. */
int dist_open_tempo(dist_t *d, char *err);
int dist_open_mpi(dist_t *d, char *err);

#endif /* TEMPO_TRAINER_DIST_H */
