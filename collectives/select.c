/*
 * select.c — the algorithm table, the α-β cost model that picks an algorithm per operation, and
 * TEMPO_ALGO overrides ("allreduce:ring,broadcast:pipeline").
 *
 * Cost model: a message costs alpha, every byte moved beta and every byte reduced gamma, with
 * parameters of the slowest transport among the communicator's ranks (shm inside a host, tcp
 * otherwise; values measured on the development machine, see the README). Selection depends only on
 * the collective, the byte count, the rank count and the transports, which are the same on every
 * rank, so all ranks choose the same algorithm.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <strings.h>

#include "collectives/coll.h"
#include "gpu/nccl.h"
#include "core/cfg.h"

tempo_status_t tempo__allreduce_ring_start(tempo__op_t *op);
tempo_status_t tempo__allreduce_rhd_start(tempo__op_t *op);
tempo_status_t tempo__allreduce_rd_start(tempo__op_t *op);
tempo_status_t tempo__allreduce_shm_start(tempo__op_t *op);
const char *tempo__allreduce_shm_unusable(const tempo__op_t *op);
tempo_status_t tempo__reduce_scatter_ring_start(tempo__op_t *op);
tempo_status_t tempo__allgather_ring_start(tempo__op_t *op);
tempo_status_t tempo__broadcast_tree_start(tempo__op_t *op);
tempo_status_t tempo__broadcast_pipeline_start(tempo__op_t *op);
tempo_status_t tempo__reduce_tree_start(tempo__op_t *op);
tempo_status_t tempo__reduce_pipeline_start(tempo__op_t *op);
tempo_status_t tempo__alltoall_pairwise_start(tempo__op_t *op);
tempo_status_t tempo__barrier_dissemination_start(tempo__op_t *op);
tempo_status_t tempo__p2p_start(tempo__op_t *op);

static double lg(int n)
{
    return n > 1 ? ceil(log2((double)n)) : 0;
}

/* Extra cost of folding ranks beyond the largest power of two in and out. */
static double fold(const tempo__cost_t *m, double b)
{
    return tempo__pow2_floor(m->n) < m->n ? 2 * m->alpha + 2 * b * m->beta + b * m->gamma : 0;
}

static double c_ring(const tempo__cost_t *m, size_t bytes)
{
    double n = m->n, b = (double)bytes;
    return 2 * (n - 1) * m->alpha + 2 * (n - 1) / n * b * m->beta + (n - 1) / n * b * m->gamma;
}

static double c_rhd(const tempo__cost_t *m, size_t bytes)
{
    double n = m->n, b = (double)bytes, l = lg(tempo__pow2_floor(m->n));
    return 2 * l * m->alpha + 2 * (n - 1) / n * b * m->beta + (n - 1) / n * b * m->gamma +
           fold(m, b);
}

static double c_rd(const tempo__cost_t *m, size_t bytes)
{
    double b = (double)bytes, l = lg(tempo__pow2_floor(m->n));
    return l * (m->alpha + b * m->beta + b * m->gamma) + fold(m, b);
}

static double c_shm(const tempo__cost_t *m, size_t bytes)
{
    /* A few synchronisations plus about three passes over the data, at memory speed (measured on
     * the development machine: 16 MiB in 2.5 ms with 2 ranks, against 10+ ms for a ring over the
     * shm transport, which copies every byte twice per step). */
    (void)m;
    return 0.5e-6 + (double)bytes / 8e9;
}

static double c_tree(const tempo__cost_t *m, size_t bytes)
{
    return lg(m->n) * (m->alpha + (double)bytes * m->beta);
}

static double c_tree_reduce(const tempo__cost_t *m, size_t bytes)
{
    return lg(m->n) * (m->alpha + (double)bytes * (m->beta + m->gamma));
}

static double pipeline(const tempo__cost_t *m, size_t bytes, double per_byte)
{
    double seg = 256.0 * 1024, nseg = ceil((double)bytes / seg);
    if (nseg < 1) {
        nseg = 1;
    }
    return (nseg + m->n - 2) * (m->alpha + fmin(seg, (double)bytes) * per_byte);
}

static double c_pipe(const tempo__cost_t *m, size_t bytes)
{
    return pipeline(m, bytes, m->beta);
}

static double c_pipe_reduce(const tempo__cost_t *m, size_t bytes)
{
    return pipeline(m, bytes, m->beta + m->gamma);
}

