/*
 * test_log.c — core/log.c: the TEMPO_DEBUG_SUBSYS list parser (names, case, spaces, ALL, ^
 * exclusion, bad names), and the logger itself: level and subsystem filtering (warnings pass any
 * mask), arguments not evaluated when a line is filtered out, the line format, TEMPO_DEBUG_FILE
 * with %h/%p/%r expansion, and the fallback to stderr when the file cannot be opened.
 */
#include "config.h"

#include <fcntl.h>
#include <sys/stat.h>

#include "core/tempo_int.h"
#include "tests/unit/tu.h"

static void subsys_ok(const char *text, unsigned want)
{
    unsigned m = 0xdeadbeef;
    int rc = tempo__log_parse_subsys(text, &m);
    TAP_OK(rc == 0 && m == want, "subsys \"%s\" = %#x (got rc %d, %#x)", text, want, rc, m);
}

static void subsys_bad(const char *text)
{
    unsigned m = 0xdeadbeef;
    int rc = tempo__log_parse_subsys(text, &m);
    TAP_OK(rc != 0 && m == 0xdeadbeef, "subsys \"%s\" is rejected, mask untouched (rc %d, %#x)",
           text, rc, m);
}

static void test_parse_subsys(void)
{
    subsys_ok("INIT", TEMPO_SUB_INIT);
    subsys_ok("INIT,COLL", TEMPO_SUB_INIT | TEMPO_SUB_COLL);
    subsys_ok("init,coll", TEMPO_SUB_INIT | TEMPO_SUB_COLL);
    subsys_ok("INIT, COLL", TEMPO_SUB_INIT | TEMPO_SUB_COLL);
    subsys_ok("TRANSPORT,TOPO,QUANT,OVERLAP,ENV",
              TEMPO_SUB_TRANSPORT | TEMPO_SUB_TOPO | TEMPO_SUB_QUANT | TEMPO_SUB_OVERLAP |
                  TEMPO_SUB_ENV);
    subsys_ok("ALL", TEMPO_SUB_ALL);
    subsys_ok("INIT,", TEMPO_SUB_INIT);
    subsys_ok("", 0);
    subsys_ok("^ENV", ~(unsigned)TEMPO_SUB_ENV);
    subsys_ok("^INIT,ENV", ~(unsigned)(TEMPO_SUB_INIT | TEMPO_SUB_ENV));
    subsys_ok("^ALL", 0);
    subsys_bad("BOGUS");
    subsys_bad("INIT,BOGUS");
    subsys_bad("^BOGUS");
    subsys_bad("INIT;COLL");
    subsys_bad("INIT ");
    subsys_bad("IN");
    subsys_bad("INITX");
    subsys_bad("INIT,^COLL"); /* ^ only applies to the whole list */
    /* A name given twice, or ALL with another (which it already holds): refused, not guessed at. */
    subsys_bad("COLL,COLL");
    subsys_bad("INIT,COLL,init");
    subsys_bad("^ENV,ENV");
    subsys_bad("ALL,INIT");
    subsys_bad("QUANT,ALL");
    subsys_bad("INIT,,COLL");
    {
        /* The whole text is read: a name past byte 255 is seen (it used to be cut off). */
        char longlist[400] = "INIT,";
        memset(longlist + 5, ' ', 260);
        strcpy(longlist + 265, "COLL");
        unsigned m = 0xdeadbeef;
        int rc = tempo__log_parse_subsys(longlist, &m);
        TAP_OK(rc == 0 && m == (TEMPO_SUB_INIT | TEMPO_SUB_COLL),
               "a %zu-byte list ending in COLL is INIT,COLL (rc %d, %#x)", strlen(longlist), rc, m);
        strcpy(longlist + 265, "BOGUS");
        rc = tempo__log_parse_subsys(longlist, &m);
        TAP_OK(rc != 0,
                "a %zu-byte list ending in a bad name is rejected (rc %d)", strlen(longlist), rc);
    }
}

