/*
 * sparse.c — the sparsifying compressors: top-k (the k coordinates of largest magnitude, sent with
 * their indices, all-gathered) and random-k (k coordinates at indices every rank derives from a
 * shared seed, so only values travel and the messages of several ranks sum like the data).
 *
 * What it is not: error feedback (the caller adds the residual before encode() and keeps
 * input - decode(encode(input))), nor DGC's sampled threshold, nor PowerSGD's random contiguous
 * block: top-k here is exact and random-k draws a uniformly random k-subset.
 *
 * Both keep k = tempo__qsparse_k(p->ratio, count) coordinates: derived on both sides, never sent.
 * Indices are uint32, so count <= UINT32_MAX (the compressed collectives send blocks).
 *
 * Wire formats (little-endian):
 *   top-k    k uint32 indices, strictly increasing, then the k fp32 values in the same order
 *            (bit copies of the input). 8k bytes; count 0 gives k = 0 and 0 bytes.
 *   random-k k fp32 values at tempo__qrandk_indices(c->shared_seed, count, k), ascending. 4k
 *            bytes. With p->ef = 0 the values are multiplied by count/k so that the decoded vector
 *            is unbiased (each index is kept with probability k/count); with p->ef = 1 they are
 *            sent as they are and the residual keeps the rest.
 *
 * Invariants:
 *   top-k    Ties in magnitude go to the smaller index, so the selection is a function of the
 *            input alone. Magnitudes are compared as the integers |x| has as fp32 bit patterns
 *            (monotone in |x|), which puts NaN above +inf: a NaN coordinate is always sent, so it
 *            shows up in the sum as it would uncompressed instead of hiding in the residual.
 *            Selection is exact, O(count), without heap memory or a sort; the output buffer
 *            (room for 2k keys) is its scratch until the final pass writes the selection in index
 *            order. Fast path (large k): a strided sample brackets the threshold, one filtered
 *            pass counts the keys above the bracket and copies those inside it, and a radix select
 *            finishes on the copy. Exact path (small k, or a sample the pass proves wrong): a
 *            radix select on the 31-bit keys (11 + 10 + 10 bit digits), a histogram pass over the
 *            input, the threshold bin copied out when it fits, else another histogram pass. The
 *            paths differ in speed only: both find the same threshold. The passes test 16 keys
 *            at a time with SSE2 compares, so scalar code sees only the few keys that matter.
 *   random-k The index set depends only on (shared_seed, count, k) and is computed with integer
 *            arithmetic only (an exact bounded generator, no libm), so ranks on different builds
 *            agree. Every path that computes it (bitmap, in-place hash) gives the same set.
 *   both     k comes from one IEEE multiplication and ceil(), exact on every conforming build.
 */
#include "config.h"

#include "core/tempo_int.h"
#include "quant/kinds_sparse.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define SPARSE_DEFAULT_RATIO 0.01

/* Unaligned-safe access to the uint32 words of a wire buffer (compiles to plain moves on x86). */
static inline uint32_t ld32(const unsigned char *p, size_t i)
{
    uint32_t v;
    memcpy(&v, p + 4 * i, sizeof(v));
    return v;
}

static inline void st32(unsigned char *p, size_t i, uint32_t v)
{
    memcpy(p + 4 * i, &v, sizeof(v));
}

size_t tempo__qsparse_k(double ratio, size_t count)
{
    if (count == 0) {
        return 0;
    }
    if (!(ratio > 0.0)) { /* also NaN: the parser rejects these, but never send nothing */
        return 1;
    }
    if (ratio >= 1.0) {
        return count;
    }
    double x = ratio * (double)count;
    /* 0.07 * 100 is 7.000000000000001 in double: a few ulps of slack keep the ceiling at 7 */
    double k = ceil(x - x * (4.0 * DBL_EPSILON)); /* >= 1: x > 0 */
    if (k >= (double)count) {
        return count;
    }
    return (size_t)k;
}

/* ---------------------------------------------------------------------------------------------- */
/* top-k                                                                                          */
/* ---------------------------------------------------------------------------------------------- */

void tempo__qtopk_defaults(tempo__qparams_t *p)
{
    p->ratio = SPARSE_DEFAULT_RATIO;
    p->ef = 1; /* top-k is biased: the residual carries what was not sent */
}

