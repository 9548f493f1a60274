/*
 * coll.h — the collectives layer: algorithm table, schedules, reduction kernels, per-communicator
 * state. Not installed.
 *
 * An algorithm is an entry of tempo__algos[] (collectives/algos.c): a collective, a name (forceable
 * through TEMPO_ALGO or tempo_attr_t.algorithm), a predicate saying whether it can run an
 * operation, an α-β cost for automatic selection, and a start function. Most algorithms are
 * builders: start() fills a tempo__sched_t (rounds of sends, receives, copies and reductions) that
 * the generic executor in sched.c runs. Algorithms that do not fit rounds (the shared-memory ones)
 * install their own progress function instead.
 *
 * Reductions in schedules are in a native type: fp16/bf16 collectives are run in fp32 on a work
 * buffer (converted once on the way in and once on the way out), which is how they accumulate in
 * fp32 and round once.
 */
#ifndef TEMPO_COLLECTIVES_COLL_H
#define TEMPO_COLLECTIVES_COLL_H

#include "core/dtype.h"
#include "core/world.h"
#include "transport/transport.h"

/* ---------------------------------------------------------------------------------------------- */
/* Reduction kernels (reduce.c)                                                                   */
/* ---------------------------------------------------------------------------------------------- */

/** dst[i] = a[i] op b[i] for native types (not fp16/bf16); TEMPO_AVG reduces as TEMPO_SUM. dst may
 *  alias a or b. */
void tempo__reduce3(void *dst, const void *a, const void *b, size_t count, tempo_dtype_t dtype,
                    tempo_op_t op);
/** buf[i] /= n (TEMPO_AVG's final step; integer division for integer types). Native types only. */
void tempo__avg_finish(void *buf, size_t count, tempo_dtype_t dtype, int n);
/** dst[i] = src[0][i] op src[1][i] op ... op src[n-1][i], folded left in index order. Any dtype:
 *  fp16/bf16 accumulate in fp32 and round once; with TEMPO_AVG the result is divided by n. */
void tempo__reduce_n(void *dst, const void *const *src, int n, size_t count, tempo_dtype_t dtype,
                     tempo_op_t op);

/** One instruction-set level of the kernels above (reduce.c): the same functions, compiled for
 *  it, bitwise equal in results to every other level. */
typedef struct tempo__reduce_kernels {
    const char *name; /* "sse2" (x86-64's baseline; "generic" elsewhere), "avx2", "avx512" */
    void (*reduce3)(void *dst, const void *a, const void *b, size_t count, tempo_dtype_t dtype,
                    tempo_op_t op);
    void (*avg_finish)(void *buf, size_t count, tempo_dtype_t dtype, int n);
    void (*reduce_n)(void *dst, const void *const *src, int n, size_t count, tempo_dtype_t dtype,
                     tempo_op_t op);
} tempo__reduce_kernels_t;
/** The level in use, chosen at the first call: TEMPO_REDUCE_ISA's, by default the best this CPU
 *  runs. */
const tempo__reduce_kernels_t *tempo__reduce_kernels(void);
/** Level i, lowest first (0: the build's baseline), or NULL past the last or where this CPU
 *  cannot run it (tests compare every level). */
const tempo__reduce_kernels_t *tempo__reduce_kernels_level(size_t i);
/** Use k from now on (tests; NULL: choose again at the next call). */
void tempo__reduce_kernels_force(const tempo__reduce_kernels_t *k);

/** memcpy with non-temporal stores for large destinations the caller will not read soon (they
 *  bypass the cache: about twice the write bandwidth of memcpy on the development machine, and no
 *  eviction of the working set). Plain memcpy where the CPU has no streaming stores. */
void tempo__copy_stream(void *dst, const void *src, size_t bytes);

/* ---------------------------------------------------------------------------------------------- */
/* Schedules (sched.c)                                                                            */
/* ---------------------------------------------------------------------------------------------- */

