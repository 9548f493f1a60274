# trainer/local.mk — the GPT trainer (tempo-train) and its tests. It uses only include/tempo.h (and
# util/helpers.h, header-only plain helpers) and links libtempo.la; the model kernels use OpenMP
# where configure found it.
#
# The trainer's pieces go into one convenience library (libtrainer.la) that tempo-train and the
# trainer tests link; the tests' programs are in tests/trainer/ (test_model, test_pipeline,
# test_data, test_ckpt), beside the scripts that run tempo-train across layouts. Sections: model
# (model.c, optim.c), pipeline (pipeline.c), data (data.c), the trainer program.

noinst_LTLIBRARIES += libtrainer.la
libtrainer_la_SOURCES =
libtrainer_la_CFLAGS = $(AM_CFLAGS) $(OPENMP_CFLAGS)
libtrainer_la_LIBADD = -lm

# ---- model: GPT-2 forward/backward, AdamW, schedule (trainer/model.[ch], trainer/optim.[ch])

libtrainer_la_SOURCES += %reldir%/model.c %reldir%/optim.c
noinst_HEADERS += %reldir%/model.h %reldir%/optim.h

# test_model: against PyTorch (tests/golden/gpt_small.bin, made by make_gpt_golden.py), finite
# differences, determinism across thread counts, AdamW slices, configuration errors.
check_PROGRAMS += tests/trainer/test_model
TESTS += tests/trainer/test_model
tests_trainer_test_model_SOURCES = tests/trainer/test_model.c
tests_trainer_test_model_LDADD = libtrainer.la $(PTHREAD_LIBS)
tests_trainer_test_model_CFLAGS = $(AM_CFLAGS) $(OPENMP_CFLAGS)
EXTRA_DIST += tests/golden/gpt_small.bin tests/golden/make_gpt_golden.py

# ---- pipeline: schedules as per-rank action lists and their executor (trainer/pipeline.[ch])
libtrainer_la_SOURCES += %reldir%/pipeline.c
noinst_HEADERS += %reldir%/pipeline.h
# test_pipeline: every gpipe/1f1b/interleaved layout simulated in one process, the bubble against
# its formula, the model's stage API against the whole model, layout errors.
check_PROGRAMS += tests/trainer/test_pipeline
TESTS += tests/trainer/test_pipeline
tests_trainer_test_pipeline_SOURCES = tests/trainer/test_pipeline.c
tests_trainer_test_pipeline_LDADD = libtrainer.la -lm
tests_trainer_test_pipeline_CFLAGS = $(AM_CFLAGS) $(OPENMP_CFLAGS)

# ---- data: tokenizer, token shards, loader (trainer/data.[ch])
libtrainer_la_SOURCES += %reldir%/data.c
noinst_HEADERS += %reldir%/data.h
check_PROGRAMS += tests/trainer/test_data
TESTS += tests/trainer/test_data
tests_trainer_test_data_SOURCES = tests/trainer/test_data.c
tests_trainer_test_data_LDADD = libtrainer.la

# test_ckpt: a checkpoint saved and loaded back; hostile but checksummed files (ranges whose
# sums wrap) refused
check_PROGRAMS += tests/trainer/test_ckpt
TESTS += tests/trainer/test_ckpt
tests_trainer_test_ckpt_SOURCES = tests/trainer/test_ckpt.c %reldir%/ckpt.c

# ---- tempo-train
bin_PROGRAMS += %reldir%/tempo-train
noinst_HEADERS += %reldir%/dist.h %reldir%/mesh.h
%canon_reldir%_tempo_train_SOURCES = %reldir%/train.c %reldir%/dist.c %reldir%/dist_tempo.c \
	%reldir%/mesh.c \
	%reldir%/pp_train.c %reldir%/pp_train.h %reldir%/zero.c \
	%reldir%/ckpt.c %reldir%/stats.c
noinst_HEADERS += %reldir%/ckpt.h %reldir%/zero.h %reldir%/stats.h
%canon_reldir%_tempo_train_CFLAGS = $(AM_CFLAGS) $(OPENMP_CFLAGS)
%canon_reldir%_tempo_train_LDADD = libtrainer.la libtempo.la -lm
# --backend mpi (trainer/dist_mpi.c), for comparison, when configure found MPI
if HAVE_MPI
%canon_reldir%_tempo_train_SOURCES += %reldir%/dist_mpi.c
%canon_reldir%_tempo_train_CFLAGS += $(MPI_CFLAGS) -DTRAINER_HAVE_MPI
%canon_reldir%_tempo_train_LDADD += $(MPI_LIBS)
endif

# ---- tests across layouts (tests/trainer)
check_PROGRAMS += tests/trainer/dumpcmp
tests_trainer_dumpcmp_SOURCES = tests/trainer/dumpcmp.c
tests_trainer_dumpcmp_LDADD = -lm
TESTS += tests/trainer/layouts.sh tests/trainer/compressed.sh tests/trainer/tp.sh \
	tests/trainer/zero3.sh tests/trainer/sp.sh tests/trainer/pp.sh \
	tests/trainer/recompute.sh tests/trainer/ppzero.sh tests/trainer/hybrid.sh \
	tests/trainer/mpi_layouts.sh tests/trainer/cli.sh
EXTRA_DIST += tests/trainer/layouts.sh tests/trainer/compressed.sh tests/trainer/tp.sh \
	tests/trainer/zero3.sh tests/trainer/sp.sh tests/trainer/pp.sh \
	tests/trainer/recompute.sh tests/trainer/ppzero.sh tests/trainer/hybrid.sh \
	tests/trainer/mpi_layouts.sh tests/trainer/cli.sh
# runs in an --out folder (refused, --overwrite, resume) and across layouts (global batch kept on
# resume, validation loss the same at any layout)
TESTS += tests/trainer/runs.sh
EXTRA_DIST += tests/trainer/runs.sh
# every layout with the defaults on (validation, the sample, checkpoints, a resume), and the
# README's and quickstart.sh's tempo-train command lines run as written at a tiny size
TESTS += tests/trainer/defaults.sh tests/trainer/readme.sh
EXTRA_DIST += tests/trainer/defaults.sh tests/trainer/readme.sh
# checkpoints on a full disk (a small tmpfs the test mounts; skipped where mount is not allowed)
TESTS += tests/trainer/ckpt_full.sh
EXTRA_DIST += tests/trainer/ckpt_full.sh
# ZeRO 1-3 at DP sizes that do not divide the layer groups (padded slices): step 0, training and
# checkpoints against one rank, on both backends
TESTS += tests/trainer/zeropad.sh
EXTRA_DIST += tests/trainer/zeropad.sh
# one run carried by its checkpoints through DP x TP, PP and ZeRO 1/3 layouts (resharding)
TESTS += tests/trainer/reshard.sh
EXTRA_DIST += tests/trainer/reshard.sh
# training that restarts itself: tempo-run --restart 3 with a rank SIGKILLed 3 times, the final
# checkpoint bitwise the uninterrupted run's; and --min-ranks finishing on fewer ranks
TESTS += tests/trainer/chaos.sh
EXTRA_DIST += tests/trainer/chaos.sh
# the step lines, loss.csv and summary: per-dimension time and bytes at every layout, memory lines
TESTS += tests/trainer/stats.sh
EXTRA_DIST += tests/trainer/stats.sh
# tests/trainer/lib.sh: the helpers those scripts source (not a test)
EXTRA_DIST += tests/trainer/lib.sh
