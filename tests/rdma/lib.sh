# tests/rdma/lib.sh — sourced by the Soft-RoCE scripts (rxe_smoke.sh, verbs_rxe.sh,
# verbs_bench.sh), inside the guest of tests/rdma/rxe-vm.sh and on the host:
#
#   rxe_pingpong OUT ITERS SECS   (guest) ibv_rc_pingpong on rxe0, GID index 1, ITERS x 64 KiB,
#       between a server and a client of this guest; the client connects once the server listens
#       on its port (18515, polled with a deadline, not slept on). OUT.server and OUT.client get
#       their output, pp_src and pp_crc their exit statuses, pp_mbit the client's Mbit/s (empty
#       when it printed none).
#   rxe_tap_host NAME SECS [RXE-VM OPTIONS] -- PROGRAM...   (host) the host side of a TAP test run
#       in the guest: Bail out! when a PROGRAM of the build directory is missing; otherwise, from
#       the build directory (top_builddir and top_srcdir exported, absolute), boots the guest
#       (RXE_VM, default tests/rdma/rxe-vm.sh, with -t SECS and the options) to run the calling
#       script with --guest, its TAP streaming through; 1..0 # SKIP with rxe-vm.sh's reason when
#       the guest cannot run; Bail out! when rxe-vm.sh failed or the guest printed no plan.
#       Exits the calling script.

rxe_pingpong() {
    _pp="ibv_rc_pingpong -d rxe0 -g 1 -n $2 -s 65536"
    timeout "$3" $_pp >"$1.server" 2>&1 &
    _spid=$!
    _n=0
    until ss -ltn | grep -q ':18515 '; do
        _n=$((_n + 1))
        [ "$_n" -lt 200 ] && kill -0 "$_spid" 2>/dev/null || break
        sleep 0.05
    done
    timeout "$3" $_pp 10.77.0.1 >"$1.client" 2>&1
    pp_crc=$?
    wait "$_spid"
    pp_src=$?
    pp_mbit=$(sed -n 's/^[0-9]* bytes in .* = \([0-9.]*\) Mbit\/sec/\1/p' "$1.client" | head -n 1)
}

rxe_tap_host() {
    _name=$1 _secs=$2
    shift 2
    _vmopts=
    while [ $# -gt 0 ] && [ "$1" != -- ]; do
        _vmopts="$_vmopts $1"
        shift
    done
    [ $# -gt 0 ] && shift
    _b=${top_builddir:-.}
    _s=${top_srcdir:-$(dirname "$0")/../..}
    for _f in "$@"; do
        if [ ! -x "$_b/$_f" ]; then
            echo "Bail out! $_b/$_f not found or not executable (build it first: make check)"
            exit 1
        fi
    done
    _vm=${RXE_VM:-$_s/tests/rdma/rxe-vm.sh}
    if [ ! -f "$_vm" ]; then
        echo "1..0 # SKIP $_vm is missing (the Soft-RoCE guest harness; RXE_VM names another copy)"
        exit 0
    fi
    _self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
    _vm=$(cd "$(dirname "$_vm")" && pwd)/$(basename "$_vm")
    _tmp=$(mktemp -d "${TMPDIR:-/tmp}/$_name.XXXXXX") || exit 1
    trap 'rm -rf "$_tmp"' EXIT
    trap 'exit 1' HUP INT TERM
    cd "$_b" || exit 1
    top_builddir=$(pwd)
    top_srcdir=$(cd "$_s" && pwd)
    export top_builddir top_srcdir
    _t0=$(date +%s)
    # The guest's lines stream through (tee) and are kept to find rxe-vm.sh's reason for a skip.
    {
        # shellcheck disable=SC2086 # $_vmopts is a word list
        sh "$_vm" $_vmopts -t "$_secs" -- sh "$_self" --guest 2>&1
        echo $? >"$_tmp/rc"
    } | tee "$_tmp/out"
    _rc=$(cat "$_tmp/rc")
    if [ "$_rc" = 77 ]; then
        echo "1..0 # SKIP $(sed -n 's/^rxe-vm: SKIP: //p' "$_tmp/out" | tail -n 1)"
        exit 0
    fi
    echo "# rxe-vm.sh exited $_rc after $(($(date +%s) - _t0)) s"
    if [ "$_rc" != 0 ] || ! grep -q '^1\.\.[1-9]' "$_tmp/out"; then
        echo "Bail out! rxe-vm.sh exited $_rc: $(grep '^rxe-vm:' "$_tmp/out" | tail -n 1)"
        exit 1
    fi
    exit 0
}
