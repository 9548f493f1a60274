#!/bin/sh
# tests/trainer/hybrid.sh — the hybrid layouts of issue 17 that the per-dimension scripts (tp.sh,
# sp.sh, pp.sh, zero3.sh, recompute.sh, layouts.sh) do not cover, on real ranks (tempo-run), each
# against the single-rank run of the same global batch (8 sequences: --batch 4 --accum 2 at one
# rank is the pipeline's 2 micro-batches of 4):
#   1. step 0: the loss and the full gradient (tests/trainer/dumpcmp, within 1e-5) of
#      DP=2 x TP=2 x PP=2 (8 ranks, one launch of one step; its time is printed, not asserted);
#      DP=2 x TP=2 with 2 accumulated micro-batches and --recompute selective, and with --recompute
#      full; TP=2 x PP=2 with --recompute full (its 2 micro-batches are the accumulation);
#      PP=4 interleaved V=2 M=4 (8 layers), the one PP=4 schedule pp.sh leaves out;
#   2. two 5-step runs of TP=2 x PP=2 give bitwise the same losses (the CSV holds them exactly);
#   3. everything in one run: DP=2 x TP=2 x PP=2 1f1b M=2 with ZeRO 1, --sched tic and
#      --compress alq:bits=3,min=4096 (the tiny model's gradient groups are below the compressor's
#      default 32 KiB minimum) for 6 steps: the DP line names the policy and the compressor, the
#      loss falls, and the losses differ from the exact run of the same layout (the compressor
#      acted); its first loss equals the exact run's (nothing is compressed before step 0's
#      update) and the validation losses of the two runs agree within 5 % (TP and PP traffic stays
#      exact: a quantized TP or PP message would derail the model, not perturb it).
# Not here (covered elsewhere): TP=4 (tp.sh); PP=2 and PP=4 with 1f1b and gpipe, interleaved PP=2,
# DP=2 x PP=2 and their 10 steps (pp.sh); each recompute mode bitwise against none per layout
# (recompute.sh); ZeRO-3's prefetch order on the timeline (zero3.sh); the mpi backend
# (mpi_layouts.sh).
# Model: 4 layers (8 for PP=4 x V=2), 2 heads, 32 channels, context 32.
# Knobs: TRAINER_KEEP=1 keeps the temporary directory, TRAINER_TIMEOUT the hang guard per launch.

srcdir=${top_srcdir:-$(dirname "$0")/../..}
. "$srcdir/tests/trainer/lib.sh"
prepare --dumpcmp TRAINER README.md include/tempo.h

MODEL="--data $tmp/corpus.txt --layers 4 --heads 2 --channels 32 --context 32 --val-every 0 \
--sample 0 --quiet --warmup 3 --lr 3e-3"

echo "1..11"

# 1. step 0 against one rank
run 1 "$tmp/ref" --batch 4 --accum 2 --dump "$tmp/ref.bin"
point $? "single-rank step-0 dump, 2 micro-batches of 4"
t0=$(date +%s)
step0 8 ref "DP=2 x TP=2 x PP=2 1f1b M=2 (8 ranks)" --dp 2 --tp 2 --pp 2 --batch 2 --micro 2 \
    --steps 1
echo "# the 8-rank launch took $(($(date +%s) - t0)) s"
for mode in selective full; do
    step0 4 ref "DP=2 x TP=2, 2 accumulated micro-batches, --recompute $mode" --dp 2 --tp 2 \
        --batch 2 --accum 2 --recompute "$mode"
done
step0 4 ref "TP=2 x PP=2 1f1b M=2 --recompute full" --tp 2 --pp 2 --batch 4 --micro 2 \
    --recompute full
run 1 "$tmp/ref8" --layers 8 --batch 2 --accum 4 --dump "$tmp/ref8.bin"
point $? "single-rank step-0 dump, 8 layers, 4 micro-batches of 2"
step0 4 ref8 "PP=4 interleaved V=2 M=4, 8 layers" --layers 8 --pp 4 --virtual 2 \
    --pp-schedule interleaved --batch 2 --micro 4

# 2. determinism of a hybrid layout
run 4 "$tmp/b1" --tp 2 --pp 2 --batch 4 --micro 2 --steps 5
run 4 "$tmp/b2" --tp 2 --pp 2 --batch 4 --micro 2 --steps 5
losses "$tmp/b1" >"$tmp/b1.l" && losses "$tmp/b2" >"$tmp/b2.l" && cmp -s "$tmp/b1.l" "$tmp/b2.l" &&
    [ "$(wc -l <"$tmp/b1.l")" = 5 ]
point $? "two TP=2 x PP=2 runs give bitwise the same 5 losses" "$tmp/b2.log"

# 3. DP x TP x PP with ZeRO 1, a scheduling policy and compression on the DP gradients
ALL="--dp 2 --tp 2 --pp 2 --batch 2 --micro 2 --zero 1 --steps 6 --val-every 6"
run 8 "$tmp/e0" $ALL
run 8 "$tmp/e1" $ALL --sched tic --compress alq:bits=3,min=4096
grep -q "DP gradients: tempo: .*policy tic, alq:bits=3" "$tmp/e1.log"
point $? "DP=2 x TP=2 x PP=2 ZeRO 1 --sched tic --compress alq:bits=3: the DP line names both" \
    "$tmp/e1.log"
grep -m1 "DP gradients" "$tmp/e1.log" | cut -c 1-120 | sed 's/^/# /'
losses "$tmp/e0" >"$tmp/e0.l" && losses "$tmp/e1" >"$tmp/e1.l"
_f=$(head -n 1 "$tmp/e1.l") _e=$(tail -n 1 "$tmp/e1.l")
[ "$(wc -l <"$tmp/e1.l")" = 6 ] && [ "$_f" = "$(head -n 1 "$tmp/e0.l")" ] &&
    awk -v f="$_f" -v e="$_e" 'BEGIN {exit !(e < 0.95 * f)}' && ! cmp -s "$tmp/e0.l" "$tmp/e1.l"
point $? "compressed DP=2 x TP=2 x PP=2: same first loss as exact, the loss falls ($_f -> $_e), \
the losses differ from the exact run's ($(tail -n 1 "$tmp/e0.l"))" "$tmp/e1.log"
_v0=$(col "$tmp/e0/loss.csv" 3 | tail -n 1) _v1=$(col "$tmp/e1/loss.csv" 3 | tail -n 1)
awk -v a="$_v0" -v b="$_v1" 'BEGIN {d = (a - b) / a; if (d < 0) d = -d; exit !(a > 0 && d <= 0.05)}'
point $? "compressed DP=2 x TP=2 x PP=2: validation loss $_v1 within 5 % of the exact run's $_v0" \
    "$tmp/e1.log"
