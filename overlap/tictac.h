/*
 * tictac.h — TicTac's transfer orders (Hashemi, Abdu Jyothi, Campbell, MLSys 2019, §4): given the
 * dependency DAG of the next forward pass, give every transfer ("tensor": a synchronized gradient
 * or parameter) a priority number, smaller first. TIC uses the DAG alone (every transfer costs 1,
 * compute costs 0); TAC also uses measured op and transfer times (Johnson's two-machine rule,
 * applied greedily).
 *
 * It is pure computation: no communicator, no threads, no clock, no global state. It does not
 * enforce an order (the scheduler does) and does not measure times (the caller profiles). Inputs
 * are read-only and never kept; outputs are written only on success.
 *
 * Terms (paper §4.1, R = the set of outstanding tensors, t ranges over tensors):
 *   op.dep     the tensors an op needs, directly or through its predecessors (transitively);
 *   op.M       the summed transfer time of op.dep ∩ R;
 *   t.P        the summed compute time of the ops whose only outstanding need is t
 *              (op.dep ∩ R == {t}): the compute that t unblocks by itself;
 *   t.M+       the smallest op.M over ops that need t and at least one other outstanding tensor:
 *              the least communication, t included, that unblocks some multi-input op; +inf when
 *              there is no such op.
 */
#ifndef TEMPO_OVERLAP_TICTAC_H
#define TEMPO_OVERLAP_TICTAC_H

#include <tempo.h>

/* The dependency structure of the next forward pass, as TicTac sees it. Compute ops ("layers")
 * 0..nops-1 form a DAG; each consumes some transfers ("tensors" 0..ntensors-1, the synchronized
 * gradients/parameters it needs). Arrays are CSR: the predecessors of op i are
 * pred[pred_off[i] .. pred_off[i+1]), its direct tensor dependencies dep[dep_off[i] ..
 * dep_off[i+1]). Offsets start at 0 and never decrease; repeated entries are allowed and count
 * once. With nops == 0 the arrays may be NULL. Nothing here is owned by tictac.c. */
typedef struct tempo__tt_graph {
    int nops;
    int ntensors;
    const int *pred_off;       /* (nops+1) */
    const int *pred;           /* predecessor op indices (must be < nops; graph must be acyclic) */
    const int *dep_off;        /* (nops+1) */
    const int *dep;            /* tensor indices */
    const double *op_time;     /* (nops) compute time of each op, seconds; TAC only, may be NULL */
    const double *tensor_time; /* (ntensors) transfer time of each tensor, seconds; TAC only */
} tempo__tt_graph_t;

/* Validate g: counts >= 0, offsets well formed, indices in range, acyclic (TEMPO_ERR_INVALID with a
 * message via tempo__err naming the problem, e.g. "op 3 lists predecessor 7 but there are 5 ops",
 * "ops form a cycle through op 2"), times finite and >= 0 when given. */
tempo_status_t tempo__tt_validate(const tempo__tt_graph_t *g);

/* TIC: unit cost for every transfer, zero for compute. prio_p (ntensors) receives the priority
 * number of each tensor (0 = most urgent). Tensors are sorted by (M+, index) with M+ computed once
 * for R = all tensors; tensors with equal M+ share a priority number, which is the rank of the
 * first member of their tie group in sorted order (as the authors' code does), so numbers can skip.
 * Tensors that some op consumes but whose M+ is infinite (every op that needs them needs nothing
 * else) follow all finite ones, each with its own rank, in index order. Tensors no op consumes get
 * the largest number given + 1 (0 when no tensor is consumed): least urgent. Every number lies in
 * 0..ntensors. In a layer chain (op i follows op i-1 and consumes tensor i) the numbers are
 * non-decreasing in forward order; tensors 0 and 1 tie. */
tempo_status_t tempo__tic_order(const tempo__tt_graph_t *g, int *prio_p);

/* TAC: measured times (op_time and tensor_time must both be given). Greedy: while tensors remain
 * outstanding, recompute op.M, tensor P and M+ for the outstanding set R, pick the tensor that is
 * minimal under the pairwise rule "A before B iff min(P_B, M_A) < min(P_A, M_B)" (M_A: A's own
 * transfer time) with ties broken by smaller M+ and then by smaller tensor index, give it the next
 * priority number (0, 1, 2, ... all distinct), remove it from R. prio_p (ntensors) is therefore a
 * permutation of 0..ntensors-1.
 *
 * The rule is Johnson's (two-machine flow shop), which is not transitive in every case of ties; the
 * minimum is found by a tournament over R in index order (the current best is replaced by each
 * tensor that goes before it), which is the unique minimum whenever one exists. Times are converted
 * once to integer ticks (2^-62 of their total) so that M and P sums are exact and independent of
 * summation order: equal times and equal sets give equal values, which ties depend on.
 * Cost O(ntensors * nops * (ntensors/64 + log nops)). */
tempo_status_t tempo__tac_order(const tempo__tt_graph_t *g, int *prio_p);

#endif /* TEMPO_OVERLAP_TICTAC_H */