size_t tempo__qtopk_bound(const tempo__qparams_t *p, size_t count)
{
    return tempo__qsparse_k(p->ratio, count) * (sizeof(uint32_t) + sizeof(float));
}

/* Digits of the 31-bit magnitude key, most significant first. */
#define TK_LEVELS 3
#define TK_BINS0 2048           /* bins of the first digit, the largest */
#define TK_RUN 16               /* keys one filter step tests; the scalar code sees only hits */
#define TK_SAMPLE_MAX 65536     /* keys in the sample that brackets the threshold */
#define TK_SAMPLE_MIN_RANK 64.0 /* below this expected rank in the sample, no bracket */
static const int tk_shift[TK_LEVELS] = {20, 10, 0};
static const int tk_width[TK_LEVELS] = {11, 10, 10};

static inline uint32_t tk_key(const unsigned char *src, size_t i)
{
    return ld32(src, i) & 0x7fffffffu; /* |x| as an ordered integer; src may hold keys already */
}

/*
 * Filters over the TK_RUN keys from src[i]: a bit mask (bit t for key i + t) of the keys that the
 * scalar code must look at, so that it never walks the ~99 % that are of no interest. Keys are
 * below 2^31, so SSE2's signed compares order them; without SSE2 the same masks come from plain C.
 *   tk_mask_ge      key >= thr
 *   tk_mask_prefix  key >> sh == prefix
 *   tk_mask_window  lo <= key <= hi (lo <= hi), and the keys above hi are added to *above_p
 */
#if defined(__SSE2__)
static inline __m128i tk_load4(const unsigned char *src, size_t i)
{
    return _mm_and_si128(_mm_loadu_si128((const __m128i *)(const void *)(src + 4 * i)),
                         _mm_set1_epi32(0x7fffffff));
}

static inline uint32_t tk_bits4(__m128i m)
{
    return (uint32_t)_mm_movemask_ps(_mm_castsi128_ps(m));
}
#endif

static inline uint32_t tk_mask_ge(const unsigned char *src, size_t i, uint32_t thr)
{
    uint32_t bits = 0;
#if defined(__SSE2__)
    const __m128i lim = _mm_set1_epi32((int)thr - 1); /* thr 0 gives -1: every key passes */
    for (int t = 0; t < TK_RUN; t += 4) {
        bits |= tk_bits4(_mm_cmpgt_epi32(tk_load4(src, i + (size_t)t), lim)) << t;
    }
#else
    for (int t = 0; t < TK_RUN; t++) {
        bits |= (uint32_t)(tk_key(src, i + (size_t)t) >= thr) << t;
    }
#endif
    return bits;
}

static inline uint32_t tk_mask_prefix(const unsigned char *src, size_t i, int sh, uint32_t prefix)
{
    uint32_t bits = 0;
#if defined(__SSE2__)
    const __m128i pre = _mm_set1_epi32((int)prefix), cnt = _mm_cvtsi32_si128(sh);
    for (int t = 0; t < TK_RUN; t += 4) {
        __m128i v = _mm_srl_epi32(tk_load4(src, i + (size_t)t), cnt);
        bits |= tk_bits4(_mm_cmpeq_epi32(v, pre)) << t;
    }
#else
    for (int t = 0; t < TK_RUN; t++) {
        bits |= (uint32_t)((tk_key(src, i + (size_t)t) >> sh) == prefix) << t;
    }
#endif
    return bits;
}

static inline uint32_t tk_mask_window(const unsigned char *src, size_t i, uint32_t lo, uint32_t hi,
                                      size_t *above_p)
{
    uint32_t bits = 0, above = 0;
#if defined(__SSE2__)
    const __m128i h = _mm_set1_epi32((int)hi), l = _mm_set1_epi32((int)lo - 1);
    __m128i cnt = _mm_setzero_si128();
    for (int t = 0; t < TK_RUN; t += 4) {
        __m128i v = tk_load4(src, i + (size_t)t);
        __m128i a = _mm_cmpgt_epi32(v, h);
        cnt = _mm_sub_epi32(cnt, a); /* a lane is -1 where the key is above hi */
        bits |= tk_bits4(_mm_andnot_si128(a, _mm_cmpgt_epi32(v, l))) << t;
    }
    cnt = _mm_add_epi32(cnt, _mm_srli_si128(cnt, 8));
    cnt = _mm_add_epi32(cnt, _mm_srli_si128(cnt, 4));
    above = (uint32_t)_mm_cvtsi128_si32(cnt);
#else
    for (int t = 0; t < TK_RUN; t++) {
        uint32_t key = tk_key(src, i + (size_t)t);
        above += key > hi;
        bits |= (uint32_t)(key >= lo && key <= hi) << t;
    }
#endif
    *above_p += above;
    return bits;
}

