#!/bin/sh
# tests/trainer/sp.sh — tempo-train with sequence parallelism (--sp, over the --tp group) on real
# ranks (tempo-run), each layout against the single-rank run of the same global batch:
#   1. step 0: the loss and the full gradient of TP=2 --sp, TP=4 --sp and DP=2 x TP=2 --sp (ZeRO 0
#      and 1) equal one rank's within 1e-5 (tests/trainer/dumpcmp);
#   2. 10 steps at TP=2, TP=4 and DP=2 x TP=2 with --sp track the single-rank losses within 1e-4;
#   3. the activation memory of the LayerNorm and residual regions (the run's "activations" line,
#      the bytes the model allocated) drops by the TP size: 1/2 at TP=2, 1/4 at TP=4 (within 1 %,
#      the printed rounding), while TP alone keeps all of it;
#   4. --sp without --tp > 1, and a --context that --tp does not divide, are refused before any
#      work with a clear error.
# Model: 2 layers, 4 heads, 32 channels, context 32, 8 sequences per global batch.
# Knobs: TRAINER_KEEP=1 keeps the temporary directory, TRAINER_TIMEOUT the hang guard per launch.

TR="${top_builddir:-.}/tools/tempo-run"
TT="${top_builddir:-.}/trainer/tempo-train"
CMP="${top_builddir:-.}/tests/trainer/dumpcmp"
srcdir=${top_srcdir:-$(dirname "$0")/../..}
. "$srcdir/tests/mr/launch.sh"
[ -x "$CMP" ] || { echo "Bail out! $CMP not found (build it first: make check)"; exit 1; }
mr_prepare TRAINER "$TT" # checks, clears TEMPO_*, TEMPO_TIMEOUT=60, $tmp, $guard
OMP_NUM_THREADS=1
export OMP_NUM_THREADS
cat "$srcdir/README.md" "$srcdir/include/tempo.h" >"$tmp/corpus.txt"

MODEL="--data $tmp/corpus.txt --layers 2 --heads 4 --channels 32 --context 32 --val-every 0 \
--sample 0 --quiet --warmup 3 --lr 3e-3"
num=0
point() { # point STATUS DESCRIPTION: 0 = ok
    num=$((num + 1))
    if [ "$1" = 0 ]; then echo "ok $num - $2"; else echo "not ok $num - $2"; fi
}
# run DP TP OUT [args...]: tempo-train on DP x TP ranks, 8/DP sequences per DP rank
run() {
    _d=$1 _t=$2 _out=$3
    shift 3
    "$TR" -n $((_d * _t)) --timeout "$guard" "$TT" $MODEL --batch $((8 / _d)) --dp "$_d" \
        --tp "$_t" --out "$_out" "$@" >"$_out.log" 2>&1
}
losses() { tail -n +2 "$1/loss.csv" | cut -d, -f2; }
# seqmb LOG: the MB of LayerNorm and residual activations the run printed
seqmb() { sed -n 's/.*of which LayerNorm and residual regions \([0-9.]*\) MB.*/\1/p' "$1"; }

echo "1..14"

# 1. step 0 against one rank
run 1 1 "$tmp/ref" --dump "$tmp/ref.bin"
point $? "single-rank step-0 dump"
for l in "1 2 0" "1 4 0" "2 2 0" "2 2 1"; do
    set -- $l
    o="$tmp/s$1$2$3"
    run "$1" "$2" "$o" --zero "$3" --sp --dump "$o.bin" && res=$("$CMP" "$tmp/ref.bin" "$o.bin" 1e-5)
    rc=$?
    point $rc "DP=$1 x TP=$2 --sp ZeRO $3: step-0 loss and full gradient equal one rank's within 1e-5"
    echo "# $res"
    [ $rc = 0 ] || tail -n 5 "$o.log" | sed 's/^/#   /'
done

# 2. 10 steps
run 1 1 "$tmp/l1" --steps 10
point $? "single-rank 10 steps"
losses "$tmp/l1" >"$tmp/l1.l"
for l in "1 2" "1 4" "2 2"; do
    set -- $l
    o="$tmp/l$1$2"
    run "$1" "$2" "$o" --steps 10 --sp
    losses "$o" >"$o.l"
    w=$(paste -d' ' "$tmp/l1.l" "$o.l" | awk '{e = ($1 - $2) / $1; if (e < 0) e = -e;
        if (e > w) w = e} END {if (NR != 10 || NF != 2) print "missing"; else printf "%.3g", w}')
    awk -v w="$w" 'BEGIN {exit !(w != "missing" && w + 0 <= 1e-4)}'
    point $? "DP=$1 x TP=$2 --sp: 10 steps track one rank's losses within 1e-4 (worst $w)"
    [ "$w" != missing ] || tail -n 3 "$o.log" | sed 's/^/#   /'
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
# refused N MESSAGE LABEL [args]: N ranks exit non-zero before training, saying MESSAGE
refused() {
    _n=$1 _msg=$2 _lbl=$3
    shift 3
    "$TR" -n "$_n" --timeout "$guard" "$TT" $MODEL --out "$tmp/bad" "$@" >"$tmp/bad.log" 2>&1
    _rc=$?
    [ $_rc != 0 ] && grep -q "$_msg" "$tmp/bad.log" && ! grep -q "step " "$tmp/bad.log" &&
        [ ! -e "$tmp/bad/loss.csv" ]
    point $? "$_lbl is refused before any work"
    grep -m1 "$_msg" "$tmp/bad.log" | sed 's/^/# /'
}
refused 2 "needs a tensor-parallel group: --tp 1 must be > 1" "--sp without --tp" --sp
refused 4 "T = 30 is not a multiple of the tensor-parallel size 4" "--sp --tp 4 --context 30" \
    --sp --tp 4 --context 30
