/*
 * cfg.c — the one table of TEMPO_* variables and its parser (UCX config tables, redis
 * static_configs[]). Each entry: name, default as text, type, doc string, offset into
 * tempo__config_t and size of the field. Defaults are parsed by the same code as user values, so
 * the documented default is what the library uses. Values that differ from the default are logged
 * once under ENV.
 */
#include "config.h"

#include "core/tempo_int.h"
#include "core/cfg.h"
#include "core/sock.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <strings.h>

tempo__config_t tempo__cfg;

typedef enum {
    T_INT,
    T_STRING,
    T_TIME,
    T_SIZE,
    T_ASIZE, /* a size, or "auto" (stored as 0) */
    T_BOOL,
    T_LEVEL,
    T_SUBSYS,
    T_SCHED,
    T_ROOT /* host:port */
} field_type_t;

/* Extra rules of a field beyond its type and range. */
enum {
    F_POW2 = 1u << 0,  /* a power of two */
    F_ALIGN = 1u << 1, /* a multiple of a cache line (TEMPO_CACHELINE) */
    F_ZERO = 1u << 2,  /* 0 is also valid (a size meaning "no limit") */
    F_SECRET = 1u << 3 /* never shown: tempo_env_var reports "(set, N bytes)" */
};

typedef struct {
    const char *name;
    const char *default_value;
    field_type_t type;
    size_t offset;
    size_t size;
    double lo, hi;  /* T_INT, T_TIME, T_SIZE, T_ASIZE: the valid range, inclusive (seconds, bytes) */
    unsigned flags; /* F_* */
    /* Strings that a higher layer interprets (TEMPO_ALGO, TEMPO_COMPRESS): its check, so that a
     * bad value is refused when the table is loaded, by the code that will read it. */
    tempo_status_t (*check)(const char *text);
    const char *doc;
} field_t;

#define F(name, def, type, member, lo, hi, flags, check, doc)                                   \
    {                                                                                            \
        name, def, type, offsetof(tempo__config_t, member),                                     \
            sizeof(((tempo__config_t *)0)->member), lo, hi, flags, check, doc                    \
    }
#define KiB 1024.0
#define GiB (1024.0 * 1024.0 * 1024.0)
#define NOLIMIT 1.8446744073709552e19 /* 2^64: any size the parser reads */
#define MAXRANKS 1073741824.0         /* 2^30 */

/* TEMPO_GPU_BACKEND: native, or nccl where the build has NCCL. */
static tempo_status_t gpu_backend_check(const char *text)
{
    if (!strcmp(text, "native")) {
        return TEMPO_OK;
    }
    if (strcmp(text, "nccl") != 0) {
        return tempo__err(TEMPO_ERR_INVALID, "TEMPO_GPU_BACKEND=%s: expected native or nccl", text);
    }
#if !(TEMPO_HAVE_CUDA && TEMPO_HAVE_NCCL)
    return tempo__err(TEMPO_ERR_UNSUPPORTED, "TEMPO_GPU_BACKEND=nccl, but this build has no "
                      "NCCL (configure found none)");
#else
    return TEMPO_OK;
#endif
}

/* TEMPO_IB_HCA: a device name, optionally ":port" with a port number 1-255. */
static tempo_status_t ib_hca_check(const char *text)
{
    const char *colon = strchr(text, ':');
    if (colon == text) {
        return tempo__err(TEMPO_ERR_INVALID, "TEMPO_IB_HCA=%s: the device name is missing", text);
    }
    if (colon) {
        char *end;
        long port = strtol(colon + 1, &end, 10);
        if (colon[1] < '0' || colon[1] > '9' || *end || port < 1 || port > 255) {
            return tempo__err(TEMPO_ERR_INVALID,
                              "TEMPO_IB_HCA=%s: the port after ':' must be a number from 1 to "
                              "255 (device or device:port)",
                              text);
        }
    }
    return TEMPO_OK;
}

