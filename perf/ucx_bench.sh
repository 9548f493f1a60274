#!/usr/bin/env bash
# perf/ucx_bench.sh — the ucx transport against its baselines, in one run (perf/README.md, "UCX"):
#   net    all_reduce_perf on HOSTS emulated hosts (perf/tempo-netns-run: one rank per network
#          namespace, links shaped to 1 Gbit/s or unshaped) over tempo's tcp transport, over ucx
#          (UCX_TLS=tcp,self), and Open MPI's all_reduce_perf_mpi with --mca pml ucx on the same
#          namespaces (mpirun on host 0, its daemons started in the other namespaces through an
#          rsh agent that is `ip netns exec`);
#   local  all_reduce_perf on one host over ucx (UCX_TLS=sm,cma,self, TEMPO_TRANSPORTS=ucx,^shm)
#          against tempo's own shm (the default: its shared-memory all-reduce), and the ring
#          all-reduce forced on both (TEMPO_ALGO=allreduce:ring), which compares the transports
#          under the same point-to-point algorithm.
# Every group (hosts x rate, or local rank count) runs its sides in ROUNDS rounds, the side that
# goes first rotating, and prints per size the min / median / max over the rounds of the
# out-of-place busbw (GB/s) and time (us, slowest rank), plus the ratio of the medians against
# the first side. A run with #wrong > 0 or a failed exit is reported and makes the exit status 1.
#
# Usage (root, from the build tree): perf/ucx_bench.sh [-R ROUNDS] [-H "2 4"] [-r "1gbit none"]
#        [-n "2 4"] [-k DIR] [-- extra all_reduce_perf flags]
# Default perf flags: -b 64K -e 32M -f 8 -n 10 -w 2 -a 3 (flags after -- are appended and win).
# Everything runs under `timeout` (RUN_TIMEOUT s per run, 600) with TEMPO_TIMEOUT=60; the
# namespaces (prefix tub-) are removed by tempo-netns-run at the end of each run.
# Open MPI yields when idle (mpi_yield_when_idle 1): on this 2-core machine its ranks share cores
# with each other and with other work, which is what its users set there (see tempo-compare).
# pml ucx runs over UCX_TLS=tcp,self on eth0, like tempo's ucx side; Open MPI 4.1 selects it on
# non-InfiniBand devices only with pml_ucx_tls and pml_ucx_devices set to any.
set -u

rounds=3
host_counts="2 4"
rates="1gbit none"
local_ranks="2 4"
keep=""
run_timeout=${RUN_TIMEOUT:-600}
flags=(-b 64K -e 32M -f 8 -n 10 -w 2 -a 3)
while (($#)); do
    case $1 in
    -R) rounds=$2; shift 2 ;;
    -H) host_counts=$2; shift 2 ;;
    -r) rates=$2; shift 2 ;;
    -n) local_ranks=$2; shift 2 ;;
    -k) keep=$2; shift 2 ;;
    --) shift; flags+=("$@"); break ;;
    -h | --help) sed -n '2,/^set -u/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "ucx_bench.sh: unknown option $1" >&2; exit 2 ;;
    esac
done

here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$here/.." && pwd)
NETNS="$here/tempo-netns-run"
TR="$build/tools/tempo-run"
PERF="$here/all_reduce_perf"
PERF_MPI="$here/all_reduce_perf_mpi"
for f in "$NETNS" "$TR" "$PERF"; do
    [ -x "$f" ] || { echo "ucx_bench.sh: $f missing (make first)" >&2; exit 1; }
done
if ! "$build/tools/tempo-info" -t | grep -q '^ *ucx *available'; then
    echo "ucx_bench.sh: this build has no ucx transport" >&2
    exit 77
fi
mpi=1
if [ ! -x "$PERF_MPI" ] || ! command -v mpirun >/dev/null ||
    ! ompi_info 2>/dev/null | grep -q 'MCA pml: ucx'; then
    mpi=0
    echo "# no Open MPI with pml ucx (or no all_reduce_perf_mpi): the MPI side is left out"
fi

out=${keep:-$(mktemp -d "${TMPDIR:-/tmp}/ucx_bench.XXXXXX")}
mkdir -p "$out"
[ -z "$keep" ] && trap 'rm -rf "$out"' EXIT
status=0

