# perf/local.mk — nccl-tests-style benchmarks (one program per collective), the same programs built
# against MPI as a baseline (*_perf_mpi, only when configure found MPI), tempo-compare and
# tempo-netns-run.
#
# Layout: one driver (common.c, verifiable.c) in a convenience library shared by every program; one
# backend library per flavour (backend_tempo.c links libtempo; backend_mpi.c is compiled with
# $(MPI_CFLAGS) and linked with $(MPI_LIBS), never with libtempo); one small file per collective
# holding its descriptor and main(). The perf programs use only include/tempo.h.

noinst_LTLIBRARIES += %reldir%/libperf_common.la %reldir%/libperf_tempo.la
%canon_reldir%_libperf_common_la_SOURCES = %reldir%/common.c %reldir%/verifiable.c %reldir%/devmem.c
%canon_reldir%_libperf_tempo_la_SOURCES = %reldir%/backend_tempo.c
noinst_HEADERS += %reldir%/common.h %reldir%/backend.h %reldir%/verifiable.h %reldir%/util.h \
	%reldir%/devmem.h

TEMPO_PERF_LDADD = %reldir%/libperf_common.la %reldir%/libperf_tempo.la libtempo.la
TEMPO_PERF_MPI_LDADD = %reldir%/libperf_common.la %reldir%/libperf_mpi.la $(MPI_LIBS)

bin_PROGRAMS += \
	%reldir%/all_reduce_perf %reldir%/reduce_scatter_perf %reldir%/all_gather_perf \
	%reldir%/broadcast_perf %reldir%/reduce_perf %reldir%/alltoall_perf %reldir%/sendrecv_perf

%canon_reldir%_all_reduce_perf_SOURCES = %reldir%/all_reduce.c
%canon_reldir%_all_reduce_perf_LDADD = $(TEMPO_PERF_LDADD)
%canon_reldir%_reduce_scatter_perf_SOURCES = %reldir%/reduce_scatter.c
%canon_reldir%_reduce_scatter_perf_LDADD = $(TEMPO_PERF_LDADD)
%canon_reldir%_all_gather_perf_SOURCES = %reldir%/all_gather.c
%canon_reldir%_all_gather_perf_LDADD = $(TEMPO_PERF_LDADD)
%canon_reldir%_broadcast_perf_SOURCES = %reldir%/broadcast.c
%canon_reldir%_broadcast_perf_LDADD = $(TEMPO_PERF_LDADD)
%canon_reldir%_reduce_perf_SOURCES = %reldir%/reduce.c
%canon_reldir%_reduce_perf_LDADD = $(TEMPO_PERF_LDADD)
%canon_reldir%_alltoall_perf_SOURCES = %reldir%/alltoall.c
%canon_reldir%_alltoall_perf_LDADD = $(TEMPO_PERF_LDADD)
%canon_reldir%_sendrecv_perf_SOURCES = %reldir%/sendrecv.c
%canon_reldir%_sendrecv_perf_LDADD = $(TEMPO_PERF_LDADD)

if HAVE_MPI
noinst_LTLIBRARIES += %reldir%/libperf_mpi.la
%canon_reldir%_libperf_mpi_la_SOURCES = %reldir%/backend_mpi.c
%canon_reldir%_libperf_mpi_la_CFLAGS = $(AM_CFLAGS) $(MPI_CFLAGS)

bin_PROGRAMS += \
	%reldir%/all_reduce_perf_mpi %reldir%/reduce_scatter_perf_mpi %reldir%/all_gather_perf_mpi \
	%reldir%/broadcast_perf_mpi %reldir%/reduce_perf_mpi %reldir%/alltoall_perf_mpi \
	%reldir%/sendrecv_perf_mpi

%canon_reldir%_all_reduce_perf_mpi_SOURCES = %reldir%/all_reduce.c
%canon_reldir%_all_reduce_perf_mpi_LDADD = $(TEMPO_PERF_MPI_LDADD)
%canon_reldir%_reduce_scatter_perf_mpi_SOURCES = %reldir%/reduce_scatter.c
%canon_reldir%_reduce_scatter_perf_mpi_LDADD = $(TEMPO_PERF_MPI_LDADD)
%canon_reldir%_all_gather_perf_mpi_SOURCES = %reldir%/all_gather.c
%canon_reldir%_all_gather_perf_mpi_LDADD = $(TEMPO_PERF_MPI_LDADD)
%canon_reldir%_broadcast_perf_mpi_SOURCES = %reldir%/broadcast.c
%canon_reldir%_broadcast_perf_mpi_LDADD = $(TEMPO_PERF_MPI_LDADD)
%canon_reldir%_reduce_perf_mpi_SOURCES = %reldir%/reduce.c
%canon_reldir%_reduce_perf_mpi_LDADD = $(TEMPO_PERF_MPI_LDADD)
%canon_reldir%_alltoall_perf_mpi_SOURCES = %reldir%/alltoall.c
%canon_reldir%_alltoall_perf_mpi_LDADD = $(TEMPO_PERF_MPI_LDADD)
%canon_reldir%_sendrecv_perf_mpi_SOURCES = %reldir%/sendrecv.c
%canon_reldir%_sendrecv_perf_mpi_LDADD = $(TEMPO_PERF_MPI_LDADD)
endif

