/*
 * difftest.c — randomized differential test of the collectives: every rank derives the same
 * sequence of random cases from a seed and checks each result against a reference it computes
 * itself, exactly (bitwise). Launched by tests/mr/difftest.sh under tempo-run.
 *
 * What a case is. Case k depends only on (seed, k): one operation run blocking (or posted and
 * waited at once, or polled with tempo_test), or a batch of 2..64 non-blocking operations posted
 * together, possibly on several communicators, and completed in an order of each rank's own
 * (tempo_waitall, tempo_wait in a shuffled order, tempo_test polling). An operation is a random
 *   collective   allreduce, reduce_scatter, allgather, broadcast, reduce, alltoall, barrier, or a
 *                send/recv exchange (1-3 messages with one tag to the rank s further on)
 *   dtype, op    every dtype of tempo.h, every op (all are valid for every dtype)
 *   count        0, 1, small primes, random up to 4096 or 64 Ki, now and then a few MB
 *   layout       out of place, in place (both forms where tempo.h has two), NULL buffers at
 *                count 0, misaligned buffers, poisoned buffers the API says are ignored
 *   algorithm    automatic (the blocking form) or forced through tempo_attr_t.algorithm, each
 *                entry of tempo_algorithm_info() for the collective
 *   lane         program order; scheduled (TEMPO_ATTR_PRIORITY, with random priorities, chunk
 *                sizes and tags, some tags posted twice, posted in a different order on every
 *                rank); compressed with a compressor exact for the data (none, fp16, bf16 on
 *                small integers; float32 sum and avg)
 *   communicator the job's, or one of a tree of communicators split to depth 1-3 from it, all
 *                siblings alive at once: every level splits each communicator of the level above
 *                with a random coloring (rank % m, a cut, pairs, random colors, one color) and
 *                random keys (none, reversed, random: permuted ranks), sometimes leaving a rank
 *                out (TEMPO_UNDEFINED). Sibling communicators run the same case at the same time.
 * Cases are grouped in epochs of EPOCH cases; each epoch builds its own tree (from (seed, epoch))
 * and destroys it at its end, so `--case K` rebuilds K's tree and replays K alone.
 *
 * Disagreements. After about one case in MISMATCH_EVERY (drawn from (seed, K) apart from the case
 * itself, so the cases and the Open MPI comparison do not change), on more than one rank, the ranks
 * split a fresh communicator from the job's and make one call on it in which some ranks (a random
 * nonempty subset, never all) differ from the others in one argument that must agree: the count
 * (another, or 0), the dtype, the op, the root, the collective, or a NULL buffer (that rank rejects
 * its own call), or how the same call runs: another algorithm forced (with or without a priority),
 * another compressor or none (with or without a priority); each differing rank with a value of its
 * own; random collective, dtype, op, count and root, through a random path (blocking, non-blocking,
 * an algorithm forced, a priority, a compressor). Every rank's call must fail (TEMPO_OK anywhere is
 * a failure, as is a timeout): with TEMPO_ERR_INVALID naming the disagreement, or, on a rank that
 * rejected its own arguments, with its own reason; and a barrier after it must fail on every rank
 * with the news. The group difftest/mismatch counts these; `--case K` replays K's disagreement too.
 *
 * The reference. Reduction inputs are mrtest.h's exact tables (mr_red_tables): each element's
 * value comes from a class table of 16 values per rank chosen so that the result is exact in any
 * order, and a member's values are generated from its rank in the job (its "owner"), so data that
 * crossed from a sibling communicator is wrong data. Moved data are mr_gen_bytes of (salt, owner,
 * byte index). Compressed cases use small integers (avg: multiples of the rank count), which
 * fp16 and bf16 hold exactly at every partial sum. Every buffer has guard bytes; send buffers must
 * come back unchanged; buffers the API ignores stay poisoned. Barriers are checked through files:
 * each member creates one before entering; after the barrier every member's must exist.
 *
 * Every status is checked. A failure prints (stderr, and the rank's result file) the seed, the
 * case and operation, the full description of the operation and the communicator tree, what
 * differed (first wrong element, got and expected, on which rank) or the status with
 * tempo_last_error(), and the command that replays the case. A timeout or a peer failure ends the
 * rank (the job cannot go on). Every rank writes one line per group (one group per collective,
 * plus sched, compressed, split and mismatch) to DIR/r<rank> (mrtest.h), which difftest.sh turns
 * into TAP.
 *
 * Open MPI as a second reference. Built with -DDIFFTEST_MPI (tests/mr/difftest_mpi, only where
 * configure found MPI), this same file derives the same cases from (seed, case) through the same
 * generator (tree_plan, gen_case, prepare: same buffers, same data, same layouts) and runs each
 * operation that MPI can express through MPI, one after the other in case order, on
 * communicators made with MPI_Comm_split from the same colors and keys (MPI orders a color's
 * members by key, then parent rank, as tempo does). What MPI cannot express is skipped and
 * counted: fp16 and bf16 reductions (no MPI datatype; moved data of those types travels as
 * MPI_UINT16_T). avg is MPI_SUM followed by the division of tempo.h (in the type; integer
 * division for integers), exact here because every table's sum is exact. Out-of-place broadcast
 * copies the root's sendbuf to its recvbuf; in-place forms use MPI_IN_PLACE (the two in-place
 * layouts of reduce_scatter and allgather are moved to and from MPI's). With --hashes DIR both
 * programs write DIR/h<rank>: one line per operation this rank took part in,
 *     CASE OP TOKEN DESCRIPTION
 * TOKEN the FNV-1a 64 hash of the result bytes (recvbuf; allgather and alltoall all n blocks; the
 * root's recvbuf for reduce; the received messages for p2p; nothing for barrier and off the
 * reduce root), or a word: "skip-<why>" (MPI cannot express it), "unsupported" (tempo refused it
 * where that is allowed), "error" (tempo failed it). Scheduled and compressed-exact operations
 * must give the bytes of the plain collective, so they are compared like the others. difftest.sh
 * compares the two programs' files line by line.
 *
 * Usage: difftest --list
 *        difftest --out DIR [--seed S] [--cases N] [--first K] [--case K] [--max-depth D]
 *                 [--big PERMILLE] [--comp-avg 0|1] [--transport NAME] [--hashes DIR]
 *        difftest_mpi --hashes DIR [--seed S] [--cases N] [--first K] [--case K] [--max-depth D]
 *                 [--big PERMILLE] [--comp-avg 0|1] (under mpirun)
 * --case K is --first K --cases 1. --comp-avg 0 leaves avg out of the compressed lane (sum only).
 * --transport names the transport of the launch: tcp adds TEMPO_HOST_ID=%r to the replay command,
 * and on any transport but shm the forced shm all-reduce may be refused (TEMPO_ERR_UNSUPPORTED:
 * no shared-memory collectives). DIFFTEST_ENV (NAME=VALUE words that difftest.sh adds to every
 * launch, e.g. TEMPO_TRANSPORTS=ucx,^shm from tests/transport/conform.sh) leads the replay
 * command.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tempo.h"
#include "mrtest.h"

#ifdef DIFFTEST_MPI
#include <mpi.h>

#include "tools/mpi_common.h"
typedef MPI_Comm dcomm_t; /* the communicators of the tree, tempo's or MPI's */
#else
typedef tempo_comm_t dcomm_t;
#endif

#define MAX_N 64             /* ranks of the job this test supports */
#define MAX_DEPTH 3          /* levels of splits below the job's communicator */
#define EPOCH 40             /* cases per communicator tree */
#define MAX_BATCH 64         /* operations of one non-blocking case */
#define MAX_ALGOS 16         /* per collective */
#define BIG_BYTES (3u << 20) /* the few-MB size: most bytes of any buffer */
#define A_SLACK 4096         /* random offset into the class array */

enum { K_BARRIER = MR_NCOLL, K_P2P, NKINDS };
enum { G_SCHED = NKINDS, G_COMP, G_SPLIT, G_MISMATCH, NGROUPS };
#ifndef DIFFTEST_MPI /* the result file's groups */
static const char *const group_names[NGROUPS] = {
    "difftest/allreduce", "difftest/reduce_scatter", "difftest/allgather", "difftest/broadcast",
    "difftest/reduce",    "difftest/alltoall",       "difftest/barrier",   "difftest/p2p",
    "difftest/sched",     "difftest/compressed",     "difftest/split",     "difftest/mismatch"};
#endif
#define MISMATCH_EVERY 12 /* on average, one disagreement case after this many cases */

enum { P_OOP, P_INPLACE, P_SAME };
static const char *const place_names[] = {"out-of-place", "in-place", "in-place-same-ptr"};
enum { API_BLOCK, API_WAIT, API_TEST, API_BATCH };
static const char *const api_names[] = {"blocking", "nonblocking+wait", "nonblocking+test",
                                        "batch"};
enum { L_PLAIN, L_SCHED, L_COMP };

/* Compressors exact for small integers in float32 (sum, avg). */
static const char *const comp_specs[] = {"none:min=0", "fp16:min=0", "bf16:min=0"};
#define NCOMP 3

/* ============================================================================================== */
/* The communicator tree                                                                          */
/* ============================================================================================== */

typedef struct {
    int nmem;
    int mem[MAX_N]; /* job ranks, in the order of this communicator's ranks */
    int key[MAX_N]; /* the key each member passed to tempo_comm_split */
    int color;      /* the color its members passed to tempo_comm_split */
} cdesc_t;

typedef struct {
    int depth;
    int ncomm[MAX_DEPTH + 1];
    cdesc_t comm[MAX_DEPTH + 1][MAX_N];
    int mine[MAX_DEPTH + 1];   /* index of this rank's communicator per level, -1: none */
    int myrank[MAX_DEPTH + 1]; /* this rank's rank in it */
    dcomm_t h[MAX_DEPTH + 1];  /* this rank's communicator per level; valid where mine >= 0 */
    char text[2048];           /* the tree, for failure reports */
} tree_t;

/* ============================================================================================== */
/* Cases                                                                                          */
/* ============================================================================================== */

