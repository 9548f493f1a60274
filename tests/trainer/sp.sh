#!/bin/sh
# tests/trainer/sp.sh — tempo-train with sequence parallelism (--sp, over the --tp group) on real
# ranks (tempo-run), each layout against the single-rank run of the same global batch:
#   1. step 0: the loss and the full gradient of TP=2 --sp, TP=4 --sp and DP=2 x TP=2 --sp (ZeRO 0
#      and 1) equal one rank's within 1e-5 (tests/trainer/dumpcmp);
#   2. 20 steps at TP=2, TP=4 and DP=2 x TP=2 with --sp track the single-rank losses within 1e-4;
#   3. the activation memory of the LayerNorm and residual regions (the run's "activations" line,
#      the bytes the model allocated) drops by the TP size: 1/2 at TP=2, 1/4 at TP=4 (within 1 %,
#      the printed rounding), while TP alone keeps all of it;
#   4. --sp without --tp > 1, and a --context that --tp does not divide, are refused before any
#      work with a clear error.
# Model: 2 layers, 4 heads, 32 channels, context 32, 8 sequences per global batch.
# Knobs: TRAINER_KEEP=1 keeps the temporary directory, TRAINER_TIMEOUT the hang guard per launch.

srcdir=${top_srcdir:-$(dirname "$0")/../..}
. "$srcdir/tests/trainer/lib.sh"
prepare --dumpcmp TRAINER README.md include/tempo.h

MODEL="--data $tmp/corpus.txt --layers 2 --heads 4 --channels 32 --context 32 --val-every 0 \
--sample 0 --quiet --warmup 3 --lr 3e-3"
# run DP TP OUT [args...]: tempo-train on DP x TP ranks, 8/DP sequences per DP rank
run() {
    _d=$1 _t=$2 _out=$3
    shift 3
    launch $((_d * _t)) "$_out.log" --batch $((8 / _d)) --dp "$_d" --tp "$_t" --out "$_out" "$@"
}
# seqmb LOG: the MB of LayerNorm and residual activations the run printed
seqmb() { sed -n 's/.*of which LayerNorm and residual regions \([0-9.]*\) MB.*/\1/p' "$1"; }

echo "1..14"

# 1. step 0 against one rank
run 1 1 "$tmp/ref" --dump "$tmp/ref.bin"
point $? "single-rank step-0 dump"
for l in "1 2 0" "1 4 0" "2 2 0" "2 2 1"; do
    set -- $l
    o="$tmp/s$1$2$3"
    run "$1" "$2" "$o" --zero "$3" --sp --dump "$o.bin"
    dumped $? "$tmp/ref.bin" "$o.bin" \
        "DP=$1 x TP=$2 --sp ZeRO $3: step-0 loss and full gradient equal one rank's within 1e-5" \
        "$o.log"
done

# 2. 20 steps
run 1 1 "$tmp/l1" --steps 20
point $? "single-rank 20 steps"
for l in "1 2" "1 4" "2 2"; do
    set -- $l
    run "$1" "$2" "$tmp/l$1$2" --steps 20 --sp
    track "$tmp/l1" "$tmp/l$1$2" 20 1e-4 "DP=$1 x TP=$2 --sp: 20 steps track one rank's losses within 1e-4"
done

# 3. activation memory of the sharded regions at TP = 1, 2, 4 (from the step-0 runs above)
run 1 2 "$tmp/tp2" --steps 0
m1=$(seqmb "$tmp/ref.log") m2=$(seqmb "$tmp/s120.log") m4=$(seqmb "$tmp/s140.log")
mt=$(seqmb "$tmp/tp2.log")
echo "# LayerNorm and residual activations per rank: TP=1 $m1 MB, TP=2 --sp $m2 MB, TP=4 --sp $m4 MB, TP=2 without --sp $mt MB"
grep -h "activations per rank" "$tmp/ref.log" "$tmp/s120.log" "$tmp/s140.log" | sed 's/^/# /'
ratio() { awk -v a="$1" -v b="$2" -v k="$3" 'BEGIN {r = a / (b * k); exit !(a > 0 && r > 0.99 && r < 1.01)}'; }
ratio "$m1" "$m2" 2
point $? "TP=2 --sp holds 1/2 of one rank's LayerNorm and residual activations ($m2 of $m1 MB)"
ratio "$m1" "$m4" 4
point $? "TP=4 --sp holds 1/4 of them ($m4 of $m1 MB)"
ratio "$m1" "$mt" 1
point $? "TP=2 without --sp holds all of them ($mt MB)"

# 4. refused layouts
refused 2 "needs a tensor-parallel group: --tp 1 must be > 1" "--sp without --tp" --sp
refused 4 "T = 30 is not a multiple of the tensor-parallel size 4" "--sp --tp 4 --context 30" \
    --sp --tp 4 --context 30
