# transport/local.mk — point-to-point transports behind one ops table.
libtempo_core_la_SOURCES += \
	%reldir%/transport.c \
	%reldir%/ctrl.c \
	%reldir%/stream.c \
	%reldir%/tcp.c \
	%reldir%/shm.c
noinst_HEADERS += \
	%reldir%/transport.h \
	%reldir%/tl_int.h \
	%reldir%/stream.h

# UCX (config/m4/ucx.m4): the ucx backend, linked into the library when found.
if HAVE_UCX
libtempo_core_la_SOURCES += %reldir%/ucx.c
libtempo_core_la_CFLAGS += $(UCX_CPPFLAGS)
libtempo_core_la_LIBADD += $(UCX_LDFLAGS) $(UCX_LIBS)
endif
