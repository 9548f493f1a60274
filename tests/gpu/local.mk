# tests/gpu/local.mk — CUDA device buffers in the library (gpu_coll: gpu/cuda.c's staging, multi-rank;
# its device part runs where a CUDA device answers), and the CUDA kernels (gpu/kernels.cu) against
# the host's element math.
check_PROGRAMS += %reldir%/gpu_coll
TESTS += %reldir%/gpu_coll
%canon_reldir%_gpu_coll_SOURCES = %reldir%/gpu_coll.c
%canon_reldir%_gpu_coll_LDADD = libtempo.la $(CUDA_LDFLAGS) $(CUDA_LIBS)
%canon_reldir%_gpu_coll_LDFLAGS = $(CUDA_RPATH)
# gpu_coll's and perf_device.sh's stand-in CUDA driver (fake_cuda.c), for their device cases on
# machines without a GPU; perf_device.sh: the perf programs' -M cuda on it.
EXTRA_DIST += %reldir%/fake_cuda.c %reldir%/fake_nccl.c %reldir%/perf_device.sh
TESTS += %reldir%/perf_device.sh
if HAVE_CUDA
check_DATA += %reldir%/fake/libcuda.so.1
CLEANFILES += %reldir%/fake/libcuda.so.1
%reldir%/fake/libcuda.so.1: $(top_srcdir)/%reldir%/fake_cuda.c $(top_srcdir)/core/elem.h
	@$(MKDIR_P) %reldir%/fake
	$(AM_V_CC)$(CC) -shared -fPIC -O1 -Wall $(CUDA_CPPFLAGS) -I$(top_srcdir) \
		-I$(top_srcdir)/include -I$(top_builddir) -o $@ \
		$(top_srcdir)/%reldir%/fake_cuda.c $(PTHREAD_LIBS) -lm
endif
# gpu_coll's stand-in NCCL (fake_nccl.c), for its TEMPO_GPU_BACKEND=nccl jobs, and the shim that
# makes NCCL (the stand-in here, the real one on a GPU) fail a call on demand (nccl_shim.c).
EXTRA_DIST += %reldir%/nccl_shim.c
if HAVE_NCCL
check_DATA += %reldir%/fake/libnccl.so.2 %reldir%/fake/libnccl_shim.so
CLEANFILES += %reldir%/fake/libnccl.so.2 %reldir%/fake/libnccl_shim.so
%reldir%/fake/libnccl_shim.so: $(top_srcdir)/%reldir%/nccl_shim.c $(top_srcdir)/gpu/nccl_api.h
	@$(MKDIR_P) %reldir%/fake
	$(AM_V_CC)$(CC) -shared -fPIC -O1 -Wall $(CUDA_CPPFLAGS) $(NCCL_CPPFLAGS) -I$(top_srcdir) -o $@ \
		$(top_srcdir)/%reldir%/nccl_shim.c $(PTHREAD_LIBS) -ldl
%reldir%/fake/libnccl.so.2: $(top_srcdir)/%reldir%/fake_nccl.c
	@$(MKDIR_P) %reldir%/fake
	$(AM_V_CC)$(CC) -shared -fPIC -O1 -Wall $(CUDA_CPPFLAGS) $(NCCL_CPPFLAGS) -o $@ \
		$(top_srcdir)/%reldir%/fake_nccl.c $(PTHREAD_LIBS) -ldl -lrt
endif
#
# nvcc builds tests/gpu/gpu_kernels (kernels and test in one program, for every architecture of
# --with-cuda-archs) when configure finds the CUDA toolkit with nvcc; gpu_kernels.sh runs it, which
# skips, saying why, where no CUDA device answers, and skips itself in a build without nvcc. The
# kernels are compiled with -fmad=false and without fast math (core/elem.h: the host's bits).
# (TEMPO_NVCC_FLAGS, TEMPO_GPU_KERNEL_SRC and _DEPS: gpu/local.mk)

EXTRA_DIST += %reldir%/gpu_kernels.cu %reldir%/gpu_kernels.sh
TESTS += %reldir%/gpu_kernels.sh

if TEMPO_HAVE_NVCC
check_DATA += %reldir%/gpu_kernels
CLEANFILES += %reldir%/gpu_kernels
%reldir%/gpu_kernels: $(top_srcdir)/%reldir%/gpu_kernels.cu $(TEMPO_GPU_KERNEL_DEPS)
	@$(MKDIR_P) %reldir%
	$(AM_V_GEN)$(NVCC) $(TEMPO_NVCC_FLAGS) -o $@ $(top_srcdir)/%reldir%/gpu_kernels.cu \
		$(TEMPO_GPU_KERNEL_SRC)
endif

# perf/gpu_kernels_bench: the kernels' bandwidth against the device's copy (perf/README.md); built
# on demand (make perf/gpu_kernels_bench), by tests/gpu/device.sh on a GPU machine.
EXTRA_DIST += perf/gpu_kernels_bench.cu %reldir%/device.sh
if TEMPO_HAVE_NVCC
CLEANFILES += perf/gpu_kernels_bench
perf/gpu_kernels_bench: $(top_srcdir)/perf/gpu_kernels_bench.cu $(TEMPO_GPU_KERNEL_DEPS)
	@$(MKDIR_P) perf
	$(AM_V_GEN)$(NVCC) $(TEMPO_NVCC_FLAGS) -o $@ $(top_srcdir)/perf/gpu_kernels_bench.cu \
		$(TEMPO_GPU_KERNEL_SRC)
endif