/* hist[d]: keys of src[0..n) whose digit at level lv is d, among those whose higher digits are
 * prefix (level 0 has no higher digits). */
static void tk_hist(const unsigned char *src, size_t n, int lv, uint32_t prefix, uint32_t *hist)
{
    const int sh = tk_shift[lv], hi = sh + tk_width[lv];
    const uint32_t mask = (1u << tk_width[lv]) - 1;
    if (lv == 0) {
        /* four interleaved sub-histograms: neighbouring coordinates often share a bin, and one
         * counter would serialize their increments on store-to-load forwarding */
        uint32_t h[4][TK_BINS0];
        memset(h, 0, sizeof(h));
        size_t i = 0;
        for (; i + 4 <= n; i += 4) {
            h[0][tk_key(src, i) >> sh]++;
            h[1][tk_key(src, i + 1) >> sh]++;
            h[2][tk_key(src, i + 2) >> sh]++;
            h[3][tk_key(src, i + 3) >> sh]++;
        }
        for (; i < n; i++) {
            h[0][tk_key(src, i) >> sh]++;
        }
        for (size_t d = 0; d < TK_BINS0; d++) {
            hist[d] = h[0][d] + h[1][d] + h[2][d] + h[3][d];
        }
        return;
    }
    memset(hist, 0, ((size_t)mask + 1) * sizeof(*hist));
    for (size_t i = 0; i < n; i++) {
        uint32_t key = tk_key(src, i);
        if ((key >> hi) == prefix) {
            hist[(key >> sh) & mask]++;
        }
    }
}

/* The bin holding the *need_p-th largest key (1-based, counted from the top bin down); *need_p
 * becomes its rank within that bin and *cand_p the bin's size. */
static uint32_t tk_pick(const uint32_t *hist, uint32_t nbins, size_t *need_p, size_t *cand_p)
{
    size_t need = *need_p;
    uint32_t d = nbins;
    while (d-- > 1 && need > hist[d]) {
        need -= hist[d];
    }
    *need_p = need;
    *cand_p = hist[d];
    return d;
}

/*
 * Radix select: the need-th largest (1 <= need <= m) of the keys src[0..m). Every key above *thr_p
 * ranks above it, and the first *eq_p keys equal to it in index order complete the need
 * (SIZE_MAX: all of them). When src is the input (in_scratch 0), a threshold bin of at most cap
 * keys is copied into scratch and refined there; src may be scratch itself (in_scratch 1), which
 * is then only read.
 */
static void tk_radix(const unsigned char *src, size_t m, size_t need, int in_scratch,
                     unsigned char *scratch, size_t cap, uint32_t *thr_p, size_t *eq_p)
{
    uint32_t hist[TK_BINS0];
    uint32_t prefix = 0;
    for (int lv = 0; lv < TK_LEVELS; lv++) {
        size_t cand;
        tk_hist(src, m, lv, prefix, hist);
        uint32_t d = tk_pick(hist, 1u << tk_width[lv], &need, &cand);
        prefix = (prefix << tk_width[lv]) | d;
        if (need == cand) {
            /* the whole bin is taken: its lowest key is the threshold and no tie is broken */
            *thr_p = prefix << tk_shift[lv];
            *eq_p = SIZE_MAX;
            return;
        }
        if (lv + 1 < TK_LEVELS && !in_scratch && cand <= cap) {
            /* the bin fits in the output buffer: refine on its keys instead of the whole input */
            const int sh = tk_shift[lv];
            size_t w = 0, i = 0;
            for (; i + TK_RUN <= m; i += TK_RUN) {
                for (uint32_t b = tk_mask_prefix(src, i, sh, prefix); b; b &= b - 1) {
                    st32(scratch, w++, tk_key(src, i + (size_t)__builtin_ctz(b)));
                }
            }
            for (; i < m; i++) {
                uint32_t key = tk_key(src, i);
                if ((key >> sh) == prefix) {
                    st32(scratch, w++, key);
                }
            }
            src = scratch;
            m = w;
            in_scratch = 1;
        }
    }
    *thr_p = prefix; /* all 31 bits fixed: the need-th largest key itself */
    *eq_p = need;
}

