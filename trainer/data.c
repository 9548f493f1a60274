/*
 * data.c — the trainer's data pipeline (see data.h for the definitions of windows, split, shuffle
 * and rank slices): byte-level tokenizer, llm.c token shard reader, corpus listing (file,
 * directory, glob), and the loader.
 *
 * Not a streaming reader: the whole corpus is one uint16 array in memory. Not thread-safe.
 *
 * Invariants of a loader: tok[0, ntrain) is the training split and tok[ntrain, n) validation;
 * perm (train_windows) is the permutation of epoch `epoch`; 0 <= pos <= train_windows and pos is
 * counted in global windows, so it means the same thing at any dp. Only loader_next_train moves
 * (epoch, pos), and it regenerates perm whenever epoch changes; an epoch turns only at the first
 * micro-batch of a step (micro == 0), so a step's accum * dp * B windows are from one epoch.
 */
#include "config.h"

#include "trainer/data.h"

#include <dirent.h>
#include <errno.h>
#include <glob.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void seterr(char *err_p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void seterr(char *err_p, const char *fmt, ...)
{
    if (err_p == NULL) {
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_p, DATA_ERR_LEN, fmt, ap);
    va_end(ap);
}

/* ---- tokenizer ---- */

size_t data_tokenize(const void *bytes, size_t n, int *tokens)
{
    const uint8_t *b = bytes;
    for (size_t i = 0; i < n; i++) {
        tokens[i] = b[i];
    }
    return n;
}

size_t data_detokenize(const int *tokens, size_t n, char *out, size_t cap)
{
    size_t len = 0;
    char piece[16];
    for (size_t i = 0; i < n; i++) {
        int t = tokens[i];
        if (t < 0 || t >= DATA_BYTE_VOCAB) {
            snprintf(piece, sizeof(piece), "<%d>", t);
        } else if (t == '\\') {
            strcpy(piece, "\\\\");
        } else if ((t >= 0x20 && t <= 0x7e) || t == '\n') {
            piece[0] = (char)t;
            piece[1] = '\0';
        } else {
            snprintf(piece, sizeof(piece), "\\x%02x", (unsigned)t);
        }
        for (const char *p = piece; *p; p++, len++) {
            if (len + 1 < cap) {
                out[len] = *p;
            }
        }
    }
    if (cap > 0) {
        out[len < cap ? len : cap - 1] = '\0';
    }
    return len;
}

/* ---- corpus ---- */

typedef struct {
    char **v; /* (n) owned paths */
    int n, cap;
} pathlist_t;

static int pathlist_add(pathlist_t *l, const char *path)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        char **v = realloc(l->v, (size_t)cap * sizeof(char *));
        if (v == NULL) {
            return -1;
        }
        l->v = v;
        l->cap = cap;
    }
    if ((l->v[l->n] = strdup(path)) == NULL) {
        return -1;
    }
    l->n++;
    return 0;
}

static void pathlist_free(pathlist_t *l)
{
    for (int i = 0; i < l->n; i++) {
        free(l->v[i]);
    }
    free(l->v);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t ls = strlen(s), lx = strlen(suffix);
    return ls >= lx && strcmp(s + ls - lx, suffix) == 0;
}

/* The files of a directory (regular, not hidden, not *.dat, not symlinks), sorted. */
static int list_dir(const char *dir, pathlist_t *l, char *err_p)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        seterr(err_p, "cannot open corpus directory %s: %s", dir, strerror(errno));
        return -1;
    }
    int rc = 0;
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || ends_with(e->d_name, ".dat")) {
            continue;
        }
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
            continue;
        }
        if (pathlist_add(l, path) != 0) {
            seterr(err_p, "out of memory listing %s", dir);
            rc = -1;
            break;
        }
    }
    closedir(d);
    if (rc == 0 && l->n == 0) {
        seterr(err_p,
               "corpus directory %s has no data files (it needs regular files; hidden files, "
               "*.dat and symbolic links are skipped)",
               dir);
        rc = -1;
    }
    return rc;
}

