#!/bin/sh
# tests/trainer/runs.sh — what tempo-train does with the runs in its --out folder and across
# layouts (issue 16, items 1, 3, 4 and 5), on real ranks (tempo-run):
#   1. nothing lost: a new run into a folder holding another run's results is refused before any
#      work, saying how to go on, and changes nothing; --overwrite replaces the old run whole (its
#      loss.csv and every checkpoint: none of them is left beside the new run's); a resume from an
#      earlier checkpoint leaves each step once in loss.csv and says which steps ran, and moves
#      the later checkpoints of the run it replaces into ckpt/superseded-*, pointing latest at
#      the resumed one; a resume with no steps left says so (no "nan");
#   3. a checkpoint of DP=2, --batch 4, --accum 2 (16 sequences per step) resumed on one rank
#      without batch flags keeps the global batch (--batch 4 --accum 4) and the uninterrupted
#      losses (within 1e-5), and its messages count "1 rank" (not "1 ranks"); --batch 3 there is
#      refused with what to pass;
#   4. the same parameters (step 0) give the same validation loss at DP=1, 2 and 4 with --batch 4
#      per rank (global batches 4, 8 and 16), within 1e-6 relative;
#   5. a bad compressor spec fails saying why, from --compress and from TEMPO_COMPRESS (which
#      applies without --compress; the start line names it); tempo.h's refit example parses.
# The corpus is the repository's README.md and include/tempo.h; the model is tiny (2 layers, 2
# heads, 32 channels, context 32), 6 steps at most.
# Knobs: RUNS_KEEP=1 keeps the temporary directory, RUNS_TIMEOUT the hang guard per launch.

srcdir=${top_srcdir:-$(dirname "$0")/../..}
. "$srcdir/tests/trainer/lib.sh"
prepare RUNS README.md include/tempo.h

MODEL="--data $tmp/corpus.txt --layers 2 --heads 2 --channels 32 --context 32 --sample 0 \
--quiet --warmup 3 --lr 3e-3"
# point STATUS DESCRIPTION LOG (lib.sh): on failure the end of LOG as diagnostics
# train N OUT [args...]: tempo-train on N ranks into OUT, log in OUT.log; sets rc
train() {
    _n=$1 _out=$2
    shift 2
    launch "$_n" "$_out.log" --out "$_out" "$@"
}

echo "1..13"

# 1. nothing lost
train 2 "$tmp/a" --batch 4 --accum 2 --steps 6 --ckpt-every 3 --ckpt-keep 3 --val-every 3
cp "$tmp/a/loss.csv" "$tmp/full.csv"
ls -R "$tmp/a" >"$tmp/before.ls"
[ $rc = 0 ] && [ "$(step_list "$tmp/full.csv")" = "1 2 3 4 5 6 " ]
point $? "DP=2, 16 sequences per step: 6 steps with checkpoints at 3 and 6" "$tmp/a.log"

train 2 "$tmp/a" --batch 4 --steps 2
mv "$tmp/a.log" "$tmp/again.log"
ls -R "$tmp/a" >"$tmp/after.ls"
[ $rc != 0 ] && grep -q "holds another run's results" "$tmp/again.log" &&
    grep -q "resume latest" "$tmp/again.log" && grep -q -- "--overwrite" "$tmp/again.log" &&
    cmp -s "$tmp/full.csv" "$tmp/a/loss.csv" && cmp -s "$tmp/before.ls" "$tmp/after.ls"
point $? "a new run into a folder with another run's results is refused, says how to go on, changes nothing" \
    "$tmp/again.log"
grep -m1 "holds another" "$tmp/again.log" | cut -c 1-200 | sed 's/^/# /'

# 1 and 3: resume the DP=2 run from step 3 on one rank, no batch flags
train 1 "$tmp/a" --steps 6 --val-every 3 --resume "$tmp/a/ckpt/step_00000003"
[ $rc = 0 ] && [ "$(step_list "$tmp/a/loss.csv")" = "1 2 3 4 5 6 " ] &&
    grep -q "steps 4-6 ran here" "$tmp/a.log"
point $? "resumed from step 3 of 6: loss.csv has each step once, the summary names steps 4-6" \
    "$tmp/a.log"
col "$tmp/full.csv" 2 | tail -n 3 >"$tmp/want"
col "$tmp/a/loss.csv" 2 | tail -n 3 >"$tmp/got"
compare "$tmp/want" "$tmp/got" 3 1e-5 &&
    grep -q "global batch: 16 sequences per step (--batch 4 x 1 rank x --accum 4)" "$tmp/a.log" &&
    grep -q "tempo-train: 1 rank, " "$tmp/a.log" && ! grep -q "[^0-9]1 ranks\|rank(s)" "$tmp/a.log"
