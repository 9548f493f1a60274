# core/local.mk — status, logging, configuration, memory, clocks, bootstrap, world, engine.
libtempo_core_la_SOURCES += \
	%reldir%/status.c \
	%reldir%/log.c \
	%reldir%/util.c \
	%reldir%/cfg.c \
	%reldir%/dtype.c \
	%reldir%/sock.c \
	%reldir%/auth.c \
	%reldir%/bootstrap.c \
	%reldir%/world.c \
	%reldir%/engine.c \
	%reldir%/check.c \
	%reldir%/blame.c \
	%reldir%/trace.c \
	%reldir%/flight.c
noinst_HEADERS += \
	%reldir%/tempo_int.h \
	%reldir%/auth.h \
	%reldir%/log.h \
	%reldir%/cfg.h \
	%reldir%/dtype.h \
	%reldir%/elem.h \
	%reldir%/sock.h \
	%reldir%/bootstrap.h \
	%reldir%/world.h \
	%reldir%/trace.h \
	%reldir%/flight.h
