# sanitizers.m4 — TEMPO_ENABLE_SANITIZERS: --enable-sanitizers=LIST, a build instrumented by the
# compiler's sanitizers, for finding memory errors, undefined behaviour and data races in the tests.
#
# LIST is a comma-separated subset of address, undefined, thread (--enable-sanitizers alone means
# address,undefined). thread cannot be combined with address: the two runtimes exclude each other.
# The flags (-fsanitize=LIST -fno-omit-frame-pointer -g, and -fno-sanitize-recover=undefined so that
# the first UBSan report ends the program and fails its test) are appended to CFLAGS and LDFLAGS, so
# that everything built, the library, its tests, tools, perf programs and the trainer, carries them,
# and so that configure's own link tests below this point run with them (a compiler or a system
# without the runtime fails here, not in the middle of the build). How to run the tests under a
# sanitizer (ASAN_OPTIONS, suppressions, timeouts) is in README.md.
#
# Sets tempo_sanitizers (the list, or "no") for the summary, AC_SUBSTs TEMPO_SANITIZERS and defines
# TEMPO_BUILD_SANITIZERS (the summary text, for tempo-info).
AC_DEFUN([TEMPO_ENABLE_SANITIZERS], [
    AC_ARG_ENABLE([sanitizers],
        [AS_HELP_STRING([--enable-sanitizers@<:@=LIST@:>@],
            [instrument everything built with the compiler's sanitizers; LIST: comma-separated
             address, undefined, thread (thread excludes address); default LIST:
             address,undefined])],
        [], [enable_sanitizers=no])
    AS_CASE(["$enable_sanitizers"],
        [no | ""], [tempo_sanitizers=no],
        [yes], [tempo_sanitizers=address,undefined],
        [tempo_sanitizers=$enable_sanitizers])
    AS_IF([test "x$tempo_sanitizers" != xno], [
        tempo_san_address=no; tempo_san_undefined=no; tempo_san_thread=no
        tempo_san_list=""
        for tempo_san in `echo "$tempo_sanitizers" | tr ',' ' '`; do
            AS_CASE(["$tempo_san"],
                [address | undefined | thread], [],
                [AC_MSG_ERROR(m4_normalize([--enable-sanitizers=$enable_sanitizers: unknown
                    sanitizer '$tempo_san' (choose from address, undefined, thread,
                    comma-separated)]))])
            AS_IF([eval test "x\$tempo_san_$tempo_san" = xno],
                  [eval tempo_san_$tempo_san=yes
                   tempo_san_list="${tempo_san_list:+$tempo_san_list,}$tempo_san"])
        done
        AS_IF([test -z "$tempo_san_list"],
              [AC_MSG_ERROR([--enable-sanitizers=$enable_sanitizers: empty list of sanitizers])])
        AS_IF([test "x$tempo_san_thread" = xyes && test "x$tempo_san_address" = xyes],
              [AC_MSG_ERROR(m4_normalize([--enable-sanitizers=$enable_sanitizers: thread and address
                  cannot be combined (their runtimes exclude each other); configure two builds]))])
        tempo_sanitizers=$tempo_san_list
        TEMPO_SAN_FLAGS="-fsanitize=$tempo_sanitizers -fno-omit-frame-pointer -g"
        AS_IF([test "x$tempo_san_undefined" = xyes],
              [TEMPO_SAN_FLAGS="$TEMPO_SAN_FLAGS -fno-sanitize-recover=undefined"])
        CFLAGS="$CFLAGS $TEMPO_SAN_FLAGS"; LDFLAGS="$LDFLAGS $TEMPO_SAN_FLAGS"
        AC_MSG_CHECKING([whether $CC builds and runs programs with $TEMPO_SAN_FLAGS])
        AC_RUN_IFELSE([AC_LANG_PROGRAM([[#include <stdlib.h>]],
                                       [[char *p = malloc(4); p[0] = 1; free(p);]])],
            [AC_MSG_RESULT([yes])],
            [AC_MSG_RESULT([no])
             AC_MSG_ERROR(m4_normalize([--enable-sanitizers=$tempo_sanitizers: $CC cannot build
                 or run a program with $TEMPO_SAN_FLAGS (is the sanitizer runtime, e.g. libasan,
                 libubsan or libtsan, installed?); see config.log]))],
            [AC_MSG_RESULT([cross-compiling, not run])])
    ])
    AC_SUBST([TEMPO_SANITIZERS], [$tempo_sanitizers])
    AC_DEFINE_UNQUOTED([TEMPO_BUILD_SANITIZERS], ["$tempo_sanitizers"],
                       [Sanitizers the build is instrumented with, or "no"])
])
