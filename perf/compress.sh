#!/bin/sh
# compress.sh — compressed all-reduce across emulated hosts: builds HOSTS network namespaces joined
# by a bridge with links shaped to each RATE (tc tbf, both directions; perf/netns-run), runs
# perf/qcoll_bench across them (one rank per host): the fp32 ring and each compressor in the same
# rounds, then tears the topology down. Needs root; exits 77 saying so otherwise.
#
#   perf/compress.sh [-H HOSTS] [-r "RATE..."] [-b BYTES] [-R ROUNDS] [-- qcoll_bench flags]
#
# Defaults: 2 hosts, rates "1gbit 100mbit", 64M per rank, 3 rounds, compressors alq:bits=3 and
# alq:bits=3,entropy=rans (pass -- -c SPEC ... to choose others).
set -u
hosts=2
rates="1gbit 100mbit"
bytes=64M
rounds=3
while [ $# -gt 0 ]; do
    case $1 in
    -H) hosts=$2; shift 2 ;;
    -r) rates=$2; shift 2 ;;
    -b) bytes=$2; shift 2 ;;
    -R) rounds=$2; shift 2 ;;
    -h | --help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --) shift; break ;;
    *) echo "compress.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
# netns-run checks for root (exit 77) and finds qcoll_bench beside itself.
netns="$(dirname "$0")/netns-run"
[ -x "$netns" ] || netns=netns-run
status=0
for rate in $rates; do
    echo "### $hosts hosts at $rate, $bytes per rank"
    "$netns" -0 -H "$hosts" -r "$rate" -- qcoll_bench -b "$bytes" -R "$rounds" "$@"
    rc=$?
    [ $rc -ne 0 ] && status=$rc
done
exit $status
