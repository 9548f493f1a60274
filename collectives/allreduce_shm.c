/*
 * allreduce_shm.c — all-reduce through a shared-memory region, for communicators whose ranks are
 * all on one host. On one rank it is a copy (one_rank()). Otherwise two protocols:
 *
 *  small   (bytes <= SMALL_MAX): each rank copies its input into its slot (two slots, alternating
 * by operation parity) and publishes a counter; once every counter has arrived, every rank folds
 * all slots in rank order into its result. One synchronisation, no messages. Slot reuse is safe: a
 * rank writes slot k&1 for operation k only after it has seen every rank publish operation k-1, and
 * a rank publishes k-1 only after it finished reading k-2.
 *
 *  staged  (larger, where direct is not possible): the buffer is cut into segments of
 *          TEMPO_SHM_COLL_BYTES. For each segment g every rank (1) copies its input segment, except its own block, into its staging area
 *          in[g&1] and publishes in = g+1, (2) when all inputs are there, reduces its block of the
 *          segment from all ranks' staging areas and its own send buffer (rank order) into
 *          out[g&1] and publishes red = g+1, (3) when all blocks are reduced, copies every block
 *          into its result (with streaming stores for large results) and publishes done = g+1.
 *          Areas are double-buffered, so segment g+1 is copied in while g is being reduced:
 *            in[g&1]  may be rewritten once every rank has red >= g-1 (finished reading g-2),
 *            out[g&1] may be rewritten once every rank has done >= g-1 (finished copying g-2).
 *          Segments are numbered across operations, so these rules also hold between operations.
 *          Everything a peer reads lives in the shared region, never in a private buffer, so an
 *          operation is complete as soon as this rank has its result. Per rank it moves about
 *          4.5 S bytes (S the vector's) where 2.5 S are necessary.
 *
 *  direct  (bytes >= DIRECT_MIN, when every rank can read every peer's memory with
 *          process_vm_readv): every rank publishes where its send and receive buffers are; for each
 *          segment it reads the peers' parts of its block from their send buffers (one system call
 *          each, into a private buffer that stays in cache), reduces its block in rank order
 *          straight into its result and publishes red; once every rank has reduced the segment it
 *          reads the other blocks from their owners' results into its own and publishes done. That
 *          is the 2.5 S. The operation completes when every peer has done every segment, since
 *          peers read this rank's buffers until then. Whether the ranks can (ptrace permission:
 *          same uid, Yama ptrace_scope, dumpable, no seccomp filter, one pid namespace) is probed
 *          once per communicator, at its first large operation, and agreed (any rank that cannot
 *          makes all copy through the region: staged, with an INFO log); TEMPO_SHM_CMA=0 turns it
 *          off. A read that fails later (the peer exited) fails the operation with
 *          TEMPO_ERR_REMOTE; nothing read is ever used without every rank's signature first.
 *
 *  window  (larger than small, when the send and receive buffers lie in tempo_mem_alloc memory of
 *          this communicator: collectives/mem.c, mapped by every rank of the host): the direct
 *          protocol without the kernel. The published buffer words name the window (its id, the
 *          same on every rank) and the offset; each rank reads the peers' blocks with loads from
 *          its mappings of their memory, reduces in rank order straight into its result and copies
 *          the other blocks from the owners' results: about 2.5 S moved per rank, no system call,
 *          no private copy. The choice is each rank's own (where its buffers are), so it is in the
 *          signature (SIG_WIN): a rank whose buffers are in a window while a peer's are not fails
 *          with TEMPO_ERR_INVALID on every rank, found as soon as every rank published its first
 *          segment (both protocols publish one early), before anything is read.
 *
 * Every rank computes each result element with the same fold in rank order (small: redundantly on
 * every rank; staged, direct and window: once, by the block's owner, with the same blocks and
 * segments), so results are bitwise identical on all ranks, from run to run, and between the
 * protocols.
 * fp16/bf16 accumulate in fp32 and round once.
 *
 * Operations using the region run one at a time per communicator, in the order they started, as
 * every rank starts the same sequence: a FIFO of waiting operations, whose head starts when the
 * running one finishes. Waiting operations are parked (tempo__op_park): the engine does not poll
 * them, so a queue of N operations costs O(N) in all, not O(N) per progress pass, and their
 * TEMPO_TIMEOUT starts only when their turn comes. Waiting on a peer's counter is polling: the
 * engine yields or sleeps when nothing moves (a rank that publishes a counter rings the doorbell
 * of the peers that sleep: transport/shm.c), and a dead peer is noticed through its tcp
 * connection.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "collectives/coll.h"
#include "core/cfg.h"
#include "topo/host.h"

#define SMALL_MAX 8192
/* The direct protocol from this size up (bytes of the vector): below it, the two system calls per
 * segment cost more than the copies they save (measured on the development machine). */
#define DIRECT_MIN (64 * 1024)
/* Window operations (buffers in tempo_mem_alloc memory) read the peers' buffers with loads, no
 * system call: direct from the first size above the small protocol. */
#define WIN_MIN (SMALL_MAX + 1)
/* In a published signature's valid byte: the operation is a window operation. */
#define SIG_WIN 0x80u
/* In a published buffer word (bufs_slot_t) of a window operation: the window's id + 1 in the top
 * 16 bits, the offset in it below (user-space addresses of the CMA protocol have them clear). */
