# ucx.m4 — optional dependency: UCX (Unified Communication X).
# Found: transport/ucx.c is built and linked (transport/local.mk); see tempo_dep.m4 for the
# --with-ucx semantics.
AC_DEFUN([TEMPO_CHECK_UCX], [
    TEMPO_DEP_ARG([ucx], [UCX (Unified Communication X)])
    TEMPO_DEP_PKG([ucx], [UCX], [ucx], [ucp/api/ucp.h], [ucp], [ucp_init_version])
])
