/*
 * fuzz.h — what the libFuzzer targets (tests/fuzz/fuzz_<name>.c) share: the entry points, a reader
 * that cuts the fuzzer's bytes into fields, and the seed writer.
 *
 * A target reads its input with fuzz_take* (fields past the end read as zeros), so every input is
 * valid and the same bytes always mean the same thing: targets are deterministic, keep no state
 * between inputs and free what they make (libFuzzer runs them with -detect_leaks=1).
 *
 * Seeds: built with -DFUZZ_SEEDS (tests/fuzz/fuzz.sh seeds), a target is a program whose main
 * calls its fuzz_seeds(), which writes a handful of valid inputs with fuzz_seed() into the
 * directory given as its argument (tests/fuzz/corpus/<name>/, committed).
 */
#ifndef TEMPO_TESTS_FUZZ_H
#define TEMPO_TESTS_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The input being read. */
typedef struct {
    const uint8_t *p;
    size_t n, off;
} fuzz_in_t;

/** Copy the next n bytes into out (zeros past the end). */
static inline void fuzz_take(fuzz_in_t *in, void *out, size_t n)
{
    size_t k = in->off < in->n ? in->n - in->off : 0;
    k = k < n ? k : n;
    memcpy(out, in->p + in->off, k);
    memset((char *)out + k, 0, n - k);
    in->off += k;
}

static inline uint8_t fuzz_u8(fuzz_in_t *in)
{
    uint8_t v;
    fuzz_take(in, &v, 1);
    return v;
}

static inline uint32_t fuzz_u32(fuzz_in_t *in)
{
    uint32_t v;
    fuzz_take(in, &v, 4);
    return v;
}

/** What is left of the input, as is. */
static inline const uint8_t *fuzz_rest(fuzz_in_t *in, size_t *n_p)
{
    size_t o = in->off < in->n ? in->off : in->n;
    *n_p = in->n - o;
    in->off = in->n;
    return in->p + o;
}

/** For targets of the handshakes (LLVMFuzzerInitialize): no job key, whatever the environment
 *  says, so that MACs are all zeros (what the seeds send), and no log lines. */
static inline void fuzz_no_key(void)
{
    unsetenv("TEMPO_AUTH_KEY");
    unsetenv("TEMPO_AUTH_KEY_FILE");
    setenv("TEMPO_DEBUG", "NONE", 1);
}

#ifdef FUZZ_SEEDS
static const char *fuzz_seed_dir;
static int fuzz_seed_n;

/** Write seed number fuzz_seed_n (n bytes) into the seed directory. */
static inline void fuzz_seed(const void *p, size_t n)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/seed-%02d", fuzz_seed_dir, fuzz_seed_n++);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

static void fuzz_seeds(void);

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR (writes the target's seeds into DIR)\n", argv[0]);
        return 2;
    }
    fuzz_seed_dir = argv[1];
    fuzz_seeds();
    return 0;
}
#endif

#endif /* TEMPO_TESTS_FUZZ_H */
