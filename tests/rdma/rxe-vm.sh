#!/bin/sh
# tests/rdma/rxe-vm.sh — runs a command on real RDMA verbs: boots Debian's kernel in qemu (TCG
# software emulation: /dev/kvm exists on the CI machines but its vCPUs do not run), loads Soft-RoCE
# (rdma_rxe) on a dummy network device with an IPv4 address, checks that ibv_devices lists rxe0 and
# that its port is ACTIVE, then runs COMMAND in the guest and exits with COMMAND's exit status.
#
#   tests/rdma/rxe-vm.sh [options] -- COMMAND [ARGS...]
#
#   -c, --cpus N      guest vCPUs (default 1). With 2, multi-threaded TCG ran 2 ranks 1.4 times as
#                     fast on an idle 2-core host, but 2 times as slow on a loaded one (load 17,
#                     as under make check): the vCPU threads wait on each other for a core
#   -m, --mem MIB     guest memory in MiB (default 2048; the guest's /tmp lives in it)
#   -t, --timeout S   kill qemu (by pid) and fail with status 124 after S seconds (default 600)
#   -2, --two         two devices: rxe0 on d0 (10.77.0.1/24) and rxe1 on d1 (10.77.1.1/24), to test
#                     device choice (TEMPO_IB_HCA); by default only rxe0 on d0 (10.77.0.1/24).
#                     Each device reaches itself only: rxe0 <-> rxe1 RC traffic never arrives
#                     (between two local addresses it goes through lo, where rxe does not
#                     receive), so ranks that pick different devices hang until TEMPO_TIMEOUT
#   -w, --rw DIR      also share DIR read-write (repeatable)
#   -v, --verbose     kernel messages and each set-up step on the console
#
# The guest sees the host's root filesystem read-only (9p), so the host's programs and libraries
# run unchanged in it: bash, coreutils, timeout, libibverbs with the rxe provider, librdmacm, UCX,
# the compilers. The current directory, $top_builddir and $top_srcdir (when set and absolute) and
# each --rw DIR are shared read-write at their host paths: tests write their logs and results
# there, and the host reads them after the guest is gone. /tmp, /var/tmp, /run and /dev are the
# guest's own (tmpfs and devtmpfs, in guest memory; what is written there is lost). COMMAND runs
# in the current directory with the caller's environment (every variable except PWD, OLDPWD,
# SHLVL, TMPDIR and make's MAKEFLAGS, MFLAGS, MAKELEVEL), stdin /dev/null, as root; its output and
# the guest's appear on this script's stdout.
#
# Exit status: COMMAND's; 77 (skipped, one line saying why) when not root, when qemu or the kernel
# cannot be installed (apt-get or the network is missing) or the guest does not boot; 124 when the
# timeout killed qemu; 1 when the guest booted but could not be set up (9p, rxe, port not ACTIVE:
# the line says which) or stopped before COMMAND ended (a kernel panic: see the console).
#
# The first run installs qemu-system-x86, busybox-static, cpio, ibverbs-utils, ibverbs-providers
# and iproute2 where missing, downloads the kernel package that linux-image-amd64 names and builds
# an initramfs (busybox and the kernel's modules for virtio, 9p, rdma_rxe, rdma_ucm, dummy, veth);
# both stay in $TEMPO_RXE_DIR (default /var/tmp/tempo-rxe, shared by concurrent runs under a lock),
# so later boots take a few seconds and need no network (remove the directory to take a newer
# kernel). Nothing else is left behind: the run's temporary directory is removed and qemu (the
# only process started) is killed by pid on timeout or when this script is interrupted; nothing is
# mounted on the host (qemu serves 9p itself).
#
# Addresses and GIDs in the guest: rxe0 port 1 has GID index 0 = fe80::... (the dummy device's
# IPv6 link-local address) and index 1 = ::ffff:10.77.0.1, both RoCE v2 (rxe has no RoCE v1): a
# verbs transport that connects over IPv4 uses TEMPO_IB_GID_INDEX=1 (ibv_rc_pingpong -g 1). The
# guest's hostname is tempo-rxe and the loopback device is up (tempo-run's rendezvous).
#
# Examples (from the build directory; TEMPO_HOST_ID=%r puts each rank on its own "host", so that
# the ranks of the one guest do not use shared memory):
#   tests/rdma/rxe-vm.sh -- ibv_devinfo -v
#   tests/rdma/rxe-vm.sh -t 600 -- env TEMPO_TIMEOUT=30 TEMPO_HOST_ID=%r TEMPO_IB_HCA=rxe0 \
#       TEMPO_IB_GID_INDEX=1 timeout 500 tools/tempo-run -n 2 perf/all_reduce_perf -b 8 -e 1M -f 2
#   tests/rdma/rxe-vm.sh -t 900 -- make check TESTS=tests/mr/tempo_run.sh
# (make check in the guest: build the check programs on the host first, `make check TESTS=`;
# the guest compiles some 20 times slower). tests/rdma/rxe_smoke.sh (make check) runs
# ibv_rc_pingpong and a 2-rank tempo test this way.

