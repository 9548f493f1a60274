#!/usr/bin/env bash
# compare.sh — tempo against the MPI baseline (and optionally against another tempo build), side by
# side, on this machine, in one run, fairly.
#
# Runs <collective>_perf under tempo-run and <collective>_perf_mpi under mpirun with the same
# flags, in REPEATS rounds; each round runs every side once, and the side that goes first rotates
# from round to round, so that all see the same noise and none always runs on a warm (or loaded)
# machine. It reads their JSON (-J) and prints one table per dtype/op: per size, the median time of
# each side with its min and max over the rounds, the median busbw, and the ratio of the median
# times MPI / tempo (> 1: tempo is faster). time is the out-of-place per-iteration average of the
# slowest rank (-a 3); busbw is nccl-tests' bus bandwidth.
#
# Fair to the baseline. Open MPI busy-polls by default; that is right on a machine with a core per
# rank and nothing else running, and collapses when a rank waits for a core (ratios of hundreds
# were printed that way). Its users set mpi_yield_when_idle when ranks share cores, so this script
# does too (-y auto, the default) when ranks >= cores or the machine was found busy before the
# runs, and says which; tempo decides the same on its own (it yields when ranks exceed cores).
# -y 0 and -y 1 force busy-polling or yielding. The machine's load is measured before the first
# round and after the last (CPU time used by others over 1 s while nothing of ours runs); above a
# quarter of a core, a warning says the figures are unreliable.
#
# -B DIR adds a second tempo build (DIR is its build tree or its perf/ directory; its own
# tools/tempo-run is used): a regression check, with the ratio base time / tempo time per size.
#
# Default perf flags: -b 8 -e 128M -f 2 -d float -o sum, with the programs' own -n 20 -w 5 at every
# size; flags after -- are appended and win (for example -- -e 16M -n 5 for a quick look). The full
# default sweep takes about a minute per run at 4 ranks on a 2-core machine.
#
# Programs are found in $TEMPO_PERF_DIR, next to this script (build tree, or $(bindir) once
# installed), in ./perf and . (running the source tree's script from a separate build directory),
# then on PATH. The launchers: $TEMPO_RUN or tools/tempo-run or tempo-run on PATH; $MPIRUN or mpirun
# on PATH (Open MPI gets --oversubscribe --bind-to none --mca btl self,vader, and
# --allow-run-as-root when run as root). JSON is parsed with /usr/bin/python3 when present (the
# distribution's python), else with awk (the programs write one result per line).
set -u

prog_name=${0##*/}
nranks=2
repeats=3
collective=all_reduce
keep_dir=""
yield_mode=auto
base_dir=""

usage() {
    cat <<EOF
Usage: $prog_name [-n NRANKS] [-R REPEATS] [-c COLLECTIVE] [-y auto|0|1] [-B DIR] [-k DIR]
                  [-- extra perf flags]
  -n NRANKS      ranks of every run (2)
  -R REPEATS     rounds: each runs every side once, the first side rotating; the table shows
                 the median over rounds with min and max (3)
  -c COLLECTIVE  all_reduce reduce_scatter all_gather broadcast reduce alltoall sendrecv, or all
                 (all_reduce); tempo's names (allreduce, allgather, ...) work too
  -y MODE        Open MPI waiting: auto (yield when ranks >= cores or the machine is busy, as its
                 users would set it), 0 (busy-poll, its default), 1 (yield) [auto]
  -B DIR         also run another tempo build (its build tree or perf/ directory), interleaved:
                 a regression check against it
  -k DIR         keep every run's JSON and output in DIR
  -h, --help     this text
Default perf flags: -b 8 -e 128M -f 2 -d float -o sum; flags after -- are appended.
Environment: TEMPO_PERF_DIR (where the *_perf programs are), TEMPO_RUN, MPIRUN.
EOF
}

die() {
    echo "$prog_name: $*" >&2
    exit 1
}

case ${1:-} in --help) usage; exit 0 ;; esac
while getopts ":n:R:c:y:B:k:h" opt; do
    case $opt in
    n) nranks=$OPTARG ;;
    R) repeats=$OPTARG ;;
    c) collective=$OPTARG ;;
    y) yield_mode=$OPTARG ;;
    B) base_dir=$OPTARG ;;
    k) keep_dir=$OPTARG ;;
    h) usage; exit 0 ;;
    :) echo "$prog_name: option -$OPTARG needs a value" >&2; usage >&2; exit 2 ;;
    *) echo "$prog_name: unknown option -$OPTARG" >&2; usage >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
extra=("$@")

