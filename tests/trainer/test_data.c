/*
 * test_data.c — the trainer's data pipeline (trainer/data.c), on small corpora that this program
 * writes into a temporary directory (removed at the end):
 *   tokenizer  bytes in, bytes out; detokenize escapes and truncates snprintf-style
 *   corpus     a text file; a directory (sorted, skipping .dat, hidden files, symlinks and
 *              subdirectories); a glob of shards in name order; shard header checks (magic,
 *              version, truncation, token count, token >= vocab); text and shards not mixed
 *   errors     missing / empty / too small corpora, a too small validation split, bad arguments:
 *              each message names the path and what is needed
 *   loader     on a shard whose token i is i (so a token says where it came from): windows of
 *              T + 1 tokens with y = x shifted; one epoch is a permutation of the training windows;
 *              dp=1 B=8, dp=2 B=4 and dp=4 B=2 read the same global batch at every step, over three
 *              epochs; same seed same order, another seed another order, the documented RNG gives
 *              the golden order; train and val tokens never meet; val windows the same at every dp;
 *              steps of K micro-batches read the same windows as dp * K ranks, across epochs
 *   state      save after k steps, restore into fresh loaders at dp 4, 2, 1 and read the same
 *              global batches (also saved at the end of an epoch); restore refuses another T,
 *              corpus or a bad state and leaves the loader as it was
 *   fortunes   /usr/share/games/fortunes (Debian's fortunes packages) when installed, else skipped
 */
#include "config.h"

#include <dirent.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tests/tap.h"
#include "trainer/data.h"

static char tmp[256];

static const char *tpath(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof(buf[k]), "%s/%s", tmp, name);
    return buf[k];
}

static void write_bytes(const char *name, const void *p, size_t n)
{
    FILE *f = fopen(tpath(name), "wb");
    if (f == NULL || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        printf("Bail out! cannot write %s\n", tpath(name));
        exit(1);
    }
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}

/* An llm.c shard by hand: header (magic, version, ntok_header), then ntok uint16 tokens. */
static void write_shard(const char *name, uint32_t magic, uint32_t version, uint32_t ntok_header,
                        const uint16_t *tok, size_t ntok)
{
    size_t size = 1024 + 2 * ntok;
    uint8_t *b = calloc(1, size);
    put32(b, magic);
    put32(b + 4, version);
    put32(b + 8, ntok_header);
    for (size_t i = 0; i < ntok; i++) {
        b[1024 + 2 * i] = (uint8_t)(tok[i] & 0xff);
        b[1024 + 2 * i + 1] = (uint8_t)(tok[i] >> 8);
    }
    write_bytes(name, b, size);
    free(b);
}

static uint16_t *iota16(size_t n, unsigned start)
{
    uint16_t *t = malloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) {
        t[i] = (uint16_t)(start + i);
    }
    return t;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

/* ---- tokenizer ---- */

static void test_tokenizer(void)
{
    const char text[] = "Hi\n\\\x00\xff~";
    size_t n = sizeof(text) - 1;
    int tok[16];
    TAP_EQ_UINT(data_tokenize(text, n, tok), n, "tokenize returns one token per byte");
    int want[] = {'H', 'i', '\n', '\\', 0, 255, '~'};
    int same = 1;
    for (size_t i = 0; i < n; i++) {
        same &= tok[i] == want[i];
    }
    TAP_OK(same, "tokenize: token = byte value (0 and 255 included)");

    char out[64];
    size_t len = data_detokenize(tok, n, out, sizeof(out));
    TAP_EQ_STR(out, "Hi\n\\\\\\x00\\xff~", "detokenize escapes \\, 0x00, 0xff and keeps newline");
    TAP_EQ_UINT(len, strlen("Hi\n\\\\\\x00\\xff~"), "detokenize returns the text length");
    int big[] = {65, 300, -1};
    data_detokenize(big, 3, out, sizeof(out));
    TAP_EQ_STR(out, "A<300><-1>", "detokenize prints tokens outside the byte vocabulary as <id>");
    len = data_detokenize(tok, n, out, 5);
    TAP_EQ_STR(out, "Hi\n\\", "detokenize truncates to cap - 1 characters");
    TAP_EQ_UINT(len, 14, "detokenize reports the full length when truncating");
}

