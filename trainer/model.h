/*
 * model.h — a GPT-2 language model on the CPU in fp32: parameters, forward, backward (the trainer's
 * model, in the spirit of llm.c's train_gpt2.c).
 *
 * Architecture: token + position embedding, L pre-LayerNorm blocks (LayerNorm eps 1e-5; causal
 * multi-head attention with a fused QKV projection; attention output projection; MLP C -> 4C -> C
 * with the tanh GELU), a final LayerNorm, and logits = lnf · wteᵀ (the LM head is tied to the token
 * embedding). The loss is the mean softmax cross-entropy over the B·T positions. No dropout, no
 * vocabulary padding (Vp = V).
 *
 * Not here: the optimizer (optim.h), data loading, anything distributed. The model does not use
 * tempo; a data-parallel caller hooks its communication between the per-layer calls below, and a
 * tensor-parallel one hands gpt_create_tp two all-reduce callbacks (gpt_tp_t), and a sequence-
 * parallel one an all-gather and a reduce-scatter too.
 *
 * Invariants
 *   - All parameters live in ONE contiguous fp32 buffer (params), the gradients in a second buffer
 *     of the same layout (grads). The buffer is ordered embeddings (wte, wpe), then block 0's
 *     tensors, block 1's, ..., then the final LayerNorm, so each "layer group" (-1 embeddings,
 *     0..L-1 blocks, L final LayerNorm) is one contiguous range, and backward finishes the groups
 *     in decreasing buffer order: L (after gpt_backward_head), L-1, ..., 0, then -1 (after
 *     gpt_backward_embed: wte also receives the LM head's gradient, so it is complete only then).
 *   - Gradients accumulate (+=) across backward calls until gpt_zero_grad().
 *   - Bitwise deterministic: the same inputs give the same bits from run to run AND for any number
 *     of OpenMP threads (every output element is computed by one thread in an order fixed by the
 *     shapes alone). Results may differ in the last bits between CPUs of different ISA levels
 *     (x86-64-v4, v3, baseline), whose builds of the row kernels differ in vector width and FMA
 *     use; the matmuls themselves give the same bits with AVX-512 and AVX2+FMA.
 *
 * Errors: functions that can fail return 0 or -1; after -1, gpt_last_error() returns a sentence
 * saying what was wrong (thread-local, valid until the next failing call in the thread).
 */
#ifndef TEMPO_TRAINER_MODEL_H
#define TEMPO_TRAINER_MODEL_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int max_seq_len; /* maximum T: rows of the position embedding */
    int vocab_size;  /* V (256 for byte-level text) */
    int n_layer;     /* L */
    int n_head;      /* NH; channels % n_head == 0 */
    int channels;    /* C */
} gpt_config_t;

#define GPT_NAME_MAX 32

/* One named view into the parameter (and gradient) buffer. */
typedef struct {
    char name[GPT_NAME_MAX]; /* "wte", "wpe", "h.3.ln1.w", "h.3.attn.qkv.w", ..., "lnf.b" */
    int ndim;                /* 1 or 2 */
    size_t shape[2];         /* (rows, cols) for 2-D; (n, 1) for 1-D */
    size_t offset;           /* first element in params / grads */
    size_t size;             /* elements: shape[0] * shape[1] */
    int layer;               /* -1 embeddings, 0..L-1 block, L final LayerNorm */
    int decay;               /* 1 for 2-D tensors (matmul weights, embeddings): weight decay */
    int tp_split;            /* GPT_TP_*: how tensor parallelism cuts it (shape is the shard's) */
    size_t full_offset;      /* first element in the unsharded (single-rank) layout */
} gpt_tensor_t;

/* How a tensor is cut over the tensor-parallel ranks (Megatron): rank r of T holds */
enum {
    GPT_TP_REPLICATED = 0, /* all of it (LayerNorms, wpe, row-parallel biases, lnf) */
    GPT_TP_ROWS = 1,       /* rows [r R/T, (r+1) R/T): column-parallel fc, wte's vocabulary */
    GPT_TP_COLS = 2,       /* columns [r K/T, (r+1) K/T) of every row: row-parallel weights */
    GPT_TP_QKV = 3         /* rows of its own heads in each of the q, k and v thirds */
};

/*
 * Tensor parallelism: the model's only window on communication, filled by the caller (tempo-train
 * from its TP communicator). The callbacks are collective over the size ranks, in place, and return
 * 0, or -1 after recording the reason with gpt_fail (the failing model call then returns -1 with
 * it). size 1 needs no callbacks.
 */
