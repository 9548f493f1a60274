#!/bin/sh
# tests/mr/difftest.sh — the randomized differential test of the collectives (issue 15): launches
# tests/mr/difftest through tempo-run at every rank count of DIFFTEST_RANKS on every transport of
# DIFFTEST_TRANSPORTS (shm: every rank on one host; tcp: every rank its own host through
# TEMPO_HOST_ID=%r) and turns the ranks' result files into TAP, one point per launch and one per
# check group (one per collective, sched, compressed, split, mismatch; tests/mr/results.awk). What
# a case is and how it is checked is documented at the top of difftest.c.
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
#   DIFFTEST_TRANSPORTS  "shm tcp"; another name runs every rank on this host with DIFFTEST_ENV
#   DIFFTEST_ENV         NAME=VALUE words added to every launch's environment (and to the replay
#                        commands): how tests/transport/conform.sh runs the test on one transport,
#                        e.g. DIFFTEST_TRANSPORTS=ucx-only DIFFTEST_ENV='TEMPO_TRANSPORTS=ucx,^shm'
#   DIFFTEST_TIMEOUT     hang guard per launch in seconds (600); TEMPO_TIMEOUT is 30 s inside
#   DIFFTEST_KEEP=1      keep the result files (path printed)
#
# Open MPI as a second reference: where configure found MPI (tests/mr/difftest_mpi is built) and
# mpirun starts processes here, the launches at DIFFTEST_MPI_RANKS on DIFFTEST_MPI_TRANSPORTS also
# write the hash of every operation's result (--hashes), difftest_mpi runs the first
# DIFFTEST_MPI_CASES cases of the same seed through MPI (mpirun --oversubscribe, yield when idle),
# and one more TAP point per such launch compares the two programs' hash files line by line
# ("matches Open MPI: N operation results compared, M skipped", over all ranks; skipped: fp16 and
# bf16 reductions, which MPI cannot express, and tempo's allowed refusals). A mismatch prints the
# first differing case and operation, both results' tokens and the commands that replay the case
# in each program. Integer results that wrap are compared too: Open MPI's op/avx component
# saturates 8-bit sums (open-mpi/ompi#8045), so the MPI run excludes it (OMPI_MCA_op=^avx).
#   DIFFTEST_MPI=0              no comparison with Open MPI
#   DIFFTEST_MPI_CASES          cases compared per launch (100; at most DIFFTEST_CASES)
#   DIFFTEST_MPI_RANKS          rank counts compared ("2 3 5": 300 cases in CI)
#   DIFFTEST_MPI_TRANSPORTS     transports of the tempo launches compared ("shm")

TR="${top_builddir:-.}/tools/tempo-run"
PROG="${top_builddir:-.}/tests/mr/difftest"
MPI_PROG="${top_builddir:-.}/tests/mr/difftest_mpi"
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
mpi=${DIFFTEST_MPI:-1}
mpi_cases=${DIFFTEST_MPI_CASES:-100}
mpi_ranks=${DIFFTEST_MPI_RANKS:-2 3 5}
mpi_transports=${DIFFTEST_MPI_TRANSPORTS:-shm}
[ "$mpi_cases" -gt "$cases" ] && mpi_cases=$cases
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

# Is launch (transport $1, $2 ranks) compared with Open MPI?
compared() {
    [ "$mpi" = 1 ] && case " $mpi_transports " in *" $1 "*) ;; *) return 1 ;; esac &&
        case " $mpi_ranks " in *" $2 "*) return 0 ;; *) return 1 ;; esac
}
if [ "$mpi" != 0 ]; then
    if [ ! -x "$MPI_PROG" ]; then
        mpi_why="$MPI_PROG not built (configure found no MPI)"
        mpi=0
    elif ! mr_mpirun; then
        mpi=0
    fi
fi
nl=0
nm=0
for t in $transports; do
    for n in $ranks; do
        nl=$((nl + 1))
        compared "$t" "$n" && nm=$((nm + 1))
    done
done
echo "1..$((nl * (1 + $(wc -l <"$tmp/groups")) + nm))"
echo "# base seed $seed (DIFFTEST_SEED=$seed reruns this), $cases cases per launch," \
    "depth <= $depth"
if [ "$mpi" = 1 ]; then
    echo "# Open MPI comparison: the first $mpi_cases cases of the launches at n in" \
        "{$mpi_ranks} on {$mpi_transports}"
else
    echo "# Open MPI comparison: off (${mpi_why:-DIFFTEST_MPI=0})"
fi
mpi_total=0
mpi_skipped=0
mpi_bad=0

