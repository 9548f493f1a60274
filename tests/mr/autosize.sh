#!/bin/sh
# tests/mr/autosize.sh — the scheduled lane's auto credit and chunk size (collectives/autosize.h)
# on real links, through tests/mr/autosize_run (2 ranks, 16 iterations of 4 scheduled 1 MiB float
# all-reduces, exact values; see autosize_run.c). Launches:
#   net    2 emulated hosts joined at 100 Mbit/s (perf/tempo-netns-run -r 100mbit; needs root and
#          ip/tc, else its points are skipped), defaults (auto credit and chunk size)
#   shm    2 ranks on shared memory, defaults
#   fixed  2 ranks on shared memory, TEMPO_CREDIT_BYTES=256K TEMPO_CHUNK_BYTES=64K
# The coordinator logs its first decision and each change of its choice at TEMPO_DEBUG=INFO
# (OVERLAP: a first decision that keeps the initial sizes is logged all the same, else a fast shm
# lane could log nothing: CI saw "0 choices" once), and autosize_run
# marks the iterations in the same stream. TAP points:
#   - each launch exits 0 with every value right on both ranks;
#   - every launch and rank has the same hash of its results: the sizes never change results;
#   - net: the lane decided within 6 iterations (first after 16 chunks), and every credit it chose
#     after its first decision is under 3 MiB: at most two of the 1 MiB requests in flight (the
#     product, at most 1 MiB by the next point, plus up to two 1 MiB chunks; with smaller auto
#     chunks, less; measured up to 2.6 MB);
#   - net: every decision measured a link's rate (at most 25 MB/s: 100 Mbit/s is 12.5 MB/s, and
#     tbf's 64 KiB bucket lets short bursts through faster) and a bandwidth-delay product R*L of
#     at most 1 MiB (the per-chunk latency measured on this emulated link ranged from 0.07 to
#     33 ms between runs, so R*L from 1 to 400 KB);
#   - shm: the lane decided, and its highest measured rate is above 25 MB/s, the most the net
#     point lets a 100 Mbit/s link read: the estimator tells the fast link from the slow one.
#     (Not a multiple of the net's rate: with 64 KiB auto chunks on a loaded machine single
#     decisions read as low as 59 MB/s, and under make check -j16 on 2 cores the best of 9
#     decisions read 107 MB/s against the net's 11.7.) (Its
#     credit is about R*L + 1 chunk too, in whole chunks, with the lane's tries of one more; its
#     latency, 35-1200 us here, depends on how soon the progress threads wake, and its chunks
#     are up to 4 MiB against the net's 64 KiB, so the credit comes out from one to a few
#     chunks, 1-2 MiB with these 1 MiB requests, and not always above the net's (64-128 KiB
#     once settled): no point compares the two credits.)
# Knobs: AUTOSIZE_TIMEOUT (per launch, 120 s), AUTOSIZE_KEEP=1 keeps the files.
# Run by the automake harness with top_builddir exported, or by hand:
#     top_builddir=/path/to/build sh tests/mr/autosize.sh

TR="${top_builddir:-.}/tools/tempo-run"
NR="${top_builddir:-.}/perf/tempo-netns-run"
PROG="${top_builddir:-.}/tests/mr/autosize_run"
for f in "$TR" "$NR" "$PROG"; do
    if [ ! -x "$f" ]; then
        echo "Bail out! $f not found or not executable (build it first: make check)"
        exit 1
    fi
done
unset TEMPO_ROOT TEMPO_RANK TEMPO_SIZE TEMPO_LOCAL_RANK TEMPO_LOCAL_SIZE TEMPO_ALGO TEMPO_SHM \
    TEMPO_HOST_ID TEMPO_CREDIT_BYTES TEMPO_CHUNK_BYTES TEMPO_SCHED
TEMPO_TIMEOUT=30
TEMPO_DEBUG=INFO
TEMPO_DEBUG_SUBSYS=OVERLAP
export TEMPO_TIMEOUT TEMPO_DEBUG TEMPO_DEBUG_SUBSYS
lt=${AUTOSIZE_TIMEOUT:-120}
set -- --iters 16 --buckets 4 --bytes 1048576 # autosize_run's arguments
tmp=$(mktemp -d "${TMPDIR:-/tmp}/autosize.XXXXXX") || exit 1
if [ "${AUTOSIZE_KEEP:-0}" = 1 ]; then
    trap 'echo "# files kept in $tmp"' EXIT
else
    trap 'rm -rf "$tmp"' EXIT
fi
trap 'exit 1' HUP INT TERM

n=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
notok() { n=$((n + 1)); echo "not ok $n - $*"; }
skip() { n=$((n + 1)); echo "ok $n # SKIP $*"; }
check() { # check CONDITION-STATUS DESCRIPTION
    if [ "$1" = 0 ]; then ok "$2"; else notok "$2"; fi
}