# Scheduling and overlap: a synthetic model through the bucketer, every policy, with and without
# chunking (perf/overlap_bench --help); tempo-overlap-net runs it on emulated hosts.
bin_PROGRAMS += %reldir%/overlap_bench
%canon_reldir%_overlap_bench_SOURCES = %reldir%/overlap_bench.c
%canon_reldir%_overlap_bench_LDADD = libtempo.la -lm $(PTHREAD_LIBS)

# The lower bound of a shared-memory all-reduce on this host (every buffer shared, spin barriers,
# the best vector kernel; no libtempo): tempo-compare prints it beside tempo's all_reduce times.
bin_PROGRAMS += %reldir%/all_reduce_bound
%canon_reldir%_all_reduce_bound_SOURCES = %reldir%/all_reduce_bound.c

# The scripts are written by config.status from their .in (configure.ac substitutes the version)
# under the tempo-specific names they are installed with; they find each other and the programs
# beside themselves, in the build tree and in $(bindir).
# Side-by-side tempo vs MPI table.
bin_SCRIPTS += %reldir%/tempo-compare
EXTRA_DIST += %reldir%/tempo-compare.in

# One rank per emulated host: network namespaces joined by a bridge, links shaped with tbf (needs
# root; exits 77 without); tempo-overlap-net runs overlap_bench there.
bin_SCRIPTS += %reldir%/tempo-netns-run %reldir%/tempo-overlap-net
EXTRA_DIST += %reldir%/tempo-netns-run.in %reldir%/tempo-overlap-net.in
# The event model of overlap_bench's step (python3): predicted step time per policy.
bin_SCRIPTS += %reldir%/tempo-overlap-model
EXTRA_DIST += %reldir%/tempo-overlap-model.in
# make check: overlap_bench --compute device on 2 ranks (0 wrong, the device does not spin) and the
# model on cases known by hand; about 2 s.
TESTS += %reldir%/smoke_overlap.sh
EXTRA_DIST += %reldir%/smoke_overlap.sh %reldir%/tap.sh

# make check: 2-rank smoke runs of the tempo programs and of the MPI ones (the latter skip when MPI
# was not built).
TESTS += %reldir%/smoke_tempo.sh %reldir%/smoke_mpi.sh %reldir%/smoke_quant.sh
EXTRA_DIST += %reldir%/smoke_mpi.sh %reldir%/smoke_tempo.sh %reldir%/smoke_quant.sh %reldir%/README.md
AM_TESTS_ENVIRONMENT += MPIRUN='$(MPIRUN)'; export MPIRUN;

# make check: the data generator is exact in any reduction order (no MPI, no libtempo needed).
check_PROGRAMS += %reldir%/verifiable_test
%canon_reldir%_verifiable_test_SOURCES = %reldir%/verifiable_test.c
%canon_reldir%_verifiable_test_LDADD = %reldir%/libperf_common.la
TESTS += %reldir%/verifiable_test

# Compression: quant_bench (encode/decode speed, bits per coordinate, normalized variance; one
# process) and qcoll_bench (compressed all-reduce against the fp32 ring in the same run);
# tempo-compress-net runs qcoll_bench on emulated hosts at 1 Gbit/s and 100 Mbit/s.
bin_PROGRAMS += %reldir%/qcoll_bench %reldir%/quant_bench
%canon_reldir%_quant_bench_SOURCES = %reldir%/quant_bench.c
%canon_reldir%_quant_bench_LDADD = libtempo.la -lm
%canon_reldir%_qcoll_bench_SOURCES = %reldir%/qcoll_bench.c
%canon_reldir%_qcoll_bench_LDADD = libtempo.la -lm
bin_SCRIPTS += %reldir%/tempo-compress-net
EXTRA_DIST += %reldir%/tempo-compress-net.in

# The trainer's model against PyTorch on the CPU (needs tests/trainer/test_model and python3-torch).
EXTRA_DIST += %reldir%/model_bench.sh
# tempo-train across emulated hosts (root): uncompressed and ALQ, tic and fifo.
bin_SCRIPTS += %reldir%/tempo-train-net
EXTRA_DIST += %reldir%/tempo-train-net.in

# tempo-train on every layout of issue 17: per-rank memory (measured peak RSS beside the
# Megatron/ZeRO formulas), and -b the pipeline bubble against (P-1)/M.
bin_SCRIPTS += %reldir%/tempo-train-layouts
EXTRA_DIST += %reldir%/tempo-train-layouts.in

# Queue handling: N small non-blocking requests posted, then one wait; time per request for growing
# N (perf/req_bench -h), over shm or tcp.
bin_PROGRAMS += %reldir%/req_bench
%canon_reldir%_req_bench_SOURCES = %reldir%/req_bench.c
%canon_reldir%_req_bench_LDADD = libtempo.la

# Wake-up latency of sleeping waits: a 2-rank ping-pong (or pair of all-reduces) where each side
# computes before it replies (perf/wake_bench.c; the shm doorbell); a development tool, not
# installed.
noinst_PROGRAMS += %reldir%/wake_bench
%canon_reldir%_wake_bench_SOURCES = %reldir%/wake_bench.c
%canon_reldir%_wake_bench_LDADD = libtempo.la

# The ucx transport against tcp, shm and Open MPI's pml ucx, in one run (perf/README.md, "UCX").
EXTRA_DIST += %reldir%/ucx_bench.sh
