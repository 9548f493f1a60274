/*
 * tempo.h — the public API of tempo, a communication library for distributed deep-learning
 * training.
 *
 * This header is the specification. Anything not declared here is not API. Every function documents
 * what it does, what it returns, who owns each argument, and its thread-safety.
 *
 * Model
 *   A job is N processes ("ranks"). tempo_comm_init_env() joins them into a communicator through a
 *   TCP rendezvous; tempo_comm_split() derives sub-communicators. Collectives are posted on a
 *   communicator as requests and advanced by a progress engine; every blocking call is "post, then
 *   wait". All ranks of a communicator must call the same collectives in the same order with
 * matching arguments (count, dtype, op, root).
 *
 * Status convention
 *   Functions return tempo_status_t: TEMPO_OK (0), TEMPO_INPROGRESS (1, only from tempo_test), or a
 *   negative error. Output arguments (ending in _p) are written only on success. After an error,
 *   tempo_last_error(comm) returns a sentence saying what failed and why, naming the peer rank,
 * host and pid when a peer is to blame.
 *
 * Faults
 *   Every wait has a deadline (TEMPO_TIMEOUT, default 300 s) that measures silence, not time in a
 *   queue: a request fails with TEMPO_ERR_TIMEOUT, naming the peer, when the peer it waits for has
 *   made no progress for TEMPO_TIMEOUT (no message moved to or from it, and the request did not
 *   advance; the library's own control notes, such as the probes of "Agreement", do not count, so
 *   ranks that wait for each other, a deadlock across communicators included, time out too). The
 *   clock starts when the request starts running, not when it is posted: requests queued behind
 *   others (thousands of small non-blocking collectives posted at once) wait as long as the job
 *   keeps progressing. A timeout fails the job: before giving up, the rank asks its
 *   peers whom they wait for and names the rank that stopped progressing ("waiting for rank 1,
 *   which waits for rank 3, which stopped progressing"), and tells every peer, whose operations
 *   then fail at once with TEMPO_ERR_TIMEOUT ("rank 2 gave up: ... rank 3 ... stopped
 *   progressing") instead of later reporting the rank that gave up as having left. If a peer
 *   process dies or closes its connection without destroying its communicator, every pending and
 *   later operation on the communicator (and on every communicator split from the same initial
 *   one) fails with TEMPO_ERR_REMOTE; on one machine the message says whether the peer's process
 *   still runs. The library never calls exit() or abort().
 *
 * Flow control
 *   A message that arrives before its receive is posted is buffered, but a rank buffers at most
 *   TEMPO_UNEXPECTED_BYTES (default 64 MiB) of such messages per peer (plus 64 KiB of staging). Beyond
 *   that it stops reading from that peer: the peer's sends stall in the transport (socket buffer,
 *   shared-memory ring) until the rank posts receives, and a peer that stays stalled for
 *   TEMPO_TIMEOUT fails with TEMPO_ERR_TIMEOUT naming the rank it waits for. A stopped or slow rank
 *   therefore cannot make the others' memory grow without bound. The limit never blocks a message
 *   the rank waits for: while a receive from the peer is posted, reading goes on (the message may be
 *   behind buffered ones). Memory bound per rank: peers x TEMPO_UNEXPECTED_BYTES, exceeded only
 *   while a posted receive waits behind unexpected data, or while a peer that hung up is drained.
 *
 * Buffers
 *   Buffers are host memory in this version. The caller owns them and must keep them valid and
 *   unmodified (send side) / untouched (receive side) until the request completes. count == 0 is
 *   allowed everywhere and moves no data (collectives on more than one rank still check that the
 *   ranks agree on the call: see "Agreement"). "In-place" layouts are documented per
 *   collective; any other overlap between the send and receive buffers is TEMPO_ERR_INVALID.
 *
 * Determinism
 *   With the same inputs, rank count and algorithm, results are bitwise identical from run to run,
 *   and every rank receives bitwise the same result. fp16 and bf16 reductions accumulate in fp32
 * and round once at the end; TEMPO_AVG is the sum divided by the rank count (integer division for
 *   integer types).
 *
 * Threads
 *   All functions are thread-safe: calls on communicators of one job are serialized internally by a
 *   per-job lock. A request must be waited on or tested by one thread at a time.
 */
#ifndef TEMPO_H
#define TEMPO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && __GNUC__ >= 4
#define TEMPO_API __attribute__((visibility("default")))
#else
#define TEMPO_API
#endif

#define TEMPO_VERSION_MAJOR 0
#define TEMPO_VERSION_MINOR 1
#define TEMPO_VERSION_PATCH 0
#define TEMPO_VERSION_NUMBER \
    (TEMPO_VERSION_MAJOR * 10000 + TEMPO_VERSION_MINOR * 100 + TEMPO_VERSION_PATCH)

/** The library's version as "major.minor.patch"; compare with TEMPO_VERSION_* to detect a header
 *  and library mismatch. */
TEMPO_API const char *tempo_version(void);

/* ============================================================================================== */
/* Status codes                                                                                   */
/* ============================================================================================== */

/** Values are never renumbered or reused. */
typedef enum {
    TEMPO_OK = 0,
    TEMPO_INPROGRESS = 1,       /**< tempo_test(): the request has not completed yet */
    TEMPO_ERR_INVALID = -1,     /**< caller error: bad argument or usage */
    TEMPO_ERR_NOMEM = -2,       /**< out of memory (host memory or /dev/shm space) */
    TEMPO_ERR_SYSTEM = -3,      /**< a system call failed (message carries errno text) */
    TEMPO_ERR_REMOTE = -4,      /**< a peer died, closed its connection or sent malformed data */
    TEMPO_ERR_TIMEOUT = -5,     /**< a deadline (TEMPO_TIMEOUT) passed */
    TEMPO_ERR_UNSUPPORTED = -6, /**< not available in this build or on this communicator */
    TEMPO_ERR_ABORTED = -7,     /**< tempo_comm_abort() was called */
    TEMPO_ERR_INTERNAL = -8, /**< a bug in tempo; please report it with TEMPO_DEBUG=INFO output */
    TEMPO_ERR_BOOTSTRAP =
        -9,              /**< the rendezvous failed (address, launcher variables, job mix-up) */
    TEMPO_ERR_LAST = -10 /**< sentinel, not a status */
} tempo_status_t;

/** A one-line description of a status ("peer failure"); never NULL, also for unknown values. */
TEMPO_API const char *tempo_strerror(tempo_status_t status);

/** The enumerator's name ("TEMPO_ERR_REMOTE"); never NULL. */
TEMPO_API const char *tempo_status_name(tempo_status_t status);

/* ============================================================================================== */
/* Data types and reduction operators                                                             */
/* ============================================================================================== */

typedef enum {
    TEMPO_INT8 = 0,
    TEMPO_UINT8 = 1,
    TEMPO_INT32 = 2,
    TEMPO_UINT32 = 3,
    TEMPO_INT64 = 4,
    TEMPO_UINT64 = 5,
    TEMPO_FLOAT16 = 6,  /**< IEEE binary16; reductions accumulate in fp32 */
    TEMPO_BFLOAT16 = 7, /**< bfloat16; reductions accumulate in fp32 */
    TEMPO_FLOAT32 = 8,
    TEMPO_FLOAT64 = 9,
    TEMPO_DTYPE_COUNT = 10
} tempo_dtype_t;

