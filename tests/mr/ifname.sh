#!/bin/sh
# tests/mr/ifname.sh — TEMPO_IFNAME: the interface whose address a rank's data transport listens at
# and gives its peers (README: Security). In a network namespace made here (root and `ip` needed,
# else skipped): loopback and a veth pair tpo0/tpo1 (both ends inside it; no dummy driver on these
# machines), tpo0 with 10.99.0.1/24; nothing leaves the namespace.
#
#   1. TEMPO_IFNAME=tpo0, 2 ranks over tcp: both listen at 10.99.0.1 (TEMPO_DEBUG=INFO says where),
#      tcp carries the data, and the results are right;
#   2. the same without it: both listen at 127.0.0.1, the address they reach the rendezvous from;
#   3. TEMPO_IFNAME=nosuch0: the job fails at init with TEMPO_ERR_INVALID naming the interface and
#      those that have an address (tpo0 among them).
# POSIX sh, run by the automake harness with top_builddir exported, or by hand:
#     top_builddir=/path/to/build sh tests/mr/ifname.sh

srcdir=${top_srcdir:-$(dirname "$0")/../..}
B="${top_builddir:-.}"
TR="$B/tools/tempo-run"
PERF="$B/perf/all_reduce_perf"
. "$srcdir/tests/mr/launch.sh"
mr_prepare IFNAME "$PERF"

echo "1..3"
ns=tempo-ifname-$$
if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null 2>&1 || ! ip netns add "$ns" 2>/dev/null; then
    for i in 1 2 3; do
        ok "# SKIP needs root and ip netns (a namespace of its own for a dummy interface)"
    done
    exit 0
fi
trap 'ip netns del "$ns" 2>/dev/null; rm -rf "$tmp"' EXIT
ip -n "$ns" link set lo up &&
    ip -n "$ns" link add tpo0 type veth peer name tpo1 &&
    ip -n "$ns" addr add 10.99.0.1/24 dev tpo0 &&
    ip -n "$ns" link set tpo0 up && ip -n "$ns" link set tpo1 up ||
    echo "# could not set up tpo0 in $ns"

# job ENV...: 2 ranks in the namespace with ENV; status in rc, output in $tmp/job.out
job() {
    ip netns exec "$ns" env TEMPO_DEBUG=INFO TEMPO_DEBUG_SUBSYS=TRANSPORT,INIT \
        TEMPO_TRANSPORTS=tcp,^shm "$@" timeout 120 "$TR" -n 2 --timeout 60 "$PERF" -b 8 -e 64K \
        -f 64 -n 2 -w 1 >"$tmp/job.out" 2>&1 </dev/null
    rc=$?
}
listening_at() { grep -c "data transport listens at $1:" "$tmp/job.out"; }
wrong() {
    awk '/^\[0\] +[0-9]+ +[0-9]+ / { if ($10 != 0 || ($14 != 0 && $14 != "N/A")) w++ }
        END { print w + 0 }' "$tmp/job.out"
}
rows() { grep -c '^\[0\] \+[0-9]\+ \+[0-9]\+ ' "$tmp/job.out"; }

job TEMPO_IFNAME=tpo0
c=1
[ "$rc" = 0 ] && [ "$(listening_at 10.99.0.1)" = 2 ] &&
    [ "$(grep -c 'transport tcp carries the data of 1 peer' "$tmp/job.out")" = 2 ] &&
    [ "$(rows)" = 3 ] && [ "$(wrong)" = 0 ] && c=0
check $c "TEMPO_IFNAME=tpo0: both ranks listen at 10.99.0.1, tcp carries the data, results right" \
    "$tmp/job.out"

job
c=1
[ "$rc" = 0 ] && [ "$(listening_at 127.0.0.1)" = 2 ] && [ "$(listening_at 10.99.0.1)" = 0 ] &&
    [ "$(wrong)" = 0 ] && c=0
check $c "without TEMPO_IFNAME: both listen at 127.0.0.1, where they reach the rendezvous from" \
    "$tmp/job.out"

job TEMPO_IFNAME=nosuch0
c=1
[ "$rc" != 0 ] && grep -q "TEMPO_ERR_INVALID: TEMPO_IFNAME=nosuch0: no such interface with an IP address here (these have one: .*tpo0" \
    "$tmp/job.out" && [ "$(rows)" = 0 ] && c=0
check $c "TEMPO_IFNAME=nosuch0: the job fails at init naming it and the interfaces that have an address" \
    "$tmp/job.out"
