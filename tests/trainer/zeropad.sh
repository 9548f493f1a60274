#!/bin/sh
# tests/trainer/zeropad.sh — ZeRO 1, 2 and 3 at DP sizes that do not divide the layer groups
# (issue 31: "pad, so that any DP size works at every ZeRO stage"), on real ranks (tempo-run).
# The model's groups (2 layers, 32 channels: a block has 12704 parameters, the final LayerNorm 64)
# are cut by dist_slice into DP slices of ceil(n / DP), the last clipped, and the backends reduce
# and gather them through copies padded with zeros to DP equal slices:
#   1. step 0: the loss and every gradient of DP=3 and DP=5 with ZeRO 1, 2 and 3, of DP=3 x TP=2
#      ZeRO 3 and of DP=3 x PP=2 ZeRO 1 and 3 equal the single-rank run of the same global batch
#      (15 sequences; 6 at TP and PP) within 1e-5;
#   2. 10 steps at DP=3 ZeRO 1 and DP=5 ZeRO 3 track the single-rank losses within 1e-4;
#   3. checkpoints: written at DP=3 ZeRO 2 (uneven AdamW slices and their offsets), resumed at one
#      rank and at DP=5 ZeRO 3, steps 6-10 within 1e-5 of the uninterrupted run (which fails when
#      a save does not wait for every group's parameter all-gather: the padded groups' results are
#      copied out at the wait);
#   4. the mpi backend (when built and mpirun works here; else skipped): step 0 of DP=3 ZeRO 1 and
#      ZeRO 3 equal one rank's within 1e-5.
# Knobs: TRAINER_KEEP=1 keeps the temporary directory, TRAINER_TIMEOUT the hang guard per launch.

srcdir=${top_srcdir:-$(dirname "$0")/../..}
. "$srcdir/tests/trainer/lib.sh"
prepare --dumpcmp TRAINER README.md include/tempo.h

MODEL="--data $tmp/corpus.txt --layers 2 --heads 2 --channels 32 --context 32 --val-every 0 \
--sample 0 --quiet --warmup 3 --lr 3e-3"

echo "1..16"

# 1. step 0 against one rank (run, step0: lib.sh)
run 1 "$tmp/ref" --batch 15 --dump "$tmp/ref.bin"
point $? "single-rank step-0 dump (15 sequences)" "$tmp/ref.log"
for z in 1 2 3; do
    step0 3 ref "DP=3 ZeRO $z" --batch 5 --zero "$z"
    step0 5 ref "DP=5 ZeRO $z" --batch 3 --zero "$z"
done
run 1 "$tmp/ref6" --batch 6 --dump "$tmp/ref6.bin"
step0 6 ref6 "DP=3 x TP=2 ZeRO 3" --batch 2 --tp 2 --zero 3
step0 6 ref6 "DP=3 x PP=2 ZeRO 1" --batch 1 --pp 2 --micro 2 --zero 1
step0 6 ref6 "DP=3 x PP=2 ZeRO 3" --batch 1 --pp 2 --micro 2 --zero 3

# 2. training tracks one rank
run 1 "$tmp/t1" --batch 15 --steps 10
run 3 "$tmp/t3" --batch 5 --steps 10 --zero 1
track "$tmp/t1" "$tmp/t3" 10 1e-4 "DP=3 ZeRO 1: 10 steps within 1e-4 of one rank"
run 5 "$tmp/t5" --batch 3 --steps 10 --zero 3
track "$tmp/t1" "$tmp/t5" 10 1e-4 "DP=5 ZeRO 3: 10 steps within 1e-4 of one rank"

# 3. checkpoints with uneven slices
run 3 "$tmp/c" --batch 5 --steps 10 --zero 2 --ckpt-every 5
mkdir "$tmp/c1" && cp -r "$tmp/c/ckpt" "$tmp/c1/" &&
    run 1 "$tmp/c1" --batch 15 --steps 10 --resume "$tmp/c1/ckpt/step_00000005"
resumed "$tmp/c" "$tmp/c1"
report $? "written at DP=3 ZeRO 2, resumed at one rank: steps 6-10 within 1e-5" "$tmp/c1.log"
mkdir "$tmp/c5" && cp -r "$tmp/c/ckpt" "$tmp/c5/" &&
    run 5 "$tmp/c5" --batch 3 --steps 10 --zero 3 --resume "$tmp/c5/ckpt/step_00000005"
resumed "$tmp/c" "$tmp/c5"
report $? "written at DP=3 ZeRO 2, resumed at DP=5 ZeRO 3: steps 6-10 within 1e-5" "$tmp/c5.log"

# 4. the mpi backend
mpi_skip 2
for z in 1 3; do
    mstep0 3 "DP=3 ZeRO $z" --batch 5 --zero "$z"
done
