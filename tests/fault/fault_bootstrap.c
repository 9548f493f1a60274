/*
 * fault_bootstrap.c — the rendezvous refuses broken jobs quickly and clearly (the checks require
 * TEMPO_ERR_BOOTSTRAP within 10 s, so "fail by timing out" does not pass):
 *   - ranks started with different TEMPO_SIZE (2 ranks: 2 and 3; 3 ranks: one of them with 4):
 *     every rank fails tempo_comm_init_env with TEMPO_ERR_BOOTSTRAP and a message giving the sizes;
 *   - two processes started as rank 1: TEMPO_ERR_BOOTSTRAP saying so;
 *   - TEMPO_RANK without TEMPO_SIZE, and TEMPO_SIZE without TEMPO_RANK: TEMPO_ERR_BOOTSTRAP at
 *     once;
 *   - TEMPO_RANK/TEMPO_SIZE of a 2-rank job with no TEMPO_ROOT and no local size:
 *     TEMPO_ERR_BOOTSTRAP asking for TEMPO_ROOT, at once;
 *   - a process of another job (different TEMPO_JOB_ID) at the same TEMPO_ROOT is refused with
 *     TEMPO_ERR_BOOTSTRAP, and the job it tried to join still forms and works;
 *   - the file rendezvous (one host, no TEMPO_ROOT: $TMPDIR/tempo-<uid>/rdv-<job key hash>): a
 *     job forms through it, leaving the directory with mode 700 and no file; a directory that
 *     another user made (as root: owned by uid 65534), one open to others (mode 777), a symbolic
 *     link in its place, and a planted rendezvous file (readable by others; as root, owned by uid
 *     65534) pointing elsewhere: every rank that meets them fails at once with
 *     TEMPO_ERR_BOOTSTRAP saying what is wrong, and none connects where they point;
 *   - intruders at TEMPO_ROOT before rank 1 joins: 80 connections that stay silent (more than
 *     the 64 that rank 0 reads side by side), 5 that send a few bytes and stop, 5 that send
 *     32 bytes of garbage, 5 that close at once: the job (TEMPO_TIMEOUT 30 s; each
 *     connection has its own 5 s) still forms and an all-reduce across it works, every intruding
 *     connection is closed by rank 0; rank 0 listens at 127.0.0.1 only (the port on 127.0.0.2 is
 *     shut), and so does its data transport (every socket it listens on is at 127.0.0.1); 10
 *     silent and 5 garbage connections at rank 0's data port (found in /proc) before rank 1
 *     joins do not keep the tcp mesh from forming;
 *   - a job key (TEMPO_AUTH_KEY, TEMPO_AUTH_KEY_FILE): a job whose ranks share one forms and works;
 *     a process that knows the job (its TEMPO_ROOT and job id: the old "computable key") but
 *     holds another key, or none, is refused at once (TEMPO_ERR_BOOTSTRAP), and the job it tried
 *     to join still forms and works with the real rank; a rank whose rank 0 holds another key
 *     refuses its reply (an impostor at the rendezvous); a key file readable by others is refused
 *     at once on every rank, a private one works; without a key, a job across hosts
 *     (TEMPO_HOST_ID=%r) says once, on rank 0, that it is not authenticated, and with one it
 *     does not. (A build without libcrypto: a key is refused at once on every rank, saying so.)
 */
#include "config.h"

#include <tempo.h>

#include "core/tempo_int.h"
#include "tests/fault/job.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#define ANSWER_S 10.0

/* Per-rank environment changes applied before init: rank, "NAME=VALUE" (or "NAME" to unset). */
typedef struct {
    struct {
        int rank;
        const char *set;
    } env[4];
    int wait_go_rank;  /* this rank waits for the test's go before joining; -1 for none */
    int work;          /* ranks whose init succeeds run an all-reduce */
} bs_arg_t;