typedef struct {
    int kind; /* MR_* collective, K_BARRIER, K_P2P */
    int level;
    int lane;
    tempo_dtype_t dt;
    tempo_op_t op;
    size_t count;
    uint32_t rootsel; /* root = rootsel % size of the communicator */
    int place;
    int algo; /* index in the collective's algorithm list; -1: automatic */
    int api;
    int prio;
    size_t chunk; /* 0: not set */
    uint64_t tag;
    int twin;     /* scheduled: index of the earlier operation of the batch with the same tag */
    int comp;     /* compressor index (L_COMP) */
    int nullbufs; /* count 0: pass NULL buffers; off the root: pass NULL for ignored buffers */
    int shift;    /* misalignment in elements (0 or 1) */
    int named;    /* pass TEMPO_ATTR_NAME from a buffer scribbled over after the post */
    int pshift;   /* p2p: send to rank + pshift, receive from rank - pshift */
    int nmsg;     /* p2p messages */
    uint32_t ptag;
    uint64_t salt;
} opspec_t;

typedef struct {
    uint64_t k;
    int nops;
    int batch; /* posted together, completed in a per-rank order */
    opspec_t op[MAX_BATCH];
} case_t;

/* The state of one operation on this rank while it runs. */
typedef struct {
    opspec_t *o;
    dcomm_t comm;      /* unset (cd NULL): this rank has no communicator at the level */
    const cdesc_t *cd; /* NULL: nothing to do on this rank */
    int me, size, root;
    mr_call_t k;
    mr_gbuf_t S, R, X; /* send, receive, extra (an ignored buffer, p2p reverse) */
    uint8_t *s, *r, *x;
    mr_red_tabs_t t;
    const uint8_t *A;
    int nreq;
    tempo_request_t req[8]; /* p2p: nmsg receives and nmsg sends; others: 1 */
    tempo_status_t st;
    char name[48];
    int skipped; /* refused with TEMPO_ERR_UNSUPPORTED where that is allowed */
} run_t;

typedef struct {
    dcomm_t world;
    int rank, size;
    mr_out_t out;
    const char *dir, *transport;
    const char *hash_dir; /* --hashes: write DIR/h<rank> */
    FILE *hashes;
    uint64_t seed;
    int max_depth, big_permille;
    int comp_avg; /* the compressed lane uses avg as well as sum */
    uint64_t first, ncases;
    uint8_t *A;
    int nalgo[NKINDS];
    const char *algo[NKINDS][MAX_ALGOS];
    tempo_compressor_t comp[NCOMP];
    tree_t tree;
    long pass[NGROUPS], fail[NGROUPS], skip[NGROUPS];
    char first_fail[NGROUPS][700];
    long ops_run, cases_run;
    int fatal;
} ctx_t;

static uint64_t rnd(uint64_t *s)
{
    *s = mr_mix64(*s);
    return *s;
}