#define WIN_SHIFT 48
#define WIN_WORD(id, off) (((uint64_t)(id) + 1) << WIN_SHIFT | (uint64_t)(off))
/* Results are written with streaming stores when the host's working set (every rank's send and
 * receive buffers, one buffer per rank in place) exceeds the last-level cache: then the result
 * would not stay cached anyway, and bypassing the cache doubles the write bandwidth. Smaller
 * results stay in the cache, where the caller, or the next operation in place, reads them soon. */
static int use_stream(const tempo__op_t *op, int n)
{
    size_t bytes = op->count * tempo_dtype_size(op->dtype);
    size_t per_rank = op->sendbuf == op->recvbuf ? bytes : 2 * bytes;
    return per_rank > tempo__host_llc_bytes() / (size_t)n;
}

/* Signatures (tempo__sig_t: what every rank must agree on). Every rank compares all of its peers'
 * with its own before it reads any of their data, so ranks whose calls differ fail (core/check.c)
 * instead of folding mismatched buffers. A signature is written before the counter that
 * publishes the operation:
 *   small:  in slot k & 1 of the rank's small counter line (flag_t.sig), k the small operation
 *           number, written right after the data and right before the counter, so that the line
 *           moves once to the writer and once to each reader, as the counter alone would;
 *   staged: in slot j & 1 of the rank's signature line, j the region's operation number (its
 *           first counter is published a whole segment copy later: a write into a line that
 *           peers poll that long before the counter would move the line once more).
 * Two slots suffice: a rank starts small operation k + 2 (operation j + 2) only after every rank
 * finished k (j). The small signatures are not kept in the data slots: data slots start on a page
 * (a header before the data made the 8 KiB all-reduce 6-8 % slower in this machine's slow state,
 * measured; data 64-byte aligned after a 64-byte header was no better). */
typedef struct {
    uint64_t opno; /* j + 1 once the fields below hold operation j's signature */
    /* tempo__sig_t without how (every rank that publishes here runs this algorithm, uncompressed),
     * so that two slots and the counter share one cache line. */
    uint64_t count;
    int32_t root;
    uint8_t coll, dtype, redop, valid;
} sig_slot_t;

/* A counter on a cache line of its own. The small counter's line also carries the small
 * operations' signatures (sig, slot k & 1), written just before the counter: a peer that sees the
 * counter move has the signature in the same line, so the check costs no cache-line transfer of
 * its own (a separate signature line, written every operation, made the 64-byte all-reduce 14 %
 * and the 8 KiB one 4 % slower than before the checks in this machine's slow state, measured: one
 * more line crossing cores per operation, on top of the counter's and the data's). The other
 * counters leave sig unused. */
typedef struct {
    _Atomic uint64_t v;
    sig_slot_t sig[2];
    char pad[TEMPO_CACHELINE - sizeof(uint64_t) - 2 * sizeof(sig_slot_t)];
} flag_t;

typedef struct {
    sig_slot_t s[2];
    char pad[TEMPO_CACHELINE - 2 * sizeof(sig_slot_t)];
} sigs_t;

/* Cross-memory attach (process_vm_readv) between the ranks: each rank says at creation where its
 * own line is in its address space, and answers once whether it could read every peer's. */
typedef struct {
    _Atomic uint64_t verdict; /* 0: not tried yet, CMA_OK, CMA_NO (first: wait_for() reads it) */
    _Atomic uint64_t hello;   /* 1 once pid, addr and nonce below are written */
    uint64_t pid;             /* getpid() of the rank (its own pid namespace's, as CMA wants) */
    uint64_t addr;            /* this line's address in the rank's own mapping */
    uint64_t nonce;           /* random: a read of another process at addr cannot match */
    char pad[TEMPO_CACHELINE - 5 * sizeof(uint64_t)];
} cma_line_t;
#define CMA_OK 1
#define CMA_NO 2

/* Direct operations: where this rank's buffers are, in its address space (slot j & 1 of the
 * region's operation j, written before the counter that starts the operation). */
typedef struct {
    uint64_t opno; /* j + 1 once send and recv are operation j's */
    uint64_t send, recv;
} bufs_slot_t;
typedef struct {
    bufs_slot_t b[2];
    char pad[TEMPO_CACHELINE - 2 * sizeof(bufs_slot_t)];
} bufs_t;

typedef struct {
    flag_t small; /* small operations published */
    flag_t in;    /* segments copied in (direct: every segment of the operation, at its start) */
    flag_t red;   /* segments reduced */
    flag_t done;  /* segments copied out */
    sigs_t sigs;  /* staged and direct operations' signatures */
    cma_line_t cma;
    bufs_t bufs;
} ctl_t;

struct tempo__shm_coll {
    tempo__shm_region_t region;
    int n, me;
    size_t stage;      /* bytes of a segment (per rank, per buffer) */
    size_t outsz;      /* bytes of a reduced block (per rank, per buffer) */
    ctl_t *ctl;        /* (n) */
    char *small;       /* (n, 2, SMALL_MAX), page-aligned */
    char *in;          /* (n, 2, stage) */
    char *out;         /* (n, 2, outsz) */
    const void **srcs; /* (n) scratch: the operands of a fold */
    tempo__world_t *world;
    const int *wranks; /* (n) the communicator's world ranks, for the doorbell */
    uint64_t nsmall;   /* small operations started (same on every rank) */
    uint64_t nseg;     /* segments started (same on every rank) */
    uint64_t nops;     /* operations started (same on every rank) */
    tempo__list_t queue; /* shm_op_t not yet started, in start order (every rank's same order) */
    int running;         /* an operation has started and not finished */
    int broken;          /* an operation was cancelled while running: the region is out of step */
    tempo__list_t spare; /* released shm_op_t kept for reuse (at most SPARE_MAX): an 8-byte
                          * all-reduce then allocates nothing (calloc + free were a tenth of it) */
    int nspare;
    int direct;        /* -1 not known yet; 1: every rank reads every peer (CMA), 0: it cannot */
    int said_win;      /* the first window operation was logged */
    char *tmp;         /* (n, outsz) private: peers' blocks of a direct segment, and in place
                        * this rank's own when the fold would overwrite it first */
};
#define SPARE_MAX 64

