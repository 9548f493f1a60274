/*
 * test_sched.c — every schedule-based algorithm of the algorithm table (collectives/select.c),
 * built for every rank of communicators of 1..9 ranks without any communication, then checked and
 * executed symbolically:
 *
 *   matching    round by round, the sends from rank a to rank b are exactly the receives posted
 *               at b from a in the same round, in the same order, with the same byte counts
 *               (transfers of round k carry tag (ctx, seq, k); a send nobody receives, or a
 *               receive of the wrong size, is a hang or a TEMPO_ERR_INVALID in a real run); no
 *               rank sends to itself or outside the communicator;
 *   races       within a round, no receive writes memory that a send of the same round reads or
 *               that another receive writes (the outcome would depend on timing);
 *   results     the schedules are run by a synchronous simulator that follows the executor's rules
 *               (sched.c: local actions at round start, receives, sends, reductions in the order
 *               they were added), and the outputs are compared with the expected result of the
 *               collective; inputs of out-of-place calls must come back untouched, non-root
 *               buffers that may be NULL are NULL, and guard bytes around every buffer must
 *               survive;
 *   closure     when its last round ends, every rank has heard from every other rank: directly
 *               (a message of the operation) or through ranks that heard from it before they
 *               sent. Every message carries the call's signature and its receiver compares it, so
 *               this is what makes a call whose arguments differ on any rank fail on every rank
 *               instead of completing with TEMPO_OK somewhere (core/check.c); a broadcast root or
 *               a reduce leaf that only sends would never learn of it;
 *   layouts     out-of-place and every in-place layout tempo.h documents; several roots; counts
 *               from 1 element to several pipeline segments; integer, fp32/fp64 and fp16/bf16
 *               (which run in fp32 on a work buffer) with sum, avg, min and max.
 *
 * The communicators are fake: one world made by tempo__world_create with a peer table and no
 * transports, and one tempo_comm per rank made by tempo__comm_create. Algorithms that are not
 * schedules (allreduce:shm polls a shared region) are reported as skipped; the multi-rank tests
 * cover them.
 */
#include "config.h"

#include <math.h>

#include "collectives/coll.h"
#include "tests/unit/tu.h"

#define NMAX 9
#define GUARD 64

static tempo__world_t *world;
static tempo__op_progress_fn_t sched_progress; /* the generic executor, taken from a probe */

typedef struct {
    int n;
    struct tempo_comm *c[NMAX];
} fake_t;

static fake_t fakes[NMAX + 1];

static void make_world(void)
{
    tempo__peer_info_t table[NMAX];
    memset(table, 0, sizeof(table));
    for (int r = 0; r < NMAX; r++) {
        table[r].rank = r;
        table[r].pid = 1000 + r;
        table[r].host_id = 42;
        snprintf(table[r].hostname, sizeof(table[r].hostname), "node%d", r);
    }
    if (tempo__world_create(0, NMAX, table, 30.0, &world) != TEMPO_OK) {
        printf("Bail out! tempo__world_create failed: %s\n", tempo__errmsg());
        exit(1);
    }
    for (int n = 1; n <= NMAX; n++) {
        int ranks[NMAX];
        for (int r = 0; r < n; r++) {
            ranks[r] = r;
        }
        fakes[n].n = n;
        for (int r = 0; r < n; r++) {
            if (tempo__comm_create(world, ranks, n, r, n, &fakes[n].c[r]) != TEMPO_OK) {
                printf("Bail out! tempo__comm_create failed: %s\n", tempo__errmsg());
                exit(1);
            }
            fakes[n].c[r]->coll = calloc(1, sizeof(tempo__coll_comm_t)); /* no shm state */
            /* Every fake rank stands for another process with its own ids: the next one takes the
             * same context id again. */
            tempo__ctx_set_used(world, n, 0);
        }
    }
    /* Learn the executor's address from a schedule made directly. */
    tempo__op_t *probe = tempo__op_new(fakes[1].c[0], TEMPO__COLL_BARRIER);
    tempo__sched_t *s;
    tempo__sched_create(probe, 0, TEMPO_UINT8, TEMPO_SUM, &s);
    sched_progress = probe->progress;
    tempo__op_release(probe);
}

