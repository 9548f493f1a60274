/*
 * cfg.h — the configuration table: every TEMPO_* environment variable the library reads, with its
 * default, type and meaning, in one declarative table (core/cfg.c). The table is parsed once, at
 * the first communicator creation, into tempo__cfg; nothing else in the library calls getenv() for
 * a TEMPO_* variable. tempo-info -c prints the table with current values.
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
    char job_id[128];      /* TEMPO_JOB_ID */
    char host_id[128];     /* TEMPO_HOST_ID */
    double timeout_s;      /* TEMPO_TIMEOUT, seconds */
    int debug_level;       /* TEMPO_DEBUG (tempo__log_level_t) */
    unsigned debug_subsys; /* TEMPO_DEBUG_SUBSYS mask */
    char debug_file[256];  /* TEMPO_DEBUG_FILE */
    char algo[512];        /* TEMPO_ALGO, interpreted by collectives/select.c */
    int shm;               /* TEMPO_SHM: use shared memory inside a host */
    size_t shm_ring_bytes; /* TEMPO_SHM_RING_BYTES: per ordered pair of ranks */
    size_t shm_coll_bytes; /* TEMPO_SHM_COLL_BYTES: per-rank staging of shm collectives */
    double spin_s;         /* TEMPO_SPIN: busy-poll time before sleeping in a wait */
} tempo__config_t;

extern tempo__config_t tempo__cfg;

/** Parse the environment into tempo__cfg once (thread-safe). Returns TEMPO_ERR_INVALID with a
 *  message naming the variable when a value does not parse; the same error on every later call. */
tempo_status_t tempo__config_load(void);

/** Parse "30", "30s", "500ms", "2m", "1h" into seconds; returns 0 on success. */
int tempo__parse_time(const char *text, double *seconds_p);
/** Parse "4096", "64K", "1M", "2G" (powers of 1024) into bytes; returns 0 on success. */
int tempo__parse_size(const char *text, size_t *bytes_p);

#endif /* TEMPO_CORE_CFG_H */
