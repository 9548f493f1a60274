#!/bin/sh
# tests/gpu/perf_device.sh — the benchmarks' -M cuda (perf/devmem.c: buffers in CUDA device
# memory, filled and checked through host copies) on the stand-in driver of tests/gpu/fake_cuda.c,
# whose device memory faults outside its copies: every perf program at 2 and 3 ranks, in and out
# of place, all dtypes of all-reduce at 2 ranks, and NCCL's five collectives at 1-3 ranks over the
# stand-in NCCL (TEMPO_GPU_BACKEND=nccl); each must exit 0 (no wrong element), print
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
# TEMPO_GPU_BACKEND=nccl on the stand-in NCCL (tests/gpu/fake_nccl.c): the header says so, and
# every result is checked as above
# CUDA IPC (TEMPO_GPU_IPC=1): blocking all-reduces on the device buffers themselves
for r in 2 3 4; do
    TEMPO_GPU_IPC=1 run "all_reduce_perf -M cuda through CUDA IPC, $r ranks, every dtype and op" \
        "$r" all_reduce_perf -b 8 -e 256K -f 8 -d all -o all -n 2 -w 1
    case "$out" in *"through CUDA IPC (TEMPO_GPU_IPC=1)"*) ;; *)
        echo "not ok $n - all_reduce_perf through CUDA IPC, $r ranks: the header does not say IPC"
        failed=$((failed + 1)) ;;
    esac
done
nccl="$B/tests/gpu/fake/libnccl.so.2"
if [ -f "$nccl" ]; then
    nccl=$(cd "$(dirname "$nccl")" && pwd)/libnccl.so.2
    for r in 1 2 3; do
        for p in all_reduce reduce_scatter all_gather broadcast reduce; do
            TEMPO_GPU_BACKEND=nccl TEMPO_NCCL_LIBRARY=$nccl \
                run "${p}_perf -M cuda over NCCL, $r ranks" "$r" "${p}_perf" -b 8 -e 1M -f 16 \
                -n 2 -w 1
            case "$out" in *"NCCL calls (TEMPO_GPU_BACKEND=nccl)"*) ;; *)
                echo "not ok $n - ${p}_perf over NCCL, $r ranks: the header does not say NCCL"
                failed=$((failed + 1)) ;;
            esac
        done
    done
fi
echo "1..$n"
[ "$failed" -eq 0 ]
