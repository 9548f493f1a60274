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
