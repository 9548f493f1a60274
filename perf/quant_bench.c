/*
 * quant_bench.c — what each gradient compressor costs and what it loses, on one process: for every
 * spec, the bits per coordinate on the wire, the single-thread encode and decode throughput, the
 * time of the first encode (which also fits adaptive levels) and the normalized variance of the
 * quantization error.
 *
 * Data: COUNT float32 coordinates drawn i.i.d. from N(0,1) (Box-Muller on splitmix64, seeded:
 * "Gaussian buckets"), or real gradients read from a file of raw little-endian float32 (-f).
 *
 * Per spec: create the compressor; encode once with key 1 (the warm-up; adaptive compressors fit
 * their levels at this call 0, so its time is shown apart as "first"); then REPS encodes with the
 * same key 1 (the levels are reused: the next refit is at call 100) and REPS decodes of the last
 * encoding. Throughputs are medians, in GB/s of float32 input (count x 4 bytes / seconds).
 * bits/coord = 8 x encoded bytes / count (norms and headers included).
 *
 * Normalized variance: on a fresh compressor (so error feedback has no residual yet and the input
 * of sign, topk and randk is the data itself), the first encode is decoded and, for every full
 * bucket b of 8192 coordinates (a last partial bucket is left out), ||Q(b) - b||^2 / ||b||^2 is
 * taken; the column is the mean over buckets (the per-bucket normalized variance of the ALQ paper).
 *
 * Level convention: zero=1 is a zero level plus a sign bit (the paper, 2^bits - 1 levels); zero=0
 * is 2^bits signed levels without zero (the ALQ authors' code). "L-inf" marks rows whose buckets
 * are divided by their largest coordinate (qsgdinf, terngrad, alq/amq with norm=linf); the others
 * divide by the L2 norm. Adaptive compressors also show their fitted positive levels on a
 * "#   levels:" line.
 *
 * powersgd cannot be encoded locally (its encoding needs the other ranks); its row says so.
 *
 * Uses only include/tempo.h. Needs no communicator: run it directly.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "perf/util.h"
#include "util/helpers.h"
#include "tempo.h"

#define NV_BUCKET 8192  /* coordinates per bucket of the normalized variance */
#define MAX_SPECS 64
#define MAX_LEVELS 1024

static const char *const default_specs[] = {
    "none",          "fp16",           "bf16",        "qsgd:bits=3",
    "qsgdinf:bits=3", "nuqsgd:bits=3", "terngrad",    "alq:bits=3",
    "alq-n:bits=3",  "amq:bits=3",     "amq-n:bits=3", "alq:bits=4",
    "alq:bits=3,entropy=rans", "alq:bits=3,entropy=zstd", "qsgd:bits=3,zero=1",
    "alq:bits=3,zero=1", "alq:bits=3,norm=linf", "alq-n:bits=3,norm=linf", "sign",
    "topk:ratio=0.01", "randk:ratio=0.01",
};
#define N_DEFAULT (sizeof(default_specs) / sizeof(default_specs[0]))

typedef struct {
    const char *specs[MAX_SPECS];
    int nspecs;
    size_t count;
    int count_set;
    int reps;
    const char *file;
    size_t skip;
    uint64_t seed;
    const char *json;
} opts_t;

typedef struct {
    char spec[256];      /* as shown in the table */
    char canon[512];     /* tempo_compressor_spec() */
    int unsupported;     /* encode answered TEMPO_ERR_UNSUPPORTED */
    char note[256];      /* why, when unsupported */
    double bits, enc_gbps, dec_gbps, first_ms, nvar;
    char conv[64];
    float levels[MAX_LEVELS];
    size_t nlevels;      /* positive levels shown (adaptive compressors) */
} row_t;

static int cmp_dbl(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_dbl);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static void die(tempo_status_t st, const char *spec, const char *what)
{
    fprintf(stderr, "quant_bench: %s: %s: %s: %s\n", spec, what, tempo_strerror(st),
            tempo_last_error(NULL));
    exit(2);
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "quant_bench: out of memory (%zu bytes)\n", n);
        exit(2);
    }
    return p;
}

/* ---------------------------------------------------------------------------------------------- */
/* Data                                                                                           */

static uint64_t splitmix64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A uniform double in (0, 1]. */
static double unif(uint64_t *s)
{
    return ((double)(splitmix64(s) >> 11) + 1.0) * 0x1.0p-53;
}

