/*
 * tictac.c — TicTac's TIC and TAC transfer orders (Hashemi et al., MLSys 2019, §4; see tictac.h for
 * the terms op.dep, op.M, t.P and t.M+).
 *
 * What it is: a validator for the dependency graph, the transitive closure of each op's tensor
 * needs as one bitset per op (uint64_t words), and the two orders on top of it. What it is not: a
 * simulator or an enforcer; it never keeps its inputs.
 *
 * Invariants of the working state (tt_state_t), with R the outstanding set:
 *   opm[i]  == sum of w[t] over t in dep(i) ∩ R    (exact: w is in integer ticks)
 *   opn[i]  == |dep(i) ∩ R|
 * Removing a tensor from R updates both in O(nops), so TAC need not re-sum every set at every
 * pick; integer ticks make the update give the same value as a fresh sum would.
 */
#include "config.h"

#include "core/tempo_int.h"
#include "overlap/tictac.h"

#include <math.h>
#include <stdlib.h>

#define TT_INF INT64_MAX /* M+ of a tensor no multi-input op needs */

/* A multi-input op and its op.M, for visiting ops by increasing M. */
typedef struct tt_key {
    int64_t m;
    int op;
} tt_key_t;

typedef struct tt_state {
    int nops, ntensors;
    size_t words;   /* 64-bit words per tensor bitset */
    uint64_t *dep;  /* (nops, words) op.dep, transitive */
    uint64_t *out;  /* (words) R, the outstanding tensors */
    int64_t *w;     /* (ntensors) transfer time, ticks (1 each for TIC) */
    int64_t *opt;   /* (nops) compute time, ticks; NULL for TIC */
    int64_t *opm;   /* (nops) op.M for R */
    int *opn;       /* (nops) |op.dep ∩ R| */
    int64_t *mp;    /* (ntensors) M+ for R, TT_INF when none */
    int64_t *p;     /* (ntensors) P for R; NULL for TIC */
    tt_key_t *bym;  /* (nops) scratch: multi-input ops sorted by op.M */
    uint64_t *unsettled; /* (words) scratch: tensors whose M+ is not settled yet */
} tt_state_t;

/* ---------------------------------------------------------------------------------------------- */
/* Validation and topological order                                                               */
/* ---------------------------------------------------------------------------------------------- */

static tempo_status_t tt_check_csr(const int *off, const int *idx, int nops, const char *name)
{
    if (nops == 0) {
        return TEMPO_OK;
    }
    if (!off) {
        return tempo__err(TEMPO_ERR_INVALID, "tictac: %s_off is NULL but there are %d ops", name,
                          nops);
    }
    if (off[0] != 0) {
        return tempo__err(TEMPO_ERR_INVALID, "tictac: %s_off[0] is %d (must be 0)", name, off[0]);
    }
    for (int i = 0; i < nops; i++) {
        if (off[i + 1] < off[i]) {
            return tempo__err(TEMPO_ERR_INVALID,
                              "tictac: %s_off decreases at op %d (%s_off[%d] = %d < %d)", name, i,
                              name, i + 1, off[i + 1], off[i]);
        }
    }
    if (off[nops] > 0 && !idx) {
        return tempo__err(TEMPO_ERR_INVALID, "tictac: %s is NULL but %s_off[%d] = %d", name, name,
                          nops, off[nops]);
    }
    return TEMPO_OK;
}

static tempo_status_t tt_check_times(const double *t, int n, const char *name)
{
    for (int i = 0; t && i < n; i++) {
        if (!isfinite(t[i]) || t[i] < 0) {
            return tempo__err(TEMPO_ERR_INVALID, "tictac: %s[%d] is %g (must be finite and >= 0)",
                              name, i, t[i]);
        }
    }
    return TEMPO_OK;
}

/* The first predecessor of op v that Kahn's algorithm left unordered (indeg > 0); v must be
 * unordered itself, which guarantees one: the edge that keeps indeg[v] above 0 comes from it. */
static int tt_unordered_pred(const tempo__tt_graph_t *g, const int *indeg, int v)
{
    int k = g->pred_off[v];
    while (indeg[g->pred[k]] == 0) {
        k++;
    }
    return g->pred[k];
}

/* An op on a cycle, given indeg[] left by Kahn's algorithm (> 0 exactly for the ops it could not
 * order). Walking unordered predecessors nops times from any unordered op ends on a cycle; the
 * smallest op index on that cycle is named, so the message does not depend on where we started. */
