/*
 * train.c — tempo-train: trains a GPT (model.h) on a text corpus or llm.c token shards (data.h),
 * data parallel over the job's ranks (dist.h: tempo by default), with ZeRO 0, 1, 2 or 3, gradient
 * accumulation, bucketed priority-scheduled and optionally compressed gradient synchronization;
 * --tp T adds Megatron tensor parallelism (the model's gpt_tp_t, filled from dist's TP group) on a
 * DP x TP mesh: everything below then runs over the DP dimension on this rank's shards, the
 * gradient norm adds the TP shards' parts, and dumps and checkpoints gather the shards into the
 * single-rank layout. --sp adds sequence parallelism inside the model (gpt_tp_t.sp, with the TP
 * group's all-gather and reduce-scatter); nothing else here changes but the sampler, which pads
 * its context to a multiple of --tp.
 * --pp P runs the whole training on a PP x DP x TP mesh in trainer/pp_train.c instead (run_pipeline:
 * each rank's pipeline stages under a gpipe, 1f1b or interleaved schedule, ZeRO 0-3 and the DP
 * gradients' compression and policy through the same dist gradient groups and zero.h shard as
 * here; its ZeRO 3 gathers a chunk once per step, not a layer group per forward and backward as
 * below; --sp makes the stages sequence-parallel too); this file checks the layout and builds the
 * mesh (mesh.c), which prints itself.
 *
 * One step = --accum micro-batches of --batch sequences per rank, then one AdamW update:
 *   ZeRO 0  gradients accumulate locally; on the last micro-batch backward hands each finished layer
 *           group to the bucketer (all-reduce, mean over ranks); every rank updates every parameter.
 *   ZeRO 1  the same, but each group is reduce-scattered: rank r keeps the mean of slice r of every
 *           group, updates only that slice (its AdamW moments are 1/dp of the model), and the slices
 *           are all-gathered back per group; the next forward waits for each group just before it
 *           runs.
 *   ZeRO 2  as 1, but every micro-batch is reduce-scattered and accumulated into a sharded gradient
 *           (the full-size gradient buffer is only backward's scratch).
 *   ZeRO 3  as 2, and the parameters are sharded too: the rank keeps its slices (and updates them),
 *           and each layer group is all-gathered into a reused buffer before its forward and again
 *           before its backward, the next group's all-gather posted before the current group's
 *           compute (z3_*). With --tp > 1 the DP ranks shard (and gather) their TP shard's
 *           parameters: ZeRO runs over the DP dimension on the model this rank's TP shard is.
 * The mean gradient over ranks equals the single-rank gradient of the global batch (dp * batch
 * sequences): the loader gives rank r rows [r*B, (r+1)*B) of every global batch.
 *
 * Output: a line per step (loss, tokens/s, step time split into compute and each dimension's
 * exposed communication, estimated bytes sent per dimension: stats.h), validation loss every
 * --val-every steps, a sample at the end, every rank's measured peak and final resident memory
 * (stats_print_rss), and in --out:
 * loss.csv and loss.png (gnuplot or matplotlib, when installed). --dump writes step 0's loss and
 * gradients for the layout tests (tests/trainer).
 */
#include "config.h"
#include "util/helpers.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "trainer/ckpt.h"
#include "trainer/data.h"
#include "trainer/dist.h"
#include "trainer/mesh.h"
#include "trainer/model.h"
#include "trainer/optim.h"
#include "trainer/pp_train.h"
#include "trainer/stats.h"
#include "trainer/zero.h"

typedef struct {
    const char *data, *backend, *compress, *sched, *out, *dump, *resume;
    const char *compress_src; /* "--compress", "TEMPO_COMPRESS" or NULL (the default, none) */
    const char *sched_src;    /* "--sched", "TEMPO_SCHED" or NULL (the default, tic) */
    const char *pp_schedule; /* --pp-schedule: gpipe, 1f1b or interleaved */
    int micro, virt;         /* --micro M, --virtual V (pipeline) */
    int dp, tp, pp, zero, layers, heads, channels, context, batch, accum, steps, warmup, val_every;
    int ckpt_every, ckpt_keep, overwrite;
    int ckpt0; /* --resume auto found no checkpoint: a new run that saves step 0 first */
    int sp; /* --sp: sequence parallelism over the TP group */
    int recompute; /* --recompute: GPT_RECOMPUTE_* */
    int batch_set, accum_set; /* --batch, --accum given: a resume keeps them (keep_global_batch) */
    int val_windows, sample, threads, quiet;
    double lr, min_lr_frac, wd, clip, beta1, beta2, val_frac;
    uint64_t seed;
    size_t bucket_bytes;
} opts_t;

static dist_t *D;

/* The error line is formatted whole and written with one write(): stderr is unbuffered, and a rank
 * that tempo-run ends (another rank failed first) between a prefix and its message used to leave
 * a bare "tempo-train: rank 0: " line. */
static void die(const char *fmt, ...)
{
    char line[4096];
    int n = snprintf(line, sizeof line, "tempo-train: rank %d: ", D ? D->world_rank : 0);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    strcat(line, "\n");
    if (write(STDERR_FILENO, line, strlen(line)) < 0) {
        /* nothing left to report it on */
    }
    if (D && D->world_size > 1) {
        D->abort(D);
    }
    exit(1);
}

#define DIST_CHECK(call, what)                                                                     \
    do {                                                                                           \
        if ((call) != 0) {                                                                         \
            die("%s: %s", what, D->error(D));                                                      \
        }                                                                                          \
    } while (0)

/* The plural ending after a count of n in messages: "1 rank", "4 ranks" ("%d rank%s"). */
static const char *plural(int n)
{
    return n == 1 ? "" : "s";
}

static void usage(FILE *f)
{
    fprintf(f,
        "usage: tempo-run -n N tempo-train [options]    (or tempo-train alone for one rank)\n"
        "       mpirun -n N tempo-train --backend mpi [options]\n"
        "Trains a GPT-2-style model on the CPU, data, tensor and pipeline parallel over the job's\n"
        "N ranks.\n"
        "\n"
        "Data\n"
        "  --data PATH         text file, directory of text files, or llm.c .bin shards (glob)\n"
        "                      [/usr/share/games/fortunes]; bytes are tokens (vocabulary 256)\n"
        "  --val-frac F        share of tokens held out at the end for validation [0.1]\n"
        "Model\n"
        "  --layers L --heads H --channels C --context T   [4 4 128 128]\n"
        "Optimization\n"
        "  --batch B           sequences per rank per micro-batch [8]\n"
        "  --accum K           micro-batches per step (gradient accumulation) [1]; the global\n"
        "                      batch is B x ranks x K sequences per step (the start line says it)\n"
        "  --steps N           optimizer steps [200]\n"
        "  --lr X              peak learning rate [1e-3]; linear warm-up over --warmup steps [20],\n"
        "                      then cosine decay to --min-lr-frac of the peak [0.1] at --steps\n"
        "  --wd X              AdamW weight decay of 2-D tensors [0.1]; --beta1 [0.9] --beta2 [0.95]\n"
        "  --clip X            global gradient-norm clipping [1.0]; 0 = off, and then each\n"
        "                      layer is updated as soon as its own gradients are in, so the next\n"
        "                      forward waits only for the layer it is about to run (where the\n"
        "                      priority order of --sched pays off)\n"
        "  --seed N            weights and data order [1337]\n"
        "Parallelism and communication\n"
        "  --dp N              data-parallel ranks: --dp x --tp x --pp must equal the job size\n"
        "                      [job size / (--tp x --pp)]\n"
        "  --tp T              tensor-parallel ranks (Megatron: attention by heads, MLP by\n"
        "                      columns/rows, embedding and cross-entropy by vocabulary) [1]; rank\n"
        "                      order is TP fastest (a TP group is T consecutive ranks); heads, 4C\n"
        "                      and the vocabulary must be multiples of T; checkpoints hold\n"
        "                      the unsharded layout (load at any --tp)\n"
        "  --sp                sequence parallelism over the TP group (Korthikanti et al. 2022):\n"
        "                      LayerNorm and residual activations cut along the B x T token rows\n"
        "                      (1/T of them per rank; the activations line shows it), all-gather\n"
        "                      before and reduce-scatter after the parallel blocks instead of\n"
        "                      all-reduces; needs --tp > 1 and --context a multiple of --tp\n"
        "  --recompute MODE    activation recomputation: none, selective (the attention's\n"
        "                      (B, heads, T, T) softmax recomputed in backward from the kept q,\n"
        "                      k, v; Korthikanti et al. 2022) or full (each block keeps only its\n"
        "                      input and re-runs its forward, TP/SP collectives included, in its\n"
        "                      backward) [none]; gradients bitwise those of none; the activations\n"
        "                      line shows the memory of the chosen mode\n"
        "  --pp P              pipeline-parallel stages [1]: --dp x --tp x --pp = the job size,\n"
        "                      rank order TP fastest, then DP, then PP (a stage's ranks are\n"
        "                      consecutive); the layers must divide by P x --virtual; each\n"
        "                      stage is tensor-parallel with --tp > 1 (DP x TP x PP); --zero 0,\n"
        "                      1, 2 (runs as 1: a stage's micro-batches accumulate in its own\n"
        "                      gradient buffer) or 3 (as 1, and each chunk's parameters sharded\n"
        "                      between steps, all-gathered whole once per step), --compress and\n"
        "                      --sched on the DP gradients only; --sp inside the stages (each\n"
        "                      TP rank sends its 1/T of the sequence to the next stage); no\n"
        "                      sample at the end yet; checkpoints hold the single-rank layout\n"
        "                      (load at any --pp, --tp, --dp and --zero)\n"
        "  --pp-schedule S     gpipe, 1f1b or interleaved [1f1b]\n"
        "  --micro M           micro-batches of --batch sequences per step and DP rank [P]\n"
        "                      (replaces --accum: the step's loss is their mean); 1f1b needs\n"
        "                      M >= P, interleaved a multiple of P\n"
        "  --virtual V         interleaved: model chunks per rank [1]\n"
        "  --zero S            0: all-reduce; 1: shard AdamW state (reduce-scatter + all-gather);\n"
        "                      2: also shard gradients (no full gradient buffer); 3: also shard\n"
        "                      parameters (each layer all-gathered before its forward and its\n"
        "                      backward, the next one prefetched; with --tp > 1, of this\n"
        "                      rank's TP shard; with --pp, each chunk once per step) [0]\n"
        "  --compress SPEC     gradient compressor, e.g. alq:bits=3, qsgd:bits=4, powersgd:rank=2,\n"
        "                      none [TEMPO_COMPRESS, else none] (see tempo-info -q); powersgd\n"
        "                      compresses all-reduce only: --zero 0\n"
        "  --sched P           priority policy: tic, tac (--zero 0 only), fifo [TEMPO_SCHED, else\n"
        "                      tic]\n"
        "  --bucket-bytes N    --zero 0: fuse gradients into buckets of up to N bytes (K, M, G),\n"
        "                      the first (the last layers') at most 1M [the library's\n"
        "                      TEMPO_BUCKET_BYTES]; refused with --zero 1-3 (no buckets there)\n"
        "  --backend B         communication backend [tempo]; this build has: %s. mpi (launched\n"
        "                      by mpirun) is plain per-group MPI non-blocking collectives in\n"
        "                      posted order, uncompressed: a baseline to compare tempo with;\n"
        "                      it runs every --dp/--tp/--pp layout (TP by blocking MPI\n"
        "                      collectives, PP by MPI_Isend/MPI_Irecv)\n"
        "Output\n"
        "  --val-every N       validation loss every N steps and at the end [25]\n"
        "  --val-windows N     validation windows per evaluation [64] (all if the split has\n"
        "                      fewer): the same windows at every --dp, --batch and --accum, split\n"
        "                      across the ranks, so validation losses of any layouts compare\n"
        "  --sample N          tokens to sample at the end, 0 = none [200]\n"
        "  --out DIR           write DIR/loss.csv and DIR/loss.png [tempo-train-out]; a new run\n"
        "                      refuses a DIR that holds another run's loss.csv or checkpoints\n"
        "                      (nothing is changed): --resume latest continues that run\n"
        "  --overwrite         start anew in such a DIR: first remove its loss.csv, loss.png and\n"
        "                      every checkpoint, so the folder never mixes two runs\n"
        "  --dump FILE         after the run's first gradient synchronization (step 0, or the\n"
        "                      resumed step), rank 0 writes the loss and the parameter count (two\n"
        "                      float64) and the full gradient (float32) to FILE, and stops (tests;\n"
        "                      perf/quant_bench -f FILE -k 16)\n"
        "Checkpoints (in --out/ckpt; sharded, atomic, checksummed; load at any --dp and --zero)\n"
        "  --ckpt-every N      save every N steps and after the last, 0 = never [0]\n"
        "  --ckpt-keep K       keep the newest K checkpoints [2]\n"
        "                      A save that fails (disk full, ...) is a warning naming the file\n"
        "                      and the cause: its partial files are removed, older checkpoints\n"
        "                      stay, training goes on and the next save retries; if the save\n"
        "                      after the last step fails, the run exits with status 1\n"
        "  --resume WHAT       'latest' (the newest in --out/ckpt), a step_NNNNNNNN directory, or\n"
        "                      'auto': 'latest' if --out/ckpt has one, else a new run that saves\n"
        "                      step 0 at once (needs --ckpt-every): the one command line for a\n"
        "                      job that tempo-run --restart relaunches, at any number of ranks\n"
        "                      when --dp is left out (a --batch given must divide each rank's\n"
        "                      share of the global batch). A resume continues to --steps with\n"
        "                      the same losses as an uninterrupted run, at any --dp: it keeps\n"
        "                      the checkpoint's global batch, deriving --batch and --accum\n"
        "                      where not given (--batch at most the saved one), or refuses,\n"
        "                      saying what to pass; loss.csv keeps its rows up to the resumed\n"
        "                      step, and this run's steps follow; checkpoints of later steps\n"
        "                      (the run this one replaces) move to\n"
        "                      --out/ckpt/superseded-<date>-<time>\n"
        "  --threads N         OpenMP threads per rank [OMP_NUM_THREADS or cores / ranks]\n"
        "  --quiet             no per-step lines\n"
        "  -h, --help          this text\n"
        "      --version       the package version\n"
        "Each step line: loss (mean over the global batch), tokens/s (global), then, each the\n"
        "mean over the job's ranks of the rank's own: the step time (the step alone: not its\n"
        "validation or checkpoint) = compute + comm, where comm is the exposed communication of\n"
        "each dimension, dp (gradients, ZeRO's all-gathers, the loss and norm sums), tp (TP and\n"
        "SP collectives) and pp (stage messages, the tied embedding and the line's sums): the\n"
        "time blocked in that dimension's blocking calls and waits (traffic that overlaps\n"
        "compute is not counted; a wait includes the peers' lateness, a pipeline's bubble), and\n"
        "compute is the rest (never negative); then the bytes the rank sent per dimension\n"
        "(estimated from a ring's share of each collective and the DP compression ratio).\n"
        "loss.csv has the same columns. The run ends with their means over the steps after the\n"
        "first and the tokens/s of that mean step, at every --dp, --tp and --pp.\n"
        "With --pp, each step line ends with the bubble: the line's time waiting on neighbours\n"
        "(the flush included) over its busy time, next to the formula (P-1)/M (gpipe, 1f1b) or\n"
        "(P-1)/(V M) (interleaved); the run ends with the mean, the formula for stages of the\n"
        "measured costs, and each pipeline rank's compute per step; the memory lines are per pp\n"
        "rank. Every rank's last line is its measured peak resident memory (VmHWM) and its\n"
        "resident memory at exit, its training state still allocated.\n"
        "Exit status: 0 done; 2 refused before any work, nothing written (a bad flag or value,\n"
        "a layout the job cannot run, an --out holding another run, a --resume or --data that\n"
        "cannot work: the message says what to change); 1 failed once started (a rank or the\n"
        "network failed, a write failed, the final checkpoint failed).\n"
        "TEMPO_SCHED and TEMPO_COMPRESS set the defaults of --sched and --compress (the start\n"
        "line says so); a flag given with its TEMPO_* variable wins, and the run says so.\n"
        "TEMPO_TRACE=FILE.%%r.json records the timeline (tempo-trace merge joins the ranks); with\n"
        "--pp each micro-batch's forward and backward is a span (\"F mb3 chunk0\").\n",
        dist_backends());
}