static const field_t fields[] = {
    F("TEMPO_RANK", "", T_INT, rank, 0, MAXRANKS - 1, 0, NULL,
      "Rank of this process, 0 <= rank < TEMPO_SIZE (set by tempo-run; otherwise taken from Open "
      "MPI, MPICH/Hydra or Slurm variables)"),
    F("TEMPO_SIZE", "", T_INT, size, 1, MAXRANKS, 0, NULL, "Number of ranks of the job"),
    F("TEMPO_LOCAL_SIZE", "", T_INT, local_size, 1, MAXRANKS, 0, NULL,
      "Number of ranks on this host, at most TEMPO_SIZE (set by tempo-run; lets a job on one "
      "host meet without TEMPO_ROOT)"),
    F("TEMPO_ROOT", "", T_ROOT, root, 0, 0, 0, NULL,
      "Rendezvous address host:port (port 1-65535); rank 0 listens there. Unset: a job on one "
      "host meets through a file in $TMPDIR keyed by the launcher's job id"),
    F("TEMPO_ROOT_FD", "", T_INT, root_fd, 0, 1 << 30, 0, NULL,
      "Set by tempo-run for rank 0: a socket already listening at TEMPO_ROOT, which rank 0 "
      "uses instead of binding the port itself (a port released for it could be taken first)"),
    F("TEMPO_JOB_ID", "", T_STRING, job_id, 0, 0, 0, NULL,
      "Job identity checked at the rendezvous, so that concurrent jobs cannot mix (default: the "
      "launcher's job id, else the parent pid)"),
    F("TEMPO_IFNAME", "", T_STRING, ifname, 0, 0, 0, NULL,
      "Network interface (e.g. eth0, ib0) whose address this rank's data transport listens at "
      "and gives its peers. Unset: the address this rank reaches the rendezvous from (rank 0: "
      "TEMPO_ROOT's)"),
    F("TEMPO_HOST_ID", "", T_STRING, host_id, 0, 0, 0, NULL,
      "Override the host identity: ranks with equal ids use shared memory, others TCP. '%r' "
      "expands to the rank, so TEMPO_HOST_ID=%r forces TCP between local ranks (default: hash of "
      "host name, boot id and network/mount namespaces)"),
    F("TEMPO_TIMEOUT", "300s", T_TIME, timeout_s, 1e-3, 8760 * 3600.0, 0, NULL,
      "Deadline of every wait and of the rendezvous, 1ms to 8760h (units us, ms, s, m, h)"),
    F("TEMPO_DEBUG", "WARN", T_LEVEL, debug_level, 0, 0, 0, NULL,
      "Log level: NONE, WARN, INFO, DEBUG, TRACE"),
    F("TEMPO_DEBUG_SUBSYS", "INIT,ENV", T_SUBSYS, debug_subsys, 0, 0, 0, NULL,
      "Subsystems logged at INFO and below: INIT, COLL, TRANSPORT, TOPO, QUANT, OVERLAP, ENV, ALL, "
      "each at most once (ALL alone); a leading ^ excludes"),
    F("TEMPO_DEBUG_FILE", "", T_STRING, debug_file, 0, 0, 0, NULL,
      "Write log lines to this file instead of stderr; %h host, %p pid, %r rank"),
    F("TEMPO_ALGO", "", T_STRING, algo, 0, 0, 0, tempo__algo_check,
      "Force algorithms per collective, each collective at most once, e.g. "
      "allreduce:ring,broadcast:pipeline (see tempo-info -a)"),
    F("TEMPO_TRANSPORTS", "", T_STRING, transports, 0, 0, 0, tempo__tl_spec_check,
      "Ordered preference of data transports, comma-separated (shm, tcp, ucx, verbs; ^name "
      "excludes one): each peer goes to the first that reaches it. shm goes first within a host "
      "unless placed or excluded; unset: shm, then tcp. tcp always connects every pair for setup "
      "and liveness, and carries data only when listed (or by default). Must be the same on every "
      "rank"),
    F("TEMPO_SHM", "1", T_BOOL, shm, 0, 0, 0, NULL,
      "Use shared memory between ranks of the same host"),
    F("TEMPO_SHM_RING_BYTES", "256K", T_SIZE, shm_ring_bytes, 4 * KiB, GiB, F_POW2, NULL,
      "Size of each shared-memory ring between two ranks of a host (one per direction): a power "
      "of two from 4K to 1G"),
    F("TEMPO_SHM_BELL", "1", T_BOOL, shm_bell, 0, 0, 0, NULL,
      "A rank sleeping in a wait is woken by a same-host peer's shared-memory data at once (a "
      "doorbell datagram) instead of at its next 1 ms tick"),
    F("TEMPO_SHM_COLL_BYTES", "512K", T_SIZE, shm_coll_bytes, 4 * KiB, GiB, F_ALIGN, NULL,
      "Per-rank staging area of the shared-memory collectives (segment size of the pipeline): a "
      "multiple of 64 from 4K to 1G"),
    F("TEMPO_SHM_CMA", "1", T_BOOL, shm_cma, 0, 0, 0, NULL,
      "Cross-memory attach (process_vm_readv) where ptrace permission allows it (checked at "
      "setup): shared-memory messages of TEMPO_SHM_CMA_BYTES and more are copied once instead of "
      "twice through the rings, and TEMPO_SHM_DIRECT can use it. 0: neither"),
    F("TEMPO_SHM_DIRECT", "0", T_BOOL, shm_direct, 0, 0, 0, NULL,
      "Shared-memory all-reduces of 64K and more read the peers' buffers directly with "
      "process_vm_readv (one copy instead of three; needs TEMPO_SHM_CMA=1 and ptrace permission, "
      "checked at the first such call). Off by default: on the 2-core test machine it was about "
      "2x slower than the staged path from 512K to 32M (one system call per peer and segment)"),
    F("TEMPO_SHM_CMA_BYTES", "1M", T_SIZE, shm_cma_bytes, 4 * KiB, GiB, F_ZERO, NULL,
      "Shared-memory messages of at least this size are copied once, from the sender's buffer "
      "into the receiver's (cross-memory attach, process_vm_readv), instead of twice through the "
      "ring (with TEMPO_SHM_CMA=1); pairs whose processes may not read each other use the rings. 0: always the rings"),

    F("TEMPO_REDUCE_ISA", "auto", T_STRING, reduce_isa, 0, 0, 0, tempo__reduce_isa_check,
      "Instruction set of the reduction kernels: auto (avx2 where the CPU has it, else the best it "
      "has), sse2, avx2 or avx512 (x86-64; elsewhere auto or generic); every level gives bitwise the same results, "
      "and a level this CPU lacks is refused. tempo-info -b shows the one in use"),
    F("TEMPO_UNEXPECTED_BYTES", "64M", T_SIZE, unexpected_bytes, 1, NOLIMIT, F_ZERO, NULL,
      "Per peer: most bytes of messages that arrive before their receive is posted that a rank "
      "buffers; beyond it the rank stops reading that peer (its sends wait) unless it waits for a "
      "message from it; 0: no limit"),
    F("TEMPO_UCX_WINDOW", "4M", T_SIZE, ucx_window, 64 * KiB, GiB, 0, NULL,
      "ucx transport: per peer and direction, most bytes sent that the peer has not read yet "
      "(its credit window; also the size of the send ring), 64K to 1G"),
    F("TEMPO_UCX_ZCOPY_BYTES", "256K", T_SIZE, ucx_zcopy_bytes, 4 * KiB, NOLIMIT, F_ZERO, NULL,
      "ucx transport: payloads of at least this many bytes stay in the sender's buffer, which "
      "the receiver reads with ucp_get_nbx (zero copy); 0: every payload through the stream"),
    F("TEMPO_UCX_ZCOPY_ALWAYS", "0", T_BOOL, ucx_zcopy_always, 0, 0, 0, NULL,
      "ucx transport: zero copy also to peers whose endpoints have no peer-failure handling "
      "(UCX_TLS=sm,cma,self): faster large payloads, but a peer that dies while this rank reads "
      "its payload makes UCX abort this process instead of failing the call"),
    F("TEMPO_CUDA_DRIVER", "libcuda.so.1", T_STRING, cuda_driver, 0, 0, 0, NULL,
      "CUDA device buffers: the CUDA driver library to load (dlopen at the first call that "
      "looks a buffer up), by name or path"),
    F("TEMPO_AUTH_KEY", "", T_STRING, auth_key, 0, 0, F_SECRET, NULL,
      "the job's secret (any text, every rank the same; tempo-run makes one per job): every "
      "connection at the rendezvous is authenticated with it (HMAC-SHA-256, a challenge each way); "
      "never shown by tempo-info"),
    F("TEMPO_AUTH_KEY_FILE", "", T_STRING, auth_key_file, 0, 0, 0, NULL,
      "a file holding the job's secret instead (its bytes, up to 4096; a regular file of this "
      "user, mode 600)"),
    F("TEMPO_ENCRYPT", "0", T_BOOL, encrypt, 0, 0, 0, NULL,
      "1: encrypt and authenticate every byte between ranks over tcp (AES-256-GCM, keys from the "
      "job key, which it needs); shared memory stays inside the host; ucx and verbs are refused "
      "with it. Every rank the same"),
    F("TEMPO_GPU_BACKEND", "native", T_STRING, gpu_backend, 0, 0, 0, gpu_backend_check,
      "CUDA device buffers: native (tempo's collectives, host-staged) or nccl (a collective whose "
      "buffers are all device memory runs as one NCCL call, ordered by tempo's engine and "
      "scheduler; every rank must set the same)"),
    F("TEMPO_GPU_IPC", "0", T_BOOL, gpu_ipc, 0, 0, 0, NULL,
      "CUDA device buffers: a blocking all-reduce between 2-8 ranks of one host runs on the device "
      "buffers themselves, mapped into each other through CUDA IPC, with tempo's kernels (1), not "
      "host-staged (0); it first exchanges a small record, and stays host-staged where a rank's "
      "buffers are host memory or cannot be exported; every rank must set the same"),
    F("TEMPO_NCCL_LIBRARY", "libnccl.so.2", T_STRING, nccl_library, 0, 0, 0, NULL,
      "TEMPO_GPU_BACKEND=nccl: the NCCL library to load (dlopen at the first NCCL call), by name "
      "or path"),
    F("TEMPO_IB_HCA", "", T_STRING, ib_hca, 0, 0, 0, ib_hca_check,
      "verbs transport: the RDMA device to use, optionally with its port (mlx5_0, rxe0:1; "
      "ibv_devices lists them); unset: the first device with an ACTIVE port"),
    F("TEMPO_IB_GID_INDEX", "", T_INT, ib_gid_index, 0, 65535, 0, NULL,
      "verbs transport: the GID table index of the port (show_gids, ibv_devinfo -v); unset: on "
      "RoCE the first RoCE v2 GID that is an IPv4-mapped address, else the first RoCE v2 GID, else "
      "the first non-empty one; on InfiniBand no GRH (peers by LID), set: a GRH with this GID"),
    F("TEMPO_IB_RING_BYTES", "1M", T_SIZE, ib_ring_bytes, 64 * KiB, GiB, F_POW2, NULL,
      "verbs transport: the receive ring each rank keeps per peer, which the peer fills with RDMA "
      "writes (and as much send staging): a power of two from 64K to 1G"),
    F("TEMPO_IB_RNDV_BYTES", "256K", T_SIZE, ib_rndv_bytes, 1, NOLIMIT, F_ZERO, NULL,
      "verbs transport: messages of at least this size are not copied through the rings: the "
      "receiver reads them from the sender's registered buffer (RDMA READ) into its own; 0: never"),
    F("TEMPO_IB_REG_CACHE", "0", T_INT, ib_reg_cache, 0, 65536, 0, NULL,
      "verbs transport: memory registrations of zero-copy messages kept after their last use, "
      "0-65536; 0 deregisters at once, which is always safe; more is safe only when the program "
      "never frees a buffer it sent or received and gets the same addresses back for another one "
      "(tempo cannot see free())"),
    F("TEMPO_SPIN", "2ms", T_TIME, spin_s, 0, 60, 0, NULL,
      "How long a wait polls before it starts sleeping between polls, 0 to 60s"),
    F("TEMPO_PROGRESS_THREAD", "1", T_BOOL, progress_thread, 0, 0, 0, NULL,
      "Advance communication on a background thread while the caller computes (0: only inside "
      "tempo_test/tempo_wait and blocking calls)"),
    F("TEMPO_PROGRESS_NICE", "0", T_INT, progress_nice, -20, 19, 0, NULL,
      "Nice value of the progress thread, -20..19 (0: unchanged); a negative value lets it run "
      "before the caller's compute on a loaded host, and needs privilege (else the thread keeps "
      "its nice value, with a warning)"),
    F("TEMPO_CHUNK_BYTES", "auto", T_ASIZE, chunk_bytes, 4 * KiB, NOLIMIT, 0, NULL,
      "Scheduled requests (those with a priority) larger than this are split into chunks of whole "
      "elements (per rank, for reduce-scatter and all-gather), so that more urgent work can "
      "overtake them at a chunk boundary; auto or a size of 4K or more; auto: 4 x measured rate x "
      "per-chunk latency as a power of two in [64K, 4M], chosen by comm rank 0 as the lane runs, "
      "for the requests whose result cannot depend on the cuts (no compressor, and no arithmetic, "
      "integers, or at most 2 ranks), and 4M for float reductions over 3+ ranks and compressed "
      "requests, so that runs stay bitwise repeatable"),
    F("TEMPO_CREDIT_BYTES", "auto", T_ASIZE, credit_bytes, 1, NOLIMIT, 0, NULL,
      "Bytes of scheduled chunks in flight at once (at least one chunk, whatever the value); "
      "bounds how long newly ready urgent work waits; auto: one bandwidth-delay product plus one "
      "chunk, measured from the lane's own chunks, in [64K, 64M]"),
    F("TEMPO_SCHED", "tic", T_SCHED, sched, 0, 0, 0, NULL,
      "Order of scheduled requests: fifo (the order they became ready on every rank, priorities "
      "ignored), tic or tac (priority order; the bucketer computes TicTac's TIC or TAC "
      "priorities)"),
    F("TEMPO_BUCKET_BYTES", "25M", T_SIZE, bucket_bytes, 1, NOLIMIT, 0, NULL,
      "Bucketer: ready gradients are fused into buckets of up to this many bytes (> 0)"),
    F("TEMPO_BUCKET_FIRST_BYTES", "1M", T_SIZE, bucket_first_bytes, 1, NOLIMIT, 0, NULL,
      "Bucketer: cap of the first bucket (the last layers' gradients, ready first), so "
      "communication starts early (> 0)"),
    F("TEMPO_TAC_WARMUP", "3", T_INT, tac_warmup, 1, MAXRANKS, 0, NULL,
      "Bucketer with TEMPO_SCHED=tac: iterations measured (in TIC order) before the TAC order is "
      "computed from the measured times (1 or more)"),
    F("TEMPO_TRACE", "", T_STRING, trace, 0, 0, 0, NULL,
      "Write a Chrome Trace Event timeline per rank to this path (%r rank, %p pid, %h host; "
      "without %r or %p each rank inserts its rank before the extension, t.json -> t.0.json); "
      "open it in Perfetto or merge the ranks with tempo-trace merge"),
    F("TEMPO_FLIGHT_RECORDER", "", T_STRING, flight, 0, 0, 0, NULL,
      "Flight recorder: write each rank's last operations per communicator as JSON to this path "
      "(%r rank, %p pid, %h host; without %r or %p the rank is inserted before the extension) "
      "when an operation fails with a timeout or a peer's failure (the first failure), and on "
      "SIGUSR1; line the ranks up with tempo-trace flight"),
    F("TEMPO_FLIGHT_RECORDER_SIZE", "64", T_INT, flight_size, 0, 1 << 20, 0, NULL,
      "Flight recorder: operations kept per communicator (rounded up to a power of two; about "
      "128 bytes each); recorded even without TEMPO_FLIGHT_RECORDER; 0: off"),
    F("TEMPO_FLIGHT_RECORDER_AT_EXIT", "0", T_BOOL, flight_at_exit, 0, 0, 0, NULL,
      "Flight recorder: also write the file when the last communicator is destroyed"),
    F("TEMPO_SCHED_LOG", "", T_STRING, sched_log, 0, 0, 0, NULL,
      "Write the start order of scheduled chunks to this path (%r rank, %p pid, %h host; without "
      "%r or %p the rank is inserted before the extension): one line per chunk, identical on "
      "every rank"),
    F("TEMPO_COMPRESS", "none", T_STRING, compress, 0, 0, 0, tempo__qspec_check,
      "Default compressor of bucketers' gradient synchronization, as a spec "
      "(\"alq:bits=3,bucket=8192\", each parameter at most once; see tempo-info -q for "
      "compressors and parameters)"),
};