typedef struct {
    tempo__shm_coll_t *sc;
    tempo__op_t *op;
    tempo__list_t qlink; /* on sc->queue until it starts */
    int started;
    int finished;
    int small;
    uint64_t k; /* small: operation number */
    uint64_t opno; /* operation number among all of the region's */
    int checked;   /* the peers' signatures were compared */
    size_t esize;
    size_t seg_elems; /* elements per segment */
    size_t nseg;
    uint64_t g0; /* global number of the first segment */
    size_t next_in, next_red, next_out;
    int stream_out; /* write the result with streaming stores */
    int direct;     /* large enough for the direct protocol, if the ranks can use it */
    int win;        /* direct through tempo_mem_alloc memory: both buffers are in it */
    const tempo__mem_win_t *swin, *rwin; /* (win) the windows of sendbuf and recvbuf */
} shm_op_t;

static inline uint64_t ld(flag_t *f)
{
    return atomic_load_explicit(&f->v, memory_order_acquire);
}
/* Publish this rank's counter, and wake the peers that sleep waiting for it (the shm doorbell). */
static inline void publish(tempo__shm_coll_t *sc, flag_t *f, uint64_t v)
{
    atomic_store_explicit(&f->v, v, memory_order_release);
    tempo__shm_published(sc->world, sc->wranks, sc->n);
}

static inline char *small_slot(tempo__shm_coll_t *sc, int rank, uint64_t k)
{
    return sc->small + ((size_t)rank * 2 + (size_t)(k & 1)) * SMALL_MAX;
}
static inline char *in_area(tempo__shm_coll_t *sc, int rank, uint64_t g)
{
    return sc->in + ((size_t)rank * 2 + (size_t)(g & 1)) * sc->stage;
}
static inline char *out_area(tempo__shm_coll_t *sc, int rank, uint64_t g)
{
    return sc->out + ((size_t)rank * 2 + (size_t)(g & 1)) * sc->outsz;
}

/* Index of the first rank whose counter is below want, or -1 if all have reached it. */
static int lagging(tempo__shm_coll_t *sc, size_t field, uint64_t want)
{
    for (int q = 0; q < sc->n; q++) {
        flag_t *f = (flag_t *)((char *)&sc->ctl[q] + field);
        if (ld(f) < want) {
            return q;
        }
    }
    return -1;
}

tempo_status_t tempo__shm_coll_create(struct tempo_comm *comm, tempo__shm_coll_t **shm_p)
{
    int n = comm->size;
    tempo__shm_coll_t *sc = tempo__calloc(1, sizeof(*sc), "shm collectives");
    if (!sc) {
        return TEMPO_ERR_NOMEM;
    }
    sc->n = n;
    sc->me = comm->rank;
    sc->world = comm->world;
    sc->wranks = comm->ranks;
    tempo__list_init(&sc->queue);
    tempo__list_init(&sc->spare);
    sc->srcs = tempo__calloc((size_t)n, sizeof(*sc->srcs), "shm fold operands");
    if (!sc->srcs) {
        tempo__free(sc);
        return TEMPO_ERR_NOMEM;
    }
    sc->stage = tempo__cfg.shm_coll_bytes; /* a multiple of TEMPO_CACHELINE, 4K-1G (core/cfg.c) */
    sc->outsz = TEMPO_ALIGN_UP(sc->stage / (size_t)n + 8, TEMPO_CACHELINE);
    size_t ctl = TEMPO_ALIGN_UP(sizeof(ctl_t) * (size_t)n, 4096);
    size_t small = (size_t)n * 2 * SMALL_MAX;
    size_t in = (size_t)n * 2 * sc->stage;
    size_t out = (size_t)n * 2 * sc->outsz;
    tempo_status_t st = tempo__shm_region_create(comm, ctl + small + in + out, NULL, &sc->region);
    if (st != TEMPO_OK) {
        tempo__free(sc->srcs);
        tempo__free(sc);
        return st;
    }
    char *base = sc->region.base;
    sc->ctl = (ctl_t *)base;
    sc->small = base + ctl;
    sc->in = sc->small + small;
    sc->out = sc->in + in;
    sc->direct = tempo__cfg.shm_cma && tempo__cfg.shm_direct ? -1 : 0;
    cma_line_t *c = &sc->ctl[sc->me].cma;
    c->pid = (uint64_t)getpid();
    c->addr = (uint64_t)(uintptr_t)c;
    c->nonce = tempo__now_ns() ^ ((uint64_t)(uintptr_t)sc << 20) ^ c->pid;
    atomic_store_explicit(&c->hello, 1, memory_order_release);
    *shm_p = sc;
    return TEMPO_OK;
}

void tempo__shm_coll_destroy(tempo__shm_coll_t *sc)
{
    if (sc) {
        while (!tempo__list_empty(&sc->spare)) {
            tempo__list_t *e = sc->spare.next;
            tempo__list_remove(e);
            tempo__free(tempo__container_of(e, shm_op_t, qlink));
        }
        tempo__shm_region_destroy(&sc->region);
        tempo__free(sc->tmp);
        tempo__free(sc->srcs);
        tempo__free(sc);
    }
}