/* Uniform in [0, m). */
static uint64_t below(uint64_t *s, uint64_t m)
{
    return m ? rnd(s) % m : 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* Building the tree                                                                              */
/* ---------------------------------------------------------------------------------------------- */

typedef struct {
    int color, key, prank, world;
} member_t;

static int member_cmp(const void *a, const void *b)
{
    const member_t *x = a, *y = b;
    if (x->color != y->color) {
        return x->color < y->color ? -1 : 1;
    }
    if (x->key != y->key) {
        return x->key < y->key ? -1 : 1;
    }
    return x->prank < y->prank ? -1 : x->prank > y->prank;
}

static const char *const color_names[] = {"rank%m", "cut", "pairs", "random", "one"};
static const char *const key_names[] = {"same", "reversed", "random"};

/* The tree of epoch e, computed identically on every rank (no library call). */
static void tree_plan(ctx_t *c, uint64_t epoch, tree_t *t)
{
    uint64_t s = mr_hash3(c->seed, epoch, 0x7472ee);
    memset(t, 0, sizeof(*t));
    t->depth =
        c->max_depth == 0 || below(&s, 5) == 0 ? 0 : 1 + (int)below(&s, (uint64_t)c->max_depth);
    t->ncomm[0] = 1;
    t->comm[0][0].nmem = c->size;
    for (int i = 0; i < c->size; i++) {
        t->comm[0][0].mem[i] = i;
    }
    size_t tl = (size_t)snprintf(t->text, sizeof(t->text), "L0 {0..%d}", c->size - 1);
    for (int l = 1; l <= t->depth; l++) {
        int style = (int)below(&s, 5), m = 2 + (int)below(&s, 2), keys = (int)below(&s, 3);
        int out = below(&s, 4) == 0 ? (int)below(&s, (uint64_t)c->size) : -1;
        uint64_t cut = rnd(&s), salt = rnd(&s);
        tl += (size_t)snprintf(t->text + tl, sizeof(t->text) - tl, "; L%d color=%s m=%d key=%s%s",
                               l, color_names[style], m, key_names[keys], out >= 0 ? " out=" : "");
        if (out >= 0) {
            tl += (size_t)snprintf(t->text + tl, sizeof(t->text) - tl, "%d", out);
        }
        for (int p = 0; p < t->ncomm[l - 1]; p++) {
            const cdesc_t *pc = &t->comm[l - 1][p];
            member_t mb[MAX_N];
            int nm = 0;
            for (int i = 0; i < pc->nmem; i++) {
                uint64_t h = mr_hash3(salt, (uint64_t)p, (uint64_t)i);
                int color = style == 0   ? i % m
                            : style == 1 ? i < (int)(cut % (uint64_t)pc->nmem)
                            : style == 2 ? (i / 2) % m
                            : style == 3 ? (int)(h % 3)
                                         : 0;
                int key = keys == 0 ? 0 : keys == 1 ? -i : (int)(h >> 40) % 5;
                if (pc->mem[i] == out) {
                    continue; /* TEMPO_UNDEFINED */
                }
                mb[nm++] = (member_t){color, key, i, pc->mem[i]};
            }
            qsort(mb, (size_t)nm, sizeof(mb[0]), member_cmp);
            for (int i = 0; i < nm; i++) {
                if (i == 0 || mb[i].color != mb[i - 1].color) {
                    cdesc_t *nc = &t->comm[l][t->ncomm[l]++];
                    nc->color = mb[i].color;
                    tl += (size_t)snprintf(t->text + tl, sizeof(t->text) - tl, " {");
                }
                cdesc_t *nc = &t->comm[l][t->ncomm[l] - 1];
                nc->key[nc->nmem] = mb[i].key;
                nc->mem[nc->nmem++] = mb[i].world;
                tl += (size_t)snprintf(t->text + tl, sizeof(t->text) - tl, "%s%d",
                                       nc->nmem > 1 ? "," : "", mb[i].world);
                if (i == nm - 1 || mb[i + 1].color != mb[i].color) {
                    tl += (size_t)snprintf(t->text + tl, sizeof(t->text) - tl, "}");
                }
            }
        }
        if (tl >= sizeof(t->text)) {
            tl = sizeof(t->text) - 1;
        }
    }
    for (int l = 0; l <= t->depth; l++) {
        t->mine[l] = -1;
        for (int ci = 0; ci < t->ncomm[l]; ci++) {
            for (int i = 0; i < t->comm[l][ci].nmem; i++) {
                if (t->comm[l][ci].mem[i] == c->rank) {
                    t->mine[l] = ci;
                    t->myrank[l] = i;
                }
            }
        }
    }
}

/* Where this rank sits in the parent's split at level l: color and key as tree_plan chose. */
static void split_args(const tree_t *t, int l, int *color_p, int *key_p)
{
    *color_p = TEMPO_UNDEFINED;
    *key_p = 0;
    if (t->mine[l] >= 0) {
        const cdesc_t *nc = &t->comm[l][t->mine[l]];
        *color_p = nc->color;
        *key_p = nc->key[t->myrank[l]];
    }
}

/* ============================================================================================== */
/* Reporting                                                                                      */
/* ============================================================================================== */

static void replay_cmd(const ctx_t *c, uint64_t k, char *buf, size_t len)
{
#ifdef DIFFTEST_MPI
    const char *launch = "mpirun", *prog = "difftest_mpi --hashes", *env = "";
#else
    const char *launch = "tempo-run", *prog = "difftest --out";
    const char *env = strcmp(c->transport, "tcp") == 0 ? "TEMPO_HOST_ID=%r " : "";
#endif
    const char *more = getenv("DIFFTEST_ENV");
    snprintf(buf, len,
             "%s%s%s%s -n %d tests/mr/%s DIR --seed 0x%016" PRIx64 " --case %" PRIu64
             " --max-depth %d --big %d --comp-avg %d",
             more && *more ? more : "", more && *more ? " " : "", env, launch, c->size, prog,
             c->seed, k, c->max_depth, c->big_permille, c->comp_avg);
}

static void fail(ctx_t *c, int group, uint64_t k, const char *what, const char *why)
{
    char replay[512], line[700];
    replay_cmd(c, k, replay, sizeof(replay));
    snprintf(line, sizeof(line), "seed=0x%016" PRIx64 " case=%" PRIu64 " rank %d: %s: %s", c->seed,
             k, c->rank, what, why);
    fprintf(stderr, "difftest FAIL %s\n  tree: %s\n  replay: %s\n", line, c->tree.text, replay);
    if (!c->fail[group]++) {
        snprintf(c->first_fail[group], sizeof(c->first_fail[group]), "%s | replay: %s", line,
                 replay);
        for (char *p = c->first_fail[group]; *p; p++) {
            if (*p == '#' || *p == '\n') {
                *p = ' ';
            }
        }
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Building and tearing down the tree through the library (tempo's, or MPI's in difftest_mpi)     */
/* ---------------------------------------------------------------------------------------------- */

#ifndef DIFFTEST_MPI
/* Split parent as tree_plan said: *h_p (NULL where this rank is left out) and its size and this
 * rank's rank in it (-1, -1 there). Returns 0, or -1 after reporting the failure. */
static int comm_split(ctx_t *c, dcomm_t parent, int color, int key, uint64_t k, const char *what,
                      dcomm_t *h_p, int *size_p, int *rank_p)
{
    tempo_comm_t nc = NULL;
    tempo_status_t st = tempo_comm_split(parent, color, key, &nc);
    if (st != TEMPO_OK) {
        char why[700];
        snprintf(why, sizeof(why), "returned %s", mr_errtext(parent, st));
        fail(c, G_SPLIT, k, what, why);
        return -1;
    }
    *h_p = nc;
    *size_p = tempo_comm_size(nc);
    *rank_p = tempo_comm_rank(nc);
    return 0;
}

/* Destroy *h (where this rank has one); NULL, or the error in words (static storage). */
static const char *comm_free(dcomm_t *h)
{
    tempo_status_t st = *h ? tempo_comm_destroy(*h) : TEMPO_OK;
    *h = NULL;
    return st == TEMPO_OK ? NULL : mr_errtext(NULL, st);
}
#else
/* MPI's errors are fatal (MPI_ERRORS_ARE_FATAL): MPI prints them and ends the job. */
static int comm_split(ctx_t *c, dcomm_t parent, int color, int key, uint64_t k, const char *what,
                      dcomm_t *h_p, int *size_p, int *rank_p)
{
    (void)c, (void)k, (void)what;
    MPI_Comm nc = MPI_COMM_NULL;
    MPI_Comm_split(parent, color == TEMPO_UNDEFINED ? MPI_UNDEFINED : color, key, &nc);
    *h_p = nc;
    *size_p = *rank_p = -1;
    if (nc != MPI_COMM_NULL) {
        MPI_Comm_size(nc, size_p);
        MPI_Comm_rank(nc, rank_p);
    }
    return 0;
}

static const char *comm_free(dcomm_t *h)
{
    if (*h != MPI_COMM_NULL) {
        MPI_Comm_free(h);
    }
    *h = MPI_COMM_NULL;
    return NULL;
}
#endif

static void tree_destroy(ctx_t *c)
{
    tree_t *t = &c->tree;
    for (int l = t->depth; l >= 1; l--) {
        if (t->mine[l] >= 0) {
            const char *err = comm_free(&t->h[l]);
            if (err) {
                char why[700];
                snprintf(why, sizeof(why), "destroy of level %d: %s", l, err);
                fail(c, G_SPLIT, 0, "destroy", why);
            }
        }
    }
}

static void tree_build(ctx_t *c, uint64_t epoch, uint64_t k)
{
    tree_t *t = &c->tree;
    tree_plan(c, epoch, t);
    t->h[0] = c->world;
    for (int l = 1; l <= t->depth && !c->fatal; l++) {
        if (t->mine[l - 1] < 0) {
            continue; /* left out above: not a member of any parent */
        }
        int color, key, size, rank;
        split_args(t, l, &color, &key);
        char what[64], why[700];
        snprintf(what, sizeof(what), "split of level %d (color %d, key %d)", l, color, key);
        if (comm_split(c, t->h[l - 1], color, key, k, what, &t->h[l], &size, &rank) != 0) {
            c->fatal |= 1;
            return;
        }
        int want_size = t->mine[l] >= 0 ? t->comm[l][t->mine[l]].nmem : -1;
        int want_rank = t->mine[l] >= 0 ? t->myrank[l] : -1;
        if (size != want_size || rank != want_rank) {
            snprintf(why, sizeof(why), "got rank %d of %d, expected rank %d of %d", rank, size,
                     want_rank, want_size);
            fail(c, G_SPLIT, k, what, why);
            c->fatal = 1; /* the ranks no longer agree on who takes part in what */
        } else {
            c->pass[G_SPLIT]++;
        }
    }
}

/* ============================================================================================== */
/* Generating a case                                                                              */
/* ============================================================================================== */

static size_t gen_count(ctx_t *c, uint64_t *s, int batch, int per_rank, size_t es)
{
    static const size_t primes[] = {2, 3, 5, 7, 11, 13, 17, 31, 61, 127, 257, 1021, 4099};
    uint64_t r = below(s, 1000);
    size_t count;
    if (r < 50) {
        count = 0;
    } else if (r < 150) {
        count = 1;
    } else if (r < 500) {
        count = primes[below(s, sizeof(primes) / sizeof(primes[0]))];
    } else if (r < 930 || batch) {
        count = 1 + below(s, 4096);
    } else if (r < 1000 - (uint64_t)c->big_permille) {
        count = 1 + below(s, 65536);
    } else {
        count = BIG_BYTES / es / 2 + below(s, BIG_BYTES / es / 2);
    }
    size_t most = BIG_BYTES / es / (per_rank ? (size_t)c->size : 1);
    return count > most ? most : count;
}

static void gen_op(ctx_t *c, opspec_t *o, uint64_t *s, int batch, const case_t *cs, int idx)
{
    static const int kind_w[NKINDS] = {20, 12, 12, 12, 12, 10, 7, 15};
    memset(o, 0, sizeof(*o));
    uint64_t r = below(s, 100);
    int kind = 0;
    for (int acc = 0; kind < NKINDS; kind++) {
        acc += kind_w[kind];
        if ((int)r < acc) {
            break;
        }
    }
    o->kind = kind;
    o->level = (int)below(s, (uint64_t)c->tree.depth + 1);
    o->dt = (tempo_dtype_t)below(s, TEMPO_DTYPE_COUNT);
    o->op = (tempo_op_t)below(s, TEMPO_OP_COUNT);
    o->salt = rnd(s);
    o->rootsel = (uint32_t)rnd(s);
    o->nullbufs = (int)below(s, 2);
    o->named = below(s, 4) == 0;
    o->api = batch ? API_BATCH : (int)below(s, 3);
    int per_rank = kind == MR_REDUCE_SCATTER || kind == MR_ALLGATHER || kind == MR_ALLTOALL;
    o->count = gen_count(c, s, batch, per_rank, mr_esize(o->dt));
    o->shift = o->count > 1 && below(s, 4) == 0;
    o->place = (int)below(s, kind == MR_REDUCE_SCATTER || kind == MR_ALLGATHER ? 3 : 2);
    o->algo = -1;
    if (kind <= K_BARRIER && below(s, 2) && c->nalgo[kind] > 0) {
        o->algo = (int)below(s, (uint64_t)c->nalgo[kind]);
    }
    if (kind == K_P2P) {
        o->nmsg = 1 + (int)below(s, 3);
        o->pshift = (int)below(s, 1000);
        o->ptag = (uint32_t)below(s, 4) == 0 ? TEMPO_TAG_MAX - (uint32_t)below(s, 4)
                                             : (uint32_t)below(s, 1000);
        if (o->count * mr_esize(o->dt) * (size_t)o->nmsg > BIG_BYTES) {
            o->count = BIG_BYTES / mr_esize(o->dt) / (size_t)o->nmsg;
        }
    }
    /* Lanes: scheduled (allreduce, reduce_scatter, allgather), compressed (allreduce,
     * reduce_scatter; float32 sum/avg) */
    r = below(s, 100);
    if ((kind == MR_ALLREDUCE || kind == MR_REDUCE_SCATTER) && r < 12) {
        o->lane = L_COMP;
        o->comp = (int)below(s, NCOMP);
        o->dt = TEMPO_FLOAT32;
        o->op = below(s, 2) && c->comp_avg ? TEMPO_AVG : TEMPO_SUM;
        o->algo = -1; /* a compressed request runs the compressor's schedule */
        if (below(s, 2)) {
            o->prio = (int)below(s, 8);
            o->tag = rnd(s);
            o->chunk = below(s, 2) ? 0 : 256 << below(s, 8);
        }
    } else if (kind <= MR_ALLGATHER && r < 35) {
        o->lane = L_SCHED;
        o->prio = (int)below(s, 8);
        o->tag = rnd(s) >> 1;
        static const size_t chunks[] = {0, 64, 1000, 4096, 65536, SIZE_MAX};
        o->chunk = chunks[below(s, 6)];
        o->twin = -1;
        /* now and then the tag of an earlier scheduled operation of the batch with the same
         * collective on the same level: occurrence 1 of that identity */
        for (int j = 0; batch && j < idx && below(s, 3) == 0; j++) {
            const opspec_t *e = &cs->op[j];
            if (e->lane == L_SCHED && e->kind == kind && e->level == o->level && e->twin < 0) {
                o->tag = e->tag;
                o->twin = j;
                break;
            }
        }
    }
    if (o->lane != L_PLAIN && o->api == API_BLOCK) {
        o->api = API_WAIT; /* the blocking forms take no attributes */
    }
}

static void gen_case(ctx_t *c, uint64_t k, case_t *cs)
{
    uint64_t s = mr_hash3(c->seed, k, 0xca5e);
    cs->k = k;
    uint64_t r = below(&s, 100);
    cs->batch = r >= 55;
    cs->nops = !cs->batch ? 1
               : r < 90   ? 2 + (int)below(&s, 7)
               : r < 98   ? 9 + (int)below(&s, 16)
                          : 25 + (int)below(&s, 40);
    for (int i = 0; i < cs->nops; i++) {
        gen_op(c, &cs->op[i], &s, cs->batch, cs, i);
    }
}

static void describe(const ctx_t *c, const case_t *cs, int i, const run_t *u, char *buf, size_t len)
{
    const opspec_t *o = &cs->op[i];
    int kind = o->kind;
    const char *algo = o->algo < 0 ? "auto" : c->algo[kind][o->algo];
    size_t n = (size_t)snprintf(
        buf, len, "op %d/%d %s level=%d comm#%d (rank %d of %d) dtype=%s", i, cs->nops,
        kind < MR_NCOLL     ? mr_coll_name(kind)
        : kind == K_BARRIER ? "barrier"
                            : "p2p",
        o->level, c->tree.mine[o->level], u->me, u->size, tempo_dtype_name(o->dt));
    if (kind == MR_ALLREDUCE || kind == MR_REDUCE_SCATTER || kind == MR_REDUCE) {
        n += (size_t)snprintf(buf + n, len - n, " op=%s", tempo_op_name(o->op));
    }
    if (kind == MR_BROADCAST || kind == MR_REDUCE) {
        n += (size_t)snprintf(buf + n, len - n, " root=%d", u->root);
    }
    n += (size_t)snprintf(buf + n, len - n, " count=%zu %s%s%s algo=%s api=%s", o->count,
                          place_names[o->place], o->shift ? " misaligned" : "",
                          o->nullbufs ? " null-buffers" : "", algo, api_names[o->api]);
    if (o->lane == L_SCHED) {
        n += (size_t)snprintf(buf + n, len - n, " sched(prio=%d tag=0x%" PRIx64 " chunk=%zu%s)",
                              o->prio, o->tag, o->chunk, o->twin >= 0 ? " twin" : "");
    } else if (o->lane == L_COMP) {
        n += (size_t)snprintf(buf + n, len - n, " compressor=%s%s", comp_specs[o->comp],
                              o->tag ? " scheduled" : "");
    }
    if (kind == K_P2P) {
        snprintf(buf + n, len - n, " shift=%d msgs=%d tag=%u",
                 u->size > 1 ? 1 + o->pshift % (u->size - 1) : 0, o->nmsg, o->ptag);
    }
}

static int group_of(const opspec_t *o)
{
    return o->lane == L_COMP ? G_COMP : o->lane == L_SCHED ? G_SCHED : o->kind;
}

/* ============================================================================================== */
/* Preparing one operation (both programs)                                                        */
/* ============================================================================================== */

/* Compressed cases: small integers (sum) or rank-count multiples of them (avg), so that fp16 and
 * bf16 hold every value and every partial sum exactly, also after avg's division. */
static void comp_tables(const run_t *u, mr_red_tabs_t *t)
{
    memset(t, 0, sizeof(*t));
    for (int a = 0; a < 16; a++) {
        double acc = 0;
        for (int r = 0; r < u->size; r++) {
            double v =
                (double)mr_span(mr_hash3(u->o->salt, (uint64_t)u->cd->mem[r], (uint64_t)a), 31);
            acc += v;
            if (u->o->op == TEMPO_AVG) {
                v *= u->size;
            }
            if (r == u->me) {
                mr_store_float(t->in[a], TEMPO_FLOAT32, v);
            }
        }
        mr_store_float(t->exp[a], TEMPO_FLOAT32, acc);
    }
}

static uint8_t *take(mr_gbuf_t *b, size_t len, size_t shift)
{
    mr_gbuf_alloc(b, len + 16);
    return mr_gbuf_take(b, len, shift);
}

static int owner(const run_t *u, int r)
{
    return u->cd->mem[r];
}

static void prepare(ctx_t *c, run_t *u, opspec_t *o)
{
    tree_t *t = &c->tree;
    memset(u, 0, sizeof(*u));
    u->o = o;
    if (t->mine[o->level] < 0) {
        return;
    }
    u->comm = t->h[o->level];
    u->cd = &t->comm[o->level][t->mine[o->level]];
    u->me = t->myrank[o->level];
    u->size = u->cd->nmem;
    u->root = (int)(o->rootsel % (uint32_t)u->size);
    u->A = c->A + o->salt % A_SLACK;
    int n = u->size, me = u->me, kind = o->kind, mine = owner(u, me);
    size_t es = mr_esize(o->dt), count = o->count, cb = count * es, sh = (size_t)o->shift * es;
    int null0 = count == 0 && o->nullbufs;
    u->k = (mr_call_t){
        kind,   o->algo >= 0 ? c->algo[kind][o->algo] : NULL, NULL, NULL, count, o->dt, o->op,
        u->root};
    if (kind == MR_ALLREDUCE || kind == MR_REDUCE_SCATTER || kind == MR_REDUCE) {
        if (o->lane == L_COMP) {
            comp_tables(u, &u->t);
        } else {
            mr_red_tables(o->dt, o->op, o->salt, n, u->cd->mem, me, &u->t);
        }
    }
    uint8_t *s = NULL, *r = NULL;
    switch (kind) {
    case MR_ALLREDUCE:
        s = take(&u->S, cb, sh);
        mr_fill_tab(u->A, s, count, es, u->t.in);
        r = o->place == P_OOP ? take(&u->R, cb, sh) : s;
        break;
    case MR_REDUCE_SCATTER:
        s = take(&u->S, (size_t)n * cb, sh);
        mr_fill_tab(u->A, s, (size_t)n * count, es, u->t.in);
        r = o->place == P_OOP       ? take(&u->R, cb, sh)
            : o->place == P_INPLACE ? s + (size_t)me * cb
                                    : s;
        break;
    case MR_ALLGATHER:
        r = take(&u->R, (size_t)n * cb, sh);
        s = o->place == P_OOP       ? take(&u->S, cb, sh)
            : o->place == P_INPLACE ? r + (size_t)me * cb
                                    : r;
        mr_gen_bytes(s, cb, o->salt, mine, 0);
        break;
    case MR_BROADCAST:
        r = take(&u->R, cb, sh);
        if (o->place == P_OOP) {
            if (me == u->root) {
                s = take(&u->S, cb, sh);
                mr_gen_bytes(s, cb, o->salt, mine, 0);
            } else if (!o->nullbufs) { /* ignored off the root: must stay untouched */
                s = u->x = take(&u->X, cb, sh);
            }
        } else {
            s = r;
            if (me == u->root) {
                mr_gen_bytes(s, cb, o->salt, mine, 0);
            }
        }
        break;
    case MR_REDUCE:
        s = take(&u->S, cb, sh);
        mr_fill_tab(u->A, s, count, es, u->t.in);
        if (o->place == P_OOP) {
            if (me == u->root) {
                r = take(&u->R, cb, sh);
            } else if (!o->nullbufs) {
                r = u->x = take(&u->X, cb, sh);
            }
        } else {
            r = s;
        }
        break;
    case MR_ALLTOALL:
        r = take(&u->R, (size_t)n * cb, sh);
        s = o->place == P_OOP ? take(&u->S, (size_t)n * cb, sh) : r;
        mr_gen_bytes(s, (size_t)n * cb, o->salt, mine, 0);
        break;
    case K_P2P:
        /* S: nmsg messages to rank + shift; R: nmsg from rank - shift */
        s = take(&u->S, (size_t)o->nmsg * cb, 0);
        r = take(&u->R, (size_t)o->nmsg * cb, 0);
        mr_gen_bytes(s, (size_t)o->nmsg * cb, o->salt, mine, 0);
        break;
    default: /* barrier: files, see post() */ break;
    }
    u->s = s;
    u->r = r;
    u->k.send = null0 ? NULL : s;
    u->k.recv = null0 ? NULL : r;
}

/* ============================================================================================== */
/* Result hashes (--hashes), written by both programs                                             */
/* ============================================================================================== */

static uint64_t fnv1a64(const uint8_t *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h = (h ^ p[i]) * 0x100000001b3ull;
    }
    return h;
}

/* The bytes operation u delivered on this rank (see the top of the file); their length. */
static size_t result_bytes(const run_t *u, const uint8_t **p_p)
{
    const opspec_t *o = u->o;
    size_t cb = o->count * mr_esize(o->dt), n = (size_t)u->size;
    *p_p = u->r;
    switch (o->kind) {
    case MR_ALLREDUCE:
    case MR_REDUCE_SCATTER:
    case MR_BROADCAST: return cb;
    case MR_ALLGATHER:
    case MR_ALLTOALL: return n * cb;
    case MR_REDUCE: return u->me == u->root ? cb : 0;
    case K_P2P: return n > 1 ? (size_t)o->nmsg * cb : 0;
    default: return 0; /* barrier */
    }
}

/* The line of operation i of case cs on this rank: the hash of its result, or word. */
static void hash_line(ctx_t *c, const case_t *cs, int i, const run_t *u, const char *word,
                      const char *desc)
{
    char tok[24];
    if (!c->hashes) {
        return;
    }
    if (!word) {
        const uint8_t *p;
        size_t n = result_bytes(u, &p);
        snprintf(tok, sizeof(tok), "%016" PRIx64, fnv1a64(p, n));
        word = tok;
    }
    fprintf(c->hashes, "%" PRIu64 " %d %s %s\n", cs->k, i, word, desc);
}

static void release(run_t *u)
{
    free(u->S.base);
    free(u->R.base);
    free(u->X.base);
    u->S.base = u->R.base = u->X.base = NULL;
}

/* ============================================================================================== */
/* The tempo driver: posting and checking one operation, running a case                           */
/* ============================================================================================== */

#ifndef DIFFTEST_MPI
static void barrier_path(const ctx_t *c, const run_t *u, int member, char *buf, size_t len)
{
    snprintf(buf, len, "%s/b%016" PRIx64 ".%d", c->dir, u->o->salt, owner(u, member));
}

static tempo_status_t post(ctx_t *c, run_t *u, int blocking)
{
    opspec_t *o = u->o;
    tempo_attr_t attr = {0};
    if (o->algo >= 0) {
        attr.field_mask |= TEMPO_ATTR_ALGORITHM;
        attr.algorithm = c->algo[o->kind][o->algo];
    }
    if (o->lane == L_SCHED || (o->lane == L_COMP && o->tag)) {
        attr.field_mask |= TEMPO_ATTR_PRIORITY | TEMPO_ATTR_TAG;
        attr.priority = o->prio;
        attr.tag = o->tag;
        if (o->chunk) {
            attr.field_mask |= TEMPO_ATTR_CHUNK_BYTES;
            attr.chunk_bytes = o->chunk;
        }
    }
    if (o->lane == L_COMP) {
        attr.field_mask |= TEMPO_ATTR_COMPRESSOR;
        attr.compressor = c->comp[o->comp];
    }
    if (o->named) { /* copied by the library: scribbled over below */
        attr.field_mask |= TEMPO_ATTR_NAME;
        snprintf(u->name, sizeof(u->name), "difftest.%" PRIx64, o->salt);
        attr.name = u->name;
    }
    const tempo_attr_t *ap = attr.field_mask ? &attr : NULL;
    tempo_status_t st = TEMPO_OK;
    u->nreq = 0;
    if (o->kind == K_BARRIER) {
        char path[4096];
        barrier_path(c, u, u->me, path, sizeof(path));
        int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
        if (fd < 0 || close(fd) != 0) {
            fprintf(stderr, "difftest: cannot create %s: %s\n", path, strerror(errno));
            exit(2);
        }
        if (blocking) {
            return tempo_barrier(u->comm);
        }
        st = tempo_ibarrier(u->comm, ap, &u->req[u->nreq]);
        u->nreq += st == TEMPO_OK;
    } else if (o->kind == K_P2P) {
        if (u->size == 1) {
            return TEMPO_OK;
        }
        int sh = 1 + o->pshift % (u->size - 1);
        int to = (u->me + sh) % u->size, from = (u->me + u->size - sh) % u->size;
        size_t cb = o->count * mr_esize(o->dt);
        if (blocking) {
            /* cycles of the shift: their first member sends first, the others receive first */
            int g = 1;
            for (int d = 1; d <= u->size; d++) {
                if (u->size % d == 0 && sh % d == 0) {
                    g = d;
                }
            }
            int first = u->me < g;
            for (int pass = 0; pass < 2 && st == TEMPO_OK; pass++) {
                int sending = first ? pass == 0 : pass == 1;
                for (int m = 0; m < o->nmsg && st == TEMPO_OK; m++) {
                    st = sending ? tempo_send(u->comm, u->s + (size_t)m * cb, o->count, o->dt, to,
                                              o->ptag)
                                 : tempo_recv(u->comm, u->r + (size_t)m * cb, o->count, o->dt, from,
                                              o->ptag);
                }
            }
            return st;
        }
        for (int m = 0; m < o->nmsg && st == TEMPO_OK; m++) {
            st = tempo_irecv(u->comm, u->r + (size_t)m * cb, o->count, o->dt, from, o->ptag, ap,
                             &u->req[u->nreq]);
            u->nreq += st == TEMPO_OK;
        }
        for (int m = 0; m < o->nmsg && st == TEMPO_OK; m++) {
            st = tempo_isend(u->comm, u->s + (size_t)m * cb, o->count, o->dt, to, o->ptag, ap,
                             &u->req[u->nreq]);
            u->nreq += st == TEMPO_OK;
        }
    } else {
        if (blocking) {
            return mr_call_blocking(u->comm, &u->k);
        }
        st = mr_post(u->comm, &u->k, ap, &u->req[0]);
        u->nreq += st == TEMPO_OK;
    }
    memset(u->name, 'X', sizeof(u->name) - 1);
    return st;
}

/* Refusals that are not bugs: a forced "shm" all-reduce where the ranks are not on one host (on
 * one rank it runs: there is nothing to share). */
static int allowed_unsupported(const ctx_t *c, const run_t *u)
{
    const opspec_t *o = u->o;
    return o->kind == MR_ALLREDUCE && o->algo >= 0 &&
           strcmp(c->algo[MR_ALLREDUCE][o->algo], "shm") == 0 && u->size > 1 &&
           strcmp(c->transport, "shm") != 0;
}

static void check(ctx_t *c, run_t *u, mr_verdict_t *v)
{
    const opspec_t *o = u->o;
    int n = u->size, me = u->me, root = u->root, place = o->place;
    size_t es = mr_esize(o->dt), count = o->count, cb = count * es;
    uint8_t *s = u->s, *r = u->r;
    tempo_dtype_t dt = o->dt;
    char what[96];
    switch (o->kind) {
    case MR_ALLREDUCE:
        mr_check_tab_at(v, u->A, "recvbuf", r, count, dt, u->t.exp);
        if (place == P_OOP) {
            mr_check_tab_at(v, u->A, "sendbuf (must be unchanged)", s, count, dt, u->t.in);
        }
        break;
    case MR_REDUCE_SCATTER:
        mr_check_tab_at(v, u->A + (size_t)me * count, "recvbuf", r, count, dt, u->t.exp);
        if (place == P_OOP) {
            mr_check_tab_at(v, u->A, "sendbuf (must be unchanged)", s, (size_t)n * count, dt,
                            u->t.in);
        }
        break;
    case MR_ALLGATHER:
        for (int j = 0; j < n; j++) {
            snprintf(what, sizeof(what), "recvbuf block %d (rank %d's)", j, owner(u, j));
            mr_check_bytes_at(v, what, r + (size_t)j * cb, cb, es, o->salt, owner(u, j), 0);
        }
        if (place == P_OOP) {
            mr_check_bytes_at(v, "sendbuf (must be unchanged)", s, cb, es, o->salt, owner(u, me),
                              0);
        }
        break;
    case MR_BROADCAST:
        mr_check_bytes_at(v, "recvbuf", r, cb, es, o->salt, owner(u, root), 0);
        if (place == P_OOP && me == root) {
            mr_check_bytes_at(v, "sendbuf (must be unchanged)", s, cb, es, o->salt, owner(u, me),
                              0);
        }
        if (u->x) {
            mr_check_untouched(v, "sendbuf off the root (read on root only)", u->x, cb);
        }
        break;
    case MR_REDUCE:
        if (me == root) {
            mr_check_tab_at(v, u->A, "recvbuf on the root", r, count, dt, u->t.exp);
        }
        if (place == P_OOP || me != root) {
            mr_check_tab_at(v, u->A, "sendbuf (must be unchanged)", s, count, dt, u->t.in);
        }
        if (u->x) {
            mr_check_untouched(v, "recvbuf off the root (ignored there)", u->x, cb);
        }
        break;
    case MR_ALLTOALL:
        for (int j = 0; j < n; j++) {
            snprintf(what, sizeof(what), "recvbuf block %d (from rank %d)", j, owner(u, j));
            mr_check_bytes_at(v, what, r + (size_t)j * cb, cb, es, o->salt, owner(u, j),
                              (size_t)me * cb);
        }
        if (place == P_OOP) {
            mr_check_bytes_at(v, "sendbuf (must be unchanged)", s, (size_t)n * cb, es, o->salt,
                              owner(u, me), 0);
        }
        break;
    case K_P2P:
        if (n > 1) {
            int sh = 1 + o->pshift % (n - 1), from = (me + n - sh) % n;
            for (int m = 0; m < o->nmsg; m++) {
                snprintf(what, sizeof(what), "message %d of %d from rank %d (same tag, in order)",
                         m, o->nmsg, owner(u, from));
                mr_check_bytes_at(v, what, r + (size_t)m * cb, cb, es, o->salt, owner(u, from),
                                  (size_t)m * cb);
            }
            mr_check_bytes_at(v, "sent messages (must be unchanged)", s, (size_t)o->nmsg * cb, es,
                              o->salt, owner(u, me), 0);
        }
        break;
    default: /* barrier */
        for (int j = 0; j < n; j++) {
            char path[4096];
            struct stat sb;
            barrier_path(c, u, j, path, sizeof(path));
            if (stat(path, &sb) != 0) {
                mr_vfail(v, "the barrier returned before rank %d (job rank %d) entered it", j,
                         owner(u, j));
                break;
            }
        }
        break;
    }
    mr_gbuf_t *bufs[3] = {&u->S, &u->R, &u->X};
    static const char *const names[3] = {"send", "recv", "extra"};
    for (int i = 0; i < 3; i++) {
        if (bufs[i]->base) {
            mr_check_guards(v, names[i], bufs[i]);
        }
    }
}

static int is_fatal(tempo_status_t st)
{
    return st == TEMPO_ERR_REMOTE || st == TEMPO_ERR_TIMEOUT || st == TEMPO_ERR_ABORTED ||
           st == TEMPO_ERR_INTERNAL || st == TEMPO_ERR_SYSTEM || st == TEMPO_ERR_NOMEM;
}

/* The verdict on one operation once it completed with status st. */
static void finish(ctx_t *c, const case_t *cs, int i, run_t *u, tempo_status_t st)
{
    char desc[600];
    mr_verdict_t v = {0};
    int g = group_of(u->o);
    describe(c, cs, i, u, desc, sizeof(desc));
    c->ops_run++;
    int allowed = st == TEMPO_ERR_UNSUPPORTED && allowed_unsupported(c, u);
    hash_line(c, cs, i, u, st == TEMPO_OK ? NULL : allowed ? "unsupported" : "error", desc);
    if (allowed) {
        c->skip[g]++;
    } else if (st != TEMPO_OK) {
        char why[700];
        snprintf(why, sizeof(why), "returned %s", mr_errtext(u->comm, st));
        fail(c, g, cs->k, desc, why);
        c->fatal |= is_fatal(st);
    } else {
        check(c, u, &v);
        if (v.failed) {
            fail(c, g, cs->k, desc, v.why);
        } else {
            c->pass[g]++;
        }
    }
    release(u);
}

static tempo_status_t first_error(const tempo_status_t *sts, int n)
{
    for (int i = 0; i < n; i++) {
        if (sts[i] != TEMPO_OK) {
            return sts[i];
        }
    }
    return TEMPO_OK;
}

static void run_single(ctx_t *c, case_t *cs)
{
    static run_t u;
    prepare(c, &u, &cs->op[0]);
    if (!u.cd) {
        return;
    }
    int api = cs->op[0].api;
    int blocking =
        api == API_BLOCK && cs->op[0].algo < 0 && cs->op[0].lane == L_PLAIN && !cs->op[0].named;
    tempo_status_t st = post(c, &u, blocking);
    if (!blocking && st == TEMPO_OK) {
        tempo_status_t sts[8];
        if (api == API_TEST) {
            for (int i = 0; i < u.nreq; i++) {
                while ((sts[i] = tempo_test(&u.req[i])) == TEMPO_INPROGRESS) {
                    sched_yield();
                }
            }
        } else {
            for (int i = 0; i < u.nreq; i++) {
                sts[i] = tempo_wait(&u.req[i]);
            }
        }
        st = first_error(sts, u.nreq);
    } else if (st != TEMPO_OK) {
        tempo_waitall((size_t)u.nreq, u.req, NULL); /* what was posted before the error */
    }
    finish(c, cs, 0, &u, st);
}

static void shuffle(int *v, int n, uint64_t *s)
{
    for (int i = n - 1; i > 0; i--) {
        int j = (int)below(s, (uint64_t)i + 1), t = v[i];
        v[i] = v[j];
        v[j] = t;
    }
}

/* Posting order of a batch on this rank: program-order operations in case order; scheduled ones
 * (which may be posted in any order) shuffled per rank, twins (same tag) kept in case order, and
 * merged at random places. */
static void post_order(const ctx_t *c, const case_t *cs, int *order)
{
    uint64_t s = mr_hash3(c->seed, cs->k, 0x07de7 + (uint64_t)c->rank);
    int plain[MAX_BATCH], sch[MAX_BATCH], np = 0, ns = 0;
    for (int i = 0; i < cs->nops; i++) {
        if (cs->op[i].lane == L_PLAIN || (cs->op[i].lane == L_COMP && !cs->op[i].tag)) {
            plain[np++] = i;
        } else {
            sch[ns++] = i;
        }
    }
    shuffle(sch, ns, &s);
    /* twins: the positions the members of a tag group took get the members in case order */
    for (int a = 0; a < ns; a++) {
        for (int b = a + 1; b < ns; b++) {
            if (cs->op[sch[a]].tag == cs->op[sch[b]].tag && sch[a] > sch[b]) {
                int t = sch[a];
                sch[a] = sch[b];
                sch[b] = t;
            }
        }
    }
    int ip = 0, is = 0;
    for (int i = 0; i < cs->nops; i++) {
        int take_plain =
            is == ns || (ip < np && below(&s, (uint64_t)(np - ip + ns - is)) < (uint64_t)(np - ip));
        order[i] = take_plain ? plain[ip++] : sch[is++];
    }
}

static void run_batch(ctx_t *c, case_t *cs)
{
    static run_t u[MAX_BATCH];
    int order[MAX_BATCH];
    tempo_status_t pst[MAX_BATCH];
    post_order(c, cs, order);
    for (int j = 0; j < cs->nops; j++) {
        prepare(c, &u[j], &cs->op[j]);
        pst[j] = TEMPO_OK;
    }
    for (int j = 0; j < cs->nops; j++) {
        int i = order[j];
        if (u[i].cd) {
            pst[i] = post(c, &u[i], 0);
        }
    }
    /* Completion in an order of this rank's own. */
    uint64_t s = mr_hash3(c->seed, cs->k, 0xc0de + (uint64_t)c->rank);
    int how = (int)below(&s, 3);
    tempo_request_t all[MAX_BATCH * 8];
    tempo_status_t sts[MAX_BATCH * 8];
    int owner_of[MAX_BATCH * 8], nall = 0;
    for (int i = 0; i < cs->nops; i++) {
        for (int q = 0; q < u[i].nreq; q++) {
            owner_of[nall] = i;
            all[nall++] = u[i].req[q];
        }
    }
    if (how == 0) {
        tempo_waitall((size_t)nall, all, sts);
    } else {
        int idx[MAX_BATCH * 8];
        for (int q = 0; q < nall; q++) {
            idx[q] = q;
        }
        shuffle(idx, nall, &s);
        if (how == 1) {
            for (int q = 0; q < nall; q++) {
                sts[idx[q]] = tempo_wait(&all[idx[q]]);
            }
        } else {
            for (int left = nall; left > 0;) {
                for (int q = 0; q < nall; q++) {
                    if (all[idx[q]]) {
                        sts[idx[q]] = tempo_test(&all[idx[q]]);
                        left -= sts[idx[q]] != TEMPO_INPROGRESS;
                    }
                }
                sched_yield();
            }
        }
    }
    tempo_status_t st[MAX_BATCH];
    for (int i = 0; i < cs->nops; i++) {
        st[i] = pst[i];
    }
    for (int q = 0; q < nall; q++) {
        if (st[owner_of[q]] == TEMPO_OK) {
            st[owner_of[q]] = sts[q];
        }
    }
    for (int i = 0; i < cs->nops; i++) {
        if (u[i].cd) {
            finish(c, cs, i, &u[i], st[i]);
        }
    }
}

#else  /* DIFFTEST_MPI */

/* ============================================================================================== */
/* The MPI driver: each operation through MPI, in case order                                      */
/* ============================================================================================== */

/* Moved data of any dtype is bytes: fp16 and bf16 travel as MPI_UINT16_T. */
static MPI_Datatype mpi_dtype(tempo_dtype_t dt)
{
    MPI_Datatype d = tempo_mpi_dtype(dt);
    return d == MPI_DATATYPE_NULL ? MPI_UINT16_T : d;
}

static MPI_Op mpi_op(tempo_op_t op)
{
    return op == TEMPO_PROD  ? MPI_PROD
           : op == TEMPO_MIN ? MPI_MIN
           : op == TEMPO_MAX ? MPI_MAX
                             : MPI_SUM;
}

/* avg after MPI_SUM: tempo.h's division by n, in the type (integers: truncation toward zero).
 * Exact for difftest's data: the sum is exact, the division rounds once as the reference's. */
static void mpi_avg(uint8_t *buf, size_t count, tempo_dtype_t dt, int n)
{
    size_t es = mr_esize(dt);
    for (size_t i = 0; i < count; i++) {
        uint8_t *p = buf + i * es;
        if (dt == TEMPO_FLOAT32) {
            float f;
            memcpy(&f, p, 4);
            volatile float q = f / (float)n;
            mr_store_float(p, dt, q);
        } else if (dt == TEMPO_FLOAT64) {
            double d;
            memcpy(&d, p, 8);
            mr_store_float(p, dt, d / n);
        } else {
            uint64_t raw = 0;
            memcpy(&raw, p, es);
            raw = mr_is_signed(dt) ? (uint64_t)(mr_sext(raw, dt) / n) : raw / (uint64_t)n;
            mr_store_int(p, dt, raw);
        }
    }
}

/* Run u through MPI. NULL, or why MPI cannot express it ("skip-..."). */
static const char *mpi_run(run_t *u)
{
    const opspec_t *o = u->o;
    int kind = o->kind, n = u->size, me = u->me, root = u->root, cnt = (int)o->count;
    int reduces = kind == MR_ALLREDUCE || kind == MR_REDUCE_SCATTER || kind == MR_REDUCE;
    if (reduces && (o->dt == TEMPO_FLOAT16 || o->dt == TEMPO_BFLOAT16)) {
        return o->dt == TEMPO_FLOAT16 ? "skip-fp16-reduction" : "skip-bf16-reduction";
    }
    MPI_Datatype dt = mpi_dtype(o->dt);
    MPI_Op op = mpi_op(o->op);
    MPI_Comm comm = u->comm;
    size_t cb = o->count * mr_esize(o->dt);
    uint8_t *s = u->k.send ? u->s : NULL, *r = u->k.recv ? u->r : NULL; /* NULL as tempo got */
    const void *sb = o->place == P_OOP ? (const void *)s : MPI_IN_PLACE;
    switch (kind) {
    case MR_ALLREDUCE: MPI_Allreduce(sb, r, cnt, dt, op, comm); break;
    case MR_REDUCE_SCATTER:
        /* in place, MPI's block lands at the start of the buffer: tempo's in-place-same-ptr */
        MPI_Reduce_scatter_block(sb, o->place == P_OOP ? r : s, cnt, dt, op, comm);
        if (o->place == P_INPLACE && cb) {
            memmove(r, s, cb);
        }
        break;
    case MR_ALLGATHER:
        if (o->place == P_SAME && cb) { /* this rank's block from the start to its place */
            memmove(r + (size_t)me * cb, r, cb);
        }
        MPI_Allgather(sb, cnt, dt, r, cnt, dt, comm);
        break;
    case MR_BROADCAST:
        if (o->place == P_OOP && me == root && cb) {
            memcpy(r, s, cb); /* MPI_Bcast has one buffer */
        }
        MPI_Bcast(r, cnt, dt, root, comm);
        break;
    case MR_REDUCE:
        MPI_Reduce(me == root ? sb : s, me == root ? r : NULL, cnt, dt, op, root, comm);
        break;
    case MR_ALLTOALL: MPI_Alltoall(sb, cnt, dt, r, cnt, dt, comm); break;
    case K_P2P:
        if (n > 1) {
            int sh = 1 + o->pshift % (n - 1), tag = (int)(o->ptag % 32768); /* MPI_TAG_UB >= */
            MPI_Request rq[8];
            for (int m = 0; m < o->nmsg; m++) {
                MPI_Irecv(u->r + (size_t)m * cb, cnt, dt, (me + n - sh) % n, tag, comm, &rq[m]);
            }
            for (int m = 0; m < o->nmsg; m++) {
                MPI_Isend(u->s + (size_t)m * cb, cnt, dt, (me + sh) % n, tag, comm,
                          &rq[o->nmsg + m]);
            }
            MPI_Waitall(2 * o->nmsg, rq, MPI_STATUSES_IGNORE);
        }
        break;
    default: MPI_Barrier(comm); break;
    }
    if (reduces && o->op == TEMPO_AVG && (kind != MR_REDUCE || me == root)) {
        mpi_avg(u->r, o->count, o->dt, n);
    }
    return NULL;
}

static void run_mpi(ctx_t *c, case_t *cs)
{
    static run_t u;
    for (int i = 0; i < cs->nops; i++) {
        prepare(c, &u, &cs->op[i]);
        if (!u.cd) {
            continue;
        }
        char desc[600];
        const char *skip = mpi_run(&u);
        c->ops_run++;
        c->skip[group_of(u.o)] += skip != NULL;
        describe(c, cs, i, &u, desc, sizeof(desc));
        hash_line(c, cs, i, &u, skip, desc);
        release(&u);
    }
}
#endif /* DIFFTEST_MPI */

/* ============================================================================================== */
/* main                                                                                           */
/* ============================================================================================== */

static int kind_of(const char *coll)
{
    for (int i = 0; i < MR_NCOLL; i++) {
        if (strcmp(coll, mr_coll_name(i)) == 0) {
            return i;
        }
    }
    return strcmp(coll, "barrier") == 0 ? K_BARRIER : -1;
}

static void load_algos(ctx_t *c)
{
    tempo_algorithm_info_t info;
    for (size_t i = 0; tempo_algorithm_info(i, &info) == TEMPO_OK; i++) {
        int kind = kind_of(info.collective);
        if (kind >= 0 && c->nalgo[kind] < MAX_ALGOS) {
            c->algo[kind][c->nalgo[kind]++] = info.name;
        }
    }
}

static int parse_args(ctx_t *c, int argc, char **argv, int *list_p)
{
    c->ncases = 200;
    c->max_depth = MAX_DEPTH;
    c->big_permille = 2;
    c->transport = "shm";
    c->comp_avg = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--list") == 0) {
            *list_p = 1;
            continue;
        }
        if (!v) {
            return -1;
        }
        i++;
        if (strcmp(a, "--out") == 0) {
            c->dir = v;
        } else if (strcmp(a, "--seed") == 0) {
            c->seed = strtoull(v, NULL, 0);
        } else if (strcmp(a, "--cases") == 0) {
            c->ncases = strtoull(v, NULL, 0);
        } else if (strcmp(a, "--first") == 0) {
            c->first = strtoull(v, NULL, 0);
        } else if (strcmp(a, "--case") == 0) {
            c->first = strtoull(v, NULL, 0);
            c->ncases = 1;
        } else if (strcmp(a, "--max-depth") == 0) {
            c->max_depth = atoi(v);
        } else if (strcmp(a, "--big") == 0) {
            c->big_permille = atoi(v);
        } else if (strcmp(a, "--comp-avg") == 0) {
            c->comp_avg = atoi(v);
        } else if (strcmp(a, "--transport") == 0) {
            c->transport = v;
        } else if (strcmp(a, "--hashes") == 0) {
            c->hash_dir = v;
        } else {
            return -1;
        }
    }
    if (c->max_depth < 0 || c->max_depth > MAX_DEPTH || c->big_permille < 0 ||
        c->big_permille > 70) {
        return -1;
    }
    return 0;
}