/* ---- corpus ---- */

static void test_corpus(void)
{
    char err[DATA_ERR_LEN];
    data_corpus_t c;

    /* a text file */
    const char *s = "To be, or not to be\n%\nthat is the question\n";
    write_bytes("t.txt", s, strlen(s));
    int rc = data_corpus_load(tpath("t.txt"), 256, &c, err);
    TAP_EQ_INT(rc, 0, "text file loads");
    if (rc == 0) {
        int same = c.n == strlen(s) && !c.shards && c.nfiles == 1;
        for (size_t i = 0; same && i < c.n; i++) {
            same = c.tok[i] == (uint8_t)s[i];
        }
        TAP_OK(same, "text file: one token per byte, as is (n = %zu)", c.n);
        data_corpus_free(&c);
    }

    /* a directory: sorted, skipping .dat, hidden, symlinks, subdirectories */
    mkdir(tpath("dir"), 0700);
    write_bytes("dir/b", "BBB", 3);
    write_bytes("dir/a", "AA", 2);
    write_bytes("dir/a.dat", "XX", 2);
    write_bytes("dir/.hidden", "HH", 2);
    if (symlink("a", tpath("dir/a.u8")) != 0) {
        printf("Bail out! symlink\n");
        exit(1);
    }
    mkdir(tpath("dir/sub"), 0700);
    write_bytes("dir/sub/c", "CC", 2);
    rc = data_corpus_load(tpath("dir"), 256, &c, err);
    TAP_EQ_INT(rc, 0, "directory loads");
    if (rc == 0) {
        char got[16] = {0};
        for (size_t i = 0; i < c.n && i < 15; i++) {
            got[i] = (char)c.tok[i];
        }
        TAP_EQ_STR(got, "AABBB", "directory: files in name order, no .dat/hidden/symlink/subdir");
        TAP_EQ_INT(c.nfiles, 2, "directory: two files read");
        data_corpus_free(&c);
    }

    /* a glob of shards, created out of order */
    uint16_t *t1 = iota16(5, 100), *t0 = iota16(3, 7);
    write_shard("s_001.bin", DATA_SHARD_MAGIC, 1, 5, t1, 5);
    write_shard("s_000.bin", DATA_SHARD_MAGIC, 1, 3, t0, 3);
    rc = data_corpus_load(tpath("s_*.bin"), 65536, &c, err);
    TAP_EQ_INT(rc, 0, "glob of shards loads");
    if (rc == 0) {
        uint16_t want[] = {7, 8, 9, 100, 101, 102, 103, 104};
        int same = c.n == 8 && c.shards && c.nfiles == 2 && memcmp(c.tok, want, sizeof(want)) == 0;
        TAP_OK(same, "glob: shards concatenated in name order (n = %zu)", c.n);
        data_corpus_free(&c);
    }
    rc = data_corpus_load(tpath("s_000.bin"), 65536, &c, err);
    TAP_OK(rc == 0 && c.n == 3 && c.tok[2] == 9, "a single shard loads");
    data_corpus_free(&c);
    free(t0);
    free(t1);

    /* shard header checks */
    uint16_t *t = iota16(50, 0);
    write_shard("magic.bin", 20240521, 1, 50, t, 50);
    rc = data_corpus_load(tpath("magic.bin"), 65536, &c, err);
    TAP_EQ_INT(rc, -1, "bad magic is refused");
    TAP_CONTAINS(err, "magic 20240521, expected 20240520", "bad magic: says what it expected");
    TAP_CONTAINS(err, tpath("magic.bin"), "bad magic: names the file");
    write_shard("version.bin", DATA_SHARD_MAGIC, 7, 50, t, 50);
    rc = data_corpus_load(tpath("version.bin"), 65536, &c, err);
    TAP_EQ_INT(rc, -1, "bad version is refused");
    TAP_CONTAINS(err, "version 7, expected 1", "bad version: says so");
    write_shard("trunc.bin", DATA_SHARD_MAGIC, 1, 100, t, 50);
    rc = data_corpus_load(tpath("trunc.bin"), 65536, &c, err);
    TAP_EQ_INT(rc, -1, "truncated shard is refused");
    TAP_CONTAINS(err, "header says 100 tokens", "truncated shard: gives the header's count");
    write_shard("long.bin", DATA_SHARD_MAGIC, 1, 49, t, 50);
    rc = data_corpus_load(tpath("long.bin"), 65536, &c, err);
    TAP_EQ_INT(rc, -1, "shard longer than its header says is refused");
    write_bytes("short.bin", "\x30\xd1\x34\x01", 4);
    rc = data_corpus_load(tpath("short.bin"), 65536, &c, err);
    TAP_EQ_INT(rc, -1, "shard shorter than the header is refused");
    TAP_CONTAINS(err, "shorter than the 1024-byte header", "short shard: says so");
    t[42] = 256;
    write_shard("range.bin", DATA_SHARD_MAGIC, 1, 50, t, 50);
    rc = data_corpus_load(tpath("range.bin"), 256, &c, err);
    TAP_EQ_INT(rc, -1, "token >= vocab is refused");
    TAP_CONTAINS(err, "token 42 is 256, not below the vocabulary size 256", "out of range: where");
    rc = data_corpus_load(tpath("range.bin"), 257, &c, err);
    TAP_OK(rc == 0 && c.n == 50 && c.tok[42] == 256, "the same shard loads with vocab 257");
    data_corpus_free(&c);
    rc = data_corpus_load(tpath("t.txt"), 100, &c, err);
    TAP_EQ_INT(rc, -1, "text with a byte >= vocab is refused");
    TAP_CONTAINS(err, "not below the vocabulary size 100", "text out of range: says so");
    free(t);

    /* text and shards do not mix */
    mkdir(tpath("mixed"), 0700);
    t = iota16(4, 0);
    write_shard("mixed/a.bin", DATA_SHARD_MAGIC, 1, 4, t, 4);
    write_bytes("mixed/b.txt", "hello", 5);
    rc = data_corpus_load(tpath("mixed"), 65536, &c, err);
    TAP_EQ_INT(rc, -1, "a directory mixing text and shards is refused");
    TAP_CONTAINS(err, "mixes text files and token shards", "mixed: says so");
    free(t);
}