# ---- stage 2: runs in the guest, chrooted into the host's root (see guest_init below) ----------
in_guest() {
    R=/run/tempo-rxe
    . "$R/conf"
    gerr() {
        echo "rxe-vm: guest: $*"
        echo "$*" >"$R/error"
        sync
        exit 1
    }
    say() { [ "$rxe_verbose" = 0 ] || echo "rxe-vm: guest: $*"; }
    stty -onlcr 2>/dev/null # the console would turn every \n into \r\n on the host's stdout
    mount -t proc proc /proc || gerr "cannot mount /proc"
    mount -t sysfs sys /sys || gerr "cannot mount /sys"
    mount -t devtmpfs dev /dev || gerr "cannot mount /dev"
    mkdir -p /dev/pts /dev/shm
    mount -t devpts devpts /dev/pts
    mount -t tmpfs -o mode=1777 shm /dev/shm || gerr "cannot mount /dev/shm"
    mount -t tmpfs -o mode=1777 tmp /tmp || gerr "cannot mount /tmp"
    mount -t tmpfs -o mode=1777 vartmp /var/tmp || gerr "cannot mount /var/tmp"
    i=0
    while [ "$i" -lt "$rxe_nrw" ]; do
        eval "d=\$rxe_rw_$i"
        mkdir -p "$d" 2>/dev/null # only where a guest tmpfs hides the host's directory
        mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=mmap "rw$i" "$d" ||
            gerr "cannot mount the host's $d (9p tag rw$i)"
        say "shared read-write: $d"
        i=$((i + 1))
    done
    hostname tempo-rxe
    ip link set lo up || gerr "cannot bring up lo"
    i=0
    while [ "$i" -lt "$rxe_ndev" ]; do
        ip link add "d$i" type dummy && ip addr add "10.77.$i.1/24" dev "d$i" &&
            ip link set "d$i" up || gerr "cannot create the dummy device d$i (10.77.$i.1/24)"
        rdma link add "rxe$i" type rxe netdev "d$i" || gerr "rdma link add rxe$i on d$i failed"
        i=$((i + 1))
    done
    i=0
    while [ "$i" -lt "$rxe_ndev" ]; do
        ibv_devices | grep -qw "rxe$i" || gerr "ibv_devices does not list rxe$i"
        n=0
        until ibv_devinfo -d "rxe$i" | grep -q 'state:.*PORT_ACTIVE'; do
            n=$((n + 1))
            [ "$n" -lt 50 ] || gerr "rxe$i's port is not ACTIVE after 5 s: $(ibv_devinfo -d \
                "rxe$i" | grep 'state:')"
            sleep 0.1
        done
        say "rxe$i on d$i (10.77.$i.1): PORT_ACTIVE"
        i=$((i + 1))
    done
    [ "$rxe_verbose" = 0 ] || ibv_devinfo -v | grep -E 'hca_id|state:|GID\['
    : >"$R/started"
    env -i /bin/sh "$R/cmd" </dev/null
    echo $? >"$R/status.tmp" && mv "$R/status.tmp" "$R/status"
    sync
    i=$rxe_nrw
    while [ "$i" -gt 0 ]; do
        i=$((i - 1))
        eval "umount \"\$rxe_rw_$i\"" 2>/dev/null # best effort: the command may leave processes
    done
    exit 0
}
if [ "${1:-}" = --in-guest ]; then
    in_guest
fi