static void free_world(void)
{
    for (int n = 1; n <= NMAX; n++) {
        for (int r = 0; r < n; r++) {
            free(fakes[n].c[r]->coll);
            fakes[n].c[r]->coll = NULL;
            tempo__comm_free(fakes[n].c[r]);
        }
    }
    tempo__world_destroy(world, 0);
}

/* ------------------------------------------------------------------------------------------ */
/* Data                                                                                       */
/* ------------------------------------------------------------------------------------------ */

static double input_value(int rank, size_t i)
{
    return (double)((int)((rank * 7 + i * 3) % 11) - 5);
}

static void put(tempo_dtype_t d, void *p, size_t i, double v)
{
    switch (d) {
    case TEMPO_INT8: ((int8_t *)p)[i] = (int8_t)(int64_t)v; break;
    case TEMPO_UINT8: ((uint8_t *)p)[i] = (uint8_t)(int64_t)v; break;
    case TEMPO_INT32: ((int32_t *)p)[i] = (int32_t)(int64_t)v; break;
    case TEMPO_UINT32: ((uint32_t *)p)[i] = (uint32_t)(int64_t)v; break;
    case TEMPO_INT64: ((int64_t *)p)[i] = (int64_t)v; break;
    case TEMPO_UINT64: ((uint64_t *)p)[i] = (uint64_t)(int64_t)v; break;
    case TEMPO_FLOAT16: ((uint16_t *)p)[i] = tempo__f32_to_f16((float)v); break;
    case TEMPO_BFLOAT16: ((uint16_t *)p)[i] = tempo__f32_to_bf16((float)v); break;
    case TEMPO_FLOAT32: ((float *)p)[i] = (float)v; break;
    default: ((double *)p)[i] = v; break;
    }
}

/* The reduction over ranks 0..n-1 of input element i, stored as dtype at out[j]. The inputs are
 * small integers, so sums are exact in every type and order; avg divides once, in the type the
 * library divides in (fp32 for fp16/bf16, then one rounding). */
static void put_reduced(tempo_dtype_t d, tempo_op_t op, int n, size_t i, void *out, size_t j)
{
    double acc = input_value(0, i);
    for (int q = 1; q < n; q++) {
        double v = input_value(q, i);
        switch (op) {
        case TEMPO_MIN: acc = v < acc ? v : acc; break;
        case TEMPO_MAX: acc = v > acc ? v : acc; break;
        case TEMPO_PROD: acc *= v; break;
        default: acc += v; break;
        }
    }
    if (op == TEMPO_AVG) {
        switch (d) {
        case TEMPO_FLOAT64: acc = acc / n; break;
        case TEMPO_FLOAT32:
        case TEMPO_FLOAT16:
        case TEMPO_BFLOAT16: acc = (double)((float)acc / (float)n); break;
        case TEMPO_UINT8:
            acc = (double)(uint8_t)((uint8_t)(int64_t)acc / (uint8_t)n);
            break;
        case TEMPO_UINT32:
            acc = (double)((uint32_t)(int64_t)acc / (uint32_t)n);
            break;
        case TEMPO_UINT64:
            acc = (double)((uint64_t)(int64_t)acc / (uint64_t)n);
            break;
        default: acc = (double)((int64_t)acc / n); break; /* truncation toward zero */
        }
    }
    put(d, out, j, acc);
}

/* ------------------------------------------------------------------------------------------ */
/* One configuration: build, check, simulate                                                  */
/* ------------------------------------------------------------------------------------------ */

typedef enum { L_OOP, L_SAME, L_NCCL } layout_t;
static const char *const layout_names[] = {"out-of-place", "in-place (send == recv)",
                                           "in-place (NCCL offset)"};

typedef struct {
    const tempo__algo_t *algo;
    int n, root;
    size_t count;
    tempo_dtype_t dtype;
    tempo_op_t op;
    layout_t layout;
} conf_t;

typedef struct {
    char *a[NMAX], *b[NMAX];      /* allocations, GUARD bytes each side */
    size_t asz, bsz;
    char *saved_in[NMAX];         /* out-of-place inputs, to check they stay untouched */
    tempo__op_t *ops[NMAX];
} bufs_t;