/* A refusal of the command line (exit status 2: nothing was started or changed), before the job
 * is up: every rank parses the same arguments, so every rank refuses alike. */
static void bad_arg(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "tempo-train: %s (see --help)\n", line);
    exit(2);
}

static double parse_num(const char *name, const char *s, double lo, double hi)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi)) {
        bad_arg("%s: '%s' is not a number from %g to %g", name, s, lo, hi);
    }
    return v;
}

/* An integer option in [lo, hi] (decimal; "2.5", "1e3" and "4x" are refused, not truncated). */
static long long parse_int(const char *name, const char *s, long long lo, long long hi)
{
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) {
        bad_arg("%s: '%s' is not an integer from %lld to %lld", name, s, lo, hi);
    }
    return v;
}

/* A byte count with an optional K, M or G suffix (util/helpers.h's parser), at least 1 KiB. */
static size_t parse_bytes(const char *name, const char *s)
{
    size_t v;
    if (util_parse_size(s, &v) || v < 1024) {
        bad_arg("%s: '%s' is not a size of at least 1K (suffix K, M or G)", name, s);
    }
    return v;
}

static void parse(int argc, char **argv, opts_t *o)
{
    *o = (opts_t){.data = "/usr/share/games/fortunes", .backend = "tempo", .compress = "none",
                  .sched = "tic", .out = "tempo-train-out", .dp = 0, .zero = 0, .layers = 4,
                  .heads = 4, .channels = 128, .context = 128, .batch = 8, .accum = 1,
                  .steps = 200, .warmup = 20, .val_every = 25, .val_windows = 64, .sample = 200,
                  .lr = 1e-3, .min_lr_frac = 0.1, .wd = 0.1, .clip = 1.0, .beta1 = 0.9,
                  .beta2 = 0.95, .val_frac = 0.1, .seed = 1337, .ckpt_keep = 2,
                  .tp = 1, .pp = 1, .pp_schedule = "1f1b", .micro = 0, .virt = 1};
    enum { O_DATA = 256, O_VALF, O_LAYERS, O_HEADS, O_CH, O_CTX, O_BATCH, O_ACCUM, O_STEPS, O_LR,
           O_WARM, O_MINLR, O_WD, O_B1, O_B2, O_CLIP, O_SEED, O_DP, O_ZERO, O_COMP, O_SCHED,
           O_BACK, O_VEVERY, O_VB, O_SAMPLE, O_OUT, O_DUMP, O_THR, O_QUIET, O_CKE, O_CKK,
           O_RESUME, O_BUCKET, O_VW, O_OVER, O_TP, O_PP, O_SP, O_PPS, O_MICRO, O_VIRT, O_RECOMP };
    static const struct option lo[] = {
        {"data", 1, 0, O_DATA},       {"val-frac", 1, 0, O_VALF},   {"layers", 1, 0, O_LAYERS},
        {"heads", 1, 0, O_HEADS},     {"channels", 1, 0, O_CH},     {"context", 1, 0, O_CTX},
        {"batch", 1, 0, O_BATCH},     {"accum", 1, 0, O_ACCUM},     {"steps", 1, 0, O_STEPS},
        {"lr", 1, 0, O_LR},           {"warmup", 1, 0, O_WARM},     {"min-lr-frac", 1, 0, O_MINLR},
        {"wd", 1, 0, O_WD},           {"beta1", 1, 0, O_B1},        {"beta2", 1, 0, O_B2},
        {"clip", 1, 0, O_CLIP},       {"seed", 1, 0, O_SEED},       {"dp", 1, 0, O_DP},
        {"zero", 1, 0, O_ZERO},       {"compress", 1, 0, O_COMP},   {"sched", 1, 0, O_SCHED},
        {"backend", 1, 0, O_BACK},    {"val-every", 1, 0, O_VEVERY}, {"val-batches", 1, 0, O_VB},
        {"sample", 1, 0, O_SAMPLE},   {"out", 1, 0, O_OUT},         {"dump", 1, 0, O_DUMP},
        {"threads", 1, 0, O_THR},     {"quiet", 0, 0, O_QUIET},     {"help", 0, 0, 'h'},
        {"ckpt-every", 1, 0, O_CKE},  {"ckpt-keep", 1, 0, O_CKK},   {"resume", 1, 0, O_RESUME},
        {"bucket-bytes", 1, 0, O_BUCKET}, {"val-windows", 1, 0, O_VW}, {"overwrite", 0, 0, O_OVER},
        {"version", 0, 0, 'V'},       {"tp", 1, 0, O_TP},           {"pp", 1, 0, O_PP},
        {"sp", 0, 0, O_SP},           {"recompute", 1, 0, O_RECOMP},
        {"pp-schedule", 1, 0, O_PPS}, {"micro", 1, 0, O_MICRO},     {"virtual", 1, 0, O_VIRT},
        {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case O_DATA: o->data = optarg; break;
        case O_VALF: o->val_frac = parse_num("--val-frac", optarg, 0, 0.9); break;
        case O_LAYERS: o->layers = (int)parse_int("--layers", optarg, 1, 256); break;
        case O_HEADS: o->heads = (int)parse_int("--heads", optarg, 1, 256); break;
        case O_CH: o->channels = (int)parse_int("--channels", optarg, 1, 16384); break;
        case O_CTX: o->context = (int)parse_int("--context", optarg, 1, 65536); break;
        case O_BATCH:
            o->batch = (int)parse_int("--batch", optarg, 1, 1 << 20);
            o->batch_set = 1;
            break;
        case O_ACCUM:
            o->accum = (int)parse_int("--accum", optarg, 1, 1 << 20);
            o->accum_set = 1;
            break;
        case O_STEPS: o->steps = (int)parse_int("--steps", optarg, 0, 1000000000); break;
        case O_LR: o->lr = parse_num("--lr", optarg, 0, 10); break;
        case O_WARM: o->warmup = (int)parse_int("--warmup", optarg, 0, 1000000000); break;
        case O_MINLR: o->min_lr_frac = parse_num("--min-lr-frac", optarg, 0, 1); break;
        case O_WD: o->wd = parse_num("--wd", optarg, 0, 10); break;
        case O_B1: o->beta1 = parse_num("--beta1", optarg, 0, 0.999999); break;
        case O_B2: o->beta2 = parse_num("--beta2", optarg, 0, 0.999999); break;
        case O_CLIP: o->clip = parse_num("--clip", optarg, 0, 1e9); break;
        case O_SEED:
            o->seed = (uint64_t)parse_int("--seed", optarg, 0, 1000000000000000000LL);
            break;
        case O_DP: o->dp = (int)parse_int("--dp", optarg, 1, 1 << 20); break;
        case O_TP: o->tp = (int)parse_int("--tp", optarg, 1, 1 << 20); break;
        case O_PP: o->pp = (int)parse_int("--pp", optarg, 1, 1 << 20); break;
        case O_SP: o->sp = 1; break;
        case O_RECOMP:
            if ((o->recompute = gpt_recompute_parse(optarg)) < 0) {
                bad_arg("--recompute %s: use none, selective or full", optarg);
            }
            break;
        case O_ZERO: o->zero = (int)parse_int("--zero", optarg, 0, 3); break;
        case O_PPS: o->pp_schedule = optarg; break;
        case O_MICRO: o->micro = (int)parse_int("--micro", optarg, 1, 1 << 20); break;
        case O_VIRT: o->virt = (int)parse_int("--virtual", optarg, 1, 1 << 20); break;
        case O_COMP: o->compress = optarg, o->compress_src = "--compress"; break;
        case O_SCHED: o->sched = optarg, o->sched_src = "--sched"; break;
        case O_BACK: o->backend = optarg; break;
        case O_VEVERY: o->val_every = (int)parse_int("--val-every", optarg, 0, 1000000000); break;
        case O_VW: o->val_windows = (int)parse_int("--val-windows", optarg, 1, 1000000000); break;
        case O_VB:
            bad_arg("--val-batches is gone: validation now reads a fixed number of windows, the same "
                "at every --dp and --batch; pass --val-windows N (N = the old value x --batch x "
                "ranks gives the old count at the old layout)");
            break;
        case O_SAMPLE: o->sample = (int)parse_int("--sample", optarg, 0, 1000000); break;
        case O_OUT: o->out = optarg; break;
        case O_DUMP: o->dump = optarg; break;
        case O_THR: o->threads = (int)parse_int("--threads", optarg, 1, 1024); break;
        case O_QUIET: o->quiet = 1; break;
        case O_CKE: o->ckpt_every = (int)parse_int("--ckpt-every", optarg, 0, 1000000000); break;
        case O_CKK: o->ckpt_keep = (int)parse_int("--ckpt-keep", optarg, 1, 1000000); break;
        case O_RESUME: o->resume = optarg; break;
        case O_BUCKET: o->bucket_bytes = parse_bytes("--bucket-bytes", optarg); break;
        case O_OVER: o->overwrite = 1; break;
        case 'h': usage(stdout); exit(0);
        case 'V': util_print_version("tempo-train"); exit(0);
        default: usage(stderr); exit(2);
        }
    }
    if (optind < argc) {
        fprintf(stderr, "tempo-train: unexpected argument '%s' (see --help)\n", argv[optind]);
        exit(2);
    }
    if (o->overwrite && o->resume) {
        fprintf(stderr, "tempo-train: --overwrite starts a new run in place of the one in %s, "
                        "--resume continues it: pass one of them\n", o->out);
        exit(2);
    }
    if (o->resume && !strcmp(o->resume, "auto") && o->ckpt_every == 0) {
        bad_arg("--resume auto continues from the run's checkpoints: pass --ckpt-every N too");
    }
    /* TEMPO_COMPRESS is tempo's default compressor (tempo.h): without --compress it applies here
     * too, as the README shows, and the start line says where the spec came from. */
    const char *env = getenv("TEMPO_COMPRESS");
    if (!o->compress_src && env && *env) {
        o->compress = env;
        o->compress_src = "TEMPO_COMPRESS";
    }
    /* TEMPO_SCHED likewise: the library's default policy is the trainer's too */
    env = getenv("TEMPO_SCHED");
    if (!o->sched_src && env && *env) {
        o->sched = env;
        o->sched_src = "TEMPO_SCHED";
    }
}

