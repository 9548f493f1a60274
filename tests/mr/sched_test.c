/*
 * sched_test.c — multi-rank test of scheduled requests (tempo_attr_t.priority): many concurrent
 * all-reduce, reduce-scatter and all-gather requests posted in a different order and at different
 * times on every rank, checked against exact references and against the same collectives run in
 * program order; the scheduler's order log checked for agreement across ranks and for priority
 * order; and the errors for requests that do not match across ranks.
 *
 * Every rank writes "GROUP STATUS DETAIL" lines to DIR/r<rank> (see mrtest.h); tests/mr/sched.sh
 * launches it and turns the files into TAP.
 *
 * Modes (--mode):
 *   normal       the request mix below (default)
 *   chunks       a reduce-scatter and an all-gather cut into 13565 chunks each (run_chunks)
 *   missing      every rank but the last posts scheduled tag 99 ("layer.missing"); the others must
 *                fail with TEMPO_ERR_TIMEOUT naming it and the last rank (run with a short
 *                TEMPO_TIMEOUT)
 *   mismatch     rank 1 posts tag 5 with another count: every rank fails with TEMPO_ERR_INVALID
 *
 * The request mix (identical on every rank, from --seed): NREQ requests of every scheduled
 * collective, with dtypes from int8 to float64, counts from 1 to a few hundred thousand (chunked
 * when TEMPO_CHUNK_BYTES is small), in place and out of place, random priorities, and tags shared
 * by two requests (occurrences 0 and 1). "Exact" requests carry small integers whose sums,
 * products, minima and maxima are exact in every dtype, so their results must equal a reference
 * computed here, bit for bit. "Float" requests carry random float32 values: their results must be
 * identical on every rank, and when unchunked and forced to the ring algorithm, bitwise equal to
 * the same all-reduce posted without a priority (program order). Between posts each rank does a
 * rank-dependent amount of arithmetic, and now and then a blocking all-reduce of its own (program
 * order lane) that is checked too. Each rank ends with "# results HASH", a hash of every result,
 * which sched.sh compares across launches (fixed and auto chunk sizes and credits).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tempo.h"
#include "tests/mr/mrtest.h"

#define NREQ 24

typedef struct {
    int coll; /* 0 allreduce, 1 reduce_scatter, 2 allgather */
    tempo_dtype_t dtype;
    tempo_op_t op;
    size_t count; /* allreduce: elements; reduce-scatter: recvcount; allgather: sendcount */
    int inplace;
    int exact;
    int ringcheck; /* float allreduce compared with the program-order lane, ring, unchunked */
    int prio;
    uint64_t tag;
    int twin; /* index of the earlier request with the same tag, or -1 */
    void *send, *recv, *expect;
    size_t send_bytes, recv_bytes;
    tempo_request_t req;
} spec_t;

static const char *coll_name(int c)
{
    return c == 0 ? "allreduce" : c == 1 ? "reduce_scatter" : "allgather";
}

static uint64_t rng(uint64_t *s)
{
    *s = mr_mix64(*s);
    return *s;
}

/* Exact value of rank r's element i: a small integer, so that every reduction of up to 8 ranks is
 * exact in every dtype (products use 1 and 2: at most 2^8 = 256, which 16-bit floats hold). */
static double exact_val(int r, size_t i, tempo_op_t op, uint64_t salt)
{
    uint64_t h = mr_hash3(salt, (uint64_t)r, i);
    if (op == TEMPO_PROD) {
        return (double)(1 + h % 2);
    }
    return (double)((int)(h % 9) - 4); /* -4..4 */
}

static int is_unsigned(tempo_dtype_t d)
{
    return d == TEMPO_UINT8 || d == TEMPO_UINT32 || d == TEMPO_UINT64;
}

