/*
 * world.h — the job ("world"), its communicators, and the operations posted on them.
 *
 * A world is created once per job by tempo_comm_init*(): it holds the peer table from the
 * rendezvous, the transports (registered as function pointers, because transport/ sits above
 * core/), the progress engine (the list of running operations) and the job's failure state. Every
 * communicator of the job (the initial one and its splits) points to the same world and shares its
 * connections; messages of different communicators are kept apart by a 15-bit context id in every
 * tag.
 *
 * An operation (tempo__op_t, the public tempo_request_t) is one posted collective or point-to-point
 * transfer. Its algorithm is a progress function that is called by the engine until it returns
 * TEMPO_OK or an error; it never blocks. Operations on a communicator get consecutive sequence
 * numbers in posting order, which every rank agrees on because all ranks post collectives in the
 * same order.
 *
 * Invariants
 *   - Everything in a world is protected by world->lock; public entry points take it.
 *   - Once world->failed is set, every running and later operation fails with that status.
 *   - op->status is TEMPO_INPROGRESS exactly while op is on world->active or world->parked.
 *   - The engine polls only world->active. A parked operation waits for its turn on a serialized
 *     resource (a shared-memory collective state runs one operation at a time); whoever owns the
 *     resource unparks it when its turn comes (tempo__op_unpark), so a long queue costs nothing per
 *     progress pass.
 *
 * Deadlines (TEMPO_TIMEOUT) measure silence, not queueing: an operation's deadline is armed when
 * it starts running (posted, or unparked), re-armed when it makes progress
 * (tempo__op_progressed), and extended while the peer it waits for (op->wait_peer) is heard from,
 * i.e. bytes of messages move to or from that peer (control notes do not count: ranks that wait
 * for each other exchange probes and blame queries, and these must not keep the wait alive). A
 * parked operation has no deadline: the one running ahead of it has, and its timeout fails the
 * job (and so every parked operation) anyway.
 */
#ifndef TEMPO_CORE_WORLD_H
#define TEMPO_CORE_WORLD_H

#include <pthread.h>

#include "core/tempo_int.h"

/* ---------------------------------------------------------------------------------------------- */
/* Peers                                                                                          */
/* ---------------------------------------------------------------------------------------------- */

/** What each rank publishes at the rendezvous. Plain data, identical layout on every rank. */
typedef struct tempo__peer_info {
    int32_t rank;
    int32_t pid;
    uint64_t host_id;    /* equal ids: same host, shared memory possible */
    uint64_t machine_id; /* equal ids: same machine, sharing CPUs */
    uint64_t uuid;       /* random per process; rank 0's identifies the job (a secret without a
                          * key: see transport/tcp.c) */
    uint64_t tag;        /* random per process; rank 0's names the job's shared memory and
                          * doorbells, names any user of the host can list */
    uint32_t addr_len;   /* listening address of the tcp transport */
    uint32_t ncpus;      /* online CPUs of the host */
    uint8_t addr[128];
    char hostname[64];
    char transports[48]; /* its resolved TEMPO_TRANSPORTS order ("shm,tcp"): must be the same on
                          * every rank (transport/transport.c) */
} tempo__peer_info_t;

typedef struct tempo__peer {
    tempo__peer_info_t info;
    void *data_ep; /* endpoint carrying this peer's data (owned by transport) */
    const struct tempo__tl_ops *data_tl; /* its transport */
    int local;                           /* same host id as this rank */
    int left; /* the peer destroyed its last communicator (said goodbye) */
    uint64_t heard_ns; /* ns, monotonic: the engine pass in which bytes last moved to or from this
                        * peer (tempo__peer_heard), control notes excepted; extends the deadlines
                        * of operations waiting for it */
    /* Its last answer to "whom do you wait for?" (core/blame.c). */
    uint64_t answer_ns;     /* ns, monotonic: when it arrived; 0: never */
    int32_t answer_waits;   /* world rank it waits for, -1: nobody */
    double answer_silent_s; /* for how long that rank has been silent */
} tempo__peer_t;

/* ---------------------------------------------------------------------------------------------- */
/* Operations                                                                                     */
/* ---------------------------------------------------------------------------------------------- */

