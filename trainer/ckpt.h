/*
 * ckpt.h — sharded, atomic, checksummed training checkpoints that reload at another data-parallel
 * size (resharding).
 *
 * Layout of one checkpoint, a directory DIR/step_NNNNNNNN:
 *   model.bin        written by rank 0: header, then every parameter (num_params fp32)
 *   optim_RRRRR.bin  written by every rank that owns optimizer state: header, the ranges it owns
 *                    ((offset, length) in parameter-buffer elements), then AdamW m and v for them
 * Every file ends with an FNV-1a 64 checksum of everything before it. The ranges are slices of the
 * flat parameter layout, so a reader with another dp (or another ZeRO stage) reads the pieces of
 * its own slices from whichever files hold them.
 *
 * Atomicity: files are written into DIR/step_NNNNNNNN.tmp, each fsync'ed; after a barrier rank 0
 * renames the directory to its final name, fsyncs DIR, then replaces DIR/latest (a one-line file,
 * via rename) and deletes checkpoints beyond the newest `keep`. A crash at any point leaves the
 * previous checkpoints intact and `latest` naming a complete one; the next save removes the
 * DIR/step_*.tmp such a crash leaves (never a complete checkpoint: those have no suffix).
 *
 * A failed save (disk full, quota, I/O error) is abandoned by every rank alike: each rank removes
 * the files it wrote, rank 0 the temporary directory, so the disk is left as before the save and
 * the next save can succeed once there is space; older checkpoints and `latest` are untouched.
 *
 * Loading reads and verifies every file it needs (sizes, headers, checksums, model shape, coverage
 * of the requested ranges) into temporary memory first and copies into the caller's buffers only
 * when all of it is good: a refused checkpoint changes nothing.
 *
 * Errors: 0 or -1 with a sentence in err (CKPT_ERR_LEN bytes) naming the file and the problem
 * (ckpt_save: see CKPT_FAILED_*).
 */
#ifndef TEMPO_TRAINER_CKPT_H
#define TEMPO_TRAINER_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "trainer/data.h"

#define CKPT_ERR_LEN 512

/* What a checkpoint records besides the tensors. */
typedef struct {
    int32_t n_layer, n_head, channels, max_seq_len, vocab_size;
    uint64_t num_params;
    int64_t step;          /* optimizer steps completed */
    int32_t dp, zero;      /* layout at save time (informational: loading reshards) */
    loader_state_t loader; /* data position and shuffle state (the only RNG state of a run) */
    /* The step's global batch is batch * dp * accum sequences; a resume keeps it (tempo-train
     * derives its per-rank batch and accumulation from it). 0 in a version-1 checkpoint, which
     * predates these fields (its meta is the prefix up to here). */
    int32_t batch, accum;  /* sequences per rank per micro-batch; micro-batches per step */
} ckpt_meta_t;

/* One owned range of the flat parameter layout. */
typedef struct {
    uint64_t off, n;
} ckpt_range_t;

#define CKPT_FAILED_HERE (-1)      /* this rank failed; err names the path and the cause */
#define CKPT_FAILED_ELSEWHERE (-2) /* another rank failed (and reports why); err says so */

/*
 * Write this rank's part of the checkpoint for step meta->step under dir (collective over the
 * ranks). params: the full parameter buffer (read by rank 0 only); ranges/nranges: the optimizer
 * ranges this rank owns, with m and v packed in range order (nranges = 0: this rank writes no
 * optimizer file). keep: checkpoints to keep. agree(agree_arg, &failed) is collective: it sets
 * failed (0 or 1) to 1 on every rank if it was 1 on any, and returns 0, or nonzero if the ranks
 * cannot communicate; ckpt_save calls it three times (after preparing, writing, publishing).
 * Returns 0 on every rank, or a CKPT_FAILED_* on every rank, with nothing of this save left on
 * disk (unless only the update of `latest` failed: then the new checkpoint is complete).
 */
int ckpt_save(const char *dir, const ckpt_meta_t *meta, const float *params,
              const ckpt_range_t *ranges, int nranges, const float *m, const float *v, int keep,
              int rank, int (*agree)(void *, int *), void *agree_arg, char *err);

/* The path of the newest complete checkpoint under dir (from DIR/latest) into path (4096 bytes),
 * or -1 if there is none. */
int ckpt_latest(const char *dir, char *path, char *err);

/* The meta of the checkpoint at path (a step_NNNNNNNN directory) from its model.bin header, without
 * reading the tensors or checking the checksum (ckpt_load does): what a run needs before it can
 * size itself to load the rest. */
int ckpt_peek(const char *path, ckpt_meta_t *meta_p, char *err);

/* How many checkpoints dir holds: complete ones (step_NNNNNNNN) into *complete_p, the newest one's
 * step into *newest_p (-1 if none); returns that count plus one for a `latest` file (0: dir holds
 * no checkpoint of a run, or does not exist; an unfinished step_*.tmp holds nothing usable and is
 * not counted: the next save removes it). */
int ckpt_count(const char *dir, int *complete_p, long *newest_p);

/* Remove every checkpoint (complete and unfinished), `latest` and then dir itself if it is empty:
 * a new run's --overwrite. Files of other names stay. -1 with err naming what could not be
 * removed. */
int ckpt_clear(const char *dir, char *err);

/* A run resumed from step: move the complete checkpoints of later steps in dir (the continuation
 * this run replaces) into dir/superseded-<date>-<time> (its path into moved_to, 4096 bytes), so that
 * `latest` and pruning see only this run's history, and point `latest` at step's checkpoint (or
 * remove it when step's checkpoint is not in dir). Returns how many were moved, or -1 with err. */
int ckpt_supersede(const char *dir, long step, char *moved_to, char *err);

/*
 * Load the checkpoint at path (a step_NNNNNNNN directory): check its model shape against want
 * (fields n_layer .. num_params), then fill meta_p, the full params (num_params) and m, v for the
 * given ranges packed in range order. Nothing is written to the outputs unless everything checks.
 */
int ckpt_load(const char *path, const ckpt_meta_t *want, ckpt_meta_t *meta_p, float *params,
              const ckpt_range_t *ranges, int nranges, float *m, float *v, char *err);

/* The checksum that ends every checkpoint file: FNV-1a 64 of the n bytes before it. */
uint64_t ckpt_checksum(const void *p, size_t n);

/* --dump: the loss and n as two float64, then the gradient g (n float32) into path, and a line on
 * stdout saying what was written. -1 with err naming the path and the cause. */
int ckpt_dump(const char *path, int step, double loss, const float *g, size_t n, char *err);

#endif /* TEMPO_TRAINER_CKPT_H */