typedef struct {
    int rank, size;
    int (*allreduce_sum)(void *ctx, float *buf, size_t n);
    int (*allreduce_max)(void *ctx, float *buf, size_t n);
    void *ctx;
    /* Sequence parallelism (Korthikanti et al. 2022), used when sp is 1 (size > 1): out of place,
     * n floats per rank. allgather: recv (size * n) = every rank's send in rank order;
     * reduce_scatter: recv (n) = block `rank` of the sum over ranks of send (size * n). */
    int (*allgather)(void *ctx, const float *send, float *recv, size_t n);
    int (*reduce_scatter)(void *ctx, const float *send, float *recv, size_t n);
    int sp;
} gpt_tp_t;

/* A contiguous range [off, off + n) of the parameter buffer. */
typedef struct {
    size_t off;
    size_t n;
} gpt_range_t;

typedef struct gpt_work gpt_work_t; /* activations and scratch, private to model.c */

/*
 * Activation recomputation (gpt_set_recompute): what a forward keeps for its backward.
 *   NONE      every block's activations.
 *   SELECTIVE all but the attention matrices (B, NH, T, T) per block, the largest at long context
 *             (Korthikanti et al. 2022): one buffer serves every block's forward, and each block's
 *             backward recomputes its softmax from the kept qkv (no communication).
 *   FULL      only each block's input (the residual stream entering it, and the head's inputs):
 *             one block's worth of buffers serves all, and each block's backward first re-runs the
 *             block's forward, its TP/SP collectives included.
 * The gradients and losses are bitwise those of NONE: the recomputation runs the same kernels on
 * the same inputs and parameters, in the same order, on one machine.
 */
enum { GPT_RECOMPUTE_NONE = 0, GPT_RECOMPUTE_SELECTIVE = 1, GPT_RECOMPUTE_FULL = 2 };

typedef struct {
    gpt_config_t cfg;
    size_t num_params;
    float *params;         /* (num_params) fp32, layout described by tensors[] */
    float *grads;          /* (num_params) fp32, same layout; zeroed at creation */
    int num_tensors;       /* 2 + 12 L + 2 */
    gpt_tensor_t *tensors; /* (num_tensors) in buffer order */
    gpt_range_t *groups;   /* (L + 2): groups[0] embeddings, groups[1 + l] block l, [L + 1] lnf */
    int B, T;              /* batch and sequence length of the last forward (0 before) */
    float mean_loss;       /* of the last forward with targets; -1 without targets */
    gpt_work_t *work;
    gpt_tp_t tp;           /* {0, 1} without tensor parallelism */
    size_t full_params;    /* parameters of the unsharded model (num_params when tp.size is 1) */
    size_t act_floats;     /* activation memory allocated by gpt_alloc_acts (floats), and of it */
    size_t act_seq_floats; /* the LayerNorm and residual regions (embedding output, LayerNorm
                              outputs and statistics, projections, residual stream, lnf): the part
                              that sequence parallelism shards (1/tp.size of it with sp) */
    size_t act_col_floats; /* the column-parallel outputs (QKV, attention output and
                              probabilities, fc and GELU, logits and probabilities, and their
                              backward buffers): the rank's heads, MLP columns and vocabulary
                              rows, 1/tp.size of one rank's */
    int recompute;         /* GPT_RECOMPUTE_*, set with gpt_set_recompute (NONE at creation) */
} gpt_model_t;

/* The message of the calling thread's last failure ("" if none). */
const char *gpt_last_error(void);

/* Records a message for gpt_last_error() and returns -1: the trainer's other modules (optim.c)
 * report their errors through the same channel. */
int gpt_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* 0 if cfg describes a model this code can build, else -1 (gpt_last_error says why). */
int gpt_config_check(const gpt_config_t *cfg);

/* Number of parameters of cfg (0 if cfg is invalid). */
size_t gpt_num_params(const gpt_config_t *cfg);

/*
 * Training FLOPs per token, llm.c's convention (Kaplan et al. 2020, section 2.1): 6 N for the
 * weight matmuls (2 forward + 4 backward per parameter; N counts every parameter, including the
 * tied wte that also serves as the LM head) plus 6 L C T for attention (QKᵀ and AV: 4 C T per token
 * and layer forward at full length, halved by causality, times 3 for forward + backward).
 */
double gpt_flops_per_token(const gpt_config_t *cfg, int T);

