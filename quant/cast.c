/*
 * cast.c — the casting compressors: none (fp32 as is), fp16 and bf16 (round to nearest even).
 * Their encoded form is an array of numbers that sums like the data, so a collective adds the
 * encoded vectors with an ordinary ring (qcoll.c) instead of decoding per rank. Not unbiased in the
 * strict sense (round to nearest), but the error is the format's rounding, far below the other
 * compressors'. fp16 overflows above 65504: collectives divide by the rank count before summing
 * for TEMPO_AVG, as PyTorch's fp16 hook does.
 *
 * Wire format: count values, little-endian fp32 (none) or 16-bit (fp16, bf16).
 */
#include "config.h"

#include "core/dtype.h"
#include "quant/quant.h"

static int half_dtype(const tempo__qparams_t *p)
{
    return strcmp(tempo__qkinds[p->kind].name, "bf16") == 0 ? TEMPO_BFLOAT16 : TEMPO_FLOAT16;
}

size_t tempo__qcast_bound(const tempo__qparams_t *p, size_t count);
size_t tempo__qcast_bound(const tempo__qparams_t *p, size_t count)
{
    return count * (strcmp(tempo__qkinds[p->kind].name, "none") == 0 ? 4 : 2);
}

size_t tempo__qcast_encode(const tempo__qctx_t *c, const float *in, size_t count, void *out);
size_t tempo__qcast_encode(const tempo__qctx_t *c, const float *in, size_t count, void *out)
{
    if (strcmp(tempo__qkinds[c->p->kind].name, "none") == 0) {
        memcpy(out, in, count * 4);
        return count * 4;
    }
    tempo__f32_to_half((tempo_dtype_t)half_dtype(c->p), in, out, count);
    return count * 2;
}

tempo_status_t tempo__qcast_decode(const tempo__qctx_t *c, const void *in, size_t len, size_t count,
                                   float *out, int accumulate);
tempo_status_t tempo__qcast_decode(const tempo__qctx_t *c, const void *in, size_t len, size_t count,
                                   float *out, int accumulate)
{
    if (len != tempo__qcast_bound(c->p, count)) {
        return tempo__err(TEMPO_ERR_REMOTE,
                          "malformed compressed message: %zu bytes for %zu coordinates of %s", len,
                          count, tempo__qkinds[c->p->kind].name);
    }
    int none = strcmp(tempo__qkinds[c->p->kind].name, "none") == 0;
    if (!accumulate) {
        if (none) {
            memcpy(out, in, count * 4);
        } else {
            tempo__half_to_f32((tempo_dtype_t)half_dtype(c->p), in, out, count);
        }
        return TEMPO_OK;
    }
    float tmp[1024];
    for (size_t i = 0; i < count; i += 1024) {
        size_t n = TEMPO_MIN((size_t)1024, count - i);
        if (none) {
            memcpy(tmp, (const float *)in + i, n * 4);
        } else {
            tempo__half_to_f32((tempo_dtype_t)half_dtype(c->p), (const uint16_t *)in + i, tmp, n);
        }
        for (size_t k = 0; k < n; k++) {
            out[i + k] += tmp[k];
        }
    }
    return TEMPO_OK;
}
