# tests/mr/local.mk — multi-rank tests: shell scripts that start real processes through tempo-run.
TESTS += %reldir%/tempo_run.sh
EXTRA_DIST += %reldir%/tempo_run.sh

# Collective correctness (coll_shm.sh: every rank on one host, shared memory; coll_tcp.sh: every
# rank its own host through TEMPO_HOST_ID=%r, TCP) and determinism, rank counts 1 to 8. Both
# coll_*.sh run coll_run.sh, which launches coll_test once per rank count and turns the ranks'
# result files into TAP.
TESTS += %reldir%/coll_shm.sh %reldir%/coll_tcp.sh %reldir%/determinism.sh
EXTRA_DIST += %reldir%/coll_shm.sh %reldir%/coll_tcp.sh %reldir%/coll_run.sh \
	%reldir%/determinism.sh %reldir%/results.awk %reldir%/launch.sh
check_PROGRAMS += %reldir%/coll_test %reldir%/determinism
noinst_HEADERS += %reldir%/mrtest.h %reldir%/exact.h
%canon_reldir%_coll_test_SOURCES = %reldir%/coll_test.c
%canon_reldir%_coll_test_LDADD = libtempo.la
%canon_reldir%_determinism_SOURCES = %reldir%/determinism.c
%canon_reldir%_determinism_LDADD = libtempo.la

# Scheduled requests (priorities, chunking, the coordinator's order): sched.sh launches sched_test
# at several rank counts, on shm and tcp, under several settings.
TESTS += %reldir%/sched.sh
EXTRA_DIST += %reldir%/sched.sh
check_PROGRAMS += %reldir%/sched_test
%canon_reldir%_sched_test_SOURCES = %reldir%/sched_test.c
%canon_reldir%_sched_test_LDADD = libtempo.la

# The auto credit and chunk size on real links: autosize.sh launches autosize_run on 2 emulated
# hosts at 100 Mbit/s (root: network namespaces) and on shared memory.
TESTS += %reldir%/autosize.sh
EXTRA_DIST += %reldir%/autosize.sh
check_PROGRAMS += %reldir%/autosize_run
%canon_reldir%_autosize_run_SOURCES = %reldir%/autosize_run.c
%canon_reldir%_autosize_run_LDADD = libtempo.la

# The bucketer (fusion, readiness, skips, accumulation, policies, errors) and its timeline:
# bucketer.sh launches bucketer_test and checks the TEMPO_TRACE files with tools/tempo-trace.
TESTS += %reldir%/bucketer.sh
EXTRA_DIST += %reldir%/bucketer.sh
check_PROGRAMS += %reldir%/bucketer_test
%canon_reldir%_bucketer_test_SOURCES = %reldir%/bucketer_test.c
%canon_reldir%_bucketer_test_LDADD = libtempo.la

# Compressed all-reduce and reduce-scatter (quant/qcoll.c): qcoll.sh launches qcoll_test at several
# rank counts, on shm and tcp.
TESTS += %reldir%/qcoll.sh
EXTRA_DIST += %reldir%/qcoll.sh
check_PROGRAMS += %reldir%/qcoll_test
%canon_reldir%_qcoll_test_SOURCES = %reldir%/qcoll_test.c
%canon_reldir%_qcoll_test_LDADD = libtempo.la -lm

# Randomized differential test (issue 15): difftest.sh launches difftest at 1-7 ranks on shm and
# on tcp; every rank checks random cases (collectives, dtypes, ops, counts, layouts, algorithms,
# lanes, split communicators, batches of requests) from a seed against an exact reference.
TESTS += %reldir%/difftest.sh
EXTRA_DIST += %reldir%/difftest.sh
check_PROGRAMS += %reldir%/difftest
%canon_reldir%_difftest_SOURCES = %reldir%/difftest.c
%canon_reldir%_difftest_LDADD = libtempo.la