static void gaussian(float *v, size_t n, uint64_t seed)
{
    uint64_t s = seed;
    const double two_pi = 6.283185307179586476925;
    for (size_t i = 0; i < n; i += 2) {
        double r = sqrt(-2.0 * log(unif(&s))), t = two_pi * unif(&s);
        v[i] = (float)(r * cos(t));
        if (i + 1 < n) {
            v[i + 1] = (float)(r * sin(t));
        }
    }
}

/* Raw little-endian float32 after skip header bytes; *n_p: coordinates read (at most max when
 * max > 0). */
static float *read_file(const char *path, size_t skip, size_t max, size_t *n_p)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "quant_bench: cannot open %s: %s\n", path, strerror(errno));
        exit(2);
    }
    if (fseek(f, 0, SEEK_END) != 0) {
        fprintf(stderr, "quant_bench: cannot seek in %s: %s\n", path, strerror(errno));
        exit(2);
    }
    long size = ftell(f);
    if (size < 0) {
        fprintf(stderr, "quant_bench: cannot size %s: %s\n", path, strerror(errno));
        exit(2);
    }
    if ((size_t)size <= skip) {
        fprintf(stderr, "quant_bench: %s: no data after %zu bytes (size %ld)\n", path, skip,
                size);
        exit(2);
    }
    if (fseek(f, (long)skip, SEEK_SET) != 0) {
        fprintf(stderr, "quant_bench: cannot seek in %s: %s\n", path, strerror(errno));
        exit(2);
    }
    size -= (long)skip;
    if (size % 4) {
        fprintf(stderr,
                "quant_bench: %s: %ld bytes after the skipped %zu are not a multiple of 4 (raw "
                "float32 expected)\n",
                path, size, skip);
        exit(2);
    }
    size_t n = (size_t)size / 4;
    if (max && max < n) {
        n = max;
    }
    unsigned char *raw = xmalloc(n * 4);
    if (fread(raw, 4, n, f) != n) {
        fprintf(stderr, "quant_bench: short read from %s\n", path);
        exit(2);
    }
    fclose(f);
    float *v = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        const unsigned char *b = raw + 4 * i;
        uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                     (uint32_t)b[3] << 24;
        memcpy(&v[i], &u, 4);
    }
    free(raw);
    *n_p = n;
    return v;
}

/* ---------------------------------------------------------------------------------------------- */
/* Compressor table                                                                               */

/* The kind named by spec's prefix (before ':'); 0 if none matches. */
static int find_kind(const char *spec, tempo_compressor_kind_t *k)
{
    size_t len = strcspn(spec, ":");
    for (size_t i = 0; tempo_compressor_kind(i, k) == TEMPO_OK; i++) {
        if (strlen(k->name) == len && !strncmp(k->name, spec, len)) {
            return 1;
        }
    }
    return 0;
}

/* Default specs get ",bucket=8192" where the compressor takes a bucket. */
static const char *with_bucket(const char *spec)
{
    tempo_compressor_kind_t k;
    if (!find_kind(spec, &k) || !strstr(k.params, "bucket=")) {
        return spec;
    }
    size_t n = strlen(spec) + 16;
    char *s = xmalloc(n);
    snprintf(s, n, "%s%sbucket=8192", spec, strchr(spec, ':') ? "," : ":");
    return s;
}

/* The row's level convention into buf (see the conv column in usage). */
static void convention(const char *canon, const tempo_compressor_kind_t *k, char *buf, size_t len)
{
    int tern = !strcmp(k->name, "terngrad");
    int linf = tern || !strcmp(k->name, "qsgdinf") || strstr(canon, "norm=linf");
    const char *base = strstr(canon, "zero=1")        ? "zero+sign (paper)"
                       : tern                         ? "ternary {-1,0,1}"
                       : strstr(k->params, "bits=")   ? "2^b signed, no zero (authors' code)"
                                                      : "-";
    snprintf(buf, len, "%s%s", base, linf ? ", L-inf" : "");
}

/* ---------------------------------------------------------------------------------------------- */