/* Allocates a model and initializes its weights from seed (gpt_init_weights). */
int gpt_create(const gpt_config_t *cfg, uint64_t seed, gpt_model_t **model_p);

/*
 * 0 if the model of cfg can be cut over T tensor-parallel ranks, else -1 with the reason: heads,
 * the MLP width 4C and the vocabulary must be multiples of T.
 */
int gpt_tp_check(const gpt_config_t *cfg, int T);

/* 0 if sequences of length seq can be cut over tp_size sequence-parallel ranks, else -1 with the
 * reason (seq must be a multiple of tp_size). */
int gpt_sp_check(int seq, int tp_size);

/*
 * gpt_create for rank tp->rank of tp->size tensor-parallel ranks (tp NULL or size 1: gpt_create).
 * The model holds only its shards (tensors[] gives their shapes and GPT_TP_* cut), initialized to
 * exactly the slices of the single-rank model of the same seed. Its forward and backward call tp's
 * collectives: the f operator (identity forward, all-reduce of the input gradient backward) before
 * each column-parallel matmul, the g operator (all-reduce forward) after each row-parallel one, a
 * vocabulary-parallel embedding (rows outside the rank's range count 0, then all-reduce) and a
 * vocabulary-parallel cross-entropy (max, sum of exponentials and target logit all-reduced: only
 * the rank's V/T logits exist on it). Replicated tensors get the same gradient on every rank by
 * construction (their inputs and output gradients are all-reduced values).
 *
 * With tp->sp (sequence parallelism, tp->size > 1; the sequence length of every forward must be
 * a multiple of tp->size), the LayerNorm and residual regions hold only the rank's shard of the
 * B·T token rows: the flattened (B·T) row dimension is cut in tp->size contiguous blocks, rank r
 * keeping rows [r B T / size, (r + 1) B T / size) (so an all-gather's rank-ordered blocks are the
 * whole (B, T, C) tensor, no transpose). An all-gather of the LayerNorm output comes before each
 * column-parallel matmul (qkv, fc, the head) and a reduce-scatter after each row-parallel one
 * (and the vocabulary-parallel embedding) in place of TP's all-reduces; backward mirrors them.
 * The gradients of the replicated tensors computed on shards (LayerNorms, lnf, wpe) are summed
 * over the ranks (all-reduce) before they are added to grads; the row-parallel biases' gradients
 * come from the gathered output gradient (all B·T rows) and need no sum.
 */
int gpt_create_tp(const gpt_config_t *cfg, const gpt_tp_t *tp, uint64_t seed,
                  gpt_model_t **model_p);

/*
 * Between the unsharded layout (full_params floats, the single-rank model's) and a shard layout
 * (num_params): gpt_tp_slice copies rank m->tp.rank's pieces of full into shard; gpt_tp_place
 * copies a shard of rank r (of m->tp.size, same shapes as m's) into its places in full.
 */
void gpt_tp_slice(const gpt_model_t *m, const float *full, float *shard);
void gpt_tp_place(const gpt_model_t *m, const float *shard, int r, float *full);

/* One tensor ti of those two: between its place in full (at full_offset) and rank r's shard in
 * shard (a buffer of m's layout, at offset); to_full 0 slices, 1 places. A tensor of size 0 (not
 * on a pipeline stage's model) is skipped. */
void gpt_tp_copy(const gpt_model_t *m, int ti, int r, float *full, float *shard, int to_full);

/* Frees everything; NULL is a no-op. */
void gpt_destroy(gpt_model_t *model);

/*
 * GPT-2 initialization, deterministic in seed: 2-D weights ~ normal(0, 0.02), the two residual
 * projections (attn.proj.w, mlp.proj.w) ~ normal(0, 0.02 / sqrt(2 L)), biases 0, LayerNorm
 * weights 1. Each tensor draws from its own stream (seed, tensor index), so a tensor's values do
 * not depend on the others. Does not touch grads.
 */
void gpt_init_weights(gpt_model_t *model, uint64_t seed);

/* The tensor called name, or NULL. */
const gpt_tensor_t *gpt_find_tensor(const gpt_model_t *model, const char *name);

/* The contiguous parameter range of a layer group: -1 embeddings, 0..L-1 block, L final LN. */
gpt_range_t gpt_layer_range(const gpt_model_t *model, int layer);

/*
 * Sizes the activations for batches of up to B sequences of up to T tokens (T <= max_seq_len).
 * Called implicitly by the first forward; a later forward may use any B' <= B and T' <= T.
 */
