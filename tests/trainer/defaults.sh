#!/bin/sh
# tests/trainer/defaults.sh — every tempo-train layout with the defaults a user leaves on (issue
# 27): validation (--val-every 25: at the start and after the last step), a 200-token sample at
# the end, --val-windows 64, plus checkpoints (--ckpt-every 2) and a resume, at a tiny size. Most
# other trainer tests pass --val-every 0 --sample 0 to compare losses quickly, which is how ZeRO 3
# failing in every validation and sample went unseen. For each layout (one rank; DP 2 at ZeRO 0,
# 1, 2 and 3; TP 2; TP 2 --sp; PP 2 gpipe, 1f1b and interleaved; DP 2 x TP 2 at ZeRO 1 and 3;
# DP 2 x TP 2 --sp at ZeRO 3; PP 2 x DP 2 at ZeRO 3; the mpi backend at DP 2 ZeRO 3, DP 2 x TP 2
# --sp ZeRO 3 and PP 2, where built), all with 8 sequences per global batch:
#   1. 4 steps: exits 0; loss.csv has steps 1-4 and a validation loss on step 4; the log has the
#      validation loss at step 0, the summary (step time, or --pp's bubble) and the closing
#      "validation loss: ... at start, ... at the end" line; loss.png where gnuplot or matplotlib
#      is installed; checkpoints of steps 2 and 4; the sample (--pp: the note that it has none);
#      the validation losses at the start and the end equal one rank's within 1e-4 (the same
#      parameters and windows at every layout, so a forward on stale or missing parameters
#      shows), and the sample is one rank's text;
#   2. --resume latest --steps 6 in the same --out: the same, for steps 5-6 (loss.csv then has
#      steps 1-6, the checkpoint of step 6 is written), its validation losses again one rank's;
#   3. nothing measured is lost to a failure at the end: DP 2 ZeRO 3 with a sample far longer
#      than the test waits for, rank 1 killed once rank 0 has said where the loss curve is: the
#      run exits non-zero, and loss.csv, loss.png and the summary lines are there (the sample
#      used to come before them, so a failed sample lost them).
# The model has 4 blocks: an even count, with which ZeRO 3's second forward in a row (validation
# windows, sample tokens) found the embeddings that the previous head had left in block 0's
# buffer (issue 27), and one that an interleaved PP 2 x 2 chunks divides.
# Knobs: TRAINER_KEEP=1 keeps the temporary directory, TRAINER_TIMEOUT the hang guard per launch.

srcdir=${top_srcdir:-$(dirname "$0")/../..}
. "$srcdir/tests/trainer/lib.sh"
prepare TRAINER README.md include/tempo.h

MODEL="--data $tmp/corpus.txt --layers 4 --heads 2 --channels 32 --context 32 --ckpt-every 2"
png=0
{ command -v gnuplot || /usr/bin/python3 -c "import matplotlib"; } >/dev/null 2>&1 && png=1

# go LAUNCHER N LOG ARGS...: tempo-train on N ranks through tempo-run (LAUNCHER tempo) or mpirun
# with --backend mpi (LAUNCHER mpi), output in LOG; sets rc
go() {
    _l=$1
    shift
    if [ "$_l" = tempo ]; then
        launch "$@"
        return
    fi
    _gn=$1 _glog=$2
    shift 2
    # shellcheck disable=SC2086 # $mpi_flags and $MODEL are word lists
    timeout "$guard" "$mpirun" -n "$_gn" $mpi_flags "$TT" --backend mpi $MODEL "$@" \
        >"$_glog" 2>&1 </dev/null
    rc=$?
}

# vals LOG: the validation losses at the start and the end of the run in LOG, a line each
vals() { sed -n 's/.*validation loss: \([^ ]*\) at start, \([^ ]*\) at the end.*/\1\n\2/p' "$1"; }
# sampled LOG: rank 0's sample text in LOG, without tempo-run's "[0] " (mpirun adds none); the
# lines of other ranks (tempo-run's "[r] ", mpirun's "memory of rank r") left out
sampled() {
    sed 's/^\[0\] //' "$1" | awk '/^sample \(/ {s = 1; next}
        /^(step time|validation loss|loss curve|memory of rank 0)/ {s = 0}
        s && !/^(\[[0-9]+\] |memory of rank )/ {print}'
}

