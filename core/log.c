/*
 * log.c — the logger behind TEMPO_LOG. Writes whole lines with one write() so lines of threads and
 * ranks sharing a terminal do not interleave. The output file is opened lazily at the first line,
 * when the rank is usually known; a file that cannot be opened falls back to stderr with a warning.
 */
#include "config.h"

#include "core/tempo_int.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <unistd.h>

int tempo__log_level = TEMPO_LOG_WARN;
unsigned tempo__log_mask = TEMPO_SUB_INIT | TEMPO_SUB_ENV;

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static int log_fd = -1;       /* -1: not opened yet */
static char log_pattern[256]; /* TEMPO_DEBUG_FILE, "" for stderr */
static int log_rank = -1;

static const char *const level_names[] = {"NONE", "WARN", "INFO", "DEBUG", "TRACE"};
static const struct {
    const char *name;
    unsigned bit;
} subsys_names[] = {
    {"INIT", TEMPO_SUB_INIT}, {"COLL", TEMPO_SUB_COLL},   {"TRANSPORT", TEMPO_SUB_TRANSPORT},
    {"TOPO", TEMPO_SUB_TOPO}, {"QUANT", TEMPO_SUB_QUANT}, {"OVERLAP", TEMPO_SUB_OVERLAP},
    {"ENV", TEMPO_SUB_ENV},   {"ALL", TEMPO_SUB_ALL},
};

void tempo__log_set_rank(int rank)
{
    log_rank = rank;
}

void tempo__log_configure(int level, unsigned mask, const char *file_pattern)
{
    pthread_mutex_lock(&log_lock);
    tempo__log_level = level;
    tempo__log_mask = mask;
    snprintf(log_pattern, sizeof(log_pattern), "%s", file_pattern ? file_pattern : "");
    if (log_fd > 2) {
        close(log_fd);
    }
    log_fd = -1;
    pthread_mutex_unlock(&log_lock);
}

int tempo__log_parse_subsys(const char *text, unsigned *mask_p)
{
    unsigned mask = 0;
    int invert = *text == '^';
    /* Names separated by commas, blanks after a comma allowed; each name at most once, and ALL
     * alone ("INIT,INIT" or "ALL,COLL" is a typo or a merge, refused rather than guessed at). */
    for (const char *s = text + invert; *s;) {
        while (*s == ' ') {
            s++;
        }
        size_t len = strcspn(s, ",");
        size_t i;
        for (i = 0; i < TEMPO_ARRAY_SIZE(subsys_names); i++) {
            const char *name = subsys_names[i].name;
            if (strlen(name) == len && strncasecmp(s, name, len) == 0) {
                break;
            }
        }
        if (i == TEMPO_ARRAY_SIZE(subsys_names) || (mask & subsys_names[i].bit)) {
            return -1;
        }
        mask |= subsys_names[i].bit;
        s += len;
        if (*s == ',') {
            s++;
        }
    }
    *mask_p = invert ? ~mask : mask;
    return 0;
}

const char *tempo__log_level_name(int level)
{
    return level >= 0 && level < (int)TEMPO_ARRAY_SIZE(level_names) ? level_names[level] : "?";
}

void tempo__log_format_subsys(unsigned mask, char *buf, size_t len)
{
    /* The shorter of the list and its ^ form, so that "^ENV" reads back as itself. */
    int inv = mask != TEMPO_SUB_ALL && __builtin_popcount(mask) > 16;
    unsigned m = inv ? ~mask : mask;
    size_t o = (size_t)snprintf(buf, len, "%s", inv ? "^" : "");
    if (m == TEMPO_SUB_ALL || m == 0) { /* 0: "^ALL", nothing */
        snprintf(buf, len, "%sALL", m ? "" : "^");
        return;
    }
    for (size_t i = 0; i + 1 < TEMPO_ARRAY_SIZE(subsys_names) && o < len; i++) {
        if (m & subsys_names[i].bit) {
            o += (size_t)snprintf(buf + o, len - o, "%s%s", o > (size_t)inv ? "," : "",
                                  subsys_names[i].name);
        }
    }
}

static const char *subsys_name(unsigned sub)
{
    for (size_t i = 0; i < TEMPO_ARRAY_SIZE(subsys_names); i++) {
        if (subsys_names[i].bit == sub) {
            return subsys_names[i].name;
        }
    }
    return "ALL";
}

/* Expand %h, %p, %r in the pattern. */
static void expand_pattern(char *out, size_t len)
{
    int rank = log_rank;
    if (rank < 0) {
        const char *env = getenv("TEMPO_RANK");
        rank = env ? atoi(env) : -1;
    }
    tempo__expand_path(log_pattern, rank, out, len);
}

static int log_open_locked(void)
{
    if (log_fd >= 0) {
        return log_fd;
    }
    log_fd = 2;
    if (log_pattern[0]) {
        char path[512];
        expand_pattern(path, sizeof(path));
        int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd >= 0) {
            log_fd = fd;
        } else {
            char msg[700];
            int n =
                snprintf(msg, sizeof(msg),
                         "tempo WARN cannot open TEMPO_DEBUG_FILE '%s': %s; logging to stderr\n",
                         path, strerror(errno));
            if (write(2, msg, (size_t)TEMPO_MIN(n, (int)sizeof(msg) - 1)) < 0) {
                /* nothing else to do */
            }
        }
    }
    return log_fd;
}

void tempo__log(int level, unsigned subsys, const char *file, int line, const char *fmt, ...)
{
    char buf[1536];
    const char *base = strrchr(file, '/');
    base = base ? base + 1 : file;
    int n;
    if (log_rank >= 0) {
        n = snprintf(buf, sizeof(buf), "%s:%d:%d tempo %-5s %s %s:%d ", tempo__hostname(),
                     (int)getpid(), log_rank, level_names[level], subsys_name(subsys), base, line);
    } else {
        n = snprintf(buf, sizeof(buf), "%s:%d tempo %-5s %s %s:%d ", tempo__hostname(),
                     (int)getpid(), level_names[level], subsys_name(subsys), base, line);
    }
    if (n < 0 || (size_t)n >= sizeof(buf)) {
        n = 0;
    }
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(buf + n, sizeof(buf) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0) {
        m = 0;
    }
    size_t len = TEMPO_MIN((size_t)n + (size_t)m, sizeof(buf) - 2);
    buf[len++] = '\n';
    pthread_mutex_lock(&log_lock);
    int fd = log_open_locked();
    if (write(fd, buf, len) < 0) {
        /* a logger has nowhere to report its own failure */
    }
    pthread_mutex_unlock(&log_lock);
}
