/*
 * quant.c — the compressor table, spec parsing, compressor objects and their per-tensor state,
 * and the local encode/decode API.
 *
 * A compressor object holds, per key (the caller's stable tensor id), the call counter that drives
 * the refit schedule, the level table in use, the error-feedback residual and PowerSGD's warm
 * start. Keys live in an array sorted by key. Collectives (qcoll.c) and the local API share this
 * state; everything that must be equal on every rank (levels, shared seeds) is derived from data
 * that is equal on every rank (gathered statistics, the key, the call counter, the user seed).
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/cfg.h"
#include "quant/qmath.h"
#include "quant/quant.h"

/* Kind functions (one file per family). */
size_t tempo__qcast_bound(const tempo__qparams_t *p, size_t count);
size_t tempo__qcast_encode(const tempo__qctx_t *c, const float *in, size_t count, void *out);
tempo_status_t tempo__qcast_decode(const tempo__qctx_t *c, const void *in, size_t len, size_t count,
                                   float *out, int accumulate);
size_t tempo__qlev_bound(const tempo__qparams_t *p, size_t count);
size_t tempo__qlev_encode(const tempo__qctx_t *c, const float *in, size_t count, void *out);
tempo_status_t tempo__qlev_decode(const tempo__qctx_t *c, const void *in, size_t len, size_t count,
                                  float *out, int accumulate);
#define QKIND_DECL(k)                                                                              \
    void tempo__q##k##_defaults(tempo__qparams_t *p);                                              \
    size_t tempo__q##k##_bound(const tempo__qparams_t *p, size_t count);                           \
    size_t tempo__q##k##_encode(const tempo__qctx_t *c, const float *in, size_t count, void *out); \
    tempo_status_t tempo__q##k##_decode(const tempo__qctx_t *c, const void *in, size_t len,        \
                                        size_t count, float *out, int accumulate);
QKIND_DECL(sign)
QKIND_DECL(topk)
QKIND_DECL(randk)

/* ---------------------------------------------------------------------------------------------- */
/* The table                                                                                      */
/* ---------------------------------------------------------------------------------------------- */

static void d_none(tempo__qparams_t *p)
{
    (void)p;
}

static void d_linf(tempo__qparams_t *p)
{
    p->norm = TEMPO__QNORM_LINF;
}

static void d_terngrad(tempo__qparams_t *p)
{
    p->bits = 2;
    p->zero = 1;
    d_linf(p);
}

static void d_normal(tempo__qparams_t *p)
{
    p->model = TEMPO__QMODEL_NORMAL;
}

static void d_powersgd(tempo__qparams_t *p)
{
    p->ef = 1;
}

static size_t psgd_bound(const tempo__qparams_t *p, size_t count)
{
    size_t rows, cols;
    tempo__psgd_shape(count, &rows, &cols);
    return (rows + cols) * (size_t)p->rank * 4;
}

#define LEVEL_PARAMS (TEMPO__QP_BITS | TEMPO__QP_BUCKET | TEMPO__QP_ZERO | TEMPO__QP_ENTROPY | TEMPO__QP_EF)
#define ADAPTIVE_PARAMS (LEVEL_PARAMS | TEMPO__QP_MODEL | TEMPO__QP_REFIT | TEMPO__QP_NORM)

