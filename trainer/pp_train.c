/*
 * pp_train.c — the pipeline-parallel step of tempo-train (pp_train.h).
 *
 * A rank of pipeline stage r holds V model chunks (stages v·P + r of the P·V, gpt_stage_*), each
 * with its own parameter, gradient and AdamW buffers. One step:
 *   1. read the step's M micro-batches (every rank of a line reads the same ones: the first stage
 *      needs the tokens, the last the targets);
 *   2. run this rank's schedule (pp_schedule_make) with pp_exec_run: compute = gpt_stage_forward /
 *      gpt_stage_backward (the last stage's dloss is 1/M: the step's loss is the mean of the M
 *      micro-batch means, so the gradients are those of one rank's --accum M step, not M times
 *      them), post / wait = dist's pp_post / pp_wait with the schedule's tags on the PP
 *      communicator, into one buffer per (micro-batch, chunk, gradient?, send?) message;
 *   3. average the gradients over the DP group through dist's gradient groups (grads_register,
 *      as train.c does: the bucketer's all-reduce at ZeRO 0, a reduce-scatter per group at ZeRO
 *      1 and 2; --sched's priorities, --compress's compressor): each chunk's groups are posted
 *      as soon as its last backward of the step is done, while the schedule goes on, and waited
 *      for after it;
 *   4. then sum the tied wte gradient of the first and the last stage over the embedding group
 *      (exact, after DP as Megatron does: both copies get the same bits, compressed or not);
 *   5. the global norm: Σ g² of this rank's slices (wte counted on the first stage only),
 *      summed over the line, the TP group and, with ZeRO, the DP group; clip, and AdamW on this
 *      rank's slices (zero.h, shared with train.c), all-gathered back over DP with ZeRO 1 and 2
 *      (ZeRO 3: by the next step).
 * The step's bubble is the line's (pp_line_bubble: the longest executor window of the line is
 * the step, and each rank's idle is that step less its busy time, so the flush's tail counts on
 * the later ranks as it does in the formula), from the mean over the DP ranks of each pipeline
 * rank's times, printed next to pp_bubble_formula; the run's last line adds each pipeline rank's
 * compute per step (mean of the steps after the first) and the formula for stages of those costs
 * (pp_bubble_stages), since the stages are not equal (the first holds the embeddings, the last
 * the head and the loss) and on a shared machine neither are the cores. The rest of the step
 * line, the loss.csv row and the run's mean are stats.h's, as at every layout, and the memory
 * lines are one per pipeline rank (print_memory); every rank's RSS line comes before teardown,
 * the stages still allocated.
 *
 * Groups: each chunk's gradient buffer is cut into wte and wpe (a first chunk), its blocks, lnf
 * and wte (a last chunk), each group's forward index its priority; wte is a group of its own on
 * both stages, so that its DP slices are the same elements there and the embedding group sums
 * matching slices. ZeRO 1 and 2 shard the AdamW moments (and the synchronized gradient) over the
 * stage's DP group. ZeRO 2 runs as ZeRO 1 here: a stage accumulates its M micro-batches in its
 * own gradient buffer, and one reduce-scatter per step leaves the rank the mean of its slices
 * (a reduce-scatter per micro-batch would multiply the DP traffic by M and free no memory, the
 * stage's buffer being backward's accumulator). ZeRO 3 is ZeRO 1 with the parameters sharded the
 * same way (pp_run_t.pshard: the stages' own buffers are freed): each chunk is all-gathered whole
 * over DP once per step, the all-gathers of every chunk posted at the step's start (priority:
 * forward index) and waited for just before the chunk's first forward, its buffer freed after
 * its last backward; the update writes the shard, and the next step (or a validation, which
 * gathers every chunk and frees it after) gathers it again. Parameters are thus sharded between
 * steps only, not during one (a gather per micro-batch or layer group would multiply the
 * all-gather traffic by 2M); the run's ZeRO line says so. Compression applies to the DP groups
 * only: TP, pipeline and embedding-group traffic (pp_allreduce, pp_post, the model's TP
 * callbacks) and ZeRO 3's parameter all-gathers stay exact, and with one DP rank nothing is
 * synchronized or compressed (ZeRO 3 copies its shard instead of gathering it).
 *
 * Invariants: DP ranks of a stage hold the same parameters (same seed, same averaged gradients,
 * all-gathered slices); the first and last stage hold the same wte (same summed gradient). Every
 * rank calls the same collectives in the same order, and a DP group's ranks post the same groups
 * in the same order (they run the same schedule).
 *
 * Checkpoints hold the single-rank layout: parameters and AdamW moments are gathered into it on
 * every rank (ZeRO's moment slices and ZeRO 3's parameter slices all-gathered over DP first;
 * each chunk places its tensors, a sum over the line fills the rest; wte comes from the first
 * stage) and job rank 0 writes them as a one-rank run would; a load slices them back (and keeps
 * this rank's ZeRO slices, of the parameters too with ZeRO 3).
 *
 * With --tp T, each stage is tensor-parallel over the rank's TP group (gpt_stage_create_tp with
 * train.c's callbacks): the embedding group pairs the same TP rank's wte shards, the DP average
 * is over each stage's shards, the norm sums every tensor once (replicated ones from TP rank 0)
 * over the line and the TP group, and the checkpoint gather places each TP rank's shards (the
 * replicated tensors from TP rank 0) before summing over the line and the TP group.
 *
 * With --tp T --sp the stages are also sequence-parallel (gpt_tp_t.sp): the activations between
 * stages are the residual stream's sequence shard each TP rank holds (model.h), so a message is
 * B T C / T floats (seq_div) and goes from a TP rank to the same TP rank of the next stage, which
 * the PP line pairs already; the DP, embedding-group and norm sums are those of TP alone (the
 * model sums the replicated tensors' gradients over the TP group itself).
 *
 * Not here: sampling (train.c notes it).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/optim.h"
#include "trainer/pp_train.h"
#include "trainer/stats.h"
#include "trainer/zero.h"

typedef struct {
    dist_t *d;
    const pp_train_opts_t *o;
    pp_schedule_t s;
    int P, V, M;
    size_t msg;       /* floats of one message: B T C, or B T C / tp with SP (seq_div) */
    gpt_stage_t **st; /* (V) */
    /* The DP gradient groups of every chunk (dist.h), in chunk order and in each chunk in buffer
     * order: wte and wpe apart on a first chunk, each block, lnf, and a last chunk's wte. */
    int ngroups;
    dist_group_t *groups; /* (ngroups) .grad: in the chunk's gradient buffer */
    char (*names)[32];    /* (ngroups) */
    int *gchunk;          /* (ngroups) the group's chunk */
    unsigned char *gemb;  /* (ngroups) a wte of the embedding group: 1 on the first stage, 2 on
                           * the last (left out of the norm: wte counts once) */
    zero_shard_t z;       /* this rank's slices of the groups and their AdamW moments */
    int sync;             /* DP gradients are synchronized: the DP group has > 1 rank */
    int *bwd_done;        /* (V) backwards of the chunk this step: M = its gradients are final */
    /* ZeRO 3: the rank keeps only its slices of the chunks' parameters (pshard, laid out like
     * z.m1; the stages' own buffers are freed). Each chunk is all-gathered whole into pwork[v]
     * once per step: posted at the step's start, waited for before the chunk's first forward,
     * freed after its last backward (and around a validation). pheld[v]: 0 not held, 1
     * all-gathers posted, 2 in the stage. NULL below ZeRO 3. */
    float *pshard;        /* (z.shard_n) */
    float **pwork;        /* (V) */
    unsigned char *pheld; /* (V) */
    float *bufs;      /* (M V 4 msg): message (mb, chunk, grad, send) at buf_of */
    void **req;       /* (M V 4) posted requests */
    int *x, *y;       /* (M, B T) the step's inputs and targets */
    double loss_sum;  /* the last stage's sum of micro-batch losses this step */
    char *err;
} pp_run_t;

