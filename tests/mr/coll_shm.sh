#!/bin/sh
# tests/mr/coll_shm.sh — every collective, algorithm, dtype, op, size and buffer layout at 1 to 8
# ranks on one host (shared memory), checked against a locally computed reference. The work is
# done by coll_run.sh (which documents what the MB size runs) and coll_test.c; this is the shm
# entry point for the harness (TAP on stdout).
# Counts 0, 1 and 1037 run the whole product at every rank count; the few-MB size runs it at 1-4
# ranks and a reduced product at 5-8 (every dtype with sum; every op with float32, one 16-bit and
# one integer type; data movement with one dtype per element size), as coll_run.sh details.
exec sh "$(dirname "$0")/coll_run.sh" shm
