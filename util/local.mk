# util/local.mk — plain helpers shared by the programs of this tree (tools, perf, tempo-train, the
# tests): header-only, without libtempo or MPI (util/helpers.h: the monotonic clock, the size
# parser, the `--version` line, the check that an MPI program was not started by tempo-run).
noinst_HEADERS += %reldir%/helpers.h
