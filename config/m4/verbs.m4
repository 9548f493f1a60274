# verbs.m4 — optional dependency: rdma-core libibverbs.
# Detected and reported in this version; see tempo_dep.m4 for the --with-verbs semantics.
AC_DEFUN([TEMPO_CHECK_VERBS], [
    TEMPO_DEP_ARG([verbs], [rdma-core libibverbs])
    TEMPO_DEP_PKG([verbs], [VERBS], [libibverbs], [infiniband/verbs.h], [ibverbs], [ibv_get_device_list])
])