static char why[1024];
static int failed;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
    if (failed++) {
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
}

static int overlaps(const void *x, size_t xl, const void *y, size_t yl)
{
    const char *p = x, *q = y;
    return xl && yl && p < q + yl && q < p + xl;
}

static void run_local(tempo__sched_t *s, tempo__sact_t *a)
{
    switch (a->kind) {
    case SA_COPY:
        if (a->dst != a->src && a->bytes) {
            memmove(a->dst, a->src, a->bytes);
        }
        break;
    case SA_REDUCE:
        if (a->tmp_first) {
            tempo__reduce3(a->dst, a->src, a->dst, a->count, s->dtype, s->redop);
        } else {
            tempo__reduce3(a->dst, a->dst, a->src, a->count, s->dtype, s->redop);
        }
        break;
    case SA_AVG: tempo__avg_finish(a->dst, a->count, s->dtype, s->nranks); break;
    case SA_HALF_TO_F32: tempo__half_to_f32(s->op->dtype, a->src, a->dst, a->count); break;
    case SA_F32_TO_HALF: tempo__f32_to_half(s->op->dtype, a->src, a->dst, a->count); break;
    default: break;
    }
}

static int is_xfer(int k)
{
    return k == SA_SEND || k == SA_RECV || k == SA_RECV_REDUCE;
}

typedef struct {
    int from;
    size_t bytes;
    char *data;
    unsigned heard; /* the sender's heard set when it posted the message */
    int used;
} msg_t;