/* DIR/h<rank> for --hashes; exits with a message when it cannot be created. */
static void hashes_open(ctx_t *c)
{
    char path[4096];
    if (!c->hash_dir) {
        return;
    }
    snprintf(path, sizeof(path), "%s/h%d", c->hash_dir, c->rank);
    c->hashes = fopen(path, "w");
    if (!c->hashes) {
        fprintf(stderr, "rank %d: cannot create %s: %s\n", c->rank, path, strerror(errno));
        exit(2);
    }
}

/* Every case of the run, each epoch on its own tree. */
#ifndef DIFFTEST_MPI
/* ---------------------------------------------------------------------------------------------- */
/* Disagreements                                                                                  */
/* ---------------------------------------------------------------------------------------------- */

enum { D_COUNT, D_DTYPE, D_OP, D_ROOT, D_COLL, D_NULL, D_ALGO, D_COMP, ND };
static const char *const dis_names[ND] = {"count",      "dtype", "op",        "root",
                                          "collective", "NULL",  "algorithm", "compressor"};
enum { DP_BLOCK, DP_WAIT, DP_FORCED, DP_PRIO, DP_COMP, NDP };
static const char *const dpath_names[NDP] = {"blocking", "non-blocking", "forced", "priority",
                                             "compressed"};

static int is_reduction(int coll)
{
    return coll == MR_ALLREDUCE || coll == MR_REDUCE_SCATTER || coll == MR_REDUCE;
}