# The rsh agent through which mpirun (in namespace tub-h0) starts its daemons in the other
# namespaces: "agent [ssh options] HOST COMMAND..." for HOST 10.77.0.<i+1> runs COMMAND in tub-h<i>.
agent="$out/netns-rsh"
cat >"$agent" <<'EOF'
#!/bin/sh
while [ $# -gt 0 ]; do
    case $1 in -*) shift ;; *) break ;; esac
done
host=$1
shift
i=$((${host##*.} - 1))
exec ip netns exec "tub-h$i" /bin/sh -c "$*"
EOF
chmod +x "$agent"

# Rank 0 of tempo-netns-run runs mpirun over the namespaces; the other ranks only hold their
# namespace until it is done (tempo-netns-run builds and removes the topology around them).
mpi_wrap="$out/mpi-wrap"
cat >"$mpi_wrap" <<'EOF'
#!/bin/sh
# mpi-wrap DONEFILE NHOSTS mpirun-args...: rank 0 runs mpirun, the others wait for DONEFILE.
done_file=$1
n=$2
shift 2
if [ "$TEMPO_RANK" != 0 ]; then
    i=0
    while [ ! -e "$done_file" ] && [ $i -lt 6000 ]; do sleep 0.1; i=$((i + 1)); done
    exit 0
fi
hosts=
i=1
while [ $i -le "$n" ]; do hosts="$hosts${hosts:+,}10.77.0.$i:1"; i=$((i + 1)); done
mpirun --allow-run-as-root --host "$hosts" -np "$n" "$@"
rc=$?
touch "$done_file"
exit $rc
EOF
chmod +x "$mpi_wrap"

# run NAME COMMAND...: one run, output in $out/NAME.out; checks the exit status and #wrong.
run() {
    local name=$1
    shift
    timeout "$run_timeout" "$@" >"$out/$name.out" 2>&1 </dev/null
    local rc=$?
    local wrong
    wrong=$(awk '$1 ~ /^[0-9]+$/ && NF >= 13 && ($9 != 0 || $13 != 0) {n++} END {print n + 0}' \
        "$out/$name.out")
    if [ "$rc" -ne 0 ] || [ "$wrong" -ne 0 ] || ! grep -q 'Avg bus bandwidth' "$out/$name.out"; then
        echo "# FAILED: $name (exit $rc, $wrong sizes with #wrong > 0); last lines:"
        tail -n 5 "$out/$name.out" | sed 's/^/#   /'
        status=1
    fi
}

side_cmd() { # side hosts rate round -> the command line of that side
    local side=$1 h=$2 rate=$3 r=$4
    local common=(-x TEMPO_TIMEOUT=60)
    case $side in
    tcp) echo "$NETNS" -H "$h" -r "$rate" -p tub- -0 "${common[@]}" -x TEMPO_TRANSPORTS=tcp \
        -- "$PERF" "${flags[@]}" ;;
    ucx) echo "$NETNS" -H "$h" -r "$rate" -p tub- -0 "${common[@]}" -x TEMPO_TRANSPORTS=ucx \
        -x UCX_TLS=tcp,self -x UCX_NET_DEVICES=eth0 -- "$PERF" "${flags[@]}" ;;
    mpi) echo "$NETNS" -H "$h" -r "$rate" -p tub- -0 -- "$mpi_wrap" "$out/done.$h.$rate.$r" "$h" \
        --mca plm_rsh_agent "$agent" --mca plm_rsh_no_tree_spawn 1 \
        --mca oob_tcp_if_include eth0 --mca btl ^openib,tcp,vader --mca pml ucx \
        --mca pml_ucx_tls any --mca pml_ucx_devices any \
        --mca osc ^ucx --mca mpi_yield_when_idle 1 --bind-to none \
        -x UCX_TLS=tcp,self -x UCX_NET_DEVICES=eth0 "$PERF_MPI" "${flags[@]}" ;;
    shm) echo env TEMPO_TIMEOUT=60 "$TR" -n "$h" --no-prefix "$PERF" "${flags[@]}" ;;
    ucxsm) echo env TEMPO_TIMEOUT=60 TEMPO_TRANSPORTS=ucx,^shm UCX_TLS=sm,cma,self "$TR" -n "$h" \
        --no-prefix "$PERF" "${flags[@]}" ;;
    shmring) echo env TEMPO_TIMEOUT=60 TEMPO_ALGO=allreduce:ring "$TR" -n "$h" --no-prefix \
        "$PERF" "${flags[@]}" ;;
    ucxring) echo env TEMPO_TIMEOUT=60 TEMPO_ALGO=allreduce:ring TEMPO_TRANSPORTS=ucx,^shm \
        UCX_TLS=sm,cma,self "$TR" -n "$h" --no-prefix "$PERF" "${flags[@]}" ;;
    esac
}