static int bs_rank(int rank, int size, void *arg)
{
    const bs_arg_t *a = arg;
    for (int i = 0; i < 4 && a->env[i].set; i++) {
        if (a->env[i].rank != rank) {
            continue;
        }
        char name[64];
        size_t k = strcspn(a->env[i].set, "=");
        snprintf(name, sizeof(name), "%.*s", (int)k, a->env[i].set);
        if (a->env[i].set[k] == '=') {
            setenv(name, a->env[i].set + k + 1, 1);
        } else {
            unsetenv(name);
        }
    }
    if (rank == a->wait_go_rank) {
        rk_wait_go();
    }
    tempo_comm_t comm;
    double t0 = rk_now();
    tempo_status_t st = tempo_comm_init_env(&comm);
    rk_put("elapsed", "%.3f", rk_now() - t0);
    rk_put("msg", "%s", tempo_last_error(NULL));
    if (st == TEMPO_OK) {
        if (a->work) {
            int x = tempo_comm_rank(comm) + 1, y = 0;
            tempo_status_t w = tempo_allreduce(comm, &x, &y, 1, TEMPO_INT32, TEMPO_SUM);
            rk_put("sum", "%d", w == TEMPO_OK ? y : -1);
        }
        tempo_comm_destroy(comm);
    }
    rk_put("status", "%d", (int)st);
    return 0;
}

/* Expect st from ranks (bitmask) with needles in the message, within ANSWER_S. */
static void expect_ranks(job_t *j, const char *name, unsigned ranks, tempo_status_t want,
                         const char *needle1, const char *needle2)
{
    for (int r = 0; r < j->n; r++) {
        if (!(ranks & (1u << r))) {
            continue;
        }
        job_wait_key(j, r, "status", 60);
        const char *el = job_get(j, r, "elapsed"), *msg = job_get(j, r, "msg");
        double e = el ? atof(el) : -1;
        TAP_EQ_INT(job_status_of(j, r, "status"), want, "%s: process %d gets %s", name, r,
                   tempo_status_name(want));
        TAP_OK(el && e < ANSWER_S, "%s: process %d: promptly (%.3f s, no waiting for the "
               "timeout)", name, r, e);
        if (needle1) {
            TAP_CONTAINS(msg, needle1, "%s: process %d: message says \"%s\"", name, r, needle1);
        }
        if (needle2) {
            TAP_CONTAINS(msg, needle2, "%s: process %d: message says \"%s\"", name, r, needle2);
        }
    }
}

static void finish(job_t *j, const char *name)
{
    job_finish(j, 60);
    int ok = 1;
    for (int r = 0; r < j->n; r++) {
        ok &= job_exited(j, r, 0);
    }
    TAP_OK(ok && !j->hung, "%s: every process exited by itself", name);
    job_free(j);
}

/* A mkdtemp/mkstemp template for stem in the test's temporary directory ($TMPDIR, else /tmp). */
static void tmp_template(char *buf, size_t len, const char *stem)
{
    const char *base = getenv("TMPDIR");
    snprintf(buf, len, "%s/%s.XXXXXX", base && *base ? base : "/tmp", stem);
}

/* A fresh directory for TMPDIR, and its tempo-<uid> path. */
static void fresh_tmpdir(char *dir, size_t len, char *rdv, size_t rlen, char *envvar, size_t elen)
{
    tmp_template(dir, len, "fault_bs");
    if (!mkdtemp(dir)) {
        printf("Bail out! mkdtemp %s: %s\n", dir, strerror(errno));
        exit(1);
    }
    snprintf(rdv, rlen, "%s/tempo-%u", dir, (unsigned)getuid());
    snprintf(envvar, elen, "TMPDIR=%s", dir);
}

/* Remove dir and what is in it, two levels deep (links are removed, not followed). */
static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) {
            continue;
        }
        char p[PATH_MAX];
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
            remove_tree(p);
        } else {
            unlink(p);
        }
    }
    if (d) {
        closedir(d);
    }
    rmdir(dir);
}

