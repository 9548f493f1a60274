/*
 * test_qrans.c — the rANS entropy stage (quant/rans.c):
 *   round trip  exact for n = 0, 1, 2, 3, 7, 1000, 2^20 and nsym = 1, 2, 8, 16, 256 on uniform,
 *               skewed (the 3-bit ALQ-like distribution for nsym 8, a discretized Gaussian
 *               otherwise), geometric, single-symbol and alternating streams; random sizes and
 *               alphabets; the encoding is deterministic and never longer than tempo__rans_bound;
 *               the decoder writes nothing past sym[n];
 *   size        1M skewed 8-symbol indices code within 2 % of n * H / 8 bytes plus the header;
 *   cap         every cap below the encoded size answers 0 and writes nothing past out[cap];
 *               exactly the size gives the same bytes;
 *   malformed   every truncation, a wrong frequency sum, every bit flipped in the table, states
 *               out of range, unknown format, symbols >= nsym, n larger or smaller than encoded,
 *               trailing bytes, random garbage: TEMPO_ERR_REMOTE (or, for flips in the stream,
 *               possibly OK), never a crash or a write past sym[n];
 *   speed       diagnostics only: rANS encode and decode, 3-bit packing, zstd levels 1 and 3 on the
 *               byte stream and on the packed stream (bits/symbol and M symbols/s).
 * Random data are seeded; the seed is printed (TEMPO_TEST_SEED replays it).
 */
#include "config.h"

#include <math.h>
#include <time.h>
#if TEMPO_HAVE_ZSTD
#include <zstd.h>
#endif

#include "core/tempo_int.h"
#include "quant/quant.h"
#include "tests/unit/tu.h"
#include "util/helpers.h"

#define CANARY 16 /* guard bytes after every output buffer */

static uint64_t rng;

/* The level probabilities of 3-bit ALQ on Gaussian coordinates, roughly: the middle dominates. */
static const double alq8[8] = {0.005, 0.03, 0.15, 0.315, 0.315, 0.15, 0.03, 0.005};

enum { D_UNIFORM, D_SKEWED, D_GEOMETRIC, D_SINGLE, D_ALTERNATING, D_COUNT };
static const char *const dist_names[D_COUNT] = {"uniform", "skewed", "geometric", "single",
                                                "alternating"};

static void *xmalloc(size_t size)
{
    void *p = malloc(size ? size : 1);
    if (!p) {
        tap_diag("out of memory (%zu bytes)", size);
        exit(1);
    }
    return p;
}

static double unif(void)
{
    return (double)(tu_rand64(&rng) >> 11) * 0x1p-53;
}

static double gauss(void)
{
    double u = unif(), v = unif();
    return sqrt(-2.0 * log(u > 0 ? u : 0x1p-53)) * cos(2 * M_PI * v);
}

static void gen(uint8_t *s, size_t n, int nsym, int dist)
{
    for (size_t i = 0; i < n; i++) {
        int v = 0;
        switch (dist) {
        case D_UNIFORM: v = (int)(tu_rand64(&rng) % (uint64_t)nsym); break;
        case D_SKEWED:
            if (nsym == 8) {
                double u = unif(), acc = 0;
                for (v = 0; v < 7; v++) {
                    acc += alq8[v];
                    if (u < acc) {
                        break;
                    }
                }
            } else {
                v = (int)lround(nsym / 2.0 - 0.5 + gauss() * nsym / 6.0);
                v = v < 0 ? 0 : v >= nsym ? nsym - 1 : v;
            }
            break;
        case D_GEOMETRIC: /* P(s) = 2^-(s+1): many rare symbols at nsym 256 */
            v = __builtin_ctzll(tu_rand64(&rng) | 1ull << 63);
            v = v >= nsym ? nsym - 1 : v;
            break;
        case D_SINGLE: v = nsym - 1; break;
        case D_ALTERNATING: v = (i & 1) ? nsym - 1 : 0; break;
        }
        s[i] = (uint8_t)v;
    }
}

static void st32(uint8_t *p, uint32_t v)
{
    for (int k = 0; k < 4; k++) {
        p[k] = (uint8_t)(v >> (8 * k));
    }
}

