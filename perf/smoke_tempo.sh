#!/bin/sh
# perf/smoke_tempo.sh — the tempo all_reduce_perf on 2 ranks at tiny sizes, under tools/tempo-run.
#
# The twin of smoke_mpi.sh for the tempo programs: fails on any #wrong or a non-zero exit, never on
# timings. TAP output; skips (plan 1..0 # SKIP) while perf/all_reduce_perf or tools/tempo-run is not
# built. Not in TESTS yet: the library owner adds it (TESTS += perf/smoke_tempo.sh in
# perf/local.mk) once libtempo has its collectives.
builddir=${top_builddir:-.}
prog=$builddir/perf/all_reduce_perf
run=${TEMPO_RUN:-$builddir/tools/tempo-run}
if [ ! -x "$prog" ]; then
    echo "1..0 # SKIP $prog not built (libtempo not linkable yet?)"
    exit 0
fi
if [ ! -x "$run" ]; then
    echo "1..0 # SKIP $run not built"
    exit 0
fi
limit=""
command -v timeout >/dev/null 2>&1 && limit="timeout 300"

echo "1..3"
n=0
fails=0
check() { # description, then the perf flags
    n=$((n + 1))
    desc=$1
    shift
    out=$($limit "$run" -n 2 --no-prefix "$prog" "$@" 2>&1)
    rc=$?
    rows=$(printf '%s\n' "$out" | grep -c '^ *[0-9]')
    if [ $rc -eq 0 ] && [ "$rows" -gt 0 ] &&
        printf '%s\n' "$out" | grep -q '^# Out of bounds values : 0 OK'; then
        echo "ok $n - $desc ($rows rows)"
    else
        echo "not ok $n - $desc (exit $rc, $rows rows)"
        printf '%s\n' "$out" | sed 's/^/# /'
        fails=$((fails + 1))
    fi
}
check "all_reduce_perf -n 2: float sum, 8 B to 64 KiB" -b 8 -e 64K -f 4 -n 2 -w 1
check "all_reduce_perf -n 2: every dtype and op (fp16, bf16, wrapping integers)" \
    -b 8 -e 4K -f 8 -n 1 -w 0 -d all -o all
check "all_reduce_perf -n 2: every dtype and op, non-blocking" \
    -b 8 -e 4K -f 8 -n 1 -w 0 -d all -o all -z 0
[ $fails -eq 0 ]