# Open MPI as a second reference (only where configure found MPI): difftest_mpi is difftest.c
# built with -DDIFFTEST_MPI; it runs the same cases through MPI and writes the hashes of the
# results, which difftest.sh compares with difftest's (--hashes). libtempo only for its tables
# (algorithm list, names): it never creates a tempo communicator.
if HAVE_MPI
check_PROGRAMS += %reldir%/difftest_mpi
%canon_reldir%_difftest_mpi_SOURCES = %reldir%/difftest.c
%canon_reldir%_difftest_mpi_CPPFLAGS = $(AM_CPPFLAGS) -DDIFFTEST_MPI
%canon_reldir%_difftest_mpi_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)
%canon_reldir%_difftest_mpi_LDADD = libtempo.la $(MPI_LIBS)
endif

# The shm doorbell (issue 17): a rank sleeping in a wait is woken by a same-host peer's ring write
# and shm all-reduce counters, not by its 1 ms timeout (tests/mr/doorbell.c; about 0.5 s). It forks
# its two ranks with tests/fault/job.h and links the convenience library to read the world's wake
# counters.
check_PROGRAMS += %reldir%/doorbell
TESTS += %reldir%/doorbell
%canon_reldir%_doorbell_SOURCES = %reldir%/doorbell.c
%canon_reldir%_doorbell_LDADD = libtempo_core.la

# Every algorithm of every collective on communicators of one rank (a one-rank job, one-rank
# sub-communicators on shm and on tcp), forced by attribute, with a priority and by TEMPO_ALGO
# (tests/mr/one_rank.c; forks its ranks with tests/fault/job.h, TAP).
check_PROGRAMS += %reldir%/one_rank
TESTS += %reldir%/one_rank
%canon_reldir%_one_rank_SOURCES = %reldir%/one_rank.c
%canon_reldir%_one_rank_LDADD = libtempo.la

# What tempo-info reports is what a job uses, and a refused TEMPO_* value fails tempo-info -c and a
# job alike, with the same message (tests/mr/cfg_used.sh: tempo-info, tempo-run, all_reduce_perf).
TESTS += %reldir%/cfg_used.sh
EXTRA_DIST += %reldir%/cfg_used.sh
# The transport table as users drive it: tempo-info -t, TEMPO_TRANSPORTS orders and exclusions, the
# per-peer choice logged at INFO, and the refusals (bad values, disagreeing ranks, unreachable peers).
TESTS += %reldir%/transports.sh
EXTRA_DIST += %reldir%/transports.sh
# TEMPO_ENCRYPT against a man in the middle of one rank's tcp connections (tests/transport/libtcp_mitm.so).
TESTS += %reldir%/sealed.sh
EXTRA_DIST += %reldir%/sealed.sh
# TEMPO_IFNAME: the data transport at a chosen interface (a veth in a namespace of its own).
TESTS += %reldir%/ifname.sh
EXTRA_DIST += %reldir%/ifname.sh

# The shm all-reduce's direct protocol (process_vm_readv) and its fallback: exact results either
# way, the ranks agreeing on one (a rank denied process_vm_readv by seccomp makes all copy), and
# TEMPO_SHM_CMA=0 (tests/mr/shm_cma.c; forks its ranks with tests/fault/job.h, TAP; about 5 s).
check_PROGRAMS += %reldir%/shm_cma
TESTS += %reldir%/shm_cma
%canon_reldir%_shm_cma_SOURCES = %reldir%/shm_cma.c
%canon_reldir%_shm_cma_LDADD = libtempo.la

# tempo_mem_alloc memory and the all-reduce that reads it in place: exact results, bitwise equal to
# the staged protocol's, at 2-4 ranks; the API's errors; ranks that mix window and malloc'd buffers
# all fail at once (tests/mr/mem_win.c; forks its ranks with tests/fault/job.h, TAP; about 10 s).
check_PROGRAMS += %reldir%/mem_win
TESTS += %reldir%/mem_win
%canon_reldir%_mem_win_SOURCES = %reldir%/mem_win.c
%canon_reldir%_mem_win_LDADD = libtempo.la
