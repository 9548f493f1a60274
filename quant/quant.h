/*
 * quant.h — compressors: one interface, one file per family, level fitting, bit packing, entropy
 * stages, and the compressed collectives (qcoll.c). Not installed.
 *
 * A compressor kind (tempo__qkinds[], quant.c) turns a vector of fp32 coordinates into bytes and
 * back. Kinds are pure functions of their input, their parameters, a level table (level kinds) and
 * a random stream: they hold no state. The state that outlives one call (error-feedback residuals,
 * fitted levels, call counters) belongs to a compressor object (struct tempo_compressor, quant.c),
 * keyed by a stable tensor id, and is identical in shape on every rank.
 *
 * Wire formats are little-endian and self-checking only as far as sizes go: decode() validates the
 * length and every index against the table before it writes, and answers TEMPO_ERR_REMOTE for a
 * malformed message (a peer's bug or a version mix-up), never reading past the input.
 *
 * Families and files:
 *   cast.c      none, fp16, bf16                      (summable: ordinary all-reduce)
 *   levels.c    qsgd, qsgdinf, nuqsgd, terngrad, alq, amq: per-bucket normalization and unbiased
 *               stochastic rounding between adjacent levels of a signed table; b-bit packing
 *   fit.c       ALQ coordinate descent and AMQ multiplier descent under a distribution model of the
 *               normalized coordinates (truncated normal, or a norm-weighted mixture)
 *   sign.c      scaled sign (EF-signSGD)                (all-gather)
 *   sparse.c    top-k (all-gather), random-k with a shared seed (summable)
 *   powersgd.c  the matrix kernels of PowerSGD           (two all-reduces, in qcoll.c)
 *   rans.c      entropy stage for byte-aligned symbol streams (rANS) and the zstd stage
 */
#ifndef TEMPO_QUANT_QUANT_H
#define TEMPO_QUANT_QUANT_H

#include "core/tempo_int.h"
#include "core/world.h"

/* ---------------------------------------------------------------------------------------------- */
/* Random numbers                                                                                 */
/* ---------------------------------------------------------------------------------------------- */

/** xorshift128+, seeded from two words by splitmix64 so that neighbouring seeds give unrelated
 *  streams: a call's stream (its first output seeds the level kinds' stochastic rounding, whose
 *  per-coordinate bits are quant/qmath.h's counter-based hash), random-k's indices, PowerSGD's
 *  initial matrix. */
typedef struct tempo__rng {
    uint64_t s0, s1;
} tempo__rng_t;

static inline uint64_t tempo__splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline void tempo__rng_seed(tempo__rng_t *r, uint64_t a, uint64_t b)
{
    uint64_t x = a ^ (b * 0xd1b54a32d192ed03ull);
    r->s0 = tempo__splitmix64(&x);
    r->s1 = tempo__splitmix64(&x);
    if (!(r->s0 | r->s1)) {
        r->s1 = 1;
    }
}

static inline uint64_t tempo__rng_next(tempo__rng_t *r)
{
    uint64_t x = r->s0, y = r->s1;
    r->s0 = y;
    x ^= x << 23;
    r->s1 = x ^ y ^ (x >> 17) ^ (y >> 26);
    return r->s1 + y;
}

/** Uniform in [0, 1) with 24 random bits (exactly representable in fp32). */
static inline float tempo__rng_unit(tempo__rng_t *r)
{
    return (float)(tempo__rng_next(r) >> 40) * (1.0f / 16777216.0f);
}

