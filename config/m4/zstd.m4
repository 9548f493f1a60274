# zstd.m4 — optional dependency: zstd compression.
# Detected and reported in this version; see tempo_dep.m4 for the --with-zstd semantics.
AC_DEFUN([TEMPO_CHECK_ZSTD], [
    TEMPO_DEP_ARG([zstd], [zstd compression])
    TEMPO_DEP_PKG([zstd], [ZSTD], [libzstd], [zstd.h], [zstd], [ZSTD_compress])
])
