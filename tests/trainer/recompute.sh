#!/bin/sh
# tests/trainer/recompute.sh — tempo-train --recompute selective|full on real ranks (tempo-run),
# each layout against the same layout's --recompute none:
#   1. step 0: the --dump file (loss and full gradient) is byte for byte none's, and 10 steps give
#      the same loss.csv losses, at 1 rank, DP=2, TP=2, TP=2 --sp, DP=2 ZeRO 3 and PP=2 1f1b
#      (recomputation runs the same kernels on the same inputs: bitwise, not merely close);
#   2. the activation memory the run prints drops: none > selective > full, in every layout;
#   3. --recompute with an unknown mode is refused with a clear error.
# Model: 2 layers, 4 heads, 32 channels, context 32, 8 sequences per step.
# Knobs: RECOMPUTE_KEEP=1 keeps the temporary directory, RECOMPUTE_TIMEOUT the hang guard per
# launch.

srcdir=${top_srcdir:-$(dirname "$0")/../..}
. "$srcdir/tests/trainer/lib.sh"
prepare RECOMPUTE README.md include/tempo.h
TEMPO_TIMEOUT=30
export TEMPO_TIMEOUT

MODEL="--data $tmp/corpus.txt --layers 2 --heads 4 --channels 32 --context 32 --val-every 0 \
--sample 0 --quiet --warmup 3 --lr 3e-3"
# run N OUT [args...]: tempo-train on N ranks into OUT (log OUT.log)
run() {
    _n=$1 _out=$2
    shift 2
    launch "$_n" "$_out.log" --out "$_out" "$@"
}
# actmb LOG: the activation MB per rank the run printed for its recompute mode
actmb() {
    sed -n 's/^\(\[0\] \)\{0,1\}activations per rank[^:]*: \([0-9.]*\) MB (recompute .*/\2/p' "$1"
}

LAYOUTS="1rank:1:--batch 8
dp2:2:--batch 4 --dp 2
tp2:2:--batch 8 --tp 2
tp2sp:2:--batch 8 --tp 2 --sp
dp2zero3:2:--batch 4 --dp 2 --zero 3
pp2:2:--batch 4 --pp 2 --pp-schedule 1f1b --micro 2"
echo "1..$((6 * 6 + 1))"

echo "$LAYOUTS" | while IFS=: read -r name n args; do
    for mode in none selective full; do
        o="$tmp/$name-$mode"
        run "$n" "$o" $args --recompute $mode --dump "$o.bin" &&
            run "$n" "$o.steps" $args --recompute $mode --steps 10
        rc=$?
        if [ $mode = none ]; then
            point $rc "$name none: step-0 dump and 10 steps"
            [ $rc = 0 ] || { diag "$o.log"; diag "$o.steps.log"; }
            continue
        fi
        [ $rc = 0 ] && cmp -s "$tmp/$name-none.bin" "$o.bin"
        point $? "$name $mode: step-0 loss and full gradient bitwise those of none"
        [ $rc = 0 ] || { diag "$o.log"; diag "$o.steps.log"; }
        losses "$tmp/$name-none.steps" >"$o.none.l"
        losses "$o.steps" >"$o.l"
        [ "$(wc -l <"$o.l")" = 10 ] && cmp -s "$o.none.l" "$o.l"
        point $? "$name $mode: 10 steps, the same losses as none ($(tail -n 1 "$o.l"))"
    done
    a0=$(actmb "$tmp/$name-none.steps.log") a1=$(actmb "$tmp/$name-selective.steps.log")
    a2=$(actmb "$tmp/$name-full.steps.log")
    echo "# $name: activations per rank: none $a0 MB, selective $a1 MB, full $a2 MB"
    awk -v a="$a0" -v b="$a1" -v c="$a2" 'BEGIN {exit !(a != "" && c != "" && a + 0 > b + 0 &&
        b + 0 > c + 0)}'
    point $? "$name: printed activation memory none > selective > full"
done > "$tmp/points"
# the loop ran in a subshell: renumber its points
awk '/^(not )?ok /{n++; sub(/ok [0-9]+ /, "ok " n " ")} {print}' "$tmp/points"
num=$(grep -c '^\(not \)\?ok ' "$tmp/points")

"$TT" $MODEL --out "$tmp/bad" --recompute some >"$tmp/bad.log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "recompute some: use none, selective or full" "$tmp/bad.log"
point $? "--recompute some refused (exit $rc): $(head -n 1 "$tmp/bad.log")"
