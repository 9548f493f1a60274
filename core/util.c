/*
 * util.c — memory wrappers, byte formatting, host name. Allocation failures are reported where they
 * happen (naming the allocation and its size), so callers only propagate TEMPO_ERR_NOMEM.
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>

#include "core/tempo_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void *tempo__malloc(size_t size, const char *name)
{
    void *p = malloc(size ? size : 1);
    if (!p) {
        tempo__err(TEMPO_ERR_NOMEM, "cannot allocate %zu bytes for %s", size, name);
    }
    return p;
}

void *tempo__calloc(size_t n, size_t size, const char *name)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        tempo__err(TEMPO_ERR_NOMEM, "cannot allocate %zu x %zu bytes for %s", n, size, name);
    }
    return p;
}

void *tempo__realloc(void *old, size_t size, const char *name)
{
    void *p = realloc(old, size ? size : 1);
    if (!p) {
        tempo__err(TEMPO_ERR_NOMEM, "cannot grow %s to %zu bytes", name, size);
    }
    return p;
}

void tempo__free(void *p)
{
    free(p);
}

char *tempo__strdup(const char *s, const char *name)
{
    size_t n = strlen(s) + 1;
    char *p = tempo__malloc(n, name);
    if (p) {
        memcpy(p, s, n);
    }
    return p;
}

void *tempo__malloc_aligned(size_t size, const char *name)
{
    void *p = NULL;
    if (posix_memalign(&p, TEMPO_CACHELINE, size ? size : 1) != 0) {
        tempo__err(TEMPO_ERR_NOMEM, "cannot allocate %zu aligned bytes for %s", size, name);
        return NULL;
    }
    return p;
}

void tempo__free_aligned(void *p)
{
    free(p);
}

const char *tempo__fmt_bytes(size_t bytes, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    double v = (double)bytes;
    while (v >= 1024.0 && u < 4 && (bytes % 1024 == 0 || v >= 10240.0)) {
        v /= 1024.0;
        bytes /= 1024;
        u++;
    }
    if (v == (double)(size_t)v) {
        snprintf(buf, len, "%zu %s", (size_t)v, units[u]);
    } else {
        snprintf(buf, len, "%.1f %s", v, units[u]);
    }
    return buf;
}

const char *tempo__hostname(void)
{
    static char name[64];
    static int done;
    if (!done) {
        if (gethostname(name, sizeof(name)) != 0) {
            snprintf(name, sizeof(name), "unknown");
        }
        name[sizeof(name) - 1] = '\0';
        done = 1;
    }
    return name;
}

void tempo__expand_path(const char *pattern, int rank, char *out, size_t len)
{
    size_t o = 0;
    for (const char *p = pattern; *p && o + 1 < len; p++) {
        if (p[0] == '%' && p[1]) {
            char tmp[96];
            p++;
            if (*p == 'h') {
                snprintf(tmp, sizeof(tmp), "%s", tempo__hostname());
            } else if (*p == 'p') {
                snprintf(tmp, sizeof(tmp), "%d", (int)getpid());
            } else if (*p == 'r') {
                if (rank >= 0) {
                    snprintf(tmp, sizeof(tmp), "%d", rank);
                } else {
                    snprintf(tmp, sizeof(tmp), "x");
                }
            } else {
                snprintf(tmp, sizeof(tmp), "%%%c", *p);
            }
            int k = snprintf(out + o, len - o, "%s", tmp);
            o = k < 0 ? o : TEMPO_MIN(len - 1, o + (size_t)k);
        } else {
            out[o++] = *p;
        }
    }
    out[o < len ? o : len - 1] = '\0';
}

FILE *tempo__fopen_write(const char *path, int plus, int excl)
{
    int flags = (plus ? O_RDWR : O_WRONLY) | O_CREAT | O_NOFOLLOW | O_CLOEXEC;
    int fd = open(path, flags | (excl ? O_EXCL : O_TRUNC), 0666);
    if (fd < 0) {
        return NULL;
    }
    FILE *f = fdopen(fd, plus ? "w+" : "w");
    if (!f) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return f;
}

void tempo__clock_pair(double *mono_us_p, double *real_us_p)
{
    struct timespec rt;
    uint64_t m0 = tempo__now_ns();
    clock_gettime(CLOCK_REALTIME, &rt);
    uint64_t m1 = tempo__now_ns();
    *mono_us_p = ((double)m0 + (double)m1) / 2000.0;
    *real_us_p = (double)rt.tv_sec * 1e6 + (double)rt.tv_nsec / 1e3;
}

int tempo__expand_path_unique(const char *pattern, int rank, int size, char *out, size_t len)
{
    if (size <= 1 || strstr(pattern, "%r") || strstr(pattern, "%p")) {
        tempo__expand_path(pattern, rank, out, len);
        return 0;
    }
    /* "dir/trace.json" -> "dir/trace.%r.json"; no extension: "dir/trace" -> "dir/trace.%r". */
    char with[512];
    const char *base = strrchr(pattern, '/');
    base = base ? base + 1 : pattern;
    const char *dot = strrchr(base, '.');
    size_t cut = dot && dot != base ? (size_t)(dot - pattern) : strlen(pattern);
    snprintf(with, sizeof(with), "%.*s.%%r%s", (int)cut, pattern, pattern + cut);
    tempo__expand_path(with, rank, out, len);
    return 1;
}

const char *tempo__dl_resolve(void *h, const tempo__dlsym_t *syms, size_t n,
                              const char **opt_missing_p)
{
    const char *opt = NULL;
    for (size_t i = 0; i < n; i++) {
        if (!(*syms[i].slot = dlsym(h, syms[i].name))) {
            if (!syms[i].optional) {
                return syms[i].name;
            }
            opt = opt ? opt : syms[i].name;
        }
    }
    if (opt_missing_p) {
        *opt_missing_p = opt;
    }
    return NULL;
}