/* The file rendezvous: a job forms through it; what another user could have made is refused. */
static void file_rendezvous(void)
{
    static job_t job;
    char dir[PATH_MAX], rdv[PATH_MAX + 32], tmpdir[PATH_MAX + 16];
    const char *env[] = {"TEMPO_TIMEOUT=30s", "TEMPO_LOCAL_SIZE=2", tmpdir, NULL};
    int root = geteuid() == 0;
    {
        fresh_tmpdir(dir, sizeof(dir), rdv, sizeof(rdv), tmpdir, sizeof(tmpdir));
        bs_arg_t a = {{{0, "TEMPO_ROOT"}, {1, "TEMPO_ROOT"}}, -1, 1};
        job_start(&job, 2, env, bs_rank, &a);
        expect_ranks(&job, "file rendezvous", 0x3, TEMPO_OK, NULL, NULL);
        TAP_OK(job_status_of(&job, 0, "sum") == 3 && job_status_of(&job, 1, "sum") == 3,
               "file rendezvous: an all-reduce across the job works");
        finish(&job, "file rendezvous");
        struct stat st;
        int n = -1;
        DIR *d = opendir(rdv);
        for (struct dirent *e; d && (e = readdir(d));) {
            n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
        }
        n += d != NULL;
        if (d) {
            closedir(d);
        }
        memset(&st, 0, sizeof(st));
        int there = lstat(rdv, &st) == 0;
        TAP_OK(there && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700 &&
                   st.st_uid == getuid() && n == 0,
               "file rendezvous: %s is a directory of this user with mode %03o, %d files left",
               rdv, (unsigned)(st.st_mode & 0777), n);
        remove_tree(dir);
    }
    static const struct {
        const char *name, *needle;
        int kind; /* 0: another user's directory, 1: mode 777, 2: a link in its place */
    } bad[] = {{"a rendezvous directory another user made", "belongs to uid 65534", 0},
               {"a rendezvous directory open to others", "has mode 777", 1},
               {"a symbolic link in place of the rendezvous directory", "not a directory", 2}};
    for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
        if (bad[k].kind == 0 && !root) {
            tap_skip("needs root (chown)", "%s", bad[k].name);
            continue;
        }
        fresh_tmpdir(dir, sizeof(dir), rdv, sizeof(rdv), tmpdir, sizeof(tmpdir));
        char other[PATH_MAX + 16];
        snprintf(other, sizeof(other), "%s/elsewhere", dir);
        int made = bad[k].kind == 2 ? mkdir(other, 0700) == 0 && symlink(other, rdv) == 0
                                    : mkdir(rdv, 0700) == 0;
        if (bad[k].kind == 0) {
            made &= chown(rdv, 65534, 65534) == 0;
        } else if (bad[k].kind == 1) {
            made &= chmod(rdv, 0777) == 0;
        }
        if (!made) {
            TAP_OK(0, "%s: could not make it: %s", bad[k].name, strerror(errno));
            remove_tree(dir);
            continue;
        }
        bs_arg_t a = {{{0, "TEMPO_ROOT"}, {1, "TEMPO_ROOT"}}, -1, 0};
        job_start(&job, 2, env, bs_rank, &a);
        expect_ranks(&job, bad[k].name, 0x3, TEMPO_ERR_BOOTSTRAP, bad[k].needle, rdv);
        finish(&job, bad[k].name);
        remove_tree(dir);
    }
    {
        /* Rank 1 first, with a planted file in the right place; rank 0 only afterwards. */
        const char *name = "a planted rendezvous file";
        fresh_tmpdir(dir, sizeof(dir), rdv, sizeof(rdv), tmpdir, sizeof(tmpdir));
        char file[PATH_MAX + 64];
        const char *key = "job:planted";
        snprintf(file, sizeof(file), "%s/rdv-%016llx", rdv,
                 (unsigned long long)tempo__hash64(key, strlen(key), 0));
        FILE *f = mkdir(rdv, 0700) == 0 ? fopen(file, "w") : NULL;
        int made = f && fprintf(f, "127.0.0.1:9\n") > 0;
        made &= f && fclose(f) == 0 && chmod(file, 0644) == 0;
        if (made && root) {
            made &= chown(file, 65534, 65534) == 0;
        }
        const char *env3[] = {"TEMPO_TIMEOUT=3s", "TEMPO_LOCAL_SIZE=2", "TEMPO_JOB_ID=planted",
                              tmpdir, NULL};
        bs_arg_t a = {{{0, "TEMPO_ROOT"}, {1, "TEMPO_ROOT"}}, 0, 0};
        if (!made) {
            TAP_OK(0, "%s: could not plant it: %s", name, strerror(errno));
        } else {
            job_start(&job, 2, env3, bs_rank, &a);
            expect_ranks(&job, name, 0x2, TEMPO_ERR_BOOTSTRAP, "not a private file", file);
            job_go(&job, 0);
            job_wait_key(&job, 0, "status", 60);
            TAP_OK(job_status_of(&job, 0, "status") < 0, "%s: rank 0, started after it, fails "
                   "without rank 1 (%s)", name, job_get(&job, 0, "msg") ?: "?");
            finish(&job, name);
        }
        remove_tree(dir);
    }
}

