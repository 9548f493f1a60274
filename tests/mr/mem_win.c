/*
 * mem_win.c — tempo_mem_alloc memory and the shared-memory all-reduce that reads it in place
 * (collectives/allreduce_shm.c, window operations; collectives/mem.c).
 *
 * Jobs of 2, 3 and 4 ranks on this host (forked by tests/fault/job.h), each rank logging at INFO
 * (TEMPO_DEBUG_FILE per rank, read by this test), TEMPO_SHM_COLL_BYTES=64K (many segments):
 *   window     every rank allocates a send and a receive buffer with tempo_mem_alloc (sizes that
 *              differ by rank) and runs all-reduces at offsets inside them, out of place and in
 *              place, float32 sum (12 KB: the first window size, and 300007 elements), int32 max,
 *              float64 prod, bfloat16 avg and int8 sum at odd counts, on data whose results are
 *              exact: every element equals its expected value, the input stays as it was (out of
 *              place), the element after the end is untouched, and the result equals, bit for
 *              bit, the same all-reduce on malloc'd buffers (the staged protocol); every rank
 *              logs that it read the peers' memory directly; after the job no tempo_mem_alloc
 *              region's name is left in /dev/shm;
 *   api        tempo_mem_alloc of 0 bytes and tempo_mem_free of memory that is not from it (a
 *              malloc'd pointer, a window freed twice) fail with TEMPO_ERR_INVALID; freeing NULL
 *              is TEMPO_OK; the memory comes zeroed; a second window after a free works;
 *   mixed      rank 0's buffers are in tempo_mem_alloc memory and the others' are not (then the
 *              reverse): every rank's all-reduce fails with TEMPO_ERR_INVALID within 10 s
 *              (TEMPO_TIMEOUT is 30 s), saying "tempo_mem_alloc", instead of hanging or mixing
 *              protocols.
 * TAP.
 */
#include "config.h"

#include <dirent.h>

#include <tempo.h>

#include "tests/fault/job.h"
#include "tests/mr/exact.h"

#define WIN_BYTES (4u << 20)

static const struct {
    tempo_dtype_t dt;
    tempo_op_t op;
    size_t count;
    size_t at; /* bytes into the window */
} cases[] = {
    {TEMPO_FLOAT32, TEMPO_SUM, 3001, 0},        /* 12004 bytes: the first window size */
    {TEMPO_FLOAT32, TEMPO_SUM, 300007, 4},      /* 19 segments of 64 KiB, odd, offset 4 */
    {TEMPO_INT32, TEMPO_MAX, 262147, 4096},     /* 16+ segments */
    {TEMPO_FLOAT64, TEMPO_PROD, 40001, 8},      /* 5 segments */
    {TEMPO_BFLOAT16, TEMPO_AVG, 100003, 2},     /* a 16-bit type */
    {TEMPO_INT8, TEMPO_SUM, 1000003, 1},        /* 1 byte per element, odd */
};

/* One case on buffers s (input) and r (output, or s in place); returns the number of wrong
 * elements, and the status in *st. */
static long one(tempo_comm_t comm, int rank, int size, size_t c, char *s, char *r, int inplace,
                tempo_status_t *st)
{
    tempo_dtype_t dt = cases[c].dt;
    tempo_op_t op = cases[c].op;
    size_t count = cases[c].count;
    for (size_t i = 0; i < count; i++) {
        put(dt, s, i, val(rank, i, op));
        put(dt, r, i, -99);
    }
    put(dt, r, count, 77);
    put(dt, s, count, 77);
    void *out = inplace ? s : r;
    *st = tempo_allreduce(comm, s, out, count, dt, op);
    long bad = 0;
    for (size_t i = 0; *st == TEMPO_OK && i < count; i++) {
        double want = expect(size, i, op);
        if (dt == TEMPO_INT8) {
            want = (double)(int8_t)(int)want;
        } else if (dt == TEMPO_BFLOAT16) {
            want = from_bf16(to_bf16(want));
        }
        bad += get(dt, out, i) != want;
        bad += !inplace && get(dt, s, i) != val(rank, i, op);
    }
    bad += get(dt, out, count) != 77;
    return bad;
}

typedef struct {
    int variant; /* 0 window, 1 api, 2 mixed: rank 0 in windows, 3 mixed: the last rank */
} arg_t;