typedef enum {
    TEMPO_SUM = 0,  /**< integer sums wrap around (two's complement) */
    TEMPO_PROD = 1, /**< integer products wrap around */
    TEMPO_MIN = 2,
    TEMPO_MAX = 3,
    TEMPO_AVG = 4, /**< sum / nranks; integer division for integer types */
    TEMPO_OP_COUNT = 5
} tempo_op_t;

/** Size of one element in bytes, or 0 for an invalid dtype. */
TEMPO_API size_t tempo_dtype_size(tempo_dtype_t dtype);
/** "float32", "bfloat16", ...; "invalid" for out-of-range values. */
TEMPO_API const char *tempo_dtype_name(tempo_dtype_t dtype);
/** "sum", "prod", "min", "max", "avg"; "invalid" for out-of-range values. */
TEMPO_API const char *tempo_op_name(tempo_op_t op);
/** Parse a dtype name. Accepts the tempo names and the nccl-tests aliases (int8, uint8, int32,
 *  uint32, int64, uint64, half/float16/fp16, bfloat16/bf16, float/float32/fp32,
 * double/float64/fp64). Returns TEMPO_ERR_INVALID for unknown names. */
TEMPO_API tempo_status_t tempo_dtype_parse(const char *name, tempo_dtype_t *dtype_p);
/** Parse an op name (sum, prod, min, max, avg). TEMPO_ERR_INVALID for unknown names. */
TEMPO_API tempo_status_t tempo_op_parse(const char *name, tempo_op_t *op_p);

/* ============================================================================================== */
/* Communicators                                                                                  */
/* ============================================================================================== */

typedef struct tempo_comm *tempo_comm_t;
typedef struct tempo_request *tempo_request_t;
/** A gradient compressor (see "Compression" below). */
typedef struct tempo_compressor *tempo_compressor_t;

/** Fields of tempo_config_t that are set (bits of field_mask). Unset fields come from the
 * environment exactly as in tempo_comm_init_env(). */
enum {
    TEMPO_CONFIG_RANK = 1u << 0,    /**< rank and size */
    TEMPO_CONFIG_ROOT = 1u << 1,    /**< root */
    TEMPO_CONFIG_HOST_ID = 1u << 2, /**< host_id */
    TEMPO_CONFIG_TIMEOUT = 1u << 3  /**< timeout_s */
};

typedef struct tempo_config {
    uint64_t field_mask; /**< TEMPO_CONFIG_* bits: which of the fields below are set */
    int rank;            /**< this process's rank, 0 <= rank < size */
    int size;            /**< number of ranks */
    const char *root;    /**< rendezvous address "host:port" (rank 0 listens there) */
    const char
        *host_id;     /**< ranks with equal host ids use shared memory; "%r" expands to the rank */
    double timeout_s; /**< deadline of every wait, in seconds (> 0) */
} tempo_config_t;

/**
 * Create the initial communicator of a job from the environment.
 *
 * Rank and size come from TEMPO_RANK/TEMPO_SIZE, else Open MPI (OMPI_COMM_WORLD_RANK/SIZE), else
 * MPICH/Hydra (PMI_RANK/PMI_SIZE), else Slurm (SLURM_PROCID/SLURM_NTASKS); with none of them the
 * process is a job of one rank. The rendezvous is at TEMPO_ROOT=host:port (rank 0 listens there);
 * without TEMPO_ROOT, a job whose ranks are all on this host meets through a file in $TMPDIR keyed
 * by the launcher's job id (tempo-run sets TEMPO_ROOT itself). Collective over all ranks; blocks
 * until every rank has joined or TEMPO_TIMEOUT passes.
 *
 * @return TEMPO_OK, TEMPO_ERR_INVALID (a TEMPO_* variable out of its range or malformed: the
 *         message names it, its value and what is valid; tempo-info -c lists them all),
 *         TEMPO_ERR_BOOTSTRAP (bad or inconsistent launcher variables, unreachable root,
 *         another job at the rendezvous), TEMPO_ERR_TIMEOUT, TEMPO_ERR_SYSTEM, TEMPO_ERR_NOMEM.
 *         On failure tempo_last_error(NULL) says why.
 */
TEMPO_API tempo_status_t tempo_comm_init_env(tempo_comm_t *comm_p);

/** As tempo_comm_init_env(), with the fields set in config taking precedence over the environment.
 *  config may be NULL. TEMPO_ERR_INVALID for out-of-range fields. */
TEMPO_API tempo_status_t tempo_comm_init(const tempo_config_t *config, tempo_comm_t *comm_p);

/** Value of color that leaves the calling rank out of every new communicator. */
#define TEMPO_UNDEFINED (-1)

/**
 * Split comm into disjoint communicators, one per color (like MPI_Comm_split). Ranks are ordered by
 * key, then by their rank in comm. A rank passing TEMPO_UNDEFINED gets *newcomm_p = NULL.
 * Collective over comm. The new communicator shares the job's connections; it has its own sequence
 * of collectives and its own shared-memory resources. Any number of splits may be created and
 * destroyed over a job's life (context ids are recycled once every member has destroyed the old
 * communicator, and no message of a destroyed communicator reaches a new one); at most 32766 can
 * be alive at once, else TEMPO_ERR_UNSUPPORTED.
 */
TEMPO_API tempo_status_t tempo_comm_split(tempo_comm_t comm, int color, int key,
                                          tempo_comm_t *newcomm_p);

/**
 * Destroy a communicator. Local (not collective): pending requests on it are cancelled and their
 * handles become invalid, so wait for them first. When the last communicator of a job is destroyed,
 * the connections are closed gracefully: peers see a clean departure, not a failure.
 * destroy(NULL) is a no-op. Returns TEMPO_OK, or the error that cancelled pending requests.
 */
TEMPO_API tempo_status_t tempo_comm_destroy(tempo_comm_t comm);

/**
 * Abort: fail every pending request of the job with TEMPO_ERR_ABORTED and close all connections, so
 * that peers fail with TEMPO_ERR_REMOTE instead of hanging. Every communicator of the job is
 * unusable afterwards (operations return TEMPO_ERR_ABORTED) and must still be destroyed.
 */
TEMPO_API tempo_status_t tempo_comm_abort(tempo_comm_t comm);

/** This process's rank in comm, or -1 for NULL. */
TEMPO_API int tempo_comm_rank(tempo_comm_t comm);
/** Number of ranks in comm, or -1 for NULL. */
TEMPO_API int tempo_comm_size(tempo_comm_t comm);

/**
 * The text of the last error on comm (from any call on it or on one of its requests), or of the
 * calling thread's last failed call when comm is NULL (init failures). Empty string if none. The
 * pointer stays valid until the next call on comm (or by this thread, for NULL).
 */
TEMPO_API const char *tempo_last_error(tempo_comm_t comm);

/* ============================================================================================== */
/* Request attributes                                                                             */
/* ============================================================================================== */

