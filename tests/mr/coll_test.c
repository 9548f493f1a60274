/*
 * coll_test.c — multi-rank correctness test of every collective: each algorithm of the table
 * (forced through tempo_attr_t.algorithm on the non-blocking forms) and the automatic choice (the
 * blocking forms) × the 10 dtypes × the 5 ops × counts 0, 1, 1037 and a few MB × out-of-place and
 * in-place layouts × roots 0 and n-1; plus barriers, send/recv rings and a phase with ten requests
 * in flight at once. Run by tests/mr/coll_run.sh under tempo-run, one launch per rank count.
 *
 * It is not a TAP producer: every rank writes one line per check to DIR/r<rank> (see mrtest.h) and
 * the script aggregates the files, so a wrong result, a crash or a hang on any rank is seen even if
 * the library's own reporting is broken. A rank stops at the first error that leaves the job
 * unusable (a peer failure or a timeout); other errors are recorded and the test goes on.
 *
 * Reference values never come from the library. Every rank can generate every rank's input:
 *   reductions    element g (global index in the send buffer) of rank r is tab[r][A[g]], where A[g]
 *                 in [0,16) is a hash of g and tab (16 values per rank) comes from a per-case salt.
 *                 Values are chosen so the result is exact whatever the order or grouping of the
 *                 reduction (see mr_int_value(), mr_flt_value()), so the 16 expected values are
 *                 computed once per case with plain loops and checking is O(count) and bitwise.
 *   data movement byte k of rank r's send buffer is a hash of (salt, r, k).
 * Every buffer carries guard bytes before and after; out-of-place send buffers must come back
 * unchanged, receive buffers start filled with a poison pattern, and buffers that the API says are
 * ignored (reduce's recvbuf and broadcast's sendbuf off the root) must stay untouched.
 *
 * Usage: coll_test --list                 print the check groups, one per line, and exit
 *        coll_test --out DIR [--full-big] [--only GROUP-PREFIX] [--big-bytes BYTES]
 * --full-big runs the whole product at the MB size too; by default the MB size runs a reduced
 * product (see big_selected()). --big-bytes replaces the "few MB" (BIG_BYTES) with a smaller whole
 * buffer, 64 KiB to BIG_BYTES (mr_big_bytes()).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tempo.h"
#include "mrtest.h"

#define MiB (1024u * 1024u)
#define BIG_BYTES (3u * MiB)        /* the "few MB" size of a whole buffer (default, and most) */
#define CAP (BIG_BYTES + 64 * 1024) /* largest buffer + slack, bytes */
#define ODD_COUNT 1037              /* 17 * 61: not a multiple of any rank count 2..8 */
#define MAX_ALGOS 16
#define NCOLL MR_NCOLL

/* Buffer layouts. */
enum { P_OOP, P_INPLACE, P_SAME };
static const char *const place_names[] = {"out-of-place", "in-place", "in-place-same-ptr"};

/* How a request is completed. */
enum { API_BLOCK, API_WAIT, API_TEST };
static const char *const api_names[] = {"blocking", "nonblocking+wait", "nonblocking+test"};

typedef struct {
    tempo_comm_t comm;
    int rank, size;
    mr_out_t out;
    const char *dir;
    const char *only;
    int full_big;
    size_t big_bytes; /* the large size of a whole buffer, bytes: BIG_BYTES or --big-bytes */
    uint64_t salt; /* per case; all ranks walk the same cases, so it is the same on all */
    uint8_t *A;    /* (amax) class in [0,16) of a global element index */
    size_t amax;
    mr_gbuf_t S, R, X;                      /* send, receive, extra */
    int nalgo[NCOLL + 1];                   /* [NCOLL] = barrier */
    const char *algo[NCOLL + 1][MAX_ALGOS]; /* entry 0 is NULL: automatic choice, blocking call */
    int fatal;
    int barrier_seq;
} ctx_t;

/* ============================================================================================== */
/* Calling the library                                                                            */
/* ============================================================================================== */

static tempo_status_t run_call(ctx_t *c, const mr_call_t *k, int api)
{
    if (api == API_BLOCK) {
        return mr_call_blocking(c->comm, k);
    }
    tempo_attr_t attr = {0};
    if (k->algo) {
        attr.field_mask = TEMPO_ATTR_ALGORITHM | TEMPO_ATTR_TAG;
        attr.algorithm = k->algo;
        attr.tag = c->salt;
    }
    tempo_request_t req = NULL;
    tempo_status_t st = mr_post(c->comm, k, k->algo ? &attr : NULL, &req);
    if (st != TEMPO_OK) {
        return st;
    }
    if (api == API_WAIT) {
        return tempo_wait(&req);
    }
    while ((st = tempo_test(&req)) == TEMPO_INPROGRESS) {
        sched_yield();
    }
    return st;
}

/* Errors after which the job cannot go on: record and stop this rank. */
static int is_fatal(tempo_status_t st)
{
    return st == TEMPO_ERR_REMOTE || st == TEMPO_ERR_TIMEOUT || st == TEMPO_ERR_ABORTED ||
           st == TEMPO_ERR_INTERNAL || st == TEMPO_ERR_SYSTEM || st == TEMPO_ERR_NOMEM;
}

/* ============================================================================================== */
/* One case                                                                                       */
/* ============================================================================================== */

static void record(ctx_t *c, mr_verdict_t *v, tempo_status_t st)
{
    if (st == TEMPO_ERR_UNSUPPORTED) {
        mr_result(&c->out, v->group, "SKIP", "%s: %s", v->detail, mr_errtext(c->comm, st));
        return;
    }
    if (st != TEMPO_OK) {
        mr_result(&c->out, v->group, "FAIL", "%s: returned %s", v->detail, mr_errtext(c->comm, st));
        if (is_fatal(st)) {
            c->fatal = 1;
        }
        return;
    }
    if (v->failed) {
        mr_result(&c->out, v->group, "FAIL", "%s: %s", v->detail, v->why);
    } else {
        mr_result(&c->out, v->group, "PASS", "%s", v->detail);
    }
}

