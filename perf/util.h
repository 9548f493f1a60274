/*
 * util.h — small pieces every perf program shares: the parser of sizes on their command lines and
 * the JSON value writers. Header-only, so programs that do not link the perf driver
 * (overlap_bench, quant_bench, qcoll_bench) use them too.
 */
#ifndef TEMPO_PERF_UTIL_H
#define TEMPO_PERF_UTIL_H

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

/* Sizes: "8", "1.5K", "64M", "1G" (K, M, G = powers of 1024, either case), as nccl-tests' -b/-e. */
/* *size_p = the value of s, rounded down to an integer; 0 on success, -1 for anything that is not
 * a non-negative number with an optional suffix, or is 2^50 or more. */
static inline int perf_parse_size(const char *s, size_t *size_p)
{
    if (s == NULL || *s < '0' || *s > '9') {
        return -1;
    }
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno != 0) {
        return -1;
    }
    switch (*end) {
    case 'k': case 'K': v *= 1024.0; end++; break;
    case 'm': case 'M': v *= 1024.0 * 1024; end++; break;
    case 'g': case 'G': v *= 1024.0 * 1024 * 1024; end++; break;
    default: break;
    }
    if (*end != '\0' || !(v < 1125899906842624.0)) {
        return -1;
    }
    *size_p = (size_t)v;
    return 0;
}

/* A JSON string literal of s (quotes, backslashes and control characters escaped). */
static inline void perf_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') {
            fprintf(f, "\\%c", ch);
        } else if (ch < 0x20) {
            fprintf(f, "\\u%04x", ch);
        } else {
            fputc(ch, f);
        }
    }
    fputc('"', f);
}

/* A JSON number with 6 significant digits, or null when x is not finite. */
static inline void perf_json_num(FILE *f, double x)
{
    if (isfinite(x)) {
        fprintf(f, "%.6g", x);
    } else {
        fputs("null", f);
    }
}

/* ', "key": x' inside an object. */
static inline void perf_json_field(FILE *f, const char *key, double x)
{
    fprintf(f, ", \"%s\": ", key);
    perf_json_num(f, x);
}

#endif /* TEMPO_PERF_UTIL_H */