static int canary_ok(const uint8_t *p)
{
    for (int k = 0; k < CANARY; k++) {
        if (p[k] != 0xa5) {
            return 0;
        }
    }
    return 1;
}

/* Encode with the bound as cap, decode, compare; guard bytes after both outputs. Returns 1 if all
 * is well (the reason goes to the log otherwise); *len_p gets the encoded size. */
static int roundtrip(const uint8_t *s, size_t n, int nsym, size_t *len_p)
{
    size_t cap = tempo__rans_bound(n, nsym);
    uint8_t *enc = xmalloc(cap + CANARY), *dec = xmalloc(n + CANARY);
    memset(enc + cap, 0xa5, CANARY);
    memset(dec, 0x5a, n);
    memset(dec + n, 0xa5, CANARY);
    int ok = 0;
    size_t len = tempo__rans_encode(s, n, nsym, enc, cap);
    if (len == 0 || len > cap || !canary_ok(enc + cap)) {
        tap_diag("  encode n %zu nsym %d: %zu bytes, bound %zu", n, nsym, len, cap);
        goto out;
    }
    tempo_status_t st = tempo__rans_decode(enc, len, n, nsym, dec);
    if (st != TEMPO_OK) {
        tap_diag("  decode n %zu nsym %d: %s (%s)", n, nsym, tempo_status_name(st),
                 tempo__errmsg());
        goto out;
    }
    if (memcmp(s, dec, n) != 0 || !canary_ok(dec + n)) {
        tap_diag("  n %zu nsym %d: decoded symbols differ or guard bytes overwritten", n, nsym);
        goto out;
    }
    ok = 1;
    *len_p = len;
out:
    free(enc);
    free(dec);
    return ok;
}

static double entropy(const uint8_t *s, size_t n)
{
    size_t c[256] = {0};
    for (size_t i = 0; i < n; i++) {
        c[s[i]]++;
    }
    double h = 0;
    for (int k = 0; k < 256; k++) {
        if (c[k]) {
            double p = (double)c[k] / (double)n;
            h -= p * log2(p);
        }
    }
    return h;
}

/* ------------------------------------------------------------------------------------------ */
/* Round trips                                                                                */
/* ------------------------------------------------------------------------------------------ */

static void test_matrix(void)
{
    static const size_t ns[] = {0, 1, 2, 3, 7, 1000, 1 << 20};
    static const int nsyms[] = {1, 2, 8, 16, 256};
    uint8_t *s = xmalloc(1 << 20);
    for (size_t a = 0; a < TEMPO_ARRAY_SIZE(nsyms); a++) {
        for (int d = 0; d < D_COUNT; d++) {
            int ok = 1;
            for (size_t b = 0; b < TEMPO_ARRAY_SIZE(ns); b++) {
                size_t len = 0;
                gen(s, ns[b], nsyms[a], d);
                if (!roundtrip(s, ns[b], nsyms[a], &len)) {
                    tap_diag("  failed: n %zu nsym %d %s", ns[b], nsyms[a], dist_names[d]);
                    ok = 0;
                }
            }
            TAP_OK(ok, "round trip nsym %d %s, n = 0, 1, 2, 3, 7, 1000, 2^20", nsyms[a],
                   dist_names[d]);
        }
    }
    free(s);
}

static void test_random(void)
{
    enum { ITERS = 400, NMAX = 1 << 16 };
    uint8_t *s = xmalloc(NMAX);
    int ok = 1;
    for (int it = 0; it < ITERS && ok; it++) {
        size_t n = (size_t)(tu_rand64(&rng) % (uint64_t)(1u << (tu_rand64(&rng) % 16)));
        int nsym = 1 + (int)(tu_rand64(&rng) % 256);
        int d = (int)(tu_rand64(&rng) % D_COUNT);
        size_t len = 0;
        gen(s, n, nsym, d);
        if (!roundtrip(s, n, nsym, &len)) {
            tap_diag("  failed: iteration %d n %zu nsym %d %s", it, n, nsym, dist_names[d]);
            ok = 0;
        }
    }
    TAP_OK(ok, "round trip %d random sizes < 2^15, alphabets and distributions", ITERS);

    /* Two present symbols at the extremes of the table: one of frequency 1 (12-bit codes, the
     * reciprocal's special case) and one of 4095. */
    size_t n = 1 << 16, len = 0;
    memset(s, 200, n);
    s[12345] = 3;
    TAP_OK(roundtrip(s, n, 256, &len), "round trip one rare symbol in 2^16 (frequency 1)");
    /* Every symbol present once plus filler: many frequency-1 symbols */
    for (size_t i = 0; i < n; i++) {
        s[i] = i < 256 ? (uint8_t)i : (uint8_t)(i % 3);
    }
    int ok2 = roundtrip(s, n, 256, &len);
    TAP_OK(ok2, "round trip all 256 symbols present, most of them once (%zu bytes)", len);
    free(s);
}

