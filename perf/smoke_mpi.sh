#!/bin/sh
# perf/smoke_mpi.sh — make check: the MPI baseline all_reduce_perf_mpi on 2 ranks at tiny sizes.
#
# A correctness smoke test of the perf driver (flags, data generator, checks, output), not a
# benchmark: it fails on any #wrong or a non-zero exit, never on timings. TAP output; skips (plan
# 1..0 # SKIP) when configure did not build the MPI programs or mpirun cannot start processes here.
# Uses $MPIRUN (set by make check from configure), else mpirun on PATH.
builddir=${top_builddir:-.}
prog=$builddir/perf/all_reduce_perf_mpi
if [ ! -x "$prog" ]; then
    echo "1..0 # SKIP MPI baseline not built (install libopenmpi-dev openmpi-bin, rerun configure)"
    exit 0
fi
srcdir=${top_srcdir:-$(dirname "$0")/..}
. "$srcdir/tests/mr/launch.sh"
if ! mr_mpirun; then
    echo "1..0 # SKIP $mpi_why"
    exit 0
fi

echo "1..2"
n=0
fails=0
check() { # description, then the perf flags
    n=$((n + 1))
    desc=$1
    shift
    # shellcheck disable=SC2086 # $mpi_limit and $mpi_flags are word lists
    out=$($mpi_limit "$mpirun" -n 2 $mpi_flags "$prog" "$@" 2>&1)
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
check "all_reduce_perf_mpi -n 2: float sum, 8 B to 64 KiB" -b 8 -e 64K -f 4 -n 2 -w 1
check "all_reduce_perf_mpi -n 2: every dtype and op, non-blocking" \
    -b 8 -e 4K -f 8 -n 1 -w 0 -d all -o all -z 0
[ $fails -eq 0 ]
