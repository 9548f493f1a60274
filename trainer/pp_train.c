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
 *   3. sum the tied wte gradient of the first and the last stage over the embedding group;
 *   4. average every stage buffer's gradients over the DP group (one all-reduce per chunk);
 *   5. the global norm: Σ g² of each chunk (wte counted on the first stage only), summed over
 *      the line; clip, and AdamW on each chunk.
 * The step's bubble is the line's (pp_line_bubble: the longest executor window of the line is
 * the step, and each rank's idle is that step less its busy time, so the flush's tail counts on
 * the later ranks as it does in the formula), from the mean over the DP ranks of each pipeline
 * rank's times, printed next to pp_bubble_formula; the run's last line adds each pipeline rank's
 * compute per step (mean of the steps after the first) and the formula for stages of those costs
 * (pp_bubble_stages), since the stages are not equal (the first holds the embeddings, the last
 * the head and the loss) and on a shared machine neither are the cores.
 *
 * Invariants: DP ranks of a stage hold the same parameters (same seed, same averaged gradients);
 * the first and last stage hold the same wte (same summed gradient). Every rank calls the same
 * collectives in the same order.
 *
 * Checkpoints hold the single-rank layout: parameters and AdamW moments are gathered into it on
 * every rank (each chunk places its tensors, a sum over the line fills the rest; wte comes from
 * the first stage) and job rank 0 writes them as a one-rank run would; a load slices them back.
 *
 * With --tp T, each stage is tensor-parallel over the rank's TP group (gpt_stage_create_tp with
 * train.c's callbacks): the embedding group pairs the same TP rank's wte shards, the DP average
 * is over each stage's shards, the norm sums every tensor once (replicated ones from TP rank 0)
 * over the line and the TP group, and the checkpoint gather places each TP rank's shards (the
 * replicated tensors from TP rank 0) before summing over the line and the TP group.
 *
 * Not here (refused by train.c): sequence parallelism inside a stage, ZeRO 1/2/3, sampling.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "trainer/optim.h"
#include "trainer/pp_train.h"

typedef struct {
    dist_t *d;
    const pp_train_opts_t *o;
    pp_schedule_t s;
    int P, V, M;
    size_t msg;       /* floats of one message: B T C */
    gpt_stage_t **st; /* (V) */
    float **m1, **m2; /* (V) AdamW moments of each chunk */
    float *bufs;      /* (M V 4 msg): message (mb, chunk, grad, send) at buf_of */
    void **req;       /* (M V 4) posted requests */
    int *x, *y;       /* (M, B T) the step's inputs and targets */
    double loss_sum;  /* the last stage's sum of micro-batch losses this step */
    char *err;
} pp_run_t;

static size_t msg_index(const pp_run_t *r, const pp_action_t *a, int send)
{
    return (((size_t)a->mb * (size_t)r->V + (size_t)a->chunk) * 2 + (size_t)a->grad) * 2 +
           (size_t)send;
}

