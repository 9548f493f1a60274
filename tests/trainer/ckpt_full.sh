#!/bin/sh
# tests/trainer/ckpt_full.sh — checkpoints on a full disk: the run's checkpoint directory is a small
# tmpfs mounted by this test (OUT/ckpt), so saves fail with ENOSPC for real.
#   1. 64 KiB, less than one checkpoint (3 files of 30 KiB at 2 ranks, ZeRO 1): both saves of a
#      2-step run fail; the run trains to its end and exits with status 1 (the final save failed);
#      the error names the file and "No space left on device"; nothing of the saves is left;
#   2. 1 MiB, 900 KiB of it taken by a step_00000099.tmp that a killed run left behind, next to a
#      complete step_00000000: the run resumed (from a 1-step run's checkpoint elsewhere) saves
#      steps 2 and 3 (the stale .tmp is removed, the complete checkpoint is kept).
# Needs root (mount); skipped where a tmpfs cannot be mounted. The tmpfs is unmounted on exit.
# Knobs: CKPTFULL_KEEP=1 keeps the temporary directory (unmounted), CKPTFULL_TIMEOUT the hang guard.

srcdir=${top_srcdir:-$(dirname "$0")/../..}
. "$srcdir/tests/trainer/lib.sh"
prepare CKPTFULL README.md
ckpt="$tmp/out/ckpt"
mkdir -p "$ckpt" || exit 1
if ! why=$(mount -t tmpfs -o size=64k tempo-ckpt-test "$ckpt" 2>&1); then
    echo "1..0 # SKIP cannot mount a tmpfs here: $why"
    exit 0
fi
trap 'umount "$ckpt"; if [ "$_keep" = 1 ]; then echo "# kept $tmp"; else rm -rf "$tmp"; fi' EXIT

# check DESCRIPTION COMMAND...: one TAP point, COMMAND's status; on failure the run's log
check() {
    _d=$1
    shift
    "$@"
    _s=$?
    point $_s "$_d"
    if [ $_s != 0 ]; then
        echo "# exit status $rc; contents of $ckpt:"
        ls -AR "$ckpt" | sed 's/^/#   /'
        diag "$tmp/log"
    fi
}
# train OUT [args...]: 2 ranks, ZeRO 1, a checkpoint after each step; sets rc
MODEL="--data $tmp/corpus.txt --layers 1 --heads 1 --channels 16 --context 16 --batch 2 --zero 1 \
--ckpt-every 1 --ckpt-keep 3 --val-every 0 --sample 0"
train() {
    _out=$1
    shift
    launch 2 "$tmp/log" --out "$_out" "$@"
}
rows() { [ "$(tail -n +2 "$tmp/out/loss.csv" | wc -l)" -eq "$1" ]; }

echo "1..5"

train "$tmp/out" --steps 2
check "disk full: the run trains to its end despite the failed saves, exits 1 (final save failed)" \
    eval '[ $rc = 1 ] && rows 2 && grep -q "warning: checkpoint .*step_00000001 failed" "$tmp/log"'
check "the failure names the file and the cause" \
    grep -q -E "cannot write $ckpt/step_00000001\.tmp/(model|optim_0000[01])\.bin: No space left on device" \
    "$tmp/log"
check "nothing of the failed saves is left in the checkpoint directory" \
    eval '[ -z "$(ls -A "$ckpt")" ]'

mount -o remount,size=1m "$ckpt" || echo "Bail out! cannot resize the tmpfs at $ckpt"
mkdir "$ckpt/step_00000099.tmp" "$ckpt/step_00000000" &&
    head -c 921600 /dev/zero >"$ckpt/step_00000099.tmp/optim_00000.bin" &&
    echo complete >"$ckpt/step_00000000/model.bin" || echo "Bail out! cannot fill $ckpt"
train "$tmp/seed" --steps 1
[ $rc = 0 ] || echo "Bail out! a 1-step run into $tmp/seed failed"
train "$tmp/out" --steps 3 --resume "$tmp/seed/ckpt/step_00000001"
check "with space again, a stale step_*.tmp filling it does not make the resumed run's saves fail" \
    eval '[ $rc = 0 ] && rows 3 && [ "$(cat "$ckpt/latest")" = step_00000003 ] &&
        [ "$(ls "$ckpt/step_00000002" "$ckpt/step_00000003" | grep -c bin)" = 6 ]'
check "the stale step_00000099.tmp is removed, the complete step_00000000 is kept" \
    eval '[ ! -e "$ckpt/step_00000099.tmp" ] && [ -f "$ckpt/step_00000000/model.bin" ]'