bad_count() {
    echo "$prog_name: $1: not a positive count" >&2
    usage >&2
    exit 2
}
case $nranks in '' | *[!0-9]* | 0) bad_count "-n $nranks" ;; esac
case $repeats in '' | *[!0-9]* | 0) bad_count "-R $repeats" ;; esac
case $yield_mode in auto | 0 | 1) ;; *) echo "$prog_name: -y $yield_mode: auto, 0 or 1" >&2; exit 2 ;; esac

all="all_reduce reduce_scatter all_gather broadcast reduce alltoall sendrecv"
case $collective in
all) collectives=$all ;;
all_reduce | allreduce | all_reduce_perf) collectives=all_reduce ;;
reduce_scatter | reducescatter | reduce_scatter_perf) collectives=reduce_scatter ;;
all_gather | allgather | all_gather_perf) collectives=all_gather ;;
broadcast | bcast | broadcast_perf) collectives=broadcast ;;
reduce | reduce_perf) collectives=reduce ;;
alltoall | all_to_all | alltoall_perf) collectives=alltoall ;;
sendrecv | sendrecv_perf) collectives=sendrecv ;;
*) echo "$prog_name: -c $collective: unknown collective ($all, all)" >&2; exit 2 ;;
esac

here=$(cd "$(dirname "$0")" && pwd)

find_prog() {
    local d
    for d in ${TEMPO_PERF_DIR:+"$TEMPO_PERF_DIR"} "$here" "$PWD/perf" "$PWD"; do
        if [ -x "$d/$1" ] && [ ! -d "$d/$1" ]; then
            echo "$d/$1"
            return 0
        fi
    done
    command -v "$1" 2>/dev/null
}

# ---- launchers ---------------------------------------------------------------------------------
if [ -n "${TEMPO_RUN:-}" ]; then
    tempo_run=$TEMPO_RUN
else
    tempo_run=""
    for c in "$here/../tools/tempo-run" "$PWD/tools/tempo-run" "$here/tempo-run"; do
        if [ -x "$c" ]; then tempo_run=$c; break; fi
    done
    [ -n "$tempo_run" ] || tempo_run=$(command -v tempo-run 2>/dev/null) ||
        die "tempo-run not found (build tools/, put it on PATH, or set TEMPO_RUN)"
fi

mpirun=${MPIRUN:-$(command -v mpirun 2>/dev/null)}
for coll in $collectives; do
    if [ -z "$(find_prog "${coll}_perf_mpi")" ] || [ -z "$mpirun" ]; then
        die "MPI baseline not built: install libopenmpi-dev openmpi-bin and rerun configure" \
            "(looked for ${coll}_perf_mpi and mpirun)"
    fi
    [ -n "$(find_prog "${coll}_perf")" ] ||
        die "${coll}_perf not found (run make, or set TEMPO_PERF_DIR to the directory holding it)"
done
is_openmpi=0
mpi_flags=()
if "$mpirun" --version 2>&1 | grep -q "Open MPI"; then
    is_openmpi=1
    # shellcheck disable=SC2054 # "self,vader" is one argument
    mpi_flags=(--oversubscribe --bind-to none --mca btl self,vader)
    [ "$(id -u)" = 0 ] && mpi_flags+=(--allow-run-as-root)
fi

# The other tempo build (-B): its perf programs and its own launcher.
base_perf="" base_run=""
if [ -n "$base_dir" ]; then
    for d in "$base_dir/perf" "$base_dir"; do
        if [ -x "$d/all_reduce_perf" ] || [ -x "$d/${collectives%% *}_perf" ]; then
            base_perf=$(cd "$d" && pwd)
            break
        fi
    done
    [ -n "$base_perf" ] || die "-B $base_dir: no *_perf programs in it or in its perf/"
    for c in "$base_perf/../tools/tempo-run" "$base_perf/tempo-run"; do
        if [ -x "$c" ]; then base_run=$c; break; fi
    done
    [ -n "$base_run" ] || die "-B $base_dir: no tools/tempo-run beside its perf/"
    for coll in $collectives; do
        [ -x "$base_perf/${coll}_perf" ] || die "-B $base_dir: ${coll}_perf not built there"
    done
fi

# ---- the machine's load ------------------------------------------------------------------------
# Cores' worth of CPU time others use over 1 s while nothing of ours runs (from /proc/stat).
others_busy() {
    local a b
    a=$(awk '/^cpu / {print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8}' /proc/stat)
    sleep 1
    b=$(awk '/^cpu / {print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8}' /proc/stat)
    awk -v a="$a" -v b="$b" -v n="$cores" 'BEGIN {
        split(a, x, " "); split(b, y, " ");
        t = y[2] - x[2]; printf "%.2f", (t > 0 ? (y[1] - x[1]) / t * n : 0) }'
}
busy_warn() { # WHEN BUSY
    if awk -v b="$2" 'BEGIN {exit !(b > 0.25)}'; then
        echo "# WARNING: $1, other processes used $2 cores of $cores: the figures are unreliable" \
            "(they compete with the ranks for the cores); rerun on a quiet machine"
    fi
}