# One TAP point: the hash files of launch $dir (tempo: $dir/h<r>, first $mpi_cases cases;
# Open MPI: $dir/mpi/h<r>) for $n ranks, seed $s, transport $t.
mpi_compare() {
    mkdir "$dir/mpi" || exit 1
    args="--seed $s --cases $mpi_cases --max-depth $depth --big $big --comp-avg $comp_avg"
    _t0=$(date +%s)
    # In an address-sanitizer build the leak check is off for the MPI side only: Open MPI does not
    # free what it allocated at exit (3300 allocations here), which is not ours to fix; the tempo
    # side keeps it.
    # shellcheck disable=SC2086 # $mpi_flags and $args are word lists
    ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
        OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_op=^avx timeout "$guard" "$mpirun" -n "$n" \
        $mpi_flags "$MPI_PROG" --hashes "$dir/mpi" $args >"$dir/mpi/out" 2>&1 </dev/null
    rc=$?
    num=$((num + 1))
    files=
    r=0
    while [ $r -lt "$n" ]; do
        touch "$dir/h$r" "$dir/mpi/h$r"
        files="$files $dir/h$r $dir/mpi/h$r"
        r=$((r + 1))
    done
    # shellcheck disable=SC2086 # $files is a word list
    res=$(awk -v lim="$mpi_cases" '
        FNR == 1 { f++; rank = int((f - 1) / 2); mpi = (f % 2 == 0) }
        !mpi && $1 >= lim { next }
        { line[rank, mpi, ++nl[rank, mpi]] = $0 }
        END {
            for (r = 0; r < f / 2; r++) {
                m = nl[r, 0] > nl[r, 1] ? nl[r, 0] : nl[r, 1]
                for (j = 1; j <= m; j++) {
                    a = line[r, 0, j]; b = line[r, 1, j]
                    split(a, x, " "); split(b, y, " ")
                    if (x[1] != y[1] || x[2] != y[2]) {
                        bad++
                        if (!first) first = "rank " r ": the hash files are out of step at line " \
                            j ": tempo has \"" x[1] " " x[2] "\", Open MPI \"" y[1] " " y[2] "\""
                        break
                    }
                    if (y[3] ~ /^skip/ || x[3] == "unsupported") { skipped++; continue }
                    if (x[3] == y[3]) { ok++; continue }
                    bad++
                    if (!first) {
                        d = a; sub(/^[^ ]+ [^ ]+ [^ ]+ /, "", d)
                        first = "case " x[1] " op " x[2] " rank " r ": tempo " x[3] \
                            ", Open MPI " y[3] ": " d
                        fcase = x[1]
                    }
                }
            }
            printf "%d %d %d %s|%s\n", ok, skipped, bad, fcase == "" ? "-" : fcase, first
        }' $files)
    # shellcheck disable=SC2086 # four words: compared, skipped, mismatches, first bad case
    set -- ${res%%|*}
    first=${res#*|}
    mpi_total=$((mpi_total + $1))
    mpi_skipped=$((mpi_skipped + $2))
    mpi_bad=$((mpi_bad + $3))
    desc="$t n=$n seed=$s matches Open MPI: $1 operation results compared, $2 skipped"
    desc="$desc ($mpi_cases cases, all ranks, $(($(date +%s) - _t0)) s)"
    if [ "$rc" -eq 0 ] && [ "$3" -eq 0 ] && [ "$1" -gt 0 ]; then
        echo "ok $num - $desc"
        return
    fi
    echo "not ok $num - $desc"
    if [ "$rc" -ne 0 ]; then
        echo "# mpirun exited with status $rc"
        tail -n 15 "$dir/mpi/out" | cut -c 1-300 | sed 's/^/#   /'
    fi
    [ "$3" -eq 0 ] && return
    echo "# $3 mismatch(es); first: $(printf '%s' "$first" | cut -c 1-600)"
    [ "$4" = - ] && return
    tenv=
    [ "$t" = tcp ] && tenv="TEMPO_HOST_ID=%r "
    rargs="--seed $s --case $4 --max-depth $depth --big $big --comp-avg $comp_avg"
    echo "# replay (tempo):   ${tenv}tempo-run -n $n tests/mr/difftest --out DIR --hashes DIR" \
        "$rargs"
    echo "# replay (Open MPI): OMPI_MCA_op=^avx mpirun -n $n $mpi_flags" \
        "tests/mr/difftest_mpi --hashes DIR $rargs"
    echo "# then compare the lines of case $4 in DIR/h<rank>"
}

num=0
i=0
t_start=$(date +%s)
for t in $transports; do
    envs=${DIFFTEST_ENV:-}
    [ "$t" = tcp ] && envs="$envs TEMPO_HOST_ID=%r"
    for n in $ranks; do
        s=$((seed + i))
        i=$((i + 1))
        dir="$tmp/$t$n"
        mkdir "$dir" || exit 1
        cp "$tmp/groups" "$dir/groups"
        hashes=
        compared "$t" "$n" && hashes="--hashes $dir"
        # shellcheck disable=SC2086 # $hashes is a word list
        mr_launch "$t n=$n seed=$s" "$n" "$dir" "$envs" "$PROG" --seed "$s" --cases "$cases" \
            --max-depth "$depth" --big "$big" --comp-avg "$comp_avg" --transport "$t" $hashes
        compared "$t" "$n" && mpi_compare
    done
done
echo "# difftest: $((nl * cases)) cases in $(($(date +%s) - t_start)) s"
if [ "$nm" -gt 0 ]; then
    echo "# Open MPI: $((nm * mpi_cases)) cases in $nm launches, $mpi_total operation results" \
        "compared, $mpi_skipped skipped, $mpi_bad mismatches"
fi
