/*
 * shm_cma.c — the shared-memory all-reduce's direct protocol (process_vm_readv from the peers'
 * buffers) and its fallback (copies through the shared region) give the same exact results, and
 * the ranks agree on one of them.
 *
 * Jobs of 2 and 3 ranks on this host (forked by tests/fault/job.h), each rank logging at INFO
 * (TEMPO_DEBUG_FILE per rank, read by this test, not by the library):
 *   allowed        nothing in the way: every rank logs that large all-reduces read the peers'
 *                  buffers directly;
 *   denied         one rank (the last) cannot call process_vm_readv (a seccomp filter answers
 *                  EPERM, which also works as root, where ptrace checks would not stop it): that
 *                  rank logs why, and every rank logs that large all-reduces copy through the
 *                  region, so the ranks never mix the protocols;
 *   off            TEMPO_SHM_CMA=0: nobody probes and nobody reads directly.
 * Every run sets TEMPO_SHM_DIRECT=1 (the direct protocol is off by default).
 * In each, every rank runs all-reduces around the protocol's threshold (64 KiB) and across several
 * segments (TEMPO_SHM_COLL_BYTES=64K), out of place and in place, float32 sum, int32 max, float64
 * prod, bfloat16 avg, and int8 sum at an odd count, on data whose results are exact in any order,
 * and compares every element with its expected value, and its out-of-place input with what it
 * was. TAP.
 */
#include "config.h"

#include <stddef.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#if defined(__linux__)
#include <linux/filter.h>
#include <linux/seccomp.h>
#endif

#include <tempo.h>

#include "tests/fault/job.h"
#include "tests/mr/exact.h"

/* Make process_vm_readv fail with EPERM in this process. 0, or -1 where seccomp is missing. */
static int deny_cma(void)
{
#if defined(__linux__) && defined(SYS_process_vm_readv) && defined(SECCOMP_MODE_FILTER)
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_process_vm_readv, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {(unsigned short)(sizeof(f) / sizeof(f[0])), f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
        return -1;
    }
    return 0;
#else
    return -1;
#endif
}

typedef struct {
    int deny_last; /* the last rank cannot read */
} variant_t;

static int rank_main(int rank, int size, void *arg)
{
    const variant_t *v = arg;
    if (v->deny_last && rank == size - 1 && deny_cma() != 0) {
        rk_check(0, "rank %d: could not install the seccomp filter (%s)", rank, strerror(errno));
        return 1;
    }
    tempo_comm_t comm = rk_init();
    if (!comm) {
        return 1;
    }
    static const struct {
        tempo_dtype_t dt;
        tempo_op_t op;
        size_t count;
    } cases[] = {
        {TEMPO_FLOAT32, TEMPO_SUM, 16383},     /* 65532 bytes: below the threshold */
        {TEMPO_FLOAT32, TEMPO_SUM, 16384},     /* 64 KiB: the first direct size */
        {TEMPO_FLOAT32, TEMPO_SUM, 300007},    /* 19 segments of 64 KiB, odd */
        {TEMPO_INT32, TEMPO_MAX, 262147},      /* 16+ segments */
        {TEMPO_FLOAT64, TEMPO_PROD, 40001},    /* 5 segments */
        {TEMPO_BFLOAT16, TEMPO_AVG, 100003},   /* a 16-bit type: 3+ segments */
        {TEMPO_INT8, TEMPO_SUM, 1000003},      /* 1 byte per element, odd */
    };
    int ok_all = 1;
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        tempo_dtype_t dt = cases[c].dt;
        tempo_op_t op = cases[c].op;
        size_t count = cases[c].count, es = tempo_dtype_size(dt);
        /* +1: an element past the end must stay untouched; +3 bytes: not 8-byte aligned */
        char *sm = malloc((count + 1) * es + 3), *rm = malloc((count + 1) * es + 3);
        char *s = sm + 3, *r = rm + 3;
        for (int inplace = 0; inplace < 2; inplace++) {
            for (size_t i = 0; i < count; i++) {
                put(dt, s, i, val(rank, i, op));
                put(dt, r, i, -99);
            }
            put(dt, r, count, 77);
            put(dt, s, count, 77);
            void *out = inplace ? s : r;
            tempo_status_t st = tempo_allreduce(comm, s, out, count, dt, op);
            long bad = 0;
            size_t first = 0;
            for (size_t i = 0; st == TEMPO_OK && i < count; i++) {
                double want = expect(size, i, op);
                if (dt == TEMPO_INT8) {
                    want = (double)(int8_t)(int)want; /* integer sums wrap */
                } else if (dt == TEMPO_BFLOAT16) {
                    want = from_bf16(to_bf16(want)); /* rounded once, at the end */
                }
                if (get(dt, out, i) != want && !bad++) {
                    first = i;
                }
                if (!inplace && get(dt, s, i) != val(rank, i, op) && !bad++) {
                    first = i;
                }
            }
            bad += get(dt, out, count) != 77;
            int ok = st == TEMPO_OK && bad == 0;
            ok_all &= ok;
            if (!ok || rank == 0) {
                rk_check(ok, "rank %d: %s %s count %zu %s: %s, %ld wrong (first [%zu]: %g, expected "
                         "%g)", rank, tempo_dtype_name(dt), tempo_op_name(op), count,
                         inplace ? "in place" : "out of place", tempo_strerror(st), bad, first,
                         get(dt, out, first), expect(size, first, op));
            }
        }
        free(sm);
        free(rm);
    }
    rk_put("done", "%d", ok_all);
    tempo_comm_destroy(comm);
    return ok_all ? 0 : 1;
}

