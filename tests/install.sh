#!/bin/sh
# tests/install.sh — TAP test of tempo as a user installs and uses it: `make install` into a
# temporary DESTDIR, then the README's "Using the library" text run as written against it.
#
# The program (between "<!-- example.c: begin -->" and "<!-- example.c: end -->") and the build
# commands (between "<!-- example build: begin/end -->") are extracted from README.md itself, so a
# README that drifts from what works fails here. The commands run with PREFIX = DESTDIR + the
# configured prefix; since tempo.pc names the configured prefix, `pkg-config` is a wrapper that adds
# --define-variable=prefix=$PREFIX (what a .pc file installed at PREFIX itself would say). They
# build the example dynamically (rpath from tempo.pc) and statically (pkg-config --static) and run
# both as 2 ranks with the installed tempo-run; the test checks each run's line, that the dynamic
# one loads the installed libtempo.so and the static one needs no shared library. Then every
# installed program: a tempo-specific name (tempo-*, nccl-tests' *_perf and *_perf_mpi, the
# *_bench programs), `--version` printing "NAME (tempo) VERSION" with tempo.pc's version, `--help`
# exiting 0; and quickstart.sh --help / --version from the source tree.
#
# Run by the automake harness (top_builddir, top_srcdir exported), or by hand from a configured and
# built tree: top_builddir=. top_srcdir=. sh tests/install.sh. TEMPO_TIMEOUT defaults to 20 s here.

b=${top_builddir:-.}
s=${top_srcdir:-.}
b=$(cd "$b" && pwd) && s=$(cd "$s" && pwd) || { echo "Bail out! no build tree"; exit 1; }
for tool in cc pkg-config readelf; do
    if ! command -v $tool >/dev/null 2>&1; then
        echo "1..0 # SKIP $tool not found"
        exit 0
    fi
done
tmp=$(mktemp -d "${TMPDIR:-/tmp}/test_install.XXXXXX") || exit 1
[ -n "${INSTALL_TEST_KEEP:-}" ] || trap 'rm -rf "$tmp"' EXIT
trap 'exit 1' HUP INT TERM
TEMPO_TIMEOUT=${TEMPO_TIMEOUT:-20}
export TEMPO_TIMEOUT

echo 1..10
n=0
fails=0
# check DESCRIPTION COMMAND...: one test point; on failure the diagnostics in $tmp/diag follow.
check() {
    desc=$1
    shift
    n=$((n + 1))
    if "$@"; then
        echo "ok $n - $desc"
    else
        echo "not ok $n - $desc"
        fails=$((fails + 1))
        [ -s "$tmp/diag" ] && sed 's/^/# /' "$tmp/diag"
    fi
    : >"$tmp/diag"
}
: >"$tmp/diag"

# ---- make install DESTDIR=...
prefix=$(sed -n 's/^prefix=//p' "$b/tempo.pc")
version=$(sed -n 's/^Version: //p' "$b/tempo.pc")
dest=$tmp/dest
PREFIX=$dest$prefix
installed() {
    make -C "$b" install DESTDIR="$dest" >"$tmp/install.log" 2>&1 ||
        { tail -n 30 "$tmp/install.log" >"$tmp/diag"; return 1; }
    [ -x "$PREFIX/bin/tempo-run" ] && [ -f "$PREFIX/lib/pkgconfig/tempo.pc" ] ||
        { ls -R "$dest" >"$tmp/diag" 2>&1; return 1; }
}
check "make install DESTDIR=... installs tempo-run and tempo.pc under $prefix" installed