/* Run every rank's schedule round by round; fail() on any violation. */
static void simulate(const conf_t *cf, bufs_t *bf)
{
    int n = cf->n;
    tempo__sched_t *s[NMAX];
    int maxr = 0;
    /* heard[r]: bit q set once rank r has heard from rank q, directly or transitively. A round's
     * sends are posted after the previous round has ended, so they carry the set of that time. */
    unsigned heard[NMAX], heard_next[NMAX];
    for (int r = 0; r < n; r++) {
        heard[r] = heard_next[r] = 1u << r;
        s[r] = bf->ops[r]->priv;
        maxr = TEMPO_MAX(maxr, s[r]->nrounds);
        if (s[r]->nrounds > 65535) {
            fail("rank %d: %d rounds exceed the tag space", r, s[r]->nrounds);
        }
    }
    for (int k = 0; k < maxr && !failed; k++) {
        int first[NMAX], end[NMAX];
        for (int r = 0; r < n; r++) {
            first[r] = end[r] = 0;
            if (k < s[r]->nrounds) {
                first[r] = s[r]->round_start[k];
                end[r] = k + 1 < s[r]->nrounds ? s[r]->round_start[k + 1] : s[r]->nacts;
            }
        }
        /* Local actions at the start of the round. */
        for (int r = 0; r < n; r++) {
            for (int i = first[r]; i < end[r]; i++) {
                if (!is_xfer(s[r]->acts[i].kind)) {
                    run_local(s[r], &s[r]->acts[i]);
                }
            }
        }
        /* Races inside the round, per rank. */
        for (int r = 0; r < n && !failed; r++) {
            for (int i = first[r]; i < end[r]; i++) {
                tempo__sact_t *x = &s[r]->acts[i];
                if (x->kind != SA_RECV && x->kind != SA_RECV_REDUCE) {
                    continue;
                }
                void *w = x->kind == SA_RECV ? x->dst : x->tmp;
                for (int j = first[r]; j < end[r]; j++) {
                    tempo__sact_t *y = &s[r]->acts[j];
                    if (j != i && y->kind == SA_SEND && overlaps(w, x->bytes, y->src, y->bytes)) {
                        fail("round %d, rank %d: a receive from %d writes what a send to %d reads",
                             k, r, x->peer, y->peer);
                    }
                    if (j > i && (y->kind == SA_RECV || y->kind == SA_RECV_REDUCE) &&
                        overlaps(w, x->bytes, y->kind == SA_RECV ? y->dst : y->tmp, y->bytes)) {
                        fail("round %d, rank %d: receives from %d and %d write the same memory", k,
                             r, x->peer, y->peer);
                    }
                }
            }
        }
        /* Sends: the bytes as they are when the round starts. */
        msg_t *q[NMAX][NMAX];
        int nq[NMAX][NMAX];
        memset(nq, 0, sizeof(nq));
        for (int a = 0; a < n; a++) {
            for (int b = 0; b < n; b++) {
                q[a][b] = NULL;
            }
        }
        for (int a = 0; a < n && !failed; a++) {
            for (int i = first[a]; i < end[a]; i++) {
                tempo__sact_t *x = &s[a]->acts[i];
                if (x->kind != SA_SEND) {
                    continue;
                }
                if (x->peer < 0 || x->peer >= n || x->peer == a) {
                    fail("round %d: rank %d sends to rank %d", k, a, x->peer);
                    break;
                }
                int b = x->peer;
                q[a][b] = realloc(q[a][b], sizeof(msg_t) * (size_t)(nq[a][b] + 1));
                msg_t *m = &q[a][b][nq[a][b]++];
                m->from = a;
                m->bytes = x->bytes;
                m->data = malloc(x->bytes ? x->bytes : 1);
                m->heard = heard[a];
                m->used = 0;
                if (x->bytes) {
                    memcpy(m->data, x->src, x->bytes);
                }
            }
        }
        /* Receives, in posting order per rank: each takes the oldest message from its peer. */
        int next[NMAX][NMAX];
        memset(next, 0, sizeof(next));
        for (int b = 0; b < n && !failed; b++) {
            for (int i = first[b]; i < end[b]; i++) {
                tempo__sact_t *x = &s[b]->acts[i];
                if (x->kind != SA_RECV && x->kind != SA_RECV_REDUCE) {
                    continue;
                }
                int a = x->peer;
                if (a < 0 || a >= n || a == b) {
                    fail("round %d: rank %d receives from rank %d", k, b, a);
                    break;
                }
                if (next[a][b] >= nq[a][b]) {
                    fail("round %d: rank %d waits for %zu bytes from rank %d, which sends nothing "
                         "more in that round (hang)", k, b, x->bytes, a);
                    break;
                }
                msg_t *m = &q[a][b][next[a][b]++];
                m->used = 1;
                heard_next[b] |= m->heard;
                if (m->bytes != x->bytes) {
                    fail("round %d: rank %d sends %zu bytes to rank %d, which receives %zu", k, a,
                         m->bytes, b, x->bytes);
                    break;
                }
                if (x->bytes) {
                    memcpy(x->kind == SA_RECV ? x->dst : x->tmp, m->data, x->bytes);
                }
            }
        }
        for (int a = 0; a < n; a++) {
            for (int b = 0; b < n; b++) {
                for (int i = 0; i < nq[a][b]; i++) {
                    if (!q[a][b][i].used && !failed) {
                        fail("round %d: rank %d sends %zu bytes to rank %d, which never receives "
                             "them in that round", k, a, q[a][b][i].bytes, b);
                    }
                    free(q[a][b][i].data);
                }
                free(q[a][b]);
            }
        }
        for (int r = 0; r < n; r++) {
            heard[r] = heard_next[r];
        }
        /* Reductions of the round, in the order they were added. */
        for (int r = 0; r < n && !failed; r++) {
            for (int i = first[r]; i < end[r]; i++) {
                tempo__sact_t *x = &s[r]->acts[i];
                if (x->kind == SA_RECV_REDUCE && x->count) {
                    if (x->tmp_first) {
                        tempo__reduce3(x->dst, x->tmp, x->src, x->count, s[r]->dtype, s[r]->redop);
                    } else {
                        tempo__reduce3(x->dst, x->src, x->tmp, x->count, s[r]->dtype, s[r]->redop);
                    }
                }
            }
        }
    }
    for (int r = 0; r < n && !failed; r++) {
        unsigned missing = ((1u << n) - 1) & ~heard[r];
        if (missing) {
            int q = 0;
            while (!(missing >> q & 1)) {
                q++;
            }
            fail("rank %d completes without having heard from rank %d, directly or through "
                 "another rank: a call whose arguments differ on rank %d could return TEMPO_OK "
                 "on rank %d", r, q, q, r);
        }
    }
}

