# quant/local.mk — compressors, level fitting, codecs, compressed collectives.
libtempo_core_la_SOURCES += %reldir%/quant.c %reldir%/cast.c %reldir%/levels.c %reldir%/fit.c \
	%reldir%/sign.c %reldir%/sparse.c %reldir%/powersgd.c %reldir%/rans.c %reldir%/qcoll.c
noinst_HEADERS += %reldir%/quant.h %reldir%/qmath.h %reldir%/kinds_sparse.h
libtempo_core_la_CPPFLAGS = $(AM_CPPFLAGS) $(ZSTD_CPPFLAGS) $(CRYPTO_CPPFLAGS)
libtempo_core_la_LIBADD += $(ZSTD_LDFLAGS) $(ZSTD_LIBS) $(CRYPTO_LDFLAGS) $(CRYPTO_LIBS)