static void store(void *buf, size_t i, tempo_dtype_t d, double v)
{
    switch (d) {
    case TEMPO_INT8: ((int8_t *)buf)[i] = (int8_t)v; break;
    case TEMPO_UINT8: ((uint8_t *)buf)[i] = (uint8_t)(int)v; break;
    case TEMPO_INT32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case TEMPO_UINT32: ((uint32_t *)buf)[i] = (uint32_t)(int64_t)v; break;
    case TEMPO_INT64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case TEMPO_UINT64: ((uint64_t *)buf)[i] = (uint64_t)(int64_t)v; break;
    case TEMPO_FLOAT16: ((uint16_t *)buf)[i] = mr_f32_to_f16((float)v); break;
    case TEMPO_BFLOAT16: ((uint16_t *)buf)[i] = mr_f32_to_bf16((float)v); break;
    case TEMPO_FLOAT32: ((float *)buf)[i] = (float)v; break;
    case TEMPO_FLOAT64: ((double *)buf)[i] = v; break;
    default: break;
    }
}

/* Rank r's value for an exact request: unsigned types get non-negative values for min/max so the
 * reference's ordering matches the wrapped representation. */
static double input_val(const spec_t *s, int r, size_t i, uint64_t salt)
{
    double v = exact_val(r, i, s->op, salt);
    if (is_unsigned(s->dtype) && (s->op == TEMPO_MIN || s->op == TEMPO_MAX || s->op == TEMPO_AVG)) {
        v = v < 0 ? -v : v;
    }
    return v;
}

static double fold(tempo_op_t op, double a, double b)
{
    switch (op) {
    case TEMPO_PROD: return a * b;
    case TEMPO_MIN: return a < b ? a : b;
    case TEMPO_MAX: return a > b ? a : b;
    default: return a + b;
    }
}

static double reduce_ref(const spec_t *s, size_t i, int n, uint64_t salt)
{
    double acc = input_val(s, 0, i, salt);
    for (int r = 1; r < n; r++) {
        acc = fold(s->op, acc, input_val(s, r, i, salt));
    }
    if (s->op == TEMPO_AVG) {
        if (s->dtype == TEMPO_FLOAT16 || s->dtype == TEMPO_BFLOAT16 || s->dtype == TEMPO_FLOAT32 ||
            s->dtype == TEMPO_FLOAT64) {
            acc = acc / n;
        } else {
            acc = (double)((int64_t)acc / n); /* integer division, truncating */
        }
    }
    return acc;
}

/* Fill inputs and the exact expected output of request k (salt distinguishes requests). */
static int prepare(spec_t *s, int k, int n, int r, uint64_t seed)
{
    size_t es = tempo_dtype_size(s->dtype);
    size_t in_elems = s->coll == 1 ? s->count * (size_t)n : s->count;
    size_t out_elems = s->coll == 2 ? s->count * (size_t)n : s->count;
    s->send_bytes = in_elems * es;
    s->recv_bytes = out_elems * es;
    size_t big = s->send_bytes > s->recv_bytes ? s->send_bytes : s->recv_bytes;
    s->send = calloc(1, big + 64);
    s->recv = s->inplace ? s->send : calloc(1, big + 64);
    s->expect = calloc(1, big + 64);
    if (!s->send || !s->recv || !s->expect) {
        return -1;
    }
    uint64_t salt = mr_hash3(seed, (uint64_t)k, 77);
    if (s->exact) {
        for (size_t i = 0; i < in_elems; i++) {
            store(s->send, i, s->dtype, input_val(s, r, i, salt));
        }
        if (s->coll == 0) {
            for (size_t i = 0; i < s->count; i++) {
                store(s->expect, i, s->dtype, reduce_ref(s, i, n, salt));
            }
        } else if (s->coll == 1) {
            for (size_t i = 0; i < s->count; i++) {
                store(s->expect, i, s->dtype, reduce_ref(s, (size_t)r * s->count + i, n, salt));
            }
        } else {
            for (int q = 0; q < n; q++) {
                for (size_t i = 0; i < s->count; i++) {
                    store(s->expect, (size_t)q * s->count + i, s->dtype,
                          input_val(s, q, i, salt));
                }
            }
        }
    } else {
        float *f = s->send;
        for (size_t i = 0; i < in_elems; i++) {
            uint64_t h = mr_hash3(salt, (uint64_t)r, i);
            f[i] = (float)((double)(h >> 11) / 9007199254740992.0 * 2.0 - 1.0) * 1e3f;
        }
    }
    /* All-gather in place (NCCL layout): the own block lives at its final position. */
    if (s->coll == 2 && s->inplace) {
        void *full = calloc(1, s->recv_bytes + 64);
        if (!full) {
            return -1; /* recv is still send: spec_free frees it */
        }
        s->recv = full;
        memcpy((char *)s->recv + (size_t)r * s->count * es, s->send, s->count * es);
        free(s->send);
        s->send = (char *)s->recv + (size_t)r * s->count * es;
    }
    return 0;
}