static int is_reduction(int coll)
{
    return coll == TEMPO__COLL_ALLREDUCE || coll == TEMPO__COLL_REDUCE_SCATTER ||
           coll == TEMPO__COLL_REDUCE;
}

/* Build the operation of every rank, check and simulate; returns 1 if it ran, 0 if skipped. */
static int run_conf(const conf_t *cf, char *skip_why, size_t skip_len)
{
    int n = cf->n, coll = cf->algo->coll;
    size_t es = tempo_dtype_size(cf->dtype), c = cf->count;
    size_t in_elems = c, out_elems = c;
    switch (coll) {
    case TEMPO__COLL_REDUCE_SCATTER: in_elems = (size_t)n * c; break;
    case TEMPO__COLL_ALLGATHER: out_elems = (size_t)n * c; break;
    case TEMPO__COLL_ALLTOALL: in_elems = out_elems = (size_t)n * c; break;
    case TEMPO__COLL_BARRIER: in_elems = out_elems = 0; break;
    default: break;
    }
    bufs_t bf;
    memset(&bf, 0, sizeof(bf));
    bf.asz = TEMPO_MAX(in_elems, out_elems) * es;
    bf.bsz = out_elems * es;
    int ran = 1;
    for (int r = 0; r < n; r++) {
        bf.a[r] = malloc(bf.asz + 2 * GUARD);
        bf.b[r] = malloc(bf.bsz + 2 * GUARD);
        memset(bf.a[r], 0xcd, bf.asz + 2 * GUARD);
        memset(bf.b[r], 0xcd, bf.bsz + 2 * GUARD);
        char *A = bf.a[r] + GUARD, *B = bf.b[r] + GUARD;
        memset(B, 0xee, bf.bsz);
        const void *send = A;
        void *recv = B;
        size_t in_off = 0; /* element offset of the input in A */
        if (cf->layout == L_SAME) {
            recv = A;
        } else if (cf->layout == L_NCCL) {
            if (coll == TEMPO__COLL_REDUCE_SCATTER) {
                recv = A + (size_t)r * c * es;
            } else { /* allgather */
                recv = A;
                in_off = (size_t)r * c;
                send = A + in_off * es;
            }
        }
        for (size_t i = 0; i < in_elems; i++) {
            put(cf->dtype, A, in_off + i, input_value(r, i));
        }
        if (coll == TEMPO__COLL_BROADCAST && r != cf->root) {
            send = NULL; /* read on the root only */
        }
        if (coll == TEMPO__COLL_REDUCE && r != cf->root) {
            recv = NULL; /* ignored on other ranks */
        }
        if (coll == TEMPO__COLL_BARRIER) {
            send = recv = NULL;
        }
        if (cf->layout == L_OOP && send) {
            bf.saved_in[r] = malloc(in_elems * es + 1);
            memcpy(bf.saved_in[r], send, in_elems * es);
        }
        tempo__op_t *op = tempo__op_new(fakes[n].c[r], coll);
        op->sendbuf = send;
        op->recvbuf = recv;
        op->count = c;
        op->dtype = cf->dtype;
        op->redop = is_reduction(coll) ? cf->op : TEMPO_SUM;
        op->root = cf->root;
        op->seq = 7;
        bf.ops[r] = op;
        const char *unusable = cf->algo->unusable ? cf->algo->unusable(op) : NULL;
        if (unusable) {
            snprintf(skip_why, skip_len, "%s", unusable);
            ran = 0;
            continue;
        }
        tempo_status_t st = cf->algo->start(op);
        if (st != TEMPO_OK) {
            fail("rank %d: start failed: %s: %s", r, tempo_status_name(st), tempo__errmsg());
            continue;
        }
        if (op->progress != sched_progress) {
            snprintf(skip_why, skip_len, "not a schedule (own progress function)");
            ran = 0;
        }
    }
    if (ran && !failed) {
        simulate(cf, &bf);
    }
    /* Results. */
    for (int r = 0; ran && !failed && r < n; r++) {
        char *A = bf.a[r] + GUARD, *B = bf.b[r] + GUARD;
        const char *got = cf->layout == L_OOP ? B : A;
        size_t got_elems = out_elems;
        char *want = malloc(out_elems * es + 1);
        int check = 1;
        switch (coll) {
        case TEMPO__COLL_ALLREDUCE:
            for (size_t i = 0; i < c; i++) {
                put_reduced(cf->dtype, cf->op, n, i, want, i);
            }
            break;
        case TEMPO__COLL_REDUCE_SCATTER:
            for (size_t i = 0; i < c; i++) {
                put_reduced(cf->dtype, cf->op, n, (size_t)r * c + i, want, i);
            }
            if (cf->layout == L_NCCL) {
                got = A + (size_t)r * c * es;
            }
            break;
        case TEMPO__COLL_REDUCE:
            check = r == cf->root;
            for (size_t i = 0; i < c; i++) {
                put_reduced(cf->dtype, cf->op, n, i, want, i);
            }
            break;
        case TEMPO__COLL_ALLGATHER:
            for (int q2 = 0; q2 < n; q2++) {
                for (size_t i = 0; i < c; i++) {
                    put(cf->dtype, want, (size_t)q2 * c + i, input_value(q2, i));
                }
            }
            break;
        case TEMPO__COLL_BROADCAST:
            for (size_t i = 0; i < c; i++) {
                put(cf->dtype, want, i, input_value(cf->root, i));
            }
            if (cf->layout == L_SAME && r != cf->root) {
                got = A; /* non-roots: recvbuf is A in this layout too */
            }
            break;
        case TEMPO__COLL_ALLTOALL:
            for (int q2 = 0; q2 < n; q2++) {
                for (size_t i = 0; i < c; i++) {
                    put(cf->dtype, want, (size_t)q2 * c + i, input_value(q2, (size_t)r * c + i));
                }
            }
            break;
        default:
            check = 0;
            break;
        }
        if (check && memcmp(got, want, got_elems * es) != 0) {
            size_t i = 0;
            while (i < got_elems * es && got[i] == want[i]) {
                i++;
            }
            fail("rank %d: wrong result, first difference at byte %zu of %zu (element %zu)", r, i,
                 got_elems * es, i / es);
        }
        free(want);
        if (bf.saved_in[r] && memcmp(bf.saved_in[r], cf->layout == L_OOP ? A : A, in_elems * es)) {
            fail("rank %d: the out-of-place input buffer was modified", r);
        }
        for (size_t g = 0; g < GUARD; g++) {
            if ((unsigned char)bf.a[r][g] != 0xcd ||
                (unsigned char)bf.a[r][GUARD + bf.asz + g] != 0xcd ||
                (unsigned char)bf.b[r][g] != 0xcd ||
                (unsigned char)bf.b[r][GUARD + bf.bsz + g] != 0xcd) {
                fail("rank %d: a write outside the buffers (guard bytes changed)", r);
                break;
            }
        }
        if (cf->layout != L_OOP && coll != TEMPO__COLL_BROADCAST && coll != TEMPO__COLL_REDUCE) {
            for (size_t i = 0; i < bf.bsz; i++) {
                if ((unsigned char)B[i] != 0xee) {
                    fail("rank %d: in place, yet the unused buffer was written", r);
                    break;
                }
            }
        }
    }
    for (int r = 0; r < n; r++) {
        if (bf.ops[r]) {
            tempo__op_release(bf.ops[r]);
        }
        free(bf.a[r]);
        free(bf.b[r]);
        free(bf.saved_in[r]);
    }
    return ran;
}

