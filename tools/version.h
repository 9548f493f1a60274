/*
 * tools/version.h — the `--version` line of every installed program (tools, perf programs,
 * tempo-train): "PROGRAM (tempo) VERSION", the package version from config.h (configure.ac's
 * AC_INIT), so that every program of one build reports the same release. The scripts print the same
 * line with the version config.status substituted into them (the .in files of perf/ and tools/).
 *
 * Not the library's run-time version: tempo_version() (tempo.h) is that, and tempo-info prints both.
 * Header-only so that programs that do not link libtempo (tempo-run, the MPI baselines) can use it.
 */
#ifndef TEMPO_TOOLS_VERSION_H
#define TEMPO_TOOLS_VERSION_H

#include "config.h"

#include <stdio.h>

/* Prints "PROG (tempo) VERSION\n" to stdout; PROG is the installed program name. */
static inline void tempo_tool_print_version(const char *prog)
{
    printf("%s (%s) %s\n", prog, PACKAGE_NAME, PACKAGE_VERSION);
}

#endif
