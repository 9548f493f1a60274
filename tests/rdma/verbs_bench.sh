#!/bin/sh
# tests/rdma/verbs_bench.sh — all_reduce_perf over verbs against tcp on the Soft-RoCE guest of
# tests/rdma/rxe-vm.sh, with ibv_rc_pingpong's figure as the ceiling of that emulated link. Not
# part of make check (a benchmark, never a condition). In each of ROUNDS rounds, one after the
# other (the order rotating from round to round, so that a slow stretch of the machine does not
# fall on one side only), in the same guest:
#   pingpong   ibv_rc_pingpong on rxe0, 64 KiB x 500 (RC send/receive; what the link moves)
#   verbs      2 ranks, TEMPO_TRANSPORTS=verbs,^shm, the defaults (zero-copy from 256 KiB)
#   verbs-ring the same with TEMPO_IB_RNDV_BYTES=0 (every byte copied through the rings)
#   tcp        2 ranks, TEMPO_TRANSPORTS=tcp,^shm (loopback sockets in the same guest)
# all_reduce_perf runs -b SIZE -e SIZE -n 10 -w 2 (float sum; 2 ranks: busbw = algbw); the table
# gives each side's MB/s (1e6 bytes/s; pingpong's Mbit/s / 8) as min / median / max over the
# rounds. The guest is software-emulated (TCG, 2 vCPUs) and so is the NIC: the figures compare
# the transports with each other and with what rxe moves here, nothing more.
#
#   sh tests/rdma/verbs_bench.sh [ROUNDS [SIZE]]      (from the build directory; root; 5, 4M)
#
# RXE_VM names the harness when it is not at tests/rdma/rxe-vm.sh of the source tree.

. "$(dirname "$0")/lib.sh"

if [ "${1:-}" = --guest ]; then
    rounds=$2 size=$3
    tmp=$(mktemp -d /tmp/verbs_bench.XXXXXX) || exit 1
    sides="pingpong verbs verbs-ring tcp"
    r=0
    while [ "$r" -lt "$rounds" ]; do
        # rotate the order: round r starts with side r mod 4
        order=$(echo $sides $sides | awk -v k=$((r % 4)) '{ for (i = 1; i <= 4; i++) printf "%s ", $(i + k) }')
        for s in $order; do
            case $s in
            pingpong)
                rxe_pingpong "$tmp/pp" 500 300
                v=$(echo "$pp_mbit" | awk '{ if ($1 != "") printf "%.2f", $1 / 8 }')
                ;;
            *)
                tr=verbs,^shm extra=
                [ "$s" = tcp ] && tr=tcp,^shm
                [ "$s" = verbs-ring ] && extra=TEMPO_IB_RNDV_BYTES=0
                env TEMPO_TIMEOUT=60 TEMPO_TRANSPORTS=$tr $extra timeout 600 tools/tempo-run -n 2 \
                    --no-prefix perf/all_reduce_perf -b "$size" -e "$size" -n 10 -w 2 \
                    >"$tmp/ar" 2>&1
                # the out-of-place row: bytes / time in us = MB/s (= busbw at 2 ranks; the
                # printed GB/s columns have too few digits at these rates)
                v=$(awk '!/^#/ && NF >= 12 && $6 > 0 { printf "%.2f", $1 / $6; exit }' "$tmp/ar")
                grep -q 'Out of bounds values : 0 OK' "$tmp/ar" || v=""
                ;;
            esac
            echo "$s ${v:-FAILED}" | tee -a "$tmp/all" | sed "s/^/# round $((r + 1)): /"
        done
        r=$((r + 1))
    done
    echo "# all_reduce_perf at $size bytes, 2 ranks (busbw), and ibv_rc_pingpong 64 KiB, in MB/s"
    printf '%-12s %10s %10s %10s %s\n' side min median max "(rounds)"
    for s in $sides; do
        awk -v s="$s" '$1 == s && $2 != "FAILED" { print $2 }' "$tmp/all" | sort -n >"$tmp/v"
        n=$(wc -l <"$tmp/v")
        f=$(grep -c "^$s FAILED" "$tmp/all")
        if [ "$n" -gt 0 ]; then
            printf '%-12s %10s %10s %10s (%d ok, %d failed)\n' "$s" "$(head -n 1 "$tmp/v")" \
                "$(sed -n "$(((n + 1) / 2))p" "$tmp/v")" "$(tail -n 1 "$tmp/v")" "$n" "$f"
        else
            printf '%-12s %10s %10s %10s (%d failed)\n' "$s" - - - "$f"
        fi
    done
    rm -rf "$tmp"
    exit 0
fi

rounds=${1:-5}
size=${2:-4M}
srcdir=$(cd "$(dirname "$0")/../.." && pwd)
vm=${RXE_VM:-$srcdir/tests/rdma/rxe-vm.sh}
[ -f "$vm" ] || { echo "verbs_bench: $vm is missing (RXE_VM names another copy)"; exit 2; }
[ -x tools/tempo-run ] && [ -x perf/all_reduce_perf ] ||
    { echo "verbs_bench: run it from a build directory (tools/tempo-run, perf/all_reduce_perf)"; exit 2; }
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
exec sh "$vm" -t $((rounds * 600 + 120)) -- sh "$self" --guest "$rounds" "$size"