/* Free what prepare() allocated (a zeroed spec is a no-op). In place, recv is send, or (all-gather)
 * send points into recv. */
static void spec_free(spec_t *s)
{
    if (s->coll == 2 && s->inplace) {
        free(s->recv);
    } else {
        if (s->recv != s->send) {
            free(s->recv);
        }
        free(s->send);
    }
    free(s->expect);
    s->send = s->recv = s->expect = NULL;
}

static tempo_status_t post(tempo_comm_t comm, spec_t *s, const tempo_attr_t *a, tempo_request_t *rq)
{
    switch (s->coll) {
    case 0: return tempo_iallreduce(comm, s->send, s->recv, s->count, s->dtype, s->op, a, rq);
    case 1: return tempo_ireduce_scatter(comm, s->send, s->recv, s->count, s->dtype, s->op, a, rq);
    default: return tempo_iallgather(comm, s->send, s->recv, s->count, s->dtype, a, rq);
    }
}

/* Some rank-dependent arithmetic, so that ranks post at different times (no sleeping). */
static volatile double sink;
static void work(uint64_t *st, int r)
{
    size_t iters = (size_t)(rng(st) % 20000) * (size_t)(r + 1);
    double x = 1.0;
    for (size_t i = 0; i < iters; i++) {
        x = x * 1.0000001 + 1e-9;
    }
    sink = x;
}

static uint64_t fnv(const void *p, size_t len, uint64_t h)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < len; i++) {
        h = (h ^ c[i]) * 0x100000001b3ull;
    }
    return h;
}

/* ---------------------------------------------------------------------------------------------- */
/* The order log                                                                                  */
/* ---------------------------------------------------------------------------------------------- */

typedef struct {
    unsigned seq, occ, chunk, nchunks, ready, readycount;
    unsigned long long tag;
    int prio;
} logent_t;

static int read_log(const char *pattern, int wrank, logent_t **ents_p, int *n_p, uint64_t *hash_p)
{
    char path[4096];
    size_t o = 0;
    for (const char *p = pattern; *p && o + 16 < sizeof(path); p++) {
        if (p[0] == '%' && p[1] == 'r') {
            o += (size_t)snprintf(path + o, sizeof(path) - o, "%d", wrank);
            p++;
        } else {
            path[o++] = *p;
        }
    }
    path[o] = '\0';
    FILE *f = fopen(path, "r");
    if (!f) {
        return -1;
    }
    char line[512];
    int n = 0, cap = 0;
    logent_t *e = NULL;
    uint64_t h = 1469598103934665603ull;
    while (fgets(line, sizeof(line), f)) {
        if (line[0] == '#') {
            continue;
        }
        /* The name field at the end is the same everywhere; hash the whole line. */
        h = fnv(line, strlen(line), h);
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            e = realloc(e, sizeof(*e) * (size_t)cap);
        }
        logent_t *x = &e[n];
        if (sscanf(line, "%u tag=%llu occ=%u chunk=%u/%u prio=%d ready=%u readycount=%u", &x->seq,
                   &x->tag, &x->occ, &x->chunk, &x->nchunks, &x->prio, &x->ready,
                   &x->readycount) == 8) {
            n++;
        }
    }
    fclose(f);
    *ents_p = e;
    *n_p = n;
    *hash_p = h;
    return 0;
}