#undef F

/* ---------------------------------------------------------------------------------------------- */

int tempo__parse_time(const char *text, double *seconds_p)
{
    char *end;
    errno = 0;
    /* A decimal number: strtod alone would also take blanks, signs, hexadecimal and "inf". */
    if ((text[0] < '0' || text[0] > '9') && text[0] != '.') {
        return -1;
    }
    double v = strtod(text, &end);
    if (end == text || errno || !(v >= 0) || isinf(v) ||
        strspn(text, "0123456789.eE+-") < (size_t)(end - text)) {
        return -1;
    }
    while (*end == ' ') {
        end++;
    }
    double scale;
    if (*end == '\0' || strcmp(end, "s") == 0) {
        scale = 1;
    } else if (strcmp(end, "ms") == 0) {
        scale = 1e-3;
    } else if (strcmp(end, "us") == 0) {
        scale = 1e-6;
    } else if (strcmp(end, "m") == 0 || strcmp(end, "min") == 0) {
        scale = 60;
    } else if (strcmp(end, "h") == 0) {
        scale = 3600;
    } else {
        return -1;
    }
    *seconds_p = v * scale;
    return 0;
}

int tempo__parse_size(const char *text, size_t *bytes_p)
{
    char *end;
    errno = 0;
    if (text[0] < '0' || text[0] > '9') { /* strtoull would accept blanks and a minus sign */
        return -1;
    }
    unsigned long long v = strtoull(text, &end, 10);
    if (end == text || errno) {
        return -1;
    }
    unsigned long long scale = 1;
    switch (*end) {
    case '\0': break;
    case 'k':
    case 'K':
        scale = 1ull << 10;
        end++;
        break;
    case 'm':
    case 'M':
        scale = 1ull << 20;
        end++;
        break;
    case 'g':
    case 'G':
        scale = 1ull << 30;
        end++;
        break;
    default: return -1;
    }
    if (*end == 'B' || *end == 'b') {
        end++;
    }
    if (*end != '\0' || (v && scale > UINT64_MAX / v)) {
        return -1;
    }
    *bytes_p = (size_t)(v * scale);
    return 0;
}

