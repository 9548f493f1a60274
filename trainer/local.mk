# trainer/local.mk — the GPT trainer (tempo-train) and its tests. It uses only include/tempo.h and
# links libtempo.la; the model kernels use OpenMP where configure found it.
#
# The trainer's pieces go into one convenience library (libtrainer.la) that tempo-train and the
# trainer tests link. Sections: model (model.c, optim.c), data (data.c), the trainer program.

noinst_LTLIBRARIES += libtrainer.la
libtrainer_la_SOURCES =
libtrainer_la_CFLAGS = $(AM_CFLAGS) $(OPENMP_CFLAGS)
libtrainer_la_LIBADD = -lm

# ---- model: GPT-2 forward/backward, AdamW, schedule (trainer/model.[ch], trainer/optim.[ch])

# ---- data: tokenizer, token shards, loader (trainer/data.[ch])
libtrainer_la_SOURCES += %reldir%/data.c
noinst_HEADERS += %reldir%/data.h
check_PROGRAMS += %reldir%/test_data
TESTS += %reldir%/test_data
%canon_reldir%_test_data_SOURCES = %reldir%/test_data.c
%canon_reldir%_test_data_LDADD = libtrainer.la

# ---- tempo-train