/* Is request key a strictly more urgent than b (occurrence, priority unless fifo, ready order)? */
static int more_urgent(const logent_t *a, const logent_t *b, int fifo)
{
    if (a->occ != b->occ) {
        return a->occ < b->occ;
    }
    if (!fifo && a->prio != b->prio) {
        return a->prio < b->prio;
    }
    return a->ready < b->ready;
}

static void check_order(mr_out_t *out, tempo_comm_t comm, int wrank, int fifo)
{
    const char *pattern = getenv("TEMPO_SCHED_LOG");
    if (!pattern || !pattern[0]) {
        mr_result(out, "sched/order", "SKIP", "TEMPO_SCHED_LOG not set");
        return;
    }
    logent_t *e = NULL;
    int n = 0;
    uint64_t h = 0;
    if (read_log(pattern, wrank, &e, &n, &h) != 0) {
        mr_result(out, "sched/order", "FAIL", "cannot read the order log %s", pattern);
        return;
    }
    /* Agreement: every rank logged the same lines. */
    int size = tempo_comm_size(comm);
    uint64_t *all = calloc((size_t)size, sizeof(uint64_t));
    tempo_status_t st = tempo_allgather(comm, &h, all, 1, TEMPO_UINT64);
    int same = st == TEMPO_OK;
    for (int q = 0; same && q < size; q++) {
        same = all[q] == all[0];
    }
    mr_result(out, "sched/order", same ? "PASS" : "FAIL",
              "order log identical on all ranks (%d chunks)%s%s", n, st == TEMPO_OK ? "" : ": ",
              st == TEMPO_OK ? "" : mr_errtext(comm, st));
    free(all);
    /* Sequence numbers consecutive; each request's chunks in index order. */
    int seq_ok = 1;
    for (int i = 0; i < n; i++) {
        seq_ok &= e[i].seq == (unsigned)i;
    }
    mr_result(out, "sched/order", seq_ok ? "PASS" : "FAIL", "lane sequence numbers consecutive");
    /* Priority: when chunk a was picked, no more urgent request that was already ready (its ready
     * number below a's ready count) had a chunk still waiting. */
    int violations = 0, contested = 0;
    for (int i = 0; i < n; i++) {
        int choice = 0;
        for (int j = i + 1; j < n; j++) {
            if (e[j].ready < e[i].readycount &&
                (e[j].tag != e[i].tag || e[j].occ != e[i].occ)) {
                choice = 1;
                if (more_urgent(&e[j], &e[i], fifo)) {
                    if (violations++ < 3) {
                        mr_result(out, "sched/order", "FAIL",
                                  "chunk %u (tag %llu occ %u prio %d ready %u) started before "
                                  "chunk %u (tag %llu occ %u prio %d ready %u), which was ready",
                                  e[i].seq, e[i].tag, e[i].occ, e[i].prio, e[i].ready, e[j].seq,
                                  e[j].tag, e[j].occ, e[j].prio, e[j].ready);
                    }
                }
            }
        }
        contested += choice;
    }
    mr_result(out, "sched/order", violations ? "FAIL" : "PASS",
              "%s order honoured: %d violations in %d chunk starts, %d of them with a choice",
              fifo ? "fifo" : "priority", violations, n, contested);
    free(e);
}

/* ---------------------------------------------------------------------------------------------- */