/* The DP gradients' options: all-reduce at ZeRO 0, reduce-scatter above (pipelines too). */
static dist_grad_opts_t grad_opts(const opts_t *o)
{
    return (dist_grad_opts_t){.mode = o->zero ? DIST_REDUCE_SCATTER : DIST_ALLREDUCE,
                              .compress = o->compress, .compress_src = o->compress_src,
                              .sched = o->sched, .sched_src = o->sched_src,
                              .bucket_bytes = o->bucket_bytes};
}

/* What the start line adds when the DP compressor or policy came from the environment. */
static const char *from_env(const opts_t *o)
{
    const int c = o->compress_src && o->compress_src[0] == 'T',
              p = o->sched_src && o->sched_src[0] == 'T';
    return c && p ? " (compressor from TEMPO_COMPRESS, policy from TEMPO_SCHED)"
           : c    ? " (compressor from TEMPO_COMPRESS)"
           : p    ? " (policy from TEMPO_SCHED)"
                  : "";
}

/* The flags that set what a TEMPO_* variable also sets: the flag wins, and the run says so (rank
 * 0, at the start), so that no variable the library honours is silently ignored. */
static void say_overrides(const opts_t *o)
{
    const struct {
        const char *flag, *var, *value;
        int given;
    } f[] = {
        {"--compress", "TEMPO_COMPRESS", o->compress, o->compress_src && o->compress_src[0] == '-'},
        {"--sched", "TEMPO_SCHED", o->sched, o->sched_src && o->sched_src[0] == '-'},
        {"--bucket-bytes", "TEMPO_BUCKET_BYTES", NULL, o->bucket_bytes != 0},
    };
    for (size_t i = 0; i < sizeof f / sizeof f[0] && D->world_rank == 0; i++) {
        const char *env = getenv(f[i].var);
        if (f[i].given && env && *env) {
            printf("note: %s%s%s overrides %s=%s\n", f[i].flag, f[i].value ? " " : "",
                   f[i].value ? f[i].value : "", f[i].var, env);
        }
    }
    /* the bucketer's variables where no bucketer runs (ZeRO 1-3 post a request per group) */
    static const char *const bucketer_vars[] = {"TEMPO_BUCKET_BYTES", "TEMPO_BUCKET_FIRST_BYTES",
                                                "TEMPO_TAC_WARMUP"};
    for (size_t i = 0; i < sizeof bucketer_vars / sizeof *bucketer_vars; i++) {
        if (!o->zero || D->world_rank != 0) {
            break;
        }
        const char *env = getenv(bucketer_vars[i]);
        if (env && *env) {
            printf("note: %s=%s has no effect at --zero %d (it sets --zero 0's bucketer; ZeRO "
                   "1-3 reduce-scatter each layer group as its own request)\n",
                   bucketer_vars[i], env, o->zero);
        }
    }
}

/* Sums of x[0, n) over the whole job: the DP dimension, then the TP group, then the pipeline. */
static void world_sum(double *x, int n, const char *what)
{
    DIST_CHECK(D->sum_f64(D, x, n), what);
    if (D->tp_size > 1) {
        DIST_CHECK(D->tp_sum_f64(D, x, n), what);
    }
    if (D->pp_size > 1) {
        DIST_CHECK(D->pp_allreduce(D, DIST_PP_LINE, x, (size_t)n, 1), what);
    }
}

/* Leave the job without aborting it: every rank calls this at the same point, rank 0 having said
 * why (a refusal before any work: rc 2). A sum over the whole job first (not a barrier of the DP
 * group alone, once the mesh is built), so that no rank ends, and tempo-run ends the job, before
 * rank 0 has written its reason (tp.sh saw it missing once). */
static void quit(int rc)
{
    double z = 0;
    world_sum(&z, 1, "leaving");
    dist_close(D);
    exit(rc);
}

/* A refusal that each rank decides for itself (a file it reads, a state it checks): every rank
 * learns whether any refused; then rank 0 says why if it refused, else each rank that did (msg,
 * this rank's reason), and every rank leaves with status 2. */
static void refuse_any(int refused, const char *msg)
{
    double x[2] = {refused ? 1 : 0, refused && D->world_rank == 0 ? 1 : 0};
    world_sum(x, 2, "start-up");
    if (x[0] == 0) {
        return;
    }
    if (refused && D->world_rank == 0) {
        fprintf(stderr, "tempo-train: %s\n", msg);
    } else if (refused && x[1] == 0) {
        fprintf(stderr, "tempo-train: rank %d: %s\n", D->world_rank, msg);
    }
    quit(2);
}

/* Rank 0's values of x[0, n) on every rank. */
static void from_rank0(double *x, int n)
{
    for (int i = 0; i < n && D->world_rank != 0; i++) {
        x[i] = 0;
    }
    world_sum(x, n, "start-up");
}

/* Whether the loss.csv at path holds a row after its header: one with the header alone holds no
 * results (a run's first moments: --resume auto under --pp writes it before its step-0
 * checkpoint), and a new run may write over it. */
static int csv_has_rows(const char *path)
{
    struct stat st;
    FILE *f = stat(path, &st) == 0 ? fopen(path, "r") : NULL;
    if (!f) {
        return stat(path, &st) == 0; /* there but unreadable: taken for results */
    }
    int c;
    while ((c = getc(f)) != EOF && c != '\n') {
    }
    int rows = c == '\n' && getc(f) != EOF;
    fclose(f);
    return rows;
}

/* A new run refuses an --out that holds another run's results (loss.csv, checkpoints, latest):
 * nothing is lost. --overwrite removes them first (loss.csv, loss.png and every checkpoint), so a
 * folder never mixes two runs, and pruning never sees another run's checkpoints. Rank 0 looks
 * and acts before any work; every rank learns the verdict. */
static void check_out(const opts_t *o)
{
    double bad = 0;
    if (D->world_rank == 0) {
        char csv[4096], png[4096], ck[4096], err[CKPT_ERR_LEN], lat[64] = "";
        snprintf(csv, sizeof csv, "%s/loss.csv", o->out);
        snprintf(png, sizeof png, "%s/loss.png", o->out);
        snprintf(ck, sizeof ck, "%s/ckpt", o->out);
        int has_csv = csv_has_rows(csv), complete;
        long newest;
        int nck = ckpt_count(ck, &complete, &newest);
        if (newest >= 0) {
            snprintf(lat, sizeof lat, ", the newest at step %ld", newest);
        }
        if ((has_csv || nck) && o->overwrite) {
            const char *stuck = has_csv && unlink(csv) != 0                  ? csv
                                : unlink(png) != 0 && errno != ENOENT ? png
                                                                      : NULL;
            if (stuck) {
                snprintf(err, sizeof err, "cannot remove %s: %s", stuck, strerror(errno));
                bad = 1;
            }
            if (bad || ckpt_clear(ck, err)) {
                fprintf(stderr, "tempo-train: --overwrite: %s\n", err);
                bad = 1;
            } else {
                printf("--overwrite: removed the earlier run in %s (%s%d checkpoint%s)\n", o->out,
                       has_csv ? "loss.csv, " : "", complete, plural(complete));
            }
        } else if (has_csv || nck) {
            fprintf(stderr,
                    "tempo-train: %s holds another run's results (%s%d checkpoint%s%s); nothing "
                    "was started or changed. To continue that run: --resume latest (or --resume "
                    "%s/step_NNNNNNNN); to keep it and start anew: another --out; to replace "
                    "it: --overwrite (removes its loss.csv, loss.png and checkpoints)\n",
                    o->out, has_csv ? "loss.csv, " : "", complete, plural(complete), lat, ck);
            bad = 1;
        }
    }
    from_rank0(&bad, 1);
    if (bad) {
        quit(2);
    }
}

/* --resume auto: 'latest' when --out/ckpt has a checkpoint (an earlier attempt of this job under
 * tempo-run --restart, or a run to continue), else a new run (check_out refuses an --out holding
 * another run), which saves its step-0 checkpoint before it writes anything else there (ckpt0):
 * so a restart always finds this run's checkpoint and never takes its loss.csv for another run's.
 * TEMPO_RESTART (tempo-run's attempt number) only makes the line say which restart this is. Rank
 * 0 looks; every rank learns. */
static void resolve_auto(opts_t *o)
{
    if (!o->resume || strcmp(o->resume, "auto")) {
        return;
    }
    char dir[4096], path[4096], err[CKPT_ERR_LEN], at[96] = "";
    snprintf(dir, sizeof dir, "%s/ckpt", o->out);
    double found = D->world_rank == 0 && ckpt_latest(dir, path, err) == 0;
    from_rank0(&found, 1);
    const char *k = getenv("TEMPO_RESTART");
    if (D->world_rank == 0 && k && atoi(k) > 0) {
        snprintf(at, sizeof at, "restart %d (TEMPO_RESTART) on %d rank%s: ", atoi(k),
                 D->world_size, plural(D->world_size));
    }
    if (D->world_rank == 0 && found) {
        printf("--resume auto: %sresuming %s\n", at, path);
    } else if (D->world_rank == 0) {
        printf("--resume auto: %sno checkpoint in %s: a new run, checkpointed at step 0\n", at,
               dir);
    }
    o->resume = found ? "latest" : NULL;
    o->ckpt0 = !found && !o->dump;
}

/* The checkpoint --resume names ('latest': the newest in --out/ckpt) into path (4096 bytes). */
static void resume_path(const opts_t *o, char *path)
{
    char err[CKPT_ERR_LEN], dir[4096];
    snprintf(dir, sizeof dir, "%s/ckpt", o->out);
    if (!strcmp(o->resume, "latest")) {
        char msg[CKPT_ERR_LEN + 64];
        int bad = ckpt_latest(dir, path, err) != 0;
        snprintf(msg, sizeof msg,
                 "--resume latest: %s (start a new run without --resume, or pass the --out of "
                 "the run to continue)", bad ? err : "");
        refuse_any(bad, msg);
    } else {
        snprintf(path, 4096, "%s", o->resume);
    }
}

/* --resume: the checkpoint's data position must fit this run's data (the same corpus, split and
 * context), or every rank refuses, saying how to go on, before anything is loaded. */
static void resume_data(const opts_t *o, loader_t *ld)
{
    char path[4096], err[DATA_ERR_LEN], msg[DATA_ERR_LEN + 8192] = "";
    ckpt_meta_t mt;
    resume_path(o, path);
    int bad = ckpt_peek(path, &mt, err) != 0;
    if (bad) {
        snprintf(msg, sizeof msg, "--resume: %s; nothing was loaded", err);
    } else if ((bad = loader_set_state(ld, &mt.loader, err) != 0)) {
        snprintf(msg, sizeof msg,
                 "--resume %s: its data position does not fit this run's data: %s. Nothing was "
                 "changed. To continue that run, pass the --data, --val-frac and --context it "
                 "was trained with (this run: --data %s --val-frac %g --context %d); to train on "
                 "other data, start a new run (another --out, or --overwrite)",
                 path, err, o->data, o->val_frac, o->context);
    }
    refuse_any(bad, msg);
}

/* The largest b <= cap that divides n (n, cap >= 1). */
static int largest_divisor(int n, int cap)
{
    int b = cap < n ? cap : n;
    while (n % b) {
        b--;
    }
    return b;
}

/* A resume keeps the checkpoint's global batch G = batch x dp x accum sequences per step at any
 * layout (--batch is per rank, so the same flags at another --dp would change it): --batch and
 * --accum, where given, are kept and the other derived; where neither is, the per-rank batch is
 * the largest up to the saved one that divides G / dp (no more memory than before) and accum
 * makes up the rest. When G cannot be kept, every rank refuses, rank 0 saying exactly what to
 * pass. Rank 0 reads the checkpoint's meta; every rank decides alike. */
