#!/bin/sh
# tests/gpu/perf_device.sh — the benchmarks' -M cuda (perf/devmem.c: buffers in CUDA device
# memory, filled and checked through host copies) on the stand-in driver of tests/gpu/fake_cuda.c,
# whose device memory faults outside its copies: every perf program at 2 and 3 ranks, in and out
# of place, all dtypes of all-reduce at 2 ranks; each must exit 0 (no wrong element), print
# "Buffers: CUDA device memory" and "Out of bounds values : 0 OK". Skipped in a build without CUDA.
# TAP. Run from the build directory (make check does).
B=${top_builddir:-.}
fake="$B/tests/gpu/fake/libcuda.so.1"
if [ ! -f "$fake" ]; then
    echo "1..0 # SKIP this build has no CUDA (no stand-in driver built)"
    exit 0
fi
fake=$(cd "$(dirname "$fake")" && pwd)/libcuda.so.1
n=0
failed=0
run() { # run LABEL RANKS PROGRAM ARGS...
    _label=$1 _ranks=$2 _prog=$3
    shift 3
    n=$((n + 1))
    out=$(TEMPO_CUDA_DRIVER=$fake TEMPO_TIMEOUT=30 timeout 120 "$B/tools/tempo-run" -n "$_ranks" \
        --no-prefix "$B/perf/$_prog" -M cuda "$@" 2>&1)
    rc=$?
    if [ $rc -eq 0 ] && printf '%s\n' "$out" | grep -q "Buffers: CUDA device memory" &&
        printf '%s\n' "$out" | grep -q "Out of bounds values : 0 OK"; then
        echo "ok $n - $_label"
    else
        echo "not ok $n - $_label (exit $rc)"
        printf '%s\n' "$out" | tail -n 12 | sed 's/^/#   /'
        failed=$((failed + 1))
    fi
}
for r in 2 3; do
    for p in all_reduce reduce_scatter all_gather broadcast reduce alltoall sendrecv; do
        run "${p}_perf -M cuda, $r ranks, 8 B-1 MB" "$r" "${p}_perf" -b 8 -e 1M -f 16 -n 2 -w 1
    done
done
run "all_reduce_perf -M cuda, 2 ranks, every dtype and op" 2 all_reduce_perf -b 1K -e 64K -f 8 \
    -d all -o all -n 1 -w 0
run "all_reduce_perf -M cuda -z 0 (non-blocking), 2 ranks" 2 all_reduce_perf -b 8 -e 1M -f 32 \
    -z 0 -n 4 -w 1
echo "1..$n"
[ "$failed" -eq 0 ]
