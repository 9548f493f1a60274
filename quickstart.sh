#!/bin/sh
# quickstart.sh — set up a fresh Debian machine and run tempo's main job or its test suite.
#
#   ./quickstart.sh main       # 4 local ranks train a small GPT on the fortunes corpus
#   ./quickstart.sh test       # the whole test suite (make check), then the sanitizer part below,
#                              # with one pass/fail summary of both
#   ./quickstart.sh sanitize   # the sanitizer part alone
#   ./quickstart.sh sanitize-thread   # the ThreadSanitizer part (not part of `test`)
#
# Each does all the set-up: installs the Debian packages that are missing (apt-get, through sudo
# when not root), generates the build system (autoreconf), configures and builds. Steps that are
# already done are skipped, so running it again is quick. Build output goes to quickstart.log.
#
# The sanitizer part builds everything with --enable-sanitizers=address,undefined in build-asan/ (a
# copy of the tracked sources, since this tree is configured in place) and runs the tests listed in
# TEMPO_SANITIZER_TESTS (tests/local.mk) there, coll_*.sh at 3 ranks; QUICKSTART_SANITIZERS=0 skips
# it in `test`. Its build output goes to build-asan/quickstart.log. The ThreadSanitizer part does
# the same with --enable-sanitizers=thread in build-tsan/ and TEMPO_TSAN_TESTS (the tests that run
# the progress thread, the scheduled lane and the transports' threads), at reduced sizes; it takes
# about 13 minutes on 2 cores (789 s, most of it testing), so `test` (and CI) leave it out.
set -eu

cd "$(dirname "$0")"
what=${1:-}
case "$what" in
main | test | sanitize | sanitize-thread) ;;
-h | --help) # the comment block above, however long it grows
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"
    exit 0
    ;;
--version) # configure.ac's version, the one config.h's PACKAGE_VERSION gets (before any build)
    v=$(sed -n 's/^m4_define(\[tempo_\(major\|minor\|patch\)\], \[\([0-9]*\)\])$/\2/p' configure.ac)
    echo "quickstart.sh (tempo) $(echo $v | tr ' ' .)"
    exit 0
    ;;
*)
    echo "usage: ./quickstart.sh main|test|sanitize|sanitize-thread|--help|--version" >&2
    exit 2
    ;;
esac

say() { printf '==> %s\n' "$*"; }

# 1. Debian packages: compiler and autotools, MPI (the baseline), the optional dependencies
#    that configure detects, and clang with libFuzzer (libclang-rt-dev) for the fuzz targets
#    (tests/fuzz, in make check). CUDA and NCCL are not Debian packages; configure finds them under
#    /usr/local/cuda when present.
packages="gcc make autoconf automake libtool pkg-config libc6-dev
          openmpi-bin libopenmpi-dev libhwloc-dev libzstd-dev libssl-dev libucx-dev libibverbs-dev
          python3 iproute2 fortunes fortunes-min gnuplot-nox strace clang libclang-rt-dev"
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

# 2. Build system, configuration, build: build DIR [CONFIGURE-ARGS...] in the tree DIR (log in
#    DIR/quickstart.log).
jobs=$(nproc 2>/dev/null || echo 2)
build() {
    (
        cd "$1"
        shift
        if [ ! -x configure ] || [ configure.ac -nt configure ]; then
            say "autoreconf"
            autoreconf -fi >quickstart.log 2>&1 || { cat quickstart.log; exit 1; }
        fi
        if [ ! -f config.status ] || [ configure -nt config.status ]; then
            say "configure $*"
            ./configure "$@" >>quickstart.log 2>&1 || { tail -40 quickstart.log; exit 1; }
        fi
        say "make -j$jobs"
        make -j"$jobs" >>quickstart.log 2>&1 || { tail -40 quickstart.log; exit 1; }
    )
}

