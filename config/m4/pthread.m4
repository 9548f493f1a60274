# pthread.m4 — AX_PTHREAD_SIMPLE: compile and link with -pthread (GCC and Clang on Linux).
AC_DEFUN([AX_PTHREAD_SIMPLE], [
    tempo_save_CFLAGS="$CFLAGS"
    CFLAGS="$CFLAGS -pthread"
    AC_MSG_CHECKING([whether $CC accepts -pthread])
    AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <pthread.h>]], [[pthread_self();]])],
        [AC_MSG_RESULT([yes]); PTHREAD_CFLAGS="-pthread"; PTHREAD_LIBS="-pthread"],
        [AC_MSG_RESULT([no]); AC_MSG_ERROR([tempo needs POSIX threads])])
    CFLAGS="$tempo_save_CFLAGS"
    AC_SUBST([PTHREAD_CFLAGS])
    AC_SUBST([PTHREAD_LIBS])
])