/* ---- errors ---- */

static void test_errors(void)
{
    char err[DATA_ERR_LEN];
    loader_t *l = loader_open(tpath("nope"), 256, 4, 2, 0, 1, 1, 0.0, err);
    TAP_OK(l == NULL, "missing corpus is refused");
    TAP_CONTAINS(err, tpath("nope"), "missing: names the path");
    TAP_CONTAINS(err, "No such file", "missing: says why");

    write_bytes("empty.txt", "", 0);
    l = loader_open(tpath("empty.txt"), 256, 4, 2, 0, 1, 1, 0.0, err);
    TAP_OK(l == NULL, "empty corpus is refused");
    TAP_CONTAINS(err, "empty.txt is empty", "empty: names the path");
    TAP_CONTAINS(err, "dp*B*T+1 = 9 tokens", "empty: says what one batch needs");

    mkdir(tpath("emptydir"), 0700);
    write_bytes("emptydir/x.dat", "index", 5);
    l = loader_open(tpath("emptydir"), 256, 4, 2, 0, 1, 1, 0.0, err);
    TAP_OK(l == NULL, "directory without data files is refused");
    TAP_CONTAINS(err, "emptydir has no data files", "empty directory: names it");

    l = loader_open(tpath("zz_*.bin"), 256, 4, 2, 0, 1, 1, 0.0, err);
    TAP_OK(l == NULL, "a glob matching nothing is refused");
    TAP_CONTAINS(err, "matches no file", "glob: says so");

    /* 100 bytes: dp=2 B=4 T=16 needs 2*4*16+1 = 129 */
    char text[100];
    memset(text, 'a', sizeof(text));
    write_bytes("small.txt", text, sizeof(text));
    l = loader_open(tpath("small.txt"), 256, 16, 4, 1, 2, 1, 0.0, err);
    TAP_OK(l == NULL, "corpus smaller than one global batch is refused");
    TAP_CONTAINS(err, "small.txt is too small: 100 training tokens", "too small: names path, size");
    TAP_CONTAINS(err, "needs 129", "too small: says what is needed");
    l = loader_open(tpath("small.txt"), 256, 16, 4, 0, 1, 1, 0.0, err);
    TAP_OK(l != NULL, "the same corpus is enough for dp=1 B=4 T=16 (65 tokens)");
    loader_close(l);
    l = loader_open(tpath("small.txt"), 256, 16, 4, 0, 1, 1, 0.5, err);
    TAP_OK(l == NULL, "too small once half is held out for validation");
    TAP_CONTAINS(err, "after holding out 50 for validation", "too small with val: says why");
    l = loader_open(tpath("small.txt"), 256, 8, 4, 0, 1, 1, 0.05, err);
    TAP_OK(l == NULL, "a validation split smaller than one window is refused");
    TAP_CONTAINS(err, "validation split (val_fraction 0.05: 5 tokens)", "small val: says so");

    l = loader_open(tpath("small.txt"), 256, 4, 2, 2, 2, 1, 0.0, err);
    TAP_OK(l == NULL, "rank >= dp is refused");
    TAP_CONTAINS(err, "rank=2 dp=2", "bad rank: shows the values");
    l = loader_open(tpath("small.txt"), 256, 4, 2, 0, 1, 1, 1.0, err);
    TAP_OK(l == NULL, "val_fraction 1 is refused");
    TAP_CONTAINS(err, "val_fraction 1 is outside [0, 1)", "val_fraction 1: says so");
    l = loader_open(tpath("small.txt"), 256, 0, 2, 0, 1, 1, 0.0, err);
    TAP_OK(l == NULL, "T = 0 is refused");
}

