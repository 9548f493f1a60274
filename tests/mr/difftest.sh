#!/bin/sh
# tests/mr/difftest.sh — the randomized differential test of the collectives (issue 15): launches
# tests/mr/difftest through tempo-run at every rank count of DIFFTEST_RANKS on every transport of
# DIFFTEST_TRANSPORTS (shm: every rank on one host; tcp: every rank its own host through
# TEMPO_HOST_ID=%r) and turns the ranks' result files into TAP, one point per launch and one per
# check group (one per collective, sched, compressed, split; tests/mr/results.awk). What a case is
# and how it is checked is documented at the top of difftest.c.
#
# Every launch runs DIFFTEST_CASES cases (250) from its own seed, base + launch number; the base is
# DIFFTEST_SEED, or random when unset, and is printed. A failure prints the seed, case, operation,
# what differed and the command that replays the case alone, e.g.
#     TEMPO_HOST_ID=%r tempo-run -n 5 tests/mr/difftest --out DIR --seed 0x... --case 123 ...
# Knobs (environment):
#   DIFFTEST_SEED        base seed (decimal or 0x hex)
#   DIFFTEST_CASES       cases per launch (250: 14 launches, 3500 cases, well under 2 minutes on
#                        2 cores); the long run: DIFFTEST_CASES=7200 (100800 cases)
#   DIFFTEST_MAX_DEPTH   deepest split below the job's communicator, 0-3 (3)
#   DIFFTEST_COMP_AVG=0  compressed cases use sum only (1: sum and avg)
#   DIFFTEST_BIG         permille of single-operation cases at the few-MB size (2)
#   DIFFTEST_RANKS       rank counts ("1 2 3 4 5 6 7")
#   DIFFTEST_TRANSPORTS  "shm tcp"
#   DIFFTEST_TIMEOUT     hang guard per launch in seconds (600); TEMPO_TIMEOUT is 30 s inside
#   DIFFTEST_KEEP=1      keep the result files (path printed)

TR="${top_builddir:-.}/tools/tempo-run"
PROG="${top_builddir:-.}/tests/mr/difftest"
srcdir=${top_srcdir:-$(dirname "$0")/../..}
. "$srcdir/tests/mr/launch.sh"
seed=${DIFFTEST_SEED:-}
cases=${DIFFTEST_CASES:-250}
depth=${DIFFTEST_MAX_DEPTH:-3}
big=${DIFFTEST_BIG:-2}
comp_avg=${DIFFTEST_COMP_AVG:-1}
ranks=${DIFFTEST_RANKS:-1 2 3 4 5 6 7}
transports=${DIFFTEST_TRANSPORTS:-shm tcp}
DIFFTEST_TIMEOUT=${DIFFTEST_TIMEOUT:-600}
mr_prepare DIFFTEST "$PROG"
TEMPO_TIMEOUT=30
export TEMPO_TIMEOUT

if [ -z "$seed" ]; then
    seed=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')
fi
if ! "$PROG" --list >"$tmp/groups" || [ ! -s "$tmp/groups" ]; then
    echo "Bail out! $PROG --list failed"
    exit 1
fi
nl=0
for t in $transports; do
    for n in $ranks; do nl=$((nl + 1)); done
done
echo "1..$((nl * (1 + $(wc -l <"$tmp/groups"))))"
echo "# base seed $seed (DIFFTEST_SEED=$seed reruns this), $cases cases per launch," \
    "depth <= $depth"

num=0
i=0
t_start=$(date +%s)
for t in $transports; do
    envs=
    [ "$t" = tcp ] && envs="TEMPO_HOST_ID=%r"
    for n in $ranks; do
        s=$((seed + i))
        i=$((i + 1))
        dir="$tmp/$t$n"
        mkdir "$dir" || exit 1
        cp "$tmp/groups" "$dir/groups"
        mr_launch "$t n=$n seed=$s" "$n" "$dir" "$envs" "$PROG" --seed "$s" --cases "$cases" \
            --max-depth "$depth" --big "$big" --comp-avg "$comp_avg" --transport "$t"
    done
done
echo "# difftest: $((nl * cases)) cases in $(($(date +%s) - t_start)) s"