/* A TCP connection to addr ("127.0.0.1:port"), retried for up to 10 s (rank 0 may not listen
 * yet); -1 if none. */
static int intrude(const char *addr)
{
    int port = atoi(strrchr(addr, ':') + 1);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int t = 0; t < 1000; t++) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            return fd;
        }
        if (fd >= 0) {
            close(fd);
        }
        usleep(10000);
    }
    return -1;
}

/* How many TCP sockets process pid listens on (its descriptors' inodes in /proc/net/tcp, state
 * 0A), and in bad the local addresses of those not at hex address want ("0100007F": 127.0.0.1). */
static int listeners_off(pid_t pid, const char *want, char *bad, size_t len, int *ports,
                         int maxports)
{
    unsigned long inodes[256];
    int ni = 0, n = 0;
    char dir[64], path[PATH_MAX], link[128];
    snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d)) && ni < 256;) {
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        ssize_t k = readlink(path, link, sizeof(link) - 1);
        unsigned long ino;
        if (k > 0 && (link[k] = 0, sscanf(link, "socket:[%lu]", &ino) == 1)) {
            inodes[ni++] = ino;
        }
    }
    if (d) {
        closedir(d);
    }
    bad[0] = 0;
    FILE *f = fopen("/proc/net/tcp", "r");
    char line[512];
    while (f && fgets(line, sizeof(line), f)) {
        char local[64], remote[64];
        unsigned st;
        unsigned long ino;
        if (sscanf(line, " %*d: %63s %63s %x %*s %*s %*s %*s %*s %lu", local, remote, &st, &ino) !=
                4 ||
            st != 0x0A) {
            continue;
        }
        for (int i = 0; i < ni; i++) {
            if (inodes[i] == ino) {
                const char *colon = strchr(local, ':');
                if (n < maxports && colon) {
                    ports[n] = (int)strtol(colon + 1, NULL, 16);
                }
                n++;
                if (strncmp(local, want, strlen(want)) != 0) {
                    size_t o = strlen(bad);
                    snprintf(bad + o, len - o, "%s%s", o ? ", " : "", local);
                }
            }
        }
    }
    if (f) {
        fclose(f);
    }
    return n;
}