echo "1..7"

# Launches. tempo-netns-run and tempo-run prefix every line with [rank].
timeout "$lt" "$NR" -H 2 -r 100mbit -b 64kb -x TEMPO_TIMEOUT=$TEMPO_TIMEOUT -x TEMPO_DEBUG=INFO \
    -x TEMPO_DEBUG_SUBSYS=OVERLAP -- "$PROG" "$@" >"$tmp/net" 2>&1
net_rc=$?
timeout "$lt" "$TR" -n 2 "$PROG" "$@" >"$tmp/shm" 2>&1
shm_rc=$?
TEMPO_CREDIT_BYTES=256K TEMPO_CHUNK_BYTES=64K timeout "$lt" "$TR" -n 2 "$PROG" "$@" \
    >"$tmp/fixed" 2>&1
fixed_rc=$?

# launch_ok NAME RC: exit 0 and "wrong 0" from both ranks.
launch_ok() {
    good=$(grep -c 'RESULT rank [01] wrong 0 ' "$tmp/$1")
    if [ "$2" = 0 ] && [ "$good" -ge 2 ]; then
        ok "$1: exit 0, every value right on both ranks"
    else
        notok "$1: exit $2, $good ranks with every value right"
        sed 's/^/# /' "$tmp/$1" | tail -20
    fi
}
if [ "$net_rc" = 77 ]; then
    skip "net: no network namespaces here (needs root, ip and tc)"
else
    launch_ok net "$net_rc"
fi
launch_ok shm "$shm_rc"
launch_ok fixed "$fixed_rc"

results() {
    [ "$net_rc" = 77 ] || cat "$tmp/net"
    cat "$tmp/shm" "$tmp/fixed"
}
hashes=$(results | sed -n 's/.*RESULT rank [0-9]* wrong [0-9]* hash \([0-9a-f]*\).*/\1/p' |
    sort -u)
nh=$(results | grep -c 'RESULT rank')
nu=$(echo "$hashes" | grep -c .)
check "$([ "$nu" = 1 ] && [ "$nh" -ge 4 ] && echo 0)" \
    "every launch and rank got bitwise the same results ($nh results, $nu distinct hashes)"

# choices FILE: "iteration credit chunk rate(B/s) latency(s)" per change logged by the coordinator.
choices() {
    awk '/^\[0\] # iteration / { it = $4 }
         /^\[0\].*scheduled lane .*credit .* bytes \(auto\), chunk / {
             for (i = 1; i <= NF; i++) {
                 if ($i == "credit") { c = $(i + 3) }
                 if ($i == "chunk") { k = $(i + 3) }
                 if ($i == "rate") { r = $(i + 1) * 1e6 }
                 if ($i == "latency") { l = $(i + 1) * 1e-6 }
             }
             print it + 0, c, k, r, l
         }' "$1"
}
# show FILE: the choices, one line.
show() {
    choices "$1" | awk '{ s = s sprintf(" it%d: %d/%d (%.1f MB/s, %.0f us)", $1, $2, $3, $4 / 1e6,
                                    $5 * 1e6) } END { print NR " choices, credit/chunk:" s }'
}

if [ "$net_rc" = 77 ]; then
    skip "net: no network namespaces here"
    skip "net: no network namespaces here"
else
    echo "# net: $(show "$tmp/net")"
    first=$(choices "$tmp/net" | head -1 | awk '{ print $1 }')
    # credits chosen after the first decision: a line whose credit changed (a line that changes
    # only the chunk repeats the credit before it, the initial 4 MiB at first)
    bad=$(choices "$tmp/net" | awk 'NR > 1 && $2 != prev && $2 >= 3145728 {print} {prev = $2}' |
        wc -l)
    check "$([ -n "$first" ] && [ "$first" -le 6 ] && [ "$bad" = 0 ] && echo 0)" \
        "net: first decision in iteration ${first:-none} (<= 6), $bad credits after it of 3 MiB or more"
    bad=$(choices "$tmp/net" | awk '$4 > 25e6 || $4 * $5 > 1048576' | wc -l)
    check "$([ "$bad" = 0 ] && echo 0)" \
        "net: every decision measured a link's rate (<= 25 MB/s) and a product R*L <= 1 MiB ($bad not)"
fi
echo "# shm: $(show "$tmp/shm")"
if [ "$net_rc" = 77 ]; then
    skip "net: no network namespaces here"
else
    nr=$(choices "$tmp/net" | awk '$4 > m { m = $4 } END { print m + 0 }')
    sr=$(choices "$tmp/shm" | awk '$4 > m { m = $4 } END { print m + 0 }')
    check "$(awk -v s="$sr" -v n="$nr" 'BEGIN { exit !(n > 0 && s > 25e6) }' && echo 0)" \
        "shm: its highest measured rate ($sr B/s) is above 25 MB/s, the net's at most ($nr B/s)"
fi
