/*
 * status.c — names and descriptions of tempo_status_t, generated from one X-macro list so the enum
 * documentation, the names and the strings cannot drift apart; plus the thread's error buffer.
 */
#include "config.h"

#include "core/tempo_int.h"

#include <stdio.h>

#define TEMPO_STATUS_MAP(X)                                                               \
    X(TEMPO_OK, "success")                                                                \
    X(TEMPO_INPROGRESS, "operation in progress")                                          \
    X(TEMPO_ERR_INVALID, "invalid argument or usage")                                     \
    X(TEMPO_ERR_NOMEM, "out of memory")                                                   \
    X(TEMPO_ERR_SYSTEM, "system call failed")                                             \
    X(TEMPO_ERR_REMOTE, "peer failure (a remote rank died, left or sent malformed data)") \
    X(TEMPO_ERR_TIMEOUT, "timed out")                                                     \
    X(TEMPO_ERR_UNSUPPORTED, "not supported in this build or on this communicator")       \
    X(TEMPO_ERR_ABORTED, "communicator aborted")                                          \
    X(TEMPO_ERR_INTERNAL, "internal error")                                               \
    X(TEMPO_ERR_BOOTSTRAP, "rendezvous (bootstrap) failed")

const char *tempo_strerror(tempo_status_t status)
{
    switch (status) {
#define X(name, text) \
    case name: return text;
        TEMPO_STATUS_MAP(X)
#undef X
    default: return "unknown status";
    }
}

const char *tempo_status_name(tempo_status_t status)
{
    switch (status) {
#define X(name, text) \
    case name: return #name;
        TEMPO_STATUS_MAP(X)
#undef X
    default: return "TEMPO_STATUS_UNKNOWN";
    }
}

/* ---------------------------------------------------------------------------------------------- */

static __thread char tls_errmsg[TEMPO_ERRMSG_LEN];

const char *tempo__errmsg(void)
{
    return tls_errmsg;
}

void tempo__errmsg_set(const char *msg)
{
    if (msg != tls_errmsg) {
        snprintf(tls_errmsg, sizeof(tls_errmsg), "%s", msg ? msg : "");
    }
}

static tempo_status_t err_v(int log, tempo_status_t st, const char *fmt, va_list ap)
{
    char tmp[TEMPO_ERRMSG_LEN];
    vsnprintf(tmp, sizeof(tmp), fmt, ap);
    memcpy(tls_errmsg, tmp, sizeof(tmp));
    if (log) {
        if (st == TEMPO_ERR_INVALID || st == TEMPO_ERR_UNSUPPORTED) {
            TEMPO_INFO(TEMPO_SUB_ALL, "%s: %s", tempo_status_name(st), tls_errmsg);
        } else {
            TEMPO_WARN(TEMPO_SUB_ALL, "%s: %s", tempo_status_name(st), tls_errmsg);
        }
    }
    return st;
}

tempo_status_t tempo__err(tempo_status_t st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err_v(1, st, fmt, ap);
    va_end(ap);
    return st;
}

tempo_status_t tempo__err_quiet(tempo_status_t st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err_v(0, st, fmt, ap);
    va_end(ap);
    return st;
}

void tempo__log_breadcrumb(const char *file, int line, tempo_status_t st)
{
    TEMPO_LOG(TEMPO_LOG_DEBUG, TEMPO_SUB_ALL, "  at %s:%d -> %s", file, line,
              tempo_status_name(st));
}