/* Silent, slow and malformed connections at the rendezvous delay nothing beyond their own. */
static void intruders(void)
{
    static job_t job;
    static const char *const env[] = {"TEMPO_TIMEOUT=30s", "TEMPO_DEBUG=WARN", NULL};
    enum { SILENT = 80, SLOW = 5, GARBAGE = 5, SHUT = 5, ALL = SILENT + SLOW + GARBAGE + SHUT };
    int fd[ALL];
    bs_arg_t a = {{{0, NULL}}, 1, 1};
    job_start(&job, 2, env, bs_rank, &a);
    int made = 0;
    for (int i = 0; i < ALL; i++) {
        fd[i] = intrude(job.root);
        made += fd[i] >= 0;
        if (fd[i] < 0) {
            continue;
        }
        if (i >= SILENT && i < SILENT + SLOW) {
            (void)!write(fd[i], "TMP", 3); /* the start of a magic, then nothing */
        } else if (i >= SILENT + SLOW && i < SILENT + SLOW + GARBAGE) {
            char junk[32];
            memset(junk, 0xa5 + i, sizeof(junk));
            (void)!write(fd[i], junk, sizeof(junk));
        } else if (i >= SILENT + SLOW + GARBAGE) {
            close(fd[i]);
            fd[i] = -1;
        }
    }
    TAP_OK(made == ALL, "intruders: %d of %d connections made to rank 0's rendezvous at %s", made,
           ALL, job.root);
    /* rank 0 listens at 127.0.0.1 only: the same port on another address of this host is shut */
    char other[64];
    snprintf(other, sizeof(other), "127.0.0.2%s", strrchr(job.root, ':'));
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)atoi(strrchr(job.root, ':') + 1))};
    inet_pton(AF_INET, "127.0.0.2", &sa.sin_addr);
    int probe = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int reached = probe >= 0 && connect(probe, (struct sockaddr *)&sa, sizeof(sa)) == 0;
    int e = errno;
    if (probe >= 0) {
        close(probe);
    }
    TAP_OK(!reached, "intruders: the rendezvous port on another address of this host (%s) is "
           "shut (%s)", other, reached ? "connected" : strerror(e));
    /* rank 0's listening sockets, while it waits for rank 1: the rendezvous and its data
     * transport's, both on 127.0.0.1 */
    char bad[200];
    int ports[8] = {0}, root_port = atoi(strrchr(job.root, ':') + 1), data_port = 0;
    int nl = listeners_off(job.pid[0], "0100007F", bad, sizeof(bad), ports, 8);
    TAP_OK(nl >= 2 && !bad[0], "intruders: rank 0 listens on 127.0.0.1 only (%d listening "
           "sockets%s%s)", nl, bad[0] ? "; elsewhere: " : "", bad);
    for (int i = 0; i < nl && i < 8; i++) {
        data_port = ports[i] != root_port ? ports[i] : data_port;
    }
    /* and at its data port (tcp mesh): 10 silent connections and 5 of garbage, which its mesh
     * setup must not wait for (each has its own 5 s; the job's deadline is 30 s) */
    enum { DSILENT = 10, DJUNK = 5 };
    int dfd[DSILENT + DJUNK], dmade = 0;
    char daddr[64];
    snprintf(daddr, sizeof(daddr), "127.0.0.1:%d", data_port);
    for (int i = 0; i < DSILENT + DJUNK; i++) {
        dfd[i] = data_port ? intrude(daddr) : -1;
        dmade += dfd[i] >= 0;
        if (dfd[i] >= 0 && i >= DSILENT) {
            char junk[128];
            memset(junk, 0x5a + i, sizeof(junk));
            (void)!write(dfd[i], junk, sizeof(junk));
        }
    }
    TAP_OK(dmade == DSILENT + DJUNK, "intruders: %d of %d connections made to rank 0's data "
           "port %d", dmade, DSILENT + DJUNK, data_port);
    job_go(&job, 1);
    expect_ranks(&job, "intruders at the rendezvous", 0x3, TEMPO_OK, NULL, NULL);
    TAP_OK(job_status_of(&job, 0, "sum") == 3 && job_status_of(&job, 1, "sum") == 3,
           "intruders at the rendezvous: an all-reduce across the job works");
    /* every intruder's connection was closed by rank 0 (its end reads EOF, or a reset) */
    int closed = 0;
    for (int i = 0; i < ALL; i++) {
        if (fd[i] < 0) {
            continue;
        }
        struct pollfd p = {.fd = fd[i], .events = POLLIN};
        char b[64];
        ssize_t k = 1;
        while (k > 0 && poll(&p, 1, 10000) == 1) { /* (rank 0's challenge, then the end) */
            k = read(fd[i], b, sizeof(b));
        }
        closed += k <= 0;
        close(fd[i]);
    }
    TAP_OK(closed == SILENT + SLOW + GARBAGE, "intruders at the rendezvous: %d of %d held "
           "connections closed by rank 0", closed, SILENT + SLOW + GARBAGE);
    for (int i = 0; i < DSILENT + DJUNK; i++) {
        if (dfd[i] >= 0) {
            close(dfd[i]);
        }
    }
    finish(&job, "intruders at the rendezvous");
}

