/*
 * cfg.h — the configuration table: every TEMPO_* environment variable the library reads, with its
 * default, type and meaning, in one declarative table (core/cfg.c). The table is parsed once, at
 * the first communicator creation, into tempo__cfg; nothing else in the library calls getenv() for
 * a TEMPO_* variable. Every value is either used as given or refused (TEMPO_ERR_INVALID naming the
 * variable, the value and what is valid): each entry carries its range and rules, and the
 * variables that a higher layer interprets carry that layer's check. tempo-info -c prints the
 * table with the values in use, or the refusals.
 */
#ifndef TEMPO_CORE_CFG_H
#define TEMPO_CORE_CFG_H

#include <stddef.h>

#include <tempo.h>

typedef struct tempo__config {
    int rank;              /* TEMPO_RANK, -1 when unset */
    int size;              /* TEMPO_SIZE, -1 when unset */
    int local_size;        /* TEMPO_LOCAL_SIZE, -1 when unset */
    char root[256];        /* TEMPO_ROOT "host:port", "" when unset */
    int root_fd;           /* TEMPO_ROOT_FD: rank 0's inherited listening socket, -1 when unset */
    char job_id[128];      /* TEMPO_JOB_ID */
    char host_id[128];     /* TEMPO_HOST_ID */
    char ifname[64];       /* TEMPO_IFNAME: the data transport's interface, "" when unset */
    double timeout_s;      /* TEMPO_TIMEOUT, seconds */
    int debug_level;       /* TEMPO_DEBUG (tempo__log_level_t) */
    unsigned debug_subsys; /* TEMPO_DEBUG_SUBSYS mask */
    char debug_file[256];  /* TEMPO_DEBUG_FILE */
    char algo[512];        /* TEMPO_ALGO, interpreted by collectives/select.c */
    char transports[128];  /* TEMPO_TRANSPORTS, interpreted by transport/transport.c */
    int shm;               /* TEMPO_SHM: use shared memory inside a host */
    size_t shm_ring_bytes; /* TEMPO_SHM_RING_BYTES: per ordered pair of ranks */
    int shm_bell;          /* TEMPO_SHM_BELL: wake sleeping same-host peers after shm publishes */
    size_t shm_coll_bytes; /* TEMPO_SHM_COLL_BYTES: per-rank staging of shm collectives */
    size_t shm_cma_bytes;  /* TEMPO_SHM_CMA_BYTES: shm payloads copied once (CMA); 0: never */
    int shm_cma;           /* TEMPO_SHM_CMA: cross-memory attach (single-copy shm messages) */
    int shm_direct;        /* TEMPO_SHM_DIRECT: large shm all-reduces read peers' buffers directly */
    size_t unexpected_bytes; /* TEMPO_UNEXPECTED_BYTES: per peer, 0: no limit */
    size_t ucx_window;     /* TEMPO_UCX_WINDOW: ucx credit window per peer and direction */
    size_t ucx_zcopy_bytes; /* TEMPO_UCX_ZCOPY_BYTES: ucx zero-copy payloads from; 0: off */
    int ucx_zcopy_always;   /* TEMPO_UCX_ZCOPY_ALWAYS: zero copy without peer-failure handling */
    char cuda_driver[256]; /* TEMPO_CUDA_DRIVER: the CUDA driver library (gpu/cuda.c) */
    char auth_key[1024];      /* TEMPO_AUTH_KEY: the job's secret (core/auth.h) */
    char auth_key_file[512];  /* TEMPO_AUTH_KEY_FILE: a file holding it */
    int encrypt;              /* TEMPO_ENCRYPT: seal the tcp connections (transport/seal.h) */
    char gpu_backend[16];  /* TEMPO_GPU_BACKEND: native or nccl (gpu/nccl.h) */
    int gpu_ipc;           /* TEMPO_GPU_IPC: all-reduce of device buffers through CUDA IPC */
    char nccl_library[256]; /* TEMPO_NCCL_LIBRARY: the NCCL library (gpu/nccl.c) */
    char ib_hca[64];       /* TEMPO_IB_HCA: verbs device[:port], "" = first with an ACTIVE port */
    int ib_gid_index;      /* TEMPO_IB_GID_INDEX, -1 when unset (automatic) */
    size_t ib_ring_bytes;  /* TEMPO_IB_RING_BYTES: verbs receive ring per peer */
    size_t ib_rndv_bytes;  /* TEMPO_IB_RNDV_BYTES: verbs zero-copy payloads from this size, 0: off */
    int ib_reg_cache;      /* TEMPO_IB_REG_CACHE: unused verbs registrations kept */
    double spin_s;         /* TEMPO_SPIN: busy-poll time before sleeping in a wait */
    int progress_thread;   /* TEMPO_PROGRESS_THREAD: background progress */
    int progress_nice;     /* TEMPO_PROGRESS_NICE: nice value of the progress thread (0: keep) */
    size_t chunk_bytes;    /* TEMPO_CHUNK_BYTES: scheduled requests are split into chunks; 0: auto */
    size_t credit_bytes;   /* TEMPO_CREDIT_BYTES: scheduled bytes in flight; 0: auto */
    int sched;             /* TEMPO_SCHED (tempo__sched_policy_t) */
    size_t bucket_bytes;   /* TEMPO_BUCKET_BYTES: bucketer fusion size */
    size_t bucket_first_bytes; /* TEMPO_BUCKET_FIRST_BYTES: the first (last-layer) bucket */
    int tac_warmup;        /* TEMPO_TAC_WARMUP: iterations profiled before the TAC order */
    char trace[512];       /* TEMPO_TRACE: Chrome trace path pattern */
    char flight[512];      /* TEMPO_FLIGHT_RECORDER: flight record path pattern, "": no dumps */
    int flight_size;       /* TEMPO_FLIGHT_RECORDER_SIZE: operations kept per communicator */
    int flight_at_exit;    /* TEMPO_FLIGHT_RECORDER_AT_EXIT: dump when the last comm goes */
    char sched_log[512];   /* TEMPO_SCHED_LOG: order log path pattern */
    char compress[512];    /* TEMPO_COMPRESS: bucketers' default compressor spec */
    char reduce_isa[16];   /* TEMPO_REDUCE_ISA: auto, sse2, avx2, avx512 (collectives/reduce.c) */
} tempo__config_t;