static float *buf_of(const pp_run_t *r, const pp_action_t *a, int send)
{
    return r->bufs + msg_index(r, a, send) * r->msg;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
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
    return r->d->pp_trace(r->d, name, 0) ? fail_dist(r, "trace") : 0;
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

/* Σ g² of chunk v's gradients over the tensors counts_tensor gives this rank: summed over the
 * line and the TP group, every parameter of the model counts once. */
static double chunk_sumsq(const pp_run_t *r, int v)
{
    const gpt_model_t *m = gpt_stage_model(r->st[v]);
    double sq = 0;
    for (int i = 0; i < m->num_tensors; i++) {
        if (counts_tensor(r, v, i)) {
            sq += grad_sumsq(m->grads + m->tensors[i].offset, m->tensors[i].size);
        }
    }
    return sq;
}

/* Buffer k (0 parameters, 1 gradients, 2 and 3 the AdamW moments) of chunk v. */
static float *chunk_buf(const pp_run_t *r, int v, int k)
{
    const gpt_model_t *m = gpt_stage_model(r->st[v]);
    return k == 0 ? m->params : k == 1 ? m->grads : k == 2 ? r->m1[v] : r->m2[v];
}

/* Between buffer k of the chunks and the single-rank layout (full, full_params floats): to_full
 * places this rank's TP shards of the tensors counts_tensor gives it, else slices its shards out
 * of full. */
static void chunks_full(const pp_run_t *r, int k, float *full, int to_full)
{
    for (int v = 0; v < r->V; v++) {
        const gpt_model_t *m = gpt_stage_model(r->st[v]);
        for (int i = 0; i < m->num_tensors; i++) {
            if (!to_full || counts_tensor(r, v, i)) {
                gpt_tp_copy(m, i, r->d->tp_rank, full, chunk_buf(r, v, k), to_full);
            }
        }
    }
}

/* Buffer k of the whole model in the single-rank layout on every rank of the line (a sum over the
 * line and the TP group of each rank's placed tensors, zeros elsewhere: exact). */
static float *gather_full(pp_run_t *r, int k)
{
    size_t n = gpt_stage_model(r->st[0])->full_params;
    float *full = calloc(n, sizeof(float));
    if (!full) {
        snprintf(r->err, 512, "out of memory gathering the stages");
        return NULL;
    }
    chunks_full(r, k, full, 1);
    if (r->d->pp_allreduce(r->d, DIST_PP_LINE, full, n, 0) ||
        (r->d->tp_size > 1 && r->d->tp_allreduce(r->d, full, n, 0))) {
        free(full);
        fail_dist(r, "gathering the stages");
        return NULL;
    }
    return full;
}

static int dump(pp_run_t *r, double loss)
{
    float *g = gather_full(r, 1);
    if (!g) {
        return -1;
    }
    size_t n = gpt_stage_model(r->st[0])->full_params;
    int rc = 0;
    if (r->d->world_rank == 0) {
        FILE *f = fopen(r->o->dump, "wb");
        double hdr[2] = {loss, (double)n};
        if (!f || fwrite(hdr, sizeof hdr, 1, f) != 1 || fwrite(g, sizeof(float), n, f) != n ||
            fclose(f) != 0) {
            snprintf(r->err, 512, "cannot write %s", r->o->dump);
            rc = -1;
        }
    }
    free(g);
    return rc;
}

/* Steps 3-5 of the header after the schedule: the gradient sums, the norm; *loss_p, *norm_p. */
static int sync_grads(pp_run_t *r, double *loss_p, double *norm_p)
{
    dist_t *d = r->d;
    for (int v = 0; v < r->V; v++) {
        gpt_stage_t *st = r->st[v];
        const gpt_model_t *m = gpt_stage_model(st);
        gpt_range_t w = gpt_stage_wte(st);
        int emb = (v == 0 && d->pp_rank == 0) || (v == r->V - 1 && d->pp_rank == r->P - 1);
        if (emb && d->pp_allreduce(d, DIST_PP_EMBED, m->grads + w.off, w.n, 0)) {
            return fail_dist(r, "tied embedding gradient");
        }
        if (d->size > 1) {
            if (d->pp_allreduce(d, DIST_PP_DP, m->grads, m->num_params, 0)) {
                return fail_dist(r, "DP gradients");
            }
            for (size_t i = 0; i < m->num_params; i++) {
                m->grads[i] /= (float)d->size;
            }
        }
    }
    double red[2] = {r->loss_sum, 0};
    for (int v = 0; v < r->V; v++) {
        red[1] += chunk_sumsq(r, v);
    }
    if (d->tp_size > 1 && d->tp_sum_f64(d, red + 1, 1)) { /* the loss is the same on TP ranks */
        return fail_dist(r, "gradient norm");
    }
    if (d->pp_allreduce(d, DIST_PP_LINE, red, 2, 1)) { /* the loss is on the last stage only */
        return fail_dist(r, "loss and gradient norm");
    }
    if (d->pp_allreduce(d, DIST_PP_DP, red, 1, 1)) { /* the norm is the same on the DP ranks */
        return fail_dist(r, "loss");
    }
    *loss_p = red[0] / ((double)r->M * d->size);
    *norm_p = sqrt(red[1]);
    return 0;
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
    const size_t n = (size_t)T * (size_t)gpt_stage_model(r->st[0])->cfg.channels;
    size_t nv = loader_val_windows(ld);
    nv = nv < (size_t)r->o->val_windows ? nv : (size_t)r->o->val_windows;
    float *x = r->bufs, *y = r->bufs + r->msg; /* message buffers are B T C >= T C */
    double sum = 0;
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
    int rc = -1;
    for (int k = 0; k < 3; k++) {
        if (!(full[k] = malloc(want.num_params * sizeof(float)))) {
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
    for (int k = 0; k < 3; k++) {
        chunks_full(r, k ? k + 1 : 0, full[k], 0);
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
    return rc;
}

static int setup(pp_run_t *r, const gpt_config_t *cfg)
{
    const pp_train_opts_t *o = r->o;
    dist_t *d = r->d;
    if (pp_schedule_make(o->kind, r->P, r->M, r->V, d->pp_rank, &r->s)) {
        return fail_model(r, "pipeline schedule");
    }
    r->msg = (size_t)o->B * (size_t)o->T * (size_t)cfg->channels;
    const size_t nmsg = (size_t)r->M * (size_t)r->V * 4;
    r->st = calloc((size_t)r->V, sizeof *r->st);
    r->m1 = calloc((size_t)r->V, sizeof *r->m1);
    r->m2 = calloc((size_t)r->V, sizeof *r->m2);
    r->bufs = calloc(nmsg * r->msg, sizeof(float));
    r->req = calloc(nmsg, sizeof *r->req);
    r->x = malloc((size_t)r->M * (size_t)o->B * (size_t)o->T * sizeof(int));
    r->y = malloc((size_t)r->M * (size_t)o->B * (size_t)o->T * sizeof(int));
    if (!r->st || !r->m1 || !r->m2 || !r->bufs || !r->req || !r->x || !r->y) {
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
        size_t n = gpt_stage_model(r->st[v])->num_params;
        r->m1[v] = calloc(n, sizeof(float));
        r->m2[v] = calloc(n, sizeof(float));
        if (!r->m1[v] || !r->m2[v]) {
            snprintf(r->err, 512, "out of memory for AdamW state");
            return -1;
        }
    }
    return 0;
}

static void teardown(pp_run_t *r)
{
    for (int v = 0; r->st && v < r->V; v++) {
        gpt_stage_destroy(r->st[v]);
        free(r->m1[v]);
        free(r->m2[v]);
    }
    free(r->st);
    free(r->m1);
    free(r->m2);
    free(r->bufs);
    free(r->req);
    free(r->x);
    free(r->y);
    pp_schedule_free(&r->s);
}

/* Job rank 0 prints the layout of its line's chunks: which layers each rank runs. */
static void print_stages(const pp_run_t *r, const gpt_config_t *cfg)
{
    printf("pipeline: %s, %d stages x %d chunk(s), %d micro-batches of %d x %d tokens per step;",
           pp_kind_name(r->o->kind), r->P, r->V, r->M, r->o->B, r->o->T);
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
    size_t act = 0; /* every chunk's slots (as many as the schedule keeps in flight) */
    for (int v = 0; v < r->V; v++) {
        act += gpt_stage_act_floats(r->st[v]);
    }
    printf("memory per rank (pp rank 0): parameters %.2f MB\n",
           4e-6 * (double)gpt_stage_model(r->st[0])->num_params);
    printf("activations per rank (pp rank 0): %.3f MB (recompute %s)\n", 4e-6 * (double)act,
           gpt_recompute_name(r->o->recompute));
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
    adamw_cfg_t ac = {.beta1 = (float)o->beta1,
                      .beta2 = (float)o->beta2,
                      .eps = 1e-8f,
                      .weight_decay = (float)o->wd};
    const size_t BT = (size_t)o->B * (size_t)o->T;
    const double tokens_step = (double)BT * o->M * d->size;
    const double formula = pp_bubble_formula(o->kind, r.P, r.M, r.V);
    double sum_bubble = 0;
    int nsum = 0;
    /* (1 + 3 P) step time, then each pipeline rank's busy time, executor window and compute
     * (sums over the job: each rank fills its own); sums over the steps after the first of each
     * pipeline rank's compute (mean over its DP ranks) */
    const size_t ntm = 1 + 3 * (size_t)r.P;
    double *tm = calloc(ntm, sizeof(double)), *sum_comp = calloc(r.P, sizeof(double));
    if (!rc && (!tm || !sum_comp)) {
        snprintf(err, 512, "out of memory for the timers");
        rc = -1;
    }
    if (!rc && d->world_rank == 0) {
        print_stages(&r, cfg);
        fflush(stdout);
    }
    double first_val = NAN, val = NAN;
    if (!rc && o->val_every > 0 && !o->dump) {
        rc = evaluate(&r, ld, &first_val);
        if (!rc && d->world_rank == 0) {
            printf("step %4d | val loss %.4f\n", start, first_val);
        }
    }
    for (int s = start; s < o->steps && !rc; s++) {
        double t0 = now_s(), loss, norm;
        for (int k = 0; k < r.M; k++) {
            loader_next_train(ld, r.x + (size_t)k * BT, r.y + (size_t)k * BT);
        }
        for (int v = 0; v < r.V; v++) {
            gpt_stage_zero_grad(r.st[v]);
        }
        r.loss_sum = 0;
        pp_exec_t ex;
        pp_exec_init(&ex, &r.s);
        if (pp_exec_run(&ex, &ops) != 0 || sync_grads(&r, &loss, &norm)) {
            rc = -1;
            break;
        }
        if (o->dump) {
            rc = dump(&r, loss);
            break;
        }
        float scale = clip_scale(norm, (float)o->clip);
        float lr =
            lr_schedule(s, o->warmup, o->steps, (float)o->lr, (float)(o->lr * o->min_lr_frac));
        for (int v = 0; v < r.V; v++) {
            const gpt_model_t *m = gpt_stage_model(r.st[v]);
            if (adamw_step(m, m->params, m->grads, r.m1[v], r.m2[v], 0, m->num_params, s + 1, &ac,
                           lr, scale)) {
                rc = fail_model(&r, "optimizer");
            }
        }
        double *busy = tm + 1, *win = tm + 1 + r.P, *comp = tm + 1 + 2 * r.P;
        memset(tm, 0, ntm * sizeof(double));
        tm[0] = now_s() - t0;
        busy[d->pp_rank] = ex.step - ex.idle;
        win[d->pp_rank] = ex.step;
        comp[d->pp_rank] = ex.compute;
        if (!rc && (d->pp_allreduce(d, DIST_PP_LINE, tm, ntm, 1) ||
                    d->pp_allreduce(d, DIST_PP_DP, tm, ntm, 1))) {
            rc = fail_dist(&r, "timers");
        }
        for (size_t i = 1; i < ntm; i++) {
            tm[i] /= d->size; /* means over the DP ranks of each pipeline rank */
        }
        const double step_s = tm[0] / (r.P * d->size), bubble = pp_line_bubble(busy, win, r.P);
        const int last = s + 1 == o->steps;
        val = NAN;
        if (!rc && o->val_every > 0 && ((s + 1) % o->val_every == 0 || last)) {
            rc = evaluate(&r, ld, &val);
        }
        if (s > start) {
            sum_bubble += bubble;
            nsum++;
            for (int p = 0; p < r.P; p++) {
                sum_comp[p] += comp[p];
            }
        }
        if (!rc && d->world_rank == 0) {
            if (!o->quiet) {
                printf("step %4d/%d | loss %.4f | lr %.2e | norm %.3f | %8.0f tok/s | %7.1f ms | "
                       "bubble %.3f (formula %.3f)",
                       s + 1, o->steps, loss, lr, norm, tokens_step / step_s, step_s * 1e3, bubble,
                       formula);
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
                fprintf(o->csv, ",%.6e,%.1f,%.3f,%.3f,0,0\n", lr, tokens_step / step_s,
                        step_s * 1e3, step_s * 1e3);
                fflush(o->csv);
            }
        }
        if (!rc && o->ckpt_every > 0 && ((s + 1) % o->ckpt_every == 0 || s + 1 == o->steps)) {
            ckpt_failed = save(&r, cfg, ld, s + 1);
            rc = ckpt_failed < 0 ? -1 : 0;
        }
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
    teardown(&r);
    return rc ? rc : ckpt_failed;
}