/* ---- loader ---- */

enum { N = 2000, T = 4, G = 8, EPOCH = 56 }; /* ntrain 1800: 449 windows, 56 batches of 8 */
static const double VAL = 0.1;

static loader_t *open_pos(int B, int rank, int dp, uint64_t seed)
{
    char err[DATA_ERR_LEN];
    loader_t *l = loader_open(tpath("pos.bin"), 65536, T, B, rank, dp, seed, VAL, err);
    if (l == NULL) {
        printf("Bail out! loader_open: %s\n", err);
        exit(1);
    }
    return l;
}

/* One global batch read by dp ranks of B = G / dp windows each, concatenated by rank:
 * starts[G] = the first token of each window (its position). Returns 0 if any window is
 * malformed (not T + 1 consecutive positions starting at a multiple of T, within training). */
static int global_batch(loader_t **ls, int dp, int starts[G])
{
    int B = G / dp, ok = 1, x[G * T], y[G * T];
    for (int r = 0; r < dp; r++) {
        loader_next_train(ls[r], x, y);
        for (int b = 0; b < B; b++) {
            int *xr = x + b * T, *yr = y + b * T;
            starts[r * B + b] = xr[0];
            ok &= xr[0] % T == 0 && yr[T - 1] < N - (int)(N * VAL);
            for (int k = 0; k < T; k++) {
                ok &= xr[k] == xr[0] + k && yr[k] == xr[k] + 1;
            }
        }
    }
    return ok;
}

/* Steps of K micro-batches read K * dp * B windows of one epoch, whatever the split: dp=2 B=3 K=1
 * and dp=1 B=3 K=2 read the same windows step by step, across the epoch's end (449 windows: the
 * epoch turns after 74 steps of 6, leaving 5; a loader that turned the epoch per micro-batch
 * would read one more micro-batch of 3 from the old epoch there). */
static void read_starts(loader_t *l, int B, int *starts)
{
    int x[8 * T], y[8 * T];
    loader_next_train(l, x, y);
    for (int b = 0; b < B; b++) {
        starts[b] = x[b * T];
    }
}