static int sched_kind(int coll)
{
    return coll == MR_ALLREDUCE || coll == MR_REDUCE_SCATTER || coll == MR_ALLGATHER;
}

/* Another value than v in [0, m). */
static int other(uint64_t *s, int v, int m)
{
    return (v + 1 + (int)below(s, (uint64_t)m - 1)) % m;
}

/* After case k, now and then: one call on a fresh communicator whose ranks disagree. */
static void run_mismatch(ctx_t *c, uint64_t k)
{
    uint64_t s = mr_hash3(c->seed, k, 0xd15a);
    if (c->size < 2 || below(&s, MISMATCH_EVERY) != 0) {
        return;
    }
    /* The plan, the same on every rank. */
    int n = c->size;
    int coll = (int)below(&s, MR_NCOLL + 1); /* MR_NCOLL: barrier */
    int path = (int)below(&s, NDP);
    int dis = coll == MR_NCOLL ? D_COLL : (int)below(&s, ND);
    if ((dis == D_OP && !is_reduction(coll)) ||
        (dis == D_ROOT && coll != MR_BROADCAST && coll != MR_REDUCE)) {
        dis = D_COUNT;
    }
    if (path == DP_COMP && coll != MR_ALLREDUCE && coll != MR_REDUCE_SCATTER) {
        path = DP_WAIT;
    }
    if (path == DP_FORCED && (coll == MR_NCOLL || c->nalgo[coll] == 0)) {
        path = DP_WAIT;
    }
    /* The same call run differently: another algorithm forced (with or without a priority), or
     * another compressor (or none; with or without a priority) on the differing ranks. */
    int no_shm = strcmp(c->transport, "shm") != 0; /* shared-memory collectives may be absent */
    const char *algos[MAX_ALGOS]; /* coll's algorithms that can run here */
    int nalgos = 0;
    for (int i = 0; coll < MR_NCOLL && i < c->nalgo[coll]; i++) {
        if (!no_shm || strcmp(c->algo[coll][i], "shm") != 0) {
            algos[nalgos++] = c->algo[coll][i];
        }
    }
    if ((dis == D_ALGO && nalgos < 2) ||
        (dis == D_COMP && coll != MR_ALLREDUCE && coll != MR_REDUCE_SCATTER)) {
        dis = D_COUNT;
    }
    if ((dis == D_ALGO && path != DP_PRIO) || (dis == D_COMP && path != DP_PRIO)) {
        path = dis == D_ALGO ? DP_FORCED : DP_COMP;
    }
    const char *algo = NULL;
    int ialgo = 0;
    if (dis == D_ALGO) {
        ialgo = (int)below(&s, (uint64_t)nalgos);
        algo = algos[ialgo];
    } else if (path == DP_FORCED) {
        algo = c->algo[coll][below(&s, (uint64_t)c->nalgo[coll])];
        if (strcmp(algo, "shm") == 0 && no_shm) {
            path = DP_WAIT; /* refused alike on every rank without shm: no disagreement */
        }
    }
    tempo_dtype_t dt = (tempo_dtype_t)below(&s, TEMPO_DTYPE_COUNT);
    tempo_op_t op = (tempo_op_t)below(&s, TEMPO_OP_COUNT);
    if (path == DP_COMP || dis == D_COMP) { /* what compressors take; others are refused alike */
        dt = TEMPO_FLOAT32;
        op = below(&s, 2) ? TEMPO_AVG : TEMPO_SUM;
    }
    size_t count = 1 + below(&s, below(&s, 4) ? 64 : 4096);
    int root = (int)below(&s, (uint64_t)n);
    int comp = (int)below(&s, NCOMP);
    uint64_t tag = rnd(&s) >> 1;
    int key = (int)(mr_hash3(s, (uint64_t)c->rank, 1) >> 33); /* a random order of the ranks */
    /* Which ranks (of the new communicator) differ: a nonempty subset, never all. */
    int differs[MAX_N] = {0}, ndiff = 1 + (int)below(&s, (uint64_t)n - 1);
    for (int i = 0; i < ndiff;) {
        int r = (int)below(&s, (uint64_t)n);
        i += !differs[r];
        differs[r] = 1;
    }
    uint64_t sv = rnd(&s); /* the differing values: drawn per rank from this */
    char what[256];
    snprintf(what, sizeof(what),
             "disagreement after case %" PRIu64 ": %s %s (%zu x %s %s, root %d), %d of %d ranks "
             "differ in the %s",
             k, dpath_names[path], coll == MR_NCOLL ? "barrier" : mr_coll_name(coll), count,
             tempo_dtype_name(dt), tempo_op_name(op), root, ndiff, n, dis_names[dis]);
    if (dis == D_ALGO || dis == D_COMP) {
        snprintf(what + strlen(what), sizeof(what) - strlen(what), " (the others': %s)",
                 dis == D_ALGO ? algo : comp_specs[comp]);
    }

    tempo_comm_t nc = NULL;
    int size, me;
    if (comm_split(c, c->world, 0, key, k, what, &nc, &size, &me) != 0) {
        c->fatal = 1;
        return;
    }
    /* This rank's call. */
    int mycoll = coll, myroot = root, rejects = 0;
    const char *myalgo = algo;
    tempo_compressor_t mycomp = c->comp[comp];
    size_t mycount = count;
    tempo_dtype_t mydt = dt;
    tempo_op_t myop = op;
    int null_send = 0, null_recv = 0;
    if (differs[me]) {
        uint64_t t = mr_hash3(sv, (uint64_t)me, 2);
        switch (dis) {
        case D_COUNT: mycount = below(&t, 3) == 0 ? 0 : count + 1 + below(&t, 5); break;
        case D_DTYPE: mydt = (tempo_dtype_t)other(&t, (int)dt, TEMPO_DTYPE_COUNT); break;
        case D_OP: myop = (tempo_op_t)other(&t, (int)op, TEMPO_OP_COUNT); break;
        case D_ROOT: myroot = other(&t, root, n); break;
        case D_ALGO: myalgo = algos[other(&t, ialgo, nalgos)]; break;
        case D_COMP: {
            /* Another kind: "none" runs uncompressed, as no compressor does (either, drawn). */
            int myc = other(&t, comp, NCOMP);
            mycomp = myc == 0 && below(&t, 2) ? NULL : c->comp[myc];
            break;
        }
        case D_COLL:
            if (path == DP_PRIO) { /* scheduled against scheduled, ordered against ordered */
                do {
                    mycoll = (int)below(&t, MR_NCOLL + 1);
                } while (mycoll == coll || sched_kind(mycoll) != sched_kind(coll));
            } else {
                mycoll = other(&t, coll, MR_NCOLL + 1);
            }
            break;
        default: /* D_NULL: a buffer this rank must pass */
            if (mycoll == MR_BROADCAST) {
                null_recv = me != root || below(&t, 2);
                null_send = !null_recv;
            } else if (mycoll == MR_REDUCE) {
                null_send = me != root || below(&t, 2);
                null_recv = !null_send;
            } else {
                null_send = (int)below(&t, 2);
                null_recv = !null_send;
            }
            rejects = 1;
            break;
        }
    }
    /* A compressor takes float32 sum and avg only; a rank that passes another dtype or op (or
     * that calls a collective it ignores) refuses its own call. */
    if (path == DP_COMP && (mydt != TEMPO_FLOAT32 || (myop != TEMPO_SUM && myop != TEMPO_AVG)) &&
        (mycoll == MR_ALLREDUCE || mycoll == MR_REDUCE_SCATTER)) {
        rejects = 1;
    }
    size_t cap = (count + 8) * (size_t)n * 8 + 64;
    uint8_t *sb = malloc(cap), *rb = malloc(cap);
    for (size_t i = 0; i < cap; i++) {
        sb[i] = (uint8_t)(i * 13 + (size_t)me);
    }
    mr_call_t call = {mycoll == MR_NCOLL ? MR_ALLREDUCE : mycoll, NULL, null_send ? NULL : sb,
                      null_recv ? NULL : rb, mycount, mydt, myop, myroot};
    tempo_attr_t attr;
    memset(&attr, 0, sizeof(attr));
    if ((path == DP_FORCED || (path == DP_PRIO && dis == D_ALGO)) && mycoll == coll) {
        attr.field_mask = TEMPO_ATTR_ALGORITHM;
        attr.algorithm = myalgo;
    }
    if (path == DP_PRIO) {
        attr.field_mask |= TEMPO_ATTR_PRIORITY | TEMPO_ATTR_TAG;
        attr.priority = (int)below(&s, 8);
        attr.tag = tag;
    }
    if ((path == DP_COMP || (path == DP_PRIO && dis == D_COMP)) && mycomp) {
        attr.field_mask |= TEMPO_ATTR_COMPRESSOR;
        attr.compressor = mycomp;
    }
    tempo_status_t st;
    if (path == DP_BLOCK) {
        st = mycoll == MR_NCOLL ? tempo_barrier(nc) : mr_call_blocking(nc, &call);
    } else {
        tempo_request_t req = NULL;
        st = mycoll == MR_NCOLL ? tempo_ibarrier(nc, &attr, &req) : mr_post(nc, &call, &attr, &req);
        if (st == TEMPO_OK) {
            st = tempo_wait(&req);
        }
    }
    char m1[512];
    snprintf(m1, sizeof(m1), "%s", mr_errtext(nc, st));
    tempo_status_t st2 = tempo_barrier(nc);
    char m2[512];
    snprintf(m2, sizeof(m2), "%s", mr_errtext(nc, st2));
    char why[1400];
    int ok = 1;
    if (st == TEMPO_OK || st == TEMPO_ERR_TIMEOUT || st == TEMPO_ERR_REMOTE) {
        ok = 0;
        snprintf(why, sizeof(why), "its call (%s%s) returned %s, where it must fail", 
                 differs[me] ? "a differing rank" : "an agreeing rank",
                 rejects ? ", rejecting its own arguments" : "", m1);
    } else if (!rejects && (st != TEMPO_ERR_INVALID || (!strstr(m1, "ranks disagree") &&
                                                        !strstr(m1, "rejected its")))) {
        ok = 0;
        snprintf(why, sizeof(why), "its call returned %s, not TEMPO_ERR_INVALID naming the "
                 "disagreement", m1);
    } else if (st2 != TEMPO_ERR_INVALID || !strstr(m2, "ranks disagree")) {
        ok = 0;
        snprintf(why, sizeof(why), "its call returned %s; the barrier after it returned %s, "
                 "where it must fail with the news", m1, m2);
    } else if ((dis == D_ALGO && !strstr(m1, "algorithm")) ||
               (dis == D_COMP && !strstr(m1, "compressor"))) {
        ok = 0;
        snprintf(why, sizeof(why), "its call returned %s, which does not name the %s", m1,
                 dis_names[dis]);
    }
    if (ok) {
        c->pass[G_MISMATCH]++;
    } else {
        char w2[400];
        snprintf(w2, sizeof(w2), "%s (comm rank %d)", what, me);
        fail(c, G_MISMATCH, k, w2, why);
        if (st == TEMPO_ERR_TIMEOUT || st == TEMPO_ERR_REMOTE) {
            c->fatal = 1; /* the job may be unusable */
        }
    }
    free(sb);
    free(rb);
    tempo_comm_destroy(nc);
}
#endif

