/*
 * log.h — levelled, per-subsystem logging (TEMPO_DEBUG, TEMPO_DEBUG_SUBSYS, TEMPO_DEBUG_FILE).
 *
 * The level and subsystem are tested before any argument is evaluated, so a disabled log line costs
 * one load and one compare. Warnings are printed whatever the subsystem mask says. Lines look like
 *   host:pid:rank tempo WARN  TRANSPORT tcp.c:212 rank 3 (host b, pid 812) closed its connection
 * and go to stderr, or to TEMPO_DEBUG_FILE (%h host, %p pid, %r rank expanded when first written).
 */
#ifndef TEMPO_CORE_LOG_H
#define TEMPO_CORE_LOG_H

#include <stddef.h>

typedef enum {
    TEMPO_LOG_NONE = 0,
    TEMPO_LOG_WARN = 1,
    TEMPO_LOG_INFO = 2,
    TEMPO_LOG_DEBUG = 3,
    TEMPO_LOG_TRACE = 4
} tempo__log_level_t;

enum {
    TEMPO_SUB_INIT = 1u << 0,
    TEMPO_SUB_COLL = 1u << 1,
    TEMPO_SUB_TRANSPORT = 1u << 2,
    TEMPO_SUB_TOPO = 1u << 3,
    TEMPO_SUB_QUANT = 1u << 4,
    TEMPO_SUB_OVERLAP = 1u << 5,
    TEMPO_SUB_ENV = 1u << 6,
    TEMPO_SUB_ALL = 0xffffffffu
};

extern int tempo__log_level;
extern unsigned tempo__log_mask;

void tempo__log(int level, unsigned subsys, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/** Apply TEMPO_DEBUG* from the configuration table (called once at configuration load). */
void tempo__log_configure(int level, unsigned mask, const char *file_pattern);
/** Set the rank printed in log lines (-1 until the rendezvous has finished). */
void tempo__log_set_rank(int rank);
/** Parse a subsystem list ("INIT,COLL", "ALL", "^ENV"; each name at most once, ALL alone);
 *  returns 0 on success. */
int tempo__log_parse_subsys(const char *text, unsigned *mask_p);
/** A mask as a list that tempo__log_parse_subsys() reads back as the same mask. */
void tempo__log_format_subsys(unsigned mask, char *buf, size_t len);
/** "NONE", "WARN", "INFO", "DEBUG", "TRACE". */
const char *tempo__log_level_name(int level);

#define TEMPO_LOG(_level, _sub, ...)                                       \
    do {                                                                   \
        if (__builtin_expect((_level) <= tempo__log_level, 0) &&           \
            (((_level) == TEMPO_LOG_WARN) || ((_sub)&tempo__log_mask))) {  \
            tempo__log((_level), (_sub), __FILE__, __LINE__, __VA_ARGS__); \
        }                                                                  \
    } while (0)

#define TEMPO_WARN(_sub, ...) TEMPO_LOG(TEMPO_LOG_WARN, _sub, __VA_ARGS__)
#define TEMPO_INFO(_sub, ...) TEMPO_LOG(TEMPO_LOG_INFO, _sub, __VA_ARGS__)
#define TEMPO_DEBUG(_sub, ...) TEMPO_LOG(TEMPO_LOG_DEBUG, _sub, __VA_ARGS__)
#define TEMPO_TRACE(_sub, ...) TEMPO_LOG(TEMPO_LOG_TRACE, _sub, __VA_ARGS__)

#endif /* TEMPO_CORE_LOG_H */