static int tt_cycle_op(const tempo__tt_graph_t *g, const int *indeg)
{
    int v = 0;
    while (indeg[v] == 0) {
        v++;
    }
    for (int step = 0; step < g->nops; step++) {
        v = tt_unordered_pred(g, indeg, v);
    }
    int least = v, u = v;
    do {
        u = tt_unordered_pred(g, indeg, u);
        least = TEMPO_MIN(least, u);
    } while (u != v);
    return least;
}

/* Validate g and, when order_p is not NULL, return a topological order of its ops (nops ints,
 * freed by the caller with tempo__free). */
static tempo_status_t tt_check(const tempo__tt_graph_t *g, int **order_p)
{
    tempo_status_t st = TEMPO_OK;
    int *indeg = NULL, *succ_off = NULL, *succ = NULL, *order = NULL;

    if (!g) {
        return tempo__err(TEMPO_ERR_INVALID, "tictac: graph is NULL");
    }
    if (g->nops < 0 || g->ntensors < 0) {
        return tempo__err(TEMPO_ERR_INVALID, "tictac: %d ops and %d tensors (must be >= 0)",
                          g->nops, g->ntensors);
    }
    TEMPO_CHECK(tt_check_csr(g->pred_off, g->pred, g->nops, "pred"));
    TEMPO_CHECK(tt_check_csr(g->dep_off, g->dep, g->nops, "dep"));
    for (int i = 0; i < g->nops; i++) {
        for (int k = g->pred_off[i]; k < g->pred_off[i + 1]; k++) {
            if (g->pred[k] < 0 || g->pred[k] >= g->nops) {
                return tempo__err(TEMPO_ERR_INVALID,
                                  "tictac: op %d lists predecessor %d but there are %d ops", i,
                                  g->pred[k], g->nops);
            }
        }
        for (int k = g->dep_off[i]; k < g->dep_off[i + 1]; k++) {
            if (g->dep[k] < 0 || g->dep[k] >= g->ntensors) {
                return tempo__err(TEMPO_ERR_INVALID,
                                  "tictac: op %d lists tensor %d but there are %d tensors", i,
                                  g->dep[k], g->ntensors);
            }
        }
    }
    TEMPO_CHECK(tt_check_times(g->op_time, g->nops, "op_time"));
    TEMPO_CHECK(tt_check_times(g->tensor_time, g->ntensors, "tensor_time"));

    /* Kahn's algorithm over the successor lists (the transpose of pred). */
    int n = g->nops, nedges = n ? g->pred_off[n] : 0;
    indeg = tempo__calloc((size_t)n, sizeof(*indeg), "tictac in-degrees");
    succ_off = tempo__calloc((size_t)n + 1, sizeof(*succ_off), "tictac successor offsets");
    succ = tempo__malloc((size_t)nedges * sizeof(*succ), "tictac successors");
    order = tempo__malloc((size_t)n * sizeof(*order), "tictac topological order");
    if (!indeg || !succ_off || !succ || !order) {
        st = TEMPO_ERR_NOMEM;
        goto out;
    }
    for (int i = 0; i < n; i++) {
        indeg[i] = g->pred_off[i + 1] - g->pred_off[i];
        for (int k = g->pred_off[i]; k < g->pred_off[i + 1]; k++) {
            succ_off[g->pred[k] + 1]++;
        }
    }
    for (int i = 0; i < n; i++) {
        succ_off[i + 1] += succ_off[i];
    }
    for (int i = 0; i < n; i++) { /* order[] is the fill cursor here, the queue below */
        order[i] = succ_off[i];
    }
    for (int i = 0; i < n; i++) {
        for (int k = g->pred_off[i]; k < g->pred_off[i + 1]; k++) {
            succ[order[g->pred[k]]++] = i;
        }
    }
    int head = 0, tail = 0;
    for (int i = 0; i < n; i++) {
        if (indeg[i] == 0) {
            order[tail++] = i;
        }
    }
    while (head < tail) {
        int v = order[head++];
        for (int k = succ_off[v]; k < succ_off[v + 1]; k++) {
            if (--indeg[succ[k]] == 0) {
                order[tail++] = succ[k];
            }
        }
    }
    if (tail < n) {
        st = tempo__err(TEMPO_ERR_INVALID, "tictac: ops form a cycle through op %d",
                        tt_cycle_op(g, indeg));
        goto out;
    }
    if (order_p) {
        *order_p = order;
        order = NULL;
    }
out:
    tempo__free(order);
    tempo__free(succ);
    tempo__free(succ_off);
    tempo__free(indeg);
    return st;
}