/* ------------------------------------------------------------------------------------------ */

typedef struct {
    tempo_dtype_t d;
    tempo_op_t op;
} dop_t;

static void describe(const conf_t *cf, char *buf, size_t len)
{
    snprintf(buf, len, "n=%d count=%zu %s %s root=%d %s", cf->n, cf->count,
             tempo_dtype_name(cf->dtype), is_reduction(cf->algo->coll) ? tempo_op_name(cf->op) : "",
             cf->root, layout_names[cf->layout]);
}

static void test_algorithm(const tempo__algo_t *algo)
{
    int coll = algo->coll;
    static const dop_t red_dops[] = {
        {TEMPO_FLOAT32, TEMPO_SUM},  {TEMPO_FLOAT32, TEMPO_AVG}, {TEMPO_INT32, TEMPO_SUM},
        {TEMPO_INT32, TEMPO_AVG},    {TEMPO_INT8, TEMPO_MAX},    {TEMPO_FLOAT64, TEMPO_MIN},
        {TEMPO_FLOAT16, TEMPO_SUM},  {TEMPO_BFLOAT16, TEMPO_AVG}, {TEMPO_UINT64, TEMPO_SUM},
    };
    static const dop_t move_dops[] = {
        {TEMPO_INT8, TEMPO_SUM}, {TEMPO_FLOAT32, TEMPO_SUM}, {TEMPO_FLOAT64, TEMPO_SUM},
        {TEMPO_FLOAT16, TEMPO_SUM},
    };
    const dop_t *dops = is_reduction(coll) ? red_dops : move_dops;
    size_t ndops = is_reduction(coll) ? sizeof(red_dops) / sizeof(red_dops[0])
                                      : sizeof(move_dops) / sizeof(move_dops[0]);
    size_t counts[6] = {1, 7, 1000, 0, 0, 0};
    size_t ncounts = 3;
    if (coll == TEMPO__COLL_BROADCAST || coll == TEMPO__COLL_REDUCE) {
        counts[ncounts++] = 70001;   /* two pipeline segments of fp32 */
        counts[ncounts++] = 200003;  /* four */
    } else if (coll == TEMPO__COLL_ALLREDUCE) {
        counts[ncounts++] = 70001;
    } else if (coll != TEMPO__COLL_BARRIER) {
        counts[ncounts++] = 20001;
    }
    layout_t layouts[3] = {L_OOP, L_OOP, L_OOP};
    size_t nlayouts = 1;
    if (coll == TEMPO__COLL_REDUCE_SCATTER || coll == TEMPO__COLL_ALLGATHER) {
        layouts[nlayouts++] = L_SAME;
        layouts[nlayouts++] = L_NCCL;
    } else if (coll != TEMPO__COLL_BARRIER) {
        layouts[nlayouts++] = L_SAME;
    }
    if (coll == TEMPO__COLL_BARRIER) {
        ndops = 1;
        ncounts = 1;
    }
    int rooted = coll == TEMPO__COLL_BROADCAST || coll == TEMPO__COLL_REDUCE;
    for (int n = 1; n <= NMAX; n++) {
        int roots[3] = {0, n - 1, n / 2}, nroots = rooted ? 3 : 1;
        long runs = 0, skipped = 0;
        char skip_why[256] = "";
        /* In-place failures are tallied apart, so that a bug in one layout does not hide the
         * others (and can be reported on its own). */
        long inplace_fail[3] = {0, 0, 0};
        char inplace_first[3][1400] = {"", "", ""};
        for (size_t li = 0; li < nlayouts; li++) {
            for (size_t di = 0; di < ndops; di++) {
                for (size_t ci = 0; ci < ncounts; ci++) {
                    if (counts[ci] > 1000 && di > 0) {
                        continue; /* large counts with the first dtype only */
                    }
                    for (int ri = 0; ri < nroots; ri++) {
                        if (ri > 0 && roots[ri] == roots[0]) {
                            continue;
                        }
                        if (ri == 2 && roots[2] == roots[1]) {
                            continue;
                        }
                        conf_t cf = {algo, n, roots[ri], counts[ci], dops[di].d, dops[di].op,
                                     layouts[li]};
                        failed = 0;
                        if (!run_conf(&cf, skip_why, sizeof(skip_why))) {
                            skipped++;
                            continue;
                        }
                        runs++;
                        if (failed) {
                            inplace_fail[cf.layout]++;
                            if (!inplace_first[cf.layout][0]) {
                                char d[160];
                                describe(&cf, d, sizeof(d));
                                snprintf(inplace_first[cf.layout], sizeof(inplace_first[0]),
                                         "%s: %s", d, why);
                            }
                        }
                    }
                }
            }
        }
        if (skipped && !runs) {
            char reason[400];
            snprintf(reason, sizeof(reason), "not schedule-based on a fake communicator (%s); "
                     "the multi-rank tests run it", skip_why);
            tap_skip(reason, "%s:%s n=1..%d", tempo__coll_name(coll), algo->name, NMAX);
            return;
        }
        for (size_t li = 0; li < nlayouts; li++) {
            layout_t l = layouts[li];
            if (li > 0 && layouts[li] == layouts[li - 1]) {
                continue;
            }
            TAP_OK(inplace_fail[l] == 0,
                   "%s:%s n=%d %s: matched transfers, no races, right results, every rank hears "
                   "from all", tempo__coll_name(coll), algo->name, n, layout_names[l]);
            if (inplace_fail[l]) {
                tap_diag("  %ld failing configurations; first: %s", inplace_fail[l],
                         inplace_first[l]);
            }
        }
    }
}