typedef enum {
    TEMPO__COLL_ALLREDUCE,
    TEMPO__COLL_REDUCE_SCATTER,
    TEMPO__COLL_ALLGATHER,
    TEMPO__COLL_BROADCAST,
    TEMPO__COLL_REDUCE,
    TEMPO__COLL_ALLTOALL,
    TEMPO__COLL_BARRIER,
    TEMPO__COLL_SEND,
    TEMPO__COLL_RECV,
    TEMPO__COLL_COUNT
} tempo__coll_t;

/** The names used in logs and in TEMPO_ALGO ("allreduce", "reduce_scatter", ...). */
const char *tempo__coll_name(int coll);

typedef struct tempo__op tempo__op_t;
typedef tempo_status_t (*tempo__op_progress_fn_t)(tempo__op_t *op);

/** What every rank of a communicator must agree on for one collective call: its signature. It
 *  travels in the header of every collective message (transport/stream.h) and in the shared-memory
 *  all-reduce's control words, and answers probes (core/check.c), so that ranks that called
 *  different things fail with TEMPO_ERR_INVALID saying what differs instead of computing garbage or
 *  timing out. Fields that do not apply to the collective are 0 (redop) or -1 (root). Plain data,
 *  the same layout on every rank (it is sent as is).
 *  how: what the messages' format depends on besides the call, set when the algorithm is chosen
 *  (tempo__op_launch): the algorithm's place in the table + 1, or TEMPO__HOW_COMPRESSED with a hash
 *  of the compressor's canonical spec (tempo__qhook_t.id); 0 until then, and for calls that move
 *  no data (count 0), which matches any (tempo__sig_equal). The shared-memory all-reduce's control
 *  words leave it out: every rank that publishes there runs that algorithm, uncompressed. */
typedef struct tempo__sig {
    uint64_t count; /* the caller's count (per rank block where tempo.h says so) */
    int32_t root;   /* broadcast, reduce: the root's comm rank; else -1 */
    uint8_t coll;   /* tempo__coll_t */
    uint8_t dtype;  /* tempo_dtype_t */
    uint8_t redop;  /* reductions: tempo_op_t + 1; else 0 */
    uint8_t valid;  /* 1: a collective's signature; 0: none (point-to-point, control) */
    uint32_t how;   /* the algorithm or the compressor (see above) */
    uint32_t zero;  /* 0 */
} tempo__sig_t;

/** tempo__sig_t.how of a compressed call: this bit, and 31 bits of the spec's hash. */
#define TEMPO__HOW_COMPRESSED 0x80000000u

/* A compressor as the engine sees it: quant/ fills this in as the first member of struct
 * tempo_compressor, so that collectives can run a compressed request without including quant/. */
typedef struct tempo__qhook {
    /** Build op's compressed execution (like an algorithm's start). */
    tempo_status_t (*start)(tempo__op_t *op);
    /** NULL if op can be compressed, else why not (dtype, reduction). */
    const char *(*unusable)(const tempo__op_t *op);
    size_t min_bytes; /* requests with fewer bytes per rank run uncompressed */
    uint32_t id;      /* the signature's how for requests it compresses: TEMPO__HOW_COMPRESSED
                       * and a hash of spec (ranks with different specs disagree) */
    const char *spec; /* its canonical spec, for messages */
} tempo__qhook_t;

struct tempo__op {
    tempo__list_t link;  /* on world->active while running, on the free list otherwise */
    tempo__list_t clink; /* on comm->ops from creation until released */
    struct tempo_comm *comm;
    tempo_status_t status; /* TEMPO_INPROGRESS while running */
    int coll;              /* tempo__coll_t */
    uint32_t seq;          /* per-communicator sequence number (tags use it) */
    const char *algo;      /* algorithm name, for logs */
    tempo__sig_t sig;      /* collectives: what every rank must agree on (a chunk: its request's) */
    uint64_t probe_ns;     /* when to probe the peer it waits for (core/check.c), 0: not yet armed */
    uint32_t probe_gap_ms; /* the gap before the next probe (doubles up to a limit) */

