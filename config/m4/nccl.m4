# nccl.m4 — optional dependency: NCCL (probed only when CUDA was found; NCCL ships no .pc file).
# Default search: --with-nccl=DIR, else $NCCL_HOME, else the CUDA directory (where this machine keeps it).
AC_DEFUN([TEMPO_CHECK_NCCL], [
    TEMPO_DEP_ARG([nccl], [NCCL])
    tempo_nccl_found=no
    tempo_nccl_detail="not found"
    AS_IF([test "x$with_nccl" != xno && test "x$tempo_cuda_found" != xyes],
          [tempo_nccl_detail="needs CUDA"],
          [test "x$with_nccl" != xno], [
        AS_CASE(["$with_nccl"],
            [yes|check], [tempo_nccl_dirs="${NCCL_HOME:-} $CUDA_HOME /usr"],
            [tempo_nccl_dirs="$with_nccl"])
        for tempo_dir in $tempo_nccl_dirs; do
            AS_IF([test "x$tempo_nccl_found" = xyes], [break])
            AS_IF([test -f "$tempo_dir/include/nccl.h"], [
                for tempo_libdir in "$tempo_dir/lib64" "$tempo_dir/lib" "$tempo_dir/lib/x86_64-linux-gnu"; do
                    AS_IF([test "x$tempo_nccl_found" != xyes && test -d "$tempo_libdir"],
                          [TEMPO_DEP_TRY_LINK([nccl], [NCCL], [nccl.h], [nccl], [ncclCommInitRank],
                                              [-I$tempo_dir/include $CUDA_CPPFLAGS],
                                              [-L$tempo_libdir $CUDA_LDFLAGS])])
                done
                AS_IF([test "x$tempo_nccl_found" = xyes], [
                    NCCL_CPPFLAGS="-I$tempo_dir/include"
                    tempo_save_CPPFLAGS="$CPPFLAGS"; CPPFLAGS="$CPPFLAGS -I$tempo_dir/include $CUDA_CPPFLAGS"
                    AC_COMPUTE_INT([tempo_nccl_major], [NCCL_MAJOR], [[#include <nccl.h>]], [tempo_nccl_major=0])
                    AC_COMPUTE_INT([tempo_nccl_minor], [NCCL_MINOR], [[#include <nccl.h>]], [tempo_nccl_minor=0])
                    AC_COMPUTE_INT([tempo_nccl_patch], [NCCL_PATCH], [[#include <nccl.h>]], [tempo_nccl_patch=0])
                    CPPFLAGS="$tempo_save_CPPFLAGS"
                    tempo_nccl_detail="$tempo_nccl_major.$tempo_nccl_minor.$tempo_nccl_patch, $tempo_dir"
                ])
            ])
        done
    ])
    TEMPO_DEP_FINISH([nccl], [NCCL])
])
