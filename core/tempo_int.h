/*
 * tempo_int.h — what every internal source file includes: config.h, the public header, the status
 * and error helpers, intrusive lists, clocks, memory wrappers and small utilities.
 *
 * It is not part of the installed API. Lower layers (core/) never include headers of higher layers
 * (transport/, collectives/); upward calls go through function pointers registered in core objects.
 *
 * Error policy (see STYLE.md): the place that first detects an error calls tempo__err(), which
 * formats the cause into the calling thread's error buffer and logs it once; callers propagate the
 * status with TEMPO_CHECK, which leaves a file:line breadcrumb at DEBUG level only.
 */
#ifndef TEMPO_CORE_INT_H
#define TEMPO_CORE_INT_H

#include "config.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <tempo.h>

#include "core/log.h"

#define TEMPO_LIKELY(x) __builtin_expect(!!(x), 1)
#define TEMPO_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define TEMPO_MIN(a, b) ((a) < (b) ? (a) : (b))
#define TEMPO_MAX(a, b) ((a) > (b) ? (a) : (b))
#define TEMPO_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define TEMPO_CACHELINE 64
#define TEMPO_ALIGN_UP(x, a) (((x) + (a)-1) / (a) * (a))
#define TEMPO_FMT_PRINTF(f, a) __attribute__((format(printf, f, a)))