static void usage(void)
{
    printf(
        "usage: quant_bench [options]   (one process; no communicator)\n"
        "  -c, --spec SPEC        compressor spec, e.g. alq:bits=3,entropy=rans (repeatable); without\n"
        "                         -c: none, fp16, bf16, qsgd, qsgdinf, nuqsgd, terngrad, alq, alq-n,\n"
        "                         amq, amq-n (3 bits), alq:bits=4, alq with entropy=rans and zstd,\n"
        "                         qsgd and alq with zero=1, alq and alq-n with norm=linf, sign, topk\n"
        "                         and randk (ratio 0.01), all with bucket=8192 where the compressor\n"
        "                         takes a bucket\n"
        "  -n, --count N          float32 coordinates (K, M, G suffixes: powers of 2) [16M]; with -f,\n"
        "                         only the first N of the file\n"
        "  -r, --reps N           timed encodes and decodes per spec; medians shown [5]\n"
        "  -f, --file FILE        gradients: raw little-endian float32 (count = size / 4) instead of\n"
        "                         N(0,1) coordinates\n"
        "  -k, --skip BYTES       with -f: header bytes before the data [0] (16 for a gradient written\n"
        "                         by tempo-train --dump)\n"
        "  -s, --seed N           seed of the N(0,1) data [1]\n"
        "  -J, --json FILE        also write the results as a JSON array of objects\n"
        "  -h, --help             this text\n"
        "      --version          the package version\n"
        "Columns: bits/coord = 8 x encoded bytes / count (norms, headers included); enc and dec =\n"
        "median single-thread GB/s of float32 input (count x 4 bytes); first = the first encode in\n"
        "ms (adaptive compressors fit their levels there); nvar = mean over full buckets of 8192 of\n"
        "||Q(b)-b||^2 / ||b||^2 from the first encode of a fresh compressor (no error-feedback\n"
        "residual yet); conv = level convention (zero=0: 2^bits signed levels without zero, the ALQ\n"
        "authors' code; zero=1: zero level and sign bit, the paper; 'L-inf' where buckets are divided\n"
        "by their largest coordinate: qsgdinf, terngrad, norm=linf). Encodes reuse key 1 (adaptive\n"
        "levels are fitted at call 0 and kept: the next refit is at call 100). Canonical specs and\n"
        "adaptive levels follow the table on '#' lines. powersgd cannot be encoded locally (the row\n"
        "says so). Exit status: 0, or 2 for a usage error, bad data or a compressor error.\n");
}

