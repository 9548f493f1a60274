#!/bin/sh
# tests/trainer/pp.sh — tempo-train with pipeline parallelism (--pp) on real ranks (tempo-run),
# each layout against the single-rank run of the same global batch (--accum M at one rank is the
# pipeline's M micro-batches):
#   1. step 0: the loss and the full gradient (the stages gathered into the single-rank layout) of
#      PP=2 and PP=4 with 1f1b and gpipe, interleaved PP=2 x V=2, DP=2 x PP=2 and PP=2 x TP=2
#      (tensor-parallel stages: the TP shards of the gradient placed and summed), PP=2 x TP=2
#      --sp with 1f1b and interleaved V=2 and DP=2 x TP=2 x PP=2 --sp (8 ranks, one step;
#      sequence-parallel stages: each TP rank sends its 1/T of the sequence to the same TP rank
#      of the next stage) equal one rank's within 1e-5 (tests/trainer/dumpcmp): a gradient M
#      times too large (the loss not averaged over the micro-batches), a lost tied-embedding sum
#      or a stage fed the wrong message fails here even where the loss agrees;
#   2. 10 steps of PP=2 1f1b, interleaved PP=2 x V=2, DP=2 x PP=2, PP=2 x TP=2 and PP=2 x TP=2
#      --sp track the single-rank losses within 1e-4 (clipping on: the norm counts every stage,
#      wte and every TP-replicated tensor once), and so do the
#      validation losses (within 1e-5: the same windows through the stages); PP=2 x TP=2 --sp
#      prints half the LayerNorm and residual activations and half the message floats of
#      PP=2 x TP=2 (the start lines: the bytes allocated and sent); DP=2 x PP=2 prints
#      its mesh with the PP and embedding groups; every step line carries the measured bubble
#      next to the formula (P-1)/M or (P-1)/(V M) (only the formula's value is asserted: the
#      measurement is a timing);
#   3. impossible layouts are refused before any work, saying why: layers not divisible by P x V,
#      1f1b with M < P, an unknown schedule, --pp --sp without --tp > 1 or with a context --tp
#      does not divide, --micro without --pp; and a new run into another run's --out; --zero 3
#      with --pp (refused until ZeRO 3 ran on a pipeline) runs: PP=2 ZeRO 3 (one DP rank: the
#      shard is the whole chunk, copied instead of gathered) has one rank's step 0 within 1e-5
#      (more ZeRO 3 layouts in ppzero.sh);
#   4. checkpoints hold the single-rank layout: written at PP=2, resumed at one rank, and written
#      at one rank, resumed at DP=2 x PP=2, written at PP=2 x TP=2 and resumed at one rank, and
#      written at one rank, resumed at PP=2 x TP=2, with the uninterrupted losses within 1e-5.
# Model: 4 layers, 4 heads, 32 channels, context 32, 8 sequences per global batch.
# Knobs: TRAINER_KEEP=1 keeps the temporary directory, TRAINER_TIMEOUT the hang guard per launch.

srcdir=${top_srcdir:-$(dirname "$0")/../..}
. "$srcdir/tests/trainer/lib.sh"
prepare --dumpcmp TRAINER README.md include/tempo.h

MODEL="--data $tmp/corpus.txt --layers 4 --heads 4 --channels 32 --context 32 --val-every 0 \
--sample 0 --warmup 3 --lr 3e-3"
# track10 A B LABEL: the 10 losses of runs A and B agree within 1e-4
track10() { track "$1" "$2" 10 1e-4 "$3: 10 steps track one rank's losses within 1e-4"; }

echo "1..37"

# 1. step 0 against one rank: --batch 2 --accum 4 (M = 4), --batch 4 --accum 2 (DP=2 x M = 2)
run 1 "$tmp/r4" --batch 2 --accum 4 --dump "$tmp/r4.bin"
point $? "single-rank step-0 dump, 4 micro-batches"
run 1 "$tmp/r2" --batch 4 --accum 2 --dump "$tmp/r2.bin"
point $? "single-rank step-0 dump, 2 micro-batches of 4"
step0 2 r4 "PP=2 1f1b M=4" --batch 2 --pp 2 --micro 4
step0 2 r4 "PP=2 gpipe M=4" --batch 2 --pp 2 --micro 4 --pp-schedule gpipe
step0 4 r4 "PP=4 1f1b M=4" --batch 2 --pp 4 --micro 4
step0 4 r4 "PP=4 gpipe M=4" --batch 2 --pp 4 --micro 4 --pp-schedule gpipe
step0 2 r4 "PP=2 interleaved V=2 M=4" --batch 2 --pp 2 --micro 4 --virtual 2 \
    --pp-schedule interleaved