enum {
    TEMPO_ATTR_PRIORITY = 1u << 0,   /**< priority (makes the request scheduled, see below) */
    TEMPO_ATTR_TAG = 1u << 1,        /**< tag */
    TEMPO_ATTR_ALGORITHM = 1u << 2,  /**< algorithm */
    TEMPO_ATTR_NAME = 1u << 3,       /**< name */
    TEMPO_ATTR_CHUNK_BYTES = 1u << 4, /**< chunk_bytes */
    TEMPO_ATTR_COMPRESSOR = 1u << 5,  /**< compressor */
    TEMPO_ATTR_MEMTYPE = 1u << 6,     /**< memtype */
    TEMPO_ATTR_STREAM = 1u << 7       /**< stream */
};

/**
 * Optional attributes of a non-blocking operation. Pass NULL for defaults. Fields whose bit is not
 * in field_mask are ignored, so adding fields never breaks existing callers.
 *
 * Scheduled requests
 *   An all-reduce, reduce-scatter or all-gather posted with TEMPO_ATTR_PRIORITY is *scheduled*:
 *   instead of starting at once in posting order, it joins a queue that runs in one order on every
 *   rank, decided by the communicator's rank 0 (the coordinator) from rank-independent keys:
 *   (occurrence, priority, the order in which requests became posted on every rank, chunk). Ranks
 *   may therefore post scheduled requests in different orders and at different times.
 *     - Identity: a scheduled request is identified across ranks by (tag, n), where n counts this
 *       rank's earlier scheduled posts with the same tag on the communicator ("occurrence"; for a
 *       gradient bucket posted once per iteration, the iteration). Every rank must post the same
 *       identities with the same collective, count, dtype and op; a mismatch, or a request some
 *       rank rejected (its arguments) where others posted it, fails the communicator at once with
 *       TEMPO_ERR_INVALID naming the request (see "Agreement"), and a request some rank never
 *       posts fails after TEMPO_TIMEOUT with an error naming it and the ranks that did not post
 *       it.
 *     - Order: smaller occurrence first, then smaller priority (unless TEMPO_SCHED=fifo), then the
 *       order in which requests became posted everywhere. Requests larger than TEMPO_CHUNK_BYTES
 *       (or chunk_bytes) run as chunks, so a more urgent request overtakes at a chunk boundary; at
 *       most TEMPO_CREDIT_BYTES of chunks are in flight at once. The coordinator's values of
 *       priority and chunk_bytes are the ones used.
 *     - Credit and chunk size "auto" (the defaults): the coordinator measures the communicator's
 *       transfer rate R and per-chunk latency L from its own completed chunks (L from chunks
 *       alone on the lane from start to end; a chunk started on an idle lane runs alone as such
 *       a probe while few or only old ones are known, at most once per 32 chunks) and keeps about
 *       R*L + one chunk in flight, in whole chunks of the median recent chunk size (64 KiB to
 *       64 MiB, a ceiling that a chunk starts under only if it fits or nothing runs): one chunk
 *       at a time where the latency is short against a chunk's transfer, so that urgent work
 *       waits for one chunk at most; it adds a chunk while chunks in flight together do not
 *       queue behind each other and work waits for credit, and takes chunks back when they
 *       queue (a link deeper than it measured is climbed a chunk at a time, a shallow one tried
 *       at two chunks now and then, less often each time that is taken back), and cuts
 *       requests without chunk_bytes into chunks of R x 1 ms as a power of two (64 KiB to
 *       4 MiB), re-evaluated as it runs; each change is logged at TEMPO_DEBUG=INFO (OVERLAP) with
 *       the measurements, and drawn in the timeline (counter tracks "sched credit", "sched chunk",
 *       "sched rate MB/s", "sched latency us"). A request is cut once, by the coordinator, and
 *       every rank runs its chunk boundaries, so every rank gets bitwise the same result. The
 *       auto chunk size applies only to requests whose result cannot depend on the boundaries:
 *       uncompressed all-gathers, broadcasts and all-to-alls, integer reductions, and reductions
 *       over 2 ranks (one commutative operation per element). Float reductions over 3 or more
 *       ranks and compressed requests are cut at 4 MiB under auto, since there the boundaries
 *       decide the rounding (as a different fixed TEMPO_CHUNK_BYTES would): runs with the
 *       defaults are bitwise repeatable. A fixed TEMPO_CHUNK_BYTES (or chunk_bytes) applies to
 *       every request. The credit never changes results.
 *     - Scheduled requests never reorder the communicator's other operations, which still run in
 *       posting order as before; the two kinds may be mixed freely.
 *   Other collectives ignore the priority.
 */
/** Where a call's buffers are (tempo_attr_t.memtype). */
typedef enum {
    TEMPO_MEMTYPE_AUTO = 0, /**< found per buffer (the default): CUDA device memory where the CUDA
                             *  driver says so, else host memory */
    TEMPO_MEMTYPE_HOST = 1, /**< host memory (ordinary, page-locked or CUDA managed): not looked up */
    TEMPO_MEMTYPE_CUDA = 2  /**< CUDA device memory (cudaMalloc): refused, with the reason, where
                             *  the CUDA driver or a device is missing */
} tempo_memtype_t;

typedef struct tempo_attr {
    uint64_t field_mask;
    /** Scheduling priority: smaller is more urgent (for gradients, the forward index of the layer
     *  that consumes the result). */
    int priority;
    /** Caller's identifier of the data (for example a tensor id): a scheduled request's identity,
     *  shown in logs and traces. */
    uint64_t tag;
    /** Force an algorithm by name for this request (see tempo_algorithm_info()); overrides
     *  TEMPO_ALGO. TEMPO_ERR_INVALID if unknown for the collective, TEMPO_ERR_UNSUPPORTED if it
     * cannot run on this communicator (for example "shm" across hosts). Every algorithm runs on a
     * communicator of one rank. Every rank must run the same algorithm (forced alike, or by the
     * same TEMPO_ALGO): see "Agreement". */
    const char *algorithm;
    /** Name of the data for errors and traces ("layer3.weight"); copied. */
    const char *name;
    /** Scheduled requests: chunk size in bytes of the largest buffer, overriding TEMPO_CHUNK_BYTES;
     *  SIZE_MAX never splits. */
    size_t chunk_bytes;
    /** All-reduce and reduce-scatter: synchronize through this compressor (see "Compression");
     *  NULL runs uncompressed. Requests smaller than the compressor's min_bytes, and requests on
     *  a one-rank communicator (nothing is sent), run uncompressed: exact, no error feedback (a
     *  request the compressor cannot take still fails alike); other collectives ignore it. Every
     *  rank must pass a compressor of the same spec (or every rank none): see "Agreement". */
    tempo_compressor_t compressor;
    /** Where the buffers are. CUDA device buffers work in every collective and in send/recv: in
     *  this version the call runs on page-locked host copies (copied in when it is posted, out
     *  when it completes: tempo_wait, tempo_test or the blocking call), so device memory may be
     *  reused once the call completes, not before, and costs two copies; several ranks may share
     *  one GPU. Without the attribute (or TEMPO_MEMTYPE_AUTO) each buffer is looked up with the
     *  CUDA driver where one is loaded (libcuda.so.1, at run time; libtempo does not link CUDA);
     *  TEMPO_MEMTYPE_HOST skips the lookup. The ranks of a call need not agree on it. */
    tempo_memtype_t memtype;
    /** A CUDA stream (cudaStream_t or CUstream; NULL with the bit set: the legacy default stream)
     *  that orders the call, as NCCL's calls are ordered: it reads its input after the work
     *  already on the stream, and the stream's later work sees its result, without the caller
     *  waiting for the request. Every non-empty buffer must be CUDA device memory
     *  (TEMPO_ERR_INVALID otherwise); a call without buffers (a barrier) makes the stream wait
     *  for it. In this version (host staging) the posting call waits on the host for the
     *  stream's earlier work (its input is copied to the host), and the progress thread lets the
     *  stream go on when the call completes: TEMPO_PROGRESS_THREAD=0 refuses the attribute. The
     *  request must still be completed (tempo_wait or tempo_test): that is where its status is;
     *  if the call fails, the stream still goes on and the receive buffer's contents are
     *  undefined. TEMPO_ERR_UNSUPPORTED where the CUDA driver is not usable. The ranks of a call
     *  need not agree on it. */
    void *stream;
} tempo_attr_t;