tempo_status_t tempo__tt_validate(const tempo__tt_graph_t *g)
{
    return tt_check(g, NULL);
}

/* ---------------------------------------------------------------------------------------------- */
/* Working state                                                                                  */
/* ---------------------------------------------------------------------------------------------- */

static void tt_fini(tt_state_t *s)
{
    tempo__free(s->unsettled);
    tempo__free(s->bym);
    tempo__free(s->p);
    tempo__free(s->mp);
    tempo__free(s->opn);
    tempo__free(s->opm);
    tempo__free(s->opt);
    tempo__free(s->w);
    tempo__free(s->out);
    tempo__free(s->dep);
}

/* Times in ticks: x / (sum of all times) * 2^62, rounded down, so that every sum of ticks fits an
 * int64_t and is exact. Dividing by the largest time first keeps the total finite even when the
 * seconds themselves would overflow when added. All zero when every time is zero. */
static void tt_ticks(const tempo__tt_graph_t *g, int64_t *w, int64_t *opt)
{
    double big = 0, total = 0;
    for (int t = 0; t < g->ntensors; t++) {
        big = TEMPO_MAX(big, g->tensor_time[t]);
    }
    for (int i = 0; i < g->nops; i++) {
        big = TEMPO_MAX(big, g->op_time[i]);
    }
    if (big > 0) {
        for (int t = 0; t < g->ntensors; t++) {
            total += g->tensor_time[t] / big;
        }
        for (int i = 0; i < g->nops; i++) {
            total += g->op_time[i] / big;
        }
    }
    /* total >= every term (a float sum of non-negative terms never drops below one of them), so
     * each ratio is <= 1 and each tick <= 2^62. */
    for (int t = 0; t < g->ntensors; t++) {
        w[t] = big > 0 ? (int64_t)(g->tensor_time[t] / big / total * 0x1p62) : 0;
    }
    for (int i = 0; i < g->nops; i++) {
        opt[i] = big > 0 ? (int64_t)(g->op_time[i] / big / total * 0x1p62) : 0;
    }
}

/* Validate g and prio_p, allocate s and fill op.dep (transitive) with R = all tensors. timed: TAC
 * (ticks from the measured times, P kept) rather than TIC (unit transfer cost). */
static tempo_status_t tt_init(tt_state_t *s, const tempo__tt_graph_t *g, const int *prio_p,
                              int timed)
{
    tempo_status_t st;
    int *order = NULL;

    memset(s, 0, sizeof(*s));
    if (!prio_p) {
        return tempo__err(TEMPO_ERR_INVALID, "tictac: %s output prio_p is NULL",
                          timed ? "TAC" : "TIC");
    }
    TEMPO_CHECK(tt_check(g, &order));
    int no_tt = g->ntensors > 0 && !g->tensor_time, no_ot = g->nops > 0 && !g->op_time;
    if (timed && (no_tt || no_ot)) {
        tempo__free(order);
        return tempo__err(TEMPO_ERR_INVALID,
                          "tictac: TAC needs op_time and tensor_time (%s is NULL)",
                          no_tt ? "tensor_time" : "op_time");
    }
    size_t n = (size_t)g->nops, nt = (size_t)g->ntensors, W = (nt + 63) / 64;
    s->nops = g->nops;
    s->ntensors = g->ntensors;
    s->words = W;
    s->dep = tempo__calloc(n * W, sizeof(*s->dep), "tictac op.dep bitsets");
    s->out = tempo__calloc(W, sizeof(*s->out), "tictac outstanding set");
    s->unsettled = tempo__calloc(W, sizeof(*s->unsettled), "tictac M+ scratch");
    s->w = tempo__malloc(nt * sizeof(*s->w), "tictac transfer ticks");
    s->opm = tempo__malloc(n * sizeof(*s->opm), "tictac op.M");
    s->opn = tempo__malloc(n * sizeof(*s->opn), "tictac op.dep counts");
    s->mp = tempo__malloc(nt * sizeof(*s->mp), "tictac M+");
    s->bym = tempo__malloc(n * sizeof(*s->bym), "tictac ops by M");
    if (timed) {
        s->opt = tempo__malloc(n * sizeof(*s->opt), "tictac compute ticks");
        s->p = tempo__malloc(nt * sizeof(*s->p), "tictac P");
    }
    if (!s->dep || !s->out || !s->unsettled || !s->w || !s->opm || !s->opn || !s->mp || !s->bym ||
        (timed && (!s->opt || !s->p))) {
        st = TEMPO_ERR_NOMEM;
        goto fail;
    }

    for (size_t t = 0; t < nt; t++) {
        s->out[t / 64] |= 1ull << (t % 64);
        s->w[t] = 1;
    }
    if (timed) {
        tt_ticks(g, s->w, s->opt);
    }
    for (size_t k = 0; k < n; k++) { /* predecessors come first in topological order */
        int i = order[k];
        uint64_t *row = s->dep + (size_t)i * W;
        for (int e = g->dep_off[i]; e < g->dep_off[i + 1]; e++) {
            row[g->dep[e] / 64] |= 1ull << (g->dep[e] % 64);
        }
        for (int e = g->pred_off[i]; e < g->pred_off[i + 1]; e++) {
            const uint64_t *prow = s->dep + (size_t)g->pred[e] * W;
            for (size_t x = 0; x < W; x++) {
                row[x] |= prow[x];
            }
        }
        s->opm[i] = 0;
        s->opn[i] = 0;
        for (size_t x = 0; x < W; x++) {
            for (uint64_t bits = row[x]; bits; bits &= bits - 1) {
                s->opm[i] += s->w[x * 64 + (size_t)__builtin_ctzll(bits)];
                s->opn[i]++;
            }
        }
    }
    tempo__free(order);
    return TEMPO_OK;

fail:
    tempo__free(order);
    tt_fini(s);
    return st;
}

