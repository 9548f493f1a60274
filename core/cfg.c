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

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>

tempo__config_t tempo__cfg;

typedef enum {
    T_INT,
    T_STRING,
    T_TIME,
    T_SIZE,
    T_ASIZE, /* a size > 0, or "auto" (stored as 0) */
    T_BOOL,
    T_LEVEL,
    T_SUBSYS,
    T_SCHED,
    T_NICE
} field_type_t;

typedef struct {
    const char *name;
    const char *default_value;
    field_type_t type;
    size_t offset;
    size_t size;
    const char *doc;
} field_t;

#define F(name, def, type, member, doc)                     \
    {                                                       \
        name, def, type, offsetof(tempo__config_t, member), \
            sizeof(((tempo__config_t *)0)->member), doc     \
    }

static const field_t fields[] = {
    F("TEMPO_RANK", "", T_INT, rank,
      "Rank of this process, 0 <= rank < TEMPO_SIZE (set by tempo-run; otherwise taken from Open "
      "MPI, "
      "MPICH/Hydra or Slurm variables)"),
    F("TEMPO_SIZE", "", T_INT, size, "Number of ranks of the job"),
    F("TEMPO_LOCAL_SIZE", "", T_INT, local_size,
      "Number of ranks on this host (set by tempo-run; lets a job on one host meet without "
      "TEMPO_ROOT)"),
    F("TEMPO_ROOT", "", T_STRING, root,
      "Rendezvous address host:port; rank 0 listens there. Unset: a job on one host meets through "
      "a "
      "file in $TMPDIR keyed by the launcher's job id"),
    F("TEMPO_ROOT_FD", "", T_INT, root_fd,
      "Set by tempo-run for rank 0: a socket already listening at TEMPO_ROOT, which rank 0 "
      "uses instead of binding the port itself (a port released for it could be taken first)"),
    F("TEMPO_JOB_ID", "", T_STRING, job_id,
      "Job identity checked at the rendezvous, so that concurrent jobs cannot mix (default: the "
      "launcher's job id, else the parent pid)"),
    F("TEMPO_HOST_ID", "", T_STRING, host_id,
      "Override the host identity: ranks with equal ids use shared memory, others TCP. '%r' "
      "expands "
      "to the rank, so TEMPO_HOST_ID=%r forces TCP between local ranks (default: hash of host "
      "name, "
      "boot id and network/mount namespaces)"),
    F("TEMPO_TIMEOUT", "300s", T_TIME, timeout_s,
      "Deadline of every wait and of the rendezvous (units s, ms, m, h)"),
    F("TEMPO_DEBUG", "WARN", T_LEVEL, debug_level, "Log level: NONE, WARN, INFO, DEBUG, TRACE"),
    F("TEMPO_DEBUG_SUBSYS", "INIT,ENV", T_SUBSYS, debug_subsys,
      "Subsystems logged at INFO and below: INIT, COLL, TRANSPORT, TOPO, QUANT, OVERLAP, ENV, ALL; "
      "a leading ^ excludes"),
    F("TEMPO_DEBUG_FILE", "", T_STRING, debug_file,
      "Write log lines to this file instead of stderr; %h host, %p pid, %r rank"),
    F("TEMPO_ALGO", "", T_STRING, algo,
      "Force algorithms per collective, e.g. allreduce:ring,broadcast:pipeline (see tempo-info "
      "-a)"),
    F("TEMPO_SHM", "1", T_BOOL, shm, "Use shared memory between ranks of the same host"),
    F("TEMPO_SHM_RING_BYTES", "256K", T_SIZE, shm_ring_bytes,
      "Size of each shared-memory ring between two ranks of a host (one per direction)"),
    F("TEMPO_SHM_BELL", "1", T_BOOL, shm_bell,
      "A rank sleeping in a wait is woken by a same-host peer's shared-memory data at once (a "
      "doorbell datagram) instead of at its next 1 ms tick"),
    F("TEMPO_SHM_COLL_BYTES", "512K", T_SIZE, shm_coll_bytes,
      "Per-rank staging area of the shared-memory collectives (segment size of the pipeline)"),
    F("TEMPO_UNEXPECTED_BYTES", "64M", T_SIZE, unexpected_bytes,
      "Per peer: most bytes of messages that arrive before their receive is posted that a rank "
      "buffers; beyond it the rank stops reading that peer (its sends wait) unless it waits for a "
      "message from it; 0: no limit"),
    F("TEMPO_SPIN", "2ms", T_TIME, spin_s,
      "How long a wait polls before it starts sleeping between polls"),
    F("TEMPO_PROGRESS_THREAD", "1", T_BOOL, progress_thread,
      "Advance communication on a background thread while the caller computes (0: only inside "
      "tempo_test/tempo_wait and blocking calls)"),
    F("TEMPO_PROGRESS_NICE", "0", T_NICE, progress_nice,
      "Nice value of the progress thread, -20..19 (0: unchanged); a negative value lets it run "
      "before the caller's compute on a loaded host, and needs privilege (else it is ignored with "
      "an INFO message)"),
    F("TEMPO_CHUNK_BYTES", "auto", T_ASIZE, chunk_bytes,
      "Scheduled requests (those with a priority) larger than this are split into chunks, so that "
      "more urgent work can overtake them at a chunk boundary; auto: 4 x measured rate x per-chunk "
      "latency as a power of two in [64K, 4M], chosen by comm rank 0 as the lane runs, for the "
      "requests whose result cannot depend on the cuts (no compressor, and no arithmetic, integers, "
      "or at most 2 ranks), and 4M for float reductions over 3+ ranks and compressed requests, so "
      "that runs stay bitwise repeatable"),
    F("TEMPO_CREDIT_BYTES", "auto", T_ASIZE, credit_bytes,
      "Bytes of scheduled chunks in flight at once (at least one chunk); bounds how long newly "
      "ready urgent work waits; auto: one bandwidth-delay product plus one chunk, measured from "
      "the lane's own chunks, in [64K, 64M]"),
    F("TEMPO_SCHED", "tic", T_SCHED, sched,
      "Order of scheduled requests: fifo (the order they became ready on every rank, priorities "
      "ignored), tic or tac (priority order; the bucketer computes TicTac's TIC or TAC "
      "priorities)"),
    F("TEMPO_BUCKET_BYTES", "25M", T_SIZE, bucket_bytes,
      "Bucketer: ready gradients are fused into buckets of up to this many bytes"),
    F("TEMPO_BUCKET_FIRST_BYTES", "1M", T_SIZE, bucket_first_bytes,
      "Bucketer: cap of the first bucket (the last layers' gradients, ready first), so "
      "communication starts early"),
    F("TEMPO_TAC_WARMUP", "3", T_INT, tac_warmup,
      "Bucketer with TEMPO_SCHED=tac: iterations measured (in TIC order) before the TAC order is "
      "computed from the measured times"),
    F("TEMPO_TRACE", "", T_STRING, trace,
      "Write a Chrome Trace Event timeline per rank to this path (%r rank, %p pid, %h host; "
      "without %r or %p each rank inserts its rank before the extension, t.json -> t.0.json); "
      "open it in Perfetto or merge the ranks with tempo-trace merge"),
    F("TEMPO_SCHED_LOG", "", T_STRING, sched_log,
      "Write the start order of scheduled chunks to this path (%r rank, %p pid, %h host; without "
      "%r or %p the rank is inserted before the extension): one line per chunk, identical on "
      "every rank"),
    F("TEMPO_COMPRESS", "none", T_STRING, compress,
      "Default compressor of bucketers' gradient synchronization, as a spec "
      "(\"alq:bits=3,bucket=8192\"; see tempo-info -q for compressors and parameters)"),
};