    /* Arguments, as the caller gave them (meaning per collective, see tempo.h). */
    const void *sendbuf;
    void *recvbuf;
    size_t count;
    tempo_dtype_t dtype;
    tempo_op_t redop;
    int root;      /* root, or the peer of send/recv (comm ranks) */
    uint32_t ptag; /* send/recv tag */
    int priority;
    uint64_t user_tag;
    tempo__qhook_t *qc; /* compressor of an all-reduce or reduce-scatter, or NULL */

    /* Execution. */
    tempo__op_progress_fn_t progress; /* returns TEMPO_INPROGRESS, TEMPO_OK or an error */
    void (*cleanup)(tempo__op_t *op); /* frees priv; called once, also after failures */
    void *priv;                       /* algorithm state */
    uint64_t deadline;                /* ns, monotonic; see "Deadlines" above */
    int wait_peer; /* comm rank the op is waiting for (diagnostics, deadline), -1 if unknown */
    int parked;    /* on world->parked: waiting for its turn, not polled (tempo__op_park) */
    uint64_t asked_ns;       /* past its deadline: when it asked the peers whom they wait for
                              * (core/blame.c), 0: not asked */
    uint64_t asked_deadline; /* its deadline then (a later deadline: the peer moved, ask again) */

    /* Scheduled requests (collectives/schedq.c). A scheduled request is a parent that never moves
     * data itself: the coordinator's decisions start its chunks as child operations. */
    int lane;               /* 0: program order (seq from comm->next_seq); 1: scheduled */
    int is_parent;          /* a scheduled request (its chunks are children) */
    tempo__op_t *parent;    /* a chunk's request, NULL otherwise */
    size_t stride;          /* elements between rank blocks (reduce-scatter send buffer,
                             * all-gather receive buffer); 0: count (contiguous) */
    uint32_t occ;           /* scheduled: occurrence of (tag) on this communicator */
    uint32_t chunk, nchunks; /* a chunk's index and its request's chunk count */
    const char *name;       /* scheduled: the caller's name of the data (owned by the request) */
    uint64_t t_post_ns;     /* when the caller posted it */
    uint64_t t_start_ns;    /* when the operation started (scheduled: its first chunk) */
    uint64_t t_end_ns;      /* scheduled: when its last chunk completed */
    int trace_slot;         /* trace track while running, -1 when not traced */
    struct tempo__cuda_stage *cuda; /* CUDA device buffers: the call's host copies (gpu/cuda.h),
                                     * finished with the request (collectives/api.c); NULL: none */
    void (*on_complete)(tempo__op_t *op); /* called when it completes (engine), NULL: nothing */
    /* Called before its progress while set: 1 lets it run (and clears it), 0 holds it back (its
     * input is still being copied: gpu/cuda.h), < 0 fails it (the message set). NULL: none. */
    int (*gate)(tempo__op_t *op);
    int nccl;          /* its buffers are device memory and it runs on NCCL (gpu/nccl.h) */
    int has_gpu_stream; /* gpu_stream was given (TEMPO_ATTR_STREAM; NULL: the legacy stream) */
    void *gpu_stream;
    uint64_t flight_id; /* its flight recorder entry's id (core/flight.h), 0: none */
    char errmsg[TEMPO_ERRMSG_LEN];
};

/* ---------------------------------------------------------------------------------------------- */
/* World                                                                                          */
/* ---------------------------------------------------------------------------------------------- */

/** Highest context id (15 bits; bit 15 of the tag's context field marks point-to-point). Reserved
 *  for setup messages between ranks (transport/transport.c), like 0 for the initial communicator. */
#define TEMPO_CTX_MAX 0x7fff

