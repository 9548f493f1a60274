/*
 * qcoll.c — compressed all-reduce and reduce-scatter: schedules (collectives/sched.c) whose local
 * steps encode, decode, fit levels and keep error feedback, and whose transfers move encoded bytes.
 *
 *   two-phase (unbiased per-bucket quantizers), all-reduce:
 *       [fit]  gather every rank's bucket statistics, fit the key's levels (identical everywhere)
 *       1      encode block j of the input (blocks are whole buckets) and send it to rank j
 *       2      decode the n encodings of my block and sum them in rank order, re-encode the sum
 *              (an independent random stream) and send it to every rank
 *       3      decode the n blocks into the output
 *     Every coordinate is quantized exactly twice and each stage is unbiased given its input, so
 *     the result is unbiased; every rank decodes the same bytes, so results are bitwise equal.
 *   gather (sign, top-k), all-reduce: encode the whole input, send it to every rank, decode the n
 *     encodings and sum them in rank order.
 *   reduce-scatter (every kind but powersgd): stage 1 and the sum of stage 2, into the output.
 *   sum (fp16, bf16, random-k, none): encode, ring all-reduce of the encoded array in its own type
 *     (the owner of each block adds, the block is then passed on unchanged), decode.
 *   low rank (PowerSGD): P = M Q, ring all-reduce of P, orthonormalize, Q = M^T P, ring all-reduce
 *     of Q, output P Q^T; the residual M - P Q^T and Q stay with the key.
 *
 * Per-key order: a request takes its key's next call number when it is built (program order, or the
 * scheduled lane's start order: the same on every rank) and waits at its first step until the
 * key's previous call has left its key section (fit, compensation, residual update), so fits and
 * residuals are applied in call order everywhere however requests progress.
 *
 * With an entropy stage the encoded sizes vary: each transfer of encodings is preceded by a round
 * that sends the sizes (8 bytes), which are checked against the bound before a receive is posted.
 */
#include "config.h"

#include <math.h>

#include "collectives/coll.h"
#include "core/dtype.h"
#include "quant/quant.h"

#define QALLOCS 48

typedef struct qop qop_t;

typedef struct radd { /* one ring step's reduction: dst += tmp, in the wire type */
    qop_t *q;
    void *dst;
    const void *tmp;
    size_t cnt;
} radd_t;

struct qop {
    tempo__op_t *op;
    struct tempo_compressor *qc;
    const tempo__qkind_t *kind;
    tempo__qkey_t *k;
    uint64_t call;
    int n, r, allreduce, avg, variable, prepared;
    size_t count;      /* coordinates of the local input */
    const float *in;   /* local input (contiguous view after prepare) */
    float *out;        /* result: all-reduce count, reduce-scatter count / n */
    float *xbuf;       /* compensated or gathered copy of the input, or NULL */
    float lv[256];     /* the level table of this call */
    int nl;
    tempo__rng_t rng;

    /* stage 1: block j goes to rank j (gather: one block, to every rank) */
    size_t *boff, *bcnt;
    uint8_t *e1;
    size_t *e1off;
    uint64_t *e1len; /* (n) bytes of each encoding; sent as is in size rounds */
    uint8_t *r1;
    size_t *r1off;
    uint64_t *r1len;
    int *a_r1, *a_s1;
    /* stage 2 */
    float *sum;
    uint8_t *e2;
    uint64_t e2len;
    uint8_t *g2;
    size_t *g2off;
    uint64_t *g2len;
    int *a_g2r, *a_g2s;
    void *stats;
    /* sum and low rank */
    void *wire;
    size_t wcount;
    int wdt; /* 0 fp32, else the 16-bit tempo_dtype_t */
    void *tmp;
    float *m, *pm, *qm;
    size_t rows, cols;
    int plain;

    void *allocs[QALLOCS];
    int nallocs;
    void (*sched_cleanup)(tempo__op_t *op);
};

static void *qalloc(qop_t *q, size_t bytes)
{
    if (q->nallocs == QALLOCS) {
        tempo__err(TEMPO_ERR_INTERNAL, "compressed schedule: too many buffers");
        return NULL;
    }
    void *p = tempo__malloc_aligned(bytes ? bytes : 1, "compressed collective buffer");
    if (p) {
        memset(p, 0, bytes);
        q->allocs[q->nallocs++] = p;
    }
    return p;
}

static void qop_cleanup(tempo__op_t *op)
{
    tempo__sched_t *s = op->priv;
    if (!s) {
        return;
    }
    qop_t *q = s->ext;
    void (*inner)(tempo__op_t *) = q->sched_cleanup;
    for (int i = 0; i < q->nallocs; i++) {
        tempo__free_aligned(q->allocs[i]);
    }
    tempo__free(q);
    s->ext = NULL;
    inner(op);
}

static double secs(uint64_t t0)
{
    return (double)(tempo__now_ns() - t0) * 1e-9;
}