static int list_glob(const char *pattern, pathlist_t *l, char *err_p)
{
    glob_t g;
    int grc = glob(pattern, 0, NULL, &g);
    if (grc == GLOB_NOMATCH) {
        seterr(err_p, "corpus pattern %s matches no file", pattern);
        return -1;
    }
    if (grc != 0) {
        seterr(err_p, "cannot expand corpus pattern %s (glob error %d)", pattern, grc);
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; i < g.gl_pathc && rc == 0; i++) {
        struct stat st;
        if (stat(g.gl_pathv[i], &st) == 0 && S_ISREG(st.st_mode)) {
            if (pathlist_add(l, g.gl_pathv[i]) != 0) {
                seterr(err_p, "out of memory expanding %s", pattern);
                rc = -1;
            }
        }
    }
    globfree(&g);
    if (rc == 0 && l->n == 0) {
        seterr(err_p, "corpus pattern %s matches no regular file", pattern);
        rc = -1;
    }
    return rc;
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Append the file's tokens to c, whose tok has room for cap tokens in all. */
static int read_file(const char *path, int vocab, size_t cap, data_corpus_t *c, int *shard_p,
                     char *err_p)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        seterr(err_p, "cannot open corpus file %s: %s", path, strerror(errno));
        return -1;
    }
    int rc = -1;
    uint8_t *buf = NULL;
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        seterr(err_p, "cannot stat corpus file %s: %s", path, strerror(errno));
        goto out;
    }
    size_t size = (size_t)st.st_size;
    buf = malloc(size ? size : 1);
    if (buf == NULL) {
        seterr(err_p, "out of memory reading %s (%zu bytes)", path, size);
        goto out;
    }
    if (fread(buf, 1, size, f) != size) {
        seterr(err_p, "cannot read corpus file %s (%zu bytes)", path, size);
        goto out;
    }
    if (size > cap - c->n) { /* it grew since the caller sized the corpus */
        seterr(err_p, "corpus file %s changed while being read", path);
        goto out;
    }
    int shard = ends_with(path, ".bin") || (size >= 4 && le32(buf) == DATA_SHARD_MAGIC);
    if (shard) {
        if (size < DATA_SHARD_HEADER_BYTES) {
            seterr(err_p, "token shard %s is truncated: %zu bytes, shorter than the %d-byte header",
                   path, size, DATA_SHARD_HEADER_BYTES);
            goto out;
        }
        uint32_t magic = le32(buf), version = le32(buf + 4), ntok = le32(buf + 8);
        if (magic != DATA_SHARD_MAGIC) {
            seterr(err_p, "token shard %s has magic %u, expected %d (llm.c GPT-2 uint16 shard)",
                   path, magic, DATA_SHARD_MAGIC);
            goto out;
        }
        if (version != DATA_SHARD_VERSION) {
            seterr(err_p, "token shard %s has version %u, expected %d", path, version,
                   DATA_SHARD_VERSION);
            goto out;
        }
        if ((int32_t)ntok < 0 || size != DATA_SHARD_HEADER_BYTES + 2 * (size_t)ntok) {
            seterr(err_p,
                   "token shard %s is %zu bytes, but its header says %d tokens "
                   "(1024 + 2 * %d = %zu bytes)",
                   path, size, (int32_t)ntok, (int32_t)ntok,
                   DATA_SHARD_HEADER_BYTES + 2 * (size_t)ntok);
            goto out;
        }
        const uint8_t *p = buf + DATA_SHARD_HEADER_BYTES;
        for (size_t i = 0; i < ntok; i++) {
            unsigned t = (unsigned)p[2 * i] | (unsigned)p[2 * i + 1] << 8;
            if (t >= (unsigned)vocab) {
                seterr(err_p, "token shard %s: token %zu is %u, not below the vocabulary size %d",
                       path, i, t, vocab);
                goto out;
            }
            c->tok[c->n + i] = (uint16_t)t;
        }
        c->n += ntok;
    } else {
        for (size_t i = 0; i < size; i++) {
            if (buf[i] >= vocab) {
                seterr(err_p,
                       "text file %s: byte %zu is %u, not below the vocabulary size %d "
                       "(byte-level text needs vocab >= 256)",
                       path, i, buf[i], vocab);
                goto out;
            }
            c->tok[c->n + i] = buf[i];
        }
        c->n += size;
    }
    *shard_p = shard;
    rc = 0;
