/*
 * bucketer.c — gradient buckets over the scheduled lane (see "Bucketer" in tempo.h for the
 * contract): registration and its cross-rank check, bucket layout, readiness, priorities from
 * TicTac's orders, waits, and the per-iteration numbers.
 *
 * Layout. Tensors are laid out in their expected ready order: backward produces the last layer
 * first, so descending layer, and inside a layer descending registration order (PyTorch DDP's
 * reversed parameter order). Buckets are filled greedily in that order, the first up to
 * first_bucket_bytes (at most bucket_bytes) and the others up to bucket_bytes, never mixing dtypes. The layout depends
 * only on the registration and the config, which the creation checks are identical on every rank,
 * so bucket b is the same on every rank and is posted with tag (1 << 62 | bucketer << 32 | b):
 * its occurrence (the number of times it was posted) is the iteration, which makes the scheduled
 * requests' identities agree without any exchange. Fusing whatever happens to be ready instead would
 * give different buckets on different ranks.
 *
 * Priorities. A bucket is a transfer for TicTac: layer l of the next forward depends on every bucket
 * holding a tensor of layer l (and, through the graph, on its predecessors' buckets). fifo gives
 * every bucket priority 0, so the coordinator runs them in the order they became ready everywhere;
 * tic computes TIC from the graph once; tac runs TIC during tac_warmup synchronizing iterations
 * while it measures each layer's forward time (compute markers) and each bucket's transfer time
 * (first chunk start to completion), averages both over the ranks (a collective inside
 * tempo_bucketer_begin, called at the same iteration everywhere) and computes TAC.
 *
 * Numbers. A statistics span runs from one synchronizing tempo_bucketer_begin() to the next
 * (micro-steps of gradient accumulation included): T is its length, exposed the time spent in
 * bucketer waits, comm the scheduled lane's busy time (the union of its transfers), compute the
 * caller's time outside bucketer waits (T - exposed, so that T = compute + exposed exactly; compute
 * markers would miss unmarked work). E and the overlap ratio follow from these as TicTac's
 * efficiency and the hidden share of communication.
 *
 * Invariants
 *   - bk->req is non-NULL exactly while bucket bk's latest post has not been waited for.
 *   - A tensor's mark equals the current iteration number once it was marked ready or skipped.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "collectives/coll.h"
#include "core/cfg.h"
#include "core/trace.h"
#include "gpu/cuda.h"
#include "overlap/tictac.h"

typedef struct {
    uint64_t id;
    void *grad;
    size_t count, bytes;
    tempo_dtype_t dtype;
    int layer;
    char name[64];
    int bucket;
    size_t off;  /* byte offset in the bucket's fusion buffer */
    long mark;   /* iteration in which it was last marked */
    int dev;     /* grad is CUDA device memory (copied to and from the fusion buffer by the
                  * driver; a bucket of its own runs staged, gpu/cuda.h) */
} tensor_t;

typedef struct {
    int *tensors; /* indices into b->t */
    int n;
    size_t bytes, count;
    tempo_dtype_t dtype;
    int min_layer, max_layer;
    int priority;
    int nready;
    int in_place;
    void *base; /* the tensors' own memory (in place) or the fusion buffer */
    void *base_ctx; /* the fusion buffer's allocation (page-locked where a tensor is device
                     * memory: tempo__cuda_host_alloc) */
    tempo_request_t req;
    uint64_t tag;
    char name[64];
    double xfer_sum; /* measured transfer seconds (tac) */
    long xfer_n;
} bucket_t;

struct tempo_bucketer {
    tempo_comm_t comm;
    tempo_op_t op;
    size_t bucket_bytes, first_bytes, chunk_bytes;
    tempo_sched_t sched;
    int tac_warmup;
    tempo_compressor_t qc; /* compressor of float32 buckets, or NULL */
    int own_qc;            /* made from TEMPO_COMPRESS: destroyed with the bucketer */

    tensor_t *t;
    size_t nt;
    size_t *hidx; /* id hash: tensor index + 1, 0 = empty */
    size_t hcap;
    bucket_t *bk;
    size_t nb;
    int nlayers;
    int *pred_off, *pred; /* the layer graph; NULL: a chain */

    long iter;     /* tempo_bucketer_begin() calls */
    int open;      /* an iteration is open */
    int sync;      /* the open iteration synchronizes */
    int tac_done;  /* TAC priorities are in force */
    long sync_done; /* synchronizing iterations closed */

    /* the current statistics span */
    int span_open;
    uint64_t span_t0, span_busy0;
    double span_exposed, span_bytes;
    /* compute markers */
    int in_compute, cm_layer, cm_phase;
    uint64_t cm_t0;
    double *fwd_sum; /* (nlayers) forward seconds per layer */
    long *fwd_n;

    tempo_bucketer_stats_t last, sum;
};

static uint64_t hash_id(uint64_t id)
{
    return id * 0x9e3779b97f4a7c15ull ^ (id >> 29);
}

static long find_tensor(const tempo_bucketer_t b, uint64_t id)
{
    size_t i = (size_t)hash_id(id) & (b->hcap - 1);
    while (b->hidx[i]) {
        if (b->t[b->hidx[i] - 1].id == id) {
            return (long)(b->hidx[i] - 1);
        }
        i = (i + 1) & (b->hcap - 1);
    }
    return -1;
}

static tempo_status_t berr(tempo_bucketer_t b, tempo_status_t st, const char *fmt, ...)
    TEMPO_FMT_PRINTF(3, 4);