/* Waiting for rank q's counter at field to reach want: TEMPO_INPROGRESS, or an error when q has
 * left the job (destroyed its last communicator) without getting there, so it never will. The
 * counter is read again after the goodbye was seen, since q published it before saying goodbye. */
static tempo_status_t wait_for(tempo__op_t *op, int q, size_t field, uint64_t want)
{
    tempo__world_t *w = op->comm->world;
    op->wait_peer = q;
    if (TEMPO_UNLIKELY(w->peers[tempo__wrank(op->comm, q)].left)) {
        tempo__shm_coll_t *sc = ((shm_op_t *)op->priv)->sc;
        if (ld((flag_t *)((char *)&sc->ctl[q] + field)) < want) {
            char desc[160];
            return tempo__op_fail(
                op, TEMPO_ERR_REMOTE,
                "%s has left (destroyed its communicator) while this operation "
                "needed it",
                tempo__peer_desc(w, tempo__wrank(op->comm, q), desc, sizeof(desc)));
        }
    }
    return TEMPO_INPROGRESS;
}

/* Where rank publishes the signature of operation so (see sigs_t). */
static sig_slot_t *sig_slot(shm_op_t *so, int rank)
{
    if (so->small) {
        return &so->sc->ctl[rank].small.sig[so->k & 1];
    }
    return &so->sc->ctl[rank].sigs.s[so->opno & 1];
}

/* Before the operation's first counter is published (which orders it for the readers). */
static void publish_sig(tempo__op_t *op, shm_op_t *so)
{
    sig_slot_t *g = sig_slot(so, so->sc->me);
    g->opno = so->opno + 1;
    g->count = op->sig.count;
    g->root = op->sig.root;
    g->coll = op->sig.coll;
    g->dtype = op->sig.dtype;
    g->redop = op->sig.redop;
    g->valid = (uint8_t)(op->sig.valid | (so->win ? SIG_WIN : 0));
}

/* Every peer has published its first counter of this operation: compare their signatures with
 * this rank's before touching their data. */
static tempo_status_t check_sigs(tempo__op_t *op, shm_op_t *so)
{
    tempo__shm_coll_t *sc = so->sc;
    for (int q = 0; q < sc->n && !so->checked; q++) {
        if (q == sc->me) {
            continue;
        }
        const sig_slot_t *g = sig_slot(so, q);
        tempo__sig_t theirs = op->sig;
        theirs.count = g->count;
        theirs.root = g->root;
        theirs.coll = g->coll;
        theirs.dtype = g->dtype;
        theirs.redop = g->redop;
        theirs.valid = g->valid & ~SIG_WIN;
        if (g->opno != so->opno + 1 || !tempo__sig_equal(&theirs, &op->sig)) {
            return tempo__op_mismatch(op, q, &theirs);
        }
        if (!(g->valid & SIG_WIN) != !so->win) {
            char desc[160];
            tempo__world_t *w = op->comm->world;
            return tempo__op_fail(
                op, TEMPO_ERR_INVALID,
                "all-reduce: %s's buffers are %s tempo_mem_alloc memory of this communicator, "
                "this rank's %s: all ranks or none",
                tempo__peer_desc(w, tempo__wrank(op->comm, q), desc, sizeof(desc)),
                so->win ? "not in" : "in", so->win ? "are" : "are not");
        }
    }
    so->checked = 1;
    return TEMPO_OK;
}

static tempo_status_t progress_small(tempo__op_t *op, shm_op_t *so)
{
    tempo__shm_coll_t *sc = so->sc;
    int q = lagging(sc, offsetof(ctl_t, small), so->k + 1);
    if (q >= 0) {
        return wait_for(op, q, offsetof(ctl_t, small), so->k + 1);
    }
    TEMPO_CHECK(check_sigs(op, so));
    for (int r = 0; r < sc->n; r++) {
        sc->srcs[r] = small_slot(sc, r, so->k);
    }
    tempo__reduce_n(op->recvbuf, sc->srcs, sc->n, op->count, op->dtype, op->redop);
    return TEMPO_OK;
}

/* Elements of segment i of the operation. */
static size_t seg_count(const tempo__op_t *op, const shm_op_t *so, size_t i)
{
    size_t off = i * so->seg_elems;
    return TEMPO_MIN(so->seg_elems, op->count - off);
}

/* After a progress pass: tell the engine when it moved anything (its deadline starts again). */
static void progressed(tempo__op_t *op, int any)
{
    if (any) {
        tempo__engine_note_event(op->comm->world);
        tempo__op_progressed(op);
    }
}