# count DIR [LABEL]: adds the TAP results of the tree DIR's last make check (its .trs files, other
#   build-* trees left out) to passed/failed/skipped, and prints each failed test with its failed
#   checks and all the diagnostics that follow them (the failing run's command, status and log),
#   so that a failure is readable from the CI output.
passed=0
failed=0
skipped=0
count() {
    for trs in $(find "$1" -path "$1/build-*" -prune -o -name '*.trs' -print); do
        p=$(grep -c '^:test-result: \(PASS\|XFAIL\)' "$trs" || true)
        f=$(grep -c '^:test-result: \(FAIL\|XPASS\|ERROR\)' "$trs" || true)
        s=$(grep -c '^:test-result: SKIP' "$trs" || true)
        passed=$((passed + p))
        failed=$((failed + f))
        skipped=$((skipped + s))
        if [ "$f" -gt 0 ]; then
            echo "FAILED${2:+ ($2)}: ${trs%.trs} (log: ${trs%.trs}.log)"
            # each failed check with every diagnostic line after it (the failing run's command,
            # status and log: tests/mr/launch.sh's diag), up to 150 lines a test
            # (automake's own PASS:/FAIL: echo of each point is skipped, not an end), and the
            # ranks' standard error that tests/transport/conform.sh shows after a failure
            awk '/^(PASS|FAIL|XFAIL|XPASS|SKIP|ERROR):/ {next}
                 /^not ok/ || /the last lines of its standard error:$/ {on = 1; print; next}
                 /^ok/ {on = 0} on' "${trs%.trs}.log" 2>/dev/null | head -150 |
                sed 's/^/    /' || true
            # no failed check (a crash, a Bail out!, a wrong plan): the log's end
            grep -q '^not ok' "${trs%.trs}.log" 2>/dev/null ||
                tail -n 30 "${trs%.trs}.log" 2>/dev/null | sed 's/^/    /' || true
        fi
    done
}

# sanitize DIR SANITIZERS TESTS [NAME=VALUE...]: a sanitizer part. Builds a copy of the sources in
#   DIR with --enable-sanitizers=SANITIZERS and runs make check TESTS='$(TESTS)' there with the
#   NAME=VALUE variables in its environment; sets san_status (0: built and every test passed).
sanitize() {
    san_dir=$1 san_list=$2 san_tests=$3
    shift 3
    san_status=0
    san_t0=$(date +%s)
    say "sanitizers: $san_dir/ (--enable-sanitizers=$san_list)"
    mkdir -p "$san_dir"
    if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        # this tree is configured in place, which rules out a VPATH build: copy the sources
        # (tracked and new files; mtimes kept, so that a rerun rebuilds only what changed)
        git ls-files -z --cached --others --exclude-standard |
            tar --null -T - --ignore-failed-read -cf - 2>/dev/null | tar -xf - -C "$san_dir" ||
            { echo "cannot copy the sources to $san_dir/" >&2; san_status=1; return; }
        build "$san_dir" --enable-sanitizers="$san_list" || { san_status=1; return; }
    else
        echo "not a git checkout: build by hand in a clean tree (README.md, Sanitizer builds)" >&2
        san_status=1
        return
    fi
    say "sanitizers: make check TESTS='\$($san_tests)'"
    find "$san_dir" -name '*.trs' -exec rm -f {} +
    (
        cd "$san_dir"
        env "$@" make -j"$jobs" check TESTS="\$($san_tests)" >>quickstart.log 2>&1
    ) || san_status=$?
    say "sanitizers: build and tests took $(($(date +%s) - san_t0)) s"
}

# The address,undefined part (build-asan/, TEMPO_SANITIZER_TESTS):
#   ASAN_OPTIONS: leak checking on (LeakSanitizer at every process's exit: a leak fails its test),
#     stop at the first error. No suppressions: our own leaks get fixed. The one third-party
#     library these tests reach is Open MPI, in difftest's comparison with it, which does not free
#     what it allocated at exit: difftest.sh turns the leak check off for the MPI side alone.
#     allocator_may_return_null: a failed malloc returns NULL, as it does without ASan, instead of
#     aborting: tempo handles it (test_stream's fuzzed headers claim messages of up to 128 GiB,
#     which must fail the stream with "no memory to buffer", not the process).
#   UBSAN_OPTIONS: a stack trace with each report (configure already makes the first one fatal).
#   COLL_RANKS=3 COLL_FULL_BIG_MAX=0: coll_shm.sh and coll_tcp.sh at 3 ranks only (odd, so every
#     algorithm's uneven split runs), the MB size with its reduced product (every rank count with
#     the whole product takes over half an hour under ASan on 2 cores).
#   DIFFTEST_RANKS="2 3 5" DIFFTEST_CASES=60: the randomized differential test, 360 cases.
sanitize_address() {
    sanitize build-asan address,undefined TEMPO_SANITIZER_TESTS \
        ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=0:allocator_may_return_null=1 \
        UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 COLL_RANKS=3 COLL_FULL_BIG_MAX=0 \
        DIFFTEST_RANKS="2 3 5" DIFFTEST_CASES=60
}