const tempo__qkind_t tempo__qkinds[] = {
    {"none", "no compression", 0, TEMPO__QAGG_SUM, 1, 0, d_none, tempo__qcast_bound,
     tempo__qcast_encode, tempo__qcast_decode},
    {"fp16", "cast to IEEE half (round to nearest even)", 0, TEMPO__QAGG_SUM, 0, 0, d_none,
     tempo__qcast_bound, tempo__qcast_encode, tempo__qcast_decode},
    {"bf16", "cast to bfloat16 (round to nearest even)", 0, TEMPO__QAGG_SUM, 0, 0, d_none,
     tempo__qcast_bound, tempo__qcast_encode, tempo__qcast_decode},
    {"qsgd", "QSGD: L2 norm per bucket, evenly spaced levels, stochastic rounding", LEVEL_PARAMS,
     TEMPO__QAGG_TWO_PHASE, 1, 0, d_none, tempo__qlev_bound, tempo__qlev_encode,
     tempo__qlev_decode},
    {"qsgdinf", "QSGDinf: L-inf norm per bucket, evenly spaced levels", LEVEL_PARAMS,
     TEMPO__QAGG_TWO_PHASE, 1, 0, d_linf, tempo__qlev_bound, tempo__qlev_encode,
     tempo__qlev_decode},
    {"nuqsgd", "NUQSGD: L2 norm per bucket, levels ±mul^k", LEVEL_PARAMS | TEMPO__QP_MUL,
     TEMPO__QAGG_TWO_PHASE, 1, 0, d_none, tempo__qlev_bound, tempo__qlev_encode,
     tempo__qlev_decode},
    {"terngrad", "TernGrad: L-inf norm per bucket, levels {-1, 0, 1}; clip=1 clips at 2.5 std",
     TEMPO__QP_BUCKET | TEMPO__QP_CLIP | TEMPO__QP_ENTROPY | TEMPO__QP_EF, TEMPO__QAGG_TWO_PHASE, 1,
     0, d_terngrad, tempo__qlev_bound, tempo__qlev_encode, tempo__qlev_decode},
    {"alq", "ALQ: adaptive levels by coordinate descent, mixture model of the largest buckets",
     ADAPTIVE_PARAMS, TEMPO__QAGG_TWO_PHASE, 1, 1, d_none, tempo__qlev_bound,
     tempo__qlev_encode, tempo__qlev_decode},
    {"alq-n", "ALQ-N: adaptive levels by coordinate descent, truncated normal model",
     ADAPTIVE_PARAMS, TEMPO__QAGG_TWO_PHASE, 1, 1, d_normal, tempo__qlev_bound,
     tempo__qlev_encode, tempo__qlev_decode},
    {"amq", "AMQ: adaptive levels ±p^k, p by gradient descent, mixture model", ADAPTIVE_PARAMS,
     TEMPO__QAGG_TWO_PHASE, 1, 1, d_none, tempo__qlev_bound, tempo__qlev_encode,
     tempo__qlev_decode},
    {"amq-n", "AMQ-N: adaptive levels ±p^k, truncated normal model", ADAPTIVE_PARAMS,
     TEMPO__QAGG_TWO_PHASE, 1, 1, d_normal, tempo__qlev_bound, tempo__qlev_encode,
     tempo__qlev_decode},
    {"sign", "scaled sign per bucket (EF-signSGD)", TEMPO__QP_BUCKET | TEMPO__QP_EF,
     TEMPO__QAGG_GATHER, 0, 0, tempo__qsign_defaults, tempo__qsign_bound, tempo__qsign_encode,
     tempo__qsign_decode},
    {"topk", "the largest ratio of coordinates with their indices", TEMPO__QP_RATIO | TEMPO__QP_EF,
     TEMPO__QAGG_GATHER, 0, 0, tempo__qtopk_defaults, tempo__qtopk_bound, tempo__qtopk_encode,
     tempo__qtopk_decode},
    {"randk", "ratio of coordinates chosen by a seed shared by the ranks",
     TEMPO__QP_RATIO | TEMPO__QP_EF, TEMPO__QAGG_SUM, 0, 0, tempo__qrandk_defaults,
     tempo__qrandk_bound, tempo__qrandk_encode, tempo__qrandk_decode},
    {"powersgd", "PowerSGD: rank-r approximation P Q^T with warm start and error feedback",
     TEMPO__QP_RANK | TEMPO__QP_EF, TEMPO__QAGG_LOWRANK, 0, 0, d_powersgd, psgd_bound, NULL, NULL},
};
const size_t tempo__nqkinds = TEMPO_ARRAY_SIZE(tempo__qkinds);

/* ---------------------------------------------------------------------------------------------- */
/* Specs                                                                                          */
/* ---------------------------------------------------------------------------------------------- */

typedef struct qparam {
    const char *name;
    unsigned bit; /* 0: every kind */
    const char *doc;
} qparam_t;

static const qparam_t qparams[] = {
    {"bits", TEMPO__QP_BITS, "bits per level index, 1..8 (2..8 with zero=1)"},
    {"bucket", TEMPO__QP_BUCKET, "coordinates per normalized bucket"},
    {"zero", TEMPO__QP_ZERO, "0: 2^bits levels without zero (authors' code); 1: zero level + sign"},
    {"norm", TEMPO__QP_NORM, "l2 (the paper) | linf: what each bucket is divided by"},
    {"mul", TEMPO__QP_MUL, "level multiplier p in (0, 1)"},
    {"clip", TEMPO__QP_CLIP, "1: clip at 2.5 standard deviations"},
    {"dist", TEMPO__QP_MODEL, "mixture model: largest-norm buckets kept"},
    {"refit", TEMPO__QP_REFIT, "calls at which levels are fitted; the last repeats as a period"},
    {"entropy", TEMPO__QP_ENTROPY, "none | rans | zstd"},
    {"ef", TEMPO__QP_EF, "1: error feedback"},
    {"ratio", TEMPO__QP_RATIO, "fraction of coordinates sent, (0, 1]"},
    {"rank", TEMPO__QP_RANK, "rank of the approximation, 1..64"},
    {"min", 0, "smallest request in bytes (per rank input) that is compressed"},
    {"seed", 0, "seed of the random choices"},
};

static void base_defaults(tempo__qparams_t *p, int kind)
{
    memset(p, 0, sizeof(*p));
    p->kind = kind;
    p->bits = 3;
    p->bucket = 8192;
    p->mul = 0.5;
    p->model = TEMPO__QMODEL_MIXTURE;
    p->dist_num = 20;
    p->ratio = 0.01;
    p->rank = 4;
    p->min_bytes = 32768;
    p->refit[0] = 0;
    p->refit[1] = 100;
    p->refit[2] = 2000;
    p->nrefit = 3;
    p->refit_every = 10000;
    tempo__qkinds[kind].defaults(p);
}

static const char *ent_name(tempo__qent_t e)
{
    return e == TEMPO__QENT_RANS ? "rans" : e == TEMPO__QENT_ZSTD ? "zstd" : "none";
}