static double c_only(const tempo__cost_t *m, size_t bytes)
{
    (void)m;
    (void)bytes;
    return 0;
}

const tempo__algo_t tempo__algos[] = {
    {TEMPO__COLL_ALLREDUCE, "shm",
     "shared-memory direct: slots for small buffers, pipelined staged reduce-scatter + all-gather "
     "for large ones (all ranks on one host)",
     tempo__allreduce_shm_unusable, c_shm, tempo__allreduce_shm_start},
    {TEMPO__COLL_ALLREDUCE, "ring", "ring reduce-scatter + ring all-gather (bandwidth-optimal)",
     NULL, c_ring, tempo__allreduce_ring_start},
    {TEMPO__COLL_ALLREDUCE, "rhd",
     "Rabenseifner: recursive-halving reduce-scatter + recursive-doubling all-gather", NULL, c_rhd,
     tempo__allreduce_rhd_start},
    {TEMPO__COLL_ALLREDUCE, "rd", "recursive doubling (latency-optimised, small buffers)", NULL,
     c_rd, tempo__allreduce_rd_start},
    {TEMPO__COLL_REDUCE_SCATTER, "ring", "ring reduce-scatter", NULL, c_only,
     tempo__reduce_scatter_ring_start},
    {TEMPO__COLL_ALLGATHER, "ring", "ring all-gather", NULL, c_only, tempo__allgather_ring_start},
    {TEMPO__COLL_BROADCAST, "tree", "binomial tree", NULL, c_tree, tempo__broadcast_tree_start},
    {TEMPO__COLL_BROADCAST, "pipeline", "pipelined chain of 256 KiB segments", NULL, c_pipe,
     tempo__broadcast_pipeline_start},
    {TEMPO__COLL_REDUCE, "tree", "binomial tree", NULL, c_tree_reduce, tempo__reduce_tree_start},
    {TEMPO__COLL_REDUCE, "pipeline", "pipelined chain of 256 KiB segments", NULL, c_pipe_reduce,
     tempo__reduce_pipeline_start},
    {TEMPO__COLL_ALLTOALL, "pairwise", "pairwise exchange, one message per peer", NULL, c_only,
     tempo__alltoall_pairwise_start},
    {TEMPO__COLL_BARRIER, "dissemination", "dissemination barrier, ceil(log2 n) rounds", NULL,
     c_only, tempo__barrier_dissemination_start},
    {TEMPO__COLL_SEND, "p2p", "direct message", NULL, c_only, tempo__p2p_start},
    {TEMPO__COLL_RECV, "p2p", "direct message", NULL, c_only, tempo__p2p_start},
};

const size_t tempo__nalgos = TEMPO_ARRAY_SIZE(tempo__algos);

/* Device buffers under TEMPO_GPU_BACKEND=nccl run as one NCCL call (gpu/nccl.h). Not in the
 * table either: only such calls run it, and they run nothing else. */
static const tempo__algo_t nccl_algo = {-1, "nccl", "one NCCL call on the device buffers", NULL,
                                        NULL, tempo__nccl_start};

/* A request that carries a compressor runs the compressor's own schedule (quant/qcoll.c), reached
 * through the hook the compressor carries, so collectives never include quant/. It is not in the
 * table: it cannot be forced, and algorithm sweeps over the table do not see it. */
static const char *compressed_unusable(const tempo__op_t *op)
{
    return op->qc->unusable ? op->qc->unusable(op) : NULL;
}

static tempo_status_t compressed_start(tempo__op_t *op)
{
    return op->qc->start(op);
}

static const tempo__algo_t compressed_algo = {
    TEMPO__COLL_ALLREDUCE, "compressed", "the compressor's schedule", compressed_unusable, NULL,
    compressed_start};

const tempo__algo_t *tempo__algo_find(int coll, const char *name)
{
    for (size_t i = 0; i < tempo__nalgos; i++) {
        if (tempo__algos[i].coll == coll && strcasecmp(tempo__algos[i].name, name) == 0) {
            return &tempo__algos[i];
        }
    }
    return NULL;
}

static const char *valid_names(int coll, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < tempo__nalgos && o < len; i++) {
        if (tempo__algos[i].coll == coll) {
            o += (size_t)snprintf(buf + o, len - o, "%s%s", o ? ", " : "", tempo__algos[i].name);
        }
    }
    return buf;
}