typedef enum {
    SA_SEND,        /* send bytes from src to peer */
    SA_RECV,        /* receive bytes from peer into dst */
    SA_RECV_REDUCE, /* receive into tmp; at the end of the round dst = src op tmp (or tmp op src) */
    SA_COPY,        /* dst <- src (bytes; memmove semantics) */
    SA_REDUCE,      /* dst = src op dst (or dst op src), count elements */
    SA_AVG,         /* dst /= nranks, count elements */
    SA_HALF_TO_F32, /* dst (fp32) <- src (fp16/bf16 of the operation), count elements */
    SA_F32_TO_HALF, /* dst (fp16/bf16) <- src (fp32), count elements */
    SA_CALL         /* fn(s, arg): a local step of the builder's own (encode, decode, fit) */
} tempo__sact_kind_t;

typedef struct tempo__sched tempo__sched_t;
/** A builder's local step; an error fails the operation (the function sets the message), and
 *  TEMPO_INPROGRESS means "not yet": the step runs again at the next progress call (the round's
 *  earlier local steps do not). It may change the byte counts of the receives and sends of its own
 *  round (they are posted after the round's local steps): see tempo__sched_act(). */
typedef tempo_status_t (*tempo__sched_fn_t)(tempo__sched_t *s, void *arg);

typedef struct tempo__sact {
    uint8_t kind;
    uint8_t tmp_first; /* reductions: the received/other operand is the left operand */
    uint8_t skip_empty; /* a transfer of 0 bytes is not posted (sizes set by calls) */
    int peer;          /* comm rank */
    void *dst;
    const void *src;
    void *tmp;
    size_t bytes;
    size_t count;
    tempo__sched_fn_t fn; /* SA_CALL */
    tempo__xfer_t x;
} tempo__sact_t;

struct tempo__sched {
    tempo__op_t *op;
    tempo__sact_t *acts;
    int nacts, acap;
    int *round_start; /* first action of each round */
    int nrounds, rcap;
    int cur;             /* round being executed */
    int posted;          /* its transfers are posted */
    tempo_dtype_t dtype; /* reduction type (native) */
    tempo_op_t redop;
    int nranks;       /* for SA_AVG */
    uint64_t p2p_tag; /* nonzero: every transfer uses this tag (send/recv) */
    void *scratch;    /* scratch memory (from tempo__scratch_get) */
    size_t scratch_cap;
    int oom; /* an allocation failed while building */
    int local_next; /* first local action of the current round still to run (a call returned
                     * TEMPO_INPROGRESS), or 0 */
    void *ext;      /* the builder's own state (a builder that sets it replaces op->cleanup) */
};

/** Allocate a schedule for op (op->priv, op->progress and op->cleanup are set) with scratch_bytes
 * of owned scratch memory (64-byte aligned) and reductions in dtype/redop. */
tempo_status_t tempo__sched_create(tempo__op_t *op, size_t scratch_bytes, tempo_dtype_t dtype,
                                   tempo_op_t redop, tempo__sched_t **sched_p);
void tempo__sched_round(tempo__sched_t *s);
/* Appending actions. Send, receive and call return the new action's index (for
 * tempo__sched_act), or -1 when out of memory (reported by tempo__sched_ready). */
int tempo__sched_send(tempo__sched_t *s, int peer, const void *src, size_t bytes);
int tempo__sched_recv(tempo__sched_t *s, int peer, void *dst, size_t bytes);
int tempo__sched_call(tempo__sched_t *s, tempo__sched_fn_t fn, void *arg);
/** Action i (from the functions above). A call may set the bytes of a transfer of its round;
 *  with skip_empty set, a transfer of 0 bytes is not posted (both sides must agree, as on any
 *  size). */
static inline tempo__sact_t *tempo__sched_act(tempo__sched_t *s, int i)
{
    return &s->acts[i];
}
void tempo__sched_recv_reduce(tempo__sched_t *s, int peer, void *dst, const void *src, void *tmp,
                              size_t count, int tmp_first);
void tempo__sched_copy(tempo__sched_t *s, void *dst, const void *src, size_t bytes);
void tempo__sched_reduce(tempo__sched_t *s, void *dst, const void *src, size_t count,
                         int src_first);
void tempo__sched_avg(tempo__sched_t *s, void *dst, size_t count);
void tempo__sched_convert(tempo__sched_t *s, int to_f32, void *dst, const void *src, size_t count);
/** Append the rounds of a dissemination barrier (in round k every rank sends an empty message to
 *  rank r+2^k and receives one from rank r-2^k): afterwards every rank has heard from every other,
 *  directly or through ranks that heard from it first. Every message carries the call's
 *  signature, so a schedule whose data flow leaves some rank deaf to another (a broadcast root
 *  only sends) ends with these rounds, and no rank completes a call that another rank made
 *  differently (core/check.c; tests/unit/test_sched.c checks every algorithm). */