static void run_normal(tempo_comm_t comm, mr_out_t *out, uint64_t seed)
{
    int n = tempo_comm_size(comm), r = tempo_comm_rank(comm);
    static const tempo_dtype_t dtypes[] = {TEMPO_INT8,   TEMPO_UINT8,    TEMPO_INT32,
                                           TEMPO_UINT32, TEMPO_INT64,    TEMPO_UINT64,
                                           TEMPO_FLOAT16, TEMPO_BFLOAT16, TEMPO_FLOAT32,
                                           TEMPO_FLOAT64};
    static const size_t counts[] = {1, 7, 1037, 65549, 300007};
    spec_t s[NREQ];
    uint64_t st = seed;
    memset(s, 0, sizeof(s));
    for (int k = 0; k < NREQ; k++) {
        s[k].coll = (int)(rng(&st) % 3);
        s[k].exact = k % 4 != 3;
        s[k].dtype = s[k].exact ? dtypes[rng(&st) % 10] : TEMPO_FLOAT32;
        s[k].op = (tempo_op_t)(rng(&st) % 5);
        if (s[k].op == TEMPO_PROD && (s[k].dtype == TEMPO_INT8 || s[k].dtype == TEMPO_UINT8)) {
            s[k].op = TEMPO_SUM; /* 2^8 overflows 8 bits at 8 ranks */
        }
        size_t c = counts[rng(&st) % 5];
        if (s[k].coll != 0 && c > 65549) {
            c = 65549; /* per-rank blocks: keep the buffers a few MB */
        }
        s[k].count = c;
        s[k].inplace = rng(&st) % 3 == 0;
        s[k].prio = (int)(rng(&st) % 10);
        s[k].tag = 1000 + (uint64_t)k;
        s[k].twin = -1;
        if (!s[k].exact) {
            s[k].coll = 0;
            s[k].op = TEMPO_SUM;
            s[k].ringcheck = 1;
        }
        if (k >= NREQ / 2 && k % 5 == 0) { /* a second occurrence of an earlier tag */
            s[k].tag = s[k - NREQ / 2].tag;
            s[k].twin = k - NREQ / 2;
        }
        if (prepare(&s[k], k, n, r, seed) != 0) {
            mr_result(out, "sched/results", "FAIL", "out of memory");
            goto out_free;
        }
    }
    /* This rank's posting order: a shuffle, with same-tag requests kept in spec order (a tag's
     * occurrences must be posted in the same order everywhere). */
    int order[NREQ];
    for (int k = 0; k < NREQ; k++) {
        order[k] = k;
    }
    uint64_t rs = mr_hash3(seed, (uint64_t)r, 5);
    for (int k = NREQ - 1; k > 0; k--) {
        int j = (int)(rng(&rs) % (uint64_t)(k + 1));
        int t = order[k];
        order[k] = order[j];
        order[j] = t;
    }
    for (int a = 0; a < NREQ; a++) {
        for (int b = a + 1; b < NREQ; b++) {
            if (s[order[a]].tag == s[order[b]].tag && order[a] > order[b]) {
                int t = order[a];
                order[a] = order[b];
                order[b] = t;
            }
        }
    }
    int blocking_checks = 0;
    for (int a = 0; a < NREQ; a++) {
        spec_t *x = &s[order[a]];
        tempo_attr_t at = {0};
        at.field_mask = TEMPO_ATTR_PRIORITY | TEMPO_ATTR_TAG | TEMPO_ATTR_NAME;
        at.priority = x->prio;
        at.tag = x->tag;
        char name[64];
        snprintf(name, sizeof(name), "req%d.%s", order[a], coll_name(x->coll));
        at.name = name;
        if (x->ringcheck) {
            at.field_mask |= TEMPO_ATTR_ALGORITHM | TEMPO_ATTR_CHUNK_BYTES;
            at.algorithm = "ring";
            at.chunk_bytes = SIZE_MAX;
        }
        tempo_status_t ps = post(comm, x, &at, &x->req);
        if (ps != TEMPO_OK) {
            mr_result(out, "sched/results", "FAIL", "post of request %d: %s", order[a],
                      mr_errtext(comm, ps));
            x->req = NULL;
        }
        work(&rs, r);
        if (a % 4 == 0) { /* the program-order lane, while scheduled work is in flight: the same
                           * number of calls on every rank, after different requests */
            int32_t v[5] = {r, 1, -r, 2 * r, 7}, sum[5];
            tempo_status_t bs = tempo_allreduce(comm, v, sum, 5, TEMPO_INT32, TEMPO_SUM);
            int ok = bs == TEMPO_OK && sum[0] == n * (n - 1) / 2 && sum[1] == n &&
                     sum[2] == -n * (n - 1) / 2 && sum[3] == n * (n - 1) && sum[4] == 7 * n;
            blocking_checks++;
            if (!ok) {
                mr_result(out, "sched/mixed", "FAIL", "blocking allreduce between posts: %s",
                          bs == TEMPO_OK ? "wrong values" : mr_errtext(comm, bs));
            }
        }
    }
    mr_result(out, "sched/mixed", "PASS", "%d blocking allreduces interleaved with scheduled posts",
              blocking_checks);

    /* Wait in another rank-dependent order. */
    for (int a = 0; a < NREQ; a++) {
        int k = order[(a * 7 + r * 3) % NREQ];
        if (!s[k].req) {
            continue;
        }
        tempo_status_t ws = tempo_wait(&s[k].req);
        if (ws != TEMPO_OK) {
            mr_result(out, "sched/results", "FAIL", "request %d (%s): %s", k, coll_name(s[k].coll),
                      mr_errtext(comm, ws));
            s[k].exact = -1; /* skip its value check */
        }
    }
    /* Values. */
    for (int k = 0; k < NREQ; k++) {
        spec_t *x = &s[k];
        if (x->exact < 0) {
            continue;
        }
        const char *res = x->recv; /* in-place reduce-scatter: recvbuf == sendbuf, block r first */
        if (x->exact) {
            int ok = memcmp(res, x->expect, x->recv_bytes) == 0;
            mr_result(out, "sched/results", ok ? "PASS" : "FAIL",
                      "request %d: %s %zu x %s %s%s prio %d exact", k, coll_name(x->coll),
                      x->count, tempo_dtype_name(x->dtype), tempo_op_name(x->op),
                      x->inplace ? " in-place" : "", x->prio);
        }
    }
    /* Float requests: identical on every rank, and equal to the program-order lane's ring. */
    for (int k = 0; k < NREQ; k++) {
        spec_t *x = &s[k];
        if (x->exact != 0) {
            continue;
        }
        uint64_t h = fnv(x->recv, x->recv_bytes, 1469598103934665603ull), *all;
        all = calloc((size_t)n, sizeof(uint64_t));
        tempo_status_t gs = tempo_allgather(comm, &h, all, 1, TEMPO_UINT64);
        int same = gs == TEMPO_OK;
        for (int q = 0; same && q < n; q++) {
            same = all[q] == all[0];
        }
        free(all);
        /* Recompute through the program-order lane with the same algorithm. */
        uint64_t salt = mr_hash3(seed, (uint64_t)k, 77);
        float *in = malloc(x->send_bytes), *outb = malloc(x->recv_bytes);
        for (size_t i = 0; i < x->count; i++) {
            uint64_t hh = mr_hash3(salt, (uint64_t)r, i);
            in[i] = (float)((double)(hh >> 11) / 9007199254740992.0 * 2.0 - 1.0) * 1e3f;
        }
        tempo_attr_t ra = {0};
        ra.field_mask = TEMPO_ATTR_ALGORITHM;
        ra.algorithm = "ring";
        tempo_request_t rq;
        tempo_status_t rs2 = tempo_iallreduce(comm, in, outb, x->count, TEMPO_FLOAT32, TEMPO_SUM,
                                              &ra, &rq);
        if (rs2 == TEMPO_OK) {
            rs2 = tempo_wait(&rq);
        }
        int eq = rs2 == TEMPO_OK && memcmp(outb, x->recv, x->recv_bytes) == 0;
        mr_result(out, "sched/results", same && eq ? "PASS" : "FAIL",
                  "request %d: float32 allreduce %zu prio %d: same on all ranks %s, bitwise equal "
                  "to the program-order ring %s",
                  k, x->count, x->prio, same ? "yes" : "NO", eq ? "yes" : "NO");
        free(in);
        free(outb);
    }
    /* One hash of every result, for sched.sh to compare launches with different chunk sizes and
     * credits (auto and fixed): the same data must give the same bits. */
    uint64_t all = 1469598103934665603ull;
    for (int k = 0; k < NREQ; k++) {
        all = s[k].exact < 0 ? all : fnv(s[k].recv, s[k].recv_bytes, all);
    }
    fprintf(out->f, "# results %016llx\n", (unsigned long long)all);
out_free:
    for (int k = 0; k < NREQ; k++) {
        spec_free(&s[k]);
    }
}