/* A job key: shared, wrong, missing, impostor, key files. */
static void job_key(void)
{
    static job_t job;
#if !TEMPO_HAVE_CRYPTO
    {
        /* a build without libcrypto: a key is refused at once, saying why */
        static const char *const env[] = {"TEMPO_TIMEOUT=30s", "TEMPO_AUTH_KEY=k1-shared", NULL};
        bs_arg_t a = {{{0, NULL}}, -1, 0};
        job_start(&job, 2, env, bs_rank, &a);
        expect_ranks(&job, "a job key in a build without libcrypto", 0x3, TEMPO_ERR_UNSUPPORTED,
                     "no libcrypto", NULL);
        finish(&job, "a job key in a build without libcrypto");
        return;
    }
#endif
    {
        static const char *const env[] = {"TEMPO_TIMEOUT=30s", "TEMPO_AUTH_KEY=k1-shared", NULL};
        bs_arg_t a = {{{0, NULL}}, -1, 1};
        job_start(&job, 2, env, bs_rank, &a);
        expect_ranks(&job, "a job key shared by every rank", 0x3, TEMPO_OK, NULL, NULL);
        TAP_OK(job_status_of(&job, 0, "sum") == 3 && job_status_of(&job, 1, "sum") == 3,
               "a job key shared by every rank: an all-reduce across the job works");
        finish(&job, "a job key shared by every rank");
    }
    static const struct {
        const char *name, *set, *needle;
    } intruder[] = {{"an intruder with another key", "TEMPO_AUTH_KEY=guess", "not authenticated"},
                    {"an intruder without a key", "TEMPO_AUTH_KEY=", "has none"}};
    for (size_t k = 0; k < sizeof(intruder) / sizeof(intruder[0]); k++) {
        /* process 1 knows the job (TEMPO_ROOT, TEMPO_JOB_ID, rank 1 of 2) but not its key;
         * process 2 is the real rank 1, started once process 1 was refused */
        static const char *const env[] = {"TEMPO_TIMEOUT=30s", "TEMPO_SIZE=2", "TEMPO_JOB_ID=j",
                                          "TEMPO_AUTH_KEY=k1-shared", NULL};
        bs_arg_t a = {{{1, intruder[k].set}, {2, "TEMPO_RANK=1"}}, 2, 1};
        job_start(&job, 3, env, bs_rank, &a);
        expect_ranks(&job, intruder[k].name, 0x2, TEMPO_ERR_BOOTSTRAP, intruder[k].needle, NULL);
        job_go(&job, 2);
        expect_ranks(&job, "the job it tried to join", 0x5, TEMPO_OK, NULL, NULL);
        TAP_OK(job_status_of(&job, 0, "sum") == 3 && job_status_of(&job, 2, "sum") == 3,
               "%s: the job it tried to join forms and an all-reduce across it works",
               intruder[k].name);
        finish(&job, intruder[k].name);
    }
    {
        static const char *const env[] = {"TEMPO_TIMEOUT=3s", "TEMPO_AUTH_KEY=k1-shared", NULL};
        bs_arg_t a = {{{0, "TEMPO_AUTH_KEY=k2-impostor"}}, -1, 0};
        job_start(&job, 2, env, bs_rank, &a);
        expect_ranks(&job, "a rank 0 with another key", 0x2, TEMPO_ERR_BOOTSTRAP,
                     "reply is not authenticated", "does not hold it");
        finish(&job, "a rank 0 with another key");
    }
    for (int keyed = 0; keyed < 2; keyed++) {
        char dir[PATH_MAX], setv[PATH_MAX + 32], path[PATH_MAX + 16];
        tmp_template(dir, sizeof(dir), "fault_bs_log");
        if (!mkdtemp(dir)) {
            TAP_OK(0, "a job across hosts: mkdtemp: %s", strerror(errno));
            break;
        }
        snprintf(setv, sizeof(setv), "TEMPO_DEBUG_FILE=%s/log.%%r", dir);
        const char *env[] = {"TEMPO_TIMEOUT=30s", "TEMPO_HOST_ID=%r", setv,
                             keyed ? "TEMPO_AUTH_KEY=k4" : NULL, NULL};
        const char *name =
            keyed ? "a job across hosts with a key" : "a job across hosts without a key";
        bs_arg_t a = {{{0, NULL}}, -1, 1};
        job_start(&job, 2, env, bs_rank, &a);
        expect_ranks(&job, name, 0x3, TEMPO_OK, NULL, NULL);
        finish(&job, name);
        int says[2] = {0, 0};
        for (int r = 0; r < 2; r++) {
            snprintf(path, sizeof(path), "%s/log.%d", dir, r);
            FILE *f = fopen(path, "r");
            char line[1024];
            while (f && fgets(line, sizeof(line), f)) {
                says[r] += strstr(line, "THIS JOB IS NOT AUTHENTICATED") != NULL;
            }
            if (f) {
                fclose(f);
            }
            unlink(path);
        }
        rmdir(dir);
        TAP_OK(says[0] == !keyed && says[1] == 0, "%s: rank 0 says it is not authenticated %d "
               "times, rank 1 %d times", name, says[0], says[1]);
    }
    for (int priv = 0; priv < 2; priv++) {
        char path[PATH_MAX], setv[PATH_MAX + 32];
        tmp_template(path, sizeof(path), "fault_bs_key");
        int fd = mkstemp(path);
        int made = fd >= 0 && write(fd, "k3-from-a-file\n", 15) == 15 &&
                   fchmod(fd, priv ? 0600 : 0644) == 0;
        if (fd >= 0) {
            close(fd);
        }
        snprintf(setv, sizeof(setv), "TEMPO_AUTH_KEY_FILE=%s", path);
        const char *env[] = {"TEMPO_TIMEOUT=30s", setv, NULL};
        const char *name = priv ? "a private key file" : "a key file readable by others";
        if (!made) {
            TAP_OK(0, "%s: could not make it: %s", name, strerror(errno));
        } else {
            bs_arg_t a = {{{0, NULL}}, -1, 1};
            job_start(&job, 2, env, bs_rank, &a);
            expect_ranks(&job, name, 0x3, priv ? TEMPO_OK : TEMPO_ERR_INVALID,
                         priv ? NULL : "chmod 600", NULL);
            if (priv) {
                TAP_OK(job_status_of(&job, 0, "sum") == 3, "%s: an all-reduce works", name);
            }
            finish(&job, name);
        }
        unlink(path);
    }
}