/* ============================================================================================== */
/* Collectives                                                                                    */
/* ============================================================================================== */

/*
 * Every collective exists in a blocking form and a non-blocking form (prefix i, extra attr and
 * request arguments). Arguments common to all:
 *   comm     the communicator
 *   count    elements (per rank where stated), >= 0
 *   dtype    element type
 *   op       reduction operator
 *   root     rank in comm, 0 <= root < size
 * Errors common to all: TEMPO_ERR_INVALID (NULL comm, NULL buffer with count > 0, unknown dtype or
 * op, root out of range, buffers overlapping other than in-place), TEMPO_ERR_REMOTE,
 * TEMPO_ERR_TIMEOUT, TEMPO_ERR_ABORTED, TEMPO_ERR_NOMEM.
 *
 * Agreement. Every rank of a communicator must make the same collective calls in the same order,
 * with the same collective, count, dtype, op (reductions) and root (broadcast, reduce), run the
 * same way: the same algorithm (tempo_attr_t.algorithm, TEMPO_ALGO) and the same compressor spec
 * (tempo_attr_t.compressor; or none on every rank); scheduled requests: see tempo_attr_t. (The
 * in-place form is each rank's own choice: no algorithm's messages depend on it.) Ranks that do not
 * are told so: their calls fail with TEMPO_ERR_INVALID and a message saying what differs and on
 * which ranks ("ranks disagree on collective call #5 of this communicator: count 999 on rank 3,
 * count 1000 on rank 0"; "... algorithm ring on rank 1, algorithm rd on rank 2"; "... a compressor
 * on rank 2, no compressor (algorithm ring) on rank 0"; "... another compressor spec on rank 2,
 * compressor qsgd:bits=4,... on rank 0"), on every path (shared memory, tcp, every algorithm,
 * blocking and non-blocking, scheduled, compressed, split communicators), instead of computing a
 * wrong result or waiting for TEMPO_TIMEOUT.
 *   - How a call runs travels with it at no extra cost: every message's header carries the call's
 *     signature (collective, count, dtype, op, root) and a 32-bit word for how it runs, the
 *     algorithm's number or, for a compressed call, a hash of the compressor's canonical spec
 *     (every parameter, defaults included: tempo_compressor_spec()). The receiver compares both
 *     with its own call's before it uses the data. Only what the messages depend on is compared:
 *     a request that runs uncompressed (smaller than the compressor's min_bytes, spec "none")
 *     agrees with one that passed no compressor, and a count-0 call runs no algorithm. The shared-
 *     memory all-reduce compares the signature only: every rank that takes part runs it
 *     uncompressed, and a rank that runs anything else is found by the probe below.
 *   - Every rank's call fails, not only those that receive from a rank that differs: no call
 *     completes before its rank has heard from every other rank, directly or through ranks that
 *     heard from it, and every message and the shared-memory control words carry the call's
 *     signature, which the receiver compares with its own. Where an algorithm's data would not
 *     reach every rank (a broadcast root only sends, a reduce leaf only sends) it exchanges empty
 *     messages on the pattern of a dissemination barrier: the trees on pairs they do not use,
 *     the pipelines after their last segment. A difference that moves no data is found by a
 *     probe after a rank has waited 200 ms for a peer.
 *   - A call rejected on this rank (bad arguments, an algorithm that cannot run) still counts as
 *     its call under that sequence number (scheduled: as its occurrence of the tag): the other
 *     ranks' calls fail naming why ("rank 0 rejected its call (reduce: recvbuf is NULL with count
 *     1000)"), and they tell the rejecting rank, whose communicator then fails too: its next call
 *     on it fails with the news. Ranks that all reject the same call stay in step.
 *   - After a difference the communicator has failed for good: its sequence of calls can no longer
 *     be trusted, so every pending and later call on it fails with the same message. Destroy it.
 *     Other communicators, the job's included, are not affected.
 *   - Count-0 collectives on more than one rank cost a barrier (scheduled: the coordinator's word
 *     that every rank posted it alike): the ranks still check that they agree.
 *   - The cost: a broadcast or reduce of ceil(log2 n) rounds sends one (mostly empty) message per
 *     rank and round instead of one per tree edge; its critical path is unchanged, but a broadcast
 *     root and a reduce leaf return only when the last rank has taken part.
 */

/** Shared buffers (collective over comm, like NCCL's window registration): every member calls
 *  tempo_mem_alloc in the same order, each for its own size, and gets memory that the members on
 *  its host map too. An all-reduce on a communicator whose ranks are all on one host, whose send
 *  and receive buffers lie in such memory allocated on that communicator on every rank, skips the
 *  shared-memory staging: each rank reduces its block straight from its peers' send buffers into
 *  its result and copies the other blocks from their results (about 2.5 times the vector's bytes
 *  moved per rank at 2 ranks, against 4.5 through the staging; same results, bit for bit). All
 *  ranks or none: a rank whose buffers are in it while a peer's are not fails the call on every
 *  rank (TEMPO_ERR_INVALID). Where the members cannot map each other's memory (another host), the
 *  memory is still returned, as ordinary memory. The memory is zeroed; it stays valid until
 *  tempo_mem_free (local: no peer may still be in an operation on it) or the communicator's
 *  destruction. When the shared memory cannot be created (/dev/shm full), the call fails on every
 *  member alike. */
TEMPO_API tempo_status_t tempo_mem_alloc(tempo_comm_t comm, size_t bytes, void **ptr_p);
TEMPO_API tempo_status_t tempo_mem_free(tempo_comm_t comm, void *ptr);

/** recvbuf[i] = op over ranks of sendbuf[i], on every rank. count elements each.
 *  In-place: sendbuf == recvbuf. */
TEMPO_API tempo_status_t tempo_allreduce(tempo_comm_t comm, const void *sendbuf, void *recvbuf,
                                         size_t count, tempo_dtype_t dtype, tempo_op_t op);
TEMPO_API tempo_status_t tempo_iallreduce(tempo_comm_t comm, const void *sendbuf, void *recvbuf,
                                          size_t count, tempo_dtype_t dtype, tempo_op_t op,
                                          const tempo_attr_t *attr, tempo_request_t *req_p);

