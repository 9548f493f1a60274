/*
 * job.h — a tiny launcher for the fault tests: it forks the ranks of a tempo job itself (with
 * TEMPO_RANK, TEMPO_SIZE, TEMPO_ROOT=127.0.0.1:<free port> and TEMPO_TIMEOUT set, every other
 * TEMPO_ and launcher variable removed), so that a test can kill one rank by pid while the others
 * go on, hold ranks alive until it says so, and read what each rank reports. tempo-run would end
 * the whole job when one rank dies, which is exactly what these tests must not have.
 *
 * A rank is a function rank_main(rank, size, arg) run in a forked child (the parent never touches
 * the library, so every child starts with fresh library state). It talks to the test through two
 * pipes, never through stdout (which it shares with the TAP stream and is redirected to stderr):
 *   rk_put(key, fmt, ...)   report "key value" (one line; newlines in value become spaces)
 *   rk_check(ok, fmt, ...)  a TAP result evaluated inside the rank; rk_diag(fmt, ...) a comment;
 *                           rk_todo(ok, why, fmt, ...) a check of a known bug (TAP "TODO")
 *   rk_wait_go()            block until the test says go (job_go), or the test is gone
 * The test side:
 *   job_start(&job, n, env, rank_main, arg)   env: NULL-terminated "NAME=VALUE" strings for all
 *   job_wait_key(&job, rank, key, seconds)    the value a rank reported, or NULL (timed out/exited)
 *   job_go(&job, rank), job_kill(&job, rank, sig)
 *   job_finish(&job, seconds)                 wait for all ranks (SIGKILL after seconds: a hang
 *                                             guard, reported); relay their rk_check results as TAP
 * FAULT_ENV (space-separated NAME=VALUE words, from the test's environment) is set in every rank
 * before the test's own env, which may override it: how tests/transport/conform.sh runs a fault
 * test on one transport (FAULT_ENV='TEMPO_TRANSPORTS=tcp,^shm'); TEMPO_* variables of the test's
 * environment are otherwise removed.
 * Synchronisation is only through these pipes; the only timeouts are hang guards. Besides the
 * test's own, each rank has a last-resort one: alarm(FAULT_RANK_GUARD seconds, 120 by default;
 * from the environment, for slow builds: a ThreadSanitizer rank of fault_mismatch runs for about
 * 3 minutes).
 */
#ifndef TEMPO_TESTS_FAULT_JOB_H
#define TEMPO_TESTS_FAULT_JOB_H

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>

#include "tests/unit/tu.h" /* tests/tap.h, TU_TODO for known library bugs */

#define JOB_MAX 16
#define JOB_MAXREC 512

extern char **environ;

typedef int (*job_rank_main_t)(int rank, int size, void *arg);

typedef struct {
    char type;   /* 'K' key/value, 'T' result, 'F' failed result, 'D' diagnostic */
    char *key;   /* K only */
    char *text;
} job_rec_t;

typedef struct {
    int n;
    pid_t pid[JOB_MAX];
    int res[JOB_MAX];     /* read end of the rank's report pipe, -1 at EOF */
    int ctl[JOB_MAX];     /* write end of the rank's go pipe */
    char *partial[JOB_MAX];
    job_rec_t rec[JOB_MAX][JOB_MAXREC];
    int nrec[JOB_MAX];
    int status[JOB_MAX];  /* wait status once reaped */
    int reaped[JOB_MAX];
    int hung;             /* ranks killed by the hang guard */
    char root[64];
} job_t;

/* ---------------------------------------------------------------------------------------------- */
/* Rank side                                                                                      */
/* ---------------------------------------------------------------------------------------------- */

static int rk_res_fd = -1, rk_ctl_fd = -1;

static void rk_line(char type, const char *key, const char *fmt, va_list ap)
{
    char buf[2048];
    int o = key ? snprintf(buf, sizeof(buf), "%c %s ", type, key) : snprintf(buf, sizeof(buf),
                                                                             "%c ", type);
    vsnprintf(buf + o, sizeof(buf) - (size_t)o - 1, fmt, ap);
    for (char *p = buf; *p; p++) {
        if (*p == '\n') {
            *p = ' ';
        }
    }
    size_t len = strlen(buf);
    buf[len++] = '\n';
    const char *p = buf;
    while (len > 0) {
        ssize_t w = write(rk_res_fd, p, len);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            return;
        }
        p += w;
        len -= (size_t)w;
    }
}

