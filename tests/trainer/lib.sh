# tests/trainer/lib.sh — sourced by the trainer test scripts (tests/trainer/*.sh): their common
# set-up, TAP points and the launches and loss comparisons they share. Not a test itself. The
# script sets srcdir and sources it:
#   srcdir=${top_srcdir:-$(dirname "$0")/../..}
#   . "$srcdir/tests/trainer/lib.sh"
# Sourcing sets $TR (tempo-run), $TT (tempo-train), $CMP (tests/trainer/dumpcmp), all under
# ${top_builddir:-.}, sources tests/mr/launch.sh, and sets num=0 and MODEL= (the script sets its
# own $MODEL, the tempo-train flags every launch passes first, after sourcing).
#
#   prepare [--dumpcmp] NAME [FILE...]
# --dumpcmp: "Bail out!" unless $CMP is built; mr_prepare NAME "$TT" (checks, clears TEMPO_*,
# TEMPO_TIMEOUT=60, $tmp, $guard from ${NAME}_TIMEOUT, ${NAME}_KEEP); OMP_NUM_THREADS=1; the
# FILEs of the source tree ($srcdir) concatenated into $tmp/corpus.txt (none: no corpus).
#
#   ok DESCRIPTION / notok DESCRIPTION / point STATUS DESCRIPTION [LOG]
# one TAP line numbered $num + 1 (advances $num); point: ok when STATUS is 0, else not ok and,
# given LOG, diag LOG: the launch's command line and exit status, and the log (whole when short,
# else its error lines and its last 40), so that a failure in CI explains itself.
#
#   launch N LOG [ARGS...]
# tempo-train $MODEL ARGS on N ranks through tempo-run (hang guard $guard), output in LOG, stdin
# /dev/null; sets rc to the exit status and returns it.
#
#   train N ZERO OUT [ARGS...]
# launch on N ranks of ARGS after --batch 8/N (8 sequences per global batch) --zero ZERO --out OUT,
# log in OUT.log (layouts.sh, zero3.sh; scripts with other layouts define their own train or run
# after sourcing this file).
#
#   dumped STATUS REF DUMP DESCRIPTION LOG
# one point: the run that wrote the step-0 dump DUMP exited with STATUS and DUMP equals the dump
# REF within 1e-5 (dumpcmp); prints dumpcmp's summary ($res) and, on failure, diag LOG.
#
#   col CSV N / steps_csv CSV / step_list CSV / losses RUN
# column N of CSV's rows (without the header) / CSV's rows of training steps (not the step-0
# validation row, whose loss is empty) / their step numbers on one line ("1 2 3 ") / the loss
# column of RUN/loss.csv's training steps.
#   worst A B N
# the largest relative difference of the loss-column files A and B (%.3g), or "missing" unless
# both have N lines.
#   run N OUT [ARGS...]
# launch on N ranks with --out OUT (log OUT.log); scripts with other layouts define their own.
#   step0 N REF LABEL [ARGS...]
# one point: the step-0 dump of ARGS on N ranks (run into $tmp/s<point>) equals $tmp/REF.bin
# within 1e-5 (dumped).
#   mpi_skip N
# unless tempo-train was built with MPI and mpirun starts processes here (tests/mr/launch.sh's
# mr_mpirun), N skipped points saying why, and exit 0.
#   mrun N OUT [ARGS...]
# tempo-train --backend mpi $MODEL ARGS on N ranks through mpirun (after mpi_skip) into --out OUT,
# log in OUT.log, under the hang guard.
#   mstep0 N LABEL [ARGS...]
# one point: the step-0 dump of ARGS on mpi (into $tmp/m<point>) equals $tmp/ref.bin within 1e-5.
#   within W TOL
# status 0 when W (from worst) is not "missing" and at most TOL.
#   compare WANT GOT N TOL
# worst of the files WANT and GOT over N lines into $w; status of within $w TOL.
#   agree A B N TOL
# compare of the losses of runs A and B (into A.l and B.l): sets $w.
#   resumed A B
# compare of the last 5 losses of the uninterrupted run A ($tmp/want) and the losses of B, the run
# resumed from A's step 5 ($tmp/got), within 1e-5: sets $w.
#   report STATUS DESCRIPTION LOG
# point STATUS "DESCRIPTION (worst $w)" LOG.
#   track A B N TOL DESCRIPTION
# agree A B N TOL, then report with B.log.
#
#   refused N MESSAGE DESCRIPTION [ARGS...]
# one point: tempo-train $MODEL ARGS on N ranks (out $tmp/bad, log $tmp/bad.log) exits non-zero
# saying MESSAGE, before any step and without a loss.csv ("DESCRIPTION is refused before any
# work"); prints the line with MESSAGE.

TR="${top_builddir:-.}/tools/tempo-run"
TT="${top_builddir:-.}/trainer/tempo-train"
CMP="${top_builddir:-.}/tests/trainer/dumpcmp"
. "$srcdir/tests/mr/launch.sh"
num=0
MODEL=

