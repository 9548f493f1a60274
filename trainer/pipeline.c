/*
 * pipeline.c — the pipeline schedules (gpipe, 1f1b, interleaved 1F1B) as per-rank action lists,
 * and the executor that runs one list through callbacks (see pipeline.h).
 *
 * A schedule is built in two steps: the order of the rank's computations (the schedule proper),
 * then the communication each implies, placed around it (receives posted one computation ahead,
 * waited right before; sends posted right after, waited at the end of the step). Nothing here
 * communicates or computes; the executor only calls back and keeps time.
 *
 * Invariants: every (micro-batch, chunk) has one forward and one backward on its rank, the
 * backward after the forward; a message's tag depends on (boundary, micro-batch, direction) only,
 * so both sides compute it alike.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "trainer/model.h"
#include "trainer/pipeline.h"
#include "util/helpers.h"

static const char *const kind_names[] = {"gpipe", "1f1b", "interleaved"};

const char *pp_kind_name(pp_kind_t kind)
{
    return (unsigned)kind < 3 ? kind_names[kind] : "?";
}

int pp_kind_parse(const char *name, pp_kind_t *kind_p)
{
    for (int k = 0; k < 3; k++) {
        if (strcmp(name, kind_names[k]) == 0) {
            *kind_p = (pp_kind_t)k;
            return 0;
        }
    }
    return gpt_fail("pipeline schedule '%s' unknown: use gpipe, 1f1b or interleaved", name);
}

/* The checks that do not involve the layers. */
static int schedule_check(pp_kind_t kind, int P, int M, int V)
{
    if ((unsigned)kind > PP_INTERLEAVED) {
        return gpt_fail("pipeline: unknown schedule %d", (int)kind);
    }
    if (P < 1 || M < 1 || V < 1) {
        return gpt_fail("pipeline: stages (%d), micro-batches (%d) and chunks per rank (%d) must "
                        "be >= 1",
                        P, M, V);
    }
    if (V > 1 && kind != PP_INTERLEAVED) {
        return gpt_fail("pipeline: %d chunks per rank (--virtual) need the interleaved schedule, "
                        "not %s",
                        V, pp_kind_name(kind));
    }
    if (kind == PP_1F1B && M < P) {
        return gpt_fail("pipeline: 1f1b needs at least as many micro-batches as stages: %d "
                        "micro-batches < %d stages (use --micro >= %d, or gpipe)",
                        M, P, P);
    }
    if (kind == PP_INTERLEAVED && P < 2) {
        return gpt_fail("pipeline: the interleaved schedule needs at least 2 pipeline stages "
                        "(got %d)",
                        P);
    }
    if (kind == PP_INTERLEAVED && M % P != 0) {
        return gpt_fail("pipeline: the interleaved schedule needs micro-batches a multiple of the "
                        "stages: %d micro-batches, %d stages",
                        M, P);
    }
    return 0;
}

int pp_layout_check(pp_kind_t kind, int P, int M, int V, int n_layer)
{
    if (schedule_check(kind, P, M, V) != 0) {
        return -1;
    }
    if (n_layer % (P * V) != 0) {
        return gpt_fail("pipeline: %d layers cannot be split evenly into %d stages x %d chunks "
                        "per rank (layers must be a multiple of %d)",
                        n_layer, P, V, P * V);
    }
    return 0;
}

void pp_stage_layers(int n_layer, int P, int V, int rank, int chunk, int *l0_p, int *l1_p)
{
    const int per = n_layer / (P * V), s = chunk * P + rank;
    *l0_p = s * per;
    *l1_p = (s + 1) * per;
}

uint32_t pp_tag(int P, int V, int boundary, int mb, int grad)
{
    const uint32_t nb = (uint32_t)(P * V > 1 ? P * V - 1 : 1);
    return ((uint32_t)mb * nb + (uint32_t)boundary) * 2u + (uint32_t)(grad != 0);
}

double pp_bubble_formula(pp_kind_t kind, int P, int M, int V)
{
    return (double)(P - 1) / ((kind == PP_INTERLEAVED ? V : 1) * (double)M);
}