/** sendbuf holds size*recvcount elements; rank r receives block r of the reduction in recvbuf
 *  (recvcount elements). In-place: recvbuf == sendbuf + rank*recvcount elements (as NCCL), or
 *  recvbuf == sendbuf (block r lands at the start of the buffer). */
TEMPO_API tempo_status_t tempo_reduce_scatter(tempo_comm_t comm, const void *sendbuf, void *recvbuf,
                                              size_t recvcount, tempo_dtype_t dtype, tempo_op_t op);
TEMPO_API tempo_status_t tempo_ireduce_scatter(tempo_comm_t comm, const void *sendbuf,
                                               void *recvbuf, size_t recvcount, tempo_dtype_t dtype,
                                               tempo_op_t op, const tempo_attr_t *attr,
                                               tempo_request_t *req_p);

/** recvbuf (size*sendcount elements) receives every rank's sendbuf, in rank order. In-place:
 *  sendbuf == recvbuf + rank*sendcount elements (as NCCL), or sendbuf == recvbuf (this rank's block
 *  is read from the start of the buffer before it is overwritten). */
TEMPO_API tempo_status_t tempo_allgather(tempo_comm_t comm, const void *sendbuf, void *recvbuf,
                                         size_t sendcount, tempo_dtype_t dtype);
TEMPO_API tempo_status_t tempo_iallgather(tempo_comm_t comm, const void *sendbuf, void *recvbuf,
                                          size_t sendcount, tempo_dtype_t dtype,
                                          const tempo_attr_t *attr, tempo_request_t *req_p);

/** recvbuf on every rank receives root's sendbuf (count elements). sendbuf is read on root only and
 *  may be NULL elsewhere. In-place: sendbuf == recvbuf on root. */
TEMPO_API tempo_status_t tempo_broadcast(tempo_comm_t comm, const void *sendbuf, void *recvbuf,
                                         size_t count, tempo_dtype_t dtype, int root);
TEMPO_API tempo_status_t tempo_ibroadcast(tempo_comm_t comm, const void *sendbuf, void *recvbuf,
                                          size_t count, tempo_dtype_t dtype, int root,
                                          const tempo_attr_t *attr, tempo_request_t *req_p);

/** root's recvbuf receives the reduction of every rank's sendbuf; recvbuf is ignored (may be NULL)
 *  on other ranks. In-place: sendbuf == recvbuf on root. */
TEMPO_API tempo_status_t tempo_reduce(tempo_comm_t comm, const void *sendbuf, void *recvbuf,
                                      size_t count, tempo_dtype_t dtype, tempo_op_t op, int root);
TEMPO_API tempo_status_t tempo_ireduce(tempo_comm_t comm, const void *sendbuf, void *recvbuf,
                                       size_t count, tempo_dtype_t dtype, tempo_op_t op, int root,
                                       const tempo_attr_t *attr, tempo_request_t *req_p);

/** Block j of sendbuf (count elements per block, size blocks) goes to rank j, which stores it as
 *  block r (the sender's rank) of its recvbuf. In-place: sendbuf == recvbuf. */
TEMPO_API tempo_status_t tempo_alltoall(tempo_comm_t comm, const void *sendbuf, void *recvbuf,
                                        size_t count, tempo_dtype_t dtype);
TEMPO_API tempo_status_t tempo_ialltoall(tempo_comm_t comm, const void *sendbuf, void *recvbuf,
                                         size_t count, tempo_dtype_t dtype,
                                         const tempo_attr_t *attr, tempo_request_t *req_p);

/** Returns once every rank of comm has entered the barrier. */
TEMPO_API tempo_status_t tempo_barrier(tempo_comm_t comm);
TEMPO_API tempo_status_t tempo_ibarrier(tempo_comm_t comm, const tempo_attr_t *attr,
                                        tempo_request_t *req_p);

/** Largest tag accepted by send/recv. */
#define TEMPO_TAG_MAX 0x7fffffffu

/**
 * Point-to-point. Messages between a pair of ranks with the same tag are received in the order they
 * were sent. The receive must post exactly the number of bytes sent (count * dtype size); on a
 * mismatch the receive fails with TEMPO_ERR_INVALID naming both sizes (the message is consumed). A
 * send completes once its data has been handed to the transport, so the sending side cannot learn
 * of the mismatch. A send that does not fit into what the receiver buffers for messages it has not
 * asked for yet (TEMPO_UNEXPECTED_BYTES, see "Flow control") completes only when the receiver posts
 * its receive or waits for a message from this rank: two ranks that exchange large messages should
 * post their receives first (tempo_irecv), as with MPI. peer != own rank; tag <= TEMPO_TAG_MAX.
 */
TEMPO_API tempo_status_t tempo_send(tempo_comm_t comm, const void *buf, size_t count,
                                    tempo_dtype_t dtype, int peer, uint32_t tag);
TEMPO_API tempo_status_t tempo_recv(tempo_comm_t comm, void *buf, size_t count, tempo_dtype_t dtype,
                                    int peer, uint32_t tag);
TEMPO_API tempo_status_t tempo_isend(tempo_comm_t comm, const void *buf, size_t count,
                                     tempo_dtype_t dtype, int peer, uint32_t tag,
                                     const tempo_attr_t *attr, tempo_request_t *req_p);
TEMPO_API tempo_status_t tempo_irecv(tempo_comm_t comm, void *buf, size_t count,
                                     tempo_dtype_t dtype, int peer, uint32_t tag,
                                     const tempo_attr_t *attr, tempo_request_t *req_p);

/* ============================================================================================== */
/* Requests                                                                                       */
/* ============================================================================================== */

/**
 * Advance the engine and report whether *req_p has completed. Returns TEMPO_INPROGRESS if not;
 * otherwise the request's final status, after which the request is freed and *req_p set to NULL.
 * On error, tempo_last_error(comm) describes it. *req_p == NULL returns TEMPO_OK.
 */
TEMPO_API tempo_status_t tempo_test(tempo_request_t *req_p);

/** Block until *req_p completes (or its deadline passes); return its status, free it and set *req_p
 *  to NULL. *req_p == NULL returns TEMPO_OK. */
TEMPO_API tempo_status_t tempo_wait(tempo_request_t *req_p);

/** Wait for all n requests (NULL entries are skipped). statuses may be NULL; otherwise statuses[i]
 *  receives request i's status. Returns TEMPO_OK if all succeeded, else the first error in index
 *  order. Every request is freed and set to NULL, also on error. */
TEMPO_API tempo_status_t tempo_waitall(size_t n, tempo_request_t reqs[], tempo_status_t statuses[]);

/* ============================================================================================== */
/* Timeline markers                                                                               */
/* ============================================================================================== */

/** Mark the beginning and end of the caller's own work (for example a layer's forward pass) on the
 *  timeline written when TEMPO_TRACE is set (track "compute"). Spans must nest; name is copied. Both
 *  do nothing when tracing is off. TEMPO_ERR_INVALID for a NULL comm or name. Thread-safe. */