#undef F

/* ---------------------------------------------------------------------------------------------- */

int tempo__parse_time(const char *text, double *seconds_p)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || errno || !(v >= 0) || isinf(v)) {
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
    static const char *const names[] = {"int",  "string", "time", "size", "size|auto",
                                        "bool", "enum",   "list", "enum", "int"};
    return names[t];
}

static const char *type_hint(field_type_t t)
{
    switch (t) {
    case T_INT: return "an integer >= 0";
    case T_TIME: return "a time such as 30, 30s, 500ms, 5m";
    case T_SIZE: return "a size such as 4096, 64K, 1M";
    case T_ASIZE: return "auto or a size > 0 such as 4096, 64K, 1M";
    case T_BOOL: return "a boolean: 1/0, yes/no, on/off, true/false";
    case T_LEVEL: return "one of NONE, WARN, INFO, DEBUG, TRACE";
    case T_SUBSYS: return "a list of INIT, COLL, TRANSPORT, TOPO, QUANT, OVERLAP, ENV, ALL";
    case T_SCHED: return "one of fifo, tic, tac";
    case T_NICE: return "an integer from -20 to 19";
    default: return "text";
    }
}

/* Parse text into the field; empty text for int means "unset" (-1). Returns 0 on success. */
static int parse_field(const field_t *f, const char *text)
{
    void *p = (char *)&tempo__cfg + f->offset;
    switch (f->type) {
    case T_INT: {
        if (text[0] == '\0') {
            *(int *)p = -1;
            return 0;
        }
        char *end;
        errno = 0;
        long v = strtol(text, &end, 10);
        if (end == text || *end || errno || v < 0 || v > 1 << 30) {
            return -1;
        }
        *(int *)p = (int)v;
        return 0;
    }
    case T_STRING:
        if (strlen(text) >= f->size) {
            return -1;
        }
        memcpy(p, text, strlen(text) + 1);
        return 0;
    case T_TIME: return tempo__parse_time(text, (double *)p);
    case T_SIZE: return tempo__parse_size(text, (size_t *)p);
    case T_ASIZE:
        if (strcasecmp(text, "auto") == 0) {
            *(size_t *)p = 0;
            return 0;
        }
        return tempo__parse_size(text, (size_t *)p) || *(size_t *)p == 0 ? -1 : 0;
    case T_BOOL: return parse_bool(text, (int *)p);
    case T_LEVEL: return parse_level(text, (int *)p);
    case T_SUBSYS: return tempo__log_parse_subsys(text, (unsigned *)p);
    case T_SCHED: return parse_sched(text, (int *)p);
    case T_NICE: {
        char *end;
        errno = 0;
        long v = strtol(text, &end, 10);
        if (end == text || *end || errno || v < -20 || v > 19) {
            return -1;
        }
        *(int *)p = (int)v;
        return 0;
    }
    }
    return -1;
}

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static tempo_status_t load_status;
static char load_errmsg[TEMPO_ERRMSG_LEN];

