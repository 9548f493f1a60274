/*
 * test_pipeline.c — the pipeline schedules and the model's stage API, in one process, no tempo.
 *
 * Every rank of a layout runs its schedule through the real executor (pp_exec_run) with callbacks
 * that simulate the other ranks in lockstep: messages are FIFO channels per (sender, receiver,
 * direction), a wait answers PP_AGAIN until its message is there, and time is virtual (a chunk's
 * forward 1 unit, backward 2, communication free). Checked for every gpipe, 1f1b and interleaved
 * layout with P 1..4, M 1..8, V 1..3: one forward and one backward per (chunk, micro-batch) on
 * its rank, the data dependencies between stages, sends and receives matched in the same order,
 * no deadlock (also with sends that complete only once their receive is posted), activations in
 * flight (1f1b <= P on rank 0, gpipe M), Megatron's interleaved order, and the bubble against its
 * formula; with ranks of unequal speed (a rank's compute costs `cost` units per unit) the mean
 * bubble against pp_bubble_stages. Then the stage API: a 4-layer model split into 2 or 4 stages, run through the
 * schedules with M micro-batches, gives the loss and every gradient of the whole model on the
 * full batch within 1e-5 relative. And the layout errors.
 */
#include "config.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/tap.h"
#include "trainer/model.h"
#include "trainer/pipeline.h"

#define MAXP 4
#define MAXM 8
#define MAXV 3
#define MAXS (MAXP * MAXV)
#define MAXTAG (2 * MAXM * MAXS)

/* ---- the simulated ranks ---- */

typedef struct {
    uint32_t tag[2 * MAXM * MAXV];
    double at[2 * MAXM * MAXV]; /* virtual time the send was posted */
    int head, tail;
} chan_t;

typedef struct sim sim_t;

typedef struct {
    sim_t *sim;
    int rank;
    double t; /* the rank's virtual clock */
} rank_t;

/* The stage-API side of a numerical run (NULL in the schedule-only runs). */
typedef struct {
    gpt_stage_t *st[MAXP][MAXV];
    int B, T, C;
    const int *tokens, *targets; /* (M, B, T) */
    float *buf[MAXTAG];          /* (B, T, C) per message, written by the sender */
    double loss_sum;
} num_t;

struct sim {
    pp_kind_t kind;
    int P, M, V, S, rendezvous;
    pp_schedule_t s[MAXP];
    pp_exec_t ex[MAXP];
    rank_t rk[MAXP];
    chan_t ch[MAXP][MAXP][2];
    int posted[MAXP][MAXTAG]; /* receives posted and not yet complete */
    int fwd[MAXS][MAXM], bwd[MAXS][MAXM];
    double fwd_end[MAXS][MAXM], bwd_end[MAXS][MAXM];
    int live[MAXP], max_live[MAXP];
    double cost[MAXP]; /* virtual time of one unit of compute on each rank */
    char err[256];     /* first violation */
    num_t *num;
};