TEMPO_API tempo_status_t tempo_trace_begin(tempo_comm_t comm, const char *name);
TEMPO_API tempo_status_t tempo_trace_end(tempo_comm_t comm, const char *name);

/* ============================================================================================== */
/* Bucketer: gradient synchronization overlapped with backward and the next forward               */
/* ============================================================================================== */

/*
 * A bucketer synchronizes a model's gradients over a communicator while the caller computes.
 *
 *   1. Register the tensors once (tempo_bucketer_create, collective): the registration must be
 *      identical on every rank (checked with a hash; a difference is TEMPO_ERR_INVALID naming the
 *      ranks). The bucketer fuses tensors into buckets in their expected ready order (last layer
 *      first): the first bucket holds at most first_bucket_bytes or bucket_bytes, the smaller
 *      (so communication starts early), the others at most bucket_bytes; a tensor larger than that is a bucket of its own, which the
 *      engine runs in chunks. Only tensors of one dtype share a bucket. A bucket whose tensors fill
 *      one contiguous range of memory is reduced in place; others go through a fusion buffer.
 *   2. Each iteration: tempo_bucketer_begin(), then as backward produces each tensor's gradient,
 *      tempo_bucketer_ready() (or tempo_bucketer_skip() for a tensor without a gradient this
 *      iteration). A bucket is posted as a scheduled request (see tempo_attr_t) once all its
 *      tensors are ready, with the priority of its most urgent layer under the policy (fifo: none;
 *      tic: TicTac's TIC order from the layer graph; tac: TicTac's TAC order from measured times;
 *      TEMPO_DEBUG=INFO with OVERLAP logs each bucket's priority at creation and when TAC's
 *      order is computed).
 *   3. Before using a tensor's synchronized gradient (for example in the next forward pass, just
 *      before the layer runs), wait for it: tempo_bucketer_wait_layer / _tensor / _all. Only the
 *      buckets holding it are waited for. A tensor's buffer must not be written again (new
 *      gradients) before its previous synchronization was waited for; tempo_bucketer_ready() waits
 *      for it if the caller did not.
 *
 * Gradient accumulation: tempo_bucketer_begin(b, 0) opens a micro-step without synchronization;
 * ready/skip calls are checked but nothing is sent, and the gradients stay local.
 * Skipped tensors: the buffer is zeroed and reduced with the others, so after synchronization it
 * holds the reduction over the ranks that had a gradient (for TEMPO_AVG, divided by all ranks,
 * as PyTorch DDP does with unused parameters).
 *
 * Numbers: an iteration runs from one tempo_bucketer_begin() to the next; tempo_bucketer_stats()
 * gives the last completed one and means over those completed since tempo_bucketer_stats_reset()
 * (a begin() after the reset completes the iteration it closes: to measure from iteration i on,
 * reset right after the begin() that opens i). With TEMPO_TRACE,
 * layer compute markers, iterations and their numbers appear on the timeline.
 *
 * Threads: a bucketer is used by one thread at a time.
 */

typedef struct tempo_bucketer *tempo_bucketer_t;

/** One registered tensor. */
typedef struct tempo_tensor_desc {
    uint64_t id;         /**< caller's identifier, unique in the registration */
    void *grad;          /**< gradient buffer: count elements of dtype, synchronized in place; it
                          *   must stay valid while the bucketer exists */
    size_t count;        /**< elements (> 0) */
    tempo_dtype_t dtype; /**< element type */
    int layer;           /**< forward index (>= 0) of the layer that consumes the result */
    const char *name;    /**< optional name for errors and traces ("h.3.attn.w"); copied */
} tempo_tensor_desc_t;

/** Scheduling policies (TEMPO_SCHED). */
typedef enum {
    TEMPO_SCHED_FIFO = 0, /**< the order buckets become ready on every rank */
    TEMPO_SCHED_TIC = 1,  /**< TicTac TIC: from the layer graph (a chain: forward order) */
    TEMPO_SCHED_TAC = 2   /**< TicTac TAC: from measured compute and transfer times */
} tempo_sched_t;

enum {
    TEMPO_BUCKETER_OP = 1u << 0,           /**< op */
    TEMPO_BUCKETER_BUCKET_BYTES = 1u << 1, /**< bucket_bytes */
    TEMPO_BUCKETER_FIRST_BYTES = 1u << 2,  /**< first_bucket_bytes */
    TEMPO_BUCKETER_SCHED = 1u << 3,        /**< sched */
    TEMPO_BUCKETER_CHUNK_BYTES = 1u << 4,  /**< chunk_bytes */
    TEMPO_BUCKETER_TAC_WARMUP = 1u << 5,   /**< tac_warmup */
    TEMPO_BUCKETER_COMPRESSOR = 1u << 6    /**< compressor */
};

/** Bucketer options; fields whose bit is not in field_mask take their defaults. */
typedef struct tempo_bucketer_config {
    uint64_t field_mask;
    tempo_op_t op;             /**< reduction (TEMPO_AVG) */
    size_t bucket_bytes;       /**< fusion size (TEMPO_BUCKET_BYTES) */
    size_t first_bucket_bytes; /**< first bucket's cap (TEMPO_BUCKET_FIRST_BYTES), at most
                                    bucket_bytes */
    tempo_sched_t sched;       /**< policy (TEMPO_SCHED) */
    size_t chunk_bytes;        /**< chunk size of its requests (TEMPO_CHUNK_BYTES); SIZE_MAX: none */
    int tac_warmup;            /**< tac: iterations measured before the order, >= 1
                                    (TEMPO_TAC_WARMUP) */
    /** Compressor of float32 buckets (default: one made from TEMPO_COMPRESS, owned by the
     *  bucketer; NULL: none). The caller keeps a given compressor alive until the bucketer is
     *  destroyed. Every rank must use the same spec (checked at creation). */
    tempo_compressor_t compressor;
} tempo_bucketer_config_t;

/**
 * Create a bucketer over comm for n tensors (copied). Collective over comm: every rank must pass
 * the same registration (ids, counts, dtypes, layers, names, in the same order) and the same
 * config; TEMPO_ERR_INVALID otherwise, naming the ranks that differ. config may be NULL.
 */
TEMPO_API tempo_status_t tempo_bucketer_create(tempo_comm_t comm, const tempo_tensor_desc_t *tensors,
                                               size_t n, const tempo_bucketer_config_t *config,
                                               tempo_bucketer_t *b_p);

/**
 * Optional: the dependency graph of the forward pass, for the tic and tac policies (default: a
 * chain, layer i after layer i-1). Layers 0..nlayers-1; the predecessors of layer i are
 * pred[pred_off[i] .. pred_off[i+1]). Must be acyclic and cover every registered layer; call before
 * the first iteration, with the same graph on every rank.
 */
TEMPO_API tempo_status_t tempo_bucketer_set_graph(tempo_bucketer_t b, int nlayers,
                                                  const int *pred_off, const int *pred);

/** Open the next iteration (closing the previous one). sync = 0: a micro-step of gradient
 *  accumulation, nothing is synchronized. TEMPO_ERR_INVALID if the previous synchronizing
 *  iteration left tensors neither ready nor skipped (named in the message). */
