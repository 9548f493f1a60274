# gpu/local.mk — CUDA device buffers (gpu/cuda.c: the driver loaded at run time, host staging;
# gpu/ipc.c: CUDA IPC between the ranks of one host) in the library; the CUDA kernels
# (gpu/kernels.cu) are built by nvcc into their test and benchmark (tests/gpu/local.mk), and, as
# a fatbin that gpu/cuda.c loads through the driver, into the library (without nvcc the library
# has no kernels: device buffers are then always staged through host memory).
libtempo_core_la_SOURCES += %reldir%/cuda.c %reldir%/nccl.c %reldir%/ipc.c
noinst_HEADERS += %reldir%/cuda.h %reldir%/nccl.h %reldir%/nccl_api.h %reldir%/ipc.h
AM_CPPFLAGS += $(CUDA_CPPFLAGS) $(NCCL_CPPFLAGS)

# nvcc's flags for every kernel build: -fmad=false and no fast math (core/elem.h: the host's bits).
TEMPO_NVCC_FLAGS = -std=c++17 -O3 -fmad=false -Xcompiler -ffp-contract=off $(NVCC_GENCODE) \
	-I$(top_srcdir) -I$(top_srcdir)/include -I$(top_builddir)
TEMPO_GPU_KERNEL_SRC = $(top_srcdir)/gpu/kernels.cu
TEMPO_GPU_KERNEL_DEPS = $(TEMPO_GPU_KERNEL_SRC) $(top_srcdir)/gpu/kernels.h \
	$(top_srcdir)/core/elem.h $(top_srcdir)/quant/qmath.h $(top_srcdir)/include/tempo.h
EXTRA_DIST += gpu/kernels.cu gpu/kernels.h

if TEMPO_HAVE_NVCC
# gpu/fatbin.c: the kernels' fatbin (every architecture of --with-cuda-archs) as a byte array.
nodist_libtempo_core_la_SOURCES = %reldir%/fatbin.c
AM_CPPFLAGS += -DTEMPO_HAVE_FATBIN=1
CLEANFILES += %reldir%/fatbin.c %reldir%/kernels.fatbin
%reldir%/fatbin.c: $(TEMPO_GPU_KERNEL_DEPS)
	@$(MKDIR_P) %reldir%
	$(AM_V_GEN)$(NVCC) -fatbin $(TEMPO_NVCC_FLAGS) -o %reldir%/kernels.fatbin \
		$(TEMPO_GPU_KERNEL_SRC) && \
	{ echo '/* generated from gpu/kernels.cu by nvcc -fatbin (gpu/local.mk) */'; \
	  echo '#include <stddef.h>'; \
	  echo 'extern const unsigned char tempo__gpu_fatbin[];'; \
	  echo 'extern const size_t tempo__gpu_fatbin_len;'; \
	  echo '__attribute__((aligned(16))) const unsigned char tempo__gpu_fatbin[] = {'; \
	  od -An -v -tx1 %reldir%/kernels.fatbin | sed -e 's/ \([0-9a-f][0-9a-f]\)/0x\1,/g'; \
	  echo '};'; \
	  echo 'const size_t tempo__gpu_fatbin_len = sizeof(tempo__gpu_fatbin);'; } > $@-t && \
	mv $@-t $@
endif
