/*
 * util.h — small pieces every perf program shares: the JSON value writers, and (util/helpers.h,
 * shared with tempo-train and the tools) the parser of sizes on their command lines and the clock. Header-only, so programs that do not link the perf driver
 * (overlap_bench, quant_bench, qcoll_bench) use them too.
 */
#ifndef TEMPO_PERF_UTIL_H
#define TEMPO_PERF_UTIL_H

#include <math.h>
#include <stdio.h>

#include "util/helpers.h"

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