static void test_accum(void)
{
    char err[DATA_ERR_LEN];
    loader_t *two[2] = {open_pos(3, 0, 2, 77), open_pos(3, 1, 2, 77)}, *acc = open_pos(3, 0, 1, 77);
    TAP_EQ_INT(loader_set_accum(acc, 150, err), -1, "accum 150 (450 windows of 449) is refused");
    TAP_CONTAINS(err, "has 449 windows", "too many micro-batches: says how many windows");
    TAP_EQ_INT(loader_set_accum(acc, 2, err), 0, "accum 2 at dp=1 B=3");
    int bad = 0, a[6], b[6];
    for (int s = 0; s < 77; s++) {
        read_starts(two[0], 3, a);
        read_starts(two[1], 3, a + 3);
        read_starts(acc, 3, b);
        read_starts(acc, 3, b + 3);
        bad += memcmp(a, b, sizeof(a)) != 0;
    }
    TAP_EQ_INT(bad, 0, "dp=2 B=3 and dp=1 B=3 accum 2 read the same windows (77 steps, 2 epochs)");
    loader_close(two[0]);
    loader_close(two[1]);
    loader_close(acc);
}

static void test_loader(void)
{
    uint16_t *t = iota16(N, 0);
    write_shard("pos.bin", DATA_SHARD_MAGIC, 1, N, t, N);
    free(t);

    loader_t *one = open_pos(8, 0, 1, 1234);
    loader_info_t info;
    loader_info(one, &info);
    TAP_EQ_UINT(info.tokens, N, "info: tokens");
    TAP_EQ_UINT(info.train_tokens, 1800, "info: train tokens (last 10 %% held out)");
    TAP_EQ_UINT(info.val_tokens, 200, "info: val tokens");
    TAP_EQ_UINT(info.train_windows, 449, "info: train windows = (1800 - 1) / 4");
    TAP_EQ_UINT(info.val_windows, 49, "info: val windows = (200 - 1) / 4");
    TAP_EQ_UINT(info.batches_per_epoch, EPOCH, "info: batches per epoch");
    TAP_EQ_INT(info.shards, 1, "info: shards");

    /* dp = 1, 2, 4 at the same global batch, three epochs and a bit */
    loader_t *two[2] = {open_pos(4, 0, 2, 1234), open_pos(4, 1, 2, 1234)};
    loader_t *four[4];
    for (int r = 0; r < 4; r++) {
        four[r] = open_pos(2, r, 4, 1234);
    }
    int steps = 3 * EPOCH + 7, bad_union = 0, bad_window = 0, s1[G], s2[G], s4[G];
    static int order[4 * EPOCH][G]; /* dp=1 order, per step */
    for (int s = 0; s < steps; s++) {
        bad_window += !global_batch(&one, 1, s1);
        bad_window += !global_batch(two, 2, s2);
        bad_window += !global_batch(four, 4, s4);
        bad_union += memcmp(s1, s2, sizeof(s1)) != 0 || memcmp(s1, s4, sizeof(s1)) != 0;
        memcpy(order[s], s1, sizeof(s1));
    }
    TAP_EQ_INT(bad_window, 0, "every window is T + 1 consecutive training tokens, y = x + 1");
    TAP_EQ_INT(bad_union, 0, "dp=1 B=8, dp=2 B=4, dp=4 B=2 read the same global batch (%d steps)",
               steps);

    /* each epoch is a permutation: 448 distinct windows; epochs differ */
    for (int e = 0; e < 3; e++) {
        static unsigned char seen[N];
        memset(seen, 0, sizeof(seen));
        int dup = 0;
        for (int s = e * EPOCH; s < (e + 1) * EPOCH; s++) {
            for (int i = 0; i < G; i++) {
                dup += seen[order[s][i]]++ != 0;
            }
        }
        TAP_EQ_INT(dup, 0, "epoch %d reads %d distinct windows", e, EPOCH * G);
    }
    TAP_OK(memcmp(order[0], order[EPOCH], sizeof(order[0])) != 0 &&
               memcmp(order[EPOCH], order[2 * EPOCH], sizeof(order[0])) != 0,
           "epochs 0, 1, 2 start differently");

    /* Golden order from an independent Python rendering of the RNG in data.h (seed 1234, W 449):
     * mix(z): z ^= z>>30; z *= 0xbf58476d1ce4e5b9; z ^= z>>27; z *= 0x94d049bb133111eb; z ^ z>>31
     * x = mix(mix(seed) + epoch); s[k] = mix(x += 0x9e3779b97f4a7c15), k = 0..3; xoshiro256**;
     * Fisher-Yates from the top with rejection below 2^64 mod (i + 1). */
    int gold0[G] = {435, 176, 280, 120, 21, 198, 38, 222};
    int gold1[G] = {239, 252, 60, 427, 241, 150, 152, 429};
    int g0 = 1, g1 = 1;
    for (int i = 0; i < G; i++) {
        g0 &= order[0][i] == gold0[i] * T;
        g1 &= order[EPOCH][i] == gold1[i] * T;
    }
    TAP_OK(g0, "epoch 0 of seed 1234 starts with the documented RNG's windows");
    TAP_OK(g1, "epoch 1 of seed 1234 starts with the documented RNG's windows");

    /* determinism and seed dependence */
    loader_t *again = open_pos(8, 0, 1, 1234), *other = open_pos(8, 0, 1, 1235);
    int differ_again = 0, same_other = 0;
    for (int s = 0; s < EPOCH + 3; s++) {
        int a[G], o[G];
        global_batch(&again, 1, a);
        global_batch(&other, 1, o);
        differ_again += memcmp(a, order[s], sizeof(a)) != 0;
        same_other += memcmp(o, order[s], sizeof(o)) == 0;
    }
    TAP_EQ_INT(differ_again, 0, "same seed: the same batches");
    TAP_EQ_INT(same_other, 0, "another seed: no batch the same");
    loader_close(again);
    loader_close(other);

    /* validation: after the training split, in order, the same windows at any dp and B */
    size_t nv = loader_val_windows(one);
    int bad_val = 0, x[G * T], y[G * T];
    TAP_EQ_UINT(nv, 49, "val windows at dp=1 B=8");
    TAP_EQ_UINT(loader_val_windows(four[3]), 49, "val windows at dp=4 B=2: the same count");
    for (size_t w = 0; w < nv; w++) {
        int x4[T], y4[T];
        bad_val += loader_val_window(one, w, x, y) != 0;
        bad_val += loader_val_window(four[3], w, x4, y4) != 0;
        bad_val += memcmp(x, x4, sizeof(x4)) != 0 || memcmp(y, y4, sizeof(y4)) != 0;
        for (int k = 0; k < T; k++) {
            bad_val += x[k] != 1800 + (int)w * T + k || y[k] != x[k] + 1;
        }
    }
    TAP_EQ_INT(bad_val, 0, "val window w is tokens [1800 + wT, +T+1), the same on every rank");
    TAP_EQ_INT(loader_val_window(one, nv, x, y), -1, "val window past the end is refused");
    /* disjointness: every training token is < 1800 (checked per window above), every val >= 1800 */
    int min_val = N;
    for (size_t w = 0; w < nv; w++) {
        loader_val_window(one, w, x, y);
        for (int k = 0; k < T; k++) {
            min_val = x[k] < min_val ? x[k] : min_val;
        }
    }
    TAP_EQ_INT(min_val, 1800, "train and val never share a token (val starts at 1800)");

    /* the epoch turns exactly when fewer than G windows are left */
    loader_state_t st;
    loader_get_state(one, &st);
    TAP_OK(st.epoch == 3 && st.pos == 7 * G, "after %d steps: epoch 3, %d windows in (%llu, %llu)",
           steps, 7 * G, (unsigned long long)st.epoch, (unsigned long long)st.pos);
    uint16_t *t16 = iota16(2 * G * T + 1, 0);
    write_shard("two.bin", DATA_SHARD_MAGIC, 1, 2 * G * T + 1, t16, 2 * G * T + 1);
    free(t16);
    char err[DATA_ERR_LEN];
    loader_t *two_b = loader_open(tpath("two.bin"), 65536, T, G, 0, 1, 1, 0.0, err);
    int seen16 = 0, bx[G * T], by[G * T], where_ok = 1;
    for (int s = 0; two_b != NULL && s < 3; s++) {
        loader_next_train(two_b, bx, by);
        for (int i = 0; s < 2 && i < G; i++) {
            seen16 |= 1 << (bx[i * T] / T);
        }
        loader_get_state(two_b, &st);
        where_ok &= st.epoch == (s == 2) && st.pos == (uint64_t)(s == 2 ? G : (s + 1) * G);
    }
    TAP_OK(two_b != NULL && seen16 == 0xffff && where_ok,
           "16 windows, G = 8: epoch 0 is two batches covering all, then epoch 1 (seen %04x)",
           (unsigned)seen16);
    loader_close(two_b);
    test_accum();

    loader_close(one);
    for (int r = 0; r < 2; r++) {
        loader_close(two[r]);
    }
    for (int r = 0; r < 4; r++) {
        loader_close(four[r]);
    }
}