static void rk_put(const char *key, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rk_put(const char *key, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rk_line('K', key, fmt, ap);
    va_end(ap);
}

static int rk_check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int rk_check(int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rk_line(ok ? 'T' : 'F', NULL, fmt, ap);
    va_end(ap);
    return ok;
}

/* A check that documents a known library bug (relayed as a TAP "TODO", see TU_TODO). */
static int rk_todo(int ok, const char *why, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int rk_todo(int ok, const char *why, const char *fmt, ...)
{
    char text[1500];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    rk_put(ok ? "todo-ok" : "todo-fail", "%s\t%s", why, text);
    return ok;
}

static void rk_diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void rk_diag(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rk_line('D', NULL, fmt, ap);
    va_end(ap);
}

/* Block until the test says go; -1 if the test went away. */
static int rk_wait_go(void)
{
    char c;
    for (;;) {
        ssize_t r = read(rk_ctl_fd, &c, 1);
        if (r == 1) {
            return 0;
        }
        if (r < 0 && errno == EINTR) {
            continue;
        }
        return -1;
    }
}

static double rk_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---------------------------------------------------------------------------------------------- */
/* Test side                                                                                      */
/* ---------------------------------------------------------------------------------------------- */

static double job_now(void)
{
    return rk_now();
}

/* A port on 127.0.0.1 that was free a moment ago (as tempo-run picks TEMPO_ROOT). */
static int job_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    int port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0) {
        port = ntohs(a.sin_port);
    }
    if (fd >= 0) {
        close(fd);
    }
    return port;
}

static void job_clean_env(void)
{
    static const char *const prefixes[] = {"TEMPO_", "OMPI_", "PMI_", "PMIX_", "SLURM_", "MPI_"};
    for (int again = 1; again;) {
        again = 0;
        for (char **e = environ; e && *e && !again; e++) {
            for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
                if (strncmp(*e, prefixes[i], strlen(prefixes[i])) == 0) {
                    char name[256];
                    size_t n = strcspn(*e, "=");
                    n = n < sizeof(name) ? n : sizeof(name) - 1;
                    memcpy(name, *e, n);
                    name[n] = '\0';
                    unsetenv(name);
                    again = 1;
                    break;
                }
            }
        }
    }
}

/* Set one "NAME=VALUE" (or "NAME": unset NAME) in this process's environment. */
static void job_setenv(const char *word, size_t len)
{
    char name[128];
    size_t k = strcspn(word, "=");
    k = k < len ? k : len;
    snprintf(name, sizeof(name), "%.*s", (int)k, word);
    if (k < len) {
        char *value = strndup(word + k + 1, len - k - 1);
        setenv(name, value ? value : "", 1);
        free(value);
    } else {
        unsetenv(name);
    }
}

/* Start n ranks. env: NULL-terminated "NAME=VALUE" strings set for every rank (after TEMPO_RANK,
 * TEMPO_SIZE, TEMPO_ROOT, TEMPO_TIMEOUT=30s and FAULT_ENV's words, which it may override).
 * Returns 0 or -1. */
static int job_start(job_t *j, int n, const char *const *env, job_rank_main_t fn, void *arg)
{
    memset(j, 0, sizeof(*j));
    signal(SIGPIPE, SIG_IGN);
    j->n = n;
    int port = job_free_port();
    if (port < 0) {
        tap_diag("job_start: no free port");
        return -1;
    }
    snprintf(j->root, sizeof(j->root), "127.0.0.1:%d", port);
    for (int r = 0; r < n; r++) {
        j->res[r] = j->ctl[r] = -1;
    }
    for (int r = 0; r < n; r++) {
        int res[2], ctl[2];
        if (pipe(res) != 0 || pipe(ctl) != 0) {
            tap_diag("job_start: pipe: %s", strerror(errno));
            return -1;
        }
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) {
            tap_diag("job_start: fork: %s", strerror(errno));
            return -1;
        }
        if (pid == 0) {
            /* The rank: only its own two pipe ends, stdout into stderr. */
            for (int q = 0; q < r; q++) {
                close(j->res[q]);
                close(j->ctl[q]);
            }
            close(res[0]);
            close(ctl[1]);
            rk_res_fd = res[1];
            rk_ctl_fd = ctl[0];
            dup2(2, 1);
            signal(SIGPIPE, SIG_DFL);
            const char *guard = getenv("FAULT_RANK_GUARD");
            alarm(guard && atoi(guard) > 0 ? (unsigned)atoi(guard) : 120); /* last resort */
            char *fault_env = getenv("FAULT_ENV") ? strdup(getenv("FAULT_ENV")) : NULL;
            job_clean_env();
            char v[32];
            snprintf(v, sizeof(v), "%d", r);
            setenv("TEMPO_RANK", v, 1);
            snprintf(v, sizeof(v), "%d", n);
            setenv("TEMPO_SIZE", v, 1);
            setenv("TEMPO_ROOT", j->root, 1);
            setenv("TEMPO_TIMEOUT", "30s", 1);
            for (const char *w = fault_env; w && *w;) {
                w += strspn(w, " \t");
                size_t len = strcspn(w, " \t");
                if (len) {
                    job_setenv(w, len);
                }
                w += len;
            }
            free(fault_env);
            for (int i = 0; env && env[i]; i++) {
                job_setenv(env[i], strlen(env[i]));
            }
            int rc = fn(r, n, arg);
            fflush(NULL);
            _exit(rc);
        }
        close(res[1]);
        close(ctl[0]);
        fcntl(res[0], F_SETFD, FD_CLOEXEC);
        fcntl(ctl[1], F_SETFD, FD_CLOEXEC);
        j->pid[r] = pid;
        j->res[r] = res[0];
        j->ctl[r] = ctl[1];
    }
    return 0;
}