static void keep_global_batch(opts_t *o, const char *path)
{
    double v[4] = {0}; /* ok, saved batch, dp, accum */
    ckpt_meta_t mt;
    char err[CKPT_ERR_LEN];
    if (D->world_rank == 0) {
        if (ckpt_peek(path, &mt, err)) {
            fprintf(stderr, "tempo-train: --resume: %s; nothing was loaded\n", err);
        } else {
            v[0] = 1, v[1] = mt.batch, v[2] = mt.dp, v[3] = mt.accum;
        }
    }
    from_rank0(v, 4);
    if (!v[0]) {
        quit(2);
    }
    int sb = (int)v[1], sdp = (int)v[2], sk = (int)v[3], dp = D->size;
    if (sb <= 0) { /* a version-1 checkpoint: its global batch is unknown */
        if (D->world_rank == 0) {
            printf("warning: %s does not record its global batch (written by an older "
                   "tempo-train): training on with --batch %d x %d rank%s x --accum %d = %d "
                   "sequences per step, as given\n",
                   path, o->batch, dp, plural(dp), o->accum, o->batch * dp * o->accum);
        }
        return;
    }
    int G = sb * sdp * sk, per = G / dp;
    int b = o->batch_set ? o->batch : largest_divisor(per > 0 ? per : 1, sb);
    int k = o->accum_set ? o->accum : (o->batch_set ? per / o->batch : per / b);
    if (o->accum_set && !o->batch_set) {
        b = per / o->accum;
    }
    if (G % dp == 0 && b >= 1 && k >= 1 && b * k == per) {
        if (D->world_rank == 0 && (b != o->batch || k != o->accum)) {
            printf("resume: keeping the checkpoint's global batch of %d sequences per step "
                   "(--batch %d x %d rank%s x --accum %d): --batch %d --accum %d at %d rank%s\n",
                   G, sb, sdp, plural(sdp), sk, b, k, dp, plural(dp));
        }
        o->batch = b;
        o->accum = k;
        return;
    }
    if (D->world_rank == 0) {
        fprintf(stderr,
                "tempo-train: %s was trained with a global batch of %d sequences per step "
                "(--batch %d x %d rank%s x --accum %d); ",
                path, G, sb, sdp, plural(sdp), sk);
        if (G % dp) {
            fprintf(stderr, "it cannot be split evenly over %d rank%s: resume on a number of "
                            "ranks that divides %d (%d, for one)\n", dp, plural(dp), G, sdp);
        } else {
            b = largest_divisor(per, sb);
            fprintf(stderr, "--batch %d x %d rank%s x --accum %d would change it: pass --batch %d "
                            "--accum %d (or leave both out)\n",
                    o->batch, dp, plural(dp), o->accum, b, per / b);
        }
    }
    quit(2);
}

/* mkdir -p: path and its missing parents; 0, or -1 with errno. */
static int mkdir_p(const char *path)
{
    char p[4096];
    snprintf(p, sizeof p, "%s", path);
    for (char *c = p + 1; *c; c++) {
        if (*c == '/') {
            *c = '\0';
            if (mkdir(p, 0777) != 0 && errno != EEXIST) {
                return -1;
            }
            *c = '/';
        }
    }
    return mkdir(p, 0777) != 0 && errno != EEXIST ? -1 : 0;
}

/* Open loss.csv for appending this run's steps. A new run writes the header. A resume from step
 * `start` keeps the header and the rows of steps <= start (a resume from an earlier checkpoint
 * would otherwise write its steps twice), replacing the file atomically (a temporary file,
 * synced, renamed over it) when rows must go. */
static FILE *open_csv(const opts_t *o, int start)
{
    char p[4096], tmp[4096];
    snprintf(p, sizeof p, "%s/loss.csv", o->out);
    snprintf(tmp, sizeof tmp, "%s/loss.csv.tmp", o->out);
    FILE *in = o->resume ? fopen(p, "r") : NULL, *out = NULL;
    int dropped = 0, err = 0;
    if (in) {
        char *line = NULL;
        size_t cap = 0;
        out = fopen(tmp, "w");
        err = !out;
        for (int first = 1; !err && getline(&line, &cap, in) > 0; first = 0) {
            if (!first && (atoi(line) > start || start == 0)) {
                dropped += atoi(line) > start; /* step 0's validation row is written again */
            } else if (fputs(line, out) < 0) {
                err = 1;
            }
        }
        free(line);
        fclose(in);
        if (out && (fflush(out) != 0 || fsync(fileno(out)) != 0)) {
            err = 1;
        }
        if (out && fclose(out) != 0) {
            err = 1;
        }
        if (err || rename(tmp, p) != 0) {
            die("cannot rewrite %s (through %s): %s", p, tmp, strerror(errno));
        }
        if (dropped) {
            printf("loss.csv: removed %d row%s after step %d (the steps this run is about to "
                   "redo)\n", dropped, plural(dropped), start);
        }
        char dir[4096], moved[4096], cerr[CKPT_ERR_LEN];
        snprintf(dir, sizeof dir, "%s/ckpt", o->out);
        int nmoved = ckpt_supersede(dir, start, moved, cerr);
        if (nmoved < 0) {
            die("%s", cerr);
        } else if (nmoved > 0) {
            printf("checkpoints: moved %d of step > %d (the run this one replaces from step %d) "
                   "to %s\n", nmoved, start, start, moved);
        }
        if (!(out = fopen(p, "a"))) {
            die("cannot append to %s: %s", p, strerror(errno));
        }
        return out;
    }
    if (mkdir_p(o->out) != 0) {
        die("cannot create --out %s: %s", o->out, strerror(errno));
    }
    if (!(out = fopen(p, "w"))) {
        die("cannot write %s: %s", p, strerror(errno));
    }
    fputs(stats_csv_header, out);
    return out;
}

#define NSLOT 2 /* ZeRO 2: block gradient buffers */

typedef struct {
    gpt_model_t *m;
    int ngroups;          /* L + 2 */
    dist_group_t *groups; /* groups[g] = model group g - 1 (embeddings first) */
    char (*names)[32];
    int zero, dp, rank;
    zero_shard_t z;       /* this rank's slices of the groups (all of them at ZeRO 0), their
                           * AdamW moments (zero.h) */
    float *gshard;        /* ZeRO 2: accumulated gradient slices, (z.shard_n) */
    /* Where group g's gradients are: grads + off, except with ZeRO 2, which never holds the whole
     * gradient: the embeddings and the final LayerNorm have buffers of their own, and the blocks
     * take turns in NSLOT slots, a slot being reused only once its last group's reduce-scatter is
     * in and that group's slice is accumulated into gshard. */
    float **gbuf;         /* (ngroups) */
    float *slot[NSLOT], *gemb, *glnf;
    int slot_owner[NSLOT]; /* the group in the slot, or -1 */
    unsigned char *pending; /* (ngroups) ZeRO 2: reduce-scatter posted, slice not accumulated */
    /* ZeRO 3: the rank keeps only its slices of the parameters (pshard, laid out like m1), and
     * each group is all-gathered into a buffer just before its forward and again before its
     * backward: the final LayerNorm (2 C floats) into a buffer of its own, the blocks in turns in
     * NSLOT slots, so that the next block's all-gather (posted before the current block's
     * compute) has a slot to land in. The embeddings share the block slots: gathered for the
     * embedding forward into the slot that block 0 does not use (block 1's, which evicts them),
     * and again for the head (wte is tied) into the slot that the last block does not use,
     * posted before the last block's forward; the head's backward finds them still there. So
     * the steady state holds the shard, the lnf and two slots of the largest group.
     * pstate: 0 not held, 1 all-gather posted, 2 held; pbuf[k] / powner[k]: slot k (0 lnf,
     * 1 + (g - 1) % NSLOT the blocks, emb_slot the embeddings) and the group in it, or -1. */
    float *pshard;
    float *pbuf[NSLOT + 1];
    int powner[NSLOT + 1];
    int emb_slot;          /* the slot of the embeddings' current (or next) all-gather */
    unsigned char *pstate; /* (ngroups) */
    size_t param_floats;  /* parameter memory: the model's buffer, or ZeRO 3's shard and buffers */
    int micro;            /* this micro-batch's index in the step */
    int params_pending;   /* ZeRO 1/2: all-gathers posted, not yet waited */
    /* --clip 0 (no global norm to wait for): each group is updated as soon as its own gradients
     * are in. ZeRO 0 defers group g's update to just before its next forward (update_pending);
     * ZeRO 1/2 update group by group in forward order and post each all-gather at once. */
    int per_layer;
    int update_pending;   /* ZeRO 0 per-layer: groups [update_next, ngroups) still to update */
    int update_next, update_step;
    float update_lr;
    adamw_cfg_t ac;
    size_t grad_floats;   /* gradient memory: buffers and shard */
} trainer_t;

static void z3_setup(trainer_t *t, size_t mx);

static size_t slice_n(const trainer_t *t, int g)
{
    return zero_slice_n(&t->z, g);
}

static size_t slice_off(const trainer_t *t, int g) /* in the parameter buffer */
{
    return zero_slice_off(&t->z, g);
}

static void trainer_setup(trainer_t *t, gpt_model_t *m, const opts_t *o)
{
    memset(t, 0, sizeof(*t));
    t->m = m;
    t->zero = o->zero;
    t->dp = D->size;
    t->rank = D->rank;
    int L = m->cfg.n_layer;
    t->ngroups = L + 2;
    t->groups = calloc((size_t)t->ngroups, sizeof(*t->groups));
    t->names = calloc((size_t)t->ngroups, sizeof(*t->names));
    if (!t->groups || !t->names) {
        die("out of memory");
    }
    for (int g = 0; g < t->ngroups; g++) {
        gpt_range_t r = gpt_layer_range(m, g - 1);
        if (g == 0) {
            snprintf(t->names[g], 32, "embeddings");
        } else if (g <= L) {
            snprintf(t->names[g], 32, "h.%d", g - 1);
        } else {
            snprintf(t->names[g], 32, "lnf");
        }
        t->groups[g] = (dist_group_t){.off = r.off, .n = r.n, .layer = g, .name = t->names[g]};
    }
    dist_grad_opts_t go = grad_opts(o);
    DIST_CHECK(D->grads_register(D, m->grads, t->groups, t->ngroups, &go),
               "gradient synchronization");
    t->gbuf = calloc((size_t)t->ngroups, sizeof(float *));
    t->pending = calloc((size_t)t->ngroups, 1);
    if (zero_shard_init(&t->z, t->groups, t->ngroups, t->zero, t->dp, t->rank) || !t->gbuf ||
        !t->pending) {
        die("out of memory for optimizer state");
    }
    for (int g = 0; g < t->ngroups; g++) {
        t->gbuf[g] = m->grads + t->groups[g].off;
    }
    size_t mx = 0; /* the largest block */
    for (int g = 1; g <= L; g++) {
        mx = t->groups[g].n > mx ? t->groups[g].n : mx;
    }
    t->param_floats = m->num_params;
    if (o->zero == 3) {
        z3_setup(t, mx);
    }
    if (o->zero >= 2) {
        t->gshard = calloc(t->z.shard_n, sizeof(float));
        t->gemb = calloc(t->groups[0].n, sizeof(float));
        t->glnf = calloc(t->groups[L + 1].n, sizeof(float));
        int ok = t->gshard && t->gemb && t->glnf;
        for (int k = 0; k < NSLOT; k++) {
            ok = ok && (t->slot[k] = calloc(mx, sizeof(float)));
            t->slot_owner[k] = -1;
        }
        if (!ok) {
            die("out of memory for ZeRO 2's gradient buffers");
        }
        t->gbuf[0] = t->gemb;
        t->gbuf[L + 1] = t->glnf;
        if (gpt_set_group_grads(m, 0, t->gemb) || gpt_set_group_grads(m, L + 1, t->glnf)) {
            die("model: %s", gpt_last_error());
        }
        gpt_release_grads(m); /* the blocks get a slot just before their backward */
        t->grad_floats = t->groups[0].n + t->groups[L + 1].n + NSLOT * mx + t->z.shard_n;
    } else {
        t->grad_floats = m->num_params;
    }
}

/* ZeRO 2: group g's reduce-scatter is in; add this rank's slice to the step's accumulated one. */
static void finish_group(trainer_t *t, int g)
{
    if (!t->pending[g]) {
        return;
    }
    DIST_CHECK(D->grads_wait(D, g), "gradients");
    float *dst = t->gshard + t->z.shard_off[g];
    const float *src = t->gbuf[g] + (slice_off(t, g) - t->groups[g].off);
    size_t n = slice_n(t, g);
    for (size_t i = 0; i < n; i++) {
        dst[i] = t->micro ? dst[i] + src[i] : src[i];
    }
    t->pending[g] = 0;
}

