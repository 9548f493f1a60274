#!/bin/sh
# tests/trainer/reshard.sh — one training run carried through a chain of layouts by its
# checkpoints (issue 17: "a checkpoint written at one (D, T, P, ZeRO) loads at any other valid
# one"), on real ranks (tempo-run). Checkpoints hold the single-rank layout, so each link gathers
# on save and slices on load through a different path:
#   DP=2 x TP=2 ZeRO 1 (steps 1-3) -> PP=4 1f1b (4-6) -> DP=2 x TP=2 ZeRO 3 (7-9) -> DP=4 ZeRO 3
#   (10-12) -> one rank (13-15),
# each link resuming the previous one's last checkpoint (--resume latest in one --out, whose
# loss.csv then holds the 15 steps of the chain). Every link's losses equal the uninterrupted
# single-rank run's within 1e-6 (relative; the reduction order changes with the layout, so
# bitwise is not to be had; the worst measured here was 5.1e-8, about one float32 rounding of
# the loss: a margin of 20). The learning rate is constant after the warm-up (--min-lr-frac 1),
# so that each link may stop at its own --steps.
# Model: 4 layers (PP=4), 4 heads (TP=2), 32 channels, context 32, 8 sequences per global batch.
# Knobs: TRAINER_KEEP=1 keeps the temporary directory, TRAINER_TIMEOUT the hang guard per launch.

srcdir=${top_srcdir:-$(dirname "$0")/../..}
. "$srcdir/tests/trainer/lib.sh"
prepare TRAINER README.md include/tempo.h

MODEL="--data $tmp/corpus.txt --layers 4 --heads 4 --channels 32 --context 32 --val-every 0 \
--sample 0 --quiet --warmup 3 --lr 3e-3 --min-lr-frac 1"
TOL=1e-6

echo "1..6"

launch 1 "$tmp/ref.log" --batch 8 --steps 15 --out "$tmp/ref"
point $? "single rank: 15 uninterrupted steps" "$tmp/ref.log"
losses "$tmp/ref" >"$tmp/ref.l"

# link N RANKS LABEL [ARGS...]: the chain's N-th link (steps 3N-2 .. 3N) on RANKS ranks, resumed
# from the chain's latest checkpoint (the first link starts the run), against the reference
link() {
    _k=$1 _r=$2 _lbl=$3
    shift 3
    _from=""
    [ "$_k" = 1 ] || _from="--resume latest"
    # shellcheck disable=SC2086 # $_from is empty or two words
    launch "$_r" "$tmp/l$_k.log" --out "$tmp/chain" --steps $((3 * _k)) --ckpt-every 3 $_from "$@"
    losses "$tmp/chain" | sed -n "$((3 * _k - 2)),$((3 * _k))p" >"$tmp/got$_k"
    sed -n "$((3 * _k - 2)),$((3 * _k))p" "$tmp/ref.l" >"$tmp/want$_k"
    compare "$tmp/want$_k" "$tmp/got$_k" 3 "$TOL"
    report $? "$_lbl: steps $((3 * _k - 2))-$((3 * _k)) equal the uninterrupted run's within $TOL" \
        "$tmp/l$_k.log"
}
link 1 4 "DP=2 x TP=2 ZeRO 1 (new run)" --dp 2 --tp 2 --zero 1 --batch 4
link 2 4 "PP=4 1f1b, from DP=2 x TP=2 ZeRO 1" --pp 4 --micro 4 --batch 2
link 3 4 "DP=2 x TP=2 ZeRO 3, from PP=4" --dp 2 --tp 2 --zero 3 --batch 4
link 4 4 "DP=4 ZeRO 3, from DP=2 x TP=2 ZeRO 3" --zero 3 --batch 2
link 5 1 "one rank, from DP=4 ZeRO 3" --batch 8