out:
    free(buf);
    fclose(f);
    return rc;
}

int data_corpus_load(const char *path, int vocab, data_corpus_t *corpus_p, char err_p[DATA_ERR_LEN])
{
    if (path == NULL || *path == '\0') {
        seterr(err_p, "no corpus path given");
        return -1;
    }
    if (vocab < 1 || vocab > DATA_MAX_VOCAB) {
        seterr(err_p, "vocabulary size %d is outside [1, %d]", vocab, DATA_MAX_VOCAB);
        return -1;
    }
    pathlist_t files = {0};
    data_corpus_t c = {0};
    int rc = -1;
    struct stat st;
    if (strpbrk(path, "*?[") != NULL && stat(path, &st) != 0) {
        if (list_glob(path, &files, err_p) != 0) {
            goto out;
        }
    } else if (stat(path, &st) != 0) {
        seterr(err_p,
               "corpus %s: %s (give a text file, a directory, a token shard or a glob of "
               "shards)",
               path, strerror(errno));
        goto out;
    } else if (S_ISDIR(st.st_mode)) {
        if (list_dir(path, &files, err_p) != 0) {
            goto out;
        }
    } else if (pathlist_add(&files, path) != 0) {
        seterr(err_p, "out of memory");
        goto out;
    }
    qsort(files.v, (size_t)files.n, sizeof(char *), cmp_str);

    /* A file of s bytes holds at most s tokens (text) or (s - 1024) / 2 (shard). */
    size_t cap = 0;
    for (int i = 0; i < files.n; i++) {
        if (stat(files.v[i], &st) != 0) {
            seterr(err_p, "corpus file %s: %s", files.v[i], strerror(errno));
            goto out;
        }
        cap += (size_t)st.st_size;
    }
    c.tok = malloc((cap ? cap : 1) * sizeof(uint16_t));
    if (c.tok == NULL) {
        seterr(err_p, "out of memory for corpus %s (%zu bytes)", path, cap);
        goto out;
    }
    for (int i = 0; i < files.n; i++) {
        int shard;
        if (read_file(files.v[i], vocab, cap, &c, &shard, err_p) != 0) {
            goto out;
        }
        if (i > 0 && shard != c.shards) {
            seterr(err_p, "corpus %s mixes text files and token shards (%s is %s)", path,
                   files.v[i], shard ? "a shard" : "text");
            goto out;
        }
        c.shards = shard;
        c.nfiles++;
    }
    *corpus_p = c;
    c.tok = NULL;
    rc = 0;
out:
    free(c.tok);
    pathlist_free(&files);
    return rc;
}

void data_corpus_free(data_corpus_t *corpus)
{
    if (corpus == NULL) {
        return;
    }
    free(corpus->tok);
    memset(corpus, 0, sizeof(*corpus));
}

/* ---- shuffle RNG: splitmix64 to seed, xoshiro256** to draw ---- */