static tempo_status_t progress_staged(tempo__op_t *op, shm_op_t *so)
{
    tempo__shm_coll_t *sc = so->sc;
    int n = sc->n, me = sc->me;
    size_t es = so->esize;
    tempo_status_t result = TEMPO_INPROGRESS;
    int moved, any = 0;
    size_t wfield = 0;
    uint64_t wwant = 0;
    int wq = -1;
    do {
        moved = 0;
        wq = -1;
        /* (1) copy in */
        if (so->next_in < so->nseg) {
            uint64_t g = so->g0 + so->next_in;
            int q = g >= 2 ? lagging(sc, offsetof(ctl_t, red), g - 1) : -1;
            if (q < 0) {
                /* Peers read blocks q != me of this segment; the own block is read in place. */
                size_t off = so->next_in * so->seg_elems, cnt = seg_count(op, so, so->next_in);
                size_t boff, bcnt;
                const char *src = (const char *)op->sendbuf + off * es;
                char *dst = in_area(sc, me, g);
                tempo__block(cnt, n, me, &boff, &bcnt);
                memcpy(dst, src, boff * es);
                memcpy(dst + (boff + bcnt) * es, src + (boff + bcnt) * es,
                       (cnt - boff - bcnt) * es);
                publish(sc, &sc->ctl[me].in, g + 1);
                so->next_in++;
                moved = 1;
            } else {
                wq = q, wfield = offsetof(ctl_t, red), wwant = g - 1;
            }
        }
        /* (2) reduce this rank's block of the oldest segment copied in */
        if (so->next_red < so->next_in) {
            uint64_t g = so->g0 + so->next_red;
            int q = lagging(sc, offsetof(ctl_t, in), g + 1);
            size_t f = offsetof(ctl_t, in);
            uint64_t want = g + 1;
            if (q < 0 && g >= 2) {
                q = lagging(sc, offsetof(ctl_t, done), g - 1);
                f = offsetof(ctl_t, done), want = g - 1;
            }
            if (q < 0 && !so->checked) {
                TEMPO_CHECK(check_sigs(op, so));
            }
            if (q < 0) {
                size_t boff, bcnt;
                tempo__block(seg_count(op, so, so->next_red), n, me, &boff, &bcnt);
                for (int r = 0; r < n; r++) {
                    sc->srcs[r] = in_area(sc, r, g) + boff * es;
                }
                sc->srcs[me] =
                    (const char *)op->sendbuf + (so->next_red * so->seg_elems + boff) * es;
                tempo__reduce_n(out_area(sc, me, g), sc->srcs, n, bcnt, op->dtype, op->redop);
                publish(sc, &sc->ctl[me].red, g + 1);
                so->next_red++;
                moved = 1;
            } else {
                wq = q, wfield = f, wwant = want;
            }
        }
        /* (3) copy every block of the oldest reduced segment into the result */
        if (so->next_out < so->next_red) {
            uint64_t g = so->g0 + so->next_out;
            int q = lagging(sc, offsetof(ctl_t, red), g + 1);
            if (q < 0) {
                size_t cnt = seg_count(op, so, so->next_out);
                char *dst = (char *)op->recvbuf + so->next_out * so->seg_elems * es;
                for (int r = 0; r < n; r++) {
                    size_t boff, bcnt;
                    tempo__block(cnt, n, r, &boff, &bcnt);
                    if (so->stream_out) {
                        tempo__copy_stream(dst + boff * es, out_area(sc, r, g), bcnt * es);
                    } else {
                        memcpy(dst + boff * es, out_area(sc, r, g), bcnt * es);
                    }
                }
                publish(sc, &sc->ctl[me].done, g + 1);
                so->next_out++;
                moved = 1;
                if (so->next_out == so->nseg) {
                    result = TEMPO_OK;
                    break;
                }
            } else {
                wq = q, wfield = offsetof(ctl_t, red), wwant = g + 1;
            }
        }
        any |= moved;
    } while (moved);
    progressed(op, any);
    if (result == TEMPO_INPROGRESS && wq >= 0) {
        return wait_for(op, wq, wfield, wwant);
    }
    return result;
}

/* ---------------------------------------------------------------------------------------------- */
/* Direct: one copy through the kernel (CMA)                                                      */
/* ---------------------------------------------------------------------------------------------- */

/* Read len bytes at raddr in rank q's address space into local. An error fails the operation:
 * the peer exited (ESRCH), or its buffer is not there (EFAULT: it left the call, or passed fewer
 * elements than this rank, which the signature check rules out). Nothing wrong is ever kept. */
static tempo_status_t cma_read(tempo__op_t *op, int q, void *local, uint64_t raddr, size_t len)
{
    shm_op_t *so = op->priv;
    pid_t pid = (pid_t)so->sc->ctl[q].cma.pid;
    while (len > 0) {
        struct iovec l = {local, len}, r = {(void *)(uintptr_t)raddr, len};
        ssize_t got = process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (got <= 0) {
            int e = got < 0 ? errno : EFAULT;
            if (e == EINTR) {
                continue;
            }
            char desc[160];
            tempo__world_t *w = op->comm->world;
            return tempo__op_fail(op, TEMPO_ERR_REMOTE,
                                  "reading %zu bytes of %s's buffer (process_vm_readv) failed: %s",
                                  len, tempo__peer_desc(w, tempo__wrank(op->comm, q), desc,
                                                        sizeof(desc)),
                                  strerror(e));
        }
        local = (char *)local + got;
        raddr += (uint64_t)got;
        len -= (size_t)got;
    }
    return TEMPO_OK;
}

/* Whether this rank can read every peer's memory: each peer's own view of its cma line, read
 * through process_vm_readv, must equal this rank's view of the same shared line. Fails (ptrace
 * permission: another uid, Yama ptrace_scope, a non-dumpable process; seccomp; another pid
 * namespace, where the pid names nobody or someone else) give CMA_NO, never an error. */
