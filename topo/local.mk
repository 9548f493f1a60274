# topo/local.mk — host identity (topology discovery will join here).
libtempo_core_la_SOURCES += %reldir%/host.c
noinst_HEADERS += %reldir%/host.h
