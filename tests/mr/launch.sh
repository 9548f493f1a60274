# tests/mr/launch.sh — sourced by the multi-rank drivers (sched.sh, bucketer.sh): their common
# set-up, and one launch of a test program through tempo-run with its TAP points.
#
#   diag LOG
# a failed point's evidence as TAP diagnostics (below), whole enough to explain a CI failure.
#
#   mr_prepare NAME PROG...
# checks that $TR (tempo-run) and each PROG are built (else "Bail out!"), clears every TEMPO_* variable
# the caller's environment could set, sets TEMPO_TIMEOUT=60 (a lost message shows up as the
# library's timeout long before the hang guard), sets $guard from ${NAME}_TIMEOUT (300 s) and
# creates $tmp, removed on exit unless ${NAME}_KEEP=1 (NAME in capitals: SCHED, BUCKETER).
#
#   mr_launch LABEL N DIR ENVS PROG [ARGS...]
# runs `env ENVS tempo-run -n N PROG ARGS --out DIR` (ENVS: space-separated NAME=VALUE words, or
# empty), then prints one point for the launch (exit status 0 and an END line from every rank) and
# one per check group listed in DIR/groups (tests/mr/results.awk). Uses $TR (tempo-run), $srcdir,
# $guard (hang guard in seconds) and advances $num, the number of the last point printed.
#
#   mr_run PROG GROUPS LAUNCHES [EXTRA]
# the plan line (1..N, with EXTRA points of the caller's own) and every launch "LABEL N ENV..." of
# LAUNCHES (one per line) with the same check GROUPS; TRACEDIR in ENV becomes the launch's
# directory. After each launch it calls `mr_after LABEL N DIR` if the caller defines mr_after
# (which prints the EXTRA points, advancing $num).
#
#   mr_mpirun
# finds mpirun ($MPIRUN, set by make check from configure, else PATH) and checks that it starts a
# process here; sets $mpirun, $mpi_flags (for Open MPI: oversubscribe, no binding, shared memory,
# and --allow-run-as-root as root) and $mpi_limit ("timeout 300" where timeout exists) and returns 0,
# or sets $mpi_why and returns 1.
# mr_wrap: writes $tmp/wrap.sh, a wrapper that runs its arguments with per-rank changes to the
# environment its job was given: RANK1_ENV (NAME=VALUE words) exported on rank 1 only, HOSTS=1 gives
# rank r the host id h(r/2), NOKEY=1 drops the job key that tempo-run made.
mr_wrap() {
    cat >"$tmp/wrap.sh" <<'EOF'
#!/bin/sh
for _kv in $RANK1_ENV; do
    [ "$TEMPO_RANK" = 1 ] && export "$_kv"
done
[ -n "$HOSTS" ] && export TEMPO_HOST_ID=h$((TEMPO_RANK / 2))
[ -n "$NOKEY" ] && unset TEMPO_AUTH_KEY
exec "$@"
EOF
}

mr_prepare() {
    _name=$1
    shift
    for _f in "$TR" "$@"; do
        if [ ! -x "$_f" ]; then
            echo "Bail out! $_f not found or not executable (build it first: make check)"
            exit 1
        fi
    done
    for _v in $(env | sed -n 's/^\(TEMPO_[A-Z_]*\)=.*/\1/p'); do
        unset "$_v"
    done
    TEMPO_TIMEOUT=60
    export TEMPO_TIMEOUT
    eval "guard=\${${_name}_TIMEOUT:-300} _keep=\${${_name}_KEEP:-0}"
    _name=$(printf '%s' "$_name" | tr 'A-Z' 'a-z')
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/$_name.XXXXXX") || exit 1
    if [ "$_keep" = 1 ]; then
        trap 'echo "# results kept in $tmp"' EXIT
    else
        trap 'rm -rf "$tmp"' EXIT
    fi
    trap 'exit 1' HUP INT TERM
}

# diag LOG: a failed point's evidence as TAP diagnostics, so that a CI log explains the failure by
# itself: the command and exit status of the launch that wrote LOG (when tests/trainer/lib.sh's
# launch wrote it), then the whole log if it is short, else its lines that name an error (at most
# 30) and its last 40.
diag() {
    if [ ! -f "$1" ]; then
        echo "#   (no log: $1 was not written)"
        return
    fi
    eval "_dcmd=\${_cmd_$(printf '%s' "$1" | cksum | cut -d' ' -f1):-}"
    [ -z "$_dcmd" ] || echo "#   $_dcmd"
    _dn=$(wc -l <"$1")
    echo "#   $1 ($_dn lines):"
    if [ "$_dn" -le 80 ]; then
        cut -c 1-300 "$1" | sed 's/^/#   | /'
    else
        grep -n -i -E 'error|fail|refus|timed? ?out|abort|signal|tempo-run:|cannot|not ok' "$1" |
            head -n 30 | cut -c 1-300 | sed 's/^/#   | /'
        echo "#   | ... (the last 40 lines:)"
        tail -n 40 "$1" | cut -c 1-300 | sed 's/^/#   | /'
    fi
}

