#!/bin/sh
# tests/mr/cfg_used.sh — what tempo-info reports is what a job uses, and what the library refuses
# tempo-info marks refused and a job fails on, naming the variable (issue 27: TEMPO_SHM_RING_BYTES=1
# was accepted silently; tempo-info -t said "rings of 1 bytes" while the rings had 4096).
#
#   rings    for TEMPO_SHM_RING_BYTES = 4K, 64K, 1M (and unset: 256K), tempo-info -c prints the
#            value, tempo-info -t the same number of bytes, and a job of 2 ranks on one host logs
#            (TEMPO_DEBUG=INFO) rings of that many bytes on each rank.
#   refused  for one bad value of each kind of variable (0 and 1 and a non-power of two for the
#            rings, sizes below or beyond their range, a time of 0, a repeated TEMPO_ALGO
#            collective or compressor parameter or log subsystem, a nice value beyond 19, ...):
#            tempo-info -c exits 1 and prints REFUSED with the message, and a job of 2 ranks
#            (tempo-run, perf/all_reduce_perf) fails with TEMPO_ERR_INVALID and the same message.
# test_cfg.c tests every value of every variable against the table; this runs the tools users run.
# POSIX sh, run by the automake harness with top_builddir exported, or by hand:
#     top_builddir=/path/to/build sh tests/mr/cfg_used.sh

srcdir=${top_srcdir:-$(dirname "$0")/../..}
B="${top_builddir:-.}"
INFO="$B/tools/tempo-info"
TR="$B/tools/tempo-run"
PERF="$B/perf/all_reduce_perf"
# the programs built, the caller's TEMPO_* cleared (nothing from the environment may change what
# is tested), TEMPO_TIMEOUT, $tmp (CFG_USED_KEEP=1 keeps it)
. "$srcdir/tests/mr/launch.sh"
mr_prepare CFG_USED "$INFO" "$PERF"

n=0

# job ENV...: 2 ranks of all_reduce_perf on one host with ENV; status in rc, output in job.out.
job() {
    env "$@" timeout 120 "$TR" -n 2 --timeout 60 "$PERF" -b 8 -e 8 -n 1 -w 0 \
        >"$tmp/job.out" 2>&1 </dev/null
    rc=$?
}

bytes_of() { # 4K -> 4096 (the suffixes tempo-info prints)
    case $1 in
    *K) echo $((${1%K} * 1024)) ;;
    *M) echo $((${1%M} * 1048576)) ;;
    *G) echo $((${1%G} * 1073741824)) ;;
    *) echo "$1" ;;
    esac
}

echo "1..$((4 * 3 + 14 * 3))"

# ---------------------------------------------------------------------------------------------- #
for set in "" 4K 64K 1M; do
    if [ -n "$set" ]; then e="TEMPO_SHM_RING_BYTES=$set"; else e="TEMPO_SHM=1"; fi
    env "$e" "$INFO" -c -t >"$tmp/info" 2>&1
    used=$(sed -n 's/^  TEMPO_SHM_RING_BYTES=\([0-9]*[KMG]*\).*/\1/p' "$tmp/info")
    want=${set:-256K}
    if [ "$used" = "$want" ]; then
        ok "${set:-unset}: tempo-info -c prints TEMPO_SHM_RING_BYTES=$used"
    else
        notok "${set:-unset}: tempo-info -c prints TEMPO_SHM_RING_BYTES=$want (got '$used')" \
            "$tmp/info"
    fi
    b=$(bytes_of "$used")
    if grep -q "rings of $b bytes per direction" "$tmp/info"; then
        ok "${set:-unset}: tempo-info -t says rings of $b bytes"
    else
        notok "${set:-unset}: tempo-info -t says rings of $b bytes" "$tmp/info"
    fi
    job "$e" TEMPO_DEBUG=INFO TEMPO_DEBUG_SUBSYS=INIT
    got=$(grep -c "shm: 2 ranks on this host, rings of $b bytes" "$tmp/job.out")
    if [ "$rc" -eq 0 ] && [ "$got" -eq 2 ]; then
        ok "${set:-unset}: a job of 2 ranks uses rings of $b bytes on both ranks"
    else
        notok "${set:-unset}: a job of 2 ranks uses rings of $b bytes on both ranks (status $rc," \
            "$got ranks say so)" "$tmp/job.out"
    fi
done

# ---------------------------------------------------------------------------------------------- #
# VARIABLE VALUE: refused by tempo-info and by a job, with the same message. (TEMPO_RANK, _SIZE and
# _LOCAL_SIZE are tempo-run's to set; test_cfg.c has their ranges and pairs.)
while read -r var value; do
    [ -z "$var" ] && continue
    env "$var=$value" "$INFO" -c >"$tmp/info" 2>&1
    irc=$?
    msg=$(sed -n "/^  $var='/{n;s/^      //p;}" "$tmp/info")
    if [ "$irc" -eq 1 ] && grep -q "^  $var='$value'   REFUSED" "$tmp/info" &&
        case $msg in "$var='$value' is not valid: "*) true ;; *) false ;; esac; then
        ok "$var=$value: tempo-info -c exits 1 and says REFUSED: $msg"
    else
        notok "$var=$value: tempo-info -c exits 1 and says REFUSED (status $irc)" \
            "$tmp/info"
    fi
    env "$var=$value" "$INFO" -t >"$tmp/info_t" 2>&1
    if grep -q "^  shm .*not usable: the configuration is refused" "$tmp/info_t"; then
        ok "$var=$value: tempo-info -t says the shm transport is not usable"
    else
        notok "$var=$value: tempo-info -t says the shm transport is not usable" "$tmp/info_t"
    fi
    job "$var=$value"
    if [ "$rc" -ne 0 ] && [ -n "$msg" ] &&
        grep -qF "TEMPO_ERR_INVALID: $msg" "$tmp/job.out"; then
        ok "$var=$value: a job fails with TEMPO_ERR_INVALID and the same message"
    else
        notok "$var=$value: a job fails with TEMPO_ERR_INVALID and the same message (status $rc)" \
            "$tmp/job.out"
    fi
done <<'EOF'
TEMPO_SHM_RING_BYTES 0
TEMPO_SHM_RING_BYTES 1
TEMPO_SHM_RING_BYTES 100000
TEMPO_SHM_RING_BYTES 2G
TEMPO_SHM_COLL_BYTES 1
TEMPO_CHUNK_BYTES 1
TEMPO_BUCKET_BYTES 0
TEMPO_TAC_WARMUP 0
TEMPO_TIMEOUT 0
TEMPO_SPIN 1h
TEMPO_ALGO allreduce:ring,allreduce:rd
TEMPO_COMPRESS alq:bits=3,bits=4
TEMPO_DEBUG_SUBSYS INIT,INIT
TEMPO_PROGRESS_NICE 20
EOF
