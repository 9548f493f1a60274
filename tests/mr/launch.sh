# tests/mr/launch.sh — sourced by the multi-rank drivers (sched.sh, bucketer.sh): one launch of a
# test program through tempo-run and its TAP points.
#
#   mr_launch LABEL N DIR ENVS PROG [ARGS...]
# runs `env ENVS tempo-run -n N PROG ARGS --out DIR` (ENVS: space-separated NAME=VALUE words, or
# empty), then prints one point for the launch (exit status 0 and an END line from every rank) and
# one per check group listed in DIR/groups (tests/mr/results.awk). Uses $TR (tempo-run), $srcdir,
# $guard (hang guard in seconds) and advances $num, the number of the last point printed.
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
        tail -n 15 "$_dir/out" | cut -c 1-300 | sed 's/^/#   /'
    fi
    # shellcheck disable=SC2086
    awk -v n="$_n" -v tr="$_label" -v strict=0 -v num="$num" \
        -f "$srcdir/tests/mr/results.awk" "$_dir/groups" $_files
    num=$((num + $(wc -l <"$_dir/groups")))
}
