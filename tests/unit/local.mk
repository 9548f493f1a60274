# tests/unit/local.mk — unit tests: one TAP program per module (tests/unit/test_<module>.c).
#
# They link the convenience library libtempo_core.la, not libtempo.la, to reach internal (hidden)
# symbols, and print TAP themselves, so they go straight into TESTS (LOG_DRIVER is the TAP driver).
# None of them needs a network beyond loopback or more than one process of tempo at a time.

TEMPO_UNIT_TESTS = \
	%reldir%/test_status \
	%reldir%/test_cfg \
	%reldir%/test_dtype \
	%reldir%/test_log \
	%reldir%/test_sock \
	%reldir%/test_bootstrap \
	%reldir%/test_reduce \
	%reldir%/test_sched \
	%reldir%/test_autosize \
	%reldir%/test_stream \
	%reldir%/test_tictac \
	%reldir%/test_qrans \
	%reldir%/test_qfit \
	%reldir%/test_qsparse \
	%reldir%/test_quant \
	%reldir%/test_qmath \
	%reldir%/test_flight \
	%reldir%/test_auth

check_PROGRAMS += $(TEMPO_UNIT_TESTS)
TESTS += $(TEMPO_UNIT_TESTS)
noinst_HEADERS += %reldir%/tu.h

%canon_reldir%_test_auth_SOURCES = %reldir%/test_auth.c
%canon_reldir%_test_auth_LDADD = libtempo_core.la
%canon_reldir%_test_status_SOURCES = %reldir%/test_status.c
%canon_reldir%_test_status_LDADD = libtempo_core.la
%canon_reldir%_test_cfg_SOURCES = %reldir%/test_cfg.c
%canon_reldir%_test_cfg_LDADD = libtempo_core.la
%canon_reldir%_test_dtype_SOURCES = %reldir%/test_dtype.c
%canon_reldir%_test_dtype_LDADD = libtempo_core.la
%canon_reldir%_test_log_SOURCES = %reldir%/test_log.c
%canon_reldir%_test_log_LDADD = libtempo_core.la
%canon_reldir%_test_sock_SOURCES = %reldir%/test_sock.c
%canon_reldir%_test_sock_LDADD = libtempo_core.la
%canon_reldir%_test_bootstrap_SOURCES = %reldir%/test_bootstrap.c
%canon_reldir%_test_bootstrap_LDADD = libtempo_core.la
%canon_reldir%_test_reduce_SOURCES = %reldir%/test_reduce.c
%canon_reldir%_test_reduce_LDADD = libtempo_core.la
%canon_reldir%_test_sched_SOURCES = %reldir%/test_sched.c
%canon_reldir%_test_sched_LDADD = libtempo_core.la
%canon_reldir%_test_autosize_SOURCES = %reldir%/test_autosize.c
%canon_reldir%_test_autosize_LDADD = libtempo_core.la
%canon_reldir%_test_stream_SOURCES = %reldir%/test_stream.c
%canon_reldir%_test_stream_LDADD = libtempo_core.la
%canon_reldir%_test_tictac_SOURCES = %reldir%/test_tictac.c
%canon_reldir%_test_tictac_LDADD = libtempo_core.la
%canon_reldir%_test_qrans_SOURCES = %reldir%/test_qrans.c
%canon_reldir%_test_qrans_LDADD = libtempo_core.la $(ZSTD_LIBS) -lm
%canon_reldir%_test_qfit_SOURCES = %reldir%/test_qfit.c
%canon_reldir%_test_qfit_LDADD = libtempo_core.la -lm
%canon_reldir%_test_qsparse_SOURCES = %reldir%/test_qsparse.c
%canon_reldir%_test_qsparse_LDADD = libtempo_core.la -lm
%canon_reldir%_test_quant_SOURCES = %reldir%/test_quant.c
%canon_reldir%_test_quant_LDADD = libtempo_core.la -lm
%canon_reldir%_test_qmath_SOURCES = %reldir%/test_qmath.c
%canon_reldir%_test_qmath_LDADD = libtempo_core.la -lm
%canon_reldir%_test_flight_SOURCES = %reldir%/test_flight.c
%canon_reldir%_test_flight_LDADD = libtempo_core.la

# tools/tempo-trace (merge, check, summary, flight) on synthetic files: a shell TAP test (.sh, run
# by SH_LOG_DRIVER); it skips itself without /usr/bin/python3.
TESTS += %reldir%/test_trace_tool.sh
EXTRA_DIST += %reldir%/test_trace_tool.sh
