# tests/local.mk
include tests/mr/local.mk
include tests/unit/local.mk
include tests/fault/local.mk
include tests/rdma/local.mk
include tests/transport/local.mk

# The TAP producer shared by compiled tests.
noinst_HEADERS += %reldir%/tap.h

# What ./quickstart.sh runs in its address,undefined build (build-asan/, see README.md "Sanitizer
# builds"): every unit and fault test, and the multi-rank tests of the launcher, the scheduled lane
# and the bucketer (progress thread), and the collectives on shm and tcp (at the rank counts that
# quickstart.sh sets with COLL_RANKS), and tempo_mem_alloc memory (mem_win). Run it in any sanitizer build with
#     make check TESTS='$(TEMPO_SANITIZER_TESTS)'
TEMPO_SANITIZER_TESTS = $(TEMPO_UNIT_TESTS) tests/unit/test_trace_tool.sh $(TEMPO_FAULT_TESTS) \
	tests/fault/fault_sched tests/fault/fault_blame tests/fault/fault_flight tests/mr/tempo_run.sh \
	tests/mr/sched.sh \
	tests/mr/bucketer.sh tests/mr/coll_shm.sh tests/mr/coll_tcp.sh tests/mr/difftest.sh \
	tests/mr/mem_win

# Installed use: make install into a temporary DESTDIR, the README's example built (dynamic and
# static, through tempo.pc) and run there, every installed program's name, --version and --help.
TESTS += %reldir%/install.sh
EXTRA_DIST += %reldir%/install.sh
# perf/tempo-compare's fairness to the MPI baseline (its settings, rounds and figures), with a
# stand-in mpirun.
TESTS += %reldir%/compare.sh
EXTRA_DIST += %reldir%/compare.sh

# What `./quickstart.sh sanitize-thread` runs in its thread build (build-tsan/, see README.md
# "Sanitizer builds"): the tests that start threads or worlds (the progress thread of every rank,
# the scheduled lane, the bucketer, compressed collectives, shm and tcp transports): the unit tests
# of the engine, streams, sockets, bootstrap, config, logging and status (the quantizer and
# reduction unit tests are single-threaded: nothing for TSan to see), every fault test, and the
# multi-rank tests at the reduced sizes that quickstart.sh sets (COLL_BIG_BYTES, DET_BIG_BYTES,
# DIFFTEST_CASES; their scripts document them). By hand, in a thread build:
#     make check TESTS='$(TEMPO_TSAN_TESTS)'
TEMPO_TSAN_TESTS = tests/unit/test_status tests/unit/test_cfg tests/unit/test_log \
	tests/unit/test_sock tests/unit/test_bootstrap tests/unit/test_sched tests/unit/test_stream \
	$(TEMPO_FAULT_TESTS) tests/fault/fault_sched tests/fault/fault_blame tests/fault/fault_flood \
	tests/fault/comm_ids tests/mr/sched.sh tests/mr/bucketer.sh tests/mr/qcoll.sh \
	tests/mr/coll_shm.sh tests/mr/coll_tcp.sh tests/mr/determinism.sh tests/mr/difftest.sh
include tests/gpu/local.mk
include tests/fuzz/local.mk