# ---- stage 1: the initramfs's /init (busybox) ---------------------------------------------------
# Loads the modules, mounts the host's root read-only and this run's directory over 9p, runs stage
# 2 in the host's root, then powers off. Kept small: its text is part of the initramfs's cache key.
guest_init='#!/bin/sh
PATH=/bin
export PATH
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
while read -r m; do
    insmod "/mods/$m" || echo "rxe-vm: guest: insmod $m failed"
done </mods/order
o=trans=virtio,version=9p2000.L,msize=262144
mkdir -p /newroot
if mount -t 9p -o "$o,ro,cache=loose" hostroot /newroot &&
    mount -t tmpfs -o mode=755 run /newroot/run && mkdir /newroot/run/tempo-rxe &&
    mount -t 9p -o "$o,cache=none" run /newroot/run/tempo-rxe; then
    : >/newroot/run/tempo-rxe/booted
    chroot /newroot /bin/sh /run/tempo-rxe/stage2
else
    echo "rxe-vm: guest: cannot mount the host filesystem over 9p"
fi
sync
echo 0 >/proc/sys/kernel/printk
poweroff -f
'
# Modules the guest loads (with what they depend on, read from each module's .modinfo): virtio
# and 9p for the shared filesystems, rdma_rxe and the user verbs, rdma_ucm for librdmacm, dummy
# and veth for the devices under rxe. crc32_generic: rxe's CRC32 through the crypto API, a soft
# dependency that modinfo does not list.
guest_modules="virtio_pci 9pnet_virtio 9p crc32_generic rdma_rxe ib_uverbs rdma_ucm dummy veth"

# ---- host ---------------------------------------------------------------------------------------
me=rxe-vm
skip() {
    echo "$me: SKIP: $*"
    exit 77
}
die() { # MESSAGE [STATUS]
    echo "$me: $1"
    exit "${2:-1}"
}
usage() {
    sed -n '/^#   tests\/rdma\/rxe-vm.sh \[/,/^#   -v/p' "$0" | sed 's/^# \{0,1\}//'
    exit "$1"
}

cpus=1 mem=2048 limit=600 ndev=1 verbose=0 rwdirs=""
while [ $# -gt 0 ]; do
    case $1 in
    -c | --cpus) cpus=${2:-} && shift ;;
    -m | --mem) mem=${2:-} && shift ;;
    -t | --timeout) limit=${2:-} && shift ;;
    -2 | --two) ndev=2 ;;
    -w | --rw) rwdirs="$rwdirs
${2:-}" && shift ;;
    -v | --verbose) verbose=1 ;;
    -h | --help) usage 0 ;;
    --) shift && break ;;
    *) echo "$me: unknown option $1" >&2 && usage 2 >&2 ;;
    esac
    shift
done
[ $# -gt 0 ] || usage 2 >&2
for v in "$cpus" "$mem" "$limit"; do
    case $v in
    '' | *[!0-9]* | 0) echo "$me: -c, -m and -t take a positive number" >&2 && exit 2 ;;
    esac
done

[ "$(id -u)" = 0 ] || skip "not root (installs packages; the guest's root shares the host's files)"

