/*
 * mesh.h — the job's device mesh: P pipeline stages x D data-parallel x T tensor-parallel ranks,
 * this rank's coordinates in it, and one communicator per dimension plus the embedding group.
 *
 * What it is. The one place that knows where a rank sits: rank order is TP fastest, then DP, then
 * PP (Megatron's placement: a TP group is T consecutive ranks, on one host; a stage's D x T ranks
 * are consecutive):
 *     job rank w = (pp_rank * D + dp_rank) * T + tp_rank.
 * The groups are the ranks that differ in one coordinate only (a TP group, a DP group, a pipeline
 * line), and the embedding group pairs the first and the last stage of each line (the tied
 * wte/LM-head gradient). mesh_color gives each group's color and key for a split of the job's
 * communicator; mesh_build makes the communicators through the backend's split (dist.h), so both
 * backends build the same groups from the same arithmetic, and mesh_print prints them.
 *
 * What it is not: a communicator library. The communicators are the backend's (opaque here:
 * tempo_comm_t, or an MPI_Comm's address) and it frees them when the job ends (dist_close).
 *
 * Invariants: world_size = dp * tp * pp; a trivial mesh (tp = pp = 1) splits nothing, its DP
 * communicator is the job's; TP and DP are split whenever tp > 1 or pp > 1, PP and the embedding
 * group only when pp > 1; comm[MESH_EMB] is NULL off the first and last stage.
 */
#ifndef TEMPO_TRAINER_MESH_H
#define TEMPO_TRAINER_MESH_H

#include <stdio.h>

/* The groups: the three dimensions and the embedding group. */
enum { MESH_DP = 0, MESH_TP = 1, MESH_PP = 2, MESH_EMB = 3, MESH_NGROUPS = 4 };

typedef struct {
    int world_rank, world_size;    /* in the job */
    int dp, tp, pp;                /* the dimensions: dp * tp * pp = world_size */
    int dp_rank, tp_rank, pp_rank; /* this rank's coordinates */
    int sp;                   /* sequence parallelism over the TP group (a mode, not a dimension) */
    void *comm[MESH_NGROUPS]; /* this rank's communicator of each group, the backend's (NULL:
                               * not split, or not a member) */
} mesh_t;

typedef struct dist dist_t;

/* The mesh of job rank world_rank of world_size with dimensions dp x tp x pp (coordinates filled,
 * no communicators): 0, or -1 with the reason in err (256 bytes) when dp * tp * pp != world_size.
 */
int mesh_init(mesh_t *m, int world_rank, int world_size, int dp, int tp, int pp, char *err);

/* The color and key of job rank w's group of kind g (MESH_*) in a split of the job's communicator:
 * the ranks of equal color form the group, ordered by key; color -1: w is in no such group (the
 * embedding group off the first and last stage). */
void mesh_color(const mesh_t *m, int g, int w, int *color_p, int *key_p);

/* Build d's mesh (d->mesh): split the job into its groups (see the invariants) through d->split,
 * check that this rank's ranks and sizes in them are its coordinates, and set d's rank, size,
 * tp_* and pp_* from them. Collective over the job, once, before grads_register. -1 with the
 * reason in err (256 bytes); the communicators made so far are freed by dist_close. */
int mesh_build(dist_t *d, int dp, int tp, int pp, int sp, char *err);

/* Print the mesh and its groups ("mesh: 4 ranks = dp 2 x tp 2 (...)", "  TP groups: {0,1} {2,3}")
 * to f; nothing for a trivial mesh. */
void mesh_print(const mesh_t *m, FILE *f);

#endif /* TEMPO_TRAINER_MESH_H */