static double mean_bubble(const double *busy, double step, int P);

double pp_bubble_stages(pp_kind_t kind, const double *compute, int P, int M, int V)
{
    double mx = 0.0, sum = 0.0;
    for (int p = 0; p < P; p++) {
        mx = compute[p] > mx ? compute[p] : mx;
        sum += compute[p];
    }
    return mean_bubble(compute, mx + (sum - mx) / ((kind == PP_INTERLEAVED ? V : 1) * (double)M),
                       P);
}

/* ---- computation order ---- */

typedef struct {
    int bwd, mb, chunk;
} comp_t;

/*
 * The rank's computations in order into c (M·V forwards and M·V backwards). All three follow
 * Megatron's interleaved loop (warm-up forwards, then one forward one backward, then the
 * remaining backwards); with V = 1 only the warm-up differs: gpipe M, 1f1b P − r − 1.
 */
static void compute_order(pp_kind_t kind, int P, int M, int V, int r, comp_t *c)
{
    const int total = M * V, group = P * V;
    int warm;
    if (kind == PP_GPIPE) {
        warm = total;
    } else if (kind == PP_1F1B || V == 1) {
        warm = P - r - 1;
    } else if (M == P) {
        warm = total; /* Megatron: all warm-up when the micro-batches just fill the pipeline */
    } else {
        warm = 2 * (P - r - 1) + (V - 1) * P;
    }
    warm = warm < total ? warm : total;
    int n = 0, f = 0, b = 0;
#define PUSH(is_bwd, k)                          \
    do {                                         \
        int v_ = ((k) % group) / P;              \
        c[n].bwd = (is_bwd);                     \
        c[n].mb = ((k) / group) * P + (k) % P;   \
        c[n].chunk = (is_bwd) ? V - 1 - v_ : v_; \
        n++;                                     \
    } while (0)
    for (; f < warm; f++) {
        PUSH(0, f);
    }
    for (; f < total; f++, b++) { /* steady: one forward, one backward */
        PUSH(0, f);
        PUSH(1, b);
    }
    for (; b < total; b++) {
        PUSH(1, b);
    }
#undef PUSH
}

/* The message computation x receives (recv = 1) or sends (recv = 0); 0 if none. */
static int comp_msg(const pp_schedule_t *s, const comp_t *x, int recv, pp_action_t *a)
{
    const int S = s->P * s->V, st = x->chunk * s->P + s->rank;
    /* forward: receive from st - 1, send to st + 1; backward: the reverse */
    const int other = (x->bwd ? recv : !recv) ? st + 1 : st - 1;
    if (other < 0 || other >= S) {
        return 0;
    }
    const int boundary = other < st ? other : st;
    a->op = recv ? PP_POST_RECV : PP_POST_SEND;
    a->mb = x->mb;
    a->chunk = x->chunk;
    a->grad = x->bwd;
    a->peer = other % s->P;
    a->tag = pp_tag(s->P, s->V, boundary, x->mb, x->bwd);
    return 1;
}