/* What the messages between stages are divided by: with sequence parallelism the TP size (each
 * TP rank sends its sequence shard of the residual stream to the same TP rank of the next stage),
 * else 1. */
static size_t seq_div(const pp_train_opts_t *o)
{
    return o->tp && o->tp->sp ? (size_t)o->tp->size : 1;
}

static size_t msg_index(const pp_run_t *r, const pp_action_t *a, int send)
{
    return (((size_t)a->mb * (size_t)r->V + (size_t)a->chunk) * 2 + (size_t)a->grad) * 2 +
           (size_t)send;
}

static float *buf_of(const pp_run_t *r, const pp_action_t *a, int send)
{
    return r->bufs + msg_index(r, a, send) * r->msg;
}

static int fail_dist(pp_run_t *r, const char *what)
{
    snprintf(r->err, 512, "%s: %s", what, r->d->error(r->d));
    return -1;
}

static int fail_model(pp_run_t *r, const char *what)
{
    snprintf(r->err, 512, "%s: %s", what, gpt_last_error());
    return -1;
}

/* Chunk v's last backward of the step is done: its groups go to the DP synchronization (dist's
 * bucketer or reduce-scatters, scheduled and compressed as configured) in backward order, while
 * the schedule goes on. */
static int chunk_ready(pp_run_t *r, int v)
{
    for (int g = r->ngroups - 1; g >= 0 && r->sync; g--) {
        if (r->gchunk[g] == v && r->d->grads_ready(r->d, g, r->groups[g].grad)) {
            return fail_dist(r, "DP gradients");
        }
    }
    return 0;
}

/* ZeRO 3: posts the all-gathers of chunk v's parameters from this rank's slices into a new
 * buffer pwork[v] (with one DP rank, copies them), group by group in forward order: each group's
 * forward index is its priority on dist's scheduled lane. */
static int params_post(pp_run_t *r, int v)
{
    if (!(r->pwork[v] = malloc(gpt_stage_model(r->st[v])->num_params * sizeof(float)))) {
        snprintf(r->err, 512, "out of memory gathering the parameters of chunk %d", v);
        return -1;
    }
    r->pheld[v] = 1;
    for (int g = 0; g < r->ngroups; g++) {
        const float *slice = r->pshard + r->z.shard_off[g];
        float *full = r->pwork[v] + r->groups[g].off;
        if (r->gchunk[g] != v) {
            continue;
        }
        if (!r->sync) {
            memcpy(full, slice, r->groups[g].n * sizeof(float));
        } else if (r->d->gather_to(r->d, g, slice, full)) {
            return fail_dist(r, "gathering the parameters");
        }
    }
    return 0;
}

/* ZeRO 3: chunk v's posted all-gathers waited for, and its stage reading pwork[v]. */
static int params_wait(pp_run_t *r, int v)
{
    for (int g = 0; g < r->ngroups && r->sync; g++) {
        if (r->gchunk[g] == v && r->d->gather_wait(r->d, g)) {
            return fail_dist(r, "gathering the parameters");
        }
    }
    r->pheld[v] = 2;
    return gpt_stage_set_params(r->st[v], r->pwork[v]) ? fail_model(r, "parameters") : 0;
}

/* ZeRO 3: chunk v's gathered parameters freed (posted all-gathers completed first). */
static int params_drop(pp_run_t *r, int v)
{
    const int rc = r->pheld[v] == 1 ? params_wait(r, v) : 0;
    gpt_stage_set_params(r->st[v], NULL);
    free(r->pwork[v]);
    r->pwork[v] = NULL;
    r->pheld[v] = 0;
    return rc;
}

/* ZeRO 3, every chunk: op 0 posts the all-gathers, 1 also waits for them (the stages hold their
 * parameters), 2 frees the gathered buffers. Nothing below ZeRO 3. */
static int params_all(pp_run_t *r, int op)
{
    for (int v = 0; v < r->V && r->pshard; v++) {
        if (op == 2 ? params_drop(r, v) : params_post(r, v)) {
            return -1;
        }
    }
    for (int v = 0; v < r->V && r->pshard && op == 1; v++) {
        if (params_wait(r, v)) {
            return -1;
        }
    }
    return 0;
}