static int parse_bool(const char *t, int *v)
{
    static const char *const yes[] = {"1", "y", "yes", "on", "true"};
    static const char *const no[] = {"0", "n", "no", "off", "false"};
    for (size_t i = 0; i < TEMPO_ARRAY_SIZE(yes); i++) {
        if (strcasecmp(t, yes[i]) == 0) {
            *v = 1;
            return 0;
        }
        if (strcasecmp(t, no[i]) == 0) {
            *v = 0;
            return 0;
        }
    }
    return -1;
}

static int parse_level(const char *t, int *v)
{
    static const char *const names[] = {"NONE", "WARN", "INFO", "DEBUG", "TRACE"};
    for (int i = 0; i < (int)TEMPO_ARRAY_SIZE(names); i++) {
        if (strcasecmp(t, names[i]) == 0) {
            *v = i;
            return 0;
        }
    }
    if (strcasecmp(t, "VERSION") == 0 || strcasecmp(t, "WARNING") == 0) {
        *v = TEMPO_LOG_WARN;
        return 0;
    }
    return -1;
}

static const char *const sched_names[] = {"fifo", "tic", "tac"};

const char *tempo__sched_name(int policy)
{
    return policy >= 0 && policy < (int)TEMPO_ARRAY_SIZE(sched_names) ? sched_names[policy] : "?";
}

