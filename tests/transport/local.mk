# tests/transport/local.mk — the transport conformance suite (tests/transport/conform.sh): what
# every transport must do, run unchanged on each. make check runs it on shm (conform_shm.sh: the
# point-to-point and frame layer, about 80 s on the 2-core VM) and on tcp (conform_tcp.sh: every
# layer, about 4 to 5 minutes); the other transports by hand: conform.sh ucx-tcp, ucx-sm, ucx-sm-zcopy, verbs (see
# its header), which skip where tempo-info does not list them as available.

# The point-to-point program (public API) and the frame program (the test hook tempo__tl_inject:
# linked with the convenience library for internal symbols, as the unit tests are).
check_PROGRAMS += %reldir%/conform %reldir%/conform_frames
%canon_reldir%_conform_SOURCES = %reldir%/conform.c
%canon_reldir%_conform_LDADD = libtempo.la
%canon_reldir%_conform_frames_SOURCES = %reldir%/conform_frames.c
%canon_reldir%_conform_frames_LDADD = libtempo_core.la

TESTS += %reldir%/conform_shm.sh %reldir%/conform_tcp.sh
EXTRA_DIST += %reldir%/conform.sh %reldir%/conform_shm.sh %reldir%/conform_tcp.sh
# tcp with TEMPO_ENCRYPT=1 (conform_tcp_sealed.sh: the conform layer and the collectives at 2 and
# 3 ranks, every byte sealed)
TESTS += %reldir%/conform_tcp_sealed.sh
EXTRA_DIST += %reldir%/conform_tcp_sealed.sh

# ucx, both ways UCX reaches a peer on one host (conform_ucx_tcp.sh: UCX_TLS=tcp,self, UCP streams
# over sockets; conform_ucx_sm.sh: UCX_TLS=sm,cma,self, shared memory and cma, whose endpoints
# have no peer-failure handling and so stream every payload): every layer, as conform_tcp.sh; and
# UCX's zero copy (conform_ucx_zcopy.sh: sm,cma with TEMPO_UCX_ZCOPY_ALWAYS=1, the cases in which
# no rank dies); skipped without UCX.
TESTS += %reldir%/conform_ucx_tcp.sh %reldir%/conform_ucx_sm.sh %reldir%/conform_ucx_zcopy.sh
EXTRA_DIST += %reldir%/conform_ucx_tcp.sh %reldir%/conform_ucx_sm.sh %reldir%/conform_ucx_zcopy.sh

# A man in the middle of one rank's UCX streams (ucx_mitm.c: alters or drops the first bytes on each
# endpoint, where the ucx transport proves the job key), LD_PRELOADed by tests/mr/transports.sh.
EXTRA_DIST += %reldir%/ucx_mitm.c
if HAVE_UCX
check_DATA += %reldir%/libucx_mitm.so
CLEANFILES += %reldir%/libucx_mitm.so
%reldir%/libucx_mitm.so: $(top_srcdir)/%reldir%/ucx_mitm.c
	$(AM_V_CC)$(CC) -shared -fPIC -O1 -Wall $(UCX_CPPFLAGS) -o $@ $(top_srcdir)/%reldir%/ucx_mitm.c -ldl
endif

# A man in the middle of one rank's tcp connections (tcp_mitm.c: taps every byte sent, or flips
# one), LD_PRELOADed by tests/mr/sealed.sh.
EXTRA_DIST += %reldir%/tcp_mitm.c
check_DATA += %reldir%/libtcp_mitm.so
CLEANFILES += %reldir%/libtcp_mitm.so
%reldir%/libtcp_mitm.so: $(top_srcdir)/%reldir%/tcp_mitm.c
	$(AM_V_CC)$(CC) -shared -fPIC -O1 -Wall -o $@ $(top_srcdir)/%reldir%/tcp_mitm.c -ldl