typedef struct tempo__world {
    pthread_mutex_t lock;
    int rank;
    int size;
    tempo__peer_t *peers; /* (size) indexed by world rank */
    int nlocal;           /* ranks on this host, this one included */
    int oversubscribed;   /* more ranks on this machine than online CPUs */
    int sleep_at_once;    /* waits sleep in the transports' idle function without spinning:
                           * oversubscribed with every peer remote (sockets wake the sleeper) */
    uint64_t job_uuid;    /* rank 0's uuid */
    uint64_t job_tag;     /* rank 0's tag */
    double timeout_s;

    tempo_status_t failed; /* TEMPO_OK while healthy */
    char failmsg[TEMPO_ERRMSG_LEN];

    tempo__list_t comms;    /* live communicators (tempo_comm.wlink) */
    tempo__list_t notes;    /* control notes from peers, handled after transport progress */
    uint64_t npasses;       /* engine passes so far */
    tempo__list_t held_notes; /* notes for communicators not created here yet (core/check.c) */
    int nheld_notes;
    tempo__list_t active;   /* running operations, in posting order */
    tempo__list_t parked;   /* operations waiting for their turn (not polled, no deadline) */
    uint64_t pass_ns;       /* when the current (or last) progress pass started */
    tempo__list_t free_ops; /* recycled operation objects */
    int ncomms;             /* live communicators */
    /* Context ids. A bit is set from the creation of a communicator with that id until the id is
     * drained: this rank destroyed it and every other member said, by a close marker sent after
     * its own last message of the communicator, that nothing more of it will come (the split and
     * destroy protocol in collectives/api.c). A split uses an id that is clear on every member. */
    uint8_t ctx_used[(TEMPO_CTX_MAX + 1) / 8];
    tempo__list_t closing; /* destroyed communicators not yet drained; entries are single blocks
                            * starting with their list link, owned by collectives/api.c */
    uint64_t last_event_ns; /* when the engine last saw progress (idle strategy) */
    int op_events;          /* progress made inside operations since the last count */

    /* Recently freed scratch buffers, kept for reuse (see tempo__scratch_get). */
    struct {
        void *p;
        size_t bytes;
    } scratch[4];

    /* Pollers: functions the engine calls on every progress pass (the scheduler's control
     * channel), registered by higher layers. */
    tempo__list_t pollers;

    /* Background progress thread (TEMPO_PROGRESS_THREAD): it advances the engine while operations
     * are running and no caller is waiting in the library (a waiting caller drives progress
     * itself, so the two never contend for the lock). */
    pthread_t thread;
    int thread_on;       /* the thread was started */
    int thread_stop;     /* asks it to exit */
    int thread_sleeping; /* it is waiting on cv */
    pthread_cond_t cv;
    int waiters;         /* callers inside a wait (they drive progress) */

    struct tempo__trace *trace; /* TEMPO_TRACE writer, NULL when off */
    /* Flight recorder dumps (core/flight.h). */
    int flight_due;          /* a failure asks for a dump (written at the end of a pass) */
    int flight_failure_done; /* the failure dump was written (once per world) */
    int flight_signals_seen; /* tempo__flight_signals when the last SIGUSR1 dump was written */
    uint64_t failed_ns;      /* ns, monotonic: when the job or a communicator first failed; 0 */

    /* Transport layer, registered by transport/transport.c. */
    void *tl;
    int (*tl_progress)(struct tempo__world *w);              /* returns the number of events */
    int (*tl_idle)(struct tempo__world *w, int timeout_ms); /* sleep until I/O or the timeout;
                                                             * returns TEMPO__WAKE_* */
    /** Publish (1) or withdraw (0) "this rank sleeps" for same-host peers (the shm doorbell);
     *  returns whether it was published. Called with the lock held. */
    int (*tl_doze)(struct tempo__world *w, int sleeping);
    /** The shm doorbell's count of sleeping ranks on this host, NULL without one (read by
     *  tempo__shm_published). */
    _Atomic uint32_t *shm_sleepers;
    /** Why the waits' sleeps ended (TEMPO__WAKE_*): the shm doorbell, socket I/O, the 1 ms timeout.
     *  Under the lock; logged when the world closes (TRANSPORT, INFO). */
    uint64_t wakes[3];
    void (*tl_close)(struct tempo__world *w, int graceful);
    /** Queue a control note (copied) to world rank peer on its data connection, after what was
     *  sent to it before; best effort (a peer that is gone gets nothing). */
    void (*tl_note)(struct tempo__world *w, int peer, const void *data, size_t len);
    /** The same on the pair's control connection (tcp), unordered with the data, where another
     *  transport carries the pair's data; nothing where tcp does (core/blame.c sends on both). */
    void (*tl_note_ctl)(struct tempo__world *w, int peer, const void *data, size_t len);
} tempo__world_t;