step0 4 r2 "DP=2 x PP=2 1f1b M=2" --batch 2 --pp 2 --dp 2 --micro 2
step0 4 r4 "PP=2 x TP=2 1f1b M=4" --batch 2 --pp 2 --tp 2 --micro 4
step0 4 r4 "PP=2 x TP=2 --sp 1f1b M=4" --batch 2 --pp 2 --tp 2 --sp --micro 4
step0 4 r4 "PP=2 x TP=2 --sp interleaved V=2 M=4" --batch 2 --pp 2 --tp 2 --sp --micro 4 \
    --virtual 2 --pp-schedule interleaved
step0 8 r2 "DP=2 x TP=2 x PP=2 --sp 1f1b M=2 (8 ranks)" --batch 2 --pp 2 --tp 2 --dp 2 --sp \
    --micro 2 --steps 1

# 2. 10 steps
VAL="--val-every 5 --val-windows 16"
run 1 "$tmp/l4" --batch 2 --accum 4 --steps 10 --quiet $VAL
point $? "single-rank 10 steps, 4 micro-batches"
run 2 "$tmp/p2" --batch 2 --pp 2 --micro 4 --steps 10
track10 "$tmp/l4" "$tmp/p2" "PP=2 1f1b M=4"
run 2 "$tmp/pi" --batch 2 --pp 2 --micro 4 --virtual 2 --pp-schedule interleaved --steps 10 $VAL
track10 "$tmp/l4" "$tmp/pi" "PP=2 interleaved V=2 M=4"
run 4 "$tmp/pt" --batch 2 --pp 2 --tp 2 --micro 4 --steps 10 --ckpt-every 5
track10 "$tmp/l4" "$tmp/pt" "PP=2 x TP=2 M=4"
run 4 "$tmp/ps" --batch 2 --pp 2 --tp 2 --sp --micro 4 --steps 10 $VAL
track10 "$tmp/l4" "$tmp/ps" "PP=2 x TP=2 --sp M=4"
run 1 "$tmp/l2" --batch 4 --accum 2 --steps 10 --quiet $VAL
run 4 "$tmp/d2" --batch 2 --pp 2 --dp 2 --micro 2 --steps 10 $VAL
track10 "$tmp/l2" "$tmp/d2" "DP=2 x PP=2 M=2"
# vals A B LABEL: the validation losses (steps 0, 5 and 10) of A and B agree within 1e-5
vals() {
    cut -d, -f3 "$1/loss.csv" >"$1.val" && cut -d, -f3 "$2/loss.csv" >"$2.val"
    _w=$(paste -d, "$1.val" "$2.val" | awk -F, 'NR > 1 && $1 != "" {n++;
        e = ($1 - $2) / $1; if (e < 0) e = -e; if (e > w) w = e}
        END {if (n != 3) print "missing"; else printf "%.3g", w}')
    awk -v w="$_w" 'BEGIN {exit !(w != "missing" && w + 0 <= 1e-5)}'
    point $? "$3: the validation losses equal one rank's within 1e-5 (worst $_w)"
}
vals "$tmp/l4" "$tmp/pi" "PP=2 interleaved V=2"
vals "$tmp/l2" "$tmp/d2" "DP=2 x PP=2"
vals "$tmp/l4" "$tmp/ps" "PP=2 x TP=2 --sp"
# seqmb LOG / msgfl LOG: the MB of LayerNorm and residual activations / the floats per stage
# message that a run's start lines print
seqmb() { sed -n 's/.*activations per rank.* regions \([0-9.]*\) MB.*/\1/p' "$1"; }
msgfl() { sed -n 's/.*stage messages: \([0-9]*\) floats.*/\1/p' "$1"; }
a=$(seqmb "$tmp/pt.log") b=$(seqmb "$tmp/ps.log")
ma=$(msgfl "$tmp/pt.log") mb=$(msgfl "$tmp/ps.log")
awk -v a="$a" -v b="$b" 'BEGIN {r = a / (2 * b); exit !(b > 0 && r > 0.99 && r < 1.01)}' &&
    [ "${mb:-0}" -gt 0 ] && [ "$ma" = $((mb * 2)) ]
point $? "PP=2 x TP=2 --sp holds 1/2 of PP=2 x TP=2's LayerNorm and residual activations ($b of \
$a MB) and sends 1/2 of its floats per stage message ($mb of $ma)"
grep -h "activations per rank\|stage messages" "$tmp/ps.log" | sed 's/^/# /'
grep -q "PP groups: {0,2} {1,3}" "$tmp/d2.log" && grep -q "DP groups: {0,1} {2,3}" "$tmp/d2.log" &&
    grep -q "embedding groups: {0,2} {1,3}" "$tmp/d2.log"