W=${TEMPO_RXE_DIR:-/var/tmp/tempo-rxe}
mkdir -p "$W" || skip "cannot create the work directory $W"
run="" qpid="" t=""
cleanup() {
    if [ -n "$qpid" ]; then # timeout(1)'s pid: it passes the signal on to qemu and waits for it
        kill "$qpid" 2>/dev/null
        wait "$qpid" 2>/dev/null
    fi
    [ -z "$run" ] || rm -rf "$run"
    [ -z "$t" ] || rm -rf "$t"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM HUP

# Host packages, once. The lock serializes concurrent runs' set-up (apt, download, initramfs);
# apt-get's own lock waits for other users of dpkg.
exec 9>"$W/lock"
flock -w 900 9 || die "timed out waiting for $W/lock"
need=""
command -v qemu-system-x86_64 >/dev/null || need="$need qemu-system-x86"
ldd /bin/busybox 2>&1 | grep -q 'not a dynamic' || need="$need busybox-static"
command -v cpio >/dev/null || need="$need cpio"
command -v ibv_devinfo >/dev/null && command -v ibv_rc_pingpong >/dev/null ||
    need="$need ibverbs-utils"
ls /usr/lib/*/libibverbs/librxe-rdmav*.so >/dev/null 2>&1 || need="$need ibverbs-providers"
command -v rdma >/dev/null && command -v ip >/dev/null || need="$need iproute2"
if [ -n "$need" ]; then
    command -v apt-get >/dev/null || skip "no apt-get to install$need"
    echo "$me: installing$need"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        -o DPkg::Lock::Timeout=600 $need >"$W/apt.log" 2>&1 ||
        skip "apt-get install$need failed (no network?): $(tail -n 1 "$W/apt.log")"
fi

# The kernel: the package that linux-image-amd64 depends on, downloaded once; its version is
# remembered so that later runs need no package lists.
if [ -s "$W/kernel" ]; then
    img=$(cat "$W/kernel")
else
    img=$(apt-cache depends linux-image-amd64 2>/dev/null |
        awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
    [ -n "$img" ] || skip "apt-cache does not know linux-image-amd64 (no package lists?)"
fi
deb=$W/$img.deb
if [ ! -s "$deb" ]; then
    echo "$me: downloading $img"
    rm -rf "$W/dl" && mkdir "$W/dl" &&
        (cd "$W/dl" && apt-get download "$img" >../apt.log 2>&1) && mv "$W/dl/$img"_*.deb "$deb" ||
        skip "cannot download $img (no network?): $(tail -n 1 "$W/apt.log")"
    rm -rf "$W/dl"
fi
echo "$img" >"$W/kernel"

# The initramfs: busybox, the modules in load order, /init. Its name carries a checksum of what
# goes into it, so a change to the module list or to guest_init builds a new one.
key=$(printf '%s\n%s\n' "$guest_init" "$guest_modules" | cksum | cut -d' ' -f1)
initrd=$W/initrd-$img-$key.gz
vmlinuz=$W/vmlinuz-$img
if [ ! -s "$initrd" ] || [ ! -s "$vmlinuz" ]; then
    echo "$me: building the initramfs for $img"
    t=$W/build.$$ # removed by cleanup if the build fails
    rm -rf "$t" && mkdir -p "$t/root/bin" "$t/root/mods" "$t/root/proc" "$t/root/sys" \
        "$t/root/dev" || die "cannot create $t"
    dpkg-deb -x "$deb" "$t/deb" || die "cannot unpack $deb"
    kver=$(ls "$t/deb/lib/modules")
    kdir=$t/deb/lib/modules/$kver
    find "$kdir" -name '*.ko*' >"$t/index"
    modinfo_deps() { # a module's "depends=" list, compressed or not
        case $1 in
        *.xz) xz -dc "$1" ;;
        *.zst) zstd -qdc "$1" ;;
        *) cat "$1" ;;
        esac | tr '\0' '\n' | sed -n 's/^depends=//p' | tr ',-' ' _'
    }
    # NAME: its dependencies, then itself, each once, into $t/root/mods. A subshell, so that the
    # recursion has its own variables.
    load_after() (
        m=$(echo "$1" | tr - _)
        ! grep -qx "$m.ko" "$t/root/mods/order" 2>/dev/null || exit 0
        p=$(grep -E "/$(echo "$m" | sed 's/_/[-_]/g')\.ko(\.xz|\.zst)?$" "$t/index" | head -n 1)
        [ -n "$p" ] || die "$img has no module $m"
        for d in $(modinfo_deps "$p"); do
            load_after "$d" || exit 1
        done
        case $p in
        *.xz) xz -dc "$p" >"$t/root/mods/$m.ko" ;;
        *.zst) zstd -qdc "$p" >"$t/root/mods/$m.ko" ;;
        *) cp "$p" "$t/root/mods/$m.ko" ;;
        esac || die "cannot copy $p"
        echo "$m.ko" >>"$t/root/mods/order"
    )
    for m in $guest_modules; do
        load_after "$m" || exit 1
    done
    cp /bin/busybox "$t/root/bin/" || die "cannot copy /bin/busybox"
    for a in sh mount mkdir insmod chroot sync poweroff echo; do
        ln -s busybox "$t/root/bin/$a"
    done
    printf '%s' "$guest_init" >"$t/root/init" && chmod +x "$t/root/init"
    (cd "$t/root" && find . | cpio -o -H newc 2>/dev/null) | gzip -1 >"$t/initrd.gz" &&
        cp "$t/deb/boot/vmlinuz-$kver" "$t/vmlinuz" &&
        mv "$t/vmlinuz" "$vmlinuz" && mv "$t/initrd.gz" "$initrd" ||
        die "cannot build $initrd"
    rm -rf "$t"
    t=""
fi
exec 9>&-

# This run's directory, shared with the guest as /run/tempo-rxe: stage 2 (a copy of this script),
# its settings, the environment and command, and what the guest reports back.
run=$(mktemp -d /tmp/tempo-rxe.XXXXXX) || die "cannot create a temporary directory"
cp "$0" "$run/rxe-vm.sh" && echo 'exec /bin/sh /run/tempo-rxe/rxe-vm.sh --in-guest' >"$run/stage2"
(
    unset PWD OLDPWD SHLVL TMPDIR MAKEFLAGS MFLAGS MAKELEVEL
    export -p
) >"$run/env"
q() { # single-quoted for sh
    printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"
}
{
    echo ". /run/tempo-rxe/env"
    echo "cd $(q "$PWD") || exit 125"
    printf 'exec'
    for a in "$@"; do
        printf ' %s' "$(q "$a")"
    done
    echo
} >"$run/cmd"

# Shared read-write: the current directory, top_builddir and top_srcdir, the --rw directories;
# each once, and none inside another (its parent's share covers it), parents first.
shares=$(
    for d in "$PWD" "${top_builddir:-}" "${top_srcdir:-}" $rwdirs; do
        case $d in
        /*) [ -d "$d" ] && (cd "$d" && pwd -P) ;;
        ?*) [ -d "$d" ] && (cd "$d" && pwd -P) || echo "$me: --rw $d: no such directory" >&2 ;;
        esac
    done | LC_ALL=C sort -u | awk '{
        for (i = 1; i <= n; i++)
            if (index($0, k[i] "/") == 1 || k[i] == "/")
                next
        k[++n] = $0
        print
    }'
)
set -- # from here on, the shares' qemu options
i=0
while read -r d; do
    [ -n "$d" ] || continue
    echo "rxe_rw_$i=$(q "$d")" >>"$run/conf"
    p=$(echo "$d" | sed 's/,/,,/g') # qemu's escape for a comma in a value
    set -- "$@" -virtfs "local,path=$p,mount_tag=rw$i,security_model=none"
    i=$((i + 1))
done <<EOF
$shares
EOF
echo "rxe_nrw=$i rxe_ndev=$ndev rxe_verbose=$verbose" >>"$run/conf"

loglevel=3
[ "$verbose" = 0 ] || loglevel=7
start=$(date +%s)
timeout -k 5 "$limit" qemu-system-x86_64 -accel tcg -cpu max -smp "$cpus" -m "$mem" \
    -nodefaults -no-user-config -display none -no-reboot \
    -chardev "stdio,id=con,signal=off,logfile=$run/console" -serial chardev:con \
    -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
    -virtfs "local,path=$run,mount_tag=run,security_model=none" "$@" \
    -kernel "$vmlinuz" -initrd "$initrd" \
    -append "console=ttyS0 loglevel=$loglevel panic=-1 random.trust_cpu=on" </dev/null &
qpid=$!
wait "$qpid"
rc=$?
qpid=""
secs=$(($(date +%s) - start))
if [ -f "$run/status" ]; then
    rc=$(cat "$run/status")
    [ "$verbose" = 0 ] || echo "$me: guest ran $secs s, COMMAND exited $rc"
    exit "$rc"
fi
[ "$rc" != 124 ] && [ "$rc" != 137 ] || die "timed out after $limit s (-t): killed qemu" 124
[ ! -f "$run/error" ] || die "the guest could not be set up: $(cat "$run/error")"
[ ! -f "$run/started" ] || die "the guest stopped before COMMAND ended (kernel panic? above)"
! grep -q '^rxe-vm: guest:' "$run/console" ||
    die "the guest could not be set up: $(sed -n 's/^rxe-vm: guest: //p' "$run/console" |
        head -n 1)"
last=$(grep -v '^[[:space:]]*$' "$run/console" | tail -n 1 | cut -c 1-120)
skip "the guest did not boot (qemu exited $rc after $secs s): ${last:-no console output}"