enum { TEMPO__WAKE_TIMEOUT = 0, TEMPO__WAKE_IO = 1, TEMPO__WAKE_BELL = 2 };

/** Tag layout: [63] point-to-point, [62:48] context, [47:16] sequence number, [15:0] step.
 *  Point-to-point: [63] = 1, [62:48] context, [47:32] 0, [31:0] user tag. */
static inline uint64_t tempo__tag_coll(int ctx, uint32_t seq, unsigned step)
{
    return ((uint64_t)(ctx & TEMPO_CTX_MAX) << 48) | ((uint64_t)seq << 16) | (step & 0xffffu);
}
static inline uint64_t tempo__tag_p2p(int ctx, uint32_t tag)
{
    return (1ull << 63) | ((uint64_t)(ctx & TEMPO_CTX_MAX) << 48) | tag;
}
/** Internal control messages of a communicator: like point-to-point, with a kind 1..
 *  TEMPO_TAG_CTRL_KINDS in bits [47:32] (user point-to-point tags have zero there; larger kinds are
 *  malformed on the wire). */
#define TEMPO_TAG_CTRL_KINDS 15u
static inline uint64_t tempo__tag_ctrl(int ctx, unsigned kind)
{
    return (1ull << 63) | ((uint64_t)(ctx & TEMPO_CTX_MAX) << 48) | ((uint64_t)(kind & 0xffffu) << 32);
}

/** Sequence numbers: the program-order lane uses [0, 2^31), the scheduled lane [2^31, 2^32), so
 *  their tags never meet. */
#define TEMPO_SEQ_SCHED 0x80000000u

/* ---------------------------------------------------------------------------------------------- */
/* Communicators                                                                                  */
/* ---------------------------------------------------------------------------------------------- */

/** Largest control note between the cores of two ranks (core/check.c), bytes. */
#define TEMPO_NOTE_MAX 1024

/** Signatures of the last TEMPO_SIG_HISTORY collectives of a communicator are kept to answer
 *  probes for calls that already completed here (a count-0 call completes at once). */
#define TEMPO_SIG_HISTORY 64

/** One collective call remembered by a communicator (core/check.c). */
typedef struct tempo__recent {
    uint32_t seq;
    int32_t who;      /* recent: 1 (this rank made the call); prej: the peer's comm rank + 1; 0: empty */
    int32_t rejected; /* recent: the call was rejected here */
    tempo__sig_t sig; /* recent and not rejected before it was signed: its signature */
    char why[128];    /* rejected: why */
} tempo__recent_t;

struct tempo_comm {
    tempo__world_t *world;
    int rank; /* in this communicator */
    int size;
    int *ranks;        /* (size) world rank of each member */
    int ctx;           /* context id, unique among communicators sharing a rank */
    uint32_t next_seq; /* sequence number of the next collective */
    int all_local;     /* every member is on this host */
    tempo__list_t ops; /* operations not yet released (running or not waited for) */
    tempo__list_t wlink; /* on world->comms */
    uint64_t uid;        /* the same on every member, different for every communicator of the job
                          * (the world's: the job's; a split's: from its parent's uid, the split's
                          * number on the parent and the color), even when context ids repeat */
    uint32_t nsplits;    /* splits of this communicator so far (every member counts them) */
    uint64_t probe_pass; /* the engine pass in which one of its operations last considered a probe */

    /* Agreement checks (core/check.c). */
    struct tempo__recent *recent; /* (TEMPO_SIG_HISTORY) this rank's recent calls, by seq */
    struct tempo__recent *prej;   /* (TEMPO_SIG_HISTORY) calls peers told us they rejected */
    tempo_status_t failed;  /* TEMPO_OK, or why every operation on it now fails (ranks disagreed
                             * on a collective: its sequence can no longer be trusted) */
    char failmsg[TEMPO_ERRMSG_LEN];