static void run_cases(ctx_t *c)
{
    static case_t cs;
    uint64_t epoch = UINT64_MAX;
    for (uint64_t k = c->first; k < c->first + c->ncases && !c->fatal; k++) {
        if (k / EPOCH != epoch) {
            tree_destroy(c);
            epoch = k / EPOCH;
            tree_build(c, epoch, k);
            if (c->fatal) {
                break;
            }
        }
        gen_case(c, k, &cs);
#ifdef DIFFTEST_MPI
        run_mpi(c, &cs);
#else
        if (cs.batch) {
            run_batch(c, &cs);
        } else {
            run_single(c, &cs);
        }
        if (!c->fatal) {
            run_mismatch(c, k);
        }
#endif
        c->cases_run++;
    }
}

static int setup(ctx_t *c)
{
    if (c->size > MAX_N) {
        fprintf(stderr, "difftest: more than %d ranks\n", MAX_N);
        return -1;
    }
    load_algos(c);
    hashes_open(c);
    c->A = malloc(BIG_BYTES + A_SLACK);
    if (!c->A) {
        fprintf(stderr, "out of memory\n");
        return -1;
    }
    for (size_t g = 0; g < BIG_BYTES + A_SLACK; g++) {
        c->A[g] = (uint8_t)(mr_mix64(g ^ c->seed) >> 60);
    }
    return 0;
}

