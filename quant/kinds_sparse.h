/*
 * kinds_sparse.h — the kind functions of scaled sign (sign.c), top-k and random-k (sparse.c), for
 * the kind table in quant.c, plus the helpers the compressed collectives and the tests share with
 * them. The PowerSGD kernels (powersgd.c) are declared in quant.h. Not installed.
 *
 * Every function here has the signature of the tempo__qkind_t member it fills. The encoders are
 * pure functions of (input, parameters, ctx); error feedback belongs to the caller, which adds the
 * residual before encode() and keeps input - decode(encode(input)).
 *
 * top-k and random-k send uint32 indices (top-k) or derive them (random-k): both require
 * count <= UINT32_MAX, which the compressed collectives guarantee by splitting into blocks.
 */
#ifndef TEMPO_QUANT_KINDS_SPARSE_H
#define TEMPO_QUANT_KINDS_SPARSE_H

#include "quant/quant.h"

/* sign: per bucket, the mean |x| (fp32) and one sign bit per coordinate (sign.c) */
void tempo__qsign_defaults(tempo__qparams_t *p);
size_t tempo__qsign_bound(const tempo__qparams_t *p, size_t count);
size_t tempo__qsign_encode(const tempo__qctx_t *c, const float *in, size_t count, void *out);
tempo_status_t tempo__qsign_decode(const tempo__qctx_t *c, const void *in, size_t len, size_t count,
                                   float *out, int accumulate);

/* top-k: k ascending uint32 indices, then their k fp32 values (sparse.c) */
void tempo__qtopk_defaults(tempo__qparams_t *p);
size_t tempo__qtopk_bound(const tempo__qparams_t *p, size_t count);
size_t tempo__qtopk_encode(const tempo__qctx_t *c, const float *in, size_t count, void *out);
tempo_status_t tempo__qtopk_decode(const tempo__qctx_t *c, const void *in, size_t len, size_t count,
                                   float *out, int accumulate);

/* random-k: k fp32 values at indices drawn from c->shared_seed (sparse.c) */
void tempo__qrandk_defaults(tempo__qparams_t *p);
size_t tempo__qrandk_bound(const tempo__qparams_t *p, size_t count);
size_t tempo__qrandk_encode(const tempo__qctx_t *c, const float *in, size_t count, void *out);
tempo_status_t tempo__qrandk_decode(const tempo__qctx_t *c, const void *in, size_t len,
                                    size_t count, float *out, int accumulate);

/** Coordinates top-k and random-k keep of count under ratio: 0 for count 0, else
 *  clamp(ceil(ratio * count), 1, count), the ceiling taken with a few ulps of slack so that
 *  0.07 * 100 gives 7, not 8. Both sides of a message compute it; it is never sent. */
size_t tempo__qsparse_k(double ratio, size_t count);

/** The k distinct indices random-k uses for (seed, count, k), ascending: a uniformly random
 *  k-subset of [0, count) (Floyd's algorithm on an exact integer generator, so every rank and every
 *  build gets the same set). k <= count <= UINT32_MAX; idx has room for k entries. Uses a count/8
 *  byte bitmap from the heap when k is large; without memory it falls back to a slower path that
 *  gives the same set. */
void tempo__qrandk_indices(uint64_t seed, size_t count, size_t k, uint32_t *idx);
/** The heap-free path of tempo__qrandk_indices (O(k^1.5) expected): same result (tests). */
void tempo__qrandk_indices_inplace(uint64_t seed, size_t count, size_t k, uint32_t *idx);

#endif /* TEMPO_QUANT_KINDS_SPARSE_H */
