# tools/local.mk — command-line tools installed with tempo.

# tempo-run: the local launcher (`tempo-run -n 4 ./prog`). Plain POSIX + Linux, no libtempo.
bin_PROGRAMS += %reldir%/tempo-run
%canon_reldir%_tempo_run_SOURCES = %reldir%/tempo-run.c

# tempo-info: build configuration, environment variables, transports, algorithms.
bin_PROGRAMS += %reldir%/tempo-info
%canon_reldir%_tempo_info_SOURCES = %reldir%/tempo-info.c
%canon_reldir%_tempo_info_LDADD = libtempo.la

# tempo-trace: merge / check / summarize the per-rank TEMPO_TRACE files. A Python 3 script
# (/usr/bin/python3, standard library only), installed as is.
bin_SCRIPTS += %reldir%/tempo-trace
EXTRA_DIST += %reldir%/tempo-trace.in

# Shared by the programs that join their job with MPI (perf/backend_mpi.c,
# tests/mr/difftest.c's MPI build).
noinst_HEADERS += %reldir%/mpi_common.h
