/*
 * zero.c — ZeRO's shard of a set of gradient groups (zero.h): the slice arithmetic, the AdamW
 * moments of the owned slices, a slice's squared norm and its update, for train.c and pp_train.c
 * alike.
 *
 * Invariant: a group's slices partition it (dist_slice: dp slices of ceil(n / dp), the last ones
 * clipped to n, as the backends pad the group), so the ranks' updates together cover every
 * parameter once, at any dp.
 */
#include <stdlib.h>

#include "trainer/zero.h"

size_t zero_slice_n(const zero_shard_t *z, int g)
{
    size_t len = z->groups[g].n;
    if (z->zero) {
        dist_slice(z->groups[g].n, z->dp, z->rank, NULL, &len);
    }
    return len;
}

size_t zero_slice_off(const zero_shard_t *z, int g)
{
    size_t off = 0;
    if (z->zero) {
        dist_slice(z->groups[g].n, z->dp, z->rank, &off, NULL);
    }
    return z->groups[g].off + off;
}

int zero_shard_init(zero_shard_t *z, const dist_group_t *groups, int ngroups, int zero, int dp,
                    int rank)
{
    *z = (zero_shard_t){.groups = groups, .ngroups = ngroups, .zero = zero, .dp = dp,
                        .rank = rank};
    z->shard_off = calloc((size_t)ngroups, sizeof(size_t));
    if (!z->shard_off) {
        return -1;
    }
    for (int g = 0; g < ngroups; g++) {
        z->shard_off[g] = z->shard_n;
        z->shard_n += zero_slice_n(z, g);
    }
    z->m1 = calloc(z->shard_n, sizeof(float));
    z->m2 = calloc(z->shard_n, sizeof(float));
    if (!z->m1 || !z->m2) {
        zero_shard_free(z);
        return -1;
    }
    return 0;
}

void zero_shard_free(zero_shard_t *z)
{
    free(z->shard_off);
    free(z->m1);
    free(z->m2);
    z->shard_off = NULL;
    z->m1 = z->m2 = NULL;
}

double zero_range_sumsq(const gpt_model_t *m, const float *g, size_t lo, size_t hi)
{
    if (m->tp.size <= 1) {
        return grad_sumsq(g, hi - lo);
    }
    double sq = 0;
    for (int i = 0; i < m->num_tensors; i++) {
        const gpt_tensor_t *x = &m->tensors[i];
        size_t a = x->offset > lo ? x->offset : lo;
        size_t b = x->offset + x->size < hi ? x->offset + x->size : hi;
        if (a < b && (x->tp_split != GPT_TP_REPLICATED || m->tp.rank == 0)) {
            sq += grad_sumsq(g + (a - lo), b - a);
        }
    }
    return sq;
}

int zero_update(const zero_shard_t *z, const gpt_model_t *m, int g, float *p, const float *grad,
                int step, const adamw_cfg_t *ac, float lr, float scale)
{
    size_t off = zero_slice_off(z, g), n = zero_slice_n(z, g), so = z->shard_off[g];
    return adamw_step(m, p, grad, z->m1 + so, z->m2 + so, off, off + n, step, ac, lr, scale);
}