static void job_record(job_t *j, int r, char *line)
{
    if (j->nrec[r] >= JOB_MAXREC || !line[0]) {
        return;
    }
    job_rec_t *rec = &j->rec[r][j->nrec[r]++];
    rec->type = line[0];
    rec->key = NULL;
    const char *rest = line[1] ? line + 2 : "";
    if (rec->type == 'K') {
        size_t k = strcspn(rest, " ");
        rec->key = strndup(rest, k);
        rest += k + (rest[k] == ' ');
    }
    rec->text = strdup(rest);
}

/* Read whatever the ranks have written, waiting until deadline (absolute, job_now() seconds) for
 * something to arrive. Returns 0 if anything was read or closed, -1 at the deadline. */
static int job_pump(job_t *j, double deadline)
{
    struct pollfd pf[JOB_MAX];
    int idx[JOB_MAX], np = 0;
    for (int r = 0; r < j->n; r++) {
        if (j->res[r] >= 0) {
            pf[np].fd = j->res[r];
            pf[np].events = POLLIN;
            idx[np++] = r;
        }
    }
    if (np == 0) {
        return -1;
    }
    double left = deadline - job_now();
    if (left <= 0) {
        return -1;
    }
    int rc = poll(pf, (nfds_t)np, (int)(left * 1000) + 1);
    if (rc <= 0) {
        return rc < 0 && errno == EINTR ? 0 : -1;
    }
    for (int i = 0; i < np; i++) {
        if (!(pf[i].revents & (POLLIN | POLLHUP | POLLERR))) {
            continue;
        }
        int r = idx[i];
        char buf[4096];
        ssize_t n = read(j->res[r], buf, sizeof(buf));
        if (n <= 0) {
            if (n < 0 && errno == EINTR) {
                continue;
            }
            close(j->res[r]);
            j->res[r] = -1;
            continue;
        }
        size_t old = j->partial[r] ? strlen(j->partial[r]) : 0;
        char *acc = realloc(j->partial[r], old + (size_t)n + 1);
        memcpy(acc + old, buf, (size_t)n);
        acc[old + (size_t)n] = '\0';
        char *p = acc, *nl;
        while ((nl = strchr(p, '\n'))) {
            *nl = '\0';
            job_record(j, r, p);
            p = nl + 1;
        }
        j->partial[r] = strdup(p);
        free(acc);
    }
    return 0;
}

/* Whether the file DIR/log.R (a rank's TEMPO_DEBUG_FILE=DIR/log.%r) holds text. */
static inline int job_log_has(const char *dir, int r, const char *text)
{
    char path[512], line[1024];
    snprintf(path, sizeof(path), "%s/log.%d", dir, r);
    FILE *f = fopen(path, "r");
    int found = 0;
    while (f && !found && fgets(line, sizeof(line), f)) {
        found = strstr(line, text) != NULL;
    }
    if (f) {
        fclose(f);
    }
    return found;
}

/* The latest value rank r reported for key, or NULL. */
static const char *job_get(const job_t *j, int r, const char *key)
{
    for (int i = j->nrec[r] - 1; i >= 0; i--) {
        if (j->rec[r][i].type == 'K' && strcmp(j->rec[r][i].key, key) == 0) {
            return j->rec[r][i].text;
        }
    }
    return NULL;
}

/* Wait up to seconds for rank r to report key; NULL if it exits or time runs out first. */
static const char *job_wait_key(job_t *j, int r, const char *key, double seconds)
{
    double deadline = job_now() + seconds;
    for (;;) {
        const char *v = job_get(j, r, key);
        if (v) {
            return v;
        }
        if (j->res[r] < 0 || job_pump(j, deadline) < 0) {
            return job_get(j, r, key);
        }
    }
}

static void job_go(job_t *j, int r)
{
    /* A rank that has already exited cannot be told (EPIPE); that is not an error. */
    if (j->ctl[r] >= 0 && write(j->ctl[r], "g", 1) != 1 && errno != EPIPE) {
        tap_diag("job_go: rank %d: %s", r, strerror(errno));
    }
}