int pp_schedule_make(pp_kind_t kind, int P, int M, int V, int rank, pp_schedule_t *s_p)
{
    if (schedule_check(kind, P, M, V) != 0) {
        return -1;
    }
    if (rank < 0 || rank >= P) {
        return gpt_fail("pipeline: rank %d outside 0..%d", rank, P - 1);
    }
    const int nc = 2 * M * V;
    pp_schedule_t s = {kind, P, M, V, rank, 0, NULL, NULL};
    comp_t *c = malloc((size_t)nc * sizeof *c);
    /* per computation at most: post recv (of the next), wait recv, compute, post send, wait send */
    s.a = malloc((size_t)(5 * nc + 1) * sizeof *s.a);
    s.slots = calloc((size_t)V, sizeof *s.slots);
    int *live = calloc((size_t)V, sizeof *live);
    if (!c || !s.a || !s.slots || !live) {
        free(c);
        free(live);
        pp_schedule_free(&s);
        return gpt_fail("pipeline: out of memory for a schedule of %d computations", nc);
    }
    compute_order(kind, P, M, V, rank, c);
    pp_action_t msg;
    if (comp_msg(&s, &c[0], 1, &msg)) {
        s.a[s.n++] = msg;
    }
    for (int k = 0; k < nc; k++) {
        if (k + 1 < nc && comp_msg(&s, &c[k + 1], 1, &msg)) {
            s.a[s.n++] = msg; /* posted before computation k: overlaps it */
        }
        if (comp_msg(&s, &c[k], 1, &msg)) {
            msg.op = PP_WAIT_RECV;
            s.a[s.n++] = msg;
        }
        pp_action_t comp = {c[k].bwd ? PP_BACKWARD : PP_FORWARD, c[k].mb, c[k].chunk, 0, -1, 0};
        s.a[s.n++] = comp;
        if (comp_msg(&s, &c[k], 0, &msg)) {
            s.a[s.n++] = msg;
        }
        live[c[k].chunk] += c[k].bwd ? -1 : 1;
        if (live[c[k].chunk] > s.slots[c[k].chunk]) {
            s.slots[c[k].chunk] = live[c[k].chunk];
        }
    }
    for (int k = 0; k < nc; k++) {
        if (comp_msg(&s, &c[k], 0, &msg)) {
            msg.op = PP_WAIT_SEND;
            s.a[s.n++] = msg;
        }
    }
    free(c);
    free(live);
    *s_p = s;
    return 0;
}

void pp_schedule_free(pp_schedule_t *s)
{
    if (!s) {
        return;
    }
    free(s->a);
    free(s->slots);
    s->a = NULL;
    s->slots = NULL;
    s->n = 0;
}

/* ---- executor ---- */

static double exec_now(const pp_ops_t *ops)
{
    return ops->now ? ops->now(ops->ctx) : util_now_s();
}

void pp_exec_init(pp_exec_t *ex, const pp_schedule_t *s)
{
    memset(ex, 0, sizeof *ex);
    ex->s = s;
    ex->t0 = -1.0;
}

int pp_exec_run(pp_exec_t *ex, const pp_ops_t *ops)
{
    if (ex->t0 < 0) {
        ex->t0 = exec_now(ops);
    }
    for (; ex->next < ex->s->n; ex->next++) {
        const pp_action_t *a = &ex->s->a[ex->next];
        int rc;
        if (a->op == PP_FORWARD || a->op == PP_BACKWARD) {
            double t = exec_now(ops);
            rc = ops->compute(ops->ctx, a);
            ex->compute += exec_now(ops) - t;
        } else if (a->op == PP_POST_RECV || a->op == PP_POST_SEND) {
            rc = ops->post(ops->ctx, a);
        } else {
            if (!ex->in_wait) {
                ex->wait_t0 = exec_now(ops);
            }
            rc = ops->wait(ops->ctx, a);
            ex->in_wait = rc == PP_AGAIN;
            if (rc == PP_AGAIN) {
                return PP_AGAIN;
            }
            ex->idle += exec_now(ops) - ex->wait_t0;
        }
        if (rc != 0) {
            return -1;
        }
    }
    ex->step = exec_now(ops) - ex->t0;
    return 0;
}

double pp_exec_bubble(const pp_exec_t *ex)
{
    const double busy = ex->step - ex->idle;
    return busy > 0 ? ex->idle / busy : 0.0;
}

/* The mean over the P ranks of (step - busy[p]) / busy[p]; step: the longest window, or the
 * bound on it that the stage costs give (pp_bubble_stages). */
static double mean_bubble(const double *busy, double step, int P)
{
    double b = 0.0;
    for (int p = 0; p < P; p++) {
        if (!(busy[p] > 0.0)) {
            return 0.0;
        }
        b += (step - busy[p]) / busy[p];
    }
    return b / P;
}

double pp_line_bubble(const double *busy, const double *window, int P)
{
    double step = 0.0;
    for (int p = 0; p < P; p++) {
        step = window[p] > step ? window[p] : step;
    }
    return mean_bubble(busy, step, P);
}