/** Uniform double in [0, 1) with 53 random bits. */
static inline double tempo__rng_double(tempo__rng_t *r)
{
    return (double)(tempo__rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/** Standard normal (Box-Muller; tests and benchmarks). */
double tempo__rng_normal(tempo__rng_t *r);

/* ---------------------------------------------------------------------------------------------- */
/* Parameters                                                                                     */
/* ---------------------------------------------------------------------------------------------- */

/** Norm a bucket is divided by. */
typedef enum { TEMPO__QNORM_L2 = 0, TEMPO__QNORM_LINF = 1 } tempo__qnorm_t;

/** Distribution model of the normalized coordinates (ALQ, AMQ). */
typedef enum {
    TEMPO__QMODEL_MIXTURE = 0, /* truncated normals of the largest-norm buckets, weights ∝ norm */
    TEMPO__QMODEL_NORMAL = 1   /* one truncated normal ("-N" variants) */
} tempo__qmodel_t;

/** Entropy stage applied to the packed level indices. */
typedef enum { TEMPO__QENT_NONE = 0, TEMPO__QENT_RANS = 1, TEMPO__QENT_ZSTD = 2 } tempo__qent_t;

#define TEMPO__QMAX_REFIT 16

/** Parsed parameters of one compressor (every field has a value after parsing). */
typedef struct tempo__qparams {
    int kind;             /* index into tempo__qkinds[] */
    int bits;             /* level kinds: bits per level index (1..8) */
    size_t bucket;        /* coordinates per normalized bucket */
    tempo__qnorm_t norm;  /* level kinds: what a bucket is divided by (qsgdinf, terngrad: L-inf;
                           * alq/amq: norm=l2 (default, the paper) or norm=linf) */
    int zero;             /* level convention: 0 = 2^bits signed levels, no zero (the ALQ authors'
                           * code); 1 = a zero level and a sign bit (the paper): 2^bits - 1 levels */
    double mul;           /* nuqsgd: level multiplier p (levels ±p^k) */
    int clip;             /* terngrad: clip at 2.5 std before scaling */
    tempo__qmodel_t model;
    int dist_num;         /* mixture: buckets kept (largest norms) */
    int ef;               /* error feedback */
    double ratio;         /* top-k / random-k: fraction of coordinates sent (0, 1] */
    int rank;             /* powersgd: rank r */
    tempo__qent_t entropy;
    size_t min_bytes;     /* requests below this go uncompressed */
    uint64_t seed;        /* user seed of the stochastic rounding and random-k */
    int refit[TEMPO__QMAX_REFIT]; /* refit at these calls of a key ... */
    int nrefit;
    int refit_every;      /* ... and then every refit_every calls (0: never again) */
} tempo__qparams_t;

/* ---------------------------------------------------------------------------------------------- */
/* Kinds                                                                                          */
/* ---------------------------------------------------------------------------------------------- */

/** How encoded vectors of several ranks are combined (qcoll.c). */
typedef enum {
    TEMPO__QAGG_SUM = 0,       /* the encoded form is an array of fp16/bf16/fp32 that sums exactly
                                * like the data: an ordinary all-reduce (cast, random-k) */
    TEMPO__QAGG_TWO_PHASE = 1, /* all-to-all of encoded blocks, decode and sum one block, re-encode,
                                * all-gather (unbiased per-bucket quantizers) */
    TEMPO__QAGG_GATHER = 2,    /* all-gather of encoded vectors, decode and sum all (sign, top-k) */
    TEMPO__QAGG_LOWRANK = 3    /* PowerSGD: all-reduce P, orthogonalize, all-reduce Q */
} tempo__qagg_t;

/** What a kind's functions see of one call. */
typedef struct tempo__qctx {
    const tempo__qparams_t *p;
    tempo__rng_t *rng;      /* this rank's stream for this call (stochastic rounding) */
    uint64_t shared_seed;   /* equal on every rank for this (key, call, block): random-k indices */
    const float *levels;    /* level kinds: signed ascending table, levels[nlevels-1] == 1 */
    int nlevels;
} tempo__qctx_t;

/* Parameter bits: which parameters a kind accepts (for parsing and --help). */
enum {
    TEMPO__QP_BITS = 1u << 0,
    TEMPO__QP_BUCKET = 1u << 1,
    TEMPO__QP_ZERO = 1u << 2,
    TEMPO__QP_MUL = 1u << 3,
    TEMPO__QP_CLIP = 1u << 4,
    TEMPO__QP_MODEL = 1u << 5,
    TEMPO__QP_EF = 1u << 6,
    TEMPO__QP_RATIO = 1u << 7,
    TEMPO__QP_RANK = 1u << 8,
    TEMPO__QP_ENTROPY = 1u << 9,
    TEMPO__QP_REFIT = 1u << 10,
    TEMPO__QP_NORM = 1u << 11
};

typedef struct tempo__qkind {
    const char *name;
    const char *doc;
    unsigned params;   /* TEMPO__QP_* accepted besides min_bytes and seed */
    tempo__qagg_t agg;
    int unbiased;      /* E[decode(encode(v))] = v */
    int adaptive;      /* levels are fitted (alq, amq) */
    /** Fill defaults for this kind into p before the spec's parameters are applied. */
    void (*defaults)(tempo__qparams_t *p);
    /** Most bytes encode() writes for count coordinates. */
    size_t (*bound)(const tempo__qparams_t *p, size_t count);
    /** Encode count coordinates into out (at least bound() bytes); returns the bytes written. */
    size_t (*encode)(const tempo__qctx_t *c, const float *in, size_t count, void *out);
    /** Decode len bytes into count coordinates: out = value (accumulate = 0) or out += value.
     *  TEMPO_ERR_REMOTE (with a message) for a malformed input; nothing is written then. */
    tempo_status_t (*decode)(const tempo__qctx_t *c, const void *in, size_t len, size_t count,
                             float *out, int accumulate);
} tempo__qkind_t;

extern const tempo__qkind_t tempo__qkinds[];
extern const size_t tempo__nqkinds;

/** Parse a spec ("alq:bits=3,bucket=8192") into p. TEMPO_ERR_INVALID with a message that lists
 *  the valid compressors, or the kind's valid parameters, for a bad spec. */
tempo_status_t tempo__qspec_parse(const char *spec, tempo__qparams_t *p);
/** The canonical spec of p with every parameter (for logs and benchmark rows). */
void tempo__qspec_format(const tempo__qparams_t *p, char *buf, size_t len);

/* ---------------------------------------------------------------------------------------------- */
/* Level tables (levels.c)                                                                        */
/* ---------------------------------------------------------------------------------------------- */

/** Number of signed levels for bits under the convention (2^bits, or 2^bits - 1 with zero). */
static inline int tempo__qnlevels(int bits, int zero)
{
    return zero ? (1 << bits) - 1 : (1 << bits);
}

/** Fixed tables: evenly spaced (qsgd), powers of mul (nuqsgd, amq), written into lv (ascending,
 *  symmetric, ending at 1). */
void tempo__qlevels_uniform(int bits, int zero, float *lv);
void tempo__qlevels_exp(int bits, int zero, double mul, float *lv);

/** Per-coordinate variance of unbiased rounding of r in [-1, 1] on the table: (hi - r)(r - lo). */
double tempo__qlevels_coord_var(const float *lv, int nl, double r);

/* ---------------------------------------------------------------------------------------------- */
/* Level fitting (fit.c)                                                                          */
/* ---------------------------------------------------------------------------------------------- */

/** Statistics of one bucket: its norm (the compressor's: L2, or L-inf with norm=linf), and mean
 *  and (unbiased) standard deviation of its normalized coordinates v_i / norm. */
typedef struct tempo__qbstat {
    double norm, mean, std;
} tempo__qbstat_t;

/** Distribution model of a normalized coordinate r on [-1, 1]: a mixture of k normals, each
 *  truncated to [-1, 1], with weights w (summing to 1). */
typedef struct tempo__qdist {
    int k;
    double *w, *mu, *sigma; /* (k) each; owned */
} tempo__qdist_t;

/** Build the model from bucket statistics. NORMAL: one component, mean = mean of the bucket means
 *  weighted by coordinates, std = sqrt(pooled within-bucket variance) (pooled is given by the
 *  caller as pooled_var, over every bucket, not only the kept ones). MIXTURE: one component per
 *  bucket of the keep largest norms in b (ties by index), weight ∝ norm. */
tempo_status_t tempo__qdist_build(tempo__qdist_t *d, tempo__qmodel_t model, const tempo__qbstat_t *b,
                                  size_t nb, int keep, double mean, double pooled_var);
void tempo__qdist_free(tempo__qdist_t *d);

/** Expected variance of unbiased rounding of one coordinate drawn from d on the signed ascending
 *  table lv (nl levels, lv[0] = -1, lv[nl-1] = 1): ∫ (hi(r) - r)(r - lo(r)) f(r) dr. The normalized
 *  variance of a bucket of d coordinates is d times this. */
double tempo__qdist_var(const tempo__qdist_t *d, const double *lv, int nl);

/** ALQ: levels minimizing tempo__qdist_var for bits under the convention (zero: a zero level is
 *  kept fixed), by coordinate descent with the closed-form update, from the quantile, uniform and
 *  exponential starts, keeping the best; symmetric. lv receives tempo__qnlevels(bits, zero) levels;
 *  *var_p the objective. */
tempo_status_t tempo__qfit_alq(const tempo__qdist_t *d, int bits, int zero, double *lv,
                               double *var_p);
/** Internal, for tests of the descent itself: ALQ from one start (0 quantile, 1 uniform,
 *  2 exponential) for at most max_epochs epochs; obj (max_epochs + 1) receives the objective before
 *  the first epoch and after each, *nep_p (may be NULL) the epochs run, lv the table reached. */
tempo_status_t tempo__qfit_alq_run(const tempo__qdist_t *d, int bits, int zero, int start,
                                   int max_epochs, double *obj, int *nep_p, double *lv);
/** AMQ: levels ±p^k (and 0 with zero), p minimizing tempo__qdist_var by gradient descent from
 *  several starts; *p_p the multiplier. */
tempo_status_t tempo__qfit_amq(const tempo__qdist_t *d, int bits, int zero, double *p_p,
                               double *lv, double *var_p);

/* ---------------------------------------------------------------------------------------------- */
/* Bit packing (levels.c) and entropy stages (rans.c)                                             */
/* ---------------------------------------------------------------------------------------------- */

/** Bytes of n indices of b bits packed LSB-first. */
static inline size_t tempo__qpacked_bytes(size_t n, int b)
{
    return (n * (size_t)b + 7) / 8;
}
void tempo__qpack(const uint8_t *idx, size_t n, int b, uint8_t *out);
/** The level kinds' rounding of n coordinates x (whose indices in the encoded vector start at base)
 *  times inv to level indices k of c's table, with the call's seed: what their encode does per
 *  bucket (quant/qmath.h's tempo__qlevel, vectorized), for tests/unit/test_qmath.c. */
void tempo__qlev_indices(const tempo__qctx_t *c, uint64_t seed, uint64_t base, const float *x,
                         size_t n, float inv, uint8_t *k);
void tempo__qunpack(const uint8_t *in, size_t n, int b, uint8_t *idx);

/** rANS over byte symbols < nsym (<= 256) with a static frequency table stored in the output.
 *  Returns the bytes written, or 0 if the output would exceed cap (the caller then sends the
 *  symbols raw). */
size_t tempo__rans_encode(const uint8_t *sym, size_t n, int nsym, uint8_t *out, size_t cap);
/** Decode exactly n symbols from len bytes; TEMPO_ERR_REMOTE for a malformed input. */
tempo_status_t tempo__rans_decode(const uint8_t *in, size_t len, size_t n, int nsym, uint8_t *sym);
/** Most bytes tempo__rans_encode may need for n symbols (cap to pass so it never fails). */
size_t tempo__rans_bound(size_t n, int nsym);

/* ---------------------------------------------------------------------------------------------- */
/* PowerSGD kernels (powersgd.c)                                                                  */
/* ---------------------------------------------------------------------------------------------- */

/** The matrix view of a flat tensor of count elements: rows x cols with rows * cols >= count
 *  (zero padding at the end), as square as possible. */
void tempo__psgd_shape(size_t count, size_t *rows_p, size_t *cols_p);
/** P (rows x r) = M (rows x cols) Q (cols x r); row-major. */
void tempo__psgd_mul_p(const float *m, size_t rows, size_t cols, const float *q, int r, float *p);
/** Q (cols x r) = M^T P. */
void tempo__psgd_mul_q(const float *m, size_t rows, size_t cols, const float *p, int r, float *q);
/** Orthonormalize the r columns of P (rows x r) in place (Gram-Schmidt run twice per column, in
 *  double; a column that vanishes stays zero). */
void tempo__psgd_orthonormalize(float *p, size_t rows, int r);
/** out (rows x cols) = P Q^T. */
void tempo__psgd_approx(const float *p, const float *q, size_t rows, size_t cols, int r,
                        float *out);


/* ---------------------------------------------------------------------------------------------- */
/* Compressor objects and per-tensor state (quant.c)                                              */
/* ---------------------------------------------------------------------------------------------- */

/** The state of one tensor (key) in a compressor. */
typedef struct tempo__qkey {
    uint64_t key;
    uint64_t calls;     /* encodes (collective or local) so far; a collective takes its call
                         * number when it is built */
    uint64_t entered;   /* calls that have passed their key section (fit, error feedback):
                         * call c waits until entered == c, so calls of one key see the state in
                         * call order on every rank */
    float levels[256];  /* level kinds: the table in use */
    int nlevels;        /* 0 until adaptive levels are fitted */
    double fit_var;     /* adaptive: the model's normalized variance of the table (per bucket) */
    double amq_p;       /* amq: the multiplier */
    float *residual;    /* error feedback: (rcount) fp32, owned */
    size_t rcount;
    float *psgd_q;      /* powersgd warm start: (qlen) fp32 = cols x rank, owned */
    size_t qlen;
} tempo__qkey_t;

struct tempo_compressor {
    tempo__qhook_t hook; /* first: the engine reaches compressed schedules through it */
    tempo__qparams_t p;
    const tempo__qkind_t *kind;
    char spec[320];
    float fixed[256]; /* fixed level kinds: their table */
    int nfixed;
    tempo__qkey_t **keys; /* sorted by key */
    size_t nkeys, kcap;
    tempo_compressor_stats_t st;
};

/** The state of key, created on first use (with a residual of count coordinates when error
 *  feedback is on; a later call with another count is TEMPO_ERR_INVALID: the tensor's tag must
 *  stay with one tensor). */
tempo_status_t tempo__qkey_get(struct tempo_compressor *qc, uint64_t key, size_t count,
                               tempo__qkey_t **k_p);
/** Whether adaptive levels are fitted at this call number. */
int tempo__qrefit_due(const tempo__qparams_t *p, uint64_t calls);
/** Fill ctx for an encode/decode of key with the table in use; rng may be NULL (decode). */
void tempo__qctx_init(struct tempo_compressor *qc, tempo__qkey_t *k, tempo__rng_t *rng,
                      tempo__qctx_t *ctx);
/** Seed of a rank's stochastic rounding for (key, call, stage); shared seeds pass rank = -1. */
uint64_t tempo__qseed(const tempo__qparams_t *p, uint64_t key, uint64_t call, int stage, int rank);

/** Fitting statistics one rank contributes (fixed size per compressor): sums over all its buckets
 *  for the normal model and the dist_num largest-norm buckets for the mixture. */
size_t tempo__qstats_bytes(const tempo__qparams_t *p);
void tempo__qstats_compute(const tempo__qparams_t *p, const float *x, size_t count, void *out);
/** The same in two steps, for statistics computed per bucket elsewhere (the CUDA kernel
 *  tempo__gpu_qstats): start out, then add each bucket of n coordinates in order, from its
 *  tempo__qstats_bucket triple (quant/qmath.h). */
void tempo__qstats_init(const tempo__qparams_t *p, void *out);
void tempo__qstats_add(const tempo__qparams_t *p, void *out, size_t n, const double *st);
/** Merge the statistics of n ranks (in rank order) and fit key's levels: identical inputs give
 *  identical levels on every rank. */
tempo_status_t tempo__qfit_key(struct tempo_compressor *qc, tempo__qkey_t *k,
                               const void *const *stats, int n);

/** Compressed collectives (qcoll.c): the hook's start. */
tempo_status_t tempo__qcoll_start(tempo__op_t *op);

#endif /* TEMPO_QUANT_QUANT_H */