/* Elements per rank of the collective's count argument at the MB size. */
static size_t big_count(const ctx_t *c, int coll, tempo_dtype_t dt)
{
    size_t es = mr_esize(dt);
    int per_rank = coll == MR_REDUCE_SCATTER || coll == MR_ALLGATHER || coll == MR_ALLTOALL;
    return per_rank ? c->big_bytes / es / (size_t)c->size + 5 : c->big_bytes / es + 5;
}

/* Shift (misalignment) of the data: one element for the odd count, so buffers are not 16-byte
 * aligned there. */
static size_t shift_for(size_t count, size_t es)
{
    return count == ODD_COUNT ? es : 0;
}

static void run_case(ctx_t *c, int coll, const char *algo, tempo_dtype_t dt, tempo_op_t op,
                     size_t count, int place, int root, int api)
{
    int n = c->size, me = c->rank;
    size_t es = mr_esize(dt), cb = count * es, shift = shift_for(count, es);
    uint64_t salt = ++c->salt;
    mr_verdict_t v = {0};
    snprintf(v.group, sizeof(v.group), "%s/%s", mr_coll_name(coll), algo ? algo : "auto");
    int has_op = coll == MR_ALLREDUCE || coll == MR_REDUCE_SCATTER || coll == MR_REDUCE;
    int has_root = coll == MR_BROADCAST || coll == MR_REDUCE;
    char opt[32] = "", roott[32] = "";
    if (has_op) {
        snprintf(opt, sizeof(opt), " op=%s", tempo_op_name(op));
    }
    if (has_root) {
        snprintf(roott, sizeof(roott), " root=%d", root);
    }
    snprintf(v.detail, sizeof(v.detail), "dtype=%s%s count=%zu %s%s api=%s", tempo_dtype_name(dt),
             opt, count, place_names[place], roott, api_names[api]);

    mr_red_tabs_t t;
    if (has_op) {
        mr_red_tables(dt, op, salt, c->size, NULL, c->rank, &t);
    }
    /* count == 0 in place: NULL buffers, which the API allows. */
    int null0 = count == 0 && place != P_OOP;
    mr_call_t k = {coll, algo, NULL, NULL, count, dt, op, root};
    uint8_t *s = NULL, *r = NULL, *x = NULL;

    switch (coll) {
    case MR_ALLREDUCE:
        s = mr_gbuf_take(&c->S, cb, shift);
        mr_fill_tab(c->A, s, count, es, t.in);
        r = place == P_OOP ? mr_gbuf_take(&c->R, cb, shift) : s;
        k.send = null0 ? NULL : s;
        k.recv = null0 ? NULL : r;
        break;
    case MR_REDUCE_SCATTER:
        s = mr_gbuf_take(&c->S, (size_t)n * cb, shift);
        mr_fill_tab(c->A, s, (size_t)n * count, es, t.in);
        r = place == P_OOP       ? mr_gbuf_take(&c->R, cb, shift)
            : place == P_INPLACE ? s + (size_t)me * cb
                                 : s;
        k.send = null0 ? NULL : s;
        k.recv = null0 ? NULL : r;
        break;
    case MR_ALLGATHER:
        r = mr_gbuf_take(&c->R, (size_t)n * cb, shift);
        if (place == P_OOP) {
            s = mr_gbuf_take(&c->S, cb, shift);
        } else {
            s = place == P_INPLACE ? r + (size_t)me * cb : r;
        }
        mr_gen_bytes(s, cb, salt, me, 0);
        k.send = null0 ? NULL : s;
        k.recv = null0 ? NULL : r;
        break;
    case MR_BROADCAST:
        r = mr_gbuf_take(&c->R, cb, shift);
        if (place == P_OOP) {
            if (me == root) {
                s = mr_gbuf_take(&c->S, cb, shift);
                mr_gen_bytes(s, cb, salt, me, 0);
            } else if (root != 0) { /* a poisoned sendbuf off the root: must stay untouched */
                x = mr_gbuf_take(&c->X, cb, shift);
                s = x;
            }
        } else { /* the same call on every rank: broadcast(buf, buf) */
            s = r;
            if (me == root) {
                mr_gen_bytes(s, cb, salt, me, 0);
            }
        }
        k.send = null0 ? NULL : s;
        k.recv = null0 ? NULL : r;
        break;
    case MR_REDUCE:
        s = mr_gbuf_take(&c->S, cb, shift);
        mr_fill_tab(c->A, s, count, es, t.in);
        if (place == P_OOP) {
            if (me == root) {
                r = mr_gbuf_take(&c->R, cb, shift);
            } else if (root != 0) { /* a poisoned recvbuf off the root: must stay untouched */
                x = mr_gbuf_take(&c->X, cb, shift);
                r = x;
            }
        } else { /* the same call on every rank: reduce(buf, buf) */
            r = s;
        }
        k.send = null0 ? NULL : s;
        k.recv = null0 ? NULL : r;
        break;
    default: /* alltoall */
        r = mr_gbuf_take(&c->R, (size_t)n * cb, shift);
        s = place == P_OOP ? mr_gbuf_take(&c->S, (size_t)n * cb, shift) : r;
        mr_gen_bytes(s, (size_t)n * cb, salt, me, 0);
        k.send = null0 ? NULL : s;
        k.recv = null0 ? NULL : r;
        break;
    }

    tempo_status_t st = run_call(c, &k, api);
    if (st != TEMPO_OK) {
        record(c, &v, st);
        return;
    }

    switch (coll) {
    case MR_ALLREDUCE:
        mr_check_tab_at(&v, c->A, "recvbuf", r, count, dt, t.exp);
        if (place == P_OOP) {
            mr_check_tab_at(&v, c->A, "sendbuf (must be unchanged)", s, count, dt, t.in);
            mr_check_guards(&v, "recv", &c->R);
        }
        mr_check_guards(&v, "send", &c->S);
        break;
    case MR_REDUCE_SCATTER:
        mr_check_tab_at(&v, c->A + (size_t)me * count, "recvbuf", r, count, dt, t.exp);
        if (place == P_OOP) {
            mr_check_tab_at(&v, c->A, "sendbuf (must be unchanged)", s, (size_t)n * count, dt,
                            t.in);
            mr_check_guards(&v, "recv", &c->R);
        }
        mr_check_guards(&v, "send", &c->S);
        break;
    case MR_ALLGATHER:
        for (int j = 0; j < n; j++) {
            char what[64];
            snprintf(what, sizeof(what), "recvbuf block %d", j);
            mr_check_bytes_at(&v, what, r + (size_t)j * cb, cb, es, salt, j, 0);
        }
        if (place == P_OOP) {
            mr_check_bytes_at(&v, "sendbuf (must be unchanged)", s, cb, es, salt, me, 0);
            mr_check_guards(&v, "send", &c->S);
        }
        mr_check_guards(&v, "recv", &c->R);
        break;
    case MR_BROADCAST:
        mr_check_bytes_at(&v, "recvbuf", r, cb, es, salt, root, 0);
        if (place == P_OOP && me == root) {
            mr_check_bytes_at(&v, "sendbuf (must be unchanged)", s, cb, es, salt, me, 0);
            mr_check_guards(&v, "send", &c->S);
        }
        if (x) {
            mr_check_untouched(&v, "sendbuf off the root (read on root only)", x, cb);
            mr_check_guards(&v, "unused send", &c->X);
        }
        mr_check_guards(&v, "recv", &c->R);
        break;
    case MR_REDUCE:
        if (me == root) {
            mr_check_tab_at(&v, c->A, "recvbuf on the root", r, count, dt, t.exp);
            if (place == P_OOP) {
                mr_check_guards(&v, "recv", &c->R);
            }
        }
        if (place == P_OOP || me != root) {
            mr_check_tab_at(&v, c->A,
                            place == P_OOP ? "sendbuf (must be unchanged)"
                                           : "buffer off the root (must be unchanged)",
                            s, count, dt, t.in);
        }
        if (x) {
            mr_check_untouched(&v, "recvbuf off the root (ignored there)", x, cb);
            mr_check_guards(&v, "unused recv", &c->X);
        }
        mr_check_guards(&v, "send", &c->S);
        break;
    default:
        for (int j = 0; j < n; j++) {
            char what[64];
            snprintf(what, sizeof(what), "recvbuf block %d (from rank %d)", j, j);
            mr_check_bytes_at(&v, what, r + (size_t)j * cb, cb, es, salt, j, (size_t)me * cb);
        }
        if (place == P_OOP) {
            mr_check_bytes_at(&v, "sendbuf (must be unchanged)", s, (size_t)n * cb, es, salt, me,
                              0);
            mr_check_guards(&v, "send", &c->S);
        }
        mr_check_guards(&v, "recv", &c->R);
        break;
    }
    record(c, &v, st);
}

