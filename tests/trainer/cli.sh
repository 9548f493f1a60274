#!/bin/sh
# tests/trainer/cli.sh — what a user sees of tempo-train's command line, environment and outputs
# (issue 27), on 1-2 real ranks (tempo-run) and a tiny model:
#   1. TEMPO_SCHED is the default policy (as TEMPO_COMPRESS is the default compressor) and the start
#      line says where it came from; a flag given with its variable wins, and the run says so; a
#      bucketer variable where no bucketer runs (ZeRO 1-3) is said to have no effect;
#   2. what the gradient sync cannot run is refused before any work with exit status 2 and the
#      flag to change: powersgd (all-reduce only) with ZeRO 1, 2, 3 and in a pipeline, tac with
#      ZeRO 1, --bucket-bytes with ZeRO 1 (no buckets there);
#   3. --bucket-bytes below the default 1M first bucket splits a small model into buckets;
#   4. the exit status rule: a bad value is 2, with integer ranges printed as integers ("2.5" and
#      "1e3" are not integers); an --out with missing parents is created; --dump says what it
#      wrote (the size it names is the file's); loss.csv starts with the validation loss at step 0
#      (the printed one), in a pipeline run too, which also draws loss.png (when gnuplot or
#      matplotlib is installed);
#   5. --resume with another --data, or with no checkpoint, is refused (status 2) saying how to go
#      on, changing nothing;
#   6. a fatal error is one line written at once (strace: one write() holds the whole line), so a
#      rank that tempo-run ends mid-message cannot leave a bare "tempo-train: rank 0: ".
# Knobs: CLI_KEEP=1 keeps the temporary directory, CLI_TIMEOUT the hang guard per launch.

srcdir=${top_srcdir:-$(dirname "$0")/../..}
. "$srcdir/tests/trainer/lib.sh"
prepare CLI README.md include/tempo.h

MODEL="--data $tmp/corpus.txt --layers 2 --heads 2 --channels 32 --context 16 --batch 2 \
--sample 0 --val-windows 8 --warmup 2"
echo "1..30"

# has LOG TEXT: LOG holds the fixed string TEXT
has() { grep -qF -- "$2" "$1"; }
# exits LOG WANT: the launch's status ($rc) is WANT; else prints the log's tail
exits() {
    [ "$rc" = "$2" ] && return 0
    echo "#   exit status $rc, expected $2; $1:"
    diag "$1"
    return 1
}

# 1. TEMPO_SCHED
# (exported around each launch: an assignment before a function call is not portable sh)
export TEMPO_SCHED=tac
launch 1 "$tmp/s1.log" --steps 1 --val-every 0 --out "$tmp/s1"
[ $rc = 0 ] && has "$tmp/s1.log" "policy tac" && has "$tmp/s1.log" "(policy from TEMPO_SCHED)"
point $? "TEMPO_SCHED=tac is the policy, and the start line says so" "$tmp/s1.log"
launch 1 "$tmp/s2.log" --steps 1 --val-every 0 --sched fifo --out "$tmp/s2"
[ $rc = 0 ] && has "$tmp/s2.log" "policy fifo" &&
    has "$tmp/s2.log" "note: --sched fifo overrides TEMPO_SCHED=tac"
point $? "--sched fifo with TEMPO_SCHED=tac: the flag wins and the run says so" "$tmp/s2.log"
unset TEMPO_SCHED
export TEMPO_COMPRESS=fp16
launch 1 "$tmp/s3.log" --steps 1 --val-every 0 --compress none --out "$tmp/s3"
unset TEMPO_COMPRESS
[ $rc = 0 ] && has "$tmp/s3.log" "note: --compress none overrides TEMPO_COMPRESS=fp16"
point $? "--compress none with TEMPO_COMPRESS=fp16: the flag wins and the run says so" \
    "$tmp/s3.log"

export TEMPO_BUCKET_BYTES=64K
launch 1 "$tmp/s4.log" --steps 1 --val-every 0 --zero 1 --out "$tmp/s4"
unset TEMPO_BUCKET_BYTES
[ $rc = 0 ] && has "$tmp/s4.log" "note: TEMPO_BUCKET_BYTES=64K has no effect at --zero 1"
point $? "TEMPO_BUCKET_BYTES at --zero 1 (no bucketer there): the run says it has no effect" \
    "$tmp/s4.log"

# 2. refused before any work, status 2 (lib.sh's refused checks: the message, no step, no loss.csv)
# refused2 N MESSAGE LABEL ARGS...: refused, and with exit status 2
refused2() {
    _n=$1 _m=$2 _l=$3
    shift 3
    refused "$_n" "$_m" "$_l" "$@"
    exits "$tmp/bad.log" 2
    point $? "$_l: exit status 2"
}
export TEMPO_SCHED=tac
refused2 2 "TEMPO_SCHED=tac needs --zero 0" "TEMPO_SCHED=tac with --zero 1" --zero 1 --steps 2
unset TEMPO_SCHED
for z in 1 2 3; do
    refused2 2 "powersgd compresses all-reduce only" "--compress powersgd with --zero $z" \
        --zero $z --compress powersgd:rank=2 --steps 2
done
refused2 2 "powersgd compresses all-reduce only" "--compress powersgd with --pp 2 --zero 1" \
    --pp 2 --zero 1 --compress powersgd --steps 2
refused2 2 "--bucket-bytes sizes the buckets of --zero 0" "--bucket-bytes 64K with --zero 1" \
    --zero 1 --bucket-bytes 64K --steps 2

