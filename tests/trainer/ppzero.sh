#!/bin/sh
# tests/trainer/ppzero.sh — ZeRO and the DP features on a pipeline-parallel mesh (tempo-train
# --pp with --zero 1/2/3, --compress, --sched) on real ranks (tempo-run), against the single-rank
# run of the same global batch (--batch 4 --accum 2 at one rank = DP 2 x --batch 2 x --micro 2):
#   1. step 0: the loss and the full gradient (each DP rank's synchronized slices all-gathered,
#      the stages and TP shards placed) of DP=2 x PP=2 with ZeRO 1 (1f1b), ZeRO 2 (interleaved,
#      V=2), ZeRO 3 (1f1b) and DP=2 x TP=2 x PP=2 with ZeRO 1 and with ZeRO 3 equal one rank's
#      within 1e-5: a slice reduced over the wrong ranks, a wte slice summed with another one over
#      the embedding group, a slice not gathered or (ZeRO 3) a chunk run on parameters not
#      gathered from every DP rank's shard fails here;
#   2. 10 steps of DP=2 x PP=2 ZeRO 1 track the single-rank losses within 1e-4 (clipping on: the
#      norm sums the slices over DP, wte once), and its checkpoint at step 5 (the single-rank
#      layout: the AdamW slices gathered) resumes at one rank with steps 6-10 within 1e-5; the
#      same for ZeRO 3 (its parameter shard updated and gathered again each step; the checkpoint
#      gathers it), whose checkpoint also resumes at DP=2 x PP=2 ZeRO 3 (the load slices the
#      parameters into the shard) within 1e-5, and whose ZeRO line says how it gathers and whose
#      memory line shows the shard: half of ZeRO 1's parameters at DP=2;
#   3. compression acts on the DP gradients only: PP=2 x TP=2 (one DP rank: nothing to
#      compress) gives bitwise the same losses with --compress alq:bits=3 as without, and DP=2
#      x PP=2 ZeRO 1 with --compress alq:bits=3 --sched fifo names the compressor and the policy
#      in its DP line, trains (the loss of step 10 below 0.95 x step 1's) and differs from the
#      exact run (the compressor did act).
# Refusals (--sp with --pp) are in pp.sh. Model: 4 layers, 4 heads, 32 channels, context 32, 8
# sequences per global batch. 17 launches, about 14 s on the 2-core machine.
# Knobs: TRAINER_KEEP=1 keeps the temporary directory, TRAINER_TIMEOUT the hang guard per launch.

srcdir=${top_srcdir:-$(dirname "$0")/../..}
. "$srcdir/tests/trainer/lib.sh"
prepare --dumpcmp TRAINER README.md include/tempo.h

MODEL="--data $tmp/corpus.txt --layers 4 --heads 4 --channels 32 --context 32 --val-every 0 \
--sample 0 --warmup 3 --lr 3e-3"
DP2PP2="--batch 2 --pp 2 --dp 2 --micro 2"

echo "1..16"

# 1. step 0 against one rank
run 1 "$tmp/r2" --batch 4 --accum 2 --dump "$tmp/r2.bin"
point $? "single-rank step-0 dump, 2 micro-batches of 4"
step0 4 r2 "DP=2 x PP=2 ZeRO 1" $DP2PP2 --zero 1
step0 4 r2 "DP=2 x PP=2 ZeRO 2 interleaved V=2" $DP2PP2 --zero 2 --virtual 2 \
    --pp-schedule interleaved
step0 8 r2 "DP=2 x TP=2 x PP=2 ZeRO 1" $DP2PP2 --tp 2 --zero 1
step0 4 r2 "DP=2 x PP=2 ZeRO 3" $DP2PP2 --zero 3
step0 8 r2 "DP=2 x TP=2 x PP=2 ZeRO 3" $DP2PP2 --tp 2 --zero 3 --steps 1

# 2. 10 steps, and the checkpoint of step 5 resumed at one rank
run 1 "$tmp/l2" --batch 4 --accum 2 --steps 10 --quiet
point $? "single-rank 10 steps, 2 micro-batches of 4"
run 4 "$tmp/z1" $DP2PP2 --zero 1 --steps 10 --ckpt-every 5
track "$tmp/l2" "$tmp/z1" 10 1e-4 "DP=2 x PP=2 ZeRO 1: 10 steps track one rank's losses within 1e-4"
mkdir "$tmp/z1r" && cp -r "$tmp/z1/ckpt" "$tmp/z1r/" &&
    run 1 "$tmp/z1r" --steps 10 --resume "$tmp/z1r/ckpt/step_00000005" --quiet