TEMPO_API tempo_status_t tempo_bucketer_begin(tempo_bucketer_t b, int sync);
/** Tensor id's gradient is final for this iteration. TEMPO_ERR_INVALID for an unknown id or a
 *  tensor already marked in this iteration. */
TEMPO_API tempo_status_t tempo_bucketer_ready(tempo_bucketer_t b, uint64_t id);
/** Tensor id has no gradient this iteration (see above). */
TEMPO_API tempo_status_t tempo_bucketer_skip(tempo_bucketer_t b, uint64_t id);

/** Wait until tensor id's gradient of the last synchronized iteration is synchronized (in its
 *  buffer). Returns at once when nothing is pending. TEMPO_ERR_INVALID when its bucket still has
 *  tensors not marked ready (named in the message): waiting would never end. */
TEMPO_API tempo_status_t tempo_bucketer_wait_tensor(tempo_bucketer_t b, uint64_t id);
/** As wait_tensor for every tensor of a layer. */
TEMPO_API tempo_status_t tempo_bucketer_wait_layer(tempo_bucketer_t b, int layer);
/** As wait_tensor for every tensor. */
TEMPO_API tempo_status_t tempo_bucketer_wait_all(tempo_bucketer_t b);

/** Phases of compute markers. */
typedef enum { TEMPO_PHASE_FORWARD = 0, TEMPO_PHASE_BACKWARD = 1 } tempo_phase_t;

/** Optional compute markers around a layer's forward or backward computation: they feed the tac
 *  policy (forward time per layer) and the timeline. Spans must not nest. */
TEMPO_API tempo_status_t tempo_bucketer_compute_begin(tempo_bucketer_t b, int layer,
                                                      tempo_phase_t phase);
TEMPO_API tempo_status_t tempo_bucketer_compute_end(tempo_bucketer_t b);

/** Per-iteration numbers (seconds). */
typedef struct tempo_bucketer_stats {
    long iterations;   /**< synchronizing iterations in the means */
    double iter_s;     /**< iteration time: from one tempo_bucketer_begin() to the next */
    double compute_s;  /**< the caller's time outside bucketer waits (iteration - exposed) */
    double comm_s;     /**< communication busy time: the union of the bucketer's transfers */
    double exposed_s;  /**< time the caller spent blocked in bucketer waits */
    double overlap;    /**< share of communication hidden behind compute: 1 - exposed/comm */
    double efficiency; /**< TicTac's E = (U - T)/(U - L), U = compute + comm, L = max of both */
    double bytes;      /**< gradient bytes synchronized */
} tempo_bucketer_stats_t;

/** Numbers of the last completed synchronizing iteration (last_p) and their means since creation
 *  or the last reset (mean_p); either may be NULL. */
TEMPO_API tempo_status_t tempo_bucketer_stats(tempo_bucketer_t b, tempo_bucketer_stats_t *last_p,
                                              tempo_bucketer_stats_t *mean_p);
TEMPO_API tempo_status_t tempo_bucketer_stats_reset(tempo_bucketer_t b);

/** The bucket layout, for logs and tests: number of buckets; with info_p, bucket i's first layer
 *  (most urgent), tensor count, bytes and current priority. */
typedef struct tempo_bucket_info {
    int min_layer, max_layer;
    size_t ntensors;
    size_t bytes;
    tempo_dtype_t dtype; /**< every tensor of a bucket has this type */
    int priority;
    int in_place; /**< reduced in the tensors' own memory (no fusion buffer) */
    int compressed; /**< synchronized through the bucketer's compressor (float32 buckets of at
                         least its min bytes) */
} tempo_bucket_info_t;
TEMPO_API size_t tempo_bucketer_nbuckets(tempo_bucketer_t b);
TEMPO_API tempo_status_t tempo_bucketer_bucket_info(tempo_bucketer_t b, size_t i,
                                                    tempo_bucket_info_t *info_p);

/** Wait for pending synchronizations and free the bucketer. destroy(NULL) is a no-op. */
TEMPO_API tempo_status_t tempo_bucketer_destroy(tempo_bucketer_t b);

/* ============================================================================================== */
/* Compression                                                                                    */
/* ============================================================================================== */

/*
 * A compressor encodes float32 gradients for the wire. It is made from a spec, "name:key=value,...",
 * each key at most once ("alq:bits=3,bits=4" is TEMPO_ERR_INVALID):
 *
 *   none                    no compression (the plain collective)
 *   fp16, bf16              cast; summed as 16-bit values by an ordinary ring (divide first for avg)
 *   qsgd                    L2 norm per bucket, evenly spaced levels, unbiased stochastic rounding
 *   qsgdinf                 the same with the L-inf norm
 *   nuqsgd                  L2 norm, levels ±mul^k (mul = 0.5)
 *   terngrad                L-inf norm, levels {-1, 0, 1}; clip=1: clip at 2.5 std first (biased)
 *   alq, alq-n              adaptive levels fitted by coordinate descent (Faghri et al. 2020) to a
 *                           model of the normalized coordinates: a norm-weighted mixture of the
 *                           largest-norm buckets (alq) or one truncated normal (alq-n)
 *   amq, amq-n              adaptive levels ±p^k, p fitted by gradient descent
 *   sign                    scaled sign per bucket (EF-signSGD; error feedback on by default)
 *   topk                    the ratio largest coordinates with their indices (error feedback)
 *   randk                   ratio coordinates chosen by a seed shared by the ranks (error feedback,
 *                           or ef=0: unbiased scaling)
 *   powersgd                rank-r approximation P Q^T, warm-started, with error feedback
 *
 * Parameters (each compressor accepts those that apply; tempo_compressor_kind() lists them):
 *   bits=3          bits per level index (level compressors)
 *   bucket=8192     coordinates per normalized bucket
 *   zero=0          level convention: 0 = 2^bits signed levels without a zero level (the ALQ
 *                   authors' code; a coordinate near 0 rounds to -l1 or +l1); 1 = a zero level
 *                   and a sign bit (the paper): 2^bits - 1 levels
 *   entropy=none    none | rans | zstd: entropy stage over the level indices
 *   refit=0;100;2000;10000   adaptive levels are fitted at these calls per tensor, then every
 *                   last-entry calls, from statistics gathered from every rank (identical levels
 *                   everywhere)
 *   dist=20         mixture model: buckets with the largest norms kept
 *   mul=0.5, clip=0, ef=0|1, ratio=0.01, rank=4
 *   min=32768       requests with fewer input bytes per rank run uncompressed
 *   seed=0          seed of stochastic rounding and random-k
 *
 * State: error-feedback residuals, fitted levels and PowerSGD's warm start are kept per tensor,
 * keyed by the request's tag (TEMPO_ATTR_TAG; the bucketer tags every bucket), so tensors must keep
 * their tag from step to step. Compressors with error feedback require a tag.
 *
 * Collectives: unbiased per-bucket quantizers (qsgd, qsgdinf, nuqsgd, terngrad without clipping,
 * alq, amq) run two phases: an all-to-all of encoded blocks, each rank decodes and sums its block,
 * re-encodes it and the blocks are all-gathered (two quantizations per coordinate, unbiased).
 * sign and topk all-gather the encoded vectors; fp16, bf16 and randk sum their encoded form in a
 * ring; powersgd all-reduces P and Q. Every rank receives bitwise the same result. Only float32
 * with TEMPO_SUM or TEMPO_AVG is compressed (TEMPO_ERR_UNSUPPORTED otherwise).
 *
 * TEMPO_COMPRESS (a spec) is the default compressor of bucketers; a spec that tempo_compressor_create
 * would refuse makes tempo_comm_init_env() fail with TEMPO_ERR_INVALID (see tempo_env_var()).
 *
 * Threads: a compressor may be used by requests of one job; calls are serialized by the job lock.
 */