static void ctx_of(qop_t *q, tempo__rng_t *rng, uint64_t shared, tempo__qctx_t *c)
{
    c->p = &q->qc->p;
    c->rng = rng;
    c->shared_seed = shared;
    c->levels = q->lv;
    c->nlevels = q->nl;
}

static uint64_t shared_seed(qop_t *q, int block)
{
    return tempo__qseed(&q->qc->p, q->k->key, q->call, 1000 + block, -1);
}

/* ---------------------------------------------------------------------------------------------- */
/* Key section                                                                                    */
/* ---------------------------------------------------------------------------------------------- */

/* Wait for the key's previous call, then build the input this call encodes: the input plus the
 * residual (error feedback), gathered contiguously (a reduce-scatter chunk's rank blocks lie
 * stride apart). */
static tempo_status_t prepare(qop_t *q)
{
    if (q->prepared) {
        return TEMPO_OK;
    }
    if (q->k->entered != q->call) {
        return TEMPO_INPROGRESS;
    }
    tempo__op_t *op = q->op;
    size_t stride = op->stride ? op->stride : op->count;
    int gathered = !q->allreduce && stride != op->count;
    float *rs = q->k->residual;
    if (rs || gathered) {
        float *x = q->xbuf;
        const float *src = op->sendbuf;
        if (gathered) {
            for (int j = 0; j < q->n; j++) {
                memcpy(x + (size_t)j * op->count, src + (size_t)j * stride,
                       op->count * sizeof(float));
            }
        } else {
            memcpy(x, src, q->count * sizeof(float));
        }
        if (rs) {
            for (size_t i = 0; i < q->count; i++) {
                x[i] += rs[i];
            }
        }
        q->in = x;
    }
    q->prepared = 1;
    return TEMPO_OK;
}

static void leave_key(qop_t *q)
{
    q->k->entered = q->call + 1;
}

static void snapshot_levels(qop_t *q)
{
    q->nl = q->k->nlevels;
    memcpy(q->lv, q->k->levels, sizeof(float) * (size_t)q->nl);
}