/* Forward or backward of (mb, chunk), traced as "F mb3 chunk0" / "B mb3 chunk0". */
static int cb_compute(void *ctx, const pp_action_t *act)
{
    pp_run_t *r = ctx;
    pp_action_t msg = *act; /* a compute action's grad is 0: its messages' is its direction */
    const pp_action_t *a = &msg;
    msg.grad = act->op == PP_BACKWARD;
    gpt_stage_t *st = r->st[a->chunk];
    const int first = gpt_stage_is_first(st), last = gpt_stage_is_last(st), B = r->o->B,
              T = r->o->T, bwd = a->op == PP_BACKWARD;
    const size_t tok = (size_t)a->mb * (size_t)B * (size_t)T;
    char name[48];
    snprintf(name, sizeof name, "%c mb%d chunk%d", bwd ? 'B' : 'F', a->mb, a->chunk);
    if (r->pshard && r->pheld[a->chunk] == 1 && params_wait(r, a->chunk)) {
        return -1; /* ZeRO 3: the chunk's first forward of the step */
    }
    if (r->d->pp_trace(r->d, name, 1)) {
        return fail_dist(r, "trace");
    }
    int rc;
    if (!bwd) {
        float loss = 0;
        rc = gpt_stage_forward(st, a->mb, first ? r->x + tok : NULL, first ? NULL : buf_of(r, a, 0),
                               last ? r->y + tok : NULL, B, T, last ? NULL : buf_of(r, a, 1),
                               last ? &loss : NULL);
        r->loss_sum += last ? loss : 0;
    } else {
        rc = gpt_stage_backward(st, a->mb, last ? NULL : buf_of(r, a, 0), 1.0f / (float)r->M,
                                first ? NULL : buf_of(r, a, 1));
    }
    if (rc) {
        return fail_model(r, bwd ? "pipeline backward" : "pipeline forward");
    }
    if (r->d->pp_trace(r->d, name, 0)) {
        return fail_dist(r, "trace");
    }
    if (!bwd || ++r->bwd_done[a->chunk] < r->M) {
        return 0;
    }
    return chunk_ready(r, a->chunk) || (r->pshard && params_drop(r, a->chunk)) ? -1 : 0;
}

static int cb_post(void *ctx, const pp_action_t *a)
{
    pp_run_t *r = ctx;
    const int send = a->op == PP_POST_SEND;
    return r->d->pp_post(r->d, buf_of(r, a, send), r->msg, a->peer, a->tag, send,
                         &r->req[msg_index(r, a, send)])
               ? fail_dist(r, "pipeline")
               : 0;
}

static int cb_wait(void *ctx, const pp_action_t *a)
{
    pp_run_t *r = ctx;
    return r->d->pp_wait(r->d, &r->req[msg_index(r, a, a->op == PP_WAIT_SEND)])
               ? fail_dist(r, "pipeline")
               : 0;
}

/* Whether this rank contributes tensor i of chunk v to the single-rank layout's sums: wte from
 * the first stage only, a TP-replicated tensor from TP rank 0 only (the same on every TP rank). */
static int counts_tensor(const pp_run_t *r, int v, int i)
{
    const gpt_model_t *m = gpt_stage_model(r->st[v]);
    return m->tensors[i].size && (i != 0 || gpt_stage_is_first(r->st[v])) &&
           (m->tensors[i].tp_split != GPT_TP_REPLICATED || r->d->tp_rank == 0);
}

/* Buffer k (0 parameters, 1 gradients) of group g's chunk at this rank's slice of the group. */
static float *slice_of(const pp_run_t *r, int g, int k)
{
    const gpt_model_t *m = gpt_stage_model(r->st[r->gchunk[g]]);
    return (k ? m->grads : m->params) + zero_slice_off(&r->z, g);
}

/* Between the shard arrays (laid out like m1) and buffers laid out like each chunk's parameters
 * (bufs[v]): this rank's slices into the buffers (to_shard 0), or out of them. */
static void shard_copy(const pp_run_t *r, float *const *bufs, float *shard, int to_shard)
{
    for (int g = 0; g < r->ngroups; g++) {
        float *a = bufs[r->gchunk[g]] + zero_slice_off(&r->z, g), *b = shard + r->z.shard_off[g];
        memcpy(to_shard ? b : a, to_shard ? a : b, zero_slice_n(&r->z, g) * sizeof(float));
    }
}

/* All-gathers every group's slices of bufs (laid out like the chunks) in place over DP. */
static int gather_slices(pp_run_t *r, float *const *bufs)
{
    for (int g = 0; g < r->ngroups && r->z.zero && r->sync; g++) {
        if (r->d->gather(r->d, g, bufs[r->gchunk[g]]) || r->d->gather_wait(r->d, g)) {
            return fail_dist(r, "gathering the DP slices");
        }
    }
    return 0;
}

/* The shard array of buffer k (whole_bufs): ZeRO 3's parameter slices, the AdamW moments' slices,
 * or NULL where the chunks hold the buffer whole (the gradients; the parameters below ZeRO 3). */
static float *shard_of(const pp_run_t *r, int k)
{
    return k == 0 ? r->pshard : k == 2 ? r->z.m1 : k == 3 ? r->z.m2 : NULL;
}

/* Buffer k (0 parameters, 1 gradients, 2 and 3 the AdamW moments) of every chunk, whole on every
 * DP rank, into bufs (V): the chunks' own buffers (with ZeRO, the gradients' slices are first
 * all-gathered in place), or for the moments and ZeRO 3's parameters new buffers (*owned_p = 1)
 * assembled from the DP ranks' slices. */
static int whole_bufs(pp_run_t *r, int k, float **bufs, int *owned_p)
{
    float *sh = shard_of(r, k);
    *owned_p = sh != NULL;
    for (int v = 0; v < r->V; v++) {
        const gpt_model_t *m = gpt_stage_model(r->st[v]);
        bufs[v] = sh ? calloc(m->num_params, sizeof(float)) : k == 0 ? m->params : m->grads;
        if (!bufs[v]) {
            snprintf(r->err, 512, "out of memory gathering the optimizer state");
            return -1;
        }
    }
    if (sh) {
        shard_copy(r, bufs, sh, 0);
    }
    return k == 0 && !sh ? 0 : gather_slices(r, bufs);
}

static void free_bufs(const pp_run_t *r, float **bufs, int owned)
{
    for (int v = 0; v < r->V && owned; v++) {
        free(bufs[v]);
    }
    free(bufs);
}

/* Between buffers laid out like the chunks (bufs, V) and the single-rank layout (full,
 * full_params floats): to_full places this rank's TP shards of the tensors counts_tensor gives
 * it, else slices its shards out of full. */
static void chunks_full(const pp_run_t *r, float *const *bufs, float *full, int to_full)
{
    for (int v = 0; v < r->V; v++) {
        const gpt_model_t *m = gpt_stage_model(r->st[v]);
        for (int i = 0; i < m->num_tensors; i++) {
            if (!to_full || counts_tensor(r, v, i)) {
                gpt_tp_copy(m, i, r->d->tp_rank, full, bufs[v], to_full);
            }
        }
    }
}

