#!/bin/sh
# tests/fuzz/fuzz.sh — builds and runs tempo's libFuzzer targets (tests/fuzz/fuzz_<name>.c) with
# clang, outside the configured compiler: `make fuzz`, `make fuzz-build` and tests/fuzz/check.sh
# call it with the build's settings in the environment (tests/fuzz/local.mk).
#
#   fuzz.sh probe             whether FUZZ_CC links a libFuzzer program (the reason on stderr)
#   fuzz.sh build             every target into tests/fuzz/bin/ (of the build tree)
#   fuzz.sh replay [NAME...]  each target over its committed seed corpus, tests/fuzz/corpus/NAME/
#   fuzz.sh seeds [NAME...]   rewrite the committed seeds: each target built with -DFUZZ_SEEDS
#                             writes its own into tests/fuzz/corpus/NAME/ (tests/fuzz/fuzz.h)
#   fuzz.sh run SECONDS [NAME...]
#                             each target, one after another, for SECONDS, starting from its seeds
#                             and its working corpus FUZZ_WORK/corpus/NAME (kept between runs, not
#                             in the source tree); crashes go to FUZZ_WORK/crashes/NAME/
#
# What it builds: the library's C sources (FUZZ_SRC: libtempo_core's, and the trainer's data
# and checkpoint readers) once, with -fsanitize=fuzzer-no-link,address,undefined into objects
# under tests/fuzz/bin/obj/ (rebuilt when a source or a header it includes changed), archived;
# each target links that archive, so it gets the objects it reaches and nothing else.
#
# Environment: top_srcdir, top_builddir (default: this script's tree), FUZZ_CC (clang),
# FUZZ_INCLUDES (the build's include flags), FUZZ_LIBS (the libraries the sources need),
# FUZZ_SRC, FUZZ_WORK (default $TMPDIR/tempo-fuzz-<uid>), FUZZ_JOBS (parallel compiles, 2).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
srcdir=${top_srcdir:-$(cd "$here/../.." && pwd)}
builddir=${top_builddir:-$srcdir}
cc=${FUZZ_CC:-clang}
bin=$builddir/tests/fuzz/bin
work=${FUZZ_WORK:-${TMPDIR:-/tmp}/tempo-fuzz-$(id -u)}
san="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"
cflags="-std=gnu11 -O1 -g -ffp-contract=off -pthread $san"
cppflags="-DHAVE_CONFIG_H -I$builddir -I$srcdir -I$srcdir/include ${FUZZ_INCLUDES:-}"

targets()
{
    if [ $# -gt 0 ]; then
        echo "$@"
        return
    fi
    for f in "$srcdir"/tests/fuzz/fuzz_*.c; do
        f=${f##*/fuzz_}
        printf '%s ' "${f%.c}"
    done
    echo
}

probe()
{
    if ! command -v "$cc" >/dev/null 2>&1; then
        echo "no $cc (FUZZ_CC): install clang (Debian: apt-get install clang libclang-rt-dev)" >&2
        return 1
    fi
    t=$(mktemp -d "${TMPDIR:-/tmp}/tempo-fuzz-probe.XXXXXX")
    printf '%s\n' '#include <stddef.h>' '#include <stdint.h>' \
        'int LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }' \
        >"$t/p.c"
    if ! "$cc" -fsanitize=fuzzer,address,undefined -o "$t/p" "$t/p.c" >"$t/log" 2>&1; then
        echo "$cc cannot link a libFuzzer program (-fsanitize=fuzzer,address,undefined):" >&2
        head -5 "$t/log" >&2
        rm -rf "$t"
        return 1
    fi
    rm -rf "$t"
}

# newer OBJ: whether OBJ is missing or older than a file it was built from (its .d file).
stale()
{
    [ -f "$1" ] && [ -f "${1%.o}.d" ] || return 0
    for dep in $(sed -e 's/^[^:]*://' -e 's/\\$//' "${1%.o}.d"); do
        [ "$dep" -nt "$1" ] && return 0
    done
    return 1
}

build()
{
    probe
    [ -f "$builddir/config.h" ] || { echo "no $builddir/config.h: run configure first" >&2; exit 1; }
    mkdir -p "$bin/obj"
    # the library objects, FUZZ_JOBS compiles at a time
    : >"$bin/obj/todo"
    objs=""
    for s in ${FUZZ_SRC:-}; do
        case $s in *.c) ;; *) continue ;; esac
        o=$bin/obj/$(echo "${s%.c}" | tr / _).o
        objs="$objs $o"
        if stale "$o"; then
            echo "$srcdir/$s $o" >>"$bin/obj/todo"
        fi
    done
    [ -n "$objs" ] || { echo "FUZZ_SRC is empty: run through make (make fuzz)" >&2; exit 1; }
    if [ -s "$bin/obj/todo" ]; then
        echo "fuzz.sh: compiling $(wc -l <"$bin/obj/todo") library sources with $cc"
        # shellcheck disable=SC2086
        xargs -n 2 -P "${FUZZ_JOBS:-2}" sh -c \
            "$cc $cflags -w -fsanitize=fuzzer-no-link $cppflags -MMD -c \"\$0\" -o \"\$1\" || exit 255" \
            <"$bin/obj/todo"
        rm -f "$bin/libtempo_fuzz.a"
    fi
    if [ ! -f "$bin/libtempo_fuzz.a" ]; then
        # shellcheck disable=SC2086
        ar rcs "$bin/libtempo_fuzz.a" $objs
    fi
    for t in $(targets); do
        exe=$bin/fuzz_$t
        if stale "$exe.o" || [ "$bin/libtempo_fuzz.a" -nt "$exe" ] || [ ! -f "$exe" ]; then
            echo "fuzz.sh: building fuzz_$t"
            # shellcheck disable=SC2086
            "$cc" $cflags -fsanitize=fuzzer-no-link -Wall -Wextra -Werror $cppflags -MMD \
                -c "$srcdir/tests/fuzz/fuzz_$t.c" -o "$exe.o"
            # shellcheck disable=SC2086
            "$cc" $cflags -fsanitize=fuzzer -o "$exe" "$exe.o" "$bin/libtempo_fuzz.a" \
                ${FUZZ_LIBS:-} -lm
        fi
    done
}