static void test_p2p(void)
{
    /* send and recv are one-action schedules with the point-to-point tag. */
    const tempo__algo_t *snd = tempo__algo_find(TEMPO__COLL_SEND, "p2p");
    const tempo__algo_t *rcv = tempo__algo_find(TEMPO__COLL_RECV, "p2p");
    TAP_OK(snd && rcv, "send and recv have their p2p entries");
    if (!snd || !rcv) {
        return;
    }
    int ok = 1;
    char buf[64] = "hello", in[64] = "";
    for (int n = 2; n <= 4; n++) {
        tempo__op_t *so = tempo__op_new(fakes[n].c[0], TEMPO__COLL_SEND);
        tempo__op_t *ro = tempo__op_new(fakes[n].c[n - 1], TEMPO__COLL_RECV);
        so->sendbuf = buf;
        so->count = ro->count = 6;
        so->dtype = ro->dtype = TEMPO_INT8;
        so->root = n - 1;
        ro->root = 0;
        ro->recvbuf = in;
        so->ptag = ro->ptag = 12345;
        ok &= snd->start(so) == TEMPO_OK && rcv->start(ro) == TEMPO_OK;
        tempo__sched_t *ss = so->priv, *rs = ro->priv;
        ok &= ss->nrounds == 1 && rs->nrounds == 1 && ss->nacts == 1 && rs->nacts == 1;
        ok &= ss->acts[0].kind == SA_SEND && ss->acts[0].peer == n - 1 && ss->acts[0].bytes == 6;
        ok &= rs->acts[0].kind == SA_RECV && rs->acts[0].peer == 0 && rs->acts[0].bytes == 6;
        ok &= ss->p2p_tag == rs->p2p_tag && ss->p2p_tag == tempo__tag_p2p(n, 12345);
        tempo__op_release(so);
        tempo__op_release(ro);
    }
    TAP_OK(ok, "send/recv schedules: one transfer each, same point-to-point tag, same size");
}

