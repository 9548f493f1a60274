#!/bin/sh
# tests/gpu/device.sh — every GPU check of this tree in one go, for the lent GPU machine (the tool
# library's `device` entry; DEVELOPERS.md). Run it there from a tree built by
# ../shared/tools/device-build.sh (which prepares it from a `make dist` tarball, the machine having
# no libtoolize):
#
#   here:   make dist && mkdir -p .dev && cp tempo-*.tar.gz ../shared/tools/device-build.sh .dev/
#   there:  sh .dev/device-build.sh 'sh tests/gpu/device.sh'
#
# It prints the device (nvidia-smi), runs the library's device-buffer test (tests/gpu/gpu_coll:
# 2-4 ranks on the one GPU), the CUDA kernel test (tests/gpu/gpu_kernels.sh: every kernel bit for
# bit against the host), the kernel benchmark (perf/gpu_kernels_bench), all_reduce_perf with
# device buffers (-M cuda) beside host buffers at 2-4 ranks, and NCCL's collectives at one rank
# (TEMPO_GPU_BACKEND=nccl) beside the staged path, each under a time limit, and ends with one
# line "device.sh: N passed, N failed".
set -u
B=${top_builddir:-.}
pass=0 fail=0
step() { # step NAME LIMIT CMD...: run, count, keep going
    _n=$1 _t=$2
    shift 2
    echo "==> $_n"
    if timeout "$_t" "$@"; then pass=$((pass + 1)); else echo "==> $_n FAILED ($?)"; fail=$((fail + 1)); fi
}
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm \
    --format=csv,noheader
step "build the GPU programs" 300 make -C "$B" tests/gpu/gpu_kernels perf/gpu_kernels_bench
step "build the library's GPU test" 300 make -C "$B" tests/gpu/gpu_coll tests/gpu/fake/libcuda.so.1 \
    tests/gpu/fake/libnccl.so.2 tests/gpu/fake/libnccl_shim.so
step "device buffers in the collectives (tests/gpu/gpu_coll)" 300 sh -c \
    "'$B/tests/gpu/gpu_coll' | tee /tmp/gpu_coll.tap; ! grep -q '^not ok\|^Bail out' /tmp/gpu_coll.tap"
step "kernels against the host (tests/gpu/gpu_kernels)" 300 sh -c \
    "'$B/tests/gpu/gpu_kernels' | tee /tmp/gpu_kernels.tap; ! grep -q '^not ok\|^Bail out' /tmp/gpu_kernels.tap"
step "kernel bandwidth (perf/gpu_kernels_bench)" 300 "$B/perf/gpu_kernels_bench"
if grep -q '^1\.\.0 # SKIP' /tmp/gpu_kernels.tap 2>/dev/null; then
    echo "==> no CUDA device answers here: the all_reduce_perf -M cuda steps are left out"
else for n in 2 3 4; do # device buffers (host-staged) beside host buffers, n ranks sharing the GPU
    step "all_reduce_perf -M cuda, $n ranks" 200 "$B/tools/tempo-run" -n "$n" --no-prefix \
        "$B/perf/all_reduce_perf" -M cuda -b 8 -e 256M -f 4
    step "all_reduce_perf (host buffers), $n ranks" 200 "$B/tools/tempo-run" -n "$n" --no-prefix \
        "$B/perf/all_reduce_perf" -b 8 -e 256M -f 4
    step "all_reduce_perf -M cuda through CUDA IPC, $n ranks" 200 env TEMPO_GPU_IPC=1 \
        "$B/tools/tempo-run" -n "$n" --no-prefix "$B/perf/all_reduce_perf" -M cuda -b 8 -e 256M -f 4
done
# NCCL (one rank: NCCL refuses two ranks on one GPU) beside tempo's staged path at one rank
for p in all_reduce reduce_scatter all_gather broadcast; do
    step "${p}_perf -M cuda over NCCL, 1 rank" 200 env TEMPO_GPU_BACKEND=nccl \
        "$B/tools/tempo-run" -n 1 --no-prefix "$B/perf/${p}_perf" -M cuda -b 8 -e 256M -f 4
done
step "all_reduce_perf -M cuda, staged, 1 rank" 200 "$B/tools/tempo-run" -n 1 --no-prefix \
    "$B/perf/all_reduce_perf" -M cuda -b 8 -e 256M -f 4
fi
echo "device.sh: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