prepare() {
    if [ "$1" = --dumpcmp ]; then
        shift
        [ -x "$CMP" ] || { echo "Bail out! $CMP not found (build it first: make check)"; exit 1; }
    fi
    mr_prepare "$1" "$TT"
    shift
    OMP_NUM_THREADS=1
    export OMP_NUM_THREADS
    if [ $# -gt 0 ]; then
        (cd "$srcdir" && cat "$@") >"$tmp/corpus.txt" || exit 1
    fi
}

ok() { num=$((num + 1)); echo "ok $num - $*"; }
notok() { num=$((num + 1)); echo "not ok $num - $*"; }
point() {
    if [ "$1" = 0 ]; then
        ok "$2"
    else
        notok "$2"
        [ -z "$3" ] || diag "$3"
    fi
}

launch() {
    _tn=$1 _tlog=$2
    shift 2
    # shellcheck disable=SC2086 # $MODEL is a word list
    "$TR" -n "$_tn" --timeout "$guard" "$TT" $MODEL "$@" >"$_tlog" 2>&1 </dev/null
    rc=$?
    # what diag prints for this log: the command line and its status
    _tcmdline="exit status $rc of: tempo-run -n $_tn tempo-train $MODEL $*"
    eval "_cmd_$(printf '%s' "$_tlog" | cksum | cut -d' ' -f1)=\"\$_tcmdline\""
    return $rc
}

train() {
    _n=$1 _z=$2 _out=$3
    shift 3
    launch "$_n" "$_out.log" --batch $((8 / _n)) --zero "$_z" --out "$_out" "$@"
}

dumped() {
    _drc=$1
    if [ "$_drc" = 0 ]; then
        res=$("$CMP" "$2" "$3" 1e-5)
        _drc=$?
    else
        res="the run exited with status $_drc"
    fi
    point $_drc "$4"
    echo "# $res"
    [ $_drc = 0 ] || diag "$5"
}

col() { tail -n +2 "$1" | cut -d, -f"$2"; }
steps_csv() { tail -n +2 "$1" | awk -F, '$2 != ""'; }
step_list() { steps_csv "$1" | cut -d, -f1 | tr '\n' ' '; }
losses() { steps_csv "$1/loss.csv" | cut -d, -f2; }
worst() {
    paste -d' ' "$1" "$2" | awk -v n="$3" '{e = ($1 - $2) / $1; if (e < 0) e = -e;
        if (e > w) w = e} END {if (NR != n || NF != 2) print "missing"; else printf "%.3g", w}'
}
within() { awk -v w="$1" -v t="$2" 'BEGIN {exit !(w != "missing" && w + 0 <= t + 0)}'; }
compare() {
    w=$(worst "$1" "$2" "$3")
    within "$w" "$4"
}
agree() {
    losses "$1" >"$1.l" && losses "$2" >"$2.l"
    compare "$1.l" "$2.l" "$3" "$4"
}
resumed() {
    tail -n 5 "$1/loss.csv" | cut -d, -f2 >"$tmp/want"
    losses "$2" >"$tmp/got"
    compare "$tmp/want" "$tmp/got" 5 1e-5
}
report() {
    point "$1" "$2 (worst $w)" "$3"
}
track() {
    agree "$1" "$2" "$3" "$4"
    report $? "$5" "$2.log"
}

refused() {
    _rn=$1 _msg=$2 _lbl=$3
    shift 3
    launch "$_rn" "$tmp/bad.log" --out "$tmp/bad" "$@"
    [ $rc != 0 ] && grep -q -- "$_msg" "$tmp/bad.log" && ! grep -q "step " "$tmp/bad.log" &&
        [ ! -e "$tmp/bad/loss.csv" ]
    point $? "$_lbl is refused before any work" "$tmp/bad.log"
    grep -m1 -- "$_msg" "$tmp/bad.log" | sed 's/^/# /'
}

run() {
    _n=$1 _out=$2
    shift 2
    launch "$_n" "$_out.log" --out "$_out" "$@"
}
step0() {
    _n=$1 _ref=$2 _lbl=$3
    shift 3
    _o="$tmp/s$num"
    run "$_n" "$_o" --dump "$_o.bin" "$@"
    dumped $? "$tmp/$_ref.bin" "$_o.bin" \
        "$_lbl: step-0 loss and full gradient equal one rank's within 1e-5" "$_o.log"
}
mrun() {
    _n=$1 _out=$2
    shift 2
    # shellcheck disable=SC2086 # $mpi_flags and $MODEL are word lists
    timeout "$guard" "$mpirun" -n "$_n" $mpi_flags "$TT" --backend mpi $MODEL --out "$_out" \
        "$@" >"$_out.log" 2>&1 </dev/null
}
mstep0() {
    _n=$1 _lbl=$2
    shift 2
    _o="$tmp/m$num"
    mrun "$_n" "$_o" --dump "$_o.bin" "$@"
    dumped $? "$tmp/ref.bin" "$_o.bin" \
        "mpi backend, $_lbl: step-0 loss and full gradient equal one rank's within 1e-5" "$_o.log"
}
mpi_skip() {
    _why=""
    "$TT" --help | grep -q "this build has: tempo, mpi" || _why="tempo-train built without MPI"
    [ -n "$_why" ] || mr_mpirun || _why=$mpi_why
    if [ -n "$_why" ]; then
        for _i in $(seq 1 "$1"); do
            ok "# SKIP mpi backend: $_why"
        done
        exit 0
    fi
}
