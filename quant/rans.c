/*
 * rans.c — the entropy stage for quantizer index streams: static, 8-way interleaved rANS (Duda)
 * over byte symbols < nsym <= 256, with one frequency table per message sent in front of the
 * stream. A 3-bit ALQ stream on Gaussian-like data carries about 2 bits of information per index;
 * this stage sends about that, where plain packing sends 3.
 *
 * What it is not: adaptive (the table is counted over the whole input in one pass, so a message is
 * one block: indices of a stochastic quantizer are close to independent and identically
 * distributed, and their order-0 entropy is all there is to take), a general-purpose compressor (no
 * matches; zstd is the stage for that), or a checksum (a corrupted message is detected with high
 * probability, not always).
 *
 * The coder. Eight rANS states x_0..x_7, 32 bits each, kept in [L, 2^31) with L = 2^15; the
 * probabilities are frequencies f_s in units of 1/M, M = 2^12, sum exactly M; renormalization
 * moves one 16-bit word at most per symbol, so it is a branch-free step and never a loop.
 * Symbol i uses state i mod 8: eight independent dependency chains keep a superscalar core busy.
 * The states share one word stream: the encoder runs from the last symbol to the first and writes
 * words backward, the decoder runs forward and reads them in the order it needs them. Decoding
 * all eight lanes of a round and then renormalizing them in lane order reads the same words, so a
 * SIMD decoder (SSE4.1/AVX2, 8 lanes) reads this format unchanged.
 *   encode s (freq f, start c):  if x >= f * 2^19: emit x & 0xffff, x >>= 16
 *                                x = (x / f) * M + x % f + c       (x / f by an exact reciprocal,
 *                                                                   Alverson, valid for x < 2^31)
 *   decode:                      slot = x % M; s = the symbol with c_s <= slot < c_s + f_s
 *                                x = f_s * (x / M) + slot - c_s
 *                                if x < L: x = x << 16 | next word
 * The decoder looks s, f_s and slot - c_s up in tables of M entries (20 KiB on the stack), built
 * from the frequencies of each message.
 *
 * Normalization. Counts c_s become f_s = round(c_s * M / n), at least 1 for a present symbol; then
 * the sum is brought to M exactly by +-1 steps, each on the symbol whose step costs the fewest
 * bits (the cost is about c_s / (f_s +- 1/2); compared exactly in integers, ties to the lower
 * symbol). The table depends on nothing but the input.
 *
 * Wire format (little-endian; n and nsym are known to both sides and not sent):
 *   constant (n == 0, or one distinct symbol):
 *     u8 0, u8 s                                                              2 bytes, s < nsym
 *   rANS (two or more distinct symbols):
 *     u8 1
 *     f_0 .. f_{nsym-1}: LEB128 varints of 1 or 2 bytes, canonical; f_s < M, sum exactly M, at
 *       least two nonzero (symbol s has start c_s = f_0 + ... + f_{s-1})
 *     min(n, 8) u32: the encoder's final states x_0.., each in [2^15, 2^31)
 *     u16 words to the end of the message, in the order the decoder reads them (an even count)
 * The encoder starts every state at L, so after decoding exactly n symbols every state used is L
 * again and the words are used up; the decoder checks both, which also catches a wrong n.
 *
 * Invariants. tempo__rans_encode writes only out[0, cap) and answers 0 (the caller sends the
 * symbols packed or raw) when the message would not fit, when nsym is out of range or when a symbol
 * is >= nsym; tempo__rans_bound(n, nsym) bytes always fit. tempo__rans_decode reads only
 * in[0, len), writes only sym[0, n), and answers TEMPO_ERR_REMOTE with a sentence for anything
 * inconsistent. Exception to "outputs only on success": on error sym[0, n) may hold partial
 * output, because validating the stream before writing would cost a second decoding pass.
 *
 * Size. Every symbol grows log2(x) + (bits emitted) by at most log2(M / f_s) + log2(9/8) <= 12.17
 * bits (x >= 8 f_s before each step), so the stream takes at most 1.522 n bytes whatever the input;
 * on real data it is within a fraction of a percent of n * H / 8 (H the empirical entropy), plus a
 * header of 1 + (1..2) * nsym + 4 * min(n, 8) bytes.
 */
