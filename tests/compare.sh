#!/bin/sh
# tests/compare.sh — TAP test of perf/tempo-compare's fairness to its baseline (issue 16): the
# settings it gives Open MPI, the rounds it interleaves and the figures it prints.
#
# MPIRUN is a stand-in that says it is Open MPI, records the environment MPI's ranks would get
# (OMPI_MCA_mpi_yield_when_idle) and its arguments, and runs the tempo program of the same name in
# place of the *_perf_mpi one (under tempo-run), so the test needs no MPI and checks tempo-compare
# itself, not MPI's speed. Checked:
#   - -y auto with ranks >= cores: MPI gets mpi_yield_when_idle=1 and the header says why; -y 0
#     busy-polls and says so; a bad -y is refused;
#   - every side runs once per round (3 rounds: 3 tempo runs, 3 MPI runs), the first side rotating;
#   - the table has per size the median with (min-max) of each side and the MPI/tempo ratio;
#   - the load line ("others' load: ... before the runs, ... after") is printed;
#   - -B adds a base column and its ratio; --help works as the first argument;
#   - all_reduce: the bound (all_reduce_bound) runs in every round and its time and tempo's % of it
#     are printed beside every size; -L 0 leaves it out; for a dtype it does not know (int32) the
#     run still succeeds, without the column.
# Run by the automake harness (top_builddir, top_srcdir exported) or by hand from a built tree.

b=${top_builddir:-.}
b=$(cd "$b" && pwd) || { echo "Bail out! no build tree"; exit 1; }
CMP="$b/perf/tempo-compare"
[ -x "$CMP" ] || { echo "Bail out! $CMP not built"; exit 1; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_compare.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM
TEMPO_TIMEOUT=${TEMPO_TIMEOUT:-20}
export TEMPO_TIMEOUT

cat >"$tmp/mpirun" <<EOF
#!/bin/sh
# stand-in mpirun: -n N [Open MPI flags] PROG ARGS
[ "\$1" = --version ] && { echo "mpirun (Open MPI) 4.1.4"; exit 0; }
echo "yield=\${OMPI_MCA_mpi_yield_when_idle:-unset} args=\$*" >>"$tmp/mpirun.log"
n=\$2
shift 2
while [ \$# -gt 0 ]; do
    case \$1 in
    --mca) shift 3 ;;
    --bind-to) shift 2 ;;
    --*) shift ;;
    *) break ;;
    esac
done
prog=\${1%_mpi}
shift
exec "$b/tools/tempo-run" -n "\$n" "\$prog" "\$@"
EOF
chmod +x "$tmp/mpirun"
MPIRUN="$tmp/mpirun"
export MPIRUN

echo 1..12
n=0
# check DESCRIPTION COMMAND...: one point; on failure the run's output as diagnostics
check() {
    n=$((n + 1))
    desc=$1
    shift
    if "$@"; then
        echo "ok $n - $desc"
    else
        echo "not ok $n - $desc"
        sed 's/^/#   /' "$tmp/out" | tail -n 15
    fi
}
has() { grep -q -e "$1" "$tmp/out"; }

cores=$(nproc)
"$CMP" -n "$cores" -R 3 -- -b 8 -e 64 -f 8 -n 5 -w 1 >"$tmp/out" 2>&1
rc=$?
check "-y auto with $cores ranks on $cores cores: MPI yields when idle, and the header says why" \
    eval '[ $rc = 0 ] && [ "$(grep -c "^yield=1 " "$tmp/mpirun.log")" = 3 ] &&
        has "Open MPI yields when idle (mpi_yield_when_idle=1: $cores ranks >= $cores cores)"'
check "3 rounds: 3 tempo and 3 MPI runs, the first side rotating" \
    eval '[ "$(grep -c "^yield=" "$tmp/mpirun.log")" = 3 ] && has "3 rounds (every side once per round, the first rotating)"'
check "each size: median (min-max) for both sides and the MPI/tempo ratio" \
    eval 'has "MPI/tempo" && [ "$(grep -c "^ *8  *[0-9.]* ([0-9.]*-[0-9.]*)  *[0-9.]* ([0-9.]*-[0-9.]*) .* [0-9.][0-9.]*$" "$tmp/out")" = 1 ] &&
        [ "$(grep -c "^ *64  *[0-9.]* ([0-9.]*-[0-9.]*)  *[0-9.]* ([0-9.]*-[0-9.]*) " "$tmp/out")" = 1 ]'
check "the machine's load is measured before and after the runs" \
    has "^# others' load: [0-9.]* cores before the runs, [0-9.]* after"

: >"$tmp/mpirun.log"
"$CMP" -n 1 -R 1 -y 0 -- -b 8 -e 8 -n 5 -w 1 >"$tmp/out" 2>&1
rc=$?
check "-y 0: MPI busy-polls, and the header says it was forced" \
    eval '[ $rc = 0 ] && grep -q "^yield=0 " "$tmp/mpirun.log" &&
        has "Open MPI busy-polls (mpi_yield_when_idle=0: forced by -y 0)"'
"$CMP" -y sometimes >"$tmp/out" 2>&1
rc=$?
check "-y sometimes is refused" eval '[ $rc = 2 ] && has "auto, 0 or 1"'

"$CMP" -n 1 -R 2 -B "$b" -- -b 8 -e 8 -n 5 -w 1 >"$tmp/out" 2>&1
rc=$?
check "-B adds the other build's column and its ratio" \
    eval '[ $rc = 0 ] && has "base time (us)" && has "base/tempo" && has "; base: "'
"$CMP" -n 2 -R 2 -k "$tmp/kept" -- -b 8 -e 64 -f 8 -n 5 -w 1 >"$tmp/out" 2>&1
rc=$?
check "all_reduce: the bound's time and tempo's % of it beside every size, run in every round" \
    eval '[ $rc = 0 ] && has "% bound" && has "^# bound: all_reduce_bound (bound (shared buffers" &&
        [ "$(grep -c "^ *\(8\|64\)  .* [0-9.]* ([0-9.]*-[0-9.]*)  *[0-9][0-9]*%  *[0-9.][0-9.]*$" "$tmp/out")" = 2 ] &&
        [ "$(ls "$tmp/kept"/all_reduce.bound.*.json | wc -l)" = 2 ]'
"$CMP" -n 2 -R 1 -L 0 -- -b 8 -e 8 -n 5 -w 1 >"$tmp/out" 2>&1
rc=$?
check "-L 0 leaves the bound out" eval '[ $rc = 0 ] && ! has "% bound"'
"$CMP" -n 2 -R 1 -- -b 8 -e 8 -n 5 -w 1 -d int32 >"$tmp/out" 2>&1
rc=$?
check "a dtype the bound does not know: no bound column, the run succeeds" \
    eval '[ $rc = 0 ] && ! has "% bound" && has "MPI/tempo"'
"$CMP" -B "$tmp/nowhere" >"$tmp/out" 2>&1
rc=$?
check "-B without perf programs is refused" eval '[ $rc != 0 ] && has "no \*_perf programs"'
"$CMP" --help >"$tmp/out" 2>&1
rc=$?
check "--help" eval '[ $rc = 0 ] && has "^Usage: tempo-compare"'