    char last_error[TEMPO_ERRMSG_LEN];
    void *coll; /* collectives layer state (owned by collectives/) */
    void *gpu;  /* its NCCL communicator, NULL: none yet (gpu/nccl.c) */
    void *ipc;  /* peers' device buffers mapped through CUDA IPC, NULL: none (gpu/ipc.c) */
    void (*coll_free)(struct tempo_comm *comm);
    /* The name of the algorithm whose tempo__sig_t.how is how (not compressed), or NULL. */
    const char *(*algo_name)(uint32_t how);
    struct tempo__flight *flight; /* its last operations (core/flight.h), NULL: recorder off */
    /** The scheduled lane's state as the members of a JSON object ("\"k\": 1, ..."), for the
     *  flight recorder; NULL or "" when it has none (collectives/schedq.c). */
    void (*sched_state)(const struct tempo_comm *comm, char *buf, size_t len);
};

/** World rank of comm rank r. */
static inline int tempo__wrank(const struct tempo_comm *c, int r)
{
    return c->ranks[r];
}

/* ---------------------------------------------------------------------------------------------- */
/* World and communicator lifecycle (core/world.c)                                                */
/* ---------------------------------------------------------------------------------------------- */

/** Create a world from the rendezvous table (size entries). The transports are attached later. */
tempo_status_t tempo__world_create(int rank, int size, const tempo__peer_info_t *table,
                                   double timeout_s, tempo__world_t **world_p);
/** Close the transports (gracefully or not) and free the world. */
void tempo__world_destroy(tempo__world_t *w, int graceful);

/** Record the job's failure (the first one wins), log it, and make every running and later
 * operation fail with it. Returns st. */
tempo_status_t tempo__world_fail(tempo__world_t *w, tempo_status_t st, const char *fmt, ...)
    TEMPO_FMT_PRINTF(3, 4);

/** "rank 3 (host node7, pid 812)" for a world rank. */
const char *tempo__peer_desc(const tempo__world_t *w, int wrank, char *buf, size_t len);

static inline int tempo__ctx_is_used(const tempo__world_t *w, int ctx)
{
    return (w->ctx_used[ctx >> 3] >> (ctx & 7)) & 1;
}
static inline void tempo__ctx_set_used(tempo__world_t *w, int ctx, int used)
{
    if (used) {
        w->ctx_used[ctx >> 3] |= (uint8_t)(1u << (ctx & 7));
    } else {
        w->ctx_used[ctx >> 3] &= (uint8_t)~(1u << (ctx & 7));
    }
}
/** One more than the highest context id in use on this rank. */
int tempo__ctx_hi(const tempo__world_t *w);

/** Create a communicator over world ranks ranks[0..size) (copied), with context id ctx, which must
 *  not be in use on this rank (it is marked used; see ctx_used). */
tempo_status_t tempo__comm_create(tempo__world_t *w, const int *ranks, int size, int my_rank,
                                  int ctx, struct tempo_comm **comm_p);
/** Free a communicator (lock held); returns how many communicators the world still has. With none
 *  left, the caller releases the lock and destroys the world. */
int tempo__comm_free(struct tempo_comm *comm);

/* ---------------------------------------------------------------------------------------------- */
/* Engine (core/engine.c)                                                                         */
/* ---------------------------------------------------------------------------------------------- */

/** A 64-byte aligned scratch buffer of at least bytes (lock held). Large buffers are reused from
 *  recently finished operations: freeing and allocating tens of MB per call would map and fault
 *  fresh pages every time. Return it with tempo__scratch_put(). *cap_p receives its capacity. */
void *tempo__scratch_get(tempo__world_t *w, size_t bytes, size_t *cap_p);
void tempo__scratch_put(tempo__world_t *w, void *p, size_t cap);

/** A zeroed operation on comm with status TEMPO_INPROGRESS and wait_peer -1; NULL on NOMEM. */
tempo__op_t *tempo__op_new(struct tempo_comm *comm, int coll);
/** Run op->cleanup and recycle the operation. */
void tempo__op_release(tempo__op_t *op);
/** Start a prepared operation (progress and args set): give it a deadline, put it on the active
 * list, and advance it once. Returns its status (TEMPO_INPROGRESS, TEMPO_OK or an error). */
