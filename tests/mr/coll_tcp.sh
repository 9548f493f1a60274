#!/bin/sh
# tests/mr/coll_tcp.sh — every collective, algorithm, dtype, op, size and buffer layout at 1 to 8
# ranks, each rank its own "host" (TEMPO_HOST_ID=%r), so every pair talks TCP over loopback;
# checked against a locally computed reference. The work is done by coll_run.sh (which documents
# what the MB size runs) and coll_test.c; this is the tcp entry point for the harness.
# Counts 0, 1 and 1037 run the whole product at every rank count; the few-MB size runs it at 1-4
# ranks and a reduced product at 5-8 (every dtype with sum; every op with float32, one 16-bit and
# one integer type; data movement with one dtype per element size), as coll_run.sh details.
exec sh "$(dirname "$0")/coll_run.sh" tcp