static int tt_key_cmp(const void *a, const void *b)
{
    const tt_key_t *x = a, *y = b;
    if (x->m != y->m) {
        return x->m < y->m ? -1 : 1;
    }
    return (x->op > y->op) - (x->op < y->op);
}

/* M+ (and P when timed) of every outstanding tensor, for the current R. M+: visit the multi-input
 * ops (opn >= 2) by increasing op.M; the first one that needs an unsettled tensor settles it. */
static void tt_props(tt_state_t *s)
{
    size_t W = s->words;
    int nkeys = 0, left = 0;

    for (int i = 0; i < s->nops; i++) {
        if (s->opn[i] >= 2) {
            s->bym[nkeys].m = s->opm[i];
            s->bym[nkeys].op = i;
            nkeys++;
        }
    }
    qsort(s->bym, (size_t)nkeys, sizeof(*s->bym), tt_key_cmp);
    for (int t = 0; t < s->ntensors; t++) {
        s->mp[t] = TT_INF;
    }
    for (size_t x = 0; x < W; x++) {
        s->unsettled[x] = s->out[x];
        left += __builtin_popcountll(s->out[x]);
    }
    for (int k = 0; k < nkeys && left > 0; k++) {
        const uint64_t *row = s->dep + (size_t)s->bym[k].op * W;
        for (size_t x = 0; x < W; x++) {
            uint64_t bits = row[x] & s->unsettled[x];
            s->unsettled[x] &= ~bits;
            for (; bits; bits &= bits - 1) {
                s->mp[x * 64 + (size_t)__builtin_ctzll(bits)] = s->bym[k].m;
                left--;
            }
        }
    }

    if (!s->p) {
        return;
    }
    for (int t = 0; t < s->ntensors; t++) {
        s->p[t] = 0;
    }
    for (int i = 0; i < s->nops; i++) {
        if (s->opn[i] != 1) {
            continue;
        }
        const uint64_t *row = s->dep + (size_t)i * W;
        for (size_t x = 0; x < W; x++) {
            uint64_t bits = row[x] & s->out[x];
            if (bits) {
                s->p[x * 64 + (size_t)__builtin_ctzll(bits)] += s->opt[i];
                break;
            }
        }
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* TIC                                                                                            */
/* ---------------------------------------------------------------------------------------------- */

/* Sort key of a tensor for TIC: consumed with finite M+ first by (M+, index), then consumed with
 * infinite M+ by index, then unconsumed. */
struct tic_key {
    int cls; /* 0 finite M+, 1 infinite M+ but consumed, 2 unconsumed */
    int64_t mp;
    int t;
};

static int tic_key_cmp(const void *a, const void *b)
{
    const struct tic_key *x = a, *y = b;
    if (x->cls != y->cls) {
        return x->cls - y->cls;
    }
    if (x->mp != y->mp) {
        return x->mp < y->mp ? -1 : 1;
    }
    return (x->t > y->t) - (x->t < y->t);
}

tempo_status_t tempo__tic_order(const tempo__tt_graph_t *g, int *prio_p)
{
    tt_state_t s;
    struct tic_key *keys = NULL;
    uint64_t *used = NULL;
    tempo_status_t st = TEMPO_OK;

    TEMPO_CHECK(tt_init(&s, g, prio_p, 0));
    size_t W = s.words;
    keys = tempo__malloc((size_t)s.ntensors * sizeof(*keys), "tictac TIC keys");
    used = tempo__calloc(W, sizeof(*used), "tictac consumed set");
    if (!keys || !used) {
        st = TEMPO_ERR_NOMEM;
        goto out;
    }
    tt_props(&s);
    for (int i = 0; i < s.nops; i++) {
        for (size_t x = 0; x < W; x++) {
            used[x] |= s.dep[(size_t)i * W + x];
        }
    }
    for (int t = 0; t < s.ntensors; t++) {
        keys[t].t = t;
        keys[t].mp = s.mp[t];
        if (!(used[t / 64] >> (t % 64) & 1)) {
            keys[t].cls = 2;
        } else {
            keys[t].cls = s.mp[t] == TT_INF ? 1 : 0;
        }
        if (keys[t].cls != 0) {
            keys[t].mp = 0; /* by index within the class */
        }
    }
    qsort(keys, (size_t)s.ntensors, sizeof(*keys), tic_key_cmp);

    int largest = -1;
    for (int r = 0; r < s.ntensors; r++) {
        const struct tic_key *k = &keys[r];
        int num;
        if (k->cls == 2) {
            num = largest + 1;
        } else if (k->cls == 0 && r > 0 && keys[r - 1].cls == 0 && keys[r - 1].mp == k->mp) {
            num = prio_p[keys[r - 1].t]; /* same tie group: the first member's rank */
        } else {
            num = r;
            largest = r;
        }
        prio_p[k->t] = num;
    }
    /* prio_p was only written after every failure point. */
out:
    tempo__free(used);
    tempo__free(keys);
    tt_fini(&s);
    return st;
}

/* ---------------------------------------------------------------------------------------------- */
/* TAC                                                                                            */
/* ---------------------------------------------------------------------------------------------- */

/* Whether outstanding tensor a goes before b: Johnson's rule, then smaller M+, then index. */
static int tac_before(const tt_state_t *s, int a, int b)
{
    int64_t lhs = TEMPO_MIN(s->p[b], s->w[a]), rhs = TEMPO_MIN(s->p[a], s->w[b]);
    if (lhs != rhs) {
        return lhs < rhs;
    }
    if (s->mp[a] != s->mp[b]) {
        return s->mp[a] < s->mp[b];
    }
    return a < b;
}

tempo_status_t tempo__tac_order(const tempo__tt_graph_t *g, int *prio_p)
{
    tt_state_t s;
    int *prio = NULL;
    tempo_status_t st = TEMPO_OK;

    TEMPO_CHECK(tt_init(&s, g, prio_p, 1));
    size_t W = s.words;
    prio = tempo__malloc((size_t)s.ntensors * sizeof(*prio), "tictac TAC order");
    if (!prio) {
        st = TEMPO_ERR_NOMEM;
        goto out;
    }
    for (int pick = 0; pick < s.ntensors; pick++) {
        tt_props(&s);
        int best = -1;
        for (size_t x = 0; x < W; x++) {
            for (uint64_t bits = s.out[x]; bits; bits &= bits - 1) {
                int t = (int)(x * 64) + __builtin_ctzll(bits);
                if (best < 0 || tac_before(&s, t, best)) {
                    best = t;
                }
            }
        }
        prio[best] = pick;
        /* Assume best transferred: drop it from R and from every op.M that counted it. */
        size_t bx = (size_t)best / 64;
        uint64_t bbit = 1ull << (best % 64);
        s.out[bx] &= ~bbit;
        for (int i = 0; i < s.nops; i++) {
            if (s.dep[(size_t)i * W + bx] & bbit) {
                s.opm[i] -= s.w[best];
                s.opn[i]--;
            }
        }
    }
    memcpy(prio_p, prio, (size_t)s.ntensors * sizeof(*prio));
out:
    tempo__free(prio);
    tt_fini(&s);
    return st;
}
