/*
 * mesh.c — the job's P x D x T mesh (mesh.h): coordinates, the colors and keys of its groups, the
 * split of the job into them through the backend (dist.h's split), and the printed mesh.
 *
 * Every group is ordered by job rank (key = w), so a group's rank is the rank's coordinate in its
 * dimension and a printed group lists its members in rank order; groups are printed in the order
 * of their colors, which is the order of their lowest member.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "trainer/dist.h"
#include "trainer/mesh.h"

int mesh_init(mesh_t *m, int world_rank, int world_size, int dp, int tp, int pp, char *err)
{
    if (dp < 1 || tp < 1 || pp < 1 || dp * tp * pp != world_size || world_rank < 0 ||
        world_rank >= world_size) {
        snprintf(err, 256, "dp %d x tp %d x pp %d is not the job's %d ranks", dp, tp, pp,
                 world_size);
        return -1;
    }
    memset(m, 0, sizeof *m);
    m->world_rank = world_rank, m->world_size = world_size;
    m->dp = dp, m->tp = tp, m->pp = pp;
    m->tp_rank = world_rank % tp;
    m->dp_rank = world_rank / tp % dp;
    m->pp_rank = world_rank / (tp * dp);
    return 0;
}

/* w = (s * D + dp_rank) * T + tp_rank with s the stage and DT = D * T: a TP group is the T ranks of
 * equal w / T; a DP group the ranks of equal stage and TP rank (color s * T + w mod T); a pipeline
 * line the ranks of equal w mod DT; the embedding group the line's first and last stage. */
void mesh_color(const mesh_t *m, int g, int w, int *color_p, int *key_p)
{
    const int dt = m->dp * m->tp, s = w / dt;
    int c = 0;
    switch (g) {
    case MESH_TP: c = w / m->tp; break;
    case MESH_DP: c = s * m->tp + w % m->tp; break;
    case MESH_PP: c = w % dt; break;
    default: c = s == 0 || s == m->pp - 1 ? w % dt : -1; break;
    }
    *color_p = c;
    *key_p = w;
}

/* Whether group g is split at all in this mesh (mesh.h's invariants). */
static int mesh_splits(const mesh_t *m, int g)
{
    if (g == MESH_PP || g == MESH_EMB) {
        return m->pp > 1;
    }
    return m->tp > 1 || m->pp > 1;
}

static const char *const group_name[MESH_NGROUPS] = {"DP", "TP", "PP", "embedding"};

/* This rank's expected rank and size in group g. */
static void expected(const mesh_t *m, int g, int *rank_p, int *size_p)
{
    const int rank[MESH_NGROUPS] = {m->dp_rank, m->tp_rank, m->pp_rank, m->pp_rank ? 1 : 0};
    const int size[MESH_NGROUPS] = {m->dp, m->tp, m->pp, 2};
    *rank_p = rank[g], *size_p = size[g];
}

int mesh_build(dist_t *d, int dp, int tp, int pp, int sp, char *err)
{
    void *job = d->mesh.comm[MESH_DP]; /* before any split: the job's */
    if (mesh_init(&d->mesh, d->world_rank, d->world_size, dp, tp, pp, err)) {
        return -1;
    }
    mesh_t *m = &d->mesh;
    m->sp = sp;
    m->comm[MESH_DP] = job;
    for (int g = 0; g < MESH_NGROUPS; g++) {
        if (!mesh_splits(m, g)) {
            continue;
        }
        int color, key, rank, size, want_rank, want_size;
        mesh_color(m, g, m->world_rank, &color, &key);
        if (d->split(d, color, key, &m->comm[g], &rank, &size, err)) {
            return -1;
        }
        expected(m, g, &want_rank, &want_size);
        if (color >= 0 && (rank != want_rank || size != want_size)) {
            snprintf(err, 256, "job rank %d became %s rank %d of %d (expected %d of %d)",
                     m->world_rank, group_name[g], rank, size, want_rank, want_size);
            return -1;
        }
    }
    d->rank = m->dp_rank, d->size = m->dp;
    d->tp_rank = m->tp_rank, d->tp_size = m->tp;
    d->pp_rank = m->pp_rank, d->pp_size = m->pp;
    return 0;
}

/* "  TP groups: {0,1} {2,3}": every group of kind g, by color, its members by job rank. */
static void print_groups(const mesh_t *m, int g, FILE *f)
{
    fprintf(f, "  %s groups:", group_name[g]);
    for (int c = 0; c < m->world_size; c++) {
        int n = 0;
        for (int w = 0; w < m->world_size; w++) {
            int color, key;
            mesh_color(m, g, w, &color, &key);
            if (color == c) {
                fprintf(f, "%s%d", n++ ? "," : " {", w);
            }
        }
        if (n) {
            fprintf(f, "}");
        }
    }
    fprintf(f, "\n");
}

void mesh_print(const mesh_t *m, FILE *f)
{
    if (m->pp > 1) {
        fprintf(f,
                "mesh: %d ranks = pp %d x dp %d x tp %d (TP fastest, then DP, then PP: job rank "
                "= (pp rank x %d + dp rank) x %d + tp rank)\n",
                m->world_size, m->pp, m->dp, m->tp, m->dp, m->tp);
        print_groups(m, MESH_PP, f);
        print_groups(m, MESH_DP, f);
        print_groups(m, MESH_EMB, f);
    } else if (m->tp > 1) {
        fprintf(f,
                "mesh: %d ranks = dp %d x tp %d (TP fastest: job rank = dp rank x %d + tp rank)\n",
                m->world_size, m->dp, m->tp, m->tp);
        print_groups(m, MESH_TP, f);
        print_groups(m, MESH_DP, f);
    }
    fflush(f);
}