/*
 * The fast path of tk_select: a strided sample of the input brackets the threshold between two
 * keys lo <= hi (ranks e ± (4 sqrt(e) + 8) of the sample, e the expected rank), one filtered pass
 * counts the keys above hi and copies those in [lo, hi] into scratch, and the radix select finishes
 * on them. It skips the full histogram pass, the slowest of the exact path. Returns 0, having
 * decided nothing, when the sample is too small, the bracket would not fit in scratch, or the pass
 * shows the threshold outside the bracket (an unrepresentative sample): tk_radix then does it all.
 */
static int tk_sampled(const float *in, size_t n, size_t k, unsigned char *scratch, size_t cap,
                      uint32_t *thr_p, size_t *eq_p)
{
    const unsigned char *src = (const unsigned char *)in;
    size_t ns = TEMPO_MIN(TEMPO_MIN((size_t)TK_SAMPLE_MAX, cap), n / 8);
    double e = (double)k * (double)ns / (double)n;
    if (ns == 0 || e < TK_SAMPLE_MIN_RANK) {
        return 0;
    }
    double margin = 4.0 * sqrt(e) + 8.0;
    size_t r_hi = (size_t)TEMPO_MAX(1.0, floor(e - margin));
    size_t r_lo = (size_t)TEMPO_MIN((double)ns, ceil(e + margin));
    size_t stride = n / ns, eq;
    for (size_t s = 0; s < ns; s++) {
        st32(scratch, s, tk_key(src, s * stride));
    }
    uint32_t lo, hi;
    tk_radix(scratch, ns, r_lo, 1, scratch, cap, &lo, &eq);
    tk_radix(scratch, ns, r_hi, 1, scratch, cap, &hi, &eq);
    size_t in_window = 0;
    for (size_t s = 0; s < ns; s++) {
        uint32_t key = ld32(scratch, s);
        in_window += key >= lo && key <= hi;
    }
    if ((double)in_window * (double)n / (double)ns > (double)cap / 2) {
        return 0; /* ties or a flat distribution: the bracket would not fit */
    }
    size_t above = 0, w = 0, i = 0;
    for (; i + TK_RUN <= n; i += TK_RUN) {
        for (uint32_t b = tk_mask_window(src, i, lo, hi, &above); b; b &= b - 1) {
            if (w == cap) {
                return 0;
            }
            st32(scratch, w++, tk_key(src, i + (size_t)__builtin_ctz(b)));
        }
    }
    for (; i < n; i++) {
        uint32_t key = tk_key(src, i);
        above += key > hi;
        if (key >= lo && key <= hi) {
            if (w == cap) {
                return 0;
            }
            st32(scratch, w++, key);
        }
    }
    if (above >= k || above + w < k) {
        return 0; /* the threshold is not in [lo, hi] */
    }
    tk_radix(scratch, w, k - above, 1, scratch, cap, thr_p, eq_p);
    if (*eq_p == SIZE_MAX && *thr_p < lo) {
        *thr_p = lo; /* "every key from the bin's lowest": only the bracket's keys are candidates */
    }
    return 1;
}

/*
 * Threshold of the k largest keys of in[0..n), 1 <= k < n: every key above *thr_p is taken, and
 * the first *eq_p keys equal to it in index order (SIZE_MAX: all of them). scratch has room for 2k
 * uint32 (the output buffer, written only after this returns).
 */
static void tk_select(const float *in, size_t n, size_t k, unsigned char *scratch, uint32_t *thr_p,
                      size_t *eq_p)
{
    if (tk_sampled(in, n, k, scratch, 2 * k, thr_p, eq_p)) {
        return;
    }
    tk_radix((const unsigned char *)in, n, k, 0, scratch, 2 * k, thr_p, eq_p);
}

/* Append coordinate i (bits u, key above or at the threshold) unless it is a tie beyond the
 * first eq_max. */