/* The parameters k accepts, with their defaults: its canonical spec without the name. */
static void kind_params(const tempo__qkind_t *k, char *buf, size_t len)
{
    tempo__qparams_t p;
    char spec[512];
    base_defaults(&p, (int)(k - tempo__qkinds));
    tempo__qspec_format(&p, spec, sizeof(spec));
    const char *colon = strchr(spec, ':');
    snprintf(buf, len, "%s", colon ? colon + 1 : "");
}

static tempo_status_t bad_value(const char *spec, const char *key, const char *val, const char *why)
{
    return tempo__err(TEMPO_ERR_INVALID, "compressor spec '%s': %s=%s: %s", spec, key, val, why);
}

static int parse_long(const char *v, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        return -1;
    }
    *out = x;
    return 0;
}

static int parse_double(const char *v, double *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x)) {
        return -1;
    }
    *out = x;
    return 0;
}

static tempo_status_t apply(const char *spec, tempo__qparams_t *p, const char *key, const char *v)
{
    const tempo__qkind_t *k = &tempo__qkinds[p->kind];
    const qparam_t *q = NULL;
    for (size_t i = 0; i < TEMPO_ARRAY_SIZE(qparams); i++) {
        if (!strcmp(qparams[i].name, key)) {
            q = &qparams[i];
        }
    }
    if (!q || (q->bit && !(k->params & q->bit))) {
        char valid[512];
        kind_params(k, valid, sizeof(valid));
        return tempo__err(TEMPO_ERR_INVALID,
                          "compressor spec '%s': %s does not take '%s' (valid parameters with "
                          "their defaults: %s)",
                          spec, k->name, key, valid[0] ? valid : "none");
    }
    long x;
    double f;
    if (!strcmp(key, "bits")) {
        if (parse_long(v, 1, 8, &x)) {
            return bad_value(spec, key, v, "expected an integer 1..8");
        }
        p->bits = (int)x;
    } else if (!strcmp(key, "bucket")) {
        if (parse_long(v, 1, 1L << 30, &x)) {
            return bad_value(spec, key, v, "expected an integer 1..2^30");
        }
        p->bucket = (size_t)x;
    } else if (!strcmp(key, "zero") || !strcmp(key, "clip") || !strcmp(key, "ef")) {
        if (parse_long(v, 0, 1, &x)) {
            return bad_value(spec, key, v, "expected 0 or 1");
        }
        *(!strcmp(key, "zero") ? &p->zero : !strcmp(key, "clip") ? &p->clip : &p->ef) = (int)x;
    } else if (!strcmp(key, "mul")) {
        if (parse_double(v, &f) || !(f > 0 && f < 1)) {
            return bad_value(spec, key, v, "expected a number in (0, 1)");
        }
        p->mul = f;
    } else if (!strcmp(key, "ratio")) {
        if (parse_double(v, &f) || !(f > 0 && f <= 1)) {
            return bad_value(spec, key, v, "expected a number in (0, 1]");
        }
        p->ratio = f;
    } else if (!strcmp(key, "dist")) {
        if (parse_long(v, 1, 100000, &x)) {
            return bad_value(spec, key, v, "expected an integer 1..100000");
        }
        p->dist_num = (int)x;
    } else if (!strcmp(key, "rank")) {
        if (parse_long(v, 1, 64, &x)) {
            return bad_value(spec, key, v, "expected an integer 1..64");
        }
        p->rank = (int)x;
    } else if (!strcmp(key, "min")) {
        if (parse_long(v, 0, LONG_MAX, &x)) {
            return bad_value(spec, key, v, "expected a byte count >= 0");
        }
        p->min_bytes = (size_t)x;
    } else if (!strcmp(key, "seed")) {
        char *end;
        errno = 0;
        /* strtoull would take "-1" as 2^64 - 1, and skip leading blanks */
        unsigned long long s = strtoull(v, &end, 0);
        if (errno || end == v || *end || *v < '0' || *v > '9') {
            return bad_value(spec, key, v, "expected an unsigned integer");
        }
        p->seed = s;
    } else if (!strcmp(key, "norm")) {
        if (strcmp(v, "l2") && strcmp(v, "linf")) {
            return bad_value(spec, key, v, "expected l2 or linf");
        }
        p->norm = !strcmp(v, "l2") ? TEMPO__QNORM_L2 : TEMPO__QNORM_LINF;
    } else if (!strcmp(key, "entropy")) {
        if (!strcmp(v, "none")) {
            p->entropy = TEMPO__QENT_NONE;
        } else if (!strcmp(v, "rans")) {
            p->entropy = TEMPO__QENT_RANS;
        } else if (!strcmp(v, "zstd")) {
#if TEMPO_HAVE_ZSTD
            p->entropy = TEMPO__QENT_ZSTD;
#else
            return tempo__err(TEMPO_ERR_UNSUPPORTED,
                              "compressor spec '%s': entropy=zstd needs a build with zstd", spec);
#endif
        } else {
            return bad_value(spec, key, v, "expected none, rans or zstd");
        }
    } else { /* refit: a;b;c list (';' or '/' since ',' separates parameters) */
        int list[TEMPO__QMAX_REFIT + 1], n = 0;
        char tmp[512]; /* as long as a whole spec: nothing is cut off */
        snprintf(tmp, sizeof(tmp), "%s", v);
        for (char *save = NULL, *t = strtok_r(tmp, ";/", &save); t;
             t = strtok_r(NULL, ";/", &save)) {
            if (n > TEMPO__QMAX_REFIT || parse_long(t, 0, INT32_MAX, &x) ||
                (n && x <= list[n - 1])) {
                return bad_value(spec, key, v,
                                 "expected up to 17 increasing call numbers separated by ';' "
                                 "(the last repeats as a period, e.g. 0;100;2000;10000)");
            }
            list[n++] = (int)x;
        }
        if (n == 0) {
            return bad_value(spec, key, v, "expected at least one call number");
        }
        p->nrefit = n > 1 ? n - 1 : 1;
        memcpy(p->refit, list, sizeof(int) * (size_t)p->nrefit);
        p->refit_every = n > 1 ? list[n - 1] : 0;
    }
    return TEMPO_OK;
}