point $? "DP=2 checkpoint resumed on 1 rank keeps the global batch of 16: losses within 1e-5 \
(worst $w); the messages say 1 rank" \
    "$tmp/a.log"

# The replaced continuation's checkpoint (step 6) was moved aside; latest names step 3 (the resumed
# run saved none), so pruning and --resume latest see only this run's history.
[ "$(ls "$tmp/a/ckpt"/superseded-*)" = step_00000006 ] &&
    [ "$(cat "$tmp/a/ckpt/latest")" = step_00000003 ] && grep -q "checkpoints: moved 1" "$tmp/a.log"
point $? "the resume moved the replaced run's later checkpoint aside and latest names step 3" \
    "$tmp/a.log"

train 1 "$tmp/a" --steps 3 --resume latest
[ $rc = 0 ] && grep -q "nothing to train: the checkpoint is at step 3" "$tmp/a.log" &&
    ! grep -q nan "$tmp/a.log"
point $? "a resume with no steps left says so (no nan)" "$tmp/a.log"

train 1 "$tmp/a" --steps 6 --batch 3 --resume "$tmp/a/ckpt/step_00000003"
[ $rc != 0 ] && grep -q "pass --batch 4 --accum 4" "$tmp/a.log"
point $? "a resume that cannot keep the global batch (--batch 3 at 1 rank) is refused with what to pass" \
    "$tmp/a.log"
grep -m1 "global batch" "$tmp/a.log" | cut -c 1-250 | sed 's/^/# /'

train 2 "$tmp/a" --batch 4 --steps 2 --ckpt-every 1 --ckpt-keep 5 --val-every 0 --overwrite
[ $rc = 0 ] && [ "$(step_list "$tmp/a/loss.csv")" = "1 2 " ] &&
    [ "$(ls "$tmp/a/ckpt" | tr '\n' ' ')" = "latest step_00000001 step_00000002 " ] &&
    [ "$(cat "$tmp/a/ckpt/latest")" = step_00000002 ]
point $? "--overwrite replaces the old run: its rows and checkpoints are gone, only the new run's stay" \
    "$tmp/a.log"

# 4. validation loss of the same parameters (step 0) at DP=1, 2, 4
for n in 1 2 4; do
    train "$n" "$tmp/v$n" --batch 4 --steps 0 --val-every 1
    sed -n 's/^\[0\] validation loss: \([0-9.]*\) at.*/\1/p' "$tmp/v$n.log" >"$tmp/val$n"
done
paste -d' ' "$tmp/val1" "$tmp/val2" "$tmp/val4" >"$tmp/vals"
echo "# validation loss at DP=1 2 4: $(cat "$tmp/vals")"
awk 'NF == 3 && $1 > 0 {for (i = 2; i <= 3; i++) {e = ($i - $1) / $1; if (e < 0) e = -e;
    if (e > 1e-6) exit 1} n++} END {exit n != 1}' "$tmp/vals"
point $? "step 0 at DP=1, 2, 4 (global batch 4, 8, 16): the same validation loss within 1e-6" \
    "$tmp/v4.log"
grep -q "global batch: 16 sequences per step (--batch 4 x 4 ranks x --accum 1)" "$tmp/v4.log"
point $? "the start line gives the global batch" "$tmp/v4.log"

# 5. compressor specs: a bad one says why, from --compress and from TEMPO_COMPRESS (which applies
# when --compress is not given, and the start line says so); tempo.h's refit example parses.
train 1 "$tmp/c1" --steps 1 --compress alq:bits=99
[ $rc != 0 ] && grep -q -- "--compress alq:bits=99: .*bits=99: expected an integer 1..8" "$tmp/c1.log"
point $? "--compress alq:bits=99 fails saying why" "$tmp/c1.log"
TEMPO_COMPRESS=alq:bits=99 train 1 "$tmp/c2" --steps 1
# (refused when the library loads its configuration, before the trainer reads the spec)
[ $rc != 0 ] && grep -q "TEMPO_COMPRESS='alq:bits=99' is not valid: .*expected an integer 1..8" \
    "$tmp/c2.log"
point $? "TEMPO_COMPRESS=alq:bits=99 is not ignored: it fails saying why" "$tmp/c2.log"
TEMPO_COMPRESS='alq:bits=3,refit=0;100;2000;10000,min=0' train 1 "$tmp/c3" --steps 1
[ $rc = 0 ] && grep -q "alq:bits=3.*(compressor from TEMPO_COMPRESS)" "$tmp/c3.log"
point $? "TEMPO_COMPRESS with tempo.h's refit example compresses, and the start line says so" \
    "$tmp/c3.log"