#ifdef DIFFTEST_MPI
int main(int argc, char **argv)
{
    static ctx_t ctx;
    ctx_t *c = &ctx;
    int list = 0;
    if (parse_args(c, argc, argv, &list) != 0 || list || !c->hash_dir) {
        fprintf(stderr,
                "usage: %s --hashes DIR [--seed S] [--cases N] [--first K] [--case K] "
                "[--max-depth 0-%d] [--big PERMILLE (0-70)] [--comp-avg 0|1]\n",
                argv[0], MAX_DEPTH);
        return 2;
    }
    MPI_Init(&argc, &argv);
    c->world = MPI_COMM_WORLD;
    MPI_Comm_rank(c->world, &c->rank);
    MPI_Comm_size(c->world, &c->size);
    if (setup(c) != 0) {
        MPI_Abort(c->world, 2);
    }
    run_cases(c);
    if (c->fatal) {
        fflush(c->hashes);
        MPI_Abort(c->world, 1); /* the tree is not what tree_plan said: reported above */
    }
    tree_destroy(c);
    fclose(c->hashes);
    long skipped = 0;
    for (int g = 0; g < NGROUPS; g++) {
        skipped += c->skip[g];
    }
    fprintf(stderr,
            "difftest_mpi rank %d: seed 0x%016" PRIx64 ", %ld cases, %ld operations, %ld "
            "skipped\n",
            c->rank, c->seed, c->cases_run, c->ops_run, skipped);
    free(c->A);
    MPI_Finalize();
    return 0;
}
#else
int main(int argc, char **argv)
{
    static ctx_t ctx;
    ctx_t *c = &ctx;
    int list = 0;
    if (parse_args(c, argc, argv, &list) != 0 || (!list && !c->dir)) {
        fprintf(stderr,
                "usage: %s --list | --out DIR [--seed S] [--cases N] [--first K] [--case K] "
                "[--max-depth 0-%d] [--big PERMILLE (0-70)] [--comp-avg 0|1] [--transport NAME] "
                "[--hashes DIR]\n",
                argv[0], MAX_DEPTH);
        return 2;
    }
    if (list) {
        for (int g = 0; g < NGROUPS; g++) {
            printf("%s\n", group_names[g]);
        }
        return 0;
    }
    tempo_status_t st = tempo_comm_init_env(&c->world);
    if (st != TEMPO_OK) {
        fprintf(stderr, "tempo_comm_init_env: %s\n", mr_errtext(NULL, st));
        return 1;
    }
    c->rank = tempo_comm_rank(c->world);
    c->size = tempo_comm_size(c->world);
    mr_out_open(&c->out, c->dir, c->rank);
    if (setup(c) != 0) {
        mr_result(&c->out, group_names[G_SPLIT], "FAIL", "setup failed (see stderr)");
        mr_out_close(&c->out);
        return 1;
    }
    for (int i = 0; i < NCOMP; i++) {
        st = tempo_compressor_create(comp_specs[i], &c->comp[i]);
        if (st != TEMPO_OK) {
            fprintf(stderr, "tempo_compressor_create(%s): %s\n", comp_specs[i],
                    mr_errtext(NULL, st));
            return 1;
        }
    }
    run_cases(c);
    if (c->fatal) {
        for (int g = 0; g < NGROUPS; g++) {
            if (c->fail[g]) {
                mr_result(&c->out, group_names[g], "FAIL", "%ld failed; first: %s", c->fail[g],
                          c->first_fail[g]);
            }
        }
        fprintf(stderr, "rank %d: stopping after a fatal error\n", c->rank);
        fflush(c->out.f);
        if (c->hashes) {
            fflush(c->hashes);
        }
        _exit(1); /* the job is unusable; the launcher ends the other ranks */
    }
    tree_destroy(c);
    for (int i = 0; i < NCOMP; i++) {
        tempo_compressor_destroy(c->comp[i]);
    }
    st = tempo_comm_destroy(c->world);
    if (st != TEMPO_OK) {
        char why[700];
        snprintf(why, sizeof(why), "tempo_comm_destroy: %s", mr_errtext(NULL, st));
        fail(c, G_SPLIT, c->first + c->ncases, "destroy", why);
    }
    for (int g = 0; g < NGROUPS; g++) {
        if (c->fail[g]) {
            mr_result(&c->out, group_names[g], "FAIL", "%ld of %ld failed; first: %s", c->fail[g],
                      c->fail[g] + c->pass[g] + c->skip[g], c->first_fail[g]);
        } else if (c->pass[g] || !c->skip[g]) {
            mr_result(&c->out, group_names[g], "PASS", "%ld checks, %ld refused (allowed)",
                      c->pass[g], c->skip[g]);
        } else {
            mr_result(&c->out, group_names[g], "SKIP", "%ld refused with TEMPO_ERR_UNSUPPORTED",
                      c->skip[g]);
        }
    }
    fprintf(stderr, "difftest rank %d: seed 0x%016" PRIx64 ", %ld cases, %ld operations\n", c->rank,
            c->seed, c->cases_run, c->ops_run);
    mr_out_close(&c->out);
    if (c->hashes) {
        fclose(c->hashes);
    }
    free(c->A);
    return 0; /* failures are in the result files; an early exit would end the other ranks */
}
#endif
