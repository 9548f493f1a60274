# perf/tap.sh — sourced by perf/smoke_*.sh: TAP points. Not a test itself.
#   result STATUS DESCRIPTION [OUTPUT]
# one TAP line numbered $n + 1: ok when STATUS is 0, else not ok with OUTPUT as diagnostics
# (counted in $fails; the script ends with [ "$fails" -eq 0 ]).
n=0
fails=0
result() {
    n=$((n + 1))
    if [ "$1" = 0 ]; then
        echo "ok $n - $2"
    else
        echo "not ok $n - $2"
        printf '%s\n' "$3" | sed 's/^/# /'
        fails=$((fails + 1))
    fi
}