/* ZeRO 2: a zeroed slot for block group g's backward (waiting for the slot's last group). */
static void take_slot(trainer_t *t, int g)
{
    int k = (g - 1) % NSLOT;
    if (t->slot_owner[k] >= 0) {
        finish_group(t, t->slot_owner[k]);
    }
    memset(t->slot[k], 0, t->groups[g].n * sizeof(float));
    if (gpt_set_group_grads(t->m, g, t->slot[k])) {
        die("model: %s", gpt_last_error());
    }
    t->gbuf[g] = t->slot[k];
    t->slot_owner[k] = g;
}

/* ZeRO 1/2/3: this rank's slices between shard (laid out like m1: group g's slice at
 * shard_off[g]) and whole, a buffer laid out like the rank's parameters: into whole (to_shard 0),
 * or from it into shard (1). */
static void shard_copy(const trainer_t *t, float *shard, float *whole, int to_shard)
{
    for (int g = 0; g < t->ngroups; g++) {
        float *a = whole + slice_off(t, g), *b = shard + t->z.shard_off[g];
        memmove(to_shard ? b : a, to_shard ? a : b, slice_n(t, g) * sizeof(float));
    }
}

/* ZeRO 3: this rank's slices of the parameters into pshard, the model's whole buffer freed, and
 * the buffers that groups are gathered into (mx: the largest block's parameters). */
static void z3_setup(trainer_t *t, size_t mx)
{
    gpt_model_t *m = t->m;
    const int L = m->cfg.n_layer;
    t->pshard = malloc(t->z.shard_n * sizeof(float));
    t->pstate = calloc((size_t)t->ngroups, 1);
    t->pbuf[0] = malloc(t->groups[L + 1].n * sizeof(float));
    int ok = t->pshard && t->pstate && t->pbuf[0];
    mx = t->groups[0].n > mx ? t->groups[0].n : mx; /* a slot holds a block or the embeddings */
    for (int k = 1; k < NSLOT + 1; k++) {
        ok = ok && (t->pbuf[k] = malloc(mx * sizeof(float)));
    }
    if (!ok) {
        die("out of memory for ZeRO 3's parameter buffers");
    }
    shard_copy(t, t->pshard, m->params, 1);
    for (int k = 0; k < NSLOT + 1; k++) {
        t->powner[k] = -1;
    }
    gpt_release_params(m);
    t->param_floats = t->z.shard_n + t->groups[L + 1].n + NSLOT * mx;
}

static int z3_slot(const trainer_t *t, int g)
{
    return g == 0 ? t->emb_slot : g == t->ngroups - 1 ? 0 : 1 + (g - 1) % NSLOT;
}

/* ZeRO 3: post group g's all-gather into its buffer unless the group is held or on its way
 * (nothing for g outside the groups), first dropping the buffer's previous group. The forward
 * index is the all-gather's priority (dist's gather). */
static void z3_post(trainer_t *t, int g)
{
    if (g < 0 || g >= t->ngroups || t->pstate[g]) {
        return;
    }
    int k = z3_slot(t, g), o = t->powner[k];
    if (o >= 0) {
        if (t->pstate[o] == 1) { /* not expected (it is the group before last): complete it */
            DIST_CHECK(D->gather_wait(D, o), "parameters");
        }
        t->pstate[o] = 0;
        gpt_set_group_params(t->m, o, NULL);
    }
    t->powner[k] = g;
    DIST_CHECK(D->gather_to(D, g, t->pshard + t->z.shard_off[g], t->pbuf[k]), "parameters");
    t->pstate[g] = 1;
}

/* ZeRO 3: post the embeddings' all-gather unless they are held or on their way, into the slot
 * that block group b (the block computed beside them) does not use. */
static void z3_emb(trainer_t *t, int b)
{
    if (!t->pstate[0]) {
        t->emb_slot = 1 + (z3_slot(t, b) - 1 + 1) % NSLOT;
        z3_post(t, 0);
    }
}

/* ZeRO 3: group g's parameters in the model (gathered now, or waited for), and the all-gather of
 * group `next`, the one to run after g, posted so that it overlaps g's compute. */
static void z3_params(trainer_t *t, int g, int next)
{
    z3_post(t, g);
    if (t->pstate[g] == 1) {
        DIST_CHECK(D->gather_wait(D, g), "parameters");
        t->pstate[g] = 2;
        if (gpt_set_group_params(t->m, g, t->pbuf[z3_slot(t, g)])) {
            die("model: %s", gpt_last_error());
        }
    }
    z3_post(t, next);
}

/* ZeRO 3, after an update of the shards: every gathered buffer is stale (dropped, not freed:
 * they are reused), and the next forward's first two groups are posted at once. */
static void z3_updated(trainer_t *t)
{
    for (int g = 0; g < t->ngroups; g++) {
        if (t->pstate[g] == 1) {
            DIST_CHECK(D->gather_wait(D, g), "parameters");
        }
        t->pstate[g] = 0;
        gpt_set_group_params(t->m, g, NULL);
    }
    for (int k = 0; k < NSLOT + 1; k++) {
        t->powner[k] = -1;
    }
    z3_emb(t, 1);
    z3_post(t, 1);
}

/* Group g's gradients are final: hand them to the backend. */
static void grads_ready(trainer_t *t, int g)
{
    DIST_CHECK(D->grads_ready(D, g, t->gbuf[g]), "gradients");
    t->pending[g] = t->zero >= 2;
}

/* This rank's synchronized gradient slice of group g. */
static const float *grad_slice(const trainer_t *t, int g)
{
    return t->gshard ? t->gshard + t->z.shard_off[g] : t->m->grads + slice_off(t, g);
}

/*
 * Σ g² of this rank's synchronized slice of group g, for the global norm: with tensor parallelism
 * the sharded tensors count on every TP rank and the replicated ones (the same on every TP rank)
 * on TP rank 0 only, so that the sum over the job counts every parameter of the model once.
 */
static double slice_sumsq(const trainer_t *t, int g)
{
    size_t lo = slice_off(t, g);
    return zero_range_sumsq(t->m, grad_slice(t, g), lo, lo + slice_n(t, g));
}

/* AdamW on this rank's slice of group g. */
static void update_group(trainer_t *t, int g, int step, float lr, float scale)
{
    float *p = t->pshard ? t->pshard + t->z.shard_off[g] : t->m->params + slice_off(t, g);
    if (zero_update(&t->z, t->m, g, p, grad_slice(t, g), step, &t->ac, lr, scale)) {
        die("optimizer: %s", gpt_last_error());
    }
}

/* Group g's parameters are current: ZeRO 1/2 wait for their all-gather (posted after the last
 * update); ZeRO 0 per-layer waits for the group's gradients and applies its deferred update. */
static void wait_params(trainer_t *t, int g)
{
    const int L = t->ngroups - 2;
    if (t->zero == 3) { /* the embeddings: beside block 0, and again beside the last block */
        int next = g + 1;
        if (g == 0) {
            z3_emb(t, 1);
            /* a forward right after a forward (validation, sampling: no update in between to
             * drop the buffers) finds the embeddings still held from the last one's head, in
             * block 0's slot when the last block took the other: block 0's all-gather would
             * drop them before their forward, so it waits until that forward is done */
            next = t->pstate[0] && t->emb_slot == z3_slot(t, 1) ? -1 : next;
        }
        z3_params(t, g, next);
        if (g == L || g == L + 1) {
            z3_emb(t, L); /* wte for the head: posted behind lnf's all-gather */
        }
        if (g == L + 1) {
            z3_params(t, 0, -1);
        }
        return;
    }
    if (t->params_pending) {
        DIST_CHECK(D->gather_wait(D, g), "parameters");
    }
    while (t->update_pending && t->update_next <= g) {
        int k = t->update_next++;
        DIST_CHECK(D->grads_wait(D, k), "gradients");
        update_group(t, k, t->update_step, t->update_lr, 1.0f);
        t->update_pending = t->update_next < t->ngroups;
    }
}

static void wait_all_params(trainer_t *t)
{
    for (int g = 0; t->zero == 3 && g < t->ngroups; g++) {
        if (t->pstate[g] == 1) {
            z3_params(t, g, -1);
        }
    }
    if (t->zero == 3) {
        return;
    }
    /* Every group's all-gather, as a forward waits for each: the last one's done says nothing
     * of the others' (a save read groups whose all-gathers were still in flight). */
    for (int g = 0; g < t->ngroups; g++) {
        wait_params(t, g);
    }
    t->params_pending = 0;
}

/* Marks group g's compute (phase 0 forward, 1 backward) for the timeline and the tac policy. */
static void mark(int g, int phase)
{
    DIST_CHECK(g >= 0 ? D->compute_begin(D, g, phase) : D->compute_end(D), "compute marker");
}

/* Forward of one micro-batch, waiting for each group's parameters just before it runs. */
static float forward(trainer_t *t, const int *x, const int *y, int B, int T)
{
    gpt_model_t *m = t->m;
    int L = m->cfg.n_layer;
    float loss = 0;
    wait_params(t, 0);
    mark(0, 0);
    if (gpt_forward_embed(m, x, B, T)) {
        die("forward: %s", gpt_last_error());
    }
    mark(-1, 0);
    for (int l = 0; l < L; l++) {
        wait_params(t, l + 1);
        mark(l + 1, 0);
        if (gpt_forward_layer(m, l)) {
            die("forward: %s", gpt_last_error());
        }
        mark(-1, 0);
    }
    wait_params(t, L + 1);
    t->params_pending = 0;
    mark(L + 1, 0);
    if (gpt_forward_head(m, y, &loss)) {
        die("forward: %s", gpt_last_error());
    }
    mark(-1, 0);
    return loss;
}

/* Backward of the last forward, handing each finished group to the backend. */
static void backward(trainer_t *t, float dloss)
{
    gpt_model_t *m = t->m;
    int L = m->cfg.n_layer;
    if (t->zero == 3) { /* the head's groups, held since its forward; block L - 1 too */
        z3_emb(t, L);
        z3_params(t, 0, -1);
        z3_params(t, L + 1, L);
    }
    mark(L + 1, 1);
    if (gpt_backward_head(m, dloss)) {
        die("backward: %s", gpt_last_error());
    }
    mark(-1, 1);
    grads_ready(t, L + 1);
    for (int l = L - 1; l >= 0; l--) {
        if (t->zero >= 2) {
            take_slot(t, l + 1);
        }
        if (t->zero == 3) { /* block l again, and block l - 1's all-gather behind it (not the
                             * embeddings': their backward needs no parameters) */
            z3_params(t, l + 1, l > 0 ? l : -1);
        }
        mark(l + 1, 1);
        if (gpt_backward_layer(m, l)) {
            die("backward: %s", gpt_last_error());
        }
        mark(-1, 1);
        grads_ready(t, l + 1);
    }
    mark(0, 1);
    if (gpt_backward_embed(m)) {
        die("backward: %s", gpt_last_error());
    }
    mark(-1, 1);
    grads_ready(t, 0);
}

/* ZeRO 1/2: every rank's slices of buf (laid out like the parameters) gathered in place. */
static void gather_full(trainer_t *t, float *buf)
{
    for (int g = 0; g < t->ngroups; g++) {
        DIST_CHECK(D->gather(D, g, buf), "gather");
        DIST_CHECK(D->gather_wait(D, g), "gather");
    }
}

/*
 * Tensor parallel: the unsharded (single-rank) layout of buf (laid out like this rank's
 * parameters) from every TP rank's shard, on every rank; a new buffer of full_params floats.
 */
static float *tp_full(const gpt_model_t *m, const float *buf)
{
    float *all = malloc((size_t)D->tp_size * m->num_params * sizeof(float));
    float *full = malloc(m->full_params * sizeof(float));
    if (!all || !full) {
        die("out of memory gathering the tensor-parallel shards");
    }
    DIST_CHECK(D->tp_allgather(D, buf, all, m->num_params), "tensor-parallel gather");
    for (int r = 0; r < D->tp_size; r++) {
        gpt_tp_place(m, all + (size_t)r * m->num_params, r, full);
    }
    free(all);
    return full;
}

/*
 * A whole buffer of the model in the single-rank layout (full_params floats, a new buffer) on
 * every rank, from this rank's state: whole, laid out like the rank's parameters (num_params
 * floats; with ZeRO its slices are the current ones), or else shard, its slices laid out like m1
 * (ZeRO 1/2/3). The DP ranks' slices are gathered (any ZeRO stage but 0), then the TP shards
 * (tp_full). Dumps and checkpoints: parameters, gradients and AdamW moments alike.
 */