static void sim_fail(sim_t *sm, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sim_fail(sim_t *sm, const char *fmt, ...)
{
    if (!sm->err[0]) { /* the first violation */
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(sm->err, sizeof sm->err, fmt, ap);
        va_end(ap);
    }
}

static int num_compute(num_t *nu, const sim_t *sm, int rank, const pp_action_t *a)
{
    gpt_stage_t *st = nu->st[rank][a->chunk];
    const int s = a->chunk * sm->P + rank, BT = nu->B * nu->T;
    float *in = NULL, *out = NULL; /* from the previous / to the next stage in a's direction */
    if (a->op == PP_FORWARD) {
        in = s > 0 ? nu->buf[pp_tag(sm->P, sm->V, s - 1, a->mb, 0)] : NULL;
        out = s < sm->S - 1 ? nu->buf[pp_tag(sm->P, sm->V, s, a->mb, 0)] : NULL;
        float loss = 0.0f;
        int rc = gpt_stage_forward(st, a->mb, s == 0 ? nu->tokens + a->mb * BT : NULL, in,
                                   out ? NULL : nu->targets + a->mb * BT, nu->B, nu->T, out,
                                   out ? NULL : &loss);
        nu->loss_sum += loss;
        return rc;
    }
    in = s < sm->S - 1 ? nu->buf[pp_tag(sm->P, sm->V, s, a->mb, 1)] : NULL;
    out = s > 0 ? nu->buf[pp_tag(sm->P, sm->V, s - 1, a->mb, 1)] : NULL;
    return gpt_stage_backward(st, a->mb, in, 1.0f / (float)sm->M, out);
}

static int cb_compute(void *ctx, const pp_action_t *a)
{
    rank_t *rk = ctx;
    sim_t *sm = rk->sim;
    const int s = a->chunk * sm->P + rk->rank, m = a->mb;
    if (a->op == PP_FORWARD) {
        if (sm->fwd[s][m]++) {
            sim_fail(sm, "stage %d: second forward of micro-batch %d", s, m);
        }
        if (s > 0 && (!sm->fwd[s - 1][m] || sm->fwd_end[s - 1][m] > rk->t)) {
            sim_fail(sm, "stage %d: forward of micro-batch %d before stage %d's", s, m, s - 1);
        }
        rk->t += sm->cost[rk->rank];
        sm->fwd_end[s][m] = rk->t;
        sm->max_live[rk->rank] = ++sm->live[rk->rank] > sm->max_live[rk->rank]
                                     ? sm->live[rk->rank]
                                     : sm->max_live[rk->rank];
    } else {
        if (sm->bwd[s][m]++ || !sm->fwd[s][m]) {
            sim_fail(sm, "stage %d: backward of micro-batch %d twice or before its forward", s, m);
        }
        if (s < sm->S - 1 && (!sm->bwd[s + 1][m] || sm->bwd_end[s + 1][m] > rk->t)) {
            sim_fail(sm, "stage %d: backward of micro-batch %d before stage %d's", s, m, s + 1);
        }
        rk->t += 2.0 * sm->cost[rk->rank];
        sm->bwd_end[s][m] = rk->t;
        sm->live[rk->rank]--;
    }
    return sm->num ? num_compute(sm->num, sm, rk->rank, a) : 0;
}

static int cb_post(void *ctx, const pp_action_t *a)
{
    rank_t *rk = ctx;
    sim_t *sm = rk->sim;
    if (a->peer < 0 || a->peer >= sm->P || a->tag >= MAXTAG) {
        sim_fail(sm, "rank %d: bad peer %d or tag %u", rk->rank, a->peer, a->tag);
        return -1;
    }
    if (a->op == PP_POST_RECV) {
        sm->posted[rk->rank][a->tag]++;
        return 0;
    }
    chan_t *c = &sm->ch[rk->rank][a->peer][a->grad];
    c->tag[c->tail] = a->tag;
    c->at[c->tail++] = rk->t;
    return 0;
}

static int cb_wait(void *ctx, const pp_action_t *a)
{
    rank_t *rk = ctx;
    sim_t *sm = rk->sim;
    if (a->op == PP_WAIT_SEND) {
        /* rendezvous: a send completes once its receiver has posted (or completed) the receive */
        return sm->rendezvous && sm->posted[a->peer][a->tag] == 0 ? PP_AGAIN : 0;
    }
    if (sm->posted[rk->rank][a->tag] != 1) {
        sim_fail(sm, "rank %d: wait for a receive (tag %u) posted %d times", rk->rank, a->tag,
                 sm->posted[rk->rank][a->tag]);
        return -1;
    }
    chan_t *c = &sm->ch[a->peer][rk->rank][a->grad];
    if (c->head == c->tail) {
        return PP_AGAIN;
    }
    if (c->tag[c->head] != a->tag) {
        sim_fail(sm, "rank %d waits for tag %u but rank %d sent tag %u first", rk->rank, a->tag,
                 a->peer, c->tag[c->head]);
        return -1;
    }
    rk->t = c->at[c->head] > rk->t ? c->at[c->head] : rk->t;
    c->head++;
    sm->posted[rk->rank][a->tag] = -1; /* complete: counts as posted for the sender's wait */
    return 0;
}

static double cb_now(void *ctx)
{
    return ((rank_t *)ctx)->t;
}

/* Runs every rank of the layout in lockstep, rank r's compute cost[r] times the unit (NULL:
 * 1 each); 0, or -1 with sm->err set. */
static int sim_run(sim_t *sm, pp_kind_t kind, int P, int M, int V, int rendezvous, num_t *num,
                   const double *cost)
{
    memset(sm, 0, sizeof *sm);
    sm->kind = kind;
    sm->P = P;
    sm->M = M;
    sm->V = V;
    sm->S = P * V;
    sm->rendezvous = rendezvous;
    sm->num = num;
    for (int r = 0; r < P; r++) {
        if (pp_schedule_make(kind, P, M, V, r, &sm->s[r]) != 0) {
            snprintf(sm->err, sizeof sm->err, "schedule: %s", gpt_last_error());
            return -1;
        }
        pp_exec_init(&sm->ex[r], &sm->s[r]);
        sm->rk[r] = (rank_t){sm, r, 0.0};
        sm->cost[r] = cost ? cost[r] : 1.0;
    }
    int done = 0;
    while (done < P && !sm->err[0]) {
        int progress = 0;
        done = 0;
        for (int r = 0; r < P; r++) {
            pp_ops_t ops = {&sm->rk[r], cb_compute, cb_post, cb_wait, cb_now};
            int before = sm->ex[r].next;
            int rc = sm->ex[r].next < sm->s[r].n ? pp_exec_run(&sm->ex[r], &ops) : 0;
            if (rc < 0) {
                sim_fail(sm, "rank %d: a callback failed at action %d", r, sm->ex[r].next);
            }
            done += rc == 0;
            progress |= sm->ex[r].next != before || rc == 0;
        }
        if (!progress && done < P) {
            sim_fail(sm, "deadlock: no rank can go on (%d of %d done)", done, P);
        }
    }
    for (int s = 0; s < sm->S && !sm->err[0]; s++) {
        for (int m = 0; m < M; m++) {
            if (sm->fwd[s][m] != 1 || sm->bwd[s][m] != 1) {
                sim_fail(sm, "stage %d micro-batch %d: forwards/backwards %d", s, m,
                         sm->fwd[s][m] * 10 + sm->bwd[s][m]);
            }
        }
    }
    for (int r = 0; r < P; r++) {
        for (int a = 0; a < 2; a++) {
            for (int q = 0; q < P; q++) {
                if (sm->ch[r][q][a].head != sm->ch[r][q][a].tail) {
                    sim_fail(sm, "rank %d sent rank %d messages nobody received (kind %d)", r, q,
                             a);
                }
            }
        }
    }
    return sm->err[0] ? -1 : 0;
}

static void sim_free(sim_t *sm)
{
    for (int r = 0; r < sm->P; r++) {
        pp_schedule_free(&sm->s[r]);
    }
}

/*
 * Megatron's order, transcribed from its schedules.py: the interleaved schedule for V > 1, the
 * one without interleaving (warm-up P - r - 1) for V == 1, as Megatron picks.
 */
static int megatron_order(int P, int M, int V, int r, int *ops /* (2MV, 3): bwd, mb, chunk */)
{
    const int total = M * V;
    int warm = V == 1 ? P - r - 1 : M == P ? total : (P - r - 1) * 2 + (V - 1) * P;
    warm = warm < total ? warm : total;
    int n = 0;
    for (int i = 0; i < 2 * total; i++) {
        /* warm-up forwards, then forward k = warm + j / backward j, then backwards */
        int bwd, k;
        if (i < warm) {
            bwd = 0, k = i;
        } else if (i < warm + 2 * (total - warm)) {
            int j = (i - warm) / 2;
            bwd = (i - warm) % 2, k = bwd ? j : warm + j;
        } else {
            bwd = 1, k = i - total;
        }
        int chunk = (k % (P * V)) / P;
        ops[3 * n] = bwd;
        ops[3 * n + 1] = (k / (P * V)) * P + k % P;
        ops[3 * n + 2] = bwd ? V - 1 - chunk : chunk;
        n++;
    }
    return n;
}

static int order_matches(const pp_schedule_t *s, const int *ops, int n)
{
    int j = 0;
    for (int i = 0; i < s->n; i++) {
        const pp_action_t *a = &s->a[i];
        if (a->op != PP_FORWARD && a->op != PP_BACKWARD) {
            continue;
        }
        if (j >= n || ops[3 * j] != (a->op == PP_BACKWARD) || ops[3 * j + 1] != a->mb ||
            ops[3 * j + 2] != a->chunk) {
            return 0;
        }
        j++;
    }
    return j == n;
}

/* ---- schedules ---- */

static void test_schedules(void)
{
    int layouts = 0, bad = 0, bad_bubble = 0;
    for (int kind = 0; kind < 3; kind++) {
        for (int P = 1; P <= MAXP; P++) {
            for (int V = 1; V <= MAXV; V++) {
                for (int M = 1; M <= MAXM; M++) {
                    if (pp_layout_check((pp_kind_t)kind, P, M, V, P * V) != 0) {
                        continue;
                    }
                    static sim_t sm;
                    const char *kn = pp_kind_name((pp_kind_t)kind);
                    layouts++;
                    int ok = sim_run(&sm, (pp_kind_t)kind, P, M, V, 0, NULL, NULL) == 0;
                    /* bubble: every rank computes 3 M V units; the step ends with the last rank */
                    double end = 0.0;
                    for (int r = 0; r < P; r++) {
                        end = sm.rk[r].t > end ? sm.rk[r].t : end;
                    }
                    const double busy = 3.0 * M * V, bubble = (end - busy) / busy;
                    const double formula = pp_bubble_formula((pp_kind_t)kind, P, M, V);
                    const double rank0 = ok ? pp_exec_bubble(&sm.ex[0]) : -1.0;
                    /* the line's bubble, as tempo-train prints it: every rank counts the flush */
                    double rbusy[MAXP], rwin[MAXP];
                    for (int r = 0; r < P; r++) {
                        rbusy[r] = sm.ex[r].step - sm.ex[r].idle;
                        rwin[r] = sm.ex[r].step;
                    }
                    const double line = ok ? pp_line_bubble(rbusy, rwin, P) : -1.0;
                    int inflight_ok = 1, order_ok = 1;
                    if (ok && kind == PP_GPIPE) {
                        inflight_ok = sm.max_live[0] == M && sm.s[0].slots[0] == M;
                    } else if (ok && kind == PP_1F1B) {
                        inflight_ok = sm.max_live[0] <= P && sm.s[0].slots[0] == P;
                    }
                    if (ok && kind == PP_INTERLEAVED) {
                        for (int r = 0; r < P; r++) {
                            int ops[3 * 2 * MAXM * MAXV];
                            int n = megatron_order(P, M, V, r, ops);
                            order_ok &= order_matches(&sm.s[r], ops, n);
                        }
                    }
                    int bubble_ok = fabs(bubble - formula) < 1e-12 &&
                                    fabs(rank0 - formula) < 1e-12 && fabs(line - formula) < 1e-12;
                    if (!ok || !inflight_ok || !order_ok) {
                        bad++;
                        tap_diag("%s P=%d M=%d V=%d: %s%s%s", kn, P, M, V, sm.err,
                                 inflight_ok ? "" : " activations in flight on rank 0 wrong",
                                 order_ok ? "" : " order differs from Megatron's");
                    }
                    if (ok && !bubble_ok) {
                        bad_bubble++;
                        tap_diag("%s P=%d M=%d V=%d: bubble %.4f (rank 0 %.4f, line %.4f), "
                                 "formula %.4f",
                                 kn, P, M, V, bubble, rank0, line, formula);
                    }
                    sim_free(&sm);
                    if (ok && sim_run(&sm, (pp_kind_t)kind, P, M, V, 1, NULL, NULL) != 0) {
                        bad++;
                        tap_diag("%s P=%d M=%d V=%d with rendezvous sends: %s", kn, P, M, V,
                                 sm.err);
                    }
                    sim_free(&sm);
                }
            }
        }
    }
    /* gpipe 4 x 8, 1f1b 8 + 7 + 6 + 5 (M >= P), interleaved (4 + 2 + 2) x 3 (M a multiple of P >=
     * 2) */
    TAP_OK(bad == 0 && layouts == 32 + 26 + 24,
           "%d layouts: one forward and backward per (chunk, micro-batch), dependencies, "
           "matched sends and receives, no deadlock, activations in flight, Megatron order",
           layouts);
    TAP_OK(bad_bubble == 0,
           "the simulated bubble (forward 1, backward 2) equals the formula in "
           "all %d layouts, for the step, for rank 0's executor and for the line "
           "(pp_line_bubble)",
           layouts);
}

/* A literal: Megatron's interleaved schedule for P = 2, V = 2, M = 4 on rank 0, worked by hand. */
static void test_interleaved_literal(void)
{
    static const char want[] = "F00 F10 F01 F11 F20 B01 F30 B11 F21 B00 F31 B10 B21 B31 B20 B30 ";
    char got[256] = "";
    pp_schedule_t s;
    if (!TAP_OK(pp_schedule_make(PP_INTERLEAVED, 2, 4, 2, 0, &s) == 0, "interleaved 2x4x2")) {
        return;
    }
    for (int i = 0; i < s.n; i++) {
        if (s.a[i].op == PP_FORWARD || s.a[i].op == PP_BACKWARD) {
            char one[8];
            snprintf(one, sizeof one, "%c%d%d ", s.a[i].op == PP_FORWARD ? 'F' : 'B', s.a[i].mb,
                     s.a[i].chunk);
            strcat(got, one);
        }
    }
    TAP_EQ_STR(got, want, "interleaved P=2 V=2 M=4 rank 0 (F<mb><chunk>)");
    pp_schedule_free(&s);
}

/* ---- errors ---- */

static void expect_error(pp_kind_t kind, int P, int M, int V, int L, const char *needle)
{
    int rc = pp_layout_check(kind, P, M, V, L);
    TAP_EQ_INT(rc, -1, "%s P=%d M=%d V=%d L=%d refused", pp_kind_name(kind), P, M, V, L);
    TAP_CONTAINS(gpt_last_error(), needle, "... saying why");
}

static void test_errors(void)
{
    expect_error(PP_1F1B, 3, 6, 1, 4, "multiple of 3");
    expect_error(PP_INTERLEAVED, 2, 4, 2, 6, "multiple of 4");
    expect_error(PP_1F1B, 4, 3, 1, 4, "3 micro-batches < 4 stages");
    expect_error(PP_INTERLEAVED, 2, 3, 2, 4, "multiple of the stages");
    expect_error(PP_GPIPE, 2, 4, 2, 4, "need the interleaved schedule");
    expect_error(PP_INTERLEAVED, 1, 4, 2, 4, "at least 2 pipeline stages");
    pp_kind_t k;
    TAP_EQ_INT(pp_kind_parse("zb-v", &k), -1, "unknown schedule name refused");
    TAP_OK(pp_kind_parse("interleaved", &k) == 0 && k == PP_INTERLEAVED, "interleaved parsed");
    TAP_EQ_INT(pp_layout_check(PP_GPIPE, 4, 1, 1, 4), 0, "gpipe accepts M < P");
}

/* ---- the stage API against the whole model ---- */

static double rel_err(const float *a, const float *b, size_t n)
{
    double d = 0.0, m = 0.0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return m > 0 ? d / m : d;
}

static void test_stages(pp_kind_t kind, int P, int M, int V, uint64_t seed)
{
    const gpt_config_t cfg = {8, 32, 4, 2, 16};
    const int Bf = 4, T = 8, B = Bf / M, BT = B * T, C = cfg.channels;
    int *tok = malloc(sizeof(int) * Bf * T), *tgt = malloc(sizeof(int) * Bf * T);
    uint64_t rng = seed;
    for (int i = 0; i < Bf * T; i++) {
        tok[i] = (int)(gpt_random_u32(&rng) % (uint32_t)cfg.vocab_size);
        tgt[i] = (int)(gpt_random_u32(&rng) % (uint32_t)cfg.vocab_size);
    }
    gpt_model_t *whole = NULL;
    float loss = 0.0f;
    int ok = gpt_create(&cfg, seed, &whole) == 0 &&
             gpt_forward(whole, tok, tgt, Bf, T, &loss) == 0 && gpt_backward(whole, 1.0f) == 0;
    static num_t nu;
    memset(&nu, 0, sizeof nu);
    nu.B = B;
    nu.T = T;
    nu.C = C;
    nu.tokens = tok;
    nu.targets = tgt;
    for (int i = 0; i < MAXTAG; i++) {
        nu.buf[i] = malloc(sizeof(float) * BT * C);
    }
    int params_equal = 1;
    for (int r = 0; r < P && ok; r++) {
        pp_schedule_t s;
        ok = pp_schedule_make(kind, P, M, V, r, &s) == 0;
        for (int v = 0; v < V && ok; v++) {
            int l0, l1;
            pp_stage_layers(cfg.n_layer, P, V, r, v, &l0, &l1);
            ok = gpt_stage_create(&cfg, l0, l1, s.slots[v], B, T, seed, &nu.st[r][v]) == 0;
            const gpt_model_t *sv = ok ? gpt_stage_model(nu.st[r][v]) : NULL;
            for (int ti = 0; ok && ti < sv->num_tensors; ti++) {
                const gpt_tensor_t *t = &sv->tensors[ti];
                params_equal &=
                    memcmp(sv->params + t->offset, whole->params + whole->tensors[ti].offset,
                           t->size * sizeof(float)) == 0;
            }
        }
        pp_schedule_free(&s);
    }
    if (!TAP_OK(ok, "%s P=%d M=%d V=%d: model and stages made", pp_kind_name(kind), P, M, V)) {
        tap_diag("%s", gpt_last_error());
        goto out;
    }
    TAP_OK(params_equal, "stages initialized from the seed hold the whole model's parameters");
    static sim_t sm;
    if (!TAP_OK(sim_run(&sm, kind, P, M, V, 0, &nu, NULL) == 0, "%s P=%d M=%d V=%d ran on the stages",
                pp_kind_name(kind), P, M, V)) {
        tap_diag("%s; %s", sm.err, gpt_last_error());
        sim_free(&sm);
        goto out;
    }
    sim_free(&sm);
    const double pl = nu.loss_sum / M;
    double worst = fabs(pl - loss) / fabs(loss);
    const char *worst_name = "loss";
    /* every tensor from the stage holding it; wte summed over the stages holding it */
    float *g = malloc(sizeof(float) * whole->num_params);
    memset(g, 0, sizeof(float) * whole->num_params);
    for (int r = 0; r < P; r++) {
        for (int v = 0; v < V; v++) {
            const gpt_model_t *sv = gpt_stage_model(nu.st[r][v]);
            for (int ti = 0; ti < sv->num_tensors; ti++) {
                const gpt_tensor_t *t = &sv->tensors[ti];
                for (size_t i = 0; i < t->size; i++) {
                    g[whole->tensors[ti].offset + i] += sv->grads[t->offset + i];
                }
            }
        }
    }
    for (int ti = 0; ti < whole->num_tensors; ti++) {
        const gpt_tensor_t *t = &whole->tensors[ti];
        double e = rel_err(g + t->offset, whole->grads + t->offset, t->size);
        if (e > worst) {
            worst = e;
            worst_name = t->name;
        }
    }
    free(g);
    if (!TAP_OK(worst <= 1e-5,
                "%s P=%d M=%d V=%d: loss and gradients equal the whole model's "
                "(worst %.2e relative, %s)",
                pp_kind_name(kind), P, M, V, worst, worst_name)) {
        tap_diag("seed %llu, loss %.8f vs %.8f", (unsigned long long)seed, pl, loss);
    }
out:
    for (int r = 0; r < MAXP; r++) {
        for (int v = 0; v < MAXV; v++) {
            gpt_stage_destroy(nu.st[r][v]);
        }
    }
    for (int i = 0; i < MAXTAG; i++) {
        free(nu.buf[i]);
    }
    gpt_destroy(whole);
    free(tok);
    free(tgt);
}

/* The stage API's own checks: load, slots, arguments, tied wte placement, memory. */
static void test_stage_api(uint64_t seed)
{
    const gpt_config_t cfg = {8, 32, 4, 2, 16};
    gpt_model_t *whole = NULL;
    gpt_stage_t *first = NULL, *last = NULL, *mid = NULL;
    if (!TAP_OK(gpt_create(&cfg, seed + 1, &whole) == 0 &&
                    gpt_stage_create(&cfg, 0, 2, 1, 1, 8, seed, &first) == 0 &&
                    gpt_stage_create(&cfg, 2, 4, 1, 1, 8, seed, &last) == 0 &&
                    gpt_stage_create(&cfg, 1, 3, 1, 1, 8, seed, &mid) == 0,
                "stages [0,2) [2,4) [1,3) made")) {
        goto out;
    }
    const gpt_model_t *fm = gpt_stage_model(first), *lm = gpt_stage_model(last);
    const gpt_model_t *mm = gpt_stage_model(mid);
    const size_t VC = (size_t)cfg.vocab_size * cfg.channels;
    const size_t blk = gpt_layer_range(whole, 0).n;
    TAP_EQ_UINT(fm->num_params, gpt_layer_range(whole, -1).n + 2 * blk, "first: embeddings + 2");
    TAP_EQ_UINT(lm->num_params, 2 * blk + gpt_layer_range(whole, 4).n + VC,
                "last: 2 blocks + lnf + wte");
    TAP_EQ_UINT(mm->num_params, 2 * blk, "middle: its 2 blocks only");
    TAP_EQ_UINT(gpt_stage_wte(first).n, VC, "first holds wte");
    TAP_EQ_UINT(gpt_stage_wte(last).off, lm->num_params - VC, "last holds wte at its end");
    TAP_EQ_UINT(gpt_stage_wte(mid).n, 0, "middle holds no wte");
    TAP_OK(gpt_find_tensor(lm, "wpe")->size == 0 && gpt_find_tensor(mm, "h.0.ln1.w")->size == 0 &&
               gpt_find_tensor(mm, "h.2.mlp.fc.w")->size == 4 * 16 * 16,
           "tensors by global name; size 0 when not on the stage");
    TAP_EQ_INT(gpt_stage_load(last, whole), 0, "load from a whole model");
    const gpt_tensor_t *a = gpt_find_tensor(lm, "h.3.attn.qkv.w");
    const gpt_tensor_t *b = gpt_find_tensor(whole, "h.3.attn.qkv.w");
    TAP_OK(memcmp(lm->params + a->offset, whole->params + b->offset, a->size * 4) == 0 &&
               memcmp(lm->params + gpt_stage_wte(last).off, whole->params, VC * 4) == 0,
           "loaded tensors equal the model's");
    int tok[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    float y[8 * 16];
    TAP_EQ_INT(gpt_stage_forward(first, 0, tok, NULL, NULL, 1, 8, y, NULL), 0, "forward mb 0");
    TAP_EQ_INT(gpt_stage_forward(first, 1, tok, NULL, NULL, 1, 8, y, NULL), -1,
               "a second micro-batch with one slot refused");
    TAP_CONTAINS(gpt_last_error(), "all 1 activation slots", "... naming the slots");
    TAP_EQ_INT(gpt_stage_forward(mid, 0, tok, NULL, NULL, 1, 8, y, NULL), -1,
               "tokens on a middle stage refused");
    TAP_CONTAINS(gpt_last_error(), "takes x", "... saying what it takes");
    TAP_EQ_INT(gpt_stage_backward(first, 5, y, 0.0f, NULL), -1, "backward of no forward refused");
    TAP_EQ_INT(gpt_stage_backward(first, 0, y, 0.0f, NULL), 0, "backward of mb 0");
    TAP_EQ_INT(gpt_stage_forward(first, 1, tok, NULL, NULL, 1, 8, y, NULL), 0,
               "the slot is free again");
    TAP_EQ_INT(gpt_stage_create(&cfg, 3, 3, 1, 1, 8, seed, &mid), -1, "empty range refused");
out:
    gpt_stage_destroy(first);
    gpt_stage_destroy(last);
    gpt_stage_destroy(mid);
    gpt_destroy(whole);
}

/*
 * Ranks of unequal speed: the line's bubble (pp_line_bubble) against pp_bubble_stages of their compute times. Cost profiles: the last rank slower (a head), every
 * rank slower than the one before, the first rank slower (embeddings). pp_bubble_stages claims
 * exactness for gpipe with any profile and for 1f1b with non-decreasing costs; the other cases
 * (1f1b with a slower first rank, interleaved) are an estimate: their worst error is printed.
 */
static void test_unequal_stages(void)
{
    for (int kind = 0; kind < 3; kind++) {
        double worst_exact = 0.0, worst_est = 0.0;
        int runs = 0, failed = 0;
        for (int P = 2; P <= MAXP; P++) {
            for (int V = 1; V <= (kind == PP_INTERLEAVED ? MAXV : 1); V++) {
                for (int M = 1; M <= MAXM; M++) {
                    if (pp_layout_check((pp_kind_t)kind, P, M, V, P * V) != 0) {
                        continue;
                    }
                    for (int prof = 0; prof < 3; prof++) {
                        double cost[MAXP], compute[MAXP], busy[MAXP], win[MAXP];
                        for (int r = 0; r < P; r++) {
                            cost[r] = prof == 0 ? (r == P - 1 ? 1.5 : 1.0)
                                      : prof == 1 ? 1.0 + 0.25 * r
                                                  : (r == 0 ? 1.4 : 1.0);
                        }
                        static sim_t sm;
                        runs++;
                        if (sim_run(&sm, (pp_kind_t)kind, P, M, V, 0, NULL, cost) != 0) {
                            failed++;
                            tap_diag("%s P=%d M=%d V=%d profile %d: %s", pp_kind_name(kind), P,
                                     M, V, prof, sm.err);
                            sim_free(&sm);
                            continue;
                        }
                        for (int r = 0; r < P; r++) {
                            compute[r] = sm.ex[r].compute;
                            busy[r] = sm.ex[r].step - sm.ex[r].idle;
                            win[r] = sm.ex[r].step;
                        }
                        const double mean = pp_line_bubble(busy, win, P);
                        const double e =
                            fabs(mean - pp_bubble_stages((pp_kind_t)kind, compute, P, M, V));
                        const int exact = kind == PP_GPIPE || (kind == PP_1F1B && prof < 2);
                        if (exact && e > 1e-9) {
                            tap_diag("%s P=%d M=%d V=%d profile %d: bubble %.6f, predicted %.6f",
                                     pp_kind_name(kind), P, M, V, prof, mean,
                                     pp_bubble_stages((pp_kind_t)kind, compute, P, M, V));
                        }
                        worst_exact = exact && e > worst_exact ? e : worst_exact;
                        worst_est = !exact && e > worst_est ? e : worst_est;
                        sim_free(&sm);
                    }
                }
            }
        }
        if (kind == PP_INTERLEAVED) {
            TAP_OK(failed == 0 && runs > 0,
                   "interleaved, ranks of unequal speed: %d runs, no failure; pp_bubble_stages "
                   "estimates the line's bubble within %.3f",
                   runs, worst_est);
        } else {
            TAP_OK(failed == 0 && runs > 0 && worst_exact < 1e-9,
                   "%s, ranks of unequal speed: %d runs; the line's bubble equals "
                   "pp_bubble_stages (worst %.2g%s)",
                   pp_kind_name(kind), runs, worst_exact,
                   kind == PP_1F1B ? " with non-decreasing costs" : "");
            if (kind == PP_1F1B) {
                tap_diag("1f1b with a slower first rank: pp_bubble_stages within %.3f", worst_est);
            }
        }
    }
}

int main(void)
{
    const uint64_t seed = 20240917;
    tap_diag("seed %llu", (unsigned long long)seed);
    test_schedules();
    test_interleaved_literal();
    test_unequal_stages();
    test_errors();
    test_stage_api(seed);
    test_stages(PP_1F1B, 2, 4, 1, seed);
    test_stages(PP_1F1B, 2, 2, 1, seed);
    test_stages(PP_GPIPE, 2, 4, 1, seed);
    test_stages(PP_1F1B, 4, 4, 1, seed);
    test_stages(PP_INTERLEAVED, 2, 4, 2, seed);
    test_stages(PP_GPIPE, 1, 2, 1, seed);
    return tap_done();
}