static inline void tk_take(unsigned char *oidx, unsigned char *oval, size_t i, uint32_t u,
                           uint32_t thr, size_t eq_max, size_t *eq_p, size_t *w_p)
{
    if ((u & 0x7fffffffu) == thr) {
        if (*eq_p == eq_max) {
            return; /* ties beyond k go to the larger indices: left out */
        }
        (*eq_p)++;
    }
    st32(oidx, *w_p, (uint32_t)i);
    st32(oval, *w_p, u);
    (*w_p)++;
}

size_t tempo__qtopk_encode(const tempo__qctx_t *c, const float *in, size_t count, void *out)
{
    size_t k = tempo__qsparse_k(c->p->ratio, count);
    unsigned char *oidx = out, *oval = oidx + k * sizeof(uint32_t);
    const unsigned char *src = (const unsigned char *)in;
    TEMPO_ASSERT(count <= UINT32_MAX);
    if (k == 0) {
        return 0;
    }
    if (k == count) {
        for (size_t i = 0; i < count; i++) {
            st32(oidx, i, (uint32_t)i);
        }
        memcpy(oval, in, count * sizeof(float));
        return k * (sizeof(uint32_t) + sizeof(float));
    }
    uint32_t thr;
    size_t eq_max, eq = 0, w = 0, i = 0;
    tk_select(in, count, k, out, &thr, &eq_max);
    for (; i + TK_RUN <= count && w < k; i += TK_RUN) {
        for (uint32_t b = tk_mask_ge(src, i, thr); b; b &= b - 1) {
            size_t t = i + (size_t)__builtin_ctz(b);
            tk_take(oidx, oval, t, ld32(src, t), thr, eq_max, &eq, &w);
        }
    }
    for (; i < count && w < k; i++) {
        uint32_t u = ld32(src, i);
        if ((u & 0x7fffffffu) >= thr) {
            tk_take(oidx, oval, i, u, thr, eq_max, &eq, &w);
        }
    }
    TEMPO_ASSERT(w == k);
    return k * (sizeof(uint32_t) + sizeof(float));
}

/* out[i_j] (+)= val_j for the k values of a message; indices from idx, from the message's own
 * little-endian index array wire_idx, or (both NULL) 0..k-1. Without accumulate, the other
 * coordinates become 0. */
static void scatter(float *out, size_t count, size_t k, const uint32_t *idx,
                    const unsigned char *wire_idx, const unsigned char *val, int accumulate)
{
    if (!accumulate && count > 0) {
        memset(out, 0, count * sizeof(float));
    }
    for (size_t j = 0; j < k; j++) {
        size_t i = idx ? idx[j] : wire_idx ? ld32(wire_idx, j) : j;
        float v;
        memcpy(&v, val + 4 * j, sizeof(v));
        out[i] = accumulate ? out[i] + v : v;
    }
}