static void test_deterministic(void)
{
    size_t n = 100000;
    uint8_t *s = xmalloc(n);
    gen(s, n, 8, D_SKEWED);
    size_t cap = tempo__rans_bound(n, 8);
    uint8_t *a = xmalloc(cap), *b = xmalloc(cap);
    memset(a, 0, cap);
    memset(b, 0xff, cap);
    size_t la = tempo__rans_encode(s, n, 8, a, cap);
    size_t lb = tempo__rans_encode(s, n, 8, b, cap);
    TAP_OK(la > 0 && la == lb && memcmp(a, b, la) == 0, "encoding is deterministic (%zu bytes)",
           la);
    /* Symbols >= nsym are a caller bug: refused, not encoded */
    s[777] = 8;
    TAP_EQ_UINT(tempo__rans_encode(s, n, 8, a, cap), 0, "encode refuses a symbol >= nsym");
    TAP_EQ_UINT(tempo__rans_encode(s, n, 0, a, cap), 0, "encode refuses nsym 0");
    TAP_EQ_UINT(tempo__rans_encode(s, n, 257, a, cap), 0, "encode refuses nsym 257");
    free(a);
    free(b);
    free(s);
}

/* ------------------------------------------------------------------------------------------ */
/* Size                                                                                       */
/* ------------------------------------------------------------------------------------------ */

static void test_size(void)
{
    static const int nsyms[] = {8, 16};
    size_t n = 1 << 20;
    uint8_t *s = xmalloc(n);
    for (size_t a = 0; a < TEMPO_ARRAY_SIZE(nsyms); a++) {
        int nsym = nsyms[a];
        size_t len = 0;
        gen(s, n, nsym, D_SKEWED);
        double h = entropy(s, n);
        int ok = roundtrip(s, n, nsym, &len);
        size_t hdr = 1 + 2 * (size_t)nsym + 32;
        double ideal = (double)n * h / 8;
        tap_diag("nsym %d skewed, n %zu: rANS %.4f bits/symbol, entropy %.4f, packed %d "
                 "(%zu bytes, ideal %.0f + header <= %zu)",
                 nsym, n, 8.0 * (double)len / (double)n, h, nsym == 8 ? 3 : 4, len, ideal, hdr);
        TAP_OK(ok && (double)len <= 1.02 * ideal + (double)hdr,
               "nsym %d skewed: size within 2 %% of n H / 8 plus the header", nsym);
        if (nsym == 8) {
            TAP_OK((double)len <= 1.001 * ideal + (double)hdr,
                   "nsym 8 skewed: in fact within 0.1 %% (%.3f %%)",
                   100.0 * ((double)(len - hdr) / ideal - 1));
        }
    }
    /* Small messages (a bucket of 2048 indices) still beat packing with the header */
    size_t len = 0;
    n = 2048;
    gen(s, n, 8, D_SKEWED);
    int ok = roundtrip(s, n, 8, &len);
    TAP_OK(ok && len < tempo__qpacked_bytes(n, 3),
           "2048 skewed 3-bit indices: %zu bytes < %zu packed (%.3f bits/symbol, entropy %.3f)",
           len, tempo__qpacked_bytes(n, 3), 8.0 * (double)len / (double)n, entropy(s, n));
    free(s);
}

/* ------------------------------------------------------------------------------------------ */
/* Capacity                                                                                   */
/* ------------------------------------------------------------------------------------------ */

