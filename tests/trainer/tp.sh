#!/bin/sh
# tests/trainer/tp.sh — tempo-train with tensor parallelism (--tp) on real ranks (tempo-run), each
# layout against the single-rank run of the same global batch:
#   1. step 0: the loss and the full gradient (the TP shards gathered into the single-rank layout)
#      of TP=2, TP=4, DP=2 x TP=2 (ZeRO 0, 1 and 2) and TP=2 with 2 accumulated micro-batches
#      equal one rank's within 1e-5 (tests/trainer/dumpcmp);
#   2. 20 steps at TP=2, TP=4 and DP=2 x TP=2 ZeRO 1 track the single-rank losses within 1e-4
#      (clipping on: the global norm counts every shard and the replicated tensors once), and two
#      TP=2 runs give bitwise the same losses; the run prints the mesh;
#   3. checkpoints hold the unsharded layout: a checkpoint written at TP=2 resumes at TP=1 (and one
#      written at TP=1 at DP=2 x TP=2, ZeRO 0 and ZeRO 2: the moments sliced over TP, then over
#      DP) with the uninterrupted losses within 1e-5 (tests/trainer/reshard.sh: more layouts);
#   4. impossible layouts are refused before any work, with a clear error: heads not divisible by
#      --tp (also with --pp 2: the stages are tensor-parallel), --dp x --tp not the job size.
# Model: 2 layers, 4 heads, 32 channels, context 32, 8 sequences per global batch.
# Knobs: TRAINER_KEEP=1 keeps the temporary directory, TRAINER_TIMEOUT the hang guard per launch.

srcdir=${top_srcdir:-$(dirname "$0")/../..}
. "$srcdir/tests/trainer/lib.sh"
prepare --dumpcmp TRAINER README.md include/tempo.h

MODEL="--data $tmp/corpus.txt --layers 2 --heads 4 --channels 32 --context 32 --val-every 0 \
--sample 0 --quiet --warmup 3 --lr 3e-3"
# train DP TP ZERO OUT [args...]: tempo-train on DP x TP ranks, 8/DP sequences per DP rank
train() {
    _d=$1 _t=$2 _z=$3 _out=$4
    shift 4
    launch $((_d * _t)) "$_out.log" --batch $((8 / _d)) --dp "$_d" --tp "$_t" --zero "$_z" \
        --out "$_out" "$@"
}

echo "1..19"

# 1. step 0 against one rank
train 1 1 0 "$tmp/ref" --dump "$tmp/ref.bin"
point $? "single-rank step-0 dump"
train 1 1 0 "$tmp/refa" --accum 2 --dump "$tmp/refa.bin"
# step0 DP TP ZERO REF [args]: the step-0 dump of DP x TP against REF.bin
step0() {
    _dd=$1 _tt=$2 _zz=$3 _ref=$4
    shift 4
    _o="$tmp/s$_dd$_tt$_zz$_ref"
    train "$_dd" "$_tt" "$_zz" "$_o" --dump "$_o.bin" "$@"
    dumped $? "$tmp/$_ref.bin" "$_o.bin" \
        "DP=$_dd x TP=$_tt ZeRO $_zz $*: step-0 loss and full gradient equal one rank's within 1e-5" \
        "$_o.log"
}
step0 1 2 0 ref
step0 1 4 0 ref
step0 2 2 0 ref
step0 2 2 1 ref
step0 2 2 2 ref
step0 1 2 0 refa --accum 2

# 2. 20 steps
train 1 1 0 "$tmp/l1" --steps 20
point $? "single-rank 20 steps"
train 1 2 0 "$tmp/l2" --steps 20
track "$tmp/l1" "$tmp/l2" 20 1e-4 "TP=2: 20 steps track one rank's losses within 1e-4"
train 1 4 0 "$tmp/l4" --steps 20
track "$tmp/l1" "$tmp/l4" 20 1e-4 "TP=4: 20 steps track one rank's losses within 1e-4"
train 2 2 1 "$tmp/l22" --steps 20
track "$tmp/l1" "$tmp/l22" 20 1e-4 "DP=2 x TP=2 ZeRO 1: 20 steps track one rank's losses within 1e-4"
train 1 2 0 "$tmp/l2b" --steps 20
losses "$tmp/l2" >"$tmp/a" && losses "$tmp/l2b" >"$tmp/b" && cmp -s "$tmp/a" "$tmp/b"
point $? "two TP=2 runs give bitwise the same losses"
grep -q "TP groups: {0,1} {2,3}" "$tmp/l22.log" && grep -q "DP groups: {0,2} {1,3}" "$tmp/l22.log"
point $? "DP=2 x TP=2 prints its mesh (TP fastest)"
grep "groups:" "$tmp/l22.log" | sed 's/^/# /'

# 3. checkpoints across TP layouts
train 1 2 0 "$tmp/c" --steps 10 --ckpt-every 5
mkdir "$tmp/c1" && cp -r "$tmp/c/ckpt" "$tmp/c1/" &&
    train 1 1 0 "$tmp/c1" --steps 10 --resume "$tmp/c1/ckpt/step_00000005"
resumed "$tmp/c" "$tmp/c1"
report $? "written at TP=2, resumed at TP=1: steps 6-10 within 1e-5 of the uninterrupted run" \
    "$tmp/c1.log"
train 1 1 0 "$tmp/d" --steps 10 --ckpt-every 5
mkdir "$tmp/d2" && cp -r "$tmp/d/ckpt" "$tmp/d2/" &&
    train 2 2 0 "$tmp/d2" --steps 10 --resume "$tmp/d2/ckpt/step_00000005"
resumed "$tmp/d" "$tmp/d2"
report $? "written at TP=1, resumed at DP=2 x TP=2: steps 6-10 within 1e-5" "$tmp/d2.log"
mkdir "$tmp/d22" && cp -r "$tmp/d/ckpt" "$tmp/d22/" &&
    train 2 2 2 "$tmp/d22" --steps 10 --resume "$tmp/d22/ckpt/step_00000005"
resumed "$tmp/d" "$tmp/d22"
report $? "written at TP=1, resumed at DP=2 x TP=2 ZeRO 2: steps 6-10 within 1e-5" "$tmp/d22.log"

# 4. refused layouts
refused 2 "heads cannot be split over 2 ranks" "--heads 3 --tp 2" --heads 3 --channels 24 --tp 2
refused 4 "must equal the job's 4 ranks" "--dp 1 --tp 2 on 4 ranks" --dp 1 --tp 2
refused 4 "heads cannot be split over 2 ranks" "--heads 3 --tp 2 --pp 2" --heads 3 --channels 24 \
    --tp 2 --pp 2