static void run(const char *label, int n, int deny_last, int cma_off)
{
    char dir[] = "/tmp/shm_cma.XXXXXX";
    if (!mkdtemp(dir)) {
        TAP_OK(0, "%s: mkdtemp: %s", label, strerror(errno));
        return;
    }
    char logenv[600];
    snprintf(logenv, sizeof(logenv), "TEMPO_DEBUG_FILE=%s/log.%%r", dir);
    const char *env[] = {"TEMPO_DEBUG=INFO", "TEMPO_DEBUG_SUBSYS=COLL", logenv,
                         "TEMPO_SHM_COLL_BYTES=64K", "TEMPO_TIMEOUT=30s", "TEMPO_SHM_DIRECT=1",
                         cma_off ? "TEMPO_SHM_CMA=0" : NULL, NULL};
    variant_t v = {deny_last};
    job_t job;
    job_start(&job, n, env, rank_main, &v);
    for (int r = 0; r < n; r++) {
        const char *d = job_wait_key(&job, r, "done", 120);
        TAP_OK(d && !strcmp(d, "1"), "%s, %d ranks: rank %d's all-reduces all exact", label, n, r);
    }
    job_finish(&job, 60);
    const char *direct = "large operations read peers' buffers directly";
    const char *copy = "large operations copy through the shared region";
    for (int r = 0; r < n; r++) {
        if (cma_off) {
            TAP_OK(!job_log_has(dir, r, direct) && !job_log_has(dir, r, "process_vm_readv"),
                   "%s, %d ranks: rank %d neither probes nor reads directly", label, n, r);
        } else if (deny_last) {
            TAP_OK(job_log_has(dir, r, copy) && !job_log_has(dir, r, direct),
                   "%s, %d ranks: rank %d copies through the region (one rank cannot read)", label,
                   n, r);
        } else {
            TAP_OK(job_log_has(dir, r, direct), "%s, %d ranks: rank %d reads peers' buffers directly",
                   label, n, r);
        }
    }
    if (deny_last) {
        TAP_OK(job_log_has(dir, n - 1, "cannot read comm rank 0's memory (process_vm_readv:"),
               "%s, %d ranks: the denied rank says why (INFO)", label, n);
    }
    job_free(&job);
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0) {
        tap_diag("could not remove %s", dir);
    }
}

int main(void)
{
    for (int n = 2; n <= 3; n++) {
        run("allowed", n, 0, 0);
        run("denied on the last rank", n, 1, 0);
        run("TEMPO_SHM_CMA=0", n, 0, 1);
    }
    return tap_done();
}
