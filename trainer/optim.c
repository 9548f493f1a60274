/*
 * optim.c — AdamW on a slice of the parameter buffer, global-norm clipping, the learning-rate
 * schedule (see optim.h for the formulas and the contract).
 *
 * Not here: anything that talks to other ranks.
 *
 * Every element's update depends only on that element, so slices, threads and shards all give the
 * same bits. The AdamW arithmetic follows the order of torch.optim.AdamW's single-tensor path
 * (PyTorch 1.13): the scalars (1 - lr wd, 1 - β, the step size, the square root of the second
 * bias correction) are computed in double and rounded to float once, as PyTorch passes Python
 * floats to its fp32 kernels.
 */
#include "config.h"

#include <math.h>
#include <stdlib.h>

#include "trainer/optim.h"

#ifdef _OPENMP
#define OMP(x) _Pragma(#x)
#else
#define OMP(x)
#endif

/* Elements [0, n) of one tensor's part of the slice; decay_mul is 1 - lr wd, or 1. */
static void adamw_segment(float *p, const float *g, float *m, float *v, size_t n, float decay_mul,
                          float b1, float omb1, float b2, float omb2, float neg_step,
                          float bc2_sqrt, float eps, float grad_scale)
{
    OMP(omp parallel for simd schedule(static) if (n > 32768))
    for (size_t i = 0; i < n; i++) {
        const float gi = g[i] * grad_scale;
        const float mi = m[i] * b1 + omb1 * gi;
        const float vi = v[i] * b2 + omb2 * gi * gi;
        const float denom = sqrtf(vi) / bc2_sqrt + eps;
        m[i] = mi;
        v[i] = vi;
        p[i] = p[i] * decay_mul + (neg_step * mi) / denom;
    }
}

int adamw_step(const gpt_model_t *model, float *params, const float *grads, float *m, float *v,
               size_t lo, size_t hi, int t, const adamw_cfg_t *cfg, float lr, float grad_scale)
{
    if (lo > hi || hi > model->num_params) {
        return gpt_fail("adamw: slice [%zu, %zu) is not inside the %zu parameters", lo, hi,
                        model->num_params);
    }
    if (t < 1) {
        return gpt_fail("adamw: step %d: steps count from 1", t);
    }
    const double b1 = cfg->beta1, b2 = cfg->beta2;
    const double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
    const float neg_step = (float)(-(double)lr / bc1);
    const float bc2_sqrt = (float)sqrt(bc2);
    const float decay_mul = (float)(1.0 - (double)lr * cfg->weight_decay);
    /* walk the tensors that overlap [lo, hi): the decay decision is per tensor */
    for (int ti = 0; ti < model->num_tensors; ti++) {
        const gpt_tensor_t *tn = &model->tensors[ti];
        size_t s = tn->offset > lo ? tn->offset : lo;
        size_t e = tn->offset + tn->size < hi ? tn->offset + tn->size : hi;
        if (s >= e) {
            continue;
        }
        const size_t k = s - lo;
        adamw_segment(params + k, grads + k, m + k, v + k, e - s, tn->decay ? decay_mul : 1.0f,
                      (float)b1, (float)(1.0 - b1), (float)b2, (float)(1.0 - b2), neg_step,
                      bc2_sqrt, cfg->eps, grad_scale);
    }
    return 0;
}

#define SUMSQ_BLOCK 16384

/* Σ x² of one block in 8 interleaved double lanes, combined in lane order. */
static double sumsq_block(const float *x, size_t n)
{
    double s[8] = {0};
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        for (int l = 0; l < 8; l++) {
            s[l] += (double)x[i + l] * x[i + l];
        }
    }
    for (; i < n; i++) {
        s[i % 8] += (double)x[i] * x[i];
    }
    double total = 0.0;
    for (int l = 0; l < 8; l++) {
        total += s[l];
    }
    return total;
}

double grad_sumsq(const float *g, size_t n)
{
    const size_t nb = (n + SUMSQ_BLOCK - 1) / SUMSQ_BLOCK;
    double total = 0.0;
    double *part = nb > 1 ? malloc(nb * sizeof(double)) : NULL;
    if (!part) {
        /* one block, or no memory: the same sums in the same order, on one thread */
        for (size_t b = 0; b < nb; b++) {
            size_t i0 = b * SUMSQ_BLOCK;
            total += sumsq_block(g + i0, n - i0 < SUMSQ_BLOCK ? n - i0 : SUMSQ_BLOCK);
        }
        return total;
    }
    OMP(omp parallel for schedule(static))
    for (long b = 0; b < (long)nb; b++) {
        size_t i0 = (size_t)b * SUMSQ_BLOCK;
        part[b] = sumsq_block(g + i0, n - i0 < SUMSQ_BLOCK ? n - i0 : SUMSQ_BLOCK);
    }
    for (size_t b = 0; b < nb; b++) {
        total += part[b];
    }
    free(part);
    return total;
}

float clip_scale(double total_norm, float max_norm)
{
    if (max_norm <= 0.0f) {
        return 1.0f;
    }
    const float c = max_norm / ((float)total_norm + 1e-6f);
    return c < 1.0f ? c : 1.0f;
}

float lr_schedule(int step, int warmup, int total, float max_lr, float min_lr)
{
    if (step < warmup) {
        return (float)((double)max_lr * (step + 1) / warmup);
    }
    if (step >= total) {
        return min_lr;
    }
    const double r = (double)(step - warmup) / (double)(total - warmup);
    const double coeff = 0.5 * (1.0 + cos(M_PI * r));
    return (float)(min_lr + coeff * ((double)max_lr - min_lr));
}