#include "config.h"

#include "core/tempo_int.h"
#include "quant/quant.h"

#define RANS_SCALE_BITS 12
#define RANS_M (1u << RANS_SCALE_BITS) /* frequencies sum to M */
#define RANS_L (1u << 15)              /* a normalized state lies in [L, 2^31) */
#define RANS_XMAX_SHIFT 19             /* emit before encoding s when x >= f_s << 19 (L/M*2^16) */
#define RANS_LANES 8                   /* interleaved states; symbol i uses state i % 8 */
#define RANS_FMT_CONST 0
#define RANS_FMT_RANS 1

/* Byte-wise little-endian access: alignment-free, and compilers emit a single load or store. */
static inline uint32_t rans_ld16(const uint8_t *p)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
#else
    return (uint32_t)p[0] | (uint32_t)p[1] << 8;
#endif
}

static inline void rans_st16(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static inline uint32_t rans_ld32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void rans_st32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

size_t tempo__rans_bound(size_t n, int nsym)
{
    size_t table = nsym > 0 && nsym <= 256 ? 2 * (size_t)nsym : 512;
    /* 1.522 n (see the header) rounded up to n + n/2 + n/32 + 2, plus the states and the table */
    return 1 + table + 4 * RANS_LANES + n + n / 2 + n / 32 + 2;
}

/* ---------------------------------------------------------------------------------------------- */
/* Frequencies                                                                                    */
/* ---------------------------------------------------------------------------------------------- */

/* cnt[s] = occurrences of s in sym[0, n). Eight bytes per load into four sub-histograms, so that
 * runs of one symbol do not serialize on one counter; sub-counts are flushed before they could
 * overflow. */
static void rans_count(const uint8_t *sym, size_t n, uint64_t cnt[256])
{
    uint32_t c[4][256];
    memset(cnt, 0, 256 * sizeof(cnt[0]));
    while (n > 0) {
        size_t chunk = TEMPO_MIN(n, (size_t)1 << 30);
        size_t i = 0;
        memset(c, 0, sizeof(c));
        for (; i + 8 <= chunk; i += 8) {
            uint64_t w;
            memcpy(&w, sym + i, 8);
            c[0][w & 255]++;
            c[1][(w >> 8) & 255]++;
            c[2][(w >> 16) & 255]++;
            c[3][(w >> 24) & 255]++;
            c[0][(w >> 32) & 255]++;
            c[1][(w >> 40) & 255]++;
            c[2][(w >> 48) & 255]++;
            c[3][w >> 56]++;
        }
        for (; i < chunk; i++) {
            c[0][sym[i]]++;
        }
        for (int s = 0; s < 256; s++) {
            cnt[s] += (uint64_t)c[0][s] + c[1][s] + c[2][s] + c[3][s];
        }
        sym += chunk;
        n -= chunk;
    }
}

/* Frequencies f[0, nsym) summing to M from counts with at least two nonzero (see the header).
 * Counts are scaled down (a present symbol stays >= 1) until their total is below 2^40, so that
 * c * (2 f + 1) < 2^53 and every comparison below is exact in 64 bits. */
static void rans_normalize(const uint64_t *cnt, int nsym, uint32_t *f)
{
    uint64_t c[256], tot = 0, raw = 0;
    int shift = 0;
    for (int s = 0; s < nsym; s++) {
        raw += cnt[s];
    }
    while ((raw >> shift) >= ((uint64_t)1 << 39)) {
        shift++;
    }
    for (int s = 0; s < nsym; s++) {
        c[s] = cnt[s] ? TEMPO_MAX(cnt[s] >> shift, 1) : 0;
        tot += c[s];
    }
    int64_t sum = 0;
    for (int s = 0; s < nsym; s++) {
        f[s] = 0;
        if (c[s]) {
            f[s] = (uint32_t)TEMPO_MAX((c[s] * RANS_M + tot / 2) / tot, 1);
            sum += f[s];
        }
    }
    /* Adding one to f_s saves about c_s * log2(1 + 1/f_s) ~ c_s / (f_s + 1/2) bits: take the
     * largest saving. Removing one costs about c_s / (f_s - 1/2): take the smallest cost, never
     * below 1. The total moves by at most nsym, so the quadratic scan is cheap. */
    while (sum < (int64_t)RANS_M) {
        int best = -1;
        for (int s = 0; s < nsym; s++) {
            if (c[s] && (best < 0 || c[s] * (2 * f[best] + 1) > c[best] * (2 * f[s] + 1))) {
                best = s;
            }
        }
        f[best]++;
        sum++;
    }
    while (sum > (int64_t)RANS_M) {
        int best = -1;
        for (int s = 0; s < nsym; s++) {
            if (f[s] > 1 && (best < 0 || c[s] * (2 * f[best] - 1) < c[best] * (2 * f[s] - 1))) {
                best = s;
            }
        }
        f[best]--;
        sum--;
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Encoder                                                                                        */
/* ---------------------------------------------------------------------------------------------- */

/* One symbol's encoding constants: x / f = (x * rcp) >> shift exactly for x < 2^31 (Alverson),
 * so x / f * M + x % f + start = x + bias + (x / f) * (M - f). */
typedef struct rans_esym {
    uint32_t x_max; /* f << 19: emit a word first when x >= x_max */
    uint32_t rcp;   /* ceil(2^(31 + k) / f), k = ceil(log2 f); 2^32 - 1 for f = 1 */
    uint32_t bias;  /* start (start + M - 1 for f = 1, where the quotient comes out as x - 1) */
    uint16_t cmpl;  /* M - f */
    uint16_t shift; /* 31 + k (32 for f = 1) */
} rans_esym_t;

static void rans_esym_init(rans_esym_t *e, uint32_t start, uint32_t f)
{
    e->x_max = f << RANS_XMAX_SHIFT;
    e->cmpl = (uint16_t)(RANS_M - f);
    if (f == 1) {
        e->rcp = ~0u;
        e->shift = 32;
        e->bias = start + RANS_M - 1;
    } else {
        uint32_t k = 0;
        while (f > (1u << k)) {
            k++;
        }
        e->rcp = (uint32_t)((((uint64_t)1 << (31 + k)) + f - 1) / f);
        e->shift = (uint16_t)(31 + k);
        e->bias = start;
    }
}

/* Encode one symbol into *x with every bound checked; -1 if the word does not fit above lim. */
static inline int rans_enc_checked(uint32_t *x, const rans_esym_t *e, uint8_t **p,
                                   const uint8_t *lim)
{
    uint32_t v = *x;
    if (v >= e->x_max) {
        if (*p - lim < 2) {
            return -1;
        }
        *p -= 2;
        rans_st16(*p, v);
        v >>= 16;
    }
    *x = v + e->bias + (uint32_t)(((uint64_t)v * e->rcp) >> e->shift) * e->cmpl;
    return 0;
}

/* The word is stored one slot below p whether or not it is emitted (the slot is free, and a store
 * is cheaper than a branch that mispredicts on every eighth symbol); p moves only if it is. */
#define RANS_ENC(x, s)                                                                 \
    do {                                                                               \
        const rans_esym_t *e_ = &es[(s)];                                              \
        uint32_t c_ = (x) >= e_->x_max;                                                \
        rans_st16(p - 2, (x));                                                         \
        p -= 2 * c_;                                                                   \
        (x) = c_ ? (x) >> 16 : (x);                                                    \
        (x) += e_->bias + (uint32_t)(((uint64_t)(x)*e_->rcp) >> e_->shift) * e_->cmpl; \
    } while (0)

/* Full rounds sym[i - 8, i), last round first, while 16 bytes are free above lim (a round emits
 * at most 8 words). Returns the number of symbols still to encode; *pp is the stream start. */
static size_t rans_enc_rounds(const uint8_t *sym, size_t i, const rans_esym_t *es, uint32_t *x,
                              uint8_t **pp, const uint8_t *lim)
{
    uint8_t *p = *pp;
    uint32_t x0 = x[0], x1 = x[1], x2 = x[2], x3 = x[3];
    uint32_t x4 = x[4], x5 = x[5], x6 = x[6], x7 = x[7];
    while (i >= RANS_LANES && p - lim >= 2 * RANS_LANES) {
        const uint8_t *s = sym + i - RANS_LANES;
        RANS_ENC(x7, s[7]);
        RANS_ENC(x6, s[6]);
        RANS_ENC(x5, s[5]);
        RANS_ENC(x4, s[4]);
        RANS_ENC(x3, s[3]);
        RANS_ENC(x2, s[2]);
        RANS_ENC(x1, s[1]);
        RANS_ENC(x0, s[0]);
        i -= RANS_LANES;
    }
    x[0] = x0, x[1] = x1, x[2] = x2, x[3] = x3;
    x[4] = x4, x[5] = x5, x[6] = x6, x[7] = x7;
    *pp = p;
    return i;
}

size_t tempo__rans_encode(const uint8_t *sym, size_t n, int nsym, uint8_t *out, size_t cap)
{
    uint64_t cnt[256];
    uint32_t f[256];
    rans_esym_t es[256];
    if (nsym < 1 || nsym > 256 || !out || (n > 0 && !sym)) {
        return 0;
    }
    if (n == 0) {
        if (cap < 2) {
            return 0;
        }
        out[0] = RANS_FMT_CONST;
        out[1] = 0;
        return 2;
    }
    rans_count(sym, n, cnt);
    int present = 0, last = 0;
    for (int s = 0; s < 256; s++) {
        if (cnt[s]) {
            if (s >= nsym) {
                return 0; /* a caller bug: send raw, where the receiver's check will catch it */
            }
            present++;
            last = s;
        }
    }
    if (present == 1) {
        /* f = M would make encoding the identity: nothing to send but the symbol */
        if (cap < 2) {
            return 0;
        }
        out[0] = RANS_FMT_CONST;
        out[1] = (uint8_t)last;
        return 2;
    }
    rans_normalize(cnt, nsym, f);

    size_t lanes = TEMPO_MIN(n, (size_t)RANS_LANES);
    size_t table = 0;
    for (int s = 0; s < nsym; s++) {
        table += f[s] < 128 ? 1 : 2;
    }
    size_t hdr = 1 + table + 4 * lanes;
    if (cap < hdr) {
        return 0;
    }
    uint32_t start = 0;
    for (int s = 0; s < nsym; s++) {
        rans_esym_init(&es[s], start, f[s] ? f[s] : 1); /* absent: never used, kept finite */
        start += f[s];
    }

    /* The stream grows down from the end of out, above the header; moved down to it at the end.
     * The last, partial round goes first (the decoder finishes with it). */
    uint32_t x[RANS_LANES];
    for (int j = 0; j < RANS_LANES; j++) {
        x[j] = RANS_L;
    }
    uint8_t *p = out + cap;
    const uint8_t *lim = out + hdr;
    size_t i = n;
    for (; i % RANS_LANES; i--) {
        if (rans_enc_checked(&x[(i - 1) % RANS_LANES], &es[sym[i - 1]], &p, lim) < 0) {
            return 0;
        }
    }
    i = rans_enc_rounds(sym, i, es, x, &p, lim);
    for (; i > 0; i--) { /* little room left: one checked step at a time */
        if (rans_enc_checked(&x[(i - 1) % RANS_LANES], &es[sym[i - 1]], &p, lim) < 0) {
            return 0;
        }
    }

    uint8_t *o = out;
    *o++ = RANS_FMT_RANS;
    for (int s = 0; s < nsym; s++) {
        if (f[s] < 128) {
            *o++ = (uint8_t)f[s];
        } else {
            *o++ = (uint8_t)(f[s] | 128);
            *o++ = (uint8_t)(f[s] >> 7);
        }
    }
    for (size_t j = 0; j < lanes; j++, o += 4) {
        rans_st32(o, x[j]);
    }
    size_t words = (size_t)(out + cap - p);
    memmove(o, p, words);
    return hdr + words;
}

/* ---------------------------------------------------------------------------------------------- */
/* Decoder                                                                                        */
/* ---------------------------------------------------------------------------------------------- */

/* What the decoder needs of a slot besides its symbol: two loads are cheaper than unpacking. */
typedef struct rans_dslot {
    uint16_t f;    /* frequency of the slot's symbol, < M */
    uint16_t bias; /* slot - start of the slot's symbol */
} rans_dslot_t;

/* One step of a lane. The renormalization is arithmetic, not a select: compilers turn a select
 * into a branch here, and that branch is taken about once in eight, at random (measured: a third
 * slower). The word is loaded whether or not it is needed (the caller guarantees two readable
 * bytes at p). */
#define RANS_DEC(x, k)                                                           \
    do {                                                                         \
        uint32_t sl_ = (x) & (RANS_M - 1);                                       \
        o[k] = stab[sl_];                                                        \
        (x) = (uint32_t)dtab[sl_].f * ((x) >> RANS_SCALE_BITS) + dtab[sl_].bias; \
        uint32_t w_ = rans_ld16(p);                                              \
        uint32_t c_ = (x) < RANS_L;                                              \
        (x) = (x) << (c_ << 4) | (w_ & (0u - c_));                               \
        p += 2 * c_;                                                             \
    } while (0)

/* Full rounds from symbol i while 16 bytes remain (a round reads at most 8 words). Returns the
 * next symbol to decode; *pp is the next word. */
static size_t rans_dec_rounds(uint8_t *sym, size_t i, size_t n, const uint8_t *stab,
                              const rans_dslot_t *dtab, uint32_t *x, const uint8_t **pp,
                              const uint8_t *end)
{
    const uint8_t *p = *pp;
    uint32_t x0 = x[0], x1 = x[1], x2 = x[2], x3 = x[3];
    uint32_t x4 = x[4], x5 = x[5], x6 = x[6], x7 = x[7];
    while (n - i >= RANS_LANES && end - p >= 2 * RANS_LANES) {
        uint8_t *o = sym + i;
        RANS_DEC(x0, 0);
        RANS_DEC(x1, 1);
        RANS_DEC(x2, 2);
        RANS_DEC(x3, 3);
        RANS_DEC(x4, 4);
        RANS_DEC(x5, 5);
        RANS_DEC(x6, 6);
        RANS_DEC(x7, 7);
        i += RANS_LANES;
    }
    x[0] = x0, x[1] = x1, x[2] = x2, x[3] = x3;
    x[4] = x4, x[5] = x5, x[6] = x6, x[7] = x7;
    *pp = p;
    return i;
}

tempo_status_t tempo__rans_decode(const uint8_t *in, size_t len, size_t n, int nsym, uint8_t *sym)
{
    if (nsym < 1 || nsym > 256 || (len > 0 && !in) || (n > 0 && !sym)) {
        return tempo__err(TEMPO_ERR_INVALID,
                          "rANS decode: nsym %d is not in [1, 256] or a buffer is NULL", nsym);
    }
    if (len < 2) {
        return tempo__err(TEMPO_ERR_REMOTE,
                          "rANS message of %zu bytes is shorter than any valid one (2 bytes)", len);
    }
    if (in[0] == RANS_FMT_CONST) {
        if (len != 2 || in[1] >= nsym) {
            return tempo__err(TEMPO_ERR_REMOTE,
                              "rANS constant message is malformed: %zu bytes "
                              "(expected 2), symbol %u (expected < %d)",
                              len, in[1], nsym);
        }
        if (n > 0) {
            memset(sym, in[1], n);
        }
        return TEMPO_OK;
    }
    if (in[0] != RANS_FMT_RANS) {
        return tempo__err(TEMPO_ERR_REMOTE,
                          "rANS message starts with unknown format byte %u (expected 0 or 1)",
                          in[0]);
    }
    if (n == 0) {
        return tempo__err(TEMPO_ERR_REMOTE, "rANS message carries a coded stream for 0 symbols "
                                            "(the encoder sends a 2-byte constant message)");
    }

    /* Frequencies: each varint checked before the byte after it is read. */
    uint32_t f[256];
    size_t pos = 1;
    uint32_t sum = 0;
    int present = 0;
    for (int s = 0; s < nsym; s++) {
        if (pos >= len) {
            return tempo__err(TEMPO_ERR_REMOTE,
                              "rANS message of %zu bytes ends inside its "
                              "frequency table (symbol %d of %d)",
                              len, s, nsym);
        }
        uint32_t v = in[pos++];
        if (v & 128) {
            if (pos >= len) {
                return tempo__err(TEMPO_ERR_REMOTE,
                                  "rANS message of %zu bytes ends inside its "
                                  "frequency table (symbol %d of %d)",
                                  len, s, nsym);
            }
            uint32_t hi = in[pos++];
            v = (v & 127) | hi << 7;
            if (hi == 0 || v >= RANS_M) {
                return tempo__err(TEMPO_ERR_REMOTE,
                                  "rANS frequency of symbol %d is malformed "
                                  "(second varint byte %u; frequencies are < %u, canonical)",
                                  s, hi, RANS_M);
            }
        }
        f[s] = v;
        sum += v;
        present += v > 0;
    }
    if (sum != RANS_M || present < 2) {
        return tempo__err(TEMPO_ERR_REMOTE,
                          "rANS frequency table is inconsistent: %d symbols "
                          "present with frequencies summing to %u (expected at "
                          "least 2 summing to %u)",
                          present, sum, RANS_M);
    }

    size_t lanes = TEMPO_MIN(n, (size_t)RANS_LANES);
    if (len - pos < 4 * lanes) {
        return tempo__err(TEMPO_ERR_REMOTE, "rANS message of %zu bytes ends inside its %zu states",
                          len, lanes);
    }
    if ((len - pos - 4 * lanes) % 2) {
        return tempo__err(TEMPO_ERR_REMOTE,
                          "rANS stream of %zu bytes is not a whole number of 16-bit words",
                          len - pos - 4 * lanes);
    }
    uint32_t x[RANS_LANES];
    for (size_t j = 0; j < RANS_LANES; j++) {
        x[j] = RANS_L; /* unused lanes (n < 8) stay at L */
        if (j < lanes) {
            x[j] = rans_ld32(in + pos + 4 * j);
            if (x[j] < RANS_L || x[j] >= (1u << 31)) {
                return tempo__err(TEMPO_ERR_REMOTE,
                                  "rANS state %zu is 0x%08x, outside [0x%x, 0x80000000)", j, x[j],
                                  RANS_L);
            }
        }
    }
    pos += 4 * lanes;

    uint8_t stab[RANS_M];      /* slot -> symbol */
    rans_dslot_t dtab[RANS_M]; /* slot -> frequency, slot - start */
    uint32_t start = 0;
    for (int s = 0; s < nsym; s++) {
        memset(stab + start, s, f[s]);
        for (uint32_t k = 0; k < f[s]; k++) {
            dtab[start + k].f = (uint16_t)f[s];
            dtab[start + k].bias = (uint16_t)k;
        }
        start += f[s];
    }

    /* From a state in [L, 2^31) a step gives f * (x >> 12) + bias in [8, 2^31), and the
     * renormalization brings it back to [L, 2^31): whatever the words say, the states stay in
     * range; only the reads need bounds. */
    const uint8_t *p = in + pos, *end = in + len;
    size_t i = rans_dec_rounds(sym, 0, n, stab, dtab, x, &p, end);
    for (; i < n; i++) {
        uint32_t *xj = &x[i % RANS_LANES], sl = *xj & (RANS_M - 1);
        sym[i] = stab[sl];
        *xj = (uint32_t)dtab[sl].f * (*xj >> RANS_SCALE_BITS) + dtab[sl].bias;
        if (*xj < RANS_L) {
            if (end - p < 2) {
                return tempo__err(TEMPO_ERR_REMOTE,
                                  "rANS stream of %zu bytes runs out at symbol %zu of %zu", len, i,
                                  n);
            }
            *xj = *xj << 16 | rans_ld16(p);
            p += 2;
        }
    }
    if (p != end) {
        return tempo__err(TEMPO_ERR_REMOTE,
                          "rANS stream has %zu bytes left after %zu symbols "
                          "(wrong symbol count or corrupted message)",
                          (size_t)(end - p), n);
    }
    for (size_t j = 0; j < lanes; j++) {
        if (x[j] != RANS_L) {
            return tempo__err(TEMPO_ERR_REMOTE,
                              "rANS state %zu ends at 0x%08x instead of 0x%x "
                              "after %zu symbols (corrupted message)",
                              j, x[j], RANS_L, n);
        }
    }
    return TEMPO_OK;
}