tempo_status_t tempo__qspec_parse(const char *spec, tempo__qparams_t *p_out)
{
    if (!spec) {
        return tempo__err(TEMPO_ERR_INVALID, "compressor spec is NULL");
    }
    char buf[512];
    if (strlen(spec) >= sizeof(buf)) {
        return tempo__err(TEMPO_ERR_INVALID, "compressor spec '%.40s...' is too long", spec);
    }
    snprintf(buf, sizeof(buf), "%s", spec);
    char *colon = strchr(buf, ':');
    if (colon) {
        *colon = 0;
    }
    int kind = -1;
    for (size_t i = 0; i < tempo__nqkinds; i++) {
        if (!strcmp(buf, tempo__qkinds[i].name)) {
            kind = (int)i;
        }
    }
    if (kind < 0) {
        char names[512] = "";
        for (size_t i = 0; i < tempo__nqkinds; i++) {
            snprintf(names + strlen(names), sizeof(names) - strlen(names), "%s%s", i ? ", " : "",
                     tempo__qkinds[i].name);
        }
        return tempo__err(TEMPO_ERR_INVALID,
                          "unknown compressor '%s' in spec '%s' (valid: %s; parameters follow a "
                          "colon, e.g. alq:bits=3,bucket=8192)",
                          buf, spec, names);
    }
    tempo__qparams_t p;
    base_defaults(&p, kind);
    if (colon && colon[1]) {
        /* The keys given so far: a key given twice is refused, not the last one taken ("bits=3,
         * bits=4" is a typo or a merge of two specs, and either reading would be a guess). */
        const char *seen[TEMPO_ARRAY_SIZE(qparams)];
        size_t nseen = 0;
        for (char *save = NULL, *t = strtok_r(colon + 1, ",", &save); t;
             t = strtok_r(NULL, ",", &save)) {
            char *eq = strchr(t, '=');
            if (!eq || eq == t || !eq[1]) {
                return tempo__err(TEMPO_ERR_INVALID,
                                  "compressor spec '%s': '%s' is not key=value", spec, t);
            }
            *eq = 0;
            for (size_t i = 0; i < nseen; i++) {
                if (!strcmp(seen[i], t)) {
                    return tempo__err(TEMPO_ERR_INVALID,
                                      "compressor spec '%s': %s is given twice (each parameter "
                                      "at most once)",
                                      spec, t);
                }
            }
            TEMPO_CHECK(apply(spec, &p, t, eq + 1));
            seen[nseen++] = t; /* apply() accepts only the keys of qparams, each once here */
        }
    }
    if (p.zero && p.bits < 2) {
        return tempo__err(TEMPO_ERR_INVALID,
                          "compressor spec '%s': zero=1 needs bits >= 2 (a sign bit and a level)",
                          spec);
    }
    *p_out = p;
    return TEMPO_OK;
}

tempo_status_t tempo__qspec_check(const char *text)
{
    tempo__qparams_t p;
    return text[0] == '\0' || strcmp(text, "none") == 0 ? TEMPO_OK : tempo__qspec_parse(text, &p);
}

void tempo__qspec_format(const tempo__qparams_t *p, char *buf, size_t len)
{
    const tempo__qkind_t *k = &tempo__qkinds[p->kind];
    size_t o = (size_t)snprintf(buf, len, "%s", k->name);
#define ADD(...)                                                     \
    do {                                                             \
        if (o < len) {                                               \
            o += (size_t)snprintf(buf + o, len - o, __VA_ARGS__);    \
        }                                                            \
    } while (0)
    char sep = ':';
    if (k->params & TEMPO__QP_BITS) {
        ADD("%cbits=%d", sep, p->bits);
        sep = ',';
    }
    if (k->params & TEMPO__QP_BUCKET) {
        ADD("%cbucket=%zu", sep, p->bucket);
        sep = ',';
    }
    if (k->params & TEMPO__QP_ZERO) {
        ADD("%czero=%d", sep, p->zero);
        sep = ',';
    }
    if (k->params & TEMPO__QP_NORM) {
        ADD("%cnorm=%s", sep, p->norm == TEMPO__QNORM_LINF ? "linf" : "l2");
        sep = ',';
    }
    if (k->params & TEMPO__QP_MUL) {
        ADD("%cmul=%g", sep, p->mul);
        sep = ',';
    }
    if (k->params & TEMPO__QP_CLIP) {
        ADD("%cclip=%d", sep, p->clip);
        sep = ',';
    }
    if (k->params & TEMPO__QP_MODEL) {
        ADD("%cdist=%d", sep, p->dist_num);
        sep = ',';
    }
    if (k->params & TEMPO__QP_REFIT) {
        ADD("%crefit=", sep);
        sep = ',';
        for (int i = 0; i < p->nrefit; i++) {
            ADD("%s%d", i ? ";" : "", p->refit[i]);
        }
        if (p->refit_every > 0) { /* (0: a single call number, refit=N, fits once) */
            ADD(";%d", p->refit_every);
        }
    }
    if (k->params & TEMPO__QP_ENTROPY) {
        ADD("%centropy=%s", sep, ent_name(p->entropy));
        sep = ',';
    }
    if (k->params & TEMPO__QP_EF) {
        ADD("%cef=%d", sep, p->ef);
        sep = ',';
    }
    if (k->params & TEMPO__QP_RATIO) {
        ADD("%cratio=%g", sep, p->ratio);
        sep = ',';
    }
    if (k->params & TEMPO__QP_RANK) {
        ADD("%crank=%d", sep, p->rank);
        sep = ',';
    }
    ADD("%cmin=%zu,seed=%llu", sep, p->min_bytes, (unsigned long long)p->seed);
#undef ADD
}

