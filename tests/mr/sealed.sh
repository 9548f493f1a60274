#!/bin/sh
# tests/mr/sealed.sh — TEMPO_ENCRYPT=1 (transport/seal.h) against someone on the wire: a man in the
# middle of rank 1's tcp connections (tests/transport/libtcp_mitm.so, LD_PRELOAD on rank 1) who
# reads every byte it sends, or changes one. Every job is 2 ranks of perf/all_reduce_perf over
# tcp (TEMPO_TRANSPORTS=tcp,^shm) with its check on, under tempo-run (which makes the job key).
#
#   1. sealed: the results are right, and the bytes on the wire hold none of the frames' magic
#      ("TMPM", at the head of every message);
#   2. unsealed, the contrast: the wire shows the frames' magic in the clear;
#   3. sealed, one byte changed on the way: the job fails, rank 0 saying that rank 1 "sent bytes
#      that fail authentication (TEMPO_ENCRYPT ...)", and no result is reported wrong;
#   4. unsealed, the same change (in the one call perf checks): nothing notices it, and rank 0
#      reports wrong values: what sealing prevents;
#   5. refused: TEMPO_ENCRYPT=1 without a key, with ucx listed, and on one rank only: the job fails
#      at init, saying why.
# Skipped in a build without libcrypto. POSIX sh, run by the automake harness with top_builddir
# exported, or by hand:  top_builddir=/path/to/build sh tests/mr/sealed.sh

srcdir=${top_srcdir:-$(dirname "$0")/../..}
B="${top_builddir:-.}"
INFO="$B/tools/tempo-info"
TR="$B/tools/tempo-run"
PERF="$B/perf/all_reduce_perf"
MITM="$B/tests/transport/libtcp_mitm.so"
. "$srcdir/tests/mr/launch.sh"
mr_prepare SEALED "$INFO" "$PERF"

echo "1..7"
if ! "$INFO" -b | grep -q '^  crypto  *yes' || [ ! -f "$MITM" ]; then
    for i in 1 2 3 4 5 6 7; do
        ok "# SKIP no libcrypto in this build (TEMPO_ENCRYPT needs it), or $MITM not built"
    done
    exit 0
fi

# job SIZE ENV...: 2 ranks over tcp, -b SIZE -e SIZE, with ENV (RANK1_ENV=... on rank 1 only;
# NOKEY=1: the ranks without the key tempo-run made); status in rc, output in $tmp/job.out
job() {
    _size=$1
    shift
    mr_wrap
    env TEMPO_TRANSPORTS=tcp,^shm TEMPO_TIMEOUT=20s "$@" timeout 120 "$TR" -n 2 --timeout 60 \
        sh "$tmp/wrap.sh" "$PERF" -b "$_size" -e "$_size" $iters >"$tmp/job.out" 2>&1 </dev/null
    rc=$?
}
wrong() {
    awk '/^\[0\] +[0-9]+ +[0-9]+ / { if ($10 != 0 || ($14 != 0 && $14 != "N/A")) w++ }
        END { print w + 0 }' "$tmp/job.out"
}
rows() { grep -c '^\[0\] \+[0-9]\+ \+[0-9]\+ ' "$tmp/job.out"; }
# magic FILE: how many times the frames' magic ("TMPM", little-endian 0x4d504d54) is in FILE (by
# chance, 4 bytes of ciphertext match it once in 4 GiB)
magic() { LC_ALL=C grep -a -o 'TMPM' "$1" 2>/dev/null | wc -l; }
iters="-n 12 -w 1"

# ---- 1, 2: what the wire shows
for e in 1 0; do
    rm -f "$tmp"/tap.*
    job 1M TEMPO_ENCRYPT=$e RANK1_ENV="LD_PRELOAD=$MITM MITM_TCP=tap:$tmp/tap"
    tapf=$(ls "$tmp"/tap.* 2>/dev/null | head -n 1)
    bytes=$(wc -c <"${tapf:-/dev/null}")
    c=1
    if [ "$e" = 1 ]; then
        [ "$rc" = 0 ] && [ "$(rows)" = 1 ] && [ "$(wrong)" = 0 ] && [ "$bytes" -gt 10000000 ] &&
            [ "$(magic "$tapf")" -le 1 ] && c=0
        check $c "TEMPO_ENCRYPT=1: results right; the $bytes bytes rank 1 sent hold no frame magic in the clear ($(magic "$tapf"))" \
            "$tmp/job.out"
    else
        [ "$rc" = 0 ] && [ "$(wrong)" = 0 ] && [ "$(magic "$tapf")" -ge 20 ] && c=0
        check $c "unsealed (the contrast): the frames' magic is on the wire in the clear ($(magic "$tapf") times)" \
            "$tmp/job.out"
    fi
done

# ---- 3, 4: one byte changed on the way
job 1M TEMPO_ENCRYPT=1 RANK1_ENV="LD_PRELOAD=$MITM MITM_TCP=flip"
c=1
[ "$rc" != 0 ] && [ "$(wrong)" = 0 ] &&
    grep -q "rank 1 (host [^)]*) sent bytes that fail authentication (TEMPO_ENCRYPT" "$tmp/job.out" &&
    c=0
check $c "TEMPO_ENCRYPT=1, one byte of rank 1's changed on the way: the job fails, naming rank 1 and why; no wrong result reported" \
    "$tmp/job.out"
# (one iteration, its first large send changed: the result that perf checks is that call's)
iters="-n 1 -w 0"
job 1M TEMPO_ENCRYPT=0 RANK1_ENV="LD_PRELOAD=$MITM MITM_TCP=flip MITM_TCP_N=1"
iters="-n 12 -w 1"
c=1
[ "$(wrong)" -gt 0 ] && ! grep -q "fail authentication" "$tmp/job.out" && c=0
check $c "unsealed (the contrast), the same change: rank 0 reports wrong values (status $rc)" \
    "$tmp/job.out"

# ---- 5: refused at init
job 8 TEMPO_ENCRYPT=1 NOKEY=1
c=1
[ "$rc" != 0 ] && grep -q "TEMPO_ENCRYPT=1 needs a job key" "$tmp/job.out" && c=0
check $c "TEMPO_ENCRYPT=1 without a key: init fails, saying it needs one" "$tmp/job.out"
job 8 TEMPO_ENCRYPT=1 TEMPO_TRANSPORTS=ucx,tcp,^shm
c=1
[ "$rc" != 0 ] && grep -q "TEMPO_ENCRYPT=1 seals tcp only, and TEMPO_TRANSPORTS lists ucx" \
    "$tmp/job.out" && c=0
check $c "TEMPO_ENCRYPT=1 with ucx in TEMPO_TRANSPORTS: init fails, saying only tcp is sealed" \
    "$tmp/job.out"
job 8 RANK1_ENV="TEMPO_ENCRYPT=1"
c=1
[ "$rc" != 0 ] && [ "$(rows)" = 0 ] &&
    grep -q "ranks disagree on the transports.*TEMPO_ENCRYPT" "$tmp/job.out" && c=0
check $c "TEMPO_ENCRYPT=1 on rank 1 only: the job refuses to start, saying the ranks disagree" \
    "$tmp/job.out"