# table GROUP SIDES...: min/median/max of busbw and time per size over the rounds of each side.
table() {
    local group=$1
    shift
    echo
    echo "## $group (${rounds} rounds; busbw GB/s and time us of the out-of-place column;"
    echo "## min / median / max over rounds; ratio = median time of $1 / median time of the side)"
    for side in "$@"; do
        for f in "$out/$group.$side".r*.out; do
            [ -e "$f" ] && awk -v s="$side" '$1 ~ /^[0-9]+$/ && NF >= 13 {print s, $1, $8, $6}' "$f"
        done
    done | sort -k1,1 -k2,2n -k3,3g | awk -v first="$1" -v order="$*" '
        { key = $1 " " $2; n[key]++; bw[key, n[key]] = $3; t[key, n[key]] = $4; sizes[$2] = 1 }
        function med(a, k, c,   i, j, v, tmp) {
            for (i = 1; i <= c; i++) v[i] = a[k, i]
            for (i = 1; i <= c; i++) for (j = i + 1; j <= c; j++)
                if (v[j] + 0 < v[i] + 0) { tmp = v[i]; v[i] = v[j]; v[j] = tmp }
            lo = v[1]; hi = v[c]
            return c % 2 ? v[(c + 1) / 2] : (v[c / 2] + v[c / 2 + 1]) / 2
        }
        END {
            ns = split(order, sides, " ")
            printf "%10s", "bytes"
            for (i = 1; i <= ns; i++) printf " | %-32s", sides[i] ": busbw min/med/max, t med"
            for (i = 2; i <= ns; i++) printf " | %s/%s", first, sides[i]
            printf "\n"
            m = 0; for (s in sizes) list[++m] = s + 0
            for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++)
                if (list[j] < list[i]) { tmp = list[i]; list[i] = list[j]; list[j] = tmp }
            for (i = 1; i <= m; i++) {
                printf "%10d", list[i]
                for (k = 1; k <= ns; k++) {
                    key = sides[k] " " list[i]
                    if (!n[key]) { printf " | %-32s", "-"; continue }
                    mb = med(bw, key, n[key]); l = lo; h = hi
                    mt[k] = med(t, key, n[key])
                    printf " | %-32s", sprintf("%.3f/%.3f/%.3f %9.1f", l, mb, h, mt[k])
                }
                for (k = 2; k <= ns; k++) {
                    key = sides[k] " " list[i]
                    printf " | %s", (n[key] && n[sides[1] " " list[i]]) ? \
                        sprintf("%.2f", mt[1] / mt[k]) : "-"
                }
                printf "\n"
            }
        }'
}

echo "# ucx_bench.sh: $(date -u +%FT%TZ), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)," \
    "UCX $(pkg-config --modversion ucx 2>/dev/null || echo '?')," \
    "flags: ${flags[*]}"
sides_net="tcp ucx"
[ "$mpi" = 1 ] && sides_net="tcp ucx mpi"
for h in $host_counts; do
    for rate in $rates; do
        group="net-${h}hosts-$rate"
        set -- $sides_net
        for ((r = 0; r < rounds; r++)); do
            for ((k = 0; k < $#; k++)); do
                idx=$(((r + k) % $# + 1))
                side=${!idx}
                # shellcheck disable=SC2046
                run "$group.$side.r$r" $(side_cmd "$side" "$h" "$rate" "$r")
            done
        done
        table "$group" $sides_net
    done
done
for n in $local_ranks; do
    group="local-${n}ranks"
    set -- shm ucxsm shmring ucxring
    for ((r = 0; r < rounds; r++)); do
        for ((k = 0; k < $#; k++)); do
            idx=$(((r + k) % $# + 1))
            side=${!idx}
            # shellcheck disable=SC2046
            run "$group.$side.r$r" $(side_cmd "$side" "$n" none "$r")
        done
    done
    table "$group" shm ucxsm
    table "$group" shmring ucxring
done
echo "# ucx_bench.sh: done, load $(cut -d' ' -f1-3 /proc/loadavg)"
exit $status