#ifdef TEMPO_ENABLE_ASSERT
#include <stdio.h>
#include <stdlib.h>
#define TEMPO_ASSERT(c)                                                                         \
    do {                                                                                        \
        if (!(c)) {                                                                             \
            fprintf(stderr, "tempo: assertion '%s' failed at %s:%d\n", #c, __FILE__, __LINE__); \
            abort();                                                                            \
        }                                                                                       \
    } while (0)
#else
#define TEMPO_ASSERT(c) ((void)0)
#endif

/* ---------------------------------------------------------------------------------------------- */
/* Errors                                                                                         */
/* ---------------------------------------------------------------------------------------------- */

#define TEMPO_ERRMSG_LEN 512

/** Record the cause of an error in the calling thread's buffer, log it (WARN, or INFO for caller
 *  errors) and return st. Call it where the error is first detected. */
tempo_status_t tempo__err(tempo_status_t st, const char *fmt, ...) TEMPO_FMT_PRINTF(2, 3);
/** As tempo__err() without logging (for errors that are expected and reported elsewhere). */
tempo_status_t tempo__err_quiet(tempo_status_t st, const char *fmt, ...) TEMPO_FMT_PRINTF(2, 3);
/** The calling thread's last error text ("" if none). */
const char *tempo__errmsg(void);
/** Replace the calling thread's error text (used when an error from a request is re-raised). */
void tempo__errmsg_set(const char *msg);
void tempo__log_breadcrumb(const char *file, int line, tempo_status_t st);

/** Propagate a failure: evaluate expr once; if negative, leave a breadcrumb and return it. */
#define TEMPO_CHECK(expr)                                         \
    do {                                                          \
        tempo_status_t _tempo_st = (expr);                        \
        if (TEMPO_UNLIKELY(_tempo_st < 0)) {                      \
            tempo__log_breadcrumb(__FILE__, __LINE__, _tempo_st); \
            return _tempo_st;                                     \
        }                                                         \
    } while (0)

/** As TEMPO_CHECK, but store the status in st and jump to label (cleanup path). */
#define TEMPO_CHECK_GOTO(expr, st, label)                    \
    do {                                                     \
        (st) = (expr);                                       \
        if (TEMPO_UNLIKELY((st) < 0)) {                      \
            tempo__log_breadcrumb(__FILE__, __LINE__, (st)); \
            goto label;                                      \
        }                                                    \
    } while (0)

/* ---------------------------------------------------------------------------------------------- */
/* Memory                                                                                         */
/* ---------------------------------------------------------------------------------------------- */

/** malloc/calloc/free with a name for diagnostics; on failure they set the thread error
 *  (TEMPO_ERR_NOMEM naming the allocation) and return NULL. size 0 returns a unique pointer. */
void *tempo__malloc(size_t size, const char *name);
void *tempo__calloc(size_t n, size_t size, const char *name);
void *tempo__realloc(void *p, size_t size, const char *name);
void tempo__free(void *p);
char *tempo__strdup(const char *s, const char *name);
/** Allocation aligned to 64 bytes (cache line), freed with tempo__free_aligned(). */
void *tempo__malloc_aligned(size_t size, const char *name);
void tempo__free_aligned(void *p);

/** One entry point of a library loaded at run time (dlopen): its exported name, where its address
 *  goes, and whether tempo does without it. */
typedef struct {
    const char *name;
    void **slot;
    int optional;
} tempo__dlsym_t;
/** Resolve syms[0..n) in the library handle h (dlopen's). Returns the name of the first required
 *  one missing (slots after it unset), or NULL; *opt_missing_p (may be NULL) gets the first
 *  optional one missing, or NULL. */
const char *tempo__dl_resolve(void *h, const tempo__dlsym_t *syms, size_t n,
                              const char **opt_missing_p);

/* ---------------------------------------------------------------------------------------------- */
/* Clocks                                                                                         */
/* ---------------------------------------------------------------------------------------------- */

static inline uint64_t tempo__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/** One reading of both clocks, in microseconds: the real-time reading taken between two monotonic
 *  ones, paired with their mean (how per-rank files of different hosts are lined up). */
void tempo__clock_pair(double *mono_us_p, double *real_us_p);

/** Create (or truncate) path for writing, as fopen(path, plus ? "w+" : "w") does, but refusing a
 *  symbolic link at path (in a shared directory another user's link must not redirect what a rank
 *  writes), and with excl, any existing file. NULL with errno set. */
FILE *tempo__fopen_write(const char *path, int plus, int excl);

/** now (ns, monotonic) + seconds, saturating. */
static inline uint64_t tempo__deadline_from(uint64_t now, double seconds)
{
    double ns = seconds * 1e9;
    if (ns > 1.8e19) {
        return UINT64_MAX;
    }
    return now + (uint64_t)ns;
}

/** The current time + seconds, saturating. */
static inline uint64_t tempo__deadline_after(double seconds)
{
    return tempo__deadline_from(tempo__now_ns(), seconds);
}

/* ---------------------------------------------------------------------------------------------- */
/* Intrusive doubly linked list (circular, with a sentinel head)                                  */
/* ---------------------------------------------------------------------------------------------- */

typedef struct tempo__list {
    struct tempo__list *prev, *next;
} tempo__list_t;

#define TEMPO_LIST_INIT(l) \
    {                      \
        &(l), &(l)         \
    }
#define tempo__container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

static inline void tempo__list_init(tempo__list_t *l)
{
    l->prev = l->next = l;
}
static inline bool tempo__list_empty(const tempo__list_t *l)
{
    return l->next == l;
}
static inline void tempo__list_push_back(tempo__list_t *head, tempo__list_t *e)
{
    e->prev = head->prev;
    e->next = head;
    head->prev->next = e;
    head->prev = e;
}
static inline void tempo__list_remove(tempo__list_t *e)
{
    e->prev->next = e->next;
    e->next->prev = e->prev;
    e->prev = e->next = e;
}

#define tempo__list_for_each_safe(pos, tmp, head)                    \
    for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head); \
         (pos) = (tmp), (tmp) = (pos)->next)

/* ---------------------------------------------------------------------------------------------- */
/* Misc                                                                                           */
/* ---------------------------------------------------------------------------------------------- */

/** 64-bit FNV-1a hash, used for job keys and host identities. */
static inline uint64_t tempo__hash64(const void *data, size_t len, uint64_t h)
{
    const unsigned char *p = (const unsigned char *)data;
    if (h == 0) {
        h = 0xcbf29ce484222325ull;
    }
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

/** Human-readable byte count into buf ("4 MiB", "1037 B"); returns buf. */
const char *tempo__fmt_bytes(size_t bytes, char *buf, size_t len);

/** The host name (truncated to 63 characters), cached. */
const char *tempo__hostname(void);
/** Expand %h (host name), %p (pid) and %r (rank, "x" when rank < 0) in pattern into out. */
void tempo__expand_path(const char *pattern, int rank, char *out, size_t len);
/** tempo__expand_path for a file every rank of a size-rank job writes: a pattern with neither %r
 *  nor %p would give every rank the same file, so the rank is inserted before the extension
 *  ("t.json" -> "t.3.json"); returns 1 when it was. */
int tempo__expand_path_unique(const char *pattern, int rank, int size, char *out, size_t len);

#endif /* TEMPO_CORE_INT_H */
