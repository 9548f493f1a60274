/*
 * fuzz_files.h — for the targets of file readers (fuzz_shard.c, fuzz_ckpt.c): a private
 * directory for the process (removed at exit) where each input is written as files, since those
 * readers take paths. The writes are whole and synchronous, so the same input reads the same.
 */
#ifndef TEMPO_TESTS_FUZZ_FILES_H
#define TEMPO_TESTS_FUZZ_FILES_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fuzz_dir[512];

static void fuzz_dir_remove(void)
{
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fuzz_dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "cannot remove %s\n", fuzz_dir);
    }
}

/** Make the directory (once): $TMPDIR/tempo-fuzz-files.XXXXXX. */
static void fuzz_dir_make(void)
{
    const char *t = getenv("TMPDIR");
    snprintf(fuzz_dir, sizeof(fuzz_dir), "%s/tempo-fuzz-files.XXXXXX", t && *t ? t : "/tmp");
    if (!mkdtemp(fuzz_dir)) {
        perror("mkdtemp");
        exit(1);
    }
    atexit(fuzz_dir_remove);
}

/** Write n bytes as the file name (in the directory; path receives its path, 4096 bytes). */
static void fuzz_file(const char *name, const void *p, size_t n, char *path)
{
    snprintf(path, 4096, "%s/%s", fuzz_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        perror(path);
        abort();
    }
}

#endif /* TEMPO_TESTS_FUZZ_FILES_H */