# The thread part (build-tsan/, TEMPO_TSAN_TESTS): every process runs 5-20 times slower.
#   TSAN_OPTIONS: every report printed (each process then exits 66, which fails its test), with
#     both stacks of a lock-order inversion. No suppressions: every report so far was fixed.
#   COLL_*: coll_shm.sh and coll_tcp.sh at 3 ranks, the large size 256 KiB instead of 3 MiB, with
#     64 KiB shared-memory staging and rings so that it still takes several segments.
#   DET_*: determinism.sh at 3 ranks, its large size 256 KiB instead of 1.5 MB.
#   DIFFTEST_RANKS="2 3 5" DIFFTEST_CASES=120: the randomized differential test, 720 cases.
#   FAULT_RANK_GUARD=400: the fault tests' last-resort guard in each rank (120 s by default).
sanitize_thread() {
    sanitize build-tsan thread TEMPO_TSAN_TESTS TSAN_OPTIONS=second_deadlock_stack=1:allocator_may_return_null=1 \
        COLL_RANKS=3 COLL_FULL_BIG_MAX=0 COLL_BIG_BYTES=262144 \
        COLL_ENV="TEMPO_SHM_COLL_BYTES=64K TEMPO_SHM_RING_BYTES=64K" DET_RANKS=3 \
        DET_BIG_BYTES=262144 DIFFTEST_RANKS="2 3 5" DIFFTEST_CASES=120 FAULT_RANK_GUARD=400
}
if [ "$what" = sanitize ] || [ "$what" = sanitize-thread ]; then
    if [ "$what" = sanitize ]; then
        sanitize_address
    else
        sanitize_thread
    fi
    count "$san_dir" "$san_list"
    echo "$skipped skipped; details in $san_dir/test-suite.log and $san_dir/quickstart.log"
    echo "$passed passed, $failed failed"
    [ "$san_status" -eq 0 ] && [ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
    exit $?
fi
build .

# 3. The job.
if [ "$what" = main ]; then
    say "4 local ranks train a GPT (4 layers, 4 heads, 128 channels, context 128) on Debian's"
    say "fortunes: ZeRO-1, ALQ 3-bit compressed, TIC-scheduled gradient sync (trainer/tempo-train)"
    say "into tempo-train-out/ (--overwrite: a run of this job from before is replaced)"
    exec ./tools/tempo-run -n 4 ./trainer/tempo-train --dp 4 --zero 1 --compress alq:bits=3 \
        --sched tic --layers 4 --heads 4 --channels 128 --context 128 --batch 8 --steps 200 \
        --warmup 20 --lr 2e-3 --val-every 25 --val-windows 128 --sample 200 --threads 1 \
        --out tempo-train-out --overwrite
fi
say "make check (multi-rank tests launch real processes; this takes a while)"
status=0
make -j"$jobs" check >>quickstart.log 2>&1 || status=$?
count .
if [ "$passed" -eq 0 ] && [ "$status" -eq 0 ]; then
    echo "no test results found (see quickstart.log)" >&2
    status=1
fi
if [ "${QUICKSTART_SANITIZERS:-1}" != 0 ]; then
    n_passed=$passed n_failed=$failed n_skipped=$skipped
    sanitize_address
    passed=0 failed=0 skipped=0
    count build-asan address,undefined
    echo "address,undefined build (build-asan/): $passed passed; $failed failed; $skipped skipped"
    if [ "$passed" -eq 0 ] && [ "$san_status" -eq 0 ]; then
        echo "no sanitizer test results found (see build-asan/quickstart.log)" >&2
        san_status=1
    fi
    [ "$san_status" -eq 0 ] || status=$san_status
    passed=$((passed + n_passed)) failed=$((failed + n_failed)) skipped=$((skipped + n_skipped))
fi
echo "$skipped skipped; details in test-suite.log and quickstart.log (build-asan/ for sanitizers)"
echo "$passed passed, $failed failed"
if [ "$status" -eq 0 ] && [ "$failed" -ne 0 ]; then
    status=1
fi
exit "$status"