/* Save at step `at` of a dp=4 run, restore at dp 4, 2 and 1, compare the next `len` batches. */
static void check_resume(int at, int len)
{
    char err[DATA_ERR_LEN];
    loader_t *four[4];
    for (int r = 0; r < 4; r++) {
        four[r] = open_pos(2, r, 4, 77);
    }
    int s4[G];
    for (int s = 0; s < at; s++) {
        global_batch(four, 4, s4);
    }
    loader_state_t st, st3;
    loader_get_state(four[0], &st);
    loader_get_state(four[3], &st3);
    TAP_OK(memcmp(&st, &st3, sizeof(st)) == 0, "step %d: every rank saves the same state", at);
    TAP_EQ_UINT(sizeof(loader_state_t), 56, "the state is 56 bytes");
    int(*want)[G] = malloc((size_t)len * sizeof(*want));
    for (int s = 0; s < len; s++) {
        global_batch(four, 4, want[s]);
    }
    for (int dp = 4; dp >= 1; dp /= 2) {
        loader_t *ls[4];
        int ok = 1;
        for (int r = 0; r < dp; r++) {
            ls[r] = open_pos(G / dp, r, dp, 5); /* another seed: the state's wins */
            ok &= loader_set_state(ls[r], &st, err) == 0;
        }
        int bad = 0, got[G];
        for (int s = 0; ok && s < len; s++) {
            global_batch(ls, dp, got);
            bad += memcmp(got, want[s], sizeof(got)) != 0;
        }
        TAP_OK(ok && bad == 0, "saved at step %d (dp=4), restored at dp=%d: the same %d batches",
               at, dp, len);
        if (!ok) {
            tap_diag("  %s", err);
        }
        for (int r = 0; r < dp; r++) {
            loader_close(ls[r]);
        }
    }
    free(want);
    for (int r = 0; r < 4; r++) {
        loader_close(four[r]);
    }
}