host=$(hostname 2>/dev/null || uname -n)
cores=$(nproc 2>/dev/null || echo 1)
busy_before=$(others_busy)

# Open MPI's waiting: what its users would set here (-y auto), or as forced.
mpi_env=()
if [ "$is_openmpi" = 1 ]; then
    case $yield_mode in
    1) mpi_yield=1 why="forced by -y 1" ;;
    0) mpi_yield=0 why="forced by -y 0" ;;
    *)
        if [ "$nranks" -ge "$cores" ]; then
            mpi_yield=1 why="$nranks ranks >= $cores cores"
        elif awk -v b="$busy_before" 'BEGIN {exit !(b > 0.25)}'; then
            mpi_yield=1 why="the machine is busy: others used $busy_before cores"
        else
            mpi_yield=0 why="$nranks ranks < $cores cores on a quiet machine"
        fi
        ;;
    esac
    mpi_env=(env "OMPI_MCA_mpi_yield_when_idle=$mpi_yield")
    if [ "$mpi_yield" = 1 ]; then
        mpi_waiting="Open MPI yields when idle (mpi_yield_when_idle=1: $why)"
    else
        mpi_waiting="Open MPI busy-polls (mpi_yield_when_idle=0: $why)"
    fi
else
    mpi_waiting="MPI waits as its defaults say (not Open MPI: -y does not apply)"
fi