point $? "DP=2 x PP=2 prints its mesh (PP outermost) with the embedding groups"
grep "groups:" "$tmp/d2.log" | sed 's/^/# /'
# bubble LOG FORMULA LABEL: 10 step lines end with "bubble B (formula FORMULA)", B >= 0, and the
# run ends with the mean
bubble() {
    _k=$(grep -Ec "\| bubble [0-9][0-9.]* \(formula $2\)( \| val loss [0-9.]*)?\$" "$1")
    [ "$_k" = 10 ] && grep -q "^.*bubble, mean of steps 2-10: [0-9.]* measured, $2 formula" "$1"
    point $? "$3: each step prints its measured bubble next to the formula $2"
    grep -m1 "bubble, mean" "$1" | sed 's/^/# /'
}
bubble "$tmp/p2.log" 0.250 "PP=2 M=4 1f1b"
bubble "$tmp/pi.log" 0.125 "PP=2 V=2 M=4 interleaved"

# 3. refused layouts
refused 2 "4 layers cannot be split evenly" "--layers 4 --pp 2 --virtual 4 (8 stages)" --pp 2 --virtual 4 \
    --pp-schedule interleaved --micro 2
refused 4 "1f1b needs" "--pp 4 --micro 2 with 1f1b" --pp 4 --micro 2
refused 2 "not gpipe, 1f1b or interleaved" "--pp-schedule zigzag" --pp 2 --pp-schedule zigzag
step0 2 r4 "PP=2 ZeRO 3 M=4 (one DP rank)" --batch 2 --pp 2 --micro 4 --zero 3
refused 2 "needs a tensor-parallel group: --tp 1 must be > 1" "--pp 2 --sp without --tp" --pp 2 \
    --sp
refused 4 "T = 31 is not a multiple of the tensor-parallel size 2" \
    "--pp 2 --tp 2 --sp --context 31" --pp 2 --tp 2 --sp --context 31
refused 1 "are pipeline flags" "--micro 4 without --pp" --micro 4
mkdir "$tmp/used" && printf "step,loss\n1,5.5\n" >"$tmp/used/loss.csv" # (a row: a header alone holds no results)
launch 2 "$tmp/used.log" --pp 2 --out "$tmp/used"
[ $? != 0 ] && grep -q "holds another run's results" "$tmp/used.log" && ! grep -q "step " "$tmp/used.log"
point $? "a new --pp 2 run into another run's --out is refused"

# 4. checkpoints hold the single-rank layout
# resumed6 A B LABEL: steps 6-10 of the resumed run B equal the uninterrupted run A's within 1e-5
resumed6() {
    resumed "$1" "$2"
    report $? "$3: steps 6-10 within 1e-5 of the uninterrupted run" "$2.log"
}
run 2 "$tmp/c" --batch 2 --pp 2 --micro 4 --steps 10 --ckpt-every 5 --quiet
mkdir "$tmp/c1" && cp -r "$tmp/c/ckpt" "$tmp/c1/" &&
    run 1 "$tmp/c1" --steps 10 --resume "$tmp/c1/ckpt/step_00000005" --quiet
resumed6 "$tmp/c" "$tmp/c1" "written at PP=2, resumed at one rank"
run 1 "$tmp/e" --batch 2 --accum 4 --steps 10 --ckpt-every 5 --quiet
mkdir "$tmp/e1" && cp -r "$tmp/e/ckpt" "$tmp/e1/" &&
    run 4 "$tmp/e1" --pp 2 --dp 2 --micro 4 --steps 10 --resume "$tmp/e1/ckpt/step_00000005"
resumed6 "$tmp/e" "$tmp/e1" "written at one rank, resumed at DP=2 x PP=2"
mkdir "$tmp/pt1" && cp -r "$tmp/pt/ckpt" "$tmp/pt1/" &&
    run 1 "$tmp/pt1" --steps 10 --resume "$tmp/pt1/ckpt/step_00000005" --quiet
resumed6 "$tmp/pt" "$tmp/pt1" "written at PP=2 x TP=2, resumed at one rank"
mkdir "$tmp/e2" && cp -r "$tmp/e/ckpt" "$tmp/e2/" &&
    run 4 "$tmp/e2" --pp 2 --tp 2 --micro 4 --steps 10 --resume "$tmp/e2/ckpt/step_00000005"
resumed6 "$tmp/e" "$tmp/e2" "written at one rank, resumed at PP=2 x TP=2"