void tempo__sched_close(tempo__sched_t *s);
/** Check the build (out of memory while appending actions). */
tempo_status_t tempo__sched_ready(tempo__sched_t *s);

/* ---------------------------------------------------------------------------------------------- */
/* Per-communicator state                                                                         */
/* ---------------------------------------------------------------------------------------------- */

typedef struct tempo__shm_coll tempo__shm_coll_t;

typedef struct tempo__sq tempo__sq_t;

/* An automatic algorithm choice and the size in bytes it was made for. */
typedef struct {
    const struct tempo__algo *algo; /* NULL: none yet */
    size_t bytes;
} tempo__algo_memo_t;

typedef struct tempo__coll_comm {
    const struct tempo__algo *forced[TEMPO__COLL_COUNT]; /* from TEMPO_ALGO */
    /* The last automatic choice per lane and collective, and the size it was made for: the cost
     * models (log2, divisions) were a quarter of an 8-byte all-reduce, and a program calls the
     * same collective at the same size over and over. The choice depends on nothing else that
     * changes (the communicator's shared-memory state is fixed when it is created). */
    tempo__algo_memo_t chosen[2][TEMPO__COLL_COUNT];
    /* Shared-memory collectives, when every rank is on this host: one state per lane, because the
     * state runs its operations one at a time in the order they start, and the two lanes start
     * theirs in different (each rank-independent) orders. */
    tempo__shm_coll_t *shm;       /* program-order lane */
    tempo__shm_coll_t *shm_sched; /* scheduled lane */
    tempo__sq_t *sq;              /* the scheduled lane (schedq.c), created at its first use */
    int nbucketers;               /* bucketers created on this communicator */
    struct tempo__mem_win *wins;  /* tempo_mem_alloc's memory (mem.c), newest first */
    uint32_t nwins;               /* allocations so far (the same count on every member) */
} tempo__coll_comm_t;

/* Memory from tempo_mem_alloc (mem.c): this rank's, and every same-host member's mapped here. */
typedef struct tempo__mem_win {
    struct tempo__mem_win *next;
    uint32_t id;        /* the allocation's number on its communicator (the same on all members) */
    char *base;         /* this rank's memory */
    size_t bytes;
    tempo__shm_region_t region; /* every member's memory (shared: usable), or base == NULL */
    char **peer;        /* (comm size) member q's memory in this rank's view (usable only) */
    size_t *peer_bytes; /* (comm size) */
    int usable;         /* shared: every member sees every other's memory */
} tempo__mem_win_t;

/** The usable window of comm that holds [p, p + len), or NULL. Lock held. */
const tempo__mem_win_t *tempo__mem_find(struct tempo_comm *comm, const void *p, size_t len);
/** The window of comm numbered id, or NULL. Lock held. */
const tempo__mem_win_t *tempo__mem_by_id(struct tempo_comm *comm, uint32_t id);
/** Unmap every window of comm (its destruction). */
void tempo__mem_free_all(struct tempo_comm *comm);

static inline tempo__coll_comm_t *tempo__cc(struct tempo_comm *c)
{
    return (tempo__coll_comm_t *)c->coll;
}

/** The shared-memory collective state of op's lane (NULL when unavailable). */
static inline tempo__shm_coll_t *tempo__cc_shm(const tempo__op_t *op)
{
    tempo__coll_comm_t *cc = tempo__cc(op->comm);
    return op->lane ? cc->shm_sched : cc->shm;
}

/* ---------------------------------------------------------------------------------------------- */
/* The scheduled lane (schedq.c)                                                                  */
/* ---------------------------------------------------------------------------------------------- */

/** Post op (prepared by the API: arguments, priority, tag; lane 1; forced algorithm validated) as
 *  a scheduled request. forced is the forced algorithm's name or NULL; name the caller's name of
 *  the data or NULL; chunk_bytes the request's chunk size (0: TEMPO_CHUNK_BYTES, SIZE_MAX: never
 *  split). Returns the op's status like tempo__op_start. */