# ---- JSON -> "type redop size time_us busbw" lines (out-of-place) --------------------------------
extract() {
    if [ -x /usr/bin/python3 ]; then
        /usr/bin/python3 - "$1" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
print("#backend", d["backend"])
for r in d["results"]:
    g = r["out_of_place"]
    if g is not None:
        print(r["type"], r["redop"], r["size"], g["time_us"], g["busbw"])
EOF
    else
        awk '
        function val(s, key,    i, t) {
            i = index(s, "\"" key "\":")
            if (i == 0) return ""
            t = substr(s, i + length(key) + 3)
            sub(/[,}].*/, "", t)
            gsub(/"/, "", t)
            return t
        }
        /^"backend":/ {
            b = $0; sub(/^"backend":"/, "", b); sub(/",?$/, "", b); print "#backend", b
        }
        /^\{"size":/ {
            oop = substr($0, index($0, "\"out_of_place\":"))
            print val($0, "type"), val($0, "redop"), val($0, "size"), val(oop, "time_us"),
                val(oop, "busbw")
        }' "$1"
    fi
}

work=$(mktemp -d "${TMPDIR:-/tmp}/tempo-compare.XXXXXX") || die "cannot create a temporary dir"
trap 'rm -rf "$work"' EXIT
flags=(-b 8 -e 128M -f 2 -d float -o sum "${extra[@]}")

run_one() { # label prog json log launcher...
    local label=$1 prog=$2 json=$3 log=$4
    shift 4
    "$@" "$prog" "${flags[@]}" -J "$json" >"$log" 2>&1
    local rc=$?
    if [ $rc -ne 0 ]; then
        echo "$prog_name: the $label run failed (exit $rc): $* $prog ${flags[*]}" >&2
        tail -n 20 "$log" | sed 's/^/    /' >&2
        [ -n "$keep_dir" ] && mkdir -p "$keep_dir" && cp "$work"/* "$keep_dir"/ 2>/dev/null
        exit 1
    fi
}

# Per (type, redop, size) and side: median, min and max over the rounds, in first-seen order; a
# side without data prints "-". Sides (tags, from the file names): tempo, mpi, and base with -B.
# shellcheck disable=SC2016 # an awk program, not shell
table_awk='
function stat(tag, key, f, which,    n, i, j, v, a) {
    n = cnt[tag, key, f]
    if (n == 0)
        return ""
    for (i = 1; i <= n; i++)
        a[i] = val[tag, key, f, i] + 0
    for (i = 2; i <= n; i++) {
        v = a[i]
        for (j = i - 1; j >= 1 && a[j] > v; j--)
            a[j + 1] = a[j]
        a[j + 1] = v
    }
    if (which == "min") return a[1]
    if (which == "max") return a[n]
    return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function show(x, fmt) {
    return x == "" ? "-" : sprintf(fmt, x)
}
function times(tag, key) { # "med (min-max)"
    if (cnt[tag, key, "t"] == 0) return "-"
    return sprintf("%.2f (%.2f-%.2f)", stat(tag, key, "t", "med"), stat(tag, key, "t", "min"),
                   stat(tag, key, "t", "max"))
}
function ratio(num, den,    a, b) { # median time of num / median time of den
    a = stat(num, key, "t", "med"); b = stat(den, key, "t", "med")
    return (a != "" && b != "" && b > 0) ? sprintf("%.2f", a / b) : "-"
}
FNR == 1 { tag = FILENAME; sub(/\.txt$/, "", tag); sub(/.*\./, "", tag) }
$1 == "#backend" { sub(/^#backend /, ""); backend[tag] = $0; next }
{
    group = $1 " " $2
    key = group SUBSEP $3
    if (!(group in seen_group)) { seen_group[group] = 1; groups[++ngroups] = group }
    if (!(key in seen_key)) { seen_key[key] = 1; sizes[group, ++nsizes[group]] = $3 }
    val[tag, key, "t", ++cnt[tag, key, "t"]] = $4
    val[tag, key, "b", ++cnt[tag, key, "b"]] = $5
}
END {
    printf "# tempo: %s; MPI: %s%s\n", backend["tempo"], backend["mpi"],
        base ? "; base: " backend["base"] " (" base ")" : ""
    printf "# time in us: median over rounds (min-max); busbw in GB/s (1e9), medians;"
    printf " out-of-place columns\n# MPI/tempo = MPI median time / tempo median time (> 1: tempo faster)%s\n",
        base ? "; base/tempo likewise (> 1: this tempo is faster than the base)" : ""
    for (g = 1; g <= ngroups; g++) {
        group = groups[g]
        printf "#\n# %s %s\n", coll, group
        printf "# %9s  %24s  %24s  %8s  %8s  %9s", "size (B)", "tempo time (us)",
            "MPI time (us)", "tempo bw", "MPI bw", "MPI/tempo"
        if (base)
            printf "  %24s  %10s", "base time (us)", "base/tempo"
        printf "\n"
        for (s = 1; s <= nsizes[group]; s++) {
            key = group SUBSEP sizes[group, s]
            printf "  %9s  %24s  %24s  %8s  %8s  %9s", sizes[group, s], times("tempo", key),
                times("mpi", key), show(stat("tempo", key, "b", "med"), "%.3f"),
                show(stat("mpi", key, "b", "med"), "%.3f"), ratio("mpi", "tempo")
            if (base)
                printf "  %24s  %10s", times("base", key), ratio("base", "tempo")
            printf "\n"
        }
    }
}'

sides="tempo mpi"
[ -n "$base_perf" ] && sides="tempo mpi base"
nsides=$(echo $sides | wc -w)
for coll in $collectives; do
    tprog=$(find_prog "${coll}_perf")
    mprog=$(find_prog "${coll}_perf_mpi")
    for side in $sides; do : >"$work/$coll.$side.txt"; done
    for ((r = 1; r <= repeats; r++)); do
        # The side that goes first rotates: none always runs on a warm (or loaded) machine.
        read -r -a order <<<"$sides"
        k=$(((r - 1) % nsides))
        order=("${order[@]:k}" "${order[@]:0:k}")
        for which in "${order[@]}"; do
            json="$work/$coll.$which.$r.json" log="$work/$coll.$which.$r.log"
            case $which in
            tempo) run_one tempo "$tprog" "$json" "$log" "$tempo_run" -n "$nranks" ;;
            mpi) run_one MPI "$mprog" "$json" "$log" "${mpi_env[@]}" "$mpirun" -n "$nranks" \
                "${mpi_flags[@]}" ;;
            base) run_one base "$base_perf/${coll}_perf" "$json" "$log" "$base_run" -n "$nranks" ;;
            esac
            extract "$json" >>"$work/$coll.$which.txt" || die "cannot read $json"
        done
    done

    echo "# tempo vs MPI: ${coll}, $nranks ranks, $repeats rounds (every side once per round," \
        "the first rotating), host $host, $cores cores"
    echo "# flags: ${flags[*]}"
    echo "# $mpi_waiting"
    busy_warn "before the runs" "$busy_before"
    files=()
    for side in $sides; do files+=("$work/$coll.$side.txt"); done
    awk -v coll="$coll" -v base="$base_dir" "$table_awk" "${files[@]}"
    echo
done
busy_after=$(others_busy)
echo "# others' load: $busy_before cores before the runs, $busy_after after"
busy_warn "after the runs" "$busy_after"

if [ -n "$keep_dir" ]; then
    mkdir -p "$keep_dir" && cp "$work"/* "$keep_dir"/ && echo "# raw runs kept in $keep_dir"
fi
exit 0