/* Scheduled requests cut into very many chunks: a reduce-scatter and an all-gather of
 * CHUNKS_COUNT uint64 per rank block with chunk_bytes 64 (one element per rank and chunk at 5 to 8
 * ranks, two at 3 and 4: 13565 or 6783 chunks each, as many receives in flight per peer), posted
 * together and checked exactly. Before the stream matched tags by hash, every arriving message searched all
 * the receives in flight, and the coordinator spent so long in one progress call that its peers
 * heard nothing from it for TEMPO_TIMEOUT and timed out. */
#define CHUNKS_COUNT 13565

static void run_chunks(tempo_comm_t comm, mr_out_t *out, uint64_t seed)
{
    int n = tempo_comm_size(comm), r = tempo_comm_rank(comm);
    spec_t s[2];
    memset(s, 0, sizeof(s));
    for (int k = 0; k < 2; k++) {
        s[k].coll = k == 0 ? 1 : 2;
        s[k].dtype = TEMPO_UINT64;
        s[k].op = TEMPO_SUM;
        s[k].count = CHUNKS_COUNT;
        s[k].exact = 1;
        s[k].prio = k;
        s[k].tag = 2000 + (uint64_t)k;
        if (prepare(&s[k], k, n, r, seed) != 0) {
            mr_result(out, "sched/chunks", "FAIL", "out of memory");
            return;
        }
        tempo_attr_t at = {0};
        at.field_mask = TEMPO_ATTR_PRIORITY | TEMPO_ATTR_TAG | TEMPO_ATTR_CHUNK_BYTES;
        at.priority = s[k].prio;
        at.tag = s[k].tag;
        at.chunk_bytes = 64;
        tempo_status_t ps = post(comm, &s[k], &at, &s[k].req);
        if (ps != TEMPO_OK) {
            mr_result(out, "sched/chunks", "FAIL", "post of the %s: %s", coll_name(s[k].coll),
                      mr_errtext(comm, ps));
            s[k].req = NULL;
        }
    }
    for (int k = 0; k < 2; k++) {
        spec_t *x = &s[(k + r) % 2]; /* waited for in a rank-dependent order */
        if (!x->req) {
            continue;
        }
        tempo_status_t ws = tempo_wait(&x->req);
        int ok = ws == TEMPO_OK && memcmp(x->recv, x->expect, x->recv_bytes) == 0;
        mr_result(out, "sched/chunks", ok ? "PASS" : "FAIL",
                  "%s of %d x uint64 in 64-byte chunks: %s", coll_name(x->coll), CHUNKS_COUNT,
                  ws != TEMPO_OK ? mr_errtext(comm, ws) : ok ? "exact" : "wrong values");
    }
    for (int k = 0; k < 2; k++) {
        free(s[k].send);
        free(s[k].recv);
        free(s[k].expect);
    }
}