/* Buffer k (whole_bufs) of the whole model in the single-rank layout on every rank of the line (a
 * sum over the line and the TP group of each rank's placed tensors, zeros elsewhere: exact). */
static float *gather_full(pp_run_t *r, int k)
{
    size_t n = gpt_stage_model(r->st[0])->full_params;
    float *full = calloc(n, sizeof(float)), **bufs = calloc((size_t)r->V, sizeof *bufs);
    int owned = 0;
    if (!full || !bufs) {
        snprintf(r->err, 512, "out of memory gathering the stages");
    } else if (!whole_bufs(r, k, bufs, &owned)) {
        chunks_full(r, bufs, full, 1);
        if (!r->d->pp_allreduce(r->d, DIST_PP_LINE, full, n, 0) &&
            !(r->d->tp_size > 1 && r->d->tp_allreduce(r->d, full, n, 0))) {
            free_bufs(r, bufs, owned);
            return full;
        }
        fail_dist(r, "gathering the stages");
    }
    if (bufs) {
        free_bufs(r, bufs, owned);
    }
    free(full);
    return NULL;
}

static int dump(pp_run_t *r, int step, double loss)
{
    float *g = gather_full(r, 1);
    if (!g) {
        return -1;
    }
    size_t n = gpt_stage_model(r->st[0])->full_params;
    int rc = 0;
    char err[CKPT_ERR_LEN];
    if (r->d->world_rank == 0 && ckpt_dump(r->o->dump, step, loss, g, n, err)) {
        snprintf(r->err, 512, "--dump: %s", err);
        rc = -1;
    }
    free(g);
    return rc;
}

/* Steps 3-5 of the header after the schedule: the gradient sums, the norm; *loss_p, *norm_p. */
static int sync_grads(pp_run_t *r, double *loss_p, double *norm_p)
{
    dist_t *d = r->d;
    double red[2] = {r->loss_sum, 0};
    for (int g = 0; g < r->ngroups; g++) {
        const size_t n = zero_slice_n(&r->z, g), lo = zero_slice_off(&r->z, g);
        float *gs = slice_of(r, g, 1);
        if (r->sync && d->grads_wait(d, g)) {
            return fail_dist(r, "DP gradients");
        }
        /* after DP (Megatron's order): both wte copies' slices get the same exact sum */
        if (r->gemb[g] && d->pp_allreduce(d, DIST_PP_EMBED, gs, n, 0)) {
            return fail_dist(r, "tied embedding gradient");
        }
        if (r->gemb[g] != 2) {
            red[1] += zero_range_sumsq(gpt_stage_model(r->st[r->gchunk[g]]), gs, lo, lo + n);
        }
    }
    if (d->tp_size > 1 && d->tp_sum_f64(d, red + 1, 1)) { /* the loss is the same on TP ranks */
        return fail_dist(r, "gradient norm");
    }
    if (d->pp_allreduce(d, DIST_PP_LINE, red, 2, 1)) { /* the loss is on the last stage only */
        return fail_dist(r, "loss and gradient norm");
    }
    /* the norm of ZeRO's slices sums over DP; whole gradients are the same on the DP ranks */
    if (d->pp_allreduce(d, DIST_PP_DP, red, r->z.zero ? 2 : 1, 1)) {
        return fail_dist(r, "loss");
    }
    *loss_p = red[0] / ((double)r->M * d->size);
    *norm_p = sqrt(red[1]);
    return 0;
}

/* AdamW on this rank's slice of every group; with ZeRO 1 and 2 the slices are all-gathered back
 * (ZeRO 3 updates its parameter shard, which the next step or validation gathers). */
static int update(pp_run_t *r, int step, const adamw_cfg_t *ac, float lr, float scale)
{
    for (int g = 0; g < r->ngroups; g++) {
        float *p = r->pshard ? r->pshard + r->z.shard_off[g] : slice_of(r, g, 0);
        if (zero_update(&r->z, gpt_stage_model(r->st[r->gchunk[g]]), g, p, slice_of(r, g, 1),
                        step, ac, lr, scale)) {
            return fail_model(r, "optimizer");
        }
    }
    if (r->pshard) {
        return 0;
    }
    float **bufs = calloc((size_t)r->V, sizeof *bufs);
    int owned = 0, rc = -1;
    if (!bufs) {
        snprintf(r->err, 512, "out of memory");
        return -1;
    }
    rc = whole_bufs(r, 0, bufs, &owned) || gather_slices(r, bufs) ? -1 : 0;
    free_bufs(r, bufs, owned);
    return rc;
}

/*
 * The validation loss: the mean over the first val_windows windows of the validation split, the
 * same windows as one rank's (train.c's evaluate). DP rank q takes windows [nv q/D, nv (q+1)/D),
 * one at a time through stages 0..PV-1 in turn (each rank runs its chunks' forwards, receiving and
 * sending the activations blocking); the last stage's sums meet in one float64 sum.
 */
static int evaluate(pp_run_t *r, loader_t *ld, double *val_p)
{
    dist_t *d = r->d;
    const int S = r->P * r->V, T = r->o->T;
    const size_t n = (size_t)T * (size_t)gpt_stage_model(r->st[0])->cfg.channels / seq_div(r->o);
    size_t nv = loader_val_windows(ld);
    nv = nv < (size_t)r->o->val_windows ? nv : (size_t)r->o->val_windows;
    float *x = r->bufs, *y = r->bufs + r->msg; /* message buffers are B times n */
    double sum = 0;
    if (params_all(r, 1)) { /* ZeRO 3: every chunk gathered for the validation, freed after */
        return -1;
    }
    for (size_t w = nv * (size_t)d->rank / (size_t)d->size;
         w < nv * (size_t)(d->rank + 1) / (size_t)d->size; w++) {
        loader_val_window(ld, w, r->x, r->y);
        for (int st = d->pp_rank; st < S; st += r->P) {
            gpt_stage_t *g = r->st[st / r->P];
            const int first = st == 0, last = st == S - 1;
            void *req = NULL;
            float loss = 0;
            if (!first &&
                (d->pp_post(d, x, n, (st - 1) % r->P, pp_tag(r->P, r->V, st - 1, 0, 0), 0, &req) ||
                 d->pp_wait(d, &req))) {
                return fail_dist(r, "validation");
            }
            if (gpt_stage_forward(g, 0, first ? r->x : NULL, first ? NULL : x, last ? r->y : NULL,
                                  1, T, last ? NULL : y, last ? &loss : NULL) ||
                gpt_stage_release(g, 0)) {
                return fail_model(r, "validation");
            }
            sum += loss;
            if (!last &&
                (d->pp_post(d, y, n, (st + 1) % r->P, pp_tag(r->P, r->V, st, 0, 0), 1, &req) ||
                 d->pp_wait(d, &req))) {
                return fail_dist(r, "validation");
            }
        }
    }
    if (params_all(r, 2)) {
        return -1;
    }
    if (d->pp_allreduce(d, DIST_PP_LINE, &sum, 1, 1) ||
        d->pp_allreduce(d, DIST_PP_DP, &sum, 1, 1)) {
        return fail_dist(r, "validation loss");
    }
    *val_p = nv > 0 ? sum / (double)nv : NAN;
    return 0;
}