tempo_status_t tempo__op_start(tempo__op_t *op);
/** From op's progress function: take op off the active list until tempo__op_unpark (it waits for
 *  its turn on a resource that runs one operation at a time). The progress function returns
 *  TEMPO_INPROGRESS. A failure of the job unparks every parked operation (they then fail). */
void tempo__op_park(tempo__op_t *op);
/** Put a parked op back on the active list with a fresh deadline (lock held; any context). */
void tempo__op_unpark(tempo__op_t *op);
/** From op's progress function: op made progress; its deadline starts again. */
static inline void tempo__op_progressed(tempo__op_t *op)
{
    op->deadline = tempo__deadline_after(op->comm->world->timeout_s);
}
/** From the transports: bytes moved to or from world rank peer in this progress pass. */
static inline uint64_t tempo__pass_now(tempo__world_t *w)
{
    if (!w->pass_ns) {
        w->pass_ns = tempo__now_ns(); /* once per pass, when first needed */
    }
    return w->pass_ns;
}
static inline void tempo__peer_heard(tempo__world_t *w, int peer)
{
    w->peers[peer].heard_ns = tempo__pass_now(w);
}
/** Fail op with st and a message "<description>: <cause>"; returns st. For progress functions. */
tempo_status_t tempo__op_fail(tempo__op_t *op, tempo_status_t st, const char *fmt, ...)
    TEMPO_FMT_PRINTF(3, 4);
/** Bytes of the largest buffer of a collective on n ranks with this count and dtype (the count is
 *  per rank block for reduce-scatter, all-gather and all-to-all); 0 for a barrier. */
size_t tempo__coll_bytes(int coll, tempo_dtype_t dtype, size_t count, int n);
/** Complete op (not started) with st and the calling thread's error text; returns st. */
tempo_status_t tempo__op_error(tempo__op_t *op, tempo_status_t st);
/** "allreduce #12 (1048576 x float32 sum, ring)" */
const char *tempo__op_describe(const tempo__op_t *op, char *buf, size_t len);

/** For progress functions that move data without transport events (shared-memory algorithms):
 *  count it as activity, so waits keep polling instead of sleeping. */
static inline void tempo__engine_note_event(tempo__world_t *w)
{
    w->op_events++;
}

/** A function the engine calls on every progress pass; returns the number of events it handled. */
typedef struct tempo__poller {
    tempo__list_t link;
    int (*fn)(void *arg);
    void *arg;
    int busy; /* it has work even when no operation runs (keeps the progress thread polling) */
} tempo__poller_t;

/** Register / unregister a poller (lock held). p is owned by the caller. */
void tempo__engine_add_poller(tempo__world_t *w, tempo__poller_t *p);
void tempo__engine_remove_poller(tempo__poller_t *p);

/** Start the background progress thread when TEMPO_PROGRESS_THREAD is on (lock not held). */
tempo_status_t tempo__engine_thread_start(tempo__world_t *w);
/** Stop and join it (lock not held). */
void tempo__engine_thread_stop(tempo__world_t *w);
/** Before a public call returns with the lock: wake the progress thread if operations are running
 *  and nobody waits. Cheap when there is nothing to do. */
void tempo__engine_kick(tempo__world_t *w);

/** Advance transports and every running operation once. Returns the number of events. */
int tempo__engine_progress(tempo__world_t *w);
/** Wait for op with the world lock held (it is released while idling). Returns op's status. */
tempo_status_t tempo__op_wait_locked(tempo__op_t *op);
/** Run the engine until cond(arg) is true or the deadline passes (lock held). For setup protocols
 *  outside any operation. */
tempo_status_t tempo__engine_wait_until(tempo__world_t *w, int (*cond)(void *arg), void *arg,
                                        uint64_t deadline, const char *what);

/* ---------------------------------------------------------------------------------------------- */
/* Agreement checks (core/check.c)                                                                */
/* ---------------------------------------------------------------------------------------------- */

static inline int tempo__sig_equal(const tempo__sig_t *a, const tempo__sig_t *b)
{
    return a->count == b->count && a->root == b->root && a->coll == b->coll &&
           a->dtype == b->dtype && a->redop == b->redop && a->valid == b->valid &&
           (a->how == b->how || !a->how || !b->how);
}