static void test_state(void)
{
    check_resume(10, 60);   /* crosses into epoch 1 */
    check_resume(EPOCH, 5); /* saved at the end of an epoch */
    check_resume(0, 3);

    char err[DATA_ERR_LEN];
    loader_t *l = open_pos(8, 0, 1, 9), *ctl = open_pos(8, 0, 1, 9);
    int a[G], b[G];
    global_batch(&l, 1, a);
    global_batch(&ctl, 1, b);
    loader_state_t st, bad;
    loader_get_state(l, &st);

    bad = st;
    bad.magic ^= 1;
    TAP_EQ_INT(loader_set_state(l, &bad, err), -1, "a state with a wrong magic is refused");
    TAP_CONTAINS(err, "magic", "wrong magic: says so");
    bad = st;
    bad.pos = 450;
    TAP_EQ_INT(loader_set_state(l, &bad, err), -1, "a position past the epoch is refused");
    TAP_CONTAINS(err, "past the end of the epoch", "bad position: says so");
    bad = st;
    bad.hash ^= 1;
    TAP_EQ_INT(loader_set_state(l, &bad, err), -1, "a state of another corpus is refused");
    TAP_CONTAINS(err, "another corpus", "another corpus: says so");

    loader_t *t8 = loader_open(tpath("pos.bin"), 65536, 8, 4, 0, 1, 9, VAL, err);
    TAP_EQ_INT(loader_set_state(t8, &st, err), -1, "a state saved with another T is refused");
    TAP_CONTAINS(err, "T=4, this loader has T=8", "another T: says so");
    loader_close(t8);
    uint16_t *t = iota16(N, 1);
    write_shard("pos1.bin", DATA_SHARD_MAGIC, 1, N, t, N);
    free(t);
    loader_t *p1 = loader_open(tpath("pos1.bin"), 65536, T, 8, 0, 1, 9, VAL, err);
    TAP_EQ_INT(loader_set_state(p1, &st, err), -1, "a same-size corpus with other tokens too");
    loader_close(p1);

    int bad_after = 0;
    for (int s = 0; s < 5; s++) {
        global_batch(&l, 1, a);
        global_batch(&ctl, 1, b);
        bad_after += memcmp(a, b, sizeof(a)) != 0;
    }
    TAP_EQ_INT(bad_after, 0, "refused restores leave the loader where it was");
    loader_close(l);
    loader_close(ctl);
}