static ckpt_meta_t pp_meta(const pp_run_t *r, const gpt_config_t *cfg)
{
    ckpt_meta_t mt;
    memset(&mt, 0, sizeof mt);
    mt.n_layer = cfg->n_layer;
    mt.n_head = cfg->n_head;
    mt.channels = cfg->channels;
    mt.max_seq_len = cfg->max_seq_len;
    mt.vocab_size = cfg->vocab_size;
    mt.num_params = gpt_stage_model(r->st[0])->full_params;
    mt.dp = r->d->size;
    mt.zero = r->o->zero;
    mt.batch = r->o->B;
    mt.accum = r->M;
    return mt;
}

/* ckpt_save's agreement: whether any rank of the job failed. */
static int agree_cb(void *arg, int *failed)
{
    pp_run_t *r = arg;
    double x = *failed != 0;
    if (r->d->pp_allreduce(r->d, DIST_PP_LINE, &x, 1, 1) ||
        r->d->pp_allreduce(r->d, DIST_PP_DP, &x, 1, 1) ||
        (r->d->tp_size > 1 && r->d->tp_sum_f64(r->d, &x, 1))) {
        return -1;
    }
    *failed = x > 0;
    return 0;
}

/* Saves after step: 0, 1 if the save failed (a warning; older checkpoints stay), -1 on a failed
 * collective. */
static int save(pp_run_t *r, const gpt_config_t *cfg, loader_t *ld, int step)
{
    float *full[3] = {NULL, NULL, NULL};
    for (int k = 0; k < 3; k++) {
        if (!(full[k] = gather_full(r, k ? k + 1 : 0))) {
            free(full[0]), free(full[1]);
            return -1;
        }
    }
    ckpt_meta_t mt = pp_meta(r, cfg);
    mt.step = step;
    loader_get_state(ld, &mt.loader);
    ckpt_range_t all = {0, mt.num_params};
    char cerr[CKPT_ERR_LEN];
    const int w = r->d->world_rank;
    int rc = ckpt_save(r->o->ckpt_dir, &mt, full[0], &all, w == 0, full[1], full[2],
                       r->o->ckpt_keep, w, agree_cb, r, cerr);
    for (int k = 0; k < 3; k++) {
        free(full[k]);
    }
    if (rc == CKPT_FAILED_HERE) {
        fprintf(stderr, "tempo-train: rank %d: %s\n", w, cerr);
    }
    if (rc && w == 0) {
        fprintf(stderr,
                "tempo-train: warning: checkpoint %s/step_%08d failed (above); older "
                "checkpoints are untouched\n",
                r->o->ckpt_dir, step);
    } else if (w == 0) {
        printf("checkpoint: %s/step_%08d\n", r->o->ckpt_dir, step);
        fflush(stdout);
    }
    return rc ? 1 : 0;
}

/* Loads o->resume into the chunks, their AdamW moments and the loader; the step to start from,
 * or -1. */
static int load(pp_run_t *r, const gpt_config_t *cfg, loader_t *ld)
{
    ckpt_meta_t want = pp_meta(r, cfg), got;
    ckpt_range_t all = {0, want.num_params};
    float *full[3] = {NULL, NULL, NULL};
    float **bufs = calloc((size_t)r->V, sizeof *bufs), **mom = calloc((size_t)r->V, sizeof *mom);
    int rc = -1;
    for (int k = 0; k < 3; k++) {
        if (!bufs || !mom || !(full[k] = malloc(want.num_params * sizeof(float)))) {
            snprintf(r->err, 512, "out of memory loading %s", r->o->resume);
            goto out;
        }
    }
    char cerr[CKPT_ERR_LEN], lerr[DATA_ERR_LEN];
    if (ckpt_load(r->o->resume, &want, &got, full[0], &all, 1, full[1], full[2], cerr)) {
        snprintf(r->err, 512, "--resume: %s; nothing was loaded", cerr);
        goto out;
    }
    if (loader_set_state(ld, &got.loader, lerr)) {
        snprintf(r->err, 512, "--resume %s: data position: %s", r->o->resume, lerr);
        goto out;
    }
    for (int k = 0; k < 3; k++) { /* into the chunks, or into the shards (the moments, ZeRO 3's
                                   * parameters) through buffers laid out like the chunks */
        float *sh = shard_of(r, k ? k + 1 : 0);
        for (int v = 0; v < r->V; v++) {
            const gpt_model_t *m = gpt_stage_model(r->st[v]);
            if (!(bufs[v] = sh ? (mom[v] = calloc(m->num_params, sizeof(float))) : m->params)) {
                snprintf(r->err, 512, "out of memory loading %s", r->o->resume);
                goto out;
            }
        }
        chunks_full(r, bufs, full[k], 0);
        if (sh) {
            shard_copy(r, bufs, sh, 1);
        }
        for (int v = 0; v < r->V; v++) {
            free(mom[v]);
            mom[v] = NULL;
        }
    }
    if (r->d->world_rank == 0) {
        printf("resumed from %s: step %lld (saved at dp %d, ZeRO %d)\n", r->o->resume,
               (long long)got.step, got.dp, got.zero);
    }
    rc = (int)got.step;
out:
    for (int k = 0; k < 3; k++) {
        free(full[k]);
    }
    for (int v = 0; mom && v < r->V; v++) {
        free(mom[v]);
    }
    free(mom);
    free(bufs);
    return rc;
}

/* ZeRO 3: this rank's slices of the chunks' initial parameters into pshard, and the stages' own
 * parameter buffers freed (pp_run_t.pshard). */