static void test_cap(void)
{
    static const size_t ns[] = {0, 1, 5, 1000, 70000};
    uint8_t *s = xmalloc(70000);
    for (size_t a = 0; a < TEMPO_ARRAY_SIZE(ns); a++) {
        size_t n = ns[a], cap = tempo__rans_bound(n, 8);
        gen(s, n, 8, n == 1 ? D_SINGLE : D_SKEWED);
        uint8_t *ref = xmalloc(cap), *out = xmalloc(cap + CANARY);
        size_t len = tempo__rans_encode(s, n, 8, ref, cap);
        int ok = len > 0;
        /* n = 70000: only the caps near the size, where the checked encoder takes over */
        size_t from = n > 1000 ? len - 200 : 0;
        for (size_t c = from; ok && c < len; c++) {
            memset(out, 0xa5, c + CANARY);
            if (tempo__rans_encode(s, n, 8, out, c) != 0 || !canary_ok(out + c)) {
                tap_diag("  n %zu cap %zu (size %zu): not refused, or wrote past cap", n, c, len);
                ok = 0;
            }
        }
        memset(out, 0xa5, len + CANARY);
        ok = ok && tempo__rans_encode(s, n, 8, out, len) == len && memcmp(out, ref, len) == 0 &&
             canary_ok(out + len);
        TAP_OK(ok, "n %zu: every cap below the size %zu answers 0; the size itself fits", n, len);
        free(ref);
        free(out);
    }
    free(s);
}

/* ------------------------------------------------------------------------------------------ */
/* Malformed input                                                                            */
/* ------------------------------------------------------------------------------------------ */

/* Decode in[0, len) as n symbols into a guarded buffer; -100 if anything past sym[n] changed. */
static int try_decode(const uint8_t *in, size_t len, size_t n, int nsym)
{
    uint8_t *dec = xmalloc(n + CANARY);
    memset(dec + n, 0xa5, CANARY);
    /* a copy of exactly len bytes, so that valgrind sees any read past it */
    uint8_t *copy = xmalloc(len);
    if (len) {
        memcpy(copy, in, len);
    }
    tempo_status_t st = tempo__rans_decode(copy, len, n, nsym, dec);
    int r = canary_ok(dec + n) ? (int)st : -100;
    free(copy);
    free(dec);
    return r;
}