/* ---- text and fortunes ---- */

static void test_text_loader(void)
{
    char err[DATA_ERR_LEN], text[3000];
    for (size_t i = 0; i < sizeof(text); i++) {
        text[i] = (char)('a' + i % 26);
    }
    write_bytes("abc.txt", text, sizeof(text));
    loader_t *l = loader_open(tpath("abc.txt"), 256, 8, 4, 0, 1, 3, 0.1, err);
    TAP_OK(l != NULL, "text corpus opens (vocab 256)");
    if (l != NULL) {
        int x[32], y[32], ok = 1;
        loader_next_train(l, x, y);
        for (int i = 0; i < 32; i++) {
            ok &= x[i] >= 'a' && x[i] <= 'z' && y[i] == 'a' + (x[i] - 'a' + 1) % 26;
        }
        TAP_OK(ok, "text batch: byte tokens, y follows x");
        loader_close(l);
    }
}

static void test_fortunes(void)
{
    const char *dir = "/usr/share/games/fortunes";
    DIR *d = opendir(dir);
    if (d == NULL) {
        tap_skip("fortunes not installed (apt-get install fortunes fortunes-min)",
                 "fortune directory corpus");
        return;
    }
    size_t want = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char p[1024];
        struct stat st;
        size_t ln = strlen(e->d_name);
        snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
        if (e->d_name[0] != '.' && !(ln >= 4 && strcmp(e->d_name + ln - 4, ".dat") == 0) &&
            lstat(p, &st) == 0 && S_ISREG(st.st_mode)) {
            want += (size_t)st.st_size;
        }
    }
    closedir(d);
    char err[DATA_ERR_LEN];
    loader_t *l = loader_open(dir, 256, 64, 4, 0, 1, 1, 0.1, err);
    TAP_OK(l != NULL, "fortunes directory opens");
    if (l == NULL) {
        tap_diag("  %s", err);
        return;
    }
    loader_info_t info;
    loader_info(l, &info);
    TAP_EQ_UINT(info.tokens, want, "fortunes: tokens = bytes of the regular non-.dat files");
    tap_diag("fortunes: %d files, %zu tokens, %zu batches of 4x64 per epoch, %zu val windows",
             info.nfiles, info.tokens, info.batches_per_epoch, info.val_windows);
    int x[4 * 64], y[4 * 64];
    loader_next_train(l, x, y);
    char sample[1024];
    data_detokenize(x, 64, sample, sizeof(sample));
    for (char *p = sample; *p; p++) {
        *p = *p == '\n' ? '|' : *p;
    }
    tap_diag("sample: %s", sample);
    loader_close(l);
}

int main(void)
{
    const char *base = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(tmp, sizeof(tmp), "%s/test_data.XXXXXX", base);
    if (mkdtemp(tmp) == NULL) {
        printf("Bail out! mkdtemp %s\n", tmp);
        return 1;
    }
    test_tokenizer();
    test_corpus();
    test_errors();
    test_loader();
    test_state();
    test_text_loader();
    test_fortunes();
    nftw(tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    struct stat st;
    TAP_OK(stat(tmp, &st) != 0, "the temporary directory is gone");
    return tap_done();
}