static uint64_t splitmix64_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t splitmix64_next(uint64_t *x)
{
    *x += 0x9e3779b97f4a7c15ull;
    return splitmix64_mix(*x);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t xoshiro_next(uint64_t s[4])
{
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

/* Uniform in [0, n), n >= 1, by rejection (no modulo bias). */
static uint64_t xoshiro_below(uint64_t s[4], uint64_t n)
{
    uint64_t threshold = (0 - n) % n; /* 2^64 mod n */
    uint64_t r;
    do {
        r = xoshiro_next(s);
    } while (r < threshold);
    return r % n;
}

static void epoch_permutation(uint32_t *perm, size_t w, uint64_t seed, uint64_t epoch)
{
    uint64_t x = splitmix64_mix(splitmix64_mix(seed) + epoch), s[4];
    for (int k = 0; k < 4; k++) {
        s[k] = splitmix64_next(&x);
    }
    for (size_t i = 0; i < w; i++) {
        perm[i] = (uint32_t)i;
    }
    for (size_t i = w; i-- > 1;) {
        size_t j = (size_t)xoshiro_below(s, (uint64_t)i + 1);
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

/* ---- loader ---- */

struct loader {
    data_corpus_t c; /* tok (n): train [0, ntrain), val [ntrain, n) */
    size_t ntrain;
    int T, B, rank, dp;
    uint64_t seed;
    uint64_t hash;       /* FNV-1a 64 of the stream */
    size_t wtrain, wval; /* windows in each split */
    uint32_t *perm;      /* (wtrain) order of epoch `epoch` */
    uint64_t epoch, pos; /* pos: global windows read in this epoch */
    int accum, micro;    /* micro-batches per step; this one's index in its step */
};

static uint64_t fnv1a(const uint16_t *tok, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h = (h ^ (tok[i] & 0xff)) * 0x100000001b3ull;
        h = (h ^ (tok[i] >> 8)) * 0x100000001b3ull;
    }
    return h;
}

loader_t *loader_open(const char *path, int vocab, int T, int B, int rank, int dp, uint64_t seed,
                      double val_fraction, char err_p[DATA_ERR_LEN])
{
    if (T < 1 || B < 1 || dp < 1 || rank < 0 || rank >= dp) {
        seterr(err_p,
               "loader for %s: need T >= 1, B >= 1, dp >= 1 and 0 <= rank < dp "
               "(got T=%d B=%d rank=%d dp=%d)",
               path ? path : "(null)", T, B, rank, dp);
        return NULL;
    }
    if (!(val_fraction >= 0.0 && val_fraction < 1.0)) {
        seterr(err_p, "loader for %s: val_fraction %g is outside [0, 1)", path ? path : "(null)",
               val_fraction);
        return NULL;
    }
    loader_t *l = calloc(1, sizeof(*l));
    if (l == NULL) {
        seterr(err_p, "out of memory");
        return NULL;
    }
    if (data_corpus_load(path, vocab, &l->c, err_p) != 0) {
        goto fail;
    }
    size_t n = l->c.n, g = (size_t)dp * (size_t)B;
    size_t need = g * (size_t)T + 1; /* one global batch: G windows sharing their end tokens */
    if (n == 0) {
        seterr(err_p,
               "corpus %s is empty (%d file%s, 0 tokens); one global batch needs "
               "dp*B*T+1 = %zu tokens",
               path, l->c.nfiles, l->c.nfiles == 1 ? "" : "s", need);
        goto fail;
    }
    size_t nval = (size_t)((double)n * val_fraction);
    l->ntrain = n - nval;
    l->wtrain = l->ntrain > 0 ? (l->ntrain - 1) / (size_t)T : 0; /* defensive */
    l->wval = nval > 0 ? (nval - 1) / (size_t)T : 0;
    if (l->wtrain < g) {
        seterr(err_p,
               "corpus %s is too small: %zu training tokens (of %zu, after holding out "
               "%zu for validation); one global batch of dp*B*T+1 = %d*%d*%d+1 needs %zu",
               path, l->ntrain, n, nval, dp, B, T, need);
        goto fail;
    }
    if (nval > 0 && l->wval < 1) {
        seterr(err_p,
               "corpus %s: the validation split (val_fraction %g: %zu tokens) is smaller "
               "than one window of T+1 = %d tokens; raise val_fraction or use 0",
               path, val_fraction, nval, T + 1);
        goto fail;
    }
    if (l->wtrain > UINT32_MAX) {
        seterr(err_p, "corpus %s has %zu training windows, more than 2^32 - 1", path, l->wtrain);
        goto fail;
    }
    l->perm = malloc(l->wtrain * sizeof(uint32_t));
    if (l->perm == NULL) {
        seterr(err_p, "out of memory for %zu windows of %s", l->wtrain, path);
        goto fail;
    }
    l->T = T;
    l->B = B;
    l->rank = rank;
    l->dp = dp;
    l->seed = seed;
    l->accum = 1;
    l->hash = fnv1a(l->c.tok, n);
    epoch_permutation(l->perm, l->wtrain, seed, 0);
    return l;
fail:
    loader_close(l);
    return NULL;
}

void loader_close(loader_t *loader)
{
    if (loader == NULL) {
        return;
    }
    data_corpus_free(&loader->c);
    free(loader->perm);
    free(loader);
}

void loader_info(const loader_t *l, loader_info_t *info_p)
{
    size_t g = (size_t)l->dp * (size_t)l->B;
    loader_info_t i = {
        .tokens = l->c.n,
        .train_tokens = l->ntrain,
        .val_tokens = l->c.n - l->ntrain,
        .train_windows = l->wtrain,
        .val_windows = l->wval,
        .batches_per_epoch = l->wtrain / (g * (size_t)l->accum),
        .nfiles = l->c.nfiles,
        .shards = l->c.shards,
    };
    *info_p = i;
}

/* Window w of the split starting at base: x = tok[base + w*T, +T), y = the same shifted by one. */
static void copy_window(const loader_t *l, size_t base, size_t w, int *x, int *y)
{
    const uint16_t *t = l->c.tok + base + w * (size_t)l->T;
    for (int k = 0; k < l->T; k++) {
        x[k] = t[k];
        y[k] = t[k + 1];
    }
}

int loader_set_accum(loader_t *l, int accum, char err_p[DATA_ERR_LEN])
{
    size_t g = (size_t)l->dp * (size_t)l->B;
    if (accum < 1 || l->wtrain / g < (size_t)accum) {
        seterr(err_p,
               "%d micro-batches of %zu windows per step: the training split has %zu windows "
               "(need accum >= 1 and at least one step's worth)",
               accum, g, l->wtrain);
        return -1;
    }
    l->accum = accum;
    l->micro = 0;
    return 0;
}

void loader_next_train(loader_t *l, int *x, int *y)
{
    uint64_t g = (uint64_t)l->dp * (uint64_t)l->B;
    if (l->micro == 0 && l->pos + g * (uint64_t)l->accum > l->wtrain) {
        l->epoch++;
        l->pos = 0;
        epoch_permutation(l->perm, l->wtrain, l->seed, l->epoch);
    }
    size_t first = (size_t)l->pos + (size_t)l->rank * (size_t)l->B;
    for (int b = 0; b < l->B; b++) {
        size_t row = (size_t)b * (size_t)l->T;
        copy_window(l, 0, l->perm[first + (size_t)b], x + row, y + row);
    }
    l->pos += g;
    l->micro = (l->micro + 1) % l->accum;
}

size_t loader_val_windows(const loader_t *l)
{
    return l->wval;
}

int loader_val_window(const loader_t *l, size_t w, int *x, int *y)
{
    if (w >= l->wval) {
        return -1;
    }
    copy_window(l, l->ntrain, w, x, y);
    return 0;
}

void loader_get_state(const loader_t *l, loader_state_t *state_p)
{
    loader_state_t s = {
        .magic = LOADER_STATE_MAGIC,
        .version = LOADER_STATE_VERSION,
        .seed = l->seed,
        .epoch = l->epoch,
        .pos = l->pos,
        .T = (uint64_t)l->T,
        .train_windows = l->wtrain,
        .hash = l->hash,
    };
    *state_p = s;
}

int loader_set_state(loader_t *l, const loader_state_t *s, char err_p[DATA_ERR_LEN])
{
    if (s->magic != LOADER_STATE_MAGIC || s->version != LOADER_STATE_VERSION) {
        seterr(err_p,
               "loader state has magic 0x%08x version %u, expected 0x%08x version %u (not a "
               "loader state, or from another version)",
               s->magic, s->version, LOADER_STATE_MAGIC, LOADER_STATE_VERSION);
        return -1;
    }
    if (s->T != (uint64_t)l->T) {
        seterr(err_p, "loader state was saved with T=%llu, this loader has T=%d",
               (unsigned long long)s->T, l->T);
        return -1;
    }
    if (s->hash != l->hash || s->train_windows != l->wtrain) {
        seterr(err_p,
               "loader state was saved on another corpus or validation split (%llu "
               "training windows, hash %016llx; this loader: %zu, %016llx)",
               (unsigned long long)s->train_windows, (unsigned long long)s->hash, l->wtrain,
               (unsigned long long)l->hash);
        return -1;
    }
    if (s->pos > l->wtrain) {
        seterr(err_p, "loader state position %llu is past the end of the epoch (%zu windows)",
               (unsigned long long)s->pos, l->wtrain);
        return -1;
    }
    l->seed = s->seed;
    l->epoch = s->epoch;
    l->pos = s->pos;
    l->micro = 0;
    epoch_permutation(l->perm, l->wtrain, l->seed, l->epoch);
    return 0;
}