/* A request some rank never posts, or that differs across ranks. */
static void run_bad(tempo_comm_t comm, mr_out_t *out, int missing)
{
    int n = tempo_comm_size(comm), r = tempo_comm_rank(comm);
    if (n < 2) {
        mr_result(out, missing ? "sched/missing" : "sched/mismatch", "SKIP", "needs 2 ranks");
        return;
    }
    float a[16] = {0}, b[16] = {0};
    tempo_attr_t at = {0};
    at.field_mask = TEMPO_ATTR_PRIORITY | TEMPO_ATTR_TAG | TEMPO_ATTR_NAME;
    at.priority = 1;
    tempo_request_t rq = NULL;
    /* One request every rank posts, so that every rank uses the lane. */
    at.tag = 7;
    at.name = "layer.ok";
    tempo_status_t st = tempo_iallreduce(comm, a, b, 16, TEMPO_FLOAT32, TEMPO_SUM, &at, &rq);
    if (st == TEMPO_OK) {
        st = tempo_wait(&rq);
    }
    if (missing) {
        if (r == n - 1) {
            /* Stays in the job without posting tag 99: a blocking barrier nobody joins. */
            tempo_status_t bs = tempo_barrier(comm);
            mr_result(out, "sched/missing", bs != TEMPO_OK ? "PASS" : "FAIL",
                      "the rank that did not post: its barrier failed (%s)", mr_errtext(comm, bs));
            return;
        }
        at.tag = 99;
        at.name = "layer.missing";
        st = tempo_iallreduce(comm, a, b, 16, TEMPO_FLOAT32, TEMPO_SUM, &at, &rq);
        if (st == TEMPO_OK) {
            st = tempo_wait(&rq);
        }
        const char *msg = tempo_last_error(comm);
        char want[64];
        snprintf(want, sizeof(want), "but not by rank %d", n - 1);
        int ok = st == TEMPO_ERR_TIMEOUT && strstr(msg, "layer.missing") && strstr(msg, want);
        mr_result(out, "sched/missing", ok ? "PASS" : "FAIL",
                  "an unposted request fails with its name and the missing rank (%s)",
                  mr_errtext(comm, st));
        return;
    }
    at.tag = 5;
    at.name = "layer.mismatch";
    st = tempo_iallreduce(comm, a, b, r == 1 ? 10 : 12, TEMPO_FLOAT32, TEMPO_SUM, &at, &rq);
    if (st == TEMPO_OK) {
        st = tempo_wait(&rq);
    }
    const char *msg = tempo_last_error(comm);
    int ok = st == TEMPO_ERR_INVALID && strstr(msg, "ranks disagree on scheduled request") &&
             strstr(msg, "layer.mismatch") && strstr(msg, "count 10 on") &&
             strstr(msg, "count 12 on");
    mr_result(out, "sched/mismatch", ok ? "PASS" : "FAIL",
              "a request that differs across ranks fails everywhere (%s)", mr_errtext(comm, st));
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *mode = "normal";
    uint64_t seed = 20261123;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--out") && i + 1 < argc) {
            dir = argv[++i];
        } else if (!strcmp(argv[i], "--mode") && i + 1 < argc) {
            mode = argv[++i];
        } else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            seed = strtoull(argv[++i], NULL, 0);
        } else {
            fprintf(stderr, "usage: sched_test --out DIR [--mode normal|chunks|missing|mismatch] "
                            "[--seed N]\n");
            return 2;
        }
    }
    if (!dir) {
        fprintf(stderr, "sched_test: --out DIR is required\n");
        return 2;
    }
    tempo_comm_t comm;
    tempo_status_t st = tempo_comm_init_env(&comm);
    mr_out_t out;
    int wrank = st == TEMPO_OK ? tempo_comm_rank(comm) : atoi(getenv("TEMPO_RANK") ? getenv("TEMPO_RANK") : "0");
    mr_out_open(&out, dir, wrank);
    if (st != TEMPO_OK) {
        mr_result(&out, "sched/results", "FAIL", "init: %s", mr_errtext(NULL, st));
        mr_out_close(&out);
        return 1;
    }
    if (!strcmp(mode, "normal")) {
        fprintf(out.f, "# seed %llu\n", (unsigned long long)seed);
        run_normal(comm, &out, seed);
        const char *sched = getenv("TEMPO_SCHED");
        check_order(&out, comm, wrank, sched && !strcmp(sched, "fifo"));
    } else if (!strcmp(mode, "chunks")) {
        fprintf(out.f, "# seed %llu\n", (unsigned long long)seed);
        run_chunks(comm, &out, seed);
    } else {
        run_bad(comm, &out, !strcmp(mode, "missing"));
    }
    st = tempo_comm_destroy(comm);
    if (st != TEMPO_OK && !strcmp(mode, "normal")) {
        mr_result(&out, "sched/results", "FAIL", "destroy: %s", mr_errtext(NULL, st));
    }
    mr_out_close(&out);
    return 0;
}
