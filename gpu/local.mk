# gpu/local.mk — CUDA device buffers (gpu/cuda.c: the driver loaded at run time, host staging) in
# the library; the CUDA kernels (gpu/kernels.cu) are built by nvcc into their test and benchmark
# (tests/gpu/local.mk), not yet into the library.
libtempo_core_la_SOURCES += %reldir%/cuda.c %reldir%/nccl.c
noinst_HEADERS += %reldir%/cuda.h %reldir%/nccl.h
AM_CPPFLAGS += $(CUDA_CPPFLAGS) $(NCCL_CPPFLAGS)