static void test_malformed(void)
{
    size_t n = 300, cap = tempo__rans_bound(n, 16);
    uint8_t s[300], enc[1200];
    TEMPO_ASSERT(cap <= sizeof(enc));
    gen(s, n, 8, D_SKEWED);
    size_t len = tempo__rans_encode(s, n, 8, enc, cap);
    TAP_OK(len > 40 && enc[0] == 1, "a 300-symbol rANS message (%zu bytes)", len);
    TAP_EQ_INT(try_decode(enc, len, n, 8), TEMPO_OK, "it decodes");

    int ok = 1;
    for (size_t l = 0; l < len; l++) {
        int r = try_decode(enc, l, n, 8);
        if (r != TEMPO_ERR_REMOTE) {
            tap_diag("  prefix of %zu bytes: %d", l, r);
            ok = 0;
        }
    }
    TAP_OK(ok, "every truncation of it (0 .. %zu bytes) is TEMPO_ERR_REMOTE", len - 1);
    uint8_t longer[1200];
    memcpy(longer, enc, len);
    longer[len] = longer[len + 1] = 0;
    TAP_EQ_INT(try_decode(longer, len + 1, n, 8), TEMPO_ERR_REMOTE, "one trailing byte");
    TAP_EQ_INT(try_decode(longer, len + 2, n, 8), TEMPO_ERR_REMOTE, "one trailing word");

    /* Frequency table: the first entry is a 1-byte varint (symbol 0 is rare) */
    uint8_t bad[1200];
    memcpy(bad, enc, len);
    bad[1]++;
    TAP_EQ_INT(try_decode(bad, len, n, 8), TEMPO_ERR_REMOTE, "frequency sum off by one");
    TAP_CONTAINS(tempo__errmsg(), "frequency", "the message says why: %s", tempo__errmsg());
    size_t table = 1;
    for (int k = 0; k < 8; k++) {
        table += (enc[table] & 128) ? 2 : 1;
    }
    ok = 1;
    for (size_t b = 0; b < table; b++) {
        for (int bit = 0; bit < 8; bit++) {
            if (b > 0 && bit == 7) {
                continue; /* a continuation bit re-parses the table: checked below, unasserted */
            }
            memcpy(bad, enc, len);
            bad[b] ^= (uint8_t)(1 << bit);
            int r = try_decode(bad, len, n, 8);
            if (r != TEMPO_ERR_REMOTE) {
                tap_diag("  byte %zu bit %d flipped: %d", b, bit, r);
                ok = 0;
            }
        }
    }
    TAP_OK(ok, "every value bit flipped in the format byte and the table (%zu bytes) is caught",
           table);
    memcpy(bad, enc, len);
    st32(bad + table, 0x7fff);
    TAP_EQ_INT(try_decode(bad, len, n, 8), TEMPO_ERR_REMOTE, "a state below 2^15");
    st32(bad + table, 0x80000000u);
    TAP_EQ_INT(try_decode(bad, len, n, 8), TEMPO_ERR_REMOTE, "a state at 2^31");
    memcpy(bad, enc, len);
    bad[0] = 2;
    TAP_EQ_INT(try_decode(bad, len, n, 8), TEMPO_ERR_REMOTE, "unknown format byte");

    /* Symbol counts */
    TAP_EQ_INT(try_decode(enc, len, n + 1, 8), TEMPO_ERR_REMOTE, "n + 1 symbols");
    TAP_EQ_INT(try_decode(enc, len, n + 8, 8), TEMPO_ERR_REMOTE, "n + 8 symbols");
    TAP_EQ_INT(try_decode(enc, len, 2 * n, 8), TEMPO_ERR_REMOTE, "2n symbols");
    TAP_EQ_INT(try_decode(enc, len, n - 1, 8), TEMPO_ERR_REMOTE, "n - 1 symbols");
    TAP_EQ_INT(try_decode(enc, len, 0, 8), TEMPO_ERR_REMOTE, "0 symbols");

    /* Symbols >= nsym */
    uint8_t c2[2] = {0, 8};
    TAP_EQ_INT(try_decode(c2, 2, 10, 8), TEMPO_ERR_REMOTE, "constant message with symbol 8 of 8");
    TAP_EQ_INT(try_decode(c2, 2, 10, 9), TEMPO_OK, "the same with nsym 9 decodes");
    TAP_EQ_INT(try_decode(c2, 1, 10, 9), TEMPO_ERR_REMOTE, "constant message cut to 1 byte");
    TAP_EQ_INT(try_decode(c2, 0, 0, 9), TEMPO_ERR_REMOTE, "empty message");
    uint8_t c3[3] = {0, 1, 0};
    TAP_EQ_INT(try_decode(c3, 3, 10, 8), TEMPO_ERR_REMOTE, "constant message with a byte more");
    uint8_t s16[300];
    gen(s16, n, 16, D_UNIFORM);
    size_t len16 = tempo__rans_encode(s16, n, 16, enc, cap);
    TAP_OK(len16 > 0, "a 16-symbol message");
    TAP_EQ_INT(try_decode(enc, len16, n, 8), TEMPO_ERR_REMOTE, "16-symbol message read as 8");

    /* Every single-bit flip anywhere: no crash, no write past n; stream flips may pass */
    gen(s, n, 8, D_SKEWED);
    len = tempo__rans_encode(s, n, 8, enc, cap);
    size_t flips = 0, caught = 0;
    ok = 1;
    for (size_t b = 0; b < len; b++) {
        for (int bit = 0; bit < 8; bit++) {
            memcpy(bad, enc, len);
            bad[b] ^= (uint8_t)(1 << bit);
            int r = try_decode(bad, len, n, 8);
            flips++;
            caught += r == TEMPO_ERR_REMOTE;
            if (r != TEMPO_OK && r != TEMPO_ERR_REMOTE) {
                tap_diag("  byte %zu bit %d flipped: %d", b, bit, r);
                ok = 0;
            }
        }
    }
    TAP_OK(ok, "every single-bit flip (%zu) decodes or is TEMPO_ERR_REMOTE, never past n", flips);
    tap_diag("single-bit flips detected: %zu of %zu (%.1f %%)", caught, flips,
             100.0 * (double)caught / (double)flips);

    /* Random garbage behind a valid format byte */
    ok = 1;
    for (int it = 0; it < 20000; it++) {
        size_t l = (size_t)(tu_rand64(&rng) % 64);
        int nsym = 1 + (int)(tu_rand64(&rng) % 16);
        size_t m = (size_t)(tu_rand64(&rng) % 40);
        for (size_t k = 0; k < l; k++) {
            bad[k] = (uint8_t)tu_rand64(&rng);
        }
        if (l > 0) {
            bad[0] &= 1;
        }
        int r = try_decode(bad, l, m, nsym);
        if (r != TEMPO_OK && r != TEMPO_ERR_REMOTE) {
            tap_diag("  garbage %d: %d", it, r);
            ok = 0;
        }
    }
    TAP_OK(ok, "20000 random messages: OK or TEMPO_ERR_REMOTE, never past n");
}

