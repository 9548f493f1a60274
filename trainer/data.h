/*
 * data.h — the trainer's data pipeline: a byte-level tokenizer, llm.c token shards, and a loader
 * that cuts a token stream into shuffled windows shared out among data-parallel ranks.
 *
 * What it is. A corpus is read whole into memory (the corpora are a few MB) as one token stream:
 *   - plain text, tokenized byte by byte (vocabulary 256: token = byte value);
 *   - llm.c GPT-2 token shards: a header of 256 little-endian int32 (magic 20240520, version 1,
 *     int 2 = token count n), then n uint16 tokens; the file size must be 1024 + 2n.
 * A corpus path is one file, a directory, or a glob pattern (it contains '*', '?' or '['):
 *   - a file ending in ".bin" or starting with the shard magic is a shard, any other file is text;
 *   - a directory contributes its regular files in strcmp order of their names, not recursing,
 *     skipping hidden files (".*"), index files ("*.dat", as in fortune's directories) and symbolic
 *     links (fortune's "x.u8 -> x" would count x twice); text is kept as is (fortune's "%" lines
 *     stay in the text);
 *   - a glob contributes every regular file it matches, in strcmp order;
 *   - the files are concatenated in that order, so a window may span two files; all files of one
 *     corpus are text or all are shards; every token must be < the loader's vocabulary size.
 *
 * Windows, split, shuffle, ranks (all deterministic; the same on every rank and every run).
 *   split    The stream of n tokens is cut at a token boundary: the last
 *            nv = floor(n * val_fraction) tokens are validation, the first n - nv are training.
 *            No token is in both.
 *   window   Within one split, window w is tokens [w*T, w*T + T + 1): inputs x = its first T
 *            tokens, targets y = its last T (x shifted by one). A split of m tokens has
 *            floor((m - 1) / T) windows; consecutive windows share one token (as llm.c's batches).
 *   batch    A global micro-batch is G = dp * B windows; rank r gets windows [r*B, (r+1)*B) of it,
 *            as rows of x and y (B, T). The union over ranks is what one rank with B' = dp * B
 *            reads. A step of K accumulated micro-batches (loader_set_accum) reads K * G
 *            consecutive windows of the order, so dp * B * K alone decides what a step reads:
 *            (dp 2, B 4, K 1) and (dp 1, B 4, K 2) read the same windows in every step.
 *   epoch    Epoch e reads the training windows in the order of a permutation drawn afresh from
 *            (seed, e) (see loader_open), one step after another; the last W mod (K * G) windows
 *            of each permutation are skipped (they are somewhere else in the next epoch's order).
 *   val      Validation windows are not shuffled and not tied to ranks or batches: window w of the
 *            validation split is loader_val_window(w), so a caller can evaluate the same set of
 *            windows at any dp and B (tempo-train splits a fixed count of them across the ranks).
 *   position The loader's place is kept in global windows (epoch, windows read in the epoch), not
 *            per rank: a state saved at dp = 4 restores at dp = 2 or 1 with the same global batch
 *            K * G and reads the same global batches.
 *
 * What it is not: a BPE tokenizer (GPT-2 shards are read as given; data_detokenize prints tokens
 * >= 256 as "<id>"), a streaming reader, or thread-safe (one loader per thread).
 *
 * Errors: functions that can fail return 0 / a pointer on success and -1 / NULL on failure, and
 * then write one sentence naming the path and what was expected or needed to err_p (a buffer of
 * DATA_ERR_LEN bytes; NULL is allowed). Output arguments (_p) are written only on success.
 */
#ifndef TEMPO_TRAINER_DATA_H
#define TEMPO_TRAINER_DATA_H

#include <stddef.h>
#include <stdint.h>

#define DATA_ERR_LEN 256
#define DATA_BYTE_VOCAB 256       /* vocabulary of the byte-level tokenizer */
#define DATA_SHARD_MAGIC 20240520 /* llm.c GPT-2 token shard */
#define DATA_SHARD_VERSION 1
#define DATA_SHARD_HEADER_BYTES 1024 /* 256 int32 */
#define DATA_MAX_VOCAB 65536         /* tokens are held as uint16 */

/* ---- tokenizer ---- */

/* Byte-level tokenization: tokens[i] = bytes[i] for i < n. tokens has room for n ints. Returns the
 * number of tokens written (n). */
size_t data_tokenize(const void *bytes, size_t n, int *tokens);

/* Printable text of n tokens for logs and samples, snprintf-style: writes at most cap - 1 chars
 * and a NUL to out (cap may be 0) and returns the length of the whole text. Bytes 0x20..0x7e and
 * '\n' are copied, '\\' becomes "\\\\", other bytes "\xHH", tokens outside [0, 256) "<id>". */
size_t data_detokenize(const int *tokens, size_t n, char *out, size_t cap);

/* ---- corpus ---- */

typedef struct {
    uint16_t *tok; /* (n) the token stream, owned */
    size_t n;      /* tokens */
    int nfiles;    /* files read */
    int shards;    /* 1: llm.c token shards, 0: byte-level text */
} data_corpus_t;