resumed "$tmp/z1" "$tmp/z1r"
report $? "written at DP=2 x PP=2 ZeRO 1, resumed at one rank: steps 6-10 within 1e-5 of the \
uninterrupted run" "$tmp/z1r.log"
run 4 "$tmp/z3" $DP2PP2 --zero 3 --steps 10 --ckpt-every 5
track "$tmp/l2" "$tmp/z3" 10 1e-4 "DP=2 x PP=2 ZeRO 3: 10 steps track one rank's losses within 1e-4"
# resume3 N LABEL [args]: z3's step-5 checkpoint resumed on N ranks, steps 6-10 against z3's
resume3() {
    _n=$1 _lbl=$2
    shift 2
    _o="$tmp/z3r$num"
    mkdir "$_o" && cp -r "$tmp/z3/ckpt" "$_o/" &&
        run "$_n" "$_o" --steps 10 --resume "$_o/ckpt/step_00000005" --quiet "$@"
    resumed "$tmp/z3" "$_o"
    report $? "written at DP=2 x PP=2 ZeRO 3, resumed at $_lbl: steps 6-10 within 1e-5 of the \
uninterrupted run" "$_o.log"
}
resume3 1 "one rank"
resume3 4 "DP=2 x PP=2 ZeRO 3" $DP2PP2 --zero 3
# the parameters of pp rank 0's chunk (ZeRO 1) and its shard between steps (ZeRO 3)
_m='s/^\(\[0\] \)\{0,1\}memory per rank (pp rank 0): parameters \([0-9.]*\) MB'
_p1=$(sed -n "$_m, .*/\\2/p" "$tmp/z1.log")
_p3=$(sed -n "$_m between steps .*/\\2/p" "$tmp/z3.log")
grep -q "ZeRO 3 over 2 DP ranks: each chunk's parameters all-gathered whole once per step" \
    "$tmp/z3.log" && awk -v a="$_p1" -v b="$_p3" 'BEGIN {d = a - 2 * b; if (d < 0) d = -d;
    exit !(a > 0 && d <= 0.01)}'
point $? "DP=2 x PP=2 ZeRO 3 says how it gathers, and its parameter shard ($_p3 MB) is half of \
ZeRO 1's chunk ($_p1 MB)" "$tmp/z3.log"
grep -m2 "ZeRO 3 over\|memory per rank" "$tmp/z3.log" | cut -c 1-160 | sed 's/^/# /'

# 3. compression on the DP gradients only
run 4 "$tmp/t0" --batch 2 --pp 2 --tp 2 --micro 4 --steps 3 --quiet
run 4 "$tmp/t1" --batch 2 --pp 2 --tp 2 --micro 4 --steps 3 --quiet --compress alq:bits=3
losses "$tmp/t0" >"$tmp/t0.l" && losses "$tmp/t1" >"$tmp/t1.l" && [ "$(wc -l <"$tmp/t0.l")" = 3 ] &&
    cmp -s "$tmp/t0.l" "$tmp/t1.l"
point $? "PP=2 x TP=2 (one DP rank): --compress alq:bits=3 leaves the 3 losses bitwise unchanged" \
    "$tmp/t1.log"
paste -d' ' "$tmp/t0.l" "$tmp/t1.l" | tr '\n' ';' | sed 's/^/# without, with: /;s/$/\n/'
run 4 "$tmp/q" $DP2PP2 --zero 1 --steps 10 --compress alq:bits=3 --sched fifo
grep -q "DP gradients: tempo: .*policy fifo, alq:bits=3" "$tmp/q.log"
point $? "DP=2 x PP=2 ZeRO 1 --compress alq:bits=3 --sched fifo: the DP line names both" \
    "$tmp/q.log"
grep -m1 "DP gradients" "$tmp/q.log" | cut -c 1-120 | sed 's/^/# /'
losses "$tmp/q" >"$tmp/q.l"
_f=$(head -n 1 "$tmp/q.l") _e=$(tail -n 1 "$tmp/q.l")
[ "$(wc -l <"$tmp/q.l")" = 10 ] && awk -v f="$_f" -v e="$_e" 'BEGIN {exit !(e < 0.95 * f)}' &&
    ! cmp -s "$tmp/q.l" "$tmp/z1.l"
point $? "DP=2 x PP=2 ZeRO 1 compressed: the loss falls ($_f -> $_e) and differs from the exact \
run's ($(tail -n 1 "$tmp/z1.l"))" "$tmp/q.log"