int gpt_alloc_acts(gpt_model_t *model, int B, int T);

/* Floats allocated for activations and scratch by the last gpt_alloc_acts (0 before). */
size_t gpt_act_floats(const gpt_model_t *model);

/*
 * Chooses what forward keeps for backward (GPT_RECOMPUTE_*); frees the activations, so the next
 * gpt_alloc_acts or forward sizes them for the mode. Call it between steps (not between a forward
 * and its backward). -1 with gpt_last_error() for an unknown mode. gpt_recompute_parse maps
 * "none", "selective", "full" to the mode (-1 for anything else); gpt_recompute_name the reverse.
 */
int gpt_set_recompute(gpt_model_t *model, int mode);
int gpt_recompute_parse(const char *name);
const char *gpt_recompute_name(int mode);

/*
 * Forward. inputs and targets are (B, T) token ids in [0, V); the layers must run in order 0..L-1
 * after the embedding and before the head. gpt_forward runs gpt_forward_embed,
 * gpt_forward_layer(0..L-1) and gpt_forward_head; a caller may run them itself to wait for a
 * layer's parameters before its forward. With targets, *loss_p (if loss_p is not NULL) is the mean
 * cross-entropy and backward is allowed; with targets == NULL only the logits are computed and
 * *loss_p is -1. inputs and targets are copied (the caller's arrays may be reused at once).
 */
int gpt_forward_embed(gpt_model_t *model, const int *inputs, int B, int T);
int gpt_forward_layer(gpt_model_t *model, int l);
int gpt_forward_head(gpt_model_t *model, const int *targets, float *loss_p);
int gpt_forward(gpt_model_t *model, const int *inputs, const int *targets, int B, int T,
                float *loss_p);

/* The logits of the last forward: (B, T, V), row (b, t) at (b * T + t) * V; NULL before any.
 * With tensor parallelism, the rank's vocabulary slice: (B, T, V / tp.size). */
const float *gpt_logits(const gpt_model_t *model);

/* grads = 0 (and every group buffer of gpt_set_group_grads). */
void gpt_zero_grad(gpt_model_t *model);

/*
 * Where backward writes group g's gradients (g = 0 embeddings, 1 + l block l, L + 1 final LN):
 * buf holds the group's n elements in buffer order (buf[i] is the gradient of parameter
 * groups[g].off + i); NULL goes back to grads + groups[g].off. A caller that never needs the whole
 * gradient at once (ZeRO 2) points the groups at smaller, reused buffers and frees grads with
 * gpt_release_grads (grads is NULL afterwards; backward then fails, naming the group, for a group
 * without a buffer). -1 with gpt_last_error() for a bad group.
 */
int gpt_set_group_grads(gpt_model_t *model, int g, float *buf);
void gpt_release_grads(gpt_model_t *model);

/*
 * Where forward and backward read group g's parameters, in the same way: buf holds the group's n
 * parameters in buffer order (buf[i] is parameter groups[g].off + i); NULL goes back to params +
 * groups[g].off, or, once params is released, leaves the group without parameters. A caller that holds only a shard of the parameters (ZeRO 3) points each group at
 * a gathered buffer just before its forward and backward and frees params with
 * gpt_release_params (params is NULL afterwards; a forward or backward of a group without a
 * buffer fails, naming it). The buffer must stay unchanged from a group's forward to its backward.
 */
int gpt_set_group_params(gpt_model_t *model, int g, const float *buf);
void gpt_release_params(gpt_model_t *model);

/*
 * Backward of the last forward (which must have had targets), accumulating into grads. dloss is
 * the derivative of the caller's objective by this forward's mean loss: 1 for one batch, 1/n for
 * the mean over n micro-batches of gradient accumulation. gpt_backward runs gpt_backward_head,
 * gpt_backward_layer(L-1..0) and gpt_backward_embed; between the calls, group l's gradients
 * (gpt_layer_range(l)) are final: L after the head, l after gpt_backward_layer(l), -1 after
 * gpt_backward_embed. The calls must come in that order, once per forward (backward reuses some
 * saved activations as scratch). The parameters must not change between forward and backward.
 */
int gpt_backward_head(gpt_model_t *model, float dloss);
int gpt_backward_layer(gpt_model_t *model, int l);
int gpt_backward_embed(gpt_model_t *model);
int gpt_backward(gpt_model_t *model, float dloss);