/* ------------------------------------------------------------------------------------------ */
/* Speed (diagnostics only)                                                                   */
/* ------------------------------------------------------------------------------------------ */

/* 8 three-bit symbols into 3 bytes, LSB-first (the tail zero-padded). */
static size_t pack3(const uint8_t *s, size_t n, uint8_t *out)
{
    size_t i = 0, o = 0;
    for (; i + 8 <= n; i += 8, o += 3) {
        uint32_t v = 0;
        for (int k = 0; k < 8; k++) {
            v |= (uint32_t)s[i + k] << (3 * k);
        }
        out[o] = (uint8_t)v;
        out[o + 1] = (uint8_t)(v >> 8);
        out[o + 2] = (uint8_t)(v >> 16);
    }
    if (i < n) {
        uint32_t v = 0;
        for (int k = 0; k < 8 && i + (size_t)k < n; k++) {
            v |= (uint32_t)s[i + (size_t)k] << (3 * k);
        }
        for (size_t k = 0; k < (3 * (n - i) + 7) / 8; k++) {
            out[o++] = (uint8_t)(v >> (8 * k));
        }
    }
    return o;
}

static void unpack3(const uint8_t *in, size_t n, uint8_t *s)
{
    size_t i = 0, o = 0;
    for (; i + 8 <= n; i += 8, o += 3) {
        uint32_t v = in[o] | (uint32_t)in[o + 1] << 8 | (uint32_t)in[o + 2] << 16;
        for (int k = 0; k < 8; k++) {
            s[i + k] = (uint8_t)((v >> (3 * k)) & 7);
        }
    }
    uint32_t v = 0;
    for (size_t k = 0; o + k < (3 * n + 7) / 8; k++) {
        v |= (uint32_t)in[o + k] << (8 * k);
    }
    for (int k = 0; k < 8 && i + (size_t)k < n; k++) {
        s[i + (size_t)k] = (uint8_t)((v >> (3 * k)) & 7);
    }
}

#define BEST_OF(reps, secs, stmt)             \
    do {                                      \
        secs = 1e30;                          \
        for (int r_ = 0; r_ < (reps); r_++) { \
            double t0_ = util_now_s();        \
            stmt;                             \
            double t_ = util_now_s() - t0_;   \
            secs = t_ < secs ? t_ : secs;     \
        }                                     \
    } while (0)