static float *gather_state(trainer_t *t, const float *whole, float *shard)
{
    gpt_model_t *m = t->m;
    float *buf = calloc(m->num_params, sizeof(float));
    if (!buf) {
        die("out of memory gathering the model");
    }
    if (whole) {
        memcpy(buf, whole, m->num_params * sizeof(float));
    } else {
        shard_copy(t, shard, buf, 0);
    }
    if (t->zero) {
        gather_full(t, buf);
    }
    if (D->tp_size > 1) {
        float *full = tp_full(m, buf);
        free(buf);
        buf = full;
    }
    return buf;
}

/* The inverse of gather_state for a loaded checkpoint: this rank's part of full (the single-rank
 * layout) into whole (laid out like the rank's parameters) or, if whole is NULL, its slices into
 * shard. */
static void scatter_state(trainer_t *t, const float *full, float *whole, float *shard)
{
    float *local = NULL;
    if (D->tp_size > 1) {
        if (!(local = malloc(t->m->num_params * sizeof(float)))) {
            die("out of memory");
        }
        gpt_tp_slice(t->m, full, local);
    }
    const float *src = local ? local : full;
    if (whole) {
        memcpy(whole, src, t->m->num_params * sizeof(float));
    } else {
        shard_copy(t, shard, (float *)src, 1);
    }
    free(local);
}

/* Buffer k of this rank's state as gather_state and scatter_state take it (0 the parameters, 1
 * and 2 the AdamW moments): the whole buffer, or NULL and the shard into *shard_p. */
static float *state_of(trainer_t *t, int k, float **shard_p)
{
    float *sh = k == 0 ? t->pshard : k == 1 ? t->z.m1 : t->z.m2;
    *shard_p = sh;
    return k == 0 ? (t->pshard ? NULL : t->m->params) : t->zero ? NULL : sh;
}

/* Whether a checkpoint moves buffer k (whole: state_of's answer) through the single-rank layout
 * (gather_state, scatter_state): every buffer with tensor parallelism, ZeRO 3's parameters; the
 * rest is read and written in place (ckpt.h's ranges). */
static int ckpt_gathers(int k, const float *whole)
{
    return D->tp_size > 1 || (k == 0 && !whole);
}

static void dump_step0(trainer_t *t, const char *path, int step, double loss)
{
    gpt_model_t *m = t->m;
    /* ZeRO 1 keeps its slices in place in the whole gradient, ZeRO 2 and 3 in gshard */
    float *g = gather_state(t, t->gshard ? NULL : m->grads, t->gshard);
    char err[CKPT_ERR_LEN];
    if (D->world_rank == 0 && ckpt_dump(path, step, loss, g, m->full_params, err)) {
        die("--dump: %s", err);
    }
    free(g);
}

/* The validation loss: the mean over the first --val-windows windows of the validation split (all
 * of it if shorter), the same windows at any layout. Rank r evaluates windows [nv*r/dp,
 * nv*(r+1)/dp), one at a time (a window's loss then does not depend on which others share its
 * batch), and the ranks' sums meet in one float64 sum: every layout gets the same value up to the
 * order of that sum. */
/* A forward of one sequence outside training (validation, sampling); ZeRO 3 gathers group by
 * group as training does, so every DP rank must call it alike. */
static float infer(trainer_t *t, const int *x, const int *y, int T)
{
    float loss = -1;
    if (t->zero == 3) {
        return forward(t, x, y, 1, T);
    }
    if (gpt_forward(t->m, x, y, 1, T, &loss)) {
        die("forward: %s", gpt_last_error());
    }
    return loss;
}

static double evaluate(trainer_t *t, loader_t *ld, const opts_t *o, int *x, int *y)
{
    wait_all_params(t);
    size_t nv = loader_val_windows(ld);
    nv = nv < (size_t)o->val_windows ? nv : (size_t)o->val_windows;
    double s = 0;
    size_t lo = nv * (size_t)t->rank / (size_t)t->dp, hi = nv * (size_t)(t->rank + 1) / (size_t)t->dp;
    /* ZeRO 3's forward is collective (its all-gathers): every rank runs as many as the busiest,
     * those beyond its own windows on window 0, uncounted */
    size_t runs = t->zero == 3 ? (nv + (size_t)t->dp - 1) / (size_t)t->dp : hi - lo;
    for (size_t i = 0; i < runs; i++) {
        loader_val_window(ld, lo + i < hi ? lo + i : 0, x, y);
        float loss = infer(t, x, y, o->context);
        s += lo + i < hi ? loss : 0;
    }
    DIST_CHECK(D->sum_f64(D, &s, 1), "validation loss");
    return nv > 0 ? s / (double)nv : NAN;
}

static void sample(trainer_t *t, const opts_t *o)
{
    wait_all_params(t);
    if ((D->rank != 0 && t->zero != 3) || o->sample <= 0) { /* DP rank 0: all of its TP group;
                                                               * ZeRO 3: every rank (gathers) */
        return;
    }
    int T = o->context, n = 1, V = t->m->cfg.vocab_size, Vl = V / D->tp_size;
    int *ctx = calloc((size_t)T + (size_t)o->sample, sizeof(int));
    float *row = malloc((size_t)V * sizeof(float)); /* the last position's logits, all of them */
    if (!ctx || !row) {
        die("out of memory");
    }
    ctx[0] = '\n';
    uint64_t rng = o->seed ^ 0x5eed5eedull;
    for (int i = 0; i < o->sample; i++) {
        int start = n > T ? n - T : 0, len = n - start;
        /* sequence parallel: a length the TP group divides (T does); the zeros after the context
         * do not change its logits (causal attention) */
        int padded = o->sp ? (len + D->tp_size - 1) / D->tp_size * D->tp_size : len;
        infer(t, ctx + start, NULL, padded);
        const float *lg = gpt_logits(t->m) + (size_t)(len - 1) * (size_t)Vl;
        if (D->tp_size > 1) { /* every TP rank samples the same token from the same row */
            DIST_CHECK(D->tp_allgather(D, lg, row, (size_t)Vl), "sample");
            lg = row;
        }
        ctx[n++] = gpt_sample_next(lg, V, 1.0f, &rng);
    }
    free(row);
    size_t need = data_detokenize(ctx + 1, (size_t)n - 1, NULL, 0) + 1;
    char *txt = malloc(need);
    if (txt && D->world_rank == 0) {
        data_detokenize(ctx + 1, (size_t)n - 1, txt, need);
        printf("sample (%d tokens):\n%s\n", o->sample, txt);
    }
    free(txt);
    free(ctx);
}

/* The optimizer ranges this rank owns, in shard order (ZeRO 0: rank 0 owns everything). */
static int owned_ranges(const trainer_t *t, ckpt_range_t *r)
{
    if (!t->zero) {
        r[0] = (ckpt_range_t){0, t->m->num_params};
        return 1;
    }
    for (int g = 0; g < t->ngroups; g++) {
        r[g] = (ckpt_range_t){slice_off(t, g), slice_n(t, g)};
    }
    return t->ngroups;
}

/* ckpt_save's agreement: whether any rank failed (a lost rank ends the job, as everywhere). */
static int agree_cb(void *arg, int *failed)
{
    double x = *failed != 0;
    (void)arg;
    world_sum(&x, 1, "checkpoint");
    *failed = x > 0;
    return 0;
}

static ckpt_meta_t model_meta(const gpt_model_t *m)
{
    ckpt_meta_t mt;
    memset(&mt, 0, sizeof mt);
    mt.n_layer = m->cfg.n_layer;
    mt.n_head = m->cfg.n_head;
    mt.channels = m->cfg.channels;
    mt.max_seq_len = m->cfg.max_seq_len;
    mt.vocab_size = m->cfg.vocab_size;
    mt.num_params = m->full_params; /* checkpoints hold the unsharded layout */
    return mt;
}

/* Save a checkpoint after step. A failed save leaves nothing behind (ckpt_save) and is a warning:
 * training goes on and the next save retries. Returns 0, or -1 if this save failed. */
static int save_ckpt(trainer_t *t, const opts_t *o, loader_t *ld, int step)
{
    wait_all_params(t);
    ckpt_meta_t mt = model_meta(t->m);
    mt.step = step;
    mt.dp = t->dp;
    mt.zero = t->zero;
    mt.batch = o->batch;
    mt.accum = o->accum;
    loader_get_state(ld, &mt.loader);
    ckpt_range_t *r = calloc((size_t)t->ngroups, sizeof(*r));
    if (!r) {
        die("out of memory");
    }
    int nr = owned_ranges(t, r);
    if (!t->zero && t->rank != 0) {
        nr = 0; /* replicated state: rank 0 writes it */
    }
    /* ckpt_save reads whole parameters on rank 0: ZeRO 3's are gathered for the save. Tensor
     * parallel (any ZeRO stage): every buffer is gathered into the single-rank layout, which job
     * rank 0 writes as a one-rank checkpoint would: any layout loads it. */
    float *full[3] = {NULL, NULL, NULL}, *shard;
    for (int k = 0; k < 3; k++) {
        float *whole = state_of(t, k, &shard);
        if (ckpt_gathers(k, whole)) {
            full[k] = gather_state(t, whole, shard);
        }
    }
    if (D->tp_size > 1) {
        r[0] = (ckpt_range_t){0, t->m->full_params};
        nr = D->world_rank == 0;
    }
    char dir[4096], err[CKPT_ERR_LEN];
    snprintf(dir, sizeof dir, "%s/ckpt", o->out);
    double t0 = util_now_s();
    int rc = ckpt_save(dir, &mt, full[0] ? full[0] : t->m->params, r, nr,
                       full[1] ? full[1] : t->z.m1, full[2] ? full[2] : t->z.m2, o->ckpt_keep,
                       D->world_rank, agree_cb, NULL, err);
    free(r);
    for (int k = 0; k < 3; k++) {
        free(full[k]);
    }
    if (rc == CKPT_FAILED_HERE) {
        fprintf(stderr, "tempo-train: rank %d: %s\n", D->world_rank, err);
    }
    if (rc && D->world_rank == 0) {
        if (step < o->steps) {
            fprintf(stderr,
                    "tempo-train: warning: checkpoint %s/step_%08d failed (above); older "
                    "checkpoints are untouched; training goes on, the next save is at step %d\n",
                    dir, step, step + o->ckpt_every < o->steps ? step + o->ckpt_every : o->steps);
        } else {
            fprintf(stderr,
                    "tempo-train: error: the final checkpoint %s/step_%08d failed (above); older "
                    "checkpoints are untouched; exit status 1\n",
                    dir, step);
        }
    } else if (D->world_rank == 0) {
        printf("checkpoint: %s/step_%08d (%.0f ms)\n", dir, step, (util_now_s() - t0) * 1e3);
    }
    fflush(stdout);
    return rc ? -1 : 0;
}

/* Load --resume into the model, the optimizer shards and the loader; returns the step to start. */
static int load_ckpt(trainer_t *t, const opts_t *o, loader_t *ld)
{
    char path[4096], err[CKPT_ERR_LEN], dir[4096];
    snprintf(dir, sizeof dir, "%s/ckpt", o->out);
    resume_path(o, path);
    ckpt_meta_t want = model_meta(t->m), got;
    ckpt_range_t *r = calloc((size_t)t->ngroups, sizeof(*r));
    if (!r) {
        die("out of memory");
    }
    int nr = owned_ranges(t, r);
    /* ZeRO 3: whole parameters loaded, the rank's slices kept; tensor parallel (any ZeRO stage):
     * every buffer loaded in the single-rank layout, the rank's part kept */
    float *full[3] = {NULL, NULL, NULL}, *whole[3], *shard[3];
    for (int k = 0; k < 3; k++) {
        whole[k] = state_of(t, k, &shard[k]);
        if (ckpt_gathers(k, whole[k]) && !(full[k] = malloc(t->m->full_params * sizeof(float)))) {
            die("out of memory");
        }
    }
    if (D->tp_size > 1) {
        r[0] = (ckpt_range_t){0, t->m->full_params};
        nr = 1;
    }
    if (ckpt_load(path, &want, &got, full[0] ? full[0] : t->m->params, r, nr,
                  full[1] ? full[1] : t->z.m1, full[2] ? full[2] : t->z.m2, err)) {
        die("--resume: %s; nothing was loaded (older checkpoints in %s are untouched)", err, dir);
    }
    for (int k = 0; k < 3; k++) {
        if (full[k]) {
            scatter_state(t, full[k], whole[k], shard[k]);
        }
        free(full[k]);
    }
    if (t->zero == 3) {
        z3_updated(t);
    }
    char lerr[DATA_ERR_LEN];
    if (loader_set_state(ld, &got.loader, lerr)) { /* resume_data checked it */
        die("--resume %s: data position: %s", path, lerr);
    }
    free(r);
    if (D->world_rank == 0) {
        printf("resumed from %s: step %lld (saved at dp %d, ZeRO %d)\n", path,
               (long long)got.step, got.dp, got.zero);
        fflush(stdout);
    }
    return (int)got.step;
}