# check LABEL OUT LOG FIRST LAST PP: one point for the run in LOG (steps FIRST+1..LAST into OUT;
# PP 1 for a pipeline run): the checks of the header's 1 or 2, against the reference's validation
# losses and sample of step LAST ($tmp/ref.valLAST, $tmp/ref.sampleLAST); the reasons it fails as
# diagnostics
check() {
    _lbl=$1 _o=$2 _log=$3 _first=$4 _last=$5 _pp=$6
    _why=""
    [ "$rc" = 0 ] || _why="$_why; exited with status $rc"
    [ "$(step_list "$_o/loss.csv" 2>/dev/null)" = "$(seq -s ' ' 1 "$_last") " ] ||
        _why="$_why; loss.csv does not have steps 1-$_last"
    [ -n "$(tail -n 1 "$_o/loss.csv" 2>/dev/null | cut -d, -f3)" ] ||
        _why="$_why; no validation loss on step $_last in loss.csv"
    grep -q "step *$_first | val loss [0-9]" "$_log" || _why="$_why; no validation at step $_first"
    [ -n "$(vals "$_log")" ] || _why="$_why; no closing validation line"
    if [ "$_pp" = 1 ]; then
        grep -q "bubble, mean of steps" "$_log" || _why="$_why; no bubble summary"
        grep -q "note: no sample at the end with --pp" "$_log" || _why="$_why; no sample note"
    else
        grep -q "step time, mean of steps" "$_log" || _why="$_why; no step time summary"
        grep -q "sample (200 tokens):" "$_log" || _why="$_why; no sample"
        sampled "$_log" >"$_o.sample"
        cmp -s "$tmp/ref.sample$_last" "$_o.sample" || _why="$_why; not one rank's sample"
    fi
    if [ $png = 1 ]; then
        [ -s "$_o/loss.png" ] || _why="$_why; no loss.png"
    fi
    for _s in $(seq $((_first + 2)) 2 "$_last"); do
        [ -d "$_o/ckpt/step_$(printf %08d "$_s")" ] || _why="$_why; no checkpoint of step $_s"
    done
    vals "$_log" >"$_o.val"
    w=$(worst "$tmp/ref.val$_last" "$_o.val" 2)
    within "$w" 1e-4 || _why="$_why; validation losses not one rank's"
    point "$([ -z "$_why" ]; echo $?)" "$_lbl (validation worst relative $w)"
    if [ -n "$_why" ]; then
        echo "# ${_why#; }"
        grep -v "^\[[0-9]*\] step *[0-9]*/" "$_log" | tail -n 4 | cut -c 1-250 | sed 's/^/#   /'
    fi
}

echo "1..35"

# the reference: one rank, 4 steps, then resumed to 6 (its own points compare it with itself)
launch 1 "$tmp/ref.log" --out "$tmp/ref" --steps 4 --batch 8
vals "$tmp/ref.log" >"$tmp/ref.val4"
sampled "$tmp/ref.log" >"$tmp/ref.sample4"
check "one rank: 4 steps with validation, sample and checkpoints" "$tmp/ref" "$tmp/ref.log" 0 4 0
launch 1 "$tmp/ref.r.log" --out "$tmp/ref" --steps 6 --resume latest --batch 8
vals "$tmp/ref.r.log" >"$tmp/ref.val6"
sampled "$tmp/ref.r.log" >"$tmp/ref.sample6"
check "one rank: resumed to step 6" "$tmp/ref" "$tmp/ref.r.log" 4 6 0