# ---- the README's example, built and run as written
mkdir -p "$tmp/wrap" "$tmp/work"
real_pc=$(command -v pkg-config)
cat >"$tmp/wrap/pkg-config" <<EOF
#!/bin/sh
exec "$real_pc" --define-variable=prefix="$PREFIX" "\$@"
EOF
chmod +x "$tmp/wrap/pkg-config"
# block NAME: the fenced block between "<!-- NAME: begin -->" and "<!-- NAME: end -->"
block() {
    awk -v b="<!-- $1: begin -->" -v e="<!-- $1: end -->" '
        $0 == b { on = 1; next }
        $0 == e { on = 0 }
        on && !/^```/ { print }' "$s/README.md"
}
block example.c >"$tmp/work/example.c"
block "example build" >"$tmp/work/build.sh"
extracted() {
    grep -q "int main" "$tmp/work/example.c" && grep -q "pkg-config" "$tmp/work/build.sh" ||
        { echo "README.md lacks the example.c or example build markers" >"$tmp/diag"; return 1; }
}
check "README.md has the example program and its build commands between markers" extracted

(
    cd "$tmp/work" && PATH=$tmp/wrap:$PATH PREFIX=$PREFIX LD_LIBRARY_PATH= &&
        export PATH PREFIX LD_LIBRARY_PATH && timeout 120 sh -ex build.sh
) >"$tmp/run.log" 2>&1
build_rc=$?
expect="[0] 2 ranks: average 0.5, sum 1"
ran() { # PROGRAM: it was built, and a tempo-run line of it printed $expect
    [ -x "$tmp/work/$1" ] && awk -v p="tempo-run -n 2 ./$1" -v x="$expect" '
        /^\+ / { cur = substr($0, 3) }
        cur == p && $0 == x { found = 1 }
        END { exit !found }' "$tmp/run.log" ||
        { { echo "exit $build_rc; wanted '$expect' from ./$1:" && cat "$tmp/run.log"; } \
            >"$tmp/diag"; return 1; }
}
dyn_ok() {
    ran example || return 1
    # shellcheck disable=SC2016
    readelf -d "$tmp/work/example" | grep -q "R.*PATH.*\[$PREFIX/lib\]" &&
        ldd "$tmp/work/example" | grep -q "libtempo.so.0 => $PREFIX/lib/libtempo.so.0" ||
        { { readelf -d "$tmp/work/example"; ldd "$tmp/work/example"; } >"$tmp/diag" 2>&1; return 1; }
}
static_ok() {
    ran example-static || return 1
    ! readelf -d "$tmp/work/example-static" 2>&1 | grep -q NEEDED ||
        { readelf -d "$tmp/work/example-static" >"$tmp/diag" 2>&1; return 1; }
}
# The example pulls only some of libtempo.a's objects; every object must link with what
# pkg-config --static adds (tempo.pc's Libs.private), zstd's users included.
pc() { PATH=$tmp/wrap:$PATH PKG_CONFIG_PATH=$PREFIX/lib/pkgconfig pkg-config "$@"; }
whole_ok() {
    libdir=$(pc --variable=libdir tempo) && [ -f "$libdir/libtempo.a" ] &&
        # shellcheck disable=SC2046
        cc -static -o "$tmp/work/whole" "$tmp/work/example.c" \
            $(pc --cflags tempo) -Wl,--whole-archive \
            "$libdir/libtempo.a" -Wl,--no-whole-archive \
            $(pc --static --libs tempo) >"$tmp/diag" 2>&1
}
check "the README example, linked dynamically with the rpath it shows, runs on 2 ranks" dyn_ok
check "the README example, linked with pkg-config --static, is static and runs on 2 ranks" \
    static_ok
check "every object of libtempo.a links statically with pkg-config --static --libs tempo" whole_ok
check "the README's commands all succeed (sh -e)" test "$build_rc" -eq 0

# ---- the installed programs
# Installed at the real prefix, they find libtempo.so through their RUNPATH or, for a prefix in the
# dynamic linker's default path (libtool then records none), through ldconfig's cache;
# LD_LIBRARY_PATH stands in for either under DESTDIR.
LD_LIBRARY_PATH=$PREFIX/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH
names_ok() {
    for f in "$PREFIX"/bin/*; do
        case ${f##*/} in
        tempo-* | *_perf | *_perf_mpi | overlap_bench | qcoll_bench | quant_bench | req_bench | \
            all_reduce_bound) ;;
        *) echo "generic name in bin/: ${f##*/}" >>"$tmp/diag" ;;
        esac
    done
    [ ! -s "$tmp/diag" ]
}
check "every program in bin/ has a tempo-specific name" names_ok
versions_ok() {
    for f in "$PREFIX"/bin/*; do
        case ${f##*/} in tempo-trace | tempo-overlap-model) [ -x /usr/bin/python3 ] || continue ;; esac
        out=$(env -u TEMPO_RANK "$f" --version 2>&1 </dev/null)
        rc=$?
        first=$(printf '%s\n' "$out" | head -n 1)
        [ $rc -eq 0 ] && [ "$first" = "${f##*/} (tempo) $version" ] ||
            echo "${f##*/} --version: exit $rc, '$first'" >>"$tmp/diag"
    done
    [ ! -s "$tmp/diag" ]
}
check "every installed program: --version prints 'NAME (tempo) $version'" versions_ok
helps_ok() {
    for f in "$PREFIX"/bin/*; do
        case ${f##*/} in tempo-trace | tempo-overlap-model) [ -x /usr/bin/python3 ] || continue ;; esac
        "$f" --help >"$tmp/out" 2>&1 </dev/null && [ -s "$tmp/out" ] ||
            { echo "${f##*/} --help:" && head -n 3 "$tmp/out"; } >>"$tmp/diag"
    done
    [ ! -s "$tmp/diag" ]
}
check "every installed program: --help exits 0 with a text" helps_ok
quickstart_ok() {
    "$s/quickstart.sh" --version >"$tmp/out" 2>&1 && grep -qx "quickstart.sh (tempo) $version" \
        "$tmp/out" || { cat "$tmp/out" >"$tmp/diag"; return 1; }
    # --help is the script's opening comment block, every line of it and nothing else
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$s/quickstart.sh" \
        >"$tmp/want"
    "$s/quickstart.sh" --help >"$tmp/out" 2>&1 && [ "$(wc -l <"$tmp/want")" -gt 5 ] &&
        cmp -s "$tmp/out" "$tmp/want" && ! grep -q "^set \|^cd \|^case " "$tmp/out" ||
        { diff "$tmp/want" "$tmp/out" >"$tmp/diag"; return 1; }
}
check "quickstart.sh --version and --help (its header comment, nothing more)" quickstart_ok
exit $((fails > 0))