/* loss.png from DIR/loss.csv (gnuplot, else matplotlib): the training loss and the validation
 * losses (the first at step 0 for a new run), titled with the run's layout. */
static void plot(const opts_t *o)
{
    char cmd[8192], title[256];
    snprintf(title, sizeof title,
             "tempo-train: %d layers, %d channels; %d rank%s: dp %d x tp %d x pp %d, ZeRO %d",
             o->layers, o->channels, D->world_size, plural(D->world_size), o->dp, o->tp, o->pp,
             o->zero);
    snprintf(cmd, sizeof cmd,
             "cd '%s' && if command -v gnuplot >/dev/null 2>&1; then gnuplot -e \""
             "set terminal pngcairo size 900,540; set output 'loss.png'; set datafile separator ',';"
             "set title '%s'; set xlabel 'step'; set ylabel 'loss'; set key autotitle columnhead;"
             "plot 'loss.csv' using 1:2 with lines title 'train', '' using 1:3 with linespoints "
             "title 'validation'\" 2>/dev/null; elif [ -x /usr/bin/python3 ]; then "
             "/usr/bin/python3 -c \"import csv,matplotlib; matplotlib.use('Agg');"
             "import matplotlib.pyplot as p; r=list(csv.DictReader(open('loss.csv')));"
             "t=[a for a in r if a['loss']];"
             "p.plot([int(a['step']) for a in t],[float(a['loss']) for a in t],label='train');"
             "v=[a for a in r if a['val_loss']];"
             "p.plot([int(a['step']) for a in v],[float(a['val_loss']) for a in v],'o-',"
             "label='validation'); p.title('%s'); p.xlabel('step'); p.ylabel('loss');"
             "p.legend(); p.savefig('loss.png',dpi=100)\" 2>/dev/null; fi",
             o->out, title, title);
    int rc = system(cmd);
    struct stat st;
    char png[4096];
    snprintf(png, sizeof png, "%s/loss.png", o->out);
    if (rc == 0 && stat(png, &st) == 0) {
        printf("loss curve: %s/loss.csv, %s\n", o->out, png);
    } else {
        printf("loss curve: %s/loss.csv (no PNG: install gnuplot or python3-matplotlib)\n",
               o->out);
    }
}

/* The model's tensor-parallel collectives (model.h's gpt_tp_t) on D's TP group. */
static int tp_sum_cb(void *ctx, float *buf, size_t n)
{
    dist_t *d = ctx;
    return d->tp_allreduce(d, buf, n, 0) ? gpt_fail("%s", d->error(d)) : 0;
}

static int tp_max_cb(void *ctx, float *buf, size_t n)
{
    dist_t *d = ctx;
    return d->tp_allreduce(d, buf, n, 1) ? gpt_fail("%s", d->error(d)) : 0;
}

static int tp_gather_cb(void *ctx, const float *send, float *recv, size_t n)
{
    dist_t *d = ctx;
    return d->tp_allgather(d, send, recv, n) ? gpt_fail("%s", d->error(d)) : 0;
}

static int tp_scatter_cb(void *ctx, const float *send, float *recv, size_t n)
{
    dist_t *d = ctx;
    return d->tp_reduce_scatter(d, send, recv, n) ? gpt_fail("%s", d->error(d)) : 0;
}

/* The model's gpt_tp_t on D's TP group (sp: sequence parallelism too). */
static gpt_tp_t tp_of(int sp)
{
    return (gpt_tp_t){.rank = D->tp_rank, .size = D->tp_size, .allreduce_sum = tp_sum_cb,
                      .allreduce_max = tp_max_cb, .ctx = D, .allgather = tp_gather_cb,
                      .reduce_scatter = tp_scatter_cb, .sp = sp};
}

/* Rank 0's refusal of a layout before any work (before the mesh: D is the job): every rank
 * leaves alike, after rank 0 has said why (the barrier: a rank leaving first would make the
 * launcher end rank 0 before its message). */
static void refuse(const char *why)
{
    if (*why) {
        if (D->world_rank == 0) {
            fprintf(stderr, "tempo-train: %s\n", why);
        }
        quit(2); /* (a barrier first) */
    }
}

/* Build the mesh (mesh.h) of the layout the caller checked, and print it from rank 0. */
static void build_mesh(int dp, int tp, int pp, int sp)
{
    char err[256];
    if (mesh_build(D, dp, tp, pp, sp, err)) {
        die("mesh: %s", err);
    }
    if (D->world_rank == 0) {
        mesh_print(&D->mesh, stdout);
    }
}

/* --pp P > 1: checks the pipeline layout before any work (every rank alike, rank 0 says why),
 * builds the PP x DP x TP mesh and prints it with its groups. */
static void setup_pipeline(opts_t *o, const gpt_config_t *cfg, pp_kind_t *kind_p)
{
    const int n = D->world_size, tp = o->tp, pp = o->pp;
    char why[512] = "";
    o->micro = o->micro ? o->micro : pp;
    int dp = o->dp ? o->dp : n / (tp * pp);
    if (gpt_config_check(cfg)) {
        snprintf(why, sizeof why, "model: %s", gpt_last_error());
    } else if (pp_kind_parse(o->pp_schedule, kind_p)) {
        snprintf(why, sizeof why, "--pp-schedule %s: not gpipe, 1f1b or interleaved",
                 o->pp_schedule);
    } else if (n % (tp * pp) != 0 || dp * tp * pp != n) {
        snprintf(why, sizeof why, "--dp %d x --tp %d x --pp %d must equal the job's %d rank%s (run "
                 "with tempo-run -n %d)", dp, tp, pp, n, plural(n), (dp ? dp : 1) * tp * pp);
    } else if (gpt_tp_check(cfg, tp)) {
        snprintf(why, sizeof why, "%s", gpt_last_error());
    } else if (o->sp && gpt_sp_check(o->context, tp)) {
        snprintf(why, sizeof why, "--pp %d --sp: %s", pp, gpt_last_error());
    } else if (o->accum_set && o->accum != 1) {
        snprintf(why, sizeof why, "--pp %d: the pipeline's micro-batches are the accumulation: "
                 "pass --micro %d instead of --accum %d", pp, o->accum, o->accum);
    } else if (pp_layout_check(*kind_p, pp, o->micro, o->virt, cfg->n_layer)) {
        snprintf(why, sizeof why, "--pp %d --pp-schedule %s --micro %d --virtual %d, %d layers: %s",
                 pp, o->pp_schedule, o->micro, o->virt, cfg->n_layer, gpt_last_error());
    } else {
        dist_grad_opts_t go = grad_opts(o);
        D->grads_check(D, &go, why, sizeof why);
    }
    refuse(why);
    o->dp = dp;
    o->accum = o->micro; /* the loader reads M micro-batches per step */
    o->accum_set = 1;    /* a resume keeps M and derives --batch (keep_global_batch) */
    build_mesh(dp, tp, pp, o->sp);
}

/* --pp P > 1: the whole run on this rank's pipeline stages (trainer/pp_train.c), which ends
 * with each rank's memory line (stats_print_rss) while the stages are still allocated. */
static int run_pipeline(opts_t *o, const gpt_config_t *cfg, pp_kind_t kind)
{
    char err[512];
    loader_t *ld = loader_open(o->data, DATA_BYTE_VOCAB, o->context, o->batch, D->rank, D->size,
                               o->seed, o->val_frac, err);
    char derr[DATA_ERR_LEN + 8];
    int dbad = !ld || loader_set_accum(ld, o->micro, err);
    snprintf(derr, sizeof derr, "data: %s", dbad ? err : "");
    refuse_any(dbad, derr);
    if (o->resume) {
        resume_data(o, ld);
    }
    char ckdir[4096], resume[4096];
    snprintf(ckdir, sizeof ckdir, "%s/ckpt", o->out);
    int start = 0;
    if (o->resume) {
        ckpt_meta_t mt;
        resume_path(o, resume);
        if (ckpt_peek(resume, &mt, err)) { /* keep_global_batch read it already */
            die("--resume: %s", err);
        }
        start = (int)mt.step;
    }
    pp_train_opts_t po = {.ckpt_dir = ckdir, .ckpt_every = o->ckpt_every, .ckpt_keep = o->ckpt_keep,
                          .resume = o->resume ? resume : NULL, .ckpt0 = o->ckpt0,
                          .val_every = o->val_every,
                          .val_windows = o->val_windows, .kind = kind, .M = o->micro, .V = o->virt, .B = o->batch,
                          .T = o->context, .steps = o->steps, .warmup = o->warmup, .lr = o->lr,
                          .min_lr_frac = o->min_lr_frac, .wd = o->wd, .clip = o->clip,
                          .beta1 = o->beta1, .beta2 = o->beta2, .seed = o->seed, .dump = o->dump,
                          .quiet = o->quiet, .recompute = o->recompute, .zero = o->zero,
                          .grad = grad_opts(o)};
    gpt_tp_t tp = tp_of(o->sp);
    po.tp = D->tp_size > 1 ? &tp : NULL;
    if (D->world_rank == 0) {
        printf("tempo-train: %d rank%s, backend %s, pipeline parallel, ZeRO %d%s; model: %d "
               "layers, %d heads, %d channels, context %d: %zu parameters\n", D->world_size,
               plural(D->world_size), D->backend, o->zero, from_env(o),
               o->layers, o->heads, o->channels, o->context, gpt_num_params(cfg));
        printf("global batch: %d sequences per step (--batch %d x %d DP rank%s x --micro %d)\n",
               o->batch * D->size * o->micro, o->batch, D->size, plural(D->size), o->micro);
        if (!o->dump && o->sample) {
            printf("note: no sample at the end with --pp yet\n");
        }
        if (!o->dump && start < o->steps) {
            po.csv = open_csv(o, start);
        }
    }
    int rc = pp_train_run(D, cfg, ld, &po, err);
    if (rc < 0) {
        die("%s", err);
    }
    if (po.csv) {
        fclose(po.csv);
        plot(o);
    }
    loader_close(ld);
    int last_save_failed = rc && D->world_rank == 0; /* rank 0 alone fails the run for it */
    rc = dist_close(D) || last_save_failed ? 1 : 0;
    D = NULL;
    return rc;
}

/* Checks the layout (--dp x --tp x --pp = the job's ranks, the model divisible by --tp) before any
 * work, every rank alike (rank 0 says why), then builds the DP x TP mesh and prints it. */
static void setup_mesh(opts_t *o, const gpt_config_t *cfg)
{
    const int n = D->world_size, tp = o->tp;
    char why[512] = "";
    if (o->micro || o->virt != 1) {
        snprintf(why, sizeof why, "--micro and --virtual are pipeline flags: pass --pp P > 1 with "
                 "them (micro-batches at --pp 1 are --accum K)");
    } else if (gpt_config_check(cfg)) {
        snprintf(why, sizeof why, "model: %s", gpt_last_error());
    } else if (n % tp != 0 || (o->dp && o->dp * tp != n)) {
        snprintf(why, sizeof why, "--dp %d x --tp %d must equal the job's %d rank%s (run with "
                 "tempo-run -n %d, or pass --dp %d)", o->dp ? o->dp : n / tp, tp, n, plural(n),
                 (o->dp ? o->dp : 1) * tp, n % tp ? 1 : n / tp);
    } else if (gpt_tp_check(cfg, tp)) {
        snprintf(why, sizeof why, "%s", gpt_last_error());
    } else if (o->sp && gpt_sp_check(o->context, tp)) {
        snprintf(why, sizeof why, "%s", gpt_last_error());
    } else {
        dist_grad_opts_t go = grad_opts(o);
        D->grads_check(D, &go, why, sizeof why);
    }
    refuse(why);
    o->dp = n / tp;
    build_mesh(o->dp, tp, 1, o->sp);
}

