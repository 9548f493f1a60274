#!/usr/bin/env bash
# compare.sh — tempo against the MPI baseline, side by side, on this machine, in one run.
#
# Runs <collective>_perf under tempo-run and <collective>_perf_mpi under mpirun with the same
# flags, alternating them REPEATS times (tempo, MPI, MPI, tempo, tempo, MPI, ...) so that both see
# the same noise and neither always goes first, reads their JSON (-J) and prints one table per
# dtype/op: size, median busbw of each, the ratio tempo/MPI (> 1: tempo is faster), and the median
# time of each. busbw and time are the out-of-place columns (nccl-tests' busbw; time is the slowest
# rank's per-iteration average, -a 3).
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

usage() {
    cat <<EOF
Usage: $prog_name [-n NRANKS] [-R REPEATS] [-c COLLECTIVE] [-k DIR] [-- extra perf flags]
  -n NRANKS      ranks of both runs (2)
  -R REPEATS     runs of each, alternated; the table shows medians (3)
  -c COLLECTIVE  all_reduce reduce_scatter all_gather broadcast reduce alltoall sendrecv, or all
                 (all_reduce); tempo's names (allreduce, allgather, ...) work too
  -k DIR         keep every run's JSON and output in DIR
  -h             this text
Default perf flags: -b 8 -e 128M -f 2 -d float -o sum; flags after -- are appended.
Environment: TEMPO_PERF_DIR (where the *_perf programs are), TEMPO_RUN, MPIRUN.
EOF
}

die() {
    echo "$prog_name: $*" >&2
    exit 1
}

while getopts ":n:R:c:k:h" opt; do
    case $opt in
    n) nranks=$OPTARG ;;
    R) repeats=$OPTARG ;;
    c) collective=$OPTARG ;;
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
mpi_flags=()
if "$mpirun" --version 2>&1 | grep -q "Open MPI"; then
    # shellcheck disable=SC2054 # "self,vader" is one argument
    mpi_flags=(--oversubscribe --bind-to none --mca btl self,vader)
    [ "$(id -u)" = 0 ] && mpi_flags+=(--allow-run-as-root)
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

# Medians per (type, redop, size) and tag, in first-seen order; a tag without data prints "-".
# shellcheck disable=SC2016 # an awk program, not shell
table_awk='
function med(tag, key, f,    n, i, j, v, a) {
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
    return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function show(x, fmt) {
    return x == "" ? "-" : sprintf(fmt, x)
}
FNR == 1 { tag = (FILENAME ~ /\.tempo\.txt$/) ? "tempo" : "mpi" }
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
    printf "# tempo: %s; MPI: %s\n", backend["tempo"], backend["mpi"]
    printf "# busbw in GB/s (1e9), out-of-place columns; ratio = tempo busbw / MPI busbw"
    printf " (> 1: tempo faster)\n"
    for (g = 1; g <= ngroups; g++) {
        group = groups[g]
        printf "#\n# %s %s\n", coll, group
        printf "# %10s  %12s  %12s  %7s  %12s  %12s\n", "size (B)", "tempo busbw", "MPI busbw",
            "ratio", "tempo (us)", "MPI (us)"
        for (s = 1; s <= nsizes[group]; s++) {
            key = group SUBSEP sizes[group, s]
            tb = med("tempo", key, "b"); mb = med("mpi", key, "b")
            tt = med("tempo", key, "t"); mt = med("mpi", key, "t")
            ratio = (tb != "" && mb != "" && mb > 0) ? sprintf("%.2f", tb / mb) : "-"
            printf "  %10s  %12s  %12s  %7s  %12s  %12s\n", sizes[group, s], show(tb, "%.3f"),
                show(mb, "%.3f"), ratio, show(tt, "%.2f"), show(mt, "%.2f")
        }
    }
}'

host=$(hostname 2>/dev/null || uname -n)
cores=$(nproc 2>/dev/null || echo "?")
for coll in $collectives; do
    tprog=$(find_prog "${coll}_perf")
    mprog=$(find_prog "${coll}_perf_mpi")
    : >"$work/$coll.tempo.txt"
    : >"$work/$coll.mpi.txt"
    for ((r = 1; r <= repeats; r++)); do
        # tempo first on odd repeats, MPI first on even ones: neither always runs on a warm machine
        if ((r % 2)); then order="tempo mpi"; else order="mpi tempo"; fi
        for which in $order; do
            if [ "$which" = tempo ]; then
                run_one tempo "$tprog" "$work/$coll.tempo.$r.json" "$work/$coll.tempo.$r.log" \
                    "$tempo_run" -n "$nranks"
            else
                run_one MPI "$mprog" "$work/$coll.mpi.$r.json" "$work/$coll.mpi.$r.log" \
                    "$mpirun" -n "$nranks" "${mpi_flags[@]}"
            fi
        done
        extract "$work/$coll.tempo.$r.json" >>"$work/$coll.tempo.txt" ||
            die "cannot read $work/$coll.tempo.$r.json"
        extract "$work/$coll.mpi.$r.json" >>"$work/$coll.mpi.txt" ||
            die "cannot read $work/$coll.mpi.$r.json"
    done

    echo "# tempo vs MPI: ${coll}, $nranks ranks, runs of each: $repeats, alternated (medians)," \
        "host $host, nproc $cores"
    echo "# flags: ${flags[*]}"
    awk -v coll="$coll" "$table_awk" "$work/$coll.tempo.txt" "$work/$coll.mpi.txt"
    echo
done

if [ -n "$keep_dir" ]; then
    mkdir -p "$keep_dir" && cp "$work"/* "$keep_dir"/ && echo "# raw runs kept in $keep_dir"
fi
exit 0