static int coll_by_name(const char *name, size_t len)
{
    for (int c = 0; c < TEMPO__COLL_COUNT; c++) {
        const char *cn = tempo__coll_name(c);
        if (strlen(cn) == len && strncasecmp(cn, name, len) == 0) {
            return c;
        }
    }
    return -1;
}

/* TEMPO_ALGO's entries into forced (per collective, NULL where not forced). */
static tempo_status_t parse_algos(const tempo__algo_t **forced, const char *text)
{
    char buf[512];
    snprintf(buf, sizeof(buf), "%s", text);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
        char *colon = strchr(tok, ':');
        if (!colon) {
            return tempo__err(TEMPO_ERR_INVALID,
                              "entry '%s' is not collective:algorithm (e.g. allreduce:ring)", tok);
        }
        int coll = coll_by_name(tok, (size_t)(colon - tok));
        if (coll < 0) {
            return tempo__err(TEMPO_ERR_INVALID,
                              "unknown collective '%.*s' (valid: allreduce, reduce_scatter, "
                              "allgather, broadcast, reduce, alltoall, barrier)",
                              (int)(colon - tok), tok);
        }
        const tempo__algo_t *a = tempo__algo_find(coll, colon + 1);
        if (!a) {
            char names[256];
            return tempo__err(TEMPO_ERR_INVALID, "unknown algorithm '%s' for %s (valid: %s)",
                              colon + 1, tempo__coll_name(coll),
                              valid_names(coll, names, sizeof(names)));
        }
        if (forced[coll]) {
            /* Refused rather than the last one taken: which of the two was meant is a guess. */
            return tempo__err(TEMPO_ERR_INVALID,
                              "%s is forced twice (%s, then %s); name each collective once",
                              tempo__coll_name(coll), forced[coll]->name, a->name);
        }
        forced[coll] = a;
    }
    return TEMPO_OK;
}

tempo_status_t tempo__algo_check(const char *text)
{
    const tempo__algo_t *forced[TEMPO__COLL_COUNT] = {NULL};
    return parse_algos(forced, text);
}

tempo_status_t tempo__algo_parse_env(tempo__coll_comm_t *cc, const char *text)
{
    /* The configuration table ran tempo__algo_check() on the same text: this cannot fail. */
    return parse_algos(cc->forced, text);
}

static void cost_params(const struct tempo_comm *c, tempo__cost_t *m)
{
    m->n = c->size;
    if (c->all_local) {
        m->alpha = 2e-6;
        m->beta = 1.0 / 6e9;
    } else {
        m->alpha = 30e-6;
        m->beta = 1.0 / 1.2e9;
    }
    m->gamma = 1.0 / 10e9;
}

