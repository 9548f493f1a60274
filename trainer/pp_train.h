/*
 * pp_train.h — tempo-train's pipeline-parallel run (--pp P > 1): the stages of this rank, their
 * schedule run by trainer/pipeline.h's executor with tempo point-to-point messages between the
 * stages, and the step around it (DP gradient synchronization through dist's gradient groups
 * with ZeRO 0, 1, 2 or 3, compression and scheduling policy; the tied-embedding sum, the global
 * norm, AdamW).
 *
 * Not here: option parsing, the mesh (train.c builds it with mesh.c's mesh_build), the data (train.c
 * opens the loader with K = M micro-batches per step, so a step reads the batch of one rank's
 * --accum M step: the same tokens as the single-rank run it must equal).
 */
#ifndef TEMPO_TRAINER_PP_TRAIN_H
#define TEMPO_TRAINER_PP_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include "trainer/ckpt.h"
#include "trainer/data.h"
#include "trainer/dist.h"
#include "trainer/model.h"
#include "trainer/pipeline.h"

typedef struct {
    pp_kind_t kind;
    int M, V;          /* micro-batches per step, chunks per rank (P is the dist's pp_size) */
    int B, T;          /* a micro-batch: B sequences of T tokens per DP rank */
    int steps, warmup; /* optimizer steps, linear warm-up steps */
    double lr, min_lr_frac, wd, clip, beta1, beta2;
    uint64_t seed;
    const char *dump; /* write step 0's loss and full gradient here and stop (tests), or NULL */
    int quiet;
    int recompute; /* GPT_RECOMPUTE_*: what each stage's activation slots keep */
    const gpt_tp_t *tp; /* each stage's tensor parallelism (the TP group's callbacks), or NULL */
    int zero;           /* ZeRO 0-3 over each stage's DP group (2 runs as 1; 3 shards the
                         * parameters between steps) */
    dist_grad_opts_t grad; /* the DP gradients' compressor, policy and buckets (mode: zero) */
    FILE *csv;            /* job rank 0: loss.csv rows (step,loss,,lr,tokens_per_s,step_ms,...) */
    const char *ckpt_dir; /* checkpoints: every ckpt_every steps and after the last (0: never) */
    int ckpt_every, ckpt_keep;
    const char *resume; /* a checkpoint to start from (any layout's), or NULL */
    int ckpt0;          /* save step 0's checkpoint before anything else (--resume auto) */
    int val_every;   /* validation loss every N steps, at the start and the end; 0: never */
    int val_windows; /* of the validation split (all if fewer), split over the DP ranks */
} pp_train_opts_t;

/*
 * Trains cfg's model over d's PP x DP mesh up to step o->steps (from o->resume's step, or 0), job
 * rank 0 printing each pipeline rank's memory, each step (loss, norm, tokens/s, stats.h's time and
 * bytes per dimension, the measured bubble next to the formula), the run's means and the
 * validation loss (the same windows as one rank's, passed through the stages one by one), and
 * every rank its RSS line (stats_print_rss) at the end.
 * Checkpoints hold the single-rank layout (the stages gathered on save, sliced on load), so they
 * load at any --pp and --dp. 0; 1 if the last checkpoint failed to save (a warning names why);
 * or -1 with the reason in err (512 bytes): the caller aborts the job.
 */
int pp_train_run(dist_t *d, const gpt_config_t *cfg, loader_t *ld, const pp_train_opts_t *o,
                 char *err);

#endif /* TEMPO_TRAINER_PP_TRAIN_H */
