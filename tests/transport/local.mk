# tests/transport/local.mk — the transport conformance suite (tests/transport/conform.sh): what
# every transport must do, run unchanged on each. make check runs it on shm and on tcp; the other
# transports by hand (conform.sh ucx-tcp, ucx-sm, verbs: see its header).

check_PROGRAMS += %reldir%/conform
%canon_reldir%_conform_SOURCES = %reldir%/conform.c
%canon_reldir%_conform_LDADD = libtempo.la

TESTS += %reldir%/conform_shm.sh %reldir%/conform_tcp.sh
EXTRA_DIST += %reldir%/conform.sh %reldir%/conform_shm.sh %reldir%/conform_tcp.sh

# Malformed and truncated frames through the test hook tempo__tl_inject: linked with the
# convenience library (internal symbols), as the unit tests are.
check_PROGRAMS += %reldir%/conform_frames
%canon_reldir%_conform_frames_SOURCES = %reldir%/conform_frames.c
%canon_reldir%_conform_frames_LDADD = libtempo_core.la