/** TEMPO_SCHED values. */
typedef enum { TEMPO__SCHED_FIFO = 0, TEMPO__SCHED_TIC = 1, TEMPO__SCHED_TAC = 2 } tempo__sched_policy_t;
/** "fifo", "tic", "tac". */
const char *tempo__sched_name(int policy);

extern tempo__config_t tempo__cfg;

/** Parse the environment into tempo__cfg once (thread-safe). Returns TEMPO_ERR_INVALID with a
 *  message naming the variable when a value does not parse; the same error on every later call. */
tempo_status_t tempo__config_load(void);

/** Parse "30", "30s", "500ms", "2m", "1h" into seconds; returns 0 on success. */
int tempo__parse_time(const char *text, double *seconds_p);
/** Parse "4096", "64K", "1M", "2G" (powers of 1024) into bytes; returns 0 on success. */
int tempo__parse_size(const char *text, size_t *bytes_p);

/* The checks of the variables that a higher layer interprets, run when the table is loaded so
 * that a bad value is refused at init by the code that will read it (defined there; declared here
 * because the table names them). TEMPO_OK, or an error whose message says what is wrong. */
/** TEMPO_ALGO: collective:algorithm entries, each collective at most once (collectives/select.c). */
tempo_status_t tempo__algo_check(const char *text);
/** TEMPO_TRANSPORTS: transport names, ^name excludes one, each at most once (transport.c). */
tempo_status_t tempo__tl_spec_check(const char *text);
/** TEMPO_COMPRESS: a compressor spec, or "none" (quant/quant.c). */
tempo_status_t tempo__qspec_check(const char *text);
/** TEMPO_REDUCE_ISA: auto, or a level of the reduction kernels that this CPU runs
 *  (collectives/reduce.c). */
tempo_status_t tempo__reduce_isa_check(const char *text);

#endif /* TEMPO_CORE_CFG_H */
