# mpi.m4 — optional dependency: an MPI implementation, used only by the perf/ baselines (never by
# libtempo). --with-mpi=DIR looks for DIR/bin/mpicc; otherwise $MPICC, then mpicc on PATH.
# Sets MPICC and MPIRUN, and the conditional HAVE_MPI.
#
# The baselines are compiled by the normal $(CC), so the wrapper's flags are substituted too:
# MPI_CFLAGS (-I/-D... from `$MPICC --showme:compile` for Open MPI, or `-compile_info` for MPICH)
# and MPI_LIBS (-L/-l/-Wl... from `--showme:link` or `-link_info`). Presetting MPI_CFLAGS and
# MPI_LIBS in the environment skips the query. MPI counts as found only when $CC builds and links
# an MPI program with those flags.
AC_DEFUN([TEMPO_CHECK_MPI], [
    TEMPO_DEP_ARG([mpi], [MPI for the perf baselines])
    AC_ARG_VAR([MPI_CFLAGS], [compiler flags for MPI programs (default: from the mpicc wrapper)])
    AC_ARG_VAR([MPI_LIBS], [linker flags for MPI programs (default: from the mpicc wrapper)])
    tempo_mpi_found=no
    tempo_mpi_detail="not found"
    AS_CASE(["$with_mpi"],
        [no], [],
        [yes|check], [AS_IF([test -z "$MPICC"], [AC_PATH_PROG([MPICC], [mpicc])])
                      AC_PATH_PROG([MPIRUN], [mpirun])],
        [AC_PATH_PROG([MPICC], [mpicc], [], [$with_mpi/bin])
         AC_PATH_PROG([MPIRUN], [mpirun], [], [$with_mpi/bin])])
    AS_IF([test "x$with_mpi" != xno && test -n "$MPICC"], [
        AC_MSG_CHECKING([whether $MPICC builds MPI programs])
        cat > conftest_mpi.c <<_TEMPO_EOF
#include <mpi.h>
int main(int argc, char **argv) { MPI_Init(&argc, &argv); MPI_Finalize(); return 0; }
_TEMPO_EOF
        AS_IF([$MPICC conftest_mpi.c -o conftest_mpi >&AS_MESSAGE_LOG_FD 2>&1],
              [AC_MSG_RESULT([yes])
               tempo_mpi_found=yes
               tempo_mpi_version=$($MPIRUN --version 2>/dev/null | head -n 1)
               tempo_mpi_detail="$MPICC${tempo_mpi_version:+, $tempo_mpi_version}"],
              [AC_MSG_RESULT([no]); tempo_mpi_detail="$MPICC cannot build an MPI program"])
        AS_IF([test "x$tempo_mpi_found" = xyes], [
            AC_MSG_CHECKING([for the compile and link flags of $MPICC])
            AS_IF([test -z "$MPI_CFLAGS$MPI_LIBS"], [
                AS_IF([tempo_mpi_cc=$($MPICC --showme:compile 2>/dev/null) &&
                       tempo_mpi_ld=$($MPICC --showme:link 2>/dev/null)],
                      [MPI_CFLAGS="$tempo_mpi_cc"; MPI_LIBS="$tempo_mpi_ld"],
                      [tempo_mpi_cc=$($MPICC -compile_info 2>/dev/null) &&
                       tempo_mpi_ld=$($MPICC -link_info 2>/dev/null)],
                      [# MPICH prints whole command lines: keep the flags, drop the compiler
                       # and whatever is not about headers, macros or libraries.
                       MPI_CFLAGS=""; MPI_LIBS=""
                       for tempo_mpi_w in $tempo_mpi_cc; do
                           AS_CASE(["$tempo_mpi_w"],
                               [-I*|-D*|-pthread], [MPI_CFLAGS="$MPI_CFLAGS $tempo_mpi_w"])
                       done
                       for tempo_mpi_w in $tempo_mpi_ld; do
                           AS_CASE(["$tempo_mpi_w"],
                               [-L*|-l*|-Wl,*|-pthread], [MPI_LIBS="$MPI_LIBS $tempo_mpi_w"])
                       done
                       MPI_CFLAGS=${MPI_CFLAGS# }; MPI_LIBS=${MPI_LIBS# }],
                      [MPI_CFLAGS=""; MPI_LIBS="-lmpi"])
            ])
            AC_MSG_RESULT([$MPI_CFLAGS | $MPI_LIBS])
            AC_MSG_CHECKING([whether $CC builds MPI programs with those flags])
            AS_IF([$CC $CFLAGS $MPI_CFLAGS conftest_mpi.c -o conftest_mpi $LDFLAGS $MPI_LIBS \
                       >&AS_MESSAGE_LOG_FD 2>&1],
                  [AC_MSG_RESULT([yes])],
                  [AC_MSG_RESULT([no])
                   tempo_mpi_found=no
                   tempo_mpi_detail="$CC cannot build MPI programs with '$MPI_CFLAGS' '$MPI_LIBS'"])
        ])
        rm -f conftest_mpi.c conftest_mpi
    ])
    AS_IF([test "x$tempo_mpi_found" != xyes], [MPI_CFLAGS=""; MPI_LIBS=""])
    AC_SUBST([MPICC])
    AC_SUBST([MPIRUN])
    AC_SUBST([MPI_CFLAGS])
    TEMPO_DEP_FINISH([mpi], [MPI])
])
