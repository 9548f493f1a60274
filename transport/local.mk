# transport/local.mk — point-to-point transports behind one ops table.
libtempo_core_la_SOURCES += \
	%reldir%/transport.c \
	%reldir%/ctrl.c \
	%reldir%/stream.c \
	%reldir%/tcp.c \
	%reldir%/seal.c \
	%reldir%/shm.c
noinst_HEADERS += \
	%reldir%/transport.h \
	%reldir%/tl_int.h \
	%reldir%/seal.h \
	%reldir%/stream.h
# verbs.c only where configure found libibverbs (--with-verbs); its flags are empty otherwise.
# (AM_CPPFLAGS: the library's own CPPFLAGS, set in quant/local.mk, expand it.)
AM_CPPFLAGS += $(VERBS_CPPFLAGS)
libtempo_core_la_LIBADD += $(VERBS_LDFLAGS) $(VERBS_LIBS)
if HAVE_VERBS
libtempo_core_la_SOURCES += %reldir%/verbs.c
endif
# ucx.c only where configure found UCX (--with-ucx); its flags are empty otherwise.
AM_CPPFLAGS += $(UCX_CPPFLAGS)
libtempo_core_la_LIBADD += $(UCX_LDFLAGS) $(UCX_LIBS)
if HAVE_UCX
libtempo_core_la_SOURCES += %reldir%/ucx.c
endif