/** Set op->sig from the call (a chunk's from its request) and remember it under op->seq for
 *  probes. Point-to-point operations get none. Lock held. */
void tempo__op_sign(tempo__op_t *op);
/** op's algorithm was chosen (how: see tempo__sig_t): set it in op's signature and in the record
 *  that answers probes. Before the algorithm starts (its messages carry it). Lock held. */
void tempo__op_sign_how(tempo__op_t *op, uint32_t how);
/** Fail c for good (not the job): every running and later operation on it fails with st and msg.
 *  The caller tells the other members itself. Lock held. */
void tempo__comm_fail(struct tempo_comm *c, tempo_status_t st, const char *msg);
/** As tempo__comm_fail, and tell every other member (the failure found here: "found by" this
 *  rank is added to what they see). Lock held. */
void tempo__comm_fail_found(struct tempo_comm *c, tempo_status_t st, const char *msg);
/** "count 999 on rank 3, count 1000 on rank 0": what differs between comm rank a's call sa and
 *  comm rank b's call sb (the words of every disagreement message). */
void tempo__sig_diff(const struct tempo_comm *c, int a, const tempo__sig_t *sa, int b,
                     const tempo__sig_t *sb, char *buf, size_t len);
/** op passed every local check and runs (or completed at once): if a peer said it rejected the
 *  same call, the ranks disagree and op's communicator fails (op with it). Lock held. */
void tempo__op_accepted(tempo__op_t *op);
/** op's call differs from the one comm rank peer made under the same sequence number (theirs):
 *  fail op and its communicator for good with TEMPO_ERR_INVALID saying what differs and where,
 *  and tell every other member. Returns TEMPO_ERR_INVALID. Lock held. */
tempo_status_t tempo__op_mismatch(tempo__op_t *op, int peer, const tempo__sig_t *theirs);
/** This rank's collective call seq on c was rejected (bad arguments, or it could not start): tell
 *  the other members, so that a peer that made the call fails with why instead of waiting for
 *  this rank or pairing the call with its next one. Ranks that all rejected the same call stay
 *  in step. Lock held. */
void tempo__comm_rejected(struct tempo_comm *c, uint32_t seq, const char *why);
/** Engine: op has been waiting on a peer for a while: ask that peer whether it called the same
 *  collective under op's sequence number (a mismatch that moves no data is found this way). */
void tempo__op_probe(tempo__op_t *op, uint64_t now);
/** Transport: a control note from world rank src arrived (copied; handled by the engine). */
void tempo__note_arrived(tempo__world_t *w, int src, const void *data, size_t len);
/** c is complete (its uid set): handle the notes its peers sent before it existed here. */
void tempo__comm_ready(struct tempo_comm *c);
/** Engine: handle the notes that arrived. Returns the number handled. Lock held. */
int tempo__notes_handle(tempo__world_t *w);

/* ---------------------------------------------------------------------------------------------- */
/* Blame (core/blame.c)                                                                           */
/* ---------------------------------------------------------------------------------------------- */

/** Control notes of kind >= TEMPO_NOTE_BLAME are about the job, not a communicator: they go to
 *  tempo__blame_note. */
#define TEMPO_NOTE_BLAME 16u
/** Engine: op is past its deadline at now. Returns 1 when it times out now (tempo__blame_timeout),
 *  0 while it waits a short grace for its peers to say whom they wait for. Lock held. */
int tempo__blame_overdue(tempo__op_t *op, uint64_t now);
/** Engine: fail op and the job with TEMPO_ERR_TIMEOUT naming the rank that stopped progressing
 *  (the end of the chain of ranks waiting for each other), and tell every peer. Lock held. */
void tempo__blame_timeout(tempo__op_t *op);
/** A blame note from world rank src (checked here). Lock held. */
void tempo__blame_note(tempo__world_t *w, int src, const void *data, size_t len);
/** Whether world rank wrank's process is running: 1 yes, 0 no (it died), -1 cannot tell (another
 *  machine or pid namespace). */
int tempo__peer_running(const tempo__world_t *w, int wrank);

#endif /* TEMPO_CORE_WORLD_H */