/* ------------------------------------------------------------------------------------------ */

static char tmpdir[256];

static char *slurp(const char *path, char *buf, size_t len)
{
    buf[0] = '\0';
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        return NULL;
    }
    ssize_t n = read(fd, buf, len - 1);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    return buf;
}

static int evaluated;

static int count_evaluation(void)
{
    return ++evaluated;
}

static void test_logger(void)
{
    char pattern[300], path[400], text[8192];
    snprintf(pattern, sizeof(pattern), "%s/log.%%h.%%p.%%r", tmpdir);
    snprintf(path, sizeof(path), "%s/log.%s.%d.5", tmpdir, tempo__hostname(), (int)getpid());
    tempo__log_set_rank(5);
    tempo__log_configure(TEMPO_LOG_INFO, TEMPO_SUB_INIT, pattern);
    TEMPO_WARN(TEMPO_SUB_COLL, "warning %d", 1);
    TEMPO_INFO(TEMPO_SUB_INIT, "info init %d", 2);
    TEMPO_INFO(TEMPO_SUB_COLL, "info coll %d", count_evaluation());
    TEMPO_DEBUG(TEMPO_SUB_INIT, "debug init %d", count_evaluation());
    TAP_OK(slurp(path, text, sizeof(text)) != NULL, "TEMPO_DEBUG_FILE %%h.%%p.%%r expands to %s",
           path);
    TAP_CONTAINS(text, "warning 1", "a warning is written whatever the subsystem mask");
    TAP_CONTAINS(text, "info init 2", "INFO of a selected subsystem is written at level INFO");
    TAP_OK(!strstr(text, "info coll"), "INFO of an unselected subsystem is not written");
    TAP_OK(!strstr(text, "debug init"), "DEBUG is not written at level INFO");
    TAP_EQ_INT(evaluated, 0, "arguments of filtered lines are not evaluated");
    char prefix[160];
    snprintf(prefix, sizeof(prefix), "%s:%d:5 tempo WARN  COLL test_log.c:", tempo__hostname(),
             (int)getpid());
    TAP_CONTAINS(text, prefix, "a line starts with host:pid:rank, level, subsystem and file:line");
    int lines = 0;
    for (char *p = text; *p; p++) {
        lines += *p == '\n';
    }
    TAP_EQ_INT(lines, 2, "one line per message, each ended by a newline");

    /* An unusable file: one warning on stderr, then lines go to stderr. */
    char errpath[400];
    snprintf(errpath, sizeof(errpath), "%s/stderr", tmpdir);
    fflush(stderr);
    int saved = dup(2);
    int efd = open(errpath, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(efd, 2);
    close(efd);
    snprintf(pattern, sizeof(pattern), "%s/no/such/dir/log", tmpdir);
    tempo__log_configure(TEMPO_LOG_WARN, TEMPO_SUB_ALL, pattern);
    TEMPO_WARN(TEMPO_SUB_INIT, "after fallback");
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    slurp(errpath, text, sizeof(text));
    TAP_CONTAINS(text, "cannot open TEMPO_DEBUG_FILE",
                 "an unopenable TEMPO_DEBUG_FILE is reported");
    TAP_CONTAINS(text, "after fallback", "and lines go to stderr instead");

    tempo__log_configure(TEMPO_LOG_NONE, 0, "");
    evaluated = 0;
    TEMPO_WARN(TEMPO_SUB_INIT, "silenced %d", count_evaluation());
    TAP_EQ_INT(evaluated, 0, "level NONE silences even warnings, without evaluating arguments");
    tempo__log_configure(TEMPO_LOG_WARN, TEMPO_SUB_INIT | TEMPO_SUB_ENV, "");
    unlink(path);
    unlink(errpath);
}

int main(void)
{
    snprintf(tmpdir, sizeof(tmpdir), "%s/tempo_test_log.XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(tmpdir)) {
        printf("Bail out! mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    test_parse_subsys();
    test_logger();
    rmdir(tmpdir);
    return tap_done();
}
