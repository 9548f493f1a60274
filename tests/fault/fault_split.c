/*
 * fault_split.c — communicators split from splits, with their siblings alive, on shared memory.
 *
 * Splitting a split makes sibling communicators that share a context id (their members are
 * disjoint, so their messages cannot meet), but every host-wide resource a communicator creates
 * must still be its own: before the fix, sibling grandchildren named their shared-memory regions
 * after the context id alone and collided (`shm_open: File exists`, wrong results or hangs).
 *
 * One 6-rank job on one host (shared memory) builds TREES times, and keeps alive at once:
 *   depth 1: color rank % 2                    -> {0,2,4} {1,3,5}
 *   depth 2: color 0 inside each half (copies), and color (rank / 2) % 2 of the world as a
 *            second family, then
 *   depth 3: a split of each depth-2 communicator by its rank < 2,
 * and runs all-reduces (small: the one-synchronisation slots; staged: several segments) and
 * broadcasts on every level, interleaved, checking every element exactly. Ranks run different
 * communicators at the same time, so a shared segment shows up as a wrong element or an error.
 */
#include "config.h"

#include <tempo.h>

#include "tests/fault/job.h"

#define NR 6
#define TREES 4 /* communicator trees built one after another (sibling creation races) */
#define BIG (300 * 1000 + 7) /* elements: several staged segments with TEMPO_SHM_COLL_BYTES=64K */

static int check_allreduce(tempo_comm_t c, const char *name, size_t count, int salt)
{
    int n = tempo_comm_size(c), me = tempo_comm_rank(c);
    int32_t *in = malloc(count * sizeof(int32_t) + 4), *out = malloc(count * sizeof(int32_t) + 4);
    for (size_t i = 0; i < count; i++) {
        in[i] = (int32_t)((i * 7 + (size_t)salt) % 1000) + me * 1000;
    }
    tempo_status_t st = tempo_allreduce(c, in, out, count, TEMPO_INT32, TEMPO_SUM);
    size_t bad = 0, first = 0;
    for (size_t i = 0; st == TEMPO_OK && i < count; i++) {
        int32_t want = (int32_t)(n * (int32_t)((i * 7 + (size_t)salt) % 1000) + 1000 * n * (n - 1) / 2);
        if (out[i] != want && bad++ == 0) {
            first = i;
        }
    }
    int ok = rk_check(st == TEMPO_OK && bad == 0,
                      "%s (rank %d of %d): allreduce of %zu int32 (%s; %zu wrong, first at %zu)",
                      name, me, n, count, st == TEMPO_OK ? "ok" : tempo_last_error(c), bad, first);
    free(in);
    free(out);
    return ok;
}

static int check_broadcast(tempo_comm_t c, const char *name, size_t count, int root)
{
    int n = tempo_comm_size(c), me = tempo_comm_rank(c);
    root %= n;
    int32_t *buf = malloc(count * sizeof(int32_t) + 4);
    for (size_t i = 0; i < count; i++) {
        buf[i] = me == root ? (int32_t)(i * 3 + 11) : -1;
    }
    tempo_status_t st = tempo_broadcast(c, buf, buf, count, TEMPO_INT32, root);
    size_t bad = 0;
    for (size_t i = 0; st == TEMPO_OK && i < count; i++) {
        bad += buf[i] != (int32_t)(i * 3 + 11);
    }
    int ok = rk_check(st == TEMPO_OK && bad == 0, "%s (rank %d of %d): broadcast of %zu from %d (%s)",
                      name, me, n, count, root, st == TEMPO_OK ? "ok" : tempo_last_error(c));
    free(buf);
    return ok;
}

static int one_tree(tempo_comm_t world, int rank, int tree);

static int split_rank(int rank, int size, void *arg)
{
    (void)size;
    (void)arg;
    tempo_comm_t world = NULL;
    tempo_status_t st = tempo_comm_init_env(&world);
    if (!rk_check(st == TEMPO_OK, "rank %d: init (%s)", rank, tempo_last_error(NULL))) {
        return 1;
    }
    int fails = 0;
    for (int tree = 0; tree < TREES && fails == 0; tree++) {
        fails += one_tree(world, rank, tree);
    }
    tempo_comm_destroy(world);
    return fails ? 1 : 0;
}

/* Build the communicators (siblings are created at the same moment), use them, destroy them. */
static int one_tree(tempo_comm_t world, int rank, int tree)
{
    tempo_comm_t c1 = NULL, c2a = NULL, c2b = NULL, c3a = NULL, c3b = NULL;
    tempo_status_t st = tempo_comm_split(world, rank % 2, rank, &c1);
    if (st == TEMPO_OK) {
        st = tempo_comm_split(c1, 0, -rank, &c2a); /* the same members, order reversed */
    }
    if (st == TEMPO_OK) {
        st = tempo_comm_split(world, (rank / 2) % 2, rank, &c2b);
    }
    if (st == TEMPO_OK) {
        st = tempo_comm_split(c2a, tempo_comm_rank(c2a) < 2, 0, &c3a);
    }
    if (st == TEMPO_OK) {
        st = tempo_comm_split(c2b, tempo_comm_rank(c2b) < 2, 0, &c3b);
    }
    if (!rk_check(st == TEMPO_OK, "rank %d, tree %d: splits to depth 3 (%s)", rank, tree,
                  st == TEMPO_OK ? "ok" : tempo_last_error(world))) {
        return 1;
    }
    struct {
        tempo_comm_t c;
        const char *name;
    } cs[] = {{world, "world"}, {c1, "depth 1"}, {c2a, "depth 2 (split of split)"},
              {c2b, "depth 2 (second family)"}, {c3a, "depth 3 (a)"}, {c3b, "depth 3 (b)"}};
    int fails = 0;
    for (int round = tree % 2; round < 3 && fails == 0; round++) {
        /* Deepest first on odd rounds, so siblings run at different moments. */
        for (int k = 0; k < 6; k++) {
            int i = round % 2 ? 5 - k : k;
            fails += !check_allreduce(cs[i].c, cs[i].name, 1 + (size_t)(round * 13 + i), round);
            fails += !check_allreduce(cs[i].c, cs[i].name, BIG, round + i);
            fails += !check_broadcast(cs[i].c, cs[i].name, 1000 + (size_t)i, round + i);
        }
    }
    tempo_comm_destroy(c3b);
    tempo_comm_destroy(c3a);
    tempo_comm_destroy(c2b);
    tempo_comm_destroy(c2a);
    tempo_comm_destroy(c1);
    return fails;
}

int main(void)
{
    job_t *j = calloc(1, sizeof(*j));
    static const char *const env[] = {"TEMPO_SHM_COLL_BYTES=65536", NULL};
    if (job_start(j, NR, env, split_rank, NULL) != 0) {
        TAP_OK(0, "start %d ranks", NR);
    }
    job_finish(j, 120);
    for (int r = 0; r < NR; r++) {
        char how[64];
        job_describe_exit(j, r, how, sizeof(how));
        TAP_OK(job_exited(j, r, 0), "rank %d exited 0 (%s)", r, how);
    }
    job_free(j);
    free(j);
    return tap_done();
}