# TAP points of a script that numbers its own (n, from 0): ok TEXT; notok TEXT [LOG...] (each
# LOG as diag shows it); check STATUS TEXT [LOG...] (ok when STATUS is 0).
n=${n:-0}
ok() {
    n=$((n + 1))
    echo "ok $n - $1"
}
notok() {
    n=$((n + 1))
    echo "not ok $n - $1"
    shift
    for f in "$@"; do
        diag "$f"
    done
}
check() {
    _c=$1
    shift
    if [ "$_c" = 0 ]; then ok "$1"; else notok "$@"; fi
}

mr_launch() {
    _label=$1 _n=$2 _dir=$3 _envs=$4
    shift 4
    _t0=$(date +%s)
    # shellcheck disable=SC2086
    env $_envs "$TR" -n "$_n" --timeout "$guard" "$@" --out "$_dir" >"$_dir/out" 2>&1 </dev/null
    _rc=$?
    _elapsed=$(($(date +%s) - _t0))
    num=$((num + 1))
    _missing=
    _files=
    _r=0
    while [ $_r -lt "$_n" ]; do
        grep -q '^END ' "$_dir/r$_r" 2>/dev/null || _missing="$_missing $_r"
        touch "$_dir/r$_r"
        _files="$_files $_dir/r$_r"
        _r=$((_r + 1))
    done
    _desc="$_label: launch of $_n ranks ($_elapsed s; ${_envs:-defaults})"
    if [ "$_rc" -eq 0 ] && [ -z "$_missing" ]; then
        echo "ok $num - $_desc"
    else
        echo "not ok $num - $_desc"
        echo "# tempo-run exited with status $_rc${_missing:+; no END line from rank(s)$_missing}"
        diag "$_dir/out"
    fi
    # shellcheck disable=SC2086
    awk -v n="$_n" -v tr="$_label" -v strict=0 -v num="$num" \
        -f "$srcdir/tests/mr/results.awk" "$_dir/groups" $_files
    num=$((num + $(wc -l <"$_dir/groups")))
}

mr_run() {
    _rprog=$1 _rgroups=$2 _rlaunches=$3
    _rnl=$(printf '%s\n' "$_rlaunches" | grep -c .)
    _rng=$(echo $_rgroups | wc -w)
    echo "1..$((_rnl * (1 + _rng) + ${4:-0}))"
    printf '%s\n' $_rgroups >"$tmp/groups"
    num=0
    printf '%s\n' "$_rlaunches" | while read -r _rlabel _rn _renvs; do
        [ -n "$_rlabel" ] || continue
        _rdir="$tmp/$_rlabel"
        mkdir "$_rdir" || exit 1
        _renvs=$(printf '%s' "$_renvs" | sed "s|TRACEDIR|$_rdir|g")
        cp "$tmp/groups" "$_rdir/groups"
        mr_launch "$_rlabel" "$_rn" "$_rdir" "$_renvs" "$_rprog"
        if command -v mr_after >/dev/null 2>&1; then
            mr_after "$_rlabel" "$_rn" "$_rdir"
        fi
    done
}

mr_mpirun() {
    mpirun=${MPIRUN:-}
    [ -n "$mpirun" ] || mpirun=$(command -v mpirun 2>/dev/null) || mpirun=""
    if [ -z "$mpirun" ]; then
        mpi_why="mpirun not found"
        return 1
    fi
    mpi_flags=""
    if "$mpirun" --version 2>&1 | grep -q "Open MPI"; then
        mpi_flags="--oversubscribe --bind-to none --mca btl self,vader"
        [ "$(id -u)" = 0 ] && mpi_flags="$mpi_flags --allow-run-as-root"
    fi
    mpi_limit=""
    command -v timeout >/dev/null 2>&1 && mpi_limit="timeout 300"
    # shellcheck disable=SC2086 # $mpi_limit and $mpi_flags are word lists
    if ! $mpi_limit "$mpirun" -n 1 $mpi_flags true >/dev/null 2>&1; then
        mpi_why="$mpirun cannot start processes here"
        return 1
    fi
}
