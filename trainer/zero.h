/*
 * zero.h — ZeRO's shard of a set of gradient groups (dist.h's dist_group_t), shared by the
 * trainer's data-parallel path (train.c) and its pipeline path (pp_train.c): which slice of each
 * group this DP rank owns, the AdamW moments of those slices, the squared norm of a slice and
 * the AdamW update of a slice.
 *
 * Layout: with ZeRO 1, 2 or 3, group g's n elements are dp slices of q = ceil(n / dp) (dist.h's
 * dist_slice: padded as DeepSpeed and FSDP pad, so any dp works) and rank r owns slice r, elements
 * [off + r q, off + min((r+1) q, n)) of the group's buffer (shorter, even empty, for the last
 * ranks when dp does not divide n); the shard arrays (m1, m2, and
 * the callers' own gradient or parameter shards) hold the owned slices of every group one after
 * the other, group g's at shard_off[g]. With ZeRO 0 the rank owns every group whole (shard_n is
 * the sum of the groups' n). Offsets are in the buffer of the group's model: one buffer for a
 * whole model, one per chunk for a pipeline rank's chunks.
 *
 * Not here: communication (dist.h posts the reduce-scatters and all-gathers), the groups
 * themselves (each caller cuts its model), the ZeRO 2/3 buffers that only train.c has.
 */
#ifndef TEMPO_TRAINER_ZERO_H
#define TEMPO_TRAINER_ZERO_H

#include <stddef.h>

#include "trainer/dist.h"
#include "trainer/model.h"
#include "trainer/optim.h"

typedef struct {
    const dist_group_t *groups; /* (ngroups), the caller's */
    int ngroups;
    int zero, dp, rank;  /* ZeRO stage; the DP group's size and this rank in it */
    size_t shard_n;      /* floats of this rank's shard: its slices of every group */
    size_t *shard_off;   /* (ngroups) offset of group g's slice in the shard arrays */
    float *m1, *m2;      /* (shard_n) AdamW moments of the owned slices, zeroed */
} zero_shard_t;

/* Lays out and allocates the shard of groups (kept by pointer) for rank of dp at ZeRO stage
 * zero: 0, or -1 when out of memory (nothing left allocated). */
int zero_shard_init(zero_shard_t *z, const dist_group_t *groups, int ngroups, int zero, int dp,
                    int rank);
void zero_shard_free(zero_shard_t *z);

/* Elements of this rank's slice of group g, and its offset in the group's buffer. */
size_t zero_slice_n(const zero_shard_t *z, int g);
size_t zero_slice_off(const zero_shard_t *z, int g);

/*
 * Σ g² of the gradients g[0, hi - lo) of m's buffer range [lo, hi), for the global norm: with
 * tensor parallelism (m->tp.size > 1) the sharded tensors count on every TP rank and the
 * replicated ones (the same on every TP rank) on TP rank 0 only, so that a sum over the TP group
 * counts every parameter once.
 */
double zero_range_sumsq(const gpt_model_t *m, const float *g, size_t lo, size_t hi);

/* AdamW (optim.h) on this rank's slice of group g of model m: p and grad point at the slice's
 * parameters and gradients (n = zero_slice_n floats each), the moments are the shard's. 0, or -1
 * with gpt_last_error(). */
int zero_update(const zero_shard_t *z, const gpt_model_t *m, int g, float *p, const float *grad,
                int step, const adamw_cfg_t *ac, float lr, float scale);

#endif /* TEMPO_TRAINER_ZERO_H */
