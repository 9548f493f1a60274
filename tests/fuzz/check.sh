#!/bin/sh
# tests/fuzz/check.sh — the fuzz targets in make check (TAP): builds them with clang's libFuzzer
# (tests/fuzz/fuzz.sh), replays each target's committed seeds (one point each: every seed runs
# clean), then fuzzes each for FUZZ_CHECK_SECONDS (default 10; one point each: no crash, leak,
# sanitizer report or timeout). Skips, saying why, where FUZZ_CC (clang) cannot link a libFuzzer
# program. Each run starts from the seeds alone, in a fresh FUZZ_WORK under $TMPDIR, which is
# removed afterwards unless a target failed (its input is then in FUZZ_WORK/crashes/<name>/).
set -u
fuzz="${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}/tests/fuzz/fuzz.sh"
if ! why=$(sh "$fuzz" probe 2>&1); then
    echo "1..0 # SKIP $(echo "$why" | head -1)"
    exit 0
fi
if ! out=$(sh "$fuzz" build 2>&1); then
    echo "$out" | tail -30 | sed 's/^/# /'
    echo "Bail out! the fuzz targets do not build"
    exit 1
fi
targets=$(for f in "${top_srcdir:-.}"/tests/fuzz/fuzz_*.c; do f=${f##*/fuzz_}; echo "${f%.c}"; done)
set -- $targets
FUZZ_WORK=$(mktemp -d "${TMPDIR:-/tmp}/tempo-fuzz-check.XXXXXX")
export FUZZ_WORK
failed=0
echo "1..$(($# * 2))"
n=0
for t in $targets; do
    n=$((n + 1))
    if out=$(sh "$fuzz" replay "$t" 2>&1); then
        echo "ok $n - fuzz_$t: its $(ls "${top_srcdir:-.}/tests/fuzz/corpus/$t" | wc -l) seeds run clean"
    else
        echo "not ok $n - fuzz_$t: a seed fails"
        echo "$out" | sed 's/^/# /'
    fi
done
for t in $targets; do
    n=$((n + 1))
    if out=$(FUZZ_NO_BUILD=1 sh "$fuzz" run "${FUZZ_CHECK_SECONDS:-10}" "$t" 2>&1); then
        echo "ok $n - fuzz_$t: ${FUZZ_CHECK_SECONDS:-10} s of fuzzing found nothing"
        echo "$out" | sed -n 's/^stat::number_of_executed_units: /# inputs run: /p'
    else
        echo "not ok $n - fuzz_$t: the fuzzer found a failure (kept in $FUZZ_WORK/crashes/$t/)"
        failed=1
        echo "$out" | sed 's/^/# /'
    fi
done
[ "$failed" = 1 ] || rm -rf "$FUZZ_WORK"