static int rank_window(tempo_comm_t comm, int rank, int size)
{
    size_t bytes = WIN_BYTES + (size_t)rank * 4096 + 64;
    char *ws = NULL, *wr = NULL;
    tempo_status_t st = tempo_mem_alloc(comm, bytes, (void **)&ws);
    tempo_status_t st2 = tempo_mem_alloc(comm, bytes, (void **)&wr);
    if (!rk_check(st == TEMPO_OK && st2 == TEMPO_OK && ws && wr,
                  "rank %d: two tempo_mem_alloc windows of %zu bytes (%s, %s)", rank, bytes,
                  tempo_status_name(st), tempo_status_name(st2))) {
        return 1;
    }
    int ok_all = 1;
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        size_t es = tempo_dtype_size(cases[c].dt), count = cases[c].count;
        size_t len = (count + 1) * es;
        /* one element in: not where malloc's alignment would put it, still element-aligned
         * (typed loads of misaligned elements are undefined) */
        char *ms = malloc(len + es), *mr = malloc(len + es), *ref = malloc(len);
        for (int inplace = 0; inplace < 2; inplace++) {
            tempo_status_t sw, sm;
            char *s = ws + cases[c].at, *r = wr + cases[c].at;
            long bad = one(comm, rank, size, c, s, r, inplace, &sw);
            memcpy(ref, inplace ? s : r, count * es);
            long badm = one(comm, rank, size, c, ms + es, mr + es, inplace, &sm);
            int same = sw == TEMPO_OK && sm == TEMPO_OK &&
                       memcmp(ref, inplace ? ms + es : mr + es, count * es) == 0;
            int ok = sw == TEMPO_OK && bad == 0 && badm == 0 && same;
            ok_all &= ok;
            if (!ok || rank == 0) {
                rk_check(ok, "rank %d: %s %s count %zu %s at +%zu: %s, %ld wrong; malloc'd "
                         "(staged) %s, %ld wrong; bitwise equal: %s", rank,
                         tempo_dtype_name(cases[c].dt), tempo_op_name(cases[c].op), count,
                         inplace ? "in place" : "out of place", cases[c].at,
                         tempo_status_name(sw), bad, tempo_status_name(sm), badm,
                         same ? "yes" : "no");
            }
        }
        free(ms);
        free(mr);
        free(ref);
    }
    ok_all &= tempo_mem_free(comm, ws) == TEMPO_OK && tempo_mem_free(comm, wr) == TEMPO_OK;
    return ok_all ? 0 : 1;
}

static int rank_api(tempo_comm_t comm, int rank)
{
    void *p = NULL, *q = NULL;
    int ok = 1;
    ok &= rk_check(tempo_mem_alloc(comm, 0, &p) == TEMPO_ERR_INVALID && p == NULL,
                   "rank %d: tempo_mem_alloc of 0 bytes: TEMPO_ERR_INVALID", rank);
    ok &= rk_check(tempo_mem_free(comm, NULL) == TEMPO_OK, "rank %d: tempo_mem_free(NULL) is "
                   "TEMPO_OK", rank);
    char *m = malloc(64);
    tempo_status_t st = tempo_mem_free(comm, m);
    ok &= rk_check(st == TEMPO_ERR_INVALID && strstr(tempo_last_error(comm), "tempo_mem_alloc"),
                   "rank %d: tempo_mem_free of malloc'd memory: %s (%s)", rank,
                   tempo_status_name(st), tempo_last_error(comm));
    free(m);
    st = tempo_mem_alloc(comm, 100000, &p);
    int zero = 1;
    for (size_t i = 0; st == TEMPO_OK && i < 100000; i++) {
        zero &= ((unsigned char *)p)[i] == 0;
    }
    ok &= rk_check(st == TEMPO_OK && p && zero, "rank %d: 100000 bytes, zeroed (%s)", rank,
                   tempo_status_name(st));
    ok &= rk_check(tempo_mem_free(comm, p) == TEMPO_OK, "rank %d: freed", rank);
    ok &= rk_check(tempo_mem_free(comm, p) == TEMPO_ERR_INVALID,
                   "rank %d: freed twice: TEMPO_ERR_INVALID", rank);
    st = tempo_mem_alloc(comm, 65536, &q);
    float *f = q;
    for (int i = 0; st == TEMPO_OK && i < 16384; i++) {
        f[i] = (float)(rank + i);
    }
    tempo_status_t ar = st == TEMPO_OK ? tempo_allreduce(comm, f, f, 16384, TEMPO_FLOAT32,
                                                         TEMPO_SUM)
                                       : st;
    int n = tempo_comm_size(comm), right = ar == TEMPO_OK;
    for (int i = 0; right && i < 16384; i++) {
        right = f[i] == (float)(n * i + n * (n - 1) / 2);
    }
    ok &= rk_check(right, "rank %d: a second window after a free: in-place all-reduce right (%s)",
                   rank, tempo_status_name(ar));
    ok &= tempo_mem_free(comm, q) == TEMPO_OK;
    return ok ? 0 : 1;
}