static uint64_t cma_probe(tempo__shm_coll_t *sc)
{
    for (int q = 0; q < sc->n; q++) {
        const cma_line_t *c = &sc->ctl[q].cma;
        uint64_t got[3] = {0, 0, 0};
        if (q == sc->me) {
            continue;
        }
        struct iovec l = {got, sizeof(got)},
                     r = {(void *)(uintptr_t)(c->addr + offsetof(cma_line_t, pid)), sizeof(got)};
        ssize_t k = process_vm_readv((pid_t)c->pid, &l, 1, &r, 1, 0);
        if (k != (ssize_t)sizeof(got) || got[0] != c->pid || got[1] != c->addr ||
            got[2] != c->nonce) {
            TEMPO_INFO(TEMPO_SUB_COLL,
                       "shared-memory all-reduce: cannot read comm rank %d's memory "
                       "(process_vm_readv: %s); large all-reduces copy through the shared region "
                       "instead",
                       q, k < 0 ? strerror(errno) : "other contents");
            return CMA_NO;
        }
    }
    return CMA_OK;
}

/* Every rank says whether it reads every peer; the direct protocol runs only if all do, so that
 * all ranks choose the same protocol. Once per communicator, at its first large operation (the
 * same on every rank), before that operation publishes anything. TEMPO_OK once decided. */
static tempo_status_t cma_agree(tempo__op_t *op, tempo__shm_coll_t *sc)
{
    cma_line_t *mine = &sc->ctl[sc->me].cma;
    if (atomic_load_explicit(&mine->verdict, memory_order_relaxed) == 0) {
        int q = lagging(sc, offsetof(ctl_t, cma.hello), 1);
        if (q >= 0) {
            return wait_for(op, q, offsetof(ctl_t, cma.hello), 1);
        }
        uint64_t v = cma_probe(sc);
        if (v == CMA_OK && !sc->tmp &&
            !(sc->tmp = tempo__malloc((size_t)sc->n * sc->outsz, "shm direct all-reduce"))) {
            v = CMA_NO; /* (said by the verdict, so that every rank makes the same choice) */
        }
        publish(sc, (flag_t *)&mine->verdict, v);
    }
    int q = lagging(sc, offsetof(ctl_t, cma.verdict), 1);
    if (q >= 0) {
        return wait_for(op, q, offsetof(ctl_t, cma.verdict), 1);
    }
    int ok = 1;
    for (q = 0; q < sc->n; q++) {
        ok &= atomic_load_explicit(&sc->ctl[q].cma.verdict, memory_order_acquire) == CMA_OK;
    }
    sc->direct = ok;
    TEMPO_INFO(TEMPO_SUB_COLL, "shared-memory all-reduce of %d ranks: %s", sc->n,
               ok ? "large operations read peers' buffers directly (process_vm_readv)"
                  : "large operations copy through the shared region");
    return TEMPO_OK;
}

/* The peers' buffers of this operation, published with its start. */
static const bufs_slot_t *bufs_of(shm_op_t *so, int q)
{
    return &so->sc->ctl[q].bufs.b[so->opno & 1];
}

/* Window operations: where rank q's buffer (its published word) plus at is mapped here, for len
 * bytes. The windows and bounds were checked by q for its own buffer; a word that names no window
 * of this rank's, or runs past q's memory, fails the operation instead of reading astray. */
static tempo_status_t win_ptr(tempo__op_t *op, int q, uint64_t word, size_t at, size_t len,
                              const void **p)
{
    uint64_t id = (word >> WIN_SHIFT) - 1, off = word & (((uint64_t)1 << WIN_SHIFT) - 1);
    const tempo__mem_win_t *win = word >> WIN_SHIFT ? tempo__mem_by_id(op->comm, (uint32_t)id)
                                                    : NULL;
    if (!win || !win->peer[q] || off > win->peer_bytes[q] || at > win->peer_bytes[q] - off ||
        len > win->peer_bytes[q] - off - at) {
        char desc[160];
        return tempo__op_fail(op, TEMPO_ERR_INVALID,
                              "all-reduce: %s's buffer is not in tempo_mem_alloc memory mapped "
                              "here (allocation #%llu, offset %llu: freed on this rank?)",
                              tempo__peer_desc(op->comm->world, tempo__wrank(op->comm, q), desc,
                                               sizeof(desc)),
                              (unsigned long long)id, (unsigned long long)off);
    }
    *p = win->peer[q] + off + at;
    return TEMPO_OK;
}

/* Segment by segment: (1) reduce this rank's block of the segment, reading the peers' blocks from
 * their send buffers into tmp and its own in place, into its result, and publish red; (2) once
 * every rank has reduced segment g, read each peer's block of it from the peer's result into this
 * rank's, and publish done. The operation completes when every rank has done every segment (the
 * peers have finished reading this rank's buffers). In place, a peer reads block q of this rank's
 * buffer (q its rank) before it publishes red for the segment, and this rank overwrites that block
 * only after seeing red: no read ever sees a block changed by this operation. */