/* ============================================================================================== */
/* The product                                                                                    */
/* ============================================================================================== */

/*
 * The MB size runs a reduced product unless --full-big:
 *   reductions     every dtype with sum; every op with float32, with one 16-bit float type
 *                  (float16 at odd rank counts, bfloat16 at even ones) and with one integer type
 *                  (rotating with the rank count through int8, uint8, int32, uint32, int64, uint64)
 *   data movement  one dtype per element size: int8, bfloat16, float32, float64 (a byte mover
 *                  does not look at the type beyond its size)
 *   in-place with sendbuf == recvbuf (reduce_scatter, allgather): float32 (sum) only
 * Counts 0, 1 and 1037 always run the full product.
 */
static int big_selected(const ctx_t *c, int coll, tempo_dtype_t dt, tempo_op_t op, int place)
{
    static const tempo_dtype_t ints[6] = {TEMPO_INT8,   TEMPO_UINT8, TEMPO_INT32,
                                          TEMPO_UINT32, TEMPO_INT64, TEMPO_UINT64};
    if (c->full_big) {
        return 1;
    }
    if (place == P_SAME) {
        return dt == TEMPO_FLOAT32 && op == TEMPO_SUM;
    }
    if (coll == MR_ALLREDUCE || coll == MR_REDUCE_SCATTER || coll == MR_REDUCE) {
        return op == TEMPO_SUM || dt == TEMPO_FLOAT32 ||
               dt == (c->size % 2 ? TEMPO_FLOAT16 : TEMPO_BFLOAT16) || dt == ints[c->size % 6];
    }
    return dt == TEMPO_INT8 || dt == TEMPO_BFLOAT16 || dt == TEMPO_FLOAT32 || dt == TEMPO_FLOAT64;
}

static int selected(const ctx_t *c, const char *group)
{
    return !c->only || strncmp(group, c->only, strlen(c->only)) == 0;
}

