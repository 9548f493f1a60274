# hwloc.m4 — optional dependency: hwloc topology discovery.
# Detected and reported in this version; see tempo_dep.m4 for the --with-hwloc semantics.
AC_DEFUN([TEMPO_CHECK_HWLOC], [
    TEMPO_DEP_ARG([hwloc], [hwloc topology discovery])
    TEMPO_DEP_PKG([hwloc], [HWLOC], [hwloc], [hwloc.h], [hwloc], [hwloc_topology_init])
])
