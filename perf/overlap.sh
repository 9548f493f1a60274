#!/bin/sh
# overlap.sh — scheduling and overlap on emulated hosts: builds HOSTS network namespaces joined by a
# bridge, each with a link shaped to RATE (tc tbf, both directions), runs perf/overlap_bench across
# them (one rank per host) for the uniform and the VGG-like profile with communication about equal
# to compute, and for the uniform profile with communication much smaller than compute, then tears
# the topology down (perf/netns-run does the namespaces). Needs root; exits 77 saying so otherwise.
#
#   perf/overlap.sh [-H HOSTS] [-r RATE] [-R ROUNDS] [-o DIR] [-- extra overlap_bench flags]
#
# Defaults: 4 hosts, 1gbit, 5 rounds. With -o DIR each scenario's table also goes to DIR as JSON.
# Programs are found next to this script (build tree or $(bindir)) or on PATH.
set -u
hosts=4
rate=1gbit
rounds=5
outdir=
usage() {
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
}
while [ $# -gt 0 ]; do
    case $1 in
    -H) hosts=$2; shift 2 ;;
    -r) rate=$2; shift 2 ;;
    -R) rounds=$2; shift 2 ;;
    -o) outdir=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    --) shift; break ;;
    *) echo "overlap.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
# netns-run checks for root (exit 77) and finds overlap_bench beside itself.
netns="$(dirname "$0")/netns-run"
[ -x "$netns" ] || netns=netns-run
[ -n "$outdir" ] && mkdir -p "$outdir"
status=0
for scenario in "uniform 1.0" "vgg 1.0" "uniform 0.2"; do
    set -- $scenario "$@"
    profile=$1 ratio=$2
    shift 2
    echo "### profile $profile, communication / compute $ratio, $hosts hosts at $rate"
    json=
    [ -n "$outdir" ] && json="-J $outdir/overlap_${profile}_$ratio.json"
    # shellcheck disable=SC2086
    "$netns" -0 -H "$hosts" -r "$rate" -- overlap_bench -p "$profile" -r "$ratio" -R "$rounds" \
        $json "$@"
    rc=$?
    [ $rc -ne 0 ] && status=$rc
done
exit $status