int main(int argc, char **argv)
{
    opts_t o;
    parse(argc, argv, &o);
    char err[DATA_ERR_LEN];
    D = dist_open(o.backend, err);
    if (!D) {
        fprintf(stderr, "tempo-train: %s\n", err);
        return 1;
    }
    say_overrides(&o);
    resolve_auto(&o);
    gpt_config_t cfg = {.max_seq_len = o.context, .vocab_size = DATA_BYTE_VOCAB,
                        .n_layer = o.layers, .n_head = o.heads, .channels = o.channels};
    pp_kind_t pp_kind = PP_1F1B;
    if (o.pp > 1) {
        setup_pipeline(&o, &cfg, &pp_kind);
    } else {
        setup_mesh(&o, &cfg);
    }
#ifdef _OPENMP
    int threads = o.threads;
    if (!threads) {
        threads = getenv("OMP_NUM_THREADS") ? omp_get_max_threads()
                                            : (int)(sysconf(_SC_NPROCESSORS_ONLN) / D->world_size);
    }
    omp_set_num_threads(threads > 0 ? threads : 1);
#endif
    if (!o.dump && !o.resume) {
        check_out(&o);
    }
    if (o.resume) {
        char path[4096];
        resume_path(&o, path);
        keep_global_batch(&o, path);
    }
    if (o.pp > 1) {
        return run_pipeline(&o, &cfg, pp_kind);
    }
    gpt_model_t *m;
    gpt_tp_t tp = tp_of(o.sp);
    if (gpt_create_tp(&cfg, &tp, o.seed, &m) || gpt_set_recompute(m, o.recompute)) {
        die("model: %s", gpt_last_error());
    }
    loader_t *ld = loader_open(o.data, DATA_BYTE_VOCAB, o.context, o.batch, D->rank, D->size,
                               o.seed, o.val_frac, err);
    char derr[DATA_ERR_LEN + 8];
    int dbad = !ld || loader_set_accum(ld, o.accum, err);
    snprintf(derr, sizeof derr, "data: %s", dbad ? err : "");
    refuse_any(dbad, derr);
    if (o.resume) {
        resume_data(&o, ld);
    }
    if (gpt_alloc_acts(m, o.batch, o.context)) {
        die("model: %s", gpt_last_error());
    }
    trainer_t t;
    trainer_setup(&t, m, &o);
    t.ac = (adamw_cfg_t){.beta1 = (float)o.beta1, .beta2 = (float)o.beta2, .eps = 1e-8f,
                         .weight_decay = (float)o.wd};
    t.per_layer = o.clip == 0;
    loader_info_t li;
    loader_info(ld, &li);
    size_t tokens_step = (size_t)o.batch * (size_t)o.context * (size_t)o.accum * (size_t)D->size;
    double flops_tok = gpt_flops_per_token(&cfg, o.context);
    FILE *csv = NULL;
    if (D->world_rank == 0) {
        printf("tempo-train: %d rank%s, backend %s, ZeRO %d; %s%s\n", D->world_size,
               plural(D->world_size), D->backend, o.zero, D->describe(D), from_env(&o));
        printf("model: %d layers, %d heads, %d channels, context %d, vocabulary %d: %zu "
               "parameters",
               o.layers, o.heads, o.channels, o.context, cfg.vocab_size, m->full_params);
        if (D->tp_size > 1) {
            printf(" (%zu per tensor-parallel rank: qkv, fc and wte by rows, the projections "
                   "by columns, LayerNorms, wpe and the projections' biases replicated)",
                   m->num_params);
        }
        printf("\n");
        /* ZeRO 3: the shard (with --tp: 1/dp of the rank's TP shard, not of the whole model),
         * then the gathered working set */
        char zp[256] = "", of[80] = "";
        if (o.zero == 3 && D->tp_size > 1) {
            snprintf(of, sizeof of, ", 1/%d of this rank's tensor-parallel %.2f MB", D->size,
                     4e-6 * (double)m->num_params);
        }
        if (o.zero == 3) {
            snprintf(zp, sizeof zp, " (a shard of %.2f MB%s, lnf, and 2 buffers of the largest "
                     "group that the blocks and embeddings are gathered into)",
                     4e-6 * (double)t.z.shard_n, of);
        }
        printf("memory per rank: parameters %.2f MB%s, gradients %.2f MB%s, AdamW state %.2f "
               "MB, activations %.2f MB (batch %d x context %d)\n",
               4e-6 * (double)t.param_floats, zp, 4e-6 * (double)t.grad_floats,
               o.zero >= 2 ? " (a shard and backward buffers for 2 blocks, embeddings and lnf)"
                           : "",
               8e-6 * (double)t.z.shard_n, 4e-6 * (double)gpt_act_floats(m), o.batch, o.context);
        printf("activations per rank: %.3f MB (recompute %s), of which LayerNorm and residual "
               "regions %.3f MB%s, column-parallel outputs (QKV, attention, fc and GELU, logits) "
               "%.3f MB%s\n",
               4e-6 * (double)m->act_floats, gpt_recompute_name(o.recompute),
               4e-6 * (double)m->act_seq_floats, o.sp ? " (sequence-parallel: 1/tp of them)" : "",
               4e-6 * (double)m->act_col_floats,
               D->tp_size > 1 ? " (the rank's heads, columns and vocabulary rows: 1/tp of them)"
                              : "");
        size_t nv = li.val_windows < (size_t)o.val_windows ? li.val_windows : (size_t)o.val_windows;
        printf("data: %s: %zu tokens in %d file%s, %zu train / %zu validation (%zu of its "
               "windows evaluated)\n",
               o.data, li.tokens, li.nfiles, plural(li.nfiles), li.train_tokens, li.val_tokens, nv);
        printf("global batch: %d sequences per step (--batch %d x %d rank%s x --accum %d), %zu "
               "tokens of context %d\n",
               o.batch * D->size * o.accum, o.batch, D->size, plural(D->size), o.accum,
               tokens_step, o.context);
        fflush(stdout);
    }
    int *x = malloc((size_t)o.batch * (size_t)o.context * sizeof(int));
    int *y = malloc((size_t)o.batch * (size_t)o.context * sizeof(int));
    if (!x || !y) {
        die("out of memory");
    }
    double first_val = NAN, last_val = NAN, t_run = util_now_s();
    stats_run_t run = {0}; /* the steps after this run's first */
    int final_ckpt_failed = 0;
    int start = o.resume ? load_ckpt(&t, &o, ld) : 0, ran = start < o.steps;
    if (o.ckpt0) { /* before loss.csv (resolve_auto); a failure is a warning, as at any step */
        if (D->world_rank == 0 && mkdir_p(o.out) != 0) {
            die("cannot create --out %s: %s", o.out, strerror(errno));
        }
        save_ckpt(&t, &o, ld, 0);
    }
    if (D->world_rank == 0 && !o.dump && !ran) {
        if (o.resume) {
            printf("nothing to train: the checkpoint is at step %d and --steps is %d (pass a "
                   "larger --steps to train on)\n", start, o.steps);
        } else {
            printf("nothing to train: --steps %d\n", o.steps);
        }
    } else if (D->world_rank == 0 && !o.dump) {
        csv = open_csv(&o, start);
    }
    if (o.val_every > 0 && !o.dump) {
        first_val = evaluate(&t, ld, &o, x, y);
        if (D->world_rank == 0) {
            printf("step %4d | val loss %.4f\n", start, first_val);
        }
        if (csv && start == 0) { /* a new run's curve starts at the untrained model */
            stats_csv_val(csv, 0, first_val);
        }
    }
    for (int s = start; s < o.steps; s++) {
        double t0 = stats_begin(D), loss_sum = 0;
        for (int k = 0; k < o.accum; k++) {
            int sync = o.zero >= 2 || k == o.accum - 1;
            loader_next_train(ld, x, y);
            loss_sum += forward(&t, x, y, o.batch, o.context); /* applies deferred updates */
            DIST_CHECK(D->grads_begin(D, sync), "gradients");
            if (o.zero >= 2 || k == 0) {
                gpt_zero_grad(m); /* ZeRO 2, 3: backward's scratch, this micro-batch only */
            }
            t.micro = k;
            backward(&t, 1.0f / (float)o.accum);
            for (int g = 0; g < t.ngroups; g++) {
                finish_group(&t, g); /* ZeRO 2, 3 */
            }
        }
        /* the global gradient norm (clipping) needs every group; per-layer mode skips it */
        double sq = 0;
        int lazy = t.per_layer && !o.dump;
        for (int g = 0; g < t.ngroups && !lazy; g++) {
            DIST_CHECK(D->grads_wait(D, g), "gradients");
            sq += slice_sumsq(&t, g);
        }
        double red[2] = {loss_sum, o.zero ? sq : 0};
        DIST_CHECK(D->sum_f64(D, red, 2), "loss");
        if (D->tp_size > 1 && !lazy) { /* the TP shards' parts of the norm */
            sq = o.zero ? red[1] : sq;
            DIST_CHECK(D->tp_sum_f64(D, &sq, 1), "gradient norm");
            red[1] = sq;
        }
        double loss = red[0] / ((double)o.accum * D->size);
        double norm = lazy ? NAN : sqrt(o.zero ? red[1] : sq);
        if (o.dump) {
            dump_step0(&t, o.dump, s, loss);
            break;
        }
        float scale = lazy ? 1.0f : clip_scale(norm, (float)o.clip);
        float lr = lr_schedule(s, o.warmup, o.steps, (float)o.lr, (float)(o.lr * o.min_lr_frac));
        if (lazy && !o.zero) {
            t.update_pending = 1, t.update_next = 0, t.update_step = s + 1, t.update_lr = lr;
        }
        for (int g = 0; g < t.ngroups && !t.update_pending; g++) {
            if (lazy) {
                DIST_CHECK(D->grads_wait(D, g), "gradients");
            }
            update_group(&t, g, s + 1, lr, scale);
            if (o.zero == 1 || o.zero == 2) {
                DIST_CHECK(D->gather(D, g, m->params), "parameters");
            }
        }
        t.params_pending = o.zero == 1 || o.zero == 2;
        if (o.zero == 3) {
            z3_updated(&t); /* the next forward gathers the updated shards group by group */
        }
        stats_step_t st;
        DIST_CHECK(stats_end(D, t0, &st), "timers");
        stats_add(&run, s + 1, start + 1, &st);
        int last = s == o.steps - 1;
        double val = NAN;
        if (o.val_every > 0 && ((s + 1) % o.val_every == 0 || last)) {
            val = evaluate(&t, ld, &o, x, y);
            last_val = val;
        }
        if (D->world_rank == 0) {
            double tps = (double)tokens_step / st.step;
            if (!o.quiet) {
                char nb[32] = "-"; /* per-layer mode computes no global norm */
                if (!isnan(norm)) {
                    snprintf(nb, sizeof nb, "%.3f", norm);
                }
                printf("step %4d/%d | loss %.4f | lr %.2e | norm %s | %8.0f tok/s %5.1f GFLOP/s",
                       s + 1, o.steps, loss, lr, nb, tps, tps * flops_tok * 1e-9);
                stats_print_step(stdout, &st);
                if (!isnan(val)) {
                    printf(" | val loss %.4f", val);
                }
                printf("\n");
                fflush(stdout);
            }
            fprintf(csv, "%d,%.17g,", s + 1, loss);
            if (!isnan(val)) {
                fprintf(csv, "%.17g", val);
            }
            fprintf(csv, ",%.6e,", lr);
            stats_csv_row(csv, tps, &st);
            fflush(csv);
        }
        if (o.ckpt_every > 0 && ((s + 1) % o.ckpt_every == 0 || last)) {
            final_ckpt_failed = save_ckpt(&t, &o, ld, s + 1) != 0; /* the last save decides */
        }
    }
    if (!o.dump && !ran && D->world_rank == 0) {
        if (o.val_every > 0) {
            printf("validation loss: %.6f at step %d (no steps run)\n", first_val, start);
        }
    } else if (!o.dump) {
        if (D->world_rank == 0) {
            fclose(csv);
            stats_print_run(&run, (double)tokens_step);
            if (o.val_every > 0) {
                printf("validation loss: %.6f at start, %.6f at the end (steps %d-%d ran here: "
                       "%d step%s in %.1f s)\n",
                       first_val, last_val, start + 1, o.steps, o.steps - start,
                       plural(o.steps - start), util_now_s() - t_run);
            } else {
                printf("steps %d-%d ran here: %d step%s in %.1f s (no validation: --val-every "
                       "0)\n", start + 1, o.steps, o.steps - start, plural(o.steps - start),
                       util_now_s() - t_run);
            }
            plot(&o);
            fflush(stdout);
        }
        /* last: what was measured is out (files and lines) before anything that may still fail */
        sample(&t, &o);
    }
    wait_all_params(&t);
    if (!o.dump) {
        stats_print_rss(D);
    }
    /* A failed final save fails the run through rank 0 alone, the last to finish (a rank
     * exiting non-zero first would make the launcher end rank 0 before its last lines). */
    int rc = dist_close(D) || (final_ckpt_failed && t.rank == 0) ? 1 : 0;
    D = NULL;
    loader_close(ld);
    gpt_destroy(m);
    free(x);
    free(y);
    free(t.groups);
    free(t.names);
    zero_shard_free(&t.z);
    free(t.gshard);
    free(t.gbuf);
    free(t.pending);
    free(t.pshard);
    free(t.pstate);
    for (int k = 0; k < NSLOT + 1; k++) {
        free(t.pbuf[k]);
    }
    free(t.gemb);
    free(t.glnf);
    for (int k = 0; k < NSLOT; k++) {
        free(t.slot[k]);
    }
    return rc;
}
