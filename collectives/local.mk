# collectives/local.mk — public API entry points, schedules, reduction kernels, one file per
# algorithm per collective, selection.
libtempo_core_la_SOURCES += \
	%reldir%/api.c \
	%reldir%/sched.c \
	%reldir%/reduce.c \
	%reldir%/select.c \
	%reldir%/schedq.c \
	%reldir%/autosize.c \
	%reldir%/fold.c \
	%reldir%/allreduce_ring.c \
	%reldir%/allreduce_rhd.c \
	%reldir%/allreduce_rd.c \
	%reldir%/allreduce_shm.c \
	%reldir%/mem.c \
	%reldir%/reduce_scatter_ring.c \
	%reldir%/allgather_ring.c \
	%reldir%/broadcast_tree.c \
	%reldir%/broadcast_pipeline.c \
	%reldir%/reduce_tree.c \
	%reldir%/reduce_pipeline.c \
	%reldir%/alltoall_pairwise.c \
	%reldir%/barrier_dissemination.c \
	%reldir%/sendrecv.c
noinst_HEADERS += %reldir%/coll.h %reldir%/autosize.h %reldir%/reduce_kernels.h
