# tests/fuzz/local.mk — libFuzzer targets for the parsers that read bytes from outside the process
# (tests/fuzz/fuzz_<name>.c, seeds in tests/fuzz/corpus/<name>/), built with clang by
# tests/fuzz/fuzz.sh, not by the configured compiler: `make fuzz` runs each for FUZZ_SECONDS;
# tests/fuzz/check.sh (in make check) replays the seeds and runs each for FUZZ_CHECK_SECONDS, and
# skips without clang's libFuzzer. See DEVELOPERS.md, "Fuzzing".

FUZZ_CC = clang
FUZZ_SECONDS = 60
FUZZ_TARGETS =
# What the targets are built from: the library's C sources and the trainer's readers, with the
# include flags and libraries of this configuration.
FUZZ_SRC = $(libtempo_core_la_SOURCES) trainer/data.c trainer/ckpt.c
FUZZ_INCLUDES = $(UCX_CPPFLAGS) $(VERBS_CPPFLAGS) $(ZSTD_CPPFLAGS) $(CRYPTO_CPPFLAGS)
FUZZ_LIBS = $(ZSTD_LDFLAGS) $(ZSTD_LIBS) $(CRYPTO_LDFLAGS) $(CRYPTO_LIBS) $(UCX_LDFLAGS) \
	$(UCX_LIBS) $(VERBS_LDFLAGS) $(VERBS_LIBS) $(PTHREAD_LIBS) -ldl -lm
FUZZ_ENV = top_srcdir='$(abs_top_srcdir)' top_builddir='$(abs_top_builddir)' FUZZ_CC='$(FUZZ_CC)' \
	FUZZ_SRC='$(FUZZ_SRC)' FUZZ_INCLUDES='$(FUZZ_INCLUDES)' FUZZ_LIBS='$(FUZZ_LIBS)'

fuzz-build:
	@$(FUZZ_ENV) $(SHELL) $(srcdir)/%reldir%/fuzz.sh build
fuzz:
	@$(FUZZ_ENV) $(SHELL) $(srcdir)/%reldir%/fuzz.sh run '$(FUZZ_SECONDS)' $(FUZZ_TARGETS)
fuzz-seeds:
	@$(FUZZ_ENV) $(SHELL) $(srcdir)/%reldir%/fuzz.sh seeds $(FUZZ_TARGETS)
fuzz-clean:
	rm -rf %reldir%/bin
.PHONY: fuzz fuzz-build fuzz-seeds fuzz-clean
clean-local: fuzz-clean

TESTS += %reldir%/check.sh
AM_TESTS_ENVIRONMENT += $(FUZZ_ENV); export FUZZ_CC FUZZ_SRC FUZZ_INCLUDES FUZZ_LIBS;
EXTRA_DIST += %reldir%/fuzz.sh %reldir%/check.sh %reldir%/corpus %reldir%/fuzz.h \
	%reldir%/fuzz_bootstrap.c %reldir%/fuzz_qspec.c %reldir%/fuzz_qdecode.c \
	%reldir%/fuzz_stream.c %reldir%/fuzz_cfg.c %reldir%/fuzz_shard.c %reldir%/fuzz_files.h \
	%reldir%/fuzz_ckpt.c %reldir%/fuzz_sched.c %reldir%/fuzz_hello.c %reldir%/fuzz_seal.c