static int setup_z3(pp_run_t *r)
{
    r->pshard = malloc(r->z.shard_n * sizeof(float));
    r->pwork = calloc((size_t)r->V, sizeof *r->pwork);
    r->pheld = calloc((size_t)r->V, 1);
    if (!r->pshard || !r->pwork || !r->pheld) {
        snprintf(r->err, 512, "out of memory for ZeRO 3's parameter shard");
        return -1;
    }
    for (int v = 0; v < r->V; v++) { /* the stages' buffers, borrowed for shard_copy */
        r->pwork[v] = gpt_stage_model(r->st[v])->params;
    }
    shard_copy(r, r->pwork, r->pshard, 1);
    for (int v = 0; v < r->V; v++) {
        r->pwork[v] = NULL;
        gpt_stage_release_params(r->st[v]);
    }
    return 0;
}

/* Adds group (off, n) of chunk v, forward index layer, called name, to r's groups (emb: gemb). */
static void add_group(pp_run_t *r, int v, gpt_range_t x, int layer, int emb, const char *name)
{
    const int g = r->ngroups++;
    snprintf(r->names[g], sizeof r->names[g], "%s", name);
    r->groups[g] = (dist_group_t){.off = x.off, .n = x.n, .layer = layer, .name = r->names[g],
                                  .grad = gpt_stage_model(r->st[v])->grads + x.off};
    r->gchunk[g] = v;
    r->gemb[g] = (unsigned char)emb;
}

/*
 * The DP gradient groups of the chunks (pp_run_t.groups), registered with dist (the bucketer at
 * ZeRO 0, per-group reduce-scatters at ZeRO 1 and 2), and this rank's ZeRO shard of them. wte is
 * a group of its own on the first and the last stage, so that its DP slices are the same elements
 * on both and the embedding group sums matching slices.
 */
static int setup_groups(pp_run_t *r, int L)
{
    const int most = r->V * (L + 3);
    r->groups = calloc((size_t)most, sizeof *r->groups);
    r->names = calloc((size_t)most, sizeof *r->names);
    r->gchunk = calloc((size_t)most, sizeof *r->gchunk);
    r->gemb = calloc((size_t)most, 1);
    if (!r->groups || !r->names || !r->gchunk || !r->gemb) {
        snprintf(r->err, 512, "out of memory for the gradient groups");
        return -1;
    }
    for (int v = 0; v < r->V; v++) {
        const gpt_stage_t *st = r->st[v];
        const int first = gpt_stage_is_first(st), last = gpt_stage_is_last(st);
        gpt_range_t w = gpt_stage_wte(st);
        char name[32];
        if (first) {
            gpt_range_t e = gpt_stage_layer_range(st, -1);
            add_group(r, v, w, 0, 1, "wte");
            add_group(r, v, (gpt_range_t){w.off + w.n, e.n - w.n}, 0, 0, "wpe");
        }
        for (int l = 0; l < L; l++) {
            gpt_range_t b = gpt_stage_layer_range(st, l);
            snprintf(name, sizeof name, "h.%d", l);
            if (b.n) {
                add_group(r, v, b, l + 1, 0, name);
            }
        }
        if (last) {
            add_group(r, v, gpt_stage_layer_range(st, L), L + 1, 0, "lnf");
        }
        if (last && !first) {
            add_group(r, v, w, L + 1, 2, "wte (head)");
        }
    }
    dist_grad_opts_t go = r->o->grad;
    go.mode = r->o->zero ? DIST_REDUCE_SCATTER : DIST_ALLREDUCE;
    if (r->d->grads_register(r->d, NULL, r->groups, r->ngroups, &go)) {
        return fail_dist(r, "DP gradient synchronization");
    }
    r->sync = r->d->size > 1;
    if (zero_shard_init(&r->z, r->groups, r->ngroups, r->o->zero, r->d->size, r->d->rank)) {
        snprintf(r->err, 512, "out of memory for the AdamW state");
        return -1;
    }
    return r->o->zero == 3 ? setup_z3(r) : 0;
}

static int setup(pp_run_t *r, const gpt_config_t *cfg)
{
    const pp_train_opts_t *o = r->o;
    dist_t *d = r->d;
    if (pp_schedule_make(o->kind, r->P, r->M, r->V, d->pp_rank, &r->s)) {
        return fail_model(r, "pipeline schedule");
    }
    r->msg = (size_t)o->B * (size_t)o->T * (size_t)cfg->channels / seq_div(o);
    const size_t nmsg = (size_t)r->M * (size_t)r->V * 4;
    r->st = calloc((size_t)r->V, sizeof *r->st);
    r->bwd_done = calloc((size_t)r->V, sizeof *r->bwd_done);
    r->bufs = calloc(nmsg * r->msg, sizeof(float));
    r->req = calloc(nmsg, sizeof *r->req);
    r->x = malloc((size_t)r->M * (size_t)o->B * (size_t)o->T * sizeof(int));
    r->y = malloc((size_t)r->M * (size_t)o->B * (size_t)o->T * sizeof(int));
    if (!r->st || !r->bwd_done || !r->bufs || !r->req || !r->x || !r->y) {
        snprintf(r->err, 512, "out of memory for the pipeline's buffers");
        return -1;
    }
    for (int v = 0; v < r->V; v++) {
        int l0, l1;
        pp_stage_layers(cfg->n_layer, r->P, r->V, d->pp_rank, v, &l0, &l1);
        if (gpt_stage_create_tp(cfg, o->tp, l0, l1, r->s.slots[v], o->B, o->T, o->seed,
                                &r->st[v]) ||
            gpt_stage_set_recompute(r->st[v], o->recompute)) {
            return fail_model(r, "pipeline stage");
        }
    }
    return setup_groups(r, cfg->n_layer);
}

static void teardown(pp_run_t *r)
{
    for (int v = 0; r->st && v < r->V; v++) {
        gpt_stage_destroy(r->st[v]);
    }
    free(r->st);
    free(r->bwd_done);
    free(r->groups);
    free(r->names);
    free(r->gchunk);
    free(r->gemb);
    for (int v = 0; r->pwork && r->pheld && v < r->V; v++) {
        if (r->pheld[v] != 1) { /* else an all-gather may still write it: the job aborts */
            free(r->pwork[v]);
        }
    }
    free(r->pshard);
    free(r->pwork);
    free(r->pheld);
    zero_shard_free(&r->z);
    free(r->bufs);
    free(r->req);
    free(r->x);
    free(r->y);
    pp_schedule_free(&r->s);
}

/* This rank's memory per kind (the memory lines' fields): parameters (ZeRO 3: the shard kept
 * between steps), ZeRO 3's chunks gathered during a step, gradients, AdamW state, activations,
 * stage messages; floats. */
