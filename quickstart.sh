#!/bin/sh
# quickstart.sh — set up a fresh Debian machine and run tempo's main job or its test suite.
#
#   ./quickstart.sh main   # 4 local ranks train a small GPT on the fortunes corpus (tempo-train)
#   ./quickstart.sh test   # the whole test suite (make check), with a pass/fail summary
#
# Each does all the set-up: installs the Debian packages that are missing (apt-get, through sudo
# when not root), generates the build system (autoreconf), configures and builds. Steps that are
# already done are skipped, so running it again is quick. Build output goes to quickstart.log.
set -eu

cd "$(dirname "$0")"
what=${1:-}
case "$what" in
main | test) ;;
-h | --help)
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
*)
    echo "usage: ./quickstart.sh main|test   (see --help)" >&2
    exit 2
    ;;
esac

say() { printf '==> %s\n' "$*"; }

# 1. Debian packages: compiler and autotools, MPI (the baseline), and the optional dependencies
#    that configure detects. CUDA and NCCL are not Debian packages; configure finds them under
#    /usr/local/cuda when present.
packages="gcc make autoconf automake libtool pkg-config libc6-dev
          openmpi-bin libopenmpi-dev libhwloc-dev libzstd-dev libucx-dev libibverbs-dev
          python3 iproute2 fortunes fortunes-min gnuplot-nox"
missing=""
for p in $packages; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing="$missing $p"
    fi
done
if [ -n "$missing" ]; then
    say "installing Debian packages:$missing"
    sudo=""
    if [ "$(id -u)" != 0 ]; then
        sudo=sudo
    fi
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing \
        >/dev/null
fi

# 2. Build system, configuration, build.
jobs=$(nproc 2>/dev/null || echo 2)
if [ ! -x configure ] || [ configure.ac -nt configure ]; then
    say "autoreconf"
    autoreconf -fi >quickstart.log 2>&1 || { cat quickstart.log; exit 1; }
fi
if [ ! -f config.status ] || [ configure -nt config.status ]; then
    say "configure"
    ./configure >>quickstart.log 2>&1 || { tail -40 quickstart.log; exit 1; }
fi
say "make -j$jobs"
make -j"$jobs" >>quickstart.log 2>&1 || { tail -40 quickstart.log; exit 1; }

# 3. The job.
if [ "$what" = main ]; then
    say "4 local ranks train a GPT (4 layers, 4 heads, 128 channels, context 128) on Debian's"
    say "fortunes: ZeRO-1, ALQ 3-bit compressed, TIC-scheduled gradient sync (trainer/tempo-train)"
    exec ./tools/tempo-run -n 4 ./trainer/tempo-train --dp 4 --zero 1 --compress alq:bits=3 \
        --sched tic --layers 4 --heads 4 --channels 128 --context 128 --batch 8 --steps 200 \
        --warmup 20 --lr 2e-3 --val-every 25 --val-batches 4 --sample 200 --threads 1 \
        --out tempo-train-out
fi
say "make check (multi-rank tests launch real processes; this takes a while)"
status=0
make -j"$jobs" check >>quickstart.log 2>&1 || status=$?
passed=0
failed=0
skipped=0
for trs in $(find . -name '*.trs'); do
    p=$(grep -c '^:test-result: \(PASS\|XFAIL\)' "$trs" || true)
    f=$(grep -c '^:test-result: \(FAIL\|XPASS\|ERROR\)' "$trs" || true)
    s=$(grep -c '^:test-result: SKIP' "$trs" || true)
    passed=$((passed + p))
    failed=$((failed + f))
    skipped=$((skipped + s))
    if [ "$f" -gt 0 ]; then
        echo "FAILED: ${trs%.trs} (log: ${trs%.trs}.log)"
        # the failed checks and the diagnostics that follow them, so a failure is readable from
        # the CI output alone
        grep -A6 '^not ok' "${trs%.trs}.log" 2>/dev/null | grep -v '^\(PASS\|FAIL\|SKIP\):' |
            head -40 | sed 's/^/    /' || true
    fi
done
if [ "$passed" -eq 0 ] && [ "$status" -eq 0 ]; then
    echo "no test results found (see quickstart.log)" >&2
    status=1
fi
echo "$skipped skipped; details in test-suite.log and quickstart.log"
echo "$passed passed, $failed failed"
if [ "$status" -eq 0 ] && [ "$failed" -ne 0 ]; then
    status=1
fi
exit "$status"