/* ---------------------------------------------------------------------------------------------- */
/* Random numbers and seeds                                                                       */
/* ---------------------------------------------------------------------------------------------- */

double tempo__rng_normal(tempo__rng_t *r)
{
    double u1 = tempo__rng_double(r), u2 = tempo__rng_double(r);
    if (u1 < 1e-300) {
        u1 = 1e-300;
    }
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

uint64_t tempo__qseed(const tempo__qparams_t *p, uint64_t key, uint64_t call, int stage, int rank)
{
    uint64_t x = p->seed ^ 0x7e3a9c1b5d2f4e60ull;
    uint64_t h = tempo__splitmix64(&x);
    x = h ^ key;
    h = tempo__splitmix64(&x);
    x = h ^ call;
    h = tempo__splitmix64(&x);
    x = h ^ ((uint64_t)(uint32_t)stage << 32 | (uint32_t)rank);
    return tempo__splitmix64(&x);
}

/* ---------------------------------------------------------------------------------------------- */
/* Per-key state                                                                                  */
/* ---------------------------------------------------------------------------------------------- */

/* Index of key in qc->keys, or where it would be inserted. */
static size_t key_pos(const struct tempo_compressor *qc, uint64_t key)
{
    size_t lo = 0, hi = qc->nkeys;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (qc->keys[mid]->key < key) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

static tempo__qkey_t *key_find(const struct tempo_compressor *qc, uint64_t key)
{
    size_t i = key_pos(qc, key);
    return i < qc->nkeys && qc->keys[i]->key == key ? qc->keys[i] : NULL;
}

tempo_status_t tempo__qkey_get(struct tempo_compressor *qc, uint64_t key, size_t count,
                               tempo__qkey_t **k_p)
{
    size_t lo = key_pos(qc, key);
    if (lo < qc->nkeys && qc->keys[lo]->key == key) {
        tempo__qkey_t *k = qc->keys[lo];
        if (k->residual && k->rcount != count) {
            return tempo__err(TEMPO_ERR_INVALID,
                              "compressor %s: tensor key %llu was %zu coordinates and is now %zu; "
                              "error feedback needs each key to stay with one tensor (give every "
                              "tensor its own TEMPO_ATTR_TAG)",
                              qc->kind->name, (unsigned long long)key, k->rcount, count);
        }
        *k_p = k;
        return TEMPO_OK;
    }
    if (qc->nkeys == qc->kcap) {
        size_t cap = qc->kcap ? 2 * qc->kcap : 16;
        tempo__qkey_t **a = tempo__realloc(qc->keys, cap * sizeof(*a), "compressor keys");
        if (!a) {
            return TEMPO_ERR_NOMEM;
        }
        qc->keys = a;
        qc->kcap = cap;
    }
    tempo__qkey_t *k = tempo__calloc(1, sizeof(*k), "compressor key");
    if (!k) {
        return TEMPO_ERR_NOMEM;
    }
    k->key = key;
    if (qc->p.ef) {
        k->residual = tempo__calloc(count ? count : 1, sizeof(float), "error-feedback residual");
        if (!k->residual) {
            tempo__free(k);
            return TEMPO_ERR_NOMEM;
        }
        k->rcount = count;
    }
    if (!qc->kind->adaptive) {
        memcpy(k->levels, qc->fixed, sizeof(float) * (size_t)qc->nfixed);
        k->nlevels = qc->nfixed;
    }
    memmove(&qc->keys[lo + 1], &qc->keys[lo], (qc->nkeys - lo) * sizeof(*qc->keys));
    qc->keys[lo] = k;
    qc->nkeys++;
    *k_p = k;
    return TEMPO_OK;
}

int tempo__qrefit_due(const tempo__qparams_t *p, uint64_t calls)
{
    for (int i = 0; i < p->nrefit; i++) {
        if ((uint64_t)p->refit[i] == calls) {
            return 1;
        }
    }
    return p->refit_every > 0 && calls > 0 && calls % (uint64_t)p->refit_every == 0;
}

void tempo__qctx_init(struct tempo_compressor *qc, tempo__qkey_t *k, tempo__rng_t *rng,
                      tempo__qctx_t *ctx)
{
    ctx->p = &qc->p;
    ctx->rng = rng;
    ctx->shared_seed = tempo__qseed(&qc->p, k->key, k->calls, 0, -1);
    ctx->levels = k->levels;
    ctx->nlevels = k->nlevels;
}

/* ---------------------------------------------------------------------------------------------- */
/* Fitting statistics                                                                             */
/* ---------------------------------------------------------------------------------------------- */

/* Layout (doubles): coords, sum of r, sum of (d-1) var, sum of (d-1), then dist_num triples
 * (norm, mean, std) of the largest-norm buckets, unused ones with norm -1. */
size_t tempo__qstats_bytes(const tempo__qparams_t *p)
{
    return (4 + 3 * (size_t)p->dist_num) * sizeof(double);
}

void tempo__qstats_compute(const tempo__qparams_t *p, const float *x, size_t count, void *out)
{
    tempo__qstats_init(p, out);
    size_t d = p->bucket;
    int linf = p->norm == TEMPO__QNORM_LINF;
    for (size_t b0 = 0; b0 < count; b0 += d) {
        size_t n = TEMPO_MIN(d, count - b0);
        double st[3];
        tempo__qstats_bucket(x + b0, n, linf, st);
        tempo__qstats_add(p, out, n, st);
    }
}

void tempo__qstats_init(const tempo__qparams_t *p, void *out)
{
    double *o = out;
    memset(o, 0, 4 * sizeof(double));
    double *top = o + 4; /* kept sorted by norm, descending */
    for (int i = 0; i < p->dist_num; i++) {
        top[3 * i] = -1;
        top[3 * i + 1] = top[3 * i + 2] = 0;
    }
}

void tempo__qstats_add(const tempo__qparams_t *p, void *out, size_t n, const double *st)
{
    double *o = out, *top = o + 4, norm = st[0], var = st[2];
    int K = p->dist_num;
    if (norm < 0) {
        return; /* skipped */
    }
    o[0] += (double)n;
    o[1] += st[1];
    o[2] += (double)(n - 1) * var;
    o[3] += (double)(n - 1);
    if (norm > top[3 * (K - 1)]) { /* insert (ties: earlier buckets stay first) */
        int j = K - 1;
        while (j > 0 && top[3 * (j - 1)] < norm) {
            memcpy(&top[3 * j], &top[3 * (j - 1)], 3 * sizeof(double));
            j--;
        }
        top[3 * j] = norm;
        top[3 * j + 1] = st[1] / (double)n;
        top[3 * j + 2] = sqrt(var);
    }
}

tempo_status_t tempo__qfit_key(struct tempo_compressor *qc, tempo__qkey_t *k,
                               const void *const *stats, int n)
{
    const tempo__qparams_t *p = &qc->p;
    uint64_t t0 = tempo__now_ns();
    int K = p->dist_num;
    double tot[4] = {0};
    tempo__qbstat_t *b = tempo__calloc((size_t)K * (size_t)n, sizeof(*b), "fit statistics");
    if (!b) {
        return TEMPO_ERR_NOMEM;
    }
    size_t nb = 0;
    for (int r = 0; r < n; r++) {
        const double *s = stats[r];
        for (int i = 0; i < 4; i++) {
            tot[i] += s[i];
        }
        for (int i = 0; i < K; i++) {
            if (s[4 + 3 * i] >= 0) {
                b[nb].norm = s[4 + 3 * i];
                b[nb].mean = s[4 + 3 * i + 1];
                b[nb].std = s[4 + 3 * i + 2];
                nb++;
            }
        }
    }
    double mean = tot[0] > 0 ? tot[1] / tot[0] : 0;
    double pooled = tot[3] > 0 ? tot[2] / tot[3] : 1.0 / (double)p->bucket;
    tempo__qdist_t d = {0};
    double lv[256], var = 0, pm = 0;
    tempo_status_t st = tempo__qdist_build(&d, p->model, b, nb, K, mean, pooled);
    if (st == TEMPO_OK) {
        if (!strncmp(qc->kind->name, "alq", 3)) {
            st = tempo__qfit_alq(&d, p->bits, p->zero, lv, &var);
        } else {
            st = tempo__qfit_amq(&d, p->bits, p->zero, &pm, lv, &var);
        }
    }
    tempo__qdist_free(&d);
    tempo__free(b);
    if (st != TEMPO_OK) {
        return st;
    }
    k->nlevels = tempo__qnlevels(p->bits, p->zero);
    for (int i = 0; i < k->nlevels; i++) {
        k->levels[i] = (float)lv[i];
    }
    k->levels[0] = -1.0f;
    k->levels[k->nlevels - 1] = 1.0f;
    k->fit_var = var * (double)p->bucket;
    k->amq_p = pm;
    qc->st.fits++;
    qc->st.fit_s += (double)(tempo__now_ns() - t0) * 1e-9;
    if (tempo__log_level >= TEMPO_LOG_DEBUG) {
        char l[512] = "";
        for (int i = k->nlevels / 2; i < k->nlevels; i++) {
            snprintf(l + strlen(l), sizeof(l) - strlen(l), " %.5g", k->levels[i]);
        }
        TEMPO_DEBUG(TEMPO_SUB_QUANT,
                    "%s key %llu call %llu: fitted levels +{%s } (model variance %.4g per bucket, "
                    "%zu buckets from %d ranks)",
                    qc->kind->name, (unsigned long long)k->key, (unsigned long long)k->calls, l,
                    k->fit_var, nb, n);
    }
    return TEMPO_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* Objects and the local API                                                                      */
/* ---------------------------------------------------------------------------------------------- */

static const char *qc_unusable(const tempo__op_t *op)
{
    if (op->dtype != TEMPO_FLOAT32) {
        return "only float32 data is compressed";
    }
    if (op->redop != TEMPO_SUM && op->redop != TEMPO_AVG) {
        return "only sum and avg reductions are compressed";
    }
    const struct tempo_compressor *qc = (const struct tempo_compressor *)op->qc;
    if (op->coll != TEMPO__COLL_ALLREDUCE && qc->kind->agg == TEMPO__QAGG_LOWRANK) {
        return "a low-rank compressor compresses all-reduce only, not reduce-scatter";
    }
    return NULL;
}

tempo_status_t tempo_compressor_create(const char *spec, tempo_compressor_t *qc_p)
{
    tempo__errmsg_set("");
    if (!qc_p) {
        return tempo__err(TEMPO_ERR_INVALID, "tempo_compressor_create: qc_p is NULL");
    }
    tempo__qparams_t p;
    TEMPO_CHECK(tempo__qspec_parse(spec, &p));
    struct tempo_compressor *qc = tempo__calloc(1, sizeof(*qc), "compressor");
    if (!qc) {
        return TEMPO_ERR_NOMEM;
    }
    qc->p = p;
    qc->kind = &tempo__qkinds[p.kind];
    qc->hook.start = tempo__qcoll_start;
    qc->hook.unusable = qc_unusable;
    qc->hook.min_bytes = strcmp(qc->kind->name, "none") ? p.min_bytes : SIZE_MAX;
    tempo__qspec_format(&p, qc->spec, sizeof(qc->spec));
    /* Ranks compare this in every compressed message's header (core/world.h, tempo__sig_t.how):
     * the canonical spec names every parameter, defaults included, so equal specs hash equally. */
    uint64_t h = tempo__hash64(qc->spec, strlen(qc->spec), 0);
    qc->hook.id = TEMPO__HOW_COMPRESSED | ((uint32_t)(h ^ (h >> 32)) & ~TEMPO__HOW_COMPRESSED);
    qc->hook.spec = qc->spec;
    const char *n = qc->kind->name;
    if (!strcmp(n, "qsgd") || !strcmp(n, "qsgdinf") || !strcmp(n, "terngrad")) {
        tempo__qlevels_uniform(p.bits, p.zero, qc->fixed);
        qc->nfixed = tempo__qnlevels(p.bits, p.zero);
    } else if (!strcmp(n, "nuqsgd")) {
        tempo__qlevels_exp(p.bits, p.zero, p.mul, qc->fixed);
        qc->nfixed = tempo__qnlevels(p.bits, p.zero);
    }
    *qc_p = qc;
    return TEMPO_OK;
}

tempo_status_t tempo_compressor_destroy(tempo_compressor_t qc)
{
    if (!qc) {
        return TEMPO_OK;
    }
    for (size_t i = 0; i < qc->nkeys; i++) {
        tempo__free(qc->keys[i]->residual);
        tempo__free(qc->keys[i]->psgd_q);
        tempo__free(qc->keys[i]);
    }
    tempo__free(qc->keys);
    tempo__free(qc);
    return TEMPO_OK;
}

const char *tempo_compressor_spec(tempo_compressor_t qc)
{
    return qc ? qc->spec : "";
}

size_t tempo_compressor_bound(tempo_compressor_t qc, size_t count)
{
    return qc ? qc->kind->bound(&qc->p, count) : 0;
}

tempo_status_t tempo_compressor_encode(tempo_compressor_t qc, uint64_t key, const float *in,
                                       size_t count, void *out, size_t cap, size_t *len_p)
{
    tempo__errmsg_set("");
    if (!qc || (count && (!in || !out)) || !len_p) {
        return tempo__err(TEMPO_ERR_INVALID, "tempo_compressor_encode: NULL argument");
    }
    if (!qc->kind->encode) {
        return tempo__err(TEMPO_ERR_UNSUPPORTED,
                          "%s cannot encode locally: its encoding needs the other ranks (use it "
                          "in a collective)",
                          qc->kind->name);
    }
    if (cap < qc->kind->bound(&qc->p, count)) {
        return tempo__err(TEMPO_ERR_INVALID,
                          "tempo_compressor_encode: cap %zu is below the bound %zu for %zu "
                          "coordinates",
                          cap, qc->kind->bound(&qc->p, count), count);
    }
    tempo__qkey_t *k;
    TEMPO_CHECK(tempo__qkey_get(qc, key, count, &k));
    const float *x = in;
    float *comp = NULL;
    if (k->residual) {
        comp = tempo__malloc((count ? count : 1) * sizeof(float), "compensated input");
        if (!comp) {
            return TEMPO_ERR_NOMEM;
        }
        for (size_t i = 0; i < count; i++) {
            comp[i] = in[i] + k->residual[i];
        }
        x = comp;
    }
    tempo_status_t st = TEMPO_OK;
    if (qc->kind->adaptive && (k->nlevels == 0 || tempo__qrefit_due(&qc->p, k->calls))) {
        void *stats = tempo__malloc(tempo__qstats_bytes(&qc->p), "fit statistics");
        if (!stats) {
            tempo__free(comp);
            return TEMPO_ERR_NOMEM;
        }
        tempo__qstats_compute(&qc->p, x, count, stats);
        const void *one[1] = {stats};
        st = tempo__qfit_key(qc, k, one, 1);
        tempo__free(stats);
    }
    if (st == TEMPO_OK) {
        tempo__rng_t rng;
        tempo__rng_seed(&rng, tempo__qseed(&qc->p, key, k->calls, 0, 0), 0);
        tempo__qctx_t ctx;
        tempo__qctx_init(qc, k, &rng, &ctx);
        uint64_t t0 = tempo__now_ns();
        size_t len = qc->kind->encode(&ctx, x, count, out);
        qc->st.encode_s += (double)(tempo__now_ns() - t0) * 1e-9;
        if (k->residual) { /* residual = x - decode(encode(x)) */
            memcpy(k->residual, x, count * sizeof(float));
            float *dec = comp; /* reuse: x is in the residual now */
            st = qc->kind->decode(&ctx, out, len, count, dec, 0);
            for (size_t i = 0; st == TEMPO_OK && i < count; i++) {
                k->residual[i] -= dec[i];
            }
        }
        if (st == TEMPO_OK) {
            k->calls++;
            k->entered = k->calls;
            qc->st.calls++;
            qc->st.coords += count;
            qc->st.bytes_out += len;
            *len_p = len;
        }
    }
    tempo__free(comp);
    return st;
}

tempo_status_t tempo_compressor_decode(tempo_compressor_t qc, uint64_t key, const void *in,
                                       size_t len, size_t count, float *out)
{
    tempo__errmsg_set("");
    if (!qc || (count && !out) || (len && !in)) {
        return tempo__err(TEMPO_ERR_INVALID, "tempo_compressor_decode: NULL argument");
    }
    if (!qc->kind->decode) {
        return tempo__err(TEMPO_ERR_UNSUPPORTED, "%s cannot decode locally", qc->kind->name);
    }
    tempo__qkey_t *k = key_find(qc, key);
    if (!k) {
        return tempo__err(TEMPO_ERR_INVALID,
                          "tempo_compressor_decode: key %llu has not been encoded by this "
                          "compressor",
                          (unsigned long long)key);
    }
    tempo__qctx_t ctx;
    tempo__qctx_init(qc, k, NULL, &ctx);
    ctx.shared_seed = tempo__qseed(&qc->p, key, k->calls - 1, 0, -1); /* the last encode's */
    uint64_t t0 = tempo__now_ns();
    tempo_status_t st = qc->kind->decode(&ctx, in, len, count, out, 0);
    qc->st.decode_s += (double)(tempo__now_ns() - t0) * 1e-9;
    if (st == TEMPO_ERR_REMOTE) {
        st = TEMPO_ERR_INVALID; /* locally, a malformed input is the caller's */
    }
    return st;
}

tempo_status_t tempo_compressor_levels(tempo_compressor_t qc, uint64_t key, float *levels,
                                       size_t cap, size_t *n_p)
{
    if (!qc || !n_p) {
        return tempo__err(TEMPO_ERR_INVALID, "tempo_compressor_levels: NULL argument");
    }
    const float *lv = qc->fixed;
    int n = qc->nfixed;
    if (qc->kind->adaptive) {
        const tempo__qkey_t *k = key_find(qc, key);
        lv = k ? k->levels : NULL;
        n = k ? k->nlevels : 0;
    }
    if (n == 0) {
        return tempo__err(TEMPO_ERR_INVALID,
                          "%s has no level table%s", qc->kind->name,
                          qc->kind->adaptive ? " for this key yet (encode first)" : "");
    }
    if (levels) {
        memcpy(levels, lv, sizeof(float) * TEMPO_MIN(cap, (size_t)n));
    }
    *n_p = (size_t)n;
    return TEMPO_OK;
}

tempo_status_t tempo_compressor_stats(tempo_compressor_t qc, tempo_compressor_stats_t *stats_p)
{
    if (!qc || !stats_p) {
        return tempo__err(TEMPO_ERR_INVALID, "tempo_compressor_stats: NULL argument");
    }
    *stats_p = qc->st;
    return TEMPO_OK;
}

tempo_status_t tempo_compressor_kind(size_t index, tempo_compressor_kind_t *kind_p)
{
    static char params[TEMPO_ARRAY_SIZE(tempo__qkinds)][512];
    if (index >= tempo__nqkinds || !kind_p) {
        return TEMPO_ERR_INVALID;
    }
    const tempo__qkind_t *k = &tempo__qkinds[index];
    if (!params[index][0]) {
        kind_params(k, params[index], sizeof(params[index]));
    }
    kind_p->name = k->name;
    kind_p->doc = k->doc;
    kind_p->params = params[index];
    kind_p->unbiased = k->unbiased;
    kind_p->reduce_scatter = k->agg != TEMPO__QAGG_LOWRANK; /* qc_unusable's rule */
    return TEMPO_OK;
}