tempo_status_t tempo__sq_post(tempo__op_t *op, const char *forced, const char *name,
                              size_t chunk_bytes);
/** Free the lane's state (communicator teardown; its requests are already released). */
void tempo__sq_destroy(tempo__sq_t *sq);
/** A scheduled request (coll, count, dtype, redop, tag) was rejected on this rank (its arguments):
 *  it still takes its occurrence, and the coordinator hears of it, so that ranks that posted it
 *  fail at once naming this rank (and later requests stay in step). Lock held. */
void tempo__sq_rejected(struct tempo_comm *c, int coll, size_t count, tempo_dtype_t dtype,
                        tempo_op_t redop, uint64_t tag);
/** A scheduled-lane control message: a header, then POST or START entries or a FAIL text. */
#define TEMPO__SQ_CTRL_BYTES 1024
/** The checks of control message msg (TEMPO__SQ_CTRL_BYTES) from comm rank peer that need no
 *  state (tests/fuzz/fuzz_sched.c): its header, for a coordinator (coord) or another rank, and its
 *  POST entries in turn. NULL, or what is wrong; *nvalid_p: the POST entries before the first bad
 *  one (0 for another type). */
const char *tempo__sq_ctrl_check(const void *msg, int peer, int coord, int *nvalid_p);
/** Whether START entry start_ent fits the local request it names: count elements, cut into nchunks
 *  (0: not yet), of which started have started. NULL (a count-0 request posted alike: no chunks),
 *  or what is wrong. */
const char *tempo__sq_chunk_check(const void *start_ent, uint64_t count, uint32_t nchunks,
                                  uint32_t started);
/** Nanoseconds during which at least one scheduled chunk was running on comm (a running total;
 *  lock held). */
uint64_t tempo__sq_busy_ns(struct tempo_comm *comm);
/** The lane's state for the flight recorder (struct tempo_comm.sched_state): JSON object members,
 *  "" before the lane's first use. Lock held. */
void tempo__sq_flight_state(const struct tempo_comm *comm, char *buf, size_t len);

/** tempo_wait() that also reports, for a scheduled request, when its first chunk started and when
 *  its last completed (monotonic ns; 0 when unknown). For the bucketer's measurements. */
tempo_status_t tempo__request_wait(tempo_request_t *req_p, uint64_t *t_start_p, uint64_t *t_end_p);
/** The scheduled lane's busy time on comm (takes the lock). */
uint64_t tempo__comm_sched_busy_ns(struct tempo_comm *comm);
/** Trace helpers for higher layers (take the lock; no-ops when tracing is off). */
void tempo__comm_trace_mark(struct tempo_comm *comm, int tid, int begin, const char *cat,
                            const char *name, uint64_t t);
void tempo__comm_trace_span(struct tempo_comm *comm, int tid, const char *cat, const char *name,
                            uint64_t t0, uint64_t t1, const char *args_json);
/** A number unique per communicator and equal on every rank when called collectively (bucketer
 *  tag ranges). */
int tempo__comm_next_bucketer(struct tempo_comm *comm);

/* ---------------------------------------------------------------------------------------------- */
/* Algorithms                                                                                     */
/* ---------------------------------------------------------------------------------------------- */

/** α-β model parameters of a communicator (seconds, seconds per byte). */
typedef struct tempo__cost {
    double alpha; /* per message */
    double beta;  /* per byte moved */
    double gamma; /* per byte reduced */
    int n;        /* ranks */
} tempo__cost_t;

typedef struct tempo__algo {
    int coll;
    const char *name;
    const char *doc;
    /** NULL if the algorithm can run op, else the reason it cannot. */
    const char *(*unusable)(const tempo__op_t *op);
    /** Estimated time for bytes (per-rank buffer bytes) with the model, or < 0: never automatic. */
    double (*cost)(const tempo__cost_t *m, size_t bytes);
    /** Prepare op (progress, cleanup, priv) for execution. */
    tempo_status_t (*start)(tempo__op_t *op);
} tempo__algo_t;

extern const tempo__algo_t tempo__algos[];
extern const size_t tempo__nalgos;

/** The engine gate (core/world.h) of an operation on staged device buffers, or of a chunk of a
 *  scheduled request on them (collectives/api.c). */