static int parse_args(int argc, char **argv, opts_t *o)
{
    *o = (opts_t){.count = 16u << 20, .reps = 5, .seed = 1};
    static const struct option lo[] = {{"spec", 1, 0, 'c'}, {"count", 1, 0, 'n'},
                                       {"reps", 1, 0, 'r'}, {"file", 1, 0, 'f'},
                                       {"skip", 1, 0, 'k'},
                                       {"seed", 1, 0, 's'}, {"json", 1, 0, 'J'},
                                       {"help", 0, 0, 'h'}, {"version", 0, 0, 'V'},
                                       {0, 0, 0, 0}};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":c:n:r:f:k:s:J:h", lo, NULL)) != -1) {
        const char *v = optarg;
        char *e = NULL;
        int bad = 0;
        switch (c) {
        case 'h': usage(); exit(0);
        case 'V': util_print_version("quant_bench"); exit(0);
        case 'c':
            if (o->nspecs == MAX_SPECS) {
                fprintf(stderr, "quant_bench: at most %d specs\n", MAX_SPECS);
                return -1;
            }
            bad = !*v;
            o->specs[o->nspecs++] = v;
            break;
        case 'n':
            bad = util_parse_size(v, &o->count) || o->count == 0;
            o->count_set = 1;
            break;
        case 'r':
            o->reps = (int)strtol(v, &e, 10);
            bad = *e || o->reps < 1 || o->reps > 100000;
            break;
        case 'f': o->file = v; break;
        case 'k':
            errno = 0;
            o->skip = (size_t)strtoull(v, &e, 10);
            bad = *e || errno || e == v || *v == '-';
            break;
        case 's':
            errno = 0;
            o->seed = strtoull(v, &e, 0);
            bad = *e || errno || e == v;
            break;
        case 'J': o->json = v; break;
        case ':':
            fprintf(stderr, "quant_bench: -%c needs a value (see --help)\n", optopt);
            return -1;
        default:
            fprintf(stderr, "quant_bench: unknown option %s (see --help)\n", argv[optind - 1]);
            return -1;
        }
        if (bad) {
            fprintf(stderr, "quant_bench: bad value '%s' for -%c (see --help)\n", v, c);
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "quant_bench: unexpected argument '%s' (see --help)\n", argv[optind]);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------- */

/* Mean over full buckets of ||q - v||^2 / ||v||^2 (buckets with ||v|| = 0 left out); NAN if none. */
static double norm_var(const float *v, const float *q, size_t n)
{
    double sum = 0;
    size_t nb = 0;
    for (size_t b = 0; b + NV_BUCKET <= n; b += NV_BUCKET) {
        double e = 0, s = 0;
        for (size_t i = b; i < b + NV_BUCKET; i++) {
            double d = (double)q[i] - (double)v[i];
            e += d * d;
            s += (double)v[i] * (double)v[i];
        }
        if (s > 0) {
            sum += e / s;
            nb++;
        }
    }
    return nb ? sum / (double)nb : NAN;
}

static void bench_one(const char *spec, const float *v, size_t n, int reps, row_t *r)
{
    memset(r, 0, sizeof(*r));
    snprintf(r->spec, sizeof(r->spec), "%s", spec);
    snprintf(r->conv, sizeof(r->conv), "-");
    tempo_compressor_kind_t kind;
    tempo_compressor_t qc;
    tempo_status_t st = tempo_compressor_create(spec, &qc);
    if (st != TEMPO_OK) {
        die(st, spec, "create");
    }
    snprintf(r->canon, sizeof(r->canon), "%s", tempo_compressor_spec(qc));
    if (find_kind(spec, &kind)) {
        convention(r->canon, &kind, r->conv, sizeof(r->conv));
    }
    size_t cap = tempo_compressor_bound(qc, n), len = 0;
    unsigned char *enc = xmalloc(cap);
    float *dec = xmalloc(n * sizeof(float));

    /* Warm-up: the first encode (fits adaptive levels at call 0). */
    double t0 = util_now_s();
    st = tempo_compressor_encode(qc, 1, v, n, enc, cap, &len);
    r->first_ms = (util_now_s() - t0) * 1e3;
    if (st == TEMPO_ERR_UNSUPPORTED) {
        r->unsupported = 1;
        snprintf(r->note, sizeof(r->note), "unsupported: %s", tempo_last_error(NULL));
        goto out;
    }
    if (st != TEMPO_OK) {
        die(st, spec, "encode");
    }

    double *te = xmalloc(sizeof(double) * (size_t)reps), *td = xmalloc(sizeof(double) * (size_t)reps);
    for (int k = 0; k < reps; k++) {
        t0 = util_now_s();
        st = tempo_compressor_encode(qc, 1, v, n, enc, cap, &len);
        te[k] = util_now_s() - t0;
        if (st != TEMPO_OK) {
            die(st, spec, "encode");
        }
    }
    for (int k = 0; k < reps; k++) {
        t0 = util_now_s();
        st = tempo_compressor_decode(qc, 1, enc, len, n, dec);
        td[k] = util_now_s() - t0;
        if (st != TEMPO_OK) {
            die(st, spec, "decode");
        }
    }
    double bytes = (double)n * 4;
    r->enc_gbps = bytes / median(te, reps) * 1e-9;
    r->dec_gbps = bytes / median(td, reps) * 1e-9;
    r->bits = 8.0 * (double)len / (double)n;
    free(te);
    free(td);

    /* Adaptive levels (key 1): the positive ones. */
    if (strstr(kind.params, "refit=")) {
        float lv[2 * MAX_LEVELS];
        size_t nl = 0;
        if (tempo_compressor_levels(qc, 1, lv, 2 * MAX_LEVELS, &nl) == TEMPO_OK) {
            for (size_t i = 0; i < nl && i < 2 * MAX_LEVELS; i++) {
                if (lv[i] > 0 && r->nlevels < MAX_LEVELS) {
                    r->levels[r->nlevels++] = lv[i];
                }
            }
        }
    }

    /* Normalized variance: the first encode of a fresh compressor (no residual yet). */
    tempo_compressor_t fresh;
    if ((st = tempo_compressor_create(spec, &fresh)) != TEMPO_OK) {
        die(st, spec, "create");
    }
    if ((st = tempo_compressor_encode(fresh, 1, v, n, enc, cap, &len)) != TEMPO_OK) {
        die(st, spec, "encode");
    }
    if ((st = tempo_compressor_decode(fresh, 1, enc, len, n, dec)) != TEMPO_OK) {
        die(st, spec, "decode");
    }
    r->nvar = norm_var(v, dec, n);
    tempo_compressor_destroy(fresh);
out:
    free(enc);
    free(dec);
    tempo_compressor_destroy(qc);
}

static int write_json(const char *path, const row_t *rows, int n)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "quant_bench: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    fprintf(f, "[\n");
    for (int i = 0; i < n; i++) {
        const row_t *r = &rows[i];
        fprintf(f, "  {\"spec\": ");
        perf_json_str(f, r->spec);
        fprintf(f, ", \"canonical\": ");
        perf_json_str(f, r->canon);
        if (r->unsupported) {
            fprintf(f, ", \"unsupported\": ");
            perf_json_str(f, r->note);
        } else {
            perf_json_field(f, "bits_per_coord", r->bits);
            perf_json_field(f, "encode_gbps", r->enc_gbps);
            perf_json_field(f, "decode_gbps", r->dec_gbps);
            perf_json_field(f, "first_ms", r->first_ms);
            perf_json_field(f, "norm_var", r->nvar);
            fprintf(f, ", \"convention\": ");
            perf_json_str(f, r->conv);
            if (r->nlevels) {
                fprintf(f, ", \"levels\": [");
                for (size_t k = 0; k < r->nlevels; k++) {
                    fprintf(f, "%s%.6g", k ? ", " : "", (double)r->levels[k]);
                }
                fprintf(f, "]");
            }
        }
        fprintf(f, "}%s\n", i + 1 < n ? "," : "");
    }
    fprintf(f, "]\n");
    if (fclose(f) != 0) {
        fprintf(stderr, "quant_bench: cannot write %s: %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    opts_t o;
    if (parse_args(argc, argv, &o) != 0) {
        return 2;
    }
    if (o.nspecs == 0) {
        for (size_t i = 0; i < N_DEFAULT; i++) {
            o.specs[o.nspecs++] = with_bucket(default_specs[i]);
        }
    }
    for (int i = 0; i < o.nspecs; i++) { /* bad specs fail before any work */
        tempo_compressor_t qc;
        tempo_status_t st = tempo_compressor_create(o.specs[i], &qc);
        if (st != TEMPO_OK) {
            die(st, o.specs[i], "create");
        }
        tempo_compressor_destroy(qc);
    }
    size_t n = o.count;
    float *v;
    if (o.file) {
        v = read_file(o.file, o.skip, o.count_set ? o.count : 0, &n);
    } else {
        v = xmalloc(n * sizeof(float));
        gaussian(v, n, o.seed);
    }

    printf("# quant_bench: %zu float32 coordinates (%.1f MiB), single thread\n", n,
           (double)n * 4 / (1 << 20));
    if (o.file) {
        printf("# data: %s (raw little-endian float32 after %zu header bytes)\n", o.file, o.skip);
    } else {
        printf("# data: i.i.d. N(0,1) (Gaussian buckets), seed %llu\n", (unsigned long long)o.seed);
    }
    printf("# reps: %d timed encodes and decodes per spec (medians), after one warm-up encode\n",
           o.reps);
    printf("# nvar: mean over %zu full buckets of %d of ||Q(b)-b||^2/||b||^2, first encode\n",
           n / NV_BUCKET, NV_BUCKET);

    row_t *rows = xmalloc(sizeof(row_t) * (size_t)o.nspecs);
    int w = 4;
    for (int i = 0; i < o.nspecs; i++) {
        int l = (int)strlen(o.specs[i]);
        w = l > w ? l : w;
    }
    printf("#\n# %-*s %10s %9s %9s %10s %12s  %s\n", w, "spec", "bits/coord", "enc GB/s",
           "dec GB/s", "first ms", "nvar", "conv");
    fflush(stdout);
    for (int i = 0; i < o.nspecs; i++) {
        row_t *r = &rows[i];
        bench_one(o.specs[i], v, n, o.reps, r);
        if (r->unsupported) {
            printf("  %-*s %s\n", w, r->spec, r->note);
        } else {
            printf("  %-*s %10.4f %9.3f %9.3f %10.2f %12.5g  %s\n", w, r->spec, r->bits,
                   r->enc_gbps, r->dec_gbps, r->first_ms, r->nvar, r->conv);
        }
        fflush(stdout);
    }
    printf("#\n# canonical specs and adaptive levels (key 1, positive levels):\n");
    for (int i = 0; i < o.nspecs; i++) {
        printf("# %-*s = %s\n", w, rows[i].spec, rows[i].canon);
        if (rows[i].nlevels) {
            printf("#   levels:");
            for (size_t k = 0; k < rows[i].nlevels; k++) {
                printf(" %.5g", (double)rows[i].levels[k]);
            }
            printf("\n");
        }
    }
    int rc = 0;
    if (o.json && write_json(o.json, rows, o.nspecs) != 0) {
        rc = 2;
    }
    free(rows);
    free(v);
    return rc;
}