static int rank_mixed(tempo_comm_t comm, int rank, int size, int winrank)
{
    size_t count = 100000;
    float *s = NULL, *r = NULL;
    tempo_status_t st = tempo_mem_alloc(comm, count * 4, (void **)&s);
    tempo_status_t st2 = tempo_mem_alloc(comm, count * 4, (void **)&r);
    if (st != TEMPO_OK || st2 != TEMPO_OK) {
        rk_check(0, "rank %d: tempo_mem_alloc (%s, %s)", rank, tempo_status_name(st),
                 tempo_status_name(st2));
        return 1;
    }
    float *ms = calloc(count, 4), *mr = calloc(count, 4);
    int mine = rank == winrank;
    double t0 = rk_now();
    st = tempo_allreduce(comm, mine ? s : ms, mine ? r : mr, count, TEMPO_FLOAT32, TEMPO_SUM);
    double took = rk_now() - t0;
    rk_check(st == TEMPO_ERR_INVALID && strstr(tempo_last_error(comm), "tempo_mem_alloc") &&
             took < 10,
             "rank %d (%s): the all-reduce fails with TEMPO_ERR_INVALID in %.2f s: %s (%s)", rank,
             mine ? "in tempo_mem_alloc memory" : "malloc'd", took, tempo_status_name(st),
             tempo_last_error(comm));
    (void)size;
    free(ms);
    free(mr);
    tempo_mem_free(comm, s);
    tempo_mem_free(comm, r);
    return 0;
}

static int rank_main(int rank, int size, void *arg)
{
    const arg_t *a = arg;
    tempo_comm_t comm = rk_init();
    if (!comm) {
        return 1;
    }
    int rc = a->variant == 0   ? rank_window(comm, rank, size)
             : a->variant == 1 ? rank_api(comm, rank)
                               : rank_mixed(comm, rank, size, a->variant == 2 ? 0 : size - 1);
    rk_put("done", "%d", rc == 0);
    tempo_comm_destroy(comm);
    return rc;
}

/* Names in /dev/shm of tempo_mem_alloc regions (transport/shm.c names them "/tempo-...-mem"; the
 * jobs of this test run one at a time, and no other test allocates such memory). */
static int shm_left(void)
{
    DIR *d = opendir("/dev/shm");
    int left = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t l = strlen(e->d_name);
        left += strncmp(e->d_name, "tempo-", 6) == 0 && l > 4 &&
                strcmp(e->d_name + l - 4, "-mem") == 0;
    }
    if (d) {
        closedir(d);
    }
    return left;
}

static void run(const char *label, int n, int variant)
{
    char dir[] = "/tmp/mem_win.XXXXXX";
    if (!mkdtemp(dir)) {
        TAP_OK(0, "%s: mkdtemp: %s", label, strerror(errno));
        return;
    }
    char logenv[600];
    snprintf(logenv, sizeof(logenv), "TEMPO_DEBUG_FILE=%s/log.%%r", dir);
    const char *env[] = {"TEMPO_DEBUG=INFO", "TEMPO_DEBUG_SUBSYS=COLL", logenv,
                         "TEMPO_SHM_COLL_BYTES=64K", "TEMPO_TIMEOUT=30s", NULL};
    arg_t a = {variant};
    job_t job;
    job_start(&job, n, env, rank_main, &a);
    for (int r = 0; r < n; r++) {
        const char *d = job_wait_key(&job, r, "done", 120);
        TAP_OK(d && !strcmp(d, "1"), "%s, %d ranks: rank %d done", label, n, r);
    }
    job_finish(&job, 60);
    if (variant == 0) {
        for (int r = 0; r < n; r++) {
            TAP_OK(job_log_has(dir, r, "buffers in tempo_mem_alloc memory, read directly"),
                   "%s, %d ranks: rank %d read the peers' memory directly (its log)", label, n, r);
        }
    }
    TAP_EQ_INT(shm_left(), 0, "%s, %d ranks: no tempo_mem_alloc region name is left in "
               "/dev/shm", label, n);
    job_free(&job);
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0) {
        tap_diag("could not remove %s", dir);
    }
}

int main(void)
{
    for (int n = 2; n <= 4; n++) {
        run("window", n, 0);
    }
    run("api", 2, 1);
    run("api", 3, 1);
    run("mixed: rank 0 in tempo_mem_alloc memory", 3, 2);
    run("mixed: the last rank in tempo_mem_alloc memory", 2, 3);
    run("mixed: the last rank in tempo_mem_alloc memory", 4, 3);
    return tap_done();
}