# 3. --bucket-bytes on a model under 1 MB (4 layer groups of 1.5-13 KB here)
launch 1 "$tmp/b.log" --steps 1 --val-every 0 --bucket-bytes 1K --out "$tmp/b"
nb=$(sed -n 's/.*bucketer, \([0-9]*\) bucket.*/\1/p' "$tmp/b.log")
[ $rc = 0 ] && [ "${nb:-0}" = 4 ]
point $? "--bucket-bytes 1K: one bucket per layer group (got ${nb:-none} of 4)" "$tmp/b.log"

# 4. exit status of bad values, integer ranges
"$TT" --layers 2.5 >"$tmp/v1.log" 2>&1
rc=$?
exits "$tmp/v1.log" 2 && has "$tmp/v1.log" "--layers: '2.5' is not an integer from 1 to 256"
point $? "--layers 2.5 is refused (status 2), not truncated"
"$TT" --seed 1e3 >"$tmp/v2.log" 2>&1
rc=$?
exits "$tmp/v2.log" 2 && has "$tmp/v2.log" "from 0 to 1000000000000000000" &&
    ! grep -q "e+" "$tmp/v2.log"
point $? "--seed 1e3 is refused (status 2), its range printed as integers"
sed 's/^/# /' "$tmp/v2.log"
"$TT" --lr fast >"$tmp/v3.log" 2>&1
rc=$?
exits "$tmp/v3.log" 2
point $? "--lr fast: status 2"
"$TT" --no-such-flag >"$tmp/v4.log" 2>&1
rc=$?
exits "$tmp/v4.log" 2
point $? "an unknown flag: status 2"

launch 2 "$tmp/o.log" --steps 2 --val-every 1 --out "$tmp/new/a/b"
[ $rc = 0 ] && [ -f "$tmp/new/a/b/loss.csv" ]
point $? "--out with missing parents is created" "$tmp/o.log"
v0=$(sed -n 's/^\[0\] step    0 | val loss \([0-9.]*\)$/\1/p' "$tmp/o.log")
row=$(sed -n 2p "$tmp/new/a/b/loss.csv")
[ -n "$v0" ] && echo "$row" | awk -F, -v v="$v0" '{exit !($1 == 0 && $2 == "" &&
    sprintf("%.4f", $3) == v)}'
point $? "loss.csv starts with the printed validation loss at step 0 ($v0): '$(echo "$row" |
    cut -c 1-40)'"

launch 2 "$tmp/d.log" --steps 2 --dump "$tmp/g.bin" --out "$tmp/d"
said=$(sed -n "s|^\[0\] dump: wrote $tmp/g.bin (\([0-9]*\) bytes).*|\1|p" "$tmp/d.log")
[ $rc = 0 ] && [ -n "$said" ] && [ "$said" = "$(wc -c <"$tmp/g.bin")" ]
point $? "--dump says what it wrote ($said bytes, the file's size)" "$tmp/d.log"

launch 2 "$tmp/p.log" --pp 2 --micro 2 --steps 2 --val-every 1 --out "$tmp/p"
row=$(sed -n 2p "$tmp/p/loss.csv" 2>/dev/null)
[ $rc = 0 ] && echo "$row" | awk -F, '{exit !($1 == 0 && $2 == "" && $3 > 0)}'
point $? "--pp 2: loss.csv starts with the validation loss at step 0" "$tmp/p.log"
if command -v gnuplot >/dev/null 2>&1 || /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
    [ -s "$tmp/p/loss.png" ]
    point $? "--pp 2 draws loss.png too" "$tmp/p.log"
else
    ok "# SKIP neither gnuplot nor matplotlib installed"
fi

# 5. resume
launch 2 "$tmp/r.log" --steps 4 --val-every 0 --ckpt-every 2 --out "$tmp/r"
point $? "a run with checkpoints (for the resumes below)" "$tmp/r.log"
cp "$tmp/r/loss.csv" "$tmp/r.csv"
launch 2 "$tmp/r2.log" --steps 6 --val-every 0 --resume latest --out "$tmp/r" \
    --data "$srcdir/README.md"
exits "$tmp/r2.log" 2 && has "$tmp/r2.log" "To continue that run, pass the --data" &&
    cmp -s "$tmp/r/loss.csv" "$tmp/r.csv" && [ -d "$tmp/r/ckpt/step_00000004" ]
point $? "--resume with another --data is refused (status 2), saying how to go on; nothing changed"
grep -m1 "To continue" "$tmp/r2.log" | cut -c 1-200 | sed 's/^/# /'
launch 2 "$tmp/r3.log" --steps 6 --val-every 0 --resume latest --out "$tmp/none"
exits "$tmp/r3.log" 2 && has "$tmp/r3.log" "start a new run without --resume"
point $? "--resume latest without a checkpoint is refused (status 2), saying how to go on"

# 6. one write() per error line
if command -v strace >/dev/null 2>&1 && strace -o /dev/null true 2>/dev/null; then
    # a failure once the run has started (its --out cannot be created: a file is in the way);
    # -f: in a build tree the program runs under libtool's wrapper
    : >"$tmp/file"
    strace -f -s 4096 -e trace=write -o "$tmp/strace.log" "$TT" $MODEL --steps 1 --val-every 0 \
        --out "$tmp/file/x" >/dev/null 2>&1
    grep 'write(2, "tempo-train: rank 0: ' "$tmp/strace.log" | grep -q 'cannot create --out .*\\n"'
    point $? "the error line is written whole by one write()"
    grep 'write(2' "$tmp/strace.log" | head -3 | cut -c 1-160 | sed 's/^/# /'
else
    ok "# SKIP strace not installed or not permitted here"
fi
