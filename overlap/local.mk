# overlap/local.mk — bucketer, TicTac orders.
libtempo_core_la_SOURCES += %reldir%/tictac.c %reldir%/bucketer.c
noinst_HEADERS += %reldir%/tictac.h