int tempo__coll_staged_gate(tempo__op_t *op);
/** A chunk of a scheduled request on staged device buffers completed: copy its part of the
 *  result out (its on_complete hook, collectives/api.c). */
void tempo__coll_staged_out(tempo__op_t *op);

/** The algorithm of coll named name, or NULL. */
const tempo__algo_t *tempo__algo_find(int coll, const char *name);
/** The name of the algorithm whose signature how (core/world.h) is how, or NULL (compressed, or
 *  none): struct tempo_comm.algo_name. */
const char *tempo__algo_name_of(uint32_t how);
/** Choose the algorithm for op: forced by name (attr), by TEMPO_ALGO, or by the cost model. */
tempo_status_t tempo__algo_select(tempo__op_t *op, const char *forced_name,
                                  const tempo__algo_t **algo_p);
/** Start op with algo, the choice of tempo__algo_select (whose status is st): on a failure op
 *  completes with it (tempo__op_error); otherwise tempo__op_start. Returns op's status. */
tempo_status_t tempo__op_launch(tempo__op_t *op, tempo_status_t st, const tempo__algo_t *algo);
/** Parse TEMPO_ALGO into cc->forced; TEMPO_ERR_INVALID naming the bad entry. */
tempo_status_t tempo__algo_parse_env(tempo__coll_comm_t *cc, const char *text);

/* Shared-memory collectives (allreduce_shm.c). */
tempo_status_t tempo__shm_coll_create(struct tempo_comm *comm, tempo__shm_coll_t **shm_p);
void tempo__shm_coll_destroy(tempo__shm_coll_t *shm);

/* Helpers for builders. */

/** Element offset and count of block i when count elements are split into n nearly equal blocks. */
static inline void tempo__block(size_t count, int n, int i, size_t *off_p, size_t *cnt_p)
{
    size_t base = count / (size_t)n, rem = count % (size_t)n, ui = (size_t)i;
    *off_p = ui * base + (ui < rem ? ui : rem);
    *cnt_p = base + (ui < rem ? 1 : 0);
}

static inline int tempo__mod(int a, int n)
{
    int m = a % n;
    return m < 0 ? m + n : m;
}

/** Largest power of two <= n. */
static inline int tempo__pow2_floor(int n)
{
    int p = 1;
    while (p * 2 <= n) {
        p *= 2;
    }
    return p;
}

/** Fold in ranks beyond the largest power of two (fold.c): returns this rank's virtual rank among
 *  the p = n - rem taking part, or -1 if it sits out until tempo__fold_out(). */
int tempo__fold_in(tempo__sched_t *s, int r, int rem, void *buf, void *tmp, size_t count,
                   size_t bytes);
void tempo__fold_out(tempo__sched_t *s, int r, int rem, void *buf, size_t bytes);
/** Real rank of virtual rank v after tempo__fold_in(). */
static inline int tempo__fold_real_rank(int v, int rem)
{
    return v < rem ? 2 * v + 1 : v + rem;
}

/** Element size of the type reductions run in (fp32 for fp16/bf16). */
static inline size_t tempo__work_esize(tempo_dtype_t d)
{
    return tempo__dtype_is_half(d) ? 4 : tempo_dtype_size(d);
}

/** For builders: the buffers and types an algorithm works on. Half-precision reductions are
 *  presented to builders as fp32 in a work buffer (see tempo__coll_view()). */
typedef struct tempo__view {
    const void *sendbuf;
    void *recvbuf;
    tempo_dtype_t dtype; /* native type of the data the builder sees */
    size_t esize;
    size_t stride; /* elements between rank blocks of the per-rank-blocked buffer (reduce-scatter
                    * input, all-gather output); the count for contiguous blocks */
} tempo__view_t;

/** Create the schedule of a schedule-based algorithm and the view its builder should use.
 *  extra_scratch bytes are reserved after the work buffer (at *scratch_p). */
tempo_status_t tempo__coll_begin(tempo__op_t *op, size_t extra_scratch, tempo__sched_t **sched_p,
                                 tempo__view_t *view_p, void **scratch_p);
/** Finish a schedule built on a view from tempo__coll_begin (adds the conversion back to 16 bits).
 */
tempo_status_t tempo__coll_end(tempo__op_t *op, tempo__sched_t *s, const tempo__view_t *v);

#endif /* TEMPO_COLLECTIVES_COLL_H */
