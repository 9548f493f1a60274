# cuda.m4 — optional dependency: the CUDA toolkit (nvcc, cuda_runtime.h, libcudart).
# Default search: --with-cuda=DIR, else $CUDA_HOME, else /usr/local/cuda. Detected and reported in this
# version; nothing is compiled with nvcc yet. Sets NVCC (path) and CUDA_HOME for later use.
AC_DEFUN([TEMPO_CHECK_CUDA], [
    TEMPO_DEP_ARG([cuda], [CUDA toolkit])
    tempo_cuda_found=no
    tempo_cuda_detail="not found"
    AS_IF([test "x$with_cuda" != xno], [
        AS_CASE(["$with_cuda"],
            [yes|check], [tempo_cuda_dirs="${CUDA_HOME:-} /usr/local/cuda"],
            [tempo_cuda_dirs="$with_cuda"])
        for tempo_dir in $tempo_cuda_dirs; do
            AS_IF([test "x$tempo_cuda_found" = xyes], [break])
            AS_IF([test -f "$tempo_dir/include/cuda_runtime.h"], [
                tempo_cuda_libdir="$tempo_dir/lib64"
                AS_IF([test -d "$tempo_cuda_libdir"], [], [tempo_cuda_libdir="$tempo_dir/lib"])
                TEMPO_DEP_TRY_LINK([cuda], [CUDA], [cuda_runtime.h], [cudart], [cudaGetDeviceCount],
                                   [-I$tempo_dir/include], [-L$tempo_cuda_libdir])
                AS_IF([test "x$tempo_cuda_found" = xyes], [
                    CUDA_HOME="$tempo_dir"
                    CUDA_RPATH="-Wl,-rpath,$tempo_cuda_libdir"
                    tempo_save_CPPFLAGS="$CPPFLAGS"; CPPFLAGS="$CPPFLAGS -I$tempo_dir/include"
                    AC_COMPUTE_INT([tempo_cuda_version], [CUDART_VERSION], [[#include <cuda_runtime_api.h>]],
                                   [tempo_cuda_version=0])
                    CPPFLAGS="$tempo_save_CPPFLAGS"
                    tempo_cuda_vstr="$(( tempo_cuda_version / 1000 )).$(( (tempo_cuda_version % 1000) / 10 ))"
                    AC_PATH_PROG([NVCC], [nvcc], [], [$tempo_dir/bin])
                    AS_IF([test -n "$NVCC"], [tempo_cuda_nvcc=", nvcc"], [tempo_cuda_nvcc=", no nvcc"])
                    tempo_cuda_detail="$tempo_cuda_vstr, $tempo_dir$tempo_cuda_nvcc"
                ])
            ], [tempo_cuda_detail="no cuda_runtime.h under $tempo_dir/include"])
        done
    ])
    # The CUDA kernels (gpu/kernels.cu; tests/gpu) are compiled by nvcc for these architectures
    # (machine code for each, and PTX of the last for newer GPUs to compile at load time).
    AC_ARG_WITH([cuda-archs],
        [AS_HELP_STRING([--with-cuda-archs=LIST],
                        [GPU architectures (compute capabilities without the dot) the CUDA kernels
                         are compiled for @<:@75 80 86 89 90@:>@])],
        [], [with_cuda_archs="75 80 86 89 90"])
    NVCC_GENCODE=
    tempo_cuda_last=
    for tempo_a in $with_cuda_archs; do
        AS_CASE([$tempo_a], [*[[!0-9]]*|""], [AC_MSG_ERROR([--with-cuda-archs: '$tempo_a' is not a compute capability like 80])])
        NVCC_GENCODE="$NVCC_GENCODE -gencode arch=compute_$tempo_a,code=sm_$tempo_a"
        tempo_cuda_last=$tempo_a
    done
    AS_IF([test -n "$tempo_cuda_last"],
          [NVCC_GENCODE="$NVCC_GENCODE -gencode arch=compute_$tempo_cuda_last,code=compute_$tempo_cuda_last"])
    AC_SUBST([NVCC_GENCODE])
    AS_IF([test "x$tempo_cuda_found" = xyes && test -n "$NVCC"],
          [tempo_cuda_detail="$tempo_cuda_detail, kernels for sm `echo $with_cuda_archs`"])
    AM_CONDITIONAL([TEMPO_HAVE_NVCC], [test "x$tempo_cuda_found" = xyes && test -n "$NVCC"])
    AC_SUBST([CUDA_HOME])
    AC_SUBST([CUDA_RPATH])
    TEMPO_DEP_FINISH([cuda], [CUDA])
])