static int parse_sched(const char *t, int *v)
{
    for (int i = 0; i < (int)TEMPO_ARRAY_SIZE(sched_names); i++) {
        if (strcasecmp(t, sched_names[i]) == 0) {
            *v = i;
            return 0;
        }
    }
    return -1;
}

static const char *type_name(field_type_t t)
{
    static const char *const names[] = {"int",  "string", "time", "size",  "size|auto",
                                        "bool", "enum",   "list", "enum", "string"};
    return names[t];
}

/* A size as the parser reads it back: "256K", "1G", "4097". */
static void format_size(double v, char *buf, size_t len)
{
    uint64_t b = v >= NOLIMIT ? UINT64_MAX : (uint64_t)v;
    static const char units[] = "GMK";
    for (int i = 0; i < 3; i++) {
        uint64_t u = 1ull << (10 * (3 - i));
        if (b && b % u == 0) {
            snprintf(buf, len, "%llu%c", (unsigned long long)(b / u), units[i]);
            return;
        }
    }
    snprintf(buf, len, "%llu", (unsigned long long)b);
}

/* A time as the parser reads it back: whole seconds below a day ("300s"), else the largest unit
 * that keeps it whole ("8760h", "2ms"). */
static void format_time(double v, char *buf, size_t len)
{
    static const struct {
        const char *unit;
        double scale;
    } units[] = {{"h", 3600}, {"m", 60}, {"s", 1}, {"ms", 1e-3}, {"us", 1e-6}};
    for (size_t i = v < 86400 ? 2 : 0; i < TEMPO_ARRAY_SIZE(units); i++) {
        double q = v / units[i].scale;
        if (q >= 1 && fabs(q - nearbyint(q)) < 1e-9 * q) {
            snprintf(buf, len, "%.0f%s", q, units[i].unit);
            return;
        }
    }
    snprintf(buf, len, "%.9gs", v);
}