int main(void)
{
    static job_t job;
    static const char *const env[] = {"TEMPO_TIMEOUT=30s", NULL};

    {
        bs_arg_t a = {{{1, "TEMPO_SIZE=3"}}, -1, 0};
        job_start(&job, 2, env, bs_rank, &a);
        expect_ranks(&job, "sizes 2 and 3", 0x3, TEMPO_ERR_BOOTSTRAP, "size 3", "size 2");
        finish(&job, "sizes 2 and 3");
    }
    {
        /* Rank 2 claims 4 ranks. Rank 1 is told the reason when rank 0 accepted it before it met
         * rank 2; if rank 0 gave up first, rank 1's connection is reset or refused, and it fails
         * with the rendezvous's error or at its deadline (3 s here). Either is acceptable: it
         * cannot know whether rank 0 is slow or gone. */
        static const char *const env3[] = {"TEMPO_TIMEOUT=3s", NULL};
        bs_arg_t a = {{{2, "TEMPO_SIZE=4"}}, -1, 0};
        job_start(&job, 3, env3, bs_rank, &a);
        expect_ranks(&job, "sizes 3, 3 and 4", 0x5, TEMPO_ERR_BOOTSTRAP, "size 4", "size 3");
        job_wait_key(&job, 1, "status", 60);
        int st = job_status_of(&job, 1, "status");
        TAP_OK(st < 0, "sizes 3, 3 and 4: process 1 fails too (%s after %s s)",
               tempo_status_name((tempo_status_t)st), job_get(&job, 1, "elapsed") ?: "?");
        tap_diag("process 1: %s", job_get(&job, 1, "msg") ?: "(no message)");
        finish(&job, "sizes 3, 3 and 4");
    }
    {
        bs_arg_t a = {{{2, "TEMPO_RANK=1"}}, 2, 0};
        job_start(&job, 3, env, bs_rank, &a);
        job_go(&job, 2); /* the duplicate joins once the others are on their way */
        expect_ranks(&job, "two processes as rank 1", 0x7, TEMPO_ERR_BOOTSTRAP, "rank 1", NULL);
        TAP_CONTAINS(job_get(&job, 0, "msg"), "two processes joined as rank 1",
                     "two processes as rank 1: rank 0 says so");
        finish(&job, "two processes as rank 1");
    }
    {
        bs_arg_t a = {{{0, "TEMPO_SIZE"}}, -1, 0};
        job_start(&job, 1, env, bs_rank, &a);
        expect_ranks(&job, "TEMPO_RANK without TEMPO_SIZE", 0x1, TEMPO_ERR_BOOTSTRAP,
                     "TEMPO_RANK and TEMPO_SIZE must be set together", NULL);
        finish(&job, "TEMPO_RANK without TEMPO_SIZE");
    }
    {
        bs_arg_t a = {{{0, "TEMPO_RANK"}}, -1, 0};
        job_start(&job, 1, env, bs_rank, &a);
        expect_ranks(&job, "TEMPO_SIZE without TEMPO_RANK", 0x1, TEMPO_ERR_BOOTSTRAP,
                     "TEMPO_RANK and TEMPO_SIZE must be set together", NULL);
        finish(&job, "TEMPO_SIZE without TEMPO_RANK");
    }
    {
        bs_arg_t a = {{{0, "TEMPO_ROOT"}, {0, "TEMPO_SIZE=2"}}, -1, 0};
        job_start(&job, 1, env, bs_rank, &a);
        expect_ranks(&job, "2 ranks, no TEMPO_ROOT", 0x1, TEMPO_ERR_BOOTSTRAP, "TEMPO_ROOT", NULL);
        finish(&job, "2 ranks, no TEMPO_ROOT");
    }
    {
        /* Process 1 belongs to job "other" (its rank 1); processes 0 and 2 are job "mine". Process
         * 2 joins only once process 1 has been refused. */
        bs_arg_t a = {{{0, "TEMPO_JOB_ID=mine"}, {1, "TEMPO_JOB_ID=other"},
                       {2, "TEMPO_JOB_ID=mine"}, {2, "TEMPO_RANK=1"}},
                      2, 1};
        static const char *const env2[] = {"TEMPO_TIMEOUT=30s", "TEMPO_SIZE=2", NULL};
        job_start(&job, 3, env2, bs_rank, &a);
        expect_ranks(&job, "a process of another job", 0x2, TEMPO_ERR_BOOTSTRAP, "another job",
                     NULL);
        job_go(&job, 2);
        expect_ranks(&job, "the job it tried to join", 0x5, TEMPO_OK, NULL, NULL);
        TAP_OK(job_status_of(&job, 0, "sum") == 3 && job_status_of(&job, 2, "sum") == 3,
               "the job it tried to join: an all-reduce across it works");
        finish(&job, "another job at the rendezvous");
    }
    file_rendezvous();
    intruders();
    job_key();
    return tap_done();
}