static void load(void)
{
    for (size_t i = 0; i < TEMPO_ARRAY_SIZE(fields); i++) {
        if (parse_field(&fields[i], fields[i].default_value) != 0) {
            load_status = TEMPO_ERR_INTERNAL;
            snprintf(load_errmsg, sizeof(load_errmsg), "bad default for %s", fields[i].name);
            return;
        }
    }
    for (size_t i = 0; i < TEMPO_ARRAY_SIZE(fields); i++) {
        const char *v = getenv(fields[i].name);
        if (!v) {
            continue;
        }
        if (parse_field(&fields[i], v) != 0) {
            load_status = TEMPO_ERR_INVALID;
            snprintf(load_errmsg, sizeof(load_errmsg), "%s='%s' is not valid: expected %s",
                     fields[i].name, v, type_hint(fields[i].type));
            return;
        }
    }
    if (tempo__cfg.timeout_s <= 0) {
        load_status = TEMPO_ERR_INVALID;
        snprintf(load_errmsg, sizeof(load_errmsg), "TEMPO_TIMEOUT must be > 0");
        return;
    }
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

tempo_status_t tempo_env_var(size_t index, tempo_env_var_t *var_p)
{
    if (!var_p || index >= TEMPO_ARRAY_SIZE(fields)) {
        return TEMPO_ERR_INVALID;
    }
    var_p->name = fields[index].name;
    var_p->default_value = fields[index].default_value;
    var_p->value = getenv(fields[index].name);
    var_p->type = type_name(fields[index].type);
    var_p->doc = fields[index].doc;
    return TEMPO_OK;
}