/* What a valid value of f looks like, with its range: the second half of every refusal. */
static void expected(const field_t *f, char *buf, size_t len)
{
    char lo[32], hi[32];
    switch (f->type) {
    case T_INT:
        snprintf(buf, len, "an integer from %.0f to %.0f%s", f->lo, f->hi,
                 f->default_value[0] ? "" : ", or empty for unset");
        return;
    case T_TIME:
        format_time(f->lo, lo, sizeof(lo));
        format_time(f->hi, hi, sizeof(hi));
        snprintf(buf, len, "a time from %s to %s (a number with unit us, ms, s, m or h; s if none)",
                 lo, hi);
        return;
    case T_SIZE:
    case T_ASIZE: {
        format_size(f->lo, lo, sizeof(lo));
        format_size(f->hi, hi, sizeof(hi));
        char range[80];
        if (f->hi >= NOLIMIT) {
            snprintf(range, sizeof(range), "of at least %s", lo);
        } else {
            snprintf(range, sizeof(range), "from %s to %s", lo, hi);
        }
        const char *what = f->flags & F_POW2    ? "a power of two"
                           : f->flags & F_ALIGN ? "a multiple of 64"
                                                : "a size";
        snprintf(buf, len, "%s%s%s %s (bytes, or with K, M or G: powers of 1024)",
                 f->type == T_ASIZE ? "auto or " : "", f->flags & F_ZERO ? "0 (no limit) or " : "",
                 what, range);
        return;
    }
    case T_BOOL: snprintf(buf, len, "a boolean: 1/0, yes/no, on/off, true/false"); return;
    case T_LEVEL: snprintf(buf, len, "one of NONE, WARN, INFO, DEBUG, TRACE"); return;
    case T_SUBSYS:
        snprintf(buf, len, "a list of INIT, COLL, TRANSPORT, TOPO, QUANT, OVERLAP, ENV, each at "
                           "most once, or ALL alone; a leading ^ excludes them");
        return;
    case T_SCHED: snprintf(buf, len, "one of fifo, tic, tac"); return;
    case T_ROOT:
        snprintf(buf, len, "host:port or [IPv6 address]:port, port 1 to 65535, at most %zu "
                           "characters",
                 f->size - 1);
        return;
    case T_STRING: snprintf(buf, len, "at most %zu characters", f->size - 1); return;
    }
}
/* An integer in decimal, nothing else (strtol alone would take blanks and a '+'). */
static int parse_int(const char *text, long *v)
{
    const char *d = text + (text[0] == '-');
    if (*d < '0' || *d > '9') {
        return -1;
    }
    char *end;
    errno = 0;
    *v = strtol(text, &end, 10);
    return *end || errno ? -1 : 0;
}

/* Parse text as field f into cfg and check it against f's range and rules (and with run_check,
 * f's interpreter). Returns 0, or -1 with why ("expected ...", or the interpreter's message) and
 * cfg untouched. */