tempo_status_t tempo__qtopk_decode(const tempo__qctx_t *c, const void *in, size_t len, size_t count,
                                   float *out, int accumulate)
{
    size_t k = tempo__qsparse_k(c->p->ratio, count);
    size_t want = k * (sizeof(uint32_t) + sizeof(float));
    const unsigned char *iidx = in, *ival = iidx + k * sizeof(uint32_t);
    if (len != want) {
        return tempo__err(TEMPO_ERR_REMOTE,
                          "top-k: message of %zu bytes for %zu coordinates, expected %zu (ratio "
                          "%g): a peer uses other parameters or sent a corrupt message",
                          len, count, want, c->p->ratio);
    }
    /* check every index before writing anything */
    for (size_t j = 0; j < k; j++) {
        uint32_t i = ld32(iidx, j);
        if (i >= count || (j > 0 && i <= ld32(iidx, j - 1))) {
            return tempo__err(TEMPO_ERR_REMOTE,
                              "top-k: index %zu of the message is %u (previous %u, %zu "
                              "coordinates): indices must increase and stay below the count; "
                              "corrupt message",
                              j, (unsigned)i, j > 0 ? (unsigned)ld32(iidx, j - 1) : 0u, count);
        }
    }
    scatter(out, count, k, NULL, iidx, ival, accumulate);
    return TEMPO_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* random-k                                                                                       */
/* ---------------------------------------------------------------------------------------------- */

#define RK_STREAM 0x72616e646bull /* "randk": second seed word, so the stream is random-k's own */
#define RK_EMPTY UINT32_MAX       /* free slot of the in-place hash (indices are < count) */
#define RK_INPLACE_MAX 1024       /* k up to this always takes the in-place path */

void tempo__qrandk_defaults(tempo__qparams_t *p)
{
    p->ratio = SPARSE_DEFAULT_RATIO;
    p->ef = 1;
}

size_t tempo__qrandk_bound(const tempo__qparams_t *p, size_t count)
{
    return tempo__qsparse_k(p->ratio, count) * sizeof(float);
}

/* Uniform integer in [0, m), m >= 1, exactly (Lemire's multiply-shift with rejection): integer
 * arithmetic only, so the stream of indices is the same on every build. */
static inline uint32_t rk_below(tempo__rng_t *r, uint32_t m)
{
    uint64_t x = (tempo__rng_next(r) >> 32) * (uint64_t)m;
    uint32_t lo = (uint32_t)x;
    if (lo < m) {
        uint32_t t = (uint32_t)(0u - m) % m; /* 2^32 mod m: the low words to reject */
        while (lo < t) {
            x = (tempo__rng_next(r) >> 32) * (uint64_t)m;
            lo = (uint32_t)x;
        }
    }
    return (uint32_t)(x >> 32);
}

/* Floyd's algorithm: for j = count-k .. count-1 draw t in [0, j] and add t, or j when t is already
 * in; every k-subset comes out with the same probability. The paths differ only in the set they
 * test membership in, so they draw the same numbers and make the same choices. */

/* The set as a bitmap of count bits; the scan returns it ascending. 0 when out of memory. */
static int rk_bitmap(uint64_t seed, size_t count, size_t k, unsigned char *idx)
{
    size_t words = (count + 63) / 64;
    /* plain calloc, not tempo__calloc: running out here is not an error (the in-place path takes
     * over), so it must not leave an error message behind */
    uint64_t *bm = calloc(words, sizeof(*bm));
    if (!bm) {
        return 0;
    }
    tempo__rng_t r;
    tempo__rng_seed(&r, seed, RK_STREAM);
    for (size_t j = count - k; j < count; j++) {
        uint32_t t = rk_below(&r, (uint32_t)(j + 1));
        if ((bm[t >> 6] >> (t & 63)) & 1u) {
            t = (uint32_t)j;
        }
        bm[t >> 6] |= 1ull << (t & 63);
    }
    size_t w = 0;
    for (size_t i = 0; i < words; i++) {
        for (uint64_t b = bm[i]; b; b &= b - 1) {
            st32(idx, w++, (uint32_t)(i * 64 + (size_t)__builtin_ctzll(b)));
        }
    }
    free(bm);
    TEMPO_ASSERT(w == k);
    return 1;
}

static inline size_t rk_slot(uint32_t v, size_t k)
{
    uint32_t h = v * 0x9e3779b1u;
    h ^= h >> 15;
    h *= 0x85ebca77u;
    h ^= h >> 13;
    return (size_t)(((uint64_t)h * k) >> 32);
}

/* Add v to the linear-probing table idx[0..k) (v not in it, a free slot left). */
static inline void rk_put(unsigned char *idx, size_t k, uint32_t v)
{
    size_t s = rk_slot(v, k);
    while (ld32(idx, s) != RK_EMPTY) {
        s = s + 1 == k ? 0 : s + 1;
    }
    st32(idx, s, v);
}

static void rk_sift(unsigned char *a, size_t root, size_t n)
{
    uint32_t v = ld32(a, root);
    for (;;) {
        size_t ch = 2 * root + 1;
        if (ch >= n) {
            break;
        }
        if (ch + 1 < n && ld32(a, ch + 1) > ld32(a, ch)) {
            ch++;
        }
        uint32_t cv = ld32(a, ch);
        if (cv <= v) {
            break;
        }
        st32(a, root, cv);
        root = ch;
    }
    st32(a, root, v);
}

static void rk_heapsort(unsigned char *a, size_t n)
{
    if (n < 2) {
        return;
    }
    for (size_t i = n / 2; i-- > 0;) {
        rk_sift(a, i, n);
    }
    for (size_t e = n - 1; e > 0; e--) {
        uint32_t t = ld32(a, 0);
        st32(a, 0, ld32(a, e));
        st32(a, e, t);
        rk_sift(a, 0, e);
    }
}

/* The set as a full-at-the-end linear-probing hash in idx itself (no memory beyond the output),
 * then sorted in place. Filling a table completely costs O(k^1.5) expected probes. */
static void rk_inplace(uint64_t seed, size_t count, size_t k, unsigned char *idx)
{
    tempo__rng_t r;
    tempo__rng_seed(&r, seed, RK_STREAM);
    for (size_t j = 0; j < k; j++) {
        st32(idx, j, RK_EMPTY);
    }
    for (size_t j = count - k; j < count; j++) {
        uint32_t t = rk_below(&r, (uint32_t)(j + 1));
        size_t s = rk_slot(t, k);
        for (;;) {
            uint32_t v = ld32(idx, s);
            if (v == RK_EMPTY) {
                st32(idx, s, t);
                break;
            }
            if (v == t) {
                rk_put(idx, k, (uint32_t)j); /* j is new: everything in the set is below it */
                break;
            }
            s = s + 1 == k ? 0 : s + 1;
        }
    }
    rk_heapsort(idx, k);
}

static void rk_indices(uint64_t seed, size_t count, size_t k, unsigned char *idx, int inplace)
{
    TEMPO_ASSERT(k <= count && count <= UINT32_MAX);
    if (k == 0) {
        return;
    }
    if (k == count) {
        for (size_t i = 0; i < count; i++) {
            st32(idx, i, (uint32_t)i);
        }
        return;
    }
    /* the bitmap costs count/64 words to clear and scan, the hash about k^1.5 probes */
    if (!inplace && k > RK_INPLACE_MAX && (double)k * sqrt((double)k) > (double)count / 64.0 &&
        rk_bitmap(seed, count, k, idx)) {
        return;
    }
    rk_inplace(seed, count, k, idx);
}

void tempo__qrandk_indices(uint64_t seed, size_t count, size_t k, uint32_t *idx)
{
    rk_indices(seed, count, k, (unsigned char *)idx, 0);
}

void tempo__qrandk_indices_inplace(uint64_t seed, size_t count, size_t k, uint32_t *idx)
{
    rk_indices(seed, count, k, (unsigned char *)idx, 1);
}

size_t tempo__qrandk_encode(const tempo__qctx_t *c, const float *in, size_t count, void *out)
{
    size_t k = tempo__qsparse_k(c->p->ratio, count);
    unsigned char *o = out;
    if (k == 0) {
        return 0;
    }
    /* the indices go into the output first; each slot is then replaced by its value */
    rk_indices(c->shared_seed, count, k, o, 0);
    if (c->p->ef) {
        for (size_t j = 0; j < k; j++) {
            memcpy(o + 4 * j, in + ld32(o, j), sizeof(float));
        }
    } else {
        /* each index is kept with probability k/count: count/k makes the expectation exact */
        float scale = (float)((double)count / (double)k);
        for (size_t j = 0; j < k; j++) {
            float v = in[ld32(o, j)] * scale;
            memcpy(o + 4 * j, &v, sizeof(v));
        }
    }
    return k * sizeof(float);
}

tempo_status_t tempo__qrandk_decode(const tempo__qctx_t *c, const void *in, size_t len,
                                    size_t count, float *out, int accumulate)
{
    size_t k = tempo__qsparse_k(c->p->ratio, count);
    const unsigned char *ival = in;
    if (len != k * sizeof(float)) {
        return tempo__err(TEMPO_ERR_REMOTE,
                          "random-k: message of %zu bytes for %zu coordinates, expected %zu "
                          "(ratio %g): a peer uses other parameters or sent a corrupt message",
                          len, count, k * sizeof(float), c->p->ratio);
    }
    if (k == 0) {
        return TEMPO_OK;
    }
    uint32_t *idx = NULL;
    if (k < count) {
        idx = tempo__malloc(k * sizeof(*idx), "random-k indices");
        if (!idx) {
            return TEMPO_ERR_NOMEM;
        }
        tempo__qrandk_indices(c->shared_seed, count, k, idx);
    }
    scatter(out, count, k, idx, NULL, ival, accumulate); /* idx NULL: k == count, in order */
    tempo__free(idx);
    return TEMPO_OK;
}
