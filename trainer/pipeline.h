/*
 * pipeline.h — pipeline-parallel schedules as data, and the loop that executes one rank's
 * schedule through injected compute and communication callbacks.
 *
 * A schedule is a pure function of (kind, P, M, V, rank): the ordered list of actions of one
 * rank, each the forward or backward of micro-batch m on model chunk v of this rank (stage
 * s = v·P + rank of the P·V stages), or the posting of / waiting for the non-blocking receive or
 * send that a computation implies. Kinds:
 *   gpipe        all M forwards, then all M backwards (GPipe; picotron's AFAB); V = 1.
 *   1f1b         P − r − 1 warm-up forwards, then one forward one backward, then the cool-down
 *                backwards (PipeDream-Flush, Megatron's non-interleaved schedule); V = 1, M >= P.
 *   interleaved  Megatron's interleaved 1F1B: V non-adjacent chunks per rank, the k-th forward is
 *                chunk (k mod PV) / P of micro-batch (k / PV)·P + k mod P, the k-th backward the
 *                same micro-batch on chunk V − 1 − (k mod PV) / P; warm-up 2·(P − r − 1) +
 *                (V − 1)·P forwards (all of them when M == P); M a multiple of P, P >= 2. With
 *                V = 1 it is the 1f1b schedule (as Megatron falls back to it).
 * Bubble (Narayanan et al. 2021): idle time over compute time, (P − 1)/M for gpipe and 1f1b,
 * (P − 1)/(V·M) interleaved; idle over the whole step is then b / (1 + b).
 *
 * Communication in a schedule: the receive for the next computation is posted before the current
 * one runs (so the transfer overlaps it), the receive of a computation is waited for right before
 * it, its send is posted right after it, and every send is waited for at the end of the step. A
 * message is identified by (boundary between stages b and b + 1, micro-batch, activation or
 * gradient), which gives its tag (pp_tag); sends and receives on each (sender, receiver, kind)
 * pair come in the same order on both sides (test_pipeline checks every layout).
 *
 * How tempo-train plugs it in (after the mesh lands):
 *   - communicator: the mesh's PP communicator (ranks of one pipeline line, rank = stage index r);
 *     peers in actions are ranks of that communicator. post = tempo_irecv / tempo_isend of
 *     B·T·C floats with action.tag on a request kept per (mb, chunk, direction); wait =
 *     tempo_wait on it. Buffers: one (B, T, C) buffer per posted message (the schedule's
 *     messages in flight), the send buffer kept until its wait at the end of the step.
 *   - compute: the rank holds V stages (gpt_stage_create with pp_stage_layers' range and
 *     pp_schedule_t.slots[v] activation slots); forward = gpt_stage_forward(stage[v], mb, tokens
 *     of micro-batch mb on the first stage or the received x, targets on the last stage, y = the
 *     send buffer), backward = gpt_stage_backward(stage[v], mb, received dy or dloss = 1/M on the
 *     last stage, dx = the send buffer). The loss of the step is the mean of the last stage's M
 *     micro-batch losses (broadcast from the last stage if rank 0 prints it). TEMPO_TRACE spans
 *     go around compute ("fwd m=3 v=1"), so Perfetto draws the pipeline.
 *   - tied embedding: after the step's schedule, the first stage (rank 0, chunk 0) and the last
 *     (rank P − 1, chunk V − 1) all-reduce (sum) gpt_stage_wte()'s range of their gradients over
 *     the embedding group (a communicator of those two ranks of each pipeline line, split once at
 *     start; nothing when P == 1: one stage holds both uses of wte and sums them itself).
 *   - DP: gradients are synchronised after the last micro-batch's backward (the end of
 *     pp_exec_run), over the DP communicator, per stage buffer (gpt_stage_model()'s layer
 *     ranges give the buckets); the optimizer then steps each stage's buffer (adamw_step on
 *     gpt_stage_model()), and the clipping norm sums grad_sumsq over the PP group (counting wte
 *     once).
 *   - the bubble of a step: pp_exec_t's idle and step times, printed with pp_bubble_formula.
 *
 * Not here: tempo itself (the callbacks own all communication), the model (trainer/model.h's
 * stage API computes), the data.
 */
#ifndef TEMPO_TRAINER_PIPELINE_H
#define TEMPO_TRAINER_PIPELINE_H

#include <stdint.h>

typedef enum { PP_GPIPE, PP_1F1B, PP_INTERLEAVED } pp_kind_t;

/* "gpipe", "1f1b", "interleaved"; pp_kind_parse: 0, or -1 (gpt_last_error) for another name. */
const char *pp_kind_name(pp_kind_t kind);
int pp_kind_parse(const char *name, pp_kind_t *kind_p);

typedef enum {
    PP_FORWARD,   /* compute: forward of (mb, chunk) */
    PP_BACKWARD,  /* compute: backward of (mb, chunk) */
    PP_POST_RECV, /* post the receive of a message (non-blocking) */
    PP_POST_SEND, /* post the send of a message (non-blocking) */
    PP_WAIT_RECV, /* wait for a posted receive */
    PP_WAIT_SEND  /* wait for a posted send */
} pp_op_t;