static int parse_field(const field_t *f, const char *text, tempo__config_t *cfg, int run_check,
                       char *why, size_t len)
{
    void *p = (char *)cfg + f->offset;
    long iv = 0;    /* T_INT, and the enums */
    double tv = 0;  /* T_TIME */
    size_t sv = 0;  /* T_SIZE, T_ASIZE */
    unsigned mv = 0; /* T_SUBSYS */
    double num = 0; /* the number, for the range check */
    int rc = 0, ranged = 0;
    switch (f->type) {
    case T_INT:
        if (text[0] == '\0' && !f->default_value[0]) {
            iv = -1; /* unset */
            break;
        }
        rc = parse_int(text, &iv);
        num = (double)iv;
        ranged = 1;
        break;
    case T_TIME:
        rc = tempo__parse_time(text, &tv);
        num = tv;
        ranged = 1;
        break;
    case T_SIZE:
    case T_ASIZE:
        if (f->type == T_ASIZE && strcasecmp(text, "auto") == 0) {
            break; /* 0 */
        }
        rc = tempo__parse_size(text, &sv);
        num = (double)sv;
        ranged = !(sv == 0 && (f->flags & F_ZERO));
        if (rc == 0 && ranged && (((f->flags & F_POW2) && (sv & (sv - 1))) ||
                                  ((f->flags & F_ALIGN) && sv % TEMPO_CACHELINE))) {
            rc = -1;
        }
        break;
    case T_ROOT: {
        char host[256];
        int port = 0;
        rc = strlen(text) >= f->size ||
                     (text[0] && (tempo__addr_split(text, host, sizeof(host), &port) || port < 1))
                 ? -1
                 : 0;
        break;
    }
    case T_STRING: rc = strlen(text) >= f->size ? -1 : 0; break;
    case T_BOOL: {
        int b = 0;
        rc = parse_bool(text, &b);
        iv = b;
        break;
    }
    case T_LEVEL: {
        int l = 0;
        rc = parse_level(text, &l);
        iv = l;
        break;
    }
    case T_SCHED: {
        int e = 0;
        rc = parse_sched(text, &e);
        iv = e;
        break;
    }
    case T_SUBSYS: rc = tempo__log_parse_subsys(text, &mv); break;
    }
    if (rc == 0 && ranged && !(num >= f->lo && num <= f->hi)) {
        rc = -1;
    }
    if (rc != 0) {
        size_t o = (size_t)snprintf(why, len, "expected ");
        expected(f, why + o, len - o);
        return -1;
    }
    if (run_check && f->check && text[0]) {
        /* The interpreter's own message says what is wrong; the caller's error text is kept. */
        char saved[TEMPO_ERRMSG_LEN];
        snprintf(saved, sizeof(saved), "%s", tempo__errmsg());
        rc = f->check(text) == TEMPO_OK ? 0 : -1;
        if (rc != 0) {
            snprintf(why, len, "%s", tempo__errmsg());
        }
        tempo__errmsg_set(saved);
        if (rc != 0) {
            return -1;
        }
    }
    switch (f->type) {
    case T_TIME: *(double *)p = tv; break;
    case T_SIZE:
    case T_ASIZE: *(size_t *)p = sv; break;
    case T_SUBSYS: *(unsigned *)p = mv; break;
    case T_ROOT:
    case T_STRING: memcpy(p, text, strlen(text) + 1); break;
    default: *(int *)p = (int)iv; break;
    }
    return 0;
}

static const field_t *field_named(const char *name)
{
    for (size_t i = 0; i < TEMPO_ARRAY_SIZE(fields); i++) {
        if (strcmp(fields[i].name, name) == 0) {
            return &fields[i];
        }
    }
    return NULL;
}

/* Checks between fields, once each is valid on its own: the field at fault, with why, or NULL. */
static const field_t *check_pairs(const tempo__config_t *cfg, char *why, size_t len)
{
    if (cfg->rank >= 0 && cfg->size >= 0 && cfg->rank >= cfg->size) {
        snprintf(why, len, "expected an integer from 0 to TEMPO_SIZE - 1 = %d", cfg->size - 1);
        return field_named("TEMPO_RANK");
    }
    if (cfg->local_size >= 0 && cfg->size >= 0 && cfg->local_size > cfg->size) {
        snprintf(why, len, "expected an integer from 1 to TEMPO_SIZE = %d", cfg->size);
        return field_named("TEMPO_LOCAL_SIZE");
    }
    return NULL;
}

static void defaults(tempo__config_t *cfg)
{
    char why[TEMPO_ERRMSG_LEN];
    memset(cfg, 0, sizeof(*cfg));
    for (size_t i = 0; i < TEMPO_ARRAY_SIZE(fields); i++) {
        /* a default the table refuses is a bug of the table, caught by test_cfg */
        (void)parse_field(&fields[i], fields[i].default_value, cfg, 0, why, sizeof(why));
    }
}

/* Read the environment into cfg: each set variable that is valid, the defaults elsewhere (a
 * refused value leaves its default). Returns the refused field, with the refusal ("TEMPO_X='v' is
 * not valid: expected ...") in msg, or NULL: of want alone when want is given (only want's
 * interpreter runs then), else the first, the pairs after the single values. */