/* Read the corpus at path (file, directory or glob; see above) into memory. Every token must be
 * < vocab (1..DATA_MAX_VOCAB). An empty corpus is not an error here (n = 0); the loader refuses
 * it. */
int data_corpus_load(const char *path, int vocab, data_corpus_t *corpus_p,
                     char err_p[DATA_ERR_LEN]);
void data_corpus_free(data_corpus_t *corpus); /* NULL or zeroed: no-op */

/* ---- loader ---- */

typedef struct loader loader_t;

/* Where the loader is: what a checkpoint stores (plain old data, 56 bytes, fixed-width fields, no
 * padding; written in host byte order). The epoch's permutation is a pure function of (seed,
 * epoch), so (seed, epoch) is the whole random-number state. The last three fields identify the
 * data so that restoring against another corpus, T or split is an error. */
#define LOADER_STATE_MAGIC 0x4c445354u /* "TSDL" */
#define LOADER_STATE_VERSION 1u
typedef struct {
    uint32_t magic;         /* LOADER_STATE_MAGIC */
    uint32_t version;       /* LOADER_STATE_VERSION */
    uint64_t seed;          /* shuffle seed */
    uint64_t epoch;         /* epochs completed */
    uint64_t pos;           /* training windows (global, all ranks) read in this epoch */
    uint64_t T;             /* window length - 1 */
    uint64_t train_windows; /* windows per epoch before dropping the partial last batch */
    uint64_t hash;          /* FNV-1a 64 of the whole token stream (little-endian uint16) */
} loader_state_t;

typedef struct {
    size_t tokens;            /* the whole stream */
    size_t train_tokens;      /* first part */
    size_t val_tokens;        /* last floor(tokens * val_fraction) */
    size_t train_windows;     /* floor((train_tokens - 1) / T) */
    size_t val_windows;       /* floor((val_tokens - 1) / T), 0 without validation */
    size_t batches_per_epoch; /* steps per epoch: floor(train_windows / (accum * dp * B)) */
    int nfiles;
    int shards; /* 1: token shards, 0: text */
} loader_info_t;

/*
 * Open a loader over the corpus at path for data-parallel rank `rank` of `dp`, windows of T + 1
 * tokens, B windows per rank per step. Tokens must be < vocab (256 for text). seed picks the
 * shuffle; val_fraction in [0, 1) is the share of tokens held out at the end of the stream.
 *
 * Fails, naming the path and what is needed, when the corpus is missing or empty, when its training
 * split is shorter than one global batch (dp * B * T + 1 tokens), when val_fraction > 0 and the
 * validation split is shorter than one global batch, or on a malformed shard or an out-of-range
 * token (the validation split needs one window, T + 1 tokens). All ranks of a job must pass the
 * same path, vocab, T, B, dp, seed and val_fraction. The loader starts with one micro-batch per
 * step (loader_set_accum).
 *
 * Shuffle RNG (ours, so that it is the same everywhere): xoshiro256** whose four words are
 * splitmix64 outputs from the start value splitmix64_mix(splitmix64_mix(seed) + epoch); the
 * permutation is Fisher-Yates from the top (for i = W-1 down to 1 swap i with j uniform in [0, i],
 * j by rejection: draw r until r >= 2^64 mod (i+1), j = r mod (i+1)).
 */
loader_t *loader_open(const char *path, int vocab, int T, int B, int rank, int dp, uint64_t seed,
                      double val_fraction, char err_p[DATA_ERR_LEN]);
void loader_close(loader_t *loader); /* NULL: no-op */

void loader_info(const loader_t *loader, loader_info_t *info_p);

/* Steps of accum micro-batches (gradient accumulation; every rank passes the same): an epoch turns
 * only before a step's first micro-batch, when fewer than accum * dp * B windows are left. Call
 * before the first loader_next_train or right after loader_set_state. Fails (unchanged) when
 * accum < 1 or one step needs more windows than the training split has. */
int loader_set_accum(loader_t *loader, int accum, char err_p[DATA_ERR_LEN]);

/* This rank's next training batch: x, y (B, T) row-major. Starts the next epoch (new permutation)
 * at a step's first micro-batch when fewer than accum * dp * B windows are left. Cannot fail. */
void loader_next_train(loader_t *loader, int *x, int *y);

/* Validation: the number of windows in the validation split (the same on every rank), and window
 * w of it, x, y (T). loader_val_window returns -1 when w >= loader_val_windows(). */
size_t loader_val_windows(const loader_t *loader);
int loader_val_window(const loader_t *loader, size_t w, int *x, int *y);

/* Save the position (between two steps); restore it into a loader opened on the
 * same corpus, T and val_fraction, with any dp, rank and B (then set accum again). The state's seed replaces the one
 * given to loader_open. With the same global batch dp * B the restored loader reads the same global
 * batches as the one that saved; with another it continues at the same window of the epoch. Fails
 * (loader unchanged) on a wrong magic/version, another T, corpus or split, or a position past the
 * end of the epoch. */
void loader_get_state(const loader_t *loader, loader_state_t *state_p);
int loader_set_state(loader_t *loader, const loader_state_t *state, char err_p[DATA_ERR_LEN]);

#endif /* TEMPO_TRAINER_DATA_H */