# layout LAUNCHER N LABEL ARGS...: the layout's run of 4 steps and its resume to step 6 (two
# points), each against the reference's; PP is read from ARGS
layout() {
    _sl=$1 _sn=$2 _slbl=$3
    shift 3
    _lo="$tmp/l$num"
    _lpp=0
    case " $* " in *" --pp "*) _lpp=1 ;; esac
    go "$_sl" "$_sn" "$_lo.log" --out "$_lo" --steps 4 "$@"
    check "$_slbl: 4 steps with validation, sample and checkpoints" "$_lo" "$_lo.log" 0 4 "$_lpp"
    go "$_sl" "$_sn" "$_lo.r.log" --out "$_lo" --steps 6 --resume latest "$@"
    check "$_slbl: resumed to step 6" "$_lo" "$_lo.r.log" 4 6 "$_lpp"
}

for z in 0 1 2 3; do
    layout tempo 2 "DP=2 ZeRO $z" --zero "$z" --batch 4
done
layout tempo 2 "TP=2" --tp 2 --batch 8
layout tempo 2 "TP=2 --sp" --tp 2 --sp --batch 8
for s in gpipe 1f1b; do
    layout tempo 2 "PP=2 $s" --pp 2 --pp-schedule "$s" --batch 4
done
layout tempo 2 "PP=2 interleaved, 2 chunks per rank" --pp 2 --pp-schedule interleaved \
    --virtual 2 --batch 4
layout tempo 4 "DP=2 x TP=2 ZeRO 1" --dp 2 --tp 2 --zero 1 --batch 4
layout tempo 4 "DP=2 x TP=2 ZeRO 3" --dp 2 --tp 2 --zero 3 --batch 4
layout tempo 4 "DP=2 x TP=2 --sp ZeRO 3" --dp 2 --tp 2 --sp --zero 3 --batch 4
layout tempo 4 "PP=2 x DP=2 ZeRO 3" --pp 2 --dp 2 --zero 3 --batch 2

mpi_why=""
"$TT" --help | grep -q "this build has: tempo, mpi" || mpi_why="tempo-train built without MPI"
[ -n "$mpi_why" ] || mr_mpirun || :
if [ -n "$mpi_why" ]; then
    for _i in 1 2 3 4 5 6; do
        ok "# SKIP mpi backend: $mpi_why"
    done
else
    layout mpi 2 "mpi backend, DP=2 ZeRO 3" --zero 3 --batch 4
    layout mpi 4 "mpi backend, DP=2 x TP=2 --sp ZeRO 3" --dp 2 --tp 2 --sp --zero 3 --batch 4
    layout mpi 2 "mpi backend, PP=2 1f1b" --pp 2 --batch 4
fi

# 3. a rank lost while sampling, after the run's results are written: the log polled for the
# loss curve's line (at most 60 s), rank 1's process found by its TEMPO_RANK (Linux's /proc)
o="$tmp/lost"
# shellcheck disable=SC2086 # $MODEL is a word list
"$TR" -n 2 --timeout "$guard" "$TT" $MODEL --out "$o" --steps 4 --zero 3 --batch 4 \
    --sample 1000000 >"$o.log" 2>&1 </dev/null &
job=$!
t=0
while ! grep -q "loss curve" "$o.log" && [ $t -lt 600 ] && kill -0 $job 2>/dev/null; do
    sleep 0.1
    t=$((t + 1))
done
killed=0
for p in $(ps -o pid= --ppid $job); do
    if tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx TEMPO_RANK=1; then
        kill "$p" && killed=1
    fi
done
[ $killed = 1 ] || kill $job 2>/dev/null # no rank found: the job, not to wait for the guard
wait $job
rc=$?
why=""
[ $killed = 1 ] || why="$why; rank 1's process not found (in /proc)"
[ $rc != 0 ] || why="$why; exited with status 0"
grep -q "step time, mean of steps" "$o.log" || why="$why; no step time summary"
grep -q "validation loss: [0-9.]* at start" "$o.log" || why="$why; no closing validation line"
[ "$(step_list "$o/loss.csv" 2>/dev/null)" = "1 2 3 4 " ] || why="$why; no loss.csv"
[ $png = 0 ] || [ -s "$o/loss.png" ] || why="$why; no loss.png"
point "$([ -z "$why" ]; echo $?)" "rank 1 lost while sampling at the end: the run fails (status $rc), \
its loss.csv, loss.png and summary written before"
[ -z "$why" ] || echo "# ${why#; }"