static const field_t *read_env(tempo__config_t *cfg, const field_t *want, char *msg, size_t len)
{
    char why[TEMPO_ERRMSG_LEN];
    const field_t *bad = NULL;
    defaults(cfg);
    for (size_t i = 0; i < TEMPO_ARRAY_SIZE(fields); i++) {
        const field_t *f = &fields[i];
        const char *v = getenv(f->name);
        int mine = !want || want == f;
        if (v && parse_field(f, v, cfg, mine, why, sizeof(why)) != 0 && mine && !bad) {
            bad = f;
            snprintf(msg, len, "%s='%s' is not valid: %s", f->name, v, why);
        }
    }
    const field_t *f = bad ? NULL : check_pairs(cfg, why, sizeof(why));
    if (f && (!want || want == f)) {
        bad = f;
        snprintf(msg, len, "%s='%s' is not valid: %s", f->name, getenv(f->name), why);
    }
    return bad;
}

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static tempo_status_t load_status;
static char load_errmsg[TEMPO_ERRMSG_LEN];

static void load(void)
{
    static tempo__config_t cfg;
    if (read_env(&cfg, NULL, load_errmsg, sizeof(load_errmsg))) {
        load_status = TEMPO_ERR_INVALID;
        /* A refused environment leaves the defaults, not a half-read table. */
        defaults(&tempo__cfg);
        return;
    }
    tempo__cfg = cfg;
    tempo__log_configure(tempo__cfg.debug_level, tempo__cfg.debug_subsys, tempo__cfg.debug_file);
    for (size_t i = 0; i < TEMPO_ARRAY_SIZE(fields); i++) {
        const char *v = getenv(fields[i].name);
        if (v && strcmp(v, fields[i].default_value) != 0) {
            TEMPO_INFO(TEMPO_SUB_ENV, "%s set by environment to %s", fields[i].name, v);
        }
    }
}

tempo_status_t tempo__config_load(void)
{
    pthread_once(&load_once, load);
    if (load_status != TEMPO_OK) {
        return tempo__err(load_status, "%s", load_errmsg);
    }
    return TEMPO_OK;
}

/* The value of f in cfg as text the parser reads back as the same value. */
static void format_field(const field_t *f, const tempo__config_t *cfg, char *buf, size_t len)
{
    const void *p = (const char *)cfg + f->offset;
    switch (f->type) {
    case T_INT:
        if (*(const int *)p < 0 && !f->default_value[0]) {
            snprintf(buf, len, "%s", ""); /* unset */
        } else {
            snprintf(buf, len, "%d", *(const int *)p);
        }
        return;
    case T_STRING:
        if ((f->flags & F_SECRET) && *(const char *)p) {
            snprintf(buf, len, "(set, %zu bytes)", strlen((const char *)p));
            return;
        }
        snprintf(buf, len, "%s", (const char *)p);
        return;
    case T_ROOT: snprintf(buf, len, "%s", (const char *)p); return;
    case T_TIME: format_time(*(const double *)p, buf, len); return;
    case T_SIZE:
    case T_ASIZE:
        if (*(const size_t *)p == 0) {
            snprintf(buf, len, "%s", f->type == T_ASIZE ? "auto" : "0");
        } else {
            format_size((double)*(const size_t *)p, buf, len);
        }
        return;
    case T_BOOL: snprintf(buf, len, "%d", *(const int *)p); return;
    case T_LEVEL: snprintf(buf, len, "%s", tempo__log_level_name(*(const int *)p)); return;
    case T_SUBSYS: tempo__log_format_subsys(*(const unsigned *)p, buf, len); return;
    case T_SCHED: snprintf(buf, len, "%s", tempo__sched_name(*(const int *)p)); return;
    }
}

tempo_status_t tempo_env_var(size_t index, tempo_env_var_t *var_p)
{
    static __thread char used[TEMPO_ERRMSG_LEN], error[TEMPO_ERRMSG_LEN];
    if (!var_p || index >= TEMPO_ARRAY_SIZE(fields)) {
        return TEMPO_ERR_INVALID;
    }
    const field_t *f = &fields[index];
    /* The whole table is read, as the library reads it (the pairs: TEMPO_RANK < TEMPO_SIZE), but
     * only f's interpreter runs; another variable's refusal is reported on that variable. */
    tempo__config_t *cfg = tempo__malloc(sizeof(*cfg), "configuration");
    if (!cfg) {
        return TEMPO_ERR_NOMEM;
    }
    int refused = read_env(cfg, f, error, sizeof(error)) != NULL;
    if (!refused) {
        format_field(f, cfg, used, sizeof(used));
    }
    tempo__free(cfg);
    var_p->name = f->name;
    var_p->default_value = f->default_value;
    var_p->value = getenv(f->name);
    if ((f->flags & F_SECRET) && var_p->value && var_p->value[0]) {
        var_p->value = "(secret)";
    }
    var_p->type = type_name(f->type);
    var_p->doc = f->doc;
    var_p->used = refused ? NULL : used;
    var_p->error = refused ? error : NULL;
    return TEMPO_OK;
}
