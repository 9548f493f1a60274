#!/bin/sh
# perf/smoke_overlap.sh — overlap_bench --compute device on 2 ranks over shared memory with the
# tiny profile (4 layers of 256 KiB), and perf/tempo-overlap-model on cases whose step time is
# known by hand.
#
# Checks: the run exits 0 with its six rows and 0 wrong gradients; the emulated accelerator does
# not spin: while the bench's main thread waits for compute (device synchronizations), its time on
# a CPU is below 50 % of the time it was not waiting in a run queue (/proc/thread-self/schedstat),
# on the busiest rank. A wait that spins (--compute cpu, or a device that busy-waits) is on a CPU
# whenever it is not queued for one: about 100 % however loaded the machine is; a sleeping wait is
# on a CPU only for its few microseconds of work, and load only adds run-queue time, which is
# excluded. (CPU time over wall time would not do: on a loaded machine spinning ranks get well
# under half a core.) Never a timing assertion: the bench's times are not checked.
# The model: with no communication every step is the compute (12 ms); with 4 one-bucket layers of
# 1 ms link time each (2 ranks, 8388608000 bit/s = 1 MiB per ms, no latency), f = 1 ms and b = 2 ms
# per layer, every policy's step is the compute plus the last bucket's 1 ms (each earlier bucket
# is done before the forward that needs it): 13 ms, and the mean over 20 measured steps adds the
# final wait_all (1 ms / 20, as overlap_bench counts it): 13.05 ms. Fitted the other way round
# (--fifo-ms 13.05), the model finds that link again: all gradients alone in 4.00 ms, every row
# 13.05 ms. TAP output; about 2 s.
builddir=${top_builddir:-.}
prog=$builddir/perf/overlap_bench
model=$builddir/perf/tempo-overlap-model
run=${TEMPO_RUN:-$builddir/tools/tempo-run}
for f in "$prog" "$run" "$model"; do
    if [ ! -x "$f" ]; then
        echo "1..0 # SKIP $f not built"
        exit 0
    fi
done
limit=""
command -v timeout >/dev/null 2>&1 && limit="timeout 120"

echo "1..5"
. "${top_srcdir:-.}/perf/tap.sh"

out=$(TEMPO_TIMEOUT=${TEMPO_TIMEOUT:-60} $limit "$run" -n 2 --no-prefix "$prog" --compute device \
    -p tiny --layer-bytes 256K -r 0.02 -R 1 -n 1 -w 1 --calib 0 2>&1)
rc=$?
rows=$(printf '%s\n' "$out" | grep -cE '^  (fifo|tic|tac) ')
bad=1
[ $rc -eq 0 ] && [ "$rows" -eq 6 ] && printf '%s\n' "$out" | grep -q 'checked: 0 wrong' && bad=0
result $bad "overlap_bench --compute device: 6 rows, 0 wrong gradients (exit $rc)" "$out"

# The main thread's CPU share of its compute waits (run-queue time excluded).
pat='s/^# main thread on a CPU while it waits for compute: \([0-9]*\) %.*/\1/p'
busy=$(printf '%s\n' "$out" | sed -n "$pat")
if printf '%s\n' "$out" | grep -q '^# main thread on a CPU.*unknown'; then
    n=$((n + 1))
    echo "ok $n # SKIP no /proc/thread-self/schedstat: the main thread's CPU time is unknown"
else
    bad=1
    [ -n "$busy" ] && [ "$busy" -lt 50 ] && bad=0
    result $bad "device compute does not spin: main thread on a CPU ${busy:-?} % of its compute \
waits (bound 50 %)" "$out"
fi

# T of every row of the model's table, one line: fifo whole first.
steps() {
    printf '%s\n' "$1" | awk '/^  (fifo|tic|tac) / { printf "%s ", $3 }'
}
if [ ! -x /usr/bin/python3 ]; then # the model's interpreter
    echo "ok 3 # SKIP no /usr/bin/python3 for perf/tempo-overlap-model"
    echo "ok 4 # SKIP no /usr/bin/python3 for perf/tempo-overlap-model"
    echo "ok 5 # SKIP no /usr/bin/python3 for perf/tempo-overlap-model"
    exit $((fails != 0))
fi
out=$($limit "$model" -p tiny -n 2 --compute-ms 12 --comm-ms 0 2>&1)
got=$(steps "$out")
bad=1
[ "$got" = "12.00 12.00 12.00 12.00 12.00 12.00 " ] && bad=0
result $bad "tempo-overlap-model: no communication, every step is the compute, 12 ms ($got)" "$out"

out=$($limit "$model" -p tiny -n 2 --compute-ms 12 --rate 8388608000 --latency-us 0 --iters 20 2>&1)
got=$(steps "$out")
bad=1
[ "$got" = "13.05 13.05 13.05 13.05 13.05 13.05 " ] && bad=0
result $bad "tempo-overlap-model: 1 ms per bucket, the last one exposed, 13 + 1/20 ms ($got)" "$out"

out=$($limit "$model" -p tiny -n 2 --compute-ms 12 --fifo-ms 13.05 --iters 20 2>&1)
got=$(steps "$out")
alone=$(printf '%s\n' "$out" | sed -n 's/.*communication alone \([0-9.]*\) ms.*/\1/p')
bad=1
[ "$got" = "13.05 13.05 13.05 13.05 13.05 13.05 " ] && [ "$alone" = 4.00 ] && bad=0
result $bad "tempo-overlap-model --fifo-ms 13.05: the link found again, 4.00 ms alone ($alone), \
every row 13.05 ms ($got)" "$out"
[ $fails -eq 0 ]
