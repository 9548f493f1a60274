/*
 * mrtest.h — helpers shared by the multi-rank test programs in tests/mr (coll_test, determinism).
 *
 * A multi-rank test must not trust the library it tests to report on itself, so these programs do
 * not print TAP: every rank writes one line per check to its own result file DIR/r<rank>
 * ("GROUP STATUS DETAIL", STATUS one of PASS, FAIL, SKIP), ends it with "END" when it finished
 * normally, and the shell script that launched the job aggregates the files into TAP points.
 *
 * What is here: the result file, a 64-bit mixer for reproducible pseudo-random data, and IEEE
 * binary16 / bfloat16 <-> binary32 conversions (round to nearest, ties to even) written from the
 * formats' definitions, so that expected values do not come from the library's own converters.
 * Header-only; everything is static inline so a program may use any subset.
 */
#ifndef TEMPO_TESTS_MRTEST_H
#define TEMPO_TESTS_MRTEST_H

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tempo.h"

/* ---------------------------------------------------------------------------------------------- */
/* Pseudo-random data                                                                             */
/* ---------------------------------------------------------------------------------------------- */

/** splitmix64's finalizer: a bijection of 64-bit values with good avalanche. */
static inline uint64_t mr_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/** A hash of three 64-bit keys. */
static inline uint64_t mr_hash3(uint64_t a, uint64_t b, uint64_t c)
{
    return mr_mix64(mr_mix64(mr_mix64(a) ^ b) ^ c);
}

/* ---------------------------------------------------------------------------------------------- */
/* 16-bit floating point, from the definitions (no library code, no compiler _Float16)            */
/* ---------------------------------------------------------------------------------------------- */

static inline uint32_t mr_f32_bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    return x;
}

static inline float mr_bits_f32(uint32_t x)
{
    float f;
    memcpy(&f, &x, sizeof(f));
    return f;
}

/** binary32 -> binary16, round to nearest, ties to even; overflow gives infinity, NaN stays NaN. */
static inline uint16_t mr_f32_to_f16(float f)
{
    uint32_t x = mr_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) { /* inf, NaN (quiet, payload's top bits kept) */
        return (uint16_t)(sign | 0x7c00u | (ax > 0x7f800000u ? 0x200u | ((ax >> 13) & 0x3ffu) : 0));
    }
    if (ax >= 0x477ff000u) { /* >= 65520 = halfway between 65504 (max) and 2^16: infinity */
        return (uint16_t)(sign | 0x7c00u);
    }
    if (ax >= 0x38800000u) { /* >= 2^-14: normal; a carry out of the mantissa bumps the exponent */
        ax += 0xfffu + ((ax >> 13) & 1u);
        ax -= (uint32_t)(127 - 15) << 23;
        return (uint16_t)(sign | (ax >> 13));
    }
    if (ax <= 0x33000000u) { /* <= 2^-25 (half the smallest subnormal, a tie to 0): zero */
        return (uint16_t)sign;
    }
    /* Subnormal: the result is value / 2^-24 rounded to an integer (which may reach 0x400, the
     * smallest normal, whose encoding is the same integer). */
    uint32_t e = ax >> 23; /* 102 .. 112 */
    uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e; /* 14 .. 24 */
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) {
        q++;
    }
    return (uint16_t)(sign | q);
}

/** binary16 -> binary32 (exact). */
static inline float mr_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    if (e == 0x1f) {
        x = sign | 0x7f800000u | (m << 13);
    } else if (e) {
        x = sign | ((e + 112) << 23) | (m << 13);
    } else if (!m) {
        x = sign;
    } else { /* subnormal m * 2^-24: normalise */
        e = 113;
        while (!(m & 0x400u)) {
            m <<= 1;
            e--;
        }
        x = sign | (e << 23) | ((m & 0x3ffu) << 13);
    }
    return mr_bits_f32(x);
}

/** binary32 -> bfloat16, round to nearest, ties to even; NaN stays (quiet) NaN. */
static inline uint16_t mr_f32_to_bf16(float f)
{
    uint32_t x = mr_f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        return (uint16_t)((x >> 16) | 0x40u);
    }
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

/** bfloat16 -> binary32 (exact). */
static inline float mr_bf16_to_f32(uint16_t h)
{
    return mr_bits_f32((uint32_t)h << 16);
}

/* ---------------------------------------------------------------------------------------------- */
/* Result files                                                                                   */
/* ---------------------------------------------------------------------------------------------- */

typedef struct mr_out {
    FILE *f;
    long pass, fail, skip; /* lines written, by status */
} mr_out_t;

/** Open DIR/r<rank> for writing; exits with a message on failure (nothing to report to). */
static inline void mr_out_open(mr_out_t *out, const char *dir, int rank)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/r%d", dir, rank);
    memset(out, 0, sizeof(*out));
    out->f = fopen(path, "w");
    if (!out->f) {
        fprintf(stderr, "rank %d: cannot create %s: %s\n", rank, path, strerror(errno));
        exit(2);
    }
}

/** One check: "GROUP STATUS DETAIL". FAIL and SKIP lines are flushed at once, so that they survive
 *  a crash or a kill by the launcher's timeout. */
static inline void mr_result(mr_out_t *out, const char *group, const char *status,
                             const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static inline void mr_result(mr_out_t *out, const char *group, const char *status,
                             const char *fmt, ...)
{
    va_list ap;
    fprintf(out->f, "%s %s ", group, status);
    va_start(ap, fmt);
    vfprintf(out->f, fmt, ap);
    va_end(ap);
    fputc('\n', out->f);
    if (status[0] == 'P') {
        out->pass++;
    } else {
        out->fail += status[0] == 'F';
        out->skip += status[0] == 'S';
        fflush(out->f);
    }
}

/** The normal end of a rank's file. */
static inline void mr_out_close(mr_out_t *out)
{
    fprintf(out->f, "END pass=%ld fail=%ld skip=%ld\n", out->pass, out->fail, out->skip);
    fclose(out->f);
    out->f = NULL;
}

/** Text of a library error for a result line: status name and tempo_last_error(), with newlines
 *  and '#' (which would start a TAP directive) replaced. Static storage. */
static inline const char *mr_errtext(tempo_comm_t comm, tempo_status_t st)
{
    static char buf[600];
    snprintf(buf, sizeof(buf), "%s: %s", tempo_status_name(st), tempo_last_error(comm));
    for (char *p = buf; *p; p++) {
        if (*p == '\n' || *p == '\r' || *p == '#') {
            *p = ' ';
        }
    }
    return buf;
}

/** The start of a test program whose only argument is "--out DIR": parse it, join the job and
 *  open this rank's result file. Returns 0, or the exit status after reporting the failure (a
 *  usage error on stderr; a failed join as a FAIL line of group). */
static inline int mr_start(int argc, char **argv, const char *group, tempo_comm_t *comm_p,
                           mr_out_t *out)
{
    const char *dir = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--out") && i + 1 < argc) {
            dir = argv[++i];
        } else {
            fprintf(stderr, "usage: %s --out DIR\n", argv[0]);
            return 2;
        }
    }
    if (!dir) {
        fprintf(stderr, "%s: --out DIR is required\n", argv[0]);
        return 2;
    }
    tempo_status_t st = tempo_comm_init_env(comm_p);
    mr_out_open(out, dir, st == TEMPO_OK ? tempo_comm_rank(*comm_p) : 0);
    if (st != TEMPO_OK) {
        mr_result(out, group, "FAIL", "init: %s", mr_errtext(NULL, st));
        mr_out_close(out);
        return 1;
    }
    return 0;
}

#endif /* TEMPO_TESTS_MRTEST_H */