enum { MEM_PARAMS, MEM_GATHERED, MEM_GRADS, MEM_ADAMW, MEM_ACTS, MEM_MSGS, MEM_N };

static void memory_of(const pp_run_t *r, double *f)
{
    size_t par = 0, act = 0; /* the chunks' parameters (and gradients), every chunk's slots */
    for (int v = 0; v < r->V; v++) {
        par += gpt_stage_model(r->st[v])->num_params;
        act += gpt_stage_act_floats(r->st[v]);
    }
    f[MEM_PARAMS] = (double)(r->pshard ? r->z.shard_n : par);
    f[MEM_GATHERED] = r->pshard ? (double)par : 0;
    f[MEM_GRADS] = (double)par; /* whole in each chunk's buffer, at every ZeRO stage */
    f[MEM_ADAMW] = 2.0 * (double)r->z.shard_n;
    f[MEM_ACTS] = (double)act;
    f[MEM_MSGS] = (double)r->M * r->V * 4 * (double)r->msg;
}

/* Job rank 0 prints each pipeline rank's memory, from its line's ranks (collective over the line:
 * every rank calls it). 0, or -1 with the reason in r->err. */
static int print_memory(pp_run_t *r)
{
    double *m = calloc((size_t)r->P * MEM_N, sizeof(double));
    if (!m) {
        snprintf(r->err, 512, "out of memory");
        return -1;
    }
    memory_of(r, m + (size_t)r->d->pp_rank * MEM_N);
    if (r->d->pp_allreduce(r->d, DIST_PP_LINE, m, (size_t)r->P * MEM_N, 1)) {
        free(m);
        return fail_dist(r, "memory of the stages");
    }
    for (int p = 0; p < r->P && r->d->world_rank == 0; p++) {
        const double *f = m + (size_t)p * MEM_N;
        printf("memory per rank (pp rank %d): parameters %.2f MB", p, 4e-6 * f[MEM_PARAMS]);
        if (r->pshard) {
            printf(" between steps (this rank's shard), %.2f MB more during a step (the chunks "
                   "gathered)", 4e-6 * f[MEM_GATHERED]);
        }
        printf(", gradients %.2f MB, AdamW state %.2f MB (ZeRO %d over %d DP rank%s), activations "
               "%.2f MB, stage messages %.2f MB\n",
               4e-6 * f[MEM_GRADS], 4e-6 * f[MEM_ADAMW], r->o->zero, r->d->size,
               r->d->size == 1 ? "" : "s", 4e-6 * f[MEM_ACTS], 4e-6 * f[MEM_MSGS]);
    }
    fflush(stdout);
    free(m);
    return 0;
}

/* Job rank 0 prints the layout of its line's chunks: which layers each rank runs. */
static void print_stages(const pp_run_t *r, const gpt_config_t *cfg)
{
    printf("pipeline: %s, %d stages x %d chunk%s, %d micro-batch%s of %d x %d tokens per step;",
           pp_kind_name(r->o->kind), r->P, r->V, r->V == 1 ? "" : "s", r->M,
           r->M == 1 ? "" : "es", r->o->B, r->o->T);
    for (int p = 0; p < r->P; p++) {
        printf(" pp rank %d: layers", p);
        for (int v = 0; v < r->V; v++) {
            int l0, l1;
            pp_stage_layers(cfg->n_layer, r->P, r->V, p, v, &l0, &l1);
            printf("%s %d-%d", v ? "," : "", l0, l1 - 1);
        }
        printf("%s%s%s", p == 0 ? " + embeddings" : "", p == r->P - 1 ? " + lnf, head" : "",
               p < r->P - 1 ? ";" : "\n");
    }
    size_t act = 0, seq = 0; /* every chunk's slots (as many as the schedule keeps in flight) */
    for (int v = 0; v < r->V; v++) {
        act += gpt_stage_act_floats(r->st[v]);
        seq += gpt_stage_act_seq_floats(r->st[v]);
    }
    if (r->pshard) {
        printf("ZeRO 3 over %d DP rank%s: each chunk's parameters all-gathered whole once per "
               "step (posted at the step's start, waited for before the chunk's first forward, "
               "freed after its last backward; not per micro-batch or layer group: sharded "
               "between steps only); gradients whole in the chunk's buffer, reduce-scattered "
               "after its last backward (as ZeRO 1)\n", r->d->size, r->d->size == 1 ? "" : "s");
    }
    printf("DP gradients: %s\n", r->d->describe(r->d));
    printf("activations per rank (pp rank 0): %.3f MB (recompute %s), of which LayerNorm and "
           "residual regions %.3f MB%s\n",
           4e-6 * (double)act, gpt_recompute_name(r->o->recompute), 4e-6 * (double)seq,
           seq_div(r->o) > 1 ? " (sequence-parallel: 1/tp of them)" : "");
    printf("stage messages: %zu floats per activation and its gradient (micro-batch %d x %d "
           "x %d channels%s)\n",
           r->msg, r->o->B, r->o->T, cfg->channels,
           seq_div(r->o) > 1 ? ", the rank's 1/tp of the sequence" : "");
}