static void job_kill(job_t *j, int r, int sig)
{
    if (j->pid[r] > 0 && !j->reaped[r]) {
        kill(j->pid[r], sig);
    }
}

/* Wait for every rank to exit; after seconds, SIGKILL the rest (counted in j->hung, with a
 * diagnostic). Relays the ranks' rk_check results as TAP lines. */
static void job_finish(job_t *j, double seconds)
{
    double deadline = job_now() + seconds;
    for (int r = 0; r < j->n; r++) {
        if (j->ctl[r] >= 0) {
            close(j->ctl[r]); /* a rank still in rk_wait_go() is released */
            j->ctl[r] = -1;
        }
    }
    for (;;) {
        int open = 0;
        for (int r = 0; r < j->n; r++) {
            open += j->res[r] >= 0;
        }
        if (!open || job_pump(j, deadline) < 0) {
            break;
        }
    }
    for (int r = 0; r < j->n; r++) {
        if (j->res[r] >= 0) {
            tap_diag("hang guard: rank %d (pid %d) still running after %.0f s; killing it", r,
                     (int)j->pid[r], seconds);
            kill(j->pid[r], SIGKILL);
            j->hung++;
            close(j->res[r]);
            j->res[r] = -1;
        }
        if (j->pid[r] > 0 && !j->reaped[r]) {
            while (waitpid(j->pid[r], &j->status[r], 0) < 0 && errno == EINTR) {
            }
            j->reaped[r] = 1;
        }
    }
    for (int r = 0; r < j->n; r++) {
        for (int i = 0; i < j->nrec[r]; i++) {
            job_rec_t *rec = &j->rec[r][i];
            char *tab = rec->type == 'K' ? strchr(rec->text, '\t') : NULL;
            if (tab && (strcmp(rec->key, "todo-ok") == 0 || strcmp(rec->key, "todo-fail") == 0)) {
                *tab = '\0';
                tu_todo(strcmp(rec->key, "todo-ok") == 0, rec->text, "rank %d: %s", r, tab + 1);
            } else if (rec->type == 'T' || rec->type == 'F') {
                tap_ok(rec->type == 'T', "rank %d: %s", r, rec->text);
            } else if (rec->type == 'D') {
                tap_diag("rank %d: %s", r, rec->text);
            }
        }
    }
}

/* Rank r exited normally with status code. */
static int job_exited(const job_t *j, int r, int code)
{
    return j->reaped[r] && WIFEXITED(j->status[r]) && WEXITSTATUS(j->status[r]) == code;
}

static void job_describe_exit(const job_t *j, int r, char *buf, size_t len)
{
    int s = j->status[r];
    if (!j->reaped[r]) {
        snprintf(buf, len, "not reaped");
    } else if (WIFEXITED(s)) {
        snprintf(buf, len, "exited with %d", WEXITSTATUS(s));
    } else if (WIFSIGNALED(s)) {
        snprintf(buf, len, "killed by signal %d", WTERMSIG(s));
    } else {
        snprintf(buf, len, "status %#x", s);
    }
}

static void job_free(job_t *j)
{
    for (int r = 0; r < j->n; r++) {
        for (int i = 0; i < j->nrec[r]; i++) {
            free(j->rec[r][i].key);
            free(j->rec[r][i].text);
        }
        free(j->partial[r]);
        if (j->res[r] >= 0) {
            close(j->res[r]);
        }
        if (j->ctl[r] >= 0) {
            close(j->ctl[r]);
        }
    }
}

/* job_finish, then one TAP point per rank: "NAME: rank R exited 0"; frees j (calloc'ed). */
static void job_end(job_t *j, double seconds, const char *name)
{
    job_finish(j, seconds);
    for (int r = 0; r < j->n; r++) {
        char how[64];
        job_describe_exit(j, r, how, sizeof(how));
        TAP_OK(job_exited(j, r, 0), "%s: rank %d exited 0 (%s)", name, r, how);
    }
    job_free(j);
    free(j);
}

/* Status reported under key as a number ("-4"), or 999 if absent. */
static int job_status_of(const job_t *j, int r, const char *key)
{
    const char *v = job_get(j, r, key);
    return v ? atoi(v) : 999;
}

#ifdef TEMPO_H
/* In a rank: join the job (tempo_comm_init_env), reporting "init" (its status) and, when it fails,
 * "initmsg" (the error text). NULL on failure. */
static tempo_comm_t rk_init(void)
{
    tempo_comm_t comm = NULL;
    tempo_status_t st = tempo_comm_init_env(&comm);
    rk_put("init", "%d", (int)st);
    if (st != TEMPO_OK) {
        rk_put("initmsg", "%s", tempo_last_error(NULL));
        return NULL;
    }
    return comm;
}
#endif

#endif /* TEMPO_TESTS_FAULT_JOB_H */
