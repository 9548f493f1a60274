# ucx.m4 — optional dependency: UCX (Unified Communication X).
# Found: transport/ucx.c is built and linked (transport/local.mk); see tempo_dep.m4 for the
# --with-ucx semantics.
AC_DEFUN([TEMPO_CHECK_UCX], [
    TEMPO_DEP_ARG([ucx], [UCX (Unified Communication X)])
    TEMPO_DEP_PKG([ucx], [UCX], [ucx], [ucp/api/ucp.h], [ucp], [ucp_init_version])
    # What a static link needs (tempo.pc's Libs.private): UCX's static libraries must keep their
    # initialisers (pkg-config --static adds -Wl,--undefined=ucp_global_init and the like); with
    # the plain list a static program aborts in UCX's first call.
    UCX_STATIC_LIBS="$UCX_LIBS"
    AS_IF([test "x$tempo_ucx_found" = xyes && test -n "$PKG_CONFIG" &&
           $PKG_CONFIG --exists ucx 2>/dev/null],
          [UCX_STATIC_LIBS=`$PKG_CONFIG --static --libs ucx`])
    AC_SUBST([UCX_STATIC_LIBS])
])
