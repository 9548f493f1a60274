# tests/mr/local.mk — multi-rank tests: shell scripts that start real processes through tempo-run.
TESTS += %reldir%/tempo_run.sh
EXTRA_DIST += %reldir%/tempo_run.sh
