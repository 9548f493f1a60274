#!/bin/sh
# tests/rdma/rxe_smoke.sh — the Soft-RoCE guest of tests/rdma/rxe-vm.sh works and tempo runs in
# it: boots the guest once and runs, as TAP points,
#   1. rxe0's port 1: PORT_ACTIVE, and GID index 1 is ::ffff:10.77.0.1, RoCE v2 (the IPv4 GID that
#      a verbs transport uses: TEMPO_IB_GID_INDEX=1);
#   2. ibv_rc_pingpong between two processes on rxe0 (RC, RXE_SMOKE_ITERS (300) x 64 KiB, GID 1):
#      both exit 0; the point prints the client's Mbit/s, the ceiling of the emulated link that
#      the verbs benchmarks are compared against (a figure, never a condition);
#   3. tests/mr/coll_tcp.sh at 2 ranks (COLL_RANKS=2, COLL_BIG_BYTES=65536): every collective over
#      TCP inside the guest, proving that the build tree and its libraries run there unchanged;
#      its own TAP becomes diagnostics when it fails.
# Skipped (1..0 # SKIP, with rxe-vm.sh's reason) where rxe-vm.sh cannot run: not root, no
# qemu or kernel package and no network to install them, or the guest does not boot. Measured on
# the 2-core CI machine: the whole test 28 s at load 7 (2 vCPUs; ibv_rc_pingpong 301-303 Mbit/s),
# 59-120 s at load 15-20 (1 vCPU; coll_tcp.sh 30-79 s of it, 3.7 s on the host; ibv_rc_pingpong
# 31-88 Mbit/s); the first run also downloads the kernel (70 MB) and builds the initramfs (10 s).
# Knobs: RXE_SMOKE_TIMEOUT (900 s: rxe-vm.sh -t, the guest's hang guard), RXE_SMOKE_ITERS (300),
# RXE_SMOKE_CPUS (rxe-vm.sh -c, default its own). Run by the automake harness with top_builddir and
# top_srcdir exported, or by hand from the build directory:
#     top_builddir=$PWD top_srcdir=/path/to/src sh tests/rdma/rxe_smoke.sh

. "$(dirname "$0")/lib.sh"

# ---- in the guest (rxe-vm.sh runs this with the build directory as the current directory) -------
if [ "${1:-}" = --guest ]; then
    tmp=$(mktemp -d /tmp/rxe_smoke.XXXXXX) || exit 1
    echo 1..3
    # 1: the port and the GID table, as ibv_devinfo prints them.
    ibv_devinfo -v -d rxe0 >"$tmp/devinfo" 2>&1
    if grep -q 'state:.*PORT_ACTIVE' "$tmp/devinfo" &&
        grep -q 'GID\[ *1\]:.*::ffff:10\.77\.0\.1, RoCE v2' "$tmp/devinfo"; then
        echo "ok 1 - rxe0 port 1 ACTIVE, GID[1] ::ffff:10.77.0.1 RoCE v2"
    else
        echo "not ok 1 - rxe0 port 1 ACTIVE, GID[1] ::ffff:10.77.0.1 RoCE v2"
        sed 's/^/#   | /' "$tmp/devinfo"
    fi
    grep -E 'GID\[' "$tmp/devinfo" | sed 's/^[[:space:]]*/# /'

    # 2: RC traffic between two processes. The client connects to the server's TCP port (18515)
    # only once the server listens there (polled with a deadline, not slept on).
    iters=${RXE_SMOKE_ITERS:-300}
    case $iters in '' | *[!0-9]* | 0) iters=300 ;; esac
    rxe_pingpong "$tmp/pp" "$iters" 120
    crc=$pp_crc src=$pp_src
    # Each iteration moves 64 KiB each way: the client counts both directions.
    rate=$(sed -n "s/^$((iters * 131072)) bytes in .* = \([0-9.]*\) Mbit\/sec/\1/p" "$tmp/pp.client")
    if [ "$crc" = 0 ] && [ "$src" = 0 ] && [ -n "$rate" ]; then
        echo "ok 2 - ibv_rc_pingpong on rxe0, $iters x 64 KiB: $rate Mbit/s ($(nproc) vCPU)"
    else
        echo "not ok 2 - ibv_rc_pingpong on rxe0, $iters x 64 KiB (client exit $crc, server $src)"
        for f in server client; do
            sed "s/^/#   $f | /" "$tmp/pp.$f"
        done
    fi
    sed 's/^/# client: /' "$tmp/pp.client"

    # 3: a multi-rank test of the suite, over TCP, from the shared build tree.
    t0=$(date +%s)
    COLL_RANKS=2 COLL_BIG_BYTES=65536 COLL_TIMEOUT=300 timeout 600 sh \
        "${top_srcdir:-.}/tests/mr/coll_tcp.sh" >"$tmp/coll" 2>&1
    rc=$?
    t=$(($(date +%s) - t0))
    pts=$(grep -c '^ok ' "$tmp/coll")
    if [ "$rc" = 0 ] && [ "$pts" -gt 0 ] && ! grep -q '^not ok\|^Bail out' "$tmp/coll" &&
        grep -q '^ok .* tcp n=2 ' "$tmp/coll"; then
        echo "ok 3 - tests/mr/coll_tcp.sh at 2 ranks in the guest: $pts points passed in $t s"
    else
        echo "not ok 3 - tests/mr/coll_tcp.sh at 2 ranks in the guest (exit $rc, $pts ok, $t s)"
        grep -v '^ok ' "$tmp/coll" | tail -n 60 | sed 's/^/#   | /'
    fi
    rm -rf "$tmp"
    exit 0
fi

# ---- on the host --------------------------------------------------------------------------------
cpus=""
[ -z "${RXE_SMOKE_CPUS:-}" ] || cpus="-c $RXE_SMOKE_CPUS"
rxe_tap_host rxe_smoke "${RXE_SMOKE_TIMEOUT:-900}" $cpus -- tools/tempo-run tests/mr/coll_test