static void test_tags(void)
{
    uint64_t t = tempo__tag_coll(5, 0xabcdef01u, 0x1234);
    TAP_EQ_UINT(t, (5ull << 48) | (0xabcdef01ull << 16) | 0x1234, "collective tag layout");
    TAP_EQ_UINT(tempo__tag_coll(TEMPO_CTX_MAX + 1, 0, 0) >> 63, 0,
                "a collective tag never has the point-to-point bit");
    TAP_EQ_UINT(tempo__tag_p2p(3, TEMPO_TAG_MAX), (1ull << 63) | (3ull << 48) | TEMPO_TAG_MAX,
                "point-to-point tag layout");
    TAP_OK(tempo__tag_coll(1, 2, 3) != tempo__tag_coll(1, 2, 4) &&
               tempo__tag_coll(1, 2, 3) != tempo__tag_coll(1, 3, 3) &&
               tempo__tag_coll(1, 2, 3) != tempo__tag_coll(2, 2, 3),
           "context, sequence number and round each change the tag");
}

int main(void)
{
    make_world();
    test_tags();
    test_p2p();
    int nsched = 0;
    for (size_t i = 0; i < tempo__nalgos; i++) {
        const tempo__algo_t *a = &tempo__algos[i];
        if (a->coll == TEMPO__COLL_SEND || a->coll == TEMPO__COLL_RECV) {
            continue;
        }
        nsched++;
        test_algorithm(a);
    }
    TAP_OK(nsched >= 11, "the algorithm table has the %d collective algorithms this test knows "
           "(found %d)", 12, nsched);
    free_world();
    return tap_done();
}
