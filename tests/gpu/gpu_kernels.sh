#!/bin/sh
# tests/gpu/gpu_kernels.sh — runs tests/gpu/gpu_kernels (the CUDA kernels against the host, TAP;
# it skips by itself where no CUDA device answers), or skips where this build has no nvcc.
B=${top_builddir:-.}
if [ -x "$B/tests/gpu/gpu_kernels" ]; then
    exec "$B/tests/gpu/gpu_kernels"
fi
echo "1..0 # SKIP this build has no CUDA kernels (configure found no CUDA toolkit with nvcc)"