tempo_status_t tempo__algo_select(tempo__op_t *op, const char *forced_name,
                                  const tempo__algo_t **algo_p)
{
    tempo__coll_comm_t *cc = tempo__cc(op->comm);
    const tempo__algo_t *a = NULL;
    const char *source = "attribute";
    if (op->nccl) { /* device buffers under TEMPO_GPU_BACKEND=nccl: one NCCL call */
        if (forced_name && strcmp(forced_name, "nccl") != 0) {
            return tempo__err(TEMPO_ERR_UNSUPPORTED, "%s: device buffers run on NCCL "
                              "(TEMPO_GPU_BACKEND=nccl); algorithm '%s' cannot be forced on them",
                              tempo__coll_name(op->coll), forced_name);
        }
        if (op->stride && op->stride != op->count) {
            return tempo__err(TEMPO_ERR_INTERNAL, "%s: NCCL cannot run a block-strided chunk",
                              tempo__coll_name(op->coll));
        }
        *algo_p = &nccl_algo;
        return TEMPO_OK;
    }
    if (op->qc) {
        if (forced_name) {
            return tempo__err(TEMPO_ERR_INVALID,
                              "%s: a request with a compressor runs the compressor's schedule; "
                              "it cannot also force algorithm '%s'",
                              tempo__coll_name(op->coll), forced_name);
        }
        const char *why = compressed_unusable(op);
        if (why) {
            return tempo__err(TEMPO_ERR_UNSUPPORTED, "%s cannot be compressed: %s",
                              tempo__coll_name(op->coll), why);
        }
        if (op->comm->size > 1) {
            *algo_p = &compressed_algo;
            return TEMPO_OK;
        }
        op->qc = NULL; /* one rank sends nothing: exact, as tempo.h says (errors checked above) */
    }
    if (forced_name) {
        a = tempo__algo_find(op->coll, forced_name);
        if (!a) {
            char names[256];
            return tempo__err(TEMPO_ERR_INVALID, "unknown algorithm '%s' for %s (valid: %s)",
                              forced_name, tempo__coll_name(op->coll),
                              valid_names(op->coll, names, sizeof(names)));
        }
    } else if (cc->forced[op->coll]) {
        a = cc->forced[op->coll];
        source = "TEMPO_ALGO";
    }
    if (a) {
        const char *why = a->unusable ? a->unusable(op) : NULL;
        if (why) {
            return tempo__err(TEMPO_ERR_UNSUPPORTED,
                              "algorithm %s:%s (forced by %s) cannot run "
                              "here: %s",
                              tempo__coll_name(op->coll), a->name, source, why);
        }
        *algo_p = a;
        return TEMPO_OK;
    }
    size_t bytes = op->count * tempo_dtype_size(op->dtype);
    tempo__algo_memo_t *memo = &cc->chosen[op->lane != 0][op->coll];
    if (memo->algo && memo->bytes == bytes) {
        *algo_p = memo->algo;
        return TEMPO_OK;
    }
    tempo__cost_t m;
    cost_params(op->comm, &m);
    double best = INFINITY;
    for (size_t i = 0; i < tempo__nalgos; i++) {
        const tempo__algo_t *c = &tempo__algos[i];
        if (c->coll != op->coll || (c->unusable && c->unusable(op))) {
            continue;
        }
        double t = c->cost(&m, bytes);
        if (t >= 0 && t < best) {
            best = t;
            a = c;
        }
    }
    if (!a) {
        return tempo__err(TEMPO_ERR_INTERNAL, "no algorithm for %s", tempo__coll_name(op->coll));
    }
    memo->algo = a;
    memo->bytes = bytes;
    *algo_p = a;
    return TEMPO_OK;
}

tempo_status_t tempo_algorithm_info(size_t index, tempo_algorithm_info_t *info_p)
{
    /* Send and receive are not collectives users choose algorithms for. */
    size_t shown = 0;
    for (size_t i = 0; i < tempo__nalgos; i++) {
        if (tempo__algos[i].coll == TEMPO__COLL_SEND || tempo__algos[i].coll == TEMPO__COLL_RECV) {
            continue;
        }
        if (shown++ == index) {
            if (!info_p) {
                return TEMPO_ERR_INVALID;
            }
            info_p->collective = tempo__coll_name(tempo__algos[i].coll);
            info_p->name = tempo__algos[i].name;
            info_p->doc = tempo__algos[i].doc;
            return TEMPO_OK;
        }
    }
    return TEMPO_ERR_INVALID;
}

/* The signature's how of op run by algo (core/world.h): what the ranks' messages must agree on
 * besides the call. */
static uint32_t how_of(const tempo__op_t *op, const tempo__algo_t *algo)
{
    if (algo == &compressed_algo) {
        return op->qc->id;
    }
    if (algo == &nccl_algo) {
        return TEMPO__HOW_NCCL;
    }
    return (uint32_t)(algo - tempo__algos) + 1;
}

const char *tempo__algo_name_of(uint32_t how)
{
    if (how == TEMPO__HOW_NCCL) {
        return nccl_algo.name;
    }
    return how >= 1 && how <= tempo__nalgos ? tempo__algos[how - 1].name : NULL;
}

tempo_status_t tempo__op_launch(tempo__op_t *op, tempo_status_t st, const tempo__algo_t *algo)
{
    if (st == TEMPO_OK) {
        op->algo = algo->name;
        tempo__op_sign_how(op, how_of(op, algo));
        st = algo->start(op);
    }
    if (st != TEMPO_OK) {
        return tempo__op_error(op, st);
    }
    if (tempo__log_level >= TEMPO_LOG_DEBUG) {
        char d[192];
        TEMPO_DEBUG(TEMPO_SUB_COLL, "start %s priority %d tag %llu", tempo__op_describe(op, d, 192),
                    op->priority, (unsigned long long)op->user_tag);
    }
    return tempo__op_start(op);
}