typedef struct {
    pp_op_t op;
    int mb;       /* micro-batch, 0..M-1 */
    int chunk;    /* this rank's model chunk, 0..V-1 (stage chunk·P + rank) */
    int grad;     /* communication: 0 an activation (B, T, C), 1 its gradient */
    int peer;     /* communication: the other rank; -1 for compute */
    uint32_t tag; /* communication: pp_tag of the message */
} pp_action_t;

typedef struct {
    pp_kind_t kind;
    int P, M, V, rank;
    int n;          /* actions */
    pp_action_t *a; /* (n) in execution order */
    int *slots;     /* (V) most micro-batches of a chunk between its forward and backward */
} pp_schedule_t;

/*
 * 0 if kind can run n_layer layers on P ranks with M micro-batches and V chunks per rank, else
 * -1 with gpt_last_error() saying what to change (layers not divisible by P·V, M < P for 1f1b,
 * M not a multiple of P or P < 2 for interleaved, V > 1 without interleaved, sizes < 1).
 */
int pp_layout_check(pp_kind_t kind, int P, int M, int V, int n_layer);

/* The blocks [*l0_p, *l1_p) of chunk v on rank r: stage s = v·P + r owns L/(P·V) layers. */
void pp_stage_layers(int n_layer, int P, int V, int rank, int chunk, int *l0_p, int *l1_p);

/* The message across the boundary of stages b and b + 1 (0 <= b < P·V − 1) for micro-batch m. */
uint32_t pp_tag(int P, int V, int boundary, int mb, int grad);

/* The schedule of one rank (pp_layout_check's conditions without the layers); free with
 * pp_schedule_free. 0, or -1 with gpt_last_error(). */
int pp_schedule_make(pp_kind_t kind, int P, int M, int V, int rank, pp_schedule_t *s_p);
void pp_schedule_free(pp_schedule_t *s);

/* The bubble formula: (P − 1)/M, or (P − 1)/(V·M) interleaved. */
double pp_bubble_formula(pp_kind_t kind, int P, int M, int V);

/*
 * The formula for stages of unequal cost: compute[p] (p < P) is rank p's compute time in a step
 * (its M·V forwards and backwards). The step lasts the slowest rank's compute plus one pass of
 * the others' per-micro-batch share, T = max + (Σ − max)/(V'·M) (V' = V interleaved, else 1),
 * and rank p idles T − compute[p]; the result is the mean over the ranks of idle / compute.
 * Equal computes give pp_bubble_formula; for unequal ones it is what pp_line_bubble measures
 * exactly for gpipe, and for 1f1b when later stages are not cheaper than earlier ones (the usual
 * case: the last stage has the head); otherwise, and for interleaved, an estimate. 0 when a
 * compute is not positive.
 */
double pp_bubble_stages(pp_kind_t kind, const double *compute, int P, int M, int V);

/* ---- the executor ---- */

#define PP_AGAIN 1 /* a wait callback's "not yet"; pp_exec_run then returns it */

typedef struct {
    void *ctx;
    /* PP_FORWARD / PP_BACKWARD: 0 or -1 */
    int (*compute)(void *ctx, const pp_action_t *a);
    /* PP_POST_RECV / PP_POST_SEND: post, do not wait; 0 or -1 */
    int (*post)(void *ctx, const pp_action_t *a);
    /* PP_WAIT_RECV / PP_WAIT_SEND: 0 once complete, -1 on error, or PP_AGAIN if not complete
     * yet from a caller that does not block (a simulator of several ranks in one thread) */
    int (*wait)(void *ctx, const pp_action_t *a);
    /* the clock in seconds (any unit for a simulator); NULL: the monotonic clock */
    double (*now)(void *ctx);
} pp_ops_t;

typedef struct {
    const pp_schedule_t *s;
    int next;       /* the next action to run */
    int in_wait;    /* a wait returned PP_AGAIN and is retried */
    double t0;      /* start of the step */
    double wait_t0; /* start of the current wait */
    double idle;    /* time in wait callbacks: waiting on neighbours */
    double compute; /* time in compute callbacks */
    double step;    /* start to end, once done */
} pp_exec_t;

void pp_exec_init(pp_exec_t *ex, const pp_schedule_t *s);

/*
 * Runs the schedule's actions from ex->next: 0 when all have run, PP_AGAIN when a wait said so
 * (call again to resume), -1 when a callback failed (the failing action is ex->s->a[ex->next]).
 */
int pp_exec_run(pp_exec_t *ex, const pp_ops_t *ops);

/* One rank's bubble in a finished step: idle / (step − idle), its own start to its own end. */
double pp_exec_bubble(const pp_exec_t *ex);

/*
 * The bubble of a pipeline line, comparable with the formula: busy[p] and window[p] are rank p's
 * step − idle and step (pp_exec_t) in one step. A rank's own window ends when its last action
 * does, and on every rank but the first that is before the step ends: rank p > 0 finishes its
 * last backward while the ranks before it still run theirs, and that tail is idle time of the
 * pipeline's flush as much as the wait for the first forward is (the formula counts it: each
 * rank idles (P − 1)·(f + b) in a balanced GPipe or 1F1B step). So the step is the longest window
 * of the line (the ranks start together: every step ends with collectives over the line), and
 * the bubble is the mean over the ranks of (step − busy[p]) / busy[p]; equal to the formula for
 * equal stages. 0 when a busy time is not positive.
 */
double pp_line_bubble(const double *busy, const double *window, int P);

#endif /* TEMPO_TRAINER_PIPELINE_H */