static tempo_status_t progress_direct(tempo__op_t *op, shm_op_t *so)
{
    tempo__shm_coll_t *sc = so->sc;
    int n = sc->n, me = sc->me;
    size_t es = so->esize;
    uint64_t last = so->g0 + so->nseg;
    /* Signatures first, as soon as every peer has published its first segment: a peer that runs
     * the staged protocol (its buffers are not in tempo_mem_alloc memory while this rank's are)
     * publishes the segments one by one, and would never publish the last while this rank waits. */
    int q = so->checked ? -1 : lagging(sc, offsetof(ctl_t, in), so->g0 + 1);
    if (q >= 0) {
        return wait_for(op, q, offsetof(ctl_t, in), so->g0 + 1);
    }
    if (!so->checked) {
        TEMPO_CHECK(check_sigs(op, so));
    }
    q = lagging(sc, offsetof(ctl_t, in), last);
    if (q >= 0) {
        return wait_for(op, q, offsetof(ctl_t, in), last);
    }
    int moved, any = 0;
    size_t wfield = 0;
    uint64_t wwant = 0;
    int wq;
    do {
        moved = 0;
        wq = -1;
        if (so->next_red < so->nseg) {
            uint64_t g = so->g0 + so->next_red;
            size_t off = so->next_red * so->seg_elems, boff, bcnt;
            tempo__block(seg_count(op, so, so->next_red), n, me, &boff, &bcnt);
            size_t at = (off + boff) * es;
            char *t = sc->tmp;
            for (int r = 0; r < n; r++) {
                if (r == me) {
                    sc->srcs[r] = (const char *)op->sendbuf + at;
                } else if (so->win) {
                    TEMPO_CHECK(win_ptr(op, r, bufs_of(so, r)->send, at, bcnt * es, &sc->srcs[r]));
                } else {
                    TEMPO_CHECK(cma_read(op, r, t, bufs_of(so, r)->send + at, bcnt * es));
                    sc->srcs[r] = t;
                    t += sc->outsz;
                }
            }
            if (op->sendbuf == op->recvbuf && me >= 2 && !t) {
                return tempo__op_fail(op, TEMPO_ERR_NOMEM, "shm all-reduce: no scratch block");
            }
            if (op->sendbuf == op->recvbuf && me >= 2) {
                /* the fold writes its result over operand 0 before it reads operand me */
                memcpy(t, sc->srcs[me], bcnt * es);
                sc->srcs[me] = t;
            }
            tempo__reduce_n((char *)op->recvbuf + at, sc->srcs, n, bcnt, op->dtype, op->redop);
            publish(sc, &sc->ctl[me].red, g + 1);
            so->next_red++;
            moved = 1;
        }
        if (so->next_out < so->next_red) {
            uint64_t g = so->g0 + so->next_out;
            q = lagging(sc, offsetof(ctl_t, red), g + 1);
            if (q < 0) {
                size_t off = so->next_out * so->seg_elems, cnt = seg_count(op, so, so->next_out);
                for (int r = 0; r < n; r++) {
                    size_t boff, bcnt;
                    tempo__block(cnt, n, r, &boff, &bcnt);
                    size_t at = (off + boff) * es;
                    if (r != me && bcnt && so->win) {
                        const void *src;
                        TEMPO_CHECK(win_ptr(op, r, bufs_of(so, r)->recv, at, bcnt * es, &src));
                        if (so->stream_out) {
                            tempo__copy_stream((char *)op->recvbuf + at, src, bcnt * es);
                        } else {
                            memcpy((char *)op->recvbuf + at, src, bcnt * es);
                        }
                    } else if (r != me && bcnt) {
                        TEMPO_CHECK(
                            cma_read(op, r, (char *)op->recvbuf + at, bufs_of(so, r)->recv + at,
                                     bcnt * es));
                    }
                }
                publish(sc, &sc->ctl[me].done, g + 1);
                so->next_out++;
                moved = 1;
            } else {
                wq = q, wfield = offsetof(ctl_t, red), wwant = g + 1;
            }
        }
        any |= moved;
    } while (moved);
    progressed(op, any);
    if (wq < 0 && so->next_out == so->nseg) {
        /* every peer has finished reading this rank's buffers */
        wq = lagging(sc, offsetof(ctl_t, done), last);
        if (wq < 0) {
            return TEMPO_OK;
        }
        wfield = offsetof(ctl_t, done), wwant = last;
    }
    return wait_for(op, wq, wfield, wwant);
}

/* The head of the queue may start: unpark it. */
static void wake_head(tempo__shm_coll_t *sc)
{
    if (!tempo__list_empty(&sc->queue)) {
        shm_op_t *next = tempo__container_of(sc->queue.next, shm_op_t, qlink);
        if (next->op->parked) {
            tempo__op_unpark(next->op);
        }
    }
}

static tempo_status_t shm_progress(tempo__op_t *op)
{
    shm_op_t *so = op->priv;
    tempo__shm_coll_t *sc = so->sc;
    if (TEMPO_UNLIKELY(sc->broken)) {
        return tempo__op_fail(op, TEMPO_ERR_ABORTED,
                              "an earlier shared-memory all-reduce on this communicator was "
                              "cancelled while running");
    }
    if (!so->started) {
        if (sc->running || sc->queue.next != &so->qlink) {
            tempo__op_park(op); /* an earlier shared-memory operation is still running */
            return TEMPO_INPROGRESS;
        }
        if (so->direct && !so->win && sc->direct < 0) {
            tempo_status_t st = cma_agree(op, sc);
            if (st != TEMPO_OK) {
                return st;
            }
        }
        so->direct &= so->win || sc->direct == 1;
        if (so->win && !sc->said_win) {
            sc->said_win = 1;
            TEMPO_INFO(TEMPO_SUB_COLL,
                       "shared-memory all-reduce of %d ranks: buffers in tempo_mem_alloc memory, "
                       "read directly in the peers' mappings",
                       sc->n);
        }
        tempo__list_remove(&so->qlink);
        sc->running = 1;
        so->started = 1;
        so->opno = sc->nops++;
        if (so->small) {
            so->k = sc->nsmall++;
            memcpy(small_slot(sc, sc->me, so->k), op->sendbuf, op->count * so->esize);
            publish_sig(op, so); /* in the counter's line, just before the counter */
            publish(sc, &sc->ctl[sc->me].small, so->k + 1);
        } else {
            so->g0 = sc->nseg;
            sc->nseg += so->nseg;
            publish_sig(op, so);
            if (so->direct) {
                /* every segment is readable from the start, in the caller's buffers */
                bufs_slot_t *b = &sc->ctl[sc->me].bufs.b[so->opno & 1];
                if (so->win) {
                    b->send = WIN_WORD(so->swin->id, (const char *)op->sendbuf - so->swin->base);
                    b->recv = WIN_WORD(so->rwin->id, (char *)op->recvbuf - so->rwin->base);
                } else {
                    b->send = (uint64_t)(uintptr_t)op->sendbuf;
                    b->recv = (uint64_t)(uintptr_t)op->recvbuf;
                }
                b->opno = so->opno + 1;
                publish(sc, &sc->ctl[sc->me].in, so->g0 + so->nseg);
            }
        }
    }
    tempo_status_t st = so->small    ? progress_small(op, so)
                        : so->direct ? progress_direct(op, so)
                                     : progress_staged(op, so);
    if (st != TEMPO_INPROGRESS) {
        sc->running = 0;
        so->finished = 1;
        op->wait_peer = -1;
        wake_head(sc);
    }
    return st;
}