static void test_speed(void)
{
    size_t n = (size_t)16 << 20, cap = tempo__rans_bound(n, 8);
    uint8_t *s = xmalloc(n), *dec = xmalloc(n), *enc = xmalloc(cap);
    uint8_t *packed = xmalloc(tempo__qpacked_bytes(n, 3));
    gen(s, n, 8, D_SKEWED);
    double h = entropy(s, n), t;
    double msym = (double)n / 1e6;
    size_t len = 0;
    tap_diag("speed on %zu skewed 3-bit symbols (entropy %.3f bits/symbol), best of 3:", n, h);

    BEST_OF(3, t, len = tempo__rans_encode(s, n, 8, enc, cap));
    double te = t;
    tempo_status_t st = TEMPO_OK;
    BEST_OF(3, t, st = tempo__rans_decode(enc, len, n, 8, dec));
    TAP_OK(st == TEMPO_OK && memcmp(s, dec, n) == 0, "16M-symbol round trip");
    tap_diag("  %-22s %6.3f bits/symbol  encode %7.1f M symbols/s  decode %7.1f M symbols/s",
             "rANS", 8.0 * (double)len / (double)n, msym / te, msym / t);

    /* Per-message overhead: 8192-symbol buckets (the ALQ bucket size), table rebuilt each time */
    size_t bn = 8192, nb = n / bn, total = 0;
    size_t *blen = xmalloc(nb * sizeof(*blen));
    double tb_e = 1e30, tb_d = 1e30;
    for (int r = 0; r < 3; r++) {
        double t0 = util_now_s();
        total = 0;
        for (size_t b = 0; b < nb; b++) {
            blen[b] = tempo__rans_encode(s + b * bn, bn, 8, enc + total, cap - total);
            total += blen[b];
        }
        double t1 = util_now_s();
        size_t pos = 0;
        for (size_t b = 0; b < nb; b++) {
            if (tempo__rans_decode(enc + pos, blen[b], bn, 8, dec + b * bn) != TEMPO_OK) {
                st = TEMPO_ERR_REMOTE;
            }
            pos += blen[b];
        }
        double t2 = util_now_s();
        tb_e = TEMPO_MIN(tb_e, t1 - t0);
        tb_d = TEMPO_MIN(tb_d, t2 - t1);
    }
    TAP_OK(st == TEMPO_OK && memcmp(s, dec, nb * bn) == 0, "8192-symbol blocks round trip");
    free(blen);
    tap_diag("  %-22s %6.3f bits/symbol  encode %7.1f M symbols/s  decode %7.1f M symbols/s",
             "rANS, 8192-sym blocks", 8.0 * (double)total / (double)n, msym / tb_e, msym / tb_d);

    size_t plen = 0;
    BEST_OF(3, t, plen = pack3(s, n, packed));
    te = t;
    BEST_OF(3, t, unpack3(packed, n, dec));
    TAP_OK(memcmp(s, dec, n) == 0, "3-bit packing round trip (test helper)");
    tap_diag("  %-22s %6.3f bits/symbol  encode %7.1f M symbols/s  decode %7.1f M symbols/s",
             "3-bit packed", 8.0 * (double)plen / (double)n, msym / te, msym / t);

#if TEMPO_HAVE_ZSTD
    size_t zcap = ZSTD_compressBound(n);
    uint8_t *z = xmalloc(zcap);
    static const int levels[] = {1, 3};
    for (size_t li = 0; li < TEMPO_ARRAY_SIZE(levels); li++) {
        for (int which = 0; which < 2; which++) {
            const uint8_t *src = which ? packed : s;
            size_t srclen = which ? plen : n, zl = 0, dl = 0;
            BEST_OF(3, t, zl = ZSTD_compress(z, zcap, src, srclen, levels[li]));
            te = t;
            BEST_OF(3, t, dl = ZSTD_decompress(dec, n, z, zl));
            int zok = !ZSTD_isError(zl) && !ZSTD_isError(dl) && dl == srclen &&
                      memcmp(dec, src, srclen) == 0;
            char name[64];
            snprintf(name, sizeof(name), "zstd -%d %s", levels[li], which ? "packed" : "bytes");
            if (!zok) {
                tap_diag("  %s failed", name);
                continue;
            }
            tap_diag("  %-22s %6.3f bits/symbol  encode %7.1f M symbols/s  decode %7.1f M "
                     "symbols/s",
                     name, 8.0 * (double)zl / (double)n, msym / te, msym / t);
        }
    }
    free(z);
#else
    tap_diag("  zstd: not in this build");
#endif
    free(s);
    free(dec);
    free(enc);
    free(packed);
}

int main(void)
{
    uint64_t seed = tu_seed();
    rng = seed;
    tap_diag("seed %llu (TEMPO_TEST_SEED replays it)", (unsigned long long)seed);
    /* the malformed-input checks would each log a warning */
    tempo__log_configure(TEMPO_LOG_NONE, 0, "");

    test_matrix();
    test_random();
    test_deterministic();
    test_size();
    test_cap();
    test_malformed();
    test_speed();
    return tap_done();
}