static void run_collective(ctx_t *c, int coll)
{
    int has_op = coll == MR_ALLREDUCE || coll == MR_REDUCE_SCATTER || coll == MR_REDUCE;
    int has_root = coll == MR_BROADCAST || coll == MR_REDUCE;
    int nplaces = coll == MR_REDUCE_SCATTER || coll == MR_ALLGATHER ? 3 : 2;
    for (int ai = 0; ai < c->nalgo[coll] && !c->fatal; ai++) {
        const char *algo = c->algo[coll][ai];
        char group[80];
        snprintf(group, sizeof(group), "%s/%s", mr_coll_name(coll), algo ? algo : "auto");
        if (!selected(c, group)) {
            continue;
        }
        for (int ci = 0; ci < 4 && !c->fatal; ci++) {
            for (int d = 0; d < TEMPO_DTYPE_COUNT && !c->fatal; d++) {
                tempo_dtype_t dt = (tempo_dtype_t)d;
                size_t counts[4] = {0, 1, ODD_COUNT, big_count(c, coll, dt)};
                for (int o = 0; o < (has_op ? TEMPO_OP_COUNT : 1) && !c->fatal; o++) {
                    for (int p = 0; p < nplaces && !c->fatal; p++) {
                        if (ci == 3 && !big_selected(c, coll, dt, (tempo_op_t)o, p)) {
                            continue;
                        }
                        for (int ri = 0; ri < (has_root && c->size > 1 ? 2 : 1); ri++) {
                            int root = ri ? c->size - 1 : 0;
                            /* auto: blocking; forced: wait, and every 4th case a test loop */
                            int api = !algo ? API_BLOCK : (c->salt % 4 == 3) ? API_TEST : API_WAIT;
                            run_case(c, coll, algo, dt, (tempo_op_t)o, counts[ci], p, root, api);
                            if (c->fatal) {
                                break;
                            }
                        }
                    }
                }
            }
        }
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Barrier: checked through the file system, not through the library                             */
/* ---------------------------------------------------------------------------------------------- */

/* Before barrier #seq, each rank creates DIR/b<seq>.<rank>; after it, every rank's file must
 * exist. A barrier that lets a rank out early fails this check (most of the time). */
static void run_barrier(ctx_t *c, const char *algo, int api, size_t count_tag)
{
    char group[80], path[4096];
    snprintf(group, sizeof(group), "barrier/%s", algo ? algo : "auto");
    if (!selected(c, group)) {
        return;
    }
    int seq = c->barrier_seq++;
    snprintf(path, sizeof(path), "%s/b%d.%d", c->dir, seq, c->rank);
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0 || close(fd) != 0) {
        mr_result(&c->out, group, "FAIL", "cannot create %s: %s", path, strerror(errno));
        return;
    }
    tempo_status_t st;
    if (api == API_BLOCK) {
        st = tempo_barrier(c->comm);
    } else {
        tempo_attr_t attr = {.field_mask = TEMPO_ATTR_ALGORITHM, .algorithm = algo};
        tempo_request_t req = NULL;
        st = tempo_ibarrier(c->comm, algo ? &attr : NULL, &req);
        if (st == TEMPO_OK) {
            st = tempo_wait(&req);
        }
    }
    if (st == TEMPO_ERR_UNSUPPORTED) {
        mr_result(&c->out, group, "SKIP", "barrier #%d (after count %zu): %s", seq, count_tag,
                  mr_errtext(c->comm, st));
        return;
    }
    if (st != TEMPO_OK) {
        mr_result(&c->out, group, "FAIL", "barrier #%d (after count %zu) %s: returned %s", seq,
                  count_tag, api_names[api], mr_errtext(c->comm, st));
        c->fatal |= is_fatal(st);
        return;
    }
    for (int j = 0; j < c->size; j++) {
        struct stat sb;
        snprintf(path, sizeof(path), "%s/b%d.%d", c->dir, seq, j);
        if (stat(path, &sb) != 0) {
            mr_result(&c->out, group, "FAIL",
                      "barrier #%d (after count %zu) %s: returned before rank %d entered it", seq,
                      count_tag, api_names[api], j);
            return;
        }
    }
    mr_result(&c->out, group, "PASS", "barrier #%d (after count %zu) %s", seq, count_tag,
              api_names[api]);
}

/* ---------------------------------------------------------------------------------------------- */
/* Send/receive rings                                                                             */
/* ---------------------------------------------------------------------------------------------- */

/* Blocking ring: rank 0 sends, then receives; the others receive, then send (a chain, so it
 * needs no buffering). Non-blocking: two messages with the same tag to the next rank (they must
 * arrive in order) and one with another tag to the previous rank, all posted before any wait. */
static void run_p2p(ctx_t *c, tempo_dtype_t dt, size_t count, int nonblocking)
{
    const char *group = "p2p/ring";
    int n = c->size, me = c->rank, next = (me + 1) % n, prev = (me + n - 1) % n;
    size_t es = mr_esize(dt), cb = count * es;
    uint64_t salt = ++c->salt;
    char detail[160];
    snprintf(detail, sizeof(detail), "dtype=%s count=%zu %s", tempo_dtype_name(dt), count,
             nonblocking ? "isend/irecv, 3 messages" : "send/recv chain");
    if (n == 1) {
        mr_result(&c->out, group, "SKIP", "%s: needs 2 ranks", detail);
        return;
    }
    mr_verdict_t v = {0};
    tempo_status_t st = TEMPO_OK;
    /* S: two messages to next (2 * cb); R: their receipt (2 * cb); X: the reverse ring. */
    uint8_t *s = mr_gbuf_take(&c->S, 2 * cb, 0), *r = mr_gbuf_take(&c->R, 2 * cb, 0), *xs, *xr;
    mr_gen_bytes(s, 2 * cb, salt, me, 0);
    if (!nonblocking) {
        if (me == 0) {
            st = tempo_send(c->comm, s, count, dt, next, 7);
            if (st == TEMPO_OK) {
                st = tempo_recv(c->comm, r, count, dt, prev, 7);
            }
        } else {
            st = tempo_recv(c->comm, r, count, dt, prev, 7);
            if (st == TEMPO_OK) {
                st = tempo_send(c->comm, s, count, dt, next, 7);
            }
        }
        if (st == TEMPO_OK) {
            mr_check_bytes_at(&v, "message from the previous rank", r, cb, es, salt, prev, 0);
            mr_check_bytes_at(&v, "send buffer (must be unchanged)", s, cb, es, salt, me, 0);
        }
    } else {
        xs = mr_gbuf_take(&c->X, 2 * cb, 0);
        xr = xs + cb;
        mr_gen_bytes(xs, cb, salt ^ 0xabcdefull, me, 0);
        tempo_request_t req[6] = {0};
        tempo_status_t sts[6];
        uint32_t tag = (uint32_t)(salt & 0xffffu) + (TEMPO_TAG_MAX - 0xffffu); /* large tags */
        tempo_status_t pst = tempo_irecv(c->comm, r, count, dt, prev, tag, NULL, &req[0]);
        if (pst == TEMPO_OK) {
            pst = tempo_irecv(c->comm, r + cb, count, dt, prev, tag, NULL, &req[1]);
        }
        if (pst == TEMPO_OK) {
            pst = tempo_irecv(c->comm, xr, count, dt, next, 3, NULL, &req[2]);
        }
        if (pst == TEMPO_OK) {
            pst = tempo_isend(c->comm, s, count, dt, next, tag, NULL, &req[3]);
        }
        if (pst == TEMPO_OK) {
            pst = tempo_isend(c->comm, s + cb, count, dt, next, tag, NULL, &req[4]);
        }
        if (pst == TEMPO_OK) {
            pst = tempo_isend(c->comm, xs, count, dt, prev, 3, NULL, &req[5]);
        }
        st = tempo_waitall(6, req, sts);
        if (pst != TEMPO_OK) {
            st = pst;
        }
        if (st == TEMPO_OK) {
            mr_check_bytes_at(&v, "first message from the previous rank", r, cb, es, salt, prev, 0);
            mr_check_bytes_at(&v, "second message from the previous rank (same tag, in order)",
                              r + cb, cb, es, salt, prev, cb);
            mr_check_bytes_at(&v, "message from the next rank", xr, cb, es, salt ^ 0xabcdefull,
                              next, 0);
            mr_check_bytes_at(&v, "send buffer (must be unchanged)", s, 2 * cb, es, salt, me, 0);
            mr_check_guards(&v, "reverse", &c->X);
        }
    }
    if (st == TEMPO_OK) {
        mr_check_guards(&v, "send", &c->S);
        mr_check_guards(&v, "recv", &c->R);
    }
    snprintf(v.group, sizeof(v.group), "%s", group);
    snprintf(v.detail, sizeof(v.detail), "%s", detail);
    record(c, &v, st);
}

/* ---------------------------------------------------------------------------------------------- */
/* Many requests in flight                                                                        */
/* ---------------------------------------------------------------------------------------------- */

typedef struct {
    int kind; /* coll index, 6 = barrier, 7 = send, 8 = recv */
    mr_call_t k;
    const char *algo_used;
    uint8_t *s, *r; /* owned */
    uint64_t salt;
    mr_red_tabs_t t;
} inflight_t;

/* Post, at once: allreduce (float32 sum, out of place), reduce_scatter (int32 sum, NCCL in
 * place), allgather (float64), broadcast (bfloat16, root n-1, in place), reduce (float16 max, root
 * 0), alltoall (int8), a barrier, allreduce (uint8 min, in place), and a send/receive pair around
 * the ring (int64); then tempo_waitall and check all. Forced algorithms rotate with rep. */
static void run_inflight(ctx_t *c, size_t count_sel, int rep)
{
    const char *group = "inflight/mixed";
    int n = c->size, me = c->rank;
    enum { NOPS = 10 };
    static const int kinds[NOPS] = {MR_ALLREDUCE,
                                    MR_REDUCE_SCATTER,
                                    MR_ALLGATHER,
                                    MR_BROADCAST,
                                    MR_REDUCE,
                                    MR_ALLTOALL,
                                    6,
                                    MR_ALLREDUCE,
                                    7,
                                    8};
    static const tempo_dtype_t dts[NOPS] = {
        TEMPO_FLOAT32, TEMPO_INT32, TEMPO_FLOAT64, TEMPO_BFLOAT16, TEMPO_FLOAT16,
        TEMPO_INT8,    TEMPO_INT8,  TEMPO_UINT8,   TEMPO_INT64,    TEMPO_INT64};
    static const tempo_op_t ops[NOPS] = {TEMPO_SUM, TEMPO_SUM, TEMPO_SUM, TEMPO_SUM, TEMPO_MAX,
                                         TEMPO_SUM, TEMPO_SUM, TEMPO_MIN, TEMPO_SUM, TEMPO_SUM};
    inflight_t f[NOPS];
    tempo_request_t req[NOPS] = {0};
    tempo_status_t sts[NOPS], pst[NOPS];
    memset(f, 0, sizeof(f));
    for (int i = 0; i < NOPS; i++) {
        int kind = kinds[i];
        tempo_dtype_t dt = dts[i];
        size_t es = mr_esize(dt);
        size_t count = count_sel == 2   ? big_count(c, kind < NCOLL ? kind : MR_ALLREDUCE, dt)
                       : count_sel == 1 ? ODD_COUNT
                                        : 1;
        size_t cb = count * es;
        int per_rank = kind == MR_REDUCE_SCATTER || kind == MR_ALLGATHER || kind == MR_ALLTOALL;
        size_t sb = per_rank && kind != MR_ALLGATHER ? (size_t)n * cb : cb;
        size_t rb = per_rank && kind != MR_REDUCE_SCATTER ? (size_t)n * cb : cb;
        inflight_t *e = &f[i];
        e->kind = kind;
        e->salt = ++c->salt;
        e->k = (mr_call_t){kind < NCOLL ? kind : 0,         NULL, NULL, NULL, count, dt, ops[i],
                           kind == MR_BROADCAST ? n - 1 : 0};
        e->s = malloc(sb + 1); /* + 1: never malloc(0) */
        e->r = malloc(rb + 1);
        if (!e->s || !e->r) {
            fprintf(stderr, "out of memory\n");
            exit(2);
        }
        memset(e->r, MR_POISON, rb);
        if (kind == MR_ALLREDUCE || kind == MR_REDUCE_SCATTER || kind == MR_REDUCE) {
            mr_red_tables(dt, ops[i], e->salt, c->size, NULL, c->rank, &e->t);
            mr_fill_tab(c->A, e->s, sb / es, es, e->t.in);
        } else {
            mr_gen_bytes(e->s, sb, e->salt, me, 0);
        }
        if (kind < NCOLL && c->nalgo[kind] > 0) {
            e->k.algo = c->algo[kind][(rep + (i == 7)) % c->nalgo[kind]];
        } else if (kind == 6 && c->nalgo[NCOLL] > 0) {
            e->k.algo = c->algo[NCOLL][rep % c->nalgo[NCOLL]];
        }
        e->k.send = e->s;
        e->k.recv = e->r;
    }
    { /* reduce_scatter, NCCL in place: the whole buffer is s, this rank's block receives */
        inflight_t *e = &f[1];
        e->k.recv = e->s + (size_t)me * e->k.count * mr_esize(e->k.dt);
    }
    { /* broadcast in place: root holds the data in recvbuf, others poison */
        inflight_t *e = &f[3];
        if (me == e->k.root) {
            memcpy(e->r, e->s, e->k.count * mr_esize(e->k.dt));
        }
        e->k.send = e->r;
    }
    { /* allreduce uint8 min in place */
        inflight_t *e = &f[7];
        e->k.send = e->s;
        e->k.recv = e->s;
    }
    { /* reduce: recvbuf only on the root */
        inflight_t *e = &f[4];
        if (me != e->k.root) {
            e->k.recv = NULL;
        }
    }

    char algos[200] = "";
    size_t al = 0;
    for (int i = 0; i < NOPS; i++) {
        inflight_t *e = &f[i];
        tempo_attr_t attr = {.field_mask = TEMPO_ATTR_ALGORITHM | TEMPO_ATTR_PRIORITY,
                             .algorithm = e->k.algo,
                             .priority = NOPS - i};
        const tempo_attr_t *ap = e->k.algo ? &attr : NULL;
        if (e->kind == 7 || e->kind == 8) {
            if (n == 1) {
                pst[i] = TEMPO_OK;
                continue;
            }
            pst[i] = e->kind == 7 ? tempo_isend(c->comm, e->s, e->k.count, e->k.dt, (me + 1) % n,
                                                11, NULL, &req[i])
                                  : tempo_irecv(c->comm, e->r, e->k.count, e->k.dt,
                                                (me + n - 1) % n, 11, NULL, &req[i]);
        } else if (e->kind == 6) {
            pst[i] = tempo_ibarrier(c->comm, ap, &req[i]);
        } else {
            pst[i] = mr_post(c->comm, &e->k, ap, &req[i]);
        }
        if (pst[i] == TEMPO_ERR_UNSUPPORTED) { /* fall back to the automatic choice */
            e->k.algo = NULL;
            pst[i] = e->kind == 6 ? tempo_ibarrier(c->comm, NULL, &req[i])
                                  : mr_post(c->comm, &e->k, NULL, &req[i]);
        }
        if (e->kind <= 6 || i == 7) {
            al += (size_t)snprintf(algos + al, sizeof(algos) - al, "%s%s", al ? "," : "",
                                   e->k.algo ? e->k.algo : "auto");
        }
    }
    tempo_status_t wst = tempo_waitall(NOPS, req, sts);
    (void)wst;

    for (int i = 0; i < NOPS; i++) {
        inflight_t *e = &f[i];
        int kind = e->kind;
        tempo_dtype_t dt = e->k.dt;
        size_t es = mr_esize(dt), count = e->k.count, cb = count * es;
        mr_verdict_t v = {0};
        snprintf(v.group, sizeof(v.group), "%s", group);
        snprintf(v.detail, sizeof(v.detail), "op#%d=%s dtype=%s count=%zu rep=%d algos=%s", i,
                 kind < NCOLL ? mr_coll_name(kind)
                 : kind == 6  ? "barrier"
                 : kind == 7  ? "isend"
                              : "irecv",
                 tempo_dtype_name(dt), count, rep, algos);
        tempo_status_t st = pst[i] != TEMPO_OK ? pst[i] : sts[i];
        if ((kind == 7 || kind == 8) && n == 1) {
            st = TEMPO_OK;
        } else if (st == TEMPO_OK) {
            switch (kind) {
            case MR_ALLREDUCE:
                mr_check_tab_at(&v, c->A, "recvbuf", i == 7 ? e->s : e->r, count, dt, e->t.exp);
                break;
            case MR_REDUCE_SCATTER:
                mr_check_tab_at(&v, c->A + (size_t)me * count, "recvbuf (in place)",
                                (const uint8_t *)e->k.recv, count, dt, e->t.exp);
                break;
            case MR_ALLGATHER:
                for (int j = 0; j < n; j++) {
                    mr_check_bytes_at(&v, "recvbuf block", e->r + (size_t)j * cb, cb, es, e->salt,
                                      j, 0);
                }
                break;
            case MR_BROADCAST:
                mr_check_bytes_at(&v, "buffer", e->r, cb, es, e->salt, e->k.root, 0);
                break;
            case MR_REDUCE:
                if (me == e->k.root) {
                    mr_check_tab_at(&v, c->A, "recvbuf on the root", e->r, count, dt, e->t.exp);
                }
                mr_check_tab_at(&v, c->A, "sendbuf (must be unchanged)", e->s, count, dt, e->t.in);
                break;
            case MR_ALLTOALL:
                for (int j = 0; j < n; j++) {
                    mr_check_bytes_at(&v, "recvbuf block", e->r + (size_t)j * cb, cb, es, e->salt,
                                      j, (size_t)me * cb);
                }
                break;
            case 8: { /* the receive matches the previous rank's send, posted as op 8 there */
                mr_check_bytes_at(&v, "message", e->r, cb, es, f[8].salt, (me + n - 1) % n, 0);
                break;
            }
            default: break;
            }
        }
        record(c, &v, st);
    }
    for (int i = 0; i < NOPS; i++) {
        free(f[i].s);
        free(f[i].r);
    }
}

/* ============================================================================================== */
/* Self-test of the reference                                                                     */
/* ============================================================================================== */

/* The 16-bit converters of mrtest.h against the compiler's _Float16 where there is one, and the
 * bfloat16 converter against its definition through double rounding-free cases. */
static void selftest(ctx_t *c)
{
    const char *group = "selftest/fp16-bf16";
    long bad = 0;
    char why[200] = "";
#if defined(__FLT16_MANT_DIG__)
    for (uint32_t h = 0; h < 0x10000; h++) {
        _Float16 x;
        uint16_t hb = (uint16_t)h;
        memcpy(&x, &hb, 2);
        float want = (float)x, got = mr_f16_to_f32(hb);
        if (mr_f32_bits(want) != mr_f32_bits(got) && !(want != want && got != got)) {
            if (!bad++) {
                snprintf(why, sizeof(why), "f16 0x%04x -> %a, _Float16 says %a", h, got, want);
            }
        }
    }
    static const uint32_t edges[] = {
        0x477fe000u, 0x477fefffu, 0x477ff000u, 0x477ff001u, 0x38800000u, 0x387fffffu,
        0x387fe000u, 0x387ff000u, 0x33800000u, 0x33000000u, 0x33000001u, 0x32ffffffu,
        0x33c00000u, 0x33a00000u, 0x3f801000u, 0x3f803000u, 0x3f802fffu, 0x7f800000u,
        0x7fc00000u, 0x00000001u, 0x00000000u, 0x3f7ff000u, 0x3f7ff800u};
    size_t nedges = sizeof(edges) / sizeof(edges[0]);
    for (uint64_t i = 0; i < (1u << 20) + 2 * nedges; i++) {
        /* random patterns; every other one inside the range where binary16 is finite; the
         * boundaries of the ranges, both signs */
        uint64_t h = mr_mix64(i);
        uint32_t fb = (uint32_t)h;
        if (i >= (1u << 20)) {
            size_t e = (size_t)(i - (1u << 20));
            fb = edges[e / 2] | (e % 2 ? 0x80000000u : 0);
        } else if (i % 2) {
            fb = (fb & 0x80000000u) | (0x33000000u + (uint32_t)(h >> 32) % 0x14800001u);
        }
        float f = mr_bits_f32(fb);
        _Float16 x = (_Float16)f;
        uint16_t want, got = mr_f32_to_f16(f);
        memcpy(&want, &x, 2);
        int want_nan = (want & 0x7c00) == 0x7c00 && (want & 0x3ff);
        int got_nan = (got & 0x7c00) == 0x7c00 && (got & 0x3ff);
        if (want != got && !(want_nan && got_nan)) {
            if (!bad++) {
                snprintf(why, sizeof(why), "%a -> f16 0x%04x, _Float16 says 0x%04x", f, got, want);
            }
        }
    }
#endif
    /* bfloat16: ties to even and carries, checked on known cases */
    static const struct {
        uint32_t in;
        uint16_t out;
    } bf[] = {{0x3f800000u, 0x3f80}, {0x3f808000u, 0x3f80}, {0x3f818000u, 0x3f82},
              {0x3f808001u, 0x3f81}, {0x3fff8000u, 0x4000}, {0x7f7f8000u, 0x7f80},
              {0xbf808000u, 0xbf80}, {0x00008000u, 0x0000}, {0x00018000u, 0x0002}};
    for (size_t i = 0; i < sizeof(bf) / sizeof(bf[0]); i++) {
        uint16_t got = mr_f32_to_bf16(mr_bits_f32(bf[i].in));
        if (got != bf[i].out && !bad++) {
            snprintf(why, sizeof(why), "0x%08x -> bf16 0x%04x, expected 0x%04x", bf[i].in, got,
                     bf[i].out);
        }
    }
    if (bad) {
        mr_result(&c->out, group, "FAIL", "%ld mismatches; first: %s", bad, why);
    } else {
        mr_result(&c->out, group, "PASS", "16-bit conversions agree with %s",
#if defined(__FLT16_MANT_DIG__)
                  "_Float16 and the bfloat16 table"
#else
                  "the bfloat16 table (no _Float16 in this compiler)"
#endif
        );
    }
}

/* ============================================================================================== */
/* main                                                                                           */
/* ============================================================================================== */

static int coll_index(const char *name)
{
    for (int i = 0; i < NCOLL; i++) {
        if (strcmp(name, mr_coll_name(i)) == 0) {
            return i;
        }
    }
    return strcmp(name, "barrier") == 0 ? NCOLL : -1;
}

/* The algorithm table: entry 0 of every collective is the automatic choice. Algorithms of
 * collectives this test does not know are listed as groups of their own and reported skipped. */
static void load_algos(ctx_t *c, FILE *list)
{
    for (int i = 0; i <= NCOLL; i++) {
        c->nalgo[i] = 1;
        c->algo[i][0] = NULL;
    }
    tempo_algorithm_info_t info;
    for (size_t i = 0; tempo_algorithm_info(i, &info) == TEMPO_OK; i++) {
        int ci = coll_index(info.collective);
        if (ci < 0) {
            if (list) {
                fprintf(list, "%s/%s\n", info.collective, info.name);
            } else {
                char group[80];
                snprintf(group, sizeof(group), "%s/%s", info.collective, info.name);
                mr_result(&c->out, group, "SKIP", "a collective this test does not know");
            }
            continue;
        }
        if (c->nalgo[ci] < MAX_ALGOS) {
            c->algo[ci][c->nalgo[ci]++] = info.name;
        }
    }
}

static void print_groups(ctx_t *c)
{
    printf("selftest/fp16-bf16\n");
    for (int ci = 0; ci <= NCOLL; ci++) {
        for (int ai = 0; ai < c->nalgo[ci]; ai++) {
            printf("%s/%s\n", ci < NCOLL ? mr_coll_name(ci) : "barrier",
                   c->algo[ci][ai] ? c->algo[ci][ai] : "auto");
        }
    }
    printf("p2p/ring\ninflight/mixed\n");
}

int main(int argc, char **argv)
{
    static ctx_t ctx;
    ctx_t *c = &ctx;
    int list = 0;
    c->big_bytes = BIG_BYTES;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--list") == 0) {
            list = 1;
        } else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
            c->dir = argv[++i];
        } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
            c->only = argv[++i];
        } else if (strcmp(argv[i], "--full-big") == 0) {
            c->full_big = 1;
        } else if (strcmp(argv[i], "--big-bytes") == 0 && i + 1 < argc &&
                   (c->big_bytes = mr_big_bytes(argv[i + 1], BIG_BYTES)) != 0) {
            i++;
        } else {
            fprintf(stderr, "usage: %s --list | --out DIR [--full-big] [--only GROUP-PREFIX] "
                    "[--big-bytes 65536..%u]\n", argv[0], BIG_BYTES);
            return 2;
        }
    }
    if (list) {
        load_algos(c, stdout);
        print_groups(c);
        return 0;
    }
    if (!c->dir) {
        fprintf(stderr, "%s: --out DIR is required\n", argv[0]);
        return 2;
    }

    tempo_status_t st = tempo_comm_init_env(&c->comm);
    if (st != TEMPO_OK) {
        fprintf(stderr, "tempo_comm_init_env: %s\n", mr_errtext(NULL, st));
        return 1;
    }
    c->rank = tempo_comm_rank(c->comm);
    c->size = tempo_comm_size(c->comm);
    mr_out_open(&c->out, c->dir, c->rank);
    load_algos(c, NULL);

    c->amax = BIG_BYTES + 64 * 1024;
    c->A = malloc(c->amax);
    if (!c->A) {
        fprintf(stderr, "out of memory\n");
        return 2;
    }
    for (size_t g = 0; g < c->amax; g++) {
        c->A[g] = (uint8_t)(mr_mix64(g ^ 0x5eed0000ull) >> 60);
    }
    mr_gbuf_alloc(&c->S, CAP);
    mr_gbuf_alloc(&c->R, CAP);
    mr_gbuf_alloc(&c->X, CAP);

    if (selected(c, "selftest")) {
        selftest(c);
    }
    for (int coll = 0; coll < NCOLL && !c->fatal; coll++) {
        run_collective(c, coll);
    }
    /* Barriers and send/receive rings at every size. */
    for (int ci = 0; ci < 4 && !c->fatal; ci++) {
        for (int ai = 0; ai < c->nalgo[NCOLL] && !c->fatal; ai++) {
            const char *algo = c->algo[NCOLL][ai];
            run_barrier(c, algo, algo ? API_WAIT : API_BLOCK, (size_t)ci);
        }
        if (!selected(c, "p2p/ring")) {
            continue;
        }
        for (int d = 0; d < TEMPO_DTYPE_COUNT && !c->fatal; d++) {
            tempo_dtype_t dt = (tempo_dtype_t)d;
            size_t counts[4] = {0, 1, ODD_COUNT, c->big_bytes / mr_esize(dt) / 2 + 5};
            if (ci == 3 && !big_selected(c, MR_BROADCAST, dt, TEMPO_SUM, P_OOP)) {
                continue;
            }
            run_p2p(c, dt, counts[ci], 0);
            if (!c->fatal) {
                run_p2p(c, dt, counts[ci], 1);
            }
        }
    }
    if (selected(c, "inflight/mixed")) {
        int reps = 0;
        for (int ci = 0; ci <= NCOLL; ci++) {
            reps = c->nalgo[ci] > reps ? c->nalgo[ci] : reps;
        }
        for (int cs = 0; cs < 3 && !c->fatal; cs++) {
            for (int rep = 0; rep < reps && !c->fatal; rep++) {
                run_inflight(c, (size_t)cs, rep);
            }
        }
    }

    if (c->fatal) {
        fprintf(stderr, "rank %d: stopping after a fatal error (see the result file)\n", c->rank);
        fflush(c->out.f);
        _exit(1); /* the job is unusable; the launcher ends the other ranks */
    }
    st = tempo_comm_destroy(c->comm);
    if (st != TEMPO_OK) {
        mr_result(&c->out, "destroy", "FAIL", "tempo_comm_destroy: %s", mr_errtext(NULL, st));
    }
    mr_out_close(&c->out);
    free(c->A);
    free(c->S.base);
    free(c->R.base);
    free(c->X.base);
    return 0;
}
