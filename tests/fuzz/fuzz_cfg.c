/*
 * fuzz_cfg.c — configuration values from the environment (core/cfg.c's table: every TEMPO_*
 * variable's parser, range and interpreter: TEMPO_ALGO, TEMPO_TRANSPORTS, TEMPO_COMPRESS, ...),
 * read through tempo_env_var() as tempo-info -c reads them, and the number and address parsers
 * they share (tempo__parse_time, tempo__parse_size, tempo__addr_split).
 *
 * Input: a variable (index into the table), then its value (up to the first NUL, at most 4000
 * bytes). What must hold: no crash or overrun; a value is either used or refused with a reason;
 * the text of a used value ("used") reads back as the same value (but a secret's, which
 * says only its length).
 */
#include "config.h"

#include "tests/fuzz/fuzz.h"

#include "core/cfg.h"
#include "core/sock.h"

/* The environment entry NAME=value lives here (putenv: glibc keeps the pointer, allocates
 * nothing, so nothing grows from one input to the next). */
static char entry[4200];

/* Set variable i to value, read it back, unset it. used (at least 4096 bytes) receives the used
 * value; 1 when it is used, 0 when refused. */
static int env_read(size_t i, const char *value, char *used)
{
    tempo_env_var_t v;
    if (tempo_env_var(i, &v) != TEMPO_OK) {
        abort();
    }
    snprintf(entry, sizeof(entry), "%s=%s", v.name, value);
    putenv(entry);
    if (tempo_env_var(i, &v) != TEMPO_OK || (v.used == NULL) == (v.error == NULL)) {
        abort(); /* exactly one of them */
    }
    if (v.used) {
        snprintf(used, 4096, "%s", v.used);
    }
    unsetenv(v.name);
    return v.used != NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* only the variable under test is set (the pairs: TEMPO_RANK < TEMPO_SIZE) */
    tempo_env_var_t v;
    for (size_t i = 0; tempo_env_var(i, &v) == TEMPO_OK; i++) {
        unsetenv(v.name);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size, 0};
    size_t nvars = 0;
    tempo_env_var_t v;
    while (tempo_env_var(nvars, &v) == TEMPO_OK) {
        nvars++;
    }
    size_t i = fuzz_u8(&in) % nvars, n;
    const uint8_t *rest = fuzz_rest(&in, &n);
    char value[4001];
    n = n < 4000 ? n : 4000;
    memcpy(value, rest, n);
    value[n] = '\0';

    char used[4096], again[4096];
    int secret = 0; /* a secret's used value is "(set, N bytes)", not the value */
    if (env_read(i, value, used) && !(secret = !strncmp(used, "(set, ", 6) && strcmp(used, value)) &&
        (!env_read(i, used, again) || strcmp(used, again) != 0)) {
        tempo_env_var(i, &v);
        fprintf(stderr, "%s='%s' is used as '%s', which reads back as %s'%s'\n", v.name, value,
                used, env_read(i, used, again) ? "" : "refused: ", again);
        abort();
    }
    /* the shared parsers on their own */
    double s;
    size_t b;
    char host[256];
    int port;
    (void)secret;
    (void)tempo__parse_time(value, &s);
    (void)tempo__parse_size(value, &b);
    if (tempo__addr_split(value, host, sizeof(host), &port) == 0 &&
        (port < 0 || port > 65535 || strlen(host) >= sizeof(host))) {
        abort();
    }
    return 0;
}

#ifdef FUZZ_SEEDS
static void fuzz_seeds(void)
{
    static const char *const s[][2] = {
        {"TEMPO_TIMEOUT", "500ms"},         {"TEMPO_SHM_RING_BYTES", "64K"},
        {"TEMPO_ROOT", "[::1]:4000"},       {"TEMPO_ROOT", "node7:29500"},
        {"TEMPO_DEBUG", "INFO"},            {"TEMPO_DEBUG_SUBSYS", "INIT,COLL"},
        {"TEMPO_ALGO", "allreduce:ring"},   {"TEMPO_TRANSPORTS", "^shm"},
        {"TEMPO_COMPRESS", "alq:bits=3"},   {"TEMPO_SCHED", "tic"},
        {"TEMPO_CHUNK_BYTES", "auto"},      {"TEMPO_RANK", "3"},
        {"TEMPO_SPIN", "2us"},              {"TEMPO_PROGRESS_THREAD", "1"}};
    for (size_t k = 0; k < sizeof(s) / sizeof(s[0]); k++) {
        tempo_env_var_t v;
        for (size_t i = 0; tempo_env_var(i, &v) == TEMPO_OK; i++) {
            if (!strcmp(v.name, s[k][0])) {
                uint8_t b[256] = {(uint8_t)i};
                size_t n = strlen(s[k][1]);
                memcpy(b + 1, s[k][1], n);
                fuzz_seed(b, 1 + n);
            }
        }
    }
}
#endif