# The options every run shares: deterministic targets, leaks fail, no output files but crashes.
# One process (no -jobs: with it libFuzzer runs a child whose output goes to fuzz-N.log in the
# current directory, the source tree under make). The library's refusals of hostile bytes are
# the point, not news: its WARN lines (every error logs one) would fill gigabytes of log.
opts="-detect_leaks=1 -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=10"
export TEMPO_DEBUG="${TEMPO_DEBUG:-NONE}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-allocator_may_return_null=1:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"

# A target's own libFuzzer options: its source's line "FUZZ_OPTIONS: -flag=value ...".
topts()
{
    sed -n 's/^.*FUZZ_OPTIONS: *\([^*]*\).*$/\1/p' "$srcdir/tests/fuzz/fuzz_$1.c" | head -1
}

replay()
{
    rc=0
    for t in $(targets "$@"); do
        # shellcheck disable=SC2086
        if ! "$bin/fuzz_$t" $opts $(topts "$t") -runs=0 "$srcdir/tests/fuzz/corpus/$t" \
            >"$bin/fuzz_$t.replay.log" 2>&1; then
            echo "fuzz_$t: a seed fails (log: $bin/fuzz_$t.replay.log)" >&2
            tail -30 "$bin/fuzz_$t.replay.log" >&2
            rc=1
        fi
    done
    return $rc
}

seeds()
{
    for t in $(targets "$@"); do
        # shellcheck disable=SC2086
        "$cc" $cflags -fsanitize=fuzzer-no-link -DFUZZ_SEEDS $cppflags \
            -o "$bin/fuzz_$t.seeds" "$srcdir/tests/fuzz/fuzz_$t.c" "$bin/libtempo_fuzz.a" \
            ${FUZZ_LIBS:-} -lm
        mkdir -p "$srcdir/tests/fuzz/corpus/$t"
        rm -f "$srcdir/tests/fuzz/corpus/$t"/seed-*
        "$bin/fuzz_$t.seeds" "$srcdir/tests/fuzz/corpus/$t"
        echo "fuzz.sh: $(ls "$srcdir/tests/fuzz/corpus/$t" | wc -l) seeds of fuzz_$t"
    done
}

run()
{
    secs=$1
    shift
    rc=0
    for t in $(targets "$@"); do
        mkdir -p "$work/corpus/$t" "$work/crashes/$t"
        echo "fuzz.sh: fuzz_$t for $secs s (corpus $work/corpus/$t)"
        # shellcheck disable=SC2086
        if ! "$bin/fuzz_$t" $opts $(topts "$t") -max_total_time="$secs" -print_final_stats=1 \
            -artifact_prefix="$work/crashes/$t/" "$work/corpus/$t" \
            "$srcdir/tests/fuzz/corpus/$t" >"$work/fuzz_$t.log" 2>&1; then
            echo "fuzz_$t FAILED: see $work/fuzz_$t.log and $work/crashes/$t/" >&2
            grep -A 12 '^==[0-9]*==ERROR\|runtime error\|deadly signal\|ERROR: libFuzzer' \
                "$work/fuzz_$t.log" | head -40 >&2 || true
            rc=1
        else
            tail -n 12 "$work/fuzz_$t.log" | grep '^stat::number_of_executed_units\|#[0-9]*	DONE' \
                || true
        fi
    done
    return $rc
}

what=${1:-}
[ $# -gt 0 ] && shift
case $what in
probe) probe ;;
build) build ;;
replay) replay "$@" ;;
seeds)
    build
    seeds "$@"
    ;;
run)
    [ $# -ge 1 ] || { echo "usage: fuzz.sh run SECONDS [NAME...]" >&2; exit 2; }
    [ -n "${FUZZ_NO_BUILD:-}" ] || build
    run "$@"
    ;;
*)
    echo "usage: fuzz.sh probe|build|replay [NAME...]|seeds [NAME...]|run SECONDS [NAME...]" >&2
    exit 2
    ;;
esac