/* residual = x - decode(enc) over coordinates [off, off + cnt). */
static tempo_status_t residual_update(qop_t *q, const tempo__qctx_t *c, const uint8_t *enc,
                                      size_t len, size_t off, size_t cnt)
{
    float *rs = q->k->residual;
    if (!rs) {
        return TEMPO_OK;
    }
    /* rs = -x, rs += decode, rs = -rs */
    for (size_t i = 0; i < cnt; i++) {
        rs[off + i] = -q->in[off + i];
    }
    TEMPO_CHECK(q->kind->decode(c, enc, len, cnt, rs + off, 1));
    for (size_t i = 0; i < cnt; i++) {
        rs[off + i] = -rs[off + i];
    }
    return TEMPO_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Steps                                                                                          */
/* ---------------------------------------------------------------------------------------------- */

static tempo_status_t st_stats(tempo__sched_t *s, void *arg)
{
    qop_t *q = arg;
    (void)s;
    TEMPO_CHECK(prepare(q));
    uint64_t t0 = tempo__now_ns();
    size_t sb = tempo__qstats_bytes(&q->qc->p);
    tempo__qstats_compute(&q->qc->p, q->in, q->count, (char *)q->stats + (size_t)q->r * sb);
    q->qc->st.fit_s += secs(t0);
    return TEMPO_OK;
}

static tempo_status_t st_fit(tempo__sched_t *s, void *arg)
{
    qop_t *q = arg;
    (void)s;
    size_t sb = tempo__qstats_bytes(&q->qc->p);
    const void *ptr[512];
    const void **pp = ptr;
    if (q->n > 512) {
        pp = qalloc(q, sizeof(void *) * (size_t)q->n);
        if (!pp) {
            return TEMPO_ERR_NOMEM;
        }
    }
    for (int j = 0; j < q->n; j++) {
        pp[j] = (const char *)q->stats + (size_t)j * sb;
    }
    return tempo__qfit_key(q->qc, q->k, pp, q->n);
}

/* Stage 1: encode the blocks, update the residual, leave the key section. */
static tempo_status_t st_encode1(tempo__sched_t *s, void *arg)
{
    qop_t *q = arg;
    TEMPO_CHECK(prepare(q));
    if (q->kind->agg == TEMPO__QAGG_TWO_PHASE) {
        snapshot_levels(q);
    }
    uint64_t t0 = tempo__now_ns();
    int nb = q->kind->agg == TEMPO__QAGG_GATHER && q->allreduce ? 1 : q->n;
    tempo__rng_seed(&q->rng, tempo__qseed(&q->qc->p, q->k->key, q->call, 1, q->r), 0);
    for (int j = 0; j < nb; j++) {
        tempo__qctx_t c;
        ctx_of(q, &q->rng, shared_seed(q, j), &c);
        q->e1len[j] = q->kind->encode(&c, q->in + q->boff[j], q->bcnt[j], q->e1 + q->e1off[j]);
        q->qc->st.coords += q->bcnt[j];
        q->qc->st.bytes_out += q->e1len[j];
    }
    q->qc->st.calls++;
    q->qc->st.encode_s += secs(t0);
    t0 = tempo__now_ns();
    for (int j = 0; j < nb; j++) {
        tempo__qctx_t c;
        ctx_of(q, NULL, shared_seed(q, j), &c);
        TEMPO_CHECK(residual_update(q, &c, q->e1 + q->e1off[j], q->e1len[j], q->boff[j],
                                    q->bcnt[j]));
    }
    q->qc->st.decode_s += secs(t0);
    leave_key(q);
    (void)s;
    return TEMPO_OK;
}

static size_t rbound(qop_t *q);

/* A size round has ended: size the round's transfers. A receive's size is checked against the
 * bound of what the peer may send: my block's (stage 1) or the sender's block's (stage 2). Sends
 * carry slen[j], or slen[0] to every peer with same_send. */
static tempo_status_t size_transfers(tempo__sched_t *s, qop_t *q, const int *ar, const int *as,
                                     const uint64_t *rlen, const uint64_t *slen, int same_send,
                                     int bound_of_sender)
{
    for (int j = 0; j < q->n; j++) {
        if (j == q->r) {
            continue;
        }
        size_t bound = bound_of_sender ? q->kind->bound(&q->qc->p, q->bcnt[j]) : rbound(q);
        if (rlen[j] > bound) {
            return tempo__err(TEMPO_ERR_REMOTE,
                              "compressed %s: rank %d announced %llu bytes, above the bound %zu",
                              tempo__coll_name(q->op->coll), j, (unsigned long long)rlen[j],
                              bound);
        }
        tempo__sched_act(s, ar[j])->bytes = (size_t)rlen[j];
        tempo__sched_act(s, as[j])->bytes = (size_t)(same_send ? slen[0] : slen[j]);
    }
    return TEMPO_OK;
}

static size_t rbound(qop_t *q)
{
    /* most bytes a peer may send me in stage 1: my block's bound (gather: the whole input's) */
    int b = q->kind->agg == TEMPO__QAGG_GATHER && q->allreduce ? 0 : q->r;
    return q->kind->bound(&q->qc->p, q->bcnt[b]);
}

static tempo_status_t st_size1(tempo__sched_t *s, void *arg)
{
    qop_t *q = arg;
    int gather = q->kind->agg == TEMPO__QAGG_GATHER && q->allreduce;
    return size_transfers(s, q, q->a_r1, q->a_s1, q->r1len, q->e1len, gather, 0);
}

/* Decode my block's n encodings and sum them in rank order into dst. */
static tempo_status_t sum_block(qop_t *q, float *dst)
{
    uint64_t t0 = tempo__now_ns();
    int gather = q->kind->agg == TEMPO__QAGG_GATHER && q->allreduce;
    int b = gather ? 0 : q->r;
    size_t cnt = q->bcnt[b];
    memset(dst, 0, cnt * sizeof(float));
    for (int j = 0; j < q->n; j++) {
        tempo__qctx_t c;
        ctx_of(q, NULL, shared_seed(q, b), &c);
        const uint8_t *src = j == q->r ? q->e1 + q->e1off[b] : q->r1 + q->r1off[j];
        size_t len = (size_t)(j == q->r ? q->e1len[b] : q->r1len[j]);
        TEMPO_CHECK(q->kind->decode(&c, src, len, cnt, dst, 1));
    }
    if (q->avg) { /* a true division, as the uncompressed avg: x * (1/n) can be 1 ulp off */
        float n = (float)q->n;
        for (size_t i = 0; i < cnt; i++) {
            dst[i] /= n;
        }
    }
    q->qc->st.decode_s += secs(t0);
    return TEMPO_OK;
}

/* Stage 2 of the two-phase all-reduce: sum my block, re-encode it. */
static tempo_status_t st_sum_encode2(tempo__sched_t *s, void *arg)
{
    qop_t *q = arg;
    (void)s;
    TEMPO_CHECK(sum_block(q, q->sum));
    uint64_t t0 = tempo__now_ns();
    tempo__rng_t rng;
    tempo__rng_seed(&rng, tempo__qseed(&q->qc->p, q->k->key, q->call, 2, q->r), 0);
    tempo__qctx_t c;
    ctx_of(q, &rng, shared_seed(q, 100 + q->r), &c);
    q->e2len = q->kind->encode(&c, q->sum, q->bcnt[q->r], q->e2);
    q->qc->st.calls++;
    q->qc->st.coords += q->bcnt[q->r];
    q->qc->st.bytes_out += q->e2len;
    q->qc->st.encode_s += secs(t0);
    return TEMPO_OK;
}

static tempo_status_t st_size2(tempo__sched_t *s, void *arg)
{
    qop_t *q = arg;
    return size_transfers(s, q, q->a_g2r, q->a_g2s, q->g2len, &q->e2len, 1, 1);
}

/* Two-phase all-reduce: decode every rank's block into the output. */
static tempo_status_t st_final2(tempo__sched_t *s, void *arg)
{
    qop_t *q = arg;
    (void)s;
    uint64_t t0 = tempo__now_ns();
    for (int j = 0; j < q->n; j++) {
        tempo__qctx_t c;
        ctx_of(q, NULL, shared_seed(q, 100 + j), &c);
        const uint8_t *src = j == q->r ? q->e2 : q->g2 + q->g2off[j];
        size_t len = (size_t)(j == q->r ? q->e2len : q->g2len[j]);
        TEMPO_CHECK(q->kind->decode(&c, src, len, q->bcnt[j], q->out + q->boff[j], 0));
    }
    q->qc->st.decode_s += secs(t0);
    return TEMPO_OK;
}

/* Gather all-reduce and reduce-scatter: the sum of my block is the result. */
static tempo_status_t st_final1(tempo__sched_t *s, void *arg)
{
    qop_t *q = arg;
    (void)s;
    return sum_block(q, q->out);
}

/* ---------------------------------------------------------------------------------------------- */
/* Ring all-reduce of a wire array (sum and low-rank kinds)                                       */
/* ---------------------------------------------------------------------------------------------- */

static tempo_status_t st_radd(tempo__sched_t *s, void *arg)
{
    radd_t *a = arg;
    (void)s;
    if (a->q->wdt == 0) {
        float *d = a->dst;
        const float *t = a->tmp;
        for (size_t i = 0; i < a->cnt; i++) {
            d[i] += t[i];
        }
        return TEMPO_OK;
    }
    float fa[512], fb[512];
    uint16_t *d = a->dst;
    const uint16_t *t = a->tmp;
    for (size_t i = 0; i < a->cnt; i += 512) {
        size_t m = TEMPO_MIN((size_t)512, a->cnt - i);
        tempo__half_to_f32((tempo_dtype_t)a->q->wdt, d + i, fa, m);
        tempo__half_to_f32((tempo_dtype_t)a->q->wdt, t + i, fb, m);
        for (size_t k = 0; k < m; k++) {
            fa[k] += fb[k];
        }
        tempo__f32_to_half((tempo_dtype_t)a->q->wdt, fa, d + i, m);
    }
    return TEMPO_OK;
}

/* Append a ring all-reduce of buf (cnt elements of es bytes) whose first transfers join the
 * current round; tmp holds one block. Owners add, then blocks travel unchanged, so every rank ends
 * with the same bytes. */
static tempo_status_t ring_append(tempo__sched_t *s, qop_t *q, void *buf, size_t cnt, size_t es,
                                  void *tmp)
{
    int n = q->n, r = q->r;
    if (n == 1) {
        return TEMPO_OK;
    }
    char *b = buf;
    int right = (r + 1) % n, left = (r + n - 1) % n;
    radd_t *adds = qalloc(q, sizeof(radd_t) * (size_t)n);
    if (!adds) {
        return TEMPO_ERR_NOMEM;
    }
    for (int t = 0; t < n - 1; t++) {
        size_t so, sc, ro, rc;
        tempo__block(cnt, n, tempo__mod(r - t, n), &so, &sc);
        tempo__block(cnt, n, tempo__mod(r - t - 1, n), &ro, &rc);
        if (t > 0) {
            tempo__sched_round(s);
            tempo__sched_call(s, st_radd, &adds[t - 1]);
        }
        int a = tempo__sched_send(s, right, b + so * es, sc * es);
        int c = tempo__sched_recv(s, left, tmp, rc * es);
        if (a >= 0 && c >= 0) {
            tempo__sched_act(s, a)->skip_empty = 1;
            tempo__sched_act(s, c)->skip_empty = 1;
        }
        adds[t] = (radd_t){q, b + ro * es, tmp, rc};
    }
    tempo__sched_round(s);
    tempo__sched_call(s, st_radd, &adds[n - 2]);
    for (int t = 0; t < n - 1; t++) {
        size_t so, sc, ro, rc;
        tempo__block(cnt, n, tempo__mod(r + 1 - t, n), &so, &sc);
        tempo__block(cnt, n, tempo__mod(r - t, n), &ro, &rc);
        if (t > 0) {
            tempo__sched_round(s);
        }
        int a = tempo__sched_send(s, right, b + so * es, sc * es);
        int c = tempo__sched_recv(s, left, b + ro * es, rc * es);
        if (a >= 0 && c >= 0) {
            tempo__sched_act(s, a)->skip_empty = 1;
            tempo__sched_act(s, c)->skip_empty = 1;
        }
    }
    return TEMPO_OK;
}

/* Sum kinds: encode the (pre-divided for 16-bit avg) input into the wire array. */
static tempo_status_t st_sum_encode(tempo__sched_t *s, void *arg)
{
    qop_t *q = arg;
    (void)s;
    TEMPO_CHECK(prepare(q));
    const float *x = q->in;
    if (q->avg && q->wdt) { /* divide first: 16-bit sums overflow (fp16 above 65504) */
        float n = (float)q->n;
        float *xs = q->tmp; /* big enough: allocated for count floats in this case */
        for (size_t i = 0; i < q->count; i++) {
            xs[i] = x[i] / n;
        }
        x = xs;
    }
    uint64_t t0 = tempo__now_ns();
    tempo__qctx_t c;
    tempo__rng_seed(&q->rng, tempo__qseed(&q->qc->p, q->k->key, q->call, 1, q->r), 0);
    ctx_of(q, &q->rng, shared_seed(q, 0), &c);
    size_t len = q->kind->encode(&c, x, q->count, q->wire);
    q->qc->st.calls++;
    q->qc->st.coords += q->count;
    q->qc->st.bytes_out += len;
    q->qc->st.encode_s += secs(t0);
    if (q->k->residual) {
        /* the residual is against the (undivided) compensated input: scale the decode back */
        float *rs = q->k->residual;
        ctx_of(q, NULL, shared_seed(q, 0), &c);
        for (size_t i = 0; i < q->count; i++) {
            rs[i] = 0;
        }
        TEMPO_CHECK(q->kind->decode(&c, q->wire, len, q->count, rs, 1));
        float mul = q->avg && q->wdt ? (float)q->n : 1.0f;
        for (size_t i = 0; i < q->count; i++) {
            rs[i] = q->in[i] - rs[i] * mul;
        }
    }
    leave_key(q);
    return TEMPO_OK;
}

static tempo_status_t st_sum_decode(tempo__sched_t *s, void *arg)
{
    qop_t *q = arg;
    (void)s;
    uint64_t t0 = tempo__now_ns();
    tempo__qctx_t c;
    ctx_of(q, NULL, shared_seed(q, 0), &c);
    TEMPO_CHECK(q->kind->decode(&c, q->wire, q->wcount * (q->wdt ? 2 : 4), q->count, q->out, 0));
    if (q->avg && !q->wdt) {
        float n = (float)q->n;
        for (size_t i = 0; i < q->count; i++) {
            q->out[i] /= n;
        }
    }
    q->qc->st.decode_s += secs(t0);
    return TEMPO_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* PowerSGD                                                                                       */
/* ---------------------------------------------------------------------------------------------- */

static tempo_status_t st_psgd1(tempo__sched_t *s, void *arg)
{
    qop_t *q = arg;
    (void)s;
    TEMPO_CHECK(prepare(q));
    uint64_t t0 = tempo__now_ns();
    memcpy(q->m, q->in, q->count * sizeof(float));
    if (q->plain) {
        return TEMPO_OK; /* the ring sums m itself */
    }
    int rk = q->qc->p.rank;
    size_t qlen = q->cols * (size_t)rk;
    tempo__qkey_t *k = q->k;
    if (!k->psgd_q || k->qlen != qlen) {
        tempo__free(k->psgd_q);
        k->psgd_q = tempo__malloc(qlen * sizeof(float), "PowerSGD warm start");
        if (!k->psgd_q) {
            return TEMPO_ERR_NOMEM;
        }
        k->qlen = qlen;
        tempo__rng_t g; /* the same on every rank */
        tempo__rng_seed(&g, tempo__qseed(&q->qc->p, k->key, 0, 7, -1), 0);
        for (size_t i = 0; i < qlen; i++) {
            k->psgd_q[i] = (float)tempo__rng_normal(&g);
        }
    }
    tempo__psgd_mul_p(q->m, q->rows, q->cols, k->psgd_q, rk, q->pm);
    q->qc->st.encode_s += secs(t0);
    return TEMPO_OK;
}

static tempo_status_t st_psgd2(tempo__sched_t *s, void *arg)
{
    qop_t *q = arg;
    (void)s;
    uint64_t t0 = tempo__now_ns();
    int rk = q->qc->p.rank;
    tempo__psgd_orthonormalize(q->pm, q->rows, rk);
    tempo__psgd_mul_q(q->m, q->rows, q->cols, q->pm, rk, q->qm);
    q->qc->st.encode_s += secs(t0);
    return TEMPO_OK;
}

static tempo_status_t st_psgd3(tempo__sched_t *s, void *arg)
{
    qop_t *q = arg;
    (void)s;
    uint64_t t0 = tempo__now_ns();
    float mul = q->avg ? 1.0f : (float)q->n;
    if (q->plain) { /* m holds the exact sum: nothing is left over */
        for (size_t i = 0; i < q->count; i++) {
            q->out[i] = q->avg ? q->m[i] / (float)q->n : q->m[i];
            if (q->k->residual) {
                q->k->residual[i] = 0;
            }
        }
        leave_key(q);
        return TEMPO_OK;
    }
    int rk = q->qc->p.rank;
    size_t qlen = q->cols * (size_t)rk;
    float inv = 1.0f / (float)q->n;
    for (size_t i = 0; i < qlen; i++) {
        q->qm[i] *= inv; /* the mean of the ranks' M^T P */
    }
    float *approx = q->tmp; /* rows x cols */
    tempo__psgd_approx(q->pm, q->qm, q->rows, q->cols, rk, approx);
    float *rs = q->k->residual;
    for (size_t i = 0; i < q->count; i++) {
        if (rs) {
            rs[i] = q->in[i] - approx[i];
        }
        q->out[i] = approx[i] * mul;
    }
    memcpy(q->k->psgd_q, q->qm, qlen * sizeof(float));
    q->qc->st.calls++;
    q->qc->st.coords += q->count;
    q->qc->st.bytes_out += (q->rows + q->cols) * (size_t)rk * 4;
    q->qc->st.decode_s += secs(t0);
    leave_key(q);
    return TEMPO_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Building                                                                                       */
/* ---------------------------------------------------------------------------------------------- */

/* Stage-1 exchange: fixed sizes (set now) or a size round first (set by st_size1). */
static tempo_status_t add_exchange1(tempo__sched_t *s, qop_t *q, int gather)
{
    int n = q->n, r = q->r;
    if (q->variable) {
        for (int j = 0; j < n; j++) {
            if (j != r) {
                tempo__sched_send(s, j, &q->e1len[gather ? 0 : j], 8);
                tempo__sched_recv(s, j, &q->r1len[j], 8);
            }
        }
        tempo__sched_round(s);
        tempo__sched_call(s, st_size1, q);
    }
    for (int j = 0; j < n; j++) {
        if (j == r) {
            continue;
        }
        int b = gather ? 0 : j;
        size_t fixed = q->kind->bound(&q->qc->p, q->bcnt[gather ? 0 : r]);
        q->a_s1[j] = tempo__sched_send(s, j, q->e1 + q->e1off[b],
                                       q->kind->bound(&q->qc->p, q->bcnt[b]));
        q->a_r1[j] = tempo__sched_recv(s, j, q->r1 + q->r1off[j], fixed);
        if (q->a_s1[j] < 0 || q->a_r1[j] < 0) {
            return TEMPO_ERR_NOMEM;
        }
        tempo__sched_act(s, q->a_s1[j])->skip_empty = 1;
        tempo__sched_act(s, q->a_r1[j])->skip_empty = 1;
        if (!q->variable) {
            q->r1len[j] = fixed;
        }
    }
    return TEMPO_OK;
}

static tempo_status_t build_blocks(tempo__sched_t *s, qop_t *q)
{
    int n = q->n, r = q->r;
    const tempo__qparams_t *p = &q->qc->p;
    int gather = q->kind->agg == TEMPO__QAGG_GATHER && q->allreduce;
    q->boff = qalloc(q, sizeof(size_t) * (size_t)n);
    q->bcnt = qalloc(q, sizeof(size_t) * (size_t)n);
    q->e1off = qalloc(q, sizeof(size_t) * (size_t)n);
    q->e1len = qalloc(q, sizeof(uint64_t) * (size_t)n);
    q->r1off = qalloc(q, sizeof(size_t) * (size_t)n);
    q->r1len = qalloc(q, sizeof(uint64_t) * (size_t)n);
    q->a_r1 = qalloc(q, sizeof(int) * (size_t)n);
    q->a_s1 = qalloc(q, sizeof(int) * (size_t)n);
    if (!q->boff || !q->bcnt || !q->e1off || !q->e1len || !q->r1off || !q->r1len ||
        !q->a_r1 || !q->a_s1) {
        return TEMPO_ERR_NOMEM;
    }
    if (gather) {
        q->boff[0] = 0;
        q->bcnt[0] = q->count;
    } else if (q->allreduce) { /* whole buckets per block */
        size_t nbk = (q->count + p->bucket - 1) / p->bucket;
        for (int j = 0; j < n; j++) {
            size_t o, c;
            tempo__block(nbk, n, j, &o, &c);
            q->boff[j] = TEMPO_MIN(o * p->bucket, q->count);
            q->bcnt[j] = TEMPO_MIN((o + c) * p->bucket, q->count) - q->boff[j];
        }
    } else {
        size_t per = q->count / (size_t)n;
        for (int j = 0; j < n; j++) {
            q->boff[j] = (size_t)j * per;
            q->bcnt[j] = per;
        }
    }
    size_t tot = 0;
    for (int j = 0; j < (gather ? 1 : n); j++) {
        q->e1off[j] = tot;
        tot += TEMPO_ALIGN_UP(q->kind->bound(p, q->bcnt[j]), 64);
    }
    q->e1 = qalloc(q, tot);
    size_t rb = TEMPO_ALIGN_UP(rbound(q), 64);
    for (int j = 0; j < n; j++) {
        q->r1off[j] = (size_t)j * rb;
    }
    q->r1 = qalloc(q, rb * (size_t)n);
    if (!q->e1 || !q->r1) {
        return TEMPO_ERR_NOMEM;
    }

    if (q->kind->adaptive && (q->k->nlevels == 0 || tempo__qrefit_due(p, q->call))) {
        size_t sb = tempo__qstats_bytes(p);
        q->stats = qalloc(q, sb * (size_t)n);
        if (!q->stats) {
            return TEMPO_ERR_NOMEM;
        }
        tempo__sched_round(s);
        tempo__sched_call(s, st_stats, q);
        for (int j = 0; j < n; j++) {
            if (j != r) {
                tempo__sched_send(s, j, (char *)q->stats + (size_t)r * sb, sb);
                tempo__sched_recv(s, j, (char *)q->stats + (size_t)j * sb, sb);
            }
        }
        tempo__sched_round(s);
        tempo__sched_call(s, st_fit, q);
    } else {
        tempo__sched_round(s);
    }
    tempo__sched_call(s, st_encode1, q);
    TEMPO_CHECK(add_exchange1(s, q, gather));
    tempo__sched_round(s);
    if (!q->allreduce || gather) {
        tempo__sched_call(s, st_final1, q);
        return TEMPO_OK;
    }
    /* two-phase: stage 2 */
    size_t mine = q->bcnt[r];
    q->sum = qalloc(q, mine * sizeof(float));
    q->e2 = qalloc(q, q->kind->bound(p, mine));
    q->g2off = qalloc(q, sizeof(size_t) * (size_t)n);
    q->g2len = qalloc(q, sizeof(uint64_t) * (size_t)n);
    q->a_g2r = qalloc(q, sizeof(int) * (size_t)n);
    q->a_g2s = qalloc(q, sizeof(int) * (size_t)n);
    if (!q->sum || !q->e2 || !q->g2off || !q->g2len || !q->a_g2r || !q->a_g2s) {
        return TEMPO_ERR_NOMEM;
    }
    tot = 0;
    for (int j = 0; j < n; j++) {
        q->g2off[j] = tot;
        tot += TEMPO_ALIGN_UP(q->kind->bound(p, q->bcnt[j]), 64);
    }
    q->g2 = qalloc(q, tot);
    if (!q->g2) {
        return TEMPO_ERR_NOMEM;
    }
    tempo__sched_call(s, st_sum_encode2, q);
    if (q->variable) {
        for (int j = 0; j < n; j++) {
            if (j != r) {
                tempo__sched_send(s, j, &q->e2len, 8);
                tempo__sched_recv(s, j, &q->g2len[j], 8);
            }
        }
        tempo__sched_round(s);
        tempo__sched_call(s, st_size2, q);
    }
    for (int j = 0; j < n; j++) {
        if (j == r) {
            continue;
        }
        size_t bj = q->kind->bound(p, q->bcnt[j]);
        q->a_g2s[j] = tempo__sched_send(s, j, q->e2, q->kind->bound(p, mine));
        q->a_g2r[j] = tempo__sched_recv(s, j, q->g2 + q->g2off[j], bj);
        if (q->a_g2s[j] < 0 || q->a_g2r[j] < 0) {
            return TEMPO_ERR_NOMEM;
        }
        tempo__sched_act(s, q->a_g2s[j])->skip_empty = 1;
        tempo__sched_act(s, q->a_g2r[j])->skip_empty = 1;
        if (!q->variable) {
            q->g2len[j] = bj;
        }
    }
    tempo__sched_round(s);
    tempo__sched_call(s, st_final2, q);
    return TEMPO_OK;
}

static tempo_status_t build_sum(tempo__sched_t *s, qop_t *q)
{
    const tempo__qparams_t *p = &q->qc->p;
    const char *name = q->kind->name;
    q->wdt = !strcmp(name, "fp16") ? TEMPO_FLOAT16 : !strcmp(name, "bf16") ? TEMPO_BFLOAT16 : 0;
    size_t es = q->wdt ? 2 : 4, bytes = q->kind->bound(p, q->count);
    q->wcount = bytes / es;
    q->wire = qalloc(q, bytes);
    /* tmp: one ring block, or the pre-divided input */
    q->tmp = qalloc(q, TEMPO_MAX(q->wcount / (size_t)q->n + 1, q->wdt && q->avg ? q->count : 0) *
                           TEMPO_MAX(es, (size_t)4));
    if (!q->wire || !q->tmp) {
        return TEMPO_ERR_NOMEM;
    }
    tempo__sched_round(s);
    tempo__sched_call(s, st_sum_encode, q);
    TEMPO_CHECK(ring_append(s, q, q->wire, q->wcount, es, q->tmp));
    tempo__sched_round(s);
    tempo__sched_call(s, st_sum_decode, q);
    return TEMPO_OK;
}

static tempo_status_t build_lowrank(tempo__sched_t *s, qop_t *q)
{
    int rk = q->qc->p.rank;
    tempo__psgd_shape(q->count, &q->rows, &q->cols);
    /* worth it only when P and Q are smaller than M (PyTorch's rule with a minimum rate of 2) */
    q->plain = (q->rows + q->cols) * (size_t)rk * 2 >= q->rows * q->cols;
    size_t mn = q->plain ? q->count : q->rows * q->cols;
    q->m = qalloc(q, mn * sizeof(float));
    q->wdt = 0;
    if (!q->m) {
        return TEMPO_ERR_NOMEM;
    }
    tempo__sched_round(s);
    tempo__sched_call(s, st_psgd1, q);
    if (q->plain) {
        q->tmp = qalloc(q, (q->count / (size_t)q->n + 1) * sizeof(float));
        if (!q->tmp) {
            return TEMPO_ERR_NOMEM;
        }
        TEMPO_CHECK(ring_append(s, q, q->m, q->count, 4, q->tmp));
    } else {
        q->pm = qalloc(q, q->rows * (size_t)rk * sizeof(float));
        q->qm = qalloc(q, q->cols * (size_t)rk * sizeof(float));
        q->tmp = qalloc(q, mn * sizeof(float)); /* ring blocks, then P Q^T */
        if (!q->pm || !q->qm || !q->tmp) {
            return TEMPO_ERR_NOMEM;
        }
        TEMPO_CHECK(ring_append(s, q, q->pm, q->rows * (size_t)rk, 4, q->tmp));
        tempo__sched_round(s);
        tempo__sched_call(s, st_psgd2, q);
        TEMPO_CHECK(ring_append(s, q, q->qm, q->cols * (size_t)rk, 4, q->tmp));
    }
    tempo__sched_round(s);
    tempo__sched_call(s, st_psgd3, q);
    return TEMPO_OK;
}

tempo_status_t tempo__qcoll_start(tempo__op_t *op)
{
    struct tempo_compressor *qc = (struct tempo_compressor *)op->qc;
    int allreduce = op->coll == TEMPO__COLL_ALLREDUCE; /* (low-rank: all-reduce only, qc_unusable) */
    int n = op->comm->size;
    size_t count = allreduce ? op->count : op->count * (size_t)n;
    uint64_t key = op->user_tag;
    if (op->parent) { /* a chunk of a scheduled request: its own state */
        uint64_t h[3] = {op->user_tag, op->chunk, op->nchunks};
        key = tempo__hash64(h, sizeof(h), 0x51ed27);
    }
    tempo__qkey_t *k;
    TEMPO_CHECK(tempo__qkey_get(qc, key, count, &k));
    qop_t *q = tempo__calloc(1, sizeof(*q), "compressed collective");
    if (!q) {
        return TEMPO_ERR_NOMEM;
    }
    tempo__sched_t *s;
    tempo_status_t st = tempo__sched_create(op, 0, TEMPO_FLOAT32, TEMPO_SUM, &s);
    if (st != TEMPO_OK) {
        tempo__free(q);
        return st;
    }
    s->ext = q;
    q->sched_cleanup = op->cleanup;
    op->cleanup = qop_cleanup;
    q->op = op;
    q->qc = qc;
    q->kind = qc->kind;
    q->k = k;
    q->call = k->calls; /* taken for good once the schedule is built */
    q->n = n;
    q->r = op->comm->rank;
    q->allreduce = allreduce;
    q->avg = op->redop == TEMPO_AVG;
    q->variable = qc->p.entropy != TEMPO__QENT_NONE;
    q->count = count;
    q->in = op->sendbuf;
    q->out = op->recvbuf;
    size_t stride = op->stride ? op->stride : op->count;
    if (k->residual || (!allreduce && stride != op->count)) {
        q->xbuf = qalloc(q, count * sizeof(float));
        if (!q->xbuf) {
            return TEMPO_ERR_NOMEM;
        }
    }
    /* reduce-scatter: a chunk's input blocks sit stride apart; prepare() gathers them */
    switch (qc->kind->agg) {
    case TEMPO__QAGG_SUM:
        if (allreduce) {
            st = build_sum(s, q);
            break;
        }
        st = build_blocks(s, q); /* a reduce-scatter decodes and sums blocks */
        break;
    case TEMPO__QAGG_TWO_PHASE:
    case TEMPO__QAGG_GATHER: st = build_blocks(s, q); break;
    case TEMPO__QAGG_LOWRANK: st = build_lowrank(s, q); break;
    }
    if (st == TEMPO_OK) {
        st = tempo__sched_ready(s);
    }
    if (st == TEMPO_OK) {
        k->calls++;
    }
    return st;
}