/*
 * The GEMM build in use ("avx512", "avx2" or "generic"; picked by CPU features at creation), and
 * a way to force one, for tests and benchmarks: -1 if the name is unknown or this CPU lacks it.
 */
const char *gpt_gemm_name(const gpt_model_t *model);
int gpt_set_gemm(gpt_model_t *model, const char *name);

/* xorshift* (llm.c's sampler RNG): the next 32 random bits and a float in [0, 1). */
uint32_t gpt_random_u32(uint64_t *state);
float gpt_random_f32(uint64_t *state);

/*
 * A token drawn from softmax(logits / temperature) over V entries (one row of gpt_logits()), using
 * and advancing *rng_state; temperature <= 0 picks the argmax (first on ties).
 */
int gpt_sample_next(const float *logits, int V, float temperature, uint64_t *rng_state);

/* ------------------------------------------------------------------------------------------ */
/*
 * Pipeline stages. A stage owns the blocks [l0, l1) of the whole model; the first stage (l0 == 0)
 * also runs the embeddings (wte, wpe), the last (l1 == L) the final LayerNorm, the LM head and the
 * loss, and holds wte too (the head is tied to it). A stage holds only its own parameters and
 * gradients, in one buffer each (memory drops with the number of stages), ordered like the whole
 * model's (embeddings, blocks l0..l1-1, lnf), with wte appended last on a last stage that is not
 * also the first. The tied wte therefore lives on two stages when there are several: their two
 * gradients must be summed (Megatron's embedding group: an all-reduce of gpt_stage_wte()'s range
 * of the grads between the first and the last stage) before the optimizer step, and both copies
 * then take the same update.
 *
 * A stage runs micro-batches: gpt_stage_forward(mb) keeps that micro-batch's activations in one of
 * `slots` activation slots until gpt_stage_backward(mb) frees it, so several micro-batches may be
 * in flight (1F1B keeps up to P, GPipe M); the backward temporaries are shared by all slots.
 * Gradients accumulate (+=) over micro-batches until gpt_stage_zero_grad. The stage runs the same
 * kernels as the whole model (the per-layer functions above), so its results are those of the
 * whole model on the same micro-batch.
 *
 * A stage may also be tensor-parallel (gpt_stage_create_tp): then it holds its TP shards, and the
 * embedding group's sum is over the same TP rank's wte shard on the first and the last stage.
 *
 * Not here: communication (trainer/pipeline.h runs the schedules). The whole-model functions are
 * unaffected; a stage does not share memory with any gpt_model_t.
 */
typedef struct gpt_stage gpt_stage_t;

/*
 * A stage of cfg's model owning blocks [l0, l1) (0 <= l0 < l1 <= L), with `slots` activation slots
 * for micro-batches of up to B x T tokens. The parameters are initialized from seed exactly as
 * gpt_create(cfg, seed) initializes the same tensors (gpt_stage_load copies them from a model
 * instead); gradients start at 0. -1 with gpt_last_error() for a bad range or out of memory.
 */
int gpt_stage_create(const gpt_config_t *cfg, int l0, int l1, int slots, int B, int T,
                     uint64_t seed, gpt_stage_t **stage_p);

/*
 * gpt_stage_create for rank tp->rank of tp->size tensor-parallel ranks (tp NULL or size 1: the
 * same): the stage holds only its tensors' TP shards (the table of gpt_create_tp, the same GPT_TP_*
 * cuts), initialized to exactly the slices of gpt_create(cfg, seed)'s tensors, and its forward
 * and backward call tp's collectives as gpt_create_tp's model does. Activations passed between
 * stages (x, y, dy, dx) are whole (B, T, C) on every TP rank; with tp->sp (T a multiple of
 * tp->size, and so every micro-batch's T), they are the residual stream's sequence shard that the
 * stage's LayerNorm and residual regions hold: the rank's block of B T / tp->size of the B T token
 * rows (gpt_create_tp's cut), (B T / tp->size, C), so TP rank r of one stage sends to and receives
 * from TP rank r of the next (1/tp->size of the message; Megatron's SP pipeline). The embedding
 * reduce-scatters into that shard and the last stage's head all-gathers it, as gpt_create_tp's.
 */
int gpt_stage_create_tp(const gpt_config_t *cfg, const gpt_tp_t *tp, int l0, int l1, int slots,
                        int B, int T, uint64_t seed, gpt_stage_t **stage_p);

