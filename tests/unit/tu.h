/*
 * tu.h — helpers shared by the unit tests on top of tests/tap.h: a known-bug marker (TAP "TODO"),
 * a seeded random generator, a clean launcher environment, and running a function in a forked child
 * (for code that reads the environment once per process, like the configuration table).
 *
 * Not a test framework: every function is static and tiny, so each test stays one program.
 *
 *   TU_TODO(cond, "bug: ...", "name")  a check that documents a known library bug: printed as
 *                                       "not ok N - name # TODO bug: ..." while the bug is
 *                                       there (automake counts it XFAIL) and "ok N - name # TODO
 *                                       ..." once fixed (XPASS, which fails the suite: remove the
 *                                       marker then).
 *   tu_rand64(&state)                   xorshift64*; print the seed with tap_diag().
 *   tu_clean_env()                      unset TEMPO_* and launcher variables (Open MPI, PMI,
 *                                       Slurm).
 *   tu_fork(fn, arg, out, len)          run fn(arg, fd) in a child; what it writes to fd lands
 *                                       in out.
 */
#ifndef TEMPO_TESTS_UNIT_TU_H
#define TEMPO_TESTS_UNIT_TU_H

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* tap.h defines its helpers as plain static functions; a test that does not use all of them must
 * not fail -Werror=unused-function, so the whole header and this one are exempt. */
#pragma GCC diagnostic ignored "-Wunused-function"
#include "tests/tap.h"

extern char **environ;

static int tu_todo(int ok, const char *why, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int tu_todo(int ok, const char *why, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tap_count++;
    printf("%s %d - ", ok ? "ok" : "not ok", tap_count);
    vprintf(fmt, ap);
    printf(" # TODO %s\n", why);
    va_end(ap);
    fflush(stdout);
    return ok;
}

#define TU_TODO(cond, why, ...) tu_todo(!!(cond), why, __VA_ARGS__)

static uint64_t tu_rand64(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dull;
}

/* A seed from TEMPO_TEST_SEED (to replay a failure) or the clock; never 0. */
static uint64_t tu_seed(void)
{
    const char *e = getenv("TEMPO_TEST_SEED");
    uint64_t s = e ? strtoull(e, NULL, 0) : (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)getpid();
    return s ? s : 1;
}

/* Remove every variable tempo or a launcher it knows could read. */
static void tu_clean_env(void)
{
    static const char *const prefixes[] = {"TEMPO_", "OMPI_", "PMI_", "PMIX_", "SLURM_", "MPI_"};
    for (int again = 1; again;) {
        again = 0;
        for (char **e = environ; e && *e; e++) {
            for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
                if (strncmp(*e, prefixes[i], strlen(prefixes[i])) == 0) {
                    char name[256];
                    size_t n = strcspn(*e, "=");
                    if (n >= sizeof(name)) {
                        n = sizeof(name) - 1;
                    }
                    memcpy(name, *e, n);
                    name[n] = '\0';
                    unsetenv(name);
                    again = 1; /* environ changed under us: start over */
                    break;
                }
            }
            if (again) {
                break;
            }
        }
    }
}

/* Write all of buf to fd (child side of tu_fork). */
static void tu_write(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return;
        }
        p += n;
        len -= (size_t)n;
    }
}

/*
 * Run fn(arg, fd) in a child process (with a 60 s alarm as a hang guard); collect at most len bytes
 * it writes to fd into out. Returns the number of bytes collected, or -1 if the child did not exit
 * normally with status 0 (crashed, hung, or fn returned nonzero); the reason goes to the TAP log.
 */
static ssize_t tu_fork(int (*fn)(void *arg, int fd), void *arg, void *out, size_t len)
{
    int p[2];
    if (pipe(p) != 0) {
        tap_diag("pipe: %s", strerror(errno));
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        tap_diag("fork: %s", strerror(errno));
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (pid == 0) {
        close(p[0]);
        dup2(2, 1); /* nothing the child prints may reach the TAP stream */
        alarm(60);
        int rc = fn(arg, p[1]);
        close(p[1]);
        fflush(NULL);
        _exit(rc);
    }
    close(p[1]);
    size_t got = 0;
    for (;;) {
        char tmp[4096];
        ssize_t n = read(p[0], tmp, sizeof(tmp));
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            break;
        }
        size_t take = (size_t)n < len - got ? (size_t)n : len - got;
        memcpy((char *)out + got, tmp, take);
        got += take;
    }
    close(p[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        if (WIFSIGNALED(status)) {
            tap_diag("child %d died of signal %d (%s)", (int)pid, WTERMSIG(status),
                     strsignal(WTERMSIG(status)));
        } else {
            tap_diag("child %d exited with status %d", (int)pid, WEXITSTATUS(status));
        }
        return -1;
    }
    return (ssize_t)got;
}

#endif /* TEMPO_TESTS_UNIT_TU_H */
