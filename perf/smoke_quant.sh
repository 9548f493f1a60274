#!/bin/sh
# perf/smoke_quant.sh — perf/quant_bench at a tiny size: every row of a few specs is printed with a
# finite normalized variance, -J writes valid JSON with one object per spec, a gradient file with a
# header is read with -k (--skip), and bad input exits 2 with a message. Fails on output and exit
# status only, never on timings. TAP output.
builddir=${top_builddir:-.}
prog=$builddir/perf/quant_bench
if [ ! -x "$prog" ]; then
    echo "1..0 # SKIP $prog not built"
    exit 0
fi
py=$(command -v python3 || true)
tmp=$(mktemp -d) || exit 1 # under $TMPDIR, else /tmp
trap 'rm -rf "$tmp"' EXIT

echo "1..4"
. "${top_srcdir:-.}/perf/tap.sh"
# rows: spec rows (two leading spaces) whose 6th field, nvar, is a finite number
rows() {
    printf '%s\n' "$1" | awk '/^  [a-z]/ && $6 ~ /^[0-9.]+(e[-+][0-9]+)?$/ { c++ } END { print c + 0 }'
}

specs="-c qsgdinf:bits=3 -c alq:bits=3 -c alq:bits=3,norm=linf -c amq-n:bits=3,zero=1"
# shellcheck disable=SC2086 # word splitting of $specs is intended
out=$("$prog" -n 64K -r 1 $specs -J "$tmp/q.json" 2>&1)
rc=$?
got=$(rows "$out")
bad=0
[ $rc -eq 0 ] && [ "$got" -eq 4 ] || bad=1
if [ $bad -eq 0 ] && [ -n "$py" ]; then
    "$py" -c 'import json,math,sys
a = json.load(open(sys.argv[1]))
assert len(a) == 4, a
assert all(math.isfinite(o["norm_var"]) for o in a), a' "$tmp/q.json" 2>&1 || bad=1
fi
result $bad "64K Gaussian coordinates, 4 specs: exit 0, 4 rows, JSON with finite nvar" "$out"

# a gradient file as tempo-train --dump writes it: 16 header bytes, then float32
if [ -n "$py" ]; then
    "$py" -c 'import struct,random,sys
random.seed(3)
n = 20000
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<dd", 5.5, n))
    f.write(struct.pack("<%df" % n, *[random.gauss(0, 1e-3) for _ in range(n)]))' "$tmp/g.bin"
    out=$("$prog" -f "$tmp/g.bin" -k 16 -r 1 -c alq:bits=3,norm=linf 2>&1)
    rc=$?
    bad=0
    [ $rc -eq 0 ] && [ "$(rows "$out")" -eq 1 ] &&
        printf '%s\n' "$out" | grep -q '^# quant_bench: 20000 float32 coordinates' || bad=1
    result $bad "-f with -k 16: 20000 coordinates after the header" "$out"
    out=$("$prog" -f "$tmp/g.bin" -k 15 -c alq 2>&1)
    rc=$?
    bad=0
    [ $rc -eq 2 ] && printf '%s\n' "$out" | grep -q 'not a multiple of 4' || bad=1
    result $bad "-k 15 leaves a partial float: exit 2 with the reason" "$out"
else
    echo "ok 2 # SKIP python3 not found (writes the gradient file)"
    echo "ok 3 # SKIP python3 not found"
    n=3
fi
out=$("$prog" -n 1K -c 'alq:norm=l1' 2>&1)
rc=$?
bad=0
[ $rc -eq 2 ] && printf '%s\n' "$out" | grep -q 'expected l2 or linf' || bad=1
result $bad "a bad spec (norm=l1): exit 2 with the valid values" "$out"
[ $fails -eq 0 ]