/* Frees everything; NULL is a no-op. */
void gpt_stage_destroy(gpt_stage_t *st);

/* Copies the stage's parameters (its TP shards) from a whole single-rank model of the same
 * configuration (a checkpoint). */
int gpt_stage_load(gpt_stage_t *st, const gpt_model_t *src);

/*
 * The stage's parameters as a model view, for the optimizer (adamw_step), gradient norms and
 * checkpoints: num_params, params and grads are the stage's buffers; tensors[] is the whole
 * model's table with offsets into them, size 0 for a tensor that is not on this stage (so
 * gpt_find_tensor works by global name). Not for gpt_forward / gpt_backward.
 */
const gpt_model_t *gpt_stage_model(const gpt_stage_t *st);

/*
 * ZeRO 3 on a stage, as gpt_set_group_params and gpt_release_params on a model: forward and
 * backward read every group of the stage from buf, a buffer laid out like the stage's parameters
 * (num_params floats, the caller's, unchanged from a micro-batch's forward to its backward); NULL
 * goes back to the stage's own buffer, or, once gpt_stage_release_params has freed it (params is
 * NULL in gpt_stage_model's view afterwards), leaves the stage without parameters (a forward or
 * backward then fails, naming the group). -1 with gpt_last_error() only for a bad group (never).
 */
int gpt_stage_set_params(gpt_stage_t *st, const float *buf);
void gpt_stage_release_params(gpt_stage_t *st);

/* The stage's range of the buffers holding wte (n == 0 if it holds none). */
gpt_range_t gpt_stage_wte(const gpt_stage_t *st);

/* The stage's range of a layer group (-1 embeddings, 0..L-1 block, L final LN); n == 0 if absent.
 */
gpt_range_t gpt_stage_layer_range(const gpt_stage_t *st, int layer);

/* Whether the stage is first / last: which inputs and outputs gpt_stage_forward takes. */
int gpt_stage_is_first(const gpt_stage_t *st);
int gpt_stage_is_last(const gpt_stage_t *st);

/*
 * Forward of micro-batch mb (any int, unique among those in flight) of B x T tokens (at most the
 * sizes given at creation). First stage: tokens (B, T) ids; others: x (B, T, C), the previous
 * stage's output. Last stage: targets (B, T) ids, *loss_p = the micro-batch's mean cross-entropy;
 * others: y (B, T, C) receives the output. Arguments a stage does not use must be NULL. Fails
 * (-1) when every slot is in use or mb is already in flight. Inputs are copied. With sequence
 * parallelism x and y (and backward's dy and dx) are the rank's (B T / tp.size, C) shard.
 */
int gpt_stage_forward(gpt_stage_t *st, int mb, const int *tokens, const float *x,
                      const int *targets, int B, int T, float *y, float *loss_p);

/*
 * Backward of micro-batch mb, accumulating into the stage's gradients, and freeing its slot. Last
 * stage: dloss = d objective / d this micro-batch's mean loss (1/M for the mean over M
 * micro-batches), dy NULL; others: dy (B, T, C), the gradient of this stage's output (dloss
 * ignored). Non-first stages write dx (B, T, C), the gradient of the input x; the first stage
 * takes dx NULL.
 */
int gpt_stage_backward(gpt_stage_t *st, int mb, const float *dy, float dloss, float *dx);

/* Frees micro-batch mb's activation slot without a backward (a forward for evaluation only); -1
 * with gpt_last_error() if mb is not in flight. */
int gpt_stage_release(gpt_stage_t *st, int mb);

/* grads = 0. */
void gpt_stage_zero_grad(gpt_stage_t *st);

/*
 * gpt_set_recompute for a stage: re-lays its activation slots for the mode (with FULL a slot keeps
 * only its blocks' inputs and the head's; the recomputed block lives in the part shared by the
 * slots). -1 with gpt_last_error() for an unknown mode, a micro-batch in flight, or out of memory.
 */
int gpt_stage_set_recompute(gpt_stage_t *st, int mode);

/* Floats of the stage's activations: every slot's, and the backward temporaries they share. */
size_t gpt_stage_act_floats(const gpt_stage_t *st);

/* Of gpt_stage_act_floats, the LayerNorm and residual regions (gpt_model_t.act_seq_floats' part
 * of every slot and of the shared part): 1/tp->size of them with sequence parallelism. */
size_t gpt_stage_act_seq_floats(const gpt_stage_t *st);

#endif /* TEMPO_TRAINER_MODEL_H */
