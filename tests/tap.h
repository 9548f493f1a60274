/*
 * tap.h — a tiny TAP producer for tempo's tests (automake's tap-driver.sh reads it).
 *
 * Each check prints "ok N - name" or "not ok N - name" followed by "# " diagnostic lines that show
 * both operands. Tests end with tap_done(), which prints the plan ("1..N") and returns the exit
 * status. A whole program can be skipped with tap_skip_all(reason) (exit 0 with "1..0 # SKIP").
 * Seeded tests print their seed with tap_diag() so a failure can be replayed.
 *
 *   TAP_OK(cond, "name %d", i)
 *   TAP_EQ_INT(got, expected, "name")     integers (printed as long long)
 *   TAP_EQ_UINT(got, expected, "name")    unsigned (printed as unsigned long long)
 *   TAP_EQ_STR(got, expected, "name")
 *   TAP_EQ_DBL(got, expected, "name")     exact compare, printed with %.17g
 *   TAP_CONTAINS(haystack, needle, "name")
 *
 * Header-only; every function is static inline so tests stay single-file programs.
 */
#ifndef TEMPO_TESTS_TAP_H
#define TEMPO_TESTS_TAP_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tap_count __attribute__((unused));
static int tap_failures __attribute__((unused));

static inline void tap_vresult(int ok, const char *fmt, va_list ap)
{
    tap_count++;
    if (!ok) {
        tap_failures++;
    }
    printf("%s %d - ", ok ? "ok" : "not ok", tap_count);
    vprintf(fmt, ap);
    printf("\n");
    fflush(stdout);
}

static inline void tap_diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline void tap_diag(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    printf("# ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    fflush(stdout);
}

static inline int tap_ok(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline int tap_ok(int ok, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tap_vresult(ok, fmt, ap);
    va_end(ap);
    return ok;
}

static inline void tap_skip(const char *reason, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static inline void tap_skip(const char *reason, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tap_count++;
    printf("ok %d - ", tap_count);
    vprintf(fmt, ap);
    printf(" # SKIP %s\n", reason);
    va_end(ap);
    fflush(stdout);
}

static inline void tap_skip_all(const char *reason)
{
    printf("1..0 # SKIP %s\n", reason);
    fflush(stdout);
    exit(0);
}

static inline int tap_done(void)
{
    printf("1..%d\n", tap_count);
    fflush(stdout);
    return tap_failures ? 1 : 0;
}

#define TAP_OK(cond, ...) tap_ok(!!(cond), __VA_ARGS__)

#define TAP_EQ_INT(got, expected, ...)                                                           \
    do {                                                                                         \
        long long tap_g_ = (long long)(got), tap_e_ = (long long)(expected);                     \
        if (!tap_ok(tap_g_ == tap_e_, __VA_ARGS__)) {                                            \
            tap_diag("  %s = %lld, expected %s = %lld (%s:%d)", #got, tap_g_, #expected, tap_e_, \
                     __FILE__, __LINE__);                                                        \
        }                                                                                        \
    } while (0)

#define TAP_EQ_UINT(got, expected, ...)                                                         \
    do {                                                                                        \
        unsigned long long tap_g_ = (unsigned long long)(got);                                  \
        unsigned long long tap_e_ = (unsigned long long)(expected);                             \
        if (!tap_ok(tap_g_ == tap_e_, __VA_ARGS__)) {                                           \
            tap_diag("  %s = %llu (0x%llx), expected %s = %llu (0x%llx) (%s:%d)", #got, tap_g_, \
                     tap_g_, #expected, tap_e_, tap_e_, __FILE__, __LINE__);                    \
        }                                                                                       \
    } while (0)

#define TAP_EQ_DBL(got, expected, ...)                                                             \
    do {                                                                                           \
        double tap_g_ = (double)(got), tap_e_ = (double)(expected);                                \
        if (!tap_ok(tap_g_ == tap_e_, __VA_ARGS__)) {                                              \
            tap_diag("  %s = %.17g, expected %s = %.17g (%s:%d)", #got, tap_g_, #expected, tap_e_, \
                     __FILE__, __LINE__);                                                          \
        }                                                                                          \
    } while (0)

#define TAP_EQ_STR(got, expected, ...)                                                           \
    do {                                                                                         \
        const char *tap_g_ = (got), *tap_e_ = (expected);                                        \
        int tap_same_ = tap_g_ && tap_e_ && strcmp(tap_g_, tap_e_) == 0;                         \
        if (!tap_ok(tap_same_, __VA_ARGS__)) {                                                   \
            tap_diag("  %s = \"%s\", expected \"%s\" (%s:%d)", #got, tap_g_ ? tap_g_ : "(null)", \
                     tap_e_ ? tap_e_ : "(null)", __FILE__, __LINE__);                            \
        }                                                                                        \
    } while (0)

#define TAP_CONTAINS(hay, needle, ...)                                                            \
    do {                                                                                          \
        const char *tap_h_ = (hay), *tap_n_ = (needle);                                           \
        if (!tap_ok(tap_h_ && tap_n_ && strstr(tap_h_, tap_n_) != NULL, __VA_ARGS__)) {           \
            tap_diag("  %s = \"%s\" does not contain \"%s\" (%s:%d)", #hay,                       \
                     tap_h_ ? tap_h_ : "(null)", tap_n_ ? tap_n_ : "(null)", __FILE__, __LINE__); \
        }                                                                                         \
    } while (0)

#endif /* TEMPO_TESTS_TAP_H */
