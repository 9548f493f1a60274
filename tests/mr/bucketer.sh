#!/bin/sh
# tests/mr/bucketer.sh — the bucketer on real ranks: launches tests/mr/bucketer_test through
# tempo-run under each scheduling policy, on shm and tcp, and once with TEMPO_TRACE, whose files
# must pass `tempo-trace check` (valid JSON, balanced events) and merge into one timeline. The
# traced launch names one file without %r (trace.json): every rank must still write its own
# (trace.0.json ... trace.3.json), never all of them one file.
#
# Launches: tic at 1, 2, 3, 4 ranks; fifo and tac at 3; tcp (TEMPO_HOST_ID=%r) at 3; no progress
# thread at 2; TEMPO_COMPRESS=fp16 (exact for the test's small integers) with tic at 3 and with tac
# over tcp at 2; tic at 4 with the trace. What each launch checks is documented at the top of
# bucketer_test.c. Knobs: BUCKETER_TIMEOUT (hang guard per launch, 300 s), BUCKETER_KEEP=1.

TR="${top_builddir:-.}/tools/tempo-run"
PROG="${top_builddir:-.}/tests/mr/bucketer_test"
srcdir=${top_srcdir:-$(dirname "$0")/../..}
. "$srcdir/tests/mr/launch.sh"
TRACE_TOOL="${top_builddir:-.}/tools/tempo-trace"  # written by config.status from tempo-trace.in
mr_prepare BUCKETER "$PROG"

groups="bucketer/layout bucketer/values bucketer/stats bucketer/errors"
launches="
tic1 1 TEMPO_SCHED=tic
tic2 2 TEMPO_SCHED=tic
tic3 3 TEMPO_SCHED=tic
tic4 4 TEMPO_SCHED=tic
fifo3 3 TEMPO_SCHED=fifo
tac3 3 TEMPO_SCHED=tac
tcp3 3 TEMPO_SCHED=tic TEMPO_HOST_ID=%r
nothread2 2 TEMPO_SCHED=tic TEMPO_PROGRESS_THREAD=0
fp16c3 3 TEMPO_SCHED=tic TEMPO_COMPRESS=fp16:min=0
fp16tac2 2 TEMPO_SCHED=tac TEMPO_COMPRESS=fp16:min=0 TEMPO_HOST_ID=%r
trace4 4 TEMPO_SCHED=tic TEMPO_TRACE=TRACEDIR/trace.json
"
# After the traced launch: its files pass `tempo-trace check` and merge into one timeline.
mr_after() { # LABEL N DIR
    [ "$1" = trace4 ] || return 0
    n=$2 dir=$3
    num=$((num + 1))
    if [ ! -x /usr/bin/python3 ]; then
        echo "ok $num - trace files check # SKIP /usr/bin/python3 not found"
        num=$((num + 1))
        echo "ok $num - trace merge # SKIP /usr/bin/python3 not found"
        return 0
    fi
    if out=$("$TRACE_TOOL" check "$dir"/trace.*.json 2>&1); then
        echo "ok $num - trace files of $n ranks are valid with balanced events"
    else
        echo "not ok $num - trace files of $n ranks are valid with balanced events"
    fi
    printf '%s\n' "$out" | head -n 12 | cut -c 1-300 | sed 's/^/# /'
    num=$((num + 1))
    if mout=$("$TRACE_TOOL" merge -o "$dir/all.json" -n "$n" "$dir/trace.%r.json" 2>&1) &&
        "$TRACE_TOOL" check "$dir/all.json" >/dev/null 2>&1 &&
        grep -q '"cat": "comm"' "$dir/all.json" && grep -q '"cat": "queue"' "$dir/all.json" &&
        grep -q '"name": "iteration"' "$dir/all.json"; then
        echo "ok $num - merged timeline of $n ranks is valid and has comm, queue and iteration events"
    else
        echo "not ok $num - merged timeline of $n ranks is valid and has comm, queue and iteration events"
    fi
    printf '%s\n' "$mout" | head -n 5 | cut -c 1-300 | sed 's/^/# /'
}
# + 2: the trace check and the merge
mr_run "$PROG" "$groups" "$launches" 2