static void shm_cleanup(tempo__op_t *op)
{
    shm_op_t *so = op->priv;
    if (so) {
        /* A cancelled operation that never ran gives its turn away; one that started cannot be
         * undone (its peers would wait forever), which is why cancelling fails the communicator's
         * shared-memory state for good: the operations queued behind it fail. */
        tempo__shm_coll_t *sc = so->sc;
        if (!so->started) {
            tempo__list_remove(&so->qlink);
            wake_head(sc);
        } else if (!so->finished) {
            sc->broken = 1;
            sc->running = 0;
            while (!tempo__list_empty(&sc->queue)) {
                shm_op_t *q = tempo__container_of(sc->queue.next, shm_op_t, qlink);
                tempo__list_remove(&q->qlink);
                if (q->op->parked) {
                    tempo__op_unpark(q->op);
                }
            }
        }
        if (sc->nspare < SPARE_MAX) {
            tempo__list_push_back(&sc->spare, &so->qlink);
            sc->nspare++;
        } else {
            tempo__free(so);
        }
        op->priv = NULL;
    }
}

const char *tempo__allreduce_shm_unusable(const tempo__op_t *op);
const char *tempo__allreduce_shm_unusable(const tempo__op_t *op)
{
    if (op->comm->size == 1) {
        return NULL; /* one rank shares nothing: see one_rank() */
    }
    if (!op->comm->all_local) {
        return "needs every rank on one host";
    }
    if (!tempo__cc_shm(op)) {
        return "shared memory is not available on this communicator (TEMPO_SHM=0 or ^shm in "
               "TEMPO_TRANSPORTS, or /dev/shm had no room)";
    }
    return NULL;
}

/* One rank: the result is its input (TEMPO_AVG divides by 1, exactly, in every type), so there is
 * no region to share, and a communicator of one rank has none (api.c creates it for two or more).
 * The algorithm still runs there, as every other algorithm does: a forced "shm" in a program that
 * also runs on one rank (a one-rank job, a sub-communicator of one) must not fail. */
static tempo_status_t one_rank(tempo__op_t *op)
{
    tempo__sched_t *s;
    tempo__view_t v;
    void *scratch;
    TEMPO_CHECK(tempo__coll_begin(op, 0, &s, &v, &scratch));
    tempo__sched_round(s);
    tempo__sched_copy(s, v.recvbuf, v.sendbuf, op->count * v.esize);
    return tempo__coll_end(op, s, &v);
}

tempo_status_t tempo__allreduce_shm_start(tempo__op_t *op);
tempo_status_t tempo__allreduce_shm_start(tempo__op_t *op)
{
    if (op->comm->size == 1) {
        return one_rank(op);
    }
    tempo__shm_coll_t *sc = tempo__cc_shm(op);
    shm_op_t *so;
    if (!tempo__list_empty(&sc->spare)) {
        so = tempo__container_of(sc->spare.next, shm_op_t, qlink);
        tempo__list_remove(&so->qlink);
        sc->nspare--;
        memset(so, 0, sizeof(*so));
    } else if (!(so = tempo__calloc(1, sizeof(*so), "shm operation"))) {
        return TEMPO_ERR_NOMEM;
    }
    so->sc = sc;
    so->op = op;
    so->esize = tempo_dtype_size(op->dtype);
    tempo__list_push_back(&sc->queue, &so->qlink);
    so->small = op->count * so->esize <= SMALL_MAX;
    so->seg_elems = sc->stage / so->esize;
    so->nseg = (op->count + so->seg_elems - 1) / so->seg_elems;
    so->stream_out = use_stream(op, sc->n);
    size_t bytes = op->count * so->esize;
    if (!so->small && bytes >= WIN_MIN &&
        (so->swin = tempo__mem_find(op->comm, op->sendbuf, bytes)) != NULL &&
        (so->rwin = tempo__mem_find(op->comm, op->recvbuf, bytes)) != NULL) {
        so->win = 1;
        if (!sc->tmp && !(sc->tmp = tempo__malloc((size_t)sc->n * sc->outsz, "shm all-reduce"))) {
            tempo__list_remove(&so->qlink);
            tempo__free(so);
            return TEMPO_ERR_NOMEM; /* (the scratch block of an in-place fold) */
        }
    }
    so->direct = so->win || (!so->small && bytes >= DIRECT_MIN && sc->direct != 0);
    op->priv = so;
    op->progress = shm_progress;
    op->cleanup = shm_cleanup;
    return TEMPO_OK;
}
