/*
 * test_status.c — core/status.c: every tempo_status_t has its own name and its own description,
 * unknown values are answered (never NULL, never mistaken for a real status), and the per-thread
 * error buffer behind tempo_last_error(NULL) keeps what was recorded, truncates long messages and
 * is private to each thread. Also tempo_version() against the header.
 */
#include "config.h"

#include <limits.h>
#include <pthread.h>

#include "core/tempo_int.h"
#include "tests/unit/tu.h"

/* The expected names, written out independently of the library's X-macro list. */
static const struct {
    tempo_status_t st;
    const char *name;
} known[] = {
    {TEMPO_OK, "TEMPO_OK"},
    {TEMPO_INPROGRESS, "TEMPO_INPROGRESS"},
    {TEMPO_ERR_INVALID, "TEMPO_ERR_INVALID"},
    {TEMPO_ERR_NOMEM, "TEMPO_ERR_NOMEM"},
    {TEMPO_ERR_SYSTEM, "TEMPO_ERR_SYSTEM"},
    {TEMPO_ERR_REMOTE, "TEMPO_ERR_REMOTE"},
    {TEMPO_ERR_TIMEOUT, "TEMPO_ERR_TIMEOUT"},
    {TEMPO_ERR_UNSUPPORTED, "TEMPO_ERR_UNSUPPORTED"},
    {TEMPO_ERR_ABORTED, "TEMPO_ERR_ABORTED"},
    {TEMPO_ERR_INTERNAL, "TEMPO_ERR_INTERNAL"},
    {TEMPO_ERR_BOOTSTRAP, "TEMPO_ERR_BOOTSTRAP"},
};
#define NKNOWN ((int)(sizeof(known) / sizeof(known[0])))

static void test_names_and_texts(void)
{
    /* Every value between the sentinel and TEMPO_INPROGRESS is a status (no gaps). */
    TAP_EQ_INT(NKNOWN, TEMPO_INPROGRESS - TEMPO_ERR_LAST, "the status list covers every value");
    for (int i = 0; i < NKNOWN; i++) {
        TAP_EQ_STR(tempo_status_name(known[i].st), known[i].name, "name of %d", (int)known[i].st);
        const char *t = tempo_strerror(known[i].st);
        TAP_OK(t && t[0] && strcmp(t, tempo_strerror((tempo_status_t)12345)) != 0,
               "%s has a description of its own (\"%s\")", known[i].name, t ? t : "(null)");
    }
    int distinct_names = 1, distinct_texts = 1;
    for (int i = 0; i < NKNOWN; i++) {
        for (int j = i + 1; j < NKNOWN; j++) {
            if (strcmp(tempo_status_name(known[i].st), tempo_status_name(known[j].st)) == 0) {
                distinct_names = 0;
                tap_diag("same name for %d and %d", (int)known[i].st, (int)known[j].st);
            }
            if (strcmp(tempo_strerror(known[i].st), tempo_strerror(known[j].st)) == 0) {
                distinct_texts = 0;
                tap_diag("same text for %s and %s", known[i].name, known[j].name);
            }
        }
    }
    TAP_OK(distinct_names, "all status names are distinct");
    TAP_OK(distinct_texts, "all status descriptions are distinct");
    TAP_CONTAINS(tempo_strerror(TEMPO_ERR_REMOTE), "peer",
                 "TEMPO_ERR_REMOTE's text speaks of a peer");
    TAP_CONTAINS(tempo_strerror(TEMPO_ERR_TIMEOUT), "timed out", "TEMPO_ERR_TIMEOUT's text");
}

static void test_unknown(void)
{
    const int unknown[] = {TEMPO_ERR_LAST, TEMPO_ERR_LAST - 1, 2, 3, 100, -100, INT_MIN, INT_MAX};
    for (size_t u = 0; u < sizeof(unknown) / sizeof(unknown[0]); u++) {
        tempo_status_t st = (tempo_status_t)unknown[u];
        const char *n = tempo_status_name(st), *t = tempo_strerror(st);
        int clash = 0;
        for (int i = 0; n && t && i < NKNOWN; i++) {
            clash |= strcmp(n, known[i].name) == 0 || strcmp(t, tempo_strerror(known[i].st)) == 0;
        }
        TAP_OK(n && n[0] && t && t[0] && !clash,
               "unknown status %d: name \"%s\", text \"%s\", neither a real status's", unknown[u],
               n ? n : "(null)", t ? t : "(null)");
    }
}

static void *thread_errors(void *arg)
{
    const char *before = tempo__errmsg();
    int *clean = arg;
    *clean = before[0] == '\0';
    tempo__err_quiet(TEMPO_ERR_SYSTEM, "from the other thread");
    return NULL;
}

static void test_error_buffer(void)
{
    TAP_EQ_STR(tempo_last_error(NULL), "", "no error recorded at start");
    tempo_status_t st = tempo__err_quiet(TEMPO_ERR_INVALID, "bad %s %d", "thing", 42);
    TAP_EQ_INT(st, TEMPO_ERR_INVALID, "tempo__err_quiet returns its status");
    TAP_EQ_STR(tempo__errmsg(), "bad thing 42", "the message is formatted into the buffer");
    TAP_EQ_STR(tempo_last_error(NULL), "bad thing 42", "tempo_last_error(NULL) shows it");
    st = tempo__err(TEMPO_ERR_INVALID, "logged %s", "too");
    TAP_EQ_INT(st, TEMPO_ERR_INVALID, "tempo__err returns its status");
    TAP_EQ_STR(tempo_last_error(NULL), "logged too", "tempo__err records its message");

    char big[2000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    tempo__err_quiet(TEMPO_ERR_SYSTEM, "%s", big);
    TAP_EQ_UINT(strlen(tempo__errmsg()), TEMPO_ERRMSG_LEN - 1,
                "a 1999-character message is truncated to the buffer");
    tempo__errmsg_set("replaced");
    TAP_EQ_STR(tempo__errmsg(), "replaced", "tempo__errmsg_set replaces the text");
    tempo__errmsg_set(tempo__errmsg());
    TAP_EQ_STR(tempo__errmsg(), "replaced", "setting the buffer to itself keeps it");
    tempo__errmsg_set(NULL);
    TAP_EQ_STR(tempo__errmsg(), "", "tempo__errmsg_set(NULL) clears it");

    tempo__err_quiet(TEMPO_ERR_INVALID, "main thread");
    pthread_t t;
    int clean = 0;
    int rc = pthread_create(&t, NULL, thread_errors, &clean);
    if (rc == 0) {
        pthread_join(t, NULL);
    }
    TAP_OK(rc == 0 && clean, "a new thread starts with an empty error text");
    TAP_EQ_STR(tempo__errmsg(), "main thread",
               "another thread's error does not replace this one's");
}

static void test_version(void)
{
    char want[64];
    snprintf(want, sizeof(want), "%d.%d.%d", TEMPO_VERSION_MAJOR, TEMPO_VERSION_MINOR,
             TEMPO_VERSION_PATCH);
    TAP_EQ_STR(tempo_version(), want, "tempo_version() matches the header's TEMPO_VERSION_*");
    TAP_EQ_INT(TEMPO_VERSION_NUMBER,
               TEMPO_VERSION_MAJOR * 10000 + TEMPO_VERSION_MINOR * 100 + TEMPO_VERSION_PATCH,
               "TEMPO_VERSION_NUMBER");
}

int main(void)
{
    test_names_and_texts();
    test_unknown();
    test_error_buffer();
    test_version();
    return tap_done();
}