/** Create a compressor from spec. TEMPO_ERR_INVALID for a bad spec; tempo_last_error(NULL) then
 *  lists the valid compressors or the valid parameters of the one named. Local (not collective). */
TEMPO_API tempo_status_t tempo_compressor_create(const char *spec, tempo_compressor_t *qc_p);
/** Free a compressor and its state; no request may still use it. destroy(NULL) is a no-op. */
TEMPO_API tempo_status_t tempo_compressor_destroy(tempo_compressor_t qc);
/** The canonical spec with every parameter ("alq:bits=3,bucket=8192,zero=0,..."); valid while qc
 *  lives. */
TEMPO_API const char *tempo_compressor_spec(tempo_compressor_t qc);

/** Most bytes tempo_compressor_encode() writes for count coordinates. */
TEMPO_API size_t tempo_compressor_bound(tempo_compressor_t qc, size_t count);
/**
 * Encode count float32 coordinates locally (no communication), as a collective would for tensor
 * key: with error feedback the key's residual is added first and updated; adaptive levels are
 * fitted from this input on the refit schedule. *len_p receives the bytes written (at most cap;
 * TEMPO_ERR_INVALID if cap < tempo_compressor_bound()). Not for powersgd (TEMPO_ERR_UNSUPPORTED):
 * its encoding needs the other ranks.
 */
TEMPO_API tempo_status_t tempo_compressor_encode(tempo_compressor_t qc, uint64_t key,
                                                 const float *in, size_t count, void *out,
                                                 size_t cap, size_t *len_p);
/** Decode what tempo_compressor_encode() wrote for key into count coordinates. TEMPO_ERR_INVALID
 *  for a malformed input. */
TEMPO_API tempo_status_t tempo_compressor_decode(tempo_compressor_t qc, uint64_t key,
                                                 const void *in, size_t len, size_t count,
                                                 float *out);
/** The level table tensor key uses now (level compressors): up to cap levels into levels (NULL:
 *  count only), *n_p the number of levels. TEMPO_ERR_INVALID for other compressors or a key that
 *  has not been encoded yet with adaptive levels. */
TEMPO_API tempo_status_t tempo_compressor_levels(tempo_compressor_t qc, uint64_t key,
                                                 float *levels, size_t cap, size_t *n_p);

/** Counters of a compressor since creation (all ranks' requests on this process). */
typedef struct tempo_compressor_stats {
    uint64_t calls;     /**< vectors encoded (a two-phase request counts both phases) */
    uint64_t coords;    /**< float32 coordinates encoded */
    uint64_t bytes_out; /**< bytes they were encoded into (norms and headers included) */
    double encode_s;    /**< time spent encoding */
    double decode_s;    /**< time spent decoding */
    uint64_t fits;      /**< level fits */
    double fit_s;       /**< time spent gathering statistics and fitting levels */
} tempo_compressor_stats_t;
TEMPO_API tempo_status_t tempo_compressor_stats(tempo_compressor_t qc,
                                                tempo_compressor_stats_t *stats_p);

/** One compressor kind, for help texts. */
typedef struct tempo_compressor_kind {
    const char *name;   /**< "alq" */
    const char *doc;    /**< one line */
    const char *params; /**< accepted parameters with defaults: "bits=3,bucket=8192,..." */
    int unbiased;       /**< E[decode(encode(v))] = v */
    int reduce_scatter; /**< also compresses reduce-scatter; 0: all-reduce only (powersgd: its
                             low-rank factors need the whole matrix), and a compressed
                             reduce-scatter fails with TEMPO_ERR_UNSUPPORTED */
} tempo_compressor_kind_t;
/** Entry index of the compressor table; TEMPO_ERR_INVALID past the end. */
TEMPO_API tempo_status_t tempo_compressor_kind(size_t index, tempo_compressor_kind_t *kind_p);

/* ============================================================================================== */
/* Introspection (used by tempo-info)                                                             */
/* ============================================================================================== */

/** One item of the build configuration: name ("cuda", "nccl", "ucx", "verbs", "zstd", "hwloc",
 * "mpi", "debug", ...) and value ("yes (12.8, /usr/local/cuda)", "no (not found)", ...). */
typedef struct tempo_build_item {
    const char *name;
    const char *value;
} tempo_build_item_t;

/** The build configuration as an array of *items_p (static storage); returns its length. */
TEMPO_API size_t tempo_build_info(const tempo_build_item_t **items_p);

/** One TEMPO_* environment variable of the configuration table. Every value is either used as
 *  given or refused: tempo_comm_init_env() fails with TEMPO_ERR_INVALID and the message in error,
 *  which names the variable, the value and what is valid (its range). */
typedef struct tempo_env_var {
    const char *name;          /**< "TEMPO_TIMEOUT" */
    const char *default_value; /**< as text; "" when there is no default */
    const char *value;         /**< current value from the environment, or NULL when unset */
    const char *type;          /**< "time", "size", "size|auto", "int", "bool", "string", "enum",
                                    "list" */
    const char *doc;           /**< what it means, with its valid range */
    const char *used;          /**< the value the library uses (the default when unset), as
                                    text that reads back as the same value ("256K", "300s",
                                    "WARN"; "" for an unset variable without default); NULL when
                                    value is refused */
    const char *error;         /**< NULL, or why value is refused */
} tempo_env_var_t;

/** Entry index of the configuration table; TEMPO_ERR_INVALID past the end, TEMPO_ERR_NOMEM. The
 *  strings used and error stay valid until the calling thread calls tempo_env_var() again. */
TEMPO_API tempo_status_t tempo_env_var(size_t index, tempo_env_var_t *var_p);

/** One transport. */
typedef struct tempo_transport_info {
    const char *name;   /**< "shm", "tcp", "ucx", "verbs" */
    int available;      /**< usable on this machine in this build */
    const char *detail; /**< how it is used, or why it is not available */
} tempo_transport_info_t;

/** Entry index of the transport table; TEMPO_ERR_INVALID past the end. */
TEMPO_API tempo_status_t tempo_transport_info(size_t index, tempo_transport_info_t *info_p);

/** One collective algorithm. */
typedef struct tempo_algorithm_info {
    const char
        *collective;  /**< "allreduce", "reduce_scatter", ... (the names used by TEMPO_ALGO) */
    const char *name; /**< "ring", "rhd", ... */
    const char *doc;  /**< one line */
} tempo_algorithm_info_t;

/** Entry index of the algorithm table; TEMPO_ERR_INVALID past the end. */
TEMPO_API tempo_status_t tempo_algorithm_info(size_t index, tempo_algorithm_info_t *info_p);

#ifdef __cplusplus
}
#endif

#endif /* TEMPO_H */