static tempo_status_t berr(tempo_bucketer_t b, tempo_status_t st, const char *fmt, ...)
{
    char msg[TEMPO_ERRMSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    tempo__err_quiet(st, "%s", msg);
    if (b && b->comm) {
        snprintf(b->comm->last_error, sizeof(b->comm->last_error), "%s", msg);
    }
    return st;
}

static const char *tname(const tensor_t *t, char *buf, size_t len)
{
    if (t->name[0]) {
        snprintf(buf, len, "'%s' (id %llu)", t->name, (unsigned long long)t->id);
    } else {
        snprintf(buf, len, "id %llu", (unsigned long long)t->id);
    }
    return buf;
}

/* ---------------------------------------------------------------------------------------------- */
/* Layout and priorities                                                                          */
/* ---------------------------------------------------------------------------------------------- */

/* Expected ready order as a sortable key: descending layer, then descending registration index. */
static uint64_t ready_key(const tensor_t *t, size_t i)
{
    return ((uint64_t)(0x7fffffff - t->layer) << 32) | (0xffffffffu - (uint32_t)i);
}

static int cmp_u64(const void *pa, const void *pb)
{
    uint64_t a = *(const uint64_t *)pa, c = *(const uint64_t *)pb;
    return a < c ? -1 : a > c;
}

static int cmp_addr(const void *pa, const void *pb)
{
    const tensor_t *const *a = pa, *const *c = pb;
    uintptr_t x = (uintptr_t)(*a)->grad, y = (uintptr_t)(*c)->grad;
    return x < y ? -1 : x > y;
}

static tempo_status_t layout(tempo_bucketer_t b)
{
    int *order = tempo__malloc(sizeof(int) * b->nt, "bucketer order");
    uint64_t *keys = tempo__malloc(sizeof(uint64_t) * b->nt, "bucketer order");
    b->bk = tempo__calloc(b->nt, sizeof(bucket_t), "buckets");
    if (!order || !keys || !b->bk) {
        tempo__free(order);
        tempo__free(keys);
        return TEMPO_ERR_NOMEM;
    }
    for (size_t i = 0; i < b->nt; i++) {
        keys[i] = ready_key(&b->t[i], i);
    }
    qsort(keys, b->nt, sizeof(uint64_t), cmp_u64);
    for (size_t i = 0; i < b->nt; i++) {
        order[i] = (int)(0xffffffffu - (uint32_t)keys[i]);
    }
    tempo__free(keys);
    size_t i = 0;
    while (i < b->nt) {
        bucket_t *bk = &b->bk[b->nb];
        /* the first bucket is the small one: never larger than the others (a bucket size below
         * the default 1M first bucket used to leave a small model in one bucket) */
        size_t cap = b->nb == 0 ? TEMPO_MIN(b->first_bytes, b->bucket_bytes) : b->bucket_bytes;
        size_t j = i, bytes = 0;
        while (j < b->nt && b->t[order[j]].dtype == b->t[order[i]].dtype &&
               (j == i || bytes + b->t[order[j]].bytes <= cap)) {
            bytes += b->t[order[j]].bytes;
            j++;
        }
        bk->n = (int)(j - i);
        bk->tensors = tempo__malloc(sizeof(int) * (size_t)bk->n, "bucket tensors");
        if (!bk->tensors) {
            tempo__free(order);
            return TEMPO_ERR_NOMEM;
        }
        bk->dtype = b->t[order[i]].dtype;
        bk->bytes = bytes;
        bk->count = bytes / tempo_dtype_size(bk->dtype);
        bk->min_layer = INT32_MAX;
        bk->max_layer = -1;
        for (int k = 0; k < bk->n; k++) {
            tensor_t *t = &b->t[order[i + (size_t)k]];
            bk->tensors[k] = order[i + (size_t)k];
            t->bucket = (int)b->nb;
            bk->min_layer = TEMPO_MIN(bk->min_layer, t->layer);
            bk->max_layer = TEMPO_MAX(bk->max_layer, t->layer);
        }
        b->nb++;
        i = j;
    }
    tempo__free(order);
    /* In place when the tensors tile one range of memory; otherwise a fusion buffer. */
    for (size_t k = 0; k < b->nb; k++) {
        bucket_t *bk = &b->bk[k];
        tensor_t **by = tempo__malloc(sizeof(*by) * (size_t)bk->n, "bucket layout");
        if (!by) {
            return TEMPO_ERR_NOMEM;
        }
        for (int m = 0; m < bk->n; m++) {
            by[m] = &b->t[bk->tensors[m]];
        }
        qsort(by, (size_t)bk->n, sizeof(*by), cmp_addr);
        int tiled = 1;
        for (int m = 0; m + 1 < bk->n; m++) {
            tiled &= (char *)by[m]->grad + by[m]->bytes == (char *)by[m + 1]->grad;
        }
        bk->in_place = tiled;
        if (tiled) {
            bk->base = by[0]->grad;
        } else {
            const void *like = NULL; /* a device tensor: page-locked, in its context */
            for (int m = 0; m < bk->n && !like; m++) {
                like = by[m]->dev ? by[m]->grad : NULL;
            }
            bk->base = tempo__cuda_host_alloc(like, bk->bytes, &bk->base_ctx);
            size_t off = 0;
            for (int m = 0; m < bk->n; m++) {
                b->t[bk->tensors[m]].off = off;
                off += b->t[bk->tensors[m]].bytes;
            }
        }
        tempo__free(by);
        if (!bk->base) {
            return TEMPO_ERR_NOMEM;
        }
        snprintf(bk->name, sizeof(bk->name), "bucket %zu (layers %d-%d)", k, bk->min_layer,
                 bk->max_layer);
    }
    return TEMPO_OK;
}

/* The TicTac graph: ops are layers, transfers are buckets. */
static tempo_status_t make_graph(tempo_bucketer_t b, tempo__tt_graph_t *g, int **dep_off_p,
                                 int **dep_p, int **chain_off_p, int **chain_p)
{
    int L = b->nlayers;
    int *dep_off = tempo__calloc((size_t)L + 1, sizeof(int), "graph");
    int *dep = tempo__malloc(sizeof(int) * (b->nt + 1), "graph");
    int *coff = NULL, *cpred = NULL;
    if (!dep_off || !dep) {
        goto nomem;
    }
    /* Each (layer, bucket) pair once: tensors of a layer in one bucket count once. */
    size_t nd = 0;
    for (int l = 0; l < L; l++) {
        dep_off[l] = (int)nd;
        for (size_t k = 0; k < b->nb; k++) {
            bucket_t *bk = &b->bk[k];
            if (l < bk->min_layer || l > bk->max_layer) {
                continue;
            }
            for (int m = 0; m < bk->n; m++) {
                if (b->t[bk->tensors[m]].layer == l) {
                    dep[nd++] = (int)k;
                    break;
                }
            }
        }
    }
    dep_off[L] = (int)nd;
    if (!b->pred_off) {
        coff = tempo__calloc((size_t)L + 1, sizeof(int), "graph");
        cpred = tempo__malloc(sizeof(int) * (size_t)(L > 0 ? L : 1), "graph");
        if (!coff || !cpred) {
            goto nomem;
        }
        for (int l = 0; l < L; l++) {
            coff[l] = l > 0 ? l - 1 : 0;
            if (l > 0) {
                cpred[l - 1] = l - 1;
            }
        }
        coff[L] = L > 0 ? L - 1 : 0;
    }
    memset(g, 0, sizeof(*g));
    g->nops = L;
    g->ntensors = (int)b->nb;
    g->pred_off = b->pred_off ? b->pred_off : coff;
    g->pred = b->pred_off ? b->pred : cpred;
    g->dep_off = dep_off;
    g->dep = dep;
    *dep_off_p = dep_off;
    *dep_p = dep;
    *chain_off_p = coff;
    *chain_p = cpred;
    return TEMPO_OK;
nomem:
    tempo__free(dep_off);
    tempo__free(dep);
    tempo__free(coff);
    tempo__free(cpred);
    return TEMPO_ERR_NOMEM;
}

static tempo_status_t set_priorities(tempo_bucketer_t b, const double *op_time,
                                     const double *xfer_time)
{
    if (b->sched == TEMPO_SCHED_FIFO) {
        for (size_t k = 0; k < b->nb; k++) {
            b->bk[k].priority = 0;
        }
        return TEMPO_OK;
    }
    tempo__tt_graph_t g;
    int *dep_off, *dep, *coff, *cpred;
    TEMPO_CHECK(make_graph(b, &g, &dep_off, &dep, &coff, &cpred));
    int *prio = tempo__malloc(sizeof(int) * (b->nb + 1), "priorities");
    tempo_status_t st = prio ? TEMPO_OK : TEMPO_ERR_NOMEM;
    if (st == TEMPO_OK && op_time) {
        g.op_time = op_time;
        g.tensor_time = xfer_time;
        st = tempo__tac_order(&g, prio);
    } else if (st == TEMPO_OK) {
        st = tempo__tic_order(&g, prio);
    }
    if (st == TEMPO_OK) {
        for (size_t k = 0; k < b->nb; k++) {
            b->bk[k].priority = prio[k];
        }
    }
    tempo__free(prio);
    tempo__free(dep_off);
    tempo__free(dep);
    tempo__free(coff);
    tempo__free(cpred);
    return st;
}

/* "bucket priorities (bucket 0 first): p0 p1 ...", cut at n bytes, for the log. */
static const char *prio_list(tempo_bucketer_t b, char *buf, size_t n)
{
    size_t len = (size_t)snprintf(buf, n, "bucket priorities (bucket 0 first):");
    for (size_t k = 0; k < b->nb; k++) {
        if (len + 16 >= n) {
            snprintf(buf + len, n - len, " ...");
            break;
        }
        len += (size_t)snprintf(buf + len, n - len, " %d", b->bk[k].priority);
    }
    return buf;
}

/* tac: average the measurements over the ranks and compute TAC (collective). */
static tempo_status_t compute_tac(tempo_bucketer_t b)
{
    size_t L = (size_t)b->nlayers, nb = b->nb;
    double *v = tempo__calloc(L + nb, sizeof(double), "tac profile");
    if (!v) {
        return TEMPO_ERR_NOMEM;
    }
    for (size_t l = 0; l < L; l++) {
        v[l] = b->fwd_n[l] ? b->fwd_sum[l] / (double)b->fwd_n[l] : 0;
    }
    for (size_t k = 0; k < nb; k++) {
        v[L + k] = b->bk[k].xfer_n ? b->bk[k].xfer_sum / (double)b->bk[k].xfer_n : 0;
    }
    tempo_status_t st = tempo_allreduce(b->comm, v, v, L + nb, TEMPO_FLOAT64, TEMPO_AVG);
    if (st == TEMPO_OK) {
        st = set_priorities(b, v, v + L);
    }
    if (st == TEMPO_OK) {
        b->tac_done = 1;
        char list[256];
        TEMPO_INFO(TEMPO_SUB_OVERLAP, "bucketer: TAC order computed after %ld iterations; %s",
                   b->sync_done, prio_list(b, list, sizeof(list)));
    }
    tempo__free(v);
    return st;
}

/* ---------------------------------------------------------------------------------------------- */
/* Creation                                                                                       */
/* ---------------------------------------------------------------------------------------------- */

static tempo_status_t read_config(tempo_bucketer_t b, const tempo_bucketer_config_t *c)
{
    uint64_t m = c ? c->field_mask : 0;
    b->op = (m & TEMPO_BUCKETER_OP) ? c->op : TEMPO_AVG;
    b->bucket_bytes = (m & TEMPO_BUCKETER_BUCKET_BYTES) ? c->bucket_bytes : tempo__cfg.bucket_bytes;
    b->first_bytes =
        (m & TEMPO_BUCKETER_FIRST_BYTES) ? c->first_bucket_bytes : tempo__cfg.bucket_first_bytes;
    b->sched = (m & TEMPO_BUCKETER_SCHED) ? c->sched : (tempo_sched_t)tempo__cfg.sched;
    b->chunk_bytes = (m & TEMPO_BUCKETER_CHUNK_BYTES) ? c->chunk_bytes : 0;
    b->tac_warmup = (m & TEMPO_BUCKETER_TAC_WARMUP) ? c->tac_warmup : tempo__cfg.tac_warmup;
    if (m & TEMPO_BUCKETER_COMPRESSOR) {
        b->qc = c->compressor;
    } else if (tempo__cfg.compress[0] && strcmp(tempo__cfg.compress, "none") != 0) {
        tempo_status_t st = tempo_compressor_create(tempo__cfg.compress, &b->qc);
        if (st != TEMPO_OK) {
            return berr(b, st, "TEMPO_COMPRESS: %s", tempo__errmsg());
        }
        b->own_qc = 1;
    }
    if (!tempo__op_valid(b->op)) {
        return berr(b, TEMPO_ERR_INVALID, "tempo_bucketer_create: unknown reduction op %d",
                    (int)b->op);
    }
    if (b->sched < TEMPO_SCHED_FIFO || b->sched > TEMPO_SCHED_TAC) {
        return berr(b, TEMPO_ERR_INVALID,
                    "tempo_bucketer_create: unknown policy %d (TEMPO_SCHED_FIFO, _TIC or _TAC)",
                    (int)b->sched);
    }
    if (!b->bucket_bytes || !b->first_bytes) {
        return berr(b, TEMPO_ERR_INVALID, "tempo_bucketer_create: bucket sizes must be > 0");
    }
    if (b->tac_warmup < 1) {
        return berr(b, TEMPO_ERR_INVALID,
                    "tempo_bucketer_create: tac_warmup %d is not valid (1 or more iterations)",
                    b->tac_warmup);
    }
    return TEMPO_OK;
}

static tempo_status_t read_tensors(tempo_bucketer_t b, const tempo_tensor_desc_t *d, size_t n)
{
    b->t = tempo__calloc(n, sizeof(tensor_t), "bucketer tensors");
    b->hcap = 16;
    while (b->hcap < 2 * n) {
        b->hcap *= 2;
    }
    b->hidx = tempo__calloc(b->hcap, sizeof(size_t), "bucketer index");
    if (!b->t || !b->hidx) {
        return TEMPO_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        tensor_t *t = &b->t[i];
        t->id = d[i].id;
        t->grad = d[i].grad;
        t->dev = tempo__cuda_memtype(t->grad) == TEMPO_MEMTYPE_CUDA;
        t->count = d[i].count;
        t->dtype = d[i].dtype;
        t->layer = d[i].layer;
        t->mark = -1;
        if (d[i].name) {
            snprintf(t->name, sizeof(t->name), "%s", d[i].name);
        }
        char nm[96];
        if (!tempo__dtype_valid(t->dtype)) {
            return berr(b, TEMPO_ERR_INVALID, "tensor %zu %s: unknown dtype %d", i,
                        tname(t, nm, sizeof(nm)), (int)t->dtype);
        }
        if (!t->grad || !t->count) {
            return berr(b, TEMPO_ERR_INVALID, "tensor %zu %s: %s", i, tname(t, nm, sizeof(nm)),
                        t->grad ? "count is 0" : "grad is NULL");
        }
        if (t->layer < 0) {
            return berr(b, TEMPO_ERR_INVALID, "tensor %zu %s: layer %d must be >= 0", i,
                        tname(t, nm, sizeof(nm)), t->layer);
        }
        if (t->count > SIZE_MAX / tempo_dtype_size(t->dtype)) {
            return berr(b, TEMPO_ERR_INVALID, "tensor %zu %s: count too large", i,
                        tname(t, nm, sizeof(nm)));
        }
        t->bytes = t->count * tempo_dtype_size(t->dtype);
        if (find_tensor(b, t->id) >= 0) {
            return berr(b, TEMPO_ERR_INVALID, "tensor %zu: id %llu is registered twice", i,
                        (unsigned long long)t->id);
        }
        size_t h = (size_t)hash_id(t->id) & (b->hcap - 1);
        while (b->hidx[h]) {
            h = (h + 1) & (b->hcap - 1);
        }
        b->hidx[h] = i + 1;
        b->nlayers = TEMPO_MAX(b->nlayers, t->layer + 1);
    }
    /* Overlapping gradient buffers would be reduced twice: in address order, each buffer must end
     * before the next begins. */
    tensor_t **by = tempo__malloc(sizeof(*by) * n, "bucketer check");
    if (!by) {
        return TEMPO_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        by[i] = &b->t[i];
    }
    qsort(by, n, sizeof(*by), cmp_addr);
    tempo_status_t st = TEMPO_OK;
    for (size_t i = 0; i + 1 < n && st == TEMPO_OK; i++) {
        if ((const char *)by[i]->grad + by[i]->bytes > (const char *)by[i + 1]->grad) {
            char n1[96], n2[96];
            st = berr(b, TEMPO_ERR_INVALID, "tensors %s and %s have overlapping buffers",
                      tname(by[i], n1, sizeof(n1)), tname(by[i + 1], n2, sizeof(n2)));
        }
    }
    tempo__free(by);
    return st;
}

/* Every rank must have registered the same tensors with the same config. */
static tempo_status_t check_agreement(tempo_bucketer_t b)
{
    uint64_t h = 0x7465706d6f;
    for (size_t i = 0; i < b->nt; i++) {
        const tensor_t *t = &b->t[i];
        uint64_t f[4] = {t->id, t->count, (uint64_t)t->dtype, (uint64_t)t->layer};
        h = tempo__hash64(f, sizeof(f), h);
        h = tempo__hash64(t->name, strlen(t->name), h);
    }
    uint64_t c[6] = {(uint64_t)b->op, b->bucket_bytes, b->first_bytes, (uint64_t)b->sched,
                     b->chunk_bytes, (uint64_t)b->tac_warmup};
    h = tempo__hash64(c, sizeof(c), h);
    const char *qs = b->qc ? tempo_compressor_spec(b->qc) : "none";
    h = tempo__hash64(qs, strlen(qs), h);
    uint64_t mine[3] = {h, b->nt, 0};
    for (size_t i = 0; i < b->nt; i++) {
        mine[2] += b->t[i].bytes;
    }
    int n = tempo_comm_size(b->comm);
    uint64_t *all = tempo__malloc(sizeof(mine) * (size_t)n, "registration check");
    if (!all) {
        return TEMPO_ERR_NOMEM;
    }
    tempo_status_t st = tempo_allgather(b->comm, mine, all, 3, TEMPO_UINT64);
    if (st != TEMPO_OK) {
        tempo__free(all);
        return st;
    }
    char ranks[256] = "";
    size_t len = 0;
    int first_bad = -1;
    for (int r = 1; r < n; r++) {
        if (all[3 * r] != all[0] && len < sizeof(ranks) - 16) {
            len += (size_t)snprintf(ranks + len, sizeof(ranks) - len, "%s%d", len ? ", " : "", r);
            if (first_bad < 0) {
                first_bad = r;
            }
        }
    }
    if (first_bad >= 0) {
        char b0[32], b1[32];
        st = berr(b, TEMPO_ERR_INVALID,
                  "tempo_bucketer_create: the tensor registration or config differs across ranks: "
                  "rank%s %s registered differently from rank 0 (rank 0: %llu tensors, %s; rank "
                  "%d: %llu tensors, %s)",
                  strchr(ranks, ',') ? "s" : "", ranks, (unsigned long long)all[1],
                  tempo__fmt_bytes((size_t)all[2], b0, sizeof(b0)), first_bad,
                  (unsigned long long)all[3 * first_bad + 1],
                  tempo__fmt_bytes((size_t)all[3 * first_bad + 2], b1, sizeof(b1)));
    }
    tempo__free(all);
    return st;
}

tempo_status_t tempo_bucketer_create(tempo_comm_t comm, const tempo_tensor_desc_t *tensors,
                                     size_t n, const tempo_bucketer_config_t *config,
                                     tempo_bucketer_t *b_p)
{
    if (!comm || !b_p || (n && !tensors) || n == 0) {
        return tempo__err(TEMPO_ERR_INVALID, "tempo_bucketer_create: %s",
                          !comm ? "comm is NULL"
                          : !b_p ? "b_p is NULL"
                          : n    ? "tensors is NULL"
                                 : "no tensors");
    }
    tempo_bucketer_t b = tempo__calloc(1, sizeof(*b), "bucketer");
    if (!b) {
        return TEMPO_ERR_NOMEM;
    }
    b->comm = comm;
    b->nt = n;
    /* Local validation first, but every rank takes part in the agreement check, so that a rank
     * with bad input does not leave the others hanging in it. */
    tempo_status_t st = read_config(b, config);
    if (st == TEMPO_OK) {
        st = read_tensors(b, tensors, n);
    }
    tempo_status_t local = st;
    char why[TEMPO_ERRMSG_LEN];
    snprintf(why, sizeof(why), "%s", tempo__errmsg());
    int32_t bad = st != TEMPO_OK, anybad = 0;
    st = tempo_allreduce(comm, &bad, &anybad, 1, TEMPO_INT32, TEMPO_MAX);
    if (st == TEMPO_OK && anybad) {
        st = local != TEMPO_OK ? berr(b, local, "%s", why)
                               : berr(b, TEMPO_ERR_INVALID,
                                      "tempo_bucketer_create: another rank's registration is "
                                      "invalid (see its error)");
    }
    if (st == TEMPO_OK) {
        st = check_agreement(b);
    }
    if (st == TEMPO_OK) {
        st = layout(b);
    }
    if (st == TEMPO_OK) {
        b->fwd_sum = tempo__calloc((size_t)b->nlayers, sizeof(double), "layer times");
        b->fwd_n = tempo__calloc((size_t)b->nlayers, sizeof(long), "layer times");
        st = b->fwd_sum && b->fwd_n ? TEMPO_OK : TEMPO_ERR_NOMEM;
    }
    if (st == TEMPO_OK) {
        int no = tempo__comm_next_bucketer(comm);
        for (size_t k = 0; k < b->nb; k++) {
            b->bk[k].tag = (1ull << 62) | ((uint64_t)(no & 0x3fffffff) << 32) | (uint64_t)k;
        }
        st = set_priorities(b, NULL, NULL);
    }
    if (st != TEMPO_OK) {
        tempo_bucketer_destroy(b);
        return st;
    }
    char list[256];
    TEMPO_INFO(TEMPO_SUB_OVERLAP,
               "bucketer: %zu tensors in %zu buckets over %d layers, policy %s; %s", b->nt, b->nb,
               b->nlayers, tempo__sched_name((int)b->sched), prio_list(b, list, sizeof(list)));
    *b_p = b;
    return TEMPO_OK;
}

tempo_status_t tempo_bucketer_set_graph(tempo_bucketer_t b, int nlayers, const int *pred_off,
                                        const int *pred)
{
    if (!b || !pred_off || nlayers < 1) {
        return berr(b, TEMPO_ERR_INVALID, "tempo_bucketer_set_graph: %s",
                    !b ? "b is NULL" : !pred_off ? "pred_off is NULL" : "nlayers < 1");
    }
    if (b->iter > 0) {
        return berr(b, TEMPO_ERR_INVALID,
                    "tempo_bucketer_set_graph: call it before the first iteration");
    }
    if (nlayers < b->nlayers) {
        return berr(b, TEMPO_ERR_INVALID,
                    "tempo_bucketer_set_graph: %d layers, but tensors are registered for layer %d",
                    nlayers, b->nlayers - 1);
    }
    int np = pred_off[nlayers];
    if (pred_off[0] != 0 || np < 0 || (np > 0 && !pred)) {
        return berr(b, TEMPO_ERR_INVALID, "tempo_bucketer_set_graph: bad pred_off");
    }
    int *o = tempo__malloc(sizeof(int) * ((size_t)nlayers + 1), "graph");
    int *p = tempo__malloc(sizeof(int) * (size_t)(np > 0 ? np : 1), "graph");
    if (!o || !p) {
        tempo__free(o);
        tempo__free(p);
        return TEMPO_ERR_NOMEM;
    }
    memcpy(o, pred_off, sizeof(int) * ((size_t)nlayers + 1));
    if (np) {
        memcpy(p, pred, sizeof(int) * (size_t)np);
    }
    int old_n = b->nlayers;
    int *old_o = b->pred_off, *old_p = b->pred;
    b->pred_off = o;
    b->pred = p;
    b->nlayers = nlayers;
    /* Validate through TicTac's own checks (acyclic, indices in range). */
    tempo__tt_graph_t g;
    int *dep_off, *dep, *coff, *cpred;
    tempo_status_t st = make_graph(b, &g, &dep_off, &dep, &coff, &cpred);
    if (st == TEMPO_OK) {
        st = tempo__tt_validate(&g);
        tempo__free(dep_off);
        tempo__free(dep);
        tempo__free(coff);
        tempo__free(cpred);
    }
    if (st == TEMPO_OK) {
        double *fs = tempo__realloc(b->fwd_sum, sizeof(double) * (size_t)nlayers, "layer times");
        if (fs) {
            b->fwd_sum = fs;
        }
        long *fn = fs ? tempo__realloc(b->fwd_n, sizeof(long) * (size_t)nlayers, "layer times")
                      : NULL;
        if (fn) {
            b->fwd_n = fn;
            for (int l = old_n; l < nlayers; l++) {
                b->fwd_sum[l] = 0;
                b->fwd_n[l] = 0;
            }
        }
        st = fs && fn ? set_priorities(b, NULL, NULL) : TEMPO_ERR_NOMEM;
    }
    if (st != TEMPO_OK) {
        char why[TEMPO_ERRMSG_LEN];
        snprintf(why, sizeof(why), "%s", tempo__errmsg());
        tempo__free(o);
        tempo__free(p);
        b->pred_off = old_o;
        b->pred = old_p;
        b->nlayers = old_n;
        return berr(b, st, "tempo_bucketer_set_graph: %s", why);
    }
    tempo__free(old_o);
    tempo__free(old_p);
    return TEMPO_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Iterations                                                                                     */
/* ---------------------------------------------------------------------------------------------- */

static void stats_from(tempo_bucketer_stats_t *s)
{
    double p = s->compute_s, m = s->comm_s, t = s->iter_s;
    double u = p + m, l = p > m ? p : m;
    s->efficiency = u - l > 1e-12 ? (u - t) / (u - l) : 1.0;
    s->overlap = m > 1e-12 ? 1.0 - s->exposed_s / m : 1.0;
    if (s->overlap < 0) {
        s->overlap = 0;
    }
}

static void close_span(tempo_bucketer_t b, uint64_t now)
{
    if (!b->span_open) {
        return;
    }
    tempo_bucketer_stats_t s = {0};
    s.iterations = 1;
    s.iter_s = (double)(now - b->span_t0) / 1e9;
    s.exposed_s = b->span_exposed;
    s.comm_s = (double)(tempo__comm_sched_busy_ns(b->comm) - b->span_busy0) / 1e9;
    s.compute_s = s.iter_s - s.exposed_s;
    s.bytes = b->span_bytes;
    stats_from(&s);
    b->last = s;
    b->sum.iterations++;
    b->sum.iter_s += s.iter_s;
    b->sum.exposed_s += s.exposed_s;
    b->sum.comm_s += s.comm_s;
    b->sum.compute_s += s.compute_s;
    b->sum.bytes += s.bytes;
    b->span_open = 0;
    if (b->comm->world->trace) {
        char args[320];
        snprintf(args, sizeof(args),
                 "\"iteration_s\": %.6f, \"compute_s\": %.6f, \"comm_s\": %.6f, \"exposed_s\": "
                 "%.6f, \"overlap\": %.4f, \"efficiency\": %.4f, \"bytes\": %.0f",
                 s.iter_s, s.compute_s, s.comm_s, s.exposed_s, s.overlap, s.efficiency, s.bytes);
        tempo__comm_trace_span(b->comm, TEMPO_TRACE_TID_ITER, "iteration", "iteration", b->span_t0,
                               now, args);
    }
}

/* Wait for bucket k's latest post and deliver its result to the tensors. */
static tempo_status_t wait_bucket(tempo_bucketer_t b, bucket_t *bk)
{
    if (!bk->req) {
        return TEMPO_OK;
    }
    uint64_t t0 = tempo__now_ns(), ts = 0, te = 0;
    tempo_status_t st = tempo__request_wait(&bk->req, &ts, &te);
    b->span_exposed += (double)(tempo__now_ns() - t0) / 1e9;
    if (st != TEMPO_OK) {
        char why[TEMPO_ERRMSG_LEN];
        snprintf(why, sizeof(why), "%s", tempo_last_error(b->comm));
        return berr(b, st, "%s: %s", bk->name, why);
    }
    if (ts && te > ts) {
        bk->xfer_sum += (double)(te - ts) / 1e9;
        bk->xfer_n++;
    }
    if (!bk->in_place) {
        for (int m = 0; m < bk->n; m++) {
            tensor_t *t = &b->t[bk->tensors[m]];
            if (!t->dev) {
                memcpy(t->grad, (char *)bk->base + t->off, t->bytes);
            } else if ((st = tempo__cuda_copy(t->grad, (char *)bk->base + t->off, t->bytes,
                                              "out of the fusion buffer")) != TEMPO_OK) {
                char why[TEMPO_ERRMSG_LEN];
                snprintf(why, sizeof(why), "%s", tempo__errmsg());
                return berr(b, st, "%s: tensor '%s': %s", bk->name, t->name, why);
            }
        }
    }
    return TEMPO_OK;
}

static tempo_status_t post_bucket(tempo_bucketer_t b, bucket_t *bk)
{
    if (!bk->in_place) {
        for (int m = 0; m < bk->n; m++) {
            tensor_t *t = &b->t[bk->tensors[m]];
            if (!t->dev) {
                memcpy((char *)bk->base + t->off, t->grad, t->bytes);
            } else {
                tempo_status_t st = tempo__cuda_copy((char *)bk->base + t->off, t->grad,
                                                     t->bytes, "into the fusion buffer");
                if (st != TEMPO_OK) {
                    char why[TEMPO_ERRMSG_LEN];
                    snprintf(why, sizeof(why), "%s", tempo__errmsg());
                    return berr(b, st, "%s: tensor '%s': %s", bk->name, t->name, why);
                }
            }
        }
    }
    tempo_attr_t a = {0};
    a.field_mask = TEMPO_ATTR_PRIORITY | TEMPO_ATTR_TAG | TEMPO_ATTR_NAME;
    a.priority = bk->priority;
    a.tag = bk->tag;
    a.name = bk->name;
    if (b->chunk_bytes) {
        a.field_mask |= TEMPO_ATTR_CHUNK_BYTES;
        a.chunk_bytes = b->chunk_bytes;
    }
    if (b->qc && bk->dtype == TEMPO_FLOAT32) {
        a.field_mask |= TEMPO_ATTR_COMPRESSOR;
        a.compressor = b->qc;
    }
    b->span_bytes += (double)bk->bytes;
    return tempo_iallreduce(b->comm, bk->base, bk->base, bk->count, bk->dtype, b->op, &a, &bk->req);
}

/* The names of the tensors among idx[0..n) (all tensors when idx is NULL) not marked in this
 * iteration, for an error message: "'a' (id 1), 'b' (id 2) and 3 more". */
static const char *unmarked(const tempo_bucketer_t b, const int *idx, size_t n, char *list,
                            size_t len)
{
    size_t o = 0, more = 0;
    list[0] = '\0';
    for (size_t k = 0; k < n; k++) {
        const tensor_t *t = &b->t[idx ? (size_t)idx[k] : k];
        if (t->mark == b->iter) {
            continue;
        }
        if (o < len - 120) {
            char nm[96];
            o += (size_t)snprintf(list + o, len - o, "%s%s", o ? ", " : "",
                                  tname(t, nm, sizeof(nm)));
        } else {
            more++;
        }
    }
    if (more) {
        snprintf(list + o, len - o, " and %zu more", more);
    }
    return list;
}

static tempo_status_t missing_list(tempo_bucketer_t b, const char *what)
{
    char list[320];
    return berr(b, TEMPO_ERR_INVALID, "%s: iteration %ld left tensors neither ready nor skipped: %s",
                what, b->iter, unmarked(b, NULL, b->nt, list, sizeof(list)));
}

tempo_status_t tempo_bucketer_begin(tempo_bucketer_t b, int sync)
{
    if (!b) {
        return tempo__err(TEMPO_ERR_INVALID, "tempo_bucketer_begin: b is NULL");
    }
    tempo_status_t st = TEMPO_OK;
    uint64_t now = tempo__now_ns();
    if (b->open && b->sync) {
        for (size_t i = 0; i < b->nt && st == TEMPO_OK; i++) {
            if (b->t[i].mark != b->iter) {
                st = missing_list(b, "tempo_bucketer_begin");
            }
        }
        b->sync_done++;
    }
    if (sync) {
        close_span(b, now);
        if (st == TEMPO_OK && b->sched == TEMPO_SCHED_TAC && !b->tac_done &&
            b->sync_done >= b->tac_warmup) {
            st = compute_tac(b);
        }
        now = tempo__now_ns();
        b->span_open = 1;
        b->span_t0 = now;
        b->span_busy0 = tempo__comm_sched_busy_ns(b->comm);
        b->span_exposed = b->span_bytes = 0;
    }
    b->iter++;
    b->open = 1;
    b->sync = sync != 0;
    for (size_t k = 0; k < b->nb; k++) {
        b->bk[k].nready = 0;
    }
    return st;
}

static tempo_status_t mark(tempo_bucketer_t b, uint64_t id, int skip)
{
    const char *fn = skip ? "tempo_bucketer_skip" : "tempo_bucketer_ready";
    if (!b) {
        return tempo__err(TEMPO_ERR_INVALID, "%s: b is NULL", fn);
    }
    if (!b->open) {
        return berr(b, TEMPO_ERR_INVALID, "%s: no iteration is open (call tempo_bucketer_begin)",
                    fn);
    }
    long i = find_tensor(b, id);
    if (i < 0) {
        return berr(b, TEMPO_ERR_INVALID, "%s: tensor id %llu is not registered", fn,
                    (unsigned long long)id);
    }
    tensor_t *t = &b->t[i];
    if (t->mark == b->iter) {
        char nm[96];
        return berr(b, TEMPO_ERR_INVALID, "%s: tensor %s was already marked in iteration %ld", fn,
                    tname(t, nm, sizeof(nm)), b->iter);
    }
    t->mark = b->iter;
    bucket_t *bk = &b->bk[t->bucket];
    if (skip) {
        /* Its buffer may still be in flight from the previous iteration. */
        TEMPO_CHECK(wait_bucket(b, bk));
        if (!t->dev) {
            memset(t->grad, 0, t->bytes);
        } else {
            tempo_status_t st = tempo__cuda_zero(t->grad, t->bytes);
            if (st != TEMPO_OK) {
                char why[TEMPO_ERRMSG_LEN], nm[96];
                snprintf(why, sizeof(why), "%s", tempo__errmsg());
                return berr(b, st, "%s: tensor %s: %s", fn, tname(t, nm, sizeof(nm)), why);
            }
        }
    }
    if (!b->sync) {
        return TEMPO_OK;
    }
    TEMPO_CHECK(wait_bucket(b, bk));
    if (++bk->nready == bk->n) {
        tempo_status_t st = post_bucket(b, bk);
        if (st != TEMPO_OK) {
            char why[TEMPO_ERRMSG_LEN];
            snprintf(why, sizeof(why), "%s", tempo_last_error(b->comm));
            return berr(b, st, "%s: posting %s: %s", fn, bk->name, why);
        }
    }
    return TEMPO_OK;
}

tempo_status_t tempo_bucketer_ready(tempo_bucketer_t b, uint64_t id)
{
    return mark(b, id, 0);
}

tempo_status_t tempo_bucketer_skip(tempo_bucketer_t b, uint64_t id)
{
    return mark(b, id, 1);
}

/* Wait for bucket bk on behalf of a tensor: an error when it can never complete. */
static tempo_status_t wait_for(tempo_bucketer_t b, bucket_t *bk, const char *fn)
{
    if (!bk->req && b->open && b->sync && bk->nready > 0 && bk->nready < bk->n) {
        char list[320];
        return berr(b, TEMPO_ERR_INVALID,
                    "%s: %s cannot be synchronized before these tensors are marked ready: %s", fn,
                    bk->name, unmarked(b, bk->tensors, (size_t)bk->n, list, sizeof(list)));
    }
    return wait_bucket(b, bk);
}

tempo_status_t tempo_bucketer_wait_tensor(tempo_bucketer_t b, uint64_t id)
{
    if (!b) {
        return tempo__err(TEMPO_ERR_INVALID, "tempo_bucketer_wait_tensor: b is NULL");
    }
    long i = find_tensor(b, id);
    if (i < 0) {
        return berr(b, TEMPO_ERR_INVALID, "tempo_bucketer_wait_tensor: tensor id %llu is not "
                                          "registered",
                    (unsigned long long)id);
    }
    return wait_for(b, &b->bk[b->t[i].bucket], "tempo_bucketer_wait_tensor");
}

tempo_status_t tempo_bucketer_wait_layer(tempo_bucketer_t b, int layer)
{
    if (!b) {
        return tempo__err(TEMPO_ERR_INVALID, "tempo_bucketer_wait_layer: b is NULL");
    }
    if (layer < 0 || layer >= b->nlayers) {
        return berr(b, TEMPO_ERR_INVALID, "tempo_bucketer_wait_layer: layer %d out of range (0..%d)",
                    layer, b->nlayers - 1);
    }
    for (size_t k = 0; k < b->nb; k++) {
        bucket_t *bk = &b->bk[k];
        if (layer < bk->min_layer || layer > bk->max_layer) {
            continue;
        }
        for (int m = 0; m < bk->n; m++) {
            if (b->t[bk->tensors[m]].layer == layer) {
                TEMPO_CHECK(wait_for(b, bk, "tempo_bucketer_wait_layer"));
                break;
            }
        }
    }
    return TEMPO_OK;
}

tempo_status_t tempo_bucketer_wait_all(tempo_bucketer_t b)
{
    if (!b) {
        return tempo__err(TEMPO_ERR_INVALID, "tempo_bucketer_wait_all: b is NULL");
    }
    /* Most urgent first: the order the engine completes them in. */
    for (size_t k = b->nb; k-- > 0;) {
        TEMPO_CHECK(wait_for(b, &b->bk[k], "tempo_bucketer_wait_all"));
    }
    return TEMPO_OK;
}

tempo_status_t tempo_bucketer_compute_begin(tempo_bucketer_t b, int layer, tempo_phase_t phase)
{
    if (!b || layer < 0 || layer >= b->nlayers ||
        (phase != TEMPO_PHASE_FORWARD && phase != TEMPO_PHASE_BACKWARD)) {
        return berr(b, TEMPO_ERR_INVALID, "tempo_bucketer_compute_begin: %s",
                    !b ? "b is NULL" : (layer < 0 || layer >= b->nlayers) ? "layer out of range"
                                                                        : "unknown phase");
    }
    if (b->in_compute) {
        return berr(b, TEMPO_ERR_INVALID,
                    "tempo_bucketer_compute_begin: layer %d's span is still open (spans do not nest)",
                    b->cm_layer);
    }
    b->in_compute = 1;
    b->cm_layer = layer;
    b->cm_phase = phase;
    b->cm_t0 = tempo__now_ns();
    if (b->comm->world->trace) {
        char name[48];
        snprintf(name, sizeof(name), "%s L%d", phase == TEMPO_PHASE_FORWARD ? "fwd" : "bwd", layer);
        tempo__comm_trace_mark(b->comm, TEMPO_TRACE_TID_COMPUTE, 1, "compute", name, b->cm_t0);
    }
    return TEMPO_OK;
}

tempo_status_t tempo_bucketer_compute_end(tempo_bucketer_t b)
{
    if (!b || !b->in_compute) {
        return berr(b, TEMPO_ERR_INVALID, "tempo_bucketer_compute_end: %s",
                    !b ? "b is NULL" : "no span is open");
    }
    uint64_t now = tempo__now_ns();
    double d = (double)(now - b->cm_t0) / 1e9;
    b->in_compute = 0;
    if (b->cm_phase == TEMPO_PHASE_FORWARD) {
        b->fwd_sum[b->cm_layer] += d;
        b->fwd_n[b->cm_layer]++;
    }
    if (b->comm->world->trace) {
        char name[48];
        snprintf(name, sizeof(name), "%s L%d", b->cm_phase == TEMPO_PHASE_FORWARD ? "fwd" : "bwd",
                 b->cm_layer);
        tempo__comm_trace_mark(b->comm, TEMPO_TRACE_TID_COMPUTE, 0, "compute", name, now);
    }
    return TEMPO_OK;
}

tempo_status_t tempo_bucketer_stats(tempo_bucketer_t b, tempo_bucketer_stats_t *last_p,
                                    tempo_bucketer_stats_t *mean_p)
{
    if (!b) {
        return tempo__err(TEMPO_ERR_INVALID, "tempo_bucketer_stats: b is NULL");
    }
    if (last_p) {
        *last_p = b->last;
    }
    if (mean_p) {
        tempo_bucketer_stats_t m = {0};
        long n = b->sum.iterations;
        if (n) {
            m.iterations = n;
            m.iter_s = b->sum.iter_s / (double)n;
            m.compute_s = b->sum.compute_s / (double)n;
            m.comm_s = b->sum.comm_s / (double)n;
            m.exposed_s = b->sum.exposed_s / (double)n;
            m.bytes = b->sum.bytes / (double)n;
            stats_from(&m);
        }
        *mean_p = m;
    }
    return TEMPO_OK;
}

tempo_status_t tempo_bucketer_stats_reset(tempo_bucketer_t b)
{
    if (!b) {
        return tempo__err(TEMPO_ERR_INVALID, "tempo_bucketer_stats_reset: b is NULL");
    }
    memset(&b->sum, 0, sizeof(b->sum));
    return TEMPO_OK;
}

size_t tempo_bucketer_nbuckets(tempo_bucketer_t b)
{
    return b ? b->nb : 0;
}

tempo_status_t tempo_bucketer_bucket_info(tempo_bucketer_t b, size_t i, tempo_bucket_info_t *info_p)
{
    if (!b || !info_p || i >= b->nb) {
        return tempo__err(TEMPO_ERR_INVALID, "tempo_bucketer_bucket_info: %s",
                          !b ? "b is NULL" : !info_p ? "info_p is NULL" : "index out of range");
    }
    const bucket_t *bk = &b->bk[i];
    info_p->min_layer = bk->min_layer;
    info_p->max_layer = bk->max_layer;
    info_p->ntensors = (size_t)bk->n;
    info_p->bytes = bk->bytes;
    info_p->dtype = bk->dtype;
    info_p->priority = bk->priority;
    info_p->in_place = bk->in_place;
    /* struct tempo_compressor begins with the engine's hook, which holds min_bytes */
    info_p->compressed = b->qc && bk->dtype == TEMPO_FLOAT32 &&
                         bk->bytes >= ((const tempo__qhook_t *)b->qc)->min_bytes;
    return TEMPO_OK;
}

tempo_status_t tempo_bucketer_destroy(tempo_bucketer_t b)
{
    if (!b) {
        return TEMPO_OK;
    }
    tempo_status_t first = TEMPO_OK;
    for (size_t k = 0; k < b->nb; k++) {
        bucket_t *bk = &b->bk[k];
        if (bk->req) {
            tempo_status_t st = tempo_wait(&bk->req);
            if (first == TEMPO_OK) {
                first = st;
            }
        }
        if (!bk->in_place) {
            tempo__cuda_host_free(bk->base, bk->base_ctx);
        }
        tempo__free(bk->tensors);
    }
    tempo__free(b->bk);
    tempo__free(b->t);
    tempo__free(b->hidx);
    tempo__free(b->pred_off);
    tempo__free(b->pred);
    tempo__free(b->fwd_sum);
    tempo__free(b->fwd_n);
    if (b->own_qc) {
        tempo_compressor_destroy(b->qc);
    }
    tempo__free(b);
    return first;
}
