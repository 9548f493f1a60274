#!/bin/sh
# tests/trainer/readme.sh — the tempo-train command lines that README.md and quickstart.sh give,
# run as written (issue 27), so that they cannot drift from what works; tests/install.sh does the
# same for the library's example. Only the model size is made tiny: each command's launcher is a
# stand-in that runs the real one (tempo-run, or mpirun for the mpi backend's line) with the
# command's own words and then "--data <corpus> --layers 2 --heads 2 --channels 32 --context 32"
# (tempo-train's flags are read in order, a later one replacing an earlier one). The commands:
#   1. the block between "<!-- tempo-train commands: begin -->" and "... end -->" in README.md,
#      line by line in one directory, in order (its last line resumes the run of an earlier one);
#   2. every inline `tempo-run -n N trainer/tempo-train ...` and `mpirun ... trainer/tempo-train
#      ...` of README.md, each in a directory of its own (the mpi one skipped, saying why, where
#      tempo-train has no mpi backend or mpirun starts nothing here);
#   3. quickstart.sh's main job (its `exec ./tools/tempo-run ... ./trainer/tempo-train ...`).
# Each must exit 0, train (no "nothing to train"), print the validation losses at the start and
# the end, write loss.csv and loss.png (where gnuplot or matplotlib is installed) in its --out,
# and print a sample (--pp: the note that it has none yet). The defaults stay on: 200 steps,
# validation every 25, 64 windows, a 200-token sample; at this size the whole script takes
# 35-60 s on 2 cores. Knobs: TRAINER_KEEP=1 keeps the temporary directory, TRAINER_TIMEOUT the
# hang guard per command.

srcdir=${top_srcdir:-$(dirname "$0")/../..}
. "$srcdir/tests/trainer/lib.sh"
prepare TRAINER README.md include/tempo.h

tiny="--data $tmp/corpus.txt --layers 2 --heads 2 --channels 32 --context 32"
bt=$(cd "${top_builddir:-.}" && pwd) || exit 1
png=0
{ command -v gnuplot || /usr/bin/python3 -c "import matplotlib"; } >/dev/null 2>&1 && png=1

# The commands, one per line: "DIR COMMAND" (DIR the directory it runs in; the block's share one)
sed -n '/^<!-- tempo-train commands: begin -->$/,/^<!-- tempo-train commands: end -->$/p' \
    "$srcdir/README.md" | grep -v '^<!--\|^```\|^$' | sed 's/^/block /' >"$tmp/commands"
nblock=$(wc -l <"$tmp/commands")
grep -o '`\(tempo-run\|mpirun\) [^`]*trainer/tempo-train[^`]*`' "$srcdir/README.md" |
    tr -d '`' | awk '{print "inline" NR, $0}' >>"$tmp/commands"
{
    sed -n '/^ *exec \.\/tools\/tempo-run .*\.\/trainer\/tempo-train/,/[^\\]$/p' \
        "$srcdir/quickstart.sh" | sed 's/\\$//; s/^ *exec //' | tr -s ' \n' ' ' |
        sed 's/^/quickstart /; s/ *$//'
    echo
} >>"$tmp/commands"
total=$(grep -c . "$tmp/commands")
echo "1..$((total + 1))"
[ "$nblock" -ge 6 ] && grep -q '^inline' "$tmp/commands" && grep -q '^quickstart ' "$tmp/commands"
point $? "found README's block ($nblock lines), its inline commands and quickstart.sh's main job"
sed 's/^/# /' "$tmp/commands"

# the stand-in launchers: bin/ for the README's tempo-run and mpirun, tools/ for quickstart.sh's
# ./tools/tempo-run; trainer/ is the build's (trainer/tempo-train, ./trainer/tempo-train)
mkdir "$tmp/bin" || exit 1
cat >"$tmp/bin/tempo-run" <<EOF
#!/bin/sh
exec "$bt/tools/tempo-run" --timeout "$guard" "\$@" $tiny
EOF
mpi_why=""
"$TT" --help | grep -q "this build has: tempo, mpi" || mpi_why="tempo-train built without MPI"
[ -n "$mpi_why" ] || mr_mpirun || :
cat >"$tmp/bin/mpirun" <<EOF
#!/bin/sh
# the README's flags, then those this machine needs (tests/mr/launch.sh): root, shared memory
exec timeout "$guard" "$mpirun" $mpi_flags "\$@" $tiny
EOF
chmod +x "$tmp/bin/tempo-run" "$tmp/bin/mpirun" || exit 1
PATH="$tmp/bin:$PATH"
export PATH

# check DIR OUT LOG COMMAND: one point for COMMAND, run in DIR into --out OUT (relative to DIR)
check() {
    _d=$1 _o=$1/$2 _log=$3 _cmd=$4
    _why=""
    [ "$rc" = 0 ] || _why="$_why; exited with status $rc"
    ! grep -q "nothing to train" "$_log" || _why="$_why; nothing trained"
    grep -q "validation loss: [0-9.]* at start, [0-9.]* at the end" "$_log" ||
        _why="$_why; no closing validation line"
    [ "$(wc -l <"$_o/loss.csv" 2>/dev/null)" -gt 1 ] 2>/dev/null || _why="$_why; no loss.csv"
    if [ $png = 1 ]; then
        [ -s "$_o/loss.png" ] || _why="$_why; no loss.png"
    fi
    case "$_cmd" in
    *" --pp "*) grep -q "note: no sample at the end with --pp" "$_log" ||
        _why="$_why; no sample note" ;;
    *) grep -q "sample (200 tokens):" "$_log" || _why="$_why; no sample" ;;
    esac
    point "$([ -z "$_why" ]; echo $?)" "as written: $_cmd"
    if [ -n "$_why" ]; then
        echo "# ${_why#; }"
        grep -v "step *[0-9]*/" "$_log" | tail -n 4 | cut -c 1-250 | sed 's/^/#   /'
    fi
}

i=0
while read -r dir cmd; do
    [ -n "$dir" ] || continue
    i=$((i + 1))
    case "$cmd" in
    mpirun*)
        if [ -n "$mpi_why" ]; then
            ok "# SKIP as written: $cmd: $mpi_why"
            continue
        fi
        ;;
    esac
    if [ ! -d "$tmp/$dir" ]; then
        mkdir -p "$tmp/$dir/tools" && ln -s "$bt/trainer" "$tmp/$dir/trainer" &&
            cp "$tmp/bin/tempo-run" "$tmp/$dir/tools/tempo-run" || exit 1
    fi
    out=$(printf '%s\n' "$cmd" | sed -n 's/.*--out \([^ ]*\).*/\1/p')
    (cd "$tmp/$dir" && sh -c "$cmd") >"$tmp/c$i.log" 2>&1 </dev/null
    rc=$?
    check "$tmp/$dir" "${out:-tempo-train-out}" "$tmp/c$i.log" "$cmd"
done <"$tmp/commands"
