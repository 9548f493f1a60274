#!/bin/sh
# tests/mr/qcoll.sh — compressed collectives on real ranks: launches tests/mr/qcoll_test through
# tempo-run at 1, 2, 3 and 4 ranks on shared memory, 3 ranks over tcp (TEMPO_HOST_ID=%r) and 2
# ranks without the progress thread. What each launch checks is documented at the top of
# qcoll_test.c. Knobs: QCOLL_TIMEOUT (hang guard per launch, 300 s), QCOLL_KEEP=1.

TR="${top_builddir:-.}/tools/tempo-run"
PROG="${top_builddir:-.}/tests/mr/qcoll_test"
srcdir=${top_srcdir:-$(dirname "$0")/../..}
. "$srcdir/tests/mr/launch.sh"
mr_prepare QCOLL "$PROG"

groups="qcoll/identical qcoll/accuracy qcoll/unbiased qcoll/ef qcoll/lowrank qcoll/sched qcoll/errors"
launches="
shm1 1
shm2 2
shm3 3
shm4 4
tcp3 3 TEMPO_HOST_ID=%r
nothread2 2 TEMPO_PROGRESS_THREAD=0
"
mr_run "$PROG" "$groups" "$launches"
