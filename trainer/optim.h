/*
 * optim.h — AdamW, global-norm gradient clipping and the learning-rate schedule of the trainer.
 *
 * AdamW follows torch.optim.AdamW (default, non-fused) step for step in fp32: decoupled weight
 * decay p -= lr * wd * p first, then m = β1 m + (1 - β1) g, v = β2 v + (1 - β2) g², and
 * p -= (lr / (1 - β1^t)) · m / (sqrt(v) / sqrt(1 - β2^t) + eps). Weight decay applies only to
 * the 2-D tensors of the model (gpt_tensor_t.decay: matmul weights and embeddings), as nanoGPT and
 * llm.c's GPU trainer do.
 *
 * adamw_step works on any slice [lo, hi) of the flat parameter buffer with m and v of length
 * hi - lo, so a ZeRO shard updates just its own part; every element is independent, so updating a
 * buffer slice by slice gives the same bits as updating it whole.
 *
 * Not here: the reduction of gradients or of the squared norm across ranks (the caller adds the
 * per-rank grad_sumsq values, in rank order, before clip_scale).
 */
#ifndef TEMPO_TRAINER_OPTIM_H
#define TEMPO_TRAINER_OPTIM_H

#include <stddef.h>

#include "trainer/model.h"

typedef struct {
    float beta1;        /* 0.9 */
    float beta2;        /* 0.95 (llm.c GPU, nanoGPT) or 0.999 (PyTorch default) */
    float eps;          /* 1e-8 */
    float weight_decay; /* 0.1; applied to 2-D tensors only */
} adamw_cfg_t;

/*
 * One AdamW update of the parameters [lo, hi) of model's buffer. params, grads, m and v point at
 * the slice's first element (params = model->params + lo for an unsharded update, or a shard's
 * own copy); each holds hi - lo floats. t is the step number, starting at 1 (bias correction).
 * The gradient used is grads[i] * grad_scale (clip_scale's factor, or 1). m and v start at 0.
 * Returns 0, or -1 (gpt_last_error) for a slice outside the model or t < 1.
 */
int adamw_step(const gpt_model_t *model, float *params, const float *grads, float *m, float *v,
               size_t lo, size_t hi, int t, const adamw_cfg_t *cfg, float lr, float grad_scale);

/*
 * Σ g[i]² in double, in a fixed order (blocks of 2^14 elements summed in 8 interleaved lanes, then
 * the block sums in order): the same bits for any thread count.
 */
double grad_sumsq(const float *g, size_t n);

/*
 * torch.nn.utils.clip_grad_norm_'s factor for a total norm sqrt(Σ g²): max_norm / (norm + 1e-6)
 * when that is below 1, else 1 (computed in fp32 as PyTorch does). max_norm <= 0 disables: 1.
 */
float clip_scale(double total_norm, float max_norm);

/*
 * llm.c's schedule for step = 0, 1, ...: linear warm-up lr = max_lr (step + 1) / warmup for
 * step < warmup, then cosine decay to min_lr at step = total:
 *   r = (step - warmup) / (total - warmup),  lr = min_lr + 0.5 (1 + cos(π r)) (max_lr - min_lr),
 * and min_lr after total (evaluated in double, rounded to float once).
 */
float lr_schedule(int step, int warmup, int total, float max_lr, float min_lr);

#endif /* TEMPO_TRAINER_OPTIM_H */
