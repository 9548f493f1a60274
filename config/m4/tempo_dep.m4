# tempo_dep.m4 — shared machinery for optional dependencies.
#
# TEMPO_DEP_ARG(name, description)
#   Declares --with-name[=DIR]; sets with_<name> to no, yes, a directory, or check (the default).
# TEMPO_DEP_FINISH(name, NAME)
#   After a probe set tempo_<name>_found=yes|no and tempo_<name>_detail: fails configure when the
#   dependency was required, defines TEMPO_HAVE_NAME (0/1) and TEMPO_BUILD_NAME (the summary text),
#   the automake conditional HAVE_NAME, and substitutes NAME_CPPFLAGS, NAME_LDFLAGS, NAME_LIBS.
# TEMPO_DEP_PKG(name, NAME, pkg-module, header, library, function)
#   The common probe: --with-name=DIR looks in DIR/include and DIR/lib{64,}; otherwise pkg-config
#   first, then the default compiler paths.

AC_DEFUN([TEMPO_DEP_ARG], [
    AC_ARG_WITH([$1],
        [AS_HELP_STRING([--with-$1@<:@=DIR@:>@],
            [$2: no = disable; yes or DIR = require (DIR is the install prefix); default: use if found])],
        [], [with_$1=check])
])

AC_DEFUN([TEMPO_DEP_FINISH], [
    AS_IF([test "x$tempo_$1_found" = xyes],
          [tempo_$1_summary="yes ($tempo_$1_detail)"; tempo_$1_have=1],
          [AS_IF([test "x$with_$1" = xno],
                 [tempo_$1_summary="no (disabled by --without-$1)"],
                 [test "x$with_$1" = xcheck],
                 [tempo_$1_summary="no (not found)"],
                 [AC_MSG_ERROR([--with-$1=$with_$1 was given but $1 was not found: $tempo_$1_detail])])
           tempo_$1_have=0
           $2_CPPFLAGS=""; $2_LDFLAGS=""; $2_LIBS=""])
    AC_DEFINE_UNQUOTED([TEMPO_HAVE_$2], [$tempo_$1_have], [Define to 1 if $1 is compiled in])
    AC_DEFINE_UNQUOTED([TEMPO_BUILD_$2], ["$tempo_$1_summary"], [Build summary for $1])
    AM_CONDITIONAL([HAVE_$2], [test "x$tempo_$1_have" = x1])
    AC_SUBST([$2_CPPFLAGS])
    AC_SUBST([$2_LDFLAGS])
    AC_SUBST([$2_LIBS])
])

# TEMPO_DEP_TRY_LINK(name, NAME, header, library, function, cppflags, ldflags)
# Sets tempo_<name>_found=yes and the NAME_* variables when the header compiles and the library links.
AC_DEFUN([TEMPO_DEP_TRY_LINK], [
    tempo_save_CPPFLAGS="$CPPFLAGS"; tempo_save_LDFLAGS="$LDFLAGS"; tempo_save_LIBS="$LIBS"
    CPPFLAGS="$CPPFLAGS $6"; LDFLAGS="$LDFLAGS $7"; LIBS=""
    AS_UNSET([ac_cv_header_]AS_TR_SH([$3]))
    AS_UNSET([ac_cv_lib_$4_$5])
    AC_CHECK_HEADER([$3],
        [AC_CHECK_LIB([$4], [$5],
            [tempo_$1_found=yes; $2_CPPFLAGS="$6"; $2_LDFLAGS="$7"; $2_LIBS="-l$4"],
            [tempo_$1_detail="lib$4 without $5 (flags: $7)"])],
        [tempo_$1_detail="$3 not found (flags: $6)"])
    CPPFLAGS="$tempo_save_CPPFLAGS"; LDFLAGS="$tempo_save_LDFLAGS"; LIBS="$tempo_save_LIBS"
])

AC_DEFUN([TEMPO_DEP_PKG], [
    tempo_$1_found=no
    tempo_$1_detail="not found"
    AS_CASE(["$with_$1"],
        [no], [],
        [yes|check], [
            PKG_CHECK_MODULES([$2], [$3],
                [tempo_$1_found=yes
                 $2_CPPFLAGS="$$2_CFLAGS"
                 tempo_$1_detail="$($PKG_CONFIG --modversion $3 2>/dev/null), pkg-config $3"],
                [TEMPO_DEP_TRY_LINK([$1], [$2], [$4], [$5], [$6], [], [])
                 AS_IF([test "x$tempo_$1_found" = xyes], [tempo_$1_detail="system paths"])])],
        [
            for tempo_libdir in "$with_$1/lib64" "$with_$1/lib"; do
                AS_IF([test "x$tempo_$1_found" != xyes && test -d "$tempo_libdir"],
                      [TEMPO_DEP_TRY_LINK([$1], [$2], [$4], [$5], [$6],
                                          [-I$with_$1/include], [-L$tempo_libdir])])
            done
            AS_IF([test "x$tempo_$1_found" = xyes], [tempo_$1_detail="$with_$1"])
        ])
    TEMPO_DEP_FINISH([$1], [$2])
])