int pp_train_run(dist_t *d, const gpt_config_t *cfg, loader_t *ld, const pp_train_opts_t *o,
                 char *err)
{
    pp_run_t r = {.d = d, .o = o, .P = d->pp_size, .V = o->V, .M = o->M, .err = err};
    pp_ops_t ops = {.ctx = &r, .compute = cb_compute, .post = cb_post, .wait = cb_wait};
    int rc = setup(&r, cfg), start = 0, ckpt_failed = 0;
    if (!rc && o->resume && (start = load(&r, cfg, ld)) < 0) {
        rc = -1;
    }
    if (!rc && o->ckpt0 && save(&r, cfg, ld, 0) < 0) { /* a failed save is a warning */
        rc = -1;
    }
    adamw_cfg_t ac = {.beta1 = (float)o->beta1,
                      .beta2 = (float)o->beta2,
                      .eps = 1e-8f,
                      .weight_decay = (float)o->wd};
    const size_t BT = (size_t)o->B * (size_t)o->T;
    const double tokens_step = (double)BT * o->M * d->size;
    const double formula = pp_bubble_formula(o->kind, r.P, r.M, r.V);
    double sum_bubble = 0;
    int nsum = 0;
    stats_run_t run = {0};
    /* (3 P) each pipeline rank's busy time, executor window and compute (sums over the job: each
     * rank fills its own); sums over the steps after the first of each pipeline rank's compute
     * (mean over its DP ranks) */
    const size_t ntm = 3 * (size_t)r.P;
    double *tm = calloc(ntm, sizeof(double)), *sum_comp = calloc(r.P, sizeof(double));
    if (!rc && (!tm || !sum_comp)) {
        snprintf(err, 512, "out of memory for the timers");
        rc = -1;
    }
    if (!rc && d->world_rank == 0) {
        print_stages(&r, cfg);
    }
    if (!rc && !o->dump) {
        rc = print_memory(&r);
    }
    double first_val = NAN, val = NAN;
    if (!rc && o->val_every > 0 && !o->dump) {
        rc = evaluate(&r, ld, &first_val);
        if (!rc && d->world_rank == 0) {
            printf("step %4d | val loss %.4f\n", start, first_val);
        }
        if (!rc && o->csv && start == 0) { /* a new run's curve starts at the untrained model */
            stats_csv_val(o->csv, 0, first_val);
        }
    }
    for (int s = start; s < o->steps && !rc; s++) {
        double t0 = stats_begin(d), loss, norm;
        stats_step_t st = {.step = 0}; /* stats_end's, unless the step failed before it */
        for (int k = 0; k < r.M; k++) {
            loader_next_train(ld, r.x + (size_t)k * BT, r.y + (size_t)k * BT);
        }
        for (int v = 0; v < r.V; v++) {
            gpt_stage_zero_grad(r.st[v]);
            r.bwd_done[v] = 0;
        }
        r.loss_sum = 0;
        if (r.sync && d->grads_begin(d, 1)) {
            rc = fail_dist(&r, "DP gradients");
            break;
        }
        if (params_all(&r, 0)) { /* ZeRO 3: every chunk's all-gathers, waited for by cb_compute */
            rc = -1;
            break;
        }
        pp_exec_t ex;
        pp_exec_init(&ex, &r.s);
        if (pp_exec_run(&ex, &ops) != 0 || sync_grads(&r, &loss, &norm)) {
            rc = -1;
            break;
        }
        if (o->dump) {
            rc = dump(&r, s, loss);
            break;
        }
        float scale = clip_scale(norm, (float)o->clip);
        float lr =
            lr_schedule(s, o->warmup, o->steps, (float)o->lr, (float)(o->lr * o->min_lr_frac));
        rc = update(&r, s + 1, &ac, lr, scale);
        if (!rc && stats_end(d, t0, &st)) {
            rc = fail_dist(&r, "timers");
        }
        double *busy = tm, *win = tm + r.P, *comp = tm + 2 * r.P;
        memset(tm, 0, ntm * sizeof(double));
        busy[d->pp_rank] = ex.step - ex.idle;
        win[d->pp_rank] = ex.step;
        comp[d->pp_rank] = ex.compute;
        if (!rc && (d->pp_allreduce(d, DIST_PP_LINE, tm, ntm, 1) ||
                    d->pp_allreduce(d, DIST_PP_DP, tm, ntm, 1))) {
            rc = fail_dist(&r, "timers");
        }
        for (size_t i = 0; i < ntm; i++) {
            tm[i] /= d->size; /* means over the DP ranks of each pipeline rank */
        }
        const double bubble = pp_line_bubble(busy, win, r.P);
        const int last = s + 1 == o->steps;
        val = NAN;
        if (!rc && o->val_every > 0 && ((s + 1) % o->val_every == 0 || last)) {
            rc = evaluate(&r, ld, &val);
        }
        stats_add(&run, s + 1, start + 1, &st);
        if (s > start) {
            sum_bubble += bubble;
            nsum++;
            for (int p = 0; p < r.P; p++) {
                sum_comp[p] += comp[p];
            }
        }
        if (!rc && d->world_rank == 0) {
            if (!o->quiet) {
                printf("step %4d/%d | loss %.4f | lr %.2e | norm %.3f | %8.0f tok/s", s + 1,
                       o->steps, loss, lr, norm, tokens_step / st.step);
                stats_print_step(stdout, &st);
                printf(" | bubble %.3f (formula %.3f)", bubble, formula);
                if (!isnan(val)) {
                    printf(" | val loss %.4f", val);
                }
                printf("\n");
                fflush(stdout);
            }
            if (o->csv) {
                fprintf(o->csv, "%d,%.17g,", s + 1, loss);
                if (!isnan(val)) {
                    fprintf(o->csv, "%.17g", val);
                }
                fprintf(o->csv, ",%.6e,", lr);
                stats_csv_row(o->csv, tokens_step / st.step, &st);
                fflush(o->csv);
            }
        }
        if (!rc && o->ckpt_every > 0 && ((s + 1) % o->ckpt_every == 0 || s + 1 == o->steps)) {
            ckpt_failed = save(&r, cfg, ld, s + 1);
            rc = ckpt_failed < 0 ? -1 : 0;
        }
    }
    if (!rc && d->world_rank == 0) {
        stats_print_run(&run, tokens_step);
    }
    if (!rc && nsum && d->world_rank == 0) {
        printf("bubble, mean of steps %d-%d: %.3f measured, %.3f formula (%s, P %d, M %d, V %d), "
               "%.3f for the stages' measured compute\n",
               start + 2, o->steps, sum_bubble / nsum, formula,
               o->kind == PP_INTERLEAVED ? "(P-1)/(V M)" : "(P-1)/M", r.P, r.M, r.V,
               pp_bubble_stages(o->kind, sum_comp, r.P, r.M, r.V));
        printf("compute per step (ms, mean of steps %d-%d) of pp rank", start + 2, o->steps);
        for (int p = 0; p < r.P; p++) {
            printf(" %d: %.1f%s", p, sum_comp[p] / nsum * 1e3, p + 1 < r.P ? "," : "");
        }
        printf(" (the formula for stages of these costs: step = max + (sum - max) / (%sM))\n",
               o->kind == PP_INTERLEAVED ? "V " : "");
    }
    free(tm);
    free(sum_comp);
    if (!rc && o->val_every > 0 && !o->dump && start < o->steps && d->world_rank == 0) {
        printf("validation loss: %.6f at start, %.6f at the end\n", first_val, val);
    }
    if (!rc && !o->dump) {
        stats_print_rss(d); /* the stages still allocated, as train.c's runs */
    }
    teardown(&r);
    return rc ? rc : ckpt_failed;
}
