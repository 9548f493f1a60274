# tests/local.mk
include tests/mr/local.mk
include tests/unit/local.mk
include tests/fault/local.mk

# The TAP producer shared by compiled tests.
noinst_HEADERS += %reldir%/tap.h

# What ./quickstart.sh runs in its address,undefined build (build-asan/, see README.md "Sanitizer
# builds"): every unit and fault test, and the multi-rank tests of the launcher, the scheduled lane
# and the bucketer (progress thread), and the collectives on shm and tcp (at the rank counts that
# quickstart.sh sets with COLL_RANKS). Run it in any sanitizer build with
#     make check TESTS='$(TEMPO_SANITIZER_TESTS)'
TEMPO_SANITIZER_TESTS = $(TEMPO_UNIT_TESTS) tests/unit/test_trace_tool.sh $(TEMPO_FAULT_TESTS) \
	tests/fault/fault_sched tests/fault/fault_blame tests/mr/tempo_run.sh tests/mr/sched.sh \
	tests/mr/bucketer.sh tests/mr/coll_shm.sh tests/mr/coll_tcp.sh tests/mr/difftest.sh

# Installed use: make install into a temporary DESTDIR, the README's example built (dynamic and
# static, through tempo.pc) and run there, every installed program's name, --version and --help.
TESTS += %reldir%/install.sh
EXTRA_DIST += %reldir%/install.sh
